/* test_cuda_ops.c — every CUDA kernel against a CPU reference on fresh random data (poisoned outputs, relative
 * error bounds as in the device METHOD: f32 arithmetic far under 1e-3, f16 operands under 1e-2). Exits 77 (ctest
 * SKIP) when no CUDA device is usable. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_ops.h"
#include "cuda_ref.h"
#include "quant/dtype.h"
#include "quant/ladder.h"
#include "testutil.h"

int cmf_test_failures;
static uint64_t rng = 0x9e3779b97f4a7c15ull;

/* exp2f over every f16 value (the q4tp lo / step domain) plus random floats: bit-exact with cmf_exp2f. */
static void test_exp2f(void) {
    int64_t n = 65536 + 100000;
    float *in = malloc(sizeof(float) * (size_t)n), *out = malloc(sizeof(float) * (size_t)n);
    for (int64_t i = 0; i < 65536; i++) in[i] = cmf_f16_to_f32((uint16_t)i);
    for (int64_t i = 65536; i < n; i++) in[i] = ref_rand(&rng) * 160.0f;
    float *d_in = ref_dev_from(in, sizeof(float) * (size_t)n), *d_out = ref_dev_poison(sizeof(float) * (size_t)n);
    OK(cmf_cuda_exp2f(d_in, d_out, n, NULL));
    OK(cmf_cuda_download(out, d_out, sizeof(float) * (size_t)n, NULL));
    OK(cmf_cuda_sync(NULL));
    int64_t bad = 0;
    for (int64_t i = 0; i < n; i++) {
        float r = cmf_exp2f(in[i]);
        if (memcmp(&r, &out[i], 4) != 0 && !(isnan(r) && isnan(out[i]))) {
            if (bad++ < 5) fprintf(stderr, "exp2f(%a): device %a, cpu %a\n", (double)in[i], (double)out[i], (double)r);
        }
    }
    CHECK_MSG(bad == 0, "%lld exp2f results differ from cmf_exp2f", (long long)bad);
    cmf_cuda_free(d_in);
    cmf_cuda_free(d_out);
    free(in);
    free(out);
}

static const int DTYPES[] = {CMF_DT_F32, CMF_DT_F16, CMF_DT_BF16, CMF_DT_Q8_ROW, CMF_DT_Q8_2F, CMF_DT_Q4_TILED,
                             CMF_DT_Q4TP};

/* Encodes a random rows x cols matrix as dtype; returns the payload (host) and its decoded floats. */
static uint8_t *make_weight(int dt, int64_t rows, int64_t cols, size_t *nbytes, float **dec) {
    float *w = ref_rand_vec(&rng, rows * cols, 0.5f);
    for (int64_t r = 0; r < rows; r++) /* rows of different magnitude exercise the scales */
        for (int64_t c = 0; c < cols; c++) w[r * cols + c] *= (float)(1 + r % 7);
    uint32_t shape[2] = {(uint32_t)rows, (uint32_t)cols};
    uint64_t nb = 0;
    CHECK(cmf_dtype_nbytes(dt, 2, shape, &nb) == 1);
    uint8_t *p = malloc((size_t)nb);
    OK(cmf_quantize(dt, (uint64_t)rows, (uint64_t)cols, w, p));
    *dec = malloc(sizeof(float) * (size_t)(rows * cols));
    OK(cmf_dequant(dt, 2, shape, p, nb, *dec));
    free(w);
    *nbytes = (size_t)nb;
    return p;
}

