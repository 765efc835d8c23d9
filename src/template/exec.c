/* exec.c — statements of the Jinja interpreter (output, if, for with the loop object, set, macro, call and filter
 * blocks, break/continue) and the render entry points of template.h. Scoping follows jinja2 3.1: each loop
 * iteration and each macro call runs in a fresh frame, so `set` inside a loop does not leak out (templates use
 * namespace() for that). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>
#include <utf8proc.h>

#include "template/eval.h"
#include "util/error.h"

struct cmf_template {
    jarena arena;
    jnode *root;
};

#define NOMEM() cmf_err(CMF_E_NOMEM, "template render")
#define TRY(x) do { cmf_status st_ = (x); if (st_) return st_; } while (0)

/* Items of a value as a for loop sees them (owned list): list items, dict keys, string characters. */
static cmf_status iter_items(jctx *c, const jnode *at, jv v, jv *out) {
    if (v.k == JV_LIST) { *out = jv_retain(v); return CMF_OK; }
    if (v.k == JV_DICT || v.k == JV_NS) TRY(jinja_charge_work(c, at, jinja_work_of(v))); /* (its keys are copied) */
    if (v.k == JV_STR) TRY(jinja_charge_items(c, at, utf8_count(v.u.s->s, v.u.s->len))); /* one string per char */
    jv l = jv_list_new(0);
    if (jv_is_oom(l)) return NOMEM();
    if (v.k == JV_DICT || v.k == JV_NS) {
        for (size_t i = 0; i < v.u.d->n; i++)
            if (jv_list_push(l, jv_dict_key(v.u.d, i))) { jv_release(l); return NOMEM(); }
    } else if (v.k == JV_STR) {
        const char *s = v.u.s->s;
        size_t n = v.u.s->len;
        for (size_t i = 0; i < n;) {
            size_t j = i + 1;
            while (j < n && ((unsigned char)s[j] & 0xC0) == 0x80) j++;
            if (jv_list_push(l, jv_strn(s + i, j - i))) { jv_release(l); return NOMEM(); }
            i = j;
        }
    } else if (v.k != JV_UNDEF) {
        jv_release(l);
        return jinja_rt_err(at, "'%s' object is not iterable", jv_kind_name(v));
    }
    *out = l;
    return CMF_OK;
}

/* {% set ns.attr = v %} (jinja2's NSRef assignment): ns must name a namespace; v is retained into it. */
static cmf_status set_ns_attr(jctx *c, jframe *f, const jnode *n, const char *name, const char *attr, jv v) {
    jv ns = jinja_lookup(c, f, name);
    int cyc = 0;
    cmf_status st;
    if (ns.k != JV_NS) st = jinja_rt_err(n, "cannot assign attribute on non-namespace object '%s'", name);
    else if ((cyc = jv_reaches(v, ns.u.d, &c->steps)) == 1) /* reference counts never free a cycle */
        st = jinja_rt_err(n, "a namespace cannot hold itself ('%s.%s' would reach '%s')", name, attr, name);
    else if (cyc == -1) st = jinja_walk_err(c, n);
    else if (cyc == -2) st = jinja_deep_err(n);
    else st = jv_dict_set(ns, attr, strlen(attr), jv_retain(v)) ? NOMEM() : CMF_OK;
    jv_release(ns);
    return st;
}

/* Binds the target entry n->names[*i] (a name, or a tuple "(" entries... ")" as parser.c parse_targets writes it)
 * to v and moves *i past it. A tuple unpacks v's items (a list or tuple, a string's characters, a dict's keys: what
 * a for loop iterates, as Python unpacks any iterable) when there are exactly as many, each into its entry,
 * recursively (`for a, (b, c) in ...`, as Python and jinja2 unpack nested targets). */
