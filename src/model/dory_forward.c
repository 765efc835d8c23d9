/* dory_forward.c — the Dory forward pass (DORY.md §1.4–§1.8) and the Conf and Recon early-exit gates (§2), written
 * once against the Dory op table of src/backend/dory_ops.h (cpu: backend/cpu/dory_ops.c, cuda:
 * backend/cuda/dory_ops.cu). Per chunk of n tokens: embed -> input block -> loops × (re-inject, recurrent block,
 * normalise) -> output block -> logits = (lm_head·h) ⊙ logit_scale/σ₀. This file holds the structure: the blocks,
 * the loops, the KV slot of each (layer, loop) under per_loop / last_loop, the gates' stage machines, and the
 * segments a backend may replay as graphs (cuda); the arithmetic is in the ops. Reference implementations read for
 * the math: vLLM dory.py and llama.cpp src/models/dory.cpp (see the spec's source tags); the numbers are checked
 * against llama.cpp's numpy reference. */
#include <math.h>
#include <string.h>

#include "model/dory.h"
#include "util/error.h"

#define TRY(x)                                                                                                   \
    do {                                                                                                         \
        cmf_status st_ = (x);                                                                                    \
        if (st_ != CMF_OK) return st_;                                                                           \
    } while (0)

/* ---- sub-layers ------------------------------------------------------------------------------------------------ */

/* Attention sub-layer (§1.5) on x [n][H] at positions pos0.., reading and writing KV slot `slot` (recurrent loop
 * `loop`); a slot under the far field (dory_o1.c, cpu only) reads out from its state once sealed. */
static cmf_status attention(cmf_dory_state *s, const cmf_dory_layer *L, int layer, int slot, int loop, int n,
                            int pos0) {
    const cmf_dory_ops *ops = s->ops;
    float *const out[4] = {s->q, s->k, s->v, s->g};
    const cmf_weight *const w[4] = {&L->wq, &L->wk, &L->wv, &L->wg};
    TRY(ops->matmuls(s, 4, out, s->x, n, w));
    TRY(ops->qk_norm_kv(s, L, layer, slot, n, pos0));
    if (!cmf_dory_o1_attend(s, slot, loop, n, pos0)) TRY(ops->attend(s, slot, n, pos0, L->kind == 'S'));
    TRY(ops->gate_norm(s, L, n));
    TRY(ops->matmul(s, s->xr, s->att, n, &L->wo));
    return ops->residual(s, L->lambda, n);
}

/* SwiGLU MLP sub-layer (§1.6) on x [n][H]. */
static cmf_status mlp(cmf_dory_state *s, const cmf_dory_layer *L, int n) {
    const cmf_dory_ops *ops = s->ops;
    float *const out[2] = {s->hb, s->hb2};
    const cmf_weight *const w[2] = {&L->w_gate, &L->w_up};
    TRY(ops->matmuls(s, 2, out, s->x, n, w));
    TRY(ops->swiglu_norm(s, L, n));
    TRY(ops->matmul(s, s->xr, s->hb, n, &L->w_down));
    return ops->residual(s, L->lambda, n);
}

/* Sub-layers [l0, l1) on s->x; `loop` selects the per_loop KV slot of recurrent layers. */
static cmf_status run_layers(cmf_dory_state *s, int l0, int l1, int loop, int n) {
    const cmf_dory_config *c = &s->d->cfg;
    for (int l = l0; l < l1; l++) {
        const cmf_dory_layer *L = &s->d->layers[l];
        if (L->kind == '-') {
            TRY(mlp(s, L, n));
        } else {
            int rec = l >= c->n_input && l < c->n_input + c->n_recurrent;
            int slot = s->slot[l] + (rec && s->kv_mode == CMF_DORY_KV_PER_LOOP ? loop : 0);
            TRY(attention(s, L, l, slot, loop, n, s->pos));
        }
    }
    return CMF_OK;
}

/* One recurrent pass i (§1.7): h = justnorm(state + inp), the recurrent block, state = justnorm(h). x holds state
 * on entry and the new state on exit. */
static cmf_status recurrent_pass(cmf_dory_state *s, int loop, int n) {
    const cmf_dory_config *c = &s->d->cfg;
    TRY(s->ops->reinject(s, n));
    TRY(run_layers(s, c->n_input, c->n_input + c->n_recurrent, loop, n));
    return s->ops->normalize(s, n);
}

