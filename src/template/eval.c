/* eval.c — the expression evaluator of the Jinja interpreter (jinja_eval): variables, attribute / item access and
 * slices, calls (macros, star arguments), filters and tests with the work they are charged, and the sandbox's error
 * and work-budget helpers. Expressions have Python semantics as jinja2 compiles them; the operators are in
 * operators.c, the statements, scoping and render entry points in exec.c. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "template/eval.h"
#include "util/error.h"

cmf_status jinja_rt_err(const jnode *at, const char *fmt, ...) {
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    return cmf_err(CMF_E_FORMAT, "template:%d:%d: %s", at ? at->line : 0, at ? at->col : 0, msg);
}

cmf_status jinja_limit_err(const jnode *at, const char *what, size_t lim) {
    return cmf_err(CMF_E_UNSUPPORTED, "template:%d:%d: sandbox limit exceeded: %s (limit %zu)", at->line, at->col,
                   what, lim);
}

#define NOMEM() cmf_err(CMF_E_NOMEM, "template render")
#define TRY(x) do { cmf_status st_ = (x); if (st_) return st_; } while (0)

const jv *jargs_get(const jargs *a, int i, const char *name) {
    for (size_t k = 0; name && k < a->nkw; k++)
        if (!strcmp(a->kwn[k], name)) return &a->kwv[k];
    if (i >= 0 && (size_t)i < a->npos) return &a->pos[i];
    return NULL;
}

void jargs_free(jargs *a) {
    for (size_t i = 0; i < a->npos; i++) jv_release(a->pos[i]);
    for (size_t i = 0; i < a->nkw; i++) jv_release(a->kwv[i]);
    free(a->pos);
    free(a->kwv);
    free(a->kwn_own);
    jv_release(a->hold);
    a->pos = a->kwv = NULL;
    a->kwn_own = NULL;
    a->hold = jv_undef(NULL);
    a->npos = a->nkw = 0;
}

/* ---- variables ---- */

jv jinja_lookup(jctx *c, jframe *f, const char *name) {
    for (; f; f = f->parent) {
        const jv *v = jv_dict_get(f->vars, name, strlen(name));
        if (v) return jv_retain(*v);
    }
    int g = jinja_global_id(name);
    if (g >= 0) { jv v = {.k = JV_FUNC}; v.u.i = g; return v; }
    (void)c;
    return jv_undef(name);
}

cmf_status jinja_assign(jframe *f, const char *name, jv v) {
    if (jv_dict_set(f->vars, name, strlen(name), v)) return NOMEM();
    return CMF_OK;
}

#define ev jinja_eval

cmf_status jinja_undef_err(const jnode *at, jv v) {
    if (v.u.name) return jinja_rt_err(at, "'%s' is undefined", v.u.name);
    return jinja_rt_err(at, "undefined value used");
}

/* ---- the work budget ---- */

cmf_status jinja_walk_err(jctx *c, const jnode *at) {
    return jinja_limit_err(at, "work steps (value comparisons, items and bytes processed)", JINJA_WALK_STEPS(c->lim));
}

size_t jinja_work_of(jv v) {
    switch (v.k) {
    case JV_STR: return 1 + v.u.s->len / JINJA_WORK_BYTES;
    case JV_LIST: return 1 + v.u.l->n;
    case JV_DICT: case JV_NS: return 1 + v.u.d->n;
    default: return 1;
    }
}

cmf_status jinja_charge_work(jctx *c, const jnode *at, size_t steps) {
    if (steps > c->steps) { c->steps = 0; return jinja_walk_err(c, at); }
    c->steps -= steps;
    return CMF_OK;
}

/* The work of a call or filter: its string and container arguments and its result. */
static size_t args_work(const jargs *a) {
    size_t w = 0;
    for (size_t i = 0; i < a->npos; i++) w += jinja_work_of(a->pos[i]);
    for (size_t i = 0; i < a->nkw; i++) w += jinja_work_of(a->kwv[i]);
    return w;
}

