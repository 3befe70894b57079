#!/usr/bin/env bash
# CPU-time view of benches/validate.rs on a noisy machine: runs each variant a fixed number of times
# in its own process and reads the process's task-clock with `perf stat` (time on the CPU, not wall
# time), minus the setup cost. Prints ns per call, three repeats. Needs `perf`.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo bench --bench validate --no-run >/dev/null 2>&1
BIN=""
for f in target/release/deps/validate-*; do
  case "$f" in *.d) continue ;; esac
  if [ -z "$BIN" ] || [ "$f" -nt "$BIN" ]; then BIN=$f; fi
done
clock() { VALIDATE_BENCH_ROUNDS=$1 VALIDATE_BENCH_PROFILE=$2 perf stat -x, -e task-clock "$BIN" --bench 2>&1 | tail -1 | cut -d, -f1; }
BASE=$(clock 0 a:small)
for _ in 1 2 3; do
  for v in a:small p:small b:small c:small a:large p:large b:large c:large; do
    R=3000; case $v in *large) R=8 ;; esac
    T=$(clock "$R" "$v")
    printf '%s %s | ' "$v" "$(python3 -c "print(round(($T-$BASE)*1e6/($R*100)))")"
  done
  echo
done
