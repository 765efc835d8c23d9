/* Products of one input run as one fan-out (cmf_matmul_group, matmul.c) and the batch invariance of the repacked
 * kernels (kern.h: rp_gemv and rp_gemm sum in one order), on every path of this CPU with repacked kernels (scalar
 * always; AVX2 and AVX-512 VNNI when present), for q4_block, q4tp and q8_row (fused) and q8_2f, f16 (not fusable:
 * the one-by-one fallback), at rows that are not multiples of the 16-row group, with biases, with one column chunk
 * (cols 256, with 1040 / 1048 rows: runs of several panels per work item) and with several (cols 1600 = 50 blocks >
 * KERN_GEMM_KB), n = 1, 2 (decode kernel), 3, 7, 20 (GEMM):
 *  - q/k/v-like groups of three products of one input: every output bit equal to three cmf_matmul calls;
 *  - gate/up + GLU (SiLU and GELU-tanh): bits equal to two cmf_matmul calls, then cmf_silu / cmf_gelu_tanh and the
 *    product; the same with fusion off (cmf_cpu_set_fuse(0));
 *  - batch invariance: token t's row of cmf_matmul over n tokens has the bits of cmf_matmul over token t alone, for
 *    the repacked dtypes (q4_block, q4tp, q8_row, q8_2f);
 *  - the vector SiLU of the path (kern_silu) against the expf form. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/kern.h"
#include "backend/cpu/ops.h"
#include "kerntest.h"
#include "testutil.h"

typedef struct {
    uint8_t *p;
    cmf_weight w;
} mat;

static int mat_new(mat *m, int dtype, int64_t rows, int64_t cols) {
    uint64_t nbytes;
    m->p = kt_payload(dtype, rows, cols, &nbytes);
    if (!m->p || !kt_view(dtype, rows, cols, m->p, nbytes, &m->w)) return 0;
    return cmf_cpu_repack_weight(&m->w) == CMF_OK;
}

static void mat_free(mat *m) {
    cmf_cpu_repack_release(&m->w);
    free(m->p);
}

static float *frand_vec(int64_t n, float scale) {
    float *v = malloc((size_t)n * sizeof(float));
    for (int64_t i = 0; i < n; i++) v[i] = kt_frand() * scale * (i % 11 == 0 ? 4.0f : 1.0f);
    return v;
}

static int repacked(int dtype) {
    return dtype == CMF_DT_Q4_BLOCK || dtype == CMF_DT_Q4TP || dtype == CMF_DT_Q8_ROW || dtype == CMF_DT_Q8_2F;
}

static void check_case(cmf_pool *pool, int path, int dtype, int64_t cols) {
    const char *pn = cmf_cpu_path_name(path), *dn = cmf_dtype_name(dtype);
    /* q, k, v; gate/up. At cols 256, q and gate/up of 33 panels of 32 rows (the last one partial): the GEMM of a few
     * tokens gives each thread runs of 3 consecutive panels (matmul.c rp_ppi, 2 threads), with a partial run */
    const int64_t rows[3] = {cols == 256 ? 1040 : 96, 40, 24}, F = cols == 256 ? 1048 : 72;
    mat m[5];
    int ok = 1;
    for (int i = 0; i < 5; i++) ok &= mat_new(&m[i], dtype, i < 3 ? rows[i] : F, cols);
    CHECK_MSG(ok, "%s %s: weights: %s", pn, dn, cmf_last_error());
    if (!ok) return;
    if (repacked(dtype)) CHECK_MSG(m[0].w.rp != NULL, "%s %s: no repacked copy", pn, dn);
    const int64_t ns[] = {1, 2, 3, 7, 20};
    for (size_t ni = 0; ni < sizeof ns / sizeof ns[0]; ni++) {
        const int64_t n = ns[ni];
        float *x = frand_vec(n * cols, 1.0f), *bias[3];
        float *got[3], *ref[3];
        for (int i = 0; i < 3; i++) {
            bias[i] = frand_vec(rows[i], 0.5f);
            got[i] = calloc((size_t)(n * rows[i]), sizeof(float));
            ref[i] = calloc((size_t)(n * rows[i]), sizeof(float));
        }
        /* q/k/v: one group vs three products (the group first: the pool's shared buffer then holds no quantized
         * activations of x from an earlier call) */
        cmf_mm mm[3];
        for (int i = 0; i < 3; i++) mm[i] = (cmf_mm){.out = got[i], .ld_out = rows[i], .w = &m[i].w, .bias = bias[i]};
        cmf_matmul_group(pool, x, n, mm, 3, 0);
        for (int i = 0; i < 3; i++) cmf_matmul(pool, ref[i], rows[i], x, n, &m[i].w, bias[i]);
        for (int i = 0; i < 3; i++)
            CHECK_MSG(!memcmp(got[i], ref[i], (size_t)(n * rows[i]) * sizeof(float)),
                      "%s %s cols %lld n %lld: grouped product %d differs from cmf_matmul", pn, dn, (long long)cols,
                      (long long)n, i);
        /* gate/up + GLU, fused and with fusion off */
        for (int glu = 1; glu <= 2; glu++) {
            float *g = malloc((size_t)(n * F) * sizeof(float)), *u = malloc((size_t)(n * F) * sizeof(float));
            float *rg = malloc((size_t)(n * F) * sizeof(float)), *ru = malloc((size_t)(n * F) * sizeof(float));
            for (int fuse = 1; fuse >= 0; fuse--) { /* fused first, before any product of x ran (see above) */
                cmf_cpu_set_fuse(fuse);
                cmf_mm gu[2] = {{.out = g, .ld_out = F, .w = &m[3].w, .bias = NULL},
                                {.out = u, .ld_out = F, .w = &m[4].w, .bias = NULL}};
                cmf_matmul_group(pool, x, n, gu, 2, glu);
                if (fuse) {
                    cmf_matmul(pool, rg, F, x, n, &m[3].w, NULL);
                    cmf_matmul(pool, ru, F, x, n, &m[4].w, NULL);
                    if (glu == 2) cmf_gelu_tanh(rg, n * F);
                    else cmf_silu(rg, n * F);
                    for (int64_t i = 0; i < n * F; i++) rg[i] *= ru[i];
                }
                CHECK_MSG(!memcmp(g, rg, (size_t)(n * F) * sizeof(float)) &&
                              !memcmp(u, ru, (size_t)(n * F) * sizeof(float)),
                          "%s %s cols %lld n %lld glu %d fuse %d: differs from the products and the GLU one by one", pn,
                          dn, (long long)cols, (long long)n, glu, fuse);
            }
            cmf_cpu_set_fuse(1);
            free(g), free(u), free(rg), free(ru);
        }
        /* batch invariance: each token alone gives the bits of its row in the batch */
        if (repacked(dtype) && n > 1) {
            float *one = malloc((size_t)rows[0] * sizeof(float));
            int bad = 0;
            for (int64_t t = 0; t < n; t++) {
                cmf_matmul(pool, one, rows[0], x + t * cols, 1, &m[0].w, bias[0]);
                bad += memcmp(one, ref[0] + t * rows[0], (size_t)rows[0] * sizeof(float)) != 0;
            }
            CHECK_MSG(bad == 0, "%s %s cols %lld n %lld: %d token(s) differ alone and in the batch", pn, dn,
                      (long long)cols, (long long)n, bad);
            free(one);
        }
        for (int i = 0; i < 3; i++) free(bias[i]), free(got[i]), free(ref[i]);
        free(x);
    }
    for (int i = 0; i < 5; i++) mat_free(&m[i]);
}

