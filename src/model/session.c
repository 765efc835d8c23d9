/* session.c — sessions (a sequence's KV cache and position), batches (workspaces for one forward over tokens of
 * several sessions: continuous batching), and the O(1) far field's wiring into sessions (DORY.md §3.1–3.2). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/dory.h"
#include "model/model.h"
#include "skills/skills.h"
#include "tp/tp.h"
#include "util/error.h"

static cmf_status o1_seal(cmf_session *s);
static cmf_status o1_trace(cmf_session *s);

/* ---- batches (workspaces) ----------------------------------------------------------------------------------- */

cmf_status cmf_batch_new(const cmf_model *m, int max_tokens, int max_seqs, cmf_batch **out) {
    if (!out) return cmf_err(CMF_E_ARG, "cmf_batch_new: NULL output pointer");
    *out = NULL;
    if (!m) return cmf_err(CMF_E_ARG, "cmf_batch_new: NULL model");
    if (max_tokens < 1 || max_seqs < 1 || max_tokens > (1 << 16) || max_seqs > max_tokens)
        return cmf_err(CMF_E_ARG, "batch: need 1 <= max_seqs (%d) <= max_tokens (%d) <= 65536", max_seqs, max_tokens);
    if (m->dory) return cmf_err(CMF_E_UNSUPPORTED, "batch: Dory sessions run through cmf_session_prefill");
    const cmf_config *c = &m->cfg;
    cmf_batch *b = calloc(1, sizeof *b);
    if (!b) return cmf_err(CMF_E_NOMEM, "batch: out of memory");
    b->m = m;
    b->n_batch = max_tokens;
    b->n_seq = max_seqs;
    if (m->tp) { /* tensor parallel: the rank batches hold the activations (src/tp) */
        cmf_status st = cmf_tp_batch_init(b);
        if (st != CMF_OK) {
            cmf_batch_free(b);
            return st;
        }
        *out = b;
        return CMF_OK;
    }
    const size_t D = (size_t)c->hidden_size, QD = (size_t)c->n_heads * c->head_dim,
                 KVD = (size_t)c->n_kv_heads * c->head_dim, F = (size_t)c->intermediate_size, B = (size_t)max_tokens,
                 S = (size_t)max_seqs;
    cmf_backend *be = m->be;
    float **bufs[9] = {&b->x, &b->xb, &b->q, &b->k, &b->v, &b->att, &b->hb, &b->hb2, &b->head_in};
    const size_t widths[9] = {B * D, B * D, B * QD, B * KVD, B * KVD, B * QD, B * F, B * F, S * D};
    cmf_status st = CMF_OK;
    for (int i = 0; i < 9 && st == CMF_OK; i++) st = be->buf_alloc(be, widths[i] * sizeof(float), (void **)bufs[i]);
    b->pos = malloc(B * sizeof(int));
    b->head_out = malloc(S * (size_t)c->vocab_size * sizeof(float));
    b->head_tok = malloc(S * sizeof(int));
    b->head_dst = malloc(S * sizeof *b->head_dst);
    b->sealed = malloc(S * sizeof *b->sealed);
    if (st == CMF_OK && (!b->pos || !b->head_out || !b->head_tok || !b->head_dst || !b->sealed))
        st = cmf_err(CMF_E_NOMEM, "batch: cannot allocate activations for %d tokens", max_tokens);
    if (st == CMF_OK && be->kind == CMF_BACKEND_CPU) st = cmf_pool_new(m->n_threads, &b->pool);
    if (st == CMF_OK && b->pool) {
        /* scratch per thread: one decoded weight row (widest input); attention grows it to the context */
        size_t widest = D > QD ? D : QD;
        if (F > widest) widest = F;
        st = cmf_pool_reserve(b->pool, widest * sizeof(float));
    }
    if (st != CMF_OK) {
        cmf_batch_free(b);
        return st;
    }
    *out = b;
    return CMF_OK;
}

void cmf_batch_free(cmf_batch *b) {
    if (!b) return;
    cmf_tp_batch_fini(b); /* TP: the rank batches */
    cmf_pool_free(b->pool);
    cmf_backend *be = b->m->be;
    float *bufs[9] = {b->x, b->xb, b->q, b->k, b->v, b->att, b->hb, b->hb2, b->head_in};
    for (int i = 0; i < 9; i++) be->buf_free(be, bufs[i]);
    free(b->pos);
    free(b->head_out);
    free(b->head_tok);
    free(b->head_dst);
    free(b->sealed);
    free(b);
}

int cmf_batch_max_tokens(const cmf_batch *b) { return b ? b->n_batch : 0; }

