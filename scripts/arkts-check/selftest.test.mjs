// Proves the ArkTS check can fail: it must report every known violation of fixtures/bad (and nothing
// else), report nothing on fixtures/clean (whose app/ imports lib/ by package name, as entry-demo
// imports the bindings HAR), and fail when the native module has no declarations.
// Run: node --test scripts/arkts-check/selftest.test.mjs

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { tempDir } from './tmp.mjs';

const HERE = path.dirname(fileURLToPath(import.meta.url));
const FIXTURES = path.join(HERE, 'fixtures');
const STUB = path.join(FIXTURES, 'stub', 'libarkagent', 'index.d.ts');

function check(fixture, nativeDts) {
  const result = spawnSync(
    process.execPath,
    [path.join(HERE, 'check.mjs'), '--json', '--native', `libarkagent.so=${nativeDts}`, path.join(FIXTURES, fixture)],
    { cwd: FIXTURES, encoding: 'utf8' },
  );
  assert.ok(result.stdout.length > 0, `no output; stderr: ${result.stderr}`);
  return { status: result.status, report: JSON.parse(result.stdout) };
}

// "file:line code" of every diagnostic, sorted.
function found(report) {
  return report.diagnostics.map((d) => `${d.file}:${d.line} ${d.code}`).sort();
}

test('the clean fixture gives zero diagnostics and exit 0', () => {
  const { status, report } = check('clean', STUB);
  assert.deepEqual(found(report), []);
  assert.equal(report.files, 4); // src/Logic.ets, src/Page.ets, lib/Index.ets, app/Use.ets
  assert.equal(status, 0);
});

test('the bad fixture reports each known violation, and only those, with exit 1', () => {
  const { status, report } = check('bad', STUB);
  const bad = path.join('bad', 'src', 'Bad.ets');
  const page = path.join('bad', 'src', 'Page.ets');
  const use = path.join('bad', 'app', 'Use.ets'); // imports a package by name: it must resolve to check
  assert.deepEqual(found(report), [
    `${use}:4 TS2322`,
    `${bad}:14 arkts-no-untyped-obj-literals`,
    `${bad}:19 TS2555`,
    `${bad}:23 arkts-no-var`,
    `${bad}:6 TS2345`,
    `${bad}:9 arkts-no-any-unknown`,
    `${page}:23 TS2345`, // an @Extend function called with a string: the ets `extend` block works
    `${page}:40 TS2345`, // a wrong attribute type on a built-in component
  ].sort());
  assert.equal(report.errors, 8);
  for (const d of report.diagnostics) assert.equal(d.category, 'error');
  assert.equal(status, 1);
});

test('a native import without declarations is an error', () => {
  const { status, report } = check('clean', path.join(FIXTURES, 'does-not-exist', 'index.d.ts'));
  assert.deepEqual(found(report), [`${path.join('clean', 'src', 'Logic.ets')}:1 TS28014`]);
  assert.equal(status, 1);
});

test('a path without .ets files is a usage error (exit 2), never a silent pass', () => {
  const result = spawnSync(process.execPath, [path.join(HERE, 'check.mjs'), path.join(FIXTURES, 'stub')], {
    encoding: 'utf8',
  });
  assert.equal(result.status, 2);
  assert.match(result.stderr, /no \.ets files/);
});

test('app code written against the real arkts-bindings passes (the API is usable from strict ArkTS)', () => {
  const { status, report } = check('usage', STUB);
  assert.deepEqual(found(report), []);
  assert.equal(report.files, 2, 'Tools.ets and Seed.ets (the seed\'s own snippets)');
  assert.equal(status, 0);
});

test('the default check needs both arkts-bindings/ and entry-demo/: a missing tree is a usage error (exit 2)', () => {
  const root = tempDir('arkts-check-root-');
  fs.mkdirSync(path.join(root, 'arkts-bindings'));
  fs.copyFileSync(path.join(FIXTURES, 'clean', 'src', 'Logic.ets'), path.join(root, 'arkts-bindings', 'Logic.ets'));
  const result = spawnSync(process.execPath, [path.join(HERE, 'check.mjs'), '--root', root, '--native',
    `libarkagent.so=${STUB}`], { encoding: 'utf8' });
  assert.equal(result.status, 2, result.stdout);
  assert.match(result.stderr, /missing .*entry-demo/);
});

test('the default check of the repository covers every .ets file of arkts-bindings/ and entry-demo/', () => {
  const root = path.resolve(HERE, '..', '..');
  const count = (dir) => fs.readdirSync(dir, { recursive: true })
    .filter((f) => f.endsWith('.ets') && !/(^|\/)(node_modules|oh_modules|build)\//.test(f)).length;
  const expected = count(path.join(root, 'arkts-bindings')) + count(path.join(root, 'entry-demo'));
  assert.ok(count(path.join(root, 'entry-demo')) >= 10, 'entry-demo has its pages, ability, tools and demo logic');
  const result = spawnSync(process.execPath, [path.join(HERE, 'check.mjs'), '--json'], { cwd: root, encoding: 'utf8' });
  const report = JSON.parse(result.stdout);
  assert.equal(report.files, expected);
  assert.deepEqual(report.missing, []);
});
