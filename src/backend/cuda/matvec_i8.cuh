/* matvec_i8.cuh — the device pieces of the int8-activation decode products (matvec_i8.cu: row groups of 8 warps;
 * matvec_i8s.cu: streaming warps) that both kernels share, and that other decode kernels may include: the Q8_0
 * activation prologue (llama.cpp's Q8_0 rule as the CPU's one-level path, src/backend/cpu/kern_scalar.c: d = absmax /
 * 127, q = round-half-away(x * 127 / absmax), clamped to +-127; q4tp activations in nibble order), the prologue
 * RMSNorm scales in k_rmsnorm's order, the per-chunk integer dot products of a q8_row 16-column chunk and a q4tp
 * 32-column tile (CMF_FORMAT.md §2.2, §2.6), the GLU activations and the L2 prefetch spans. Internal. */
#ifndef CMF_BACKEND_CUDA_MATVEC_I8_CUH
#define CMF_BACKEND_CUDA_MATVEC_I8_CUH

#include <stdlib.h>

#include "backend/cuda/tprof.cuh"
#include "backend/cuda/weights.cuh"

#define I8_WARPS 8
#define I8_R 2
#define I8_U 4
#define I8_SMEM_MAX (200 * 1024)

/* int8 values, f32 scales and int sums of every level: levels * n * cols * (1 + 4/32 + 4/32) bytes */
static inline size_t i8_smem(int64_t cols, int n, int levels) { return (size_t)levels * (size_t)n * (size_t)cols * 5 / 4; }

/* Columns of one lane's 16-byte chunk. */
template <int DT> struct I8Chunk {
    static constexpr int W = DT == CMF_DT_Q8_ROW ? 16 : 32;
    static constexpr int STEP = 32 * W; /* columns of one warp step */
};

/* The block's share of the L2 prefetch spans (thread 0 issues it; common.cuh l2pf_share). */
static __device__ __forceinline__ void i8_l2pf(const I8Job &j) {
    l2pf_share(j.pf, j.pfn, j.pf_tot, blockIdx.x, gridDim.x);
}

/* One level of one block of 32 held by 8 lanes (4 values each, e): Q8_0 scale d, int8 q, the packed word p (q4tp:
 * nibble order) and the block's int sum s (all 8 lanes get d and s). */
template <int DT>
static __device__ __forceinline__ void i8_qblock(const float (&e)[4], int sub, float *d_out, int (&q)[4],
                                                 uint32_t *p_out, int *s_out) {
    float a = fmaxf(fmaxf(fabsf(e[0]), fabsf(e[1])), fmaxf(fabsf(e[2]), fabsf(e[3])));
    a = fmaxf(a, __shfl_xor_sync(0xffffffffu, a, 1));
    a = fmaxf(a, __shfl_xor_sync(0xffffffffu, a, 2));
    a = fmaxf(a, __shfl_xor_sync(0xffffffffu, a, 4));
    /* a NaN in the block (fmaxf drops it) makes the scale NaN and its q 0, so every product that reads the block is
     * NaN, as the CPU quantizer (kern_scalar.c) and an f32 product do */
    const bool nan_l = e[0] != e[0] || e[1] != e[1] || e[2] != e[2] || e[3] != e[3];
    const bool nan_b = (__ballot_sync(0xffffffffu, nan_l) >> (threadIdx.x & 24)) & 0xffu;
    const float d = nan_b ? __int_as_float(0x7fc00000) : a / 127.0f, id = a > 0.0f ? 127.0f / a : 0.0f;
#pragma unroll
    for (int m = 0; m < 4; m++) {
        const float y = __fmul_rn(e[m], id);
        int qi = (int)__fadd_rn(y, y >= 0.0f ? 0.5f : -0.5f);
        q[m] = qi > 127 ? 127 : qi < -127 ? -127 : qi;
    }
    uint32_t p = (uint32_t)(q[0] & 0xff) | (uint32_t)(q[1] & 0xff) << 8 | (uint32_t)(q[2] & 0xff) << 16 |
                 (uint32_t)(q[3] & 0xff) << 24;
    int s = q[0] + q[1] + q[2] + q[3];
    if constexpr (DT == CMF_DT_Q4TP) { /* lanes 2j, 2j+1 hold a group of 8: store evens, then odds */
        const uint32_t o = __shfl_xor_sync(0xffffffffu, p, 1);
        p = (sub & 1) ? __byte_perm(o, p, 0x7531) : __byte_perm(p, o, 0x6420);
    }
    s += __shfl_xor_sync(0xffffffffu, s, 1);
    s += __shfl_xor_sync(0xffffffffu, s, 2);
    s += __shfl_xor_sync(0xffffffffu, s, 4);
    *d_out = d, *p_out = p, *s_out = s;
}

