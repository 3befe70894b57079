// Host tests of the ArkTS Agent wrapper (arkts-bindings/src/main/ets/agent/): the .ets files are
// transpiled to JS (transpile.mjs) with `libarkagent.so` replaced by a fake native module
// (fakes/libarkagent.mjs) that records what the wrapper passes and answers what a test sets. They
// check the adapters' conversions both ways against the shapes of the native index.d.ts, and decode
// the event wire forms the Rust core writes (tests/fixtures/agent_events/events.jsonl, pinned by
// tests/event_wire.rs).
// Run: node --test scripts/arkts-check/agent.test.mjs

import { test, before } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { transpileTree, importModules } from './transpile.mjs';
import { tempDir } from './tmp.mjs';

const HERE = path.dirname(fileURLToPath(import.meta.url));
const ROOT = path.resolve(HERE, '..', '..');
const ETS = path.join(ROOT, 'arkts-bindings', 'src', 'main', 'ets');
const FAKE = path.join(HERE, 'fakes', 'libarkagent.mjs');
const EVENTS = path.join(ROOT, 'tests', 'fixtures', 'agent_events', 'events.jsonl');

let M; // every export of the transpiled bindings, by name
let Native; // the fake native module

before(async () => {
  const dir = tempDir('arkagent-agent-');
  transpileTree(ETS, dir, { 'libarkagent.so': FAKE });
  M = await importModules(dir, ['json/Json', 'message/Message', 'tool/Tool', 'approval/Approval', 'hook/Hook', 'event/Events',
    'agent/AgentConfig', 'agent/RunOutcome', 'agent/Adapters', 'agent/Agent', 'agent/ToolRegistry',
    'agent/SessionSummary', 'error/ArkAgentError']);
  Native = await import(pathToFileURL(FAKE).href);
});

const flush = () => new Promise((resolve) => setImmediate(resolve));

function newAgent(config = M.AgentConfig.scripted('[]'), services = undefined) {
  const agent = new M.Agent(config, services);
  return { agent, native: Native.Agent.instances.at(-1) };
}

function schema() {
  return new M.JsonObject().setString('type', 'object')
    .setObject('properties', new M.JsonObject().setObject('order_id', new M.JsonObject().setString('type', 'string')))
    .setArray('required', [M.JsonValue.string('order_id')]);
}

function context(overrides = {}) {
  return { sessionId: 's1', callId: 'c1', batchCallId: 'b1', schemaVersion: 2, metadataJson: '{"user":"u1"}',
    signal: new Native.CancellationHandle(), ...overrides };
}

const BATCH = {
  batch_id: 'batch-1', run_id: 'run-1', created_at_ms: 1700000000000,
  assistant_message: { role: 'assistant', tool_calls: [] },
  items: [{ approval_id: 'ap-1', tool_call: { id: 'c2', name: 'clear_baking_cache', arguments: '{"confirm":"yes"}' },
    arguments_hash: 'h', risk_level: 'dangerous', reason: 'Dangerous tool', created_at_ms: 1700000000001,
    decision: 'pending' }],
};

test('AgentConfig writes only the options that are set, and never shows the key', () => {
  const scripted = M.AgentConfig.scripted('[{"content":"hi"}]');
  assert.deepEqual(scripted.toObject(), { provider: 'scripted', scriptJson: '[{"content":"hi"}]' });
  const key = 'sk-test-0123456789abcdef';
  const online = M.AgentConfig.online(M.ProviderPreset.deepseek, 'deepseek-chat', key, 'https://gw.example/v1');
  online.stateDir = '/data/files/agent';
  online.maxRounds = 6;
  online.streaming = false;
  online.temperature = 0;
  online.loopWindow = 4;
  online.loopMaxCyclePeriod = 1;
  assert.deepEqual(online.toObject(), { provider: 'deepseek', baseUrl: 'https://gw.example/v1', model: 'deepseek-chat',
    apiKey: key, stateDir: '/data/files/agent', maxRounds: 6, streaming: false, temperature: 0, loopWindow: 4,
    loopMaxCyclePeriod: 1 });
  assert.equal(online.hasApiKey(), true);
  for (const shown of [JSON.stringify(online), String(online), online.toString(), JSON.stringify(Object.entries(online))]) {
    assert.ok(!shown.includes(key), `the key leaked: ${shown}`);
  }
  assert.match(online.toString(), /apiKey=<redacted>/);
  online.setApiKey('');
  assert.equal(online.hasApiKey(), false);
  assert.equal(online.toObject().apiKey, undefined);
  assert.ok(!('apiKey' in online.toObject()));
});

test('AgentConfig writes the provider options and the trimming budget; temperature null stays null', () => {
  const config = M.AgentConfig.online(M.ProviderPreset.moonshot, 'kimi-k2.5', 'k');
  config.temperature = null;
  config.contextBudgetTokens = 8000;
  config.streamUsage = false;
  config.sendReasoningContent = true;
  config.toolChoice = 'required';
  config.maxResultBytes = 65536;
  assert.deepEqual(config.toObject(), { provider: 'moonshot', model: 'kimi-k2.5', apiKey: 'k', temperature: null,
    maxResultBytes: 65536, contextBudgetTokens: 8000, streamUsage: false, sendReasoningContent: true, toolChoice: 'required' });
  const { native } = newAgent(config);
  assert.equal(native.config.temperature, null);
  assert.equal(native.config.toolChoice, 'required');
  config.temperature = undefined;
  assert.ok(!('temperature' in config.toObject()));
});

test('AgentConfig writes the provider timeouts that are set, and only those', () => {
  const config = M.AgentConfig.online(M.ProviderPreset.openai, 'o3', 'k');
  assert.deepEqual(config.toObject(), { provider: 'openai', model: 'o3', apiKey: 'k' });
  config.firstByteTimeoutMs = 120000;
  config.totalTimeoutMs = 1200000;
  assert.deepEqual(config.toObject(), { provider: 'openai', model: 'o3', apiKey: 'k', firstByteTimeoutMs: 120000,
    totalTimeoutMs: 1200000 });
  config.connectTimeoutMs = 5000;
  config.idleTimeoutMs = 90000;
  config.firstByteTimeoutMs = undefined;
  config.afterFinishTimeoutMs = 2000;
  const { native } = newAgent(config);
  assert.deepEqual([native.config.connectTimeoutMs, native.config.firstByteTimeoutMs, native.config.idleTimeoutMs,
    native.config.totalTimeoutMs, native.config.afterFinishTimeoutMs], [5000, undefined, 90000, 1200000, 2000]);
  assert.ok(!('firstByteTimeoutMs' in native.config));
});

