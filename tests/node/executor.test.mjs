// ArkTS/JS executors through the thread-safe function: every way an executor can answer, or fail
// to, ends as a ToolResult or a structured tool error; nothing crashes or hangs. A domain error
// (an object with a stable snake_case `code`, the bindings' ArkAgentError) keeps its code.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { setTimeout as sleep } from 'node:timers/promises';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { loadModule, objectSchema, rejectsWithCode, text, throwsWithCode, waitFor } from './helper.mjs';

const { Agent, ToolRegistry } = loadModule();

function oneTool(executor, extra = {}) {
  const r = new ToolRegistry();
  r.register({ name: 't', description: 'd', parametersJson: objectSchema, ...extra }, executor);
  return (args = '{}', signal, options) => r.execute({ id: 'call-1', name: 't', arguments: args }, signal, options);
}

test('a Promise that resolves to a ToolResult', async () => {
  const run = oneTool(async (args) => {
    await sleep(5);
    return text(`got ${JSON.parse(args).n}`);
  });
  const r = await run('{"n":7}');
  assert.deepEqual(r.contents, [{ type: 'text', text: 'got 7' }]);
  assert.equal(r.isError, false);
  assert.equal(r.stop, false);
});

test('a plain (synchronous) ToolResult', async () => {
  const run = oneTool((args) => text(`sync ${args}`));
  assert.deepEqual((await run('{"a":[1,2]}')).contents, [{ type: 'text', text: 'sync {"a":[1,2]}' }]);
});

test('json parts, flags and metadata cross both ways', async () => {
  const run = oneTool(() => ({
    contents: [{ type: 'json', json: '{"stock":12,"sku":"A-1"}' }, { type: 'text', text: 'low' }],
    isError: true,
    stop: true,
    metadataJson: '{"source":"cache"}',
  }));
  const r = await run();
  assert.equal(r.contents[0].type, 'json');
  assert.deepEqual(JSON.parse(r.contents[0].json), { stock: 12, sku: 'A-1' });
  assert.deepEqual(r.contents[1], { type: 'text', text: 'low' });
  assert.equal(r.isError, true);
  assert.equal(r.stop, true);
  assert.deepEqual(JSON.parse(r.metadataJson), { source: 'cache' });
});

test('the arguments reach the executor as the registry parsed them: numbers as README says', async () => {
  // What README promises an ArkTS/JS executor: the parsed object written as JSON text. An
  // integer within 64 bits keeps its digits, a bigger one is the nearest double, a fraction is
  // written shortest, -0 is -0.0, a number beyond the double range is json_invalid.
  let got;
  const run = oneTool((args) => {
    got = args;
    return text('ok');
  });
  for (const [sent, want] of [
    ['{"a":9007199254740993}', '{"a":9007199254740993}'],
    ['{"a":123456789012345678901234567890}', '{"a":1.2345678901234568e+29}'],
    ['{"a":1.50}', '{"a":1.5}'],
    ['{"a":-0}', '{"a":-0.0}'],
  ]) {
    await run(sent);
    assert.equal(got, want, sent);
  }
  await rejectsWithCode(assert, run('{"a":1e400}'), 'json_invalid');
});

test('the context carries the ids, the metadata and a live signal', async () => {
  let seen;
  const run = oneTool((args, ctx) => {
    seen = { sessionId: ctx.sessionId, callId: ctx.callId, batchCallId: ctx.batchCallId, schemaVersion: ctx.schemaVersion, metadata: JSON.parse(ctx.metadataJson), cancelled: ctx.signal.cancelled, reason: ctx.signal.reason };
    return text('ok');
  });
  await run('{}', undefined, { sessionId: 's-9', batchCallId: 'b-2', metadataJson: '{"user":"u1"}' });
  // schemaVersion: the crate's state SCHEMA_VERSION (2: the version with approvals in the state).
  assert.deepEqual(seen, { sessionId: 's-9', callId: 'call-1', batchCallId: 'b-2', schemaVersion: 2, metadata: { user: 'u1' }, cancelled: false, reason: null });
});

