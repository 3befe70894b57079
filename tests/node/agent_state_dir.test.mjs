// The Agent's stateDir through the real .so: a relative one is taken from the working directory
// when the Agent is made (a chdir later does not move its sessions or its locks); a name no
// directory can have (a NUL, an existing file, a lone UTF-16 surrogate) is refused by the
// constructor, not by every later call. Many runs at once on a stateDir share a few native
// threads for their file work.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { loadModule } from './helper.mjs';

const { Agent } = loadModule();

function tempDir(t) {
  const dir = mkdtempSync(join(tmpdir(), 'arkagent-statedir-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

const scripted = (stateDir) =>
  new Agent({ provider: 'scripted', scriptJson: JSON.stringify([{ content: 'one' }, { content: 'two' }]), stateDir });

test('a relative stateDir is resolved once, when the Agent is made', async (t) => {
  const root = tempDir(t);
  const [a, b] = [join(root, 'a'), join(root, 'b')];
  mkdirSync(a);
  mkdirSync(b);
  const before = process.cwd();
  t.after(() => process.chdir(before));
  process.chdir(a);
  const agent = scripted('state');
  await agent.run('chat', 'first');
  process.chdir(b);
  // The same session, in the same directory: its history goes on, nothing appears under b.
  assert.equal(JSON.parse(await agent.stateJson('chat')).messages.length, 2);
  await agent.run('chat', 'second');
  assert.equal(JSON.parse(await agent.stateJson('chat')).messages.length, 4);
  assert.deepEqual(JSON.parse(await agent.listSessionsJson()).map((s) => s.session_id), ['chat']);
  assert.ok(existsSync(join(a, 'state', 'chat')));
  assert.ok(!existsSync(join(b, 'state')), 'nothing was written under the new working directory');
});

test('a stateDir no directory can be is refused by the constructor', (t) => {
  const root = tempDir(t);
  const file = join(root, 'afile');
  writeFileSync(file, 'x');
  const refused = (stateDir, code, pattern) => {
    assert.throws(
      () => scripted(stateDir),
      (e) => e.code === code && e.layer === 'config' && pattern.test(e.message),
      JSON.stringify(stateDir),
    );
  };
  refused('', 'config_invalid', /stateDir: empty/);
  refused(join(root, 'a\u0000b'), 'config_invalid', /stateDir: holds a NUL/);
  refused(file, 'config_invalid', /stateDir: .*afile exists and is not a directory/);
  // Two spellings that would read as the same directory (x\uFFFD): refused, naming the field.
  refused(join(root, 'x\uD800'), 'argument_invalid', /stateDir.*lone UTF-16 surrogate/);
  refused(join(root, 'x\uDC00'), 'argument_invalid', /stateDir.*lone UTF-16 surrogate/);
  // A directory that does not exist yet is fine (made at the first save), so is an existing one.
  assert.ok(scripted(join(root, 'later', 'state')) instanceof Agent);
  assert.ok(scripted(root) instanceof Agent);
  assert.ok(scripted(join(root, 'x\uD83D\uDE00')) instanceof Agent);
});

test('1000 runs at once on a stateDir use a few native threads, not one per waiting file job', {
  skip: !existsSync('/proc/self/task') && 'no /proc/self/task here',
}, async (t) => {
  const stateDir = tempDir(t);
  const script = [];
  for (let i = 0; i < 1000; i++) script.push({ tool_calls: [{ id: `c${i}`, name: 't', arguments: '{}' }] });
  for (let i = 0; i < 1000; i++) script.push({ content: 'done' });
  const agent = new Agent({ provider: 'scripted', scriptJson: JSON.stringify(script), stateDir });
  agent.registerTool({ name: 't', description: 'd', parametersJson: '{"type":"object"}' },
    () => ({ contents: [{ type: 'text', text: 'ok' }] }));
  const outs = await Promise.all(Array.from({ length: 1000 }, (_, i) => agent.run(`s${i}`, 'go')));
  assert.deepEqual([...new Set(outs.map((o) => o.status))], ['completed']);
  // The runtime's idle blocking threads live on for 10 s: the count now is the peak's.
  const threads = readdirSync('/proc/self/task').length;
  assert.ok(threads < 64, `${threads} threads (the blocking pool is capped at 16)`);
});
