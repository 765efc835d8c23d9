#!/usr/bin/env bash
# Cross-builds the CPU kernel layer for arm64 (cmake/kernels with cmake/aarch64-linux-gnu.cmake) and runs its tests
# (tests/kernels: test_kernels, test_kern_tables, test_repack with the scalar repacked kernels; test_gemm skips)
# under qemu-aarch64 user-mode emulation, on an x86-64 host:
#   1. -march=armv8.2-a+dotprod, gcc -O2:  SDOT kernels only, emulated core "max"         (neon + dotprod)
#   2. -march=armv8-a, gcc -O2:            both flavours, SDOT picked at run time on "max" (neon + dotprod)
#                                          and the SMULL/SADALP fallback on "cortex-a53"   (neon, no dotprod)
#   3. -march=armv8-a, gcc -O0 and clang -O2 (when clang is installed): compile only, -Werror;
#   4. with CROSS_NEON_SANITIZE=1 (about 3 more minutes): -march=armv8-a, gcc Debug with AddressSanitizer +
#      UndefinedBehaviorSanitizer, tests on both cores (leak detection off: LeakSanitizer cannot run under qemu).
# Each test run checks that cmf_cpu_features_str() names the path it was meant to test (CMF_EXPECT_CPU).
# Needs: apt-get install gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user (and the host's libcjson-dev for
# one header); with --install (as root) the script runs that apt-get itself.
# Env: BUILD (build folder, default build-cross-neon), JOBS (default 2). Time on the 2-core dev VM: the install
# (56 MB) about 12 s, the builds and runs about 45-55 s.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
build=${BUILD:-build-cross-neon}
jobs=${JOBS:-2}
pkgs="gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user"

missing() { ! command -v aarch64-linux-gnu-gcc >/dev/null || ! command -v qemu-aarch64 >/dev/null ||
  [ ! -e /usr/aarch64-linux-gnu/lib/ld-linux-aarch64.so.1 ]; }
if missing; then
  if [ "${1:-}" = "--install" ]; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $pkgs >/dev/null
  else
    echo "cross_neon: the arm64 cross toolchain or qemu-aarch64 is missing: apt-get install $pkgs" >&2
    echo "            (or run this script as root with --install)" >&2
    exit 1
  fi
fi

tc=$root/cmake/aarch64-linux-gnu.cmake
configure() { # dir, extra cmake arguments...
  local dir=$1
  shift
  cmake -S "$root/cmake/kernels" -B "$build/$dir" -DCMAKE_TOOLCHAIN_FILE="$tc" "$@" >/dev/null
  # (glibc malloc on transparent huge pages while building: scripts/test.sh says why)
  GLIBC_TUNABLES=${GLIBC_TUNABLES:+$GLIBC_TUNABLES:}glibc.malloc.hugetlb=1 \
    nice -n 10 cmake --build "$build/$dir" -j"$jobs" >/dev/null
}
run_tests() { # dir, QEMU_CPU, expected cmf_cpu_features_str()
  echo "== $1 on qemu -cpu $2: expect \"$3\""
  # (the thread pool's stress rounds cut 10x: emulated futexes made them ~55 s of test_kernels' ~60 s)
  (cd "$build/$1" && QEMU_CPU=$2 CMF_EXPECT_CPU=$3 CMF_TEST_POOL_OPS=2000 ASAN_OPTIONS=detect_leaks=0 ctest --output-on-failure -j"$jobs")
}

echo "== arm64 kernel build, -march=armv8.2-a+dotprod (gcc -O2)"
configure dotprod -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS="-march=armv8.2-a+dotprod"
run_tests dotprod max "neon (cpu: neon dotprod)"

echo "== arm64 kernel build, -march=armv8-a (gcc -O2)"
configure base -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS="-march=armv8-a"
run_tests base max "neon (cpu: neon dotprod)"
run_tests base cortex-a53 "neon (cpu: neon)"

echo "== arm64 compile checks: gcc -O0, clang -O2"
configure debug -DCMAKE_BUILD_TYPE=Debug -DCMAKE_C_FLAGS="-march=armv8-a"
if command -v clang >/dev/null; then
  configure clang -DCMAKE_BUILD_TYPE=Release -DCMF_CROSS_CC=clang -DCMAKE_C_FLAGS="-march=armv8-a"
else
  echo "skipped: clang is not installed"
fi
if [ "${CROSS_NEON_SANITIZE:-0}" = 1 ]; then
  echo "== arm64 kernel build, -march=armv8-a, gcc Debug + ASan + UBSan"
  san="-fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer"
  configure asan -DCMAKE_BUILD_TYPE=Debug -DCMAKE_C_FLAGS="-march=armv8-a $san" \
    -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined"
  run_tests asan max "neon (cpu: neon dotprod)"
  run_tests asan cortex-a53 "neon (cpu: neon)"
fi
echo "cross_neon: all arm64 kernel checks passed"
