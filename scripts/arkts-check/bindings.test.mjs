// Behaviour tests of the ArkTS wrapper classes of arkts-bindings/: the logic .ets files are turned into
// JavaScript with ohos-typescript's transpileModule (what the notes measured works for logic code) and
// run here. The JSON serializer is compared with JSON.stringify / JSON.parse over many values.
// Run: node --test scripts/arkts-check/bindings.test.mjs

import { test, before } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { transpileTree, importModules } from './transpile.mjs';
import { tempDir } from './tmp.mjs';

const HERE = path.dirname(fileURLToPath(import.meta.url));
const ETS = path.resolve(HERE, '..', '..', 'arkts-bindings', 'src', 'main', 'ets');

let M; // module namespace: every export of the transpiled files, by name

before(async () => {
  const dir = tempDir('arkagent-bindings-');
  transpileTree(ETS, dir);
  M = await importModules(dir, ['json/Json', 'message/Message', 'tool/Tool', 'approval/Approval', 'hook/Hook', 'event/Events',
    'error/ArkAgentError']);
});

// A seeded generator (xorshift32) so failures reproduce.
function rng(seed) {
  let s = seed >>> 0 || 1;
  return () => {
    s ^= s << 13; s >>>= 0;
    s ^= s >>> 17;
    s ^= s << 5; s >>>= 0;
    return s / 4294967296;
  };
}

function randomString(r) {
  const n = Math.floor(r() * 12);
  let s = '';
  for (let i = 0; i < n; i++) {
    const pick = r();
    if (pick < 0.2) s += String.fromCharCode(Math.floor(r() * 0x20)); // control characters
    else if (pick < 0.3) s += '"\\/'[Math.floor(r() * 3)];
    else if (pick < 0.4) s += String.fromCharCode(0xd800 + Math.floor(r() * 0x800)); // lone surrogates
    else if (pick < 0.5) s += '😀';
    else if (pick < 0.6) s += String.fromCharCode(0x7f + Math.floor(r() * 0x100)); // DEL, Latin-1
    else if (pick < 0.65) s += '\u2028\u2029';
    else s += String.fromCharCode(0x20 + Math.floor(r() * 0x5f));
  }
  return s;
}

function randomDouble(r) {
  const view = new DataView(new ArrayBuffer(8));
  for (;;) {
    view.setUint32(0, Math.floor(r() * 4294967296));
    view.setUint32(4, Math.floor(r() * 4294967296));
    const d = view.getFloat64(0);
    if (Number.isFinite(d)) return d;
  }
}

// A random plain JS value and the same value built with JsonValue.
function randomPair(r, depth) {
  const pick = Math.floor(r() * (depth > 3 ? 4 : 6));
  switch (pick) {
    case 0: return [null, M.JsonValue.nullValue()];
    case 1: { const b = r() < 0.5; return [b, M.JsonValue.bool(b)]; }
    case 2: {
      const n = r() < 0.5 ? randomDouble(r) : Math.round((r() - 0.5) * 1e6) / 1000;
      return [n, M.JsonValue.number(n)];
    }
    case 3: { const s = randomString(r); return [s, M.JsonValue.string(s)]; }
    case 4: {
      const js = []; const items = [];
      const n = Math.floor(r() * 4);
      for (let i = 0; i < n; i++) { const [a, b] = randomPair(r, depth + 1); js.push(a); items.push(b); }
      return [js, M.JsonValue.array(items)];
    }
    default: {
      const js = {}; const obj = new M.JsonObject();
      const n = Math.floor(r() * 4);
      for (let i = 0; i < n; i++) {
        // A letter first: integer-like keys are reordered by JS objects, never by JsonObject.
        const key = `k${randomString(r)}`;
        const [a, b] = randomPair(r, depth + 1);
        js[key] = a; obj.set(key, b);
      }
      return [js, M.JsonValue.object(obj)];
    }
  }
}

test('strings serialize exactly as JSON.stringify (escapes, control characters, surrogates)', () => {
  const r = rng(7);
  const fixed = ['', '"', '\\', '/', '\b\f\n\r\t', '\u0000\u001f\u007f', '\ud800', '\udc00x', '\ud83d\ude00',
    '\ude00\ud83d', 'a\u2028b', 'é中文'];
  for (const s of fixed) assert.equal(M.JsonValue.string(s).toJsonString(), JSON.stringify(s), JSON.stringify(s));
  for (let i = 0; i < 5000; i++) {
    const s = randomString(r);
    assert.equal(M.JsonValue.string(s).toJsonString(), JSON.stringify(s));
  }
});

test('numbers serialize exactly as JSON.stringify (shortest round trip, exponents, -0)', () => {
  const fixed = [0, -0, 1, -1, 0.1, 0.1 + 0.2, 1e21, 1e20, 123456789012345680000, 1e-7, 1e-6, 5e-324,
    1.7976931348623157e308, 2 ** 53, 2 ** 53 + 2, -1.5e-10, 100, 1.5];
  for (const n of fixed) assert.equal(M.JsonValue.number(n).toJsonString(), JSON.stringify(n), String(n));
  const r = rng(11);
  for (let i = 0; i < 5000; i++) {
    const n = randomDouble(r);
    const text = M.JsonValue.number(n).toJsonString();
    assert.equal(text, JSON.stringify(n));
    assert.equal(M.JsonValue.fromJsonString(text).asNumber(), n === 0 ? 0 : n);
  }
});

