/* attn_launch.cuh — the flash-decoding kernels (the plain kernel, one work item of attn_decode.cuh per block, and
 * the cluster form) and the templates that pick an instantiation for a launch. Included by attention.cu (the entry
 * points: the split rules, the grid, the dispatch on query heads per block) and by attn_decode_g{1,2,4,8}.cu, each of
 * which instantiates the kernels of one head count (GH), so nvcc compiles the four in parallel. Internal
 * (cuda_ops.h is the API). */
#ifndef CMF_BACKEND_CUDA_ATTN_LAUNCH_CUH
#define CMF_BACKEND_CUDA_ATTN_LAUNCH_CUH

#include <cooperative_groups.h>

#include "backend/cuda/attn_decode.cuh"
#include "backend/cuda/tprof.cuh"

namespace cg = cooperative_groups;

/* ---- the cluster form of the decode (sm_90 thread-block clusters, CUDA programming guide "Thread Block
 * Clusters" / "Distributed Shared Memory") ----------------------------------------------------------------------
 * The splits of a (kv head, head chunk) come in clusters of AD_CL blocks. Each block computes its split's partial
 * (attn_split_partial) into its own shared memory; after one cluster barrier each block merges a slice of the
 * output from the AD_CL partials read through distributed shared memory. When one cluster holds every key of the
 * position (short contexts: up to AD_CL * AD_CL_KEYS keys with the default rule), that is the output: no partials
 * in global memory, no threadfence, no counter, no last-block merge, the dependent round trips that made the
 * launch ~10 us at context 128 (bench/cuda/RESULTS.md, session 12). Longer contexts write one partial per cluster
 * and the last block to finish merges them (attn_merge_splits), with AD_CL times fewer partials than the plain
 * kernel. CMF_CUDA_ATTN_CLUSTER=1/0 or cmf_cuda_set_attn_cluster chooses it (ad_cluster; default AD_CLUSTER). */
#define AD_CL 8 /* blocks per cluster (the portable maximum) */
#ifndef AD_CL_KEYS
#define AD_CL_KEYS 32 /* the least keys per split of the cluster form (CMF_CUDA_ATTN_CL_KEYS) */
#endif
#ifndef AD_CLUSTER
#define AD_CLUSTER 1 /* measured faster at every q8 shape and context (bench/cuda/RESULTS.md, session 13) */
#endif

/* The cluster form's split rule: ad_split_keys' block count, AD_CL_KEYS or CMF_CUDA_ATTN_CL_KEYS (1..4096) least
 * keys per split. Read once per process (attention.cu). */
int ad_cluster_mk(void);
/* The decode kernels' flags (attention.cu: CMF_CUDA_ATTN_PF, CMF_CUDA_ATTN_MERGE, CMF_CUDA_ATTN_L2PF_AT). */
int ad_flags(void);

/* Splits of the cluster form over n_keys keys: decode_splits rounded up to whole clusters (at most 512). */
static __host__ __device__ __forceinline__ int64_t cluster_splits(int n_kv_heads, int64_t n_keys, int mk) {
    const int64_t s = (decode_splits(n_kv_heads, n_keys, mk) + AD_CL - 1) / AD_CL * AD_CL;
    return s > 512 ? 512 : s;
}

/* The cluster form's geometry at position pos: cluster_splits splits of equal length; ns = the splits of the
 * clusters that hold keys (whole clusters: a cluster's last splits may be empty). */
static __host__ __device__ __forceinline__ split_geo cluster_geo(int n_kv_heads, int window, int64_t pos, int mk) {
    split_geo g;
    g.kf = window > 0 && pos - window + 1 > 0 ? pos - window + 1 : 0;
    const int64_t n_keys = pos + 1 - g.kf, ns = cluster_splits(n_kv_heads, n_keys, mk);
    g.len = (n_keys + ns - 1) / ns;
    const int64_t used = (n_keys + g.len - 1) / g.len;
    g.ns = (int)((used + AD_CL - 1) / AD_CL * AD_CL);
    return g;
}

/* The L2 prefetch of the K / V rows (kv head kvh) of the split `split` of a query at pos (hints only: the rows below
 * pos are complete, since the kernel that wrote them ended long before this one's predecessor passed its PDL wait;
 * a line the step still writes only costs the hint). */
