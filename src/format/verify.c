/* verify.c — cmf_file_verify (CMF_FORMAT.md §1.11 "verify()"): recompute hash64 of the header, the directory,
 * the sections named in header.section_hashes and every tensor payload, and list each mismatch on its own line. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "format/format.h"
#include "quant/dtype.h"
#include "util/error.h"

typedef struct report {
    char *buf;
    size_t len, cap;
    int n, oom;
    char first[256];
} report;

static void add(report *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void add(report *r, const char *fmt, ...) {
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    if (k < 0) return;
    size_t l = strlen(line);
    if (r->n++ == 0) {
        size_t c = l < sizeof r->first - 1 ? l : sizeof r->first - 1;
        memcpy(r->first, line, c);
        r->first[c] = 0;
    }
    if (r->len + l + 2 > r->cap) {
        size_t cap = (r->cap ? r->cap * 2 : 256) + l + 2;
        char *b = realloc(r->buf, cap);
        if (!b) {
            r->oom = 1;
            return;
        }
        r->buf = b, r->cap = cap;
    }
    memcpy(r->buf + r->len, line, l);
    r->len += l;
    r->buf[r->len++] = '\n';
    r->buf[r->len] = 0;
}

static int parse_hex16(const char *s, uint64_t *v) {
    if (!s || strlen(s) != 16) return 0;
    uint64_t x = 0;
    for (int i = 0; i < 16; i++) {
        char c = s[i];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0) return 0;
        x = (x << 4) | (uint64_t)d;
    }
    *v = x;
    return 1;
}

/* The report of every hash that does not match: header, directory, sections, and with `tensors` each tensor. */
static void check_hashes(const cmf_file *f, int tensors, report *r) {
    const cmf_envelope *e = &f->env;
    const uint8_t *m = f->map.data;
    uint64_t h;
    if (e->header_hash && (h = cmf_hash64(m + e->header_off, e->header_len)) != e->header_hash)
        add(r, "header: hash64 %016llx does not match the recorded %016llx (envelope@0x70)", (unsigned long long)h,
            (unsigned long long)e->header_hash);
    if (e->dir_hash && (h = cmf_hash64(m + e->dir_off, e->dir_len)) != e->dir_hash)
        add(r, "dir: hash64 %016llx does not match the recorded %016llx (envelope@0x78)", (unsigned long long)h,
            (unsigned long long)e->dir_hash);
    const cJSON *sh = cJSON_GetObjectItemCaseSensitive(f->header, "section_hashes");
    static const char *const names[3] = {"masks", "vocab", "index"};
    const uint64_t offs[3] = {e->masks_off, e->vocab_off, e->index_off};
    const uint64_t lens[3] = {e->masks_len, e->vocab_len, e->index_len};
    for (int i = 0; i < 3 && cJSON_IsObject(sh); i++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(sh, names[i]);
        uint64_t want;
        if (!v || cJSON_IsNull(v) || lens[i] == 0) continue;
        if (!cJSON_IsString(v) || !parse_hex16(v->valuestring, &want)) {
            add(r, "section_hashes.%s: malformed value (expected 16 hex digits)", names[i]);
            continue;
        }
        if ((h = cmf_hash64(m + offs[i], lens[i])) != want)
            add(r, "%s section: hash64 %016llx does not match section_hashes.%s %016llx", names[i],
                (unsigned long long)h, names[i], (unsigned long long)want);
    }
    for (size_t i = 0; tensors && i < f->n_tensors; i++) {
        const cmf_tensor *t = &f->tensors[i];
        if ((h = cmf_hash64(t->data, t->nbytes)) != t->hash)
            add(r, "tensor \"%.300s\": hash64 %016llx does not match the recorded %016llx", t->name,
                (unsigned long long)h, (unsigned long long)t->hash);
    }
}

/* Ends a hash check: *out (when given) takes the report, else it is freed; CMF_E_INTEGRITY names the first
 * problem after `prefix` and the path. */
