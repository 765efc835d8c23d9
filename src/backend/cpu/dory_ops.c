/* dory_ops.c — the cpu table of backend/dory_ops.h: the arithmetic of the Dory forward (DORY.md §1.4–§1.7) on host
 * memory and the session's thread pool, f32 KV cache. These are the loops of the first Dory CPU forward moved here
 * unchanged (same operations in the same order), so results are bit for bit those of before the split. Reference
 * implementations read for the math: vLLM dory.py and llama.cpp src/models/dory.cpp (the spec's source tags). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/dory_ops.h"
#include "model/dory.h"
#include "util/error.h"

/* justnorm(x) = x / sqrt(Σx² + 1e-6) (§1.4), the sum in double; in place. */
static void justnorm(float *x, int64_t n) {
    double ss = 0;
    for (int64_t i = 0; i < n; i++) ss += (double)x[i] * x[i];
    float r = (float)(1.0 / sqrt(ss + 1e-6));
    for (int64_t i = 0; i < n; i++) x[i] *= r;
}

/* NeoX (rotate-half) RoPE of one head at position p: dims j and j + hd/2 are paired (§1.5 step 2). */
static void rope(float *x, int hd, int p, const float *inv_freq) {
    const int half = hd / 2;
    for (int j = 0; j < half; j++) {
        double ang = (double)p * inv_freq[j];
        float c = (float)cos(ang), s = (float)sin(ang), a = x[j], b = x[j + half];
        x[j] = a * c - b * s;
        x[j + half] = b * c + a * s;
    }
}

static int kv_row(const cmf_dory_kv *kv, int p) { return kv->ring ? p % kv->rows : p; }

static cmf_status c_buf_alloc(cmf_dory_state *s, size_t n_floats, float **out) {
    (void)s;
    *out = calloc(n_floats ? n_floats : 1, sizeof(float));
    return *out ? CMF_OK : cmf_err(CMF_E_NOMEM, "dory: out of memory for %zu floats", n_floats);
}

static void c_buf_free(cmf_dory_state *s, float *buf) {
    (void)s;
    free(buf);
}

static cmf_status c_nop(cmf_dory_state *s) {
    (void)s;
    return CMF_OK;
}

static cmf_status c_copy(cmf_dory_state *s, float *dst, const float *src, size_t n) {
    (void)s;
    memcpy(dst, src, n * sizeof(float));
    return CMF_OK;
}

static cmf_status c_embed(cmf_dory_state *s, float *x, const int32_t *tokens, int n) {
    const int64_t H = s->d->cfg.hidden_size;
    for (int t = 0; t < n; t++) cmf_weight_row_f32(&s->d->embed, tokens[t], x + t * H);
    return CMF_OK;
}

static cmf_status c_matmul(cmf_dory_state *s, float *out, const float *x, int n, const cmf_weight *w) {
    cmf_matmul(s->pool, out, w->rows, x, n, w, NULL);
    return CMF_OK;
}

static cmf_status c_matmuls(cmf_dory_state *s, int count, float *const *out, const float *x, int n,
                            const cmf_weight *const *w) {
    for (int i = 0; i < count; i++) c_matmul(s, out[i], x, n, w[i]);
    return CMF_OK;
}

static void qk_rope_norm(cmf_dory_state *s, const cmf_dory_layer *L, int layer, int n, int pos0) {
    const cmf_dory *d = s->d;
    const cmf_dory_config *c = &d->cfg;
    const int hd = c->head_dim, nh = c->n_heads, nk = c->n_kv_heads, QD = nh * hd, KVD = nk * hd;
    const float *inv = d->inv_freq + (c->rope_profile[layer] == 2 ? hd / 2 : 0);
    for (int t = 0; t < n; t++) {
        const int p = pos0 + t;
        for (int h = 0; h < nh; h++) {
            float *q = s->q + (size_t)t * QD + (size_t)h * hd;
            rope(q, hd, p, inv);
            justnorm(q, hd);
            for (int e = 0; e < hd; e++) q[e] *= L->q_scale[h * hd + e];
        }
        for (int h = 0; h < nk; h++) {
            float *k = s->k + (size_t)t * KVD + (size_t)h * hd;
            rope(k, hd, p, inv);
            justnorm(k, hd);
        }
    }
}

static void kv_write(cmf_dory_state *s, int slot, int n, int pos0) {
    cmf_dory_kv *kv = &s->kv[slot];
    const size_t KVD = (size_t)s->d->cfg.n_kv_heads * s->d->cfg.head_dim;
    for (int t = 0; t < n; t++) {
        const int p = pos0 + t;
        if (!kv->ring && p >= kv->rows) continue; /* a far-field cache cut at its seal (dory_o1.c) */
        const int r = kv_row(kv, p);
        memcpy(kv->k + (size_t)r * KVD, s->k + (size_t)t * KVD, KVD * sizeof(float));
        memcpy(kv->v + (size_t)r * KVD, s->v + (size_t)t * KVD, KVD * sizeof(float));
    }
}

static cmf_status c_qk_norm_kv(cmf_dory_state *s, const cmf_dory_layer *L, int layer, int slot, int n, int pos0) {
    qk_rope_norm(s, L, layer, n, pos0);
    kv_write(s, slot, n, pos0);
    return CMF_OK;
}

/* ---- attention over the cache: one task per (token, query head) ---------------------------------------------- */

typedef struct {
    cmf_dory_state *s;
    const cmf_dory_kv *kv;
    int n, pos0, sliding;
} attn_task;

