// The provider timeouts of the Agent config (connectTimeoutMs, firstByteTimeoutMs, idleTimeoutMs,
// totalTimeoutMs) against a local mock OpenAI-compatible server (127.0.0.1:0) that is slow on
// purpose: a late response head, a pause mid-stream, a stream that trickles on. Every limit here is
// well under a second, so the file runs in about two seconds. Also: the values and combinations the
// constructor refuses (config_invalid naming the fields) and those it takes.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { loadModule, throwsWithCode } from './helper.mjs';
import { startMock, streamChunks, textChunks } from './mock_openai.mjs';

const { Agent } = loadModule();

/** Waits `ms`, or less when the client closes the connection first (no timer outlives a test). */
function hold(res, ms) {
  return new Promise((resolve) => {
    const closed = () => {
      clearTimeout(timer);
      resolve();
    };
    const timer = setTimeout(() => {
      res.off('close', closed);
      resolve();
    }, ms);
    res.once('close', closed);
  });
}

/** Writes `chunks` as SSE events, `gapMs` apart, on a response whose head is sent. */
async function writeChunks(res, chunks, gapMs) {
  for (const chunk of chunks) {
    if (res.destroyed) return;
    res.write(`data: ${JSON.stringify(chunk)}\n\n`);
    await hold(res, gapMs);
  }
}

