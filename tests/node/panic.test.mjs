// Real panics inside the native module's exports become Errors with code `internal_panic` (and a
// layer), never a crash, and the objects they happened in keep working. The module under test is
// built with the test-only `napi-panic-test` feature (src/napi/panic_test.rs), whose extra export
// `panicNext(site, detail)` makes the next call reaching `site` panic with a message ending in
// `detail`; the shipped module has neither the export nor the panic points.
//
// scripts/test.sh builds that module and sets ARKAGENT_PANIC_SO. Run alone, this file builds it into
// its own target dir (target/napi-panic-test, so the debug .so of the other tests is untouched):
//   node --test tests/node/panic.test.mjs
// The panics on the JS thread, inside the closures napi-ohos runs from C, and in the conversion of
// an export's arguments: tests/node/panic_js_thread.test.mjs.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { buildPanicModule, objectSchema, readDts, rejectsWithCode, text, throwsWithCode } from './helper.mjs';

const native = { exports: {}, path: buildPanicModule() };
process.dlopen(native, native.path);
const { Agent, ToolRegistry, panicNext, canonicalJson, version } = native.exports;

// An API key, registered with the process logger as a secret when an Agent is built with it.
const API_KEY = 'sk-panic-test-0123456789abcdef';
// Its key is a secret of the process (redacted from what panics say) while the Agent lives: kept
// for the whole file.
export const keyHolder = new Agent({ provider: 'custom', baseUrl: 'http://127.0.0.1:9/v1', model: 'm', apiKey: API_KEY });

/** Asserts the error of a caught panic at `site`: code, layer, a message saying so, no API key. */
function assertPanicError(error, site) {
  assert.ok(error instanceof Error, `expected an Error, got ${error}`);
  assert.equal(error.code, 'internal_panic', error.message);
  assert.equal(error.layer, 'internal', error.message);
  assert.match(error.message, /panic/);
  assert.match(error.message, new RegExp(`planned test panic at ${site}`));
  assert.ok(!error.message.includes(API_KEY), `the API key leaked: ${error.message}`);
}

/** Plans a panic at `site` whose message carries the API key (which must not come out). */
function planPanic(site) {
  assert.equal(panicNext(site, `detail with the key ${API_KEY}`), false, 'a plan was still pending');
}

/** A scripted agent with a tool `t` (answers `ok <args>`), replaying `script` (by default, the
 *  answer `done` to each of up to ten runs). */
function scriptedAgent(script = Array(10).fill({ content: 'done' })) {
  const agent = new Agent({ provider: 'scripted', scriptJson: JSON.stringify(script) });
  agent.registerTool({ name: 't', description: 'd', parametersJson: objectSchema }, (args) => text(`ok ${args}`));
  return agent;
}

/** A registry with a tool `t` (answers `ok <args>`), and a call of it. */
function registryWithTool() {
  const registry = new ToolRegistry();
  registry.register({ name: 't', description: 'd', parametersJson: objectSchema }, (args) => text(`ok ${args}`));
  const call = () => registry.execute({ id: 'c1', name: 't', arguments: '{"n":1}' });
  return { registry, call };
}

