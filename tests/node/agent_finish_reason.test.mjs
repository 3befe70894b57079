// An answer the model cut off or that was filtered, through the real module against a local mock
// OpenAI-compatible server: the run completes without final text and says why (finishReason on
// the outcome and on run_finished), and the empty answer is never sent back, so the session's next
// run works with strict providers (Moonshot, Mistral answer 400 to an empty assistant message).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { loadModule } from './helper.mjs';
import { startMock, streamChunks, textChunks, toolCallChunks } from './mock_openai.mjs';
import { mkdtempSync, readdirSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

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

// Arguments over the registry's limit (1 MiB) never run and are sent back as "{}": the app sees
// the same "{}" everywhere but in the streamed deltas (stateJson, tool_call_finished, the hooks'
// responseJson and every later requestJson), and the state file stays small.
test('arguments over the size limit: refused, and recorded, shown and sent as {}', async (t) => {
  const big = JSON.stringify({ a: 'q'.repeat(2e6) });
  const mock = await startMock(async (i, _request, res) => {
    await streamChunks(res, i === 0 ? toolCallChunks('c', 't', big, 8) : textChunks(`answer ${i}`));
  });
  t.after(() => mock.close());
  const stateDir = mkdtempSync(join(tmpdir(), 'arkagent-bigargs-'));
  t.after(() => rmSync(stateDir, { recursive: true, force: true }));
  const agent = new Agent({ provider: 'custom', baseUrl: mock.baseUrl, model: 'm', stateDir });
  let ran = 0;
  agent.registerTool({ name: 't', description: 'd', parametersJson: JSON.stringify({ type: 'object' }) }, () => {
    ran++;
    return { contents: [{ type: 'text', text: 'r' }] };
  });
  const requests = [];
  const responses = [];
  agent.addHook({
    beforeModelCall: (_c, requestJson) => { requests.push(JSON.parse(requestJson)); },
    afterModelResponse: (_c, responseJson) => { responses.push(JSON.parse(responseJson)); },
  });
  const events = [];
  agent.onEvent((e) => events.push(JSON.parse(e)));
  assert.equal((await agent.run('s', 'q1')).finalText, 'answer 1');
  assert.equal((await agent.run('s', 'q2')).finalText, 'answer 2');
  assert.equal(ran, 0);

  const argsOf = (messages) => messages.flatMap((m) => m.tool_calls ?? []).map((c) => c.function?.arguments ?? c.arguments);
  const deltas = events.filter((e) => e.type === 'tool_call_arguments_delta').map((e) => e.delta).join('');
  assert.equal(deltas, big);
  assert.deepEqual(events.filter((e) => e.type === 'tool_call_finished').map((e) => e.call.arguments), ['{}']);
  const result = events.find((e) => e.type === 'tool_result').result;
  assert.equal(result.metadata.code, 'json_too_large');
  assert.match(JSON.stringify(result.contents), /exceeds the limit of 1048576 bytes/);
  assert.deepEqual(argsOf([responses[0]]), ['{}']);
  const state = await agent.stateJson('s');
  assert.deepEqual(argsOf(JSON.parse(state).messages), ['{}']);
  assert.ok(state.length < 16_384, `a state of ${state.length} bytes`);
  // What the hooks were shown of each later request is what was sent.
  for (const i of [1, 2]) {
    assert.deepEqual(argsOf(requests[i].messages), ['{}']);
    assert.deepEqual(argsOf(mock.requests[i].body.messages), ['{}']);
  }
  const onDisk = readdirSync(stateDir, { recursive: true })
    .map((f) => statSync(join(stateDir, f)))
    .filter((s) => s.isFile())
    .reduce((n, s) => n + s.size, 0);
  assert.ok(onDisk < 65_536, `the state dir takes ${onDisk} bytes`);
});
