/* eval.h — the interpreter state shared by eval.c, operators.c, exec.c (expressions, operators, statements) and
 * builtins.c (filters, tests, methods, global functions). Internal to src/template/. */
#ifndef CMF_TEMPLATE_EVAL_H
#define CMF_TEMPLATE_EVAL_H

#include "template/ast.h"
#include "template/template.h"

typedef struct jframe {
    jv vars; /* JV_DICT */
    struct jframe *parent;
} jframe;

/* An active for loop (on the C stack of exec.c's loop runner). In a `{% for ... recursive %}` loop, loop(items)
 * inside its body runs the same loop over items, one level deeper. loop.changed(*values) keeps its last values here
 * (not in the loop object: a value may hold the loop object, and reference counts never free such a cycle). */
typedef struct jrloop {
    const jnode *n;       /* the N_FOR node */
    jframe *f;            /* the frame the for statement runs in */
    int depth;            /* loop.depth of this run */
    const jv_dict *cur;   /* the loop object of the iteration running now (NULL between iterations) */
    int64_t serial;       /* this run's number (loop.changed is a method bound to it) */
    jv changed_last;      /* the arguments of the last loop.changed() call (a tuple), JV_UNDEF before the first */
    struct jrloop *up;    /* the enclosing active loop */
} jrloop;

typedef struct jctx {
    jbuf *out;           /* where output goes now (swapped for set blocks, macros and filter blocks) */
    jframe *root;        /* context variables + top-level assignments + macros */
    cmf_template_limits lim;
    size_t iterations;   /* loop iterations so far (all loops) */
    size_t items;        /* list items made by range() and list + so far (limit: lim.max_iterations) */
    size_t steps;        /* value-walk steps left (==, in, sort/min/max/unique keys): JINJA_WALK_STEPS(lim) */
    int depth;           /* macro call depth */
    int flow;            /* FLOW_* after break/continue */
    jv filter_input;     /* the rendered body of a {% filter %} block */
    jv pending_caller;   /* the caller() of a {% call %} block, for the next macro call */
    jrloop *rloops;      /* innermost active for loop, or NULL */
    int64_t loop_serial; /* for loops started so far (jrloop.serial) */
    jv kept;             /* JV_LIST (or JV_NONE until needed): computed key strings that an Undefined names; they
                          * live until the render ends, since JV_UNDEF borrows its name */
} jctx;

enum { FLOW_NONE, FLOW_BREAK, FLOW_CONTINUE };

