/* backend_cuda.cu — the cuda backend of backend.h: the transformer forward on one device, one stream.
 *
 *  - Weights: every matrix payload of a weight set is copied to the device once (load_weights; the bytes exactly
 *    as stored, CMF_FORMAT.md §2, read in place by the kernels of cuda_ops.h); the set's f32 small-tensor arena
 *    (norms, biases) likewise. Ops find the device copy of a host cmf_weight / norm pointer in a table.
 *  - Activations and the KV cache (f16 [n_ctx][n_kv_heads][head_dim] per layer) live on the device.
 *  - The forward only queues work on the stream: positions are uploaded at begin(), logits downloaded by head(),
 *    which is the one synchronisation of a forward.
 *  - Products: cmf_cuda_matvec for n <= 8 tokens, cmf_cuda_gemm (cuBLAS, f16 operands, f32 accumulation) above.
 *  - Attention: per run of consecutive tokens of one session, cmf_cuda_attn_decode (1 token) or
 *    cmf_cuda_attn_prefill (causal, several tokens).
 * Not supported here (CMF_E_UNSUPPORTED): task masks, the O(1) far field, fused quantized row views (Phi-3 qkv in
 * q8/q4), head_dim not a multiple of 8 or above 256. */
#include <pthread.h>
#include <stdio.h>

#include <new>
#include <unordered_map>
#include <vector>

#include "backend/cuda/common.cuh"

extern "C" {
#include "backend/backend.h"
#include "model/model.h"
}

namespace {

struct arena {
    const float *host;
    size_t n;
    float *dev;
};

struct cuda_impl {
    const cmf_model *m;
    int dev;
    cudaStream_t stream;
    cmf_cuda_ctx *ctx;
    pthread_mutex_t mu;
    std::unordered_map<const void *, void *> payloads; /* host payload start -> device copy */
    std::vector<arena> arenas;                         /* f32 vectors: small-tensor arenas, RoPE frequencies */
    int32_t *d_pos;
    int pos_cap;
    void *d_work; /* flash-decoding scratch */
    size_t work_bytes;
    float *d_logits; /* head output [rows][V] */
    size_t logits_cap;
};

cuda_impl *IMPL(cmf_backend *be) { return (cuda_impl *)be->impl; }

/* ---- small kernels of the forward not in cuda_ops.h ------------------------------------------------------ */

__global__ void k_scale(float *x, int64_t n, float s) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        x[i] *= s;
}

__global__ void k_bias(float *y, const float *bias, int64_t n, int64_t cols) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n * cols;
         i += (int64_t)gridDim.x * blockDim.x)
        y[i] += bias[i % cols];
}

__global__ void k_softcap(float *x, int64_t n, float cap) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        x[i] = cap * tanhf(x[i] / cap);
}

/* RoPE with the model's precomputed frequencies (rope_scaling included, model.c cmf_rope_inv_freq): the angle
 * pos * inv_freq[i] in f32 as the CPU forward; pairs (i, i+half) or (2i, 2i+1). One thread per (token, head, i). */
__global__ void k_rope(float *x, const int32_t *pos, int64_t n_tok, int n_heads, int head_dim, int rot_dim,
                       const float *inv_freq, int interleaved) {
    const int half = rot_dim / 2;
    const int64_t total = n_tok * n_heads * half;
    for (int64_t j = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; j < total; j += (int64_t)gridDim.x * blockDim.x) {
        const int i = (int)(j % half);
        const int64_t th = j / half; /* token * n_heads + head */
        const int64_t t = th / n_heads;
        float *v = x + th * head_dim;
        const float ang = (float)pos[t] * inv_freq[i];
        float sn, cs;
        sincosf(ang, &sn, &cs);
        const int a = interleaved ? 2 * i : i, b = interleaved ? 2 * i + 1 : i + half;
        const float x0 = v[a], x1 = v[b];
        v[a] = x0 * cs - x1 * sn;
        v[b] = x1 * cs + x0 * sn;
    }
}

/* ---- residency -------------------------------------------------------------------------------------------- */

/* The device copy of a host f32 vector inside a resident arena, or NULL. */
const float *dev_vec(cuda_impl *I, const float *h) {
    if (!h) return NULL;
    for (const arena &a : I->arenas)
        if (h >= a.host && h < a.host + a.n) return a.dev + (h - a.host);
    return NULL;
}

