// Host tests of the logic of entry-demo/ (the app's tools, the offline scenario and the chat
// transcript): those .ets files are transpiled to JS with '@arkagent/bindings' resolved to the
// transpiled bindings and 'libarkagent.so' to the fake native module. Pages and the ability are
// ArkUI / OHOS code and are covered by the ArkTS check instead. The same tools and scenario run
// against the real native registry in tests/node/demo_tools.test.mjs.
// Run: node --test scripts/arkts-check/demo.test.mjs

import { test, before } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { transpileBindings, transpileFile } from './transpile.mjs';
import { tempDir } from './tmp.mjs';

const HERE = path.dirname(fileURLToPath(import.meta.url));
const ROOT = path.resolve(HERE, '..', '..');
const DEMO_ETS = path.join(ROOT, 'entry-demo', 'entry', 'src', 'main', 'ets');
const EVENTS = path.join(ROOT, 'tests', 'fixtures', 'agent_events', 'events.jsonl');
export const DEMO_LOGIC = ['tools/BakingTools', 'tools/OrderTools', 'demo/OfflineScenario', 'demo/Transcript',
  'demo/Conversations', 'demo/DemoMode'];

let B; // the bindings
let D; // the demo's logic modules

before(async () => {
  const dir = tempDir('arkagent-demo-');
  const barrel = transpileBindings(path.join(ROOT, 'arkts-bindings', 'src', 'main', 'ets'), dir,
    { 'libarkagent.so': path.join(HERE, 'fakes', 'libarkagent.mjs') });
  B = await import(pathToFileURL(barrel).href);
  D = {};
  for (const rel of DEMO_LOGIC) {
    const out = path.join(dir, 'demo', `${rel}.mjs`);
    transpileFile(path.join(DEMO_ETS, `${rel}.ets`), out, { '@arkagent/bindings': barrel });
    Object.assign(D, await import(pathToFileURL(out).href));
  }
});

function ctx(signal = new B.CancellationSignal()) {
  return new B.ToolContext('s1', 'c1', 'b1', signal);
}

const args = (o) => B.JsonObject.fromJsonString(JSON.stringify(o));
const wire = (result) => JSON.parse(result.toJson().toJsonString());

test('the demo takes the native declarations from the HAR (one index.d.ts in the repo)', () => {
  const manifest = fs.readFileSync(path.join(ROOT, 'entry-demo/entry/oh-package.json5'), 'utf8');
  const dep = /"libarkagent\.so":\s*"file:([^"]+)"/.exec(manifest);
  assert.ok(dep, 'entry/oh-package.json5 depends on libarkagent.so by file:');
  const dir = path.resolve(ROOT, 'entry-demo/entry', dep[1]);
  assert.equal(dir, path.join(ROOT, 'arkts-bindings/src/main/cpp/types/libarkagent'));
  assert.ok(fs.existsSync(path.join(dir, 'index.d.ts')) && fs.existsSync(path.join(dir, 'oh-package.json5')));
});

test('read_baking_records: one record, all records, an unknown id, a cancelled call', async () => {
  const store = new D.BakingStore();
  const tool = new D.ReadBakingRecordsTool(store);
  assert.deepEqual(wire(await tool.execute(args({ recordId: 'r1' }), ctx())).contents,
    [{ type: 'json', value: { id: 'r1', product: 'baguette', grams: 500, baked_on: '2026-10-08' } }]);
  const all = wire(await tool.execute(args({}), ctx())).contents[0].value.records;
  assert.deepEqual(all.map((r) => `${r.product} ${r.grams}g`), ['baguette 500g', 'toast 680g', 'bagel 320g']);
  const missing = await tool.execute(args({ recordId: 'r9' }), ctx());
  assert.equal(missing.isError, true);
  assert.match(missing.toModelText(), /r9/);
  const signal = new B.CancellationSignal();
  signal.cancel('user left');
  const cancelled = await tool.execute(args({ recordId: 'r1' }), ctx(signal));
  assert.deepEqual([cancelled.isError, cancelled.toModelText()], [true, 'cancelled: user left']);
  const def = D.readBakingRecordsDefinition();
  assert.deepEqual([def.name, def.riskLevel, def.idempotent], ['read_baking_records', 'safe', true]);
});

