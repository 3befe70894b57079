// The Agent class with the scripted model: a full run (tool call -> result -> answer) with the
// exact event order, config validation, coded errors, the listener's containment, tools, state.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { loadModule, objectSchema, rejectsWithCode, text, throwsWithCode } from './helper.mjs';

const { Agent } = loadModule();

/** A scripted agent replaying these answers. */
function scripted(answers, extra = {}) {
  return new Agent({ provider: 'scripted', scriptJson: JSON.stringify(answers), ...extra });
}

/** A run of identical delta events collapses to one entry (their number depends on chunking). */
function collapse(types) {
  return types.filter((t, i) => !(t.endsWith('_delta') && types[i - 1] === t));
}

test('a scripted run: tool call -> result -> answer, events in order, all delivered before run() resolves', async () => {
  const agent = scripted([
    { tool_calls: [{ id: 'c1', name: 'query_order', arguments: '{"order_id":"20261010"}' }] },
    { content: 'Your order has shipped.', usage: { prompt_tokens: 7, completion_tokens: 3, total_tokens: 10 } },
  ]);
  const seen = [];
  agent.registerTool(
    { name: 'query_order', description: 'order status', parametersJson: JSON.stringify({ type: 'object', properties: { order_id: { type: 'string' } }, required: ['order_id'] }) },
    async (args, ctx) => {
      seen.push({ args: JSON.parse(args), sessionId: ctx.sessionId, callId: ctx.callId });
      return { contents: [{ type: 'json', json: '{"status":"shipped"}' }] };
    },
  );
  const events = [];
  agent.onEvent((e) => events.push(JSON.parse(e)));
  const out = await agent.run('s1', 'where is my order?');
  // Every event of the run was delivered before the Promise resolved.
  assert.equal(events.at(-1)?.type, 'run_finished');
  assert.equal(out.status, 'completed');
  assert.equal(out.finalText, 'Your order has shipped.');
  assert.equal(out.errorCode, undefined);
  assert.deepEqual(JSON.parse(out.usageJson), { prompt_tokens: 7, completion_tokens: 3, total_tokens: 10 });
  assert.deepEqual(seen, [{ args: { order_id: '20261010' }, sessionId: 's1', callId: 'c1' }]);

  assert.deepEqual(collapse(events.map((e) => e.type)), [
    'run_started',
    'state_persisted', // the user message
    'tool_call_started',
    'tool_call_arguments_delta',
    'tool_call_finished',
    'state_persisted', // the assistant message with the call, and the call journaled as started
    'tool_result',
    'state_persisted', // the call finished, and the batch's results
    'text_delta',
    'state_persisted', // the answer and the terminal status
    'run_finished',
  ]);
  const started = events.find((e) => e.type === 'run_started');
  assert.equal(started.session_id, 's1');
  assert.equal(started.resumed, false);
  const args = events.filter((e) => e.type === 'tool_call_arguments_delta').map((e) => e.delta).join('');
  assert.equal(args, '{"order_id":"20261010"}');
  assert.deepEqual(events.find((e) => e.type === 'tool_call_finished').call, { id: 'c1', name: 'query_order', arguments: args });
  const result = events.find((e) => e.type === 'tool_result');
  assert.equal(result.call_id, 'c1');
  assert.deepEqual(result.result.contents, [{ type: 'json', value: { status: 'shipped' } }]);
  const answer = events.filter((e) => e.type === 'text_delta').map((e) => e.delta).join('');
  assert.equal(answer, 'Your order has shipped.');
  assert.equal(events.at(-1).status, 'completed');
  assert.equal(events.at(-1).final_text, 'Your order has shipped.');

  const state = JSON.parse(await agent.stateJson('s1'));
  assert.equal(state.status, 'completed');
  assert.deepEqual(state.messages.map((m) => m.role), ['user', 'assistant', 'tool', 'assistant']);
  assert.equal(state.messages[2].tool_call_id, 'c1');
  assert.equal(await agent.pendingApprovalJson('s1'), null);
  assert.equal(await agent.stateJson('nobody'), null);
});

