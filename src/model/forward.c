/* forward.c — the transformer forward pass for a batch of tokens, top to bottom like the papers:
 *
 *   x = embed[token] · embed_multiplier
 *   per layer:  h = x + [post_attn_norm] Attn(RMSNorm(x))            (Vaswani et al. 2017; pre-norm)
 *               x = h + [post_ffn_norm]  W_down(act(W_gate·n) ⊙ W_up·n),  n = RMSNorm(h)   (SwiGLU/GeGLU)
 *   logits = softcap(W_head · RMSNorm(x))
 *
 * Attention: q,k,v projections (+bias), optional per-head q/k RMSNorm (Qwen3, Gemma 3), RoPE on the first rot_dim
 * dims of each head (pairs (i, i+rot/2) as HF's rotate_half, or (2i, 2i+1) as llama2.c), the new k/v appended to
 * the KV cache, then causal softmax(q·k·scale [softcapped]) over the cached positions — all of them, or the last
 * sliding_window ones for sliding layers — with grouped-query sharing of kv heads (Ainslie et al. 2023).
 * Family differences are the config flags and the optional tensors; there is one forward for all.
 * Every operation goes through the model's backend (src/backend/backend.h): the same code runs on the CPU and on
 * a CUDA device. */
#include <stdatomic.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/cpu/threadpool.h"
#include "model/model.h"
#include "skills/skills.h"
#include "tp/tp.h"

#define TRY(x)                                                                                                   \
    do {                                                                                                         \
        cmf_status st_ = (x);                                                                                    \
        if (st_ != CMF_OK) return st_;                                                                           \
    } while (0)

/* A row-parallel product (o_proj / down_proj) of a TP rank with the residual folded into the all-reduce (tp.h
 * "fold"): x_new = x + sum over ranks of W_r in_r. Rank 0 adds its partial to x (the residual, which the cuda
 * backend takes as the product's epilogue), every other rank writes its partial into x, and the all-reduce sums x in
 * place, so the collective's output is the block output and the next RMSNorm reads it as on one device. in: n x
 * W->cols (the rank's slice of the attention output / GLU), x: n x D, scratch: n x D (rank 0's partial). */
static cmf_status tp_fold(cmf_backend *be, cmf_batch *b, float *x, float *scratch, const float *in, const cmf_weight *W,
                          int n, int D) {
    if (b->m->tp_rank == 0) {
        TRY(be->matmul(be, b, scratch, D, in, n, W, NULL));
        TRY(be->residual(be, b, x, scratch, NULL, n, D, 0.0f, 0));
    } else {
        TRY(be->matmul(be, b, x, D, in, n, W, NULL));
    }
    return be->allreduce(be, b, x, (int64_t)n * D);
}

/* The head rows' logits into their sessions (each session's ->logits). */
typedef struct logits_copy {
    cmf_session *const *seqs;
    const int *last_of;      /* [rows]: the token of each head row */
    const float *all_logits; /* [n][V] every token's logits, or NULL: the rows are in head_out */
    const float *head_out;   /* [rows][V] */
    int rows, V;
    atomic_int next;         /* the next row to copy (threads take rows by this index) */
} logits_copy;

/* Rows of 16 streams are 16 x vocab floats (2 MB at a 32k vocabulary, ~0.15 ms on one thread, while the pool's
 * worker waits): from this many rows on, the batch's pool copies them (cmf_pool_run_dyn: rows by an atomic index,
 * so a worker that starts late is skipped). */
#define LOGITS_POOL_ROWS 4

/* cmf_task_fn (threadpool.h): copies the rows of c (a logits_copy) that this thread takes. */
static void copy_logits(void *ctx, int ith, int nth) {
    (void)ith, (void)nth;
    logits_copy *c = ctx;
    for (int r; (r = atomic_fetch_add(&c->next, 1)) < c->rows;) {
        const int t = c->last_of[r];
        const float *src = c->all_logits ? c->all_logits + (size_t)t * c->V : c->head_out + (size_t)r * c->V;
        memcpy(c->seqs[t]->logits, src, (size_t)c->V * sizeof(float));
    }
}

