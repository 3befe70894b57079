// Agent hooks (AgentHookObject): beforeToolCall rewrites, denies, defers and aborts, sync and as a
// Promise; afterToolCall rewrites, injects and stops; notifications in order; failures contained.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { busy, loadModule, objectSchema, resolveThen, runUntilKilled, text, throwsWithCode } from './helper.mjs';

const { Agent, CancellationHandle } = loadModule();

const schema = JSON.stringify({ type: 'object', properties: { n: { type: 'integer' } }, required: ['n'] });

/** An agent whose model calls `add` with {"n":1}, then answers "done"; `ran` records executions. */
function setup(config = {}) {
  const agent = new Agent({
    provider: 'scripted',
    scriptJson: JSON.stringify([
      { tool_calls: [{ id: 'c1', name: 'add', arguments: '{"n":1}' }] },
      { content: 'done' },
    ]),
    ...config,
  });
  const ran = [];
  agent.registerTool({ name: 'add', description: 'adds one', parametersJson: schema }, (args) => {
    const { n } = JSON.parse(args);
    ran.push(n);
    return { contents: [{ type: 'text', text: String(n + 1) }] };
  });
  return { agent, ran };
}

async function toolMessage(agent, session = 's') {
  const state = JSON.parse(await agent.stateJson(session));
  return state.messages.find((m) => m.role === 'tool');
}

for (const mode of ['sync', 'promise']) {
  const answer = (decision) => (mode === 'sync' ? decision : Promise.resolve(decision));

  test(`beforeToolCall (${mode}) rewrites the arguments; the call keeps its id and sees the definition`, async () => {
    const { agent, ran } = setup();
    const seen = [];
    agent.addHook({
      beforeToolCall(contextJson, callJson, definitionJson) {
        seen.push([JSON.parse(contextJson).round, JSON.parse(callJson), JSON.parse(definitionJson).name]);
        return answer({ action: 'proceed', argumentsJson: '{"n":41}' });
      },
    });
    const out = await agent.run('s', 'go');
    assert.equal(out.status, 'completed');
    assert.deepEqual(ran, [41]);
    assert.deepEqual(seen, [[1, { id: 'c1', name: 'add', arguments: '{"n":1}' }, 'add']]);
    const tool = await toolMessage(agent);
    assert.equal(tool.tool_call_id, 'c1');
    assert.equal(tool.content, '42');
  });

  test(`beforeToolCall (${mode}) denies: the executor does not run, the model gets the hook's result`, async () => {
    const { agent, ran } = setup();
    agent.addHook({
      beforeToolCall: () => answer({ action: 'deny', resultJson: JSON.stringify({ contents: [{ type: 'text', text: 'not today' }], is_error: true }) }),
    });
    const out = await agent.run('s', 'go');
    assert.equal(out.status, 'completed');
    assert.deepEqual(ran, []);
    const tool = await toolMessage(agent);
    assert.equal(tool.is_error, true);
    // A failed result is marked as one in the text the model reads (the tool message has no error field).
    assert.equal(tool.content, 'error: not today');
  });

  test(`beforeToolCall (${mode}) aborts: the run ends aborted with hook_aborted`, async () => {
    const { agent, ran } = setup();
    const ends = [];
    agent.addHook({
      beforeToolCall: () => answer({ action: 'abort', reason: 'policy says no' }),
      onRunEnd: (_ctx, status, finalText) => ends.push([status, finalText]),
    });
    const out = await agent.run('s', 'go');
    assert.equal(out.status, 'aborted');
    assert.equal(out.errorCode, 'hook_aborted');
    assert.equal(out.errorLayer, 'runtime');
    assert.match(out.errorMessage, /policy says no/);
    assert.deepEqual(ran, []);
    assert.deepEqual(ends, [['aborted', null]]);
  });
}

test('methods are called with the hook object as `this`', async () => {
  const { agent, ran } = setup();
  const hook = {
    n: 7,
    beforeToolCall() {
      return { action: 'proceed', argumentsJson: JSON.stringify({ n: this.n }) };
    },
  };
  agent.addHook(hook);
  await agent.run('s', 'go');
  assert.deepEqual(ran, [7]);
});

