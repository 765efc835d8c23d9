/* filters_more.c — the jinja2 3.1 filters truncate, wordwrap, groupby, slice, striptags, urlencode and
 * filesizeformat (jinja2/filters.py do_truncate, do_wordwrap, sync_do_groupby, sync_do_slice, do_striptags,
 * do_urlencode, do_filesizeformat; wordwrap
 * wraps as Python's textwrap.TextWrapper with expand_tabs=False and replace_whitespace=False; striptags is
 * markupsafe 3's Markup.striptags). Every loop here is bounded by its input or output size: the caller charges the
 * work of what a filter reads and makes, and sizes stay within the string and list-items limits. */
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <utf8proc.h>

#include "template/eval.h"
#include "template/html_entities.h"
#include "util/error.h"

#define NOMEM() cmf_err(CMF_E_NOMEM, "template render")
#define TRY(x) do { cmf_status st_ = (x); if (st_) return st_; } while (0)

static const char *const NAMES[] = {"truncate", "wordwrap", "groupby", "slice", "striptags", "urlencode", "filesizeformat", NULL};

int jinja_filter_more_has(const char *f) {
    for (const char *const *n = NAMES; *n; n++)
        if (!strcmp(*n, f)) return 1;
    return 0;
}

/* An integer argument (bool counts); *v unchanged when absent or None. */
static cmf_status int_arg(const jnode *at, const char *f, const jv *a, int64_t *v) {
    if (!a || a->k == JV_NONE) return CMF_OK;
    if (a->k == JV_INT) *v = a->u.i;
    else if (a->k == JV_BOOL) *v = a->u.b;
    else return jinja_rt_err(at, "%s: '%s' object cannot be interpreted as an integer", f, jv_kind_name(*a));
    return CMF_OK;
}

/* str(v) within the string size limit. */
static cmf_status stringify(jctx *c, const jnode *at, jv v, jv *out) {
    int over;
    *out = jv_stringify(v, c->lim.max_output, &over);
    if (over == 2) return jinja_deep_err(at);
    if (over) return jinja_limit_err(at, "string size", c->lim.max_output);
    return jv_is_oom(*out) ? NOMEM() : CMF_OK;
}

/* ---- truncate(length=255, killwords=False, end='...', leeway=5) ---- */

static cmf_status truncate(jctx *c, const jnode *at, jv s, const jargs *a, jv *out) {
    (void)c;
    if (s.k == JV_UNDEF) { *out = jv_retain(s); return CMF_OK; } /* (its length is 0: returned as it is) */
    int64_t length = 255, leeway = 5;
    const jv *kw = jargs_get(a, 1, "killwords"), *endv = jargs_get(a, 2, "end");
    TRY(int_arg(at, "truncate", jargs_get(a, 0, "length"), &length));
    TRY(int_arg(at, "truncate", jargs_get(a, 3, "leeway"), &leeway));
    if (endv && endv->k != JV_STR) return jinja_rt_err(at, "truncate: end must be a string");
    const char *end = endv ? endv->u.s->s : "...";
    size_t endn = endv ? endv->u.s->len : 3;
    int64_t endcp = (int64_t)utf8_count(end, endn), len = s.k == JV_STR ? (int64_t)utf8_count(s.u.s->s, s.u.s->len) : 0;
    if (length < endcp) return jinja_rt_err(at, "expected length >= %lld, got %lld", (long long)endcp, (long long)length);
    if (leeway < 0) return jinja_rt_err(at, "expected leeway >= 0, got %lld", (long long)leeway);
    if (s.k != JV_STR) { /* do_truncate works on the value itself: a short list, tuple or dict comes back as it is */
        if (s.k != JV_LIST && s.k != JV_DICT) return jinja_rt_err(at, "object of type '%s' has no len()", jv_kind_name(s));
        int64_t n = (int64_t)(s.k == JV_LIST ? s.u.l->n : s.u.d->n);
        if (n <= length || n - length <= leeway) { *out = jv_retain(s); return CMF_OK; }
        if (s.k == JV_DICT) return jinja_rt_err(at, "unhashable type: 'slice'");
        if (kw && jv_truthy(*kw)) /* s[:length - len(end)] + end */
            return jinja_rt_err(at, "can only concatenate %s (not \"str\") to %s", jv_kind_name(s), jv_kind_name(s));
        return jinja_rt_err(at, "'%s' object has no attribute 'rsplit'", jv_kind_name(s));
    }
    if (len <= length || len - length <= leeway) { *out = jv_retain(s); return CMF_OK; }
    size_t cut = utf8_offset(s.u.s->s, s.u.s->len, (size_t)(length - endcp));
    if (!(kw && jv_truthy(*kw))) { /* drop the last partial word: up to the last space of the kept part */
        const char *sp = NULL;
        for (size_t i = cut; i-- > 0;)
            if (s.u.s->s[i] == ' ') { sp = s.u.s->s + i; break; }
        if (sp) cut = (size_t)(sp - s.u.s->s);
    }
    jbuf b = {0};
    jbuf_put(&b, s.u.s->s, cut);
    jbuf_put(&b, end, endn);
    return jb_ret_buf(out, &b);
}