/* Declared in model.h (the math is explained there). */
int cmf_session_attn_rows(const cmf_session *s, int count, int sealing) {
    const cmf_config *c = &s->m->cfg;
    const int last = s->pos + count;
    int rows = 0;
    for (int l = 0; l < c->n_layers; l++) {
        int r = last;
        if (c->is_sliding && c->is_sliding[l] && c->sliding_window > 0)
            r = last < c->sliding_window ? last : c->sliding_window;
        else if (s->o1 && s->o1->on[l]) r = s->o1->sealed || sealing ? 0 : (last < s->o1->cap ? last : s->o1->cap);
        if (r > rows) rows = r;
    }
    return rows;
}

/* Checks a batch call and runs the forward; nothing changes when a check fails. */
static cmf_status batch_run(cmf_batch *b, cmf_session *const *seqs, const int32_t *tokens, int n, float *all_logits) {
    if (n <= 0) return cmf_err(CMF_E_ARG, "batch: no tokens");
    if (n > b->n_batch) return cmf_err(CMF_E_ARG, "batch: %d tokens exceed the batch size %d", n, b->n_batch);
    const int V = b->m->cfg.vocab_size;
    int n_seq = 0, max_rows = 0;
    for (int i = 0; i < n; i++) {
        if (!seqs[i] || seqs[i]->m != b->m) return cmf_err(CMF_E_ARG, "batch: token %d has no session of this model", i);
        if (seqs[i]->dory) return cmf_err(CMF_E_UNSUPPORTED, "batch: Dory sessions run through cmf_session_prefill");
        if (seqs[i]->mask != seqs[0]->mask)
            return cmf_err(CMF_E_ARG, "batch: sessions with different task masks cannot share a batch");
        if (seqs[i]->w != seqs[0]->w)
            return cmf_err(CMF_E_ARG, "batch: sessions with different skills (%s, %s) cannot share a batch",
                           seqs[0]->w->skill[0] ? seqs[0]->w->skill : "none",
                           seqs[i]->w->skill[0] ? seqs[i]->w->skill : "none");
        if (tokens[i] < 0 || tokens[i] >= V)
            return cmf_err(CMF_E_ARG, "token id %d at index %d is outside the vocabulary [0, %d)", tokens[i], i, V);
        int first = 1, count = 0;
        for (int u = 0; u < n; u++) {
            if (seqs[u] != seqs[i]) continue;
            if (u < i) first = 0;
            count++;
        }
        if (!first) continue;
        n_seq++;
        if (count > seqs[i]->n_ctx - seqs[i]->pos)
            return cmf_err(CMF_E_ARG, "%d tokens do not fit: %d of the context's %d positions are free", count,
                           seqs[i]->n_ctx - seqs[i]->pos, seqs[i]->n_ctx);
        const cmf_o1_sess *o = seqs[i]->o1;
        if (o && !o->sealed && seqs[i]->pos < o->cap && seqs[i]->pos + count > o->cap)
            return cmf_err(CMF_E_ARG, "o1: a prompt chunk crosses the seal length %d at position %d: split it there",
                           o->cap, seqs[i]->pos);
        const int sealing = o && !o->sealed && seqs[i]->pos > 0 && (count == 1 || seqs[i]->pos >= o->cap);
        const int rows = cmf_session_attn_rows(seqs[i], count, sealing);
        if (rows > max_rows) max_rows = rows;
    }
    if (n_seq > b->n_seq) return cmf_err(CMF_E_ARG, "batch: %d sessions exceed the batch's %d", n_seq, b->n_seq);
    cmf_status st = CMF_OK;
    for (int i = 0; i < n; i++) /* a session reset after a seal records a new query trace */
        if (seqs[i]->o1 && !seqs[i]->o1->sealed && (st = o1_trace(seqs[i])) != CMF_OK) return st;
    if (b->pool && (st = cmf_pool_reserve(b->pool, (size_t)max_rows * sizeof(float))) != CMF_OK) /* scores */
        return st;
    /* The prompt ends at a session's first single-token step (or when it fills the seal length): seal then. */
    for (int i = 0; i < n; i++) {
        cmf_session *s = seqs[i];
        if (!s->o1 || s->o1->sealed || s->pos == 0) continue;
        int count = 0;
        for (int u = 0; u < n; u++) count += seqs[u] == s;
        if ((count == 1 || s->pos >= s->o1->cap) && (st = o1_seal(s)) != CMF_OK) return st;
    }
    return cmf_forward(b, seqs, tokens, n, all_logits);
}

cmf_status cmf_batch_run(cmf_batch *b, cmf_session *const *seqs, const int32_t *tokens, int n) {
    if (!b || (n > 0 && (!seqs || !tokens))) return cmf_err(CMF_E_ARG, "cmf_batch_run: NULL argument");
    return batch_run(b, seqs, tokens, n, NULL);
}

/* ---- the O(1) far field: which layers, with which settings ------------------------------------------------- */

/* Resolves the far-field settings in the reference's priority order (DORY.md §3.1): the caller's params, else
 * the environment (CMF_O1 with CMF_O1_M/_WINDOW/_SINK/_RECT; "off" disables even a file hint), else the file
 * hint provenance.o1_attn {layers, m, w, sink}. Writes the spec (NULL = off) and fills *p's m/window/sink/rect. */
