// An app developer's journey through the ArkTS bindings, with only README.md, the bindings and their
// docs in hand: fixtures/journey is a recipe app written in strict ArkTS against the bindings HAR
// (its only dependency): a safe and a dangerous tool with schemas from the typed JSON builder, a
// hook that rewrites arguments, a listener that renders every event, a Cancel button, an approval
// panel that works after the app was killed, and the conversation read back from the state. It must
// pass the ArkTS check against the real index.d.ts, and it runs here, transpiled, against the REAL
// native module. fixtures/journey-mistakes holds the mistakes such a developer makes first; the
// check must flag each of them. The mistakes the types cannot catch are made at run time below, and
// each must come back as an Error a UI can show: code, layer and message.
// Run: node --test scripts/arkts-check/journey.test.mjs (ARKAGENT_SO names the .so, else it is built)

import { test, before } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { transpileFile } from './transpile.mjs';
import { realBindings } from './real_bindings.mjs';
import { tempDir } from './tmp.mjs';

const HERE = path.dirname(fileURLToPath(import.meta.url));
const ROOT = path.resolve(HERE, '..', '..');
const JOURNEY = path.join(HERE, 'fixtures', 'journey', 'src');
const MISTAKES = path.join(HERE, 'fixtures', 'journey-mistakes', 'src', 'Mistakes.ets');

let B; // the bindings over the real module
let J; // the recipe app

before(async () => {
  let dir;
  let barrel;
  ({ bindings: B, dir, barrel } = await realBindings('arkagent-journey-'));
  J = {};
  for (const rel of ['RecipeTools', 'RecipeScreen']) {
    transpileFile(path.join(JOURNEY, `${rel}.ets`), path.join(dir, 'journey', `${rel}.mjs`), { '@arkagent/bindings': barrel });
  }
  for (const rel of ['RecipeTools', 'RecipeScreen']) {
    Object.assign(J, await import(pathToFileURL(path.join(dir, 'journey', `${rel}.mjs`)).href));
  }
});

/** check.mjs --json on `target`, against the real index.d.ts of the module. */
function check(target) {
  const result = spawnSync(process.execPath, [path.join(HERE, 'check.mjs'), '--json', target],
    { cwd: ROOT, encoding: 'utf8' });
  assert.ok(result.stdout.length > 0, `no output; stderr: ${result.stderr}`);
  return { status: result.status, report: JSON.parse(result.stdout) };
}

/** Waits until `condition()` holds (polling every 5 ms), or fails after 5 s. */
async function until(condition, what) {
  for (let i = 0; i < 1000; i++) {
    if (condition()) return;
    await new Promise((r) => setTimeout(r, 5));
  }
  assert.fail(`timed out waiting for ${what}`);
}

test('the recipe app, strict ArkTS with the bindings as its only dependency, passes the check', () => {
  const { status, report } = check(path.join(HERE, 'fixtures', 'journey'));
  assert.deepEqual(report.diagnostics.map((d) => `${d.file}:${d.line} ${d.code} ${d.message}`), []);
  assert.equal(report.files, 2);
  assert.equal(status, 0);
});

test('each typical mistake of fixtures/journey-mistakes is an error of the check, and nothing else is', () => {
  const lines = fs.readFileSync(MISTAKES, 'utf8').split('\n');
  const marked = lines.map((l, i) => (l.includes('// MISTAKE') ? i + 1 : 0)).filter((n) => n > 0);
  assert.equal(marked.length, 7);
  const { status, report } = check(path.join(HERE, 'fixtures', 'journey-mistakes'));
  const flagged = [...new Set(report.diagnostics.map((d) => d.line))].sort((a, b) => a - b);
  assert.deepEqual(flagged, marked, JSON.stringify(report.diagnostics.map((d) => [d.line, d.code, d.message])));
  assert.ok(report.diagnostics.every((d) => d.category === 'error'));
  // The wrong result type of an executor and the un-awaited run are type errors, the untyped
  // schema an ArkTS rule.
  const codes = report.diagnostics.map((d) => `${d.line} ${d.code}`);
  assert.ok(codes.includes(`${marked[0]} TS2322`), codes.join(', '));
  assert.ok(codes.includes(`${marked[2]} TS2740`), codes.join(', '));
  assert.ok(codes.includes(`${marked[3]} arkts-no-untyped-obj-literals`), codes.join(', '));
  assert.equal(status, 1);
});