cmf_status upload_arena(cuda_impl *I, const float *h, size_t n, const char *what) {
    if (!h || !n || dev_vec(I, h)) return CMF_OK;
    arena a = {h, n, NULL};
    cmf_status st = cmf_cuda_malloc((void **)&a.dev, n * sizeof(float));
    if (st == CMF_OK) st = cmf_cuda_upload(a.dev, h, n * sizeof(float), I->stream);
    if (st != CMF_OK) {
        cmf_cuda_free(a.dev);
        return cmf_err_prefix(st, "%s: ", what);
    }
    I->arenas.push_back(a);
    return CMF_OK;
}

int elem_bytes(int dtype) { return dtype == CMF_DT_F32 ? 4 : dtype == CMF_DT_F16 || dtype == CMF_DT_BF16 ? 2 : 0; }

/* The device view of host weight w (uploading its payload on first use when `upload` is set). */
cmf_status dev_weight(cuda_impl *I, const cmf_weight *w, cmf_cuda_weight *out, int upload) {
    auto it = I->payloads.find(w->data);
    void *d = it == I->payloads.end() ? NULL : it->second;
    if (!d) {
        if (!upload) return cmf_err(CMF_E_ARG, "cuda: a weight of %lldx%lld is not resident", (long long)w->rows,
                                    (long long)w->cols);
        uint32_t shape[2] = {(uint32_t)w->full_rows, (uint32_t)w->cols};
        uint64_t nbytes = 0;
        if (cmf_dtype_nbytes(w->dtype, 2, shape, &nbytes) != 1 || !nbytes)
            return cmf_err(CMF_E_UNSUPPORTED, "cuda: dtype %s of a [%lld, %lld] weight has no device kernel",
                           cmf_dtype_name(w->dtype) ? cmf_dtype_name(w->dtype) : "?", (long long)w->full_rows,
                           (long long)w->cols);
        cmf_status st = cmf_cuda_malloc(&d, nbytes);
        if (st == CMF_OK) st = cmf_cuda_upload(d, w->data, nbytes, I->stream);
        if (st != CMF_OK) {
            cmf_cuda_free(d);
            return st;
        }
        I->payloads[w->data] = d;
    }
    out->dtype = w->dtype;
    out->rows = w->rows;
    out->cols = w->cols;
    out->d_data = d;
    if (w->row0 != 0 || w->rows != w->full_rows) { /* a row view of a fused tensor (Phi-3 qkv / gate_up) */
        const int eb = elem_bytes(w->dtype);
        const size_t off = (size_t)w->row0 * (size_t)w->cols * (size_t)eb;
        if (!eb || off % 16)
            return cmf_err(CMF_E_UNSUPPORTED, "cuda: a row view (rows %lld..%lld of %lld) of a %s tensor has no device "
                                              "kernel (fused tensors need f32/f16/bf16)",
                           (long long)w->row0, (long long)(w->row0 + w->rows), (long long)w->full_rows,
                           cmf_dtype_name(w->dtype) ? cmf_dtype_name(w->dtype) : "?");
        out->d_data = (const uint8_t *)d + off;
    }
    return cmf_cuda_weight_check(out);
}

/* ---- buffers ------------------------------------------------------------------------------------------------ */

cmf_status cu_alloc(cmf_backend *be, size_t bytes, void **out) {
    cmf_status st = cmf_cuda_malloc(out, bytes);
    if (st == CMF_OK) st = cmf_cuda_memset(*out, 0, bytes, IMPL(be)->stream);
    return st;
}
void cu_free(cmf_backend *be, void *p) {
    (void)be;
    cmf_cuda_free(p);
}
cmf_status cu_upload(cmf_backend *be, void *dst, const void *src, size_t bytes) {
    return cmf_cuda_upload(dst, src, bytes, IMPL(be)->stream);
}
cmf_status cu_download(cmf_backend *be, void *dst, const void *src, size_t bytes) {
    cmf_status st = cmf_cuda_download(dst, src, bytes, IMPL(be)->stream);
    return st == CMF_OK ? cmf_cuda_sync(IMPL(be)->stream) : st;
}
cmf_status cu_zero(cmf_backend *be, void *buf, size_t bytes) { return cmf_cuda_memset(buf, 0, bytes, IMPL(be)->stream); }
cmf_status cu_sync(cmf_backend *be) { return cmf_cuda_sync(IMPL(be)->stream); }