test('NaN and infinities are refused with json_number_invalid', () => {
  for (const n of [NaN, Infinity, -Infinity]) {
    assert.throws(() => M.JsonValue.number(n), (e) => e instanceof M.JsonError && e.code === 'json_number_invalid');
    assert.throws(() => new M.JsonObject().setNumber('x', n), (e) => e.code === 'json_number_invalid');
  }
});

test('random documents: write equals JSON.stringify, parse inverts it (compact and pretty)', () => {
  const r = rng(3);
  for (let i = 0; i < 2000; i++) {
    const [js, value] = randomPair(r, 0);
    const text = value.toJsonString();
    assert.equal(text, JSON.stringify(js));
    assert.equal(M.JsonValue.fromJsonString(text).toJsonString(), text);
    const pretty = JSON.stringify(js, null, 2);
    const back = M.JsonValue.fromJsonString(pretty);
    assert.equal(back.toJsonString(), text);
    assert.ok(back.equals(value));
  }
});

test('parse follows JSON.parse on escapes and key order; a duplicate key only when asked for', () => {
  const text = '{"b":1,"a":"\\u00e9\\ud83d\\ude00\\/\\n","b":2,"z":[true,false,null,-0.5e+2,1E3]}';
  const obj = M.JsonObject.fromJsonString(text, true);
  assert.deepEqual(obj.keys(), ['b', 'a', 'z']);
  assert.equal(obj.getNumber('b'), 2);
  assert.equal(obj.getString('a'), 'é😀/\n');
  assert.equal(obj.toJsonString(), JSON.stringify(JSON.parse(text)));
  const unique = text.replace('"b":2,', '');
  assert.equal(M.JsonObject.fromJsonString(unique).toJsonString(), JSON.stringify(JSON.parse(unique)));
});

test('a key written twice in one object is refused with json_invalid at the second key, at any depth', () => {
  const cases = [
    ['{"b":1,"a":2,"b":3}', 13, '"b"'],
    ['{"s":{"x":[{"k":1}, {"k":2,"k":2}]}}', 27, '"k"'],
    ['[{}, {"\\u0061":1, "a":2}]', 18, '"a"'], // the same key, however escaped
    [`{"${'é'.repeat(70)}":1,"${'é'.repeat(70)}":2}`, 76, `"${'é'.repeat(64)}..."`], // shown by its start
  ];
  for (const [text, offset, shown] of cases) {
    assert.throws(() => M.JsonValue.fromJsonString(text), (e) => {
      assert.ok(e instanceof M.JsonError, `${text}: ${e}`);
      assert.equal(e.code, 'json_invalid', text);
      assert.equal(e.layer, 'decode');
      assert.equal(e.offset, offset, `${text}: ${e.message}`);
      assert.equal(e.message, `the key ${shown} appears twice in one object at offset ${offset}`);
      return true;
    });
    assert.throws(() => M.JsonObject.fromJsonString(text), (e) => e.code === 'json_invalid' && e.offset === offset);
    assert.equal(M.JsonValue.fromJsonString(text, true).toJsonString(), JSON.stringify(JSON.parse(text)), text);
  }
  // Keys that differ (by case, by a character) are not duplicates.
  assert.deepEqual(M.JsonObject.fromJsonString('{"a":1,"A":2,"a ":3}').keys(), ['a', 'A', 'a ']);
});

test('numbers are JS doubles: an integer beyond 2^53 is rounded as JSON.parse rounds it', () => {
  assert.equal(M.JsonValue.fromJsonString('9007199254740993').asNumber(), 9007199254740992);
  const big = M.JsonObject.fromJsonString('{"id":12345678901234567890}');
  assert.equal(big.getNumber('id'), JSON.parse('12345678901234567890'));
  assert.equal(big.toJsonString(), '{"id":12345678901234567000}');
});

