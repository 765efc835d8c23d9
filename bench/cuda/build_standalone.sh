#!/usr/bin/env bash
# Builds the CUDA kernel library, its test and its bench without the rest of the project (no cJSON / PCRE2 /
# utf8proc / libmicrohttpd needed), for the device machine: nvcc for src/backend/cuda/*.cu (sm_90 code + compute_90
# PTX), cc for the CPU references in src/quant and src/util. Usage: bench/cuda/build_standalone.sh [outdir]
set -euo pipefail
cd "$(dirname "$0")/../.."
B=${1:-build-cuda-standalone}
mkdir -p "$B/obj"
NVCC=${NVCC:-nvcc}
CC=${CC:-cc}
GENCODE="-gencode=arch=compute_90,code=sm_90 -gencode=arch=compute_90,code=compute_90"
CFLAGS="-std=c11 -O2 -Wall -Wextra -Werror -D_POSIX_C_SOURCE=200809L -Iinclude -Isrc -Itests"
pids=()
for f in src/backend/cuda/*.cu; do
  o="$B/obj/$(basename "$f" .cu).o"
  "$NVCC" -std=c++17 -O3 $GENCODE -Xptxas -v -Xcompiler=-Wall,-Wextra -Werror=all-warnings -Iinclude -Isrc \
    -c "$f" -o "$o" 2> "$B/obj/$(basename "$f" .cu).ptxas.log" &
  pids+=($!)
done
for f in src/quant/*.c src/util/error.c tests/testutil.c tests/cuda/cuda_ref.c; do
  case "$f" in src/quant/policy.c) continue;; esac
  "$CC" $CFLAGS -c "$f" -o "$B/obj/c_$(echo "$f" | tr / _ | sed 's/\.c$//').o" &
  pids+=($!)
done
fail=0
for p in "${pids[@]}"; do wait "$p" || fail=1; done
if [ $fail -ne 0 ]; then cat "$B"/obj/*.ptxas.log >&2; exit 1; fi
ar rcs "$B/libcmf_cuda_sa.a" "$B"/obj/*.o
CUDA_LIB=$(dirname "$(command -v "$NVCC")")/../lib64
LIBS="-L$CUDA_LIB -lcublas -lcudart_static -ldl -lrt -lpthread -lm -lstdc++"
"$CC" $CFLAGS tests/cuda/test_cuda_ops.c "$B/libcmf_cuda_sa.a" $LIBS -o "$B/test_cuda_ops"
"$CC" $CFLAGS bench/cuda/bench_cuda.c "$B/libcmf_cuda_sa.a" -I"$CUDA_LIB/../include" $LIBS -o "$B/bench_cuda"
echo "built $B/test_cuda_ops $B/bench_cuda"
