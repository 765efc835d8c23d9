/* strformat.c — str.format(*args, **kwargs) and str.format_map(mapping) as a chat template calls them in jinja2's
 * sandbox: jinja2/sandbox.py wraps both in SandboxedFormatter, i.e. Python's string.Formatter (Lib/string.py
 * _vformat: '{}' auto-numbering, '{0}', '{name}', '{0.attr}' / '{0[key]}' through the sandbox's getattr / getitem,
 * conversions !s !r !a, nested fields in the spec two levels deep) over the built-in format(value, spec).
 *
 * format(value, spec) follows CPython 3.11 Python/formatter_unicode.c for str, int (bool: as int, but str() with an
 * empty spec) and float: [[fill]align][sign][z][#][0][width][,|_][.precision][type], types s; b c d n o x X; e E f F
 * g G n % and none (repr, or 'g' that keeps a '.0' when a precision is given); other values (None, lists, ...) take
 * an empty spec only (object.__format__) and print as str(). The 'n' type formats as in the C locale; a float
 * precision above 300 is refused (Python has no such limit). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "template/eval.h"
#include "util/error.h"

#define NOMEM() cmf_err(CMF_E_NOMEM, "template render")
#define TRY(x) do { cmf_status st_ = (x); if (st_) return st_; } while (0)

typedef struct fmtspec {
    const char *fill; /* one code point */
    size_t fill_len;
    char align, sign, type, group;
    int alt, zneg, fill_given;
    int64_t width, prec; /* -1: not given */
} fmtspec;

static int is_align(char ch) { return ch == '<' || ch == '>' || ch == '=' || ch == '^'; }

static size_t cp_bytes(const char *p, size_t n) {
    size_t k = 1;
    while (k < n && k < 4 && ((unsigned char)p[k] & 0xC0) == 0x80) k++;
    return k;
}

static int digits(const char *s, size_t n, size_t *i, int64_t *v) {
    size_t i0 = *i;
    *v = 0;
    while (*i < n && s[*i] >= '0' && s[*i] <= '9') {
        if (*v > 100000000) return -1; /* "Too many decimal digits in format string" */
        *v = *v * 10 + (s[(*i)++] - '0');
    }
    return *i > i0;
}

/* CPython parse_internal_render_format_spec; default_align '<' for str, '>' for numbers. */
static cmf_status parse_spec(const jnode *at, const char *s, size_t n, char default_align, fmtspec *f) {
    *f = (fmtspec){.fill = " ", .fill_len = 1, .align = default_align, .sign = 0, .width = -1, .prec = -1};
    size_t i = 0, k = n ? cp_bytes(s, n) : 0;
    int align_given = 0;
    if (n > k && is_align(s[k])) {
        f->fill = s;
        f->fill_len = k;
        f->align = s[k];
        i = k + 1;
        f->fill_given = align_given = 1;
    } else if (n && is_align(s[0])) {
        f->align = s[0];
        i = 1;
        align_given = 1;
    }
    if (i < n && (s[i] == '+' || s[i] == '-' || s[i] == ' ')) f->sign = s[i++];
    if (i < n && s[i] == 'z') { f->zneg = 1; i++; }
    if (i < n && s[i] == '#') { f->alt = 1; i++; }
    if (!f->fill_given && i < n && s[i] == '0') {
        f->fill = "0";
        f->fill_len = 1;
        if (!align_given && default_align == '>') f->align = '=';
        i++;
    }
    int64_t v;
    int d = digits(s, n, &i, &v);
    if (d < 0) return jinja_rt_err(at, "Too many decimal digits in format string");
    if (d) f->width = v;
    if (i < n && (s[i] == ',' || s[i] == '_')) {
        f->group = s[i++];
        if (i < n && (s[i] == ',' || s[i] == '_')) return jinja_rt_err(at, "Cannot specify both ',' and '_'.");
    }
    if (i < n && s[i] == '.') {
        i++;
        d = digits(s, n, &i, &v);
        if (d < 0) return jinja_rt_err(at, "Too many decimal digits in format string");
        if (!d) return jinja_rt_err(at, "Format specifier missing precision");
        f->prec = v;
    }
    if (n - i > 1) return jinja_rt_err(at, "Invalid format specifier '%.*s'", (int)n, s);
    f->type = i < n ? s[i] : 0;
    if (f->group) {
        const char *ok = f->group == ',' ? "defgEG%F" : "defgEG%FboxX";
        if (f->type && !strchr(ok, f->type))
            return jinja_rt_err(at, "Cannot specify '%c' with '%c'.", f->group, f->type);
    }
    return CMF_OK;
}

