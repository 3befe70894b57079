// The demo (examples/assistant.rs, README's first command) as a newcomer runs it: its exit status,
// the session each mode uses, the ARKAGENT_* variables it reads (incomplete ones are refused,
// never a silent offline run), streaming off and plain http to a LAN host, a key the server echoes
// percent-encoded, a reader that stops early (`| head`), --help and --resume with a prompt.
// Runs the built example: ASSISTANT, or $CARGO_TARGET_DIR/debug/examples/assistant
// (`cargo build --example assistant` first; scripts/test.sh does).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync, statSync, existsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { startMock, streamChunks, textChunks, toolCallChunks } from '../node/mock_openai.mjs';

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '..', '..');
const BIN =
  process.env.ASSISTANT ?? resolve(process.env.CARGO_TARGET_DIR ?? 'target', 'debug', 'examples', 'assistant');

/** The environment without any ARKAGENT_* variable, plus `vars`. */
function envWith(vars = {}) {
  const env = {};
  for (const [k, v] of Object.entries(process.env)) {
    if (!k.startsWith('ARKAGENT_')) env[k] = v;
  }
  return { ...env, ...vars };
}

/**
 * Runs the demo with stdin closed; resolves {code, stdout, stderr}. With `untilLine`, kills it once
 * stdout has a line containing that text (for endpoints that cannot be reached from a test).
 */
