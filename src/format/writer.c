/* writer.c — the CMF v2 writer (CMF_FORMAT.md §1.12). Tensor payloads stream to "<path>.blob.tmp" as they are
 * added (at the §1.6 alignment); cmf_writer_finish then writes "<path>.tmp" — envelope, header, directory,
 * zero padding to the 4096-aligned data_off, blob, masks, vocab — fsyncs it and renames it to <path>. Every
 * failure removes both temporaries and leaves <path> untouched. No sparse index is written (§1.9: deprecated;
 * readers must not need it). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "format/format.h"
#include "quant/dtype.h"
#include "util/error.h"
#include "util/fileio.h"

typedef struct wrec {
    char *name;
    size_t name_len;
    uint8_t dtype, ndim;
    uint32_t shape[CMF_MAX_DIMS];
    uint64_t off, nbytes, hash;
} wrec;

struct cmf_writer {
    char *path, *tmp, *blob_path;
    FILE *blob;
    uint64_t cursor; /* blob length so far */
    wrec *recs;
    size_t n, cap;
    uint32_t *index; /* open addressing: record index + 1, 0 = empty */
    size_t index_cap;
    cJSON *header;
    uint8_t *vocab, *masks;
    size_t vocab_len, masks_len;
    int loop_masks, any_2f;
    cmf_status (*check)(void *ctx, const char *tmp_path); /* cmf_writer_set_check */
    void *check_ctx;
};

static char *concat(const char *a, const char *b) {
    size_t la = strlen(a), lb = strlen(b);
    char *s = malloc(la + lb + 1);
    if (!s) return NULL;
    memcpy(s, a, la);
    memcpy(s + la, b, lb + 1);
    return s;
}

static void writer_free(cmf_writer *w) {
    if (w->blob) fclose(w->blob);
    if (w->blob_path) remove(w->blob_path);
    for (size_t i = 0; i < w->n; i++) free(w->recs[i].name);
    free(w->recs);
    free(w->index);
    cJSON_Delete(w->header);
    free(w->vocab);
    free(w->masks);
    free(w->path);
    free(w->tmp);
    free(w->blob_path);
    free(w);
}

void cmf_writer_abort(cmf_writer *w) {
    if (w) writer_free(w);
}

cmf_status cmf_writer_check_source(const char *out_path, const char *src_path, const char *what) {
    static const char *const SUFFIX[] = {"", ".tmp", ".blob.tmp"};
    for (int i = 0; i < 3; i++) {
        char o[4096];
        int k = snprintf(o, sizeof o, "%s%s", out_path, SUFFIX[i]);
        if (k > 0 && (size_t)k < sizeof o && cmf_same_file(o, src_path))
            return cmf_err(CMF_E_ARG, "-o %s%s%s would replace %s, which this %s reads; write the CMF file elsewhere",
                           out_path, i ? ": its temporary file " : "", i ? o : "", src_path, what);
    }
    return CMF_OK;
}

cmf_status cmf_writer_new(const char *path, cmf_writer **out) {
    if (!path || !out) return cmf_err(CMF_E_ARG, "cmf_writer_new: NULL argument");
    *out = NULL;
    cmf_status chk = cmf_check_output_path(path);
    if (chk != CMF_OK) return chk;
    cmf_writer *w = calloc(1, sizeof *w);
    if (!w) return cmf_err(CMF_E_NOMEM, "cmf_writer_new: out of memory");
    w->path = concat(path, "");
    w->tmp = concat(path, ".tmp");
    w->blob_path = concat(path, ".blob.tmp");
    w->index_cap = 64;
    w->index = calloc(w->index_cap, sizeof *w->index);
    if (!w->path || !w->tmp || !w->blob_path || !w->index) {
        writer_free(w);
        return cmf_err(CMF_E_NOMEM, "cmf_writer_new: out of memory");
    }
    w->blob = fopen(w->blob_path, "wb+");
    if (!w->blob) {
        free(w->blob_path); /* nothing was created: do not remove a file we do not own */
        w->blob_path = NULL;
        cmf_status st = cmf_err(CMF_E_IO, "cannot create %s.blob.tmp: %s", path, strerror(errno));
        writer_free(w);
        return st;
    }
    *out = w;
    return CMF_OK;
}

