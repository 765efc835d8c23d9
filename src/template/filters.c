/* filters.c — Jinja's built-in filters as jinja2 3.1 filters.py defines them (the subset chat templates use),
 * with transformers' tojson (json.dumps(ensure_ascii=False, indent=..., sort_keys=False)). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <utf8proc.h>

#include "template/eval.h"
#include "util/error.h"

#define NOMEM() cmf_err(CMF_E_NOMEM, "template render")
#define TRY(x) do { cmf_status st_ = (x); if (st_) return st_; } while (0)

/* str(in) into *s, within the string size limit. */
static cmf_status to_string(jctx *c, const jnode *at, jv in, jv *s) {
    int over;
    *s = jv_stringify(in, c->lim.max_output, &over);
    if (over == 2) return jinja_deep_err(at);
    if (over) return jinja_limit_err(at, "string size", c->lim.max_output);
    return jv_is_oom(*s) ? NOMEM() : CMF_OK;
}

/* The filters that jinja2 applies to soft_str(value) / str(value), whatever the value (an Undefined gives ""). */
static int soft_str_filter(const char *f) {
    static const char *const NAMES[] = {"trim", "upper", "lower", "title", "capitalize", "replace", "wordcount",
                                        "center", "escape", "e", "forceescape", "safe", NULL};
    for (size_t i = 0; NAMES[i]; i++)
        if (!strcmp(f, NAMES[i])) return 1;
    return 0;
}

/* The value that select/map/sort/... look at: the item itself or its attribute path. */
static cmf_status item_key(jctx *c, const jnode *at, jv item, const jv *attr, jv *out) {
    if (!attr || attr->k == JV_NONE) { *out = jv_retain(item); return CMF_OK; }
    if (attr->k == JV_INT) return jinja_getitem(c, at, item, *attr, out);
    if (attr->k != JV_STR) return jinja_rt_err(at, "attribute must be a string");
    return jb_attr_path(c, at, item, attr->u.s->s, out);
}

/* select / reject / selectattr / rejectattr. */
static cmf_status select_items(jctx *c, const jnode *at, jv in, const jargs *a, int by_attr, int keep, jv *out) {
    jv items;
    TRY(jb_to_list(c, at, in, &items));
    size_t ti = by_attr ? 1 : 0;
    const jv *attr = by_attr ? jargs_get(a, 0, NULL) : NULL, *tname = jargs_get(a, (int)ti, NULL);
    /* the arguments after the test name go to the test (jinja2 prepare_select_or_reject: call_test(name, item,
     * args[1 + off:], kwargs)), checked against its signature at each item as jinja2 does */
    jargs rest = {.pos = a->npos > ti + 1 ? a->pos + ti + 1 : NULL, .npos = a->npos > ti + 1 ? a->npos - ti - 1 : 0,
                  .kwn = a->kwn, .kwv = a->kwv, .nkw = a->nkw};
    if (by_attr && !attr) { jv_release(items); return jinja_rt_err(at, "selectattr/rejectattr need an attribute name"); }
    if (tname && tname->k != JV_STR) { jv_release(items); return jinja_rt_err(at, "test name must be a string"); }
    jv r = jv_list_new(0);
    cmf_status st = jv_is_oom(r) ? NOMEM() : CMF_OK;
    for (size_t i = 0; !st && i < items.u.l->n; i++) {
        jv k;
        if ((st = item_key(c, at, items.u.l->v[i], attr, &k))) break;
        int t = 0;
        if (tname) st = jinja_test(c, at, tname->u.s->s, k, &rest, &t);
        else t = jv_truthy(k);
        jv_release(k);
        if (!st && t == keep && jv_list_push(r, jv_retain(items.u.l->v[i]))) st = NOMEM();
    }
    jv_release(items);
    if (st) { jv_release(r); return st; }
    *out = r;
    return CMF_OK;
}

static cmf_status map_items(jctx *c, const jnode *at, jv in, const jargs *a, jv *out) {
    jv items;
    TRY(jb_to_list(c, at, in, &items));
    const jv *attr = jargs_get(a, -1, "attribute"), *def = jargs_get(a, -1, "default"), *fname = jargs_get(a, 0, NULL);
    if (!attr && (!fname || fname->k != JV_STR)) { jv_release(items); return jinja_rt_err(at, "map needs attribute= or a filter name"); }
    jargs rest = {.pos = a->npos > 1 ? a->pos + 1 : NULL, .npos = a->npos > 1 ? a->npos - 1 : 0};
    jv r = jv_list_new(items.u.l->n);
    cmf_status st = jv_is_oom(r) ? NOMEM() : CMF_OK;
    for (size_t i = 0; !st && i < items.u.l->n; i++) {
        jv v;
        if (attr) {
            if ((st = item_key(c, at, items.u.l->v[i], attr, &v))) break;
            if (v.k == JV_UNDEF && def) { jv_release(v); v = jv_retain(*def); }
        } else if ((st = jinja_filter(c, at, fname->u.s->s, items.u.l->v[i], &rest, &v))) {
            break;
        }
        if (jv_list_push(r, v)) st = NOMEM();
    }
    jv_release(items);
    if (st) { jv_release(r); return st; }
    *out = r;
    return CMF_OK;
}

