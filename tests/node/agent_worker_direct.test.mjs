// A sub-agent's worker session acted on directly through the .so (the app sees it in the parent's
// batch as worker_session): its state names its parent; a new message on it is refused with
// invalid_state (its parent would never read the answer) and writes nothing; an Agent without
// enableDelegation refuses to resume it (it does not know the worker's tools); a delegating Agent
// resumes it, and the approved call runs once, in the worker. A decision on it reaches the parent's
// batch, also for a resume of the parent called right after it, not awaited.
// A parent dismissed while frozen on its worker settles the worker too (its resume is then
// invalid_state), and its suspended outcome counted what the worker used until it froze. Two
// workers frozen side by side, one item approved and then the parent dismissed: neither runs.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { openWipeAgent as open, rejectsWithCode } from './helper.mjs';

test('a worker session acted on directly stays a worker', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'arkagent-worker-direct-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const runs = [];
  const first = open(dir, [
    { tool_calls: [{ id: 'call_0', name: 'delegate_task', arguments: '{"task":"wipe the cache"}' }] },
    { tool_calls: [{ id: 'w1', name: 'wipe_cache', arguments: '{"scope":"all"}' }] },
  ], runs, { enableDelegation: true });
  const out = await first.run('p', 'have a worker wipe the cache');
  assert.equal(out.status, 'awaiting_approval');
  const batch = JSON.parse(out.batchJson);
  const worker = batch.worker_session;
  const saved = await first.stateJson(worker);
  assert.deepEqual(JSON.parse(saved).delegation, { parent_session: 'p', depth: 1 });
  assert.equal(JSON.parse(await first.stateJson('p')).delegation, undefined);

  await rejectsWithCode(assert, first.run(worker, 'anything else?'), 'invalid_state', 'runtime');
  assert.equal(await first.stateJson(worker), saved, 'nothing written');

  await first.approve(worker, batch.items[0].approval_id);
  // The decision reached the parent's batch, which mirrors the worker's: shown there, and the
  // other decision is refused.
  const mirror = JSON.parse(await first.stateJson('p')).pending_approval;
  assert.equal(mirror.items[0].decision, 'approved');
  await rejectsWithCode(assert, first.deny('p', batch.items[0].approval_id, 'no'), 'approval_already_decided', 'runtime');
  const plain = open(dir, [{ content: 'never' }], runs);
  await rejectsWithCode(assert, plain.resume(worker), 'invalid_state', 'runtime');
  assert.deepEqual(runs, [], 'nothing ran');

  const delegating = open(dir, [{ content: 'wiped it' }], runs, { enableDelegation: true });
  const done = await delegating.resume(worker);
  assert.equal(done.status, 'completed');
  assert.equal(done.finalText, 'wiped it');
  assert.deepEqual(runs, [{ scope: 'all' }]);
});

test('a resume of the parent called right after a decision on its worker, not awaited, sees it', async (t) => {
  // Each call's turn is reserved where the app makes it; the resume's task may start first. Several
  // agents, so that some of them do.
  const dir = mkdtempSync(join(tmpdir(), 'arkagent-worker-order-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const runs = [];
  const agents = [];
  for (let i = 0; i < 20; i += 1) {
    const agent = open(join(dir, `${i}`), [
      { tool_calls: [{ id: 'call_0', name: 'delegate_task', arguments: '{"task":"wipe the cache"}' }] },
      { tool_calls: [{ id: 'w1', name: 'wipe_cache', arguments: '{"scope":"all"}' }] },
      { content: 'worker wiped it' },
      { content: 'done' },
    ], runs, { enableDelegation: true });
    const out = await agent.run('p', 'have a worker wipe the cache');
    assert.equal(out.status, 'awaiting_approval');
    agents.push([agent, JSON.parse(out.batchJson)]);
  }
  const both = agents.map(([agent, { worker_session: worker, items }]) => {
    const decided = agent.approve(worker, items[0].approval_id);
    const resumed = agent.resume('p');
    return Promise.all([decided, resumed]);
  });
  for (const [, out] of await Promise.all(both)) {
    assert.equal(out.status, 'completed');
    assert.equal(out.finalText, 'done');
  }
  assert.equal(runs.length, agents.length, 'each approved call ran once');
});

test('a parent dismissed while frozen on its worker settles the worker; its suspended usage counted the worker', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'arkagent-worker-dismissed-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const runs = [];
  const used = (n) => ({ prompt_tokens: n, completion_tokens: 0, total_tokens: n });
  const agent = open(dir, [
    { tool_calls: [{ id: 'call_0', name: 'delegate_task', arguments: '{"task":"wipe the cache"}' }], usage: used(1) },
    { tool_calls: [{ id: 'w1', name: 'wipe_cache', arguments: '{"scope":"all"}' }], usage: used(10) },
    // What a worker resumed after the dismissal would take: nobody would read it.
    { content: 'wiped it', usage: used(1000) },
  ], runs, { enableDelegation: true });
  const out = await agent.run('p', 'have a worker wipe the cache');
  assert.equal(out.status, 'awaiting_approval');
  assert.equal(JSON.parse(out.usageJson).total_tokens, 11, 'the frozen worker\'s tokens are in it');
  const worker = JSON.parse(out.batchJson).worker_session;
  const done = await agent.dismiss('p', 'never mind');
  assert.equal(done.status, 'completed');
  assert.equal(JSON.parse(done.usageJson).total_tokens, 11);
  const state = JSON.parse(await agent.stateJson(worker));
  assert.equal(state.status, 'completed');
  assert.equal(state.pending_approval ?? null, null);
  await rejectsWithCode(assert, agent.resume(worker), 'invalid_state', 'runtime');
  assert.deepEqual(runs, [], 'nothing ran');
});

test('a parent dismissed after one of two side-by-side workers\' items was approved runs neither', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'arkagent-worker-dismissed-beside-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const wipe = (scope) => ({ tool_calls: [{ id: 'w1', name: 'wipe_cache', arguments: JSON.stringify({ scope }) }] });
  for (const which of [0, 1]) {
    const runs = [];
    const agent = open(join(dir, String(which)), [
      { tool_calls: ['A', 'B'].map((s, i) => ({ id: `d${i}`, name: 'delegate_task', arguments: JSON.stringify({ task: s }) })) },
      wipe('A'),
      wipe('B'),
      { content: 'worker answer' },
    ], runs, { enableDelegation: true });
    const out = await agent.run('p', 'go');
    const batch = JSON.parse(out.batchJson);
    assert.equal(batch.items.length, 2, 'both workers\' items in one batch');
    await agent.approve('p', batch.items[which].approval_id);
    const done = await agent.dismiss('p', 'never mind');
    assert.equal(done.status, 'completed');
    assert.deepEqual(runs, [], 'the batch was not approved entirely: nothing ran');
    const parent = JSON.parse(await agent.stateJson('p'));
    const results = parent.messages.filter((m) => m.role === 'tool').map((m) => m.content);
    assert.equal(results.length, 2);
    for (const r of results) assert.match(r, /tool_not_run/);
    for (const worker of parent.workers) {
      const state = JSON.parse(await agent.stateJson(worker));
      assert.equal(state.status, 'completed');
      const answered = state.messages.filter((m) => m.role === 'tool').map((m) => m.content);
      assert.equal(answered.length, 1);
      assert.match(answered[0], /never mind/);
    }
  }
});
