/* skillfile.c — standalone skill files (CMF_FORMAT.md §3.3, feature bit SKILL_FILE; cortiq-cli skill.rs
 * run_skill_export / run_skill_apply): a partial CMF holding a skill's tensors under their base names, bound to
 * one base by the hex of that base's envelope dir_hash. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "skills/skills.h"
#include "util/error.h"

static void warnf(cmf_skill_warn_fn warn, void *ctx, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void warnf(cmf_skill_warn_fn warn, void *ctx, const char *fmt, ...) {
    if (!warn) return;
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    warn(ctx, msg);
}

static const cJSON *arch_of(const cmf_file *f) { return cJSON_GetObjectItemCaseSensitive(f->header, "arch"); }

static const char *arch_name(const cmf_file *f) {
    const cJSON *n = cJSON_GetObjectItemCaseSensitive(arch_of(f), "arch_name");
    return cJSON_IsString(n) ? n->valuestring : "?";
}

static double arch_num(const cmf_file *f, const char *key) {
    const cJSON *n = cJSON_GetObjectItemCaseSensitive(arch_of(f), key);
    return cJSON_IsNumber(n) ? n->valuedouble : -1;
}

static int same_shape(const cmf_tensor *a, const cmf_tensor *b) {
    return a->ndim == b->ndim && memcmp(a->shape, b->shape, sizeof a->shape) == 0;
}

static int same_payload(const cmf_tensor *a, const cmf_tensor *b) {
    return a->dtype == b->dtype && same_shape(a, b) && a->nbytes == b->nbytes && a->hash == b->hash &&
           memcmp(a->data, b->data, (size_t)a->nbytes) == 0;
}

static void shape_str(const cmf_tensor *t, char *buf, size_t cap) {
    size_t k = (size_t)snprintf(buf, cap, "[");
    for (int d = 0; d < t->ndim && k < cap; d++)
        k += (size_t)snprintf(buf + k, cap - k, d ? ", %u" : "%u", t->shape[d]);
    if (k < cap) snprintf(buf + k, cap - k, "]");
}

static cmf_status shape_error(const char *what, const cmf_tensor *t, const cmf_tensor *b) {
    char s1[96], s2[96];
    shape_str(t, s1, sizeof s1);
    shape_str(b, s2, sizeof s2);
    return cmf_err(CMF_E_FORMAT, "%s: tensor \"%.200s\" has shape %s but the base tensor has %s", what, b->name, s1,
                   s2);
}

/* Layer index of "model.layers.<i>." names, or -1. */
static long layer_of(const char *name) {
    if (strncmp(name, "model.layers.", 13) != 0) return -1;
    char *end;
    long v = strtol(name + 13, &end, 10);
    return end != name + 13 && *end == '.' && v >= 0 ? v : -1;
}

static const char *basename_of(const char *p) {
    const char *s = strrchr(p, '/');
    return s ? s + 1 : p;
}

/* Copies key `key` of `src` into `dst` when present and not null. */
static int carry(cJSON *dst, const cJSON *src, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(src, key);
    if (!v || cJSON_IsNull(v)) return 1;
    cJSON *c = cJSON_Duplicate(v, 1);
    return c && cJSON_AddItemToObject(dst, key, c);
}