static cmf_status bind_entry(jctx *c, jframe *f, const jnode *n, int *i, jv v) {
    const char *nm = n->names[(*i)++], *dot = strchr(nm, '.');
    if (dot) return set_ns_attr(c, f, n, nm + strlen(nm) + 1, dot + 1, v); /* "ns.attr" NUL "ns" (target_seq) */
    if (strcmp(nm, "(") != 0) return jinja_assign(f, nm, jv_retain(v));
    int want = 0; /* the tuple's items: entries at nesting depth 0 up to its ")" */
    for (int j = *i, d = 0; j < n->op; j++) {
        const char *e = n->names[j];
        if (!strcmp(e, ")")) {
            if (d == 0) break;
            d--;
            continue;
        }
        if (d == 0) want++;
        if (!strcmp(e, "(")) d++;
    }
    jv items = jv_none();
    if (v.k == JV_LIST) items = jv_retain(v);
    else if (v.k == JV_STR || v.k == JV_DICT) TRY(iter_items(c, n, v, &items));
    cmf_status st = CMF_OK;
    if (items.k != JV_LIST || items.u.l->n != (size_t)want)
        st = jinja_rt_err(n, "cannot unpack '%s' into %d names", jv_kind_name(v), want);
    for (int k = 0; !st && k < want; k++) st = bind_entry(c, f, n, i, items.u.l->v[k]);
    (*i)++; /* the ")" */
    jv_release(items);
    return st;
}

/* Binds for-loop / set / with targets (n->names, n->op entries) to v. */
static cmf_status bind_targets(jctx *c, jframe *f, const jnode *n, jv v) {
    int i = 0;
    return bind_entry(c, f, n, &i, v);
}

/* A bound method value (self taken, name static). */
static int set_method(jv loop, const char *key, jv self, const char *name) {
    jv_method *m = malloc(sizeof(*m));
    if (!m) return -1;
    m->rc = 1;
    m->self = self;
    m->name = name;
    jv mv = {.k = JV_METHOD};
    mv.u.meth = m;
    return jv_dict_set(loop, key, strlen(key), mv);
}

/* The loop object of iteration i (0-based) of `items` at recursion depth `depth` (1 = the outermost) of loop run
 * `serial`: jinja2's LoopContext fields as dict entries, loop.cycle(...) as a method bound to index0 and
 * loop.changed(...) bound to the run (*loop_out: a new reference). */
static cmf_status set_loop_var(jframe *fr, jv items, size_t i, int depth, int64_t serial, jv *loop_out) {
    size_t len = items.u.l->n;
    jv loop = jv_dict_new();
    if (jv_is_oom(loop)) return NOMEM();
    int bad = 0;
    bad |= jv_dict_set(loop, "index", 5, jv_int((int64_t)i + 1));
    bad |= jv_dict_set(loop, "index0", 6, jv_int((int64_t)i));
    bad |= jv_dict_set(loop, "revindex", 8, jv_int((int64_t)(len - i)));
    bad |= jv_dict_set(loop, "revindex0", 9, jv_int((int64_t)(len - i - 1)));
    bad |= jv_dict_set(loop, "first", 5, jv_bool(i == 0));
    bad |= jv_dict_set(loop, "last", 4, jv_bool(i + 1 == len));
    bad |= jv_dict_set(loop, "length", 6, jv_int((int64_t)len));
    bad |= jv_dict_set(loop, "depth", 5, jv_int(depth));
    bad |= jv_dict_set(loop, "depth0", 6, jv_int(depth - 1));
    if (i > 0) bad |= jv_dict_set(loop, "previtem", 8, jv_retain(items.u.l->v[i - 1]));
    if (i + 1 < len) bad |= jv_dict_set(loop, "nextitem", 8, jv_retain(items.u.l->v[i + 1]));
    /* bound to the index and the run's number, not the loop: a loop holding itself would never be freed */
    bad |= set_method(loop, "cycle", jv_int((int64_t)i), JINJA_LOOP_CYCLE);
    bad |= set_method(loop, "changed", jv_int(serial), JINJA_LOOP_CHANGED);
    if (bad) { jv_release(loop); return NOMEM(); }
    *loop_out = loop;
    return jinja_assign(fr, "loop", jv_retain(loop));
}

/* The for loop `n` over value `src` at recursion depth `depth` (the statement itself: 1; loop(...) in a recursive
 * loop: one more than the caller's), its body run in frames under `f`. */