test('AgentConfig.loopDiagnosis becomes the native loopDiagnosis object, with only the fields set', () => {
  const config = M.AgentConfig.scripted('[]');
  config.loopDiagnosis = new M.LoopDiagnosis(2, 1, 0.8);
  assert.deepEqual(config.toObject(), { provider: 'scripted', scriptJson: '[]',
    loopDiagnosis: { firstRound: 2, every: 1, minConfidence: 0.8 } });
  config.loopDiagnosis = new M.LoopDiagnosis();
  config.loopDiagnosis.every = 0;
  assert.deepEqual(config.toObject().loopDiagnosis, { every: 0 });
  const { native } = newAgent(config);
  assert.deepEqual(native.config.loopDiagnosis, { every: 0 });
  config.loopDiagnosis = undefined;
  assert.ok(!('loopDiagnosis' in config.toObject()));
});

test('the constructor hands the config to the native Agent; native errors keep their code and layer', () => {
  const { native } = newAgent(M.AgentConfig.online('openai', 'gpt-4o-mini', 'k'));
  assert.deepEqual(native.config, { provider: 'openai', model: 'gpt-4o-mini', apiKey: 'k' });
  assert.equal(typeof native.listener, 'function');
  let thrown;
  try {
    new M.Agent(new M.AgentConfig('custom'));
  } catch (e) {
    thrown = e;
  }
  const info = M.agentErrorOf(thrown);
  assert.deepEqual([info.code, info.layer], ['config_invalid', 'config']);
  assert.match(info.message, /baseUrl/);
  assert.deepEqual([M.agentErrorOf(new Error('plain')).code, M.agentErrorOf(new Error('plain')).layer], ['unknown', '']);
});

test('registerTool converts the definition (schema as JSON text, risk, timeout only when set)', () => {
  const { agent, native } = newAgent();
  class Noop { async execute() { return M.ToolResult.text('x'); } }
  agent.registerTool(new M.ToolDefinition('query_order', 'Queries an order', schema()), new Noop());
  agent.registerTool(new M.ToolDefinition('clear_baking_cache', 'Clears', '{"type":"object"}', M.ToolRiskLevel.dangerous,
    true, 2500), new Noop());
  const order = native.tools.get('query_order').definition;
  assert.deepEqual(order, { name: 'query_order', description: 'Queries an order', parametersJson: schema().toJsonString(),
    riskLevel: 'safe', idempotent: false });
  assert.ok(!('timeoutMs' in order));
  assert.deepEqual(native.tools.get('clear_baking_cache').definition,
    { name: 'clear_baking_cache', description: 'Clears', parametersJson: '{"type":"object"}', riskLevel: 'dangerous',
      idempotent: true, timeoutMs: 2500 });
  assert.deepEqual(agent.toolNames(), ['query_order', 'clear_baking_cache']);
  assert.throws(() => agent.registerTool(new M.ToolDefinition('query_order', 'again', schema()), new Noop()),
    (e) => M.agentErrorOf(e).code === 'tool_name_duplicate');
  assert.equal(agent.unregisterTool('query_order'), true);
  assert.equal(agent.unregisterTool('query_order'), false);
});

test('the executor function parses the arguments, builds the ToolContext and converts the ToolResult', async () => {
  const { agent, native } = newAgent();
  const seen = [];
  class Order {
    async execute(args, ctx) {
      seen.push({ id: args.getString('order_id'), args, ctx });
      const meta = new M.JsonObject().setString('source', 'mock');
      return new M.ToolResult([M.ContentPart.text('shipped'),
        M.ContentPart.json(M.JsonValue.object(new M.JsonObject().setString('eta', '2026-10-12')))], false, true, meta);
    }
  }
  agent.registerTool(new M.ToolDefinition('query_order', 'Queries an order', schema()), new Order());
  const fn = native.tools.get('query_order').executor;
  const out = await fn('{"order_id":"20261010"}', context());
  assert.deepEqual(out, {
    contents: [{ type: 'text', text: 'shipped' }, { type: 'json', json: '{"eta":"2026-10-12"}' }],
    isError: false, stop: true, metadataJson: '{"source":"mock"}',
  });
  assert.equal(seen[0].id, '20261010');
  assert.ok(seen[0].args instanceof M.JsonObject);
  const ctx = seen[0].ctx;
  assert.ok(ctx instanceof M.ToolContext);
  assert.deepEqual([ctx.sessionId, ctx.callId, ctx.batchCallId], ['s1', 'c1', 'b1']);
  assert.equal(ctx.metadata.getString('user'), 'u1');
  assert.equal(ctx.signal.cancelled, false);
  // An error result stays a result; no metadata means no metadataJson.
  class Fails { async execute() { return M.ToolResult.error('order not found'); } }
  agent.registerTool(new M.ToolDefinition('fails', 'd', schema()), new Fails());
  assert.deepEqual(await native.tools.get('fails').executor('{}', context({ metadataJson: '{}' })),
    { contents: [{ type: 'text', text: 'order not found' }], isError: true, stop: false });
});

test('executor failures reach the native side as rejections (throw, rejection, no result)', async () => {
  const { agent, native } = newAgent();
  class Throws { execute() { throw new Error('boom'); } }
  class Rejects { async execute() { throw new Error('async boom'); } }
  class Nothing { async execute() { return undefined; } }
  agent.registerTool(new M.ToolDefinition('throws', 'd', schema()), new Throws());
  agent.registerTool(new M.ToolDefinition('rejects', 'd', schema()), new Rejects());
  agent.registerTool(new M.ToolDefinition('nothing', 'd', schema()), new Nothing());
  await assert.rejects(native.tools.get('throws').executor('{}', context()), /boom/);
  await assert.rejects(native.tools.get('rejects').executor('{}', context()), /async boom/);
  await assert.rejects(native.tools.get('nothing').executor('{}', context()), /not a ToolResult/);
  await assert.rejects(native.tools.get('nothing').executor('[1]', context()), (e) => e.code === 'json_not_object');
});

test('an ArkAgentError thrown by an executor reaches the native side as that error (code and message)', async () => {
  const { agent, native } = newAgent();
  const domain = M.ArkAgentError.tool('plan_todo_status_unknown', "status 'x' is unknown");
  class Plan { async execute() { throw domain; } }
  class SyncPlan { execute() { throw domain; } }
  agent.registerTool(new M.ToolDefinition('plan', 'd', schema()), new Plan());
  agent.registerTool(new M.ToolDefinition('sync_plan', 'd', schema()), new SyncPlan());
  for (const name of ['plan', 'sync_plan']) {
    // The very object, unwrapped: the native module reads its `code` and `message`.
    await assert.rejects(native.tools.get(name).executor('{}', context()), (e) => e === domain);
  }
  assert.deepEqual([M.agentErrorOf(domain).code, M.agentErrorOf(domain).layer], ['plan_todo_status_unknown', 'tool']);
});

