/* format.c — Python's printf-style string formatting (`str % args` and jinja2 3.1's `format` filter, which is
 * `str(value) % (kwargs or args)`), the `int` and `float` filters (jinja2 do_int / do_float: Python's int(s, base)
 * and float(s) parsing, kept within int64: a value outside it is an error, never a wrapped one) and `center`.
 * Semantics: CPython 3 Objects/unicodeobject.c (PyUnicode_Format), Objects/longobject.c (int from a string) and
 * Python/pystrtod.c (float from a string), read as documented behaviour and checked against jinja2 output in
 * tests/template/data/cases.json. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "template/eval.h"
#include "util/error.h"

#define NOMEM() cmf_err(CMF_E_NOMEM, "template render")
#define TRY(x) do { cmf_status st_ = (x); if (st_) return st_; } while (0)

/* ---- numbers from strings ---- */

static int digit_val(char ch) {
    if (ch >= '0' && ch <= '9') return ch - '0';
    if (ch >= 'a' && ch <= 'z') return ch - 'a' + 10;
    if (ch >= 'A' && ch <= 'Z') return ch - 'A' + 10;
    return 99;
}

/* s[*i..*n) without the Python whitespace (str.isspace) at either end, as int() and float() strip it. */
static void trim_space(const char *s, size_t *i, size_t *n) {
    size_t k, b;
    while (*i < *n && jb_space_at(s + *i, *n - *i, &k)) *i += k;
    while (*n > *i && jinja_cp_is_space(jinja_prev_cp(s + *i, *n - *i, &b))) *n = *i + b;
}

int jinja_parse_int(const char *s, size_t n, int base, int64_t *out) {
    size_t i = 0;
    trim_space(s, &i, &n);
    int neg = 0;
    if (i < n && (s[i] == '+' || s[i] == '-')) neg = s[i++] == '-';
    if (base != 0 && (base < 2 || base > 36)) return -1;
    int prefixed = 0;
    if (n - i >= 2 && s[i] == '0') {
        char p = (char)(s[i + 1] | 0x20);
        int pb = p == 'x' ? 16 : p == 'o' ? 8 : p == 'b' ? 2 : 0;
        if (pb && (base == 0 || base == pb)) { base = pb; i += 2; prefixed = 1; }
    }
    if (base == 0) { /* no prefix: decimal, and a leading zero only in a zero ("010" is refused) */
        base = 10;
        size_t j = i;
        while (j < n && (s[j] == '0' || s[j] == '_')) j++;
        if (i < n && s[i] == '0' && j < n) return -1;
    }
    if (prefixed && i < n && s[i] == '_') i++; /* "0x_1f" */
    if (i >= n) return -1;
    uint64_t mag = 0, lim = neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX;
    int over = 0;
    for (size_t j = i; j < n; j++) {
        if (s[j] == '_') {
            if (j == i || j + 1 >= n || s[j + 1] == '_') return -1; /* single underscores between digits */
            continue;
        }
        int d = digit_val(s[j]);
        if (d >= base) return -1;
        if (mag > (lim - (uint64_t)d) / (uint64_t)base) over = 1;
        else mag = mag * (uint64_t)base + (uint64_t)d;
    }
    if (over) return -2;
    *out = neg ? (mag == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)mag) : (int64_t)mag;
    return 0;
}

