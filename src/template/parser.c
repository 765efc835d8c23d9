/* parser.c — recursive-descent parser from Jinja tokens to the tree of ast.h.
 *
 * Grammar and operator precedence follow jinja2 3.1 parser.py: conditional expression < or < and < not <
 * comparison (==, !=, <, >, <=, >=, in, not in) < ~ < + - < * / // % < ** < unary -/+ < postfix (.attr, [item],
 * [a:b:c], call) < filters (|f) and tests (is [not] t). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "template/ast.h"
#include "util/error.h"

#define MAX_NEST 200 /* expression/statement nesting; a hostile template must not overflow the C stack */
#define NEST_MSG "blocks and expressions nested too deeply (more than 200 levels: each block, each bracket and each " \
                 "operator inside an expression counts)"
/* Nodes on one path of an expression. A chain of left-associative operators (`1 + 1 + ...`, `a.b.c...`, `x|f|g...`)
 * nests without parentheses, one tree level per operator, and the evaluator recurses per level: 30,000 of them
 * overflowed an 8 MB stack (fresh-user review). 4,000 levels take well under 2 MB; real chat templates use a few
 * dozen nodes per tag. The count restarts at each item of a list, tuple or dict literal and at each call argument
 * (from the nodes made before the container in its tag): the evaluator takes the items one after another, so a
 * 20,000-entry dict literal is fine while a chain inside one item still counts everything on its path. The whole
 * template stays within CMF_TEMPLATE_MAX_NODES. */
#define MAX_EXPR_NODES 4000 /* (the number is also in NOMEM()'s message) */

typedef struct parser {
    jarena *a;
    const jtok *t;
    size_t n, pos;
    int depth;
    int expr_nodes; /* nodes made since the current print tag or statement began (MAX_EXPR_NODES) */
    int too_long;   /* mk refused a node for MAX_EXPR_NODES: NOMEM() reports that instead */
    size_t nodes;   /* nodes of the whole template (CMF_TEMPLATE_MAX_NODES) */
} parser;

typedef struct nvec {
    jnode **v;
    size_t n, cap;
} nvec;

static int nvec_push(nvec *v, jnode *x) {
    if (v->n == v->cap) {
        size_t nc = v->cap ? v->cap * 2 : 8;
        jnode **p = realloc(v->v, nc * sizeof(*p));
        if (!p) return -1;
        v->v = p;
        v->cap = nc;
    }
    v->v[v->n++] = x;
    return 0;
}

/* Moves a vector into the arena (frees the heap copy). Returns -1 on allocation failure. */
static int nvec_done(parser *P, nvec *v, jnode ***out, size_t *n) {
    *n = v->n;
    *out = NULL;
    if (v->n) {
        *out = jarena_alloc(P->a, v->n * sizeof(jnode *));
        if (!*out) { free(v->v); return -1; }
        memcpy(*out, v->v, v->n * sizeof(jnode *));
    }
    free(v->v);
    memset(v, 0, sizeof(*v));
    return 0;
}

static const jtok *cur(const parser *P) { return &P->t[P->pos]; }

static const char *tok_desc(const jtok *t) {
    switch (t->type) {
    case T_TEXT: return "template data";
    case T_VBEGIN: return "begin of print statement";
    case T_VEND: return "end of print statement";
    case T_BBEGIN: return "begin of statement block";
    case T_BEND: return "end of statement block";
    case T_EOF: return "end of template";
    default: return t->s ? t->s : "?";
    }
}

static cmf_status perr(const parser *P, const jtok *t, const char *fmt, const char *arg) {
    char msg[256];
    snprintf(msg, sizeof(msg), fmt, arg);
    (void)P;
    return cmf_err(CMF_E_FORMAT, "template:%d:%d: %s", t->line, t->col, msg);
}

static int is_op(const jtok *t, const char *op) { return t->type == T_OP && strcmp(t->s, op) == 0; }
static int is_name(const jtok *t, const char *nm) { return t->type == T_NAME && strcmp(t->s, nm) == 0; }

static cmf_status expect_op(parser *P, const char *op) {
    if (!is_op(cur(P), op)) {
        char m[64];
        snprintf(m, sizeof(m), "expected '%s', got '%%s'", op);
        return perr(P, cur(P), m, tok_desc(cur(P)));
    }
    P->pos++;
    return CMF_OK;
}

static cmf_status expect_end(parser *P) {
    if (cur(P)->type != T_BEND) return perr(P, cur(P), "expected end of statement block, got '%s'", tok_desc(cur(P)));
    P->pos++;
    return CMF_OK;
}

