/* f16 / bf16 conversions (CMF_FORMAT.md §2, §2.13): the subnormal vectors of §2, exhaustive round trips,
 * round-to-nearest-even at every halfway point, overflow to inf and underflow to zero. */
#include <math.h>
#include <string.h>

#include "quant/dtype.h"
#include "testutil.h"

static uint32_t bits_of(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    return x;
}
static float from_bits(uint32_t x) {
    float f;
    memcpy(&f, &x, 4);
    return f;
}

int main(void) {
    /* §2 subnormal vectors (exact values: m * 2^-24) and their decimal forms from the spec */
    CHECK(cmf_f16_to_f32(0x0001) == ldexpf(1.0f, -24) && fabsf(cmf_f16_to_f32(0x0001) - 5.9604645e-8f) < 1e-14f);
    CHECK(cmf_f16_to_f32(0x03FF) == ldexpf(1023.0f, -24) && fabsf(cmf_f16_to_f32(0x03FF) - 6.097555e-5f) < 1e-11f);
    CHECK(cmf_f16_to_f32(0x812B) == -ldexpf(299.0f, -24) &&
          fabsf(cmf_f16_to_f32(0x812B) + 1.7821789e-5f) < 1e-11f);
    CHECK(cmf_f16_to_f32(0x0400) == 6.1035156e-5f && cmf_f16_to_f32(0x0400) == CMF_F16_TINY);
    CHECK(cmf_f16_to_f32(0x3C00) == 1.0f && cmf_f16_to_f32(0xC000) == -2.0f && cmf_f16_to_f32(0x7BFF) == 65504.0f);
    CHECK(isinf(cmf_f16_to_f32(0x7C00)) && isnan(cmf_f16_to_f32(0x7E00)));
    CHECK(bits_of(cmf_f16_to_f32(0x8000)) == 0x80000000u);

    /* exhaustive: every non-NaN f16 survives f16 -> f32 -> f16; NaN stays NaN */
    int bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        float f = cmf_f16_to_f32((uint16_t)h);
        uint16_t back = cmf_f32_to_f16(f);
        if (isnan(f)) {
            if ((back & 0x7c00) != 0x7c00 || (back & 0x3ff) == 0) bad++;
        } else if (back != h) {
            bad++;
        }
    }
    CHECK_MSG(bad == 0, "%d f16 values do not round-trip", bad);

    /* halfway cases between every pair of adjacent finite f16 values (both signs): ties go to the even code,
     * one f32 ulp either side goes to the nearer one. */
    bad = 0;
    for (uint32_t h = 0; h < 0x7BFF; h++) {
        float lo = cmf_f16_to_f32((uint16_t)h), hi = cmf_f16_to_f32((uint16_t)(h + 1));
        float mid = lo + (hi - lo) / 2; /* exact in f32 */
        uint16_t even = (h & 1) ? (uint16_t)(h + 1) : (uint16_t)h;
        if (cmf_f32_to_f16(mid) != even) bad++;
        if (cmf_f32_to_f16(nextafterf(mid, INFINITY)) != h + 1) bad++;
        if (cmf_f32_to_f16(nextafterf(mid, 0.0f)) != h) bad++;
        if (cmf_f32_to_f16(-mid) != (even | 0x8000)) bad++;
    }
    CHECK_MSG(bad == 0, "%d halfway cases round wrongly", bad);

    /* overflow: 65520 is halfway between 65504 and 2^16, and 65504's code is odd -> inf */
    CHECK(cmf_f32_to_f16(65520.0f) == 0x7C00);
    CHECK(cmf_f32_to_f16(nextafterf(65520.0f, 0.0f)) == 0x7BFF);
    CHECK(cmf_f32_to_f16(1e10f) == 0x7C00 && cmf_f32_to_f16(-1e10f) == 0xFC00);
    CHECK(cmf_f32_to_f16(-INFINITY) == 0xFC00);
    /* underflow: 2^-25 is the tie between 0 and the smallest subnormal -> 0 (even) */
    CHECK(cmf_f32_to_f16(ldexpf(1.0f, -25)) == 0x0000);
    CHECK(cmf_f32_to_f16(nextafterf(ldexpf(1.0f, -25), 1.0f)) == 0x0001);
    CHECK(cmf_f32_to_f16(-ldexpf(1.0f, -26)) == 0x8000);
    CHECK(cmf_f32_to_f16(ldexpf(3.0f, -25)) == 0x0002); /* 1.5 subnormal ulps: tie -> even 2 */
    CHECK(cmf_f32_to_f16(ldexpf(5.0f, -25)) == 0x0002); /* 2.5 -> 2 */
    CHECK(cmf_f32_to_f16(1e-30f) == 0 && cmf_f32_to_f16(from_bits(1)) == 0);
    CHECK(cmf_f16_round(1.0f / 127.0f) == cmf_f16_to_f32(cmf_f32_to_f16(1.0f / 127.0f)));

#if defined(__FLT16_MAX__) && defined(__GNUC__) && !defined(__clang__)
    /* cross-check against the compiler's own conversion on a sweep of f32 bit patterns */
    bad = 0;
    for (uint64_t x = 0; x < 0x100000000ull; x += 4099) {
        float f = from_bits((uint32_t)x);
        if (isnan(f)) continue;
        _Float16 hf = (_Float16)f;
        uint16_t ref;
        memcpy(&ref, &hf, 2);
        if (cmf_f32_to_f16(f) != ref) bad++;
    }
    CHECK_MSG(bad == 0, "%d conversions differ from _Float16", bad);
#endif

    /* bf16: upper half of an f32, round-to-nearest-even, NaN kept */
    CHECK(cmf_f32_to_bf16(1.0f) == 0x3F80);
    CHECK(cmf_f32_to_bf16(from_bits(0x3F808000u)) == 0x3F80); /* tie -> even */
    CHECK(cmf_f32_to_bf16(from_bits(0x3F818000u)) == 0x3F82); /* tie -> even (up) */
    CHECK(cmf_f32_to_bf16(from_bits(0x3F808001u)) == 0x3F81);
    CHECK(isnan(cmf_bf16_to_f32(cmf_f32_to_bf16(NAN))));
    bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        float f = cmf_bf16_to_f32((uint16_t)h);
        if (bits_of(f) != h << 16) bad++;
        if (!isnan(f) && cmf_f32_to_bf16(f) != h) bad++;
    }
    CHECK_MSG(bad == 0, "%d bf16 values do not round-trip", bad);
    CMF_TEST_END();
}
