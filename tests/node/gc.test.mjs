// The GC and the objects the binding hands to executors: a call's `context.signal` is collected
// once nothing holds it (it used to live as long as the process: one native handle leaked per
// executor call), and an `onCancel` registration made through it outlives the object, since the
// run still cancels the call (a cancel, a timeout) after the context was collected. An Agent's
// listener removed with onEvent(null) is collected while the Agent's run goes on.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { setTimeout as sleep } from 'node:timers/promises';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { loadModule, objectSchema, text, waitFor } from './helper.mjs';

const { Agent, ToolRegistry, CancellationHandle } = loadModule();

setFlagsFromString('--expose-gc');
const gc = runInNewContext('gc');

/** Collects garbage until `condition()` holds (FinalizationRegistry callbacks run after a GC). */
async function collectUntil(condition, what) {
  for (let i = 0; i < 100 && !condition(); i++) {
    gc();
    await sleep(10);
  }
  assert.ok(condition(), `after 100 collections: ${what}`);
}

test("every call's context.signal is collected once the call is over", async () => {
  const calls = 2000;
  let collected = 0;
  const registry = new FinalizationRegistry(() => collected++);
  const r = new ToolRegistry();
  r.register({ name: 't', description: 'd', parametersJson: objectSchema }, (_args, ctx) => {
    registry.register(ctx.signal, null);
    return text('ok');
  });
  const all = [];
  for (let i = 0; i < calls; i++) all.push(r.execute({ id: `c${i}`, name: 't', arguments: '{}' }));
  await Promise.all(all);
  await collectUntil(() => collected === calls, `${collected} of ${calls} signals collected`);
});

test('an onCancel registered through context.signal still fires after the context was collected', async () => {
  let collected = 0;
  const registry = new FinalizationRegistry(() => collected++);
  // The callback closes over nothing that holds the context or its signal.
  const listen = (signal, callback) => signal.onCancel(callback);
  let heard = null;
  let started = false;
  const r = new ToolRegistry();
  r.register({ name: 'wait', description: 'd', parametersJson: objectSchema, timeoutMs: 10_000 }, (_args, ctx) => {
    started = true;
    registry.register(ctx.signal, null);
    let resolve;
    const done = new Promise((r) => (resolve = r));
    listen(ctx.signal, (reason) => {
      heard = reason;
      resolve(text(`stopped: ${reason}`));
    });
    return done;
  });
  const handle = new CancellationHandle();
  const pending = r.execute({ id: 'c', name: 'wait', arguments: '{}' }, handle).catch((e) => e.code);
  await waitFor(() => started, 'the executor to start');
  await collectUntil(() => collected === 1, 'the context signal collected');
  handle.cancel('stop now');
  assert.equal(await pending, 'tool_cancelled');
  await waitFor(() => heard !== null, 'the onCancel callback');
  assert.equal(heard, 'stop now');
});

test("an Agent's API key stops being a secret of the process once the Agent is collected", async () => {
  // Apps that make an Agent per user or rotate short-lived tokens: every key ever used stayed
  // registered, and every later log line and app text was searched for each of them.
  const key = 'sk-rotated-away-7c41aa';
  const r = new ToolRegistry();
  r.register({ name: 't', description: 'd', parametersJson: objectSchema }, () => {
    throw new Error(`echo ${key}`);
  });
  const thrown = async () => (await r.execute({ id: 'c', name: 't', arguments: '{}' }).catch((e) => e)).message;
  let collected = false;
  const registry = new FinalizationRegistry(() => (collected = true));
  let agent = new Agent({ provider: 'custom', baseUrl: 'http://127.0.0.1:9/v1', model: 'm', apiKey: key });
  registry.register(agent, null);
  assert.match(await thrown(), /echo \[REDACTED\]/, 'redacted while the Agent lives');
  assert.deepEqual(agent.toolNames(), []);
  agent = null;
  await collectUntil(() => collected, 'the Agent was collected');
  // Its native finalizer may run after the FinalizationRegistry's callback: look until it did.
  let shown = false;
  for (let i = 0; i < 100 && !shown; i++) {
    gc();
    await sleep(10);
    shown = (await thrown()).includes(key);
  }
  assert.ok(shown, 'the key of the collected Agent is no longer looked for');
  // Another Agent with the key registers it again.
  const again = new Agent({ provider: 'custom', baseUrl: 'http://127.0.0.1:9/v1', model: 'm', apiKey: key });
  assert.ok(!(await thrown()).includes(key));
  assert.deepEqual(again.toolNames(), []);
});

test('a listener removed while its run goes on is collected; the next one hears the rest', async () => {
  const { startMock, textChunks } = await import('./mock_openai.mjs');
  let finish;
  const finished = new Promise((r) => (finish = r));
  // The answer's first words, then nothing until the test has collected the removed listener.
  const mock = await startMock(async (_i, _request, res) => {
    const chunks = textChunks('one two three four');
    res.writeHead(200, { 'content-type': 'text/event-stream' });
    for (const chunk of chunks.slice(0, 2)) res.write(`data: ${JSON.stringify(chunk)}\n\n`);
    await finished;
    for (const chunk of chunks.slice(2)) res.write(`data: ${JSON.stringify(chunk)}\n\n`);
    res.end('data: [DONE]\n\n');
  });
  try {
    let collected = false;
    const registry = new FinalizationRegistry(() => (collected = true));
    const agent = new Agent({ provider: 'custom', baseUrl: mock.baseUrl, model: 'm' });
    let firstHeard = 0;
    const attach = () => {
      // Closes over a large object only this listener holds.
      const held = new Array(1000).fill('held');
      const first = (e) => held.length && JSON.parse(e).type === 'text_delta' && firstHeard++;
      registry.register(first, null);
      agent.onEvent(first);
    };
    attach();
    const run = agent.run('s', 'go');
    await waitFor(() => firstHeard > 0, 'the first delta heard');
    agent.onEvent(null);
    await collectUntil(() => collected, 'the removed listener was collected while the run went on');
    const deltas = [];
    agent.onEvent((e) => {
      const event = JSON.parse(e);
      if (event.type === 'text_delta') deltas.push(event.delta);
    });
    finish();
    assert.equal((await run).finalText, 'one two three four');
    assert.equal(deltas.join(''), 'two three four');
  } finally {
    finish();
    await mock.close();
  }
});