test('the context metadata reaches the executor as JSON text with its keys sorted', async () => {
  let seen;
  const run = oneTool((args, ctx) => {
    seen = ctx.metadataJson;
    return text('ok');
  });
  await run('{}', undefined, { metadataJson: '{"zeta":{"b":2,"a":[1,"x"]},"alpha":null,"mid":1.5}' });
  assert.equal(seen, '{"alpha":null,"mid":1.5,"zeta":{"a":[1,"x"],"b":2}}');
});

test('a metadataJson that is not a JSON object rejects the Promise with config_invalid (no throw), and the executor never runs', async () => {
  let ran = 0;
  const run = oneTool(() => {
    ran++;
    return text('ok');
  });
  const deep = `{"x":${'['.repeat(200)}${']'.repeat(200)}}`;
  for (const [metadataJson, says] of [['[1]', /must be a JSON object/], ['{', /is not JSON/], ['"x"', /must be a JSON object/], [deep, /is not JSON: recursion limit/]]) {
    let pending;
    assert.doesNotThrow(() => {
      pending = run('{}', undefined, { metadataJson });
    }, `execute with metadataJson ${metadataJson} threw instead of rejecting`);
    const e = await rejectsWithCode(assert, pending, 'config_invalid', 'config');
    assert.match(e.message, says);
  }
  assert.equal(ran, 0);
});

test('a synchronous throw is tool_execution_failed with the message', async () => {
  const run = oneTool(() => {
    throw new Error('database offline');
  });
  const e = await rejectsWithCode(assert, run(), 'tool_execution_failed', 'tool');
  assert.match(e.message, /threw: Error: database offline/);
  assert.doesNotMatch(e.message, /\n\s+at /, 'no stack trace in the message');
});

test('a thrown non-Error value (string, null, undefined, symbol) is tool_execution_failed too', async () => {
  const cases = [['plain string', /plain string/], [null, /null/], [undefined, /undefined/], [Symbol('s'), /cannot be converted/]];
  for (const [thrown, pattern] of cases) {
    const run = oneTool(() => {
      throw thrown;
    });
    const e = await rejectsWithCode(assert, run(), 'tool_execution_failed', 'tool');
    assert.match(e.message, pattern);
  }
});

test('a thrown or rejected plain object (not an Error) keeps its message, after its code', async () => {
  const cases = [
    [{ code: 'Not-Snake', message: 'disk full' }, /threw: Not-Snake: disk full$/],
    [{ message: 'no code here' }, /threw: no code here$/],
    // Nothing to read: String(value) as before.
    [{ reason: 'other shape' }, /threw: \[object Object\]$/],
    // An object with its own toString speaks for itself.
    [{ message: 'hidden', toString: () => 'custom text' }, /threw: custom text$/],
  ];
  for (const [value, pattern] of cases) {
    const e = await rejectsWithCode(assert, oneTool(() => { throw value; })(), 'tool_execution_failed', 'tool');
    assert.match(e.message, pattern, JSON.stringify(value));
  }
  const rejected = oneTool(() => Promise.reject({ code: 'E_LOCKED', message: 'order locked' }));
  assert.match((await rejectsWithCode(assert, rejected(), 'tool_execution_failed')).message, /rejected: E_LOCKED: order locked$/);
});

test('a rejection is tool_execution_failed with the reason', async () => {
  const run = oneTool(async () => {
    await sleep(1);
    throw new RangeError('quantity too big');
  });
  const e = await rejectsWithCode(assert, run(), 'tool_execution_failed', 'tool');
  assert.match(e.message, /rejected: RangeError: quantity too big/);
  const run2 = oneTool(() => Promise.reject(42));
  assert.match((await rejectsWithCode(assert, run2(), 'tool_execution_failed')).message, /rejected: 42/);
});

/** What the bindings' ArkAgentError is to the native side: an Error carrying a string `code`. */
class DomainError extends Error {
  constructor(code, message) {
    super(message);
    this.name = 'ArkAgentError';
    this.code = code;
  }
}

