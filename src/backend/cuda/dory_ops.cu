/* dory_ops.cu — the cuda table of backend/dory_ops.h: the Dory forward (shared/spec/DORY.md §1.4–§1.7) on one
 * device and one stream, driven by the same model code as the cpu (src/model/dory_forward.c).
 *
 *  - Weights: every matrix payload uploaded once, exactly as stored (CMF_FORMAT.md §2), read in place by the
 *    kernels of cuda_ops.h (cmf_cuda_embed; cmf_cuda_matvec / cmf_cuda_matvec_multi for n <= 8 tokens: q,k / v,g
 *    and gate,up two to a launch). Prefill products (n > 8) by dtype (prefill_tc): f32 and f16 weights in f32 by
 *    cublasSgemm (f16 decoded to f32 row tiles by cmf_cuda_dequant first: the 2e-3 parity of issue 6 is for these);
 *    q8_row / q8_2f by cmf_cuda_gemm's int8 tensor-core GEMM (three int8 levels per token: ~1e-6 relative);
 *    bf16 and the 4-bit family by cmf_cuda_gemm's cuBLAS path (bf16 / f16 operands on the tensor cores, f32
 *    accumulation), whose operand rounding is below the weights' own. CMF_DORY_CUDA_PREFILL=f32 runs every dtype
 *    through the f32 path. The model's f32 scale arena (λ, q/gate scales, suv, logit scale, RoPE
 *    tables) is one device copy; a host pointer into d->arena maps to the same offset in it.
 *  - KV cache: f32 on the device, the cpu layout (slot rows of n_kv_heads·head_dim; sliding rings at p % rows), so
 *    both KV modes and the rings are the model code's slot choice, unchanged.
 *  - The Dory kernels below: justnorm rows (sums in double, as the cpu), the nGPT residual, NeoX RoPE + per-head
 *    justnorm (angles in double) with the K/V cache write in the same launch, the output gate, SwiGLU + norm, and
 *    attention over the slot: one block per (token, query head), keys in tiles of ATT_TILE (scores by warps into
 *    shared memory, one max and rescale per tile, then the weighted V rows by groups of threads, each owning four
 *    dims), merged at the end. Positions and token ids are read from device memory (the session's d_step), so a
 *    launch does not depend on the position. Every kernel is launched with Programmatic Dependent Launch
 *    (cu_launch, common.cuh) and waits for its predecessor before touching activations.
 *  - CUDA graphs: the model code runs a chunk as segments (input block + pass 0, each later pass, output block);
 *    for n <= 8 tokens each segment is captured once per session and key into a graph and replayed afterwards
 *    (g_segment), the token ids and the position copied to d_step before. The head (one product, the logit scale,
 *    the download) runs eagerly after the last segment. CMF_DORY_CUDA_GRAPH=0 or cmf_dory_cuda_set_graphs(d, 0)
 *    runs every launch eagerly (the same kernels with the same arguments: bit for bit the same logits).
 *  - Host synchronisation: the logits download of head() and the Recon gate's φ (to_host); every public call ends
 *    with a stream sync that reports device faults. The model's lock serialises calls of several sessions (one
 *    stream, one cuBLAS handle, one tile scratch).
 * The O(1) far field is refused by dory_o1.c for sessions on this backend (CMF_E_UNSUPPORTED). */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cublas_v2.h>

#include <new>
#include <unordered_map>
#include <vector>

#include "backend/cuda/common.cuh"

extern "C" {
#include "backend/dory_ops.h"
#include "model/dory.h"
}

namespace {

enum { ROW_THREADS = 256, ATT_THREADS = 256, ATT_TILE = 256, MAX_HD = 256, MAX_GRAPHS = 64 };

const size_t SCRATCH_FLOATS = (size_t)1 << 24; /* 64 MiB of f32 weight tiles for the prefill products */

struct dory_dev {
    int dev;
    cudaStream_t stream;
    cublasHandle_t blas;
    pthread_mutex_t mu;
    std::unordered_map<const void *, void *> payloads; /* host payload start -> device copy */
    float *d_arena;                                    /* device copy of d->arena */
    float *d_tile;                                     /* f32 weight tiles (prefill), tile_floats values */
    size_t tile_floats;
    cmf_cuda_ctx *gemm;                                /* cmf_cuda_gemm's cuBLAS handle + scratch (prefill_tc) */
    int prefill_f32;                                   /* CMF_DORY_CUDA_PREFILL=f32: no tensor-core prefill */
    int graphs_on;                     /* segments as CUDA graphs (g_segment) */
    uint64_t n_captured, n_replayed;   /* segment graphs of all sessions (under mu) */
};

struct graph_entry {
    int key;
    cudaGraphExec_t exec;
};

struct dory_sess {
    float *d_logits;                 /* [n_batch][V] */
    int32_t *d_step;                 /* [1 + n_batch]: the chunk's first position, then its token ids */
    int32_t *h_step;                 /* host staging of d_step */
    int in_segment;                  /* d_step already holds this chunk (g_segment uploaded it) */
    std::vector<graph_entry> graphs; /* this session's segment graphs by key */
};

dory_dev *DEV(const cmf_dory_state *s) { return (dory_dev *)s->d->be; }
dory_sess *SESS(const cmf_dory_state *s) { return (dory_sess *)s->be; }

/* The device copy of a host pointer into the model's scale arena. */
const float *dvec(const cmf_dory_state *s, const float *h) { return DEV(s)->d_arena + (h - s->d->arena); }

/* ---- kernels ------------------------------------------------------------------------------------------------ */

/* Sum of v over the block (every thread gets the same value: all add the warp sums in the same order). sh: 32. */
__device__ double block_sum(double v, double *sh) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    __syncthreads(); /* sh may still be read from an earlier call */
    if ((threadIdx.x & 31) == 0) sh[threadIdx.x >> 5] = v;
    __syncthreads();
    double t = 0;
    for (int w = 0; w < (int)(blockDim.x + 31) / 32; w++) t += sh[w];
    return t;
}

