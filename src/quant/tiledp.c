/* tiledp.c — q4tp (id 15) and q2tp (id 16), CMF_FORMAT.md §2.6–2.7: ladders, decode and the cortiq encoders.
 * Arithmetic is f32 in the order the reference writes it (no contraction: see the pragma), so that encoded bytes
 * match cortiq's converter and decoded floats match its reader bit for bit. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "quant/dtype.h"
#include "quant/ladder.h"
#include "quant/qpar.h"
#include "util/error.h"

#ifdef __clang__
#pragma STDC FP_CONTRACT OFF
#endif

static uint16_t rd16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }
static void wr16(uint8_t *p, uint16_t v) {
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}

uint64_t cmf_tp_layout(int q2, uint64_t rows, uint64_t cols, uint64_t *params_off, uint64_t *codes_off,
                       uint64_t *stride) {
    uint64_t gpr = cols / CMF_TP_GROUP;
    uint64_t w = rows * gpr * (q2 ? CMF_Q2TP_CHUNK : CMF_Q4TP_NIB);
    *stride = (5 * gpr + 7) / 8;
    *params_off = w;
    *codes_off = w + 4 * rows;
    return *codes_off + rows * *stride;
}

void cmf_q4tp_ladder(const uint8_t *params, float t[32]) {
    float lo = cmf_f16_to_f32(rd16(params)), step = cmf_f16_to_f32(rd16(params + 2));
    float ratio = cmf_exp2f(step);
    t[0] = cmf_exp2f(lo);
    for (int c = 1; c < 32; c++) t[c] = t[c - 1] * ratio;
}

void cmf_q2tp_ladder(const uint8_t *params, float t[32]) {
    float b[32];
    cmf_q4tp_ladder(params, b);
    t[0] = 0.0f;
    memcpy(t + 1, b, 31 * sizeof *t);
}

unsigned cmf_tp_code(const uint8_t *codes, uint64_t g) {
    uint64_t bit = 5 * g, byte = bit / 8;
    unsigned sh = (unsigned)(bit % 8);
    unsigned v = codes[byte];
    if (sh > 3) v |= (unsigned)codes[byte + 1] << 8;
    return (v >> sh) & 31u;
}

static void put_code(uint8_t *codes, uint64_t g, unsigned code) {
    uint64_t bit = 5 * g, byte = bit / 8;
    unsigned sh = (unsigned)(bit % 8);
    codes[byte] |= (uint8_t)((code & 31u) << sh);
    if (sh > 3) codes[byte + 1] |= (uint8_t)((code & 31u) >> (8 - sh));
}

cmf_status cmf_dequant_tp(int dtype, int ndim, const uint32_t *shape, const uint8_t *data, uint64_t nbytes,
                          float *out) {
    int q2 = dtype == CMF_DT_Q2TP;
    const char *nm = q2 ? "q2tp" : "q4tp";
    if (dtype != CMF_DT_Q4TP && dtype != CMF_DT_Q2TP)
        return cmf_err(CMF_E_ARG, "dequant_tp: dtype %d is not q4tp or q2tp", dtype);
    if (ndim != 2) return cmf_err(CMF_E_FORMAT, "dequant %s: shape must be 2-D, got ndim %d", nm, ndim);
    if (shape[1] % CMF_TP_GROUP != 0)
        return cmf_err(CMF_E_FORMAT, "dequant %s: cols %u is not a multiple of 32", nm, shape[1]);
    uint64_t want;
    int k = cmf_dtype_nbytes(dtype, ndim, shape, &want);
    if (k != 1) return cmf_err(CMF_E_FORMAT, "dequant %s: size of shape [%u, %u] overflows", nm, shape[0], shape[1]);
    if (want != nbytes)
        return cmf_err(CMF_E_FORMAT, "dequant %s: nbytes %llu, expected %llu for shape [%u, %u]", nm,
                       (unsigned long long)nbytes, (unsigned long long)want, shape[0], shape[1]);
    uint64_t rows = shape[0], cols = shape[1], gpr = cols / CMF_TP_GROUP, po, co, stride;
    cmf_tp_layout(q2, rows, cols, &po, &co, &stride);
    for (uint64_t r = 0; r < rows; r++) {
        float t[32];
        if (q2)
            cmf_q2tp_ladder(data + po + 4 * r, t);
        else
            cmf_q4tp_ladder(data + po + 4 * r, t);
        const uint8_t *codes = data + co + r * stride;
        for (uint64_t g = 0; g < gpr; g++) {
            float s = t[cmf_tp_code(codes, g)];
            float *o = out + r * cols + g * CMF_TP_GROUP;
            if (q2) {
                const uint8_t *ch = data + (r * gpr + g) * CMF_Q2TP_CHUNK;
                for (unsigned b = 0; b < CMF_Q2TP_CHUNK; b++)
                    for (unsigned j = 0; j < 4; j++) o[4 * b + j] = ((float)((ch[b] >> (2 * j)) & 3u) - 1.5f) * s;
            } else {
                const uint8_t *nib = data + (r * gpr + g) * CMF_Q4TP_NIB;
                for (unsigned b = 0; b < CMF_Q4TP_NIB; b++) {
                    o[2 * b] = (float)((int)(nib[b] & 15u) - 8) * s;
                    o[2 * b + 1] = (float)((int)(nib[b] >> 4) - 8) * s;
                }
            }
        }
    }
    return CMF_OK;
}

int cmf_tp_search_enabled(void) {
    const char *v = getenv("CMF_Q2TP_SEARCH");
    return !(v && strcmp(v, "0") == 0);
}

/* ------------------------------------------------------------------------------------------------------------
 * Encoders.
 * ---------------------------------------------------------------------------------------------------------- */


