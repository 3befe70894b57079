// The provider options of the Agent config, checked on the request bodies a local mock
// OpenAI-compatible server (127.0.0.1:0) receives: temperature (a number, absent = the preset's
// default, null = not sent), toolChoice, parallelToolCalls, streamUsage, sendReasoningContent (and the Moonshot
// preset's defaults), and contextBudgetTokens (history trimmed in the request, the question kept).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { loadModule, objectSchema, rejectsWithCode, text, throwsWithCode } from './helper.mjs';
import { startMock, streamChunks, textChunks, toolCallChunks } from './mock_openai.mjs';

const { Agent } = loadModule();

/** Chunks of a tool call preceded by reasoning (DeepSeek / Kimi thinking models). */
function reasoningToolCallChunks(reasoning, id, name, args) {
  return [
    { choices: [{ index: 0, delta: { role: 'assistant', reasoning_content: reasoning }, finish_reason: null }] },
    ...toolCallChunks(id, name, args),
  ];
}

/**
 * Runs one question against a fresh mock: round 1 calls `lookup` (with reasoning), round 2
 * answers. Returns the request bodies the server received.
 */
async function bodiesOf(t, config) {
  const mock = await startMock(async (i, _request, res) => {
    if (i === 0) await streamChunks(res, reasoningToolCallChunks('I should look it up', 'call_1', 'lookup', '{}'));
    else await streamChunks(res, textChunks('done'));
  });
  t.after(() => mock.close());
  const agent = new Agent({ provider: 'custom', baseUrl: mock.baseUrl, model: 'm', ...config });
  agent.registerTool({ name: 'lookup', description: 'd', parametersJson: objectSchema }, async () => text('found'));
  const out = await agent.run('s', 'question');
  assert.equal(out.status, 'completed', JSON.stringify(out));
  assert.equal(mock.requests.length, 2);
  return mock.requests.map((r) => r.body);
}

test('defaults: temperature 0.2 with tools, stream_options sent, no tool_choice, no reasoning back', async (t) => {
  const bodies = await bodiesOf(t, {});
  for (const body of bodies) {
    assert.equal(body.temperature, 0.2);
    assert.deepEqual(body.stream_options, { include_usage: true });
    assert.ok(!('tool_choice' in body));
  }
  assert.ok(!('reasoning_content' in bodies[1].messages[1]), JSON.stringify(bodies[1].messages[1]));
});

test('temperature: a number is sent, null sends none at all', async (t) => {
  for (const body of await bodiesOf(t, { temperature: 1 })) assert.equal(body.temperature, 1);
  for (const body of await bodiesOf(t, { temperature: null })) {
    assert.ok(!('temperature' in body), JSON.stringify(body));
    assert.ok(!JSON.stringify(body).includes('"temperature"'), 'no temperature, not even null');
  }
});

test('streamUsage: false leaves stream_options out of streamed requests', async (t) => {
  for (const body of await bodiesOf(t, { streamUsage: false })) {
    assert.equal(body.stream, true);
    assert.ok(!('stream_options' in body), JSON.stringify(body));
  }
});

test('toolChoice: a mode or a tool name', async (t) => {
  for (const mode of ['auto', 'none', 'required']) {
    const [first] = await bodiesOf(t, { toolChoice: mode });
    assert.equal(first.tool_choice, mode);
  }
  const [first] = await bodiesOf(t, { toolChoice: 'lookup' });
  assert.deepEqual(first.tool_choice, { type: 'function', function: { name: 'lookup' } });
});

test('parallelToolCalls: sent as given with the tools, absent when not set', async (t) => {
  for (const value of [true, false]) {
    for (const body of await bodiesOf(t, { parallelToolCalls: value })) assert.equal(body.parallel_tool_calls, value);
  }
  for (const body of await bodiesOf(t, {})) assert.ok(!('parallel_tool_calls' in body), JSON.stringify(body));
});

test('sendReasoningContent sends the reasoning of the tool call back; the Moonshot preset does by default', async (t) => {
  const [, second] = await bodiesOf(t, { sendReasoningContent: true });
  assert.equal(second.messages[1].reasoning_content, 'I should look it up');
  // Moonshot (its base URL overridden by the mock): reasoning back, and no default temperature
  // (Kimi K2.5+ refuse any but their fixed one).
  const moonshot = await bodiesOf(t, { provider: 'moonshot', model: 'kimi-k2.5' });
  assert.equal(moonshot[1].messages[1].reasoning_content, 'I should look it up');
  for (const body of moonshot) assert.ok(!('temperature' in body), JSON.stringify(body));
  const off = await bodiesOf(t, { provider: 'moonshot', model: 'kimi-k2.5', sendReasoningContent: false });
  assert.ok(!('reasoning_content' in off[1].messages[1]));
  // An explicit temperature still goes to Moonshot.
  for (const body of await bodiesOf(t, { provider: 'moonshot', model: 'kimi-k2.5', temperature: 1 })) {
    assert.equal(body.temperature, 1);
  }
});

