/* attn_prefill.cu — causal prefill attention on the tensor cores (cmf_cuda_attn_prefill_tc): the FlashAttention
 * recurrence (Dao et al. 2022, "FlashAttention"; online softmax, Milakov & Gimelshein 2018) with the two products
 * of each key tile, S = Q K^T and O += P V, as WMMA 16x16x16 f16 fragments with f32 accumulators. Same contract and
 * features as attention.cu's f32 kernel (cmf_cuda_attn_prefill): GQA, sliding window, logit soft-capping, the f16
 * KV cache [n_ctx][n_kv_heads][head_dim] (an f32 cache, kv_type CMF_CUDA_KV_F32, goes to the f32 kernel), queries at positions pos0 .. pos0 + n_tok - 1 whose K/V rows are already
 * in the cache. Differences: Q (already multiplied by the scale in f32) and the probabilities P are rounded to f16
 * for the products (relative 2^-11, the precision the K/V cache already has); the softmax (max, exp, sums) and the
 * output accumulation stay f32. */
#include <mma.h>
#include <stdlib.h>

#include "backend/cuda/common.cuh"

#define TC_BQ 64      /* queries per block: 4 warps x 16 rows */
#define TC_BK 64      /* keys per tile */
#define TC_THREADS 128
#define TC_SLD (TC_BK + 4) /* f32 score row stride */
#define TC_PLD (TC_BK + 8) /* f16 probability row stride */

static __device__ __forceinline__ float tc_capped(float s, float cap) { return cap > 0.0f ? cap * tanhf(s / cap) : s; }

static __host__ __device__ __forceinline__ int64_t tc_first_key(int64_t p, int window) {
    return window > 0 && p - window + 1 > 0 ? p - window + 1 : 0;
}

static __host__ __device__ __forceinline__ size_t tc_al(size_t b) { return (b + 127) & ~(size_t)127; }

/* Shared-memory layout of a block for head_dim D (byte offsets; every region 128-byte aligned, WMMA needs 32). */
struct tc_smem {
    size_t q, k, v, s, p, o, total;
};
static __host__ __device__ __forceinline__ tc_smem tc_layout(int D) {
    tc_smem L;
    const size_t hld = (size_t)D + 8, old = (size_t)D + 4;
    L.q = 0;
    L.k = L.q + tc_al(TC_BQ * hld * 2);
    L.v = L.k + tc_al(TC_BK * hld * 2);
    L.s = L.v + tc_al(TC_BK * hld * 2);
    L.p = L.s + tc_al(TC_BQ * TC_SLD * 4);
    L.o = L.p + tc_al(TC_BQ * TC_PLD * 2);
    L.total = L.o + tc_al(TC_BQ * old * 4);
    return L;
}

/* Block (query tile, head); warp w owns query rows 16w .. 16w + 15 of the tile. Per key tile: all threads stage K
 * and V (16-byte loads of the cache rows), each warp computes its 16 x 64 scores into shared memory, two lanes per
 * row run the online softmax (mask, cap, running max / sum, P in f16, O rows rescaled), then O += P V with the
 * accumulators loaded from and stored back to shared memory (their register layout is opaque in WMMA). */
