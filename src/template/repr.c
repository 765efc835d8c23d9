/* repr.c — str(), repr() and json.dumps of template values (value.h): CPython 3's float repr
 * (Objects/floatobject.c: the shortest digits that read back), str/list/dict repr with Python's quoting and escapes,
 * and Lib/json/encoder.py's output (ensure_ascii, indent, separators, sort_keys). */
#include "template/value.h"

#include <utf8proc.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- formatting ---- */

void jv_float_repr(jbuf *b, double f) {
    char tmp[64];
    if (isnan(f)) { jbuf_puts(b, "nan"); return; }
    if (isinf(f)) { jbuf_puts(b, f < 0 ? "-inf" : "inf"); return; }
    /* shortest %.{p}e that reads back exactly: the digits and decimal exponent of Python's repr */
    int p;
    for (p = 1; p <= 17; p++) {
        snprintf(tmp, sizeof(tmp), "%.*e", p - 1, f);
        if (strtod(tmp, NULL) == f) break;
    }
    char digits[32];
    int nd = 0, neg = tmp[0] == '-';
    const char *q = tmp + neg;
    for (; *q && *q != 'e'; q++)
        if (*q >= '0' && *q <= '9') digits[nd++] = *q;
    int exp10 = atoi(q + 1);
    while (nd > 1 && digits[nd - 1] == '0') nd--;
    jbuf o = {0};
    if (neg) jbuf_put(&o, "-", 1);
    if (exp10 >= -5 + 1 && exp10 < 16) { /* Python: fixed notation when -4 <= exp < 16 */
        if (exp10 < 0) {
            jbuf_puts(&o, "0.");
            for (int i = 0; i < -exp10 - 1; i++) jbuf_put(&o, "0", 1);
            jbuf_put(&o, digits, (size_t)nd);
        } else {
            for (int i = 0; i <= exp10; i++) jbuf_put(&o, i < nd ? &digits[i] : "0", 1);
            jbuf_put(&o, ".", 1);
            if (nd > exp10 + 1) jbuf_put(&o, digits + exp10 + 1, (size_t)(nd - exp10 - 1));
            else jbuf_put(&o, "0", 1);
        }
    } else {
        jbuf_put(&o, digits, 1);
        if (nd > 1) { jbuf_put(&o, ".", 1); jbuf_put(&o, digits + 1, (size_t)(nd - 1)); }
        snprintf(tmp, sizeof(tmp), "e%c%02d", exp10 < 0 ? '-' : '+', exp10 < 0 ? -exp10 : exp10);
        jbuf_puts(&o, tmp);
    }
    if (o.p) jbuf_put(b, o.p, o.n);
    jbuf_free(&o);
}

static void put_str_repr(jbuf *b, const char *s, size_t n) {
    int has_sq = memchr(s, '\'', n) != NULL, has_dq = memchr(s, '"', n) != NULL;
    char q = has_sq && !has_dq ? '"' : '\'';
    jbuf_put(b, &q, 1);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        char e[16];
        if (c == (unsigned char)q || c == '\\') { e[0] = '\\'; e[1] = (char)c; jbuf_put(b, e, 2); }
        else if (c == '\n') jbuf_puts(b, "\\n");
        else if (c == '\r') jbuf_puts(b, "\\r");
        else if (c == '\t') jbuf_puts(b, "\\t");
        else if (c < 0x20 || c == 0x7f) { snprintf(e, sizeof(e), "\\x%02x", c); jbuf_puts(b, e); }
        else if (c >= 0x80) { /* CPython unicode_repr: a code point that is not printable as \xhh, \uhhhh, \Uhhhhhhhh */
            utf8proc_int32_t cp;
            utf8proc_ssize_t k = utf8proc_iterate((const utf8proc_uint8_t *)s + i, (utf8proc_ssize_t)(n - i), &cp);
            if (k <= 0) { jbuf_put(b, s + i, 1); continue; }
            utf8proc_category_t cat = utf8proc_category(cp); /* not printable: Cn, Zs Zl Zp Cc Cf Cs Co */
            if (cat != UTF8PROC_CATEGORY_CN && (cat < UTF8PROC_CATEGORY_ZS || cat > UTF8PROC_CATEGORY_CO)) jbuf_put(b, s + i, (size_t)k);
            else if (cp <= 0xFF) { snprintf(e, sizeof(e), "\\x%02x", (unsigned)cp); jbuf_puts(b, e); }
            else if (cp <= 0xFFFF) { snprintf(e, sizeof(e), "\\u%04x", (unsigned)cp); jbuf_puts(b, e); }
            else { snprintf(e, sizeof(e), "\\U%08x", (unsigned)cp); jbuf_puts(b, e); }
            i += (size_t)k - 1;
        } else jbuf_put(b, (const char *)&s[i], 1);
    }
    jbuf_put(b, &q, 1);
}

static void repr_at(jbuf *b, jv v, int depth);
static void to_str_at(jbuf *b, jv v, int depth);

void jv_repr(jbuf *b, jv v) { repr_at(b, v, 0); }
void jv_to_str(jbuf *b, jv v) { to_str_at(b, v, 0); }

