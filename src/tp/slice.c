/* slice.c — the tensor-parallel split of a config and of a backbone weight set (tp.h): per-rank sizes, row slices
 * (views, or copies for device ranks and for cpu row slices off the repacked copy's row groups) and column slices (copies in the tensor's own dtype, CMF_FORMAT.md §2 layouts,
 * cut only at whole quantization blocks). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/kern.h"
#include "quant/dtype.h"
#include "tp/tp.h"
#include "util/error.h"

cmf_status cmf_tp_rank_config(const cmf_config *c, int n, int r, int v0, int v1, cmf_config *out, int *q0,
                              int *kv0) {
    const int H = c->n_heads, KV = c->n_kv_heads, F = c->intermediate_size;
    if (H % n)
        return cmf_err(CMF_E_UNSUPPORTED, "tp: n_heads %d is not divisible by the %d ranks", H, n);
    if (KV % n && n % KV)
        return cmf_err(CMF_E_UNSUPPORTED, "tp: n_kv_heads %d and the %d ranks: one must divide the other", KV, n);
    if (F % n)
        return cmf_err(CMF_E_UNSUPPORTED, "tp: intermediate_size %d is not divisible by the %d ranks", F, n);
    if (v1 <= v0) return cmf_err(CMF_E_UNSUPPORTED, "tp: vocab_size %d is smaller than the %d ranks", c->vocab_size, n);
    *out = *c;
    out->n_heads = H / n;
    *q0 = r * (H / n);
    if (KV % n == 0) {
        out->n_kv_heads = KV / n;
        *kv0 = r * (KV / n);
    } else { /* more ranks than KV heads: replicate (vLLM), rank r keeps kv head r*KV/n */
        out->n_kv_heads = 1;
        *kv0 = r * KV / n;
    }
    out->intermediate_size = F / n;
    out->vocab_size = v1 - v0;
    return CMF_OK;
}

/* Records copy p of slice `key` in tp->owned (freed by cmf_tp_free); p is freed on failure. */
static cmf_status keep(cmf_tp *tp, uint8_t *p, const struct cmf_tp_slice_key *key) {
    if (tp->n_owned == tp->cap_owned) {
        size_t cap = tp->cap_owned ? 2 * tp->cap_owned : 64;
        uint8_t **o = realloc(tp->owned, cap * sizeof *o);
        if (o) tp->owned = o;
        struct cmf_tp_slice_key *k = o ? realloc(tp->owned_key, cap * sizeof *k) : NULL;
        if (!k) {
            free(p);
            return cmf_err(CMF_E_NOMEM, "tp: out of memory");
        }
        tp->owned_key = k;
        tp->cap_owned = cap;
    }
    tp->owned_key[tp->n_owned] = *key;
    tp->owned[tp->n_owned++] = p;
    return CMF_OK;
}

/* An earlier copy of slice `key`, or NULL. */
static uint8_t *kept(const cmf_tp *tp, const struct cmf_tp_slice_key *key) {
    for (size_t i = 0; i < tp->n_owned; i++) {
        const struct cmf_tp_slice_key *k = &tp->owned_key[i];
        if (k->src == key->src && k->r0 == key->r0 && k->nr == key->nr && k->c0 == key->c0 && k->nc == key->nc)
            return tp->owned[i];
    }
    return NULL;
}

/* Copies rows [r0, r0+nr) x columns [c0, c0+nc) of view w into a new payload of w's dtype (a whole tensor of
 * shape [nr, nc]): f32/f16/bf16 row-major; q8_row (§2.2) the int8 block then the row scales; q8_2f (§2.3) also
 * the column scales of the slice; q4_block / q4_tiled (§2.4–2.5) whole 32-value groups (cols, c0 and nc multiples
 * of 32). */
