/* value.c — Python-like values for the Jinja engine: construction, reference counting, dicts with Python's key
 * rules, truthiness, equality, output buffers, UTF-8 helpers and cJSON input (str()/repr()/json.dumps: repr.c).
 * Semantics: CPython 3. */
#include "template/value.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char OOM_NAME[] = "<out of memory>";

jv jv_undef(const char *name) { jv v = {.k = JV_UNDEF}; v.u.name = name; return v; }
jv jv_none(void) { jv v = {.k = JV_NONE}; return v; }
jv jv_bool(int b) { jv v = {.k = JV_BOOL}; v.u.b = b != 0; return v; }
jv jv_int(int64_t i) { jv v = {.k = JV_INT}; v.u.i = i; return v; }
jv jv_float(double f) { jv v = {.k = JV_FLOAT}; v.u.f = f; return v; }
int jv_is_oom(jv v) { return v.k == JV_UNDEF && v.u.name == OOM_NAME; }

jv jv_strn(const char *s, size_t n) {
    jv_str *p = malloc(sizeof(*p) + n + 1);
    if (!p) return jv_undef(OOM_NAME);
    p->rc = 1;
    p->len = n;
    if (n && s) memcpy(p->s, s, n); /* s == NULL: caller fills the n bytes */
    p->s[n] = 0;
    jv v = {.k = JV_STR};
    v.u.s = p;
    return v;
}
jv jv_cstr(const char *s) { return jv_strn(s, strlen(s)); }

jv jv_list_new(size_t cap) {
    jv_list *l = calloc(1, sizeof(*l));
    if (!l) return jv_undef(OOM_NAME);
    l->rc = 1;
    if (cap > ((size_t)1 << 40) / sizeof(jv)) { free(l); return jv_undef(OOM_NAME); } /* (cap * sizeof(jv) overflowed) */
    if (cap) {
        l->v = malloc(cap * sizeof(jv));
        if (!l->v) { free(l); return jv_undef(OOM_NAME); }
        l->cap = cap;
    }
    jv v = {.k = JV_LIST};
    v.u.l = l;
    return v;
}

jv jv_dict_new(void) {
    jv_dict *d = calloc(1, sizeof(*d));
    if (!d) return jv_undef(OOM_NAME);
    d->rc = 1;
    jv v = {.k = JV_DICT};
    v.u.d = d;
    return v;
}

jv jv_retain(jv v) {
    switch (v.k) {
    case JV_STR: v.u.s->rc++; break;
    case JV_LIST: v.u.l->rc++; break;
    case JV_DICT: case JV_NS: v.u.d->rc++; break;
    case JV_MACRO: v.u.m->rc++; break;
    case JV_METHOD: v.u.meth->rc++; break;
    default: break;
    }
    return v;
}

/* Drops one reference; a container whose count reaches zero releases its items from a work list, not by recursion
 * (freeing a list nested 300,000 deep recursed that deep). */
void jv_release(jv v) {
    jv stack[64], *st = stack; /* grows onto the heap for wide or deep values */
    size_t n = 0, cap = 64;
    for (;;) {
        switch (v.k) {
        case JV_STR:
            if (--v.u.s->rc == 0) free(v.u.s);
            break;
        case JV_LIST: case JV_DICT: case JV_NS: {
            int list = v.k == JV_LIST;
            int *rc = list ? &v.u.l->rc : &v.u.d->rc;
            if (--*rc != 0) break;
            size_t cnt = list ? v.u.l->n : v.u.d->n;
            jv *items = list ? v.u.l->v : v.u.d->v;
            if (n + cnt > cap) {
                size_t nc = cap * 2;
                while (nc < n + cnt) nc *= 2;
                jv *ns = st == stack ? malloc(nc * sizeof(jv)) : realloc(st, nc * sizeof(jv));
                if (!ns) { /* no memory for the work list: release these items by recursion instead */
                    for (size_t i = 0; i < cnt; i++) jv_release(items[i]);
                    cnt = 0;
                } else {
                    if (st == stack) memcpy(ns, stack, n * sizeof(jv));
                    st = ns;
                    cap = nc;
                }
            }
            for (size_t i = 0; i < cnt; i++) st[n++] = items[i];
            if (list) {
                free(v.u.l->v);
                free(v.u.l);
            } else {
                for (size_t i = 0; i < v.u.d->n; i++) free(v.u.d->k[i]);
                free(v.u.d->h);
                free(v.u.d->k);
                free(v.u.d->v);
                free(v.u.d);
            }
            break;
        }
        case JV_MACRO:
            if (--v.u.m->rc == 0) { jv_release(v.u.m->caller); free(v.u.m); }
            break;
        case JV_METHOD:
            if (--v.u.meth->rc == 0) { jv_release(v.u.meth->self); free(v.u.meth); }
            break;
        default: break;
        }
        if (n == 0) break;
        v = st[--n];
    }
    if (st != stack) free(st);
}

