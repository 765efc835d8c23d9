/* parser.c — recursive-descent parser from Jinja tokens to the tree of ast.h: the parser's helpers of parser.h
 * (node making, error messages, token expectations), statements ({% if / for / set / macro / call / filter / with /
 * break / continue / generation %} and template data), assignment targets, and the jinja_parse entry point.
 * Expressions are in parse_expr.c.
 *
 * Statements follow jinja2 3.1 parser.py (parse_statement and the parse_<tag> methods it dispatches to). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "template/parser.h"

int jp_nvec_push(nvec *v, jnode *x) {
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

int jp_nvec_done(parser *P, nvec *v, jnode ***out, size_t *n) {
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

cmf_status jp_perr(const jtok *t, const char *fmt, const char *arg) {
    char msg[256];
    snprintf(msg, sizeof(msg), fmt, arg);
    return cmf_err(CMF_E_FORMAT, "template:%d:%d: %s", t->line, t->col, msg);
}

cmf_status jp_tok_err(const jtok *t, const char *fmt) { return jp_perr(t, fmt, tok_desc(t)); }

cmf_status jp_expect_op(parser *P, const char *op) {
    if (!is_op(cur(P), op)) {
        char m[64];
        snprintf(m, sizeof(m), "expected '%s', got '%%s'", op);
        return jp_tok_err(cur(P), m);
    }
    P->pos++;
    return CMF_OK;
}

cmf_status jp_expect_end(parser *P) {
    if (cur(P)->type != T_BEND) return jp_tok_err(cur(P), "expected end of statement block, got '%s'");
    P->pos++;
    return CMF_OK;
}

jnode *jp_mk(parser *P, jnode_type type, const jtok *at) {
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

cmf_status jp_nomem(const parser *P) {
    if (P->too_long == 1)
        return jp_perr(cur(P), "%s", "expression too long (more than 4000 operators and operands in one chain; "
                                     "items of list, tuple and dict literals and call arguments count apart)");
    if (P->too_long)
        return jp_perr(cur(P), "%s",
                       "template too long (more than " JINJA_STR(CMF_TEMPLATE_MAX_NODES) " syntax nodes)");
    return cmf_err(CMF_E_NOMEM, "template parser");
}

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
                st = jp_perr(t, "unexpected end of template, expected '%s'", stops[0]);
            }
            break;
        }
        if (t->type == T_TEXT) {
            if (!(x = jp_mk(P, N_TEXT, t))) { st = NOMEM(); break; }
            x->name = t->s;
            x->op = (int)t->len; /* text length */
            P->pos++;
        } else if (t->type == T_VBEGIN) {
            P->pos++;
            P->expr_nodes = 0;
            if (!(x = jp_mk(P, N_OUTPUT, t))) { st = NOMEM(); break; }
            if ((st = jp_tuple(P, &x->a))) break;
            if (cur(P)->type != T_VEND) { st = jp_tok_err(cur(P), "expected end of print statement, got '%s'"); break; }
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
            st = jp_tok_err(t, "unexpected '%s'");
            break;
        }
        if (jp_nvec_push(&v, x)) { st = NOMEM(); break; }
    }
    if (st) { free(v.v); return st; }
    if (jp_nvec_done(P, &v, out, n)) return NOMEM();
    return CMF_OK;
}

/* Assignment targets (for / set / with) as jinja2's parse_assign_target -> jp_tuple(simplified=True): names or
 * parenthesised tuples, nested to any depth (`a, (b, c)`, `((a, b), c)`, `(a,)`, `()`; a trailing comma only
 * before a ')', as jinja2; `(a)` is the name a). node->names (node->op entries) is a flat list in which a tuple is
 * "(" items... ")": a lone name is [name] (op 1), any tuple (the top level's too) "(" ... ")"; exec.c bind_targets
 * unpacks it recursively. target_seq parses items up to a ',' -less end into names[*k...]. A set tag's top-level
 * items may be namespace attributes (jinja2 parse_tuple(with_namespace=True) -> parse_primary's NSRef, not inside
 * parentheses): `ns.a` is the entry "ns.a" (a name token holds no '.'), followed in memory by "ns" and its NUL. */