static void put_fill(jbuf *b, const fmtspec *f, int64_t k) {
    for (int64_t j = 0; j < k && !b->over; j++) jbuf_put(b, f->fill, f->fill_len);
}

/* body (chars code points) padded to the width: '<' '>' '^' (the odd one to the right). */
static void put_aligned(jbuf *b, const fmtspec *f, const char *body, size_t n, size_t chars) {
    int64_t pad = f->width > (int64_t)chars ? f->width - (int64_t)chars : 0;
    int64_t left = f->align == '>' ? pad : f->align == '^' ? pad / 2 : 0;
    put_fill(b, f, left);
    jbuf_put(b, body, n);
    put_fill(b, f, pad - left);
}

static cmf_status format_str(const jnode *at, jbuf *b, const fmtspec *f, const char *s, size_t n) {
    if (f->type && f->type != 's') return jinja_rt_err(at, "Unknown format code '%c' for object of type 'str'", f->type);
    if (f->sign) return jinja_rt_err(at, "Sign not allowed in string format specifier");
    if (f->alt) return jinja_rt_err(at, "Alternate form (#) not allowed in string format specifier");
    if (f->zneg) return jinja_rt_err(at, "Negative zero coercion (z) not allowed in format specifier");
    if (f->align == '=') return jinja_rt_err(at, "'=' alignment not allowed in string format specifier");
    size_t chars = utf8_count(s, n);
    if (f->prec >= 0 && (size_t)f->prec < chars) {
        n = utf8_offset(s, n, (size_t)f->prec);
        chars = (size_t)f->prec;
    }
    put_aligned(b, f, s, n, chars);
    return CMF_OK;
}

/* A formatted number: sign, prefix (0x ...), integer digits ip[0..ipn), the rest (fraction, exponent, '%'); laid
 * out as CPython calc_number_widths / fill_number: '=' pads between the sign/prefix and the digits, and a '0' fill
 * there is grouped with the digits. */
static void put_number(jbuf *b, const fmtspec *f, const char *sign, const char *prefix, const char *ip, size_t ipn,
                       const char *rest, int group_every) {
    size_t sl = strlen(sign) + strlen(prefix), rl = strlen(rest);
    char sep = f->group;
    jbuf d = {0}; /* the grouped integer digits */
    size_t want = 0;
    if (f->align == '=' && f->width > (int64_t)(sl + rl)) want = (size_t)f->width - sl - rl;
    int zero_fill = f->align == '=' && f->fill_len == 1 && f->fill[0] == '0';
    size_t nd = ipn; /* digits with leading zeros, when the zero fill is grouped */
    for (;;) {
        size_t len = sep ? nd + (nd - 1) / (size_t)group_every : nd;
        if (!zero_fill || !sep || len >= want) break;
        nd++;
    }
    if (zero_fill && !sep && nd < want) nd = want;
    for (size_t j = 0; j < nd; j++) {
        size_t from_right = nd - j;
        char ch = j < nd - ipn ? '0' : ip[j - (nd - ipn)];
        jbuf_put(&d, &ch, 1);
        if (sep && from_right > 1 && (from_right - 1) % (size_t)group_every == 0) jbuf_put(&d, &sep, 1);
    }
    size_t total = sl + d.n + rl;
    int64_t pad = f->width > (int64_t)total ? f->width - (int64_t)total : 0;
    int64_t left = f->align == '>' ? pad : f->align == '^' ? pad / 2 : 0;
    if (f->align == '=') left = 0;
    put_fill(b, f, left);
    jbuf_puts(b, sign);
    jbuf_puts(b, prefix);
    if (f->align == '=') put_fill(b, f, pad);
    jbuf_put(b, d.p ? d.p : "", d.n);
    jbuf_puts(b, rest);
    if (f->align != '=') put_fill(b, f, pad - left);
    if (d.oom) b->oom = 1;
    jbuf_free(&d);
}

static const char *sign_of(const fmtspec *f, int neg) {
    return neg ? "-" : f->sign == '+' ? "+" : f->sign == ' ' ? " " : "";
}

