/* attn_decode.cuh — the device side of flash-decoding (Dao et al. 2023, "Flash-Decoding": split the keys across
 * blocks, online softmax per split, merge the splits) shared by attn_launch.cuh's decode kernels (one block per work
 * item) and persist.cu's persistent decode kernel (128-thread halves of its blocks take the items): the split
 * geometry, the merge, and one work item (kv head, split, chunk of query heads) as a device function with its shared
 * memory passed in. One function for both callers, so they give the same bits. Internal (cuda_ops.h is the API). */
#ifndef CMF_BACKEND_CUDA_ATTN_DECODE_CUH
#define CMF_BACKEND_CUDA_ATTN_DECODE_CUH

#include <stdlib.h>

#include "backend/cuda/common.cuh"
#include "backend/cuda/tprof.cuh"

#define AD_THREADS 128
#define AD_MAXG 8 /* query heads per block (a larger GQA group is split over grid.z) */

static __device__ __forceinline__ float capped(float s, float cap) { return cap > 0.0f ? cap * tanhf(s / cap) : s; }

/* The split rule (mk below): the least keys per split in the low 16 bits, AD_SPLIT_KEYS or CMF_CUDA_ATTN_SPLIT_KEYS (1..4096;
 * fewer keys per split give short contexts more, shorter splits: more blocks, fewer dependent key rounds each, at
 * the price of a longer merge), and the blocks wanted over all KV heads above them, 0 for 264 (two per SM of an
 * H100 / H200) or CMF_CUDA_ATTN_BLOCKS (32..8192; more blocks put more loads in flight at long contexts). Read once
 * per process. Host side only (attention.cu; persist_host.cu uses it too); the kernels get the value as an argument.
 * It sizes the decode scratch (cmf_cuda_attn_decode_work_bytes), so it never changes after the first read. */
int ad_split_keys(void);
/* Keys per lane group and online-softmax update in the decode kernel (the KT of attn_split_item): AD_KT, or
 * CMF_CUDA_ATTN_TILE (1 or 4), or cmf_cuda_set_attn_decode (tests, A/B). Host side only (attention.cu). */
int ad_tile(void);

/* The default merge of the splits, which persist.cu's items use too: 1 = the serial merge (merge_dim), 0 = the
 * parallel one (attn_merge_splits; CMF_CUDA_ATTN_MERGE=0 in attention.cu takes the serial one). The parallel merge
 * with 16 keys per split (AD_SPLIT_KEYS) won or tied at every q8 shape and context measured in one call
 * (bench/cuda/RESULTS.md, session 10). */
#ifndef AD_MERGE_SERIAL
#define AD_MERGE_SERIAL 0
#endif
/* The default least keys per decode split (ad_split_keys; CMF_CUDA_ATTN_SPLIT_KEYS overrides it). */
#ifndef AD_SPLIT_KEYS
#define AD_SPLIT_KEYS 16
#endif

/* The default tile, which persist.cu's items use too (they must give the graph path's bits). 4: measured faster than
 * 1 (the per-key update) on Llama-8B and Qwen3-0.6B q8 at contexts 128 and 4096 (bench/cuda/RESULTS.md, cuda8). */
/* The cluster kernel's first round of cached K / V rows loaded before the PDL wait (attn_split_partial's PRE): 0 no
 * (default), 1 always, 2 only when the split is one round. Compile time (-DCMAKE_CUDA_FLAGS=-DAD_CL_PRE=n). Measured
 * in bench/cuda/RESULTS.md (session 13: 1 gains at context 128, loses at 4096). */
#ifndef AD_CL_PRE
#define AD_CL_PRE 0
#endif
#ifndef AD_KT
#define AD_KT 4
#endif

/* Splits of a decode over n_keys keys under the split rule mk (ad_split_keys): about the rule's blocks over all KV
 * heads (264 by default: two per SM of an H100/H200), at least its least keys each, at most 512 (the merge's shared
 * memory, attn_merge_splits). The same formula runs on the host (grid size) and in the kernels (device positions). */
