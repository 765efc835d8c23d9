/* safetensors.c — read-only, validated access to Hugging Face safetensors checkpoints (single file, directory,
 * or sharded through model.safetensors.index.json).
 *
 * Format (huggingface/safetensors, docs "Format"): u64 LE N, then N bytes of UTF-8 JSON
 *   {"name": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, ..., "__metadata__": {str: str}}
 * then the byte buffer; offsets are relative to 8 + N. Every shard is mapped read-only; tensors point into it.
 * Validation: N inside the file and below a sane bound, JSON an object, each entry complete, dtype known,
 * end - begin == numel x element size (no overflow), end inside the data, no two tensors overlapping, names
 * unique across all shards. */
#include "convert/safetensors.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/error.h"
#include "util/fileio.h"

#define ST_MAX_HEADER (100u << 20) /* the reference library refuses headers above 100 MB */

typedef struct st_shard {
    char *path;
    cmf_mmap map;
} st_shard;

struct cmf_safetensors {
    st_shard *shards;
    size_t n_shards;
    cmf_st_tensor *tensors;
    size_t n, cap;
    size_t *sorted; /* tensor indices sorted by name, for cmf_st_find */
};

/* Element sizes of every dtype the safetensors format defines; CMF_ST_OTHER for those we cannot convert. */
static const struct {
    const char *name;
    int dtype;
    unsigned size;
} ST_DTYPES[] = {
    {"F32", CMF_ST_F32, 4},       {"F16", CMF_ST_F16, 2},       {"BF16", CMF_ST_BF16, 2},
    {"I32", CMF_ST_I32, 4},       {"I64", CMF_ST_I64, 8},       {"F64", CMF_ST_OTHER, 8},
    {"I8", CMF_ST_OTHER, 1},      {"U8", CMF_ST_OTHER, 1},      {"I16", CMF_ST_OTHER, 2},
    {"U16", CMF_ST_OTHER, 2},     {"U32", CMF_ST_OTHER, 4},     {"U64", CMF_ST_OTHER, 8},
    {"BOOL", CMF_ST_OTHER, 1},    {"F8_E4M3", CMF_ST_OTHER, 1}, {"F8_E5M2", CMF_ST_OTHER, 1},
    {"F8_E8M0", CMF_ST_OTHER, 1},
};

/* IEEE binary16 -> f32, exact (subnormals included). Kept here so the reader needs nothing outside util/. */
static float f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h >> 15) << 31, e = (h >> 10) & 0x1f, m = h & 0x3ff, bits;
    if (e == 0) {
        float v = ldexpf((float)m, -24);
        return sign ? -v : v;
    }
    if (e == 31)
        bits = sign | 0x7f800000u | (m << 13);
    else
        bits = sign | ((e + 112) << 23) | (m << 13);
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

