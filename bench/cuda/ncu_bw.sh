#!/usr/bin/env bash
# ncu_bw.sh — one device call: where a decode step's time goes, kernel by kernel, against the bytes each kernel
# reads. Builds gpu_bench and make_random_llama, writes random q8 files (a 4-layer Llama-3.1-8B-shaped one and the
# whole Qwen3-0.6B shape), measures the copy bandwidth (gpu_bench's copy line), then runs each under Nsight Compute
# (`ncu --metrics gpu__time_duration.sum,dram__bytes_read.sum,launch__registers_per_thread,
# sm__warps_active.avg.pct_of_peak_sustained_active --cache-control none --clock-control none`, 2 decode steps at
# ctx 128) and prints, for the last step, every kernel in launch order with its time, DRAM bytes, GB/s and the
# share of the copy bandwidth (bench/cuda/ncu_bw.py). ncu serializes kernels (no PDL overlap) and adds ~2 us to each.
# Usage (repository root, on the device): DEPS=.devdeps bash bench/cuda/ncu_bw.sh; output also in $OUT.
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
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
echo "date: $(date -u '+%Y-%m-%d %H:%M UTC'); tree: $(git -C "$R" log --oneline -1 2>/dev/null | cut -c1-60)"
(cmf_configure $S/build && cmake --build $S/build -j16 --target gpu_bench make_random_llama) > "$OUT/build.log" 2>&1 ||
    { echo "build failed"; tail -30 "$OUT/build.log"; exit 1; }
echo "== built $(el)"
M=$S/build/tests/gpu/make_random_llama
$M /tmp/nb-8b4.cmf q8 4096 4 14336 128256 32 8 128 0 0 16 > /dev/null &&
    $M /tmp/nb-06.cmf q8 $(geo qwen3-0.6b) 16 > /dev/null || { echo "make_random_llama failed"; exit 1; }
echo "== files $(el)"
MET=gpu__time_duration.sum,dram__bytes_read.sum,launch__registers_per_thread,sm__warps_active.avg.pct_of_peak_sustained_active
for f in nb-8b4 nb-06; do
  $S/build/tests/gpu/gpu_bench /tmp/$f.cmf -p 0 -g 16 -c 128 -r 1 2>&1 | grep -E "copy|RESULT" | head -4 | tee "$OUT/$f-bench.txt"
  copy=$(grep -o 'copy_gbs=[0-9.]*' "$OUT/$f-bench.txt" | head -1 | cut -d= -f2)
  timeout 240 ncu --metrics $MET --csv --cache-control none --clock-control none $S/build/tests/gpu/gpu_bench \
      /tmp/$f.cmf -p 0 -g 2 -c 128 -r 1 > "$OUT/$f-ncu.csv" 2> "$OUT/$f-ncu.err"
  echo "ncu rc=$? $(el)"
  python3 bench/cuda/ncu_bw.py "$OUT/$f-ncu.csv" "${copy:-4200}" "$f q8, ctx 128"
done
echo "== done $(el)"