static void test_weights(cmf_cuda_ctx *ctx) {
    /* 7000 x 64: more row groups than the int8-activation kernel's grid holds, so its blocks loop; 130 x 4096 and
     * 21 x 8224: rows split over 2 / 4 warps (8224: segments of unequal length, 8224 % 512 != 0) */
    static const int64_t shapes[][2] = {{64, 96}, {37, 160}, {5, 32}, {130, 4096}, {19, 13}, {33, 72}, {3, 8}, {7000, 64},
                                        {21, 8224}};
    const int i8_default = cmf_cuda_i8act_on();
    for (size_t di = 0; di < sizeof DTYPES / sizeof *DTYPES; di++) {
        int dt = DTYPES[di];
        for (size_t si = 0; si < sizeof shapes / sizeof *shapes; si++) {
            int64_t rows = shapes[si][0], cols = shapes[si][1];
            if ((dt == CMF_DT_Q4_TILED || dt == CMF_DT_Q4TP) && cols % 32) continue;
            size_t nb;
            float *dec;
            uint8_t *p = make_weight(dt, rows, cols, &nb, &dec);
            cmf_cuda_weight w = {dt, rows, cols, ref_dev_from(p, nb)};
            /* embedding rows by device ids: the dequantized rows bit for bit */
            {
                int32_t ids[3] = {(int32_t)(rows - 1), 0, (int32_t)(rows / 2)};
                int32_t *d_ids = ref_dev_from(ids, sizeof ids);
                float *d_e = ref_dev_poison(sizeof(float) * (size_t)(3 * cols)), *e = malloc(sizeof(float) * (size_t)(3 * cols));
                OK(cmf_cuda_embed(&w, d_ids, 3, 1.0f, d_e, NULL));
                OK(cmf_cuda_download(e, d_e, sizeof(float) * (size_t)(3 * cols), NULL));
                OK(cmf_cuda_sync(NULL));
                for (int t = 0; t < 3; t++)
                    CHECK_MSG(!memcmp(e + t * cols, dec + (size_t)ids[t] * cols, sizeof(float) * (size_t)cols),
                              "embed %s %lldx%lld row %d", cmf_dtype_name(dt), (long long)rows, (long long)cols, ids[t]);
                cmf_cuda_free(d_ids);
                cmf_cuda_free(d_e);
                free(e);
            }
            /* dequant: f32 bit for bit, f16 / bf16 rounded */
            float *d_f = ref_dev_poison(sizeof(float) * (size_t)(rows * cols));
            float *got = malloc(sizeof(float) * (size_t)(rows * cols));
            OK(cmf_cuda_dequant(&w, 0, rows, d_f, CMF_CUDA_F32, NULL));
            OK(cmf_cuda_download(got, d_f, sizeof(float) * (size_t)(rows * cols), NULL));
            OK(cmf_cuda_sync(NULL));
            CHECK_MSG(memcmp(got, dec, sizeof(float) * (size_t)(rows * cols)) == 0, "dequant %s [%lld, %lld] not bit-exact",
                      cmf_dtype_name(dt), (long long)rows, (long long)cols);
            uint16_t *h16 = malloc(2 * (size_t)(rows * cols));
            OK(cmf_cuda_dequant(&w, rows / 2, rows - rows / 2, d_f, CMF_CUDA_F16, NULL));
            OK(cmf_cuda_download(h16, d_f, 2 * (size_t)((rows - rows / 2) * cols), NULL));
            OK(cmf_cuda_sync(NULL));
            int64_t badh = 0;
            for (int64_t i = 0; i < (rows - rows / 2) * cols; i++)
                badh += h16[i] != cmf_f32_to_f16(dec[(rows / 2) * cols + i]);
            CHECK_MSG(badh == 0, "dequant f16 %s: %lld values differ", cmf_dtype_name(dt), (long long)badh);
            /* matvec for n = 1..8: f32 activations (i8 = 0) against the exact product; q8_row / q4tp also with
             * int8 activations (matvec_i8.cu; i8 = 1 / 2 levels) against the exact product of the quantized
             * activations */
            for (int i8 = 0; i8 <= 2; i8++)
            for (int n = 1; n <= 8; n++) {
                if (i8 && !((dt == CMF_DT_Q8_ROW || dt == CMF_DT_Q4TP) && cols % 32 == 0)) break;
                cmf_cuda_set_i8act(i8);
                float *x = ref_rand_vec(&rng, n * cols, 1.0f);
                if (i8 && n == 2) /* a block of zeros (scale 0) and one of tiny values */
                    for (int64_t c = 0; c < 32 && c < cols; c++) x[c] = 0.0f, x[cols - 1 - c] *= 1e-30f;
                double *ref = malloc(sizeof(double) * (size_t)(n * rows));
                if (i8) ref_matmul_qact(dec, rows, cols, x, n, i8, ref);
                else ref_matmul(dec, rows, cols, x, n, ref);
                float *d_x = ref_dev_from(x, sizeof(float) * (size_t)(n * cols));
                float *d_y = ref_dev_poison(sizeof(float) * (size_t)(n * rows));
                float *y = malloc(sizeof(float) * (size_t)(n * rows));
                OK(cmf_cuda_matvec(&w, d_x, d_y, n, NULL));
                OK(cmf_cuda_download(y, d_y, sizeof(float) * (size_t)(n * rows), NULL));
                OK(cmf_cuda_sync(NULL));
                double e = ref_rel_err(y, ref, n * rows);
                CHECK_MSG(e < 1e-5, "matvec %s [%lld, %lld] n=%d i8act %d: rel err %g", cmf_dtype_name(dt),
                          (long long)rows, (long long)cols, n, i8, e);
                if (i8 && n == 3) { /* a NaN activation: its token's every output NaN (the block's scale is NaN, as on
                                     * the CPU), the other tokens' bits unchanged */
                    float *xn = malloc(sizeof(float) * (size_t)(n * cols)), *yn = malloc(sizeof(float) * (size_t)(n * rows));
                    memcpy(xn, x, sizeof(float) * (size_t)(n * cols));
                    xn[cols + cols / 2] = NAN;
                    float *d_xn = ref_dev_from(xn, sizeof(float) * (size_t)(n * cols));
                    float *d_yn = ref_dev_poison(sizeof(float) * (size_t)(n * rows));
                    OK(cmf_cuda_matvec(&w, d_xn, d_yn, n, NULL));
                    OK(cmf_cuda_download(yn, d_yn, sizeof(float) * (size_t)(n * rows), NULL));
                    OK(cmf_cuda_sync(NULL));
                    int64_t bad = 0;
                    for (int64_t r = 0; r < rows; r++)
                        bad += !isnan(yn[rows + r]) || memcmp(&yn[r], &y[r], sizeof(float)) != 0 ||
                               memcmp(&yn[2 * rows + r], &y[2 * rows + r], sizeof(float)) != 0;
                    CHECK_MSG(bad == 0, "matvec %s [%lld, %lld] i8act %d with a NaN activation: %lld rows wrong",
                              cmf_dtype_name(dt), (long long)rows, (long long)cols, i8, (long long)bad);
                    cmf_cuda_free(d_xn);
                    cmf_cuda_free(d_yn);
                    free(xn);
                    free(yn);
                }
                /* the fused decode products give the same bits: q/k/v-style multi (with a bias on the second
                 * weight: matvec then + bias) and gate/up + GLU (matvec twice, then cmf_cuda_glu) */
                cmf_cuda_weight ww[2] = {w, w};
                if (cmf_cuda_matvec_multi_ok(ww, 2, n)) {
                    float *bias = ref_rand_vec(&rng, rows, 1.0f), *d_b = ref_dev_from(bias, sizeof(float) * (size_t)rows);
                    float *d_y2 = ref_dev_poison(sizeof(float) * (size_t)(n * rows)), *y2 = malloc(sizeof(float) * (size_t)(n * rows));
                    float *d_y3 = ref_dev_poison(sizeof(float) * (size_t)(n * rows)), *y3 = malloc(sizeof(float) * (size_t)(n * rows));
                    float *outs[2] = {d_y2, d_y3};
                    const float *biases[2] = {NULL, d_b};
                    OK(cmf_cuda_matvec_multi(ww, 2, d_x, outs, biases, n, NULL));
                    OK(cmf_cuda_download(y2, d_y2, sizeof(float) * (size_t)(n * rows), NULL));
                    OK(cmf_cuda_download(y3, d_y3, sizeof(float) * (size_t)(n * rows), NULL));
                    OK(cmf_cuda_sync(NULL));
                    int64_t bad = 0;
                    for (int64_t i = 0; i < n * rows; i++) {
                        const float yb = y[i] + bias[i % rows];
                        bad += memcmp(&y2[i], &y[i], sizeof(float)) != 0 || memcmp(&y3[i], &yb, sizeof(float)) != 0;
                    }
                    CHECK_MSG(bad == 0, "matvec_multi %s [%lld, %lld] n=%d i8act %d: %lld values differ from matvec "
                              "(+ bias)", cmf_dtype_name(dt), (long long)rows, (long long)cols, n, i8, (long long)bad);
                    /* product + residual add + RMSNorm in one launch (output in place of the product, as the
                     * forward's xb): the bits of matvec then add_rmsnorm; twice, so the block counter's reset counts
                     * (f32 activations only: this kernel has no int8 path) */
                    if (!i8) {
                        float *res = ref_rand_vec(&rng, n * rows, 1.0f), *nw = ref_rand_vec(&rng, rows, 1.0f);
                        float *d_nw = ref_dev_from(nw, sizeof(float) * (size_t)rows);
                        float *d_r1 = ref_dev_from(res, sizeof(float) * (size_t)(n * rows)), *d_o1 = ref_dev_poison(sizeof(float) * (size_t)(n * rows));
                        int zero = 0, *d_c = ref_dev_from(&zero, sizeof zero);
                        float *h1 = malloc(sizeof(float) * (size_t)(2 * n * rows)), *h2 = malloc(sizeof(float) * (size_t)(2 * n * rows));
                        OK(cmf_cuda_add_rmsnorm(d_r1, d_y, d_o1, d_nw, n, rows, 1e-6f, 0, NULL));
                        OK(cmf_cuda_download(h1, d_r1, sizeof(float) * (size_t)(n * rows), NULL));
                        OK(cmf_cuda_download(h1 + n * rows, d_o1, sizeof(float) * (size_t)(n * rows), NULL));
                        for (int rep = 0; rep < 2; rep++) {
                            float *d_r2 = ref_dev_from(res, sizeof(float) * (size_t)(n * rows)), *d_p = ref_dev_poison(sizeof(float) * (size_t)(n * rows));
                            OK(cmf_cuda_matvec_add_rmsnorm(&w, d_x, d_p, NULL, n, d_r2, d_p, d_nw, 1e-6f, 0, d_c, NULL));
                            OK(cmf_cuda_download(h2, d_r2, sizeof(float) * (size_t)(n * rows), NULL));
                            OK(cmf_cuda_download(h2 + n * rows, d_p, sizeof(float) * (size_t)(n * rows), NULL));
                            OK(cmf_cuda_sync(NULL));
                            CHECK_MSG(!memcmp(h1, h2, sizeof(float) * (size_t)(2 * n * rows)),
                                      "matvec_add_rmsnorm %s [%lld, %lld] n=%d call %d differs from matvec + add_rmsnorm",
                                      cmf_dtype_name(dt), (long long)rows, (long long)cols, n, rep);
                            cmf_cuda_free(d_r2);
                            cmf_cuda_free(d_p);
                        }
                        cmf_cuda_free(d_nw);
                        cmf_cuda_free(d_r1);
                        cmf_cuda_free(d_o1);
                        cmf_cuda_free(d_c);
                        free(res);
                        free(nw);
                        free(h1);
                        free(h2);
                    }
                    for (int gelu = 0; gelu <= 1; gelu++) {
                        OK(cmf_cuda_matvec_glu(&w, &w, d_x, d_y2, n, gelu, NULL));
                        OK(cmf_cuda_glu(d_y3, d_y, d_y, n * rows, gelu, NULL));
                        OK(cmf_cuda_download(y2, d_y2, sizeof(float) * (size_t)(n * rows), NULL));
                        OK(cmf_cuda_download(y3, d_y3, sizeof(float) * (size_t)(n * rows), NULL));
                        OK(cmf_cuda_sync(NULL));
                        CHECK_MSG(!memcmp(y2, y3, sizeof(float) * (size_t)(n * rows)),
                                  "matvec_glu %s [%lld, %lld] n=%d gelu %d i8act %d differs from matvec + glu",
                                  cmf_dtype_name(dt), (long long)rows, (long long)cols, n, gelu, i8);
                    }
                    cmf_cuda_free(d_b);
                    cmf_cuda_free(d_y2);
                    cmf_cuda_free(d_y3);
                    free(bias);
                    free(y2);
                    free(y3);
                }
                cmf_cuda_free(d_x);
                cmf_cuda_free(d_y);
                free(x);
                free(ref);
                free(y);
            }
            cmf_cuda_set_i8act(i8_default);
            /* gemm, both algorithms, n = 1, 67 */
            for (int algo = CMF_CUDA_GEMM_CUBLAS; algo <= CMF_CUDA_GEMM_TILED; algo++) {
                int64_t n = algo == CMF_CUDA_GEMM_CUBLAS ? 67 : 70;
                float *x = ref_rand_vec(&rng, n * cols, 1.0f);
                double *ref = malloc(sizeof(double) * (size_t)(n * rows));
                ref_matmul(dec, rows, cols, x, n, ref);
                float *d_x = ref_dev_from(x, sizeof(float) * (size_t)(n * cols));
                float *d_y = ref_dev_poison(sizeof(float) * (size_t)(n * rows));
                float *y = malloc(sizeof(float) * (size_t)(n * rows));
                OK(cmf_cuda_gemm(ctx, &w, d_x, d_y, n, algo, NULL));
                OK(cmf_cuda_download(y, d_y, sizeof(float) * (size_t)(n * rows), NULL));
                OK(cmf_cuda_sync(NULL));
                double e = ref_rel_err(y, ref, n * rows);
                double bound = dt == CMF_DT_F32 && algo == CMF_CUDA_GEMM_CUBLAS ? 1e-5 : 5e-3;
                CHECK_MSG(e < bound, "gemm algo %d %s [%lld, %lld] n=%lld: rel err %g", algo, cmf_dtype_name(dt),
                          (long long)rows, (long long)cols, (long long)n, e);
                cmf_cuda_free(d_x);
                cmf_cuda_free(d_y);
                free(x);
                free(ref);
                free(y);
            }
            cmf_cuda_free((void *)w.d_data);
            cmf_cuda_free(d_f);
            free(p);
            free(dec);
            free(got);
            free(h16);
        }
    }
    /* errors: unsupported dtype, bad n, q4 with cols % 32 */
    cmf_cuda_weight bad = {CMF_DT_Q2TP, 4, 32, (void *)16};
    CHECK(cmf_cuda_weight_check(&bad) == CMF_E_UNSUPPORTED);
    bad.dtype = CMF_DT_Q4TP, bad.cols = 40;
    CHECK(cmf_cuda_weight_check(&bad) == CMF_E_ARG);
    bad.dtype = CMF_DT_F16;
    CHECK(cmf_cuda_matvec(&bad, (void *)16, (void *)16, 9, NULL) == CMF_E_ARG);
}