const SSE_HEAD = { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' };

/** A mock answering every request with `handler`, closed after the test. */
async function mockWith(t, handler) {
  const mock = await startMock((_i, _request, res) => handler(res));
  t.after(() => mock.close());
  return mock;
}

/** Runs one question on a fresh agent of `config` (custom preset on the mock); the outcome, its time and the text deltas. */
async function runOn(mock, config) {
  const agent = new Agent({ provider: 'custom', baseUrl: mock.baseUrl, model: 'm', ...config });
  const deltas = [];
  agent.onEvent((e) => {
    const event = JSON.parse(e);
    if (event.type === 'text_delta') deltas.push(event.delta);
  });
  const started = performance.now();
  const out = await agent.run('s', 'question');
  return { out, ms: performance.now() - started, text: deltas.join('') };
}

function assertTimedOut(out, pattern) {
  assert.equal(out.status, 'failed', JSON.stringify(out));
  assert.equal(out.errorCode, 'provider_timeout', JSON.stringify(out));
  assert.match(out.errorMessage, pattern);
}

test('firstByteTimeoutMs: a response head later than the limit fails the run with provider_timeout once the retries are spent, without waiting for it', async (t) => {
  // The head would come after 10 s (the connection is closed as soon as the client gives up).
  const late = await mockWith(t, async (res) => {
    await hold(res, 10_000);
    if (!res.destroyed) await streamChunks(res, textChunks('too late'));
  });
  const { out, ms } = await runOn(late, { firstByteTimeoutMs: 150 });
  assertTimedOut(out, /first byte timeout of 150ms reached \(after 2 retries\)/);
  assert.ok(ms < 5_000, `failed after ${ms} ms, not soon after the 150 ms limit and two backoffs`);
  // A streamed request without a head in time is sent again (2 retries by default).
  assert.equal(late.requests.length, 3, 'a streamed request is retried');

  // Without the option the default (60 s) waits for a head 400 ms late.
  const slow = await mockWith(t, async (res) => {
    await hold(res, 400);
    await streamChunks(res, textChunks('slow but fine'));
  });
  const waited = await runOn(slow, {});
  assert.equal(waited.out.status, 'completed', JSON.stringify(waited.out));
  assert.equal(waited.out.finalText, 'slow but fine');
  // And the limit applies over an OpenAI reasoning model's defaults (first byte = total, 600 s).
  const o3 = await runOn(late, { model: 'o3', firstByteTimeoutMs: 150 });
  assertTimedOut(o3.out, /first byte timeout of 150ms/);
});

test('idleTimeoutMs: a pause mid-stream longer than the limit fails the run; a raised limit lets the same stream complete', async (t) => {
  // Three chunks, a 400 ms silence, the rest.
  const chunks = textChunks('before the pause and after it');
  const paused = await mockWith(t, async (res) => {
    res.writeHead(200, SSE_HEAD);
    await writeChunks(res, chunks.slice(0, 3), 3);
    await hold(res, 400);
    await writeChunks(res, chunks.slice(3), 3);
    if (!res.destroyed) res.end('data: [DONE]\n\n');
  });
  const cut = await runOn(paused, { idleTimeoutMs: 150 });
  assertTimedOut(cut.out, /idle timeout of 150ms/);
  assert.equal(cut.text, 'before the ', 'the words before the pause were streamed');

  const raised = await runOn(paused, { idleTimeoutMs: 2_000 });
  assert.equal(raised.out.status, 'completed', JSON.stringify(raised.out));
  assert.equal(raised.out.finalText, 'before the pause and after it');
  assert.equal(raised.text, 'before the pause and after it');
  assert.equal(paused.requests.length, 2);
});

test('totalTimeoutMs bounds the whole call, a stream that never pauses long included; the 60 s defaults under it follow it down', async (t) => {
  // A word every 30 ms for about 3 s: never silent for long (under the idle default lowered to the
  // total), but long in all; and the same words as fast as the mock writes them.
  const words = Array.from({ length: 100 }, (_, i) => `w${i}`).join(' ');
  const fast = await mockWith(t, (res) => streamChunks(res, textChunks(words)));
  const slowTrickle = await mockWith(t, async (res) => {
    res.writeHead(200, SSE_HEAD);
    await writeChunks(res, textChunks(words), 30);
    if (!res.destroyed) res.end('data: [DONE]\n\n');
  });
  const cut = await runOn(slowTrickle, { totalTimeoutMs: 300 });
  assertTimedOut(cut.out, /total timeout of 300ms/);
  assert.ok(cut.text.length > 0 && cut.text.length < words.length, `streamed ${cut.text.length} chars before the limit`);
  // The fast stream of the same words fits in the same limit.
  const fits = await runOn(fast, { totalTimeoutMs: 2_000 });
  assert.equal(fits.out.status, 'completed', JSON.stringify(fits.out));
  assert.equal(fits.out.finalText, words);

  // totalTimeoutMs alone, under the 60 s first byte default: accepted, and a late head ends at the total.
  const late = await mockWith(t, async (res) => {
    await hold(res, 10_000);
  });
  const { out, ms } = await runOn(late, { totalTimeoutMs: 200 });
  assertTimedOut(out, /total timeout of 200ms/);
  assert.ok(ms < 5_000, `failed after ${ms} ms`);
});

test('afterFinishTimeoutMs: a stream silent after its finish reason keeps the answer once the limit passes; the rest read when it comes in time', async (t) => {
  // The answer up to its finish reason, then a 10 s silence (cut short when the client closes),
  // then the usage chunk and [DONE].
  const chunks = textChunks('all of the answer');
  const stalled = (pauseMs) => async (res) => {
    res.writeHead(200, SSE_HEAD);
    await writeChunks(res, chunks.slice(0, -1), 3);
    await hold(res, pauseMs);
    await writeChunks(res, chunks.slice(-1), 3);
    if (!res.destroyed) res.end('data: [DONE]\n\n');
  };
  const silent = await mockWith(t, stalled(10_000));
  // An OpenAI reasoning model's idle default is the whole 600 s total: the option ends the wait.
  for (const model of ['m', 'o3']) {
    const { out, ms, text } = await runOn(silent, { model, afterFinishTimeoutMs: 150 });
    assert.equal(out.status, 'completed', JSON.stringify(out));
    assert.equal(out.finalText, 'all of the answer');
    assert.equal(text, 'all of the answer');
    assert.ok(ms < 3_000, `${model}: completed after ${ms} ms, not soon after the 150 ms limit (the default is 5 s)`);
    assert.equal(JSON.parse(out.usageJson ?? 'null')?.total_tokens ?? 0, 0, 'the usage chunk never came');
  }
  // A pause shorter than the limit: the usage chunk after it is read.
  const late = await mockWith(t, stalled(300));
  const { out } = await runOn(late, { afterFinishTimeoutMs: 3_000 });
  assert.equal(out.status, 'completed', JSON.stringify(out));
  assert.equal(JSON.parse(out.usageJson).total_tokens, 45);
});

const FIELDS = ['connectTimeoutMs', 'firstByteTimeoutMs', 'idleTimeoutMs', 'totalTimeoutMs', 'afterFinishTimeoutMs'];

test('a timeout that is not a whole number of ms from 1 to 86400000 is config_invalid naming the field', () => {
  for (const base of [{ provider: 'custom', baseUrl: 'http://127.0.0.1:9/v1', model: 'm' }, { provider: 'scripted', scriptJson: '[]' }]) {
    for (const field of FIELDS) {
      for (const value of [0, -5, 1.5, Number.NaN, Number.POSITIVE_INFINITY, 86_400_001]) {
        const e = throwsWithCode(assert, () => new Agent({ ...base, [field]: value }), 'config_invalid', 'config');
        assert.match(e.message, new RegExp(`^${field} must be a whole number of milliseconds from 1 to 86400000`), `${field}=${value}: ${e.message}`);
      }
      // Not a number at all: the binding's argument error, naming the field.
      const e = throwsWithCode(assert, () => new Agent({ ...base, [field]: '100' }), 'argument_invalid');
      assert.match(e.message, new RegExp(field), e.message);
      // The bounds themselves are fine (each alone: with 1 ms nothing else conflicts).
      assert.ok(new Agent({ ...base, [field]: 1, connectTimeoutMs: 1 }));
    }
    assert.ok(new Agent({ ...base, connectTimeoutMs: 86_400_000, firstByteTimeoutMs: 86_400_000, idleTimeoutMs: 86_400_000, totalTimeoutMs: 86_400_000 }));
  }
});

test('a limit above the one that bounds it is config_invalid naming both; unset defaults above a total are lowered to it', () => {
  const base = { provider: 'custom', baseUrl: 'http://127.0.0.1:9/v1', model: 'gpt-4o' };
  const refused = [
    [{ firstByteTimeoutMs: 2_000, totalTimeoutMs: 1_000 }, /^firstByteTimeoutMs \(2000\) is above totalTimeoutMs \(1000\): the total timeout ends the whole call first/],
    [{ idleTimeoutMs: 5_000, totalTimeoutMs: 1_000 }, /^idleTimeoutMs \(5000\) is above totalTimeoutMs \(1000\)/],
    [{ idleTimeoutMs: 900_000 }, /^idleTimeoutMs \(900000\) is above totalTimeoutMs \(600000, not set: the default in effect for model "gpt-4o"\).*set totalTimeoutMs too$/],
    [{ connectTimeoutMs: 5_000, firstByteTimeoutMs: 1_000 }, /^connectTimeoutMs \(5000\) is above firstByteTimeoutMs \(1000\): the first byte timeout includes connecting/],
    // The first byte default (60 s) lowered to the total set is the bound.
    [{ connectTimeoutMs: 30_000, totalTimeoutMs: 20_000 }, /^connectTimeoutMs \(30000\) is above firstByteTimeoutMs \(20000, not set/],
    [{ connectTimeoutMs: 90_000 }, /^connectTimeoutMs \(90000\) is above firstByteTimeoutMs \(60000, not set/],
  ];
  for (const [options, pattern] of refused) {
    const e = throwsWithCode(assert, () => new Agent({ ...base, ...options }), 'config_invalid', 'config');
    assert.match(e.message, pattern, JSON.stringify(options));
  }
  for (const options of [
    { totalTimeoutMs: 1_000 }, // 60 s first byte and idle defaults (and 10 s connect) lowered to 1 s
    { firstByteTimeoutMs: 500 }, // the 10 s connect default lowered to 500 ms
    { firstByteTimeoutMs: 1_000, idleTimeoutMs: 1_000, totalTimeoutMs: 1_000, connectTimeoutMs: 1_000 }, // equal is fine
    { firstByteTimeoutMs: 120_000, idleTimeoutMs: 300_000 }, // raised, under the 600 s total
    { connectTimeoutMs: 60_000 },
  ]) {
    assert.ok(new Agent({ ...base, ...options }), JSON.stringify(options));
  }
  // OpenAI's reasoning models: first byte and idle default to the total and follow a raised total.
  const o3 = { ...base, model: 'o3' };
  assert.ok(new Agent({ ...o3, idleTimeoutMs: 600_000 }));
  assert.ok(new Agent({ ...o3, idleTimeoutMs: 1_200_000, totalTimeoutMs: 1_200_000 }));
  assert.ok(new Agent({ ...o3, connectTimeoutMs: 900_000, totalTimeoutMs: 1_200_000 }), 'the first byte limit followed the total up');
  const e = throwsWithCode(assert, () => new Agent({ ...o3, connectTimeoutMs: 900_000 }), 'config_invalid', 'config');
  assert.match(e.message, /^connectTimeoutMs \(900000\) is above firstByteTimeoutMs \(600000, not set: the default in effect for model "o3"\)/);
});