static cmf_status format_float(const jnode *at, jbuf *b, const fmtspec *f, double v, const char *tname) {
    char type = f->type, buf[1200];
    if (type && !strchr("eEfFgGn%", type))
        return jinja_rt_err(at, "Unknown format code '%c' for object of type '%s'", type, tname);
    int64_t prec = f->prec;
    if (prec > 300) return jinja_rt_err(at, "format precision %lld: more than 300 is not supported", (long long)prec);
    int neg = signbit(v) != 0;
    double a = fabs(v);
    if (type == '%') a *= 100;
    if (!type && prec < 0) { /* repr */
        jbuf r = {0};
        jv_float_repr(&r, a);
        if (r.oom || !r.p || r.n >= sizeof(buf)) { jbuf_free(&r); return NOMEM(); }
        memcpy(buf, r.p, r.n);
        buf[r.n] = 0;
        jbuf_free(&r);
    } else if (!type || type == 'n' || type == 'g' || type == 'G') {
        int p = prec < 0 ? 6 : prec == 0 ? 1 : (int)prec;
        if (!type && isfinite(a)) { /* 'g' that switches to exponents one digit earlier and keeps a '.0' */
            snprintf(buf, sizeof(buf), "%.*e", p - 1, a);
            int x = atoi(strchr(buf, 'e') + 1);
            if (x < -4 || x >= p - 1) snprintf(buf, sizeof(buf), f->alt ? "%#.*e" : "%.*e", p - 1, a);
            else snprintf(buf, sizeof(buf), f->alt ? "%#.*f" : "%.*f", p - 1 - x, a);
            if (!f->alt) { /* trailing zeros of the fraction go */
                char *e = strchr(buf, 'e'), tail[16] = "";
                if (e) { snprintf(tail, sizeof(tail), "%s", e); *e = 0; }
                char *dot = strchr(buf, '.');
                if (dot) {
                    size_t l = strlen(buf);
                    while (l > 0 && buf[l - 1] == '0') buf[--l] = 0;
                    if (buf[l - 1] == '.') buf[--l] = 0;
                }
                if (!e && !strchr(buf, '.')) strcat(buf, ".0");
                if (e) strcat(buf, tail);
            }
        } else snprintf(buf, sizeof(buf), f->alt ? "%#.*g" : "%.*g", p, a);
        if (type == 'G') for (char *q = buf; *q; q++) if (*q == 'e') *q = 'E'; /* (%G would print INF / NAN too) */
        if (type == 'G' && !isfinite(a)) snprintf(buf, sizeof(buf), "%s", isnan(a) ? "NAN" : "INF");
    } else {
        char cfmt[8] = {'%', 0};
        size_t k = 1;
        if (f->alt) cfmt[k++] = '#';
        cfmt[k++] = '.';
        cfmt[k++] = '*';
        cfmt[k++] = type == '%' ? 'f' : type;
        snprintf(buf, sizeof(buf), cfmt, (int)(prec < 0 ? 6 : prec), a);
    }
    if (type == '%') strcat(buf, "%");
    if (f->zneg && neg) { /* z: a negative zero after rounding prints without its sign */
        int zero = 1;
        for (const char *q = buf; *q && *q != 'e' && *q != 'E'; q++)
            if (*q >= '1' && *q <= '9') zero = 0;
        if (zero) neg = 0;
    }
    size_t ipn = 0;
    while (buf[ipn] >= '0' && buf[ipn] <= '9') ipn++;
    if (!isfinite(a)) ipn = 0;
    put_number(b, f, sign_of(f, neg), "", buf, ipn, buf + ipn, 3);
    return CMF_OK;
}