/* Slot of `name` in the writer's name table (the slot holding it, or the empty one where it would go). */
static size_t wslot(const cmf_writer *w, const char *name, size_t len) {
    size_t mask = w->index_cap - 1, i = (size_t)cmf_hash64(name, len) & mask;
    while (w->index[i]) {
        const wrec *r = &w->recs[w->index[i] - 1];
        if (r->name_len == len && memcmp(r->name, name, len) == 0) break;
        i = (i + 1) & mask;
    }
    return i;
}

static cmf_status grow(cmf_writer *w) {
    if (w->n == w->cap) {
        size_t cap = w->cap ? w->cap * 2 : 64;
        wrec *r = realloc(w->recs, cap * sizeof *r);
        if (!r) return cmf_err(CMF_E_NOMEM, "cmf_writer_add: out of memory");
        w->recs = r, w->cap = cap;
    }
    if (2 * (w->n + 1) > w->index_cap) {
        size_t cap = w->index_cap * 2;
        uint32_t *old = w->index;
        w->index = calloc(cap, sizeof *w->index);
        if (!w->index) {
            w->index = old;
            return cmf_err(CMF_E_NOMEM, "cmf_writer_add: out of memory");
        }
        free(old);
        w->index_cap = cap;
        for (size_t i = 0; i < w->n; i++) w->index[wslot(w, w->recs[i].name, w->recs[i].name_len)] = (uint32_t)(i + 1);
    }
    return CMF_OK;
}

static cmf_status write_zeros(FILE *fp, uint64_t n) {
    static const uint8_t z[4096];
    while (n) {
        size_t k = n < sizeof z ? (size_t)n : sizeof z;
        if (fwrite(z, 1, k, fp) != k) return cmf_err(CMF_E_IO, "write failed: %s", strerror(errno));
        n -= k;
    }
    return CMF_OK;
}

cmf_status cmf_writer_add(cmf_writer *w, const char *name, int dtype, int ndim, const uint32_t *shape,
                          const void *data, uint64_t nbytes) {
    if (!w || !name) return cmf_err(CMF_E_ARG, "cmf_writer_add: NULL argument");
    size_t nl = strlen(name);
    if (nl > 65535) return cmf_err(CMF_E_ARG, "cmf_writer_add: name of %zu bytes is longer than 65535", nl);
    if (cmf_utf8_invalid_at((const uint8_t *)name, nl) != nl)
        return cmf_err(CMF_E_ARG, "cmf_writer_add: tensor name \"%.200s\" is not valid UTF-8", name);
    if (dtype < 0 || dtype >= CMF_DT_COUNT)
        return cmf_err(CMF_E_ARG, "cmf_writer_add: tensor \"%.200s\": unknown dtype id %d", name, dtype);
    if (ndim < 0 || ndim > CMF_MAX_DIMS || (ndim > 0 && !shape))
        return cmf_err(CMF_E_ARG, "cmf_writer_add: tensor \"%.200s\": bad ndim %d", name, ndim);
    if (nbytes > 0 && !data) return cmf_err(CMF_E_ARG, "cmf_writer_add: tensor \"%.200s\": NULL data", name);
    uint64_t want;
    int k = cmf_dtype_nbytes(dtype, ndim, shape, &want);
    if (k < 0) return cmf_err(CMF_E_ARG, "cmf_writer_add: tensor \"%.200s\": shape product overflows", name);
    if (k > 0 && want != nbytes)
        return cmf_err(CMF_E_ARG, "cmf_writer_add: tensor \"%.200s\": nbytes %llu, but %s of this shape needs %llu",
                       name, (unsigned long long)nbytes, cmf_dtype_name(dtype), (unsigned long long)want);
    if (k == 0) {
        cmf_status st = cmf_dtype_check_payload(dtype, ndim, shape, data, nbytes);
        if (st) return cmf_err_prefix(CMF_E_ARG, "cmf_writer_add: tensor \"%.200s\": ", name);
    }
    if (w->index[wslot(w, name, nl)])
        return cmf_err(CMF_E_ARG, "cmf_writer_add: duplicate tensor name \"%.200s\"", name);
    cmf_status st = grow(w);
    if (st) return st;
    uint64_t align = nbytes >= 16384 ? 4096 : 64;
    uint64_t off = (w->cursor + align - 1) / align * align;
    errno = 0;
    if (write_zeros(w->blob, off - w->cursor) || (nbytes && fwrite(data, 1, (size_t)nbytes, w->blob) != nbytes))
        return cmf_err(CMF_E_IO, "cmf_writer_add: writing %s.blob.tmp failed: %s", w->path,
                       errno ? strerror(errno) : "short write");
    wrec *r = &w->recs[w->n];
    memset(r, 0, sizeof *r);
    r->name = concat(name, "");
    if (!r->name) return cmf_err(CMF_E_NOMEM, "cmf_writer_add: out of memory");
    r->name_len = nl;
    r->dtype = (uint8_t)dtype;
    r->ndim = (uint8_t)ndim;
    for (int i = 0; i < ndim; i++) r->shape[i] = shape[i];
    r->off = off;
    r->nbytes = nbytes;
    r->hash = cmf_hash64(data, (size_t)nbytes);
    w->cursor = off + nbytes;
    w->index[wslot(w, name, nl)] = (uint32_t)(w->n + 1);
    w->n++;
    if (dtype == CMF_DT_Q8_2F || dtype == CMF_DT_VBIT) w->any_2f = 1;
    return CMF_OK;
}

