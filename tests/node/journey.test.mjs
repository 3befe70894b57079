// The journey of a developer using the raw native module (index.d.ts only; journey_app.mjs is the
// app): the app runs until a dangerous call needs approval and is then killed with SIGKILL; opened
// again in this process over the same state directory, it shows the conversation, approves, and
// resumes to the end. Killed while a tool runs, it is resumed, or the user just types on. Every
// event the listener got is of a type index.d.ts documents. A Cancel button ends a run whose tool
// waits. Then the mistakes such a developer makes (a policy object instead of a function, a hook
// answering null, a setMetadata not awaited) and what index.d.ts says of each.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { loadModule, readDts, runUntilKilled, throwsWithCode, waitFor } from './helper.mjs';
import { CancellationHandle, conversation, DOCUMENTED_EVENT_TYPES, openApp, renderEvent } from './journey_app.mjs';

const APP = fileURLToPath(new URL('./journey_app.mjs', import.meta.url));

/**
 * Runs the app in a child process (`mode`: approval, until it reports its suspended run; search,
 * until its slow tool runs), then SIGKILLs it. Returns its first line of output.
 */
async function runAndKill(stateDir, mode = 'approval') {
  const { out } = await runUntilKilled([APP, stateDir, mode], (o) => o.includes('\n'), 'the app suspends', {
    env: { JOURNEY_CHILD: '1' },
  });
  return out.split('\n')[0];
}