test('clear_baking_cache is dangerous, needs confirm "yes", and empties the shared cache once', async () => {
  const def = D.clearBakingCacheDefinition();
  assert.equal(def.riskLevel, 'dangerous');
  assert.deepEqual(JSON.parse(def.parametersJson()).required, ['confirm']);
  const store = new D.BakingStore();
  const tool = new D.ClearBakingCacheTool(store);
  const refused = await tool.execute(args({ confirm: 'no' }), ctx());
  assert.equal(refused.isError, true);
  assert.equal(store.cachedEntries, 12);
  const done = await tool.execute(args({ confirm: 'yes' }), ctx());
  assert.deepEqual([done.isError, done.toModelText(), done.metadata.getNumber('removed')],
    [false, 'baking cache cleared: 12 entries removed', 12]);
  assert.equal(store.cachedEntries, 0);
  assert.equal((await tool.execute(args({ confirm: 'yes' }), ctx())).metadata.getNumber('removed'), 0);
});

test('query_order knows order 20261010 (shipped, SF123456, 2026-10-12); other ids are error results', async () => {
  const tool = new D.QueryOrderTool();
  assert.deepEqual(wire(await tool.execute(args({ order_id: '20261010' }), ctx())).contents[0].value,
    { order_id: '20261010', status: 'shipped', logistics: 'SF Express SF123456', eta: '2026-10-12' });
  const missing = await tool.execute(args({ order_id: '1' }), ctx());
  assert.deepEqual([missing.isError, missing.toModelText()], [true, 'order not found: 1']);
  assert.deepEqual(JSON.parse(D.queryOrderDefinition().parametersJson()).required, ['order_id']);
});

test('query_stock: SKU001 in stock (any case), SKU002 out of stock, unknown SKUs are error results', async () => {
  const tool = new D.QueryStockTool();
  const sku1 = wire(await tool.execute(args({ sku: 'sku001' }), ctx())).contents[0].value;
  assert.deepEqual([sku1.sku, sku1.quantity, sku1.in_stock], ['SKU001', 42, true]);
  assert.equal(wire(await tool.execute(args({ sku: 'SKU002' }), ctx())).contents[0].value.in_stock, false);
  assert.equal((await tool.execute(args({ sku: 'X' }), ctx())).isError, true);
  assert.deepEqual(JSON.parse(D.queryStockDefinition().parametersJson()).properties.sku, { type: 'string', description: 'SKU code' });
});

test('the offline scenario: a call, an unknown tool, an invalid argument, an approval, then the final answer', () => {
  const run = JSON.parse(D.offlineRunScript());
  assert.equal(run.length, 5);
  const calls = run.flatMap((a) => a.tool_calls ?? []);
  assert.deepEqual(calls.map((c) => c.name),
    ['query_order', 'check_weather', 'query_stock', 'query_stock', 'clear_baking_cache']);
  for (const c of calls) {
    assert.equal(typeof c.arguments, 'string', 'arguments are raw JSON text, as a model sends them');
    assert.equal(typeof JSON.parse(c.arguments), 'object');
  }
  const ids = calls.map((c) => c.id);
  assert.equal(new Set(ids).size, ids.length, 'call ids are unique');
  const known = new Set(['read_baking_records', 'clear_baking_cache', 'query_order', 'query_stock']);
  assert.deepEqual(calls.filter((c) => !known.has(c.name)).map((c) => c.name), ['check_weather']);
  assert.equal(typeof JSON.parse(calls[2].arguments).sku, 'number', 'the invalid argument: sku must be a string');
  assert.ok(run.every((a) => typeof a.content === 'string'));
  assert.equal(run[4].tool_calls, undefined, 'the last answer is the final text');
  // resume() replays only what follows the approval batch.
  assert.deepEqual(JSON.parse(D.offlineResumeScript()), run.slice(D.resumeStep()));
  assert.equal(D.resumeStep(), 4);
});

