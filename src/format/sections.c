/* sections.c — validation of the optional masks (CMF_FORMAT.md §1.7) and sparse index (§1.9) sections, as
 * open() must do it (§1.11 items 12–13). Blobs and entries are only bounds- and length-checked; their bits are
 * read by the skills/masks code. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "format/format.h"
#include "util/error.h"

static uint32_t rd32(const uint8_t *p) {
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}

/* 1 and *v when j is a non-negative integer JSON number that fits in u64, else 0. */
static int get_u64(const cJSON *j, uint64_t *v) {
    if (!cJSON_IsNumber(j)) return 0;
    double d = j->valuedouble;
    if (!isfinite(d) || d < 0 || d != floor(d) || d >= 18446744073709551616.0) return 0;
    *v = (uint64_t)d;
    return 1;
}

static uint64_t arch_u64(const cJSON *arch, const char *key, uint64_t dflt) {
    uint64_t v;
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(arch, key);
    return get_u64(j, &v) ? v : dflt;
}

#define MERR(...) cmf_err(CMF_E_FORMAT, __VA_ARGS__)

cmf_status cmf_masks_check(const cJSON *arch, const uint8_t *sec, uint64_t len, uint64_t off) {
    unsigned long long O = (unsigned long long)off;
    if (len < 8) return MERR("masks@0x%llx: masks_len %llu is shorter than the 8-byte section head", O,
                             (unsigned long long)len);
    uint32_t n_masks = rd32(sec), meta_len = rd32(sec + 4);
    if ((uint64_t)meta_len > len - 8)
        return MERR("masks@0x%llx: meta_len %u runs past the section (masks_len %llu)", O, meta_len,
                    (unsigned long long)len);
    size_t bad = cmf_utf8_invalid_at(sec + 8, meta_len);
    if (bad != meta_len) return MERR("masks@0x%llx: meta JSON: invalid UTF-8 at byte %zu", O, bad);
    const char *end = NULL;
    cJSON *meta = cJSON_ParseWithLengthOpts((const char *)sec + 8, meta_len, &end, 0);
    if (!meta) return MERR("masks@0x%llx: meta JSON (meta_len %u) is malformed", O, meta_len);
    cmf_status st = CMF_OK;
    const cJSON *masks = cJSON_GetObjectItemCaseSensitive(meta, "masks");
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(meta, "default_task");
    if (!cJSON_IsObject(meta) || !cJSON_IsArray(masks)) {
        st = MERR("masks@0x%llx: meta JSON: `masks` array missing", O);
        goto done;
    }
    if (dt && !cJSON_IsString(dt)) {
        st = MERR("masks@0x%llx: meta JSON: default_task must be a string", O);
        goto done;
    }
    int count = cJSON_GetArraySize(masks);
    if ((uint64_t)count != n_masks) {
        st = MERR("masks@0x%llx: n_masks %u != meta.masks length %d", O, n_masks, count);
        goto done;
    }
    /* Blob lengths of §1.7, from arch (all u64; inputs are u64 from JSON, products checked by limits). */
    uint64_t L = arch_u64(arch, "num_layers", 0), loops = arch_u64(arch, "num_loops", 1);
    uint64_t F = (arch_u64(arch, "intermediate_size", 0) + 7) / 8;
    uint64_t H = (arch_u64(arch, "num_attention_heads", 0) + 7) / 8, G = (L + 7) / 8;
    const cJSON *moe = cJSON_GetObjectItemCaseSensitive(arch, "moe");
    int has_moe = cJSON_IsObject(moe);
    uint64_t E = has_moe ? (arch_u64(moe, "num_experts", 0) + 7) / 8 : 0;
    if (loops == 0) loops = 1;
    int sane = L < (1ull << 24) && loops < (1ull << 16) && F < (1ull << 32) && H < (1ull << 24) && E < (1ull << 24);
    uint64_t legacy = sane ? L * F + L * H + G : 0, looped = sane ? L * loops * F + L * H + G : 0;
    int i = 0;
    const cJSON *m;
    cJSON_ArrayForEach(m, masks) {
        uint64_t v, boff, blen;
        if (!cJSON_IsObject(m)) {
            st = MERR("masks@0x%llx: masks[%d]: expected an object", O, i);
            goto done;
        }
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(m, "name");
        const cJSON *pri = cJSON_GetObjectItemCaseSensitive(m, "priority");
        if (!get_u64(cJSON_GetObjectItemCaseSensitive(m, "task_id"), &v) || v > UINT32_MAX) {
            st = MERR("masks@0x%llx: masks[%d].task_id: missing or not an unsigned 32-bit integer", O, i);
            goto done;
        }
        if (!cJSON_IsString(name)) {
            st = MERR("masks@0x%llx: masks[%d].name: missing or not a string", O, i);
            goto done;
        }
        if (!cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(m, "sparsity"))) {
            st = MERR("masks@0x%llx: masks[%d].sparsity: missing or not a number", O, i);
            goto done;
        }
        if (!cJSON_IsString(pri) || (strcmp(pri->valuestring, "Fallback") && strcmp(pri->valuestring, "Normal") &&
                                     strcmp(pri->valuestring, "Primary"))) {
            st = MERR("masks@0x%llx: masks[%d].priority: missing or not one of Fallback, Normal, Primary", O, i);
            goto done;
        }
        if (!get_u64(cJSON_GetObjectItemCaseSensitive(m, "blob_off"), &boff) ||
            !get_u64(cJSON_GetObjectItemCaseSensitive(m, "blob_len"), &blen)) {
            st = MERR("masks@0x%llx: masks[%d]: blob_off/blob_len missing or not unsigned integers", O, i);
            goto done;
        }
        if (boff > len || blen > len - boff) {
            st = MERR("masks@0x%llx: masks[%d] (\"%.64s\"): blob [%llu, +%llu) runs past the section (masks_len "
                      "%llu)", O, i, name->valuestring, (unsigned long long)boff, (unsigned long long)blen,
                      (unsigned long long)len);
            goto done;
        }
        const cJSON *hx = cJSON_GetObjectItemCaseSensitive(m, "has_expert_fields");
        if (hx && !cJSON_IsNull(hx) && !cJSON_IsBool(hx)) {
            st = MERR("masks@0x%llx: masks[%d].has_expert_fields: expected a boolean", O, i);
            goto done;
        }
        int expert = cJSON_IsTrue(hx);
        if (expert && !has_moe) {
            st = MERR("masks@0x%llx: masks[%d] (\"%.64s\"): has_expert_fields is set but arch.moe is absent", O, i,
                      name->valuestring);
            goto done;
        }
        uint64_t x = expert ? L * E : 0;
        if (!sane || (blen != legacy + x && blen != looped + x)) {
            st = MERR("masks@0x%llx: masks[%d] (\"%.64s\"): blob_len %llu matches neither the legacy layout (%llu) "
                      "nor the loop layout (%llu)", O, i, name->valuestring, (unsigned long long)blen,
                      (unsigned long long)(legacy + x), (unsigned long long)(looped + x));
            goto done;
        }
        i++;
    }
