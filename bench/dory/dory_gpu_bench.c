/* dory_gpu_bench.c — speed of a Dory CMF file on CUDA (or the CPU with --cpu), one process, batch 1:
 *   dory_gpu_bench MODEL.cmf [-p 512] [-g 32] [-c 128] [-r 3] [--loops L] [--cpu] [-t THREADS] [--label NAME]
 * prints "RESULT model=NAME test=... tps=MEAN sd=SD ..." lines:
 *   - ppP: P random tokens in one chunk from an empty KV cache (one warm-up call, then r timed ones);
 *   - tg@C-graph / tg@C-eager: G single-token decode steps after a C-token prefill, tokens/s over the G steps
 *     (4 untimed steps first, so the segment graphs are captured); the same session with CUDA graphs on, then off
 *     (cmf_dory_cuda_set_graphs), so both rows come from one process;
 *   - tg@C-conf: the same steps through the Conf gate (cmf_dory_decode_gated, threshold 0.5; on random weights no
 *     token exits, so this is the two-pass cost plus the read-out after pass 1);
 * plus, once, "RESULT ... test=roofline": the weight bytes one decode token reads (every product it runs: the input
 * and output blocks once, the recurrent block `loops` times, lm_head; the embedding row is left out) and the
 * device-to-device copy bandwidth measured in this process (bytes read + written / time, 1 GiB, as
 * bench/cuda/gpu_bench.c), so roofline t/s = bandwidth / bytes per token comes from the same call. Each tg row
 * carries its share of that roofline. Sessions: last_loop when the file's mode is (random 4B files from
 * make_random_dory are), loops from the file unless --loops. Timing: host clock around whole calls; each call ends
 * with the logits download and a stream sync. Token ids uniform random (fixed seed). Not a test. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cmf.h"
#include "format/format.h"
#include "model/dory.h"
#include "quant/dtype.h"
#ifdef CMF_HAVE_CUDA
#include "backend/cuda/cuda_ops.h"
#endif

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static uint64_t g_rng = 0x2545f4914f6cdd1dull;
static int32_t rand_tok(int v) {
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return (int32_t)(g_rng % (uint64_t)v);
}

static int fail(const char *what) {
    fprintf(stderr, "dory_gpu_bench: %s: %s\n", what, cmf_last_error());
    return 1;
}

static void mean_sd(const double *v, int n, double *mean, double *sd) {
    double s = 0, q = 0;
    for (int i = 0; i < n; i++) s += v[i];
    *mean = s / n;
    for (int i = 0; i < n; i++) q += (v[i] - *mean) * (v[i] - *mean);
    *sd = n > 1 ? __builtin_sqrt(q / (n - 1)) : 0;
}

/* Device-to-device copy in GB/s (read + write): 1 GiB, 3 warm-up copies, then 10 timed; 0 without CUDA. */
static double copy_gbs(void) {
#ifdef CMF_HAVE_CUDA
    const size_t bytes = (size_t)1 << 30;
    void *a = NULL, *b = NULL;
    double gbs = 0;
    if (cmf_cuda_malloc(&a, bytes) == CMF_OK && cmf_cuda_malloc(&b, bytes) == CMF_OK &&
        cmf_cuda_memset(a, 0x3c, bytes, NULL) == CMF_OK) {
        for (int i = 0; i < 3; i++) cmf_cuda_copy(b, a, bytes, NULL);
        cmf_cuda_sync(NULL);
        const double t0 = now();
        for (int i = 0; i < 10; i++) cmf_cuda_copy(b, a, bytes, NULL);
        if (cmf_cuda_sync(NULL) == CMF_OK) gbs = 2.0 * 10 * (double)bytes / (now() - t0) / 1e9;
    }
    cmf_cuda_free(a);
    cmf_cuda_free(b);
    return gbs;
#else
    return 0;
#endif
}

static double weight_bytes(const cmf_weight *w) {
    const uint32_t shape[2] = {(uint32_t)w->rows, (uint32_t)w->cols};
    uint64_t nb = 0;
    return w->data && cmf_dtype_nbytes(w->dtype, 2, shape, &nb) == 1 ? (double)nb : 0;
}

/* Bytes of the products one decode token runs at `loops` loops (see the file comment). */
static double bytes_per_token(const cmf_dory *d, int loops) {
    const cmf_dory_config *c = &d->cfg;
    double b = weight_bytes(&d->lm_head);
    for (int l = 0; l < c->n_layers; l++) {
        const cmf_dory_layer *L = &d->layers[l];
        const cmf_weight *w[] = {&L->wq, &L->wk, &L->wv, &L->wg, &L->wo, &L->w_gate, &L->w_up, &L->w_down};
        double lb = 0;
        for (int i = 0; i < 8; i++) lb += weight_bytes(w[i]);
        b += lb * (l >= c->n_input && l < c->n_input + c->n_recurrent ? loops : 1);
    }
    return b;
}

enum { MODE_FORWARD = 0, MODE_CONF = 1 };

/* r runs of: reset, prefill ctx tokens, 4 untimed steps, g timed steps; tokens/s of the timed steps into tps[]. */
static int decode_runs(cmf_dory_state *s, const int32_t *ids, int ctx, int g, int r, int loops, int mode, double *tps) {
    for (int k = 0; k < r; k++) {
        cmf_dory_state_reset(s);
        if (ctx > 0 && cmf_dory_forward(s, ids, ctx, loops, NULL) != CMF_OK) return fail("prefill");
        double t0 = 0;
        for (int i = 0; i < 4 + g; i++) {
            if (i == 4) t0 = now();
            const int32_t tok = ids[ctx + i];
            cmf_status st = mode == MODE_CONF ? cmf_dory_decode_gated(s, tok, 0.5f, NULL)
                                              : cmf_dory_forward(s, &tok, 1, loops, NULL);
            if (st != CMF_OK) return fail("decode");
        }
        tps[k] = g / (now() - t0);
    }
    return 0;
}