/* The prologue: x [N][cols] f32 -> per level l < lv: xq [l][N][cols] int8 (q4tp: nibble order in each group of 8),
 * xs [l][N][nb] scales, sx [l][N][nb] int sums; level 2 quantizes what level 1 left (x - d1 * q1), as the CPU's
 * two-level path. Groups of 8 lanes own one block of 32 (a float4 each); 32 blocks per pass of the block, 4
 * passes' loads issued together. Every thread of the block takes part. base0 / bstep: the first pass's block and
 * the step between passes (k_i8_prequant spreads the passes over its blocks; one block: 0, 128).
 * Cost: every warp of every block of a product runs this after the PDL wait, so its instruction count is the
 * prologue's time (session 21: ~700 instructions per warp when all 4 of a pass's slots were computed whatever the
 * width). A slot no lane of the warp has a block in (base + 32 k + 4 warp >= total) is skipped (a warp-uniform
 * branch), and the indices are 32-bit: b * 32 needs N * cols < 2^31, which the callers' caps keep far below
 * (mv_i8_usable: 200 KiB of shared memory, N * cols <= 163,840; k_i8_prequant: CMF_CUDA_I8Q_BYTES). */
template <int DT, int N>
static __device__ __forceinline__ void i8_quantize(const float *__restrict__ x, int64_t cols, int lv, int8_t *xq,
                                                   float *xs, int *sx, const I8Job &j, const float *ninv,
                                                   float *xout, int64_t base0 = 0, int64_t bstep = 4 * 32,
                                                   unsigned long long *tpt = nullptr) {
    const int sub = threadIdx.x & 7, oct = threadIdx.x >> 3, w4 = oct & ~3; /* 32 octs; the warp's first */
    const int nb = (int)(cols >> 5), total = N * nb;
    const bool nw16 = ((uintptr_t)j.nw & 15u) == 0; /* the norm weights as float4 (else four scalar loads) */
    for (int base = (int)base0; base < total; base += (int)bstep) {
        /* every load of the pass first (activations and, with the RMSNorm, its weights): one round trip for all */
        float4 v[4], g[4];
#pragma unroll
        for (int k = 0; k < 4; k++) {
            const int b = base + 32 * k + oct;
            const bool in = b < total;
            v[k] = make_float4(0, 0, 0, 0);
            g[k] = make_float4(1.0f, 1.0f, 1.0f, 1.0f);
            if (base + 32 * k + w4 >= total) continue; /* warp-uniform: no lane of the warp has this slot */
            if (in) v[k] = __ldg((const float4 *)(x + b * 32 + sub * 4));
            if (ninv && j.nw && in) {
                const float *gp = j.nw + (N == 1 ? b : b % nb) * 32 + sub * 4;
                g[k] = nw16 ? __ldg((const float4 *)gp) : make_float4(__ldg(gp), __ldg(gp + 1), __ldg(gp + 2), __ldg(gp + 3));
            }
        }
#if CMF_CUDA_TPROF
        if (tpt && base == base0) tpt[4] = tp_now_after(v[0].x); /* tprof.cuh: the first activations are in */
#endif
        float e[4][4];
#pragma unroll
        for (int k = 0; k < 4; k++) {
            const int b = base + 32 * k + oct;
            e[k][0] = v[k].x, e[k][1] = v[k].y, e[k][2] = v[k].z, e[k][3] = v[k].w;
            if (ninv && b < total) { /* the RMSNorm of the prologue: k_rmsnorm's x * inv * g */
                const float inv = ninv[N == 1 ? 0 : b / nb];
                const float gm[4] = {g[k].x, g[k].y, g[k].z, g[k].w};
#pragma unroll
                for (int m = 0; m < 4; m++) {
                    const float gv = j.nw && j.ngemma ? 1.0f + gm[m] : gm[m];
                    e[k][m] = __fmul_rn(__fmul_rn(e[k][m], inv), gv);
                }
                if (xout) *(float4 *)(xout + b * 32 + sub * 4) = make_float4(e[k][0], e[k][1], e[k][2], e[k][3]);
            }
        }
        if (lv == 1 && j.qilp) { /* one level: each slot's block as a straight-line chain, stored at once */
#pragma unroll
            for (int k = 0; k < 4; k++) {
                const int b = base + 32 * k + oct;
                if (base + 32 * k + w4 >= total) break; /* warp-uniform, and so are the later slots */
                float d;
                int q[4], sm;
                uint32_t p;
                i8_qblock<DT>(e[k], sub, &d, q, &p, &sm);
                if (b < total) {
                    *(uint32_t *)(xq + b * 32 + sub * 4) = p;
                    if (sub == 0) xs[b] = d, sx[b] = sm;
                }
            }
            continue;
        }
#pragma unroll
        for (int k = 0; k < 4; k++) {
            const int b = base + 32 * k + oct;
            if (base + 32 * k + w4 >= total) break;
            for (int l = 0; l < lv; l++) {
                float d;
                int q[4], s;
                uint32_t p;
                i8_qblock<DT>(e[k], sub, &d, q, &p, &s);
                if (b < total) {
                    *(uint32_t *)(xq + (int64_t)l * total * 32 + b * 32 + sub * 4) = p;
                    if (sub == 0) xs[l * total + b] = d, sx[l * total + b] = s;
                }
#pragma unroll
                for (int m = 0; m < 4; m++) e[k][m] = __fsub_rn(e[k][m], __fmul_rn(d, (float)q[m])); /* the remainder */
            }
        }
    }
#if CMF_CUDA_TPROF
    if (tpt) tpt[5] = tp_now();
#else
    (void)tpt;
#endif
}