done:
    cJSON_Delete(meta);
    return st;
}

cmf_status cmf_index_check(const uint8_t *sec, uint64_t len, uint64_t off) {
    unsigned long long O = (unsigned long long)off;
    if (len < 8) return MERR("index@0x%llx: index_len %llu is shorter than the 8-byte section head", O,
                             (unsigned long long)len);
    uint32_t n = rd32(sec);
    uint64_t pos = 8;
    for (uint32_t e = 0; e < n; e++) {
        if (len - pos < 16)
            return MERR("index@0x%llx: entry %u of %u at section byte %llu: 16-byte head runs past index_len %llu", O,
                        e, n, (unsigned long long)pos, (unsigned long long)len);
        uint64_t groups = rd32(sec + pos + 8), heads = rd32(sec + pos + 12);
        uint64_t body = 2 * groups + heads, total = (16 + body + 3) / 4 * 4;
        if (total > len - pos) {
            /* the padding of the last entry may be absent only if nothing follows; require the data itself */
            if (16 + body > len - pos)
                return MERR("index@0x%llx: entry %u (task %u, layer %u) at section byte %llu: %llu groups + %llu "
                            "heads run past index_len %llu", O, e, rd32(sec + pos), rd32(sec + pos + 4),
                            (unsigned long long)pos, (unsigned long long)groups, (unsigned long long)heads,
                            (unsigned long long)len);
            total = len - pos;
        }
        pos += total;
    }
    return CMF_OK;
}
