// The ArkTS adapters and the demo's tools against the REAL native module (the cdylib built with the
// `napi` feature; scripts/test.sh sets ARKAGENT_SO, else tests/node/helper.mjs builds it): the
// demo's definitions go through toolDefinitionObject into a native ToolRegistry (so the whitelisted
// schema validator accepts them), calls go through the native gates and executorFunction to the
// ArkTS executors and back, and each step of the offline scenario meets the gate it is meant to.
// When the native module exports the Agent class, the whole offline scenario also runs through the
// ArkTS Agent wrapper: suspended for approval, reloaded from disk by a new agent (the app killed),
// approved and resumed to the final answer.
// Run: node --test scripts/arkts-check/native.test.mjs

import { test, before } from 'node:test';
import assert from 'node:assert/strict';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { transpileFile } from './transpile.mjs';
import { realBindings } from './real_bindings.mjs';
import { rejectsWithCode, throwsWithCode } from '../../tests/node/helper.mjs';
import { tempDir } from './tmp.mjs';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';

const HERE = path.dirname(fileURLToPath(import.meta.url));
const ROOT = path.resolve(HERE, '..', '..');
const DEMO_ETS = path.join(ROOT, 'entry-demo', 'entry', 'src', 'main', 'ets');

let native; // the real module
let B; // the bindings, importing the real module as 'libarkagent.so'
let D; // the demo's tools and scenario

before(async () => {
  let dir;
  let barrel;
  ({ native, bindings: B, dir, barrel } = await realBindings('arkagent-native-'));
  D = {};
  for (const rel of ['tools/BakingTools', 'tools/OrderTools', 'demo/OfflineScenario', 'demo/Conversations']) {
    const out = path.join(dir, 'demo', `${rel}.mjs`);
    transpileFile(path.join(DEMO_ETS, `${rel}.ets`), out, { '@arkagent/bindings': barrel });
    Object.assign(D, await import(pathToFileURL(out).href));
  }
});

function demoRegistry() {
  const registry = new native.ToolRegistry();
  const store = new D.BakingStore();
  const tools = [
    [D.readBakingRecordsDefinition(), new D.ReadBakingRecordsTool(store)],
    [D.clearBakingCacheDefinition(), new D.ClearBakingCacheTool(store)],
    [D.queryOrderDefinition(), new D.QueryOrderTool()],
    [D.queryStockDefinition(), new D.QueryStockTool()],
  ];
  for (const [definition, executor] of tools) {
    registry.register(B.toolDefinitionObject(definition), B.executorFunction(executor));
  }
  return { registry, store };
}

/** The ArkTS Agent on a scripted model and `stateDir`, with the demo's four tools. */
function demoAgent(stateDir, script) {
  const config = B.AgentConfig.scripted(script);
  config.stateDir = stateDir;
  const agent = new B.Agent(config);
  const store = new D.BakingStore();
  agent.registerTool(D.readBakingRecordsDefinition(), new D.ReadBakingRecordsTool(store));
  agent.registerTool(D.clearBakingCacheDefinition(), new D.ClearBakingCacheTool(store));
  agent.registerTool(D.queryOrderDefinition(), new D.QueryOrderTool());
  agent.registerTool(D.queryStockDefinition(), new D.QueryStockTool());
  return { agent, store };
}

test('the demo definitions pass the native schema validator and keep their risk levels', () => {
  const { registry } = demoRegistry();
  assert.deepEqual(registry.names(), ['read_baking_records', 'clear_baking_cache', 'query_order', 'query_stock']);
  const defs = JSON.parse(registry.definitionsJson());
  assert.deepEqual(defs.map((d) => d.risk_level), ['safe', 'dangerous', 'safe', 'safe']);
  assert.deepEqual(defs[2].parameters, JSON.parse(D.queryOrderDefinition().parametersJson()));
  assert.equal(defs[0].timeout, 5000);
});

test('ArkTS executors run behind the native gates; results come back in the native shape', async () => {
  const { registry, store } = demoRegistry();
  const order = await registry.execute({ id: 'c1', name: 'query_order', arguments: '{"order_id":"20261010"}' });
  assert.equal(order.isError, false);
  assert.equal(order.contents[0].type, 'json');
  assert.deepEqual(JSON.parse(order.contents[0].json),
    { order_id: '20261010', status: 'shipped', logistics: 'SF Express SF123456', eta: '2026-10-12' });
  const missing = await registry.execute({ id: 'c2', name: 'read_baking_records', arguments: '{"recordId":"r9"}' });
  assert.equal(missing.isError, true, 'an error result is a result, not a rejection');
  const cleared = await registry.execute({ id: 'c3', name: 'clear_baking_cache', arguments: '{"confirm":"yes"}' },
    undefined, { sessionId: 'demo', metadataJson: '{"user":"u1"}' });
  assert.equal(cleared.contents[0].text, 'baking cache cleared: 12 entries removed');
  assert.deepEqual(JSON.parse(cleared.metadataJson), { removed: 12 });
  assert.equal(store.cachedEntries, 0);
});

test('an ArkTS executor reads its arguments\' numbers as written, and its JSON result keeps them', async () => {
  const registry = new B.ToolRegistry();
  let seen;
  class Echo {
    async execute(args) {
      seen = args.get('id').asNumberText();
      return B.ToolResult.json(args.get('id'));
    }
  }
  registry.register(new B.ToolDefinition('echo', 'Echoes the id', '{"type":"object"}'), new Echo());
  const result = await registry.execute(new B.ToolCall('c1', 'echo', '{"id":9007199254740993}'));
  assert.equal(seen, '9007199254740993', 'JSON.parse would give 9007199254740992');
  // The result crossed the native module as JSON text and was read back: still exact.
  assert.equal(result.toModelText(), '9007199254740993');
});

