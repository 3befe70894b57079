// 500 concurrent executor calls: every result comes back, paired with its own call.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { setTimeout as sleep } from 'node:timers/promises';
import { loadModule, objectSchema, text } from './helper.mjs';

const { ToolRegistry } = loadModule();

test('500 concurrent calls, async and sync executors mixed, all paired correctly', async () => {
  const r = new ToolRegistry();
  let inFlight = 0;
  let maxInFlight = 0;
  r.register({ name: 'slow_echo', description: 'd', parametersJson: objectSchema }, async (args, ctx) => {
    inFlight++;
    maxInFlight = Math.max(maxInFlight, inFlight);
    const { i } = JSON.parse(args);
    await sleep(i % 7);
    inFlight--;
    return text(`${ctx.callId}:${i}`);
  });
  r.register({ name: 'sync_echo', description: 'd', parametersJson: objectSchema }, (args, ctx) => text(`${ctx.callId}:${JSON.parse(args).i}`));
  const calls = [];
  for (let i = 0; i < 500; i++) {
    const name = i % 2 === 0 ? 'slow_echo' : 'sync_echo';
    calls.push(r.execute({ id: `c${i}`, name, arguments: JSON.stringify({ i }) }));
  }
  const results = await Promise.all(calls);
  assert.equal(results.length, 500);
  results.forEach((res, i) => assert.equal(res.contents[0].text, `c${i}:${i}`));
  assert.ok(maxInFlight > 1, `the async executor calls overlapped (max ${maxInFlight} in flight)`);
});
