/* Tests of the CPU matmul kernels (src/backend/cpu): every dtype x every path this CPU runs x shapes (rows not a
 * multiple of the thread count, cols 32, 64, 96, 4096+32, and cols 50 for the dtypes that allow it; n = 1, 2, 3,
 * 5, 17), against
 *  - cmf_dequant (src/quant, the reference reader's arithmetic): the row decoder gives the same floats;
 *  - the scalar path: every SIMD path within 2e-6 of sum|w*x|;
 *  - the f32 product on dequantized weights: within the int8-activation error bound sum_b (d_b/2) sum_c |w_c|
 *    (d_b: the block's scale of the one-level Q8_0 activation quantization cmf_matmul uses)
 *    (plus float slop) for the quantized dtypes, 1e-5 sum|w*x| for f32/f16/bf16;
 *  - the two-level activation quantizer (kept for tests): x = d0*q0 + d1*q1 within d1/2 per value;
 *  - exact integer results (bit-for-bit on every path) when activations and weight scales are integers;
 *  - the spec's q4tp/q2tp ladder vectors (CMF_FORMAT.md §2.6, §2.7);
 * plus the thread pool under many tiny operations, the NULL-pool fallback and weight-view errors. */
#include <math.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/kern.h"
#include "backend/cpu/ops.h"
#include "quant/dtype.h"
#include "kerntest.h"
#include "testutil.h"



static int n_paths;
static int paths[4];

