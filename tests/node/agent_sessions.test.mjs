// Agent.listSessionsJson(includeWorkers?) and Agent.definitionsJson() through the real .so: the
// conversations of a stateDir after a restart (a fresh Agent), their summaries (status, pending
// approval, title, message count, time), a run whose process was killed with SIGKILL listed as
// interrupted and continued by resume(), a session another live process is running listed busy (not
// interrupted) until that process is killed, sub-agent workers only with includeWorkers, a corrupt
// session listed with its error, a deleted one gone, a bad argument a coded error.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { loadModule, objectSchema, openWipeAgent, rejectsWithCode, runUntilKilled, startUntil } from './helper.mjs';

const { Agent } = loadModule();

function tempDir(t) {
  const dir = mkdtempSync(join(tmpdir(), 'arkagent-sessions-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

const wipeCall = { tool_calls: [{ id: 'w1', name: 'wipe_cache', arguments: '{}' }] };

test('a fresh Agent over a stateDir lists its conversations with their summaries', async (t) => {
  const dir = tempDir(t);
  const runs = [];
  const first = openWipeAgent(dir, [{ content: 'hello back' }, wipeCall], runs);
  assert.deepEqual(JSON.parse(await first.listSessionsJson()), []);
  await first.run('chat-b', '  first\nquestion  ');
  assert.equal((await first.run('chat-a', 'wipe it')).status, 'awaiting_approval');

  const restarted = openWipeAgent(dir, [], runs);
  const list = JSON.parse(await restarted.listSessionsJson());
  assert.deepEqual(list.map((s) => s.session_id), ['chat-a', 'chat-b']);
  const [a, b] = list;
  assert.deepEqual(
    { status: b.status, title: b.title, count: b.message_count, pending: b.approval_pending, interrupted: b.interrupted },
    { status: 'completed', title: 'first question', count: 2, pending: false, interrupted: false },
  );
  assert.equal(b.error, null);
  assert.equal(b.run_error, null);
  assert.equal(b.last_message, 'hello back', 'the answer is the preview line');
  assert.equal(b.parent_session, null);
  assert.ok(Math.abs(b.updated_at_ms - Date.now()) < 60_000, `updated_at_ms ${b.updated_at_ms}`);
  assert.deepEqual({ status: a.status, pending: a.approval_pending }, { status: 'awaiting_approval', pending: true });
  assert.deepEqual(runs, []);

  // A deleted session is gone; an in-memory agent lists what it ran.
  assert.equal(await restarted.deleteSession('chat-b'), true);
  assert.deepEqual(JSON.parse(await restarted.listSessionsJson(false)).map((s) => s.session_id), ['chat-a']);
  const memory = new Agent({ provider: 'scripted', scriptJson: JSON.stringify([{ content: 'x' }]) });
  await memory.run('m1', 'hi');
  assert.deepEqual(JSON.parse(await memory.listSessionsJson()).map((s) => [s.session_id, s.status]), [['m1', 'completed']]);
});

test('a run that failed carries its run_error; the session reads fine', async () => {
  const agent = new Agent({ provider: 'scripted', scriptJson: '[]' }); // no answer: the first round fails
  const out = await agent.run('s', 'anyone?');
  assert.equal(out.status, 'failed');
  const [s] = JSON.parse(await agent.listSessionsJson());
  assert.deepEqual([s.status, s.run_error.code, s.error, s.last_message], ['failed', out.errorCode, null, 'anyone?']);
});

test('a corrupt session is an entry with its error; a bad argument is argument_invalid', async (t) => {
  const dir = tempDir(t);
  const agent = openWipeAgent(dir, [{ content: 'a' }, { content: 'b' }], []);
  await agent.run('good', 'hi');
  await agent.run('bad', 'hi');
  for (const name of readdirSync(join(dir, 'bad'))) {
    writeFileSync(join(dir, 'bad', name), 'not a snapshot');
  }
  const list = JSON.parse(await agent.listSessionsJson());
  assert.deepEqual(list.map((s) => s.session_id), ['bad', 'good']);
  assert.equal(list[0].status, null);
  assert.deepEqual([list[0].error.code, list[0].error.layer], ['state_corrupt', 'persistence']);
  assert.equal(list[1].status, 'completed');
  await rejectsWithCode(assert, (async () => agent.listSessionsJson('yes'))(), 'argument_invalid');
});

test('sub-agent workers are listed only with includeWorkers, with their parent', async (t) => {
  const dir = tempDir(t);
  const agent = openWipeAgent(
    dir,
    [{ tool_calls: [{ id: 'call_0', name: 'delegate_task', arguments: '{"task":"wipe the cache"}' }] }, wipeCall],
    [],
    { enableDelegation: true },
  );
  assert.equal((await agent.run('p', 'have a worker wipe the cache')).status, 'awaiting_approval');
  assert.deepEqual(JSON.parse(await agent.listSessionsJson()).map((s) => s.session_id), ['p']);
  const all = JSON.parse(await agent.listSessionsJson(true));
  assert.equal(all.length, 2);
  const worker = all.find((s) => s.session_id !== 'p');
  assert.match(worker.session_id, /^w[0-9a-f]{32}$/);
  assert.equal(worker.parent_session, 'p');
  assert.equal(worker.title, 'wipe the cache');
});

test('definitionsJson lists the registered tools in order', () => {
  const agent = new Agent({ provider: 'scripted', scriptJson: '[]' });
  assert.deepEqual(JSON.parse(agent.definitionsJson()), []);
  agent.registerTool({ name: 'b_tool', description: 'B', parametersJson: objectSchema, riskLevel: 'sensitive' }, () => ({ contents: [] }));
  agent.registerTool({ name: 'a_tool', description: 'A', parametersJson: objectSchema }, () => ({ contents: [] }));
  const defs = JSON.parse(agent.definitionsJson());
  assert.deepEqual(defs.map((d) => [d.name, d.description, d.risk_level]), [['b_tool', 'B', 'sensitive'], ['a_tool', 'A', 'safe']]);
  assert.deepEqual(defs[0].parameters, { type: 'object' });
  assert.deepEqual(defs.map((d) => d.name), agent.toolNames());
});

// The child: runs a session whose tool never answers, prints once the tool started, and waits to be
// killed (SIGKILL: the run is cut short mid-call, as when the app is killed).
const child = String.raw`
const m = { exports: {} };
process.dlopen(m, process.env.ARKAGENT_SO);
const { Agent } = m.exports;
const dir = process.argv[1];
const answers = [{ tool_calls: [{ id: 'c1', name: 'slow_lookup', arguments: '{}' }] }];
const agent = new Agent({ provider: 'scripted', scriptJson: JSON.stringify(answers), stateDir: dir });
agent.registerTool({ name: 'slow_lookup', description: 'd', parametersJson: '{"type":"object"}' }, () => {
  console.log('started');
  return new Promise(() => {});
});
agent.run('trip', 'plan my trip');
setInterval(() => {}, 1000);
`;

test('a run whose process was killed is listed interrupted; resume continues it', async (t) => {
  const dir = tempDir(t);
  await runUntilKilled(['-e', child, dir], (out) => out.includes('started'), "the child's tool runs");

  const agent = new Agent({ provider: 'scripted', scriptJson: JSON.stringify([{ content: 'Hangzhou it is' }]), stateDir: dir });
  agent.registerTool({ name: 'slow_lookup', description: 'd', parametersJson: objectSchema }, () => ({ contents: [] }));
  const [trip] = JSON.parse(await agent.listSessionsJson());
  assert.deepEqual(
    { id: trip.session_id, status: trip.status, interrupted: trip.interrupted, pending: trip.approval_pending, title: trip.title },
    { id: 'trip', status: 'running', interrupted: true, pending: false, title: 'plan my trip' },
  );
  const outcome = await agent.resume('trip');
  assert.equal(outcome.status, 'completed');
  assert.equal(outcome.finalText, 'Hangzhou it is');
  const [after] = JSON.parse(await agent.listSessionsJson());
  assert.deepEqual([after.status, after.interrupted], ['completed', false]);
  // The call the kill cut short was answered tool_interrupted, never run again.
  const state = JSON.parse(await agent.stateJson('trip'));
  const result = state.messages.find((m) => m.role === 'tool');
  assert.equal(result.is_error, true);
  assert.match(result.content, /interrupt/);
});

test('a session another process is running is busy, not interrupted; once that process is killed it is', async (t) => {
  const dir = tempDir(t);
  // The other process (another instance of the app on the same stateDir) is inside the slow tool.
  const other = await startUntil(['-e', child, dir], (out) => out.includes('started'), "the child's tool runs");
  let killed = false;
  t.after(async () => {
    if (!killed) await other.kill();
  });

  const agent = new Agent({ provider: 'scripted', scriptJson: JSON.stringify([{ content: 'Hangzhou it is' }]), stateDir: dir });
  agent.registerTool({ name: 'slow_lookup', description: 'd', parametersJson: objectSchema }, () => ({ contents: [] }));
  const [trip] = JSON.parse(await agent.listSessionsJson());
  assert.deepEqual(
    { id: trip.session_id, status: trip.status, busy: trip.busy, interrupted: trip.interrupted, pending: trip.approval_pending },
    { id: 'trip', status: 'running', busy: true, interrupted: false, pending: false },
  );
  await rejectsWithCode(assert, agent.resume('trip'), 'session_busy', 'persistence');
  // Listing took nothing from the other process: it is still running its tool.
  assert.equal(other.io.out.match(/started/g).length, 1);

  await other.kill();
  killed = true;
  const [cut] = JSON.parse(await agent.listSessionsJson());
  assert.deepEqual([cut.status, cut.busy, cut.interrupted], ['running', false, true]);
  const outcome = await agent.resume('trip');
  assert.equal(outcome.status, 'completed');
  assert.equal(outcome.finalText, 'Hangzhou it is');
  const [after] = JSON.parse(await agent.listSessionsJson());
  assert.deepEqual([after.status, after.busy, after.interrupted], ['completed', false, false]);
});