typedef struct sort_ent { jv key, item; } sort_ent;

/* Stable merge sort of items by key (Python's sorted is stable). Returns 0, -1 when keys are not comparable, -2 when
 * the value-walk budget is spent, -3 when keys are nested too deeply. */
static int msort(jctx *c, sort_ent *v, sort_ent *tmp, size_t n, int ci, int rev) {
    if (n < 2) return 0;
    size_t h = n / 2;
    int e;
    if ((e = msort(c, v, tmp, h, ci, rev)) || (e = msort(c, v + h, tmp, n - h, ci, rev))) return e;
    size_t i = 0, j = h, k = 0;
    while (i < h && j < n) {
        int err, cmp = jinja_compare(c, v[j].key, v[i].key, ci, &err);
        if (err) return -err;
        if (rev ? cmp > 0 : cmp < 0) tmp[k++] = v[j++];
        else tmp[k++] = v[i++];
    }
    while (i < h) tmp[k++] = v[i++];
    while (j < n) tmp[k++] = v[j++];
    memcpy(v, tmp, n * sizeof(*v));
    return 0;
}

static cmf_status sort_items(jctx *c, const jnode *at, jv in, const jargs *a, int unique, jv *out) {
    jv items;
    TRY(jb_to_list(c, at, in, &items));
    const jv *rev = unique ? NULL : jargs_get(a, 0, "reverse"), *cs = jargs_get(a, unique ? 0 : 1, "case_sensitive");
    const jv *attr = jargs_get(a, unique ? 1 : 2, "attribute");
    int ci = !(cs && jv_truthy(*cs));
    size_t n = items.u.l->n;
    sort_ent *v = calloc(n + 1, sizeof(*v)), *tmp = calloc(n + 1, sizeof(*tmp));
    cmf_status st = v && tmp ? CMF_OK : NOMEM();
    size_t got = 0;
    for (; !st && got < n; got++) {
        v[got].item = items.u.l->v[got];
        if ((st = item_key(c, at, items.u.l->v[got], attr, &v[got].key))) break;
    }
    jv r = jv_list_new(n);
    if (!st && jv_is_oom(r)) st = NOMEM();
    if (!st && unique) {
        for (size_t i = 0; i < n; i++) {
            int dup = 0;
            for (size_t j = 0; j < i && !dup && !st; j++) { /* quadratic, each pair a step of the walk budget */
                int err = 0;
                if (v[i].key.k == JV_STR && v[j].key.k == JV_STR) dup = jinja_compare(c, v[i].key, v[j].key, ci, &err) == 0;
                else if ((dup = jv_equal(v[i].key, v[j].key, &c->steps)) < 0) err = dup == -2 ? 3 : 2;
                if (err) st = err == 3 ? jinja_deep_err(at) : jinja_walk_err(c, at);
            }
            if (st) break;
            if (!dup) jv_list_push(r, jv_retain(v[i].item));
        }
    } else if (!st) {
        int e = msort(c, v, tmp, n, ci, rev && jv_truthy(*rev));
        if (e == -2) st = jinja_walk_err(c, at);
        else if (e == -3) st = jinja_deep_err(at);
        else if (e) st = jinja_rt_err(at, "sort: values cannot be compared");
        for (size_t i = 0; !st && i < n; i++) jv_list_push(r, jv_retain(v[i].item));
    }
    for (size_t i = 0; v && i < got && i < n; i++) jv_release(v[i].key);
    free(v);
    free(tmp);
    jv_release(items);
    if (st) { jv_release(r); return st; }
    *out = r;
    return CMF_OK;
}

