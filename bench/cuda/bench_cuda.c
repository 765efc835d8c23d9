/* bench_cuda.c — timings of the CUDA kernel library on the device (bench/cuda/RESULTS.md): device-to-device copy
 * bandwidth (the ceiling), matvec GB/s per dtype and shape, prefill GEMM TFLOP/s (cuBLAS vs tiled), decode
 * attention at 1k/8k/32k context, sampling. CUDA events, warm-up, median of 15 batches; weights rotate among
 * copies totalling >= 512 MiB so that L2 (60 MiB) does not serve them. Inputs are random bytes / values, never
 * zeros. The matvec table uses the default activations (int8 for q8_row / q4tp unless CMF_CUDA_I8ACT=0); a second
 * table times q8_row and q4tp with int8 and with f32 activations side by side, and the streaming int8 kernel
 * (matvec_i8s.cu, modes 1 / 2); a third, one Llama-8B layer's fused decode products per kernel. Prints a table (stdout).
 * Usage: bench_cuda [quick | matvec | i8 | attn]   (matvec: only the matvec tables; i8: only the int8-activation
 * ones; attn: decode attention alone per kernel variant) */
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_ops.h"
#include "quant/dtype.h"

#define DIE(...) do { fprintf(stderr, __VA_ARGS__); fputc('\n', stderr); exit(1); } while (0)
#define OKC(x) do { cmf_status s_ = (x); if (s_ != CMF_OK) DIE("%s: %s", #x, cmf_last_error()); } while (0)
#define CU(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) DIE("%s: %s", #x, cudaGetErrorString(e_)); } while (0)

static uint64_t rs = 88172645463325252ull;
static uint64_t next64(void) { rs ^= rs << 13, rs ^= rs >> 7, rs ^= rs << 17; return rs; }

static int cmpf(const void *a, const void *b) { float x = *(const float *)a, y = *(const float *)b; return (x > y) - (x < y); }

typedef void (*op_fn)(void *arg, int rep);
/* Median over 15 batches of `per` launches of the time of one launch, in ms. */
static double time_op(op_fn f, void *arg, int per) {
    cudaEvent_t a, b;
    CU(cudaEventCreate(&a));
    CU(cudaEventCreate(&b));
    for (int i = 0; i < 3; i++) f(arg, i);
    CU(cudaDeviceSynchronize());
    float ms[15];
    for (int k = 0; k < 15; k++) {
        CU(cudaEventRecord(a, 0));
        for (int i = 0; i < per; i++) f(arg, k * per + i);
        CU(cudaEventRecord(b, 0));
        CU(cudaEventSynchronize(b));
        CU(cudaEventElapsedTime(&ms[k], a, b));
        ms[k] /= (float)per;
    }
    CU(cudaGetLastError());
    qsort(ms, 15, sizeof *ms, cmpf);
    cudaEventDestroy(a), cudaEventDestroy(b);
    return ms[7];
}

struct copy_arg { void *a, *b; size_t n; };
static void op_copy(void *p, int rep) { struct copy_arg *c = p; (void)rep; OKC(cmf_cuda_copy(c->b, c->a, c->n, NULL)); }

struct mv_arg { cmf_cuda_weight w[96]; int ncopy; float *x, *y; int n; cmf_cuda_ctx *ctx; int algo; };
static void op_mv(void *p, int rep) { struct mv_arg *m = p; OKC(cmf_cuda_matvec(&m->w[rep % m->ncopy], m->x, m->y, m->n, NULL)); }
/* The decode step's fused products: q/k/v (3 weights, one input) and gate/up + GLU (w[2c], w[2c+1]). */
static void op_multi(void *p, int rep) {
    struct mv_arg *m = p;
    const int c = rep % m->ncopy;
    float *ys[3] = {m->y, m->y + 16384 * 8, m->y + 32768 * 8};
    OKC(cmf_cuda_matvec_multi(&m->w[3 * c], 3, m->x, ys, NULL, m->n, NULL));
}
static void op_glu(void *p, int rep) {
    struct mv_arg *m = p;
    const int c = rep % m->ncopy;
    OKC(cmf_cuda_matvec_glu(&m->w[2 * c], &m->w[2 * c + 1], m->x, m->y, m->n, 0, NULL));
}
static void op_gemm(void *p, int rep) { struct mv_arg *m = p; OKC(cmf_cuda_gemm(m->ctx, &m->w[rep % m->ncopy], m->x, m->y, m->n, m->algo, NULL)); }

