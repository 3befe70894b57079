// The listener's events as JSON: `run_finished` carries the error that ended the run (the
// outcome's errorCode/errorLayer/errorMessage as {layer, code, message}, the API key removed), and
// every event names its run in `run_id` (a worker's events, inside their worker_event wrapper,
// the worker's run), so an app listening to an Agent with several runs in flight can tell them apart.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { loadModule, objectSchema } from './helper.mjs';
import { startMock } from './mock_openai.mjs';

const { Agent, CancellationHandle } = loadModule();

function scripted(answers, extra = {}) {
  return new Agent({ provider: 'scripted', scriptJson: JSON.stringify(answers), ...extra });
}

function listen(agent) {
  const events = [];
  agent.onEvent((e) => events.push(JSON.parse(e)));
  return events;
}

test('run_finished of a failed run carries the outcome\'s error', async () => {
  const agent = scripted([]); // nothing to answer: the run fails
  const events = listen(agent);
  const out = await agent.run('s', 'hi');
  assert.equal(out.status, 'failed');
  assert.ok(out.errorCode, JSON.stringify(out));
  const last = events.at(-1);
  assert.equal(last.type, 'run_finished');
  assert.deepEqual(last.error, { layer: out.errorLayer, code: out.errorCode, message: out.errorMessage });
});

test('run_finished of a completed run has no error key', async () => {
  const agent = scripted([{ content: 'done' }]);
  const events = listen(agent);
  const out = await agent.run('s', 'hi');
  assert.equal(out.status, 'completed');
  assert.equal(events.at(-1).type, 'run_finished');
  assert.equal('error' in events.at(-1), false, JSON.stringify(events.at(-1)));
});

test('run_finished of a run refused by a provider echoing the key: the error without the key', async (t) => {
  const key = 'sk-EVENT-SENTINEL-5e4d3c2b1a';
  const mock = await startMock(async (_i, _request, res) => {
    res.writeHead(401, { 'content-type': 'application/json' });
    res.end(JSON.stringify({ error: { code: 'invalid_api_key', message: `Incorrect API key provided: ${key}` } }));
  });
  t.after(() => mock.close());
  const agent = new Agent({ provider: 'custom', baseUrl: mock.baseUrl, model: 'm', apiKey: key });
  const raw = [];
  agent.onEvent((e) => raw.push(e));
  const out = await agent.run('s', 'hi');
  assert.equal(out.status, 'failed');
  assert.equal(mock.requests[0].authorization, `Bearer ${key}`, 'the key went out: the check below could find it');
  const last = JSON.parse(raw.at(-1));
  assert.equal(last.type, 'run_finished');
  assert.equal(last.error.code, 'provider_auth');
  assert.match(last.error.message, /Incorrect API key provided/);
  for (const e of raw) assert.ok(!e.includes(key), `leaked: ${e}`);
});

test('every event carries the run id of its run_started; a worker\'s events the worker\'s run id', async () => {
  const agent = scripted(
    [
      { tool_calls: [{ id: 'd1', name: 'delegate_task', arguments: '{"task":"look up 20261010"}' }] },
      { tool_calls: [{ id: 'w1', name: 'query_order', arguments: '{"order_id":"20261010"}' }] }, // the worker
      { content: 'It shipped.' }, // the worker's answer
      { content: 'The worker says it shipped.' },
    ],
    { enableDelegation: true },
  );
  agent.registerTool({ name: 'query_order', description: 'order status', parametersJson: objectSchema },
    async () => ({ contents: [{ type: 'text', text: 'shipped' }] }));
  const events = listen(agent);
  const out = await agent.run('p', 'where is 20261010?');
  assert.equal(out.status, 'completed');
  assert.equal(events[0].type, 'run_started');
  const runId = events[0].run_id;
  assert.ok(runId);
  for (const e of events) assert.equal(e.run_id, runId, JSON.stringify(e));
  const inner = events.filter((e) => e.type === 'worker_event').map((e) => e.event);
  assert.ok(inner.length > 3);
  assert.equal(inner[0].type, 'run_started');
  const workerRun = inner[0].run_id;
  assert.ok(workerRun && workerRun !== runId, `${workerRun} vs ${runId}`);
  for (const e of inner) assert.equal(e.run_id, workerRun, JSON.stringify(e));
  // Each key once (run_started keeps its own, not a second one).
  assert.equal(JSON.stringify(events[0]).match(/"run_id"/g).length, 1);
});