static cmf_status indent(jctx *c, const jnode *at, jv in, const jargs *a, jv *out) {
    const jv *w = jargs_get(a, 0, "width"), *first = jargs_get(a, 1, "first"), *blank = jargs_get(a, 2, "blank");
    jbuf pad = {0}, b = {.limit = c->lim.max_output};
    if (w && w->k == JV_STR) jbuf_put(&pad, w->u.s->s, w->u.s->len);
    else {
        int64_t n = w && w->k == JV_INT ? w->u.i : 4;
        if (n > (int64_t)c->lim.max_output) return jinja_limit_err(at, "string size", c->lim.max_output);
        for (int64_t i = 0; i < n; i++) jbuf_put(&pad, " ", 1);
    }
    if (in.k != JV_STR) { /* do_indent does s += "\n" and s.splitlines() on the value itself: Python's errors */
        jbuf_free(&pad);
        if (in.k == JV_LIST && !in.u.l->tuple) return jinja_rt_err(at, "'list' object has no attribute 'splitlines'");
        if (in.k == JV_LIST) return jinja_rt_err(at, "can only concatenate tuple (not \"str\") to tuple");
        return jinja_rt_err(at, "unsupported operand type(s) for +=: '%s' and 'str'", jv_kind_name(in));
    }
    jv s;
    cmf_status st = to_string(c, at, in, &s);
    if (st) { jbuf_free(&pad); return st; }
    /* jinja2 do_indent: the lines of (s + "\n").splitlines() joined with "\n" (so "\r\n", "\r", U+2028 ... end a
     * line and become "\n"), each line after the first indented unless empty (blank: even then), the first with
     * first=True */
    const char *p = s.u.s->s;
    size_t n = s.u.s->len, i = 0, line = 0;
    int do_first = first && jv_truthy(*first), do_blank = blank && jv_truthy(*blank);
    for (;;) { /* one line of s; s + "\n" has one more break at its end, so the last line is s's rest */
        size_t e = i, next = n;
        int found = 0;
        while (e < n && !found) {
            size_t k = 1;
            unsigned char ch = (unsigned char)p[e];
            if (ch == '\n' || ch == '\r' || ch == 0x0B || ch == 0x0C || (ch >= 0x1C && ch <= 0x1E)) found = 1;
            else if (ch == 0xC2 && e + 1 < n && (unsigned char)p[e + 1] == 0x85) { found = 1; k = 2; }
            else if (ch == 0xE2 && e + 2 < n && (unsigned char)p[e + 1] == 0x80 && ((unsigned char)p[e + 2] & 0xFE) == 0xA8) { found = 1; k = 3; }
            if (!found) { e++; continue; }
            next = e + k + (ch == '\r' && e + 1 < n && p[e + 1] == '\n');
        }
        int empty = e == i;
        if ((line > 0 ? !empty || do_blank : do_first) && pad.p) jbuf_put(&b, pad.p, pad.n); /* (first: always) */
        jbuf_put(&b, p + i, e - i);
        if (!found || (p[e] == '\r' && e + 1 == n)) break; /* s's rest (a final "\r" joins the appended "\n") */
        jbuf_put(&b, "\n", 1);
        i = next;
        line++;
        if (i == n) { /* s ended with a line break: (s + "\n") gives one more, empty line */
            if (do_blank && pad.p) jbuf_put(&b, pad.p, pad.n);
            break;
        }
    }
    jbuf_free(&pad);
    jv_release(s);
    if (b.over) { jbuf_free(&b); return jinja_limit_err(at, "string size", c->lim.max_output); }
    return jb_ret_buf(out, &b);
}

static cmf_status min_max_sum(jctx *c, const jnode *at, const char *name, jv in, const jargs *a, jv *out) {
    jv items;
    TRY(jb_to_list(c, at, in, &items));
    const jv *attr = jargs_get(a, name[1] == 'u' ? 0 : 1, "attribute");
    cmf_status st = CMF_OK;
    if (name[1] == 'u') { /* sum(attribute=None, start=0) */
        const jv *start = jargs_get(a, 1, "start");
        jv acc = start ? jv_retain(*start) : jv_int(0);
        for (size_t i = 0; !st && i < items.u.l->n; i++) {
            jv k, r;
            if ((st = item_key(c, at, items.u.l->v[i], attr, &k))) break;
            if (!jv_is_number(acc) || !jv_is_number(k)) st = jinja_rt_err(at, "sum: non-numeric value");
            else if (acc.k == JV_FLOAT || k.k == JV_FLOAT) r = jv_float(jv_num(acc) + jv_num(k));
            else { /* int + int exactly; past int64 an error (Python's int is unbounded, ours 64-bit) */
                int64_t x = acc.k == JV_INT ? acc.u.i : acc.u.b, y = k.k == JV_INT ? k.u.i : k.u.b, z;
                if (__builtin_add_overflow(x, y, &z)) st = jinja_rt_err(at, "sum: integer overflow past 64 bits");
                else r = jv_int(z);
            }
            jv_release(k);
            if (!st) { jv_release(acc); acc = r; }
        }
        if (st) jv_release(acc); else *out = acc;
        jv_release(items);
        return st;
    }
    const jv *cs = jargs_get(a, 0, "case_sensitive");
    int ci = !(cs && jv_truthy(*cs)), want = name[1] == 'a' ? 1 : -1;
    jv best = jv_undef(NULL), bestk = jv_undef(NULL);
    for (size_t i = 0; !st && i < items.u.l->n; i++) {
        jv k;
        if ((st = item_key(c, at, items.u.l->v[i], attr, &k))) break;
        int err = 0, cmp = best.k == JV_UNDEF ? want : jinja_compare(c, k, bestk, ci, &err);
        if (err == 2) st = jinja_walk_err(c, at);
        else if (err == 3) st = jinja_deep_err(at);
        else if (err) st = jinja_rt_err(at, "%s: values cannot be compared", name);
        if (!st && cmp * want > 0) { jv_release(bestk); jv_release(best); bestk = k; best = jv_retain(items.u.l->v[i]); }
        else jv_release(k);
    }
    jv_release(bestk);
    jv_release(items);
    if (st) { jv_release(best); return st; }
    *out = best;
    return CMF_OK;
}

