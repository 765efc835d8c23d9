#!/usr/bin/env bash
# Builds the libFuzzer targets (tests/fuzz/, clang + -DCMF_FUZZ=ON) in build-fuzz/ and runs each for N seconds.
#   usage: scripts/fuzz.sh [SECONDS_PER_TARGET (default 60)] [TARGET...]
#   targets: cmf tokenizer_json tokenize template gguf safetensors http (default: all, one after the other)
#   FUZZ_RUNS=N (environment): instead of a time budget, exactly N inputs per target with FUZZ_SEED (default 1),
#   so that a run is reproducible on any machine (CI uses this; the time budget explores more).
# Seeds come from tests/fuzz/corpus/<target>/ (read only); inputs found while fuzzing go to build-fuzz/corpus/<target>/,
# logs to build-fuzz/logs/<target>.log. A crash, sanitizer report, leak, timeout (10 s per input) or broken
# invariant stops the script (exit 1) and prints the reproducer path and the command that replays it.
# Warnings are not errors here (the clang -Werror build is scripts/test.sh's job). Exit 2 when clang cannot link a libFuzzer program (Debian: apt-get install clang libclang-rt-dev).
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-60}
[ $# -gt 0 ] && shift
targets=("$@")
[ ${#targets[@]} -eq 0 ] && targets=(cmf tokenizer_json tokenize template gguf safetensors http)
build=build-fuzz
jobs=$(nproc); [ "$jobs" -gt 2 ] && jobs=2

probe=$(mktemp -d)
trap 'rm -rf "$probe"' EXIT
printf 'int LLVMFuzzerTestOneInput(const unsigned char *d, unsigned long n) { (void)d; (void)n; return 0; }\n' \
  > "$probe/p.c"
if ! command -v clang >/dev/null || ! clang -fsanitize=fuzzer,address,undefined "$probe/p.c" -o "$probe/p" 2>/dev/null; then
  echo "fuzz.sh: clang with libFuzzer is not available (need clang and libclang-rt-dev)" >&2
  exit 2
fi

gen=() # Ninja for a new tree when installed (scripts/test.sh says why); a configured tree keeps its generator
[ ! -f "$build/CMakeCache.txt" ] && command -v ninja >/dev/null && gen=(-G Ninja)
CC=clang cmake -S . -B "$build" "${gen[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMF_FUZZ=ON -DCMF_CUDA=OFF -DCMF_WERROR=OFF >/dev/null
tgts=()
for t in "${targets[@]}"; do tgts+=(--target "fuzz_$t"); done
cmake --build "$build" -j"$jobs" "${tgts[@]}" >/dev/null

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
export CMF_SHARED=${CMF_SHARED:-$(cd .. && pwd)/shared}
for t in "${targets[@]}"; do
  seeds=tests/fuzz/corpus/$t
  work=$build/corpus/$t
  crashes=$build/crashes/$t
  log=$build/logs/$t.log
  mkdir -p "$work" "$crashes" "$(dirname "$log")"
  if [ -n "${FUZZ_RUNS:-}" ]; then echo "fuzz $t: $FUZZ_RUNS runs, seed ${FUZZ_SEED:-1} (log $log)"
  else echo "fuzz $t: ${secs}s (log $log)"; fi
  if [ -n "${FUZZ_RUNS:-}" ]; then budget=(-runs="$FUZZ_RUNS" -seed="${FUZZ_SEED:-1}"); rm -rf "$work" && mkdir -p "$work"
  else budget=(-max_total_time="$secs"); fi
  # a target's token dictionary (tests/fuzz/fuzz_<target>.dict, libFuzzer's -dict) when it has one
  [ -f "tests/fuzz/fuzz_$t.dict" ] && budget+=(-dict="tests/fuzz/fuzz_$t.dict")
  if ! "$build/tests/fuzz/fuzz_$t" "${budget[@]}" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
      -artifact_prefix="$crashes/" "$work" "$seeds" >"$log" 2>&1; then
    repro=$(grep -o 'Test unit written to [^ ]*' "$log" | tail -1 | sed 's/Test unit written to //')
    echo "fuzz $t: FAILED — report:" >&2
    grep -m1 -A40 -E '==[0-9]+==ERROR|runtime error|broken invariant|ALARM|deadly signal|out-of-memory' "$log" >&2 || tail -40 "$log" >&2
    echo "fuzz $t: reproducer: ${repro:-(none written; see $log)}" >&2
    [ -n "$repro" ] && echo "fuzz $t: replay with: $build/tests/fuzz/fuzz_$t $repro" >&2
    exit 1
  fi
  grep -E '^stat::number_of_executed_units|^stat::new_units_added' "$log" | tr '\n' ' ' | sed "s/^/fuzz $t: ok: /"
  echo
done
