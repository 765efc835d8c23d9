/* value.h — the dynamic values of the Jinja engine: Python-like none/bool/int/float/str/list/dict with reference
 * counting, plus the callables a template meets (macros, built-in functions, bound methods).
 *
 * Semantics follow Python as Jinja2 3.1 sees it (str(), repr(), truthiness, ==, json.dumps(ensure_ascii=False)),
 * because Hugging Face transformers renders chat templates with Python jinja2. Internal to src/template/. */
#ifndef CMF_TEMPLATE_VALUE_H
#define CMF_TEMPLATE_VALUE_H

#include <stddef.h>
#include <stdint.h>

typedef enum jv_kind {
    JV_UNDEF, /* Jinja's default (lenient) Undefined; u.name is the missing name (borrowed, may be NULL) */
    JV_NONE,
    JV_BOOL,
    JV_INT,
    JV_FLOAT,
    JV_STR,
    JV_LIST, /* also tuples (jv_list.tuple set) */
    JV_DICT, /* insertion-ordered, string keys */
    JV_NS,   /* namespace(...): a dict whose attributes may be assigned with `set ns.a = ...` */
    JV_MACRO,
    JV_FUNC,   /* built-in global function; u.i is its jfunc id */
    JV_METHOD, /* bound method: receiver + method name */
} jv_kind;

typedef struct jv_str jv_str;
typedef struct jv_list jv_list;
typedef struct jv_dict jv_dict;
typedef struct jv_macro jv_macro;
typedef struct jv_method jv_method;

typedef struct jv {
    jv_kind k;
    union {
        int b;
        int64_t i;
        double f;
        const char *name;
        jv_str *s;
        jv_list *l;
        jv_dict *d;
        jv_macro *m;
        jv_method *meth;
    } u;
} jv;

struct jv_str {
    int rc;
    size_t len; /* bytes, UTF-8 */
    char s[];   /* NUL-terminated */
};
struct jv_list {
    int rc;
    int tuple;  /* printed as (a, b) */
    int has_ns; /* an item is a namespace or a bound method, or holds one (kept by jv_list_push: the cycle check of
                 * `set ns.x = v` walks only such values) */
    size_t n, cap;
    jv *v;
};
struct jv_dict {
    int rc;
    int has_ns; /* as jv_list's, kept by jv_dict_set (it only grows: conservative after a value is replaced) */
    size_t n, cap;
    jv_str **k;
    jv *v;
    size_t *h;   /* hash index once n > JV_DICT_LINEAR: open addressing, slot i + 1 (0 = empty), hcap slots; NULL
                  * below (a 1M-key object in a request made every lookup, and so building it, linear) */
    size_t hcap;
};
#define JV_DICT_LINEAR 16
struct jnode;
struct jv_macro {
    int rc;
    const struct jnode *def; /* N_MACRO node (or the caller body of a call block) */
    jv caller;               /* JV_MACRO for `caller()` inside a call block, else JV_UNDEF */
};
struct jv_method {
    int rc;
    jv self;
    const char *name; /* borrowed from the AST */
};

/* ---- constructors (return owned values; NULL payload / JV_UNDEF-with-no-name on allocation failure is not
 * possible: allocation failure yields a JV_UNDEF with name "<out of memory>", which callers treat as error) --- */
jv jv_undef(const char *name);
jv jv_none(void);
jv jv_bool(int b);
jv jv_int(int64_t i);
jv jv_float(double f);
jv jv_strn(const char *s, size_t n);
jv jv_cstr(const char *s);
jv jv_list_new(size_t cap);
jv jv_dict_new(void);
int jv_is_oom(jv v);

jv jv_retain(jv v);
void jv_release(jv v);

/* Appends `item` (ownership taken) to list `l`; returns 0, -1 on allocation failure. */
int jv_list_push(jv l, jv item);
/* Sets d[key] = val (val's ownership taken; key copied); returns 0 or -1 on allocation failure. */
int jv_dict_set(jv d, const char *key, size_t klen, jv val);
/* Borrowed d[key] or NULL (a hash lookup in large dicts). */
const jv *jv_dict_get(jv d, const char *key, size_t klen);
/* Keys that are not strings (dict literals such as {1: 'a', none: 'b'}, as Python dicts): d[key] for a string,
 * int, float, bool or None key (equal numbers are one key: 1, 1.0 and True), borrowed, or NULL (also for an
 * unhashable key). jv_dict_set_key sets d[key] = val (val taken; an equal key keeps its first type); returns 0, -1 on
 * allocation failure, -2 when the key is unhashable (a list, dict, namespace, callable or Undefined). */
