// Workers: an ArkTS (or Node) worker that loaded the module may be terminated while its runs and
// calls are in flight. Their Promises then belong to an environment that is gone; settling one
// later (when the run ends: a tool timeout, a policy that could not be asked) used to go through a
// freed thread-safe function and abort the whole process. The process must live on, and the
// module keep working on the main thread.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { runNode } from './helper.mjs';

const child = String.raw`
const { Worker } = require('node:worker_threads');
const load = () => { const m = { exports: {} }; process.dlopen(m, process.env.ARKAGENT_SO); return m.exports; };
// The main thread loads the module first unless told not to (then the worker's is the only one).
const main = process.argv[1] === 'main-too' ? load() : undefined;
const worker = String.raw${'`'}
  const { parentPort } = require('node:worker_threads');
  const m = { exports: {} }; process.dlopen(m, process.env.ARKAGENT_SO);
  const { Agent, ToolRegistry } = m.exports;
  const script = JSON.stringify([{ tool_calls: [{ id: 'c', name: 't', arguments: '{}' }] }, { content: 'x' }]);
  for (let i = 0; i < 4; i++) {
    // Runs whose tool never answers (they end at the 150 ms tool timeout, after the worker is gone),
    // and runs waiting on an approval policy.
    const a = new Agent({ provider: 'scripted', toolTimeoutMs: 150, scriptJson: script });
    a.registerTool({ name: 't', description: 'd', parametersJson: '{"type":"object"}' }, () => new Promise(() => {}));
    if (i % 2) a.setApprovalPolicy(() => new Promise((r) => setTimeout(() => r('allow'), 5)));
    a.run('s' + i, 'go');
  }
  const r = new ToolRegistry();
  r.register({ name: 'hang', description: 'd', parametersJson: '{"type":"object"}', timeoutMs: 150 }, () => new Promise(() => {}));
  r.execute({ id: 'h', name: 'hang', arguments: '{}' });
  setTimeout(() => parentPort.postMessage('in flight'), 20);
${'`'};
(async () => {
  for (let round = 0; round < 3; round++) {
    const w = new Worker(worker, { eval: true, env: process.env });
    await new Promise((resolve) => w.once('message', resolve));
    await w.terminate();
  }
  // Past the runs' tool timeouts: every orphaned Promise has been settled (or dropped) by now.
  await new Promise((resolve) => setTimeout(resolve, 500));
  const { Agent } = main ?? load();
  const agent = new Agent({ provider: 'scripted', scriptJson: JSON.stringify([{ content: 'main ok' }]) });
  console.log((await agent.run('s', 'hi')).finalText);
})();
`;

for (const mode of ['main-too', 'worker-only']) {
  test(`terminating workers with runs in flight leaves the process alive (${mode})`, async () => {
    const { code, out, err } = await runNode(['-e', child, mode], { env: { ARKAGENT_LOG: 'error' } });
    assert.equal(code, 0, `exit: ${code}; stderr: ${err.slice(-2000)}`);
    assert.equal(out.trim(), 'main ok');
  });
}