test('deny without a result gives tool_denied with the reason; defer asks for approval', async () => {
  const { agent, ran } = setup();
  agent.addHook({ beforeToolCall: () => ({ action: 'deny', reason: 'quota' }) });
  await agent.run('s', 'go');
  const tool = await toolMessage(agent);
  assert.equal(tool.is_error, true);
  assert.match(tool.content, /quota/);
  assert.deepEqual(ran, []);

  const deferred = setup();
  deferred.agent.addHook({ beforeToolCall: async () => ({ action: 'defer', reason: 'ask the user' }) });
  const out = await deferred.agent.run('s', 'go');
  assert.equal(out.status, 'awaiting_approval');
  assert.equal(JSON.parse(out.batchJson).items[0].reason, 'ask the user');
  assert.deepEqual(deferred.ran, []);
});

test('hooks chain in the order added: the second sees the first one\'s rewrite', async () => {
  const { agent, ran } = setup();
  agent.addHook({ beforeToolCall: (_ctx, c) => ({ action: 'proceed', argumentsJson: JSON.stringify({ n: JSON.parse(JSON.parse(c).arguments).n * 10 }) }) });
  agent.addHook({ beforeToolCall: async (_ctx, c) => ({ action: 'proceed', argumentsJson: JSON.stringify({ n: JSON.parse(JSON.parse(c).arguments).n + 5 }) }) });
  await agent.run('s', 'go');
  assert.deepEqual(ran, [15]);
});

test('afterToolCall rewrites the result and injects a message', async () => {
  const { agent } = setup();
  const results = [];
  agent.addHook({
    afterToolCall: async (_ctx, callJson, resultJson) => {
      results.push([JSON.parse(callJson).id, JSON.parse(resultJson)]);
      return {
        action: 'proceed',
        resultJson: JSON.stringify({ contents: [{ type: 'text', text: 'redacted' }] }),
        injectJson: JSON.stringify([{ role: 'user', content: 'note from the app' }]),
      };
    },
  });
  await agent.run('s', 'go');
  assert.deepEqual(results, [['c1', { contents: [{ type: 'text', text: '2' }], is_error: false, stop: false }]]);
  const state = JSON.parse(await agent.stateJson('s'));
  const tool = state.messages.find((m) => m.role === 'tool');
  assert.equal(tool.content, 'redacted');
  const toolIndex = state.messages.indexOf(tool);
  assert.deepEqual(state.messages[toolIndex + 1], { role: 'user', content: 'note from the app' });
});

test('afterToolCall stop ends the run after the batch without asking the model again', async () => {
  const { agent, ran } = setup();
  agent.addHook({ afterToolCall: () => ({ action: 'stop' }) });
  const out = await agent.run('s', 'go');
  assert.equal(out.status, 'completed');
  assert.deepEqual(ran, [1]);
  const state = JSON.parse(await agent.stateJson('s'));
  assert.equal(state.messages.at(-1).role, 'tool');
});

test('beforeToolCall cannot rename the call: the call is refused with hook_call_name_changed', async () => {
  const { agent, ran } = setup();
  agent.addHook({ beforeToolCall: () => ({ action: 'proceed', name: 'wipe_everything', argumentsJson: '{"n":5}' }) });
  const out = await agent.run('s', 'go');
  assert.equal(out.status, 'completed');
  assert.deepEqual(ran, [], 'neither the original nor a renamed call ran');
  const tool = await toolMessage(agent);
  assert.equal(tool.is_error, true);
  assert.match(tool.content, /hook_call_name_changed/);
  // The same name is a plain rewrite.
  const same = setup();
  same.agent.addHook({ beforeToolCall: () => ({ action: 'proceed', name: 'add', argumentsJson: '{"n":5}' }) });
  await same.agent.run('s', 'go');
  assert.deepEqual(same.ran, [5]);
});