cmf_status jinja_deep_err(const jnode *at) {
    return jinja_rt_err(at, "maximum recursion depth exceeded: a value nested more than %d levels deep", JV_MAX_DEPTH);
}

cmf_status jinja_buf_status(jctx *c, const jnode *at, const jbuf *b, const char *what) {
    if (b->deep) return jinja_deep_err(at);
    if (b->over) return jinja_limit_err(at, what, c->lim.max_output);
    if (b->oom) return NOMEM();
    return CMF_OK;
}

cmf_status jinja_equal(jctx *c, const jnode *at, jv a, jv b, int *eq) {
    int r = jv_equal(a, b, &c->steps);
    if (r == -2) return jinja_deep_err(at);
    if (r < 0) return jinja_walk_err(c, at);
    *eq = r;
    return CMF_OK;
}

/* ---- attribute / item access ---- */

/* The attributes of jinja2's Macro object (runtime.py Macro.__init__): name (None for a call block's caller),
 * arguments (the parameter names, a tuple), catch_kwargs / catch_varargs / caller (whether the body reads kwargs /
 * varargs / caller); others are undefined. */
static cmf_status macro_attr(const jnode *at, const jv_macro *m, const char *name, jv *out) {
    const jnode *d = m->def;
    if (!strcmp(name, "name")) {
        if (d->type != N_MACRO) { *out = jv_none(); return CMF_OK; }
        *out = jv_cstr(d->name);
        return jv_is_oom(*out) ? NOMEM() : CMF_OK;
    }
    if (!strcmp(name, "arguments")) {
        jv t = jv_list_new(d->n2);
        if (jv_is_oom(t)) return NOMEM();
        t.u.l->tuple = 1;
        for (size_t i = 0; i < d->n2; i++) {
            jv s = jv_cstr(d->names[i]);
            if (jv_is_oom(s) || jv_list_push(t, s)) { jv_release(t); return NOMEM(); }
        }
        *out = t;
        return CMF_OK;
    }
    int bit = !strcmp(name, "catch_kwargs") ? JN_USES_KWARGS : !strcmp(name, "catch_varargs") ? JN_USES_VARARGS
            : !strcmp(name, "caller") ? JN_USES_CALLER : 0;
    (void)at;
    *out = bit ? jv_bool((d->accesses & bit) != 0) : jv_undef(name);
    return CMF_OK;
}

cmf_status jinja_getattr(jctx *c, const jnode *at, jv obj, const char *name, jv *out) {
    (void)c;
    if (obj.k == JV_UNDEF) return jinja_undef_err(at, obj);
    const char *method = jinja_method_name(obj, name); /* (a namespace has none, a cycler next and reset) */
    if (method) {
        jv_method *m = malloc(sizeof(*m));
        if (!m) return NOMEM();
        m->rc = 1;
        m->self = jv_retain(obj);
        m->name = method;
        out->k = JV_METHOD;
        out->u.meth = m;
        return CMF_OK;
    }
    if (obj.k == JV_NS && !strcmp(name, "current") && jv_dict_get(obj, JINJA_CYCLER_ITEMS, strlen(JINJA_CYCLER_ITEMS)))
        return jinja_method(c, at, obj, "cycler.current", NULL, out);
    if (obj.k == JV_DICT || obj.k == JV_NS) {
        const jv *v = jv_dict_get(obj, name, strlen(name));
        *out = v ? jv_retain(*v) : jv_undef(name);
        return CMF_OK;
    }
    if (obj.k == JV_MACRO) return macro_attr(at, obj.u.m, name, out);
    if (obj.k == JV_LIST && obj.u.l->tuple == JINJA_GROUP_TUPLE && obj.u.l->n == 2 && /* groupby's items */
        (!strcmp(name, "grouper") || !strcmp(name, "list"))) {
        *out = jv_retain(obj.u.l->v[name[0] == 'l']);
        return CMF_OK;
    }
    *out = jv_undef(name);
    return CMF_OK;
}