test('offline and online modes keep their conversations apart; a base URL without a key is online', () => {
  const offline = D.DemoMode.of('', '');
  assert.equal(offline.offline, true);
  // A keyless local gateway, and a key with the preset's own URL: online.
  for (const [url, key] of [['http://192.168.1.20:8000/v1', ''], ['', 'sk-x'], ['https://gw/v1', 'sk-x']]) {
    const mode = D.DemoMode.of(url, key);
    assert.equal(mode.offline, false, `${url} ${key}`);
    assert.notEqual(mode.stateDirName, offline.stateDirName, 'each mode has its own state directory, so its own sessions');
  }
  assert.equal(D.DemoMode.of('  ', '').offline, true, 'a blank base URL is none');
});

test('the offline resume goes on from where the conversation stands, never past an approval not made', () => {
  const run = JSON.parse(D.offlineRunScript());
  const user = new B.ConversationMessage(B.ConversationRole.user, 'hi');
  const answer = new B.ConversationMessage(B.ConversationRole.assistant, 'a');
  const result = new B.ConversationMessage(B.ConversationRole.tool, 'r', [], undefined, 'c', 'query_order');
  const older = [user, answer, result, answer, result, answer, result, answer, result, answer];
  // Killed while the model's second answer was awaited: the script goes on from it, the approval
  // step included.
  const killed = JSON.parse(D.offlineResumeScriptFor([...older, user, answer, result]));
  assert.deepEqual(killed, run.slice(1));
  assert.ok(killed.some((a) => (a.tool_calls ?? []).some((c) => c.name === 'clear_baking_cache')));
  // Killed before any answer: the whole scenario.
  assert.deepEqual(JSON.parse(D.offlineResumeScriptFor([user])), run);
  // Suspended for approval (four answers, the last one's calls frozen): the final answer only.
  const suspended = [user, answer, result, answer, result, answer, result, answer];
  assert.deepEqual(JSON.parse(D.offlineResumeScriptFor(suspended)), JSON.parse(D.offlineResumeScript()));
});

function events() {
  return fs.readFileSync(EVENTS, 'utf8').trim().split('\n').map((l) => B.AgentEvent.fromJsonString(l));
}

test('the transcript streams text, fills tool bubbles from deltas and results, and notes approvals', () => {
  const t = new D.Transcript();
  t.addUser('where is my order?');
  const ev = (o) => t.apply(B.AgentEvent.fromJsonString(JSON.stringify(o)));
  ev({ type: 'run_started', session_id: 's', run_id: 'r', resumed: false });
  ev({ type: 'text_delta', delta: 'Let me ' });
  const afterFirst = t.snapshot();
  ev({ type: 'text_delta', delta: 'check.' });
  const items = t.snapshot();
  assert.deepEqual(items.map((i) => i.kind), ['user', 'assistant']);
  assert.equal(items[1].text, 'Let me check.', 'deltas are appended to one bubble');
  assert.notEqual(afterFirst[1].key(), items[1].key(), 'a changed bubble gets a new key');
  assert.equal(afterFirst[0].key(), items[0].key(), 'an unchanged bubble keeps its key');
  ev({ type: 'tool_call_started', index: 0, id: 'c1', name: 'query_order' });
  ev({ type: 'tool_call_arguments_delta', index: 0, delta: '{"order_id":' });
  ev({ type: 'tool_call_arguments_delta', index: 0, delta: '"20261010"}' });
  let tool = t.snapshot()[2];
  assert.deepEqual([tool.kind, tool.toolName, tool.argumentsText, tool.finished], ['tool', 'query_order', '{"order_id":"20261010"}', false]);
  ev({ type: 'tool_call_finished', index: 0, call: { id: 'c1', name: 'query_order', arguments: '{"order_id":"20261010"}' } });
  ev({ type: 'tool_result', call_id: 'c1', name: 'query_order',
    result: { contents: [{ type: 'json', value: { status: 'shipped' } }], is_error: false, stop: false } });
  tool = t.snapshot()[2];
  assert.deepEqual([tool.resultText, tool.isError, tool.finished], ['{"status":"shipped"}', false, true]);
  ev({ type: 'tool_result', call_id: 'c9', name: 'check_weather',
    result: { contents: [{ type: 'text', text: 'tool_not_found: check_weather' }], is_error: true, stop: false } });
  assert.equal(t.snapshot()[3].isError, true, 'a result without a streamed call still gets a bubble');
  ev({ type: 'text_delta', delta: 'It shipped.' });
  assert.equal(t.snapshot()[4].text, 'It shipped.', 'text after tools opens a new bubble');
  ev({ type: 'run_finished', status: 'completed', final_text: 'It shipped.',
    usage: { prompt_tokens: 1, completion_tokens: 1, total_tokens: 2 } });
  assert.equal(t.size(), 5, 'a streamed final text is not repeated');
});