static cmf_status resolve_o1(const cmf_model *m, const cmf_session_params *sp, char *spec, size_t len,
                             cmf_o1_params *p, int *seal) {
    spec[0] = 0;
    const char *env = getenv("CMF_O1");
    const cJSON *prov = cJSON_GetObjectItemCaseSensitive(m->file->header, "provenance");
    const cJSON *hint = cJSON_IsObject(prov) ? cJSON_GetObjectItemCaseSensitive(prov, "o1_attn") : NULL;
    if (sp && sp->o1) {
        snprintf(spec, len, "%s", sp->o1);
    } else if (env && *env) {
        snprintf(spec, len, "%s", env);
    } else if (cJSON_IsObject(hint)) {
        const cJSON *layers = cJSON_GetObjectItemCaseSensitive(hint, "layers");
        if (cJSON_IsString(layers)) {
            snprintf(spec, len, "%s", layers->valuestring);
        } else if (cJSON_IsArray(layers)) {
            size_t k = 0;
            const cJSON *e;
            cJSON_ArrayForEach(e, layers) {
                if (!cJSON_IsNumber(e)) return cmf_err(CMF_E_FORMAT, "header: provenance.o1_attn.layers is malformed");
                k += (size_t)snprintf(spec + k, len > k ? len - k : 0, "%s%d", k ? "," : "", e->valueint);
            }
        }
        const char *keys[3] = {"m", "w", "sink"};
        int *dst[3] = {&p->m, &p->window, &p->sink};
        for (int i = 0; i < 3; i++) {
            const cJSON *v = cJSON_GetObjectItemCaseSensitive(hint, keys[i]);
            if (cJSON_IsNumber(v)) *dst[i] = v->valueint;
        }
    }
    /* numeric overrides: environment, then the caller */
    const char *ek[3] = {"CMF_O1_M", "CMF_O1_WINDOW", "CMF_O1_SINK"};
    int *dst[3] = {&p->m, &p->window, &p->sink};
    for (int i = 0; i < 3; i++)
        if (getenv(ek[i]) && *getenv(ek[i])) *dst[i] = atoi(getenv(ek[i]));
    const char *rect = getenv("CMF_O1_RECT");
    if (sp) {
        if (sp->o1_m > 0) p->m = sp->o1_m;
        if (sp->o1_window > 0) p->window = sp->o1_window;
        if (sp->o1_sink >= 0 && sp->o1_sink_set) p->sink = sp->o1_sink;
        if (sp->o1_rect) rect = sp->o1_rect;
        if (sp->o1_seal > 0) *seal = sp->o1_seal;
    }
    if (rect && *rect) {
        if (!strcmp(rect, "agg")) p->rect = CMF_O1_RECT_AGG;
        else if (!strcmp(rect, "fm")) p->rect = CMF_O1_RECT_FM;
        else return cmf_err(CMF_E_ARG, "o1: rectifier '%s' is not agg or fm", rect);
    }
    if (p->m < 4 || p->window < 1 || p->sink < 0 || *seal < 1)
        return cmf_err(CMF_E_ARG, "o1: need m >= 4, window >= 1, sink >= 0, seal >= 1 (got %d, %d, %d, %d)", p->m,
                       p->window, p->sink, *seal);
    return CMF_OK;
}

static void o1_free(cmf_o1_sess *o, int n_layers, int n_kv) {
    if (!o) return;
    if (o->st)
        for (int i = 0; i < n_layers * n_kv; i++) cmf_o1_free(o->st[i]);
    if (o->qtrace)
        for (int l = 0; l < n_layers; l++) free(o->qtrace[l]);
    free(o->st);
    free(o->qtrace);
    free(o->on);
    free(o);
}