test('keepNumberText and numberLiteral keep a number as written: the double to read, the text to write', () => {
  const text = '{"big":12345678901234567890,"one":1.0,"e":1.50e2,"neg":-0,"xs":[9007199254740993,0.10]}';
  const kept = M.JsonObject.fromJsonString(text, false, true);
  assert.equal(kept.toJsonString(), text);
  assert.equal(kept.getNumber('big'), JSON.parse('12345678901234567890'));
  assert.equal(kept.getNumber('e'), 150);
  assert.equal(kept.get('one').asNumberText(), '1.0');
  assert.equal(M.JsonValue.fromJsonString(`[${text}]`, false, true).toJsonString(), `[${text}]`);
  // Compared as doubles, whatever the text.
  assert.ok(kept.equals(M.JsonObject.fromJsonString(text)));
  assert.equal(M.JsonValue.number(1).asNumberText(), '1');
  assert.equal(M.JsonValue.string('1').asNumberText(), undefined);
  // Built by the app: an exact big integer in a schema built as a JsonObject.
  const schema = new M.JsonObject().setString('type', 'object')
    .setObject('properties', new M.JsonObject().setObject('id', new M.JsonObject().set('const', M.JsonValue.numberLiteral('12345678901234567890'))));
  assert.equal(new M.ToolDefinition('t', 'd', schema).parametersJson(),
    '{"type":"object","properties":{"id":{"const":12345678901234567890}}}');
  for (const bad of ['', '+1', '01', '1.', '.5', ' 1', '1 ', 'NaN', '0x10', '1e', '"1"']) {
    assert.throws(() => M.JsonValue.numberLiteral(bad), (e) => e.code === 'json_invalid', bad);
  }
  assert.throws(() => M.JsonValue.numberLiteral('1e400'), (e) => e.code === 'json_number_invalid');
  // ToolDefinition.fromJsonString (and fromJson of such an object) registers the numbers as written.
  const wire = `{"name":"t","description":"d","parameters":{"type":"object","properties":{"n":{"maximum":9007199254740993,"minimum":1.0}}}}`;
  assert.equal(M.ToolDefinition.fromJsonString(wire).parametersJson(),
    '{"type":"object","properties":{"n":{"maximum":9007199254740993,"minimum":1.0}}}');
  assert.equal(M.ToolDefinition.fromJson(M.JsonObject.fromJsonString(wire)).parametersJson(),
    '{"type":"object","properties":{"n":{"maximum":9007199254740992,"minimum":1}}}', 'parsed as doubles, written as doubles');
  // A schema given as text: its wire form (toJson) keeps the numbers too.
  const given = new M.ToolDefinition('t', 'd', '{"type":"object","properties":{"n":{"maximum":9007199254740993}}}');
  assert.equal(given.toJson().getObject('parameters').toJsonString(), given.parametersJson());
  assert.equal(M.ToolDefinition.fromJson(given.toJson()).parametersJson(), given.parametersJson());
});

test('invalid JSON is refused with json_invalid and the offset of the problem', () => {
  const cases = [
    ['', 0], ['{', 1], ['{"a":1,}', 7], ['[1,]', 3], ['01', 1], ['1.', 2], ['.5', 0], ['+1', 0], ['-', 1],
    ['1e', 2], ['"a\nb"', 2], ['"\\x"', 2], ['"\\u12"', 5], ['"abc', 4], ["{'a':1}", 1], ['NaN', 0],
    ['Infinity', 0], ['tru', 0], ['nul', 0], ['[1 2]', 3], ['{"a" 1}', 5], ['{"a":1} x', 8], ['{1:2}', 1],
    ['// c\n1', 0], ['\u00a01', 0],
  ];
  for (const [text, offset] of cases) {
    assert.throws(() => JSON.parse(text), SyntaxError, `JSON.parse accepts ${JSON.stringify(text)}`);
    assert.throws(() => M.JsonValue.fromJsonString(text), (e) => {
      assert.ok(e instanceof M.JsonError, `${JSON.stringify(text)}: ${e}`);
      assert.equal(e.code, 'json_invalid', JSON.stringify(text));
      assert.equal(e.layer, 'decode', 'a layer, as the native errors have');
      assert.equal(e.offset, offset, `offset for ${JSON.stringify(text)}: ${e.message}`);
      return true;
    });
  }
});

test('depth limit, out-of-range numbers and non-object documents are refused with their own codes', () => {
  const depth = M.JSON_MAX_DEPTH;
  assert.equal(M.JsonValue.fromJsonString('['.repeat(depth) + ']'.repeat(depth)).kind, 'array');
  assert.throws(() => M.JsonValue.fromJsonString('['.repeat(depth + 1) + ']'.repeat(depth + 1)),
    (e) => e.code === 'json_too_deep');
  assert.throws(() => M.JsonValue.fromJsonString('1e400'), (e) => e.code === 'json_number_invalid');
  assert.throws(() => M.JsonObject.fromJsonString('[1]'), (e) => e.code === 'json_not_object');
});

test('ToolDefinition takes a JsonObject or JSON text, validates the timeout, and writes the Rust shape', () => {
  const schema = new M.JsonObject().setString('type', 'object')
    .setObject('properties', new M.JsonObject().setObject('recordId', new M.JsonObject().setString('type', 'string')))
    .setArray('required', [M.JsonValue.string('recordId')]);
  const a = new M.ToolDefinition('read_baking_records', 'Reads records', schema);
  const b = new M.ToolDefinition('read_baking_records', 'Reads records', schema.toJsonString(), M.ToolRiskLevel.dangerous,
    true, 1500);
  assert.ok(a.parameters.equals(b.parameters));
  assert.deepEqual(JSON.parse(a.toJson().toJsonString()), {
    name: 'read_baking_records', description: 'Reads records', parameters: JSON.parse(schema.toJsonString()),
    risk_level: 'safe', idempotent: false,
  });
  assert.deepEqual(JSON.parse(b.toJson().toJsonString()).risk_level, 'dangerous');
  assert.equal(JSON.parse(b.toJson().toJsonString()).timeout, 1500);
  assert.ok(M.ToolDefinition.fromJson(b.toJson()).toJson().equals(b.toJson()));
  assert.throws(() => new M.ToolDefinition('x', 'y', '[1]'), (e) => e.code === 'json_not_object');
  assert.throws(() => new M.ToolDefinition('x', 'y', '{'), (e) => e.code === 'json_invalid');
  for (const bad of [0, -5, 1.5, NaN]) {
    assert.throws(() => new M.ToolDefinition('x', 'y', schema, M.ToolRiskLevel.safe, false, bad),
      (e) => e.code === 'tool_timeout_invalid');
  }
});

