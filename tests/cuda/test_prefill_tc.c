/* test_prefill_tc.c — the tensor-core prefill paths against CPU references in double on fresh random data (poisoned
 * outputs): cmf_cuda_gemm's default (AUTO) path for q8_row / q8_2f weights (int8 GEMM with int8 levels of the
 * activations, gemm.cu) with a large and a tiny scratch (token chunks), its f16 fallback for shapes the int8 path
 * does not take, and cmf_cuda_attn_prefill_tc (attn_prefill.cu: WMMA, f16 Q and P) for every head_dim it serves,
 * GQA, sliding windows, soft-capping, a cached prefix, and a head_dim it hands to the f32 kernel. Bounds
 * (‖out − ref‖ / ‖ref‖): int8 levels 1e-4 (three levels: ~max|x| / 1.6e7 per element; with CMF_CUDA_Q8_LEVELS=2
 * ~max|x| / 64,516, which the outlier token below exceeds: run the default), f16
 * operands 5e-3 (the device METHOD's range for 16-bit operands), f32 1e-5. Exits 77 (ctest SKIP) without a GPU. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_ops.h"
#include "cuda_ref.h"
#include "quant/dtype.h"
#include "testutil.h"

int cmf_test_failures;
static uint64_t rng = 0x2545f4914f6cdd1dull;

/* q8 GEMM through AUTO: the int8 path where it applies, else the f16 one. */
static void test_gemm_q8(cmf_cuda_ctx *big, cmf_cuda_ctx *tiny) {
    static const struct {
        int64_t rows, cols, n;
        int int8; /* 1: the int8 path applies (rows, cols % 4) */
    } cases[] = {{96, 256, 67, 1}, {132, 4096, 300, 1}, {36, 1024, 9, 1}, {512, 96, 130, 1}, {37, 160, 40, 0},
                 {64, 30, 20, 0}};
    static const int dts[] = {CMF_DT_Q8_ROW, CMF_DT_Q8_2F};
    for (size_t di = 0; di < 2; di++)
        for (size_t ci = 0; ci < sizeof cases / sizeof *cases; ci++) {
            const int dt = dts[di];
            const int64_t rows = cases[ci].rows, cols = cases[ci].cols, n = cases[ci].n;
            float *wf = ref_rand_vec(&rng, rows * cols, 0.5f);
            for (int64_t r = 0; r < rows; r++) /* rows and columns of different magnitude: the scales matter */
                for (int64_t c = 0; c < cols; c++) wf[r * cols + c] *= (float)(1 + r % 7) * (1.0f + (float)(c % 5) / 4);
            uint32_t shape[2] = {(uint32_t)rows, (uint32_t)cols};
            uint64_t nb = 0;
            CHECK(cmf_dtype_nbytes(dt, 2, shape, &nb) == 1);
            uint8_t *p = malloc((size_t)nb);
            float *dec = malloc(sizeof(float) * (size_t)(rows * cols));
            OK(cmf_quantize(dt, (uint64_t)rows, (uint64_t)cols, wf, p));
            OK(cmf_dequant(dt, 2, shape, p, nb, dec));
            cmf_cuda_weight w = {dt, rows, cols, ref_dev_from(p, (size_t)nb)};
            float *x = ref_rand_vec(&rng, n * cols, 3.0f);
            for (int64_t c = 0; c < cols; c++) x[cols + c] = 0.0f;          /* token 1: all zeros (zero scales) */
            for (int64_t c = 0; c < cols; c++) x[2 * cols + c] *= 1e-3f;    /* token 2: small values */
            x[3 * cols] = 500.0f;                                           /* token 3: one outlier */
            double *ref = malloc(sizeof(double) * (size_t)(n * rows));
            ref_matmul(dec, rows, cols, x, n, ref);
            float *d_x = ref_dev_from(x, sizeof(float) * (size_t)(n * cols));
            float *y = malloc(sizeof(float) * (size_t)(n * rows));
            for (int k = 0; k < 2; k++) {
                float *d_y = ref_dev_poison(sizeof(float) * (size_t)(n * rows));
                OK(cmf_cuda_gemm(k ? tiny : big, &w, d_x, d_y, n, CMF_CUDA_GEMM_AUTO, NULL));
                OK(cmf_cuda_download(y, d_y, sizeof(float) * (size_t)(n * rows), NULL));
                OK(cmf_cuda_sync(NULL));
                const double e = ref_rel_err(y, ref, n * rows);
                /* per token too: the small and outlier tokens must not hide under the others' norm */
                double worst_tok = 0;
                for (int64_t t = 0; t < n; t++) {
                    double et = t == 1 ? 0 : ref_rel_err(y + t * rows, ref + t * rows, rows);
                    if (et > worst_tok) worst_tok = et;
                }
                int64_t nz = 0;
                for (int64_t r = 0; r < rows; r++) nz += y[rows + r] != 0.0f;
                const double bound = cases[ci].int8 ? 1e-4 : 5e-3;
                printf("gemm AUTO %s [%lld x %lld] n=%lld %s scratch: rel err %.2e (worst token %.2e, bound %.0e)\n",
                       cmf_dtype_name(dt), (long long)rows, (long long)cols, (long long)n, k ? "tiny" : "default", e,
                       worst_tok, bound);
                CHECK_MSG(e < bound && worst_tok < bound, "gemm AUTO %s [%lld x %lld] n=%lld: %g / token %g",
                          cmf_dtype_name(dt), (long long)rows, (long long)cols, (long long)n, e, worst_tok);
                CHECK_MSG(nz == 0, "gemm AUTO %s: %lld outputs of an all-zero token are not 0", cmf_dtype_name(dt),
                          (long long)nz);
                cmf_cuda_free(d_y);
            }
            cmf_cuda_free((void *)w.d_data);
            cmf_cuda_free(d_x);
            free(wf);
            free(p);
            free(dec);
            free(x);
            free(ref);
            free(y);
        }
}