test('services: registered on the Agent, seen (read-only) by every executor through ToolContext', async () => {
  class BakeryDb { constructor() { this.serviceId = 'bakery_db'; this.rows = ['r1']; } }
  const shared = new M.ToolServiceRegistry();
  const { agent, native } = newAgent(M.AgentConfig.scripted('[]'));
  const own = newAgent(M.AgentConfig.scripted('[]'), shared);
  assert.equal(own.agent.services, shared, 'an app registry passed in is the one used');
  assert.ok(agent.services instanceof M.ToolServiceRegistry);
  const db = new BakeryDb();
  assert.equal(agent.registerService(db), true);
  assert.equal(agent.registerService(new BakeryDb()), false, 'a duplicate id is refused');
  const seen = [];
  class Reads {
    async execute(args, ctx) {
      seen.push({ db: ctx.services.get('bakery_db'), clock: ctx.services.get('clock'), ids: ctx.services.ids(),
        widened: ctx.services.register({ serviceId: 'spy' }), state: [ctx.state.schemaVersion, ctx.state.sessionId,
          ctx.state.metadata.getString('user')] });
      return M.ToolResult.text('ok');
    }
  }
  agent.registerTool(new M.ToolDefinition('reads', 'd', schema()), new Reads());
  // A service registered after the tool is there too.
  agent.registerService({ serviceId: 'clock' });
  await native.tools.get('reads').executor('{}', context({ schemaVersion: 2 }));
  assert.equal(seen[0].db, db);
  assert.deepEqual(seen[0].clock, { serviceId: 'clock' });
  assert.deepEqual(seen[0].ids, ['bakery_db', 'clock']);
  assert.equal(seen[0].widened, false);
  assert.deepEqual(agent.services.ids(), ['bakery_db', 'clock'], 'the tool did not add its spy');
  assert.deepEqual(seen[0].state, [2, 's1', 'u1']);
});

test('the ArkTS ToolRegistry hands the native registry the shapes of index.d.ts and decodes its answers', async () => {
  const registry = new M.ToolRegistry({ defaultTimeoutMs: 5000 });
  const fake = Native.ToolRegistry.instances.at(-1);
  assert.deepEqual(fake.options, { defaultTimeoutMs: 5000 });
  class Echo { async execute(args, ctx) { return M.ToolResult.text(`${args.getString('order_id')}@${ctx.services.ids()}`); } }
  registry.registerService({ serviceId: 'db' });
  registry.register(new M.ToolDefinition('query_order', 'Queries', schema(), M.ToolRiskLevel.sensitive, true, 900), new Echo());
  assert.deepEqual(registry.names(), ['query_order']);
  const defs = registry.definitions();
  assert.deepEqual(defs.map((d) => [d.name, d.riskLevel, d.idempotent, d.timeoutMs]), [['query_order', 'sensitive', true, 900]]);
  assert.equal(defs[0].parametersJson(), schema().toJsonString());
  // The executor registered natively sees the registry's services.
  const out = await fake.tools.get('query_order').executor('{"order_id":"7"}', context());
  assert.deepEqual(out.contents, [{ type: 'text', text: '7@db' }]);
  // execute: the call in the native shape, only the options that are set; the result decoded.
  fake.answers.execute = { contents: [{ type: 'text', text: 'a' }, { type: 'json', json: '{"n":1}' }], isError: true,
    stop: true, metadataJson: '{"m":true}' };
  const handle = new Native.CancellationHandle();
  const result = await registry.execute(new M.ToolCall('c1', 'query_order', '{"order_id":"7"}'), handle, 's1', undefined,
    new M.JsonObject().setString('user', 'u1'));
  assert.deepEqual(fake.calls.at(-1), ['execute', { id: 'c1', name: 'query_order', arguments: '{"order_id":"7"}' }, handle,
    { sessionId: 's1', metadataJson: '{"user":"u1"}' }]);
  assert.ok(result instanceof M.ToolResult);
  assert.deepEqual(JSON.parse(result.toJson().toJsonString()), { contents: [{ type: 'text', text: 'a' },
    { type: 'json', value: { n: 1 } }], is_error: true, stop: true, metadata: { m: true } });
  await registry.execute(new M.ToolCall('c2', 'query_order', '{}'));
  assert.deepEqual(fake.calls.at(-1).slice(2), [undefined, {}]);
  // A native rejection passes through as is.
  fake.answers.execute = Object.assign(new Error('Tool not found: nope'), { code: 'tool_not_found', layer: 'tool' });
  await assert.rejects(registry.execute(new M.ToolCall('c3', 'nope', '{}')), (e) => M.agentErrorOf(e).code === 'tool_not_found');
  // copyInto / copyIntoExcluding hand over the target's native registry and the names.
  const worker = new M.ToolRegistry();
  registry.copyIntoExcluding(worker, ['delegate_task']);
  assert.deepEqual(fake.calls.at(-1), ['copyIntoExcluding', Native.ToolRegistry.instances.at(-1), ['delegate_task']]);
  assert.deepEqual(worker.names(), ['query_order']);
  assert.throws(() => registry.copyInto(worker), (e) => M.agentErrorOf(e).code === 'tool_name_duplicate');
});

test('toolResultOf reverses toolResultObject; an unknown part type is tool_result_invalid', () => {
  const result = new M.ToolResult([M.ContentPart.text('t'), M.ContentPart.json(M.JsonValue.array([M.JsonValue.number(1)]))],
    true, false, new M.JsonObject().setString('k', 'v'));
  const back = M.toolResultOf(M.toolResultObject(result));
  assert.equal(back.toJson().toJsonString(), result.toJson().toJsonString());
  assert.equal(M.toolResultOf({ contents: [] }).toJson().toJsonString(), '{"contents":[],"is_error":false,"stop":false}');
  assert.throws(() => M.toolResultOf({ contents: [{ type: 'image', text: 'x' }] }), (e) => e.code === 'tool_result_invalid');
  assert.throws(() => M.toolResultOf({ contents: [{ type: 'json', json: '{bad' }] }), (e) => e.code.startsWith('json_'));
});

