// The app's approval policy (Agent.setApprovalPolicy): it replaces the default rule (allowing a
// dangerous tool, denying or asking about a safe one), sees each call and its definition, may answer
// with a Promise, and fails closed (the call needs confirmation, never runs unasked) when it throws,
// rejects, answers garbage or does not answer in time. Several runs may wait on their policies at
// once; null restores the default; a process with a policy set still exits by itself.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { setTimeout as sleep } from 'node:timers/promises';
import { buildModule, busy, loadModule, objectSchema, runNode, throwsWithCode } from './helper.mjs';

const { Agent } = loadModule();

const call = (id, name, args = '{}') => ({ id, name, arguments: args });

/**
 * An agent whose model calls `calls` (one batch), then answers "done"; `wipe` is dangerous, `read`
 * safe; `ran` records the executions by tool name.
 */
function setup(calls, config = {}, answers = [{ content: 'done' }]) {
  const agent = new Agent({
    provider: 'scripted',
    scriptJson: JSON.stringify([{ tool_calls: calls }, ...answers]),
    ...config,
  });
  const ran = [];
  const tool = (name, riskLevel) =>
    agent.registerTool({ name, description: `the ${name} tool`, parametersJson: objectSchema, riskLevel }, (args) => {
      ran.push(name);
      return { contents: [{ type: 'text', text: `${name} ran with ${args}` }] };
    });
  tool('wipe', 'dangerous');
  tool('read', 'safe');
  const events = [];
  agent.onEvent((e) => events.push(JSON.parse(e)));
  return { agent, ran, events };
}

async function toolMessages(agent, session = 's') {
  const state = JSON.parse(await agent.stateJson(session));
  return state.messages.filter((m) => m.role === 'tool');
}

test('a policy that allows a dangerous tool: it runs at once, nothing freezes', async () => {
  const { agent, ran, events } = setup([call('w1', 'wipe')]);
  agent.setApprovalPolicy(() => 'allow');
  const out = await agent.run('s', 'wipe it');
  assert.equal(out.status, 'completed');
  assert.equal(out.finalText, 'done');
  assert.deepEqual(ran, ['wipe']);
  assert.ok(!events.some((e) => e.type === 'approval_required'));
  assert.equal(await agent.pendingApprovalJson('s'), null);
});

