/* util.c — containers, UTF-8 helpers, the GPT-2 byte-level table and the regex wrapper of the tokenizer. */
#include "tokenizer/tokenizer.h"

#include <stdlib.h>
#include <string.h>

#include "util/error.h"

/* ---- tok_buf ---------------------------------------------------------------------------------------------- */

int tok_buf_reserve(tok_buf *b, size_t extra) {
    if (b->n + extra + 1 <= b->cap) return 0;
    size_t cap = b->cap ? b->cap : 64;
    while (cap < b->n + extra + 1) cap *= 2;
    char *p = realloc(b->p, cap);
    if (!p) return -1;
    b->p = p;
    b->cap = cap;
    return 0;
}

int tok_buf_put(tok_buf *b, const void *s, size_t n) {
    if (tok_buf_reserve(b, n)) return -1;
    if (n) memcpy(b->p + b->n, s, n);
    b->n += n;
    return 0;
}

const char *tok_buf_cstr(tok_buf *b) {
    if (tok_buf_reserve(b, 0)) return NULL;
    b->p[b->n] = 0;
    return b->p;
}

void tok_buf_free(tok_buf *b) {
    free(b->p);
    b->p = NULL;
    b->n = b->cap = 0;
}

/* ---- tok_ids ---------------------------------------------------------------------------------------------- */

int tok_ids_append(tok_ids *a, const int32_t *ids, size_t n) {
    if (a->n + n > a->cap) {
        size_t cap = a->cap ? a->cap : 64;
        while (cap < a->n + n) cap *= 2;
        int32_t *v = realloc(a->v, cap * sizeof *v);
        if (!v) return -1;
        a->v = v;
        a->cap = cap;
    }
    if (n) memcpy(a->v + a->n, ids, n * sizeof *ids);
    a->n += n;
    return 0;
}

int tok_ids_push(tok_ids *a, int32_t id) { return tok_ids_append(a, &id, 1); }

/* ---- hashing and tok_strmap ------------------------------------------------------------------------------- */

uint64_t tok_hash(const void *p, size_t n) {
    /* 8 bytes per step (multiply-rotate), the tail one byte at a time, then murmur3's finalizer. */
    const unsigned char *s = p;
    uint64_t h = 0xcbf29ce484222325ull ^ (n * 0x9e3779b97f4a7c15ull);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, s + i, 8);
        h = (h ^ w) * 0x100000001b3ull;
        h = (h << 29) | (h >> 35);
    }
    for (; i < n; i++) h = (h ^ s[i]) * 0x100000001b3ull;
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    return h;
}

/* Rehashes every entry into a zeroed table of cap slots (a power of two above n). */
static int strmap_rehash(tok_strmap *m, size_t cap) {
    uint32_t *slots = calloc(cap, sizeof *slots);
    if (!slots) return -1;
    for (size_t i = 0; i < m->n; i++) {
        size_t h = tok_hash(m->pool + m->e[i].off, m->e[i].len) & (cap - 1);
        while (slots[h]) h = (h + 1) & (cap - 1);
        slots[h] = (uint32_t)i + 1;
    }
    free(m->slots);
    m->slots = slots;
    m->cap = cap;
    return 0;
}

static int strmap_entries(tok_strmap *m, size_t ncap) {
    tok_strmap_entry *e = realloc(m->e, ncap * sizeof *e);
    if (!e) return -1;
    m->e = e;
    m->ncap = ncap;
    return 0;
}

static int strmap_pool(tok_strmap *m, size_t need) {
    if (need <= m->pool_cap) return 0;
    if (need > (size_t)UINT32_MAX) return -1; /* offsets are 32-bit */
    size_t cap = m->pool_cap ? m->pool_cap : 4096;
    while (cap < need) cap *= 2;
    if (cap > (size_t)UINT32_MAX) cap = (size_t)UINT32_MAX;
    char *p = realloc(m->pool, cap);
    if (!p) return -1;
    m->pool = p;
    m->pool_cap = cap;
    return 0;
}

int tok_strmap_reserve(tok_strmap *m, size_t n_keys, size_t key_bytes) {
    size_t n = m->n + n_keys, cap = m->cap ? m->cap : 1024;
    if (n >= UINT32_MAX / 2) return -1;
    while ((n + 1) * 2 > cap) cap *= 2; /* the load factor put keeps: at most one half */
    if (cap != m->cap && strmap_rehash(m, cap)) return -1;
    if (n > m->ncap && strmap_entries(m, n)) return -1;
    return strmap_pool(m, m->pool_n + key_bytes + n_keys);
}

