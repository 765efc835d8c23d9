#!/usr/bin/env bash
# One device call: build (standalone), correctness tests, compute-sanitizer memcheck of the tests, benchmarks.
# Logs go to $OUT (the device tool's output folder; ./out-device when unset); the bench table is printed last.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-out-device}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv > "$OUT/gpu.txt" 2>&1
echo "== build" && time bash bench/cuda/build_standalone.sh build-dev > "$OUT/build.log" 2>&1 || { tail -50 "$OUT/build.log"; exit 1; }
cat build-dev/obj/*.ptxas.log | grep -E 'registers|spill' | grep -v ' 0 bytes spill' | sort | uniq -c | sort -rn | head -40 > "$OUT/ptxas_summary.txt"
grep -h 'bytes spill' build-dev/obj/*.ptxas.log | grep -v ' 0 bytes spill stores, 0 bytes spill loads' | sort | uniq -c > "$OUT/spills.txt"
echo "== tests" && time timeout 240 build-dev/test_cuda_ops > "$OUT/test.log" 2>&1; trc=$?
tail -30 "$OUT/test.log"; echo "test rc=$trc"
if command -v compute-sanitizer > /dev/null && [ "${SANITIZE:-1}" = 1 ]; then
  echo "== memcheck" && timeout 200 compute-sanitizer --tool memcheck --print-limit 20 build-dev/test_cuda_ops > "$OUT/memcheck.log" 2>&1
  echo "memcheck rc=$?"; grep -E 'ERROR SUMMARY|Invalid|check\(s\) failed' "$OUT/memcheck.log" | head -10
fi
echo "== bench" && timeout 300 build-dev/bench_cuda > "$OUT/bench.log" 2>&1; brc=$?
echo "bench rc=$brc"; cat "$OUT/gpu.txt"; cat "$OUT/spills.txt"
cat "$OUT/bench.log"