test('a ToolDefinition given schema text registers that text as written: order, numbers, a repeated key', () => {
  const texts = [
    '{"type":"object","properties":{"reasoning":{"type":"string"},"answer":{"type":"string"}}}',
    '{ "type": "object",\n  "properties": { "id": { "const": 12345678901234567890 }, "r": { "maximum": 1.50e2 } } }',
    '{"type":"object","properties":{"a":{"type":"string"},"a":{"type":"integer"}}}',
  ];
  for (const text of texts) {
    const definition = new M.ToolDefinition('t', 'd', text);
    assert.equal(definition.parametersJson(), text);
    assert.equal(definition.parameters.getString('type'), 'object', 'the parsed view');
  }
  // The view keeps the last of a repeated key (the native module refuses the text at registration).
  const repeated = new M.ToolDefinition('t', 'd', texts[2]);
  assert.equal(repeated.parameters.getObject('properties').getObject('a').getString('type'), 'integer');
  // A JsonObject schema registers as its compact text.
  const built = new M.JsonObject().setString('type', 'object').setObject('properties', new M.JsonObject());
  assert.equal(new M.ToolDefinition('t', 'd', built).parametersJson(), '{"type":"object","properties":{}}');
  assert.equal(M.ToolDefinition.fromJson(repeated.toJson()).parametersJson(), repeated.parameters.toJsonString());
});

test('ToolResult round-trips through the Rust wire shape and reports bad shapes', () => {
  const meta = new M.JsonObject().setNumber('rows', 3);
  const result = new M.ToolResult([M.ContentPart.text('a "b"'), M.ContentPart.json(M.JsonValue.object(meta))], true, true, meta);
  const wire = JSON.parse(result.toJson().toJsonString());
  assert.deepEqual(wire, {
    contents: [{ type: 'text', text: 'a "b"' }, { type: 'json', value: { rows: 3 } }], is_error: true, stop: true,
    metadata: { rows: 3 },
  });
  const back = M.ToolResult.fromJson(result.toJson());
  assert.equal(back.isError, true);
  assert.equal(back.stopFlag, true);
  assert.equal(back.toModelText(), 'a "b"\n{"rows":3}');
  assert.deepEqual(JSON.parse(M.ToolResult.text('ok').toJson().toJsonString()),
    { contents: [{ type: 'text', text: 'ok' }], is_error: false, stop: false });
  assert.throws(() => M.ToolResult.fromJson(M.JsonObject.fromJsonString('{"contents":[{"type":"image"}]}')),
    (e) => e.code === 'tool_result_invalid');
  assert.throws(() => M.ToolResult.fromJson(new M.JsonObject()), (e) => e.code === 'tool_result_invalid');
});

test('ToolCall rewrites keep the id; hook results write their decisions', () => {
  const call = new M.ToolCall('call_1', 'query_order', '{"orderId":"A1"}');
  const rewritten = call.withArgumentsObject(call.argumentsObject().setString('auditId', 'x'));
  assert.equal(rewritten.id, 'call_1');
  assert.equal(rewritten.argumentsJson, '{"orderId":"A1","auditId":"x"}');
  assert.deepEqual(JSON.parse(M.ToolCallHookResult.proceed(rewritten).toJson().toJsonString()),
    { decision: 'proceed', call: { id: 'call_1', name: 'query_order', arguments: '{"orderId":"A1","auditId":"x"}' } });
  assert.deepEqual(JSON.parse(M.ToolCallHookResult.deny(M.ToolResult.error('no')).toJson().toJsonString()),
    { decision: 'deny', result: { contents: [{ type: 'text', text: 'no' }], is_error: true, stop: false } });
  assert.deepEqual(JSON.parse(M.ToolCallHookResult.abort('policy').toJson().toJsonString()),
    { decision: 'abort', reason: 'policy' });
  const after = M.AfterToolCallHookResult.stop().withInjectedMessages([M.ChatMessage.system('remember')]);
  assert.deepEqual(JSON.parse(after.toJson().toJsonString()),
    { decision: 'stop', inject: [{ role: 'system', content: 'remember' }] });
  const hook = new M.AgentHook();
  const ctx = new M.HookContext('s', 'r', 1);
  assert.equal(hook.beforeToolCall(new M.ToolCallHookContext(ctx, call)).decision, 'proceed');
  assert.equal(hook.afterToolCall(new M.AfterToolCallHookContext(ctx, call, M.ToolResult.text('x'))).decision, 'proceed');
  assert.equal(hook.beforePersistState(new M.PersistStateHookContext(ctx, '{}')), 'persist');
});