test('the native cancellation handle reaches the executor signal (already cancelled, or later)', async () => {
  const { agent, native } = newAgent();
  let release;
  const gate = new Promise((resolve) => { release = resolve; });
  const observed = [];
  class Slow {
    async execute(args, ctx) {
      ctx.signal.onCancel((reason) => observed.push(`listener:${reason}`));
      await gate;
      return ctx.signal.cancelled ? M.ToolResult.error(`cancelled: ${ctx.signal.reason}`) : M.ToolResult.text('done');
    }
  }
  agent.registerTool(new M.ToolDefinition('slow', 'd', schema()), new Slow());
  const fn = native.tools.get('slow').executor;
  const handle = new Native.CancellationHandle();
  const pending = fn('{}', context({ signal: handle }));
  handle.cancel('timeout');
  await flush();
  release();
  assert.deepEqual(await pending, { contents: [{ type: 'text', text: 'cancelled: timeout' }], isError: true, stop: false });
  assert.deepEqual(observed, ['listener:timeout']);
  const before = new Native.CancellationHandle();
  before.cancel('user');
  const signal = M.signalOf(before);
  assert.equal(signal.cancelled, true, 'a handle cancelled before the call is seen at once');
  assert.equal(signal.reason, 'user');
  assert.equal((await fn('{}', context({ signal: before }))).isError, true);
});

test('beforeToolCall: the hook sees the call, definition and run context; its decisions become native answers', async () => {
  const { agent, native } = newAgent();
  const seen = [];
  class Policy extends M.AgentHook {
    beforeToolCall(ctx) {
      seen.push(ctx);
      const args = ctx.toolCall.argumentsObject();
      switch (args.getString('mode')) {
        case 'rewrite': return M.ToolCallHookResult.proceed(ctx.toolCall.withArgumentsObject(args.setString('audited', 'yes')));
        case 'deny': return M.ToolCallHookResult.deny(M.ToolResult.error('not allowed'));
        case 'defer': return Promise.resolve(M.ToolCallHookResult.defer('ask the user'));
        case 'abort': return M.ToolCallHookResult.abort('policy');
        case 'throw': throw new Error('hook bug');
        default: return M.ToolCallHookResult.proceed();
      }
    }
  }
  agent.addHook(new Policy());
  const hook = native.hooks[0];
  const ctxJson = JSON.stringify({ session_id: 'session-9', run_id: 'run-9', round: 2 });
  const call = (mode) => JSON.stringify({ id: 'c1', name: 'query_order', arguments: JSON.stringify({ order_id: '1', mode }) });
  const def = JSON.stringify({ name: 'query_order', description: 'd', parameters: { type: 'object' }, risk_level: 'sensitive',
    idempotent: false, timeout: 1500 });
  assert.deepEqual(await hook.beforeToolCall(ctxJson, call('none'), def), { action: 'proceed' });
  assert.deepEqual(await hook.beforeToolCall(ctxJson, call('rewrite'), def),
    { action: 'proceed', argumentsJson: '{"order_id":"1","mode":"rewrite","audited":"yes"}', name: 'query_order' });
  const denied = await hook.beforeToolCall(ctxJson, call('deny'), null);
  assert.equal(denied.action, 'deny');
  assert.deepEqual(JSON.parse(denied.resultJson),
    { contents: [{ type: 'text', text: 'not allowed' }], is_error: true, stop: false });
  assert.deepEqual(await hook.beforeToolCall(ctxJson, call('defer'), def), { action: 'defer', reason: 'ask the user' });
  assert.deepEqual(await hook.beforeToolCall(ctxJson, call('abort'), def), { action: 'abort', reason: 'policy' });
  await assert.rejects(hook.beforeToolCall(ctxJson, call('throw'), def), /hook bug/,
    'a failing hook reaches the native side (hook_failed)');
  const ctx = seen[0];
  assert.deepEqual([ctx.hook.sessionId, ctx.hook.runId, ctx.hook.round], ['session-9', 'run-9', 2]);
  assert.equal(ctx.toolCall.id, 'c1');
  assert.equal(ctx.definition.riskLevel, 'sensitive');
  assert.equal(ctx.definition.timeoutMs, 1500);
  assert.equal(seen[2].definition, undefined, 'an unknown tool has no definition');
});

test('afterToolCall: the hook sees the decoded result; rewrites, stop, abort and injected messages are written', async () => {
  const { agent, native } = newAgent();
  const results = [];
  class After extends M.AgentHook {
    async afterToolCall(ctx) {
      results.push(ctx.result);
      if (ctx.toolCall.name === 'rewrite') return M.AfterToolCallHookResult.proceed(M.ToolResult.text('redacted'));
      if (ctx.toolCall.name === 'stop') {
        return M.AfterToolCallHookResult.stop().withInjectedMessages([M.ChatMessage.system('stop here')]);
      }
      if (ctx.toolCall.name === 'abort') return M.AfterToolCallHookResult.abort('bad result');
      return M.AfterToolCallHookResult.proceed();
    }
  }
  agent.addHook(new After());
  const hook = native.hooks[0];
  const ctxJson = JSON.stringify({ session_id: 's', run_id: 'r', round: 1 });
  const call = (name) => JSON.stringify({ id: 'c1', name, arguments: '{}' });
  const result = JSON.stringify({ contents: [{ type: 'json', value: { stock: 12 } }], is_error: false, stop: false });
  assert.deepEqual(await hook.afterToolCall(ctxJson, call('keep'), result), { action: 'proceed' });
  assert.equal(results[0].toModelText(), '{"stock":12}');
  const rewritten = await hook.afterToolCall(ctxJson, call('rewrite'), result);
  assert.deepEqual(JSON.parse(rewritten.resultJson), { contents: [{ type: 'text', text: 'redacted' }], is_error: false, stop: false });
  assert.deepEqual(await hook.afterToolCall(ctxJson, call('stop'), result),
    { action: 'stop', injectJson: '[{"role":"system","content":"stop here"}]' });
  assert.deepEqual(await hook.afterToolCall(ctxJson, call('abort'), result), { action: 'abort', reason: 'bad result' });
});

test('hook notifications decode their arguments; their failures go to the error handler, never to the native side', async () => {
  const { agent, native } = newAgent();
  const log = [];
  class Notes extends M.AgentHook {
    onRunStart(ctx) { log.push(`start ${ctx.sessionId} ${ctx.runId} ${ctx.round}`); }
    onApprovalRequired(ctx, batch) { log.push(`approval ${batch.items[0].toolCall.name} ${ctx.runId} ${ctx.round}`); }
    async onRunEnd(ctx, status, finalText) {
      log.push(`end ${status} ${finalText}`);
      throw new Error('async failure');
    }
    onError(ctx, error) {
      log.push(`error ${error.layer} ${error.code} ${error.message}`);
      throw new Error('sync failure');
    }
  }
  const errors = [];
  agent.setErrorHandler((where, e) => errors.push(`${where}: ${e.message}`));
  agent.addHook(new Notes());
  const hook = native.hooks[0];
  const ctx = (round) => JSON.stringify({ session_id: 's1', run_id: 'r1', round });
  assert.equal(hook.onRunStart(ctx(0)), undefined, 'a synchronous notification answers undefined');
  hook.onApprovalRequired(ctx(1), JSON.stringify(BATCH));
  const ended = hook.onRunEnd(ctx(2), 'completed', null);
  assert.ok(ended instanceof Promise, 'an async notification hands its Promise to the native side, which waits for it');
  await ended; // resolves: the rejection went to the error handler
  hook.onError(ctx(2), JSON.stringify({ layer: 'provider', code: 'provider_http', message: 'HTTP 500' }));
  hook.onRunEnd(ctx(2), 'exploded', 'x');
  await flush();
  assert.deepEqual(log, ['start s1 r1 0', 'approval clear_baking_cache r1 1', 'end completed undefined',
    'error provider provider_http HTTP 500']);
  assert.deepEqual(errors.sort(), ['hook.onError: sync failure', 'hook.onRunEnd: async failure',
    'hook.onRunEnd: unknown run status: exploded']);
});