static void test_elementwise(void) {
    const int64_t n = 5, d = 1000;
    float *x = ref_rand_vec(&rng, n * d, 3.0f), *w = ref_rand_vec(&rng, d, 1.0f), *y = malloc(sizeof(float) * (size_t)(n * d));
    double *ref = malloc(sizeof(double) * (size_t)(n * d));
    float *d_x = ref_dev_from(x, sizeof(float) * (size_t)(n * d)), *d_w = ref_dev_from(w, sizeof(float) * (size_t)d);
    float *d_y = ref_dev_poison(sizeof(float) * (size_t)(n * d));
    for (int gemma = 0; gemma <= 1; gemma++) {
        OK(cmf_cuda_rmsnorm(d_y, d_x, d_w, n, d, 1e-5f, gemma, NULL));
        OK(cmf_cuda_download(y, d_y, sizeof(float) * (size_t)(n * d), NULL));
        OK(cmf_cuda_sync(NULL));
        for (int64_t t = 0; t < n; t++) {
            double ss = 0;
            for (int64_t i = 0; i < d; i++) ss += (double)x[t * d + i] * x[t * d + i];
            double inv = 1.0 / sqrt(ss / d + 1e-5);
            for (int64_t i = 0; i < d; i++) ref[t * d + i] = x[t * d + i] * inv * (gemma ? 1.0 + w[i] : w[i]);
        }
        CHECK_MSG(ref_rel_err(y, ref, n * d) < 1e-5, "rmsnorm gemma=%d: %g", gemma, ref_rel_err(y, ref, n * d));
    }
    /* glu */
    for (int gelu = 0; gelu <= 1; gelu++) {
        OK(cmf_cuda_glu(d_y, d_x, d_x + d, (n - 1) * d, gelu, NULL));
        OK(cmf_cuda_download(y, d_y, sizeof(float) * (size_t)((n - 1) * d), NULL));
        OK(cmf_cuda_sync(NULL));
        for (int64_t i = 0; i < (n - 1) * d; i++) {
            double a = x[i];
            double act = gelu ? 0.5 * a * (1 + tanh(0.7978845608028654 * (a + 0.044715 * a * a * a))) : a / (1 + exp(-a));
            ref[i] = act * x[d + i];
        }
        CHECK_MSG(ref_rel_err(y, ref, (n - 1) * d) < 1e-5, "glu gelu=%d: %g", gelu, ref_rel_err(y, ref, (n - 1) * d));
    }
    /* add */
    OK(cmf_cuda_add(d_y, d_x, d_x + d, (n - 1) * d, NULL));
    OK(cmf_cuda_download(y, d_y, sizeof(float) * (size_t)((n - 1) * d), NULL));
    OK(cmf_cuda_sync(NULL));
    for (int64_t i = 0; i < (n - 1) * d; i++) ref[i] = (double)x[i] + x[d + i];
    CHECK(ref_rel_err(y, ref, (n - 1) * d) < 1e-7);
    /* softmax */
    OK(cmf_cuda_copy(d_y, d_x, sizeof(float) * (size_t)(n * d), NULL));
    OK(cmf_cuda_softmax(d_y, n, d, NULL));
    OK(cmf_cuda_download(y, d_y, sizeof(float) * (size_t)(n * d), NULL));
    OK(cmf_cuda_sync(NULL));
    for (int64_t t = 0; t < n; t++) {
        double mx = -INFINITY, s = 0;
        for (int64_t i = 0; i < d; i++) mx = fmax(mx, x[t * d + i]);
        for (int64_t i = 0; i < d; i++) s += exp(x[t * d + i] - mx);
        for (int64_t i = 0; i < d; i++) ref[t * d + i] = exp(x[t * d + i] - mx) / s;
    }
    CHECK_MSG(ref_rel_err(y, ref, n * d) < 1e-5, "softmax: %g", ref_rel_err(y, ref, n * d));
    /* rope: both pairings, full and partial rotary */
    const int nt = 3, H = 4, D = 64;
    int32_t pos[3] = {0, 17, 30000};
    int32_t *d_pos = ref_dev_from(pos, sizeof pos);
    for (int pairing = 0; pairing <= 1; pairing++)
        for (int rot = D; rot >= D / 4; rot /= 4) {
            OK(cmf_cuda_upload(d_y, x, sizeof(float) * nt * H * D, NULL));
            OK(cmf_cuda_rope(d_y, d_pos, nt, H, D, rot, 500000.0f, pairing, NULL));
            OK(cmf_cuda_download(y, d_y, sizeof(float) * nt * H * D, NULL));
            OK(cmf_cuda_sync(NULL));
            for (int t = 0; t < nt; t++)
                for (int h = 0; h < H; h++) {
                    const float *v = x + (t * H + h) * D;
                    double *o = ref + (t * H + h) * D;
                    for (int i = 0; i < D; i++) o[i] = v[i];
                    for (int i = 0; i < rot / 2; i++) {
                        float inv = (float)pow(500000.0, -2.0 * i / rot);
                        double ang = (double)((float)pos[t] * inv);
                        int a = pairing ? 2 * i : i, b = pairing ? 2 * i + 1 : i + rot / 2;
                        o[a] = v[a] * cos(ang) - v[b] * sin(ang);
                        o[b] = v[a] * sin(ang) + v[b] * cos(ang);
                    }
                }
            CHECK_MSG(ref_rel_err(y, ref, nt * H * D) < 1e-5, "rope pairing %d rot %d: %g", pairing, rot,
                      ref_rel_err(y, ref, nt * H * D));
        }
    CHECK(cmf_cuda_rope(d_y, d_pos, 1, H, D, 3, 1e4f, 0, NULL) == CMF_E_ARG);
    /* the fused decode ops: add + rmsnorm gives the bits of add then rmsnorm */
    {
        float *d_a1 = ref_dev_from(x, sizeof(float) * (size_t)((n - 1) * d)), *d_a2 = ref_dev_from(x, sizeof(float) * (size_t)((n - 1) * d));
        float *d_o1 = ref_dev_poison(sizeof(float) * (size_t)((n - 1) * d)), *d_o2 = ref_dev_poison(sizeof(float) * (size_t)((n - 1) * d));
        float *h1 = malloc(sizeof(float) * (size_t)(2 * (n - 1) * d)), *h2 = malloc(sizeof(float) * (size_t)(2 * (n - 1) * d));
        OK(cmf_cuda_add(d_a1, d_a1, d_x + d, (n - 1) * d, NULL));
        OK(cmf_cuda_rmsnorm(d_o1, d_a1, d_w, n - 1, d, 1e-6f, 0, NULL));
        OK(cmf_cuda_add_rmsnorm(d_a2, d_x + d, d_o2, d_w, n - 1, d, 1e-6f, 0, NULL));
        OK(cmf_cuda_download(h1, d_a1, sizeof(float) * (size_t)((n - 1) * d), NULL));
        OK(cmf_cuda_download(h1 + (n - 1) * d, d_o1, sizeof(float) * (size_t)((n - 1) * d), NULL));
        OK(cmf_cuda_download(h2, d_a2, sizeof(float) * (size_t)((n - 1) * d), NULL));
        OK(cmf_cuda_download(h2 + (n - 1) * d, d_o2, sizeof(float) * (size_t)((n - 1) * d), NULL));
        OK(cmf_cuda_sync(NULL));
        CHECK_MSG(!memcmp(h1, h2, sizeof(float) * (size_t)(2 * (n - 1) * d)), "add_rmsnorm differs from add + rmsnorm");
        /* the output in place of the added rows (the forward's xb: o_proj / down_proj output, then the next norm) */
        float *d_a3 = ref_dev_from(x, sizeof(float) * (size_t)((n - 1) * d)), *d_oo = ref_dev_from(x + d, sizeof(float) * (size_t)((n - 1) * d));
        OK(cmf_cuda_add_rmsnorm(d_a3, d_oo, d_oo, d_w, n - 1, d, 1e-6f, 0, NULL));
        OK(cmf_cuda_download(h2, d_a3, sizeof(float) * (size_t)((n - 1) * d), NULL));
        OK(cmf_cuda_download(h2 + (n - 1) * d, d_oo, sizeof(float) * (size_t)((n - 1) * d), NULL));
        OK(cmf_cuda_sync(NULL));
        CHECK_MSG(!memcmp(h1, h2, sizeof(float) * (size_t)(2 * (n - 1) * d)), "add_rmsnorm with out == o differs");
        cmf_cuda_free(d_a3);
        cmf_cuda_free(d_oo);
        cmf_cuda_free(d_a1);
        cmf_cuda_free(d_a2);
        cmf_cuda_free(d_o1);
        cmf_cuda_free(d_o2);
        free(h1);
        free(h2);
    }
    /* q/k norm + RoPE + KV-cache write against a double reference; the cache rows are the rotated K (and V) in f16 */
    {
        const int NKV = 2, rot = 48, KVD = NKV * D, NCTX = 40;
        int32_t p3[3] = {3, 17, 39};
        int32_t *d_p3 = ref_dev_from(p3, sizeof p3);
        float inv[32], *qk = x, *vv = x + nt * (H + NKV) * D;
        for (int i = 0; i < rot / 2; i++) inv[i] = (float)pow(1e6, -2.0 * i / rot);
        float *d_inv = ref_dev_from(inv, sizeof inv), *d_q = ref_dev_from(qk, sizeof(float) * nt * H * D);
        float *d_k = ref_dev_from(qk + nt * H * D, sizeof(float) * nt * KVD), *d_v = ref_dev_from(vv, sizeof(float) * nt * KVD);
        uint16_t *d_kc = ref_dev_poison(2 * (size_t)NCTX * KVD), *d_vc = ref_dev_poison(2 * (size_t)NCTX * KVD);
        OK(cmf_cuda_qk_norm_rope_kv(d_q, d_k, d_v, nt, H, NKV, D, d_w, d_w + D, 1e-6f, 0, rot, d_inv, d_p3,
                                    CMF_CUDA_ROPE_HALF, d_kc, d_vc, CMF_CUDA_KV_F16, NULL));
        float *q = malloc(sizeof(float) * nt * (H + NKV) * D);
        uint16_t *kc = malloc(2 * (size_t)NCTX * KVD), *vc = malloc(2 * (size_t)NCTX * KVD);
        OK(cmf_cuda_download(q, d_q, sizeof(float) * nt * H * D, NULL));
        OK(cmf_cuda_download(q + nt * H * D, d_k, sizeof(float) * nt * KVD, NULL));
        OK(cmf_cuda_download(kc, d_kc, 2 * (size_t)NCTX * KVD, NULL));
        OK(cmf_cuda_download(vc, d_vc, 2 * (size_t)NCTX * KVD, NULL));
        OK(cmf_cuda_sync(NULL));
        for (int row = 0; row < nt * (H + NKV); row++) { /* q heads of all tokens, then k heads */
            const int isq = row < nt * H, t = isq ? row / H : (row - nt * H) / NKV;
            const float *v = qk + (size_t)row * D, *g = w + (isq ? 0 : D);
            double ss = 0, nv[64], *o = ref + (size_t)row * D;
            for (int i = 0; i < D; i++) ss += (double)v[i] * v[i];
            for (int i = 0; i < D; i++) nv[i] = v[i] / sqrt(ss / D + 1e-6) * g[i];
            for (int i = 0; i < D; i++) o[i] = nv[i];
            for (int i = 0; i < rot / 2; i++) {
                double ang = (double)((float)p3[t] * inv[i]);
                o[i] = nv[i] * cos(ang) - nv[i + rot / 2] * sin(ang);
                o[i + rot / 2] = nv[i] * sin(ang) + nv[i + rot / 2] * cos(ang);
            }
        }
        CHECK_MSG(ref_rel_err(q, ref, nt * (H + NKV) * D) < 1e-5, "qk_norm_rope: %g", ref_rel_err(q, ref, nt * (H + NKV) * D));
        int64_t badc = 0;
        for (int t = 0; t < nt; t++)
            for (int i = 0; i < KVD; i++)
                badc += kc[(size_t)p3[t] * KVD + i] != cmf_f32_to_f16(q[nt * H * D + t * KVD + i]) ||
                        vc[(size_t)p3[t] * KVD + i] != cmf_f32_to_f16(vv[t * KVD + i]);
        CHECK_MSG(badc == 0, "qk_norm_rope_kv: %lld cache values differ", (long long)badc);
        { /* an f32 cache (CMF_CUDA_KV_F32) holds the rotated K and the V rows exactly, also through kv_write */
            float *d_q2 = ref_dev_from(qk, sizeof(float) * nt * H * D);
            float *d_k2 = ref_dev_from(qk + nt * H * D, sizeof(float) * nt * KVD);
            float *d_kf = ref_dev_poison(4 * (size_t)NCTX * KVD), *d_vf = ref_dev_poison(4 * (size_t)NCTX * KVD);
            float *kf = malloc(4 * (size_t)NCTX * KVD), *vf = malloc(4 * (size_t)NCTX * KVD);
            OK(cmf_cuda_qk_norm_rope_kv(d_q2, d_k2, d_v, nt, H, NKV, D, d_w, d_w + D, 1e-6f, 0, rot, d_inv, d_p3,
                                        CMF_CUDA_ROPE_HALF, d_kf, d_vf, CMF_CUDA_KV_F32, NULL));
            OK(cmf_cuda_download(kf, d_kf, 4 * (size_t)NCTX * KVD, NULL));
            OK(cmf_cuda_download(vf, d_vf, 4 * (size_t)NCTX * KVD, NULL));
            OK(cmf_cuda_sync(NULL));
            int64_t badf = 0;
            for (int t = 0; t < nt; t++)
                badf += memcmp(kf + (size_t)p3[t] * KVD, q + nt * H * D + t * KVD, 4 * (size_t)KVD) != 0 ||
                        memcmp(vf + (size_t)p3[t] * KVD, vv + t * KVD, 4 * (size_t)KVD) != 0;
            CHECK_MSG(badf == 0, "qk_norm_rope_kv f32 cache: %lld rows differ", (long long)badf);
            OK(cmf_cuda_memset(d_kf, 0xff, 4 * (size_t)NCTX * KVD, NULL));
            OK(cmf_cuda_memset(d_vf, 0xff, 4 * (size_t)NCTX * KVD, NULL));
            OK(cmf_cuda_kv_write(d_kf, d_vf, d_k, d_v, d_p3, nt, KVD, CMF_CUDA_KV_F32, NULL));
            OK(cmf_cuda_download(kf, d_kf, 4 * (size_t)NCTX * KVD, NULL));
            OK(cmf_cuda_download(vf, d_vf, 4 * (size_t)NCTX * KVD, NULL));
            OK(cmf_cuda_sync(NULL));
            badf = 0;
            for (int t = 0; t < nt; t++)
                badf += memcmp(kf + (size_t)p3[t] * KVD, q + nt * H * D + t * KVD, 4 * (size_t)KVD) != 0 ||
                        memcmp(vf + (size_t)p3[t] * KVD, vv + t * KVD, 4 * (size_t)KVD) != 0;
            CHECK_MSG(badf == 0, "kv_write f32 cache: %lld rows differ", (long long)badf);
            CHECK(cmf_cuda_kv_write(d_kf, d_vf, d_k, d_v, d_p3, nt, KVD, 7, NULL) == CMF_E_ARG);
            cmf_cuda_free(d_q2);
            cmf_cuda_free(d_k2);
            cmf_cuda_free(d_kf);
            cmf_cuda_free(d_vf);
            free(kf);
            free(vf);
        }
        cmf_cuda_free(d_p3);
        cmf_cuda_free(d_inv);
        cmf_cuda_free(d_q);
        cmf_cuda_free(d_k);
        cmf_cuda_free(d_v);
        cmf_cuda_free(d_kc);
        cmf_cuda_free(d_vc);
        free(q);
        free(kc);
        free(vc);
    }
    cmf_cuda_free(d_pos);
    cmf_cuda_free(d_x);
    cmf_cuda_free(d_w);
    cmf_cuda_free(d_y);
    free(x);
    free(w);
    free(y);
    free(ref);
}