static __device__ __forceinline__ void attn_prefetch(const cmf_cuda_attn &a, const uint16_t *kc, const uint16_t *vc,
                                                     int64_t pos, int kvh, int split, int mk, bool kf) {
    const split_geo geo = decode_geo(a.n_kv_heads, a.window, pos, mk);
    if (split >= geo.ns) return;
    const int64_t j0 = geo.kf + (int64_t)split * geo.len;
    int64_t j1 = j0 + geo.len;
    if (j1 > pos + 1) j1 = pos + 1;
    const int es = kf ? 4 : 2, lines = (a.head_dim * es + 127) / 128;
    const int64_t rowb = (int64_t)a.n_kv_heads * a.head_dim * es, n = (j1 - j0) * lines;
    const char *kb = (const char *)kc + (int64_t)kvh * a.head_dim * es, *vb = (const char *)vc + (int64_t)kvh * a.head_dim * es;
    for (int64_t e = threadIdx.x; e < 2 * n; e += AD_THREADS) {
        const int64_t i = e < n ? e : e - n, off = (j0 + i / lines) * rowb + (i % lines) * 128;
        prefetch_l2((e < n ? kb : vb) + off);
    }
}

/* Block (kv head, split, head chunk): one work item of attn_decode.cuh (attn_split_item) by the whole block. */
template <int GH, int L, bool KF, bool FR, int KT>
static __global__ void __launch_bounds__(AD_THREADS) k_attn_split(cmf_cuda_attn a, const float *__restrict__ q,
                                                                  const uint16_t *__restrict__ kc,
                                                                  const uint16_t *__restrict__ vc, int64_t pos_h,
                                                                  const int32_t *__restrict__ dpos, int nsplit,
                                                                  float *__restrict__ work, int *__restrict__ done,
                                                                  float *__restrict__ out, AttnRope fr, int mk,
                                                                  int flags, CuPf pf) {
    TP_DECL;
    TP_AT(0);
    /* the position is written before the step's first kernel (complete by the PDL rule's chain) */
    const int64_t pos = dpos ? (int64_t)*dpos : pos_h;
    const uint64_t blk = blockIdx.x + (uint64_t)gridDim.x * (blockIdx.y + (uint64_t)gridDim.y * blockIdx.z),
                   nblk = (uint64_t)gridDim.x * gridDim.y * gridDim.z;
    if (threadIdx.x == 0 && pf.tot && (flags & 4)) l2pf_share(pf.p, pf.n, pf.tot, blk, nblk);
    if (flags & 1) attn_prefetch(a, kc, vc, pos, blockIdx.x, blockIdx.y, mk, KF);
    pdl_enter();
    TP_AT(1);
    if (threadIdx.x == 0 && pf.tot && !(flags & 4)) l2pf_share(pf.p, pf.n, pf.tot, blk, nblk);
    __shared__ AttnSm<GH, L, FR> S;
    attn_split_item<GH, L, KF, FR, KT>(a, q, kc, vc, pos, nsplit, work, done, out, fr, blockIdx.x, blockIdx.y,
                                       blockIdx.z, gridDim.z, threadIdx.x, 0, mk, S, flags & 2);
    TP_AT(2);
    TP_AT(3);
    TP_PUT(TP_ATTN, kc);
}

/* Block (split, kv head, head chunk) of a cluster of AD_CL splits (the cluster form above). ncl_max: the clusters
 * the grid holds (the partials' stride in work). */
