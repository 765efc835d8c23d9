/* Tests of the int8 prefill GEMM (src/backend/cpu/gemm_*.c, kern.h gemm_pack_i8 / gemm_i8): every int8 dtype
 * (q8_row, q8_2f, q4_block, q4_tiled, q4tp, q2tp) x every path of this CPU that has a GEMM, random weights and
 * activations, odd sizes (rows not a multiple of the 32-row panel nor of 16 or 8, cols = 32*k for odd k, q8 also
 * cols % 32 != 0, one case with several column chunks), n = 3, 5, 17, 33 and 512, against cmf_gemm_ref_i8 (double
 * sums of the scalar path's decoded blocks):
 *  - the kernels alone, driven panel by panel with column chunks of KERN_GEMM_KB and of 3 blocks (first = 0
 *    accumulation), with a bias: within 1e-5 of the sum of |terms| per output, and nothing written past the
 *    panel's rows;
 *  - cmf_matmul on a 2-thread pool (work split by row panels and token ranges, q8_2f column scales folded into
 *    the activations): the same bound;
 *  - an exact case: integer activations with power-of-two block scales and weights whose scales are powers of two
 *    give bit-exact sums on every path;
 *  - cmf_qact_quantize_avx512 (the GEMM's activations on the avx512 path) is bit-identical to cmf_qact_quantize
 *    (q, d, s, dx, cx), with and without column scales, odd cols, zeros, ties at .5 and huge values;
 *  - the float-family GEMM (gemm_pack_f32 / gemm_f32: f32, f16, bf16, q4_block with cols % 32 != 0) of every path
 *    that has one, directly (column chunks of KERN_GEMM_KC_F32 and of 7) and through cmf_matmul, against a double
 *    sum over cmf_weight_cols_f32's values: within 1e-5 of the sum of |terms|. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/kern.h"
#include "backend/cpu/ops.h"
#include "quant/dtype.h"
#include "kerntest.h"
#include "testutil.h"



typedef struct {
    int path;
    const cmf_kern *k;
} gpath;
static gpath gp[2];
static int n_gp;
static double worst_all[2]; /* per path: the largest |got - ref| / mag seen */
static double worst_f;      /* the same for the float-family GEMM (all paths) */
static long checked_f;
static long checked[2];     /* per path: outputs compared */

/* Counts outputs of got (n x ld, first rows columns) off ref by more than 1e-5 * mag, and columns past rows that
 * are no longer NaN; *worst = the largest |got - ref| / mag. */
static int compare(const float *got, const float *ref, const double *mag, int64_t n, int64_t rows, int64_t ld,
                   double *worst) {
    int bad = 0;
    for (int64_t t = 0; t < n; t++) {
        for (int64_t r = 0; r < rows; r++) {
            const double e = fabs((double)got[t * ld + r] - (double)ref[t * ld + r]), m = mag[t * ld + r];
            if (!(e <= 1e-5 * m)) bad++;
            if (m > 0 && e / m > *worst) *worst = e / m;
        }
        for (int64_t r = rows; r < ld; r++) bad += !isnan(got[t * ld + r]);
    }
    return bad;
}