test('a policy that denies a safe tool: it never runs and the model gets the denial', async () => {
  const { agent, ran } = setup([call('r1', 'read'), call('r2', 'read', '{"x":1}')]);
  agent.setApprovalPolicy((callJson) =>
    JSON.parse(callJson).id === 'r1' ? JSON.stringify({ action: 'deny', reason: 'off hours' }) : 'deny');
  const out = await agent.run('s', 'read');
  assert.equal(out.status, 'completed');
  assert.deepEqual(ran, []);
  const [first, second] = await toolMessages(agent);
  assert.equal(first.tool_call_id, 'r1');
  assert.equal(first.is_error, true);
  assert.match(first.content, /denied by policy: off hours/);
  assert.equal(second.is_error, true);
  assert.match(second.content, /denied by policy: the app's approval policy denies tool "read"/, 'a default reason');
});

test('a policy or beforeToolCall denial longer than maxResultBytes is cut to fit, saying so', async () => {
  // What the app's code answers goes to the model as the call's result and is saved with the
  // session: it is held to maxResultBytes as a tool's result is (before, any size was saved).
  const { agent, ran } = setup([call('r1', 'read'), call('w1', 'wipe')], { maxResultBytes: 200 });
  agent.setApprovalPolicy((callJson) =>
    JSON.parse(callJson).name === 'read' ? JSON.stringify({ action: 'deny', reason: 'p'.repeat(5000) }) : 'allow');
  agent.addHook({
    beforeToolCall: (_ctx, callJson) =>
      JSON.parse(callJson).name === 'wipe' ? { action: 'deny', reason: 'h'.repeat(5000) } : { action: 'proceed' },
  });
  const out = await agent.run('s', 'read and wipe');
  assert.equal(out.status, 'completed');
  assert.deepEqual(ran, []);
  const [policy, hook] = await toolMessages(agent);
  assert.equal(policy.is_error, true);
  assert.match(policy.content, /^error: denied by policy: p+… \[\d+ more bytes cut\]$/);
  assert.match(hook.content, /^error \[tool_denied\]: h+… \[\d+ more bytes cut\]$/);
  for (const m of [policy, hook]) assert.ok(Buffer.byteLength(m.content) < 200, m.content);
});

test('a policy that requires confirmation for a safe tool: freeze, approve, resume runs it once', async () => {
  const { agent, ran, events } = setup([call('r1', 'read'), call('w1', 'wipe')]);
  agent.setApprovalPolicy((callJson) => {
    const { name } = JSON.parse(callJson);
    return name === 'read' ? JSON.stringify({ action: 'requireConfirmation', reason: 'reading needs a yes' }) : 'allow';
  });
  const out = await agent.run('s', 'read and wipe');
  assert.equal(out.status, 'awaiting_approval');
  const batch = JSON.parse(out.batchJson);
  assert.deepEqual(batch.items.map((i) => [i.tool_call.id, i.reason, i.risk_level]), [['r1', 'reading needs a yes', 'safe']]);
  assert.deepEqual(ran, [], 'the whole batch is frozen, the allowed wipe too');
  assert.equal(events.filter((e) => e.type === 'approval_required').length, 1);
  await agent.approve('s', batch.items[0].approval_id);
  const done = await agent.resume('s');
  assert.equal(done.status, 'completed');
  assert.deepEqual(ran.sort(), ['read', 'wipe']);
});

test('the policy sees each call as the model made it and the definition (null for an unknown tool)', async () => {
  const { agent } = setup([call('w1', 'wipe', '{"scope":"all"}'), call('u1', 'nope', '{"a":1}')]);
  const seen = [];
  agent.setApprovalPolicy(function (callJson, definitionJson, ...rest) {
    seen.push({ call: JSON.parse(callJson), definition: definitionJson === null ? null : JSON.parse(definitionJson), rest });
    return 'allow';
  });
  const out = await agent.run('s', 'go');
  assert.equal(out.status, 'completed');
  assert.deepEqual(seen.map((s) => s.call), [call('w1', 'wipe', '{"scope":"all"}'), call('u1', 'nope', '{"a":1}')]);
  assert.deepEqual(seen[0].definition, {
    name: 'wipe', description: 'the wipe tool', parameters: { type: 'object' }, risk_level: 'dangerous', idempotent: false,
  });
  assert.equal(seen[1].definition, null);
  assert.deepEqual(seen[0].rest, []);
  const [, unknown] = await toolMessages(agent);
  assert.match(unknown.content, /tool_not_found/, 'an allowed unknown tool meets the registry');
});

test('a policy that throws on an unknown tool does not freeze the batch for it: the registry answers', async () => {
  const { agent, ran, events } = setup([call('u1', 'nope'), call('r1', 'read')]);
  // A common slip: reading the definition of a tool that does not exist (null) throws a TypeError.
  agent.setApprovalPolicy((callJson, definitionJson) =>
    JSON.parse(definitionJson).risk_level === 'dangerous' ? 'requireConfirmation' : 'allow');
  const out = await agent.run('s', 'go');
  assert.equal(out.status, 'completed');
  assert.ok(!events.some((e) => e.type === 'approval_required'), 'nothing to approve for a tool that cannot run');
  assert.deepEqual(ran, ['read']);
  const [unknown, read] = await toolMessages(agent);
  assert.equal(unknown.is_error, true);
  assert.match(unknown.content, /tool_not_found/);
  assert.ok(!read.is_error);
});

test('the policy sees the call as a beforeToolCall hook rewrote it', async () => {
  const { agent, ran } = setup([call('w1', 'wipe', '{"scope":"all"}')]);
  agent.addHook({ beforeToolCall: () => ({ action: 'proceed', argumentsJson: '{"scope":"tmp"}' }) });
  const seen = [];
  agent.setApprovalPolicy((callJson) => {
    seen.push(JSON.parse(callJson).arguments);
    return JSON.parse(JSON.parse(callJson).arguments).scope === 'tmp' ? 'allow' : 'deny';
  });
  assert.equal((await agent.run('s', 'go')).status, 'completed');
  assert.deepEqual(seen, ['{"scope":"tmp"}']);
  assert.deepEqual(ran, ['wipe']);
});

test('a Promise answer is awaited (async policies)', async () => {
  const { agent, ran } = setup([call('w1', 'wipe')]);
  agent.setApprovalPolicy(async () => {
    await new Promise((r) => setTimeout(r, 30));
    return JSON.stringify({ action: 'allow' });
  });
  assert.equal((await agent.run('s', 'go')).status, 'completed');
  assert.deepEqual(ran, ['wipe']);
});

// Each of these would allow the safe tool if the failure were ignored: the call must freeze instead.
const FAILING = [
  ['a throw', () => { throw new Error('policy bug'); }, /threw: Error: policy bug/],
  ['a thrown string', () => { throw 'plain text'; }, /threw: .*plain text/],
  ['a rejection', () => Promise.reject(new Error('no db')), /rejected: Error: no db/],
  ['undefined', () => undefined, /returned undefined/],
  ['an object', () => ({ action: 'allow' }), /not a string/],
  ['a number', () => 1, /not a string/],
  ['an unknown action', () => 'yes', /not a decision/],
  ['a stray key', () => JSON.stringify({ action: 'allow', reasn: 'typo' }), /not a decision/],
  ['broken JSON', () => '{"action":"allow"', /not a decision/],
  ['a Promise of garbage', async () => 'ALLOW', /not a decision/],
  ['a Promise that never settles', () => new Promise(() => {}), /did not answer within 150 ms/],
  ['a Promise that settles too late', () => new Promise((r) => setTimeout(() => r('allow'), 600)), /did not answer within 150 ms/],
  ['a JS thread busy past the timeout', () => { const end = Date.now() + 400; while (Date.now() < end); return 'allow'; },
    /did not answer within 150 ms/],
];

for (const [what, policy, reason] of FAILING) {
  test(`fails closed on ${what}: the safe call needs confirmation and never runs unasked`, async () => {
    const { agent, ran } = setup([call('r1', 'read')]);
    agent.setApprovalPolicy(policy, 150);
    const out = await agent.run('s', 'go');
    assert.equal(out.status, 'awaiting_approval');
    const [item] = JSON.parse(out.batchJson).items;
    assert.match(item.reason, /^approval_policy_failed: /);
    assert.match(item.reason, reason);
    assert.match(item.reason, /needs the user's confirmation$/);
    // A late answer changes nothing.
    if (/did not answer/.test(item.reason)) await new Promise((r) => setTimeout(r, 700));
    assert.deepEqual(ran, []);
    assert.equal(JSON.parse(await agent.pendingApprovalJson('s')).items[0].decision, 'pending');
    // The user may still run it.
    await agent.approve('s', item.approval_id);
    assert.equal((await agent.resume('s')).status, 'completed');
    assert.deepEqual(ran, ['read']);
  });
}

// A policy call that times out while it waits for the busy JS thread is never made once the thread
// is free: its answer would no longer count, and a policy with side effects (a log, a prompt) must
// not act on a call already frozen for the user.
test('a policy that timed out while the JS thread was busy is never called: the call needs confirmation', async () => {
  const { agent, ran } = setup([call('r1', 'read')]);
  const asked = [];
  agent.setApprovalPolicy((callJson) => {
    asked.push(JSON.parse(callJson).id);
    return 'allow';
  }, 100);
  const running = agent.run('s', 'go');
  busy(500);
  const out = await running;
  await sleep(100);
  assert.equal(out.status, 'awaiting_approval');
  const [item] = JSON.parse(out.batchJson).items;
  assert.match(item.reason, /^approval_policy_failed: the policy did not answer within 100 ms \(the JS thread was busy all along: it was never called\)/);
  assert.deepEqual(asked, [], 'the policy was asked about a call already frozen for the user');
  assert.deepEqual(ran, []);
});

test('a policy that denies after a failure keeps working: each call is asked afresh', async () => {
  let n = 0;
  const { agent, ran } = setup([call('r1', 'read'), call('r2', 'read')]);
  agent.setApprovalPolicy(() => {
    n += 1;
    if (n === 1) throw new Error('first call fails');
    return 'allow';
  });
  const out = await agent.run('s', 'go');
  assert.equal(out.status, 'awaiting_approval');
  const items = JSON.parse(out.batchJson).items;
  assert.deepEqual(items.map((i) => i.tool_call.id), ['r1'], 'only the failed call asks; r2 was allowed');
  assert.equal(n, 2);
  assert.deepEqual(ran, []);
});

test('several runs wait on async policies at once (more than the two runtime workers): all finish', async () => {
  const agents = [];
  let waiting = 0;
  let most = 0;
  for (let i = 0; i < 6; i++) {
    const s = setup([call(`w${i}`, 'wipe')]);
    s.agent.setApprovalPolicy(async () => {
      waiting += 1;
      most = Math.max(most, waiting);
      await new Promise((r) => setTimeout(r, 80));
      waiting -= 1;
      return 'allow';
    });
    agents.push(s);
  }
  const outs = await Promise.all(agents.map((s, i) => s.agent.run(`s${i}`, 'go')));
  assert.deepEqual(outs.map((o) => o.status), Array(6).fill('completed'));
  assert.deepEqual(agents.map((s) => s.ran), Array(6).fill(['wipe']));
  assert.ok(most >= 3, `policies waited at once: ${most}`);
});

test('the JS thread stays free while a run waits on the policy (other exports answer)', async () => {
  const { agent, ran } = setup([call('w1', 'wipe')]);
  let release;
  const gate = new Promise((r) => { release = r; });
  let asked;
  const askedP = new Promise((r) => { asked = r; });
  agent.setApprovalPolicy(() => {
    asked();
    return gate.then(() => 'allow');
  });
  const run = agent.run('s', 'go');
  await askedP;
  // While a worker blocks on the policy: synchronous and async exports work, another session runs.
  assert.deepEqual(agent.toolNames(), ['wipe', 'read']);
  const other = setup([call('r1', 'read')]);
  assert.equal((await other.agent.run('o', 'go')).status, 'completed');
  assert.equal(await agent.pendingApprovalJson('nobody'), null);
  release();
  assert.equal((await run).status, 'completed');
  assert.deepEqual(ran, ['wipe']);
});

test('null restores the default policy; a new policy replaces the old one', async () => {
  const first = setup([call('w1', 'wipe')]);
  first.agent.setApprovalPolicy(() => 'allow');
  first.agent.setApprovalPolicy(null);
  const out = await first.agent.run('s', 'go');
  assert.equal(out.status, 'awaiting_approval');
  assert.equal(JSON.parse(out.batchJson).items[0].reason, 'Dangerous tool "wipe" requires confirmation');

  const second = setup([call('r1', 'read')]);
  second.agent.setApprovalPolicy(() => 'allow');
  second.agent.setApprovalPolicy(() => JSON.stringify({ action: 'requireConfirmation' }));
  const asked = await second.agent.run('s', 'go');
  assert.equal(JSON.parse(asked.batchJson).items[0].reason, 'Tool "read" requires confirmation');

  const third = setup([call('r1', 'read')]);
  third.agent.setApprovalPolicy(() => 'deny');
  third.agent.setApprovalPolicy(undefined);
  assert.equal((await third.agent.run('s', 'go')).status, 'completed');
  assert.deepEqual(third.ran, ['read']);
});

test('the policy timeout defaults to toolTimeoutMs; bad timeouts and non-functions are refused', async () => {
  const { agent, ran } = setup([call('r1', 'read')], { toolTimeoutMs: 120 }, [{ tool_calls: [call('r2', 'read')] }]);
  agent.setApprovalPolicy(() => new Promise(() => {}));
  const out = await agent.run('s', 'go');
  assert.match(JSON.parse(out.batchJson).items[0].reason, /did not answer within 120 ms/);
  assert.deepEqual(ran, []);
  for (const bad of [0, -1, 1.5, 86400001, Number.NaN]) {
    throwsWithCode(assert, () => agent.setApprovalPolicy(() => 'allow', bad), 'config_invalid', 'config');
  }
  for (const bad of ['allow', { decide: () => 'allow' }, 42, true]) {
    const e = throwsWithCode(assert, () => agent.setApprovalPolicy(bad), 'argument_invalid', 'config');
    assert.match(e.message, /policy must be a function or null/);
  }
  // A refused policy leaves the one in place.
  const again = await agent.run('s2', 'go');
  assert.match(JSON.parse(again.batchJson).items[0].reason, /did not answer within 120 ms/);
});

test('a delegated worker asks the same app policy', async () => {
  const agent = new Agent({
    provider: 'scripted',
    enableDelegation: true,
    scriptJson: JSON.stringify([
      { tool_calls: [call('d1', 'delegate_task', JSON.stringify({ task: 'wipe things' }))] },
      { tool_calls: [call('ww1', 'wipe')] }, // the worker's first answer
      { content: 'worker done' },
      { content: 'parent done' },
    ]),
  });
  const ran = [];
  agent.registerTool({ name: 'wipe', description: 'd', parametersJson: objectSchema, riskLevel: 'dangerous' }, () => {
    ran.push('wipe');
    return { contents: [{ type: 'text', text: 'wiped' }] };
  });
  const seen = [];
  agent.setApprovalPolicy((callJson) => {
    seen.push(JSON.parse(callJson).name);
    return 'allow';
  });
  const out = await agent.run('s', 'go');
  assert.equal(out.status, 'completed');
  assert.deepEqual(seen, ['delegate_task', 'wipe']);
  assert.deepEqual(ran, ['wipe'], 'the worker ran the dangerous tool the policy allowed, without a freeze');
});

const child = String.raw`
const m = { exports: {} };
process.dlopen(m, process.env.ARKAGENT_SO);
const { Agent } = m.exports;
(async () => {
  const agent = new Agent({ provider: 'scripted', scriptJson: JSON.stringify([
    { tool_calls: [{ id: 'a1', name: 'echo', arguments: '{}' }] }, { content: 'bye' }]) });
  agent.registerTool({ name: 'echo', description: 'd', parametersJson: '{"type":"object"}', riskLevel: 'dangerous' },
    async (a) => ({ contents: [{ type: 'text', text: a }] }));
  agent.setApprovalPolicy(async () => 'allow');
  const out = await agent.run('s', 'hi');
  // A second agent keeps a policy that is never called.
  new Agent({ provider: 'scripted', scriptJson: '[]' }).setApprovalPolicy(() => 'deny');
  console.log('done', out.status);
})();
`;

test('a process with a policy set exits by itself', async () => {
  buildModule();
  const started = Date.now();
  const { code, out, err } = await runNode(['-e', child], { ms: 10_000 });
  assert.equal(code, 0, `exit ${code}; stderr: ${err}`);
  assert.equal(out.trim(), 'done completed');
  assert.ok(Date.now() - started < 10000);
});

// Many runs waiting on the policy at once, in a child (killed after `ms`: a hang fails the test
// instead of blocking it). Each of N runs on its own in-memory session calls one safe tool; the
// policy given as POLICY (a function source; `agent` in scope) decides, with TIMEOUT_MS. Prints the runs' statuses
// by count and the time they took.
const crowd = String.raw`
const m = { exports: {} };
process.dlopen(m, process.env.ARKAGENT_SO);
const { Agent } = m.exports;
const N = Number(process.env.N);
const script = [];
for (let i = 0; i < N; i++) script.push({ tool_calls: [{ id: 'c' + i, name: 't', arguments: '{}' }] });
for (let i = 0; i < N; i++) script.push({ content: 'done' });
const agent = new Agent({ provider: 'scripted', scriptJson: JSON.stringify(script) });
agent.registerTool({ name: 't', description: 'd', parametersJson: '{"type":"object"}', riskLevel: 'safe' },
  () => ({ contents: [{ type: 'text', text: 'ok' }] }));
agent.setApprovalPolicy(eval(process.env.POLICY), Number(process.env.TIMEOUT_MS));
(async () => {
  const started = Date.now();
  const outs = await Promise.all(Array.from({ length: N }, (_, i) => agent.run('s' + i, 'go')));
  const by = {};
  for (const o of outs) by[o.status] = (by[o.status] ?? 0) + 1;
  console.log(JSON.stringify({ by, ms: Date.now() - started }));
})();
`;

async function runCrowd(n, policy, timeoutMs) {
  buildModule();
  const env = { N: String(n), POLICY: policy, TIMEOUT_MS: String(timeoutMs) };
  const { code, out, err } = await runNode(['-e', crowd], { env, ms: 20_000 });
  assert.equal(code, 0, `the runs did not all settle (exit ${code}; stdout: ${out}; stderr: ${err.slice(-2000)})`);
  return JSON.parse(out.trim().split('\n').pop());
}

test('600 runs waiting at once on a policy that never answers all fail closed at its timeout', async () => {
  // More waiting runs than tokio's blocking pool has threads (512): a policy wait holds no thread.
  // (The timeout is long enough for every run to be waiting before the first one times out.)
  const { by, ms } = await runCrowd(600, '() => new Promise(() => {})', 1000);
  assert.deepEqual(by, { awaiting_approval: 600 });
  assert.ok(ms < 10_000, `settled in ${ms} ms`);
});

test('600 runs whose policy awaits another export of the agent before answering all finish', async () => {
  // The export (stateJson) needs the runtime while every run waits on the policy.
  const { by, ms } = await runCrowd(600, "async () => { await agent.stateJson('s0'); return 'allow'; }", 5000);
  assert.deepEqual(by, { completed: 600 });
  assert.ok(ms < 10_000, `finished in ${ms} ms`);
});
