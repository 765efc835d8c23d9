#!/usr/bin/env bash
# A short device call for the persistent decode kernel (src/backend/cuda/persist.cu): build (Release) the test and
# gpu_bench, run tests/gpu/test_gpu_persist (bit for bit against the graph path), then same-call A/B rows of decode
# tok/s (gpu_bench tg@CTX) on make_random_llama files: each file under each setting of $AB, in $ROUNDS rounds
# (alternating settings, each a fresh process). Output: stdout and $OUT/persist_ab.txt.
# Environment: DEPS (the carried folder: .debs, shared/data, optional head.tar = `git archive HEAD`, built instead of
# the working tree), SHAPES ("qwen3-0.6b"; qwen3-4b, llama-8b also known), AB ("- CMF_CUDA_PERSIST=1"; '-' = the
# defaults, ',' between variables of one setting), ROUNDS (2), CTX (128), GEN (64), TESTS ("test_gpu_persist"),
# PROF (settings for CMF_CUDA_PERSIST_PROF=1 runs, e.g. "CMF_CUDA_PERSIST_KVPF=1 CMF_CUDA_PERSIST_KVPF=0"), NCU (0; 1: Nsight Compute kernel times of 3 decode steps of the first shape with CMF_CUDA_PERSIST=1, when ncu exists).
# Usage (repository root, on the device): DEPS=.cudadev-NAME bash bench/cuda/persist_ab.sh
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 CUDA_VISIBLE_DEVICES=0
cd "$(dirname "$0")/../.."
R=$PWD
DEPS=${DEPS:-.devdeps}
OUT=${OUT:-$R/out-device}
mkdir -p "$OUT"
LOG=$OUT/persist_ab.txt
SHAPES=${SHAPES:-"qwen3-0.6b"}
AB=${AB:-"- CMF_CUDA_PERSIST=1"}
. "$R/bench/cuda/lib.sh" # el, cmf_dev_setup (S: the tree to build, P: libraries), cmf_configure, geo
cmf_dev_setup
cd "$S"
B=$PWD/build-pab
{
  echo "date: $(date -u '+%Y-%m-%d %H:%M UTC'); card: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1)"
  echo "== build $(el)"
  cmf_configure $B > /tmp/pab-build.log 2>&1 &&
    cmake --build $B -j32 --target ${TESTS:-test_gpu_persist} make_random_llama gpu_bench >> /tmp/pab-build.log 2>&1
  brc=$?
  echo "build rc=$brc $(el)"
  if [ $brc -ne 0 ]; then grep -E 'error|Error' /tmp/pab-build.log | head -30; exit 1; fi
  first=$(echo $SHAPES | cut -d' ' -f1)
  ( for shape in $SHAPES; do # the random files, written while the tests run
      nice -n 19 timeout 300 $B/tests/gpu/make_random_llama /tmp/$shape-q8.part q8 $(geo $shape) 12 > /dev/null &&
        mv /tmp/$shape-q8.part /tmp/$shape-q8.cmf
    done ) &
  gen=$!
  mkdir -p /tmp/pab
  for t in ${TESTS:-test_gpu_persist}; do
    exe=$(find $B/tests -name "$t" -type f | head -1)
    echo "== $t $(el)"
    env CMF_SHARED=$R/$DEPS/shared CMF_TMP=/tmp/pab CMF_TESTDATA=$PWD/tests/data timeout 200 $exe 2>&1 | tail -12
    echo "$t rc=${PIPESTATUS[0]}"
  done
  wait $gen
  echo "== A/B tg@${CTX:-128} $(el)"
  for shape in $SHAPES; do
    f=/tmp/$shape-q8.cmf
    [ -f $f ] || { echo "no $f"; continue; }
    for r in $(seq 1 ${ROUNDS:-2}); do
      for v in $AB; do
        vv=${v//,/ }; [ "$v" = - ] && vv=""
        env $vv timeout 120 $B/tests/gpu/gpu_bench $f -p 0 -g ${GEN:-64} -c ${CTX:-128} -r 2 2>&1 |
          grep -E 'test=|persist_' | sed "s|model=$f|model=$shape-q8 setting=$v round=$r|"
      done
    done
  done
  if [ -n "${PROF:-}" ]; then # block 0's time per stage (CMF_CUDA_PERSIST_PROF=1), one run per setting of PROF
    for v in $PROF; do
      env ${v//,/ } CMF_CUDA_PERSIST=1 CMF_CUDA_PERSIST_PROF=1 timeout 120 $B/tests/gpu/gpu_bench /tmp/$first-q8.cmf -p 0 \
        -g 16 -c ${CTX:-128} -r 1 2>&1 | grep persist_us | sed "s|model=/tmp/$first-q8.cmf|model=$first-q8 setting=$v|"
    done
  fi
  if [ "${NCU:-0}" = 1 ] && command -v ncu > /dev/null; then
    echo "== ncu (3 decode steps, $first, CMF_CUDA_PERSIST=1) $(el)"
    CMF_CUDA_PERSIST=1 timeout 120 ncu --metrics gpu__time_duration.sum -k regex:k_persist --launch-skip 4 --launch-count 3 \
      $B/tests/gpu/gpu_bench /tmp/$first-q8.cmf -p 0 -g 4 -c 128 -r 1 2>&1 | grep -E 'k_persist|gpu__time_duration' | head -8
  fi
  echo "== done $(el)"
} 2>&1 | tee "$LOG"