int32_t tok_strmap_get(const tok_strmap *m, const char *key, size_t len) {
    if (!m->cap) return -1;
    size_t h = tok_hash(key, len) & (m->cap - 1);
    for (;;) {
        uint32_t i = m->slots[h];
        if (!i) return -1;
        const tok_strmap_entry *e = &m->e[i - 1];
        if (e->len == len && memcmp(m->pool + e->off, key, len) == 0) return e->val;
        h = (h + 1) & (m->cap - 1);
    }
}

long tok_strmap_put(tok_strmap *m, const char *key, size_t len, int32_t val) {
    if ((m->n + 1) * 2 > m->cap && (m->n >= UINT32_MAX / 2 || strmap_rehash(m, m->cap ? m->cap * 2 : 1024)))
        return -1;
    size_t h = tok_hash(key, len) & (m->cap - 1);
    for (;;) {
        uint32_t i = m->slots[h];
        if (!i) break;
        tok_strmap_entry *e = &m->e[i - 1];
        if (e->len == len && memcmp(m->pool + e->off, key, len) == 0) {
            e->val = val;
            return (long)i - 1;
        }
        h = (h + 1) & (m->cap - 1);
    }
    if (m->n == m->ncap && strmap_entries(m, m->ncap ? m->ncap * 2 : 512)) return -1;
    if (len >= UINT32_MAX || strmap_pool(m, m->pool_n + len + 1)) return -1;
    if (len) memcpy(m->pool + m->pool_n, key, len);
    m->pool[m->pool_n + len] = 0;
    m->e[m->n] = (tok_strmap_entry){(uint32_t)m->pool_n, (uint32_t)len, val};
    m->pool_n += len + 1;
    m->slots[h] = (uint32_t)++m->n;
    return (long)m->n - 1;
}

int tok_strmap_set(tok_strmap *m, const char *key, size_t len, int32_t val) {
    return tok_strmap_put(m, key, len, val) < 0 ? -1 : 0;
}

void tok_strmap_free(tok_strmap *m) {
    free(m->slots);
    free(m->e);
    free(m->pool);
    memset(m, 0, sizeof *m);
}

/* ---- GPT-2 bytes_to_unicode -------------------------------------------------------------------------------
 * Bytes '!'..'~', 0xA1..0xAC and 0xAE..0xFF stand for themselves (as code points); the other 68 bytes, in
 * increasing order, become U+0100, U+0101, ... (source: openai/gpt-2 encoder.py bytes_to_unicode; HF tokenizers
 * pre_tokenizers/byte_level.rs). The table below is that mapping written as UTF-8. */
