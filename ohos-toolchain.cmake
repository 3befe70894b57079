# CMake toolchain file for HarmonyOS / OpenHarmony (arm64-v8a devices, x86_64 emulator), for C and C++
# code that dependencies build through cmake (the cmake crate reads CMAKE_TOOLCHAIN_FILE_<target>, set
# in .cargo/config.toml and by scripts/build-ohos.sh).
#
# Inputs (a -D cache variable wins over the environment variable of the same name):
#   OHOS_NDK_HOME  the OpenHarmony SDK directory that contains native/ (or native/ itself)
#   OHOS_ARCH      arm64-v8a | x86_64; when unset it follows the Rust TARGET that cargo gives build
#                  scripts (aarch64-unknown-linux-ohos -> arm64-v8a, x86_64-unknown-linux-ohos -> x86_64)
#
# It uses the NDK's layout: native/llvm/bin/{clang,clang++,llvm-ar,llvm-ranlib,llvm-strip} and
# native/sysroot. tests/ohos-toolchain/ checks it against a fake NDK tree (scripts/check-ohos.sh).

cmake_minimum_required(VERSION 3.16)

set(CMAKE_SYSTEM_NAME OHOS)
set(CMAKE_SYSTEM_VERSION 1)

# CMake learned the OHOS platform in 3.28 (Modules/Platform/OHOS.cmake); older CMake gets a shim that
# treats it as Linux, so shared libraries and -fPIC work the same.
if(NOT EXISTS "${CMAKE_ROOT}/Modules/Platform/OHOS.cmake")
  list(APPEND CMAKE_MODULE_PATH "${CMAKE_CURRENT_LIST_DIR}/cmake")
endif()

# Try-compile projects re-read this file: pass the inputs on to them.
list(APPEND CMAKE_TRY_COMPILE_PLATFORM_VARIABLES OHOS_NDK_HOME OHOS_ARCH)

if(NOT OHOS_NDK_HOME)
  set(OHOS_NDK_HOME "$ENV{OHOS_NDK_HOME}")
endif()
if(NOT OHOS_NDK_HOME)
  message(FATAL_ERROR "ohos-toolchain.cmake: OHOS_NDK_HOME is not set (the OpenHarmony SDK directory that contains native/)")
endif()
if(IS_DIRECTORY "${OHOS_NDK_HOME}/native/llvm")
  set(OHOS_NATIVE "${OHOS_NDK_HOME}/native")
elseif(IS_DIRECTORY "${OHOS_NDK_HOME}/llvm")
  set(OHOS_NATIVE "${OHOS_NDK_HOME}")
else()
  message(FATAL_ERROR "ohos-toolchain.cmake: no native/llvm under OHOS_NDK_HOME=${OHOS_NDK_HOME}")
endif()

if(NOT OHOS_ARCH)
  set(OHOS_ARCH "$ENV{OHOS_ARCH}")
endif()
if(NOT OHOS_ARCH)
  if("$ENV{TARGET}" MATCHES "^aarch64-.*-ohos$")
    set(OHOS_ARCH arm64-v8a)
  elseif("$ENV{TARGET}" MATCHES "^x86_64-.*-ohos$")
    set(OHOS_ARCH x86_64)
  else()
    set(OHOS_ARCH arm64-v8a)
  endif()
endif()

if(OHOS_ARCH STREQUAL "arm64-v8a")
  set(CMAKE_SYSTEM_PROCESSOR aarch64)
  set(OHOS_LLVM_TRIPLE aarch64-linux-ohos)
  set(OHOS_ARCH_FLAGS "")
elseif(OHOS_ARCH STREQUAL "x86_64")
  set(CMAKE_SYSTEM_PROCESSOR x86_64)
  set(OHOS_LLVM_TRIPLE x86_64-linux-ohos)
  set(OHOS_ARCH_FLAGS "")
else()
  message(FATAL_ERROR "ohos-toolchain.cmake: OHOS_ARCH must be arm64-v8a or x86_64, got '${OHOS_ARCH}'")
endif()

set(OHOS_LLVM_BIN "${OHOS_NATIVE}/llvm/bin")
foreach(tool clang clang++ llvm-ar llvm-ranlib llvm-strip)
  if(NOT EXISTS "${OHOS_LLVM_BIN}/${tool}")
    message(FATAL_ERROR "ohos-toolchain.cmake: ${OHOS_LLVM_BIN}/${tool} not found")
  endif()
endforeach()
if(NOT IS_DIRECTORY "${OHOS_NATIVE}/sysroot")
  message(FATAL_ERROR "ohos-toolchain.cmake: ${OHOS_NATIVE}/sysroot not found")
endif()

set(CMAKE_SYSROOT "${OHOS_NATIVE}/sysroot")
set(CMAKE_C_COMPILER "${OHOS_LLVM_BIN}/clang")
set(CMAKE_CXX_COMPILER "${OHOS_LLVM_BIN}/clang++")
set(CMAKE_ASM_COMPILER "${OHOS_LLVM_BIN}/clang")
set(CMAKE_C_COMPILER_TARGET ${OHOS_LLVM_TRIPLE})
set(CMAKE_CXX_COMPILER_TARGET ${OHOS_LLVM_TRIPLE})
set(CMAKE_ASM_COMPILER_TARGET ${OHOS_LLVM_TRIPLE})
set(CMAKE_AR "${OHOS_LLVM_BIN}/llvm-ar" CACHE FILEPATH "OHOS archiver")
set(CMAKE_RANLIB "${OHOS_LLVM_BIN}/llvm-ranlib" CACHE FILEPATH "OHOS ranlib")
set(CMAKE_STRIP "${OHOS_LLVM_BIN}/llvm-strip" CACHE FILEPATH "OHOS strip")

# The NDK's libc is musl; its headers expect __MUSL__. Position-independent code for shared objects.
set(CMAKE_C_FLAGS_INIT "-D__MUSL__ -fPIC ${OHOS_ARCH_FLAGS}")
set(CMAKE_CXX_FLAGS_INIT "-D__MUSL__ -fPIC ${OHOS_ARCH_FLAGS}")
set(CMAKE_ASM_FLAGS_INIT "-D__MUSL__ -fPIC ${OHOS_ARCH_FLAGS}")
set(CMAKE_SHARED_LINKER_FLAGS_INIT "-Wl,--build-id=sha1")
set(CMAKE_POSITION_INDEPENDENT_CODE ON)

# Look for headers and libraries in the sysroot only, for programs on the build machine only.
set(CMAKE_FIND_ROOT_PATH "${CMAKE_SYSROOT}")
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)
