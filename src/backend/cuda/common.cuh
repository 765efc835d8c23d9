/* common.cuh — internal helpers of the CUDA kernel library: error mapping to cmf_status, f16/bf16 decode, warp
 * reductions. Not part of the API (cuda_ops.h is). */
#ifndef CMF_BACKEND_CUDA_COMMON_CUH
#define CMF_BACKEND_CUDA_COMMON_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "backend/cuda/cuda_ops.h"

extern "C" {
#include "quant/dtype.h"
#include "util/error.h"
}

/* Maps a CUDA runtime error to CMF_E_IO with "cuda: <what>: <error string>". */
static inline cmf_status cu_fail(cudaError_t e, const char *what) {
    return cmf_err(CMF_E_IO, "cuda: %s: %s", what, cudaGetErrorString(e));
}
#define CU_TRY(call, what)                                                                                       \
    do {                                                                                                         \
        cudaError_t e_ = (call);                                                                                 \
        if (e_ != cudaSuccess) return cu_fail(e_, what);                                                         \
    } while (0)
/* After a launch: configuration / launch errors (asynchronous faults surface at the next sync). */
#define CU_LAUNCHED(what) CU_TRY(cudaGetLastError(), what)

#define CU_STREAM(s) ((cudaStream_t)(s))

static __device__ __forceinline__ float dev_f16(uint16_t h) { return __half2float(__ushort_as_half(h)); }
static __device__ __forceinline__ float dev_bf16(uint16_t h) { return __uint_as_float((uint32_t)h << 16); }

static __device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
static __device__ __forceinline__ float warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

static inline unsigned grid1d(int64_t n, int threads) {
    int64_t b = (n + threads - 1) / threads;
    return (unsigned)(b > 65535 * 32 ? 65535 * 32 : (b < 1 ? 1 : b));
}

#endif