test('failures are contained: throw, rejection, wrong shape and a Promise that never settles deny with hook_failed', async () => {
  const failing = [
    () => {
      throw new Error('hook bug');
    },
    () => Promise.reject(new Error('hook rejected')),
    () => ({ action: 'explode' }),
    () => 42,
    () => new Promise(() => {}),
  ];
  for (const beforeToolCall of failing) {
    const { agent, ran } = setup({ toolTimeoutMs: 200 });
    const errors = [];
    agent.addHook({ beforeToolCall, onError: (_c, errorJson) => errors.push(JSON.parse(errorJson).code) });
    const out = await agent.run('s', 'go');
    assert.equal(out.status, 'completed', String(beforeToolCall));
    assert.deepEqual(ran, [], String(beforeToolCall));
    const tool = await toolMessage(agent);
    assert.equal(tool.is_error, true);
    assert.match(tool.content, /^error \[hook_failed\]: /, tool.content);
    // The failure is told to onError, as a failing beforeToolCall's is documented to be.
    assert.deepEqual(errors, ['hook_failed'], String(beforeToolCall));
  }
});

test('failing notifications are contained: the run goes on', async () => {
  const { agent, ran } = setup({ toolTimeoutMs: 200 });
  agent.addHook({
    onRunStart: () => {
      throw new Error('start bug');
    },
    onRunEnd: () => new Promise(() => {}),
    beforeModelCall: () => Promise.reject(new Error('model bug')),
    afterModelResponse: () => {
      throw new Error('response bug');
    },
  });
  const out = await agent.run('s', 'go');
  assert.equal(out.status, 'completed');
  assert.deepEqual(ran, [1]);
  assert.equal((await toolMessage(agent)).content, '2');
});

test('a failing afterToolCall ends the run with hook_failed: an unfiltered result never reaches the model', async () => {
  const failing = [
    () => {
      throw new Error('filter bug');
    },
    () => Promise.reject(new Error('filter rejected')),
    () => ({ action: 'explode' }),
    () => new Promise(() => {}),
  ];
  for (const afterToolCall of failing) {
    const { agent, ran } = setup({ toolTimeoutMs: 200 });
    const requests = [];
    agent.addHook({ afterToolCall, beforeModelCall: (_c, requestJson) => { requests.push(requestJson); } });
    const out = await agent.run('s', 'go');
    assert.equal(out.status, 'aborted', String(afterToolCall));
    assert.equal(out.errorCode, 'hook_failed', String(afterToolCall));
    assert.deepEqual(ran, [1]);
    assert.equal(requests.length, 1, 'the model was not asked with the result');
    // The call's result is the failure, not the unfiltered '2': a later turn sees only that.
    const tool = await toolMessage(agent);
    assert.equal(tool.is_error, true);
    assert.match(tool.content, /hook_failed/);
    assert.doesNotMatch(tool.content, /^2$/);
  }
});

