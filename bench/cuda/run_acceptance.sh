#!/usr/bin/env bash
# The CUDA acceptance run (issue 6), one device call: build (Release) -> kernel tests -> CPU/GPU parity
# (tests/gpu) -> compute-sanitizer memcheck of a parity run -> benchmarks, each shape next to its roofline and
# PyTorch/transformers in the same call. Logs and the table (table.md) go to $OUT (./out-device when unset).
#
# Shapes: Qwen3-0.6B, Qwen3-4B, Llama-3.1-8B (bench/cuda/hf_bench.py has their geometry), at bf16, q8 (q8_row) and
# q4tp, batch 1: prefill pp512, decode at context 128 and 4096 (bench/cuda/gpu_bench.c). For each shape:
#  - transformers builds the random model from its config on the GPU (bf16) and is timed (hf_bench.py); for the
#    shapes in $CONVERT (default qwen3-0.6b) it also saves the checkpoint, which `cmf convert` turns into our three
#    files (the full user path). The other shapes' files come from bench/cuda/make_random_llama.c (same geometry
#    and the converters' dtype policy, random weights, quantized on 16 threads): `cmf convert` of a 16 GB
#    checkpoint to q4tp takes minutes on one core, more than a device call has.
#  - roofline = copy bandwidth (read + write, measured by gpu_bench in the same process) / weight bytes per token.
# Environment: SHAPES (default "qwen3-0.6b qwen3-4b llama-8b"), DTYPES ("bf16 q8 q4tp"), STAGES
# ("build test memcheck bench"; add "dory" for bench/dory/cuda_bench.sh), CONVERT, HF_COMPILE=1 (also static cache +
# torch.compile), REPS (3), GEN (64), HF_REPS (2), HF_GEN (32), SHORT (shapes timed at context 128 only), NOGRAPH (1: q8 also
# without graphs), MEMCHECK_CASES ("llama,qwen3"), PAR (1: the tests, the memcheck and test_gpu_dory run at the same
# time, correctness only, while the random files of the shapes not in CONVERT are written in the background, one file
# ahead of the bench loop, so the timed runs have the GPU alone; 0: one after the other), AB / AB_MODELS (tg@128 rows
# of the files AB_MODELS, e.g. "llama-8b-q8", under each environment setting of AB, e.g. "CMF_CUDA_FUSE_PRE=0"; at the
# contexts AB_CTX, default 128, e.g. "128,4096";
# "llama-8b-q8@CMF_CUDA_I8_XPRE=1": that file only),
# FORWARD_ENV (PAR=1: test_gpu_forward and test_cuda_fuse once more with these settings, ',' between them),
# PROF_AB (settings for a CMF_CUDA_PERSIST=1 CMF_CUDA_PERSIST_PROF=1 run of each AB_MODELS file, '-' = none, and
# "file@settings" for one file: the persistent kernel's per-stage profile line), EXTRA_TARGETS / EXTRA_TESTS (more targets to build / tests to run with
# the others, PAR=1), SKIP (files not written nor timed, e.g. "llama-8b-bf16 qwen3-4b-q4tp": a call with less device
# time). test_gpu_persist always runs with the tests.
# The device machine lacks cJSON / PCRE2 / utf8proc / microhttpd / pkg-config: their Debian .debs are carried in
# .devdeps/ (see bench/cuda/run_gpu_forward.sh); .devdeps/shared/data/hf-tiny is the shared test data; with
# .devdeps/head.tar (`git archive HEAD`) that committed tree is built instead of the working tree.
# Usage (repository root, on the device): bash bench/cuda/run_acceptance.sh
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 CUDA_VISIBLE_DEVICES=0
cd "$(dirname "$0")/../.."
R=$PWD
DEPS=${DEPS:-.devdeps} # the carried folder (debs, shared/data/hf-tiny, optional head.tar)
OUT=${OUT:-$R/out-device}
mkdir -p "$OUT" "$OUT/misc"
M=$OUT/misc # small logs (the device tool returns at most 8 files: tar them at the end)
SHAPES=${SHAPES:-"qwen3-0.6b qwen3-4b llama-8b"}
DTYPES=${DTYPES:-"bf16 q8 q4tp"}
STAGES=${STAGES:-"build test memcheck bench"}
EXTRA_TARGETS=${EXTRA_TARGETS:-}
EXTRA_TESTS=${EXTRA_TESTS:-}
CONVERT=${CONVERT-"qwen3-0.6b"} # (set and empty: no conversion)
REPS=${REPS:-3}
GEN=${GEN:-64}
has() { case " $STAGES " in *" $1 "*) return 0 ;; *) return 1 ;; esac; }
. "$R/bench/cuda/lib.sh" # el, cmf_dev_setup (S: the tree to build, P: libraries), cmf_configure, geo
cmf_dev_setup
cd "$S"
B=$PWD/build-acc
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > "$M/gpu.txt" 2>&1
echo "date: $(date -u '+%Y-%m-%d %H:%M UTC'); card: $(head -1 "$M/gpu.txt")"
if has build; then
  echo "== build $(el)"
  cmf_configure $B > "$M/build.log" 2>&1 &&
    cmake --build $B -j32 --target cmf-cli test_gpu_forward test_cuda_ops test_cuda_fuse test_prefill_tc make_random_llama gpu_bench bench_cuda \
      test_gpu_persist $EXTRA_TARGETS \
      $(has dory && echo test_gpu_dory make_random_dory dory_gpu_bench) >> "$M/build.log" 2>&1
  brc=$?
  echo "build rc=$brc $(el)"
  if [ $brc -ne 0 ]; then grep -E 'error|Error' "$M/build.log" | head -30; exit 1; fi
