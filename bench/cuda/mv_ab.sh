#!/usr/bin/env bash
# One device call for the decode products (issue 6, helper cudamv): build (Release; the committed tree when
# $DEPS/head.tar exists), the kernel tests of the streaming int8-activation products (test_cuda_stream; test_cuda_fuse
# and test_cuda_ops' weights group with CMF_CUDA_I8_STREAM=$TEST_STREAM; test_gpu_forward too when FWD=1), gpu_bench
# decode tg@$CTX on random files ($MODELS: shape:dtype) with each variant of $VARIANTS ("-" = defaults, else
# environment settings with ',' between several; the variants of one model one after the other), then bench_cuda's
# int8-activation tables (KBENCH=1, KBENCH_MODE=i8 | matvec: per shape row-group vs streaming kernel, one Llama-8B
# layer's products), all in the same call. OPS=0 / FUSE=0 skip test_cuda_ops / test_cuda_fuse, TARGETS replaces the
# build's target list, MODELS="" skips the decode runs.
# Usage (repository root, on the device): DEPS=.cudadev-NAME OUT=... bash bench/cuda/mv_ab.sh
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 CUDA_VISIBLE_DEVICES=0
R=$PWD
DEPS=${DEPS:-.devdeps}
OUT=${OUT:-$R/out-device}
mkdir -p "$OUT"
MODELS=${MODELS-"llama-8b:q8 llama-8b:q4tp"}
VARIANTS=${VARIANTS:-"- CMF_CUDA_I8_STREAM=1 CMF_CUDA_I8_STREAM=2 -"}
CTX=${CTX:-128}
TEST_STREAM=${TEST_STREAM:-1}
. "$R/bench/cuda/lib.sh" # el, cmf_dev_setup (S, P, the carried libraries), cmf_configure, geo
cmf_dev_setup
B=$S/build-mv
echo "date: $(date -u '+%Y-%m-%d %H:%M UTC'); card: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1); head: $(cat $DEPS/head.rev 2>/dev/null)"
echo "== build $(el)"
T=${TARGETS:-"test_cuda_stream test_cuda_fuse test_cuda_ops bench_cuda make_random_llama gpu_bench"}
[ "${FWD:-0}" = 1 ] && T="$T test_gpu_forward"
cmf_configure $B > "$OUT/build.log" 2>&1 &&
  cmake --build $B -j32 --target $T >> "$OUT/build.log" 2>&1 ||
  { grep -E 'error|Error' "$OUT/build.log" | head -30; exit 1; }
( for m in $MODELS; do
    timeout 200 $B/tests/gpu/make_random_llama /tmp/ab-${m%%:*}-${m##*:}.part ${m##*:} $(geo ${m%%:*}) 24 > /dev/null &&
      mv /tmp/ab-${m%%:*}-${m##*:}.part /tmp/ab-${m%%:*}-${m##*:}.cmf
  done ) &
gen=$!
echo "== test_cuda_stream $(el)"
timeout 120 $B/tests/cuda/test_cuda_stream > "$OUT/cuda_stream.log" 2>&1; echo "test_cuda_stream rc=$?"
grep -E 'FAIL|fail' "$OUT/cuda_stream.log" | head -10
if [ "${FUSE:-1}" = 1 ]; then
  echo "== test_cuda_fuse, CMF_CUDA_I8_STREAM=$TEST_STREAM $(el)"
  CMF_CUDA_I8_STREAM=$TEST_STREAM timeout 120 $B/tests/cuda/test_cuda_fuse > "$OUT/cuda_fuse.log" 2>&1; echo "test_cuda_fuse rc=$?"
  grep -E 'FAIL|fail' "$OUT/cuda_fuse.log" | head -10
fi
if [ "${OPS:-1}" = 1 ]; then
  echo "== test_cuda_ops weights, CMF_CUDA_I8_STREAM=$TEST_STREAM $(el)"
  CMF_CUDA_I8_STREAM=$TEST_STREAM CMF_CUDA_TEST_ONLY=weights timeout 200 $B/tests/cuda/test_cuda_ops > "$OUT/cuda_ops.log" 2>&1
  echo "test_cuda_ops rc=$?"; grep -E 'FAIL|fail' "$OUT/cuda_ops.log" | head -10
fi
if [ "${FWD:-0}" = 1 ]; then
  echo "== test_gpu_forward, CMF_CUDA_I8_STREAM=$TEST_STREAM $(el)"
  mkdir -p /tmp/gft
  env CMF_SHARED=$R/$DEPS/shared CMF_TMP=/tmp/gft CMF_TESTDATA=$S/tests/data CMF_CUDA_I8_STREAM=$TEST_STREAM \
    timeout 300 $B/tests/gpu/test_gpu_forward > "$OUT/gpu_forward.log" 2>&1; echo "test_gpu_forward rc=$?"
  grep -E 'FAIL|fail' "$OUT/gpu_forward.log" | head -10; grep -E 'WORST' "$OUT/gpu_forward.log"
fi
wait $gen
echo "== gpu_bench tg@$CTX $(el)"
for m in $MODELS; do
  f=/tmp/ab-${m%%:*}-${m##*:}.cmf
  [ -f $f ] || { echo "no $f"; continue; }
  for v in $VARIANTS; do
    e=""; [ "$v" != - ] && e=${v//,/ }
    tag=""; [ "$v" != - ] && tag="-$(echo "$v" | tr -c 'A-Za-z0-9\n' '_')"
    env $e timeout 150 $B/tests/gpu/gpu_bench $f -p ${PP:-0} -g ${GEN:-64} -c $CTX -r ${REPS:-2} 2>&1 |
      sed "s|model=$f|model=${m%%:*}-${m##*:}|" | grep -E 'test=|copy' | sed "s/\(test=[a-z]*@*[0-9]*\)/\1$tag/" |
      tee -a "$OUT/results.txt"
  done
  rm -f $f
done
if [ "${KBENCH:-1}" = 1 ]; then
  echo "== bench_cuda ${KBENCH_MODE:-i8} $(el)"
  timeout 240 $B/tests/cuda/bench_cuda ${KBENCH_MODE:-i8} > "$OUT/bench_cuda.txt" 2>&1; echo "bench_cuda rc=$?"
fi
echo "== done $(el)"
[ "${KBENCH:-1}" = 1 ] && sed -n '/int8 activations (dp4a)/,$p' "$OUT/bench_cuda.txt" | cut -c1-250