test('contextBudgetTokens trims the history of each request and keeps the question', async (t) => {
  const mock = await startMock(async (i, _request, res) => {
    // Run 1: a plain answer. Run 2: three tool rounds, then the answer.
    if (i === 0 || i === 4) await streamChunks(res, textChunks('ok'));
    else await streamChunks(res, toolCallChunks(`call_${i}`, 'lookup', `{"n":${i}}`));
  });
  t.after(() => mock.close());
  const agent = new Agent({
    provider: 'custom', baseUrl: mock.baseUrl, model: 'm', systemPrompt: 'sys', contextBudgetTokens: 200, loopWindow: 10,
  });
  agent.registerTool({ name: 'lookup', description: 'd', parametersJson: objectSchema }, async () => text('r'.repeat(300)));
  assert.equal((await agent.run('s', 'old question '.repeat(100))).status, 'completed');
  assert.equal((await agent.run('s', 'the question')).status, 'completed');
  assert.equal(mock.requests.length, 5);
  const last = mock.requests[4].body.messages;
  assert.equal(last[0].content, 'sys');
  assert.equal(last[1].content, 'the question', JSON.stringify(last.map((m) => m.role)));
  assert.ok(!JSON.stringify(last).includes('old question'), 'the old turn was trimmed');
  // The newest tool round is whole; the state keeps everything.
  assert.equal(last.at(-1).role, 'tool');
  assert.equal(last.at(-2).tool_calls[0].id, last.at(-1).tool_call_id);
  const state = JSON.parse(await agent.stateJson('s'));
  assert.ok(state.messages.length > last.length);
  assert.ok(JSON.stringify(state.messages).includes('old question'));
});

test('config: the new provider options are checked, the message names the field', () => {
  const base = { provider: 'scripted', scriptJson: '[]' };
  for (const [field, value] of [
    ['contextBudgetTokens', 0],
    ['contextBudgetTokens', 2.5],
    ['contextBudgetTokens', -1],
    ['toolChoice', ''],
    ['toolChoice', '  '],
    ['temperature', -0.5],
    ['temperature', Number.NaN],
  ]) {
    const e = throwsWithCode(assert, () => new Agent({ ...base, [field]: value }), 'config_invalid', 'config');
    assert.match(e.message, new RegExp(field), `${field}=${value}: ${e.message}`);
  }
  assert.ok(new Agent({
    ...base, contextBudgetTokens: 4000, toolChoice: 'required', streamUsage: false, sendReasoningContent: true, temperature: null,
  }));
});

test('toolChoice naming a tool the agent does not have (while it has others): run and resume reject with config_invalid', async () => {
  const agent = new Agent({ provider: 'scripted', scriptJson: JSON.stringify([{ content: 'x' }]), toolChoice: 'ghost' });
  agent.registerTool({ name: 'real', description: 'd', parametersJson: objectSchema }, () => text('r'));
  for (const call of [() => agent.run('s', 'hi'), () => agent.resume('s')]) {
    const e = await rejectsWithCode(assert, call(), 'config_invalid', 'config');
    assert.match(e.message, /^toolChoice names the tool "ghost"/);
  }
  // dismiss asks no model: not refused for it (here: there is no such session).
  await rejectsWithCode(assert, agent.dismiss('s', 'r'), 'session_not_found');
  // Once registered, the choice is fine.
  agent.registerTool({ name: 'ghost', description: 'd', parametersJson: objectSchema }, () => text('g'));
  assert.equal((await agent.run('s', 'hi')).status, 'completed');
});

test('dismiss settles a suspended run though toolChoice names a tool the agent no longer has', async () => {
  const agent = new Agent({ provider: 'scripted', toolChoice: 'wipe',
    scriptJson: JSON.stringify([{ tool_calls: [{ id: 'c1', name: 'wipe', arguments: '{}' }] }, { content: 'never asked' }]) });
  let ran = 0;
  agent.registerTool({ name: 'wipe', description: 'd', parametersJson: objectSchema, riskLevel: 'dangerous' }, () => {
    ran++;
    return text('wiped');
  });
  assert.equal((await agent.run('s', 'wipe it')).status, 'awaiting_approval');
  assert.equal(agent.unregisterTool('wipe'), true);
  agent.registerTool({ name: 'look', description: 'd', parametersJson: objectSchema }, () => text('ok'));
  await rejectsWithCode(assert, agent.resume('s'), 'config_invalid', 'config');
  const out = await agent.dismiss('s', 'moved on');
  assert.equal(out.status, 'completed');
  assert.equal(out.finalText, undefined, 'no model answer after the dismissal');
  assert.equal(ran, 0);
  const tool = JSON.parse(await agent.stateJson('s')).messages.find((m) => m.role === 'tool');
  assert.match(tool.content, /moved on/);
});