test('many events keep their order and all arrive before run() resolves: 16,000 characters in 4,000 deltas', async () => {
  // More events than a thread-safe function hands to the JS thread in one go (1,000 in Node), so
  // without the binding waiting for the last delivery the run's Promise could resolve first.
  let long = '';
  for (let i = 0; long.length < 16000; i++) long += `${i},`;
  long = long.slice(0, 16000);
  for (let k = 0; k < 3; k++) {
    const agent = scripted([{ content: long }]);
    const deltas = [];
    let last;
    agent.onEvent((e) => {
      const event = JSON.parse(e);
      last = event.type;
      if (event.type === 'text_delta') deltas.push(event.delta);
    });
    const out = await agent.run('s', 'count');
    assert.equal(last, 'run_finished', 'every event was delivered before run() resolved');
    assert.equal(out.finalText, long);
    assert.equal(deltas.length, 4000);
    assert.equal(deltas.join(''), long);
  }
});

test('a throwing listener is contained: the run completes and later events still arrive', async () => {
  const agent = scripted([{ content: 'fine' }]);
  const types = [];
  agent.onEvent((e) => {
    types.push(JSON.parse(e).type);
    if (types.length === 1) throw new Error('listener bug');
    if (types.length === 2) throw 'a primitive';
  });
  const out = await agent.run('s', 'hi');
  assert.equal(out.status, 'completed');
  assert.equal(types[0], 'run_started');
  assert.equal(types.at(-1), 'run_finished');
});

test('an async listener that rejects is contained as a throw is: no unhandled rejection', async (t) => {
  // Node ends the process on an unhandled rejection; the binding handles the listener's Promise.
  const unhandled = [];
  const record = (reason) => unhandled.push(String(reason));
  process.on('unhandledRejection', record);
  t.after(() => process.off('unhandledRejection', record));
  const agent = scripted([{ content: 'fine' }]);
  const types = [];
  agent.onEvent(async (e) => {
    const { type } = JSON.parse(e);
    types.push(type);
    if (type === 'run_started' || type === 'run_finished') throw new Error(`could not save ${type}`);
  });
  const out = await agent.run('s', 'hi');
  assert.equal(out.status, 'completed');
  assert.equal(types.at(-1), 'run_finished');
  await new Promise((resolve) => setTimeout(resolve, 50));
  assert.deepEqual(unhandled, []);
});

test('onEvent replaces the listener; no listener is fine', async () => {
  const agent = scripted([{ content: 'a' }, { content: 'b' }]);
  assert.equal((await agent.run('s', 'no listener')).finalText, 'a');
  const first = [];
  const second = [];
  agent.onEvent((e) => first.push(e));
  agent.onEvent((e) => second.push(e));
  await agent.run('s', 'again');
  assert.equal(first.length, 0);
  assert.ok(second.length >= 3);
});

test('onEvent(null) and onEvent(undefined) remove the listener; another value is argument_invalid', async () => {
  const agent = scripted([{ content: 'a' }, { content: 'b' }, { content: 'c' }]);
  const heard = [];
  agent.onEvent((e) => heard.push(e));
  await agent.run('s', 'one');
  const once = heard.length;
  assert.ok(once >= 3);
  agent.onEvent(null);
  assert.equal((await agent.run('s', 'two')).finalText, 'b');
  assert.equal(heard.length, once);
  agent.onEvent((e) => heard.push(e));
  agent.onEvent(undefined);
  await agent.run('s', 'three');
  assert.equal(heard.length, once);
  for (const bad of [5, 'listener', {}]) {
    throwsWithCode(assert, () => agent.onEvent(bad), 'argument_invalid', 'config');
  }
});

