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
 * Family differences are the config flags and the optional tensors; there is one forward for all. */
#include <math.h>
#include <string.h>

#include "model/model.h"
#include "skills/skills.h"

/* ---- attention over the KV cache, parallel over (token, head) ---------------------------------------------- */
typedef struct {
    cmf_batch *b;
    cmf_session *const *seqs;
    int layer, n;
} attn_task;

static void attn_worker(void *ctx, int ith, int nth) {
    attn_task *a = ctx;
    cmf_batch *b = a->b;
    const cmf_config *c = &b->m->cfg;
    const int HD = c->head_dim, NH = c->n_heads, KVD = c->n_kv_heads * HD, group = NH / c->n_kv_heads;
    const int sliding = c->is_sliding[a->layer];
    float *scores = cmf_pool_scratch(b->pool, ith, 0); /* reserved by cmf_batch_run */
    const cmf_masks *mk = b->m->masks;
    const uint8_t *heads = a->seqs[0]->mask ? cmf_mask_head_row(mk, a->seqs[0]->mask, (uint32_t)a->layer) : NULL;
    for (int job = ith; job < a->n * NH; job += nth) {
        const int t = job / NH, h = job % NH, kvh = h / group;
        const cmf_session *s = a->seqs[t];
        if (heads && !cmf_mask_bit(heads, (uint32_t)h)) { /* a dead head: not computed, contributes nothing */
            memset(b->att + (size_t)t * NH * HD + (size_t)h * HD, 0, (size_t)HD * sizeof(float));
            continue;
        }
        if (s->o1 && s->o1->sealed && s->o1->on[a->layer]) continue; /* read out by o1_worker */
        const float *kc = s->k_cache + s->kv_off[a->layer];
        const float *vc = s->v_cache + s->kv_off[a->layer];
        const int pos = b->pos[t];
        const int start = sliding && pos - c->sliding_window + 1 > 0 ? pos - c->sliding_window + 1 : 0;
        const float *q = b->q + (size_t)t * NH * HD + (size_t)h * HD;
        for (int j = start; j <= pos; j++) {
            const float *k = kc + (size_t)j * KVD + (size_t)kvh * HD;
            float d = 0;
            for (int i = 0; i < HD; i++) d += q[i] * k[i];
            d *= c->attn_scale;
            if (c->attn_softcap > 0) d = c->attn_softcap * tanhf(d / c->attn_softcap);
            scores[j - start] = d;
        }
        cmf_softmax(scores, pos - start + 1);
        float *out = b->att + (size_t)t * NH * HD + (size_t)h * HD;
        memset(out, 0, (size_t)HD * sizeof(float));
        for (int j = start; j <= pos; j++) {
            const float *v = vc + (size_t)j * KVD + (size_t)kvh * HD;
            const float p = scores[j - start];
            for (int i = 0; i < HD; i++) out[i] += p * v[i];
        }
    }
}

/* ---- the O(1) far field for sealed sessions, parallel over (session, KV head), in token order --------------- */
typedef struct {
    cmf_batch *b;
    cmf_session *const *seqs;
    int layer, n;
    cmf_session **sealed; /* distinct sessions of the batch whose far field is sealed on this layer */
    int n_sealed;
} o1_task;

static void o1_worker(void *ctx, int ith, int nth) {
    o1_task *a = ctx;
    const cmf_config *c = &a->b->m->cfg;
    const int HD = c->head_dim, NKV = c->n_kv_heads, QD = c->n_heads * HD, KVD = NKV * HD;
    const int group = c->n_heads / NKV;
    for (int job = ith; job < a->n_sealed * NKV; job += nth) {
        cmf_session *s = a->sealed[job / NKV];
        const int g = job % NKV;
        cmf_o1 *st = s->o1->st[(size_t)a->layer * NKV + g];
        for (int t = 0; t < a->n; t++) {
            if (a->seqs[t] != s) continue;
            const size_t qo = (size_t)t * QD + (size_t)g * group * HD;
            /* cannot fail: pointers are valid and the states keep their query trace */
            (void)cmf_o1_step(st, a->b->q + qo, a->b->k + (size_t)t * KVD + (size_t)g * HD,
                              a->b->v + (size_t)t * KVD + (size_t)g * HD, a->b->att + qo);
        }
    }
}

