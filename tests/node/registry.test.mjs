// ToolRegistry registration (coded errors), names, copyInto / copyIntoExcluding, definitionsJson,
// and the free functions.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { loadModule, objectSchema, rejectsWithCode, text, throwsWithCode } from './helper.mjs';

const { ToolRegistry, CancellationHandle, version, canonicalJson } = loadModule();
const noop = () => text('ok');

test('version is the crate version', () => {
  assert.match(version(), /^\d+\.\d+\.\d+/);
});

test('registration errors carry code and layer', () => {
  const r = new ToolRegistry();
  throwsWithCode(assert, () => r.register({ name: '', description: 'd', parametersJson: objectSchema }, noop), 'tool_name_empty', 'config');
  throwsWithCode(assert, () => r.register({ name: '   ', description: 'd', parametersJson: objectSchema }, noop), 'tool_name_empty', 'config');
  throwsWithCode(assert, () => r.register({ name: '\uFEFF', description: 'd', parametersJson: objectSchema }, noop), 'tool_name_empty', 'config');
  throwsWithCode(assert, () => r.register({ name: '查询订单', description: 'd', parametersJson: objectSchema }, noop), 'tool_name_invalid', 'config');
  throwsWithCode(assert, () => r.register({ name: 'a'.repeat(65), description: 'd', parametersJson: objectSchema }, noop), 'tool_name_invalid', 'config');
  r.register({ name: 'a', description: 'd', parametersJson: objectSchema }, noop);
  const dup = throwsWithCode(assert, () => r.register({ name: 'a', description: 'other', parametersJson: objectSchema }, noop), 'tool_name_duplicate', 'config');
  assert.match(dup.message, /a/);
  throwsWithCode(assert, () => r.register({ name: 'b', description: 'd', parametersJson: '{not json' }, noop), 'schema_invalid_root', 'config');
  throwsWithCode(assert, () => r.register({ name: 'c', description: 'd', parametersJson: objectSchema, riskLevel: 'scary' }, noop), 'config_invalid', 'config');
  for (const timeoutMs of [0, -5, 1.5, NaN, Infinity, 1e12]) {
    throwsWithCode(assert, () => r.register({ name: 'd', description: 'd', parametersJson: objectSchema, timeoutMs }, noop), 'config_invalid', 'config');
  }
  // Failed registrations left nothing behind.
  assert.deepEqual(r.names(), ['a']);
});

test('a parametersJson nesting too deep is schema_too_deep, not "not JSON"', () => {
  // Each level of properties is two JSON levels: 64 of them once tripped serde_json's guard and
  // were refused as schema_invalid_root "parametersJson of x is not JSON: recursion limit exceeded".
  const props = (n, leaf) => n === 0 ? leaf : { type: 'object', properties: { a: props(n - 1, leaf) } };
  const r = new ToolRegistry();
  const register = (name, schema) => r.register({ name, description: 'd', parametersJson: JSON.stringify(schema) }, noop);
  register('at_127_levels', props(63, { type: 'string' }));
  register('at_128_levels', props(63, { const: [] }));
  for (const schema of [props(64, { type: 'string' }), props(63, { const: [[]] })]) {
    const e = throwsWithCode(assert, () => register('x', schema), 'schema_too_deep', 'config');
    assert.equal(e.message, 'parametersJson of x nests deeper than 128 JSON levels (a subschema under properties or anyOf is two levels below its parent)');
  }
  // Within 128 JSON levels, the compiler's own limit of 64 subschemas decides.
  const items = (n) => n === 0 ? { type: 'string' } : { type: 'array', items: items(n - 1) };
  const e = throwsWithCode(assert, () => register('y', { type: 'object', properties: { a: items(64) } }), 'schema_too_deep', 'config');
  assert.match(e.message, /^schema nests deeper than 64 levels/);
  const bad = throwsWithCode(assert, () => r.register({ name: 'z', description: 'd', parametersJson: '{not json' }, noop), 'schema_invalid_root', 'config');
  assert.equal(bad.message, 'parametersJson of z is not JSON: key must be a string at line 1 column 2');
  assert.deepEqual(r.names(), ['at_127_levels', 'at_128_levels']);
});

