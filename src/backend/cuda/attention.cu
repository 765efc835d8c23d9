/* attention.cu — scaled dot-product attention over an f16 or f32 KV cache (cuda_ops.h): flash-decoding for one query
 * (Dao et al. 2023, "Flash-Decoding": split the keys across blocks, online softmax per split, merge the splits)
 * and a causal prefill kernel with online softmax (Milakov & Gimelshein 2018; FlashAttention's recurrence),
 * both with GQA, a sliding window and optional logit soft-capping. f32 arithmetic throughout. */
#include "backend/cuda/attn_launch.cuh"

static int pow2_at_least(int v) {
    int p = 1;
    while (p < v) p <<= 1;
    return p;
}

/* First key a query at position p sees. */
static __host__ __device__ __forceinline__ int64_t first_key(int64_t p, int window) {
    return window > 0 && p - window + 1 > 0 ? p - window + 1 : 0;
}

/* attn_launch.cuh */
int ad_cluster_mk(void) {
    static int mk = 0;
    if (!mk) {
        const char *e = getenv("CMF_CUDA_ATTN_CL_KEYS");
        const int v = e && e[0] ? atoi(e) : AD_CL_KEYS;
        mk = (v >= 1 && v <= 4096 ? v : AD_CL_KEYS) | (ad_split_keys() & ~0xffff);
    }
    return mk;
}

static int g_cluster = -1; /* cmf_cuda_set_attn_cluster; -1: the environment's choice */

/* The form of this launch: the override, else CMF_CUDA_ATTN_CLUSTER, else the plain one under CMF_CUDA_PERSIST=1
 * (the persistent kernel's attention items are the plain kernel's, and the steps it does not take must give its
 * bits), else AD_CLUSTER. */
static int ad_cluster(void) {
    static int env = -1;
    if (env < 0) {
        const char *e = getenv("CMF_CUDA_ATTN_CLUSTER"), *p = getenv("CMF_CUDA_PERSIST");
        env = e && e[0] ? e[0] == '1' : p && p[0] == '1' ? 0 : AD_CLUSTER;
    }
    return g_cluster >= 0 ? g_cluster : env;
}

extern "C" void cmf_cuda_set_attn_cluster(int on) { g_cluster = on == 0 || on == 1 ? on : -1; }

size_t cmf_cuda_attn_decode_work_bytes(const cmf_cuda_attn *a, int64_t n_ctx) {
    if (!a || n_ctx < 1 || a->n_kv_heads < 1) return 0;
    int64_t s = decode_splits(a->n_kv_heads, n_ctx, ad_split_keys());
    const int64_t c = cluster_splits(a->n_kv_heads, n_ctx, ad_cluster_mk()) / AD_CL; /* the cluster kernel's */
    if (c > s) s = c;
    return work_counters(a) + (size_t)a->n_heads * (size_t)s * ((size_t)a->head_dim + 2) * sizeof(float);
}

static int g_tile = 0;   /* 0: not read yet */
static int g_pf = -1;    /* -1: not read yet */
static int g_merge = -1; /* -1: not read yet */

int ad_split_keys(void) {
    static int mk = 0; /* read once per process (a benign race: every thread reads the same value) */
    if (!mk) {
        const char *e = getenv("CMF_CUDA_ATTN_SPLIT_KEYS"), *b = getenv("CMF_CUDA_ATTN_BLOCKS");
        const int v = e && e[0] ? atoi(e) : AD_SPLIT_KEYS, nb = b && b[0] ? atoi(b) : 0;
        mk = (v >= 1 && v <= 4096 ? v : AD_SPLIT_KEYS) | (nb >= 32 && nb <= 8192 ? nb << 16 : 0);
    }
    return mk;
}

int ad_tile(void) {
    if (!g_tile) {
        const char *e = getenv("CMF_CUDA_ATTN_TILE");
        const int v = e && e[0] ? atoi(e) : AD_KT;
        g_tile = v == 1 || v == 4 ? v : AD_KT;
    }
    return g_tile;
}

