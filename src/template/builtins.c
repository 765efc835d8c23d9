/* builtins.c — Jinja filters and tests (jinja2 3.1 filters.py / tests.py), Python str/dict/list methods that
 * chat templates call, and the globals range/namespace/dict plus Hugging Face's raise_exception and
 * strftime_now (transformers chat_template_utils.py). tojson follows transformers: json.dumps with
 * ensure_ascii=False, no key sorting, optional indent. */
#define _GNU_SOURCE /* memmem */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <utf8proc.h>

#include "template/eval.h"
#include "util/error.h"

#define NOMEM() cmf_err(CMF_E_NOMEM, "template render")
#define TRY(x) do { cmf_status st_ = (x); if (st_) return st_; } while (0)

enum { G_RANGE, G_NAMESPACE, G_DICT, G_RAISE, G_STRFTIME, G_CYCLER, G_JOINER, G_COUNT };
static const char *const GLOBALS[G_COUNT] = {"range", "namespace", "dict", "raise_exception", "strftime_now",
                                             "cycler", "joiner"};

int jinja_global_id(const char *name) {
    for (int i = 0; i < G_COUNT; i++)
        if (!strcmp(name, GLOBALS[i])) return i;
    return -1;
}

cmf_status jb_ret_str(jv *out, const char *s, size_t n) {
    *out = jv_strn(s ? s : "", n);
    return jv_is_oom(*out) ? NOMEM() : CMF_OK;
}
cmf_status jb_ret_buf(jv *out, jbuf *b) {
    if (b->oom) { jbuf_free(b); return NOMEM(); }
    cmf_status st = jb_ret_str(out, b->p, b->n);
    jbuf_free(b);
    return st;
}

