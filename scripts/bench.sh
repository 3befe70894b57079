#!/usr/bin/env bash
# Runs every criterion bench and the end-to-end comparison with peer agent SDKs, and writes
# BENCHMARKS.md's top summary and its "End to end" section (every other section is left as it is).
# Not part of CI: it takes long (a full run, about 20-40 minutes on 2 cores) and installs the peers.
#
#   scripts/bench.sh [--quick] [--reps N] [--no-criterion] [--no-e2e] [--peers-dir DIR]
#                    [--clients a,b,...]
#
#   --quick         criterion with --warm-up-time 1 --measurement-time 3, one end-to-end run per
#                   client and R (instead of 3)
#   --reps N        end-to-end runs per client and R (the median is reported)
#   --no-criterion  skip the criterion benches (the summary then keeps its previous table)
#   --no-e2e        skip the end-to-end comparison
#   --peers-dir DIR install the peers there and keep them (default: a temporary directory removed
#                   at the end); an existing install in DIR is reused
#   --clients LIST  end-to-end clients, default all: arkagent-rust, arkagent-rust-file,
#                   arkagent-node, openai-agents, vercel-ai-sdk (also: arkagent-rust-events, the
#                   diagnostic store of examples/bench_client.rs)
#
# The end to end: examples/mock_openai.rs serves a deterministic streamed conversation on
# 127.0.0.1; examples/bench_client.rs (Rust API), benches/e2e/napi_client.mjs (libarkagent.so from
# Node), benches/e2e/agents_sdk_client.py (openai-agents from PyPI, in a venv) and
# benches/e2e/vercel_client.mjs (ai + @ai-sdk/openai-compatible + zod from npm) play it;
# scripts/bench_e2e.py measures them, scripts/bench_report.py writes BENCHMARKS.md.
# ARKAGENT_SO=path: the .so the Node client loads (default: target/release/libarkagent.so, built
# here with the napi feature); a module without the `Agent` class is reported as not measured.
# Needs: cargo, python3 (with venv), node + npm, /usr/bin/time (GNU time), curl, lscpu.
set -euo pipefail

repo="$(cd "$(dirname "$0")/.." && pwd)"
cd "$repo"

quick=0
reps=3
criterion=1
e2e=1
peers_dir=""
clients="arkagent-rust,arkagent-rust-file,arkagent-node,openai-agents,vercel-ai-sdk"
command="scripts/bench.sh${*:+ $*}"
if [ -n "${ARKAGENT_SO:-}" ]; then
  command="ARKAGENT_SO=$ARKAGENT_SO $command"
fi
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) quick=1; reps=1 ;;
    --reps) reps="$2"; shift ;;
    --no-criterion) criterion=0 ;;
    --no-e2e) e2e=0 ;;
    --peers-dir) peers_dir="$2"; shift ;;
    --clients) clients="$2"; shift ;;
    -h|--help) sed -n '2,27p' "$0"; exit 0 ;;
    *) echo "bench.sh: unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done

for tool in cargo python3 /usr/bin/time curl lscpu; do
  command -v "$tool" >/dev/null || { echo "bench.sh: $tool is required" >&2; exit 2; }
done

date_utc="$(date -u '+%Y-%m-%d %H:%M UTC')"
cpu_model="$(lscpu | sed -n 's/^Model name:[[:space:]]*//p' | head -1)"
cpus="$(nproc)"
mem_gib="$(awk '/MemTotal/ {printf "%.0f", $2 / 1048576}' /proc/meminfo)"
machine="${cpu_model:-unknown CPU}, ${cpus} cores (shared with other jobs), ${mem_gib} GiB RAM, Linux $(uname -r); $(rustc --version)"
command -v node >/dev/null && machine="$machine; node $(node --version)"
machine="$machine; $(python3 --version)"

report_dir="$repo/target/bench-report"
rm -rf "$report_dir/criterion"
mkdir -p "$report_dir/criterion"

criterion_opts=()
if [ "$quick" = 1 ]; then
  criterion_opts=(--warm-up-time 1 --measurement-time 3)
fi

