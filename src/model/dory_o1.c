/* dory_o1.c — the O(1) far field for Dory sessions (DORY.md §3.2), on top of the generic operator of model/o1.h.
 *
 * What §3.2 states and this file does:
 *   - only full-attention (`*`) sub-layers convert (sliding layers are bounded by their ring anyway);
 *   - one far state per (full layer, KV slot): per_loop recurrent full layers have one per loop index, last_loop and
 *     the input/output blocks one; each state is one cmf_o1 per KV head (GQA group);
 *   - during the exact prefill a query trace is recorded per slot: every qt_stride-th row's post-RoPE, post-norm
 *     (and q-scaled: the q that meets the keys) query of all heads; under last_loop each loop overwrites the row,
 *     so the trace holds the final loop's queries, like the cache;
 *   - the seal happens when the prompt ends (the first single-token call) or once the prompt reaches seal_at rows;
 *     the states are built from the exact K/V cache and the trace;
 *   - last_loop rewind: on loops > 0 of the same rows the far state is restored to where it was before loop 0
 *     pushed them (cmf_o1_snapshot/restore), so each row enters once, with its last loop's K/V.
 * Decisions where §3.2 is silent (INFERRED/UNCERTAIN there): QT_STRIDE was not seen, default 1 here; Q̃ from a
 * strided trace is built by letting each prompt row use the traced query at or before it (the operator's segment
 * means then weight each traced query by the rows it stands for); the exact-rows selection (pick_exact_rows) and the
 * archive/rebuild of long prompts are not implemented. Memory: the exact caches of the chosen slots are cut to
 * min(n_ctx, seal_at) rows at enable time (prefill calls are split at seal_at, rows past the seal are not written
 * there), so with seal_at < n_ctx a session's full-layer memory is bounded by seal_at rows plus the operator states.
 * The Conf gate, which re-runs the output block for a position, is refused with the far field on. */
#include <stdlib.h>
#include <string.h>

#include "model/dory.h"
#include "model/o1.h"
#include "util/error.h"

typedef struct dory_o1_slot {
    int kv_slot;      /* index into the session's kv[] */
    int rewind;       /* a recurrent slot under last_loop: loops > 0 rewind the rows loop 0 pushed */
    int loop;         /* per_loop recurrent slots: the loop index (slots past the session's loop count stay empty) */
    cmf_o1 **g;       /* [n_kv_heads] */
    float *trace;     /* [ceil(min(n_ctx, seal_at) / qt_stride)][n_heads·hd] */
    uint8_t *snap;    /* [n_kv_heads][snap_size] (rewind slots) */
    size_t snap_size;
} dory_o1_slot;

struct cmf_dory_o1 {
    int n;             /* far-field slots */
    dory_o1_slot *slot;
    int *of_kv;        /* [session n_slots]: index into slot[] or -1 */
    int n_kv_heads, qt_stride, seal_at, sealed;
    cmf_status err;    /* first failure inside a forward (reported at the end of the call) */
};

/* Chosen physical layers from the spec: "all"/"deepN"/"off" count full-attention sub-layers only (MLP sub-layers
 * are neither); an explicit list names physical sub-layers, each of which must be full attention. */
static cmf_status choose_layers(const cmf_dory_config *c, const char *spec, uint8_t *on) {
    return cmf_dory_o1_layers(c->pattern, c->n_layers, spec, on);
}

