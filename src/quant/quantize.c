/* quantize.c — the reference encoders (CMF_FORMAT.md §2.1–2.5, §2.13), bit-exact to cortiq's:
 * every scale is rounded to f16 (round-to-nearest-even) and floored at CMF_F16_TINY before the integers are
 * computed against it; integers are round-half-even (rintf in the default rounding mode) and clamped. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "quant/dtype.h"
#include "quant/ladder.h"
#include "quant/qpar.h"
#include "util/error.h"

static void wr16(uint8_t *p, uint16_t v) {
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}

/* The error for a stored scale that rounds past the f16 range (absmax / level > 65504 + half an ulp): cmf_f16_scale
 * gives inf there, which would decode every element of the group or row as inf / NaN. q4tp / q2tp refuse the same way
 * (tiledp.c). */
static cmf_status scale_overflow(int dtype, const char *what, uint64_t i, float amax) {
    return cmf_err(CMF_E_ARG, "quantize %s: %s %llu: absmax %g overflows the f16 scale (largest finite f16 65504); "
                   "use --quant bf16 or --quant f32",
                   cmf_dtype_name(dtype), what, (unsigned long long)i, (double)amax);
}

/* round-half-even of x, clamped to [lo, hi]; x is finite here (inputs are checked). */
static int round_clamp(float x, int lo, int hi) {
    float r = rintf(x);
    if (r < (float)lo) return lo;
    if (r > (float)hi) return hi;
    return (int)r;
}

static cmf_status check_finite(const float *src, uint64_t n, int dtype) {
    for (uint64_t i = 0; i < n; i++)
        if (!isfinite(src[i]))
            return cmf_err(CMF_E_ARG, "quantize %s: element %llu is not finite", cmf_dtype_name(dtype),
                           (unsigned long long)i);
    return CMF_OK;
}

/* q8_row (§2.2): [int8 q: rows*cols][f16 scale: rows]; s = cmf_f16_scale(absmax/127), q in [-128, 127]. */
static cmf_status enc_q8_row(uint64_t rows, uint64_t cols, const float *src, uint8_t *dst) {
    uint8_t *sc = dst + rows * cols;
    for (uint64_t r = 0; r < rows; r++) {
        const float *w = src + r * cols;
        float amax = 0.0f;
        for (uint64_t c = 0; c < cols; c++) amax = fmaxf(amax, fabsf(w[c]));
        float s = cmf_f16_scale(amax / 127.0f);
        if (isinf(s)) return scale_overflow(CMF_DT_Q8_ROW, "row", r, amax);
        for (uint64_t c = 0; c < cols; c++) dst[r * cols + c] = (uint8_t)(int8_t)round_clamp(w[c] / s, -128, 127);
        wr16(sc + 2 * r, cmf_f32_to_f16(s));
    }
    return CMF_OK;
}

/* q8_2f (§2.3): [int8 q][f16 row_scale: rows][f16 col: cols].
 * col[c] = f16round((float)max(sqrt(sum_r w^2 / rows), 1e-12)) floored at F16_TINY; the f64 sums are taken in
 * blocks of 256 rows whose sums are added in order. Each row is divided by col, then quantized like q8_row
 * with clamp [-127, 127]. */
