/* gguf.c — validating GGUF v2/v3 reader (format: ggml/docs/gguf.md). Nothing is trusted: every read goes
 * through a cursor that checks the remaining bytes first, counts are bounded by the bytes left before anything
 * is allocated, and tensor extents are checked against the data section. */
#include "convert/gguf.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/error.h"

#define GGUF_DEFAULT_ALIGNMENT 32
#define GGUF_MAX_ARRAY_DEPTH 4

/* Block size (elements) and bytes per block of the ggml types (ggml.c type_traits), for size validation. */
static const struct {
    int id;
    unsigned blck, size;
    const char *name;
} GGML_TYPES[] = {
    {0, 1, 4, "F32"},          {1, 1, 2, "F16"},         {2, 32, 18, "Q4_0"},     {3, 32, 20, "Q4_1"},
    {6, 32, 22, "Q5_0"},       {7, 32, 24, "Q5_1"},      {8, 32, 34, "Q8_0"},     {9, 32, 36, "Q8_1"},
    {10, 256, 84, "Q2_K"},     {11, 256, 110, "Q3_K"},   {12, 256, 144, "Q4_K"},  {13, 256, 176, "Q5_K"},
    {14, 256, 210, "Q6_K"},    {15, 256, 292, "Q8_K"},   {16, 256, 66, "IQ2_XXS"}, {17, 256, 74, "IQ2_XS"},
    {18, 256, 98, "IQ3_XXS"},  {19, 256, 50, "IQ1_S"},   {20, 32, 18, "IQ4_NL"},  {21, 256, 110, "IQ3_S"},
    {22, 256, 82, "IQ2_S"},    {23, 256, 136, "IQ4_XS"}, {24, 1, 1, "I8"},        {25, 1, 2, "I16"},
    {26, 1, 4, "I32"},         {27, 1, 8, "I64"},        {28, 1, 8, "F64"},       {29, 256, 56, "IQ1_M"},
    {30, 1, 2, "BF16"},        {34, 256, 54, "TQ1_0"},   {35, 256, 66, "TQ2_0"},   {39, 32, 17, "MXFP4"},
    {40, 64, 36, "NVFP4"},
};

static int ggml_type_index(int id) {
    for (size_t i = 0; i < sizeof GGML_TYPES / sizeof GGML_TYPES[0]; i++)
        if (GGML_TYPES[i].id == id) return (int)i;
    return -1;
}

/* Byte sizes of the scalar metadata types (0 for string/array). */
static unsigned vtype_size(int t) {
    switch (t) {
    case CMF_GGUF_U8: case CMF_GGUF_I8: case CMF_GGUF_BOOL: return 1;
    case CMF_GGUF_U16: case CMF_GGUF_I16: return 2;
    case CMF_GGUF_U32: case CMF_GGUF_I32: case CMF_GGUF_F32: return 4;
    case CMF_GGUF_U64: case CMF_GGUF_I64: case CMF_GGUF_F64: return 8;
    default: return 0;
    }
}

typedef struct cursor {
    const uint8_t *base;
    uint64_t pos, size;
    const char *path;
} cursor;

static uint64_t le(const uint8_t *p, unsigned n) {
    uint64_t v = 0;
    for (unsigned i = n; i-- > 0;) v = (v << 8) | p[i];
    return v;
}

static cmf_status need(cursor *c, uint64_t n, const char *what) {
    if (n > c->size - c->pos)
        return cmf_err(CMF_E_FORMAT, "%s: offset %llu: %s needs %llu bytes, only %llu left (truncated?)", c->path,
                       (unsigned long long)c->pos, what, (unsigned long long)n,
                       (unsigned long long)(c->size - c->pos));
    return CMF_OK;
}

static cmf_status rd_uint(cursor *c, unsigned n, uint64_t *v, const char *what) {
    cmf_status s = need(c, n, what);
    if (s) return s;
    *v = le(c->base + c->pos, n);
    c->pos += n;
    return CMF_OK;
}

static cmf_status rd_str(cursor *c, cmf_gguf_str *out, const char *what) {
    uint64_t n;
    cmf_status s = rd_uint(c, 8, &n, what);
    if (s) return s;
    if ((s = need(c, n, what))) return s;
    out->p = (const char *)c->base + c->pos;
    out->len = n;
    c->pos += n;
    return CMF_OK;
}