/* Sets up s->o1 (or leaves it NULL when off) and the per-layer KV capacity. */
static cmf_status o1_setup(cmf_session *s, const cmf_session_params *sp) {
    const cmf_config *c = &s->m->cfg;
    cmf_o1_params p;
    cmf_o1_default_params(&p, c->n_heads / c->n_kv_heads, c->head_dim, c->head_dim);
    p.scale = c->attn_scale;
    int seal = 32768; /* the reference's SEAL_MAX (DORY.md §3.2) */
    char spec[256];
    cmf_status st = resolve_o1(s->m, sp, spec, sizeof spec, &p, &seal);
    if (st != CMF_OK) return st;
    for (int l = 0; l < c->n_layers; l++) s->kv_rows[l] = s->n_ctx;
    if (!spec[0]) return CMF_OK;
    cmf_o1_sess *o = calloc(1, sizeof *o);
    if (!o || !(o->on = calloc((size_t)c->n_layers, 1))) {
        free(o);
        return cmf_err(CMF_E_NOMEM, "o1: out of memory");
    }
    o->n_on = cmf_o1_parse_layers(spec, c->n_layers, c->is_sliding, o->on);
    if (o->n_on <= 0) {
        const int bad = o->n_on < 0;
        o1_free(o, c->n_layers, c->n_kv_heads);
        return bad ? CMF_E_ARG : CMF_OK; /* "off", or no full-attention layer: exact attention */
    }
    if (c->attn_softcap > 0) {
        o1_free(o, c->n_layers, c->n_kv_heads);
        return cmf_err(CMF_E_UNSUPPORTED, "o1: attention soft-capping (Gemma 2) has no far-field form");
    }
    o->params = p;
    o->cap = seal < s->n_ctx ? seal : s->n_ctx;
    o->st = calloc((size_t)c->n_layers * c->n_kv_heads, sizeof *o->st);
    o->qtrace = calloc((size_t)c->n_layers, sizeof *o->qtrace);
    st = o->st && o->qtrace ? CMF_OK : cmf_err(CMF_E_NOMEM, "o1: out of memory");
    for (int l = 0; l < c->n_layers && st == CMF_OK; l++) {
        if (!o->on[l]) continue;
        s->kv_rows[l] = o->cap;
        o->qtrace[l] = malloc((size_t)o->cap * c->n_heads * c->head_dim * sizeof(float));
        if (!o->qtrace[l]) st = cmf_err(CMF_E_NOMEM, "o1: cannot allocate the query trace");
        for (int g = 0; g < c->n_kv_heads && st == CMF_OK; g++)
            st = cmf_o1_create(&p, &o->st[(size_t)l * c->n_kv_heads + g]);
    }
    if (st != CMF_OK) {
        o1_free(o, c->n_layers, c->n_kv_heads);
        return st;
    }
    s->o1 = o;
    return CMF_OK;
}

/* Seals every far-field layer of s over its s->pos exact rows. */
static cmf_status o1_seal(cmf_session *s) {
    const cmf_config *c = &s->m->cfg;
    const size_t KVD = (size_t)c->n_kv_heads * c->head_dim, QD = (size_t)c->n_heads * c->head_dim;
    const int group = c->n_heads / c->n_kv_heads;
    for (int l = 0; l < c->n_layers; l++) {
        if (!s->o1->on[l]) continue;
        for (int g = 0; g < c->n_kv_heads; g++) {
            cmf_status st = cmf_o1_seal(s->o1->st[(size_t)l * c->n_kv_heads + g],
                                        s->o1->qtrace[l] + (size_t)g * group * c->head_dim, QD,
                                        s->k_cache + s->kv_off[l] + (size_t)g * c->head_dim, KVD,
                                        s->v_cache + s->kv_off[l] + (size_t)g * c->head_dim, KVD, s->pos, NULL, 0);
            if (st != CMF_OK) return cmf_err_prefix(st, "o1: layer %d kv head %d: ", l, g);
        }
    }
    s->o1->sealed = 1;
    /* Only the seal reads the query trace: give its memory back until a reset starts a new sequence (o1_trace). */
    for (int l = 0; l < c->n_layers; l++) {
        free(s->o1->qtrace[l]);
        s->o1->qtrace[l] = NULL;
    }
    return CMF_OK;
}

/* Allocates the query trace of every far-field layer that lacks one (after a seal and a reset). */
static cmf_status o1_trace(cmf_session *s) {
    const cmf_config *c = &s->m->cfg;
    for (int l = 0; l < c->n_layers; l++) {
        if (!s->o1->on[l] || s->o1->qtrace[l]) continue;
        s->o1->qtrace[l] = malloc((size_t)s->o1->cap * c->n_heads * c->head_dim * sizeof(float));
        if (!s->o1->qtrace[l]) return cmf_err(CMF_E_NOMEM, "o1: cannot allocate the query trace of layer %d", l);
    }
    return CMF_OK;
}

/* ---- task masks ------------------------------------------------------------------------------------------------ */

/* Whether task names a mask ("off" / "none" / NULL: dense), and the refusal for a file without masks. */
static int task_named(const char *task) { return task && strcmp(task, "off") && strcmp(task, "none"); }
static cmf_status no_masks_err(const char *task) {
    return cmf_err(CMF_E_NOT_FOUND, "session: task '%s': the file has no task masks", task);
}

/* Chooses the session's task mask by the reference's rule (cmf_masks_choose: an explicit task, else CMF_TASK=off,
 * else the fallback mask) and lists each layer's runs of active FFN neurons, so the forward computes only those
 * rows of gate/up. */
