/* resolve.c — skill overlays (CMF_FORMAT.md §3.1): which tensor a forward pass reads while a skill is active,
 * whether a skill id exists, and the registry listing behind `cmf skill list` (§3.2). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "skills/skills.h"
#include "util/error.h"

#define SKILL_PREFIX "skill."

int cmf_skill_id_valid(const char *id) {
    if (!id || !*id || !strcmp(id, "none")) return 0; /* "none" selects the backbone at run time */
    size_t n = 0;
    for (const char *p = id; *p; p++, n++) {
        char c = *p;
        int ok = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
        if (!ok || n >= 63) return 0;
    }
    return 1;
}

/* The header.skills record with this id, or NULL. */
static const cJSON *find_record(const cmf_file *f, const char *id) {
    const cJSON *sk = cJSON_GetObjectItemCaseSensitive(f->header, "skills"), *r;
    cJSON_ArrayForEach(r, sk) {
        const cJSON *rid = cJSON_GetObjectItemCaseSensitive(r, "id");
        if (cJSON_IsString(rid) && strcmp(rid->valuestring, id) == 0) return r;
    }
    return NULL;
}

/* If tensor name `name` is an overlay of skill `id` ("skill.<id>.<N>"), returns N, else NULL. */
static const char *overlay_base(const char *name, const char *id, size_t id_len) {
    if (strncmp(name, SKILL_PREFIX, sizeof SKILL_PREFIX - 1) != 0) return NULL;
    name += sizeof SKILL_PREFIX - 1;
    if (strncmp(name, id, id_len) != 0 || name[id_len] != '.') return NULL;
    return name + id_len + 1;
}

static void shape_str(const cmf_tensor *t, char *buf, size_t cap) {
    size_t k = (size_t)snprintf(buf, cap, "[");
    for (int d = 0; d < t->ndim && k < cap; d++)
        k += (size_t)snprintf(buf + k, cap - k, d ? ", %u" : "%u", t->shape[d]);
    if (k < cap) snprintf(buf + k, cap - k, "]");
}

cmf_status cmf_skill_exists(const cmf_file *f, const char *id) {
    if (!f || !id) return cmf_err(CMF_E_ARG, "cmf_skill_exists: NULL argument");
    if (!cmf_skill_id_valid(id))
        return cmf_err(CMF_E_ARG, "skill id \"%.64s\" is invalid (use 1-63 characters of [A-Za-z0-9_-], not \"none\")",
                       id);
    size_t id_len = strlen(id);
    int found = find_record(f, id) != NULL;
    for (size_t i = 0; i < f->n_tensors; i++) {
        const char *base = overlay_base(f->tensors[i].name, id, id_len);
        if (!base) continue;
        found = 1;
        const cmf_tensor *b = cmf_file_find(f, base), *t = &f->tensors[i];
        if (!b) continue; /* never read: presence is decided on the backbone name */
        if (b->ndim != t->ndim || memcmp(b->shape, t->shape, sizeof t->shape) != 0) {
            char s1[96], s2[96];
            shape_str(t, s1, sizeof s1);
            shape_str(b, s2, sizeof s2);
            return cmf_err(CMF_E_FORMAT, "skill \"%s\": tensor \"%.200s\" has shape %s but the backbone tensor has %s",
                           id, t->name, s1, s2);
        }
    }
    if (found) return CMF_OK;
    /* list the known ids in the message */
    char known[512] = "";
    size_t k = 0;
    cmf_skill_info *list = NULL;
    size_t n = 0;
    if (cmf_skills_list(f, &list, &n) == CMF_OK) {
        for (size_t i = 0; i < n && k < sizeof known; i++)
            k += (size_t)snprintf(known + k, sizeof known - k, "%s%s", i ? ", " : "", list[i].id);
        cmf_skills_free(list, n);
    }
    return cmf_err(CMF_E_NOT_FOUND, "unknown skill \"%s\" (the file has %s%s)", id, n ? "skills: " : "no skills",
                   known);
}

const cmf_tensor *cmf_skill_resolve(const cmf_file *f, const char *skill_id, const char *name) {
    if (!f || !name) return NULL;
    const cmf_tensor *base = cmf_file_find(f, name);
    if (!base || !skill_id || !*skill_id) return base;
    size_t need = sizeof SKILL_PREFIX + strlen(skill_id) + 1 + strlen(name);
    char stack[512], *buf = need <= sizeof stack ? stack : malloc(need);
    if (!buf) return NULL;
    snprintf(buf, need, SKILL_PREFIX "%s.%s", skill_id, name);
    const cmf_tensor *over = cmf_file_find(f, buf);
    if (buf != stack) free(buf);
    return over ? over : base;
}

void cmf_skills_free(cmf_skill_info *list, size_t n) {
    if (!list) return;
    for (size_t i = 0; i < n; i++) {
        free(list[i].layers);
        free(list[i].id_storage);
    }
    free(list);
}

