// The Agent against a local mock OpenAI-compatible server (127.0.0.1:0, SSE): a full run with a
// streamed tool call and a streamed answer; cancellation closing the HTTP stream; and the API key
// (a sentinel) never showing up in events, outcomes, errors, state files or log lines; and a tool's
// parametersJson reaching the server in the key order it was written; a tool name streamed in
// pieces announced whole.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, readdirSync, readFileSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { loadModule, runNode, waitFor } from './helper.mjs';
import { startMock, streamChunks, textChunks, toolCallChunks } from './mock_openai.mjs';

const { Agent, CancellationHandle } = loadModule();

const lookupSchema = JSON.stringify({ type: 'object', properties: { city: { type: 'string' } }, required: ['city'] });

test('parametersJson goes to the model, and into definitionsJson, in the key order it was written', async (t) => {
  const mock = await startMock(async (_i, _request, res) => streamChunks(res, textChunks('done')));
  t.after(() => mock.close());
  const agent = new Agent({ provider: 'custom', baseUrl: mock.baseUrl, model: 'mock-model', apiKey: 'sk-test-key' });
  // Not alphabetical at any level: "reasoning" before "answer" on purpose, a nested object's keys
  // too; written with whitespace, sent compact.
  const parametersJson = `{
    "type": "object",
    "properties": {
      "reasoning": { "type": "string", "description": "why, before the answer" },
      "answer": { "type": "object", "properties": { "zone": { "type": "string" }, "amount": { "type": "integer" } } }
    },
    "required": ["reasoning", "answer"]
  }`;
  const compact = JSON.stringify(JSON.parse(parametersJson));
  agent.registerTool({ name: 'decide', description: 'decides', parametersJson }, () => ({ contents: [] }));
  const out = await agent.run('order', 'decide');
  assert.equal(out.status, 'completed', JSON.stringify(out));

  assert.equal(mock.requests.length, 1);
  const { raw, body } = mock.requests[0];
  assert.ok(raw.includes(`"parameters":${compact}`), raw);
  const sent = body.tools[0].function.parameters;
  assert.deepEqual(Object.keys(sent), ['type', 'properties', 'required']);
  assert.deepEqual(Object.keys(sent.properties), ['reasoning', 'answer']);
  assert.deepEqual(Object.keys(sent.properties.answer.properties), ['zone', 'amount']);
  assert.ok(agent.definitionsJson().includes(`"parameters":${compact}`), agent.definitionsJson());
});