static __host__ __device__ __forceinline__ int64_t decode_splits(int n_kv_heads, int64_t n_keys, int mk) {
    const int keys = mk & 0xffff, blocks = mk >> 16 ? mk >> 16 : 264;
    int64_t want = (blocks + n_kv_heads - 1) / n_kv_heads;
    int64_t by_len = (n_keys + keys - 1) / keys;
    int64_t s = want < by_len ? want : by_len;
    if (s > 512) s = 512;
    return s < 1 ? 1 : s;
}

/* The split geometry of a query at position pos: first key, keys per split, splits used. */
struct split_geo {
    int64_t kf, len;
    int ns;
};
static __host__ __device__ __forceinline__ split_geo decode_geo(int n_kv_heads, int window, int64_t pos, int mk) {
    split_geo g;
    g.kf = window > 0 && pos - window + 1 > 0 ? pos - window + 1 : 0;
    const int64_t n_keys = pos + 1 - g.kf;
    int64_t ns = decode_splits(n_kv_heads, n_keys, mk);
    g.len = (n_keys + ns - 1) / ns;
    g.ns = (int)((n_keys + g.len - 1) / g.len);
    return g;
}

/* Work layout: one int counter per block column (kv head, head chunk) that counts finished splits (zero between
 * launches), padded to 256 bytes, then [n_heads][splits][head_dim + 2] f32 partials (max, sum, output). */
static inline size_t work_counters(const cmf_cuda_attn *a) {
    const size_t chunks = (size_t)((a->n_heads / a->n_kv_heads + AD_MAXG - 1) / AD_MAXG);
    return ((size_t)a->n_kv_heads * chunks * sizeof(int) + 255) / 256 * 256;
}

/* The q/k norm + RoPE + cache write of the decode token, done inside the attention kernel (on != 0;
 * cmf_cuda_attn_decode_rope): q, k, v are the raw projections of the token. */
struct AttnRope {
    const float *k, *v;      /* raw K / V rows of the token [n_kv_heads][head_dim] */
    const float *qw, *kw;    /* q / k norm weights (NULL: no norm) */
    const float *inv_freq;   /* RoPE frequencies (rot > 0) */
    void *kc, *vc;           /* the cache, written at the token's position */
    float eps;
    int gemma, rot, interleaved, on;
};

/* Shared memory of one work item (GH query heads, lane groups of L lanes, FR: the rotated q / K / V rows). */
template <int GH, int L, bool FR> struct AttnSm {
    static constexpr int NG = 4 * (32 / L); /* lane groups of the 128 threads */
    float ml[NG][GH][2];
    float acc[NG][GH][8 * L];
    float rq[FR ? GH : 1][FR ? 8 * L : 1], rk[FR ? 8 * L : 1], rv[FR ? 8 * L : 1];
    int last;
};

/* The barrier of the 128 threads that run a work item: the block's (bar 0: the item is the whole block) or named
 * barrier `bar` of 128 threads (a half of a larger block). */
static __device__ __forceinline__ void ad_sync(int bar) {
    if (bar == 0) __syncthreads();
    else asm volatile("bar.sync %0, 128;" ::"r"(bar) : "memory");
}

/* The serial merge (CMF_CUDA_ATTN_MERGE=0; the default is attn_merge_splits): output dim d of `used` splits'
 * partials w[s][D + 2], two passes over the splits per element, each load a dependent L2 round trip. */
static __device__ __forceinline__ float merge_dim(const float *w, int used, int D, int d) {
    float M = -INFINITY;
    for (int s = 0; s < used; s++) M = fmaxf(M, __ldcg(w + s * (D + 2)));
    float o = 0.0f, ls = 0.0f;
    for (int s = 0; s < used; s++) {
        const float *ws = w + s * (D + 2);
        const float m = __ldcg(ws);
        float f = m > -INFINITY ? expf(m - M) : 0.0f;
        o += __ldcg(ws + 2 + d) * f;
        ls += __ldcg(ws + 1) * f;
    }
    return o / ls;
}

