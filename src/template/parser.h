/* parser.h — the parser's state and helpers shared by parser.c (statements, assignment targets, the jinja_parse
 * entry point of ast.h) and parse_expr.c (expressions). Internal to src/template/; the functions' jp_ prefix keeps
 * them apart from the rest of libcmf. Every function here reports errors as CMF_E_FORMAT
 * "template:LINE:COL: message" (jp_perr) or, through NOMEM(), the node caps / CMF_E_NOMEM; nodes and arrays it makes
 * live in the template's arena (parser.a). */
#ifndef CMF_TEMPLATE_PARSER_H
#define CMF_TEMPLATE_PARSER_H

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
#define MAX_EXPR_NODES 4000 /* (the number is also in jp_nomem's message) */

typedef struct parser {
    jarena *a;
    const jtok *t;
    size_t n, pos;
    int depth;
    int expr_nodes; /* nodes made since the current print tag or statement began (MAX_EXPR_NODES) */
    int too_long;   /* jp_mk refused a node: 1 for MAX_EXPR_NODES, 2 for CMF_TEMPLATE_MAX_NODES (jp_nomem says so) */
    size_t nodes;   /* nodes of the whole template (CMF_TEMPLATE_MAX_NODES) */
} parser;

/* A growing array of nodes on the heap while a list is parsed; jp_nvec_done moves it into the arena. */
typedef struct nvec {
    jnode **v;
    size_t n, cap;
} nvec;

/* Appends x (the vector grows by doubling with realloc). Returns -1 on allocation failure (v unchanged). */
int jp_nvec_push(nvec *v, jnode *x);
/* Moves v's items into an arena array (*out, *n; *out NULL when empty) and frees the heap copy, v left empty.
 * Returns -1 on allocation failure (v's heap copy freed all the same). */
int jp_nvec_done(parser *P, nvec *v, jnode ***out, size_t *n);

/* The token at the current position (the lexer ends every stream with T_EOF, which the parser never passes). */
static inline const jtok *cur(const parser *P) { return &P->t[P->pos]; }
/* Whether t is the operator `op` / the name `nm`. */
static inline int is_op(const jtok *t, const char *op) { return t->type == T_OP && strcmp(t->s, op) == 0; }
static inline int is_name(const jtok *t, const char *nm) { return t->type == T_NAME && strcmp(t->s, nm) == 0; }

/* CMF_E_FORMAT "template:LINE:COL: " + fmt with one %s argument, at token t (messages up to 255 bytes). */
cmf_status jp_perr(const jtok *t, const char *fmt, const char *arg);
/* CMF_E_FORMAT "template:LINE:COL: " + fmt at token t, fmt's one %s naming t as jinja2's describe_token does ("end
 * of statement block" for `%}`, ...; the token's own text otherwise): "expected 'in', got '%s'". */
cmf_status jp_tok_err(const jtok *t, const char *fmt);
/* Consumes the operator `op` or fails: "expected 'OP', got '...'" (jinja2 TokenStream.expect). */
cmf_status jp_expect_op(parser *P, const char *op);
/* Consumes the end of a statement tag (`%}`) or fails: "expected end of statement block, got '...'". */
cmf_status jp_expect_end(parser *P);
/* A zeroed node of `type` at the position of token `at`, counted against MAX_EXPR_NODES and CMF_TEMPLATE_MAX_NODES.
 * NULL when a cap is reached (P->too_long says which) or on allocation failure: the caller returns NOMEM(). */
jnode *jp_mk(parser *P, jnode_type type, const jtok *at);
/* The error for a failed jp_mk or allocation: "expression too long" / "template too long" (CMF_E_FORMAT at the
 * current token) when a cap refused the node, else CMF_E_NOMEM. */
cmf_status jp_nomem(const parser *P);

#define NOMEM() jp_nomem(P)
#define TRY(x) do { cmf_status st_ = (x); if (st_) return st_; } while (0)

/* Expressions (parse_expr.c), as jinja2 3.1 parser.py. Each parses from the current token, leaves the position after
 * what it took and stores the tree in *out (or fills `call`'s arguments / wraps *io). */
/* expr: or ['if' or ['else' expr]] (parse_expression / parse_condexpr). */
cmf_status jp_expr(parser *P, jnode **out);
/* An `or` expression: no conditional expression (a for loop's iterable, before its `if` filter). */
cmf_status jp_or(parser *P, jnode **out);
/* expr [, expr ...]: a tuple when a comma follows (print tags, set values); a trailing comma before the tag's end. */
cmf_status jp_tuple(parser *P, jnode **out);
/* Call arguments after '(' up to and past ')': positional into call->l1, keywords into call->l2 / call->names,
 * `*expr` into call->c, `**expr` into call->d (parse_call_args). */
cmf_status jp_args(parser *P, jnode *call);
/* `|name(args)` filter chains and `is [not] test [arg]` tests after an operand *io, which they wrap. */
cmf_status jp_filters(parser *P, jnode **io);

#endif