static int64_t norm_index(int64_t i, size_t n) { return i < 0 ? i + (int64_t)n : i; }

/* getattr with a computed string key: the Undefined it may return borrows the key's text, so the key is kept
 * alive in c->kept until the render ends (the fuzzer found `{{ d[k ~ 'x'] + 1 }}`-shaped reads after free). */
static cmf_status getattr_key(jctx *c, const jnode *at, jv obj, jv key, jv *out) {
    TRY(jinja_getattr(c, at, obj, key.u.s->s, out));
    if (out->k != JV_UNDEF || out->u.name != key.u.s->s) return CMF_OK;
    if (c->kept.k != JV_LIST) {
        c->kept = jv_list_new(0);
        if (jv_is_oom(c->kept)) { c->kept = jv_none(); return NOMEM(); }
    }
    if (jv_list_push(c->kept, jv_retain(key))) return NOMEM();
    return CMF_OK;
}

cmf_status jinja_getitem(jctx *c, const jnode *at, jv obj, jv key, jv *out) {
    if (obj.k == JV_UNDEF) return jinja_undef_err(at, obj);
    if ((obj.k == JV_DICT || obj.k == JV_NS) && key.k == JV_STR) {
        const jv *v = jv_dict_get(obj, key.u.s->s, key.u.s->len);
        if (v) { *out = jv_retain(*v); return CMF_OK; }
        return getattr_key(c, at, obj, key, out);
    }
    if (obj.k == JV_DICT && (jv_is_number(key) || key.k == JV_NONE)) { /* a dict literal's non-string keys */
        const jv *v = jv_dict_get_key(obj, key);
        *out = v ? jv_retain(*v) : jv_undef(NULL);
        return CMF_OK;
    }
    if (obj.k == JV_LIST && jinja_is_intlike(key)) {
        int64_t i = norm_index(jinja_ival(key), obj.u.l->n);
        *out = i >= 0 && (size_t)i < obj.u.l->n ? jv_retain(obj.u.l->v[i]) : jv_undef(NULL);
        return CMF_OK;
    }
    if (obj.k == JV_STR && jinja_is_intlike(key)) {
        TRY(jinja_charge_work(c, at, jinja_work_of(obj))); /* (code points are counted from the start) */
        size_t ncp = utf8_count(obj.u.s->s, obj.u.s->len);
        int64_t i = norm_index(jinja_ival(key), ncp);
        if (i < 0 || (size_t)i >= ncp) { *out = jv_undef(NULL); return CMF_OK; }
        size_t b = utf8_offset(obj.u.s->s, obj.u.s->len, (size_t)i), e = utf8_offset(obj.u.s->s, obj.u.s->len, (size_t)i + 1);
        *out = jv_strn(obj.u.s->s + b, e - b);
        return jv_is_oom(*out) ? NOMEM() : CMF_OK;
    }
    if (key.k == JV_STR) return getattr_key(c, at, obj, key, out);
    *out = jv_undef(NULL);
    return CMF_OK;
}

/* Python slice indices for length n (slice.indices semantics). */
static void slice_indices(const jv *s, const jv *e, int64_t step, int64_t n, int64_t *start, int64_t *stop) {
    int64_t lo = step < 0 ? -1 : 0, hi = step < 0 ? n - 1 : n;
    if (!s || s->k == JV_NONE) *start = step < 0 ? hi : lo;
    else { *start = jinja_ival(*s); if (*start < 0) { *start += n; if (*start < lo) *start = lo; } else if (*start > hi) *start = hi; }
    if (!e || e->k == JV_NONE) *stop = step < 0 ? lo : hi;
    else { *stop = jinja_ival(*e); if (*stop < 0) { *stop += n; if (*stop < lo) *stop = lo; } else if (*stop > hi) *stop = hi; }
}

