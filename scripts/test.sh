#!/usr/bin/env bash
# Runs every test of the project: the Rust core (and the provider again with http2,gzip), the offline
# demo, the node tests of the real .so, the ArkTS checks and tests, the HarmonyOS cross-compile checks.
set -euo pipefail
cd "$(dirname "$0")/.."

echo "== cargo test (core)"
cargo test --all-targets --locked
echo "== cargo test --doc (README.md's Rust example compiles as written: ReadmeDoctests in src/lib.rs)"
cargo test --doc --locked

echo "== cargo doc (the API docs build, every intra-doc link resolves)"
RUSTDOCFLAGS="-D warnings" cargo doc --no-deps --locked

echo "== cargo test --features http2,gzip (the HTTP/2 and gzip client, off by default) of the provider"
cargo test --features http2,gzip --locked --test provider_tls --test provider_faults --test provider_requests

echo "== the demo (README's first command), offline: every step of its scenario shows"
cargo build --example assistant --locked
demo_dir="$(mktemp -d)"
target_dir="${CARGO_TARGET_DIR:-target}"
demo_out="$("$target_dir/debug/examples/assistant" --approve --state-dir "$demo_dir" </dev/null)"
rm -rf "$demo_dir"
for expected in "query_order → {" "tool_not_found" "tool_argument_type_mismatch" "需要确认" "已清空" "run finished: Completed"; do
  grep -qF -- "$expected" <<<"$demo_out" || { echo "demo output lacks: $expected" >&2; echo "$demo_out" >&2; exit 1; }
done
# --list: a session left pending waits for approval; while another process holds its lease (flock
# on the FileStore's lock file, as a running assistant does), it is busy, not "--resume to decide".
demo_dir="$(mktemp -d)"
"$target_dir/debug/examples/assistant" --later --state-dir "$demo_dir" </dev/null >/dev/null
list_free="$("$target_dir/debug/examples/assistant" --list --state-dir "$demo_dir")"
list_held="$(flock -x "$demo_dir/..locks/demo" "$target_dir/debug/examples/assistant" --list --state-dir "$demo_dir")"
rm -rf "$demo_dir"
grep -qF "awaiting approval: --resume to decide" <<<"$list_free" || { echo "demo --list: $list_free" >&2; exit 1; }
grep -qF "busy: in use by another process" <<<"$list_held" || { echo "demo --list (held): $list_held" >&2; exit 1; }
# The demo as a newcomer runs it (exit status, sessions per mode, ARKAGENT_* variables, streaming
# off, plain http to a LAN host, a percent-encoded key echo, `| head`, --help), against local mocks.
ASSISTANT="$target_dir/debug/examples/assistant" node --test tests/demo/
echo "demo: ok"

echo "== cargo check --features napi,napi-ohos/arkvm-test (HarmonyOS-only branches of napi-ohos)"
cargo check --features napi,napi-ohos/arkvm-test --locked
echo "== cargo check --features napi-bench (the round-trip benchmark's export)"
cargo check --features napi-bench --lib --locked

echo "== node tests of the real .so (cdylib with the napi feature and the host link shims)"
command -v node >/dev/null || { echo "node (>= 20) is required for the binding tests" >&2; exit 1; }
target_dir="${CARGO_TARGET_DIR:-target}"
case "$target_dir" in /*) ;; *) target_dir="$(pwd)/$target_dir" ;; esac
# First the module with the test-only napi-panic-test feature (tests/node/panic.test.mjs makes its
# exports panic), copied aside: the next build puts the shipped module back at debug/libarkagent.so.
cargo build --features napi-panic-test --lib --locked
mkdir -p "$target_dir/panic-test"
cp "$target_dir/debug/libarkagent.so" "$target_dir/panic-test/libarkagent.so"
cargo build --features napi --lib --locked
ARKAGENT_SO="$target_dir/debug/libarkagent.so" ARKAGENT_PANIC_SO="$target_dir/panic-test/libarkagent.so" \
  node --test tests/node/

echo "== docs references (paths, test names, error codes, cargo targets and features, flags, env vars)"
node scripts/check-docs.mjs

echo "== ArkTS check (arkts-bindings/, entry-demo/)"
if [ ! -d scripts/arkts-check/node_modules ]; then
  npm ci --prefix scripts/arkts-check --no-audit --no-fund
fi
node scripts/arkts-check/check.mjs

echo "== ArkTS check self-test and bindings tests"
node --test scripts/arkts-check/selftest.test.mjs scripts/arkts-check/bindings.test.mjs scripts/arkts-check/agent.test.mjs \
  scripts/arkts-check/demo.test.mjs scripts/arkts-check/policy.test.mjs scripts/arkts-check/readme.test.mjs \
  scripts/check-docs.test.mjs
echo "== ArkTS adapters and demo tools against the real .so"
ARKAGENT_SO="$target_dir/debug/libarkagent.so" node --test scripts/arkts-check/native.test.mjs \
  scripts/arkts-check/policy_native.test.mjs scripts/arkts-check/journey.test.mjs

echo "== HarmonyOS cross-compile files (shellcheck, cmake toolchain, target/linker consistency)"
bash scripts/check-ohos.sh
