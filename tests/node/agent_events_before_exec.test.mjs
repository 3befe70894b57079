// The listener hears the events a batch emitted before its executors are called: the answer's
// (tool_call_finished) and the state_persisted of the calls' `started` records. Events and
// executor calls reach the JS thread through different thread-safe functions, so without the
// batch waiting for the listener to be handed those events, the JS thread could call the
// executor first (every time here: the tool is registered before the listener, and the listener
// is slow on tool_call_finished), and a listener that cancels on tool_call_finished was too late.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { busy, loadModule, objectSchema, text } from './helper.mjs';

const { Agent, CancellationHandle } = loadModule();

function toolAgent(calls) {
  const answers = [{ tool_calls: calls.map((id) => ({ id, name: 'act', arguments: '{}' })) }, { content: 'done' }];
  return new Agent({ provider: 'scripted', scriptJson: JSON.stringify(answers) });
}

test('the executor is called after the listener heard the batch\'s started records saved', async () => {
  for (let round = 0; round < 5; round += 1) {
    const agent = toolAgent(['c1']);
    const log = [];
    agent.registerTool({ name: 'act', description: 'd', parametersJson: objectSchema }, () => {
      log.push('EXECUTOR');
      return text('ok');
    });
    agent.onEvent((e) => {
      const { type } = JSON.parse(e);
      log.push(type);
      if (type === 'tool_call_finished') busy(50);
    });
    const out = await agent.run('s', 'go');
    assert.equal(out.status, 'completed');
    const finished = log.indexOf('tool_call_finished');
    const executor = log.indexOf('EXECUTOR');
    assert.ok(finished >= 0 && executor > finished, `round ${round}: ${log.join(' ')}`);
    assert.equal(log[executor - 1], 'state_persisted', `round ${round}: ${log.join(' ')}`);
  }
});

test('a listener that cancels on tool_call_finished: no executor runs', async () => {
  for (let round = 0; round < 5; round += 1) {
    const agent = toolAgent(['c1', 'c2']);
    let ran = 0;
    agent.registerTool({ name: 'act', description: 'd', parametersJson: objectSchema }, () => {
      ran += 1;
      return text('did it');
    });
    const handle = new CancellationHandle();
    agent.onEvent((e) => {
      if (JSON.parse(e).type === 'tool_call_finished' && !handle.cancelled) {
        busy(20);
        handle.cancel('stop');
      }
    });
    const out = await agent.run('s', 'go', handle);
    assert.equal(out.status, 'cancelled', `round ${round}`);
    assert.equal(ran, 0, `round ${round}: an executor ran after the cancel`);
  }
});
