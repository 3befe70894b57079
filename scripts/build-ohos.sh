#!/usr/bin/env bash
# Cross-compiles libarkagent.so (the NAPI module, cargo feature `napi`) for HarmonyOS / OpenHarmony
# with the NDK's clang, strips it and copies it into entry-demo/entry/libs/<abi>/libarkagent.so.
#
#   OHOS_NDK_HOME=/path/to/sdk/default/openharmony scripts/build-ohos.sh [options]
#
# Options:
#   --abi arm64-v8a|x86_64|all   which ABI to build (repeatable; default: all = both)
#   --tool auto|cargo|ohrs       auto (default) uses `ohrs build` when ohrs is installed, else cargo
#   --profile NAME               cargo profile (default: release)
#   --dest DIR                   where the <abi>/libarkagent.so go (default: entry-demo/entry/libs)
#   --features LIST              cargo features added to `napi`, e.g. http2,gzip (default: none)
#   --print-env                  print the toolchain environment of each ABI and stop (no build)
#
# ABIs and Rust targets: arm64-v8a = aarch64-unknown-linux-ohos (devices), x86_64 =
# x86_64-unknown-linux-ohos (the emulator). Stops with a message when OHOS_NDK_HOME, the NDK's tools or
# the Rust target (rustup target add ...) are missing. See docs/build-for-device.md.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)

die() {
  echo "build-ohos.sh: $*" >&2
  exit 2
}

# The one table of ABIs: abi -> Rust target -> clang target. scripts/check-ohos.sh compares it with
# .cargo/config.toml and ohos-toolchain.cmake.
rust_target_of() {
  case $1 in
    arm64-v8a) echo aarch64-unknown-linux-ohos ;;
    x86_64) echo x86_64-unknown-linux-ohos ;;
    *) die "unknown ABI '$1' (arm64-v8a or x86_64)" ;;
  esac
}
clang_target_of() {
  case $1 in
    arm64-v8a) echo aarch64-linux-ohos ;;
    x86_64) echo x86_64-linux-ohos ;;
    *) die "unknown ABI '$1'" ;;
  esac
}
ohrs_arch_of() {
  case $1 in
    arm64-v8a) echo aarch ;;
    x86_64) echo x86_64 ;;
    *) die "unknown ABI '$1'" ;;
  esac
}
ALL_ABIS="arm64-v8a x86_64"

abis=()
tool=auto
profile=release
dest=$repo/entry-demo/entry/libs
print_env=false
features=napi
while [ $# -gt 0 ]; do
  case $1 in
    --abi)
      [ $# -ge 2 ] || die "--abi needs a value"
      if [ "$2" = all ]; then
        read -r -a abis <<<"$ALL_ABIS"
      else
        rust_target_of "$2" >/dev/null
        abis+=("$2")
      fi
      shift 2
      ;;
    --tool)
      [ $# -ge 2 ] || die "--tool needs a value"
      tool=$2
      shift 2
      ;;
    --profile)
      [ $# -ge 2 ] || die "--profile needs a value"
      profile=$2
      shift 2
      ;;
    --dest)
      [ $# -ge 2 ] || die "--dest needs a value"
      dest=$2
      shift 2
      ;;
    --features)
      [ $# -ge 2 ] || die "--features needs a value"
      features=napi,$2
      shift 2
      ;;
    --print-env)
      print_env=true
      shift
      ;;
    -h | --help)
      sed -n '2,17p' "$0"
      exit 0
      ;;
    *) die "unknown argument '$1' (see --help)" ;;
  esac
done
[ ${#abis[@]} -gt 0 ] || read -r -a abis <<<"$ALL_ABIS"
case $tool in
  auto) if command -v ohrs >/dev/null 2>&1; then tool=ohrs; else tool=cargo; fi ;;
  cargo) ;;
  ohrs) command -v ohrs >/dev/null 2>&1 || die "--tool ohrs given but ohrs is not installed (cargo install ohrs)" ;;
  *) die "unknown --tool '$tool' (auto, cargo or ohrs)" ;;
esac

# --- the NDK: OHOS_NDK_HOME is the SDK directory that contains native/ (or native/ itself)
[ -n "${OHOS_NDK_HOME:-}" ] || die "OHOS_NDK_HOME is not set. Point it at the OpenHarmony SDK directory that
  contains native/ (DevEco Studio: <sdk>/default/openharmony; command-line tools: <tools>/sdk/default/openharmony)."
