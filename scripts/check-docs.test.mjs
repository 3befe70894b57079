// The docs reference checker (scripts/check-docs.mjs) on small repository trees: a clean one,
// whose prose holds what must not be taken for a reference (snake_case words that are not our
// codes beside trigger words, placeholders, build outputs, git-ignored directories, BENCHMARKS.md
// history, criterion's own --bench), is reported clean; the same tree with one stale reference per
// rule reports each of them at its line, and exits 1.
// Run: node --test scripts/check-docs.test.mjs

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { tempDir } from './arkts-check/tmp.mjs';

const CHECKER = path.join(path.dirname(fileURLToPath(import.meta.url)), 'check-docs.mjs');

const CODE = {
  'src/error.rs': `error_codes! {
    /// A session is busy.
    SESSION_BUSY = "session_busy" => Persistence;
    TOOL_NOT_FOUND = "tool_not_found" => Tool;
    TOOL_ARGUMENT_TYPE_MISMATCH = "tool_argument_type_mismatch" => Tool;
    CONFIG_INVALID = "config_invalid" => Config;
}
`,
  'Cargo.toml': `[package]
name = "fixture"

[features]
default = []
napi = ["dep:napi-ohos"]
http2 = ["reqwest/http2"]

[dependencies]
napi-ohos = { version = "1", optional = true }

[[bench]]
name = "speed"
harness = false
`,
  'benches/speed.rs': 'fn main() {}\n',
  'examples/demo.rs': `fn main() {
    match arg.as_str() { "--resume" => {}, "--state-dir" => {}, _ => {} }
    let key = std::env::var("ARKAGENT_API_KEY");
}
`,
  'tests/runtime.rs': '#[test]\nfn a_run_completes() {}\n#[test]\nfn a_denial_runs_nothing() {}\n',
  'tests/node/agent.test.mjs': "test('lists the sessions of a store', () => {});\nconst so = process.env.ARKAGENT_SO;\n",
  'scripts/run.sh': '#!/bin/sh\n# --quick: fewer rounds\n[ -n "${ARKAGENT_LONG:-}" ] && echo long\n',
  '.gitignore': '/target\n/fuzz/logs\n',
  'fuzz/checks/jcs.rs': '',
  'entry-demo/entry/libs/arm64-v8a/.gitkeep': '',
};

const CLEAN_README = `# fixture

\`\`\`sh
cargo run --example demo -- --resume --state-dir /tmp/x   # the demo
ARKAGENT_LONG=1 bash scripts/run.sh --quick
\`\`\`

A session in use is refused with \`session_busy\`; an unknown tool is answered
\`tool_not_found\`. A failed \`base_resp\` is a provider's field, the model answers \`tool_calls\`,
and OpenAI's error code is \`server_error\` elsewhere: none of these is a citation.
\`cargo build --features napi,http2\` and \`cargo build --features napi-ohos/arkvm-test\`.
Writes \`entry-demo/entry/libs/arm64-v8a/libarkagent.so\`; logs in \`fuzz/logs/\`; one check per
\`fuzz/checks/<target>.rs\`, every one in \`fuzz/checks/*.rs\`; \`.arkagent-demo/\` is the demo's.
ARKAGENT_API_KEY is the key.

\`\`\`text
tests/                    the tests (tests/node: node)
\`\`\`
`;

const CLEAN_GUIDE = `# Guide

Each call runs once (\`tests/runtime.rs\`, \`a_run_completes\` and \`a_denial_runs_nothing\`;
\`tests/node/agent.test.mjs\` \`lists the sessions of a store ...\`). In the table form:
\`runtime.rs\` \`a_run_completes\`; \`node/agent\`. Short forms: \`node/<name>\` is
\`tests/node/<name>.test.mjs\`. Codes: \`error [tool_not_found\\|tool_argument_type_mismatch]: ...\`.
\`tests/runtime.rs\` names \`SESSION_BUSY\` elsewhere, and \`tests/runtime.rs\` then prose \`not_a_fn\`.
`;

const CLEAN_BENCH = `# Benchmarks

Command: \`cargo bench --bench speed\` (benches/speed.rs); then \`<bench binary> --bench zzz_none\`.
Not kept: a decoder (\`src/state/decode.rs\`, on another branch).
`;

const CLEAN_DTS = `/**
 * Errors carry \`code\`, a stable code: snake_case, e.g. session_busy (tests/node/agent.test.mjs).
 */
export declare class Agent {
  /** Throws config_invalid (a message names the field), or tool_not_found. Events: run_finished. */
  run(): void;
}
`;