static void repr_at(jbuf *b, jv v, int depth) {
    char tmp[32];
    if (b->over || b->oom) return; /* nothing more gets in: a list that holds one list many times is not walked on */
    if (depth > JV_MAX_DEPTH) { b->deep = b->over = 1; return; }
    switch (v.k) {
    case JV_STR: put_str_repr(b, v.u.s->s, v.u.s->len); break;
    case JV_LIST:
        jbuf_put(b, v.u.l->tuple ? "(" : "[", 1);
        for (size_t i = 0; i < v.u.l->n; i++) {
            if (i) jbuf_put(b, ", ", 2);
            repr_at(b, v.u.l->v[i], depth + 1);
        }
        if (v.u.l->tuple && v.u.l->n == 1) jbuf_put(b, ",", 1);
        jbuf_put(b, v.u.l->tuple ? ")" : "]", 1);
        break;
    case JV_DICT:
        jbuf_put(b, "{", 1);
        for (size_t i = 0; i < v.u.d->n; i++) {
            if (i) jbuf_put(b, ", ", 2);
            if (jv_dict_key_is_str(v.u.d, i)) {
                jv k = jv_dict_key(v.u.d, i);
                put_str_repr(b, k.k == JV_STR ? k.u.s->s : "", k.k == JV_STR ? k.u.s->len : 0);
                jv_release(k);
            } else {
                jv k = jv_dict_key(v.u.d, i);
                repr_at(b, k, depth + 1);
                jv_release(k);
            }
            jbuf_put(b, ": ", 2);
            repr_at(b, v.u.d->v[i], depth + 1);
        }
        jbuf_put(b, "}", 1);
        break;
    case JV_NS: jbuf_puts(b, "<Namespace>"); break;
    case JV_UNDEF: jbuf_puts(b, "Undefined"); break;
    case JV_INT: snprintf(tmp, sizeof(tmp), "%lld", (long long)v.u.i); jbuf_puts(b, tmp); break;
    default: to_str_at(b, v, depth); break;
    }
}

static void to_str_at(jbuf *b, jv v, int depth) {
    switch (v.k) {
    case JV_UNDEF: break;
    case JV_NONE: jbuf_puts(b, "None"); break;
    case JV_BOOL: jbuf_puts(b, v.u.b ? "True" : "False"); break;
    case JV_FLOAT: jv_float_repr(b, v.u.f); break;
    case JV_STR: jbuf_put(b, v.u.s->s, v.u.s->len); break;
    case JV_MACRO: jbuf_puts(b, "<Macro>"); break;
    case JV_FUNC: jbuf_puts(b, "<built-in function>"); break;
    case JV_METHOD: jbuf_puts(b, "<built-in method>"); break;
    default: repr_at(b, v, depth); break;
    }
}

/* The code point of the UTF-8 sequence at s[0..n) (surrogates too, as the escapes "\ud800" make them), its length in
 * *k; a byte that starts no sequence: itself. */
static uint32_t decode_cp(const unsigned char *s, size_t n, size_t *k) {
    unsigned c = s[0];
    size_t len = c >= 0xF0 && c <= 0xF4 ? 4 : c >= 0xE0 ? 3 : c >= 0xC2 && c < 0xE0 ? 2 : 1;
    if (c >= 0xF5 || len > n) len = 1;
    for (size_t j = 1; j < len; j++)
        if ((s[j] & 0xC0) != 0x80) len = 1;
    *k = len;
    if (len == 1) return c;
    uint32_t cp = c & (0x7F >> len);
    for (size_t j = 1; j < len; j++) cp = cp << 6 | (s[j] & 0x3F);
    return cp;
}

static void put_json_str(jbuf *b, const char *s, size_t n, int ascii) {
    jbuf_put(b, "\"", 1);
    size_t run = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        const char *e = NULL;
        char u[16];
        if (ascii && c >= 0x80) { /* json.dumps(ensure_ascii=True): \uXXXX, a surrogate pair above U+FFFF */
            size_t k;
            uint32_t cp = decode_cp((const unsigned char *)s + i, n - i, &k);
            if (cp > 0xFFFF)
                snprintf(u, sizeof(u), "\\u%04x\\u%04x", 0xD800 + ((cp - 0x10000) >> 10), 0xDC00 + ((cp - 0x10000) & 0x3FF));
            else
                snprintf(u, sizeof(u), "\\u%04x", cp);
            jbuf_put(b, s + i - run, run);
            run = 0;
            jbuf_puts(b, u);
            i += k - 1;
            continue;
        }
        switch (c) {
        case '"': e = "\\\""; break;
        case '\\': e = "\\\\"; break;
        case '\n': e = "\\n"; break;
        case '\r': e = "\\r"; break;
        case '\t': e = "\\t"; break;
        case '\b': e = "\\b"; break;
        case '\f': e = "\\f"; break;
        default:
            if (c < 0x20) { snprintf(u, sizeof(u), "\\u%04x", c); e = u; }
        }
        if (e) {
            jbuf_put(b, s + i - run, run);
            run = 0;
            jbuf_puts(b, e);
        } else {
            run++;
        }
    }
    jbuf_put(b, s + n - run, run);
    jbuf_put(b, "\"", 1);
}

