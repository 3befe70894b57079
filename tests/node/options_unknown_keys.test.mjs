// The options objects the exports take (the Agent config and its loopDiagnosis, the ToolRegistry
// options, a tool definition, the execute call and options) refuse a key they do not read, as
// config_invalid naming it and the known key it is nearest to (an executor's result and its content
// parts: tool_result_invalid): napi's conversion skipped such a key without a word,
// so a misspelt option left its default in place (`statedir`: a memory-only agent). A key whose value
// is undefined counts as absent. The keys accepted are exactly the .d.ts interface's.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { loadModule, objectSchema, readDts, rejectsWithCode, text, throwsWithCode } from './helper.mjs';

const { Agent, ToolRegistry } = loadModule();
const scripted = { provider: 'scripted', scriptJson: '[]' };
const definition = { name: 't', description: 'd', parametersJson: objectSchema };

test('a misspelt Agent config key is config_invalid naming it and the key meant', () => {
  for (const [key, meant] of [['maxRound', 'maxRounds'], ['toolTimeout', 'toolTimeoutMs'], ['statedir', 'stateDir']]) {
    const e = throwsWithCode(assert, () => new Agent({ ...scripted, [key]: 1 }), 'config_invalid', 'config');
    assert.equal(e.message, `unknown key "${key}" in the Agent config (did you mean ${meant}?)`);
  }
  const e = throwsWithCode(
    assert,
    () => new Agent({ ...scripted, loopDiagnosis: { firstround: 3 } }),
    'config_invalid',
    'config',
  );
  assert.equal(e.message, 'unknown key "firstround" in loopDiagnosis (did you mean firstRound?)');
});

test('a misspelt ToolRegistry option, tool definition key or execute option is config_invalid', async () => {
  let e = throwsWithCode(assert, () => new ToolRegistry({ defaultTimeout: 5 }), 'config_invalid', 'config');
  assert.equal(e.message, 'unknown key "defaultTimeout" in the ToolRegistry options (did you mean defaultTimeoutMs?)');

  const registry = new ToolRegistry();
  // A misspelt riskLevel registered a dangerous tool as safe: it would have run without asking.
  e = throwsWithCode(assert, () => registry.register({ ...definition, risklevel: 'dangerous' }, () => text('x')), 'config_invalid');
  assert.equal(e.message, 'unknown key "risklevel" in a tool definition (did you mean riskLevel?)');
  const agent = new Agent(scripted);
  e = throwsWithCode(assert, () => agent.registerTool({ ...definition, timeout: 5 }, () => text('x')), 'config_invalid');
  assert.equal(e.message, 'unknown key "timeout" in a tool definition (did you mean timeoutMs?)');
  assert.deepEqual([registry.names(), agent.toolNames()], [[], []], 'nothing was registered');

  registry.register(definition, () => text('ran'));
  const call = { id: 'c1', name: 't', arguments: '{}' };
  e = await rejectsWithCode(assert, registry.execute(call, undefined, { sessionid: 's' }), 'config_invalid');
  assert.equal(e.message, 'unknown key "sessionid" in the execute options (did you mean sessionId?)');
});

test('a key far from every known one lists the known keys; undefined values count as absent', async () => {
  const e = throwsWithCode(assert, () => new ToolRegistry({ zzz: 1 }), 'config_invalid');
  assert.equal(
    e.message,
    'unknown key "zzz" in the ToolRegistry options (it has defaultTimeoutMs, maxArgumentBytes, maxArgumentDepth)',
  );
  const agent = new Agent({ ...scripted, statedir: undefined, loopDiagnosis: { every: 2, other: undefined } });
  const registry = new ToolRegistry({ defaultTimeout: undefined });
  agent.registerTool({ ...definition, risklevel: undefined }, () => text('x'));
  registry.register({ ...definition, risklevel: undefined }, () => text('ran'));
  const call = { id: 'c1', name: 't', arguments: '{}' };
  assert.equal((await registry.execute(call, undefined, { sessionid: undefined })).contents[0].text, 'ran');
});

test("a misspelt key in an executor's result or content part is tool_result_invalid, never a success", async () => {
  const script = JSON.stringify([{ tool_calls: [{ id: 'c1', name: 't', arguments: '{}' }] }, { content: 'done' }]);
  const cases = [
    // A failure spelt iserror was recorded as a success; a misspelt stop was ignored.
    [{ contents: [{ type: 'text', text: 'disk full' }], iserror: true }, 'unknown key "iserror" in a ToolResult (did you mean isError?)'],
    [{ contents: [], Stop: true }, 'unknown key "Stop" in a ToolResult (did you mean stop?)'],
    [{ contents: [{ type: 'text', text: 'x', extra: 1 }] }, 'contents[0]: unknown key "extra" in a content part (it has type, text, json)'],
    [{ contents: [{ type: 'json', json: '{}' }, { type: 'text', txt: 'x' }] }, 'contents[1]: unknown key "txt" in a content part (did you mean text?)'],
  ];
  for (const [returned, why] of cases) {
    const agent = new Agent({ provider: 'scripted', scriptJson: script });
    agent.registerTool(definition, () => returned);
    assert.equal((await agent.run('s', 'go')).status, 'completed');
    const tool = JSON.parse(await agent.stateJson('s')).messages.find((m) => m.role === 'tool');
    assert.equal(tool.is_error, true, why);
    assert.equal(
      tool.content,
      `error [tool_result_invalid]: executor of t returned something that is not a ToolResult: ${why}`,
    );
  }
  const registry = new ToolRegistry();
  registry.register(definition, () => ({ contents: [{ type: 'text', text: 'ok', json: undefined }], stop: undefined, other: undefined }));
  const result = await registry.execute({ id: 'c1', name: 't', arguments: '{}' });
  assert.deepEqual([result.contents[0].text, result.isError], ['ok', false], 'undefined counts as absent');
});

