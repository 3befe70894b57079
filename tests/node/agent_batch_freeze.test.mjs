// The seed's whole-batch freeze (arkagent-tool-system.md 7.5) through the real module: the model
// answers [A: safe, B: dangerous, C: safe]. Nothing of the batch runs before the user decides, not
// even the safe calls; approving B runs A, B and C, answered in call order; denying B answers B
// with the denial and A and C with "not run", and none of them ever runs.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { loadModule, objectSchema } from './helper.mjs';

const { Agent } = loadModule();

const batch = {
  tool_calls: [
    { id: 'a', name: 'read_a', arguments: '{}' },
    { id: 'b', name: 'wipe', arguments: '{"scope":"all"}' },
    { id: 'c', name: 'read_c', arguments: '{}' },
  ],
};

/** An agent replaying `answers`, whose three tools record their runs in `runs`. */
function open(answers, runs) {
  const agent = new Agent({ provider: 'scripted', scriptJson: JSON.stringify(answers) });
  for (const [name, riskLevel] of [['read_a', 'safe'], ['wipe', 'dangerous'], ['read_c', 'safe']]) {
    agent.registerTool({ name, description: name, parametersJson: objectSchema, riskLevel }, () => {
      runs.push(name);
      return { contents: [{ type: 'text', text: `${name} ran` }] };
    });
  }
  return agent;
}

/** Runs into the freeze; returns the only pending item. */
async function frozen(agent, runs) {
  const out = await agent.run('s', 'read, wipe, read');
  assert.equal(out.status, 'awaiting_approval');
  const pending = JSON.parse(out.batchJson);
  assert.deepEqual(pending.items.map((i) => [i.tool_call.id, i.risk_level]), [['b', 'dangerous']],
    'only the dangerous call asks');
  assert.deepEqual(runs, [], 'no call of the batch runs before the decision, the safe ones included');
  return pending.items[0];
}

/** The tool messages of the session: [call id, content, is_error]. */
async function results(agent) {
  const state = JSON.parse(await agent.stateJson('s'));
  return state.messages.filter((m) => m.role === 'tool').map((m) => [m.tool_call_id, m.content, m.is_error ?? false]);
}

test('approving the dangerous call runs the whole batch, answered in call order', async () => {
  const runs = [];
  const agent = open([batch, { content: 'done' }], runs);
  const item = await frozen(agent, runs);
  const decided = JSON.parse(await agent.approve('s', item.approval_id)).items[0];
  assert.equal(decided.decision, 'approved');
  assert.ok(Number.isInteger(decided.decided_at_ms) && decided.decided_at_ms >= item.created_at_ms,
    `decided_at_ms ${decided.decided_at_ms}, created_at_ms ${item.created_at_ms}`);
  assert.deepEqual(runs, [], 'approving runs nothing by itself');
  const out = await agent.resume('s');
  assert.equal(out.status, 'completed');
  assert.equal(out.finalText, 'done');
  assert.deepEqual([...runs].sort(), ['read_a', 'read_c', 'wipe'], 'each call ran once');
  assert.deepEqual(await results(agent), [
    ['a', 'read_a ran', false],
    ['b', 'wipe ran', false],
    ['c', 'read_c ran', false],
  ]);
});

test('denying the dangerous call runs nothing: B gets the denial, A and C are not run', async () => {
  const runs = [];
  const agent = open([batch, { content: 'nothing was wiped' }], runs);
  const item = await frozen(agent, runs);
  const decided = JSON.parse(await agent.deny('s', item.approval_id, 'keep my data')).items[0];
  assert.deepEqual([decided.decision, decided.deny_reason], ['denied', 'keep my data']);
  assert.ok(Number.isInteger(decided.decided_at_ms) && decided.decided_at_ms >= item.created_at_ms);
  const codes = {};
  agent.onEvent((e) => {
    const event = JSON.parse(e);
    if (event.type === 'tool_result') {
      codes[event.call_id] = [event.result.is_error, event.result.metadata?.code];
    }
  });
  const out = await agent.resume('s');
  assert.equal(out.status, 'completed', 'the model is asked again and answers');
  assert.equal(out.finalText, 'nothing was wiped');
  assert.deepEqual(runs, []);
  const answered = await results(agent);
  assert.deepEqual(answered.map(([id, , isError]) => [id, isError]), [['a', true], ['b', true], ['c', true]]);
  assert.equal(answered[1][1], 'error: denied by user: keep my data');
  assert.match(answered[0][1], /^error: not run: /);
  assert.match(answered[2][1], /^error: not run: /);
  assert.deepEqual(codes, { a: [true, 'tool_not_run'], b: [true, 'tool_denied'], c: [true, 'tool_not_run'] });
});