if [ "$criterion" = 1 ]; then
  # One cargo bench per bench target: criterion options must not reach the lib's test harness.
  for file in benches/*.rs; do
    bench="$(basename "$file" .rs)"
    echo "== cargo bench --bench $bench -- ${criterion_opts[*]}"
    set +e
    cargo bench --bench "$bench" -- "${criterion_opts[@]}" 2>&1 | tee "$report_dir/criterion/$bench.log"
    echo "${PIPESTATUS[0]}" > "$report_dir/criterion/$bench.status"
    set -e
  done
fi

e2e_md=""
if [ "$e2e" = 1 ]; then
  for tool in node npm; do
    command -v "$tool" >/dev/null || { echo "bench.sh: $tool is required for the end to end" >&2; exit 2; }
  done
  echo "== building the mock server, the Rust client and libarkagent.so (release)"
  cargo build --release --example mock_openai --example bench_client
  if [ -n "${ARKAGENT_SO:-}" ]; then
    echo "== arkagent-node loads ARKAGENT_SO=$ARKAGENT_SO"
  elif ! cargo build --release --features napi --lib; then
    echo "bench.sh: the napi build failed: arkagent-node will be reported as not measured" >&2
  fi

  cleanup_peers=0
  if [ -z "$peers_dir" ]; then
    peers_dir="$(mktemp -d /tmp/arkagent-bench-peers.XXXXXX)"
    cleanup_peers=1
  fi
  mkdir -p "$peers_dir"
  peers_dir="$(cd "$peers_dir" && pwd)"
  if [ "$cleanup_peers" = 1 ]; then
    trap 'rm -rf "$peers_dir"' EXIT
  fi
  if [[ ",$clients," == *",openai-agents,"* ]] && { [ ! -x "$peers_dir/venv/bin/python" ] || [ ! -f "$peers_dir/venv/.installed" ]; }; then
    echo "== installing openai-agents into $peers_dir/venv"
    python3 -m venv "$peers_dir/venv"
    "$peers_dir/venv/bin/pip" install --quiet --disable-pip-version-check openai-agents
    touch "$peers_dir/venv/.installed"
  fi
  if [[ ",$clients," == *",vercel-ai-sdk,"* ]] && [ ! -f "$peers_dir/node/.installed" ]; then
    echo "== installing ai, @ai-sdk/openai-compatible and zod into $peers_dir/node"
    mkdir -p "$peers_dir/node"
    (cd "$peers_dir/node" && npm init -y >/dev/null && npm install --silent --no-audit --no-fund ai @ai-sdk/openai-compatible zod)
    touch "$peers_dir/node/.installed"
  fi
  versions=()
  if [ -x "$peers_dir/venv/bin/python" ]; then
    versions+=("openai-agents $("$peers_dir/venv/bin/python" -c 'import importlib.metadata as m; print(m.version("openai-agents"))' 2>/dev/null || echo '?')")
  fi
  for pkg in ai @ai-sdk/openai-compatible zod; do
    if [ -f "$peers_dir/node/node_modules/$pkg/package.json" ]; then
      versions+=("$pkg $(node -p "require('$peers_dir/node/node_modules/$pkg/package.json').version")")
    fi
  done
  versions_text="$(IFS=,; echo "${versions[*]:-}")"
  versions_text="${versions_text//,/, }"

  echo "== end to end ($reps run(s) per client and R)"
  e2e_md="$report_dir/e2e.md"
  python3 scripts/bench_e2e.py --repo "$repo" --peers-dir "$peers_dir" --reps "$reps" --clients "$clients" \
    --json-out "$report_dir/e2e.json" --md-out "$e2e_md" --command "$command" \
    --machine "$machine, $date_utc" --versions "$versions_text"
fi

summary_args=()
if [ "$criterion" = 0 ]; then
  summary_args=(--keep-summary)
fi
python3 scripts/bench_report.py --benchmarks BENCHMARKS.md --criterion-log "$report_dir/criterion" \
  ${e2e_md:+--e2e-md "$e2e_md"} --command "$command" --date "$date_utc" --machine "$machine" "${summary_args[@]}"
echo "== BENCHMARKS.md updated (summary$([ -n "$e2e_md" ] && echo ' and End to end'))"