struct at_arg { cmf_cuda_attn a; float *q, *o; uint16_t *k, *v; void *work; int64_t pos; };
static void op_attn(void *p, int rep) { struct at_arg *t = p; (void)rep; OKC(cmf_cuda_attn_decode(&t->a, t->q, t->k, t->v, t->pos, t->o, t->work, NULL)); }
/* decode attention over the rep-th of nl layers' caches (each ctx rows) */
struct at_rot { struct at_arg *at; uint16_t *k, *v; int64_t nl, ctx; };
static void op_attn_rot(void *p, int rep) {
    struct at_rot *r = p;
    const size_t off = (size_t)(rep % r->nl) * (size_t)r->ctx * 8 * 128;
    OKC(cmf_cuda_attn_decode(&r->at->a, r->at->q, r->k + off, r->v + off, r->at->pos, r->at->o, r->at->work, NULL));
}
static void op_prefill(void *p, int rep) { struct at_arg *t = p; (void)rep; OKC(cmf_cuda_attn_prefill(&t->a, t->q, t->k, t->v, 0, t->pos, t->o, NULL)); }

static uint8_t *g_host; /* random bytes, big enough for the largest payload */

static size_t payload(int dt, int64_t rows, int64_t cols) {
    uint32_t shape[2] = {(uint32_t)rows, (uint32_t)cols};
    uint64_t nb = 0;
    if (cmf_dtype_nbytes(dt, 2, shape, &nb) != 1) DIE("nbytes");
    return (size_t)nb;
}

/* Random payload; f16 / bf16 / f32 values and all scales kept finite and moderate (exponent bits masked). */
static void *upload_weight(int dt, int64_t rows, int64_t cols, size_t nb) {
    for (size_t i = 0; i < nb; i += 8) { uint64_t r = next64(); memcpy(g_host + i, &r, nb - i < 8 ? nb - i : 8); }
    if (dt == CMF_DT_F16 || dt == CMF_DT_BF16 || dt == CMF_DT_F32)
        for (size_t i = 1; i < nb; i += 2) g_host[i] &= 0x3f; /* clears high exponent bits of every 16-bit half */
    size_t n = (size_t)(rows * cols);
    if (dt == CMF_DT_Q8_ROW || dt == CMF_DT_Q8_2F)
        for (size_t i = n + 1; i < nb; i += 2) g_host[i] = 0x20; /* f16 scales ~ 2^-7 */
    if (dt == CMF_DT_Q4_TILED)
        for (size_t i = 0; i < nb; i += 18) g_host[i + 1] = 0x20;
    if (dt == CMF_DT_Q4TP) {
        size_t par = (size_t)rows * (size_t)(cols / 32) * 16;
        for (int64_t r = 0; r < rows; r++) { /* lo = -8, step = 0.25 */
            uint8_t *p = g_host + par + 4 * r;
            p[0] = 0x00, p[1] = 0xc8, p[2] = 0x00, p[3] = 0x34;
        }
    }
    void *d;
    OKC(cmf_cuda_malloc(&d, nb));
    OKC(cmf_cuda_upload(d, g_host, nb, NULL));
    return d;
}