static cmf_status format_int(const jnode *at, jbuf *b, const fmtspec *f, int64_t v, const char *tname) {
    char type = f->type ? f->type : 'd';
    if (strchr("eEfFgG%", type)) return format_float(at, b, f, (double)v, tname);
    if (!strchr("bcdnoxX", type))
        return jinja_rt_err(at, "Unknown format code '%c' for object of type '%s'", type, tname);
    if (f->prec >= 0) return jinja_rt_err(at, "Precision not allowed in integer format specifier");
    if (f->zneg) return jinja_rt_err(at, "Negative zero coercion (z) not allowed in integer format specifier");
    if (type == 'c') {
        if (f->sign) return jinja_rt_err(at, "Sign not allowed with integer format specifier 'c'");
        if (f->alt) return jinja_rt_err(at, "Alternate form (#) not allowed with integer format specifier 'c'");
        if (v < 0 || v > 0x10FFFF) return jinja_rt_err(at, "%%c arg not in range(0x110000)");
        if (v >= 0xD800 && v <= 0xDFFF) return jinja_rt_err(at, "a surrogate code point cannot be encoded");
        char enc[4];
        int32_t cp = (int32_t)v;
        size_t n = cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4;
        if (n == 1) enc[0] = (char)cp;
        else {
            for (size_t j = n - 1; j > 0; j--) { enc[j] = (char)(0x80 | (cp & 0x3F)); cp >>= 6; }
            enc[0] = (char)((n == 2 ? 0xC0 : n == 3 ? 0xE0 : 0xF0) | cp);
        }
        put_aligned(b, f, enc, n, 1);
        return CMF_OK;
    }
    uint64_t mag = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
    unsigned base = type == 'b' ? 2 : type == 'o' ? 8 : type == 'x' || type == 'X' ? 16 : 10;
    const char *dig = type == 'X' ? "0123456789ABCDEF" : "0123456789abcdef";
    char tmp[70], ip[70];
    size_t n = 0;
    do { tmp[n++] = dig[mag % base]; mag /= base; } while (mag);
    for (size_t j = 0; j < n; j++) ip[j] = tmp[n - 1 - j];
    const char *prefix = !f->alt || base == 10 ? "" : type == 'b' ? "0b" : type == 'o' ? "0o" : type == 'x' ? "0x" : "0X";
    put_number(b, f, sign_of(f, v < 0), prefix, ip, n, "", base == 10 ? 3 : 4);
    return CMF_OK;
}

/* A width past the string size limit is refused before anything is padded. */
static cmf_status check_width(jctx *c, const jnode *at, const fmtspec *f) {
    if (f->width > (int64_t)c->lim.max_output) return jinja_limit_err(at, "string size (format width)", c->lim.max_output);
    return CMF_OK;
}

/* format(v, spec) appended to b. */
static cmf_status format_value(jctx *c, const jnode *at, jbuf *b, jv v, const char *spec, size_t sn) {
    fmtspec f;
    if (v.k == JV_STR) {
        TRY(parse_spec(at, spec, sn, '<', &f));
        TRY(check_width(c, at, &f));
        return format_str(at, b, &f, v.u.s->s, v.u.s->len);
    }
    if ((v.k == JV_INT || v.k == JV_BOOL || v.k == JV_FLOAT) && !(v.k == JV_BOOL && sn == 0)) {
        TRY(parse_spec(at, spec, sn, '>', &f));
        TRY(check_width(c, at, &f));
        if (v.k == JV_FLOAT) return format_float(at, b, &f, v.u.f, "float");
        return format_int(at, b, &f, v.k == JV_INT ? v.u.i : v.u.b, v.k == JV_INT ? "int" : "bool");
    }
    if (sn) return jinja_rt_err(at, "unsupported format string passed to %s.__format__", jv_kind_name(v));
    jv_to_str(b, v);
    return jinja_buf_status(c, at, b, "string size");
}

void jinja_put_ascii(jbuf *b, const char *s, size_t n) {
    for (size_t i = 0; i < n;) {
        unsigned char ch = (unsigned char)s[i];
        if (ch < 0x80) { jbuf_put(b, s + i, 1); i++; continue; }
        size_t k = cp_bytes(s + i, n - i);
        uint32_t cp = ch & (k == 2 ? 0x1F : k == 3 ? 0x0F : 0x07);
        for (size_t j = 1; j < k; j++) cp = cp << 6 | ((unsigned char)s[i + j] & 0x3F);
        char e[16];
        if (cp < 0x100) snprintf(e, sizeof(e), "\\x%02x", (unsigned)cp);
        else if (cp < 0x10000) snprintf(e, sizeof(e), "\\u%04x", (unsigned)cp);
        else snprintf(e, sizeof(e), "\\U%08x", (unsigned)cp);
        jbuf_puts(b, e);
        i += k;
    }
}

typedef struct fmtargs {
    const jv *pos;
    size_t npos;
    const jargs *kw; /* format's keywords, or NULL */
    const jv *map;   /* format_map's mapping, or NULL */
} fmtargs;