/* ---- slice(slices, fill_with=None) ---- */

static cmf_status slice_filter(jctx *c, const jnode *at, jv in, const jargs *a, jv *out) {
    const jv *nv = jargs_get(a, 0, "slices"), *fill = jargs_get(a, 1, "fill_with");
    if (!nv) return jinja_rt_err(at, "slice: missing the number of slices");
    int64_t n = 0;
    TRY(int_arg(at, "slice", nv, &n));
    if (n == 0) return jinja_rt_err(at, "integer division or modulo by zero");
    jv items;
    TRY(jb_to_list(c, at, in, &items));
    cmf_status st = CMF_OK;
    jv r = jv_list_new(0);
    if (jv_is_oom(r)) st = NOMEM();
    /* each slice is a list made: n of them count against the list-items budget (slice(10**12)) */
    if (!st && n > 0) st = jinja_charge_items(c, at, (size_t)n);
    size_t len = items.u.l->n;
    if (!st && n > 0) {
        size_t per = len / (size_t)n, extra = len % (size_t)n, off = 0;
        for (size_t k = 0; !st && k < (size_t)n; k++) {
            size_t start = off + k * per;
            if (k < extra) off++;
            size_t stop = off + (k + 1) * per;
            jv part = jv_list_new(stop - start + 1);
            if (jv_is_oom(part)) { st = NOMEM(); break; }
            for (size_t i = start; i < stop; i++) jv_list_push(part, jv_retain(items.u.l->v[i]));
            if (fill && fill->k != JV_NONE && k >= extra) jv_list_push(part, jv_retain(*fill));
            if (jv_list_push(r, part)) st = NOMEM();
        }
    }
    jv_release(items);
    if (st) { jv_release(r); return st; }
    *out = r;
    return CMF_OK;
}

/* ---- groupby(attribute, default=None, case_sensitive=False) ---- */

static cmf_status key_of(jctx *c, const jnode *at, jv item, const jv *attr, const jv *def, jv *out) {
    if (attr->k == JV_INT) TRY(jinja_getitem(c, at, item, *attr, out));
    else TRY(jb_attr_path(c, at, item, attr->u.s->s, out));
    if (out->k == JV_UNDEF && def && def->k != JV_NONE) { jv_release(*out); *out = jv_retain(*def); }
    return CMF_OK;
}

