#!/usr/bin/env bash
# Runs every test of the project: the Rust core, the node tests of the real .so, the ArkTS checks.
set -euo pipefail
cd "$(dirname "$0")/.."

echo "== cargo test (core)"
cargo test --all-targets --locked

echo "== ArkTS check (arkts-bindings/, entry-demo/)"
if [ ! -d scripts/arkts-check/node_modules ]; then
  npm ci --prefix scripts/arkts-check --no-audit --no-fund
fi
node scripts/arkts-check/check.mjs

echo "== ArkTS check self-test and bindings tests"
node --test scripts/arkts-check/selftest.test.mjs scripts/arkts-check/bindings.test.mjs

echo "== HarmonyOS cross-compile files (shellcheck, cmake toolchain, target/linker consistency)"
bash scripts/check-ohos.sh