test('each step of the offline scenario meets its gate in the native registry', async () => {
  const { registry } = demoRegistry();
  const calls = JSON.parse(D.offlineRunScript()).flatMap((a) => a.tool_calls ?? []);
  const outcome = async (call) => {
    try {
      const r = await registry.execute(call);
      return r.isError ? 'error result' : 'ok';
    } catch (e) {
      return e.code;
    }
  };
  const got = [];
  for (const call of calls) got.push(`${call.name}: ${await outcome(call)}`);
  assert.deepEqual(got, [
    'query_order: ok',
    'check_weather: tool_not_found',
    'query_stock: tool_argument_type_mismatch',
    'query_stock: ok',
    'clear_baking_cache: ok', // the registry runs it; the Agent's approval policy holds it first
  ]);
});

test('the ArkTS ToolRegistry over the real one: services, ArkAgentError codes, copyIntoExcluding', async () => {
  class Orders {
    constructor() { this.serviceId = 'orders'; this.locked = new Set(['7']); }
  }
  class Cancel {
    async execute(args, ctx) {
      const orders = ctx.services.get('orders');
      const id = args.getString('order_id');
      if (orders === undefined) throw new Error('no orders service');
      if (orders.locked.has(id)) throw B.ArkAgentError.tool('order_locked', `order ${id} is locked`);
      if (id === 'crash') throw new Error('database offline');
      return B.ToolResult.json(B.JsonValue.object(new B.JsonObject().setString('cancelled', id)
        .setNumber('schema', ctx.state.schemaVersion).setString('user', ctx.state.metadata.getString('user') ?? '')));
    }
  }
  const schema = '{"type":"object","properties":{"order_id":{"type":"string"}},"required":["order_id"]}';
  const parent = new B.ToolRegistry();
  assert.equal(parent.registerService(new Orders()), true);
  parent.register(new B.ToolDefinition('cancel_order', 'Cancels', schema, B.ToolRiskLevel.dangerous), new Cancel());
  parent.register(new B.ToolDefinition('purge_orders', 'Purges', '{"type":"object"}'), new Cancel());
  const call = (id) => new B.ToolCall('c1', 'cancel_order', JSON.stringify({ order_id: id }));
  const ok = await parent.execute(call('5'), undefined, 's1', 'b1', new B.JsonObject().setString('user', 'u1'));
  assert.deepEqual(JSON.parse(ok.toModelText()), { cancelled: '5', schema: 2, user: 'u1' });
  // The domain error crosses the real native module with its code and message.
  await assert.rejects(parent.execute(call('7')), (e) => {
    const info = B.agentErrorOf(e);
    return info.code === 'order_locked' && info.layer === 'tool' && info.message === 'order 7 is locked';
  });
  await assert.rejects(parent.execute(call('crash')), (e) => B.agentErrorOf(e).code === 'tool_execution_failed'
    && /database offline/.test(e.message));
  // A worker registry without purge_orders; the copied tool keeps its registry's services.
  const worker = new B.ToolRegistry();
  parent.copyIntoExcluding(worker, ['purge_orders']);
  assert.deepEqual(worker.names(), ['cancel_order']);
  assert.deepEqual(worker.definitions().map((d) => [d.name, d.riskLevel]), [['cancel_order', 'dangerous']]);
  await assert.rejects(worker.execute(call('7')), (e) => B.agentErrorOf(e).code === 'order_locked');
  await assert.rejects(worker.execute(new B.ToolCall('c2', 'purge_orders', '{}')), (e) => B.agentErrorOf(e).code === 'tool_not_found');
  assert.throws(() => parent.copyInto(worker), (e) => B.agentErrorOf(e).code === 'tool_name_duplicate');
  assert.deepEqual(worker.names(), ['cancel_order'], 'a clash leaves the target unchanged');
});

test('the ArkTS ToolRegistry refuses delegate_task with tool_name_reserved, as the Agent does, so no copy carries one', () => {
  class NoopExecutor {
    async execute() { return B.ToolResult.text('mine'); }
  }
  const registry = new B.ToolRegistry();
  const e = throwsWithCode(assert,
    () => registry.register(new B.ToolDefinition('delegate_task', 'mine', '{"type":"object"}'), new NoopExecutor()),
    'tool_name_reserved', 'config');
  assert.match(e.message, /delegate_task is reserved for delegation to sub-agents/);
  assert.deepEqual(registry.names(), []);
  // The Agent's own refusal, delegation off, is the same error.
  const agent = new B.Agent(B.AgentConfig.scripted('[]'));
  const agentError = throwsWithCode(assert,
    () => agent.registerTool(new B.ToolDefinition('delegate_task', 'mine', '{"type":"object"}'), new NoopExecutor()),
    'tool_name_reserved', 'config');
  assert.equal(e.message, agentError.message);
  // Nothing to copy: a registry given to copyInto never holds one.
  const target = new B.ToolRegistry();
  registry.copyInto(target);
  assert.deepEqual(target.names(), []);
});