/* Input block; inp = its output; x = inp (the initial state, "input_copy"). */
static cmf_status input_block(cmf_dory_state *s, const int32_t *tokens, int n) {
    const cmf_dory_config *c = &s->d->cfg;
    TRY(s->ops->embed(s, s->x, tokens, n));
    TRY(run_layers(s, 0, c->n_input, 0, n));
    return s->ops->copy(s, s->inp, s->x, (size_t)n * c->hidden_size);
}

static cmf_status output_block(cmf_dory_state *s, int n) {
    const cmf_dory_config *c = &s->d->cfg;
    return run_layers(s, c->n_input + c->n_recurrent, c->n_layers, 0, n);
}

/* ---- segments: the parts of a chunk a backend may replay as one graph (dory_ops.h "segment") ---------------------
 * FIRST: embed, input block, recurrent pass 0; PASS: recurrent pass `loop` >= 1; OUT: the output block. A plain
 * chunk is FIRST, PASS 1..loops-1, OUT; the gates run the same segments with their read-outs between them. Each
 * segment's launches depend only on (kind, loop, n), the session's buffers and the weights, hence the key. */
enum { SEG_FIRST = 1, SEG_PASS = 2, SEG_OUT = 3 };

static cmf_status body_first(cmf_dory_state *s, const int32_t *tokens, int loop, int n) {
    (void)loop;
    TRY(input_block(s, tokens, n));
    return recurrent_pass(s, 0, n);
}

static cmf_status body_pass(cmf_dory_state *s, const int32_t *tokens, int loop, int n) {
    (void)tokens;
    return recurrent_pass(s, loop, n);
}

static cmf_status body_out(cmf_dory_state *s, const int32_t *tokens, int loop, int n) {
    (void)tokens;
    (void)loop;
    return output_block(s, n);
}

static cmf_status segment(cmf_dory_state *s, int kind, const int32_t *tokens, int loop, int n) {
    cmf_status (*body)(cmf_dory_state *, const int32_t *, int, int) =
        kind == SEG_FIRST ? body_first : kind == SEG_PASS ? body_pass : body_out;
    if (!s->ops->segment) return body(s, tokens, loop, n);
    const int key = (kind * (CMF_DORY_MAX_LOOPS + 1) + loop) * 65536 + (n < 65536 ? n : 65535);
    return s->ops->segment(s, key, body, tokens, loop, n);
}

/* Logits of the last row of x into s->logits (host), (lm_head·h) ⊙ logit_scale/σ₀, no final norm. */
static cmf_status read_out(cmf_dory_state *s, int n) {
    return s->ops->head(s, s->x + (size_t)(n - 1) * s->d->cfg.hidden_size, 1, s->logits);
}

