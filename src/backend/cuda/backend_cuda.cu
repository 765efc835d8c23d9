/* backend_cuda.cu — the cuda backend of backend.h: the transformer forward on one device, one stream.
 *
 *  - Weights: every matrix payload of a weight set is copied to the device once (load_weights; the bytes exactly
 *    as stored, CMF_FORMAT.md §2, read in place by the kernels of cuda_ops.h); the set's f32 small-tensor arena
 *    (norms, biases) likewise. Ops find the device copy of a host cmf_weight / norm pointer in a table.
 *  - Activations and the KV cache ([n_ctx][n_kv_heads][head_dim] per layer; f16, or f32 with the model's
 *    cache_type CMF_CACHE_F32) live on the device.
 *  - The forward only queues work on the stream: positions are uploaded at begin(), logits downloaded by head(),
 *    which is the one synchronisation of a forward.
 *  - Products: cmf_cuda_matvec for n <= 8 tokens, cmf_cuda_gemm (cuBLAS, f16 operands, f32 accumulation) above.
 *  - Attention: per run of consecutive tokens of one session, cmf_cuda_attn_decode (1 token) or
 *    cmf_cuda_attn_prefill (causal, several tokens).
 * Not supported here (CMF_E_UNSUPPORTED): task masks, the O(1) far field, fused quantized row views (Phi-3 qkv in
 * q8/q4), head_dim not a multiple of 8 or above 256. Decode-step CUDA graphs and the ops held back until the
 * graph mode is known: backend_graph.cu; the state both files share: backend_cuda.cuh. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <new>

#include "backend/cuda/backend_cuda.cuh"

namespace cmf_cuda_be {

/* ---- small kernels of the forward not in cuda_ops.h ------------------------------------------------------ */

__global__ void k_softcap(float *x, int64_t n, float cap) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        x[i] = cap * tanhf(x[i] / cap);
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
    cudaSetDevice(IMPL(be)->dev); /* e.g. a session's logits row, allocated from any thread */
    cmf_status st = cmf_cuda_malloc(out, bytes);
    if (st == CMF_OK) st = cmf_cuda_memset(*out, 0, bytes, IMPL(be)->stream);
    return st;
}
void cu_free(cmf_backend *be, void *p) {
    (void)be;
    cmf_cuda_free(p);
}
cmf_status cu_upload(cmf_backend *be, void *dst, const void *src, size_t bytes) {
    cmf_status st = wait_resolve(IMPL(be));
    return st == CMF_OK ? cmf_cuda_upload(dst, src, bytes, IMPL(be)->stream) : st;
}
cmf_status cu_download(cmf_backend *be, void *dst, const void *src, size_t bytes) {
    cmf_status st = wait_resolve(IMPL(be));
    if (st == CMF_OK) st = cmf_cuda_download(dst, src, bytes, IMPL(be)->stream);
    return st == CMF_OK ? cmf_cuda_sync(IMPL(be)->stream) : st;
}
cmf_status cu_zero(cmf_backend *be, void *buf, size_t bytes) {
    cmf_status st = wait_resolve(IMPL(be));
    if (st == CMF_OK) st = flush_pending(IMPL(be));
    return st == CMF_OK ? cmf_cuda_memset(buf, 0, bytes, IMPL(be)->stream) : st;
}
cmf_status cu_sync(cmf_backend *be) { return cmf_cuda_sync(IMPL(be)->stream); }