test('tools: register, names in order, unregister; registration errors are coded', () => {
  const agent = scripted([]);
  agent.registerTool({ name: 'b', description: 'd', parametersJson: objectSchema }, () => text('b'));
  agent.registerTool({ name: 'a', description: 'd', parametersJson: objectSchema }, () => text('a'));
  assert.deepEqual(agent.toolNames(), ['b', 'a']);
  throwsWithCode(assert, () => agent.registerTool({ name: 'a', description: 'd', parametersJson: objectSchema }, () => text('a')), 'tool_name_duplicate', 'config');
  throwsWithCode(assert, () => agent.registerTool({ name: ' ', description: 'd', parametersJson: objectSchema }, () => text('a')), 'tool_name_empty', 'config');
  throwsWithCode(assert, () => agent.registerTool({ name: 'x', description: 'd', parametersJson: objectSchema, riskLevel: 'scary' }, () => text('a')), 'config_invalid', 'config');
  assert.equal(agent.unregisterTool('b'), true);
  assert.equal(agent.unregisterTool('b'), false);
  assert.deepEqual(agent.toolNames(), ['a']);
});

test('config: numbers must be whole and positive, the message names the field', () => {
  const base = { provider: 'scripted', scriptJson: '[]' };
  for (const [field, value] of [
    ['maxRounds', 0],
    ['maxRounds', 1.5],
    ['maxParallelTools', -1],
    ['toolTimeoutMs', 0],
    ['toolTimeoutMs', Number.NaN],
    ['maxTokens', 2.5],
    ['loopWindow', 0],
    ['temperature', 3],
  ]) {
    const e = throwsWithCode(assert, () => new Agent({ ...base, [field]: value }), 'config_invalid', 'config');
    assert.match(e.message, new RegExp(field), `${field}=${value}: ${e.message}`);
  }
  assert.ok(new Agent({ ...base, maxRounds: 3, maxParallelTools: 2, toolTimeoutMs: 1000, maxTokens: 100, loopWindow: 4, temperature: 0 }));
});

test('config: provider, model, base URL, script and state dir are checked', () => {
  const cases = [
    [{ provider: 'nope', model: 'm' }, 'config_invalid', /provider/],
    [{ provider: 'scripted' }, 'config_invalid', /scriptJson/],
    [{ provider: 'scripted', scriptJson: '{"not":"an array"}' }, 'config_invalid', /scriptJson/],
    [{ provider: 'openai', apiKey: 'k' }, 'config_invalid', /model/],
    // A preset's own cloud endpoint refuses every request without a key: refused here, not at the
    // first request.
    [{ provider: 'GLM', model: 'glm-4' }, 'config_invalid', /^apiKey: required for the zhipu preset/],
    [{ provider: 'deepseek', model: 'deepseek-chat', apiKey: ' ' }, 'config_invalid', /apiKey: required/],
    // Named as the config names the field, not as the core does (base_url).
    [{ provider: 'custom', model: 'm' }, 'config_invalid', /^baseUrl: empty/],
    [{ provider: 'custom', model: 'm', baseUrl: 'nope' }, 'config_invalid', /^baseUrl: not a URL/],
    [{ provider: 'custom', model: 'm', baseUrl: 'http://example.com/v1' }, 'insecure_url', /http/],
    [{ provider: 'scripted', scriptJson: '[]', stateDir: '' }, 'config_invalid', /stateDir/],
  ];
  for (const [config, code, pattern] of cases) {
    const e = throwsWithCode(assert, () => new Agent(config), code, 'config');
    assert.match(e.message, pattern, JSON.stringify(config));
  }
  assert.ok(new Agent({ provider: 'custom', model: 'm', baseUrl: 'http://example.com/v1', allowInsecureHttp: true }));
  assert.ok(new Agent({ provider: 'deepseek', model: 'deepseek-chat', apiKey: 'k' }));
  assert.ok(new Agent({ provider: 'GLM', model: 'glm-4', apiKey: 'k' }));
  // A base URL of its own (a local server, a gateway) may go without a key.
  assert.ok(new Agent({ provider: 'GLM', model: 'glm-4', baseUrl: 'http://127.0.0.1:9/v1' }));
});