test('through the real ArkTS Agent: services reach the tools, a domain error keeps its code, the batch has its model message',
  async () => {
    const stateDir = tempDir('arkagent-services-state-');
    const script = JSON.stringify([
      { content: 'Checking.', tool_calls: [{ id: 'c1', name: 'plan', arguments: '{"status":"x"}' }] },
      { tool_calls: [{ id: 'c2', name: 'clear_baking_cache', arguments: '{"confirm":"yes"}' }] },
      { content: 'done' },
    ]);
    const { agent } = demoAgent(stateDir, script);
    class Statuses { constructor() { this.serviceId = 'statuses'; this.known = ['todo', 'done']; } }
    assert.equal(agent.registerService(new Statuses()), true);
    class Plan {
      async execute(args, ctx) {
        const status = args.getString('status') ?? '';
        if (!ctx.services.get('statuses').known.includes(status)) {
          throw B.ArkAgentError.tool('plan_todo_status_unknown', `status '${status}' is unknown`);
        }
        return B.ToolResult.text('planned');
      }
    }
    agent.registerTool(new B.ToolDefinition('plan', 'Plans', '{"type":"object"}'), new Plan());
    const outcome = await agent.run('svc-1', 'plan and clear');
    assert.equal(outcome.status, 'awaiting_approval');
    const state = await agent.state('svc-1');
    const messages = state.getArray('messages').map((m) => m.asObject());
    const planResult = messages.find((m) => m.getString('tool_call_id') === 'c1');
    assert.equal(planResult.getString('content'), "error [plan_todo_status_unknown]: status 'x' is unknown");
    assert.equal(planResult.getBool('is_error'), true);
    // The frozen batch carries the model's answer holding its call.
    const message = outcome.batch.modelMessage;
    assert.ok(message instanceof B.AssistantMessage);
    assert.deepEqual(message.toolCalls.map((c) => [c.id, c.name, c.argumentsJson]),
      [['c2', 'clear_baking_cache', '{"confirm":"yes"}']]);
    assert.deepEqual(message.toolCalls.map((c) => c.id), outcome.batch.items.map((i) => i.toolCall.id));
    const reloaded = await agent.pendingApproval('svc-1');
    assert.equal(reloaded.modelMessage.toJson().toJsonString(), message.toJson().toJsonString());
  });

test('through the real ArkTS Agent: the batch\'s calls plan, as the module froze it (run, answer, confirm)', async () => {
  const script = JSON.stringify([
    { tool_calls: [
      { id: 'c1', name: 'query_order', arguments: '{"order_id":"20261010"}' },
      { id: 'c2', name: 'clear_baking_cache', arguments: '{"confirm":"yes"}' },
      { id: 'c3', name: 'query_stock', arguments: '{"sku":"A"}' },
    ] },
    { content: 'done' },
  ]);
  const { agent } = demoAgent(tempDir('arkagent-plan-state-'), script);
  class NoStock {
    decide(call, definition) {
      if (call.name === 'query_stock') return B.ApprovalPolicyResult.deny('stock is private');
      return new B.DefaultToolApprovalPolicy().decide(call, definition);
    }
  }
  agent.setApprovalPolicy(new NoStock());
  const outcome = await agent.run('plan-1', 'go');
  assert.equal(outcome.status, 'awaiting_approval');
  for (const batch of [outcome.batch, await agent.pendingApproval('plan-1')]) {
    assert.deepEqual(batch.calls.map((c) => [c.toolCall.id, c.toolCall.name, c.plan]),
      [['c1', 'query_order', 'run'], ['c2', 'clear_baking_cache', 'confirm'], ['c3', 'query_stock', 'answer']]);
    assert.ok(batch.calls.every((c) => c instanceof B.BatchCall));
    assert.equal(batch.calls[1].approvalId, batch.items[0].approvalId);
    assert.equal(batch.calls[0].result, undefined);
    const denied = batch.calls[2].result;
    assert.ok(denied instanceof B.ToolResult);
    assert.equal(denied.isError, true);
    assert.match(denied.toModelText(), /denied by policy: stock is private/);
  }
});

test('through the real ArkTS Agent: setMetadata reaches ToolContext.state.metadata of the next run, durably', async () => {
  const stateDir = tempDir('arkagent-metadata-state-');
  const script = JSON.stringify([{ tool_calls: [{ id: 'c1', name: 'whoami', arguments: '{}' }] }, { content: 'done' }]);
  const config = B.AgentConfig.scripted(script);
  config.stateDir = stateDir;
  const first = new B.Agent(config);
  await first.setMetadata('m-1', 'userId', B.JsonValue.string('u-42'));
  await first.setMetadata('m-1', 'profile', new B.JsonObject().setString('tier', 'gold'));
  await first.setMetadata('m-1', 'locale', '"zh-CN"');
  await first.setMetadata('m-1', 'locale', B.JsonValue.nullValue());
  await rejectsWithCode(assert, first.setMetadata('m-1', '', '1'), 'metadata_key_invalid', 'config');
  await rejectsWithCode(assert, first.setMetadata('m-1', 'userId', 'u-42'), 'json_invalid', 'decode');
  // A new Agent over the same directory (the app restarted) runs the session.
  const agent = new B.Agent(config);
  const seen = [];
  class WhoAmI {
    async execute(_args, ctx) {
      seen.push([ctx.state.metadata.getString('userId'), ctx.state.metadata.toJsonString()]);
      return B.ToolResult.text('ok');
    }
  }
  agent.registerTool(new B.ToolDefinition('whoami', 'The user', '{"type":"object"}'), new WhoAmI());
  const outcome = await agent.run('m-1', 'who am I?');
  assert.equal(outcome.status, 'completed');
  assert.deepEqual(seen, [['u-42', '{"profile":{"tier":"gold"},"userId":"u-42"}']]);
  const state = await agent.state('m-1');
  assert.equal(state.getObject('metadata').toJsonString(), '{"profile":{"tier":"gold"},"userId":"u-42"}');
});

