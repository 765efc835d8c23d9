/* masks.c — task masks (CMF_FORMAT.md §1.7, §3.4): the masks section decoded into per-layer bitsets for the
 * forward pass, the rule that picks the active mask, and the text of `cmf masks`. Layouts and rules follow
 * cortiq-core mask.rs (decode_masks_section, MaskCatalog::fallback) and cortiq-engine runtime.rs. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "skills/skills.h"
#include "util/error.h"

static uint32_t rd32(const uint8_t *p) {
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}

/* A non-negative integer JSON number below `limit`, else 0 (and *ok = 0). */
static uint64_t get_uint(const cJSON *j, double limit, int *ok) {
    if (!cJSON_IsNumber(j) || !(j->valuedouble >= 0 && j->valuedouble < limit) ||
        j->valuedouble != floor(j->valuedouble)) {
        *ok = 0;
        return 0;
    }
    *ok = 1;
    return (uint64_t)j->valuedouble;
}

static uint64_t arch_uint(const cJSON *arch, const char *key, uint64_t dflt) {
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(arch, key);
    if (!j || cJSON_IsNull(j)) return dflt;
    int ok;
    uint64_t v = get_uint(j, 4294967296.0, &ok);
    return ok ? v : dflt;
}

static char *dup_opt(const cJSON *obj, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!cJSON_IsString(v)) return NULL;
    size_t n = strlen(v->valuestring) + 1;
    char *s = malloc(n);
    if (s) memcpy(s, v->valuestring, n);
    return s;
}

void cmf_masks_free(cmf_masks *m) {
    if (!m) return;
    for (size_t i = 0; i < m->n; i++) {
        cmf_task_mask *t = &m->masks[i];
        free(t->name);
        free(t->description);
        free(t->quality_metric);
        free(t->parent);
        free(t->ffn);
        free(t->heads);
        free(t->alive);
        free(t->experts);
    }
    free(m->masks);
    free(m->default_task);
    free(m);
}

/* Clears bits >= bits in an LSB-first row of `bytes` bytes; returns how many were set. */
static uint64_t clear_tail(uint8_t *row, size_t bytes, uint32_t bits) {
    uint64_t cleared = 0;
    for (size_t b = bits / 8; b < bytes; b++) {
        uint8_t keep = b == bits / 8 ? (uint8_t)((1u << (bits % 8)) - 1) : 0;
        uint8_t extra = (uint8_t)(row[b] & (uint8_t)~keep);
        for (; extra; extra &= (uint8_t)(extra - 1)) cleared++;
        row[b] &= keep;
    }
    return cleared;
}

#define MERR(...) cmf_err(CMF_E_FORMAT, __VA_ARGS__)

