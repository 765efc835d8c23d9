/* normalize.c — tokenizer.json normalizers (HF tokenizers src/normalizers): NFC/NFD/NFKC/NFKD (utf8proc),
 * Lowercase, Strip, StripAccents, Replace, Prepend, BertNormalizer and Sequence. */
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "tokenizer/tokenizer.h"
#include "util/error.h"

typedef enum {
    NORM_SEQUENCE,
    NORM_NFC,
    NORM_NFD,
    NORM_NFKC,
    NORM_NFKD,
    NORM_LOWERCASE,
    NORM_STRIP,
    NORM_STRIP_ACCENTS,
    NORM_REPLACE,
    NORM_PREPEND,
    NORM_BERT,
} norm_type;

struct tok_normalizer {
    norm_type type;
    tok_normalizer **seq; /* Sequence */
    size_t n_seq;
    int left, right;      /* Strip */
    pcre2_code *re;       /* Replace */
    char *content;        /* Replace content, Prepend string */
    size_t content_len;
    int clean_text, chinese, strip_accents, lowercase; /* BertNormalizer */
};

void tok_normalizer_free(tok_normalizer *n) {
    if (!n) return;
    for (size_t i = 0; i < n->n_seq; i++) tok_normalizer_free(n->seq[i]);
    free(n->seq);
    if (n->re) pcre2_code_free(n->re);
    free(n->content);
    free(n);
}

static int json_bool(const cJSON *o, const char *key, int dflt) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (cJSON_IsBool(v)) return cJSON_IsTrue(v);
    return dflt;
}

static cmf_status dup_string(const cJSON *o, const char *key, const char *what, char **out, size_t *len) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!cJSON_IsString(v)) return cmf_err(CMF_E_FORMAT, "tokenizer.json: %s: '%s' must be a string", what, key);
    *len = strlen(v->valuestring);
    *out = malloc(*len + 1);
    if (!*out) return cmf_err(CMF_E_NOMEM, "tokenizer.json: %s: out of memory", what);
    memcpy(*out, v->valuestring, *len + 1);
    return CMF_OK;
}

cmf_status tok_normalizer_load(const cJSON *j, tok_normalizer **out) {
    *out = NULL;
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(j, "type");
    if (!cJSON_IsString(t)) return cmf_err(CMF_E_FORMAT, "tokenizer.json: normalizer without a string 'type'");
    const char *ty = t->valuestring;
    tok_normalizer *n = calloc(1, sizeof *n);
    if (!n) return cmf_err(CMF_E_NOMEM, "tokenizer.json: normalizer: out of memory");
    cmf_status st = CMF_OK;
    if (!strcmp(ty, "Sequence")) {
        n->type = NORM_SEQUENCE;
        const cJSON *arr = cJSON_GetObjectItemCaseSensitive(j, "normalizers");
        if (!cJSON_IsArray(arr)) {
            st = cmf_err(CMF_E_FORMAT, "tokenizer.json: normalizer Sequence: 'normalizers' must be an array");
        } else {
            int cnt = cJSON_GetArraySize(arr);
            n->seq = calloc((size_t)cnt + 1, sizeof *n->seq);
            if (!n->seq) st = cmf_err(CMF_E_NOMEM, "tokenizer.json: normalizer: out of memory");
            const cJSON *e;
            cJSON_ArrayForEach(e, arr) {
                if (st != CMF_OK) break;
                st = tok_normalizer_load(e, &n->seq[n->n_seq]);
                if (st == CMF_OK) n->n_seq++;
            }
        }
    } else if (!strcmp(ty, "NFC")) n->type = NORM_NFC;
    else if (!strcmp(ty, "NFD")) n->type = NORM_NFD;
    else if (!strcmp(ty, "NFKC")) n->type = NORM_NFKC;
    else if (!strcmp(ty, "NFKD")) n->type = NORM_NFKD;
    else if (!strcmp(ty, "Lowercase")) n->type = NORM_LOWERCASE;
    else if (!strcmp(ty, "StripAccents")) n->type = NORM_STRIP_ACCENTS;
    else if (!strcmp(ty, "Strip")) {
        n->type = NORM_STRIP;
        n->left = json_bool(j, "strip_left", 1);
        n->right = json_bool(j, "strip_right", 1);
    } else if (!strcmp(ty, "Replace")) {
        n->type = NORM_REPLACE;
        st = tok_pattern_from_json(cJSON_GetObjectItemCaseSensitive(j, "pattern"), "normalizer Replace", &n->re);
        if (st == CMF_OK) st = dup_string(j, "content", "normalizer Replace", &n->content, &n->content_len);
    } else if (!strcmp(ty, "Prepend")) {
        n->type = NORM_PREPEND;
        st = dup_string(j, "prepend", "normalizer Prepend", &n->content, &n->content_len);
    } else if (!strcmp(ty, "BertNormalizer")) {
        n->type = NORM_BERT;
        n->clean_text = json_bool(j, "clean_text", 1);
        n->chinese = json_bool(j, "handle_chinese_chars", 1);
        n->lowercase = json_bool(j, "lowercase", 1);
        const cJSON *sa = cJSON_GetObjectItemCaseSensitive(j, "strip_accents");
        n->strip_accents = cJSON_IsBool(sa) ? cJSON_IsTrue(sa) : n->lowercase; /* null follows lowercase */
    } else {
        st = cmf_err(CMF_E_UNSUPPORTED, "tokenizer.json: normalizer type '%s' is not supported", ty);
    }
    if (st != CMF_OK) {
        tok_normalizer_free(n);
        return st;
    }
    *out = n;
    return CMF_OK;
}

