/* kern_scalar.c — the scalar reference path of the matmul kernels (kern.h), the activation quantizer every path
 * shares, and the per-block weight scales of each quantized dtype (CMF_FORMAT.md §2.2–2.7). The SIMD paths are
 * tested against these functions. */
#include <math.h>
#include <string.h>

#include "backend/cpu/kern.h"

/* ---- activations: Q8_0-style int8 per block of 32 ------------------------------------------------------- */

static size_t al64(size_t b) { return (b + 63) & ~(size_t)63; }

size_t cmf_qact_bytes(int64_t n, int64_t cols) {
    const size_t nb = (size_t)(cols + 31) / 32, N = (size_t)n;
    return al64(N * nb * 32) + al64(N * nb * 4) + al64(N * nb * 4) + 2 * al64(N * nb * 32);
}

void cmf_qact_init(cmf_qact *a, void *buf, int64_t n, int64_t cols) {
    const size_t nb = (size_t)(cols + 31) / 32, N = (size_t)n;
    uint8_t *p = buf;
    a->n = n;
    a->nb = (int64_t)nb;
    a->q = (int8_t *)p;
    p += al64(N * nb * 32);
    a->d = (float *)(void *)p;
    p += al64(N * nb * 4);
    a->s = (int32_t *)(void *)p;
    p += al64(N * nb * 4);
    a->dx = (float *)(void *)p;
    p += al64(N * nb * 32);
    a->cx = (int32_t *)(void *)p;
}

/* One block: v (32 values) -> q, d, s, dx, cx of virtual token slot vt. A NaN value makes the block's scale d NaN
 * (its q 0), so every product that reads the block is NaN, as an f32 product would be (an inf already gives
 * d = inf and q = 0, so d * sum is NaN): a quantized model whose activations overflow says so instead of going on
 * with finite garbage. */
static void quant_block(cmf_qact *a, int64_t vt, int64_t b, const float *v) {
    float amax = 0;
    int nan = 0;
    for (int k = 0; k < 32; k++) {
        const float av = v[k] < 0 ? -v[k] : v[k];
        amax = av > amax ? av : amax;
        nan |= v[k] != v[k];
    }
    const float d = nan ? NAN : amax / 127.0f, id = amax > 0 ? 127.0f / amax : 0.0f;
    int8_t *q = a->q + (vt * a->nb + b) * 32;
    int32_t sum = 0;
    for (int k = 0; k < 32; k++) {
        const float y = v[k] == v[k] ? v[k] * id : 0.0f; /* |y| <= 127 up to rounding; round half away from zero */
        int qi = (int)(y + (y >= 0 ? 0.5f : -0.5f));
        qi = qi > 127 ? 127 : qi < -127 ? -127 : qi;
        q[k] = (int8_t)qi;
        sum += qi;
    }
    a->d[vt * a->nb + b] = d;
    a->s[vt * a->nb + b] = sum;
    for (int k = 0; k < 8 && a->dx; k++) { /* NULL: not wanted (kern.h cmf_qact) */
        a->dx[(vt * a->nb + b) * 8 + k] = d;
        a->cx[(vt * a->nb + b) * 8 + k] = -128 * (q[4 * k] + q[4 * k + 1] + q[4 * k + 2] + q[4 * k + 3]);
    }
}

void cmf_qact_quantize(cmf_qact *a, const float *x, int64_t ldx, int64_t cols, const float *col, int levels,
                       int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; t++) {
        const float *xt = x + t * ldx;
        for (int64_t b = 0; b < a->nb; b++) {
            float v[32];
            const int64_t c0 = 32 * b, m = cols - c0 < 32 ? cols - c0 : 32;
            for (int64_t k = 0; k < 32; k++) v[k] = k < m ? (col ? xt[c0 + k] * col[c0 + k] : xt[c0 + k]) : 0.0f;
            for (int l = 0; l < levels; l++) {
                const int64_t vt = t * levels + l;
                quant_block(a, vt, b, v);
                if (l + 1 < levels) { /* the next level quantizes what this one left over */
                    const int8_t *q = a->q + (vt * a->nb + b) * 32;
                    const float d = a->d[vt * a->nb + b];
                    for (int k = 0; k < 32; k++) v[k] -= d * (float)q[k];
                }
            }
        }
    }
}

/* ---- per-block weight scales ----------------------------------------------------------------------------- */

