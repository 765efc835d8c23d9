/* cuda_ref.c — CPU references for the CUDA kernel tests (see cuda_ref.h). */
#include "cuda_ref.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "quant/dtype.h"

void *ref_dev_poison(size_t bytes) {
    void *d = NULL;
    OK(cmf_cuda_malloc(&d, bytes));
    OK(cmf_cuda_memset(d, 0xff, bytes, NULL));
    return d;
}

float *ref_dev_weight(uint64_t *rng, int dt, int64_t rows, int64_t cols, int row_mod, cmf_cuda_weight *w) {
    float *v = ref_rand_vec(rng, rows * cols, 0.5f);
    if (row_mod > 0)
        for (int64_t r = 0; r < rows; r++)
            for (int64_t c = 0; c < cols; c++) v[r * cols + c] *= (float)(1 + r % row_mod);
    uint32_t shape[2] = {(uint32_t)rows, (uint32_t)cols};
    uint64_t nb = 0;
    CHECK(cmf_dtype_nbytes(dt, 2, shape, &nb) == 1);
    uint8_t *p = malloc((size_t)nb);
    OK(cmf_quantize(dt, (uint64_t)rows, (uint64_t)cols, v, p));
    OK(cmf_dequant(dt, 2, shape, p, nb, v));
    w->dtype = dt, w->rows = rows, w->cols = cols;
    w->d_data = ref_dev_from(p, (size_t)nb);
    free(p);
    return v;
}

int ref_have_device(void) {
    int ndev = 0;
    cmf_cuda_device_count(&ndev);
    if (ndev >= 1) return 1;
    printf("SKIP: no CUDA device (%s)\n", cmf_last_error());
    return 0;
}

void *ref_dev_from(const void *h, size_t bytes) {
    void *d = NULL;
    OK(cmf_cuda_malloc(&d, bytes));
    OK(cmf_cuda_upload(d, h, bytes, NULL));
    return d;
}

float *ref_rand_vec(uint64_t *rng, int64_t n, float amp) {
    float *v = malloc(sizeof(float) * (size_t)n);
    for (int64_t i = 0; v && i < n; i++) v[i] = ref_rand(rng) * amp;
    return v;
}

float ref_rand(uint64_t *s) {
    uint64_t x = *s;
    x ^= x >> 12, x ^= x << 25, x ^= x >> 27;
    *s = x;
    return (float)((double)((x * 2685821657736338717ull) >> 40) / (double)(1ull << 24) * 2.0 - 1.0);
}

double ref_rel_err(const float *a, const double *b, int64_t n) {
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; i++) {
        if (isnan(a[i])) return INFINITY;
        double d = (double)a[i] - b[i];
        num += d * d;
        den += b[i] * b[i];
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

void ref_matmul(const float *w, int64_t rows, int64_t cols, const float *x, int64_t n, double *y) {
    for (int64_t t = 0; t < n; t++)
        for (int64_t r = 0; r < rows; r++) {
            double s = 0;
            for (int64_t c = 0; c < cols; c++) s += (double)w[r * cols + c] * (double)x[t * cols + c];
            y[t * rows + r] = s;
        }
}

void ref_matmul_qact(const float *w, int64_t rows, int64_t cols, const float *x, int64_t n, int levels, double *y) {
    double *xd = malloc(sizeof(double) * (size_t)cols);
    for (int64_t t = 0; t < n; t++) {
        const float *xt = x + t * cols;
        for (int64_t b = 0; b < cols; b += 32) { /* Q8_0 of the block: d = absmax / 127, round half away */
            const int64_t m = cols - b < 32 ? cols - b : 32;
            float e[32];
            for (int64_t k = 0; k < m; k++) e[k] = xt[b + k], xd[b + k] = 0;
            for (int l = 0; l < levels; l++) { /* level 2 quantizes the remainder of level 1 */
                float amax = 0;
                for (int64_t k = 0; k < m; k++) amax = fabsf(e[k]) > amax ? fabsf(e[k]) : amax;
                const float d = amax / 127.0f, id = amax > 0 ? 127.0f / amax : 0.0f;
                for (int64_t k = 0; k < m; k++) {
                    const float v = e[k] * id;
                    int q = (int)(v + (v >= 0 ? 0.5f : -0.5f));
                    q = q > 127 ? 127 : q < -127 ? -127 : q;
                    xd[b + k] += (double)q * (double)d;
                    e[k] = e[k] - d * (float)q;
                }
            }
        }
        for (int64_t r = 0; r < rows; r++) {
            double s = 0;
            for (int64_t c = 0; c < cols; c++) s += (double)w[r * cols + c] * xd[c];
            y[t * rows + r] = s;
        }
    }
    free(xd);
}

void ref_attention(int H, int KV, int D, float scale, float softcap, int window, const float *q,
                   const uint16_t *k, const uint16_t *v, int64_t pos0, int64_t n_tok, double *out) {
    int G = H / KV;
    double *s = malloc(sizeof(double) * (size_t)(pos0 + n_tok));
    for (int64_t t = 0; t < n_tok; t++) {
        int64_t p = pos0 + t, j0 = window > 0 && p - window + 1 > 0 ? p - window + 1 : 0;
        for (int h = 0; h < H; h++) {
            int kh = h / G;
            const float *qh = q + (t * H + h) * D;
            double mx = -INFINITY;
            for (int64_t j = j0; j <= p; j++) {
                double d = 0;
                for (int i = 0; i < D; i++)
                    d += (double)(qh[i] * scale) * cmf_f16_to_f32(k[(j * KV + kh) * D + i]);
                if (softcap > 0) d = softcap * tanh(d / softcap);
                s[j] = d;
                if (d > mx) mx = d;
            }
            double sum = 0;
            for (int64_t j = j0; j <= p; j++) sum += (s[j] = exp(s[j] - mx));
            for (int i = 0; i < D; i++) {
                double o = 0;
                for (int64_t j = j0; j <= p; j++) o += s[j] * cmf_f16_to_f32(v[(j * KV + kh) * D + i]);
                out[(t * H + h) * D + i] = o / sum;
            }
        }
    }
    free(s);
}