const DTS = 'arkts-bindings/src/main/cpp/types/libarkagent/index.d.ts';

/** Writes a fixture tree: the code above and the given docs; returns its root. */
function tree(docs) {
  const root = tempDir('arkagent-check-docs-');
  for (const [file, text] of Object.entries({ ...CODE, ...docs })) {
    fs.mkdirSync(path.dirname(path.join(root, file)), { recursive: true });
    fs.writeFileSync(path.join(root, file), text);
  }
  return root;
}

function check(root) {
  const r = spawnSync(process.execPath, [CHECKER, '--root', root], { encoding: 'utf8' });
  return { status: r.status, lines: r.stdout.trim().split('\n').filter(Boolean), stderr: r.stderr };
}

const CLEAN = { 'README.md': CLEAN_README, 'docs/guide.md': CLEAN_GUIDE, 'BENCHMARKS.md': CLEAN_BENCH, [DTS]: CLEAN_DTS };

test('a tree whose docs name only what exists is clean', () => {
  const { status, lines, stderr } = check(tree(CLEAN));
  assert.deepEqual(lines, ['check-docs: ok'], stderr);
  assert.equal(status, 0);
});

test('every kind of stale reference is reported at its line', () => {
  const stale = (text, pairs) => pairs.reduce((t, [from, to]) => {
    assert.ok(t.includes(from), `fixture lacks ${from}`);
    return t.replace(from, to);
  }, text);
  const root = tree({
    'README.md': stale(CLEAN_README, [
      ['--example demo -- --resume', '--example demos -- --resume'],
      ['bash scripts/run.sh --quick', 'bash scripts/run.sh --fast'],
      ['refused with `session_busy`', 'refused with `session_locked`'],
      ['`cargo build --features napi,http2`', '`cargo build --features napi,http3`'],
      ['`fuzz/checks/<target>.rs`', '`fuzz/check/<target>.rs`'],
      ['ARKAGENT_API_KEY is the key', 'ARKAGENT_KEY is the key'],
      ['tests/                    the tests (tests/node: node)', 'tests/                    the tests (tests/nodes: node)'],
    ]),
    'docs/guide.md': stale(CLEAN_GUIDE, [
      ['and `a_denial_runs_nothing`', 'and `a_denial_runs_none`'],
      ['`lists the sessions of a store ...`', '`lists every session ...`'],
      ['`node/agent`', '`node/agents`'],
      ['\\|tool_argument_type_mismatch]', '\\|tool_argument_mismatch]'],
    ]),
    'BENCHMARKS.md': stale(CLEAN_BENCH, [['--bench speed`', '--bench sped`']]),
    [DTS]: stale(CLEAN_DTS, [['or tool_not_found', 'or tool_unknown']]),
  });
  const { status, lines } = check(root);
  assert.deepEqual(lines, [
    'README.md:4: no example demos (examples/, Cargo.toml)',
    'README.md:5: scripts/run.sh has no flag --fast',
    'README.md:8: error code session_locked is not in the codes table of src/error.rs',
    'README.md:11: no cargo feature http3 (Cargo.toml)',
    'README.md:13: path does not exist: fuzz/check/<target>.rs',
    'README.md:14: environment variable ARKAGENT_KEY is read nowhere in the code, scripts or tests',
    'README.md:17: path does not exist: tests/nodes',
    'BENCHMARKS.md:3: no bench target sped (benches/, Cargo.toml)',
    'docs/guide.md:3: tests/runtime.rs has no fn a_denial_runs_none',
    'docs/guide.md:4: tests/node/agent.test.mjs has no test "lists every session"',
    'docs/guide.md:5: path does not exist: tests/node/agents.test.mjs',
    'docs/guide.md:6: error code tool_argument_mismatch is not in the codes table of src/error.rs',
    `${DTS}:5: error code tool_unknown is not in the codes table of src/error.rs`,
  ]);
  assert.equal(status, 1);
});

test('the repository itself is clean, within two seconds', () => {
  const started = Date.now();
  const { status, lines } = check(path.resolve(path.dirname(CHECKER), '..'));
  assert.deepEqual(lines, ['check-docs: ok']);
  assert.equal(status, 0);
  assert.ok(Date.now() - started < 2000, `took ${Date.now() - started} ms`);
});