test('enableDelegation registers delegate_task; a worker answers through it', async () => {
  const agent = scripted(
    [
      { tool_calls: [{ id: 'd1', name: 'delegate_task', arguments: '{"task":"sum 2 and 3"}' }] },
      { content: '5' }, // the worker's answer
      { content: 'The worker says 5.' },
    ],
    { enableDelegation: true },
  );
  assert.deepEqual(agent.toolNames(), ['delegate_task']);
  const out = await agent.run('p', 'delegate it');
  assert.equal(out.status, 'completed');
  assert.equal(out.finalText, 'The worker says 5.');
  const tool = JSON.parse(await agent.stateJson('p')).messages.find((m) => m.role === 'tool');
  assert.match(tool.content, /5/);
  assert.deepEqual(scripted([]).toolNames(), []);
});

test('delegate_task is the delegation\'s name: an app\'s own tool of that name is tool_name_reserved, delegation on or off', () => {
  for (const enableDelegation of [false, true]) {
    const agent = scripted([], { enableDelegation });
    const e = throwsWithCode(assert, () => agent.registerTool({ name: 'delegate_task', description: 'mine', parametersJson: objectSchema }, () => text('mine')), 'tool_name_reserved', 'config');
    assert.match(e.message, /enableDelegation/);
    assert.deepEqual(agent.toolNames(), enableDelegation ? ['delegate_task'] : []);
  }
});

test('with delegation on, delegate_task cannot be unregistered: nothing could register it again', () => {
  const agent = scripted([], { enableDelegation: true });
  const e = throwsWithCode(assert, () => agent.unregisterTool('delegate_task'), 'tool_name_reserved', 'config');
  assert.match(e.message, /cannot be unregistered/);
  assert.deepEqual(agent.toolNames(), ['delegate_task']);
  assert.equal(scripted([]).unregisterTool('delegate_task'), false, 'without delegation there is none');
});

test('a worker\'s events reach the listener as worker_event, wrapped, before the delegating call\'s result', async () => {
  const agent = scripted(
    [
      { tool_calls: [{ id: 'd1', name: 'delegate_task', arguments: '{"task":"look up 20261010"}' }] },
      { tool_calls: [{ id: 'w1', name: 'query_order', arguments: '{"order_id":"20261010"}' }] }, // the worker
      { content: 'It shipped.' }, // the worker's answer
      { content: 'The worker says it shipped.' },
    ],
    { enableDelegation: true },
  );
  agent.registerTool({ name: 'query_order', description: 'order status', parametersJson: objectSchema },
    async () => ({ contents: [{ type: 'json', json: '{"status":"shipped"}' }] }));
  const events = [];
  agent.onEvent((e) => events.push(JSON.parse(e)));
  const out = await agent.run('p', 'where is 20261010?');
  assert.equal(out.status, 'completed');
  const wrapped = events.filter((e) => e.type === 'worker_event');
  assert.ok(wrapped.length > 0, 'the worker was heard');
  const worker = wrapped[0].session_id;
  assert.ok(wrapped.every((e) => e.call_id === 'd1' && e.session_id === worker));
  assert.notEqual(worker, 'p');
  const inner = wrapped.map((e) => e.event);
  assert.deepEqual([inner[0].type, inner[0].session_id, inner[0].resumed], ['run_started', worker, false]);
  const result = inner.find((e) => e.type === 'tool_result');
  assert.deepEqual([result.call_id, result.name, result.result.contents], ['w1', 'query_order',
    [{ type: 'json', value: { status: 'shipped' } }]]);
  assert.deepEqual([inner.at(-1).type, inner.at(-1).status, inner.at(-1).final_text],
    ['run_finished', 'completed', 'It shipped.']);
  // One block, right before the parent's result of d1.
  const first = events.indexOf(wrapped[0]);
  const last = events.indexOf(wrapped.at(-1));
  assert.equal(last - first + 1, wrapped.length);
  assert.deepEqual([events[last + 1].type, events[last + 1].call_id], ['tool_result', 'd1']);
  assert.equal(events.at(-1).type, 'run_finished');
  // The session it names is the worker's, with the worker's own history.
  const state = JSON.parse(await agent.stateJson(worker));
  assert.deepEqual([state.status, state.messages[0].content], ['completed', 'look up 20261010']);
});