test('a parametersJson naming a key twice in one object is schema_invalid_root', () => {
  // The model is sent the text as written (both keys), the validator would keep the last: refused.
  const r = new ToolRegistry();
  const twice = '{"type":"object","properties":{"a":{"type":"string"},"a":{"type":"integer"}}}';
  const e = throwsWithCode(assert, () => r.register({ name: 'twice', description: 'd', parametersJson: twice }, noop), 'schema_invalid_root', 'config');
  assert.equal(e.message, 'parametersJson of twice is not JSON: the name "a" appears twice in an object at line 1 column 76');
  assert.deepEqual(r.names(), []);
});

test('registry options are checked', () => {
  for (const options of [{ defaultTimeoutMs: -5 }, { defaultTimeoutMs: 0 }, { maxArgumentBytes: 0 }, { maxArgumentDepth: 2.5 }, { maxArgumentBytes: -1 }]) {
    throwsWithCode(assert, () => new ToolRegistry(options), 'config_invalid', 'config');
  }
  assert.deepEqual(new ToolRegistry({ defaultTimeoutMs: 10, maxArgumentBytes: 10, maxArgumentDepth: 3 }).names(), []);
  // A count above the largest one taken says what the range is (it said "a positive whole number").
  const e = throwsWithCode(assert, () => new ToolRegistry({ maxArgumentBytes: 1e12 }), 'config_invalid', 'config');
  assert.match(e.message, /maxArgumentBytes must be a whole number from 1 to 4294967295, not 1000000000000/);
});

test('a definition missing a required field is a TypeError from the binding, not a crash', () => {
  const r = new ToolRegistry();
  assert.throws(() => r.register({ name: 'x', description: 'd' }, noop));
  assert.throws(() => r.register({ name: 'x', description: 'd', parametersJson: objectSchema }, 'not a function'));
  assert.deepEqual(r.names(), []);
});

test('names keep registration order; unregister removes', () => {
  const r = new ToolRegistry();
  for (const n of ['zeta', 'alpha', 'mid']) {
    r.register({ name: n, description: n, parametersJson: objectSchema }, noop);
  }
  assert.deepEqual(r.names(), ['zeta', 'alpha', 'mid']);
  assert.equal(r.unregister('alpha'), true);
  assert.equal(r.unregister('alpha'), false);
  assert.deepEqual(r.names(), ['zeta', 'mid']);
  r.register({ name: 'alpha', description: 'again', parametersJson: objectSchema }, noop);
  assert.deepEqual(r.names(), ['zeta', 'mid', 'alpha']);
});

test('copyIntoExcluding: a worker registry without the tools it must not have; the executors are shared', async () => {
  const parent = new ToolRegistry();
  const runs = [];
  for (const name of ['read', 'write', 'purge']) {
    parent.register({ name, description: name, parametersJson: objectSchema, riskLevel: name === 'write' ? 'dangerous' : 'safe' },
      () => { runs.push(name); return text(`${name} ran`); });
  }
  const worker = new ToolRegistry();
  worker.register({ name: 'own', description: 'own', parametersJson: objectSchema }, noop);
  parent.copyIntoExcluding(worker, ['purge', 'not_registered']);
  // After the target's own tools, in the source's order; definitions copied as they are.
  assert.deepEqual(worker.names(), ['own', 'read', 'write']);
  assert.deepEqual(JSON.parse(worker.definitionsJson()).map((d) => [d.name, d.risk_level]),
    [['own', 'safe'], ['read', 'safe'], ['write', 'dangerous']]);
  assert.equal((await worker.execute({ id: 'c1', name: 'write', arguments: '{}' })).contents[0].text, 'write ran');
  await rejectsWithCode(assert, worker.execute({ id: 'c2', name: 'purge', arguments: '{}' }), 'tool_not_found', 'tool');
  assert.deepEqual(runs, ['write'], 'the parent\'s executor ran, once');
  // The two registries are independent from now on.
  assert.equal(worker.unregister('read'), true);
  assert.deepEqual(parent.names(), ['read', 'write', 'purge']);
});