static cmf_status copy_slice(cmf_tp *tp, const cmf_weight *w, int64_t r0, int64_t nr, int64_t c0, int64_t nc,
                             const char *name, cmf_weight *out) {
    const int dt = w->dtype;
    const char *dn = cmf_dtype_name(dt) ? cmf_dtype_name(dt) : "?";
    const int64_t C = w->cols, FR = w->full_rows, R0 = w->row0 + r0;
    size_t bytes = 0;
    const int eb = dt == CMF_DT_F32 ? 4 : dt == CMF_DT_F16 || dt == CMF_DT_BF16 ? 2 : 0;
    if (eb) bytes = (size_t)nr * nc * eb;
    else if (dt == CMF_DT_Q8_ROW) bytes = (size_t)nr * nc + 2 * (size_t)nr;
    else if (dt == CMF_DT_Q8_2F) bytes = (size_t)nr * nc + 2 * (size_t)nr + 2 * (size_t)nc;
    else if (dt == CMF_DT_Q4_BLOCK || dt == CMF_DT_Q4_TILED) {
        if (C % 32 || c0 % 32 || nc % 32)
            return cmf_err(CMF_E_UNSUPPORTED,
                           "tp: tensor %s (%s, %lld columns): the slice of columns %lld..%lld for %d ranks cuts its "
                           "32-value blocks",
                           name, dn, (long long)C, (long long)c0, (long long)(c0 + nc), tp->n);
        bytes = (size_t)nr * (nc / 32) * 18;
    } else {
        return cmf_err(CMF_E_UNSUPPORTED, "tp: tensor %s: slicing dtype %s for %d ranks is not implemented", name, dn,
                       tp->n);
    }
    out->dtype = dt;
    out->rows = nr;
    out->cols = nc;
    out->full_rows = nr;
    out->row0 = 0;
    const struct cmf_tp_slice_key key = {w->data, R0, nr, c0, nc};
    if ((out->data = kept(tp, &key))) return CMF_OK; /* a tensor aliasing an already sliced payload */
    uint8_t *p = malloc(bytes ? bytes : 1);
    if (!p) return cmf_err(CMF_E_NOMEM, "tp: tensor %s: cannot allocate its %zu-byte slice", name, bytes);
    const uint8_t *d = w->data;
    if (eb) {
        for (int64_t i = 0; i < nr; i++)
            memcpy(p + (size_t)i * nc * eb, d + ((size_t)(R0 + i) * C + c0) * eb, (size_t)nc * eb);
    } else if (dt == CMF_DT_Q8_ROW || dt == CMF_DT_Q8_2F) {
        for (int64_t i = 0; i < nr; i++) memcpy(p + (size_t)i * nc, d + (size_t)(R0 + i) * C + c0, (size_t)nc);
        memcpy(p + (size_t)nr * nc, d + (size_t)FR * C + 2 * (size_t)R0, 2 * (size_t)nr); /* row scales */
        if (dt == CMF_DT_Q8_2F) /* column scales of the slice */
            memcpy(p + (size_t)nr * nc + 2 * (size_t)nr, d + (size_t)FR * C + 2 * (size_t)FR + 2 * (size_t)c0,
                   2 * (size_t)nc);
    } else {
        const int64_t gpr = C / 32, G = FR * gpr, ngo = nr * (nc / 32);
        for (int64_t i = 0; i < nr; i++)
            for (int64_t j = 0; j < nc / 32; j++) {
                const int64_t g = (R0 + i) * gpr + c0 / 32 + j, go = i * (nc / 32) + j;
                if (dt == CMF_DT_Q4_TILED) {
                    memcpy(p + (size_t)go * 18, d + (size_t)g * 18, 18);
                } else {
                    memcpy(p + (size_t)go * 16, d + (size_t)g * 16, 16);
                    memcpy(p + (size_t)ngo * 16 + 2 * (size_t)go, d + (size_t)G * 16 + 2 * (size_t)g, 2);
                }
            }
    }
    cmf_status st = keep(tp, p, &key);
    if (st != CMF_OK) return st;
    out->data = p;
    return CMF_OK;
}

/* Rows [r0, r0+nr) of w: a view (copy 0), a copy (1, device ranks), or (CMF_TP_COPY_UNALIGNED, cpu ranks) a view
 * when the rows start on a row group of the cpu's repacked copy (KERN_RP_R = 16 stored rows: such a view runs the
 * repacked kernels of the whole tensor's copy, kern.h cmf_rp_of), else a copy of a dtype the cpu repacks, which
 * load_weights then repacks as a tensor of its own; any other view stays a view (read from the mapping). */