/* jinja2's wordcount: the number of runs of \\w (Python: letters, numbers, '_'). */
static int64_t word_count(jv s) {
    const utf8proc_uint8_t *p = (const utf8proc_uint8_t *)s.u.s->s;
    utf8proc_ssize_t n = (utf8proc_ssize_t)s.u.s->len, i = 0;
    int64_t words = 0;
    int in_word = 0;
    while (i < n) {
        utf8proc_int32_t cp;
        utf8proc_ssize_t k = utf8proc_iterate(p + i, n - i, &cp);
        if (k <= 0) { k = 1; cp = -1; }
        utf8proc_category_t cat = cp < 0 ? UTF8PROC_CATEGORY_CN : utf8proc_category(cp);
        int w = cp == '_' || (cat >= UTF8PROC_CATEGORY_LU && cat <= UTF8PROC_CATEGORY_LO) ||
                (cat >= UTF8PROC_CATEGORY_ND && cat <= UTF8PROC_CATEGORY_NO);
        if (w && !in_word) words++;
        in_word = w;
        i += k;
    }
    return words;
}

/* jinja2 do_round(value, precision=0, method='common'): 'common' is Python's round(value, precision) — an int stays
 * an int (a negative precision rounds it half to even), a float is rounded half to even on its exact binary value
 * (CPython double_round: correctly rounded, so round(2.675, 2) is 2.67); 'ceil' / 'floor' are
 * math.ceil/floor(value * 10**precision) / 10**precision, a float. */
static cmf_status round_filter(const jnode *at, jv in, const jargs *a, jv *out) {
    const jv *prec = jargs_get(a, 0, "precision"), *meth = jargs_get(a, 1, "method");
    if (!jv_is_number(in)) return jinja_rt_err(at, "filter 'round' needs a number");
    if (prec && prec->k != JV_INT && prec->k != JV_BOOL)
        return jinja_rt_err(at, "'%s' object cannot be interpreted as an integer", jv_kind_name(*prec));
    int64_t nd = !prec ? 0 : prec->k == JV_INT ? prec->u.i : prec->u.b;
    const char *m = meth && meth->k == JV_STR ? meth->u.s->s : meth ? "" : "common";
    if (strcmp(m, "common") && strcmp(m, "ceil") && strcmp(m, "floor"))
        return jinja_rt_err(at, "method must be common, ceil or floor");
    if (strcmp(m, "common")) {
        double p = pow(10, (double)nd), x = jv_num(in) * p;
        *out = jv_float((m[0] == 'c' ? ceil(x) : floor(x)) / p);
        return CMF_OK;
    }
    if (in.k != JV_FLOAT) { /* int (bool: as int) */
        int64_t v = in.k == JV_INT ? in.u.i : in.u.b;
        if (nd >= 0) { *out = jv_int(v); return CMF_OK; }
        if (nd < -18) { /* |v| < 9.3e18: 0, unless 10^19 (past int64) is nearer */
            if (nd == -19 && (v >= 5000000000000000000 || v <= -5000000000000000000))
                return jinja_rt_err(at, "integer overflow: round() does not fit in 64 bits");
            *out = jv_int(0);
            return CMF_OK;
        }
        int64_t p = 1;
        for (int64_t k = 0; k < -nd; k++) p *= 10;
        int64_t q = v / p, r = v % p; /* (C: truncation toward zero) */
        if (r < 0) { r += p; q--; }
        if (r > p - r || (r == p - r && (q & 1))) q++; /* half to even */
        if ((q > 0 && q > INT64_MAX / p) || (q < 0 && q < INT64_MIN / p))
            return jinja_rt_err(at, "integer overflow: round() does not fit in 64 bits");
        *out = jv_int(q * p);
        return CMF_OK;
    }
    double x = in.u.f;
    if (!isfinite(x) || nd > 323) { *out = jv_float(x); return CMF_OK; }
    if (nd < -308) { *out = jv_float(0.0 * x); return CMF_OK; }
    char buf[720];
    if (nd >= 0) { /* glibc's %.*f is correctly rounded, half to even on the exact value, as CPython's dtoa */
        snprintf(buf, sizeof(buf), "%.*f", (int)nd, x);
        *out = jv_float(copysign(strtod(buf, NULL), x));
        return CMF_OK;
    }
    /* a negative precision: the exact integer digits, rounded at 10^-nd (half to even; a fraction breaks a tie) */
    double ax = fabs(x), ip = floor(ax);
    int frac = ax != ip;
    int n = snprintf(buf, sizeof(buf), "%.0f", ip), k = (int)-nd;
    if (k > n) { *out = jv_float(copysign(0.0, x)); return CMF_OK; }
    int cut = n - k; /* digits kept: buf[0..cut) */
    int first = buf[cut] - '0', rest_zero = !frac;
    for (int j = cut + 1; j < n; j++) rest_zero &= buf[j] == '0';
    int last_odd = cut > 0 && ((buf[cut - 1] - '0') & 1);
    int up = first > 5 || (first == 5 && (!rest_zero || last_odd));
    char num[740]; /* the kept digits plus the round-up, then e<k>: one correctly rounded strtod, as CPython */
    int nn = 0;
    num[nn++] = '0';
    memcpy(num + nn, buf, (size_t)cut);
    nn += cut;
    for (int j = nn - 1; up && j >= 0; j--) {
        if (num[j] == '9') num[j] = '0';
        else { num[j]++; up = 0; }
    }
    snprintf(num + nn, sizeof(num) - (size_t)nn, "e%d", k);
    *out = jv_float(copysign(strtod(num, NULL), x));
    return CMF_OK;
}

