/* dory_ops.cu — the cuda table of backend/dory_ops.h: the Dory forward (shared/spec/DORY.md §1.4–§1.7) on one
 * device and one stream, driven by the same model code as the cpu (src/model/dory_forward.c).
 *
 *  - Weights: every matrix payload uploaded once, exactly as stored (CMF_FORMAT.md §2), read in place by the
 *    kernels of cuda_ops.h (cmf_cuda_embed; cmf_cuda_matvec for n <= 8 tokens); prefill products (n > 8) in f32 by
 *    cublasSgemm, non-f32 weights decoded to f32 row tiles by cmf_cuda_dequant first. The model's f32 scale arena (λ, q/gate scales, suv, logit scale, RoPE tables)
 *    is one device copy; a host pointer into d->arena maps to the same offset in it.
 *  - KV cache: f32 on the device, the cpu layout (slot rows of n_kv_heads·head_dim; sliding rings at p % rows), so
 *    both KV modes and the rings are the model code's slot choice, unchanged.
 *  - The Dory kernels below: justnorm rows (sums in double, as the cpu), the nGPT residual, NeoX RoPE + per-head
 *    justnorm (angles in double), the output gate, SwiGLU + norm, and attention over the slot: one block per
 *    (token, query head), each warp an online softmax over a strided share of the keys, merged in shared memory.
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

#include "backend/cuda/common.cuh"

extern "C" {
#include "backend/dory_ops.h"
#include "model/dory.h"
}

namespace {

enum { ROW_THREADS = 256, ATT_WARPS = 4, MAX_HD = 256 };

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
};

struct dory_sess {
    float *d_logits; /* [n_batch][V] */
    int32_t *d_ids;  /* [n_batch] */
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

/* Block (token t, head h of the nh query heads then the nk KV heads): NeoX RoPE at position pos0 + t with the angle
 * in double, justnorm over the head, and q ⊙= q_scale (§1.5 steps 2–3). */
__global__ void k_qk(float *q, float *k, const float *qscale, const float *inv, int nh, int nk, int hd, int pos0) {
    __shared__ double sh[32];
    const int t = blockIdx.x, h = blockIdx.y, half = hd / 2, p = pos0 + t;
    const int is_q = h < nh;
    float *x = is_q ? q + ((int64_t)t * nh + h) * hd : k + ((int64_t)t * nk + (h - nh)) * hd;
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
    for (int j = threadIdx.x; j < half; j += blockDim.x) {
        float a = x[j] * r, b = x[j + half] * r;
        if (is_q) {
            a *= qscale[h * hd + j];
            b *= qscale[h * hd + j + half];
        }
        x[j] = a;
        x[j + half] = b;
    }
}

/* Block per token: its K and V rows into the slot's row of position pos0 + t (ring: p % rows; a full cache skips
 * p >= rows). */
__global__ void k_kv_write(float *kc, float *vc, const float *k, const float *v, int64_t KVD, int pos0, int rows,
                           int ring) {
    const int t = blockIdx.x, p = pos0 + t;
    if (!ring && p >= rows) return;
    const int64_t r = ring ? p % rows : p;
    for (int64_t i = threadIdx.x; i < KVD; i += blockDim.x) {
        kc[r * KVD + i] = k[(int64_t)t * KVD + i];
        vc[r * KVD + i] = v[(int64_t)t * KVD + i];
    }
}

/* Block (token t, query head h), ATT_WARPS warps: warp w takes keys lo + w, lo + w + ATT_WARPS, ..; a key's score
 * is a warp sum over lane-strided dims (lane owns dims lane + 32 i), an online softmax per warp keeps (max, sum,
 * the lane's output dims); the warps are merged at the end (§1.5 step 4). */