/* Whether v is, or may hold, a namespace (the cycle check's filter). */
static int may_hold_ns(jv v) {
    return v.k == JV_NS || v.k == JV_METHOD || (v.k == JV_LIST && v.u.l->has_ns) || (v.k == JV_DICT && v.u.d->has_ns);
}

int jv_list_push(jv lv, jv item) {
    jv_list *l = lv.u.l;
    if (may_hold_ns(item)) l->has_ns = 1;
    if (l->n == l->cap) {
        size_t nc = l->cap ? l->cap * 2 : 8;
        jv *nv = realloc(l->v, nc * sizeof(jv));
        if (!nv) { jv_release(item); return -1; }
        l->v = nv;
        l->cap = nc;
    }
    l->v[l->n++] = item;
    return 0;
}

static size_t key_hash(const char *key, size_t klen) { /* FNV-1a */
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < klen; i++) h = (h ^ (unsigned char)key[i]) * 1099511628211ull;
    return (size_t)(h ^ (h >> 29));
}

/* Puts entry i into the hash index (which has a free slot: hcap >= 2 n). */
static void hash_put(jv_dict *d, size_t i) {
    size_t m = d->hcap - 1, j = key_hash(d->k[i]->s, d->k[i]->len) & m;
    while (d->h[j]) j = (j + 1) & m;
    d->h[j] = i + 1;
}

/* (Re)builds the index for at least `n` entries; -1 on allocation failure (the dict stays valid, unindexed). */
static int hash_build(jv_dict *d, size_t n) {
    size_t cap = 64;
    while (cap < 2 * n) cap *= 2;
    size_t *h = calloc(cap, sizeof(size_t));
    if (!h) return -1;
    free(d->h);
    d->h = h;
    d->hcap = cap;
    for (size_t i = 0; i < d->n; i++) hash_put(d, i);
    return 0;
}

static const jv *dict_get_raw(jv dv, const char *key, size_t klen) {
    jv_dict *d = dv.u.d;
    if (d->h) {
        size_t m = d->hcap - 1;
        for (size_t j = key_hash(key, klen) & m; d->h[j]; j = (j + 1) & m) {
            const jv_str *k = d->k[d->h[j] - 1];
            if (k->len == klen && memcmp(k->s, key, klen) == 0) return &d->v[d->h[j] - 1];
        }
        return NULL;
    }
    for (size_t i = 0; i < d->n; i++)
        if (d->k[i]->len == klen && memcmp(d->k[i]->s, key, klen) == 0) return &d->v[i];
    return NULL;
}