static cmf_status mask_setup(cmf_session *s, const char *task) {
    const cmf_model *m = s->m;
    if (!m->masks || !m->masks->n) return task_named(task) ? no_masks_err(task) : CMF_OK;
    int idx = -1;
    cmf_status st = cmf_masks_choose(m->masks, task, &idx);
    if (st != CMF_OK) return st;
    if (idx < 0) return CMF_OK;
    const cmf_task_mask *t = &m->masks->masks[idx];
    const cmf_config *c = &m->cfg;
    const int L = c->n_layers, F = c->intermediate_size;
    size_t cap = 0, used = 0;
    s->ffn_runs = malloc((size_t)L * sizeof *s->ffn_runs);
    if (!s->ffn_runs) return cmf_err(CMF_E_NOMEM, "session: out of memory");
    for (int l = 0; l < L; l++) {
        const uint8_t *row = cmf_mask_ffn_row(m->masks, t, (uint32_t)l);
        s->ffn_runs[l] = (int)(used / 2);
        for (int i = 0; i <= F; i++) {
            int start = i;
            while (i < F && row && cmf_mask_bit(row, (uint32_t)i)) i++;
            int len = i - start;
            if (len == 0 && i < F) continue;
            if (used + 4 > cap) {
                cap = cap ? 2 * cap : 256;
                int *r = realloc(s->runs, cap * sizeof *r);
                if (!r) return cmf_err(CMF_E_NOMEM, "session: out of memory");
                s->runs = r;
            }
            if (len) s->runs[used++] = start, s->runs[used++] = len;
            if (i >= F) s->runs[used++] = -1, s->runs[used++] = 0;
        }
    }
    s->mask = t;
    return CMF_OK;
}

const char *cmf_session_task(const cmf_session *s) { return !s ? NULL : s->mask ? s->mask->name : ""; }

/* ---- sessions ----------------------------------------------------------------------------------------------- */

/* ---- Dory sessions ----------------------------------------------------------------------------------------- */

/* The Dory part of cmf_session_new_ex: KV mode, loops, the early-exit gate (Conf threshold or Recon probe,
 * DORY.md §2) and the O(1) far field (§3.2: the settings resolved as for transformers, resolve_o1, then
 * cmf_dory_o1_enable). Fills s->dory, s->logits and the gate fields; on error the caller frees s. */
static cmf_status dory_session_setup(cmf_session *s, const cmf_session_params *p, int n_ctx) {
    const cmf_model *m = s->m;
    const cmf_dory_config *dc = &m->dory->cfg;
    /* a task names a mask (CMF_FORMAT.md §1.7): refused as on a transformer file without masks, since this runtime
     * does not apply masks to Dory's looped FFN (a file that has a masks section is told so) */
    if (p && task_named(p->task)) {
        if (m->file && m->file->masks)
            return cmf_err(CMF_E_UNSUPPORTED, "session: task '%s': task masks of looped (Dory) models are not applied "
                                              "by this runtime (use --task off)", p->task);
        return no_masks_err(p->task);
    }
    int mode = -1;
    if (p && p->dory_kv_mode) {
        if (!strcmp(p->dory_kv_mode, "per_loop")) mode = CMF_DORY_KV_PER_LOOP;
        else if (!strcmp(p->dory_kv_mode, "last_loop")) mode = CMF_DORY_KV_LAST_LOOP;
        else return cmf_err(CMF_E_ARG, "session: kv mode '%s' is not per_loop or last_loop", p->dory_kv_mode);
    }
    s->dory_loops = p ? p->loops : 0;
    s->dory_gate = p ? p->gate : 0;
    if (p && p->gate_recon) {
        if (s->dory_gate > 0)
            return cmf_err(CMF_E_ARG, "session: choose one early-exit gate: Conf (gate %g) or Recon (gate_recon '%s')",
                           (double)s->dory_gate, p->gate_recon);
        cmf_status st = !strcmp(p->gate_recon, "model")
                            ? cmf_dory_probe_from_model(m->dory, &s->dory_recon)
                            : cmf_dory_probe_read(p->gate_recon, dc->hidden_size, &s->dory_recon);
        if (st != CMF_OK) return st;
        if (!s->dory_recon)
            return cmf_err(CMF_E_NOT_FOUND, "session: gate_recon \"model\": the file has no Recon probe (tensor "
                                            "dory_recon.weight and header arch.dory.recon_bias)");
        if (p->gate_recon_bias_set) s->dory_recon->bias = p->gate_recon_bias;
    }
    const int gated = s->dory_gate > 0 || s->dory_recon;
    if (gated && mode < 0) mode = CMF_DORY_KV_LAST_LOOP; /* the gates need last_loop (DORY.md §2) */
    /* the far field: the caller's spec, else CMF_O1, else the file hint provenance.o1_attn */
    cmf_o1_params op;
    cmf_o1_default_params(&op, dc->n_heads / dc->n_kv_heads, dc->head_dim, dc->head_dim);
    int seal = 32768; /* the reference's SEAL_MAX (DORY.md §3.2) */
    char spec[256];
    cmf_status st = resolve_o1(m, p, spec, sizeof spec, &op, &seal);
    if (st != CMF_OK) return st;
    const int o1_on = spec[0] && strcmp(spec, "off") != 0;
    if (o1_on && s->dory_gate > 0)
        return cmf_err(CMF_E_UNSUPPORTED, "session: the Conf gate (gate %g) re-runs the output block of a position, "
                                          "which the O(1) far field (o1 '%s') cannot rewind; use the Recon gate or "
                                          "o1 off", (double)s->dory_gate, spec);
    st = cmf_dory_state_new(m->dory, n_ctx, 0, mode, s->dory_loops > 0 ? s->dory_loops : 0, &s->dory);
    if (st != CMF_OK) return st;
    if (gated && s->dory->kv_mode != CMF_DORY_KV_LAST_LOOP)
        return cmf_err(CMF_E_ARG, "session: the early-exit gate needs the last_loop KV mode (per_loop would leave "
                                  "loop-1 holes in the cache)");
    if (gated && s->dory->max_loops < 2)
        return cmf_err(CMF_E_ARG, "session: the early-exit gate needs 2 loops, the session allows %d (loops)",
                       s->dory->max_loops);
    if (o1_on && (st = cmf_dory_o1_enable(s->dory, spec, op.m, op.window, op.sink, op.rect == CMF_O1_RECT_FM, 0,
                                          seal)) != CMF_OK)
        return st;
    s->logits = calloc((size_t)m->cfg.vocab_size, sizeof(float));
    if (!s->logits) return cmf_err(CMF_E_NOMEM, "session: out of memory");
    s->n_ctx = s->dory->n_ctx;
    return CMF_OK;
}

