/* cmf_matmul_rows (matmul.c: the product with each token's output row in a buffer of its own, what the cpu backend's
 * head uses to write every session's logits in place) gives the bits of cmf_matmul, on every path of this CPU with
 * repacked kernels (scalar always; AVX2 and AVX-512 VNNI when present):
 *  - q4_block, q4tp, q8_row (repacked): cmf_matmul_rows_ok is 1 for n > 2 tokens, 0 for n = 1, 2; every output bit
 *    of cmf_matmul_rows equals cmf_matmul's over the same n tokens and cmf_matmul's over each token alone, at rows that
 *    are not a multiple of the 32-row panel (1040 + 9), one column chunk (cols 256) and several (cols 1600), n = 3, 7,
 *    16, 40, 80 (with n x cols >= 16384 the activations are quantized inside the product's fan-out);
 *  - rows of other buffers are never written (a guard after each row stays intact);
 *  - q8_2f and f16 (no repacked GEMM for them here): cmf_matmul_rows_ok is 0 and cmf_matmul_rows still gives
 *    cmf_matmul's bits of each token alone. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/kern.h"
#include "backend/cpu/ops.h"
#include "kerntest.h"
#include "testutil.h"

enum { GUARD = 8 };

static float *frand_vec(int64_t n) {
    float *v = malloc((size_t)n * sizeof(float));
    for (int64_t i = 0; v && i < n; i++) v[i] = kt_frand() * (i % 11 == 0 ? 4.0f : 1.0f);
    return v;
}

static void check_case(cmf_pool *pool, int path, int dtype, int64_t rows, int64_t cols, int64_t n) {
    const char *pn = cmf_cpu_path_name(path), *dn = cmf_dtype_name(dtype);
    uint64_t nbytes;
    uint8_t *payload = kt_payload(dtype, rows, cols, &nbytes);
    cmf_weight w;
    int ok = payload && kt_view(dtype, rows, cols, payload, nbytes, &w) && cmf_cpu_repack_weight(&w) == CMF_OK;
    CHECK_MSG(ok, "%s %s: weights: %s", pn, dn, cmf_last_error());
    if (!ok) {
        free(payload);
        return;
    }
    const int repacked = dtype == CMF_DT_Q4_BLOCK || dtype == CMF_DT_Q4TP || dtype == CMF_DT_Q8_ROW;
    CHECK_MSG(cmf_matmul_rows_ok(&w, n) == (repacked && n > 2), "%s %s n %lld: cmf_matmul_rows_ok %d", pn, dn,
              (long long)n, cmf_matmul_rows_ok(&w, n));
    float *x = frand_vec(n * cols), *ref = malloc((size_t)(n * rows) * sizeof(float));
    float *one = malloc((size_t)rows * sizeof(float));
    float **dst = calloc((size_t)n, sizeof *dst);
    for (int64_t j = 0; dst && j < n; j++) {
        dst[j] = malloc((size_t)(rows + GUARD) * sizeof(float)); /* separate buffers, each with a guard after it */
        for (int64_t i = 0; dst[j] && i < rows + GUARD; i++) dst[j][i] = -12345.0f;
    }
    cmf_matmul(pool, ref, rows, x, n, &w, NULL);
    cmf_matmul_rows(pool, dst, x, n, &w);
    int64_t bad = 0, bad_alone = 0, bad_guard = 0;
    for (int64_t j = 0; j < n; j++) {
        cmf_matmul(pool, one, rows, x + j * cols, 1, &w, NULL);
        for (int64_t i = 0; i < rows; i++) {
            bad += memcmp(&dst[j][i], &ref[j * rows + i], sizeof(float)) != 0;
            bad_alone += memcmp(&dst[j][i], &one[i], sizeof(float)) != 0;
        }
        for (int64_t i = rows; i < rows + GUARD; i++) bad_guard += dst[j][i] != -12345.0f;
    }
    /* q8_2f / f16 take cmf_matmul token by token: only the token-alone bits are promised */
    if (repacked) CHECK_MSG(bad == 0, "%s %s %lldx%lld n %lld: %lld values differ from cmf_matmul", pn, dn,
                            (long long)rows, (long long)cols, (long long)n, (long long)bad);
    CHECK_MSG(bad_alone == 0, "%s %s %lldx%lld n %lld: %lld values differ from each token alone", pn, dn,
              (long long)rows, (long long)cols, (long long)n, (long long)bad_alone);
    CHECK_MSG(bad_guard == 0, "%s %s n %lld: %lld values written past a row", pn, dn, (long long)n,
              (long long)bad_guard);
    for (int64_t j = 0; dst && j < n; j++) free(dst[j]);
    free(dst);
    free(one);
    free(ref);
    free(x);
    cmf_cpu_repack_release(&w);
    free(payload);
}

int main(void) {
    kt_seed(0x70a5e11);
    cmf_pool *pool = NULL;
    CHECK(cmf_pool_new(2, &pool) == CMF_OK);
    if (!pool) CMF_TEST_END();
    const int start = cmf_cpu_path();
    const int paths[] = {CMF_CPU_SCALAR, CMF_CPU_AVX2, CMF_CPU_AVX512};
    const int dts[] = {CMF_DT_Q4_BLOCK, CMF_DT_Q4TP, CMF_DT_Q8_ROW, CMF_DT_Q8_2F, CMF_DT_F16};
    const int64_t cols[] = {256, 1600}, ns[] = {1, 2, 3, 7, 16, 40, 80};
    int tested = 0;
    for (size_t pi = 0; pi < sizeof paths / sizeof paths[0]; pi++) {
        if (!cmf_cpu_path_supported(paths[pi])) continue;
        CHECK(cmf_cpu_set_path(paths[pi]) == CMF_OK);
        const cmf_kern *k = cmf_kern_active();
        if (!k->rp_gemv || !k->rp_gemm) continue;
        for (size_t d = 0; d < sizeof dts / sizeof dts[0]; d++)
            for (size_t c = 0; c < sizeof cols / sizeof cols[0]; c++)
                for (size_t i = 0; i < sizeof ns / sizeof ns[0]; i++) {
                    if (paths[pi] == CMF_CPU_SCALAR && ns[i] > 16) continue; /* the scalar path is slow */
                    check_case(pool, paths[pi], dts[d], 1049, cols[c], ns[i]);
                }
        fprintf(stderr, "%s: cmf_matmul_rows checked\n", cmf_cpu_path_name(paths[pi]));
        tested++;
    }
    CHECK(tested > 0);
    CHECK(cmf_cpu_set_path(start) == CMF_OK);
    CHECK(cmf_cpu_repack_bytes() == 0);
    cmf_pool_free(pool);
    CMF_TEST_END();
}
