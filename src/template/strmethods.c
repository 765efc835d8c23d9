/* strmethods.c — the Python str methods a chat template may call beyond the basic ones of builtins.c: padding
 * (ljust, rjust, center, zfill, expandtabs), searching with start/end (find, rfind, index, rindex, count),
 * partition/rpartition, rsplit, splitlines, removeprefix/removesuffix, casefold, swapcase (casemap.c), format and
 * format_map (strformat.c) and the character-class tests (isdigit, isdecimal, isnumeric, isalpha, isalnum, isspace,
 * islower, isupper, istitle, isascii, isprintable). jinja2's sandbox forbids no str method (only names starting
 * with '_'; format and format_map run through its SandboxedFormatter); not implemented: encode (bytes),
 * maketrans/translate, isidentifier (XID properties utf8proc does not give).
 *
 * Semantics: CPython 3.11 Objects/unicodeobject.c (indices and widths count code points; the padding split of
 * center is CPython's pad()). Character classes come from utf8proc's general categories (Unicode 15) plus the
 * few tables below where Python's properties are not a category (taken from Python 3.11's unicodedata, Unicode
 * 14): code points whose category changed between those versions may answer differently. */
#define _GNU_SOURCE /* memmem */
#include <stdlib.h>
#include <string.h>

#include <utf8proc.h>

#include "template/eval.h"
#include "util/error.h"

#define NOMEM() cmf_err(CMF_E_NOMEM, "template render")
#define TRY(x) do { cmf_status st_ = (x); if (st_) return st_; } while (0)

static const char *const METHODS[] = {"ljust", "rjust", "center", "zfill", "expandtabs", "find", "rfind", "index",
                                      "rindex", "count", "partition", "rpartition", "splitlines", "removeprefix",
                                      "removesuffix", "casefold", "isdigit", "isdecimal", "isalpha", "isalnum",
                                      "isspace", "islower", "isupper", "istitle", "isnumeric", "isascii",
                                      "isprintable", "rsplit", "swapcase", "format", "format_map", NULL};

const char *jinja_str_method_name(const char *name) {
    for (const char *const *m = METHODS; *m; m++)
        if (!strcmp(*m, name)) return *m;
    return NULL;
}

/* ---- character classes ---- */

typedef struct cp_range { int32_t a, b; } cp_range;

static int in_ranges(const cp_range *r, size_t n, int32_t cp) {
    for (size_t i = 0; i < n; i++)
        if (cp >= r[i].a && cp <= r[i].b) return 1;
    return 0;
}

/* Python's str.isspace: bidirectional class WS, B or S, or category Zs. */
static const cp_range SPACE[] = {{0x9, 0xD}, {0x1C, 0x20}, {0x85, 0x85}, {0xA0, 0xA0}, {0x1680, 0x1680},
                                 {0x2000, 0x200A}, {0x2028, 0x2029}, {0x202F, 0x202F}, {0x205F, 0x205F},
                                 {0x3000, 0x3000}};
/* Digits that are not decimal digits (Numeric_Type=Digit: superscripts, circled digits, ...). */
static const cp_range DIGIT[] = {{0xB2, 0xB3}, {0xB9, 0xB9}, {0x1369, 0x1371}, {0x19DA, 0x19DA}, {0x2070, 0x2070},
                                 {0x2074, 0x2079}, {0x2080, 0x2089}, {0x2460, 0x2468}, {0x2474, 0x247C},
                                 {0x2488, 0x2490}, {0x24EA, 0x24EA}, {0x24F5, 0x24FD}, {0x24FF, 0x24FF},
                                 {0x2776, 0x277E}, {0x2780, 0x2788}, {0x278A, 0x2792}, {0x10A40, 0x10A43},
                                 {0x10E60, 0x10E68}, {0x11052, 0x1105A}, {0x1F100, 0x1F10A}};
