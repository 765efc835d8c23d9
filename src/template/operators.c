/* operators.c — Jinja's operators with Python semantics (jinja2 compiles them to Python's): the arithmetic and
 * string / list operators (+ - * / // % ** ~, '%' formatting), unary - and +, and the comparisons (== != < > <= >=,
 * in, not in) with the ordering sort / min / max use; split from eval.c, which calls them from jinja_eval. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "template/eval.h"
#include "util/error.h"

#define NOMEM() cmf_err(CMF_E_NOMEM, "template render")
#define TRY(x) do { cmf_status st_ = (x); if (st_) return st_; } while (0)

static cmf_status arith_op(jctx *c, const jnode *n, jv a, jv b, jv *out);

/* a op b; a string it makes is work (64 bytes a step: ~ in a loop copied 16 MB a million times) */
cmf_status jinja_binop(jctx *c, const jnode *n, jv a, jv b, jv *out) {
    TRY(arith_op(c, n, a, b, out));
    cmf_status st = out->k == JV_STR ? jinja_charge_work(c, n, jinja_work_of(*out)) : CMF_OK;
    if (st) { jv_release(*out); *out = jv_undef(NULL); }
    return st;
}

static cmf_status arith_op(jctx *c, const jnode *n, jv a, jv b, jv *out) {
    int op = n->op;
    if (op == '~') { /* str(undefined) is "" */
        jbuf buf = {.limit = c->lim.max_output};
        jv_to_str(&buf, a);
        jv_to_str(&buf, b);
        cmf_status st = jinja_buf_status(c, n, &buf, "string size");
        if (st) { jbuf_free(&buf); return st; }
        *out = jv_strn(buf.p ? buf.p : "", buf.n);
        jbuf_free(&buf);
        return jv_is_oom(*out) ? NOMEM() : CMF_OK;
    }
    if (op == '%' && a.k == JV_STR) return jinja_percent_format(c, n, a, b, out); /* ('%s' % undefined is '') */
    if (a.k == JV_UNDEF) return jinja_undef_err(n->a, a);
    if (b.k == JV_UNDEF) return jinja_undef_err(n->b, b);
    if (op == '+' && a.k == JV_STR && b.k == JV_STR) {
        size_t len = a.u.s->len + b.u.s->len;
        if (len > c->lim.max_output) return jinja_limit_err(n, "string size", c->lim.max_output);
        jv r = jv_strn(NULL, len);
        if (jv_is_oom(r)) return NOMEM();
        memcpy(r.u.s->s, a.u.s->s, a.u.s->len);
        memcpy(r.u.s->s + a.u.s->len, b.u.s->s, b.u.s->len);
        r.u.s->s[len] = 0;
        *out = r;
        return CMF_OK;
    }
    if (op == '+' && a.k == JV_LIST && b.k == JV_LIST) {
        /* every list made by + counts its items against the iteration budget (as range() does): doubling a list in
         * a loop took 11 GB, and `l = l + [i]` over 100,000 iterations 52 s of copying. As Python: tuple + tuple is
         * a tuple, a list and a tuple do not add. */
        if (!a.u.l->tuple != !b.u.l->tuple)
            return jinja_rt_err(n, "can only concatenate %s (not \"%s\") to %s", jv_kind_name(a), jv_kind_name(b),
                                jv_kind_name(a));
        const size_t len = a.u.l->n + b.u.l->n;
        if (len > c->lim.max_iterations - c->items) /* items <= max_iterations: both makers check before adding */
            return jinja_limit_err(n, JINJA_ITEMS_WHAT, c->lim.max_iterations);
        c->items += len;
        jv r = jv_list_new(len);
        if (jv_is_oom(r)) return NOMEM();
        for (size_t i = 0; i < a.u.l->n; i++) jv_list_push(r, jv_retain(a.u.l->v[i]));
        for (size_t i = 0; i < b.u.l->n; i++) jv_list_push(r, jv_retain(b.u.l->v[i]));
        r.u.l->tuple = a.u.l->tuple != 0;
        *out = r;
        return CMF_OK;
    }
    if (op == '*' && ((a.k == JV_STR && jinja_is_intlike(b)) || (b.k == JV_STR && jinja_is_intlike(a)))) {
        jv s = a.k == JV_STR ? a : b;
        int64_t k = a.k == JV_STR ? jinja_ival(b) : jinja_ival(a);
        if (k < 0) k = 0;
        if (s.u.s->len && (uint64_t)k > c->lim.max_output / s.u.s->len) return jinja_limit_err(n, "string size", c->lim.max_output);
        jv r = jv_strn(NULL, s.u.s->len * (size_t)k);
        if (jv_is_oom(r)) return NOMEM();
        for (int64_t i = 0; s.u.s->len && i < k; i++) memcpy(r.u.s->s + (size_t)i * s.u.s->len, s.u.s->s, s.u.s->len);
        /* ('' * 10**11 looped 10^11 times) */
        r.u.s->s[r.u.s->len] = 0;
        *out = r;
        return CMF_OK;
    }
    if (op == '*' && ((a.k == JV_LIST && jinja_is_intlike(b)) || (b.k == JV_LIST && jinja_is_intlike(a)))) {
        /* list * int: the copies count against the list-items budget, as + does */
        jv l = a.k == JV_LIST ? a : b;
        int64_t k = a.k == JV_LIST ? jinja_ival(b) : jinja_ival(a);
        if (k < 0) k = 0;
        if (l.u.l->n && (uint64_t)k > (c->lim.max_iterations - c->items) / l.u.l->n)
            return jinja_limit_err(n, JINJA_ITEMS_WHAT, c->lim.max_iterations);
        const size_t len = l.u.l->n * (size_t)k;
        c->items += len;
        jv r = jv_list_new(len);
        if (jv_is_oom(r)) return NOMEM();
        for (int64_t i = 0; l.u.l->n && i < k; i++) /* ([] * 10**11: no loop) */
            for (size_t j = 0; j < l.u.l->n; j++) jv_list_push(r, jv_retain(l.u.l->v[j])); /* capacity reserved */
        r.u.l->tuple = l.u.l->tuple != 0;
        *out = r;
        return CMF_OK;
    }
    if (!jv_is_number(a) || !jv_is_number(b))
        return jinja_rt_err(n, "unsupported operand types for '%s': '%s' and '%s'",
                            op == 'F' ? "//" : op == 'P' ? "**" : (char[]){(char)op, 0}, jv_kind_name(a), jv_kind_name(b));
    if (jinja_is_intlike(a) && jinja_is_intlike(b) && op != '/') {
        /* Python's integers are unbounded; ours are 64-bit: a result past int64 is an error (a float would print
         * other digits than jinja2) */
        int64_t x = jinja_ival(a), y = jinja_ival(b), r;
        switch (op) {
        case '+': if (__builtin_add_overflow(x, y, &r)) goto ovf; break;
        case '-': if (__builtin_sub_overflow(x, y, &r)) goto ovf; break;
        case '*': if (__builtin_mul_overflow(x, y, &r)) goto ovf; break;
        case 'F': case '%':
            if (y == 0) return jinja_rt_err(n, "integer division or modulo by zero");
            if (y == -1) { /* (INT64_MIN / -1 is undefined in C) */
                if (op == '%') { r = 0; break; }
                if (x == INT64_MIN) goto ovf;
            }
            if (op == 'F') r = x / y - ((x % y != 0) && ((x < 0) != (y < 0)));
            else { r = x % y; if (r != 0 && ((r < 0) != (y < 0))) r += y; } /* (x % y + y overflowed near 2^63) */
            break;
        case 'P': { /* by squaring: 1 ** (2**62) looped 2^62 times */
            if (y < 0) goto flt;
            int64_t base = x, e = y;
            r = 1;
            while (e) {
                if ((e & 1) && __builtin_mul_overflow(r, base, &r)) goto ovf;
                e >>= 1;
                if (e && __builtin_mul_overflow(base, base, &base)) goto ovf;
            }
            break;
        }
        default: goto flt;
        }
        *out = jv_int(r);
        return CMF_OK;
    ovf:
        return jinja_rt_err(n, "integer overflow: the result of '%s' does not fit in 64 bits",
                            op == 'F' ? "//" : op == 'P' ? "**" : (char[]){(char)op, 0});
    }
flt : {
    double x = jv_num(a), y = jv_num(b), r;
    switch (op) {
    case '+': r = x + y; break;
    case '-': r = x - y; break;
    case '*': r = x * y; break;
    case '/': if (y == 0) return jinja_rt_err(n, "division by zero"); r = x / y; break;
    case 'F': case '%': { /* CPython's _float_div_mod: floor((x - fmod(x, y)) / y), not floor(x / y) (3 // 0.1 is
                             * 29.0); the modulo takes the divisor's sign, zero included */
        if (y == 0) return jinja_rt_err(n, op == 'F' ? "float floor division by zero" : "float modulo");
        double mod = fmod(x, y), div = (x - mod) / y, fdiv = copysign(0.0, x / y);
        if (mod == 0) mod = copysign(0.0, y);
        else if ((y < 0) != (mod < 0)) mod += y, div -= 1.0;
        if (div != 0) fdiv = floor(div) + (div - floor(div) > 0.5);
        r = op == 'F' ? fdiv : mod;
        break;
    }
    case 'P': /* CPython's float_pow: its errors where C's pow gives inf / nan for finite operands */
        if (x == 0 && y < 0) return jinja_rt_err(n, "0.0 cannot be raised to a negative power");
        if (x < 0 && isfinite(y) && y != floor(y)) /* (Python's result is a complex number) */
            return jinja_rt_err(n, "a negative number to a fractional power is complex, which templates cannot hold");
        if (isinf(r = pow(x, y)) && isfinite(x) && isfinite(y)) /* OverflowError(ERANGE), as jinja2 shows it */
            return jinja_rt_err(n, "(34, 'Numerical result out of range')");
        break;
    default: r = 0;
    }
    *out = jv_float(r);
    return CMF_OK;
}
}