/* The prologue's RMSNorm scales: ninv[t] = 1 / sqrt(mean(nx[t]^2) + eps) for t < N with k_rmsnorm's order
 * (elementwise.cu: thread i sums elements i, i + 256, ..., then block_sum256), so the normalized input has its bits. */
template <int N>
static __device__ __forceinline__ void i8_norm_inv(const I8Job &j, int64_t d, float *ninv, float *sh,
                                                   unsigned long long *tpt = nullptr) {
    for (int t = 0; t < N; t++) {
        const float *xr = j.nx + (int64_t)t * d;
        float ss = 0.0f;
        if (j.norm1) { /* 8 loads in flight per thread, then the same sums in the same order */
            for (int i0 = threadIdx.x; i0 < (int)d; i0 += 256 * 8) {
                float v[8];
#pragma unroll
                for (int k = 0; k < 8; k++) v[k] = i0 + 256 * k < (int)d ? xr[i0 + 256 * k] : 0.0f;
#pragma unroll
                for (int k = 0; k < 8; k++)
                    if (i0 + 256 * k < (int)d) ss = fmaf(v[k], v[k], ss);
            }
        } else {
            for (int64_t i = threadIdx.x; i < d; i += 256) ss = fmaf(xr[i], xr[i], ss);
        }
#if CMF_CUDA_TPROF
        if (tpt && t == 0) tpt[7] = tp_now_after(ss);
#endif
        ss = block_sum256(ss, sh);
#if CMF_CUDA_TPROF
        if (tpt && t == 0) tpt[6] = tp_now_after(ss);
#else
        (void)tpt;
#endif
        if (threadIdx.x == 0) ninv[t] = 1.0f / sqrtf(ss / (float)d + j.neps);
    }
    __syncthreads();
}

static __device__ __forceinline__ float i8_act(float a, int gelu) {
    return gelu ? 0.5f * a * (1.0f + tanhf(0.7978845608028654f * (a + 0.044715f * a * a * a))) : a / (1.0f + expf(-a));
}

/* An integer environment switch (dflt when unset or empty); callers read it once (benign races: every thread computes
 * the same value). */
static inline int env_int(const char *name, int dflt) {
    const char *e = getenv(name);
    return e && e[0] ? atoi(e) : dflt;
}

/* Multiprocessors of the current device (read once per process; the backends use one device type). */
static inline int i8_sms(void) {
    static int sms = 0;
    if (!sms) {
        int dev = 0, v = 0;
        if (cudaGetDevice(&dev) != cudaSuccess ||
            cudaDeviceGetAttribute(&v, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess || v < 1)
            return 1;
        sms = v;
    }
    return sms;
}


/* One 16-byte chunk of weights through the non-coherent path without an L1 allocation (weights are streamed once
 * per product and are immutable; PTX ISA "ld", .L1::no_allocate). asm volatile: issued where written (before the
 * PDL wait for the first chunks). */
static __device__ __forceinline__ uint4 ld_w16(const void *p) {
    uint4 v;
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p));
    return v;
}

/* q8_row: the exact int32 dot product of one 16-column chunk (16 int8 weights in w) with 16 int8 activations xv
 * (four __dp4a); the caller adds (float)sum * the activation block's scale. Two independent chains of two: the sum
 * is exact, so its order does not change it, and the shorter chain hides the dp4a latency. */