const char *const tok_byte_to_utf8[256] = {
    "\xc4\x80", "\xc4\x81", "\xc4\x82", "\xc4\x83", "\xc4\x84", "\xc4\x85", "\xc4\x86", "\xc4\x87", "\xc4\x88",
    "\xc4\x89", "\xc4\x8a", "\xc4\x8b", "\xc4\x8c", "\xc4\x8d", "\xc4\x8e", "\xc4\x8f", "\xc4\x90", "\xc4\x91",
    "\xc4\x92", "\xc4\x93", "\xc4\x94", "\xc4\x95", "\xc4\x96", "\xc4\x97", "\xc4\x98", "\xc4\x99", "\xc4\x9a",
    "\xc4\x9b", "\xc4\x9c", "\xc4\x9d", "\xc4\x9e", "\xc4\x9f", "\xc4\xa0", "!", "\"", "#", "$", "%", "&", "'",
    "(", ")", "*", "+", ",", "-", ".", "/", "0", "1", "2", "3", "4", "5", "6", "7", "8", "9", ":", ";", "<", "=",
    ">", "?", "@", "A", "B", "C", "D", "E", "F", "G", "H", "I", "J", "K", "L", "M", "N", "O", "P", "Q", "R", "S",
    "T", "U", "V", "W", "X", "Y", "Z", "[", "\\", "]", "^", "_", "`", "a", "b", "c", "d", "e", "f", "g", "h", "i",
    "j", "k", "l", "m", "n", "o", "p", "q", "r", "s", "t", "u", "v", "w", "x", "y", "z", "{", "|", "}", "~",
    "\xc4\xa1", "\xc4\xa2", "\xc4\xa3", "\xc4\xa4", "\xc4\xa5", "\xc4\xa6", "\xc4\xa7", "\xc4\xa8", "\xc4\xa9",
    "\xc4\xaa", "\xc4\xab", "\xc4\xac", "\xc4\xad", "\xc4\xae", "\xc4\xaf", "\xc4\xb0", "\xc4\xb1", "\xc4\xb2",
    "\xc4\xb3", "\xc4\xb4", "\xc4\xb5", "\xc4\xb6", "\xc4\xb7", "\xc4\xb8", "\xc4\xb9", "\xc4\xba", "\xc4\xbb",
    "\xc4\xbc", "\xc4\xbd", "\xc4\xbe", "\xc4\xbf", "\xc5\x80", "\xc5\x81", "\xc5\x82", "\xc2\xa1", "\xc2\xa2",
    "\xc2\xa3", "\xc2\xa4", "\xc2\xa5", "\xc2\xa6", "\xc2\xa7", "\xc2\xa8", "\xc2\xa9", "\xc2\xaa", "\xc2\xab",
    "\xc2\xac", "\xc5\x83", "\xc2\xae", "\xc2\xaf", "\xc2\xb0", "\xc2\xb1", "\xc2\xb2", "\xc2\xb3", "\xc2\xb4",
    "\xc2\xb5", "\xc2\xb6", "\xc2\xb7", "\xc2\xb8", "\xc2\xb9", "\xc2\xba", "\xc2\xbb", "\xc2\xbc", "\xc2\xbd",
    "\xc2\xbe", "\xc2\xbf", "\xc3\x80", "\xc3\x81", "\xc3\x82", "\xc3\x83", "\xc3\x84", "\xc3\x85", "\xc3\x86",
    "\xc3\x87", "\xc3\x88", "\xc3\x89", "\xc3\x8a", "\xc3\x8b", "\xc3\x8c", "\xc3\x8d", "\xc3\x8e", "\xc3\x8f",
    "\xc3\x90", "\xc3\x91", "\xc3\x92", "\xc3\x93", "\xc3\x94", "\xc3\x95", "\xc3\x96", "\xc3\x97", "\xc3\x98",
    "\xc3\x99", "\xc3\x9a", "\xc3\x9b", "\xc3\x9c", "\xc3\x9d", "\xc3\x9e", "\xc3\x9f", "\xc3\xa0", "\xc3\xa1",
    "\xc3\xa2", "\xc3\xa3", "\xc3\xa4", "\xc3\xa5", "\xc3\xa6", "\xc3\xa7", "\xc3\xa8", "\xc3\xa9", "\xc3\xaa",
    "\xc3\xab", "\xc3\xac", "\xc3\xad", "\xc3\xae", "\xc3\xaf", "\xc3\xb0", "\xc3\xb1", "\xc3\xb2", "\xc3\xb3",
    "\xc3\xb4", "\xc3\xb5", "\xc3\xb6", "\xc3\xb7", "\xc3\xb8", "\xc3\xb9", "\xc3\xba", "\xc3\xbb", "\xc3\xbc",
    "\xc3\xbd", "\xc3\xbe", "\xc3\xbf",
};

int tok_unicode_to_byte(uint32_t cp) {
    if ((cp >= '!' && cp <= '~') || (cp >= 0xA1 && cp <= 0xAC) || (cp >= 0xAE && cp <= 0xFF)) return (int)cp;
    /* U+0100 + n is the n-th remaining byte: 0x00..0x20 (33 bytes), then 0x7F..0xA0 (34), then 0xAD */
    if (cp < 0x100 || cp >= 0x100 + 68) return -1;
    uint32_t n = cp - 0x100;
    if (n < 33) return (int)n;
    if (n < 67) return (int)(0x7F + (n - 33));
    return 0xAD;
}

/* ---- UTF-8 ------------------------------------------------------------------------------------------------ */

int tok_utf8_decode(const char *str, size_t n, uint32_t *cp) {
    const unsigned char *s = (const unsigned char *)str;
    if (n == 0) return 0;
    unsigned c = s[0];
    if (c < 0x80) {
        *cp = c;
        return 1;
    }
    int len;
    uint32_t v, min;
    if (c >= 0xC2 && c <= 0xDF) len = 2, v = c & 0x1F, min = 0x80;
    else if (c >= 0xE0 && c <= 0xEF) len = 3, v = c & 0x0F, min = 0x800;
    else if (c >= 0xF0 && c <= 0xF4) len = 4, v = c & 0x07, min = 0x10000;
    else return 0;
    if ((size_t)len > n) return 0;
    for (int i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80) return 0;
        v = (v << 6) | (s[i] & 0x3F);
    }
    if (v < min || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) return 0;
    *cp = v;
    return len;
}