static void check_case(cmf_pool *pool, int dtype, int64_t rows, int64_t cols, const int64_t *ns, int nn) {
    uint64_t nbytes;
    uint8_t *p = kt_payload(dtype, rows, cols, &nbytes);
    cmf_weight w;
    CHECK_MSG(p && kt_view(dtype, rows, cols, p, nbytes, &w), "%s %lldx%lld: no weight view", cmf_dtype_name(dtype),
              (long long)rows, (long long)cols);
    if (!p) return;
    void *pack = NULL;
    CHECK(posix_memalign(&pack, 64, KERN_GEMM_PACK_BYTES) == 0);
    float *col = NULL;
    if (dtype == CMF_DT_Q8_2F) { /* the column scales cmf_matmul folds into the activations (§2.3) */
        col = malloc((size_t)cols * sizeof(float));
        const uint8_t *cs = p + rows * cols + 2 * rows;
        for (int64_t c = 0; c < cols; c++) col[c] = cmf_f16_to_f32((uint16_t)(cs[2 * c] | cs[2 * c + 1] << 8));
    }
    for (int ni = 0; ni < nn; ni++) {
        const int64_t n = ns[ni], ld = rows + 5;
        float *x = malloc((size_t)(n * cols) * sizeof(float)), *bias = malloc((size_t)rows * sizeof(float));
        for (int64_t i = 0; i < n * cols; i++) x[i] = kt_frand() * (i % 17 == 0 ? 6.0f : 1.0f);
        for (int64_t r = 0; r < rows; r++) bias[r] = kt_frand();
        float *ref = malloc((size_t)(n * ld) * sizeof(float)), *got = malloc((size_t)(n * ld) * sizeof(float));
        double *mag = malloc((size_t)(n * ld) * sizeof(double));
        cmf_qact a;
        void *abuf = malloc(cmf_qact_bytes(n, cols));
        cmf_qact_init(&a, abuf, n, cols);
        /* 1. the kernels alone, plain activations */
        cmf_qact_quantize(&a, x, cols, cols, NULL, 1, 0, n);
        cmf_gemm_ref_i8(&w, &a, n, ref, ld, bias, mag);
        for (int g = 0; g < n_gp; g++) {
            const int64_t kcs[2] = {KERN_GEMM_KB, 3};
            for (int ki = 0; ki < 2; ki++) {
                for (int64_t i = 0; i < n * ld; i++) got[i] = NAN;
                for (int64_t r = 0; r < rows; r += KERN_GEMM_R) {
                    const int nr = rows - r < KERN_GEMM_R ? (int)(rows - r) : KERN_GEMM_R;
                    for (int64_t b0 = 0; b0 < a.nb; b0 += kcs[ki]) {
                        const int64_t kb = a.nb - b0 < kcs[ki] ? a.nb - b0 : kcs[ki];
                        gp[g].k->gemm_pack_i8(&w, r, nr, b0, kb, pack);
                        gp[g].k->gemm_i8(pack, &a, 0, n, got + r, ld, bias + r, b0 == 0);
                    }
                }
                double worst = 0;
                const int bad = compare(got, ref, mag, n, rows, ld, &worst);
                worst_all[g] = worst > worst_all[g] ? worst : worst_all[g];
                checked[g] += (long)(n * rows);
                CHECK_MSG(bad == 0, "%s %lldx%lld n=%lld %s kernels, chunks of %lld blocks: %d off (worst %.3g)",
                          cmf_dtype_name(dtype), (long long)rows, (long long)cols, (long long)n,
                          cmf_cpu_path_name(gp[g].path), (long long)kcs[ki], bad, worst);
            }
        }
        /* 2. cmf_matmul (threads, work split, q8_2f column scales) */
        if (col) {
            cmf_qact_quantize(&a, x, cols, cols, col, 1, 0, n);
            cmf_gemm_ref_i8(&w, &a, n, ref, ld, bias, mag);
        }
        for (int g = 0; g < n_gp; g++) {
            CHECK(cmf_cpu_set_path(gp[g].path) == CMF_OK);
            for (int64_t i = 0; i < n * ld; i++) got[i] = NAN;
            cmf_matmul(pool, got, ld, x, n, &w, bias);
            double worst = 0;
            const int bad = compare(got, ref, mag, n, rows, ld, &worst);
            worst_all[g] = worst > worst_all[g] ? worst : worst_all[g];
            checked[g] += (long)(n * rows);
            CHECK_MSG(bad == 0, "%s %lldx%lld n=%lld %s cmf_matmul: %d outputs off (worst %.3g)", cmf_dtype_name(dtype),
                      (long long)rows, (long long)cols, (long long)n, cmf_cpu_path_name(gp[g].path), bad, worst);
        }
        free(abuf);
        free(x);
        free(bias);
        free(ref);
        free(got);
        free(mag);
    }
    free(col);
    free(pack);
    free(p);
}