cmf_status cu_load_weights(cmf_backend *be, const cmf_weights *w, int n_layers) {
    cuda_impl *I = IMPL(be);
    cudaSetDevice(I->dev);
    pthread_mutex_lock(&I->mu); /* a new weight set may reuse the address of a freed one */
    graphs_clear(I);
    I->weight_gen++;
    pthread_mutex_unlock(&I->mu);
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
    if (cmf_cuda_l2pf_bytes() || attn_pf_bytes()) { /* the forward's weight order for the L2 prefetch (block comment there) */
        I->pf_sets++;
        for (int l = 0; l < n_layers; l++) {
            const cmf_layer *L = &w->layers[l];
            const cmf_weight *mats[7] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->w_gate, &L->w_up, &L->w_down};
            for (int i = 0; i < 7; i++) pf_list(I, mats[i]);
        }
        pf_list(I, &w->lm_head);
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
    a.kv_type = CMF_CUDA_KV_F16;
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
    const size_t bytes = (total ? total : 1) * (I->kv_type == CMF_CUDA_KV_F32 ? 4 : 2);
    cmf_status st = cmf_cuda_malloc(&s->dk, bytes);
    if (st == CMF_OK) st = cmf_cuda_malloc(&s->dv, bytes);
    if (st == CMF_OK) st = cmf_cuda_memset(s->dk, 0, bytes, I->stream);
    if (st == CMF_OK) st = cmf_cuda_memset(s->dv, 0, bytes, I->stream);
    const cmf_cuda_attn a = attn_params(&I->m->cfg, 0);
    const size_t need = cmf_cuda_attn_decode_work_bytes(&a, s->n_ctx);
    if (st == CMF_OK && need > I->work_bytes) {
        pthread_mutex_lock(&I->mu); /* no forward is using the old scratch while it is replaced */
        cmf_cuda_sync(I->stream);
        graphs_clear(I); /* they read the old scratch */
        cmf_cuda_free(I->d_work);
        I->d_work = NULL;
        I->work_bytes = 0;
        st = cmf_cuda_malloc(&I->d_work, need);
        if (st == CMF_OK) st = cmf_cuda_memset(I->d_work, 0, need, I->stream); /* the split counters start at 0 */
        if (st == CMF_OK) I->work_bytes = need;
        pthread_mutex_unlock(&I->mu);
    }
    if (st != CMF_OK)
        return cmf_err_prefix(st, "session: the %s KV cache of %d positions (%.1f MiB) on the device: ",
                              I->kv_type == CMF_CUDA_KV_F32 ? "f32" : "f16", s->n_ctx, 2.0 * (double)bytes / (1 << 20));
    return CMF_OK;
}
void cu_kv_free(cmf_backend *be, cmf_session *s) {
    cuda_impl *I = IMPL(be);
    pthread_mutex_lock(&I->mu); /* drop the graphs that use this cache */
    for (size_t i = 0; i < I->graphs.size();) {
        const std::vector<uintptr_t> &k = I->graphs[i].key;
        bool uses = false;
        for (uintptr_t v : k) uses = uses || (s->dk && v == (uintptr_t)s->dk);
        if (uses) {
            cudaGraphExecDestroy(I->graphs[i].exec);
            I->graphs.erase(I->graphs.begin() + (ptrdiff_t)i);
        } else {
            i++;
        }
    }
    pthread_mutex_unlock(&I->mu);
    cmf_cuda_free(s->dk);
    cmf_cuda_free(s->dv);
    s->dk = s->dv = NULL;
}

/* ---- ops ------------------------------------------------------------------------------------------------------- */

