# OHOS platform for CMake older than 3.28 (which ships its own): OpenHarmony is Linux with musl, so
# use CMake's Linux rules (shared library flags, -fPIC, sonames). Found through CMAKE_MODULE_PATH,
# which ohos-toolchain.cmake sets only when CMake has no Platform/OHOS.cmake.
include(Platform/Linux)
