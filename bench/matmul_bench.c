/* matmul_bench.c — times cmf_matmul per dtype: matvec (n = 1) and batched decode (n = 16), both as GB/s of
 * weight bytes read per product, and GEMM (n = 512, prefill; GFLOP/s = 2*rows*cols*n / time, and the equivalent
 * tokens/s of one product), random weights encoded by cmf_quantize (q4tp/q2tp: random payloads when src/quant has
 * no encoder). Shapes (rows x cols): "big" 4096x4096 and 4096x11008; "qwen" Qwen2.5-0.5B's 4864x896 (gate/up) and
 * 896x4864 (down).
 *
 *   cmake --build build --target matmul_bench && build/tests/kernels/matmul_bench [threads] [path] [shapes] [dtype]
 *   path: scalar | avx2 | avx512-vnni (default: the best this CPU runs); shapes: all (default) | big | qwen;
 *   dtype: one dtype name (default: all). The q4 family is repacked first (ops.h cmf_cpu_repack_weight) unless
 *   CMF_CPU_REPACK=0; GB/s counts the file's bytes of the matrix either way. With 1 thread the times are the
 *   thread's CPU time (other processes' load does not stretch them), else wall time.
 *
 *   matmul_bench [threads] [path] stream DTYPE [tokens]: the decode products of a Qwen2.5-0.5B-shaped model (24
 *   layers of q/k/v 896/128/128 x 896 as one group, o 896x896, gate/up 4864x896 as one group with the SiLU GLU, down
 *   896x4864; the tied head 151936x896) with random weights, repacked into one arena in that order as the cpu
 *   backend's load_weights does (cmf_cpu_repack_set), then `tokens` (default 64) one-token passes over all of them
 *   in order: the products alone (no attention, norms, residuals), from memory (278 MB at q4_block > the L3). Prints
 *   tokens/s and the copy's GB/s, to set against bench/readbw.c's read bandwidth of the same minute and against
 *   `cmf bench -n 128` of the whole model. DTYPE: q4_block, q4_tiled, q4tp or q8_row.
 *
 *   CMF_BENCH_TP_LAYOUT=1 or 4 (this program only): q4tp copies with ladder codes (1) or f32 rungs (4) whatever the
 *   path (kern.h cmf_rp_set_tp_layout; default: codes on avx512-vnni, f32 rungs on avx2 / scalar), for A/B runs. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend/cpu/kern.h"
#include "backend/cpu/ops.h"
#include "quant/dtype.h"

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* CPU time of the calling thread (s): with 1 thread the passes' own running time, which another process's load on
 * the machine does not stretch (it still shares the memory bus and the L3). */