cmf_status cu_begin(cmf_backend *be, cmf_batch *b, int n) {
    cuda_impl *I = IMPL(be);
    pthread_mutex_lock(&I->mu);
    cudaSetDevice(I->dev);
    I->mode = G_EAGER;
    I->cur_w = NULL;
    I->n_cur = n;
    drop_pending(I);
    cmf_status st = cmf_cuda_sync(I->stream); /* the staging buffer of the previous forward is free */
    if (st == CMF_OK && n > I->step_cap) {
        graphs_clear(I); /* they read the old d_step */
        cmf_cuda_free(I->d_step);
        cudaFreeHost(I->h_step);
        I->d_step = NULL;
        I->h_step = NULL;
        I->step_cap = 0;
        const int cap = b->n_batch > n ? b->n_batch : n;
        st = cmf_cuda_malloc((void **)&I->d_step, 2 * (size_t)cap * sizeof(int32_t));
        if (st == CMF_OK && cudaMallocHost((void **)&I->h_step, 2 * (size_t)cap * sizeof(int32_t)) != cudaSuccess)
            st = cmf_err(CMF_E_NOMEM, "cuda: %zu bytes of pinned host memory", 2 * (size_t)cap * sizeof(int32_t));
        if (st == CMF_OK) I->step_cap = cap;
    }
    /* the once-quantized activations of wide products (outside any capture; without it the products quantize in
     * every block, as before) */
    if (st == CMF_OK && !I->d_i8q && cmf_cuda_malloc(&I->d_i8q, CMF_CUDA_I8Q_BYTES) != CMF_OK) I->d_i8q = NULL;
    /* the head's output: up to n rows of the vocabulary (allocated here, outside any capture) */
    const size_t need = (size_t)n * (size_t)I->m->cfg.vocab_size;
    if (st == CMF_OK && need > I->logits_cap) {
        cmf_cuda_free(I->d_logits);
        I->d_logits = NULL;
        I->logits_cap = 0;
        if ((st = cmf_cuda_malloc((void **)&I->d_logits, need * sizeof(float))) == CMF_OK) I->logits_cap = need;
    }
    /* pinned staging of the logits download for decode-sized heads (a pageable copy is staged by the driver) */
    const size_t pin = (size_t)(n < LOGITS_PINNED_ROWS ? n : LOGITS_PINNED_ROWS) * (size_t)I->m->cfg.vocab_size;
    if (st == CMF_OK && pin > I->h_logits_cap) {
        if (I->h_logits) cudaFreeHost(I->h_logits);
        I->h_logits = NULL;
        I->h_logits_cap = 0;
        if (cudaMallocHost((void **)&I->h_logits, pin * sizeof(float)) == cudaSuccess) I->h_logits_cap = pin;
        else cudaGetLastError(); /* no pinned memory: the head downloads pageable */
    }
    if (st == CMF_OK) memcpy(I->h_step, b->pos, (size_t)n * sizeof(int32_t));
    if (st != CMF_OK) pthread_mutex_unlock(&I->mu);
    return st;
}
void cu_end(cmf_backend *be, cmf_batch *b) {
    (void)b;
    cuda_impl *I = IMPL(be);
    if (I->mode == G_CAPTURE) capture_abort(I); /* a forward that failed half-way */
    I->has_pn = 0;
    I->mode = G_EAGER;
    drop_pending(I);
    pthread_mutex_unlock(&I->mu);
}

cmf_status cu_embed(cmf_backend *be, cmf_batch *b, float *x, const cmf_weight *embed, const int32_t *tokens, int n,
                    float mult) {
    (void)b;
    cuda_impl *I = IMPL(be);
    cmf_cuda_weight cw;
    cmf_status st = dev_weight(I, embed, &cw, 0);
    if (st != CMF_OK) return cmf_err_prefix(st, "embed: ");
    /* positions (staged by begin) and token ids: one H2D copy, outside any graph */
    memcpy(I->h_step + I->step_cap, tokens, (size_t)n * sizeof(int32_t));
    CU_TRY(cudaMemcpyAsync(I->d_step, I->h_step, ((size_t)I->step_cap + (size_t)n) * sizeof(int32_t),
                           cudaMemcpyHostToDevice, I->stream),
           "positions and token ids to the device");
    if ((st = wait_resolve(I)) != CMF_OK) return st; /* a second embed in one forward */
    I->pe.w = cw;
    I->pe.x = x;
    I->pe.n = n;
    I->pe.mult = mult;
    I->has_pn = 0;
    /* (tensor parallelism: the rank's allreduce is captured with the step, src/backend/cuda/tp_nccl.cu) */
    if (I->graphs_on && n <= GRAPH_MAX_TOK && I->mode == G_EAGER) {
        I->mode = G_WAIT; /* held until the first kv_write decides */
        return CMF_OK;
    }
    return held_issue(I);
}