int jb_is_space(unsigned char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

int jb_space_at(const char *p, size_t n, size_t *k) {
    utf8proc_int32_t cp;
    utf8proc_ssize_t m = utf8proc_iterate((const utf8proc_uint8_t *)p, (utf8proc_ssize_t)n, &cp);
    *k = m > 0 ? (size_t)m : 1;
    return m > 0 && jinja_cp_is_space(cp);
}

/* ---- string helpers ---- */

/* Length of the UTF-8 sequence starting at p[0] (1 for a stray byte), within n bytes. */
static size_t cp_len(const char *p, size_t n) {
    size_t k = 1;
    while (k < n && ((unsigned char)p[k] & 0xC0) == 0x80 && k < 4) k++;
    return k;
}

/* Whether the code point p[0..k) is one of the code points of set[0..sl). */
static int in_cp_set(const char *set, size_t sl, const char *p, size_t k) {
    for (size_t i = 0; i < sl;) {
        size_t m = cp_len(set + i, sl - i);
        if (m == k && !memcmp(set + i, p, k)) return 1;
        i += m;
    }
    return 0;
}

cmf_status jb_strip(jv s, const jv *chars, int left, int right, jv *out) {
    const char *p = s.u.s->s;
    size_t a = 0, e = s.u.s->len;
    if (chars && chars->k == JV_STR) { /* by code point, as Python: 'é'.strip('©') keeps both bytes of é */
        const char *set = chars->u.s->s;
        size_t sl = chars->u.s->len;
        while (left && a < e) {
            size_t k = cp_len(p + a, e - a);
            if (!in_cp_set(set, sl, p + a, k)) break;
            a += k;
        }
        while (right && e > a) {
            size_t b = e - 1;
            while (b > a && ((unsigned char)p[b] & 0xC0) == 0x80 && e - b < 4) b--;
            if (!in_cp_set(set, sl, p + b, e - b)) break;
            e = b;
        }
    } else { /* Python's str.isspace characters (U+3000, U+00A0, \x1c ... too) */
        while (left && a < e) {
            size_t k;
            if (!jb_space_at(p + a, e - a, &k)) break;
            a += k;
        }
        while (right && e > a) {
            size_t b;
            if (!jinja_cp_is_space(jinja_prev_cp(p + a, e - a, &b))) break;
            e = a + b;
        }
    }
    return jb_ret_str(out, p + a, e - a);
}

const char *jb_find_sub(const char *h, size_t hn, const char *n, size_t nn) {
    if (nn == 0) return h;
    if (nn > hn) return NULL;
    /* glibc's memmem is linear (two-way); a naive search of an 8 MB needle in a 16 MB string is 10^13 steps */
    return memmem(h, hn, n, nn);
}

static cmf_status split_into(const jnode *at, jv s, const jv *sep, int64_t max, jv l);

cmf_status jb_split(jctx *c, const jnode *at, jv s, const jv *sep, const jv *maxv, jv *out) {
    int64_t max = maxv && maxv->k == JV_INT ? maxv->u.i : -1;
    jv l = jv_list_new(0);
    if (jv_is_oom(l)) return NOMEM();
    cmf_status st = split_into(at, s, sep, max, l);
    if (!st) st = jinja_charge_items(c, at, l.u.l->n);
    if (st) { jv_release(l); return st; }
    *out = l;
    return CMF_OK;
}

/* jb_split's pieces into list l (errors: l keeps what it has; the caller releases it). */
static cmf_status split_into(const jnode *at, jv s, const jv *sep, int64_t max, jv l) {
    const char *p = s.u.s->s, *end = p + s.u.s->len;
    if (!sep || sep->k == JV_NONE) { /* at runs of str.isspace characters */
        size_t k;
        while (p < end) {
            while (p < end && jb_space_at(p, (size_t)(end - p), &k)) p += k;
            if (p == end) break;
            const char *q = p;
            if (max == 0) q = end;
            else while (q < end && !jb_space_at(q, (size_t)(end - q), &k)) q += k;
            /* (maxsplit reached: the rest, trailing whitespace included, is the last piece, as CPython's
             * split_whitespace) */
            if (jv_list_push(l, jv_strn(p, (size_t)(q - p)))) return NOMEM();
            if (max > 0) max--;
            p = q;
            if (max == 0 && p < end) max = 0;
        }
    } else {
        if (sep->k != JV_STR || sep->u.s->len == 0) return jinja_rt_err(at, "split: empty or non-string separator");
        for (;;) {
            const char *q = max == 0 ? NULL : jb_find_sub(p, (size_t)(end - p), sep->u.s->s, sep->u.s->len);
            if (!q) q = end;
            if (jv_list_push(l, jv_strn(p, (size_t)(q - p)))) return NOMEM();
            if (q == end) break;
            p = q + sep->u.s->len;
            if (max > 0) max--;
        }
    }
    return CMF_OK;
}

cmf_status jb_replace(jctx *c, const jnode *at, jv s, const jv *old, const jv *new, const jv *count, jv *out) {
    if (!old || !new || old->k != JV_STR || new->k != JV_STR) return jinja_rt_err(at, "replace() needs two strings");
    int64_t max = count && count->k == JV_INT ? count->u.i : -1;
    jbuf b = {.limit = c->lim.max_output}; /* ('a' * 16000000).replace('a', 'b' * 16000000) stops at the limit */
    const char *p = s.u.s->s, *end = p + s.u.s->len;
    if (old->u.s->len == 0) { /* Python inserts `new` between every character */
        for (size_t i = 0; p <= end; i++) {
            if (max < 0 || (int64_t)i < max) jbuf_put(&b, new->u.s->s, new->u.s->len);
            if (p == end || b.over) break;
            const char *q = p + 1;
            while (q < end && ((unsigned char)*q & 0xC0) == 0x80) q++;
            jbuf_put(&b, p, (size_t)(q - p));
            p = q;
        }
        if (b.over) { jbuf_free(&b); return jinja_limit_err(at, "string size", c->lim.max_output); }
        return jb_ret_buf(out, &b);
    }
    while (p < end && !b.over) {
        const char *q = max == 0 ? NULL : jb_find_sub(p, (size_t)(end - p), old->u.s->s, old->u.s->len);
        if (!q) break;
        jbuf_put(&b, p, (size_t)(q - p));
        jbuf_put(&b, new->u.s->s, new->u.s->len);
        p = q + old->u.s->len;
        if (max > 0) max--;
    }
    jbuf_put(&b, p, (size_t)(end - p));
    if (b.over) { jbuf_free(&b); return jinja_limit_err(at, "string size", c->lim.max_output); }
    return jb_ret_buf(out, &b);
}

int jb_prefix_match(jv s, jv pre, int suffix) {
    if (pre.k == JV_LIST) {
        for (size_t i = 0; i < pre.u.l->n; i++)
            if (jb_prefix_match(s, pre.u.l->v[i], suffix)) return 1;
        return 0;
    }
    if (pre.k != JV_STR || pre.u.s->len > s.u.s->len) return 0;
    return !memcmp(s.u.s->s + (suffix ? s.u.s->len - pre.u.s->len : 0), pre.u.s->s, pre.u.s->len);
}

cmf_status jinja_charge_items(jctx *c, const jnode *at, size_t n) {
    if (n > c->lim.max_iterations - c->items) /* items <= max_iterations: every maker checks before adding */
        return jinja_limit_err(at, JINJA_ITEMS_WHAT, c->lim.max_iterations);
    c->items += n;
    return CMF_OK;
}

cmf_status jb_to_list(jctx *c, const jnode *at, jv v, jv *out) {
    if (v.k == JV_LIST && !v.u.l->tuple) { *out = jv_retain(v); return CMF_OK; }
    if (v.k == JV_STR) TRY(jinja_charge_items(c, at, utf8_count(v.u.s->s, v.u.s->len)));
    jv l = jv_list_new(0);
    if (jv_is_oom(l)) return NOMEM();
    if (v.k == JV_LIST) {
        for (size_t i = 0; i < v.u.l->n; i++) jv_list_push(l, jv_retain(v.u.l->v[i]));
    } else if (v.k == JV_DICT || v.k == JV_NS) {
        for (size_t i = 0; i < v.u.d->n; i++) jv_list_push(l, jv_dict_key(v.u.d, i));
    } else if (v.k == JV_STR) {
        for (size_t i = 0; i < v.u.s->len;) {
            size_t j = i + 1;
            while (j < v.u.s->len && ((unsigned char)v.u.s->s[j] & 0xC0) == 0x80) j++;
            jv_list_push(l, jv_strn(v.u.s->s + i, j - i));
            i = j;
        }
    } else if (v.k != JV_UNDEF) {
        jv_release(l);
        return jinja_rt_err(at, "'%s' object is not iterable", jv_kind_name(v));
    }
    *out = l;
    return CMF_OK;
}

cmf_status jb_dict_items(jv d, jv *out) {
    jv l = jv_list_new(d.u.d->n);
    if (jv_is_oom(l)) return NOMEM();
    for (size_t i = 0; i < d.u.d->n; i++) {
        jv pair = jv_list_new(2);
        if (jv_is_oom(pair)) { jv_release(l); return NOMEM(); }
        pair.u.l->tuple = 1;
        jv_list_push(pair, jv_dict_key(d.u.d, i));
        jv_list_push(pair, jv_retain(d.u.d->v[i]));
        jv_list_push(l, pair);
    }
    *out = l;
    return CMF_OK;
}

/* Dotted attribute path lookup ("a.b", "0") used by map/selectattr/sort/join/sum. */
cmf_status jb_attr_path(jctx *c, const jnode *at, jv v, const char *path, jv *out) {
    jv cur = jv_retain(v);
    while (*path) {
        const char *dot = strchr(path, '.');
        size_t n = dot ? (size_t)(dot - path) : strlen(path);
        jv key = jv_strn(path, n), next;
        if (jv_is_oom(key)) { jv_release(cur); return NOMEM(); }
        int digits = n > 0;
        for (size_t i = 0; i < n; i++) digits &= path[i] >= '0' && path[i] <= '9';
        if (digits) { jv_release(key); key = jv_int(strtoll(path, NULL, 10)); }
        cmf_status st = cur.k == JV_UNDEF ? (next = jv_undef(NULL), CMF_OK) : jinja_getitem(c, at, cur, key, &next);
        jv_release(key);
        jv_release(cur);
        if (st) return st;
        cur = next;
        path += n + (dot != NULL);
    }
    *out = cur;
    return CMF_OK;
}

/* ---- tests ---- */

cmf_status jb_test(jctx *c, const jnode *at, const char *name, jv v, const jv *arg, int *r) {
    if (!strcmp(name, "defined")) *r = v.k != JV_UNDEF;
    else if (!strcmp(name, "undefined")) *r = v.k == JV_UNDEF;
    else if (!strcmp(name, "none")) *r = v.k == JV_NONE;
    else if (!strcmp(name, "string")) *r = v.k == JV_STR;
    else if (!strcmp(name, "number")) *r = jv_is_number(v);
    else if (!strcmp(name, "integer")) *r = v.k == JV_INT;
    else if (!strcmp(name, "float")) *r = v.k == JV_FLOAT;
    else if (!strcmp(name, "boolean")) *r = v.k == JV_BOOL;
    else if (!strcmp(name, "true")) *r = v.k == JV_BOOL && v.u.b;
    else if (!strcmp(name, "false")) *r = v.k == JV_BOOL && !v.u.b;
    else if (!strcmp(name, "mapping")) *r = v.k == JV_DICT;
    else if (!strcmp(name, "sequence") || !strcmp(name, "iterable")) *r = v.k == JV_STR || v.k == JV_LIST || v.k == JV_DICT;
    else if (!strcmp(name, "callable")) *r = v.k == JV_MACRO || v.k == JV_FUNC || v.k == JV_METHOD;
    else if (!strcmp(name, "odd") || !strcmp(name, "even")) {
        if (v.k != JV_INT && v.k != JV_BOOL) return jinja_rt_err(at, "test '%s' needs an integer, got '%s'", name, jv_kind_name(v));
        int64_t x = v.k == JV_INT ? v.u.i : v.u.b;
        *r = ((x % 2 != 0) == (name[0] == 'o'));
    } else if (!strcmp(name, "lower") || !strcmp(name, "upper")) { /* jinja2: str(value).islower() / isupper() */
        int over = 0;
        jv t = v.k == JV_STR ? jv_retain(v) : jv_stringify(v, c->lim.max_output, &over);
        if (over) return over == 2 ? jinja_deep_err(at) : jinja_limit_err(at, "string size", c->lim.max_output);
        if (jv_is_oom(t)) return NOMEM();
        *r = jinja_str_is(t, name[0] == 'l' ? "islower" : "isupper");
        cmf_status wst = v.k == JV_STR ? CMF_OK : jinja_charge_work(c, at, jinja_work_of(t)); /* (the text made) */
        jv_release(t);
        if (wst) return wst;
    } else {
        if (!arg) {
            if (!strcmp(name, "divisibleby") || !strcmp(name, "eq") || !strcmp(name, "in") || !strcmp(name, "sameas"))
                return jinja_rt_err(at, "test '%s' needs an argument", name);
            return cmf_err(CMF_E_UNSUPPORTED, "template:%d:%d: unknown test '%s'", at->line, at->col, name);
        }
        int err = 0;
        if (!strcmp(name, "divisibleby")) {
            if (!jv_is_number(v) || !jv_is_number(*arg) || jv_num(*arg) == 0) return jinja_rt_err(at, "divisibleby needs non-zero numbers");
            *r = fmod(jv_num(v), jv_num(*arg)) == 0;
        } else if (!strcmp(name, "eq") || !strcmp(name, "equalto") || !strcmp(name, "==")) TRY(jinja_equal(c, at, v, *arg, r));
        else if (!strcmp(name, "ne") || !strcmp(name, "!=")) { TRY(jinja_equal(c, at, v, *arg, r)); *r = !*r; }
        else if (!strcmp(name, "sameas")) {
            TRY(jinja_equal(c, at, v, *arg, r));
            *r = *r && v.k == arg->k && (v.k <= JV_FLOAT || v.u.s == arg->u.s);
        } else if (!strcmp(name, "in")) {
            jv hay = *arg;
            if (hay.k == JV_STR && v.k == JV_STR) *r = jb_find_sub(hay.u.s->s, hay.u.s->len, v.u.s->s, v.u.s->len) != NULL;
            else if (hay.k == JV_LIST) {
                *r = 0;
                for (size_t i = 0; i < hay.u.l->n && !*r; i++) TRY(jinja_equal(c, at, hay.u.l->v[i], v, r));
            }
            else if (hay.k == JV_DICT) *r = jv_dict_get_key(hay, v) != NULL;
            else return jinja_rt_err(at, "test 'in' cannot search a '%s'", jv_kind_name(hay));
        } else {
            int cmp = jinja_compare(c, v, *arg, 0, &err);
            if (err == 2) return jinja_walk_err(c, at);
            if (err == 3) return jinja_deep_err(at);
            if (!strcmp(name, "lt") || !strcmp(name, "<") || !strcmp(name, "lessthan")) *r = cmp < 0;
            else if (!strcmp(name, "gt") || !strcmp(name, ">") || !strcmp(name, "greaterthan")) *r = cmp > 0;
            else if (!strcmp(name, "le") || !strcmp(name, "<=")) *r = cmp <= 0;
            else if (!strcmp(name, "ge") || !strcmp(name, ">=")) *r = cmp >= 0;
            else return cmf_err(CMF_E_UNSUPPORTED, "template:%d:%d: unknown test '%s'", at->line, at->col, name);
            if (err) return jinja_rt_err(at, "cannot compare '%s' with '%s'", jv_kind_name(v), jv_kind_name(*arg));
        }
    }
    return CMF_OK;
}

cmf_status jinja_test(jctx *c, const jnode *at, const char *name, jv in, const jargs *a, int *result) {
    TRY(jinja_check_signature(at, 't', name, a));
    /* the tests' second parameter by its jinja2 name (tests.py: divisibleby(value, num), test_in(value, seq),
     * sameas(value, other); the operator tests take it by position only) */
    const char *kw = !strcmp(name, "divisibleby") ? "num" : !strcmp(name, "in") ? "seq" : !strcmp(name, "sameas") ? "other" : NULL;
    return jb_test(c, at, name, in, jargs_get(a, 0, kw), result);
}


/* ---- methods ---- */

static const char *const STR_METHODS[] = {"strip", "lstrip", "rstrip", "split", "startswith", "endswith", "upper",
                                          "lower", "replace", "title", "capitalize", "join", NULL};
static const char *const DICT_METHODS[] = {"items", "keys", "values", "get", NULL};
static const char *const LIST_METHODS[] = {"index", "count", NULL}; /* (also a tuple's two methods) */
/* Methods that modify a list or dict in place: transformers renders chat templates in jinja2's
 * ImmutableSandboxedEnvironment (chat_template_utils.py _compile_jinja_template), whose modifies_known_mutable()
 * refuses them with SecurityError "access to attribute 'append' of 'list' object is unsafe." (jinja2/sandbox.py);
 * checked against transformers 5.17 by scripts/template/check_transformers.py. We refuse them the same way. */
static const char *const MUTATING_METHODS[] = {"append", "extend", "insert", "pop", "remove", "reverse", "sort",
                                               "clear", "popitem", "setdefault", "update", NULL};

/* The list's own copy of `name` (static storage), or NULL. */
static const char *in_list(const char *const *l, const char *name) {
    for (; *l; l++)
        if (!strcmp(*l, name)) return *l;
    return NULL;
}

static const char *const CYCLER_METHODS[] = {"cycler.next", "cycler.reset", NULL};

const char *jinja_method_name(jv self, const char *name) {
    const char *m = NULL;
    if (self.k == JV_NS) { /* a cycler's next() and reset() */
        if (!jv_dict_get(self, JINJA_CYCLER_ITEMS, strlen(JINJA_CYCLER_ITEMS))) return NULL;
        return !strcmp(name, "next") ? CYCLER_METHODS[0] : !strcmp(name, "reset") ? CYCLER_METHODS[1] : NULL;
    }
    if (self.k == JV_STR) return in_list(STR_METHODS, name) ? in_list(STR_METHODS, name) : jinja_str_method_name(name);
    if (self.k == JV_DICT) m = in_list(DICT_METHODS, name);
    if (self.k == JV_LIST) m = in_list(LIST_METHODS, name);
    if (!m && (self.k == JV_DICT || (self.k == JV_LIST && !self.u.l->tuple))) m = in_list(MUTATING_METHODS, name);
    return m;
}

static cmf_status str_method(jctx *c, const jnode *at, jv s, const char *m, const jargs *a, jv *out) {
    const jv *a0 = jargs_get(a, 0, NULL), *a1 = jargs_get(a, 1, NULL);
    if (!strcmp(m, "strip")) return jb_strip(s, a0, 1, 1, out);
    if (!strcmp(m, "lstrip")) return jb_strip(s, a0, 1, 0, out);
    if (!strcmp(m, "rstrip")) return jb_strip(s, a0, 0, 1, out);
    if (!strcmp(m, "split")) return jb_split(c, at, s, jargs_get(a, 0, "sep"), jargs_get(a, 1, "maxsplit"), out);
    if (!strcmp(m, "startswith") || !strcmp(m, "endswith")) { /* (prefix, start=None, end=None) on s[start:end] */
        if (!a0 || (a0->k != JV_STR && a0->k != JV_LIST)) return jinja_rt_err(at, "%s() needs a string or tuple", m);
        const jv *st = jargs_get(a, 1, NULL), *en = jargs_get(a, 2, NULL);
        int64_t len = (int64_t)utf8_count(s.u.s->s, s.u.s->len), b = 0, e = len;
        for (int k = 0; k < 2; k++) {
            const jv *x = k ? en : st;
            if (!x || x->k == JV_NONE) continue;
            if (x->k != JV_INT && x->k != JV_BOOL)
                return jinja_rt_err(at, "slice indices must be integers or None, not '%s'", jv_kind_name(*x));
            int64_t v = x->k == JV_INT ? x->u.i : x->u.b;
            if (v < 0) v = v < -len ? 0 : v + len;
            *(k ? &e : &b) = v;
        }
        if (e > len) e = len;
        if (b > e) { *out = jv_bool(0); return CMF_OK; } /* (CPython tailmatch: even an empty prefix fails) */
        size_t b0 = utf8_offset(s.u.s->s, s.u.s->len, (size_t)b);
        size_t b1 = b0 + utf8_offset(s.u.s->s + b0, s.u.s->len - b0, (size_t)(e - b));
        jv sub = jv_strn(s.u.s->s + b0, b1 - b0);
        if (jv_is_oom(sub)) return NOMEM();
        *out = jv_bool(jb_prefix_match(sub, *a0, m[0] == 'e'));
        jv_release(sub);
        return CMF_OK;
    }
    if (!strcmp(m, "upper")) return jb_map_case(s, CASE_UPPER, out);
    if (!strcmp(m, "lower")) return jb_map_case(s, CASE_LOWER, out);
    if (!strcmp(m, "title")) return jb_map_case(s, CASE_PYTITLE, out);
    if (!strcmp(m, "capitalize")) return jb_map_case(s, CASE_CAPITALIZE, out);
    if (!strcmp(m, "replace")) return jb_replace(c, at, s, a0, a1, jargs_get(a, 2, "count"), out);
    if (!strcmp(m, "join")) {
        jv items;
        if (!a0) return jinja_rt_err(at, "join() needs an iterable");
        TRY(jb_to_list(c, at, *a0, &items));
        jbuf b = {.limit = c->lim.max_output};
        for (size_t i = 0; i < items.u.l->n; i++) {
            if (i) jbuf_put(&b, s.u.s->s, s.u.s->len);
            jv_to_str(&b, items.u.l->v[i]);
        }
        jv_release(items);
        cmf_status st = jinja_buf_status(c, at, &b, "string size");
        if (st) { jbuf_free(&b); return st; }
        return jb_ret_buf(out, &b);
    }
    static const jargs none = {0};
    return jinja_str_method(c, at, s, m, a ? a : &none, out); /* (strmethods.c) */
}

cmf_status jinja_method(jctx *c, const jnode *at, jv self, const char *m, const jargs *a, jv *out) {
    const jv *a0 = a ? jargs_get(a, 0, NULL) : NULL;
    if (!strcmp(m, JINJA_LOOP_CYCLE)) { /* loop.cycle(a, b, ...): the argument at index0 modulo their number */
        if (!a || a->npos == 0) return jinja_rt_err(at, "no items for cycling given");
        *out = jv_retain(a->pos[(size_t)self.u.i % a->npos]);
        return CMF_OK;
    }
    if (!strcmp(m, JINJA_LOOP_CHANGED)) return jinja_loop_changed(c, at, self.u.i, a, out);
    if (self.k == JV_NS && !strncmp(m, "cycler.", 7)) { /* jinja2.utils.Cycler: next(), reset(), .current */
        const jv *items = jv_dict_get(self, JINJA_CYCLER_ITEMS, strlen(JINJA_CYCLER_ITEMS));
        const jv *pos = jv_dict_get(self, JINJA_CYCLER_POS, strlen(JINJA_CYCLER_POS));
        if (!items || !pos || items->k != JV_LIST || pos->k != JV_INT || items->u.l->n == 0)
            return jinja_rt_err(at, "not a cycler");
        size_t p = (size_t)pos->u.i % items->u.l->n;
        if (!strcmp(m, "cycler.reset")) {
            *out = jv_none();
            p = 0;
        } else {
            *out = jv_retain(items->u.l->v[p]);
            if (!strcmp(m, "cycler.next")) p = (p + 1) % items->u.l->n;
        }
        if (jv_dict_set(self, JINJA_CYCLER_POS, strlen(JINJA_CYCLER_POS), jv_int((int64_t)p))) { jv_release(*out); return NOMEM(); }
        return CMF_OK;
    }
    if (self.k == JV_STR) return str_method(c, at, self, m, a, out);
    if (self.k == JV_DICT) {
        if (!strcmp(m, "items")) return jb_dict_items(self, out);
        if (!strcmp(m, "keys") || !strcmp(m, "values")) {
            jv l = jv_list_new(self.u.d->n);
            if (jv_is_oom(l)) return NOMEM();
            for (size_t i = 0; i < self.u.d->n; i++)
                jv_list_push(l, m[0] == 'k' ? jv_dict_key(self.u.d, i) : jv_retain(self.u.d->v[i]));
            *out = l;
            return CMF_OK;
        }
        if (!strcmp(m, "get")) {
            const jv *v = a0 ? jv_dict_get_key(self, *a0) : NULL;
            const jv *d = jargs_get(a, 1, "default");
            *out = v ? jv_retain(*v) : d ? jv_retain(*d) : jv_none();
            return CMF_OK;
        }
    }
    if ((self.k == JV_LIST || self.k == JV_DICT) && in_list(MUTATING_METHODS, m))
        return jinja_rt_err(at, "access to attribute '%s' of '%s' object is unsafe", m,
                            self.k == JV_LIST ? "list" : "dict");
    if (self.k == JV_LIST) {
        if (!strcmp(m, "index")) {
            for (size_t i = 0; a0 && i < self.u.l->n; i++) {
                int eq;
                TRY(jinja_equal(c, at, self.u.l->v[i], *a0, &eq));
                if (eq) { *out = jv_int((int64_t)i); return CMF_OK; }
            }
            return jinja_rt_err(at, "%s.index(x): x not in %s", jv_kind_name(self), jv_kind_name(self));
        }
        if (!strcmp(m, "count")) { /* Python's list.count / tuple.count: the items == x */
            if (!a0 || a->npos != 1 || a->nkw) return jinja_rt_err(at, "count() takes exactly one argument");
            int64_t k = 0;
            for (size_t i = 0; i < self.u.l->n; i++) {
                int eq;
                TRY(jinja_equal(c, at, self.u.l->v[i], *a0, &eq));
                k += eq;
            }
            *out = jv_int(k);
            return CMF_OK;
        }
    }
    return cmf_err(CMF_E_UNSUPPORTED, "template:%d:%d: unknown method '%s' of '%s'", at->line, at->col, m, jv_kind_name(self));
}

/* ---- global functions ---- */

cmf_status jinja_call_object(jctx *c, const jnode *at, jv obj, const jargs *a, jv *out) {
    (void)c;
    const jv *sep = obj.k == JV_NS ? jv_dict_get(obj, JINJA_JOINER_SEP, strlen(JINJA_JOINER_SEP)) : NULL;
    const jv *used = obj.k == JV_NS ? jv_dict_get(obj, JINJA_JOINER_USED, strlen(JINJA_JOINER_USED)) : NULL;
    if (!sep || !used) return jinja_rt_err(at, "'%s' object is not callable", jv_kind_name(obj));
    if (a->npos || a->nkw) return jinja_rt_err(at, "a joiner takes no arguments");
    if (!jv_truthy(*used)) {
        if (jv_dict_set(obj, JINJA_JOINER_USED, strlen(JINJA_JOINER_USED), jv_bool(1))) return NOMEM();
        return jb_ret_str(out, "", 0);
    }
    *out = jv_retain(*sep);
    return CMF_OK;
}

cmf_status jinja_call_global(jctx *c, const jnode *at, int fid, const jargs *a, jv *out) {
    switch (fid) {
    case G_RANGE: {
        int64_t v[3] = {0, 0, 1};
        if (a->npos < 1 || a->npos > 3) return jinja_rt_err(at, "range() takes 1 to 3 integer arguments");
        for (size_t i = 0; i < a->npos; i++) {
            if (a->pos[i].k != JV_INT && a->pos[i].k != JV_BOOL) return jinja_rt_err(at, "range() arguments must be integers");
            v[a->npos == 1 ? 1 : i] = a->pos[i].k == JV_INT ? a->pos[i].u.i : a->pos[i].u.b;
        }
        if (v[2] == 0) return jinja_rt_err(at, "range() step must not be zero");
        double count = ceil(((double)v[1] - (double)v[0]) / (double)v[2]);
        if (count < 0) count = 0;
        if (count + (double)c->items > (double)c->lim.max_iterations)
            return jinja_limit_err(at, JINJA_ITEMS_WHAT, c->lim.max_iterations);
        c->items += (size_t)count;
        jv l = jv_list_new((size_t)count);
        if (jv_is_oom(l)) return NOMEM();
        for (int64_t x = v[0]; v[2] > 0 ? x < v[1] : x > v[1];) {
            jv_list_push(l, jv_int(x));
            if (__builtin_add_overflow(x, v[2], &x)) break; /* (near 2^63: UB) */
        }
        *out = l;
        return CMF_OK;
    }
    case G_NAMESPACE: case G_DICT: {
        jv d = jv_dict_new();
        if (jv_is_oom(d)) return NOMEM();
        if (a->npos == 1 && a->pos[0].k == JV_DICT)
            for (size_t i = 0; i < a->pos[0].u.d->n; i++)
                {
                    jv k = jv_dict_key(a->pos[0].u.d, i);
                    jv_dict_set_key(d, k, jv_retain(a->pos[0].u.d->v[i]));
                    jv_release(k);
                }
        for (size_t i = 0; i < a->nkw; i++)
            if (jv_dict_set(d, a->kwn[i], strlen(a->kwn[i]), jv_retain(a->kwv[i]))) { jv_release(d); return NOMEM(); }
        if (fid == G_NAMESPACE) d.k = JV_NS;
        *out = d;
        return CMF_OK;
    }
    case G_RAISE: {
        const jv *m = jargs_get(a, 0, NULL);
        jbuf b = {.limit = 4096}; /* (the message of an error; a value holding one list many times stops here) */
        if (m) jv_to_str(&b, *m);
        if (b.deep) { jbuf_free(&b); return jinja_deep_err(at); }
        /* the message is a C string: a NUL in it is written \x00, and an empty one says so (an error always has a
         * message) */
        jbuf m2 = {0};
        for (size_t i = 0; i < b.n; i++) {
            if (b.p[i]) jbuf_put(&m2, b.p + i, 1);
            else jbuf_puts(&m2, "\\x00");
        }
        cmf_status st = cmf_err(CMF_E_ARG, "%s", m2.n ? m2.p : "raise_exception() with an empty message");
        jbuf_free(&m2);
        jbuf_free(&b);
        return st;
    }
    case G_CYCLER: case G_JOINER: {
        if (fid == G_CYCLER && (a->npos == 0 || a->nkw)) return jinja_rt_err(at, "cycler() needs at least one item");
        const jv *sep = fid == G_JOINER ? jargs_get(a, 0, "sep") : NULL;
        jv d = jv_dict_new(), items = fid == G_CYCLER ? jv_list_new(a->npos) : jv_none();
        if (jv_is_oom(d) || jv_is_oom(items)) { jv_release(d); jv_release(items); return NOMEM(); }
        for (size_t i = 0; fid == G_CYCLER && i < a->npos; i++) jv_list_push(items, jv_retain(a->pos[i])); /* reserved */
        int bad = fid == G_CYCLER
            ? jv_dict_set(d, JINJA_CYCLER_ITEMS, strlen(JINJA_CYCLER_ITEMS), items) |
              jv_dict_set(d, JINJA_CYCLER_POS, strlen(JINJA_CYCLER_POS), jv_int(0))
            : jv_dict_set(d, JINJA_JOINER_SEP, strlen(JINJA_JOINER_SEP), sep ? jv_retain(*sep) : jv_cstr(", ")) |
              jv_dict_set(d, JINJA_JOINER_USED, strlen(JINJA_JOINER_USED), jv_bool(0));
        d.k = JV_NS;
        if (bad) { jv_release(d); return NOMEM(); }
        *out = d;
        return CMF_OK;
    }
    case G_STRFTIME: {
        const jv *f = jargs_get(a, 0, NULL);
        if (!f || f->k != JV_STR) return jinja_rt_err(at, "strftime_now() needs a format string");
        time_t now = time(NULL);
        struct tm tm;
        char buf[512];
        localtime_r(&now, &tm);
        size_t n = strftime(buf, sizeof(buf), f->u.s->s, &tm);
        return jb_ret_str(out, buf, n);
    }
    }
    return jinja_rt_err(at, "unknown global function");
}