static jnode *mk(parser *P, jnode_type type, const jtok *at) {
    if (++P->expr_nodes > MAX_EXPR_NODES) { P->too_long = 1; return NULL; }
    if (++P->nodes > CMF_TEMPLATE_MAX_NODES) { P->too_long = 2; return NULL; }
    jnode *n = jarena_alloc(P->a, sizeof(jnode));
    if (n) {
        n->type = type;
        n->line = at->line;
        n->col = at->col;
    }
    return n;
}

#define NOMEM()                                                                                                   \
    (P->too_long == 1 ? perr(P, cur(P), "%s", "expression too long (more than 4000 operators and operands in one chain; items of list, tuple and dict literals and call arguments count apart)") \
     : P->too_long ? perr(P, cur(P), "%s", "template too long (more than " JINJA_STR(CMF_TEMPLATE_MAX_NODES) " syntax nodes)") \
                 : cmf_err(CMF_E_NOMEM, "template parser"))
#define TRY(x) do { cmf_status st_ = (x); if (st_) return st_; } while (0)

static cmf_status parse_expr(parser *P, jnode **out);
static cmf_status parse_or(parser *P, jnode **out);

/* One item of a container literal or one call argument: its nodes count from `base` (see MAX_EXPR_NODES). */
static cmf_status parse_item(parser *P, int base, jnode **out) {
    P->expr_nodes = base;
    cmf_status st = parse_expr(P, out);
    if (!st) P->expr_nodes = base;
    return st;
}
static cmf_status parse_unary(parser *P, jnode **out, int with_filter);

/* ---- expressions ---- */

/* Call arguments after '(' up to ')': positional into l1, keyword into l2/names, `*expr` into c and `**expr` into d
 * (jinja2 parse_call_args: positional arguments first, then keywords and one *args, then one **kwargs; another order
 * is "invalid syntax for function call expression"). */
static cmf_status parse_args(parser *P, jnode *call) {
    nvec pos = {0}, kw = {0};
    const char **names = NULL;
    size_t nnames = 0;
    cmf_status st = CMF_OK;
    int base = P->expr_nodes;
    size_t nstar = 0;
    while (!is_op(cur(P), ")")) {
        if (pos.n + kw.n + nstar) { if ((st = expect_op(P, ","))) goto fail; if (is_op(cur(P), ")")) break; }
        jnode *e;
        const jtok *at = cur(P);
        if (is_op(at, "*") || is_op(at, "**")) {
            int two = is_op(at, "**");
            if (call->d || (!two && call->c)) { st = perr(P, at, "%s", "invalid syntax for function call expression"); goto fail; }
            P->pos++;
            if ((st = parse_item(P, base, &e))) goto fail;
            if (two) call->d = e; else call->c = e;
            nstar++;
        } else if (cur(P)->type == T_NAME && is_op(&P->t[P->pos + 1], "=")) {
            const char *k = cur(P)->s;
            if (call->d) { st = perr(P, at, "%s", "invalid syntax for function call expression"); goto fail; }
            P->pos += 2;
            if ((st = parse_item(P, base, &e))) goto fail;
            const char **nn = realloc(names, (nnames + 1) * sizeof(*nn));
            if (!nn || nvec_push(&kw, e)) { if (nn) names = nn; st = NOMEM(); goto fail; }
            names = nn;
            names[nnames++] = k;
        } else {
            if (call->c || call->d || kw.n) { st = perr(P, at, "%s", "invalid syntax for function call expression"); goto fail; }
            if ((st = parse_item(P, base, &e))) goto fail;
            if (nvec_push(&pos, e)) { st = NOMEM(); goto fail; }
        }
    }
    P->pos++;
    if (nvec_done(P, &pos, &call->l1, &call->n1) || nvec_done(P, &kw, &call->l2, &call->n2)) { st = NOMEM(); goto fail; }
    if (nnames) {
        call->names = jarena_alloc(P->a, nnames * sizeof(char *));
        if (!call->names) { st = NOMEM(); goto fail; }
        memcpy(call->names, names, nnames * sizeof(char *));
    }
    free(names);
    return CMF_OK;
fail:
    free(pos.v);
    free(kw.v);
    free(names);
    return st;
}

