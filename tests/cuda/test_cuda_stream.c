/* test_cuda_stream.c — the streaming int8-activation decode products (matvec_i8s.cu, cmf_cuda_set_i8_stream 1..4)
 * on fresh random data with poisoned outputs, for q8_row and q4tp:
 *  - cmf_cuda_matvec against the exact double product of the Q8_0-quantized activations (ref_matmul_qact), one and
 *    two activation levels, n = 1..8, within 1e-5 (the kernel's f32 accumulation);
 *  - q/k/v-style cmf_cuda_matvec_multi over three weights of different row counts (a bias on the second) and
 *    gate/up + GLU give the plain products' bits (+ bias; then cmf_cuda_glu);
 *  - mode 1's linear cursor (rows of whole warp steps) gives the bits of its general cursor;
 *  - modes 2 (L2 prefetch), 3 (one block per SM) and 4 (bulk copies into shared memory; q8_row, one token, rows
 *    of whole 512-byte steps) give mode 1's bits; the default (by row width) gives the
 *    streaming kernel's bits on wide rows and the row-group kernel's on narrow ones;
 * at shapes with one partial last step (cols % 512 != 0), fewer rows than warps, several rows per warp, and more
 * than 32 rows per warp (q4tp ladders computed in several batches). The fused residual / RMSNorm of the same kernel
 * are checked by test_cuda_fuse, which ctest also runs with CMF_CUDA_I8_STREAM=1. Exits 77 (ctest SKIP) without a
 * device. */
#include <stdlib.h>
#include <string.h>

#include "cuda_ref.h"
#include "quant/dtype.h"

static uint64_t rng = 0x7f4a7c159e3779b9ull;

/* A random matrix on the device with rows of 5 magnitudes (cuda_ref.h). */
static float *dev_weight(int dt, int64_t rows, int64_t cols, cmf_cuda_weight *w) {
    return ref_dev_weight(&rng, dt, rows, cols, 5, w);
}

static float *download(const float *d, int64_t n) {
    float *h = malloc(sizeof(float) * (size_t)n);
    OK(cmf_cuda_download(h, d, sizeof(float) * (size_t)n, NULL));
    OK(cmf_cuda_sync(NULL));
    return h;
}

static int64_t ndiff(const float *a, const float *b, int64_t n) {
    int64_t bad = 0;
    for (int64_t i = 0; i < n; i++) bad += memcmp(&a[i], &b[i], sizeof(float)) != 0;
    return bad;
}

