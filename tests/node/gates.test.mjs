// ToolRegistry.execute runs the core's four gates before the executor: registered, arguments parse
// as a JSON object (within the limits), schema, not cancelled. A gate's failure rejects with its
// coded error and the executor never runs.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { loadModule, rejectsWithCode, text } from './helper.mjs';

const { ToolRegistry, CancellationHandle } = loadModule();

function registryWithCounter(options) {
  const r = new ToolRegistry(options);
  const seen = [];
  const schema = { type: 'object', properties: { qty: { type: 'integer' } }, required: ['qty'] };
  r.register({ name: 'stock', description: 'd', parametersJson: JSON.stringify(schema) }, (args) => {
    seen.push(JSON.parse(args));
    return text('ran');
  });
  return { r, seen };
}

test('gate 1: an unknown tool is tool_not_found', async () => {
  const { r, seen } = registryWithCounter();
  const e = await rejectsWithCode(assert, r.execute({ id: 'c1', name: 'nope', arguments: '{}' }), 'tool_not_found', 'tool');
  assert.match(e.message, /nope/);
  assert.equal(seen.length, 0);
});

test('gate 2: arguments that are not JSON, not an object, or too large are decode errors', async () => {
  const { r, seen } = registryWithCounter({ maxArgumentBytes: 64 });
  await rejectsWithCode(assert, r.execute({ id: 'c1', name: 'stock', arguments: '{"qty":' }), 'json_invalid', 'decode');
  await rejectsWithCode(assert, r.execute({ id: 'c2', name: 'stock', arguments: '[1,2]' }), 'json_not_object', 'decode');
  await rejectsWithCode(assert, r.execute({ id: 'c3', name: 'stock', arguments: JSON.stringify({ qty: 1, pad: 'x'.repeat(100) }) }), 'json_too_large', 'decode');
  assert.equal(seen.length, 0);
});

test('gate 2: arguments nested deeper than the limit are json_too_deep', async () => {
  const { r, seen } = registryWithCounter({ maxArgumentDepth: 3 });
  await rejectsWithCode(assert, r.execute({ id: 'c1', name: 'stock', arguments: '{"qty":1,"a":{"b":{"c":{"d":{}}}}}' }), 'json_too_deep', 'decode');
  assert.equal(seen.length, 0);
});

test('gate 2: a key repeated in one object is json_invalid naming it (an approval would show one value and run the other)', async () => {
  const { r, seen } = registryWithCounter();
  const e = await rejectsWithCode(assert, r.execute({ id: 'c1', name: 'stock', arguments: '{"qty":1,"qty":900}' }), 'json_invalid', 'decode');
  assert.match(e.message, /"qty" appears twice/);
  await rejectsWithCode(assert, r.execute({ id: 'c2', name: 'stock', arguments: '{"qty":1,"o":{"a":1,"a":1}}' }), 'json_invalid', 'decode');
  assert.equal(seen.length, 0);
});

test('gate 2: a lone surrogate escape in the arguments (a string cut inside an emoji) reads as U+FFFD', async () => {
  const { r, seen } = registryWithCounter();
  await r.execute({ id: 'c1', name: 'stock', arguments: '{"qty":1,"note":"cut \\ud83d"}' });
  assert.deepEqual(seen, [{ qty: 1, note: 'cut \uFFFD' }]);
});

test('gate 3: arguments that break the schema are tool_argument_*', async () => {
  const { r, seen } = registryWithCounter();
  await rejectsWithCode(assert, r.execute({ id: 'c1', name: 'stock', arguments: '{"qty":"three"}' }), 'tool_argument_type_mismatch', 'tool');
  assert.equal(seen.length, 0);
});

test('gate 4: a signal cancelled before the call is tool_cancelled with its reason', async () => {
  const { r, seen } = registryWithCounter();
  const h = new CancellationHandle();
  h.cancel('user left');
  const e = await rejectsWithCode(assert, r.execute({ id: 'c1', name: 'stock', arguments: '{"qty":1}' }, h), 'tool_cancelled', 'cancelled');
  assert.match(e.message, /user left/);
  assert.equal(seen.length, 0);
});

test('a call that passes the gates reaches the executor with its arguments', async () => {
  const { r, seen } = registryWithCounter();
  const result = await r.execute({ id: 'c1', name: 'stock', arguments: '{"qty":3}' });
  assert.deepEqual(result.contents, [{ type: 'text', text: 'ran' }]);
  assert.deepEqual(seen, [{ qty: 3 }]);
});