/* The groups as (grouper, list) tuples, marked JINJA_GROUP_TUPLE so that .grouper and .list read them. */
static cmf_status groupby(jctx *c, const jnode *at, jv in, const jargs *a, jv *out) {
    const jv *attr = jargs_get(a, 0, "attribute"), *def = jargs_get(a, 1, "default");
    const jv *csv = jargs_get(a, 2, "case_sensitive");
    if (!attr || (attr->k != JV_STR && attr->k != JV_INT))
        return jinja_rt_err(at, "groupby needs an attribute (a string or an integer)");
    int ci = !(csv && jv_truthy(*csv));
    jv items;
    TRY(jb_to_list(c, at, in, &items));
    jv pairs = jv_list_new(items.u.l->n);
    cmf_status st = jv_is_oom(pairs) ? NOMEM() : CMF_OK;
    for (size_t i = 0; !st && i < items.u.l->n; i++) {
        jv k, p = jv_list_new(2);
        if (jv_is_oom(p)) { st = NOMEM(); break; }
        if ((st = key_of(c, at, items.u.l->v[i], attr, def, &k))) { jv_release(p); break; }
        jv_list_push(p, k);
        jv_list_push(p, jv_retain(items.u.l->v[i]));
        jv_list_push(pairs, p);
    }
    jv_release(items);
    jv sorted = jv_undef(NULL);
    if (!st) { /* Python's sorted (stable) by the key, case-folded unless case_sensitive */
        jv kv[2] = {jv_int(0), jv_bool(!ci)};
        jargs sa = {.kwn = (const char *[]){"attribute", "case_sensitive"}, .kwv = kv, .nkw = 2};
        st = jinja_filter(c, at, "sort", pairs, &sa, &sorted);
    }
    jv_release(pairs);
    jv r = jv_list_new(0), grp = jv_undef(NULL);
    if (!st && jv_is_oom(r)) st = NOMEM();
    const jv *gkey = NULL;
    for (size_t i = 0; !st && i < sorted.u.l->n; i++) {
        jv p = sorted.u.l->v[i], k = p.u.l->v[0];
        int same = 0;
        if (gkey) { /* itertools.groupby: consecutive keys that are == (after case folding) */
            int err = 0;
            if (ci && k.k == JV_STR && gkey->k == JV_STR) {
                same = jinja_compare(c, k, *gkey, 1, &err) == 0;
                if (err == 2) st = jinja_walk_err(c, at);
            } else {
                st = jinja_equal(c, at, k, *gkey, &same);
            }
            if (st) break;
        }
        if (!same) {
            jv t = jv_list_new(2);
            grp = jv_list_new(0);
            if (jv_is_oom(t) || jv_is_oom(grp)) { jv_release(t); jv_release(grp); st = NOMEM(); break; }
            t.u.l->tuple = JINJA_GROUP_TUPLE;
            jv_list_push(t, jv_retain(k)); /* the grouper: the first item's key, as it is (not case-folded) */
            jv_list_push(t, grp);
            if (jv_list_push(r, t)) { st = NOMEM(); break; }
            gkey = &p.u.l->v[0];
        }
        if (jv_list_push(grp, jv_retain(p.u.l->v[1]))) st = NOMEM();
    }
    jv_release(sorted);
    if (st) { jv_release(r); return st; }
    *out = r;
    return CMF_OK;
}

/* ---- striptags ---- */

/* Python's str.isspace for the code point at p (its length in *k). */
static int space_at(const char *p, size_t n, size_t *k) {
    utf8proc_int32_t cp;
    utf8proc_ssize_t m = utf8proc_iterate((const utf8proc_uint8_t *)p, (utf8proc_ssize_t)n, &cp);
    *k = m > 0 ? (size_t)m : 1;
    if (m <= 0) return 0;
    return (cp >= 0x9 && cp <= 0xD) || (cp >= 0x1C && cp <= 0x20) || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
           (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F ||
           cp == 0x3000;
}

/* Removes, from the start each time, the first `open`..`close` span (close searched from the open mark's
 * start), until none is left or an open mark has no close (then the rest stays). Done in one pass: the text kept so
 * far never holds an open mark (it would have been found), so a new one can only end at the last byte appended. */
static void strip_spans(jbuf *o, const char *s, size_t n, const char *open, const char *close) {
    size_t on = strlen(open), cn = strlen(close);
    for (size_t i = 0; i < n;) {
        jbuf_put(o, s + i, 1);
        i++;
        if (o->n < on || memcmp(o->p + o->n - on, open, on)) continue;
        /* the close mark may start inside the open mark ("<!-->"): look there first (a few bytes), then in the rest */
        size_t start = o->n - on, tail = n - i, skip = 0;
        char w[16];
        size_t wn = on + (tail < cn - 1 ? tail : cn - 1);
        memcpy(w, open, on);
        memcpy(w + on, s + i, wn - on);
        const char *q = jb_find_sub(w, wn, close, cn);
        if (q && (size_t)(q - w) < on) skip = (size_t)(q - w) + cn;
        else if ((q = jb_find_sub(s + i, tail, close, cn))) skip = on + (size_t)(q - (s + i)) + cn;
        if (!q) { jbuf_put(o, s + i, tail); return; } /* (no close: the loop stops, the rest stays) */
        o->n = start;
        i += skip - on;
    }
}

/* The HTML5 name s[0..n) (with its ';' when it has one): its entry, or NULL. */
static const html_entity *entity(const char *s, size_t n) {
    size_t lo = 0, hi = sizeof HTML_ENTITIES / sizeof HTML_ENTITIES[0];
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        const char *m = HTML_ENTITIES[mid].name;
        size_t mn = strlen(m);
        int c = memcmp(s, m, n < mn ? n : mn);
        if (!c) c = (n > mn) - (n < mn);
        if (!c) return &HTML_ENTITIES[mid];
        if (c < 0) hi = mid;
        else lo = mid + 1;
    }
    return NULL;
}