static int dict_set_raw(jv dv, const char *key, size_t klen, jv val) {
    jv_dict *d = dv.u.d;
    if (may_hold_ns(val)) d->has_ns = 1;
    jv *slot = (jv *)dict_get_raw(dv, key, klen);
    if (slot) { jv_release(*slot); *slot = val; return 0; }
    if (d->n == d->cap) {
        size_t nc = d->cap ? d->cap * 2 : 8;
        jv_str **nk = realloc(d->k, nc * sizeof(*nk));
        if (!nk) { jv_release(val); return -1; }
        d->k = nk;
        jv *nv = realloc(d->v, nc * sizeof(jv));
        if (!nv) { jv_release(val); return -1; }
        d->v = nv;
        d->cap = nc;
    }
    jv_str *k = malloc(sizeof(*k) + klen + 1);
    if (!k) { jv_release(val); return -1; }
    k->rc = 1;
    k->len = klen;
    memcpy(k->s, key, klen);
    k->s[klen] = 0;
    d->k[d->n] = k;
    d->v[d->n++] = val;
    if (d->n > JV_DICT_LINEAR) {
        if (!d->h || 2 * d->n > d->hcap) {
            if (hash_build(d, d->n)) { /* no index: lookups stay linear, still correct */
                free(d->h);
                d->h = NULL;
                d->hcap = 0;
            }
        } else {
            hash_put(d, d->n - 1);
        }
    }
    return 0;
}

/* ---- keys that are not strings ----
 * Python dicts take any hashable key; a dict literal may use ints, floats, bools and None. Such a key is stored as
 * the string TAG + canonical text + type letter: equal numbers (1, 1.0, True) share the canonical text (the decimal
 * integer, or a float's repr), and the letter keeps the first key's type (i, f, b, z for -0.0; None is TAG "N" n). A string key
 * that starts with TAG is stored as TAG + key + 's', so that no string collides with an encoded key. */
#define KEY_TAG '\x02'

/* The canonical text of number/None key `k` into buf (cap >= 48); its letter into *type; 0, or -1 when unhashable. */
static int key_canon(jv k, char *buf, size_t cap, size_t *n, char *type) {
    if (k.k == JV_NONE) { *n = (size_t)snprintf(buf, cap, "%cN", KEY_TAG); *type = 'n'; return 0; }
    if (k.k == JV_BOOL || k.k == JV_INT) {
        *n = (size_t)snprintf(buf, cap, "%c%lld", KEY_TAG, (long long)(k.k == JV_INT ? k.u.i : k.u.b));
        *type = k.k == JV_INT ? 'i' : 'b';
        return 0;
    }
    if (k.k != JV_FLOAT) return -1;
    double f = k.u.f;
    *type = f == 0 && signbit(f) ? 'z' : 'f'; /* (-0.0 equals 0 but prints as itself) */
    if (f == floor(f) && fabs(f) < 9.2e18) { *n = (size_t)snprintf(buf, cap, "%c%lld", KEY_TAG, (long long)f); return 0; }
    jbuf b = {0};
    jv_float_repr(&b, f);
    *n = (size_t)snprintf(buf, cap, "%c%.*s", KEY_TAG, (int)(b.n < 40 ? b.n : 40), b.p ? b.p : "");
    jbuf_free(&b);
    return 0;
}

/* The stored slot of number/None key k (any of the equal types), or NULL. */
static const jv *get_canon(jv d, jv k, int *bad) {
    char buf[64];
    size_t n;
    char type;
    *bad = key_canon(k, buf, sizeof buf - 1, &n, &type) != 0;
    if (*bad) return NULL;
    static const char TYPES[] = "ibfzn";
    for (const char *t = TYPES; *t; t++) {
        buf[n] = *t;
        const jv *v = dict_get_raw(d, buf, n + 1);
        if (v) return v;
    }
    return NULL;
}

/* A string key's stored form: itself, or TAG + key + 's' when it starts with TAG (*tmp: malloc'd then). */
static const char *str_key(const char *key, size_t klen, size_t *n, char **tmp) {
    *tmp = NULL;
    *n = klen;
    if (klen == 0 || key[0] != KEY_TAG) return key;
    *tmp = malloc(klen + 3);
    if (!*tmp) return NULL;
    (*tmp)[0] = KEY_TAG;
    memcpy(*tmp + 1, key, klen);
    (*tmp)[klen + 1] = 's';
    *n = klen + 2;
    return *tmp;
}

