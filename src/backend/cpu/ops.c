/* ops.c — scalar-reference CPU kernels. The matmul decodes each weight row once into a per-thread f32 buffer and
 * takes its dot product with every token of the batch, so a prefill batch reads the weights once. */
#include "backend/cpu/ops.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "quant/dtype.h"
#include "util/error.h"

static float g_f16_table[65536];
static int g_f16_table_ready;

static void f16_table_init(void) {
    /* Idempotent and race-benign: every thread writes the same values. */
    if (__atomic_load_n(&g_f16_table_ready, __ATOMIC_ACQUIRE)) return;
    for (uint32_t i = 0; i < 65536; i++) g_f16_table[i] = cmf_f16_to_f32((uint16_t)i);
    __atomic_store_n(&g_f16_table_ready, 1, __ATOMIC_RELEASE);
}

static inline uint16_t rd16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }

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
    default:
        return cmf_err(CMF_E_UNSUPPORTED, "tensor %s: dtype %s has no CPU kernel yet", t->name,
                       cmf_dtype_name(t->dtype) ? cmf_dtype_name(t->dtype) : "?");
    }
    f16_table_init();
    w->dtype = t->dtype;
    w->rows = t->shape[0];
    w->cols = t->shape[1];
    w->full_rows = t->shape[0];
    w->row0 = 0;
    w->data = t->data;
    return CMF_OK;
}

cmf_weight cmf_weight_rows(const cmf_weight *w, int64_t r0, int64_t n) {
    cmf_weight v = *w;
    v.row0 = w->row0 + r0;
    v.rows = n;
    return v;
}

void cmf_weight_row_f32(const cmf_weight *w, int64_t r, float *out) {
    const int64_t R = w->row0 + r, C = w->cols;
    switch (w->dtype) {
    case CMF_DT_F32: memcpy(out, w->data + (size_t)(R * C) * 4, (size_t)C * 4); break;
    case CMF_DT_F16: {
        const uint8_t *p = w->data + (size_t)(R * C) * 2;
        for (int64_t c = 0; c < C; c++) out[c] = g_f16_table[rd16(p + 2 * c)];
        break;
    }
    case CMF_DT_BF16: {
        const uint8_t *p = w->data + (size_t)(R * C) * 2;
        for (int64_t c = 0; c < C; c++) {
            uint32_t u = (uint32_t)rd16(p + 2 * c) << 16;
            memcpy(&out[c], &u, 4);
        }
        break;
    }
    case CMF_DT_Q8_ROW: { /* [int8 q: rows*cols][f16 scale: rows] (§2.2) */
        const int8_t *q = (const int8_t *)w->data + R * C;
        float s = g_f16_table[rd16(w->data + (size_t)(w->full_rows * C) + 2 * (size_t)R)];
        for (int64_t c = 0; c < C; c++) out[c] = (float)q[c] * s;
        break;
    }
    case CMF_DT_Q8_2F: { /* [int8 q][f16 row_scale: rows][f16 col: cols] (§2.3) */
        const int8_t *q = (const int8_t *)w->data + R * C;
        const uint8_t *rs = w->data + (size_t)(w->full_rows * C);
        const uint8_t *cs = rs + 2 * (size_t)w->full_rows;
        float s = g_f16_table[rd16(rs + 2 * (size_t)R)];
        for (int64_t c = 0; c < C; c++) out[c] = (float)q[c] * s * g_f16_table[rd16(cs + 2 * c)];
        break;
    }
    case CMF_DT_Q4_BLOCK:   /* [u8 nibbles: G*16][f16 scale: G] over the flattened tensor (§2.4) */
    case CMF_DT_Q4_TILED: { /* G tiles of [f16 scale][16 nibble bytes] (§2.5) */
        const int tiled = w->dtype == CMF_DT_Q4_TILED;
        const int64_t G = (w->full_rows * C + 31) / 32;
        for (int64_t c = 0; c < C;) {
            const int64_t e = R * C + c, g = e / 32;
            const uint8_t *nib = tiled ? w->data + 18 * (size_t)g + 2 : w->data + 16 * (size_t)g;
            const float s = g_f16_table[rd16(tiled ? w->data + 18 * (size_t)g : w->data + 16 * (size_t)G + 2 * g)];
            for (int64_t k = e % 32; k < 32 && c < C; k++, c++) {
                const int q = (k & 1) ? nib[k >> 1] >> 4 : nib[k >> 1] & 15;
                out[c] = (float)(q - 8) * s;
            }
        }
        break;
    }
    default: memset(out, 0, (size_t)C * sizeof(float)); break;
    }
}

typedef struct {
    cmf_pool *pool;
    float *out;
    int64_t ld_out;
    const float *x;
    int64_t n;
    const cmf_weight *w;
    const float *bias;
} matmul_task;

static float dot_f32(const float *a, const float *b, int64_t n) {
    /* Four independent accumulators let the compiler vectorize without -ffast-math. */
    float s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) {
        s0 += a[i] * b[i];
        s1 += a[i + 1] * b[i + 1];
        s2 += a[i + 2] * b[i + 2];
        s3 += a[i + 3] * b[i + 3];
    }
    for (; i < n; i++) s0 += a[i] * b[i];
    return (s0 + s1) + (s2 + s3);
}

static void matmul_worker(void *ctx, int ith, int nth) {
    matmul_task *t = ctx;
    const cmf_weight *w = t->w;
    int64_t per = (w->rows + nth - 1) / nth;
    int64_t r0 = per * ith, r1 = r0 + per < w->rows ? r0 + per : w->rows;
    if (r0 >= r1) return;
    float *row = NULL;
    if (w->dtype != CMF_DT_F32) {
        row = cmf_pool_scratch(t->pool, ith, (size_t)w->cols * sizeof(float));
        if (!row) return; /* allocation failure: prevented by cmf_pool_reserve at session creation */
    }
    for (int64_t r = r0; r < r1; r++) {
        const float *wr;
        if (w->dtype == CMF_DT_F32) {
            wr = (const float *)(w->data) + (w->row0 + r) * w->cols;
        } else {
            cmf_weight_row_f32(w, r, row);
            wr = row;
        }
        float b = t->bias ? t->bias[r] : 0.0f;
        for (int64_t i = 0; i < t->n; i++) t->out[i * t->ld_out + r] = dot_f32(wr, t->x + i * w->cols, w->cols) + b;
    }
}

void cmf_matmul(cmf_pool *pool, float *out, int64_t ld_out, const float *x, int64_t n, const cmf_weight *w,
                const float *bias) {
    matmul_task t = {pool, out, ld_out, x, n, w, bias};
    cmf_pool_run(pool, matmul_worker, &t);
}

void cmf_rmsnorm(float *out, const float *x, const float *w, int64_t n, float eps, int gemma_style) {
    double ss = 0;
    for (int64_t i = 0; i < n; i++) ss += (double)x[i] * x[i];
    float inv = (float)(1.0 / sqrt(ss / (double)n + (double)eps));
    for (int64_t i = 0; i < n; i++) {
        float g = w ? (gemma_style ? 1.0f + w[i] : w[i]) : 1.0f;
        out[i] = x[i] * inv * g;
    }
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
    for (int64_t i = 0; i < n; i++) x[i] = x[i] / (1.0f + expf(-x[i]));
}

void cmf_gelu_tanh(float *x, int64_t n) {
    const float k = 0.7978845608028654f; /* sqrt(2/pi) */
    for (int64_t i = 0; i < n; i++) {
        float v = x[i];
        x[i] = 0.5f * v * (1.0f + tanhf(k * (v + 0.044715f * v * v * v)));
    }
}