test('coded errors: session_id_invalid, session_not_found, invalid_state, no_pending_approval', async () => {
  const agent = scripted([{ content: 'done' }]);
  const e = await rejectsWithCode(assert, agent.run('../x', 'hi'), 'session_id_invalid', 'config');
  assert.match(e.message, /\.\.\/x/);
  await rejectsWithCode(assert, agent.stateJson('../x'), 'session_id_invalid', 'config');
  await rejectsWithCode(assert, agent.resume('missing'), 'session_not_found');
  await rejectsWithCode(assert, agent.approve('missing', 'a1'), 'session_not_found');
  await agent.run('s', 'hi');
  await rejectsWithCode(assert, agent.resume('s'), 'invalid_state');
  await rejectsWithCode(assert, agent.approve('s', 'a1'), 'no_pending_approval');
});

test('a failed model call ends the run with its coded error in the outcome', async () => {
  const agent = scripted([]);
  const out = await agent.run('s', 'hi');
  assert.equal(out.status, 'failed');
  assert.equal(out.errorCode, 'provider_script_exhausted');
  assert.equal(out.errorLayer, 'provider');
  assert.match(out.errorMessage, /no answer/);
});

test('an executor error becomes an is_error tool result the model sees; the run goes on', async () => {
  const agent = scripted([
    { tool_calls: [{ id: 'c1', name: 'boom', arguments: '{}' }] },
    { content: 'sorry' },
  ]);
  agent.registerTool({ name: 'boom', description: 'd', parametersJson: objectSchema }, () => {
    throw new Error('kaput');
  });
  const out = await agent.run('s', 'hi');
  assert.equal(out.status, 'completed');
  const state = JSON.parse(await agent.stateJson('s'));
  const tool = state.messages.find((m) => m.role === 'tool');
  assert.equal(tool.is_error, true);
  assert.match(tool.content, /kaput/);
});

test('a domain error keeps its code in the result the model sees; the context has the state\'s schema version', async () => {
  const agent = scripted([
    { tool_calls: [{ id: 'c1', name: 'plan', arguments: '{}' }, { id: 'c2', name: 'plain', arguments: '{}' }] },
    { content: 'noted' },
  ]);
  const versions = [];
  agent.registerTool({ name: 'plan', description: 'd', parametersJson: objectSchema }, async (args, ctx) => {
    versions.push(ctx.schemaVersion);
    throw Object.assign(new Error("status 'x' is unknown"), { code: 'plan_todo_status_unknown' });
  });
  agent.registerTool({ name: 'plain', description: 'd', parametersJson: objectSchema }, () => {
    throw Object.assign(new Error('socket closed'), { code: 'ERR_SOCKET_CLOSED' });
  });
  const events = [];
  agent.onEvent((e) => events.push(JSON.parse(e)));
  const out = await agent.run('s', 'plan it');
  assert.equal(out.status, 'completed');
  const state = JSON.parse(await agent.stateJson('s'));
  assert.deepEqual(versions, [state.schema_version]);
  const tools = state.messages.filter((m) => m.role === 'tool');
  assert.deepEqual(tools.map((m) => [m.tool_call_id, m.is_error]), [['c1', true], ['c2', true]]);
  assert.equal(tools[0].content, "error [plan_todo_status_unknown]: status 'x' is unknown");
  assert.match(tools[1].content, /^error \[tool_execution_failed\]: executor of plain threw: Error: socket closed$/);
  // Events come in completion order (the two calls run at once); the history keeps call order.
  const results = Object.fromEntries(events.filter((e) => e.type === 'tool_result').map((e) => [e.call_id, e.result.contents[0].text]));
  assert.deepEqual(results, { c1: tools[0].content, c2: tools[1].content });
});