/* The decode kernel's flags: bit 0 = prefetch its split's K / V rows into L2 before the PDL wait
 * (CMF_CUDA_ATTN_PF=1), bit 1 = the serial merge of the splits (CMF_CUDA_ATTN_MERGE=0; the default is the parallel
 * one, AD_MERGE_SERIAL); cmf_cuda_set_attn_decode overrides either; bit 2 = the caller's weight spans
 * (cmf_cuda_set_l2_prefetch) are prefetched before the PDL wait (CMF_CUDA_ATTN_L2PF_AT=1), not after it. */
int ad_flags(void) {
    static int pf_at = -1;
    if (pf_at < 0) {
        const char *e = getenv("CMF_CUDA_ATTN_L2PF_AT");
        pf_at = e && e[0] == '1' ? 4 : 0;
    }
    if (g_pf < 0) {
        const char *e = getenv("CMF_CUDA_ATTN_PF");
        g_pf = e && e[0] == '1';
    }
    if (g_merge < 0) {
        const char *e = getenv("CMF_CUDA_ATTN_MERGE");
        g_merge = e && e[0] ? e[0] == '1' : !AD_MERGE_SERIAL;
    }
    return g_pf | (g_merge ? 0 : 2) | pf_at;
}

extern "C" void cmf_cuda_set_attn_decode(int tile, int pf, int merge) {
    g_tile = tile == 1 || tile == 4 ? tile : 0;
    g_pf = pf == 0 || pf == 1 ? pf : -1;
    g_merge = merge == 0 || merge == 1 ? merge : -1;
}

static cmf_status attn_check(const cmf_cuda_attn *a) {
    if (!a || a->n_heads < 1 || a->n_kv_heads < 1 || a->n_heads % a->n_kv_heads != 0)
        return cmf_err(CMF_E_ARG, "cuda attention: n_heads %d must be a positive multiple of n_kv_heads %d",
                       a ? a->n_heads : 0, a ? a->n_kv_heads : 0);
    if (a->head_dim < 8 || a->head_dim > 256 || a->head_dim % 8 != 0)
        return cmf_err(CMF_E_ARG, "cuda attention: head_dim %d must be a multiple of 8 in [8, 256]", a->head_dim);
    if (a->window < 0 || a->softcap < 0.0f) return cmf_err(CMF_E_ARG, "cuda attention: negative window or softcap");
    if (a->kv_type != CMF_CUDA_KV_F16 && a->kv_type != CMF_CUDA_KV_F32)
        return cmf_err(CMF_E_ARG, "cuda attention: kv_type %d is neither f16 (0) nor f32 (1)", a->kv_type);
    return CMF_OK;
}

/* Every decode entry point: a grid for the most splits any position with up to `keys` keys needs (the kernels
 * derive the position's own split geometry, so a grid for more keys gives the same bits): (kv heads, splits, head
 * chunks) for the plain kernel, (splits, kv heads, head chunks) in clusters of AD_CL along x for the cluster form. */