cmf_status cu_rmsnorm(cmf_backend *be, cmf_batch *b, float *out, const float *x, const float *w, int rows, int d,
                      float eps, int gemma) {
    (void)b;
    cuda_impl *I = IMPL(be);
    if (I->mode != G_EAGER && I->cur_w && w && w == I->cur_w->final_norm) { /* the layers are done */
        cmf_status st = flush_pending(I);
        if (st == CMF_OK) st = graph_flush(I);
        if (st != CMF_OK) return st;
    }
    if (skip_ops(I)) return CMF_OK;
    const float *dw = dev_vec(I, w);
    if (w && !dw) return cmf_err(CMF_E_ARG, "cuda: rmsnorm weight is not resident");
    if (I->mode == G_WAIT) {
        if (!I->has_pn && !I->n_pm && !I->pr_L && !I->pa_x) { /* the first layer's norm: held too */
            I->pn.out = out, I->pn.x = x, I->pn.w = dw, I->pn.rows = rows, I->pn.d = d, I->pn.eps = eps;
            I->pn.gemma = gemma;
            I->has_pn = 1;
            return CMF_OK;
        }
        cmf_status st = wait_resolve(I);
        if (st != CMF_OK) return st;
    }
    if (I->pa_x && I->pa_x == x && I->pa_rows == rows && I->pa_d == d && out != x && I->n_pm == 1 &&
        I->pm[0].out == I->pa_o && I->pm_n == rows && I->pm[0].w->rows == d && !I->pr_L) {
        /* product (o_proj / down_proj), residual add and this norm in one launch */
        cmf_cuda_weight cw;
        cmf_status st = dev_weight(I, I->pm[0].w, &cw, 0);
        if (st != CMF_OK) return st;
        const float *bias = I->pm[0].bias ? dev_vec(I, I->pm[0].bias) : NULL;
        if (I->pm[0].bias && !bias) return cmf_err(CMF_E_ARG, "cuda: a bias is not resident");
        if (cmf_cuda_matvec_multi_ok(&cw, 1, rows)) {
            I->n_pm = 0;
            I->pa_x = NULL;
            return cmf_cuda_matvec_add_rmsnorm(&cw, I->pm_x, I->pa_o, bias, rows, (float *)x, out, dw, eps, gemma,
                                               I->d_cnt, I->stream);
        }
    }
    cmf_status st = flush_mm(I);
    if (st == CMF_OK) st = flush_rope(I);
    if (st != CMF_OK) return st;
    if (I->pa_x && I->pa_x == x && I->pa_rows == rows && I->pa_d == d && out != x) { /* out may be pa_o (xb) */
        I->pa_x = NULL; /* the pending residual add and this norm in one launch */
        return cmf_cuda_add_rmsnorm((float *)x, I->pa_o, out, dw, rows, d, eps, gemma, I->stream);
    }
    if ((st = flush_add(I)) != CMF_OK) return st;
    if (I->fuse_pre && rows <= 8 && out != x && I->mode != G_WAIT) { /* for the prologue of the next products */
        I->nf.x = x, I->nf.out = out, I->nf.w = dw, I->nf.rows = rows, I->nf.d = d, I->nf.eps = eps;
        I->nf.gemma = gemma;
        I->has_nf = 1;
        return CMF_OK;
    }
    return cmf_cuda_rmsnorm(out, x, dw, rows, d, eps, gemma, I->stream);
}

cmf_status cu_matmul(cmf_backend *be, cmf_batch *b, float *out, int64_t ld_out, const float *x, int n,
                     const cmf_weight *w, const float *bias) {
    (void)b;
    cuda_impl *I = IMPL(be);
    if (skip_ops(I)) return CMF_OK;
    if (ld_out != w->rows)
        return cmf_err(CMF_E_UNSUPPORTED, "cuda: products into strided outputs (task-mask neuron runs) are CPU only");
    cmf_status st = CMF_OK;
    if (I->mode == G_WAIT && (n > 8 || out == x || I->pr_L || (I->n_pm && (I->pm_x != x || I->pm_n != n || I->n_pm == 3))) &&
        (st = wait_resolve(I)) != CMF_OK)
        return st; /* a product that would be issued now, not held */
    st = flush_add(I);
    if (st == CMF_OK) st = flush_rope(I);
    if (st == CMF_OK && I->has_nf &&
        (x != I->nf.out || n != I->nf.rows || out == I->nf.x || out == I->nf.out || w->cols != I->nf.d))
        st = flush_mm(I); /* the pending norm goes first (this product does not read its output) */
    if (st != CMF_OK) return st;
    /* deferred: grouped with the next products of the same input (tensor parallelism's allreduce, queued on this
     * stream by tp_nccl.cu, first flushes what is pending through zero()) */
    if (n <= 8 && out != x) {
        if (I->n_pm && (I->pm_x != x || I->pm_n != n || I->n_pm == 3) && (st = flush_mm(I)) != CMF_OK) return st;
        I->pm[I->n_pm].w = w;
        I->pm[I->n_pm].out = out;
        I->pm[I->n_pm].bias = bias;
        I->n_pm++;
        I->pm_x = x;
        I->pm_n = n;
        return CMF_OK;
    }
    if ((st = flush_mm(I)) != CMF_OK) return st;
    return mm_now(I, out, x, n, w, bias);
}