cmf_status cmf_skill_export(const char *model_path, const char *id, const char *base_path, const char *name,
                            const char *out_path, cmf_skill_warn_fn warn, void *warn_ctx, size_t *n_tensors) {
    if (n_tensors) *n_tensors = 0;
    if (!model_path || !id || !out_path) return cmf_err(CMF_E_ARG, "cmf_skill_export: NULL argument");
    if (!cmf_skill_id_valid(id))
        return cmf_err(CMF_E_ARG, "skill id \"%.64s\" is invalid (use 1-63 characters of [A-Za-z0-9_-], not \"none\")", id);
    cmf_file *f = NULL, *base = NULL;
    cmf_writer *w = NULL;
    cJSON *h = NULL, *rec = NULL;
    long *layers = NULL;
    size_t n_layers = 0, n = 0;
    cmf_status st = cmf_file_open(model_path, &f);
    if (st) return cmf_err_prefix(st, "skill export: ");
    int in_file = cmf_skill_exists(f, id) == CMF_OK;
    if (!in_file) {
        st = cmf_skill_exists(f, id); /* the message (unknown id / shape mismatch) */
        if (st != CMF_E_NOT_FOUND || !base_path) goto done;
    }
    if (base_path && (st = cmf_file_open(base_path, &base))) {
        cmf_err_prefix(st, "skill export: base: ");
        goto done;
    }
    const cmf_file *b = base ? base : f;
    if (strcmp(arch_name(f), arch_name(b)) || arch_num(f, "num_layers") != arch_num(b, "num_layers") ||
        arch_num(f, "hidden_size") != arch_num(b, "hidden_size")) {
        st = cmf_err(CMF_E_ARG,
                     "skill export: the model (%s) and the base (%s) disagree on the architecture "
                     "(arch_name, num_layers, hidden_size)",
                     arch_name(f), arch_name(b));
        goto done;
    }
    layers = calloc(f->n_tensors + 1, sizeof *layers);
    if (!layers || (st = cmf_writer_new(out_path, &w))) {
        if (!layers) st = cmf_err(CMF_E_NOMEM, "skill export: out of memory");
        goto done;
    }
    size_t id_len = strlen(id);
    for (size_t i = 0; i < f->n_tensors; i++) {
        const cmf_tensor *t = &f->tensors[i];
        const char *bn = t->name;
        if (in_file) {
            if (strncmp(bn, "skill.", 6) || strncmp(bn + 6, id, id_len) || bn[6 + id_len] != '.') continue;
            bn += 7 + id_len;
        } else if (!strncmp(bn, "skill.", 6)) {
            continue; /* a specialist cut carries no overlays of other skills */
        }
        const cmf_tensor *bt = cmf_file_find(b, bn);
        if (!bt && in_file) {
            warnf(warn, warn_ctx, "left out %s: the base has no tensor %s", t->name, bn);
            continue;
        }
        if (bt && !same_shape(t, bt)) {
            st = shape_error("skill export", t, bt);
            goto done;
        }
        if (bt && same_payload(t, bt)) continue; /* the base carries it */
        if ((st = cmf_writer_add(w, bn, t->dtype, t->ndim, t->shape, t->data, t->nbytes))) goto done;
        n++;
        long l = layer_of(bn);
        int seen = 0;
        for (size_t k = 0; k < n_layers && !seen; k++) seen = layers[k] == l;
        if (l >= 0 && !seen) layers[n_layers++] = l;
    }
    if (n == 0) {
        st = cmf_err(CMF_E_ARG, "skill export: skill \"%s\" has no tensor that differs from the base", id);
        goto done;
    }
    /* the record (§3.3) */
    const cJSON *old = NULL, *sk = cJSON_GetObjectItemCaseSensitive(f->header, "skills"), *r;
    cJSON_ArrayForEach(r, sk) {
        const cJSON *rid = cJSON_GetObjectItemCaseSensitive(r, "id");
        if (cJSON_IsString(rid) && !strcmp(rid->valuestring, id)) old = r;
    }
    cmf_masks *m = NULL;
    if ((st = cmf_masks_load(f, &m))) goto done;
    char hex[17];
    snprintf(hex, sizeof hex, "%016llx", (unsigned long long)b->env.dir_hash);
    rec = cJSON_CreateObject();
    cJSON *ly = cJSON_CreateArray(), *prov = cJSON_CreateObject();
    for (size_t i = 1; i < n_layers; i++) /* insertion sort: a handful of layers */
        for (size_t j = i; j > 0 && layers[j - 1] > layers[j]; j--) {
            long x = layers[j];
            layers[j] = layers[j - 1], layers[j - 1] = x;
        }
    int ok = rec && ly && prov && cJSON_AddStringToObject(rec, "id", id);
    if (ok && name) ok = cJSON_AddStringToObject(rec, "name", name) != NULL;
    if (ok && !name && old) ok = carry(rec, old, "name");
    for (size_t i = 0; ok && i < n_layers; i++) ok = cJSON_AddItemToArray(ly, cJSON_CreateNumber((double)layers[i]));
    if (ok) ok = cJSON_AddItemToObject(rec, "layers", ly), ly = NULL;
    if (ok && old)
        ok = carry(rec, old, "selection") && carry(rec, old, "input_mask_task") && carry(rec, old, "quality");
    if (ok)
        ok = cJSON_AddStringToObject(rec, "base_dir_hash", hex) &&
             cJSON_AddStringToObject(rec, "base_arch", arch_name(b));
    if (ok && m->n) ok = cJSON_AddStringToObject(rec, "task", m->default_task) != NULL;
    cmf_masks_free(m);
    if (ok)
        ok = cJSON_AddStringToObject(prov, "cut_from", basename_of(model_path)) &&
             cJSON_AddNumberToObject(prov, "tensors", (double)n);
    if (ok) ok = cJSON_AddItemToObject(rec, "provenance", prov), prov = NULL;
    cJSON_Delete(ly);
    cJSON_Delete(prov);
    h = cJSON_Duplicate(f->header, 1);
    cJSON *arr = cJSON_CreateArray();
    if (ok && h) ok = cmf_header_set_tool(h, "cmf skill export");
    if (ok && h && arr) {
        cJSON_AddItemToArray(arr, rec);
        rec = NULL;
        cJSON_DeleteItemFromObjectCaseSensitive(h, "skills");
        ok = cJSON_AddItemToObject(h, "skills", arr);
        arr = NULL;
    }
    cJSON_Delete(arr);
    if (!ok || !h) {
        st = cmf_err(CMF_E_NOMEM, "skill export: out of memory");
        goto done;
    }
    cmf_writer_set_header(w, h);
    h = NULL;
    if ((st = cmf_skills_copy_sections(f, w, 1, 0))) goto done;
    st = cmf_writer_finish(w);
    w = NULL;
    if (st) cmf_err_prefix(st, "skill export: writing %s: ", out_path);
    if (!st && n_tensors) *n_tensors = n;
done:
    cmf_writer_abort(w);
    cJSON_Delete(h);
    cJSON_Delete(rec);
    free(layers);
    cmf_file_close(base);
    cmf_file_close(f);
    return st;
}