/* Decodes meta.masks[i] and its blob into *t. */
static cmf_status decode_one(cmf_masks *m, const cJSON *mm, int i, const uint8_t *sec, uint64_t len, cmf_task_mask *t) {
    int ok;
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(mm, "name");
    if (!cJSON_IsObject(mm) || !cJSON_IsString(name))
        return MERR("masks: meta.masks[%d]: not an object with a string `name`", i);
    const char *nm = name->valuestring;
    t->name = dup_opt(mm, "name");
    t->description = dup_opt(mm, "description");
    t->parent = dup_opt(mm, "parent");
    if (!t->name) return cmf_err(CMF_E_NOMEM, "masks: out of memory");
    t->task_id = (uint32_t)get_uint(cJSON_GetObjectItemCaseSensitive(mm, "task_id"), 4294967296.0, &ok);
    if (!ok) return MERR("masks: mask \"%.64s\": task_id missing or not an unsigned 32-bit integer", nm);
    const cJSON *sp = cJSON_GetObjectItemCaseSensitive(mm, "sparsity");
    if (!cJSON_IsNumber(sp)) return MERR("masks: mask \"%.64s\": sparsity missing or not a number", nm);
    t->sparsity = sp->valuedouble;
    const cJSON *pr = cJSON_GetObjectItemCaseSensitive(mm, "priority");
    const char *ps = cJSON_IsString(pr) ? pr->valuestring : "";
    if (!strcmp(ps, "Fallback"))
        t->priority = CMF_MASK_FALLBACK;
    else if (!strcmp(ps, "Normal"))
        t->priority = CMF_MASK_NORMAL;
    else if (!strcmp(ps, "Primary"))
        t->priority = CMF_MASK_PRIMARY;
    else
        return MERR("masks: mask \"%.64s\": priority \"%.32s\" is not Fallback, Normal or Primary", nm, ps);
    const cJSON *q = cJSON_GetObjectItemCaseSensitive(mm, "quality");
    if (q && !cJSON_IsNull(q)) {
        const cJSON *qm = cJSON_GetObjectItemCaseSensitive(q, "metric"),
                    *qv = cJSON_GetObjectItemCaseSensitive(q, "value");
        if (!cJSON_IsObject(q) || !cJSON_IsString(qm) || !cJSON_IsNumber(qv))
            return MERR("masks: mask \"%.64s\": quality must be null or {metric: string, value: number}", nm);
        t->has_quality = 1;
        t->quality_metric = dup_opt(q, "metric");
        t->quality_value = qv->valuedouble;
        if (!t->quality_metric) return cmf_err(CMF_E_NOMEM, "masks: out of memory");
    }
    t->has_hot_pack = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(mm, "has_hot_pack"));
    t->has_expert_fields = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(mm, "has_expert_fields"));
    if (t->has_expert_fields && m->n_experts == 0)
        return MERR("masks: mask \"%.64s\": has_expert_fields is set but arch.moe is absent", nm);

    int ok2;
    uint64_t boff = get_uint(cJSON_GetObjectItemCaseSensitive(mm, "blob_off"), 18446744073709551616.0, &ok);
    uint64_t blen = get_uint(cJSON_GetObjectItemCaseSensitive(mm, "blob_len"), 18446744073709551616.0, &ok2);
    if (!ok || !ok2) return MERR("masks: mask \"%.64s\": blob_off/blob_len missing or not unsigned integers", nm);
    if (boff > len || blen > len - boff)
        return MERR("masks: mask \"%.64s\": blob [%llu, +%llu) runs past the section (%llu bytes)", nm,
                    (unsigned long long)boff, (unsigned long long)blen, (unsigned long long)len);
    uint64_t L = m->n_layers, V = m->n_virtual_layers;
    uint64_t tail = L * m->head_bytes + m->gate_bytes + (t->has_expert_fields ? L * m->expert_bytes : 0);
    uint64_t legacy = L * m->ffn_bytes + tail, looped = V * m->ffn_bytes + tail;
    uint64_t rows;
    if (blen == looped)
        rows = V; /* equal to legacy when num_loops == 1 */
    else if (blen == legacy)
        rows = L;
    else
        return MERR("masks: mask \"%.64s\": blob_len %llu matches neither the legacy layout (%llu) nor the loop "
                    "layout (%llu)%s",
                    nm, (unsigned long long)blen, (unsigned long long)legacy, (unsigned long long)looped,
                    t->has_expert_fields ? " with expert rows" : "");
    t->loop_layout = rows == V && V != L;
    const uint8_t *blob = sec + boff;
    t->ffn = malloc(V * m->ffn_bytes + 1);
    t->heads = malloc(L * m->head_bytes + 1);
    t->alive = malloc(L + 1);
    if (t->has_expert_fields) t->experts = malloc(L * m->expert_bytes + 1);
    if (!t->ffn || !t->heads || !t->alive || (t->has_expert_fields && !t->experts))
        return cmf_err(CMF_E_NOMEM, "masks: out of memory");
    /* FFN rows: a legacy mask on a looped model gives every pass the physical layer's row (§1.7) */
    for (uint64_t v = 0; v < V; v++) {
        uint64_t src = rows == V ? v : v % L;
        memcpy(t->ffn + v * m->ffn_bytes, blob + src * m->ffn_bytes, m->ffn_bytes);
        t->tail_bits_cleared += clear_tail(t->ffn + v * m->ffn_bytes, m->ffn_bytes, m->intermediate_size);
    }
    const uint8_t *hp = blob + rows * m->ffn_bytes;
    memcpy(t->heads, hp, L * m->head_bytes);
    for (uint64_t l = 0; l < L; l++)
        t->tail_bits_cleared += clear_tail(t->heads + l * m->head_bytes, m->head_bytes, m->n_heads);
    const uint8_t *gp = hp + L * m->head_bytes;
    for (uint64_t l = 0; l < L; l++) t->alive[l] = (uint8_t)((gp[l / 8] >> (l % 8)) & 1);
    for (uint64_t l = L; l < 8 * (uint64_t)m->gate_bytes; l++) t->tail_bits_cleared += (gp[l / 8] >> (l % 8)) & 1;
    if (t->has_expert_fields) {
        memcpy(t->experts, gp + m->gate_bytes, L * m->expert_bytes);
        for (uint64_t l = 0; l < L; l++)
            t->tail_bits_cleared += clear_tail(t->experts + l * m->expert_bytes, m->expert_bytes, m->n_experts);
    }
    return CMF_OK;
}

