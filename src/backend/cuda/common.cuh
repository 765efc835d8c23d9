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

/* The sum of v over a block of 256 threads (warp sums, then the 8 warp sums by warp 0), returned to every thread;
 * sh: 9 floats of shared memory. One fixed order: RMSNorm kernels that must agree bit for bit share it. */
static __device__ __forceinline__ float block_sum256(float v, float *sh) {
    v = warp_sum(v);
    if ((threadIdx.x & 31) == 0) sh[threadIdx.x >> 5] = v;
    __syncthreads();
    float t = threadIdx.x < 8 ? sh[threadIdx.x] : 0.0f;
    if (threadIdx.x < 32) t = warp_sum(t);
    if (threadIdx.x == 0) sh[8] = t;
    __syncthreads();
    float r = sh[8];
    __syncthreads();
    return r;
}

/* One cache element: f16 (round to nearest even) or f32 (enum cmf_cuda_kv). */
static __device__ __forceinline__ void kv_store(void *c, int64_t i, float x, int f32) {
    if (f32) ((float *)c)[i] = x;
    else ((uint16_t *)c)[i] = __half_as_ushort(__float2half_rn(x));
}
/* The value a cache element stored by kv_store reads back as. */
static __device__ __forceinline__ float kv_round(float x, int f32) { return f32 ? x : __half2float(__float2half_rn(x)); }

/* One head of hd <= 256 values by one warp (lane + 32 i): the q/k RMSNorm (when w: x * inv * g as k_rmsnorm, f32 sum
 * of squares in the warp's order; gemma: g = 1 + w) from `in` into `out` (may be in), then the RoPE pairs of the
 * first rot dims of `out` rotated by p * inv_freq[i] (half or interleaved pairing; explicit fma / mul so that every
 * kernel that calls it gives the same bits). __syncwarp orders the lanes' writes of out. */
static __device__ __forceinline__ void warp_head_norm_rope(const float *in, float *out, int hd, const float *w,
                                                           float eps, int gemma, int rot, const float *inv_freq,
                                                           float p, int interleaved, int lane) {
    if (w) {
        float x[8], ss = 0.0f;
#pragma unroll
        for (int i = 0; i < 8; i++) {
            const int c = lane + 32 * i;
            x[i] = c < hd ? in[c] : 0.0f;
            ss = fmaf(x[i], x[i], ss);
        }
        ss = warp_sum(ss);
        const float inv = 1.0f / sqrtf(ss / (float)hd + eps);
#pragma unroll
        for (int i = 0; i < 8; i++) {
            const int c = lane + 32 * i;
            if (c < hd) out[c] = __fmul_rn(__fmul_rn(x[i], inv), gemma ? 1.0f + w[c] : w[c]);
        }
        __syncwarp();
    } else if (in != out) {
        for (int c = lane; c < hd; c += 32) out[c] = in[c];
        __syncwarp();
    }
    const int half = rot / 2;
    for (int i = lane; i < half; i += 32) {
        float sn, cs;
        sincosf(p * inv_freq[i], &sn, &cs);
        const int a = interleaved ? 2 * i : i, b = interleaved ? 2 * i + 1 : i + half;
        const float x0 = out[a], x1 = out[b];
        out[a] = __fmaf_rn(x0, cs, -__fmul_rn(x1, sn));
        out[b] = __fmaf_rn(x1, cs, __fmul_rn(x0, sn));
    }
    __syncwarp();
}

/* ---- Programmatic Dependent Launch (PDL; CUDA programming guide, "Programmatic Dependent Launch and
 * Synchronization", sm_90+) --------------------------------------------------------------------------------------
 * Kernels of the decode step are launched with cudaLaunchAttributeProgrammaticStreamSerialization (cu_launch), so
 * the next kernel's blocks can start while the previous one finishes. The rule that keeps this exact: every kernel
 * launched by cu_launch calls pdl_wait() before its first access to memory another kernel writes or reads (only
 * immutable data, the weights, may be touched before: matvec prefetches its rows into L2 there; and what the host
 * copied in before the step's first kernel, such as the positions), and pdl_trigger() only after pdl_wait(), so at
 * most the next kernel is early and every earlier one is complete when it passes its wait. Without the attribute
 * (CMF_CUDA_PDL=0, or a launch through <<<>>>) both are no-ops.
 * CMF_CUDA_PDL_EARLY=1 (compile time, an experiment: -DCMAKE_CUDA_FLAGS=-DCMF_CUDA_PDL_EARLY=1): each kernel lets the
 * next one launch just before its own wait instead of after it, so several kernels can be resident and loading
 * their weights while an earlier one still runs. Still exact: griddepcontrol.wait returns only once the previous
 * kernel is complete, which it is only after passing its own wait, so every earlier kernel is complete too. */