/* Decode attention (every kernel variant) against the double reference, and with prefill (the slow reference) the
 * causal prefill kernel. */
static void test_attention(int prefill) {
    static const struct {
        int H, KV, D, window;
        float softcap;
        int64_t ctx;
    } cases[] = {{8, 2, 64, 0, 0.0f, 300}, {4, 4, 128, 0, 0.0f, 1000}, {12, 1, 8, 0, 0.0f, 77},
                 {16, 8, 256, 100, 50.0f, 260}, {10, 2, 96, 0, 0.0f, 65}, {6, 3, 32, 7, 30.0f, 130},
                 {64, 4, 128, 0, 0.0f, 4100}};
    for (size_t ci = 0; ci < sizeof cases / sizeof *cases; ci++) {
        int H = cases[ci].H, KV = cases[ci].KV, D = cases[ci].D;
        int64_t ctx = cases[ci].ctx;
        cmf_cuda_attn a = {H, KV, D, 1.0f / sqrtf((float)D), cases[ci].softcap, cases[ci].window, CMF_CUDA_KV_F16};
        size_t kvn = (size_t)(ctx * KV * D);
        uint16_t *k = malloc(2 * kvn), *v = malloc(2 * kvn);
        for (size_t i = 0; i < kvn; i++) k[i] = cmf_f32_to_f16(ref_rand(&rng) * 2.0f), v[i] = cmf_f32_to_f16(ref_rand(&rng));
        uint16_t *d_k = ref_dev_from(k, 2 * kvn), *d_v = ref_dev_from(v, 2 * kvn);
        /* the same values in f32 caches (CMF_CUDA_KV_F32): every kernel below must give the f16 cache's bits */
        cmf_cuda_attn af = a;
        af.kv_type = CMF_CUDA_KV_F32;
        float *kf = malloc(4 * kvn), *vf = malloc(4 * kvn);
        for (size_t i = 0; i < kvn; i++) kf[i] = cmf_f16_to_f32(k[i]), vf[i] = cmf_f16_to_f32(v[i]);
        uint16_t *d_kf = ref_dev_from(kf, 4 * kvn), *d_vf = ref_dev_from(vf, 4 * kvn);
        free(kf);
        free(vf);
        /* decode at the last position and at one in the middle */
        int64_t tests[2] = {ctx - 1, ctx / 3};
        const size_t wb = cmf_cuda_attn_decode_work_bytes(&a, ctx);
        void *d_work = ref_dev_poison(wb);
        OK(cmf_cuda_memset(d_work, 0, wb, NULL)); /* zeroed once (its split counters); 4 launches reuse it below */
        /* every decode kernel variant (cmf_cuda_set_attn_decode): keys per softmax update 1 / 4, with and without
         * the L2 prefetch of the split's rows, the parallel and the serial merge of the splits; the cluster form
         * (cmf_cuda_set_attn_cluster: the default tile, its own merge) */
        static const int tile[5] = {1, 4, 4, 4, 4}, pf[5] = {0, 0, 1, 0, 0}, mg[5] = {1, 1, 1, 0, 1};
        static const int cl[5] = {0, 0, 0, 0, 1};
        for (int ti = 0; ti < 10; ti++) {
            int64_t pos = tests[ti % 2];
            cmf_cuda_set_attn_decode(tile[ti / 2], pf[ti / 2], mg[ti / 2]);
            cmf_cuda_set_attn_cluster(cl[ti / 2]);
            float *q = ref_rand_vec(&rng, H * D, 2.0f), *o = malloc(sizeof(float) * (size_t)(H * D));
            double *ref = malloc(sizeof(double) * (size_t)(H * D));
            float *d_q = ref_dev_from(q, sizeof(float) * (size_t)(H * D)), *d_o = ref_dev_poison(sizeof(float) * (size_t)(H * D));
            OK(cmf_cuda_attn_decode(&a, d_q, d_k, d_v, pos, d_o, d_work, NULL));
            OK(cmf_cuda_download(o, d_o, sizeof(float) * (size_t)(H * D), NULL));
            OK(cmf_cuda_sync(NULL));
            ref_attention(H, KV, D, a.scale, a.softcap, a.window, q, k, v, pos, 1, ref);
            double e = ref_rel_err(o, ref, H * D);
            CHECK_MSG(e < 1e-5, "attn decode H%d KV%d D%d win%d cap%g pos %lld tile %d pf %d merge %d cluster %d: %g",
                      H, KV, D, a.window, (double)a.softcap, (long long)pos, tile[ti / 2], pf[ti / 2], mg[ti / 2],
                      cl[ti / 2], e);
            /* the device-position variant (CUDA graphs): the same bits */
            int32_t p32 = (int32_t)pos;
            int32_t *d_p = ref_dev_from(&p32, sizeof p32);
            float *o2 = malloc(sizeof(float) * (size_t)(H * D));
            OK(cmf_cuda_attn_decode_dpos(&a, d_q, d_k, d_v, d_p, ctx, d_o, d_work, NULL));
            OK(cmf_cuda_download(o2, d_o, sizeof(float) * (size_t)(H * D), NULL));
            OK(cmf_cuda_sync(NULL));
            CHECK_MSG(!memcmp(o, o2, sizeof(float) * (size_t)(H * D)), "attn decode dpos H%d KV%d D%d pos %lld differs",
                      H, KV, D, (long long)pos);
            OK(cmf_cuda_attn_decode(&af, d_q, d_kf, d_vf, pos, d_o, d_work, NULL));
            OK(cmf_cuda_download(o2, d_o, sizeof(float) * (size_t)(H * D), NULL));
            OK(cmf_cuda_sync(NULL));
            CHECK_MSG(!memcmp(o, o2, sizeof(float) * (size_t)(H * D)),
                      "attn decode f32 cache H%d KV%d D%d pos %lld differs", H, KV, D, (long long)pos);
            OK(cmf_cuda_attn_decode_dpos(&af, d_q, d_kf, d_vf, d_p, ctx, d_o, d_work, NULL));
            OK(cmf_cuda_download(o2, d_o, sizeof(float) * (size_t)(H * D), NULL));
            OK(cmf_cuda_sync(NULL));
            CHECK_MSG(!memcmp(o, o2, sizeof(float) * (size_t)(H * D)),
                      "attn decode dpos f32 cache H%d KV%d D%d pos %lld differs", H, KV, D, (long long)pos);
            cmf_cuda_free(d_p);
            free(o2);
            cmf_cuda_free(d_q);
            cmf_cuda_free(d_o);
            free(q);
            free(o);
            free(ref);
        }
        cmf_cuda_set_attn_decode(-1, -1, -1);
        cmf_cuda_set_attn_cluster(-1);
        cmf_cuda_free(d_work);
        /* prefill of the last n_tok positions (a cached prefix before them) */
        if (prefill) {
            int64_t n_tok = ctx > 200 ? 200 : ctx - 5, pos0 = ctx - n_tok;
            size_t qn = (size_t)(n_tok * H * D);
            float *q = ref_rand_vec(&rng, (int64_t)qn, 2.0f), *o = malloc(sizeof(float) * qn);
            double *ref = malloc(sizeof(double) * qn);
            float *d_q = ref_dev_from(q, sizeof(float) * qn), *d_o = ref_dev_poison(sizeof(float) * qn);
            OK(cmf_cuda_attn_prefill(&a, d_q, d_k, d_v, pos0, n_tok, d_o, NULL));
            OK(cmf_cuda_download(o, d_o, sizeof(float) * qn, NULL));
            OK(cmf_cuda_sync(NULL));
            ref_attention(H, KV, D, a.scale, a.softcap, a.window, q, k, v, pos0, n_tok, ref);
            double e = ref_rel_err(o, ref, (int64_t)qn);
            CHECK_MSG(e < 1e-5, "attn prefill H%d KV%d D%d win%d n_tok %lld: %g", H, KV, D, a.window, (long long)n_tok, e);
            {
                float *o2 = malloc(sizeof(float) * qn);
                OK(cmf_cuda_attn_prefill(&af, d_q, d_kf, d_vf, pos0, n_tok, d_o, NULL));
                OK(cmf_cuda_download(o2, d_o, sizeof(float) * qn, NULL));
                OK(cmf_cuda_sync(NULL));
                CHECK_MSG(!memcmp(o, o2, sizeof(float) * qn), "attn prefill f32 cache H%d KV%d D%d differs", H, KV, D);
                free(o2);
            }
            cmf_cuda_free(d_q);
            cmf_cuda_free(d_o);
            free(q);
            free(o);
            free(ref);
        }
        cmf_cuda_free(d_kf);
        cmf_cuda_free(d_vf);
        cmf_cuda_free(d_k);
        cmf_cuda_free(d_v);
        free(k);
        free(v);
    }
    cmf_cuda_attn bad = {6, 4, 64, 0.125f, 0, 0, CMF_CUDA_KV_F16};
    CHECK(cmf_cuda_attn_decode(&bad, (void *)16, (void *)16, (void *)16, 0, (void *)16, (void *)16, NULL) == CMF_E_ARG);
    bad.n_heads = 8, bad.kv_type = 5; /* an unknown cache type */
    CHECK(cmf_cuda_attn_decode(&bad, (void *)16, (void *)16, (void *)16, 0, (void *)16, (void *)16, NULL) == CMF_E_ARG);
}