cmf_status cmf_masks_parse(const cJSON *arch, const uint8_t *sec, uint64_t len, cmf_masks **out) {
    if (!out || (len && !sec)) return cmf_err(CMF_E_ARG, "cmf_masks_parse: NULL argument");
    *out = NULL;
    cmf_masks *m = calloc(1, sizeof *m);
    if (!m) return cmf_err(CMF_E_NOMEM, "masks: out of memory");
    m->n_layers = (uint32_t)arch_uint(arch, "num_layers", 0);
    m->n_loops = (uint32_t)arch_uint(arch, "num_loops", 1);
    if (m->n_loops == 0) m->n_loops = 1;
    m->intermediate_size = (uint32_t)arch_uint(arch, "intermediate_size", 0);
    m->n_heads = (uint32_t)arch_uint(arch, "num_attention_heads", 0);
    const cJSON *moe = cJSON_GetObjectItemCaseSensitive(arch, "moe");
    m->n_experts = cJSON_IsObject(moe) ? (uint32_t)arch_uint(moe, "num_experts", 0) : 0;
    m->ffn_bytes = (m->intermediate_size + 7u) / 8u;
    m->head_bytes = (m->n_heads + 7u) / 8u;
    m->gate_bytes = (m->n_layers + 7u) / 8u;
    m->expert_bytes = (m->n_experts + 7u) / 8u;
    cmf_status st = CMF_OK;
    cJSON *meta = NULL;
    if (len == 0) goto empty;
    if (m->n_layers > (1u << 20) || m->n_loops > (1u << 12)) {
        st = MERR("masks: arch num_layers %u x num_loops %u is out of range", m->n_layers, m->n_loops);
        goto fail;
    }
    m->n_virtual_layers = m->n_layers * m->n_loops;
    if (len < 8) {
        st = MERR("masks: section of %llu bytes is shorter than its 8-byte head", (unsigned long long)len);
        goto fail;
    }
    uint32_t n_masks = rd32(sec), meta_len = rd32(sec + 4);
    if (meta_len > len - 8) {
        st = MERR("masks: meta_len %u runs past the section (%llu bytes)", meta_len, (unsigned long long)len);
        goto fail;
    }
    meta = cJSON_ParseWithLength((const char *)sec + 8, meta_len);
    const cJSON *arr = cJSON_GetObjectItemCaseSensitive(meta, "masks"), *mm;
    if (!cJSON_IsObject(meta) || !cJSON_IsArray(arr)) {
        st = MERR("masks: meta JSON (%u bytes at section byte 8) is malformed or has no `masks` array", meta_len);
        goto fail;
    }
    if ((uint64_t)cJSON_GetArraySize(arr) != n_masks) {
        st = MERR("masks: n_masks %u != meta.masks length %d", n_masks, cJSON_GetArraySize(arr));
        goto fail;
    }
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(meta, "default_task");
    if (dt && !cJSON_IsNull(dt) && !cJSON_IsString(dt)) {
        st = MERR("masks: meta.default_task is not a string");
        goto fail;
    }
    m->default_task = dup_opt(meta, "default_task");
    m->masks = calloc(n_masks ? n_masks : 1, sizeof *m->masks);
    if (!m->masks) {
        st = cmf_err(CMF_E_NOMEM, "masks: out of memory");
        goto fail;
    }
    int i = 0;
    cJSON_ArrayForEach(mm, arr) {
        m->n++;
        if ((st = decode_one(m, mm, i, sec, len, &m->masks[i]))) goto fail;
        i++;
    }
empty:
    m->n_virtual_layers = m->n_layers * m->n_loops;
    if (!m->default_task) {
        m->default_task = calloc(1, 1);
        if (!m->default_task) {
            st = cmf_err(CMF_E_NOMEM, "masks: out of memory");
            goto fail;
        }
    }
    cJSON_Delete(meta);
    *out = m;
    return CMF_OK;
fail:
    cJSON_Delete(meta);
    cmf_masks_free(m);
    return st;
}

