// Cancelling an Agent run through the CancellationHandle given to run(): the signal reaches the
// JS executor through context.signal (polled and onCancel), and the run ends as cancelled; an app
// function whose call still waits for the JS thread when the run is cancelled is never called.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { setTimeout as sleep } from 'node:timers/promises';
import { busy, loadModule, objectSchema, resolveThen, text, waitFor } from './helper.mjs';

const { Agent, CancellationHandle } = loadModule();

function agentWithSlowTool(answers) {
  const agent = new Agent({ provider: 'scripted', scriptJson: JSON.stringify(answers) });
  const seen = { started: 0, heard: [], polled: [] };
  agent.registerTool({ name: 'slow', description: 'takes its time', parametersJson: objectSchema }, (_args, ctx) => {
    seen.started++;
    seen.polled.push(ctx.signal.cancelled);
    return new Promise((resolve) => {
      ctx.signal.onCancel((reason) => {
        seen.heard.push([reason, ctx.signal.cancelled, ctx.signal.reason]);
        resolve({ contents: [{ type: 'text', text: 'stopped' }] });
      });
    });
  });
  return { agent, seen };
}

test('a cancel mid-run reaches the executor through context.signal and ends the run as cancelled; the call gets its tool_result', async () => {
  const { agent, seen } = agentWithSlowTool([
    { tool_calls: [{ id: 'c1', name: 'slow', arguments: '{}' }] },
    { content: 'never asked' },
  ]);
  const handle = new CancellationHandle();
  const events = [];
  agent.onEvent((e) => events.push(JSON.parse(e)));
  const running = agent.run('s', 'go', handle);
  await waitFor(() => seen.started === 1, 'the executor to start');
  await sleep(20);
  assert.deepEqual(seen.heard, [], 'nothing cancelled yet');
  handle.cancel('user pressed stop');
  const out = await running;
  assert.equal(out.status, 'cancelled');
  await waitFor(() => seen.heard.length === 1, 'the executor to hear the cancel');
  assert.deepEqual(seen.heard, [['user pressed stop', true, 'user pressed stop']]);
  assert.deepEqual(seen.polled, [false]);
  // The call the cancel cut short still gets its one tool_result (a UI pairing calls with results
  // closes it), right before run_finished: the answer the state gives it, which records none.
  assert.deepEqual(events.slice(-3).map((e) => e.type), ['state_persisted', 'tool_result', 'run_finished']);
  assert.equal(events.filter((e) => e.type === 'tool_result').length, 1);
  const cut = events.at(-2);
  assert.deepEqual([cut.call_id, cut.result.is_error, cut.result.metadata.code], ['c1', true, 'tool_interrupted']);
  const state = JSON.parse(await agent.stateJson('s'));
  assert.equal(state.status, 'cancelled');
  const answered = state.messages.find((m) => m.role === 'tool');
  assert.ok(answered.content.endsWith(cut.result.contents[0].text), 'the event tells what the state says');
});

test('a handle cancelled before the run: cancelled at once, nothing runs', async () => {
  const { agent, seen } = agentWithSlowTool([{ tool_calls: [{ id: 'c1', name: 'slow', arguments: '{}' }] }]);
  const handle = new CancellationHandle();
  handle.cancel();
  const out = await agent.run('s', 'go', handle);
  assert.equal(out.status, 'cancelled');
  assert.equal(seen.started, 0);
});

test('the same handle also cancels a resumed run', async () => {
  const agent = new Agent({
    provider: 'scripted',
    scriptJson: JSON.stringify([{ tool_calls: [{ id: 'd1', name: 'wipe', arguments: '{}' }] }]),
  });
  const heard = [];
  agent.registerTool({ name: 'wipe', description: 'd', parametersJson: objectSchema, riskLevel: 'dangerous' }, (_a, ctx) =>
    new Promise((resolve) => ctx.signal.onCancel((reason) => {
      heard.push(reason);
      resolve({ contents: [{ type: 'text', text: 'stopped' }] });
    })));
  const out = await agent.run('s', 'wipe');
  await agent.approve('s', JSON.parse(out.batchJson).items[0].approval_id);
  const handle = new CancellationHandle();
  const resumed = agent.resume('s', handle);
  await sleep(50);
  handle.cancel('changed my mind');
  assert.equal((await resumed).status, 'cancelled');
  await waitFor(() => heard.length === 1, 'the executor to hear the cancel');
  assert.deepEqual(heard, ['changed my mind']);
});