/* Prefill batch (tokens per forward): llama.cpp's default micro-batch; pp512 then reads the weights once. */
enum { DEFAULT_N_BATCH = 512 };

/* The caller's numeric cmf_session_params inside their documented ranges (cmf.h), else CMF_E_ARG naming the field. */
static cmf_status check_session_params(const cmf_session_params *p) {
    if (!p) return CMF_OK;
    if (p->o1_m < 0 || p->o1_window < 0 || p->o1_seal < 0 || (p->o1_sink_set && p->o1_sink < 0))
        return cmf_err(CMF_E_ARG, "session params: o1_m %d, o1_window %d, o1_sink %d and o1_seal %d must be >= 0 "
                                  "(0 = the default)", p->o1_m, p->o1_window, p->o1_sink_set ? p->o1_sink : 0,
                       p->o1_seal);
    if (p->loops < 0 || p->loops > 16)
        return cmf_err(CMF_E_ARG, "session params: loops = %d is outside [0, 16] (0 = the config's)", p->loops);
    if (!(p->gate >= 0.0f)) /* above 1: every step takes two passes (a documented use) */
        return cmf_err(CMF_E_ARG, "session params: gate = %g must be >= 0 (0 = off)", (double)p->gate);
    if (p->gate_recon_bias_set && isnan(p->gate_recon_bias))
        return cmf_err(CMF_E_ARG, "session params: gate_recon_bias is NaN");
    return CMF_OK;
}

cmf_status cmf_session_new_ex(cmf_model *m, const cmf_session_params *p, cmf_session **out) {
    if (!out) return cmf_err(CMF_E_ARG, "cmf_session_new: NULL output pointer");
    *out = NULL;
    if (!m) return cmf_err(CMF_E_ARG, "cmf_session_new: NULL model");
    cmf_status pst = check_session_params(p);
    if (pst != CMF_OK) return pst;
    const cmf_config *c = &m->cfg;
    int n_ctx = p ? p->n_ctx : 0;
    if (n_ctx <= 0) n_ctx = c->max_position_embeddings;
    if (n_ctx > (1 << 24)) return cmf_err(CMF_E_ARG, "session: context %d is too large", n_ctx);
    cmf_session *s = calloc(1, sizeof *s);
    if (!s) return cmf_err(CMF_E_NOMEM, "session: out of memory");
    s->m = m;
    s->w = &m->base;
    s->n_ctx = n_ctx;
    if (m->dory) { /* Dory keeps its own state (per-loop caches, sliding rings) */
        cmf_status st = dory_session_setup(s, p, n_ctx);
        if (st != CMF_OK) {
            cmf_session_free(s);
            return st;
        }
        *out = s;
        return CMF_OK;
    }
    if (p && (p->loops || p->gate > 0 || p->dory_kv_mode || p->gate_recon)) {
        free(s);
        return cmf_err(CMF_E_ARG, "session: loops, kv mode and gates apply to looped (Dory) models only");
    }
    s->kv_off = calloc((size_t)c->n_layers, sizeof *s->kv_off);
    s->kv_rows = calloc((size_t)c->n_layers, sizeof *s->kv_rows);
    cmf_status st = s->kv_off && s->kv_rows ? o1_setup(s, p) : cmf_err(CMF_E_NOMEM, "session: out of memory");
    if (st == CMF_OK) st = mask_setup(s, p ? p->task : NULL);
    if (st != CMF_OK) {
        cmf_session_free(s);
        return st;
    }
    const size_t KVD = (size_t)c->n_kv_heads * (size_t)c->head_dim;
    size_t kv = 0;
    for (int l = 0; l < c->n_layers; l++) {
        s->kv_off[l] = kv;
        kv += (size_t)s->kv_rows[l] * KVD;
    }
    st = m->tp ? cmf_tp_session_init(s) /* TP: rank sessions hold the KV heads */ : m->be->kv_alloc(m->be, s, kv);
    s->logits = calloc((size_t)c->vocab_size, sizeof(float));
    if (st == CMF_OK && !s->logits) st = cmf_err(CMF_E_NOMEM, "session: out of memory");
    /* the logits row on the device (cuda): the forward leaves it there, cmf_session_logits downloads on demand */
    if (st == CMF_OK && !m->tp && !m->tp_of && m->be->head_keep)
        st = m->be->buf_alloc(m->be, (size_t)c->vocab_size * sizeof(float), (void **)&s->dlogits);
    if (st != CMF_OK) {
        cmf_session_free(s);
        return st;
    }
    *out = s;
    return CMF_OK;
}