static cmf_status parse_primary(parser *P, jnode **out) {
    const jtok *t = cur(P);
    jnode *n;
    if (t->type == T_NAME) {
        P->pos++;
        const char *s = t->s;
        if (!strcmp(s, "true") || !strcmp(s, "True") || !strcmp(s, "false") || !strcmp(s, "False")) {
            if (!(n = mk(P, N_CONST, t))) return NOMEM();
            n->cval = jv_bool(s[0] == 't' || s[0] == 'T');
        } else if (!strcmp(s, "none") || !strcmp(s, "None")) {
            if (!(n = mk(P, N_CONST, t))) return NOMEM();
            n->cval = jv_none();
        } else {
            if (!(n = mk(P, N_NAME, t))) return NOMEM();
            n->name = s;
        }
    } else if (t->type == T_STR) {
        /* adjacent string literals concatenate */
        size_t len = 0, j = P->pos;
        while (P->t[j].type == T_STR) len += P->t[j++].len;
        char *buf = jarena_alloc(P->a, len + 1);
        if (!buf || !(n = mk(P, N_CONST, t))) return NOMEM();
        size_t o = 0;
        while (cur(P)->type == T_STR) { memcpy(buf + o, cur(P)->s, cur(P)->len); o += cur(P)->len; P->pos++; }
        n->cval = jv_strn(buf, len);
        if (jv_is_oom(n->cval) || jarena_keep(P->a, n->cval)) return NOMEM();
    } else if (t->type == T_INT || t->type == T_FLOAT) {
        P->pos++;
        if (!(n = mk(P, N_CONST, t))) return NOMEM();
        n->cval = t->type == T_INT ? jv_int(t->ival) : jv_float(t->fval);
    } else if (is_op(t, "(")) {
        P->pos++;
        if (is_op(cur(P), ")")) { /* empty tuple */
            P->pos++;
            if (!(n = mk(P, N_TUPLE, t))) return NOMEM();
        } else {
            jnode *e;
            int base = P->expr_nodes;
            TRY(parse_expr(P, &e));
            if (is_op(cur(P), ",")) {
                nvec v = {0};
                if (nvec_push(&v, e)) return NOMEM();
                while (is_op(cur(P), ",")) {
                    P->pos++;
                    if (is_op(cur(P), ")")) break;
                    cmf_status st = parse_item(P, base, &e);
                    if (st) { free(v.v); return st; }
                    if (nvec_push(&v, e)) { free(v.v); return NOMEM(); }
                }
                if (!(n = mk(P, N_TUPLE, t)) || nvec_done(P, &v, &n->l1, &n->n1)) { free(v.v); return NOMEM(); }
            } else {
                n = e;
            }
            TRY(expect_op(P, ")"));
        }
    } else if (is_op(t, "[") || is_op(t, "{")) {
        int dict = is_op(t, "{");
        const char *close = dict ? "}" : "]";
        P->pos++;
        nvec v = {0};
        cmf_status st = CMF_OK;
        int base = P->expr_nodes;
        while (!is_op(cur(P), close)) {
            jnode *e;
            if (v.n && ((st = expect_op(P, ","))) ) break;
            if (is_op(cur(P), close)) break;
            if ((st = parse_item(P, base, &e))) break;
            if (nvec_push(&v, e)) { st = NOMEM(); break; }
            if (dict) {
                if ((st = expect_op(P, ":")) || (st = parse_item(P, base, &e))) break;
                if (nvec_push(&v, e)) { st = NOMEM(); break; }
            }
        }
        if (st) { free(v.v); return st; }
        P->pos++;
        if (!(n = mk(P, dict ? N_DICT : N_LIST, t)) || nvec_done(P, &v, &n->l1, &n->n1)) { free(v.v); return NOMEM(); }
    } else {
        return perr(P, t, "unexpected '%s'", tok_desc(t));
    }
    *out = n;
    return CMF_OK;
}

static cmf_status parse_postfix(parser *P, jnode **io) {
    for (;;) {
        const jtok *t = cur(P);
        jnode *n;
        if (is_op(t, ".")) {
            P->pos++;
            const jtok *a = cur(P);
            if (a->type == T_NAME) {
                if (!(n = mk(P, N_GETATTR, t))) return NOMEM();
                n->name = a->s;
            } else if (a->type == T_INT) { /* x.0 is x[0] */
                if (!(n = mk(P, N_GETITEM, t))) return NOMEM();
                if (!(n->b = mk(P, N_CONST, a))) return NOMEM();
                n->b->cval = jv_int(a->ival);
            } else {
                return perr(P, a, "expected attribute name after '.', got '%s'", tok_desc(a));
            }
            P->pos++;
            n->a = *io;
        } else if (is_op(t, "[")) {
            P->pos++;
            jnode *parts[3] = {0};
            int is_slice = 0;
            for (int k = 0; k < 3; k++) {
                if (!is_op(cur(P), ":") && !is_op(cur(P), "]")) TRY(parse_expr(P, &parts[k]));
                if (k < 2 && is_op(cur(P), ":")) { is_slice = 1; P->pos++; continue; }
                break;
            }
            TRY(expect_op(P, "]"));
            if (is_slice) {
                if (!(n = mk(P, N_SLICE, t))) return NOMEM();
                n->b = parts[0]; n->c = parts[1]; n->d = parts[2];
            } else {
                if (!parts[0]) return perr(P, t, "%s", "empty subscript");
                if (!(n = mk(P, N_GETITEM, t))) return NOMEM();
                n->b = parts[0];
            }
            n->a = *io;
        } else if (is_op(t, "(")) {
            P->pos++;
            if (!(n = mk(P, N_CALL, t))) return NOMEM();
            n->a = *io;
            TRY(parse_args(P, n));
        } else {
            return CMF_OK;
        }
        *io = n;
    }
}