test('CancellationSignal: the first reason wins and listeners run once', () => {
  const signal = new M.CancellationSignal();
  const seen = [];
  signal.onCancel((reason) => seen.push(`a:${reason}`));
  assert.equal(signal.cancelled, false);
  assert.equal(signal.reason, undefined);
  signal.cancel('user');
  signal.cancel('again');
  signal.onCancel((reason) => seen.push(`b:${reason}`));
  assert.equal(signal.cancelled, true);
  assert.equal(signal.reason, 'user');
  assert.deepEqual(seen, ['a:user', 'b:user']);
  const ctx = new M.ToolContext('s1', 'c1', 'b1', signal);
  assert.equal(ctx.signal.cancelled, true);
});

test('CancellationSignal: a listener that throws is contained; the ones after it still run', (t) => {
  const warned = [];
  t.mock.method(console, 'warn', (line) => warned.push(line));
  const signal = new M.CancellationSignal();
  const seen = [];
  signal.onCancel(() => {
    throw new Error('cleanup bug');
  });
  signal.onCancel((reason) => seen.push(`second:${reason}`));
  assert.doesNotThrow(() => signal.cancel('user'));
  assert.doesNotThrow(() => signal.onCancel(() => {
    throw new Error('late bug');
  }));
  signal.onCancel((reason) => seen.push(`late:${reason}`));
  assert.deepEqual(seen, ['second:user', 'late:user']);
  assert.equal(warned.length, 2);
  assert.match(warned[0], /cleanup bug/);
});

test('CancellationSignal: an async listener\'s rejection is contained (logged); the ones after it still run', async (t) => {
  const warned = [];
  t.mock.method(console, 'warn', (line) => warned.push(line));
  const unhandled = [];
  const onUnhandled = (e) => unhandled.push(e);
  process.on('unhandledRejection', onUnhandled);
  const signal = new M.CancellationSignal();
  const seen = [];
  try {
    signal.onCancel(async () => {
      await null;
      throw new Error('async cleanup bug');
    });
    signal.onCancel((reason) => seen.push(`second:${reason}`));
    assert.doesNotThrow(() => signal.cancel('user'));
    signal.onCancel(() => Promise.reject(new Error('late async bug')));
    await new Promise((resolve) => setTimeout(resolve, 20));
  } finally {
    process.off('unhandledRejection', onUnhandled);
  }
  assert.deepEqual(seen, ['second:user']);
  assert.deepEqual(unhandled, []);
  assert.equal(warned.length, 2);
  assert.match(warned.join('\n'), /async cleanup bug/);
  assert.match(warned.join('\n'), /late async bug/);
});

test('ArkAgentError: an Error with a stable code and layer tool; isStableCode is the native rule', () => {
  const e = M.ArkAgentError.tool('plan_todo_status_unknown', "status 'x' is unknown");
  assert.ok(e instanceof Error);
  assert.ok(e instanceof M.ArkAgentError);
  assert.deepEqual([e.name, e.code, e.layer, e.message], ['ArkAgentError', 'plan_todo_status_unknown', 'tool',
    "status 'x' is unknown"]);
  assert.equal(String(e), "ArkAgentError: status 'x' is unknown");
  assert.equal(e.keepsCode(), true);
  // The same cases as the Rust is_stable_code test (src/error.rs).
  for (const code of ['plan_todo_status_unknown', 'a', 'x1', 'e_404', 'a_', 'a'.repeat(M.MAX_ERROR_CODE_LENGTH)]) {
    assert.equal(M.ArkAgentError.isStableCode(code), true, code);
  }
  for (const code of ['', 'ERR_INVALID_ARG', 'ENOENT', 'Plan_x', '_private', '1abc', 'has space', 'dash-ed', 'dot.ted',
    'café', 'a\n', 'a'.repeat(M.MAX_ERROR_CODE_LENGTH + 1)]) {
    assert.equal(M.ArkAgentError.isStableCode(code), false, JSON.stringify(code));
  }
  assert.equal(new M.ArkAgentError('ERR_X', 'm').keepsCode(), false);
});