void cmf_kern_scales(const cmf_weight *w, int64_t r, int64_t b0, int64_t kb, float *ws) {
    const int64_t R = w->row0 + r, C = w->cols;
    switch (w->dtype) {
    case CMF_DT_Q8_ROW:
    case CMF_DT_Q8_2F: { /* one f16 scale per row after the int8 plane (§2.2, §2.3) */
        const float s = cmf_f16_table[cmf_rd16(w->data + (size_t)(w->full_rows * C) + 2 * (size_t)R)];
        for (int64_t b = 0; b < kb; b++) ws[b] = s;
        break;
    }
    case CMF_DT_Q4_BLOCK: { /* scales after all nibbles, one per group of the flattened tensor (§2.4) */
        const int64_t G = (w->full_rows * C + 31) / 32, g0 = R * (C / 32) + b0;
        for (int64_t b = 0; b < kb; b++) ws[b] = cmf_f16_table[cmf_rd16(w->data + 16 * (size_t)G + 2 * (size_t)(g0 + b))];
        break;
    }
    case CMF_DT_Q4_TILED: { /* scale at the head of each 18-byte tile (§2.5) */
        const int64_t g0 = R * (C / 32) + b0;
        for (int64_t b = 0; b < kb; b++) ws[b] = cmf_f16_table[cmf_rd16(w->data + 18 * (size_t)(g0 + b))];
        break;
    }
    case CMF_DT_Q4TP:
    case CMF_DT_Q2TP: { /* ladder rung per tile (§2.6); q2tp: rung 0 = 0, else t[c-1], halved for v = 2c-3 */
        kern_tp tp;
        float t[32];
        cmf_kern_tp(w, &tp);
        cmf_kern_ladder(w, &tp, R, t);
        for (int64_t b = 0; b < kb; b++) {
            const unsigned code = cmf_kern_code(&tp, R, b0 + b);
            ws[b] = w->dtype == CMF_DT_Q4TP ? t[code] : code ? 0.5f * t[code - 1] : 0.0f;
        }
        break;
    }
    default:
        for (int64_t b = 0; b < kb; b++) ws[b] = 0;
        break;
    }
}

/* ---- scalar int8 decode: signed v per element, natural column order ---------------------------------------- */

static void dec_q8(const cmf_weight *w, int64_t r, int64_t b0, int64_t kb, int8_t *q, float *ws) {
    const int64_t R = w->row0 + r, C = w->cols, c0 = 32 * b0;
    int64_t m = C - c0 < 32 * kb ? C - c0 : 32 * kb;
    memcpy(q, w->data + R * C + c0, (size_t)m);
    if (m < 32 * kb) memset(q + m, 0, (size_t)(32 * kb - m));
    cmf_kern_scales(w, r, b0, kb, ws);
}

static void unpack_nib(const uint8_t *nib, int8_t *q) {
    for (int k = 0; k < 16; k++) {
        q[2 * k] = (int8_t)((nib[k] & 15) - 8);
        q[2 * k + 1] = (int8_t)((nib[k] >> 4) - 8);
    }
}

static void dec_q4(const cmf_weight *w, int64_t r, int64_t b0, int64_t kb, int8_t *q, float *ws) {
    const int64_t g0 = (w->row0 + r) * (w->cols / 32) + b0;
    for (int64_t b = 0; b < kb; b++) {
        const int64_t g = g0 + b;
        unpack_nib(w->dtype == CMF_DT_Q4_TILED ? w->data + 18 * g + 2 : w->data + 16 * g, q + 32 * b);
    }
    cmf_kern_scales(w, r, b0, kb, ws);
}

static void dec_q4tp(const cmf_weight *w, int64_t r, int64_t b0, int64_t kb, int8_t *q, float *ws) {
    const int64_t g0 = (w->row0 + r) * (w->cols / 32) + b0;
    for (int64_t b = 0; b < kb; b++) unpack_nib(w->data + 16 * (g0 + b), q + 32 * b);
    cmf_kern_scales(w, r, b0, kb, ws);
}

static void dec_q2tp(const cmf_weight *w, int64_t r, int64_t b0, int64_t kb, int8_t *q, float *ws) {
    const int64_t g0 = (w->row0 + r) * (w->cols / 32) + b0;
    for (int64_t b = 0; b < kb; b++) {
        const uint8_t *ch = w->data + 8 * (g0 + b);
        for (int k = 0; k < 32; k++) q[32 * b + k] = (int8_t)(2 * ((ch[k >> 2] >> (2 * (k & 3))) & 3) - 3);
    }
    cmf_kern_scales(w, r, b0, kb, ws);
}

