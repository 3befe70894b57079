// Calls on one session that the app does not await hold the session in the order the app made
// them, through the real .so: each call reserves its place on the JS thread (Agent::reserve_turn)
// and runs in it on the runtime, whichever worker thread starts first. Repeated, because the
// tasks' start order is up to the scheduler: before the fix, either call could go first.
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