static void put_indent(jbuf *b, const jv_json_opts *o, int level) {
    jbuf_put(b, "\n", 1);
    if (o->indent_str) for (int i = 0; i < level && !b->over; i++) jbuf_put(b, o->indent_str, o->indent_len);
    else for (long i = 0; i < (long)o->indent * level && !b->over; i++) jbuf_put(b, " ", 1);
}

typedef struct key_ix { const jv_str *k; size_t i; } key_ix; /* a dict key and its slot */
static int key_cmp(const void *a, const void *b) {
    const jv_str *x = ((const key_ix *)a)->k, *y = ((const key_ix *)b)->k;
    size_t n = x->len < y->len ? x->len : y->len;
    int c = memcmp(x->s, y->s, n);
    return c ? c : (x->len > y->len) - (x->len < y->len);
}

static int to_json(jbuf *b, jv v, const jv_json_opts *o, int level, const char **bad) {
    int indent = o->indent;
    char tmp[32];
    if (level > 200) { *bad = "nesting deeper than 200"; return -1; }
    if (b->over || b->oom) return 0; /* as jv_repr: the caller reports the limit or the lack of memory */
    switch (v.k) {
    case JV_NONE: jbuf_puts(b, "null"); return 0;
    case JV_BOOL: jbuf_puts(b, v.u.b ? "true" : "false"); return 0;
    case JV_INT: snprintf(tmp, sizeof(tmp), "%lld", (long long)v.u.i); jbuf_puts(b, tmp); return 0;
    case JV_FLOAT:
        if (isnan(v.u.f)) jbuf_puts(b, "NaN");
        else if (isinf(v.u.f)) jbuf_puts(b, v.u.f < 0 ? "-Infinity" : "Infinity");
        else jv_float_repr(b, v.u.f);
        return 0;
    case JV_STR: put_json_str(b, v.u.s->s, v.u.s->len, o->ascii); return 0;
    case JV_LIST:
        if (v.u.l->n == 0) { jbuf_puts(b, "[]"); return 0; }
        jbuf_put(b, "[", 1);
        for (size_t i = 0; i < v.u.l->n; i++) {
            if (i) jbuf_puts(b, o->item_sep ? o->item_sep : indent >= 0 ? "," : ", ");
            if (indent >= 0) put_indent(b, o, level + 1);
            if (to_json(b, v.u.l->v[i], o, level + 1, bad)) return -1;
        }
        if (indent >= 0) put_indent(b, o, level);
        jbuf_put(b, "]", 1);
        return 0;
    case JV_DICT: {
        jv_dict *d = v.u.d;
        if (d->n == 0) { jbuf_puts(b, "{}"); return 0; }
        /* order[i]: the i-th key to write; with sort_keys, qsort by key (the keys of a dict are distinct, so its lack
         * of stability does not show; an insertion sort here was quadratic in the keys of a message's dict) */
        key_ix *order = malloc(d->n * sizeof(*order));
        if (!order) { *bad = "out of memory"; return -1; }
        int all_str = 1;
        for (size_t i = 0; i < d->n; i++) { order[i].k = d->k[i]; order[i].i = i; all_str &= jv_dict_key_is_str(d, i); }
        if (o->sort && !all_str) { free(order); *bad = "dict with non-string keys (sort_keys)"; return -1; }
        if (o->sort) qsort(order, d->n, sizeof(*order), key_cmp);
        jbuf_put(b, "{", 1);
        for (size_t i = 0; i < d->n; i++) {
            if (i) jbuf_puts(b, o->item_sep ? o->item_sep : indent >= 0 ? "," : ", ");
            if (indent >= 0) put_indent(b, o, level + 1);
            jv k = jv_dict_key(d, order[i].i); /* json.dumps writes a number / bool / None key as its JSON text */
            if (k.k == JV_STR) put_json_str(b, k.u.s->s, k.u.s->len, o->ascii);
            else {
                jbuf_put(b, "\"", 1);
                if (k.k == JV_FLOAT && (isnan(k.u.f) || isinf(k.u.f))) to_json(b, k, o, level + 1, bad);
                else if (k.k == JV_FLOAT) jv_float_repr(b, k.u.f);
                else to_json(b, k, o, level + 1, bad);
                jbuf_put(b, "\"", 1);
            }
            jv_release(k);
            jbuf_puts(b, o->key_sep ? o->key_sep : ": ");
            if (to_json(b, d->v[order[i].i], o, level + 1, bad)) { free(order); return -1; }
        }
        free(order);
        if (indent >= 0) put_indent(b, o, level);
        jbuf_put(b, "}", 1);
        return 0;
    }
    default: *bad = jv_kind_name(v); return -1;
    }
}

int jv_to_json(jbuf *b, jv v, const jv_json_opts *o, const char **bad) { return to_json(b, v, o, 0, bad); }