test('a full run against the mock server: streamed tool-call deltas, the tool result, a streamed answer', async (t) => {
  const args = '{"city":"Hangzhou, 西湖区"}';
  const mock = await startMock(async (i, _request, res) => {
    if (i === 0) await streamChunks(res, toolCallChunks('call_1', 'lookup', args, 5));
    else await streamChunks(res, textChunks('It is sunny in Hangzhou today.'));
  });
  t.after(() => mock.close());
  const agent = new Agent({ provider: 'custom', baseUrl: mock.baseUrl, model: 'mock-model', apiKey: 'sk-test-key' });
  const calls = [];
  agent.registerTool({ name: 'lookup', description: 'weather by city', parametersJson: lookupSchema }, async (a) => {
    calls.push(JSON.parse(a));
    return { contents: [{ type: 'text', text: 'sunny, 24°C' }] };
  });
  const events = [];
  agent.onEvent((e) => events.push(JSON.parse(e)));

  const out = await agent.run('w', 'weather in Hangzhou?');
  assert.equal(out.status, 'completed', JSON.stringify(out));
  assert.equal(out.finalText, 'It is sunny in Hangzhou today.');
  assert.deepEqual(JSON.parse(out.usageJson), { prompt_tokens: 60, completion_tokens: 15, total_tokens: 75 });
  assert.deepEqual(calls, [{ city: 'Hangzhou, 西湖区' }]);

  // What the server received.
  assert.equal(mock.requests.length, 2);
  for (const r of mock.requests) {
    assert.equal(r.url, '/v1/chat/completions');
    assert.equal(r.authorization, 'Bearer sk-test-key');
    assert.equal(r.body.model, 'mock-model');
    assert.equal(r.body.stream, true);
    assert.deepEqual(r.body.tools.map((tool) => tool.function.name), ['lookup']);
  }
  const second = mock.requests[1].body.messages;
  assert.deepEqual(second.map((m) => m.role), ['user', 'assistant', 'tool']);
  assert.equal(second[1].tool_calls[0].id, 'call_1');
  assert.equal(second[1].tool_calls[0].function.arguments, args);
  assert.equal(second[2].tool_call_id, 'call_1');
  assert.equal(second[2].content, 'sunny, 24°C');

  // Events: the call streamed in deltas that add up to the arguments, in order.
  const types = events.map((e) => e.type);
  const started = types.indexOf('tool_call_started');
  const finished = types.indexOf('tool_call_finished');
  assert.ok(started >= 0 && finished > started, types.join());
  const deltas = events.filter((e) => e.type === 'tool_call_arguments_delta');
  assert.ok(deltas.length >= 5, `${deltas.length} argument deltas`);
  assert.equal(deltas.map((e) => e.delta).join(''), args);
  assert.ok(types.lastIndexOf('tool_call_arguments_delta') < finished);
  assert.ok(types.indexOf('tool_result') > finished);
  const text = events.filter((e) => e.type === 'text_delta');
  assert.ok(text.length >= 6);
  assert.ok(types.indexOf('text_delta') > types.indexOf('tool_result'));
  assert.equal(text.map((e) => e.delta).join(''), 'It is sunny in Hangzhou today.');
  assert.deepEqual([types[0], types.at(-1)], ['run_started', 'run_finished']);
});

test('a tool name streamed in pieces is announced whole: tool_call_started names the tool that runs', async (t) => {
  const args = '{"city":"Paris"}';
  const mock = await startMock(async (i, _request, res) => {
    if (i > 0) return streamChunks(res, textChunks('Sunny.'));
    // As a gateway streams it: `get_` with the id, then `weather` alone, then the arguments.
    const chunks = toolCallChunks('call_1', 'get_', args, 2);
    chunks.splice(1, 0, { choices: [{ index: 0, delta: { tool_calls: [{ index: 0, function: { name: 'weather' } }] }, finish_reason: null }] });
    return streamChunks(res, chunks);
  });
  t.after(() => mock.close());
  const agent = new Agent({ provider: 'custom', baseUrl: mock.baseUrl, model: 'mock-model', apiKey: 'sk-test-key' });
  let ran = 0;
  agent.registerTool({ name: 'get_weather', description: 'weather', parametersJson: lookupSchema }, () => {
    ran++;
    return { contents: [{ type: 'text', text: 'sunny' }] };
  });
  const events = [];
  agent.onEvent((e) => events.push(JSON.parse(e)));
  const out = await agent.run('pieces', 'weather in Paris?');
  assert.equal(out.status, 'completed', JSON.stringify(out));
  assert.equal(ran, 1);
  const calls = events.filter((e) => e.type.startsWith('tool_call_'));
  assert.deepEqual(calls.map((e) => e.type), ['tool_call_started', 'tool_call_arguments_delta', 'tool_call_arguments_delta', 'tool_call_finished']);
  assert.equal(calls[0].name, 'get_weather');
  assert.equal(calls.at(-1).call.name, 'get_weather');
  assert.equal(calls.slice(1, -1).map((e) => e.delta).join(''), args);
});

