// Every string the module reads from JS is read checked (src/napi/text.rs): napi-ohos' own reading
// builds a Rust String from the engine's bytes unchecked, and ArkVM writes a lone UTF-16 surrogate
// as bytes that are not UTF-8 (ED A0 80...). Node never does, so the module under test is the one
// built with the test-only `napi-panic-test` feature, whose extra export
// `corruptTextReads(marker, bytes)` makes the module's string reads see `bytes` where the engine
// wrote `marker`: as if the engine had written them. A surrogate's three bytes read as U+FFFD (what
// Node writes for one); any other bytes that are not UTF-8 are refused with the read's structured
// error: an export's argument `argument_invalid` naming it (or the field, or the array element),
// an executor's answer `tool_result_invalid`, a hook's `hook_failed`, the approval policy's
// fail-closed confirmation.
//
// scripts/test.sh sets ARKAGENT_PANIC_SO; run alone, this file builds that module itself
// (target/napi-panic-test):   node --test tests/node/text.test.mjs
// Strings well-formed on both sides (U+0000, long ASCII, multi-byte) are also checked here.
import { test, afterEach } from 'node:test';
import assert from 'node:assert/strict';
import { buildPanicModule, objectSchema, rejectsWithCode, text, throwsWithCode } from './helper.mjs';

const native = { exports: {}, path: buildPanicModule() };
process.dlopen(native, native.path);
const { Agent, ToolRegistry, CancellationHandle, canonicalJson, corruptTextReads } = native.exports;

const MARK = '<<mark>>';
/** A UTF-8 sequence cut off (the first two bytes of 中). */
const CUT = [0xe4, 0xb8];
/** A byte that is never UTF-8. */
const WRONG = [0xff];
/** ArkVM's bytes for a lone "\uD800". */
const SURROGATE = [0xed, 0xa0, 0x80];

afterEach(() => corruptTextReads('', []));

const NOT_UTF8 = /the JS engine gave this string as bytes that are not UTF-8/;

function argumentRefused(f, prefix) {
  const e = throwsWithCode(assert, f, 'argument_invalid', 'config');
  assert.ok(e.message.startsWith(`wrong argument: ${prefix}: `), e.message);
  assert.match(e.message, NOT_UTF8);
  return e;
}

test('an argument whose bytes are not UTF-8 is refused, naming the argument, the field or the element', () => {
  corruptTextReads(MARK, CUT);
  // Cut off at the end; in the middle, the next byte is the wrong one.
  const e = argumentRefused(() => canonicalJson(`"a${MARK}`), 'text');
  assert.match(e.message, /\(a UTF-8 sequence cut off at byte 2\)$/);
  const middle = argumentRefused(() => canonicalJson(`"a${MARK}"`), 'text');
  assert.match(middle.message, /\(a byte that is not UTF-8 at byte 2\)$/);
  const agent = new Agent({ provider: 'scripted', scriptJson: '[]' });
  argumentRefused(() => agent.run('s', `hi ${MARK}`), 'input');
  argumentRefused(() => agent.dismiss('s', MARK), 'reason');
  argumentRefused(() => agent.setMetadata('s', 'k', `"${MARK}"`), 'valueJson');
  argumentRefused(() => agent.run(`s${MARK}`, 'hi'), 'sessionId');
  argumentRefused(() => new CancellationHandle().cancel(MARK), 'reason');
  corruptTextReads(MARK, WRONG);
  const registry = new ToolRegistry();
  const wrong = argumentRefused(
    () => registry.register({ name: 't', description: `d${MARK}`, parametersJson: objectSchema }, () => text('x')),
    'description',
  );
  assert.match(wrong.message, /\(a byte that is not UTF-8 at byte 1\)$/);
  argumentRefused(() => new Agent({ provider: 'scripted', scriptJson: '[]', systemPrompt: MARK }), 'systemPrompt');
  argumentRefused(() => registry.copyIntoExcluding(new ToolRegistry(), ['a', 'b', MARK]), 'excludedNames[2]');
  argumentRefused(() => registry.execute({ id: 'c', name: 't', arguments: MARK }), 'arguments');
  // Nothing was registered; without the plan the same calls work.
  assert.deepEqual(registry.names(), []);
  corruptTextReads('', []);
  registry.register({ name: 't', description: `d${MARK}`, parametersJson: objectSchema }, () => text('x'));
  assert.deepEqual(registry.names(), ['t']);
});

test("a surrogate's three bytes read as U+FFFD, as Node writes a lone surrogate", async () => {
  corruptTextReads(MARK, SURROGATE);
  assert.equal(canonicalJson(`["a${MARK}b"]`), '["a\uFFFDb"]');
  const registry = new ToolRegistry();
  registry.register({ name: 'echo', description: 'd', parametersJson: objectSchema }, (args) => text(`${JSON.parse(args).s}${MARK}`));
  const result = await registry.execute({ id: 'c', name: 'echo', arguments: JSON.stringify({ s: `x${MARK}` }) });
  assert.equal(result.contents[0].text, 'x\uFFFD\uFFFD');
});