const RUN_SCRIPT = JSON.stringify([
  // A safe lookup whose arguments the hook rewrites (name trimmed, lower case; servings added).
  { tool_calls: [{ id: 'c1', name: 'lookup_recipe', arguments: '{"name":"  Baguette "}' }] },
  // A batch with a dangerous delete: the whole batch waits for the user, the safe lookup too.
  {
    content: 'I will delete the bagel.',
    tool_calls: [
      { id: 'c2', name: 'delete_recipe', arguments: '{"name":" BAGEL ","reason":"duplicate"}' },
      { id: 'c3', name: 'lookup_recipe', arguments: '{"name":"baguette","servings":4}' },
    ],
  },
]);

test('the recipe app: rewrite hook, every event rendered, approval after a restart, the conversation read back',
  async () => {
    const stateDir = tempDir('arkagent-journey-state-');
    const first = new J.RecipeScreen(RUN_SCRIPT, stateDir, 'kitchen', new J.RecipeBook());
    await first.signIn('u-42');
    await first.send('Delete the bagel, and show me the baguette');
    assert.deepEqual(first.errors, []);
    assert.equal(first.lastOutcome.status, 'awaiting_approval');
    // The safe call ran with the hook's arguments; the frozen batch ran nothing.
    assert.deepEqual(first.book.lookups, ['{"name":"baguette","servings":2}']);
    assert.deepEqual(first.book.deleted, []);
    assert.equal(await first.agent.status('kitchen'), 'awaiting_approval');
    assert.equal(await first.agent.status('elsewhere'), undefined);
    // The user is asked about the call as the hook rewrote it, not as the model wrote it.
    assert.deepEqual(first.approvalItems.map((i) => [i.toolCall.name, i.toolCall.argumentsJson, i.riskLevel]),
      [['delete_recipe', '{"name":"bagel","reason":"duplicate"}', 'dangerous']]);
    // Every event became a line; a suspended run ends with the approval, without run_finished.
    const kinds = first.lines.map((l) => l.split(/[ :]/)[0]);
    for (const kind of ['run', 'call', 'text', 'saved', 'lookup_recipe', 'approval']) {
      assert.ok(kinds.includes(kind), `${kind} in ${first.lines.join('\n')}`);
    }
    assert.ok(first.lines.includes('call lookup_recipe {"name":"  Baguette "}'), 'the model\'s own call is shown');
    assert.ok(first.lines.some((l) => l.startsWith('lookup_recipe ok: {') && l.includes('"servings":2,"user":"u-42"')));
    assert.equal(first.lines.at(-1), 'approval needed: delete_recipe');
    assert.ok(!first.lines.some((l) => l.startsWith('unknown event')));

    // The app is killed; the new process opens the page: the conversation and the pending panel.
    const second = new J.RecipeScreen(JSON.stringify([{ content: 'Deleted the bagel.' }]), stateDir, 'kitchen',
      new J.RecipeBook());
    const shown = await second.open();
    assert.deepEqual(shown, [
      'you: Delete the bagel, and show me the baguette',
      'assistant calls lookup_recipe{"name":"  Baguette "}',
      shown[2],
      'assistant calls delete_recipe{"name":" BAGEL ","reason":"duplicate"} lookup_recipe{"name":"baguette","servings":4}',
    ]);
    assert.match(shown[2], /^lookup_recipe ok: \{"ingredients":"flour 500g.*"servings":2,"user":"u-42"\}$/);
    assert.deepEqual(second.approvalItems.map((i) => i.approvalId), first.approvalItems.map((i) => i.approvalId));
    // A stale id (another device decided, an old notification) is an error the panel can show.
    await second.approve('not-an-approval');
    assert.equal(second.errors.length, 1);
    assert.match(second.errors[0], /^runtime\/approval_not_found: batch .* has no approval not-an-approval$/);
    assert.equal(second.approvalItems.length, 1, 'the panel still lists the real item');
    assert.equal(second.readyToContinue, false);
    await second.approve(second.approvalItems[0].approvalId);
    assert.deepEqual(second.approvalItems, []);
    assert.equal(second.readyToContinue, true);
    // Killed again between the decision and Continue: the decision held, only Continue is left.
    const third = new J.RecipeScreen(JSON.stringify([{ content: 'Deleted the bagel.' }]), stateDir, 'kitchen',
      new J.RecipeBook());
    assert.deepEqual(await third.open(), shown);
    assert.deepEqual([third.approvalItems.length, third.readyToContinue], [0, true]);
    await third.resume();
    assert.deepEqual(third.errors, []);
    assert.equal(third.lastOutcome.status, 'completed');
    assert.equal(third.lastOutcome.finalText, 'Deleted the bagel.');
    assert.deepEqual(third.book.deleted, ['bagel']);
    assert.equal(third.readyToContinue, false);
    assert.equal(await third.agent.status('kitchen'), 'completed');
    assert.equal(third.lines[0], 'run started (resumed)');
    assert.equal(third.lines.at(-1), 'run completed');
    assert.ok(third.lines.includes('delete_recipe ok: deleted bagel (duplicate)'));
    const after = await third.conversation();
    assert.deepEqual(after.slice(0, 4), shown);
    assert.deepEqual(after.slice(4).map((l) => l.split(':')[0]), ['delete_recipe ok', 'lookup_recipe ok', 'assistant']);
    assert.equal(after.at(-1), 'assistant: Deleted the bagel.');
    // The second screen's Continue, tapped late: an error the UI shows; nothing runs twice.
    await second.resume();
    assert.match(second.errors.at(-1), /^runtime\/invalid_state: nothing to resume: the session is completed$/);
    assert.equal(second.errors.length, 2);
    assert.deepEqual(second.book.deleted, []);
    assert.equal(second.lines.length, 0, 'no run started');
  });

test('the conversations list after a restart: titles, the approval one waits for, a damaged one; the tools sheet', async () => {
  const stateDir = tempDir('arkagent-journey-list-');
  const book = new J.RecipeBook();
  const kitchen = new J.RecipeScreen(RUN_SCRIPT, stateDir, 'kitchen', book);
  assert.deepEqual(await kitchen.conversationList(), [], 'no conversation yet');
  await kitchen.send('Find the baguette,\nthen delete the bagel');
  assert.equal(kitchen.lastOutcome.status, B.RunStatus.awaitingApproval);
  const hello = new J.RecipeScreen(JSON.stringify([{ content: 'Hi!' }]), stateDir, 'hello', book);
  await hello.send('hello there');
  const broken = new J.RecipeScreen(JSON.stringify([{ content: 'ok' }]), stateDir, 'broken', book);
  await broken.send('soon damaged');
  for (const name of fs.readdirSync(path.join(stateDir, 'broken'))) {
    fs.writeFileSync(path.join(stateDir, 'broken', name), 'not a snapshot');
  }
  // The app starts again: a new screen over the same directory lists every conversation.
  const reopened = new J.RecipeScreen('[]', stateDir, 'kitchen', book);
  const rows = await reopened.conversationList();
  assert.deepEqual([...rows].sort(), [
    'broken: damaged (state_corrupt)',
    'hello: hello there (3 messages)',
    'kitchen: Find the baguette, then delete the bagel [needs your approval]',
  ]);
  // The most recently written first (broken's files were rewritten last).
  assert.equal(rows[0], 'broken: damaged (state_corrupt)');
  assert.deepEqual(reopened.toolSheet(), ['lookup_recipe (safe)', 'delete_recipe (dangerous)', 'slow_search (safe)']);

  // The typed summaries themselves, through the bindings' Agent.
  const config = B.AgentConfig.scripted('[]');
  config.stateDir = stateDir;
  const agent = new B.Agent(config);
  const list = await agent.listSessions();
  assert.ok(list.every((s) => s instanceof B.SessionSummary));
  assert.deepEqual(list.map((s) => s.sessionId), ['broken', 'hello', 'kitchen']);
  const [bad, hi, waiting] = list;
  assert.deepEqual([bad.status, bad.error.code, bad.error.layer, bad.canContinue()], [undefined, 'state_corrupt', 'persistence', false]);
  assert.deepEqual([hi.status, hi.messageCount, hi.title, hi.approvalPending, hi.interrupted, hi.parentSession],
    [B.RunStatus.completed, 3, 'hello there', false, false, undefined]);
  assert.equal(typeof hi.updatedAtMs, 'number');
  assert.deepEqual([hi.lastMessage, hi.runError], ['Hi!', undefined], 'the answer is the preview line');
  assert.deepEqual([waiting.status, waiting.approvalPending, waiting.canContinue()], [B.RunStatus.awaitingApproval, true, false]);
  assert.deepEqual(agent.definitions(), [], 'this agent registered no tool');
  assert.deepEqual(await agent.listSessions(true), list, 'no workers here');
});

test('SessionSummary reads the native listing strictly, and one unknown status does not hide the others', () => {
  const entry = { session_id: 'a', status: 'completed', approval_pending: false, interrupted: false, busy: false, message_count: 2,
    updated_at_ms: 5, title: 't', parent_session: null, error: null };
  const future = { ...entry, session_id: 'b', status: 'hibernating', updated_at_ms: 9, last_message: 'bye',
    run_error: { layer: 'provider', code: 'provider_auth', message: '401' } };
  const list = B.SessionSummary.listFromJsonString(JSON.stringify([entry, future]));
  assert.deepEqual(list.map((s) => [s.sessionId, s.status, s.error?.code]),
    [['a', B.RunStatus.completed, undefined], ['b', undefined, 'run_status_unknown']]);
  assert.deepEqual(B.SessionSummary.byRecency(list).map((s) => s.sessionId), ['b', 'a']);
  assert.deepEqual([list[1].lastMessage, list[1].runError.code, list[0].lastMessage, list[0].runError],
    ['bye', 'provider_auth', undefined, undefined]);
  const bad = (o) => {
    try {
      B.SessionSummary.listFromJsonString(JSON.stringify(o));
    } catch (e) {
      return e instanceof B.JsonError ? e.code : `not a JsonError: ${e}`;
    }
    return 'no error';
  };
  assert.equal(bad({}), 'session_summary_invalid');
  assert.equal(bad([1]), 'session_summary_invalid');
  assert.equal(bad([{ ...entry, session_id: undefined }]), 'session_summary_invalid');
  assert.equal(bad([{ ...entry, interrupted: 'no' }]), 'session_summary_invalid');
  assert.equal(bad([{ ...entry, busy: undefined }]), 'session_summary_invalid', 'busy is always written');
  assert.equal(bad([{ ...entry, message_count: '2' }]), 'session_summary_invalid');
  assert.equal(bad([{ ...entry, status: null }]), 'session_summary_invalid', 'neither a status nor an error');
});

test('the recipe app: the Cancel button ends a run whose tool waits, and the history stays valid', async () => {
  const stateDir = tempDir('arkagent-journey-cancel-');
  const script = JSON.stringify([{ tool_calls: [{ id: 'k1', name: 'slow_search', arguments: '{"query":"rye"}' }] },
    { content: 'never asked' }]);
  const screen = new J.RecipeScreen(script, stateDir, 'search', new J.RecipeBook());
  const sending = screen.send('find rye bread');
  // The call's events come as the answer streams, before the tool runs: wait for the tool itself.
  await until(() => screen.book.searches.length === 1, 'the slow search to run');
  assert.ok(screen.lines.includes('call slow_search {"query":"rye"}'));
  assert.equal(screen.busy, true);
  screen.tapCancel();
  await sending;
  assert.equal(screen.busy, false);
  assert.equal(screen.lastOutcome.status, 'cancelled');
  assert.equal(screen.lines.at(-1), 'run cancelled');
  assert.deepEqual(screen.errors, []);
  // The call is answered in the history (the next request is valid); the model is not asked again.
  const shown = await screen.conversation();
  assert.equal(shown.length, 3);
  assert.match(shown[2], /^slow_search failed: error \[tool_interrupted\]/);
  // A second tap after the run is over does nothing.
  screen.tapCancel();
});

test('ConversationMessage reads every role of a real state; a malformed message is a JsonError message_invalid', async () => {
  assert.deepEqual(await new B.Agent(B.AgentConfig.scripted('[]')).messages('missing'), [], 'no session: no messages');
  const config = B.AgentConfig.scripted(JSON.stringify([
    { content: 'Let me look.', reasoning_content: 'lookup first', tool_calls: [{ id: 'c1', name: 'nope', arguments: '{}' }] },
    { content: 'No such tool.' },
  ]));
  config.systemPrompt = 'Be brief.';
  const withSystem = new B.Agent(config);
  assert.equal((await withSystem.run('s', 'hi')).status, 'completed');
  const messages = await withSystem.messages('s');
  assert.deepEqual(messages.map((m) => m.role), ['system', 'user', 'assistant', 'tool', 'assistant']);
  assert.ok(messages.every((m) => m instanceof B.ConversationMessage));
  assert.deepEqual([messages[0].content, messages[1].content], ['Be brief.', 'hi']);
  assert.deepEqual([messages[2].content, messages[2].reasoningContent, messages[2].toolCalls.map((c) => [c.id, c.name])],
    ['Let me look.', 'lookup first', [['c1', 'nope']]]);
  assert.deepEqual([messages[3].toolCallId, messages[3].toolName, messages[3].isError], ['c1', 'nope', true]);
  assert.match(messages[3].content, /tool_not_found/);
  assert.deepEqual([messages[4].content, messages[4].isError, messages[4].toolCalls], ['No such tool.', false, []]);
  // The same from a state object the app already holds.
  const fromState = B.ConversationMessage.listFromState(await withSystem.state('s'));
  assert.deepEqual(fromState.map((m) => m.content), messages.map((m) => m.content));
  for (const bad of ['{"role":"robot","content":"x"}', '{"role":"tool","content":"x"}', '{"role":"user"}',
    '{"role":"assistant","tool_calls":{}}']) {
    assert.throws(() => B.ConversationMessage.fromJson(B.JsonObject.fromJsonString(bad)),
      (e) => e instanceof B.JsonError && e.code === 'message_invalid' && e.layer === 'decode', bad);
  }
});

/** What `fn` throws (or rejects with), as a UI shows it: [layer, code, message]. */
async function shown(fn) {
  try {
    await fn();
  } catch (e) {
    assert.ok(e instanceof Error, `an Error, not ${e}`);
    const info = B.agentErrorOf(e);
    return [info.layer, info.code, info.message];
  }
  assert.fail('expected an error');
}

test('mistakes the types cannot catch come back as Errors with code, layer and message', async () => {
  const agent = new B.Agent(B.AgentConfig.scripted(JSON.stringify([
    { tool_calls: [{ id: 'c1', name: 'delete_recipe', arguments: '{"name":"bagel","reason":"obsolete"}' }] },
    { content: 'done' },
  ])));
  agent.registerService(new J.RecipeBook());
  agent.registerTool(J.deleteRecipeDefinition(), new J.DeleteRecipe());
  // The same tool twice.
  assert.deepEqual(await shown(() => agent.registerTool(J.deleteRecipeDefinition(), new J.DeleteRecipe())),
    ['config', 'tool_name_duplicate', 'Tool already registered: delete_recipe']);
  // A schema keyword the validator does not enforce (format): refused at registration, with its place.
  const dated = new B.ToolDefinition('plan_bake', 'Plans a bake', new B.JsonObject().setString('type', 'object')
    .setObject('properties', new B.JsonObject().setObject('day',
      new B.JsonObject().setString('type', 'string').setString('format', 'date'))));
  assert.deepEqual(await shown(() => agent.registerTool(dated, new J.DeleteRecipe())),
    ['config', 'schema_unsupported_keyword', 'Unsupported JSON Schema keyword: format (at $.properties.day)']);
  // A tool name a model API would refuse.
  assert.deepEqual((await shown(() => agent.registerTool(new B.ToolDefinition('plan bake', 'd', '{"type":"object"}'),
    new J.DeleteRecipe())))[1], 'tool_name_invalid');
  // The bindings' own checks carry the layer of the error table too.
  assert.deepEqual((await shown(() => new B.ToolDefinition('t', 'd', '{"type":"object"}', B.ToolRiskLevel.safe, false, 0)))
    .slice(0, 2), ['config', 'tool_timeout_invalid']);
  assert.deepEqual((await shown(() => new B.ToolDefinition('t', 'd', '{"type":object}'))).slice(0, 2),
    ['decode', 'json_invalid']);
  assert.deepEqual(agent.toolNames(), ['delete_recipe'], 'a refused registration leaves the tools as they were');
  // Approving before anything is pending, and on a session that does not exist.
  assert.deepEqual((await shown(() => agent.approve('kitchen', 'x'))).slice(0, 2), ['persistence', 'session_not_found']);
  const suspended = await agent.run('kitchen', 'delete the bagel');
  assert.equal(suspended.status, 'awaiting_approval');
  // A new message while a decision is pending; resuming before deciding.
  assert.deepEqual((await shown(() => agent.run('kitchen', 'hello?'))).slice(0, 2), ['runtime', 'approval_pending']);
  assert.deepEqual((await shown(() => agent.resume('kitchen'))).slice(0, 2), ['runtime', 'approval_pending']);
  // Forgetting to await the approval before resuming: calls on one session run in the order made.
  const approving = agent.approve('kitchen', suspended.batch.items[0].approvalId);
  const done = await agent.resume('kitchen');
  assert.equal((await approving).pendingItems().length, 0);
  assert.equal(done.status, 'completed');
  // Deciding again once it is over.
  assert.deepEqual((await shown(() => agent.approve('kitchen', suspended.batch.items[0].approvalId))).slice(0, 2),
    ['runtime', 'no_pending_approval']);
  assert.deepEqual((await shown(() => agent.resume('kitchen'))).slice(0, 2), ['runtime', 'invalid_state']);
  // A bad session id.
  assert.deepEqual((await shown(() => agent.run('../etc', 'hi'))).slice(0, 2), ['config', 'session_id_invalid']);
});

test('forgetting to await setMetadata through the ArkTS Agent: the run after it still sees the value', async () => {
  const users = [];
  for (let i = 0; i < 10; i++) {
    const screen = new J.RecipeScreen(JSON.stringify([
      { tool_calls: [{ id: 'c1', name: 'lookup_recipe', arguments: '{"name":"bagel"}' }] }, { content: 'ok' }]),
    tempDir('arkagent-journey-meta-'), 'kitchen', new J.RecipeBook());
    const signingIn = screen.signIn(`u-${i}`); // not awaited: the mistake
    await screen.send('bagel?');
    await signingIn;
    assert.deepEqual(screen.errors, []);
    const line = screen.lines.find((l) => l.startsWith('lookup_recipe ok: '));
    users.push(JSON.parse(line.slice('lookup_recipe ok: '.length)).user);
  }
  assert.deepEqual(users, Array.from({ length: 10 }, (_, i) => `u-${i}`));
});

/** The layer of each code in the one error table (src/error.rs). */
function errorTable() {
  const text = fs.readFileSync(path.join(ROOT, 'src', 'error.rs'), 'utf8');
  const table = new Map();
  for (const m of text.matchAll(/^\s+[A-Z0-9_]+ = "([a-z0-9_]+)" => (\w+);/gm)) table.set(m[1], m[2].toLowerCase());
  assert.ok(table.size > 50, 'the table was read');
  return table;
}

test('every code the bindings throw as JsonError is in the error table, with the layer the table gives it', () => {
  const table = errorTable();
  const codes = new Set();
  for (const file of fs.readdirSync(path.join(ROOT, 'arkts-bindings', 'src', 'main', 'ets'), { recursive: true })) {
    if (!file.endsWith('.ets')) continue;
    const text = fs.readFileSync(path.join(ROOT, 'arkts-bindings', 'src', 'main', 'ets', file), 'utf8');
    for (const m of text.matchAll(/new JsonError\('([a-z0-9_]+)'/g)) codes.add(m[1]);
  }
  assert.ok(codes.size >= 15, [...codes].join(', '));
  const wrong = [];
  for (const code of codes) {
    const layer = new B.JsonError(code, 'm').layer;
    if (table.get(code) !== layer) wrong.push(`${code}: ${layer}, the table: ${table.get(code)}`);
  }
  assert.deepEqual(wrong, []);
  assert.equal(new B.ArkAgentError('recipe_not_found', 'm').layer, 'tool');
});

test('JsonObject.setStringArray / getStringArray: schema lists in one call, string arrays read back', async () => {
  const schema = new B.JsonObject().setString('type', 'object')
    .setObject('properties', new B.JsonObject().setObject('tags', new B.JsonObject().setString('type', 'array')
      .setObject('items', new B.JsonObject().setString('type', 'string').setStringArray('enum', ['sweet', 'salty']))))
    .setStringArray('required', ['tags']);
  assert.equal(schema.toJsonString(),
    '{"type":"object","properties":{"tags":{"type":"array","items":{"type":"string","enum":["sweet","salty"]}}},"required":["tags"]}');
  // The native validator enforces what the builder wrote.
  const registry = new B.ToolRegistry();
  class Tags {
    async execute(args) { return B.ToolResult.text(args.getStringArray('tags').join('+')); }
  }
  registry.register(new B.ToolDefinition('tag', 'Tags a recipe', schema), new Tags());
  const ok = await registry.execute(new B.ToolCall('c1', 'tag', '{"tags":["sweet","salty"]}'));
  assert.equal(ok.toModelText(), 'sweet+salty');
  await assert.rejects(registry.execute(new B.ToolCall('c2', 'tag', '{"tags":["sour"]}')),
    (e) => B.agentErrorOf(e).code === 'tool_argument_enum');
  await assert.rejects(registry.execute(new B.ToolCall('c3', 'tag', '{}')),
    (e) => B.agentErrorOf(e).code === 'tool_argument_required');
  const read = B.JsonObject.fromJsonString('{"a":["x","y"],"b":["x",1],"c":"x","d":[]}');
  assert.deepEqual([read.getStringArray('a'), read.getStringArray('b'), read.getStringArray('c'), read.getStringArray('d'),
    read.getStringArray('missing')], [['x', 'y'], undefined, undefined, [], undefined]);
});

test('an ArkTS executor that resolves to no ToolResult is tool_result_invalid, as a raw executor\'s answer is', async () => {
  const registry = new B.ToolRegistry();
  class Nothing {
    async execute() { return undefined; }
  }
  registry.register(new B.ToolDefinition('nothing', 'Returns nothing', '{"type":"object"}'), new Nothing());
  await assert.rejects(registry.execute(new B.ToolCall('c1', 'nothing', '{}')), (e) => {
    const info = B.agentErrorOf(e);
    return info.code === 'tool_result_invalid' && info.layer === 'tool' && /not a ToolResult/.test(info.message);
  });
  // The raw module's own answer to the same mistake, for comparison.
  const raw = new globalThis.__arkagentNative.ToolRegistry();
  raw.register({ name: 'nothing', description: 'd', parametersJson: '{"type":"object"}' }, () => undefined);
  await assert.rejects(raw.execute({ id: 'c1', name: 'nothing', arguments: '{}' }),
    (e) => e.code === 'tool_result_invalid' && e.layer === 'tool');
});

test('after a kill while a tool ran: status() says running, messages() shows the call answered as interrupted, resume() finishes', async () => {
  const { runUntilKilled } = await import('../../tests/node/helper.mjs');
  const stateDir = tempDir('arkagent-journey-killed-');
  // The raw-module app of tests/node/journey_app.mjs, killed once its slow tool runs.
  await runUntilKilled([path.join(ROOT, 'tests', 'node', 'journey_app.mjs'), stateDir, 'search'],
    (out) => out.includes('SEARCHING\n'), 'the killed app\'s tool runs', { env: { JOURNEY_CHILD: '1' } });
  const agent = new B.Agent(B.AgentConfig.scripted(JSON.stringify([{ content: 'Cut short.' }])));
  const onDisk = B.AgentConfig.scripted(JSON.stringify([{ content: 'Cut short.' }]));
  onDisk.stateDir = stateDir;
  const reopened = new B.Agent(onDisk);
  assert.equal(await agent.status('pantry'), undefined, 'another (in-memory) agent does not see it');
  assert.equal(await reopened.status('pantry'), B.RunStatus.running);
  // The listing after the restart offers Continue for it.
  assert.deepEqual(await agent.listSessions(), []);
  const [cut] = await reopened.listSessions();
  assert.deepEqual([cut.sessionId, cut.status, cut.interrupted, cut.canContinue(), cut.approvalPending],
    ['pantry', B.RunStatus.running, true, true, false]);
  // The history read back is already valid: the unfinished call is answered as interrupted.
  const before = await reopened.messages('pantry');
  assert.deepEqual(before.map((m) => m.role), ['system', 'user', 'assistant', 'tool']);
  assert.deepEqual(before[2].toolCalls.map((c) => c.name), ['slow_search']);
  assert.deepEqual([before[3].toolCallId, before[3].toolName, before[3].isError], [before[2].toolCalls[0].id, 'slow_search', true]);
  assert.match(before[3].content, /tool_interrupted/);
  const done = await reopened.resume('pantry');
  assert.equal(done.status, B.RunStatus.completed);
  const after = await reopened.messages('pantry');
  assert.deepEqual(after.map((m) => m.role), ['system', 'user', 'assistant', 'tool', 'assistant']);
  assert.equal(after[4].content, 'Cut short.');
  assert.equal(await reopened.status('pantry'), B.RunStatus.completed);
  const [finished] = await reopened.listSessions();
  assert.deepEqual([finished.status, finished.interrupted, finished.canContinue()], [B.RunStatus.completed, false, false]);
});