/* Which physical sub-layers a far-field spec converts (see dory.h). */
cmf_status cmf_dory_o1_layers(const char *pattern, int n_layers, const char *spec, uint8_t *on) {
    const int L = n_layers;
    if (L < 1 || !pattern || (int)strlen(pattern) != L || !spec)
        return cmf_err(CMF_E_ARG, "dory o1: layer pattern of %d sub-layers expected", L);
    uint8_t *sl = calloc((size_t)L, 1), *tmp = calloc((size_t)L, 1);
    int *map = malloc((size_t)L * sizeof(int));
    cmf_status st = sl && tmp && map ? CMF_OK : cmf_err(CMF_E_NOMEM, "dory o1: out of memory");
    memset(on, 0, (size_t)L);
    if (st == CMF_OK && (!strcmp(spec, "all") || !strcmp(spec, "off") || !strcmp(spec, "0") || spec[0] == 'd')) {
        int na = 0;
        for (int l = 0; l < L; l++)
            if (pattern[l] != '-') {
                sl[na] = pattern[l] == 'S';
                map[na++] = l;
            }
        if (cmf_o1_parse_layers(spec, na, sl, tmp) < 0) st = CMF_E_ARG;
        for (int a = 0; st == CMF_OK && a < na; a++) on[map[a]] = tmp[a];
    } else if (st == CMF_OK) {
        for (int l = 0; l < L; l++) sl[l] = pattern[l] == 'S';
        if (cmf_o1_parse_layers(spec, L, sl, on) < 0) st = CMF_E_ARG;
        for (int l = 0; st == CMF_OK && l < L; l++)
            if (on[l] && pattern[l] == '-')
                st = cmf_err(CMF_E_ARG, "dory o1: layer %d is an MLP sub-layer (only full attention converts)", l);
    }
    free(sl);
    free(tmp);
    free(map);
    return st;
}

void cmf_dory_o1_free(cmf_dory_o1 *o) {
    if (!o) return;
    for (int i = 0; o->slot && i < o->n; i++) {
        dory_o1_slot *sl = &o->slot[i];
        for (int g = 0; sl->g && g < o->n_kv_heads; g++) cmf_o1_free(sl->g[g]);
        free(sl->g);
        free(sl->trace);
        free(sl->snap);
    }
    free(o->slot);
    free(o->of_kv);
    free(o);
}

