/* matmul_bench.c — times cmf_matmul per dtype: matvec (n = 1) and batched decode (n = 16), both as GB/s of
 * weight bytes read per product, and GEMM (n = 512, prefill; GFLOP/s = 2*rows*cols*n / time, and the equivalent
 * tokens/s of one product), random weights encoded by cmf_quantize (q4tp/q2tp: random payloads when src/quant has
 * no encoder). Shapes (rows x cols): "big" 4096x4096 and 4096x11008; "qwen" Qwen2.5-0.5B's 4864x896 (gate/up) and
 * 896x4864 (down).
 *
 *   cmake --build build --target matmul_bench && build/tests/kernels/matmul_bench [threads] [path] [shapes] [dtype]
 *   path: scalar | avx2 | avx512-vnni (default: the best this CPU runs); shapes: all (default) | big | qwen;
 *   dtype: one dtype name (default: all). The q4 family is repacked first (ops.h cmf_cpu_repack_weight) unless
 *   CMF_CPU_REPACK=0; GB/s counts the file's bytes of the matrix either way. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend/cpu/ops.h"
#include "quant/dtype.h"

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static double bench(cmf_pool *pool, float *out, const float *x, int64_t n, const cmf_weight *w, double min_s) {
    cmf_matmul(pool, out, w->rows, x, n, w, NULL); /* warm-up */
    int reps = 0;
    const double t0 = now();
    double t;
    do {
        cmf_matmul(pool, out, w->rows, x, n, w, NULL);
        reps++;
        t = now() - t0;
    } while (t < min_s);
    return t / reps;
}

int main(int argc, char **argv) {
    const int threads = argc > 1 ? atoi(argv[1]) : 0;
    if (argc > 2) {
        for (int p = 0; p <= CMF_CPU_AVX512; p++)
            if (!strcmp(argv[2], cmf_cpu_path_name(p)) && cmf_cpu_set_path(p) != CMF_OK) {
                fprintf(stderr, "%s\n", cmf_last_error());
                return 1;
            }
    }
    cmf_pool *pool = NULL;
    if (cmf_pool_new(threads, &pool) != CMF_OK) return 1;
    printf("path: %s, threads %d, q4 repack %s (CMF_CPU_REPACK)\n", cmf_cpu_features_str(), cmf_pool_size(pool),
           cmf_cpu_repack_enabled() ? "on" : "off");
    printf("reproduce: cmake --build build --target matmul_bench && build/tests/kernels/matmul_bench %d %s %s%s%s\n",
           cmf_pool_size(pool), cmf_cpu_path_name(cmf_cpu_path()), argc > 3 ? argv[3] : "all", argc > 4 ? " " : "",
           argc > 4 ? argv[4] : "");
    const int dts[] = {CMF_DT_F32, CMF_DT_F16, CMF_DT_BF16, CMF_DT_Q8_ROW, CMF_DT_Q8_2F,
                       CMF_DT_Q4_BLOCK, CMF_DT_Q4_TILED, CMF_DT_Q4TP, CMF_DT_Q2TP};
    const char *which = argc > 3 ? argv[3] : "all", *only = argc > 4 ? argv[4] : NULL;
    const int64_t shapes[][2] = {{4864, 896}, {896, 4864}, {4096, 4096}, {4096, 11008}};
    const size_t s0 = !strcmp(which, "big") ? 2 : 0, s1 = !strcmp(which, "qwen") ? 2 : 4;
    const int64_t NB = 512, NS = 16;
    printf("%-9s %-11s %10s %8s %10s %8s %10s %9s %9s\n", "dtype", "rows x cols", "matvec ms", "GB/s", "n=16 ms",
           "GB/s", "n=512 ms", "GFLOP/s", "tok/s");
    for (size_t s = s0; s < s1; s++) {
        const int64_t rows = shapes[s][0], cols = shapes[s][1];
        float *src = malloc((size_t)(rows * cols) * sizeof(float));
        float *x = malloc((size_t)(NB * cols) * sizeof(float)), *out = malloc((size_t)(NB * rows) * sizeof(float));
        srand(1);
        for (int64_t i = 0; i < rows * cols; i++) src[i] = (float)rand() / (float)RAND_MAX - 0.5f;
        for (int64_t i = 0; i < NB * cols; i++) x[i] = (float)rand() / (float)RAND_MAX - 0.5f;
        for (size_t d = 0; d < sizeof dts / sizeof dts[0]; d++) {
            if (only && strcmp(only, cmf_dtype_name(dts[d]))) continue;
            uint32_t shape[2] = {(uint32_t)rows, (uint32_t)cols};
            uint64_t nb = 0;
            if (cmf_dtype_nbytes(dts[d], 2, shape, &nb) != 1) continue;
            uint8_t *p = malloc(nb);
            if (cmf_quantize(dts[d], (uint64_t)rows, (uint64_t)cols, src, p) != CMF_OK) {
                for (uint64_t i = 0; i < nb; i++) p[i] = (uint8_t)rand();
                const int64_t gpr = cols / 32;
                uint8_t *par = p + rows * gpr * (dts[d] == CMF_DT_Q4TP ? 16 : 8);
                for (int64_t r = 0; r < rows; r++) { /* lo = -6, step = 1/16 */
                    uint16_t lo = cmf_f32_to_f16(-6.0f), st = cmf_f32_to_f16(0.0625f);
                    memcpy(par + 4 * r, &lo, 2);
                    memcpy(par + 4 * r + 2, &st, 2);
                }
            }
            cmf_tensor t;
            memset(&t, 0, sizeof t);
            t.name = "bench";
            t.dtype = (uint8_t)dts[d];
            t.ndim = 2;
            t.shape[0] = shape[0];
            t.shape[1] = shape[1];
            t.nbytes = nb;
            t.data = p;
            cmf_weight w;
            if (cmf_weight_view(&t, &w) != CMF_OK) {
                printf("%-9s %s\n", cmf_dtype_name(dts[d]), cmf_last_error());
                free(p);
                continue;
            }
            if (cmf_cpu_repack_weight(&w) != CMF_OK) { /* the q4 family's load-time repack (CMF_CPU_REPACK=0: off) */
                printf("%-9s %s\n", cmf_dtype_name(dts[d]), cmf_last_error());
                free(p);
                continue;
            }
            const double tv = bench(pool, out, x, 1, &w, 0.3), ts = bench(pool, out, x, NS, &w, 0.3);
            const double tg = bench(pool, out, x, NB, &w, 0.5);
            printf("%-9s %5lldx%-5lld %10.3f %8.1f %10.3f %8.1f %10.2f %9.1f %9.0f\n", cmf_dtype_name(dts[d]),
                   (long long)rows, (long long)cols, tv * 1e3, (double)nb / tv / 1e9, ts * 1e3, (double)nb / ts / 1e9,
                   tg * 1e3, 2.0 * (double)rows * (double)cols * (double)NB / tg / 1e9, (double)NB / tg);
            cmf_cpu_repack_release(&w);
            free(p);
        }
        free(src);
        free(x);
        free(out);
    }
    cmf_pool_free(pool);
    return 0;
}
