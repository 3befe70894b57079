// Builds the cdylib with the `napi` feature (debug profile, host link shims from build.rs) and
// loads it with process.dlopen. Set ARKAGENT_SO to load an already built .so instead (scripts/test.sh
// builds once and sets it, so parallel test files do not each run cargo).
import assert from 'node:assert/strict';
import { execFileSync, spawn } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

export const repoRoot = resolve(dirname(fileURLToPath(import.meta.url)), '..', '..');

/** Builds the module (unless ARKAGENT_SO is set) and returns the path of the .so. */
export function buildModule() {
  if (process.env.ARKAGENT_SO) {
    return process.env.ARKAGENT_SO;
  }
  execFileSync('cargo', ['build', '--features', 'napi', '--lib', '--quiet'], {
    cwd: repoRoot,
    stdio: ['ignore', 'inherit', 'inherit'],
  });
  const targetDir = process.env.CARGO_TARGET_DIR ?? join(repoRoot, 'target');
  const so = join(targetDir, 'debug', 'libarkagent.so');
  if (!existsSync(so)) {
    throw new Error(`cargo build did not produce ${so}`);
  }
  process.env.ARKAGENT_SO = so;
  return so;
}

/**
 * The path of the module built with the test-only `napi-panic-test` feature (its `panicNext(site,
 * detail)` makes the next call reaching `site` panic): ARKAGENT_PANIC_SO when set (scripts/test.sh
 * builds it), else built here into its own target dir (target/napi-panic-test, so the debug .so of
 * the other tests is untouched).
 */
export function buildPanicModule() {
  if (process.env.ARKAGENT_PANIC_SO) {
    return process.env.ARKAGENT_PANIC_SO;
  }
  const targetDir = join(repoRoot, 'target', 'napi-panic-test');
  execFileSync('cargo', ['build', '--features', 'napi-panic-test', '--lib', '--quiet', '--target-dir', targetDir], {
    cwd: repoRoot,
    stdio: ['ignore', 'inherit', 'inherit'],
  });
  const so = join(targetDir, 'debug', 'libarkagent.so');
  if (!existsSync(so)) {
    throw new Error(`cargo build did not produce ${so}`);
  }
  process.env.ARKAGENT_PANIC_SO = so;
  return so;
}

/**
 * Starts `node ...args` with the module's path in ARKAGENT_SO (and `env` on top): the process, its
 * output so far (`io.out`, `io.err`, growing as it writes) and `closed`, which resolves once it has
 * exited and closed its output, to its exit code or the signal that ended it.
 */