#define MAX_TARGET 32
static cmf_status target_seq(parser *P, const char **nm, int *k, int in_paren, int ns_ok, int *count, int *comma) {
    for (*count = *comma = 0;; P->pos++, *comma = 1) {
        if (*k >= MAX_TARGET - 1) return jp_perr(cur(P), "%s", "too many names to unpack");
        if (in_paren && is_op(cur(P), ")") && (*comma || !*count)) return CMF_OK; /* (a,) and () */
        if (is_op(cur(P), "(")) {
            const int k0 = (*k)++;
            int c, cm;
            P->pos++;
            TRY(target_seq(P, nm, k, 1, 0, &c, &cm));
            TRY(jp_expect_op(P, ")"));
            if (c == 1 && !cm) { /* (a) is a, ((a, b)) is (a, b) */
                memmove(nm + k0, nm + k0 + 1, (size_t)(*k - k0 - 1) * sizeof *nm);
                (*k)--;
            } else {
                if (*k >= MAX_TARGET) return jp_perr(cur(P), "%s", "too many names to unpack");
                nm[k0] = "(", nm[(*k)++] = ")";
            }
        } else if (cur(P)->type == T_NAME && ns_ok && is_op(&P->t[P->pos + 1], ".")) { /* ns.attr */
            const jtok *ns = cur(P), *attr = &P->t[P->pos + 2];
            if (attr->type != T_NAME) return jp_tok_err(attr, "expected attribute name, got '%s'");
            size_t a = strlen(ns->s), b = strlen(attr->s);
            char *d = jarena_alloc(P->a, 2 * a + b + 3); /* "ns.attr" NUL "ns" NUL (exec.c bind_entry reads both) */
            if (!d) return NOMEM();
            memcpy(d, ns->s, a), d[a] = '.', memcpy(d + a + 1, attr->s, b + 1), memcpy(d + a + b + 2, ns->s, a + 1);
            nm[(*k)++] = d;
            P->pos += 3;
        } else if (cur(P)->type == T_NAME) {
            nm[(*k)++] = cur(P)->s;
            P->pos++;
        } else {
            return jp_tok_err(cur(P), "expected a variable name, got '%s'");
        }
        (*count)++;
        if (!is_op(cur(P), ",")) return CMF_OK;
    }
}

static cmf_status parse_targets(parser *P, jnode *node, int ns_ok) {
    const char *names[MAX_TARGET + 1];
    int k = 1, count, comma; /* names[0]: the top level's "(" when it is a tuple (a, b) */
    TRY(target_seq(P, names, &k, 0, ns_ok, &count, &comma));
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
    jnode *n = jp_mk(P, N_IF, t);
    if (!n) return NOMEM();
    if (++P->depth > MAX_NEST) return jp_perr(t, "%s", NEST_MSG);
    TRY(jp_expr(P, &n->a));
    TRY(jp_expect_end(P));
    const char *stopped;
    TRY(parse_body(P, stops, &n->l1, &n->n1, &stopped));
    if (!strcmp(stopped, "elif")) {
        n->l2 = jarena_alloc(P->a, sizeof(jnode *));
        if (!n->l2) return NOMEM();
        n->n2 = 1;
        TRY(parse_if(P, &P->t[P->pos - 1], &n->l2[0]));
    } else {
        if (!strcmp(stopped, "else")) {
            TRY(jp_expect_end(P));
            TRY(parse_body(P, stop_end, &n->l2, &n->n2, &stopped));
        }
        TRY(jp_expect_end(P));
    }
    P->depth--;
    *out = n;
    return CMF_OK;
}