// A hook call that times out while it waits for the busy JS thread (the app's own synchronous work,
// a synchronous executor) is never made once the thread is free: the runtime has handled it as a
// failed hook already, and a hook with side effects must not act on a call, a save or a run that
// has moved on.
test('a beforeToolCall that timed out while the JS thread was busy is never called: the call is denied with hook_failed', async () => {
  const { agent, ran } = setup({ toolTimeoutMs: 100 });
  const asked = [];
  agent.addHook({
    beforeToolCall: (_ctx, callJson) => {
      asked.push(JSON.parse(callJson).id);
      return { action: 'proceed' };
    },
  });
  const running = agent.run('s', 'go');
  busy(500);
  const out = await running;
  await sleep(100);
  assert.equal(out.status, 'completed');
  assert.deepEqual(asked, [], 'beforeToolCall was asked about a call already denied');
  assert.deepEqual(ran, []);
  const tool = await toolMessage(agent);
  assert.equal(tool.is_error, true);
  assert.match(tool.content, /^error \[hook_failed\]: hook #0 failed in before_tool_call for call c1: beforeToolCall did not settle within 100 ms \(the JS thread was busy all along: it was never called\)/);
});

test('an afterToolCall that timed out while the JS thread was busy is never called: the run ends with hook_failed', async () => {
  const agent = new Agent({
    provider: 'scripted',
    toolTimeoutMs: 100,
    scriptJson: JSON.stringify([{ tool_calls: [{ id: 'c1', name: 'add', arguments: '{"n":1}' }] }, { content: 'done' }]),
  });
  // The JS thread is busy right after the executor answered, while afterToolCall queues.
  agent.registerTool({ name: 'add', description: 'adds one', parametersJson: schema }, () =>
    resolveThen(text('2'), () => busy(500)));
  const asked = [];
  agent.addHook({
    afterToolCall: (_ctx, callJson) => {
      asked.push(JSON.parse(callJson).id);
      return { action: 'proceed' };
    },
  });
  const out = await agent.run('s', 'go');
  await sleep(100);
  assert.equal(out.status, 'aborted');
  assert.equal(out.errorCode, 'hook_failed');
  assert.match(out.errorMessage, /afterToolCall did not settle within 100 ms \(the JS thread was busy all along: it was never called\)/);
  assert.deepEqual(asked, [], 'afterToolCall was asked about a result already recorded as its failure');
  const tool = await toolMessage(agent);
  assert.match(tool.content, /hook_failed/);
});

test('notifications and beforePersistState that timed out while the JS thread was busy are never called: the run completes and is saved', async () => {
  const agent = new Agent({ provider: 'scripted', toolTimeoutMs: 50, scriptJson: JSON.stringify([{ content: 'done' }]) });
  const asked = [];
  const asking = (name, answer) => () => {
    asked.push(name);
    return answer;
  };
  agent.addHook({
    onRunStart: asking('onRunStart'),
    beforeModelCall: asking('beforeModelCall'),
    afterModelResponse: asking('afterModelResponse'),
    beforePersistState: asking('beforePersistState', 'skip'),
    onRunEnd: asking('onRunEnd'),
  });
  const running = agent.run('s', 'go');
  // Six hook calls of 50 ms each: all time out while the thread is busy.
  busy(1000);
  const out = await running;
  await sleep(100);
  assert.equal(out.status, 'completed');
  assert.equal(out.finalText, 'done');
  assert.deepEqual(asked, [], 'hooks were called after the run had gone on without them');
  // A failed beforePersistState lets the save happen.
  const state = JSON.parse(await agent.stateJson('s'));
  assert.equal(state.status, 'completed');
});

test('a cancelled run still calls onRunEnd (and onRunStart when cancelled before it started), without waiting for it', async () => {
  for (const when of ['before the run', 'during the tool', 'during the model request']) {
    const agent = new Agent({
      provider: 'scripted',
      scriptJson: JSON.stringify([{ tool_calls: [{ id: 'c1', name: 'slow', arguments: '{}' }] }, { content: 'done' }]),
    });
    const handle = new CancellationHandle();
    agent.registerTool({ name: 'slow', description: 'slow', parametersJson: objectSchema }, async () => {
      await sleep(300);
      return { contents: [{ type: 'text', text: 'late' }] };
    });
    const calls = [];
    let ended;
    const endedSeen = new Promise((resolve) => {
      ended = resolve;
    });
    agent.addHook({
      onRunStart: () => {
        calls.push('onRunStart');
      },
      beforeModelCall: () => {
        calls.push('beforeModelCall');
        if (when === 'during the model request') handle.cancel('stop');
      },
      // A Promise that never settles: the cancelled run does not wait for it.
      onRunEnd: (_ctx, status) => {
        calls.push(`onRunEnd:${status}`);
        ended();
        return new Promise(() => {});
      },
    });
    if (when === 'before the run') handle.cancel('stop');
    if (when === 'during the tool') setTimeout(() => handle.cancel('stop'), 50);
    const out = await agent.run('s', 'go', handle);
    assert.equal(out.status, 'cancelled', when);
    await Promise.race([endedSeen, sleep(2000)]);
    const expected =
      when === 'before the run' ? ['onRunStart', 'onRunEnd:cancelled'] : ['onRunStart', 'beforeModelCall', 'onRunEnd:cancelled'];
    assert.deepEqual(calls, expected, when);
  }
});

test('all nine methods in order, each with the context (session, run, round) and its arguments', async () => {
  const log = [];
  const agent = new Agent({
    provider: 'scripted',
    scriptJson: JSON.stringify([{ tool_calls: [{ id: 'd1', name: 'wipe', arguments: '{}' }] }, { content: 'wiped' }]),
    apiKey: 'sk-hook-secret-1234',
  });
  agent.registerTool({ name: 'wipe', description: 'd', parametersJson: objectSchema, riskLevel: 'dangerous' }, () => ({ contents: [{ type: 'text', text: 'ok' }] }));
  const runIds = new Set();
  const at = (contextJson) => {
    const ctx = JSON.parse(contextJson);
    assert.deepEqual(Object.keys(ctx).sort(), ['round', 'run_id', 'session_id']);
    assert.equal(ctx.session_id, 'n');
    runIds.add(ctx.run_id);
    return ctx.round;
  };
  const texts = [];
  agent.addHook({
    onRunStart: (c) => log.push(['start', at(c)]),
    beforeModelCall: (c, requestJson) => {
      texts.push(requestJson);
      const request = JSON.parse(requestJson);
      log.push(['model', at(c), request.messages.map((m) => m.role).join(','), request.tools.map((t) => t.name).join(',')]);
    },
    afterModelResponse: (c, responseJson) => {
      texts.push(responseJson);
      const response = JSON.parse(responseJson);
      log.push(['response', at(c), response.content, response.tool_calls.map((t) => t.id).join(',')]);
    },
    beforeToolCall: (c, callJson) => { log.push(['before', at(c), JSON.parse(callJson).id]); },
    afterToolCall: (c, callJson, resultJson) => { log.push(['after', at(c), JSON.parse(resultJson).contents[0].text]); },
    onApprovalRequired: (c, batchJson) => log.push(['approval', at(c), JSON.parse(batchJson).items[0].tool_call.name]),
    beforePersistState: (c, stateJson) => {
      texts.push(stateJson);
      const state = JSON.parse(stateJson);
      if (log.at(-1)?.[0] !== 'persist' || log.at(-1)[2] !== state.status) log.push(['persist', at(c), state.status]);
      return 'persist';
    },
    onRunEnd: (c, status, finalText) => log.push(['end', at(c), status, finalText]),
    onError: (c, errorJson) => log.push(['error', at(c), errorJson]),
  });
  const out = await agent.run('n', 'wipe it');
  assert.equal(out.status, 'awaiting_approval');
  const id = JSON.parse(out.batchJson).items[0].approval_id;
  await agent.approve('n', id);
  await agent.resume('n');
  assert.equal(runIds.size, 1, 'resume continues the same run');
  assert.deepEqual(log, [
    ['start', 0],
    ['persist', 0, 'running'],
    ['model', 1, 'user', 'wipe'],
    ['response', 1, null, 'd1'],
    // The assistant message is saved with the frozen batch (group commit: one save, not two).
    ['before', 1, 'd1'],
    ['persist', 1, 'awaiting_approval'],
    ['approval', 1, 'wipe'],
    ['start', 1],
    ['persist', 1, 'running'],
    ['after', 1, 'ok'],
    ['persist', 1, 'running'],
    ['model', 2, 'user,assistant,tool', 'wipe'],
    ['response', 2, 'wiped', ''],
    ['persist', 2, 'completed'],
    ['end', 2, 'completed', 'wiped'],
  ]);
  for (const text of texts) assert.ok(!text.includes('sk-hook-secret'), 'the API key never reaches a hook');

  const failing = new Agent({ provider: 'scripted', scriptJson: '[]' });
  const errors = [];
  failing.addHook({ onError: (c, errorJson) => errors.push([JSON.parse(c).session_id, JSON.parse(errorJson)]) });
  assert.equal((await failing.run('f', 'hi')).status, 'failed');
  assert.equal(errors.length, 1);
  assert.equal(errors[0][0], 'f');
  assert.deepEqual(Object.keys(errors[0][1]).sort(), ['code', 'layer', 'message']);
  assert.deepEqual([errors[0][1].layer, errors[0][1].code], ['provider', 'provider_script_exhausted']);
});

/** The number of state_persisted events and the final state of one scripted tool run with `hook`. */
async function persistedWith(hook) {
  const { agent } = setup({ toolTimeoutMs: 200 });
  let persisted = 0;
  agent.onEvent((eventJson) => {
    if (JSON.parse(eventJson).type === 'state_persisted') persisted += 1;
  });
  if (hook) agent.addHook(hook);
  const out = await agent.run('s', 'go');
  return { out, persisted, state: JSON.parse(await agent.stateJson('s')) };
}

test('beforePersistState: skip leaves out saves of a running state, never a terminal one; failures save', async () => {
  const plain = await persistedWith(null);
  const seen = [];
  const skipped = await persistedWith({
    beforePersistState: (c, stateJson) => {
      seen.push(JSON.parse(stateJson).status);
      return 'skip';
    },
  });
  assert.equal(skipped.out.status, 'completed');
  assert.ok(seen.includes('running') && seen.at(-1) === 'completed', seen.join(','));
  assert.ok(skipped.persisted < plain.persisted, `${skipped.persisted} saves with skip, ${plain.persisted} without`);
  assert.ok(skipped.persisted >= 1, 'the terminal state is saved regardless');
  assert.equal(skipped.state.status, 'completed');
  assert.deepEqual(skipped.state.messages, plain.state.messages, 'the saved conversation is the same');
  const promised = await persistedWith({ beforePersistState: async () => 'persist' });
  assert.equal(promised.persisted, plain.persisted);
  for (const beforePersistState of [() => { throw new Error('bug'); }, () => Promise.reject(new Error('no')),
    () => 42, () => 'later', () => new Promise(() => {})]) {
    const failed = await persistedWith({ beforePersistState });
    assert.equal(failed.out.status, 'completed', String(beforePersistState));
    assert.equal(failed.persisted, plain.persisted, `a failing hook lets every save happen: ${beforePersistState}`);
  }
});

test('addHook refuses a property that is not a function', () => {
  const { agent } = setup();
  const e = throwsWithCode(assert, () => agent.addHook({ beforeToolCall: 'nope' }), 'argument_invalid', 'config');
  assert.match(e.message, /beforeToolCall/);
  agent.addHook({});
});

test('addHook refuses a function spelt like a hook method it is not: it would never be called', async () => {
  const { agent, ran } = setup();
  const deny = () => ({ action: 'deny', reason: 'blocked' });
  class Guard {
    beforeToolcall() { return deny(); } // on the prototype, not enumerable
  }
  class Inherited extends Guard {}
  const cases = [
    [{ beforeToolcall: deny }, 'beforeToolcall', 'beforeToolCall'],
    [{ onerror: () => {} }, 'onerror', 'onError'],
    [{ afterToolCal: () => undefined }, 'afterToolCal', 'afterToolCall'],
    [new Guard(), 'beforeToolcall', 'beforeToolCall'],
    [new Inherited(), 'beforeToolcall', 'beforeToolCall'],
    [{ beforeToolCall: deny, onRunEnds: () => {} }, 'onRunEnds', 'onRunEnd'],
  ];
  for (const [hook, key, meant] of cases) {
    const e = throwsWithCode(assert, () => agent.addHook(hook), 'config_invalid', 'config');
    assert.equal(e.message, `hook method "${key}" is not one a hook has, so it would never be called (did you mean ${meant}?)`);
  }
  // A class instance may carry fields and helpers of its own: only a function near a method's
  // name is refused, and a field (not a function) of such a name is left alone.
  class Audited {
    constructor() { this.log = []; this.beforeToolcall = 'a note, not a method'; }
    record(line) { this.log.push(line); }
    beforeToolCall() { this.record('before'); return deny(); }
  }
  const hook = new Audited();
  agent.addHook(hook);
  assert.equal((await agent.run('s', 'go')).status, 'completed');
  assert.deepEqual([hook.log, ran], [['before'], []], 'the guard ran and denied the call');
});

test('each hook method gets exactly its arguments: strings, and null where a value is absent', async () => {
  const agent = new Agent({
    provider: 'scripted',
    scriptJson: JSON.stringify([{ tool_calls: [{ id: 'u1', name: 'nope', arguments: '{}' }] }, { content: 'ok' }]),
  });
  const shapes = {};
  const record = (name) => function () {
    shapes[name] ??= [...arguments].map((a) => (a === null ? 'null' : typeof a)).join(',');
    return name === 'beforePersistState' ? 'persist' : undefined;
  };
  const methods = ['onRunStart', 'beforeModelCall', 'afterModelResponse', 'beforeToolCall', 'afterToolCall',
    'onApprovalRequired', 'beforePersistState', 'onRunEnd', 'onError'];
  agent.addHook(Object.fromEntries(methods.map((m) => [m, record(m)])));
  const failing = new Agent({ provider: 'scripted', scriptJson: '[]' });
  failing.addHook({ onError: record('onError'), onRunEnd: record('onRunEndFailed') });
  assert.equal((await agent.run('s', 'go')).status, 'completed');
  assert.equal((await failing.run('f', 'go')).status, 'failed');
  assert.deepEqual(shapes, {
    onRunStart: 'string',
    beforeModelCall: 'string,string',
    afterModelResponse: 'string,string',
    beforeToolCall: 'string,string,null', // an unknown tool has no definition
    afterToolCall: 'string,string,string',
    beforePersistState: 'string,string',
    onRunEnd: 'string,string,string',
    onError: 'string,string',
    onRunEndFailed: 'string,string,null', // no final text
  });
});

// The child: `note` runs c1 then c2, one at a time; the hook stops on c1 and injects a reminder.
// The process prints once c2 runs (c1's finished record saved with c2's start) and waits to be killed.
const stopThenKilled = String.raw`
const m = { exports: {} };
process.dlopen(m, process.env.ARKAGENT_SO);
const { Agent } = m.exports;
const calls = [{ id: 'c1', name: 'note', arguments: '{}' }, { id: 'c2', name: 'note', arguments: '{}' }];
const agent = new Agent({ provider: 'scripted', scriptJson: JSON.stringify([{ tool_calls: calls }]), stateDir: process.argv[1], maxParallelTools: 1 });
agent.registerTool({ name: 'note', description: 'd', parametersJson: '{"type":"object"}' }, (args, ctx) => {
  if (ctx.callId === 'c2') {
    console.log('c2 runs');
    return new Promise(() => {});
  }
  return { contents: [{ type: 'text', text: 'noted' }] };
});
agent.addHook({ afterToolCall: (ctx, call) => JSON.parse(call).id === 'c1'
  ? { action: 'stop', injectJson: JSON.stringify([{ role: 'user', content: 'REMINDER from hook' }]) }
  : undefined });
agent.run('s', 'go');
setInterval(() => {}, 1000);
`;

test("afterToolCall's stop and injected messages survive the app being killed later in the batch", async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'arkagent-hooks-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  await runUntilKilled(['-e', stopThenKilled, dir], (out) => out.includes('c2 runs'), 'c2 runs');

  const agent = new Agent({ provider: 'scripted', scriptJson: JSON.stringify([{ content: 'asked again' }]), stateDir: dir });
  agent.registerTool({ name: 'note', description: 'd', parametersJson: objectSchema }, () => ({ contents: [] }));
  const outcome = await agent.resume('s');
  assert.equal(outcome.status, 'completed');
  assert.notEqual(outcome.finalText, 'asked again', 'the stop holds: the model is not asked again');
  const state = JSON.parse(await agent.stateJson('s'));
  assert.deepEqual(
    state.messages.slice(2).map((m) => [m.role, m.tool_call_id ?? m.content]),
    [['tool', 'c1'], ['tool', 'c2'], ['user', 'REMINDER from hook']],
  );
  assert.match(state.messages[3].content, /interrupt/);
});