test('the fixed answer of a run that reached its round limit is shown after streamed text', () => {
  const t = new D.Transcript();
  const ev = (o) => t.apply(B.AgentEvent.fromJsonString(JSON.stringify(o)));
  ev({ type: 'run_started', session_id: 's', run_id: 'r', resumed: false });
  ev({ type: 'text_delta', delta: 'Checking again.' });
  ev({ type: 'tool_call_finished', index: 0, call: { id: 'c1', name: 'query_order', arguments: '{}' } });
  ev({ type: 'run_finished', status: 'max_rounds', final_text: 'Sorry, I could not finish this.' });
  assert.deepEqual(t.snapshot().map((i) => `${i.kind}:${i.kind === 'tool' ? i.toolName : i.text}`), [
    'assistant:Checking again.', 'tool:query_order', 'assistant:Sorry, I could not finish this.', 'notice:Run ended: max_rounds',
  ]);
});

test('a worker\'s calls get prefixed bubbles of their own; its text and approvals stay out of the chat', () => {
  const t = new D.Transcript();
  const ev = (o) => t.apply(B.AgentEvent.fromJsonString(JSON.stringify(o)));
  const worker = (event) => ev({ type: 'worker_event', call_id: 'c1', session_id: 'w1', event });
  const ok = (text) => ({ contents: [{ type: 'text', text }], is_error: false, stop: false });
  ev({ type: 'tool_call_finished', index: 0, call: { id: 'c1', name: 'delegate_task', arguments: '{"task":"t"}' } });
  worker({ type: 'run_started', session_id: 'w1', run_id: 'wr', resumed: false });
  worker({ type: 'text_delta', delta: 'thinking aloud' });
  // The worker numbers its calls on its own: its c1 is not the parent's c1.
  worker({ type: 'tool_call_finished', index: 0, call: { id: 'c1', name: 'query_stock', arguments: '{"sku":"A"}' } });
  const call = { id: 'c2', name: 'clear_baking_cache', arguments: '{}' };
  worker({ type: 'approval_required', batch: { batch_id: 'b', run_id: 'wr', created_at_ms: 1,
    items: [{ approval_id: 'a1', tool_call: call, arguments_hash: 'h', risk_level: 'dangerous', reason: 'r',
      created_at_ms: 1, decision: 'pending' }],
    assistant_message: { role: 'assistant', tool_calls: [call] } } });
  worker({ type: 'tool_result', call_id: 'c1', name: 'query_stock', result: ok('A: 12') });
  worker({ type: 'run_finished', status: 'completed', final_text: 'A has 12' });
  ev({ type: 'tool_result', call_id: 'c1', name: 'delegate_task', result: ok('A has 12') });
  const items = t.snapshot();
  assert.deepEqual(items.map((i) => [i.kind, i.toolName, i.argumentsText, i.resultText, i.finished]), [
    ['tool', 'delegate_task', '{"task":"t"}', 'A has 12', true],
    ['tool', 'worker › query_stock', '{"sku":"A"}', 'A: 12', true],
  ]);
});