/* One shape, one mode, one level count: every n in ns. */
static void test_shape(int dt, int64_t rows, int64_t cols, int mode, int levels, const int *ns, int nn) {
    cmf_cuda_set_i8_stream(mode);
    cmf_cuda_set_i8act(levels);
    const int64_t rows_b = rows / 2 + 3; /* the second weight of the multi product: another row count */
    cmf_cuda_weight wa, wb, wc;
    float *deca = dev_weight(dt, rows, cols, &wa), *decb = dev_weight(dt, rows_b, cols, &wb);
    free(dev_weight(dt, rows, cols, &wc));
    for (int ni = 0; ni < nn; ni++) {
        const int n = ns[ni];
        float *x = ref_rand_vec(&rng, n * cols, 1.0f);
        if (n == 2) /* a block of zeros (scale 0) and one of tiny values */
            for (int64_t c = 0; c < 32; c++) x[c] = 0.0f, x[cols + c] *= 1e-30f;
        double *ref = malloc(sizeof(double) * (size_t)(n * rows));
        ref_matmul_qact(deca, rows, cols, x, n, levels, ref);
        float *d_x = ref_dev_from(x, sizeof(float) * (size_t)(n * cols));
        float *d_ya = ref_dev_poison(sizeof(float) * (size_t)(n * rows));
        float *d_yb = ref_dev_poison(sizeof(float) * (size_t)(n * rows_b));
        float *d_yc = ref_dev_poison(sizeof(float) * (size_t)(n * rows));
        OK(cmf_cuda_matvec(&wa, d_x, d_ya, n, NULL));
        OK(cmf_cuda_matvec(&wb, d_x, d_yb, n, NULL));
        OK(cmf_cuda_matvec(&wc, d_x, d_yc, n, NULL));
        float *ya = download(d_ya, n * rows), *yb = download(d_yb, n * rows_b), *yc = download(d_yc, n * rows);
        const double e = ref_rel_err(ya, ref, n * rows);
        CHECK_MSG(e < 1e-5, "stream %d matvec %s [%lld, %lld] n=%d levels %d: rel err %g", mode, cmf_dtype_name(dt),
                  (long long)rows, (long long)cols, n, levels, e);
        if (levels == 1 && ni == 0) { /* the second matrix too, once */
            double *refb = malloc(sizeof(double) * (size_t)(n * rows_b));
            ref_matmul_qact(decb, rows_b, cols, x, n, levels, refb);
            const double eb = ref_rel_err(yb, refb, n * rows_b);
            CHECK_MSG(eb < 1e-5, "stream %d matvec %s [%lld, %lld] n=%d: rel err %g", mode, cmf_dtype_name(dt),
                      (long long)rows_b, (long long)cols, n, eb);
            free(refb);
        }
        /* q/k/v: three weights (rows, rows_b, rows), a bias on the second */
        cmf_cuda_weight ww[3] = {wa, wb, wc};
        float *bias = ref_rand_vec(&rng, rows_b, 1.0f), *d_b = ref_dev_from(bias, sizeof(float) * (size_t)rows_b);
        float *d_m[3] = {ref_dev_poison(sizeof(float) * (size_t)(n * rows)),
                         ref_dev_poison(sizeof(float) * (size_t)(n * rows_b)),
                         ref_dev_poison(sizeof(float) * (size_t)(n * rows))};
        const float *biases[3] = {NULL, d_b, NULL};
        OK(cmf_cuda_matvec_multi(ww, 3, d_x, d_m, biases, n, NULL));
        float *m0 = download(d_m[0], n * rows), *m1 = download(d_m[1], n * rows_b), *m2 = download(d_m[2], n * rows);
        for (int64_t i = 0; i < n * rows_b; i++) yb[i] = yb[i] + bias[i % rows_b];
        const int64_t bad = ndiff(m0, ya, n * rows) + ndiff(m1, yb, n * rows_b) + ndiff(m2, yc, n * rows);
        CHECK_MSG(bad == 0, "stream %d matvec_multi %s [%lld|%lld, %lld] n=%d levels %d: %lld values differ from "
                  "matvec (+ bias)", mode, cmf_dtype_name(dt), (long long)rows, (long long)rows_b, (long long)cols, n,
                  levels, (long long)bad);
        /* gate/up + GLU: gate = wa, up = wc */
        for (int gelu = 0; gelu <= 1; gelu++) {
            float *d_g = ref_dev_poison(sizeof(float) * (size_t)(n * rows));
            float *d_r = ref_dev_poison(sizeof(float) * (size_t)(n * rows));
            OK(cmf_cuda_matvec_glu(&wa, &wc, d_x, d_g, n, gelu, NULL));
            OK(cmf_cuda_glu(d_r, d_ya, d_yc, n * rows, gelu, NULL));
            float *g = download(d_g, n * rows), *r = download(d_r, n * rows);
            const int64_t badg = ndiff(g, r, n * rows);
            CHECK_MSG(badg == 0, "stream %d matvec_glu %s [%lld, %lld] n=%d gelu %d levels %d: %lld values differ "
                      "from matvec + glu", mode, cmf_dtype_name(dt), (long long)rows, (long long)cols, n, gelu, levels,
                      (long long)badg);
            cmf_cuda_free(d_g);
            cmf_cuda_free(d_r);
            free(g);
            free(r);
        }
        for (int i = 0; i < 3; i++) cmf_cuda_free(d_m[i]);
        cmf_cuda_free(d_b);
        cmf_cuda_free(d_x);
        cmf_cuda_free(d_ya);
        cmf_cuda_free(d_yb);
        cmf_cuda_free(d_yc);
        free(bias);
        free(m0);
        free(m1);
        free(m2);
        free(ya);
        free(yb);
        free(yc);
        free(x);
        free(ref);
    }
    cmf_cuda_free((void *)wa.d_data);
    cmf_cuda_free((void *)wb.d_data);
    cmf_cuda_free((void *)wc.d_data);
    free(deca);
    free(decb);
}

/* Modes 2 (L2 prefetch), 3 (one block per SM) and 4 (bulk copies: q8_row, n = 1, cols % 512 == 0; otherwise mode 1)
 * give mode 1's bits (n = 1 and 5). */
