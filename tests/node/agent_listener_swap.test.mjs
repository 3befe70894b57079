// onEvent while a run's events wait for the JS thread: the listener an event is delivered to is
// the one set when the JS thread gets to it, not the one set when the run emitted it. Once
// onEvent(x) returns, the previous listener hears nothing more; the events still queued go to x,
// in order, none lost or twice (with no listener: dropped). The events pile up here because the
// listener is slow: its first text delta keeps the JS thread busy while the whole stream, written
// at once by the mock, is read and emitted.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { busy, loadModule } from './helper.mjs';
import { startMock, textChunks } from './mock_openai.mjs';

const { Agent } = loadModule();

const WORDS = 200;
const answer = Array.from({ length: WORDS }, (_, i) => `w${i} `).join('');

/** A mock that answers every request with `answer`, the whole stream in one write. */
async function wholeStreamMock() {
  return startMock((_i, _request, res) => {
    res.writeHead(200, { 'content-type': 'text/event-stream' });
    res.end(textChunks(answer).map((c) => `data: ${JSON.stringify(c)}\n\n`).join('') + 'data: [DONE]\n\n');
  });
}

/** The events of `list` (JSON) as `type` or `text_delta:<delta>`. */
function kinds(list) {
  return list.map((e) => (e.type === 'text_delta' ? `text_delta:${e.delta}` : e.type));
}

/**
 * Runs once with `first` set, which calls `swap()` on its first text delta after `ms` of work:
 * what `first` heard before and after the swap returned, and the outcome.
 */
async function runSwapping(baseUrl, swap, ms = 300) {
  const agent = new Agent({ provider: 'custom', baseUrl, model: 'm' });
  const before = [];
  const after = [];
  let swapped = false;
  agent.onEvent((e) => {
    const event = JSON.parse(e);
    if (swapped) {
      after.push(event);
      return;
    }
    before.push(event);
    if (event.type === 'text_delta') {
      busy(ms);
      swapped = true;
      swap(agent);
    }
  });
  const out = await agent.run('s', 'go');
  // Anything still queued (past the run's delivery wait) would come now.
  await new Promise((r) => setTimeout(r, 200));
  return { agent, before, after, out };
}

test('onEvent(null) while events are queued: the removed listener hears none of them', async () => {
  const mock = await wholeStreamMock();
  try {
    const { before, after, out } = await runSwapping(mock.baseUrl, (agent) => agent.onEvent(null));
    assert.equal(out.status, 'completed');
    assert.equal(out.finalText, answer);
    assert.deepEqual(kinds(after), [], `heard after its removal: ${kinds(after).length} events`);
    assert.equal(before.at(-1).delta, 'w0 ');
  } finally {
    await mock.close();
  }
});

test('onEvent(next) while events are queued: next hears every one of them, in order, the old one none', async () => {
  const mock = await wholeStreamMock();
  try {
    const heard = [];
    const next = (e) => heard.push(JSON.parse(e));
    const { before, after, out } = await runSwapping(mock.baseUrl, (agent) => agent.onEvent(next));
    assert.equal(out.status, 'completed');
    assert.deepEqual(kinds(after), [], `the old listener heard after the swap: ${kinds(after).length} events`);
    const all = [...before, ...heard];
    const deltas = all.filter((e) => e.type === 'text_delta').map((e) => e.delta);
    assert.equal(deltas.join(''), answer, 'every delta once, in order, across the two listeners');
    assert.ok(heard.length >= WORDS - 1, `the new listener heard ${heard.length} events`);
    assert.equal(heard.at(-1).type, 'run_finished');
    assert.equal(new Set(all.map((e) => e.run_id)).size, 1);
  } finally {
    await mock.close();
  }
});

test('the same run heard whole by one listener and by two swapped mid-run: the same events, in order', async () => {
  const mock = await wholeStreamMock();
  try {
    const agent = new Agent({ provider: 'custom', baseUrl: mock.baseUrl, model: 'm' });
    const whole = [];
    agent.onEvent((e) => whole.push(JSON.parse(e)));
    await agent.run('one', 'go');
    const heard = [];
    const { before } = await runSwapping(mock.baseUrl, (a) => a.onEvent((e) => heard.push(JSON.parse(e))));
    const strip = (list) => kinds(list).filter((k) => k !== 'state_persisted');
    assert.deepEqual(strip([...before, ...heard]), strip(whole));
  } finally {
    await mock.close();
  }
});

test('onEvent(null) then onEvent(next) in one turn: next hears the events still queued', async () => {
  const mock = await wholeStreamMock();
  try {
    const heard = [];
    const { before, after } = await runSwapping(mock.baseUrl, (agent) => {
      agent.onEvent(null);
      agent.onEvent((e) => heard.push(JSON.parse(e)));
    });
    assert.deepEqual(kinds(after), []);
    const deltas = [...before, ...heard].filter((e) => e.type === 'text_delta').map((e) => e.delta);
    assert.equal(deltas.join(''), answer);
  } finally {
    await mock.close();
  }
});

test('a listener that throws on the event it swaps on: the next one still hears the rest', async () => {
  const mock = await wholeStreamMock();
  try {
    const heard = [];
    const { before, after } = await runSwapping(mock.baseUrl, (agent) => {
      agent.onEvent((e) => heard.push(JSON.parse(e)));
      throw new Error('after the swap');
    });
    assert.deepEqual(kinds(after), []);
    const deltas = [...before, ...heard].filter((e) => e.type === 'text_delta').map((e) => e.delta);
    assert.equal(deltas.join(''), answer);
  } finally {
    await mock.close();
  }
});
