/* open.c — cmf_file_open: map a CMF v2 file and run every check of CMF_FORMAT.md §1.11 (1–13) before handing
 * out a single pointer. Safe on hostile input: all offset arithmetic is overflow-checked, allocations are
 * bounded by the file size, and duplicate names are found with a hash table (O(n)). */
#include <stdlib.h>
#include <string.h>

#include "format/format.h"
#include "quant/dtype.h"
#include "util/error.h"

static uint32_t rd32(const uint8_t *p) {
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}
static uint64_t rd64(const uint8_t *p) { return (uint64_t)rd32(p) | ((uint64_t)rd32(p + 4) << 32); }
static void wr32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static void wr64(uint8_t *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}

void cmf_envelope_decode(const uint8_t *p, cmf_envelope *e) {
    e->version = rd32(p + 0x04);
    e->flags = rd32(p + 0x08);
    e->features = rd32(p + 0x0C);
    e->header_off = rd64(p + 0x10), e->header_len = rd64(p + 0x18);
    e->dir_off = rd64(p + 0x20), e->dir_len = rd64(p + 0x28);
    e->data_off = rd64(p + 0x30), e->data_len = rd64(p + 0x38);
    e->masks_off = rd64(p + 0x40), e->masks_len = rd64(p + 0x48);
    e->vocab_off = rd64(p + 0x50), e->vocab_len = rd64(p + 0x58);
    e->index_off = rd64(p + 0x60), e->index_len = rd64(p + 0x68);
    e->header_hash = rd64(p + 0x70), e->dir_hash = rd64(p + 0x78);
}

void cmf_envelope_encode(const cmf_envelope *e, uint8_t *p) {
    memset(p, 0, CMF_ENVELOPE_SIZE);
    memcpy(p, "CMF\x01", 4);
    wr32(p + 0x04, e->version);
    wr32(p + 0x08, e->flags);
    wr32(p + 0x0C, e->features);
    const uint64_t v[14] = {e->header_off, e->header_len, e->dir_off,   e->dir_len,     e->data_off,
                            e->data_len,   e->masks_off,  e->masks_len, e->vocab_off,   e->vocab_len,
                            e->index_off,  e->index_len,  e->header_hash, e->dir_hash};
    for (int i = 0; i < 14; i++) wr64(p + 0x10 + 8 * i, v[i]);
}

uint64_t cmf_tensor_numel(const cmf_tensor *t) {
    uint64_t n = 1;
    for (int i = 0; i < t->ndim; i++) n *= t->shape[i];
    return n;
}

void cmf_file_close(cmf_file *f) {
    if (!f) return;
    cmf_mmap_close(&f->map);
    cJSON_Delete(f->header);
    free(f->tensors);
    free(f->names);
    free(f->name_index);
    free(f->path);
    free(f);
}

/* Table slot of `name` (len bytes): the slot holding it, or the empty slot where it would go. */
static size_t slot_of(const cmf_file *f, const char *name, size_t len) {
    size_t mask = f->name_index_cap - 1, i = (size_t)cmf_hash64(name, len) & mask;
    for (;;) {
        uint32_t v = f->name_index[i];
        if (v == 0) return i;
        const char *s = f->tensors[v - 1].name;
        if (strncmp(s, name, len) == 0 && s[len] == 0) return i;
        i = (i + 1) & mask;
    }
}

const cmf_tensor *cmf_file_find(const cmf_file *f, const char *name) {
    if (!f || !name || !f->name_index_cap) return NULL;
    uint32_t v = f->name_index[slot_of(f, name, strlen(name))];
    return v ? &f->tensors[v - 1] : NULL;
}