static cmf_status slice(jctx *c, jframe *f, const jnode *n, jv obj, jv *out) {
    jv parts[3] = {jv_none(), jv_none(), jv_none()};
    const jnode *pn[3] = {n->b, n->c, n->d};
    cmf_status st = CMF_OK;
    for (int k = 0; k < 3 && !st; k++) {
        if (!pn[k]) continue;
        if ((st = ev(c, f, pn[k], &parts[k]))) break;
        if (parts[k].k != JV_NONE && !jinja_is_intlike(parts[k])) st = jinja_rt_err(pn[k], "slice indices must be integers");
    }
    int64_t step = parts[2].k == JV_NONE ? 1 : jinja_ival(parts[2]);
    if (!st && step == 0) st = jinja_rt_err(n, "slice step cannot be zero");
    if (!st && obj.k == JV_UNDEF) st = jinja_undef_err(n->a, obj);
    if (!st && obj.k != JV_LIST && obj.k != JV_STR) st = jinja_rt_err(n, "'%s' object is not subscriptable", jv_kind_name(obj));
    if (st) { for (int k = 0; k < 3; k++) jv_release(parts[k]); return st; }
    TRY(jinja_charge_work(c, n, jinja_work_of(obj))); /* (a slice reads or copies up to all of it) */
    int64_t len = obj.k == JV_LIST ? (int64_t)obj.u.l->n : (int64_t)utf8_count(obj.u.s->s, obj.u.s->len), a, b;
    slice_indices(&parts[0], &parts[1], step, len, &a, &b);
    if (obj.k == JV_LIST) {
        *out = jv_list_new(0);
        if (jv_is_oom(*out)) return NOMEM();
        out->u.l->tuple = obj.u.l->tuple != 0; /* (a tuple's slice is a tuple) */
        for (int64_t i = a; step > 0 ? i < b : i > b;) {
            if (jv_list_push(*out, jv_retain(obj.u.l->v[i]))) return NOMEM();
            if (__builtin_add_overflow(i, step, &i)) break; /* (a step near 2^63 overflowed: UB) */
        }
        return CMF_OK;
    }
    jbuf buf = {0};
    const char *s = obj.u.s->s;
    size_t sl = obj.u.s->len;
    if (step == 1) { /* s[a:b]: one byte range */
        if (a < b) {
            size_t x = utf8_offset(s, sl, (size_t)a), y = utf8_offset(s, sl, (size_t)b);
            jbuf_put(&buf, s + x, y - x);
        }
    } else if (step > 0 ? a < b : a > b) { /* walk the code points once from a (each index from the start was
                                             * quadratic: s[::2] of 200 KB took a minute) */
        size_t x = utf8_offset(s, sl, (size_t)a);
        for (int64_t i = a;;) {
            size_t y = x + 1;
            while (y < sl && ((unsigned char)s[y] & 0xC0) == 0x80) y++;
            jbuf_put(&buf, s + x, y - x);
            const uint64_t mag = step > 0 ? (uint64_t)step : (uint64_t)0 - (uint64_t)step;
            for (uint64_t k = 0; k < mag; k++) { /* to the next index, code point by code point (at most to b) */
                if (step > 0) { i++; if (i >= b) break; x = y; y = x + 1; while (y < sl && ((unsigned char)s[y] & 0xC0) == 0x80) y++; }
                else { i--; if (i <= b) break; do x--; while (x > 0 && ((unsigned char)s[x] & 0xC0) == 0x80); }
            }
            if (step > 0 ? i >= b : i <= b) break;
        }
    }
    *out = jv_strn(buf.p ? buf.p : "", buf.n);
    jbuf_free(&buf);
    return jv_is_oom(*out) ? NOMEM() : CMF_OK;
}

/* ---- calls ---- */