cmf_status cmf_session_new(cmf_model *m, int n_ctx, cmf_session **out) {
    cmf_session_params p = {0};
    p.n_ctx = n_ctx;
    return cmf_session_new_ex(m, &p, out);
}

void cmf_session_free(cmf_session *s) {
    if (!s) return;
    cmf_batch_free(s->own);
    cmf_tp_session_fini(s); /* TP: the rank sessions */
    cmf_dory_state_free(s->dory);
    cmf_dory_probe_free(s->dory_recon);
    o1_free(s->o1, s->m->cfg.n_layers, s->m->cfg.n_kv_heads);
    free(s->kv_off);
    free(s->kv_rows);
    free(s->ffn_runs);
    free(s->runs);
    if (!s->m->dory) s->m->be->kv_free(s->m->be, s); /* Dory sessions have no backend KV cache */
    if (s->dlogits) s->m->be->buf_free(s->m->be, s->dlogits);
    free(s->logits);
    free(s);
}

size_t cmf_session_state_bytes(const cmf_session *s) {
    if (!s) return 0;
    const cmf_config *c = &s->m->cfg;
    size_t n = 0;
    if (s->dory) {
        for (int i = 0; i < s->dory->n_slots; i++)
            n += 2 * (size_t)s->dory->kv[i].rows * s->dory->d->cfg.n_kv_heads * s->dory->d->cfg.head_dim * sizeof(float);
        return n;
    }
    if (s->tp_rank) return cmf_tp_session_state_bytes(s);
    const size_t el = s->k_cache ? sizeof(float) : sizeof(uint16_t); /* f32 on cpu, f16 on cuda */
    for (int l = 0; l < c->n_layers; l++) n += 2 * (size_t)s->kv_rows[l] * c->n_kv_heads * c->head_dim * el;
    if (s->o1)
        for (int l = 0; l < c->n_layers; l++) {
            if (!s->o1->on[l]) continue;
            if (s->o1->qtrace[l]) n += (size_t)s->o1->cap * c->n_heads * c->head_dim * sizeof(float);
            for (int g = 0; g < c->n_kv_heads; g++) n += cmf_o1_state_bytes(s->o1->st[(size_t)l * c->n_kv_heads + g]);
        }
    return n;
}

int cmf_session_o1_layers(const cmf_session *s) {
    if (!s) return 0;
    if (s->dory) return cmf_dory_o1_slots(s->dory); /* Dory: far-field KV slots (one per layer under last_loop) */
    return s->o1 ? s->o1->n_on : 0;
}

void cmf_session_reset(cmf_session *s) {
    if (!s) return;
    s->pos = 0;
    if (s->dory) cmf_dory_state_reset(s->dory);
    if (s->o1) {
        const cmf_config *c = &s->m->cfg;
        for (int i = 0; i < c->n_layers * c->n_kv_heads; i++)
            if (s->o1->st[i]) cmf_o1_reset(s->o1->st[i]);
        s->o1->sealed = 0;
    }
}

/* The KV cache rows [0, n_keep) stay valid (attention at a position only reads rows before it), so forgetting the
 * rest is moving pos back; the next prefill overwrites the rows from n_keep on. */