/* f32 -> f16 bits exactly as cortiq's f32_to_f16 (crates/cortiq-core/src/quant.rs), used for the row's lo and
 * step so that the params match bit for bit: round-to-nearest-even for normal results, but round-half-up (away
 * from zero) for subnormal ones, overflow -> inf, NaN -> 0x7e00. */
static uint16_t f16_cortiq(float x) {
    uint32_t b;
    memcpy(&b, &x, 4);
    uint16_t sign = (uint16_t)((b >> 16) & 0x8000u);
    int e = (int)((b >> 23) & 0xffu);
    uint32_t mant = b & 0x7fffffu;
    if (e == 0xff) return (uint16_t)(sign | 0x7c00u | (mant ? 0x200u : 0u));
    e -= 112;
    if (e >= 0x1f) return (uint16_t)(sign | 0x7c00u);
    if (e <= 0) {
        if (e < -10) return sign;
        uint32_t m = mant | 0x800000u, sh = (uint32_t)(14 - e);
        return (uint16_t)(sign | ((m >> sh) + ((m >> (sh - 1)) & 1u)));
    }
    uint32_t h = ((uint32_t)e << 10) | (mant >> 13), rnd = (mant >> 12) & 1u, sticky = (mant & 0xfffu) != 0;
    return (uint16_t)(sign | (h + (rnd & (sticky | (h & 1u)))));
}

/* clamp(round-half-even(x), lo, hi) as a float; NaN maps to lo (Rust's `as usize` saturates NaN to 0, and every
 * caller passes lo = 0 where NaN can occur). */
static float rclamp(float x, float lo, float hi) {
    float r = rintf(x);
    if (!(r >= lo)) return lo;
    return r > hi ? hi : r;
}

/* Row state shared by both encoders. */
typedef struct tp_row {
    const float *w;
    uint64_t gpr;
    float *lg;
    unsigned char *dead;
    float lo_r, hi;
    uint16_t lo_h;
} tp_row;

/* Step the f16 `step` up from f16(span/lmax) until lo_r + lmax*step >= top (at most 64 ULPs), as cortiq does. */
static uint16_t tp_step(float lo_r, float top, float lmax) {
    float span = fmaxf(top - lo_r, 0.0f);
    uint16_t st_h = f16_cortiq(span / lmax);
    for (int i = 0; i < 64; i++) {
        float st = cmf_f16_to_f32(st_h);
        if (st > 0.0f && lo_r + lmax * st >= top) break;
        st_h = (uint16_t)(st_h + 1u);
    }
    return st_h;
}

/* Squared error of one tile on scale s (q4: levels -8..7; q2: (c-1.5), c in 0..3), f32 sum in order. */
static float tile_err(int q2, const float *w, float s) {
    float iv = 1.0f / s, e = 0.0f;
    for (unsigned i = 0; i < CMF_TP_GROUP; i++) {
        float d;
        if (q2) {
            float q = rclamp(w[i] * iv + 1.5f, 0.0f, 3.0f);
            d = w[i] - (q - 1.5f) * s;
        } else {
            float q = rclamp(w[i] * iv, -8.0f, 7.0f);
            d = w[i] - q * s;
        }
        e += d * d;
    }
    return e;
}