/* Lowercase code points outside category Ll (Other_Lowercase: ª º ʰ, small Roman numerals, circled letters). */
static const cp_range OTHER_LOWER[] = {
    {0xAA, 0xAA}, {0xBA, 0xBA}, {0x2B0, 0x2B8}, {0x2C0, 0x2C1}, {0x2E0, 0x2E4}, {0x345, 0x345}, {0x37A, 0x37A},
    {0x1D2C, 0x1D6A}, {0x1D78, 0x1D78}, {0x1D9B, 0x1DBF}, {0x2071, 0x2071}, {0x207F, 0x207F}, {0x2090, 0x209C},
    {0x2170, 0x217F}, {0x24D0, 0x24E9}, {0x2C7C, 0x2C7D}, {0xA69C, 0xA69D}, {0xA770, 0xA770}, {0xA7F8, 0xA7F9},
    {0xAB5C, 0xAB5F}, {0x10780, 0x10780}, {0x10783, 0x10785}, {0x10787, 0x107B0}, {0x107B2, 0x107BA}};
/* Uppercase code points outside category Lu (Roman numerals, circled and squared capitals). */
static const cp_range OTHER_UPPER[] = {{0x2160, 0x216F}, {0x24B6, 0x24CF}, {0x1F130, 0x1F149}, {0x1F150, 0x1F169},
                                       {0x1F170, 0x1F189}};
#define NR(t) (sizeof(t) / sizeof((t)[0]))

int jinja_cp_is_lower(int32_t cp) {
    return utf8proc_category(cp) == UTF8PROC_CATEGORY_LL || in_ranges(OTHER_LOWER, NR(OTHER_LOWER), cp);
}
int jinja_cp_is_upper(int32_t cp) {
    return utf8proc_category(cp) == UTF8PROC_CATEGORY_LU || in_ranges(OTHER_UPPER, NR(OTHER_UPPER), cp);
}
int jinja_cp_is_space(int32_t cp) { return in_ranges(SPACE, NR(SPACE), cp); }

enum { IS_DIGIT, IS_DECIMAL, IS_ALPHA, IS_ALNUM, IS_SPACE, IS_NUMERIC, IS_ASCII, IS_PRINTABLE };

static int cp_is(int cls, int32_t cp) {
    utf8proc_category_t cat = utf8proc_category(cp);
    int alpha = cat >= UTF8PROC_CATEGORY_LU && cat <= UTF8PROC_CATEGORY_LO;
    int decimal = cat == UTF8PROC_CATEGORY_ND;
    switch (cls) {
    case IS_DIGIT: return decimal || in_ranges(DIGIT, NR(DIGIT), cp);
    case IS_DECIMAL: return decimal;
    case IS_ALPHA: return alpha;
    case IS_ALNUM: return alpha || (cat >= UTF8PROC_CATEGORY_ND && cat <= UTF8PROC_CATEGORY_NO);
    case IS_NUMERIC: return jinja_cp_is_numeric(cp);
    case IS_ASCII: return cp < 128;
    case IS_PRINTABLE: /* CPython: not Cc Cf Cs Co Cn Zl Zp Zs, but the space itself */
        return cp == ' ' || !(cat == UTF8PROC_CATEGORY_CN || (cat >= UTF8PROC_CATEGORY_ZS && cat <= UTF8PROC_CATEGORY_CO));
    default: return in_ranges(SPACE, NR(SPACE), cp);
    }
}

/* The next code point of s[*i..n) (a byte that starts no well-formed sequence: -1, one byte). */
static int32_t next_cp(const char *s, size_t n, size_t *i) {
    utf8proc_int32_t cp;
    utf8proc_ssize_t k = utf8proc_iterate((const utf8proc_uint8_t *)s + *i, (utf8proc_ssize_t)(n - *i), &cp);
    if (k <= 0) { (*i)++; return -1; }
    *i += (size_t)k;
    return cp;
}

/* str.isdigit ... isprintable (CPython: an empty string is False, but for isascii and isprintable; islower/isupper
 * need one cased character and no character of the other case or titlecase; istitle: upper and titlecase characters
 * only after uncased ones, lower-case ones only after cased ones, and one cased character). */