/* justnorm's factor 1/sqrt(Σx² + 1e-6) as the cpu rounds it (§1.4). */
__device__ float norm_factor(double ss) { return (float)(1.0 / sqrt(ss + 1e-6)); }

/* One block per row of H: x = justnorm(x (+ inp when add)). */
__global__ void k_reinject(float *x, const float *inp, int64_t H, int add) {
    pdl_enter();
    __shared__ double sh[32];
    float *xr = x + blockIdx.x * H;
    const float *ir = inp + blockIdx.x * H;
    double ss = 0;
    for (int64_t j = threadIdx.x; j < H; j += blockDim.x) {
        float v = xr[j];
        if (add) v += ir[j];
        xr[j] = v;
        ss += (double)v * v;
    }
    const float r = norm_factor(block_sum(ss, sh));
    for (int64_t j = threadIdx.x; j < H; j += blockDim.x) xr[j] *= r;
}

/* One block per row: x = justnorm(a + λ ⊙ (b − a)), a = justnorm(x), b = justnorm(y) (§1.4). */
__global__ void k_residual(float *x, const float *y, const float *lam, int64_t H) {
    pdl_enter();
    __shared__ double sh[32];
    float *xr = x + blockIdx.x * H;
    const float *yr = y + blockIdx.x * H;
    double sx = 0, sy = 0;
    for (int64_t j = threadIdx.x; j < H; j += blockDim.x) {
        sx += (double)xr[j] * xr[j];
        sy += (double)yr[j] * yr[j];
    }
    const float rx = norm_factor(block_sum(sx, sh)), ry = norm_factor(block_sum(sy, sh));
    double ss = 0;
    for (int64_t j = threadIdx.x; j < H; j += blockDim.x) {
        const float a = xr[j] * rx, b = yr[j] * ry;
        const float v = a + lam[j] * (b - a);
        xr[j] = v;
        ss += (double)v * v;
    }
    const float r = norm_factor(block_sum(ss, sh));
    for (int64_t j = threadIdx.x; j < H; j += blockDim.x) xr[j] *= r;
}

/* One block per row of QD: y = justnorm(y ⊙ sigmoid(g ⊙ gs)) (§1.5 steps 5–6). */
__global__ void k_gate_norm(float *att, const float *g, const float *gs, int64_t QD) {
    pdl_enter();
    __shared__ double sh[32];
    float *y = att + blockIdx.x * QD;
    const float *gr = g + blockIdx.x * QD;
    double ss = 0;
    for (int64_t e = threadIdx.x; e < QD; e += blockDim.x) {
        const float v = y[e] * (1.0f / (1.0f + expf(-gr[e] * gs[e])));
        y[e] = v;
        ss += (double)v * v;
    }
    const float r = norm_factor(block_sum(ss, sh));
    for (int64_t e = threadIdx.x; e < QD; e += blockDim.x) y[e] *= r;
}

/* One block per row of F: hb = justnorm(silu(hb ⊙ sg) ⊙ (hb2 ⊙ su)) (§1.6). */
__global__ void k_swiglu_norm(float *hb, const float *hb2, const float *sg, const float *su, int64_t F) {
    pdl_enter();
    __shared__ double sh[32];
    float *g = hb + blockIdx.x * F;
    const float *u = hb2 + blockIdx.x * F;
    double ss = 0;
    for (int64_t e = threadIdx.x; e < F; e += blockDim.x) {
        const float gv = g[e] * sg[e];
        const float v = gv / (1.0f + expf(-gv)) * (u[e] * su[e]);
        g[e] = v;
        ss += (double)v * v;
    }
    const float r = norm_factor(block_sum(ss, sh));
    for (int64_t e = threadIdx.x; e < F; e += blockDim.x) g[e] *= r;
}

/* Block (token t, head h of the nh query heads then the nk KV heads), token t at position step[0] + t: NeoX RoPE
 * with the angle in double, justnorm over the head, and q ⊙= q_scale (§1.5 steps 2–3); a KV head's block then
 * writes its K (rotated, normalised) and V rows into the slot's row of that position (§1.8: ring p % rows; a full
 * cache skips p >= rows). */