// A hook or policy of the app that never answers holds a run until its timeout (here 20 s); a
// cancel ends the run at once instead, with nothing run or frozen.
for (const where of ['policy', 'beforeToolCall', 'afterToolCall']) {
  test(`a cancel while the ${where} has not answered ends the run without waiting for it`, async () => {
    const agent = new Agent({
      provider: 'scripted',
      toolTimeoutMs: 20000,
      scriptJson: JSON.stringify([{ tool_calls: [{ id: 'c1', name: 'wipe', arguments: '{}' }] }, { content: 'never asked' }]),
    });
    let entered = 0;
    let ran = 0;
    const never = () => { entered++; return new Promise(() => {}); };
    agent.registerTool({ name: 'wipe', description: 'd', parametersJson: objectSchema, riskLevel: 'dangerous' }, () => {
      ran++;
      return { contents: [{ type: 'text', text: 'wiped' }] };
    });
    if (where === 'policy') agent.setApprovalPolicy(never);
    else agent.setApprovalPolicy(() => 'allow');
    if (where !== 'policy') agent.addHook({ [where]: never });
    const handle = new CancellationHandle();
    const running = agent.run('s', 'go', handle);
    await waitFor(() => entered === 1, `the ${where} to be asked`);
    const cancelledAt = Date.now();
    handle.cancel('user pressed stop');
    const out = await running;
    assert.ok(Date.now() - cancelledAt < 10000, `ended ${Date.now() - cancelledAt} ms after the cancel`);
    assert.equal(out.status, 'cancelled');
    assert.equal(ran, where === 'afterToolCall' ? 1 : 0);
    const state = JSON.parse(await agent.stateJson('s'));
    assert.equal(state.status, 'cancelled');
    assert.equal(state.pending_approval ?? null, null, 'nothing frozen');
  });
}

/**
 * Runs one place_order call (with `args`) under a 100 ms tool timeout while the JS thread is busy
 * for `busyMs`, then checks the call was never started and the model was told it did not run.
 */
async function timedOutWhileBusy(args, busyMs) {
  const answers = [{ tool_calls: [{ id: 'c1', name: 'place_order', arguments: JSON.stringify(args) }] }, { content: 'done' }];
  const agent = new Agent({ provider: 'scripted', scriptJson: JSON.stringify(answers), toolTimeoutMs: 100 });
  const started = [];
  agent.registerTool({ name: 'place_order', description: 'places an order', parametersJson: objectSchema }, (_args, ctx) => {
    started.push(ctx.callId);
    return { contents: [{ type: 'text', text: 'order placed' }] };
  });
  const running = agent.run('s', 'order it');
  busy(busyMs);
  const outcome = await running;
  await sleep(50);
  assert.equal(outcome.status, 'completed');
  assert.deepEqual(started, [], 'the executor ran after its call had been answered');
  const tool = JSON.parse(await agent.stateJson('s')).messages.find((m) => m.role === 'tool');
  // Not tool_timeout's "may or may not have taken effect, so check": it never ran, and calling it
  // again is safe. The run's own limit and the executor's are the same 100 ms: either may word it.
  assert.match(tool.content, NOT_STARTED);
}

/** What a call that timed out before the JS thread could start it is answered, by either limit. */
const NOT_STARTED =
  /^error \[tool_not_started\]: (executor of place_order was not started within 100 ms: the app was busy|place_order was not started within 100 ms), and the tool did not run$/;

test('a call that timed out while the JS thread was busy is never started: the tool does not run, and the model is told it did not', async () => {
  // Busy far past the 100 ms timeout: a loaded machine may be late to fire it.
  await timedOutWhileBusy({}, 1500);
});

