#!/usr/bin/env bash
# Builds and runs the whole test suite: a Release build with gcc (ctest), a -Werror compile with clang, the arm64
# NEON kernels cross-built and tested under qemu, and the
# same suite again under AddressSanitizer + UndefinedBehaviorSanitizer, then each libFuzzer target (tests/fuzz) for a fixed, seeded number of inputs,
# and the tokenizer.json / tokenize / template targets for about 12 seconds each more, seeded from the commit: each commit
# explores other inputs, and a given commit gives the same result on every machine (replay a failure with the seed
# printed; FUZZ_EXPLORE_SEED overrides it).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh
jobs=$(nproc)
# Each stage's header says when it started (seconds since the start, and CPU seconds of this script and what it ran,
# both cores together), the previous stage's share of each, the load average and how much disk is left, so a CI
# log shows where time and space went.
cpu_s() { # user + system time of this shell and its finished children (/proc/PID/stat fields 14-17), in seconds
  local s; s=$(cat /proc/$$/stat 2>/dev/null) || { echo 0; return; }
  s=${s##*) }; set -- $s
  echo $(( (${12} + ${13} + ${14} + ${15}) / $(getconf CLK_TCK) ))
}
last_wall=0 last_cpu=0
stage() {
  local cpu; cpu=$(cpu_s)
  echo "== $* [${SECONDS} s, ${cpu} CPU-s; previous stage $((SECONDS - last_wall)) s, $((cpu - last_cpu)) CPU-s;" \
       "load $(cut -d' ' -f1 /proc/loadavg 2>/dev/null); $(df -h --output=avail . | tail -1 | tr -d ' ') free]"
  last_wall=$SECONDS last_cpu=$cpu
}
# Ninja builds a new tree (deps.sh installs it): make builds one target after another (the C library waited for the
# last CUDA object, each test's objects for the libraries: one core idle ~80 s of the gcc build) and spends CPU on
# its per-target dependency scans; ninja keeps both cores on whatever is ready. On the 2-core VM: gcc build 430 ->
# 388 s, clang 144 -> 86 s, ASan 315 -> 296 s (commit 2026-12-01, citrim14). A tree configured before keeps its
# generator (cmake refuses to switch).
gen() { if [ ! -f "$1/CMakeCache.txt" ] && command -v ninja >/dev/null; then echo "-G Ninja"; fi; }
# Builds (not tests: they run with the plain allocator) put glibc malloc's heaps on transparent huge pages
# (glibc.malloc.hugetlb=1: madvise(MADV_HUGEPAGE) when the kernel's THP mode is "madvise"): fewer page faults and
# TLB misses in nvcc, cc1 and clang. Harmless elsewhere: a no-op with THP "always" or "never" or without THP, and a
# glibc before 2.35 skips a tunable it does not know. fuzz.sh and cross_neon.sh build the same way.
hp() { GLIBC_TUNABLES=${GLIBC_TUNABLES:+$GLIBC_TUNABLES:}glibc.malloc.hugetlb=1 "$@"; }
stage "gcc Release build + ctest"
cmake -S . -B build $(gen build) -DCMAKE_BUILD_TYPE=Release >/dev/null
hp cmake --build build -j"$jobs" >/dev/null
(cd build && ctest --output-on-failure -j"$jobs")
# The ASan+UBSan ctest below starts the costliest tests first, by this run's times (ctest keeps each test's last
# time in Testing/Temporary/CTestCostData.txt; a new tree has none and starts the tests in list order, so a long one
# late in the list ran on alone at the end). A tree with times of its own keeps them.
if [ -f build/Testing/Temporary/CTestCostData.txt ] && [ ! -f build-asan/Testing/Temporary/CTestCostData.txt ]; then
  mkdir -p build-asan/Testing/Temporary
  cp build/Testing/Temporary/CTestCostData.txt build-asan/Testing/Temporary/
fi
# CI (.ci/run sets CMF_CI_PRUNE=1) drops each build tree once its stage is done: a fresh CI machine's disk can be
# small, and the CUDA-linked Release tree alone is ~3.5 GB. A developer's run keeps build/ for the next one.
if [ "${CMF_CI_PRUNE:-0}" = 1 ]; then rm -rf build; fi
stage "clang -Werror build"
# The CUDA library is built once, by the gcc build above: nvcc compiles it with the same host compiler whatever CC
# says, the sanitizers do not see inside it, and each CUDA-linked test binary carries its ~30 MB of kernels (three
# build trees of them filled a CI machine's disk).
# At -O0 without debug info: clang's warnings come from its front end, so the optimizer adds no checks here, only
# minutes (the Release compile took ~3 of them on a 2-core machine).
CC=clang cmake -S . -B build-clang $(gen build-clang) -DCMAKE_BUILD_TYPE=Debug -DCMAKE_C_FLAGS_DEBUG=-O0 -DCMF_CUDA=OFF >/dev/null
hp cmake --build build-clang -j"$jobs" >/dev/null
rm -rf build-clang # a compile check: nothing in it is run
stage "arm64 NEON kernels: cross-built, tests under qemu-aarch64 (scripts/cross_neon.sh)"
bash scripts/cross_neon.sh
stage "ASan+UBSan build + ctest"
# Without the benchmark programs (CMF_BENCH=OFF: no test runs them; the two builds above compiled them): the same
# tests.
cmake -S . -B build-asan $(gen build-asan) -DCMAKE_BUILD_TYPE=Debug -DCMF_SANITIZE=ON -DCMF_CUDA=OFF -DCMF_BENCH=OFF >/dev/null
hp cmake --build build-asan -j"$jobs" >/dev/null
(cd build-asan && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 ctest --output-on-failure -j"$jobs")
if [ "${CMF_CI_PRUNE:-0}" = 1 ]; then rm -rf build-asan; fi
stage "fuzz (a fixed, seeded number of inputs per target: reproducible)"
if command -v clang >/dev/null && printf 'int LLVMFuzzerTestOneInput(const unsigned char *d, unsigned long n) { (void)d; (void)n; return 0; }\n' \
    | clang -x c -fsanitize=fuzzer,address,undefined - -o /dev/null 2>/dev/null; then
  FUZZ_RUNS=${FUZZ_RUNS:-12000} FUZZ_SEED=${FUZZ_SEED:-1} bash scripts/fuzz.sh
  head=$(git rev-parse --short=7 HEAD 2>/dev/null || echo 2)
  seed=${FUZZ_EXPLORE_SEED:-$((16#$head))}
  # (~12 s each on the 2-core dev VM, which keeps CI under its 20 minutes; FUZZ_EXPLORE_SCALE multiplies the
  # counts, e.g. 10 for a longer local run)
  k=${FUZZ_EXPLORE_SCALE:-1}
  stage "fuzz the tokenizer and template targets further, seed $seed (from the commit; ~12 s each)"
  FUZZ_SEED=$seed bash scripts/fuzz.sh 0 tokenizer_json=$((50000 * k)) tokenize=$((15000 * k)) template=$((60000 * k))
else
  echo "skipped: clang with libFuzzer is not available (need clang and libclang-rt-dev)"
fi
stage "done"