static void put_cp(jbuf *o, int32_t cp) {
    utf8proc_uint8_t enc[4];
    jbuf_put(o, (const char *)enc, (size_t)utf8proc_encode_char(cp, enc));
}

/* Python's html.unescape (html/__init__.py): each match of &(#[0-9]+;?|#[xX][0-9a-fA-F]+;?|[^\t\n\f <&#;]{1,32};?)
 * is replaced: a numeric reference by its code point (the _invalid_charrefs fix-ups first, then U+FFFD for a
 * surrogate or a value past U+10FFFF, nothing for the _invalid_codepoints), a name by its HTML5 text, else by the
 * text of its longest prefix that is a name (the legacy names without ';') followed by the rest, else kept. */
static void unescape(jbuf *o, const char *s, size_t n) {
    for (size_t i = 0; i < n;) {
        if (s[i] != '&') { jbuf_put(o, s + i, 1); i++; continue; }
        size_t j = i + 1;
        if (j < n && s[j] == '#') {
            int hex = j + 1 < n && (s[j + 1] == 'x' || s[j + 1] == 'X');
            size_t d = j + 1 + (size_t)hex, e = d;
            int64_t v = 0;
            while (e < n && (hex ? isxdigit((unsigned char)s[e]) : isdigit((unsigned char)s[e]))) {
                int dv = s[e] <= '9' ? s[e] - '0' : (s[e] | 32) - 'a' + 10;
                if (v <= 0x10FFFF) v = v * (hex ? 16 : 10) + dv; /* (past U+10FFFF the value no longer matters) */
                e++;
            }
            if (e == d) { jbuf_put(o, "&", 1); i++; continue; } /* "&#" alone, "&#x" alone: kept */
            i = e < n && s[e] == ';' ? e + 1 : e;
            size_t k;
            for (k = 0; k < sizeof HTML_INVALID_CHARREFS / sizeof HTML_INVALID_CHARREFS[0]; k++)
                if (HTML_INVALID_CHARREFS[k].from == v) break;
            if (k < sizeof HTML_INVALID_CHARREFS / sizeof HTML_INVALID_CHARREFS[0]) { put_cp(o, HTML_INVALID_CHARREFS[k].to); continue; }
            if (v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) { put_cp(o, 0xFFFD); continue; }
            int invalid = 0;
            for (k = 0; k < sizeof HTML_INVALID_CODEPOINTS / sizeof HTML_INVALID_CODEPOINTS[0]; k++)
                invalid |= v >= HTML_INVALID_CODEPOINTS[k].a && v <= HTML_INVALID_CODEPOINTS[k].b;
            if (!invalid) put_cp(o, (int32_t)v);
            continue;
        }
        size_t e = j, cps = 0; /* up to 32 code points outside \t \n \f space < & # ; */
        while (e < n && cps < 32 && !memchr("\t\n\f <&#;", s[e], 8)) {
            e++;
            while (e < n && ((unsigned char)s[e] & 0xC0) == 0x80) e++;
            cps++;
        }
        if (e == j) { jbuf_put(o, "&", 1); i++; continue; }
        if (e < n && s[e] == ';') e++;
        const html_entity *h = entity(s + j, e - j);
        size_t used = e - j;
        for (size_t x = e - j - 1; !h && x >= 2; x--) /* the longest prefix that is a name */
            if ((h = entity(s + j, x))) used = x;
        if (!h) { jbuf_put(o, s + i, e - i); i = e; continue; }
        put_cp(o, h->cp[0]);
        if (h->cp[1]) put_cp(o, h->cp[1]);
        jbuf_put(o, s + j + used, e - j - used);
        i = e;
    }
}