cmf_status cu_qk_rope(cmf_backend *be, cmf_batch *b, const cmf_layer *L, int layer, int n) {
    cuda_impl *I = IMPL(be);
    if (skip_ops(I)) return CMF_OK;
    cmf_status st = CMF_OK;
    if (I->mode == G_WAIT && I->pr_L && (st = wait_resolve(I)) != CMF_OK) return st;
    if (I->mode != G_WAIT && (st = flush_pending(I)) != CMF_OK) return st; /* the q/k/v products (G_WAIT: held) */
    I->pr_L = L; /* run with the cache write by kv_write */
    I->pr_b = b;
    I->pr_layer = layer;
    I->pr_n = n;
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
    if (I->mode == G_WAIT) {
        bool persist = false; /* the whole layer stack in one launch (persist.cu) */
        cmf_status st = persist_try(I, be, b, seqs, n, &persist);
        if (st == CMF_OK && persist) {
            I->cur_w = seqs[0]->w;
            I->mode = G_PERSIST;
        } else if (st == CMF_OK) {
            st = graph_decide(I, b, seqs, n);
        }
        if (st != CMF_OK) return st;
    }
    if (skip_ops(I)) {
        drop_pending(I); /* the cached graph / persistent kernel holds the norm + RoPE */
        return CMF_OK;
    }
    if (!I->cur_w) I->cur_w = seqs[0]->w;
    const int64_t KVD = (int64_t)b->m->cfg.n_kv_heads * b->m->cfg.head_dim;
    cmf_status st = CMF_OK;
    const cmf_layer *rope = I->pr_L;
    if (rope && (I->pr_b != b || I->pr_layer != l || I->pr_n != n)) {
        st = flush_rope(I);
        rope = NULL;
    }
    I->pr_L = NULL;
    if (st == CMF_OK) st = flush_pending(I);
    if (st == CMF_OK && rope && I->fuse_attn && n <= GRAPH_MAX_TOK) { /* held for the attention launch */
        bool ones = true;
        for (int t = 0; t < n && ones; t++) ones = run_len(seqs, t, n) == 1;
        cmf_cuda_attn a = attn_params(&b->m->cfg, b->m->cfg.is_sliding[l] ? b->m->cfg.sliding_window : 0);
        a.kv_type = I->kv_type;
        cmf_cuda_qk_rope r;
        if (ones && rope_args(I, b, rope, l, &r) == CMF_OK && cmf_cuda_attn_decode_rope_ok(&a, &r)) {
            I->fa.L = rope, I->fa.b = b, I->fa.layer = l, I->fa.n = n;
            for (int t = 0; t < n; t++) I->fa.s[t] = seqs[t];
            return CMF_OK;
        }
        cmf_err_clear();
    }
    for (int t = 0, r; t < n && st == CMF_OK; t += r) {
        r = run_len(seqs, t, n);
        const cmf_session *s = seqs[t];
        if (rope) {
            st = rope_now(I, b, rope, l, t, r, s);
            continue;
        }
        st = cmf_cuda_kv_write(kv_at(I, s->dk, s->kv_off[l]), kv_at(I, s->dv, s->kv_off[l]), b->k + (size_t)t * KVD,
                               b->v + (size_t)t * KVD, D_POS(I) + t, r, KVD, I->kv_type, I->stream);
    }
    return st;
}