/* utf8proc_map with the given options, appended to out. */
static cmf_status unicode_map(const char *s, size_t len, utf8proc_option_t opt, tok_buf *out) {
    if (len == 0) return CMF_OK;
    /* ASCII is invariant under every normalization form: skip utf8proc for the common case */
    size_t i = 0;
    while (i < len && (unsigned char)s[i] < 0x80) i++;
    if (i == len) return tok_buf_put(out, s, len) ? cmf_err(CMF_E_NOMEM, "tokenizer: out of memory") : CMF_OK;
    utf8proc_uint8_t *res = NULL;
    utf8proc_ssize_t r = utf8proc_map((const utf8proc_uint8_t *)s, (utf8proc_ssize_t)len, &res, opt);
    if (r < 0) return cmf_err(CMF_E_ARG, "tokenizer: normalizer: %s", utf8proc_errmsg(r));
    int fail = tok_buf_put(out, res, (size_t)r);
    free(res);
    return fail ? cmf_err(CMF_E_NOMEM, "tokenizer: out of memory") : CMF_OK;
}

/* Lowercases per code point as Rust's char::to_lowercase: the simple mapping of utf8proc, plus the one
 * unconditional multi-character mapping of SpecialCasing.txt (U+0130 -> "i" U+0307). */
static cmf_status lowercase(const char *s, size_t len, tok_buf *out) {
    size_t i = 0;
    while (i < len) {
        uint32_t cp;
        int l = tok_utf8_decode(s + i, len - i, &cp);
        if (!l) return cmf_err(CMF_E_ARG, "tokenizer: invalid UTF-8 at byte %zu", i);
        utf8proc_uint8_t enc[8];
        utf8proc_ssize_t el;
        if (cp == 0x130) memcpy(enc, "i\xcc\x87", 3), el = 3;
        else el = utf8proc_encode_char(utf8proc_tolower((utf8proc_int32_t)cp), enc);
        if (tok_buf_put(out, enc, (size_t)el)) return cmf_err(CMF_E_NOMEM, "tokenizer: out of memory");
        i += (size_t)l;
    }
    return CMF_OK;
}

/* HF StripAccents / BertNormalizer strip_accents remove non-spacing marks (Mn) only. */
static int is_mark(uint32_t cp) { return utf8proc_category((utf8proc_int32_t)cp) == UTF8PROC_CATEGORY_MN; }

