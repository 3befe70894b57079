// The teardown of a worker's environment (an ArkTS Worker or TaskPool thread, a Node worker): what
// the module had going in it must end with it, promptly and without taking anything else down.
// - an export reading an argument when the worker ends must not abort the process;
// - the runs of its Agents are cancelled (state saved, the session let go at once, as a killed
//   process lets go), and a started executor is answered `tool_interrupted` ("may or may not have
//   taken effect"), never "threw" nor held until its tool timeout;
// - the module's runtime (two `arkagent-rt` workers, a capped blocking pool) outlives the first
//   environment that loaded the module.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { runNode } from './helper.mjs';

const prelude = String.raw`
const { Worker } = require('node:worker_threads');
const { mkdtempSync, rmSync, readdirSync, readFileSync } = require('node:fs');
const { join } = require('node:path');
const os = require('node:os');
const load = () => { const m = { exports: {} }; process.dlopen(m, process.env.ARKAGENT_SO); return m.exports; };
// Runs 'again' on session s of agent a as soon as the terminated worker's run has let it go (it is
// session_busy until then; at most 10 s).
const runWhenFree = async (a) => {
  const t0 = Date.now();
  for (;;) {
    try {
      return await a.run('s', 'again');
    } catch (e) {
      if (e.code !== 'session_busy' || Date.now() - t0 > 10000) throw e;
    }
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
};
`;

// A getter of an argument ends the worker (process.exit inside a Worker) while the export reads it.
const getterExit = String.raw`
const body = String.raw${'`'}
  const { workerData } = require('node:worker_threads');
  const m = { exports: {} }; process.dlopen(m, process.env.ARKAGENT_SO);
  const { Agent, ToolRegistry } = m.exports;
  const exitGetter = (o, k) => Object.defineProperty(o, k, { enumerable: true, get() { process.exit(3); } });
  const d = { name: 't', parametersJson: '{"type":"object"}' };
  if (workerData === 'Agent') new Agent(exitGetter({ provider: 'scripted' }, 'model'));
  if (workerData === 'registerTool') new Agent({ provider: 'scripted', scriptJson: '[]' }).registerTool(exitGetter(d, 'description'), () => ({}));
  if (workerData === 'register') new ToolRegistry().register(exitGetter(d, 'description'), () => ({}));
  if (workerData === 'execute') new ToolRegistry().execute(exitGetter({ id: 'c', arguments: '{}' }, 'name'));
${'`'};
(async () => {
  for (const which of ['Agent', 'registerTool', 'register', 'execute']) {
    const w = new Worker(body, { eval: true, env: process.env, workerData: which });
    console.log(which, await new Promise((resolve) => w.once('exit', resolve)));
  }
  const { Agent } = load();
  const agent = new Agent({ provider: 'scripted', scriptJson: JSON.stringify([{ content: 'main ok' }]) });
  console.log((await agent.run('s', 'hi')).finalText);
})();
`;

test('a worker that ends while an export reads its argument ends alone', async () => {
  const { code, out, err } = await runNode(['-e', prelude + getterExit], {
    env: { ARKAGENT_LOG: 'error' },
    ms: 60_000,
  });
  assert.equal(code, 0, `exit: ${code}; stderr: ${err.slice(-2000)}`);
  assert.equal(out.trim(), 'Agent 3\nregisterTool 3\nregister 3\nexecute 3\nmain ok');
});

// A worker's Agent (stateDir) runs a tool whose executor has started and not answered (a payment
// under way); the worker is terminated. The main thread, over the same stateDir, must find the
// session free well within the 60 s tool timeout, and the call answered tool_interrupted (by the
// cut-off run, or by the next run's repair when the cancel left it unanswered), never "threw".
const executorCut = String.raw`
const body = String.raw${'`'}
  const { parentPort, workerData } = require('node:worker_threads');
  const m = { exports: {} }; process.dlopen(m, process.env.ARKAGENT_SO);
  const { Agent } = m.exports;
  const a = new Agent({ provider: 'scripted', stateDir: workerData, toolTimeoutMs: 60000,
    scriptJson: JSON.stringify([{ tool_calls: [{ id: 'c1', name: 'pay', arguments: '{}' }] }, { content: 'after' }]) });
  a.registerTool({ name: 'pay', description: 'd', parametersJson: '{"type":"object"}' }, () => {
    parentPort.postMessage('paying');
    return new Promise(() => {});
  });
  a.run('s', 'go');