__global__ void k_attend(float *att, const float *q, const float *kc, const float *vc, int nh, int nk, int hd, int pos0,
                         int rows, int ring, int window, float scale) {
    __shared__ float qs[MAX_HD];
    __shared__ float so[ATT_WARPS][MAX_HD];
    __shared__ float sm[ATT_WARPS], sl[ATT_WARPS];
    const int t = blockIdx.x, h = blockIdx.y, kh = h / (nh / nk), p = pos0 + t;
    const int lo = window && p - window + 1 > 0 ? p - window + 1 : 0;
    const int64_t KVD = (int64_t)nk * hd;
    const float *qr = q + ((int64_t)t * nh + h) * hd;
    for (int e = threadIdx.x; e < hd; e += blockDim.x) qs[e] = qr[e];
    __syncthreads();
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    float m = -INFINITY, l = 0, o[MAX_HD / 32];
#pragma unroll
    for (int i = 0; i < MAX_HD / 32; i++) o[i] = 0;
    for (int j = lo + warp; j <= p; j += ATT_WARPS) {
        const int64_t row = ring ? j % rows : j;
        const float *kr = kc + row * KVD + (int64_t)kh * hd, *vr = vc + row * KVD + (int64_t)kh * hd;
        float d = 0;
#pragma unroll
        for (int i = 0; i < MAX_HD / 32; i++) {
            const int e = lane + 32 * i;
            if (e < hd) d += qs[e] * kr[e];
        }
        d = warp_sum(d) * scale;
        const float mn = fmaxf(m, d), corr = expf(m - mn), w = expf(d - mn);
        l = l * corr + w;
#pragma unroll
        for (int i = 0; i < MAX_HD / 32; i++) {
            const int e = lane + 32 * i;
            if (e < hd) o[i] = o[i] * corr + w * vr[e];
        }
        m = mn;
    }
    if (lane == 0) {
        sm[warp] = m;
        sl[warp] = l;
    }
#pragma unroll
    for (int i = 0; i < MAX_HD / 32; i++) {
        const int e = lane + 32 * i;
        if (e < hd) so[warp][e] = o[i];
    }
    __syncthreads();
    float M = -INFINITY;
    for (int w = 0; w < ATT_WARPS; w++)
        if (sl[w] > 0) M = fmaxf(M, sm[w]);
    float *out = att + ((int64_t)t * nh + h) * hd;
    for (int e = threadIdx.x; e < hd; e += blockDim.x) {
        float L = 0, acc = 0;
        for (int w = 0; w < ATT_WARPS; w++)
            if (sl[w] > 0) {
                const float c = expf(sm[w] - M);
                L += sl[w] * c;
                acc += so[w][e] * c;
            }
        out[e] = acc / L;
    }
}

/* y[i] *= s[i % V] (the head's logit_scale / σ₀). */
__global__ void k_scale_cols(float *y, const float *s, int64_t n, int64_t V) {
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
    cmf_status st = g_buf_alloc(s, (size_t)s->n_batch * (size_t)s->d->cfg.vocab_size, &S->d_logits);
    if (st == CMF_OK) st = cmf_cuda_malloc((void **)&S->d_ids, (size_t)s->n_batch * sizeof(int32_t));
    return st;
}