void cmf_writer_set_header(cmf_writer *w, cJSON *header) {
    if (!w) {
        cJSON_Delete(header);
        return;
    }
    cJSON_Delete(w->header);
    w->header = header;
}

static cmf_status set_bytes(uint8_t **dst, size_t *dlen, const void *data, size_t len) {
    free(*dst);
    *dst = NULL;
    *dlen = 0;
    if (!data || !len) return CMF_OK;
    *dst = malloc(len);
    if (!*dst) return cmf_err(CMF_E_NOMEM, "cmf_writer: cannot copy a %zu-byte section", len);
    memcpy(*dst, data, len);
    *dlen = len;
    return CMF_OK;
}

cmf_status cmf_writer_set_vocab(cmf_writer *w, const void *data, size_t len) {
    if (!w) return cmf_err(CMF_E_ARG, "cmf_writer_set_vocab: NULL writer");
    return set_bytes(&w->vocab, &w->vocab_len, data, len);
}

cmf_status cmf_writer_set_masks(cmf_writer *w, const void *data, size_t len, int loop_masks) {
    if (!w) return cmf_err(CMF_E_ARG, "cmf_writer_set_masks: NULL writer");
    w->loop_masks = loop_masks;
    return set_bytes(&w->masks, &w->masks_len, data, len);
}

static void wr32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static void wr64(uint8_t *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}

/* Directory bytes (§1.5, §1.12 step 3): head, records, names concatenated in record order. */
static uint8_t *build_dir(const cmf_writer *w, uint64_t *len) {
    uint64_t names = 0;
    for (size_t i = 0; i < w->n; i++) names += w->recs[i].name_len;
    uint64_t pool_off = 16 + 56 * (uint64_t)w->n;
    uint8_t *d = calloc(1, (size_t)(pool_off + names));
    if (!d) return NULL;
    wr64(d, w->n);
    wr64(d + 8, pool_off);
    uint64_t no = 0;
    for (size_t i = 0; i < w->n; i++) {
        const wrec *r = &w->recs[i];
        uint8_t *p = d + 16 + 56 * i;
        wr32(p, (uint32_t)no);
        p[4] = (uint8_t)r->name_len;
        p[5] = (uint8_t)(r->name_len >> 8);
        p[6] = r->dtype;
        p[7] = r->ndim;
        for (int k = 0; k < CMF_MAX_DIMS; k++) wr32(p + 8 + 4 * k, r->shape[k]);
        wr64(p + 32, r->off);
        wr64(p + 40, r->nbytes);
        wr64(p + 48, r->hash);
        memcpy(d + pool_off + no, r->name, r->name_len);
        no += r->name_len;
    }
    *len = pool_off + names;
    return d;
}