test("a call the run's own limit cuts off before the busy JS thread started it is tool_not_started too, and never starts", async () => {
  // Long arguments take the executor a few milliseconds to hand to the JS thread, so its own
  // limit (the same 100 ms) ends after the run's, which answers the call first. Before, the run's
  // limit answered tool_timeout ("may or may not have taken effect") for a call that never ran.
  // Busy past the timeout and the checks of the long arguments before it.
  await timedOutWhileBusy({ pad: 'x'.repeat(300_000) }, 2000);
});

test('a call the JS thread started and that then timed out is tool_timeout, with its caveat', async () => {
  const answers = [{ tool_calls: [{ id: 'c1', name: 'place_order', arguments: '{}' }] }, { content: 'done' }];
  const agent = new Agent({ provider: 'scripted', scriptJson: JSON.stringify(answers), toolTimeoutMs: 100 });
  agent.registerTool({ name: 'place_order', description: 'places an order', parametersJson: objectSchema },
    () => new Promise(() => {}));
  assert.equal((await agent.run('s', 'order it')).status, 'completed');
  const tool = JSON.parse(await agent.stateJson('s')).messages.find((m) => m.role === 'tool');
  // The run's own limit and the executor's are the same 100 ms: either may word it.
  assert.match(tool.content, /^error \[tool_timeout\]: (executor of )?place_order did not finish within 100 ms; it may or may not have taken effect/);
});

test('calls still queued for the JS thread when their run is cancelled are never started', async () => {
  const calls = ['a', 'b', 'c'].map((name, i) => ({ id: `c${i}`, name, arguments: '{}' }));
  const agent = new Agent({ provider: 'scripted', scriptJson: JSON.stringify([{ tool_calls: calls }, { content: 'done' }]) });
  const handle = new CancellationHandle();
  const started = [];
  for (const name of ['a', 'b', 'c']) {
    agent.registerTool({ name, description: name, parametersJson: objectSchema }, () => {
      started.push(name);
      if (name === 'a') {
        handle.cancel('user pressed stop');
        busy(100);
      }
      return { contents: [{ type: 'text', text: `${name} done` }] };
    });
  }
  const running = agent.run('s', 'go', handle);
  // The three calls queue for the JS thread while it is busy; then a runs first and cancels.
  busy(300);
  const outcome = await running;
  await sleep(100);
  assert.equal(outcome.status, 'cancelled');
  assert.deepEqual(started, ['a']);
});

// A hook or policy call still waiting for the busy JS thread when its run is cancelled is never
// made: the run has ended without its answer, and the app must not act on a call it no longer has.
for (const where of ['policy', 'beforeToolCall', 'afterToolCall']) {
  test(`${where}: a call still queued for the busy JS thread when its run is cancelled is never made`, async () => {
    const agent = new Agent({
      provider: 'scripted',
      toolTimeoutMs: 20000,
      scriptJson: JSON.stringify([{ tool_calls: [{ id: 'c1', name: 'wipe', arguments: '{}' }] }, { content: 'never asked' }]),
    });
    const handle = new CancellationHandle();
    // The call queues while the JS thread is busy; the cancel comes before the thread is free.
    const cancelWhileBusy = () => {
      busy(200);
      handle.cancel('user pressed stop');
      busy(100);
    };
    let ran = 0;
    agent.registerTool({ name: 'wipe', description: 'd', parametersJson: objectSchema, riskLevel: 'dangerous' }, () => {
      ran++;
      // Busy once the executor has answered, while its afterToolCall queues.
      return where === 'afterToolCall' ? resolveThen(text('wiped'), cancelWhileBusy) : text('wiped');
    });
    const asked = [];
    const answers = { policy: 'allow', beforeToolCall: { action: 'proceed' }, afterToolCall: { action: 'proceed' } };
    const asking = () => {
      asked.push(where);
      return answers[where];
    };
    agent.setApprovalPolicy(where === 'policy' ? asking : () => 'allow');
    if (where !== 'policy') agent.addHook({ [where]: asking });
    const running = agent.run('s', 'go', handle);
    if (where !== 'afterToolCall') cancelWhileBusy();
    const out = await running;
    await sleep(100);
    assert.equal(out.status, 'cancelled');
    assert.deepEqual(asked, [], `the ${where} was asked after its run was cancelled`);
    assert.equal(ran, where === 'afterToolCall' ? 1 : 0);
    const state = JSON.parse(await agent.stateJson('s'));
    assert.equal(state.status, 'cancelled');
    assert.equal(state.pending_approval ?? null, null, 'nothing frozen');
  });
}

