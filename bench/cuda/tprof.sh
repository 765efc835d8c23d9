#!/usr/bin/env bash
# tprof.sh — one device call: where a decode step's time goes inside and between its kernels, from the kernels' own
# %globaltimer stamps in a real CUDA-graph replay with PDL (src/backend/cuda/tprof.cuh; unlike Nsight Compute, which
# runs kernels one at a time). Builds gpu_bench with -DCMF_CUDA_TPROF=1, writes random make_random_llama files (a
# 4-layer Llama-3.1-8B-shaped one per dtype of DTYPES and the whole Qwen3-0.6B shape in q8) and runs gpu_bench with
# CMF_TPROF=1 at CTX (default 128): its tok/s (of the instrumented build) and the TPROF table of one step
# (bench/cuda/tprof_sum.c). ENVS: extra runs of each file with these comma-separated settings (space-separated
# list), e.g. ENVS="CMF_CUDA_I8S_LIN=2".
# Usage (repository root, on the device): DEPS=.devdeps bash bench/cuda/tprof.sh; output also in $OUT/tprof.txt.
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
exec > >(tee "$OUT/tprof.txt") 2>&1
cmf_dev_header
B=${BUILD:-$S/build-tprof}
if [ -z "${BUILD:-}" ]; then
  (CUDAFLAGS=-DCMF_CUDA_TPROF=1 cmf_configure $B && cmake --build $B -j16 --target gpu_bench make_random_llama) \
      > "$OUT/build.log" 2>&1 || { echo "build failed"; tail -30 "$OUT/build.log"; exit 1; }
  echo "== built $(el)"
fi
M=$B/tests/gpu/make_random_llama
files=""
for dt in ${DTYPES:-q8 q4tp}; do
  $M /tmp/tp-8b4-$dt.cmf $dt 4096 4 14336 128256 32 8 128 0 0 16 > /dev/null || { echo "make_random_llama failed"; exit 1; }
  files="$files tp-8b4-$dt"
done
$M /tmp/tp-06-q8.cmf q8 $(geo qwen3-0.6b) 16 > /dev/null || { echo "make_random_llama failed"; exit 1; }
files="$files tp-06-q8"
echo "== files $(el)"
for f in $files; do
  for e in - ${ENVS:-}; do
    ev=""; [ "$e" = - ] || ev=$(echo "$e" | tr , ' ')
    echo "== $f ${ev:-default}"
    env $ev CMF_TPROF=1 $B/tests/gpu/gpu_bench /tmp/$f.cmf -p 0 -g 64 -c ${CTX:-128} -r 2 2>&1 |
        grep -E "RESULT|TPROF|rror"
  done
done
echo "== done $(el)"
