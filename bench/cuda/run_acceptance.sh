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
# ("build test memcheck bench"), CONVERT, HF_COMPILE=1 (also static cache + torch.compile), REPS (3), GEN (64).
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
CONVERT=${CONVERT:-"qwen3-0.6b"}
REPS=${REPS:-3}
GEN=${GEN:-64}
T0=$(date +%s)
el() { echo "[$(( $(date +%s) - T0 )) s]"; }
has() { case " $STAGES " in *" $1 "*) return 0 ;; *) return 1 ;; esac; }
if [ -f $DEPS/head.tar ]; then rm -rf /tmp/cmfsrc && mkdir -p /tmp/cmfsrc && tar -xf $DEPS/head.tar -C /tmp/cmfsrc && cd /tmp/cmfsrc; fi
B=$PWD/build-acc
P=/tmp/cmfdeps
mkdir -p $P && for f in "$R"/$DEPS/*.deb; do dpkg -x "$f" $P; done
sed -i '/^Requires.private/d' $P/usr/lib/x86_64-linux-gnu/pkgconfig/libmicrohttpd.pc 2>/dev/null
export LD_LIBRARY_PATH=$P/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
export PKG_CONFIG_SYSROOT_DIR=$P PKG_CONFIG_LIBDIR=$P/usr/lib/x86_64-linux-gnu/pkgconfig:$P/usr/share/pkgconfig
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > "$M/gpu.txt" 2>&1
echo "date: $(date -u '+%Y-%m-%d %H:%M UTC'); card: $(head -1 "$M/gpu.txt")"
if has build; then
  echo "== build $(el)"
  cmake -S . -B $B -DCMAKE_BUILD_TYPE=Release -DCMF_WERROR=OFF -DCMF_SHARED_DIR="$R/$DEPS/shared" \
    -DPKG_CONFIG_EXECUTABLE=$P/usr/bin/pkgconf -DCMAKE_C_FLAGS="-I$P/usr/include" > "$M/build.log" 2>&1 &&
    cmake --build $B -j32 --target cmf-cli test_gpu_forward test_cuda_ops test_cuda_fuse test_prefill_tc make_random_llama gpu_bench bench_cuda >> "$M/build.log" 2>&1
  brc=$?
  echo "build rc=$brc $(el)"
  if [ $brc -ne 0 ]; then grep -E 'error|Error' "$M/build.log" | head -30; exit 1; fi
fi
TESTENV="CMF_SHARED=$R/$DEPS/shared CMF_TMP=/tmp/gft CMF_TESTDATA=$PWD/tests/data"
mkdir -p /tmp/gft
if has test; then
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
  env $TESTENV CMF_GPU_TEST_CASES=llama,qwen3 timeout 300 compute-sanitizer --tool memcheck --print-limit 20 \
    $B/tests/gpu/test_gpu_forward > "$OUT/memcheck.log" 2>&1
  echo "memcheck rc=$?"; grep -E 'ERROR SUMMARY|Invalid|FAIL' "$OUT/memcheck.log" | head -10
fi
if has bench; then
  echo "== bench $(el)"
  for shape in $SHAPES; do
    hf=/tmp/hf-$shape; save=""
    case " $CONVERT " in *" $shape "*) save="--save $hf" ;; esac
    comp=""; [ "${HF_COMPILE:-0}" = 1 ] && comp="--compile"
    timeout 300 python3 bench/cuda/hf_bench.py --shape $shape $save --gen 32 --reps 2 $comp 2>"$M/hf-$shape.err" |
      tee -a "$OUT/results.txt" | grep RESULT
    geo=$(python3 -c "import sys; sys.path.insert(0, 'bench/cuda'); import hf_bench as h; a = h.SHAPES['$shape']; print(a[1], a[2], a[3], a[7], a[4], a[5], a[6], int(a[0] == 'qwen3'), int(a[8]))")
    for dt in $DTYPES; do
      f=/tmp/$shape-$dt.cmf
      if [ -n "$save" ]; then
        ( timeout 300 $B/cmf convert $hf -o $f --quant $dt --no-progress > "$M/convert-$shape-$dt.log" 2>&1 ) &
      fi
    done
    wait
    for dt in $DTYPES; do
      f=/tmp/$shape-$dt.cmf
      [ -z "$save" ] && timeout 300 $B/tests/gpu/make_random_llama $f $dt $geo 16 | tail -1
      [ -f $f ] || { echo "no $f"; continue; }
      echo "-- $shape $dt $(el)"
      timeout 300 $B/tests/gpu/gpu_bench $f -p 512 -g $GEN -c 128,4096 -r $REPS 2>&1 | sed "s|model=$f|model=$shape-$dt|" |
        tee -a "$OUT/results.txt" | grep -v '^$'
      if [ "$dt" = q8 ]; then # graphs off, for the A/B
        timeout 120 $B/tests/gpu/gpu_bench $f -p 0 -g $GEN -c 128 -r 2 --no-graph 2>&1 | sed "s|model=$f|model=$shape-$dt|" |
          sed 's/test=tg@128/test=tg@128-nograph/' | grep test= | tee -a "$OUT/results.txt"
      fi
      rm -f $f
    done
    rm -rf $hf
  done
  python3 bench/cuda/make_table.py "$OUT/results.txt" "$(head -1 "$M/gpu.txt")" > "$OUT/table.md"
  cat "$OUT/table.md"
fi
if has dory; then # Dory 4B-shape rows, test_gpu_dory and its memcheck (bench/dory/cuda_bench.sh; opt-in: STAGES="... dory")
  echo "== dory $(el)"
  B=$B OUT=$OUT LOGS=$M R=$R DEPS=$DEPS P=$P bash bench/dory/cuda_bench.sh
fi
echo "== done $(el)"
tar -czf "$OUT/logs.tgz" -C "$OUT" misc && rm -rf "$M"
