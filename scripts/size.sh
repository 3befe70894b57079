#!/usr/bin/env bash
# Measures the stripped release NAPI module (BENCHMARKS.md, "Size of the stripped release `.so`"):
# builds libarkagent.so for the host with the release profile, the `napi` feature and the link
# flags the OHOS targets get from .cargo/config.toml (their `rustflags`), then prints its size, its
# largest sections and whether its relative relocations are packed (DT_RELR).
#
#   scripts/size.sh            with the OHOS targets' link flags and build-ohos.sh's short registry paths
#   scripts/size.sh --plain    without them (what `cargo build --release --features napi --lib` gives)
#
# The host links with rust-lld, the OHOS targets with the NDK's lld: the same linker family, so the
# flags are accepted alike and their effect on size is comparable (the code differs: x86_64 here,
# arm64 on devices).
set -euo pipefail
cd "$(dirname "$0")/.."

plain=false
case ${1:-} in
  --plain) plain=true ;;
  "") ;;
  *)
    echo "usage: scripts/size.sh [--plain]" >&2
    exit 2
    ;;
esac

# The rustflags of the device target: the quoted items of its `rustflags = [...]` line.
section=$(awk '$0 == "[target.aarch64-unknown-linux-ohos]" {on = 1; next} /^\[/ {on = 0} on' .cargo/config.toml)
flags=()
if ! $plain; then
  line=$(grep '^rustflags = \[' <<<"$section") || {
    echo "size.sh: no rustflags for aarch64-unknown-linux-ohos in .cargo/config.toml" >&2
    exit 1
  }
  mapfile -t flags < <(grep -o '"[^"]*"' <<<"$line" | tr -d '"')
fi

# What build-ohos.sh adds for every crate: the registry crates' source paths shortened
# (scripts/registry-remap.sh), through the host target's rustflags (cargo rebuilds the dependencies
# when these differ from the last build's).
if ! $plain; then
  host=$(rustc -vV | sed -n 's/^host: //p')
  var=CARGO_TARGET_$(echo "${host//-/_}" | tr '[:lower:]' '[:upper:]')_RUSTFLAGS
  remap=$(scripts/registry-remap.sh)
  if [ -n "$remap" ]; then
    export "$var=${!var:+${!var} }$remap"
    echo "== $var=${!var}"
  fi
fi
echo "== cargo rustc --release --features napi --lib -- ${flags[*]}"
cargo rustc --release --features napi --lib --locked -- "${flags[@]}"
so=${CARGO_TARGET_DIR:-target}/release/libarkagent.so
bytes=$(wc -c <"$so")
echo "$so: $bytes bytes ($(awk -v b="$bytes" 'BEGIN {printf "%.2f", b / 1048576}') MiB)"
size -A "$so" | awk 'NR > 2 && $2 >= 16384 {printf "  %-20s %9d\n", $1, $2}'
if readelf -d "$so" | grep -q '(RELR)'; then
  echo "  relative relocations: packed (DT_RELR)"
else
  echo "  relative relocations: .rela.dyn ($(readelf -d "$so" | sed -n 's/.*(RELACOUNT) *//p') of them)"
fi