static int all_digits(const char *s, size_t n) {
    if (!n) return 0;
    for (size_t i = 0; i < n; i++)
        if (s[i] < '0' || s[i] > '9') return 0;
    return 1;
}

/* Formatter.get_field: the first name (an index into the positional arguments, or a keyword), then .attr and
 * [key] parts through the sandbox's getattr / getitem. Owned *out. */
static cmf_status get_field(jctx *c, const jnode *at, const fmtargs *fa, const char *s, size_t n, jv *out) {
    size_t i = 0;
    while (i < n && s[i] != '.' && s[i] != '[') i++;
    jv obj;
    if (all_digits(s, i)) {
        int64_t k = 0;
        for (size_t j = 0; j < i; j++) k = k > 100000000 ? k : k * 10 + (s[j] - '0');
        if (k >= (int64_t)fa->npos) return jinja_rt_err(at, "Replacement index %lld out of range for positional args tuple", (long long)k);
        obj = jv_retain(fa->pos[k]);
    } else {
        const jv *v = NULL;
        if (fa->kw) {
            for (size_t j = 0; j < fa->kw->nkw && !v; j++)
                if (strlen(fa->kw->kwn[j]) == i && !memcmp(fa->kw->kwn[j], s, i)) v = &fa->kw->kwv[j];
        } else if (fa->map) {
            if (fa->map->k != JV_DICT && fa->map->k != JV_NS)
                return jinja_rt_err(at, "'%s' object is not subscriptable", jv_kind_name(*fa->map));
            v = jv_dict_get(*fa->map, s, i);
        }
        if (!v) return jinja_rt_err(at, "KeyError: '%.*s'", (int)i, s);
        obj = jv_retain(*v);
    }
    cmf_status st = CMF_OK;
    while (i < n && !st) {
        int attr = s[i] == '.';
        size_t a = ++i;
        if (attr) while (i < n && s[i] != '.' && s[i] != '[') i++;
        else while (i < n && s[i] != ']') i++;
        size_t e = i;
        if (!attr) {
            if (i >= n) { st = jinja_rt_err(at, "Missing ']' in format string"); break; }
            i++;
            if (i < n && s[i] != '.' && s[i] != '[') { st = jinja_rt_err(at, "Only '.' or '[' may follow ']' in format field specifier"); break; }
        }
        if (e == a) { st = jinja_rt_err(at, "Empty attribute in format string"); break; }
        jv key = attr || !all_digits(s + a, e - a) ? jv_strn(s + a, e - a) : jv_int(atoll(s + a));
        if (jv_is_oom(key)) { st = NOMEM(); break; }
        jv next = jv_undef(NULL);
        if (attr && key.u.s->s[0] == '_') next = jv_undef(NULL); /* the sandbox: unsafe, an Undefined */
        else st = attr ? jinja_getattr(c, at, obj, key.u.s->s, &next) : jinja_getitem(c, at, obj, key, &next);
        if (!st && next.k == JV_UNDEF) { jv_release(next); next = jv_undef(NULL); } /* (it borrowed the key) */
        jv_release(key);
        jv_release(obj);
        obj = next;
    }
    if (st) { jv_release(obj); return st; }
    *out = obj;
    return CMF_OK;
}