test('a domain error (a stable `code`), thrown or rejected, keeps its code and message, unwrapped', async () => {
  const thrown = oneTool(() => {
    throw new DomainError('plan_todo_status_unknown', "status 'x' is unknown");
  });
  const e = await rejectsWithCode(assert, thrown(), 'plan_todo_status_unknown', 'tool');
  assert.equal(e.message, "status 'x' is unknown");
  const rejected = oneTool(async () => {
    await sleep(1);
    throw new DomainError('order_locked', 'order 7 is locked by another device');
  });
  const r = await rejectsWithCode(assert, rejected(), 'order_locked', 'tool');
  assert.equal(r.message, 'order 7 is locked by another device');
  // Any object with such a code counts, an Error or not; one as long as the limit (64) too.
  const plain = oneTool(() => Promise.reject({ code: 'stock_reserved', message: 'held for cart 3' }));
  assert.equal((await rejectsWithCode(assert, plain(), 'stock_reserved', 'tool')).message, 'held for cart 3');
  const longest = 'x'.repeat(64);
  await rejectsWithCode(assert, oneTool(() => { throw new DomainError(longest, 'long'); })(), longest, 'tool');
  // A code without a string message keeps the code, with the value's text as the message.
  const noMessage = oneTool(() => { throw { code: 'quota_exhausted', toString: () => 'quota of u1 used up' }; });
  assert.equal((await rejectsWithCode(assert, noMessage(), 'quota_exhausted', 'tool')).message, 'quota of u1 used up');
});

test('an error with a code but no message reads `<code> (no message)`, never [object Object] or nothing', async () => {
  // Domain errors: the code is kept, and the message says there was none.
  const domain = [
    () => { throw { code: 'quota_exceeded' }; },
    () => Promise.reject({ code: 'quota_exceeded', message: '' }),
    () => { throw { code: 'quota_exceeded', message: 42 }; },
    () => { throw new DomainError('quota_exceeded'); },
    () => { throw Object.assign(new Error(), { code: 'quota_exceeded' }); },
  ];
  for (const executor of domain) {
    const e = await rejectsWithCode(assert, oneTool(executor)(), 'quota_exceeded', 'tool');
    assert.equal(e.message, 'quota_exceeded (no message)', String(executor));
  }
  // Any other code: wrapped, the code standing for the missing message.
  const wrapped = await rejectsWithCode(assert, oneTool(() => { throw { code: 'E_DISK' }; })(), 'tool_execution_failed', 'tool');
  assert.match(wrapped.message, /threw: E_DISK \(no message\)$/);
  // What the model reads in a run.
  const agent = new Agent({
    provider: 'scripted',
    scriptJson: JSON.stringify([{ tool_calls: [{ id: 'c1', name: 't', arguments: '{}' }] }, { content: 'x' }]),
  });
  agent.registerTool({ name: 't', description: 'd', parametersJson: objectSchema }, () => { throw { code: 'quota_exceeded' }; });
  await agent.run('s', 'go');
  const tool = JSON.parse(await agent.stateJson('s')).messages.find((m) => m.role === 'tool');
  assert.equal(tool.content, 'error [quota_exceeded]: quota_exceeded (no message)');
});