static cmf_status conclude(const cmf_file *f, report *r, char **out, const char *prefix) {
    if (r->oom) {
        free(r->buf);
        return cmf_err(CMF_E_NOMEM, "verify %s: out of memory for the report", f->path);
    }
    if (out) {
        if (!r->buf) r->buf = calloc(1, 1);
        if (!r->buf) return cmf_err(CMF_E_NOMEM, "verify %s: out of memory for the report", f->path);
        *out = r->buf;
    } else {
        free(r->buf);
    }
    if (r->n) return cmf_err(CMF_E_INTEGRITY, "%s%s: %d problem(s); first: %s", prefix, f->path, r->n, r->first);
    return CMF_OK;
}

cmf_status cmf_file_verify_meta(const cmf_file *f) {
    if (!f) return cmf_err(CMF_E_ARG, "cmf_file_verify_meta: NULL file");
    report r = {0};
    check_hashes(f, 0, &r);
    return conclude(f, &r, NULL, "");
}

cmf_status cmf_file_verify(const cmf_file *f, char **out) {
    if (out) *out = NULL;
    if (!f) return cmf_err(CMF_E_ARG, "cmf_file_verify: NULL file");
    report r = {0};
    check_hashes(f, 1, &r);
    return conclude(f, &r, out, "verify ");
}

/* ---- layout notes (not integrity problems) ------------------------------------------------------------------ */

typedef struct span {
    uint64_t a, b; /* [a, b) */
} span;

static int cmp_span(const void *x, const void *y) {
    const span *p = x, *q = y;
    return p->a < q->a ? -1 : p->a > q->a;
}

/* The envelope bytes that no hash covers (0x00-0x6F, CMF_FORMAT.md 1.2 / 1.10): fields the spec gives a fixed value
 * that readers do not check. A flipped bit there passes every hash, so each is a note (the file still reads). */
static void envelope_notes(const cmf_file *f, report *r) {
    const cmf_envelope *e = &f->env;
    if (e->flags)
        add(r, "envelope@0x8: flags is 0x%x, not 0 (reserved: writers put 0 and readers ignore it; CMF_FORMAT.md "
               "1.2; the envelope is not hashed)", e->flags);
    if (e->header_off != CMF_ENVELOPE_SIZE)
        add(r, "envelope@0x10: header_off is %llu, not 128 (CMF_FORMAT.md 1.2: 128 in practice; readers do not "
               "require it)", (unsigned long long)e->header_off);
    static const char *const names[3] = {"masks", "vocab", "index"};
    const uint64_t offs[3] = {e->masks_off, e->vocab_off, e->index_off};
    const uint64_t lens[3] = {e->masks_len, e->vocab_len, e->index_len};
    for (int i = 0; i < 3; i++)
        if (lens[i] == 0 && offs[i] != 0)
            add(r, "envelope@0x%x: %s_off is 0x%llx but %s_len is 0 (an absent section: writers put off = 0 and "
                   "readers ignore it; CMF_FORMAT.md 1.2)", 0x40 + 16 * i, names[i], (unsigned long long)offs[i],
                names[i]);
    /* required_features (1.3) against what the content says the writer sets: TENSOR_DIR always; QUANT_2F when a
     * tensor is q8_2f or vbit; BINARY_MASKS when the masks section holds a mask, LOOP_MASKS when it does and
     * arch.num_loops > 1; SKILL_FILE only when set without any skills[] record bound to a base (the streaming
     * writer's finish() leaves it clear on a skill file, so clear is no sign of damage) */
    uint32_t want = CMF_FEAT_TENSOR_DIR, mask = CMF_FEAT_TENSOR_DIR | CMF_FEAT_QUANT_2F | CMF_FEAT_BINARY_MASKS |
                                                CMF_FEAT_LOOP_MASKS;
    for (size_t i = 0; i < f->n_tensors; i++)
        if (f->tensors[i].dtype == CMF_DT_Q8_2F || f->tensors[i].dtype == CMF_DT_VBIT) want |= CMF_FEAT_QUANT_2F;
    uint32_t n_masks = 0;
    if (f->masks && e->masks_len >= 4)
        n_masks = (uint32_t)f->masks[0] | ((uint32_t)f->masks[1] << 8) | ((uint32_t)f->masks[2] << 16) |
                  ((uint32_t)f->masks[3] << 24);
    const cJSON *arch = cJSON_GetObjectItemCaseSensitive(f->header, "arch");
    const cJSON *nl = cJSON_GetObjectItemCaseSensitive(arch, "num_loops");
    if (n_masks > 0) want |= CMF_FEAT_BINARY_MASKS;
    if (n_masks > 0 && cJSON_IsNumber(nl) && nl->valuedouble > 1) want |= CMF_FEAT_LOOP_MASKS;
    if (e->features & CMF_FEAT_SKILL_FILE) {
        const cJSON *skills = cJSON_GetObjectItemCaseSensitive(f->header, "skills"), *rec;
        int bound = 0;
        cJSON_ArrayForEach(rec, skills) {
            const cJSON *bdh = cJSON_GetObjectItemCaseSensitive(rec, "base_dir_hash");
            if (bdh && !cJSON_IsNull(bdh)) bound = 1;
        }
        if (!bound)
            add(r, "envelope@0xc: required_features has SKILL_FILE (0x40) but no skills[] record has a "
                   "base_dir_hash (CMF_FORMAT.md 1.3)");
    }
    if ((e->features & mask) != want)
        add(r, "envelope@0xc: required_features is 0x%x, but the content implies 0x%x in the bits TENSOR_DIR 0x1, "
               "BINARY_MASKS 0x2, QUANT_2F 0x4 and LOOP_MASKS 0x20 (differing: 0x%x; CMF_FORMAT.md 1.3)",
            e->features, want, (e->features & mask) ^ want);
}