/* One dtype x shape: every path and n against the scalar path and the f32 product. */
static void check_case(cmf_pool *pool, int dtype, int64_t rows, int64_t cols) {
    uint64_t nb;
    uint8_t *p = kt_payload(dtype, rows, cols, &nb);
    CHECK_MSG(p != NULL, "%s %lldx%lld: no payload", cmf_dtype_name(dtype), (long long)rows, (long long)cols);
    if (!p) return;
    cmf_tensor t = kt_tensor(dtype, rows, cols, p, nb);
    cmf_weight w;
    CHECK(cmf_weight_view(&t, &w) == CMF_OK);
    /* the row decoder against cmf_dequant (when src/quant decodes this dtype) */
    float *W = malloc((size_t)(rows * cols) * sizeof(float)), *row = malloc((size_t)cols * sizeof(float));
    uint32_t shape[2] = {(uint32_t)rows, (uint32_t)cols};
    if (cmf_dequant(dtype, 2, shape, p, nb, W) == CMF_OK) {
        int bad = 0;
        for (int64_t r = 0; r < rows; r++) {
            cmf_weight_row_f32(&w, r, row);
            bad += memcmp(row, W + r * cols, (size_t)cols * sizeof(float)) != 0;
        }
        CHECK_MSG(bad == 0, "%s %lldx%lld: %d rows differ from cmf_dequant", cmf_dtype_name(dtype),
                  (long long)rows, (long long)cols, bad);
    } else {
        for (int64_t r = 0; r < rows; r++) cmf_weight_row_f32(&w, r, W + r * cols);
    }
    const int ns[] = {1, 2, 3, 5, 17}; /* 1, 2: the fused decode kernels; more: the tiled path */
    for (size_t ni = 0; ni < sizeof ns / sizeof ns[0]; ni++) {
        const int64_t n = ns[ni], ld = rows + 3;
        float *x = malloc((size_t)(n * cols) * sizeof(float)), *bias = malloc((size_t)rows * sizeof(float));
        for (int64_t i = 0; i < n * cols; i++) x[i] = kt_frand() * (i % 13 == 0 ? 8.0f : 1.0f);
        for (int64_t r = 0; r < rows; r++) bias[r] = kt_frand();
        float *ref = malloc((size_t)(n * ld) * sizeof(float)), *sc = malloc((size_t)(n * ld) * sizeof(float));
        float *got = malloc((size_t)(n * ld) * sizeof(float));
        cmf_matmul_ref_f32(ref, ld, x, n, &w, bias);
        /* the int8-activation bound of each output, from the same quantizer the kernels use */
        const int i8 = dtype != CMF_DT_F32 && dtype != CMF_DT_F16 && dtype != CMF_DT_BF16 &&
                       !((dtype == CMF_DT_Q4_BLOCK || dtype == CMF_DT_Q4_TILED) && cols % 32);
        float *col = NULL;
        if (dtype == CMF_DT_Q8_2F) {
            col = malloc((size_t)cols * sizeof(float));
            for (int64_t c = 0; c < cols; c++) col[c] = cmf_f16_to_f32((uint16_t)(p[rows * cols + 2 * rows + 2 * c] | (p[rows * cols + 2 * rows + 2 * c + 1] << 8)));
        }
        cmf_qact a;
        void *abuf = malloc(cmf_qact_bytes(n, cols)); /* the one-level quantization cmf_matmul uses */
        cmf_qact_init(&a, abuf, n, cols);
        cmf_qact_quantize(&a, x, cols, cols, col, 1, 0, n);
        cmf_status st = cmf_cpu_set_path(CMF_CPU_SCALAR);
        CHECK(st == CMF_OK);
        cmf_matmul(pool, sc, ld, x, n, &w, bias);
        for (int pi = 0; pi < n_paths; pi++) {
            cmf_cpu_set_path(paths[pi]);
            for (int64_t i = 0; i < n * ld; i++) got[i] = NAN;
            cmf_matmul(pool, got, ld, x, n, &w, bias);
            int bad_sc = 0, bad_ref = 0;
            double worst = 0;
            for (int64_t tk = 0; tk < n; tk++)
                for (int64_t r = 0; r < rows; r++) {
                    double mag = fabs(bias[r]), qerr = 0;
                    for (int64_t c = 0; c < cols; c++) {
                        const double wv = W[r * cols + c];
                        mag += fabs(wv * x[tk * cols + c]);
                        if (i8) {
                            const double cs = col ? col[c] : 1.0;
                            qerr += fabs(wv / cs) * (a.d[tk * a.nb + c / 32] * 0.5 + 1e-7 * fabs(x[tk * cols + c] * cs));
                        }
                    }
                    const double g = got[tk * ld + r], s = sc[tk * ld + r], f = ref[tk * ld + r];
                    if (!(fabs(g - s) <= 2e-6 * mag + 1e-30)) bad_sc++;
                    const double tol = qerr * 1.0001 + 1e-5 * mag;
                    if (!(fabs(g - f) <= tol)) bad_ref++;
                    if (tol > 0 && fabs(g - f) / tol > worst) worst = fabs(g - f) / tol;
                }
            CHECK_MSG(bad_sc == 0 && bad_ref == 0,
                      "%s %lldx%lld n=%lld path %s: %d outputs off the scalar path, %d off the f32 bound (worst %.3g "
                      "of the bound)",
                      cmf_dtype_name(dtype), (long long)rows, (long long)cols, (long long)n,
                      cmf_cpu_path_name(paths[pi]), bad_sc, bad_ref, worst);
            /* the view of a row range equals those rows of the whole product */
            if (rows > 4 && pi == n_paths - 1) {
                cmf_weight sub = cmf_weight_rows(&w, 2, rows - 3);
                float *o2 = malloc((size_t)(n * rows) * sizeof(float));
                cmf_matmul(pool, o2, rows, x, n, &sub, bias + 2);
                int bad = 0;
                for (int64_t tk = 0; tk < n; tk++)
                    for (int64_t r = 0; r < rows - 3; r++) bad += o2[tk * rows + r] != got[tk * ld + r + 2];
                CHECK_MSG(bad == 0, "%s row-range view: %d outputs differ", cmf_dtype_name(dtype), bad);
                free(o2);
            }
        }
        free(abuf);
        free(col);
        free(x);
        free(bias);
        free(ref);
        free(sc);
        free(got);
    }
    free(W);
    free(row);
    free(p);
}

/* cmf_qact_quantize with levels = 2: slot 2t+1 quantizes what slot 2t left over, so every value is within half
 * the second scale of d0*q0 + d1*q1; with levels = 1 within half of d0. Odd cols (zero padding), two tokens. */