test('only the methods a hook overrides reach the native side (no request or state serialized for the others)', () => {
  const { agent, native } = newAgent();
  class OnlyCalls extends M.AgentHook {
    beforeToolCall(ctx) { return M.ToolCallHookResult.proceed(); }
  }
  class Audit extends OnlyCalls {
    beforePersistState(ctx) { return M.PersistDecision.persist; }
  }
  agent.addHook(new M.AgentHook());
  agent.addHook(new OnlyCalls());
  agent.addHook(new Audit());
  const all = ['onRunStart', 'beforeModelCall', 'afterModelResponse', 'beforeToolCall', 'afterToolCall',
    'onApprovalRequired', 'beforePersistState', 'onRunEnd', 'onError'];
  const present = (hook) => all.filter((m) => typeof hook[m] === 'function');
  assert.deepEqual(present(native.hooks[0]), []);
  assert.deepEqual(present(native.hooks[1]), ['beforeToolCall']);
  assert.deepEqual(present(native.hooks[2]), ['beforeToolCall', 'beforePersistState'], 'an inherited override counts');
});

test('beforeModelCall, afterModelResponse and beforePersistState decode what they see; persist answers are the wire names', async () => {
  const { agent, native } = newAgent();
  const seen = [];
  class Watch extends M.AgentHook {
    beforeModelCall(ctx) {
      seen.push(['request', ctx.hook.round, ctx.toolNames(), ctx.request().getNumber('max_tokens')]);
    }
    afterModelResponse(ctx) {
      seen.push(['response', ctx.hook.round, ctx.content, ctx.reasoningContent, ctx.toolCalls.map((c) => c.name),
        ctx.finishReason, ctx.usage?.totalTokens]);
    }
    async beforePersistState(ctx) {
      const state = ctx.state();
      seen.push(['persist', ctx.hook.sessionId, state.getString('status')]);
      return state.getString('status') === 'running' ? M.PersistDecision.skip : M.PersistDecision.persist;
    }
  }
  agent.addHook(new Watch());
  const hook = native.hooks[0];
  const ctx = JSON.stringify({ session_id: 's1', run_id: 'r1', round: 3 });
  const request = { messages: [{ role: 'user', content: 'hi' }],
    tools: [{ name: 'a', description: '', parameters: { type: 'object' } }, { name: 'b', description: '', parameters: {} }],
    max_tokens: 64 };
  assert.equal(hook.beforeModelCall(ctx, JSON.stringify(request)), undefined);
  hook.afterModelResponse(ctx, JSON.stringify({ content: null, reasoning_content: 'think', finish_reason: 'tool_calls',
    tool_calls: [{ id: 'c1', name: 'a', arguments: '{}' }], usage: { prompt_tokens: 5, completion_tokens: 2, total_tokens: 7 } }));
  hook.afterModelResponse(ctx, JSON.stringify({ content: 'done', tool_calls: [], usage: null }));
  assert.equal(await hook.beforePersistState(ctx, JSON.stringify({ session_id: 's1', status: 'running' })), 'skip');
  assert.equal(await hook.beforePersistState(ctx, JSON.stringify({ session_id: 's1', status: 'completed' })), 'persist');
  await assert.rejects(hook.beforePersistState(ctx, 'not json'), (e) => e instanceof M.JsonError,
    'a failing beforePersistState reaches the native side (which saves)');
  const errors = [];
  agent.setErrorHandler((where, e) => errors.push(where));
  hook.afterModelResponse(ctx, JSON.stringify({ tool_calls: [{ id: 1 }] }));
  assert.deepEqual(errors, ['hook.afterModelResponse'], 'an undecodable response goes to the error handler');
  assert.deepEqual(seen, [
    ['request', 3, ['a', 'b'], 64],
    ['response', 3, undefined, 'think', ['a'], 'tool_calls', 7],
    ['response', 3, 'done', undefined, [], undefined, undefined],
    ['persist', 's1', 'running'],
    ['persist', 's1', 'completed'],
  ]);
});

test('every event kind the Rust core writes decodes to its class, in order, for every listener', () => {
  const { agent, native } = newAgent();
  const lines = fs.readFileSync(EVENTS, 'utf8').trim().split('\n');
  const a = [];
  const b = [];
  agent.addEventListener((e) => a.push(e));
  agent.addEventListener((e) => b.push(e));
  for (const line of lines) native.listener(line);
  assert.equal(a.length, lines.length);
  assert.deepEqual(a, b);
  assert.deepEqual(a.map((e) => e.kind), ['run_started', 'text_delta', 'reasoning_delta', 'tool_call_started',
    'tool_call_arguments_delta', 'tool_call_finished', 'approval_required', 'tool_result', 'state_persisted', 'run_finished',
    'worker_event']);
  const [started, text, reasoning, callStarted, argsDelta, callFinished, approval, result, persisted, finished, worker] = a;
  assert.ok(started instanceof M.RunStartedEvent);
  assert.deepEqual([started.sessionId, started.runId, started.resumed], ['s-1', 'run-1', false]);
  assert.ok(text instanceof M.TextDeltaEvent);
  assert.equal(text.delta, 'Hello ');
  assert.equal(reasoning.delta, 'thinking');
  assert.deepEqual([callStarted.index, callStarted.callId, callStarted.name], [0, 'call-1', 'query_order']);
  assert.equal(argsDelta.delta, '{"order_id":');
  assert.equal(callFinished.call.argumentsJson, '{"order_id":"20261010"}');
  assert.ok(approval instanceof M.ApprovalRequiredEvent);
  assert.equal(approval.batch.pendingItems()[0].approvalId, 'ap-1');
  assert.equal(approval.batch.items[0].riskLevel, 'dangerous');
  assert.deepEqual(approval.batch.modelMessage.toolCalls.map((c) => [c.id, c.name]), [['call-2', 'clear_baking_cache']],
    'the frozen answer as the Rust core writes it');
  assert.equal(result.result.toModelText(), '{"status":"shipped"}');
  assert.equal(persisted.events, 3);
  assert.ok(finished instanceof M.RunFinishedEvent);
  assert.deepEqual([finished.status, finished.finalText, finished.usage.totalTokens, finished.finishReason],
    ['failed', undefined, 15, 'tool_calls']);
  assert.ok(finished.error instanceof M.AgentErrorInfo);
  assert.deepEqual([finished.error.layer, finished.error.code, finished.error.message],
    ['provider', 'provider_auth', 'HTTP 401: Incorrect API key provided: <redacted>']);
  // A worker's worker's tool result, wrapped twice.
  assert.ok(worker instanceof M.WorkerEvent);
  assert.deepEqual([worker.callId, worker.sessionId, worker.depth()], ['call-3', 'w-1', 2]);
  assert.ok(worker.event instanceof M.WorkerEvent);
  assert.deepEqual([worker.event.callId, worker.event.sessionId, worker.event.depth()], ['call-4', 'w-2', 1]);
  const inner = worker.innermost();
  assert.ok(inner instanceof M.ToolResultEvent);
  assert.deepEqual([inner.callId, inner.name, inner.result.toModelText()], ['call-5', 'query_stock', '12']);
  assert.equal(worker.innermostSessionId(), 'w-2');
  assert.equal(worker.event.innermost(), inner);
});