/* transformers' tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False) (chat_template_utils.py:
 * json.dumps with these arguments; jinja2's own tojson takes only indent). Other keyword arguments or more than four
 * positional ones are Python's TypeError (CMF_E_FORMAT), as is a separators value that is not two strings. */
static cmf_status tojson(jctx *c, const jnode *at, jv in, const jargs *a, jv *out) {
    static const char *const PARAMS[] = {"ensure_ascii", "indent", "separators", "sort_keys"};
    for (size_t k = 0; k < a->nkw; k++) {
        int known = 0;
        for (size_t p = 0; p < 4; p++) known |= !strcmp(a->kwn[k], PARAMS[p]);
        if (!known) return jinja_rt_err(at, "tojson() got an unexpected keyword argument '%s'", a->kwn[k]);
    }
    if (a->npos > 4) return jinja_rt_err(at, "tojson() takes from 1 to 5 positional arguments but %zu were given", a->npos + 1);
    const jv *asc = jargs_get(a, 0, "ensure_ascii"), *ind = jargs_get(a, 1, "indent"), *sep = jargs_get(a, 2, "separators");
    const jv *sk = jargs_get(a, 3, "sort_keys");
    jv_json_opts o = {.indent = -1, .sort = sk && jv_truthy(*sk), .ascii = asc && jv_truthy(*asc)};
    if (ind && ind->k == JV_INT && ind->u.i > (1 << 20)) return jinja_limit_err(at, "tojson indent", 1 << 20);
    if (ind && (ind->k == JV_INT || ind->k == JV_BOOL)) o.indent = ind->k == JV_BOOL ? ind->u.b : ind->u.i < 0 ? 0 : (int)ind->u.i;
    if (ind && ind->k == JV_STR) { /* json.dumps: a string indent is the text of one level */
        o.indent = 0;
        o.indent_str = ind->u.s->s;
        o.indent_len = ind->u.s->len;
    } else if (ind && ind->k != JV_NONE && ind->k != JV_INT && ind->k != JV_BOOL)
        return jinja_rt_err(at, "tojson: indent must be an int or a str, not '%s'", jv_kind_name(*ind));
    if (sep && sep->k != JV_NONE) {
        if (sep->k != JV_LIST || sep->u.l->n != 2 || sep->u.l->v[0].k != JV_STR || sep->u.l->v[1].k != JV_STR)
            return jinja_rt_err(at, "tojson: separators must be an (item_separator, key_separator) pair of strings");
        o.item_sep = sep->u.l->v[0].u.s->s;
        o.key_sep = sep->u.l->v[1].u.s->s;
    }
    jbuf b = {.limit = c->lim.max_output};
    const char *bad = NULL;
    if (jv_to_json(&b, in, &o, &bad)) {
        jbuf_free(&b);
        return jinja_rt_err(at, "tojson: object of type '%s' is not JSON serializable", bad);
    }
    if (b.over) { jbuf_free(&b); return jinja_limit_err(at, "string size", c->lim.max_output); }
    return jb_ret_buf(out, &b);
}