static cmf_status decode_launch(const cmf_cuda_attn *a, const float *d_q, const uint16_t *d_k, const uint16_t *d_v,
                                int64_t pos, const int32_t *dpos, int64_t keys, float *d_out, void *d_work,
                                cudaStream_t s, const AttnRope &fr = AttnRope()) {
    int G = a->n_heads / a->n_kv_heads;
    int L = pow2_at_least(a->head_dim / 8);
    const bool clu = ad_cluster() && cluster_fits(G < AD_MAXG ? G : AD_MAXG, L, L < 8 ? 1 : ad_tile());
    const unsigned nz = (unsigned)((G + AD_MAXG - 1) / AD_MAXG);
    int ns;
    dim3 grid;
    if (clu) {
        const int64_t c = cluster_splits(a->n_kv_heads, keys, ad_cluster_mk());
        grid = dim3((unsigned)c, (unsigned)a->n_kv_heads, nz), ns = (int)(c / AD_CL);
    } else {
        ns = (int)decode_splits(a->n_kv_heads, keys, ad_split_keys());
        grid = dim3((unsigned)a->n_kv_heads, (unsigned)ns, nz);
    }
    int *done = (int *)d_work;
    float *work = (float *)((char *)d_work + work_counters(a));
    const int gh = G < AD_MAXG ? G : AD_MAXG;
    const CuPf pf = cu_pf_pending(); /* the caller's L2 prefetch spans (cmf_cuda_set_l2_prefetch), if any */
    const AttnLaunch la = {L, clu, grid, *a, d_q, d_k, d_v, pos, dpos, ns, work, done, d_out, fr, pf, s};
    if (gh == 1) attn_launch_g1(la);
    else if (gh == 2) attn_launch_g2(la);
    else if (gh <= 4) attn_launch_g4(la);
    else attn_launch_g8(la);
    CU_LAUNCHED("attention decode kernel");
    return CMF_OK;
}

extern "C" cmf_status cmf_cuda_attn_decode(const cmf_cuda_attn *a, const float *d_q, const uint16_t *d_k,
                                           const uint16_t *d_v, int64_t pos, float *d_out, void *d_work,
                                           cmf_cuda_stream stream) {
    cmf_status st = attn_check(a);
    if (st != CMF_OK) return st;
    if (pos < 0) return cmf_err(CMF_E_ARG, "cuda_attn_decode: pos %lld < 0", (long long)pos);
    if (!d_q || !d_k || !d_v || !d_out || !d_work) return cmf_err(CMF_E_ARG, "cuda_attn_decode: NULL buffer");
    return decode_launch(a, d_q, d_k, d_v, pos, NULL, pos + 1 - first_key(pos, a->window), d_out, d_work,
                         CU_STREAM(stream));
}

extern "C" cmf_status cmf_cuda_attn_decode_dpos(const cmf_cuda_attn *a, const float *d_q, const uint16_t *d_k,
                                                const uint16_t *d_v, const int32_t *d_pos, int64_t n_ctx,
                                                float *d_out, void *d_work, cmf_cuda_stream stream) {
    cmf_status st = attn_check(a);
    if (st != CMF_OK) return st;
    if (n_ctx < 1) return cmf_err(CMF_E_ARG, "cuda_attn_decode_dpos: n_ctx %lld < 1", (long long)n_ctx);
    if (!d_q || !d_k || !d_v || !d_out || !d_work || !d_pos)
        return cmf_err(CMF_E_ARG, "cuda_attn_decode_dpos: NULL buffer");
    /* the largest split count of any position < n_ctx: splits grow with the key count up to the cap */
    const int64_t keys = a->window > 0 && a->window < n_ctx ? a->window : n_ctx;
    return decode_launch(a, d_q, d_k, d_v, 0, d_pos, keys, d_out, d_work, CU_STREAM(stream));
}

extern "C" cmf_status cmf_cuda_attn_decode_rope(const cmf_cuda_attn *a, const float *d_q, const float *d_k,
                                                const float *d_v, const cmf_cuda_qk_rope *r, void *d_kc, void *d_vc,
                                                const int32_t *d_pos, int64_t n_ctx, float *d_out, void *d_work,
                                                cmf_cuda_stream stream) {
    cmf_status st = attn_check(a);
    if (st != CMF_OK) return st;
    if (n_ctx < 1 || !r) return cmf_err(CMF_E_ARG, "cuda_attn_decode_rope: n_ctx %lld < 1 or no RoPE arguments",
                                        (long long)n_ctx);
    if (!d_q || !d_k || !d_v || !d_kc || !d_vc || !d_out || !d_work || !d_pos)
        return cmf_err(CMF_E_ARG, "cuda_attn_decode_rope: NULL buffer");
    if (!cmf_cuda_attn_decode_rope_ok(a, r))
        return cmf_err(CMF_E_ARG, "cuda_attn_decode_rope: needs n_heads / n_kv_heads <= %d, rot_dim %d even and <= "
                                  "head_dim %d (40..256) with frequencies, q and k norm weights both or neither",
                       AD_MAXG, r->rot_dim, a->head_dim);
    AttnRope fr;
    fr.k = d_k, fr.v = d_v, fr.qw = r->d_qw, fr.kw = r->d_kw, fr.inv_freq = r->d_inv_freq;
    fr.kc = d_kc, fr.vc = d_vc, fr.eps = r->eps, fr.gemma = r->gemma_style, fr.rot = r->rot_dim;
    fr.interleaved = r->pairing == CMF_CUDA_ROPE_INTERLEAVED, fr.on = 1;
    const int64_t keys = a->window > 0 && a->window < n_ctx ? a->window : n_ctx;
    return decode_launch(a, d_q, (const uint16_t *)d_kc, (const uint16_t *)d_vc, 0, d_pos, keys, d_out, d_work,
                         CU_STREAM(stream), fr);
}

