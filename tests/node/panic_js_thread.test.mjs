// Panics where no export's guard reaches: in the conversion of an export's arguments (before its
// body runs), and on the JS thread inside the closures napi-ohos runs from C (a thread-safe call's
// arguments, the shield around every app function, a call's reply, the then/catch of an app's
// Promise, the listener's reply, an onCancel callback's reply). Unguarded, each one aborted the
// process. Each must become the structured outcome of its call (an executor's
// tool_execution_failed, a hook's hook_failed, the policy's fail-closed confirmation, a dropped event
// with a warning), at once rather than at a timeout, and leave the process alive, and Node free to
// exit by itself.
//
// The module is the one of tests/node/panic.test.mjs (built with the test-only `napi-panic-test`
// feature; `panicNext(site, detail)` plans the panic): ARKAGENT_PANIC_SO, or built on the spot.
//   node --test tests/node/panic_js_thread.test.mjs
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { buildPanicModule, objectSchema, rejectsWithCode, runNode, text, throwsWithCode } from './helper.mjs';

const SO = buildPanicModule();
const native = { exports: {} };
process.dlopen(native, SO);
const { Agent, ToolRegistry, CancellationHandle, panicNext, canonicalJson } = native.exports;

// An API key, registered with the process logger as a secret when an Agent is built with it: no
// error, state or log line may carry it, though every planned panic's message does.
const API_KEY = 'sk-panic-js-0123456789abcdef';
// Its key is a secret of the process (redacted from what panics say) while the Agent lives: kept
// for the whole file.
export const keyHolder = new Agent({ provider: 'custom', baseUrl: 'http://127.0.0.1:9/v1', model: 'm', apiKey: API_KEY });

/** Plans a panic at `site` whose message carries the API key. */
function planPanic(site) {
  assert.equal(panicNext(site, `detail with the key ${API_KEY}`), false, 'a plan was still pending');
}

/** Asserts a message says the binding caught the planned panic at `Site`, without the API key. */
function assertCaught(message, site) {
  assert.match(message, new RegExp(`a Rust panic was caught at the binding: planned test panic at ${site}`));
  assert.ok(!message.includes(API_KEY), `the API key leaked: ${message}`);
  assert.match(message, /\[REDACTED\]/);
}

/** A registry whose tool `t` counts its runs; `answer` is what the executor returns. */
function countingRegistry(answer = (args) => text(`ok ${args}`)) {
  // A long timeout: an answer lost on the JS thread would show as a wait this long.
  const registry = new ToolRegistry({ defaultTimeoutMs: 60_000 });
  const runs = { n: 0 };
  registry.register({ name: 't', description: 'd', parametersJson: objectSchema }, (args, context) => {
    runs.n += 1;
    return answer(args, context);
  });
  const call = () => registry.execute({ id: 'c1', name: 't', arguments: '{"n":1}' });
  return { registry, runs, call };
}

/** Asserts that `promise` rejects with tool_execution_failed naming the panic at `site`, quickly. */
async function assertExecutionFailed(promise, site) {
  const start = Date.now();
  const error = await rejectsWithCode(assert, promise, 'tool_execution_failed', 'tool');
  assert.match(error.message, /^executor of t failed in the binding: /);
  assertCaught(error.message, site);
  assert.ok(Date.now() - start < 5000, `the failure took ${Date.now() - start} ms: a timeout?`);
}

/** A scripted agent calling tool `t` once, then answering `done`; `runs.n` counts `t`'s runs. */
function callingAgent() {
  const agent = new Agent({
    provider: 'scripted',
    scriptJson: JSON.stringify([{ tool_calls: [{ id: 'c1', name: 't', arguments: '{}' }] }, { content: 'done' }]),
    toolTimeoutMs: 60_000,
  });
  const runs = { n: 0 };
  agent.registerTool({ name: 't', description: 'd', parametersJson: objectSchema }, () => {
    runs.n += 1;
    return text('ran');
  });
  return { agent, runs };
}

test("a panic converting an export's argument throws internal_panic before the body; the export still works", async () => {
  planPanic('argument');
  const error = throwsWithCode(assert, () => canonicalJson('{"b":1,"a":2}'), 'internal_panic', 'internal');
  assertCaught(error.message, 'Argument');
  assert.equal(canonicalJson('{"b":1,"a":2}'), '{"a":2,"b":1}');

  // An async export has no Promise yet: it throws.
  const agent = new Agent({ provider: 'scripted', scriptJson: '[]' });
  planPanic('argument');
  assertCaught(throwsWithCode(assert, () => agent.stateJson('s1'), 'internal_panic').message, 'Argument');
  assert.equal(await agent.stateJson('s1'), null);

  // A class argument (ArgRef): nothing was copied.
  const { registry } = countingRegistry();
  const target = new ToolRegistry();
  planPanic('argument');
  assertCaught(throwsWithCode(assert, () => registry.copyInto(target), 'internal_panic').message, 'Argument');
  assert.deepEqual(target.names(), []);
  registry.copyInto(target);
  assert.deepEqual(target.names(), ['t']);
});