__global__ void k_qk_kv(float *q, float *k, const float *v, float *kc, float *vc, const float *qscale,
                        const float *inv, int nh, int nk, int hd, const int32_t *step, int rows, int ring) {
    pdl_enter();
    __shared__ double sh[32];
    const int t = blockIdx.x, h = blockIdx.y, half = hd / 2, p = step[0] + t;
    const int is_q = h < nh;
    const int64_t KVD = (int64_t)nk * hd;
    float *x = is_q ? q + ((int64_t)t * nh + h) * hd : k + (int64_t)t * KVD + (int64_t)(h - nh) * hd;
    double ss = 0;
    for (int j = threadIdx.x; j < half; j += blockDim.x) {
        double sn, cs;
        sincos((double)p * inv[j], &sn, &cs);
        const float c = (float)cs, s = (float)sn, a = x[j], b = x[j + half];
        const float xa = a * c - b * s, xb = b * c + a * s;
        x[j] = xa;
        x[j + half] = xb;
        ss += (double)xa * xa + (double)xb * xb;
    }
    const float r = norm_factor(block_sum(ss, sh));
    const int store = !is_q && (ring || p < rows);
    const int64_t row = ring ? p % rows : p;
    float *kr = kc + row * KVD + (int64_t)(h - nh) * hd;
    for (int j = threadIdx.x; j < half; j += blockDim.x) {
        float a = x[j] * r, b = x[j + half] * r;
        if (is_q) {
            a *= qscale[h * hd + j];
            b *= qscale[h * hd + j + half];
        }
        x[j] = a;
        x[j + half] = b;
        if (store) {
            kr[j] = a;
            kr[j + half] = b;
        }
    }
    if (store) {
        const float *vr = v + (int64_t)t * KVD + (int64_t)(h - nh) * hd;
        float *vo = vc + row * KVD + (int64_t)(h - nh) * hd;
        for (int e = threadIdx.x; e < hd; e += blockDim.x) vo[e] = vr[e];
    }
}

/* Block (token t, query head h) of ATT_THREADS threads, token t at position p = step[0] + t (§1.5 step 4): keys
 * lo..p (lo = p − window + 1 clipped at 0 when window > 0), GQA (head h reads KV head h / (nh / nk)), in tiles of
 * ATT_TILE keys. Per tile: warp w scores keys w, w + 8, .. (float4 loads of q and the K row, a warp sum) into shared
 * memory; one block max; the weights exp(s − m) replace the scores; thread group g (hd / 4 threads, thread c owns
 * dims 4c..4c+3) adds the weighted V rows of keys g, g + G, .. with a running rescale (online softmax across tiles).
 * The groups' sums are merged at the end. hd % 4 == 0, hd <= MAX_HD (checked at attach). */
__global__ void __launch_bounds__(ATT_THREADS) k_attend(float *att, const float *q, const float *kc, const float *vc,
                                                        int nh, int nk, int hd, const int32_t *step, int rows, int ring,
                                                        int window, float scale) {
    pdl_enter();
    __shared__ float4 qs[MAX_HD / 4];
    __shared__ float sc[ATT_TILE];
    __shared__ float part[ATT_THREADS * 4];
    __shared__ float lpart[ATT_THREADS];
    __shared__ float red[ATT_THREADS / 32];
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, NW = ATT_THREADS / 32;
    const int t = blockIdx.x, h = blockIdx.y, kh = h / (nh / nk), p = step[0] + t;
    const int lo = window && p - window + 1 > 0 ? p - window + 1 : 0;
    const int hd4 = hd / 4, G = ATT_THREADS / hd4, g = tid / hd4, c = tid % hd4;
    const int64_t KVD = (int64_t)nk * hd, hoff = (int64_t)kh * hd;
    const float4 *qr = (const float4 *)(q + ((int64_t)t * nh + h) * hd);
    for (int i = tid; i < hd4; i += ATT_THREADS) qs[i] = qr[i];
    __syncthreads();
    float m = -INFINITY, l = 0;
    float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    for (int j0 = lo; j0 <= p; j0 += ATT_TILE) {
        const int nt = p - j0 + 1 < ATT_TILE ? p - j0 + 1 : ATT_TILE;
#pragma unroll 4
        for (int i = warp; i < nt; i += NW) {
            const int j = j0 + i;
            const float4 *kr = (const float4 *)(kc + (int64_t)(ring ? j % rows : j) * KVD + hoff);
            float d = 0;
            for (int e = lane; e < hd4; e += 32) {
                const float4 a = qs[e], b = kr[e];
                d += a.x * b.x + a.y * b.y + a.z * b.z + a.w * b.w;
            }
            d = warp_sum(d);
            if (lane == 0) sc[i] = d * scale;
        }
        __syncthreads();
        float mx = -INFINITY;
        for (int i = tid; i < nt; i += ATT_THREADS) mx = fmaxf(mx, sc[i]);
        mx = warp_max(mx);
        if (lane == 0) red[warp] = mx;
        __syncthreads();
        mx = red[0];
        for (int w = 1; w < NW; w++) mx = fmaxf(mx, red[w]);
        const float mn = fmaxf(m, mx), corr = expf(m - mn);
        for (int i = tid; i < nt; i += ATT_THREADS) sc[i] = expf(sc[i] - mn);
        __syncthreads();
        float ls = 0;
        float4 a4 = make_float4(acc.x * corr, acc.y * corr, acc.z * corr, acc.w * corr);
        if (g < G) {
#pragma unroll 4
            for (int i = g; i < nt; i += G) {
                const int j = j0 + i;
                const float w = sc[i];
                const float4 vv = ((const float4 *)(vc + (int64_t)(ring ? j % rows : j) * KVD + hoff))[c];
                a4.x += w * vv.x;
                a4.y += w * vv.y;
                a4.z += w * vv.z;
                a4.w += w * vv.w;
                ls += w;
            }
        }
        acc = a4;
        l = l * corr + ls;
        m = mn;
        __syncthreads(); /* sc and red are rewritten by the next tile */
    }
    if (g < G) {
        part[g * hd + 4 * c] = acc.x;
        part[g * hd + 4 * c + 1] = acc.y;
        part[g * hd + 4 * c + 2] = acc.z;
        part[g * hd + 4 * c + 3] = acc.w;
        if (c == 0) lpart[g] = l;
    }
    __syncthreads();
    float *out = att + ((int64_t)t * nh + h) * hd;
    for (int e = tid; e < hd; e += ATT_THREADS) {
        float L = 0, sum = 0;
        for (int w = 0; w < G; w++) {
            sum += part[w * hd + e];
            L += lpart[w];
        }
        out[e] = sum / L;
    }
}

