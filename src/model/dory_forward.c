/* dory_forward.c — the Dory forward pass on the CPU (DORY.md §1.4–§1.8) and the Conf and Recon early-exit gates (§2).
 * Per chunk of n tokens: embed -> input block -> loops × (re-inject, recurrent block, normalise) -> output block ->
 * logits = (lm_head·h) ⊙ logit_scale/σ₀. Reference implementations read for the math: vLLM dory.py and llama.cpp
 * src/models/dory.cpp (see the spec's source tags); the numbers are checked against llama.cpp's numpy reference. */
#include <math.h>
#include <string.h>

#include "model/dory.h"
#include "util/error.h"

/* justnorm(x) = x / sqrt(Σx² + 1e-6) (§1.4), the sum in double; in place. */
static void justnorm(float *x, int64_t n) {
    double ss = 0;
    for (int64_t i = 0; i < n; i++) ss += (double)x[i] * x[i];
    float r = (float)(1.0 / sqrt(ss + 1e-6));
    for (int64_t i = 0; i < n; i++) x[i] *= r;
}

/* nGPT residual (§1.4): x <- justnorm(a + λ ⊙ (b − a)), a = justnorm(x), b = justnorm(y); y is clobbered. */
static void residual(float *x, float *y, const float *lambda, int64_t H) {
    justnorm(x, H);
    justnorm(y, H);
    for (int64_t j = 0; j < H; j++) x[j] += lambda[j] * (y[j] - x[j]);
    justnorm(x, H);
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

/* ---- sub-layers ------------------------------------------------------------------------------------------------ */

/* Attention sub-layer (§1.5) on x [n][H] at positions pos0.., reading and writing KV slot `slot` (recurrent loop
 * `loop`); a slot under the far field (dory_o1.c) reads out from its state once sealed. */
static void attention(cmf_dory_state *s, const cmf_dory_layer *L, int layer, int slot, int loop, int n, int pos0) {
    cmf_dory_kv *kv = &s->kv[slot];
    const cmf_dory *d = s->d;
    const cmf_dory_config *c = &d->cfg;
    const int H = c->hidden_size, hd = c->head_dim, nh = c->n_heads, nk = c->n_kv_heads, QD = nh * hd, KVD = nk * hd;
    cmf_matmul(s->pool, s->q, QD, s->x, n, &L->wq, NULL);
    cmf_matmul(s->pool, s->k, KVD, s->x, n, &L->wk, NULL);
    cmf_matmul(s->pool, s->v, KVD, s->x, n, &L->wv, NULL);
    cmf_matmul(s->pool, s->g, QD, s->x, n, &L->wg, NULL);
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
        if (!kv->ring && p >= kv->rows) continue; /* a far-field cache cut at its seal (dory_o1.c) */
        const int r = kv_row(kv, p);
        memcpy(kv->k + (size_t)r * KVD, s->k + (size_t)t * KVD, (size_t)KVD * sizeof(float));
        memcpy(kv->v + (size_t)r * KVD, s->v + (size_t)t * KVD, (size_t)KVD * sizeof(float));
    }
    if (!cmf_dory_o1_attend(s, slot, loop, n, pos0)) {
        attn_task task = {s, kv, n, pos0, L->kind == 'S'};
        cmf_pool_run(s->pool, attn_fn, &task);
    }
    for (int t = 0; t < n; t++) {
        float *y = s->att + (size_t)t * QD;
        const float *g = s->g + (size_t)t * QD;
        for (int e = 0; e < QD; e++) y[e] *= 1.0f / (1.0f + expf(-g[e] * L->g_scale[e]));
        justnorm(y, QD); /* over the whole concatenated vector (§1.5 step 6) */
    }
    cmf_matmul(s->pool, s->xr, H, s->att, n, &L->wo, NULL);
    for (int t = 0; t < n; t++) residual(s->x + (size_t)t * H, s->xr + (size_t)t * H, L->lambda, H);
}

/* SwiGLU MLP sub-layer (§1.6) on x [n][H]. */
static void mlp(cmf_dory_state *s, const cmf_dory_layer *L, int n) {
    const cmf_dory_config *c = &s->d->cfg;
    const int H = c->hidden_size, F = c->intermediate_size;
    cmf_matmul(s->pool, s->hb, F, s->x, n, &L->w_gate, NULL);
    cmf_matmul(s->pool, s->hb2, F, s->x, n, &L->w_up, NULL);
    for (int t = 0; t < n; t++) {
        float *g = s->hb + (size_t)t * F;
        const float *u = s->hb2 + (size_t)t * F;
        for (int e = 0; e < F; e++) {
            float gv = g[e] * L->suv_gate[e];
            g[e] = gv / (1.0f + expf(-gv)) * (u[e] * L->suv_up[e]);
        }
        justnorm(g, F);
    }
    cmf_matmul(s->pool, s->xr, H, s->hb, n, &L->w_down, NULL);
    for (int t = 0; t < n; t++) residual(s->x + (size_t)t * H, s->xr + (size_t)t * H, L->lambda, H);
}