test('a worker_event decodes its inner event; a wrong shape is event_invalid, an unknown inner type stays unknown', () => {
  const wrap = (event, extra = {}) => M.AgentEvent.fromJsonString(JSON.stringify(
    { type: 'worker_event', call_id: 'd1', session_id: 'w1', event, ...extra }));
  const started = wrap({ type: 'run_started', session_id: 'w1', run_id: 'wr', resumed: true });
  assert.deepEqual([started.kind, started.depth(), started.innermostSessionId()], ['worker_event', 1, 'w1']);
  assert.ok(started.innermost() instanceof M.RunStartedEvent);
  assert.deepEqual([started.innermost().runId, started.innermost().resumed], ['wr', true]);
  assert.equal(wrap({ type: 'from_the_future' }).innermost().kind, 'unknown');
  for (const bad of [
    () => M.AgentEvent.fromJsonString('{"type":"worker_event","session_id":"w1","event":{"type":"text_delta","delta":"a"}}'),
    () => wrap(undefined),
    () => wrap('text'),
    () => wrap({ type: 'text_delta' }),
  ]) {
    assert.throws(bad, (e) => e instanceof M.JsonError && e.code === 'event_invalid');
  }
});

test('a listener that throws does not stop the others; undecodable events go to the error handler', () => {
  const { agent, native } = newAgent();
  const errors = [];
  const got = [];
  agent.setErrorHandler((where, e) => errors.push(`${where}: ${e.code ?? e.message}`));
  const bad = () => { throw new Error('listener bug'); };
  agent.addEventListener(bad);
  agent.addEventListener((e) => got.push(e.kind));
  native.listener('{"type":"text_delta","delta":"a"}');
  native.listener('{"type":"text_delta"}');
  native.listener('not json');
  native.listener('{"type":"from_the_future","x":1}');
  assert.equal(agent.removeEventListener(bad), true);
  assert.equal(agent.removeEventListener(bad), false);
  native.listener('{"type":"text_delta","delta":"b"}');
  assert.deepEqual(got, ['text_delta', 'unknown', 'text_delta']);
  assert.deepEqual(errors, ['listener: listener bug', 'event: event_invalid', 'event: json_invalid', 'listener: listener bug']);
});

test('an async listener\'s rejection is reported as \'listener\', as a throw is, and contained', async () => {
  const { agent, native } = newAgent();
  const errors = [];
  const got = [];
  agent.setErrorHandler((where, e) => errors.push(`${where}: ${e.message}`));
  agent.addEventListener(async () => {
    await null;
    throw new Error('render failed');
  });
  agent.addEventListener(() => Promise.reject('not an Error'));
  agent.addEventListener((e) => got.push(e.kind));
  const unhandled = [];
  const onUnhandled = (e) => unhandled.push(e);
  process.on('unhandledRejection', onUnhandled);
  try {
    native.listener('{"type":"text_delta","delta":"a"}');
    await new Promise((resolve) => setTimeout(resolve, 20));
  } finally {
    process.off('unhandledRejection', onUnhandled);
  }
  assert.deepEqual(got, ['text_delta']);
  assert.deepEqual(errors.sort(), ['listener: not an Error', 'listener: render failed']);
  assert.deepEqual(unhandled, []);
});

test('integers beyond 2^53 from the module stay exact: ctx metadata, a tool_result\'s JSON part, a batch\'s answered call, state()',
  async () => {
    const BIG = '12345678901234567891';
    const { agent, native } = newAgent();
    const seen = [];
    class Reads {
      async execute(_args, ctx) {
        seen.push(ctx.state.metadata.get('uid').asNumberText());
        return M.ToolResult.text('ok');
      }
    }
    agent.registerTool(new M.ToolDefinition('reads', 'd', schema()), new Reads());
    await native.tools.get('reads').executor('{}', context({ metadataJson: `{"uid":${BIG}}` }));
    assert.deepEqual(seen, [BIG]);
    const events = [];
    agent.addEventListener((e) => events.push(e));
    native.listener(`{"type":"tool_result","run_id":"r1","call_id":"c1","name":"reads",`
      + `"result":{"contents":[{"type":"json","value":{"id":${BIG}}}],"is_error":false}}`);
    assert.equal(events.length, 1);
    assert.equal(events[0].result.contents[0].value.asObject().get('id').asNumberText(), BIG);
    const batch = structuredClone(BATCH);
    batch.calls = [{ call: { id: 'c1', name: 'reads', arguments: '{}' }, plan: 'answer',
      result: { contents: [{ type: 'json', value: 0 }], is_error: false } }];
    native.answers.pendingApprovalJson = JSON.stringify(batch).replace('"value":0', `"value":${BIG}`);
    const pending = await agent.pendingApproval('s1');
    assert.equal(pending.calls[0].result.contents[0].value.asNumberText(), BIG);
    native.answers.stateJson = `{"schema_version":3,"session_id":"s1","status":"idle","metadata":{"uid":${BIG}}}`;
    assert.equal((await agent.state('s1')).getObject('metadata').get('uid').asNumberText(), BIG);
  });