cmf_status cmf_dory_o1_enable(cmf_dory_state *s, const char *layers, int m, int window, int sink, int rect,
                              int qt_stride, int seal_at) {
    if (!s || !layers) return cmf_err(CMF_E_ARG, "cmf_dory_o1_enable: NULL argument");
    if (s->pos != 0 || s->o1) return cmf_err(CMF_E_ARG, "dory o1: enable the far field on a fresh session, once");
    if (qt_stride < 0 || seal_at < 0) return cmf_err(CMF_E_ARG, "dory o1: qt_stride and seal_at must be >= 0");
    if (s->ops != cmf_dory_ops_cpu() && strcmp(layers, "off"))
        return cmf_err(CMF_E_UNSUPPORTED, "dory o1: the O(1) far field runs on the cpu backend only (this session is "
                                          "on %s)", s->ops->name);
    const cmf_dory_config *c = &s->d->cfg;
    const int hd = c->head_dim, nk = c->n_kv_heads, group = c->n_heads / c->n_kv_heads;
    const size_t QD = (size_t)c->n_heads * hd, KVD = (size_t)nk * hd;
    uint8_t *on = malloc((size_t)c->n_layers);
    cmf_dory_o1 *o = calloc(1, sizeof *o);
    if (!on || !o) {
        free(on);
        free(o);
        return cmf_err(CMF_E_NOMEM, "dory o1: out of memory");
    }
    o->n_kv_heads = nk;
    o->qt_stride = qt_stride ? qt_stride : 1;
    o->seal_at = seal_at ? seal_at : 32768;
    cmf_status st = choose_layers(c, layers, on);
    int n = 0;
    for (int l = 0; st == CMF_OK && l < c->n_layers; l++)
        if (on[l]) n += l >= c->n_input && l < c->n_input + c->n_recurrent && s->kv_mode == CMF_DORY_KV_PER_LOOP
                           ? s->max_loops
                           : 1;
    if (st == CMF_OK) {
        o->slot = calloc(n ? (size_t)n : 1, sizeof *o->slot);
        o->of_kv = malloc((size_t)s->n_slots * sizeof(int));
        if (!o->slot || !o->of_kv) st = cmf_err(CMF_E_NOMEM, "dory o1: out of memory");
    }
    for (int i = 0; st == CMF_OK && i < s->n_slots; i++) o->of_kv[i] = -1;
    cmf_o1_params p;
    cmf_o1_default_params(&p, group, hd, hd);
    if (m) p.m = m;
    if (window) p.window = window;
    if (sink >= 0) p.sink = sink;
    p.rect = rect ? CMF_O1_RECT_FM : CMF_O1_RECT_AGG;
    /* rows the exact prefill can reach before the seal: the caches and traces of the chosen slots need no more */
    const int exact_rows = o->seal_at < s->n_ctx ? o->seal_at : s->n_ctx;
    const size_t trace_rows = ((size_t)exact_rows + (size_t)o->qt_stride - 1) / (size_t)o->qt_stride;
    for (int l = 0; st == CMF_OK && l < c->n_layers; l++) {
        if (!on[l]) continue;
        const int rec = l >= c->n_input && l < c->n_input + c->n_recurrent;
        const int per = rec && s->kv_mode == CMF_DORY_KV_PER_LOOP ? s->max_loops : 1;
        for (int j = 0; j < per && st == CMF_OK; j++) {
            dory_o1_slot *sl = &o->slot[o->n++];
            sl->kv_slot = s->slot[l] + j;
            sl->rewind = rec && s->kv_mode == CMF_DORY_KV_LAST_LOOP;
            sl->loop = per > 1 ? j : 0;
            o->of_kv[sl->kv_slot] = o->n - 1;
            sl->g = calloc((size_t)nk, sizeof *sl->g);
            sl->trace = malloc(trace_rows * QD * sizeof(float));
            if (!sl->g || !sl->trace) st = cmf_err(CMF_E_NOMEM, "dory o1: out of memory for the query trace");
            for (int g = 0; g < nk && st == CMF_OK; g++) st = cmf_o1_create(&p, &sl->g[g]);
            cmf_dory_kv *kv = &s->kv[sl->kv_slot];
            if (st == CMF_OK && kv->rows > exact_rows) { /* shrink the exact cache to the pre-seal rows */
                float *k = calloc((size_t)exact_rows * KVD, sizeof(float));
                float *v = calloc((size_t)exact_rows * KVD, sizeof(float));
                if (!k || !v) {
                    free(k);
                    free(v);
                    st = cmf_err(CMF_E_NOMEM, "dory o1: out of memory");
                } else {
                    free(kv->k);
                    free(kv->v);
                    kv->k = k;
                    kv->v = v;
                    kv->rows = exact_rows;
                }
            }
            if (st == CMF_OK && sl->rewind) {
                sl->snap_size = cmf_o1_snapshot_size(sl->g[0]);
                sl->snap = malloc(sl->snap_size * (size_t)nk);
                if (!sl->snap) st = cmf_err(CMF_E_NOMEM, "dory o1: out of memory for the rewind buffer");
            }
        }
    }
    free(on);
    if (st != CMF_OK) {
        cmf_dory_o1_free(o);
        return cmf_err_prefix(st, "dory o1 (layers '%s'): ", layers);
    }
    if (o->n == 0) { /* "off", or no full-attention layer chosen: the session stays exact */
        cmf_dory_o1_free(o);
        return CMF_OK;
    }
    s->o1 = o;
    return CMF_OK;
}

void cmf_dory_o1_reset(cmf_dory_o1 *o) {
    if (!o) return;
    for (int i = 0; i < o->n; i++)
        for (int g = 0; g < o->n_kv_heads; g++) cmf_o1_reset(o->slot[i].g[g]);
    o->sealed = 0;
    o->err = CMF_OK;
}