/* The path's vector SiLU (kern.h kern_silu) against the expf form: within 1e-6 relative (1e-30 absolute: below
 * x = -88 the clamped exp gives ~-6e-37 for -0), over -100..100 and random values, at a length with a tail; a split
 * call gives the same bits as one call. */
static void check_silu(int path, const cmf_kern *k) {
    if (!k->silu) return;
    enum { N = 1037 };
    float x[N], y[N], z[N];
    for (int i = 0; i < N; i++) x[i] = i < 400 ? -100.0f + 0.5f * (float)i : kt_frand() * (i % 5 ? 8.0f : 30.0f);
    memcpy(y, x, sizeof x);
    memcpy(z, x, sizeof x);
    k->silu(y, N);
    k->silu(z, 19);
    k->silu(z + 19, N - 19);
    int bad = 0;
    for (int i = 0; i < N; i++) {
        const float ref = x[i] / (1.0f + expf(-x[i]));
        bad += !(fabsf(y[i] - ref) <= 1e-6f * fabsf(ref) + 1e-30f);
    }
    CHECK_MSG(bad == 0, "%s silu: %d of %d values off the expf form", cmf_cpu_path_name(path), bad, N);
    CHECK_MSG(!memcmp(y, z, sizeof y), "%s silu: a split call gives other bits", cmf_cpu_path_name(path));
}

int main(void) {
    kt_seed(0xf05e1234);
    cmf_pool *pool = NULL;
    CHECK(cmf_pool_new(2, &pool) == CMF_OK);
    if (!pool) CMF_TEST_END();
    const int start = cmf_cpu_path();
    const int paths[] = {CMF_CPU_SCALAR, CMF_CPU_AVX2, CMF_CPU_AVX512};
    const int dts[] = {CMF_DT_Q4_BLOCK, CMF_DT_Q4TP, CMF_DT_Q8_ROW, CMF_DT_Q8_2F, CMF_DT_F16};
    const int64_t cols[] = {256, 1600};
    int tested = 0;
    for (size_t pi = 0; pi < sizeof paths / sizeof paths[0]; pi++) {
        if (!cmf_cpu_path_supported(paths[pi])) continue;
        CHECK(cmf_cpu_set_path(paths[pi]) == CMF_OK);
        const cmf_kern *k = cmf_kern_active();
        check_silu(paths[pi], k);
        if (!k->rp_gemv || !k->rp_gemm) continue;
        for (size_t d = 0; d < sizeof dts / sizeof dts[0]; d++)
            for (size_t c = 0; c < sizeof cols / sizeof cols[0]; c++) check_case(pool, paths[pi], dts[d], cols[c]);
        fprintf(stderr, "%s: grouped products and batch invariance checked\n", cmf_cpu_path_name(paths[pi]));
        tested++;
    }
    CHECK(tested > 0);
    CHECK(cmf_cpu_set_path(start) == CMF_OK);
    CHECK(cmf_cpu_repack_bytes() == 0);
    cmf_pool_free(pool);
    CMF_TEST_END();
}