cmf_status cu_load_weights(cmf_backend *be, const cmf_weights *w, int n_layers) {
    cuda_impl *I = IMPL(be);
    cudaSetDevice(I->dev);
    cmf_cuda_weight cw;
    cmf_status st = upload_arena(I, w->small, w->n_small, "norms and biases");
    if (st == CMF_OK) st = dev_weight(I, &w->embed, &cw, 1);
    if (st == CMF_OK) st = dev_weight(I, &w->lm_head, &cw, 1);
    if (st != CMF_OK) return cmf_err_prefix(st, "embed / lm_head: ");
    for (int l = 0; l < n_layers; l++) {
        const cmf_layer *L = &w->layers[l];
        const cmf_weight *mats[7] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->w_gate, &L->w_up, &L->w_down};
        const char *names[7] = {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"};
        for (int i = 0; i < 7; i++)
            if ((st = dev_weight(I, mats[i], &cw, 1)) != CMF_OK)
                return cmf_err_prefix(st, "layer %d %s: ", l, names[i]);
    }
    return cmf_cuda_sync(I->stream);
}

/* ---- sessions ------------------------------------------------------------------------------------------------ */

cmf_cuda_attn attn_params(const cmf_config *c, int window) {
    cmf_cuda_attn a;
    a.n_heads = c->n_heads;
    a.n_kv_heads = c->n_kv_heads;
    a.head_dim = c->head_dim;
    a.scale = c->attn_scale;
    a.softcap = c->attn_softcap;
    a.window = window;
    return a;
}

cmf_status cu_kv_alloc(cmf_backend *be, cmf_session *s, size_t total) {
    cuda_impl *I = IMPL(be);
    if (s->mask)
        return cmf_err(CMF_E_UNSUPPORTED, "cuda: task masks run only on the CPU backend (task '%s'; CMF_TASK=off or "
                                          "--task off to run dense)",
                       cmf_session_task(s));
    if (s->o1) return cmf_err(CMF_E_UNSUPPORTED, "cuda: the O(1) far field runs only on the CPU backend (--o1 off)");
    cudaSetDevice(I->dev);
    const size_t bytes = (total ? total : 1) * sizeof(uint16_t);
    cmf_status st = cmf_cuda_malloc(&s->dk, bytes);
    if (st == CMF_OK) st = cmf_cuda_malloc(&s->dv, bytes);
    if (st == CMF_OK) st = cmf_cuda_memset(s->dk, 0, bytes, I->stream);
    if (st == CMF_OK) st = cmf_cuda_memset(s->dv, 0, bytes, I->stream);
    const cmf_cuda_attn a = attn_params(&I->m->cfg, 0);
    const size_t need = cmf_cuda_attn_decode_work_bytes(&a, s->n_ctx);
    if (st == CMF_OK && need > I->work_bytes) {
        pthread_mutex_lock(&I->mu); /* no forward is using the old scratch while it is replaced */
        cmf_cuda_sync(I->stream);
        cmf_cuda_free(I->d_work);
        I->d_work = NULL;
        I->work_bytes = 0;
        st = cmf_cuda_malloc(&I->d_work, need);
        if (st == CMF_OK) I->work_bytes = need;
        pthread_mutex_unlock(&I->mu);
    }
    if (st != CMF_OK)
        return cmf_err_prefix(st, "session: the f16 KV cache of %d positions (%.1f MiB) on the device: ", s->n_ctx,
                              2.0 * (double)bytes / (1 << 20));
    return CMF_OK;
}
void cu_kv_free(cmf_backend *be, cmf_session *s) {
    (void)be;
    cmf_cuda_free(s->dk);
    cmf_cuda_free(s->dv);
    s->dk = s->dv = NULL;
}

/* ---- ops ------------------------------------------------------------------------------------------------------- */

cmf_status cu_begin(cmf_backend *be, cmf_batch *b, int n) {
    cuda_impl *I = IMPL(be);
    pthread_mutex_lock(&I->mu);
    cudaSetDevice(I->dev);
    cmf_status st = CMF_OK;
    if (n > I->pos_cap) {
        cmf_cuda_sync(I->stream);
        cmf_cuda_free(I->d_pos);
        I->d_pos = NULL;
        I->pos_cap = 0;
        if ((st = cmf_cuda_malloc((void **)&I->d_pos, (size_t)b->n_batch * sizeof(int32_t))) == CMF_OK)
            I->pos_cap = b->n_batch;
    }
    if (st == CMF_OK) st = cmf_cuda_upload(I->d_pos, b->pos, (size_t)n * sizeof(int32_t), I->stream);
    if (st != CMF_OK) pthread_mutex_unlock(&I->mu);
    return st;
}
void cu_end(cmf_backend *be, cmf_batch *b) {
    (void)b;
    pthread_mutex_unlock(&IMPL(be)->mu);
}