test('run and resume return typed outcomes (completed, suspended with its batch, failed with its error)', async () => {
  const { agent, native } = newAgent();
  const usageJson = '{"prompt_tokens":3,"completion_tokens":4,"total_tokens":7}';
  native.answers.run = { status: 'completed', finalText: 'Your order shipped.', usageJson };
  const handle = M.newCancellationHandle();
  assert.ok(handle instanceof Native.CancellationHandle);
  const done = await agent.run('s1', 'where is 20261010?', handle);
  assert.ok(done instanceof M.RunOutcome);
  assert.deepEqual([done.status, done.finalText, done.error, done.batch, done.isAwaitingApproval()],
    ['completed', 'Your order shipped.', undefined, undefined, false]);
  assert.deepEqual([done.usage.promptTokens, done.usage.completionTokens, done.usage.totalTokens], [3, 4, 7]);
  assert.deepEqual(native.calls.at(-1), ['run', 's1', 'where is 20261010?', handle]);
  native.answers.run = { status: 'awaiting_approval', batchJson: JSON.stringify(BATCH), usageJson };
  const suspended = await agent.run('s1', 'clear the cache');
  assert.equal(suspended.isAwaitingApproval(), true);
  assert.equal(suspended.batch.items[0].toolCall.name, 'clear_baking_cache');
  assert.equal(native.calls.at(-1)[3], undefined);
  native.answers.resume = { status: 'failed', errorCode: 'provider_http', errorLayer: 'provider',
    errorMessage: 'HTTP 500', usageJson };
  const failed = await agent.resume('s1', handle);
  assert.deepEqual([failed.error.code, failed.error.layer, failed.error.message], ['provider_http', 'provider', 'HTTP 500']);
  assert.deepEqual(native.calls.at(-1), ['resume', 's1', handle]);
  native.answers.dismiss = { status: 'completed', usageJson };
  const dismissed = await agent.dismiss('s1', 'the user moved on', handle);
  assert.deepEqual([dismissed.status, dismissed.finalText, dismissed.finishReason], ['completed', undefined, undefined]);
  assert.deepEqual(native.calls.at(-1), ['dismiss', 's1', 'the user moved on', handle]);
  native.answers.run = { status: 'awaiting_approval', usageJson };
  await assert.rejects(agent.run('s1', 'x'), (e) => e.code === 'run_outcome_invalid');
  native.answers.run = { status: 'exploded', usageJson };
  await assert.rejects(agent.run('s1', 'x'), (e) => e.code === 'run_status_unknown');
  const rejection = Object.assign(new Error('a batch is pending'), { code: 'approval_pending', layer: 'runtime' });
  native.answers.run = rejection;
  await assert.rejects(agent.run('s1', 'x'), (e) => M.agentErrorOf(e).code === 'approval_pending');
});

test('setMetadata hands the native Agent JSON text from a JsonValue, a JsonObject or a string; rejections keep their code', async () => {
  const { agent, native } = newAgent();
  assert.equal(await agent.setMetadata('s1', 'userId', M.JsonValue.string('u-42')), undefined);
  assert.deepEqual(native.calls.at(-1), ['setMetadata', 's1', 'userId', '"u-42"']);
  await agent.setMetadata('s1', 'profile', new M.JsonObject().setString('tier', 'gold').setArray('tags', [M.JsonValue.number(1)]));
  assert.deepEqual(native.calls.at(-1), ['setMetadata', 's1', 'profile', '{"tier":"gold","tags":[1]}']);
  await agent.setMetadata('s1', 'limits', '[1, 2]');
  assert.deepEqual(native.calls.at(-1), ['setMetadata', 's1', 'limits', '[1, 2]']);
  await agent.setMetadata('s1', 'userId', M.JsonValue.nullValue());
  assert.deepEqual(native.calls.at(-1), ['setMetadata', 's1', 'userId', 'null']);
  native.answers.setMetadata = Object.assign(new Error('session s1 is in use'), { code: 'session_busy', layer: 'persistence' });
  await assert.rejects(agent.setMetadata('s1', 'userId', '"x"'),
    (e) => M.agentErrorOf(e).code === 'session_busy' && M.agentErrorOf(e).layer === 'persistence');
});

test('approvals, the pending batch, the state and deletion are decoded from the native JSON', async () => {
  const { agent, native } = newAgent();
  const decided = structuredClone(BATCH);
  decided.items[0].decision = 'approved';
  native.answers.approve = JSON.stringify(decided);
  const approved = await agent.approve('s1', 'ap-1');
  assert.equal(approved.items[0].decision, 'approved');
  assert.equal(approved.pendingItems().length, 0);
  assert.deepEqual(native.calls.at(-1), ['approve', 's1', 'ap-1']);
  decided.items[0].decision = 'denied';
  decided.items[0].deny_reason = 'too risky';
  native.answers.deny = JSON.stringify(decided);
  assert.equal((await agent.deny('s1', 'ap-1', 'too risky')).items[0].denyReason, 'too risky');
  assert.deepEqual(native.calls.at(-1), ['deny', 's1', 'ap-1', 'too risky']);
  native.answers.denyAll = JSON.stringify(decided);
  assert.equal((await agent.denyAll('s1', 'too risky')).items[0].denyReason, 'too risky');
  assert.deepEqual(native.calls.at(-1), ['denyAll', 's1', 'too risky']);
  decided.items[0].decision = 'approved';
  delete decided.items[0].deny_reason;
  native.answers.approveAll = JSON.stringify(decided);
  assert.equal((await agent.approveAll('s1')).pendingItems().length, 0);
  assert.deepEqual(native.calls.at(-1), ['approveAll', 's1']);
  await agent.decide('s1', M.ApprovalAnswer.deny('ap-1'));
  assert.deepEqual(native.calls.at(-1), ['deny', 's1', 'ap-1', 'denied by the user']);
  await agent.decide('s1', M.ApprovalAnswer.approve('ap-1'));
  assert.deepEqual(native.calls.at(-1), ['approve', 's1', 'ap-1']);
  // An answer that neither approves nor denies (only untyped code can make one) is a coded error
  // and reaches neither native method.
  const callsBefore = native.calls.length;
  const pending = Object.assign(Object.create(M.ApprovalAnswer.prototype), { approvalId: 'ap-1', decision: 'pending' });
  await assert.rejects(agent.decide('s1', pending),
    (e) => M.agentErrorOf(e).code === 'approval_decision_unknown' && M.agentErrorOf(e).layer === 'decode');
  assert.equal(native.calls.length, callsBefore);
  native.answers.pendingApprovalJson = null;
  assert.equal(await agent.pendingApproval('s1'), undefined);
  native.answers.pendingApprovalJson = JSON.stringify(BATCH);
  assert.equal((await agent.pendingApproval('s1')).batchId, 'batch-1');
  // Parallel workers frozen side by side: each item's worker, as item_workers or worker_session names it.
  const beside = structuredClone(BATCH);
  beside.worker_session = 'w-a';
  beside.items.push({ ...structuredClone(BATCH.items[0]), approval_id: 'ap-2' });
  beside.item_workers = { 'ap-2': 'w-b' };
  native.answers.pendingApprovalJson = JSON.stringify(beside);
  const mirrored = await agent.pendingApproval('s1');
  assert.deepEqual(mirrored.items.map((i) => [i.approvalId, i.workerSession, mirrored.workerOf(i.approvalId)]),
    [['ap-1', 'w-a', 'w-a'], ['ap-2', 'w-b', 'w-b']]);
  native.answers.stateJson = null;
  assert.equal(await agent.state('s1'), undefined);
  native.answers.stateJson = '{"schema_version":3,"session_id":"s1","status":"idle"}';
  assert.equal((await agent.state('s1')).getString('session_id'), 's1');
  native.answers.deleteSession = true;
  assert.equal(await agent.deleteSession('s1'), true);
});

