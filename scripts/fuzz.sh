#!/usr/bin/env bash
# Builds the libFuzzer targets (tests/fuzz/, clang + -DCMF_FUZZ=ON) in build-fuzz/ and runs each for N seconds.
#   usage: scripts/fuzz.sh [SECONDS_PER_TARGET (default 60)] [TARGET[=RUNS]...]
#   targets: cmf tokenizer_json tokenize template gguf safetensors http (default: all)
#   FUZZ_RUNS=N (environment): instead of a time budget, exactly N inputs per target with FUZZ_SEED (default 1),
#   so that a run does about the same work on any machine (CI uses this; libFuzzer is not fully deterministic:
#   the inputs a run adds can differ a little; the time budget explores more). TARGET=RUNS gives
#   one target its own number of inputs (seed FUZZ_SEED too), e.g. `scripts/fuzz.sh 0 tokenize=15000 template=60000`.
#   FUZZ_JOBS=J (environment; default min(nproc, 2)): J targets run at once, each a single-process libFuzzer with
#   its own corpus, log and seed, as when they run one after the other; each target's lines are printed in the
#   order the targets were given, as such a run prints them.
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
for t in "${targets[@]}"; do tgts+=(--target "fuzz_${t%%=*}"); done
# (glibc malloc on transparent huge pages while building: scripts/test.sh says why)
GLIBC_TUNABLES=${GLIBC_TUNABLES:+$GLIBC_TUNABLES:}glibc.malloc.hugetlb=1 \
  cmake --build "$build" -j"$jobs" "${tgts[@]}" >/dev/null

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
export CMF_SHARED=${CMF_SHARED:-$(cd .. && pwd)/shared}
fjobs=${FUZZ_JOBS:-$jobs}
[ "$fjobs" -ge 1 ] 2>/dev/null || { echo "fuzz.sh: FUZZ_JOBS must be a positive number" >&2; exit 2; }
status=$build/status # per target: the fuzzer's pid while it runs, its exit status once done
rm -rf "$status" && mkdir -p "$status"

# run_target T RUNS: one libFuzzer run of target T (RUNS empty: the time budget), in the background of fuzz.sh;
# writes status/T.rc (atomically) when it ends.
run_target() {
  local t=$1 runs=$2 seeds=tests/fuzz/corpus/$1 work=$build/corpus/$1 crashes=$build/crashes/$1
  local log=$build/logs/$1.log budget rc=0
  mkdir -p "$work" "$crashes" "$(dirname "$log")"
  if [ -n "$runs" ]; then budget=(-runs="$runs" -seed="${FUZZ_SEED:-1}"); rm -rf "$work" && mkdir -p "$work"
  else budget=(-max_total_time="$secs"); fi
  # a target's token dictionary (tests/fuzz/fuzz_<target>.dict, libFuzzer's -dict) when it has one
  [ -f "tests/fuzz/fuzz_$t.dict" ] && budget+=(-dict="tests/fuzz/fuzz_$t.dict")
  "$build/tests/fuzz/fuzz_$t" "${budget[@]}" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
      -artifact_prefix="$crashes/" "$work" "$seeds" >"$log" 2>&1 &
  echo $! >"$status/$t.pid"
  wait $! || rc=$?
  echo "$rc" >"$status/$t.rc.tmp" && mv "$status/$t.rc.tmp" "$status/$t.rc"
}

# report T RUNS: what a run one after the other prints for T, once T has ended; a failure ends fuzz.sh (exit 1).
report() {
  local t=$1 runs=$2 log=$build/logs/$1.log repro
  if [ -n "$runs" ]; then echo "fuzz $t: $runs runs, seed ${FUZZ_SEED:-1} (log $log)"
  else echo "fuzz $t: ${secs}s (log $log)"; fi
  if [ "$(cat "$status/$t.rc")" != 0 ]; then
    repro=$(grep -o 'Test unit written to [^ ]*' "$log" | tail -1 | sed 's/Test unit written to //')
    echo "fuzz $t: FAILED — report:" >&2
    grep -m1 -A40 -E '==[0-9]+==ERROR|runtime error|broken invariant|ALARM|deadly signal|out-of-memory' "$log" >&2 || tail -40 "$log" >&2
    echo "fuzz $t: reproducer: ${repro:-(none written; see $log)}" >&2
    [ -n "$repro" ] && echo "fuzz $t: replay with: $build/tests/fuzz/fuzz_$t $repro" >&2
    exit 1
  fi
  grep -E '^stat::number_of_executed_units|^stat::new_units_added' "$log" | tr '\n' ' ' | sed "s/^/fuzz $t: ok: /"
  echo
}

# Targets still running when fuzz.sh ends (a failure reported, an interrupt) are stopped, by their own pids.
stop_running() {
  local f
  for f in "$status"/*.pid; do
    [ -e "$f" ] || continue
    [ -e "${f%.pid}.rc" ] || kill "$(cat "$f")" 2>/dev/null || true
  done
  rm -rf "$probe"
}
trap stop_running EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

names=() runs=()
for a in "${targets[@]}"; do
  if [[ $a == *=* ]]; then
    names+=("${a%%=*}") runs+=("${a#*=}")
    [[ ${a#*=} =~ ^[0-9]+$ ]] || { echo "fuzz.sh: $a: RUNS must be a number" >&2; exit 2; }
  else
    names+=("$a") runs+=("${FUZZ_RUNS:-}")
  fi
done
# Up to fjobs targets run at once; the finished ones are reported in the order given.
started=0 shown=0 running=0 n=${#names[@]}
while [ "$shown" -lt "$n" ]; do
  while [ "$running" -lt "$fjobs" ] && [ "$started" -lt "$n" ]; do
    run_target "${names[started]}" "${runs[started]}" &
    started=$((started + 1)) running=$((running + 1))
  done
  w=0; wait -n || w=$?
  # (127: no job left, so a target without an exit status was killed from outside: it failed)
  if [ "$w" = 127 ]; then
    for ((i = shown; i < started; i++)); do [ -e "$status/${names[i]}.rc" ] || echo 143 >"$status/${names[i]}.rc"; done
  fi
  running=0
  for ((i = shown; i < started; i++)); do [ -e "$status/${names[i]}.rc" ] || running=$((running + 1)); done
  while [ "$shown" -lt "$started" ] && [ -e "$status/${names[shown]}.rc" ]; do
    report "${names[shown]}" "${runs[shown]}"
    shown=$((shown + 1))
  done
done