/* q8_row weights with scale 1 and integer activations whose block scale is 1 (each block holds +-127): every
 * product and sum is an integer below 2^24, so every path's GEMM equals the exact integer result. */
static void check_exact(cmf_pool *pool) {
    enum { ROWS = 37, COLS = 32 * 7, N = 9 };
    uint8_t *p = malloc(ROWS * COLS + 2 * ROWS);
    for (int i = 0; i < ROWS * COLS; i++) p[i] = (uint8_t)(int8_t)((int)(kt_rnd() % 255) - 127);
    for (int r = 0; r < ROWS; r++) {
        const uint16_t one = cmf_f32_to_f16(1.0f);
        memcpy(p + ROWS * COLS + 2 * r, &one, 2);
    }
    cmf_weight w;
    CHECK(kt_view(CMF_DT_Q8_ROW, ROWS, COLS, p, ROWS * COLS + 2 * ROWS, &w));
    float *x = malloc(N * COLS * sizeof(float)), got[N * ROWS];
    for (int i = 0; i < N * COLS; i++) x[i] = (float)((int)(kt_rnd() % 255) - 127);
    for (int t = 0; t < N; t++)
        for (int b = 0; b < COLS / 32; b++) x[t * COLS + 32 * b + (int)(kt_rnd() % 32)] = kt_rnd() & 1 ? 127.0f : -127.0f;
    for (int g = 0; g < n_gp; g++) {
        CHECK(cmf_cpu_set_path(gp[g].path) == CMF_OK);
        cmf_matmul(pool, got, ROWS, x, N, &w, NULL);
        int bad = 0;
        for (int t = 0; t < N; t++)
            for (int r = 0; r < ROWS; r++) {
                int64_t s = 0;
                for (int c = 0; c < COLS; c++) s += (int64_t)(int8_t)p[r * COLS + c] * (int64_t)x[t * COLS + c];
                bad += got[t * ROWS + r] != (float)s;
            }
        CHECK_MSG(bad == 0, "exact integer GEMM on %s: %d outputs differ", cmf_cpu_path_name(gp[g].path), bad);
    }
    free(x);
    free(p);
}

static void check_quantizer(void) {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    if (!cmf_cpu_path_supported(CMF_CPU_AVX512)) return;
    const int64_t colss[] = {32, 50, 96, 1000, 4128};
    for (size_t ci = 0; ci < sizeof colss / sizeof colss[0]; ci++) {
        const int64_t cols = colss[ci], n = 7;
        float *x = malloc((size_t)(n * cols) * sizeof(float)), *col = malloc((size_t)cols * sizeof(float));
        for (int64_t i = 0; i < n * cols; i++) {
            const uint32_t k = kt_rnd() % 16;
            x[i] = k == 0 ? 0.0f : k == 1 ? 1e30f : k == 2 ? (float)((int)(kt_rnd() % 255) - 127) * 0.5f : kt_frand() * 3.0f;
            if (kt_rnd() % 97 == 0) x[i] = NAN; /* a NaN makes its block's scale NaN on both */
        }
        for (int64_t c = 0; c < 32 && c < cols; c++) x[c] = 0.0f; /* an all-zero block */
        for (int64_t c = 0; c < cols; c++) col[c] = 0.5f + kt_frand() * kt_frand();
        for (int wc = 0; wc < 2; wc++) {
            cmf_qact a, b;
            void *ba = calloc(1, cmf_qact_bytes(n, cols)), *bb = calloc(1, cmf_qact_bytes(n, cols));
            cmf_qact_init(&a, ba, n, cols);
            cmf_qact_init(&b, bb, n, cols);
            cmf_qact_quantize(&a, x, cols, cols, wc ? col : NULL, 1, 0, n);
            cmf_qact_quantize_avx512(&b, x, cols, cols, wc ? col : NULL, 0, n);
            const size_t N = (size_t)(n * a.nb);
            const int same = !memcmp(a.q, b.q, N * 32) && !memcmp(a.d, b.d, N * 4) && !memcmp(a.s, b.s, N * 4) &&
                             !memcmp(a.dx, b.dx, N * 32) && !memcmp(a.cx, b.cx, N * 32);
            CHECK_MSG(same, "cmf_qact_quantize_avx512 differs from cmf_qact_quantize (cols %lld, col scales %d)",
                      (long long)cols, wc);
            free(ba);
            free(bb);
        }
        free(x);
        free(col);
    }
#endif
}