/* "attn": decode attention alone, per tile / L2-prefetch / merge variant (cmf_cuda_set_attn_decode; CMF_CUDA_ATTN_SPLIT_KEYS
 * from the environment), Llama-3-8B (32 / 8 heads) and Qwen3-0.6B (16 / 8) shapes, head_dim 128, f16 cache, at
 * contexts 128 .. 32768; the caches rotate over >= 256 MiB of layers so that L2 does not serve them. GB/s: K + V
 * bytes read / time (the copy's ceiling is `copy` GB/s read + write). */
static int attn_only(double copy_gbs) {
    const int64_t cap = 131072; /* positions x layers of the rotating caches: 256 MiB each for K and V */
    const size_t kvb = (size_t)cap * 8 * 128 * 2;
    struct at_arg at = {.a = {32, 8, 128, 0.08838834764831845f, 0.0f, 0, CMF_CUDA_KV_F16}};
    uint16_t *k0, *v0;
    OKC(cmf_cuda_malloc((void **)&k0, kvb));
    OKC(cmf_cuda_malloc((void **)&v0, kvb));
    for (size_t i = 0; i < kvb; i += 2) { uint16_t h = (uint16_t)(next64() & 0x3bff); memcpy(g_host + i, &h, 2); }
    OKC(cmf_cuda_upload(k0, g_host, kvb, NULL));
    OKC(cmf_cuda_upload(v0, g_host + 2, kvb - 2, NULL));
    float *qh = malloc(sizeof(float) * 32 * 128);
    for (int i = 0; i < 32 * 128; i++) qh[i] = (float)((int)(next64() % 2001) - 1000) / 500.0f;
    OKC(cmf_cuda_malloc((void **)&at.q, sizeof(float) * 32 * 128));
    OKC(cmf_cuda_malloc((void **)&at.o, sizeof(float) * 32 * 128));
    OKC(cmf_cuda_upload(at.q, qh, sizeof(float) * 32 * 128, NULL));
    free(qh);
    OKC(cmf_cuda_malloc(&at.work, cmf_cuda_attn_decode_work_bytes(&at.a, 32768)));
    OKC(cmf_cuda_memset(at.work, 0, cmf_cuda_attn_decode_work_bytes(&at.a, 32768), NULL));
    static const int64_t ctxs[] = {128, 1024, 4096, 32768};
    static const int heads[] = {32, 16};
    static const int var[][3] = {{1, 0, 0}, {4, 0, 0}, {1, 0, 1}, {4, 0, 1}, {4, 1, 1}}; /* tile, pf, merge */
    const char *sk = getenv("CMF_CUDA_ATTN_SPLIT_KEYS");
    printf("\n== decode attention alone (KV 8 x 128, f16 cache, CMF_CUDA_ATTN_SPLIT_KEYS=%s; copy %.0f GB/s): us (KV GB/s)\n",
           sk ? sk : "default", copy_gbs);
    printf("%-8s %-7s", "heads", "ctx");
    for (size_t v = 0; v < sizeof var / sizeof *var; v++) printf("  t%d pf%d merge%d    ", var[v][0], var[v][1], var[v][2]);
    printf("\n");
    for (int hi = 0; hi < 2; hi++)
        for (int c = 0; c < 4; c++) {
            at.a.n_heads = heads[hi];
            at.pos = ctxs[c] - 1;
            printf("%-8d %-7lld", heads[hi], (long long)ctxs[c]);
            for (size_t v = 0; v < sizeof var / sizeof *var; v++) {
                cmf_cuda_set_attn_decode(var[v][0], var[v][1], var[v][2]);
                struct at_rot r = {&at, k0, v0, cap / ctxs[c] < 1024 ? cap / ctxs[c] : 1024, ctxs[c]};
                double t = time_op(op_attn_rot, &r, 20);
                double bytes = 2.0 * (double)ctxs[c] * 8 * 128 * 2;
                printf("  %7.2f (%5.0f)   ", t * 1e3, bytes / (t * 1e-3) / 1e9);
            }
            printf("\n");
        }
    cmf_cuda_set_attn_decode(-1, -1, -1);
    return 0;
}