test('the transcript of the Rust event fixture, of a non-streamed answer, and of a failed or cancelled run', () => {
  const t = new D.Transcript();
  for (const e of events()) t.apply(e);
  const kinds = t.snapshot().map((i) => i.kind);
  // The fixture's run_finished (before its worker_event line) is a failed run's: its error shows.
  assert.deepEqual(kinds, ['assistant', 'tool', 'notice', 'error', 'tool']);
  assert.equal(t.snapshot()[3].text, 'failed: provider_auth: HTTP 401: Incorrect API key provided: <redacted>');
  assert.deepEqual([t.snapshot()[4].toolName, t.snapshot()[4].resultText, t.snapshot()[4].finished],
    ['worker › worker › query_stock', '12', true], 'a worker\'s worker\'s result gets its own bubble');
  assert.deepEqual([t.snapshot()[1].argumentsText, t.snapshot()[1].resultText], ['{"order_id":"20261010"}', '{"status":"shipped"}'],
    'the result of call-1 lands in its bubble');
  assert.match(t.snapshot()[2].text, /approval: clear_baking_cache/);
  const quiet = new D.Transcript();
  quiet.apply(B.AgentEvent.fromJsonString('{"type":"run_started","session_id":"s","run_id":"r","resumed":true}'));
  quiet.apply(B.AgentEvent.fromJsonString('{"type":"run_finished","status":"completed","final_text":"Done."}'));
  assert.deepEqual(quiet.snapshot().map((i) => `${i.kind}:${i.text}`), ['notice:Run resumed', 'assistant:Done.']);
  quiet.apply(B.AgentEvent.fromJsonString('{"type":"run_finished","status":"cancelled"}'));
  assert.equal(quiet.snapshot().at(-1).text, 'Run ended: cancelled');
  const outcome = B.RunOutcome.fromObject({ status: 'failed', errorCode: 'provider_http', errorLayer: 'provider',
    errorMessage: 'HTTP 401', usageJson: '{}' });
  quiet.applyOutcome(outcome);
  assert.deepEqual([quiet.snapshot().at(-1).kind, quiet.snapshot().at(-1).text], ['error', 'failed: provider_http: HTTP 401']);
  // A run whose run_finished showed its error: the outcome does not show it twice.
  const shown = new D.Transcript();
  shown.apply(B.AgentEvent.fromJsonString(JSON.stringify({ type: 'run_finished', status: 'failed', final_text: null,
    error: { layer: 'provider', code: 'provider_http', message: 'HTTP 401' } })));
  shown.applyOutcome(outcome);
  assert.deepEqual(shown.snapshot().map((i) => `${i.kind}:${i.text}`), ['error:failed: provider_http: HTTP 401']);
});

test('the transcript of a persisted session (after the app was killed)', () => {
  const state = B.JsonObject.fromJsonString(JSON.stringify({
    schema_version: 3, session_id: 's1', status: 'awaiting_approval',
    messages: [
      { role: 'system', content: 'You are...' },
      { role: 'user', content: 'clear the cache' },
      { role: 'assistant', content: 'Checking first.', tool_calls: [{ id: 'c1', name: 'query_order', arguments: '{"order_id":"20261010"}' }] },
      { role: 'tool', tool_call_id: 'c1', name: 'query_order', content: '{"status":"shipped"}' },
      { role: 'assistant', tool_calls: [{ id: 'c2', name: 'clear_baking_cache', arguments: '{"confirm":"yes"}' }] },
      { role: 'tool', tool_call_id: 'c3', name: 'x', content: 'orphan', is_error: true },
    ],
  }));
  const items = D.Transcript.fromState(state).snapshot();
  assert.deepEqual(items.map((i) => i.kind), ['user', 'assistant', 'tool', 'tool']);
  assert.deepEqual([items[2].resultText, items[2].finished], ['{"status":"shipped"}', true]);
  assert.deepEqual([items[3].toolName, items[3].finished], ['clear_baking_cache', false], 'the pending call has no result yet');
  assert.equal(D.Transcript.fromState(new B.JsonObject()).size(), 0);
});

