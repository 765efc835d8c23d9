#!/usr/bin/env bash
# Prefill A/B of issue 6 (helper cudapf), one device call: build (Release, the committed tree when $DEPS/head.tar
# exists, through run_acceptance.sh STAGES=build) -> test_prefill_tc, test_cuda_ops (weights, attention),
# test_gpu_forward -> transformers pp512 (bench/cuda/hf_bench.py, same call) -> gpu_bench pp512 on random files
# (make_random_llama) under environment variants, each variant a fresh process:
#   before   CMF_CUDA_ATTN_TC=0 CMF_CUDA_Q8_GEMM=f16 CMF_CUDA_DEQUANT_VEC=0: the code paths of the tree before this work
#            (f32 CUDA-core prefill attention, per-element dequant into f16 row tiles, f16 cuBLAS);
#   new      the defaults (tensor-core attention, int8 GEMM with 3 activation levels for q8, 16-byte dequant);
#   attn0    new but the f32 attention (CMF_CUDA_ATTN_TC=0): the attention's share;
#   lv2      q8 with 2 activation levels (CMF_CUDA_Q8_LEVELS=2);
#   f16      q8 through the dequantized f16 path with the 16-byte dequant (CMF_CUDA_Q8_GEMM=f16);
#   f16cache q8 with the opt-in f16 weight copy (CMF_CUDA_F16_CACHE=1);
# then (NCU=1) Nsight Compute's GPU time per kernel of one 256-token prefill chunk of a 4-layer Llama-8B-shaped q8
# file, before and new (bench/cuda/ncu_summary.py).
# Usage (repository root, on the device): DEPS=.cudadev-cudapf bash bench/cuda/prefill_ab.sh
set -uo pipefail
R=$PWD
DEPS=${DEPS:-.devdeps}
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 CUDA_VISIBLE_DEVICES=0
OUT=${OUT:-$R/out-device}
mkdir -p "$OUT"
STAGES=build OUT=$OUT bash bench/cuda/run_acceptance.sh || exit 1
S=/tmp/cmfsrc
[ -d $S ] || S=$R
B=$S/build-acc
L=$OUT/l # logs, one tarball at the end (the device tool returns at most 8 files)
mkdir -p $L
T0=$(date +%s)
el() { echo "[$(( $(date +%s) - T0 )) s]"; }
cmake --build $B -j32 --target test_prefill_tc > "$L/build2.log" 2>&1 || grep -E 'error' "$L/build2.log" | head
FILES=${FILES:-"qwen3-0.6b:q8 qwen3-0.6b:bf16 qwen3-0.6b:q4tp llama-8b:q8 llama-8b:bf16 llama-8b:q4tp"}
geo() { # hidden layers intermediate vocab n_heads n_kv_heads head_dim qk_norm tied (hf_bench.py's SHAPES)
  case $1 in
  qwen3-0.6b) echo 1024 28 3072 151936 16 8 128 1 1 ;;
  qwen3-4b) echo 2560 36 9728 151936 32 8 128 1 1 ;;
  llama-8b) echo 4096 32 14336 128256 32 8 128 0 0 ;;
  llama-8b-4l) echo 4096 4 14336 128256 32 8 128 0 0 ;;
  esac
}
( [ "${NCU:-1}" = 1 ] && $B/tests/gpu/make_random_llama /tmp/p-ncu.cmf.part q8 $(geo llama-8b-4l) 24 > /dev/null &&
    mv /tmp/p-ncu.cmf.part /tmp/p-ncu.cmf
  for spec in $FILES; do
    timeout 200 $B/tests/gpu/make_random_llama /tmp/p-${spec/:/-}.cmf.part ${spec#*:} $(geo ${spec%:*}) 24 > /dev/null &&
      mv /tmp/p-${spec/:/-}.cmf.part /tmp/p-${spec/:/-}.cmf
  done ) &
gen=$!
TESTENV="CMF_SHARED=$R/$DEPS/shared CMF_TMP=/tmp/gft CMF_TESTDATA=$S/tests/data"
mkdir -p /tmp/gft
echo "== test_prefill_tc $(el)"
timeout 120 $B/tests/cuda/test_prefill_tc > "$L/prefill_tc.log" 2>&1; echo "test_prefill_tc rc=$?"
grep -E 'FAIL|fail|rel err' "$L/prefill_tc.log" | head -40
echo "== test_cuda_ops weights,attention $(el)"
CMF_CUDA_TEST_ONLY=weights,attention timeout 150 $B/tests/cuda/test_cuda_ops > "$L/cuda_ops.log" 2>&1
echo "test_cuda_ops rc=$?"; grep -E 'FAIL|fail' "$L/cuda_ops.log" | head -10
echo "== test_gpu_forward $(el)"
env $TESTENV timeout 200 $B/tests/gpu/test_gpu_forward > "$L/gpu_forward.log" 2>&1
echo "test_gpu_forward rc=$?"; grep -E 'FAIL|fail' "$L/gpu_forward.log" | head -10; grep -E 'WORST' "$L/gpu_forward.log" | head -16
echo "== transformers pp512 $(el)"
for shape in qwen3-0.6b llama-8b; do
  timeout 150 python3 bench/cuda/hf_bench.py --shape $shape --ctx "" --reps 5 2> "$L/hf-$shape.err" |
    tee -a "$OUT/results.txt" | grep test=
done
wait $gen
echo "== gpu_bench pp512 $(el)"
v_before="CMF_CUDA_ATTN_TC=0 CMF_CUDA_Q8_GEMM=f16 CMF_CUDA_DEQUANT_VEC=0"
for spec in $FILES; do
  f=/tmp/p-${spec/:/-}.cmf
  [ -f $f ] || { echo "no $f"; continue; }
  vars="before new attn0"
  [ ${spec#*:} = q8 ] && vars="before new attn0 lv2 f16 f16cache"
  for v in $vars; do
    case $v in
    before) e=$v_before ;; new) e="CMF_X=1" ;; attn0) e="CMF_CUDA_ATTN_TC=0" ;; lv2) e="CMF_CUDA_Q8_LEVELS=2" ;;
    f16) e="CMF_CUDA_Q8_GEMM=f16" ;; f16cache) e="CMF_CUDA_F16_CACHE=1" ;;
    esac
    env $e timeout 100 $B/tests/gpu/gpu_bench $f -p 512 -c "" -r ${REPS:-3} 2>&1 | grep -E 'test=|rror' |
      sed "s|model=$f|model=${spec/:/-} variant=$v|" | tee -a "$OUT/results.txt"
  done
  rm -f $f
done
if [ "${NCU:-1}" = 1 ] && [ -f /tmp/p-ncu.cmf ]; then
  for v in before new; do
    echo "== ncu: GPU time per kernel, 4-layer llama-8b q8, prefill 256 tokens x 2 (warm-up + 1), $v $(el)"
    e="CMF_X=1"; [ $v = before ] && e=$v_before
    env $e timeout 60 ncu --metrics gpu__time_duration.sum --csv $B/tests/gpu/gpu_bench /tmp/p-ncu.cmf -p 256 -c "" -r 1 \
      > "$L/ncu-$v.csv" 2> "$L/ncu-$v.err"
    echo "ncu rc=$?"; python3 bench/cuda/ncu_summary.py "$L/ncu-$v.csv" | head -24 | tee "$L/ncu-$v.txt"
    gzip -f "$L/ncu-$v.csv"
  done
fi
echo "== prefill A/B done $(el)"
tar -czf "$OUT/logs-pf.tgz" -C "$OUT" l && rm -rf "$L"