test('through the real ArkTS Agent: an integer beyond 2^53 set with setMetadata reaches ctx.state.metadata exact', async () => {
  const BIG = '12345678901234567891';
  const script = JSON.stringify([{ tool_calls: [{ id: 'c1', name: 'reads', arguments: '{}' }] }, { content: 'done' }]);
  const agent = new B.Agent(B.AgentConfig.scripted(script));
  const seen = {};
  class Reads {
    async execute(_args, ctx) {
      seen.metadata = ctx.state.metadata.get('uid').asNumberText();
      return B.ToolResult.json(B.JsonValue.numberLiteral(BIG));
    }
  }
  agent.registerTool(new B.ToolDefinition('reads', 'Reads the metadata', '{"type":"object"}'), new Reads());
  agent.addEventListener((e) => {
    if (e instanceof B.ToolResultEvent) seen.event = e.result.contents[0].value.asNumberText();
  });
  await agent.setMetadata('big-1', 'uid', BIG);
  const outcome = await agent.run('big-1', 'go');
  assert.equal(outcome.status, 'completed');
  assert.deepEqual(seen, { metadata: BIG, event: BIG });
  assert.equal((await agent.state('big-1')).getObject('metadata').get('uid').asNumberText(), BIG);
});

test('through the real ArkTS Agent: AgentConfig.loopDiagnosis reaches the native diagnosis (scripted verdicts)', async () => {
  // With 'scripted', a diagnosis takes the next scripted answer: two rounds of calls, then the verdict.
  const verdict = (confidence) => ({ content: JSON.stringify({ is_loop: true, confidence, reason: 'same lookups' }) });
  const calls = [{ tool_calls: [{ id: 'c1', name: 'whoami', arguments: '{"n":1}' }] },
    { tool_calls: [{ id: 'c2', name: 'whoami', arguments: '{"n":2}' }] }];
  const outcomes = [];
  for (const confidence of [0.9, 0.5]) {
    const config = B.AgentConfig.scripted(JSON.stringify([...calls, verdict(confidence), { content: 'done' }]));
    config.loopDiagnosis = new B.LoopDiagnosis(2, 1, 0.8);
    const agent = new B.Agent(config);
    class Echo { async execute() { return B.ToolResult.text('ok'); } }
    agent.registerTool(new B.ToolDefinition('whoami', 'The user', '{"type":"object"}'), new Echo());
    const outcome = await agent.run(`diag-${confidence}`, 'go');
    outcomes.push([outcome.status, outcome.error?.code, outcome.finalText]);
  }
  assert.deepEqual(outcomes, [['loop_detected', 'loop_detected', undefined], ['completed', undefined, 'done']]);
  const bad = B.AgentConfig.scripted('[]');
  bad.loopDiagnosis = new B.LoopDiagnosis(0);
  assert.throws(() => new B.Agent(bad), (e) => e.code === 'config_invalid' && /loopDiagnosis\.firstRound/.test(e.message));
});

test('a native cancellation handle reaches the ArkTS executor signal; the runtime answers tool_cancelled', async () => {
  const registry = new native.ToolRegistry();
  let release;
  const started = new Promise((resolve) => { release = resolve; });
  const seen = [];
  class Waits {
    execute(args, ctx) {
      ctx.signal.onCancel((reason) => seen.push(`${ctx.signal.cancelled}:${reason}`));
      release();
      return new Promise(() => {}); // only the cancellation ends this call
    }
  }
  registry.register(B.toolDefinitionObject(new B.ToolDefinition('waits', 'd', '{"type":"object"}')), B.executorFunction(new Waits()));
  const handle = new native.CancellationHandle();
  const pending = registry.execute({ id: 'c1', name: 'waits', arguments: '{}' }, handle);
  await started;
  handle.cancel('user tapped cancel');
  const e = await rejectsWithCode(assert, pending, 'tool_cancelled', 'cancelled');
  assert.match(e.message, /user tapped cancel/);
  for (let i = 0; i < 100 && seen.length === 0; i++) await new Promise((r) => setTimeout(r, 10));
  assert.deepEqual(seen, ['true:user tapped cancel'], 'the executor saw the cancellation through ToolContext.signal');
});

test('an ArkTS Agent the app dropped is collected: what it gave the native module does not hold it', async () => {
  setFlagsFromString('--expose-gc');
  const gc = runInNewContext('gc');
  let collected = 0;
  const registry = new FinalizationRegistry(() => collected++);
  class Notes extends B.AgentHook {
    onRunStart() {}
  }
  // An agent with a listener, an error handler, a hook and a policy, run once and dropped.
  async function useOnce(i) {
    const agent = new B.Agent(B.AgentConfig.scripted(JSON.stringify([{ content: `answer ${i}` }])));
    registry.register(agent, null);
    const events = [];
    agent.addEventListener((e) => events.push(e));
    agent.setErrorHandler(() => {});
    agent.addHook(new Notes());
    agent.setApprovalPolicy({ decide() { return B.ApprovalPolicyResult.allow(); } });
    const outcome = await agent.run('s', 'hi');
    assert.equal(outcome.finalText, `answer ${i}`);
    assert.ok(events.length > 0);
  }
  const agents = 10;
  for (let i = 0; i < agents; i++) await useOnce(i);
  for (let i = 0; i < 100 && collected < agents; i++) {
    gc();
    await new Promise((r) => setTimeout(r, 10));
  }
  assert.equal(collected, agents, 'every dropped agent was collected');
});