/* The merge of the splits (Flash-Decoding's rescaling by exp(m_s - M)) by the item that finished last: w = the
 * partials of its gh heads ([gh][nsplit][D + 2]: max, sum, output), ns splits used; out = [gh][D]. Every load of a
 * phase is independent of the others, so the L2 round trips are a few per phase, not two per split and element:
 * (1) the (max, sum) pairs into shared memory (the item's acc array, free by now: 1024 * GH floats hold the
 * 2 * gh * ns <= 2 * GH * 512 values, decode_splits giving at most 512 splits), (2) a warp per head: M, the split
 * weights f_s = exp(m_s - M) (0 for an empty split) and the sum of l_s f_s, (3) each thread's outputs, four at a
 * time, summed over the splits four at a time. Reads bypass L1 (written by other blocks). One function for every
 * caller (same bits). */
template <int GH, int L, bool FR>
static __device__ __forceinline__ void attn_merge_splits(const float *__restrict__ w, float *__restrict__ out, int gh,
                                                         int ns, int nsplit, int D, int tid, int bar,
                                                         AttnSm<GH, L, FR> &S) {
    float *f = &S.acc[0][0][0], *lw = f + gh * ns; /* [gh][ns] weights, then [gh][ns] sums */
    const int64_t st = D + 2;
    for (int e = tid; e < gh * ns; e += AD_THREADS) {
        const float *p = w + ((int64_t)(e / ns) * nsplit + e % ns) * st;
        f[e] = __ldcg(p), lw[e] = __ldcg(p + 1);
    }
    ad_sync(bar);
    const int lane = tid & 31;
    for (int h = tid >> 5; h < gh; h += AD_THREADS / 32) {
        float M = -INFINITY;
        for (int s = lane; s < ns; s += 32) M = fmaxf(M, f[h * ns + s]);
        M = warp_max(M);
        float ls = 0.0f;
        for (int s = lane; s < ns; s += 32) {
            const float m = f[h * ns + s], fs = m > -INFINITY ? expf(m - M) : 0.0f;
            f[h * ns + s] = fs;
            ls = fmaf(lw[h * ns + s], fs, ls);
        }
        ls = warp_sum(ls);
        if (lane == 0) S.ml[0][h][1] = ls;
    }
    ad_sync(bar);
    for (int e0 = tid; e0 < gh * D; e0 += 4 * AD_THREADS) {
        float o[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        const float *p[4];
        const float *fh[4];
#pragma unroll
        for (int k = 0; k < 4; k++) {
            const int e = e0 + k * AD_THREADS < gh * D ? e0 + k * AD_THREADS : e0;
            p[k] = w + (int64_t)(e / D) * nsplit * st + 2 + e % D;
            fh[k] = f + (e / D) * ns;
        }
        int s = 0;
        for (; s + 4 <= ns; s += 4) {
            float v[4][4];
#pragma unroll
            for (int k = 0; k < 4; k++)
#pragma unroll
                for (int u = 0; u < 4; u++) v[k][u] = __ldcg(p[k] + (s + u) * st);
#pragma unroll
            for (int k = 0; k < 4; k++)
#pragma unroll
                for (int u = 0; u < 4; u++) o[k] = fmaf(v[k][u], fh[k][s + u], o[k]);
        }
        for (; s < ns; s++)
#pragma unroll
            for (int k = 0; k < 4; k++) o[k] = fmaf(__ldcg(p[k] + s * st), fh[k][s], o[k]);
#pragma unroll
        for (int k = 0; k < 4; k++) {
            const int e = e0 + k * AD_THREADS;
            if (e < gh * D) out[(int64_t)(e / D) * D + e % D] = o[k] / S.ml[0][e / D][1];
        }
    }
    ad_sync(bar); /* S is free again for the caller's next item (persist.cu) */
}

/* One key row's 8 values of lane `sub` (16 bytes of an f16 cache, 32 of an f32 one) as raw words, loaded
 * without use so that a tile's loads are all in flight before the first is needed. */
template <bool KF> struct KvRaw {
    uint4 w[KF ? 2 : 1];
};
template <bool KF>
static __device__ __forceinline__ void kv_raw_load(KvRaw<KF> &r, const uint16_t *__restrict__ c, int64_t e) {
    if (KF) {
        const uint4 *p = (const uint4 *)((const float *)c + e);
        r.w[0] = __ldg(p), r.w[KF ? 1 : 0] = __ldg(p + 1);
    } else {
        r.w[0] = __ldg((const uint4 *)(c + e));
    }
}
template <bool KF> static __device__ __forceinline__ float kv_raw_at(const KvRaw<KF> &r, int i) {
    if (KF) {
        const uint4 &u = r.w[i >> 2];
        const uint32_t x = (i & 3) == 0 ? u.x : (i & 3) == 1 ? u.y : (i & 3) == 2 ? u.z : u.w;
        return __uint_as_float(x);
    }
    const uint32_t x = (i >> 1) == 0 ? r.w[0].x : (i >> 1) == 1 ? r.w[0].y : (i >> 1) == 2 ? r.w[0].z : r.w[0].w;
    const __half2 h = *(const __half2 *)&x;
    return (i & 1) ? __high2float(h) : __low2float(h);
}
static __device__ __forceinline__ void kv_raw_set(KvRaw<false> &r, const float *v) { /* the own key (f16 values) */
    uint32_t x[4];
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const __half2 h = __floats2half2_rn(v[2 * i], v[2 * i + 1]);
        x[i] = *(const uint32_t *)&h;
    }
    r.w[0] = make_uint4(x[0], x[1], x[2], x[3]);
}
static __device__ __forceinline__ void kv_raw_set(KvRaw<true> &r, const float *v) {
    r.w[0] = make_uint4(__float_as_uint(v[0]), __float_as_uint(v[1]), __float_as_uint(v[2]), __float_as_uint(v[3]));
    r.w[1] = make_uint4(__float_as_uint(v[4]), __float_as_uint(v[5]), __float_as_uint(v[6]), __float_as_uint(v[7]));
}