cmf_status cmf_file_layout_notes(const cmf_file *f, char **out) {
    if (out) *out = NULL;
    if (!f || !out) return cmf_err(CMF_E_ARG, "cmf_file_layout_notes: NULL argument");
    const cmf_envelope *e = &f->env;
    size_t n = f->n_tensors + 6;
    span *s = malloc(n * sizeof *s);
    if (!s) return cmf_err(CMF_E_NOMEM, "verify %s: out of memory", f->path);
    size_t k = 0;
    s[k++] = (span){0, CMF_ENVELOPE_SIZE};
    s[k++] = (span){e->header_off, e->header_off + e->header_len};
    s[k++] = (span){e->dir_off, e->dir_off + e->dir_len};
    if (e->masks_len) s[k++] = (span){e->masks_off, e->masks_off + e->masks_len};
    if (e->vocab_len) s[k++] = (span){e->vocab_off, e->vocab_off + e->vocab_len};
    if (e->index_len) s[k++] = (span){e->index_off, e->index_off + e->index_len};
    for (size_t i = 0; i < f->n_tensors; i++)
        if (f->tensors[i].nbytes)
            s[k++] = (span){e->data_off + f->tensors[i].off, e->data_off + f->tensors[i].off + f->tensors[i].nbytes};
    qsort(s, k, sizeof *s, cmp_span);
    /* the open checks put every span inside the file; a gap is what no span covers */
    const uint8_t *m = f->map.data;
    uint64_t size = f->map.size, end = 0, nz = 0, first_nz = 0, last_end = 0;
    for (size_t i = 0; i <= k; i++) {
        uint64_t a = i < k ? s[i].a : size;
        if (i == k) last_end = end;
        for (uint64_t x = end; x < a && x < size; x++)
            if (m[x] && i < k && !nz++) first_nz = x;
        if (i < k && s[i].b > end) end = s[i].b;
    }
    free(s);
    report r = {0};
    envelope_notes(f, &r);
    if (nz)
        add(&r, "%llu non-zero byte(s) in the padding between sections or tensors (first at 0x%llx); the writer "
                "zero-fills gaps (CMF_FORMAT.md 1.6) but readers do not require it",
            (unsigned long long)nz, (unsigned long long)first_nz);
    if (size > last_end)
        add(&r, "%llu byte(s) after the last section (from 0x%llx to the end of the file), which no reader uses",
            (unsigned long long)(size - last_end), (unsigned long long)last_end);
    if (r.oom) {
        free(r.buf);
        return cmf_err(CMF_E_NOMEM, "verify %s: out of memory for the notes", f->path);
    }
    *out = r.buf ? r.buf : calloc(1, 1);
    if (!*out) return cmf_err(CMF_E_NOMEM, "verify %s: out of memory for the notes", f->path);
    return CMF_OK;
}
