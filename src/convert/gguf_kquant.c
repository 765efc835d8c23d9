/* gguf_kquant.c — exact decoding of llama.cpp's other block-quantized ggml types (Q4_1, Q5_0, Q5_1, the K-quants
 * Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, Q8_K and the non-linear IQ4_NL, IQ4_XS) to f32.
 *
 * Source of the layouts and the arithmetic: ggml/src/ggml-common.h (block_q4_1 ... block_q8_K, block_iq4_nl,
 * block_iq4_xs, the kvalues_iq4nl table) and ggml/src/ggml-quants.c (dequantize_row_q4_1 ... dequantize_row_q8_K,
 * dequantize_row_iq4_nl / _iq4_xs). Written from those definitions, not copied.
 * Every value is computed with the same f32 operations in the same order as ggml's C: each scale is the f32
 * product (f16 super-scale as f32) · (small integer), then value = scale · q or scale · q - min. Products and
 * differences are separate statements so that no compiler contracts them into an FMA (ISO C allows contraction
 * only inside one expression; ggml's reference semantics is the unfused product and difference), so the
 * results are bit-identical to dequantize_row_* built without FMA contraction and to gguf-py's numpy
 * dequantizer (tests/data/gguf_kquant/make.py checks the latter).
 *
 * All multi-byte fields are little-endian. "Element j" is the j-th value of the block along ne[0]. */
#include <string.h>

#include "convert/gguf.h"
#include "quant/dtype.h"

static float f16_at(const uint8_t *p) { return cmf_f16_to_f32((uint16_t)(p[0] | p[1] << 8)); }

/* Q4_1, 20 bytes / 32 elements: f16 d, f16 m, qs[16]. Element j < 16 is the low nibble of qs[j], j >= 16 the high
 * nibble of qs[j-16]; x = q·d + m. */
static void dq_q4_1(const uint8_t *b, float *y) {
    float d = f16_at(b), m = f16_at(b + 2);
    for (int j = 0; j < 16; j++) {
        float p0 = (float)(b[4 + j] & 15) * d, p1 = (float)(b[4 + j] >> 4) * d;
        y[j] = p0 + m;
        y[j + 16] = p1 + m;
    }
}

/* The fifth bit of element j (0..31) of a Q5_0 / Q5_1 block: bit j of the u32 qh (little-endian). */
static int q5_hi(const uint8_t *qh, int j) { return (qh[j >> 3] >> (j & 7)) & 1; }

/* Q5_0, 22 bytes / 32 elements: f16 d, u32 qh, qs[16]. q_j = (nibble as Q4_1) | bit j of qh << 4; x = (q - 16)·d. */
static void dq_q5_0(const uint8_t *b, float *y) {
    float d = f16_at(b);
    const uint8_t *qh = b + 2, *qs = b + 6;
    for (int j = 0; j < 16; j++) {
        y[j] = (float)(((qs[j] & 15) | q5_hi(qh, j) << 4) - 16) * d;
        y[j + 16] = (float)(((qs[j] >> 4) | q5_hi(qh, j + 16) << 4) - 16) * d;
    }
}

/* Q5_1, 24 bytes / 32 elements: f16 d, f16 m, u32 qh, qs[16]. q_j as Q5_0 (unsigned, 0..31); x = q·d + m. */
static void dq_q5_1(const uint8_t *b, float *y) {
    float d = f16_at(b), m = f16_at(b + 2);
    const uint8_t *qh = b + 4, *qs = b + 8;
    for (int j = 0; j < 16; j++) {
        float p0 = (float)((qs[j] & 15) | q5_hi(qh, j) << 4) * d;
        float p1 = (float)((qs[j] >> 4) | q5_hi(qh, j + 16) << 4) * d;
        y[j] = p0 + m;
        y[j + 16] = p1 + m;
    }
}

/* Q2_K, 84 bytes / 256 elements: scales[16], qs[64], f16 d, f16 dmin. Sub-block s (16 elements, s = 0..15) has
 * scale d·(scales[s] & 15) and min dmin·(scales[s] >> 4). Element j = 128h + 32k + 16u + l (h < 2, k < 4, u < 2,
 * l < 16) is in sub-block s = 8h + 2k + u, its 2-bit q is bits 2k..2k+1 of qs[32h + 16u + l]; x = dl·q - ml. */
static void dq_q2_k(const uint8_t *b, float *y) {
    const uint8_t *sc = b, *qs = b + 16;
    float d = f16_at(b + 80), dmin = f16_at(b + 82);
    for (int j = 0; j < 256; j++) {
        int h = j >> 7, k = (j >> 5) & 3, u = (j >> 4) & 1, l = j & 15, s = 8 * h + 2 * k + u;
        float dl = d * (float)(sc[s] & 15), ml = dmin * (float)(sc[s] >> 4);
        float p = dl * (float)((qs[32 * h + 16 * u + l] >> (2 * k)) & 3);
        y[j] = p - ml;
    }
}