static double thread_cpu(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Seconds per product: with 1 thread its CPU time (thread_cpu: other processes' load does not stretch it), else the
 * wall time. */
static double bench(cmf_pool *pool, float *out, const float *x, int64_t n, const cmf_weight *w, double min_s) {
    double (*clock_s)(void) = cmf_pool_size(pool) == 1 ? thread_cpu : now;
    cmf_matmul(pool, out, w->rows, x, n, w, NULL); /* warm-up */
    int reps = 0;
    const double t0 = clock_s();
    double t;
    do {
        cmf_matmul(pool, out, w->rows, x, n, w, NULL);
        reps++;
        t = clock_s() - t0;
    } while (t < min_s);
    return t / reps;
}

/* Random weights of a repackable dtype (rows x cols) without an f32 source: random nibbles / int8 values with sane
 * scales (f16 0.01; q4tp ladders lo = -6, step = 1/16, CMF_FORMAT.md §2.6). NULL when the dtype is not one of them. */
static uint8_t *stream_payload(int dt, int64_t rows, int64_t cols, uint64_t *nb) {
    uint32_t shape[2] = {(uint32_t)rows, (uint32_t)cols};
    if (cmf_dtype_nbytes(dt, 2, shape, nb) != 1) return NULL;
    uint8_t *p = malloc(*nb);
    if (!p) return NULL;
    uint64_t st = 0x9e3779b97f4a7c15ull ^ (uint64_t)(rows * 31 + cols);
    for (uint64_t i = 0; i < *nb; i++) { /* xorshift bytes */
        st ^= st << 13, st ^= st >> 7, st ^= st << 17;
        p[i] = (uint8_t)st;
    }
    const uint16_t h = cmf_f32_to_f16(0.01f);
    const int64_t G = (rows * cols + 31) / 32, gpr = cols / 32;
    if (dt == CMF_DT_Q4_BLOCK) {
        for (int64_t g = 0; g < G; g++) memcpy(p + 16 * G + 2 * g, &h, 2);
    } else if (dt == CMF_DT_Q4_TILED) {
        for (int64_t g = 0; g < G; g++) memcpy(p + 18 * g, &h, 2);
    } else if (dt == CMF_DT_Q8_ROW) {
        for (int64_t r = 0; r < rows; r++) memcpy(p + rows * cols + 2 * r, &h, 2);
    } else if (dt == CMF_DT_Q4TP) {
        const uint16_t lo = cmf_f32_to_f16(-6.0f), sp = cmf_f32_to_f16(0.0625f);
        for (int64_t r = 0; r < rows; r++) {
            memcpy(p + rows * gpr * 16 + 4 * r, &lo, 2);
            memcpy(p + rows * gpr * 16 + 4 * r + 2, &sp, 2);
        }
    } else {
        free(p);
        return NULL;
    }
    return p;
}

static int stream_bench(cmf_pool *pool, const char *dname, int tokens) {
    enum { L = 24, H = 896, KV = 128, F = 4864, V = 151936, PER = 7 };
    int dt = -1;
    for (int d = 0; d < CMF_DT_COUNT; d++)
        if (!strcmp(dname, cmf_dtype_name(d))) dt = d;
    const int64_t shp[PER][2] = {{H, H}, {KV, H}, {KV, H}, {H, H}, {F, H}, {F, H}, {H, F}};
    const int nw = L * PER + 1;
    uint8_t **pay = calloc((size_t)nw, sizeof *pay);
    cmf_tensor *ts = calloc((size_t)nw, sizeof *ts);
    cmf_weight *ws = calloc((size_t)nw, sizeof *ws), **set = calloc((size_t)nw, sizeof *set);
    float *x = calloc(F, sizeof(float)), *y = calloc(V, sizeof(float)), *y2 = calloc(F, sizeof(float));
    if (!pay || !ts || !ws || !set || !x || !y || !y2) return 1;
    double bytes = 0;
    for (int i = 0; i < nw; i++) {
        const int64_t rows = i == L * PER ? V : shp[i % PER][0], cols = i == L * PER ? H : shp[i % PER][1];
        uint64_t nb = 0;
        pay[i] = stream_payload(dt, rows, cols, &nb);
        if (!pay[i]) {
            fprintf(stderr, "stream: dtype '%s' is not q4_block, q4_tiled, q4tp or q8_row\n", dname);
            return 1;
        }
        ts[i].name = "stream";
        ts[i].dtype = (uint8_t)dt;
        ts[i].ndim = 2;
        ts[i].shape[0] = (uint32_t)rows;
        ts[i].shape[1] = (uint32_t)cols;
        ts[i].nbytes = nb;
        ts[i].data = pay[i];
        if (cmf_weight_view(&ts[i], &ws[i]) != CMF_OK) {
            fprintf(stderr, "stream: %s\n", cmf_last_error());
            return 1;
        }
        set[i] = &ws[i];
    }
    if (cmf_cpu_repack_set(set, nw) != CMF_OK) {
        fprintf(stderr, "stream: %s\n", cmf_last_error());
        return 1;
    }
    for (int i = 0; i < nw; i++) /* the copies' bytes: what the passes read (the stored bytes are not touched) */
        if (ws[i].rp) bytes += (double)(ws[i].rp->gstride * (size_t)ws[i].rp->ngroups);
    for (int i = 0; i < H; i++) x[i] = (float)((i * 37) % 101) / 50.0f - 1.0f;
    for (int i = 0; i < F; i++) y2[i] = (float)((i * 53) % 97) / 48.0f - 1.0f;
    double best = 1e30, sum = 0, cbest = 1e30, csum = 0;
    for (int t = -2; t < tokens; t++) { /* 2 warm-up passes */
        const double t0 = now(), c0 = thread_cpu();
        for (int l = 0; l < L; l++) {
            const cmf_weight *w = &ws[l * PER];
            const cmf_mm qkv[3] = {{y, H, &w[0], NULL}, {y + H, KV, &w[1], NULL}, {y + H + KV, KV, &w[2], NULL}};
            cmf_matmul_group(pool, x, 1, qkv, 3, 0);
            cmf_matmul(pool, y, H, x, 1, &w[3], NULL);
            const cmf_mm gu[2] = {{y2, F, &w[4], NULL}, {y + F, F, &w[5], NULL}};
            cmf_matmul_group(pool, x, 1, gu, 2, 1);
            cmf_matmul(pool, y, H, y2, 1, &w[6], NULL);
        }
        cmf_matmul(pool, y, V, x, 1, &ws[L * PER], NULL);
        const double dt_s = now() - t0, dc = thread_cpu() - c0;
        if (t >= 0) sum += dt_s, best = dt_s < best ? dt_s : best, csum += dc, cbest = dc < cbest ? dc : cbest;
    }
    if (cmf_pool_size(pool) == 1)
        printf("stream %s, 1 thread, its CPU time per pass: mean %.2f tok/s (%.1f GB/s), best %.2f tok/s (%.1f GB/s)\n",
               dname, tokens / csum, bytes * tokens / csum / 1e9, 1.0 / cbest, bytes / cbest / 1e9);
    printf("stream %s: %d matrices, copy %.1f MB; %d passes: mean %.2f tok/s (%.1f GB/s), best %.2f tok/s "
           "(%.1f GB/s)\n",
           dname, nw, bytes / 1e6, tokens, tokens / sum, bytes * tokens / sum / 1e9, 1.0 / best, bytes / best / 1e9);
    for (int i = 0; i < nw; i++) {
        cmf_cpu_repack_release(&ws[i]);
        free(pay[i]);
    }
    free(pay), free(ts), free(ws), free(set), free(x), free(y), free(y2);
    return 0;
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
    const char *tpl = getenv("CMF_BENCH_TP_LAYOUT");
    if (tpl) cmf_rp_set_tp_layout(atoi(tpl));
    cmf_pool *pool = NULL;
    if (cmf_pool_new(threads, &pool) != CMF_OK) return 1;
    printf("path: %s, threads %d, q4 repack %s (CMF_CPU_REPACK), q4tp copy: %s\n", cmf_cpu_features_str(),
           cmf_pool_size(pool), cmf_cpu_repack_enabled() ? "on" : "off",
           cmf_rp_tp_layout() == 1 ? "ladder codes, 17 B / 32 values" : "f32 rungs, 20 B / 32 values");
    printf("reproduce: cmake --build build --target matmul_bench && build/tests/kernels/matmul_bench %d %s %s%s%s\n",
           cmf_pool_size(pool), cmf_cpu_path_name(cmf_cpu_path()), argc > 3 ? argv[3] : "all", argc > 4 ? " " : "",
           argc > 4 ? argv[4] : "");
    if (argc > 4 && !strcmp(argv[3], "stream")) {
        const int rc = stream_bench(pool, argv[4], argc > 5 ? atoi(argv[5]) : 64);
        cmf_pool_free(pool);
        return rc;
    }
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
