// Host tests of the ArkTS approval policy (arkts-bindings/src/main/ets/approval/Policy.ets and
// agent/PolicyAdapter.ets): the result classes and their wire form, DefaultToolApprovalPolicy's rule,
// the adapter that turns a ToolApprovalPolicy into the native policy function, and Agent wiring,
// against the fake native module (fakes/libarkagent.mjs). The same against the real .so is in
// policy_native.test.mjs.
// Run: node --test scripts/arkts-check/policy.test.mjs

import { test, before } from 'node:test';
import assert from 'node:assert/strict';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { transpileTree, importModules } from './transpile.mjs';
import { tempDir } from './tmp.mjs';

const HERE = path.dirname(fileURLToPath(import.meta.url));
const ROOT = path.resolve(HERE, '..', '..');
const ETS = path.join(ROOT, 'arkts-bindings', 'src', 'main', 'ets');
const FAKE = path.join(HERE, 'fakes', 'libarkagent.mjs');

let M; // every export of the transpiled bindings, by name
let Native; // the fake native module

before(async () => {
  const dir = tempDir('arkagent-policy-');
  transpileTree(ETS, dir, { 'libarkagent.so': FAKE });
  M = await importModules(dir, ['json/Json', 'tool/Tool', 'approval/Policy', 'agent/AgentConfig', 'agent/Adapters',
    'agent/PolicyAdapter', 'agent/Agent']);
  Native = await import(pathToFileURL(FAKE).href);
});

// A call and a definition as the Rust core writes them (src/napi/policy.rs sends these texts).
const CALL_JSON = '{"id":"c1","name":"wipe","arguments":"{\\"scope\\":\\"all\\"}"}';
const definitionJson = (risk) => JSON.stringify({
  name: 'wipe', description: 'wipes', parameters: { type: 'object' }, risk_level: risk, idempotent: false, timeout: 5000,
});

test('ApprovalPolicyResult: the three factories, their wire form and back', () => {
  const cases = [
    [M.ApprovalPolicyResult.allow(), { action: 'allow', reason: '' }],
    [M.ApprovalPolicyResult.allow('safe tool'), { action: 'allow', reason: 'safe tool' }],
    [M.ApprovalPolicyResult.deny('off hours'), { action: 'deny', reason: 'off hours' }],
    [M.ApprovalPolicyResult.requireConfirmation('ask'), { action: 'requireConfirmation', reason: 'ask' }],
  ];
  for (const [result, wire] of cases) {
    assert.deepEqual(JSON.parse(result.toJsonString()), wire);
    const back = M.ApprovalPolicyResult.fromJson(M.JsonObject.fromJsonString(result.toJsonString()));
    assert.equal(back.action, result.action);
    assert.equal(back.reason, result.reason);
  }
  assert.equal(M.ApprovalAction.requireConfirmation, 'requireConfirmation');
  assert.equal(M.parseApprovalAction('deny'), M.ApprovalAction.deny);
  for (const bad of ['Allow', 'require_confirmation', '']) {
    assert.throws(() => M.parseApprovalAction(bad), (e) => e instanceof M.JsonError && e.code === 'approval_action_unknown');
  }
  assert.throws(() => M.ApprovalPolicyResult.fromJson(M.JsonObject.fromJsonString('{"reason":"x"}')),
    (e) => e.code === 'approval_action_unknown');
  const noReason = M.ApprovalPolicyResult.fromJson(M.JsonObject.fromJsonString('{"action":"deny"}'));
  assert.equal(noReason.reason, '');
});

test('DefaultToolApprovalPolicy: unknown and safe allow; sensitive and dangerous ask, with the native reasons', () => {
  const policy = new M.DefaultToolApprovalPolicy();
  const call = new M.ToolCall('c1', 'wipe', '{}');
  const def = (risk) => new M.ToolDefinition('wipe', 'd', '{"type":"object"}', risk);
  const got = [undefined, def(M.ToolRiskLevel.safe), def(M.ToolRiskLevel.sensitive), def(M.ToolRiskLevel.dangerous)]
    .map((d) => {
      const r = policy.decide(call, d);
      return [r.action, r.reason];
    });
  assert.deepEqual(got, [
    ['allow', 'unknown tool → registry structured error'],
    ['allow', 'safe tool'],
    // The texts of src/approval/policy.rs (DefaultApprovalPolicy).
    ['requireConfirmation', 'Sensitive tool "wipe" requires confirmation'],
    ['requireConfirmation', 'Dangerous tool "wipe" requires confirmation'],
  ]);
});