/* y[i] *= s[i % V] (the head's logit_scale / σ₀). */
__global__ void k_scale_cols(float *y, const float *s, int64_t n, int64_t V) {
    pdl_enter();
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        y[i] *= s[i % V];
}

/* ---- ops ---------------------------------------------------------------------------------------------------- */

cmf_status g_buf_alloc(cmf_dory_state *s, size_t n_floats, float **out) {
    *out = NULL;
    CU_TRY(cudaSetDevice(DEV(s)->dev), "cudaSetDevice");
    void *p = NULL;
    cmf_status st = cmf_cuda_malloc(&p, (n_floats ? n_floats : 1) * sizeof(float));
    if (st != CMF_OK) return st;
    st = cmf_cuda_memset(p, 0, (n_floats ? n_floats : 1) * sizeof(float), DEV(s)->stream); /* ordered with the ops */
    if (st != CMF_OK) {
        cmf_cuda_free(p);
        return st;
    }
    *out = (float *)p;
    return CMF_OK;
}

void g_buf_free(cmf_dory_state *s, float *buf) {
    (void)s;
    cmf_cuda_free(buf);
}

cmf_status g_state_init(cmf_dory_state *s) {
    dory_sess *S = new (std::nothrow) dory_sess();
    if (!S) return cmf_err(CMF_E_NOMEM, "dory cuda: out of host memory");
    s->be = S;
    try {
        S->graphs.reserve(MAX_GRAPHS); /* g_segment never grows it past this, so push_back cannot throw */
    } catch (...) {
        return cmf_err(CMF_E_NOMEM, "dory cuda: out of host memory");
    }
    S->h_step = (int32_t *)malloc(((size_t)s->n_batch + 1) * sizeof(int32_t));
    if (!S->h_step) return cmf_err(CMF_E_NOMEM, "dory cuda: out of host memory");
    cmf_status st = g_buf_alloc(s, (size_t)s->n_batch * (size_t)s->d->cfg.vocab_size, &S->d_logits);
    if (st == CMF_OK) st = cmf_cuda_malloc((void **)&S->d_step, ((size_t)s->n_batch + 1) * sizeof(int32_t));
    return st;
}

void g_state_free(cmf_dory_state *s) {
    dory_sess *S = SESS(s);
    if (!S) return;
    for (graph_entry &g : S->graphs) cudaGraphExecDestroy(g.exec);
    cmf_cuda_free(S->d_logits);
    cmf_cuda_free(S->d_step);
    free(S->h_step);
    delete S;
    s->be = NULL;
}

cmf_status g_begin(cmf_dory_state *s) {
    dory_dev *D = DEV(s);
    pthread_mutex_lock(&D->mu);
    cudaError_t e = cudaSetDevice(D->dev);
    if (e != cudaSuccess) {
        pthread_mutex_unlock(&D->mu);
        return cu_fail(e, "cudaSetDevice");
    }
    return CMF_OK;
}

cmf_status g_end(cmf_dory_state *s) {
    dory_dev *D = DEV(s);
    cmf_status st = cmf_cuda_sync(D->stream);
    pthread_mutex_unlock(&D->mu);
    return st;
}

cmf_status g_copy(cmf_dory_state *s, float *dst, const float *src, size_t n) {
    return cmf_cuda_copy(dst, src, n * sizeof(float), DEV(s)->stream);
}

cmf_status g_to_host(cmf_dory_state *s, float *host, const float *src, size_t n) {
    cmf_status st = cmf_cuda_download(host, src, n * sizeof(float), DEV(s)->stream);
    return st == CMF_OK ? cmf_cuda_sync(DEV(s)->stream) : st;
}

/* The device view of a host weight of the model (resident since attach). */
cmf_status dev_weight(const cmf_dory_state *s, const cmf_weight *w, cmf_cuda_weight *out) {
    auto it = DEV(s)->payloads.find(w->data);
    if (it == DEV(s)->payloads.end())
        return cmf_err(CMF_E_ARG, "dory cuda: a weight of %lldx%lld is not resident", (long long)w->rows,
                       (long long)w->cols);
    out->dtype = w->dtype;
    out->rows = w->rows;
    out->cols = w->cols;
    out->d_data = it->second;
    return CMF_OK;
}

/* d_step = {s->pos, tokens[0..n)} (host staging, then an asynchronous copy on the stream). */
cmf_status upload_step(cmf_dory_state *s, const int32_t *tokens, int n) {
    dory_sess *S = SESS(s);
    S->h_step[0] = s->pos;
    memcpy(S->h_step + 1, tokens, (size_t)n * sizeof(int32_t));
    return cmf_cuda_upload(S->d_step, S->h_step, ((size_t)n + 1) * sizeof(int32_t), DEV(s)->stream);
}

cmf_status g_embed(cmf_dory_state *s, float *x, const int32_t *tokens, int n) {
    cmf_cuda_weight cw;
    cmf_status st = dev_weight(s, &s->d->embed, &cw);
    if (st == CMF_OK && !SESS(s)->in_segment) st = upload_step(s, tokens, n);
    if (st == CMF_OK) st = cmf_cuda_embed(&cw, SESS(s)->d_step + 1, n, 1.0f, x, DEV(s)->stream);
    return st;
}

/* cuBLAS y[t][r0 + i] = Σ_c x[t][c]·W[i][c] for i < nr, t < n, with W an f32 [nr][cols] row block (column-major
 * it is Wᵀ with ld = cols), f32 operands and accumulation (no TF32: the handle keeps CUBLAS_DEFAULT_MATH). */