static void test_modes(int dt, int64_t rows, int64_t cols) {
    cmf_cuda_set_i8act(1);
    cmf_cuda_weight w;
    free(dev_weight(dt, rows, cols, &w));
    for (int n = 1; n <= 5; n += 4) {
        float *x = ref_rand_vec(&rng, n * cols, 1.0f), *d_x = ref_dev_from(x, sizeof(float) * (size_t)(n * cols));
        float *y[4];
        for (int mode = 1; mode <= 4; mode++) {
            cmf_cuda_set_i8_stream(mode);
            float *d_y = ref_dev_poison(sizeof(float) * (size_t)(n * rows));
            OK(cmf_cuda_matvec(&w, d_x, d_y, n, NULL));
            y[mode - 1] = download(d_y, n * rows);
            cmf_cuda_free(d_y);
        }
        for (int mode = 2; mode <= 4; mode++) {
            const int64_t bad = ndiff(y[mode - 1], y[0], n * rows);
            CHECK_MSG(bad == 0, "stream mode %d %s [%lld, %lld] n=%d: %lld values differ from mode 1", mode,
                      cmf_dtype_name(dt), (long long)rows, (long long)cols, n, (long long)bad);
        }
        for (int i = 0; i < 4; i++) free(y[i]);
        cmf_cuda_free(d_x);
        free(x);
    }
    cmf_cuda_free((void *)w.d_data);
}

/* Mode 1's linear cursor (one token, rows of whole warp steps; cmf_cuda_set_i8s_linear) gives the bits of the
 * cursor that locates every chunk's row, for the plain product, a q/k/v product over three weights of different row
 * counts (warps whose rows cross from one weight to the next) and gate/up + GLU. */
static void test_linear(int dt, int64_t rows, int64_t cols) {
    cmf_cuda_set_i8act(1);
    cmf_cuda_set_i8_stream(1);
    const int64_t rows_b = rows / 2 + 3;
    cmf_cuda_weight w[3];
    free(dev_weight(dt, rows, cols, &w[0]));
    free(dev_weight(dt, rows_b, cols, &w[1]));
    free(dev_weight(dt, rows, cols, &w[2]));
    float *x = ref_rand_vec(&rng, cols, 1.0f), *d_x = ref_dev_from(x, sizeof(float) * (size_t)cols);
    const int64_t len[5] = {rows, rows, rows_b, rows, rows}; /* plain, q/k/v (3), GLU */
    float *y[2][5];
    for (int lin = 0; lin <= 1; lin++) {
        cmf_cuda_set_i8s_linear(2 * lin); /* 2: q8_row too */
        float *d[5];
        for (int i = 0; i < 5; i++) d[i] = ref_dev_poison(sizeof(float) * (size_t)len[i]);
        const float *biases[3] = {NULL, NULL, NULL};
        OK(cmf_cuda_matvec(&w[0], d_x, d[0], 1, NULL));
        OK(cmf_cuda_matvec_multi(w, 3, d_x, &d[1], biases, 1, NULL));
        OK(cmf_cuda_matvec_glu(&w[0], &w[2], d_x, d[4], 1, 0, NULL));
        for (int i = 0; i < 5; i++) {
            y[lin][i] = download(d[i], len[i]);
            cmf_cuda_free(d[i]);
        }
    }
    for (int i = 0; i < 5; i++) {
        const int64_t bad = ndiff(y[1][i], y[0][i], len[i]);
        CHECK_MSG(bad == 0, "linear cursor %s [%lld, %lld] output %d (plain, q, k, v, glu): %lld values differ",
                  cmf_dtype_name(dt), (long long)len[i], (long long)cols, i, (long long)bad);
        free(y[0][i]);
        free(y[1][i]);
    }
    cmf_cuda_set_i8s_linear(1);
    cmf_cuda_free(d_x);
    free(x);
    for (int i = 0; i < 3; i++) cmf_cuda_free((void *)w[i].d_data);
}

/* The default (-1) takes the kernel mv_i8_stream_pick names for a plain product of rows x cols (matvec_i8.cuh:
 * q4tp by the columns; q8_row by the columns and the rows): its bits equal those of that mode forced. */