int jinja_parse_float(const char *s, size_t n, double *out) {
    size_t i = 0;
    trim_space(s, &i, &n);
    if (i >= n || n - i > 4096) return -1;
    char buf[4100];
    size_t o = 0, j = i;
    if (s[j] == '+' || s[j] == '-') buf[o++] = s[j++];
    size_t rest = n - j;
    static const char *const words[] = {"inf", "infinity", "nan"};
    for (int w = 0; w < 3; w++) {
        if (rest != strlen(words[w])) continue;
        size_t k = 0;
        while (k < rest && (s[j + k] | 0x20) == words[w][k]) k++;
        if (k == rest) { *out = w == 2 ? NAN : (o && buf[0] == '-' ? -INFINITY : INFINITY); return 0; }
    }
    /* digits [. digits] [e [sign] digits], single underscores only between two digits */
    int digits = 0, in_exp = 0, seen_dot = 0, exp_digits = 0;
    for (; j < n; j++) {
        char ch = s[j];
        if (ch >= '0' && ch <= '9') { buf[o++] = ch; if (in_exp) exp_digits++; else digits++; continue; }
        if (ch == '_') {
            if (j == i || j + 1 >= n || !(s[j - 1] >= '0' && s[j - 1] <= '9') || !(s[j + 1] >= '0' && s[j + 1] <= '9')) return -1;
            continue;
        }
        if (ch == '.' && !seen_dot && !in_exp) { seen_dot = 1; buf[o++] = ch; continue; }
        if ((ch == 'e' || ch == 'E') && !in_exp && digits) {
            in_exp = 1;
            buf[o++] = 'e';
            if (j + 1 < n && (s[j + 1] == '+' || s[j + 1] == '-')) buf[o++] = s[++j];
            continue;
        }
        return -1;
    }
    if (!digits || (in_exp && !exp_digits)) return -1;
    buf[o] = 0;
    *out = strtod(buf, NULL);
    return 0;
}

/* double -> int64 truncating toward zero; -1 for NaN, -2 for inf or outside int64. */
static int trunc_i64(double d, int64_t *out) {
    if (isnan(d)) return -1;
    if (!(d >= -9.223372036854775808e18 && d < 9.223372036854775808e18)) return -2; /* [-2^63, 2^63) */
    *out = (int64_t)d;
    return 0;
}

cmf_status jinja_filter_int(jctx *c, const jnode *at, jv in, const jargs *a, jv *out) {
    (void)c;
    const jv *def = jargs_get(a, 0, "default"), *basev = jargs_get(a, 1, "base");
    int base = basev && (basev->k == JV_INT || basev->k == JV_BOOL) ? (int)(basev->k == JV_INT ? (basev->u.i < -1 || basev->u.i > 99 ? -1 : basev->u.i) : basev->u.b) : 10;
    int64_t i;
    double d;
    /* jinja2: int(value[, base]); on ValueError/TypeError int(float(value)); on those (and OverflowError) the
     * default */
    if (in.k == JV_INT || in.k == JV_BOOL) { *out = jv_int(in.k == JV_INT ? in.u.i : in.u.b); return CMF_OK; }
    if (in.k == JV_FLOAT) {
        int r = trunc_i64(in.u.f, &i);
        if (r == 0) { *out = jv_int(i); return CMF_OK; }
        if (isinf(in.u.f)) return jinja_rt_err(at, "int: cannot convert float infinity to integer");
        if (r == -2) return jinja_rt_err(at, "int: %g is outside the 64-bit integer range", in.u.f);
    } else if (in.k == JV_STR) {
        int r = jinja_parse_int(in.u.s->s, in.u.s->len, base, &i);
        if (r == 0) { *out = jv_int(i); return CMF_OK; }
        if (r == -2) return jinja_rt_err(at, "int: '%.40s' is outside the 64-bit integer range", in.u.s->s);
        if (jinja_parse_float(in.u.s->s, in.u.s->len, &d) == 0) {
            r = trunc_i64(d, &i);
            if (r == 0) { *out = jv_int(i); return CMF_OK; }
            if (r == -2 && !isinf(d)) return jinja_rt_err(at, "int: '%.40s' is outside the 64-bit integer range", in.u.s->s);
        }
    }
    *out = def ? jv_retain(*def) : jv_int(0);
    return CMF_OK;
}

cmf_status jinja_filter_float(jctx *c, const jnode *at, jv in, const jargs *a, jv *out) {
    (void)c;
    (void)at;
    const jv *def = jargs_get(a, 0, "default");
    double d;
    if (jv_is_number(in)) { *out = jv_float(jv_num(in)); return CMF_OK; }
    if (in.k == JV_STR && jinja_parse_float(in.u.s->s, in.u.s->len, &d) == 0) { *out = jv_float(d); return CMF_OK; }
    *out = def ? jv_retain(*def) : jv_float(0.0);
    return CMF_OK;
}

