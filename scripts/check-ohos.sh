#!/usr/bin/env bash
# Checks the HarmonyOS cross-compile files as far as this machine can (no OHOS NDK or Rust target
# here): shellcheck on the scripts; cmake reading ohos-toolchain.cmake against a fake NDK tree of empty
# files; the compiler wrappers against a fake clang that records its arguments; and the consistency of
# the Rust targets, ABIs, clang targets and linker keys between .cargo/config.toml,
# scripts/build-ohos.sh and ohos-toolchain.cmake; and that the OHOS-only branch of src/logging.rs
# compiles. Needs shellcheck and cmake (.ci/run installs them).
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)

fail() {
  echo "check-ohos.sh: FAIL: $*" >&2
  exit 1
}
ok() { echo "   ok: $*"; }

# Runs a command that must fail (exit code $1, or any non-zero for "nonzero") saying $2.
expect_failure() {
  local want=$1 pattern=$2 out rc
  shift 2
  set +e
  out=$("$@" 2>&1)
  rc=$?
  set -e
  if [ "$want" = nonzero ]; then
    [ $rc -ne 0 ] || fail "$* succeeded; expected a failure saying: $pattern"
  else
    [ $rc -eq "$want" ] || fail "$* exited $rc, expected $want: $out"
  fi
  [[ $out == *"$pattern"* ]] || fail "$* did not say '$pattern': $out"
}

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