/* NaN activations reach the output: a token with one NaN value gives NaN in every output of every int8 product
 * path (decode n = 1 and batched n = 5, plain and repacked weights, every dtype of the int8 family), the other tokens
 * stay finite. (Before, the Q8_0 activation quantization skipped the NaN as a zero: a q8 model whose activations
 * overflowed printed finite garbage without an error.) */
static void check_nan(cmf_pool *pool) {
    const int dts[] = {CMF_DT_Q8_ROW, CMF_DT_Q8_2F, CMF_DT_Q4_BLOCK, CMF_DT_Q4_TILED, CMF_DT_Q4TP};
    const int64_t rows = 24, cols = 32 * 5, ns[2] = {1, 5};
    for (size_t d = 0; d < sizeof dts / sizeof dts[0]; d++) {
        uint64_t nbytes = 0;
        uint8_t *p = kt_payload(dts[d], rows, cols, &nbytes);
        cmf_weight w;
        CHECK_MSG(p && kt_view(dts[d], rows, cols, p, nbytes, &w), "%s: no weight view", cmf_dtype_name(dts[d]));
        if (!p) continue;
        for (int g = -1; g < n_gp; g++) {
            const int path = g < 0 ? CMF_CPU_SCALAR : gp[g].path;
            CHECK(cmf_cpu_set_path(path) == CMF_OK);
            for (int rp = 0; rp < 2; rp++) { /* stored weights, then the active path's repacked copy */
                if (rp) CHECK(cmf_cpu_repack_weight(&w) == CMF_OK);
                for (int ni = 0; ni < 2; ni++) {
                    const int64_t n = ns[ni];
                    float *x = malloc((size_t)(n * cols) * sizeof(float));
                    float *y = malloc((size_t)(n * rows) * sizeof(float));
                    for (int64_t i = 0; i < n * cols; i++) x[i] = kt_frand();
                    x[37] = NAN; /* token 0, block 1 */
                    cmf_matmul(pool, y, rows, x, n, &w, NULL);
                    int nan0 = 0, finite = 0;
                    for (int64_t r = 0; r < rows; r++) nan0 += isnan(y[r]) != 0;
                    for (int64_t i = rows; i < n * rows; i++) finite += isfinite(y[i]) != 0;
                    CHECK_MSG(nan0 == rows && finite == (n - 1) * rows,
                              "%s %s n=%lld repacked %d: %d of %lld outputs NaN for the NaN token, %d of %lld others "
                              "finite", cmf_dtype_name(dts[d]), cmf_cpu_path_name(path), (long long)n, rp, nan0,
                              (long long)rows, finite, (long long)((n - 1) * rows));
                    free(x);
                    free(y);
                }
                if (rp) cmf_cpu_repack_release(&w);
            }
        }
        free(p);
    }
}

/* Float weights: f32 / f16 / bf16 encoded here from random values, q4_block through kt_payload(). */
static uint8_t *float_payload(int dtype, int64_t rows, int64_t cols, uint64_t *nbytes) {
    if (dtype != CMF_DT_F32 && dtype != CMF_DT_F16 && dtype != CMF_DT_BF16) return kt_payload(dtype, rows, cols, nbytes);
    const size_t es = dtype == CMF_DT_F32 ? 4 : 2;
    *nbytes = (uint64_t)(rows * cols) * es;
    uint8_t *p = malloc(*nbytes);
    for (int64_t i = 0; i < rows * cols; i++) {
        const float v = kt_frand() * (i % 5 == 0 ? 3.0f : 1.0f);
        uint32_t u;
        memcpy(&u, &v, 4);
        const uint16_t h = dtype == CMF_DT_F16 ? cmf_f32_to_f16(v) : (uint16_t)(u >> 16);
        if (es == 4) memcpy(p + 4 * i, &v, 4);
        else memcpy(p + 2 * i, &h, 2);
    }
    return p;
}