static void attn_fn(void *ctx, int ith, int nth) {
    const attn_task *t = ctx;
    const cmf_dory_config *c = &t->s->d->cfg;
    const int nh = c->n_heads, hd = c->head_dim, KVD = c->n_kv_heads * hd, group = c->n_heads / c->n_kv_heads;
    const float scale = 1.0f / sqrtf((float)hd);
    float *sc = cmf_pool_scratch(t->s->pool, ith, (size_t)t->s->n_ctx * sizeof(float));
    if (!sc) return; /* reserved at session creation */
    for (int idx = ith; idx < t->n * nh; idx += nth) {
        const int ti = idx / nh, h = idx % nh, kh = h / group, p = t->pos0 + ti;
        const int lo = t->sliding && p - c->swa_window + 1 > 0 ? p - c->swa_window + 1 : 0;
        const float *q = t->s->q + (size_t)ti * nh * hd + (size_t)h * hd;
        float mx = -INFINITY;
        for (int j = lo; j <= p; j++) {
            const float *k = t->kv->k + (size_t)kv_row(t->kv, j) * KVD + (size_t)kh * hd;
            float d = 0;
            for (int e = 0; e < hd; e++) d += q[e] * k[e];
            sc[j - lo] = d * scale;
            if (sc[j - lo] > mx) mx = sc[j - lo];
        }
        double sum = 0;
        for (int j = lo; j <= p; j++) {
            sc[j - lo] = expf(sc[j - lo] - mx);
            sum += sc[j - lo];
        }
        float *o = t->s->att + (size_t)ti * nh * hd + (size_t)h * hd;
        memset(o, 0, (size_t)hd * sizeof(float));
        const float inv = (float)(1.0 / sum);
        for (int j = lo; j <= p; j++) {
            const float *v = t->kv->v + (size_t)kv_row(t->kv, j) * KVD + (size_t)kh * hd;
            const float w = sc[j - lo] * inv;
            for (int e = 0; e < hd; e++) o[e] += w * v[e];
        }
    }
}

static cmf_status c_attend(cmf_dory_state *s, int slot, int n, int pos0, int sliding) {
    attn_task task = {s, &s->kv[slot], n, pos0, sliding};
    cmf_pool_run(s->pool, attn_fn, &task);
    return CMF_OK;
}

static cmf_status c_gate_norm(cmf_dory_state *s, const cmf_dory_layer *L, int n) {
    const int QD = s->d->cfg.n_heads * s->d->cfg.head_dim;
    for (int t = 0; t < n; t++) {
        float *y = s->att + (size_t)t * QD;
        const float *g = s->g + (size_t)t * QD;
        for (int e = 0; e < QD; e++) y[e] *= 1.0f / (1.0f + expf(-g[e] * L->g_scale[e]));
        justnorm(y, QD); /* over the whole concatenated vector (§1.5 step 6) */
    }
    return CMF_OK;
}

static cmf_status c_swiglu_norm(cmf_dory_state *s, const cmf_dory_layer *L, int n) {
    const int F = s->d->cfg.intermediate_size;
    for (int t = 0; t < n; t++) {
        float *g = s->hb + (size_t)t * F;
        const float *u = s->hb2 + (size_t)t * F;
        for (int e = 0; e < F; e++) {
            float gv = g[e] * L->suv_gate[e];
            g[e] = gv / (1.0f + expf(-gv)) * (u[e] * L->suv_up[e]);
        }
        justnorm(g, F);
    }
    return CMF_OK;
}

static cmf_status c_residual(cmf_dory_state *s, const float *lambda, int n) {
    const int64_t H = s->d->cfg.hidden_size;
    for (int t = 0; t < n; t++) {
        float *x = s->x + (size_t)t * H, *y = s->xr + (size_t)t * H;
        justnorm(x, H);
        justnorm(y, H);
        for (int64_t j = 0; j < H; j++) x[j] += lambda[j] * (y[j] - x[j]);
        justnorm(x, H);
    }
    return CMF_OK;
}

static cmf_status c_reinject(cmf_dory_state *s, int n) {
    const int64_t H = s->d->cfg.hidden_size;
    for (int t = 0; t < n; t++) {
        float *x = s->x + t * H;
        const float *in = s->inp + t * H;
        for (int64_t j = 0; j < H; j++) x[j] += in[j];
        justnorm(x, H);
    }
    return CMF_OK;
}

static cmf_status c_normalize(cmf_dory_state *s, int n) {
    const int64_t H = s->d->cfg.hidden_size;
    for (int t = 0; t < n; t++) justnorm(s->x + t * H, H);
    return CMF_OK;
}

static cmf_status c_head(cmf_dory_state *s, const float *h, int rows, float *out) {
    const cmf_dory *d = s->d;
    const int V = d->cfg.vocab_size;
    cmf_matmul(s->pool, out, V, h, rows, &d->lm_head, NULL);
    for (int r = 0; r < rows; r++)
        for (int j = 0; j < V; j++) out[(size_t)r * V + j] *= d->logit_scale[j];
    return CMF_OK;
}

static const cmf_dory_ops CPU_OPS = {
    .name = "cpu",
    .buf_alloc = c_buf_alloc,
    .buf_free = c_buf_free,
    .state_init = NULL,
    .state_free = NULL,
    .begin = c_nop,
    .end = c_nop,
    .copy = c_copy,
    .to_host = c_copy,
    .embed = c_embed,
    .matmul = c_matmul,
    .matmuls = c_matmuls,
    .qk_norm_kv = c_qk_norm_kv,
    .attend = c_attend,
    .gate_norm = c_gate_norm,
    .swiglu_norm = c_swiglu_norm,
    .residual = c_residual,
    .reinject = c_reinject,
    .normalize = c_normalize,
    .head = c_head,
    .segment = NULL,
    .destroy = NULL,
};

const cmf_dory_ops *cmf_dory_ops_cpu(void) { return &CPU_OPS; }