extern "C" int cmf_cuda_attn_decode_rope_ok(const cmf_cuda_attn *a, const cmf_cuda_qk_rope *r) {
    return a && r && attn_check(a) == CMF_OK && a->n_heads / a->n_kv_heads <= AD_MAXG && a->head_dim >= 40 &&
           r->rot_dim >= 0 && r->rot_dim % 2 == 0 && r->rot_dim <= a->head_dim && (!r->rot_dim || r->d_inv_freq) && !r->d_qw == !r->d_kw;
}

/* ---- causal prefill ------------------------------------------------------------------------------------- */

#define AP_QT 16 /* queries per block (4 per warp) */
#define AP_KT 32 /* keys per shared-memory tile (one per lane) */

/* Block (query tile, head). Keys: lane j scores key j of the tile against the warp's query (q and K in shared
 * memory, K rows padded by one word against bank conflicts), the warp updates its online softmax, and each lane
 * accumulates the output dims d = lane, lane + 32, ... from V in shared memory. */
static __global__ void __launch_bounds__(128) k_attn_prefill(cmf_cuda_attn a, const float *__restrict__ q,
                                                              const uint16_t *__restrict__ kc,
                                                              const uint16_t *__restrict__ vc, int64_t pos0,
                                                              int64_t n_tok, float *__restrict__ out) {
    extern __shared__ float smem[];
    const int D = a.head_dim, DP = D + 1, G = a.n_heads / a.n_kv_heads;
    float *qs = smem;                  /* [AP_QT][D] */
    float *ks = qs + AP_QT * D;        /* [AP_KT][DP] */
    float *vs = ks + AP_KT * DP;       /* [AP_KT][D] */
    const int h = blockIdx.y, kvh = h / G, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int64_t t0 = (int64_t)blockIdx.x * AP_QT;
    for (int e = threadIdx.x; e < AP_QT * D; e += 128) {
        int64_t t = t0 + e / D;
        qs[e] = t < n_tok ? q[(t * a.n_heads + h) * D + e % D] * a.scale : 0.0f;
    }
    float m[4], l[4], acc[4][8];
#pragma unroll
    for (int i = 0; i < 4; i++) {
        m[i] = -INFINITY, l[i] = 0.0f;
#pragma unroll
        for (int c = 0; c < 8; c++) acc[i][c] = 0.0f;
    }
    int64_t t_last = t0 + AP_QT - 1 < n_tok - 1 ? t0 + AP_QT - 1 : n_tok - 1;
    int64_t k_lo = first_key(pos0 + t0, a.window), k_hi = pos0 + t_last; /* inclusive */
    const int64_t row = (int64_t)a.n_kv_heads * D;
    for (int64_t kb = k_lo; kb <= k_hi; kb += AP_KT) {
        __syncthreads();
        for (int e = threadIdx.x; e < AP_KT * D; e += 128) {
            int jj = e / D, d = e % D;
            int64_t j = kb + jj;
            float kv = 0.0f, vv = 0.0f;
            if (j <= k_hi && a.kv_type == CMF_CUDA_KV_F32) {
                kv = ((const float *)kc)[j * row + (int64_t)kvh * D + d];
                vv = ((const float *)vc)[j * row + (int64_t)kvh * D + d];
            } else if (j <= k_hi) {
                kv = dev_f16(kc[j * row + (int64_t)kvh * D + d]);
                vv = dev_f16(vc[j * row + (int64_t)kvh * D + d]);
            }
            ks[jj * DP + d] = kv;
            vs[jj * D + d] = vv;
        }
        __syncthreads();
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const int qi = warp * 4 + i;
            const int64_t t = t0 + qi, p = pos0 + t, j = kb + lane;
            if (t >= n_tok) break;
            float s = -INFINITY;
            if (j <= p && j >= first_key(p, a.window)) {
                float d0 = 0.0f;
                for (int d = 0; d < D; d++) d0 = fmaf(qs[qi * D + d], ks[lane * DP + d], d0);
                s = capped(d0, a.softcap);
            }
            float mt = warp_max(s);
            if (mt == -INFINITY) continue;
            float mn = fmaxf(m[i], mt), corr = expf(m[i] - mn);
            float pr = s == -INFINITY ? 0.0f : expf(s - mn);
            l[i] = l[i] * corr + warp_sum(pr);
#pragma unroll
            for (int c = 0; c < 8; c++) acc[i][c] *= corr;
            for (int jj = 0; jj < AP_KT; jj++) {
                float pj = __shfl_sync(0xffffffffu, pr, jj);
                if (pj != 0.0f) {
#pragma unroll
                    for (int c = 0; c < 8; c++)
                        if (lane + 32 * c < D) acc[i][c] = fmaf(pj, vs[jj * D + lane + 32 * c], acc[i][c]);
                }
            }
            m[i] = mn;
        }
    }
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const int64_t t = t0 + warp * 4 + i;
        if (t >= n_tok) break;
