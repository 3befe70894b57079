// A hook's resultJson (beforeToolCall deny, afterToolCall proceed): both spellings an app meets are
// read whole (the state's `is_error`/`metadata`/`value`, an executor's `isError`/`metadataJson`/
// `json`), and a key of neither is refused with hook_failed naming it, never silently dropped.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { loadModule } from './helper.mjs';

const { Agent } = loadModule();

/** An agent whose model calls `transfer`, then answers "done", with `hook` added; `ran` records executions. */
function setup(hook) {
  const agent = new Agent({
    provider: 'scripted',
    scriptJson: JSON.stringify([{ tool_calls: [{ id: 'c1', name: 'transfer', arguments: '{}' }] }, { content: 'done' }]),
  });
  const ran = [];
  agent.registerTool({ name: 'transfer', description: 'sends money', parametersJson: '{"type":"object"}' }, () => {
    ran.push(1);
    return { contents: [{ type: 'text', text: 'sent' }] };
  });
  agent.addHook(hook);
  const events = [];
  agent.onEvent((e) => events.push(JSON.parse(e)));
  return { agent, ran, events };
}

/** The hook that answers with `resultJson`, as a beforeToolCall deny or an afterToolCall proceed. */
const hookAnswering = {
  'beforeToolCall deny': (resultJson) => ({ beforeToolCall: () => ({ action: 'deny', resultJson }) }),
  'afterToolCall proceed': (resultJson) => ({ afterToolCall: () => ({ action: 'proceed', resultJson }) }),
};

async function runWith(where, result) {
  const { agent, ran, events } = setup(hookAnswering[where](JSON.stringify(result)));
  const out = await agent.run('s', 'go');
  const state = JSON.parse(await agent.stateJson('s'));
  const tool = state.messages.find((m) => m.role === 'tool');
  const toolResult = events.find((e) => e.type === 'tool_result')?.result;
  return { out, ran, tool, toolResult };
}

for (const where of Object.keys(hookAnswering)) {
  test(`${where}: a result in an executor's spelling (isError, metadataJson, json text) is read whole`, async () => {
    const { out, tool, toolResult } = await runWith(where, {
      contents: [{ type: 'text', text: 'blocked: limit exceeded' }, { type: 'json', json: '{"limit":100}' }],
      isError: true,
      metadataJson: '{"why":"limit"}',
    });
    assert.equal(out.status, 'completed');
    assert.equal(tool.is_error, true);
    assert.equal(tool.content, 'error: blocked: limit exceeded\n{"limit":100}');
    assert.deepEqual(toolResult, {
      contents: [{ type: 'text', text: 'blocked: limit exceeded' }, { type: 'json', value: { limit: 100 } }],
      is_error: true,
      stop: false,
      metadata: { why: 'limit' },
    });
  });

  test(`${where}: a result in the state's spelling (is_error, metadata, value) is read whole`, async () => {
    const { out, tool, toolResult } = await runWith(where, {
      contents: [{ type: 'text', text: 'blocked' }, { type: 'json', value: null }],
      is_error: true,
      stop: false,
      metadata: { why: 'limit' },
    });
    assert.equal(out.status, 'completed');
    assert.equal(tool.is_error, true);
    assert.equal(tool.content, 'error: blocked\nnull');
    assert.deepEqual(toolResult, {
      contents: [{ type: 'text', text: 'blocked' }, { type: 'json', value: null }],
      is_error: true,
      stop: false,
      metadata: { why: 'limit' },
    });
  });
}

test('afterToolCall may hand back the resultJson it was given, changed', async () => {
  const { agent } = setup({
    afterToolCall: (_ctx, _call, resultJson) => {
      const result = JSON.parse(resultJson);
      result.contents.push({ type: 'json', value: { audited: true } });
      result.metadata = { audit: 1 };
      return { action: 'proceed', resultJson: JSON.stringify(result) };
    },
  });
  assert.equal((await agent.run('s', 'go')).status, 'completed');
  const tool = JSON.parse(await agent.stateJson('s')).messages.find((m) => m.role === 'tool');
  assert.equal(tool.content, 'sent\n{"audited":true}');
});