cmf_status sgemm(dory_dev *D, const float *w, int64_t nr, int64_t cols, const float *x, int n, float *y, int64_t ld_y) {
    const float one = 1.0f, zero = 0.0f;
    cublasStatus_t bs = cublasSgemm(D->blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)nr, n, (int)cols, &one, w, (int)cols, x,
                                    (int)cols, &zero, y, (int)ld_y);
    return bs == CUBLAS_STATUS_SUCCESS ? CMF_OK : cmf_err(CMF_E_IO, "dory cuda: cublasSgemm failed (status %d)", (int)bs);
}

/* Whether a prefill product of this dtype runs on the tensor cores (cmf_cuda_gemm) rather than in f32. f32 and f16
 * weights stay in f32: the f16-operand GEMM was measured too coarse for their 2e-3 parity (test_gpu_dory: up to
 * 7.5e-3 x max|logit| on r64_b at f16). q8_row / q8_2f take the int8 GEMM (~1e-6 relative); bf16 and the 4-bit
 * dtypes take bf16 / f16 operands, no coarser than their weights (test_gpu_dory's "mid" bf16 / q8 passes). */
int prefill_tc(const dory_dev *D, int dtype) {
    return !D->prefill_f32 && dtype != CMF_DT_F32 && dtype != CMF_DT_F16;
}

/* Decode products (n <= 8) by cmf_cuda_matvec; prefill products by cmf_cuda_gemm (prefill_tc) or in f32 by cuBLAS:
 * f32 weights as stored, other dtypes decoded to f32 row tiles first (cmf_cuda_dequant, the values of cmf_dequant). */
cmf_status g_matmul(cmf_dory_state *s, float *out, const float *x, int n, const cmf_weight *w) {
    dory_dev *D = DEV(s);
    cmf_cuda_weight cw;
    cmf_status st = dev_weight(s, w, &cw);
    if (st != CMF_OK) return st;
    if (n <= 8) return cmf_cuda_matvec(&cw, x, out, n, D->stream);
    if (D->gemm && prefill_tc(D, w->dtype)) return cmf_cuda_gemm(D->gemm, &cw, x, out, n, CMF_CUDA_GEMM_AUTO, D->stream);
    if (w->dtype == CMF_DT_F32) return sgemm(D, (const float *)cw.d_data, w->rows, w->cols, x, n, out, w->rows);
    int64_t tile = (int64_t)(D->tile_floats / (size_t)w->cols);
    if (tile < 1) return cmf_err(CMF_E_ARG, "dory cuda: rows of %lld values exceed the tile scratch", (long long)w->cols);
    for (int64_t r0 = 0; r0 < w->rows && st == CMF_OK; r0 += tile) {
        const int64_t nr = w->rows - r0 < tile ? w->rows - r0 : tile;
        st = cmf_cuda_dequant(&cw, r0, nr, D->d_tile, CMF_CUDA_F32, D->stream);
        if (st == CMF_OK) st = sgemm(D, D->d_tile, nr, w->cols, x, n, out + r0, w->rows);
    }
    return st;
}

/* Decode (n <= 8): the weights in launches of up to three (cmf_cuda_matvec_multi, when their dtype and cols allow;
 * four weights go two and two), each output bit for bit its single product; prefill: one g_matmul per weight. */
cmf_status g_matmuls(cmf_dory_state *s, int count, float *const *out, const float *x, int n,
                     const cmf_weight *const *w) {
    if (count < 1 || count > 4) return cmf_err(CMF_E_ARG, "dory cuda: %d products in one call (1..4)", count);
    cmf_status st = CMF_OK;
    if (n > 8 || count == 1) {
        for (int i = 0; i < count && st == CMF_OK; i++) st = g_matmul(s, out[i], x, n, w[i]);
        return st;
    }
    cmf_cuda_weight cw[4];
    for (int i = 0; i < count && st == CMF_OK; i++) st = dev_weight(s, w[i], &cw[i]);
    for (int i = 0, k; i < count && st == CMF_OK; i += k) {
        const int left = count - i, groups = (left + 2) / 3;
        k = (left + groups - 1) / groups;
        if (k > 1 && cmf_cuda_matvec_multi_ok(cw + i, k, n)) {
            st = cmf_cuda_matvec_multi(cw + i, k, x, out + i, NULL, n, DEV(s)->stream);
        } else {
            cmf_err_clear(); /* multi_ok's reason */
            for (int j = i; j < i + k && st == CMF_OK; j++) st = cmf_cuda_matvec(&cw[j], x, out[j], n, DEV(s)->stream);
        }
    }
    return st;
}

cmf_status g_qk_norm_kv(cmf_dory_state *s, const cmf_dory_layer *L, int layer, int slot, int n, int pos0) {
    (void)pos0; /* read from d_step */
    const cmf_dory_config *c = &s->d->cfg;
    const cmf_dory_kv *kv = &s->kv[slot];
    const int hd = c->head_dim;
    const float *inv = s->d->inv_freq + (c->rope_profile[layer] == 2 ? hd / 2 : 0);
    const int threads = hd / 2 < 32 ? 32 : hd / 2 > 128 ? 128 : (hd / 2 + 31) / 32 * 32;
    CU_TRY(cu_launch(k_qk_kv, dim3((unsigned)n, (unsigned)(c->n_heads + c->n_kv_heads)), dim3(threads), 0,
                     DEV(s)->stream, s->q, s->k, (const float *)s->v, kv->k, kv->v, dvec(s, L->q_scale), dvec(s, inv),
                     c->n_heads, c->n_kv_heads, hd, (const int32_t *)SESS(s)->d_step, kv->rows, kv->ring),
           "dory q/k RoPE, norm and KV write");
    return CMF_OK;
}