static void test_auto(int dt, int64_t rows, int64_t cols, int mode) {
    cmf_cuda_set_i8act(1);
    cmf_cuda_weight w;
    free(dev_weight(dt, rows, cols, &w));
    float *x = ref_rand_vec(&rng, cols, 1.0f), *d_x = ref_dev_from(x, sizeof(float) * (size_t)cols);
    float *y[2];
    const int modes[2] = {-1, mode};
    for (int m = 0; m < 2; m++) {
        cmf_cuda_set_i8_stream(modes[m]);
        float *d_y = ref_dev_poison(sizeof(float) * (size_t)rows);
        OK(cmf_cuda_matvec(&w, d_x, d_y, 1, NULL));
        y[m] = download(d_y, rows);
        cmf_cuda_free(d_y);
    }
    const int64_t bad = ndiff(y[0], y[1], rows);
    CHECK_MSG(bad == 0, "default kernel %s [%lld, %lld]: %lld values differ from mode %d", cmf_dtype_name(dt),
              (long long)rows, (long long)cols, (long long)bad, mode);
    free(y[0]);
    free(y[1]);
    cmf_cuda_free(d_x);
    free(x);
    cmf_cuda_free((void *)w.d_data);
}

int main(void) {
    if (!ref_have_device()) return 77;
    const int dts[2] = {CMF_DT_Q8_ROW, CMF_DT_Q4TP};
    const char *only = getenv("CMF_CUDA_TEST_ONLY"); /* "linear": the linear-cursor checks alone (memcheck runs) */
    const int all_groups = !(only && !strcmp(only, "linear"));
    const int all[8] = {1, 2, 3, 4, 5, 6, 7, 8}, few[2] = {1, 3}, one[1] = {1};
    /* rows x cols: fewer rows than warps; 2048 / 8224 columns (a partial last step); several rows per warp
     * (7000 x 64: 4 of 32 lanes per step); more than 32 rows per warp (q4tp ladder batches, GLU too) */
    static const int64_t shapes[][2] = {{5, 32}, {37, 160}, {130, 4096}, {21, 8224}, {1000, 1056}, {7000, 64}};
    for (int di = 0; di < 2 && all_groups; di++) {
        for (size_t si = 0; si < sizeof shapes / sizeof *shapes; si++) {
            test_shape(dts[di], shapes[si][0], shapes[si][1], 1, 1, all, 8);
            test_shape(dts[di], shapes[si][0], shapes[si][1], 1, 2, few, 2);
            test_shape(dts[di], shapes[si][0], shapes[si][1], 2, 1, one, 1);
            test_shape(dts[di], shapes[si][0], shapes[si][1], 3, 1, few, 2);
            test_modes(dts[di], shapes[si][0], shapes[si][1]);
        }
        test_shape(dts[di], 150000, 64, 1, 1, few, 2);
        test_shape(dts[di], 150000, 64, 3, 1, one, 1);
        test_modes(dts[di], 150000, 64);
    }
    /* mode 4 (bulk copies) on q8_row rows of whole 512-byte steps: one and several rows per warp, more than two
     * windows of 32 row scales per warp (40000 rows), 1-step rows whose slots span two rows and, in the q/k/v
     * product, two matrices; two activation levels */
    static const int64_t q8t[][2] = {{130, 4096}, {37, 1536}, {2100, 512}, {40000, 512}, {3001, 14336}};
    for (size_t si = 0; si < sizeof q8t / sizeof *q8t && all_groups; si++) {
        test_shape(CMF_DT_Q8_ROW, q8t[si][0], q8t[si][1], 4, 1, one, 1);
        test_shape(CMF_DT_Q8_ROW, q8t[si][0], q8t[si][1], 4, 2, one, 1);
        test_modes(CMF_DT_Q8_ROW, q8t[si][0], q8t[si][1]);
    }
    /* the linear cursor: one step per row (q8: two), several, 14 (q8: 28; a 14336-column down product); about one
     * row per warp and more than 16 (q4tp GLU: ladders in batches) */
    static const int64_t lin[][2] = {{130, 1024}, {3001, 1024}, {130, 4096}, {1200, 14336}, {20000, 1024}};
    for (int di = 0; di < 2; di++)
        for (size_t si = 0; si < sizeof lin / sizeof *lin; si++) test_linear(dts[di], lin[si][0], lin[si][1]);
    if (all_groups) {
        test_auto(CMF_DT_Q8_ROW, 2048, 2048, 1); /* wide and tall enough: streaming */
        test_auto(CMF_DT_Q8_ROW, 2048, 1024, 0); /* narrow rows */
        test_auto(CMF_DT_Q8_ROW, 130, 4096, 0);  /* few rows */
        test_auto(CMF_DT_Q4TP, 130, 2048, 1);
        test_auto(CMF_DT_Q4TP, 130, 1024, 0);
    }
    cmf_cuda_set_i8_stream(-1);
    cmf_cuda_set_i8act(1);
    CMF_TEST_END();
}