/* f(*items): the items of `v` appended to the positional arguments (any iterable, as Python's call). */
static cmf_status add_star_args(jctx *c, const jnode *at, jv v, jargs *a) {
    jv l;
    TRY(jb_to_list(c, at, v, &l));
    jv *p = realloc(a->pos, (a->npos + l.u.l->n + 1) * sizeof(jv));
    if (!p) { jv_release(l); return NOMEM(); }
    a->pos = p;
    for (size_t i = 0; i < l.u.l->n; i++) a->pos[a->npos++] = jv_retain(l.u.l->v[i]);
    jv_release(l);
    return CMF_OK;
}

/* f(**mapping): its entries appended to the keyword arguments (a name given twice is Python's TypeError). */
static cmf_status add_star_kwargs(const jnode *at, jv d, jargs *a) {
    if (d.k != JV_DICT) return jinja_rt_err(at, "argument after ** must be a mapping, not %s", jv_kind_name(d));
    size_t n = a->nkw + d.u.d->n;
    const char **names = malloc((n + 1) * sizeof(*names));
    jv *v = realloc(a->kwv, (n + 1) * sizeof(jv));
    if (v) a->kwv = v;
    if (!names || !v) { free(names); return NOMEM(); }
    for (size_t i = 0; i < a->nkw; i++) names[i] = a->kwn[i];
    for (size_t i = 0; i < d.u.d->n; i++) {
        const char *name = d.u.d->k[i]->s; /* (a string key that starts with \x02 is stored escaped: refused) */
        if (!jv_dict_key_is_str(d.u.d, i) || name[0] == '\x02') { free(names); return jinja_rt_err(at, "keywords must be strings"); }
        for (size_t j = 0; j < a->nkw; j++)
            if (!strcmp(names[j], name)) { free(names); return jinja_rt_err(at, "got multiple values for keyword argument '%s'", name); }
        names[a->nkw] = name;
        a->kwv[a->nkw++] = jv_retain(d.u.d->v[i]);
    }
    free(a->kwn_own);
    a->kwn = a->kwn_own = names;
    return CMF_OK;
}

cmf_status jinja_eval_args(jctx *c, jframe *f, const jnode *n, jargs *a) {
    memset(a, 0, sizeof(*a));
    a->hold = jv_undef(NULL);
    a->pos = calloc(n->n1 + 1, sizeof(jv));
    a->kwv = calloc(n->n2 + 1, sizeof(jv));
    if (!a->pos || !a->kwv) { jargs_free(a); return NOMEM(); }
    a->kwn = n->names;
    for (size_t i = 0; i < n->n1; i++) {
        cmf_status st = ev(c, f, n->l1[i], &a->pos[i]);
        if (st) { jargs_free(a); return st; }
        a->npos++;
    }
    for (size_t i = 0; i < n->n2; i++) {
        cmf_status st = ev(c, f, n->l2[i], &a->kwv[i]);
        if (st) { jargs_free(a); return st; }
        a->nkw++;
    }
    /* (N_CALL, N_FILTER and N_TEST keep *args in c and **kwargs in d) */
    const jnode *star = n->type == N_CALL || n->type == N_FILTER || n->type == N_TEST ? n->c : NULL;
    const jnode *dstar = n->type == N_CALL || n->type == N_FILTER || n->type == N_TEST ? n->d : NULL;
    cmf_status st = CMF_OK;
    jv v;
    if (star && !(st = ev(c, f, star, &v))) {
        st = add_star_args(c, star, v, a);
        jv_release(v);
    }
    if (!st && dstar && !(st = ev(c, f, dstar, &v))) {
        a->hold = v;
        st = add_star_kwargs(dstar, v, a);
    }
    if (st) { jargs_free(a); return st; }
    return CMF_OK;
}

