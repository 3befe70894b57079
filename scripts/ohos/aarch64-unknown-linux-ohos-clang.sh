#!/usr/bin/env bash
# C compiler and linker for the Rust target aarch64-unknown-linux-ohos: the NDK's clang for aarch64-linux-ohos.
exec "$(dirname "$0")/ndk-tool.sh" clang --target=aarch64-linux-ohos "$@"