/* `|name(args)` chains and `is [not] test [arg]` after a unary operand. */
static cmf_status parse_filters(parser *P, jnode **io) {
    for (;;) {
        const jtok *t = cur(P);
        if (is_op(t, "|")) {
            P->pos++;
            if (cur(P)->type != T_NAME) return perr(P, cur(P), "expected filter name, got '%s'", tok_desc(cur(P)));
            jnode *f = mk(P, N_FILTER, cur(P));
            if (!f) return NOMEM();
            f->name = cur(P)->s;
            P->pos++;
            while (is_op(cur(P), ".") && P->t[P->pos + 1].type == T_NAME) P->pos += 2; /* dotted filter names */
            if (is_op(cur(P), "(")) { P->pos++; TRY(parse_args(P, f)); }
            f->a = *io;
            *io = f;
        } else if (is_name(t, "is")) {
            P->pos++;
            jnode *f = mk(P, N_TEST, t);
            if (!f) return NOMEM();
            if (is_name(cur(P), "not")) { f->op = 1; P->pos++; }
            const jtok *nm = cur(P);
            if (nm->type != T_NAME) return perr(P, nm, "expected test name, got '%s'", tok_desc(nm));
            f->name = nm->s;
            P->pos++;
            if (!strcmp(f->name, "none") || !strcmp(f->name, "true") || !strcmp(f->name, "false")) {
                /* names of constants are tests here */
            }
            if (is_op(cur(P), "(")) {
                P->pos++;
                TRY(parse_args(P, f));
            } else {
                const jtok *c = cur(P);
                int arg = c->type == T_STR || c->type == T_INT || c->type == T_FLOAT || is_op(c, "[") || is_op(c, "{") ||
                          (c->type == T_NAME && strcmp(c->s, "else") && strcmp(c->s, "or") && strcmp(c->s, "and") &&
                           strcmp(c->s, "if") && strcmp(c->s, "is") && strcmp(c->s, "in") && strcmp(c->s, "not"));
                if (arg) {
                    jnode *e;
                    TRY(parse_unary(P, &e, 0));
                    TRY(parse_postfix(P, &e));
                    f->l1 = jarena_alloc(P->a, sizeof(jnode *));
                    if (!f->l1) return NOMEM();
                    f->l1[0] = e;
                    f->n1 = 1;
                }
            }
            f->a = *io;
            *io = f;
        } else {
            return CMF_OK;
        }
    }
}

static cmf_status parse_unary(parser *P, jnode **out, int with_filter) {
    const jtok *t = cur(P);
    if (++P->depth > MAX_NEST) return perr(P, t, "%s", NEST_MSG);
    jnode *n;
    if (is_op(t, "-") || is_op(t, "+")) {
        P->pos++;
        if (!(n = mk(P, is_op(t, "-") ? N_NEG : N_POS, t))) return NOMEM();
        TRY(parse_unary(P, &n->a, 0));
    } else {
        TRY(parse_primary(P, &n));
    }
    TRY(parse_postfix(P, &n));
    if (with_filter) TRY(parse_filters(P, &n));
    P->depth--;
    *out = n;
    return CMF_OK;
}

static cmf_status binop(parser *P, jnode **io, int op, const jtok *t, jnode *rhs) {
    jnode *n = mk(P, N_BINOP, t);
    if (!n) return NOMEM();
    n->op = op;
    n->a = *io;
    n->b = rhs;
    *io = n;
    return CMF_OK;
}

static cmf_status parse_pow(parser *P, jnode **out) {
    TRY(parse_unary(P, out, 1));
    while (is_op(cur(P), "**")) {
        const jtok *t = cur(P);
        P->pos++;
        jnode *r;
        TRY(parse_unary(P, &r, 1));
        TRY(binop(P, out, 'P', t, r));
    }
    return CMF_OK;
}

static cmf_status parse_mul(parser *P, jnode **out) {
    TRY(parse_pow(P, out));
    for (;;) {
        const jtok *t = cur(P);
        int op = is_op(t, "*") ? '*' : is_op(t, "/") ? '/' : is_op(t, "//") ? 'F' : is_op(t, "%") ? '%' : 0;
        if (!op) return CMF_OK;
        P->pos++;
        jnode *r;
        TRY(parse_pow(P, &r));
        TRY(binop(P, out, op, t, r));
    }
}

