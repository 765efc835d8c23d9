#!/usr/bin/env bash
# A short device call for the decode work of issue 6 (between full acceptance runs), one call:
#  1. build (bench/cuda/run_acceptance.sh STAGES=build: Release, the committed tree when $DEPS/head.tar exists);
#  2. while the bench files are written in the background (make_random_llama, random weights shaped like $SHAPES at
#     $DTYPES): test_cuda_ops (groups $OPS_TESTS), test_gpu_forward, and test_gpu_forward with CMF_CUDA_FUSE_NORM=1 and =0;
#  3. transformers eager on the first shape (bench/cuda/hf_bench.py, same call), then gpu_bench on every file:
#     pp512, tg@128, tg@4096; on the first shape's q8 also tg@128 with CMF_CUDA_PDL=0, CMF_CUDA_FUSE_NORM=1 and
#     without graphs; on quantized files also pp512 with CMF_CUDA_F16_CACHE=1;
#  4. NCU=1: Nsight Compute's per-kernel GPU time of a few decode steps of the first shape's q8 file (ncu_summary.py).
# Usage (repository root, on the device): DEPS=.cudadev-cuda bash bench/cuda/quick_decode.sh
set -uo pipefail
R=$PWD
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 CUDA_VISIBLE_DEVICES=0
OUT=${OUT:-$R/out-device}
mkdir -p "$OUT"
STAGES=build OUT=$OUT bash bench/cuda/run_acceptance.sh || exit 1
S=/tmp/cmfsrc
[ -d $S ] || S=$R
B=$S/build-acc
. "$R/bench/cuda/lib.sh" # el, geo
SHAPES=${SHAPES:-"qwen3-0.6b qwen3-4b llama-8b"}
DTYPES=${DTYPES:-"q8"}
FIRST_DTYPES=${FIRST_DTYPES:-"q8 bf16 q4tp"} # dtypes of the first shape
first=${SHAPES%% *}
files=""
( for shape in $SHAPES; do
    dts=$DTYPES; [ $shape = $first ] && dts=$FIRST_DTYPES
    for dt in $dts; do
      timeout 200 $B/tests/gpu/make_random_llama /tmp/q-$shape-$dt.cmf.part $dt $(geo $shape) 24 > /dev/null &&
        mv /tmp/q-$shape-$dt.cmf.part /tmp/q-$shape-$dt.cmf
    done
  done ) &
gen=$!
TESTENV="CMF_SHARED=$R/$DEPS/shared CMF_TMP=/tmp/gft CMF_TESTDATA=$S/tests/data"
mkdir -p /tmp/gft
echo "== test_cuda_ops (${OPS_TESTS:=weights,elementwise,attention}) $(el)"
CMF_CUDA_TEST_ONLY=$OPS_TESTS timeout 150 $B/tests/cuda/test_cuda_ops > "$OUT/cuda_ops.log" 2>&1; echo "test_cuda_ops rc=$?"
grep -E 'FAIL|fail' "$OUT/cuda_ops.log" | head -10
for fz in 1 0; do
  echo "== test_gpu_forward CMF_CUDA_FUSE_NORM=$fz $(el)"
  env $TESTENV CMF_CUDA_FUSE_NORM=$fz timeout 120 $B/tests/gpu/test_gpu_forward > "$OUT/gpu_forward_fuse$fz.log" 2>&1
  echo "test_gpu_forward rc=$?"; grep -E 'FAIL|fail' "$OUT/gpu_forward_fuse$fz.log" | head -10
  [ $fz = 1 ] && grep -E 'WORST|identical|graph' "$OUT/gpu_forward_fuse$fz.log" | head -16
done
if [ "${HF:-1}" = 1 ]; then
  echo "== transformers $first $(el)"
  timeout 120 python3 bench/cuda/hf_bench.py --shape $first --gen 32 --reps 2 2> "$OUT/hf.err" | tee -a "$OUT/results.txt" | grep RESULT
fi
wait $gen
echo "== gpu_bench $(el)"
for shape in $SHAPES; do
  dts=$DTYPES; [ $shape = $first ] && dts=$FIRST_DTYPES
  for dt in $dts; do
    f=/tmp/q-$shape-$dt.cmf
    [ -f $f ] || { echo "no $f"; continue; }
    timeout 100 $B/tests/gpu/gpu_bench $f -p 512 -g ${GEN:-64} -c 128,4096 -r 2 | sed "s|model=$f|model=$shape-$dt|" |
      tee -a "$OUT/results.txt" | grep -E 'test=|copy|graphs_'
    if [ $dt != bf16 ]; then # prefill with the opt-in f16 weight cache
      CMF_CUDA_F16_CACHE=1 timeout 60 $B/tests/gpu/gpu_bench $f -p 512 -c "" -r 2 | sed "s|model=$f|model=$shape-$dt|" |
        grep test= | sed "s/test=pp512/test=pp512-f16cache/" | tee -a "$OUT/results.txt"
    fi
    if [ $shape = $first ] && [ $dt = q8 ]; then
      for v in CMF_CUDA_PDL=0:nopdl CMF_CUDA_FUSE_NORM=1:fusenorm CMF_CUDA_GRAPH=0:nograph; do
        env ${v%%:*} timeout 60 $B/tests/gpu/gpu_bench $f -p 0 -g ${GEN:-64} -c 128 -r 2 | sed "s|model=$f|model=$shape-$dt|" |
          grep test= | sed "s/test=tg@128/test=tg@128-${v##*:}/" | tee -a "$OUT/results.txt"
      done
    else
      rm -f $f
    fi
  done
done
if [ "${NCU:-1}" = 1 ] && [ -f /tmp/q-$first-q8.cmf ]; then
  echo "== ncu: per-kernel GPU time of decode steps ($first q8, ctx 0..5) $(el)"
  timeout ${NCU_S:-45} ncu --metrics gpu__time_duration.sum --csv --graph-profiling node --launch-count ${NCU_N:-600} \
    $B/tests/gpu/gpu_bench /tmp/q-$first-q8.cmf -p 0 -g 1 -c 0 -r 1 > "$OUT/ncu.csv" 2> "$OUT/ncu.err"
  echo "ncu rc=$?"; python3 bench/cuda/ncu_summary.py "$OUT/ncu.csv" | tee "$OUT/ncu_summary.txt"
fi
echo "== quick done $(el)"