cmf_status cu_attention(cmf_backend *be, cmf_batch *b, cmf_session *const *seqs, int l, int n) {
    cuda_impl *I = IMPL(be);
    if (skip_ops(I)) return CMF_OK;
    const cmf_config *c = &b->m->cfg;
    const size_t QD = (size_t)c->n_heads * c->head_dim;
    cmf_cuda_attn a = attn_params(c, c->is_sliding[l] ? c->sliding_window : 0);
    a.kv_type = I->kv_type;
    cmf_status st = wait_resolve(I);
    const bool fused = I->fa.L && I->fa.layer == l && I->fa.b == b && I->fa.n == n; /* fuse_attn (CMF_CUDA_FUSE_ATTN) */
    cmf_cuda_qk_rope qr;
    if (fused) {
        if (st == CMF_OK) st = rope_args(I, b, I->fa.L, l, &qr);
        I->fa.L = NULL;
    }
    if (st == CMF_OK) st = flush_pending(I);
    const size_t KVD = (size_t)c->n_kv_heads * c->head_dim;
    for (int t = 0, r; t < n && st == CMF_OK; t += r) {
        r = run_len(seqs, t, n);
        const cmf_session *s = seqs[t];
        const uint16_t *dk = (const uint16_t *)kv_at(I, s->dk, s->kv_off[l]);
        const uint16_t *dv = (const uint16_t *)kv_at(I, s->dv, s->kv_off[l]);
        if (r == 1 && I->cur_w && attn_pf_bytes()) pf_hint_attn(I, &I->cur_w->layers[l].wo);
        if (fused)
            st = cmf_cuda_attn_decode_rope(&a, b->q + t * QD, b->k + t * KVD, b->v + t * KVD, &qr, (void *)dk, (void *)dv,
                                           D_POS(I) + t, s->n_ctx, b->att + t * QD, I->d_work, I->stream);
        else if (r == 1)
            st = cmf_cuda_attn_decode_dpos(&a, b->q + t * QD, dk, dv, D_POS(I) + t, s->n_ctx, b->att + t * QD, I->d_work,
                                           I->stream);
        else if (I->kv_type == CMF_CUDA_KV_F32) /* f32 K/V: the f32 prefill kernel (the tensor-core one reads f16) */
            st = cmf_cuda_attn_prefill(&a, b->q + t * QD, dk, dv, b->pos[t], r, b->att + t * QD, I->stream);
        else
            st = cmf_cuda_attn_prefill_tc(&a, b->q + t * QD, dk, dv, b->pos[t], r, b->att + t * QD, I->stream);
        cmf_cuda_set_l2_prefetch(NULL, 0);
    }
    return st;
}

cmf_status cu_glu(cmf_backend *be, cmf_batch *b, float *gate, const float *up, int64_t count, int gelu) {
    (void)b;
    cuda_impl *I = IMPL(be);
    if (skip_ops(I)) return CMF_OK;
    cmf_status st = wait_resolve(I);
    if (st == CMF_OK) st = flush_add(I);
    if (st == CMF_OK) st = flush_rope(I);
    if (st != CMF_OK) return st;
    if (I->n_pm == 2 && I->pm[0].out == gate && I->pm[1].out == up && !I->pm[0].bias && !I->pm[1].bias &&
        count == (int64_t)I->pm_n * I->pm[0].w->rows) {
        cmf_cuda_weight cw[2] = {};
        if ((st = dev_weight(I, I->pm[0].w, &cw[0], 0)) != CMF_OK || (st = dev_weight(I, I->pm[1].w, &cw[1], 0)) != CMF_OK)
            return st;
        if (cw[0].rows == cw[1].rows && cmf_cuda_matvec_multi_ok(cw, 2, I->pm_n)) {
            I->n_pm = 0; /* gate, up and the activation in one launch */
            pf_hint(I, I->pm[0].w, I->pm[1].w);
            if (nf_fits(I, cw, 2, I->pm_x, I->pm_n)) { /* with the pending norm in its prologue (fuse_pre) */
                cmf_cuda_mv_ex ex = {};
                ex.d_norm_x = I->nf.x, ex.d_norm_w = I->nf.w, ex.eps = I->nf.eps, ex.gemma_style = I->nf.gemma;
                I->has_nf = 0;
                st = cmf_cuda_matvec_glu_ex(&cw[0], &cw[1], (float *)I->pm_x, gate, I->pm_n, gelu, &ex, I->stream);
            } else {
                st = flush_norm(I);
                if (st == CMF_OK) st = cmf_cuda_matvec_glu(&cw[0], &cw[1], I->pm_x, gate, I->pm_n, gelu, I->stream);
            }
            cmf_cuda_set_l2_prefetch(NULL, 0);
            return st;
        }
    }
    if ((st = flush_mm(I)) != CMF_OK) return st;
    return cmf_cuda_glu(gate, gate, up, count, gelu, I->stream);
}