int main(int argc, char **argv) {
    const char *path = NULL, *label = NULL;
    int P = 512, G = 32, C = 128, R = 3, loops = 0, cpu = 0, threads = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-p") && i + 1 < argc) P = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-g") && i + 1 < argc) G = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-c") && i + 1 < argc) C = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-r") && i + 1 < argc) R = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-t") && i + 1 < argc) threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--loops") && i + 1 < argc) loops = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--label") && i + 1 < argc) label = argv[++i];
        else if (!strcmp(argv[i], "--cpu")) cpu = 1;
        else path = argv[i];
    }
    if (!path || P < 0 || G < 0 || C < 0 || R < 1 || R > 64 || loops < 0) {
        fprintf(stderr, "usage: dory_gpu_bench MODEL.cmf [-p 512] [-g 32] [-c 128] [-r 3] [--loops L] [--cpu] "
                        "[-t THREADS] [--label NAME]\n");
        return 2;
    }
    if (!label) label = path;
    cmf_file *f = NULL;
    cmf_dory *d = NULL;
    double t0 = now();
    if (cmf_file_open(path, &f) != CMF_OK || cmf_dory_load(f, threads, &d) != CMF_OK) return fail(path);
    if (!cpu && cmf_dory_use_backend(d, "cuda") != CMF_OK) return fail("cuda");
    const cmf_dory_config *c = &d->cfg;
    if (!loops) loops = c->n_loops;
    const int V = c->vocab_size;
    printf("loaded %s on %s in %.1f s: hidden %d, %d sub-layers (%d/%d/%d), loops %d, kv %s\n", label,
           cmf_dory_backend(d), now() - t0, c->hidden_size, c->n_layers, c->n_input, c->n_recurrent, c->n_output,
           loops, c->kv_mode == CMF_DORY_KV_LAST_LOOP ? "last_loop" : "per_loop");
    const double bpt = bytes_per_token(d, loops), gbs = cpu ? 0 : copy_gbs(), roof = gbs > 0 ? gbs * 1e9 / bpt : 0;
    printf("RESULT model=%s test=roofline bytes_per_token=%.4g copy_gbs=%.0f roofline_tps=%.1f\n", label, bpt, gbs,
           roof);
    const int n_ids = (P > C + 4 + G ? P : C + 4 + G) + 1;
    int32_t *ids = malloc((size_t)n_ids * sizeof(int32_t));
    double *v = malloc((size_t)R * sizeof(double));
    if (!ids || !v) return 1;
    for (int i = 0; i < n_ids; i++) ids[i] = rand_tok(V);
    double mean, sd;
    int rc = 0;
    if (P > 0) {
        cmf_dory_state *s = NULL;
        if (cmf_dory_state_new(d, P + 8, P, -1, 0, &s) != CMF_OK) return fail("pp session");
        for (int k = -1; k < R && !rc; k++) { /* k = -1: warm-up */
            cmf_dory_state_reset(s);
            const double t = now();
            if (cmf_dory_forward(s, ids, P, loops, NULL) != CMF_OK) rc = fail("prefill");
            if (k >= 0) v[k] = P / (now() - t);
        }
        if (!rc) {
            mean_sd(v, R, &mean, &sd);
            printf("RESULT model=%s test=pp%d loops=%d tps=%.1f sd=%.1f\n", label, P, loops, mean, sd);
        }
        cmf_dory_state_free(s);
    }
    if (G > 0 && !rc) {
        cmf_dory_state *s = NULL;
        if (cmf_dory_state_new(d, C + 4 + G + 8, C > 0 ? C : 1, -1, 0, &s) != CMF_OK) return fail("tg session");
        const char *names[] = {"graph", "eager", "conf"};
        for (int m = 0; m < 3 && !rc; m++) {
            if (cpu && m == 1) continue; /* no graphs on the cpu: one forward row */
#ifdef CMF_HAVE_CUDA
            cmf_dory_cuda_set_graphs(d, m != 1);
#endif
            if (m == 2 && s->kv_mode != CMF_DORY_KV_LAST_LOOP) continue; /* the gate needs last_loop */
            rc = decode_runs(s, ids, C, G, R, loops, m == 2 ? MODE_CONF : MODE_FORWARD, v);
            if (rc) break;
            mean_sd(v, R, &mean, &sd);
            printf("RESULT model=%s test=tg@%d-%s loops=%d tps=%.1f sd=%.1f ms_per_token=%.3f roofline_pct=%.1f\n",
                   label, C, m == 2 ? "conf" : cpu ? "cpu" : names[m], loops, mean, sd, 1e3 / mean,
                   roof > 0 ? 100 * mean / roof : 0);
        }
        cmf_dory_state_free(s);
    }
#ifdef CMF_HAVE_CUDA
    uint64_t cap = 0, rep = 0;
    cmf_dory_cuda_graph_stats(d, &cap, &rep);
    printf("graphs: %llu captured, %llu replayed\n", (unsigned long long)cap, (unsigned long long)rep);
#endif
    free(ids);
    free(v);
    cmf_dory_free(d);
    cmf_file_close(f);
    return rc;
}