/* §1.11 items 1–7: the envelope and section bounds. */
static cmf_status check_envelope(cmf_file *f) {
    const uint8_t *p = f->map.data;
    size_t size = f->map.size;
    if (size < CMF_ENVELOPE_SIZE)
        return cmf_err(CMF_E_FORMAT, "envelope@0x0: file is %zu bytes, shorter than the 128-byte envelope", size);
    if (memcmp(p, "GGUF", 4) == 0)
        return cmf_err(CMF_E_FORMAT, "envelope@0x0: bad magic 47 47 55 46 (\"GGUF\"): this is a GGUF file, not CMF; "
                                     "convert it first with `cmf convert FILE.gguf -o FILE.cmf`");
    if (memcmp(p, "CMF\x01", 4) != 0)
        return cmf_err(CMF_E_FORMAT, "envelope@0x0: bad magic %02x %02x %02x %02x (expected 43 4d 46 01)", p[0],
                       p[1], p[2], p[3]);
    cmf_envelope *e = &f->env;
    cmf_envelope_decode(p, e);
    if (e->version != 2)
        return cmf_err(CMF_E_UNSUPPORTED, "envelope@0x4: version %u is not supported (expected 2)", e->version);
    if (e->features & ~(uint32_t)CMF_FEAT_SUPPORTED)
        return cmf_err(CMF_E_UNSUPPORTED, "envelope@0xc: required_features 0x%x has unknown bit(s) 0x%x "
                       "(supported: 0x%x)", e->features, e->features & ~(uint32_t)CMF_FEAT_SUPPORTED,
                       CMF_FEAT_SUPPORTED);
    if (e->header_len == 0) return cmf_err(CMF_E_FORMAT, "envelope@0x18: header_len is 0");
    if (e->dir_len == 0) return cmf_err(CMF_E_FORMAT, "envelope@0x28: dir_len is 0");
    static const char *const names[6] = {"header", "dir", "data", "masks", "vocab", "index"};
    const uint64_t offs[6] = {e->header_off, e->dir_off, e->data_off, e->masks_off, e->vocab_off, e->index_off};
    const uint64_t lens[6] = {e->header_len, e->dir_len, e->data_len, e->masks_len, e->vocab_len, e->index_len};
    for (int i = 0; i < 6; i++) {
        if (lens[i] == 0) continue; /* absent: offset not looked at */
        if (offs[i] > size || lens[i] > size - offs[i])
            return cmf_err(CMF_E_FORMAT, "envelope@0x%x: %s section [off %llu, len %llu] runs past the end of the "
                           "file (size %zu)", 0x10 + 16 * i, names[i], (unsigned long long)offs[i],
                           (unsigned long long)lens[i], size);
    }
    if (e->data_len > 0 && e->data_off % 4096 != 0)
        return cmf_err(CMF_E_FORMAT, "envelope@0x30: data_off %llu is not a multiple of 4096",
                       (unsigned long long)e->data_off);
    return CMF_OK;
}

#define DERR(...) cmf_err(CMF_E_FORMAT, __VA_ARGS__)