test('a misspelt key in the call given to execute is config_invalid; the executor never runs', async () => {
  const registry = new ToolRegistry();
  let ran = 0;
  registry.register(definition, () => { ran++; return text('ran'); });
  const e = await rejectsWithCode(
    assert,
    registry.execute({ id: 'c1', name: 't', arguments: '{}', argument: '{"x":1}' }),
    'config_invalid',
  );
  assert.equal(e.message, 'unknown key "argument" in the tool call (did you mean arguments?)');
  assert.equal(ran, 0);
  const ok = await registry.execute({ id: 'c1', name: 't', arguments: '{}', argument: undefined });
  assert.deepEqual([ok.contents[0].text, ran], ['ran', 1]);
});

/** The keys of `export interface <name>` in the .d.ts. */
function dtsKeys(name) {
  const dts = readDts();
  const start = dts.indexOf(`export interface ${name} {`);
  assert.notEqual(start, -1, name);
  const body = dts.slice(start, dts.indexOf('\n}', start));
  return [...body.matchAll(/^ {2}(\w+)\??:/gm)].map((m) => m[1]);
}

test('the keys each object accepts are exactly its .d.ts interface keys', async () => {
  const listed = (e) => e.message.match(/\(it has (.*)\)$/)[1].split(', ');
  const cases = [
    ['AgentConfigObject', () => new Agent({ ...scripted, zzz: 1 })],
    ['LoopDiagnosisObject', () => new Agent({ ...scripted, loopDiagnosis: { zzz: 1 } })],
    ['ToolRegistryOptions', () => new ToolRegistry({ zzz: 1 })],
    ['ToolDefinitionObject', () => new ToolRegistry().register({ ...definition, zzz: 1 }, () => text('x'))],
  ];
  for (const [name, make] of cases) {
    const e = throwsWithCode(assert, make, 'config_invalid');
    assert.deepEqual(listed(e).sort(), dtsKeys(name).sort(), name);
  }
  const registry = new ToolRegistry();
  registry.register(definition, () => text('x'));
  const call = { id: 'c', name: 't', arguments: '{}' };
  let e = await rejectsWithCode(assert, registry.execute(call, undefined, { zzz: 1 }), 'config_invalid');
  assert.deepEqual(listed(e).sort(), dtsKeys('ExecuteOptions').sort());
  e = await rejectsWithCode(assert, registry.execute({ ...call, zzz: 1 }), 'config_invalid');
  assert.deepEqual(listed(e).sort(), dtsKeys('ToolCallObject').sort());
  for (const [name, returned] of [
    ['ToolResultObject', { contents: [], zzz: 1 }],
    ['ContentPartObject', { contents: [{ type: 'text', text: 'x', zzz: 1 }] }],
  ]) {
    const bad = new ToolRegistry();
    bad.register(definition, () => returned);
    e = await rejectsWithCode(assert, bad.execute(call), 'tool_result_invalid');
    assert.deepEqual(listed(e).sort(), dtsKeys(name).sort(), name);
  }
});

test('a required key missing beside an unknown one (the spec spelling parameters) names the unknown key too', () => {
  const spec = { name: 't', description: 'd', parameters: { type: 'object' } };
  const registry = new ToolRegistry();
  const agent = new Agent(scripted);
  for (const register of [(d) => registry.register(d, () => text('x')), (d) => agent.registerTool(d, () => text('x'))]) {
    const e = throwsWithCode(assert, () => register(spec), 'argument_invalid');
    assert.equal(
      e.message,
      'wrong argument: Missing field `parametersJson`; unknown key "parameters" in a tool definition ' +
        '(it has name, description, parametersJson, riskLevel, idempotent, timeoutMs)',
    );
  }
  // Without an unknown key, the missing field alone.
  const e = throwsWithCode(assert, () => registry.register({ name: 't', description: 'd' }, () => text('x')), 'argument_invalid');
  assert.equal(e.message, 'wrong argument: Missing field `parametersJson`');
});

test('the unknown key is named only beside a missing field: a wrong type keeps its wording, a throwing getter is not blamed', () => {
  let e = throwsWithCode(assert, () => new Agent({ provider: 5, apikey: 'x' }), 'argument_invalid');
  assert.equal(e.message, 'wrong argument: provider: expected a string, got a number (5)');
  // The look for an unknown key reads `boom`, whose getter throws: that is not why provider is missing.
  e = throwsWithCode(assert, () => new Agent({ get boom() { throw new Error('getter boom'); } }), 'argument_invalid');
  assert.equal(e.message, 'wrong argument: Missing field `provider`');
});
