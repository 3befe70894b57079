// Lone UTF-16 surrogates in ids. napi reads a JS string as UTF-8, and a lone surrogate becomes
// U+FFFD: "a\uD800" and "a\uDC00" would both be read as "a\uFFFD" and name the same session (or tool,
// call, approval item, metadata key). A string argument whose identity matters is refused with
// argument_invalid (layer config) naming the argument, before the call does anything; a well-formed
// pair, and a real U+FFFD, are ids like any other.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { loadModule, objectSchema, text, throwsWithCode } from './helper.mjs';

const { Agent, ToolRegistry } = loadModule();

const LONE = [
  ['a lone high surrogate', 'a\uD800', /\\uD800 at index 1/],
  ['a lone low surrogate', 'a\uDC00', /\\uDC00 at index 1/],
  ['a pair in the wrong order', 'a\uDE00\uD83D', /\\uDE00 at index 1/],
  ['a high surrogate at the end after a pair', '\uD83D\uDE00b\uDBFF', /\\uDBFF at index 3/],
];

/** Asserts that `f` throws argument_invalid naming `name`, with what it found. */
function refused(f, name, found) {
  const error = throwsWithCode(assert, f, 'argument_invalid', 'config');
  assert.match(error.message, new RegExp(`^wrong argument: ${name}: holds a lone UTF-16 surrogate`));
  assert.match(error.message, found);
  return error;
}

function scriptedAgent(answers = Array(5).fill({ content: 'done' })) {
  const agent = new Agent({ provider: 'scripted', scriptJson: JSON.stringify(answers) });
  agent.registerTool({ name: 't', description: 'd', parametersJson: objectSchema }, () => text('ran'));
  return agent;
}

for (const [what, id, found] of LONE) {
  test(`a session id with ${what} is refused by every Agent method, and nothing is written`, async () => {
    const agent = scriptedAgent();
    refused(() => agent.run(id, 'hi'), 'sessionId', found);
    refused(() => agent.resume(id), 'sessionId', found);
    refused(() => agent.dismiss(id, 'no'), 'sessionId', found);
    refused(() => agent.approve(id, 'x'), 'sessionId', found);
    refused(() => agent.deny(id, 'x', 'no'), 'sessionId', found);
    refused(() => agent.approveAll(id), 'sessionId', found);
    refused(() => agent.denyAll(id, 'no'), 'sessionId', found);
    refused(() => agent.stateJson(id), 'sessionId', found);
    refused(() => agent.setMetadata(id, 'k', '1'), 'sessionId', found);
    refused(() => agent.pendingApprovalJson(id), 'sessionId', found);
    refused(() => agent.deleteSession(id), 'sessionId', found);
    // Nothing was written under the id napi would have read.
    assert.equal(await agent.stateJson(id.replace(/[\uD800-\uDFFF]/g, '\uFFFD')), null);
  });
}

test('two ids that differ only in their lone surrogates can no longer name one session', async () => {
  const agent = scriptedAgent();
  // A real U+FFFD is an id like any other (what napi would have read both as).
  assert.equal((await agent.run('a\uFFFD', 'hi')).status, 'completed');
  assert.equal(JSON.parse(await agent.stateJson('a\uFFFD')).session_id, 'a\uFFFD');
  refused(() => agent.stateJson('a\uD800'), 'sessionId', /\\uD800/);
  refused(() => agent.deleteSession('a\uDC00'), 'sessionId', /\\uDC00/);
  assert.equal(JSON.parse(await agent.stateJson('a\uFFFD')).session_id, 'a\uFFFD');
  // A well-formed pair is kept as it is.
  assert.equal((await agent.run('a\uD83D\uDE00', 'hi')).status, 'completed');
  assert.equal(JSON.parse(await agent.stateJson('a\uD83D\uDE00')).session_id, 'a\uD83D\uDE00');
  assert.equal(await agent.stateJson('a\uFFFD\uFFFD'), null);
});

test('approval ids, metadata keys and tool names of the Agent are refused the same way', async () => {
  const agent = scriptedAgent();
  refused(() => agent.approve('s', 'p\uD800'), 'approvalId', /\\uD800/);
  refused(() => agent.deny('s', 'p\uDC00', 'no'), 'approvalId', /\\uDC00/);
  refused(() => agent.setMetadata('s', 'k\uD800', '1'), 'key', /\\uD800/);
  assert.equal(await agent.stateJson('s'), null, 'a refused setMetadata created the session');
  refused(() => agent.unregisterTool('t\uDC00'), 'name', /\\uDC00/);
  refused(
    () => agent.registerTool({ name: 'u\uD800', description: 'd', parametersJson: objectSchema }, () => text('x')),
    'name',
    /\\uD800/,
  );
  assert.deepEqual(agent.toolNames(), ['t']);
});

