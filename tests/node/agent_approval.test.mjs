// The approval freeze over a state directory: a run that meets a dangerous call suspends with the
// frozen batch (the executor did not run); a NEW Agent over the same stateDir (an app that was
// killed and restarted) approves or denies and resumes. Then the same across real processes: a
// child killed with SIGKILL while suspended, and a fresh child that approves, resumes and exits
// by itself.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { loadModule, openWipeAgent as open, rejectsWithCode, runNode, runUntilKilled } from './helper.mjs';

const { Agent } = loadModule();

const wipeCall = { tool_calls: [{ id: 'w1', name: 'wipe_cache', arguments: '{"scope":"all"}' }] };


function tempDir(t) {
  const dir = mkdtempSync(join(tmpdir(), 'arkagent-approval-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

/** Runs into the freeze; returns the approval id. */
async function suspend(dir, runs) {
  const first = open(dir, [wipeCall], runs);
  const events = [];
  first.onEvent((e) => events.push(JSON.parse(e)));
  const out = await first.run('s', 'wipe the cache');
  assert.equal(out.status, 'awaiting_approval');
  assert.equal(out.finalText, undefined);
  const batch = JSON.parse(out.batchJson);
  assert.equal(batch.items.length, 1);
  assert.equal(batch.items[0].decision, 'pending');
  assert.equal(batch.items[0].risk_level, 'dangerous');
  assert.deepEqual(batch.items[0].tool_call, { id: 'w1', name: 'wipe_cache', arguments: '{"scope":"all"}' });
  assert.deepEqual(runs, [], 'the dangerous executor must not run before approval');
  // Persisted first, then announced; no run_finished for a suspended run.
  const types = events.map((e) => e.type);
  assert.equal(types.at(-1), 'approval_required');
  assert.equal(types.at(-2), 'state_persisted');
  assert.ok(!types.includes('run_finished'));
  assert.deepEqual(JSON.parse(await first.pendingApprovalJson('s')), batch);
  // While suspended: a new message or an early resume is refused.
  await rejectsWithCode(assert, first.run('s', 'something else'), 'approval_pending', 'runtime');
  await rejectsWithCode(assert, first.resume('s'), 'approval_pending', 'runtime');
  return batch.items[0].approval_id;
}

test('approve in a new Agent over the same stateDir, then resume: the executor runs once', async (t) => {
  const dir = tempDir(t);
  const runs = [];
  const approvalId = await suspend(dir, runs);

  const restarted = open(dir, [{ content: 'The cache is wiped.' }], runs);
  await rejectsWithCode(assert, restarted.approve('s', 'no-such-id'), 'approval_not_found', 'runtime');
  const batch = JSON.parse(await restarted.approve('s', approvalId));
  assert.equal(batch.items[0].decision, 'approved');
  await rejectsWithCode(assert, restarted.approve('s', approvalId), 'approval_already_decided');
  assert.deepEqual(runs, [], 'approving does not run anything by itself');

  const events = [];
  restarted.onEvent((e) => events.push(JSON.parse(e)));
  const out = await restarted.resume('s');
  assert.equal(out.status, 'completed');
  assert.equal(out.finalText, 'The cache is wiped.');
  assert.deepEqual(runs, [{ scope: 'all' }]);
  assert.equal(events[0].type, 'run_started');
  assert.equal(events[0].resumed, true);
  const state = JSON.parse(await restarted.stateJson('s'));
  const tool = state.messages.find((m) => m.role === 'tool');
  assert.deepEqual([tool.tool_call_id, tool.content, tool.is_error ?? false], ['w1', 'wiped', false]);
  assert.equal(await restarted.pendingApprovalJson('s'), null);

  // A third instance sees a finished session: nothing to resume, nothing runs again.
  const third = open(dir, [], runs);
  await rejectsWithCode(assert, third.resume('s'), 'invalid_state');
  assert.equal(runs.length, 1);
});

test('deny in a new Agent over the same stateDir, then resume: the executor never runs', async (t) => {
  const dir = tempDir(t);
  const runs = [];
  const approvalId = await suspend(dir, runs);

  const restarted = open(dir, [{ content: 'Understood, nothing was wiped.' }], runs);
  const batch = JSON.parse(await restarted.deny('s', approvalId, 'not now'));
  assert.equal(batch.items[0].decision, 'denied');
  assert.equal(batch.items[0].deny_reason, 'not now');
  const out = await restarted.resume('s');
  assert.equal(out.status, 'completed');
  assert.equal(out.finalText, 'Understood, nothing was wiped.');
  assert.deepEqual(runs, []);
  const state = JSON.parse(await restarted.stateJson('s'));
  const tool = state.messages.find((m) => m.role === 'tool');
  assert.equal(tool.is_error, true);
  assert.match(tool.content, /not now/);
});

test('approveAll / denyAll in a new Agent decide every pending item at once, then resume', async (t) => {
  const dir = tempDir(t);
  const runs = [];
  const three = {
    tool_calls: ['a', 'b', 'c'].map((scope, k) => ({ id: `w${k}`, name: 'wipe_cache', arguments: JSON.stringify({ scope }) })),
  };
  const first = open(dir, [three], runs);
  const frozen = JSON.parse((await first.run('s', 'wipe three')).batchJson);
  assert.equal(frozen.items.length, 3);

  const restarted = open(dir, [{ content: 'All wiped.' }], runs);
  await rejectsWithCode(assert, restarted.approveAll('missing'), 'session_not_found');
  const long = 'x'.repeat(2 * 1024 * 1024);
  await rejectsWithCode(assert, restarted.denyAll('s', long), 'argument_invalid');
  assert.throws(() => restarted.approveAll(), (e) => e.code === 'argument_invalid');
  assert.throws(() => restarted.denyAll('s'), (e) => e.code === 'argument_invalid');
  await restarted.approve('s', frozen.items[0].approval_id);
  const batch = JSON.parse(await restarted.approveAll('s'));
  assert.deepEqual(batch.items.map((i) => i.decision), ['approved', 'approved', 'approved']);
  assert.deepEqual(JSON.parse(await restarted.pendingApprovalJson('s')), batch, 'durable when it resolves');
  // Nothing pending any more: the batch as it stands, nothing written.
  assert.deepEqual(JSON.parse(await restarted.denyAll('s', 'late')), batch);
  assert.deepEqual(runs, [], 'deciding runs nothing by itself');
  const out = await restarted.resume('s');
  assert.equal(out.status, 'completed');
  assert.deepEqual(runs, [{ scope: 'a' }, { scope: 'b' }, { scope: 'c' }]);
  await rejectsWithCode(assert, restarted.approveAll('s'), 'no_pending_approval');

  const other = tempDir(t);
  const denied = [];
  await open(other, [three], denied).run('s', 'wipe three');
  const again = open(other, [{ content: 'Nothing wiped.' }], denied);
  const batch2 = JSON.parse(await again.denyAll('s', 'not now'));
  assert.deepEqual(batch2.items.map((i) => [i.decision, i.deny_reason]), Array(3).fill(['denied', 'not now']));
  assert.equal((await again.resume('s')).status, 'completed');
  assert.deepEqual(denied, []);
});

test('dismiss in a new Agent: pending items denied with the reason, no model round, then a new message runs', async (t) => {
  const dir = tempDir(t);
  const runs = [];
  await suspend(dir, runs);

  // The script has one answer: the one for the new message after the dismissal.
  const restarted = open(dir, [{ content: 'Sure, what next?' }], runs);
  const out = await restarted.dismiss('s', 'the user moved on');
  assert.equal(out.status, 'completed');
  assert.equal(out.finalText, undefined);
  assert.deepEqual(runs, []);
  assert.equal(await restarted.pendingApprovalJson('s'), null);
  let state = JSON.parse(await restarted.stateJson('s'));
  const tool = state.messages.find((m) => m.role === 'tool');
  assert.deepEqual([tool.tool_call_id, tool.is_error, tool.content], ['w1', true, 'error: denied by user: the user moved on']);
  await rejectsWithCode(assert, restarted.dismiss('s', 'again'), 'no_pending_approval', 'runtime');

  const next = await restarted.run('s', 'never mind');
  assert.equal(next.finalText, 'Sure, what next?');
  state = JSON.parse(await restarted.stateJson('s'));
  assert.deepEqual(state.messages.map((m) => m.role), ['user', 'assistant', 'tool', 'user', 'assistant']);
});

// The child process: `suspend` runs into the freeze, prints the approval id and waits to be
// killed; `finish` approves, resumes, prints the outcome and returns (Node must then exit).
const child = String.raw`
const m = { exports: {} };
process.dlopen(m, process.env.ARKAGENT_SO);
const { Agent } = m.exports;
const [mode, dir] = process.argv.slice(1);
const runs = [];
const answers = mode === 'suspend'
  ? [{ tool_calls: [{ id: 'w1', name: 'wipe_cache', arguments: '{}' }] }]
  : [{ content: 'wiped after a restart' }];
const agent = new Agent({ provider: 'scripted', scriptJson: JSON.stringify(answers), stateDir: dir });
agent.registerTool(
  { name: 'wipe_cache', description: 'd', parametersJson: '{"type":"object"}', riskLevel: 'dangerous' },
  () => { runs.push(1); return { contents: [{ type: 'text', text: 'wiped' }] }; },
);
(async () => {
  if (mode === 'suspend') {
    const out = await agent.run('s', 'wipe');
    console.log(JSON.stringify({ status: out.status, id: JSON.parse(out.batchJson).items[0].approval_id, runs: runs.length }));
    setInterval(() => {}, 1000); // stay alive until killed
  } else {
    const pending = JSON.parse(await agent.pendingApprovalJson('s'));
    await agent.approve('s', pending.items[0].approval_id);
    const out = await agent.resume('s');
    console.log(JSON.stringify({ status: out.status, finalText: out.finalText, runs: runs.length }));
  }
})();
`;

test('a process killed with SIGKILL while suspended; a fresh process approves, resumes and exits by itself', async (t) => {
  const dir = tempDir(t);

  const first = await runUntilKilled(['-e', child, 'suspend', dir], (out) => out.includes('\n'), 'the child suspends', {
    ms: 10_000,
  });
  const suspended = JSON.parse(first.out.trim());
  assert.deepEqual({ status: suspended.status, runs: suspended.runs }, { status: 'awaiting_approval', runs: 0 }, first.err);

  const started = Date.now();
  const second = await runNode(['-e', child, 'finish', dir], { ms: 10_000 });
  assert.equal(second.code, 0, `exit ${second.code}; stderr: ${second.err}`);
  assert.ok(Date.now() - started < 5000, 'the fresh process exited by itself, quickly');
  assert.deepEqual(JSON.parse(second.out.trim()), { status: 'completed', finalText: 'wiped after a restart', runs: 1 });

  // The state on disk is final: this process sees the completed session with one tool result.
  const reader = new Agent({ provider: 'scripted', scriptJson: '[]', stateDir: dir });
  const state = JSON.parse(await reader.stateJson('s'));
  assert.equal(state.status, 'completed');
  assert.equal(state.messages.filter((m) => m.role === 'tool').length, 1);
});

test("a worker's dangerous call freezes the parent; approved there after a restart, it runs once in the worker", async (t) => {
  const dir = tempDir(t);
  const runs = [];
  const delegating = (answers) => open(dir, answers, runs, { enableDelegation: true });
  const first = delegating([
    { tool_calls: [{ id: 'call_0', name: 'delegate_task', arguments: '{"task":"wipe the cache"}' }] },
    wipeCall, // the worker's first answer
  ]);
  const out = await first.run('p', 'have a worker wipe the cache');
  assert.equal(out.status, 'awaiting_approval');
  const batch = JSON.parse(out.batchJson);
  assert.equal(batch.items[0].tool_call.name, 'wipe_cache');
  assert.match(batch.worker_session, /^w[0-9a-f]{32}$/);
  assert.deepEqual(runs, []);

  const restarted = delegating([{ content: 'wiped it' }, { content: 'The worker wiped the cache.' }]);
  await restarted.approve('p', batch.items[0].approval_id);
  const done = await restarted.resume('p');
  assert.equal(done.status, 'completed');
  assert.equal(done.finalText, 'The worker wiped the cache.');
  assert.deepEqual(runs, [{ scope: 'all' }], 'the approved call ran once, in the worker');
  const worker = JSON.parse(await restarted.stateJson(batch.worker_session));
  assert.equal(worker.status, 'completed');
  assert.deepEqual(JSON.parse(await restarted.stateJson('p')).workers, [batch.worker_session]);
  // Deleting the session deletes the worker's too.
  assert.equal(await restarted.deleteSession('p'), true);
  assert.equal(await restarted.stateJson(batch.worker_session), null);
  assert.equal(await restarted.stateJson('p'), null);
});