#pragma unroll
        for (int c = 0; c < 8; c++)
            if (lane + 32 * c < D) out[(t * a.n_heads + h) * D + lane + 32 * c] = acc[i][c] / l[i];
    }
}

extern "C" cmf_status cmf_cuda_attn_prefill(const cmf_cuda_attn *a, const float *d_q, const uint16_t *d_k,
                                            const uint16_t *d_v, int64_t pos0, int64_t n_tok, float *d_out,
                                            cmf_cuda_stream stream) {
    cmf_status st = attn_check(a);
    if (st != CMF_OK) return st;
    if (pos0 < 0 || n_tok < 0) return cmf_err(CMF_E_ARG, "cuda_attn_prefill: pos0 %lld, n_tok %lld", (long long)pos0, (long long)n_tok);
    if (!d_q || !d_k || !d_v || !d_out) return cmf_err(CMF_E_ARG, "cuda_attn_prefill: NULL buffer");
    if (n_tok == 0) return CMF_OK;
    const int D = a->head_dim;
    size_t sm = ((size_t)AP_QT * D + (size_t)AP_KT * (D + 1) + (size_t)AP_KT * D) * sizeof(float);
    /* 64 KiB of dynamic shared memory needs the opt-in for head_dim 256; set on every call because the attribute
     * belongs to the current device (tensor-parallel ranks use several, from several threads) */
    CU_TRY(cudaFuncSetAttribute(k_attn_prefill, cudaFuncAttributeMaxDynamicSharedMemorySize, 100 * 1024),
           "cudaFuncSetAttribute(prefill attention)");
    dim3 grid((unsigned)((n_tok + AP_QT - 1) / AP_QT), (unsigned)a->n_heads);
    k_attn_prefill<<<grid, 128, sm, CU_STREAM(stream)>>>(*a, d_q, d_k, d_v, pos0, n_tok, d_out);
    CU_LAUNCHED("prefill attention kernel");
    return CMF_OK;
}
