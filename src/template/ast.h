/* ast.h — tokens and syntax tree of the Jinja engine (internal to src/template/).
 *
 * The lexer (lexer.c) applies Jinja2's whitespace rules as transformers configures them (trim_blocks=True,
 * lstrip_blocks=True, keep_trailing_newline=False; `-`/`+` markers on tags) and yields text and tag tokens;
 * the parser (statements in parser.c, expressions in parse_expr.c, their shared state in parser.h) builds one tree
 * per template in an arena that the template owns. */
#ifndef CMF_TEMPLATE_AST_H
#define CMF_TEMPLATE_AST_H

#include <stddef.h>
#include <stdint.h>

#include "cmf.h"
#include "template/template.h"
#include "template/value.h"

/* The parse-time caps of template.h, for the lexer's and parser's messages. */
#define JINJA_MAX_STRING_LITERAL CMF_TEMPLATE_MAX_STRING_LITERAL
#define JINJA_MAX_BRACKETS CMF_TEMPLATE_MAX_BRACKETS
#define JINJA_STR_(x) #x
#define JINJA_STR(x) JINJA_STR_(x)

typedef enum jtok_type {
    T_TEXT, T_VBEGIN, T_VEND, T_BBEGIN, T_BEND, T_NAME, T_STR, T_INT, T_FLOAT, T_OP, T_EOF
} jtok_type;

typedef struct jtok {
    jtok_type type;
    int line, col;  /* 1-based position in the template source */
    char *s;        /* text / name / string literal (decoded) / operator; arena-owned, NUL-terminated */
    size_t len;
    int64_t ival;
    double fval;
} jtok;

/* A bump allocator: everything of one parsed template is freed at once. */
typedef struct jarena {
    struct jchunk *head;
    jv *consts; /* values released by jarena_free (N_CONST payloads) */
    size_t nconst, capconst;
} jarena;
void *jarena_alloc(jarena *a, size_t n); /* zeroed; NULL on allocation failure */
char *jarena_strdup(jarena *a, const char *s, size_t n);
int jarena_keep(jarena *a, jv v); /* the arena takes `v` (released on free); -1 on allocation failure */
void jarena_free(jarena *a);

/* Tokenizes `src` (`n` bytes). On success the token array (*toks, *ntoks) lives in arena `a`. Errors: CMF_E_FORMAT with
 * "template:LINE:COL: ..." for an unterminated tag/string/comment or a bad character; CMF_E_NOMEM. */
cmf_status jinja_lex(jarena *a, const char *src, size_t n, jtok **toks, size_t *ntoks);

typedef enum jnode_type {
    /* statements */
    N_TEXT, N_OUTPUT, N_IF, N_FOR, N_SET, N_SETBLOCK, N_MACRO, N_CALLBLOCK, N_FILTERBLOCK, N_BREAK, N_CONTINUE,
    N_WITH, /* {% with %}: l2 = its assignments (N_SET nodes), l1 = body */
    N_BODY, /* a plain list of statements (generation blocks, template root) */
    /* expressions */
    N_CONST, N_NAME, N_LIST, N_TUPLE, N_DICT, N_BINOP, N_NEG, N_POS, N_NOT, N_AND, N_OR, N_COMPARE, N_CONDEXPR,
    N_GETATTR, N_GETITEM, N_SLICE, N_CALL, N_FILTER, N_TEST,
} jnode_type;

typedef struct jnode {
    jnode_type type;
    int line, col;
    int op;        /* N_BINOP: '+','-','*','/','F'(//),'%','P'(**),'~'; N_COMPARE: 'e'(==) 'n'(!=) '<' '>' 'l'(<=)
                    * 'g'(>=) 'i'(in) 'I'(not in); N_TEST: 1 when negated (`is not`) */
    const char *name;  /* N_NAME, N_GETATTR attribute, N_FILTER/N_TEST name, N_MACRO name, N_SET attr target */
    struct jnode *a, *b, *c, *d;
    struct jnode **l1; size_t n1; /* bodies / items / positional args / for-target names */
    struct jnode **l2; size_t n2; /* else bodies / keyword arg values / macro defaults */
    const char **names;           /* keyword arg names (parallel to l2) / macro parameter names (n2 of them) */
    jv cval;                      /* N_CONST (arena templates keep these alive until free) */
    int recursive;                /* N_FOR: `{% for ... recursive %}` (the body may call loop(items)) */
    int accesses;                 /* N_MACRO / N_CALLBLOCK: JN_USES_* of its body (jinja_body_accesses) */
} jnode;

/* Which of the special names a macro body reads, as jinja2's compiler finds them (compiler.py macro_body:
 * find_undeclared(body, ("caller", "kwargs", "varargs")), less the names that are parameters): only a macro that
 * reads varargs takes extra positional arguments, only one that reads kwargs takes unknown keywords, only one that
 * reads caller takes caller=. */
enum { JN_USES_VARARGS = 1, JN_USES_KWARGS = 2, JN_USES_CALLER = 4 };
/* The JN_USES_* bits of a macro or call-block node n (its body n->l1 and the nodes below it, nested macros
 * included; parameter names n->names[0..n2) excluded) (exec.c). */
int jinja_body_accesses(const jnode *n);

/* Parses a token stream into a tree (root: N_BODY). Errors: CMF_E_FORMAT "template:LINE:COL: message" for
 * syntax errors (unexpected token, unclosed block, unknown statement, nesting deeper than the limit). */
cmf_status jinja_parse(jarena *a, const jtok *toks, size_t ntoks, jnode **root);

#endif