static cmf_status exec_for_over(jctx *c, jframe *f, const jnode *n, jv src, int depth) {
    jv all, items = jv_undef(NULL);
    TRY(iter_items(c, n->a, src, &all));
    cmf_status st = CMF_OK;
    if (n->b) { /* `for x in y if cond`: filter first, so loop.length counts what remains */
        items = jv_list_new(0);
        if (jv_is_oom(items)) st = NOMEM();
        for (size_t i = 0; !st && i < all.u.l->n; i++) {
            if (++c->iterations > c->lim.max_iterations) { st = jinja_limit_err(n, "loop iterations", c->lim.max_iterations); break; }
            jframe tf = {.vars = jv_dict_new(), .parent = f};
            if (jv_is_oom(tf.vars)) { st = NOMEM(); break; }
            jv cv;
            if (!(st = bind_targets(c, &tf, n, all.u.l->v[i])) && !(st = jinja_eval(c, &tf, n->b, &cv))) {
                if (jv_truthy(cv) && jv_list_push(items, jv_retain(all.u.l->v[i]))) st = NOMEM();
                jv_release(cv);
            }
            jv_release(tf.vars);
        }
        jv_release(all);
        if (st) { jv_release(items); return st; }
    } else {
        items = all;
    }
    jrloop rec = {.n = n, .f = f, .depth = depth, .serial = ++c->loop_serial, .changed_last = jv_undef(NULL),
                  .up = c->rloops};
    c->rloops = &rec;
    for (size_t i = 0; !st && i < items.u.l->n; i++) {
        if (++c->iterations > c->lim.max_iterations) { st = jinja_limit_err(n, "loop iterations", c->lim.max_iterations); break; }
        jframe fr = {.vars = jv_dict_new(), .parent = f};
        if (jv_is_oom(fr.vars)) { st = NOMEM(); break; }
        jv loop = jv_undef(NULL);
        if (!(st = bind_targets(c, &fr, n, items.u.l->v[i])) && !(st = set_loop_var(&fr, items, i, depth, rec.serial, &loop))) {
            rec.cur = loop.u.d;
            st = jinja_exec_body(c, &fr, n->l1, n->n1);
        }
        rec.cur = NULL;
        jv_release(loop);
        jv_release(fr.vars);
        if (c->flow == FLOW_CONTINUE) c->flow = FLOW_NONE;
        if (c->flow == FLOW_BREAK) { c->flow = FLOW_NONE; break; }
    }
    c->rloops = rec.up;
    jv_release(rec.changed_last);
    if (!st && items.u.l->n == 0 && n->n2) st = jinja_exec_body(c, f, n->l2, n->n2);
    jv_release(items);
    return st;
}

static cmf_status exec_for(jctx *c, jframe *f, const jnode *n) {
    jv src;
    TRY(jinja_eval(c, f, n->a, &src));
    cmf_status st = exec_for_over(c, f, n, src, 1);
    jv_release(src);
    return st;
}

cmf_status jinja_call_loop(jctx *c, const jnode *at, jv loop, const jargs *a, jv *out) {
    const jrloop *r = c->rloops;
    while (r && (loop.k != JV_DICT || r->cur != loop.u.d)) r = r->up;
    if (!r) return jinja_rt_err(at, "'%s' object is not callable", jv_kind_name(loop));
    if (!r->n->recursive) /* (jinja2's TypeError) */
        return jinja_rt_err(at, "Tried to call non recursive loop. Maybe you forgot the 'recursive' modifier.");
    if (a->npos != 1 || a->nkw) return jinja_rt_err(at, "loop() takes exactly one argument (the items)");
    if (c->depth >= c->lim.max_depth) return jinja_limit_err(at, "macro call depth", (size_t)c->lim.max_depth);
    jbuf buf = {.limit = c->lim.max_output}, *saved = c->out;
    c->out = &buf;
    c->depth++;
    cmf_status st = exec_for_over(c, r->f, r->n, a->pos[0], r->depth + 1);
    c->depth--;
    c->out = saved;
    c->flow = FLOW_NONE;
    if (!st) st = jb_ret_str(out, buf.p, buf.n);
    jbuf_free(&buf);
    return st;
}