function demo(args, vars = {}, { untilLine } = {}) {
  return new Promise((done, fail) => {
    const child = spawn(BIN, args, { env: envWith(vars), stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.setEncoding('utf8').on('data', (d) => {
      stdout += d;
      if (untilLine !== undefined && stdout.includes(untilLine)) child.kill();
    });
    child.stderr.setEncoding('utf8').on('data', (d) => (stderr += d));
    const timer = setTimeout(() => child.kill(), 30_000);
    child.on('error', fail);
    child.on('close', (code, signal) => {
      clearTimeout(timer);
      done({ code, signal, stdout, stderr });
    });
  });
}

function stateDir() {
  return mkdtempSync(join(tmpdir(), 'arkagent-demo-'));
}

/** The text of every file under `dir`. */
function allFiles(dir) {
  const out = [];
  for (const name of readdirSync(dir)) {
    const path = join(dir, name);
    if (statSync(path).isDirectory()) out.push(...allFiles(path));
    else out.push([path, readFileSync(path, 'latin1')]);
  }
  return out;
}

test('the demo binary is built', () => {
  assert.ok(existsSync(BIN), `${BIN}: run cargo build --example assistant first`);
});

test('a failed run exits 1 with its error on stderr; a run that ends without an answer exits 3', async () => {
  const dir = stateDir();
  try {
    // A refused key (not retried), and a 200 whose body is not an answer.
    for (const answer of [
      (res) => res.writeHead(401, { 'content-type': 'application/json' }).end('{"error":{"message":"bad key","code":"invalid_api_key"}}'),
      (res) => res.writeHead(200, { 'content-type': 'text/html' }).end('<html>maintenance</html>'),
    ]) {
      const mock = await startMock((_i, _req, res) => answer(res));
      const r = await demo(['--state-dir', dir, 'hi'], { ARKAGENT_BASE_URL: mock.baseUrl, ARKAGENT_MODEL: 'm', ARKAGENT_API_KEY: 'sk-x' });
      await mock.close();
      assert.equal(r.code, 1, `${r.stdout}\n${r.stderr}`);
      assert.match(r.stderr, /error: run ended Failed: provider/);
      assert.doesNotMatch(r.stdout, /run ended Failed/);
    }
    // The model asks for the same call again and again: the loop detector ends the run.
    const mock = await startMock((_i, _req, res) => streamChunks(res, toolCallChunks('c', 'query_stock', '{"sku":"SKU001"}')));
    const r = await demo(['--state-dir', dir, '--session', 'loop', 'hi'], { ARKAGENT_BASE_URL: mock.baseUrl, ARKAGENT_MODEL: 'm' });
    await mock.close();
    assert.equal(r.code, 3, `${r.stdout}\n${r.stderr}`);
    assert.match(r.stdout, /run finished: LoopDetected/);
    assert.match(r.stderr, /without the model's answer: LoopDetected/);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

/** How many times `needle` occurs in `text`. */
function count(text, needle) {
  return text.split(needle).length - 1;
}

test("max_rounds prints the fallback answer once, streamed or not; a model's answer is never printed twice", async () => {
  const dir = stateDir();
  const FALLBACK = '已多次调用工具仍未得到结论，请稍后重试或联系人工客服。';
  // A new call every round (no loop), never an answer: the round limit (10) ends the run.
  const call = (i) => ({ id: `c${i}`, type: 'function', function: { name: 'query_order', arguments: JSON.stringify({ order_id: String(i) }) } });
  const rounds = await startMock((i, req, res) => {
    if (req.body.stream) return streamChunks(res, toolCallChunks(`c${i}`, 'query_order', JSON.stringify({ order_id: String(i) })));
    const body = { id: 'x', object: 'chat.completion', choices: [{ index: 0, message: { role: 'assistant', content: null, tool_calls: [call(i)] }, finish_reason: 'tool_calls' }] };
    res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(body));
  });
  // A preamble with a call, then the answer.
  const answers = [
    { role: 'assistant', content: '我查一下订单。', tool_calls: [call(1)] },
    { role: 'assistant', content: '订单已发货，顺丰 SF123456。' },
  ];
  const answering = await startMock((i, req, res) => {
    const message = answers[Math.min(i % 2, 1)];
    if (req.body.stream) {
      const chunks = message.tool_calls
        ? [...textChunks(message.content).slice(0, -2), ...toolCallChunks('c1', 'query_order', message.tool_calls[0].function.arguments)]
        : textChunks(message.content);
      return streamChunks(res, chunks);
    }
    const body = { id: 'x', object: 'chat.completion', choices: [{ index: 0, message, finish_reason: message.tool_calls ? 'tool_calls' : 'stop' }] };
    res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(body));
  });
  try {
    for (const stream of ['1', '0']) {
      const r = await demo(['--state-dir', dir, '--session', `rounds${stream}`, 'hi'], { ARKAGENT_BASE_URL: rounds.baseUrl, ARKAGENT_MODEL: 'm', ARKAGENT_STREAM: stream });
      assert.equal(r.code, 3, `${r.stdout}\n${r.stderr}`);
      assert.equal(count(r.stdout, FALLBACK), 1, `stream=${stream}: ${r.stdout}`);
      assert.ok(r.stdout.includes(`${FALLBACK}\n[run finished: MaxRounds]`), r.stdout);
      assert.match(r.stderr, /without the model's answer: MaxRounds/);

      const a = await demo(['--state-dir', dir, '--session', `answer${stream}`, 'hi'], { ARKAGENT_BASE_URL: answering.baseUrl, ARKAGENT_MODEL: 'm', ARKAGENT_STREAM: stream });
      assert.equal(a.code, 0, `${a.stdout}\n${a.stderr}`);
      assert.equal(count(a.stdout, '我查一下订单。'), 1, `stream=${stream}: ${a.stdout}`);
      assert.equal(count(a.stdout, '订单已发货，顺丰 SF123456。'), 1, `stream=${stream}: ${a.stdout}`);
      assert.ok(a.stdout.includes('订单已发货，顺丰 SF123456。\n[run finished: Completed]'), a.stdout);
    }
    // The offline scenario's answer, streamed and not: once.
    for (const args of [[], ['--no-stream']]) {
      const offline = await demo(['--approve', ...args, '--state-dir', dir, '--session', `o${args.length}`]);
      assert.equal(offline.code, 0, offline.stderr);
      assert.equal(count(offline.stdout, 'SKU001 高筋面粉在上海仓还有 42 件'), 1, offline.stdout);
    }
  } finally {
    await rounds.close();
    await answering.close();
    rmSync(dir, { recursive: true, force: true });
  }
});

test("the online mode has its own session: the offline scenario never reaches a real model", async () => {
  const dir = stateDir();
  const mock = await startMock((_i, _req, res) => streamChunks(res, textChunks('您的订单已发货。')));
  try {
    // README's two commands in a row: offline (left pending), then against the endpoint.
    const offline = await demo(['--later', '--state-dir', dir]);
    assert.equal(offline.code, 0, offline.stderr);
    assert.match(offline.stdout, /state: .*\/demo\n/);
    const online = await demo(['--state-dir', dir, '我的订单 20261010 到哪了？'], {
      ARKAGENT_BASE_URL: mock.baseUrl, ARKAGENT_MODEL: 'm', ARKAGENT_API_KEY: 'sk-x',
    });
    assert.equal(online.code, 0, online.stderr);
    assert.match(online.stdout, /state: .*\/live\n/);
    assert.match(online.stdout, /您的订单已发货。/);
    const sent = mock.requests[0].body.messages;
    assert.deepEqual(sent.map((m) => m.role), ['system', 'user'], JSON.stringify(sent));
    // The offline session still waits for its decision; asking in it again says how to go on.
    const again = await demo(['--state-dir', dir, 'hi']);
    assert.equal(again.code, 1);
    assert.match(again.stderr, /approval_pending/);
    assert.match(again.stderr, /--resume/);
    assert.match(again.stderr, /--session/);
  } finally {
    await mock.close();
    rmSync(dir, { recursive: true, force: true });
  }
});

test('incomplete ARKAGENT_* variables are refused, naming what is missing; a keyless server works', async () => {
  const dir = stateDir();
  const mock = await startMock((_i, _req, res) => streamChunks(res, textChunks('ok from the local server')));
  try {
    for (const [vars, missing] of [
      [{ ARKAGENT_BASE_URL: mock.baseUrl }, 'ARKAGENT_MODEL'],
      [{ ARKAGENT_MODEL: 'm', ARKAGENT_API_KEY: 'sk-x' }, 'ARKAGENT_BASE_URL'],
      [{ ARKAGENT_PROVIDER: 'deepseek', ARKAGENT_MODEL: 'deepseek-chat' }, 'ARKAGENT_API_KEY'],
      // Set but blank counts as set, and as missing: never an offline run.
      [{ ARKAGENT_MODEL: '   ' }, 'ARKAGENT_MODEL \\(set but blank'],
      [{ ARKAGENT_BASE_URL: '', ARKAGENT_MODEL: 'm' }, 'ARKAGENT_BASE_URL \\(set but blank'],
      [{ ARKAGENT_BASE_URL: mock.baseUrl, ARKAGENT_MODEL: 'm', ARKAGENT_API_KEY: ' ' }, 'ARKAGENT_API_KEY \\(set but blank'],
      [{ ARKAGENT_PROVIDER: '\t' }, 'ARKAGENT_PROVIDER \\(set but blank'],
    ]) {
      const r = await demo(['--state-dir', dir, 'hi'], vars);
      assert.equal(r.code, 2, `${JSON.stringify(vars)}: ${r.stdout}`);
      assert.match(r.stderr, new RegExp(`missing ${missing}`), JSON.stringify(vars));
      assert.doesNotMatch(r.stdout, /scripted|query_order/, 'no silent offline run');
    }
    assert.equal(mock.requests.length, 0);
    assert.deepEqual(readdirSync(dir), [], 'nothing was run');
    // A local server that needs no key: URL and model are enough; no Authorization header goes.
    const r = await demo(['--state-dir', dir, 'hi'], { ARKAGENT_BASE_URL: mock.baseUrl, ARKAGENT_MODEL: 'llama3' });
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stdout, /model: llama3 at http:\/\/127\.0\.0\.1:\d+\/v1\/chat\/completions \(online, streamed, no API key\)/);
    assert.match(r.stdout, /ok from the local server/);
    assert.equal(mock.requests[0].authorization, undefined);
    // A preset supplies its URL (the run is not let out to the real service).
    const preset = await demo(['--state-dir', dir, 'hi'],
      { ARKAGENT_PROVIDER: 'deepseek', ARKAGENT_API_KEY: 'sk-x', ARKAGENT_MODEL: 'deepseek-chat' },
      { untilLine: 'state:' });
    assert.match(preset.stdout, /model: deepseek-chat at https:\/\/api\.deepseek\.com\/chat\/completions \(online, streamed\)/);
    // The offline mode says so too.
    const offline = await demo(['--later', '--state-dir', dir, '--session', 'o']);
    assert.match(offline.stdout, /model: the built-in scripted model \(offline\)/);
  } finally {
    await mock.close();
    rmSync(dir, { recursive: true, force: true });
  }
});

test('ARKAGENT_STREAM=0 asks without streaming and still shows the calls and the answer', async () => {
  const dir = stateDir();
  const answers = [
    { role: 'assistant', content: '我查一下订单。', tool_calls: [{ id: 'c1', type: 'function', function: { name: 'query_order', arguments: '{"order_id":"20261010"}' } }] },
    { role: 'assistant', content: '订单已发货，顺丰 SF123456。' },
  ];
  const mock = await startMock((i, _req, res) => {
    const message = answers[Math.min(i, answers.length - 1)];
    const body = { id: 'x', object: 'chat.completion', choices: [{ index: 0, message, finish_reason: message.tool_calls ? 'tool_calls' : 'stop' }] };
    res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(body));
  });
  try {
    const r = await demo(['--state-dir', dir, 'hi'], { ARKAGENT_BASE_URL: mock.baseUrl, ARKAGENT_MODEL: 'm', ARKAGENT_STREAM: '0' });
    assert.equal(r.code, 0, r.stderr);
    assert.notEqual(mock.requests[0].body.stream, true, "no streaming asked");
    assert.match(r.stdout, /not streamed/);
    assert.match(r.stdout, /我查一下订单。\n  🔧 query_order \{"order_id":"20261010"\}\n  ✓ query_order → \{/);
    assert.match(r.stdout, /订单已发货，顺丰 SF123456。\n\[run finished: Completed\]/);
    // Set but blank is not unset: refused, naming it, before anything runs.
    const blank = await demo(['--state-dir', dir, 'hi'], { ARKAGENT_BASE_URL: mock.baseUrl, ARKAGENT_MODEL: 'm', ARKAGENT_STREAM: ' ' });
    assert.equal(blank.code, 2, blank.stdout);
    assert.match(blank.stderr, /ARKAGENT_STREAM is set but blank/);
    assert.equal(mock.requests.length, 2);
    // The offline scenario with --no-stream shows every step too.
    const offline = await demo(['--approve', '--no-stream', '--state-dir', dir, '--session', 'o']);
    assert.equal(offline.code, 0, offline.stderr);
    for (const expected of ['🔧 query_order', '🔧 clear_baking_cache', 'tool_not_found', '已清空', 'SKU001 高筋面粉在上海仓还有 42 件', '已清空 12 条烘焙缓存']) {
      assert.ok(offline.stdout.includes(expected), `lacks ${expected}: ${offline.stdout}`);
    }
  } finally {
    await mock.close();
    rmSync(dir, { recursive: true, force: true });
  }
});

test('plain http to a LAN host is refused naming the override, and allowed with ARKAGENT_ALLOW_INSECURE_HTTP=1', async () => {
  const dir = stateDir();
  try {
    const vars = { ARKAGENT_BASE_URL: 'http://10.255.255.1:9/v1', ARKAGENT_MODEL: 'm' };
    const refused = await demo(['--state-dir', dir, 'hi'], vars);
    assert.equal(refused.code, 2);
    assert.match(refused.stderr, /insecure_url: .*allowInsecureHttp.*allow_insecure_http/);
    // The demo's own switches, which the library's message cannot know.
    assert.match(refused.stderr, /--allow-insecure-http/);
    assert.match(refused.stderr, /ARKAGENT_ALLOW_INSECURE_HTTP=1/);
    assert.doesNotMatch(refused.stdout, /scripted|query_order/, 'no silent offline run');
    for (const [more, args] of [[{ ARKAGENT_ALLOW_INSECURE_HTTP: '1' }, []], [{}, ['--allow-insecure-http']]]) {
      const allowed = await demo([...args, '--state-dir', dir, 'hi'], { ...vars, ...more }, { untilLine: 'state:' });
      assert.match(allowed.stdout, /model: m at http:\/\/10\.255\.255\.1:9\/v1\/chat\/completions \(online/, allowed.stderr);
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('a key the server echoes percent-encoded is in neither the error nor the state', async () => {
  const dir = stateDir();
  const key = 'bce-v3/ALTAK-abc/SECRET9';
  const mock = await startMock((_i, req, res) => {
    const echoed = encodeURIComponent((req.authorization ?? '').replace(/^Bearer /, ''));
    res.writeHead(403, { 'content-type': 'text/plain' }).end(`denied for ${echoed}`);
  });
  try {
    const r = await demo(['--state-dir', dir, 'hi'], { ARKAGENT_BASE_URL: mock.baseUrl, ARKAGENT_MODEL: 'm', ARKAGENT_API_KEY: key });
    assert.equal(r.code, 1);
    assert.match(r.stderr, /denied for <redacted>/);
    assert.ok(!`${r.stdout}${r.stderr}`.includes('SECRET9'), r.stderr);
    const files = allFiles(dir);
    assert.ok(files.length > 0);
    for (const [path, text] of files) assert.ok(!text.includes('SECRET9'), `the key is in ${path}`);
  } finally {
    await mock.close();
    rmSync(dir, { recursive: true, force: true });
  }
});

test('a reader that stops early (| head -3) ends the demo quietly', async () => {
  const dir = stateDir();
  try {
    const r = await new Promise((done) => {
      const child = spawn('bash', ['-c', `"$0" --state-dir "$1" </dev/null | head -3 >/dev/null; echo "\${PIPESTATUS[0]}"`, BIN, dir], { env: envWith() });
      let stdout = '';
      let stderr = '';
      child.stdout.setEncoding('utf8').on('data', (d) => (stdout += d));
      child.stderr.setEncoding('utf8').on('data', (d) => (stderr += d));
      child.on('close', () => done({ stdout, stderr }));
    });
    assert.equal(r.stdout.trim(), '0', r.stderr);
    assert.doesNotMatch(r.stderr, /panicked|Broken pipe/);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('--help prints the usage on stdout and exits 0; --resume with a prompt is refused', async () => {
  const help = await demo(['--help']);
  assert.equal(help.code, 0);
  assert.match(help.stdout, /^usage: assistant /);
  assert.match(help.stdout, /exit status/);
  // Exit 2 covers a URL the demo refuses (plain http to a LAN host), as README says.
  assert.match(help.stdout.replace(/\s+/g, ' '), /2 bad option or configuration \(incomplete or blank ARKAGENT_\* variables, a refused URL/);
  const readme = readFileSync(join(ROOT, 'README.md'), 'utf8').replace(/\s+/g, ' ');
  assert.match(readme, /2 for a bad option or configuration: incomplete or blank `ARKAGENT_\*` variables, a refused URL \(`insecure_url`/);
  const dir = stateDir();
  try {
    const r = await demo(['--resume', '--state-dir', dir, 'a new question']);
    assert.equal(r.code, 2);
    assert.match(r.stderr, /--resume .* takes no prompt/);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