static cmf_status parse_params(parser *P, jnode *n) {
    nvec defs = {0};
    const char *names[64];
    size_t k = 0;
    TRY(jp_expect_op(P, "("));
    while (!is_op(cur(P), ")")) {
        const char *bad = NULL;
        if (k && jp_expect_op(P, ",")) bad = "expected ',' or ')', got '%s'";
        else if (cur(P)->type != T_NAME || k == 64) bad = "expected a parameter name, got '%s'";
        if (bad) { free(defs.v); return jp_tok_err(cur(P), bad); }
        names[k++] = cur(P)->s;
        P->pos++;
        jnode *d = NULL;
        if (is_op(cur(P), "=")) {
            P->pos++;
            cmf_status st = jp_expr(P, &d);
            if (st) { free(defs.v); return st; }
        }
        if (jp_nvec_push(&defs, d)) { free(defs.v); return NOMEM(); }
    }
    P->pos++;
    if (jp_nvec_done(P, &defs, &n->l2, &n->n2)) return NOMEM();
    n->names = jarena_alloc(P->a, (k ? k : 1) * sizeof(char *));
    if (!n->names) return NOMEM();
    memcpy(n->names, names, k * sizeof(char *));
    return CMF_OK;
}

static cmf_status parse_stmt(parser *P, jnode **out) {
    const jtok *t = &P->t[P->pos + 1];
    if (t->type != T_NAME) return jp_tok_err(t, "expected a statement name, got '%s'");
    P->pos += 2;
    const char *kw = t->s, *stopped;
    jnode *n = NULL;
    P->expr_nodes = 0;
    if (++P->depth > MAX_NEST) return jp_perr(t, "%s", NEST_MSG);
    if (!strcmp(kw, "if")) {
        TRY(parse_if(P, t, &n));
    } else if (!strcmp(kw, "for")) {
        static const char *const stops[] = {"endfor", "else", NULL}, *const stop_end[] = {"endfor", NULL};
        if (!(n = jp_mk(P, N_FOR, t))) return NOMEM();
        TRY(parse_targets(P, n, 0));
        if (!is_name(cur(P), "in")) return jp_tok_err(cur(P), "expected 'in', got '%s'");
        P->pos++;
        TRY(jp_or(P, &n->a));
        if (is_name(cur(P), "if")) { P->pos++; TRY(jp_expr(P, &n->b)); }
        if (is_name(cur(P), "recursive")) { n->recursive = 1; P->pos++; }
        TRY(jp_expect_end(P));
        TRY(parse_body(P, stops, &n->l1, &n->n1, &stopped));
        if (!strcmp(stopped, "else")) { TRY(jp_expect_end(P)); TRY(parse_body(P, stop_end, &n->l2, &n->n2, &stopped)); }
        TRY(jp_expect_end(P));
    } else if (!strcmp(kw, "set")) {
        static const char *const stops[] = {"endset", NULL};
        if (!(n = jp_mk(P, N_SET, t))) return NOMEM();
        TRY(parse_targets(P, n, 1));
        const char *dot = n->op == 1 ? strchr(n->names[0], '.') : NULL;
        if (dot) n->name = dot + 1, n->names[0] += strlen(n->names[0]) + 1; /* set ns.attr: names[0] is ns */
        if (cur(P)->type == T_BEND && n->op == 1) { /* (ns.attr too, as jinja2's AssignBlock) */
            n->type = N_SETBLOCK;
            P->pos++;
            TRY(parse_body(P, stops, &n->l1, &n->n1, &stopped));
        } else {
            TRY(jp_expect_op(P, "="));
            TRY(jp_tuple(P, &n->a));
        }
        TRY(jp_expect_end(P));
    } else if (!strcmp(kw, "macro")) {
        static const char *const stops[] = {"endmacro", NULL};
        if (!(n = jp_mk(P, N_MACRO, t))) return NOMEM();
        if (cur(P)->type != T_NAME) return jp_tok_err(cur(P), "expected macro name, got '%s'");
        n->name = cur(P)->s;
        P->pos++;
        TRY(parse_params(P, n));
        TRY(jp_expect_end(P));
        TRY(parse_body(P, stops, &n->l1, &n->n1, &stopped));
        n->accesses = jinja_body_accesses(n);
        if (cur(P)->type == T_NAME) P->pos++; /* {% endmacro name %} */
        TRY(jp_expect_end(P));
    } else if (!strcmp(kw, "call")) {
        static const char *const stops[] = {"endcall", NULL};
        if (!(n = jp_mk(P, N_CALLBLOCK, t))) return NOMEM();
        if (is_op(cur(P), "(")) TRY(parse_params(P, n));
        TRY(jp_expr(P, &n->a));
        if (n->a->type != N_CALL) return jp_perr(t, "%s", "expected a call after 'call'");
        TRY(jp_expect_end(P));
        TRY(parse_body(P, stops, &n->l1, &n->n1, &stopped));
        n->accesses = jinja_body_accesses(n);
        TRY(jp_expect_end(P));
    } else if (!strcmp(kw, "filter")) {
        static const char *const stops[] = {"endfilter", NULL};
        if (!(n = jp_mk(P, N_FILTERBLOCK, t))) return NOMEM();
        if (cur(P)->type != T_NAME) return jp_tok_err(cur(P), "expected filter name, got '%s'");
        jnode *f = jp_mk(P, N_FILTER, cur(P));
        if (!f) return NOMEM();
        f->name = cur(P)->s;
        P->pos++;
        if (is_op(cur(P), "(")) { P->pos++; TRY(jp_args(P, f)); }
        TRY(jp_filters(P, &f));
        n->a = f;
        TRY(jp_expect_end(P));
        TRY(parse_body(P, stops, &n->l1, &n->n1, &stopped));
        TRY(jp_expect_end(P));
    } else if (!strcmp(kw, "with")) {
        /* jinja2 Parser.parse_with: (target '=' expression) separated by ',' up to the tag's end; each pair is kept
         * as an N_SET node in l2, the body in l1 */
        static const char *const stops[] = {"endwith", NULL};
        nvec sets = {0};
        if (!(n = jp_mk(P, N_WITH, t))) return NOMEM();
        cmf_status st = CMF_OK;
        while (!st && cur(P)->type != T_BEND) {
            jnode *s = NULL;
            if (sets.n && (st = jp_expect_op(P, ","))) break;
            if (!(s = jp_mk(P, N_SET, cur(P)))) { st = NOMEM(); break; }
            if ((st = parse_targets(P, s, 0)) || (st = jp_expect_op(P, "=")) || (st = jp_expr(P, &s->a))) break;
            if (jp_nvec_push(&sets, s)) st = NOMEM();
        }
        if (st) { free(sets.v); return st; }
        if (jp_nvec_done(P, &sets, &n->l2, &n->n2)) return NOMEM();
        TRY(jp_expect_end(P));
        TRY(parse_body(P, stops, &n->l1, &n->n1, &stopped));
        TRY(jp_expect_end(P));
    } else if (!strcmp(kw, "break") || !strcmp(kw, "continue")) {
        if (!(n = jp_mk(P, kw[0] == 'b' ? N_BREAK : N_CONTINUE, t))) return NOMEM();
        TRY(jp_expect_end(P));
    } else if (!strcmp(kw, "generation")) {
        static const char *const stops[] = {"endgeneration", NULL};
        if (!(n = jp_mk(P, N_BODY, t))) return NOMEM();
        TRY(jp_expect_end(P));
        TRY(parse_body(P, stops, &n->l1, &n->n1, &stopped));
        TRY(jp_expect_end(P));
    } else {
        return jp_perr(t, "encountered unknown tag '%s'", kw);
    }
    P->depth--;
    *out = n;
    return CMF_OK;
}

cmf_status jinja_parse(jarena *a, const jtok *toks, size_t ntoks, jnode **root) {
    parser P = {.a = a, .t = toks, .n = ntoks};
    jnode *r = jp_mk(&P, N_BODY, &toks[0]);
    if (!r) return cmf_err(CMF_E_NOMEM, "template parser");
    TRY(parse_body(&P, NULL, &r->l1, &r->n1, NULL));
    *root = r;
    return CMF_OK;
}