fi
TESTENV="CMF_SHARED=$R/$DEPS/shared CMF_TMP=/tmp/gft CMF_TESTDATA=$PWD/tests/data"
mkdir -p /tmp/gft
PAR=${PAR:-1}
if [ "$PAR" = 1 ] && has bench; then # the random files, one ahead of the bench loop (which waits for each)
  ( for shape in $SHAPES; do
      case " $CONVERT " in *" $shape "*) continue ;; esac
      for dt in $DTYPES; do
        case " ${SKIP:-} " in *" $shape-$dt "*) continue ;; esac
        while [ "$(ls /tmp/*.cmf 2>/dev/null | wc -l)" -ge 2 ]; do sleep 1; done
        nice -n 19 timeout 300 $B/tests/gpu/make_random_llama /tmp/$shape-$dt.part $dt $(geo $shape) 8 > /dev/null &&
          mv /tmp/$shape-$dt.part /tmp/$shape-$dt.cmf || touch /tmp/$shape-$dt.failed
      done
    done
    if has dory; then # bench/dory/cuda_bench.sh's files (DORY_PREGEN=1 there)
      for dt in ${DORY_DTYPES:-bf16 q8}; do
        while [ "$(ls /tmp/*.cmf 2>/dev/null | wc -l)" -ge 2 ]; do sleep 1; done
        nice -n 19 timeout 240 $B/bench/dory/make_random_dory /tmp/dory4b-$dt.part $dt 8 > /tmp/dory4b-$dt.gen.log 2>&1 &&
          mv /tmp/dory4b-$dt.part /tmp/dory4b-$dt.cmf || touch /tmp/dory4b-$dt.failed
      done
    fi ) &
  GEN_PID=$!