static cmf_status html_escape(jctx *c, const jnode *at, jv in, jv *out) {
    jv s;
    TRY(to_string(c, at, in, &s));
    jbuf b = {0};
    for (size_t i = 0; i < s.u.s->len; i++) {
        char ch = s.u.s->s[i];
        const char *e = ch == '&' ? "&amp;" : ch == '<' ? "&lt;" : ch == '>' ? "&gt;" : ch == '"' ? "&#34;" : ch == '\'' ? "&#39;" : NULL;
        if (e) jbuf_puts(&b, e); else jbuf_put(&b, &ch, 1);
    }
    jv_release(s);
    return jb_ret_buf(out, &b);
}

cmf_status jinja_filter(jctx *c, const jnode *at, const char *f, jv in, const jargs *a, jv *out) {
    TRY(jinja_check_signature(at, 'f', f, a));
    const jv *a0 = jargs_get(a, 0, NULL);
    if (!strcmp(f, "default") || !strcmp(f, "d")) {
        const jv *def = jargs_get(a, 0, "default_value"), *boolean = jargs_get(a, 1, "boolean");
        int use = in.k == JV_UNDEF || (boolean && jv_truthy(*boolean) && !jv_truthy(in));
        *out = use ? (def ? jv_retain(*def) : jv_cstr("")) : jv_retain(in);
        return jv_is_oom(*out) ? NOMEM() : CMF_OK;
    }
    if (in.k == JV_UNDEF && strcmp(f, "length") && strcmp(f, "count") && strcmp(f, "string") && strcmp(f, "list") &&
        strcmp(f, "tojson") && strcmp(f, "trim") && strcmp(f, "join") && strcmp(f, "truncate") && strcmp(f, "groupby") &&
        strcmp(f, "slice") && strcmp(f, "striptags") && strcmp(f, "urlencode") && !soft_str_filter(f))
        return jinja_undef_err(at, in); /* (lenient Undefined: len 0, str() empty) */
    if (!strcmp(f, "length") || !strcmp(f, "count")) {
        int64_t n = in.k == JV_STR ? (int64_t)utf8_count(in.u.s->s, in.u.s->len) : in.k == JV_LIST ? (int64_t)in.u.l->n
                  : in.k == JV_DICT || in.k == JV_NS ? (int64_t)in.u.d->n : in.k == JV_UNDEF ? 0 : -1;
        if (n < 0) return jinja_rt_err(at, "object of type '%s' has no len()", jv_kind_name(in));
        *out = jv_int(n);
        return CMF_OK;
    }
    if (!strcmp(f, "tojson")) return tojson(c, at, in, a, out);
    if (!strcmp(f, "string")) return to_string(c, at, in, out);
    if (!strcmp(f, "safe")) return to_string(c, at, in, out); /* do_mark_safe: Markup(value), a str (no autoescape) */
    /* forceescape: jinja2 do_forceescape is escape(str(value)) after __html__(); cmf keeps no Markup strings, so a
     * value from |e or |safe is a plain string and both filters escape every time, as jinja2 does for it */
    if (!strcmp(f, "escape") || !strcmp(f, "e") || !strcmp(f, "forceescape")) return html_escape(c, at, in, out);
    if (!strcmp(f, "list")) return jb_to_list(c, at, in, out);
    if (!strcmp(f, "items")) {
        if (in.k != JV_DICT) return jinja_rt_err(at, "filter 'items' needs a mapping, got '%s'", jv_kind_name(in));
        return jb_dict_items(in, out);
    }
    if (!strcmp(f, "dictsort")) {
        if (in.k != JV_DICT) return jinja_rt_err(at, "filter 'dictsort' needs a mapping");
        jv items;
        TRY(jb_dict_items(in, &items));
        /* jinja2: dictsort(case_sensitive=False, by='key', reverse=False) */
        const jv *cs = jargs_get(a, 0, "case_sensitive"), *by = jargs_get(a, 1, "by"), *rev = jargs_get(a, 2, "reverse");
        int on_value = 0;
        if (by && !(by->k == JV_STR && (!strcmp(by->u.s->s, "key") || (on_value = !strcmp(by->u.s->s, "value"))))) {
            jv_release(items);
            return jinja_rt_err(at, "dictsort: you can only sort by either 'key' or 'value'");
        }
        jv kv[3] = {jv_int(on_value), jv_bool(rev && jv_truthy(*rev)), jv_bool(cs && jv_truthy(*cs))};
        jargs args = {.kwn = (const char *[]){"attribute", "reverse", "case_sensitive"}, .kwv = kv, .nkw = 3};
        cmf_status st = sort_items(c, at, items, &args, 0, out);
        jv_release(items);
        return st;
    }
    if (!strcmp(f, "join")) {
        jv items;
        TRY(jb_to_list(c, at, in, &items));
        const jv *sep = jargs_get(a, 0, "d"), *attr = jargs_get(a, 1, "attribute");
        jbuf b = {.limit = c->lim.max_output};
        cmf_status st = CMF_OK;
        for (size_t i = 0; !st && i < items.u.l->n; i++) {
            if (i && sep) jv_to_str(&b, *sep);
            jv k;
            if ((st = item_key(c, at, items.u.l->v[i], attr, &k))) break;
            jv_to_str(&b, k);
            jv_release(k);
        }
        jv_release(items);
        if (!st) st = jinja_buf_status(c, at, &b, "string size");
        if (st) { jbuf_free(&b); return st; }
        return jb_ret_buf(out, &b);
    }
    if ((!strcmp(f, "first") || !strcmp(f, "last")) && in.k == JV_STR) { /* a character, without listing them all */
        size_t n = in.u.s->len, b = 0, e = n;
        if (n == 0) { *out = jv_undef(NULL); return CMF_OK; }
        if (f[0] == 'f') e = utf8_offset(in.u.s->s, n, 1);
        else for (b = n - 1; b > 0 && ((unsigned char)in.u.s->s[b] & 0xC0) == 0x80 && n - b < 4; b--) {}
        return jb_ret_str(out, in.u.s->s + b, e - b);
    }
    if (!strcmp(f, "first") || !strcmp(f, "last")) {
        jv items;
        TRY(jb_to_list(c, at, in, &items));
        size_t n = items.u.l->n;
        *out = n ? jv_retain(items.u.l->v[f[0] == 'f' ? 0 : n - 1]) : jv_undef(NULL);
        jv_release(items);
        return CMF_OK;
    }
    if (!strcmp(f, "reverse")) {
        if (in.k == JV_STR) { /* by code point, from the end */
            const char *p = in.u.s->s;
            size_t e = in.u.s->len;
            jbuf b = {0};
            while (e > 0) {
                size_t q = e - 1;
                while (q > 0 && ((unsigned char)p[q] & 0xC0) == 0x80 && e - q < 4) q--;
                jbuf_put(&b, p + q, e - q);
                e = q;
            }
            return jb_ret_buf(out, &b);
        }
        jv l;
        TRY(jb_to_list(c, at, in, &l));
        jv r = jv_list_new(l.u.l->n);
        if (jv_is_oom(r)) { jv_release(l); return NOMEM(); }
        for (size_t i = l.u.l->n; i-- > 0;) jv_list_push(r, jv_retain(l.u.l->v[i]));
        jv_release(l);
        *out = r;
        return CMF_OK;
    }
    if (!strcmp(f, "select") || !strcmp(f, "reject")) return select_items(c, at, in, a, 0, f[0] == 's', out);
    if (!strcmp(f, "selectattr") || !strcmp(f, "rejectattr")) return select_items(c, at, in, a, 1, f[0] == 's', out);
    if (!strcmp(f, "map")) return map_items(c, at, in, a, out);
    if (!strcmp(f, "sort")) return sort_items(c, at, in, a, 0, out);
    if (!strcmp(f, "unique")) return sort_items(c, at, in, a, 1, out);
    if (!strcmp(f, "min") || !strcmp(f, "max") || !strcmp(f, "sum")) return min_max_sum(c, at, f, in, a, out);
    if (!strcmp(f, "indent")) return indent(c, at, in, a, out);
    if (!strcmp(f, "abs")) {
        if (!jv_is_number(in)) return jinja_rt_err(at, "filter 'abs' needs a number");
        int64_t i = in.k == JV_INT ? in.u.i : in.k == JV_BOOL ? in.u.b : 0;
        if (in.k != JV_FLOAT && i == INT64_MIN) /* (llabs(INT64_MIN) is UB; Python's int would hold 2^63) */
            return jinja_rt_err(at, "abs: integer overflow past 64 bits");
        *out = in.k == JV_FLOAT ? jv_float(fabs(in.u.f)) : jv_int(i < 0 ? -i : i);
        return CMF_OK;
    }
    if (!strcmp(f, "int")) return jinja_filter_int(c, at, in, a, out);
    if (!strcmp(f, "float")) return jinja_filter_float(c, at, in, a, out);
    if (!strcmp(f, "format")) return jinja_filter_format(c, at, in, a, out);
    if (!strcmp(f, "attr")) { /* jinja2 do_attr: an attribute (a method, a namespace's value), never an item */
        a0 = jargs_get(a, 0, "name");
        if (!a0 || a0->k != JV_STR) /* (jinja2 3.1.6: hasattr's TypeError) */
            return jinja_rt_err(at, "attribute name must be string, not '%s'", a0 ? jv_kind_name(*a0) : "nothing");
        jv name = jv_retain(*a0);
        cmf_status st = CMF_OK;
        if (in.k == JV_NS && !jv_dict_get(in, JINJA_CYCLER_ITEMS, strlen(JINJA_CYCLER_ITEMS)) &&
            !jv_dict_get(in, JINJA_JOINER_SEP, strlen(JINJA_JOINER_SEP))) {
            const jv *v = jv_dict_get(in, name.u.s->s, name.u.s->len);
            *out = v ? jv_retain(*v) : jv_undef(NULL);
        } else if (!jinja_method_name(in, name.u.s->s) && !(in.k == JV_NS && !strcmp(name.u.s->s, "current"))) {
            *out = jv_undef(NULL);
        } else {
            st = jinja_getattr(c, at, in, name.u.s->s, out);
        }
        jv_release(name);
        return st;
    }
    if (!strcmp(f, "round")) return round_filter(at, in, a, out);
    if (!strcmp(f, "batch")) {
        jv items;
        a0 = jargs_get(a, 0, "linecount");
        TRY(jb_to_list(c, at, in, &items));
        if (!a0 || a0->k != JV_INT || a0->u.i <= 0) { jv_release(items); return jinja_rt_err(at, "batch needs a positive size"); }
        const jv *fill = jargs_get(a, 1, "fill_with");
        jv r = jv_list_new(0), cur = jv_undef(NULL);
        if (jv_is_oom(r)) { jv_release(items); return NOMEM(); }
        for (size_t i = 0; i < items.u.l->n; i++) {
            if (cur.k != JV_LIST) { /* capacity: what is left, not the asked size (batch(2**60) made a 16-byte array) */
                size_t left = items.u.l->n - i;
                cur = jv_list_new((uint64_t)a0->u.i < left ? (size_t)a0->u.i : left);
                if (jv_is_oom(cur)) { jv_release(items); jv_release(r); return NOMEM(); }
            }
            jv_list_push(cur, jv_retain(items.u.l->v[i]));
            if ((int64_t)cur.u.l->n == a0->u.i) { jv_list_push(r, cur); cur = jv_undef(NULL); }
        }
        cmf_status st = CMF_OK;
        if (cur.k == JV_LIST) { /* the fill values count against the list-items budget (batch(10**18, 'x')) */
            if (fill && (st = jinja_charge_items(c, at, (size_t)((uint64_t)a0->u.i - cur.u.l->n)))) jv_release(cur);
            while (!st && fill && (int64_t)cur.u.l->n < a0->u.i)
                if (jv_list_push(cur, jv_retain(*fill))) st = NOMEM();
            if (!st) jv_list_push(r, cur);
        }
        if (st) { jv_release(items); jv_release(r); return st; }
        jv_release(items);
        *out = r;
        return CMF_OK;
    }
    /* string filters: jinja2 turns any value into a string first (soft_str / str in do_trim, do_upper, ...) */
    if (soft_str_filter(f) && strcmp(f, "escape") && strcmp(f, "e") && strcmp(f, "forceescape")) {
        jv s, old = jv_undef(NULL), new = jv_undef(NULL);
        TRY(to_string(c, at, in, &s));
        cmf_status st = CMF_OK;
        if (!strcmp(f, "replace")) { /* do_replace without autoescape: str(s).replace(str(old), str(new), count) */
            const jv *o = jargs_get(a, 0, "old"), *n = jargs_get(a, 1, "new");
            if (o && (st = to_string(c, at, *o, &old))) { jv_release(s); return st; }
            if (n && (st = to_string(c, at, *n, &new))) { jv_release(s); jv_release(old); return st; }
        }
        if (!strcmp(f, "trim")) st = jb_strip(s, jargs_get(a, 0, "chars"), 1, 1, out);
        else if (!strcmp(f, "upper")) st = jb_map_case(s, CASE_UPPER, out);
        else if (!strcmp(f, "lower")) st = jb_map_case(s, CASE_LOWER, out);
        else if (!strcmp(f, "title")) st = jb_map_case(s, CASE_JTITLE, out);
        else if (!strcmp(f, "capitalize")) st = jb_map_case(s, CASE_CAPITALIZE, out);
        else if (!strcmp(f, "center")) st = jinja_filter_center(c, at, s, a, out);
        else if (!strcmp(f, "replace")) st = jb_replace(c, at, s, &old, &new, jargs_get(a, 2, "count"), out);
        else *out = jv_int(word_count(s)), st = CMF_OK;
        jv_release(s);
        jv_release(old);
        jv_release(new);
        return st;
    }
    if (jinja_filter_more_has(f)) return jinja_filter_more(c, at, f, in, a, out);
    return cmf_err(CMF_E_UNSUPPORTED, "template:%d:%d: unknown filter '%s'", at->line, at->col, f);
}