/* jinja2's precedence (parser.py): compare > math1 (+ -) > concat (~) > math2 (* / // %) > pow > unary, so
 * 'a' ~ 1 + 2 is ('a' ~ 1) + 2 (a TypeError), as in jinja2. */
static cmf_status parse_concat(parser *P, jnode **out) {
    TRY(parse_mul(P, out));
    while (is_op(cur(P), "~")) {
        const jtok *t = cur(P);
        P->pos++;
        jnode *r;
        TRY(parse_mul(P, &r));
        TRY(binop(P, out, '~', t, r));
    }
    return CMF_OK;
}

static cmf_status parse_add(parser *P, jnode **out) {
    TRY(parse_concat(P, out));
    for (;;) {
        const jtok *t = cur(P);
        int op = is_op(t, "+") ? '+' : is_op(t, "-") ? '-' : 0;
        if (!op) return CMF_OK;
        P->pos++;
        jnode *r;
        TRY(parse_concat(P, &r));
        TRY(binop(P, out, op, t, r));
    }
}

static cmf_status parse_compare(parser *P, jnode **out) {
    TRY(parse_add(P, out));
    for (;;) {
        const jtok *t = cur(P);
        int op = is_op(t, "==") ? 'e' : is_op(t, "!=") ? 'n' : is_op(t, "<") ? '<' : is_op(t, ">") ? '>'
               : is_op(t, "<=") ? 'l' : is_op(t, ">=") ? 'g' : is_name(t, "in") ? 'i' : 0;
        if (!op && is_name(t, "not") && is_name(&P->t[P->pos + 1], "in")) { op = 'I'; P->pos++; }
        if (!op) return CMF_OK;
        P->pos++;
        jnode *n = mk(P, N_COMPARE, t);
        if (!n) return NOMEM();
        n->op = op;
        n->a = *out;
        TRY(parse_add(P, &n->b));
        *out = n;
    }
}

static cmf_status parse_not(parser *P, jnode **out) {
    const jtok *t = cur(P);
    if (is_name(t, "not")) {
        P->pos++;
        if (++P->depth > MAX_NEST) return perr(P, t, "%s", NEST_MSG);
        jnode *n = mk(P, N_NOT, t);
        if (!n) return NOMEM();
        TRY(parse_not(P, &n->a));
        P->depth--;
        *out = n;
        return CMF_OK;
    }
    return parse_compare(P, out);
}

static cmf_status parse_and(parser *P, jnode **out) {
    TRY(parse_not(P, out));
    while (is_name(cur(P), "and")) {
        jnode *n = mk(P, N_AND, cur(P));
        if (!n) return NOMEM();
        P->pos++;
        n->a = *out;
        TRY(parse_not(P, &n->b));
        *out = n;
    }
    return CMF_OK;
}

static cmf_status parse_or(parser *P, jnode **out) {
    TRY(parse_and(P, out));
    while (is_name(cur(P), "or")) {
        jnode *n = mk(P, N_OR, cur(P));
        if (!n) return NOMEM();
        P->pos++;
        n->a = *out;
        TRY(parse_and(P, &n->b));
        *out = n;
    }
    return CMF_OK;
}

/* expr: or ['if' or ['else' expr]] */
static cmf_status parse_expr(parser *P, jnode **out) {
    if (++P->depth > MAX_NEST) return perr(P, cur(P), "%s", NEST_MSG);
    TRY(parse_or(P, out));
    while (is_name(cur(P), "if")) {
        jnode *n = mk(P, N_CONDEXPR, cur(P));
        if (!n) return NOMEM();
        P->pos++;
        n->b = *out;
        TRY(parse_or(P, &n->a));
        if (is_name(cur(P), "else")) { P->pos++; TRY(parse_expr(P, &n->c)); }
        *out = n;
    }
    P->depth--;
    return CMF_OK;
}

/* expr [, expr ...] -> a tuple when a comma follows (set values, for iterables). */
static cmf_status parse_tuple(parser *P, jnode **out) {
    const jtok *t = cur(P);
    int base = P->expr_nodes;
    TRY(parse_expr(P, out));
    if (!is_op(cur(P), ",")) return CMF_OK;
    nvec v = {0};
    if (nvec_push(&v, *out)) return NOMEM();
    while (is_op(cur(P), ",")) {
        P->pos++;
        if (cur(P)->type == T_BEND || cur(P)->type == T_VEND) break;
        jnode *e;
        cmf_status st = parse_item(P, base, &e);
        if (st) { free(v.v); return st; }
        if (nvec_push(&v, e)) { free(v.v); return NOMEM(); }
    }
    jnode *n = mk(P, N_TUPLE, t);
    if (!n || nvec_done(P, &v, &n->l1, &n->n1)) { free(v.v); return NOMEM(); }
    *out = n;
    return CMF_OK;
}