test('index.d.ts documents exactly the event types the app renders', () => {
  const dts = readDts();
  const listed = /\{"type": ((?:"[a-z_]+" \|\s*(?:\* )?)+"[a-z_]+")/.exec(dts);
  assert.ok(listed, 'the AgentEventListener doc lists the types');
  assert.deepEqual(listed[1].match(/"[a-z_]+"/g).map((t) => JSON.parse(t)), DOCUMENTED_EVENT_TYPES);
});

test('killed while it waits for an approval, the app opens again, approves and finishes', async () => {
  const stateDir = mkdtempSync(join(tmpdir(), 'arkagent-journey-'));
  try {
    const killed = JSON.parse(await runAndKill(stateDir));
    assert.equal(killed.status, 'awaiting_approval');
    assert.ok(killed.lines.every((l) => !l.startsWith('unknown')), killed.lines.join('\n'));
    assert.ok(killed.lines.includes('result lookup_recipe ok {"name":"baguette","servings":2}'), 'the hook rewrote the lookup');
    const asked = killed.lines.at(-1);
    assert.match(asked, /^approve\? delete_recipe [0-9a-f-]{36}$/);

    // Opened again: the conversation and the pending batch come from the state directory.
    const lines = [];
    const done = [];
    const agent = openApp(stateDir, [{ content: 'The bagel is gone.' }], lines, done);
    assert.equal(JSON.parse(await agent.stateJson('kitchen')).status, 'awaiting_approval');
    assert.deepEqual(await conversation(agent, 'kitchen'), [
      'user: Delete the bagel and show me the baguette',
      'assistant:  [lookup_recipe{"name":"  Baguette "}]',
      'lookup_recipe ok: {"name":"baguette","servings":2}',
      'assistant: Deleting the bagel. [delete_recipe{"name":" BAGEL ","reason":"duplicate"}]',
    ]);
    const batch = JSON.parse(await agent.pendingApprovalJson('kitchen'));
    assert.deepEqual(batch.items.map((i) => [i.tool_call.name, i.tool_call.arguments, i.risk_level, i.decision]),
      [['delete_recipe', '{"name":"bagel","reason":"duplicate"}', 'dangerous', 'pending']]);
    assert.equal(asked.split(' ').at(-1), batch.items[0].approval_id, 'the id the killed app showed still decides');
    await agent.approve('kitchen', batch.items[0].approval_id);
    const outcome = await agent.resume('kitchen');
    assert.equal(outcome.status, 'completed');
    assert.equal(outcome.finalText, 'The bagel is gone.');
    assert.deepEqual(done, ['delete {"name":"bagel","reason":"duplicate"} in kitchen']);
    assert.equal(lines[0], 'run started (resumed) kitchen');
    assert.equal(lines.at(-1), 'finished completed');
    assert.ok(lines.includes('result delete_recipe ok deleted bagel'));
    assert.equal(await agent.pendingApprovalJson('kitchen'), null);
    assert.deepEqual((await conversation(agent, 'kitchen')).slice(4),
      ['delete_recipe ok: deleted bagel', 'assistant: The bagel is gone.']);
  } finally {
    rmSync(stateDir, { recursive: true, force: true });
  }
});

test('the Cancel button: a run whose tool waits ends cancelled, the tool hears it, the history stays valid', async () => {
  const lines = [];
  const agent = openApp(undefined, [{ tool_calls: [{ id: 'w1', name: 'wait', arguments: '{}' }] }, { content: 'never' }], lines);
  const heard = [];
  let started = false;
  agent.registerTool({ name: 'wait', description: 'Waits', parametersJson: '{"type":"object"}' },
    (_args, context) => new Promise((resolve) => {
      started = true;
      context.signal.onCancel((reason) => {
        heard.push(reason);
        resolve({ contents: [{ type: 'text', text: 'stopped' }] });
      });
    }));
  const button = new CancellationHandle();
  const running = agent.run('s', 'wait for it', button);
  // The call's events come as the answer streams, before the tool runs: wait for the tool itself.
  await waitFor(() => started, 'the tool to run');
  assert.ok(lines.some((l) => l.startsWith('called wait')));
  button.cancel('user tapped cancel');
  const outcome = await running;
  assert.equal(outcome.status, 'cancelled');
  assert.equal(lines.at(-1), 'finished cancelled');
  await waitFor(() => heard.length === 1, 'the tool to hear the cancel');
  assert.deepEqual(heard, ['user tapped cancel']);
  const shown = await conversation(agent, 's');
  assert.match(shown.at(-1), /^wait error: error \[tool_interrupted\]/);
  assert.equal(renderEvent('{"type":"something_new","run_id":"r"}'), 'unknown something_new');
});

test('mistakes of a developer on the raw module: a policy object, a hook method that is not a function, are argument_invalid', () => {
  const agent = openApp(undefined, []);
  // index.d.ts: "a string where a function is expected ... is refused ... with code argument_invalid".
  const cases = [
    [() => agent.setApprovalPolicy({ decide: () => 'allow' }), /policy must be a function or null, not Object/],
    [() => agent.setApprovalPolicy('allow'), /policy must be a function or null, not String/],
    [() => agent.addHook({ beforeToolCall: 'proceed' }), /hook property beforeToolCall must be a function, not String/],
    [() => agent.addHook({ onRunEnd: { call() {} } }), /hook property onRunEnd must be a function, not Object/],
    [() => agent.registerTool({ name: 'x', description: 'd', parametersJson: '{"type":"object"}' }, { execute() {} }),
      /expected a function, got an object/],
  ];
  for (const [call, message] of cases) {
    const e = throwsWithCode(assert, call, 'argument_invalid', 'config');
    assert.match(e.message, /^wrong argument: /);
    assert.match(e.message, message);
  }
  assert.deepEqual(agent.toolNames(), ['lookup_recipe', 'delete_recipe', 'slow_search'], 'nothing was registered');
});

test('a hook whose methods return nothing changes nothing: the call runs as the model wrote it, the state is saved', async () => {
  const lines = [];
  const done = [];
  const agent = openApp(undefined, [
    { tool_calls: [{ id: 'c1', name: 'lookup_recipe', arguments: '{"name":"bagel","servings":3}' }] },
    { content: 'ok' },
  ], lines, done);
  const seen = [];
  agent.addHook({
    beforeToolCall: (_c, callJson) => { seen.push(JSON.parse(callJson).arguments); },
    afterToolCall: async () => undefined,
    beforePersistState: () => undefined,
  });
  const outcome = await agent.run('s', 'bagel for 3');
  assert.equal(outcome.status, 'completed');
  // The first hook (the app's) rewrote nothing here; the second saw that call and returned nothing.
  assert.deepEqual(seen, ['{"name":"bagel","servings":3}']);
  assert.deepEqual(done, ['lookup {"name":"bagel","servings":3}']);
  assert.ok(lines.includes('result lookup_recipe ok {"name":"bagel","servings":3}'));
  assert.ok(lines.some((l) => l.startsWith('saved ')));
  assert.equal(JSON.parse(await agent.stateJson('s')).status, 'completed');
});

test('streaming: false, as index.d.ts says: no delta or tool_call_* events, the text whole in run_finished', async () => {
  const { Agent } = loadModule();
  const agent = new Agent({ provider: 'scripted', streaming: false,
    scriptJson: JSON.stringify([{ tool_calls: [{ id: 'c1', name: 't', arguments: '{}' }] }, { content: 'All done.' }]) });
  agent.registerTool({ name: 't', description: 'd', parametersJson: '{"type":"object"}' },
    () => ({ contents: [{ type: 'text', text: 'ok' }] }));
  const events = [];
  agent.onEvent((json) => events.push(JSON.parse(json)));
  const outcome = await agent.run('s', 'go');
  assert.equal(outcome.finalText, 'All done.');
  const types = new Set(events.map((e) => e.type));
  assert.deepEqual([...types].sort(), ['run_finished', 'run_started', 'state_persisted', 'tool_result']);
  assert.equal(events.at(-1).final_text, 'All done.');
});

test('killed while a tool runs, the app opens again: the state says running, resume answers the call and finishes', async () => {
  const stateDir = mkdtempSync(join(tmpdir(), 'arkagent-journey-'));
  try {
    assert.equal(await runAndKill(stateDir, 'search'), 'SEARCHING');
    const lines = [];
    const done = [];
    const agent = openApp(stateDir, [{ content: 'The search was cut short; ask again?' }], lines, done);
    assert.equal(JSON.parse(await agent.stateJson('pantry')).status, 'running', 'what a UI reads to offer Continue');
    assert.equal(await agent.pendingApprovalJson('pantry'), null);
    const outcome = await agent.resume('pantry');
    assert.equal(outcome.status, 'completed');
    assert.deepEqual(done, [], 'the interrupted call is not run again');
    const shown = await conversation(agent, 'pantry');
    assert.match(shown[2], /^slow_search error: error \[tool_interrupted\]: the call to `slow_search` was interrupted while it ran/);
    assert.equal(shown.at(-1), 'assistant: The search was cut short; ask again?');
  } finally {
    rmSync(stateDir, { recursive: true, force: true });
  }
});

test('killed while a tool runs, the app opens again and the user just types: the call is answered, the message goes on', async () => {
  const stateDir = mkdtempSync(join(tmpdir(), 'arkagent-journey-'));
  try {
    assert.equal(await runAndKill(stateDir, 'search'), 'SEARCHING');
    const agent = openApp(stateDir, [{ content: 'Hello again.' }]);
    const outcome = await agent.run('pantry', 'hello?');
    assert.equal(outcome.status, 'completed');
    const shown = await conversation(agent, 'pantry');
    assert.deepEqual(shown.map((l) => l.split(':')[0]), ['user', 'assistant', 'slow_search error', 'user', 'assistant']);
    assert.match(shown[2], /tool_interrupted/);
    assert.deepEqual(shown.slice(3), ['user: hello?', 'assistant: Hello again.']);
    await assert.rejects(agent.resume('pantry'), (e) => e.code === 'invalid_state' && e.layer === 'runtime');
  } finally {
    rmSync(stateDir, { recursive: true, force: true });
  }
});

test('a hook answering null is not nothing: beforeToolCall fails closed (hook_failed, the call does not run), afterToolCall ends the run', async () => {
  const outcomes = [];
  for (const hook of [{ beforeToolCall: () => null }, { afterToolCall: () => null }]) {
    const done = [];
    const agent = openApp(undefined, [{ tool_calls: [{ id: 'c1', name: 'delete_recipe', arguments: '{"name":"x","reason":"obsolete"}' }] },
      { content: 'ok' }], [], done);
    agent.setApprovalPolicy(() => 'allow');
    agent.addHook(hook);
    const outcome = await agent.run('s', 'go');
    const tool = JSON.parse(await agent.stateJson('s')).messages.find((m) => m.role === 'tool');
    outcomes.push([outcome.status, outcome.errorCode ?? null, done.length, /^error \[hook_failed\]/.test(tool.content)]);
  }
  assert.deepEqual(outcomes, [['completed', null, 0, true], ['aborted', 'hook_failed', 1, true]]);
});

test('forgetting to await setMetadata before run: the run still waits for it and its tools see the value', async () => {
  const { Agent } = loadModule();
  const seen = [];
  for (let i = 0; i < 20; i++) {
    const stateDir = i % 2 === 0 ? undefined : mkdtempSync(join(tmpdir(), 'arkagent-journey-meta-'));
    const agent = new Agent({ provider: 'scripted', stateDir,
      scriptJson: JSON.stringify([{ tool_calls: [{ id: 'c1', name: 'whoami', arguments: '{}' }] }, { content: 'ok' }]) });
    agent.registerTool({ name: 'whoami', description: 'd', parametersJson: '{"type":"object"}' }, (_a, context) => {
      seen.push(JSON.parse(context.metadataJson).userId ?? null);
      return { contents: [{ type: 'text', text: 'ok' }] };
    });
    const setting = agent.setMetadata('s', 'userId', `"u-${i}"`); // not awaited: the mistake
    const outcome = await agent.run('s', 'who am I?');
    await setting;
    assert.equal(outcome.status, 'completed');
    if (stateDir !== undefined) rmSync(stateDir, { recursive: true, force: true });
  }
  assert.deepEqual(seen, Array.from({ length: 20 }, (_, i) => `u-${i}`));
});
