#!/usr/bin/env bash
# A lean device call for the decode kernels of issue 6 (between acceptance runs): build the needed targets
# (Release; the committed tree when $DEPS/head.tar exists), test_cuda_ops (group $OPS_TESTS), test_gpu_forward (all
# cases), test_cuda_fuse, optionally compute-sanitizer memcheck of test_gpu_forward (MEMCHECK=1, cases llama,qwen3), bench_cuda's
# matvec tables (int8 vs f32 activations), then gpu_bench decode tg@$CTX on random files ($MODELS: shape:dtype)
# with each variant of $VARIANTS (environment settings, ',' between several, "-" = defaults, or gpu_bench arguments
# with ':' for spaces
# such as --cache-type:f32; non-default variants only on the models in $VMODELS when set, tagged into the test name)
# one after the other (after the process WAIT_PID, when set, ends); TEST_ENV="VAR=value ..." is added to the tests' environment;
# XTESTS="test_cuda_stream ..." builds and runs more tests/cuda targets (XMEMCHECK=1: also under memcheck); PP=512 adds prefill; HF="shape ..." times transformers eager on
# those shapes in the same call (bench/cuda/hf_bench.py) and writes table.md (make_table.py) as run_acceptance.sh.
# Usage (repository root, on the device): DEPS=.cudadev-NAME bash bench/cuda/decode_ab.sh
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 CUDA_VISIBLE_DEVICES=0
R=$PWD
DEPS=${DEPS:-.devdeps}
OUT=${OUT:-$R/out-device}
mkdir -p "$OUT"
MODELS=${MODELS:-"qwen3-0.6b:q8 llama-8b:q8"}
VARIANTS=${VARIANTS:-"- CMF_CUDA_I8ACT=0"}
CTX=${CTX:-128}
. "$R/bench/cuda/lib.sh" # el, cmf_dev_setup (S, P, the carried libraries), cmf_configure, geo
cmf_dev_setup
B=$S/build-acc
echo "date: $(date -u '+%Y-%m-%d %H:%M UTC'); card: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1)"
echo "== build $(el)"
cmf_configure $B > "$OUT/build.log" 2>&1 &&
  cmake --build $B -j32 --target test_gpu_forward test_cuda_ops test_cuda_fuse make_random_llama gpu_bench bench_cuda ${XTESTS:-} >> "$OUT/build.log" 2>&1 ||
  { grep -E 'error|Error' "$OUT/build.log" | head -30; exit 1; }