test('codes that are not stable codes are wrapped: Node ERR_*, errno names, wrong types, too long', async () => {
  const cases = [
    ['ERR_INVALID_ARG_TYPE', 'node style'],
    ['ENOENT', 'errno name'],
    ['', 'empty'],
    ['Plan_status', 'upper case'],
    ['_private', 'leading underscore'],
    ['9lives', 'leading digit'],
    ['bad-code', 'dash'],
    ['has space', 'space'],
    ['x'.repeat(65), 'one over the limit'],
    [42, 'a number'],
    [null, 'null'],
    [{ toString: () => 'order_locked' }, 'an object that prints as a code'],
  ];
  for (const [code, what] of cases) {
    const sync = oneTool(() => { throw new DomainError(code, `sync ${what}`); });
    const e = await rejectsWithCode(assert, sync(), 'tool_execution_failed', 'tool');
    assert.match(e.message, new RegExp(`threw: ArkAgentError: sync ${what}`), what);
    const async_ = oneTool(async () => { throw new DomainError(code, `async ${what}`); });
    const r = await rejectsWithCode(assert, async_(), 'tool_execution_failed', 'tool');
    assert.match(r.message, new RegExp(`rejected: ArkAgentError: async ${what}`), what);
  }
  // A primitive that looks like a code is not an error object.
  const primitive = oneTool(() => { throw 'order_locked'; });
  assert.match((await rejectsWithCode(assert, primitive(), 'tool_execution_failed')).message, /threw: .*order_locked/);
  const rejectedString = oneTool(() => Promise.reject('order_locked'));
  assert.match((await rejectsWithCode(assert, rejectedString(), 'tool_execution_failed')).message, /rejected: order_locked/);
});

test('a code whose read throws (a getter, a Proxy) is wrapped, and the executor still works after', async () => {
  let mode = 'getter';
  const run = oneTool(() => {
    if (mode === 'getter') {
      const e = new Error('getter');
      Object.defineProperty(e, 'code', { get() { throw new Error('no code for you'); } });
      throw e;
    }
    if (mode === 'proxy') {
      throw new Proxy({}, { get() { throw new Error('trap'); } });
    }
    if (mode === 'message getter') {
      const e = new DomainError('order_locked', 'x');
      Object.defineProperty(e, 'message', { get() { throw new Error('no message'); } });
      return Promise.reject(e);
    }
    return text('fine');
  });
  await rejectsWithCode(assert, run(), 'tool_execution_failed', 'tool');
  mode = 'proxy';
  await rejectsWithCode(assert, run(), 'tool_execution_failed', 'tool');
  // The code is good; the message cannot be read, so the value's text stands in (or a placeholder).
  mode = 'message getter';
  await rejectsWithCode(assert, run(), 'order_locked', 'tool');
  mode = 'ok';
  assert.equal((await run()).contents[0].text, 'fine');
});

test('an API key the app put in a thrown message is redacted, domain error or not', async () => {
  // An Agent with a key registers it with the process logger as a secret (no request is made),
  // for as long as the Agent lives (tests/node/gc.test.mjs).
  const key = 'sk-executor-secret-5b1d9e';
  const agent = new Agent({ provider: 'custom', baseUrl: 'http://127.0.0.1:9/v1', model: 'm', apiKey: key });
  const domain = oneTool(() => { throw new DomainError('upstream_refused', `upstream said no to ${key}`); });
  assert.equal((await rejectsWithCode(assert, domain(), 'upstream_refused', 'tool')).message, 'upstream said no to [REDACTED]');
  const plain = oneTool(async () => { throw new Error(`auth ${key} failed`); });
  const e = await rejectsWithCode(assert, plain(), 'tool_execution_failed', 'tool');
  assert.match(e.message, /rejected: Error: auth \[REDACTED\] failed/);
  assert.ok(!e.message.includes(key));
  assert.deepEqual(agent.toolNames(), []);
});

test('undefined, returned or resolved, is tool_result_invalid', async () => {
  await rejectsWithCode(assert, oneTool(() => undefined)(), 'tool_result_invalid', 'tool');
  const e = await rejectsWithCode(assert, oneTool(async () => {})(), 'tool_result_invalid', 'tool');
  assert.match(e.message, /undefined/);
});