/* string.Formatter._vformat into b; *auto_idx: the next automatic index, -1 once numbered fields were used. */
static cmf_status vformat(jctx *c, const jnode *at, const fmtargs *fa, const char *s, size_t n, int depth,
                          int64_t *auto_idx, jbuf *b) {
    if (depth < 0) return jinja_rt_err(at, "Max string recursion exceeded");
    size_t i = 0;
    while (i < n) {
        char ch = s[i];
        if (ch != '{' && ch != '}') {
            size_t j = i;
            while (j < n && s[j] != '{' && s[j] != '}') j++;
            jbuf_put(b, s + i, j - i);
            i = j;
            continue;
        }
        if (i + 1 < n && s[i + 1] == ch) { jbuf_put(b, &ch, 1); i += 2; continue; }
        if (ch == '}') return jinja_rt_err(at, "Single '}' encountered in format string");
        if (i + 1 >= n) return jinja_rt_err(at, "Single '{' encountered in format string");
        size_t start = ++i, count = 1;
        while (i < n && count) {
            if (s[i] == '{') count++;
            else if (s[i] == '}') count--;
            i++;
        }
        if (count) return jinja_rt_err(at, "expected '}' before end of string");
        const char *fs = s + start;
        size_t fn = i - 1 - start, nl = 0; /* the field: name, !conversion, :spec */
        while (nl < fn && fs[nl] != ':' && fs[nl] != '!') {
            if (fs[nl] == '{') return jinja_rt_err(at, "unexpected '{' in field name");
            if (fs[nl] == '[') while (nl < fn && fs[nl] != ']') nl++;
            if (nl < fn) nl++;
        }
        char conv = 0;
        size_t sp = nl;
        if (nl < fn && fs[nl] == '!') {
            if (nl + 1 >= fn) return jinja_rt_err(at, "end of string while looking for conversion specifier");
            conv = fs[nl + 1];
            sp = nl + 2;
            if (sp < fn && fs[sp] != ':') return jinja_rt_err(at, "expected ':' after conversion specifier");
        }
        const char *spec = sp < fn ? fs + sp + 1 : "";
        size_t spn = sp < fn ? fn - sp - 1 : 0;
        char idx[24];
        const char *name = fs;
        size_t namen = nl;
        if (namen == 0) {
            if (*auto_idx < 0) return jinja_rt_err(at, "cannot switch from manual field specification to automatic field numbering");
            namen = (size_t)snprintf(idx, sizeof(idx), "%lld", (long long)(*auto_idx)++);
            name = idx;
        } else if (all_digits(name, namen)) {
            if (*auto_idx > 0) return jinja_rt_err(at, "cannot switch from manual field specification to automatic field numbering");
            *auto_idx = -1;
        }
        if (!fa->pos && all_digits(name, namen))
            return jinja_rt_err(at, "Replacement index %.*s out of range for positional args tuple", (int)namen, name);
        jv obj;
        TRY(get_field(c, at, fa, name, namen, &obj));
        /* each field reads its value once (a 16 MB string sliced by '{0:.1}' a million times was 16 TB of scanning) */
        cmf_status st = jinja_charge_work(c, at, jinja_work_of(obj));
        jbuf conv_buf = {.limit = c->lim.max_output}, spec_buf = {.limit = c->lim.max_output};
        if (!st && (conv == 'r' || conv == 'a' || conv == 's')) { /* convert_field: a string from repr / ascii / str */
            jbuf t = {.limit = c->lim.max_output};
            if (conv == 's') jv_to_str(&t, obj);
            else jv_repr(&t, obj);
            if (!(st = jinja_buf_status(c, at, &t, "string size")) &&
                !(st = jinja_charge_work(c, at, t.n / JINJA_WORK_BYTES + 1))) {
                if (conv == 'a') jinja_put_ascii(&conv_buf, t.p ? t.p : "", t.n);
                else jbuf_put(&conv_buf, t.p ? t.p : "", t.n);
                jv_release(obj);
                obj = jv_strn(conv_buf.p ? conv_buf.p : "", conv_buf.n);
                if (jv_is_oom(obj)) st = NOMEM();
            }
            jbuf_free(&t);
        } else if (conv && !st) st = jinja_rt_err(at, "Unknown conversion specifier %c", conv);
        if (!st) st = vformat(c, at, fa, spec, spn, depth - 1, auto_idx, &spec_buf);
        if (!st) st = jinja_buf_status(c, at, &spec_buf, "string size");
        if (!st) st = format_value(c, at, b, obj, spec_buf.p ? spec_buf.p : "", spec_buf.n);
        jbuf_free(&conv_buf);
        jbuf_free(&spec_buf);
        jv_release(obj);
        TRY(st);
        if (b->over || b->oom) break;
    }
    return CMF_OK;
}

cmf_status jinja_str_format(jctx *c, const jnode *at, jv fmt, const jv *pos, size_t npos, const jargs *kw,
                            const jv *map, jv *out) {
    fmtargs fa = {pos, npos, kw, map};
    jbuf b = {.limit = c->lim.max_output};
    int64_t auto_idx = 0;
    cmf_status st = vformat(c, at, &fa, fmt.u.s->s, fmt.u.s->len, 2, &auto_idx, &b);
    if (!st) st = jinja_buf_status(c, at, &b, "string size");
    if (!st) st = jinja_charge_work(c, at, b.n / JINJA_WORK_BYTES + 1);
    if (st) { jbuf_free(&b); return st; }
    return jb_ret_buf(out, &b);
}