test("a ToolRegistry refuses them in tool names, a call's id and name, and execute's ids", async () => {
  const registry = new ToolRegistry();
  refused(
    () => registry.register({ name: 't\uD800', description: 'd', parametersJson: objectSchema }, () => text('x')),
    'name',
    /\\uD800/,
  );
  registry.register({ name: 't', description: 'd', parametersJson: objectSchema }, (args, ctx) =>
    text(`${ctx.sessionId}|${ctx.callId}|${ctx.batchCallId}`),
  );
  refused(() => registry.unregister('t\uDC00'), 'name', /\\uDC00/);
  refused(() => registry.copyIntoExcluding(new ToolRegistry(), ['x', 't\uD800']), 'excludedNames\\[1\\]', /\\uD800 at index 1/);
  const call = { id: 'c1', name: 't', arguments: '{}' };
  refused(() => registry.execute({ ...call, id: 'c\uD800' }), 'id', /\\uD800/);
  refused(() => registry.execute({ ...call, name: 't\uDC00' }), 'name', /\\uDC00/);
  refused(() => registry.execute(call, undefined, { sessionId: 's\uD800' }), 'sessionId', /\\uD800/);
  refused(() => registry.execute(call, undefined, { batchCallId: 'b\uDC00' }), 'batchCallId', /\\uDC00/);
  // Well-formed text, pairs and U+FFFD included, reaches the executor unchanged.
  const ok = await registry.execute({ ...call, id: 'c\uD83D\uDE00' }, undefined, {
    sessionId: 's\uFFFD',
    batchCallId: 'b\u00E9',
  });
  assert.deepEqual(ok.contents, [{ type: 'text', text: 's\uFFFD|c\uD83D\uDE00|b\u00E9' }]);
  assert.deepEqual(registry.names(), ['t']);
});

test('a real U+FFFD does not hide a lone surrogate elsewhere in the same id', async () => {
  const agent = scriptedAgent();
  // The text napi reads holds U+FFFD twice: the real one and the lone surrogate's.
  refused(() => agent.stateJson('\uFFFDa\uD800'), 'sessionId', /\\uD800 at index 2/);
  refused(() => agent.stateJson('a\uDC00b\uFFFD'), 'sessionId', /\\uDC00 at index 1/);
  refused(() => agent.setMetadata('s', '\uFFFD\uFFFD\uDBFF', '1'), 'key', /\\uDBFF at index 2/);
  assert.equal(await agent.stateJson('\uFFFDa\uFFFD'), null);
});

test("JSON text with JSON.stringify's escape of a lone surrogate reads it as U+FFFD, wherever JSON comes from the app", async () => {
  // 'Cake 🎂'.substring(0, 6): the emoji cut in half. JSON.stringify escapes the lone half.
  const cut = 'Cake 🎂'.substring(0, 6);
  const json = JSON.stringify({ note: cut });
  assert.equal(json, '{"note":"Cake \\ud83c"}');
  const registry = new ToolRegistry();
  registry.register({ name: 'r', description: 'd', parametersJson: JSON.stringify({ type: 'object', description: cut }) }, () => ({
    contents: [{ type: 'json', json }],
    metadataJson: json,
  }));
  const result = await registry.execute({ id: 'c', name: 'r', arguments: '{}' }, undefined, { metadataJson: json });
  assert.equal(JSON.parse(result.contents[0].json).note, 'Cake \uFFFD');
  assert.equal(JSON.parse(result.metadataJson).note, 'Cake \uFFFD');

  const agent = scriptedAgent([
    { tool_calls: [{ id: 'c1', name: 't', arguments: '{}' }] },
    { content: 'done' },
  ]);
  await agent.setMetadata('s', 'note', JSON.stringify(cut));
  assert.equal(JSON.parse(await agent.stateJson('s')).metadata.note, 'Cake \uFFFD');
  // A hook's answers: rewritten arguments, a rewritten result, injected messages.
  const seen = [];
  agent.unregisterTool('t');
  agent.registerTool({ name: 't', description: 'd', parametersJson: objectSchema }, (args) => {
    seen.push(JSON.parse(args).note);
    return text('ran');
  });
  agent.addHook({
    beforeToolCall: () => ({ action: 'proceed', argumentsJson: json }),
    afterToolCall: () => ({
      action: 'proceed',
      resultJson: JSON.stringify({ contents: [{ type: 'text', text: cut }] }),
      injectJson: JSON.stringify([{ role: 'user', content: cut }]),
    }),
  });
  const out = await agent.run('s', 'go');
  assert.equal(out.status, 'completed', JSON.stringify(out));
  assert.deepEqual(seen, ['Cake \uFFFD']);
  const messages = JSON.parse(await agent.stateJson('s')).messages;
  assert.ok(messages.some((m) => m.role === 'tool' && m.content === 'Cake \uFFFD'), JSON.stringify(messages));
  assert.ok(messages.some((m) => m.role === 'user' && m.content === 'Cake \uFFFD'), JSON.stringify(messages));
});
