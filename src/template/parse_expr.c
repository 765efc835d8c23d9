/* parse_expr.c — the expressions of the Jinja parser (parser.h): literals, names, postfix access and calls, filters
 * and tests, operators, conditional expressions and tuples, as nodes of ast.h.
 *
 * Grammar and operator precedence follow jinja2 3.1 parser.py: conditional expression < or < and < not <
 * comparison (==, !=, <, >, <=, >=, in, not in) < + - < ~ < * / // % < ** < unary -/+ < postfix (.attr, [item],
 * [a:b:c], call) < filters (|f) and tests (is [not] t). */
#include <stdlib.h>
#include <string.h>

#include "template/parser.h"

/* One item of a container literal or one call argument: its nodes count from `base` (see MAX_EXPR_NODES). */
static cmf_status parse_item(parser *P, int base, jnode **out) {
    P->expr_nodes = base;
    cmf_status st = jp_expr(P, out);
    if (!st) P->expr_nodes = base;
    return st;
}
static cmf_status parse_unary(parser *P, jnode **out, int with_filter);

/* Call arguments after '(' up to ')': positional into l1, keyword into l2/names, `*expr` into c and `**expr` into d
 * (jinja2 parse_call_args: positional arguments first, then keywords and one *args, then one **kwargs; another order
 * is "invalid syntax for function call expression"). */