/* `needle in hay`; *err: 1 for types that cannot be searched, 2 when the walk budget is spent. */
static int contains(jctx *c, jv hay, jv needle, int *err) {
    *err = 0;
    if (hay.k == JV_STR) {
        if (needle.k != JV_STR) { *err = 1; return 0; }
        size_t w = jinja_work_of(hay);
        if (w > c->steps) { *err = 2; return 0; } /* (a linear search: its bytes are work) */
        c->steps -= w;
        return jb_find_sub(hay.u.s->s, hay.u.s->len, needle.u.s->s, needle.u.s->len) != NULL;
    }
    if (hay.k == JV_LIST) {
        for (size_t i = 0; i < hay.u.l->n; i++) {
            int r = jv_equal(hay.u.l->v[i], needle, &c->steps);
            if (r < 0) *err = r == -2 ? 3 : 2;
            if (r) return r > 0;
        }
        return 0;
    }
    if (hay.k == JV_DICT || hay.k == JV_NS) {
        return jv_dict_get_key(hay, needle) != NULL;
    }
    if (hay.k == JV_UNDEF) return 0;
    *err = 1;
    return 0;
}

static int compare_at(jctx *c, jv a, jv b, int ci, int *err, int depth) {
    *err = 0;
    if (c->steps == 0) { *err = 2; return 0; }
    if (depth > JV_MAX_DEPTH) { *err = 3; return 0; }
    c->steps--;
    if (jv_is_number(a) && jv_is_number(b)) {
        if (jinja_is_intlike(a) && jinja_is_intlike(b))
            return (jinja_ival(a) > jinja_ival(b)) - (jinja_ival(a) < jinja_ival(b));
        double x = jv_num(a), y = jv_num(b);
        return (x > y) - (x < y);
    }
    if (a.k == JV_STR && b.k == JV_STR) {
        size_t w = (a.u.s->len < b.u.s->len ? a.u.s->len : b.u.s->len) / JINJA_WORK_BYTES; /* (bytes compared) */
        if (w > c->steps) { *err = 2; return 0; }
        c->steps -= w;
        if (ci) return jinja_compare_lower(a.u.s->s, a.u.s->len, b.u.s->s, b.u.s->len); /* jinja2 ignore_case */
        size_t n = a.u.s->len < b.u.s->len ? a.u.s->len : b.u.s->len;
        int r = memcmp(a.u.s->s, b.u.s->s, n);
        return r ? r : (a.u.s->len > b.u.s->len) - (a.u.s->len < b.u.s->len);
    }
    if (a.k == JV_LIST && b.k == JV_LIST && !a.u.l->tuple == !b.u.l->tuple) { /* (a tuple < a list: an error) */
        for (size_t i = 0; i < a.u.l->n && i < b.u.l->n; i++) {
            int r = compare_at(c, a.u.l->v[i], b.u.l->v[i], 0, err, depth + 1); /* (ignore_case: a str only) */
            if (r || *err) return r;
        }
        return (a.u.l->n > b.u.l->n) - (a.u.l->n < b.u.l->n);
    }
    *err = 1;
    return 0;
}