static cmf_status put_hash(cJSON *obj, const char *key, const void *p, size_t n) {
    char hex[17];
    snprintf(hex, sizeof hex, "%016llx", (unsigned long long)cmf_hash64(p, n));
    if (!cJSON_AddStringToObject(obj, key, hex)) return cmf_err(CMF_E_NOMEM, "cmf_writer_finish: out of memory");
    return CMF_OK;
}

static cmf_status write_all(FILE *fp, const void *p, size_t n, const char *what) {
    errno = 0;
    if (n && fwrite(p, 1, n, fp) != n)
        return cmf_err(CMF_E_IO, "cmf_writer_finish: writing the %s failed: %s", what,
                       errno ? strerror(errno) : "short write");
    return CMF_OK;
}

/* Everything of finish that can fail; the caller removes temporaries on error. */
static cmf_status finish(cmf_writer *w, FILE **fpp) {
    cmf_status st;
    if (!w->header) return cmf_err(CMF_E_ARG, "cmf_writer_finish: no header set");
    cJSON *arch = cJSON_GetObjectItemCaseSensitive(w->header, "arch");
    /* §1.12 step 5: section_hashes for the present sections, replacing any stale object. */
    cJSON_DeleteItemFromObjectCaseSensitive(w->header, "section_hashes");
    if (w->masks_len || w->vocab_len) {
        cJSON *sh = cJSON_AddObjectToObject(w->header, "section_hashes");
        if (!sh) return cmf_err(CMF_E_NOMEM, "cmf_writer_finish: out of memory");
        if (w->masks_len && (st = put_hash(sh, "masks", w->masks, w->masks_len))) return st;
        if (w->vocab_len && (st = put_hash(sh, "vocab", w->vocab, w->vocab_len))) return st;
    }
    /* Never write a file our own reader (and cortiq's) would refuse. */
    if ((st = cmf_header_check(w->header, CMF_ENVELOPE_SIZE)))
        return cmf_err_prefix(CMF_E_ARG, "cmf_writer_finish: ");
    uint64_t loops = 1;
    cJSON *nl = cJSON_GetObjectItemCaseSensitive(arch, "num_loops");
    if (cJSON_IsNumber(nl) && nl->valuedouble > 1) loops = (uint64_t)nl->valuedouble;
    if (w->masks_len) {
        if ((st = cmf_masks_check(arch, w->masks, w->masks_len, 0)))
            return cmf_err_prefix(CMF_E_ARG, "cmf_writer_finish: ");
        if (w->loop_masks && loops <= 1)
            return cmf_err(CMF_E_ARG, "cmf_writer_finish: loop-layout masks given but arch.num_loops <= 1");
    }
    uint32_t features = CMF_FEAT_TENSOR_DIR;
    if (w->any_2f) features |= CMF_FEAT_QUANT_2F;
    uint32_t n_masks = 0;
    if (w->masks_len >= 4) n_masks = (uint32_t)w->masks[0] | ((uint32_t)w->masks[1] << 8) |
                                     ((uint32_t)w->masks[2] << 16) | ((uint32_t)w->masks[3] << 24);
    if (n_masks > 0) features |= CMF_FEAT_BINARY_MASKS;
    if (n_masks > 0 && loops > 1) features |= CMF_FEAT_LOOP_MASKS;
    /* §1.3 bit 6: a skills[] record bound to a base (base_dir_hash) makes this a standalone skill file. */
    const cJSON *skills = cJSON_GetObjectItemCaseSensitive(w->header, "skills"), *rec;
    cJSON_ArrayForEach(rec, skills) {
        const cJSON *bdh = cJSON_GetObjectItemCaseSensitive(rec, "base_dir_hash");
        if (bdh && !cJSON_IsNull(bdh)) features |= CMF_FEAT_SKILL_FILE;
    }

    char *hjson = cJSON_PrintUnformatted(w->header);
    if (!hjson) return cmf_err(CMF_E_NOMEM, "cmf_writer_finish: cannot serialize the header");
    uint64_t dir_len;
    uint8_t *dir = build_dir(w, &dir_len);
    if (!dir) {
        free(hjson);
        return cmf_err(CMF_E_NOMEM, "cmf_writer_finish: cannot build the directory");
    }
    cmf_envelope e = {0};
    e.version = 2;
    e.features = features;
    e.header_off = CMF_ENVELOPE_SIZE;
    e.header_len = strlen(hjson);
    e.dir_off = e.header_off + e.header_len;
    e.dir_len = dir_len;
    e.data_off = (e.dir_off + dir_len + 4095) / 4096 * 4096;
    e.data_len = w->cursor;
    uint64_t end = e.data_off + e.data_len;
    if (w->masks_len) e.masks_off = end, e.masks_len = w->masks_len, end += w->masks_len;
    if (w->vocab_len) e.vocab_off = end, e.vocab_len = w->vocab_len, end += w->vocab_len;
    e.header_hash = cmf_hash64(hjson, (size_t)e.header_len);
    e.dir_hash = cmf_hash64(dir, (size_t)dir_len);
    uint8_t env[CMF_ENVELOPE_SIZE];
    cmf_envelope_encode(&e, env);

    FILE *fp = *fpp = fopen(w->tmp, "wb");
    if (!fp) st = cmf_err(CMF_E_IO, "cmf_writer_finish: cannot create %s: %s", w->tmp, strerror(errno));
    if (!st) st = write_all(fp, env, sizeof env, "envelope");
    if (!st) st = write_all(fp, hjson, (size_t)e.header_len, "header");
    if (!st) st = write_all(fp, dir, (size_t)dir_len, "directory");
    if (!st && write_zeros(fp, e.data_off - e.dir_off - dir_len)) st = cmf_err(CMF_E_IO, "cmf_writer_finish: padding");
    free(hjson);
    free(dir);
    if (st) return st;
    /* blob: copy the streamed temporary */
    if (fflush(w->blob) != 0 || fseek(w->blob, 0, SEEK_SET) != 0)
        return cmf_err(CMF_E_IO, "cmf_writer_finish: cannot rewind %s", w->blob_path);
    enum { CHUNK = 1 << 20 };
    uint8_t *buf = malloc(CHUNK);
    if (!buf) return cmf_err(CMF_E_NOMEM, "cmf_writer_finish: out of memory");
    uint64_t left = w->cursor;
    while (left && !st) {
        size_t k = left < CHUNK ? (size_t)left : CHUNK;
        if (fread(buf, 1, k, w->blob) != k)
            st = cmf_err(CMF_E_IO, "cmf_writer_finish: reading %s failed", w->blob_path);
        else
            st = write_all(fp, buf, k, "blob");
        left -= k;
    }
    free(buf);
    if (st) return st;
    if ((st = write_all(fp, w->masks, w->masks_len, "masks section"))) return st;
    if ((st = write_all(fp, w->vocab, w->vocab_len, "vocab section"))) return st;
    if (fflush(fp) != 0 || fsync(fileno(fp)) != 0)
        return cmf_err(CMF_E_IO, "cmf_writer_finish: flushing %s failed: %s", w->tmp, strerror(errno));
    *fpp = NULL;
    if (fclose(fp) != 0) return cmf_err(CMF_E_IO, "cmf_writer_finish: closing %s failed: %s", w->tmp, strerror(errno));
    if (w->check && (st = w->check(w->check_ctx, w->tmp)) != CMF_OK) return st;
    if (rename(w->tmp, w->path) != 0)
        return cmf_err(CMF_E_IO, "cannot rename %s to %s: %s", w->tmp, w->path, strerror(errno));
    return CMF_OK;
}

void cmf_writer_set_check(cmf_writer *w, cmf_status (*check)(void *ctx, const char *tmp_path), void *ctx) {
    if (!w) return;
    w->check = check;
    w->check_ctx = ctx;
}

cmf_status cmf_writer_finish(cmf_writer *w) {
    if (!w) return cmf_err(CMF_E_ARG, "cmf_writer_finish: NULL writer");
    FILE *fp = NULL;
    cmf_status st = finish(w, &fp);
    if (fp) fclose(fp);
    if (st) remove(w->tmp);
    writer_free(w); /* closes and removes the blob temporary */
    return st;
}
