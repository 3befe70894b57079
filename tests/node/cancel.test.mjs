// Cancellation: the CancellationHandle API, and a cancel during a call reaching the JS executor.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { setTimeout as sleep } from 'node:timers/promises';
import { loadModule, objectSchema, rejectsWithCode, text, waitFor } from './helper.mjs';

const { ToolRegistry, CancellationHandle } = loadModule();

test('CancellationHandle: not cancelled, then cancelled; the first reason wins', async () => {
  const h = new CancellationHandle();
  assert.equal(h.cancelled, false);
  assert.equal(h.reason, null);
  const heard = [];
  h.onCancel((reason) => heard.push(`a:${reason}`));
  h.cancel('first');
  h.cancel('second');
  assert.equal(h.cancelled, true);
  assert.equal(h.reason, 'first');
  await waitFor(() => heard.length >= 1, 'the first listener');
  // Registered after the fact: still called, once.
  h.onCancel((reason) => heard.push(`b:${reason}`));
  await waitFor(() => heard.length >= 2, 'the second listener');
  await sleep(30);
  assert.deepEqual(heard, ['a:first', 'b:first']);
  const d = new CancellationHandle();
  d.cancel();
  assert.equal(d.reason, 'cancelled by the app');
});

test('an async onCancel callback that rejects is contained: no unhandled rejection', async (t) => {
  const unhandled = [];
  const record = (reason) => unhandled.push(String(reason));
  process.on('unhandledRejection', record);
  t.after(() => process.off('unhandledRejection', record));
  const h = new CancellationHandle();
  const heard = [];
  h.onCancel(async () => {
    throw new Error('cleanup failed');
  });
  h.onCancel((r) => heard.push(r));
  h.cancel('go');
  await waitFor(() => heard.length >= 1, 'the healthy listener');
  await sleep(50);
  assert.deepEqual(unhandled, []);
});

test('a throwing onCancel callback is contained', async () => {
  const h = new CancellationHandle();
  const heard = [];
  h.onCancel(() => {
    throw new Error('listener bug');
  });
  h.onCancel(() => {
    throw 'a primitive';
  });
  h.onCancel((r) => heard.push(r));
  h.cancel('go');
  await waitFor(() => heard.length >= 1, 'the healthy listener');
  await sleep(30);
  assert.deepEqual(heard, ['go']);
});

test('a cancel during the call reaches the executor and rejects with tool_cancelled', async () => {
  const r = new ToolRegistry();
  const log = [];
  let release;
  r.register({ name: 'long', description: 'd', parametersJson: objectSchema }, (args, ctx) => {
    log.push(`start cancelled=${ctx.signal.cancelled}`);
    return new Promise((resolve) => {
      release = resolve;
      ctx.signal.onCancel((reason) => {
        log.push(`onCancel ${reason} cancelled=${ctx.signal.cancelled} reason=${ctx.signal.reason}`);
        resolve(text('stopped early'));
      });
    });
  });
  const h = new CancellationHandle();
  const pending = r.execute({ id: 'c1', name: 'long', arguments: '{}' }, h);
  await waitFor(() => log.length >= 1, 'the executor to start');
  assert.deepEqual(log, ['start cancelled=false']);
  h.cancel('user pressed stop');
  const e = await rejectsWithCode(assert, pending, 'tool_cancelled', 'cancelled');
  assert.match(e.message, /user pressed stop/);
  await waitFor(() => log.length >= 2, 'onCancel in the executor');
  assert.deepEqual(log, ['start cancelled=false', 'onCancel user pressed stop cancelled=true reason=user pressed stop']);
  assert.equal(typeof release, 'function');
});

test('cancelling one call does not touch the others', async () => {
  const r = new ToolRegistry();
  r.register({ name: 'wait', description: 'd', parametersJson: objectSchema }, async (args) => {
    await sleep(40);
    return text(args);
  });
  const h1 = new CancellationHandle();
  const h2 = new CancellationHandle();
  const p1 = r.execute({ id: 'c1', name: 'wait', arguments: '{"n":1}' }, h1);
  const p2 = r.execute({ id: 'c2', name: 'wait', arguments: '{"n":2}' }, h2);
  h1.cancel('only one');
  await rejectsWithCode(assert, p1, 'tool_cancelled');
  assert.equal((await p2).contents[0].text, '{"n":2}');
  assert.equal(h2.cancelled, false);
});