template <int D>
static __global__ void __launch_bounds__(TC_THREADS) k_attn_prefill_tc(cmf_cuda_attn a, const float *__restrict__ q,
                                                                        const uint16_t *__restrict__ kc,
                                                                        const uint16_t *__restrict__ vc, int64_t pos0,
                                                                        int64_t n_tok, float *__restrict__ out) {
    using namespace nvcuda;
    extern __shared__ __align__(128) uint8_t sm[];
    constexpr int HLD = D + 8, OLD = D + 4;
    const tc_smem L = tc_layout(D);
    __half *qs = (__half *)(sm + L.q), *ks = (__half *)(sm + L.k), *vs = (__half *)(sm + L.v);
    float *ss = (float *)(sm + L.s), *os = (float *)(sm + L.o);
    __half *ps = (__half *)(sm + L.p);
    const int G = a.n_heads / a.n_kv_heads;
    /* heavy tiles (late queries: more keys) first */
    const int64_t tile = (int64_t)gridDim.x - 1 - blockIdx.x;
    const int h = blockIdx.y, kvh = h / G, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int64_t t0 = tile * TC_BQ;
    const int64_t row = (int64_t)a.n_kv_heads * D;
    /* Q tile (scaled in f32, then f16) and O = 0 */
    for (int e = threadIdx.x; e < TC_BQ * D; e += TC_THREADS) {
        const int r = e / D, d = e % D;
        const int64_t t = t0 + r;
        qs[r * HLD + d] = __float2half_rn(t < n_tok ? q[(t * a.n_heads + h) * D + d] * a.scale : 0.0f);
        os[r * OLD + d] = 0.0f;
    }
    /* softmax state of row lane / 2 of this warp, held by both lanes of the row */
    const int rr = warp * 16 + (lane >> 1), half = lane & 1;
    const int64_t p_row = pos0 + t0 + rr; /* this row's query position */
    const bool row_live = t0 + rr < n_tok;
    const int64_t kf_row = tc_first_key(p_row, a.window);
    float m = -INFINITY, l = 0.0f;
    const int64_t t_last = t0 + TC_BQ - 1 < n_tok - 1 ? t0 + TC_BQ - 1 : n_tok - 1;
    const int64_t k_lo = tc_first_key(pos0 + t0, a.window), k_hi = pos0 + t_last; /* inclusive */
    const int64_t kb0 = k_lo / TC_BK * TC_BK; /* tiles aligned to 64 keys */
    for (int64_t kb = kb0; kb <= k_hi; kb += TC_BK) {
        __syncthreads(); /* the previous tile's K/V are consumed */
        for (int e = threadIdx.x; e < TC_BK * (D / 8); e += TC_THREADS) {
            const int j = e / (D / 8), c = (e % (D / 8)) * 8;
            const int64_t key = kb + j;
            uint4 kv = make_uint4(0, 0, 0, 0), vv = make_uint4(0, 0, 0, 0);
            if (key <= k_hi && key >= k_lo) {
                kv = __ldg((const uint4 *)(kc + key * row + (int64_t)kvh * D + c));
                vv = __ldg((const uint4 *)(vc + key * row + (int64_t)kvh * D + c));
            }
            *(uint4 *)(ks + j * HLD + c) = kv;
            *(uint4 *)(vs + j * HLD + c) = vv;
        }
        __syncthreads();
        /* does any row of this warp see a key of the tile? (warp-uniform skip) */
        const int64_t w_first = pos0 + t0 + warp * 16; /* the warp's earliest query position */
        const bool any = t0 + warp * 16 < n_tok && kb <= w_first + 15 &&
                         kb + TC_BK - 1 >= tc_first_key(w_first, a.window);
        if (!any) continue;
        /* S = Q K^T for the warp's 16 rows */
#pragma unroll
        for (int jb = 0; jb < TC_BK / 16; jb++) {
            wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
            wmma::fill_fragment(acc, 0.0f);
#pragma unroll
            for (int kk = 0; kk < D; kk += 16) {
                wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> fa;
                wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::col_major> fb;
                wmma::load_matrix_sync(fa, qs + warp * 16 * HLD + kk, HLD);
                wmma::load_matrix_sync(fb, ks + jb * 16 * HLD + kk, HLD);
                wmma::mma_sync(acc, fa, fb, acc);
            }
            wmma::store_matrix_sync(ss + warp * 16 * TC_SLD + jb * 16, acc, TC_SLD, wmma::mem_row_major);
        }
        __syncwarp();
        /* online softmax of row rr over this lane's 32 keys of the tile */
        float *srow = ss + rr * TC_SLD + half * 32;
        float mt = -INFINITY;
        for (int c = 0; c < 32; c++) {
            const int64_t key = kb + half * 32 + c;
            float s = -INFINITY;
            if (row_live && key <= p_row && key >= kf_row) s = tc_capped(srow[c], a.softcap);
            srow[c] = s;
            mt = fmaxf(mt, s);
        }
        mt = fmaxf(mt, __shfl_xor_sync(0xffffffffu, mt, 1));
        const float mn = fmaxf(m, mt);
        const float corr = mn == -INFINITY ? 1.0f : expf(m - mn);
        float sum = 0.0f;
        __half *prow = ps + rr * TC_PLD + half * 32;
        for (int c = 0; c < 32; c++) {
            const float s = srow[c];
            const __half pv = __float2half_rn(s == -INFINITY ? 0.0f : expf(s - mn));
            prow[c] = pv;
            sum += __half2float(pv); /* the sum of the P the product uses */
        }
        sum += __shfl_xor_sync(0xffffffffu, sum, 1);
        l = l * corr + sum;
        m = mn;
        if (corr != 1.0f) {
            float *orow = os + rr * OLD + half * (D / 2);
            for (int d = 0; d < D / 2; d++) orow[d] *= corr;
        }
        __syncwarp();
        /* O += P V for the warp's 16 rows */
#pragma unroll
        for (int db = 0; db < D / 16; db++) {
            wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
            float *op = os + warp * 16 * OLD + db * 16;
            wmma::load_matrix_sync(acc, op, OLD, wmma::mem_row_major);
#pragma unroll
            for (int kk = 0; kk < TC_BK; kk += 16) {
                wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> fa;
                wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::row_major> fb;
                wmma::load_matrix_sync(fa, ps + warp * 16 * TC_PLD + kk, TC_PLD);
                wmma::load_matrix_sync(fb, vs + kk * HLD + db * 16, HLD);
                wmma::mma_sync(acc, fa, fb, acc);
            }
            wmma::store_matrix_sync(op, acc, OLD, wmma::mem_row_major);
        }
        __syncwarp();
    }
    __syncwarp();
    if (row_live) {
        const float inv = 1.0f / l;
        const float *orow = os + rr * OLD + half * (D / 2);
        float *dst = out + ((t0 + rr) * a.n_heads + h) * D + half * (D / 2);
        for (int d = 0; d < D / 2; d++) dst[d] = orow[d] * inv;
    }
}