( for m in $MODELS; do
    timeout 200 $B/tests/gpu/make_random_llama /tmp/ab-${m%%:*}-${m##*:}.part ${m##*:} $(geo ${m%%:*}) 24 > /dev/null &&
      mv /tmp/ab-${m%%:*}-${m##*:}.part /tmp/ab-${m%%:*}-${m##*:}.cmf
  done ) &
gen=$!
TESTENV="CMF_SHARED=$R/$DEPS/shared CMF_TMP=/tmp/gft CMF_TESTDATA=$S/tests/data ${TEST_ENV:-}"
mkdir -p /tmp/gft
echo "== test_cuda_ops (${OPS_TESTS:=weights}) $(el)"
env ${TEST_ENV:-} CMF_CUDA_TEST_ONLY=$OPS_TESTS timeout 200 $B/tests/cuda/test_cuda_ops > "$OUT/cuda_ops.log" 2>&1; echo "test_cuda_ops rc=$?"
grep -E 'FAIL|fail' "$OUT/cuda_ops.log" | head -10
echo "== test_cuda_fuse $(el)"
env ${TEST_ENV:-} timeout 120 $B/tests/cuda/test_cuda_fuse > "$OUT/cuda_fuse.log" 2>&1; echo "test_cuda_fuse rc=$?"
grep -E 'FAIL|fail' "$OUT/cuda_fuse.log" | head -10
for t in ${XTESTS:-}; do # extra tests/cuda targets, run with $TEST_ENV (XMEMCHECK=1: under compute-sanitizer memcheck too)
  echo "== $t $(el)"
  env ${TEST_ENV:-} timeout 200 $B/tests/cuda/$t > "$OUT/$t.log" 2>&1; echo "$t rc=$?"
  grep -E 'FAIL|fail' "$OUT/$t.log" | head -10
  if [ "${XMEMCHECK:-0}" = 1 ]; then
    env ${TEST_ENV:-} timeout 300 compute-sanitizer --tool memcheck --print-limit 20 $B/tests/cuda/$t > "$OUT/$t.memcheck.log" 2>&1
    echo "$t memcheck rc=$?"; grep -E 'ERROR SUMMARY|Invalid|FAIL' "$OUT/$t.memcheck.log" | head -10
  fi
done
if [ "${GPUFWD:-1}" = 1 ]; then # GPUFWD=0 skips it (a benchmark-only call)
  echo "== test_gpu_forward $(el)"
  env $TESTENV timeout 300 $B/tests/gpu/test_gpu_forward > "$OUT/gpu_forward.log" 2>&1; echo "test_gpu_forward rc=$?"
  grep -E 'FAIL|fail' "$OUT/gpu_forward.log" | head -10; grep -E 'WORST' "$OUT/gpu_forward.log"
fi
if [ "${MEMCHECK:-0}" = 1 ]; then
  echo "== memcheck test_gpu_forward (${MEMCHECK_CASES:-llama,qwen3}) $(el)"
  env $TESTENV CMF_GPU_TEST_CASES=${MEMCHECK_CASES:-llama,qwen3} timeout 300 compute-sanitizer --tool memcheck --print-limit 20 \
    $B/tests/gpu/test_gpu_forward > "$OUT/memcheck.log" 2>&1
  echo "memcheck rc=$?"; grep -E 'ERROR SUMMARY|Invalid|FAIL' "$OUT/memcheck.log" | head -10
fi
if [ "${KBENCH:-1}" = 1 ]; then
  echo "== bench_cuda matvec $(el)"
  timeout 150 $B/tests/cuda/bench_cuda matvec 2>&1 | tee "$OUT/bench_cuda.txt" | tail -30
fi
for shape in ${HF:-}; do
  echo "== transformers $shape $(el)"
  timeout 150 python3 bench/cuda/hf_bench.py --shape $shape --gen 32 --reps 2 2> "$OUT/hf-$shape.err" |
    tee -a "$OUT/results.txt" | grep RESULT
done
wait $gen
if [ -n "${WAIT_PID:-}" ]; then # a background job of the caller that uses the GPU (WAIT_PID): timings start after it
  while kill -0 $WAIT_PID 2>/dev/null; do sleep 1; done
fi
echo "== gpu_bench tg@$CTX $(el)"
for m in $MODELS; do
  f=/tmp/ab-${m%%:*}-${m##*:}.cmf
  [ -f $f ] || { echo "no $f"; continue; }
  for v in $VARIANTS; do
    case " ${VMODELS:-$MODELS} " in *" $m "*) ;; *) [ "$v" != - ] && continue ;; esac # variants only on $VMODELS
    e=""; a=""; [ "$v" != - ] && e=${v//,/ }
    case $v in --*) e=""; a=${v//:/ } ;; esac # "--cache-type:f32": gpu_bench arguments
    tag=""; [ "$v" != - ] && tag="-$(echo "$v" | tr -c 'A-Za-z0-9\n' '_')" # test=tg@128-CMF_CUDA_I8ACT_2
    env $e timeout 150 $B/tests/gpu/gpu_bench $f -p ${PP:-0} -g ${GEN:-64} -c $CTX -r ${REPS:-2} $a 2>&1 |
      sed "s|model=$f|model=${m%%:*}-${m##*:}|" | grep -E 'test=|copy' | sed "s/\(test=[a-z]*@*[0-9]*\)/\1$tag/" |
      tee -a "$OUT/results.txt"
  done
  rm -f $f
done
[ -n "${HF:-}" ] && python3 bench/cuda/make_table.py "$OUT/results.txt" "$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | head -1)" | tee "$OUT/table.md"
echo "== done $(el)"
