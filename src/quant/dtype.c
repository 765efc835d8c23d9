/* dtype.c — the dtype table (CMF_FORMAT.md §2.0) and the scalar f16/bf16 conversions (§2, §2.13). */
#include "quant/dtype.h"

#include <math.h>
#include <string.h>

static const char *const k_names[CMF_DT_COUNT] = {
    "f32", "f16", "bf16", "q8_row", "q4_block", "mix8_4", "u8", "q4_col", "vbit",
    "q8_2f", "vbit_ro", "q4_tiled", "q1", "q1s", "q1t", "q4tp", "q2tp",
};

const char *cmf_dtype_name(int dtype) {
    if (dtype < 0 || dtype >= CMF_DT_COUNT) return NULL;
    return k_names[dtype];
}

int cmf_dtype_from_name(const char *name) {
    if (!name) return -1;
    for (int i = 0; i < CMF_DT_COUNT; i++)
        if (strcmp(name, k_names[i]) == 0) return i;
    /* The CLI --quant aliases of §2.0. */
    if (strcmp(name, "q8") == 0) return CMF_DT_Q8_ROW;
    if (strcmp(name, "q4") == 0) return CMF_DT_Q4_BLOCK;
    if (strcmp(name, "q4t") == 0) return CMF_DT_Q4_TILED;
    if (strcmp(name, "vbit_legacy") == 0) return CMF_DT_VBIT;
    return -1;
}

/* a*b and a+b on u64, returning 0 on overflow. */
static int mul_ok(uint64_t a, uint64_t b, uint64_t *r) {
    if (a != 0 && b > UINT64_MAX / a) return 0;
    *r = a * b;
    return 1;
}
static int add_ok(uint64_t a, uint64_t b, uint64_t *r) {
    if (b > UINT64_MAX - a) return 0;
    *r = a + b;
    return 1;
}

int cmf_dtype_nbytes(int dtype, int ndim, const uint32_t *shape, uint64_t *nbytes) {
    if (ndim < 0 || ndim > 6 || (ndim > 0 && !shape)) return 0;
    uint64_t n = 1;
    for (int i = 0; i < ndim; i++)
        if (!mul_ok(n, shape[i], &n)) return -1;
    uint64_t rows = ndim > 0 ? shape[0] : 1;
    uint64_t groups = n / 32 + (n % 32 != 0);
    uint64_t r = 0, t = 0;
    switch (dtype) {
    case CMF_DT_F32:
        if (!mul_ok(n, 4, &r)) return -1;
        break;
    case CMF_DT_F16:
    case CMF_DT_BF16:
        if (!mul_ok(n, 2, &r)) return -1;
        break;
    case CMF_DT_Q8_ROW: /* n + 2*shape[0] */
        if (!add_ok(n, 2 * rows, &r)) return -1;
        break;
    case CMF_DT_Q4_BLOCK:
    case CMF_DT_Q4_TILED: /* 18*ceil(n/32) */
        if (!mul_ok(groups, 18, &r)) return -1;
        break;
    case CMF_DT_Q8_2F: { /* n + 2*rows + 2*(n/rows) */
        uint64_t cols = rows ? n / rows : 0;
        if (!add_ok(n, 2 * rows, &r) || !add_ok(r, 2 * cols, &r)) return -1;
        break;
    }
    case CMF_DT_Q1: /* 6*ceil(n/32) */
        if (!mul_ok(groups, 6, &r)) return -1;
        break;
    case CMF_DT_Q4TP:
    case CMF_DT_Q2TP: { /* rows*(16|8 * gpr + 4 + ceil(5*gpr/8)), 2-D only */
        if (ndim != 2) return 0;
        uint64_t gpr = (uint64_t)shape[1] / 32;
        uint64_t per = (dtype == CMF_DT_Q4TP ? 16 : 8) * gpr + 4 + (5 * gpr + 7) / 8;
        if (!mul_ok(rows, per, &t)) return -1;
        r = t;
        break;
    }
    default: /* mix8_4, u8, q4_col, vbit, vbit_ro, q1s, q1t, unknown ids: not checked */
        return 0;
    }
    *nbytes = r;
    return 1;
}

float cmf_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu, x;
    float f;
    if (e == 0) {
        /* zero or subnormal: m * 2^-24, exact in f32 */
        f = (float)m * 5.9604644775390625e-8f;
        return sign ? -f : f;
    }
    if (e == 31)
        x = sign | 0x7f800000u | (m << 13);
    else
        x = sign | ((e + 112u) << 23) | (m << 13);
    memcpy(&f, &x, 4);
    return f;
}

uint16_t cmf_f32_to_f16(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
    uint32_t ax = x & 0x7fffffffu;
    if (ax > 0x7f800000u) return (uint16_t)(sign | 0x7e00u | ((ax >> 13) & 0x3ffu)); /* NaN stays quiet NaN */
    if (ax >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* >= 65520 (halfway past 65504) and inf */
    if (ax >= 0x38800000u) {                                  /* normal result, >= 2^-14 */
        uint32_t mant = ax & 0x7fffffu;
        uint32_t h = (((ax >> 23) - 112u) << 10) | (mant >> 13);
        uint32_t rem = mant & 0x1fffu;
        if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) h++; /* a carry moves into the exponent correctly */
        return (uint16_t)(sign | h);
    }
    if (ax < 0x33000000u) return sign; /* below 2^-25: rounds to zero */
    /* subnormal result: value / 2^-24 = mant * 2^(e - 126), e in [102, 112] */
    uint32_t e = ax >> 23, mant = (ax & 0x7fffffu) | 0x800000u;
    uint32_t s = 126u - e;
    uint32_t h = mant >> s, rem = mant & ((1u << s) - 1u), half = 1u << (s - 1u);
    if (rem > half || (rem == half && (h & 1u))) h++;
    return (uint16_t)(sign | h);
}

float cmf_bf16_to_f32(uint16_t h) {
    uint32_t x = (uint32_t)h << 16;
    float f;
    memcpy(&f, &x, 4);
    return f;
}

uint16_t cmf_f32_to_bf16(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40u);
    x += 0x7fffu + ((x >> 16) & 1u);
    return (uint16_t)(x >> 16);
}

float cmf_f16_round(float f) { return cmf_f16_to_f32(cmf_f32_to_f16(f)); }

float cmf_f16_scale(float x) {
    if (x != x) return x;
    if (x < CMF_F16_TINY) return CMF_F16_TINY;
    if (x >= 65520.0f) return INFINITY;
    uint32_t b;
    memcpy(&b, &x, 4);
    /* 13 mantissa bits off, to nearest even (a carry may reach the exponent) */
    b = (b + 0xfffu + ((b >> 13) & 1u)) & ~0x1fffu;
    memcpy(&x, &b, 4);
    return x;
}