/* CPU order: value desc, id asc. */
static const float *g_sort_x;
static int cmp_desc(const void *a, const void *b) {
    int i = *(const int *)a, j = *(const int *)b;
    if (g_sort_x[i] != g_sort_x[j]) return g_sort_x[i] > g_sort_x[j] ? -1 : 1;
    return i - j;
}

static void test_sampling(void) {
    const int64_t n = 50000;
    float *x = ref_rand_vec(&rng, n, 8.0f);
    x[123] = x[4567] = 9.5f; /* a tie for the maximum: the lower id wins */
    float *d_x = ref_dev_from(x, sizeof(float) * (size_t)n);
    void *d_work = ref_dev_poison(cmf_cuda_sample_work_bytes(n));
    OK(cmf_cuda_memset(d_work, 0, cmf_cuda_sample_work_bytes(n), NULL)); /* the kernels' block counters start at 0 */
    int32_t id = -1;
    OK(cmf_cuda_argmax(d_x, n, &id, d_work, NULL));
    CHECK_MSG(id == 123, "argmax %d, want 123", id);
    int *ord = malloc(sizeof(int) * (size_t)n);
    for (int i = 0; i < n; i++) ord[i] = i;
    g_sort_x = x;
    qsort(ord, (size_t)n, sizeof *ord, cmp_desc);
    static const struct {
        int k;
        float p, temp;
    } cs[] = {{40, 0.9f, 0.8f}, {1, 1.0f, 1.0f}, {200, 0.5f, 1.5f}, {1024, 1.0f, 2.0f}, {5, 0.01f, 1.0f}};
    for (size_t c = 0; c < sizeof cs / sizeof *cs; c++)
        for (int draw = 0; draw < 6; draw++) {
            float u = (ref_rand(&rng) + 1.0f) * 0.5f;
            if (u >= 1.0f) u = 0.999f;
            OK(cmf_cuda_sample_topk_topp(d_x, n, cs[c].k, cs[c].p, cs[c].temp, u, &id, d_work, NULL));
            int k = cs[c].k;
            double *pr = malloc(sizeof(double) * (size_t)k), tot = 0;
            for (int i = 0; i < k; i++) tot += pr[i] = exp((x[ord[i]] - x[ord[0]]) / cs[c].temp);
            int keep = k;
            double cum = 0;
            for (int i = 0; i < k; i++) {
                cum += pr[i] / tot;
                if (cum >= cs[c].p) { keep = i + 1; break; }
            }
            double mass = 0;
            for (int i = 0; i < keep; i++) mass += pr[i] / tot;
            /* the device's choice must be the token whose cumulative interval holds u (f32 rounding slack) */
            double lo = 0, target = u * mass;
            int okpick = 0;
            for (int i = 0; i < keep; i++) {
                double hi = lo + pr[i] / tot;
                if (ord[i] == id && target >= lo - 1e-5 && target < hi + 1e-5) okpick = 1;
                lo = hi;
            }
            CHECK_MSG(okpick, "sample k=%d p=%g t=%g u=%g: id %d not at u", k, (double)cs[c].p, (double)cs[c].temp,
                      (double)u, id);
            free(pr);
        }
    CHECK(cmf_cuda_sample_topk_topp(d_x, n, 0, 0.9f, 1.0f, 0.5f, &id, d_work, NULL) == CMF_E_ARG);
    CHECK(cmf_cuda_sample_topk_topp(d_x, n, 5, 0.9f, 0.0f, 0.5f, &id, d_work, NULL) == CMF_E_ARG);
    free(ord);
    free(x);
    cmf_cuda_free(d_x);
    cmf_cuda_free(d_work);
}

int main(void) {
    if (!ref_have_device()) return 77;
    char info[256];
    OK(cmf_cuda_device_info(0, info, sizeof info));
    printf("device: %s\n", info);
    cmf_cuda_ctx *ctx = NULL;
    OK(cmf_cuda_ctx_create(&ctx, 0));
    /* CMF_CUDA_TEST_ONLY=weights,attention,...: a subset (short device calls); unset: every group; attn_decode: the
     * attention group without prefill */
    const char *only = getenv("CMF_CUDA_TEST_ONLY");
#define GROUP(name) (!only || strstr(only, name))
    if (GROUP("exp2f")) test_exp2f();
    if (GROUP("weights")) test_weights(ctx);
    if (GROUP("elementwise")) test_elementwise();
    if (GROUP("attention")) test_attention(1);
    else if (only && strstr(only, "attn_decode")) test_attention(0); /* decode only: quick variant runs */
    if (GROUP("sampling")) test_sampling();
#undef GROUP
    cmf_cuda_ctx_free(ctx);
    CMF_TEST_END();
}