static int tc_mode(void) {
    static int mode = -1;
    if (mode < 0) {
        const char *e = getenv("CMF_CUDA_ATTN_TC");
        mode = e && e[0] == '0' ? 0 : 1;
    }
    return mode;
}

template <int D>
static cmf_status tc_launch(const cmf_cuda_attn *a, const float *q, const uint16_t *k, const uint16_t *v,
                            int64_t pos0, int64_t n_tok, float *out, cudaStream_t s) {
    const size_t smem = tc_layout(D).total;
    /* every call: the attribute belongs to the current device (tensor-parallel ranks use several) */
    CU_TRY(cudaFuncSetAttribute(k_attn_prefill_tc<D>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem),
           "cudaFuncSetAttribute(tensor-core prefill attention)");
    dim3 grid((unsigned)((n_tok + TC_BQ - 1) / TC_BQ), (unsigned)a->n_heads);
    k_attn_prefill_tc<D><<<grid, TC_THREADS, smem, s>>>(*a, q, k, v, pos0, n_tok, out);
    CU_LAUNCHED("tensor-core prefill attention kernel");
    return CMF_OK;
}

extern "C" cmf_status cmf_cuda_attn_prefill_tc(const cmf_cuda_attn *a, const float *d_q, const uint16_t *d_k,
                                               const uint16_t *d_v, int64_t pos0, int64_t n_tok, float *d_out,
                                               cmf_cuda_stream stream) {
    if (!a || a->n_heads < 1 || a->n_kv_heads < 1 || a->n_heads % a->n_kv_heads != 0)
        return cmf_err(CMF_E_ARG, "cuda_attn_prefill_tc: n_heads %d must be a positive multiple of n_kv_heads %d",
                       a ? a->n_heads : 0, a ? a->n_kv_heads : 0);
    if (a->window < 0 || a->softcap < 0.0f) return cmf_err(CMF_E_ARG, "cuda_attn_prefill_tc: negative window or softcap");
    if (pos0 < 0 || n_tok < 0)
        return cmf_err(CMF_E_ARG, "cuda_attn_prefill_tc: pos0 %lld, n_tok %lld", (long long)pos0, (long long)n_tok);
    if (!d_q || !d_k || !d_v || !d_out) return cmf_err(CMF_E_ARG, "cuda_attn_prefill_tc: NULL buffer");
    if (n_tok == 0) return CMF_OK;
    const bool aligned = (((uintptr_t)d_k | (uintptr_t)d_v) & 15) == 0;
    const int D = a->head_dim;
    if (tc_mode() && aligned && a->kv_type == CMF_CUDA_KV_F16 && n_tok > 1 && n_tok / TC_BQ < 65535) {
        cudaStream_t s = CU_STREAM(stream);
        switch (D) {
        case 64: return tc_launch<64>(a, d_q, d_k, d_v, pos0, n_tok, d_out, s);
        case 80: return tc_launch<80>(a, d_q, d_k, d_v, pos0, n_tok, d_out, s);
        case 96: return tc_launch<96>(a, d_q, d_k, d_v, pos0, n_tok, d_out, s);
        case 128: return tc_launch<128>(a, d_q, d_k, d_v, pos0, n_tok, d_out, s);
        case 256: return tc_launch<256>(a, d_q, d_k, d_v, pos0, n_tok, d_out, s);
        default: break;
        }
    }
    return cmf_cuda_attn_prefill(a, d_q, d_k, d_v, pos0, n_tok, d_out, stream);
}