// The Agent refuses an app's delegate_task (the delegation's name), delegation on or off; a
// registry took one, which an app could then copy or run as if it were the delegation.
test('delegate_task is tool_name_reserved here too, as on the Agent: no registry holds one to copy', () => {
  const r = new ToolRegistry();
  const e = throwsWithCode(assert, () => r.register({ name: 'delegate_task', description: 'mine', parametersJson: objectSchema }, noop),
    'tool_name_reserved', 'config');
  assert.match(e.message, /^the tool name delegate_task is reserved for delegation to sub-agents: /);
  assert.deepEqual(r.names(), []);
  // Only that exact name: a tool named like it is the app's.
  r.register({ name: 'delegate_tasks', description: 'mine', parametersJson: objectSchema }, noop);
  const target = new ToolRegistry();
  r.copyInto(target);
  assert.deepEqual(target.names(), ['delegate_tasks']);
});

test('copyInto: a name the target has is tool_name_duplicate, and the target is unchanged', async () => {
  const parent = new ToolRegistry();
  for (const name of ['read', 'write']) parent.register({ name, description: name, parametersJson: objectSchema }, () => text(`parent ${name}`));
  const clash = new ToolRegistry();
  clash.register({ name: 'write', description: 'mine', parametersJson: objectSchema }, () => text('mine'));
  const e = throwsWithCode(assert, () => parent.copyInto(clash), 'tool_name_duplicate', 'config');
  assert.match(e.message, /write/);
  assert.deepEqual(clash.names(), ['write'], 'not even `read` was copied');
  assert.equal((await clash.execute({ id: 'c', name: 'write', arguments: '{}' })).contents[0].text, 'mine');
  throwsWithCode(assert, () => parent.copyIntoExcluding(clash, ['read']), 'tool_name_duplicate', 'config');
  parent.copyIntoExcluding(clash, ['write']);
  assert.deepEqual(clash.names(), ['write', 'read']);
  // Into itself: every name clashes, unless nothing is copied; no deadlock either way.
  throwsWithCode(assert, () => parent.copyInto(parent), 'tool_name_duplicate', 'config');
  parent.copyIntoExcluding(parent, ['read', 'write']);
  assert.deepEqual(parent.names(), ['read', 'write']);
  const empty = new ToolRegistry();
  empty.copyInto(empty);
  empty.copyInto(parent);
  assert.deepEqual(parent.names(), ['read', 'write']);
});

test('copied tools meet the target\'s argument limits; a target that is not a registry is refused', async () => {
  const parent = new ToolRegistry();
  parent.register({ name: 'echo', description: 'd', parametersJson: objectSchema }, (args) => text(args));
  const small = new ToolRegistry({ maxArgumentBytes: 16 });
  parent.copyInto(small);
  const long = JSON.stringify({ note: 'x'.repeat(40) });
  assert.equal((await parent.execute({ id: 'c', name: 'echo', arguments: long })).contents[0].text, long);
  await rejectsWithCode(assert, small.execute({ id: 'c', name: 'echo', arguments: long }), 'json_too_large', 'decode');
  for (const target of [{}, null, undefined, 'registry', new CancellationHandle()]) {
    throwsWithCode(assert, () => parent.copyInto(target), 'argument_invalid', 'config');
    throwsWithCode(assert, () => parent.copyIntoExcluding(target, []), 'argument_invalid', 'config');
  }
  // excludedNames must be an array.
  throwsWithCode(assert, () => parent.copyIntoExcluding(small, 'echo'), 'argument_invalid', 'config');
  assert.deepEqual(parent.names(), ['echo']);
});

test('definitionsJson carries every field of the definitions', () => {
  const r = new ToolRegistry();
  const schema = { type: 'object', properties: { id: { type: 'string' } }, required: ['id'] };
  r.register({ name: 'cancel_order', description: 'Cancel', parametersJson: JSON.stringify(schema), riskLevel: 'dangerous', idempotent: true, timeoutMs: 1500 }, noop);
  r.register({ name: 'query', description: 'Query', parametersJson: objectSchema }, noop);
  const defs = JSON.parse(r.definitionsJson());
  assert.deepEqual(defs, [
    { name: 'cancel_order', description: 'Cancel', parameters: schema, risk_level: 'dangerous', idempotent: true, timeout: 1500 },
    { name: 'query', description: 'Query', parameters: { type: 'object' }, risk_level: 'safe', idempotent: false },
  ]);
});

