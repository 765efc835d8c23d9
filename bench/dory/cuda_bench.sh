#!/usr/bin/env bash
# Dory on CUDA in one device call: the "dory" stage of bench/cuda/run_acceptance.sh (STAGES="... dory"), or alone
# (STAGES=dory: it then configures and builds only its own targets).
#  1. build test_gpu_dory, make_random_dory, dory_gpu_bench (Release, in $B);
#  2. while make_random_dory writes random-weight files shaped like Dory1.0-4B at $DORY_DTYPES (default "bf16 q8")
#     in the background: test_gpu_dory (CPU/GPU parity, graphs vs eager bit for bit), then compute-sanitizer
#     memcheck of its quick subset (CMF_GPU_DORY_QUICK=1: tiny and mid at f16, graphs and gates included);
#  3. dory_gpu_bench on each file: pp512, tg@128 with CUDA graphs / eager / through the Conf gate, next to the
#     roofline (weight bytes per token / the copy bandwidth measured in the same process); then tg@128 again with
#     CMF_CUDA_PDL=0 (the A/B for Programmatic Dependent Launch);
#  4. the PyTorch peer (bench/dory/torch_dory.py: the Dory forward in PyTorch eager, bf16, same shape, when torch
#     imports; DORY_TORCH=0 skips it): pp512 and tg@128 in the same call;
#  5. a table of the rows with the cmf/PyTorch ratios (dory_table.md in $OUT; the logs in $LOGS).
# Environment (set by run_acceptance.sh): B (build dir), OUT, LOGS (default $OUT), R (repository root of the carried
# tree), DEPS, P (unpacked .debs); DORY_DTYPES, DORY_MEMCHECK (1), DORY_REPS (3), DORY_GEN (32 decode steps),
# DORY_CTX (128), DORY_TORCH (1), DORY_NOPDL (1), DORY_PREGEN (0; 1: the caller writes the files), DORY_TEST (1; 0: test_gpu_dory was run by the caller),
# DORY_AB (pp512 rows of each file under other settings, e.g. "CMF_DORY_CUDA_PREFILL=f32"), DORY_NCU (0; 1: Nsight Compute's GPU time per kernel over the first DORY_NCU_N
# kernels of decode on the first dtype's file, summarised by bench/cuda/ncu_summary.py into $LOGS).
# Usage alone (repository root, on the device): DEPS=.cudadev-NAME STAGES=dory bash bench/cuda/run_acceptance.sh
set -uo pipefail
B=${B:?build directory} OUT=${OUT:?output directory}
L=${LOGS:-$OUT}
R=${R:-$PWD} DEPS=${DEPS:-.devdeps} P=${P:-/tmp/cmfdeps}
DTS=${DORY_DTYPES:-"bf16 q8"}
REPS=${DORY_REPS:-3} GEN=${DORY_GEN:-32} CTX=${DORY_CTX:-128}
T0=$(date +%s)
el() { echo "[$(($(date +%s) - T0)) s]"; }
echo "== dory: build $(el)"
if [ ! -f $B/CMakeCache.txt ]; then
  cmake -S . -B $B -DCMAKE_BUILD_TYPE=Release -DCMF_WERROR=OFF -DCMF_SHARED_DIR="$R/$DEPS/shared" \
    -DPKG_CONFIG_EXECUTABLE=$P/usr/bin/pkgconf -DCMAKE_C_FLAGS="-I$P/usr/include" > "$L/dory_build.log" 2>&1
fi
cmake --build $B -j32 --target test_gpu_dory make_random_dory dory_gpu_bench >> "$L/dory_build.log" 2>&1
brc=$?
echo "dory build rc=$brc $(el)"
if [ $brc -ne 0 ]; then grep -E 'error|Error' "$L/dory_build.log" | head -30; exit 1; fi
( for dt in $DTS; do
    if [ "${DORY_PREGEN:-0}" = 1 ]; then # the caller writes /tmp/dory4b-$dt.cmf: wait for it (4 min at most)
      for i in $(seq 240); do [ -f /tmp/dory4b-$dt.cmf ] || [ -f /tmp/dory4b-$dt.failed ] && break; sleep 1; done
      continue
    fi
    timeout 240 $B/bench/dory/make_random_dory /tmp/dory4b-$dt.cmf.part $dt 16 > /tmp/dory4b-$dt.gen.log 2>&1 &&
      mv /tmp/dory4b-$dt.cmf.part /tmp/dory4b-$dt.cmf
  done ) &
gen=$!
TESTENV="CMF_SHARED=$R/$DEPS/shared CMF_TMP=/tmp/gdt CMF_TESTDATA=$PWD/tests/data"
mkdir -p /tmp/gdt
echo "== dory: test_gpu_dory $(el)"
if [ "${DORY_TEST:-1}" = 1 ]; then # (DORY_TEST=0: the caller ran it)
  env $TESTENV timeout 240 $B/tests/gpu/test_gpu_dory > "$L/gpu_dory.log" 2>&1
  echo "test_gpu_dory rc=$?"
  grep -E 'FAIL|fail' "$L/gpu_dory.log" | head -10
  grep -E 'WORST' "$L/gpu_dory.log"