cmf_status g_attend(cmf_dory_state *s, int slot, int n, int pos0, int sliding) {
    (void)pos0; /* read from d_step */
    const cmf_dory_config *c = &s->d->cfg;
    const cmf_dory_kv *kv = &s->kv[slot];
    const float scale = 1.0f / sqrtf((float)c->head_dim);
    CU_TRY(cu_launch(k_attend, dim3((unsigned)n, (unsigned)c->n_heads), dim3(ATT_THREADS), 0, DEV(s)->stream, s->att,
                     (const float *)s->q, (const float *)kv->k, (const float *)kv->v, c->n_heads, c->n_kv_heads,
                     c->head_dim, (const int32_t *)SESS(s)->d_step, kv->rows, kv->ring, sliding ? c->swa_window : 0,
                     scale),
           "dory attention");
    return CMF_OK;
}

cmf_status g_gate_norm(cmf_dory_state *s, const cmf_dory_layer *L, int n) {
    const int64_t QD = (int64_t)s->d->cfg.n_heads * s->d->cfg.head_dim;
    CU_TRY(cu_launch(k_gate_norm, dim3((unsigned)n), dim3(ROW_THREADS), 0, DEV(s)->stream, s->att, (const float *)s->g,
                     dvec(s, L->g_scale), QD),
           "dory output gate");
    return CMF_OK;
}

cmf_status g_swiglu_norm(cmf_dory_state *s, const cmf_dory_layer *L, int n) {
    CU_TRY(cu_launch(k_swiglu_norm, dim3((unsigned)n), dim3(ROW_THREADS), 0, DEV(s)->stream, s->hb,
                     (const float *)s->hb2, dvec(s, L->suv_gate), dvec(s, L->suv_up),
                     (int64_t)s->d->cfg.intermediate_size),
           "dory SwiGLU");
    return CMF_OK;
}

cmf_status g_residual(cmf_dory_state *s, const float *lambda, int n) {
    CU_TRY(cu_launch(k_residual, dim3((unsigned)n), dim3(ROW_THREADS), 0, DEV(s)->stream, s->x, (const float *)s->xr,
                     dvec(s, lambda), (int64_t)s->d->cfg.hidden_size),
           "dory residual");
    return CMF_OK;
}

cmf_status g_reinject(cmf_dory_state *s, int n) {
    CU_TRY(cu_launch(k_reinject, dim3((unsigned)n), dim3(ROW_THREADS), 0, DEV(s)->stream, s->x, (const float *)s->inp,
                     (int64_t)s->d->cfg.hidden_size, 1),
           "dory re-injection");
    return CMF_OK;
}

cmf_status g_normalize(cmf_dory_state *s, int n) {
    CU_TRY(cu_launch(k_reinject, dim3((unsigned)n), dim3(ROW_THREADS), 0, DEV(s)->stream, s->x, (const float *)s->x,
                     (int64_t)s->d->cfg.hidden_size, 0),
           "dory justnorm");
    return CMF_OK;
}

cmf_status g_head(cmf_dory_state *s, const float *h, int rows, float *out_host) {
    const cmf_dory *d = s->d;
    const int64_t V = d->cfg.vocab_size, need = (int64_t)rows * V;
    if (rows > s->n_batch) return cmf_err(CMF_E_ARG, "dory cuda: head of %d rows exceeds the batch %d", rows, s->n_batch);
    float *y = SESS(s)->d_logits;
    cmf_status st = g_matmul(s, y, h, rows, &d->lm_head);
    if (st != CMF_OK) return st;
    CU_TRY(cu_launch(k_scale_cols, dim3(grid1d(need, 256)), dim3(256), 0, DEV(s)->stream, y, dvec(s, d->logit_scale),
                     need, V),
           "dory logit scale");
    return cmf_cuda_download(out_host, y, (size_t)need * sizeof(float), DEV(s)->stream);
}

typedef cmf_status (*seg_body)(cmf_dory_state *s, const int32_t *tokens, int loop, int n);

/* Captures body into a graph for `key` (the caller holds the model's lock and has uploaded d_step) and launches it.
 * A capture that fails (refused, or an op failing inside it) has queued nothing, so the body then runs eagerly and
 * the model's graphs are switched off (a real fault is reported by that eager run). */
cmf_status capture(cmf_dory_state *s, int key, seg_body body, const int32_t *tokens, int loop, int n) {
    dory_dev *D = DEV(s);
    dory_sess *S = SESS(s);
    if (cudaStreamBeginCapture(D->stream, cudaStreamCaptureModeRelaxed) != cudaSuccess) {
        cudaGetLastError();
        return body(s, tokens, loop, n);
    }
    cmf_status st = body(s, tokens, loop, n);
    cudaGraph_t g = NULL;
    cudaError_t e = cudaStreamEndCapture(D->stream, &g);
    cudaGraphExec_t ex = NULL;
    if (st == CMF_OK && e == cudaSuccess) e = cudaGraphInstantiate(&ex, g, 0);
    if (g) cudaGraphDestroy(g);
    if (st != CMF_OK || e != cudaSuccess) { /* nothing of the body ran: eager launches instead, graphs off */
        if (ex) cudaGraphExecDestroy(ex);
        cudaGetLastError();
        cmf_err_clear();
        D->graphs_on = 0;
        return body(s, tokens, loop, n);
    }
    S->graphs.push_back(graph_entry{key, ex}); /* capacity MAX_GRAPHS reserved */
    D->n_captured++;
    CU_TRY(cudaGraphLaunch(ex, D->stream), "launching a dory segment graph");
    return CMF_OK;
}

