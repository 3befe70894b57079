// Agent hooks (AgentHookObject): beforeToolCall rewrites, denies, defers and aborts, sync and as a
// Promise; afterToolCall rewrites, injects and stops; notifications in order; failures contained.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { loadModule, objectSchema, throwsWithCode } from './helper.mjs';

const { Agent } = loadModule();

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
      beforeToolCall(callJson, definitionJson) {
        seen.push([JSON.parse(callJson), JSON.parse(definitionJson).name]);
        return answer({ action: 'proceed', argumentsJson: '{"n":41}' });
      },
    });
    const out = await agent.run('s', 'go');
    assert.equal(out.status, 'completed');
    assert.deepEqual(ran, [41]);
    assert.deepEqual(seen, [[{ id: 'c1', name: 'add', arguments: '{"n":1}' }, 'add']]);
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
    assert.equal(tool.content, 'not today');
  });

  test(`beforeToolCall (${mode}) aborts: the run ends aborted with hook_aborted`, async () => {
    const { agent, ran } = setup();
    const ends = [];
    agent.addHook({
      beforeToolCall: () => answer({ action: 'abort', reason: 'policy says no' }),
      onRunEnd: (status, finalText) => ends.push([status, finalText]),
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
  agent.addHook({ beforeToolCall: (c) => ({ action: 'proceed', argumentsJson: JSON.stringify({ n: JSON.parse(JSON.parse(c).arguments).n * 10 }) }) });
  agent.addHook({ beforeToolCall: async (c) => ({ action: 'proceed', argumentsJson: JSON.stringify({ n: JSON.parse(JSON.parse(c).arguments).n + 5 }) }) });
  await agent.run('s', 'go');
  assert.deepEqual(ran, [15]);
});

test('afterToolCall rewrites the result and injects a message', async () => {
  const { agent } = setup();
  const results = [];
  agent.addHook({
    afterToolCall: async (callJson, resultJson) => {
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
    agent.addHook({ beforeToolCall });
    const out = await agent.run('s', 'go');
    assert.equal(out.status, 'completed', String(beforeToolCall));
    assert.deepEqual(ran, [], String(beforeToolCall));
    const tool = await toolMessage(agent);
    assert.equal(tool.is_error, true);
    assert.match(tool.content, /hook_failed|hook/, tool.content);
  }
});

test('a failing afterToolCall or notification keeps the run going with the result unchanged', async () => {
  const { agent, ran } = setup({ toolTimeoutMs: 200 });
  agent.addHook({
    afterToolCall: () => Promise.reject(new Error('nope')),
    onRunStart: () => {
      throw new Error('start bug');
    },
    onRunEnd: () => new Promise(() => {}),
  });
  const out = await agent.run('s', 'go');
  assert.equal(out.status, 'completed');
  assert.deepEqual(ran, [1]);
  assert.equal((await toolMessage(agent)).content, '2');
});

test('notifications: onRunStart, onApprovalRequired, onRunEnd, onError in order with their arguments', async () => {
  const log = [];
  const agent = new Agent({
    provider: 'scripted',
    scriptJson: JSON.stringify([{ tool_calls: [{ id: 'd1', name: 'wipe', arguments: '{}' }] }, { content: 'wiped' }]),
  });
  agent.registerTool({ name: 'wipe', description: 'd', parametersJson: objectSchema, riskLevel: 'dangerous' }, () => ({ contents: [{ type: 'text', text: 'ok' }] }));
  agent.addHook({
    onRunStart: (sessionId, runId) => log.push(['start', sessionId, typeof runId === 'string' && runId.length > 0]),
    onApprovalRequired: (batchJson) => log.push(['approval', JSON.parse(batchJson).items[0].tool_call.name]),
    onRunEnd: (status, finalText) => log.push(['end', status, finalText]),
    onError: (code) => log.push(['error', code]),
  });
  const out = await agent.run('n', 'wipe it');
  assert.equal(out.status, 'awaiting_approval');
  const id = JSON.parse(out.batchJson).items[0].approval_id;
  await agent.approve('n', id);
  await agent.resume('n');
  assert.deepEqual(log, [
    ['start', 'n', true],
    ['approval', 'wipe'],
    ['start', 'n', true],
    ['end', 'completed', 'wiped'],
  ]);

  const failing = new Agent({ provider: 'scripted', scriptJson: '[]' });
  const errors = [];
  failing.addHook({ onError: (code, message) => errors.push([code, message.length > 0]) });
  assert.equal((await failing.run('f', 'hi')).status, 'failed');
  assert.deepEqual(errors, [['provider_script_exhausted', true]]);
});

test('addHook refuses a property that is not a function', () => {
  const { agent } = setup();
  const e = throwsWithCode(assert, () => agent.addHook({ beforeToolCall: 'nope' }), 'config_invalid', 'config');
  assert.match(e.message, /beforeToolCall/);
  agent.addHook({});
});