cmf_status cu_embed(cmf_backend *be, cmf_batch *b, float *x, const cmf_weight *embed, const int32_t *tokens, int n,
                    float mult) {
    cuda_impl *I = IMPL(be);
    const int D = b->m->cfg.hidden_size;
    cmf_cuda_weight cw;
    cmf_status st = dev_weight(I, embed, &cw, 0);
    for (int t = 0; t < n && st == CMF_OK; t++)
        st = cmf_cuda_dequant(&cw, tokens[t], 1, x + (size_t)t * D, CMF_CUDA_F32, I->stream);
    if (st != CMF_OK) return cmf_err_prefix(st, "embed: ");
    if (mult != 1.0f) {
        k_scale<<<grid1d((int64_t)n * D, 256), 256, 0, I->stream>>>(x, (int64_t)n * D, mult);
        CU_LAUNCHED("embed scale");
    }
    return CMF_OK;
}

cmf_status cu_rmsnorm(cmf_backend *be, cmf_batch *b, float *out, const float *x, const float *w, int rows, int d,
                      float eps, int gemma) {
    (void)b;
    cuda_impl *I = IMPL(be);
    const float *dw = dev_vec(I, w);
    if (w && !dw) return cmf_err(CMF_E_ARG, "cuda: rmsnorm weight is not resident");
    return cmf_cuda_rmsnorm(out, x, dw, rows, d, eps, gemma, I->stream);
}

cmf_status cu_matmul(cmf_backend *be, cmf_batch *b, float *out, int64_t ld_out, const float *x, int n,
                     const cmf_weight *w, const float *bias) {
    (void)b;
    cuda_impl *I = IMPL(be);
    if (ld_out != w->rows)
        return cmf_err(CMF_E_UNSUPPORTED, "cuda: products into strided outputs (task-mask neuron runs) are CPU only");
    cmf_cuda_weight cw;
    cmf_status st = dev_weight(I, w, &cw, 0);
    if (st != CMF_OK) return st;
    st = n <= 8 ? cmf_cuda_matvec(&cw, x, out, n, I->stream)
                : cmf_cuda_gemm(I->ctx, &cw, x, out, n, CMF_CUDA_GEMM_AUTO, I->stream);
    if (st != CMF_OK || !bias) return st;
    const float *db = dev_vec(I, bias);
    if (!db) return cmf_err(CMF_E_ARG, "cuda: a bias is not resident");
    k_bias<<<grid1d((int64_t)n * w->rows, 256), 256, 0, I->stream>>>(out, db, n, w->rows);
    CU_LAUNCHED("bias");
    return CMF_OK;
}

cmf_status cu_qk_rope(cmf_backend *be, cmf_batch *b, const cmf_layer *L, int layer, int n) {
    cuda_impl *I = IMPL(be);
    const cmf_config *c = &b->m->cfg;
    const int HD = c->head_dim, NH = c->n_heads, NKV = c->n_kv_heads;
    cmf_status st = CMF_OK;
    if (L->q_norm) {
        const float *qn = dev_vec(I, L->q_norm), *kn = dev_vec(I, L->k_norm);
        if (!qn || !kn) return cmf_err(CMF_E_ARG, "cuda: q/k norm of layer %d is not resident", layer);
        st = cmf_cuda_rmsnorm(b->q, b->q, qn, (int64_t)n * NH, HD, c->rms_norm_eps, c->gemma_norm, I->stream);
        if (st == CMF_OK)
            st = cmf_cuda_rmsnorm(b->k, b->k, kn, (int64_t)n * NKV, HD, c->rms_norm_eps, c->gemma_norm, I->stream);
        if (st != CMF_OK) return st;
    }
    if (c->rot_dim <= 0) return CMF_OK;
    const float *f = dev_vec(I, b->m->rope_inv_freq + (c->is_sliding[layer] ? c->rot_dim / 2 : 0));
    const int il = c->rope_pairing == CMF_ROPE_INTERLEAVED;
    k_rope<<<grid1d((int64_t)n * NH * (c->rot_dim / 2), 256), 256, 0, I->stream>>>(b->q, I->d_pos, n, NH, HD,
                                                                                    c->rot_dim, f, il);
    CU_LAUNCHED("rope q");
    k_rope<<<grid1d((int64_t)n * NKV * (c->rot_dim / 2), 256), 256, 0, I->stream>>>(b->k, I->d_pos, n, NKV, HD,
                                                                                     c->rot_dim, f, il);
    CU_LAUNCHED("rope k");
    return CMF_OK;
}