/* The partial of one split (kv head kvh, split of geometry geo, head chunk hz) by 128 threads (tid 0..127; bar:
 * ad_sync): lane groups of L = pow2(D/8) lanes each hold key rows (16 bytes per lane and row), GH query heads of the
 * group in registers. A group takes KT keys per round (tile: KT rows of K and V loaded before the first is used; KT
 * is lowered to 2 for GH = 8 to stay in registers, and to 1 for head_dim <= 32, L < 8, as attn_launch.cuh launches
 * it), scores them for every head, and does one online-softmax update per head and tile (the tile's max, one
 * rescale of the running sum and output, Milakov & Gimelshein 2018); with KT = 1 this is the per-key update. Then
 * the groups merge in shared memory into dst + h * hstride = (max, sum, output[D]) of head h of the chunk (global
 * work partials or a cluster's shared memory). A split past the position's keys gives the partial of no keys
 * (-inf, 0, zeros). With fr.on (one head chunk: G <= AD_MAXG), the item first normalizes and rotates its query
 * heads into shared memory (warp_head_norm_rope, the code of cmf_cuda_qk_norm_rope_kv), and the item whose split
 * holds the position also does the token's K head, writes K and V into the cache and scores that key from shared
 * memory (rounded as the cache stores it), so the result has the bits of qk_norm_rope_kv followed by the plain
 * kernel. The caller has waited for q (and fr's k, v). Every caller with the same KT and geometry gives the same
 * bits (the key order within a group, the groups' merge order are fixed). */