echo "-- shellcheck"
shellcheck scripts/*.sh scripts/ohos/*.sh .ci/run
ok "shellcheck clean"

# A fake NDK: empty tools, except clang/clang++, which print their arguments (for the wrapper check).
fake=$tmp/sdk
mkdir -p "$fake/native/llvm/bin" "$fake/native/sysroot/usr/include" "$fake/native/sysroot/usr/lib"
for t in llvm-ar llvm-ranlib llvm-strip; do
  : >"$fake/native/llvm/bin/$t"
  chmod +x "$fake/native/llvm/bin/$t"
done
for t in clang clang++; do
  printf '#!/bin/sh\necho "%s $*"\n' "$t" >"$fake/native/llvm/bin/$t"
  chmod +x "$fake/native/llvm/bin/$t"
done

echo "-- build-ohos.sh: ABI table and stops"
# "# <abi> (<rust target>)" headers, then KEY=VALUE lines.
OHOS_NDK_HOME=$fake scripts/build-ohos.sh --print-env >"$tmp/env.txt"
script_pairs=$(sed -n 's/^# \([^ ]*\) (\(.*\))$/\1 \2/p' "$tmp/env.txt" | sort)
[ "$script_pairs" = "$(printf 'arm64-v8a aarch64-unknown-linux-ohos\nx86_64 x86_64-unknown-linux-ohos')" ] ||
  fail "build-ohos.sh ABI table is: $script_pairs"
ok "ABIs: $(echo "$script_pairs" | tr '\n' ';')"

expect_failure 2 "OHOS_NDK_HOME is not set" env -u OHOS_NDK_HOME scripts/build-ohos.sh
ok "stops without OHOS_NDK_HOME"
expect_failure 2 "clang is missing" env OHOS_NDK_HOME="$tmp/nothing-here" scripts/build-ohos.sh
ok "stops with a wrong OHOS_NDK_HOME"
installed=$(rustup target list --installed 2>/dev/null || true)
if ! grep -qx aarch64-unknown-linux-ohos <<<"$installed"; then
  expect_failure 2 "rustup target add aarch64-unknown-linux-ohos" \
    env OHOS_NDK_HOME="$fake" scripts/build-ohos.sh --tool cargo --abi arm64-v8a
  ok "stops without the Rust target (names the rustup command)"
else
  echo "   note: aarch64-unknown-linux-ohos is installed here, so the missing-target stop is not exercised"
fi

echo "-- registry-remap.sh: the registry paths cargo gives rustc, whatever CARGO_HOME is"
mkdir -p "$tmp/cargo-home/registry/src/index.example-0123" "$tmp/no-registry"
want="--remap-path-prefix=$tmp/cargo-home/registry/src/index.example-0123/="
[ "$(CARGO_HOME="$tmp/cargo-home" scripts/registry-remap.sh)" = "$want" ] ||
  fail "registry-remap.sh with CARGO_HOME=$tmp/cargo-home printed: $(CARGO_HOME="$tmp/cargo-home" scripts/registry-remap.sh)"
# A relative CARGO_HOME: cargo makes it absolute from its working directory (build-ohos.sh and
# size.sh run it where they run this script); rustc sees that absolute path.
rel=$(cd "$tmp" && CARGO_HOME=cargo-home "$repo/scripts/registry-remap.sh")
[ "$rel" = "--remap-path-prefix=$(cd "$tmp" && pwd -P)/cargo-home/registry/src/index.example-0123/=" ] ||
  fail "registry-remap.sh with a relative CARGO_HOME printed: $rel"
# No registry yet (a fresh machine) and no HOME: nothing to remap, and no failure under set -u.
[ -z "$(CARGO_HOME="$tmp/no-registry" scripts/registry-remap.sh)" ] || fail "registry-remap.sh without a registry printed flags"
env -u CARGO_HOME -u HOME scripts/registry-remap.sh >/dev/null || fail "registry-remap.sh fails without HOME"
# build-ohos.sh joins it with a value already in the environment.
remap_env=$(CARGO_HOME="$tmp/cargo-home" CARGO_TARGET_AARCH64_UNKNOWN_LINUX_OHOS_RUSTFLAGS=-Cdebuginfo=0 \
  OHOS_NDK_HOME=$fake scripts/build-ohos.sh --print-env)
grep -qxF "CARGO_TARGET_AARCH64_UNKNOWN_LINUX_OHOS_RUSTFLAGS=-Cdebuginfo=0 $want" <<<"$remap_env" ||
  fail "build-ohos.sh --print-env does not join the remap with the environment's rustflags: $remap_env"
ok "registry-remap.sh: absolute, relative and missing CARGO_HOME, no registry, joined by build-ohos.sh"

echo "-- consistency: .cargo/config.toml, build-ohos.sh, wrappers, rustc"
config_targets=$(sed -n 's/^\[target\.\([^]]*\)\]$/\1/p' .cargo/config.toml | sort)
[ "$config_targets" = "$(echo "$script_pairs" | awk '{print $2}' | sort)" ] ||
  fail ".cargo/config.toml targets ($config_targets) differ from build-ohos.sh's"
rust_targets=$(rustc --print target-list)
# The size link flags (rustflags of each OHOS target, see .cargo/config.toml): one list for both.
rustflags_of() {
  awk -v t="[target.$1]" '$0 == t {on = 1; next} /^\[/ {on = 0} on' .cargo/config.toml | sed -n 's/^rustflags = //p'
}
device_rustflags=$(rustflags_of aarch64-unknown-linux-ohos)
[ -n "$device_rustflags" ] || fail "config has no rustflags for aarch64-unknown-linux-ohos (the size link flags)"
while read -r abi target; do
  grep -qx "$target" <<<"$rust_targets" || fail "rustc does not know the target $target"
  cfg=$(rustc --print cfg --target "$target")
  grep -qx 'target_env="ohos"' <<<"$cfg" || fail "$target is not target_env=ohos"
  arch=${target%%-*}
  grep -qx "target_arch=\"$arch\"" <<<"$cfg" || fail "$target is not target_arch=$arch"

  under=${target//-/_}
  upper=$(tr '[:lower:]' '[:upper:]' <<<"$under")
  section=$(awk -v t="[target.$target]" '$0 == t {on = 1; next} /^\[/ {on = 0} on' .cargo/config.toml)
  linker=$(sed -n 's/^linker = "\(.*\)"$/\1/p' <<<"$section")
  [ "$linker" = "scripts/ohos/$target-clang.sh" ] || fail "config linker of $target is '$linker'"
  [ -x "$linker" ] || fail "$linker is not an executable file"
  script_linker=$(sed -n "s/^CARGO_TARGET_${upper}_LINKER=//p" "$tmp/env.txt")
  [ "$script_linker" = "$repo/$linker" ] || fail "build-ohos.sh linker of $target is '$script_linker', config has $linker"
  [ "$(rustflags_of "$target")" = "$device_rustflags" ] ||
    fail "config rustflags of $target ($(rustflags_of "$target")) differ from the device's ($device_rustflags)"
  for key in CC CXX; do
    want=scripts/ohos/$target-clang.sh
    [ $key = CXX ] && want=scripts/ohos/$target-clang++.sh
    grep -q "^${key}_${under} = { value = \"$want\", relative = true }$" .cargo/config.toml ||
      fail "config [env] ${key}_${under} is not $want"
    [ "$(sed -n "s/^${key}_${under}=//p" "$tmp/env.txt")" = "$repo/$want" ] || fail "build-ohos.sh ${key}_${under} differs"
  done
  grep -q "^AR_${under} = " .cargo/config.toml || fail "config [env] lacks AR_${under}"
  grep -q "^CMAKE_TOOLCHAIN_FILE_${under} = { value = \"ohos-toolchain.cmake\", relative = true }$" .cargo/config.toml ||
    fail "config [env] lacks CMAKE_TOOLCHAIN_FILE_${under}"

  # The wrappers run the NDK's clang with the clang target build-ohos.sh names for this ABI.
  clang_target=$(awk -v a="# $abi ($target)" '$0 == a {on = 1; next} /^#/ {on = 0} on' "$tmp/env.txt" |
    sed -n 's/^OHOS_CLANG_TARGET=//p')
  [ "$clang_target" = "$arch-linux-ohos" ] || fail "clang target of $abi is '$clang_target'"
  out=$(OHOS_NDK_HOME=$fake "$linker" -c x.c)
  [ "$out" = "clang --sysroot=$fake/native/sysroot -D__MUSL__ --target=$clang_target -c x.c" ] ||
    fail "linker wrapper of $target ran: $out"
  out=$(OHOS_NDK_HOME=$fake/native "scripts/ohos/$target-clang++.sh" -c x.cc)
  [ "$out" = "clang++ --sysroot=$fake/native/sysroot -D__MUSL__ --target=$clang_target -c x.cc" ] ||
    fail "clang++ wrapper of $target ran: $out"
  ok "$abi: $target, linker/CC/CXX/AR/CMAKE keys agree, wrappers run clang --target=$clang_target"

  echo "-- cmake reads ohos-toolchain.cmake ($abi)"
  # Once with OHOS_ARCH, once inferred from the TARGET cargo gives build scripts; the NDK given as the
  # SDK directory and as native/ itself.
  cmake -S tests/ohos-toolchain -B "$tmp/cmake-$abi-1" -DCMAKE_TOOLCHAIN_FILE="$repo/ohos-toolchain.cmake" \
    -DOHOS_NDK_HOME="$fake" -DOHOS_ARCH="$abi" -DEXPECT_ARCH="$abi" -DEXPECT_TRIPLE="$clang_target" \
    -DEXPECT_NATIVE="$fake/native" >"$tmp/cmake.log" 2>&1 || { cat "$tmp/cmake.log"; fail "cmake ($abi, OHOS_ARCH)"; }
  OHOS_NDK_HOME=$fake/native TARGET=$target cmake -S tests/ohos-toolchain -B "$tmp/cmake-$abi-2" \
    -DCMAKE_TOOLCHAIN_FILE="$repo/ohos-toolchain.cmake" -DEXPECT_ARCH="$abi" -DEXPECT_TRIPLE="$clang_target" \
    -DEXPECT_NATIVE="$fake/native" >"$tmp/cmake.log" 2>&1 || { cat "$tmp/cmake.log"; fail "cmake ($abi, TARGET)"; }
  ok "toolchain settings for $abi match the NDK layout"
done <<<"$script_pairs"

echo "-- lld accepts the size link flags (the host's rust-lld, the LLVM linker the NDK's clang runs)"
mapfile -t size_flags < <(grep -o '"[^"]*"' <<<"$device_rustflags" | tr -d '"')
echo '#[no_mangle] pub static TABLE: [&u8; 3] = [&1, &2, &3];' >"$tmp/relr.rs"
rustc --edition 2021 --crate-type cdylib -C opt-level=1 "${size_flags[@]}" "$tmp/relr.rs" -o "$tmp/librelr.so" ||
  fail "rustc/lld refused the rustflags ${size_flags[*]}"
readelf -d "$tmp/librelr.so" | grep -q '(RELR)' || fail "the rustflags ${size_flags[*]} gave no DT_RELR"
ok "a cdylib links with ${size_flags[*]} and has DT_RELR"

echo "-- cmake stops on a missing NDK or an unknown ABI"
expect_failure nonzero "OHOS_NDK_HOME is not set" env -u OHOS_NDK_HOME cmake -S tests/ohos-toolchain \
  -B "$tmp/cmake-bad-1" -DCMAKE_TOOLCHAIN_FILE="$repo/ohos-toolchain.cmake" -DEXPECT_ARCH=arm64-v8a
expect_failure nonzero "OHOS_ARCH must be arm64-v8a or x86_64" cmake -S tests/ohos-toolchain -B "$tmp/cmake-bad-2" \
  -DCMAKE_TOOLCHAIN_FILE="$repo/ohos-toolchain.cmake" -DOHOS_NDK_HOME="$fake" -DOHOS_ARCH=armeabi-v7a \
  -DEXPECT_ARCH=arm64-v8a
ok "clear cmake errors"

echo "-- the OHOS-only logging branch (hilog sink) compiles"
# No OHOS standard library here, so compile src/logging.rs (and the error table and text helpers it uses) for the host
# with target_env="ohos" forced on for that crate only (libc and the other dependencies would break
# under it). The crate lives in target/, with the project's lock file, so the versions are the same.
crate=$repo/target/ohos-cfg-check
mkdir -p "$crate/src"
cat >"$crate/Cargo.toml" <<'TOML'
[package]
name = "ohos-cfg-check"
version = "0.0.0"
edition = "2021"
publish = false

[dependencies]
log = "0.4"
serde = { version = "1", features = ["derive"] }
thiserror = "2"
ohos-hilogs-sys = "0.1.4"

[workspace]
TOML
cat >"$crate/src/lib.rs" <<RS
#![allow(dead_code)]
#[path = "$repo/src/error.rs"]
pub mod error;
#[path = "$repo/src/logging.rs"]
pub mod logging;
#[path = "$repo/src/text.rs"]
pub mod text;
pub use error::codes;
RS
[ -f "$crate/Cargo.lock" ] || cp Cargo.lock "$crate/Cargo.lock"
(cd "$crate" && cargo rustc --quiet --lib -- --cfg 'target_env="ohos"' -A explicit_builtin_cfgs_in_flags) ||
  fail "src/logging.rs does not compile with target_env=ohos"
ok "src/logging.rs compiles with target_env=\"ohos\" against ohos-hilogs-sys"

echo "check-ohos.sh: all checks passed"