test('the module under test is the shipped one plus panicNext and corruptTextReads, which index.d.ts does not declare', () => {
  const dts = readDts().replace(/\/\*[\s\S]*?\*\//g, '').replace(/\/\/.*$/gm, '');
  const declared = [...dts.matchAll(/export\s+declare\s+(?:function|class|const|let|enum)\s+([A-Za-z_$][\w$]*)/g)].map(
    (m) => m[1],
  );
  assert.ok(!declared.includes('panicNext'));
  assert.ok(!declared.includes('corruptTextReads'));
  assert.deepEqual(Object.keys(native.exports).sort(), [...declared, 'panicNext', 'corruptTextReads'].sort());
});

test('synchronous exports: a panic in the body throws internal_panic; the object still works', () => {
  planPanic('sync');
  assertPanicError(throwsWithCode(assert, () => version(), 'internal_panic', 'internal'), 'Sync');
  assert.equal(canonicalJson('{"b":1,"a":2}'), '{"a":2,"b":1}');

  const { registry } = registryWithTool();
  planPanic('sync');
  assertPanicError(throwsWithCode(assert, () => registry.names(), 'internal_panic'), 'Sync');
  assert.deepEqual(registry.names(), ['t']);
  planPanic('sync');
  assertPanicError(throwsWithCode(assert, () => registry.unregister('t'), 'internal_panic'), 'Sync');
  // The panic came before the body: the tool is still there, and can be removed now.
  assert.deepEqual(registry.names(), ['t']);
  assert.equal(registry.unregister('t'), true);

  const agent = scriptedAgent();
  planPanic('sync');
  assertPanicError(throwsWithCode(assert, () => agent.toolNames(), 'internal_panic'), 'Sync');
  assert.deepEqual(agent.toolNames(), ['t']);
});

test('a constructor: a panic in its body throws internal_panic; the next construction works', () => {
  planPanic('sync');
  assertPanicError(throwsWithCode(assert, () => new ToolRegistry(), 'internal_panic'), 'Sync');
  planPanic('sync');
  assertPanicError(
    throwsWithCode(assert, () => new Agent({ provider: 'scripted', scriptJson: '[]' }), 'internal_panic'),
    'Sync',
  );
  assert.deepEqual(new ToolRegistry().names(), []);
});

test('an async export panicking before its Promise exists throws internal_panic', async () => {
  const { call } = registryWithTool();
  planPanic('promise');
  assertPanicError(throwsWithCode(assert, () => call(), 'internal_panic'), 'Promise');
  assert.deepEqual((await call()).contents, [{ type: 'text', text: 'ok {"n":1}' }]);

  const agent = scriptedAgent();
  planPanic('promise');
  assertPanicError(throwsWithCode(assert, () => agent.run('s1', 'hi'), 'internal_panic'), 'Promise');
  assert.equal((await agent.run('s1', 'hi')).finalText, 'done');
});

test('an async export panicking inside its future rejects with internal_panic', async () => {
  const { call } = registryWithTool();
  planPanic('future');
  assertPanicError(await rejectsWithCode(assert, call(), 'internal_panic', 'internal'), 'Future');
  assert.deepEqual((await call()).contents, [{ type: 'text', text: 'ok {"n":1}' }]);

  const agent = scriptedAgent();
  planPanic('future');
  assertPanicError(await rejectsWithCode(assert, agent.stateJson('s1'), 'internal_panic'), 'Future');
  planPanic('future');
  assertPanicError(await rejectsWithCode(assert, agent.run('s1', 'hi'), 'internal_panic'), 'Future');
  assert.equal((await agent.run('s1', 'hi')).finalText, 'done');
  assert.equal(JSON.parse(await agent.stateJson('s1')).session_id, 's1');
});

test('an async export panicking while its value is converted to JS rejects with internal_panic', async () => {
  const { call } = registryWithTool();
  planPanic('convert');
  assertPanicError(await rejectsWithCode(assert, call(), 'internal_panic', 'internal'), 'Convert');
  assert.deepEqual((await call()).contents, [{ type: 'text', text: 'ok {"n":1}' }]);

  const agent = scriptedAgent();
  planPanic('convert');
  assertPanicError(await rejectsWithCode(assert, agent.run('s1', 'hi'), 'internal_panic'), 'Convert');
  // The run itself finished (only its outcome's conversion panicked): its state is there.
  const state = JSON.parse(await agent.stateJson('s1'));
  assert.equal(state.session_id, 's1');
  assert.equal((await agent.run('s1', 'again')).finalText, 'done');
});

test("a panic in a tool executor's Rust side is the call's tool_execution_failed", async () => {
  const { call } = registryWithTool();
  planPanic('executor');
  const error = await rejectsWithCode(assert, call(), 'tool_execution_failed');
  assert.match(error.message, /panic/);
  assert.ok(!error.message.includes(API_KEY), `the API key leaked: ${error.message}`);
  assert.deepEqual((await call()).contents, [{ type: 'text', text: 'ok {"n":1}' }]);

  // In a run, the failed call's error goes back to the model and the run goes on.
  const agent = scriptedAgent([{ tool_calls: [{ id: 'c1', name: 't', arguments: '{"n":1}' }] }, { content: 'done' }]);
  const events = [];
  agent.onEvent((e) => events.push(JSON.parse(e)));
  planPanic('executor');
  const out = await agent.run('s1', 'hi');
  assert.equal(out.status, 'completed');
  assert.equal(out.finalText, 'done');
  const result = events.find((e) => e.type === 'tool_result');
  assert.ok(result, 'no tool_result event');
  assert.ok(!JSON.stringify(events).includes(API_KEY), 'the API key reached an event');
});

test("a panic while an ArkTS function's answer is converted, on the JS thread, is that call's error", async () => {
  const { call } = registryWithTool();
  planPanic('answer');
  const error = await rejectsWithCode(assert, call(), 'tool_result_invalid');
  assert.match(error.message, /panic was caught at the binding: planned test panic at Answer/);
  assert.ok(!error.message.includes(API_KEY), `the API key leaked: ${error.message}`);
  assert.deepEqual((await call()).contents, [{ type: 'text', text: 'ok {"n":1}' }]);

  // The same for an executor's Promise, converted when it resolves.
  const registry = new ToolRegistry();
  registry.register({ name: 'p', description: 'd', parametersJson: objectSchema }, async () => text('later'));
  planPanic('answer');
  await rejectsWithCode(assert, registry.execute({ id: 'c2', name: 'p', arguments: '{}' }), 'tool_result_invalid');
  assert.deepEqual((await registry.execute({ id: 'c3', name: 'p', arguments: '{}' })).contents, [
    { type: 'text', text: 'later' },
  ]);
});

test('a panic while an event is handed to the listener rejects the run with internal_panic', async () => {
  const agent = scriptedAgent();
  const events = [];
  agent.onEvent((e) => events.push(JSON.parse(e)));
  planPanic('event');
  assertPanicError(await rejectsWithCode(assert, agent.run('s1', 'hi'), 'internal_panic'), 'Event');
  // The same agent runs again, on another session and on this one.
  events.length = 0;
  assert.equal((await agent.run('s2', 'hi')).finalText, 'done');
  assert.equal(events.at(-1)?.type, 'run_finished');
  const again = await agent.run('s1', 'hi');
  assert.equal(again.finalText, 'done');
});

test("a panic in a beforeToolCall hook's Rust side refuses the call with hook_failed; the run goes on", async () => {
  let ran = 0;
  const agent = new Agent({
    provider: 'scripted',
    scriptJson: JSON.stringify([{ tool_calls: [{ id: 'c1', name: 't', arguments: '{}' }] }, { content: 'done' }]),
  });
  agent.registerTool({ name: 't', description: 'd', parametersJson: objectSchema }, () => {
    ran += 1;
    return text('ran');
  });
  agent.addHook({ beforeToolCall: () => ({ action: 'proceed' }) });
  planPanic('hook');
  const out = await agent.run('s1', 'go');
  assert.equal(out.status, 'completed');
  assert.equal(ran, 0, 'the executor ran although its hook failed');
  const state = await agent.stateJson('s1');
  const tool = JSON.parse(state).messages.find((m) => m.role === 'tool');
  assert.match(tool.content, /hook_failed/);
  assert.match(tool.content, /panicked/);
  assert.ok(!state.includes(API_KEY), 'the API key reached the state');
});

test("a panic's report on stderr carries no API key, and the process goes on to exit 0", () => {
  // In a child process, to read what the panic hook writes.
  const script = `
    const native = { exports: {} };
    process.dlopen(native, process.env.SO);
    const { Agent, panicNext, version } = native.exports;
    globalThis.keyHolder = new Agent({ provider: 'custom', baseUrl: 'http://127.0.0.1:9/v1', model: 'm', apiKey: process.env.KEY });
    panicNext('sync', 'detail with the key ' + process.env.KEY);
    try { version(); console.log('no throw'); } catch (e) { console.log('caught ' + e.code); }
    panicNext('sync', 'no secret here');
    try { version(); } catch (e) { console.log('caught ' + e.code); }
    console.log('alive ' + version());
  `;
  const child = spawnSync(process.execPath, ['-e', script], {
    env: { ...process.env, SO: native.path, KEY: API_KEY, RUST_BACKTRACE: '0' },
    encoding: 'utf8',
  });
  assert.equal(child.status, 0, child.stderr);
  assert.match(child.stdout, /^caught internal_panic\ncaught internal_panic\nalive \d/);
  assert.ok(!child.stderr.includes(API_KEY), `the API key reached stderr: ${child.stderr}`);
  // The panic with the key is reported, redacted, through the logger; the other one as Rust does.
  assert.match(child.stderr, /panicked at .*panic_test\.rs.*planned test panic at Sync: detail with the key \[REDACTED\]/);
  assert.match(child.stderr, /planned test panic at Sync: no secret here/);
});
