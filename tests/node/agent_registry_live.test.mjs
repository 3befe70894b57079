// The registry changes while a batch runs: an executor, a hook or the approval policy unregisters
// the tool of a call not run yet, or registers it anew as dangerous. Each call is gated by the
// registry as it is when it reaches its gate: a tool gone by then is answered tool_not_found, one
// registered anew is not run (neither its old executor nor the new, unchecked one), and a tool
// registered anew before the batch began is checked as it is (a dangerous one asks for approval).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { loadModule, objectSchema, text } from './helper.mjs';

const { Agent } = loadModule();

function agentAnswering(answers, options = {}) {
  return new Agent({ provider: 'scripted', maxParallelTools: 1, scriptJson: JSON.stringify(answers), ...options });
}

async function toolAnswers(agent) {
  return JSON.parse(await agent.stateJson('s')).messages.filter((m) => m.role === 'tool').map((m) => m.content);
}

/** Registers `pay` (safe) whose executor logs `old pay`, and returns a swap for a dangerous one. */
function withPay(agent, ran) {
  agent.registerTool({ name: 'pay', description: 'pays', parametersJson: objectSchema }, () => { ran.push('old pay'); return text('paid'); });
  return () => {
    assert.equal(agent.unregisterTool('pay'), true);
    agent.registerTool({ name: 'pay', description: 'pays', parametersJson: objectSchema, riskLevel: 'dangerous' }, () => { ran.push('new pay'); return text('paid'); });
  };
}

test('an executor that unregisters a later call\'s tool stops that call: tool_not_found, not run', async () => {
  const agent = agentAnswering([{ tool_calls: [{ id: 'c1', name: 'logout', arguments: '{}' }, { id: 'c2', name: 'transfer', arguments: '{}' }] }, { content: 'done' }]);
  const ran = [];
  agent.registerTool({ name: 'logout', description: 'logs out', parametersJson: objectSchema }, () => {
    ran.push('logout');
    agent.unregisterTool('transfer');
    return text('logged out');
  });
  agent.registerTool({ name: 'transfer', description: 'moves money', parametersJson: objectSchema }, () => { ran.push('transfer'); return text('moved'); });
  assert.equal((await agent.run('s', 'go')).status, 'completed');
  assert.deepEqual(ran, ['logout']);
  const answers = await toolAnswers(agent);
  assert.match(answers[1], /^error \[tool_not_found\]: Tool not found: transfer \(it was unregistered/);
});

test('a tool a beforeToolCall hook swaps for a dangerous one runs neither executor', async () => {
  const agent = agentAnswering([{ tool_calls: [{ id: 'c1', name: 'pay', arguments: '{}' }] }, { content: 'done' }]);
  const ran = [];
  const swap = withPay(agent, ran);
  agent.addHook({ beforeToolCall: () => swap() });
  assert.equal((await agent.run('s', 'go')).status, 'completed');
  assert.deepEqual(ran, []);
  assert.match((await toolAnswers(agent))[0], /^error \[tool_not_run\]: not run: pay was registered anew/);
});

test('a tool an afterModelResponse hook swaps for a dangerous one is asked about', async () => {
  const agent = agentAnswering([{ tool_calls: [{ id: 'c1', name: 'pay', arguments: '{}' }] }, { content: 'done' }]);
  const ran = [];
  const swap = withPay(agent, ran);
  agent.addHook({ afterModelResponse: () => swap() });
  const out = await agent.run('s', 'go');
  assert.equal(out.status, 'awaiting_approval');
  assert.deepEqual(ran, []);
});

test('a call whose tool the approval policy unregistered before allowing it is not run', async () => {
  const agent = agentAnswering([{ tool_calls: [{ id: 'c1', name: 'pay', arguments: '{}' }] }, { content: 'done' }]);
  const ran = [];
  withPay(agent, ran);
  agent.setApprovalPolicy(() => { agent.unregisterTool('pay'); return 'allow'; }, 1000);
  assert.equal((await agent.run('s', 'go')).status, 'completed');
  assert.deepEqual(ran, []);
  assert.match((await toolAnswers(agent))[0], /^error \[tool_not_found\]/);
});