cmf_status jinja_loop_changed(jctx *c, const jnode *at, int64_t serial, const jargs *a, jv *out) {
    jrloop *r = c->rloops;
    while (r && r->serial != serial) r = r->up;
    if (!r) return jinja_rt_err(at, "loop.changed() called after its loop ended");
    if (a->nkw) return jinja_rt_err(at, "changed() got an unexpected keyword argument '%s'", a->kwn[0]);
    jv vals = jv_list_new(a->npos);
    if (jv_is_oom(vals)) return NOMEM();
    vals.u.l->tuple = 1;
    for (size_t i = 0; i < a->npos; i++) jv_list_push(vals, jv_retain(a->pos[i])); /* (capacity reserved) */
    int eq = 0;
    if (r->changed_last.k != JV_UNDEF) {
        cmf_status st = jinja_equal(c, at, r->changed_last, vals, &eq);
        if (st) { jv_release(vals); return st; }
    }
    if (eq) { jv_release(vals); *out = jv_bool(0); return CMF_OK; }
    jv_release(r->changed_last);
    r->changed_last = vals;
    *out = jv_bool(1);
    return CMF_OK;
}

static cmf_status exec_set(jctx *c, jframe *f, const jnode *n) {
    jv v;
    TRY(jinja_eval(c, f, n->a, &v));
    cmf_status st;
    if (n->name) st = set_ns_attr(c, f, n, n->names[0], n->name, v); /* set ns.attr = v */
    else st = bind_targets(c, f, n, v);
    jv_release(v);
    return st;
}

/* {% with t1 = e1, t2 = e2 %}body{% endwith %} as jinja2's CodeGenerator.visit_With: a new scope whose targets are
 * bound in order, each value evaluated in the enclosing scope (so `b = a + 1` reads the outer a, not the new one);
 * the body runs in the new scope, so its {% set %} stays inside. */
static cmf_status exec_with(jctx *c, jframe *f, const jnode *n) {
    jframe wf = {.vars = jv_dict_new(), .parent = f};
    if (jv_is_oom(wf.vars)) return NOMEM();
    cmf_status st = CMF_OK;
    for (size_t i = 0; !st && i < n->n2; i++) {
        jv v;
        if ((st = jinja_eval(c, f, n->l2[i]->a, &v))) break;
        st = bind_targets(c, &wf, n->l2[i], v);
        jv_release(v);
    }
    if (!st) st = jinja_exec_body(c, &wf, n->l1, n->n1);
    jv_release(wf.vars);
    return st;
}

/* Renders a body into a new string value (set blocks, filter blocks). */
static cmf_status capture(jctx *c, jframe *f, const jnode *n, jv *out) {
    jbuf buf = {.limit = c->lim.max_output}, *saved = c->out;
    c->out = &buf;
    cmf_status st = jinja_exec_body(c, f, n->l1, n->n1);
    c->out = saved;
    if (!st) {
        *out = jv_strn(buf.p ? buf.p : "", buf.n);
        if (jv_is_oom(*out)) st = NOMEM();
    }
    jbuf_free(&buf);
    return st;
}

static cmf_status emit(jctx *c, const jnode *at, const char *s, size_t n) {
    /* text written is work too: a macro or set block that captures 16 MB, called a million times, copied 16 TB */
    TRY(jinja_charge_work(c, at, n / JINJA_WORK_BYTES));
    jbuf_put(c->out, s, n);
    if (c->out->over) return jinja_limit_err(at, "output bytes", c->lim.max_output);
    if (c->out->oom) return NOMEM();
    return CMF_OK;
}

/* Emits str(v) (jv_to_str; v borrowed), built apart first so that a value whose text passes the output limit or
 * nests too deeply fails ("output bytes" / nesting) before any of it is written. */
static cmf_status emit_str_of(jctx *c, const jnode *at, jv v) {
    jbuf tmp = {.limit = c->lim.max_output};
    jv_to_str(&tmp, v);
    cmf_status st = jinja_buf_status(c, at, &tmp, "output bytes");
    if (!st) st = emit(c, at, tmp.p, tmp.n);
    jbuf_free(&tmp);
    return st;
}