static char *str_dup(cmf_gguf_str s) {
    char *p = malloc(s.len + 1);
    if (!p) return NULL;
    memcpy(p, s.p, s.len);
    p[s.len] = 0;
    return p;
}

/* Reads one value of type `t` (scalar, string or array) at the cursor into kv (kv may be NULL: skip). */
static cmf_status rd_value(cursor *c, int t, cmf_gguf_kv *kv, const char *key, int depth) {
    cmf_status s;
    unsigned sz = vtype_size(t);
    if (sz) {
        uint64_t raw;
        if ((s = rd_uint(c, sz, &raw, key))) return s;
        if (!kv) return CMF_OK;
        switch (t) {
        case CMF_GGUF_I8: kv->v.i = (int8_t)raw; break;
        case CMF_GGUF_I16: kv->v.i = (int16_t)raw; break;
        case CMF_GGUF_I32: kv->v.i = (int32_t)raw; break;
        case CMF_GGUF_I64: kv->v.i = (int64_t)raw; break;
        case CMF_GGUF_F32: {
            uint32_t b = (uint32_t)raw;
            float f;
            memcpy(&f, &b, 4);
            kv->v.f = f;
            break;
        }
        case CMF_GGUF_F64: memcpy(&kv->v.f, &raw, 8); break;
        default: kv->v.u = raw;
        }
        return CMF_OK;
    }
    if (t == CMF_GGUF_STRING) {
        cmf_gguf_str str;
        if ((s = rd_str(c, &str, key))) return s;
        if (kv) kv->str = str;
        return CMF_OK;
    }
    if (t != CMF_GGUF_ARRAY)
        return cmf_err(CMF_E_FORMAT, "%s: offset %llu: key '%s': unknown value type %d", c->path,
                       (unsigned long long)c->pos, key, t);
    if (depth >= GGUF_MAX_ARRAY_DEPTH)
        return cmf_err(CMF_E_FORMAT, "%s: key '%s': arrays nested deeper than %d", c->path, key, GGUF_MAX_ARRAY_DEPTH);
    uint64_t et, n;
    if ((s = rd_uint(c, 4, &et, key)) || (s = rd_uint(c, 8, &n, key))) return s;
    unsigned esz = vtype_size((int)et);
    if (!esz && et != CMF_GGUF_STRING && et != CMF_GGUF_ARRAY)
        return cmf_err(CMF_E_FORMAT, "%s: key '%s': unknown array element type %llu", c->path, key,
                       (unsigned long long)et);
    /* Each element takes at least 1 byte (8 for a string's length, 12 for a nested array's header). */
    uint64_t min = esz ? esz : et == CMF_GGUF_STRING ? 8 : 12;
    if (n > (c->size - c->pos) / min)
        return cmf_err(CMF_E_FORMAT, "%s: offset %llu: key '%s': array count %llu exceeds the file", c->path,
                       (unsigned long long)c->pos, key, (unsigned long long)n);
    if (kv) {
        kv->arr_type = (int)et;
        kv->arr_n = n;
        kv->arr_data = c->base + c->pos;
    }
    if (esz) {
        c->pos += n * esz;
        return CMF_OK;
    }
    if (et == CMF_GGUF_STRING && kv) {
        kv->arr_strs = malloc((n ? n : 1) * sizeof *kv->arr_strs);
        if (!kv->arr_strs) return cmf_err(CMF_E_NOMEM, "%s: key '%s': out of memory", c->path, key);
    }
    for (uint64_t i = 0; i < n; i++) {
        if (et == CMF_GGUF_STRING) {
            cmf_gguf_str str;
            if ((s = rd_str(c, &str, key))) return s;
            if (kv) kv->arr_strs[i] = str;
        } else if ((s = rd_value(c, (int)et, NULL, key, depth + 1))) {
            return s;
        }
    }
    return CMF_OK;
}

void cmf_gguf_close(cmf_gguf *g) {
    if (!g) return;
    for (size_t i = 0; i < g->n_kv; i++) {
        free(g->kv[i].key);
        free(g->kv[i].arr_strs);
    }
    free(g->kv);
    for (size_t i = 0; i < g->n_tensors; i++) free(g->tensors[i].name);
    free(g->tensors);
    cmf_mmap_close(&g->map);
    free(g->path);
    free(g);
}