int jinja_str_is(jv s, const char *m) {
    const char *p = s.u.s->s;
    size_t n = s.u.s->len, i = 0;
    if (!strcmp(m, "istitle")) {
        int cased = 0, prev = 0;
        while (i < n) {
            int32_t cp = next_cp(p, n, &i);
            if (cp < 0) { prev = 0; continue; }
            if (jinja_cp_is_upper(cp) || utf8proc_category(cp) == UTF8PROC_CATEGORY_LT) {
                if (prev) return 0;
                prev = cased = 1;
            } else if (jinja_cp_is_lower(cp)) {
                if (!prev) return 0;
                prev = cased = 1;
            } else prev = 0;
        }
        return cased;
    }
    if (!strcmp(m, "islower") || !strcmp(m, "isupper")) {
        int want_lower = m[2] == 'l', cased = 0;
        while (i < n) {
            int32_t cp = next_cp(p, n, &i);
            if (cp < 0) continue;
            int lo = jinja_cp_is_lower(cp), up = jinja_cp_is_upper(cp), title = utf8proc_category(cp) == UTF8PROC_CATEGORY_LT;
            if (title || (want_lower ? up : lo)) return 0;
            if (want_lower ? lo : up) cased = 1;
        }
        return cased;
    }
    int cls = !strcmp(m, "isdigit") ? IS_DIGIT : !strcmp(m, "isdecimal") ? IS_DECIMAL : !strcmp(m, "isalpha") ? IS_ALPHA
            : !strcmp(m, "isalnum") ? IS_ALNUM : !strcmp(m, "isnumeric") ? IS_NUMERIC : !strcmp(m, "isascii") ? IS_ASCII
            : !strcmp(m, "isprintable") ? IS_PRINTABLE : IS_SPACE;
    if (n == 0) return cls == IS_ASCII || cls == IS_PRINTABLE;
    while (i < n) {
        int32_t cp = next_cp(p, n, &i);
        if (cp < 0 || !cp_is(cls, cp)) return 0;
    }
    return 1;
}

/* str.casefold: full case folding (CaseFolding.txt C + F: 'ß' -> 'ss'), code point by code point. */
static cmf_status casefold(jctx *c, const jnode *at, jv s, jv *out) {
    jbuf b = {.limit = c->lim.max_output};
    const char *p = s.u.s->s;
    size_t n = s.u.s->len, i = 0;
    while (i < n && !b.over) {
        size_t i0 = i;
        int32_t cp = next_cp(p, n, &i);
        utf8proc_int32_t dst[8];
        int bc = 0;
        utf8proc_ssize_t k = cp < 0 ? -1 : utf8proc_decompose_char(cp, dst, 8, UTF8PROC_CASEFOLD, &bc);
        if (k <= 0 || k > 8) { jbuf_put(&b, p + i0, i - i0); continue; }
        for (utf8proc_ssize_t j = 0; j < k; j++) {
            utf8proc_uint8_t enc[4];
            jbuf_put(&b, (const char *)enc, (size_t)utf8proc_encode_char(dst[j], enc));
        }
    }
    if (b.over) { jbuf_free(&b); return jinja_limit_err(at, "string size", c->lim.max_output); }
    return jb_ret_buf(out, &b);
}

/* ---- arguments ---- */

/* An integer argument (bool counts, as in Python); *v unchanged when absent. */
static cmf_status int_arg(const jnode *at, const jv *a, int64_t *v) {
    if (!a) return CMF_OK;
    if (a->k == JV_INT) *v = a->u.i;
    else if (a->k == JV_BOOL) *v = a->u.b;
    else return jinja_rt_err(at, "'%s' object cannot be interpreted as an integer", jv_kind_name(*a));
    return CMF_OK;
}

/* A width for padding: within the string size limit (a clear error beyond it, before any padding is made). */
static cmf_status width_arg(jctx *c, const jnode *at, const jv *a, int64_t *w) {
    if (!a) return jinja_rt_err(at, "the padding methods need a width");
    TRY(int_arg(at, a, w));
    if (*w > (int64_t)c->lim.max_output) return jinja_limit_err(at, "string size (padding width)", c->lim.max_output);
    return CMF_OK;
}

/* The fill character argument: one code point (its bytes into fill/fl). */
static cmf_status fill_arg(const jnode *at, const jv *a, const char **fill, size_t *fl) {
    *fill = " ";
    *fl = 1;
    if (!a) return CMF_OK;
    if (a->k != JV_STR) return jinja_rt_err(at, "The fill character must be a unicode character, not %s", jv_kind_name(*a));
    if (utf8_count(a->u.s->s, a->u.s->len) != 1) return jinja_rt_err(at, "The fill character must be exactly one character long");
    *fill = a->u.s->s;
    *fl = a->u.s->len;
    return CMF_OK;
}