static cmf_status exec_stmt(jctx *c, jframe *f, const jnode *n) {
    jv v;
    cmf_status st = CMF_OK;
    switch (n->type) {
    case N_TEXT: return emit(c, n, n->name, (size_t)n->op);
    case N_OUTPUT:
        TRY(jinja_eval(c, f, n->a, &v));
        st = v.k == JV_STR ? emit(c, n, v.u.s->s, v.u.s->len) : emit_str_of(c, n, v);
        jv_release(v);
        return st;
    case N_IF:
        TRY(jinja_eval(c, f, n->a, &v));
        int t = jv_truthy(v);
        jv_release(v);
        return t ? jinja_exec_body(c, f, n->l1, n->n1) : jinja_exec_body(c, f, n->l2, n->n2);
    case N_FOR: return exec_for(c, f, n);
    case N_SET: return exec_set(c, f, n);
    case N_SETBLOCK:
        TRY(capture(c, f, n, &v));
        if (n->name) { /* {% set ns.attr %}...{% endset %} */
            cmf_status st = set_ns_attr(c, f, n, n->names[0], n->name, v);
            jv_release(v);
            return st;
        }
        return jinja_assign(f, n->names[0], v);
    case N_MACRO: {
        jv_macro *m = malloc(sizeof(*m));
        if (!m) return NOMEM();
        m->rc = 1;
        m->def = n;
        m->caller = jv_undef(NULL);
        jv mv = {.k = JV_MACRO};
        mv.u.m = m;
        return jinja_assign(f, n->name, mv);
    }
    case N_CALLBLOCK: {
        jv_macro *m = malloc(sizeof(*m));
        if (!m) return NOMEM();
        m->rc = 1;
        m->def = n; /* caller(): params in names/l2, body in l1 */
        m->caller = jv_undef(NULL);
        jv_release(c->pending_caller);
        c->pending_caller.k = JV_MACRO;
        c->pending_caller.u.m = m;
        st = jinja_eval(c, f, n->a, &v);
        jv_release(c->pending_caller);
        c->pending_caller = jv_undef(NULL);
        if (st) return st;
        st = v.k == JV_STR ? emit(c, n, v.u.s->s, v.u.s->len) : CMF_OK;
        jv_release(v);
        return st;
    }
    case N_FILTERBLOCK: {
        jv body, saved = c->filter_input;
        TRY(capture(c, f, n, &body));
        c->filter_input = body;
        st = jinja_eval(c, f, n->a, &v);
        c->filter_input = saved;
        jv_release(body);
        if (st) return st;
        st = emit_str_of(c, n, v);
        jv_release(v);
        return st;
    }
    case N_WITH: return exec_with(c, f, n);
    case N_BREAK: c->flow = FLOW_BREAK; return CMF_OK;
    case N_CONTINUE: c->flow = FLOW_CONTINUE; return CMF_OK;
    case N_BODY: return jinja_exec_body(c, f, n->l1, n->n1);
    default: return jinja_rt_err(n, "not a statement");
    }
}

cmf_status jinja_exec_body(jctx *c, jframe *f, jnode *const *body, size_t n) {
    for (size_t i = 0; i < n; i++) {
        TRY(exec_stmt(c, f, body[i]));
        if (c->flow != FLOW_NONE) return CMF_OK;
    }
    return CMF_OK;
}

/* ---- public entry points ---- */

cmf_template_limits cmf_template_default_limits(void) {
    cmf_template_limits l = {.max_output = 16u << 20, .max_iterations = 1000000, .max_depth = 64};
    return l;
}

