/* exp2f.c — a correctly rounded, libm-free exp2f for the q4tp/q2tp scale ladder (CMF_FORMAT.md §2.6, §7.14).
 *
 * The ladder's first rung and ratio are exp2f of two f16 values; different libm exp2f implementations may differ
 * by one ulp, which would move every weight of a row. Rounding correctly makes the result a function of the input
 * alone, so every platform (and every kernel) lands on the same bits.
 *
 * Method: x = k + r with k an integer and |r| <= 1/2 (exact), 2^r = exp(r ln2).
 *   fast path: a degree-13 Taylor polynomial in double (relative error < 2^-50); when the result is not within
 *              64 double ulps of a midpoint between two floats, rounding it to float is the correct rounding;
 *   slow path: the same series in double-double arithmetic (about 100 bits), rounded with an exact midpoint test.
 * Only +, -, * and / on doubles are used (no FMA: the contraction pragma below keeps clang from fusing; gcc does
 * not contract in ISO C mode). */
#include <stdint.h>
#include <string.h>

#include "quant/ladder.h"

#ifdef __clang__
#pragma STDC FP_CONTRACT OFF
#endif

static const double LN2_HI = 0x1.62e42fefa39efp-1; /* ln 2 = LN2_HI + LN2_LO to about 107 bits */
static const double LN2_LO = 0x1.abc9e3b39803fp-56;

typedef struct dd {
    double hi, lo;
} dd;

static dd quick_two_sum(double a, double b) { /* |a| >= |b| */
    double s = a + b;
    return (dd){s, b - (s - a)};
}
static dd two_sum(double a, double b) {
    double s = a + b, bb = s - a;
    return (dd){s, (a - (s - bb)) + (b - bb)};
}
static void split(double a, double *h, double *l) { /* Veltkamp: a = h + l, 26 bits each */
    double t = 134217729.0 * a; /* 2^27 + 1 */
    *h = t - (t - a);
    *l = a - *h;
}
static dd two_prod(double a, double b) {
    double p = a * b, ah, al, bh, bl;
    split(a, &ah, &al);
    split(b, &bh, &bl);
    return (dd){p, ((ah * bh - p) + ah * bl + al * bh) + al * bl};
}
static dd dd_mul(dd a, dd b) {
    dd p = two_prod(a.hi, b.hi);
    return quick_two_sum(p.hi, p.lo + (a.hi * b.lo + a.lo * b.hi));
}
static dd dd_add(dd a, dd b) {
    dd s = two_sum(a.hi, b.hi);
    return quick_two_sum(s.hi, s.lo + a.lo + b.lo);
}
static dd dd_div_d(dd a, double d) {
    double q1 = a.hi / d;
    dd p = two_prod(q1, d);
    double r = ((a.hi - p.hi) - p.lo) + a.lo;
    return quick_two_sum(q1, r / d);
}

static double pow2i(int k) { /* 2^k for -1022 <= k <= 1023 */
    uint64_t b = (uint64_t)(k + 1023) << 52;
    double d;
    memcpy(&d, &b, 8);
    return d;
}
static uint32_t fbits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}
static float bitsf(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* Correctly rounded float of hi + lo (|lo| <= ulp(hi)/2, hi > 0): only an exact midpoint hi needs lo. */
static float round_dd(double hi, double lo) {
    float f = (float)hi;
    if ((double)f == hi || fbits(f) >= 0x7f800000u) return f;
    float g = hi > (double)f ? bitsf(fbits(f) + 1) : bitsf(fbits(f) - 1);
    double mid = ((double)f + (double)g) * 0.5;
    if (hi == mid && lo != 0.0) return (lo > 0.0) == ((double)g > (double)f) ? g : f;
    return f;
}

/* Splits a finite x in [-152, 129] into k + r, |r| <= 1/2, both exact. */
static void reduce(float x, int *k, double *r) {
    double xd = x;
    long kk = (long)(xd >= 0 ? xd + 0.5 : xd - 0.5);
    *k = (int)kk;
    *r = xd - (double)kk;
}

static int special(float x, float *out) {
    uint32_t u = fbits(x);
    if ((u & 0x7fffffffu) > 0x7f800000u) { *out = x + x; return 1; } /* NaN, quieted */
    if (x >= 128.0f) { *out = bitsf(0x7f800000u); return 1; }           /* overflow (and +inf) */
    if (x < -151.0f) { *out = 0.0f; return 1; }                         /* below 2^-151: rounds to 0 */
    return 0;
}

float cmf_exp2f_dd(float x) {
    float sp;
    if (special(x, &sp)) return sp;
    int k;
    double r;
    reduce(x, &k, &r);
    dd t = dd_add(two_prod(r, LN2_HI), (dd){r * LN2_LO, 0.0}); /* r ln2, |t| <= 0.347 */
    enum { N = 27 };                                         /* 0.347^28 / 28! < 2^-130 */
    dd c[N + 1];
    c[0] = (dd){1.0, 0.0};
    for (int n = 1; n <= N; n++) c[n] = dd_div_d(c[n - 1], (double)n);
    dd p = c[N];
    for (int n = N - 1; n >= 0; n--) p = dd_add(dd_mul(p, t), c[n]);
    double s = pow2i(k); /* exact scaling: 2^k * p stays a normal double for k >= -152 */
    return round_dd(p.hi * s, p.lo * s);
}

float cmf_exp2f(float x) {
    float sp;
    if (special(x, &sp)) return sp;
    int k;
    double r;
    reduce(x, &k, &r);
    double t = r * LN2_HI;
    /* Taylor series of e^t, Horner, 1/n! folded at compile time */
    double p = 1.0 / 6227020800.0;
    p = p * t + 1.0 / 479001600.0;
    p = p * t + 1.0 / 39916800.0;
    p = p * t + 1.0 / 3628800.0;
    p = p * t + 1.0 / 362880.0;
    p = p * t + 1.0 / 40320.0;
    p = p * t + 1.0 / 5040.0;
    p = p * t + 1.0 / 720.0;
    p = p * t + 1.0 / 120.0;
    p = p * t + 1.0 / 24.0;
    p = p * t + 1.0 / 6.0;
    p = p * t + 0.5;
    p = p * t + 1.0;
    p = p * t + 1.0;
    double z = p * pow2i(k);
    if (z < 0x1p-126) return cmf_exp2f_dd(x); /* subnormal float result: rare, take the exact path */
    uint64_t b;
    memcpy(&b, &z, 8);
    int64_t m29 = (int64_t)(b & ((1u << 29) - 1u)), half = (int64_t)1 << 28;
    int64_t dist = m29 > half ? m29 - half : half - m29;
    if (dist <= 64) return cmf_exp2f_dd(x); /* too close to a midpoint for the double result to decide */
    return (float)z;
}