/* The 6-bit signed scale of Q3_K sub-block s (0..15) from its 12 packed bytes: low 4 bits are the low (s < 8) or
 * high (s >= 8) nibble of sc[s % 8], high 2 bits are bits 2(s / 4)..+1 of sc[8 + s % 4]; value minus 32. */
static int q3k_scale(const uint8_t *sc, int s) {
    int lo = s < 8 ? sc[s] & 15 : sc[s - 8] >> 4;
    int hi = (sc[8 + (s & 3)] >> (2 * (s >> 2))) & 3;
    return (lo | hi << 4) - 32;
}

/* Q3_K, 110 bytes / 256 elements: hmask[32], qs[64], scales[12], f16 d. Element j = 128h + 32k + 16u + l as in
 * Q2_K: sub-block s = 8h + 2k + u, low 2 bits from qs[32h + 16u + l] >> 2k, high bit = bit (4h + k) of
 * hmask[16u + l]; q = low - (high ? 0 : 4) (range -4..3); x = (d·scale_s)·q. */
static void dq_q3_k(const uint8_t *b, float *y) {
    const uint8_t *hm = b, *qs = b + 32, *sc = b + 96;
    float d = f16_at(b + 108);
    for (int j = 0; j < 256; j++) {
        int h = j >> 7, k = (j >> 5) & 3, u = (j >> 4) & 1, l = j & 15, s = 8 * h + 2 * k + u;
        int lo = (qs[32 * h + 16 * u + l] >> (2 * k)) & 3;
        int hi = (hm[16 * u + l] >> (4 * h + k)) & 1;
        float dl = d * (float)q3k_scale(sc, s);
        y[j] = dl * (float)(lo - (hi ? 0 : 4));
    }
}

/* The 6-bit scale and min of sub-block s (0..7) of Q4_K / Q5_K from the 12 packed bytes (ggml's get_scale_min_k4):
 * s < 4: scale = sc[s] & 63, min = sc[s + 4] & 63; s >= 4: scale = (sc[s + 4] & 15) | (sc[s - 4] >> 6) << 4,
 * min = (sc[s + 4] >> 4) | (sc[s] >> 6) << 4. */
static void k4_scale_min(const uint8_t *sc, int s, int *scale, int *min) {
    if (s < 4) {
        *scale = sc[s] & 63;
        *min = sc[s + 4] & 63;
    } else {
        *scale = (sc[s + 4] & 15) | (sc[s - 4] >> 6) << 4;
        *min = (sc[s + 4] >> 4) | (sc[s] >> 6) << 4;
    }
}

/* Q4_K, 144 bytes / 256 elements: f16 d, f16 dmin, scales[12], qs[128]. Sub-block s = j / 32 (8 of 32 elements)
 * has d_s = d·scale_s, m_s = dmin·min_s; element j = 64p + 32v + l (p < 4, v < 2) has q = low (v = 0) or high
 * (v = 1) nibble of qs[32p + l]; x = d_s·q - m_s.
 * Q5_K, 176 bytes / 256 elements: f16 d, f16 dmin, scales[12], qh[32], qs[128]. As Q4_K, with a fifth bit: element
 * 32s + l has q = nibble | (bit s of qh[l]) << 4 (0..31); x = d_s·q - m_s. qh: NULL for Q4_K. */
static void dq_q45_k(const uint8_t *b, const uint8_t *qh, const uint8_t *qs, float *y) {
    float d = f16_at(b), dmin = f16_at(b + 2);
    const uint8_t *sc = b + 4;
    for (int s = 0; s < 8; s++) {
        int scale, min;
        k4_scale_min(sc, s, &scale, &min);
        float ds = d * (float)scale, ms = dmin * (float)min;
        const uint8_t *q = qs + 32 * (s >> 1);
        for (int l = 0; l < 32; l++) {
            int v = ((s & 1) ? q[l] >> 4 : q[l] & 15) | (qh ? ((qh[l] >> s) & 1) << 4 : 0);
            float p = ds * (float)v;
            y[32 * s + l] = p - ms;
        }
    }
}
static void dq_q4_k(const uint8_t *b, float *y) { dq_q45_k(b, NULL, b + 16, y); }
static void dq_q5_k(const uint8_t *b, float *y) { dq_q45_k(b, b + 16, b + 48, y); }

/* Q6_K, 210 bytes / 256 elements: ql[128], qh[64], int8 scales[16], f16 d. Element j = 128h + 32k + l (h < 2,
 * k < 4, l < 32): low 4 bits = low (k < 2) or high (k >= 2) nibble of ql[64h + 32(k & 1) + l], high 2 bits =
 * bits 2k..2k+1 of qh[32h + l]; q = that 6-bit value - 32; sub-block s = j / 16; x = (d·scales[s])·q. */