/** Results no spelling reads whole, each with what the refusal names. */
const refused = [
  [{ contents: [{ type: 'text', text: 'x' }], isErr: true }, /unknown field `isErr`/],
  [{ contents: [{ type: 'text', text: 'x' }], error: 'quota' }, /unknown field `error`/],
  [{ contents: [{ type: 'text', text: 'x', lang: 'en' }] }, /unknown field `lang`/],
  [{ contents: [{ type: 'text', text: 'x' }], is_error: true, isError: true }, /duplicate field/],
  [{ contents: [{ type: 'text', text: 'x' }], metadata: {}, metadataJson: '{}' }, /both `metadata` and `metadataJson`/],
  [{ contents: [{ type: 'text', text: 'x', json: '{}' }] }, /contents\[0\] of type text has a json part's/],
  [{ contents: [{ type: 'json', value: 1, json: '1' }] }, /contents\[0\] of type json has both `value` and `json`/],
  [{ contents: [{ type: 'json', text: '1' }] }, /contents\[0\] of type json has a text part's `text`/],
  [{ contents: [{ type: 'json', json: '{' }] }, /contents\[0\]\.json is not JSON/],
  [{ contents: [], metadataJson: '[1]' }, /metadataJson must be a JSON object/],
];

test('beforeToolCall deny with a result of unknown or mixed keys: the call is denied with hook_failed naming the key', async () => {
  for (const [result, names] of refused) {
    const { out, ran, tool } = await runWith('beforeToolCall deny', result);
    const what = JSON.stringify(result);
    assert.equal(out.status, 'completed', what);
    assert.deepEqual(ran, [], what);
    assert.equal(tool.is_error, true, what);
    assert.match(tool.content, /^error \[hook_failed\]: hook #0 failed in before_tool_call for call c1: resultJson is not a ToolResult: /, what);
    assert.match(tool.content, names, what);
  }
});

test('afterToolCall proceed with a result of unknown or mixed keys: the run ends with hook_failed naming the key', async () => {
  for (const [result, names] of refused) {
    const { out, ran, tool } = await runWith('afterToolCall proceed', result);
    const what = JSON.stringify(result);
    assert.equal(out.status, 'aborted', what);
    assert.equal(out.errorCode, 'hook_failed', what);
    assert.match(out.errorMessage, names, what);
    assert.deepEqual(ran, [1], what);
    assert.equal(tool.is_error, true, what);
    assert.doesNotMatch(tool.content, /sent/, what);
  }
});

// The decision object itself: a key it does not have was skipped without a word, so a misspelt
// rewrite (`arguments_json`) let the call run with the model's arguments.
test('beforeToolCall: a decision with a key it does not have fails the hook (the call is denied, never run as it came)', async () => {
  const answers = [
    // A misspelling gets the key it is nearest to, as an options object's does; else the keys.
    [{ action: 'proceed', arguments_json: '{"amount":1}' }, /unknown key "arguments_json" in the decision \(did you mean argumentsJson\?\)$/],
    [{ action: 'proceed', argumentJson: '{"amount":1}' }, /unknown key "argumentJson" in the decision \(did you mean argumentsJson\?\)$/],
    [{ action: 'deny', reson: 'no' }, /unknown key "reson" in the decision \(did you mean reason\?\)$/],
    [{ action: 'deny', why: 'no' }, /unknown key "why" in the decision \(it has action, argumentsJson, name, resultJson, reason, injectJson\)$/],
    [{ action: 'deny', result: 'no' }, /unknown key "result"/],
    [{ action: 'proceed', ['k'.repeat(100)]: 1 }, new RegExp(`unknown key "${'k'.repeat(64)}"`)],
    [{ action: 'proceed', injectJson: '[]' }, /injectJson belongs to an afterToolCall answer/],
    // A rewrite the action does not read: the user was asked about, or the model told of, the
    // call as it came, as if the rewrite had been applied.
    [{ action: 'defer', argumentsJson: '{"amount":1}', reason: 'confirm 1' }, /argumentsJson is read with the action proceed only, not defer/],
    [{ action: 'deny', name: 'transfer', reason: 'no' }, /name is read with the action proceed only, not deny/],
    [{ action: 'abort', resultJson: '{"contents":[]}', reason: 'x' }, /resultJson is read with the action deny only, not abort/],
    [{ action: 'proceed', resultJson: '{"contents":[]}' }, /resultJson is read with the action deny only, not proceed/],
  ];
  for (const [answer, why] of answers) {
    const { agent, ran } = setup({ beforeToolCall: () => answer });
    const out = await agent.run('s', 'go');
    const tool = JSON.parse(await agent.stateJson('s')).messages.find((m) => m.role === 'tool');
    const what = JSON.stringify(answer);
    assert.equal(out.status, 'completed', what);
    assert.deepEqual(ran, [], what);
    assert.match(tool.content, /^error \[hook_failed\]: hook #0 failed in before_tool_call for call c1: beforeToolCall returned an invalid decision: /, what);
    assert.match(tool.content, why, what);
  }
});

test('afterToolCall: a decision with a key it does not read ends the run with hook_failed', async () => {
  const answers = [
    [{ action: 'proceed', result_json: '{"contents":[]}' }, /unknown key "result_json" in the decision \(did you mean resultJson\?\)$/],
    [{ action: 'proceed', argumentsJson: '{}' }, /argumentsJson belongs to a beforeToolCall answer/],
    [{ action: 'proceed', name: 'transfer' }, /name belongs to a beforeToolCall answer/],
    // A filtered result with stop or abort: the unfiltered one was kept and sent to the model.
    [{ action: 'stop', resultJson: '{"contents":[]}' }, /resultJson is read with the action proceed only, not stop/],
    [{ action: 'abort', reason: 'x', resultJson: '{"contents":[]}' }, /resultJson is read with the action proceed only, not abort/],
    // Messages to inject with an abort: the run ends before they are appended.
    [{ action: 'abort', reason: 'x', injectJson: '[{"role":"user","content":"hi"}]' }, /injectJson is not read with the action abort/],
    // A misspelt action key: named, with the key meant, not only "missing field action".
    [{ Action: 'proceed' }, /unknown key "Action" in the decision \(did you mean action\?\)$/],
  ];
  for (const [answer, why] of answers) {
    const { agent, ran } = setup({ afterToolCall: () => answer });
    const out = await agent.run('s', 'go');
    const what = JSON.stringify(answer);
    assert.equal(out.status, 'aborted', what);
    assert.equal(out.errorCode, 'hook_failed', what);
    assert.match(out.errorMessage, why, what);
    assert.deepEqual(ran, [1], what);
  }
});

test('a decision key whose value is undefined counts as absent, as the known ones do', async () => {
  const { agent, ran } = setup({ beforeToolCall: () => ({ action: 'proceed', note: undefined, injectJson: undefined }) });
  const out = await agent.run('s', 'go');
  assert.equal(out.status, 'completed');
  assert.deepEqual(ran, [1]);
});