test('maxRounds, systemPrompt and deleteSession', async () => {
  const loop = { tool_calls: [{ id: 'x', name: 't', arguments: '{}' }] };
  const agent = scripted([loop, { ...loop, tool_calls: [{ id: 'y', name: 't', arguments: '{"n":1}' }] }], { maxRounds: 2, systemPrompt: 'be brief' });
  agent.registerTool({ name: 't', description: 'd', parametersJson: objectSchema }, () => text('ok'));
  const out = await agent.run('s', 'go');
  assert.equal(out.status, 'max_rounds');
  // The seed's fixed fallback (tool-calling-loop.md 3), recorded as the last assistant message.
  const fallback = '已多次调用工具仍未得到结论，请稍后重试或联系人工客服。';
  assert.equal(out.finalText, fallback);
  const state = JSON.parse(await agent.stateJson('s'));
  assert.deepEqual(state.messages.at(-1), { role: 'assistant', content: fallback });
  assert.deepEqual(state.messages[0], { role: 'system', content: 'be brief' });
  assert.equal(await agent.deleteSession('s'), true);
  assert.equal(await agent.deleteSession('s'), false);
  assert.equal(await agent.stateJson('s'), null);
});

test('toolTimeoutMs bounds an executor that never settles (tool_timeout result, the run goes on)', async () => {
  const agent = scripted([{ tool_calls: [{ id: 'h1', name: 'hang', arguments: '{}' }] }, { content: 'gave up' }], { toolTimeoutMs: 100 });
  agent.registerTool({ name: 'hang', description: 'd', parametersJson: objectSchema }, () => new Promise(() => {}));
  const started = Date.now();
  const out = await agent.run('s', 'go');
  assert.equal(out.status, 'completed');
  assert.ok(Date.now() - started < 3000);
  const tool = JSON.parse(await agent.stateJson('s')).messages.find((m) => m.role === 'tool');
  assert.equal(tool.is_error, true);
  assert.match(tool.content, /tool_timeout|did not finish/);
});

test('a state directory that cannot be created rejects run() with a persistence error', async (t) => {
  const { mkdtempSync, writeFileSync, rmSync } = await import('node:fs');
  const { join } = await import('node:path');
  const { tmpdir } = await import('node:os');
  const dir = mkdtempSync(join(tmpdir(), 'arkagent-blocked-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const file = join(dir, 'a-file');
  writeFileSync(file, 'not a directory');
  const agent = scripted([{ content: 'x' }], { stateDir: join(file, 'states') });
  await rejectsWithCode(assert, agent.run('s', 'hi'), 'state_io', 'persistence');
});

test('two Agent objects over one stateDir: a session being run by one is session_busy for the other', async (t) => {
  const { mkdtempSync, rmSync } = await import('node:fs');
  const { join } = await import('node:path');
  const { tmpdir } = await import('node:os');
  const stateDir = mkdtempSync(join(tmpdir(), 'arkagent-shared-'));
  t.after(() => rmSync(stateDir, { recursive: true, force: true }));
  const turn = (tag) => [{ tool_calls: [{ id: `${tag}1`, name: 'wait', arguments: '{}' }] }, { content: `answer ${tag}` }];
  let release;
  let entered;
  const inside = new Promise((resolve) => { entered = resolve; });
  const first = scripted(turn('a'), { stateDir });
  first.registerTool({ name: 'wait', description: 'd', parametersJson: objectSchema }, () => {
    entered();
    return new Promise((resolve) => { release = () => resolve(text('done')); });
  });
  const second = scripted([...turn('b'), ...turn('c')], { stateDir });
  second.registerTool({ name: 'wait', description: 'd', parametersJson: objectSchema }, () => text('done'));

  const running = first.run('s', 'from a');
  await inside;
  await rejectsWithCode(assert, second.run('s', 'from b'), 'session_busy', 'persistence');
  await rejectsWithCode(assert, first.deleteSession('s'), 'session_busy', 'persistence');
  assert.equal((await second.run('other', 'elsewhere')).status, 'completed', 'other sessions are not blocked');
  release();
  assert.equal((await running).status, 'completed');
  assert.equal((await second.run('s', 'from b')).status, 'completed', 'free again once the run is over');
  const texts = JSON.parse(await first.stateJson('s')).messages
    .filter((m) => m.role === 'user' || (m.role === 'assistant' && m.content)).map((m) => m.content);
  assert.deepEqual(texts, ['from a', 'answer a', 'from b', 'answer c']);
});
