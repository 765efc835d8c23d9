#!/usr/bin/env bash
# ncu_bw.sh — one device call: where a decode step's time goes, kernel by kernel, against the bytes each kernel
# reads. Builds gpu_bench and make_random_llama, writes random q8 files (a 4-layer Llama-3.1-8B-shaped one and the
# whole Qwen3-0.6B shape), measures the copy bandwidth (gpu_bench's copy line), then runs each under Nsight Compute
# (`ncu --metrics gpu__time_duration.sum,dram__bytes_read.sum,launch__registers_per_thread,
# sm__warps_active.avg.pct_of_peak_sustained_active --cache-control none --clock-control none`, 2 decode steps at
# ctx 128) and prints, for the last step, every kernel in launch order with its time, DRAM bytes, GB/s and the
# share of the copy bandwidth (bench/cuda/ncu_bw.py). ncu serializes kernels (no PDL overlap) and adds ~2 us to each.
# DTYPES (default q8): the dtypes of the two files (e.g. "q8 q4tp"). STALL=1: also, for the 8B-shaped file, a second
# ncu run of the product kernels (k_mv_i8*) of the last step with the issue-slot use, the warp instructions and every
# per-issue stall reason (bench/cuda/ncu_stall.py prints them). BUILD: an existing build folder to use (no build).
# Usage (repository root, on the device): DEPS=.devdeps bash bench/cuda/ncu_bw.sh; output also in $OUT (the raw CSVs
# and logs in $OUT/ncu-raw.tgz).
set -uo pipefail
export CUDA_VISIBLE_DEVICES=0
cd "$(dirname "$0")/../.."
R=$PWD
DEPS=${DEPS:-.devdeps}
OUT=${OUT:-$R/out-device}
mkdir -p "$OUT"
. "$R/bench/cuda/lib.sh"
cmf_dev_setup
cd "$S"
cmf_dev_header
B=${BUILD:-$S/build}
if [ -z "${BUILD:-}" ]; then
  (cmf_configure $B && cmake --build $B -j16 --target gpu_bench make_random_llama) > "$OUT/build.log" 2>&1 ||
      { echo "build failed"; tail -30 "$OUT/build.log"; exit 1; }
  echo "== built $(el)"
fi
M=$B/tests/gpu/make_random_llama
for dt in ${DTYPES:-q8}; do
  $M /tmp/nb-8b4-$dt.cmf $dt 4096 4 14336 128256 32 8 128 0 0 16 > /dev/null &&
      $M /tmp/nb-06-$dt.cmf $dt $(geo qwen3-0.6b) 16 > /dev/null || { echo "make_random_llama failed"; exit 1; }
done
echo "== files $(el)"
MET=gpu__time_duration.sum,dram__bytes_read.sum,launch__registers_per_thread,sm__warps_active.avg.pct_of_peak_sustained_active
for dt in ${DTYPES:-q8}; do
  for f in nb-8b4-$dt nb-06-$dt; do
    $B/tests/gpu/gpu_bench /tmp/$f.cmf -p 0 -g 16 -c 128 -r 1 2>&1 | grep -E "copy|RESULT" | head -4 | tee "$OUT/$f-bench.txt"
    copy=$(grep -o 'copy_gbs=[0-9.]*' "$OUT/$f-bench.txt" | head -1 | cut -d= -f2)
    timeout 240 ncu --metrics $MET --csv --cache-control none --clock-control none $B/tests/gpu/gpu_bench \
        /tmp/$f.cmf -p 0 -g 2 -c 128 -r 1 > "$OUT/$f-ncu.csv" 2> "$OUT/$f-ncu.err"
    echo "ncu rc=$? $(el)"
    python3 bench/cuda/ncu_bw.py "$OUT/$f-ncu.csv" "${copy:-4200}" "$f, ctx 128"
  done
  if [ "${STALL:-0}" = 1 ]; then # the product kernels of the 8B file: issue use and stall reasons
    f=nb-8b4-$dt
    timeout 240 ncu --kernel-name regex:k_mv_i8 --metrics "gpu__time_duration.sum,dram__bytes_read.sum,\
smsp__issue_active.avg.pct_of_peak_sustained_active,smsp__inst_executed.sum,sm__warps_active.avg.per_cycle_active,\
regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio" --csv --cache-control none --clock-control none \
        $B/tests/gpu/gpu_bench /tmp/$f.cmf -p 0 -g 2 -c 128 -r 1 > "$OUT/$f-stall.csv" 2> "$OUT/$f-stall.err"
    echo "ncu stall rc=$? $(el)"
    python3 bench/cuda/ncu_stall.py "$OUT/$f-stall.csv" "$f, ctx 128"
  fi
done
# the device tool returns at most 8 files from $OUT: the raw CSVs and logs as one archive
(cd "$OUT" && tar -czf ncu-raw.tgz -- *.csv *.err *-bench.txt build.log 2>/dev/null &&
    rm -f -- *.csv *.err *-bench.txt build.log)
echo "== done $(el)"