#ifndef CMF_CUDA_PDL_EARLY
#define CMF_CUDA_PDL_EARLY 0
#endif
static __device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#if CMF_CUDA_PDL_EARLY
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
static __device__ __forceinline__ void pdl_trigger() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && !CMF_CUDA_PDL_EARLY
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}
/* Both, in the order the rule above needs: the first line of a kernel that prefetches nothing. */
static __device__ __forceinline__ void pdl_enter() {
    pdl_wait();
    pdl_trigger();
}
/* ---- Hopper bulk copies into shared memory, completed on an mbarrier (PTX ISA "cp.async.bulk", "mbarrier"; sm_90).
 * Pattern: one thread inits the barrier (count 1), fences the init (mb_init_fence), then per use: mb_expect(bytes)
 * by that thread, bulk_copy()s of exactly those bytes, and every reader mb_wait(phase) with phase = use & 1. A copy
 * into a buffer that generic code read before needs fence.proxy.async first (mb_expect issues it). */
static __device__ __forceinline__ unsigned smem_u32(const void *p) { return (unsigned)__cvta_generic_to_shared(p); }
static __device__ __forceinline__ void mb_init(uint64_t *mb) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(smem_u32(mb)) : "memory");
}
/* After the inits, before any copy completes on them (a CTA is a cluster of one without a cluster launch). */
static __device__ __forceinline__ void mb_init_fence() {
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}
/* The next phase completes when `bytes` have landed (and this arrival): earlier generic reads of the destination
 * are ordered before the copies by the proxy fence. */
static __device__ __forceinline__ void mb_expect(uint64_t *mb, unsigned bytes) {
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_u32(mb)), "r"(bytes) : "memory");
}
/* n bytes (a multiple of 16; both addresses 16-byte aligned) from global src to shared dst, counted on mb. */
static __device__ __forceinline__ void bulk_copy(void *dst, const void *src, unsigned n, uint64_t *mb) {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                 ::"r"(smem_u32(dst)), "l"(src), "r"(n), "r"(smem_u32(mb))
                 : "memory");
}
/* Waits until the phase of parity `phase` completed; a copy that never lands traps after 2 s (a hang in a CUDA
 * graph would otherwise take the process). */
static __device__ __forceinline__ void mb_wait(uint64_t *mb, unsigned phase) {
    unsigned done = 0;
    uint64_t t_start = 0;
    for (unsigned it = 0; !done; it++) {
        asm volatile("{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
                     " selp.u32 %0, 1, 0, p;\n}"
                     : "=r"(done)
                     : "r"(smem_u32(mb)), "r"(phase)
                     : "memory");
        if (!done && (it & 1023) == 1023) {
            uint64_t now;
            asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
            if (!t_start) t_start = now;
            else if (now - t_start > 2000000000ull) __trap();
        }
    }
}
/* L2 prefetch hint of the 128-byte line holding p (weights only: see above). */
static __device__ __forceinline__ void prefetch_l2(const void *p) {
    asm volatile("prefetch.global.L2 [%0];" ::"l"(p));
}

/* A 16-byte weight load (non-coherent, no L1 allocation) under the L2 evict-first cache policy (PTX ISA,
 * "createpolicy" and ld's .L2::cache_hint; sm_80+): a decode step reads each weight once, so its chunks are the
 * L2's first victims and what the step reuses (the KV cache, activations, the attention partials) stays resident.
 * The row-group int8 products (matvec_i8.cu) and the f32-activation products (matvec.cu: f32 / f16 / bf16 / q8
 * chunks) load their weights so when CMF_CUDA_W_EF is 1 (the default; build with
 * -DCMAKE_CUDA_FLAGS=-DCMF_CUDA_W_EF=0 for the plain __ldg, e.g. bench/cuda/build_ab.sh). Measured:
 * bench/cuda/RESULTS.md, session 12. The streaming kernel (matvec_i8s.cu) keeps its loads (a runtime choice there
 * cost registers and 25% of Llama-8B decode; its models gained nothing). */
#ifndef CMF_CUDA_W_EF
#define CMF_CUDA_W_EF 1
#endif
/* The same policy in the streaming int8 products (matvec_i8s.cu): 0 by default (an A/B build option). */
#ifndef CMF_CUDA_W_EF_STREAM
#define CMF_CUDA_W_EF_STREAM 0
#endif
static __device__ __forceinline__ uint4 ld_w16_ef(const void *p) {
    uint64_t pol;
    asm("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(pol));
    uint4 v;
    asm volatile("ld.global.nc.L1::no_allocate.L2::cache_hint.v4.u32 {%0, %1, %2, %3}, [%4], %5;"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p), "l"(pol));
    return v;
}

