#!/usr/bin/env bash
# One device call (kind nvidia-h200-x2, or -x4 for TP=4) for tensor parallelism over NCCL: build the committed
# tree (Release, CUDA + NCCL), run tests/tp (the CPU split and test_tp_cuda: tp 1 = one GPU bit for bit, tp 2
# within 2e-3 of one GPU with identical greedy tokens, rank graphs on and off), the NCCL all-reduce latency
# (bench/tp/ar_bench, eager and inside a CUDA graph, once per NCCL setting in $AR_ENVS), then decode tok/s of
# random q8_row models at tp 1 and $TPS with bench/tp/tp_bench (rank CUDA graphs on; also off; the NCCL settings of
# $E2E_ENVS on the last model; the eager all-reduce time per token from a CMF_TP_PROFILE run):
#   8b   (Llama 3 8B: hidden 4096, 32 layers, FFN 14336, vocab 128256, 32 heads / 8 KV heads of 128)
#   32b  (Qwen2.5 32B: hidden 5120, FFN 27648, vocab 152064, 40 heads / 8 KV heads of 128) with $L32 of its 64
#        layers (default 16, so that the file, 9.4 GB, is generated within the call; 64 = the real model, 35 GB).
# Environment: MODELS ("8b 32b"), L32 (16), TPS ("2"), STAGES ("build test ar bench"), AR_ENVS, E2E_ENVS.
# Logs go to $OUT. Needs a carried folder ignored by git ($TP_DEPS, default .tpdev) with the *.deb files of
# bench/cuda/run_gpu_forward.sh, shared/data/hf-tiny and tp_head.tar (`git archive HEAD > .tpdev/tp_head.tar`).
set -uo pipefail
cd "$(dirname "$0")/../.."
R=$PWD
D=${TP_DEPS:-.tpdev} # the carried folder: *.deb, shared/data/hf-tiny, tp_head.tar
OUT=${OUT:-$R/out-device}
MODELS=${MODELS:-"8b 32b"}
L32=${L32:-16}
TPS=${TPS:-2}
STAGES=${STAGES:-"build test ar bench"}
AR_ENVS=${AR_ENVS:-"- NCCL_PROTO=LL NCCL_PROTO=LL128 NCCL_PROTO=Simple NCCL_ALGO=Tree NCCL_MAX_NCHANNELS=1 NCCL_MAX_NCHANNELS=2 NCCL_GRAPH_MIXING_SUPPORT=0"}
E2E_ENVS=${E2E_ENVS:-"NCCL_PROTO=LL NCCL_PROTO=LL128 CMF_TP_PREFETCH_MB=16 CMF_TP_PREFETCH_MB=32 CMF_CUDA_PDL=0"}
has() { case " $STAGES " in *" $1 "*) return 0 ;; *) return 1 ;; esac; }
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
S0=$(date +%s)
el() { echo "[$(( $(date +%s) - S0 )) s]"; }
rm -rf /tmp/tpsrc && mkdir -p /tmp/tpsrc && tar -xf $D/tp_head.tar -C /tmp/tpsrc && cd /tmp/tpsrc
P=/tmp/cmfdeps
mkdir -p $P && for f in "$R/$D"/*.deb; do dpkg -x "$f" $P; done
sed -i '/^Requires.private/d' $P/usr/lib/x86_64-linux-gnu/pkgconfig/libmicrohttpd.pc
NC=$(python3 -c "import nvidia.nccl, os; print(os.path.dirname(nvidia.nccl.__file__))" 2>/dev/null)
export LD_LIBRARY_PATH=${NC:+$NC/lib:}$P/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
export PKG_CONFIG_SYSROOT_DIR=$P PKG_CONFIG_LIBDIR=$P/usr/lib/x86_64-linux-gnu/pkgconfig:$P/usr/share/pkgconfig
echo "date: $(date -u '+%Y-%m-%d %H:%M UTC'); nccl python package: ${NC:-none}"
nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv > "$OUT/gpu.txt" 2>&1; cat "$OUT/gpu.txt"
nvidia-smi topo -m > "$OUT/topo.txt" 2>&1; head -4 "$OUT/topo.txt"
NG=$(nvidia-smi -L | wc -l)
B=build-tp
if has build; then
  cmake -S . -B $B -DCMAKE_BUILD_TYPE=Release -DCMF_WERROR=OFF -DCMF_SHARED_DIR="$R/$D/shared" -DCMF_NCCL=ON \
    ${NC:+-DCMF_NCCL_ROOT="$NC"} -DPKG_CONFIG_EXECUTABLE=$P/usr/bin/pkgconf -DCMAKE_C_FLAGS="-I$P/usr/include" > "$OUT/build.log" 2>&1 &&
    cmake --build $B -j32 --target test_tp test_tp_cuda tp_bench make_random_llama ar_bench >> "$OUT/build.log" 2>&1
  brc=$?
  grep -E "CMF_NCCL_LIB|CMF_NCCL_INCLUDE" $B/CMakeCache.txt | head -2
  echo "build rc=$brc $(el)"
  if [ $brc -ne 0 ]; then grep -E 'error|Error' "$OUT/build.log" | head -30; exit 1; fi
fi
# the random models, generated while the tests run
mkdir -p /tmp/tpm
GP=""
if has bench; then
  for mdl in $MODELS; do
    case $mdl in
      8b) geo="4096 32 14336 128256 32 8 128" ;;
      32b) geo="5120 $L32 27648 152064 40 8 128" ;;
    esac
    ( $B/tests/gpu/make_random_llama /tmp/tpm/$mdl.cmf q8_row $geo 0 0 12 > "$OUT/gen$mdl.log" 2>&1 ) &
    GP="$GP $!"
  done
fi
if has test; then
  echo "== tests $(el)"
  mkdir -p /tmp/tpt
  CMF_SHARED=$R/$D/shared CMF_TMP=/tmp/tpt timeout 200 $B/tests/tp/test_tp_cuda > "$OUT/test_tp_cuda.log" 2>&1
  echo "test_tp_cuda rc=$?"; grep -E "tp1 |tp2|FAIL|fail|SKIP" "$OUT/test_tp_cuda.log" | head -40
  CMF_SHARED=$R/$D/shared CMF_TMP=/tmp/tpt timeout 60 $B/tests/tp/test_tp > "$OUT/test_tp.log" 2>&1
  echo "test_tp (cpu) rc=$?"
fi
if has ar; then
  echo "== all-reduce latency (ar_bench: us per call, eager / inside a graph of 64) $(el)"
  for e in $AR_ENVS; do
    for g in 2 $( [ "$NG" -ge 4 ] && echo 4 ); do
      if [ "$e" = - ]; then timeout 60 $B/tests/tp/ar_bench $g 4096,5120,40960; else env $e timeout 60 $B/tests/tp/ar_bench $g 4096,5120,40960; fi
    done
  done 2>&1 | tee "$OUT/ar.txt"
fi
if has bench; then
  for p in $GP; do wait $p; done
  echo "== models generated $(el)"; ls -l /tmp/tpm
  echo "== bench (decode, 64 tokens after 16 prompt + 8 warm-up) $(el)"
  last=$(echo $MODELS | awk '{print $NF}')
  for mdl in $MODELS; do
    f=/tmp/tpm/$mdl.cmf
    [ -f $f ] || { echo "no $f"; continue; }
    tag=$mdl; [ $mdl = 32b ] && tag=32b-${L32}L
    timeout 200 $B/tests/tp/tp_bench $f 1 cuda 64 2>&1 | sed "s/^/$tag graphs /"
    CMF_CUDA_GRAPH=0 timeout 200 $B/tests/tp/tp_bench $f 1 cuda 64 2>&1 | sed "s/^/$tag eager /"
    for tp in $TPS; do
      [ $tp -le $NG ] || continue
      timeout 200 $B/tests/tp/tp_bench $f $tp cuda 64 2>&1 | sed "s/^/$tag graphs /"
      CMF_CUDA_GRAPH=0 timeout 200 $B/tests/tp/tp_bench $f $tp cuda 64 2>&1 | sed "s/^/$tag eager /"
      CMF_TP_PROFILE=1 timeout 200 $B/tests/tp/tp_bench $f $tp cuda 64 2>&1 | sed "s/^/$tag profiled /"
      if [ $mdl = $last ]; then
        for e in $E2E_ENVS; do env $e timeout 200 $B/tests/tp/tp_bench $f $tp cuda 64 2>&1 | sed "s/^/$tag graphs $e /"; done
      fi
    done
    rm -f $f
  done 2>&1 | tee "$OUT/bench.txt"
fi
echo "done $(el)"
