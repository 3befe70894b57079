// Loop detection through the binding: an out-of-range loopWindow or loopMaxCyclePeriod is refused
// by the constructor (never a false loop_detected later), and short cycles need three whole turns.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { loadModule, objectSchema, text, throwsWithCode } from './helper.mjs';

const { Agent } = loadModule();
const base = { provider: 'scripted', scriptJson: '[]' };

test('config: loopWindow from 2 to 1000 and loopMaxCyclePeriod from 1 to 3, else config_invalid naming the field', () => {
  for (const [field, value] of [
    ['loopWindow', 1],
    ['loopWindow', 1001],
    ['loopWindow', 5000],
    ['loopWindow', 2.5],
    ['loopMaxCyclePeriod', 0],
    ['loopMaxCyclePeriod', 4],
    ['loopMaxCyclePeriod', Number.NaN],
  ]) {
    const e = throwsWithCode(assert, () => new Agent({ ...base, [field]: value }), 'config_invalid', 'config');
    assert.match(e.message, new RegExp(field), `${field}=${value}: ${e.message}`);
  }
  for (const extra of [{ loopWindow: 2 }, { loopWindow: 1000 }, { loopMaxCyclePeriod: 1 }, { loopMaxCyclePeriod: 3 }]) {
    assert.ok(new Agent({ ...base, ...extra }), JSON.stringify(extra));
  }
});

/** An agent whose model answers the batch [a, b, c] `times` times, then "done". */
function batchAgent(times, extra = {}) {
  const batch = (round) => ({
    tool_calls: ['a', 'b', 'c'].map((name) => ({ id: `r${round}${name}`, name, arguments: '{}' })),
  });
  const answers = [...Array.from({ length: times }, (_, round) => batch(round)), { content: 'done' }];
  const agent = new Agent({ provider: 'scripted', scriptJson: JSON.stringify(answers), ...extra });
  let ran = 0;
  for (const name of ['a', 'b', 'c']) {
    agent.registerTool({ name, description: 'd', parametersJson: objectSchema }, () => {
      ran += 1;
      return text('unavailable, retry');
    });
  }
  return { agent, ran: () => ran };
}

test('a batch of three retried once is no loop; three turns are, unless cycles are off', async () => {
  const retried = batchAgent(2);
  let out = await retried.agent.run('s', 'q');
  assert.equal(out.status, 'completed', out.errorMessage);
  assert.equal(retried.ran(), 6);

  const looping = batchAgent(5);
  out = await looping.agent.run('s', 'q');
  assert.equal(out.status, 'loop_detected');
  assert.equal(out.errorCode, 'loop_detected');
  assert.match(out.errorMessage, /cycle of 3/);
  assert.equal(looping.ran(), 9);

  const off = batchAgent(5, { loopMaxCyclePeriod: 1 });
  out = await off.agent.run('s', 'q');
  assert.equal(out.status, 'completed', out.errorMessage);
  assert.equal(off.ran(), 15);
});
