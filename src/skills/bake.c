/* bake.c — `skill add` (CMF_FORMAT.md §3.1–3.2; cortiq-cli skill.rs run_skill_add): graft a donor's tensors
 * onto a backbone as `skill.<id>.<name>` overlays, re-encoded in the backbone tensor's dtype (or --skill-quant),
 * keeping only those that differ from the backbone, and rewrite the whole file through the format writer. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "convert/safetensors.h"
#include "quant/dtype.h"
#include "skills/skills.h"
#include "util/error.h"

static void warnf(const cmf_skill_add_opts *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void warnf(const cmf_skill_add_opts *o, const char *fmt, ...) {
    if (!o->warn) return;
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    o->warn(o->warn_ctx, msg);
}

/* ---- --layers ---------------------------------------------------------------------------------------------- */

static int parse_uint(const char *s, const char *end, uint32_t *v) {
    while (s < end && *s == ' ') s++;
    while (end > s && end[-1] == ' ') end--;
    if (s == end || end - s > 9) return 0;
    uint32_t x = 0;
    for (; s < end; s++) {
        if (*s < '0' || *s > '9') return 0;
        x = x * 10 + (uint32_t)(*s - '0');
    }
    *v = x;
    return 1;
}

static int cmp_u32(const void *a, const void *b) {
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

cmf_status cmf_skill_parse_layers(const char *spec, uint32_t n_layers, uint32_t **out, size_t *n) {
    if (!spec || !out || !n) return cmf_err(CMF_E_ARG, "cmf_skill_parse_layers: NULL argument");
    *out = NULL;
    *n = 0;
    if (n_layers == 0) return cmf_err(CMF_E_ARG, "--layers %.64s: the model has no layers", spec);
    const char *dash = strchr(spec, '-');
    uint32_t a, b;
    size_t cap = n_layers, k = 0;
    uint32_t *v = malloc(cap * sizeof *v);
    if (!v) return cmf_err(CMF_E_NOMEM, "--layers: out of memory");
    if (!strcmp(spec, "all")) {
        for (uint32_t i = 0; i < n_layers; i++) v[k++] = i;
    } else if (dash) {
        if (!parse_uint(spec, dash, &a) || !parse_uint(dash + 1, spec + strlen(spec), &b) || a > b || b >= n_layers) {
            free(v);
            return cmf_err(CMF_E_ARG, "--layers %.64s: expected A-B with 0 <= A <= B < %u", spec, n_layers);
        }
        for (uint32_t i = a; i <= b; i++) v[k++] = i;
    } else {
        const char *p = spec;
        for (;;) {
            const char *c = strchr(p, ',');
            const char *e = c ? c : p + strlen(p);
            if (!parse_uint(p, e, &a) || a >= n_layers) {
                free(v);
                return cmf_err(CMF_E_ARG, "--layers %.64s: \"%.*s\" is not a layer in 0..%u (use all, A-B or i,j,k)",
                               spec, (int)(e - p), p, n_layers - 1);
            }
            if (k < cap) v[k++] = a;
            if (!c) break;
            p = c + 1;
        }
        qsort(v, k, sizeof *v, cmp_u32);
        size_t u = 0;
        for (size_t i = 0; i < k; i++)
            if (u == 0 || v[u - 1] != v[i]) v[u++] = v[i];
        k = u;
    }
    *out = v;
    *n = k;
    return CMF_OK;
}

/* ---- the donor: a CMF file or a safetensors checkpoint ----------------------------------------------------- */

typedef struct donor {
    cmf_file *cmf;
    cmf_safetensors *st;
} donor;

static cmf_status donor_open(const char *path, donor *d) {
    memset(d, 0, sizeof *d);
    size_t n = strlen(path);
    int is_st = cmf_is_dir(path) || (n > 12 && !strcmp(path + n - 12, ".safetensors"));
    cmf_status st = is_st ? cmf_st_open(path, &d->st) : cmf_file_open(path, &d->cmf);
    if (st) return cmf_err_prefix(st, "donor %s: ", path);
    return CMF_OK;
}

static void donor_close(donor *d) {
    cmf_file_close(d->cmf);
    cmf_st_close(d->st);
}

/* Donor tensor for backbone name `name` (HF wrapper prefixes canonicalized as §5.1 does). */
static const cmf_st_tensor *st_find(const cmf_safetensors *st, const char *name) {
    const cmf_st_tensor *t = cmf_st_find(st, name);
    if (t || strncmp(name, "model.", 6) != 0) return t;
    static const char *const wrap[] = {"model.language_model.", "language_model.model.", "language_model."};
    char buf[1024];
    for (size_t i = 0; i < sizeof wrap / sizeof *wrap && !t; i++) {
        if ((size_t)snprintf(buf, sizeof buf, "%s%s", wrap[i], name + 6) < sizeof buf) t = cmf_st_find(st, buf);
    }
    return t;
}

static void shape_str(int ndim, const uint32_t *s32, const uint64_t *s64, char *buf, size_t cap) {
    size_t k = (size_t)snprintf(buf, cap, "[");
    for (int d = 0; d < ndim && k < cap; d++)
        k += (size_t)snprintf(buf + k, cap - k, d ? ", %llu" : "%llu",
                              s32 ? (unsigned long long)s32[d] : (unsigned long long)s64[d]);
    if (k < cap) snprintf(buf + k, cap - k, "]");
}

/* ---- encoding --------------------------------------------------------------------------------------------- */

/* Encodes numel floats as `dtype` in the backbone tensor's shape. *out malloc'd. */
static cmf_status encode(int dtype, const cmf_tensor *b, const float *vals, uint8_t **out, uint64_t *nbytes) {
    *out = NULL;
    int plain = dtype == CMF_DT_F32 || dtype == CMF_DT_F16 || dtype == CMF_DT_BF16;
    if (!plain && b->ndim != 2)
        return cmf_err(CMF_E_UNSUPPORTED, "tensor \"%.200s\": %s needs a 2-D tensor (this one has %u dims)", b->name,
                       cmf_dtype_name(dtype) ? cmf_dtype_name(dtype) : "?", b->ndim);
    if (cmf_dtype_nbytes(dtype, b->ndim, b->shape, nbytes) != 1)
        return cmf_err(CMF_E_UNSUPPORTED, "tensor \"%.200s\": no encoder for dtype %s", b->name,
                       cmf_dtype_name(dtype) ? cmf_dtype_name(dtype) : "?");
    uint64_t numel = cmf_tensor_numel(b), cols = b->ndim ? b->shape[b->ndim - 1] : 1;
    uint64_t rows = cols ? numel / cols : 0;
    *out = malloc(*nbytes ? (size_t)*nbytes : 1);
    if (!*out) return cmf_err(CMF_E_NOMEM, "tensor \"%.200s\": out of memory", b->name);
    cmf_status st = cmf_quantize(dtype, rows, cols, vals, *out);
    if (st) {
        free(*out);
        *out = NULL;
        return cmf_err_prefix(st, "tensor \"%.200s\": ", b->name);
    }
    return CMF_OK;
}

/* ---- the bake --------------------------------------------------------------------------------------------- */

static const char *const FFN_SUFFIX[] = {"mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight"};
static const char *const ATTN_SUFFIX[] = {
    "self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight", "self_attn.o_proj.weight",
    "self_attn.q_proj.bias",   "self_attn.k_proj.bias",   "self_attn.v_proj.bias"};

typedef struct bake {
    const cmf_skill_add_opts *o;
    const cmf_file *f;
    donor d;
    cmf_writer *w;
    cmf_skill_add_report rep;
    uint8_t *stored_layer; /* [n_layers]: 1 when a tensor of that layer was stored */
} bake;

/* Grafts one wanted tensor `name` of layer `layer`. */
static cmf_status graft(bake *k, const char *name, uint32_t layer) {
    const cmf_skill_add_opts *o = k->o;
    const cmf_tensor *b = cmf_file_find(k->f, name);
    if (!b) {
        if (strstr(name, ".bias")) return CMF_OK; /* most models have none */
        k->rep.n_skipped++;
        warnf(o, "skipped %s (not in the backbone)", name);
        return CMF_OK;
    }
    const cmf_tensor *dc = NULL;
    const cmf_st_tensor *ds = NULL;
    char s1[128], s2[128];
    if (k->d.cmf) {
        dc = cmf_file_find(k->d.cmf, name);
        if (dc && (dc->ndim != b->ndim || memcmp(dc->shape, b->shape, sizeof b->shape))) {
            shape_str(dc->ndim, dc->shape, NULL, s1, sizeof s1);
            shape_str(b->ndim, b->shape, NULL, s2, sizeof s2);
            return cmf_err(CMF_E_FORMAT, "%s: donor shape %s != backbone shape %s (a different architecture?)", name,
                           s1, s2);
        }
    } else {
        ds = st_find(k->d.st, name);
        int same = ds && ds->ndim == b->ndim;
        for (int i = 0; same && i < b->ndim; i++) same = ds->shape[i] == b->shape[i];
        if (ds && !same) {
            shape_str(ds->ndim, NULL, ds->shape, s1, sizeof s1);
            shape_str(b->ndim, b->shape, NULL, s2, sizeof s2);
            return cmf_err(CMF_E_FORMAT, "%s: donor shape %s != backbone shape %s (a different architecture?)", name,
                           s1, s2);
        }
    }
    if (!dc && !ds) {
        k->rep.n_skipped++;
        warnf(o, "skipped %s (not in the donor)", name);
        return CMF_OK;
    }
    int target = o->skill_quant >= 0 && b->ndim == 2 ? o->skill_quant : b->dtype;
    /* Fast path: a CMF donor tensor in the backbone's dtype is compared (and stored) byte for byte. */
    if (dc && dc->dtype == b->dtype) {
        if (dc->nbytes == b->nbytes && memcmp(dc->data, b->data, (size_t)b->nbytes) == 0) {
            k->rep.n_unchanged++;
            return CMF_OK;
        }
        if (target == b->dtype) goto store_raw;
    }
    uint64_t numel = cmf_tensor_numel(b);
    if (numel > ((uint64_t)1 << 40) / sizeof(float))
        return cmf_err(CMF_E_UNSUPPORTED, "%s: %llu elements is too large", name, (unsigned long long)numel);
    float *vals = malloc((size_t)(numel ? numel : 1) * sizeof *vals);
    if (!vals) return cmf_err(CMF_E_NOMEM, "%s: out of memory", name);
    cmf_status st =
        dc ? cmf_dequant(dc->dtype, dc->ndim, dc->shape, dc->data, dc->nbytes, vals) : cmf_st_to_f32(ds, vals);
    if (st) {
        free(vals);
        return cmf_err_prefix(st, "donor tensor %s: ", name);
    }
    /* differs? = its encoding in the backbone's dtype is not the backbone payload; without an encoder for the
     * backbone's dtype, the decoded values are compared instead */
    uint8_t *enc = NULL;
    uint64_t enc_n = 0;
    int differs;
    st = encode(b->dtype, b, vals, &enc, &enc_n);
    if (st == CMF_OK) {
        differs = enc_n != b->nbytes || memcmp(enc, b->data, (size_t)enc_n) != 0;
    } else if (st == CMF_E_UNSUPPORTED && target != b->dtype) {
        float *bv = malloc((size_t)(numel ? numel : 1) * sizeof *bv);
        if (!bv) {
            free(vals);
            return cmf_err(CMF_E_NOMEM, "%s: out of memory", name);
        }
        st = cmf_dequant(b->dtype, b->ndim, b->shape, b->data, b->nbytes, bv);
        differs = st ? 1 : memcmp(bv, vals, (size_t)numel * sizeof *bv) != 0;
        free(bv);
        if (st) {
            free(vals);
            return cmf_err_prefix(st, "backbone tensor %s: ", name);
        }
    } else {
        free(vals);
        if (st != CMF_E_UNSUPPORTED) return st;
        return cmf_err_prefix(st, "backbone dtype %s cannot be re-encoded (use --skill-quant): ",
                              cmf_dtype_name(b->dtype) ? cmf_dtype_name(b->dtype) : "?");
    }
    if (!differs) {
        free(vals);
        free(enc);
        k->rep.n_unchanged++;
        return CMF_OK;
    }
    if (target != b->dtype) {
        free(enc);
        enc = NULL;
        st = encode(target, b, vals, &enc, &enc_n);
    }
    free(vals);
    if (st) return st;
    char sname[1200];
    if ((size_t)snprintf(sname, sizeof sname, "skill.%s.%s", o->id, name) >= sizeof sname) {
        free(enc);
        return cmf_err(CMF_E_ARG, "%s: skill tensor name is too long", name);
    }
    st = cmf_writer_add(k->w, sname, target, b->ndim, b->shape, enc, enc_n);
    free(enc);
    if (st) return st;
    k->rep.n_stored++;
    k->rep.bytes += enc_n;
    k->stored_layer[layer] = 1;
    return CMF_OK;
store_raw:;
    char rname[1200];
    if ((size_t)snprintf(rname, sizeof rname, "skill.%s.%s", o->id, name) >= sizeof rname)
        return cmf_err(CMF_E_ARG, "%s: skill tensor name is too long", name);
    st = cmf_writer_add(k->w, rname, dc->dtype, dc->ndim, dc->shape, dc->data, dc->nbytes);
    if (st) return st;
    k->rep.n_stored++;
    k->rep.bytes += dc->nbytes;
    k->stored_layer[layer] = 1;
    return CMF_OK;
}

/* The header of the output: the model's, with the registry record of `id` replaced. */
static cmf_status make_header(bake *k, uint32_t n_layers, cJSON **out) {
    cJSON *h = cJSON_Duplicate(k->f->header, 1);
    if (!h) return cmf_err(CMF_E_NOMEM, "skill add: out of memory");
    cJSON *sk = cJSON_GetObjectItemCaseSensitive(h, "skills");
    if (!cJSON_IsArray(sk)) {
        cJSON_DeleteItemFromObjectCaseSensitive(h, "skills");
        sk = cJSON_AddArrayToObject(h, "skills");
    }
    for (int i = cJSON_GetArraySize(sk) - 1; sk && i >= 0; i--) {
        const cJSON *rid = cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(sk, i), "id");
        if (cJSON_IsString(rid) && !strcmp(rid->valuestring, k->o->id)) cJSON_DeleteItemFromArray(sk, i);
    }
    cJSON *rec = cJSON_CreateObject(), *layers = cJSON_CreateArray();
    int ok = sk && rec && layers && cJSON_AddStringToObject(rec, "id", k->o->id);
    if (ok && k->o->name) ok = cJSON_AddStringToObject(rec, "name", k->o->name) != NULL;
    for (uint32_t l = 0; ok && l < n_layers; l++)
        if (k->stored_layer[l]) ok = cJSON_AddItemToArray(layers, cJSON_CreateNumber(l));
    if (ok) {
        cJSON_AddItemToObject(rec, "layers", layers);
        layers = NULL;
        ok = cJSON_AddNullToObject(rec, "quality") != NULL;
    }
    if (ok) ok = cmf_header_set_tool(h, "cmf skill add");
    if (ok) {
        cJSON_AddItemToArray(sk, rec);
        rec = NULL;
    }
    cJSON_Delete(layers);
    cJSON_Delete(rec);
    if (!ok) {
        cJSON_Delete(h);
        return cmf_err(CMF_E_NOMEM, "skill add: out of memory");
    }
    *out = h;
    return CMF_OK;
}