cmf_status cu_residual(cmf_backend *be, cmf_batch *b, float *x, float *o, const float *post_norm, int rows, int d,
                       float eps, int gemma) {
    cuda_impl *I = IMPL(be);
    if (skip_ops(I)) return CMF_OK;
    cmf_status st = wait_resolve(I);
    /* the product that wrote o stays pending when the add and the next norm can join it (cu_rmsnorm) */
    const bool keep = I->fuse_norm && !post_norm && !I->pa_x && I->n_pm == 1 && I->pm[0].out == o && I->pm_n == rows &&
                      I->pm[0].w->rows == d;
    bool absorb = !keep && I->fuse_pre && !post_norm && !I->pa_x && !I->pm_rx && !I->has_nf && I->n_pm == 1 &&
                  I->pm[0].out == o && I->pm_n == rows && I->pm[0].w->rows == d && I->pm_x != x;
    if (absorb) { /* the add becomes the pending product's epilogue (fuse_pre, block comment "fusion") */
        cmf_cuda_weight cw;
        absorb = dev_weight(I, I->pm[0].w, &cw, 0) == CMF_OK && cmf_cuda_matvec_ex_ok(&cw, 1, rows);
        cmf_err_clear();
    }
    if (st == CMF_OK) st = keep || absorb ? flush_rope(I) : flush_pending(I);
    if (st != CMF_OK) return st;
    if (absorb) {
        I->pm_rx = x;
        return CMF_OK;
    }
    if (!post_norm) { /* deferred: fused with the rmsnorm that reads x next */
        I->pa_x = x;
        I->pa_o = o;
        I->pa_rows = rows;
        I->pa_d = d;
        return CMF_OK;
    }
    if (post_norm) st = cu_rmsnorm(be, b, o, o, post_norm, rows, d, eps, gemma);
    if (st == CMF_OK) st = cmf_cuda_add(x, x, o, (int64_t)rows * d, I->stream);
    return st;
}

cmf_status head_compute(cuda_impl *I, float *out, const float *xn, int rows, const cmf_weight *lm_head, float softcap) {
    cmf_status st = mm_now(I, out, xn, rows, lm_head, NULL);
    if (st != CMF_OK) return st;
    const size_t need = (size_t)rows * (size_t)lm_head->rows;
    if (softcap > 0) {
        k_softcap<<<grid1d((int64_t)need, 256), 256, 0, I->stream>>>(out, (int64_t)need, softcap);
        CU_LAUNCHED("softcap");
    }
    return CMF_OK;
}