static void test_attn_tc(void) {
    static const struct {
        int H, KV, D, window;
        float softcap;
        int64_t ctx, n_tok; /* queries are the last n_tok positions of ctx */
        double bound;
    } cases[] = {
        {16, 8, 128, 0, 0.0f, 256, 256, 5e-3},   /* a whole 256-token prefill (Qwen3-0.6B heads) */
        {32, 8, 128, 0, 0.0f, 512, 256, 5e-3},   /* the second chunk of a 512-token prompt (Llama-8B heads) */
        {8, 2, 64, 0, 0.0f, 300, 200, 5e-3},     /* GQA 4 */
        {16, 8, 256, 100, 50.0f, 260, 200, 5e-3}, /* sliding window + softcap (Gemma-2-like) */
        {10, 2, 96, 0, 0.0f, 65, 60, 5e-3},
        {6, 3, 80, 7, 30.0f, 130, 130, 5e-3},    /* a window shorter than a key tile */
        {4, 4, 64, 0, 0.0f, 70, 2, 5e-3},        /* two tokens after a prefix */
        {6, 3, 32, 0, 0.0f, 90, 40, 1e-5},       /* head_dim 32: the f32 kernel serves */
    };
    for (size_t ci = 0; ci < sizeof cases / sizeof *cases; ci++) {
        const int H = cases[ci].H, KV = cases[ci].KV, D = cases[ci].D;
        const int64_t ctx = cases[ci].ctx, n_tok = cases[ci].n_tok, pos0 = ctx - n_tok;
        cmf_cuda_attn a = {H, KV, D, 1.0f / sqrtf((float)D), cases[ci].softcap, cases[ci].window, CMF_CUDA_KV_F16};
        const size_t kvn = (size_t)(ctx * KV * D), qn = (size_t)(n_tok * H * D);
        uint16_t *k = malloc(2 * kvn), *v = malloc(2 * kvn);
        for (size_t i = 0; i < kvn; i++) k[i] = cmf_f32_to_f16(ref_rand(&rng) * 2.0f), v[i] = cmf_f32_to_f16(ref_rand(&rng));
        uint16_t *d_k = ref_dev_from(k, 2 * kvn), *d_v = ref_dev_from(v, 2 * kvn);
        float *q = ref_rand_vec(&rng, (int64_t)qn, 2.0f), *o = malloc(sizeof(float) * qn);
        double *ref = malloc(sizeof(double) * qn);
        float *d_q = ref_dev_from(q, sizeof(float) * qn), *d_o = ref_dev_poison(sizeof(float) * qn);
        OK(cmf_cuda_attn_prefill_tc(&a, d_q, d_k, d_v, pos0, n_tok, d_o, NULL));
        OK(cmf_cuda_download(o, d_o, sizeof(float) * qn, NULL));
        OK(cmf_cuda_sync(NULL));
        ref_attention(H, KV, D, a.scale, a.softcap, a.window, q, k, v, pos0, n_tok, ref);
        const double e = ref_rel_err(o, ref, (int64_t)qn);
        double worst = 0; /* per query row: early rows (few keys) must be right too */
        for (int64_t t = 0; t < n_tok; t++) {
            const double et = ref_rel_err(o + t * H * D, ref + t * H * D, H * D);
            if (et > worst) worst = et;
        }
        printf("attn prefill tc H%d KV%d D%d win%d cap%g pos0 %lld n_tok %lld: rel err %.2e (worst token %.2e)\n", H,
               KV, D, a.window, (double)a.softcap, (long long)pos0, (long long)n_tok, e, worst);
        CHECK_MSG(e < cases[ci].bound && worst < 2 * cases[ci].bound, "attn prefill tc H%d KV%d D%d: %g / %g", H, KV,
                  D, e, worst);
        cmf_cuda_free(d_q);
        cmf_cuda_free(d_o);
        cmf_cuda_free(d_k);
        cmf_cuda_free(d_v);
        free(q);
        free(o);
        free(ref);
        free(k);
        free(v);
    }
    cmf_cuda_attn bad = {6, 4, 64, 0.125f, 0, 0, CMF_CUDA_KV_F16};
    CHECK(cmf_cuda_attn_prefill_tc(&bad, (void *)16, (void *)16, (void *)16, 0, 4, (void *)16, NULL) == CMF_E_ARG);
    /* an f32 cache goes to the f32 kernel (the tensor-core one reads f16): the bits of cmf_cuda_attn_prefill */
    {
        const int H = 8, KV = 2, D = 64;
        const int64_t ctx = 150, n_tok = 100, pos0 = ctx - n_tok;
        cmf_cuda_attn a = {H, KV, D, 0.125f, 0.0f, 0, CMF_CUDA_KV_F32};
        const size_t kvn = (size_t)(ctx * KV * D), qn = (size_t)(n_tok * H * D);
        float *k = ref_rand_vec(&rng, (int64_t)kvn, 2.0f), *v = ref_rand_vec(&rng, (int64_t)kvn, 1.0f), *q = ref_rand_vec(&rng, (int64_t)qn, 2.0f);
        float *d_k = ref_dev_from(k, 4 * kvn), *d_v = ref_dev_from(v, 4 * kvn), *d_q = ref_dev_from(q, 4 * qn);
        float *d_o1 = ref_dev_poison(4 * qn), *d_o2 = ref_dev_poison(4 * qn);
        float *o1 = malloc(4 * qn), *o2 = malloc(4 * qn);
        OK(cmf_cuda_attn_prefill_tc(&a, d_q, (const uint16_t *)d_k, (const uint16_t *)d_v, pos0, n_tok, d_o1, NULL));
        OK(cmf_cuda_attn_prefill(&a, d_q, (const uint16_t *)d_k, (const uint16_t *)d_v, pos0, n_tok, d_o2, NULL));
        OK(cmf_cuda_download(o1, d_o1, 4 * qn, NULL));
        OK(cmf_cuda_download(o2, d_o2, 4 * qn, NULL));
        OK(cmf_cuda_sync(NULL));
        CHECK_MSG(!memcmp(o1, o2, 4 * qn), "attn prefill tc with an f32 cache differs from the f32 kernel");
        cmf_cuda_free(d_k);
        cmf_cuda_free(d_v);
        cmf_cuda_free(d_q);
        cmf_cuda_free(d_o1);
        cmf_cuda_free(d_o2);
        free(k);
        free(v);
        free(q);
        free(o1);
        free(o2);
    }
}

int main(void) {
    if (!ref_have_device()) return 77;
    cmf_cuda_ctx *big = NULL, *tiny = NULL;
    OK(cmf_cuda_ctx_create(&big, 0));
    OK(cmf_cuda_ctx_create(&tiny, 200 << 10)); /* 200 KiB: the int8 path runs in many token chunks */
    if (!big || !tiny) CMF_TEST_END();
    test_gemm_q8(big, tiny);
    test_attn_tc();
    cmf_cuda_ctx_free(big);
    cmf_cuda_ctx_free(tiny);
    CMF_TEST_END();
}