/* Sub-layers [l0, l1) on s->x; `loop` selects the per_loop KV slot of recurrent layers. */
static void run_layers(cmf_dory_state *s, int l0, int l1, int loop, int n) {
    const cmf_dory_config *c = &s->d->cfg;
    for (int l = l0; l < l1; l++) {
        const cmf_dory_layer *L = &s->d->layers[l];
        if (L->kind == '-') {
            mlp(s, L, n);
        } else {
            int rec = l >= c->n_input && l < c->n_input + c->n_recurrent;
            int slot = s->slot[l] + (rec && s->kv_mode == CMF_DORY_KV_PER_LOOP ? loop : 0);
            attention(s, L, l, slot, loop, n, s->pos);
        }
    }
}

/* One recurrent pass i (§1.7): h = justnorm(state + inp), the recurrent block, state = justnorm(h). x holds state
 * on entry and the new state on exit. */
static void recurrent_pass(cmf_dory_state *s, int loop, int n) {
    const cmf_dory_config *c = &s->d->cfg;
    const int64_t H = c->hidden_size;
    for (int t = 0; t < n; t++) {
        float *x = s->x + t * H;
        const float *in = s->inp + t * H;
        for (int64_t j = 0; j < H; j++) x[j] += in[j];
        justnorm(x, H);
    }
    run_layers(s, c->n_input, c->n_input + c->n_recurrent, loop, n);
    for (int t = 0; t < n; t++) justnorm(s->x + t * H, H);
}

/* Logits of `rows` hidden vectors h [rows][H] into out [rows][V]: (lm_head·h) ⊙ logit_scale/σ₀, no final norm. */
static void head(cmf_dory_state *s, const float *h, int rows, float *out) {
    const cmf_dory *d = s->d;
    const int V = d->cfg.vocab_size;
    cmf_matmul(s->pool, out, V, h, rows, &d->lm_head, NULL);
    for (int r = 0; r < rows; r++)
        for (int j = 0; j < V; j++) out[(size_t)r * V + j] *= d->logit_scale[j];
}

static void embed(cmf_dory_state *s, const int32_t *tokens, int n) {
    const int64_t H = s->d->cfg.hidden_size;
    for (int t = 0; t < n; t++) cmf_weight_row_f32(&s->d->embed, tokens[t], s->x + t * H);
}

/* Input block; inp = its output; x = inp (the initial state, "input_copy"). */
static void input_block(cmf_dory_state *s, const int32_t *tokens, int n) {
    const cmf_dory_config *c = &s->d->cfg;
    embed(s, tokens, n);
    run_layers(s, 0, c->n_input, 0, n);
    memcpy(s->inp, s->x, (size_t)n * c->hidden_size * sizeof(float));
}

static void output_block(cmf_dory_state *s, int n) {
    const cmf_dory_config *c = &s->d->cfg;
    run_layers(s, c->n_input + c->n_recurrent, c->n_layers, 0, n);
}

static void chunk(cmf_dory_state *s, const int32_t *tokens, int n, int loops, float *all_logits) {
    const cmf_dory_config *c = &s->d->cfg;
    input_block(s, tokens, n);
    for (int i = 0; i < loops; i++) recurrent_pass(s, i, n);
    output_block(s, n);
    if (all_logits) {
        head(s, s->x, n, all_logits);
        memcpy(s->logits, all_logits + (size_t)(n - 1) * c->vocab_size, (size_t)c->vocab_size * sizeof(float));
    } else {
        head(s, s->x + (size_t)(n - 1) * c->hidden_size, 1, s->logits);
    }
    s->pos += n;
}

static cmf_status check_tokens(const cmf_dory_state *s, const int32_t *tokens, int n) {
    if (!tokens || n <= 0) return cmf_err(CMF_E_ARG, "dory: no tokens");
    if (n > s->n_ctx - s->pos)
        return cmf_err(CMF_E_ARG, "dory: %d tokens do not fit: %d of the context's %d positions are free", n,
                       s->n_ctx - s->pos, s->n_ctx);
    for (int i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= s->d->cfg.vocab_size)
            return cmf_err(CMF_E_ARG, "dory: token id %d at index %d is outside the vocabulary [0, %d)", tokens[i], i,
                           s->d->cfg.vocab_size);
    return CMF_OK;
}

cmf_status cmf_dory_forward(cmf_dory_state *s, const int32_t *tokens, int n, int loops, float *all_logits) {
    if (!s) return cmf_err(CMF_E_ARG, "cmf_dory_forward: NULL state");
    cmf_status st = check_tokens(s, tokens, n);
    if (st != CMF_OK) return st;
    if (loops == 0) loops = s->d->cfg.n_loops;
    if (loops < 1 || loops > s->max_loops)
        return cmf_err(CMF_E_ARG, "dory: %d loops requested; this session allows 1..%d", loops, s->max_loops);
    if (s->kv_mode == CMF_DORY_KV_PER_LOOP) {
        if (s->loops_used && loops != s->loops_used)
            return cmf_err(CMF_E_ARG, "dory: the per_loop KV cache holds %d loops per token; %d loops would read "
                                      "missing loop caches (use last_loop to vary loops)", s->loops_used, loops);
        s->loops_used = loops;
    }
    const int V = s->d->cfg.vocab_size;
    for (int done = 0, b; done < n; done += b) {
        b = cmf_dory_o1_clip(s, n - done < s->n_batch ? n - done : s->n_batch);
        if ((st = cmf_dory_o1_begin(s, b)) != CMF_OK) return st;
        chunk(s, tokens + done, b, loops, all_logits ? all_logits + (size_t)done * V : NULL);
        if ((st = cmf_dory_o1_end(s)) != CMF_OK) return st;
    }
    return CMF_OK;
}