const jv *jv_dict_get_key(jv d, jv key);
int jv_dict_set_key(jv d, jv key, jv val);
/* Entry i's key as the template sees it (owned: a string, or the int/float/bool/None it was); 1 when it is a
 * string. Code that lists a dict's keys (iteration, items(), keys(), list) must use these, not d->k[i]. */
jv jv_dict_key(const jv_dict *d, size_t i);
int jv_dict_key_is_str(const jv_dict *d, size_t i);

/* ---- Python semantics ---- */
int jv_truthy(jv v);
/* How deep the recursive walks (==, ordering, str()/repr(), the namespace cycle check) follow nested lists and
 * dicts: deeper is an error, as Python's recursion limit makes it one (a list nested 300,000 deep, made in a loop,
 * overflowed the C stack). */
#define JV_MAX_DEPTH 1000
/* Python's a == b. Each pair of values visited costs one of *steps (a list holding one list twice, 40 deep, is 2^40
 * pairs); returns 1 or 0, -1 once *steps is spent, -2 when nested deeper than JV_MAX_DEPTH (the caller reports). */
int jv_equal(jv a, jv b, size_t *steps);
/* 1 when `target` (a namespace) is `v` or is reachable from v through lists, dicts and namespaces (set ns.x = v
 * would make a cycle, which reference counting never frees), else 0; -1 once *steps is spent, -2 too deep. */
int jv_reaches(jv v, const jv_dict *target, size_t *steps);
int jv_is_number(jv v); /* bool, int or float (Python's bool is an int) */
double jv_num(jv v);
const char *jv_kind_name(jv v);

/* A growable byte buffer with an optional limit (0 = none); `over` is set once an append would exceed it. */
typedef struct jbuf {
    char *p;
    size_t n, cap, limit;
    int over, oom;
    int deep; /* a value printed into it was nested deeper than JV_MAX_DEPTH (over is set too: writing stops) */
} jbuf;
void jbuf_put(jbuf *b, const char *s, size_t n);
void jbuf_puts(jbuf *b, const char *s);
void jbuf_free(jbuf *b);

/* str(v) appended to b (Undefined prints nothing). jv_to_str, jv_repr, jv_float_repr, jv_to_json: repr.c. */
void jv_to_str(jbuf *b, jv v);
/* repr(v) appended to b. */
void jv_repr(jbuf *b, jv v);
/* Python repr of a float (shortest round-trip digits, "1.0", "1e+20", "inf", "nan"). */
void jv_float_repr(jbuf *b, double f);
/* json.dumps options: indent (<0: None), sort_keys, separators (NULL: json's defaults ", " / ": ", or "," with an
 * indent), ensure_ascii (non-ASCII as \uXXXX escapes, surrogate pairs above U+FFFF). */
typedef struct jv_json_opts {
    int indent, sort, ascii;
    const char *indent_str; /* json.dumps(indent='\t'): these indent_len bytes per level instead of `indent` spaces
                             * (indent >= 0); NULL: spaces */
    size_t indent_len;
    const char *item_sep, *key_sep; /* NUL-terminated */
} jv_json_opts;
/* json.dumps(v, **o) appended to b; returns 0, or -1 for a value JSON cannot hold (undefined, macro): *bad names
 * its kind. */
int jv_to_json(jbuf *b, jv v, const jv_json_opts *o, const char **bad);
/* str(v) as a new string value, at most `limit` bytes (0: no limit); longer: *over = 1 and JV_NONE (the walk stops
 * there), nested deeper than JV_MAX_DEPTH: *over = 2 and JV_NONE. Out of memory: the OOM Undefined (jv_is_oom). */
jv jv_stringify(jv v, size_t limit, int *over);

/* Offset of the first byte of `s` (n bytes) that does not belong to a well-formed UTF-8 sequence (overlong forms,
 * surrogates U+D800..U+DFFF and values above U+10FFFF are not well formed), or n when all of it is valid. */
size_t utf8_invalid_at(const char *s, size_t n);
/* Number of Unicode code points of a UTF-8 string (invalid bytes count one each). */
size_t utf8_count(const char *s, size_t n);
/* Byte offset of code point `cp` (clamped to n). */
size_t utf8_offset(const char *s, size_t n, size_t cp);

struct cJSON;
/* Converts a cJSON tree to a value (numbers without a fraction that fit int64 become ints — cJSON keeps no
 * literal text, so JSON 1.0 becomes int 1). */
jv jv_from_cjson(const struct cJSON *j);

#endif