/* Nominal rung of tile g: q4tp round((lg-lo)/st) in [0,31]; q2tp 1 + that in [0,30] (rung 0 is the zero). */
static unsigned nominal(int q2, const tp_row *R, uint64_t g, float st) {
    if (q2) {
        if (R->dead[g]) return 0;
        if (st <= 0.0f) return 1;
        return 1u + (unsigned)rclamp((R->lg[g] - R->lo_r) / st, 0.0f, 30.0f);
    }
    if (R->dead[g] || st <= 0.0f) return 0;
    return (unsigned)rclamp((R->lg[g] - R->lo_r) / st, 0.0f, 31.0f);
}

/* Best rung in [max(nom-2, floor), min(nom+up, 31)] by tile error (first minimum wins). */
static unsigned search_rung(int q2, const float *w, const float t[32], unsigned nom, unsigned up, float *best_err) {
    unsigned lo = nom >= 2 ? nom - 2 : 0, hi = nom + up > 31 ? 31 : nom + up, best = nom;
    if (q2 && lo < 1) lo = 1;
    float be = INFINITY;
    for (unsigned c = lo; c <= hi; c++) {
        if (!(t[c] > 0.0f)) continue;
        float e = tile_err(q2, w, t[c]);
        if (e < be) be = e, best = c;
    }
    if (best_err) *best_err = be;
    return best;
}

/* Encodes one row: params (4 bytes), codes (zeroed, stride bytes), weight plane (gpr tiles). */
static void enc_row(int q2, tp_row *R, int search, uint8_t *params, uint8_t *codes, uint8_t *wp) {
    float lmax = q2 ? 30.0f : 31.0f, t[32];
    uint16_t st_h = tp_step(R->lo_r, R->hi, lmax);
    wr16(params, R->lo_h);
    wr16(params + 2, st_h);
    if (q2 && search && R->hi > R->lo_r) {
        /* Ladder tops {1.0, 0.9, 0.8, 0.7} of the range; keep the one with the lowest row error. */
        static const float FR[4] = {1.0f, 0.9f, 0.8f, 0.7f};
        float best_err = INFINITY, best_top = R->hi;
        for (int f = 0; f < 4; f++) {
            float top = R->lo_r + (R->hi - R->lo_r) * FR[f];
            uint8_t probe[4];
            wr16(probe, R->lo_h);
            wr16(probe + 2, tp_step(R->lo_r, top, lmax));
            cmf_q2tp_ladder(probe, t);
            float stc = cmf_f16_to_f32(rd16(probe + 2)), err = 0.0f;
            for (uint64_t g = 0; g < R->gpr; g++) {
                if (R->dead[g]) continue;
                unsigned nom = nominal(1, R, g, stc);
                float ge;
                search_rung(1, R->w + g * CMF_TP_GROUP, t, nom, 2, &ge);
                err += ge;
            }
            if (err < best_err) best_err = err, best_top = top;
        }
        wr16(params + 2, tp_step(R->lo_r, best_top, lmax));
    }
    if (q2)
        cmf_q2tp_ladder(params, t);
    else
        cmf_q4tp_ladder(params, t);
    float st = cmf_f16_to_f32(rd16(params + 2));
    for (uint64_t g = 0; g < R->gpr; g++) {
        const float *w = R->w + g * CMF_TP_GROUP;
        unsigned c = nominal(q2, R, g, st);
        int live = q2 ? c != 0 : !R->dead[g] && st > 0.0f;
        if (search && live) c = search_rung(q2, w, t, c, 1, NULL);
        put_code(codes, g, c);
        float inv = t[c] > 0.0f ? 1.0f / t[c] : 0.0f;
        if (q2) {
            uint8_t *ch = wp + g * CMF_Q2TP_CHUNK;
            for (unsigned b = 0; b < CMF_Q2TP_CHUNK; b++) {
                unsigned v = 0;
                for (unsigned j = 0; j < 4; j++) v |= (unsigned)rclamp(w[4 * b + j] * inv + 1.5f, 0.0f, 3.0f) << (2 * j);
                ch[b] = (uint8_t)v;
            }
        } else {
            uint8_t *nib = wp + g * CMF_Q4TP_NIB;
            for (unsigned b = 0; b < CMF_Q4TP_NIB; b++) {
                int q0 = (int)rclamp(w[2 * b] * inv, -8.0f, 7.0f) + 8, q1 = (int)rclamp(w[2 * b + 1] * inv, -8.0f, 7.0f) + 8;
                nib[b] = (uint8_t)(q0 | (q1 << 4));
            }
        }
    }
}