static cmf_status read_kvs(cmf_gguf *g, cursor *c, uint64_t n_kv) {
    /* a pair takes at least 8 (key length) + 4 (type) + 1 bytes */
    if (n_kv > (c->size - c->pos) / 13)
        return cmf_err(CMF_E_FORMAT, "%s: metadata count %llu exceeds the file", g->path, (unsigned long long)n_kv);
    g->kv = calloc(n_kv ? n_kv : 1, sizeof *g->kv);
    if (!g->kv) return cmf_err(CMF_E_NOMEM, "%s: out of memory", g->path);
    for (uint64_t i = 0; i < n_kv; i++) {
        cmf_gguf_kv *kv = &g->kv[i];
        cmf_gguf_str k;
        uint64_t t;
        cmf_status s = rd_str(c, &k, "metadata key");
        if (s) return s;
        if (!(kv->key = str_dup(k))) return cmf_err(CMF_E_NOMEM, "%s: out of memory", g->path);
        g->n_kv = i + 1;
        if (strlen(kv->key) != k.len)
            return cmf_err(CMF_E_FORMAT, "%s: metadata key %llu contains a NUL byte", g->path, (unsigned long long)i);
        for (uint64_t j = 0; j < i; j++)
            if (strcmp(g->kv[j].key, kv->key) == 0)
                return cmf_err(CMF_E_FORMAT, "%s: metadata key '%s' appears twice", g->path, kv->key);
        if ((s = rd_uint(c, 4, &t, kv->key))) return s;
        kv->type = (int)t;
        if ((s = rd_value(c, kv->type, kv, kv->key, 0))) return s;
    }
    return CMF_OK;
}

static cmf_status read_tensor_infos(cmf_gguf *g, cursor *c, uint64_t n_t) {
    /* an info takes at least 8 (name) + 4 (n_dims) + 8 (one dim) + 4 (type) + 8 (offset) bytes */
    if (n_t > (c->size - c->pos) / 32)
        return cmf_err(CMF_E_FORMAT, "%s: tensor count %llu exceeds the file", g->path, (unsigned long long)n_t);
    g->tensors = calloc(n_t ? n_t : 1, sizeof *g->tensors);
    if (!g->tensors) return cmf_err(CMF_E_NOMEM, "%s: out of memory", g->path);
    for (uint64_t i = 0; i < n_t; i++) {
        cmf_gguf_tensor *t = &g->tensors[i];
        cmf_gguf_str nm;
        uint64_t nd, ty;
        cmf_status s = rd_str(c, &nm, "tensor name");
        if (s) return s;
        if (!(t->name = str_dup(nm))) return cmf_err(CMF_E_NOMEM, "%s: out of memory", g->path);
        g->n_tensors = i + 1;
        if ((s = rd_uint(c, 4, &nd, t->name))) return s;
        if (nd < 1 || nd > 4)
            return cmf_err(CMF_E_FORMAT, "%s: tensor '%s': n_dims %llu (must be 1..4)", g->path, t->name,
                           (unsigned long long)nd);
        t->ndim = (int)nd;
        for (int d = 0; d < t->ndim; d++)
            if ((s = rd_uint(c, 8, &t->ne[d], t->name))) return s;
        if ((s = rd_uint(c, 4, &ty, t->name)) || (s = rd_uint(c, 8, &t->offset, t->name))) return s;
        t->type = (int)ty;
        int ti = ggml_type_index(t->type);
        if (ti < 0 || ty > 1000)
            return cmf_err(CMF_E_UNSUPPORTED, "%s: tensor '%s': unknown ggml type %llu", g->path, t->name,
                           (unsigned long long)ty);
        uint64_t n = 1;
        for (int d = 0; d < t->ndim; d++) {
            if (t->ne[d] == 0 || t->ne[d] > (1ull << 40) || n > (1ull << 62) / t->ne[d])
                return cmf_err(CMF_E_FORMAT, "%s: tensor '%s': bad dimension ne[%d] = %llu", g->path, t->name, d,
                               (unsigned long long)t->ne[d]);
            n *= t->ne[d];
        }
        if (t->ne[0] % GGML_TYPES[ti].blck)
            return cmf_err(CMF_E_FORMAT, "%s: tensor '%s': ne[0] = %llu is not a multiple of the %s block (%u)",
                           g->path, t->name, (unsigned long long)t->ne[0], GGML_TYPES[ti].name, GGML_TYPES[ti].blck);
        t->nbytes = n / GGML_TYPES[ti].blck * GGML_TYPES[ti].size;
        for (uint64_t j = 0; j < i; j++)
            if (strcmp(g->tensors[j].name, t->name) == 0)
                return cmf_err(CMF_E_FORMAT, "%s: tensor name '%s' appears twice", g->path, t->name);
    }
    return CMF_OK;
}

