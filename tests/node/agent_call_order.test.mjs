// Calls on one session that the app does not await hold the session in the order the app made
// them, through the real .so: each call reserves its place on the JS thread (Agent::reserve_turn,
// Agent::deletion_turn for deleteSession) and runs in it on the runtime, whichever worker thread
// starts first. Repeated, because the tasks' start order is up to the scheduler: before the fix,
// either call could go first.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { loadModule, openWipeAgent } from './helper.mjs';

const { Agent } = loadModule();
const ROUNDS = 40;

function tempDir(t) {
  const dir = mkdtempSync(join(tmpdir(), 'arkagent-order-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

test('two runs not awaited: the first asked for runs first, every time', async () => {
  for (let round = 0; round < ROUNDS; round += 1) {
    const answers = [{ content: 'one' }, { content: 'two' }];
    const agent = new Agent({ provider: 'scripted', scriptJson: JSON.stringify(answers) });
    const first = agent.run('s', 'first');
    const second = agent.run('s', 'second');
    const [a, b] = await Promise.all([first, second]);
    assert.deepEqual([a.finalText, b.finalText], ['one', 'two'], `round ${round}`);
    const texts = JSON.parse(await agent.stateJson('s')).messages.map((m) => m.content);
    assert.deepEqual(texts, ['first', 'one', 'second', 'two'], `round ${round}`);
  }
});

test('approve then resume, neither awaited: the decision is made before the resume reads it', async (t) => {
  const dir = tempDir(t);
  for (let round = 0; round < ROUNDS / 4; round += 1) {
    const runs = [];
    const session = `s${round}`;
    const agent = openWipeAgent(dir, [{ tool_calls: [{ id: 'w1', name: 'wipe_cache', arguments: '{}' }] }, { content: 'done' }], runs);
    const suspended = await agent.run(session, 'wipe it');
    assert.equal(suspended.status, 'awaiting_approval');
    const approvalId = JSON.parse(suspended.batchJson).items[0].approval_id;
    const approving = agent.approve(session, approvalId);
    const resuming = agent.resume(session);
    const [batch, out] = await Promise.all([approving, resuming]);
    assert.equal(JSON.parse(batch).items[0].decision, 'approved', `round ${round}`);
    assert.deepEqual([out.status, out.finalText], ['completed', 'done'], `round ${round}`);
    assert.equal(runs.length, 1, `round ${round}`);
  }
});

// The user deletes a chat and starts a new one under the same id. Before the fix deleteSession
// took the session only when its task ran: it was session_busy although called first, or it ran
// after the run and deleted the new conversation (deleteSession true, run completed, state null).
for (const where of ['in memory', 'with a stateDir']) {
  const newAgent = (t) => {
    const script = Array.from({ length: 2 * ROUNDS + 1 }, (_, i) => ({ content: `answer ${i}` }));
    const stateDir = where === 'in memory' ? {} : { stateDir: tempDir(t) };
    return new Agent({ provider: 'scripted', scriptJson: JSON.stringify(script), ...stateDir });
  };
  const userMessages = async (agent) => {
    const state = JSON.parse(await agent.stateJson('s'));
    return state && state.messages.filter((m) => m.role === 'user').map((m) => m.content);
  };

  test(`deleteSession then run, neither awaited (${where}): deleted first, the new conversation kept`, async (t) => {
    const agent = newAgent(t);
    for (let round = 0; round < ROUNDS; round += 1) {
      await agent.run('s', `old ${round}`);
      const deleting = agent.deleteSession('s');
      const running = agent.run('s', `new ${round}`);
      const [deleted, out] = await Promise.allSettled([deleting, running]);
      assert.deepEqual([deleted.value, out.value?.status], [true, 'completed'], `round ${round}: ${deleted.reason}`);
      assert.deepEqual(await userMessages(agent), [`new ${round}`], `round ${round}`);
    }
  });

  test(`run then deleteSession, neither awaited (${where}): the deletion is session_busy`, async (t) => {
    const agent = newAgent(t);
    await agent.run('s', 'old');
    for (let round = 0; round < ROUNDS; round += 1) {
      const running = agent.run('s', `again ${round}`);
      const deleting = agent.deleteSession('s');
      const [out, deleted] = await Promise.allSettled([running, deleting]);
      assert.equal(out.value?.status, 'completed', `round ${round}`);
      assert.deepEqual([deleted.reason?.code, deleted.reason?.layer], ['session_busy', 'persistence'], `round ${round}`);
      assert.equal((await userMessages(agent)).length, round + 2, `round ${round}: nothing deleted`);
    }
    // Once the run has settled, the deletion applies.
    assert.equal(await agent.deleteSession('s'), true);
    assert.equal(await agent.stateJson('s'), null);
  });

  // A new session: the calls after the run wait for it, then find the session it wrote. Before the
  // fix they looked for it before waiting their turn and failed with session_not_found (with a
  // stateDir every time): the user's decision was dropped and the batch stayed frozen.
  const wipeAgent = (t, answers, runs) =>
    openWipeAgent(where === 'in memory' ? undefined : tempDir(t), answers, runs);
  const wipeCall = { tool_calls: [{ id: 'w1', name: 'wipe_cache', arguments: '{}' }] };

  test(`run, approveAll, resume on a new session, none awaited (${where}): approved, then resumed`, async (t) => {
    for (let round = 0; round < ROUNDS / 2; round += 1) {
      const runs = [];
      const agent = wipeAgent(t, [wipeCall, { content: 'done' }], runs);
      const running = agent.run('s', 'wipe it');
      const approving = agent.approveAll('s');
      const resuming = agent.resume('s');
      const [out, batch, resumed] = await Promise.allSettled([running, approving, resuming]);
      assert.equal(out.value?.status, 'awaiting_approval', `round ${round}: ${out.reason}`);
      assert.equal(JSON.parse(batch.value ?? 'null')?.items[0].decision, 'approved', `round ${round}: ${batch.reason}`);
      assert.deepEqual([resumed.value?.status, resumed.value?.finalText], ['completed', 'done'], `round ${round}: ${resumed.reason}`);
      assert.equal(runs.length, 1, `round ${round}`);
    }
  });

  test(`run then dismiss on a new session, neither awaited (${where}): dismissed once frozen`, async (t) => {
    for (let round = 0; round < ROUNDS / 2; round += 1) {
      const runs = [];
      const agent = wipeAgent(t, [wipeCall], runs);
      const running = agent.run('s', 'wipe it');
      const dismissing = agent.dismiss('s', 'user moved on');
      const [out, dismissed] = await Promise.allSettled([running, dismissing]);
      assert.equal(out.value?.status, 'awaiting_approval', `round ${round}: ${out.reason}`);
      assert.equal(dismissed.value?.status, 'completed', `round ${round}: ${dismissed.reason}`);
      assert.equal(await agent.pendingApprovalJson('s'), null, `round ${round}`);
      assert.equal(runs.length, 0, `round ${round}`);
    }
  });

  test(`setMetadata, deleteSession, run, none awaited (${where}): in that order`, async (t) => {
    const agent = newAgent(t);
    for (let round = 0; round < ROUNDS / 4; round += 1) {
      const setting = agent.setMetadata('s', 'userId', JSON.stringify(`u-${round}`));
      const deleting = agent.deleteSession('s');
      const running = agent.run('s', `new ${round}`);
      const [set, deleted, out] = await Promise.allSettled([setting, deleting, running]);
      assert.deepEqual([set.status, deleted.value, out.value?.status], ['fulfilled', true, 'completed'], `round ${round}`);
      const state = JSON.parse(await agent.stateJson('s'));
      assert.deepEqual([state.metadata, await userMessages(agent)], [{}, [`new ${round}`]], `round ${round}`);
    }
  });
}

// From inside the run's own hook, on a new session: approveAll (not awaited) from onRunStart waits
// for the run, then decides the batch it froze on. Before the fix it was session_not_found: the
// session is written only by the run's first persist, after onRunStart.
test('approveAll not awaited from onRunStart of a new session decides the batch the run freezes on', async (t) => {
  const dir = tempDir(t);
  for (let round = 0; round < ROUNDS / 4; round += 1) {
    const runs = [];
    const session = `s${round}`;
    const agent = openWipeAgent(dir, [{ tool_calls: [{ id: 'w1', name: 'wipe_cache', arguments: '{}' }] }], runs);
    let approving;
    agent.addHook({ onRunStart: () => { approving ??= agent.approveAll(session); } });
    const out = await agent.run(session, 'wipe it');
    assert.equal(out.status, 'awaiting_approval', `round ${round}`);
    assert.equal(JSON.parse(await approving).items[0].decision, 'approved', `round ${round}`);
    assert.equal(JSON.parse(await agent.pendingApprovalJson(session)).items[0].decision, 'approved', `round ${round}`);
  }
});