test('ToolServiceRegistry: the first of an id wins, ids sorted; the read-only view shares and refuses', () => {
  class Db { constructor(id, name) { this.serviceId = id; this.name = name; } }
  const services = new M.ToolServiceRegistry();
  const db = new Db('db', 'first');
  assert.equal(services.register(db), true);
  assert.equal(services.register(new Db('db', 'second')), false, 'a duplicate id is refused (the Rust rule: false)');
  assert.equal(services.register(new Db('clock', 'c')), true);
  assert.equal(services.get('db'), db);
  assert.equal(services.get('anything'), undefined);
  assert.deepEqual(services.ids(), ['clock', 'db']);
  assert.equal(services.isWritable, true);
  const view = services.readOnly();
  assert.equal(view.isWritable, false);
  assert.equal(services.readOnly(), view, 'one view per registry');
  assert.equal(view.readOnly(), view);
  assert.equal(view.get('db'), db);
  assert.equal(view.register(new Db('mail', 'm')), false, 'a view never registers');
  assert.equal(services.get('mail'), undefined);
  services.register(new Db('mail', 'later'));
  assert.equal(view.get('mail').name, 'later', 'the view sees services registered later');
  assert.deepEqual(view.ids(), ['clock', 'db', 'mail']);
});

test('ToolContext: a read-only state (schema version, session, metadata) and a read-only view of the services', () => {
  const signal = new M.CancellationSignal();
  const bare = new M.ToolContext('s1', 'c1', 'b1', signal);
  assert.ok(bare.state instanceof M.ReadonlyAgentState);
  assert.deepEqual([bare.state.schemaVersion, bare.state.sessionId, bare.state.metadata.toJsonString()], [0, 's1', '{}']);
  assert.equal(bare.metadata, bare.state.metadata);
  assert.deepEqual(bare.services.ids(), []);
  assert.equal(bare.services.isWritable, false);
  const services = new M.ToolServiceRegistry();
  services.register({ serviceId: 'db' });
  const metadata = new M.JsonObject().setString('user', 'u1');
  const ctx = new M.ToolContext('s2', 'c2', 'b2', signal, metadata, services, 2);
  assert.deepEqual([ctx.state.schemaVersion, ctx.state.sessionId, ctx.state.metadata.getString('user')], [2, 's2', 'u1']);
  assert.deepEqual(ctx.services.ids(), ['db']);
  assert.equal(ctx.services.register({ serviceId: 'spy' }), false, 'a tool cannot widen the whitelist');
  assert.deepEqual(services.ids(), ['db']);
});

test('AssistantMessage: the Rust assistant ChatMessage both ways; bad shapes are refused', () => {
  const wire = { role: 'assistant', content: 'checking', reasoning_content: 'think',
    tool_calls: [{ id: 'c1', name: 'query_order', arguments: '{"order_id":"1"}' }, { id: 'c2', name: 'x', arguments: '{}' }] };
  const m = M.AssistantMessage.fromJson(M.JsonObject.fromJsonString(JSON.stringify(wire)));
  assert.equal(m.content, 'checking');
  assert.equal(m.reasoningContent, 'think');
  assert.deepEqual(m.toolCalls.map((c) => [c.id, c.name, c.argumentsJson]), [['c1', 'query_order', '{"order_id":"1"}'], ['c2', 'x', '{}']]);
  assert.deepEqual(JSON.parse(m.toJson().toJsonString()), wire);
  // Absent (or null) fields read as undefined / no calls, and are left out when written.
  const bare = M.AssistantMessage.fromJson(M.JsonObject.fromJsonString('{"role":"assistant","content":null,"tool_calls":null}'));
  assert.deepEqual([bare.content, bare.reasoningContent, bare.toolCalls], [undefined, undefined, []]);
  assert.equal(bare.toJson().toJsonString(), '{"role":"assistant"}');
  const bad = (o) => () => M.AssistantMessage.fromJson(M.JsonObject.fromJsonString(JSON.stringify(o)));
  assert.throws(bad({ role: 'user', content: 'hi' }), (e) => e.code === 'message_invalid');
  assert.throws(bad({ content: 'hi' }), (e) => e.code === 'message_invalid');
  assert.throws(bad({ role: 'assistant', tool_calls: {} }), (e) => e.code === 'message_invalid');
  assert.throws(bad({ role: 'assistant', tool_calls: ['c1'] }), (e) => e.code === 'message_invalid');
  assert.throws(bad({ role: 'assistant', tool_calls: [{ id: 'c1', name: 'x' }] }), (e) => e.code === 'tool_call_invalid');
});

