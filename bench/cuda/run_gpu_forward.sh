#!/usr/bin/env bash
# One device call for the CUDA forward (backend_cuda.cu): build the whole project on the device machine (Release),
# run the GPU tests there (tests/gpu compares the CUDA and CPU backends; test_cuda_ops the kernels), then bench a
# random Llama-shaped ~1B model (bench/cuda/make_random_llama.c) at f16 and q8_row with `cmf bench`, on the GPU
# and on the CPU. Logs go to $OUT (./out-device when unset).
# The device machine has no cJSON / PCRE2 / utf8proc / libmicrohttpd / pkg-config: their Debian .debs are carried
# in .devdeps/ (ignored by git; `apt-get download libcjson1 libcjson-dev libpcre2-8-0 libpcre2-dev libpcre2-16-0
# libpcre2-32-0 libpcre2-posix3 libutf8proc2 libutf8proc-dev libmicrohttpd12 libmicrohttpd-dev pkgconf pkgconf-bin
# libpkgconf3`) and unpacked with dpkg -x into a prefix; .devdeps/shared/data/hf-tiny is a copy of the shared test
# data the tests read. When .devdeps/head.tar exists (`git archive HEAD > .devdeps/head.tar`), that committed tree
# is built instead of the working tree, so that other people's half-done files cannot break the run.
# Usage (from the repository root): bash bench/cuda/run_gpu_forward.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
R=$PWD
OUT=${OUT:-$R/out-device}
mkdir -p "$OUT"
if [ -f .devdeps/head.tar ]; then rm -rf /tmp/cmfsrc && mkdir -p /tmp/cmfsrc && tar -xf .devdeps/head.tar -C /tmp/cmfsrc && cd /tmp/cmfsrc; fi
B=build-gf
P=/tmp/cmfdeps
mkdir -p $P && for f in "$R"/.devdeps/*.deb; do dpkg -x "$f" $P; done
sed -i '/^Requires.private/d' $P/usr/lib/x86_64-linux-gnu/pkgconfig/libmicrohttpd.pc # gnutls: the .so is there, its .pc not
export LD_LIBRARY_PATH=$P/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
export PKG_CONFIG_SYSROOT_DIR=$P PKG_CONFIG_LIBDIR=$P/usr/lib/x86_64-linux-gnu/pkgconfig:$P/usr/share/pkgconfig
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv > "$OUT/gpu.txt" 2>&1
ldconfig -p | grep -E 'gnutls|nettle' | head -3 > "$OUT/libs.txt"
echo "== configure + build"
S=$(date +%s)
cmake -S . -B $B -DCMAKE_BUILD_TYPE=Release -DCMF_WERROR=OFF -DCMF_SHARED_DIR="$R/.devdeps/shared" \
  -DPKG_CONFIG_EXECUTABLE=$P/usr/bin/pkgconf -DCMAKE_C_FLAGS="-I$P/usr/include" > "$OUT/build.log" 2>&1 &&
  cmake --build $B -j16 --target cmf-cli test_gpu_forward test_cuda_ops make_random_llama >> "$OUT/build.log" 2>&1
brc=$?
echo "build rc=$brc in $(( $(date +%s) - S )) s"
if [ $brc -ne 0 ]; then grep -E 'error|Error|not found' "$OUT/build.log" | head -30; tail -20 "$OUT/build.log"; exit 1; fi
echo "== tests"
mkdir -p /tmp/gft; CMF_SHARED=$R/.devdeps/shared CMF_TMP=/tmp/gft CMF_TESTDATA=$PWD/tests/data timeout 300 $B/tests/gpu/test_gpu_forward > "$OUT/gpu_forward.log" 2>&1; echo "test_gpu_forward rc=$?"
( cd $B && timeout 200 ctest --timeout 180 -R "test_cuda_ops" > "$OUT/ctest.log" 2>&1 )
grep -E 'tests passed|Failed|\*\*\*|Skipped' "$OUT/ctest.log" | head -20
cat "$OUT/gpu_forward.log" | tail -60
echo "== bench"
for dt in f16 q8_row; do
  m=/tmp/rl-$dt.cmf
  timeout 200 $B/tests/gpu/make_random_llama $m $dt || continue
  ls -l $m
  echo "-- GPU $dt"; CMF_GPU=1 timeout 120 $B/cmf bench $m -p 512 -n 128 -r 3 2>&1 | tail -3
  echo "-- GPU $dt, short prompts"; CMF_GPU=1 timeout 60 $B/cmf bench $m -p 64 -n 0 -r 3 2>&1 | tail -1
  echo "-- CPU $dt (16 threads)"; timeout 100 $B/cmf bench $m -p 64 -n 16 -r 2 -t 16 2>&1 | tail -3
  rm -f $m
done