/* Weight spans to prefetch into L2 (cmf_cuda_set_l2_prefetch), as a kernel argument. */
struct CuPf {
    const uint8_t *p[CMF_CUDA_PF_SPANS];
    uint64_t n[CMF_CUDA_PF_SPANS]; /* bytes, multiples of 16 (p 16-byte aligned) */
    uint64_t tot;                  /* sum of n; 0: nothing */
};
/* The calling thread's pending spans (cmf_cuda_set_l2_prefetch; matvec_i8.cu), for a launch to take. */
CuPf cu_pf_pending(void);

/* Block blk of nblk's even share of the spans' bytes, issued by the calling thread as cp.async.bulk.prefetch.L2 of
 * at most 64 KiB each (PTX ISA, "cp.async.bulk.prefetch"; sm_90). A hint: weights only (see the PDL rule above). */
static __device__ __forceinline__ void l2pf_share(const uint8_t *const *p, const uint64_t *n, uint64_t tot,
                                                  uint64_t blk, uint64_t nblk) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    const uint64_t per = ((tot + nblk - 1) / nblk + 15) & ~(uint64_t)15;
    uint64_t b = per * blk, off = 0;
    const uint64_t e = b + per < tot ? b + per : tot;
    for (int k = 0; k < CMF_CUDA_PF_SPANS && b < e; k++) {
        if (b < off + n[k]) {
            const uint64_t t = (e < off + n[k] ? e : off + n[k]) - off;
            for (uint64_t s = b - off; s < t; s += 65536) {
                const uint32_t len = (uint32_t)(t - s < 65536 ? t - s : 65536);
                asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(p[k] + s), "r"(len) : "memory");
            }
            b = off + t;
        }
        off += n[k];
    }
#else
    (void)p, (void)n, (void)tot, (void)blk, (void)nblk;
#endif
}

/* The residual add and RMSNorm of one row of d values by a block of 128 threads, with the bits of k_add_rmsnorm
 * (elementwise.cu: 256 threads, thread v sums elements v, v + 256, ..., then block_sum256): each thread plays
 * threads v = tid and tid + 128 with their own partial sums, combined in that kernel's order. x[i] += o[i], then
 * out[i] = x[i] * inv * (w ? (gemma ? 1 + w[i] : w[i]) : 1). out may be o. o is read through L2 (written by other
 * blocks of the calling kernel). sh: 9 floats of shared memory. */
static __device__ __forceinline__ void block_add_rmsnorm128(float *x, const float *o, float *out, const float *w,
                                                            int64_t d, float eps, int gemma, float *sh) {
    const int tid = threadIdx.x;
    float ss[2] = {0.0f, 0.0f};
#pragma unroll
    for (int h = 0; h < 2; h++)
        for (int64_t i = tid + 128 * h; i < d; i += 256) {
            const float v = __ldcg(x + i) + __ldcg(o + i);
            x[i] = v;
            ss[h] = fmaf(v, v, ss[h]);
        }
#pragma unroll
    for (int h = 0; h < 2; h++) {
        const float s = warp_sum(ss[h]);
        if ((tid & 31) == 0) sh[(tid >> 5) + 4 * h] = s;
    }
    __syncthreads();
    float t = tid < 8 ? sh[tid] : 0.0f;
    if (tid < 32) t = warp_sum(t);
    if (tid == 0) sh[8] = t;
    __syncthreads();
    const float inv = 1.0f / sqrtf(sh[8] / (float)d + eps);
    __syncthreads();
    for (int h = 0; h < 2; h++)
        for (int64_t i = tid + 128 * h; i < d; i += 256) {
            float g = w ? (gemma ? 1.0f + w[i] : w[i]) : 1.0f;
            out[i] = x[i] * inv * g;
        }
}

/* 1 unless CMF_CUDA_I8_PRE=0 (read once; matvec_i8.cu): whether decode kernels load the immutable data they use
 * late (q8 row scales, norm weights, RoPE frequencies) before the PDL wait. An A/B switch; results are identical. */
int cu_pre_on(void);

/* 1 unless CMF_CUDA_PDL=0 (read once; runtime.cu): whether cu_launch sets the PDL attribute. */
extern "C" int cmf_cuda_pdl_on(void);

/* kernel<<<grid, block, smem, s>>>(args...) with the PDL attribute when cmf_cuda_pdl_on(); the kernel must follow
 * the rule above. Returns the launch's error (also left for cudaGetLastError / CU_LAUNCHED). */
template <typename... KArgs, typename... Args>
static inline cudaError_t cu_launch(void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t smem, cudaStream_t s,
                                    Args... args) {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = s;
    cudaLaunchAttribute at[1];
    at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    at[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = at;
    cfg.numAttrs = cmf_cuda_pdl_on() ? 1 : 0;
    return cudaLaunchKernelEx(&cfg, kernel, ((KArgs)args)...);
}

static inline unsigned grid1d(int64_t n, int threads) {
    int64_t b = (n + threads - 1) / threads;
    return (unsigned)(b > 65535 * 32 ? 65535 * 32 : (b < 1 ? 1 : b));
}

#endif