cmf_status cmf_masks_load(const cmf_file *f, cmf_masks **out) {
    if (!f || !out) return cmf_err(CMF_E_ARG, "cmf_masks_load: NULL argument");
    const cJSON *arch = cJSON_GetObjectItemCaseSensitive(f->header, "arch");
    uint64_t len = f->masks ? f->env.masks_len : 0;
    cmf_status st = cmf_masks_parse(arch, f->masks, len, out);
    if (st) return cmf_err_prefix(st, "%s: ", f->path ? f->path : "model");
    return CMF_OK;
}

int cmf_masks_find(const cmf_masks *m, const char *name) {
    if (!m || !name) return -1;
    for (size_t i = 0; i < m->n; i++)
        if (strcmp(m->masks[i].name, name) == 0) return (int)i;
    return -1;
}

int cmf_masks_fallback(const cmf_masks *m) {
    if (!m || m->n == 0) return -1;
    for (size_t i = 0; i < m->n; i++)
        if (m->masks[i].priority == CMF_MASK_FALLBACK) return (int)i;
    return 0;
}

cmf_status cmf_masks_choose(const cmf_masks *m, const char *task, int *index) {
    if (!m || !index) return cmf_err(CMF_E_ARG, "cmf_masks_choose: NULL argument");
    int named = task ? cmf_masks_find(m, task) : -1;
    if (named >= 0) {
        *index = named;
        return CMF_OK;
    }
    if (task && (!strcmp(task, "off") || !strcmp(task, "none"))) {
        *index = -1;
        return CMF_OK;
    }
    const char *env = getenv("CMF_TASK");
    *index = env && !strcmp(env, "off") ? -1 : cmf_masks_fallback(m);
    if (!task) return CMF_OK;
    char names[512] = "";
    size_t k = 0;
    for (size_t i = 0; i < m->n && k < sizeof names; i++)
        k += (size_t)snprintf(names + k, sizeof names - k, "%s%s", i ? ", " : "", m->masks[i].name);
    return cmf_err(CMF_E_NOT_FOUND, "no task mask named \"%.64s\" (%s%s)", task,
                   m->n ? "masks: " : "the file has no masks", names);
}

const uint8_t *cmf_mask_ffn_row(const cmf_masks *m, const cmf_task_mask *t, uint32_t vlayer) {
    if (!m || !t || vlayer >= m->n_virtual_layers) return NULL;
    return t->ffn + (size_t)vlayer * m->ffn_bytes;
}

const uint8_t *cmf_mask_head_row(const cmf_masks *m, const cmf_task_mask *t, uint32_t layer) {
    if (!m || !t || layer >= m->n_layers) return NULL;
    return t->heads + (size_t)layer * m->head_bytes;
}

const uint8_t *cmf_mask_expert_row(const cmf_masks *m, const cmf_task_mask *t, uint32_t layer) {
    if (!m || !t || !t->experts || layer >= m->n_layers) return NULL;
    return t->experts + (size_t)layer * m->expert_bytes;
}

int cmf_mask_layer_alive(const cmf_masks *m, const cmf_task_mask *t, uint32_t layer) {
    if (!m || !t || layer >= m->n_layers) return 1;
    return t->alive[layer];
}

uint32_t cmf_mask_popcount(const uint8_t *row, uint32_t bits) {
    uint32_t c = 0;
    if (!row) return 0;
    for (uint32_t i = 0; i < bits; i++) c += (uint32_t)cmf_mask_bit(row, i);
    return c;
}

/* Appends printf-style text to a growing buffer; sets *oom on failure. */
typedef struct sbuf {
    char *p;
    size_t n, cap;
    int oom;
} sbuf;