static cmf_status enc_q8_2f(uint64_t rows, uint64_t cols, const float *src, uint8_t *dst) {
    double *tot = calloc(cols ? cols : 1, sizeof *tot), *blk = calloc(cols ? cols : 1, sizeof *blk);
    float *col = malloc((cols ? cols : 1) * sizeof *col);
    if (!tot || !blk || !col) {
        free(tot), free(blk), free(col);
        return cmf_err(CMF_E_NOMEM, "quantize q8_2f: cannot allocate %llu columns", (unsigned long long)cols);
    }
    for (uint64_t r0 = 0; r0 < rows; r0 += 256) {
        uint64_t r1 = rows - r0 < 256 ? rows : r0 + 256;
        memset(blk, 0, cols * sizeof *blk);
        for (uint64_t r = r0; r < r1; r++)
            for (uint64_t c = 0; c < cols; c++) {
                double v = (double)src[r * cols + c];
                blk[c] += v * v;
            }
        for (uint64_t c = 0; c < cols; c++) tot[c] += blk[c];
    }
    uint8_t *rs = dst + rows * cols, *cs = rs + 2 * rows;
    for (uint64_t c = 0; c < cols; c++) {
        double rms = rows ? sqrt(tot[c] / (double)rows) : 0.0;
        if (rms < 1e-12) rms = 1e-12;
        col[c] = cmf_f16_scale((float)rms);
        if (isinf(col[c])) {
            free(tot), free(blk), free(col);
            return cmf_err(CMF_E_ARG, "quantize q8_2f: column %llu: rms %g overflows the f16 column scale (largest "
                           "finite f16 65504); use --quant bf16 or --quant f32", (unsigned long long)c, rms);
        }
        wr16(cs + 2 * c, cmf_f32_to_f16(col[c]));
    }
    for (uint64_t r = 0; r < rows; r++) {
        const float *w = src + r * cols;
        float amax = 0.0f;
        for (uint64_t c = 0; c < cols; c++) amax = fmaxf(amax, fabsf(w[c] / col[c]));
        float s = cmf_f16_scale(fmaxf(amax, 1e-12f) / 127.0f);
        if (isinf(s)) {
            free(tot), free(blk), free(col);
            return scale_overflow(CMF_DT_Q8_2F, "row", r, amax);
        }
        for (uint64_t c = 0; c < cols; c++)
            dst[r * cols + c] = (uint8_t)(int8_t)round_clamp((w[c] / col[c]) / s, -127, 127);
        wr16(rs + 2 * r, cmf_f32_to_f16(s));
    }
    free(tot), free(blk), free(col);
    return CMF_OK;
}

/* Squared error of a group of 32 on scale s (levels -8..7, round-half-even of v/s), summed in 8 f32 lanes then
 * across them (a search criterion: written so that compilers vectorize it). */
