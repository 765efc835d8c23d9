#!/usr/bin/env bash
# build_ab.sh — one device call comparing two builds of the same tree whose CUDA code differs by a compile-time
# switch (e.g. CMF_CUDA_PDL_EARLY, common.cuh), where an environment variable cannot select it:
#  1. builds A (default) and B (CMAKE_CUDA_FLAGS=$B_FLAGS) at the same time: gpu_bench, make_random_llama and the
#     decode-step tests;
#  2. runs B's tests (test_gpu_forward: GPU vs CPU and graph replay == eager bit for bit; test_gpu_persist,
#     test_cuda_fuse, test_cuda_stream) while the random files of $FILES are written;
#  3. gpu_bench decode rows (tg at $CTX) of every file, A and B alternating, $ROUNDS rounds, each a fresh process.
# Environment: DEPS (the carried folder, as run_acceptance.sh), B_FLAGS (default -DCMF_CUDA_PDL_EARLY=1), FILES
# (shape:dtype list, default "qwen3-0.6b:q8 qwen3-0.6b:bf16 qwen3-4b:q8 llama-8b:q8"), CTX (128,4096), GEN (64),
# ROUNDS (2), TESTS (1: run B's tests, and test_cuda_ops' groups $OPS_TESTS, default attn_decode), A_ENVS (settings,
# each "VAR=value[,VAR=value]", with which build A's rows are also run, tagged build=a+setting), B_ENVS (the same for
# build B). Output: $OUT/results.txt (one line per run: build, file, gpu_bench's test
# lines) and the logs. With $DEPS/a.tar (a `git archive` of another commit), A is that tree built without B_FLAGS
# and B this tree with them (B_FLAGS may be empty): a before/after of a change in one call.
# Usage (repository root, on the device): DEPS=.cudadev-acc bash bench/cuda/build_ab.sh
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 CUDA_VISIBLE_DEVICES=0
cd "$(dirname "$0")/../.."
R=$PWD
DEPS=${DEPS:-.devdeps}
OUT=${OUT:-$R/out-device}
mkdir -p "$OUT"
B_FLAGS=${B_FLAGS-"-DCMF_CUDA_PDL_EARLY=1"}
FILES=${FILES:-"qwen3-0.6b:q8 qwen3-0.6b:bf16 qwen3-4b:q8 llama-8b:q8"}
CTX=${CTX:-128,4096}
GEN=${GEN:-64}
ROUNDS=${ROUNDS:-2}
. "$R/bench/cuda/lib.sh" # el, cmf_dev_setup, cmf_configure, geo
cmf_dev_setup
cd "$S"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
echo "date: $(date -u '+%Y-%m-%d %H:%M UTC'); B: CMAKE_CUDA_FLAGS=$B_FLAGS"
T="gpu_bench make_random_llama test_gpu_forward test_gpu_persist test_cuda_fuse test_cuda_stream test_cuda_ops"
echo "== build A and B $(el)"
SA=$S # A's tree: $DEPS/a.tar (e.g. `git archive HEAD`, the tree before a change) when it exists
if [ -f "$R/$DEPS/a.tar" ]; then SA=/tmp/cmfsrc-a && rm -rf $SA $S/build-a && mkdir -p $SA && tar -xf "$R/$DEPS/a.tar" -C $SA; fi
(cmf_configure $S/build-a $SA && cmake --build $S/build-a -j8 --target $T) > "$OUT/build-a.log" 2>&1 &
ba=$!
(cmf_configure $S/build-b && cmake $S/build-b -DCMAKE_CUDA_FLAGS="$B_FLAGS" && cmake --build $S/build-b -j8 --target $T) \
    > "$OUT/build-b.log" 2>&1 || { echo "build B failed"; tail -30 "$OUT/build-b.log"; exit 1; }
wait $ba || { echo "build A failed"; tail -30 "$OUT/build-a.log"; exit 1; }
echo "== built $(el)"
( for fd in $FILES; do
    shape=${fd%%:*} dt=${fd##*:}
    timeout 300 $S/build-a/tests/gpu/make_random_llama /tmp/ab-$shape-$dt.part $dt $(geo $shape) 12 > /dev/null &&
      mv /tmp/ab-$shape-$dt.part /tmp/ab-$shape-$dt.cmf
  done ) &
gen=$!
if [ "${TESTS:-1}" = 1 ]; then
  mkdir -p /tmp/abt
  TESTENV="CMF_SHARED=$R/$DEPS/shared CMF_TMP=/tmp/abt CMF_TESTDATA=$S/tests/data"
  for t in gpu/test_gpu_forward gpu/test_gpu_persist cuda/test_cuda_fuse cuda/test_cuda_stream; do
    env $TESTENV timeout 200 $S/build-b/tests/$t > "$OUT/b-$(basename $t).log" 2>&1
    echo "B $(basename $t) rc=$? $(el)"
    grep -E 'FAIL|fail' "$OUT/b-$(basename $t).log" | head -5
  done
  env CMF_CUDA_TEST_ONLY=${OPS_TESTS:-attn_decode} timeout 200 $S/build-b/tests/cuda/test_cuda_ops > "$OUT/b-test_cuda_ops.log" 2>&1
  echo "B test_cuda_ops (${OPS_TESTS:-attn_decode}) rc=$? $(el)"
  grep -E 'FAIL|fail' "$OUT/b-test_cuda_ops.log" | head -5
  grep -E 'WORST|identical' "$OUT/b-test_gpu_forward.log" | head -8
fi
wait $gen
echo "== gpu_bench $(el)"
for r in $(seq $ROUNDS); do
  for fd in $FILES; do
    shape=${fd%%:*} dt=${fd##*:}
    f=/tmp/ab-$shape-$dt.cmf
    [ -f $f ] || { echo "no $f"; continue; }
    for b in a b ${A_ENVS:-} $(for e in ${B_ENVS:-}; do echo b:$e; done); do
      case $b in a | b) bd=$b e= ;; b:*) bd=b e=${b#b:} e=${e//,/ } ;; *) bd=a e=${b//,/ } ;; esac
      env $e timeout 120 $S/build-$bd/tests/gpu/gpu_bench $f -p 0 -g $GEN -c $CTX -r 2 2>&1 | grep test= |
        sed "s|^|build=$bd${e:++${b#b:}} round=$r file=$shape-$dt |" | tee -a "$OUT/results.txt"
    done
  done
done
echo "== done $(el)"