cmf_status jinja_call_macro(jctx *c, const jnode *at, jv mv, const jargs *a, jv *out) {
    const jnode *def = mv.u.m->def;
    if (c->depth >= c->lim.max_depth) return jinja_limit_err(at, "macro call depth", (size_t)c->lim.max_depth);
    /* every call is a step of the iteration budget: a macro calling itself twice 60 deep stays under the depth limit
     * and made 2^61 calls */
    if (++c->iterations > c->lim.max_iterations)
        return jinja_limit_err(at, "loop iterations and macro calls", c->lim.max_iterations);
    jframe fr = {.vars = jv_dict_new(), .parent = c->root};
    if (jv_is_oom(fr.vars)) return NOMEM();
    jv varargs = jv_list_new(0), kwargs = jv_dict_new();
    cmf_status st = CMF_OK;
    if (jv_is_oom(varargs) || jv_is_oom(kwargs)) st = NOMEM();
    /* jinja2 runtime.py Macro.__call__: positional arguments fill the parameters in order; a keyword fills a
     * parameter not filled by position; the rest go to kwargs / varargs when the body reads them, else an error */
    const char *mname = def->type == N_MACRO && def->name ? def->name : "caller";
    for (size_t k = 0; !st && k < a->nkw; k++) {
        size_t i;
        for (i = 0; i < def->n2 && strcmp(def->names[i], a->kwn[k]); i++) {}
        if (i < def->n2 && i >= a->npos) st = jinja_assign(&fr, def->names[i], jv_retain(a->kwv[k]));
        else if (!strcmp(a->kwn[k], "caller") && i == def->n2 && (def->accesses & JN_USES_CALLER))
            st = jinja_assign(&fr, "caller", jv_retain(a->kwv[k]));
        else if (!(def->accesses & JN_USES_KWARGS))
            st = jinja_rt_err(at, "macro '%s' takes no keyword argument '%s'", mname, a->kwn[k]);
        else if (jv_dict_set(kwargs, a->kwn[k], strlen(a->kwn[k]), jv_retain(a->kwv[k]))) st = NOMEM();
    }
    if (!st && mv.u.m->caller.k == JV_MACRO && !(def->accesses & JN_USES_CALLER)) { /* {% call %} passes caller= */
        if (!(def->accesses & JN_USES_KWARGS))
            st = jinja_rt_err(at, "macro '%s' was invoked with two values for the special caller argument", mname);
        else if (jv_dict_set(kwargs, "caller", 6, jv_retain(mv.u.m->caller))) st = NOMEM();
    }
    if (!st && a->npos > def->n2 && !(def->accesses & JN_USES_VARARGS))
        st = jinja_rt_err(at, "macro '%s' takes not more than %zu argument(s)", mname, def->n2);
    for (size_t i = 0; !st && i < a->npos; i++) {
        if (i < def->n2) st = jinja_assign(&fr, def->names[i], jv_retain(a->pos[i]));
        else if (jv_list_push(varargs, jv_retain(a->pos[i]))) st = NOMEM();
    }
    for (size_t i = 0; !st && i < def->n2; i++) {
        if (jv_dict_get(fr.vars, def->names[i], strlen(def->names[i]))) continue;
        jv d = jv_undef(def->names[i]);
        if (def->l2[i] && (st = ev(c, &fr, def->l2[i], &d))) break;
        st = jinja_assign(&fr, def->names[i], d);
    }
    if (!st) varargs.u.l->tuple = 1;
    /* (a parameter named varargs or kwargs is an ordinary one: it keeps its value) */
    if (!st && !jv_dict_get(fr.vars, "varargs", 7)) st = jinja_assign(&fr, "varargs", varargs); else jv_release(varargs);
    if (!st && !jv_dict_get(fr.vars, "kwargs", 6)) st = jinja_assign(&fr, "kwargs", kwargs); else jv_release(kwargs);
    if (!st && mv.u.m->caller.k == JV_MACRO) st = jinja_assign(&fr, "caller", jv_retain(mv.u.m->caller));
    jbuf buf = {.limit = c->lim.max_output}, *saved = c->out;
    if (!st) {
        c->out = &buf;
        c->depth++;
        st = jinja_exec_body(c, &fr, def->l1, def->n1);
        c->depth--;
        c->out = saved;
        c->flow = FLOW_NONE;
    }
    if (!st) {
        *out = jv_strn(buf.p ? buf.p : "", buf.n);
        if (jv_is_oom(*out)) st = NOMEM();
    }
    jbuf_free(&buf);
    jv_release(fr.vars);
    return st;
}