cmf_status cmf_template_parse(const char *src, size_t len, cmf_template **out) {
    if (!src || !out) return cmf_err(CMF_E_ARG, "cmf_template_parse: NULL argument");
    *out = NULL;
    if (len > CMF_TEMPLATE_MAX_SOURCE)
        return cmf_err(CMF_E_FORMAT, "template: too long: %zu bytes (limit %d)", len, CMF_TEMPLATE_MAX_SOURCE);
    /* Python's jinja2 gets the template as str: bytes that are not UTF-8 never reach it (review: they went into the
     * prompt) */
    for (size_t i = 0; i < len;) {
        utf8proc_int32_t cp;
        utf8proc_ssize_t k = utf8proc_iterate((const utf8proc_uint8_t *)src + i, (utf8proc_ssize_t)(len - i), &cp);
        if (k <= 0) return cmf_err(CMF_E_FORMAT, "template: not valid UTF-8 at byte offset %zu", i);
        i += (size_t)k;
    }
    cmf_template *t = calloc(1, sizeof(*t));
    if (!t) return NOMEM();
    jtok *toks;
    size_t ntoks;
    cmf_status st = jinja_lex(&t->arena, src, len, &toks, &ntoks);
    if (!st) st = jinja_parse(&t->arena, toks, ntoks, &t->root);
    if (st) { cmf_template_free(t); return st; }
    *out = t;
    return CMF_OK;
}

void cmf_template_free(cmf_template *t) {
    if (!t) return;
    jarena_free(&t->arena);
    free(t);
}

/* Every string (and key) of the context is UTF-8, else CMF_E_FORMAT naming its path and the byte offset: Python's
 * json decoding refuses such text before transformers renders anything. `path` holds the path so far (len bytes). */
static cmf_status check_context_utf8(const cJSON *j, char *path, size_t len, size_t cap) {
    int idx = 0;
    for (const cJSON *e = j->child; e; e = e->next) {
        size_t n = len;
        if (cJSON_IsObject(j)) {
            const char *k = e->string ? e->string : "";
            size_t bad = utf8_invalid_at(k, strlen(k));
            if (bad < strlen(k))
                return cmf_err(CMF_E_FORMAT, "template context: a key of %s is not valid UTF-8 (byte offset %zu)",
                               len ? path : "the context", bad);
            n += (size_t)snprintf(path + len, cap - len, len ? ".%.40s" : "%.40s", k);
        } else {
            n += (size_t)snprintf(path + len, cap - len, "[%d]", idx);
        }
        if (n >= cap) n = cap - 1;
        if (cJSON_IsString(e) && e->valuestring) {
            size_t sl = strlen(e->valuestring), bad = utf8_invalid_at(e->valuestring, sl);
            if (bad < sl)
                return cmf_err(CMF_E_FORMAT, "template context: %s is not valid UTF-8 (byte offset %zu)", path, bad);
        }
        if (e->child) TRY(check_context_utf8(e, path, n, cap));
        path[len] = 0;
        idx++;
    }
    return CMF_OK;
}

cmf_status cmf_template_render(const cmf_template *t, const cJSON *ctx, const cmf_template_limits *lim, char **out,
                               size_t *out_len) {
    if (!t || !out) return cmf_err(CMF_E_ARG, "cmf_template_render: NULL argument");
    *out = NULL;
    if (ctx && !cJSON_IsObject(ctx)) return cmf_err(CMF_E_ARG, "cmf_template_render: context must be a JSON object");
    char path[512] = "";
    if (ctx) TRY(check_context_utf8(ctx, path, 0, sizeof path));
    jctx c = {.lim = lim ? *lim : cmf_template_default_limits(), .filter_input = jv_undef(NULL),
              .pending_caller = jv_undef(NULL), .kept = jv_none()};
    c.steps = JINJA_WALK_STEPS(c.lim);
    jbuf buf = {.limit = c.lim.max_output};
    jframe root = {.vars = ctx ? jv_from_cjson(ctx) : jv_dict_new()};
    if (jv_is_oom(root.vars)) return NOMEM();
    c.out = &buf;
    c.root = &root;
    cmf_status st = jinja_exec_body(&c, &root, t->root->l1, t->root->n1);
    jv_release(root.vars);
    jv_release(c.pending_caller);
    jv_release(c.kept);
    size_t bad = st ? 0 : utf8_invalid_at(buf.p ? buf.p : "", buf.n);
    if (!st && bad < buf.n) /* only string escapes can make such text now (a lone surrogate: Python renders it and
                             * then cannot encode it) */
        st = cmf_err(CMF_E_FORMAT, "template: the rendered text is not valid UTF-8 at byte offset %zu (a lone "
                     "surrogate such as '\\ud800' from a string escape cannot be encoded)", bad);
    if (st) { jbuf_free(&buf); return st; }
    if (!buf.p) { buf.p = malloc(1); if (!buf.p) return NOMEM(); buf.p[0] = 0; }
    *out = buf.p;
    if (out_len) *out_len = buf.n;
    return CMF_OK;
}