test('the offline scenario through the ArkTS Agent: suspend, kill, reload, approve, resume',
  async () => {
    assert.equal(typeof globalThis.__arkagentNative?.Agent, 'function', 'the native module has an Agent class');
    const stateDir = tempDir('arkagent-demo-state-');
    const build = (script) => {
      const { agent, store } = demoAgent(stateDir, script);
      const events = [];
      agent.addEventListener((e) => events.push(e));
      return { agent, events, store };
    };
    const first = build(D.offlineRunScript());
    const suspended = await first.agent.run('demo-1', D.OFFLINE_PROMPT);
    assert.equal(suspended.status, 'awaiting_approval');
    assert.deepEqual(suspended.batch.pendingItems().map((i) => i.toolCall.name), ['clear_baking_cache']);
    const results = first.events.filter((e) => e instanceof B.ToolResultEvent);
    assert.deepEqual(results.map((e) => [e.name, e.result.isError]),
      [['query_order', false], ['check_weather', true], ['query_stock', true]]);
    assert.ok(first.events.some((e) => e instanceof B.TextDeltaEvent));
    // The app is killed; a new agent over the same state directory finds the frozen batch.
    const second = build(D.offlineResumeScript());
    const pending = await second.agent.pendingApproval('demo-1');
    assert.equal(pending.batchId, suspended.batch.batchId);
    const chats = async (agent) => D.ConversationRow.fromSummaries(await agent.listSessions(), 'demo-1', Date.now())
      .map((r) => [r.sessionId, r.title, r.detail, r.needsApproval, r.canContinue]);
    assert.deepEqual(await chats(second.agent),
      [['demo-1', D.OFFLINE_PROMPT.slice(0, 59) + '…', 'waiting for your approval · just now', true, false]]);
    const decided = await second.agent.approve('demo-1', pending.items[0].approvalId);
    assert.equal(decided.pendingItems().length, 0);
    // Killed again between the decision and Resume: the Chats list offers Continue.
    const third = build(D.offlineResumeScript());
    assert.deepEqual((await chats(third.agent)).map((r) => r.slice(2)),
      [['interrupted: tap Continue · just now', false, true]]);
    const done = await second.agent.resume('demo-1');
    assert.deepEqual((await chats(third.agent)).map((r) => r.slice(2)), [['answered · just now', false, false]]);
    assert.equal(done.status, 'completed');
    assert.match(done.finalText, /20261010/);
    assert.equal(second.store.cachedEntries, 0, 'the approved call ran');
    assert.equal(await second.agent.pendingApproval('demo-1'), undefined);
  });

test('through the real ArkTS Agent: a worker\'s events arrive as WorkerEvent, its own events inside', async () => {
  const stateDir = tempDir('arkagent-worker-events-');
  const script = JSON.stringify([
    { tool_calls: [{ id: 'd1', name: 'delegate_task', arguments: '{"task":"where is 20261010?"}' }] },
    { tool_calls: [{ id: 'w1', name: 'query_order', arguments: '{"order_id":"20261010"}' }] }, // the worker
    { content: 'Shipped.' }, // the worker's answer
    { content: 'The worker says: shipped.' },
  ]);
  const config = B.AgentConfig.scripted(script);
  config.stateDir = stateDir;
  config.enableDelegation = true;
  const agent = new B.Agent(config);
  agent.registerTool(D.queryOrderDefinition(), new D.QueryOrderTool());
  const events = [];
  agent.addEventListener((e) => events.push(e));
  const done = await agent.run('deleg-1', 'where is my order?');
  assert.equal(done.status, 'completed');
  const workers = events.filter((e) => e instanceof B.WorkerEvent);
  assert.ok(workers.length > 0);
  assert.ok(workers.every((e) => e.kind === 'worker_event' && e.callId === 'd1' && e.depth() === 1));
  const inner = workers.map((e) => e.innermost());
  assert.ok(inner[0] instanceof B.RunStartedEvent);
  assert.equal(inner[0].sessionId, workers[0].sessionId);
  const result = inner.find((e) => e instanceof B.ToolResultEvent);
  assert.deepEqual([result.callId, result.name, result.result.isError], ['w1', 'query_order', false]);
  assert.ok(inner.at(-1) instanceof B.RunFinishedEvent);
  assert.equal(inner.at(-1).finalText, 'Shipped.');
  const parentResult = events.findIndex((e) => e instanceof B.ToolResultEvent && e.callId === 'd1');
  assert.equal(parentResult, events.indexOf(workers.at(-1)) + 1, 'the worker\'s events precede the call\'s result');
});

test('through the real ArkTS Agent: parallel workers frozen side by side, each item names its own worker', async () => {
  const script = JSON.stringify([
    { tool_calls: [{ id: 'p1', name: 'delegate_task', arguments: '{"task":"A"}' },
      { id: 'p2', name: 'delegate_task', arguments: '{"task":"B"}' }] },
    { tool_calls: [{ id: 'w1', name: 'danger', arguments: '{}' }] }, // worker A
    { tool_calls: [{ id: 'w2', name: 'danger', arguments: '{}' }] }, // worker B
    { content: 'done' }, { content: 'done' }, { content: 'final' },
  ]);
  const config = B.AgentConfig.scripted(script);
  config.stateDir = tempDir('arkagent-item-workers-');
  config.enableDelegation = true;
  const agent = new B.Agent(config);
  class DangerTool {
    async execute() { return B.ToolResult.text('ran'); }
  }
  agent.registerTool(new B.ToolDefinition('danger', 'a dangerous tool', '{"type":"object"}', B.ToolRiskLevel.dangerous),
    new DangerTool());
  const events = [];
  agent.addEventListener((e) => events.push(e));
  const out = await agent.run('workers-1', 'go');
  assert.ok(out.isAwaitingApproval());
  // Each worker's session, by the call it made (its tool_call_started, inside its WorkerEvent).
  const workerOfCall = new Map();
  for (const e of events) {
    if (e instanceof B.WorkerEvent && e.innermost() instanceof B.ToolCallStartedEvent) {
      workerOfCall.set(e.innermost().callId, e.sessionId);
    }
  }
  assert.deepEqual([...workerOfCall.keys()].sort(), ['w1', 'w2']);
  assert.equal(new Set(workerOfCall.values()).size, 2, 'two workers');
  for (const batch of [out.batch, await agent.pendingApproval('workers-1')]) {
    assert.equal(batch.items.length, 2);
    const expected = batch.items.map((i) => workerOfCall.get(i.toolCall.id));
    assert.deepEqual(batch.items.map((i) => i.workerSession), expected);
    assert.deepEqual(batch.items.map((i) => batch.workerOf(i.approvalId)), expected);
    assert.equal(batch.workerSession, expected[0], 'the batch\'s own worker: its first item\'s');
  }
  await agent.approveAll('workers-1');
  const done = await agent.resume('workers-1');
  assert.equal(done.status, 'completed');
  assert.equal(done.finalText, 'final');
});