/* Length of the run of tokens t.. that belong to the same session as t (consecutive positions). */
int run_len(cmf_session *const *seqs, int t, int n) {
    int r = 1;
    while (t + r < n && seqs[t + r] == seqs[t]) r++;
    return r;
}

cmf_status cu_kv_write(cmf_backend *be, cmf_batch *b, cmf_session *const *seqs, int l, int n) {
    cuda_impl *I = IMPL(be);
    const int64_t KVD = (int64_t)b->m->cfg.n_kv_heads * b->m->cfg.head_dim;
    cmf_status st = CMF_OK;
    for (int t = 0, r; t < n && st == CMF_OK; t += r) {
        r = run_len(seqs, t, n);
        const cmf_session *s = seqs[t];
        const size_t row = s->kv_off[l] + (size_t)b->pos[t] * KVD;
        st = cmf_cuda_f32_to_f16((uint16_t *)s->dk + row, b->k + (size_t)t * KVD, r * KVD, I->stream);
        if (st == CMF_OK) st = cmf_cuda_f32_to_f16((uint16_t *)s->dv + row, b->v + (size_t)t * KVD, r * KVD, I->stream);
    }
    return st;
}

cmf_status cu_attention(cmf_backend *be, cmf_batch *b, cmf_session *const *seqs, int l, int n) {
    cuda_impl *I = IMPL(be);
    const cmf_config *c = &b->m->cfg;
    const size_t QD = (size_t)c->n_heads * c->head_dim;
    const cmf_cuda_attn a = attn_params(c, c->is_sliding[l] ? c->sliding_window : 0);
    cmf_status st = CMF_OK;
    for (int t = 0, r; t < n && st == CMF_OK; t += r) {
        r = run_len(seqs, t, n);
        const cmf_session *s = seqs[t];
        const uint16_t *dk = (const uint16_t *)s->dk + s->kv_off[l], *dv = (const uint16_t *)s->dv + s->kv_off[l];
        if (r == 1)
            st = cmf_cuda_attn_decode(&a, b->q + t * QD, dk, dv, b->pos[t], b->att + t * QD, I->d_work, I->stream);
        else
            st = cmf_cuda_attn_prefill(&a, b->q + t * QD, dk, dv, b->pos[t], r, b->att + t * QD, I->stream);
    }
    return st;
}

cmf_status cu_glu(cmf_backend *be, cmf_batch *b, float *gate, const float *up, int64_t count, int gelu) {
    (void)b;
    return cmf_cuda_glu(gate, gate, up, count, gelu, IMPL(be)->stream);
}

cmf_status cu_residual(cmf_backend *be, cmf_batch *b, float *x, float *o, const float *post_norm, int rows, int d,
                       float eps, int gemma) {
    cuda_impl *I = IMPL(be);
    cmf_status st = CMF_OK;
    if (post_norm) st = cu_rmsnorm(be, b, o, o, post_norm, rows, d, eps, gemma);
    if (st == CMF_OK) st = cmf_cuda_add(x, x, o, (int64_t)rows * d, I->stream);
    return st;
}

cmf_status cu_head(cmf_backend *be, cmf_batch *b, float *out_host, const float *xn, int rows, const cmf_weight *lm_head,
                   float softcap) {
    cuda_impl *I = IMPL(be);
    const size_t need = (size_t)rows * (size_t)lm_head->rows;
    cmf_status st = CMF_OK;
    if (need > I->logits_cap) {
        cmf_cuda_sync(I->stream);
        cmf_cuda_free(I->d_logits);
        I->d_logits = NULL;
        I->logits_cap = 0;
        if ((st = cmf_cuda_malloc((void **)&I->d_logits, need * sizeof(float))) != CMF_OK) return st;
        I->logits_cap = need;
    }
    st = cu_matmul(be, b, I->d_logits, lm_head->rows, xn, rows, lm_head, NULL);
    if (st != CMF_OK) return st;
    if (softcap > 0) {
        k_softcap<<<grid1d((int64_t)need, 256), 256, 0, I->stream>>>(I->d_logits, (int64_t)need, softcap);
        CU_LAUNCHED("softcap");
    }
    return cu_download(be, out_host, I->d_logits, need * sizeof(float));
}

