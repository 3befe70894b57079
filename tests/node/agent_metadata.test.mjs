// Agent.setMetadata(sessionId, key, valueJson) through the real .so: an executor of the next run
// reads the metadata in context.metadataJson, stateJson shows it, 'null' removes a key, it is
// durable in a stateDir (a new Agent, as after an app restart, sees it), bad keys, values and
// arguments are coded errors, and a run holding the session makes it reject with session_busy.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { loadModule, objectSchema, openWipeAgent, rejectsWithCode, text, throwsWithCode } from './helper.mjs';

const { Agent } = loadModule();

/** A scripted agent whose `whoami` tool records the metadata it sees; one call, then an answer. */
function whoamiAgent(extra = {}) {
  const agent = new Agent({
    provider: 'scripted',
    scriptJson: JSON.stringify([{ tool_calls: [{ id: 'c1', name: 'whoami', arguments: '{}' }] }, { content: 'done' }]),
    ...extra,
  });
  const seen = [];
  agent.registerTool({ name: 'whoami', description: 'the user', parametersJson: objectSchema }, (_args, ctx) => {
    seen.push(JSON.parse(ctx.metadataJson));
    return text('ok');
  });
  return { agent, seen };
}

function tempStateDir(t) {
  const dir = mkdtempSync(join(tmpdir(), 'arkagent-meta-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

test('an executor of the next run reads what setMetadata set; stateJson shows it', async () => {
  const { agent, seen } = whoamiAgent();
  assert.equal(await agent.setMetadata('s1', 'userId', '"u-42"'), undefined);
  await agent.setMetadata('s1', 'profile', '{"tier":"gold","tags":["a",1,null]}');
  const created = JSON.parse(await agent.stateJson('s1'));
  assert.equal(created.status, 'idle');
  assert.deepEqual(created.messages, []);

  const out = await agent.run('s1', 'who am I?');
  assert.equal(out.status, 'completed', JSON.stringify(out));
  assert.deepEqual(seen, [{ profile: { tier: 'gold', tags: ['a', 1, null] }, userId: 'u-42' }]);
  assert.deepEqual(JSON.parse(await agent.stateJson('s1')).metadata, seen[0]);
});

test("'null' removes a key; the metadata is durable in stateDir across a new Agent", async (t) => {
  const dir = tempStateDir(t);
  const first = whoamiAgent({ stateDir: dir }).agent;
  await first.setMetadata('s', 'userId', '"u-7"');
  await first.setMetadata('s', 'locale', '"zh-CN"');
  await first.setMetadata('s', 'locale', 'null');
  // Removing from a session that does not exist creates nothing.
  await first.setMetadata('ghost', 'userId', 'null');
  assert.equal(await first.stateJson('ghost'), null);
  assert.equal(existsSync(join(dir, 'ghost')), false);
  assert.equal(existsSync(join(dir, '..locks', 'ghost')), false, 'not even a lock file');

  const { agent, seen } = whoamiAgent({ stateDir: dir });
  assert.deepEqual(JSON.parse(await agent.stateJson('s')).metadata, { userId: 'u-7' });
  await agent.run('s', 'who am I?');
  assert.deepEqual(seen, [{ userId: 'u-7' }]);
});

test('bad keys, values and arguments are coded errors, and nothing is written', async () => {
  const { agent } = whoamiAgent();
  const cases = [
    ['s', '', '1', 'metadata_key_invalid', 'config'],
    ['s', 'k'.repeat(129), '1', 'metadata_key_invalid', 'config'],
    ['s', 'a\u0000b', '1', 'metadata_key_invalid', 'config'],
    ['s', 'userId', 'not json', 'json_invalid', 'decode'],
    ['s', 'userId', '{"a":1} trailing', 'json_invalid', 'decode'],
    // A key twice: which value is meant is ambiguous (one was kept without a word).
    ['s', 'userId', '{"a":1,"a":2}', 'json_invalid', 'decode'],
    ['s', 'userId', '[{"b":{"c":1,"c":1}}]', 'json_invalid', 'decode'],
    ['s', 'userId', '['.repeat(70) + ']'.repeat(70), 'json_too_deep', 'decode'],
    ['s', 'userId', JSON.stringify('x'.repeat(70 * 1024)), 'json_too_large', 'decode'],
    ['../up', 'userId', '1', 'session_id_invalid', 'config'],
  ];
  for (const [session, key, value, code, layer] of cases) {
    await rejectsWithCode(assert, agent.setMetadata(session, key, value), code, layer);
  }
  assert.equal(await agent.stateJson('s'), null);
  // A value's refusal names the key it was for (an app sets several in a row).
  for (const [value, code] of [['not json', 'json_invalid'], ['{"a":1,"a":2}', 'json_invalid'],
    ['['.repeat(70) + ']'.repeat(70), 'json_too_deep'], [JSON.stringify('x'.repeat(70 * 1024)), 'json_too_large']]) {
    const e = await rejectsWithCode(assert, agent.setMetadata('s', 'cartId', value), code, 'decode');
    assert.match(e.message, /^the value of metadata key "cartId"/, code);
  }
  // Arguments of the wrong type (an untyped caller): argument_invalid, thrown at once.
  throwsWithCode(assert, () => agent.setMetadata('s', 'userId'), 'argument_invalid', 'config');
  throwsWithCode(assert, () => agent.setMetadata('s', 5, '1'), 'argument_invalid', 'config');
  throwsWithCode(assert, () => agent.setMetadata('s', 'userId', { a: 1 }), 'argument_invalid', 'config');
  // The whole metadata is bounded too.
  const chunk = JSON.stringify('y'.repeat(60 * 1024));
  let accepted = 0;
  for (;;) {
    try {
      await agent.setMetadata('big', `k${accepted}`, chunk);
      accepted++;
    } catch (e) {
      assert.equal(e.code, 'metadata_too_large', e.message);
      break;
    }
    assert.ok(accepted < 100, 'the total is never bounded');
  }
  assert.equal(accepted, 4);
});

test('while a run holds the session setMetadata rejects with session_busy; afterwards it applies', async () => {
  const agent = new Agent({
    provider: 'scripted',
    scriptJson: JSON.stringify([{ tool_calls: [{ id: 'c1', name: 'slow', arguments: '{}' }] }, { content: 'done' }]),
  });
  let release;
  const gate = new Promise((r) => (release = r));
  let started;
  const running = new Promise((r) => (started = r));
  const seen = [];
  agent.registerTool({ name: 'slow', description: 'waits', parametersJson: objectSchema }, async (_a, ctx) => {
    seen.push(JSON.parse(ctx.metadataJson));
    started();
    await gate;
    return text('ok');
  });
  await agent.setMetadata('s', 'userId', '"before"');
  const run = agent.run('s', 'go');
  await running;
  await rejectsWithCode(assert, agent.setMetadata('s', 'userId', '"during"'), 'session_busy', 'persistence');
  // A bad value is refused as such, busy or not: the app learns to fix it, not to wait.
  await rejectsWithCode(assert, agent.setMetadata('s', 'userId', '{"unclosed"'), 'json_invalid', 'decode');
  await rejectsWithCode(assert, agent.setMetadata('s', 'userId', '['.repeat(70) + ']'.repeat(70)), 'json_too_deep', 'decode');
  await rejectsWithCode(assert, agent.setMetadata('s', 'x'.repeat(129), '1'), 'metadata_key_invalid', 'config');
  await agent.setMetadata('other', 'userId', '"free"');
  release();
  assert.equal((await run).status, 'completed');
  assert.deepEqual(seen, [{ userId: 'before' }]);
  assert.deepEqual(JSON.parse(await agent.stateJson('s')).metadata, { userId: 'before' });
  await agent.setMetadata('s', 'userId', '"after"');
  assert.deepEqual(JSON.parse(await agent.stateJson('s')).metadata, { userId: 'after' });
});

test('setMetadata calls not awaited, one after another: each applies in order, and a run called after sees them all', async (t) => {
  // index.d.ts: setMetadata rejects session_busy while a run, resume or decision holds the
  // session, not while another setMetadata does; with a stateDir every change takes real I/O, so
  // the second call always came while the first held the session (session_busy 20 of 20 before).
  for (let i = 0; i < 5; i++) {
    const { agent, seen } = whoamiAgent({ stateDir: tempStateDir(t) });
    const settled = Promise.allSettled([
      agent.setMetadata('s', 'userId', `"u-${i}"`),
      agent.setMetadata('s', 'locale', '"zh-CN"'),
      agent.setMetadata('s', 'userId', `"v-${i}"`),
    ]);
    const outcome = await agent.run('s', 'who am I?');
    assert.deepEqual((await settled).map((s) => s.reason?.code ?? s.status), ['fulfilled', 'fulfilled', 'fulfilled']);
    assert.equal(outcome.status, 'completed');
    assert.deepEqual(seen, [{ userId: `v-${i}`, locale: 'zh-CN' }]);
  }
});

test('run() not awaited, then setMetadata(): the run keeps its place, the change is session_busy and the run never sees it', async () => {
  // index.d.ts: a run asked for before a setMetadata comes first. Before the run reserved its
  // place where the app called it, the change applied first (the run saw it) in most tries with
  // the in-memory store, and was session_busy the others.
  for (let i = 0; i < 20; i++) {
    const { agent, seen } = whoamiAgent();
    const run = agent.run(`s${i}`, 'who am I?');
    const change = agent.setMetadata(`s${i}`, 'userId', `"late-${i}"`);
    const [ran, changed] = await Promise.allSettled([run, change]);
    assert.equal(ran.status, 'fulfilled', String(ran.reason?.message));
    assert.equal(ran.value.status, 'completed');
    assert.deepEqual(seen, [{}], `try ${i}: the run saw a change asked for after it`);
    assert.equal(changed.reason?.code, 'session_busy', `try ${i}: ${changed.status}`);
    // Once the run is over the session takes changes again.
    await agent.setMetadata(`s${i}`, 'userId', `"after-${i}"`);
    assert.deepEqual(JSON.parse(await agent.stateJson(`s${i}`)).metadata, { userId: `after-${i}` });
  }
});

test('setMetadata A, run R, setMetadata B, none awaited: A applies and R sees it, B is session_busy', async (t) => {
  // Before: B queued behind A and was handed the session before R, which then saw B.
  for (let i = 0; i < 5; i++) {
    const { agent, seen } = whoamiAgent({ stateDir: tempStateDir(t) });
    const a = agent.setMetadata('s', 'userId', '"a"');
    const r = agent.run('s', 'who am I?');
    const b = agent.setMetadata('s', 'userId', '"b"');
    const [sa, sr, sb] = await Promise.allSettled([a, r, b]);
    assert.equal(sa.status, 'fulfilled', String(sa.reason?.message));
    assert.equal(sr.value?.status, 'completed', String(sr.reason?.message));
    assert.equal(sb.reason?.code, 'session_busy', `try ${i}: ${sb.status}`);
    assert.deepEqual(seen, [{ userId: 'a' }]);
    assert.deepEqual(JSON.parse(await agent.stateJson('s')).metadata, { userId: 'a' });
  }
});

test('a session frozen on a sub-agent call is in the middle of a batch: setMetadata is invalid_state', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'arkagent-meta-batch-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const runs = [];
  const agent = openWipeAgent(dir, [
    { tool_calls: [{ id: 'call_0', name: 'delegate_task', arguments: '{"task":"wipe the cache"}' }] },
    { tool_calls: [{ id: 'w1', name: 'wipe_cache', arguments: '{"scope":"all"}' }] },
    { content: 'worker wiped it' },
    { content: 'done' },
  ], runs, { enableDelegation: true });
  await agent.setMetadata('p', 'userId', '"alice"');
  const out = await agent.run('p', 'have a worker wipe the cache');
  assert.equal(out.status, 'awaiting_approval');
  const before = await agent.stateJson('p');
  const e = await rejectsWithCode(assert, agent.setMetadata('p', 'userId', '"bob"'), 'invalid_state', 'runtime');
  assert.match(e.message, /middle of a batch/);
  assert.equal(await agent.stateJson('p'), before, 'nothing written');
  await agent.approve('p', JSON.parse(out.batchJson).items[0].approval_id);
  assert.equal((await agent.resume('p')).status, 'completed');
  await agent.setMetadata('p', 'userId', '"bob"');
  assert.equal(JSON.parse(await agent.stateJson('p')).metadata.userId, 'bob');
});

test('an API key the app put in metadata reaches neither the state nor an executor\'s context', async () => {
  // An Agent with a key registers it with the process logger as a secret for as long as it lives.
  const key = 'sk-metadata-secret-7c2e4a';
  const keyed = new Agent({ provider: 'custom', baseUrl: 'http://127.0.0.1:9/v1', model: 'm', apiKey: key });
  const { agent, seen } = whoamiAgent();
  await agent.setMetadata('s1', 'auth', JSON.stringify({ header: `Bearer ${key}`, [key]: 1, list: [key] }));
  const state = await agent.stateJson('s1');
  assert.ok(!state.includes(key), state);
  assert.deepEqual(JSON.parse(state).metadata.auth, { header: 'Bearer [REDACTED]', '[REDACTED]': 1, list: ['[REDACTED]'] });
  assert.equal((await agent.run('s1', 'who am I?')).status, 'completed');
  assert.deepEqual(seen[0].auth, { header: 'Bearer [REDACTED]', '[REDACTED]': 1, list: ['[REDACTED]'] });

  const { ToolRegistry } = loadModule();
  const registry = new ToolRegistry();
  const contexts = [];
  registry.register({ name: 't', description: 'd', parametersJson: objectSchema }, (_args, ctx) => {
    contexts.push(ctx.metadataJson);
    return text('ok');
  });
  await registry.execute({ id: 'c1', name: 't', arguments: '{}' }, undefined, { metadataJson: JSON.stringify({ token: key }) });
  assert.deepEqual(contexts.map((c) => JSON.parse(c)), [{ token: '[REDACTED]' }]);
  assert.deepEqual(keyed.toolNames(), []);
});
