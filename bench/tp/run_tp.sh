#!/usr/bin/env bash
# One device call (kind nvidia-h200-x2, or -x4 for TP=4) for tensor parallelism over NCCL: build the committed
# tree (Release, CUDA + NCCL), run tests/tp (the CPU split and test_tp_cuda: tp 1 = one GPU bit for bit, tp 2
# within 2e-3 of one GPU with identical greedy tokens, rank graphs on and off), the NCCL all-reduce latency
# (bench/tp/ar_bench, eager and inside a CUDA graph, once per NCCL setting in $AR_ENVS), then decode tok/s of
# random q8_row models with bench/tp/tp_bench: tp 1 once per setting in $T1_ENVS, and each tp of $TPS once per
# setting in $TN_ENVS ("-" = the defaults: CUDA graphs on; CMF_CUDA_GRAPH=0 = eager; CMF_TP_PROFILE=1 = the eager
# all-reduce time per token, serialising; any NCCL_* or CMF_* variable). Models ($MODELS):
#   8b      (Llama 3 8B: hidden 4096, 32 layers, FFN 14336, vocab 128256, 32 heads / 8 KV heads of 128)
#   32b     (Qwen2.5 32B: hidden 5120, FFN 27648, vocab 152064, 40 heads / 8 KV heads of 128) with $L32 of its 64
#           layers (default 16, so that the file, 9.4 GB, is generated within the call; 64 = the real model, 35 GB)
#   32bhalf one tp-2 rank's share of 32b as a model of its own (FFN 13824, vocab 76032, 20 / 4 heads), run at tp 1:
#           the time of a rank's kernels on one GPU without any collective (the ceiling of tp 2)
# Environment: MODELS ("8b 32b"), L32 (16), TPS ("2"), STAGES ("build test ar bench"), AR_ENVS, T1_ENVS, TN_ENVS.
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
T1_ENVS=${T1_ENVS:-"- CMF_CUDA_GRAPH=0"}
TN_ENVS=${TN_ENVS:-"- CMF_CUDA_GRAPH=0 CMF_TP_PROFILE=1"}
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
CFG="-DCMF_WERROR=OFF -DCMF_SHARED_DIR=$R/$D/shared -DPKG_CONFIG_EXECUTABLE=$P/usr/bin/pkgconf -DCMAKE_C_FLAGS=-I$P/usr/include"
GP=""
gen() { # model name -> /tmp/tpm/NAME.cmf with make_random_llama binary $1
  case $2 in
    8b) geo="4096 32 14336 128256 32 8 128" ;;
    32b) geo="5120 $L32 27648 152064 40 8 128" ;;
    32bhalf) geo="5120 $L32 13824 76032 20 4 128" ;;
  esac
  $1 /tmp/tpm/$2.cmf q8_row $geo 0 0 10 > "$OUT/gen$2.log" 2>&1
}
mkdir -p /tmp/tpm
if has bench; then # the random models, from a CPU-only build, generated while the CUDA build and the tests run
  ( cmake -S . -B build-gen -DCMAKE_BUILD_TYPE=Release -DCMF_CUDA=OFF $CFG > "$OUT/build-gen.log" 2>&1 &&
    cmake --build build-gen -j8 --target make_random_llama >> "$OUT/build-gen.log" 2>&1 &&
    for mdl in $MODELS; do gen build-gen/tests/gpu/make_random_llama $mdl & done; wait ) &
  GP=$!
fi
if has build; then
  cmake -S . -B $B -DCMAKE_BUILD_TYPE=Release -DCMF_NCCL=ON ${NC:+-DCMF_NCCL_ROOT="$NC"} $CFG > "$OUT/build.log" 2>&1 &&
    cmake --build $B -j24 --target test_tp test_tp_cuda tp_bench ar_bench >> "$OUT/build.log" 2>&1
  brc=$?
  grep -E "CMF_NCCL_LIB|CMF_NCCL_INCLUDE" $B/CMakeCache.txt | head -2
  echo "build rc=$brc $(el)"
  if [ $brc -ne 0 ]; then grep -E 'error|Error' "$OUT/build.log" | head -30; exit 1; fi
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
  wait $GP
  echo "== models generated $(el)"; ls -l /tmp/tpm
  echo "== bench (decode, 64 tokens after 16 prompt + 8 warm-up) $(el)"
  bench() { # model tag tp env
    if [ "$4" = - ]; then timeout 200 $B/tests/tp/tp_bench $1 $3 cuda 64 2>&1 | sed "s/^/$2 /"
    else env $4 timeout 200 $B/tests/tp/tp_bench $1 $3 cuda 64 2>&1 | sed "s/^/$2 $4 /"; fi
  }
  for mdl in $MODELS; do
    f=/tmp/tpm/$mdl.cmf
    [ -f $f ] || { echo "no $f"; continue; }
    tag=$mdl; case $mdl in 32b*) tag=$mdl-${L32}L ;; esac
    for e in $T1_ENVS; do bench $f $tag 1 $e; done
    [ $mdl = 32bhalf ] && { rm -f $f; continue; }
    for tp in $TPS; do
      [ $tp -le $NG ] || { echo "tp $tp: only $NG GPUs"; continue; }
      for e in $TN_ENVS; do bench $f $tag $tp $e; done
    done
    rm -f $f
  done 2>&1 | tee "$OUT/bench.txt"
fi
echo "done $(el)"