test('through the real ArkTS Agent: a failed run\'s RunFinishedEvent has the outcome\'s error; every event its run id',
  async () => {
    // The script ends after the tool call: the second model round fails (provider_script_exhausted).
    const script = JSON.stringify([{ tool_calls: [{ id: 'q1', name: 'query_order', arguments: '{"order_id":"20261010"}' }] }]);
    const agent = new B.Agent(B.AgentConfig.scripted(script));
    agent.registerTool(D.queryOrderDefinition(), new D.QueryOrderTool());
    const events = [];
    agent.addEventListener((e) => events.push(e));
    const out = await agent.run('fail-1', 'where is my order?');
    assert.equal(out.status, 'failed');
    assert.ok(out.error !== undefined);
    const finished = events.at(-1);
    assert.ok(finished instanceof B.RunFinishedEvent);
    assert.ok(finished.error instanceof B.AgentErrorInfo, 'the event carries the error');
    assert.deepEqual([finished.error.layer, finished.error.code, finished.error.message],
      [out.error.layer, out.error.code, out.error.message]);
    assert.ok(events[0] instanceof B.RunStartedEvent && events[0].runId !== '');
    assert.ok(events.length > 4);
    for (const e of events) assert.equal(e.runId, events[0].runId, e.kind);
  });

test('through the real ArkTS Agent: an async listener\'s rejection is reported as \'listener\', as a throw is', async () => {
  const agent = new B.Agent(B.AgentConfig.scripted('[{"content":"hello"}]'));
  const errors = [];
  agent.setErrorHandler((where, e) => errors.push(`${where}: ${e.message}`));
  agent.addEventListener(async (e) => {
    if (e instanceof B.RunFinishedEvent) {
      await null;
      throw new Error('render failed');
    }
  });
  agent.addEventListener((e) => {
    if (e instanceof B.RunStartedEvent) throw new Error('sync listener failed');
  });
  const unhandled = [];
  const onUnhandled = (e) => unhandled.push(e);
  process.on('unhandledRejection', onUnhandled);
  try {
    const out = await agent.run('async-listener-1', 'hi');
    assert.equal(out.status, 'completed');
    await new Promise((resolve) => setTimeout(resolve, 50));
  } finally {
    process.off('unhandledRejection', onUnhandled);
  }
  assert.deepEqual(unhandled, []);
  assert.deepEqual(errors, ['listener: sync listener failed', 'listener: render failed']);
});

test('an ArkTS AgentHook through the real Agent: all nine methods, each with its session, run and round', async () => {
  const stateDir = tempDir('arkagent-hook-state-');
  const build = (script) => demoAgent(stateDir, script).agent;
  const log = [];
  const runs = new Set();
  const note = (ctx, ...what) => {
    assert.equal(ctx.sessionId, 'demo-h');
    runs.add(ctx.runId);
    log.push([what[0], ctx.round, ...what.slice(1)]);
  };
  class Everything extends B.AgentHook {
    onRunStart(ctx) { note(ctx, 'start'); }
    beforeModelCall(ctx) { note(ctx.hook, 'model', ctx.request().getArray('messages').length, ctx.toolNames().length); }
    async afterModelResponse(ctx) { note(ctx.hook, 'response', ctx.toolCalls.map((c) => c.name).join(',')); }
    beforeToolCall(ctx) {
      note(ctx.hook, 'before', ctx.toolCall.name, ctx.definition?.name ?? null);
      return B.ToolCallHookResult.proceed();
    }
    afterToolCall(ctx) {
      note(ctx.hook, 'after', ctx.toolCall.name, ctx.result.isError);
      return B.AfterToolCallHookResult.proceed();
    }
    onApprovalRequired(ctx, batch) { note(ctx, 'approval', batch.pendingItems().map((i) => i.toolCall.name).join(',')); }
    beforePersistState(ctx) {
      note(ctx.hook, 'persist', ctx.state().getString('status'));
      return B.PersistDecision.skip;
    }
    onRunEnd(ctx, status, finalText) { note(ctx, 'end', status, typeof finalText); }
    onError(ctx, error) { note(ctx, 'error', error.code); }
  }
  const errors = [];
  const agent = build(D.offlineRunScript());
  agent.setErrorHandler((where, e) => errors.push(`${where}: ${e.message}`));
  agent.addHook(new Everything());
  const suspended = await agent.run('demo-h', D.OFFLINE_PROMPT);
  assert.equal(suspended.status, 'awaiting_approval');
  const pending = await agent.pendingApproval('demo-h');
  assert.equal(pending.batchId, suspended.batch.batchId, 'the frozen batch was saved although the hook skips saves');
  const model = log.filter((l) => l[0] === 'model');
  assert.deepEqual(model.map((l) => l[1]), model.map((_, i) => i + 1), 'each model call sees its round');
  assert.ok(model.every((l) => l[3] === 4), 'every request offers the four tools');
  const approval = log.find((l) => l[0] === 'approval');
  assert.equal(approval[2], 'clear_baking_cache');
  assert.ok(log.some((l) => l[0] === 'before' && l[2] === 'check_weather' && l[3] === null), 'an unknown tool has no definition');
  assert.ok(log.some((l) => l[0] === 'after' && l[2] === 'query_order' && l[3] === false));
  assert.ok(log.some((l) => l[0] === 'persist' && l[2] === 'awaiting_approval'));
  assert.deepEqual(log[0], ['start', 0]);

  const resumed = build(D.offlineResumeScript());
  resumed.addHook(new Everything());
  log.length = 0;
  await resumed.approve('demo-h', pending.items[0].approvalId);
  const done = await resumed.resume('demo-h');
  assert.equal(done.status, 'completed');
  assert.deepEqual(log.at(-1), ['end', log.at(-1)[1], 'completed', 'string']);
  assert.ok(log.some((l) => l[0] === 'after' && l[2] === 'clear_baking_cache'));
  assert.equal(runs.size, 1, 'the resumed run is the same run');
  // The hook skipped every save it could: the completed state was saved anyway.
  const state = await resumed.state('demo-h');
  assert.equal(state.getString('status'), 'completed');
  assert.deepEqual(errors, []);
});

