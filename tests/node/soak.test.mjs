// The node soak (soak_app.mjs): seeded random interleavings of the whole API of the real module,
// several agents over shared state directories, against a mock model with faults; every promise
// settles, every error is a documented code, no call runs twice or without its approval, no
// denied call runs, every run ends, and a fresh agent brings every session to an end with its
// pairing intact. Then the same with a SIGKILL at a random step, operations in flight, and the
// drive in a new process: nothing the killed process ran runs again, no acknowledged decision is
// lost, no denied call runs. A few seeds in CI; ARKAGENT_NODE_SOAK_SEEDS=<n> (and ARKAGENT_NODE_SOAK_STEPS,
// ARKAGENT_NODE_SOAK_FIRST_SEED) hunt longer.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { runNode, runUntilKilled } from './helper.mjs';

const app = fileURLToPath(new URL('./soak_app.mjs', import.meta.url));
const seeds = Number(process.env.ARKAGENT_NODE_SOAK_SEEDS ?? 3);
const steps = Number(process.env.ARKAGENT_NODE_SOAK_STEPS ?? 500);
const firstSeed = Number(process.env.ARKAGENT_NODE_SOAK_FIRST_SEED ?? 1);

/** Runs the soak in a child process; resolves to its summary (and exit code). */
async function soak(seed, env = {}) {
  const { code, out, err } = await runNode(['--expose-gc', app], {
    env: { SOAK_SEED: String(seed), SOAK_STEPS: String(steps), ...env },
    ms: 120_000,
  });
  const line = out.split('\n').find((l) => l.startsWith('{'));
  assert.ok(line, `seed ${seed}: no summary (exit ${code}); stderr: ${err.slice(-2000)}`);
  return { code, summary: JSON.parse(line) };
}

test(`the soak keeps every invariant over ${seeds} seeds of ${steps} operations`, { timeout: 600_000 }, async () => {
  const total = { toolRuns: 0, approvals: 0, denials: 0, runs: 0 };
  const outcomes = new Set();
  for (let seed = firstSeed; seed < firstSeed + seeds; seed++) {
    const { code, summary } = await soak(seed);
    assert.deepEqual(summary.violations, [], `seed ${seed} (rerun: SOAK_SEED=${seed} SOAK_STEPS=${steps} node --expose-gc tests/node/soak_app.mjs)`);
    assert.equal(code, 0);
    assert.equal(summary.ops, steps, 'every operation was made');
    for (const k of Object.keys(total)) total[k] += summary[k];
    for (const k of Object.keys(summary.counts)) {
      const m = /^(?:run|resume|dismiss) (\w+)/.exec(k);
      if (m) outcomes.add(m[1]);
    }
  }
  // The soak did reach what it claims to check: calls ran, users approved and denied, runs ended
  // in each way.
  assert.ok(total.toolRuns >= 10 * seeds && total.approvals >= 3 * seeds && total.denials >= 1 && total.runs >= 20 * seeds,
    JSON.stringify(total));
  for (const o of ['completed', 'awaiting_approval', 'cancelled', 'failed', 'rejected']) {
    assert.ok(outcomes.has(o), `no ${o} outcome in ${[...outcomes]}`);
  }
});

test('the soak can fail: forgetting the approvals it asked for is reported', { timeout: 120_000 }, async () => {
  const { code, summary } = await soak(firstSeed, { SOAK_SABOTAGE: 'forget_approvals' });
  assert.equal(code, 1);
  assert.ok(summary.violations.some((v) => /ran without an approve\(\) asked for/.test(v)), summary.violations.join('\n'));
});

test(`killed at a random step, ${seeds} times: a new process drives every session to an end and nothing runs twice`, { timeout: 600_000 }, async () => {
  let driven = 0;
  let resumed = 0;
  let ranBefore = 0;
  for (let seed = firstSeed; seed < firstSeed + seeds; seed++) {
    const root = mkdtempSync(join(tmpdir(), 'arkagent-soak-kill-'));
    const dirs = [join(root, 'a'), join(root, 'b')].join(':');
    const journal = join(root, 'journal');
    const killAt = 60 + ((seed * 97) % 240);
    const env = { SOAK_SEED: String(seed), SOAK_STEPS: String(killAt + 10_000), SOAK_DIRS: dirs, SOAK_JOURNAL: journal, SOAK_KILL_AT: String(killAt) };
    for (const d of dirs.split(':')) mkdirSync(d);
    writeFileSync(journal, '');
    await runUntilKilled(['--expose-gc', app], (out) => out.includes('kill point'), `the kill point of seed ${seed}`, { env, ms: 60_000 });
    ranBefore += readFileSync(journal, 'utf8').split('\n').filter((l) => l.startsWith('run ')).length;
    const { code, summary } = await soak(seed, { ...env, SOAK_MODE: 'drive', SOAK_KILL_AT: '' });
    assert.deepEqual(summary.violations, [], `seed ${seed}, killed at step ${killAt}`);
    assert.equal(code, 0);
    driven += Object.values(summary.endStatuses).reduce((a, b) => a + b, 0);
    resumed += Object.entries(summary.counts).filter(([k]) => k.startsWith('final resume')).reduce((a, [, n]) => a + n, 0);
    rmSync(root, { recursive: true, force: true });
  }
  assert.ok(ranBefore >= 5 * seeds && driven >= 3 * seeds && resumed >= 1, JSON.stringify({ ranBefore, driven, resumed }));
});