/* One cmf_qpar_run range of cmf_quantize_tp: rows [lo, hi), each with its own tile scales. */
typedef struct {
    int q2, search, q4s; /* q4s: CMF_Q4_SEARCH's tile scales (q4tp only) */
    const char *nm;
    uint64_t cols, gpr, po, co, stride; /* cmf_tp_layout's offsets */
    const float *src;
    uint8_t *dst;
} tp_job;

static cmf_status enc_rows(void *ctx, uint64_t r0, uint64_t r1) {
    const tp_job *j = ctx;
    const int q2 = j->q2;
    float *lg = malloc(j->gpr * sizeof *lg);
    unsigned char *dead = malloc(j->gpr);
    if (!lg || !dead) {
        free(lg), free(dead);
        return cmf_err(CMF_E_NOMEM, "quantize %s: cannot allocate %llu tiles", j->nm, (unsigned long long)j->gpr);
    }
    const float div = q2 ? 1.5f : 7.0f;
    cmf_status st = CMF_OK;
    for (uint64_t r = r0; r < r1 && !st; r++) {
        tp_row R = {j->src + r * j->cols, j->gpr, lg, dead, 0.0f, 0.0f, 0};
        float lo = INFINITY, hi = -INFINITY;
        for (uint64_t g = 0; g < j->gpr; g++) {
            const float *w = R.w + g * CMF_TP_GROUP;
            float amax = 0.0f;
            for (unsigned i = 0; i < CMF_TP_GROUP; i++) amax = fmaxf(amax, fabsf(w[i]));
            float s = cmf_f16_scale(amax / div);
            if (j->q4s && amax > 0.0f && !isinf(s)) /* CMF_Q4_SEARCH: the ladder fits searched scales (dtype.h) */
                s = cmf_q4_search_scale(w, amax, 0);
            if (isinf(s)) {
                st = cmf_err(CMF_E_ARG, "quantize %s: row %llu tile %llu: absmax %g overflows the f16 scale (largest "
                             "finite f16 65504); use --quant bf16 or --quant f32", j->nm, (unsigned long long)r,
                             (unsigned long long)g, (double)amax);
                break;
            }
            dead[g] = amax == 0.0f;
            lg[g] = log2f(s);
            if (!dead[g]) {
                lo = fminf(lo, lg[g]);
                hi = fmaxf(hi, lg[g]);
            }
        }
        if (st) break;
        if (!isfinite(lo)) lo = hi = lg[0];
        R.lo_h = f16_cortiq(lo);
        R.lo_r = cmf_f16_to_f32(R.lo_h);
        R.hi = hi;
        enc_row(q2, &R, j->search, j->dst + j->po + 4 * r, j->dst + j->co + r * j->stride,
                j->dst + r * j->gpr * (q2 ? CMF_Q2TP_CHUNK : CMF_Q4TP_NIB));
    }
    free(lg), free(dead);
    return st;
}

cmf_status cmf_quantize_tp(int dtype, uint64_t rows, uint64_t cols, const float *src, uint8_t *dst, int search) {
    int q2 = dtype == CMF_DT_Q2TP;
    const char *nm = q2 ? "q2tp" : "q4tp";
    if (dtype != CMF_DT_Q4TP && dtype != CMF_DT_Q2TP)
        return cmf_err(CMF_E_ARG, "quantize_tp: dtype %d is not q4tp or q2tp", dtype);
    if (cols % CMF_TP_GROUP != 0)
        return cmf_err(CMF_E_ARG, "quantize %s: cols %llu is not a multiple of 32", nm, (unsigned long long)cols);
    if (cols != 0 && rows > UINT64_MAX / 4 / cols)
        return cmf_err(CMF_E_ARG, "quantize %s: %llu x %llu elements overflow", nm, (unsigned long long)rows,
                       (unsigned long long)cols);
    for (uint64_t i = 0; i < rows * cols; i++)
        if (!isfinite(src[i]))
            return cmf_err(CMF_E_ARG, "quantize %s: element %llu is not finite", nm, (unsigned long long)i);
    uint64_t gpr = cols / CMF_TP_GROUP;
    tp_job j = {q2, search, !q2 && cmf_q4_search_enabled(), nm, cols, gpr, 0, 0, 0, src, dst};
    uint64_t total = cmf_tp_layout(q2, rows, cols, &j.po, &j.co, &j.stride);
    memset(dst, 0, total);
    if (gpr == 0) return CMF_OK; /* no tiles: zero params, nothing else */
    return cmf_qpar_run(rows, 4 * rows * cols * (search || j.q4s ? 8 : 1), enc_rows, &j);
}