function startNode(args, env) {
  const proc = spawn(process.execPath, args, {
    env: { ...process.env, ARKAGENT_SO: buildModule(), ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const io = { out: '', err: '' };
  proc.stdout.on('data', (d) => (io.out += d));
  proc.stderr.on('data', (d) => (io.err += d));
  const closed = new Promise((resolve) => proc.on('close', (code, signal) => resolve(signal ?? code)));
  return { proc, io, closed };
}

/**
 * Runs `node ...args` with the module's path in ARKAGENT_SO (and `env` on top) and resolves once it
 * has exited and closed its output: `code` (the exit code, or the signal that ended it), `out`,
 * `err`. A child still running after `ms` is killed (code 'SIGKILL').
 */
export async function runNode(args, { env = {}, ms = 20_000 } = {}) {
  const { proc, io, closed } = startNode(args, env);
  const timer = setTimeout(() => proc.kill('SIGKILL'), ms);
  const code = await closed;
  clearTimeout(timer);
  return { code, out: io.out, err: io.err };
}

/**
 * Starts `node ...args` with the module's path in ARKAGENT_SO (and `env` on top) and resolves once
 * its output satisfies `ready(out)`, the child still running: `io` (its output so far, growing) and
 * `kill()`, which kills it with SIGKILL, as a phone kills an app, asserts it died of the kill, not on
 * its own, and resolves to its output `{ out, err }`. A child that exits first, or is not ready
 * within `ms` (`what` names the awaited moment in the timeout error), is killed and fails the call.
 */
export async function startUntil(args, ready, what, { env = {}, ms = 15_000 } = {}) {
  const { proc, io, closed } = startNode(args, env);
  const kill = async () => {
    proc.kill('SIGKILL');
    assert.equal(await closed, 'SIGKILL', `killed while ${what}, not ended by itself: ${io.err}`);
    return { out: io.out, err: io.err };
  };
  try {
    await waitFor(() => ready(io.out) || proc.exitCode !== null, what, ms);
  } catch (e) {
    proc.kill('SIGKILL');
    throw e;
  }
  if (!ready(io.out)) {
    await kill();
  }
  return { io, kill };
}

/**
 * Runs `node ...args` with the module's path in ARKAGENT_SO (and `env` on top) until its output
 * satisfies `ready(out)` (or it exits), then kills it with SIGKILL, as a phone kills an app: asserts
 * it died of the kill, not on its own, and resolves to its output `{ out, err }`. `what` names the
 * awaited moment in the timeout error (after `ms`).
 */
export async function runUntilKilled(args, ready, what, options = {}) {
  const { kill } = await startUntil(args, ready, what, options);
  return kill();
}

/**
 * An Agent over `stateDir` replaying the scripted `answers`, with one dangerous tool, wipe_cache,
 * that records the arguments of each run in `runs`.
 */
export function openWipeAgent(stateDir, answers, runs, extra = {}) {
  const { Agent } = loadModule();
  const agent = new Agent({ provider: 'scripted', scriptJson: JSON.stringify(answers), stateDir, ...extra });
  agent.registerTool(
    { name: 'wipe_cache', description: 'wipes the local cache', parametersJson: objectSchema, riskLevel: 'dangerous' },
    (args) => {
      runs.push(JSON.parse(args));
      return { contents: [{ type: 'text', text: 'wiped' }] };
    },
  );
  return agent;
}

/** The loaded module (its exports object). */
export function loadModule() {
  const so = buildModule();
  const module = { exports: {} };
  process.dlopen(module, so);
  return module.exports;
}

/** The text of the .d.ts of the module. */
export function readDts() {
  return readFileSync(join(repoRoot, 'arkts-bindings/src/main/cpp/types/libarkagent/index.d.ts'), 'utf8');
}

/** Asserts that a promise rejects with an Error carrying this code (and layer, when given). */
export async function rejectsWithCode(assert, promise, code, layer) {
  let error;
  try {
    const value = await promise;
    assert.fail(`expected a rejection with ${code}, got ${JSON.stringify(value)}`);
  } catch (e) {
    error = e;
  }
  assert.ok(error instanceof Error, `expected an Error, got ${error}`);
  assert.equal(error.code, code, `code of: ${error.message}`);
  if (layer !== undefined) {
    assert.equal(error.layer, layer, `layer of: ${error.message}`);
  }
  return error;
}

/** Asserts that a function throws an Error carrying this code (and layer, when given). */
export function throwsWithCode(assert, fn, code, layer) {
  let error;
  try {
    fn();
  } catch (e) {
    error = e;
  }
  assert.ok(error instanceof Error, `expected a throw with ${code}`);
  assert.equal(error.code, code, `code of: ${error.message}`);
  if (layer !== undefined) {
    assert.equal(error.layer, layer, `layer of: ${error.message}`);
  }
  return error;
}

/** A text ToolResultObject. */
export function text(t) {
  return { contents: [{ type: 'text', text: t }] };
}

export const objectSchema = JSON.stringify({ type: 'object' });

/**
 * Keeps the JS thread busy for `ms` (the app's own synchronous work on the UI thread, a synchronous
 * executor): calls queued for it meanwhile wait.
 */
export function busy(ms) {
  const until = Date.now() + ms;
  while (Date.now() < until) { /* the app's own work */ }
}

/**
 * An executor's answer: a Promise that resolves to `result` on a later turn of the event loop, then
 * runs `then` right after the binding has taken the answer (its reaction to the Promise is queued
 * first), before the JS thread goes back to the event loop: a call the runtime queues for the
 * thread meanwhile (the call's afterToolCall) waits until `then` returns.
 */
export function resolveThen(result, then) {
  return new Promise((resolve) => setTimeout(() => {
    resolve(result);
    queueMicrotask(then);
  }, 0));
}

/** Waits until `condition()` is true (polling), or fails after `ms`. */
export async function waitFor(condition, what, ms = 5000) {
  const deadline = Date.now() + ms;
  while (!condition()) {
    if (Date.now() > deadline) {
      throw new Error(`timed out after ${ms} ms waiting for ${what}`);
    }
    await new Promise((resolve) => setTimeout(resolve, 2));
  }
}