static cmf_status need_str_arg(const jnode *at, const jv *a, const char *m) {
    if (a && a->k == JV_STR) return CMF_OK;
    return jinja_rt_err(at, "%s() argument must be str, not '%s'", m, a ? jv_kind_name(*a) : "nothing");
}

static void put_fill(jbuf *b, const char *fill, size_t fl, int64_t n) {
    for (int64_t k = 0; k < n && !b->over; k++) jbuf_put(b, fill, fl);
}

/* ljust / rjust / center / zfill. */
static cmf_status pad(jctx *c, const jnode *at, jv s, const char *m, const jargs *a, jv *out) {
    int64_t w = 0;
    const char *fill = "0";
    size_t fl = 1;
    TRY(width_arg(c, at, jargs_get(a, 0, NULL), &w));
    if (m[0] != 'z') TRY(fill_arg(at, jargs_get(a, 1, NULL), &fill, &fl));
    int64_t len = (int64_t)utf8_count(s.u.s->s, s.u.s->len);
    if (w <= len) { *out = jv_retain(s); return CMF_OK; }
    int64_t marg = w - len, left = m[0] == 'l' ? 0 : m[0] == 'c' ? marg / 2 + (marg & w & 1) : marg;
    jbuf b = {.limit = c->lim.max_output};
    const char *p = s.u.s->s;
    size_t n = s.u.s->len;
    if (m[0] == 'z' && n && (p[0] == '+' || p[0] == '-')) { jbuf_put(&b, p, 1); p++; n--; } /* the sign first */
    put_fill(&b, fill, fl, left);
    jbuf_put(&b, p, n);
    put_fill(&b, fill, fl, marg - left);
    if (b.over) { jbuf_free(&b); return jinja_limit_err(at, "string size", c->lim.max_output); }
    return jb_ret_buf(out, &b);
}

/* expandtabs(tabsize=8): each tab up to the next multiple of tabsize (the column restarts after \n and \r; a
 * tabsize <= 0 removes tabs). */
static cmf_status expandtabs(jctx *c, const jnode *at, jv s, const jargs *a, jv *out) {
    int64_t ts = 8;
    TRY(int_arg(at, jargs_get(a, 0, "tabsize"), &ts));
    jbuf b = {.limit = c->lim.max_output};
    const char *p = s.u.s->s;
    size_t n = s.u.s->len, i = 0;
    int64_t col = 0;
    while (i < n && !b.over) {
        size_t i0 = i;
        int32_t cp = next_cp(p, n, &i);
        if (cp == '\t') {
            if (ts <= 0) continue;
            int64_t k = ts - col % ts;
            if (k > (int64_t)c->lim.max_output) { b.over = 1; break; }
            put_fill(&b, " ", 1, k);
            col += k;
        } else {
            jbuf_put(&b, p + i0, i - i0);
            col = cp == '\n' || cp == '\r' ? 0 : col + 1;
        }
    }
    if (b.over) { jbuf_free(&b); return jinja_limit_err(at, "string size", c->lim.max_output); }
    return jb_ret_buf(out, &b);
}

/* ---- searching ---- */

/* The byte range [*b0, *b1) and its first code point index *cp0 of s[start:end] (slice arguments in code points,
 * None or absent: the ends). Returns 0, or 1 when start lies past the end (CPython's find gives -1 then, even for
 * an empty needle). */
static cmf_status search_range(const jnode *at, jv s, const jv *st, const jv *en, size_t *b0, size_t *b1,
                               int64_t *cp0, int *past) {
    int64_t len = (int64_t)utf8_count(s.u.s->s, s.u.s->len), start = 0, end = len;
    if (st && st->k != JV_NONE) TRY(int_arg(at, st, &start));
    if (en && en->k != JV_NONE) TRY(int_arg(at, en, &end));
    if (start < 0) { start += len; if (start < 0) start = 0; }
    if (end < 0) { end += len; if (end < 0) end = 0; }
    if (end > len) end = len;
    *past = start > len;
    if (start > end) start = end;
    *b0 = utf8_offset(s.u.s->s, s.u.s->len, (size_t)start);
    *b1 = *b0 + utf8_offset(s.u.s->s + *b0, s.u.s->len - *b0, (size_t)(end - start));
    *cp0 = start;
    return CMF_OK;
}