// The project files hvigor reads: every JSON/JSON5 file parses, every $string/$media/$color/$profile
// reference of the manifests resolves to a resource, every page and ability source exists, and the
// modules and dependencies point at real folders. (No HAP can be built here; this is what can be
// checked of the layout without the SDK.)
test('the Chats list: most recent first, state in words with its age, Continue only for a cut-short run', () => {
  const now = 1_000_000_000;
  const entry = (o) => ({ approval_pending: false, interrupted: false, busy: false, message_count: 3, updated_at_ms: now,
    title: null, parent_session: null, error: null, status: 'completed', ...o });
  const summaries = B.SessionSummary.listFromJsonString(JSON.stringify([
    entry({ session_id: 'a', title: 'Where is order 20261010?', updated_at_ms: now - 5 * 60_000 }),
    entry({ session_id: 'b', status: 'running', interrupted: true, title: 'Clear the cache', updated_at_ms: now - 3 * 3_600_000 }),
    entry({ session_id: 'c', status: 'awaiting_approval', approval_pending: true, title: 'Wipe it', updated_at_ms: now - 1000 }),
    entry({ session_id: 'd', status: null, error: { layer: 'persistence', code: 'state_corrupt', message: 'x' },
      updated_at_ms: now - 2 * 86_400_000 }),
    entry({ session_id: 'e', status: 'idle', updated_at_ms: null }),
    entry({ session_id: 'f', status: 'failed', title: 'Order?', last_message: 'Order?', updated_at_ms: null,
      run_error: { layer: 'provider', code: 'provider_auth', message: '401' } }),
    entry({ session_id: 'g', status: 'running', busy: true, title: 'Elsewhere', updated_at_ms: now - 2 * 60_000 }),
    // Frozen, and another window holds it now (deciding or resuming it): no dialog here.
    entry({ session_id: 'h', status: 'awaiting_approval', approval_pending: true, busy: true, title: 'Decided elsewhere',
      updated_at_ms: now - 10 * 60_000 }),
  ]));
  const rows = D.ConversationRow.fromSummaries(summaries, 'a', now);
  assert.deepEqual(rows.map((r) => [r.sessionId, r.title, r.detail, r.canContinue, r.needsApproval, r.damaged, r.current]), [
    ['c', 'Wipe it', 'waiting for your approval · just now', false, true, false, false],
    ['g', 'Elsewhere', 'in use by another window · 2 min ago', false, false, false, false],
    ['a', 'Where is order 20261010?', 'answered · 5 min ago', false, false, false, true],
    ['h', 'Decided elsewhere', 'in use by another window · 10 min ago', false, false, false, false],
    ['b', 'Clear the cache', 'interrupted: tap Continue · 3 h ago', true, false, false, false],
    ['d', 'd', 'unreadable (state_corrupt) · 2 d ago', false, false, true, false],
    ['e', 'e', 'new', false, false, false, false],
    ['f', 'Order?', 'failed (provider_auth)', false, false, false, false],
  ]);
  assert.deepEqual(rows.map((r) => r.preview), ['', '', '', '', '', '', '', 'Order?']);
  assert.equal(D.ConversationRow.find(rows, 'b').canContinue, true);
  // Held by another window: the page then shows a notice instead of the approval dialog.
  assert.deepEqual(rows.filter((r) => r.heldElsewhere).map((r) => r.sessionId), ['g', 'h']);
  assert.equal(D.ConversationRow.find(rows, 'zz'), undefined);
  assert.notEqual(rows[0].key(), D.ConversationRow.fromSummaries(summaries, 'c', now)[0].key(), 'a new current redraws');
  assert.equal(D.statusText(B.RunStatus.maxRounds), 'stopped: too many steps');
  assert.equal(D.ageText(now - 59_999, now), 'just now');
  assert.equal(D.ageText(now + 5000, now), 'just now', 'a clock that went back');
});