test('a pending batch\'s calls plan decodes as typed BatchCalls: run, answer with its result, confirm with its item', () => {
  const call = (id, name) => ({ id, name, arguments: '{}' });
  const wire = {
    batch_id: 'b1', run_id: 'r1', created_at_ms: 1,
    assistant_message: { role: 'assistant', tool_calls: [call('c1', 'read'), call('c2', 'wipe'), call('c3', 'send')] },
    items: [{ approval_id: 'ap2', tool_call: call('c2', 'wipe'), arguments_hash: 'h', risk_level: 'dangerous',
      reason: 'Dangerous tool', created_at_ms: 1 }],
    calls: [
      { call: call('c1', 'read'), plan: 'run' },
      { call: call('c2', 'wipe'), plan: 'confirm', approval_id: 'ap2' },
      { call: call('c3', 'send'), plan: 'answer', result: { contents: [{ type: 'text', text: 'denied by policy: no' }],
        is_error: true, stop: false, metadata: { error_code: 'tool_denied' } } },
    ],
  };
  const batch = M.PendingApprovalBatch.fromJsonString(JSON.stringify(wire));
  assert.ok(batch.calls.every((c) => c instanceof M.BatchCall));
  assert.deepEqual(batch.calls.map((c) => [c.toolCall.id, c.plan, c.approvalId]),
    [['c1', M.BatchCallPlan.run, undefined], ['c2', M.BatchCallPlan.confirm, 'ap2'], ['c3', M.BatchCallPlan.answer, undefined]]);
  const answered = batch.calls[2].result;
  assert.ok(answered instanceof M.ToolResult);
  assert.equal(answered.isError, true);
  assert.equal(answered.toModelText(), 'denied by policy: no');
  assert.equal(answered.metadata.getString('error_code'), 'tool_denied');
  assert.equal(batch.calls[0].result, undefined);
  // A batch persisted before the plan was kept has none: its calls are the model message's.
  const { calls: _plan, ...older } = wire;
  assert.deepEqual(M.PendingApprovalBatch.fromJsonString(JSON.stringify(older)).calls, []);
  const refused = (calls, code) => assert.throws(() => M.PendingApprovalBatch.fromJsonString(JSON.stringify({ ...wire, calls })),
    (e) => e.code === code, JSON.stringify(calls));
  refused({}, 'approval_invalid');
  refused(['c1'], 'approval_invalid');
  refused([{ call: call('c1', 'read'), plan: 'maybe' }], 'approval_invalid');
  refused([{ call: call('c1', 'read'), plan: 'confirm' }], 'approval_invalid');
  refused([{ call: call('c1', 'read'), plan: 'answer' }], 'approval_invalid');
  refused([{ plan: 'run' }], 'approval_invalid');
  refused([{ call: { id: 'c1' }, plan: 'run' }], 'tool_call_invalid');
  refused([{ call: call('c1', 'read'), plan: 'answer', result: { is_error: true } }], 'tool_result_invalid');
});

test('a pending batch in the Rust serde shape decodes; approval answers write their shape', () => {
  const wire = {
    batch_id: 'b1', run_id: 'r1', created_at_ms: 1700000000000,
    assistant_message: { role: 'assistant', tool_calls: [] },
    items: [
      { approval_id: 'ap1', tool_call: { id: 'c1', name: 'clear_baking_cache', arguments: '{"confirm":"yes"}' },
        arguments_hash: 'h', risk_level: 'dangerous', reason: 'Dangerous tool', created_at_ms: 1700000000001,
        decision: 'pending' },
      { approval_id: 'ap2', tool_call: { id: 'c2', name: 'query_stock', arguments: '{}' }, arguments_hash: 'h2',
        risk_level: 'sensitive', reason: 'r', created_at_ms: 1, decision: 'denied', deny_reason: 'no',
        decided_at_ms: 2 },
    ],
  };
  const batch = M.PendingApprovalBatch.fromJsonString(JSON.stringify(wire));
  assert.equal(batch.items.length, 2);
  assert.equal(batch.items[0].toolCall.name, 'clear_baking_cache');
  assert.equal(batch.items[0].riskLevel, 'dangerous');
  assert.equal(batch.items[1].denyReason, 'no');
  assert.deepEqual(batch.pendingItems().map((i) => i.approvalId), ['ap1']);
  assert.ok(batch.modelMessage instanceof M.AssistantMessage);
  assert.deepEqual(batch.modelMessage.toolCalls, []);
  assert.equal(batch.workerSession, undefined);
  const mirrored = M.PendingApprovalBatch.fromJsonString(JSON.stringify({ ...wire, worker_session: 'w0a1' }));
  assert.equal(mirrored.workerSession, 'w0a1');
  assert.deepEqual(batch.items.map((i) => i.workerSession), [undefined, undefined]);
  assert.equal(batch.workerOf('ap1'), undefined);
  assert.deepEqual(mirrored.items.map((i) => i.workerSession), ['w0a1', 'w0a1']);
  // Parallel workers frozen side by side: item_workers names the worker of each item beside the
  // batch's own; an item it does not name is worker_session's (the Rust item_worker).
  const beside = M.PendingApprovalBatch.fromJsonString(JSON.stringify({ ...wire, worker_session: 'w0a1',
    item_workers: { ap2: 'w0b2' } }));
  assert.equal(beside.workerSession, 'w0a1');
  assert.deepEqual(beside.items.map((i) => i.workerSession), ['w0a1', 'w0b2']);
  assert.deepEqual([beside.workerOf('ap1'), beside.workerOf('ap2'), beside.workerOf('unknown')], ['w0a1', 'w0b2', 'w0a1']);
  for (const bad of [[], 'w0b2', { ap2: 7 }]) {
    assert.throws(() => M.PendingApprovalBatch.fromJsonString(JSON.stringify({ ...wire, worker_session: 'w0a1', item_workers: bad })),
      (e) => e.code === 'approval_invalid', JSON.stringify(bad));
  }
  // The model message: the answer holding the batch's calls (the Rust assistant_message).
  const withCalls = M.PendingApprovalBatch.fromJsonString(JSON.stringify({ ...wire, assistant_message: { role: 'assistant',
    content: 'I will clear it', tool_calls: [wire.items[0].tool_call, wire.items[1].tool_call] } }));
  assert.equal(withCalls.modelMessage.content, 'I will clear it');
  assert.deepEqual(withCalls.modelMessage.toolCalls.map((c) => c.id), ['c1', 'c2']);
  const { assistant_message: _dropped, ...noMessage } = wire;
  assert.throws(() => M.PendingApprovalBatch.fromJsonString(JSON.stringify(noMessage)), (e) => e.code === 'approval_invalid');
  assert.throws(() => M.PendingApprovalBatch.fromJsonString(JSON.stringify({ ...wire, assistant_message: { role: 'user', content: 'x' } })),
    (e) => e.code === 'message_invalid');
  wire.items[0].risk_level = 'extreme';
  assert.throws(() => M.PendingApprovalBatch.fromJsonString(JSON.stringify(wire)), (e) => e.code === 'tool_risk_level_unknown');
  delete wire.items[0].approval_id;
  wire.items[0].risk_level = 'safe';
  assert.throws(() => M.PendingApprovalBatch.fromJsonString(JSON.stringify(wire)), (e) => e.code === 'approval_invalid');
  assert.equal(M.ApprovalAnswer.listToJsonString([M.ApprovalAnswer.approve('ap1'), M.ApprovalAnswer.deny('ap2', 'too risky')]),
    '[{"approval_id":"ap1","decision":"approved"},{"approval_id":"ap2","decision":"denied","deny_reason":"too risky"}]');
});