/* The last occurrence of needle in h[0..hn) (linear: the first one in the reversed texts), or NULL. */
static const char *find_last(const char *h, size_t hn, const char *nd, size_t nn, int *oom) {
    if (nn > hn) return NULL;
    if (nn == 0) return h + hn;
    char *rh = malloc(hn), *rn = malloc(nn);
    const char *r = NULL;
    if (!rh || !rn) *oom = 1;
    else {
        for (size_t i = 0; i < hn; i++) rh[i] = h[hn - 1 - i];
        for (size_t i = 0; i < nn; i++) rn[i] = nd[nn - 1 - i];
        const char *q = memmem(rh, hn, rn, nn);
        if (q) r = h + (hn - (size_t)(q - rh) - nn);
    }
    free(rh);
    free(rn);
    return r;
}

/* find / rfind / index / rindex / count (sub, start=None, end=None). */
static cmf_status search(jctx *c, const jnode *at, jv s, const char *m, const jargs *a, jv *out) {
    (void)c;
    const jv *sub = jargs_get(a, 0, NULL);
    if (!sub || sub->k != JV_STR)
        return jinja_rt_err(at, "must be str, not %s", sub ? jv_kind_name(*sub) : "nothing");
    size_t b0, b1;
    int64_t cp0;
    int past;
    TRY(search_range(at, s, jargs_get(a, 1, NULL), jargs_get(a, 2, NULL), &b0, &b1, &cp0, &past));
    const char *h = s.u.s->s + b0, *nd = sub->u.s->s;
    size_t hn = b1 - b0, nn = sub->u.s->len;
    if (!strcmp(m, "count")) {
        int64_t k = 0;
        if (past) k = 0;
        else if (nn == 0) k = (int64_t)utf8_count(h, hn) + 1;
        else for (const char *p = h, *q; (q = jb_find_sub(p, (size_t)(h + hn - p), nd, nn)); p = q + nn) k++;
        *out = jv_int(k);
        return CMF_OK;
    }
    int oom = 0;
    const char *q = past ? NULL : m[0] == 'r' ? find_last(h, hn, nd, nn, &oom) : jb_find_sub(h, hn, nd, nn);
    if (oom) return NOMEM();
    if (!q && m[m[0] == 'r'] == 'i') return jinja_rt_err(at, "substring not found");
    *out = jv_int(q ? cp0 + (int64_t)utf8_count(h, (size_t)(q - h)) : -1);
    return CMF_OK;
}

/* partition / rpartition: a tuple (head, sep, tail); not found: (s, '', '') or ('', '', s). */
static cmf_status partition(const jnode *at, jv s, const char *m, const jargs *a, jv *out) {
    const jv *sep = jargs_get(a, 0, NULL);
    TRY(need_str_arg(at, sep, m));
    if (sep->u.s->len == 0) return jinja_rt_err(at, "empty separator");
    int oom = 0, rev = m[0] == 'r';
    const char *p = s.u.s->s, *q = rev ? find_last(p, s.u.s->len, sep->u.s->s, sep->u.s->len, &oom)
                                       : jb_find_sub(p, s.u.s->len, sep->u.s->s, sep->u.s->len);
    if (oom) return NOMEM();
    jv t = jv_list_new(3);
    if (jv_is_oom(t)) return NOMEM();
    t.u.l->tuple = 1;
    size_t n = s.u.s->len;
    if (!q) {
        jv_list_push(t, rev ? jv_cstr("") : jv_retain(s));
        jv_list_push(t, jv_cstr(""));
        jv_list_push(t, rev ? jv_retain(s) : jv_cstr(""));
    } else {
        size_t h = (size_t)(q - p), e = h + sep->u.s->len;
        jv_list_push(t, jv_strn(p, h));
        jv_list_push(t, jv_retain(*sep));
        jv_list_push(t, jv_strn(p + e, n - e));
    }
    for (size_t i = 0; i < 3; i++)
        if (jv_is_oom(t.u.l->v[i])) { jv_release(t); return NOMEM(); }
    *out = t;
    return CMF_OK;
}

