#!/usr/bin/env bash
# One device call (kind nvidia-h200-x2) for tensor parallelism over NCCL: build the committed tree (Release, CUDA +
# NCCL from the device's pip package nvidia-nccl-cu13), run tests/tp (the CPU split and test_tp_cuda: tp 1 = one
# GPU bit for bit, tp 2 within 2e-3 of one GPU with identical greedy tokens), then decode tok/s of random q8_row
# models at tp 1 and 2 with bench/tp/tp_bench (the all-reduce time per token from a separate CMF_TP_PROFILE run):
#   8B-shaped  (Llama 3 8B: hidden 4096, 32 layers, FFN 14336, vocab 128256, 32 heads / 8 KV heads of 128)
#   32B-shaped (Qwen2.5 32B: hidden 5120, FFN 27648, vocab 152064, 40 heads / 8 KV heads of 128) with 16 of its
#              64 layers, so that the file (8.9 GB) is generated within the call; per-layer work is the same, so
#              the tp 2 / tp 1 ratio is that of the 64-layer model up to the head's share (~2% there, ~8% here).
# Logs go to $OUT. Needs a carried folder ignored by git ($TP_DEPS, default .tpdev) with the *.deb files of
# bench/cuda/run_gpu_forward.sh, shared/data/hf-tiny and tp_head.tar (`git archive HEAD > .tpdev/tp_head.tar`).
set -uo pipefail
cd "$(dirname "$0")/../.."
R=$PWD
D=${TP_DEPS:-.tpdev} # the carried folder: *.deb, shared/data/hf-tiny, tp_head.tar
OUT=${OUT:-$R/out-device}
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export CMF_CUDA_GRAPH=0 # tp ranks run without the backend's decode graphs; tp 1 is timed both ways
S0=$(date +%s)
rm -rf /tmp/tpsrc && mkdir -p /tmp/tpsrc && tar -xf $D/tp_head.tar -C /tmp/tpsrc && cd /tmp/tpsrc
P=/tmp/cmfdeps
mkdir -p $P && for f in "$R/$D"/*.deb; do dpkg -x "$f" $P; done
sed -i '/^Requires.private/d' $P/usr/lib/x86_64-linux-gnu/pkgconfig/libmicrohttpd.pc
NC=$(python3 -c "import nvidia.nccl, os; print(os.path.dirname(nvidia.nccl.__file__))" 2>/dev/null)
echo "nccl: $NC"; ls "$NC" "$NC/lib" 2>&1 | head
export LD_LIBRARY_PATH=$NC/lib:$P/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
export PKG_CONFIG_SYSROOT_DIR=$P PKG_CONFIG_LIBDIR=$P/usr/lib/x86_64-linux-gnu/pkgconfig:$P/usr/share/pkgconfig
nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv > "$OUT/gpu.txt" 2>&1; cat "$OUT/gpu.txt"
nvidia-smi topo -m > "$OUT/topo.txt" 2>&1
B=build-tp
cmake -S . -B $B -DCMAKE_BUILD_TYPE=Release -DCMF_WERROR=OFF -DCMF_SHARED_DIR="$R/$D/shared" -DCMF_NCCL=ON \
  -DCMF_NCCL_ROOT="$NC" -DPKG_CONFIG_EXECUTABLE=$P/usr/bin/pkgconf -DCMAKE_C_FLAGS="-I$P/usr/include" > "$OUT/build.log" 2>&1 &&
  cmake --build $B -j32 --target test_tp test_tp_cuda tp_bench make_random_llama cmf-cli >> "$OUT/build.log" 2>&1
brc=$?
grep -E "CMF_NCCL|nccl" $B/CMakeCache.txt | head -4
echo "build rc=$brc at $(( $(date +%s) - S0 )) s"
if [ $brc -ne 0 ]; then grep -E 'error|Error' "$OUT/build.log" | head -30; exit 1; fi
# the two random models, generated while the tests run
mkdir -p /tmp/tpm
( $B/tests/gpu/make_random_llama /tmp/tpm/8b.cmf q8_row 4096 32 14336 128256 32 8 128 0 0 12 > "$OUT/gen8b.log" 2>&1 ) &
G1=$!
( $B/tests/gpu/make_random_llama /tmp/tpm/32b.cmf q8_row 5120 16 27648 152064 40 8 128 0 0 12 > "$OUT/gen32b.log" 2>&1 ) &
G2=$!
echo "== tests"
mkdir -p /tmp/tpt
CMF_SHARED=$R/$D/shared CMF_TMP=/tmp/tpt timeout 200 $B/tests/tp/test_tp_cuda > "$OUT/test_tp_cuda.log" 2>&1
echo "test_tp_cuda rc=$?"; cat "$OUT/test_tp_cuda.log" | tail -40
CMF_SHARED=$R/$D/shared CMF_TMP=/tmp/tpt timeout 60 $B/tests/tp/test_tp > "$OUT/test_tp.log" 2>&1
echo "test_tp (cpu) rc=$?"
wait $G1; echo "gen 8b rc=$? at $(( $(date +%s) - S0 )) s"; tail -1 "$OUT/gen8b.log"
wait $G2; echo "gen 32b rc=$? at $(( $(date +%s) - S0 )) s"; tail -1 "$OUT/gen32b.log"
echo "== bench (decode, 64 tokens after 16 prompt + 8 warm-up)"
for mdl in 8b 32b; do
  f=/tmp/tpm/$mdl.cmf
  [ -f $f ] || continue
  ls -l $f
  CMF_CUDA_GRAPH=1 timeout 150 $B/tests/tp/tp_bench $f 1 cuda 64 2>&1 | sed "s/^/$mdl graphs on /"
  for tp in 1 2; do timeout 150 $B/tests/tp/tp_bench $f $tp cuda 64 2>&1 | sed "s/^/$mdl /"; done
  CMF_TP_PROFILE=1 timeout 150 $B/tests/tp/tp_bench $f 2 cuda 64 2>&1 | sed "s/^/$mdl profiled /"
  rm -f $f
done 2>&1 | tee "$OUT/bench.txt"
echo "done at $(( $(date +%s) - S0 )) s"