test('cancelling the handle mid-stream ends the run as cancelled and closes the HTTP stream', async (t) => {
  const mock = await startMock(async (_i, _request, res) => {
    // A few words, then the stream hangs open.
    await streamChunks(res, textChunks('one two three').slice(0, 3), { hang: true });
  });
  t.after(() => mock.close());
  const agent = new Agent({ provider: 'custom', baseUrl: mock.baseUrl, model: 'm' });
  const handle = new CancellationHandle();
  const events = [];
  agent.onEvent((e) => {
    const event = JSON.parse(e);
    events.push(event);
    if (event.type === 'text_delta') handle.cancel('user left');
  });
  const started = Date.now();
  const out = await agent.run('c', 'talk', handle);
  assert.equal(out.status, 'cancelled');
  assert.ok(Date.now() - started < 5000);
  assert.ok(events.some((e) => e.type === 'text_delta'));
  assert.equal(events.at(-1).type, 'run_finished');
  assert.equal(events.at(-1).status, 'cancelled');
  await waitFor(() => mock.state.closedEarly === 1, 'the server to see the stream closed', 3000);
  const state = JSON.parse(await agent.stateJson('c'));
  assert.equal(state.status, 'cancelled');
});

// The child: a full run with the sentinel key (the first request fails with a 500 whose body
// echoes the key, so a retry is logged at info level), then a run against a 401 that echoes the
// key; a hook's failure puts the key in a log line; it prints everything the app can see.
const child = String.raw`
const m = { exports: {} };
process.dlopen(m, process.env.ARKAGENT_SO);
const { Agent } = m.exports;
const [baseUrl, stateDir, key] = process.argv.slice(1);
const seen = { events: [], outcomes: [], errors: [], states: [] };
const agent = new Agent({ provider: 'custom', baseUrl, model: 'mock', apiKey: key, stateDir });
// A careless tool: its domain error (kept with its code) carries the key in its message.
agent.registerTool({ name: 'lookup', description: 'd', parametersJson: '{"type":"object"}' },
  async (args, ctx) => { seen.events.push({ executorContext: Object.keys(ctx), args });
    throw Object.assign(new Error('lookup refused for ' + key), { code: 'lookup_unavailable' }); });
// A hook with all nine methods records every value it is given (the request, the response, the state...).
const record = (name) => (...args) => { seen.events.push({ hook: [name, ...args] }); return undefined; };
agent.addHook(Object.fromEntries(['onRunStart', 'beforeModelCall', 'afterModelResponse', 'beforeToolCall', 'afterToolCall',
  'onApprovalRequired', 'beforePersistState', 'onRunEnd', 'onError'].map((m) => [m, record(m)])));
// A careless app: the failure of this notification is logged with the key in its text.
agent.addHook({ onRunStart: () => { throw new Error('leaky app ' + key); } });
agent.onEvent((e) => seen.events.push(e));
(async () => {
  seen.outcomes.push(await agent.run('good', 'hi'));
  seen.outcomes.push(await agent.run('bad', 'hi'));
  try { await agent.run('../x', 'hi'); } catch (e) { seen.errors.push({ code: e.code, message: e.message, stack: e.stack }); }
  try { new Agent({ provider: 'custom', baseUrl: 'http://example.com', model: 'm', apiKey: key }); } catch (e) { seen.errors.push({ code: e.code, message: e.message }); }
  for (const s of ['good', 'bad']) seen.states.push(await agent.stateJson(s));
  console.log(JSON.stringify(seen));
})();
`;

function filesUnder(dir) {
  return readdirSync(dir).flatMap((name) => {
    const path = join(dir, name);
    return statSync(path).isDirectory() ? filesUnder(path) : [path];
  });
}