int main(int argc, char **argv) {
    int quick = argc > 1 && strcmp(argv[1], "quick") == 0, only_mv = argc > 1 && strcmp(argv[1], "matvec") == 0;
    int only_i8 = argc > 1 && strcmp(argv[1], "i8") == 0; /* the int8-activation tables alone */
    only_mv |= only_i8;
    int ndev = 0;
    cmf_cuda_device_count(&ndev);
    if (ndev < 1) { printf("SKIP: no CUDA device (%s)\n", cmf_last_error()); return 77; }
    char info[256];
    OKC(cmf_cuda_device_info(0, info, sizeof info));
    printf("device: %s\n", info);
    g_host = malloc((size_t)128256 * 4096 * 4 + 64);
    if (!g_host) DIE("host alloc");

    /* ceiling: device-to-device copy of 2 GiB, bytes read + written */
    struct copy_arg ca = {NULL, NULL, (size_t)2 << 30};
    OKC(cmf_cuda_malloc(&ca.a, ca.n));
    OKC(cmf_cuda_malloc(&ca.b, ca.n));
    OKC(cmf_cuda_memset(ca.a, 0x5a, ca.n, NULL));
    double tc = time_op(op_copy, &ca, 3);
    double copy_gbs = 2.0 * (double)ca.n / (tc * 1e-3) / 1e9;
    printf("d2d copy: %.3f ms for 2 GiB -> %.0f GB/s (read + write)\n", tc, copy_gbs);
    cmf_cuda_free(ca.a), cmf_cuda_free(ca.b);
    if (argc > 1 && strcmp(argv[1], "attn") == 0) return attn_only(copy_gbs);

    static const int dts[] = {CMF_DT_F32, CMF_DT_F16, CMF_DT_BF16, CMF_DT_Q8_ROW, CMF_DT_Q8_2F, CMF_DT_Q4_TILED, CMF_DT_Q4TP};
    static const int64_t shp[][2] = {{4096, 4096}, {4096, 14336}, {14336, 4096}, {128256, 4096}};
    static char table[65536];
    int tl = 0;
    tl += snprintf(table + tl, sizeof table - tl, "\n== matvec (n=1; n=8 in brackets): GB/s of weights read, %% of copy %.0f GB/s\n", copy_gbs);
    tl += snprintf(table + tl, sizeof table - tl, "%-10s", "dtype");
    for (int s = 0; s < 4; s++) tl += snprintf(table + tl, sizeof table - tl, " %22lldx%-6lld", (long long)shp[s][0], (long long)shp[s][1]);
    tl += snprintf(table + tl, sizeof table - tl, "\n");
    float *d_x, *d_y;
    OKC(cmf_cuda_malloc((void **)&d_x, sizeof(float) * 512 * 14336));
    OKC(cmf_cuda_malloc((void **)&d_y, sizeof(float) * 512 * 128256));
    {
        float *hx = malloc(sizeof(float) * 512 * 14336);
        for (size_t i = 0; i < (size_t)512 * 14336; i++) hx[i] = (float)((int64_t)(next64() % 2001) - 1000) / 1000.0f;
        OKC(cmf_cuda_upload(d_x, hx, sizeof(float) * 512 * 14336, NULL));
        free(hx);
    }
    for (size_t di = 0; di < (only_i8 ? 0 : sizeof dts / sizeof *dts); di++) {
        tl += snprintf(table + tl, sizeof table - tl, "%-10s", cmf_dtype_name(dts[di]));
        for (int s = 0; s < 4; s++) {
            int64_t rows = shp[s][0], cols = shp[s][1];
            size_t nb = payload(dts[di], rows, cols);
            struct mv_arg m = {.x = d_x, .y = d_y};
            m.ncopy = (int)(((size_t)512 << 20) / nb + 1);
            if (m.ncopy > 8) m.ncopy = 8;
            for (int c = 0; c < m.ncopy; c++) m.w[c] = (cmf_cuda_weight){dts[di], rows, cols, upload_weight(dts[di], rows, cols, nb)};
            m.n = 1;
            double t1 = time_op(op_mv, &m, 20);
            m.n = 8;
            double t8 = time_op(op_mv, &m, 20);
            double g1 = (double)nb / (t1 * 1e-3) / 1e9, g8 = (double)nb / (t8 * 1e-3) / 1e9;
            tl += snprintf(table + tl, sizeof table - tl, " %6.0f (%3.0f%%) %6.1fus [%5.0f]", g1, 100 * g1 / copy_gbs, t1 * 1e3, g8);
            for (int c = 0; c < m.ncopy; c++) cmf_cuda_free((void *)m.w[c].d_data);
        }
        tl += snprintf(table + tl, sizeof table - tl, "\n");
    }

    /* int8 vs f32 activations (matvec_i8.cu vs matvec.cu), n = 1, Qwen3-0.6B and Llama-3.1-8B product shapes */
    static const int64_t ishp[][2] = {{1024, 1024}, {2048, 1024}, {3072, 1024}, {1024, 3072}, {4096, 4096},
                                      {14336, 4096}, {4096, 14336}, {128256, 4096}, {9728, 2560}, {2560, 9728}};
    static const int idts[] = {CMF_DT_Q8_ROW, CMF_DT_Q4TP};
    tl += snprintf(table + tl, sizeof table - tl, "\n== matvec n=1, int8 activations (dp4a) vs f32 activations: GB/s (%% of copy) us\n");
    for (size_t di = 0; di < 2; di++)
        for (int s = 0; s < (int)(sizeof ishp / sizeof *ishp); s++) {
            int64_t rows = ishp[s][0], cols = ishp[s][1];
            size_t nb = payload(idts[di], rows, cols);
            struct mv_arg m = {.x = d_x, .y = d_y, .n = 1};
            m.ncopy = (int)(((size_t)512 << 20) / nb + 1); /* small matrices: up to 96 copies, past the 60 MiB L2 */
            if (m.ncopy > 96) m.ncopy = 96;
            for (int c = 0; c < m.ncopy; c++) m.w[c] = (cmf_cuda_weight){idts[di], rows, cols, upload_weight(idts[di], rows, cols, nb)};
            double t[3], ts[4];
            cmf_cuda_set_i8_stream(0); /* i8 / i8x2 columns: the row-group kernel */
            for (int i8 = 0; i8 <= 2; i8++) { /* f32, one int8 level, two levels */
                cmf_cuda_set_i8act(i8);
                t[i8] = time_op(op_mv, &m, 20);
            }
            cmf_cuda_set_i8act(1);
            for (int sm = 1; sm <= 3; sm++) { /* the streaming kernel (matvec_i8s.cu); 2: + L2 prefetch; 3: + 1 block/SM */
                cmf_cuda_set_i8_stream(sm);
                ts[sm] = time_op(op_mv, &m, 20);
            }
            cmf_cuda_set_i8_stream(-1);
            double gi = (double)nb / (t[1] * 1e-3) / 1e9, gf = (double)nb / (t[0] * 1e-3) / 1e9;
            double g1 = (double)nb / (ts[1] * 1e-3) / 1e9, g2 = (double)nb / (ts[2] * 1e-3) / 1e9,
                   g3 = (double)nb / (ts[3] * 1e-3) / 1e9;
            tl += snprintf(table + tl, sizeof table - tl, "%-8s %6lldx%-6lld i8 %6.0f (%3.0f%%) %7.1fus   f32 %6.0f (%3.0f%%) %7.1fus   i8/f32 speed %.2fx   i8x2 %7.1fus   stream %6.0f (%3.0f%%) %7.1fus   stream2 %6.0f (%3.0f%%) %7.1fus   stream3 %6.0f (%3.0f%%) %7.1fus\n",
                           cmf_dtype_name(idts[di]), (long long)rows, (long long)cols, gi, 100 * gi / copy_gbs, t[1] * 1e3, gf,
                           100 * gf / copy_gbs, t[0] * 1e3, t[0] / t[1], t[2] * 1e3, g1, 100 * g1 / copy_gbs, ts[1] * 1e3,
                           g2, 100 * g2 / copy_gbs, ts[2] * 1e3, g3, 100 * g3 / copy_gbs, ts[3] * 1e3);
            for (int c = 0; c < m.ncopy; c++) cmf_cuda_free((void *)m.w[c].d_data);
        }

    /* one Llama-3.1-8B decode layer's int8-activation products as the decode step runs them (q/k/v multi 4096 + 1024
     * + 1024 rows, o 4096x4096, gate/up + GLU 2 x 14336x4096, down 4096x14336; n = 1), row-group kernel vs streaming
     * (modes 1-3): us each, and the layer's GB/s over the sum of the four (% of the copy) */
    tl += snprintf(table + tl, sizeof table - tl, "\n== Llama-8B layer products, n=1: us (GB/s) row-group | stream | stream2 | stream3\n");
    for (size_t di = 0; di < 2; di++) {
        const int dt = idts[di];
        static const int64_t lr[6][2] = {{4096, 4096}, {1024, 4096}, {1024, 4096}, {4096, 4096}, {14336, 4096}, {4096, 14336}};
        size_t lb[6], tot = 0;
        for (int i = 0; i < 6; i++) lb[i] = payload(dt, lr[i][0], lr[i][1]), tot += i == 4 ? 2 * lb[i] : lb[i];
        double sum[4] = {0, 0, 0, 0};
        const char *names[4] = {"qkv", "o", "gate/up+glu", "down"};
        for (int op = 0; op < 4; op++) {
            struct mv_arg m = {.x = d_x, .y = d_y, .n = 1};
            size_t bytes = op == 0 ? lb[0] + lb[1] + lb[2] : op == 1 ? lb[3] : op == 2 ? 2 * lb[4] : lb[5];
            m.ncopy = (int)(((size_t)512 << 20) / bytes + 1);
            int per = op == 0 ? 3 : op == 2 ? 2 : 1;
            if (m.ncopy * per > 96) m.ncopy = 96 / per;
            for (int c = 0; c < m.ncopy; c++)
                for (int k = 0; k < per; k++) {
                    const int li = op == 0 ? k : op == 1 ? 3 : op == 2 ? 4 : 5;
                    m.w[c * per + k] = (cmf_cuda_weight){dt, lr[li][0], lr[li][1], upload_weight(dt, lr[li][0], lr[li][1], lb[li])};
                }
            tl += snprintf(table + tl, sizeof table - tl, "%-6s %-12s", cmf_dtype_name(dt), names[op]);
            for (int sm = 0; sm <= 3; sm++) {
                cmf_cuda_set_i8_stream(sm);
                double t = time_op(op == 0 ? op_multi : op == 2 ? op_glu : op_mv, &m, 20);
                sum[sm] += t;
                tl += snprintf(table + tl, sizeof table - tl, " %7.1fus (%5.0f)", t * 1e3, (double)bytes / (t * 1e-3) / 1e9);
            }
            cmf_cuda_set_i8_stream(-1);
            tl += snprintf(table + tl, sizeof table - tl, "\n");
            for (int c = 0; c < m.ncopy * per; c++) cmf_cuda_free((void *)m.w[c].d_data);
        }
        tl += snprintf(table + tl, sizeof table - tl, "%-6s %-12s", cmf_dtype_name(dt), "layer");
        for (int sm = 0; sm <= 3; sm++)
            tl += snprintf(table + tl, sizeof table - tl, " %7.1fus (%5.0f, %3.0f%%)", sum[sm] * 1e3, (double)tot / (sum[sm] * 1e-3) / 1e9,
                           100.0 * (double)tot / (sum[sm] * 1e-3) / 1e9 / copy_gbs);
        tl += snprintf(table + tl, sizeof table - tl, "\n");
    }

    if (only_mv) {
        fputs(table, stdout);
        return 0;
    }

    /* GEMM */
    cmf_cuda_ctx *ctx;
    OKC(cmf_cuda_ctx_create(&ctx, (size_t)512 << 20));
    tl += snprintf(table + tl, sizeof table - tl, "\n== prefill GEMM TFLOP/s (2*rows*cols*n / time)\n%-10s %-12s %5s %10s %10s\n", "dtype", "shape", "n", "cublas", "tiled");
    static const int gdts[] = {CMF_DT_F16, CMF_DT_BF16, CMF_DT_Q8_ROW, CMF_DT_Q4_TILED, CMF_DT_Q4TP};
    static const int64_t gn[] = {64, 512};
    for (size_t di = 0; di < sizeof gdts / sizeof *gdts; di++)
        for (int s = 0; s < 2; s++)
            for (int ni = 0; ni < 2; ni++) {
                if (quick && di > 1) continue;
                int64_t rows = shp[s][0], cols = shp[s][1];
                size_t nb = payload(gdts[di], rows, cols);
                struct mv_arg m = {.x = d_x, .y = d_y, .ctx = ctx, .ncopy = 2, .n = (int)gn[ni]};
                for (int c = 0; c < 2; c++) m.w[c] = (cmf_cuda_weight){gdts[di], rows, cols, upload_weight(gdts[di], rows, cols, nb)};
                double fl = 2.0 * rows * cols * gn[ni];
                m.algo = CMF_CUDA_GEMM_CUBLAS;
                double tb = time_op(op_gemm, &m, 5);
                m.algo = CMF_CUDA_GEMM_TILED;
                double tt = time_op(op_gemm, &m, 5);
                tl += snprintf(table + tl, sizeof table - tl, "%-10s %5lldx%-6lld %5lld %10.1f %10.1f   (%.3f ms vs %.3f ms)\n",
                               cmf_dtype_name(gdts[di]), (long long)rows, (long long)cols, (long long)gn[ni],
                               fl / (tb * 1e-3) / 1e12, fl / (tt * 1e-3) / 1e12, tb, tt);
                for (int c = 0; c < 2; c++) cmf_cuda_free((void *)m.w[c].d_data);
            }
    cmf_cuda_ctx_free(ctx);

    /* attention decode, Llama-3-8B shape: 32 heads, 8 KV heads, head_dim 128 */
    tl += snprintf(table + tl, sizeof table - tl, "\n== attention (H=32, KV=8, D=128, f16 KV cache)\n%-28s %10s %10s\n", "case", "time us", "KV GB/s");
    static const int64_t ctxs[] = {1024, 8192, 32768};
    struct at_arg at = {.a = {32, 8, 128, 0.08838834764831845f, 0.0f, 0, CMF_CUDA_KV_F16}};
    size_t kvb = (size_t)32768 * 8 * 128 * 2;
    OKC(cmf_cuda_malloc((void **)&at.k, kvb));
    OKC(cmf_cuda_malloc((void **)&at.v, kvb));
    for (size_t i = 0; i < kvb; i += 2) { uint16_t h = (uint16_t)(next64() & 0x3bff); memcpy(g_host + i, &h, 2); }
    OKC(cmf_cuda_upload(at.k, g_host, kvb, NULL));
    OKC(cmf_cuda_upload(at.v, g_host + 2, kvb - 2, NULL));
    OKC(cmf_cuda_malloc((void **)&at.q, sizeof(float) * 512 * 32 * 128));
    OKC(cmf_cuda_malloc((void **)&at.o, sizeof(float) * 512 * 32 * 128));
    OKC(cmf_cuda_upload(at.q, g_host, sizeof(float) * 32 * 128, NULL));
    OKC(cmf_cuda_memset(at.q, 0x3c, sizeof(float) * 512 * 32 * 128, NULL));
    OKC(cmf_cuda_malloc(&at.work, cmf_cuda_attn_decode_work_bytes(&at.a, 32768)));
    OKC(cmf_cuda_memset(at.work, 0, cmf_cuda_attn_decode_work_bytes(&at.a, 32768), NULL));
    for (int c = 0; c < 3; c++) {
        at.pos = ctxs[c] - 1;
        double t = time_op(op_attn, &at, 20);
        double bytes = 2.0 * (double)ctxs[c] * 8 * 128 * 2;
        tl += snprintf(table + tl, sizeof table - tl, "decode ctx %-17lld %10.1f %10.0f\n", (long long)ctxs[c], t * 1e3, bytes / (t * 1e-3) / 1e9);
    }
    OKC(cmf_cuda_memset(at.q, 0x1e, sizeof(float) * 512 * 32 * 128, NULL)); /* small finite floats */
    at.pos = 512;
    double tp = time_op(op_prefill, &at, 3);
    tl += snprintf(table + tl, sizeof table - tl, "prefill 512 tokens (causal)  %10.1f %10s  (%.1f TFLOP/s)\n", tp * 1e3, "-",
                   4.0 * 32 * 128 * (512.0 * 513 / 2) / (tp * 1e-3) / 1e12);

    /* sampling over a Llama-3 vocabulary */
    void *sw;
    OKC(cmf_cuda_malloc(&sw, cmf_cuda_sample_work_bytes(128256)));
    OKC(cmf_cuda_memset(sw, 0, cmf_cuda_sample_work_bytes(128256), NULL)); /* block counters start at 0 */
    cudaEvent_t a, b;
    CU(cudaEventCreate(&a));
    CU(cudaEventCreate(&b));
    int32_t id;
    for (int i = 0; i < 3; i++) OKC(cmf_cuda_argmax(at.q, 128256, &id, sw, NULL));
    CU(cudaEventRecord(a, 0));
    for (int i = 0; i < 50; i++) OKC(cmf_cuda_argmax(at.o, 128256, &id, sw, NULL));
    CU(cudaEventRecord(b, 0));
    CU(cudaEventSynchronize(b));
    float ms_am;
    CU(cudaEventElapsedTime(&ms_am, a, b));
    CU(cudaEventRecord(a, 0));
    for (int i = 0; i < 20; i++) OKC(cmf_cuda_sample_topk_topp(at.o, 128256, 40, 0.9f, 0.8f, 0.37f, &id, sw, NULL));
    CU(cudaEventRecord(b, 0));
    CU(cudaEventSynchronize(b));
    float ms_tk;
    CU(cudaEventElapsedTime(&ms_tk, a, b));
    uint64_t *d_keys = NULL, h_keys[40]; /* cmf_session_sample's top-k: 40 keys back, the host finishes */
    CU(cudaEventRecord(a, 0));
    for (int i = 0; i < 20; i++) {
        OKC(cmf_cuda_topk_keys(at.o, 128256, 40, 0.8f, sw, NULL, &d_keys));
        OKC(cmf_cuda_download(h_keys, d_keys, sizeof h_keys, NULL));
        OKC(cmf_cuda_sync(NULL));
    }
    CU(cudaEventRecord(b, 0));
    CU(cudaEventSynchronize(b));
    float ms_keys;
    CU(cudaEventElapsedTime(&ms_keys, a, b));
    tl += snprintf(table + tl, sizeof table - tl, "\n== sampling over 128256 logits (incl. the 4-byte download + sync)\nargmax %.1f us, top-k 40 / top-p 0.9 %.1f us, top-k 40 keys (+ 320-byte download) %.1f us\n",
                   ms_am * 1e3 / 50, ms_tk * 1e3 / 20, ms_keys * 1e3 / 20);
    fputs(table, stdout);
    return 0;
}
