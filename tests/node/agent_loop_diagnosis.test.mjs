// The LLM loop diagnosis through the real .so (AgentConfigObject.loopDiagnosis) against the local
// mock OpenAI-compatible server: on its schedule the agent asks its own model (same endpoint, key
// and model name, no tools, not streamed) whether the session is looping; a verdict above
// minConfidence ends the run loop_detected, one below lets it go on. Without the option no
// diagnosis is asked. Bad values are config_invalid naming the field.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { loadModule, throwsWithCode } from './helper.mjs';
import { startMock, streamChunks, textChunks, toolCallChunks } from './mock_openai.mjs';

const { Agent } = loadModule();

const lookupSchema = JSON.stringify({ type: 'object', properties: { city: { type: 'string' } }, required: ['city'] });

/** A diagnosis request: the diagnoser's system prompt, no tools. */
function isDiagnosis(body) {
  return body.tools === undefined && /Loop Diagnosis/.test(body.messages[0]?.content ?? '');
}

/** The non-streamed chat completion answering a diagnosis with this verdict. */
function answerDiagnosis(res, verdict) {
  res.writeHead(200, { 'content-type': 'application/json' });
  res.end(JSON.stringify({
    id: 'diag', object: 'chat.completion', model: 'mock-model',
    choices: [{ index: 0, message: { role: 'assistant', content: JSON.stringify(verdict) }, finish_reason: 'stop' }],
    usage: { prompt_tokens: 50, completion_tokens: 12, total_tokens: 62 },
  }));
}

/**
 * A mock whose chat rounds call `lookup` twice (other arguments each time, so the signature
 * detector sees no loop) and then answer; every diagnosis gets `verdict`.
 */
async function mockWith(t, verdict) {
  let round = 0;
  const mock = await startMock(async (_i, request, res) => {
    if (isDiagnosis(request.body)) return answerDiagnosis(res, verdict);
    round++;
    if (round <= 2) return streamChunks(res, toolCallChunks(`call_${round}`, 'lookup', `{"city":"C${round}"}`));
    return streamChunks(res, textChunks('Both cities are sunny.'));
  });
  t.after(() => mock.close());
  return mock;
}

function agentOn(mock, extra) {
  const agent = new Agent({ provider: 'custom', baseUrl: mock.baseUrl, model: 'mock-model', apiKey: 'sk-diag', ...extra });
  agent.registerTool({ name: 'lookup', description: 'weather by city', parametersJson: lookupSchema },
    async () => ({ contents: [{ type: 'text', text: 'sunny' }] }));
  return agent;
}

test('a diagnosis of is_loop with confidence 0.9 (above 0.8) ends the run loop_detected', async (t) => {
  const mock = await mockWith(t, { is_loop: true, confidence: 0.9, reason: 'asks the weather again and again' });
  const agent = agentOn(mock, { loopDiagnosis: { firstRound: 2, every: 1, minConfidence: 0.8 } });
  const out = await agent.run('d1', 'weather?');
  assert.equal(out.status, 'loop_detected', JSON.stringify(out));
  assert.equal(out.errorCode, 'loop_detected');
  assert.equal(out.errorLayer, 'runtime');
  assert.match(out.errorMessage, /confidence 0\.90/);
  assert.match(out.errorMessage, /asks the weather again and again/);
  // Two chat rounds, then the diagnosis after the second one (round 2 = firstRound), nothing after.
  assert.deepEqual(mock.requests.map((r) => isDiagnosis(r.body)), [false, false, true]);
  const diagnosis = mock.requests[2];
  assert.equal(diagnosis.authorization, 'Bearer sk-diag');
  assert.equal(diagnosis.body.model, 'mock-model');
  assert.notEqual(diagnosis.body.stream, true);
  assert.deepEqual(diagnosis.body.messages.map((m) => m.role), ['system', 'user']);
  assert.match(diagnosis.body.messages[1].content, /\[call lookup\(\{"city":"C1"\}\)\]/);
  assert.match(diagnosis.body.messages[1].content, /\[call lookup\(\{"city":"C2"\}\)\]/);
  assert.equal(JSON.parse(await agent.stateJson('d1')).status, 'loop_detected');
});

// Before: the diagnosis request carried no max_tokens whatever the agent's maxTokens was.
test('a diagnosis asks within the agent\'s maxTokens, as its other requests do', async (t) => {
  const mock = await mockWith(t, { is_loop: false, confidence: 0.1, reason: 'fine' });
  const out = await agentOn(mock, { maxTokens: 300, loopDiagnosis: { firstRound: 2, every: 0 } }).run('d5', 'weather?');
  assert.equal(out.status, 'completed', JSON.stringify(out));
  assert.deepEqual(mock.requests.map((r) => isDiagnosis(r.body)), [false, false, true, false]);
  assert.deepEqual(mock.requests.map((r) => r.body.max_tokens), [300, 300, 300, 300]);
  const unlimited = await mockWith(t, { is_loop: false, confidence: 0.1, reason: 'fine' });
  await agentOn(unlimited, { loopDiagnosis: { firstRound: 2, every: 0 } }).run('d6', 'weather?');
  assert.equal(unlimited.requests[2].body.max_tokens, undefined, 'none without maxTokens');
});