static float q4_group_err(const float v[32], float s) {
    float acc[8] = {0};
    for (unsigned i = 0; i < 32; i += 8)
        for (unsigned k = 0; k < 8; k++) {
            float r = rintf(v[i + k] / s);
            r = r < -8.0f ? -8.0f : r > 7.0f ? 7.0f : r;
            const float d = v[i + k] - r * s;
            acc[k] += d * d;
        }
    return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

/* q4_group_err of s (> 0) and of -s from one division: v / -s = -(v / s) and round-half-even is odd, so the level
 * for -s is -clamp(rint(v / s), -7, 8), and (-r) * (-s) = r * s exactly: both sums are q4_group_err's bits. */
static void q4_group_err2(const float v[32], float s, float *e_pos, float *e_neg) {
    float ap[8] = {0}, an[8] = {0};
    for (unsigned i = 0; i < 32; i += 8)
        for (unsigned k = 0; k < 8; k++) {
            const float r = rintf(v[i + k] / s);
            const float rp = r < -8.0f ? -8.0f : r > 7.0f ? 7.0f : r, rn = r < -7.0f ? -7.0f : r > 8.0f ? 8.0f : r;
            const float dp = v[i + k] - rp * s, dn = v[i + k] - rn * s;
            ap[k] += dp * dp;
            an[k] += dn * dn;
        }
    *e_pos = ((ap[0] + ap[1]) + (ap[2] + ap[3])) + ((ap[4] + ap[5]) + (ap[6] + ap[7]));
    *e_neg = ((an[0] + an[1]) + (an[2] + an[3])) + ((an[4] + an[5]) + (an[6] + an[7]));
}

float cmf_q4_search_scale(const float v[32], float amax, int negative) {
    float best = cmf_f16_scale(amax / 7.0f), be = q4_group_err(v, best);
    if (amax == 0.0f) return best;
    float sc[49], ep[49], en[49];
    for (int i = 0; i <= 48; i++) {
        sc[i] = cmf_f16_scale(amax / (6.0f + 0.0625f * (float)i));
        if (negative)
            q4_group_err2(v, sc[i], &ep[i], &en[i]);
        else
            ep[i] = q4_group_err(v, sc[i]);
    }
    for (int i = 0; i <= 48; i++) /* the + candidates first, then the - ones: the first minimum wins */
        if (ep[i] < be) be = ep[i], best = sc[i];
    for (int i = 0; negative && i <= 48; i++)
        if (en[i] < be) be = en[i], best = -sc[i];
    return best;
}

/* q4_block (§2.4) and q4_tiled (§2.5): groups of 32 over the flat tensor, last group zero-padded;
 * s = cmf_f16_scale(absmax/7) (or cmf_q4_search_scale when `search`), nibble = clamp(rhe(w/s), -8, 7) + 8, element
 * 2k low nibble, 2k+1 high nibble. Groups [lo, hi) of G, one cmf_qpar_run range. */
typedef struct {
    int tiled, search;
    uint64_t n, G;
    const float *src;
    uint8_t *dst;
} q4_job;

static cmf_status enc_q4_groups(void *ctx, uint64_t lo, uint64_t hi) {
    const q4_job *j = ctx;
    for (uint64_t g = lo; g < hi; g++) {
        float v[32], amax = 0.0f;
        for (unsigned k = 0; k < 32; k++) {
            uint64_t i = 32 * g + k;
            v[k] = i < j->n ? j->src[i] : 0.0f;
            amax = fmaxf(amax, fabsf(v[k]));
        }
        if (isinf(cmf_f16_scale(amax / 7.0f))) /* also with the search: the same groups as cortiq's encoder refuse */
            return scale_overflow(j->tiled ? CMF_DT_Q4_TILED : CMF_DT_Q4_BLOCK, "group", g, amax);
        float s = j->search ? cmf_q4_search_scale(v, amax, 1) : cmf_f16_scale(amax / 7.0f);
        uint8_t *nib = j->tiled ? j->dst + 18 * g + 2 : j->dst + 16 * g;
        uint8_t *sc = j->tiled ? j->dst + 18 * g : j->dst + 16 * j->G + 2 * g;
        for (unsigned k = 0; k < 16; k++) {
            int l = round_clamp(v[2 * k] / s, -8, 7) + 8, h = round_clamp(v[2 * k + 1] / s, -8, 7) + 8;
            nib[k] = (uint8_t)(l | (h << 4));
        }
        wr16(sc, cmf_f32_to_f16(s));
    }
    return CMF_OK;
}

static cmf_status enc_q4(int tiled, uint64_t n, const float *src, uint8_t *dst, int search) {
    q4_job j = {tiled, search, n, n / 32 + (n % 32 != 0), src, dst};
    return cmf_qpar_run(j.G, 4 * n * (search ? 8 : 1), enc_q4_groups, &j);
}

int cmf_q4_search_enabled(void) {
    const char *v = getenv("CMF_Q4_SEARCH");
    return !(v && (!strcmp(v, "0") || !strcasecmp(v, "off") || !strcasecmp(v, "false") || !strcasecmp(v, "no")));
}

cmf_status cmf_quantize(int dtype, uint64_t rows, uint64_t cols, const float *src, uint8_t *dst) {
    if (cols != 0 && rows > UINT64_MAX / 4 / cols)
        return cmf_err(CMF_E_ARG, "quantize: %llu x %llu elements overflow", (unsigned long long)rows,
                       (unsigned long long)cols);
    uint64_t n = rows * cols;
    cmf_status st;
    switch (dtype) {
    case CMF_DT_F32: memcpy(dst, src, n * 4); return CMF_OK;
    case CMF_DT_F16:
        for (uint64_t i = 0; i < n; i++) wr16(dst + 2 * i, cmf_f32_to_f16(src[i]));
        return CMF_OK;
    case CMF_DT_BF16:
        for (uint64_t i = 0; i < n; i++) wr16(dst + 2 * i, cmf_f32_to_bf16(src[i]));
        return CMF_OK;
    case CMF_DT_Q8_ROW:
        if ((st = check_finite(src, n, dtype))) return st;
        return enc_q8_row(rows, cols, src, dst);
    case CMF_DT_Q8_2F:
        if ((st = check_finite(src, n, dtype))) return st;
        return enc_q8_2f(rows, cols, src, dst);
    case CMF_DT_Q4_BLOCK:
    case CMF_DT_Q4_TILED:
        if ((st = check_finite(src, n, dtype))) return st;
        return enc_q4(dtype == CMF_DT_Q4_TILED, n, src, dst, cmf_q4_search_enabled());
    case CMF_DT_Q4TP:
    case CMF_DT_Q2TP:
        return cmf_quantize_tp(dtype, rows, cols, src, dst, cmf_tp_search_enabled());
    }
    const char *nm = cmf_dtype_name(dtype);
    return cmf_err(CMF_E_UNSUPPORTED, "quantize: no encoder for dtype %s (%d)", nm ? nm : "?", dtype);
}