cmf_status cu_head(cmf_backend *be, cmf_batch *b, float *out_host, const float *xn, int rows, const cmf_weight *lm_head,
                   float softcap) {
    cuda_impl *I = IMPL(be);
    cmf_status st = wait_resolve(I);
    if (st == CMF_OK) st = flush_pending(I);
    if (st == CMF_OK) st = graph_flush(I); /* normally done at the final norm already */
    if (st != CMF_OK) return st;
    const size_t need = (size_t)rows * (size_t)lm_head->rows;
    if (need > I->logits_cap) /* begin() sized it for n rows of the vocabulary */
        return cmf_err(CMF_E_ARG, "cuda: head of %d rows x %lld exceeds the logits buffer", rows,
                       (long long)lm_head->rows);
    (void)b;
    if ((st = head_compute(I, I->d_logits, xn, rows, lm_head, softcap)) != CMF_OK) return st;
    if (need > I->h_logits_cap) return cu_download(be, out_host, I->d_logits, need * sizeof(float));
    st = cmf_cuda_download(I->h_logits, I->d_logits, need * sizeof(float), I->stream); /* pinned: direct DMA */
    if (st == CMF_OK) st = cmf_cuda_sync(I->stream);
    if (st == CMF_OK) memcpy(out_host, I->h_logits, need * sizeof(float));
    return st;
}

void cu_destroy(cmf_backend *be) {
    if (!be) return;
    cuda_impl *I = IMPL(be);
    if (I) {
        cudaSetDevice(I->dev);
        if (I->stream) cudaStreamSynchronize(I->stream);
        graphs_clear(I);
        persist_free(I);
        sample_free(I);
        for (auto &p : I->payloads) cmf_cuda_free(p.second);
        for (auto &p : I->f16w) cmf_cuda_free(p.second);
        for (arena &a : I->arenas) cmf_cuda_free(a.dev);
        cmf_cuda_free(I->d_step);
        if (I->h_step) cudaFreeHost(I->h_step);
        cmf_cuda_free(I->d_work);
        cmf_cuda_free(I->d_i8q);
        cmf_cuda_free(I->d_logits);
        cmf_cuda_free(I->d_cnt);
        if (I->h_logits) cudaFreeHost(I->h_logits);
        cmf_cuda_ctx_free(I->ctx);
        if (I->stream) cudaStreamDestroy(I->stream);
        pthread_mutex_destroy(&I->mu);
        delete I;
    }
    delete be;
}

} // namespace cmf_cuda_be

using namespace cmf_cuda_be;

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
    const char *g = getenv("CMF_CUDA_GRAPH");
    I->graphs_on = !(g && g[0] == '0');
    const char *ep = getenv("CMF_CUDA_EXACT_PREFILL");
    I->exact_prefill = ep && ep[0] == '1';
    const char *fc = getenv("CMF_CUDA_F16_CACHE");
    I->f16_cache = !fc || !fc[0] ? 2 : fc[0] == '1' ? 1 : 0; /* 2: the memory rule of f16_copy */
    I->kv_type = m->cache_type == CMF_CACHE_F32 ? CMF_CUDA_KV_F32 : CMF_CUDA_KV_F16;
    const char *fz = getenv("CMF_CUDA_FUSE_NORM"); /* off by default: measured slower (block comment "fusion") */
    I->fuse_norm = fz && fz[0] == '1';
    const char *fa = getenv("CMF_CUDA_FUSE_ATTN"); /* on by default; =0 turns it off (block comment "fusion") */
    I->fuse_attn = !(fa && fa[0] == '0');
    const char *fp = getenv("CMF_CUDA_FUSE_PRE"); /* on by default (block comment "fusion") */
    I->fuse_pre = !(fp && fp[0] == '0');
    I->persist = persist_env(); /* opt-in until measured (persist.cu) */
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
    be->head_keep = cu_head_keep;
    be->sample = cu_sample;
    be->fetch = cu_fetch;
    be->destroy = cu_destroy;
    char info[128] = "";
    cmf_cuda_device_info(dev, info, sizeof info);
    snprintf(be->desc, sizeof be->desc, "cuda:%d: %s", dev, info);
    cmf_status st = cmf_cuda_stream_create((cmf_cuda_stream *)&I->stream);
    if (st == CMF_OK) st = cmf_cuda_ctx_create(&I->ctx, 0);
    if (st == CMF_OK) st = cmf_cuda_malloc((void **)&I->d_cnt, sizeof(int));
    if (st == CMF_OK) st = cmf_cuda_memset(I->d_cnt, 0, sizeof(int), I->stream);
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