template <int GH, int L, bool KF, bool FR, int KT = AD_KT, bool PRE = false>
static __device__ __forceinline__ void attn_split_partial(const cmf_cuda_attn &a, const float *__restrict__ q,
                                                          const uint16_t *__restrict__ kc,
                                                          const uint16_t *__restrict__ vc, int64_t pos,
                                                          const split_geo &geo, const AttnRope &fr, int kvh, int split,
                                                          int hz, int tid, int bar, AttnSm<GH, L, FR> &S,
                                                          float *__restrict__ dst, int64_t hstride,
                                                          unsigned long long *tpt = nullptr) {
    constexpr int GPW = 32 / L, NG = 4 * GPW; /* lane groups per warp / per item */
    constexpr int T = L < 8 ? 1 : GH >= 8 && KT > 2 ? 2 : KT; /* keys per group and round (launch_tile's rule) */
    const int D = a.head_dim, G = a.n_heads / a.n_kv_heads;
    const int h0 = hz * AD_MAXG;
    const int64_t k_first = geo.kf, split_len = geo.len;
    const int gh = G - h0 < GH ? G - h0 : GH; /* heads of this item */
    const int lane = tid & 31, sub = lane % L, grp = (tid >> 5) * GPW + lane / L;
    const bool has_d = sub * 8 < D;
    const int64_t j0 = k_first + (int64_t)split * split_len;
    int64_t j1 = j0 + split_len;
    if (j1 > pos + 1) j1 = pos + 1;
    if (j1 < j0) j1 = j0; /* an empty split (a cluster's spare block): the partial of no keys */
    const bool own = FR && fr.on && j0 <= pos && j1 == pos + 1; /* this split holds the token's own key */
    const int64_t row = (int64_t)a.n_kv_heads * D;
    /* Key t of group g in the round at jb: jb + t * GPW + g (a warp's keys adjacent). With PRE the first round's
     * rows before the position are loaded before the PDL wait (pdl_enter here): earlier steps wrote them, and every
     * kernel before the one that let this launch start is complete (common.cuh's rule); the position's own row comes
     * after the wait (written by the step's RoPE kernel, or by this item with fr.on). */
    int64_t jb = j0 + (int64_t)(tid >> 5) * GPW * T;
    KvRaw<KF> kr[T], vr[T];
    /* AD_CL_PRE 2: only when the split is one round (short contexts), where the early loads are the whole key loop */
    const bool pre = PRE && (AD_CL_PRE != 2 || split_len <= (int64_t)NG * T);
    if (PRE) {
        if (pre) {
#pragma unroll
            for (int t = 0; t < T; t++) {
                const int64_t j = jb + t * GPW + lane / L;
                if (has_d && j < j1 && j < pos) {
                    const int64_t e = j * row + (int64_t)kvh * D + sub * 8;
                    kv_raw_load<KF>(kr[t], kc, e);
                    kv_raw_load<KF>(vr[t], vc, e);
                }
            }
        }
        pdl_enter();
    }
    if (FR && fr.on) { /* item-uniform */
        const int warp = tid >> 5, nw = AD_THREADS / 32;
        const float p = fr.rot > 0 ? (float)pos : 0.0f;
        for (int h = warp; h < gh; h += nw)
            warp_head_norm_rope(q + (int64_t)(kvh * G + h0 + h) * D, S.rq[h], D, fr.qw, fr.eps, fr.gemma, fr.rot,
                                fr.inv_freq, p, fr.interleaved, lane);
        if (own && warp == gh % nw) { /* the token's K head and V row: into the cache, and as the cache reads back */
            warp_head_norm_rope(fr.k + (int64_t)kvh * D, S.rk, D, fr.kw, fr.eps, fr.gemma, fr.rot, fr.inv_freq, p,
                                fr.interleaved, lane);
            const int64_t dst = pos * (int64_t)a.n_kv_heads * D + (int64_t)kvh * D;
            for (int c = lane; c < D; c += 32) {
                const float kx = S.rk[c], vx = fr.v[(int64_t)kvh * D + c];
                kv_store(fr.kc, dst + c, kx, KF);
                kv_store(fr.vc, dst + c, vx, KF);
                S.rk[c] = kv_round(kx, KF), S.rv[c] = kv_round(vx, KF);
            }
        }
        ad_sync(bar);
    }
#if CMF_CUDA_TPROF
    if (tpt) tpt[4] = tp_now(); /* tprof.cuh (attention): q (and the own K row) normalized and rotated */
#endif
    float qv[GH][8], acc[GH][8], m[GH], l[GH];
#pragma unroll
    for (int h = 0; h < GH; h++) {
        m[h] = -INFINITY, l[h] = 0.0f;
        const float *qh = FR && fr.on ? S.rq[FR ? (h < gh ? h : 0) : 0] + sub * 8
                                      : q + (int64_t)(kvh * G + h0 + (h < gh ? h : 0)) * D + sub * 8;
#pragma unroll
        for (int i = 0; i < 8; i++) {
            qv[h][i] = has_d ? qh[i] * a.scale : 0.0f;
            acc[h][i] = 0.0f;
        }
    }
    /* warp-uniform trip count: every lane of a warp joins each shuffle; keys past the split's end score zeros and
     * take no part in the update */
    for (bool first = true; jb < j1; jb += (int64_t)NG * T, first = false) {
        bool valid[T];
#pragma unroll
        for (int t = 0; t < T; t++) {
            const int64_t j = jb + t * GPW + lane / L;
            valid[t] = j < j1;
            if (PRE && pre && first && has_d && valid[t] && j < pos) {
                /* loaded before the wait */
            } else if (has_d && valid[t] && !(FR && own && j == pos)) {
                const int64_t e = j * row + (int64_t)kvh * D + sub * 8;
                kv_raw_load<KF>(kr[t], kc, e);
                kv_raw_load<KF>(vr[t], vc, e);
            } else if (FR && has_d && valid[t]) { /* the token's own key (fr.on): from shared memory */
                kv_raw_set(kr[t], S.rk + sub * 8);
                kv_raw_set(vr[t], S.rv + sub * 8);
            } else {
#pragma unroll
                for (int w = 0; w < (KF ? 2 : 1); w++) kr[t].w[w] = vr[t].w[w] = make_uint4(0u, 0u, 0u, 0u);
            }
        }
#if CMF_CUDA_TPROF
        if (tpt && first) tpt[5] = tp_now_after(__uint_as_float(kr[0].w[0].x ^ vr[0].w[0].x)); /* the first K / V in */
#endif
#pragma unroll
        for (int h = 0; h < GH; h++) {
            float s[T];
#pragma unroll
            for (int t = 0; t < T; t++) {
                float d = 0.0f;
#pragma unroll
                for (int i = 0; i < 8; i++) d = fmaf(qv[h][i], kv_raw_at<KF>(kr[t], i), d);
#pragma unroll
                for (int o = L / 2; o > 0; o >>= 1) d += __shfl_xor_sync(0xffffffffu, d, o);
                s[t] = capped(d, a.softcap);
            }
            float mt = -INFINITY;
#pragma unroll
            for (int t = 0; t < T; t++)
                if (valid[t]) mt = fmaxf(mt, s[t]);
            if (mt == -INFINITY) continue; /* no key of this group in the round */
            const float mn = fmaxf(m[h], mt), corr = expf(m[h] - mn);
            float ls = __fmul_rn(l[h], corr), ac[8];
#pragma unroll
            for (int i = 0; i < 8; i++) ac[i] = __fmul_rn(acc[h][i], corr);
#pragma unroll
            for (int t = 0; t < T; t++) {
                const float p = valid[t] ? expf(s[t] - mn) : 0.0f;
                ls = __fadd_rn(ls, p);
#pragma unroll
                for (int i = 0; i < 8; i++) ac[i] = fmaf(p, kv_raw_at<KF>(vr[t], i), ac[i]);
            }
            l[h] = ls, m[h] = mn;
#pragma unroll
            for (int i = 0; i < 8; i++) acc[h][i] = ac[i];
        }
    }
#if CMF_CUDA_TPROF
    if (tpt) tpt[6] = tp_now_after(l[0]); /* the key rounds done */
#endif
#pragma unroll
    for (int h = 0; h < GH; h++) {
        if (sub == 0) S.ml[grp][h][0] = m[h], S.ml[grp][h][1] = l[h];
#pragma unroll
        for (int i = 0; i < 8; i++) S.acc[grp][h][sub * 8 + i] = acc[h][i];
    }
    ad_sync(bar);
#if CMF_CUDA_TPROF
    if (tpt) tpt[7] = tp_now(); /* the lane groups' partials in shared memory (merged next, until t2) */
#endif
    for (int e = tid; e < gh * D; e += AD_THREADS) {
        int h = e / D, d = e % D;
        float M = -INFINITY;
        for (int g = 0; g < NG; g++) M = fmaxf(M, S.ml[g][h][0]);
        float o = 0.0f, ls = 0.0f;
        if (M > -INFINITY)
            for (int g = 0; g < NG; g++) {
                float f = expf(S.ml[g][h][0] - M);
                o += S.acc[g][h][d] * f;
                ls += S.ml[g][h][1] * f;
            }
        float *wo = dst + h * hstride;
        wo[2 + d] = o;
        if (d == 0) wo[0] = M, wo[1] = ls;
    }
#if !CMF_CUDA_TPROF
    (void)tpt;
#endif
}