/* The largest softmax probability of the logits: 1 / Σ exp(l − max). */
static double top_prob(const float *l, int V) {
    float mx = l[0];
    for (int j = 1; j < V; j++)
        if (l[j] > mx) mx = l[j];
    double sum = 0;
    for (int j = 0; j < V; j++) sum += exp((double)l[j] - mx);
    return 1.0 / sum;
}

cmf_status cmf_dory_decode_gated(cmf_dory_state *s, int32_t token, float threshold, int *passes) {
    if (!s) return cmf_err(CMF_E_ARG, "cmf_dory_decode_gated: NULL state");
    if (s->kv_mode != CMF_DORY_KV_LAST_LOOP)
        return cmf_err(CMF_E_ARG, "dory gate: needs the last_loop KV mode (per_loop would leave loop-1 holes)");
    if (s->max_loops < 2) return cmf_err(CMF_E_ARG, "dory gate: the session allows %d loop(s); it needs 2", s->max_loops);
    if (s->o1)
        return cmf_err(CMF_E_UNSUPPORTED, "dory gate: the Conf gate re-runs the output block for a position, which the "
                                          "O(1) far field cannot rewind");
    cmf_status st = check_tokens(s, &token, 1);
    if (st != CMF_OK) return st;
    const cmf_dory_config *c = &s->d->cfg;
    const size_t H = (size_t)c->hidden_size;
    input_block(s, &token, 1);
    recurrent_pass(s, 0, 1);
    int np = 1;
    if (s->pause_left > 0) { /* the tracker paused probing: both passes, one read-out */
        s->pause_left--;
        recurrent_pass(s, 1, 1);
        output_block(s, 1);
        head(s, s->x, 1, s->logits);
        np = 2;
    } else {
        memcpy(s->state, s->x, H * sizeof(float));
        output_block(s, 1); /* FirstRead */
        head(s, s->x, 1, s->logits);
        if (!(top_prob(s->logits, c->vocab_size) >= threshold)) {
            memcpy(s->x, s->state, H * sizeof(float));
            recurrent_pass(s, 1, 1);
            output_block(s, 1); /* SecondRead: overwrites this position's output-block K/V */
            head(s, s->x, 1, s->logits);
            np = 2;
        }
        s->gate_probed++;
        if (s->track_window > 0) {
            s->track_probes++;
            s->track_exits += np == 1;
            if (s->track_probes >= s->track_window) {
                if ((double)s->track_exits < s->track_min_rate * s->track_probes) s->pause_left = s->track_pause;
                s->track_probes = s->track_exits = 0;
            }
        }
    }
    s->pos += 1;
    s->gate_tokens++;
    s->gate_one_pass += np == 1;
    if (passes) *passes = np;
    return CMF_OK;
}

cmf_status cmf_dory_decode_recon(cmf_dory_state *s, int32_t token, const cmf_dory_probe *probe, int *passes,
                                 double *score) {
    if (!s || !probe || !probe->w) return cmf_err(CMF_E_ARG, "cmf_dory_decode_recon: NULL state or probe");
    const cmf_dory_config *c = &s->d->cfg;
    if (probe->n != c->hidden_size)
        return cmf_err(CMF_E_ARG, "dory recon gate: the probe has %d weights, hidden_size is %d", probe->n,
                       c->hidden_size);
    if (s->kv_mode != CMF_DORY_KV_LAST_LOOP)
        return cmf_err(CMF_E_ARG, "dory recon gate: needs the last_loop KV mode (per_loop would leave loop-1 holes)");
    if (s->max_loops < 2)
        return cmf_err(CMF_E_ARG, "dory recon gate: the session allows %d loop(s); it needs 2", s->max_loops);
    cmf_status st = check_tokens(s, &token, 1);
    if (st == CMF_OK) st = cmf_dory_o1_begin(s, 1);
    if (st != CMF_OK) return st;
    input_block(s, &token, 1);
    recurrent_pass(s, 0, 1); /* "First": x is now φ, the post-pass state */
    double sc = 0;
    for (int j = 0; j < c->hidden_size; j++) sc += (double)probe->w[j] * s->x[j];
    int np = 1;
    if (!(sc >= probe->bias)) { /* "SecondFresh" */
        recurrent_pass(s, 1, 1);
        np = 2;
    }
    output_block(s, 1); /* "Read" */
    head(s, s->x, 1, s->logits);
    s->pos += 1;
    s->gate_tokens++;
    s->gate_one_pass += np == 1;
    if (passes) *passes = np;
    if (score) *score = sc;
    return cmf_dory_o1_end(s);
}