cmf_status cmf_gguf_open(const char *path, cmf_gguf **out) {
    if (!path || !out) return cmf_err(CMF_E_ARG, "cmf_gguf_open: NULL argument");
    *out = NULL;
    cmf_gguf *g = calloc(1, sizeof *g);
    if (!g || !(g->path = strdup(path))) {
        free(g);
        return cmf_err(CMF_E_NOMEM, "out of memory");
    }
    cmf_status s = cmf_mmap_open(path, &g->map);
    cursor c = {g->map.data, 0, g->map.size, g->path};
    uint64_t magic = 0, ver = 0, n_t = 0, n_kv = 0;
    if (!s) s = rd_uint(&c, 4, &magic, "magic");
    if (!s && magic != 0x46554747u) /* "GGUF" */
        s = cmf_err(CMF_E_FORMAT, "%s: bad magic 0x%08llx (not a GGUF file)", path, (unsigned long long)magic);
    if (!s) s = rd_uint(&c, 4, &ver, "version");
    if (!s && (ver < 2 || ver > 3))
        s = cmf_err(CMF_E_UNSUPPORTED, "%s: GGUF version %llu (supported: 2, 3)", path, (unsigned long long)ver);
    g->version = (uint32_t)ver;
    if (!s) s = rd_uint(&c, 8, &n_t, "tensor count");
    if (!s) s = rd_uint(&c, 8, &n_kv, "metadata count");
    if (!s) s = read_kvs(g, &c, n_kv);
    if (!s) s = read_tensor_infos(g, &c, n_t);
    g->alignment = GGUF_DEFAULT_ALIGNMENT;
    const cmf_gguf_kv *al = s ? NULL : cmf_gguf_kv_find(g, "general.alignment");
    if (al) {
        if (al->type != CMF_GGUF_U32 || al->v.u == 0 || (al->v.u & (al->v.u - 1)))
            s = cmf_err(CMF_E_FORMAT, "%s: general.alignment must be a u32 power of two", path);
        else
            g->alignment = al->v.u;
    }
    if (!s) {
        uint64_t start = (c.pos + g->alignment - 1) / g->alignment * g->alignment;
        if (start > c.size)
            s = cmf_err(CMF_E_FORMAT, "%s: data section at %llu starts past the end of the file (%llu bytes)", path,
                        (unsigned long long)start, (unsigned long long)c.size);
        else {
            g->data = c.base + start;
            g->data_len = c.size - start;
        }
    }
    for (size_t i = 0; !s && i < g->n_tensors; i++) {
        cmf_gguf_tensor *t = &g->tensors[i];
        if (t->offset % g->alignment)
            s = cmf_err(CMF_E_FORMAT, "%s: tensor '%s': offset %llu is not a multiple of the alignment %llu", path,
                        t->name, (unsigned long long)t->offset, (unsigned long long)g->alignment);
        else if (t->offset > g->data_len || t->nbytes > g->data_len - t->offset)
            s = cmf_err(CMF_E_FORMAT, "%s: tensor '%s': bytes [%llu, +%llu) past the end of the data (%llu bytes)",
                        path, t->name, (unsigned long long)t->offset, (unsigned long long)t->nbytes,
                        (unsigned long long)g->data_len);
        else
            t->data = g->data + t->offset;
    }
    if (s) {
        cmf_gguf_close(g);
        return s;
    }
    *out = g;
    return CMF_OK;
}

const cmf_gguf_kv *cmf_gguf_kv_find(const cmf_gguf *g, const char *key) {
    for (size_t i = 0; g && key && i < g->n_kv; i++)
        if (strcmp(g->kv[i].key, key) == 0) return &g->kv[i];
    return NULL;
}