static void check_qact_levels(void) {
    enum { N = 2, COLS = 75 };
    float x[N * COLS];
    for (int i = 0; i < N * COLS; i++) x[i] = kt_frand() * (i % 11 == 0 ? 30.0f : 1.0f);
    for (int levels = 1; levels <= 2; levels++) {
        cmf_qact a;
        void *buf = malloc(cmf_qact_bytes(N * levels, COLS));
        cmf_qact_init(&a, buf, N * levels, COLS);
        cmf_qact_quantize(&a, x, COLS, COLS, NULL, levels, 0, N);
        int bad = 0;
        for (int t = 0; t < N; t++)
            for (int c = 0; c < 32 * a.nb; c++) {
                double y = 0;
                for (int l = 0; l < levels; l++) {
                    const int64_t v = (int64_t)t * levels + l;
                    y += (double)a.d[v * a.nb + c / 32] * a.q[(v * a.nb + c / 32) * 32 + c % 32];
                }
                const double xv = c < COLS ? x[t * COLS + c] : 0.0;
                const double dl = a.d[((int64_t)t * levels + levels - 1) * a.nb + c / 32];
                bad += !(fabs(y - xv) <= 0.5 * dl * 1.0001 + 1e-6 * fabs(xv)) || (c >= COLS && y != 0);
            }
        CHECK_MSG(bad == 0, "activation quantizer, %d level(s): %d values off by more than half the last scale",
                  levels, bad);
        free(buf);
    }
}

/* Integer activations (each block holds a 127, so d = 1) and unit weight scales: every path must give the exact
 * integer sum, bit for bit. q8_row rows hold a 127 (scale f16(127/127) = 1); q4_block groups hold a 7 (scale 1);
 * q4tp/q2tp with lo = step = 0 have every rung 1 (q2tp values then c - 1.5). */
static void check_exact(cmf_pool *pool, int dtype) {
    const int64_t rows = 11, cols = 4096 + 32, n = 5;
    uint64_t nb;
    uint32_t shape[2] = {(uint32_t)rows, (uint32_t)cols};
    CHECK(cmf_dtype_nbytes(dtype, 2, shape, &nb) == 1);
    uint8_t *p = calloc(nb, 1);
    float *wv = malloc((size_t)(rows * cols) * sizeof(float));
    if (dtype == CMF_DT_Q8_ROW || dtype == CMF_DT_Q4_BLOCK) {
        const int top = dtype == CMF_DT_Q8_ROW ? 127 : 7;
        for (int64_t i = 0; i < rows * cols; i++)
            wv[i] = (i % 32 == 5) ? (float)top : (float)((int)(kt_rnd() % (2 * top + 1)) - top);
        CHECK(cmf_quantize(dtype, (uint64_t)rows, (uint64_t)cols, wv, p) == CMF_OK);
    } else {
        for (uint64_t i = 0; i < (uint64_t)(rows * cols / (dtype == CMF_DT_Q4TP ? 2 : 4)); i++) p[i] = (uint8_t)kt_rnd();
        /* params plane stays zero: lo = step = 0; codes random */
        const int64_t gpr = cols / 32, stride = (gpr * 5 + 7) / 8;
        uint8_t *codes = p + rows * gpr * (dtype == CMF_DT_Q4TP ? 16 : 8) + 4 * rows;
        for (int64_t i = 0; i < rows * stride; i++) codes[i] = (uint8_t)kt_rnd();
    }
    cmf_tensor t = kt_tensor(dtype, rows, cols, p, nb);
    cmf_weight w;
    CHECK(cmf_weight_view(&t, &w) == CMF_OK);
    for (int64_t r = 0; r < rows; r++) cmf_weight_row_f32(&w, r, wv + r * cols);
    float *x = malloc((size_t)(n * cols) * sizeof(float)), *out = malloc((size_t)(n * rows) * sizeof(float));
    for (int64_t i = 0; i < n * cols; i++) x[i] = (i % 32 == 7) ? 127.0f : (float)((int)(kt_rnd() % 255) - 127);
    for (int pi = -1; pi < n_paths; pi++) {
        cmf_cpu_set_path(pi < 0 ? CMF_CPU_SCALAR : paths[pi]);
        cmf_matmul(pool, out, rows, x, n, &w, NULL);
        int bad = 0;
        for (int64_t tk = 0; tk < n; tk++)
            for (int64_t r = 0; r < rows; r++) {
                double e = 0; /* every term is a multiple of 0.5 below 2^22: exact in double and f32 */
                for (int64_t c = 0; c < cols; c++) e += (double)wv[r * cols + c] * x[tk * cols + c];
                bad += (double)out[tk * rows + r] != e;
            }
        CHECK_MSG(bad == 0, "exact %s path %s: %d outputs are not the exact integer sum", cmf_dtype_name(dtype),
                  cmf_cpu_path_name(pi < 0 ? CMF_CPU_SCALAR : paths[pi]), bad);
    }
    free(p);
    free(wv);
    free(x);
    free(out);
}