/* ---- center ---- */

cmf_status jinja_filter_center(jctx *c, const jnode *at, jv s, const jargs *a, jv *out) {
    const jv *w = jargs_get(a, 0, "width");
    if (w && w->k != JV_INT && w->k != JV_BOOL) return jinja_rt_err(at, "center: width must be an integer");
    int64_t width = w ? (w->k == JV_INT ? w->u.i : w->u.b) : 80;
    int64_t len = (int64_t)utf8_count(s.u.s->s, s.u.s->len);
    if (width <= len) { *out = jv_retain(s); return CMF_OK; }
    if ((uint64_t)(width - len) > c->lim.max_output - s.u.s->len) return jinja_limit_err(at, "string size", c->lim.max_output);
    int64_t marg = width - len, left = marg / 2 + (marg & width & 1); /* CPython's pad() split */
    jbuf b = {.limit = c->lim.max_output};
    for (int64_t k = 0; k < left; k++) jbuf_put(&b, " ", 1);
    jbuf_put(&b, s.u.s->s, s.u.s->len);
    for (int64_t k = left; k < marg; k++) jbuf_put(&b, " ", 1);
    if (b.over) { jbuf_free(&b); return jinja_limit_err(at, "string size", c->lim.max_output); }
    return jb_ret_buf(out, &b);
}

/* ---- printf-style formatting ---- */

typedef struct fspec {
    int left, plus, space, alt, zero;
    int64_t width, prec; /* prec < 0: none */
    char type;
} fspec;

/* Pads `body` (n bytes, cp code points) to spec width: spaces, or zeros after the first `sign_len` bytes. */
static void put_padded(jbuf *b, const fspec *f, const char *body, size_t n, size_t cp, size_t sign_len, int zeros) {
    int64_t pad = f->width > (int64_t)cp ? f->width - (int64_t)cp : 0;
    if (f->left) {
        jbuf_put(b, body, n);
        for (int64_t k = 0; k < pad && !b->over; k++) jbuf_put(b, " ", 1);
    } else if (zeros) {
        jbuf_put(b, body, sign_len);
        for (int64_t k = 0; k < pad && !b->over; k++) jbuf_put(b, "0", 1);
        jbuf_put(b, body + sign_len, n - sign_len);
    } else {
        for (int64_t k = 0; k < pad && !b->over; k++) jbuf_put(b, " ", 1);
        jbuf_put(b, body, n);
    }
}

static cmf_status fmt_int(jctx *c, const jnode *at, jbuf *b, const fspec *f, jv arg) {
    int64_t v;
    char t = f->type;
    if (arg.k == JV_INT || arg.k == JV_BOOL) v = arg.k == JV_INT ? arg.u.i : arg.u.b;
    else if (arg.k == JV_FLOAT && (t == 'd' || t == 'i' || t == 'u')) {
        int r = trunc_i64(arg.u.f, &v);
        if (r == -1) return jinja_rt_err(at, "cannot convert float NaN to integer");
        if (r == -2) return jinja_rt_err(at, "%%%c format: %g is outside the 64-bit integer range", t, arg.u.f);
    } else if (t == 'd' || t == 'i' || t == 'u') {
        return jinja_rt_err(at, "%%%c format: a real number is required, not %s", t, jv_kind_name(arg));
    } else {
        return jinja_rt_err(at, "%%%c format: an integer is required, not %s", t, jv_kind_name(arg));
    }
    uint64_t mag = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
    int base = t == 'x' || t == 'X' ? 16 : t == 'o' ? 8 : 10;
    const char *dig = t == 'X' ? "0123456789ABCDEF" : "0123456789abcdef";
    char digits[70];
    int nd = 0;
    do { digits[nd++] = dig[mag % (uint64_t)base]; mag /= (uint64_t)base; } while (mag);
    int64_t prec = f->prec > (int64_t)c->lim.max_output ? (int64_t)c->lim.max_output : f->prec;
    jbuf body = {.limit = c->lim.max_output};
    if (v < 0) jbuf_put(&body, "-", 1);
    else if (f->plus) jbuf_put(&body, "+", 1);
    else if (f->space) jbuf_put(&body, " ", 1);
    if (f->alt && base != 10) jbuf_puts(&body, t == 'x' ? "0x" : t == 'X' ? "0X" : "0o");
    size_t sign_len = body.n;
    for (int64_t k = nd; k < prec && !body.over; k++) jbuf_put(&body, "0", 1);
    while (nd > 0) jbuf_put(&body, &digits[--nd], 1);
    cmf_status st = body.over ? jinja_limit_err(at, "string size", c->lim.max_output) : body.oom ? NOMEM() : CMF_OK;
    if (!st) put_padded(b, f, body.p, body.n, body.n, sign_len, f->zero);
    jbuf_free(&body);
    return st;
}