static cmf_status striptags(jctx *c, const jnode *at, jv in, jv *out) {
    jv s;
    TRY(stringify(c, at, in, &s));
    /* four passes with copies and entity lookups: ~8 times a plain scan (a loop of it ran 25 s within the budget) */
    cmf_status wst = jinja_charge_work(c, at, 8 * jinja_work_of(s));
    if (wst) { jv_release(s); return wst; }
    jbuf a = {0}, b = {0}, w = {0}, u = {0};
    strip_spans(&a, s.u.s->s, s.u.s->len, "<!--", "-->");
    strip_spans(&b, a.p ? a.p : "", a.n, "<", ">");
    /* " ".join(value.split()) */
    for (size_t i = 0; i < b.n;) {
        size_t k;
        if (space_at(b.p + i, b.n - i, &k)) { i += k; continue; }
        size_t e = i;
        while (e < b.n && !space_at(b.p + e, b.n - e, &k)) e += k;
        if (w.n) jbuf_put(&w, " ", 1);
        jbuf_put(&w, b.p + i, e - i);
        i = e;
    }
    unescape(&u, w.p ? w.p : "", w.n);
    int oom = a.oom || b.oom || w.oom;
    jbuf_free(&a);
    jbuf_free(&b);
    jbuf_free(&w);
    jv_release(s);
    if (oom) { jbuf_free(&u); return NOMEM(); }
    return jb_ret_buf(out, &u);
}

/* ---- urlencode ---- */

/* url_quote: UTF-8 bytes, letters/digits/_.-~ kept (and '/' unless for a query string), others %XX; in a query
 * string a space is '+'. */
static void url_quote(jbuf *b, const char *s, size_t n, int for_qs) {
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        if ((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || strchr("_.-~", ch) ||
            (ch == '/' && !for_qs)) {
            if (ch) { jbuf_put(b, (const char *)&ch, 1); continue; }
        }
        if (ch == ' ' && for_qs) { jbuf_put(b, "+", 1); continue; }
        char hx[4] = {'%', "0123456789ABCDEF"[ch >> 4], "0123456789ABCDEF"[ch & 15], 0};
        jbuf_put(b, hx, 3);
    }
}

static cmf_status quote_value(jctx *c, const jnode *at, jbuf *b, jv v, int for_qs) {
    jv s;
    TRY(stringify(c, at, v, &s));
    url_quote(b, s.u.s->s, s.u.s->len, for_qs);
    jv_release(s);
    return CMF_OK;
}

static cmf_status urlencode(jctx *c, const jnode *at, jv in, jv *out) {
    jbuf b = {.limit = c->lim.max_output};
    cmf_status st = CMF_OK;
    if (in.k != JV_LIST && in.k != JV_DICT) { /* a string or a non-iterable: quoted whole */
        st = quote_value(c, at, &b, in, 0);
    } else {
        jv items;
        if (in.k == JV_DICT) st = jb_dict_items(in, &items);
        else items = jv_retain(in);
        for (size_t i = 0; !st && i < items.u.l->n && !b.over; i++) {
            jv p = items.u.l->v[i];
            if (p.k != JV_LIST || p.u.l->n != 2) {
                st = jinja_rt_err(at, "urlencode: an item of a sequence must be a (key, value) pair, not '%s'",
                                  jv_kind_name(p));
                break;
            }
            if (i) jbuf_put(&b, "&", 1);
            if (!(st = quote_value(c, at, &b, p.u.l->v[0], 1))) {
                jbuf_put(&b, "=", 1);
                st = quote_value(c, at, &b, p.u.l->v[1], 1);
            }
        }
        jv_release(items);
    }
    if (!st) st = jinja_buf_status(c, at, &b, "string size");
    if (st) { jbuf_free(&b); return st; }
    return jb_ret_buf(out, &b);
}

/* ---- filesizeformat(binary=False) ----
 * jinja2's do_filesizeformat: bytes = float(value); 1 -> "1 Byte"; below the base (1000, or 1024 when binary is
 * true) "<int(bytes)> Bytes"; else "%.1f <prefix>" of base * bytes / unit for the first unit = base**(i+2) above
 * bytes (kB MB GB TB PB EB ZB YB, or KiB ... YiB), YB / YiB past the last. Python compares the float with the exact
 * integer base**(i+2): 1000**8 and 1000**9 are not doubles, so their nearest doubles carry whether they lie below
 * the true power (then bytes equal to that double is still below it); the division rounds the power to a double, as
 * Python's float / int does. int(bytes) of a large float is its exact integer, which %.0f of trunc(bytes) prints. */