template <int GH, int L, bool KF, bool FR, int KT>
static __global__ void __launch_bounds__(AD_THREADS) k_attn_cluster(cmf_cuda_attn a, const float *__restrict__ q,
                                                                    const uint16_t *__restrict__ kc,
                                                                    const uint16_t *__restrict__ vc, int64_t pos_h,
                                                                    const int32_t *__restrict__ dpos, int ncl_max,
                                                                    float *__restrict__ work, int *__restrict__ done,
                                                                    float *__restrict__ out, AttnRope fr, int mk,
                                                                    CuPf pf) {
    TP_DECL;
    TP_AT(0);
    const int64_t pos = dpos ? (int64_t)*dpos : pos_h; /* written before the step's first kernel */
    if (threadIdx.x == 0 && pf.tot) /* weights: immutable */
        l2pf_share(pf.p, pf.n, pf.tot, blockIdx.x + (uint64_t)gridDim.x * (blockIdx.y + (uint64_t)gridDim.y * blockIdx.z),
                   (uint64_t)gridDim.x * gridDim.y * gridDim.z);
    __shared__ AttnSm<GH, L, FR> S;
    __shared__ float part[GH][8 * L + 2]; /* this split's (max, sum, output[D]) per head */
    const int split = blockIdx.x, kvh = blockIdx.y, hz = blockIdx.z;
    const split_geo geo = cluster_geo(a.n_kv_heads, a.window, pos, mk);
    if (split >= geo.ns) return; /* a whole cluster past the position's keys */
    const int D = a.head_dim, G = a.n_heads / a.n_kv_heads, h0 = hz * AD_MAXG, gh = G - h0 < GH ? G - h0 : GH;
    /* with AD_CL_PRE the PDL wait is inside, after the first round's cached K / V rows are loaded */
    if (!AD_CL_PRE) pdl_enter();
    TP_AT(1); /* (with AD_CL_PRE: before the wait) */
    attn_split_partial<GH, L, KF, FR, KT, AD_CL_PRE>(a, q, kc, vc, pos, geo, fr, kvh, split, hz, threadIdx.x, 0, S,
                                                     &part[0][0], 8 * L + 2, TP_ARG);
    TP_AT(2);
    cg::cluster_group cl = cg::this_cluster();
    cl.sync(); /* every partial of the cluster written (release / acquire at cluster scope) */
    const int ncl = geo.ns / AD_CL, ci = split / AD_CL, r = (int)cl.block_rank();
    const int n = gh * D, per = (n + AD_CL - 1) / AD_CL, e1 = (r + 1) * per < n ? (r + 1) * per : n;
    for (int e = r * per + (int)threadIdx.x; e < e1; e += AD_THREADS) { /* this block's slice of the outputs */
        const int h = e / D, d = e % D;
        float m[AD_CL], l[AD_CL], o[AD_CL];
#pragma unroll
        for (int c = 0; c < AD_CL; c++) { /* independent loads: one round trip to the cluster's shared memory */
            const float *p = cl.map_shared_rank(&part[0][0], c) + h * (8 * L + 2);
            m[c] = p[0], l[c] = p[1], o[c] = p[2 + d];
        }
        float M = -INFINITY;
#pragma unroll
        for (int c = 0; c < AD_CL; c++) M = fmaxf(M, m[c]);
        float os = 0.0f, ls = 0.0f;
#pragma unroll
        for (int c = 0; c < AD_CL; c++) {
            const float f = m[c] > -INFINITY ? expf(m[c] - M) : 0.0f;
            os = fmaf(o[c], f, os), ls = fmaf(l[c], f, ls);
        }
        const int64_t hh = (int64_t)kvh * G + h0 + h;
        if (ncl == 1) {
            out[hh * D + d] = os / ls;
        } else {
            float *w = work + (hh * ncl_max + ci) * (D + 2);
            w[2 + d] = os;
            if (d == 0) w[0] = M, w[1] = ls;
        }
    }
    cl.sync(); /* no block leaves while another still reads its shared memory */
    TP_AT(3);
    if (ncl == 1) {
        TP_PUT(TP_ATTN_CL, kc);
        return;
    }
    /* several clusters: the last block to finish merges the clusters' partials (as attn_split_item) */
    __threadfence();
    __syncthreads();
    int *cnt = done + (int64_t)kvh * gridDim.z + hz;
    if (threadIdx.x == 0) S.last = atomicAdd(cnt, 1) == geo.ns - 1;
    __syncthreads();
    if (!S.last) {
        TP_PUT(TP_ATTN_CL, kc);
        return;
    }
    __threadfence();
    attn_merge_splits<GH, L, FR>(work + ((int64_t)kvh * G + h0) * ncl_max * (int64_t)(D + 2),
                                 out + ((int64_t)kvh * G + h0) * D, gh, ncl, ncl_max, D, threadIdx.x, 0, S);
    if (threadIdx.x == 0) *cnt = 0;
    TP_AT(3);
    TP_PUT(TP_ATTN_CL, kc);
}

/* cu_launch with clusters of AD_CL blocks along x (the PDL attribute as cu_launch sets it). */
template <typename... KArgs, typename... Args>
static cudaError_t cu_launch_cluster(void (*kernel)(KArgs...), dim3 grid, cudaStream_t s, Args... args) {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = dim3(AD_THREADS);
    cfg.stream = s;
    cudaLaunchAttribute at[2];
    at[0].id = cudaLaunchAttributeClusterDimension;
    at[0].val.clusterDim.x = AD_CL, at[0].val.clusterDim.y = 1, at[0].val.clusterDim.z = 1;
    at[1].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    at[1].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = at;
    cfg.numAttrs = cmf_cuda_pdl_on() ? 2 : 1;
    return cudaLaunchKernelEx(&cfg, kernel, ((KArgs)args)...);
}

/* Whether the cluster form serves gh query heads per block at L lanes per key row and kt keys per round: not 8
 * heads of head_dim 256 (its shared memory, AttnSm plus the partial, would pass the 48 KiB of static shared memory),
 * and only the default tile (1 below head_dim 64), which halves the kernels compiled. */