size_t tok_utf8_check(const char *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        if ((unsigned char)s[i] < 0x80) {
            i++;
            continue;
        }
        uint32_t cp;
        int l = tok_utf8_decode(s + i, n - i, &cp);
        if (!l) return i;
        i += (size_t)l;
    }
    return n;
}

/* Length of the maximal prefix of s that could start a valid sequence (Unicode "maximal subpart"), >= 1. */
static size_t utf8_invalid_len(const unsigned char *s, size_t n) {
    unsigned c = s[0];
    int need;
    unsigned lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) need = 1;
    else if (c == 0xE0) need = 2, lo = 0xA0;
    else if (c >= 0xE1 && c <= 0xEC) need = 2;
    else if (c == 0xED) need = 2, hi = 0x9F;
    else if (c >= 0xEE && c <= 0xEF) need = 2;
    else if (c == 0xF0) need = 3, lo = 0x90;
    else if (c >= 0xF1 && c <= 0xF3) need = 3;
    else if (c == 0xF4) need = 3, hi = 0x8F;
    else return 1;
    size_t i = 1;
    for (int k = 0; k < need && i < n; k++, i++) {
        unsigned b = s[i];
        if (k == 0 ? (b < lo || b > hi) : (b < 0x80 || b > 0xBF)) break;
    }
    return i;
}

int tok_utf8_lossy(tok_buf *out, const char *str, size_t n) {
    const unsigned char *s = (const unsigned char *)str;
    size_t i = 0, run = 0;
    while (i < n) {
        uint32_t cp;
        int l = tok_utf8_decode(str + i, n - i, &cp);
        if (l) {
            i += (size_t)l;
            continue;
        }
        if (tok_buf_put(out, str + run, i - run)) return -1;
        if (tok_buf_put(out, "\xEF\xBF\xBD", 3)) return -1;
        i += utf8_invalid_len(s + i, n - i);
        run = i;
    }
    return tok_buf_put(out, str + run, n - run);
}

int tok_is_whitespace(uint32_t cp) {
    return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
           (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F ||
           cp == 0x3000;
}

/* ---- regex ------------------------------------------------------------------------------------------------ */

/* Unicode White_Space as a class body (Oniguruma's \s for Unicode encodings, Rust's char::is_whitespace). */
#define WS_CLASS "\\t-\\r \\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}"

cmf_status tok_regex_compile(const char *pat, size_t len, const char *what, pcre2_code **out) {
    tok_buf b = {0};
    int in_class = 0;
    for (size_t i = 0; i < len; i++) {
        char c = pat[i];
        int fail = 0;
        if (c == '\\' && i + 1 < len) {
            char d = pat[i + 1];
            if (d == 's' && !in_class) fail = tok_buf_put(&b, "[" WS_CLASS "]", strlen(WS_CLASS) + 2);
            else if (d == 'S' && !in_class) fail = tok_buf_put(&b, "[^" WS_CLASS "]", strlen(WS_CLASS) + 3);
            else if (d == 's' && in_class) fail = tok_buf_put(&b, WS_CLASS, strlen(WS_CLASS));
            else fail = tok_buf_put(&b, pat + i, 2);
            i++;
        } else {
            if (c == '[' && !in_class) {
                in_class = 1;
                fail = tok_buf_put(&b, "[", 1);
                /* a leading ']' or '^]' is a literal inside the class */
                if (i + 1 < len && pat[i + 1] == '^') fail |= tok_buf_put(&b, "^", 1), i++;
                if (i + 1 < len && pat[i + 1] == ']') fail |= tok_buf_put(&b, "]", 1), i++;
            } else {
                if (c == ']' && in_class) in_class = 0;
                fail = tok_buf_put(&b, &c, 1);
            }
        }
        if (fail) {
            tok_buf_free(&b);
            return cmf_err(CMF_E_NOMEM, "tokenizer.json: %s: out of memory", what);
        }
    }
    int ec;
    PCRE2_SIZE eo;
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)(b.p ? b.p : ""), b.n, PCRE2_UTF | PCRE2_UCP, &ec, &eo, NULL);
    tok_buf_free(&b);
    if (!re) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(ec, msg, sizeof msg);
        return cmf_err(CMF_E_FORMAT, "tokenizer.json: %s: regex '%.*s' does not compile: %s", what, (int)len, pat,
                       (const char *)msg);
    }
    pcre2_jit_compile(re, PCRE2_JIT_COMPLETE); /* optional speed-up; the interpreter is used when it fails */
    *out = re;
    return CMF_OK;
}