test('listSessions() reads every field of the native listing: busy, interrupted, an unreadable session\'s error', async () => {
  const { agent, native } = newAgent();
  const at = 1_764_000_000_000;
  native.sessions = [
    Native.sessionSummaryJson({ session_id: 'answered', message_count: 2, updated_at_ms: at, title: 'where is 20261010?',
      last_message: 'on its way' }),
    Native.sessionSummaryJson({ session_id: 'broken', status: null, updated_at_ms: at - 5,
      error: { layer: 'persistence', code: 'state_corrupt', message: 'snapshot checksum mismatch' } }),
    Native.sessionSummaryJson({ session_id: 'cut', status: 'running', interrupted: true, message_count: 3, title: 'clear it' }),
    Native.sessionSummaryJson({ session_id: 'elsewhere', status: 'running', busy: true, message_count: 1, title: 'plan' }),
    Native.sessionSummaryJson({ session_id: 'failed', status: 'failed', message_count: 1,
      run_error: { layer: 'provider', code: 'provider_auth', message: '401' } }),
    Native.sessionSummaryJson({ session_id: 'waiting', status: 'awaiting_approval', approval_pending: true, message_count: 2 }),
    Native.sessionSummaryJson({ session_id: 'w0123', status: 'awaiting_approval', approval_pending: true,
      parent_session: 'waiting', title: 'wipe the cache' }),
  ];
  const list = await agent.listSessions();
  assert.deepEqual(native.calls.at(-1), ['listSessionsJson', false]);
  assert.ok(list.every((s) => s instanceof M.SessionSummary));
  assert.deepEqual(list.map((s) => [s.sessionId, s.status, s.approvalPending, s.interrupted, s.busy, s.canContinue()]), [
    ['answered', M.RunStatus.completed, false, false, false, false],
    ['broken', undefined, false, false, false, false],
    ['cut', M.RunStatus.running, false, true, false, true],
    ['elsewhere', M.RunStatus.running, false, false, true, false],
    ['failed', M.RunStatus.failed, false, false, false, false],
    ['waiting', M.RunStatus.awaitingApproval, true, false, false, false],
  ], 'the worker is left out, its parent listed');
  const [answered, broken] = list;
  assert.deepEqual([answered.messageCount, answered.updatedAtMs, answered.title, answered.lastMessage, answered.runError,
    answered.parentSession, answered.error], [2, at, 'where is 20261010?', 'on its way', undefined, undefined, undefined]);
  assert.deepEqual([broken.error.layer, broken.error.code, broken.error.message, broken.messageCount, broken.title],
    ['persistence', 'state_corrupt', 'snapshot checksum mismatch', 0, undefined]);
  assert.equal(list[4].runError.code, 'provider_auth');
  assert.deepEqual(M.SessionSummary.byRecency(list).slice(0, 2).map((s) => s.sessionId), ['answered', 'broken']);

  const all = await agent.listSessions(true);
  assert.deepEqual(native.calls.at(-1), ['listSessionsJson', true]);
  const worker = all.find((s) => s.sessionId === 'w0123');
  assert.deepEqual([worker.parentSession, worker.approvalPending, worker.title], ['waiting', true, 'wipe the cache']);

  // What the native side rejects with keeps its code; an answer of another shape is a JsonError.
  native.answers.listSessionsJson = Object.assign(new Error('cannot read the state dir'), { code: 'state_io', layer: 'persistence' });
  await assert.rejects(agent.listSessions(), (e) => M.agentErrorOf(e).code === 'state_io');
  const invalid = async (text) => {
    native.answers.listSessionsJson = text;
    try {
      await agent.listSessions();
    } catch (e) {
      return e instanceof M.JsonError ? e.code : `not a JsonError: ${e}`;
    }
    return 'no error';
  };
  assert.equal(await invalid('{}'), 'session_summary_invalid');
  const { busy, ...withoutBusy } = Native.sessionSummaryJson();
  assert.equal(busy, false);
  assert.equal(await invalid(JSON.stringify([withoutBusy])), 'session_summary_invalid', 'busy is required');
  assert.equal(await invalid(JSON.stringify([Native.sessionSummaryJson({ busy: 'yes' })])), 'session_summary_invalid');
  native.answers.listSessionsJson = '[]';
  assert.deepEqual(await agent.listSessions(), []);
});

test('definitions() reads the native definitionsJson of the registered tools, in order', () => {
  const { agent, native } = newAgent();
  assert.deepEqual(agent.definitions(), []);
  class Noop { async execute() { return M.ToolResult.text('ok'); } }
  agent.registerTool(new M.ToolDefinition('query_order', 'Queries an order', schema()), new Noop());
  agent.registerTool(new M.ToolDefinition('clear_baking_cache', 'Clears', '{"type":"object"}', M.ToolRiskLevel.dangerous,
    true, 1500), new Noop());
  const text = native.definitionsJson();
  assert.deepEqual(JSON.parse(text)[1], { name: 'clear_baking_cache', description: 'Clears', parameters: { type: 'object' },
    risk_level: 'dangerous', idempotent: true, timeout: 1500 }, 'the core\'s serialised shape');
  const defs = agent.definitions();
  assert.ok(defs.every((d) => d instanceof M.ToolDefinition));
  assert.deepEqual(defs.map((d) => [d.name, d.description, d.riskLevel, d.idempotent, d.timeoutMs]), [
    ['query_order', 'Queries an order', M.ToolRiskLevel.safe, false, undefined],
    ['clear_baking_cache', 'Clears', M.ToolRiskLevel.dangerous, true, 1500],
  ]);
  assert.equal(defs[0].parametersJson(), schema().toJsonString());
  // An answer of another shape is a JsonError tool_definition_invalid.
  for (const bad of ['{}', '[1]', '[{"name":"x"}]']) {
    native.answers.definitionsJson = bad;
    assert.throws(() => agent.definitions(), (e) => e instanceof M.JsonError && e.code === 'tool_definition_invalid', bad);
  }
});