static __device__ __forceinline__ int i8_chunk_q8(uint4 w, int4 xv) {
    const int a = __dp4a((int)w.x, xv.x, 0), b = __dp4a((int)w.y, xv.y, 0);
    return __dp4a((int)w.z, xv.z, a) + __dp4a((int)w.w, xv.w, b);
}

/* dp4a of four unsigned bytes a with four signed bytes b, plus c (PTX dp4a.u32.s32). */
static __device__ __forceinline__ int dp4a_us(uint32_t a, int b, int c) {
    int d;
    asm("dp4a.u32.s32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
    return d;
}

/* q4tp: the int32 dot product of one 32-column tile (16 bytes of nibbles, low nibble first, §2.6) with the tile's
 * 32 int8 activations stored in nibble order (i8_quantize: per group of 8, even then odd elements) as xa, xb; the
 * nibbles are unsigned 0..15 (the caller subtracts 8 * the block's activation sum, then scales). The high nibbles
 * are taken in place (w & 0xf0: 16 x the nibble, unsigned) and their sum divided by 16 at the end, which is exact;
 * four independent chains of two dp4a. The result is the exact integer sum whatever the order. */
static __device__ __forceinline__ int i8_chunk_q4tp(uint4 w, int4 xa, int4 xb) {
    const uint32_t L = 0x0f0f0f0fu, H = 0xf0f0f0f0u;
    int lo0 = __dp4a((int)(w.x & L), xa.x, 0), hi0 = dp4a_us(w.x & H, xa.y, 0);
    int lo1 = __dp4a((int)(w.y & L), xa.z, 0), hi1 = dp4a_us(w.y & H, xa.w, 0);
    lo0 = __dp4a((int)(w.z & L), xb.x, lo0), hi0 = dp4a_us(w.z & H, xb.y, hi0);
    lo1 = __dp4a((int)(w.w & L), xb.z, lo1), hi1 = dp4a_us(w.w & H, xb.w, hi1);
    return (lo0 + lo1) + ((hi0 + hi1) >> 4); /* hi0 + hi1 = 16 x the high nibbles' sum: the shift is exact */
}

/* The streaming kernel (matvec_i8s.cu): the same products and results layout as mv_i8_launch (same arguments,
 * j filled the same way), each warp of a persistent grid streaming a contiguous range of whole rows; mode 1..4 as
 * mv_i8_stream_mode. */
cmf_status mv_i8s_launch(I8Job &j, int dtype, const float *d_x, int n, int glu, int gelu, int mode, cudaStream_t s);
/* CMF_CUDA_I8_STREAM (read once) or cmf_cuda_set_i8_stream: -1 (unset) by the row width (mv_i8_stream_pick); 0 the
 * row-group kernel; 1 the streaming kernel; 2 it with an L2 prefetch beyond its load ring before the PDL wait; 3
 * that with one block per SM; 4 its bulk-copy form (q8_row, one token, cols % 512 == 0; else mode 1). */
int mv_i8_stream_mode(void);
/* The kernel of one launch of `units` output rows (a q/k/v group: all its members' rows; a gate/up pair: the rows of
 * one): the mode when set, else 1 (streaming) for q4tp rows of at least I8S_AUTO_COLS_Q4TP columns and for q8_row
 * launches of at least I8S_AUTO_Q8 columns and I8S_AUTO_Q8 units, 0 (the row-group kernel) otherwise. Measured
 * (bench/cuda/RESULTS.md): cudamv (07:21) streaming wins on the Llama-8B layer's products (q8 layer 86.3 -> 77.9 us,
 * q4tp 91.0 -> 67.6 us) and loses on the 0.6B shapes (1024x1024 q8 4.3 -> 5.2 us); session 10, whole-model q8
 * decode: Qwen3-4B 298 tok/s with only its 4096- and 9728-column products (o, down) streamed, 323 with none, 354
 * with all (its 2560-column q/k/v and gate/up too): a decode step runs best on one kind of product kernel. A fused
 * product and its members' plain products can take different kernels (each row summed in a different order, each
 * as exact). */
int mv_i8_stream_pick(int dtype, int64_t cols, int64_t units);
#define I8S_AUTO_Q8 2048
#define I8S_AUTO_COLS_Q4TP 2048
/* The streaming kernel's limit on the activations' shared memory (i8_smem): q4tp keeps 32 KiB of ladders besides. */
#define I8S_SMEM_MAX(dt) ((dt) == CMF_DT_Q4TP ? 190 * 1024 : I8_SMEM_MAX)

#endif
