// Node exits by itself: a child process loads the module, registers tools, runs calls (including
// a timeout, a cancellation and an onCancel listener that never fires), runs an Agent with a
// listener and hooks, and returns from its script; it must exit on its own, quickly, with nothing
// keeping its event loop alive.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { buildModule, runNode } from './helper.mjs';

const child = String.raw`
const m = { exports: {} };
process.dlopen(m, process.env.ARKAGENT_SO);
const { ToolRegistry, CancellationHandle, Agent } = m.exports;
const r = new ToolRegistry();
const schema = JSON.stringify({ type: 'object' });
r.register({ name: 'echo', description: 'd', parametersJson: schema }, async (a) => ({ contents: [{ type: 'text', text: a }] }));
r.register({ name: 'hang', description: 'd', parametersJson: schema, timeoutMs: 50 }, () => new Promise(() => {}));
r.register({ name: 'boom', description: 'd', parametersJson: schema }, () => { throw new Error('x'); });
const idle = new CancellationHandle();
idle.onCancel(() => console.log('never'));
(async () => {
  const calls = [];
  for (let i = 0; i < 50; i++) calls.push(r.execute({ id: 'c' + i, name: 'echo', arguments: '{"i":' + i + '}' }));
  await Promise.all(calls);
  await r.execute({ id: 'h', name: 'hang', arguments: '{}' }).catch((e) => e.code);
  await r.execute({ id: 'b', name: 'boom', arguments: '{}' }).catch((e) => e.code);
  const h = new CancellationHandle();
  const p = r.execute({ id: 'k', name: 'hang', arguments: '{}' }, h).catch((e) => e.code);
  h.cancel('bye');
  // An Agent with an event listener, a hook with every method and a tool: none of them may keep
  // the process alive once the run is over.
  const agent = new Agent({ provider: 'scripted', scriptJson: JSON.stringify([
    { tool_calls: [{ id: 'a1', name: 'echo', arguments: '{}' }] }, { content: 'bye' }]) });
  agent.registerTool({ name: 'echo', description: 'd', parametersJson: schema }, async (a) => ({ contents: [{ type: 'text', text: a }] }));
  const noop = () => undefined;
  agent.addHook({ beforeToolCall: noop, afterToolCall: async () => undefined, onRunStart: noop, onApprovalRequired: noop, onRunEnd: noop, onError: noop,
    beforeModelCall: noop, afterModelResponse: async () => undefined, beforePersistState: async () => 'persist' });
  let events = 0;
  agent.onEvent(() => events++);
  const out = await agent.run('s', 'hi');
  console.log('done', await p, out.finalText, events > 5);
})();
`;

test('a process that used the module exits by itself', async () => {
  buildModule();
  const started = Date.now();
  const { code, out, err } = await runNode(['-e', child], { ms: 10_000 });
  const elapsed = Date.now() - started;
  assert.equal(code, 0, `exit: ${code}; stderr: ${err}`);
  assert.equal(out.trim(), 'done tool_cancelled bye true');
  assert.ok(elapsed < 5000, `exited after ${elapsed} ms`);
});

// A listener or an onCancel callback that throws a value whose reads throw too (a Proxy): napi-ohos
// reads the thrown value's message, and that second exception was left pending, which Node reports
// as an uncaught exception (fatal under --force-node-api-uncaught-exceptions-policy=true; a
// deprecation warning otherwise).
const throwing = String.raw`
const m = { exports: {} };
process.dlopen(m, process.env.ARKAGENT_SO);
const { Agent, CancellationHandle } = m.exports;
const hostile = () => new Proxy({}, { get() { throw new Error('trap'); } });
const agent = new Agent({ provider: 'scripted', scriptJson: JSON.stringify([{ content: 'done' }]) });
agent.onEvent(() => { throw hostile(); });
const handle = new CancellationHandle();
handle.onCancel(() => { throw hostile(); });
handle.cancel('now');
agent.run('s', 'hi').then((out) => setTimeout(() => console.log(out.finalText), 50));
`;

test('a listener or an onCancel callback throwing a hostile value leaves no uncaught exception', async () => {
  const { code, out, err } = await runNode(['--force-node-api-uncaught-exceptions-policy=true', '-e', throwing]);
  assert.equal(code, 0, `exit: ${code}; stderr: ${err}`);
  assert.equal(out.trim(), 'done');
});