/* §1.11 items 9–11: the directory (§1.5) and each tensor's placement and size. */
static cmf_status parse_directory(cmf_file *f) {
    const cmf_envelope *e = &f->env;
    const uint8_t *d = f->map.data + e->dir_off;
    unsigned long long D = (unsigned long long)e->dir_off;
    uint64_t dl = e->dir_len;
    if (dl < 16) return DERR("dir@0x%llx: dir_len %llu is shorter than the 16-byte directory head", D,
                             (unsigned long long)dl);
    uint64_t count = rd64(d), pool_off = rd64(d + 8);
    if (count > (dl - 16) / 56)
        return DERR("dir@0x%llx: count %llu: %llu-byte records do not fit in dir_len %llu", D,
                    (unsigned long long)count, 56ull, (unsigned long long)dl);
    if (count >= UINT32_MAX) return DERR("dir@0x%llx: count %llu is too large", D, (unsigned long long)count);
    uint64_t rec_end = 16 + 56 * count;
    if (pool_off < rec_end)
        return DERR("dir@0x%llx: pool_off %llu overlaps the records (they end at %llu)", D + 8,
                    (unsigned long long)pool_off, (unsigned long long)rec_end);
    if (pool_off > dl)
        return DERR("dir@0x%llx: pool_off %llu is past dir_len %llu", D + 8, (unsigned long long)pool_off,
                    (unsigned long long)dl);
    uint64_t pool_len = dl - pool_off;
    const uint8_t *pool = d + pool_off;

    /* Pass 1: name ranges, so that the name storage is bounded before allocating it. */
    uint64_t total = 0;
    for (uint64_t i = 0; i < count; i++) {
        const uint8_t *r = d + 16 + 56 * i;
        uint64_t no = rd32(r), nl = (uint64_t)r[4] | ((uint64_t)r[5] << 8);
        if (no > pool_len || nl > pool_len - no)
            return DERR("dir@0x%llx: record %llu: name range [%llu, +%llu) is outside the name pool (%llu bytes)",
                        D + 16 + 56 * i, (unsigned long long)i, (unsigned long long)no, (unsigned long long)nl,
                        (unsigned long long)pool_len);
        total += nl;
    }
    if (total > pool_len)
        return DERR("dir@0x%llx: names overlap: %llu name bytes in a %llu-byte pool", D + pool_off,
                    (unsigned long long)total, (unsigned long long)pool_len);

    f->n_tensors = (size_t)count;
    f->tensors = calloc(count ? count : 1, sizeof *f->tensors);
    f->names = malloc(total + count + 1);
    size_t cap = 16;
    while (cap < 2 * count) cap *= 2;
    f->name_index = calloc(cap, sizeof *f->name_index);
    f->name_index_cap = cap;
    if (!f->tensors || !f->names || !f->name_index)
        return cmf_err(CMF_E_NOMEM, "dir@0x%llx: cannot allocate %llu tensor entries", D, (unsigned long long)count);

    char *np = f->names;
    for (uint64_t i = 0; i < count; i++) {
        const uint8_t *r = d + 16 + 56 * i;
        unsigned long long R = D + 16 + 56 * i;
        uint32_t no = rd32(r);
        size_t nl = (size_t)(r[4] | (r[5] << 8));
        const uint8_t *nm = pool + no;
        size_t bad = cmf_utf8_invalid_at(nm, nl);
        if (bad != nl) return DERR("dir@0x%llx: record %llu: name is not valid UTF-8 (byte %zu)", R,
                                   (unsigned long long)i, bad);
        if (memchr(nm, 0, nl)) return DERR("dir@0x%llx: record %llu: name contains a NUL byte", R,
                                           (unsigned long long)i);
        memcpy(np, nm, nl);
        np[nl] = 0;
        cmf_tensor *t = &f->tensors[i];
        t->name = np;
        np += nl + 1;
        t->dtype = r[6];
        t->ndim = r[7];
        for (int k = 0; k < CMF_MAX_DIMS; k++) t->shape[k] = rd32(r + 8 + 4 * k);
        t->off = rd64(r + 32), t->nbytes = rd64(r + 40), t->hash = rd64(r + 48);
        if (t->dtype >= CMF_DT_COUNT)
            return DERR("dir@0x%llx: tensor \"%s\": unknown dtype id %u", R + 6, t->name, t->dtype);
        if (t->ndim > CMF_MAX_DIMS)
            return DERR("dir@0x%llx: tensor \"%s\": ndim %u is more than 6", R + 7, t->name, t->ndim);
        if (t->off % 64 != 0)
            return DERR("dir@0x%llx: tensor \"%s\": off %llu is not a multiple of 64", R + 32, t->name,
                        (unsigned long long)t->off);
        if (t->nbytes > e->data_len || t->off > e->data_len - t->nbytes)
            return DERR("dir@0x%llx: tensor \"%s\": [off %llu, nbytes %llu] runs past the blob (data_len %llu)", R + 32,
                        t->name, (unsigned long long)t->off, (unsigned long long)t->nbytes,
                        (unsigned long long)e->data_len);
        uint64_t want;
        int k = cmf_dtype_nbytes(t->dtype, t->ndim, t->shape, &want);
        if (k < 0) return DERR("dir@0x%llx: tensor \"%s\": shape product overflows", R + 8, t->name);
        if (k > 0 && want != t->nbytes)
            return DERR("dir@0x%llx: tensor \"%s\": nbytes %llu, but %s of this shape needs %llu", R + 40, t->name,
                        (unsigned long long)t->nbytes, cmf_dtype_name(t->dtype), (unsigned long long)want);
        t->data = e->data_len ? f->map.data + e->data_off + t->off : f->map.data;
        if (k == 0) {
            cmf_status st = cmf_dtype_check_payload(t->dtype, t->ndim, t->shape, t->data, t->nbytes);
            if (st) return cmf_err_prefix(st, "dir@0x%llx: tensor \"%s\": ", R, t->name);
        }
        size_t s = slot_of(f, t->name, nl);
        if (f->name_index[s])
            return DERR("dir@0x%llx: tensor \"%s\": duplicate name (also record %u)", R, t->name,
                        f->name_index[s] - 1);
        f->name_index[s] = (uint32_t)(i + 1);
    }
    return CMF_OK;
}

cmf_status cmf_file_open(const char *path, cmf_file **out) {
    if (out) *out = NULL;
    if (!path || !out) return cmf_err(CMF_E_ARG, "cmf_file_open: NULL argument");
    cmf_file *f = calloc(1, sizeof *f);
    if (!f) return cmf_err(CMF_E_NOMEM, "cmf_file_open: out of memory");
    size_t pl = strlen(path);
    f->path = malloc(pl + 1);
    if (!f->path) {
        free(f);
        return cmf_err(CMF_E_NOMEM, "cmf_file_open: out of memory");
    }
    memcpy(f->path, path, pl + 1);
    cmf_status st = cmf_mmap_open(path, &f->map);
    if (st) { /* the message already names the path */
        cmf_file_close(f);
        return st;
    }
    st = check_envelope(f);
    const cmf_envelope *e = &f->env;
    if (!st) st = cmf_header_parse(f->map.data + e->header_off, e->header_len, e->header_off, &f->header);
    if (!st) st = parse_directory(f);
    if (!st && e->masks_len) {
        f->masks = f->map.data + e->masks_off;
        st = cmf_masks_check(cJSON_GetObjectItemCaseSensitive(f->header, "arch"), f->masks, e->masks_len,
                             e->masks_off);
    }
    if (!st && e->vocab_len) f->vocab = f->map.data + e->vocab_off;
    if (!st && e->index_len) {
        f->index = f->map.data + e->index_off;
        st = cmf_index_check(f->index, e->index_len, e->index_off);
    }
    if (st) {
        cmf_err_prefix(st, "%s: ", path);
        cmf_file_close(f);
        return st;
    }
    *out = f;
    return CMF_OK;
}