/* ---- statements ---- */

static cmf_status parse_stmt(parser *P, jnode **out);

/* Statements until `{% <stop> ...` for one of `stops` (NULL-terminated; NULL list = until end of template). On a
 * stop the position is after the stop keyword and *stopped names it. */
static cmf_status parse_body(parser *P, const char *const *stops, jnode ***out, size_t *n, const char **stopped) {
    nvec v = {0};
    cmf_status st = CMF_OK;
    if (stopped) *stopped = NULL;
    for (;;) {
        const jtok *t = cur(P);
        jnode *x = NULL;
        if (t->type == T_EOF) {
            if (stops) {
                st = perr(P, t, "unexpected end of template, expected '%s'", stops[0]);
            }
            break;
        }
        if (t->type == T_TEXT) {
            if (!(x = mk(P, N_TEXT, t))) { st = NOMEM(); break; }
            x->name = t->s;
            x->op = (int)t->len; /* text length */
            P->pos++;
        } else if (t->type == T_VBEGIN) {
            P->pos++;
            P->expr_nodes = 0;
            if (!(x = mk(P, N_OUTPUT, t))) { st = NOMEM(); break; }
            if ((st = parse_tuple(P, &x->a))) break;
            if (cur(P)->type != T_VEND) { st = perr(P, cur(P), "expected end of print statement, got '%s'", tok_desc(cur(P))); break; }
            P->pos++;
        } else if (t->type == T_BBEGIN) {
            const jtok *nm = &P->t[P->pos + 1];
            int hit = 0;
            for (size_t k = 0; stops && stops[k] && nm->type == T_NAME; k++)
                if (!strcmp(nm->s, stops[k])) { hit = 1; *stopped = stops[k]; }
            if (hit) { P->pos += 2; break; }
            if ((st = parse_stmt(P, &x))) break;
            if (!x) continue;
        } else {
            st = perr(P, t, "unexpected '%s'", tok_desc(t));
            break;
        }
        if (nvec_push(&v, x)) { st = NOMEM(); break; }
    }
    if (st) { free(v.v); return st; }
    if (nvec_done(P, &v, out, n)) return NOMEM();
    return CMF_OK;
}

/* Assignment targets (for / set / with) as jinja2's parse_assign_target -> parse_tuple(simplified=True): names or
 * parenthesised tuples, nested to any depth (`a, (b, c)`, `((a, b), c)`, `(a,)`, `()`; a trailing comma only
 * before a ')', as jinja2; `(a)` is the name a). node->names (node->op entries) is a flat list in which a tuple is
 * "(" items... ")": a lone name is [name] (op 1), any tuple (the top level's too) "(" ... ")"; exec.c bind_targets
 * unpacks it recursively. target_seq parses items up to a ',' -less end into names[*k...]. */
#define MAX_TARGET 32
static cmf_status target_seq(parser *P, const char **nm, int *k, int in_paren, int *count, int *comma) {
    for (*count = *comma = 0;; P->pos++, *comma = 1) {
        if (*k >= MAX_TARGET - 1) return perr(P, cur(P), "%s", "too many names to unpack");
        if (in_paren && is_op(cur(P), ")") && (*comma || !*count)) return CMF_OK; /* (a,) and () */
        if (is_op(cur(P), "(")) {
            const int k0 = (*k)++;
            int c, cm;
            P->pos++;
            TRY(target_seq(P, nm, k, 1, &c, &cm));
            TRY(expect_op(P, ")"));
            if (c == 1 && !cm) { /* (a) is a, ((a, b)) is (a, b) */
                memmove(nm + k0, nm + k0 + 1, (size_t)(*k - k0 - 1) * sizeof *nm);
                (*k)--;
            } else {
                if (*k >= MAX_TARGET) return perr(P, cur(P), "%s", "too many names to unpack");
                nm[k0] = "(", nm[(*k)++] = ")";
            }
        } else if (cur(P)->type == T_NAME) {
            nm[(*k)++] = cur(P)->s;
            P->pos++;
        } else {
            return perr(P, cur(P), "expected a variable name, got '%s'", tok_desc(cur(P)));
        }
        (*count)++;
        if (!is_op(cur(P), ",")) return CMF_OK;
    }
}

static cmf_status parse_targets(parser *P, jnode *node) {
    const char *names[MAX_TARGET + 1];
    int k = 1, count, comma; /* names[0]: the top level's "(" when it is a tuple (a, b) */
    TRY(target_seq(P, names, &k, 0, &count, &comma));
    const int tuple = count > 1 || comma;
    if (tuple) names[0] = "(", names[k++] = ")";
    node->op = tuple ? k : k - 1;
    if (!(node->names = jarena_alloc(P->a, (size_t)node->op * sizeof(char *)))) return NOMEM();
    memcpy(node->names, names + !tuple, (size_t)node->op * sizeof(char *));
    return CMF_OK;
}