static int is_chinese(uint32_t c) {
    return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) || (c >= 0x20000 && c <= 0x2A6DF) ||
           (c >= 0x2A700 && c <= 0x2B73F) || (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B920 && c <= 0x2CEAF) ||
           (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

/* One pass of a per-character filter: drops marks (StripAccents) or applies BertNormalizer's clean_text and
 * Chinese-character spacing. */
static cmf_status char_filter(const tok_normalizer *n, const char *s, size_t len, tok_buf *out) {
    size_t i = 0;
    while (i < len) {
        uint32_t cp;
        int l = tok_utf8_decode(s + i, len - i, &cp);
        if (!l) return cmf_err(CMF_E_ARG, "tokenizer: invalid UTF-8 at byte %zu", i);
        int fail = 0;
        if (n->type == NORM_STRIP_ACCENTS) {
            if (!is_mark(cp)) fail = tok_buf_put(out, s + i, (size_t)l);
        } else {
            utf8proc_category_t c = utf8proc_category((utf8proc_int32_t)cp);
            int is_ctrl = cp != '\t' && cp != '\n' && cp != '\r' &&
                          (c == UTF8PROC_CATEGORY_CC || c == UTF8PROC_CATEGORY_CF || c == UTF8PROC_CATEGORY_CO ||
                           c == UTF8PROC_CATEGORY_CS || c == UTF8PROC_CATEGORY_CN);
            if (n->clean_text && (cp == 0 || cp == 0xFFFD || is_ctrl)) {
                /* dropped */
            } else if (n->clean_text && tok_is_whitespace(cp)) {
                fail = tok_buf_put(out, " ", 1);
            } else if (n->chinese && is_chinese(cp)) {
                fail = tok_buf_put(out, " ", 1) || tok_buf_put(out, s + i, (size_t)l) || tok_buf_put(out, " ", 1);
            } else {
                fail = tok_buf_put(out, s + i, (size_t)l);
            }
        }
        if (fail) return cmf_err(CMF_E_NOMEM, "tokenizer: out of memory");
        i += (size_t)l;
    }
    return CMF_OK;
}

static cmf_status replace_all(const tok_normalizer *n, const char *s, size_t len, tok_buf *out) {
    pcre2_match_data *md = pcre2_match_data_create_from_pattern(n->re, NULL);
    if (!md) return cmf_err(CMF_E_NOMEM, "tokenizer: out of memory");
    size_t pos = 0, ms, me;
    int r;
    cmf_status st = CMF_OK;
    while ((r = tok_regex_next(n->re, md, s, len, pos, &ms, &me)) == 1) {
        if (tok_buf_put(out, s + pos, ms - pos) || tok_buf_put(out, n->content, n->content_len)) {
            st = cmf_err(CMF_E_NOMEM, "tokenizer: out of memory");
            break;
        }
        pos = me;
    }
    if (r < 0) st = CMF_E_FORMAT;
    if (st == CMF_OK && tok_buf_put(out, s + pos, len - pos)) st = cmf_err(CMF_E_NOMEM, "tokenizer: out of memory");
    pcre2_match_data_free(md);
    return st;
}

/* Applies one normalizer, appending to out (which is empty on entry). */
static cmf_status normalize_one(const tok_normalizer *n, const char *s, size_t len, tok_buf *out) {
    switch (n->type) {
    case NORM_NFC: return unicode_map(s, len, UTF8PROC_STABLE | UTF8PROC_COMPOSE, out);
    case NORM_NFD: return unicode_map(s, len, UTF8PROC_STABLE | UTF8PROC_DECOMPOSE, out);
    case NORM_NFKC: return unicode_map(s, len, UTF8PROC_STABLE | UTF8PROC_COMPOSE | UTF8PROC_COMPAT, out);
    case NORM_NFKD: return unicode_map(s, len, UTF8PROC_STABLE | UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT, out);
    case NORM_LOWERCASE: return lowercase(s, len, out);
    case NORM_STRIP_ACCENTS: return char_filter(n, s, len, out);
    case NORM_STRIP: {
        size_t a = 0, b = len;
        uint32_t cp;
        int l;
        while (n->left && a < b && (l = tok_utf8_decode(s + a, b - a, &cp)) && tok_is_whitespace(cp)) a += (size_t)l;
        while (n->right && b > a) {
            size_t k = b - 1;
            while (k > a && ((unsigned char)s[k] & 0xC0) == 0x80) k--;
            if (!tok_utf8_decode(s + k, b - k, &cp) || !tok_is_whitespace(cp)) break;
            b = k;
        }
        return tok_buf_put(out, s + a, b - a) ? cmf_err(CMF_E_NOMEM, "tokenizer: out of memory") : CMF_OK;
    }
    case NORM_REPLACE: return replace_all(n, s, len, out);
    case NORM_PREPEND:
        /* HF Prepend: only a non-empty string gets the prefix */
        if (len && tok_buf_put(out, n->content, n->content_len)) return cmf_err(CMF_E_NOMEM, "out of memory");
        return tok_buf_put(out, s, len) ? cmf_err(CMF_E_NOMEM, "tokenizer: out of memory") : CMF_OK;
    case NORM_BERT: {
        tok_buf a = {0}, b = {0};
        cmf_status st = char_filter(n, s, len, &a);
        const char *cur = a.p ? a.p : "";
        size_t cl = a.n;
        if (st == CMF_OK && n->strip_accents) {
            st = unicode_map(cur, cl, UTF8PROC_STABLE | UTF8PROC_DECOMPOSE, &b);
            tok_buf c = {0};
            tok_normalizer sa = {.type = NORM_STRIP_ACCENTS};
            if (st == CMF_OK) st = char_filter(&sa, b.p ? b.p : "", b.n, &c);
            tok_buf_free(&b);
            tok_buf_free(&a);
            a = c;
            cur = a.p ? a.p : "";
            cl = a.n;
        }
        if (st == CMF_OK && n->lowercase) st = lowercase(cur, cl, out);
        else if (st == CMF_OK && tok_buf_put(out, cur, cl)) st = cmf_err(CMF_E_NOMEM, "tokenizer: out of memory");
        tok_buf_free(&a);
        return st;
    }
    case NORM_SEQUENCE: {
        tok_buf cur = {0}, nxt = {0};
        if (tok_buf_put(&cur, s, len)) return cmf_err(CMF_E_NOMEM, "tokenizer: out of memory");
        for (size_t i = 0; i < n->n_seq; i++) {
            nxt.n = 0;
            cmf_status st = normalize_one(n->seq[i], cur.p ? cur.p : "", cur.n, &nxt);
            if (st != CMF_OK) {
                tok_buf_free(&cur);
                tok_buf_free(&nxt);
                return st;
            }
            tok_buf t = cur;
            cur = nxt;
            nxt = t;
        }
        int fail = tok_buf_put(out, cur.p ? cur.p : "", cur.n);
        tok_buf_free(&cur);
        tok_buf_free(&nxt);
        return fail ? cmf_err(CMF_E_NOMEM, "tokenizer: out of memory") : CMF_OK;
    }
    }
    return cmf_err(CMF_E_UNSUPPORTED, "tokenizer: unknown normalizer");
}

cmf_status tok_normalize(const tok_normalizer *n, const char *s, size_t len, tok_buf *out) {
    out->n = 0;
    return normalize_one(n, s, len, out);
}
