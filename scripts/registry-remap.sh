#!/usr/bin/env bash
# Prints the rustc flags that shorten the source paths of crates.io dependencies in the built
# module: `--remap-path-prefix=<CARGO_HOME>/registry/src/<index>/=` for each registry source
# directory, space-separated (the form of a `CARGO_TARGET_<TRIPLE>_RUSTFLAGS` value, which cargo
# joins with the target's `rustflags` of .cargo/config.toml). Panic locations then name
# `tokio-1.54.1/src/...` instead of `/home/<user>/.cargo/registry/src/index.crates.io-<hash>/tokio-...`:
# 16 KB less .rodata in the release .so, and no path of the build machine in it (BENCHMARKS.md,
# "Size of the stripped release `.so`", variant 39). Prints nothing when a path holds whitespace
# (the value is split at whitespace) or there is no registry yet.
# Used by scripts/build-ohos.sh and scripts/size.sh; .cargo/config.toml cannot hold it (its values
# are fixed text, the registry path is the machine's).
#
# CARGO_HOME as cargo reads it: unset is ~/.cargo (`~` is the user's home directory also when HOME
# is unset, as for cargo), and a relative one is taken from the working directory, where the
# callers run cargo (cargo makes it absolute so, and rustc sees that absolute path).
set -euo pipefail
home=${CARGO_HOME:-~/.cargo}
case $home in /*) ;; *) home=$(pwd -P)/$home ;; esac
flags=()
for dir in "$home"/registry/src/*/; do
  [ -d "$dir" ] || continue
  case $dir in *[[:space:]]*) exit 0 ;; esac
  flags+=("--remap-path-prefix=$dir=")
done
echo "${flags[*]-}"