cmf_status jp_args(parser *P, jnode *call) {
    static const char BAD_CALL[] = "invalid syntax for function call expression";
    nvec pos = {0}, kw = {0};
    const char **names = NULL;
    size_t nnames = 0;
    cmf_status st = CMF_OK;
    int base = P->expr_nodes;
    size_t nstar = 0;
    while (!is_op(cur(P), ")")) {
        if (pos.n + kw.n + nstar) { if ((st = jp_expect_op(P, ","))) goto fail; if (is_op(cur(P), ")")) break; }
        jnode *e;
        const jtok *at = cur(P);
        if (is_op(at, "*") || is_op(at, "**")) {
            int two = is_op(at, "**");
            if (call->d || (!two && call->c)) { st = jp_perr(at, "%s", BAD_CALL); goto fail; }
            P->pos++;
            if ((st = parse_item(P, base, &e))) goto fail;
            if (two) call->d = e; else call->c = e;
            nstar++;
        } else if (cur(P)->type == T_NAME && is_op(&P->t[P->pos + 1], "=")) {
            const char *k = cur(P)->s;
            if (call->d) { st = jp_perr(at, "%s", BAD_CALL); goto fail; }
            P->pos += 2;
            if ((st = parse_item(P, base, &e))) goto fail;
            const char **nn = realloc(names, (nnames + 1) * sizeof(*nn));
            if (!nn || jp_nvec_push(&kw, e)) { if (nn) names = nn; st = NOMEM(); goto fail; }
            names = nn;
            names[nnames++] = k;
        } else {
            if (call->c || call->d || kw.n) { st = jp_perr(at, "%s", BAD_CALL); goto fail; }
            if ((st = parse_item(P, base, &e))) goto fail;
            if (jp_nvec_push(&pos, e)) { st = NOMEM(); goto fail; }
        }
    }
    P->pos++;
    if (jp_nvec_done(P, &pos, &call->l1, &call->n1) || jp_nvec_done(P, &kw, &call->l2, &call->n2)) {
        st = NOMEM();
        goto fail;
    }
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
            if (!(n = jp_mk(P, N_CONST, t))) return NOMEM();
            n->cval = jv_bool(s[0] == 't' || s[0] == 'T');
        } else if (!strcmp(s, "none") || !strcmp(s, "None")) {
            if (!(n = jp_mk(P, N_CONST, t))) return NOMEM();
            n->cval = jv_none();
        } else {
            if (!(n = jp_mk(P, N_NAME, t))) return NOMEM();
            n->name = s;
        }
    } else if (t->type == T_STR) {
        /* adjacent string literals concatenate */
        size_t len = 0, j = P->pos;
        while (P->t[j].type == T_STR) len += P->t[j++].len;
        char *buf = jarena_alloc(P->a, len + 1);
        if (!buf || !(n = jp_mk(P, N_CONST, t))) return NOMEM();
        size_t o = 0;
        while (cur(P)->type == T_STR) { memcpy(buf + o, cur(P)->s, cur(P)->len); o += cur(P)->len; P->pos++; }
        n->cval = jv_strn(buf, len);
        if (jv_is_oom(n->cval) || jarena_keep(P->a, n->cval)) return NOMEM();
    } else if (t->type == T_INT || t->type == T_FLOAT) {
        P->pos++;
        if (!(n = jp_mk(P, N_CONST, t))) return NOMEM();
        n->cval = t->type == T_INT ? jv_int(t->ival) : jv_float(t->fval);
    } else if (is_op(t, "(")) {
        P->pos++;
        if (is_op(cur(P), ")")) { /* empty tuple */
            P->pos++;
            if (!(n = jp_mk(P, N_TUPLE, t))) return NOMEM();
        } else {
            jnode *e;
            int base = P->expr_nodes;
            TRY(jp_expr(P, &e));
            if (is_op(cur(P), ",")) {
                nvec v = {0};
                if (jp_nvec_push(&v, e)) return NOMEM();
                while (is_op(cur(P), ",")) {
                    P->pos++;
                    if (is_op(cur(P), ")")) break;
                    cmf_status st = parse_item(P, base, &e);
                    if (st) { free(v.v); return st; }
                    if (jp_nvec_push(&v, e)) { free(v.v); return NOMEM(); }
                }
                if (!(n = jp_mk(P, N_TUPLE, t)) || jp_nvec_done(P, &v, &n->l1, &n->n1)) { free(v.v); return NOMEM(); }
            } else {
                n = e;
            }
            TRY(jp_expect_op(P, ")"));
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
            if (v.n && ((st = jp_expect_op(P, ","))) ) break;
            if (is_op(cur(P), close)) break;
            if ((st = parse_item(P, base, &e))) break;
            if (jp_nvec_push(&v, e)) { st = NOMEM(); break; }
            if (dict) {
                if ((st = jp_expect_op(P, ":")) || (st = parse_item(P, base, &e))) break;
                if (jp_nvec_push(&v, e)) { st = NOMEM(); break; }
            }
        }
        if (st) { free(v.v); return st; }
        P->pos++;
        if (!(n = jp_mk(P, dict ? N_DICT : N_LIST, t)) || jp_nvec_done(P, &v, &n->l1, &n->n1)) {
            free(v.v);
            return NOMEM();
        }
    } else {
        return jp_tok_err(t, "unexpected '%s'");
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
                if (!(n = jp_mk(P, N_GETATTR, t))) return NOMEM();
                n->name = a->s;
            } else if (a->type == T_INT) { /* x.0 is x[0] */
                if (!(n = jp_mk(P, N_GETITEM, t))) return NOMEM();
                if (!(n->b = jp_mk(P, N_CONST, a))) return NOMEM();
                n->b->cval = jv_int(a->ival);
            } else {
                return jp_tok_err(a, "expected attribute name after '.', got '%s'");
            }
            P->pos++;
            n->a = *io;
        } else if (is_op(t, "[")) {
            P->pos++;
            jnode *parts[3] = {0};
            int is_slice = 0;
            for (int k = 0; k < 3; k++) {
                if (!is_op(cur(P), ":") && !is_op(cur(P), "]")) TRY(jp_expr(P, &parts[k]));
                if (k < 2 && is_op(cur(P), ":")) { is_slice = 1; P->pos++; continue; }
                break;
            }
            TRY(jp_expect_op(P, "]"));
            if (is_slice) {
                if (!(n = jp_mk(P, N_SLICE, t))) return NOMEM();
                n->b = parts[0]; n->c = parts[1]; n->d = parts[2];
            } else {
                if (!parts[0]) return jp_perr(t, "%s", "empty subscript");
                if (!(n = jp_mk(P, N_GETITEM, t))) return NOMEM();
                n->b = parts[0];
            }
            n->a = *io;
        } else if (is_op(t, "(")) {
            P->pos++;
            if (!(n = jp_mk(P, N_CALL, t))) return NOMEM();
            n->a = *io;
            TRY(jp_args(P, n));
        } else {
            return CMF_OK;
        }
        *io = n;
    }
}

