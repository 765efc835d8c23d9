/* ops.c — weight views and their row decoders for every CPU dtype (CMF_FORMAT.md §2.1–2.7), and the small
 * elementwise blocks (RMSNorm, softmax, activations). The matrix products are in matmul.c. */
#include "backend/cpu/ops.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/kern.h"
#include "quant/dtype.h"
#include "util/error.h"

float cmf_f16_table[65536];
static int g_f16_table_ready;

static void f16_table_init(void) {
    /* Idempotent and race-benign: every thread writes the same values. */
    if (__atomic_load_n(&g_f16_table_ready, __ATOMIC_ACQUIRE)) return;
    for (uint32_t i = 0; i < 65536; i++) cmf_f16_table[i] = cmf_f16_to_f32((uint16_t)i);
    __atomic_store_n(&g_f16_table_ready, 1, __ATOMIC_RELEASE);
}

#define rd16 cmf_rd16
#define F16(p) cmf_f16_table[rd16(p)]

cmf_status cmf_weight_view(const cmf_tensor *t, cmf_weight *w) {
    if (t->ndim != 2) return cmf_err(CMF_E_FORMAT, "tensor %s: expected 2 dimensions, has %d", t->name, t->ndim);
    switch (t->dtype) {
    case CMF_DT_F32:
    case CMF_DT_F16:
    case CMF_DT_BF16:
    case CMF_DT_Q8_ROW:
    case CMF_DT_Q8_2F:
    case CMF_DT_Q4_BLOCK:
    case CMF_DT_Q4_TILED: break;
    case CMF_DT_Q4TP:
    case CMF_DT_Q2TP:
        if (t->shape[1] == 0 || t->shape[1] % 32 != 0)
            return cmf_err(CMF_E_FORMAT, "tensor %s: %s needs cols a positive multiple of 32, has %u", t->name,
                           cmf_dtype_name(t->dtype), (unsigned)t->shape[1]);
        break;
    default:
        return cmf_err(CMF_E_UNSUPPORTED, "tensor %s: dtype %s has no CPU kernel yet", t->name,
                       cmf_dtype_name(t->dtype) ? cmf_dtype_name(t->dtype) : "?");
    }
    uint64_t want = 0;
    if (cmf_dtype_nbytes(t->dtype, t->ndim, t->shape, &want) == 1 && want != t->nbytes)
        return cmf_err(CMF_E_FORMAT, "tensor %s: %s payload is %llu bytes, expected %llu", t->name,
                       cmf_dtype_name(t->dtype), (unsigned long long)t->nbytes, (unsigned long long)want);
    f16_table_init();
    w->dtype = t->dtype;
    w->rows = t->shape[0];
    w->cols = t->shape[1];
    w->full_rows = t->shape[0];
    w->row0 = 0;
    w->data = t->data;
    w->rp = NULL;
    return CMF_OK;
}

cmf_weight cmf_weight_rows(const cmf_weight *w, int64_t r0, int64_t n) {
    cmf_weight v = *w;
    v.row0 = w->row0 + r0;
    v.rows = n;
    return v;
}

void cmf_kern_tp(const cmf_weight *w, kern_tp *tp) {
    tp->gpr = w->cols / 32;
    tp->stride = (tp->gpr * 5 + 7) / 8;
    const int64_t plane = w->full_rows * tp->gpr * (w->dtype == CMF_DT_Q4TP ? 16 : 8);
    tp->params = w->data + plane;
    tp->codes = tp->params + 4 * w->full_rows;
}

void cmf_kern_ladder(const cmf_weight *w, const kern_tp *tp, int64_t R, float t[32]) {
    (void)w;
    const float lo = F16(tp->params + 4 * R), step = F16(tp->params + 4 * R + 2);
    const float ratio = exp2f(step);
    t[0] = exp2f(lo);
    for (int c = 1; c < 32; c++) t[c] = t[c - 1] * ratio;
}

