/* test_cuda_fuse.c — the fused prologue / epilogue of the int8-activation decode products (cuda_ops.h,
 * cmf_cuda_matvec_multi_ex / cmf_cuda_matvec_glu_ex) give, bit for bit, what the separate launches give:
 *  - d_res: product then cmf_cuda_add(x, x, y) (the residual add of o_proj / down_proj);
 *  - d_norm_x: cmf_cuda_rmsnorm then the products (q/k/v of three weights, gate/up + GLU), and the normalized rows
 *    written to d_x; plain and gemma-style norm weights, no weight;
 * for q8_row and q4tp, n = 1, 3, 8, rows of 1024 / 4096 / 8224 columns (one, two and four warps per row), one and two
 * activation levels, on fresh random data with poisoned outputs. Also the refusals (f16 weights, d_res on several
 * products). Exits 77 (ctest SKIP) without a CUDA device. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_ref.h"
#include "quant/dtype.h"

static uint64_t rng = 0x2545f4914f6cdd1dull;

/* A random rows x cols matrix encoded as dt, on the device (w->d_data; the caller frees it). */
static void dev_weight(int dt, int64_t rows, int64_t cols, cmf_cuda_weight *w) {
    float *v = ref_rand_vec(&rng, rows * cols, 0.5f);
    uint32_t shape[2] = {(uint32_t)rows, (uint32_t)cols};
    uint64_t nb = 0;
    CHECK(cmf_dtype_nbytes(dt, 2, shape, &nb) == 1);
    uint8_t *p = malloc((size_t)nb);
    OK(cmf_quantize(dt, (uint64_t)rows, (uint64_t)cols, v, p));
    w->dtype = dt, w->rows = rows, w->cols = cols;
    w->d_data = ref_dev_from(p, (size_t)nb);
    free(p);
    free(v);
}

/* Whether n floats of the device buffers a and b are the same bits. */
static int same_bits(const float *a, const float *b, int64_t n) {
    const size_t bytes = (size_t)n * sizeof(float);
    float *ha = malloc(bytes), *hb = malloc(bytes);
    OK(cmf_cuda_download(ha, a, bytes, NULL));
    OK(cmf_cuda_download(hb, b, bytes, NULL));
    OK(cmf_cuda_sync(NULL));
    const int same = memcmp(ha, hb, bytes) == 0;
    free(ha);
    free(hb);
    return same;
}

/* d_res: W [rows x cols] times a [n][cols], then x [n][rows] += y. */
static void test_residual(int dt, int64_t rows, int64_t cols, int n) {
    cmf_cuda_weight w;
    dev_weight(dt, rows, cols, &w);
    float *ha = ref_rand_vec(&rng, n * cols, 1.0f), *hx = ref_rand_vec(&rng, n * rows, 2.0f);
    float *a = ref_dev_from(ha, sizeof(float) * (size_t)(n * cols));
    const size_t rb = sizeof(float) * (size_t)(n * rows);
    float *x_ref = ref_dev_from(hx, rb), *x = ref_dev_from(hx, rb);
    float *y_ref = ref_dev_poison(rb), *y = ref_dev_poison(rb);
    OK(cmf_cuda_matvec_multi(&w, 1, a, &y_ref, NULL, n, NULL));
    OK(cmf_cuda_add(x_ref, x_ref, y_ref, (int64_t)n * rows, NULL));
    cmf_cuda_mv_ex ex;
    memset(&ex, 0, sizeof ex);
    ex.d_res = x;
    OK(cmf_cuda_matvec_multi_ex(&w, 1, a, &y, NULL, n, &ex, NULL));
    CHECK_MSG(same_bits(y, y_ref, (int64_t)n * rows), "residual epilogue: dtype %d [%lld, %lld] n=%d: y differs", dt,
              (long long)rows, (long long)cols, n);
    CHECK_MSG(same_bits(x, x_ref, (int64_t)n * rows), "residual epilogue: dtype %d [%lld, %lld] n=%d: x differs", dt,
              (long long)rows, (long long)cols, n);
    /* d_res on several products is refused */
    cmf_cuda_weight w2[2] = {w, w};
    float *ys[2] = {y, y_ref};
    CHECK(cmf_cuda_matvec_multi_ex(w2, 2, a, ys, NULL, n, &ex, NULL) == CMF_E_ARG);
    cmf_cuda_free((void *)w.d_data);
    cmf_cuda_free(a);
    cmf_cuda_free(x_ref);
    cmf_cuda_free(x);
    cmf_cuda_free(y_ref);
    cmf_cuda_free(y);
    free(ha);
    free(hx);
}

/* d_norm_x: products of RMSNorm(x) (three weights of cols = d, and gate/up + GLU). mode: 0 plain weight, 1 gemma
 * style, 2 no weight. */