void cu_destroy(cmf_backend *be) {
    if (!be) return;
    cuda_impl *I = IMPL(be);
    if (I) {
        cudaSetDevice(I->dev);
        if (I->stream) cudaStreamSynchronize(I->stream);
        for (auto &p : I->payloads) cmf_cuda_free(p.second);
        for (arena &a : I->arenas) cmf_cuda_free(a.dev);
        cmf_cuda_free(I->d_pos);
        cmf_cuda_free(I->d_work);
        cmf_cuda_free(I->d_logits);
        cmf_cuda_ctx_free(I->ctx);
        if (I->stream) cudaStreamDestroy(I->stream);
        pthread_mutex_destroy(&I->mu);
        delete I;
    }
    delete be;
}

} // namespace

extern "C" cmf_status cmf_backend_cuda_new(const cmf_model *m, int dev, cmf_backend **out) {
    *out = NULL;
    const cmf_config *c = &m->cfg;
    int count = 0;
    cmf_cuda_device_count(&count);
    if (count == 0) {
        char why[256];
        snprintf(why, sizeof why, "%s", cmf_last_error()); /* "cuda: no device: <runtime's reason>" */
        return cmf_err(CMF_E_UNSUPPORTED, "%s", why);
    }
    if (dev < 0 || dev >= count)
        return cmf_err(CMF_E_UNSUPPORTED, "cuda: device %d does not exist (%d device(s))", dev, count);
    if (c->head_dim % 8 || c->head_dim > 256 || c->n_heads % c->n_kv_heads)
        return cmf_err(CMF_E_UNSUPPORTED, "cuda: head_dim %d (needs a multiple of 8, <= 256) has no attention kernel",
                       c->head_dim);
    if (c->rot_dim % 2) return cmf_err(CMF_E_UNSUPPORTED, "cuda: odd rotary dims %d", c->rot_dim);
    CU_TRY(cudaSetDevice(dev), "cudaSetDevice");
    cmf_backend *be = new (std::nothrow) cmf_backend();
    cuda_impl *I = new (std::nothrow) cuda_impl();
    if (!be || !I) {
        delete be;
        delete I;
        return cmf_err(CMF_E_NOMEM, "cuda: out of host memory");
    }
    I->m = m;
    I->dev = dev;
    pthread_mutex_init(&I->mu, NULL);
    be->kind = CMF_BACKEND_CUDA;
    be->name = "cuda";
    be->impl = I;
    be->buf_alloc = cu_alloc;
    be->buf_free = cu_free;
    be->upload = cu_upload;
    be->download = cu_download;
    be->zero = cu_zero;
    be->sync = cu_sync;
    be->load_weights = cu_load_weights;
    be->kv_alloc = cu_kv_alloc;
    be->kv_free = cu_kv_free;
    be->begin = cu_begin;
    be->end = cu_end;
    be->embed = cu_embed;
    be->rmsnorm = cu_rmsnorm;
    be->matmul = cu_matmul;
    be->qk_rope = cu_qk_rope;
    be->kv_write = cu_kv_write;
    be->attention = cu_attention;
    be->glu = cu_glu;
    be->residual = cu_residual;
    be->head = cu_head;
    be->destroy = cu_destroy;
    char info[128] = "";
    cmf_cuda_device_info(dev, info, sizeof info);
    snprintf(be->desc, sizeof be->desc, "cuda:%d: %s", dev, info);
    cmf_status st = cmf_cuda_stream_create((cmf_cuda_stream *)&I->stream);
    if (st == CMF_OK) st = cmf_cuda_ctx_create(&I->ctx, 0);
    if (st == CMF_OK && c->rot_dim > 0) st = upload_arena(I, m->rope_inv_freq, (size_t)c->rot_dim, "rope frequencies");
    if (st != CMF_OK) {
        cu_destroy(be);
        return st;
    }
    *out = be;
    return CMF_OK;
}

/* For tensor parallelism (src/tp/tp_nccl.cu): the backend's cudaStream_t (as void *) and device, so that NCCL
 * collectives are queued in order with the backend's ops. */
extern "C" void cmf_backend_cuda_stream(cmf_backend *be, void **stream, int *dev) {
    *stream = (void *)IMPL(be)->stream;
    *dev = IMPL(be)->dev;
}