/* CMF_FORMAT.md §2.6/§2.7 vectors: lo = -3 (0xC200), step = 0.25 (0x3400); q4tp code 7 -> 0.420448;
 * q2tp chunk bytes 0xE4 on rung 7 -> [-1.5, -0.5, 0.5, 1.5] * 0.353553. */
static void check_ladder_vectors(void) {
    for (int q2 = 0; q2 < 2; q2++) {
        const int dtype = q2 ? CMF_DT_Q2TP : CMF_DT_Q4TP;
        uint8_t p[8 * 2 + 16 * 2 + 4 + 1]; /* one row of 32: plane + params + 1 code byte */
        memset(p, 0, sizeof p);
        const int plane = q2 ? 8 : 16;
        for (int k = 0; k < plane; k++) p[k] = q2 ? 0xE4 : 0xF0; /* q4: low nibble 0 (-8), high 15 (+7) */
        p[plane] = 0x00;
        p[plane + 1] = 0xC2;
        p[plane + 2] = 0x00;
        p[plane + 3] = 0x34;
        p[plane + 4] = 7;
        cmf_tensor t = kt_tensor(dtype, 1, 32, p, (uint64_t)plane + 5);
        cmf_weight w;
        CHECK(cmf_weight_view(&t, &w) == CMF_OK);
        float row[32];
        cmf_weight_row_f32(&w, 0, row);
        if (q2) {
            const float lv[4] = {-1.5f, -0.5f, 0.5f, 1.5f};
            for (int k = 0; k < 32; k++) CHECK_MSG(fabsf(row[k] - lv[k % 4] * 0.353553f) < 2e-6f, "q2tp %d: %g", k, row[k]);
        } else {
            for (int k = 0; k < 32; k++)
                CHECK_MSG(fabsf(row[k] - (k & 1 ? 7.0f : -8.0f) * 0.420448f) < 4e-6f, "q4tp %d: %g", k, row[k]);
        }
    }
}

typedef struct {
    atomic_int hits[64];
    atomic_long total;
} count_task;

static void count_fn(void *ctx, int ith, int nth) {
    count_task *c = ctx;
    atomic_fetch_add(&c->hits[ith], 1);
    atomic_fetch_add(&c->total, nth);
}

static void check_pool(void) {
    cmf_pool *pool = NULL;
    CHECK(cmf_pool_new(4, &pool) == CMF_OK);
    count_task c;
    for (int i = 0; i < 64; i++) atomic_init(&c.hits[i], 0);
    atomic_init(&c.total, 0);
    /* CMF_TEST_POOL_OPS: fewer rounds under an emulator (scripts/cross_neon.sh: qemu spent ~55 s of its ~60 s here) */
    const char *e = getenv("CMF_TEST_POOL_OPS");
    const int ops = e && atoi(e) > 0 ? atoi(e) : 20000;
    for (int i = 0; i < ops; i++) cmf_pool_run(pool, count_fn, &c);
    for (int i = 0; i < 4; i++) CHECK_MSG(atomic_load(&c.hits[i]) == ops, "thread %d ran %d of %d", i, atomic_load(&c.hits[i]), ops);
    CHECK(atomic_load(&c.total) == 4L * 4 * ops);
    /* many tiny matmuls in a row, results checked each time */
    uint64_t nb;
    uint8_t *p = kt_payload(CMF_DT_Q8_ROW, 3, 32, &nb);
    cmf_tensor t = kt_tensor(CMF_DT_Q8_ROW, 3, 32, p, nb);
    cmf_weight w;
    CHECK(cmf_weight_view(&t, &w) == CMF_OK);
    float x[32], o[3], first[3];
    for (int i = 0; i < 32; i++) x[i] = kt_frand();
    cmf_matmul(pool, first, 3, x, 1, &w, NULL);
    int bad = 0;
    const int mm = ops / 4;
    for (int i = 0; i < mm; i++) {
        o[0] = o[1] = o[2] = NAN;
        cmf_matmul(pool, o, 3, x, 1, &w, NULL);
        bad += memcmp(o, first, sizeof o) != 0;
    }
    CHECK_MSG(bad == 0, "%d of %d tiny matmuls differ", bad, mm);
    /* the NULL-pool fallback computes the same product */
    float ref[3];
    cmf_matmul(NULL, o, 3, x, 1, &w, NULL);
    cmf_matmul_ref_f32(ref, 3, x, 1, &w, NULL);
    CHECK(memcmp(o, ref, sizeof o) == 0);
    free(p);
    cmf_pool_free(pool);
}