static cmf_status call(jctx *c, jframe *f, const jnode *n, jv *out) {
    jv fn;
    TRY(ev(c, f, n->a, &fn));
    jargs a;
    cmf_status st = jinja_eval_args(c, f, n, &a);
    if (st) { jv_release(fn); return st; }
    switch (fn.k) {
    case JV_MACRO:
        if (c->pending_caller.k == JV_MACRO) { /* {% call %}: bind caller() to this invocation */
            jv_macro *m = malloc(sizeof(*m));
            if (!m) { st = NOMEM(); break; }
            m->rc = 1;
            m->def = fn.u.m->def;
            m->caller = c->pending_caller;
            c->pending_caller = jv_undef(NULL);
            jv bound = {.k = JV_MACRO};
            bound.u.m = m;
            st = jinja_call_macro(c, n, bound, &a, out);
            jv_release(bound);
        } else {
            st = jinja_call_macro(c, n, fn, &a, out);
        }
        break;
    case JV_FUNC: st = jinja_call_global(c, n, (int)fn.u.i, &a, out); break;
    case JV_METHOD: st = jinja_method(c, n, fn.u.meth->self, fn.u.meth->name, &a, out); break;
    case JV_UNDEF: st = jinja_undef_err(n->a, fn); break;
    case JV_DICT: st = jinja_call_loop(c, n, fn, &a, out); break; /* loop(items), else "not callable" */
    case JV_NS: st = jinja_call_object(c, n, fn, &a, out); break; /* a joiner() */
    default: st = jinja_rt_err(n, "'%s' object is not callable", jv_kind_name(fn));
    }
    /* the work: arguments, a method's receiver (str.find scans it), the result (a dict's items() made n pairs) */
    if (!st) {
        size_t w = args_work(&a) + jinja_work_of(*out) + (fn.k == JV_METHOD ? jinja_work_of(fn.u.meth->self) : 0);
        if (fn.k == JV_METHOD && !strcmp(fn.u.meth->name, "get")) w = args_work(&a) + 1; /* (dict.get: a lookup) */
        if ((st = jinja_charge_work(c, n, w))) { jv_release(*out); *out = jv_undef(NULL); }
    }
    jargs_free(&a);
    jv_release(fn);
    return st;
}

/* ---- expressions ---- */