const jv *jv_dict_get(jv dv, const char *key, size_t klen) {
    size_t n;
    char *tmp;
    const char *k = str_key(key, klen, &n, &tmp);
    const jv *r = k ? dict_get_raw(dv, k, n) : NULL;
    free(tmp);
    return r;
}

int jv_dict_set(jv dv, const char *key, size_t klen, jv val) {
    size_t n;
    char *tmp;
    const char *k = str_key(key, klen, &n, &tmp);
    if (!k) { jv_release(val); return -1; }
    int r = dict_set_raw(dv, k, n, val);
    free(tmp);
    return r;
}

const jv *jv_dict_get_key(jv d, jv key) {
    if (key.k == JV_STR) return jv_dict_get(d, key.u.s->s, key.u.s->len);
    int bad;
    return get_canon(d, key, &bad);
}

int jv_dict_set_key(jv d, jv key, jv val) {
    if (key.k == JV_STR) return jv_dict_set(d, key.u.s->s, key.u.s->len, val);
    int bad;
    jv *slot = (jv *)get_canon(d, key, &bad);
    if (bad) { jv_release(val); return -2; }
    if (slot) { /* an equal key keeps its type (Python: {1: 'a', True: 'b'} is {1: 'b'}) */
        if (may_hold_ns(val)) d.u.d->has_ns = 1;
        jv_release(*slot);
        *slot = val;
        return 0;
    }
    char buf[64];
    size_t n;
    char type;
    key_canon(key, buf, sizeof buf - 1, &n, &type);
    buf[n] = type;
    return dict_set_raw(d, buf, n + 1, val);
}

int jv_dict_key_is_str(const jv_dict *d, size_t i) {
    const jv_str *k = d->k[i];
    return k->len == 0 || k->s[0] != KEY_TAG || k->s[k->len - 1] == 's';
}

jv jv_dict_key(const jv_dict *d, size_t i) {
    const jv_str *k = d->k[i];
    if (k->len == 0 || k->s[0] != KEY_TAG) return jv_strn(k->s, k->len);
    const char *body = k->s + 1;
    switch (k->s[k->len - 1]) {
    case 's': return jv_strn(body, k->len - 2);
    case 'n': return jv_none();
    case 'b': return jv_bool(body[0] == '1');
    case 'i': return jv_int(strtoll(body, NULL, 10));
    case 'z': return jv_float(-0.0);
    default: return jv_float(strtod(body, NULL)); /* (the text ends at the type letter: strtod stops there) */
    }
}

int jv_truthy(jv v) {
    switch (v.k) {
    case JV_UNDEF: case JV_NONE: return 0;
    case JV_BOOL: return v.u.b;
    case JV_INT: return v.u.i != 0;
    case JV_FLOAT: return v.u.f != 0.0;
    case JV_STR: return v.u.s->len != 0;
    case JV_LIST: return v.u.l->n != 0;
    case JV_DICT: return v.u.d->n != 0;
    default: return 1;
    }
}

int jv_is_number(jv v) { return v.k == JV_BOOL || v.k == JV_INT || v.k == JV_FLOAT; }
double jv_num(jv v) {
    return v.k == JV_FLOAT ? v.u.f : v.k == JV_INT ? (double)v.u.i : v.k == JV_BOOL ? v.u.b : 0.0;
}

