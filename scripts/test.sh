#!/usr/bin/env bash
# Runs every test of the project: the Rust core, the node tests of the real .so, the ArkTS checks.
set -euo pipefail
cd "$(dirname "$0")/.."

echo "== cargo test (core)"
cargo test --all-targets --locked