void cmf_weight_cols_f32(const cmf_weight *w, int64_t r, int64_t c0, int64_t nc, float *out) {
    const int64_t R = w->row0 + r, C = w->cols;
    switch (w->dtype) {
    case CMF_DT_F32: memcpy(out, w->data + (size_t)(R * C + c0) * 4, (size_t)nc * 4); break;
    case CMF_DT_F16: {
        const uint8_t *p = w->data + (size_t)(R * C + c0) * 2;
        for (int64_t c = 0; c < nc; c++) out[c] = F16(p + 2 * c);
        break;
    }
    case CMF_DT_BF16: {
        const uint8_t *p = w->data + (size_t)(R * C + c0) * 2;
        for (int64_t c = 0; c < nc; c++) {
            uint32_t u = (uint32_t)rd16(p + 2 * c) << 16;
            memcpy(&out[c], &u, 4);
        }
        break;
    }
    case CMF_DT_Q8_ROW: { /* [int8 q: rows*cols][f16 scale: rows] (§2.2) */
        const int8_t *q = (const int8_t *)w->data + R * C + c0;
        float s = F16(w->data + (size_t)(w->full_rows * C) + 2 * (size_t)R);
        for (int64_t c = 0; c < nc; c++) out[c] = (float)q[c] * s;
        break;
    }
    case CMF_DT_Q8_2F: { /* [int8 q][f16 row_scale: rows][f16 col: cols] (§2.3); (q * row) * col as the reader */
        const int8_t *q = (const int8_t *)w->data + R * C + c0;
        const uint8_t *rs = w->data + (size_t)(w->full_rows * C);
        const uint8_t *cs = rs + 2 * (size_t)w->full_rows + 2 * (size_t)c0;
        float s = F16(rs + 2 * (size_t)R);
        for (int64_t c = 0; c < nc; c++) out[c] = (float)q[c] * s * F16(cs + 2 * c);
        break;
    }
    case CMF_DT_Q4_BLOCK:   /* [u8 nibbles: G*16][f16 scale: G] over the flattened tensor (§2.4) */
    case CMF_DT_Q4_TILED: { /* G tiles of [f16 scale][16 nibble bytes] (§2.5) */
        const int tiled = w->dtype == CMF_DT_Q4_TILED;
        const int64_t G = (w->full_rows * C + 31) / 32;
        for (int64_t c = 0; c < nc;) {
            const int64_t e = R * C + c0 + c, g = e / 32;
            const uint8_t *nib = tiled ? w->data + 18 * (size_t)g + 2 : w->data + 16 * (size_t)g;
            const float s = F16(tiled ? w->data + 18 * (size_t)g : w->data + 16 * (size_t)G + 2 * g);
            for (int64_t k = e % 32; k < 32 && c < nc; k++, c++) {
                const int q = (k & 1) ? nib[k >> 1] >> 4 : nib[k >> 1] & 15;
                out[c] = (float)(q - 8) * s;
            }
        }
        break;
    }
    case CMF_DT_Q4TP:   /* nibble tiles, per-row log2 ladder, 5-bit codes (§2.6) */
    case CMF_DT_Q2TP: { /* 2-bit chunks on the ladder shifted up one rung, rung 0 = zero (§2.7) */
        kern_tp tp;
        float t[32];
        cmf_kern_tp(w, &tp);
        cmf_kern_ladder(w, &tp, R, t);
        for (int64_t c = 0; c < nc;) {
            const int64_t e = c0 + c, g = e / 32;
            const unsigned code = cmf_kern_code(&tp, R, g);
            if (w->dtype == CMF_DT_Q4TP) {
                const uint8_t *nib = w->data + (size_t)(R * tp.gpr + g) * 16;
                for (int64_t k = e % 32; k < 32 && c < nc; k++, c++) {
                    const int q = (k & 1) ? nib[k >> 1] >> 4 : nib[k >> 1] & 15;
                    out[c] = (float)(q - 8) * t[code];
                }
            } else {
                const uint8_t *ch = w->data + (size_t)(R * tp.gpr + g) * 8;
                const float s = code ? t[code - 1] : 0.0f;
                for (int64_t k = e % 32; k < 32 && c < nc; k++, c++) {
                    const int q = (ch[k >> 2] >> (2 * (k & 3))) & 3;
                    out[c] = ((float)q - 1.5f) * s;
                }
            }
        }
        break;
    }
    default: memset(out, 0, (size_t)nc * sizeof(float)); break;
    }
}

void cmf_weight_row_f32(const cmf_weight *w, int64_t r, float *out) { cmf_weight_cols_f32(w, r, 0, w->cols, out); }

void cmf_rmsnorm(float *out, const float *x, const float *w, int64_t n, float eps, int gemma_style) {
    double ss = 0;
    for (int64_t i = 0; i < n; i++) ss += (double)x[i] * x[i];
    float inv = (float)(1.0 / sqrt(ss / (double)n + (double)eps));
    for (int64_t i = 0; i < n; i++) {
        float g = w ? (gemma_style ? 1.0f + w[i] : w[i]) : 1.0f;
        out[i] = x[i] * inv * g;
    }
}

void cmf_rmsnorm_rows(float *out, const float *x, const float *w, int64_t rows, int64_t n, float eps,
                      int gemma_style) {
    enum { RB = 8 }; /* rows whose sums run side by side: 8 independent chains instead of one latency-bound one */
    for (int64_t r0 = 0; r0 < rows; r0 += RB) {
        const float *xr = x + r0 * n;
        double ss[RB] = {0};
        if (rows - r0 >= RB) {
            for (int64_t i = 0; i < n; i++)
                for (int r = 0; r < RB; r++) ss[r] += (double)xr[r * n + i] * xr[r * n + i];
        } else {
            for (int64_t i = 0; i < n; i++)
                for (int r = 0; r < rows - r0; r++) ss[r] += (double)xr[r * n + i] * xr[r * n + i];
        }
        for (int r = 0; r < RB && r0 + r < rows; r++) { /* cmf_rmsnorm's scaling, row by row */
            const float inv = (float)(1.0 / sqrt(ss[r] / (double)n + (double)eps));
            const float *xi = xr + r * n;
            float *o = out + (r0 + r) * n;
            for (int64_t i = 0; i < n; i++) {
                float g = w ? (gemma_style ? 1.0f + w[i] : w[i]) : 1.0f;
                o[i] = xi[i] * inv * g;
            }
        }
    }
}