static void check_float_case(cmf_pool *pool, const gpath *fp, int nfp, int dtype, int64_t rows, int64_t cols,
                             const int64_t *ns, int nn) {
    uint64_t nbytes;
    uint8_t *p = float_payload(dtype, rows, cols, &nbytes);
    cmf_weight w;
    CHECK_MSG(p && kt_view(dtype, rows, cols, p, nbytes, &w), "%s %lldx%lld: no weight view", cmf_dtype_name(dtype),
              (long long)rows, (long long)cols);
    if (!p) return;
    void *pack = NULL;
    CHECK(posix_memalign(&pack, 64, KERN_GEMM_PACK_BYTES) == 0);
    float *W = malloc((size_t)(rows * cols) * sizeof(float));
    for (int64_t r = 0; r < rows; r++) cmf_weight_row_f32(&w, r, W + r * cols);
    for (int ni = 0; ni < nn; ni++) {
        const int64_t n = ns[ni], ld = rows + 5;
        float *x = malloc((size_t)(n * cols) * sizeof(float)), *bias = malloc((size_t)rows * sizeof(float));
        for (int64_t i = 0; i < n * cols; i++) x[i] = kt_frand() * (i % 17 == 0 ? 6.0f : 1.0f);
        for (int64_t r = 0; r < rows; r++) bias[r] = kt_frand();
        float *ref = malloc((size_t)(n * ld) * sizeof(float)), *got = malloc((size_t)(n * ld) * sizeof(float));
        double *mag = malloc((size_t)(n * ld) * sizeof(double));
        for (int64_t t = 0; t < n; t++)
            for (int64_t r = 0; r < rows; r++) {
                double sum = bias[r], m = fabs(bias[r]);
                for (int64_t c = 0; c < cols; c++) {
                    const double term = (double)W[r * cols + c] * (double)x[t * cols + c];
                    sum += term;
                    m += fabs(term);
                }
                ref[t * ld + r] = (float)sum;
                mag[t * ld + r] = m;
            }
        for (int g = 0; g < nfp; g++) {
            const int64_t kcs[2] = {KERN_GEMM_KC_F32, 7};
            for (int ki = 0; ki < 2; ki++) {
                for (int64_t i = 0; i < n * ld; i++) got[i] = NAN;
                for (int64_t r = 0; r < rows; r += KERN_GEMM_R) {
                    const int nr = rows - r < KERN_GEMM_R ? (int)(rows - r) : KERN_GEMM_R;
                    for (int64_t c0 = 0; c0 < cols; c0 += kcs[ki]) {
                        const int64_t nc = cols - c0 < kcs[ki] ? cols - c0 : kcs[ki];
                        fp[g].k->gemm_pack_f32(&w, r, nr, c0, nc, pack);
                        fp[g].k->gemm_f32(pack, x + c0, cols, 0, n, got + r, ld, bias + r, c0 == 0);
                    }
                }
                double worst = 0;
                const int bad = compare(got, ref, mag, n, rows, ld, &worst);
                CHECK_MSG(bad == 0, "%s %lldx%lld n=%lld %s float kernels, chunks of %lld: %d outputs off (worst %.3g)",
                          cmf_dtype_name(dtype), (long long)rows, (long long)cols, (long long)n,
                          cmf_cpu_path_name(fp[g].path), (long long)kcs[ki], bad, worst);
                worst_f = worst > worst_f ? worst : worst_f;
            }
            CHECK(cmf_cpu_set_path(fp[g].path) == CMF_OK);
            for (int64_t i = 0; i < n * ld; i++) got[i] = NAN;
            cmf_matmul(pool, got, ld, x, n, &w, bias);
            double worst = 0;
            const int bad = compare(got, ref, mag, n, rows, ld, &worst);
            CHECK_MSG(bad == 0, "%s %lldx%lld n=%lld %s float cmf_matmul: %d outputs off (worst %.3g)",
                      cmf_dtype_name(dtype), (long long)rows, (long long)cols, (long long)n,
                      cmf_cpu_path_name(fp[g].path), bad, worst);
            worst_f = worst > worst_f ? worst : worst_f;
            checked_f += (long)(n * rows);
        }
        free(x);
        free(bias);
        free(ref);
        free(got);
        free(mag);
    }
    free(W);
    free(pack);
    free(p);
}

