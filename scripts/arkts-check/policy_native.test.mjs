// ArkTS approval policies through the ArkTS Agent wrapper against the REAL native module (the cdylib
// built with the `napi` feature; scripts/test.sh sets ARKAGENT_SO, else tests/node/helper.mjs builds
// it): a ToolApprovalPolicy class allows a dangerous tool and denies a safe one, asks about what it
// wants asked, DefaultToolApprovalPolicy decides exactly as the native default does, and a policy that
// throws or answers a Promise fails closed (the call needs confirmation, the app's error handler hears
// of it).
// Run: node --test scripts/arkts-check/policy_native.test.mjs

import { test, before } from 'node:test';
import assert from 'node:assert/strict';
import { realBindings } from './real_bindings.mjs';

let B; // the bindings, importing the real module as 'libarkagent.so'

before(async () => {
  ({ bindings: B } = await realBindings('arkagent-policy-native-'));
});

const call = (id, name) => ({ id, name, arguments: '{}' });

/**
 * The ArkTS Agent on a scripted model that makes `calls` (one batch) and then answers "done", with a
 * safe `read`, a sensitive `notify` and a dangerous `wipe`; `ran` records executions.
 */
function setup(calls) {
  const agent = new B.Agent(B.AgentConfig.scripted(JSON.stringify([{ tool_calls: calls }, { content: 'done' }])));
  const ran = [];
  class Runs {
    constructor(name) { this.name = name; }
    async execute() {
      ran.push(this.name);
      return B.ToolResult.text(`${this.name} ran`);
    }
  }
  for (const [name, risk] of [['read', B.ToolRiskLevel.safe], ['notify', B.ToolRiskLevel.sensitive],
    ['wipe', B.ToolRiskLevel.dangerous]]) {
    agent.registerTool(new B.ToolDefinition(name, `the ${name} tool`, '{"type":"object"}', risk), new Runs(name));
  }
  const errors = [];
  agent.setErrorHandler((where, e) => errors.push(`${where}: ${e.message}`));
  return { agent, ran, errors };
}

async function toolTexts(agent) {
  const state = await agent.state('s');
  return state.getArray('messages').map((m) => m.asObject()).filter((m) => m.getString('role') === 'tool')
    .map((m) => `${m.getString('tool_call_id')}: ${m.getString('content')}`);
}

test('an ArkTS policy allows a dangerous tool and denies a safe one; the model gets the denial', async () => {
  const { agent, ran, errors } = setup([call('w1', 'wipe'), call('r1', 'read')]);
  const seen = [];
  class Inverted {
    decide(c, definition) {
      seen.push([c.name, definition?.riskLevel]);
      return definition?.riskLevel === B.ToolRiskLevel.safe ? B.ApprovalPolicyResult.deny('reading is off today')
        : B.ApprovalPolicyResult.allow();
    }
  }
  agent.setApprovalPolicy(new Inverted());
  const out = await agent.run('s', 'go');
  assert.equal(out.status, 'completed');
  assert.deepEqual(seen, [['wipe', 'dangerous'], ['read', 'safe']]);
  assert.deepEqual(ran, ['wipe']);
  const texts = await toolTexts(agent);
  assert.equal(texts[0], 'w1: wipe ran');
  assert.match(texts[1], /^r1: .*denied by policy: reading is off today/);
  assert.deepEqual(errors, []);
});

test('an ArkTS policy that requires confirmation: the batch freezes with its reason; approve and resume', async () => {
  const { agent, ran } = setup([call('r1', 'read')]);
  class AskAll {
    decide(c) { return B.ApprovalPolicyResult.requireConfirmation(`please confirm ${c.name}`); }
  }
  agent.setApprovalPolicy(new AskAll());
  const out = await agent.run('s', 'go');
  assert.equal(out.status, 'awaiting_approval');
  const items = out.batch.pendingItems();
  assert.deepEqual(items.map((i) => [i.toolCall.name, i.reason, i.riskLevel]), [['read', 'please confirm read', 'safe']]);
  assert.deepEqual(ran, []);
  await agent.approve('s', items[0].approvalId);
  assert.equal((await agent.resume('s')).status, 'completed');
  assert.deepEqual(ran, ['read']);
});

test('DefaultToolApprovalPolicy through the adapter decides exactly as the native default', async () => {
  const calls = [call('r1', 'read'), call('n1', 'notify'), call('w1', 'wipe'), call('u1', 'unknown_tool')];
  const outcomes = [];
  for (const withPolicy of [false, true]) {
    const { agent, ran, errors } = setup(calls);
    if (withPolicy) agent.setApprovalPolicy(new B.DefaultToolApprovalPolicy());
    const out = await agent.run('s', 'go');
    outcomes.push({
      status: out.status,
      items: out.batch.items.map((i) => [i.toolCall.id, i.reason, i.riskLevel]),
      ran: ran.slice(),
      errors,
    });
  }
  assert.deepEqual(outcomes[1], outcomes[0]);
  assert.deepEqual(outcomes[0].items, [
    ['n1', 'Sensitive tool "notify" requires confirmation', 'sensitive'],
    ['w1', 'Dangerous tool "wipe" requires confirmation', 'dangerous'],
  ]);
});

test('an ArkTS policy that throws or answers a Promise fails closed; the error handler hears of it', async () => {
  class Throws {
    decide() { throw new Error('rule table missing'); }
  }
  class Async {
    async decide() { return B.ApprovalPolicyResult.allow(); }
  }
  for (const [policy, message] of [[new Throws(), /rule table missing/], [new Async(), /not a Promise/]]) {
    const { agent, ran, errors } = setup([call('r1', 'read')]);
    agent.setApprovalPolicy(policy);
    const out = await agent.run('s', 'go');
    assert.equal(out.status, 'awaiting_approval');
    const [item] = out.batch.pendingItems();
    assert.match(item.reason, /^approval_policy_failed: the policy threw: /);
    assert.match(item.reason, message);
    assert.deepEqual(ran, [], 'a safe call the default would allow never runs unasked');
    assert.equal(errors.length, 1);
    assert.match(errors[0], /^policy: /);
    assert.match(errors[0], message);
  }
});

test('undefined restores the native default; a bad timeout is the native config_invalid', async () => {
  const { agent, ran } = setup([call('w1', 'wipe')]);
  class AllowAll {
    decide() { return B.ApprovalPolicyResult.allow(); }
  }
  agent.setApprovalPolicy(new AllowAll());
  agent.setApprovalPolicy(undefined);
  const out = await agent.run('s', 'go');
  assert.equal(out.status, 'awaiting_approval');
  assert.deepEqual(ran, []);
  assert.throws(() => agent.setApprovalPolicy(new AllowAll(), 0), (e) => e.code === 'config_invalid' && e.layer === 'config');
});