/* ---- RoPE on one head vector ------------------------------------------------------------------------------- */
static void rope(float *v, const cmf_config *c, const float *inv_freq, int pos) {
    const int half = c->rot_dim / 2;
    for (int i = 0; i < half; i++) {
        const float ang = (float)pos * inv_freq[i];
        const float cs = cosf(ang), sn = sinf(ang);
        const int a = c->rope_pairing == CMF_ROPE_HALF ? i : 2 * i;
        const int b = c->rope_pairing == CMF_ROPE_HALF ? i + half : 2 * i + 1;
        const float x0 = v[a], x1 = v[b];
        v[a] = x0 * cs - x1 * sn;
        v[b] = x1 * cs + x0 * sn;
    }
}

static void softcap(float *x, int64_t n, float cap) {
    for (int64_t i = 0; i < n; i++) x[i] = cap * tanhf(x[i] / cap);
}

void cmf_forward(cmf_batch *b, cmf_session *const *seqs, const int32_t *tokens, int n, float *all_logits) {
    const cmf_model *m = b->m;
    const cmf_weights *W = seqs[0]->w; /* one weight set per batch (checked by cmf_batch_run) */
    const cmf_config *c = &m->cfg;
    const int D = c->hidden_size, HD = c->head_dim, NH = c->n_heads, NKV = c->n_kv_heads;
    const int QD = NH * HD, KVD = NKV * HD, F = c->intermediate_size, V = c->vocab_size;
    const float eps = c->rms_norm_eps;
    const int gn = c->gemma_norm;
    float *x = b->x, *xb = b->xb;

    /* positions: each session's tokens take its next positions in batch order */
    for (int t = 0; t < n; t++) {
        int before = 0;
        for (int u = 0; u < t; u++) before += seqs[u] == seqs[t];
        b->pos[t] = seqs[t]->pos + before;
    }

    for (int t = 0; t < n; t++) {
        cmf_weight_row_f32(&W->embed, tokens[t], x + (size_t)t * D);
        if (c->embed_multiplier != 1.0f)
            for (int i = 0; i < D; i++) x[(size_t)t * D + i] *= c->embed_multiplier;
    }

    const cmf_task_mask *mask = seqs[0]->mask; /* one mask per batch (checked by cmf_batch_run) */
    for (int l = 0; l < c->n_layers; l++) {
        const cmf_layer *L = &W->layers[l];
        if (mask && !cmf_mask_layer_alive(m->masks, mask, (uint32_t)l))
            continue; /* a dead layer: x passes through unchanged and its KV rows are never read */
        const float *inv_freq = m->rope_inv_freq + (c->is_sliding[l] ? c->rot_dim / 2 : 0);

        /* attention block */
        for (int t = 0; t < n; t++) cmf_rmsnorm(xb + (size_t)t * D, x + (size_t)t * D, L->attn_norm, D, eps, gn);
        cmf_matmul(b->pool, b->q, QD, xb, n, &L->wq, L->bq);
        cmf_matmul(b->pool, b->k, KVD, xb, n, &L->wk, L->bk);
        cmf_matmul(b->pool, b->v, KVD, xb, n, &L->wv, L->bv);
        for (int t = 0; t < n; t++) {
            const int pos = b->pos[t];
            for (int h = 0; h < NH; h++) {
                float *q = b->q + (size_t)t * QD + (size_t)h * HD;
                if (L->q_norm) cmf_rmsnorm(q, q, L->q_norm, HD, eps, gn);
                rope(q, c, inv_freq, pos);
            }
            for (int h = 0; h < NKV; h++) {
                float *k = b->k + (size_t)t * KVD + (size_t)h * HD;
                if (L->k_norm) cmf_rmsnorm(k, k, L->k_norm, HD, eps, gn);
                rope(k, c, inv_freq, pos);
            }
            cmf_session *s = seqs[t];
            if (s->o1 && s->o1->on[l]) {
                if (s->o1->sealed) continue; /* the far field takes this row in o1_worker */
                memcpy(s->o1->qtrace[l] + (size_t)pos * QD, b->q + (size_t)t * QD, (size_t)QD * sizeof(float));
            }
            const size_t row = s->kv_off[l] + (size_t)pos * KVD;
            memcpy(s->k_cache + row, b->k + (size_t)t * KVD, (size_t)KVD * sizeof(float));
            memcpy(s->v_cache + row, b->v + (size_t)t * KVD, (size_t)KVD * sizeof(float));
        }
        attn_task at = {b, seqs, l, n};
        cmf_pool_run(b->pool, attn_worker, &at);
        o1_task ot = {b, seqs, l, n, b->sealed, 0};
        for (int t = 0; t < n; t++) {
            cmf_session *s = seqs[t];
            if (!s->o1 || !s->o1->sealed || !s->o1->on[l]) continue;
            int seen = 0;
            for (int i = 0; i < ot.n_sealed && !seen; i++) seen = ot.sealed[i] == s;
            if (!seen) ot.sealed[ot.n_sealed++] = s;
        }
        if (ot.n_sealed) cmf_pool_run(b->pool, o1_worker, &ot);
        cmf_matmul(b->pool, xb, D, b->att, n, &L->wo, NULL);
        for (int t = 0; t < n; t++) {
            float *o = xb + (size_t)t * D, *xt = x + (size_t)t * D;
            if (L->post_attn_norm) cmf_rmsnorm(o, o, L->post_attn_norm, D, eps, gn);
            for (int i = 0; i < D; i++) xt[i] += o[i];
        }

        /* feed-forward block */
        for (int t = 0; t < n; t++) cmf_rmsnorm(xb + (size_t)t * D, x + (size_t)t * D, L->ffn_norm, D, eps, gn);
        if (mask) { /* only the active neurons' rows of gate/up; the others stay 0 and add nothing in down */
            memset(b->hb, 0, (size_t)n * F * sizeof(float));
            memset(b->hb2, 0, (size_t)n * F * sizeof(float));
            for (const int *r = seqs[0]->runs + 2 * (size_t)seqs[0]->ffn_runs[l]; r[0] >= 0; r += 2) {
                const cmf_weight g = cmf_weight_rows(&L->w_gate, r[0], r[1]), u = cmf_weight_rows(&L->w_up, r[0], r[1]);
                cmf_matmul(b->pool, b->hb + r[0], F, xb, n, &g, NULL);
                cmf_matmul(b->pool, b->hb2 + r[0], F, xb, n, &u, NULL);
            }
        } else {
            cmf_matmul(b->pool, b->hb, F, xb, n, &L->w_gate, NULL);
            cmf_matmul(b->pool, b->hb2, F, xb, n, &L->w_up, NULL);
        }
        if (c->act == CMF_ACT_GELU_TANH) cmf_gelu_tanh(b->hb, (int64_t)n * F);
        else cmf_silu(b->hb, (int64_t)n * F);
        for (size_t i = 0; i < (size_t)n * F; i++) b->hb[i] *= b->hb2[i];
        cmf_matmul(b->pool, xb, D, b->hb, n, &L->w_down, NULL);
        for (int t = 0; t < n; t++) {
            float *o = xb + (size_t)t * D, *xt = x + (size_t)t * D;
            if (L->post_ffn_norm) cmf_rmsnorm(o, o, L->post_ffn_norm, D, eps, gn);
            for (int i = 0; i < D; i++) xt[i] += o[i];
        }
    }

    /* final norm and the head: every token when asked for, else only each session's last token */
    if (all_logits) {
        for (int t = 0; t < n; t++) cmf_rmsnorm(x + (size_t)t * D, x + (size_t)t * D, W->final_norm, D, eps, gn);
        cmf_matmul(b->pool, all_logits, V, x, n, &W->lm_head, NULL);
        if (c->final_softcap > 0) softcap(all_logits, (int64_t)n * V, c->final_softcap);
    }
    int rows = 0;
    int *last_of = b->head_tok; /* token index of each head row */
    for (int t = 0; t < n; t++) {
        int last = 1;
        for (int u = t + 1; u < n && last; u++) last = seqs[u] != seqs[t];
        if (!last) continue;
        last_of[rows] = t;
        if (!all_logits)
            cmf_rmsnorm(b->head_in + (size_t)rows * D, x + (size_t)t * D, W->final_norm, D, eps, gn);
        rows++;
    }
    if (!all_logits) {
        cmf_matmul(b->pool, b->head_out, V, b->head_in, rows, &W->lm_head, NULL);
        if (c->final_softcap > 0) softcap(b->head_out, (int64_t)rows * V, c->final_softcap);
    }
    for (int r = 0; r < rows; r++) {
        const int t = last_of[r];
        const float *src = all_logits ? all_logits + (size_t)t * V : b->head_out + (size_t)r * V;
        memcpy(seqs[t]->logits, src, (size_t)V * sizeof(float));
    }
    for (int t = 0; t < n; t++) seqs[t]->pos++;
}