test('the API key never appears in events, outcomes, errors, state files or logs', async (t) => {
  const key = 'sk-SENTINEL-7f3a9c2e41b8d605';
  let good = 0;
  const mock = await startMock(async (_i, request, res) => {
    const echo = JSON.stringify({ error: { message: `invalid request with ${request.authorization}`, type: 'invalid_request_error' } });
    if (request.body.messages[0].content === 'hi' && request.body.messages.length === 1 && good === 0) {
      good++;
      res.writeHead(500, { 'content-type': 'application/json' });
      return res.end(echo);
    }
    if (request.body.messages.at(-1).role === 'tool') return streamChunks(res, textChunks('all good'));
    if (good === 1) {
      good++;
      return streamChunks(res, toolCallChunks('k1', 'lookup', '{"q":"x"}'));
    }
    res.writeHead(401, { 'content-type': 'application/json' });
    return res.end(echo);
  });
  t.after(() => mock.close());
  const dir = mkdtempSync(join(tmpdir(), 'arkagent-key-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));

  const { code, out, err } = await runNode(['-e', child, mock.baseUrl, dir, key], { env: { ARKAGENT_LOG: 'trace' } });
  assert.equal(code, 0, `exit ${code}; stderr: ${err}`);

  // The key was used: every request carried it, and the server echoed it back in errors.
  assert.ok(mock.requests.length >= 4, `${mock.requests.length} requests`);
  for (const r of mock.requests) {
    assert.equal(r.authorization, `Bearer ${key}`);
    assert.ok(!r.raw.includes(key), 'the key is never in a request body');
  }
  const seen = JSON.parse(out);
  assert.equal(seen.outcomes[0].status, 'completed', JSON.stringify(seen.outcomes[0]));
  assert.equal(seen.outcomes[1].status, 'failed');
  assert.equal(seen.outcomes[1].errorCode, 'provider_auth');
  assert.match(seen.outcomes[1].errorMessage, /invalid request with Bearer/);
  assert.ok(seen.events.length > 10);
  // The hook saw every value the runtime hands hooks here (all but onApprovalRequired: no dangerous tool).
  const hookCalls = new Set(seen.events.filter((e) => e.hook).map((e) => e.hook[0]));
  assert.deepEqual([...hookCalls].sort(), ['afterModelResponse', 'afterToolCall', 'beforeModelCall', 'beforePersistState',
    'beforeToolCall', 'onError', 'onRunEnd', 'onRunStart']);
  assert.deepEqual(seen.errors.map((e) => e.code), ['session_id_invalid', 'insecure_url']);
  // The logs were written (the retry after the 500 at info level) and are redacted.
  assert.match(err, /retry/);
  // A line that carried the key (the careless hook's failure) was written with the key redacted.
  assert.match(err, /leaky app \[REDACTED\]/);

  // The executor's domain error reached the state and the events with its code, the key redacted.
  const toolMessage = JSON.parse(seen.states[0]).messages.find((m) => m.role === 'tool');
  assert.equal(toolMessage.content, 'error [lookup_unavailable]: lookup refused for [REDACTED]');
  const resultEvent = seen.events.filter((e) => typeof e === 'string').map((e) => JSON.parse(e))
    .find((e) => e.type === 'tool_result');
  assert.equal(resultEvent.result.contents[0].text, toolMessage.content);

  assert.ok(!out.includes(key), 'the key is in what the app saw');
  assert.ok(!err.includes(key), 'the key is in the log');
  const files = filesUnder(dir);
  assert.ok(files.length >= 2, `state files: ${files}`);
  for (const file of files) {
    assert.ok(!readFileSync(file).includes(Buffer.from(key)), `the key is in ${file}`);
  }
  // Guard against a vacuous check: the same search finds a string that is in the state.
  assert.ok(files.some((f) => readFileSync(f).includes(Buffer.from('all good'))));
});

test('an API key in what a failing hook or policy threw is redacted from results and the pending batch', async (t) => {
  const key = 'sk-HOOKLEAK-5e1d2c3b';
  const mock = await startMock(async (_i, request, res) => {
    if (request.body.messages.at(-1).role === 'tool') return streamChunks(res, textChunks('ok'));
    return streamChunks(res, toolCallChunks('k1', 'lookup', '{"city":"Paris"}'));
  });
  t.after(() => mock.close());
  const open = () => {
    const agent = new Agent({ provider: 'custom', baseUrl: mock.baseUrl, model: 'm', apiKey: key });
    const ran = [];
    agent.registerTool({ name: 'lookup', description: 'weather', parametersJson: lookupSchema }, (a) => {
      ran.push(a);
      return { contents: [{ type: 'text', text: 'sunny' }] };
    });
    return { agent, ran };
  };

  const hooked = open();
  hooked.agent.addHook({ beforeToolCall: () => { throw new Error(`refused with ${key}`); } });
  assert.equal((await hooked.agent.run('s', 'weather?')).status, 'completed');
  assert.deepEqual(hooked.ran, []);
  const state = await hooked.agent.stateJson('s');
  assert.match(state, /hook_failed.*refused with \[REDACTED\]/);
  assert.ok(!state.includes(key));

  const policed = open();
  policed.agent.setApprovalPolicy(() => { throw new Error(`policy saw ${key}`); });
  const out = await policed.agent.run('s', 'weather?');
  assert.equal(out.status, 'awaiting_approval');
  assert.match(JSON.parse(out.batchJson).items[0].reason, /policy saw \[REDACTED\]/);
  assert.ok(!(await policed.agent.stateJson('s')).includes(key));
});

test('an API key in what an executor returned, or an after-hook rewrote or injected, is redacted', async (t) => {
  const key = 'sk-RESULTLEAK-7a8b9c0d';
  const mock = await startMock(async (_i, request, res) => {
    if (request.body.messages.at(-1).role === 'tool' || request.body.messages.at(-1).role === 'user' &&
      request.body.messages.some((m) => m.role === 'tool')) return streamChunks(res, textChunks('ok'));
    return streamChunks(res, toolCallChunks('k1', 'lookup', '{"city":"Paris"}'));
  });
  t.after(() => mock.close());
  const run = async (hook) => {
    const agent = new Agent({ provider: 'custom', baseUrl: mock.baseUrl, model: 'm', apiKey: key });
    agent.registerTool({ name: 'lookup', description: 'weather', parametersJson: lookupSchema }, () => ({
      contents: [{ type: 'text', text: `config: ${key}` }, { type: 'json', json: JSON.stringify({ deep: [{ k: key }] }) }],
      metadataJson: JSON.stringify({ token: key }),
    }));
    if (hook) agent.addHook(hook);
    const events = [];
    agent.onEvent((e) => events.push(e));
    assert.equal((await agent.run('s', 'weather?')).status, 'completed');
    const state = await agent.stateJson('s');
    const sent = mock.requests.map((r) => r.raw).join('\n');
    for (const [what, text] of [['state', state], ['events', events.join('\n')], ['requests', sent]]) {
      assert.ok(!text.includes(key), `the key is in the ${what}`);
    }
    return { state, events };
  };

  const plain = await run(null);
  assert.match(plain.state, /config: \[REDACTED\]/);
  assert.match(plain.state, /\{\\"k\\":\\"\[REDACTED\]\\"\}|"k":"\[REDACTED\]"/);
  const result = plain.events.map((e) => JSON.parse(e)).find((e) => e.type === 'tool_result').result;
  assert.deepEqual(result.metadata, { token: '[REDACTED]' });

  const hooked = await run({
    afterToolCall: () => ({
      action: 'proceed',
      resultJson: JSON.stringify({ contents: [{ type: 'text', text: `rewritten ${key}` }] }),
      injectJson: JSON.stringify([{ role: 'user', content: `remember ${key}` }]),
    }),
  });
  assert.match(hooked.state, /rewritten \[REDACTED\]/);
  assert.match(hooked.state, /remember \[REDACTED\]/);
});

test('an API key a before-hook put into a call it rewrote, or a reason it gave, is redacted', async (t) => {
  const key = 'sk-ARGSLEAK-1f2e3d4c';
  const mock = await startMock(async (_i, request, res) => {
    if (request.body.messages.at(-1).role === 'tool') return streamChunks(res, textChunks('ok'));
    return streamChunks(res, toolCallChunks('k1', 'lookup', '{"city":"Paris"}'));
  });
  t.after(() => mock.close());
  const open = (hook, riskLevel) => {
    const agent = new Agent({ provider: 'custom', baseUrl: mock.baseUrl, model: 'm', apiKey: key });
    agent.registerTool({ name: 'lookup', description: 'weather', parametersJson: lookupSchema, riskLevel },
      () => ({ contents: [{ type: 'text', text: 'sunny' }] }));
    agent.addHook(hook);
    return agent;
  };
  const rewriting = open({ beforeToolCall: () => ({ action: 'proceed', argumentsJson: JSON.stringify({ city: key }) }) }, 'dangerous');
  const out = await rewriting.run('s', 'weather?');
  assert.equal(out.status, 'awaiting_approval');
  assert.equal(JSON.parse(JSON.parse(out.batchJson).items[0].tool_call.arguments).city, '[REDACTED]');
  assert.ok(!(await rewriting.stateJson('s')).includes(key));

  const denying = open({ beforeToolCall: () => ({ action: 'deny', reason: `not with ${key}` }) }, 'safe');
  assert.equal((await denying.run('s', 'weather?')).status, 'completed');
  const state = await denying.stateJson('s');
  assert.match(state, /not with \[REDACTED\]/);
  assert.ok(!state.includes(key));
});

test('an API key used as a JSON object key, in a result an executor returned or a hook gave, is redacted', async (t) => {
  const key = 'sk-KEYSLEAK-3c4d5e6f';
  const mock = await startMock(async (_i, request, res) => {
    if (request.body.messages.at(-1).role === 'tool') return streamChunks(res, textChunks('ok'));
    return streamChunks(res, toolCallChunks('k1', 'lookup', '{"city":"Paris"}'));
  });
  t.after(() => mock.close());
  // The key as a key: at the top, nested in an array, inside a longer key, and where its redacted
  // name is taken already (both entries are kept, the renamed one as `[REDACTED] (2)`).
  const value = { [key]: { quota: 5 }, '[REDACTED]': 'mine', nested: [{ [`per ${key}`]: 1 }] };
  const redacted = { '[REDACTED]': 'mine', '[REDACTED] (2)': { quota: 5 }, nested: [{ 'per [REDACTED]': 1 }] };
  const run = async (hook) => {
    const agent = new Agent({ provider: 'custom', baseUrl: mock.baseUrl, model: 'm', apiKey: key });
    agent.registerTool({ name: 'lookup', description: 'weather', parametersJson: lookupSchema }, () => ({
      contents: [{ type: 'json', json: JSON.stringify(value) }],
      metadataJson: JSON.stringify({ [key]: 1 }),
    }));
    if (hook) agent.addHook(hook);
    const events = [];
    agent.onEvent((e) => events.push(e));
    const sentBefore = mock.requests.length;
    assert.equal((await agent.run('s', 'weather?')).status, 'completed');
    const state = await agent.stateJson('s');
    const sent = mock.requests.slice(sentBefore).map((r) => r.raw).join('\n');
    for (const [what, text] of [['state', state], ['events', events.join('\n')], ['requests', sent]]) {
      assert.ok(!text.includes(key), `the key is in the ${what}`);
    }
    return events.map((e) => JSON.parse(e)).find((e) => e.type === 'tool_result').result;
  };

  assert.deepEqual(await run(null), {
    contents: [{ type: 'json', value: redacted }], is_error: false, stop: false, metadata: { '[REDACTED]': 1 },
  });
  // A hook's result goes through the same redaction, in either spelling.
  const given = JSON.stringify({ contents: [{ type: 'json', value }], is_error: true, metadata: { [key]: 2 } });
  const expected = { contents: [{ type: 'json', value: redacted }], is_error: true, stop: false, metadata: { '[REDACTED]': 2 } };
  assert.deepEqual(await run({ beforeToolCall: () => ({ action: 'deny', resultJson: given }) }), expected);
  const executorSpelled = JSON.stringify({
    contents: [{ type: 'json', json: JSON.stringify(value) }], isError: true, metadataJson: JSON.stringify({ [key]: 2 }),
  });
  assert.deepEqual(await run({ afterToolCall: () => ({ action: 'proceed', resultJson: executorSpelled }) }), expected);
});
