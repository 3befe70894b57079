// The child process of soak.test.mjs: drives the real module with a seeded random interleaving of
// its whole API (runs, resumes, dismissals, approvals and denials, cancellations, metadata, listings,
// state reads, deletions, tool registrations, hooks, approval policies, agents dropped mid-run and
// garbage-collected) from several Agent objects, two of them sharing a state directory, against a
// local mock model whose answers (tool batches, texts, rate limits, errors, broken and slow streams)
// follow from the seed and the conversation. Then a fresh agent drives every session to an end.
//
// It checks, and prints as {"violations": [...]} (exit code 1 when there are any):
// - every promise the module returns settles, and every rejection is an Error whose code is in the
//   table of src/error.rs with a known layer and is one this method documents;
// - every outcome has a known status, and its error code is in the table;
// - no tool call (state directory, session, call id) runs twice; a sensitive or dangerous call runs
//   only after an approve() of it was asked for; no call runs after its denial was acknowledged
//   (nor before, but for a denial on a sub-agent's mirror, see deniedAcked); an acknowledged
//   decision reads back as made on its session;
// - events have a known type, and every run's segments (run_started, again on each resume, to
//   approval_required or run_finished) end with one run_finished (but for a deleted session's);
// - afterwards a fresh agent brings every session to a terminal status, nothing interrupted,
//   pending or busy, and every state keeps the pairing invariant (each call answered once, each
//   tool message answering a call);
// - the API key appears in no event, outcome, error, tool context or file of the state directories.
//
// Environment: ARKAGENT_SO (the module), SOAK_SEED (default 1), SOAK_STEPS (operations, default 300),
// SOAK_VERBOSE (progress and failed outcomes on stderr), SOAK_SABOTAGE=forget_approvals (the
// self-test: the soak forgets the approvals it asked for, so the check must report the calls).
// Run with --expose-gc. The model's answers follow from the seed; the interleaving also depends on
// timing, so a seed reproduces the operations, not always the same race.
import { appendFileSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { loadModule, repoRoot } from './helper.mjs';
import { startMock } from './mock_openai.mjs';

const SEED = Number(process.env.SOAK_SEED ?? 1);
const STEPS = Number(process.env.SOAK_STEPS ?? 300);
const KEY = 'sk-soak-0123456789abcdef';
const { Agent, CancellationHandle } = loadModule();

// --- randomness: a seeded generator for the operations, a hash for the model's and tools' choices
function mulberry32(a) {
  return () => {
    a |= 0;
    a = (a + 0x6d2b79f5) | 0;
    let t = Math.imul(a ^ (a >>> 15), 1 | a);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}
function hash(text) {
  let h = 0x811c9dc5;
  for (let i = 0; i < text.length; i++) {
    h = Math.imul(h ^ text.charCodeAt(i), 0x01000193);
  }
  return h >>> 0;
}
const rng = mulberry32(SEED);
const pick = (list, r = rng) => list[Math.floor(r() * list.length)];
const chance = (p) => rng() < p;

// --- what is checked
const violations = [];
const violate = (what) => {
  if (violations.length < 50) violations.push(what);
};
// The stable codes: the `codes` table of src/error.rs (`NAME = "code" => Layer;`).
const CODES = new Set(
  [...readFileSync(join(repoRoot, 'src/error.rs'), 'utf8').matchAll(/=\s*"([a-z0-9_]+)"\s*=>\s*[A-Za-z]+;/g)].map((m) => m[1]),
);
const LAYERS = new Set(['config', 'decode', 'tool', 'cancelled', 'runtime', 'provider', 'persistence', 'internal']);
const STATUSES = new Set(['idle', 'running', 'awaiting_approval', 'completed', 'cancelled', 'failed', 'loop_detected', 'aborted', 'max_rounds']);
const TERMINAL = new Set(['completed', 'cancelled', 'failed', 'loop_detected', 'aborted', 'max_rounds']);
const EVENT_TYPES = new Set(['run_started', 'text_delta', 'reasoning_delta', 'tool_call_started', 'tool_call_arguments_delta',
  'tool_call_finished', 'approval_required', 'tool_result', 'state_persisted', 'run_finished', 'worker_event']);
// What each method documents it may reject with (index.d.ts), beyond store I/O failures.
const BUSY = ['session_busy', 'state_io'];
const DOCUMENTED = {
  run: ['approval_pending', 'invalid_state', 'session_id_invalid', 'config_invalid', ...BUSY],
  resume: ['session_not_found', 'approval_pending', 'invalid_state', 'delegation_depth_exceeded', 'session_id_invalid', ...BUSY],
  dismiss: ['no_pending_approval', 'session_not_found', 'invalid_state', 'delegation_depth_exceeded', 'session_id_invalid', ...BUSY],
  approve: ['no_pending_approval', 'approval_not_found', 'approval_already_decided', 'session_not_found', 'session_id_invalid', ...BUSY],
  deny: ['no_pending_approval', 'approval_not_found', 'approval_already_decided', 'session_not_found', 'session_id_invalid', ...BUSY],
  setMetadata: ['metadata_key_invalid', 'json_invalid', 'json_too_deep', 'json_too_large', 'metadata_too_large', 'session_id_invalid', 'invalid_state', ...BUSY],
  stateJson: ['session_id_invalid', 'state_io'],
  pendingApprovalJson: ['session_id_invalid', 'state_io'],
  listSessionsJson: ['state_io'],
  deleteSession: ['session_id_invalid', 'invalid_state', ...BUSY],
};
const progress = (what) => process.env.SOAK_VERBOSE && console.error(`[soak] ${what}`);
const counts = {};
const count = (what) => (counts[what] = (counts[what] ?? 0) + 1);

function checkError(op, e) {
  if (!(e instanceof Error)) {
    violate(`${op} rejected with a non-Error: ${String(e)}`);
    return;
  }
  count(`${op} rejected ${e.code}`);
  if (!CODES.has(e.code) || !LAYERS.has(e.layer)) {
    violate(`${op} rejected with code ${e.code} / layer ${e.layer}: ${e.message}`);
  } else if (!DOCUMENTED[op]?.includes(e.code)) {
    violate(`${op} rejected with ${e.code} (${e.layer}), not documented for it: ${e.message}`);
  }
  if (e.message.includes(KEY)) violate(`${op}: the API key in an error message`);
}

function checkOutcome(op, out) {
  count(`${op} ${out.status}${out.errorCode ? ` ${out.errorCode}` : ''}`);
  if (process.env.SOAK_VERBOSE && out.errorCode) console.error(op, out.errorCode, out.errorMessage);
  if (!TERMINAL.has(out.status) && out.status !== 'awaiting_approval') violate(`${op}: status ${out.status}`);
  if (out.errorCode !== undefined && (!CODES.has(out.errorCode) || !LAYERS.has(out.errorLayer))) {
    violate(`${op}: outcome error ${out.errorCode} / ${out.errorLayer}`);
  }
  if (out.status === 'awaiting_approval' && !Array.isArray(JSON.parse(out.batchJson ?? 'null')?.items)) {
    violate(`${op}: awaiting_approval without a batch`);
  }
  if (JSON.stringify(out).includes(KEY)) violate(`${op}: the API key in an outcome`);
}

// What happened, for a violation's story (SOAK_VERBOSE prints the lines of its session): each call
// with its agent, directory and session (`label`, set by the caller before it calls), how it
// settled, and the runs' first and last events.
const trace = [];
let label = '';
const note = (line) => trace.length < 100_000 && trace.push(line);
const handles = new Set(); // the CancellationHandles of the calls in flight
// Every call into the module goes through track(): in flight until it settles. A rejection is
// checked against what `op` documents unless the caller checks it (`onError`).
const inFlight = new Set();
function track(op, promise, onValue, onError = (e) => checkError(op, e)) {
  const entry = { op, since: Date.now() };
  const where = label;
  note(`${where} ${op} called`);
  inFlight.add(entry);
  entry.done = promise.then(
    (value) => {
      note(`${where} ${op} -> ${typeof value === 'string' ? value.slice(0, 300) : JSON.stringify(value)?.slice(0, 300)}`);
      if (onValue) onValue(value);
      return value;
    },
    (e) => {
      note(`${where} ${op} rejected ${e?.code}`);
      onError(e);
      return undefined;
    },
  ).finally(() => inFlight.delete(entry));
  return entry.done;
}
/**
 * Runs, resumes or dismisses (`op`) through `start(handle)` with a new CancellationHandle that the
 * 'cancel' operation may pick while the call is in flight.
 */
function cancellable(op, start) {
  const handle = new CancellationHandle();
  handles.add(handle);
  return call(op, () => start(handle), (o) => checkOutcome(op, o)).finally(() => handles.delete(handle));
}
/** Whether one of `promises` settles within `ms`. */
async function settlesWithin(promises, ms) {
  let timer;
  const LATE = {};
  const late = new Promise((resolve) => (timer = setTimeout(() => resolve(LATE), ms)));
  try {
    return (await Promise.race([...promises, late])) !== LATE;
  } finally {
    clearTimeout(timer);
  }
}
/** Calls a method that may also throw synchronously (a bad argument). */
function call(op, fn, onValue) {
  try {
    return track(op, fn(), onValue);
  } catch (e) {
    checkError(op, e);
    return Promise.resolve(undefined);
  }
}

// --- the mock model: its answer follows from the seed and the conversation so far
const attempts = new Map();
function planAnswer(body) {
  const messages = body.messages;
  const first = messages.find((m) => m.role === 'user')?.content ?? '';
  const key = `${first}|${messages.length}`;
  const attempt = attempts.get(key) ?? 0;
  attempts.set(key, attempt + 1);
  const r = mulberry32(hash(`${SEED}|${key}`));
  const fault = r();
  if (attempt === 0 && fault < 0.04) return { kind: 'rate_limited' };
  if (fault < 0.06) return { kind: 'bad_request' };
  if (fault < 0.08) return { kind: 'broken' };
  const slow = fault < 0.2;
  const last = messages[messages.length - 1];
  const rounds = messages.filter((m) => m.role === 'assistant').length;
  if ((last.role === 'tool' && r() < 0.45) || rounds > 6 || r() < 0.12) {
    return { kind: 'text', text: `answer ${hash(key) % 1000} to ${first.slice(0, 20)}`, slow };
  }
  const tools = ['lookup', 'lookup', 'order', 'wipe', 'flaky', 'flaky', 'slow', 'ghost', 'extra'];
  if (body.tools?.some((t) => t.function.name === 'delegate_task')) tools.push('delegate_task', 'delegate_task');
  const calls = [];
  const n = 1 + Math.floor(r() * 3);
  for (let i = 0; i < n; i++) {
    const name = pick(tools, r);
    const a = r();
    let args = name === 'lookup' ? JSON.stringify({ q: `item ${Math.floor(a * 50)}` }) : '{}';
    // A sub-agent's conversation starts with its task: unique, so its call ids are too.
    if (name === 'delegate_task') args = JSON.stringify({ task: `subtask ${hash(key).toString(36)}_${i}: look up and order` });
    if (a < 0.05) args = '{"q": "cut';
    else if (a < 0.08) args = '{"q": 7}';
    calls.push({ id: `c${hash(key).toString(36)}_${messages.length}_${i}`, name, args });
  }
  return { kind: 'calls', calls, slow };
}

async function answer(res, plan, streaming) {
  const pause = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
  if (plan.kind === 'rate_limited') {
    res.writeHead(429, { 'content-type': 'application/json', 'retry-after-ms': '5' });
    res.end(JSON.stringify({ error: { message: 'slow down', type: 'rate_limit_error' } }));
    return;
  }
  if (plan.kind === 'bad_request') {
    res.writeHead(400, { 'content-type': 'application/json' });
    res.end(JSON.stringify({ error: { message: 'invalid request', type: 'invalid_request_error' } }));
    return;
  }
  const message = plan.kind === 'text'
    ? { role: 'assistant', content: plan.text }
    : { role: 'assistant', content: null, tool_calls: plan.calls.map((c) => ({ id: c.id, type: 'function', function: { name: c.name, arguments: c.args } })) };
  const finish = plan.kind === 'text' ? 'stop' : 'tool_calls';
  if (!streaming) {
    if (plan.slow) await pause(40);
    if (plan.kind === 'broken') {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.write('{"choices": [{"index": 0, "message": {"role": "assis');
      res.destroy();
      return;
    }
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end(JSON.stringify({ id: 'x', object: 'chat.completion', choices: [{ index: 0, message, finish_reason: finish }],
      usage: { prompt_tokens: 10, completion_tokens: 5, total_tokens: 15 } }));
    return;
  }
  const chunks = [];
  if (plan.kind === 'text' || plan.kind === 'broken') {
    const text = plan.text ?? 'this stream breaks off';
    chunks.push({ choices: [{ index: 0, delta: { role: 'assistant', content: '' }, finish_reason: null }] });
    for (const word of text.match(/\S+\s*/g)) chunks.push({ choices: [{ index: 0, delta: { content: word }, finish_reason: null }] });
  } else {
    plan.calls.forEach((c, index) => {
      chunks.push({ choices: [{ index: 0, delta: { tool_calls: [{ index, id: c.id, type: 'function', function: { name: c.name, arguments: '' } }] }, finish_reason: null }] });
      const half = Math.ceil(c.args.length / 2);
      for (const piece of [c.args.slice(0, half), c.args.slice(half)]) {
        chunks.push({ choices: [{ index: 0, delta: { tool_calls: [{ index, function: { arguments: piece } }] }, finish_reason: null }] });
      }
    });
  }
  res.writeHead(200, { 'content-type': 'text/event-stream' });
  for (const chunk of chunks) {
    if (res.destroyed) return;
    res.write(`data: ${JSON.stringify(chunk)}\n\n`);
    if (plan.slow) await pause(15);
  }
  if (plan.kind === 'broken') {
    res.destroy();
    return;
  }
  res.write(`data: ${JSON.stringify({ choices: [{ index: 0, delta: {}, finish_reason: finish }] })}\n\n`);
  res.write(`data: ${JSON.stringify({ choices: [], usage: { prompt_tokens: 10, completion_tokens: 5, total_tokens: 15 } })}\n\n`);
  res.end('data: [DONE]\n\n');
}

const mock = await startMock((index, request, res) => answer(res, planAnswer(request.body), request.body.stream === true));

// --- tools: each records its runs; what it does follows from its call id
const runs = new Map(); // `${dir}|${session}|${call}` -> tool name
const approveAsked = new Set(); // `${dir}|${call}`
// `${dir}|${call}` -> {seq, mirror}: when the denial was acknowledged, and whether on a batch that
// mirrors a sub-agent's. Such a denial is recorded on the mirror alone when the app had decided the
// worker's own batch and resumed the worker directly: that decision stood (delegate.rs, point 5),
// so the call may have run before; nothing may run after.
const deniedAcked = new Map();
let seq = 0; // orders runs and acknowledgements
// `${dir}|${session}|${call}` -> {decision: 'approved' | 'denied', by: agent serial}: by session,
// since a decision made on a sub-agent's own session stands there and leaves its parent's mirror
// of the item undecided (delegate.rs, point 5).
const ackedDecisions = new Map();
/** `${dir}|${call}` of a `${dir}|${session}|${call}` key. */
const callKey = (key) => `${key.slice(0, key.indexOf('|'))}|${key.slice(key.lastIndexOf('|') + 1)}`;
// SOAK_JOURNAL: what the checks know, appended (synchronously, so a SIGKILL loses none of it) as
// it happens: 'run <key>' before a tool works, 'ask <key>' before an approve() is asked for,
// 'approved <key>' / 'denied <key>' once acknowledged. A drive (SOAK_MODE=drive) after a kill
// starts from it: a call the killed process ran must not run again, and so on.
const MODE = process.env.SOAK_MODE ?? 'soak';
function journal(what, key) {
  if (process.env.SOAK_JOURNAL) appendFileSync(process.env.SOAK_JOURNAL, `${what} ${key}\n`);
}
if (MODE === 'drive') {
  for (const line of readFileSync(process.env.SOAK_JOURNAL, 'utf8').split('\n').filter(Boolean)) {
    const [what, key] = [line.slice(0, line.indexOf(' ')), line.slice(line.indexOf(' ') + 1)];
    seq++;
    if (what === 'run') runs.set(key, { name: 'before the kill', seq });
    else if (what === 'ask') approveAsked.add(key);
    else {
      const decision = what === 'approved' ? 'approved' : 'denied';
      ackedDecisions.set(key, { decision, by: 'the killed process' });
      if (decision === 'denied') deniedAcked.set(callKey(key), { seq, mirror: what === 'denied_on_mirror' });
    }
  }
}
const contexts = [];
const GUARDED = new Set(['order', 'wipe']);

function executorFor(dir, name) {
  return (argsJson, ctx) => {
    const key = `${dir}|${ctx.sessionId}|${ctx.callId}`;
    if (runs.has(key)) violate(`call ${key} ran twice (${name})`);
    runs.set(key, { name, seq: ++seq });
    journal('run', key);
    if (GUARDED.has(name) && !approveAsked.has(`${dir}|${ctx.callId}`)) violate(`${name} call ${key} ran without an approve() asked for`);
    if (contexts.length < 2000) contexts.push(JSON.stringify({ ...ctx, signal: undefined }));
    const h = hash(ctx.callId);
    if (name === 'flaky') {
      switch (h % 7) {
        case 0: throw new Error('flaky threw');
        case 1: return Promise.reject(new Error('flaky rejected'));
        case 2: return undefined;
        case 3: return { contents: 'not an array' };
        case 4: throw Object.assign(new Error('sold out'), { code: 'out_of_stock' });
        case 5: return Promise.resolve({ contents: [{ type: 'json', json: JSON.stringify({ ok: true, n: h % 10 }) }], isError: false });
        default: return { contents: [{ type: 'text', text: 'flaky ok' }], stop: h % 13 === 0 };
      }
    }
    if (name === 'slow') {
      return new Promise((resolve, reject) => {
        ctx.signal.onCancel((reason) => (h % 2 ? resolve({ contents: [{ type: 'text', text: `stopped: ${reason}` }] }) : reject(new Error(reason))));
        if (h % 5 !== 0) setTimeout(() => resolve({ contents: [{ type: 'text', text: 'slow done' }] }), 20 + (h % 500));
      });
    }
    return { contents: [{ type: 'text', text: `${name} ok: ${argsJson}` }] };
  };
}

function registerTools(agent, dir) {
  const object = JSON.stringify({ type: 'object' });
  agent.registerTool({ name: 'lookup', description: 'looks an item up', riskLevel: 'safe',
    parametersJson: JSON.stringify({ type: 'object', properties: { q: { type: 'string' } }, required: ['q'] }) }, executorFor(dir, 'lookup'));
  agent.registerTool({ name: 'order', description: 'orders an item', parametersJson: object, riskLevel: 'sensitive' }, executorFor(dir, 'order'));
  agent.registerTool({ name: 'wipe', description: 'wipes the cache', parametersJson: object, riskLevel: 'dangerous' }, executorFor(dir, 'wipe'));
  agent.registerTool({ name: 'flaky', description: 'fails in many ways', parametersJson: object }, executorFor(dir, 'flaky'));
  agent.registerTool({ name: 'slow', description: 'takes its time', parametersJson: object, timeoutMs: 300 }, executorFor(dir, 'slow'));
}

// --- hooks and policies with behaviour chosen per call
function randomHook(seedText) {
  const h = hash(seedText);
  const hook = {};
  if (h % 2 === 0) {
    hook.beforeToolCall = (contextJson, callJson) => {
      const c = JSON.parse(callJson);
      const k = hash(c.id) % 23;
      if (k === 0) return { action: 'deny', resultJson: JSON.stringify({ contents: [{ type: 'text', text: 'hook says no' }], is_error: true }) };
      if (k === 1) throw new Error('hook threw');
      if (k === 2) return Promise.resolve({ action: 'proceed', argumentsJson: c.name === 'lookup' ? '{"q":"rewritten"}' : c.arguments });
      if (k === 3) return new Promise(() => {}); // never answers: the hook timeout
      if (k === 4) return { action: 'abort', reason: 'hook aborts' };
      return undefined;
    };
  }
  if (h % 3 === 0) {
    hook.afterToolCall = (contextJson, callJson) => (hash(JSON.parse(callJson).id) % 31 === 0 ? { action: 'stop' } : undefined);
  }
  if (h % 5 === 0) hook.beforePersistState = () => (h % 2 ? 'skip' : 'persist');
  if (h % 7 === 0) hook.onRunEnd = () => Promise.reject(new Error('notification failed'));
  return hook;
}
// Never allows a sensitive or dangerous call: the approve() check above stays exact.
function randomPolicy(seedText) {
  const h = hash(seedText) % 5;
  return (callJson, definitionJson) => {
    const d = definitionJson === null ? null : JSON.parse(definitionJson);
    const k = (h + hash(JSON.parse(callJson).id)) % 6;
    if (d !== null && d.risk_level === 'safe' && k < 3) return 'allow';
    if (k === 3) return JSON.stringify({ action: 'deny', reason: 'policy denies' });
    if (k === 4) throw new Error('policy threw');
    if (k === 5) return Promise.resolve('requireConfirmation');
    return 'require_confirmation';
  };
}

// --- agents over two state directories (A is shared by two agents)
// SOAK_DIRS ("a:b"): directories the caller owns and keeps (a drive after a kill reads them).
const dirs = process.env.SOAK_DIRS?.split(':') ?? [mkdtempSync(join(tmpdir(), 'arkagent-soak-a-')), mkdtempSync(join(tmpdir(), 'arkagent-soak-b-'))];
const runEvents = new Map(); // run id -> {open, segments, finished}
let eventCount = 0;
const deletedRuns = new Set(); // runs whose session was deleted while they were suspended
const runsOf = new Map(); // `${dir}|${session}` -> a Set of run ids
const runSessionId = new Map(); // run id -> its session
const parentOf = new Map(); // `${dir}|${worker session}` -> `${dir}|${parent session}`
const onEventOf = (dir) => (eventJson) => {
  eventCount++;
  if (eventJson.includes(KEY)) violate('the API key in an event');
  onRunEvent(dir, JSON.parse(eventJson));
};
/** Checks one event; a sub-agent's (wrapped in worker_event) as its own run's. */
function onRunEvent(dir, e) {
  if (!EVENT_TYPES.has(e.type) || typeof e.run_id !== 'string') violate(`event ${JSON.stringify(e).slice(0, 200)}`);
  if (e.type === 'worker_event') {
    // A sub-agent's session goes with its parent's deletion: remember whose it is.
    if (runSessionId.has(e.run_id)) parentOf.set(`${dir}|${e.session_id}`, `${dir}|${runSessionId.get(e.run_id)}`);
    onRunEvent(dir, { ...e.event, session_id: e.event.session_id ?? e.session_id });
    return;
  }
  if (e.type === 'run_started') runSessionId.set(e.run_id, e.session_id);
  if (['run_started', 'run_finished', 'approval_required', 'tool_result'].includes(e.type)) {
    note(`d${dir} ${runSessionId.get(e.run_id)} event ${e.type} ${e.run_id.slice(0, 8)} ${e.status ?? ''} ${e.call_id ?? ''}`);
  }
  if (e.type === 'tool_result') count(`tool result ${e.result.metadata?.code ?? (e.result.is_error ? 'error' : 'ok')}`);
  // A run's segments (events.rs): run_started (again on each resume), then its last event:
  // run_finished, or approval_required when it suspends.
  if (e.type === 'run_started' || e.type === 'run_finished' || e.type === 'approval_required') {
    const seen = runEvents.get(e.run_id) ?? { open: false, segments: 0, finished: 0 };
    if (e.type === 'run_started') {
      if (seen.open) violate(`run_started of ${e.run_id} while its previous segment is open`);
      if (e.resumed !== seen.segments > 0 && !(MODE === 'drive' && seen.segments === 0)) violate(`run_started of ${e.run_id}: resumed ${e.resumed} after ${seen.segments} segments`);
      seen.open = true;
      seen.segments++;
      const where = `${dir}|${e.session_id}`;
      runsOf.set(where, (runsOf.get(where) ?? new Set()).add(e.run_id));
    } else {
      if (!seen.open || seen.finished) violate(`${e.type} of ${e.run_id} outside a segment`);
      seen.open = false;
      if (e.type === 'run_finished') seen.finished++;
      if (e.error && !CODES.has(e.error.code)) violate(`run_finished error ${e.error.code}`);
    }
    runEvents.set(e.run_id, seen);
  }
}
let agentSerial = 0;
function newAgent(dirIndex, { plain = false } = {}) {
  const agent = new Agent({
    provider: 'custom', baseUrl: mock.baseUrl, model: 'soak-model', apiKey: KEY, stateDir: dirs[dirIndex],
    maxRounds: 5, toolTimeoutMs: 400, maxParallelTools: plain ? 4 : 1 + Math.floor(rng() * 4),
    streaming: plain ? true : chance(0.7), enableDelegation: plain || chance(0.5),
  });
  registerTools(agent, dirs[dirIndex]);
  agent.onEvent(onEventOf(dirIndex));
  const serial = agentSerial++;
  if (!plain && chance(0.6)) agent.addHook(randomHook(`${SEED}|hook|${serial}`));
  if (!plain && chance(0.4)) agent.setApprovalPolicy(randomPolicy(`${SEED}|policy|${serial}`), 200);
  return { agent, dir: dirIndex, serial };
}
let agents = [newAgent(0), newAgent(0), newAgent(1)];

const sessions = ['s0', 's1', 's2', 's3', 's4'];

/**
 * Asks to approve (or deny) the undecided items of a session's pending batch; with `andResume`, the
 * app does not await its decisions but calls resume() right after them (they go first).
 */
async function decide(a, session, approveProbability, andResume = false) {
  label = `a${a.serial} d${a.dir} ${session}`;
  // Reads are not queued behind decisions: compare with the decisions acknowledged before it.
  const ackedBefore = new Map(ackedDecisions);
  const pending = await call('pendingApprovalJson', () => a.agent.pendingApprovalJson(session));
  label = `a${a.serial} d${a.dir} ${session}`;
  if (!pending) return;
  const decisions = [];
  const items = JSON.parse(pending).items;
  for (const item of items) {
    // A decision acknowledged (approve() or deny() resolved) stays as it was.
    const acked = ackedBefore.get(`${dirs[a.dir]}|${session}|${item.tool_call.id}`);
    if (acked && item.decision !== acked.decision) {
      violate(`${session}: decision ${acked.decision} of ${item.tool_call.id} (agent ${acked.by}) read back as ${item.decision} by agent ${a.serial}`);
      if (process.env.SOAK_VERBOSE) console.error(trace.filter((l) => l.includes(`d${a.dir} ${session}`)).join('\n'));
    }
  }
  for (const item of items.filter((i) => !i.decision || i.decision === 'pending')) {
    // By call id alone: a sub-agent's call is decided on its parent's batch and runs in the
    // worker's session (call ids are unique: they follow from the conversation's first message).
    const key = `${dirs[a.dir]}|${item.tool_call.id}`;
    const ackKey = `${dirs[a.dir]}|${session}|${item.tool_call.id}`;
    let decision;
    if (rng() < approveProbability) {
      // The self-test's sabotage: forgetting approvals must be caught by the executors' check.
      if (process.env.SOAK_SABOTAGE !== 'forget_approvals') {
        approveAsked.add(key);
        journal('ask', key);
      }
      decision = call('approve', () => a.agent.approve(session, item.approval_id), (batch) => {
        const decided = JSON.parse(batch).items.find((i) => i.approval_id === item.approval_id);
        if (decided?.decision !== 'approved') violate(`approve() resolved with ${JSON.stringify(decided)}`);
        ackedDecisions.set(ackKey, { decision: 'approved', by: a.serial });
        journal('approved', ackKey);
      });
    } else {
      decision = call('deny', () => a.agent.deny(session, item.approval_id, 'soak says no'), (batch) => {
        const decided = JSON.parse(batch).items.find((i) => i.approval_id === item.approval_id);
        if (decided?.decision !== 'denied') violate(`deny() resolved with ${JSON.stringify(decided)}`);
        const mirror = JSON.parse(batch).worker_session != null;
        deniedAcked.set(key, { seq: ++seq, mirror });
        ackedDecisions.set(ackKey, { decision: 'denied', by: a.serial });
        journal(mirror ? 'denied_on_mirror' : 'denied', ackKey);
      });
    }
    if (andResume) decisions.push(decision);
    else await decision;
    label = `a${a.serial} d${a.dir} ${session}`;
  }
  if (andResume) {
    await cancellable('resume', (handle) => a.agent.resume(session, handle));
    await Promise.all(decisions);
  }
}

const OPS = [
  ['run', 14], ['resume', 6], ['decide', 10], ['dismiss', 2], ['cancel', 4], ['setMetadata', 3], ['list', 3],
  ['state', 3], ['delete', 1], ['register', 2], ['policy', 1], ['replace', 1], ['gc', 1], ['bad', 2], ['worker', 4],
];
const weightSum = OPS.reduce((s, [, w]) => s + w, 0);
function pickOp() {
  let x = rng() * weightSum;
  for (const [op, w] of OPS) {
    if ((x -= w) < 0) return op;
  }
  return OPS[0][0];
}

/** What deleteSession(session) resolved with: when it existed, its runs and its workers' end there. */
const deleted = (a, session) => (existed) => {
  if (!existed) return;
  // The session and every sub-agent session under it.
  const gone = (where) => where === `${a.dir}|${session}` || (parentOf.has(where) && gone(parentOf.get(where)));
  for (const [where, ids] of runsOf) {
    if (gone(where)) ids.forEach((id) => deletedRuns.add(id));
  }
};

/** The random operations (not in drive mode). */
async function steps() {
  for (let step = 0; step < STEPS; step++) {
    const a = pick(agents);
    const session = pick(sessions);
    const op = pickOp();
    label = `a${a.serial} d${a.dir} ${session}`;
    // The caller kills the process here (SOAK_KILL_AT), operations in flight.
    if (step === Number(process.env.SOAK_KILL_AT)) console.log('kill point');
    if (step % 50 === 0) progress(`step ${step}, ${inFlight.size} in flight`);
    count(`op ${op}`);
    switch (op) {
      case 'run': cancellable('run', (handle) => a.agent.run(session, `${session}/${step}: bake and order, seed ${SEED}`, handle)); break;
      case 'resume': cancellable('resume', (handle) => a.agent.resume(session, handle)); break;
      case 'dismiss': cancellable('dismiss', (handle) => a.agent.dismiss(session, 'moved on', handle)); break;
      case 'decide': decide(a, session, 0.75, chance(0.5)); break;
      case 'cancel': if (handles.size) pick([...handles]).cancel(chance(0.5) ? 'user cancelled' : undefined); break;
      case 'setMetadata':
        call('setMetadata', () => a.agent.setMetadata(session, pick(['userId', 'cart', 'locale']), chance(0.2) ? 'null' : JSON.stringify({ step, v: rng() })));
        break;
      case 'list':
        call('listSessionsJson', () => a.agent.listSessionsJson(chance(0.5)), (json) => {
          for (const s of JSON.parse(json)) {
            if (s.status !== null && !STATUSES.has(s.status)) violate(`listed status ${s.status}`);
            if (s.error) violate(`listed session ${s.session_id} unreadable: ${JSON.stringify(s.error)}`);
          }
        });
        break;
      case 'state':
        call('stateJson', () => a.agent.stateJson(session), (json) => {
          if (json !== null && json.includes(KEY)) violate('the API key in a state');
        });
        break;
      case 'delete': call('deleteSession', () => a.agent.deleteSession(session), deleted(a, session)); break;
      case 'register':
        if (chance(0.5)) {
          try {
            a.agent.registerTool({ name: 'extra', description: 'comes and goes', parametersJson: '{"type":"object"}' }, executorFor(dirs[a.dir], 'extra'));
          } catch (e) {
            if (e.code !== 'tool_name_duplicate') violate(`registerTool: ${e.code} ${e.message}`);
          }
        } else {
          a.agent.unregisterTool('extra');
        }
        break;
      case 'policy': a.agent.setApprovalPolicy(chance(0.5) ? null : randomPolicy(`${SEED}|policy|${step}`), 200); break;
      case 'replace': agents[agents.indexOf(a)] = newAgent(a.dir); break;
      case 'gc': globalThis.gc?.(); break;
      case 'worker': {
        // The app acts on a sub-agent's session directly (delegate.rs, point 5).
        const listed = await call('listSessionsJson', () => a.agent.listSessionsJson(true));
        const workers = JSON.parse(listed ?? '[]').filter((w) => w.parent_session !== null);
        if (!workers.length) break;
        const worker = pick(workers).session_id;
        label = `a${a.serial} d${a.dir} ${worker}`;
        switch (pick(['decide', 'decide', 'resume', 'dismiss', 'run', 'delete', 'metadata'])) {
          case 'decide': decide(a, worker, 0.7, chance(0.5)); break;
          case 'resume': cancellable('resume', (handle) => a.agent.resume(worker, handle)); break;
          case 'dismiss': cancellable('dismiss', (handle) => a.agent.dismiss(worker, 'moved on', handle)); break;
          case 'run': cancellable('run', (handle) => a.agent.run(worker, 'a message to a worker', handle)); break;
          case 'delete': call('deleteSession', () => a.agent.deleteSession(worker), deleted(a, worker)); break;
          default: call('setMetadata', () => a.agent.setMetadata(worker, 'userId', '"w"')); break;
        }
        break;
      }
      case 'bad': {
        // Refused up front, whatever else goes on: each must reject with one of these codes.
        const expect = (what, p, codes) => track(what, p, () => violate(`${what} resolved`), (e) => {
          if (!codes.includes(e?.code)) violate(`${what}: ${e?.code} ${e?.message}`);
        });
        const bad = pick(['../up', '', 'a/b', 'x'.repeat(200)]);
        expect(`run of session id ${JSON.stringify(bad).slice(0, 12)}`, a.agent.run(bad, 'hi'), ['session_id_invalid']);
        expect('stateJson of a bad id', a.agent.stateJson(bad), ['session_id_invalid']);
        expect('setMetadata of bad JSON', a.agent.setMetadata(session, 'k', '{"unclosed"'), ['json_invalid']);
        expect('approve of an unknown approval id', a.agent.approve(session, 'no-such-approval'),
          ['approval_not_found', 'no_pending_approval', 'session_not_found', 'session_busy']);
        break;
      }
      default: break;
    }
    if (inFlight.size > 10 || (inFlight.size > 0 && chance(0.3))) {
      // Something settles within 20 s, or the soak stops here and says what hangs.
      if (!(await settlesWithin([...inFlight].map((e) => e.done), 20_000))) {
        for (const e of inFlight) violate(`step ${step}: ${e.op} unsettled for ${Date.now() - e.since} ms`);
        break;
      }
    }
    if (chance(0.2)) await new Promise((resolve) => setTimeout(resolve, Math.floor(rng() * 20)));
  }
}
if (MODE !== 'drive') await steps();

// --- everything settles
progress(`steps done, ${inFlight.size} in flight`);
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
const settleBy = Date.now() + 30_000;
while (inFlight.size > 0 && Date.now() < settleBy) {
  await Promise.race([...[...inFlight].map((e) => e.done), sleep(100)]);
}
for (const e of inFlight) violate(`${e.op} never settled (${Date.now() - e.since} ms)`);
progress('settled');
const opsDone = Object.entries(counts).filter(([k]) => k.startsWith('op ')).reduce((s, [, n]) => s + n, 0);

// --- a fresh agent per directory, the old ones dropped, brings every session to an end
agents = null;
globalThis.gc?.();
function checkPairing(where, state) {
  const answered = new Map();
  for (const m of state.messages) {
    if (m.role === 'assistant') {
      for (const c of m.tool_calls ?? []) {
        if (answered.has(c.id)) violate(`${where}: call id ${c.id} appears twice`);
        answered.set(c.id, 0);
      }
    } else if (m.role === 'tool') {
      if (!answered.has(m.tool_call_id)) violate(`${where}: tool message for unknown call ${m.tool_call_id}`);
      else answered.set(m.tool_call_id, answered.get(m.tool_call_id) + 1);
    }
  }
  for (const [id, n] of answered) {
    if (n !== 1) violate(`${where}: call ${id} answered ${n} times`);
  }
}
const rejectedAtEnd = [];
/** The promise's value, or a violation (and undefined) when it has not settled within 20 s. */
async function within(what, promise) {
  if (!(await settlesWithin([promise], 20_000))) {
    violate(`${what} never settled with one agent left`);
    throw new Error(`${what} hung`);
  }
  return promise;
}
const finals = dirs.map((_, i) => newAgent(i, { plain: true }));
const endStatuses = {};
for (const f of finals) {
  const listed = JSON.parse(await within('listSessionsJson', f.agent.listSessionsJson(true)));
  for (const { session_id: id } of listed) {
    try {
      const where = `${dirs[f.dir]}|${id}`;
      progress(`driving ${where}`);
      let summary;
      for (let round = 0; round < 12; round++) {
        summary = JSON.parse(await within('listSessionsJson', f.agent.listSessionsJson(true))).find((s) => s.session_id === id);
        if (summary.busy) violate(`${where} busy with every other agent gone`);
        // All one way, then all the other: an item a sub-agent's own session decided takes only that
        // decision on its parent's mirror (the other is approval_already_decided).
        if (summary.approval_pending) await within(`deciding ${where}`, decide(f, id, round % 2 === 0 ? 1 : 0));
        if (summary.approval_pending || summary.interrupted) {
          const out = await within(`resume of ${where}`, f.agent.resume(id).catch((e) => {
            if (e.code !== 'approval_pending') rejectedAtEnd.push(`${where} resume: ${e.code} ${e.message}`);
          }));
          if (out?.status) checkOutcome('final resume', out);
        } else {
          break;
        }
      }
      summary = JSON.parse(await within('listSessionsJson', f.agent.listSessionsJson(true))).find((s) => s.session_id === id);
      endStatuses[summary.status] = (endStatuses[summary.status] ?? 0) + 1;
      if (summary.approval_pending || summary.interrupted || summary.busy || summary.error || !(TERMINAL.has(summary.status) || summary.status === 'idle')) {
        violate(`${where} not brought to an end: ${JSON.stringify(summary)}`);
      }
      const state = JSON.parse(await within(`stateJson of ${where}`, f.agent.stateJson(id)));
      checkPairing(where, state);
      if (await within(`pendingApprovalJson of ${where}`, f.agent.pendingApprovalJson(id))) violate(`${where}: a batch still pending`);
    } catch (e) {
      if (!String(e.message).endsWith('hung')) throw e;
    }
  }
}
for (const r of rejectedAtEnd) violate(`with one agent left: ${r}`);
if (rejectedAtEnd.length && process.env.SOAK_VERBOSE) console.error(trace.slice(-400).join('\n'));

// --- what ran, what the events said, where the key went
const ranCalls = new Map([...runs].map(([k, r]) => [callKey(k), r]));
for (const [key, denial] of deniedAcked) {
  const ran = ranCalls.get(key);
  if (ran && (ran.seq > denial.seq || !denial.mirror)) {
    violate(`denied call ${key} ran ${ran.seq > denial.seq ? 'after' : 'before'} its denial was acknowledged${denial.mirror ? ' on a mirror' : ''}`);
    if (process.env.SOAK_VERBOSE) console.error(trace.filter((l) => l.includes(key.slice(key.indexOf('|') + 1))).join('\n'));
  }
}
for (const [id, seen] of runEvents) {
  if (seen.open || (seen.finished !== 1 && !deletedRuns.has(id))) violate(`run ${id} did not end with one run_finished: ${JSON.stringify(seen)}`);
}
if (contexts.some((c) => c.includes(KEY))) violate('the API key in a ToolContext');
function walk(path) {
  for (const name of readdirSync(path)) {
    const p = join(path, name);
    if (statSync(p).isDirectory()) walk(p);
    else if (readFileSync(p).includes(KEY)) violate(`the API key in ${p}`);
  }
}
dirs.forEach(walk);

await mock.close();
if (!process.env.SOAK_DIRS) for (const d of dirs) rmSync(d, { recursive: true, force: true });
const summary = {
  seed: SEED, steps: STEPS, ops: opsDone, toolRuns: runs.size, approvals: approveAsked.size, denials: deniedAcked.size,
  runs: runEvents.size, events: eventCount, modelRequests: mock.requests.length, endStatuses, violations, counts,
};
console.log(JSON.stringify(summary));
process.exitCode = violations.length ? 1 : 0;