${'`'};
const { Agent } = load();
(async () => {
  const answers = {};
  let slowest = 0;
  for (let i = 0; i < 6; i++) {
    const dir = mkdtempSync(join(os.tmpdir(), 'arkagent-teardown-'));
    const w = new Worker(body, { eval: true, env: process.env, workerData: dir });
    await new Promise((resolve) => w.once('message', resolve));
    await w.terminate();
    const t0 = Date.now();
    const a = new Agent({ provider: 'scripted', stateDir: dir, scriptJson: JSON.stringify([{ content: 'again' }]) });
    // What the model is shown for the call: the cut-off run's answer, or (a cancel left it
    // unanswered) the one the next run's repair gives it. The session is busy until the worker's
    // run has let it go.
    await runWhenFree(a);
    slowest = Math.max(slowest, Date.now() - t0);
    const st = JSON.parse(await a.stateJson('s'));
    for (const m of st.messages.filter((m) => m.role === 'tool')) {
      const code = m.content.match(/tool_[a-z_]+/)?.[0] ?? m.content.slice(0, 60);
      answers[code] = (answers[code] || 0) + 1;
    }
    rmSync(dir, { recursive: true, force: true });
  }
  console.log(JSON.stringify({ answers, freedWithin5s: slowest < 5000 }));
})();
`;

test("a terminated worker's started executor is answered tool_interrupted and its session freed at once", async () => {
  const { code, out, err } = await runNode(['-e', prelude + executorCut], {
    env: { ARKAGENT_LOG: 'error' },
    ms: 90_000,
  });
  assert.equal(code, 0, `exit: ${code}; stderr: ${err.slice(-2000)}`);
  assert.deepEqual(JSON.parse(out), { answers: { tool_interrupted: 6 }, freedWithin5s: true });
});

// The first environment to load the module is a worker; once it has ended, the module's runtime
// is still its own: two arkagent-rt workers, a blocking pool of at most 16 (stateDir file work).
const runtimeKept = String.raw`
const threads = () => {
  const names = {};
  for (const t of readdirSync('/proc/self/task')) {
    const n = readFileSync('/proc/self/task/' + t + '/comm', 'utf8').trim();
    if (/arkagent|tokio/.test(n)) names[n] = (names[n] || 0) + 1;
  }
  return names;
};
const body = String.raw${'`'}
  const { parentPort } = require('node:worker_threads');
  const m = { exports: {} }; process.dlopen(m, process.env.ARKAGENT_SO);
  const a = new m.exports.Agent({ provider: 'scripted', scriptJson: JSON.stringify([{ content: 'w' }]) });
  a.run('s', 'go').then((o) => parentPort.postMessage(o.finalText));
