#!/usr/bin/env bash
# Runs a tool of the OpenHarmony NDK (native/llvm/bin/<tool>). The compiler wrappers beside this file
# call it; .cargo/config.toml and scripts/build-ohos.sh point cargo, cc and cmake at those wrappers.
#   OHOS_NDK_HOME: the SDK directory that contains native/ (e.g. .../sdk/default/openharmony), or
#                  the native/ directory itself.
# Usage: ndk-tool.sh TOOL [ARGS...]
set -euo pipefail
tool=${1:?usage: ndk-tool.sh TOOL [ARGS...]}
shift
if [ -z "${OHOS_NDK_HOME:-}" ]; then
  echo "error: OHOS_NDK_HOME is not set; point it at the OpenHarmony SDK directory that contains native/" >&2
  exit 2
fi
native=$OHOS_NDK_HOME/native
if [ ! -d "$native/llvm" ] && [ -d "$OHOS_NDK_HOME/llvm" ]; then
  native=$OHOS_NDK_HOME
fi
if [ ! -x "$native/llvm/bin/$tool" ]; then
  echo "error: $native/llvm/bin/$tool not found or not executable (OHOS_NDK_HOME=$OHOS_NDK_HOME)" >&2
  exit 2
fi
case $tool in
  clang | clang++)
    # The compiler wrappers pass --target first; the sysroot and the musl define come from here.
    exec "$native/llvm/bin/$tool" "--sysroot=$native/sysroot" -D__MUSL__ "$@"
    ;;
  *)
    exec "$native/llvm/bin/$tool" "$@"
    ;;
esac