test('wrong shapes are tool_result_invalid, with what is wrong', async () => {
  const cases = [
    [() => 42, /not a ToolResult/],
    [() => 'just text', /not a ToolResult/],
    [() => null, /not a ToolResult/],
    [async () => ({ foo: 1 }), /contents/],
    [() => ({ contents: 'x' }), /not a ToolResult/],
    [() => ({ contents: [{ type: 'image', text: 'x' }] }), /type must be text or json/],
    [() => ({ contents: [{ type: 'text' }] }), /no string `text`/],
    [() => ({ contents: [{ type: 'json', json: '{bad' }] }), /not JSON/],
    [() => ({ contents: [], metadataJson: '[1]' }), /metadataJson must be a JSON object/],
    [() => ({ contents: [], isError: 'yes' }), /not a ToolResult/],
    // The state's (and a hook resultJson's) snake_case spelling: skipped, an error read as a success.
    [() => ({ contents: [{ type: 'text', text: 'no such order' }], is_error: true }), /is_error: an executor's result spells it isError/],
    [() => ({ contents: [], metadata: { userId: 'u-1' } }), /metadata: an executor's result spells it metadataJson/],
    [async () => ({ contents: [], is_error: false }), /is_error: an executor's result spells it isError/],
  ];
  for (const [executor, pattern] of cases) {
    const e = await rejectsWithCode(assert, oneTool(executor)(), 'tool_result_invalid', 'tool');
    assert.match(e.message, pattern, `for ${executor}`);
  }
});

test('JSON nesting deeper than 64 levels is tool_result_invalid: the state could not read it back', async () => {
  const nested = (depth) => '['.repeat(depth) + ']'.repeat(depth);
  const ok = await oneTool(() => ({ contents: [{ type: 'json', json: nested(64) }] }))();
  assert.equal(ok.contents[0].json, nested(64));
  for (const depth of [65, 125, 127]) {
    const part = await rejectsWithCode(
      assert, oneTool(() => ({ contents: [{ type: 'json', json: nested(depth) }] }))(), 'tool_result_invalid', 'tool');
    assert.match(part.message, /contents\[0\]\.json nests deeper than 64 levels/);
    const meta = await rejectsWithCode(
      assert, oneTool(() => ({ contents: [], metadataJson: `{"x":${nested(depth - 1)}}` }))(), 'tool_result_invalid', 'tool');
    assert.match(meta.message, /metadata nests deeper than 64 levels/);
  }
});

test('a Promise that never settles is tool_timeout, and the executor is told', async () => {
  const reasons = [];
  let contextSignal;
  const run = oneTool((args, ctx) => {
    contextSignal = ctx.signal;
    ctx.signal.onCancel((reason) => reasons.push(reason));
    return new Promise(() => {});
  }, { timeoutMs: 150 });
  const started = Date.now();
  const e = await rejectsWithCode(assert, run(), 'tool_timeout', 'tool');
  const elapsed = Date.now() - started;
  assert.ok(elapsed >= 140 && elapsed < 5000, `timed out after ${elapsed} ms`);
  assert.match(e.message, /150 ms/);
  await waitFor(() => reasons.length >= 1, 'onCancel after the timeout');
  assert.deepEqual(reasons, ['timeout']);
  assert.equal(contextSignal.cancelled, true);
});

test('a never-settling Promise that the GC collects is still tool_timeout, at the deadline', async () => {
  setFlagsFromString('--expose-gc');
  const gc = runInNewContext('gc');
  // Nothing keeps this Promise (or its resolvers) alive: after a GC the binding's then/catch
  // callbacks are finalized without ever running.
  const run = oneTool(() => new Promise(() => {}), { timeoutMs: 300 });
  const started = Date.now();
  // The rejection is awaited from the start: on a loaded machine the GCs below can outlast the
  // 300 ms, and a rejection with no handler yet fails the test as unhandled.
  const rejected = rejectsWithCode(assert, run(), 'tool_timeout', 'tool');
  for (let i = 0; i < 10; i++) {
    await sleep(10);
    gc();
  }
  const e = await rejected;
  const elapsed = Date.now() - started;
  assert.ok(elapsed >= 290, `reported after ${elapsed} ms, before the deadline`);
  assert.match(e.message, /300 ms/);
});

test('the registry default timeout applies when the definition has none', async () => {
  const r = new ToolRegistry({ defaultTimeoutMs: 80 });
  r.register({ name: 'slow', description: 'd', parametersJson: objectSchema }, () => new Promise(() => {}));
  await rejectsWithCode(assert, r.execute({ id: 'c', name: 'slow', arguments: '{}' }), 'tool_timeout', 'tool');
});

test('after every kind of failure the executor still works', async () => {
  let mode = 'throw';
  const run = oneTool(() => {
    if (mode === 'throw') throw new Error('x');
    if (mode === 'undefined') return undefined;
    return text('fine');
  });
  await rejectsWithCode(assert, run(), 'tool_execution_failed');
  mode = 'undefined';
  await rejectsWithCode(assert, run(), 'tool_result_invalid');
  mode = 'ok';
  assert.equal((await run()).contents[0].text, 'fine');
});

test('maxResultBytes: a larger result is recorded as tool_result_too_large; 0, a fraction or a negative is config_invalid', async () => {
  const agentWith = (maxResultBytes) => {
    const agent = new Agent({
      provider: 'scripted',
      scriptJson: JSON.stringify([{ tool_calls: [{ id: 'c1', name: 'dump', arguments: '{}' }] }, { content: 'done' }]),
      maxResultBytes,
    });
    agent.registerTool({ name: 'dump', description: 'd', parametersJson: objectSchema }, () => text('x'.repeat(200)));
    return agent;
  };
  const toolMessage = async (agent) => {
    assert.equal((await agent.run('s', 'go')).status, 'completed');
    return JSON.parse(await agent.stateJson('s')).messages.find((m) => m.role === 'tool');
  };
  const fits = await toolMessage(agentWith(200));
  assert.deepEqual([fits.content.length, fits.is_error === true], [200, false]);
  const over = await toolMessage(agentWith(199));
  assert.equal(over.is_error, true);
  assert.match(over.content, /^error \[tool_result_too_large\]: the result of dump takes 200 bytes, more than the limit of 199/);
  for (const bad of [0, 2.5, -1]) {
    const e = throwsWithCode(assert, () => agentWith(bad), 'config_invalid', 'config');
    assert.match(e.message, /^maxResultBytes must be a whole number from 1/, String(bad));
  }
});

test('maxResultBytes: an error result over the limit keeps its code and metadata, its text cut to fit', async () => {
  // Room for the metadata, the note and the `error [code]: ` the cut keeps whatever the limit.
  const maxResultBytes = 105;
  const agent = new Agent({
    provider: 'scripted',
    maxResultBytes,
    scriptJson: JSON.stringify([
      { tool_calls: [{ id: 'bad_json', name: 'dump', arguments: '{bad' }, { id: 'throws', name: 'boom', arguments: '{}' }] },
      { content: 'done' },
    ]),
  });
  agent.registerTool({ name: 'dump', description: 'd', parametersJson: objectSchema }, () => text('fine'));
  agent.registerTool({ name: 'boom', description: 'd', parametersJson: objectSchema }, () => {
    throw new Error(`kaboom ${'ü'.repeat(100)}`);
  });
  const results = [];
  agent.onEvent((e) => {
    e = JSON.parse(e);
    if (e.type === 'tool_result') results.push(e.result);
  });
  assert.equal((await agent.run('s', 'go')).status, 'completed');
  const size = (r) => Buffer.byteLength(r.contents[0].text) + JSON.stringify(r.metadata).length;
  assert.deepEqual(results.map((r) => r.metadata.code), ['json_invalid', 'tool_execution_failed']);
  for (const r of results) {
    assert.equal(r.is_error, true);
    assert.match(r.contents[0].text, new RegExp(`^error \\[${r.metadata.code}\\]: .+… \\[\\d+ more bytes cut\\]$`));
    assert.ok(size(r) <= maxResultBytes, JSON.stringify(r));
  }
  const saved = JSON.parse(await agent.stateJson('s')).messages.filter((m) => m.role === 'tool');
  assert.deepEqual(saved.map((m) => m.content), results.map((r) => r.contents[0].text));
});