cmf_status tok_regex_literal(const char *s, size_t len, const char *what, pcre2_code **out) {
    tok_buf b = {0};
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        int fail = 0;
        if (c < 0x80 && !((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')))
            fail = tok_buf_put(&b, "\\", 1);
        if (c == 0) fail |= tok_buf_put(&b, "x{0}", 4);
        else fail |= tok_buf_put(&b, &s[i], 1);
        if (fail) {
            tok_buf_free(&b);
            return cmf_err(CMF_E_NOMEM, "tokenizer.json: %s: out of memory", what);
        }
    }
    int ec;
    PCRE2_SIZE eo;
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)(b.p ? b.p : ""), b.n, PCRE2_UTF | PCRE2_UCP, &ec, &eo, NULL);
    tok_buf_free(&b);
    if (!re) return cmf_err(CMF_E_FORMAT, "tokenizer.json: %s: string pattern is not valid UTF-8", what);
    pcre2_jit_compile(re, PCRE2_JIT_COMPLETE);
    *out = re;
    return CMF_OK;
}

cmf_status tok_pattern_from_json(const cJSON *pat, const char *what, pcre2_code **out) {
    const cJSON *s = cJSON_GetObjectItemCaseSensitive(pat, "String");
    const cJSON *r = cJSON_GetObjectItemCaseSensitive(pat, "Regex");
    if (cJSON_IsString(s)) return tok_regex_literal(s->valuestring, strlen(s->valuestring), what, out);
    if (cJSON_IsString(r)) return tok_regex_compile(r->valuestring, strlen(r->valuestring), what, out);
    return cmf_err(CMF_E_FORMAT, "tokenizer.json: %s: 'pattern' must be {\"String\": ...} or {\"Regex\": ...}",
                   what);
}

int tok_regex_next(const pcre2_code *re, pcre2_match_data *md, const char *s, size_t n, size_t from, size_t *ms,
                   size_t *me) {
    while (from <= n) {
        int rc = pcre2_match(re, (PCRE2_SPTR)s, n, from, PCRE2_NO_UTF_CHECK, md, NULL);
        if (rc == PCRE2_ERROR_NOMATCH) return 0;
        if (rc < 0) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(rc, msg, sizeof msg);
            cmf_err(CMF_E_FORMAT, "tokenizer: regex match failed: %s", (const char *)msg);
            return -1;
        }
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
        if (ov[1] > ov[0]) {
            *ms = ov[0];
            *me = ov[1];
            return 1;
        }
        /* an empty match produces no piece: continue one character later */
        from = ov[0] + 1;
        while (from < n && ((unsigned char)s[from] & 0xC0) == 0x80) from++;
    }
    return 0;
}

/* ---- pieces and string lists ------------------------------------------------------------------------------ */

int tok_pieces_add(tok_pieces *p, const char *s, size_t len, int first) {
    if (p->n == p->cap) {
        size_t cap = p->cap ? p->cap * 2 : 16;
        tok_piece *v = realloc(p->v, cap * sizeof *v);
        if (!v) return -1;
        p->v = v;
        p->cap = cap;
    }
    size_t off = p->buf.n;
    if (tok_buf_put(&p->buf, s, len)) return -1;
    p->v[p->n++] = (tok_piece){off, len, first};
    return 0;
}

void tok_pieces_free(tok_pieces *p) {
    tok_buf_free(&p->buf);
    free(p->v);
    memset(p, 0, sizeof *p);
}

int tok_strs_push(tok_strs *a, const char *s, size_t len) {
    if (a->n == a->cap) {
        size_t cap = a->cap ? a->cap * 2 : 16;
        char **v = realloc(a->s, cap * sizeof *v);
        if (!v) return -1;
        a->s = v;
        size_t *l = realloc(a->len, cap * sizeof *l);
        if (!l) return -1;
        a->len = l;
        a->cap = cap;
    }
    char *c = malloc(len + 1);
    if (!c) return -1;
    if (len) memcpy(c, s, len);
    c[len] = 0;
    a->s[a->n] = c;
    a->len[a->n] = len;
    a->n++;
    return 0;
}

void tok_strs_free(tok_strs *a) {
    for (size_t i = 0; i < a->n; i++) free(a->s[i]);
    free(a->s);
    free(a->len);
    memset(a, 0, sizeof *a);
}