native=$OHOS_NDK_HOME/native
if [ ! -d "$native/llvm" ] && [ -d "$OHOS_NDK_HOME/llvm" ]; then
  native=$OHOS_NDK_HOME
fi
for t in clang clang++ llvm-ar llvm-ranlib llvm-strip; do
  [ -x "$native/llvm/bin/$t" ] || die "the NDK's $t is missing: $native/llvm/bin/$t (is OHOS_NDK_HOME=$OHOS_NDK_HOME an OpenHarmony SDK?)"
done
[ -d "$native/sysroot" ] || die "the NDK sysroot is missing: $native/sysroot"

# Environment of one ABI, as KEY=VALUE lines: cargo's linker, cc's CC/CXX/AR/CFLAGS, cmake's toolchain.
# The wrappers in scripts/ohos/ add --target, --sysroot and -D__MUSL__ (the form the Rust platform
# docs give for these targets); .cargo/config.toml points at the same wrappers.
env_of() {
  local abi=$1 target under upper
  target=$(rust_target_of "$abi")
  under=${target//-/_}
  upper=$(echo "$under" | tr '[:lower:]' '[:upper:]')
  echo "CARGO_TARGET_${upper}_LINKER=$repo/scripts/ohos/$target-clang.sh"
  # Short source paths of the registry crates (scripts/registry-remap.sh); cargo joins this with
  # the target's rustflags of .cargo/config.toml. A value already in the environment is kept first.
  local remap var
  remap=$("$repo/scripts/registry-remap.sh")
  var=CARGO_TARGET_${upper}_RUSTFLAGS
  [ -z "$remap" ] || echo "$var=${!var:+${!var} }$remap"
  echo "CC_${under}=$repo/scripts/ohos/$target-clang.sh"
  echo "CXX_${under}=$repo/scripts/ohos/$target-clang++.sh"
  echo "AR_${under}=$native/llvm/bin/llvm-ar"
  echo "RANLIB_${under}=$native/llvm/bin/llvm-ranlib"
  echo "CMAKE_TOOLCHAIN_FILE_${under}=$repo/ohos-toolchain.cmake"
  echo "OHOS_ARCH=$abi"
  echo "OHOS_CLANG_TARGET=$(clang_target_of "$abi")"
}

if $print_env; then
  for abi in "${abis[@]}"; do
    echo "# $abi ($(rust_target_of "$abi"))"
    env_of "$abi"
  done
  exit 0
fi

# --- the Rust targets
have_target() {
  if command -v rustup >/dev/null 2>&1; then
    rustup target list --installed | grep -qx "$1"
  else
    [ -d "$(rustc --print sysroot)/lib/rustlib/$1" ]
  fi
}
for abi in "${abis[@]}"; do
  target=$(rust_target_of "$abi")
  have_target "$target" || die "the Rust target $target ($abi) is not installed: run
  rustup target add $target"
done

strip_tool=$native/llvm/bin/llvm-strip
build_one() {
  local abi=$1 target so out
  target=$(rust_target_of "$abi")
  echo "== $abi: $target with $tool"
  local -a envs
  mapfile -t envs < <(env_of "$abi")
  if [ "$tool" = ohrs ]; then
    # ohrs sets the NDK toolchain itself and writes dist/<abi>/lib<name>.so.
    local dist
    dist=$(mktemp -d)
    local -a ohrs_args=(build --arch "$(ohrs_arch_of "$abi")" --dist "$dist")
    [ "$profile" = release ] && ohrs_args+=(--release)
    env "${envs[@]}" ohrs "${ohrs_args[@]}" -- --features "$features"
    so=$dist/$abi/libarkagent.so
  else
    env "${envs[@]}" cargo build --locked --profile "$profile" --features "$features" --target "$target"
    local dir=$profile
    [ "$profile" = dev ] && dir=debug
    so=${CARGO_TARGET_DIR:-$repo/target}/$target/$dir/libarkagent.so
  fi
  [ -f "$so" ] || die "build finished but $so is missing"
  out=$dest/$abi
  mkdir -p "$out"
  "$strip_tool" --strip-unneeded -o "$out/libarkagent.so" "$so"
  echo "   $out/libarkagent.so ($(wc -c <"$out/libarkagent.so") bytes, stripped)"
}
# The registry's sources first: on a machine that has none yet (a fresh CI runner) the first build
# would otherwise go without scripts/registry-remap.sh's flags (no registry directory to name),
# with the build machine's paths in the module, and the next one would rebuild every crate.
cargo fetch --locked
for abi in "${abis[@]}"; do
  build_one "$abi"
done