static int equal_at(jv a, jv b, size_t *steps, int depth) {
    if (*steps == 0) return -1;
    if (depth > JV_MAX_DEPTH) return -2;
    (*steps)--;
    if (jv_is_number(a) && jv_is_number(b)) {
        if (a.k != JV_FLOAT && b.k != JV_FLOAT) {
            int64_t x = a.k == JV_INT ? a.u.i : a.u.b, y = b.k == JV_INT ? b.u.i : b.u.b;
            return x == y;
        }
        if (a.k == JV_FLOAT && b.k == JV_FLOAT) return a.u.f == b.u.f;
        /* int vs float: exact, as Python compares them (2^53 + 1 != 2^53 as a float) */
        double f = a.k == JV_FLOAT ? a.u.f : b.u.f;
        int64_t i = a.k == JV_FLOAT ? (b.k == JV_INT ? b.u.i : b.u.b) : (a.k == JV_INT ? a.u.i : a.u.b);
        if (!(f >= -9.223372036854775808e18 && f < 9.223372036854775808e18) || f != floor(f)) return 0;
        return (int64_t)f == i;
    }
    if (a.k != b.k) return 0;
    if (a.k == JV_LIST && !a.u.l->tuple != !b.u.l->tuple) return 0; /* Python: a tuple never equals a list */
    /* the same list or dict: equal without a walk, as Python's identity shortcut */
    if ((a.k == JV_LIST && a.u.l == b.u.l) || ((a.k == JV_DICT || a.k == JV_NS) && a.u.d == b.u.d)) return 1;
    switch (a.k) {
    case JV_UNDEF: case JV_NONE: return 1;
    case JV_STR:
        if (a.u.s->len != b.u.s->len) return 0;
        if (a.u.s->len / 64 > *steps) return -1; /* (comparing long strings is work: 64 bytes a step) */
        *steps -= a.u.s->len / 64;
        return memcmp(a.u.s->s, b.u.s->s, a.u.s->len) == 0;
    case JV_LIST:
        if (a.u.l->n != b.u.l->n) return 0;
        for (size_t i = 0; i < a.u.l->n; i++) {
            int r = equal_at(a.u.l->v[i], b.u.l->v[i], steps, depth + 1);
            if (r != 1) return r;
        }
        return 1;
    case JV_DICT: case JV_NS:
        if (a.u.d->n != b.u.d->n) return 0;
        for (size_t i = 0; i < a.u.d->n; i++) {
            const jv *o = dict_get_raw(b, a.u.d->k[i]->s, a.u.d->k[i]->len);
            if (!o && !jv_dict_key_is_str(a.u.d, i)) { /* 1 and 1.0 are equal keys of another type letter */
                jv k = jv_dict_key(a.u.d, i);
                o = jv_dict_get_key(b, k);
                jv_release(k);
            }
            if (!o) return 0;
            int r = equal_at(a.u.d->v[i], *o, steps, depth + 1);
            if (r != 1) return r;
        }
        return 1;
    case JV_MACRO: return a.u.m == b.u.m;
    case JV_FUNC: return a.u.i == b.u.i;
    case JV_METHOD: return a.u.meth == b.u.meth;
    default: return 0;
    }
}

int jv_equal(jv a, jv b, size_t *steps) { return equal_at(a, b, steps, 0); }

static int reaches_at(jv v, const jv_dict *target, size_t *steps, int depth) {
    if (*steps == 0) return -1;
    (*steps)--;
    if (depth > JV_MAX_DEPTH) return -2;
    if ((v.k == JV_DICT || v.k == JV_NS) && v.u.d == target) return 1;
    if (!may_hold_ns(v) && !(v.k == JV_NS && v.u.d->has_ns)) return 0; /* nothing below can be a namespace */
    size_t cnt = v.k == JV_LIST ? v.u.l->n : v.k == JV_DICT || v.k == JV_NS ? v.u.d->n : 0;
    for (size_t i = 0; i < cnt; i++) {
        int r = reaches_at(v.k == JV_LIST ? v.u.l->v[i] : v.u.d->v[i], target, steps, depth + 1);
        if (r) return r;
    }
    if (v.k == JV_METHOD) return reaches_at(v.u.meth->self, target, steps, depth + 1);
    return 0;
}

int jv_reaches(jv v, const jv_dict *target, size_t *steps) { return reaches_at(v, target, steps, 0); }

const char *jv_kind_name(jv v) {
    if (v.k == JV_LIST && v.u.l->tuple) return "tuple";
    static const char *names[] = {"undefined", "NoneType", "bool",      "int",      "float",  "str",
                                  "list",      "dict",     "Namespace", "Macro",    "builtin_function", "method"};
    return names[v.k];
}

/* ---- buffers ---- */