fi
if [ "${DORY_MEMCHECK:-1}" = 1 ]; then
  echo "== dory: compute-sanitizer memcheck of test_gpu_dory (quick subset) $(el)"
  env $TESTENV CMF_GPU_DORY_QUICK=1 timeout 240 compute-sanitizer --tool memcheck --print-limit 20 \
    $B/tests/gpu/test_gpu_dory > "$L/dory_memcheck.log" 2>&1
  echo "memcheck rc=$?"
  grep -E 'ERROR SUMMARY|Invalid|FAIL' "$L/dory_memcheck.log" | head -10
fi
wait $gen
cat /tmp/dory4b-*.gen.log
echo "== dory: bench $(el)"
res=$L/dory_results.txt
for dt in $DTS; do
  f=/tmp/dory4b-$dt.cmf
  [ -f $f ] || { echo "no $f"; continue; }
  timeout 200 $B/bench/dory/dory_gpu_bench $f -p 512 -g $GEN -c $CTX -r $REPS --label dory4b-$dt 2>&1 | tee -a $res
  for e in ${DORY_AB:-}; do # pp rows of the same file under other settings (',' between variables), same call
    env ${e//,/ } timeout 100 $B/bench/dory/dory_gpu_bench $f -p 512 -g 0 -r $REPS --label "dory4b-$dt@$e" 2>&1 |
      grep 'test=pp' | tee -a $res
  done
  if [ "${DORY_NOPDL:-1}" = 1 ]; then # (DORY_NOPDL=0 skips the PDL A/B rows)
    CMF_CUDA_PDL=0 timeout 100 $B/bench/dory/dory_gpu_bench $f -p 0 -g $GEN -c $CTX -r 2 --label dory4b-$dt 2>&1 |
      grep 'test=tg' | grep -v conf | sed 's/-graph /-graph-nopdl /; s/-eager /-eager-nopdl /' | tee -a $res
  fi
  if [ "${DORY_NCU:-0}" = 1 ] && [ "$dt" = "${DTS%% *}" ]; then # GPU time per kernel of the first decode tokens
    echo "== dory: ncu, the first ${DORY_NCU_N:-1400} kernels of decode from position 0 ($dt, graphs) $(el)"
    timeout ${DORY_NCU_S:-120} ncu --metrics gpu__time_duration.sum --csv --graph-profiling node \
      --launch-count ${DORY_NCU_N:-1400} $B/bench/dory/dory_gpu_bench $f -p 0 -c 0 -g 1 -r 1 --label ncu \
      > "$L/dory_ncu.csv" 2> "$L/dory_ncu.err"
    echo "ncu rc=$?"
    python3 bench/cuda/ncu_summary.py "$L/dory_ncu.csv" | tee "$L/dory_ncu_summary.txt"
  fi
  rm -f $f
done
if [ "${DORY_TORCH:-1}" = 1 ] && python3 -c "import torch" 2> /dev/null; then
  echo "== dory: PyTorch eager peer (bench/dory/torch_dory.py, bf16) $(el)"
  timeout 240 python3 bench/dory/torch_dory.py -p 512 -c $CTX -g $GEN -r 2 2> "$L/torch_dory.err" | tee -a $res
  tail -3 "$L/torch_dory.err"
fi
{
  echo "| model | test | tok/s | sd | ms/token | % of roofline |"
  echo "|---|---|---:|---:|---:|---:|"
  grep '^RESULT' $res | grep -v 'test=roofline' | sed 's/RESULT //' | awk '{
    for (i = 1; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] }
    printf "| %s | %s | %s | %s | %s | %s |\n", v["model"], v["test"], v["tps"], v["sd"],
      (v["ms_per_token"] == "" ? "-" : v["ms_per_token"]), (v["roofline_pct"] == "" ? "-" : v["roofline_pct"]);
    delete v }'
  echo
  grep 'test=roofline' $res | sed 's/RESULT //'
  grep '^RESULT' $res | sed 's/RESULT //' | awk '{ # cmf bf16 / the PyTorch peer, same shape and dtype
    for (i = 1; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] }
    if (v["model"] == "dory4b-bf16") ours[v["test"]] = v["tps"]
    if (v["model"] == "dory4b-torch-bf16") peer[v["test"]] = v["tps"]
    delete v }
    END { for (t in peer) { o = t; sub(/-torch$/, "-graph", o)
            if (o in ours && peer[t] > 0)
              printf "ratio cmf/torch bf16 %s: %.2f (%s vs %s tok/s)\n", t, ours[o] / peer[t], ours[o], peer[t] } }'
} > "$OUT/dory_table.md"
cat "$OUT/dory_table.md"
echo "== dory done $(el)"