static void test_norm(int dt, int64_t d, int n, int mode) {
    const int64_t R[3] = {130, 64, 96}; /* q / k / v rows (130: a row group left half full) */
    cmf_cuda_weight w[3];
    for (int i = 0; i < 3; i++) dev_weight(dt, R[i], d, &w[i]);
    float *hx = ref_rand_vec(&rng, n * d, 3.0f), *hw = ref_rand_vec(&rng, d, 1.0f);
    const size_t xb = sizeof(float) * (size_t)(n * d);
    float *x = ref_dev_from(hx, xb), *nw = mode == 2 ? NULL : ref_dev_from(hw, sizeof(float) * (size_t)d);
    const float eps = 1e-6f;
    float *h_ref = ref_dev_poison(xb), *h = ref_dev_poison(xb);
    OK(cmf_cuda_rmsnorm(h_ref, x, nw, n, d, eps, mode == 1, NULL));
    float *y_ref[3], *y[3];
    for (int i = 0; i < 3; i++) {
        y_ref[i] = ref_dev_poison(sizeof(float) * (size_t)(n * R[i]));
        y[i] = ref_dev_poison(sizeof(float) * (size_t)(n * R[i]));
    }
    OK(cmf_cuda_matvec_multi(w, 3, h_ref, y_ref, NULL, n, NULL));
    cmf_cuda_mv_ex ex;
    memset(&ex, 0, sizeof ex);
    ex.d_norm_x = x, ex.d_norm_w = nw, ex.eps = eps, ex.gemma_style = mode == 1;
    OK(cmf_cuda_matvec_multi_ex(w, 3, h, y, NULL, n, &ex, NULL));
    CHECK_MSG(same_bits(h, h_ref, (int64_t)n * d), "norm prologue: dtype %d d=%lld n=%d mode %d: normalized rows "
              "differ", dt, (long long)d, n, mode);
    for (int i = 0; i < 3; i++)
        CHECK_MSG(same_bits(y[i], y_ref[i], (int64_t)n * R[i]),
                  "norm prologue: dtype %d d=%lld n=%d mode %d: output %d differs", dt, (long long)d, n, mode, i);
    /* gate/up + GLU (gate = w[0], up = a second 130-row weight) */
    cmf_cuda_weight up;
    dev_weight(dt, R[0], d, &up);
    const size_t gb = sizeof(float) * (size_t)(n * R[0]);
    float *g_ref = ref_dev_poison(gb), *g = ref_dev_poison(gb);
    float *h2 = ref_dev_poison(xb);
    OK(cmf_cuda_matvec_glu(&w[0], &up, h_ref, g_ref, n, mode == 1, NULL));
    OK(cmf_cuda_matvec_glu_ex(&w[0], &up, h2, g, n, mode == 1, &ex, NULL));
    CHECK_MSG(same_bits(g, g_ref, (int64_t)n * R[0]) && same_bits(h2, h_ref, (int64_t)n * d),
              "norm prologue + glu: dtype %d d=%lld n=%d mode %d differs", dt, (long long)d, n, mode);
    for (int i = 0; i < 3; i++) {
        cmf_cuda_free((void *)w[i].d_data);
        cmf_cuda_free(y_ref[i]);
        cmf_cuda_free(y[i]);
    }
    cmf_cuda_free((void *)up.d_data);
    cmf_cuda_free(x);
    cmf_cuda_free(nw);
    cmf_cuda_free(h_ref);
    cmf_cuda_free(h);
    cmf_cuda_free(h2);
    cmf_cuda_free(g_ref);
    cmf_cuda_free(g);
    free(hx);
    free(hw);
}

int main(void) {
    int ndev = 0;
    cmf_cuda_device_count(&ndev);
    if (ndev < 1) {
        printf("SKIP: no CUDA device (%s)\n", cmf_last_error());
        return 77;
    }
    const int dts[2] = {CMF_DT_Q8_ROW, CMF_DT_Q4TP};
    const int64_t cols[3] = {1024, 4096, 8224};
    const int ns[3] = {1, 3, 8};
    for (int lv = 1; lv <= 2; lv++) {
        cmf_cuda_set_i8act(lv);
        for (int di = 0; di < 2; di++)
            for (int ci = 0; ci < 3; ci++)
                for (int ni = 0; ni < 3; ni++) {
                    test_residual(dts[di], 130, cols[ci], ns[ni]);
                    test_norm(dts[di], cols[ci], ns[ni], (ci + ni) % 3);
                }
    }
    /* the f32-activation path and f16 weights are refused */
    cmf_cuda_weight f;
    dev_weight(CMF_DT_F16, 64, 1024, &f);
    CHECK(!cmf_cuda_matvec_ex_ok(&f, 1, 1));
    cmf_cuda_set_i8act(0);
    cmf_cuda_weight q;
    dev_weight(CMF_DT_Q8_ROW, 64, 1024, &q);
    CHECK(!cmf_cuda_matvec_ex_ok(&q, 1, 1));
    float *x = ref_dev_poison(4096), *y = ref_dev_poison(256);
    cmf_cuda_mv_ex ex;
    memset(&ex, 0, sizeof ex);
    CHECK(cmf_cuda_matvec_multi_ex(&q, 1, x, &y, NULL, 1, &ex, NULL) == CMF_E_UNSUPPORTED);
    cmf_cuda_set_i8act(1);
    cmf_cuda_free((void *)f.d_data);
    cmf_cuda_free((void *)q.d_data);
    cmf_cuda_free(x);
    cmf_cuda_free(y);
    CMF_TEST_END();
}