int cmf_gguf_get_int(const cmf_gguf *g, const char *key, int64_t *out) {
    const cmf_gguf_kv *kv = cmf_gguf_kv_find(g, key);
    if (!kv) return 0;
    switch (kv->type) {
    case CMF_GGUF_U8: case CMF_GGUF_U16: case CMF_GGUF_U32: case CMF_GGUF_U64: case CMF_GGUF_BOOL:
        *out = (int64_t)kv->v.u;
        return 1;
    case CMF_GGUF_I8: case CMF_GGUF_I16: case CMF_GGUF_I32: case CMF_GGUF_I64:
        *out = kv->v.i;
        return 1;
    default: return 0;
    }
}

int cmf_gguf_get_float(const cmf_gguf *g, const char *key, double *out) {
    const cmf_gguf_kv *kv = cmf_gguf_kv_find(g, key);
    if (kv && (kv->type == CMF_GGUF_F32 || kv->type == CMF_GGUF_F64)) {
        *out = kv->v.f;
        return 1;
    }
    int64_t i;
    if (kv && kv->type != CMF_GGUF_BOOL && cmf_gguf_get_int(g, key, &i)) {
        *out = (double)i;
        return 1;
    }
    return 0;
}

char *cmf_gguf_get_str(const cmf_gguf *g, const char *key) {
    const cmf_gguf_kv *kv = cmf_gguf_kv_find(g, key);
    return kv && kv->type == CMF_GGUF_STRING ? str_dup(kv->str) : NULL;
}

double cmf_gguf_arr_num(const cmf_gguf_kv *kv, uint64_t i) {
    if (!kv || kv->type != CMF_GGUF_ARRAY || i >= kv->arr_n) return 0;
    unsigned sz = vtype_size(kv->arr_type);
    if (!sz) return 0;
    uint64_t raw = le(kv->arr_data + i * sz, sz);
    switch (kv->arr_type) {
    case CMF_GGUF_I8: return (int8_t)raw;
    case CMF_GGUF_I16: return (int16_t)raw;
    case CMF_GGUF_I32: return (int32_t)raw;
    case CMF_GGUF_I64: return (double)(int64_t)raw;
    case CMF_GGUF_F32: {
        uint32_t b = (uint32_t)raw;
        float f;
        memcpy(&f, &b, 4);
        return f;
    }
    case CMF_GGUF_F64: {
        double d;
        memcpy(&d, &raw, 8);
        return d;
    }
    default: return (double)raw;
    }
}

const cmf_gguf_tensor *cmf_gguf_tensor_find(const cmf_gguf *g, const char *name) {
    for (size_t i = 0; g && name && i < g->n_tensors; i++)
        if (strcmp(g->tensors[i].name, name) == 0) return &g->tensors[i];
    return NULL;
}

uint64_t cmf_gguf_numel(const cmf_gguf_tensor *t) {
    uint64_t n = 1;
    for (int d = 0; d < t->ndim; d++) n *= t->ne[d];
    return n;
}

static float half_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h >> 15) << 31, e = (h >> 10) & 0x1f, m = h & 0x3ff, bits;
    if (e == 0) {
        float v = ldexpf((float)m, -24);
        return sign ? -v : v;
    }
    bits = e == 31 ? sign | 0x7f800000u | (m << 13) : sign | ((e + 112) << 23) | (m << 13);
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