void cmf_attn_reset(int G, int hd, float *o, int64_t ldo, float *ml, int64_t ldml) {
    for (int g = 0; g < G; g++) {
        memset(o + (int64_t)g * ldo, 0, (size_t)hd * sizeof(float));
        ml[(int64_t)g * ldml] = -INFINITY;
        ml[(int64_t)g * ldml + 1] = 0.0f;
    }
}

void cmf_attn_chunk(const float *q, int64_t ldq, int G, const float *k, const float *v, int64_t ldkv, int n, int hd,
                    float scale, float softcap, float *scratch, float *o, int64_t ldo, float *ml, int64_t ldml) {
    const cmf_kern *kt = cmf_kern_active();
    const kern_attn_qk qk = kt->attn_qk ? kt->attn_qk : cmf_kern_scalar.attn_qk;
    const kern_attn_pv pv = kt->attn_pv ? kt->attn_pv : cmf_kern_scalar.attn_pv;
    const kern_exp_sum ex = kt->exp_sum ? kt->exp_sum : cmf_kern_scalar.exp_sum;
    for (int j0 = 0; j0 < n; j0 += CMF_ATTN_SB) {
        const int nb = n - j0 < CMF_ATTN_SB ? n - j0 : CMF_ATTN_SB;
        qk(q, ldq, G, k + (int64_t)j0 * ldkv, ldkv, nb, hd, scratch, CMF_ATTN_SB);
        for (int g = 0; g < G; g++) {
            float *sg = scratch + (int64_t)g * CMF_ATTN_SB, *mg = ml + (int64_t)g * ldml;
            float bm = -INFINITY;
            int nan = 0;
            for (int j = 0; j < nb; j++) {
                float d = sg[j] * scale;
                if (softcap > 0) d = softcap * tanhf(d / softcap);
                sg[j] = d;
                bm = d > bm ? d : bm;
                nan |= d != d;
            }
            if (nan || mg[0] != mg[0]) { /* a NaN score (NaN in q or k): the head's state and output stay NaN, as an
                                          * f32 softmax would make them (the max / exp steps would drop it) */
                float *og = o + (int64_t)g * ldo;
                for (int i = 0; i < hd; i++) og[i] = NAN;
                mg[0] = mg[1] = NAN;
                for (int j = 0; j < nb; j++) sg[j] = 0.0f; /* pv adds 0 * v to the NaN output */
                continue;
            }
            if (bm > mg[0]) { /* a new running max: rescale what the earlier positions summed */
                const float r = expf(mg[0] - bm); /* 0 on the first block (m = -inf) */
                float *og = o + (int64_t)g * ldo;
                for (int i = 0; i < hd; i++) og[i] *= r;
                mg[1] *= r;
                mg[0] = bm;
            }
            mg[1] += ex(sg, nb, mg[0]);
        }
        pv(scratch, CMF_ATTN_SB, G, v + (int64_t)j0 * ldkv, ldkv, nb, hd, o, ldo);
    }
}

void cmf_attn_merge(const float *part, int nch, int64_t cstride, int hd, float *out) {
    float M = -INFINITY, L = 0;
    for (int c = 0; c < nch; c++)
        if (part[c * cstride + 1] != part[c * cstride + 1]) { /* a NaN chunk (cmf_attn_chunk): the output is NaN */
            for (int i = 0; i < hd; i++) out[i] = NAN;
            return;
        }
    for (int c = 0; c < nch; c++)
        if (part[c * cstride + 1] > 0 && part[c * cstride] > M) M = part[c * cstride];
    memset(out, 0, (size_t)hd * sizeof(float));
    for (int c = 0; c < nch; c++) {
        const float *p = part + c * cstride;
        if (!(p[1] > 0)) continue; /* an empty chunk */
        const float r = expf(p[0] - M);
        L += r * p[1];
        for (int i = 0; i < hd; i++) out[i] += r * p[2 + i];
    }
    const float inv = 1.0f / L;
    for (int i = 0; i < hd; i++) out[i] *= inv;
}

void cmf_softmax(float *x, int64_t n) {
    float m = -INFINITY;
    for (int64_t i = 0; i < n; i++)
        if (x[i] > m) m = x[i];
    float s = 0;
    for (int64_t i = 0; i < n; i++) {
        x[i] = expf(x[i] - m);
        s += x[i];
    }
    float inv = 1.0f / s;
    for (int64_t i = 0; i < n; i++) x[i] *= inv;
}

void cmf_silu(float *x, int64_t n) {
    const cmf_kern *k = cmf_kern_active();
    if (k->silu) {
        k->silu(x, n);
        return;
    }
    for (int64_t i = 0; i < n; i++) x[i] = x[i] / (1.0f + expf(-x[i]));
}

void cmf_gelu_tanh(float *x, int64_t n) {
    const float k = 0.7978845608028654f; /* sqrt(2/pi) */
    for (int64_t i = 0; i < n; i++) {
        float v = x[i];
        x[i] = 0.5f * v * (1.0f + tanhf(k * (v + 0.044715f * v * v * v)));
    }
}