static cmf_status parse_if(parser *P, const jtok *t, jnode **out) {
    static const char *const stops[] = {"endif", "elif", "else", NULL};
    static const char *const stop_end[] = {"endif", NULL};
    jnode *n = mk(P, N_IF, t);
    if (!n) return NOMEM();
    if (++P->depth > MAX_NEST) return perr(P, t, "%s", NEST_MSG);
    TRY(parse_expr(P, &n->a));
    TRY(expect_end(P));
    const char *stopped;
    TRY(parse_body(P, stops, &n->l1, &n->n1, &stopped));
    if (!strcmp(stopped, "elif")) {
        n->l2 = jarena_alloc(P->a, sizeof(jnode *));
        if (!n->l2) return NOMEM();
        n->n2 = 1;
        TRY(parse_if(P, &P->t[P->pos - 1], &n->l2[0]));
    } else {
        if (!strcmp(stopped, "else")) {
            TRY(expect_end(P));
            TRY(parse_body(P, stop_end, &n->l2, &n->n2, &stopped));
        }
        TRY(expect_end(P));
    }
    P->depth--;
    *out = n;
    return CMF_OK;
}

static cmf_status parse_params(parser *P, jnode *n) {
    nvec defs = {0};
    const char *names[64];
    size_t k = 0;
    TRY(expect_op(P, "("));
    while (!is_op(cur(P), ")")) {
        if (k && expect_op(P, ",")) { free(defs.v); return perr(P, cur(P), "expected ',' or ')', got '%s'", tok_desc(cur(P))); }
        if (cur(P)->type != T_NAME || k == 64) { free(defs.v); return perr(P, cur(P), "expected a parameter name, got '%s'", tok_desc(cur(P))); }
        names[k++] = cur(P)->s;
        P->pos++;
        jnode *d = NULL;
        if (is_op(cur(P), "=")) {
            P->pos++;
            cmf_status st = parse_expr(P, &d);
            if (st) { free(defs.v); return st; }
        }
        if (nvec_push(&defs, d)) { free(defs.v); return NOMEM(); }
    }
    P->pos++;
    if (nvec_done(P, &defs, &n->l2, &n->n2)) return NOMEM();
    n->names = jarena_alloc(P->a, (k ? k : 1) * sizeof(char *));
    if (!n->names) return NOMEM();
    memcpy(n->names, names, k * sizeof(char *));
    return CMF_OK;
}