/** What `new B.Agent(config)` throws, read by `agentErrorOf` (undefined's reading if it does not throw). */
function constructionError(config) {
  let thrown;
  try {
    new B.Agent(config);
  } catch (e) {
    thrown = e;
  }
  return B.agentErrorOf(thrown);
}

// The provider options set on the ArkTS AgentConfig reach the wire: a run through the wrapper
// against a local mock OpenAI-compatible server (127.0.0.1:0).
test('AgentConfig provider options through the real module: the request bodies the server gets', async (t) => {
  const { startMock, streamChunks, textChunks, toolCallChunks } = await import('../../tests/node/mock_openai.mjs');
  const mock = await startMock(async (i, _request, res) => {
    if (i === 0) {
      await streamChunks(res, [
        { choices: [{ index: 0, delta: { role: 'assistant', reasoning_content: 'check the order' }, finish_reason: null }] },
        ...toolCallChunks('c1', 'query_order', '{"order_id":"20261010"}'),
      ]);
    } else {
      await streamChunks(res, textChunks('Shipped.'));
    }
  });
  t.after(() => mock.close());
  const config = B.AgentConfig.online(B.ProviderPreset.custom, 'm', 'k', mock.baseUrl);
  config.temperature = null;
  config.streamUsage = false;
  config.sendReasoningContent = true;
  config.toolChoice = 'auto';
  config.contextBudgetTokens = 100000;
  const agent = new B.Agent(config);
  agent.registerTool(D.queryOrderDefinition(), new D.QueryOrderTool());
  const done = await agent.run('opts', 'where is 20261010?');
  assert.equal(done.status, 'completed');
  assert.equal(mock.requests.length, 2);
  for (const { body } of mock.requests) {
    assert.ok(!('temperature' in body) && !('stream_options' in body), JSON.stringify(body));
    assert.equal(body.tool_choice, 'auto');
  }
  assert.equal(mock.requests[1].body.messages[1].reasoning_content, 'check the order');
  // A bad option is the native config_invalid, naming the field.
  config.contextBudgetTokens = 0;
  const info = constructionError(config);
  assert.deepEqual([info.code, info.layer], ['config_invalid', 'config']);
  assert.match(info.message, /contextBudgetTokens/);
});

// The provider timeouts set on the ArkTS AgentConfig reach the native client: a first byte limit
// ends a run against a server that never answers; a limit above the total is config_invalid.
test('AgentConfig provider timeouts through the real module: provider_timeout, and config_invalid for a conflict', async (t) => {
  const { startMock } = await import('../../tests/node/mock_openai.mjs');
  // Never answers; the connection closes when the client gives up (or the mock closes).
  const mock = await startMock(() => undefined);
  t.after(() => mock.close());
  const config = B.AgentConfig.online(B.ProviderPreset.custom, 'm', 'k', mock.baseUrl);
  config.firstByteTimeoutMs = 150;
  config.totalTimeoutMs = 5000;
  const out = await new B.Agent(config).run('timeouts', 'hello?');
  assert.equal(out.status, 'failed');
  assert.deepEqual([out.error?.code, out.error?.layer], ['provider_timeout', 'provider']);
  assert.match(out.error?.message ?? '', /first byte timeout of 150ms/);
  config.idleTimeoutMs = 6000;
  const info = constructionError(config);
  assert.deepEqual([info.code, info.layer], ['config_invalid', 'config']);
  assert.match(info.message, /^idleTimeoutMs \(6000\) is above totalTimeoutMs \(5000\)/);
});

// The fake native module of the host tests (fakes/libarkagent.mjs) answers listSessionsJson and
// definitionsJson in the real module's shapes: the same keys, in the same order, for a session; the
// same text for the same tools.
test('the fake native Agent lists sessions and definitions in the real module\'s shapes', async () => {
  const Fake = await import(pathToFileURL(path.join(HERE, 'fakes', 'libarkagent.mjs')).href);
  const real = new native.Agent({ provider: 'scripted', scriptJson: JSON.stringify([{ content: 'hi' }]) });
  const fake = new Fake.Agent({ provider: 'scripted', scriptJson: '[]' });
  await real.run('s', 'hello');
  const [entry] = JSON.parse(await real.listSessionsJson());
  assert.deepEqual(Object.keys(entry), Object.keys(Fake.sessionSummaryJson()));
  assert.deepEqual(entry, Fake.sessionSummaryJson({ session_id: 's', message_count: 2, updated_at_ms: entry.updated_at_ms,
    title: 'hello', last_message: 'hi' }));
  for (const agent of [real, fake]) {
    agent.registerTool({ name: 'plain', description: 'P', parametersJson: '{"type":"object"}' }, () => ({ contents: [] }));
    agent.registerTool({ name: 'risky', description: 'R', parametersJson: '{"type":"object","properties":{}}',
      riskLevel: 'dangerous', idempotent: true, timeoutMs: 1500 }, () => ({ contents: [] }));
  }
  assert.deepEqual(JSON.parse(fake.definitionsJson()), JSON.parse(real.definitionsJson()));
  // Both refuse an includeWorkers that is not a boolean, alike.
  const refusal = async (agent) => {
    try {
      await agent.listSessionsJson('yes');
    } catch (e) {
      return [e.code, e.layer];
    }
    return 'listed';
  };
  assert.deepEqual(await refusal(fake), await refusal(real));
  assert.deepEqual(await refusal(real), ['argument_invalid', 'config']);
});

