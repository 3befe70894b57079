#!/usr/bin/env bash
# The NDK's llvm-ar (archives of C code built by cc / cmake for the OHOS targets).
exec "$(dirname "$0")/ndk-tool.sh" llvm-ar "$@"