static float bf16_to_f32(uint16_t h) {
    uint32_t bits = (uint32_t)h << 16;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

static uint64_t rd_u64(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

/* A JSON number that is a non-negative integer below 2^53 (exact in a double). */
static int json_u64(const cJSON *v, uint64_t *out) {
    if (!cJSON_IsNumber(v)) return 0;
    double d = v->valuedouble;
    if (!(d >= 0) || d > 9007199254740992.0 || floor(d) != d) return 0;
    *out = (uint64_t)d;
    return 1;
}

uint64_t cmf_st_numel(const cmf_st_tensor *t) {
    uint64_t n = 1;
    for (int i = 0; i < t->ndim; i++) n *= t->shape[i];
    return n;
}

size_t cmf_st_count(const cmf_safetensors *st) { return st ? st->n : 0; }

const cmf_st_tensor *cmf_st_get(const cmf_safetensors *st, size_t i) {
    return st && i < st->n ? &st->tensors[i] : NULL;
}

const cmf_st_tensor *cmf_st_find(const cmf_safetensors *st, const char *name) {
    if (!st || !name) return NULL;
    size_t lo = 0, hi = st->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(st->tensors[st->sorted[mid]].name, name);
        if (c == 0) return &st->tensors[st->sorted[mid]];
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

void cmf_st_close(cmf_safetensors *st) {
    if (!st) return;
    for (size_t i = 0; i < st->n; i++) free(st->tensors[i].name);
    free(st->tensors);
    free(st->sorted);
    for (size_t i = 0; i < st->n_shards; i++) {
        cmf_mmap_close(&st->shards[i].map);
        free(st->shards[i].path);
    }
    free(st->shards);
    free(st);
}

/* Parses one tensor entry of a shard header into t (name not yet set). */
static cmf_status parse_entry(const char *path, const cJSON *e, const uint8_t *data, uint64_t data_len,
                              cmf_st_tensor *t) {
    const char *nm = e->string;
    if (!cJSON_IsObject(e)) return cmf_err(CMF_E_FORMAT, "%s: tensor '%s': entry is not an object", path, nm);
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(e, "dtype");
    const cJSON *sh = cJSON_GetObjectItemCaseSensitive(e, "shape");
    const cJSON *off = cJSON_GetObjectItemCaseSensitive(e, "data_offsets");
    if (!cJSON_IsString(dt)) return cmf_err(CMF_E_FORMAT, "%s: tensor '%s': missing string 'dtype'", path, nm);
    if (!cJSON_IsArray(sh)) return cmf_err(CMF_E_FORMAT, "%s: tensor '%s': missing array 'shape'", path, nm);
    if (!cJSON_IsArray(off) || cJSON_GetArraySize(off) != 2)
        return cmf_err(CMF_E_FORMAT, "%s: tensor '%s': 'data_offsets' must be [begin, end]", path, nm);
    unsigned esize = 0;
    t->dtype = -1;
    for (size_t i = 0; i < sizeof ST_DTYPES / sizeof ST_DTYPES[0]; i++)
        if (strcmp(dt->valuestring, ST_DTYPES[i].name) == 0) {
            t->dtype = ST_DTYPES[i].dtype;
            esize = ST_DTYPES[i].size;
        }
    if (t->dtype < 0) return cmf_err(CMF_E_FORMAT, "%s: tensor '%s': unknown dtype '%.15s'", path, nm, dt->valuestring);
    snprintf(t->dtype_str, sizeof t->dtype_str, "%s", dt->valuestring);
    int nd = cJSON_GetArraySize(sh);
    if (nd > 8) return cmf_err(CMF_E_FORMAT, "%s: tensor '%s': %d dimensions (at most 8)", path, nm, nd);
    t->ndim = nd;
    uint64_t numel = 1;
    int overflow = 0;
    for (int i = 0; i < nd; i++) {
        if (!json_u64(cJSON_GetArrayItem(sh, i), &t->shape[i]))
            return cmf_err(CMF_E_FORMAT, "%s: tensor '%s': shape[%d] is not a non-negative integer", path, nm, i);
        if (t->shape[i] && numel > UINT64_MAX / t->shape[i]) overflow = 1;
        numel *= t->shape[i];
    }
    if (overflow || numel > UINT64_MAX / esize)
        return cmf_err(CMF_E_FORMAT, "%s: tensor '%s': shape overflows", path, nm);
    uint64_t b, en;
    if (!json_u64(cJSON_GetArrayItem(off, 0), &b) || !json_u64(cJSON_GetArrayItem(off, 1), &en))
        return cmf_err(CMF_E_FORMAT, "%s: tensor '%s': data_offsets are not non-negative integers", path, nm);
    if (en < b)
        return cmf_err(CMF_E_FORMAT, "%s: tensor '%s': data_offsets [%llu, %llu] end before begin", path, nm,
                       (unsigned long long)b, (unsigned long long)en);
    if (en > data_len)
        return cmf_err(CMF_E_FORMAT, "%s: tensor '%s': data_offsets end %llu past the data (%llu bytes)", path, nm,
                       (unsigned long long)en, (unsigned long long)data_len);
    if (en - b != numel * esize)
        return cmf_err(CMF_E_FORMAT, "%s: tensor '%s': %llu bytes but dtype %s x shape needs %llu", path, nm,
                       (unsigned long long)(en - b), t->dtype_str, (unsigned long long)(numel * esize));
    t->data = data + b;
    t->nbytes = en - b;
    return CMF_OK;
}

static int cmp_data(const void *a, const void *b) {
    const cmf_st_tensor *x = a, *y = b;
    if (x->data != y->data) return x->data < y->data ? -1 : 1;
    return x->nbytes < y->nbytes ? -1 : x->nbytes > y->nbytes;
}

/* Maps one shard file and appends its tensors (in data order). */
static cmf_status open_shard(cmf_safetensors *st, const char *path) {
    st_shard *ns = realloc(st->shards, (st->n_shards + 1) * sizeof *ns);
    if (!ns) return cmf_err(CMF_E_NOMEM, "%s: out of memory", path);
    st->shards = ns;
    st_shard *sh = &st->shards[st->n_shards];
    memset(sh, 0, sizeof *sh);
    sh->path = strdup(path);
    if (!sh->path) return cmf_err(CMF_E_NOMEM, "%s: out of memory", path);
    st->n_shards++;
    cmf_status s = cmf_mmap_open(path, &sh->map);
    if (s) return s;
    size_t size = sh->map.size;
    if (size < 8) return cmf_err(CMF_E_FORMAT, "%s: %zu bytes: too short for the 8-byte header length", path, size);
    uint64_t hlen = rd_u64(sh->map.data);
    if (hlen < 2 || hlen > ST_MAX_HEADER || hlen > size - 8)
        return cmf_err(CMF_E_FORMAT, "%s: header length %llu does not fit the file (%zu bytes, limit %u)", path,
                       (unsigned long long)hlen, size, ST_MAX_HEADER);
    const char *txt = (const char *)sh->map.data + 8;
    const char *endp = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(txt, (size_t)hlen, &endp, 0);
    if (!root) {
        size_t at = endp ? (size_t)(endp - txt) : 0;
        return cmf_err(CMF_E_FORMAT, "%s: header JSON is malformed near byte %zu", path, 8 + at);
    }
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return cmf_err(CMF_E_FORMAT, "%s: header JSON is not an object", path);
    }
    const uint8_t *data = sh->map.data + 8 + hlen;
    uint64_t data_len = size - 8 - hlen;
    size_t first = st->n;
    for (const cJSON *e = root->child; e; e = e->next) {
        if (strcmp(e->string, "__metadata__") == 0) continue;
        if (st->n == st->cap) {
            size_t nc = st->cap ? 2 * st->cap : 64;
            cmf_st_tensor *nt = realloc(st->tensors, nc * sizeof *nt);
            if (!nt) {
                cJSON_Delete(root);
                return cmf_err(CMF_E_NOMEM, "%s: out of memory", path);
            }
            st->tensors = nt;
            st->cap = nc;
        }
        cmf_st_tensor *t = &st->tensors[st->n];
        memset(t, 0, sizeof *t);
        s = parse_entry(path, e, data, data_len, t);
        if (s) {
            cJSON_Delete(root);
            return s;
        }
        t->name = strdup(e->string);
        if (!t->name) {
            cJSON_Delete(root);
            return cmf_err(CMF_E_NOMEM, "%s: out of memory", path);
        }
        st->n++;
    }
    cJSON_Delete(root);
    /* File order is data order; tensors must not share bytes (empty tensors may sit anywhere). */
    if (st->n > first) qsort(st->tensors + first, st->n - first, sizeof *st->tensors, cmp_data);
    const uint8_t *prev_end = data;
    const char *prev = NULL;
    for (size_t i = first; i < st->n; i++) {
        const cmf_st_tensor *t = &st->tensors[i];
        if (t->nbytes == 0) continue;
        if (t->data < prev_end)
            return cmf_err(CMF_E_FORMAT, "%s: tensor '%s' overlaps tensor '%s'", path, t->name, prev);
        prev_end = t->data + t->nbytes;
        prev = t->name;
    }
    return CMF_OK;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* Opens the shards named in an index.json's weight_map (in sorted file-name order); on success *map_root
 * receives the parsed index for check_weight_map. */
static cmf_status open_index(cmf_safetensors *st, const char *dir, const char *index_path, cJSON **map_root) {
    char *txt;
    size_t len;
    cmf_status s = cmf_read_file(index_path, &txt, &len);
    if (s) return s;
    cJSON *root = cJSON_ParseWithLength(txt, len);
    free(txt);
    if (!root) return cmf_err(CMF_E_FORMAT, "%s: malformed JSON", index_path);
    const cJSON *wm = cJSON_GetObjectItemCaseSensitive(root, "weight_map");
    if (!cJSON_IsObject(wm) || !wm->child) {
        cJSON_Delete(root);
        return cmf_err(CMF_E_FORMAT, "%s: missing or empty object 'weight_map'", index_path);
    }
    int n = cJSON_GetArraySize(wm);
    char **files = malloc((size_t)n * sizeof *files);
    if (!files) {
        cJSON_Delete(root);
        return cmf_err(CMF_E_NOMEM, "%s: out of memory", index_path);
    }
    int nf = 0;
    for (const cJSON *e = wm->child; e; e = e->next) {
        if (!cJSON_IsString(e) || !e->valuestring[0] || strstr(e->valuestring, "..") || e->valuestring[0] == '/') {
            /* the message names e->string, which cJSON_Delete frees: format it first */
            s = cmf_err(CMF_E_FORMAT, "%s: weight_map['%s'] is not a shard file name", index_path, e->string);
            free(files);
            cJSON_Delete(root);
            return s;
        }
        files[nf++] = e->valuestring;
    }
    qsort(files, (size_t)nf, sizeof *files, cmp_str);
    for (int i = 0; i < nf && !s; i++) {
        if (i > 0 && strcmp(files[i], files[i - 1]) == 0) continue;
        char *p = cmf_path_join(dir, files[i]);
        if (!p) {
            s = cmf_err(CMF_E_NOMEM, "out of memory");
            break;
        }
        s = open_shard(st, p);
        free(p);
    }
    free(files);
    if (s)
        cJSON_Delete(root);
    else
        *map_root = root;
    return s;
}

/* Every name of the weight_map must be a tensor of the opened shards (run after build_sorted). */
static cmf_status check_weight_map(const cmf_safetensors *st, const char *index_path, const cJSON *root) {
    const cJSON *wm = cJSON_GetObjectItemCaseSensitive(root, "weight_map");
    for (const cJSON *e = wm->child; e; e = e->next)
        if (!cmf_st_find(st, e->string))
            return cmf_err(CMF_E_FORMAT, "%s: tensor '%s' is in weight_map but in no shard", index_path, e->string);
    return CMF_OK;
}

static const cmf_safetensors *g_sort_st; /* qsort has no context argument; used only during cmf_st_open */

static int cmp_name_idx(const void *a, const void *b) {
    return strcmp(g_sort_st->tensors[*(const size_t *)a].name, g_sort_st->tensors[*(const size_t *)b].name);
}

static cmf_status build_sorted(cmf_safetensors *st) {
    st->sorted = malloc((st->n ? st->n : 1) * sizeof *st->sorted);
    if (!st->sorted) return cmf_err(CMF_E_NOMEM, "out of memory");
    for (size_t i = 0; i < st->n; i++) st->sorted[i] = i;
    /* Names are unique, so sorting by name needs no tie-break; the comparator reads st through a static that is
     * set and cleared around the call (qsort_r is not C11). Sorting by name only reads immutable data. */
    g_sort_st = st;
    qsort(st->sorted, st->n, sizeof *st->sorted, cmp_name_idx);
    g_sort_st = NULL;
    for (size_t i = 1; i < st->n; i++)
        if (strcmp(st->tensors[st->sorted[i]].name, st->tensors[st->sorted[i - 1]].name) == 0)
            return cmf_err(CMF_E_FORMAT, "tensor name '%s' appears twice", st->tensors[st->sorted[i]].name);
    return CMF_OK;
}

cmf_status cmf_st_open(const char *path, cmf_safetensors **out) {
    if (!path || !out) return cmf_err(CMF_E_ARG, "cmf_st_open: NULL argument");
    *out = NULL;
    cmf_safetensors *st = calloc(1, sizeof *st);
    if (!st) return cmf_err(CMF_E_NOMEM, "out of memory");
    cmf_status s;
    cJSON *index_root = NULL;
    char *index = NULL;
    if (cmf_is_dir(path)) {
        char *single = cmf_path_join(path, "model.safetensors");
        index = cmf_path_join(path, "model.safetensors.index.json");
        if (!single || !index)
            s = cmf_err(CMF_E_NOMEM, "out of memory");
        else if (cmf_is_file(single))
            s = open_shard(st, single);
        else if (cmf_is_file(index))
            s = open_index(st, path, index, &index_root);
        else
            s = cmf_err(CMF_E_NOT_FOUND, "%s: no model.safetensors or model.safetensors.index.json", path);
        free(single);
    } else {
        s = open_shard(st, path);
    }
    if (!s) s = build_sorted(st);
    if (!s && index_root) s = check_weight_map(st, index, index_root);
    cJSON_Delete(index_root);
    free(index);
    if (s) {
        cmf_st_close(st);
        return s;
    }
    *out = st;
    return CMF_OK;
}

size_t cmf_st_shard_count(const cmf_safetensors *st) { return st ? st->n_shards : 0; }

const char *cmf_st_shard_path(const cmf_safetensors *st, size_t i) {
    return st && i < st->n_shards ? st->shards[i].path : NULL;
}

cmf_status cmf_st_to_f32(const cmf_st_tensor *t, float *out) {
    uint64_t n = cmf_st_numel(t);
    const uint8_t *p = t->data;
    switch (t->dtype) {
    case CMF_ST_F32:
        memcpy(out, p, n * 4);
        return CMF_OK;
    case CMF_ST_F16:
    case CMF_ST_BF16:
        for (uint64_t i = 0; i < n; i++) {
            uint16_t h = (uint16_t)(p[2 * i] | p[2 * i + 1] << 8);
            out[i] = t->dtype == CMF_ST_F16 ? f16_to_f32(h) : bf16_to_f32(h);
        }
        return CMF_OK;
    case CMF_ST_I32:
        for (uint64_t i = 0; i < n; i++) {
            int32_t v;
            memcpy(&v, p + 4 * i, 4);
            out[i] = (float)v;
        }
        return CMF_OK;
    case CMF_ST_I64:
        for (uint64_t i = 0; i < n; i++) {
            int64_t v;
            memcpy(&v, p + 8 * i, 8);
            out[i] = (float)v;
        }
        return CMF_OK;
    default:
        return cmf_err(CMF_E_UNSUPPORTED, "tensor '%s': dtype %s cannot be converted to f32", t->name, t->dtype_str);
    }
}