test('a diagnosis with confidence 0.5 (not above 0.8) lets the run complete', async (t) => {
  const mock = await mockWith(t, { is_loop: true, confidence: 0.5, reason: 'maybe' });
  const agent = agentOn(mock, { loopDiagnosis: { firstRound: 2, every: 1, minConfidence: 0.8 } });
  const out = await agent.run('d2', 'weather?');
  assert.equal(out.status, 'completed', JSON.stringify(out));
  assert.equal(out.finalText, 'Both cities are sunny.');
  assert.equal(out.errorCode, undefined);
  assert.deepEqual(mock.requests.map((r) => isDiagnosis(r.body)), [false, false, true, false]);
  // Two tool-call rounds (30 tokens each), the diagnosis (62), the answer (45): the diagnosis's
  // tokens count (before: 105, the diagnosis's left out).
  const usage = { prompt_tokens: 20 + 20 + 50 + 40, completion_tokens: 10 + 10 + 12 + 5, total_tokens: 167 };
  assert.deepEqual(JSON.parse(out.usageJson), usage);
  assert.deepEqual(JSON.parse(await agent.stateJson('d2')).usage, usage, 'saved with the session');
});

test('without loopDiagnosis no diagnosis is asked; the defaults ask only from round 30', async (t) => {
  const mock = await mockWith(t, { is_loop: true, confidence: 0.99, reason: 'never asked' });
  const plain = await agentOn(mock, {}).run('d3', 'weather?');
  assert.equal(plain.status, 'completed', JSON.stringify(plain));
  assert.deepEqual(mock.requests.map((r) => isDiagnosis(r.body)), [false, false, false]);
  const defaults = await mockWith(t, { is_loop: true, confidence: 0.99, reason: 'too early' });
  const early = await agentOn(defaults, { loopDiagnosis: {} }).run('d4', 'weather?');
  assert.equal(early.status, 'completed', JSON.stringify(early));
  assert.deepEqual(defaults.requests.map((r) => isDiagnosis(r.body)), [false, false, false]);
});

test('loopDiagnosis values are checked: config_invalid naming the field', () => {
  const base = { provider: 'scripted', scriptJson: '[]' };
  const bad = [
    [{ firstRound: 0 }, 'loopDiagnosis.firstRound'],
    [{ firstRound: 2.5 }, 'loopDiagnosis.firstRound'],
    [{ firstRound: -1 }, 'loopDiagnosis.firstRound'],
    [{ every: -1 }, 'loopDiagnosis.every'],
    [{ every: 0.5 }, 'loopDiagnosis.every'],
    [{ every: 2 ** 32 }, 'loopDiagnosis.every'],
    [{ minConfidence: -0.1 }, 'loopDiagnosis.minConfidence'],
    [{ minConfidence: 1 }, 'loopDiagnosis.minConfidence'],
    [{ minConfidence: Number.NaN }, 'loopDiagnosis.minConfidence'],
  ];
  for (const [loopDiagnosis, field] of bad) {
    const e = throwsWithCode(assert, () => new Agent({ ...base, loopDiagnosis }), 'config_invalid', 'config');
    assert.ok(e.message.includes(field), `${JSON.stringify(loopDiagnosis)}: ${e.message}`);
    if (field === 'loopDiagnosis.every') {
      // 0 is allowed there: the message says so (it said "a positive whole number").
      assert.match(e.message, /must be 0 \(no repeat\) or a whole number from 1 to 4294967295/);
    }
  }
  for (const loopDiagnosis of [{}, { every: 0 }, { minConfidence: 0 }, { firstRound: 1, every: 5, minConfidence: 0.95 }]) {
    assert.ok(new Agent({ ...base, loopDiagnosis }) instanceof Agent, JSON.stringify(loopDiagnosis));
  }
  // Not an object (napi alone would read these as {}: all defaults): refused, naming the field.
  // null too, as for every other option of the config.
  for (const loopDiagnosis of ['often', 5, true, null, [], [{ firstRound: 2 }], { firstRound: '2' }]) {
    const e = throwsWithCode(assert, () => new Agent({ ...base, loopDiagnosis }), 'argument_invalid', 'config');
    assert.ok(e.message.includes('loopDiagnosis'), `${JSON.stringify(loopDiagnosis)}: ${e.message}`);
  }
  // A field of the wrong type is named with the object's name (before: `loopDiagnosis: expected a
  // number, got a string`, whichever field it was).
  const wrongType = [
    [{ firstRound: '5' }, /^wrong argument: loopDiagnosis\.firstRound: expected a number, got a string/],
    [{ firstRound: 2, every: true }, /^wrong argument: loopDiagnosis\.every: expected a number, got a boolean/],
    [{ minConfidence: {} }, /^wrong argument: loopDiagnosis\.minConfidence: expected a number, got an object/],
    [{ get every() { throw new Error('no every'); } }, /^wrong argument: loopDiagnosis\.every: reading it threw .*no every/],
    [[], /^wrong argument: loopDiagnosis: expected an object, got an array$/],
  ];
  for (const [loopDiagnosis, message] of wrongType) {
    const e = throwsWithCode(assert, () => new Agent({ ...base, loopDiagnosis }), 'argument_invalid', 'config');
    assert.match(e.message, message);
  }
  // undefined leaves the diagnosis off, as leaving the option out does.
  assert.ok(new Agent({ ...base, loopDiagnosis: undefined }) instanceof Agent);
});