/* splitlines(keepends=False): lines end at \n, \r, \r\n, \v, \f, \x1c, \x1d, \x1e, U+0085, U+2028, U+2029; a
 * final line ending makes no empty line. The lines count against the list-items budget. */
static cmf_status splitlines(jctx *c, const jnode *at, jv s, const jargs *a, jv *out) {
    const jv *ke = jargs_get(a, 0, "keepends");
    int keep = ke && jv_truthy(*ke);
    jv l = jv_list_new(0);
    if (jv_is_oom(l)) return NOMEM();
    const char *p = s.u.s->s;
    size_t n = s.u.s->len, i = 0, start = 0;
    cmf_status st = CMF_OK;
    while (i < n && !st) {
        size_t i0 = i;
        int32_t cp = next_cp(p, n, &i);
        int eol = cp == '\n' || cp == '\r' || cp == 0x0B || cp == 0x0C || (cp >= 0x1C && cp <= 0x1E) || cp == 0x85 ||
                  cp == 0x2028 || cp == 0x2029;
        if (!eol) continue;
        if (cp == '\r' && i < n && p[i] == '\n') i++;
        if ((st = jinja_charge_items(c, at, 1))) break;
        if (jv_list_push(l, jv_strn(p + start, (keep ? i : i0) - start))) st = NOMEM();
        start = i;
    }
    if (!st && start < n && !(st = jinja_charge_items(c, at, 1)) && jv_list_push(l, jv_strn(p + start, n - start)))
        st = NOMEM();
    if (st) { jv_release(l); return st; }
    *out = l;
    return CMF_OK;
}

/* rsplit(sep=None, maxsplit=-1): CPython stringlib rsplit / rsplit_whitespace — at most maxsplit splits from the
 * right (a negative maxsplit: all); without sep at runs of whitespace (str.isspace), with the leading whitespace of
 * the unsplit rest kept. The pieces count against the list-items budget. */
static cmf_status rsplit(jctx *c, const jnode *at, jv s, const jargs *a, jv *out) {
    const jv *sep = jargs_get(a, 0, "sep");
    int64_t max = -1;
    TRY(int_arg(at, jargs_get(a, 1, "maxsplit"), &max));
    if (sep && sep->k == JV_NONE) sep = NULL;
    if (sep && sep->k != JV_STR) return jinja_rt_err(at, "must be str or None, not %s", jv_kind_name(*sep));
    if (sep && sep->u.s->len == 0) return jinja_rt_err(at, "empty separator");
    if (max < 0) max = INT64_MAX;
    const char *p = s.u.s->s;
    size_t n = s.u.s->len;
    jv l = jv_list_new(0); /* the pieces right to left, reversed at the end */
    if (jv_is_oom(l)) return NOMEM();
    cmf_status st = CMF_OK;
    if (!sep) {
        size_t i = n; /* p[0..i) is still to split */
        while (max-- > 0 && !st) {
            size_t b;
            while (i > 0) { /* skip whitespace */
                int32_t cp = jinja_prev_cp(p, i, &b);
                if (!jinja_cp_is_space(cp)) break;
                i = b;
            }
            if (i == 0) break;
            size_t j = i;
            while (i > 0) {
                int32_t cp = jinja_prev_cp(p, i, &b);
                if (jinja_cp_is_space(cp)) break;
                i = b;
            }
            if (jv_list_push(l, jv_strn(p + i, j - i))) st = NOMEM();
        }
        size_t b;
        while (!st && i > 0 && jinja_cp_is_space(jinja_prev_cp(p, i, &b))) i = b;
        if (!st && i > 0 && jv_list_push(l, jv_strn(p, i))) st = NOMEM();
    } else {
        size_t m = sep->u.s->len, pos = 0; /* pos: bytes taken from the right */
        char *rh = malloc(n ? n : 1), *rn = malloc(m);
        if (!rh || !rn) st = NOMEM();
        else {
            for (size_t i = 0; i < n; i++) rh[i] = p[n - 1 - i];
            for (size_t i = 0; i < m; i++) rn[i] = sep->u.s->s[m - 1 - i];
            for (; max > 0 && !st; max--) {
                const char *q = jb_find_sub(rh + pos, n - pos, rn, m);
                if (!q) break;
                size_t off = (size_t)(q - rh);
                if (jv_list_push(l, jv_strn(p + n - off, off - pos))) st = NOMEM();
                pos = off + m;
            }
            if (!st && jv_list_push(l, jv_strn(p, n - pos))) st = NOMEM();
        }
        free(rh);
        free(rn);
    }
    for (size_t i = 0; !st && i < l.u.l->n; i++)
        if (jv_is_oom(l.u.l->v[i])) st = NOMEM();
    if (!st) st = jinja_charge_items(c, at, l.u.l->n);
    if (st) { jv_release(l); return st; }
    for (size_t i = 0, j = l.u.l->n; i + 1 < j; i++, j--) {
        jv t = l.u.l->v[i];
        l.u.l->v[i] = l.u.l->v[j - 1];
        l.u.l->v[j - 1] = t;
    }
    *out = l;
    return CMF_OK;
}