static cmf_status fmt_float(jctx *c, const jnode *at, jbuf *b, const fspec *f, jv arg) {
    if (!jv_is_number(arg)) return jinja_rt_err(at, "must be real number, not %s", jv_kind_name(arg));
    double d = jv_num(arg);
    if (!isfinite(d)) { /* Python: "inf" / "nan" (upper case for E F G), sign but never zero padding */
        int up = f->type == 'E' || f->type == 'F' || f->type == 'G';
        char s[8];
        snprintf(s, sizeof s, "%s%s", d < 0 ? "-" : f->plus ? "+" : f->space ? " " : "",
                 isnan(d) ? (up ? "NAN" : "nan") : (up ? "INF" : "inf"));
        put_padded(b, f, s, strlen(s), strlen(s), 0, 0);
        return CMF_OK;
    }
    int64_t prec = f->prec < 0 ? 6 : f->prec;
    if (prec > 1000 || f->width > (int64_t)c->lim.max_output) /* (CPython has no bound; 1000 digits is plenty) */
        return jinja_limit_err(at, "format precision / width", prec > 1000 ? 1000 : c->lim.max_output);
    char spec[32];
    snprintf(spec, sizeof spec, "%%%s%s%s%s.%d%c", f->plus ? "+" : "", f->space ? " " : "", f->alt ? "#" : "", "",
             (int)prec, f->type);
    int n = snprintf(NULL, 0, spec, d);
    if (n < 0) return jinja_rt_err(at, "cannot format %g", d);
    char *s = malloc((size_t)n + 1);
    if (!s) return NOMEM();
    snprintf(s, (size_t)n + 1, spec, d);
    size_t sign_len = s[0] == '-' || s[0] == '+' || s[0] == ' ';
    put_padded(b, f, s, (size_t)n, (size_t)n, sign_len, f->zero);
    free(s);
    return CMF_OK;
}