static void mk_i8(const int8_t *q, int64_t ldq, const float *ws, int64_t ldw, int64_t kb, const cmf_qact *a,
                  int64_t t0, int tb, int64_t b0, float acc[KERN_RB][KERN_TB]) {
    for (int i = 0; i < KERN_RB; i++)
        for (int j = 0; j < tb; j++) {
            const int8_t *xq = a->q + ((t0 + j) * a->nb + b0) * 32;
            const float *xd = a->d + (t0 + j) * a->nb + b0;
            float s = 0;
            for (int64_t b = 0; b < kb; b++) {
                int32_t isum = 0;
                for (int k = 0; k < 32; k++) isum += (int32_t)q[i * ldq + 32 * b + k] * xq[32 * b + k];
                s += ws[i * ldw + b] * xd[b] * (float)isum;
            }
            acc[i][j] = s;
        }
}

static void dec_f32(const cmf_weight *w, int64_t r, int64_t c0, int64_t nc, float *out) {
    cmf_weight_cols_f32(w, r, c0, nc, out);
}

static void mk_f32(const float *wf, int64_t ldw, const float *x, int64_t ldx, int64_t t0, int tb, int64_t c0,
                   int64_t nc, float acc[KERN_RB][KERN_TB]) {
    for (int i = 0; i < KERN_RB; i++)
        for (int j = 0; j < tb; j++) {
            const float *a = wf + i * ldw, *b = x + (t0 + j) * ldx + c0;
            float s0 = 0, s1 = 0, s2 = 0, s3 = 0;
            int64_t c = 0;
            for (; c + 4 <= nc; c += 4) {
                s0 += a[c] * b[c];
                s1 += a[c + 1] * b[c + 1];
                s2 += a[c + 2] * b[c + 2];
                s3 += a[c + 3] * b[c + 3];
            }
            for (; c < nc; c++) s0 += a[c] * b[c];
            acc[i][j] = (s0 + s1) + (s2 + s3);
        }
}

/* ---- attention primitives (kern.h kern_attn_qk / kern_attn_pv) --------------------------------------------- */

static void attn_qk(const float *q, int64_t ldq, int G, const float *k, int64_t ldk, int n, int hd, float *s,
                    int64_t lds) {
    for (int j = 0; j < n; j++) {
        const float *kj = k + (int64_t)j * ldk;
        for (int g = 0; g < G; g++) {
            const float *qg = q + (int64_t)g * ldq;
            float a0 = 0, a1 = 0, a2 = 0, a3 = 0;
            int i = 0;
            for (; i + 4 <= hd; i += 4) {
                a0 += qg[i] * kj[i];
                a1 += qg[i + 1] * kj[i + 1];
                a2 += qg[i + 2] * kj[i + 2];
                a3 += qg[i + 3] * kj[i + 3];
            }
            for (; i < hd; i++) a0 += qg[i] * kj[i];
            s[(int64_t)g * lds + j] = (a0 + a1) + (a2 + a3);
        }
    }
}

static void attn_pv(const float *p, int64_t ldp, int G, const float *v, int64_t ldv, int n, int hd, float *o,
                    int64_t ldo) {
    for (int g = 0; g < G; g++) {
        float *restrict og = o + (int64_t)g * ldo;
        for (int j = 0; j < n; j++) {
            const float pj = p[(int64_t)g * ldp + j];
            const float *restrict vj = v + (int64_t)j * ldv;
            for (int i = 0; i < hd; i++) og[i] += pj * vj[i];
        }
    }
}

static float exp_sum(float *x, int n, float m) {
    float l = 0;
    for (int j = 0; j < n; j++) {
        x[j] = expf(x[j] - m);
        l += x[j];
    }
    return l;
}

const cmf_kern cmf_kern_scalar = {
    .name = "scalar",
    .decode_i8 = {[CMF_DT_Q8_ROW] = dec_q8, [CMF_DT_Q8_2F] = dec_q8, [CMF_DT_Q4_BLOCK] = dec_q4,
                  [CMF_DT_Q4_TILED] = dec_q4, [CMF_DT_Q4TP] = dec_q4tp, [CMF_DT_Q2TP] = dec_q2tp},
    .mk_i8 = mk_i8,
    .decode_f32 = dec_f32,
    .mk_f32 = mk_f32,
    .attn_qk = attn_qk,
    .attn_pv = attn_pv,
    .exp_sum = exp_sum,
    .rp_gemv = cmf_rp_gemv_scalar, /* the repacked q4 family (repack.c) */
    .rp_gemm = cmf_rp_gemm_scalar,
};
