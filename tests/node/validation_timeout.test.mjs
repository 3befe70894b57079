// A schema pattern that backtracks for hours on the model's arguments (`^(a+)+$` on 40 `a`s and a
// `!`) is matched off the async workers, and the checks before the executor get the tool's time of
// their own: the call is answered tool_not_started ("the tool did not run"), the executor never
// called, instead of the call (or the run) waiting for the pattern.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { loadModule, rejectsWithCode, text } from './helper.mjs';

const { Agent, ToolRegistry } = loadModule();
const schema = JSON.stringify({ type: 'object', properties: { s: { type: 'string', pattern: '^(a+)+$' } } });
const endless = JSON.stringify({ s: `${'a'.repeat(40)}!` });

test('ToolRegistry.execute: arguments a pattern cannot check within the timeout are tool_not_started', async () => {
  let ran = 0;
  const registry = new ToolRegistry();
  registry.register({ name: 'place', description: 'places', parametersJson: schema, timeoutMs: 300 }, () => {
    ran += 1;
    return text('placed');
  });
  const e = await rejectsWithCode(assert, registry.execute({ id: 'c1', name: 'place', arguments: endless }), 'tool_not_started');
  assert.match(e.message, /^the arguments of place could not be checked against its schema within 300 ms .*the tool did not run$/);
  assert.equal(ran, 0);
  // The same tool with arguments that check at once runs.
  const done = await registry.execute({ id: 'c2', name: 'place', arguments: '{"s":"aaa"}' });
  assert.equal(done.contents[0].text, 'placed');
  assert.equal(ran, 1);
});

test('a run: the call is answered tool_not_started and the run goes on to the next answer', async () => {
  const answers = [{ tool_calls: [{ id: 'c1', name: 'place', arguments: endless }] }, { content: 'done' }];
  const agent = new Agent({ provider: 'scripted', scriptJson: JSON.stringify(answers), toolTimeoutMs: 300 });
  let ran = 0;
  agent.registerTool({ name: 'place', description: 'places', parametersJson: schema }, () => {
    ran += 1;
    return text('placed');
  });
  const outcome = await agent.run('s', 'order');
  assert.equal(outcome.status, 'completed');
  assert.equal(outcome.finalText, 'done');
  assert.equal(ran, 0);
  const tool = JSON.parse(await agent.stateJson('s')).messages.find((m) => m.role === 'tool');
  assert.match(tool.content, /^error \[tool_not_started\]: the arguments of place could not be checked/);
});