/* dory_ops.h "segment": d_step = {s->pos, tokens} first (when tokens), then the cached graph of `key`, a new capture
 * (n <= 8, graphs on, fewer than MAX_GRAPHS in the session), or the body's launches one by one. */
cmf_status g_segment(cmf_dory_state *s, int key, seg_body body, const int32_t *tokens, int loop, int n) {
    dory_dev *D = DEV(s);
    dory_sess *S = SESS(s);
    cmf_status st = tokens ? upload_step(s, tokens, n) : CMF_OK;
    if (st != CMF_OK) return st;
    S->in_segment = 1;
    if (!D->graphs_on || n > 8) {
        st = body(s, tokens, loop, n);
    } else {
        cudaGraphExec_t ex = NULL;
        for (const graph_entry &g : S->graphs)
            if (g.key == key) ex = g.exec;
        if (ex) {
            D->n_replayed++;
            cudaError_t e = cudaGraphLaunch(ex, D->stream);
            st = e == cudaSuccess ? CMF_OK : cu_fail(e, "replaying a dory segment graph");
        } else if (S->graphs.size() < MAX_GRAPHS) {
            st = capture(s, key, body, tokens, loop, n);
        } else {
            st = body(s, tokens, loop, n);
        }
    }
    S->in_segment = 0;
    return st;
}

void dev_free(dory_dev *D) {
    if (!D) return;
    cudaSetDevice(D->dev);
    if (D->stream) cudaStreamSynchronize(D->stream);
    for (auto &p : D->payloads) cmf_cuda_free(p.second);
    cmf_cuda_free(D->d_arena);
    cmf_cuda_free(D->d_tile);
    cmf_cuda_ctx_free(D->gemm);
    if (D->blas) cublasDestroy(D->blas);
    if (D->stream) cudaStreamDestroy(D->stream);
    pthread_mutex_destroy(&D->mu);
    delete D;
}

void g_destroy(cmf_dory *d) {
    dev_free((dory_dev *)d->be);
    d->be = NULL;
}

const cmf_dory_ops CUDA_OPS = {
    "cuda",      g_buf_alloc,  g_buf_free,    g_state_init, g_state_free,  g_begin,    g_end,
    g_copy,      g_to_host,    g_embed,       g_matmul,     g_matmuls,     g_qk_norm_kv, g_attend,
    g_gate_norm, g_swiglu_norm, g_residual,   g_reinject,   g_normalize,   g_head,     g_segment,
    g_destroy,
};

/* Uploads one weight's payload (once per distinct payload) and checks that a kernel takes it. */
cmf_status upload_weight(dory_dev *D, const cmf_weight *w, const char *what, int layer) {
    if (w->row0 != 0 || w->rows != w->full_rows)
        return cmf_err(CMF_E_UNSUPPORTED, "dory cuda: %s of layer %d is a row view (no device kernel)", what, layer);
    void *d = NULL;
    auto it = D->payloads.find(w->data);
    if (it != D->payloads.end()) d = it->second;
    else {
        uint32_t shape[2] = {(uint32_t)w->full_rows, (uint32_t)w->cols};
        uint64_t nbytes = 0;
        if (cmf_dtype_nbytes(w->dtype, 2, shape, &nbytes) != 1 || !nbytes)
            return cmf_err(CMF_E_UNSUPPORTED, "dory cuda: %s of layer %d: dtype %s has no device kernel", what, layer,
                           cmf_dtype_name(w->dtype) ? cmf_dtype_name(w->dtype) : "?");
        cmf_status st = cmf_cuda_malloc(&d, nbytes);
        if (st == CMF_OK) st = cmf_cuda_upload(d, w->data, nbytes, D->stream);
        if (st != CMF_OK) {
            cmf_cuda_free(d);
            return cmf_err_prefix(st, "dory cuda: %s of layer %d: ", what, layer);
        }
        D->payloads[w->data] = d;
    }
    cmf_cuda_weight cw = {w->dtype, w->rows, w->cols, d};
    cmf_status st = cmf_cuda_weight_check(&cw);
    return st == CMF_OK ? CMF_OK : cmf_err_prefix(st, "dory cuda: %s of layer %d: ", what, layer);
}