cmf_status cmf_session_truncate(cmf_session *s, int n_keep) {
    if (!s) return cmf_err(CMF_E_ARG, "session truncate: NULL session");
    if (n_keep < 0 || n_keep > s->pos)
        return cmf_err(CMF_E_ARG, "session truncate: n_keep %d is outside [0, %d] (the positions in the cache)",
                       n_keep, s->pos);
    if (s->dory && n_keep < s->pos)
        return cmf_err(CMF_E_UNSUPPORTED, "session truncate: not supported for Dory sessions (reset instead)");
    if (s->o1 && s->o1->sealed && n_keep < s->pos)
        return cmf_err(CMF_E_UNSUPPORTED, "session truncate: the O(1) far field is sealed and cannot forget positions "
                                          "(reset the session instead)");
    s->pos = n_keep;
    return CMF_OK;
}
int cmf_session_pos(const cmf_session *s) { return s ? s->pos : -1; }
int cmf_session_n_ctx(const cmf_session *s) { return s ? s->n_ctx : -1; }
/* NULL (with a message for cmf_last_error) while the session holds no position: its logits were never computed. */
const float *cmf_session_logits(const cmf_session *s) {
    if (!s) {
        cmf_err(CMF_E_ARG, "cmf_session_logits: NULL session");
        return NULL;
    }
    if (s->pos == 0) {
        cmf_err(CMF_E_ARG, "cmf_session_logits: the session holds no position yet (prefill first)");
        return NULL;
    }
    if (s->logits_dev) { /* the last forward left them on the device: download once (the host copy is a cache) */
        cmf_session *w = (cmf_session *)s;
        cmf_backend *be = s->m->be;
        const size_t bytes = (size_t)s->m->cfg.vocab_size * sizeof(float);
        cmf_status st = be->fetch ? be->fetch(be, w->logits, s->dlogits, bytes)
                                  : be->download(be, w->logits, s->dlogits, bytes);
        if (st != CMF_OK) {
            cmf_err_prefix(st, "cmf_session_logits: ");
            return NULL;
        }
        w->logits_dev = 0;
    }
    return s->logits;
}

/* cmf_session_prefill / _decode; `what` names the call in error messages. */
static cmf_status session_run(cmf_session *s, const int32_t *tokens, int n, float *all_logits, const char *what) {
    if (!s) return cmf_err(CMF_E_ARG, "%s: NULL session", what);
    if (n > 0 && !tokens) return cmf_err(CMF_E_ARG, "%s: NULL tokens", what);
    if (n <= 0) return cmf_err(CMF_E_ARG, "%s: no tokens", what);
    if (n > s->n_ctx - s->pos)
        return cmf_err(CMF_E_ARG, "%s: %d token%s not fit: %d of the context's %d positions are free", what, n,
                       n == 1 ? " does" : "s do", s->n_ctx - s->pos, s->n_ctx);
    const int V = s->m->cfg.vocab_size;
    for (int i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= V)
            return cmf_err(CMF_E_ARG, "%s: token id %d at index %d is outside the vocabulary [0, %d)", what,
                           tokens[i], i, V);
    if (s->dory) {
        cmf_status st;
        int passes = 0;
        if (n == 1 && s->dory_recon) st = cmf_dory_decode_recon(s->dory, tokens[0], s->dory_recon, &passes, NULL);
        else if (n == 1 && s->dory_gate > 0) st = cmf_dory_decode_gated(s->dory, tokens[0], s->dory_gate, &passes);
        else st = cmf_dory_forward(s->dory, tokens, n, s->dory_loops, all_logits);
        if (st != CMF_OK) return st;
        memcpy(s->logits, cmf_dory_logits(s->dory), (size_t)V * sizeof(float));
        s->pos = s->dory->pos;
        return CMF_OK;
    }
    if (!s->own) {
        int nb = s->n_ctx < DEFAULT_N_BATCH ? s->n_ctx : DEFAULT_N_BATCH;
        cmf_status st = cmf_batch_new(s->m, nb, 1, &s->own);
        if (st != CMF_OK) return st;
    }
    cmf_session *seqs[DEFAULT_N_BATCH];
    for (int i = 0; i < s->own->n_batch; i++) seqs[i] = s;
    for (int done = 0, b; done < n; done += b) {
        b = n - done < s->own->n_batch ? n - done : s->own->n_batch;
        if (s->o1 && !s->o1->sealed && s->pos < s->o1->cap && s->pos + b > s->o1->cap) b = s->o1->cap - s->pos;
        cmf_status st = batch_run(s->own, seqs, tokens + done, b, all_logits ? all_logits + (size_t)done * V : NULL);
        if (st != CMF_OK) return st;
    }
    return CMF_OK;
}

cmf_status cmf_session_prefill(cmf_session *s, const int32_t *tokens, int n, float *all_logits) {
    return session_run(s, tokens, n, all_logits, "prefill");
}

cmf_status cmf_session_decode(cmf_session *s, int32_t token) { return session_run(s, &token, 1, NULL, "decode"); }

double cmf_session_gate_one_pass_share(const cmf_session *s, long *n_tokens) {
    if (!s || !s->dory) {
        if (n_tokens) *n_tokens = 0;
        return 0;
    }
    return cmf_dory_gate_one_pass_share(s->dory, n_tokens);
}
