/* test_rmsnorm_rows — cmf_rmsnorm_rows (ops.c: up to 8 rows' sums of squares interleaved) gives, row by row, the
 * bits of cmf_rmsnorm (one sequential double sum per row): row counts around the interleave width (1, 7, 8, 9, 19),
 * widths 64 / 1000 / 1024, no weight / a weight / Gemma's 1 + w, out of place and in place (the rows' offsets, the
 * tail of fewer than 8 rows, outputs written only after every sum of a block of rows is taken). A sum in another
 * order would rarely show: the scale is rounded to f32 from the double sum. */
#include <math.h>
#include <string.h>

#include "backend/cpu/ops.h"
#include "testutil.h"


/* deterministic values of mixed magnitudes: mantissa from an LCG, exponent -12..+11, random sign */
static void fill(float *x, int64_t n, uint32_t seed) {
    uint32_t s = seed * 2654435761u + 1;
    for (int64_t i = 0; i < n; i++) {
        s = s * 1664525u + 1013904223u;
        const float m = 1.0f + (float)(s >> 8) / 16777216.0f;
        s = s * 1664525u + 1013904223u;
        x[i] = ldexpf((s >> 31) ? -m : m, (int)((s >> 8) % 24) - 12);
    }
}

int main(void) {
    enum { MAXR = 19, MAXN = 1024 };
    static float x[MAXR * MAXN], w[MAXN], ref[MAXR * MAXN], got[MAXR * MAXN];
    const int rows_list[] = {1, 7, 8, 9, 19}, n_list[] = {64, 1000, 1024};
    for (size_t ni = 0; ni < sizeof n_list / sizeof n_list[0]; ni++) {
        const int n = n_list[ni];
        fill(w, n, 99);
        for (size_t ri = 0; ri < sizeof rows_list / sizeof rows_list[0]; ri++) {
            const int rows = rows_list[ri];
            fill(x, (int64_t)rows * n, (uint32_t)(7 * n + rows));
            for (int mode = 0; mode < 3; mode++) {
                const float *wt = mode ? w : NULL;
                const int gemma = mode == 2;
                for (int r = 0; r < rows; r++)
                    cmf_rmsnorm(ref + (size_t)r * n, x + (size_t)r * n, wt, n, 1e-6f, gemma);
                cmf_rmsnorm_rows(got, x, wt, rows, n, 1e-6f, gemma);
                CHECK_MSG(!memcmp(got, ref, (size_t)rows * n * sizeof(float)),
                          "rows %d, n %d, mode %d: not cmf_rmsnorm's bits", rows, n, mode);
                memcpy(got, x, (size_t)rows * n * sizeof(float)); /* in place */
                cmf_rmsnorm_rows(got, got, wt, rows, n, 1e-6f, gemma);
                CHECK_MSG(!memcmp(got, ref, (size_t)rows * n * sizeof(float)),
                          "rows %d, n %d, mode %d, in place: not cmf_rmsnorm's bits", rows, n, mode);
            }
        }
    }
    CMF_TEST_END();
}