${'`'};
(async () => {
  const w = new Worker(body, { eval: true, env: process.env });
  const said = await new Promise((resolve) => w.once('message', resolve));
  await w.terminate();
  await new Promise((resolve) => setTimeout(resolve, 200));
  const { Agent } = load();
  const dir = mkdtempSync(join(os.tmpdir(), 'arkagent-teardown-rt-'));
  const runs = [];
  for (let i = 0; i < 200; i++) {
    const a = new Agent({ provider: 'scripted', stateDir: dir, scriptJson: JSON.stringify([{ content: 'x' }]) });
    runs.push(a.run('s' + i, 'go'));
  }
  let peak = 0;
  const names = new Set();
  const iv = setInterval(() => {
    const t = threads();
    Object.keys(t).forEach((n) => names.add(n));
    peak = Math.max(peak, Object.values(t).reduce((x, y) => x + y, 0));
  }, 5);
  const outcomes = await Promise.all(runs);
  clearInterval(iv);
  rmSync(dir, { recursive: true, force: true });
  console.log(JSON.stringify({ said, done: outcomes.length, names: [...names], atMost18: peak <= 18 }));
})();
`;

test("the module's runtime outlives the first worker that loaded it", async () => {
  const { code, out, err } = await runNode(['-e', prelude + runtimeKept], {
    env: { ARKAGENT_LOG: 'error' },
    ms: 60_000,
  });
  assert.equal(code, 0, `exit: ${code}; stderr: ${err.slice(-2000)}`);
  assert.deepEqual(JSON.parse(out), { said: 'w', done: 200, names: ['arkagent-rt'], atMost18: true });
});

// A call queued behind a busy executor when the worker is terminated is never entered: a
// terminating environment still drains its queued calls, but runs no JS. It is answered as not
// run ("the tool did not run"); before, the drain marked it started first, and it was answered as cut
// off while it ran ("may or may not have taken effect") about half the time.
const queuedNotEntered = String.raw`
const body = String.raw${'`'}
  const { parentPort, workerData } = require('node:worker_threads');
  const { writeFileSync } = require('node:fs');
  const m = { exports: {} }; process.dlopen(m, process.env.ARKAGENT_SO);
  const { Agent } = m.exports;
  const a = new Agent({ provider: 'scripted', stateDir: workerData,
    scriptJson: JSON.stringify([{ tool_calls: [{ id: 'c1', name: 'act', arguments: '{}' }, { id: 'c2', name: 'act', arguments: '{}' }] }, { content: 'after' }]) });
  a.registerTool({ name: 'act', description: 'd', parametersJson: '{"type":"object"}' }, (_args, ctx) => {
    writeFileSync(workerData + '/entered-' + ctx.callId, '');
    parentPort.postMessage('entered');
    const t = Date.now();
    while (Date.now() - t < 60000) {} // the JS thread busy: c2 stays queued
    return new Promise(() => {});
  });
  a.run('s', 'go');
${'`'};
const { Agent } = load();
(async () => {
  const seen = [];
  for (let i = 0; i < 3; i++) {
    const dir = mkdtempSync(join(os.tmpdir(), 'arkagent-teardown-q-'));
    const w = new Worker(body, { eval: true, env: process.env, workerData: dir });
    await new Promise((resolve) => w.once('message', resolve));
    await new Promise((resolve) => setTimeout(resolve, 200)); // c2 queued behind the busy c1
    await w.terminate();
    const a = new Agent({ provider: 'scripted', stateDir: dir, scriptJson: JSON.stringify([{ content: 'again' }]) });
    await runWhenFree(a);
    const st = JSON.parse(await a.stateJson('s'));
    // What the model reads of each call: "did not run" (tool_not_started from the cut-off run, or
    // the next run's repair of a call the cancel left unanswered), or "may or may not have taken
    // effect" (tool_interrupted, a call cut off while it ran).
    const said = (c) => (/may or may not have taken effect/.test(c) ? 'may have run' : /did not run/.test(c) ? 'did not run' : c);
    const codes = st.messages.filter((m) => m.role === 'tool').map((m) => m.tool_call_id + ' ' + said(m.content));
    seen.push({ codes, entered: readdirSync(dir).filter((f) => f.startsWith('entered-')) });
    rmSync(dir, { recursive: true, force: true });
  }
  console.log(JSON.stringify(seen));
})();
`;

test('a call queued behind a busy executor when the worker ends is answered as not run, never entered', async () => {
  const { code, out, err } = await runNode(['-e', prelude + queuedNotEntered], {
    env: { ARKAGENT_LOG: 'error' },
    ms: 90_000,
  });
  assert.equal(code, 0, `exit: ${code}; stderr: ${err.slice(-2000)}`);
  const expected = { codes: ['c1 may have run', 'c2 did not run'], entered: ['entered-c1'] };
  assert.deepEqual(JSON.parse(out), [expected, expected, expected]);
});