cmf_status jinja_eval(jctx *c, jframe *f, const jnode *n, jv *out) {
    jv a = jv_undef(NULL), b = jv_undef(NULL);
    cmf_status st = CMF_OK;
    switch (n->type) {
    case N_CONST: *out = jv_retain(n->cval); return CMF_OK;
    case N_NAME: *out = jinja_lookup(c, f, n->name); return CMF_OK;
    case N_LIST: case N_TUPLE: case N_DICT: {
        jv r = n->type == N_DICT ? jv_dict_new() : jv_list_new(n->n1);
        if (jv_is_oom(r)) return NOMEM();
        for (size_t i = 0; i < n->n1 && !st; i++) {
            if ((st = ev(c, f, n->l1[i], &a))) break;
            if (n->type != N_DICT) { if (jv_list_push(r, a)) st = NOMEM(); continue; }
            if ((st = ev(c, f, n->l1[++i], &b))) { jv_release(a); break; }
            int e = jv_dict_set_key(r, a, b); /* (strings, numbers, bools and None, as Python's hashable keys) */
            if (e == -2) st = jinja_rt_err(n->l1[i - 1], "unhashable type: '%s'", jv_kind_name(a));
            else if (e) st = NOMEM();
            jv_release(a);
        }
        if (st) { jv_release(r); return st; }
        if (n->type == N_TUPLE) r.u.l->tuple = 1;
        *out = r;
        return CMF_OK;
    }
    case N_BINOP:
        if (!(st = ev(c, f, n->a, &a)) && !(st = ev(c, f, n->b, &b))) st = jinja_binop(c, n, a, b, out);
        break;
    case N_NEG: case N_POS:
        if (!(st = ev(c, f, n->a, &a))) st = jinja_unary(n, a, out);
        break;
    case N_NOT:
        if (!(st = ev(c, f, n->a, &a))) *out = jv_bool(!jv_truthy(a));
        break;
    case N_AND: case N_OR:
        if ((st = ev(c, f, n->a, &a))) break;
        if (jv_truthy(a) == (n->type == N_OR)) { *out = a; return CMF_OK; }
        jv_release(a);
        return ev(c, f, n->b, out);
    case N_COMPARE:
        if (!(st = ev(c, f, n->a, &a)) && !(st = ev(c, f, n->b, &b))) st = jinja_compare_op(c, n, a, b, out);
        break;
    case N_CONDEXPR:
        if ((st = ev(c, f, n->a, &a))) break;
        if (jv_truthy(a)) st = ev(c, f, n->b, out);
        else if (n->c) st = ev(c, f, n->c, out);
        else *out = jv_undef(NULL);
        break;
    case N_GETATTR:
        if (!(st = ev(c, f, n->a, &a))) st = jinja_getattr(c, n, a, n->name, out);
        break;
    case N_GETITEM:
        if (!(st = ev(c, f, n->a, &a)) && !(st = ev(c, f, n->b, &b))) st = jinja_getitem(c, n, a, b, out);
        break;
    case N_SLICE:
        if (!(st = ev(c, f, n->a, &a))) st = slice(c, f, n, a, out);
        break;
    case N_CALL: return call(c, f, n, out);
    case N_FILTER: case N_TEST: {
        if (n->a) st = ev(c, f, n->a, &a);
        else a = jv_retain(c->filter_input);
        if (st) break;
        jargs args;
        if ((st = jinja_eval_args(c, f, n, &args))) break;
        if (n->type == N_FILTER) {
            st = jinja_filter(c, n, n->name, a, &args, out);
            /* replace / tojson / indent / upper / title ... build their strings themselves: the string size limit
             * of `~` and `*` holds for their results too (a chain of replace() grew a 1e9-byte string) */
            if (!st && out->k == JV_STR && out->u.s->len > c->lim.max_output) {
                jv_release(*out);
                *out = jv_undef(NULL);
                st = jinja_limit_err(n, "string size", c->lim.max_output);
            }
            /* the work: what the filter reads and makes (a list or dict read by length/first/last/default/... is
             * not walked: charged one step) */
            static const char *const cheap[] = {"length", "count", "first", "last", "default", "d", "safe", "list",
                                                "attr", NULL};
            int o1 = 0;
            for (int k = 0; cheap[k] && !o1; k++) o1 = !strcmp(n->name, cheap[k]);
            size_t w = (o1 && a.k != JV_STR ? 1 : jinja_work_of(a)) + args_work(&args);
            if (!st) w += jinja_work_of(*out);
            if (!st && (st = jinja_charge_work(c, n, w))) { jv_release(*out); *out = jv_undef(NULL); }
        } else {
            int r = 0;
            st = jinja_test(c, n, n->name, a, &args, &r);
            if (!st) *out = jv_bool(n->op ? !r : r);
            if (!st && (a.k == JV_STR || args.npos)) st = jinja_charge_work(c, n, jinja_work_of(a) + args_work(&args));
        }
        jargs_free(&args);
        break;
    }
    default: st = jinja_rt_err(n, "not an expression");
    }
    jv_release(a);
    jv_release(b);
    return st;
}