static cmf_status parse_stmt(parser *P, jnode **out) {
    const jtok *t = &P->t[P->pos + 1];
    if (t->type != T_NAME) return perr(P, t, "expected a statement name, got '%s'", tok_desc(t));
    P->pos += 2;
    const char *kw = t->s, *stopped;
    jnode *n = NULL;
    P->expr_nodes = 0;
    if (++P->depth > MAX_NEST) return perr(P, t, "%s", NEST_MSG);
    if (!strcmp(kw, "if")) {
        TRY(parse_if(P, t, &n));
    } else if (!strcmp(kw, "for")) {
        static const char *const stops[] = {"endfor", "else", NULL}, *const stop_end[] = {"endfor", NULL};
        if (!(n = mk(P, N_FOR, t))) return NOMEM();
        TRY(parse_targets(P, n));
        if (!is_name(cur(P), "in")) return perr(P, cur(P), "expected 'in', got '%s'", tok_desc(cur(P)));
        P->pos++;
        TRY(parse_or(P, &n->a));
        if (is_name(cur(P), "if")) { P->pos++; TRY(parse_expr(P, &n->b)); }
        if (is_name(cur(P), "recursive")) { n->recursive = 1; P->pos++; }
        TRY(expect_end(P));
        TRY(parse_body(P, stops, &n->l1, &n->n1, &stopped));
        if (!strcmp(stopped, "else")) { TRY(expect_end(P)); TRY(parse_body(P, stop_end, &n->l2, &n->n2, &stopped)); }
        TRY(expect_end(P));
    } else if (!strcmp(kw, "set")) {
        static const char *const stops[] = {"endset", NULL};
        if (!(n = mk(P, N_SET, t))) return NOMEM();
        TRY(parse_targets(P, n));
        if (n->op == 1 && is_op(cur(P), ".")) {
            P->pos++;
            if (cur(P)->type != T_NAME) return perr(P, cur(P), "expected attribute name, got '%s'", tok_desc(cur(P)));
            n->name = cur(P)->s;
            P->pos++;
        }
        if (cur(P)->type == T_BEND && n->op == 1 && !n->name) {
            n->type = N_SETBLOCK;
            P->pos++;
            TRY(parse_body(P, stops, &n->l1, &n->n1, &stopped));
        } else {
            TRY(expect_op(P, "="));
            TRY(parse_tuple(P, &n->a));
        }
        TRY(expect_end(P));
    } else if (!strcmp(kw, "macro")) {
        static const char *const stops[] = {"endmacro", NULL};
        if (!(n = mk(P, N_MACRO, t))) return NOMEM();
        if (cur(P)->type != T_NAME) return perr(P, cur(P), "expected macro name, got '%s'", tok_desc(cur(P)));
        n->name = cur(P)->s;
        P->pos++;
        TRY(parse_params(P, n));
        TRY(expect_end(P));
        TRY(parse_body(P, stops, &n->l1, &n->n1, &stopped));
        n->accesses = jinja_body_accesses(n);
        if (cur(P)->type == T_NAME) P->pos++; /* {% endmacro name %} */
        TRY(expect_end(P));
    } else if (!strcmp(kw, "call")) {
        static const char *const stops[] = {"endcall", NULL};
        if (!(n = mk(P, N_CALLBLOCK, t))) return NOMEM();
        if (is_op(cur(P), "(")) TRY(parse_params(P, n));
        TRY(parse_expr(P, &n->a));
        if (n->a->type != N_CALL) return perr(P, t, "%s", "expected a call after 'call'");
        TRY(expect_end(P));
        TRY(parse_body(P, stops, &n->l1, &n->n1, &stopped));
        n->accesses = jinja_body_accesses(n);
        TRY(expect_end(P));
    } else if (!strcmp(kw, "filter")) {
        static const char *const stops[] = {"endfilter", NULL};
        if (!(n = mk(P, N_FILTERBLOCK, t))) return NOMEM();
        if (cur(P)->type != T_NAME) return perr(P, cur(P), "expected filter name, got '%s'", tok_desc(cur(P)));
        jnode *f = mk(P, N_FILTER, cur(P));
        if (!f) return NOMEM();
        f->name = cur(P)->s;
        P->pos++;
        if (is_op(cur(P), "(")) { P->pos++; TRY(parse_args(P, f)); }
        TRY(parse_filters(P, &f));
        n->a = f;
        TRY(expect_end(P));
        TRY(parse_body(P, stops, &n->l1, &n->n1, &stopped));
        TRY(expect_end(P));
    } else if (!strcmp(kw, "with")) {
        /* jinja2 Parser.parse_with: (target '=' expression) separated by ',' up to the tag's end; each pair is kept
         * as an N_SET node in l2, the body in l1 */
        static const char *const stops[] = {"endwith", NULL};
        nvec sets = {0};
        if (!(n = mk(P, N_WITH, t))) return NOMEM();
        cmf_status st = CMF_OK;
        while (!st && cur(P)->type != T_BEND) {
            jnode *s = NULL;
            if (sets.n && (st = expect_op(P, ","))) break;
            if (!(s = mk(P, N_SET, cur(P)))) { st = NOMEM(); break; }
            if ((st = parse_targets(P, s)) || (st = expect_op(P, "=")) || (st = parse_expr(P, &s->a))) break;
            if (nvec_push(&sets, s)) st = NOMEM();
        }
        if (st) { free(sets.v); return st; }
        if (nvec_done(P, &sets, &n->l2, &n->n2)) return NOMEM();
        TRY(expect_end(P));
        TRY(parse_body(P, stops, &n->l1, &n->n1, &stopped));
        TRY(expect_end(P));
    } else if (!strcmp(kw, "break") || !strcmp(kw, "continue")) {
        if (!(n = mk(P, kw[0] == 'b' ? N_BREAK : N_CONTINUE, t))) return NOMEM();
        TRY(expect_end(P));
    } else if (!strcmp(kw, "generation")) {
        static const char *const stops[] = {"endgeneration", NULL};
        if (!(n = mk(P, N_BODY, t))) return NOMEM();
        TRY(expect_end(P));
        TRY(parse_body(P, stops, &n->l1, &n->n1, &stopped));
        TRY(expect_end(P));
    } else {
        return perr(P, t, "encountered unknown tag '%s'", kw);
    }
    P->depth--;
    *out = n;
    return CMF_OK;
}

cmf_status jinja_parse(jarena *a, const jtok *toks, size_t ntoks, jnode **root) {
    parser P = {.a = a, .t = toks, .n = ntoks};
    jnode *r = mk(&P, N_BODY, &toks[0]);
    if (!r) return cmf_err(CMF_E_NOMEM, "template parser");
    TRY(parse_body(&P, NULL, &r->l1, &r->n1, NULL));
    *root = r;
    return CMF_OK;
}