static void check_errors(void) {
    uint8_t buf[64] = {0};
    cmf_tensor t = kt_tensor(CMF_DT_Q4TP, 1, 40, buf, sizeof buf);
    cmf_weight w;
    CHECK(cmf_weight_view(&t, &w) == CMF_E_FORMAT);
    CHECK(strstr(cmf_last_error(), "test.weight") != NULL);
    t = kt_tensor(CMF_DT_VBIT, 1, 32, buf, sizeof buf);
    CHECK(cmf_weight_view(&t, &w) == CMF_E_UNSUPPORTED);
    t = kt_tensor(CMF_DT_F32, 2, 8, buf, sizeof buf);
    t.ndim = 1;
    CHECK(cmf_weight_view(&t, &w) == CMF_E_FORMAT);
    t = kt_tensor(CMF_DT_F32, 2, 7, buf, sizeof buf); /* 56 bytes expected, 64 given */
    CHECK(cmf_weight_view(&t, &w) == CMF_E_FORMAT);
    CHECK(strstr(cmf_last_error(), "expected 56") != NULL);
    CHECK(cmf_cpu_set_path(99) == CMF_E_UNSUPPORTED);
}

int main(void) {
    const char *feat = cmf_cpu_features_str();
    printf("cpu: %s\n", feat);
    CHECK(strstr(feat, cmf_cpu_path_name(cmf_cpu_path())) == feat);
    for (int p = CMF_CPU_NEON; p <= CMF_CPU_AVX512; p++)
        if (cmf_cpu_path_supported(p)) paths[n_paths++] = p;
    paths[n_paths++] = CMF_CPU_SCALAR;
    const int best = cmf_cpu_path();
    cmf_pool *pool = NULL;
    CHECK(cmf_pool_new(3, &pool) == CMF_OK);
    const int dts[] = {CMF_DT_F32,      CMF_DT_F16,      CMF_DT_BF16, CMF_DT_Q8_ROW, CMF_DT_Q8_2F,
                       CMF_DT_Q4_BLOCK, CMF_DT_Q4_TILED, CMF_DT_Q4TP, CMF_DT_Q2TP};
    const int64_t shapes[][2] = {{5, 32}, {13, 64}, {7, 4096 + 32}, {37, 96}, {6, 50}};
    for (size_t d = 0; d < sizeof dts / sizeof dts[0]; d++)
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
            if (shapes[s][1] % 32 && (dts[d] == CMF_DT_Q4TP || dts[d] == CMF_DT_Q2TP)) continue;
            check_case(pool, dts[d], shapes[s][0], shapes[s][1]);
        }
    const int ex[] = {CMF_DT_Q8_ROW, CMF_DT_Q4_BLOCK, CMF_DT_Q4TP, CMF_DT_Q2TP};
    for (int i = 0; i < 4; i++) check_exact(pool, ex[i]);
    cmf_pool_free(pool);
    CHECK(cmf_cpu_set_path(best) == CMF_OK);
    check_ladder_vectors();
    check_qact_levels();
    check_pool();
    check_errors();
    CMF_TEST_END();
}