test("an executor's answer whose bytes are not UTF-8 is tool_result_invalid, naming the field", async () => {
  const registry = new ToolRegistry();
  registry.register({ name: 'bad', description: 'd', parametersJson: objectSchema }, () => ({
    contents: [{ type: 'text', text: 'fine' }, { type: 'text', text: `broken ${MARK}` }],
  }));
  registry.register({ name: 'meta', description: 'd', parametersJson: objectSchema }, () => ({
    contents: [{ type: 'text', text: 'fine' }],
    metadataJson: `{"k":"${MARK}"}`,
  }));
  corruptTextReads(MARK, CUT);
  const e = await rejectsWithCode(assert, registry.execute({ id: 'c', name: 'bad', arguments: '{}' }), 'tool_result_invalid', 'tool');
  assert.match(e.message, /^executor of bad returned something that is not a ToolResult: contents\[1\]\.text: the JS engine gave/);
  const m = await rejectsWithCode(assert, registry.execute({ id: 'c', name: 'meta', arguments: '{}' }), 'tool_result_invalid', 'tool');
  assert.match(m.message, /not a ToolResult: metadataJson: the JS engine gave/);
  // A thrown Error whose text is not UTF-8: the call fails as any throw does, with a placeholder.
  registry.register({ name: 'throws', description: 'd', parametersJson: objectSchema }, () => {
    throw new Error(`boom ${MARK}`);
  });
  const t = await rejectsWithCode(assert, registry.execute({ id: 'c', name: 'throws', arguments: '{}' }), 'tool_execution_failed', 'tool');
  assert.match(t.message, /threw: <a value that cannot be converted to a string>/);
  corruptTextReads('', []);
  assert.match((await rejectsWithCode(assert, registry.execute({ id: 'c', name: 'throws', arguments: '{}' }), 'tool_execution_failed')).message, /threw: Error: boom <<mark>>/);
  assert.equal((await registry.execute({ id: 'c', name: 'bad', arguments: '{}' })).contents[1].text, `broken ${MARK}`);
});

/** A scripted agent whose model calls tool `t` once, then answers "done". */
function oneCall() {
  const agent = new Agent({
    provider: 'scripted',
    scriptJson: JSON.stringify([{ tool_calls: [{ id: 'c1', name: 't', arguments: '{}' }] }, { content: 'done' }]),
  });
  const ran = [];
  agent.registerTool({ name: 't', description: 'd', parametersJson: objectSchema }, () => {
    ran.push('t');
    return text('ran');
  });
  return { agent, ran };
}

test("a hook's answer whose bytes are not UTF-8 fails the hook: the call is denied with hook_failed", async () => {
  const { agent, ran } = oneCall();
  agent.addHook({ beforeToolCall: () => ({ action: 'proceed', argumentsJson: `{"a":"${MARK}"}` }) });
  corruptTextReads(MARK, CUT);
  const out = await agent.run('s', 'go');
  corruptTextReads('', []);
  assert.equal(out.status, 'completed');
  assert.deepEqual(ran, []);
  const tool = JSON.parse(await agent.stateJson('s')).messages.find((m) => m.role === 'tool');
  assert.match(tool.content, /hook_failed/);
  assert.match(tool.content, /beforeToolCall returned an invalid decision: argumentsJson: the JS engine gave/);
});

test("the approval policy's answer whose bytes are not UTF-8 fails closed: the call needs confirmation", async () => {
  const { agent, ran } = oneCall();
  agent.setApprovalPolicy(() => `allow${MARK}`);
  corruptTextReads(MARK, WRONG);
  const out = await agent.run('s', 'go');
  corruptTextReads('', []);
  assert.equal(out.status, 'awaiting_approval');
  assert.deepEqual(ran, []);
  const [item] = JSON.parse(out.batchJson).items;
  assert.match(item.reason, /^approval_policy_failed: the policy returned something that is not a string: the JS engine gave/);
});

test('U+0000, long ASCII and multi-byte text cross whole both ways', async () => {
  const registry = new ToolRegistry();
  registry.register({ name: 'echo', description: 'd', parametersJson: objectSchema }, (args) => text(JSON.parse(args).s));
  for (const s of ['a\u0000b\u0000', '\u0000', 'x'.repeat(1_000_000), 'é中😀'.repeat(50_000), 'ascii then 中文 then \u0000 then 😀']) {
    const result = await registry.execute({ id: 'c', name: 'echo', arguments: JSON.stringify({ s }) });
    assert.equal(result.contents[0].text, s);
  }
  const agent = new Agent({ provider: 'scripted', scriptJson: JSON.stringify([{ content: 'done' }]) });
  await agent.run('s', 'nul \u0000 inside');
  const user = JSON.parse(await agent.stateJson('s')).messages.find((m) => m.role === 'user');
  assert.equal(user.content, 'nul \u0000 inside');
});