static const char *opt_str(const cJSON *obj, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* Fills tensor count and bytes of skill `id`. */
static void count_tensors(const cmf_file *f, cmf_skill_info *s) {
    size_t id_len = strlen(s->id);
    for (size_t i = 0; i < f->n_tensors; i++) {
        if (!overlay_base(f->tensors[i].name, s->id, id_len)) continue;
        s->n_tensors++;
        s->bytes += f->tensors[i].nbytes;
    }
}

static cmf_status read_layers(const cJSON *rec, int idx, cmf_skill_info *s) {
    const cJSON *ly = cJSON_GetObjectItemCaseSensitive(rec, "layers"), *e;
    if (!ly || cJSON_IsNull(ly)) return CMF_OK;
    if (!cJSON_IsArray(ly))
        return cmf_err(CMF_E_FORMAT, "header.skills[%d] (\"%s\"): `layers` is not an array", idx, s->id);
    int n = cJSON_GetArraySize(ly);
    if (n == 0) return CMF_OK;
    s->layers = malloc((size_t)n * sizeof *s->layers);
    if (!s->layers) return cmf_err(CMF_E_NOMEM, "cmf_skills_list: out of memory");
    cJSON_ArrayForEach(e, ly) {
        double d = cJSON_IsNumber(e) ? e->valuedouble : -1;
        if (!(d >= 0 && d <= 4294967295.0 && d == floor(d)))
            return cmf_err(CMF_E_FORMAT, "header.skills[%d] (\"%s\"): layers[%zu] is not an unsigned integer", idx,
                           s->id, s->n_layers);
        s->layers[s->n_layers++] = (uint32_t)d;
    }
    return CMF_OK;
}

cmf_status cmf_skills_list(const cmf_file *f, cmf_skill_info **out, size_t *n) {
    if (!f || !out || !n) return cmf_err(CMF_E_ARG, "cmf_skills_list: NULL argument");
    *out = NULL;
    *n = 0;
    const cJSON *sk = cJSON_GetObjectItemCaseSensitive(f->header, "skills"), *r;
    size_t cap = (size_t)(cJSON_IsArray(sk) ? cJSON_GetArraySize(sk) : 0) + 8, cnt = 0;
    cmf_skill_info *list = calloc(cap, sizeof *list);
    if (!list) return cmf_err(CMF_E_NOMEM, "cmf_skills_list: out of memory");
    cmf_status st = CMF_OK;
    int idx = 0;
    cJSON_ArrayForEach(r, sk) {
        const char *id = opt_str(r, "id");
        if (!id) continue; /* cmf_header_check guarantees an id; be safe anyway */
        cmf_skill_info *s = &list[cnt++];
        s->id = id;
        s->name = opt_str(r, "name");
        s->registered = 1;
        s->routable = cJSON_IsObject(cJSON_GetObjectItemCaseSensitive(r, "selection"));
        const cJSON *q = cJSON_GetObjectItemCaseSensitive(r, "quality");
        s->quality = q && !cJSON_IsNull(q) ? q : NULL;
        s->input_mask_task = opt_str(r, "input_mask_task");
        s->base_dir_hash = opt_str(r, "base_dir_hash");
        if (s->base_dir_hash) { /* a standalone skill file: its tensors carry the base names (§3.3) */
            for (size_t i = 0; i < f->n_tensors; i++) s->n_tensors++, s->bytes += f->tensors[i].nbytes;
        } else {
            count_tensors(f, s);
        }
        if ((st = read_layers(r, idx, s))) goto fail;
        idx++;
    }
    /* ids known only from tensor names */
    for (size_t i = 0; i < f->n_tensors; i++) {
        const char *nm = f->tensors[i].name;
        if (strncmp(nm, SKILL_PREFIX, sizeof SKILL_PREFIX - 1) != 0) continue;
        const char *id = nm + sizeof SKILL_PREFIX - 1, *dot = strchr(id, '.');
        if (!dot || dot == id) continue;
        size_t len = (size_t)(dot - id);
        int seen = 0;
        for (size_t k = 0; k < cnt && !seen; k++) seen = strlen(list[k].id) == len && !memcmp(list[k].id, id, len);
        if (seen) continue;
        if (cnt == cap) {
            cmf_skill_info *nl = realloc(list, 2 * cap * sizeof *nl);
            if (!nl) {
                st = cmf_err(CMF_E_NOMEM, "cmf_skills_list: out of memory");
                goto fail;
            }
            memset(nl + cap, 0, cap * sizeof *nl);
            list = nl, cap *= 2;
        }
        char *copy = malloc(len + 1);
        if (!copy) {
            st = cmf_err(CMF_E_NOMEM, "cmf_skills_list: out of memory");
            goto fail;
        }
        memcpy(copy, id, len);
        copy[len] = 0;
        cmf_skill_info *s = &list[cnt++];
        s->id = s->id_storage = copy;
        count_tensors(f, s);
    }
    if (cnt == 0) {
        free(list);
        list = NULL;
    }
    *out = list;
    *n = cnt;
    return CMF_OK;
fail:
    cmf_skills_free(list, cnt);
    return st;
}