static cmf_status filesizeformat(jctx *c, const jnode *at, jv in, const jargs *a, jv *out) {
    (void)c;
    const jv *bin = jargs_get(a, 0, "binary");
    double bytes;
    if (in.k == JV_INT) bytes = (double)in.u.i;
    else if (in.k == JV_BOOL) bytes = in.u.b;
    else if (in.k == JV_FLOAT) bytes = in.u.f;
    else if (in.k == JV_STR) {
        if (jinja_parse_float(in.u.s->s, in.u.s->len, &bytes))
            return jinja_rt_err(at, "could not convert string to float: '%.40s'", in.u.s->s);
    } else if (in.k == JV_UNDEF) return jinja_undef_err(at, in);
    else return jinja_rt_err(at, "float() argument must be a string or a real number, not '%s'", jv_kind_name(in));
    int binary = bin && jv_truthy(*bin);
    static const char *const DEC[] = {"kB", "MB", "GB", "TB", "PB", "EB", "ZB", "YB"};
    static const char *const BIN[] = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB", "ZiB", "YiB"};
    /* base**(i+2) as the nearest double, and 1 when that double is below the exact power */
    static const struct { double u; int below; } DU[] = {{1e6, 0},  {1e9, 0},  {1e12, 0}, {1e15, 0},
                                                         {1e18, 0}, {1e21, 0}, {1e24, 1}, {1e27, 0}};
    double base = binary ? 1024.0 : 1000.0;
    char buf[512];
    if (bytes == 1) snprintf(buf, sizeof buf, "1 Byte");
    else if (bytes < base) {
        if (isinf(bytes)) return jinja_rt_err(at, "cannot convert float infinity to integer");
        snprintf(buf, sizeof buf, "%.0f Bytes", trunc(bytes) + 0.0); /* (+ 0.0: int(-0.5) is 0, not -0) */
    } else {
        int i = 0;
        double unit = 0;
        for (; i < 8; i++) {
            unit = binary ? ldexp(1.0, 10 * (i + 2)) : DU[i].u;
            if (bytes < unit || (!binary && DU[i].below && bytes == unit)) break;
        }
        if (i == 8) i = 7;
        double v = base * bytes / unit;
        if (isnan(v)) snprintf(buf, sizeof buf, "nan %s", binary ? BIN[i] : DEC[i]);
        else snprintf(buf, sizeof buf, "%.1f %s", v, binary ? BIN[i] : DEC[i]);
    }
    *out = jv_strn(buf, strlen(buf));
    return jv_is_oom(*out) ? NOMEM() : CMF_OK;
}

/* Python's TypeError for a keyword the filter does not take or too many positional arguments (jinja2 calls the
 * filter function with them). */
static cmf_status check_params(const jnode *at, const char *f, const jargs *a) {
    static const struct { const char *f, *params[5]; } P[] = {
        {"truncate", {"length", "killwords", "end", "leeway", NULL}},
        {"wordwrap", {"width", "break_long_words", "wrapstring", "break_on_hyphens", NULL}},
        {"groupby", {"attribute", "default", "case_sensitive", NULL}},
        {"slice", {"slices", "fill_with", NULL}},
        {"striptags", {NULL}},
        {"urlencode", {NULL}},
        {"filesizeformat", {"binary", NULL}},
    };
    for (size_t i = 0; i < sizeof P / sizeof P[0]; i++) {
        if (strcmp(P[i].f, f)) continue;
        size_t np = 0;
        while (P[i].params[np]) np++;
        if (a->npos > np) return jinja_rt_err(at, "%s() takes %zu positional arguments but %zu were given", f, np + 1, a->npos + 1);
        for (size_t k = 0; k < a->nkw; k++) {
            size_t j = 0;
            while (j < np && strcmp(P[i].params[j], a->kwn[k])) j++;
            if (j == np) return jinja_rt_err(at, "%s() got an unexpected keyword argument '%s'", f, a->kwn[k]);
            if (j < a->npos) return jinja_rt_err(at, "%s() got multiple values for argument '%s'", f, a->kwn[k]);
        }
    }
    return CMF_OK;
}

cmf_status jinja_filter_more(jctx *c, const jnode *at, const char *f, jv in, const jargs *a, jv *out) {
    TRY(check_params(at, f, a));
    if (!strcmp(f, "truncate")) return truncate(c, at, in, a, out);
    if (!strcmp(f, "wordwrap")) return jinja_wordwrap(c, at, in, a, out);
    if (!strcmp(f, "groupby")) return groupby(c, at, in, a, out);
    if (!strcmp(f, "slice")) return slice_filter(c, at, in, a, out);
    if (!strcmp(f, "striptags")) return striptags(c, at, in, out);
    if (!strcmp(f, "urlencode")) return urlencode(c, at, in, out);
    if (!strcmp(f, "filesizeformat")) return filesizeformat(c, at, in, a, out);
    return cmf_err(CMF_E_UNSUPPORTED, "template:%d:%d: unknown filter '%s'", at->line, at->col, f);
}