test('events decode to their classes; unknown types are kept, bad shapes refused', () => {
  const ev = (o) => M.AgentEvent.fromJsonString(JSON.stringify(o));
  const started = ev({ type: 'tool_call_started', run_id: 'r', index: 0, call_id: 'c', name: 'n' });
  assert.ok(started instanceof M.ToolCallStartedEvent);
  assert.equal(started.kind, 'tool_call_started');
  assert.equal(started.callId, 'c');
  assert.equal(ev({ type: 'text_delta', run_id: 'r', delta: 'hi' }).delta, 'hi');
  const finished = ev({ type: 'run_finished', run_id: 'r', status: 'failed',
    error: { layer: 'provider', code: 'provider_http', message: 'HTTP 500' } });
  assert.ok(finished instanceof M.RunFinishedEvent);
  assert.equal(finished.status, 'failed');
  assert.equal(finished.error.code, 'provider_http');
  const result = ev({ type: 'tool_result', run_id: 'r', call_id: 'c', name: 'n',
    result: { contents: [{ type: 'text', text: 'ok' }], is_error: false, stop: false } });
  assert.equal(result.result.toModelText(), 'ok');
  const unknown = ev({ type: 'future_thing', run_id: 'r', x: 1 });
  assert.ok(unknown instanceof M.UnknownAgentEvent);
  assert.equal(unknown.raw.getNumber('x'), 1);
  assert.throws(() => ev({ type: 'text_delta', run_id: 'r' }), (e) => e.code === 'event_invalid');
  assert.throws(() => ev({ type: 'run_finished', run_id: 'r', status: 'exploded' }), (e) => e.code === 'run_status_unknown');
});

test('Index.ets re-exports every export of the bindings\' modules, each from the module that declares it', () => {
  const index = fs.readFileSync(path.join(ETS, '..', '..', '..', 'Index.ets'), 'utf8');
  const reexported = new Map(); // name -> module path as written in Index.ets
  for (const m of index.matchAll(/export\s*\{([^}]*)\}\s*from\s*'([^']+)'/g)) {
    for (const name of m[1].split(',').map((n) => n.trim()).filter((n) => n.length > 0)) {
      assert.ok(!reexported.has(name), `${name} is exported twice`);
      reexported.set(name, m[2]);
    }
  }
  const walk = (dir) => fs.readdirSync(dir, { withFileTypes: true })
    .flatMap((e) => (e.isDirectory() ? walk(path.join(dir, e.name)) : [path.join(dir, e.name)]));
  const declared = new Map(); // name -> './src/main/ets/<module>'
  for (const file of walk(ETS).filter((f) => f.endsWith('.ets'))) {
    const module = `./src/main/ets/${path.relative(ETS, file).replace(/\\/g, '/').replace(/\.ets$/, '')}`;
    for (const m of fs.readFileSync(file, 'utf8').matchAll(
      /^export\s+(?:abstract\s+)?(?:class|function|enum|interface|type|const)\s+([A-Za-z_$][\w$]*)/gm)) {
      declared.set(m[1], module);
    }
  }
  assert.ok(declared.has('ArkAgentError') && declared.has('ToolServiceRegistry'), 'the scan found the modules');
  assert.deepEqual([...declared].filter(([name, module]) => reexported.get(name) !== module).map(([name]) => name), [],
    'declared but not re-exported (or from another module)');
  assert.deepEqual([...reexported.keys()].filter((name) => !declared.has(name)), [], 're-exported but not declared');
});