cmf_status attach(cmf_dory *d, dory_dev *D) {
    const cmf_dory_config *c = &d->cfg;
    cmf_status st = cmf_cuda_stream_create((cmf_cuda_stream *)&D->stream);
    if (st == CMF_OK) {
        cublasStatus_t bs = cublasCreate(&D->blas);
        if (bs == CUBLAS_STATUS_SUCCESS) bs = cublasSetStream(D->blas, D->stream);
        if (bs != CUBLAS_STATUS_SUCCESS) st = cmf_err(CMF_E_IO, "dory cuda: cuBLAS setup failed (status %d)", (int)bs);
    }
    /* the f32 tile scratch: the largest non-f32 matrix, capped at SCRATCH_FLOATS */
    size_t most = 0;
    int any_tc = 0;
    const cmf_weight *all[] = {&d->embed, &d->lm_head};
    for (int i = 0; i < 2; i++) {
        if (all[i]->dtype != CMF_DT_F32 && (size_t)(all[i]->rows * all[i]->cols) > most) most = (size_t)(all[i]->rows * all[i]->cols);
        any_tc |= prefill_tc(D, all[i]->dtype);
    }
    for (int l = 0; l < c->n_layers; l++) {
        const cmf_dory_layer *L = &d->layers[l];
        const cmf_weight *w[] = {&L->w_gate, &L->w_up, &L->w_down, &L->wq, &L->wk, &L->wv, &L->wg, &L->wo};
        for (int i = 0; i < 8; i++) {
            if (w[i]->data && w[i]->dtype != CMF_DT_F32 && (size_t)(w[i]->rows * w[i]->cols) > most)
                most = (size_t)(w[i]->rows * w[i]->cols);
            if (w[i]->data) any_tc |= prefill_tc(D, w[i]->dtype);
        }
    }
    if (st == CMF_OK && any_tc) st = cmf_cuda_ctx_create(&D->gemm, 0);
    D->tile_floats = most < SCRATCH_FLOATS ? most : SCRATCH_FLOATS;
    const char *te = getenv("CMF_DORY_CUDA_TILE"); /* a smaller tile (floats), so that tests cover the tile loop */
    if (te && atol(te) > 0 && (size_t)atol(te) < D->tile_floats) D->tile_floats = (size_t)atol(te);
    if (st == CMF_OK && D->tile_floats) st = cmf_cuda_malloc((void **)&D->d_tile, D->tile_floats * sizeof(float));
    if (st == CMF_OK) st = cmf_cuda_malloc((void **)&D->d_arena, d->arena_n * sizeof(float));
    if (st == CMF_OK) st = cmf_cuda_upload(D->d_arena, d->arena, d->arena_n * sizeof(float), D->stream);
    if (st == CMF_OK) st = upload_weight(D, &d->embed, "backbone.embeddings.weight", -1);
    if (st == CMF_OK) st = upload_weight(D, &d->lm_head, "lm_head.weight", -1);
    for (int l = 0; l < c->n_layers && st == CMF_OK; l++) {
        const cmf_dory_layer *L = &d->layers[l];
        if (L->kind == '-') {
            const cmf_weight *w[] = {&L->w_gate, &L->w_up, &L->w_down};
            const char *nm[] = {"gate_proj", "up_proj", "down_proj"};
            for (int i = 0; i < 3 && st == CMF_OK; i++) st = upload_weight(D, w[i], nm[i], l);
        } else {
            const cmf_weight *w[] = {&L->wq, &L->wk, &L->wv, &L->wg, &L->wo};
            const char *nm[] = {"q_proj", "k_proj", "v_proj", "g_proj", "o_proj"};
            for (int i = 0; i < 5 && st == CMF_OK; i++) st = upload_weight(D, w[i], nm[i], l);
        }
    }
    if (st == CMF_OK) st = cmf_cuda_sync(D->stream);
    return st;
}

} // namespace

extern "C" cmf_status cmf_dory_cuda_attach(cmf_dory *d, int dev) {
    if (!d) return cmf_err(CMF_E_ARG, "cmf_dory_cuda_attach: NULL model");
    int count = 0;
    cmf_cuda_device_count(&count);
    if (count == 0) {
        char why[256];
        snprintf(why, sizeof why, "%s", cmf_last_error()); /* "cuda: no device: <runtime's reason>" */
        return cmf_err(CMF_E_UNSUPPORTED, "dory: %s", why);
    }
    if (dev < 0 || dev >= count)
        return cmf_err(CMF_E_UNSUPPORTED, "dory: cuda device %d does not exist (%d device(s))", dev, count);
    const cmf_dory_config *c = &d->cfg;
    if (c->head_dim > MAX_HD || c->head_dim % 4 || c->n_heads % c->n_kv_heads)
        return cmf_err(CMF_E_UNSUPPORTED,
                       "dory cuda: head_dim %d (needs a multiple of 4, <= %d) has no attention kernel", c->head_dim,
                       MAX_HD);
    CU_TRY(cudaSetDevice(dev), "cudaSetDevice");
    dory_dev *D = new (std::nothrow) dory_dev();
    if (!D) return cmf_err(CMF_E_NOMEM, "dory cuda: out of host memory");
    D->dev = dev;
    const char *ge = getenv("CMF_DORY_CUDA_GRAPH");
    D->graphs_on = !(ge && ge[0] == '0');
    const char *pe = getenv("CMF_DORY_CUDA_PREFILL");
    D->prefill_f32 = pe && !strcmp(pe, "f32");
    pthread_mutex_init(&D->mu, NULL);
    cmf_status st = attach(d, D);
    if (st != CMF_OK) {
        dev_free(D);
        return st;
    }
    d->be = D;
    d->ops = &CUDA_OPS;
    return CMF_OK;
}

extern "C" void cmf_dory_cuda_set_graphs(cmf_dory *d, int on) {
    if (!d || d->ops != &CUDA_OPS) return;
    dory_dev *D = (dory_dev *)d->be;
    pthread_mutex_lock(&D->mu);
    D->graphs_on = on != 0;
    pthread_mutex_unlock(&D->mu);
}

extern "C" void cmf_dory_cuda_graph_stats(const cmf_dory *d, uint64_t *captured, uint64_t *replayed) {
    dory_dev *D = d && d->ops == &CUDA_OPS ? (dory_dev *)d->be : NULL;
    if (D) pthread_mutex_lock(&D->mu);
    if (captured) *captured = D ? D->n_captured : 0;
    if (replayed) *replayed = D ? D->n_replayed : 0;
    if (D) pthread_mutex_unlock(&D->mu);
}