cmf_status jinja_str_method(jctx *c, const jnode *at, jv s, const char *m, const jargs *a, jv *out) {
    /* CPython: only expandtabs(tabsize=) and splitlines(keepends=) take a keyword */
    if (!strcmp(m, "format")) return jinja_str_format(c, at, s, a->pos, a->npos, a, NULL, out); /* (strformat.c) */
    const char *kw = !strcmp(m, "expandtabs") ? "tabsize" : !strcmp(m, "splitlines") ? "keepends" : NULL;
    const char *kw2 = !strcmp(m, "rsplit") ? "maxsplit" : NULL;
    if (kw2) kw = "sep";
    for (size_t k = 0; k < a->nkw; k++) {
        if (!kw) return jinja_rt_err(at, "%s() takes no keyword arguments", m);
        if (strcmp(a->kwn[k], kw) && (!kw2 || strcmp(a->kwn[k], kw2)))
            return jinja_rt_err(at, "'%s' is an invalid keyword argument for %s()", a->kwn[k], m);
    }
    if (!strcmp(m, "format_map")) {
        const jv *map = jargs_get(a, 0, NULL);
        if (!map || a->npos != 1) return jinja_rt_err(at, "format_map() takes exactly one argument (%zu given)", a->npos);
        return jinja_str_format(c, at, s, NULL, 0, NULL, map, out);
    }
    if (!strcmp(m, "rsplit")) return rsplit(c, at, s, a, out);
    if (!strcmp(m, "swapcase")) return jb_map_case(s, CASE_SWAPCASE, out);
    if (!strncmp(m, "is", 2)) {
        if (a->npos || a->nkw) return jinja_rt_err(at, "str.%s() takes no arguments", m);
        *out = jv_bool(jinja_str_is(s, m));
        return CMF_OK;
    }
    if (!strcmp(m, "ljust") || !strcmp(m, "rjust") || !strcmp(m, "center") || !strcmp(m, "zfill"))
        return pad(c, at, s, m, a, out);
    if (!strcmp(m, "expandtabs")) return expandtabs(c, at, s, a, out);
    if (!strcmp(m, "find") || !strcmp(m, "rfind") || !strcmp(m, "index") || !strcmp(m, "rindex") || !strcmp(m, "count"))
        return search(c, at, s, m, a, out);
    if (!strcmp(m, "partition") || !strcmp(m, "rpartition")) return partition(at, s, m, a, out);
    if (!strcmp(m, "splitlines")) return splitlines(c, at, s, a, out);
    if (!strcmp(m, "casefold")) return casefold(c, at, s, out);
    if (!strcmp(m, "removeprefix") || !strcmp(m, "removesuffix")) {
        const jv *x = jargs_get(a, 0, NULL);
        TRY(need_str_arg(at, x, m));
        int suffix = m[6] == 's';
        if (!jb_prefix_match(s, *x, suffix)) { *out = jv_retain(s); return CMF_OK; }
        return jb_ret_str(out, s.u.s->s + (suffix ? 0 : x->u.s->len), s.u.s->len - x->u.s->len);
    }
    return cmf_err(CMF_E_UNSUPPORTED, "template:%d:%d: unknown str method '%s'", at->line, at->col, m);
}