void g_state_free(cmf_dory_state *s) {
    dory_sess *S = SESS(s);
    if (!S) return;
    cmf_cuda_free(S->d_logits);
    cmf_cuda_free(S->d_ids);
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

cmf_status g_embed(cmf_dory_state *s, float *x, const int32_t *tokens, int n) {
    cmf_cuda_weight cw;
    cmf_status st = dev_weight(s, &s->d->embed, &cw);
    if (st == CMF_OK) st = cmf_cuda_upload(SESS(s)->d_ids, tokens, (size_t)n * sizeof(int32_t), DEV(s)->stream);
    if (st == CMF_OK) st = cmf_cuda_embed(&cw, SESS(s)->d_ids, n, 1.0f, x, DEV(s)->stream);
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

/* Decode products (n <= 8) by cmf_cuda_matvec; prefill products in f32 by cuBLAS: f32 weights as stored, other
 * dtypes decoded to f32 row tiles first (cmf_cuda_dequant, the values of cmf_dequant). The f16-operand GEMM of the
 * transformer backend was measured too coarse here (test_gpu_dory: up to 7.5e-3 x max|logit| on r64_b at f16). */
cmf_status g_matmul(cmf_dory_state *s, float *out, const float *x, int n, const cmf_weight *w) {
    dory_dev *D = DEV(s);
    cmf_cuda_weight cw;
    cmf_status st = dev_weight(s, w, &cw);
    if (st != CMF_OK) return st;
    if (n <= 8) return cmf_cuda_matvec(&cw, x, out, n, D->stream);
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

cmf_status g_qk_rope_norm(cmf_dory_state *s, const cmf_dory_layer *L, int layer, int n, int pos0) {
    const cmf_dory_config *c = &s->d->cfg;
    const int hd = c->head_dim;
    const float *inv = s->d->inv_freq + (c->rope_profile[layer] == 2 ? hd / 2 : 0);
    const int threads = hd / 2 < 32 ? 32 : hd / 2 > 128 ? 128 : (hd / 2 + 31) / 32 * 32;
    k_qk<<<dim3((unsigned)n, (unsigned)(c->n_heads + c->n_kv_heads)), threads, 0, DEV(s)->stream>>>(
        s->q, s->k, dvec(s, L->q_scale), dvec(s, inv), c->n_heads, c->n_kv_heads, hd, pos0);
    CU_LAUNCHED("dory q/k RoPE and norm");
    return CMF_OK;
}

cmf_status g_kv_write(cmf_dory_state *s, int slot, int n, int pos0) {
    const cmf_dory_kv *kv = &s->kv[slot];
    const int64_t KVD = (int64_t)s->d->cfg.n_kv_heads * s->d->cfg.head_dim;
    k_kv_write<<<(unsigned)n, 128, 0, DEV(s)->stream>>>(kv->k, kv->v, s->k, s->v, KVD, pos0, kv->rows, kv->ring);
    CU_LAUNCHED("dory KV write");
    return CMF_OK;
}

cmf_status g_attend(cmf_dory_state *s, int slot, int n, int pos0, int sliding) {
    const cmf_dory_config *c = &s->d->cfg;
    const cmf_dory_kv *kv = &s->kv[slot];
    const float scale = 1.0f / sqrtf((float)c->head_dim);
    k_attend<<<dim3((unsigned)n, (unsigned)c->n_heads), 32 * ATT_WARPS, 0, DEV(s)->stream>>>(
        s->att, s->q, kv->k, kv->v, c->n_heads, c->n_kv_heads, c->head_dim, pos0, kv->rows, kv->ring,
        sliding ? c->swa_window : 0, scale);
    CU_LAUNCHED("dory attention");
    return CMF_OK;
}

cmf_status g_gate_norm(cmf_dory_state *s, const cmf_dory_layer *L, int n) {
    const int64_t QD = (int64_t)s->d->cfg.n_heads * s->d->cfg.head_dim;
    k_gate_norm<<<(unsigned)n, ROW_THREADS, 0, DEV(s)->stream>>>(s->att, s->g, dvec(s, L->g_scale), QD);
    CU_LAUNCHED("dory output gate");
    return CMF_OK;
}

cmf_status g_swiglu_norm(cmf_dory_state *s, const cmf_dory_layer *L, int n) {
    k_swiglu_norm<<<(unsigned)n, ROW_THREADS, 0, DEV(s)->stream>>>(s->hb, s->hb2, dvec(s, L->suv_gate),
                                                                    dvec(s, L->suv_up), s->d->cfg.intermediate_size);
    CU_LAUNCHED("dory SwiGLU");
    return CMF_OK;
}

cmf_status g_residual(cmf_dory_state *s, const float *lambda, int n) {
    k_residual<<<(unsigned)n, ROW_THREADS, 0, DEV(s)->stream>>>(s->x, s->xr, dvec(s, lambda), s->d->cfg.hidden_size);
    CU_LAUNCHED("dory residual");
    return CMF_OK;
}

cmf_status g_reinject(cmf_dory_state *s, int n) {
    k_reinject<<<(unsigned)n, ROW_THREADS, 0, DEV(s)->stream>>>(s->x, s->inp, s->d->cfg.hidden_size, 1);
    CU_LAUNCHED("dory re-injection");
    return CMF_OK;
}

cmf_status g_normalize(cmf_dory_state *s, int n) {
    k_reinject<<<(unsigned)n, ROW_THREADS, 0, DEV(s)->stream>>>(s->x, s->x, s->d->cfg.hidden_size, 0);
    CU_LAUNCHED("dory justnorm");
    return CMF_OK;
}

cmf_status g_head(cmf_dory_state *s, const float *h, int rows, float *out_host) {
    const cmf_dory *d = s->d;
    const int64_t V = d->cfg.vocab_size, need = (int64_t)rows * V;
    if (rows > s->n_batch) return cmf_err(CMF_E_ARG, "dory cuda: head of %d rows exceeds the batch %d", rows, s->n_batch);
    float *y = SESS(s)->d_logits;
    cmf_status st = g_matmul(s, y, h, rows, &d->lm_head);
    if (st != CMF_OK) return st;
    k_scale_cols<<<grid1d(need, 256), 256, 0, DEV(s)->stream>>>(y, dvec(s, d->logit_scale), need, V);
    CU_LAUNCHED("dory logit scale");
    return cmf_cuda_download(out_host, y, (size_t)need * sizeof(float), DEV(s)->stream);
}

void dev_free(dory_dev *D) {
    if (!D) return;
    cudaSetDevice(D->dev);
    if (D->stream) cudaStreamSynchronize(D->stream);
    for (auto &p : D->payloads) cmf_cuda_free(p.second);
    cmf_cuda_free(D->d_arena);
    cmf_cuda_free(D->d_tile);
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
    "cuda",         g_buf_alloc,  g_buf_free,  g_state_init,  g_state_free, g_begin,    g_end,
    g_copy,         g_to_host,    g_embed,     g_matmul,      g_qk_rope_norm, g_kv_write, g_attend,
    g_gate_norm,    g_swiglu_norm, g_residual, g_reinject,    g_normalize,  g_head,     g_destroy,
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
    const cmf_weight *all[] = {&d->embed, &d->lm_head};
    for (int i = 0; i < 2; i++)
        if (all[i]->dtype != CMF_DT_F32 && (size_t)(all[i]->rows * all[i]->cols) > most) most = (size_t)(all[i]->rows * all[i]->cols);
    for (int l = 0; l < c->n_layers; l++) {
        const cmf_dory_layer *L = &d->layers[l];
        const cmf_weight *w[] = {&L->w_gate, &L->w_up, &L->w_down, &L->wq, &L->wk, &L->wv, &L->wg, &L->wo};
        for (int i = 0; i < 8; i++)
            if (w[i]->data && w[i]->dtype != CMF_DT_F32 && (size_t)(w[i]->rows * w[i]->cols) > most)
                most = (size_t)(w[i]->rows * w[i]->cols);
    }
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
    if (c->head_dim > MAX_HD || c->head_dim % 2 || c->n_heads % c->n_kv_heads)
        return cmf_err(CMF_E_UNSUPPORTED, "dory cuda: head_dim %d (needs an even value <= %d) has no attention kernel",
                       c->head_dim, MAX_HD);
    CU_TRY(cudaSetDevice(dev), "cudaSetDevice");
    dory_dev *D = new (std::nothrow) dory_dev();
    if (!D) return cmf_err(CMF_E_NOMEM, "dory cuda: out of host memory");
    D->dev = dev;
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