cmf_status cmf_skills_copy_sections(const cmf_file *f, cmf_writer *w, int masks, int vocab) {
    cmf_status st;
    if (masks && f->masks && f->env.masks_len) {
        cmf_masks *m = NULL;
        if ((st = cmf_masks_load(f, &m))) return st;
        int loop = 0;
        for (size_t i = 0; i < m->n; i++) loop |= m->masks[i].loop_layout;
        cmf_masks_free(m);
        if ((st = cmf_writer_set_masks(w, f->masks, (size_t)f->env.masks_len, loop))) return st;
    }
    if (vocab && f->vocab && f->env.vocab_len) {
        if ((st = cmf_writer_set_vocab(w, f->vocab, (size_t)f->env.vocab_len))) return st;
    }
    return CMF_OK;
}

static uint32_t arch_layers(const cmf_file *f) {
    const cJSON *nl =
        cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(f->header, "arch"), "num_layers");
    return cJSON_IsNumber(nl) && nl->valuedouble >= 0 && nl->valuedouble < 1e6 ? (uint32_t)nl->valuedouble : 0;
}

cmf_status cmf_skill_add(const char *model_path, const char *donor_path, const char *out_path,
                         const cmf_skill_add_opts *o, cmf_skill_add_report *report) {
    if (report) memset(report, 0, sizeof *report);
    if (!model_path || !donor_path || !out_path || !o) return cmf_err(CMF_E_ARG, "cmf_skill_add: NULL argument");
    if (!cmf_skill_id_valid(o->id))
        return cmf_err(CMF_E_ARG, "skill id \"%.64s\" is invalid (use 1-63 characters of [A-Za-z0-9_-], not \"none\")",
                       o->id ? o->id : "");
    if (o->skill_quant >= CMF_DT_COUNT)
        return cmf_err(CMF_E_ARG, "skill add: unknown --skill-quant dtype %d", o->skill_quant);
    int fam = o->families ? o->families : CMF_SKILL_ALL;
    if (fam & ~CMF_SKILL_ALL) return cmf_err(CMF_E_ARG, "skill add: bad --tensors family %d", fam);

    bake k = {.o = o};
    cmf_file *f = NULL;
    uint32_t *layers = NULL;
    size_t n_layers = 0;
    cmf_status st = cmf_file_open(model_path, &f);
    if (st) return cmf_err_prefix(st, "skill add: ");
    k.f = f;
    uint32_t L = arch_layers(f);
    if ((st = cmf_skill_parse_layers(o->layers ? o->layers : "all", L, &layers, &n_layers))) goto done;
    if ((st = donor_open(donor_path, &k.d))) goto done;
    k.stored_layer = calloc(L ? L : 1, 1);
    if (!k.stored_layer) {
        st = cmf_err(CMF_E_NOMEM, "skill add: out of memory");
        goto done;
    }
    if ((st = cmf_writer_new(out_path, &k.w))) goto done;
    /* every tensor except the earlier overlays of this id, byte for byte */
    size_t id_len = strlen(o->id);
    for (size_t i = 0; i < f->n_tensors; i++) {
        const cmf_tensor *t = &f->tensors[i];
        if (!strncmp(t->name, "skill.", 6) && !strncmp(t->name + 6, o->id, id_len) && t->name[6 + id_len] == '.') {
            k.rep.n_replaced++;
            continue;
        }
        if ((st = cmf_writer_add(k.w, t->name, t->dtype, t->ndim, t->shape, t->data, t->nbytes))) goto done;
    }
    for (size_t li = 0; li < n_layers; li++) {
        char name[256];
        if (fam & CMF_SKILL_FFN)
            for (size_t s = 0; s < sizeof FFN_SUFFIX / sizeof *FFN_SUFFIX; s++) {
                snprintf(name, sizeof name, "model.layers.%u.%s", layers[li], FFN_SUFFIX[s]);
                if ((st = graft(&k, name, layers[li]))) goto done;
            }
        if (fam & CMF_SKILL_ATTN)
            for (size_t s = 0; s < sizeof ATTN_SUFFIX / sizeof *ATTN_SUFFIX; s++) {
                snprintf(name, sizeof name, "model.layers.%u.%s", layers[li], ATTN_SUFFIX[s]);
                if ((st = graft(&k, name, layers[li]))) goto done;
            }
    }
    if (k.rep.n_stored == 0) {
        st = cmf_err(CMF_E_ARG,
                     "skill add: no donor tensor differs from the backbone (%zu equal, %zu missing) — "
                     "wrong --from, --layers or --tensors?",
                     k.rep.n_unchanged, k.rep.n_skipped);
        goto done;
    }
    cJSON *h = NULL;
    if ((st = make_header(&k, L, &h))) goto done;
    cmf_writer_set_header(k.w, h);
    if ((st = cmf_skills_copy_sections(f, k.w, 1, 1))) goto done;
    st = cmf_writer_finish(k.w);
    k.w = NULL;
    if (st) cmf_err_prefix(st, "skill add: writing %s: ", out_path);
done:
    cmf_writer_abort(k.w);
    donor_close(&k.d);
    free(k.stored_layer);
    free(layers);
    cmf_file_close(f);
    if (report) *report = k.rep;
    return st;
}