__attribute__((format(printf, 2, 3))) static void sb_printf(sbuf *b, const char *fmt, ...) {
    if (b->oom) return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int k = vsnprintf(b->p ? b->p + b->n : NULL, b->p ? b->cap - b->n : 0, fmt, ap);
        va_end(ap);
        if (k < 0) {
            b->oom = 1;
            return;
        }
        if (b->p && b->n + (size_t)k < b->cap) {
            b->n += (size_t)k;
            return;
        }
        size_t cap = (b->cap ? b->cap * 2 : 1024) + (size_t)k;
        char *np = realloc(b->p, cap);
        if (!np) {
            b->oom = 1;
            return;
        }
        b->p = np, b->cap = cap;
    }
}

static const char *priority_name(int p) {
    return p == CMF_MASK_FALLBACK ? "Fallback" : p == CMF_MASK_PRIMARY ? "Primary" : "Normal";
}

char *cmf_masks_describe(const cmf_masks *m) {
    sbuf b = {0};
    if (!m) return NULL;
    if (m->n == 0) {
        sb_printf(&b, "no task masks\n");
        return b.oom ? (free(b.p), NULL) : b.p;
    }
    int active = -1;
    cmf_masks_choose(m, NULL, &active);
    const char *env = getenv("CMF_TASK");
    sb_printf(&b, "default task: %s\n", m->default_task[0] ? m->default_task : "(none)");
    sb_printf(&b, "geometry:     %u layers x %u loop(s); per layer %u FFN neurons, %u heads", m->n_layers, m->n_loops,
              m->intermediate_size, m->n_heads);
    if (m->n_experts) sb_printf(&b, ", %u experts", m->n_experts);
    sb_printf(&b, "\n");
    sb_printf(&b, "%u mask(s):\n", (unsigned)m->n);
    uint64_t ffn_total = (uint64_t)m->n_virtual_layers * m->intermediate_size;
    uint64_t head_total = (uint64_t)m->n_layers * m->n_heads;
    for (size_t i = 0; i < m->n; i++) {
        const cmf_task_mask *t = &m->masks[i];
        uint32_t alive = 0;
        uint64_t ffn = 0, heads = 0;
        for (uint32_t l = 0; l < m->n_layers; l++) {
            alive += t->alive[l];
            heads += cmf_mask_popcount(cmf_mask_head_row(m, t, l), m->n_heads);
        }
        for (uint32_t v = 0; v < m->n_virtual_layers; v++)
            ffn += cmf_mask_popcount(cmf_mask_ffn_row(m, t, v), m->intermediate_size);
        sb_printf(&b,
                  "  [%u] %-16s %-8s sparsity %5.1f%%  layers alive %u/%u  FFN active %llu/%llu  heads active "
                  "%llu/%llu",
                  t->task_id, t->name, priority_name(t->priority), t->sparsity * 100.0, alive, m->n_layers,
                  (unsigned long long)ffn, (unsigned long long)ffn_total, (unsigned long long)heads,
                  (unsigned long long)head_total);
        if (t->has_quality)
            sb_printf(&b, "  quality %s %.4g", t->quality_metric, t->quality_value);
        else
            sb_printf(&b, "  quality unmeasured");
        if (t->has_expert_fields) sb_printf(&b, "  expert fields");
        if (t->loop_layout) sb_printf(&b, "  per-pass FFN rows");
        if ((int)i == active) sb_printf(&b, "  <- active by default");
        sb_printf(&b, "\n");
        if (t->description) sb_printf(&b, "       %s\n", t->description);
        if (t->tail_bits_cleared)
            sb_printf(&b, "       warning: %llu bit(s) set past the real dimensions (ignored)\n",
                      (unsigned long long)t->tail_bits_cleared);
    }
    if (active < 0)
        sb_printf(&b, "active by default: none (CMF_TASK=%s: dense)\n", env ? env : "");
    else
        sb_printf(&b,
                  "active by default: %s (the first Fallback-priority mask, else the first mask; CMF_TASK=off "
                  "runs dense)\n",
                  m->masks[active].name);
    if (b.oom) {
        free(b.p);
        return NULL;
    }
    return b.p;
}