int main(void) {
    kt_seed(0x2545f4914f6cdd1dull);
    const int cand[2] = {CMF_CPU_AVX2, CMF_CPU_AVX512};
    const int saved = cmf_cpu_path();
    for (int i = 0; i < 2; i++) {
        if (!cmf_cpu_path_supported(cand[i]) || cmf_cpu_set_path(cand[i]) != CMF_OK) continue;
        const cmf_kern *k = cmf_kern_active();
        if (!k->gemm_pack_i8 || !k->gemm_i8) continue;
        gp[n_gp].path = cand[i];
        gp[n_gp++].k = k;
    }
    if (!n_gp) {
        fprintf(stderr, "test_gemm: skipped, no path of this CPU has an int8 GEMM\n");
        return 77;
    }
    cmf_pool *pool = NULL;
    CHECK(cmf_pool_new(2, &pool) == CMF_OK);
    const int dts[] = {CMF_DT_Q8_ROW, CMF_DT_Q8_2F, CMF_DT_Q4_BLOCK, CMF_DT_Q4_TILED, CMF_DT_Q4TP, CMF_DT_Q2TP};
    const int64_t small_n[] = {3, 5, 17, 33}, big_n[] = {512};
    for (size_t d = 0; d < sizeof dts / sizeof dts[0]; d++) {
        const int dt = dts[d], q8 = dt == CMF_DT_Q8_ROW || dt == CMF_DT_Q8_2F;
        check_case(pool, dt, 45, 32 * 3, small_n, 4);
        check_case(pool, dt, 77, 32 * 9, small_n, 4);
        check_case(pool, dt, 13, 32 * 129, small_n, 2); /* several column chunks of KERN_GEMM_KB */
        check_case(pool, dt, 45, 32 * 5, big_n, 1);
        if (q8) check_case(pool, dt, 40, 50, small_n, 4);
        if (q8) check_case(pool, dt, 33, 1000, small_n + 2, 1);
    }
    check_exact(pool);
    check_quantizer();
    check_nan(pool);
    gpath fp[2];
    int nfp = 0;
    for (int g = 0; g < n_gp; g++)
        if (gp[g].k->gemm_pack_f32 && gp[g].k->gemm_f32) fp[nfp++] = gp[g];
    if (nfp) {
        const int fdts[] = {CMF_DT_F32, CMF_DT_F16, CMF_DT_BF16};
        for (size_t d = 0; d < sizeof fdts / sizeof fdts[0]; d++) {
            check_float_case(pool, fp, nfp, fdts[d], 45, 50, small_n, 4);
            check_float_case(pool, fp, nfp, fdts[d], 77, 32 * 9 + 5, small_n, 4);
            check_float_case(pool, fp, nfp, fdts[d], 13, 1100, small_n, 2); /* several column chunks */
            check_float_case(pool, fp, nfp, fdts[d], 40, 160, big_n, 1);
        }
        check_float_case(pool, fp, nfp, CMF_DT_Q4_BLOCK, 33, 50, small_n, 4); /* q4 with cols % 32 != 0 */
        printf("float GEMM: %ld outputs, worst |gemm - ref| / sum|terms| = %.3g (bound 1e-5)\n", checked_f, worst_f);
    }
    for (int g = 0; g < n_gp; g++)
        printf("%s: %ld outputs, worst |gemm - ref| / sum|terms| = %.3g (bound 1e-5)\n", cmf_cpu_path_name(gp[g].path),
               checked[g], worst_all[g]);
    cmf_cpu_set_path(saved);
    cmf_pool_free(pool);
    CMF_TEST_END();
}
