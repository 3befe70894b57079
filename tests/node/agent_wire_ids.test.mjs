// What the model is sent, checked on the request bodies a local mock OpenAI-compatible server
// receives: tool-call ids stay unique in a session's history when the model reuses one across
// answers (`call_0` every round, as vLLM-style servers answer), with one tool_result event per
// call_id; an empty or blank systemPrompt is not sent; an empty or blank input is refused with
// argument_invalid before anything is sent (tests/call_ids_across_answers.rs and
// tests/blank_messages.rs check the core). Two calls of one streamed answer with one id each run
// with their own arguments (tests/provider_stream_call_slots.rs).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { loadModule, objectSchema, rejectsWithCode, text } from './helper.mjs';
import { startMock, streamChunks, textChunks, toolCallChunks } from './mock_openai.mjs';

const { Agent } = loadModule();

test('a call id the model reuses in later answers is renamed in the history, the requests and the events', async (t) => {
  // Rounds: call_0, call_0, text; then the next run: call_0, text.
  const script = ['call', 'call', 'text', 'call', 'text'];
  const mock = await startMock(async (i, _request, res) => {
    if (script[i] === 'call') await streamChunks(res, toolCallChunks('call_0', 'lookup', JSON.stringify({ n: i })));
    else await streamChunks(res, textChunks('done'));
  });
  t.after(() => mock.close());
  const agent = new Agent({ provider: 'custom', baseUrl: mock.baseUrl, model: 'm' });
  const ran = [];
  agent.registerTool({ name: 'lookup', description: 'd', parametersJson: objectSchema }, async (args) => {
    ran.push(JSON.parse(args).n);
    return text(`found ${JSON.parse(args).n}`);
  });
  const results = [];
  const started = [];
  agent.onEvent((e) => {
    const event = JSON.parse(e);
    if (event.type === 'tool_result') results.push(`${event.call_id} ${event.result.contents[0].text}`);
    if (event.type === 'tool_call_started') started.push(event.id);
  });
  assert.equal((await agent.run('s', 'q1')).status, 'completed');
  assert.equal((await agent.run('s', 'q2')).status, 'completed');
  assert.deepEqual(ran, [0, 1, 3]);
  assert.deepEqual(started, ['call_0', 'call_0_0', 'call_0_0_2']);
  assert.deepEqual(results, ['call_0 found 0', 'call_0_0 found 1', 'call_0_0_2 found 3']);
  const last = mock.requests[4].body.messages;
  assert.deepEqual(
    last.filter((m) => m.role === 'assistant' && m.tool_calls).map((m) => m.tool_calls[0].id),
    ['call_0', 'call_0_0', 'call_0_0_2'],
  );
  assert.deepEqual(last.filter((m) => m.role === 'tool').map((m) => `${m.tool_call_id} ${m.content}`), [
    'call_0 found 0',
    'call_0_0 found 1',
    'call_0_0_2 found 3',
  ]);
});

test('an empty or blank systemPrompt is not sent; an empty or blank input is refused, nothing sent', async (t) => {
  const mock = await startMock(async (_i, _request, res) => streamChunks(res, textChunks('a')));
  t.after(() => mock.close());
  for (const systemPrompt of ['', '  \n', '\u3000']) {
    const agent = new Agent({ provider: 'custom', baseUrl: mock.baseUrl, model: 'm', systemPrompt });
    for (const input of ['', ' ', '\n\t', '\u3000']) {
      await rejectsWithCode(assert, agent.run('s', input), 'argument_invalid');
    }
    assert.equal(mock.requests.length, 0);
    assert.equal(await agent.stateJson('s'), null, 'no session written');
    assert.equal((await agent.run('s', 'hi')).status, 'completed');
    assert.deepEqual(mock.requests.pop().body.messages, [{ role: 'user', content: 'hi' }]);
  }
});

test('two calls of one answer with one id, repeated on every fragment, each run once with their own arguments', async (t) => {
  // The second call is announced as A_1; its later fragments still say A (and index 1).
  const fragment = (index, name, args) => ({
    choices: [{ index: 0, delta: { tool_calls: [{ index, id: 'A', type: 'function', function: { ...(name ? { name } : {}), arguments: args } }] }, finish_reason: null }],
  });
  const chunks = [
    fragment(0, 'query_order', ''),
    fragment(1, 'query_stock', ''),
    fragment(0, undefined, '{"q":"order-1"}'),
    fragment(1, undefined, '{"q":"stock-2"}'),
    { choices: [{ index: 0, delta: {}, finish_reason: 'tool_calls' }] },
  ];
  const mock = await startMock(async (i, _request, res) => streamChunks(res, i === 0 ? chunks : textChunks('done')));
  t.after(() => mock.close());
  const agent = new Agent({ provider: 'custom', baseUrl: mock.baseUrl, model: 'm' });
  const ran = [];
  for (const name of ['query_order', 'query_stock']) {
    agent.registerTool({ name, description: 'd', parametersJson: objectSchema }, async (args, ctx) => {
      ran.push(`${ctx.callId} ${name} ${args}`);
      return text(`${name} ok`);
    });
  }
  assert.equal((await agent.run('s', 'q')).status, 'completed');
  assert.deepEqual(ran.sort(), ['A query_order {"q":"order-1"}', 'A_1 query_stock {"q":"stock-2"}']);
  const messages = mock.requests[1].body.messages;
  assert.deepEqual(
    messages.find((m) => m.tool_calls).tool_calls.map((c) => `${c.id} ${c.function.name} ${c.function.arguments}`),
    ['A query_order {"q":"order-1"}', 'A_1 query_stock {"q":"stock-2"}'],
  );
  assert.deepEqual(messages.filter((m) => m.role === 'tool').map((m) => `${m.tool_call_id} ${m.content}`), [
    'A query_order ok',
    'A_1 query_stock ok',
  ]);
});