static cmf_status chunk(cmf_dory_state *s, const int32_t *tokens, int n, int loops, float *all_logits) {
    const cmf_dory_config *c = &s->d->cfg;
    TRY(segment(s, SEG_FIRST, tokens, 0, n));
    for (int i = 1; i < loops; i++) TRY(segment(s, SEG_PASS, NULL, i, n));
    TRY(segment(s, SEG_OUT, NULL, 0, n));
    if (all_logits) {
        TRY(s->ops->head(s, s->x, n, all_logits));
        memcpy(s->logits, all_logits + (size_t)(n - 1) * c->vocab_size, (size_t)c->vocab_size * sizeof(float));
    } else {
        TRY(read_out(s, n));
    }
    s->pos += n;
    return CMF_OK;
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

/* Runs the body of a public call between the backend's begin and end (end also reports device faults). */
static cmf_status bracket_end(cmf_dory_state *s, cmf_status st) {
    cmf_status e = s->ops->end(s);
    return st != CMF_OK ? st : e;
}

cmf_status cmf_dory_forward(cmf_dory_state *s, const int32_t *tokens, int n, int loops, float *all_logits) {
    if (!s) return cmf_err(CMF_E_ARG, "cmf_dory_forward: NULL state");
    cmf_status st = check_tokens(s, tokens, n);
    if (st != CMF_OK) return st;
    if (loops == 0) loops = s->d->cfg.n_loops;
    if (loops < 1 || loops > s->max_loops)
        return cmf_err(CMF_E_ARG, "dory: %d loops requested; this session allows 1..%d", loops, s->max_loops);
    if (s->kv_mode == CMF_DORY_KV_PER_LOOP && s->loops_used && loops != s->loops_used)
        return cmf_err(CMF_E_ARG, "dory: the per_loop KV cache holds %d loops per token; %d loops would read "
                                  "missing loop caches (use last_loop to vary loops)", s->loops_used, loops);
    if ((st = s->ops->begin(s)) != CMF_OK) return st;
    if (s->kv_mode == CMF_DORY_KV_PER_LOOP) s->loops_used = loops;
    const int V = s->d->cfg.vocab_size;
    for (int done = 0, b; done < n && st == CMF_OK; done += b) {
        b = cmf_dory_o1_clip(s, n - done < s->n_batch ? n - done : s->n_batch);
        if ((st = cmf_dory_o1_begin(s, b)) != CMF_OK) break;
        if ((st = chunk(s, tokens + done, b, loops, all_logits ? all_logits + (size_t)done * V : NULL)) != CMF_OK)
            break;
        st = cmf_dory_o1_end(s);
    }
    return bracket_end(s, st);
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

/* The body of cmf_dory_decode_gated (checks done, inside the backend's begin/end): one read-out is copied back to
 * the host per probed token (FirstRead), as the reference Metal path does; a second only when pass 2 runs. */
static cmf_status gated(cmf_dory_state *s, int32_t token, float threshold, int *np) {
    const cmf_dory_config *c = &s->d->cfg;
    const size_t H = (size_t)c->hidden_size;
    TRY(segment(s, SEG_FIRST, &token, 0, 1));
    *np = 1;
    if (s->pause_left > 0) { /* the tracker paused probing: both passes, one read-out */
        s->pause_left--;
        TRY(segment(s, SEG_PASS, NULL, 1, 1));
        TRY(segment(s, SEG_OUT, NULL, 0, 1));
        TRY(read_out(s, 1));
        *np = 2;
        return CMF_OK;
    }
    TRY(s->ops->copy(s, s->state, s->x, H));
    TRY(segment(s, SEG_OUT, NULL, 0, 1)); /* FirstRead */
    TRY(read_out(s, 1));
    if (!(top_prob(s->logits, c->vocab_size) >= threshold)) {
        TRY(s->ops->copy(s, s->x, s->state, H));
        TRY(segment(s, SEG_PASS, NULL, 1, 1));
        TRY(segment(s, SEG_OUT, NULL, 0, 1)); /* SecondRead: overwrites this position's output-block K/V */
        TRY(read_out(s, 1));
        *np = 2;
    }
    s->gate_probed++;
    if (s->track_window > 0) {
        s->track_probes++;
        s->track_exits += *np == 1;
        if (s->track_probes >= s->track_window) {
            if ((double)s->track_exits < s->track_min_rate * s->track_probes) s->pause_left = s->track_pause;
            s->track_probes = s->track_exits = 0;
        }
    }
    return CMF_OK;
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
    if (st == CMF_OK) st = s->ops->begin(s);
    if (st != CMF_OK) return st;
    int np = 1;
    if ((st = bracket_end(s, gated(s, token, threshold, &np))) != CMF_OK) return st;
    s->pos += 1;
    s->gate_tokens++;
    s->gate_one_pass += np == 1;
    if (passes) *passes = np;
    return CMF_OK;
}

/* The body of cmf_dory_decode_recon (inside begin/end): φ is copied to the host and scored there in double. */
static cmf_status recon(cmf_dory_state *s, int32_t token, const cmf_dory_probe *probe, int *np, double *score) {
    const cmf_dory_config *c = &s->d->cfg;
    TRY(cmf_dory_o1_begin(s, 1));
    TRY(segment(s, SEG_FIRST, &token, 0, 1)); /* "First": x is now φ, the post-pass state */
    TRY(s->ops->to_host(s, s->h_host, s->x, (size_t)c->hidden_size));
    double sc = 0;
    for (int j = 0; j < c->hidden_size; j++) sc += (double)probe->w[j] * s->h_host[j];
    *np = 1;
    if (!(sc >= probe->bias)) { /* "SecondFresh" */
        TRY(segment(s, SEG_PASS, NULL, 1, 1));
        *np = 2;
    }
    TRY(segment(s, SEG_OUT, NULL, 0, 1)); /* "Read" */
    TRY(read_out(s, 1));
    *score = sc;
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
    if (st == CMF_OK) st = s->ops->begin(s);
    if (st != CMF_OK) return st;
    int np = 1;
    double sc = 0;
    if ((st = bracket_end(s, recon(s, token, probe, &np, &sc))) != CMF_OK) return st;
    s->pos += 1;
    s->gate_tokens++;
    s->gate_one_pass += np == 1;
    if (passes) *passes = np;
    if (score) *score = sc;
    return cmf_dory_o1_end(s);
}