int jinja_compare(jctx *c, jv a, jv b, int ci, int *err) { return compare_at(c, a, b, ci, err, 0); }

cmf_status jinja_compare_op(jctx *c, const jnode *n, jv a, jv b, jv *out) {
    int err = 0, r = 0;
    switch (n->op) {
    case 'e': case 'n':
        r = jv_equal(a, b, &c->steps);
        if (r < 0) err = r == -2 ? 3 : 2;
        else if (n->op == 'n') r = !r;
        break;
    case 'i': r = contains(c, b, a, &err); break;
    case 'I': r = !contains(c, b, a, &err); break;
    default: {
        int cmp = jinja_compare(c, a, b, 0, &err);
        r = n->op == '<' ? cmp < 0 : n->op == '>' ? cmp > 0 : n->op == 'l' ? cmp <= 0 : cmp >= 0;
    }
    }
    if (err == 2) return jinja_walk_err(c, n);
    if (err == 3) return jinja_deep_err(n);
    if (err) {
        if (a.k == JV_UNDEF) return jinja_undef_err(n->a, a);
        if (b.k == JV_UNDEF) return jinja_undef_err(n->b, b);
        return jinja_rt_err(n, "cannot compare '%s' with '%s'", jv_kind_name(a), jv_kind_name(b));
    }
    *out = jv_bool(r);
    return CMF_OK;
}

/* -a / +a: numbers only (+True is 1, as Python's); -INT64_MIN does not fit in our 64-bit integers. */
cmf_status jinja_unary(const jnode *n, jv a, jv *out) {
    if (a.k == JV_UNDEF) return jinja_undef_err(n->a, a);
    if (!jv_is_number(a))
        return jinja_rt_err(n, "bad operand type for unary %c: '%s'", n->type == N_NEG ? '-' : '+', jv_kind_name(a));
    if (n->type == N_POS) *out = jinja_is_intlike(a) ? jv_int(jinja_ival(a)) : jv_retain(a);
    else if (a.k != JV_FLOAT && jinja_ival(a) == INT64_MIN)
        return jinja_rt_err(n, "integer overflow: -(%lld) does not fit in 64 bits", (long long)INT64_MIN);
    else *out = a.k == JV_FLOAT ? jv_float(-a.u.f) : jv_int(-jinja_ival(a));
    return CMF_OK;
}
