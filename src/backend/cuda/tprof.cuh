/* tprof.cuh — the decode kernels' timeline, a compile-time opt-in (-DCMF_CUDA_TPROF=1 in CMAKE_CUDA_FLAGS; without
 * it every macro below is empty and no kernel changes).
 *
 * Lane 0 of each warp of an instrumented kernel reads %globaltimer (PTX ISA, "Special registers": a nanosecond
 * counter common to the whole device) at the warp's start (t0), after the PDL wait (t1), after its prologue (t2: the
 * activations are in shared memory; attention: the split's partial is done) and at its end (t3) — the products'
 * prologue also when its first activations arrived (t4), when its quantization is done (t5), and with the RMSNorm
 * prologue when the norm's first inputs arrived (t7) and its scale is known (t6) — and appends one
 * record (cmf_cuda_tprec: kind, key = the launch's first weight or K cache base, SM, block, warp) to a device ring
 * that cmf_cuda_tprof_start / cmf_cuda_tprof_read (cuda_ops.h, tprof.cu) reset and read. The key tells launches of
 * one step apart (every layer's weights and cache have their own address). Cost: one atomic and one 48-byte store
 * per warp, plus four timer reads. Each translation unit that instruments a kernel has its own g_tp (no relocatable
 * device code), bound by its CMF_TPROF_BINDER function. */
#ifndef CMF_BACKEND_CUDA_TPROF_CUH
#define CMF_BACKEND_CUDA_TPROF_CUH

#include "backend/cuda/cuda_ops.h"

#ifndef CMF_CUDA_TPROF
#define CMF_CUDA_TPROF 0
#endif

/* The ring: mask + 1 records (a power of two), the running count. */
struct TpBuf {
    cmf_cuda_tprec *rec;
    unsigned *n;
    unsigned mask;
};

#if CMF_CUDA_TPROF
static __device__ TpBuf g_tp;

static __device__ __forceinline__ unsigned long long tp_now() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

static __device__ __noinline__ void tp_put(const unsigned long long *t, unsigned kind, const void *key) {
    if ((threadIdx.x & 31) || !g_tp.rec) return;
    const unsigned i = atomicAdd(g_tp.n, 1u) & g_tp.mask;
    unsigned sm;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
    cmf_cuda_tprec r;
    for (int k = 0; k < 8; k++) r.t[k] = t[k];
    r.key = (uint64_t)(uintptr_t)key;
    r.kind = kind, r.sm = sm, r.block = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
    r.warp = threadIdx.x >> 5;
    g_tp.rec[i] = r;
}

/* The timer once v is available (the asm's input: not before the load that produced v completes). */
static __device__ __forceinline__ unsigned long long tp_now_after(float v) {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t) : "f"(v));
    return t;
}

#define TP_DECL unsigned long long tp_t[8] = {0, 0, 0, 0, 0, 0, 0, 0}
#define TP_ARG tp_t
#define TP_AT(i) (tp_t[i] = tp_now())
#define TP_PUT(kind, key) tp_put(tp_t, (kind), (const void *)(key))
#define CMF_TPROF_BINDER(fn)                                                                                           \
    extern "C" int fn(const void *b) { return cudaMemcpyToSymbol(g_tp, b, sizeof(TpBuf)) == cudaSuccess; }
#else
#define TP_DECL
#define TP_ARG nullptr
#define TP_AT(i)
#define TP_PUT(kind, key)
#define CMF_TPROF_BINDER(fn)                                                                                           \
    extern "C" int fn(const void *b) {                                                                                 \
        (void)b;                                                                                                       \
        return 0;                                                                                                      \
    }
#endif

/* Record kinds (cmf_cuda_tprec.kind). */
enum { TP_I8S = 1, TP_I8 = 2, TP_ATTN_CL = 3, TP_ATTN = 4, TP_PREQ = 5 };

#endif
