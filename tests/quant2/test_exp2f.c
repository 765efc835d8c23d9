/* cmf_exp2f (CMF_FORMAT.md §7.14): correctly rounded, libm-free. Reference: the double-precision exp2 of the C
 * library rounded to float; where that double lies within 2^-45 (relative) of a midpoint between two floats the
 * double reference cannot decide, and the long double exp2l decides instead. Inputs: every f16 value (all lo/step
 * a ladder can hold), a dense sweep of the f32 range that does not overflow or flush, and the special cases.
 * Also: the fast path agrees with the double-double path on all f16 inputs and a random sample. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "quant/dtype.h"
#include "quant/ladder.h"
#include "testutil.h"

static uint32_t fbits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

/* The correctly rounded float of 2^x by the C library (double, then long double when the double is ambiguous). */
static float ref_exp2f(float x, int *ambiguous) {
    double d = exp2((double)x);
    float f = (float)d;
    *ambiguous = 0;
    if (f == 0.0f || isinf(f) || (double)f == d) return f;
    float g = d > (double)f ? nextafterf(f, INFINITY) : nextafterf(f, 0.0f);
    double mid = ((double)f + (double)g) * 0.5;
    if (fabs(d - mid) <= fabs(d) * 0x1p-45) {
        *ambiguous = 1;
        return (float)exp2l((long double)x);
    }
    return f;
}

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static uint32_t next32(void) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (uint32_t)(rng >> 16);
}

static int n_checked, n_amb;

static void check_one(float x) {
    int amb;
    float want = ref_exp2f(x, &amb);
    float got = cmf_exp2f(x);
    n_checked++;
    n_amb += amb;
    CHECK_MSG(fbits(got) == fbits(want), "exp2f(%a) = %a, want %a", (double)x, (double)got, (double)want);
}

int main(void) {
    /* every finite f16 value: all possible lo / step */
    for (uint32_t h = 0; h < 0x10000u; h++) {
        if ((h & 0x7c00u) == 0x7c00u) continue;
        float x = cmf_f16_to_f32((uint16_t)h);
        check_one(x);
        CHECK_MSG(fbits(cmf_exp2f(x)) == fbits(cmf_exp2f_dd(x)), "fast/slow path differ at %a", (double)x);
    }
    /* every 397th f32 bit pattern in [-160, 130] (about 5.7 million inputs) */
    for (uint32_t u = 0; u < 0x80000000u; u += 397) {
        float x;
        memcpy(&x, &u, 4);
        if (x > 130.0f) break;
        check_one(x);
        uint32_t v = u | 0x80000000u;
        memcpy(&x, &v, 4);
        if (x >= -160.0f) check_one(x);
    }
    /* random sample: fast path against the slow one */
    for (int i = 0; i < 20000; i++) {
        uint32_t u = next32() % 0x43000000u; /* |x| < 128 */
        if (next32() & 1) u |= 0x80000000u;
        float x;
        memcpy(&x, &u, 4);
        CHECK_MSG(fbits(cmf_exp2f(x)) == fbits(cmf_exp2f_dd(x)), "fast/slow path differ at %a", (double)x);
    }
    /* special values and the edges of the range */
    CHECK(isnan(cmf_exp2f(NAN)));
    CHECK(cmf_exp2f(INFINITY) == INFINITY && cmf_exp2f(-INFINITY) == 0.0f);
    CHECK(cmf_exp2f(128.0f) == INFINITY && cmf_exp2f(127.0f) == 0x1p127f);
    CHECK(cmf_exp2f(0.0f) == 1.0f && cmf_exp2f(-0.0f) == 1.0f && cmf_exp2f(-3.0f) == 0.125f);
    CHECK(cmf_exp2f(-149.0f) == 0x1p-149f && cmf_exp2f(-150.0f) == 0.0f); /* 2^-150: tie, to even (0) */
    CHECK(cmf_exp2f(-149.5f) == 0x1p-149f);                                /* above the tie: rounds up */
    CHECK(cmf_exp2f(-126.0f) == 0x1p-126f && cmf_exp2f(-160.0f) == 0.0f);
    CHECK(cmf_exp2f(0.25f) == (float)exp2(0.25)); /* the §2.6 ratio */
    fprintf(stderr, "exp2f: %d inputs checked, %d decided by exp2l\n", n_checked, n_amb);
    CMF_TEST_END();
}