fi
if has test && [ "$PAR" = 1 ]; then # correctness only: concurrent processes on the one GPU
  echo "== tests, memcheck$(has dory && echo ', test_gpu_dory') at once $(el)"
  timeout 300 $B/tests/cuda/test_cuda_ops > "$M/cuda_ops.log" 2>&1 & p1=$!
  timeout 200 $B/tests/cuda/test_prefill_tc > "$M/prefill_tc.log" 2>&1 & p2=$!
  timeout 200 $B/tests/cuda/test_cuda_fuse > "$M/cuda_fuse.log" 2>&1 & p3=$!
  env $TESTENV timeout 400 $B/tests/gpu/test_gpu_forward > "$OUT/gpu_forward.log" 2>&1 & p4=$!
  mkdir -p /tmp/gpp
  env $TESTENV CMF_TMP=/tmp/gpp timeout 300 $B/tests/gpu/test_gpu_persist > "$M/gpu_persist.log" 2>&1 & p9=$!
  p5=""; p6=""; p7=""; p8=""; p10=""
  for t in $EXTRA_TESTS; do # other tests of tests/cuda or tests/gpu (EXTRA_TARGETS builds them), one log each
    exe=$(find $B/tests -name "$t" -type f | head -1)
    ( env $TESTENV CMF_TMP=/tmp/gx-$t timeout 300 $exe > "$M/$t.log" 2>&1; echo "$t rc=$?" >> "$M/extra.rc" ) &
    p10="$p10 $!"; mkdir -p /tmp/gx-$t
  done
  # decode attention over many short splits (one block merges up to 257; tests/cuda/CMakeLists.txt's *_splits)
  ( SPL="CMF_CUDA_ATTN_BLOCKS=1056 CMF_CUDA_ATTN_SPLIT_KEYS=16"
    env $SPL CMF_CUDA_TEST_ONLY=attn_decode timeout 200 $B/tests/cuda/test_cuda_ops > "$M/attn_splits.log" 2>&1
    echo "test_cuda_attn_splits rc=$?" > "$M/splits.rc"
    env $SPL timeout 200 $B/tests/cuda/test_cuda_fuse > "$M/fuse_splits.log" 2>&1
    echo "test_cuda_fuse_splits rc=$?" >> "$M/splits.rc" ) & p11=$!
  if [ -n "${FORWARD_ENV:-}" ]; then # test_gpu_forward once more under these settings (e.g. an opt-in path)
    mkdir -p /tmp/gfe
    env $TESTENV CMF_TMP=/tmp/gfe ${FORWARD_ENV//,/ } timeout 400 $B/tests/gpu/test_gpu_forward > "$M/gpu_forward_env.log" 2>&1 &
    p7=$!
    env ${FORWARD_ENV//,/ } timeout 200 $B/tests/cuda/test_cuda_fuse > "$M/cuda_fuse_env.log" 2>&1 & p8=$!
  fi
  if has memcheck; then
    mkdir -p /tmp/gfm
    env $TESTENV CMF_GPU_TEST_CASES=${MEMCHECK_CASES:-llama,qwen3} CMF_TMP=/tmp/gfm timeout 400 compute-sanitizer \
      --tool memcheck --print-limit 20 $B/tests/gpu/test_gpu_forward > "$OUT/memcheck.log" 2>&1 & p5=$!
  fi
  if has dory; then
    mkdir -p /tmp/gdt
    env CMF_SHARED=$R/$DEPS/shared CMF_TMP=/tmp/gdt CMF_TESTDATA=$PWD/tests/data timeout 300 $B/tests/gpu/test_gpu_dory \
      > "$M/gpu_dory.log" 2>&1 & p6=$!
  fi
  wait $p1; echo "test_cuda_ops rc=$?"; tail -2 "$M/cuda_ops.log"
  wait $p2; echo "test_prefill_tc rc=$?"; tail -2 "$M/prefill_tc.log"
  wait $p3; echo "test_cuda_fuse rc=$?"; tail -2 "$M/cuda_fuse.log"
  wait $p9; echo "test_gpu_persist rc=$?"; grep -E 'persistent steps|FAIL|differ' "$M/gpu_persist.log" | head -6
  wait $p11; cat "$M/splits.rc"
  for p in $p10; do wait $p; done; [ -f "$M/extra.rc" ] && cat "$M/extra.rc" && for t in $EXTRA_TESTS; do tail -3 "$M/$t.log"; done
  wait $p4; echo "test_gpu_forward rc=$?"
  grep -E 'FAIL|fail' "$OUT/gpu_forward.log" | head -20
  grep -E 'WORST|f32-prefill|near-ties [1-9]' "$OUT/gpu_forward.log" | head -40
  if [ -n "$p5" ]; then wait $p5; echo "memcheck (${MEMCHECK_CASES:-llama,qwen3}) rc=$?"; grep -E 'ERROR SUMMARY|Invalid|FAIL' "$OUT/memcheck.log" | head -10; fi
  if [ -n "$p7" ]; then wait $p8; echo "test_cuda_fuse ($FORWARD_ENV) rc=$?"; tail -2 "$M/cuda_fuse_env.log"; fi
  if [ -n "$p7" ]; then wait $p7; echo "test_gpu_forward ($FORWARD_ENV) rc=$?"; grep -E 'FAIL|fail' "$M/gpu_forward_env.log" | head -10; grep -E 'WORST' "$M/gpu_forward_env.log" | grep -v f32 | head -8; fi
  if [ -n "$p6" ]; then wait $p6; echo "test_gpu_dory rc=$?"; grep -E 'FAIL|fail' "$M/gpu_dory.log" | head -10; grep WORST "$M/gpu_dory.log"; fi
  STAGES=${STAGES/memcheck/}
fi
if has test && [ "$PAR" != 1 ]; then
  echo "== kernel tests $(el)"
  timeout 240 $B/tests/cuda/test_cuda_ops > "$M/cuda_ops.log" 2>&1; echo "test_cuda_ops rc=$?"; tail -3 "$M/cuda_ops.log"
  timeout 120 $B/tests/cuda/test_prefill_tc > "$M/prefill_tc.log" 2>&1; echo "test_prefill_tc rc=$?"; tail -3 "$M/prefill_tc.log"
  timeout 120 $B/tests/cuda/test_cuda_fuse > "$M/cuda_fuse.log" 2>&1; echo "test_cuda_fuse rc=$?"; tail -3 "$M/cuda_fuse.log"
  echo "== parity (tests/gpu) $(el)"
  env $TESTENV timeout 400 $B/tests/gpu/test_gpu_forward > "$OUT/gpu_forward.log" 2>&1; echo "test_gpu_forward rc=$?"
  grep -E 'FAIL|fail' "$OUT/gpu_forward.log" | head -20
  grep -E 'WORST|f32-prefill|near-ties [1-9]' "$OUT/gpu_forward.log" | head -40
fi
if has memcheck; then
  echo "== compute-sanitizer memcheck of a parity run (llama and qwen3, f16 and q8_row) $(el)"
  env $TESTENV CMF_GPU_TEST_CASES=${MEMCHECK_CASES:-llama,qwen3} timeout 300 compute-sanitizer --tool memcheck --print-limit 20 \
    $B/tests/gpu/test_gpu_forward > "$OUT/memcheck.log" 2>&1
  echo "memcheck rc=$?"; grep -E 'ERROR SUMMARY|Invalid|FAIL' "$OUT/memcheck.log" | head -10
fi
if has bench; then
  echo "== bench $(el)"
  for shape in $SHAPES; do
    hf=/tmp/hf-$shape; save=""
    case " $CONVERT " in *" $shape "*) save="--save $hf" ;; esac
    comp=""; [ "${HF_COMPILE:-0}" = 1 ] && comp="--compile"
    if [ -n "${GEN_PID:-}" ]; then # transformers' decode is host-bound: no file being written meanwhile
      while kill -0 $GEN_PID 2>/dev/null && [ "$(ls /tmp/*.cmf 2>/dev/null | wc -l)" -lt 2 ]; do sleep 1; done
    fi
    timeout 300 python3 bench/cuda/hf_bench.py --shape $shape $save --gen ${HF_GEN:-32} --reps ${HF_REPS:-2} $comp 2>"$M/hf-$shape.err" |
      tee -a "$OUT/results.txt" | grep RESULT
    geo=$(geo $shape)
    ctx=128,4096; case " ${SHORT:-} " in *" $shape "*) ctx=128 ;; esac
    cpids=""
    for dt in $DTYPES; do
      f=/tmp/$shape-$dt.cmf
      if [ -n "$save" ]; then
        ( timeout 300 $B/cmf convert $hf -o $f --quant $dt --no-progress > "$M/convert-$shape-$dt.log" 2>&1 ) &
        cpids="$cpids $!"
      fi
    done
    for p in $cpids; do wait $p; done # (not a bare wait: the file writer runs in the background too)
    for dt in $DTYPES; do
      case " ${SKIP:-} " in *" $shape-$dt "*) continue ;; esac
      f=/tmp/$shape-$dt.cmf
      if [ -z "$save" ] && [ -n "${GEN_PID:-}" ]; then # written in the background
        while [ ! -f $f ] && [ ! -f /tmp/$shape-$dt.failed ] && kill -0 $GEN_PID 2>/dev/null; do sleep 1; done
      elif [ -z "$save" ]; then
        timeout 300 $B/tests/gpu/make_random_llama $f $dt $geo 16 | tail -1
      fi
      [ -f $f ] || { echo "no $f"; continue; }
      echo "-- $shape $dt $(el)"
      timeout 300 $B/tests/gpu/gpu_bench $f -p 512 -g $GEN -c $ctx -r $REPS 2>&1 | sed "s|model=$f|model=$shape-$dt|" |
        tee -a "$OUT/results.txt" | grep -v '^$'
      if [ "$dt" = q8 ] && [ "${NOGRAPH:-1}" = 1 ]; then # graphs off, for the A/B
        timeout 120 $B/tests/gpu/gpu_bench $f -p 0 -g $GEN -c 128 -r 2 --no-graph 2>&1 | sed "s|model=$f|model=$shape-$dt|" |
          sed 's/test=tg@128/test=tg@128-nograph/' | grep test= | tee -a "$OUT/results.txt"
      fi
      case " ${AB_MODELS:-} " in *" $shape-$dt "*) # A/B rows: tg@128 under each setting of $AB (',' between variables)
        for v in ${AB:-}; do
          case $v in *@*) [ "${v%%@*}" = "$shape-$dt" ] || continue; v=${v#*@} ;; esac # "file@settings": that file only
          env ${v//,/ } timeout 120 $B/tests/gpu/gpu_bench $f -p 0 -g $GEN -c ${AB_CTX:-128} -r 2 2>&1 | sed "s|model=$f|model=$shape-$dt|" |
            grep test= | sed "s/\(test=tg@[0-9]*\)/\1-$(echo "$v" | tr -c 'A-Za-z0-9\n' '_')/" | tee -a "$OUT/results.txt"
        done
        for v in ${PROF_AB:-}; do # the persistent kernel's stage profile (CMF_CUDA_PERSIST_PROF=1, persist.h)
          case $v in *@*) [ "${v%%@*}" = "$shape-$dt" ] || continue; v=${v#*@} ;; esac # "file@settings": that file only
          vv=${v//,/ }; [ "$v" = - ] && vv=""
          env $vv CMF_CUDA_PERSIST=1 CMF_CUDA_PERSIST_PROF=1 timeout 120 $B/tests/gpu/gpu_bench $f -p 0 -g 16 -c 128 -r 1 2>&1 |
            grep -E 'persist_' | sed "s|model=$f|model=$shape-$dt setting=$v|" | tee -a "$OUT/results.txt"
        done ;;
      esac
      rm -f $f
    done
    rm -rf $hf
  done
  python3 bench/cuda/make_table.py "$OUT/results.txt" "$(head -1 "$M/gpu.txt")" > "$OUT/table.md"
  cat "$OUT/table.md"
fi
if has dory; then # Dory 4B-shape rows, test_gpu_dory and its memcheck (bench/dory/cuda_bench.sh; opt-in: STAGES="... dory")
  echo "== dory $(el)"
  DORY_PREGEN=$([ -n "${GEN_PID:-}" ] && echo 1 || echo 0) \
    DORY_TEST=$([ "$PAR" = 1 ] && has test && echo 0 || echo 1) B=$B OUT=$OUT LOGS=$M R=$R DEPS=$DEPS P=$P \
    bash bench/dory/cuda_bench.sh
fi
echo "== done $(el)"
tar -czf "$OUT/logs.tgz" -C "$OUT" misc && rm -rf "$M"
