#!/usr/bin/env bash
# C++ compiler for the Rust target x86_64-unknown-linux-ohos: the NDK's clang++ for x86_64-linux-ohos.
exec "$(dirname "$0")/ndk-tool.sh" clang++ --target=x86_64-linux-ohos "$@"