// The same when the JS thread is free again right after the app's cancel(): the run's wait for the
// call ends a moment later, on a worker thread, and the call queued for the JS thread must not be
// made in between. The call's run signal is read on the JS thread before the call is made, after
// the cancel, so this holds every time; before, it was a race the call won in some runs (this test
// failed in most of its runs then, not all: hence 25 runs per kind of call).
for (const where of ['executor', 'policy', 'beforeToolCall']) {
  test(`${where}: a call queued for the busy JS thread is never made when the thread is free right after the cancel`, async () => {
    const asked = [];
    for (let i = 0; i < 25; i++) {
      const agent = new Agent({
        provider: 'scripted',
        toolTimeoutMs: 20000,
        scriptJson: JSON.stringify([{ tool_calls: [{ id: 'c1', name: 'wipe', arguments: '{}' }] }, { content: 'never asked' }]),
      });
      const handle = new CancellationHandle();
      const asking = (answer) => () => {
        asked.push(`${where} of run ${i}`);
        return answer;
      };
      agent.registerTool({ name: 'wipe', description: 'd', parametersJson: objectSchema, riskLevel: 'dangerous' },
        where === 'executor' ? asking(text('wiped')) : () => text('wiped'));
      agent.setApprovalPolicy(where === 'policy' ? asking('allow') : () => 'allow');
      if (where === 'beforeToolCall') agent.addHook({ beforeToolCall: asking({ action: 'proceed' }) });
      const running = agent.run('s', 'go', handle);
      // The call queues while the JS thread is busy; the cancel is the last thing it does.
      busy(30);
      handle.cancel('user pressed stop');
      const out = await running;
      assert.equal(out.status, 'cancelled');
      const state = JSON.parse(await agent.stateJson('s'));
      assert.equal(state.status, 'cancelled');
      assert.equal(state.pending_approval ?? null, null, 'nothing frozen');
    }
    await sleep(50);
    assert.deepEqual(asked, [], `the ${where} was called after its run was cancelled`);
  });
}

test('a cancel from the first of parallel calls answers the calls it came before as not run, the one that ran as interrupted', async () => {
  const calls = ['c1', 'c2', 'c3'].map((id) => ({ id, name: 't', arguments: '{}' }));
  for (const maxParallelTools of [4, 1]) {
    const agent = new Agent({ provider: 'scripted', maxParallelTools, scriptJson: JSON.stringify([{ tool_calls: calls }, { content: 'never asked' }]) });
    const handle = new CancellationHandle();
    const started = [];
    agent.registerTool({ name: 't', description: 't', parametersJson: objectSchema }, (_args, ctx) => {
      started.push(ctx.callId);
      if (ctx.callId === 'c1') handle.cancel('cancelled by c1');
      return sleep(30).then(() => text('ran'));
    });
    const out = await agent.run('s', 'go', handle);
    assert.equal(out.status, 'cancelled');
    await sleep(100);
    assert.deepEqual(started, ['c1'], `width ${maxParallelTools}`);
    const answers = JSON.parse(await agent.stateJson('s')).messages.filter((m) => m.role === 'tool').map((m) => m.content);
    assert.match(answers[0], /may or may not have taken effect/);
    for (const answer of answers.slice(1)) assert.match(answer, /\[tool_interrupted\].*it did not run$/, `width ${maxParallelTools}`);
    assert.equal(answers.length, 3);
  }
});