/* %s / %r / %c: text, cut to the precision and padded to the width in code points. */
static cmf_status fmt_text(jctx *c, const jnode *at, jbuf *b, const fspec *f, jv arg) {
    jbuf t = {.limit = c->lim.max_output};
    if (f->type == 'c') {
        if (arg.k == JV_STR) {
            if (utf8_count(arg.u.s->s, arg.u.s->len) != 1) return jinja_rt_err(at, "%%c requires int or char");
            jbuf_put(&t, arg.u.s->s, arg.u.s->len);
        } else if (arg.k == JV_INT || arg.k == JV_BOOL) {
            int64_t cp = arg.k == JV_INT ? arg.u.i : arg.u.b;
            if (cp < 0 || cp > 0x10FFFF) return jinja_rt_err(at, "%%c arg not in range(0x110000)");
            char e[4];
            size_t k;
            uint32_t u = (uint32_t)cp;
            if (u < 0x80) { e[0] = (char)u; k = 1; }
            else if (u < 0x800) { e[0] = (char)(0xC0 | (u >> 6)); e[1] = (char)(0x80 | (u & 0x3F)); k = 2; }
            else if (u < 0x10000) { e[0] = (char)(0xE0 | (u >> 12)); e[1] = (char)(0x80 | ((u >> 6) & 0x3F)); e[2] = (char)(0x80 | (u & 0x3F)); k = 3; }
            else { e[0] = (char)(0xF0 | (u >> 18)); e[1] = (char)(0x80 | ((u >> 12) & 0x3F)); e[2] = (char)(0x80 | ((u >> 6) & 0x3F)); e[3] = (char)(0x80 | (u & 0x3F)); k = 4; }
            jbuf_put(&t, e, k); /* a surrogate becomes the generalized UTF-8 the final output check refuses */
        } else {
            return jinja_rt_err(at, "%%c requires int or char");
        }
    } else if (f->type == 'r') {
        jv_repr(&t, arg);
    } else if (f->type == 'a') { /* ascii(): the repr with non-ASCII code points escaped */
        jbuf r = {.limit = c->lim.max_output};
        jv_repr(&r, arg);
        jinja_put_ascii(&t, r.p ? r.p : "", r.n);
        if (r.over || r.oom) { t.over |= r.over; t.oom |= r.oom; t.deep |= r.deep; }
        jbuf_free(&r);
    } else {
        jv_to_str(&t, arg);
    }
    cmf_status st = jinja_buf_status(c, at, &t, "string size");
    if (!st) {
        const char *p = t.p ? t.p : "";
        size_t n = t.n, cp = utf8_count(p, n);
        if (f->prec >= 0 && (size_t)f->prec < cp) { n = utf8_offset(p, n, (size_t)f->prec); cp = (size_t)f->prec; }
        put_padded(b, f, p, n, cp, 0, 0);
    }
    jbuf_free(&t);
    return st;
}

