#!/usr/bin/env bash
# Runs every cargo-fuzz target one after another, each for a given number of seconds (default 60).
#
#   scripts/fuzz.sh [SECONDS] [TARGET...]
#
# Needs the nightly toolchain and cargo-fuzz (`cargo install cargo-fuzz`). The corpora live in
# fuzz/corpus/<target> (git-ignored), seeded from tests/fixtures by fuzz/seeds/make_seeds.py;
# crashes land in fuzz/artifacts/<target>. Copy a crash into tests/fixtures/fuzz-regressions/<target>/
# once it is fixed: `cargo test --test fuzz_regressions` replays them.
# One fuzzing process at a time (as -jobs=1): the machine is shared. The last line of each target's log (exec
# count) is summed over the segments between crashes; the full logs are in fuzz/logs/.
set -euo pipefail
cd "$(dirname "$0")/.."

secs="${1:-60}"
shift || true
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  targets=(schema_compile args_validate sse_assembly state_load jcs)
fi

python3 fuzz/seeds/make_seeds.py . fuzz/corpus >/dev/null
mkdir -p fuzz/logs
for t in "${targets[@]}"; do
  mkdir -p "fuzz/corpus/$t" "fuzz/artifacts/$t"
  # Earlier finds are seeds too.
  if [ -d "tests/fixtures/fuzz-regressions/$t" ]; then
    cp -n tests/fixtures/fuzz-regressions/"$t"/* "fuzz/corpus/$t/" 2>/dev/null || true
  fi
  log="fuzz/logs/$t.log"
  : >"$log"
  echo "== $t for ${secs}s (log: $log)"
  start=$(date +%s)
  execs=0
  crashes=0
  # A crash stops libFuzzer: keep the artifact and go on with the time left, so a target gets its
  # whole budget and every distinct crash is kept.
  while :; do
    left=$((secs - ($(date +%s) - start)))
    [ "$left" -gt 0 ] || break
    status=0
    cargo +nightly fuzz run -O "$t" "fuzz/corpus/$t" -- \
      -max_total_time="$left" -max_len=65536 -rss_limit_mb=2048 -timeout=20 \
      -artifact_prefix="fuzz/artifacts/$t/" >>"$log" 2>&1 || status=$?
    n=$(grep -E '^(#[0-9]+|Done [0-9]+)' "$log" | tail -n 1 | grep -oE '[0-9]+' | head -n 1 || true)
    execs=$((execs + ${n:-0}))
    echo "--- segment end, exit $status" >>"$log"
    [ $status -ne 0 ] || break
    crashes=$((crashes + 1))
    grep -E 'panicked at|SUMMARY|Test unit written' "$log" | tail -n 3 | sed 's/^/   /'
    [ $crashes -lt 20 ] || break
  done
  echo "   $t: ran $(($(date +%s) - start))s, ~$execs execs, $crashes crash(es)"
done