test('canonicalJson sorts keys at every level and rejects bad JSON with a coded error', () => {
  assert.equal(canonicalJson('{"b":1,"a":{"d":[3,{"z":1,"y":2}],"c":"x"}}'), '{"a":{"c":"x","d":[3,{"y":2,"z":1}]},"b":1}');
  assert.equal(canonicalJson(' [ true , null ] '), '[true,null]');
  throwsWithCode(assert, () => canonicalJson('{"a":'), 'json_invalid', 'decode');
  // RFC 8785 takes I-JSON: a name twice in an object is refused, not merged.
  const twice = throwsWithCode(assert, () => canonicalJson('{"a":1,"a":2}'), 'json_invalid', 'decode');
  assert.match(twice.message, /appears twice/);
  // Bigger than the arguments' limits: canonicalized all the same.
  const big = JSON.stringify({ list: Array.from({ length: 200000 }, (_, i) => i) });
  assert.equal(canonicalJson(big), big);
});

test('canonicalJson and a registry allowing 128 levels agree: 128 levels are accepted, 129 refused', async () => {
  // serde_json's guard once refused 128 levels in canonicalJson ("deeper than the limit of 128").
  const nest = (n) => '['.repeat(n) + ']'.repeat(n);
  assert.equal(canonicalJson(nest(127)), nest(127));
  assert.equal(canonicalJson(nest(128)), nest(128));
  const e = throwsWithCode(assert, () => canonicalJson(nest(129)), 'json_too_deep', 'decode');
  assert.equal(e.message, 'JSON nests deeper than the limit of 128 levels');
  const r = new ToolRegistry({ maxArgumentDepth: 128 });
  r.register({ name: 't', description: 'd', parametersJson: objectSchema }, noop);
  // The object is level 1: {"a": nest(n - 1)} nests n levels.
  for (const n of [127, 128]) await r.execute({ id: 'c', name: 't', arguments: `{"a":${nest(n - 1)}}` });
  const deep = await rejectsWithCode(assert, r.execute({ id: 'c', name: 't', arguments: `{"a":${nest(128)}}` }), 'json_too_deep', 'decode');
  assert.equal(deep.message, e.message);
});

// RFC 8785 number forms (ECMAScript Number-to-String).
test('canonicalJson uses RFC 8785 number forms', () => {
  assert.equal(canonicalJson('[1.0, -0, 1e21, 1e-7, 0.000001, 100]'), '[1,0,1e+21,1e-7,0.000001,100]');
});

test('a refused element of excludedNames is named by its index, as contents[i] of a result is', async () => {
  const r = new ToolRegistry();
  r.register({ name: 'keep', description: 'd', parametersJson: objectSchema }, noop);
  const refusal = (names) => throwsWithCode(assert, () => r.copyIntoExcluding(new ToolRegistry(), names), 'argument_invalid', 'config').message;
  assert.equal(refusal(['a', 5]), 'wrong argument: excludedNames[1]: expected a string, got a number (5)');
  assert.equal(refusal(['a', 'b', {}]), 'wrong argument: excludedNames[2]: expected a string, got an object');
  assert.equal(refusal([null]), 'wrong argument: excludedNames[0]: expected a string, got null');
  assert.match(refusal(['a', 'b\uDC00']), /^wrong argument: excludedNames\[1\]: holds a lone UTF-16 surrogate \(\\uDC00 at index 1\)/);
  const holey = ['a'];
  holey[3] = 'b';
  assert.equal(refusal(holey), 'wrong argument: excludedNames[1]: undefined, a hole in the array');
  const getter = ['a', 'b'];
  Object.defineProperty(getter, 1, { get() { throw new Error('no element'); } });
  assert.equal(refusal(getter), 'wrong argument: excludedNames[1]: reading it threw Error: no element');
  // Nothing was copied by a refused call; a good list still works.
  const target = new ToolRegistry();
  r.copyIntoExcluding(target, ['x', 'y']);
  assert.deepEqual(target.names(), ['keep']);
  // The elements of a result's contents are named the same way, with the field.
  r.register({ name: 'bad', description: 'd', parametersJson: objectSchema }, () => ({ contents: [{ type: 'text', text: 'a' }, { type: 'text', text: 5 }] }));
  const e = await rejectsWithCode(assert, r.execute({ id: 'c', name: 'bad', arguments: '{}' }), 'tool_result_invalid', 'tool');
  assert.match(e.message, /not a ToolResult: contents\[1\]\.text: expected a string, got a number \(5\)$/);
});