test('the DevEco project layout is complete and every reference in it resolves', async () => {
  const { createRequire } = await import('node:module');
  const JSON5 = createRequire(import.meta.url)('json5');
  const demo = path.join(ROOT, 'entry-demo');
  const read = (rel) => JSON5.parse(fs.readFileSync(path.join(demo, rel), 'utf8'));
  for (const rel of ['AppScope/app.json5', 'build-profile.json5', 'hvigorfile.ts', 'hvigor/hvigor-config.json5',
    'oh-package.json5', 'entry/build-profile.json5', 'entry/hvigorfile.ts', 'entry/oh-package.json5',
    'entry/src/main/module.json5', 'entry/src/main/resources/base/profile/main_pages.json',
    'entry/libs/arm64-v8a/.gitkeep', 'entry/libs/x86_64/.gitkeep']) {
    assert.ok(fs.existsSync(path.join(demo, rel)), rel);
  }
  const resources = (base) => {
    const names = new Set();
    for (const kind of ['string', 'color']) {
      const file = path.join(base, 'element', `${kind}.json`);
      if (fs.existsSync(file)) for (const e of JSON5.parse(fs.readFileSync(file, 'utf8'))[kind]) names.add(`$${kind}:${e.name}`);
    }
    for (const dir of ['media', 'profile']) {
      if (!fs.existsSync(path.join(base, dir))) continue;
      for (const f of fs.readdirSync(path.join(base, dir))) names.add(`$${dir}:${f.replace(/\.[^.]+$/, '')}`);
    }
    return names;
  };
  const appRes = resources(path.join(demo, 'AppScope/resources/base'));
  const entryRes = resources(path.join(demo, 'entry/src/main/resources/base'));
  const refs = (text) => [...text.matchAll(/"\$(string|media|color|profile):(\w+)"/g)].map((m) => `$${m[1]}:${m[2]}`);
  for (const ref of refs(fs.readFileSync(path.join(demo, 'AppScope/app.json5'), 'utf8'))) assert.ok(appRes.has(ref), ref);
  const moduleText = fs.readFileSync(path.join(demo, 'entry/src/main/module.json5'), 'utf8');
  const moduleRefs = refs(moduleText);
  assert.ok(moduleRefs.length >= 6);
  for (const ref of moduleRefs) assert.ok(entryRes.has(ref), ref);
  // $r('app.string.x') / $r('app.color.x') in the pages resolve too.
  const etsRefs = fs.readdirSync(DEMO_ETS, { recursive: true }).filter((f) => f.endsWith('.ets'))
    .flatMap((f) => [...fs.readFileSync(path.join(DEMO_ETS, f), 'utf8').matchAll(/\$r\('app\.(string|color|media)\.(\w+)'\)/g)])
    .map((m) => `$${m[1]}:${m[2]}`);
  assert.ok(etsRefs.length > 10);
  for (const ref of etsRefs) assert.ok(entryRes.has(ref), `${ref} used by a page`);
  const mod = read('entry/src/main/module.json5').module;
  assert.equal(mod.pages, '$profile:main_pages');
  for (const page of read('entry/src/main/resources/base/profile/main_pages.json').src) {
    assert.ok(fs.existsSync(path.join(DEMO_ETS, `${page}.ets`)), page);
  }
  assert.equal(mod.mainElement, mod.abilities[0].name);
  assert.ok(fs.existsSync(path.join(demo, 'entry/src/main', mod.abilities[0].srcEntry)));
  const profile = read('build-profile.json5');
  for (const m of profile.modules) assert.ok(fs.existsSync(path.join(demo, m.srcPath, 'src/main/module.json5')), m.name);
  assert.equal(read('entry/build-profile.json5').apiType, 'stageMode');
  const deps = read('entry/oh-package.json5').dependencies;
  assert.equal(read(path.join('entry', deps['@arkagent/bindings'].slice(5), 'oh-package.json5')).name, '@arkagent/bindings');
  const native = read(path.join('entry', deps['libarkagent.so'].slice(5), 'oh-package.json5'));
  assert.equal(native.name, 'libarkagent.so');
  assert.equal(native.types, './index.d.ts');
  // The .so that scripts/build-ohos.sh copies into libs/<abi>/ is never committed.
  const { spawnSync } = await import('node:child_process');
  for (const abi of ['arm64-v8a', 'x86_64']) {
    const ignored = spawnSync('git', ['check-ignore', '-q', `entry-demo/entry/libs/${abi}/libarkagent.so`], { cwd: ROOT });
    assert.equal(ignored.status, 0, `entry-demo/entry/libs/${abi}/libarkagent.so must be git-ignored`);
  }
});