test('runs in flight together on one Agent: their events part by run_id', async () => {
  const agent = scripted([
    { tool_calls: [{ id: 'a', name: 'slow', arguments: '{}' }] },
    { tool_calls: [{ id: 'b', name: 'slow', arguments: '{}' }] },
    { content: 'one' },
    { content: 'two' },
  ]);
  agent.registerTool({ name: 'slow', description: 'd', parametersJson: objectSchema },
    () => new Promise((r) => setTimeout(() => r({ contents: [{ type: 'text', text: 'ok' }] }), 30)));
  const events = listen(agent);
  const outs = await Promise.all([agent.run('s1', 'hi'), agent.run('s2', 'hi')]);
  assert.deepEqual(outs.map((o) => o.status), ['completed', 'completed']);
  const starts = events.filter((e) => e.type === 'run_started');
  assert.equal(starts.length, 2);
  for (const start of starts) {
    const own = events.filter((e) => e.run_id === start.run_id);
    assert.equal(own[0], start);
    assert.equal(own.at(-1).type, 'run_finished');
    assert.equal(own.filter((e) => e.type === 'tool_result').length, 1);
  }
  assert.equal(events.filter((e) => !starts.some((s) => s.run_id === e.run_id)).length, 0);
});

test('a worker left frozen by its parent\'s cancelled run: its run ends with a run_finished of its own', async () => {
  // The parent delegates beside a call that waits; the worker freezes on a dangerous call, and
  // the app cancels the parent then, before it froze on the worker's batch.
  const agent = scripted(
    [
      { tool_calls: [
        { id: 'd1', name: 'delegate_task', arguments: '{"task":"wipe it"}' },
        { id: 'x1', name: 'wait', arguments: '{}' },
      ] },
      { tool_calls: [{ id: 'w1', name: 'wipe', arguments: '{}' }] }, // the worker: frozen
    ],
    { enableDelegation: true, maxParallelTools: 4 },
  );
  let wiped = 0;
  agent.registerTool({ name: 'wipe', description: 'd', parametersJson: objectSchema, riskLevel: 'dangerous' },
    async () => { wiped++; return { contents: [{ type: 'text', text: 'wiped' }] }; });
  const handle = new CancellationHandle();
  let release;
  const waited = new Promise((r) => (release = r));
  agent.registerTool({ name: 'wait', description: 'd', parametersJson: objectSchema },
    async () => { await waited; return { contents: [{ type: 'text', text: 'waited' }] }; });
  const events = [];
  agent.onEvent((e) => {
    const event = JSON.parse(e);
    events.push(event);
    if (event.type === 'worker_event' && event.event.type === 'approval_required') handle.cancel('user left');
  });
  const out = await agent.run('p', 'wipe it', handle);
  release();
  assert.equal(out.status, 'cancelled');
  const inner = events.filter((e) => e.type === 'worker_event').map((e) => e.event);
  const workerRun = inner[0].run_id;
  assert.ok(workerRun, JSON.stringify(inner[0]));
  assert.deepEqual(inner.filter((e) => ['run_started', 'approval_required', 'run_finished'].includes(e.type))
    .map((e) => [e.type, e.run_id, e.resumed ?? e.status ?? null]), [
    ['run_started', workerRun, false],
    ['approval_required', workerRun, null],
    ['run_started', workerRun, true],
    ['run_finished', workerRun, 'cancelled'],
  ]);
  assert.equal(events.at(-1).type, 'run_finished');
  assert.equal(events.at(-1).status, 'cancelled');
  assert.equal(wiped, 0);
});