cmf_status cmf_skill_apply(const char *base_path, const char *skill_path, const char *out_path, int force,
                           cmf_skill_warn_fn warn, void *warn_ctx, cmf_skill_apply_report *report) {
    if (report) memset(report, 0, sizeof *report);
    if (!base_path || !skill_path || !out_path) return cmf_err(CMF_E_ARG, "cmf_skill_apply: NULL argument");
    cmf_skill_apply_report rep = {0};
    cmf_file *base = NULL, *sf = NULL;
    cmf_writer *w = NULL;
    cJSON *h = NULL;
    cmf_status st = cmf_file_open(base_path, &base);
    if (st) return cmf_err_prefix(st, "skill apply: base: ");
    if ((st = cmf_file_open(skill_path, &sf))) {
        cmf_err_prefix(st, "skill apply: skill file: ");
        goto done;
    }
    const cJSON *rec = NULL, *sk = cJSON_GetObjectItemCaseSensitive(sf->header, "skills"), *r, *want = NULL;
    cJSON_ArrayForEach(r, sk) {
        const cJSON *x = cJSON_GetObjectItemCaseSensitive(r, "base_dir_hash");
        if (!rec && cJSON_IsString(x)) rec = r, want = x;
    }
    if (!rec) {
        st = cmf_err(CMF_E_ARG,
                     "skill apply: %s carries no standalone-skill record (header.skills[].base_dir_hash) "
                     "— not a skill file",
                     skill_path);
        goto done;
    }
    char have[17];
    snprintf(have, sizeof have, "%016llx", (unsigned long long)base->env.dir_hash);
    if (strcasecmp(want->valuestring, have) != 0) {
        const cJSON *ba = cJSON_GetObjectItemCaseSensitive(rec, "base_arch");
        if (!force) {
            /* `cmf skill export` without --base binds the skill to the file it was cut from (provenance.cut_from,
             * §3.3): say how to bind it to this base instead */
            const cJSON *rid = cJSON_GetObjectItemCaseSensitive(rec, "id"),
                        *cut = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(rec, "provenance"),
                                                                "cut_from");
            const char *from = cJSON_IsString(cut) ? cut->valuestring : "MODEL.cmf";
            st = cmf_err(CMF_E_ARG,
                         "skill apply: the skill was cut against a different base (base_dir_hash %.32s, "
                         "this base %s; base_arch %.64s): exported from %.200s, it is bound to the --base given "
                         "then, or to %.200s itself when there was none; re-export it with `cmf skill export "
                         "%.200s --id %.64s --base %.200s -o SKILL.cmf`, or --force overrides",
                         want->valuestring, have, cJSON_IsString(ba) ? ba->valuestring : "?", from, from, from,
                         cJSON_IsString(rid) ? rid->valuestring : "ID", base_path);
            goto done;
        }
        rep.forced = 1;
        warnf(warn, warn_ctx,
              "base directory hash %s does not match the skill's base_dir_hash %.32s: applying anyway "
              "(--force)",
              have, want->valuestring);
    }
    if ((st = cmf_writer_new(out_path, &w))) goto done;
    for (size_t i = 0; i < base->n_tensors; i++) {
        const cmf_tensor *bt = &base->tensors[i], *t = cmf_file_find(sf, bt->name);
        if (t && !same_shape(t, bt)) {
            st = shape_error("skill apply", t, bt);
            goto done;
        }
        if (t) rep.n_replaced++;
        const cmf_tensor *src = t ? t : bt;
        if ((st = cmf_writer_add(w, bt->name, src->dtype, src->ndim, src->shape, src->data, src->nbytes))) goto done;
    }
    for (size_t i = 0; i < sf->n_tensors; i++) {
        if (cmf_file_find(base, sf->tensors[i].name)) continue;
        rep.n_dropped++;
        warnf(warn, warn_ctx, "dropped %s: the base has no tensor of that name", sf->tensors[i].name);
    }
    /* header: the base's, skills = [the record minus base_dir_hash] */
    h = cJSON_Duplicate(base->header, 1);
    cJSON *carried = cJSON_Duplicate(rec, 1), *arr = cJSON_CreateArray();
    int ok = h && carried && arr && cmf_header_set_tool(h, "cmf skill apply");
    if (ok) {
        cJSON_DeleteItemFromObjectCaseSensitive(carried, "base_dir_hash");
        cJSON_AddItemToArray(arr, carried);
        carried = NULL;
        cJSON_DeleteItemFromObjectCaseSensitive(h, "skills");
        ok = cJSON_AddItemToObject(h, "skills", arr);
        arr = NULL;
    }
    cJSON_Delete(carried);
    cJSON_Delete(arr);
    if (!ok) {
        st = cmf_err(CMF_E_NOMEM, "skill apply: out of memory");
        goto done;
    }
    cmf_writer_set_header(w, h);
    h = NULL;
    int skill_masks = sf->masks && sf->env.masks_len;
    if ((st = cmf_skills_copy_sections(skill_masks ? sf : base, w, 1, 0))) goto done;
    if ((st = cmf_skills_copy_sections(base, w, 0, 1))) goto done;
    st = cmf_writer_finish(w);
    w = NULL;
    if (st) cmf_err_prefix(st, "skill apply: writing %s: ", out_path);
done:
    cmf_writer_abort(w);
    cJSON_Delete(h);
    cmf_file_close(sf);
    cmf_file_close(base);
    if (report) *report = rep;
    return st;
}
