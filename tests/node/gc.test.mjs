// The GC and the objects the binding hands to executors: a call's `context.signal` is collected
// once nothing holds it (it used to live as long as the process: one native handle leaked per
// executor call), and an `onCancel` registration made through it outlives the object, since the
// run still cancels the call (a cancel, a timeout) after the context was collected.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { setTimeout as sleep } from 'node:timers/promises';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { loadModule, objectSchema, text, waitFor } from './helper.mjs';

const { ToolRegistry, CancellationHandle } = loadModule();

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
