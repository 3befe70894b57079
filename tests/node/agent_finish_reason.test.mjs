// An answer the model cut off or that was filtered, through the real module against a local mock
// OpenAI-compatible server: the run completes without final text and says why (finishReason on
// the outcome and on run_finished), and the empty answer is never sent back, so the session's next
// run works with strict providers (Moonshot, Mistral answer 400 to an empty assistant message).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { loadModule } from './helper.mjs';
import { startMock, streamChunks, textChunks } from './mock_openai.mjs';

const { Agent } = loadModule();

test('a reasoning-only answer cut at the token limit: completed, no text, finishReason length; not sent back', async (t) => {
  const mock = await startMock(async (i, _request, res) => {
    if (i === 0) {
      await streamChunks(res, [
        { choices: [{ index: 0, delta: { role: 'assistant', reasoning_content: 'thinking at length' }, finish_reason: null }] },
        { choices: [{ index: 0, delta: {}, finish_reason: 'length' }] },
      ]);
    } else {
      await streamChunks(res, textChunks('second answer'));
    }
  });
  t.after(() => mock.close());
  const events = [];
  const agent = new Agent({ provider: 'custom', baseUrl: mock.baseUrl, model: 'm' });
  agent.onEvent((e) => events.push(JSON.parse(e)));
  const first = await agent.run('s', 'q1');
  assert.equal(first.status, 'completed');
  assert.equal(first.finalText, undefined);
  assert.equal(first.finishReason, 'length');
  const finished = events.filter((e) => e.type === 'run_finished');
  assert.equal(finished.at(-1).finish_reason, 'length');

  const second = await agent.run('s', 'q2');
  assert.equal(second.finalText, 'second answer');
  assert.equal(second.finishReason, 'stop');
  const sent = mock.requests[1].body.messages;
  // No empty assistant message; the unanswered question goes with the next one (no successive
  // user messages, which DeepSeek's reasoner refuses).
  assert.deepEqual(sent, [{ role: 'user', content: 'q1\n\nq2' }], JSON.stringify(sent));
});