/* "template:LINE:COL: message" as CMF_E_FORMAT (runtime type errors, undefined access). */
cmf_status jinja_rt_err(const jnode *at, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Call arguments, evaluated. */
typedef struct jargs {
    jv *pos;
    size_t npos;
    const char **kwn;
    jv *kwv;
    size_t nkw;
    const char **kwn_own; /* kwn when a **mapping added names (freed by jargs_free), else NULL */
    jv hold;              /* the **mapping whose keys kwn borrows (released by jargs_free); JV_UNDEF when none */
} jargs;
/* The keyword argument `name`, else positional `i` (i < 0: none), else NULL. */
const jv *jargs_get(const jargs *a, int i, const char *name);

/* Filters, tests, methods, global functions (builtins.c). Each returns CMF_OK and an owned *out, or an error
 * (unknown name: CMF_E_UNSUPPORTED naming it; bad argument types: CMF_E_FORMAT) reported at node `at`. */
cmf_status jinja_filter(jctx *c, const jnode *at, const char *name, jv in, const jargs *a, jv *out);
cmf_status jinja_test(jctx *c, const jnode *at, const char *name, jv in, const jargs *a, int *result);
cmf_status jinja_method(jctx *c, const jnode *at, jv self, const char *name, const jargs *a, jv *out);
cmf_status jinja_call_global(jctx *c, const jnode *at, int fid, const jargs *a, jv *out);
/* When `self` has a method `name` we implement (dict.items, str.strip, ...), or a list/dict method that
 * modifies it in place (append, update, ...), which jinja_method refuses as transformers' sandbox does: the
 * method's name in static storage (so a bound method outlives a computed key string); else NULL. */
const char *jinja_method_name(jv self, const char *name);
/* cycler(...) and joiner(sep) objects are namespaces marked by these keys (a template cannot name them: they are
 * not identifiers), holding their state: the cycler's items and position, the joiner's separator and whether it
 * has been called. */
#define JINJA_CYCLER_ITEMS "\x01items"
#define JINJA_CYCLER_POS "\x01pos"
#define JINJA_JOINER_SEP "\x01sep"
#define JINJA_JOINER_USED "\x01used"
/* Checks the arguments `a` of built-in filter (kind 'f') or test ('t') `name` against jinja2's signature of it
 * (signatures.c, table generated from jinja2 by scripts/template/make_signatures.py), the filtered value being the
 * first positional argument: too many positional arguments, an unknown, positional-only or repeated keyword, or a
 * missing required argument is CMF_E_FORMAT at `at` (Python's TypeError); a name not in the table passes. */
cmf_status jinja_check_signature(const jnode *at, char kind, const char *name, const jargs *a);
/* Calls a namespace value: a joiner() returns "" the first time and its separator after; other values are not
 * callable (CMF_E_FORMAT). */
cmf_status jinja_call_object(jctx *c, const jnode *at, jv obj, const jargs *a, jv *out);
/* The id of a global function (range, namespace, dict, raise_exception, strftime_now, cycler, joiner), or -1. */
int jinja_global_id(const char *name);

/* Expression / statement evaluation (eval.c, exec.c). jinja_eval returns an owned value in *out. */
cmf_status jinja_eval(jctx *c, jframe *f, const jnode *n, jv *out);
cmf_status jinja_exec_body(jctx *c, jframe *f, jnode *const *body, size_t n);
cmf_status jinja_eval_args(jctx *c, jframe *f, const jnode *n, jargs *a);
void jargs_free(jargs *a);
/* Variable lookup through the frames, then the global functions; undefined when absent (owned value). */
jv jinja_lookup(jctx *c, jframe *f, const char *name);
/* Sets a variable in frame f (takes v). */
cmf_status jinja_assign(jframe *f, const char *name, jv v);
/* "'name' is undefined" at node `at` (CMF_E_FORMAT). */
cmf_status jinja_undef_err(const jnode *at, jv v);
/* A sandbox limit error (CMF_E_UNSUPPORTED). */
cmf_status jinja_limit_err(const jnode *at, const char *what, size_t lim);

/* The method name of loop.cycle (bound to the iteration's index0). */
#define JINJA_LOOP_CYCLE "loop.cycle"
/* The method name of loop.changed (bound to the loop run's serial number). */
#define JINJA_LOOP_CHANGED "loop.changed"
/* loop.changed(*values) of the loop run `serial` (jinja2 LoopContext.changed): True when the tuple of values differs
 * (Python ==) from the previous call's in this run, or on the first call; else False. Errors: the run has ended
 * (the loop object was kept past its loop), keyword arguments, the walk budget of ==. */
cmf_status jinja_loop_changed(jctx *c, const jnode *at, int64_t serial, const jargs *a, jv *out);
/* loop(items) in a recursive for loop (exec.c): renders the loop body over items one level deeper, the text as a
 * new string in *out. Errors: not a recursive loop's object, not one argument, the macro depth limit. */
cmf_status jinja_call_loop(jctx *c, const jnode *at, jv loop, const jargs *a, jv *out);

/* Calls a macro value with arguments (eval.c). */
cmf_status jinja_call_macro(jctx *c, const jnode *at, jv macro, const jargs *a, jv *out);
/* The work budget of one render (c->steps): each pair of values that ==, in, a test, list.index, or the key
 * comparisons of sort/unique/min/max/dictsort visit is a step (a list holding one list twice, 40 deep, made == walk
 * 2^40 pairs; unique is quadratic in the items), and so is each list or dict item a filter or method reads and each
 * JINJA_WORK_BYTES bytes of text scanned or made (a 16 MB string searched in a loop of a million iterations ran for
 * hours). Sixteen times max_iterations: about a gigabyte of text. */
#define JINJA_WALK_STEPS(lim) ((lim).max_iterations > SIZE_MAX / 16 ? SIZE_MAX : (lim).max_iterations * 16)
#define JINJA_WORK_BYTES 64
/* Charges `steps` work steps; the sandbox limit error once the budget is spent. */
cmf_status jinja_charge_work(jctx *c, const jnode *at, size_t steps);
/* The work of reading value v once: a string's bytes / JINJA_WORK_BYTES, a list's or dict's items, else 1. */
size_t jinja_work_of(jv v);
/* Python's a == b within c->steps: *eq gets 1 or 0; CMF_E_UNSUPPORTED (sandbox limit, reported at `at`) once the
 * steps are spent. */
cmf_status jinja_equal(jctx *c, const jnode *at, jv a, jv b, int *eq);
/* Python's int for ints and bools (True is 1): whether v is one, and its value. */
static inline int jinja_is_intlike(jv v) { return v.k == JV_INT || v.k == JV_BOOL; }
static inline int64_t jinja_ival(jv v) { return v.k == JV_INT ? v.u.i : v.u.b; }
/* The operators (operators.c), with Python's semantics as jinja2 compiles them to Python; each borrows its
 * operands and returns an owned *out.
 * jinja_binop: node n's binary operator n->op ('+', '-', '*', '/', 'F' //, '%', 'P' **, '~') on a and b: numbers
 * (64-bit ints: a result past int64 is an error, not a bignum; floats as CPython's float_div_mod / float_pow),
 * str + str, str * int, list/tuple + and *, '~' concatenation of str(a) and str(b), str % args (printf-style
 * formatting); the string size and list-items limits of c->lim, the work budget for the string it makes.
 * Errors (CMF_E_FORMAT at n): an undefined operand, unsupported operand types, division by zero, overflow.
 * jinja_unary: -a / +a (n->type N_NEG / N_POS) of a number; an undefined or non-number a is an error.
 * jinja_compare_op: n->op 'e' ==, 'n' !=, '<', '>', 'l' <=, 'g' >=, 'i' in, 'I' not in; a bool in *out. Errors:
 * types that do not compare / cannot be searched (CMF_E_FORMAT), the work budget and nesting depth. */
cmf_status jinja_binop(jctx *c, const jnode *n, jv a, jv b, jv *out);
cmf_status jinja_unary(const jnode *n, jv a, jv *out);
cmf_status jinja_compare_op(jctx *c, const jnode *n, jv a, jv b, jv *out);
/* Python ordering for sort/min/max: numbers with numbers, strings with strings (optionally case-folded), lists
 * item by item; sets *err = 1 for other pairs, *err = 2 once c->steps is spent (jinja_walk_err reports it), 3 when
 * nested deeper than JV_MAX_DEPTH (jinja_deep_err).
 * Returns <0, 0, >0. */
int jinja_compare(jctx *c, jv a, jv b, int case_insensitive, int *err);
/* The sandbox limit error of a spent value-walk budget. */
cmf_status jinja_walk_err(jctx *c, const jnode *at);
/* A walk met a value nested deeper than JV_MAX_DEPTH (CMF_E_FORMAT, Python's RecursionError). */
cmf_status jinja_deep_err(const jnode *at);
/* The error of a buffer a value was printed into: too deep, over its size limit (`what` names the limit), out of
 * memory; CMF_OK when none. */
cmf_status jinja_buf_status(jctx *c, const jnode *at, const jbuf *b, const char *what);
/* obj.attr / obj[key] with Jinja's lookup rules; returns owned value (undefined when missing). */
cmf_status jinja_getattr(jctx *c, const jnode *at, jv obj, const char *name, jv *out);
cmf_status jinja_getitem(jctx *c, const jnode *at, jv obj, jv key, jv *out);


/* Helpers shared by builtins.c and filters.c (Python str semantics on UTF-8; owned results). */
enum { CASE_UPPER, CASE_LOWER, CASE_PYTITLE, CASE_CAPITALIZE, CASE_JTITLE, CASE_SWAPCASE };
cmf_status jb_ret_str(jv *out, const char *s, size_t n);
cmf_status jb_ret_buf(jv *out, jbuf *b); /* frees b */
int jb_is_space(unsigned char c);
/* Whether the code point at p (n > 0 bytes) is Python whitespace (str.isspace); its length in *k (1 for a stray
 * byte, which is not whitespace). */
int jb_space_at(const char *p, size_t n, size_t *k);
/* Python's s.upper() / lower() / title() / capitalize() / swapcase() and jinja2's title filter (CASE_JTITLE: words
 * split at whitespace and -({[<, each word's first code point upper-cased and the rest lower-cased), with full
 * Unicode case mapping and final sigma (casemap.c). Stray bytes are kept as they are. Owned result. */
cmf_status jb_map_case(jv s, int mode, jv *out);
/* Unicode properties as Python 3.11 sees them (casemap.c, strmethods.c): cased (Lu/Ll/Lt, Other_Lowercase,
 * Other_Uppercase), numeric (str.isnumeric), whitespace (str.isspace), Lowercase, Uppercase. */
int jinja_cp_is_cased(int32_t cp);
int jinja_cp_is_numeric(int32_t cp);
int jinja_cp_is_space(int32_t cp);
int jinja_cp_is_lower(int32_t cp);
int jinja_cp_is_upper(int32_t cp);
/* Python's s.islower(), isupper(), istitle(), isdigit(), isdecimal(), isnumeric(), isalpha(), isalnum(), isspace(),
 * isascii(), isprintable() for the method name m (strmethods.c); 1 or 0. */
int jinja_str_is(jv s, const char *m);
/* The code point that ends at byte offset i > 0 of the UTF-8 text p, its first byte's offset in *start; -1 (and
 * *start = i - 1) for a byte that ends no well-formed sequence (casemap.c). */
int32_t jinja_prev_cp(const char *p, size_t i, size_t *start);
/* Python's a.lower() compared with b.lower() (code point order, as str < str) without making the strings: <0, 0,
 * >0 (casemap.c). jinja2's case-insensitive sort / unique / groupby / dictsort / min / max compare so. */
int jinja_compare_lower(const char *a, size_t an, const char *b, size_t bn);
/* fmt.format(*pos, **kw's keywords) (map NULL) or fmt.format_map(*map) (pos NULL, kw NULL) as jinja2's sandbox runs
 * them (string.Formatter over Python's format(); strformat.c). Owned *out; errors as Python's ValueError /
 * IndexError / KeyError / TypeError (CMF_E_FORMAT), the string size limit. */
/* ascii() of a repr already made: the UTF-8 text s[0..n) appended to b with each non-ASCII code point as \xhh,
 * \uhhhh or \Uhhhhhhhh (strformat.c). */
void jinja_put_ascii(jbuf *b, const char *s, size_t n);
cmf_status jinja_str_format(jctx *c, const jnode *at, jv fmt, const jv *pos, size_t npos, const jargs *kw,
                            const jv *map, jv *out);
cmf_status jb_strip(jv s, const jv *chars, int left, int right, jv *out);
const char *jb_find_sub(const char *h, size_t hn, const char *n, size_t nn);
/* str.split / str.replace: the pieces of split count against the list-items budget (c->items); replace's result
 * keeps the string size limit while it is built. */
cmf_status jb_split(jctx *c, const jnode *at, jv s, const jv *sep, const jv *maxsplit, jv *out);
cmf_status jb_replace(jctx *c, const jnode *at, jv s, const jv *old, const jv *new_, const jv *count, jv *out);
int jb_prefix_match(jv s, jv prefix, int suffix);
/* list(v): a list as is (a tuple copied), a dict's keys, a string's characters (which count against the list-items
 * budget: 'x' * 16000000 | list made 16 million strings), undefined: []; others are an error. */
cmf_status jb_to_list(jctx *c, const jnode *at, jv v, jv *out);
/* What the list-items budget counts, for its sandbox error. */
#define JINJA_ITEMS_WHAT "list items made by range(), +, *, list() and split()"
/* Charges n list items against c->items (lim.max_iterations); the sandbox error when that is spent. */
cmf_status jinja_charge_items(jctx *c, const jnode *at, size_t n);
cmf_status jb_dict_items(jv d, jv *out);
cmf_status jb_attr_path(jctx *c, const jnode *at, jv v, const char *path, jv *out);
cmf_status jb_test(jctx *c, const jnode *at, const char *name, jv v, const jv *arg, int *r);

/* strmethods.c: the str methods ljust rjust center zfill expandtabs find rfind index rindex count partition
 * rpartition splitlines removeprefix removesuffix casefold isdigit isdecimal isalpha isalnum isspace islower isupper
 * with CPython 3.11's semantics. jinja_str_method_name: the method's name in static storage, or NULL when it is
 * none of these. jinja_str_method: its result in *out (owned); errors: Python's TypeError/ValueError texts
 * (CMF_E_FORMAT), widths past the string size limit (CMF_E_UNSUPPORTED, before any padding is made), an unknown
 * name (CMF_E_UNSUPPORTED). */
const char *jinja_str_method_name(const char *name);
cmf_status jinja_str_method(jctx *c, const jnode *at, jv s, const char *m, const jargs *a, jv *out);

/* filters_more.c: the jinja2 3.1 filters truncate, wordwrap (wordwrap.c), groupby, slice, striptags, urlencode and
 * filesizeformat.
 * jinja_filter_more_has: 1 when `f` is one of them. jinja_filter_more: the filter's owned result in *out; errors:
 * jinja2's argument checks (CMF_E_FORMAT: truncate's length < len(end) or leeway < 0, wordwrap's width <= 0,
 * slice(0), groupby without an attribute, keys that cannot be compared), the string size and list-items limits
 * (CMF_E_UNSUPPORTED). groupby gives (grouper, list) tuples marked JINJA_GROUP_TUPLE, whose .grouper and .list
 * jinja_getattr reads (jinja2's _GroupTuple prints as a plain tuple). */
#define JINJA_GROUP_TUPLE 2
int jinja_filter_more_has(const char *f);
cmf_status jinja_filter_more(jctx *c, const jnode *at, const char *f, jv in, const jargs *a, jv *out);
cmf_status jinja_wordwrap(jctx *c, const jnode *at, jv in, const jargs *a, jv *out);

/* format.c. Python's int(s, base) on the ASCII text s[0..n) (surrounding whitespace, sign, base prefixes 0x/0o/0b,
 * single underscores between digits; base 0: from the prefix): 0 and *out, -1 when it is not an integer of that
 * base, -2 when it is one outside int64. */
int jinja_parse_int(const char *s, size_t n, int base, int64_t *out);
/* Python's float(s) on the ASCII text s[0..n) (surrounding whitespace, sign, inf/infinity/nan in any case, single
 * underscores between digits): 0 and *out, -1 when it is not a float literal. */
int jinja_parse_float(const char *s, size_t n, double *out);
/* `fmt % args` as Python's printf-style formatting (%s %r %c %d %i %u %x %X %o %e %E %f %F %g %G %%, flags -+ #0,
 * width and precision, `*`, %(key)s from a dict); a tuple gives the arguments, another value is the one argument.
 * Errors (CMF_E_FORMAT) carry CPython's TypeError texts; results keep the string size limit. */
cmf_status jinja_percent_format(jctx *c, const jnode *at, jv fmt, jv args, jv *out);
/* The filters int(default=0, base=10), float(default=0.0), center(width=80) and format(*args, **kwargs) of
 * jinja2 3.1 (filters.py do_int, do_float, do_center, do_format). center gets a string. */
cmf_status jinja_filter_int(jctx *c, const jnode *at, jv in, const jargs *a, jv *out);
cmf_status jinja_filter_float(jctx *c, const jnode *at, jv in, const jargs *a, jv *out);
cmf_status jinja_filter_center(jctx *c, const jnode *at, jv s, const jargs *a, jv *out);
cmf_status jinja_filter_format(jctx *c, const jnode *at, jv in, const jargs *a, jv *out);

#endif
