#!/usr/bin/env bash
# One device call for decode attention and the decode step's time split (issue 6, helper cuda8): build (Release; the
# committed tree when $DEPS/head.tar exists), the attention checks (test_cuda_ops' attention group, test_cuda_fuse,
# and test_gpu_forward / test_gpu_persist / test_cuda_stream when FWD=1) while the random files are written,
# bench_cuda's attention table (every tile / prefetch / merge variant at contexts 128 .. 32768; again under each
# setting of $ATTN_ENV), Nsight Compute's kernel
# times of decode steps (NCU=1: all kernels of 2 steps of a 4-layer Llama-8B-shaped q8 file at ctx 128, and the
# attention kernel alone at ctx 4096 for each setting of $NCU_AB; bench/cuda/ncu_steps.py), then gpu_bench decode
# tg@$CTX (default "128,4096") on random files ($MODELS: shape:dtype) with each variant of $VARIANTS ("-" =
# defaults, else environment settings with ',' between several; the files not in $VMODELS, when set, get the first
# two variants only), one fresh process per variant, one after the other.
# Usage (repository root, on the device): DEPS=.cudadev-NAME OUT=... bash bench/cuda/attn_ab.sh
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 CUDA_VISIBLE_DEVICES=0
R=$PWD
DEPS=${DEPS:-.devdeps}
OUT=${OUT:-$R/out-device}
mkdir -p "$OUT"
MODELS=${MODELS-"llama-8b:q8 qwen3-0.6b:q8"}
VARIANTS=${VARIANTS:-"- CMF_CUDA_ATTN_TILE=4"}
NCU_AB=${NCU_AB:-"CMF_CUDA_ATTN_TILE=1 CMF_CUDA_ATTN_TILE=4"}
CTX=${CTX:-128,4096}
. "$R/bench/cuda/lib.sh" # el, cmf_dev_setup (S, P, the carried libraries), cmf_configure, geo
cmf_dev_setup
B=$S/build-attn
echo "date: $(date -u '+%Y-%m-%d %H:%M UTC'); card: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1); head: $(cat $DEPS/head.rev 2>/dev/null)"
echo "== build $(el)"
T="test_cuda_ops test_cuda_fuse bench_cuda make_random_llama gpu_bench"
[ "${FWD:-0}" = 1 ] && T="$T test_gpu_forward test_gpu_persist test_cuda_stream"
cmf_configure $B > "$OUT/build.log" 2>&1 &&
  cmake --build $B -j32 --target $T >> "$OUT/build.log" 2>&1 ||
  { grep -E 'error|Error' "$OUT/build.log" | head -30; exit 1; }