/* `|name(args)` chains and `is [not] test [arg]` after a unary operand. */
cmf_status jp_filters(parser *P, jnode **io) {
    for (;;) {
        const jtok *t = cur(P);
        if (is_op(t, "|")) {
            P->pos++;
            if (cur(P)->type != T_NAME) return jp_tok_err(cur(P), "expected filter name, got '%s'");
            jnode *f = jp_mk(P, N_FILTER, cur(P));
            if (!f) return NOMEM();
            f->name = cur(P)->s;
            P->pos++;
            while (is_op(cur(P), ".") && P->t[P->pos + 1].type == T_NAME) P->pos += 2; /* dotted filter names */
            if (is_op(cur(P), "(")) { P->pos++; TRY(jp_args(P, f)); }
            f->a = *io;
            *io = f;
        } else if (is_name(t, "is")) {
            P->pos++;
            jnode *f = jp_mk(P, N_TEST, t);
            if (!f) return NOMEM();
            if (is_name(cur(P), "not")) { f->op = 1; P->pos++; }
            const jtok *nm = cur(P);
            if (nm->type != T_NAME) return jp_tok_err(nm, "expected test name, got '%s'");
            f->name = nm->s;
            P->pos++;
            if (!strcmp(f->name, "none") || !strcmp(f->name, "true") || !strcmp(f->name, "false")) {
                /* names of constants are tests here */
            }
            if (is_op(cur(P), "(")) {
                P->pos++;
                TRY(jp_args(P, f));
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
    if (++P->depth > MAX_NEST) return jp_perr(t, "%s", NEST_MSG);
    jnode *n;
    if (is_op(t, "-") || is_op(t, "+")) {
        P->pos++;
        if (!(n = jp_mk(P, is_op(t, "-") ? N_NEG : N_POS, t))) return NOMEM();
        TRY(parse_unary(P, &n->a, 0));
    } else {
        TRY(parse_primary(P, &n));
    }
    TRY(parse_postfix(P, &n));
    if (with_filter) TRY(jp_filters(P, &n));
    P->depth--;
    *out = n;
    return CMF_OK;
}

/* The arithmetic levels, tightest first, as jinja2's parser.py: pow (**) > math2 (* / // %) > concat (~) > math1
 * (+ -) > compare, so 'a' ~ 1 + 2 is ('a' ~ 1) + 2 (a TypeError), as in jinja2. Each level is left-associative (2 **
 * 3 ** 2 is (2 ** 3) ** 2 = 64, as jinja2's parse_pow) and makes N_BINOP nodes with the operator's code. */
static const struct {
    const char *tok;
    int op;
} ARITH[][4] = {
    {{"**", 'P'}},
    {{"*", '*'}, {"/", '/'}, {"//", 'F'}, {"%", '%'}},
    {{"~", '~'}},
    {{"+", '+'}, {"-", '-'}},
};
enum { ARITH_ADD = 3 }; /* the loosest level, just above comparisons */
_Static_assert(sizeof(ARITH) / sizeof(ARITH[0]) == ARITH_ADD + 1, "ARITH_ADD is ARITH's last level");

/* Level `lv` of ARITH; its operands are of level lv - 1, those of level 0 unary expressions with their filters. */
static cmf_status parse_arith(parser *P, int lv, jnode **out) {
    TRY(lv ? parse_arith(P, lv - 1, out) : parse_unary(P, out, 1));
    for (;;) {
        const jtok *t = cur(P);
        int op = 0;
        for (int k = 0; k < 4 && ARITH[lv][k].tok && !op; k++)
            if (is_op(t, ARITH[lv][k].tok)) op = ARITH[lv][k].op;
        if (!op) return CMF_OK;
        P->pos++;
        jnode *r, *n;
        TRY(lv ? parse_arith(P, lv - 1, &r) : parse_unary(P, &r, 1));
        if (!(n = jp_mk(P, N_BINOP, t))) return NOMEM();
        n->op = op;
        n->a = *out;
        n->b = r;
        *out = n;
    }
}

static cmf_status parse_compare(parser *P, jnode **out) {
    TRY(parse_arith(P, ARITH_ADD, out));
    for (;;) {
        const jtok *t = cur(P);
        int op = is_op(t, "==") ? 'e' : is_op(t, "!=") ? 'n' : is_op(t, "<") ? '<' : is_op(t, ">") ? '>'
               : is_op(t, "<=") ? 'l' : is_op(t, ">=") ? 'g' : is_name(t, "in") ? 'i' : 0;
        if (!op && is_name(t, "not") && is_name(&P->t[P->pos + 1], "in")) { op = 'I'; P->pos++; }
        if (!op) return CMF_OK;
        P->pos++;
        jnode *n = jp_mk(P, N_COMPARE, t);
        if (!n) return NOMEM();
        n->op = op;
        n->a = *out;
        TRY(parse_arith(P, ARITH_ADD, &n->b));
        *out = n;
    }
}

static cmf_status parse_not(parser *P, jnode **out) {
    const jtok *t = cur(P);
    if (is_name(t, "not")) {
        P->pos++;
        if (++P->depth > MAX_NEST) return jp_perr(t, "%s", NEST_MSG);
        jnode *n = jp_mk(P, N_NOT, t);
        if (!n) return NOMEM();
        TRY(parse_not(P, &n->a));
        P->depth--;
        *out = n;
        return CMF_OK;
    }
    return parse_compare(P, out);
}

/* `and` (or_level 0: operands are `not` expressions) and `or` (or_level 1: operands are `and` expressions) chains,
 * left-associative N_AND / N_OR nodes (jinja2 parse_and / parse_or). */
static cmf_status parse_logic(parser *P, int or_level, jnode **out) {
    const char *kw = or_level ? "or" : "and";
    TRY(or_level ? parse_logic(P, 0, out) : parse_not(P, out));
    while (is_name(cur(P), kw)) {
        jnode *n = jp_mk(P, or_level ? N_OR : N_AND, cur(P));
        if (!n) return NOMEM();
        P->pos++;
        n->a = *out;
        TRY(or_level ? parse_logic(P, 0, &n->b) : parse_not(P, &n->b));
        *out = n;
    }
    return CMF_OK;
}

cmf_status jp_or(parser *P, jnode **out) { return parse_logic(P, 1, out); }

/* expr: or ['if' or ['else' expr]] */
cmf_status jp_expr(parser *P, jnode **out) {
    if (++P->depth > MAX_NEST) return jp_perr(cur(P), "%s", NEST_MSG);
    TRY(jp_or(P, out));
    while (is_name(cur(P), "if")) {
        jnode *n = jp_mk(P, N_CONDEXPR, cur(P));
        if (!n) return NOMEM();
        P->pos++;
        n->b = *out;
        TRY(jp_or(P, &n->a));
        if (is_name(cur(P), "else")) { P->pos++; TRY(jp_expr(P, &n->c)); }
        *out = n;
    }
    P->depth--;
    return CMF_OK;
}

/* expr [, expr ...] -> a tuple when a comma follows (set values, for iterables). */
cmf_status jp_tuple(parser *P, jnode **out) {
    const jtok *t = cur(P);
    int base = P->expr_nodes;
    TRY(jp_expr(P, out));
    if (!is_op(cur(P), ",")) return CMF_OK;
    nvec v = {0};
    if (jp_nvec_push(&v, *out)) return NOMEM();
    while (is_op(cur(P), ",")) {
        P->pos++;
        if (cur(P)->type == T_BEND || cur(P)->type == T_VEND) break;
        jnode *e;
        cmf_status st = parse_item(P, base, &e);
        if (st) { free(v.v); return st; }
        if (jp_nvec_push(&v, e)) { free(v.v); return NOMEM(); }
    }
    jnode *n = jp_mk(P, N_TUPLE, t);
    if (!n || jp_nvec_done(P, &v, &n->l1, &n->n1)) { free(v.v); return NOMEM(); }
    *out = n;
    return CMF_OK;
}