test('a schema as deep as the native module takes (128 levels) is read back: definitions(), the policy and the run', async () => {
  // Json.ets counted its limit from the top of the text wrapped around the schema, so a schema the
  // module took failed definitions() (json_too_deep) and failed the policy closed.
  const nest = 125;
  const schema = `{"type":"object","properties":{"x":{"default":${'['.repeat(nest)}${']'.repeat(nest)}}}}`;
  const script = JSON.stringify([{ tool_calls: [{ id: 'c1', name: 'deep', arguments: '{}' }] }, { content: 'done' }]);
  const agent = new B.Agent(B.AgentConfig.scripted(script));
  const errors = [];
  agent.setErrorHandler((where, e) => errors.push(`${where}:${e.code}`));
  agent.registerTool(new B.ToolDefinition('deep', 'A deep default', schema), { execute: async () => B.ToolResult.text('ran') });
  assert.equal(agent.definitions().length, 1);
  agent.setApprovalPolicy(new B.DefaultToolApprovalPolicy());
  const outcome = await agent.run('deep-1', 'go');
  assert.equal(outcome.status, 'completed');
  assert.deepEqual(errors, []);
});

test('a ToolDefinition given schema text registers that text: a repeated key refused, big integers and key order kept', async () => {
  // ToolDefinition re-serialized the text it had parsed: the last of a repeated key won, and an
  // integer beyond 2^53 was rounded, so the value the schema names was refused as tool_argument_const.
  const repeated = '{"type":"object","properties":{"a":{"type":"string"},"a":{"type":"integer"}}}';
  const run = async () => B.ToolResult.text('ran');
  throwsWithCode(assert, () => new B.ToolRegistry().register(new B.ToolDefinition('t', 'd', repeated), { execute: run }),
    'schema_invalid_root', 'config');
  throwsWithCode(assert, () => new B.Agent(B.AgentConfig.scripted('[]')).registerTool(new B.ToolDefinition('t', 'd', repeated),
    { execute: run }), 'schema_invalid_root', 'config');
  const big = '{ "type": "object", "properties": { "id": { "const": 12345678901234567890 }, "b": { "maximum": 1.50e2 } } }';
  const registry = new B.ToolRegistry();
  registry.register(new B.ToolDefinition('t', 'd', big), { execute: run });
  const result = await registry.execute(new B.ToolCall('i', 't', '{"id":12345678901234567890}'));
  assert.equal(result.toModelText(), 'ran');
  await assert.rejects(registry.execute(new B.ToolCall('i', 't', '{"id":12345678901234567000}')),
    (e) => B.agentErrorOf(e).code === 'tool_argument_const');
  // What the module keeps (and sends to the model) is the text as written, compacted.
  const nativeRegistry = new native.ToolRegistry();
  nativeRegistry.register(B.toolDefinitionObject(new B.ToolDefinition('t', 'd', big)), () => ({ contents: [] }));
  assert.match(nativeRegistry.definitionsJson(),
    /"parameters":\{"type":"object","properties":\{"id":\{"const":12345678901234567890\},"b":\{"maximum":1\.50e2\}\}\}/);
});

test('definitions() read back from the module keep a schema\'s numbers as written: registered again, the same schema', async () => {
  // ToolDefinition.fromJson read the numbers as doubles: 9007199254740993 came back as ...992 and
  // 1.0 as 1, so a definition read back and registered again named another value.
  const text = '{"type":"object","properties":{"id":{"const":9007199254740993},"n":{"maximum":1.0,"minimum":-0}}}';
  const run = async () => B.ToolResult.text('ran');
  const agent = new B.Agent(B.AgentConfig.scripted('[]'));
  agent.registerTool(new B.ToolDefinition('t', 'd', text), { execute: run });
  const [readBack] = agent.definitions();
  assert.equal(readBack.parametersJson(), text);
  assert.equal(readBack.parameters.getObject('properties').getObject('id').get('const').asNumber(), 9007199254740992);
  const copy = new B.ToolRegistry();
  copy.register(readBack, { execute: run });
  assert.equal(copy.definitions()[0].parametersJson(), text);
  assert.equal((await copy.execute(new B.ToolCall('i', 't', '{"id":9007199254740993}'))).toModelText(), 'ran');
  await assert.rejects(copy.execute(new B.ToolCall('i', 't', '{"id":9007199254740992}')),
    (e) => B.agentErrorOf(e).code === 'tool_argument_const');
  // The wire form too, and what a policy is handed.
  assert.equal(readBack.toJson().getObject('parameters').toJsonString(), text);
  const seen = [];
  const policyAgent = new B.Agent(B.AgentConfig.scripted(JSON.stringify([
    { tool_calls: [{ id: 'c1', name: 't', arguments: '{"id":9007199254740993}' }] }, { content: 'done' }])));
  policyAgent.registerTool(new B.ToolDefinition('t', 'd', text), { execute: run });
  policyAgent.setApprovalPolicy({ decide: (call, definition) => {
    seen.push(definition.parametersJson());
    return B.ApprovalPolicyResult.allow();
  } });
  assert.equal((await policyAgent.run('s', 'go')).status, 'completed');
  assert.deepEqual(seen, [text]);
});
