// ToolRegistry registration (coded errors), names, definitionsJson, and the free functions.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { loadModule, objectSchema, text, throwsWithCode } from './helper.mjs';

const { ToolRegistry, version, canonicalJson } = loadModule();
const noop = () => text('ok');

test('version is the crate version', () => {
  assert.match(version(), /^\d+\.\d+\.\d+/);
});

test('registration errors carry code and layer', () => {
  const r = new ToolRegistry();
  throwsWithCode(assert, () => r.register({ name: '', description: 'd', parametersJson: objectSchema }, noop), 'tool_name_empty', 'config');
  throwsWithCode(assert, () => r.register({ name: '   ', description: 'd', parametersJson: objectSchema }, noop), 'tool_name_empty', 'config');
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

test('registry options are checked', () => {
  for (const options of [{ defaultTimeoutMs: -5 }, { defaultTimeoutMs: 0 }, { maxArgumentBytes: 0 }, { maxArgumentDepth: 2.5 }, { maxArgumentBytes: -1 }]) {
    throwsWithCode(assert, () => new ToolRegistry(options), 'config_invalid', 'config');
  }
  assert.deepEqual(new ToolRegistry({ defaultTimeoutMs: 10, maxArgumentBytes: 10, maxArgumentDepth: 3 }).names(), []);
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
});

// RFC 8785 number forms (ECMAScript Number-to-String).
test('canonicalJson uses RFC 8785 number forms', () => {
  assert.equal(canonicalJson('[1.0, -0, 1e21, 1e-7, 0.000001, 100]'), '[1,0,1e+21,1e-7,0.000001,100]');
});