echo "build done $(el)"
mk() { # shape:dtype [layers]: the random file /tmp/ab-SHAPE-DTYPE.cmf
  local g; g=($(geo ${1%%:*})); [ -n "${2:-}" ] && g[1]=$2
  timeout 240 $B/tests/gpu/make_random_llama /tmp/ab-$3.part ${1##*:} ${g[@]} 24 > /dev/null && mv /tmp/ab-$3.part /tmp/ab-$3.cmf
}
[ "${NCU:-1}" = 1 ] && { mk llama-8b:q8 4 l4 & }
for m in $MODELS; do mk $m "" ${m%%:*}-${m##*:} & done
echo "== tests $(el)"
mkdir -p /tmp/gft
if [ "${FWD:-0}" = 1 ]; then # the model-level parity tests, at the same time as the kernel tests
  TE="CMF_SHARED=$R/$DEPS/shared CMF_TMP=/tmp/gft CMF_TESTDATA=$S/tests/data"
  ( env $TE timeout 300 $B/tests/gpu/test_gpu_forward > "$OUT/fwd.log" 2>&1; echo "test_gpu_forward rc=$?" ) &
  ( env $TE timeout 200 $B/tests/gpu/test_gpu_persist > "$OUT/persist.log" 2>&1; echo "test_gpu_persist rc=$?" ) &
fi
CMF_CUDA_TEST_ONLY=attention timeout 200 $B/tests/cuda/test_cuda_ops > "$OUT/tests.log" 2>&1; echo "test_cuda_ops (attention) rc=$?"
timeout 200 $B/tests/cuda/test_cuda_fuse >> "$OUT/tests.log" 2>&1; echo "test_cuda_fuse rc=$?"
# many short splits (the merge of up to 257 splits)
CMF_CUDA_ATTN_BLOCKS=1056 CMF_CUDA_ATTN_SPLIT_KEYS=16 CMF_CUDA_TEST_ONLY=attn_decode timeout 200 $B/tests/cuda/test_cuda_ops \
  >> "$OUT/tests.log" 2>&1; echo "test_cuda_ops (attention, CMF_CUDA_ATTN_BLOCKS=1056 CMF_CUDA_ATTN_SPLIT_KEYS=16) rc=$?"
CMF_CUDA_ATTN_BLOCKS=1056 CMF_CUDA_ATTN_SPLIT_KEYS=16 timeout 200 $B/tests/cuda/test_cuda_fuse >> "$OUT/tests.log" 2>&1
echo "test_cuda_fuse (CMF_CUDA_ATTN_BLOCKS=1056 CMF_CUDA_ATTN_SPLIT_KEYS=16) rc=$?"
[ "${FWD:-0}" = 1 ] && { timeout 120 $B/tests/cuda/test_cuda_stream >> "$OUT/tests.log" 2>&1; echo "test_cuda_stream rc=$?"; }
wait # the files and the parity tests
cat "$OUT"/fwd.log "$OUT"/persist.log 2>/dev/null >> "$OUT/tests.log"
grep -E 'FAIL|WORST' "$OUT/tests.log" | head -20
echo "== bench_cuda attn $(el)"
timeout 90 $B/tests/cuda/bench_cuda attn 2>&1 | tee "$OUT/bench_attn.txt" | tail -12
for e in ${ATTN_ENV:-}; do # more tables under other settings (e.g. CMF_CUDA_ATTN_SPLIT_KEYS=16)
  env ${e//,/ } timeout 90 $B/tests/cuda/bench_cuda attn 2>&1 | tee -a "$OUT/bench_attn.txt" | tail -9
done
echo "== gpu_bench tg@$CTX $(el)"
for m in $MODELS; do
  f=/tmp/ab-${m%%:*}-${m##*:}.cmf
  [ -f $f ] || { echo "no $f"; continue; }
  vi=0
  for v in $VARIANTS; do
    vi=$((${vi:-0} + 1))
    case " ${VMODELS:-$MODELS} " in *" $m "*) ;; *) [ $vi -gt 2 ] && continue ;; esac
    e=""; [ "$v" != - ] && e=${v//,/ }
    tag=""; [ "$v" != - ] && tag="-$(echo "$v" | tr -c 'A-Za-z0-9\n' '_')"
    env $e timeout 150 $B/tests/gpu/gpu_bench $f -p 0 -g ${GEN:-32} -c $CTX -r ${REPS:-2} 2>&1 |
      sed "s|model=$f|model=${m%%:*}-${m##*:}|" | grep -E 'test=|copy' | sed "s/\(test=[a-z]*@*[0-9]*\)/\1$tag/" |
      tee -a "$OUT/results.txt"
  done
done
if [ "${NCU:-1}" = 1 ] && command -v ncu > /dev/null && [ -f /tmp/ab-l4.cmf ]; then
  echo "== ncu: decode steps of a 4-layer llama-8b q8 file at ctx 128 $(el)"
  NC="ncu --metrics gpu__time_duration.sum --csv --cache-control none --clock-control none"
  timeout 120 $NC $B/tests/gpu/gpu_bench /tmp/ab-l4.cmf -p 0 -g 2 -c 128 -r 1 > "$OUT/ncu128.csv" 2> "$OUT/ncu.err"
  python3 bench/cuda/ncu_steps.py "$OUT/ncu128.csv" 2 "llama-8b q8, 4 layers, ctx 128, defaults"
  for v in $NCU_AB; do
    echo "== ncu: decode attention kernel at ctx 4096 and 128 ($v) $(el)"
    env ${v//,/ } timeout 100 $NC -k regex:k_attn_split $B/tests/gpu/gpu_bench /tmp/ab-l4.cmf -p 0 -g 2 -c 128,4096 -r 1 \
      > "$OUT/ncu-attn.csv" 2>> "$OUT/ncu.err"
    python3 - "$OUT/ncu-attn.csv" <<'PY'
import sys
sys.path.insert(0, "bench/cuda")
from ncu_steps import kernels
ks = kernels(sys.argv[1])
# gpu_bench: ctx 128 (4 + 2 steps x 4 layers), then ctx 4096 (likewise); the prefills use the prefill kernels
n = len(ks) // 2
for lab, part in (("ctx 128", ks[:n]), ("ctx 4096", ks[n:])):
    last = part[-8:]
    print(f"  {lab}: {len(part)} launches, last 8 (2 steps x 4 layers) mean {sum(v for _, v in last) / max(len(last), 1):.2f} us")
PY
  done
fi
echo "== done $(el)"