cmf_status cmf_template_apply(const char *src, size_t len, const cJSON *ctx, char **out) {
    cmf_template *t;
    TRY(cmf_template_parse(src, len, &t));
    cmf_status st = cmf_template_render(t, ctx, NULL, out, NULL);
    cmf_template_free(t);
    return st;
}

/* ---- content-format detection (for the chat API) ------------------------------------------------------------ */

/* `x.content` or `x['content']`, looking through filters (`message.content | list`). */
static int is_content_access(const jnode *n) {
    while (n && n->type == N_FILTER) n = n->a;
    if (!n) return 0;
    if (n->type == N_GETATTR) return n->name && !strcmp(n->name, "content");
    if (n->type == N_GETITEM && n->b && n->b->type == N_CONST && n->b->cval.k == JV_STR)
        return !strcmp(n->b->cval.u.s->s, "content");
    return 0;
}

typedef struct content_scan {
    const char *names[32]; /* variables assigned from a content access: `set content = message.content` */
    size_t n;
    int found;
} content_scan;

/* pass 0 collects names, pass 1 looks for loops over a content access or over one of those names. */
static void scan_node(const jnode *n, content_scan *s, int pass) {
    if (!n || s->found) return;
    if (pass == 0 && n->type == N_SET && n->op == 1 && !n->name && n->names && is_content_access(n->a) &&
        s->n < sizeof s->names / sizeof s->names[0])
        s->names[s->n++] = n->names[0];
    if (pass == 1 && n->type == N_FOR) {
        const jnode *it = n->a;
        while (it && it->type == N_FILTER) it = it->a;
        if (is_content_access(it)) s->found = 1;
        for (size_t i = 0; it && it->type == N_NAME && i < s->n; i++)
            if (!strcmp(it->name, s->names[i])) s->found = 1;
    }
    const jnode *kids[4] = {n->a, n->b, n->c, n->d};
    for (int i = 0; i < 4; i++) scan_node(kids[i], s, pass);
    for (size_t i = 0; i < n->n1; i++) scan_node(n->l1[i], s, pass);
    for (size_t i = 0; i < n->n2; i++) scan_node(n->l2[i], s, pass);
}

int cmf_template_loops_over_content(const cmf_template *t) {
    if (!t || !t->root) return 0;
    content_scan s = {.n = 0};
    scan_node(t->root, &s, 0);
    scan_node(t->root, &s, 1);
    return s.found;
}

static int name_accesses(const jnode *n) {
    if (!n) return 0;
    int r = 0;
    if (n->type == N_NAME && n->name)
        r = !strcmp(n->name, "varargs") ? JN_USES_VARARGS : !strcmp(n->name, "kwargs") ? JN_USES_KWARGS
          : !strcmp(n->name, "caller") ? JN_USES_CALLER : 0;
    r |= name_accesses(n->a) | name_accesses(n->b) | name_accesses(n->c) | name_accesses(n->d);
    for (size_t i = 0; i < n->n1; i++) r |= name_accesses(n->l1[i]);
    for (size_t i = 0; i < n->n2; i++) r |= name_accesses(n->l2[i]);
    return r;
}

int jinja_body_accesses(const jnode *n) {
    int r = 0;
    for (size_t i = 0; i < n->n1; i++) r |= name_accesses(n->l1[i]);
    for (size_t i = 0; i < n->n2 && n->names; i++) { /* a parameter of that name is an ordinary one */
        if (!strcmp(n->names[i], "varargs")) r &= ~JN_USES_VARARGS;
        if (!strcmp(n->names[i], "kwargs")) r &= ~JN_USES_KWARGS;
    }
    return r;
}