void jbuf_put(jbuf *b, const char *s, size_t n) {
    if (b->over || b->oom || n == 0) return;
    if (b->limit && b->n + n > b->limit) { b->over = 1; return; }
    if (b->n + n + 1 > b->cap) {
        size_t nc = b->cap ? b->cap : 256;
        while (nc < b->n + n + 1) nc *= 2;
        char *np = realloc(b->p, nc);
        if (!np) { b->oom = 1; return; }
        b->p = np;
        b->cap = nc;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}
void jbuf_puts(jbuf *b, const char *s) { jbuf_put(b, s, strlen(s)); }
void jbuf_free(jbuf *b) { free(b->p); b->p = NULL; b->n = b->cap = 0; }

jv jv_stringify(jv v, size_t limit, int *over) {
    *over = 0;
    if (v.k == JV_STR) return jv_retain(v);
    jbuf b = {.limit = limit};
    jv_to_str(&b, v);
    if (b.over) { jbuf_free(&b); *over = b.deep ? 2 : 1; return jv_none(); }
    if (b.oom) { jbuf_free(&b); return jv_undef(OOM_NAME); }
    jv r = jv_strn(b.p ? b.p : "", b.n);
    jbuf_free(&b);
    return r;
}

size_t utf8_invalid_at(const char *s, size_t n) {
    const unsigned char *p = (const unsigned char *)s;
    for (size_t i = 0; i < n;) {
        unsigned c = p[i];
        if (c < 0x80) { i++; continue; }
        size_t k = c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3 : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
        if (!k || n - i < k) return i;
        unsigned lo = 0x80, hi = 0xBF; /* the second byte's range (RFC 3629 table) */
        if (c == 0xE0) lo = 0xA0;
        else if (c == 0xED) hi = 0x9F; /* surrogates */
        else if (c == 0xF0) lo = 0x90;
        else if (c == 0xF4) hi = 0x8F;
        if (p[i + 1] < lo || p[i + 1] > hi) return i;
        for (size_t j = 2; j < k; j++)
            if ((p[i + j] & 0xC0) != 0x80) return i;
        i += k;
    }
    return n;
}

size_t utf8_count(const char *s, size_t n) {
    size_t c = 0;
    for (size_t i = 0; i < n; i++)
        if (((unsigned char)s[i] & 0xC0) != 0x80) c++;
    return c;
}

size_t utf8_offset(const char *s, size_t n, size_t cp) {
    size_t c = 0;
    for (size_t i = 0; i < n; i++) {
        if (((unsigned char)s[i] & 0xC0) != 0x80) {
            if (c == cp) return i;
            c++;
        }
    }
    return n;
}

jv jv_from_cjson(const cJSON *j) {
    if (!j || cJSON_IsNull(j)) return jv_none();
    if (cJSON_IsBool(j)) return jv_bool(cJSON_IsTrue(j));
    if (cJSON_IsNumber(j)) {
        double d = j->valuedouble;
        if (d == floor(d) && fabs(d) < 9.007199254740992e15) return jv_int((int64_t)d);
        return jv_float(d);
    }
    if (cJSON_IsString(j)) return jv_cstr(j->valuestring ? j->valuestring : "");
    if (cJSON_IsArray(j)) {
        jv l = jv_list_new((size_t)cJSON_GetArraySize(j));
        if (jv_is_oom(l)) return l;
        for (const cJSON *c = j->child; c; c = c->next) {
            jv x = jv_from_cjson(c);
            if (jv_is_oom(x) || jv_list_push(l, x)) { jv_release(l); return jv_undef(OOM_NAME); }
        }
        return l;
    }
    if (cJSON_IsObject(j)) {
        jv d = jv_dict_new();
        if (jv_is_oom(d)) return d;
        for (const cJSON *c = j->child; c; c = c->next) {
            jv x = jv_from_cjson(c);
            const char *k = c->string ? c->string : "";
            if (jv_is_oom(x) || jv_dict_set(d, k, strlen(k), x)) { jv_release(d); return jv_undef(OOM_NAME); }
        }
        return d;
    }
    return jv_none();
}
