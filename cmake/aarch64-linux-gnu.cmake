# CMake toolchain file: cross-compile for arm64 Linux with Debian's cross toolchain (gcc-aarch64-linux-gnu,
# libc6-dev-arm64-cross) and run the built programs (ctest, try_run) under user-mode emulation (qemu-user):
#   cmake -S cmake/kernels -B build-cross -DCMAKE_TOOLCHAIN_FILE=cmake/aarch64-linux-gnu.cmake
# CMF_CROSS_CC picks the compiler: aarch64-linux-gnu-gcc (default) or clang (then with --target=aarch64-linux-gnu,
# the same sysroot and GNU linker). Only the kernel layer has no arm64 library dependencies here (cJSON, PCRE2 and
# utf8proc exist for the host only): see cmake/kernels/CMakeLists.txt and scripts/cross_neon.sh.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMF_CROSS_SYSROOT /usr/aarch64-linux-gnu CACHE PATH "the arm64 libc of the cross toolchain")
set(CMF_CROSS_CC aarch64-linux-gnu-gcc CACHE STRING "cross C compiler: aarch64-linux-gnu-gcc or clang")
if(CMF_CROSS_CC STREQUAL "clang")
  set(CMAKE_C_COMPILER clang)
  set(CMAKE_C_COMPILER_TARGET aarch64-linux-gnu)
else()
  set(CMAKE_C_COMPILER ${CMF_CROSS_CC})
endif()
set(CMAKE_FIND_ROOT_PATH ${CMF_CROSS_SYSROOT})
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)
# QEMU_CPU in the environment picks the emulated core (e.g. cortex-a53: no dot-product instructions).
find_program(CMF_QEMU_AARCH64 qemu-aarch64)
if(CMF_QEMU_AARCH64)
  set(CMAKE_CROSSCOMPILING_EMULATOR ${CMF_QEMU_AARCH64} -L ${CMF_CROSS_SYSROOT})
endif()