static constexpr bool cluster_fits(int gh, int L, int kt) { return !(gh > 4 && L >= 32) && kt == (L < 8 ? 1 : AD_KT); }

/* One decode launch: the cluster form (clu, where cluster_fits) or the plain kernel. */
template <int GH, int LL, bool KF, bool F, int KT>
static cudaError_t as_launch(bool clu, dim3 grid, const cmf_cuda_attn &a, const float *q, const uint16_t *k,
                             const uint16_t *v, int64_t pos, const int32_t *dpos, int ns, float *work, int *done,
                             float *out, const AttnRope &fr, const CuPf &pf, cudaStream_t s) {
    if constexpr (cluster_fits(GH, LL, KT)) {
        if (clu)
            return cu_launch_cluster(k_attn_cluster<GH, LL, KF, F, KT>, grid, s, a, q, k, v, pos, dpos, ns, work, done,
                                     out, fr, ad_cluster_mk(), pf);
    }
    return cu_launch(k_attn_split<GH, LL, KF, F, KT>, grid, AD_THREADS, 0, s, a, q, k, v, pos, dpos, ns, work, done,
                     out, fr, ad_split_keys(), ad_flags(), pf);
}

template <int GH, bool KF, int KT>
static void launch_split(int L, bool clu, dim3 grid, const cmf_cuda_attn &a, const float *q, const uint16_t *k,
                         const uint16_t *v, int64_t pos, const int32_t *dpos, int ns, float *work, int *done,
                         float *out, const AttnRope &fr, const CuPf &pf, cudaStream_t s) {
#define AS(LL, F) as_launch<GH, LL, KF, F, KT>(clu, grid, a, q, k, v, pos, dpos, ns, work, done, out, fr, pf, s)
    if (fr.on) { /* head_dim 40..256 (cmf_cuda_attn_decode_rope_ok) */
        if (L == 8) AS(8, true);
        else if (L == 16) AS(16, true);
        else AS(32, true);
        return;
    }
    if constexpr (KT == 1) { /* head_dim <= 32 runs untiled (launch_tile) */
        if (L == 1) return (void)AS(1, false);
        if (L == 2) return (void)AS(2, false);
        if (L == 4) return (void)AS(4, false);
    }
    if (L == 8) AS(8, false);
    else if (L == 16) AS(16, false);
    else AS(32, false);
#undef AS
}

/* launch_split at the tile of ad_tile() (1 for head_dim <= 32) */
template <int GH, bool KF>
static void launch_tile(int L, bool clu, dim3 grid, const cmf_cuda_attn &a, const float *q, const uint16_t *k,
                        const uint16_t *v, int64_t pos, const int32_t *dpos, int ns, float *work, int *done,
                        float *out, const AttnRope &fr, const CuPf &pf, cudaStream_t s) {
    const int t = L < 8 ? 1 : ad_tile();
    if (t == 4) launch_split<GH, KF, 4>(L, clu, grid, a, q, k, v, pos, dpos, ns, work, done, out, fr, pf, s);
    else launch_split<GH, KF, 1>(L, clu, grid, a, q, k, v, pos, dpos, ns, work, done, out, fr, pf, s);
}

/* One decode launch's arguments (attention.cu's decode_launch fills them). */
struct AttnLaunch {
    int L;     /* lanes per key row: pow2 >= head_dim / 8 */
    bool clu;  /* the cluster form */
    dim3 grid;
    cmf_cuda_attn a;
    const float *q;
    const uint16_t *k, *v;
    int64_t pos;
    const int32_t *dpos;
    int ns;
    float *work;
    int *done;
    float *out;
    AttnRope fr;
    CuPf pf;
    cudaStream_t s;
};

/* launch_tile for GH query heads per block at the launch's KV cache type. */
template <int GH> static void attn_launch_kv(const AttnLaunch &l) {
    if (l.a.kv_type == CMF_CUDA_KV_F32)
        launch_tile<GH, true>(l.L, l.clu, l.grid, l.a, l.q, l.k, l.v, l.pos, l.dpos, l.ns, l.work, l.done, l.out, l.fr,
                              l.pf, l.s);
    else
        launch_tile<GH, false>(l.L, l.clu, l.grid, l.a, l.q, l.k, l.v, l.pos, l.dpos, l.ns, l.work, l.done, l.out, l.fr,
                               l.pf, l.s);
}

/* The launches of 1, 2, 4 and 8 query heads per block (attn_decode_g1.cu .. _g8.cu). */
void attn_launch_g1(const AttnLaunch &l);
void attn_launch_g2(const AttnLaunch &l);
void attn_launch_g4(const AttnLaunch &l);
void attn_launch_g8(const AttnLaunch &l);

#endif