cmf_status jinja_percent_format(jctx *c, const jnode *at, jv fmt, jv args, jv *out) {
    const char *s = fmt.u.s->s;
    size_t n = fmt.u.s->len, ai = 0;
    int tuple = args.k == JV_LIST && args.u.l->tuple;
    /* CPython: a non-tuple argument with item access (dict, list) is "the mapping": unused, it is no error */
    int mapping = !tuple && (args.k == JV_DICT || args.k == JV_NS || args.k == JV_LIST);
    size_t nargs = tuple ? args.u.l->n : 1;
    jbuf b = {.limit = c->lim.max_output};
    cmf_status st = CMF_OK;
    for (size_t i = 0; i < n && !st;) {
        if (s[i] != '%') {
            const char *q = memchr(s + i, '%', n - i);
            size_t run = q ? (size_t)(q - (s + i)) : n - i;
            jbuf_put(&b, s + i, run);
            i += run;
            continue;
        }
        i++;
        fspec f = {.prec = -1};
        jv keyed = jv_undef(NULL);
        int has_key = 0;
        if (i < n && s[i] == '(') {
            size_t depth = 1, k0 = ++i;
            while (i < n && depth) { if (s[i] == '(') depth++; else if (s[i] == ')') depth--; i++; }
            if (depth) { st = jinja_rt_err(at, "incomplete format key"); break; }
            if (args.k != JV_DICT && args.k != JV_NS) { st = jinja_rt_err(at, "format requires a mapping"); break; }
            const jv *v = jv_dict_get(args, s + k0, i - 1 - k0);
            if (!v) { st = jinja_rt_err(at, "format: key '%.*s' not found", (int)(i - 1 - k0 > 64 ? 64 : i - 1 - k0), s + k0); break; }
            keyed = *v;
            has_key = 1;
        }
        for (; i < n && strchr("-+ #0", s[i]); i++) {
            if (s[i] == '-') f.left = 1;
            else if (s[i] == '+') f.plus = 1;
            else if (s[i] == ' ') f.space = 1;
            else if (s[i] == '#') f.alt = 1;
            else f.zero = 1;
        }
        for (int part = 0; part < 2 && !st; part++) { /* width, then '.' precision */
            int64_t *dst = part ? &f.prec : &f.width;
            if (part) { if (i >= n || s[i] != '.') break; i++; *dst = 0; }
            if (i < n && s[i] == '*') {
                i++;
                const jv *w = tuple && ai < nargs ? &args.u.l->v[ai] : NULL;
                if (!w) { st = jinja_rt_err(at, "* wants int"); break; }
                ai++;
                if (w->k != JV_INT && w->k != JV_BOOL) { st = jinja_rt_err(at, "* wants int"); break; }
                *dst = w->k == JV_INT ? w->u.i : w->u.b;
                if (*dst < -(int64_t)c->lim.max_output) { st = jinja_limit_err(at, "string size", c->lim.max_output); break; }
                if (!part && *dst < 0) { f.left = 1; *dst = -*dst; }
                if (part && *dst < 0) *dst = 0;
            } else {
                while (i < n && s[i] >= '0' && s[i] <= '9') {
                    if (*dst > (int64_t)c->lim.max_output) { st = jinja_limit_err(at, "string size", c->lim.max_output); break; }
                    *dst = *dst * 10 + (s[i++] - '0');
                }
            }
        }
        if (st) break;
        if (f.width > (int64_t)c->lim.max_output) { st = jinja_limit_err(at, "string size", c->lim.max_output); break; }
        while (i < n && (s[i] == 'h' || s[i] == 'l' || s[i] == 'L')) i++;
        if (i >= n) { st = jinja_rt_err(at, "incomplete format"); break; }
        f.type = s[i++];
        if (f.type == '%') { jbuf_put(&b, "%", 1); continue; }
        jv arg;
        if (has_key) arg = keyed;
        else if (tuple && ai < nargs) arg = args.u.l->v[ai++];
        else if (!tuple && ai == 0) { arg = args; ai++; }
        else { st = jinja_rt_err(at, "not enough arguments for format string"); break; }
        switch (f.type) {
        case 's': case 'r': case 'a': case 'c': st = fmt_text(c, at, &b, &f, arg); break;
        case 'd': case 'i': case 'u': case 'x': case 'X': case 'o': st = fmt_int(c, at, &b, &f, arg); break;
        case 'e': case 'E': case 'f': case 'F': case 'g': case 'G': st = fmt_float(c, at, &b, &f, arg); break;
        default:
            st = jinja_rt_err(at, "unsupported format character '%c' (0x%x) at index %zu", f.type, (unsigned char)f.type, i - 1);
        }
    }
    if (!st && ai < nargs && !mapping) st = jinja_rt_err(at, "not all arguments converted during string formatting");
    if (!st && b.over) st = jinja_limit_err(at, "string size", c->lim.max_output);
    if (st) { jbuf_free(&b); return st; }
    return jb_ret_buf(out, &b);
}

cmf_status jinja_filter_format(jctx *c, const jnode *at, jv in, const jargs *a, jv *out) {
    if (a->npos && a->nkw) return jinja_rt_err(at, "format: can't handle positional and keyword arguments at the same time");
    jv s, args = a->nkw ? jv_dict_new() : jv_list_new(a->npos);
    if (jv_is_oom(args)) return NOMEM();
    for (size_t i = 0; i < a->nkw; i++)
        if (jv_dict_set(args, a->kwn[i], strlen(a->kwn[i]), jv_retain(a->kwv[i]))) { jv_release(args); return NOMEM(); }
    for (size_t i = 0; i < a->npos; i++) jv_list_push(args, jv_retain(a->pos[i])); /* capacity reserved above */
    if (args.k == JV_LIST) args.u.l->tuple = 1;
    int over;
    s = jv_stringify(in, c->lim.max_output, &over);
    cmf_status st = over == 2 ? jinja_deep_err(at) : over ? jinja_limit_err(at, "string size", c->lim.max_output)
                  : jv_is_oom(s) ? NOMEM() : CMF_OK;
    if (!st) st = jinja_percent_format(c, at, s, args, out);
    if (!over) jv_release(s);
    jv_release(args);
    return st;
}