/* Work item (kv head kvh, split, head chunk hz of nz) by 128 threads: attn_split_partial into work[head][nsplit]
 * [D + 2], then the last split of (kvh, hz) to finish (counter done[kvh * nz + hz], threadfence reduction as the CUDA
 * samples' threadFenceReduction) merges the splits into out. mk: the split rule (ad_split_keys). serial_merge: the
 * serial merge of the splits (merge_dim) instead of attn_merge_splits (the default) (CMF_CUDA_ATTN_MERGE=1). */
template <int GH, int L, bool KF, bool FR, int KT = AD_KT>
static __device__ __forceinline__ void attn_split_item(const cmf_cuda_attn &a, const float *__restrict__ q,
                                                       const uint16_t *__restrict__ kc, const uint16_t *__restrict__ vc,
                                                       int64_t pos, int nsplit, float *__restrict__ work,
                                                       int *__restrict__ done, float *__restrict__ out,
                                                       const AttnRope &fr, int kvh, int split, int hz, int nz, int tid,
                                                       int bar, int mk, AttnSm<GH, L, FR> &S,
                                                       int serial_merge = AD_MERGE_SERIAL) {
    const int D = a.head_dim, G = a.n_heads / a.n_kv_heads;
    const int h0 = hz * AD_MAXG;
    const int gh = G - h0 < GH ? G - h0 : GH; /* heads of this item */
    const split_geo geo = decode_geo(a.n_kv_heads, a.window, pos, mk);
    if (split >= geo.ns) return; /* a split past this position's keys (grid sized for the longest context) */
    attn_split_partial<GH, L, KF, FR, KT>(a, q, kc, vc, pos, geo, fr, kvh, split, hz, tid, bar, S,
                                          work + (((int64_t)kvh * G + h0) * nsplit + split) * (D + 2),
                                          (int64_t)nsplit * (D + 2));
    /* the last split of this (kv head, head chunk) to finish merges the splits: no second kernel */
    __threadfence();
    ad_sync(bar);
    int *cnt = done + (int64_t)kvh * nz + hz;
    if (tid == 0) S.last = atomicAdd(cnt, 1) == geo.ns - 1;
    ad_sync(bar);
    const bool last = S.last;
    if (!last) return;
    __threadfence();
    if (serial_merge) {
        for (int e = tid; e < gh * D; e += AD_THREADS) {
            const int64_t hh = (int64_t)kvh * G + h0 + e / D;
            out[hh * D + e % D] = merge_dim(work + hh * nsplit * (int64_t)(D + 2), geo.ns, D, e % D);
        }
    } else {
        attn_merge_splits<GH, L, FR>(work + ((int64_t)kvh * G + h0) * nsplit * (int64_t)(D + 2), out + ((int64_t)kvh * G + h0) * D,
                                     gh, geo.ns, nsplit, D, tid, bar, S);
    }
    if (tid == 0) *cnt = 0; /* ready for the next launch / item (stream order; the persistent kernel's barrier) */
}

#endif