cmf_status cmf_gguf_tensor_f32(const cmf_gguf_tensor *t, float *out) {
    uint64_t n = cmf_gguf_numel(t);
    switch (t->type) {
    case CMF_GGML_F32:
        for (uint64_t i = 0; i < n; i++) {
            uint32_t b = (uint32_t)le(t->data + 4 * i, 4);
            memcpy(&out[i], &b, 4);
        }
        return CMF_OK;
    case CMF_GGML_F16:
    case CMF_GGML_BF16:
        for (uint64_t i = 0; i < n; i++) {
            uint16_t h = (uint16_t)le(t->data + 2 * i, 2);
            if (t->type == CMF_GGML_F16)
                out[i] = half_to_f32(h);
            else {
                uint32_t b = (uint32_t)h << 16;
                memcpy(&out[i], &b, 4);
            }
        }
        return CMF_OK;
    case CMF_GGML_Q8_0: /* 32 elements: f16 d, int8 q[32]; x = q·d */
        for (uint64_t b = 0; b < n / 32; b++) {
            const uint8_t *blk = t->data + 34 * b;
            float d = half_to_f32((uint16_t)le(blk, 2));
            for (int j = 0; j < 32; j++) out[32 * b + (uint64_t)j] = (float)(int8_t)blk[2 + j] * d;
        }
        return CMF_OK;
    case CMF_GGML_Q4_0: /* 32 elements: f16 d, qs[16]; x_j = ((qs[j] & 15) - 8)·d, x_{j+16} = ((qs[j] >> 4) - 8)·d */
        for (uint64_t b = 0; b < n / 32; b++) {
            const uint8_t *blk = t->data + 18 * b;
            float d = half_to_f32((uint16_t)le(blk, 2));
            for (int j = 0; j < 16; j++) {
                out[32 * b + (uint64_t)j] = (float)((blk[2 + j] & 15) - 8) * d;
                out[32 * b + (uint64_t)j + 16] = (float)((blk[2 + j] >> 4) - 8) * d;
            }
        }
        return CMF_OK;
    default:
        if (cmf_gguf_dequant_blocks(t->type, t->data, n, out)) return CMF_OK;
        return cmf_err(CMF_E_UNSUPPORTED,
                       "tensor '%s': ggml type %s is not supported (F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, "
                       "Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, Q8_K, IQ4_NL and IQ4_XS only; requantize the GGUF with "
                       "llama-quantize, e.g. to Q4_K_M or Q8_0)", t->name, cmf_gguf_type_name(t->type));
    }
}

int cmf_gguf_type_decodable(int type) {
    switch (type) {
    case CMF_GGML_F32: case CMF_GGML_F16: case CMF_GGML_BF16: case CMF_GGML_Q4_0: case CMF_GGML_Q4_1:
    case CMF_GGML_Q5_0: case CMF_GGML_Q5_1: case CMF_GGML_Q8_0: case CMF_GGML_Q2_K: case CMF_GGML_Q3_K:
    case CMF_GGML_Q4_K: case CMF_GGML_Q5_K: case CMF_GGML_Q6_K: case CMF_GGML_Q8_K: case CMF_GGML_IQ4_NL:
    case CMF_GGML_IQ4_XS: return 1;
    default: return 0;
    }
}

const char *cmf_gguf_type_name(int type) {
    int ti = ggml_type_index(type);
    return ti >= 0 ? GGML_TYPES[ti].name : "?";
}

cmf_status cmf_gguf_q4_0_to_q4_tiled(const cmf_gguf_tensor *t, uint8_t *dst) {
    if (t->type != CMF_GGML_Q4_0) return cmf_err(CMF_E_ARG, "tensor '%s': not a Q4_0 tensor", t->name);
    uint64_t nb = t->nbytes / 18, bad = 0, first_bad = 0;
    for (uint64_t b = 0; b < nb; b++) {
        const uint8_t *src = t->data + 18 * b;
        uint8_t *o = dst + 18 * b;
        /* an inf/NaN f16 scale (exponent bits all set) makes the block's 32 values NaN/inf, refused as the decoded
         * path refuses them for a quantized target (cmf_emit_check_values) */
        if ((src[1] & 0x7c) == 0x7c && !bad++) first_bad = b;
        o[0] = src[0]; /* the f16 scale, unchanged */
        o[1] = src[1];
        for (int k = 0; k < 16; k++) {
            int j0 = 2 * k, j1 = 2 * k + 1; /* elements 2k, 2k+1 of the block */
            int lo = j0 < 16 ? src[2 + j0] & 15 : src[2 + j0 - 16] >> 4;
            int hi = j1 < 16 ? src[2 + j1] & 15 : src[2 + j1 - 16] >> 4;
            o[2 + k] = (uint8_t)(lo | hi << 4);
        }
    }
    if (bad)
        return cmf_err(CMF_E_FORMAT, "%llu Q4_0 block(s) have a NaN/inf scale (first: block %llu, elements %llu..%llu), "
                                     "which q4_tiled cannot encode",
                       (unsigned long long)bad, (unsigned long long)first_bad,
                       (unsigned long long)(32 * first_bad), (unsigned long long)(32 * first_bad + 31));
    return CMF_OK;
}