test("a panic making an executor's JS arguments is the call's tool_execution_failed; the executor never ran", async () => {
  const { runs, call } = countingRegistry();
  planPanic('args');
  await assertExecutionFailed(call(), 'Args');
  assert.equal(runs.n, 0);
  assert.deepEqual((await call()).contents, [{ type: 'text', text: 'ok {"n":1}' }]);
  assert.equal(runs.n, 1);
});

test("a panic making a hook's JS arguments denies the call with hook_failed (fail closed)", async () => {
  const { agent, runs } = callingAgent();
  let asked = 0;
  agent.addHook({
    beforeToolCall: () => {
      asked += 1;
      return { action: 'proceed' };
    },
  });
  planPanic('args');
  const out = await agent.run('s1', 'go');
  assert.equal(out.status, 'completed');
  assert.equal(asked, 0, 'the hook was called with arguments that could not be made');
  assert.equal(runs.n, 0, 'the executor ran although its hook failed');
  const state = await agent.stateJson('s1');
  const tool = JSON.parse(state).messages.find((m) => m.role === 'tool');
  assert.match(tool.content, /hook_failed/);
  assert.match(tool.content, /beforeToolCall failed in the binding/);
  assertCaught(tool.content, 'Args');
});

test("a panic in the then of an afterToolCall hook's Promise ends the run with hook_failed (fail closed)", async () => {
  const { agent, runs } = callingAgent();
  agent.addHook({ afterToolCall: async () => ({ action: 'proceed' }) });
  planPanic('then');
  const out = await agent.run('s1', 'go');
  assert.equal(out.status, 'aborted');
  assert.equal(out.errorCode, 'hook_failed');
  assert.match(out.errorMessage, /afterToolCall failed in the binding/);
  assertCaught(out.errorMessage, 'Then');
  assert.equal(runs.n, 1);
  // The model was not asked again with the unfiltered result: the script's `done` is unused.
  assert.equal(out.finalText ?? null, null);
});

test("a panic making the approval policy's JS arguments fails closed: the call needs confirmation", async () => {
  const { agent, runs } = callingAgent();
  let asked = 0;
  agent.setApprovalPolicy(() => {
    asked += 1;
    return 'allow';
  });
  planPanic('args');
  const out = await agent.run('s1', 'go');
  assert.equal(out.status, 'awaiting_approval');
  const [item] = JSON.parse(out.batchJson).items;
  assert.match(item.reason, /^approval_policy_failed: the policy failed in the binding: /);
  assertCaught(item.reason, 'Args');
  assert.equal(asked, 0);
  assert.equal(runs.n, 0);
});

test('a panic in the shield around an app function is the call\'s tool_execution_failed; the function never ran', async () => {
  const { runs, call } = countingRegistry();
  planPanic('shield');
  await assertExecutionFailed(call(), 'Shield');
  assert.equal(runs.n, 0);
  assert.deepEqual((await call()).contents, [{ type: 'text', text: 'ok {"n":1}' }]);
});

test("a panic in a call's reply, before the answer is read, is the call's tool_execution_failed", async () => {
  const { runs, call } = countingRegistry();
  planPanic('reply');
  await assertExecutionFailed(call(), 'Reply');
  assert.equal(runs.n, 1, 'the executor ran; its answer was lost');
  assert.deepEqual((await call()).contents, [{ type: 'text', text: 'ok {"n":1}' }]);
});

test("a panic in the then or catch attached to an executor's Promise is the call's tool_execution_failed", async () => {
  const resolving = countingRegistry(async (args) => text(`later ${args}`));
  planPanic('then');
  await assertExecutionFailed(resolving.call(), 'Then');
  assert.deepEqual((await resolving.call()).contents, [{ type: 'text', text: 'later {"n":1}' }]);

  const rejecting = countingRegistry(async () => {
    throw new Error('no');
  });
  planPanic('then');
  await assertExecutionFailed(rejecting.call(), 'Then');
  // Without the panic, the rejection is the error, as always.
  const error = await rejectsWithCode(assert, rejecting.call(), 'tool_execution_failed');
  assert.match(error.message, /executor of t rejected: Error: no/);
});

test("in a run, a panic on the JS thread around an executor fails that call only; the model sees it", async () => {
  const { agent, runs } = callingAgent();
  planPanic('shield');
  const out = await agent.run('s1', 'go');
  assert.equal(out.status, 'completed');
  assert.equal(out.finalText, 'done');
  assert.equal(runs.n, 0);
  const state = await agent.stateJson('s1');
  const tool = JSON.parse(state).messages.find((m) => m.role === 'tool');
  assert.match(tool.content, /tool_execution_failed/);
  assertCaught(tool.content, 'Shield');
});

// A child process: its stderr (the log) is read, and it must end by itself once its work is done.
const CHILD_PRELUDE = `
  const native = { exports: {} };
  process.dlopen(native, process.env.SO);
  const { Agent, CancellationHandle, panicNext } = native.exports;
  globalThis.keyHolder = new Agent({ provider: 'custom', baseUrl: 'http://127.0.0.1:9/v1', model: 'm', apiKey: process.env.KEY });
  const plan = (site) => panicNext(site, 'detail with the key ' + process.env.KEY);
  const agent = () => new Agent({ provider: 'scripted', scriptJson: JSON.stringify([{ content: 'done' }]) });
`;