static void dq_q6_k(const uint8_t *b, float *y) {
    const uint8_t *ql = b, *qh = b + 128, *sc = b + 192;
    float d = f16_at(b + 208);
    for (int j = 0; j < 256; j++) {
        int h = j >> 7, k = (j >> 5) & 3, l = j & 31;
        int lo = ql[64 * h + 32 * (k & 1) + l];
        lo = k < 2 ? lo & 15 : lo >> 4;
        int hi = (qh[32 * h + l] >> (2 * k)) & 3;
        float ds = d * (float)(int8_t)sc[j >> 4];
        y[j] = ds * (float)((lo | hi << 4) - 32);
    }
}

/* Q8_K, 292 bytes / 256 elements: f32 d, int8 qs[256], int16 bsums[16] (sums for dot products, unused here);
 * x = d·q. */
static void dq_q8_k(const uint8_t *b, float *y) {
    uint32_t bits = (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
    float d;
    memcpy(&d, &bits, 4);
    for (int j = 0; j < 256; j++) y[j] = d * (float)(int8_t)b[4 + j];
}

/* The 16 levels of IQ4_NL / IQ4_XS (ggml-common.h kvalues_iq4nl): a 4-bit code k stands for IQ4_LEVELS[k]. */
static const int8_t IQ4_LEVELS[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

/* IQ4_NL, 18 bytes / 32 elements: f16 d, qs[16]. Element j < 16 has the code in the low nibble of qs[j], j >= 16 in
 * the high nibble of qs[j-16]; x = d·IQ4_LEVELS[code]. */
static void dq_iq4_nl(const uint8_t *b, float *y) {
    float d = f16_at(b);
    for (int j = 0; j < 16; j++) {
        y[j] = d * (float)IQ4_LEVELS[b[2 + j] & 15];
        y[j + 16] = d * (float)IQ4_LEVELS[b[2 + j] >> 4];
    }
}

/* IQ4_XS, 136 bytes / 256 elements: f16 d, u16 scales_h, scales_l[4], qs[128]. Sub-block s (0..7, 32 elements) has
 * the 6-bit scale ls = (nibble s % 2 of scales_l[s / 2]) | (bits 2s..2s+1 of scales_h) << 4 and dl = d·(ls - 32);
 * its elements are coded as an IQ4_NL block over qs[16s..16s+15]; x = dl·IQ4_LEVELS[code]. */
static void dq_iq4_xs(const uint8_t *b, float *y) {
    float d = f16_at(b);
    unsigned sh = (unsigned)b[2] | (unsigned)b[3] << 8;
    for (int s = 0; s < 8; s++) {
        int ls = ((b[4 + s / 2] >> (4 * (s & 1))) & 15) | (int)((sh >> (2 * s)) & 3) << 4;
        float dl = d * (float)(ls - 32);
        const uint8_t *q = b + 8 + 16 * s;
        for (int j = 0; j < 16; j++) {
            y[32 * s + j] = dl * (float)IQ4_LEVELS[q[j] & 15];
            y[32 * s + j + 16] = dl * (float)IQ4_LEVELS[q[j] >> 4];
        }
    }
}

int cmf_gguf_dequant_blocks(int type, const uint8_t *src, uint64_t n, float *out) {
    void (*fn)(const uint8_t *, float *);
    unsigned blck, size;
    switch (type) {
    case CMF_GGML_Q4_1: fn = dq_q4_1, blck = 32, size = 20; break;
    case CMF_GGML_Q5_0: fn = dq_q5_0, blck = 32, size = 22; break;
    case CMF_GGML_Q5_1: fn = dq_q5_1, blck = 32, size = 24; break;
    case CMF_GGML_Q2_K: fn = dq_q2_k, blck = 256, size = 84; break;
    case CMF_GGML_Q3_K: fn = dq_q3_k, blck = 256, size = 110; break;
    case CMF_GGML_Q4_K: fn = dq_q4_k, blck = 256, size = 144; break;
    case CMF_GGML_Q5_K: fn = dq_q5_k, blck = 256, size = 176; break;
    case CMF_GGML_Q6_K: fn = dq_q6_k, blck = 256, size = 210; break;
    case CMF_GGML_Q8_K: fn = dq_q8_k, blck = 256, size = 292; break;
    case CMF_GGML_IQ4_NL: fn = dq_iq4_nl, blck = 32, size = 18; break;
    case CMF_GGML_IQ4_XS: fn = dq_iq4_xs, blck = 256, size = 136; break;
    default: return 0;
    }
    for (uint64_t i = 0; i < n / blck; i++) fn(src + (uint64_t)size * i, out + (uint64_t)blck * i);
    return 1;
}