static cmf_status rows_of(cmf_tp *tp, const cmf_weight *w, int64_t r0, int64_t nr, int copy, const char *name,
                          cmf_weight *out) {
    const int rp_dtype = w->dtype == CMF_DT_Q8_ROW || w->dtype == CMF_DT_Q8_2F || w->dtype == CMF_DT_Q4_BLOCK ||
                         w->dtype == CMF_DT_Q4_TILED;
    if (copy == CMF_TP_COPY_UNALIGNED) copy = (w->row0 + r0) % KERN_RP_R != 0 && rp_dtype;
    if (!copy) {
        *out = cmf_weight_rows(w, r0, nr);
        return CMF_OK;
    }
    return copy_slice(tp, w, r0, nr, 0, w->cols, name, out);
}

cmf_status cmf_tp_slice_weights(cmf_tp *tp, int r, int copy_rows, cmf_weights *out) {
    const cmf_model *m = tp->front;
    const cmf_weights *W = &m->base;
    const cmf_config *c = &m->cfg, *rc = &tp->rank[r]->cfg;
    const int HD = c->head_dim, n = tp->n;
    int q0 = 0, kv0 = 0;
    cmf_config tmp;
    cmf_status st = cmf_tp_rank_config(c, n, r, tp->v0[r], tp->v0[r + 1], &tmp, &q0, &kv0);
    if (st != CMF_OK) return st;
    memset(out, 0, sizeof *out);
    out->layers = calloc((size_t)c->n_layers, sizeof *out->layers);
    if (!out->layers) return cmf_err(CMF_E_NOMEM, "tp: out of memory");
    out->small = W->small; /* norms and biases: shared (bias slices point into it) */
    out->n_small = W->n_small;
    out->final_norm = W->final_norm;
    out->embed = W->embed; /* replicated */
    const int64_t QD = (int64_t)rc->n_heads * HD, KVD = (int64_t)rc->n_kv_heads * HD, F = rc->intermediate_size;
    const int64_t qoff = (int64_t)q0 * HD, kvoff = (int64_t)kv0 * HD, foff = (int64_t)r * F;
    char name[96];
#define TRYS(x)                                                                                                  \
    do {                                                                                                         \
        if ((st = (x)) != CMF_OK) return st;                                                                     \
    } while (0)
    snprintf(name, sizeof name, "lm_head");
    TRYS(rows_of(tp, &W->lm_head, tp->v0[r], rc->vocab_size, copy_rows, name, &out->lm_head));
    for (int l = 0; l < c->n_layers; l++) {
        const cmf_layer *L = &W->layers[l];
        cmf_layer *O = &out->layers[l];
        *O = *L; /* norms (replicated), then the sliced matrices and biases */
#define NM(s) (snprintf(name, sizeof name, "model.layers.%d.%s", l, s), name)
        TRYS(rows_of(tp, &L->wq, qoff, QD, copy_rows, NM("self_attn.q_proj.weight"), &O->wq));
        TRYS(rows_of(tp, &L->wk, kvoff, KVD, copy_rows, NM("self_attn.k_proj.weight"), &O->wk));
        TRYS(rows_of(tp, &L->wv, kvoff, KVD, copy_rows, NM("self_attn.v_proj.weight"), &O->wv));
        O->bq = L->bq ? L->bq + qoff : NULL;
        O->bk = L->bk ? L->bk + kvoff : NULL;
        O->bv = L->bv ? L->bv + kvoff : NULL;
        TRYS(copy_slice(tp, &L->wo, 0, L->wo.rows, qoff, QD, NM("self_attn.o_proj.weight"), &O->wo));
        TRYS(rows_of(tp, &L->w_gate, foff, F, copy_rows, NM("mlp.gate_proj.weight"), &O->w_gate));
        TRYS(rows_of(tp, &L->w_up, foff, F, copy_rows, NM("mlp.up_proj.weight"), &O->w_up));
        TRYS(copy_slice(tp, &L->w_down, 0, L->w_down.rows, foff, F, NM("mlp.down_proj.weight"), &O->w_down));
#undef NM
    }
#undef TRYS
    return CMF_OK;
}