async function runChild(body) {
  const child = await runNode(['-e', CHILD_PRELUDE + body], {
    env: { SO, KEY: API_KEY, ARKAGENT_LOG: 'warn', RUST_BACKTRACE: '0' },
    ms: 30_000,
  });
  assert.equal(child.code, 0, `the child did not exit by itself with 0 (${child.code}): ${child.err}`);
  assert.ok(!child.err.includes(API_KEY), `the API key reached stderr: ${child.err}`);
  return child;
}

test("a panic making an event's JS argument drops that event with a warning; the run goes on", async () => {
  const { out, err } = await runChild(`
    (async () => {
      const a = agent();
      const seen = [];
      a.onEvent((e) => seen.push(JSON.parse(e).type));
      plan('args');
      const out = await a.run('s1', 'hi');
      console.log(JSON.stringify({ status: out.status, seen }));
    })();
  `);
  const { status, seen } = JSON.parse(out);
  assert.equal(status, 'completed');
  // The first event (run_started) was dropped; the others arrived, in order.
  assert.ok(!seen.includes('run_started'), `run_started arrived: ${seen}`);
  assert.equal(seen.at(-1), 'run_finished');
  assert.match(err, /an event may not have reached the listener: a Rust panic was caught at the binding: planned test panic at Args: detail with the key \[REDACTED\]; dropped/);
});

test("a panic in the listener's reply is logged; the run resolves at once, not after the delivery wait", async () => {
  const { out, err } = await runChild(`
    (async () => {
      const a = agent();
      const seen = [];
      a.onEvent((e) => seen.push(JSON.parse(e).type));
      plan('listener');
      const start = Date.now();
      const out = await a.run('s1', 'hi');
      console.log(JSON.stringify({ status: out.status, seen, ms: Date.now() - start }));
    })();
  `);
  const { status, seen, ms } = JSON.parse(out);
  assert.equal(status, 'completed');
  // The listener saw every event (the panic came after it returned).
  assert.equal(seen[0], 'run_started');
  assert.equal(seen.at(-1), 'run_finished');
  assert.ok(ms < 4000, `the run took ${ms} ms`);
  assert.match(err, /an event may not have reached the listener: a Rust panic was caught at the binding: planned test panic at Listener/);
});

test("a panic in an onCancel callback's reply is logged; other callbacks still run", async () => {
  const { out, err } = await runChild(`
    const calls = [];
    const first = new CancellationHandle();
    first.onCancel((reason) => calls.push('first ' + reason));
    plan('cancel');
    first.cancel('stop');
    // onCancel registrations never keep the process alive: timers wait for the callbacks.
    setTimeout(() => {
      const second = new CancellationHandle();
      second.onCancel((reason) => calls.push('second ' + reason));
      second.cancel('again');
      setTimeout(() => console.log(JSON.stringify(calls)), 200);
    }, 200);
  `);
  assert.deepEqual(JSON.parse(out), ['first stop', 'second again']);
  assert.match(err, /an onCancel callback may not have been called: a Rust panic was caught at the binding: planned test panic at Cancel/);
});

test('a panic making an onCancel callback\'s argument: the callback is not called, a warning is logged', async () => {
  const { out, err } = await runChild(`
    const calls = [];
    const handle = new CancellationHandle();
    handle.onCancel((reason) => calls.push(reason));
    plan('args');
    handle.cancel('stop');
    setTimeout(() => console.log(JSON.stringify(calls)), 200);
  `);
  assert.deepEqual(JSON.parse(out), []);
  assert.match(err, /an onCancel callback may not have been called: a Rust panic was caught at the binding: planned test panic at Args/);
});

test('after a panic at each JS-thread point, a process with runs, calls and handles exits by itself', async () => {
  const { out } = await runChild(`
    const { ToolRegistry } = native.exports;
    (async () => {
      const registry = new ToolRegistry({ defaultTimeoutMs: 60000 });
      registry.register({ name: 't', description: 'd', parametersJson: '{"type":"object"}' },
        async () => ({ contents: [{ type: 'text', text: 'ok' }] }));
      const codes = [];
      for (const site of ['args', 'shield', 'reply', 'then']) {
        plan(site);
        try { await registry.execute({ id: 'c', name: 't', arguments: '{}' }); codes.push('ok'); }
        catch (e) { codes.push(e.code); }
      }
      const a = agent();
      a.onEvent(() => {});
      plan('listener');
      const out = await a.run('s1', 'hi');
      const handle = new CancellationHandle();
      handle.onCancel(() => {});
      plan('cancel');
      handle.cancel();
      console.log(JSON.stringify({ codes, status: out.status }));
    })();
  `);
  assert.deepEqual(JSON.parse(out), {
    codes: ['tool_execution_failed', 'tool_execution_failed', 'tool_execution_failed', 'tool_execution_failed'],
    status: 'completed',
  });
});
