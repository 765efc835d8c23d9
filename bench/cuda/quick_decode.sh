#!/usr/bin/env bash
# A short device call for the decode work of issue 6 (between acceptance runs): build + kernel and parity tests
# (bench/cuda/run_acceptance.sh STAGES="build test"), then decode tok/s of random files shaped like the models in
# $SHAPES at the dtypes in $DTYPES (make_random_llama; no transformers), each with Programmatic Dependent Launch on
# and off (CMF_CUDA_PDL=0) and graphs off, then the kernel bench (bench_cuda) unless BENCH=0.
# Usage (repository root, on the device): DEPS=.cudadev-cuda bash bench/cuda/quick_decode.sh
set -uo pipefail
R=$PWD
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 CUDA_VISIBLE_DEVICES=0
OUT=${OUT:-$R/out-device}
STAGES=${STAGES:-"build test"} OUT=$OUT bash bench/cuda/run_acceptance.sh
B=/tmp/cmfsrc/build-acc
[ -d $B ] || B=$R/build-acc
T0=$(date +%s)
SHAPES=${SHAPES:-"qwen3-0.6b llama-8b"}
DTYPES=${DTYPES:-"q8 bf16"}
geo() { # hidden layers intermediate vocab n_heads n_kv_heads head_dim qk_norm tied (hf_bench.py's SHAPES)
  case $1 in
  qwen3-0.6b) echo 1024 28 3072 151936 16 8 128 1 1 ;;
  qwen3-4b) echo 2560 36 9728 151936 32 8 128 1 1 ;;
  llama-8b) echo 4096 32 14336 128256 32 8 128 0 0 ;;
  esac
}
for shape in $SHAPES; do
  for dt in $DTYPES; do
    f=/tmp/q-$shape-$dt.cmf
    timeout 200 $B/tests/gpu/make_random_llama $f $dt $(geo $shape) 16 > /dev/null || { echo "no $f"; continue; }
    echo "-- $shape $dt [$(( $(date +%s) - T0 )) s]"
    timeout 100 $B/tests/gpu/gpu_bench $f -p ${PP:-0} -g ${GEN:-64} -c ${CTX:-128} -r 2 | sed "s|model=$f|model=$shape-$dt|" | grep -E 'test=|copy'
    CMF_CUDA_PDL=0 timeout 100 $B/tests/gpu/gpu_bench $f -p 0 -g ${GEN:-64} -c 128 -r 2 | sed "s|model=$f|model=$shape-$dt|" |
      grep test= | sed 's/test=tg@128/test=tg@128-nopdl/'
    timeout 100 $B/tests/gpu/gpu_bench $f -p 0 -g ${GEN:-64} -c 128 -r 2 --no-graph | sed "s|model=$f|model=$shape-$dt|" |
      grep test= | sed 's/test=tg@128/test=tg@128-nograph/'
    rm -f $f
  done
done
if [ "${BENCH:-1}" = 1 ]; then
  echo "== bench_cuda [$(( $(date +%s) - T0 )) s]"
  timeout 200 $B/tests/cuda/bench_cuda > "$OUT/bench_cuda.log" 2>&1; echo "bench_cuda rc=$?"
  grep -A12 '== matvec' "$OUT/bench_cuda.log"; grep -A8 '== attention' "$OUT/bench_cuda.log"
fi
echo "== quick done [$(( $(date +%s) - T0 )) s]"