/* The layers and the head, op by op through the backend; b->pos is set. */
static cmf_status forward_ops(cmf_backend *be, cmf_batch *b, cmf_session *const *seqs, const int32_t *tokens, int n,
                              float *all_logits) {
    const cmf_model *m = b->m;
    const cmf_weights *W = seqs[0]->w; /* one weight set per batch (checked by cmf_batch_run) */
    const cmf_config *c = &m->cfg;
    const int D = c->hidden_size, QD = c->n_heads * c->head_dim, KVD = c->n_kv_heads * c->head_dim;
    const int F = c->intermediate_size, V = c->vocab_size;
    const float eps = c->rms_norm_eps;
    const int gn = c->gemma_norm;
    float *x = b->x, *xb = b->xb;
    const int fold = be->allreduce && m->tp_of && m->tp_of->fold; /* TP ranks with the residual in the all-reduce */

    TRY(be->embed(be, b, x, &W->embed, tokens, n, c->embed_multiplier));

    const cmf_task_mask *mask = seqs[0]->mask; /* one mask per batch (checked by cmf_batch_run) */
    for (int l = 0; l < c->n_layers; l++) {
        const cmf_layer *L = &W->layers[l];
        if (mask && !cmf_mask_layer_alive(m->masks, mask, (uint32_t)l))
            continue; /* a dead layer: x passes through unchanged and its KV rows are never read */

        /* attention block */
        TRY(be->rmsnorm(be, b, xb, x, L->attn_norm, n, D, eps, gn));
        TRY(be->matmul(be, b, b->q, QD, xb, n, &L->wq, L->bq));
        TRY(be->matmul(be, b, b->k, KVD, xb, n, &L->wk, L->bk));
        TRY(be->matmul(be, b, b->v, KVD, xb, n, &L->wv, L->bv));
        TRY(be->qk_rope(be, b, L, l, n));
        TRY(be->kv_write(be, b, seqs, l, n));
        TRY(be->attention(be, b, seqs, l, n));
        if (fold && !L->post_attn_norm) { /* TP, residual folded into the all-reduce (tp.h fold) */
            TRY(tp_fold(be, b, x, xb, b->att, &L->wo, n, D));
        } else {
            TRY(be->matmul(be, b, xb, D, b->att, n, &L->wo, NULL));
            if (be->allreduce) TRY(be->allreduce(be, b, xb, (int64_t)n * D)); /* TP: sum the ranks' partial o_proj */
            TRY(be->residual(be, b, x, xb, L->post_attn_norm, n, D, eps, gn));
        }

        /* feed-forward block */
        TRY(be->rmsnorm(be, b, xb, x, L->ffn_norm, n, D, eps, gn));
        if (mask) { /* only the active neurons' rows of gate/up; the others stay 0 and add nothing in down */
            TRY(be->zero(be, b->hb, (size_t)n * F * sizeof(float)));
            TRY(be->zero(be, b->hb2, (size_t)n * F * sizeof(float)));
            for (const int *r = seqs[0]->runs + 2 * (size_t)seqs[0]->ffn_runs[l]; r[0] >= 0; r += 2) {
                const cmf_weight g = cmf_weight_rows(&L->w_gate, r[0], r[1]), u = cmf_weight_rows(&L->w_up, r[0], r[1]);
                TRY(be->matmul(be, b, b->hb + r[0], F, xb, n, &g, NULL));
                TRY(be->matmul(be, b, b->hb2 + r[0], F, xb, n, &u, NULL));
            }
        } else {
            TRY(be->matmul(be, b, b->hb, F, xb, n, &L->w_gate, NULL));
            TRY(be->matmul(be, b, b->hb2, F, xb, n, &L->w_up, NULL));
        }
        TRY(be->glu(be, b, b->hb, b->hb2, (int64_t)n * F, c->act == CMF_ACT_GELU_TANH));
        if (fold && !L->post_ffn_norm) {
            TRY(tp_fold(be, b, x, xb, b->hb, &L->w_down, n, D));
        } else {
            TRY(be->matmul(be, b, xb, D, b->hb, n, &L->w_down, NULL));
            if (be->allreduce) TRY(be->allreduce(be, b, xb, (int64_t)n * D)); /* TP: sum the partial down_proj */
            TRY(be->residual(be, b, x, xb, L->post_ffn_norm, n, D, eps, gn));
        }
    }

    /* final norm and the head: every token when asked for, else only each session's last token */
    int rows = 0;
    int *last_of = b->head_tok; /* token index of each head row */
    for (int t = 0; t < n; t++) {
        int last = 1;
        for (int u = t + 1; u < n && last; u++) last = seqs[u] != seqs[t];
        if (!last) continue;
        last_of[rows] = t;
        if (!all_logits)
            TRY(be->rmsnorm(be, b, b->head_in + (size_t)rows * D, x + (size_t)t * D, W->final_norm, 1, D, eps, gn));
        rows++;
    }
    /* the rows stay in backend memory (each session's dlogits) when the backend can and every session has one */
    int keep = !all_logits && be->head_keep;
    for (int r = 0; r < rows && keep; r++) keep = (b->head_dst[r] = seqs[last_of[r]]->dlogits) != NULL;
    for (int r = 0; r < rows; r++) seqs[last_of[r]]->logits_dev = 0;
    if (keep) {
        TRY(be->head_keep(be, b, b->head_dst, b->head_in, rows, &W->lm_head, c->final_softcap));
        for (int r = 0; r < rows; r++) seqs[last_of[r]]->logits_dev = 1;
        return CMF_OK;
    }
    if (all_logits) {
        TRY(be->rmsnorm(be, b, x, x, W->final_norm, n, D, eps, gn));
        TRY(be->head(be, b, all_logits, x, n, &W->lm_head, c->final_softcap));
    } else {
        TRY(be->head(be, b, b->head_out, b->head_in, rows, &W->lm_head, c->final_softcap));
    }
    logits_copy lc = {seqs, last_of, all_logits, b->head_out, rows, V, 0};
    if (b->pool && rows >= LOGITS_POOL_ROWS && cmf_pool_size(b->pool) > 1)
        cmf_pool_run_dyn(b->pool, copy_logits, &lc);
    else
        copy_logits(&lc, 0, 1);
    return CMF_OK;
}

cmf_status cmf_forward(cmf_batch *b, cmf_session *const *seqs, const int32_t *tokens, int n, float *all_logits) {
    if (b->tp_rank) return cmf_tp_forward(b, seqs, tokens, n, all_logits); /* split over N ranks (src/tp) */
    cmf_backend *be = b->m->be;
    /* positions: each session's tokens take its next positions in batch order */
    for (int t = 0; t < n; t++) {
        int before = 0;
        for (int u = 0; u < t; u++) before += seqs[u] == seqs[t];
        b->pos[t] = seqs[t]->pos + before;
    }
    cmf_status st = be->begin(be, b, n);
    if (st != CMF_OK) return st;
    st = forward_ops(be, b, seqs, tokens, n, all_logits);
    be->end(be, b);
    if (st != CMF_OK) return st; /* positions stay: the rows written are overwritten by the next try */
    for (int t = 0; t < n; t++) seqs[t]->pos++;
    return CMF_OK;
}