test('approvalPolicyFunction hands the policy typed call and definition and answers the result as JSON', () => {
  const seen = [];
  class Recording {
    decide(call, definition) {
      seen.push([call, definition]);
      return definition === undefined ? M.ApprovalPolicyResult.deny('unknown') : M.ApprovalPolicyResult.allow();
    }
  }
  const fn = M.approvalPolicyFunction(new Recording());
  assert.deepEqual(JSON.parse(fn(CALL_JSON, definitionJson('dangerous'))), { action: 'allow', reason: '' });
  assert.deepEqual(JSON.parse(fn(CALL_JSON, null)), { action: 'deny', reason: 'unknown' });
  const [call, definition] = seen[0];
  assert.ok(call instanceof M.ToolCall);
  assert.deepEqual([call.id, call.name, call.argumentsJson], ['c1', 'wipe', '{"scope":"all"}']);
  assert.ok(definition instanceof M.ToolDefinition);
  assert.deepEqual([definition.name, definition.riskLevel, definition.timeoutMs], ['wipe', M.ToolRiskLevel.dangerous, 5000]);
  assert.equal(seen[1][1], undefined);
});

test('approvalPolicyFunction throws on to the native side (which fails closed) and reports to the handler', () => {
  const reported = [];
  const errors = (where, e) => reported.push([where, e.message]);
  const throwing = M.approvalPolicyFunction({ decide() { throw new Error('policy bug'); } }, errors);
  assert.throws(() => throwing(CALL_JSON, null), /policy bug/);
  const async = M.approvalPolicyFunction({ async decide() { return M.ApprovalPolicyResult.allow(); } }, errors);
  assert.throws(() => async(CALL_JSON, null), (e) => /must return an ApprovalPolicyResult \(synchronously, not a Promise\)/.test(e.message)
    && e.code === 'approval_policy_failed' && e.layer === 'runtime');
  const wrong = M.approvalPolicyFunction({ decide() { return 'allow'; } }, errors);
  assert.throws(() => wrong(CALL_JSON, null), (e) => /must return an ApprovalPolicyResult/.test(e.message) && e.code === 'approval_policy_failed');
  const fine = M.approvalPolicyFunction({ decide() { return M.ApprovalPolicyResult.allow(); } }, errors);
  assert.throws(() => fine('not json', null), (e) => e instanceof M.JsonError);
  assert.throws(() => fine('{"id":"c1"}', null), (e) => e.code === 'tool_call_invalid');
  assert.deepEqual(reported.map((r) => r[0]), ['policy', 'policy', 'policy', 'policy', 'policy']);
  assert.match(reported[0][1], /policy bug/);
  // Without a handler the throw still goes to the native side.
  assert.throws(() => M.approvalPolicyFunction({ decide() { throw new Error('x'); } })(CALL_JSON, null), /x/);
});

test('Agent.setApprovalPolicy installs the adapter (with its timeout), undefined restores the default', () => {
  const agent = new M.Agent(M.AgentConfig.scripted('[]'));
  const native = Native.Agent.instances.at(-1);
  assert.equal(native.policy, null);
  const reported = [];
  agent.setErrorHandler((where, e) => reported.push([where, e.message]));
  class OffHours {
    decide(call) {
      if (call.name === 'boom') throw new Error('broken rule');
      return M.ApprovalPolicyResult.deny(`no ${call.name} after 22:00`);
    }
  }
  agent.setApprovalPolicy(new OffHours(), 250);
  assert.equal(typeof native.policy, 'function');
  assert.equal(native.policyTimeoutMs, 250);
  assert.deepEqual(JSON.parse(native.policy(CALL_JSON, definitionJson('safe'))), { action: 'deny', reason: 'no wipe after 22:00' });
  assert.throws(() => native.policy('{"id":"c2","name":"boom","arguments":"{}"}', null), /broken rule/);
  assert.deepEqual(reported, [['policy', 'broken rule']], 'the failure reaches the agent\'s error handler');
  agent.setApprovalPolicy(new M.DefaultToolApprovalPolicy());
  assert.equal(native.policyTimeoutMs, undefined);
  assert.deepEqual(JSON.parse(native.policy(CALL_JSON, definitionJson('dangerous'))),
    { action: 'requireConfirmation', reason: 'Dangerous tool "wipe" requires confirmation' });
  agent.setApprovalPolicy(undefined);
  assert.equal(native.policy, null);
});