/* Seals every slot over the s->pos prompt rows of the exact caches and the traces. */
static cmf_status seal(cmf_dory_state *s) {
    cmf_dory_o1 *o = s->o1;
    const cmf_dory_config *c = &s->d->cfg;
    const int t = s->pos, hd = c->head_dim, group = c->n_heads / c->n_kv_heads;
    const size_t QD = (size_t)c->n_heads * hd, KVD = (size_t)c->n_kv_heads * hd;
    float *q = NULL;
    if (o->qt_stride > 1 && o->n) {
        q = malloc((size_t)t * QD * sizeof(float));
        if (!q) return cmf_err(CMF_E_NOMEM, "dory o1: out of memory to seal %d rows", t);
    }
    cmf_status st = CMF_OK;
    for (int i = 0; i < o->n && st == CMF_OK; i++) {
        dory_o1_slot *sl = &o->slot[i];
        if (sl->loop >= s->loops_used && s->kv_mode == CMF_DORY_KV_PER_LOOP) continue; /* a loop never run */
        const float *qs = sl->trace;
        if (q) { /* each row takes the traced query at or before it */
            for (int r = 0; r < t; r++)
                memcpy(q + (size_t)r * QD, sl->trace + (size_t)(r / o->qt_stride) * QD, QD * sizeof(float));
            qs = q;
        }
        const cmf_dory_kv *kv = &s->kv[sl->kv_slot];
        for (int g = 0; g < o->n_kv_heads && st == CMF_OK; g++)
            st = cmf_o1_seal(sl->g[g], qs + (size_t)g * group * hd, QD, kv->k + (size_t)g * hd, KVD,
                             kv->v + (size_t)g * hd, KVD, t, NULL, 0);
    }
    free(q);
    if (st == CMF_OK) o->sealed = 1;
    return st;
}

cmf_status cmf_dory_o1_begin(cmf_dory_state *s, int n) {
    cmf_dory_o1 *o = s->o1;
    if (!o) return CMF_OK;
    o->err = CMF_OK;
    if (!o->sealed && s->pos > 0 && (n == 1 || s->pos >= o->seal_at)) return seal(s);
    return CMF_OK;
}

int cmf_dory_o1_clip(const cmf_dory_state *s, int n) {
    const cmf_dory_o1 *o = s->o1;
    if (!o || o->sealed || s->pos >= o->seal_at || s->pos + n <= o->seal_at) return n;
    return o->seal_at - s->pos;
}

cmf_status cmf_dory_o1_end(cmf_dory_state *s) { return s->o1 ? s->o1->err : CMF_OK; }

int cmf_dory_o1_attend(cmf_dory_state *s, int kv_slot, int loop, int n, int pos0) {
    cmf_dory_o1 *o = s->o1;
    if (!o || o->of_kv[kv_slot] < 0) return 0;
    dory_o1_slot *sl = &o->slot[o->of_kv[kv_slot]];
    const cmf_dory_config *c = &s->d->cfg;
    const int hd = c->head_dim, group = c->n_heads / c->n_kv_heads;
    const size_t QD = (size_t)c->n_heads * hd, KVD = (size_t)c->n_kv_heads * hd;
    if (!o->sealed) { /* exact prefill: record the query trace, the caller attends exactly */
        for (int t = 0; t < n; t++) {
            const int p = pos0 + t;
            if (p % o->qt_stride == 0)
                memcpy(sl->trace + (size_t)(p / o->qt_stride) * QD, s->q + (size_t)t * QD, QD * sizeof(float));
        }
        return 0;
    }
    for (int g = 0; g < o->n_kv_heads; g++) {
        cmf_status st = CMF_OK;
        if (sl->rewind && loop == 0) st = cmf_o1_snapshot(sl->g[g], sl->snap + (size_t)g * sl->snap_size, sl->snap_size);
        else if (sl->rewind) st = cmf_o1_restore(sl->g[g], sl->snap + (size_t)g * sl->snap_size, sl->snap_size);
        if (st == CMF_OK)
            st = cmf_o1_step_chunk(sl->g[g], n, s->q + (size_t)g * group * hd, QD, s->k + (size_t)g * hd, KVD,
                                   s->v + (size_t)g * hd, KVD, s->att + (size_t)g * group * hd, QD);
        if (st != CMF_OK && o->err == CMF_OK) o->err = st;
    }
    return 1;
}

int cmf_dory_o1_sealed(const cmf_dory_state *s) { return s->o1 && s->o1->sealed; }

int cmf_dory_o1_slots(const cmf_dory_state *s) { return s->o1 ? s->o1->n : 0; }

const cmf_o1 *cmf_dory_o1_state(const cmf_dory_state *s, int i, int kv_head) {
    if (!s->o1 || i < 0 || i >= s->o1->n || kv_head < 0 || kv_head >= s->o1->n_kv_heads) return NULL;
    return s->o1->slot[i].g[kv_head];
}
