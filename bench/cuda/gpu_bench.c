/* gpu_bench.c — the acceptance benchmark of the CUDA backend (bench/cuda/run_acceptance.sh) on one CMF file:
 *   gpu_bench MODEL.cmf [-p 512] [-g 64] [-c 128,4096] [-r 3] [--no-graph] [--cache-type f16|f32] [--tg-row]
 * prints one line per test, "RESULT key=value ...":
 *   - ppP: P random tokens in one prefill from an empty KV cache, tokens/s (one warm-up, then r timed runs);
 *   - tg@C: G single-token decode steps after a C-token prefill (decode "at context C"), tokens/s over the G
 *     steps only; 4 untimed decode steps come first (positions C..C+3), so the step's CUDA graph is captured;
 * plus, once: the weight bytes one decode token reads (every 2-D matrix of the file: the layers' products and the
 * head; the embedding only when it is the tied head) and the device-to-device copy bandwidth measured now (bytes
 * read + written / time, as the 4,272 GB/s), so that the roofline (bandwidth / bytes per token) comes
 * from the same call. Token ids are uniform random (fixed seed), except in tg: each step's greedy token
 * (cmf_session_sample: the argmax on the device, only the id downloaded, which synchronizes) is the next step's
 * token, as a greedy generation runs; --tg-row gives the behaviour before 2026-11-30 instead: random tokens and
 * the whole logits row downloaded every step (cmf_session_logits). Timing: wall clock around whole calls (a pp
 * run ends with cmf_session_logits, which waits for the device). --no-graph turns decode-step CUDA graphs off
 * (the same as CMF_CUDA_GRAPH=0). Runs on the GPU (cmf_model_load_on "cuda"); an error without one.
 * CMF_TPROF=1 with a build configured with -DCMAKE_CUDA_FLAGS=-DCMF_CUDA_TPROF=1: after each tg@C, two more decode
 * steps, the second one's kernel timeline printed as "TPROF" lines (tprof_sum.c). */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cmf.h"
#include "format/format.h"
#ifdef CMF_HAVE_CUDA
#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/persist.h"
#include "tprof_sum.h"
#include "model/model.h"
#endif

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static uint64_t rng = 0x853c49e6748fea9bull;
static int32_t rand_tok(int v) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (int32_t)(rng % (uint64_t)v);
}

static int fail(const char *what) {
    fprintf(stderr, "gpu_bench: %s: %s\n", what, cmf_last_error());
    return 1;
}

static void stats(const double *v, int n, double *mean, double *sd) {
    double s = 0, q = 0;
    for (int i = 0; i < n; i++) s += v[i];
    *mean = s / n;
    for (int i = 0; i < n; i++) q += (v[i] - *mean) * (v[i] - *mean);
    *sd = n > 1 ? __builtin_sqrt(q / (n - 1)) : 0;
}

/* Device-to-device copy bandwidth in GB/s (read + write), 1 GiB buffers, the mean of 10 copies after 3 warm-ups. */
static double copy_gbs(void) {
#ifdef CMF_HAVE_CUDA
    const size_t bytes = (size_t)1 << 30;
    void *a = NULL, *b = NULL;
    if (cmf_cuda_malloc(&a, bytes) != CMF_OK || cmf_cuda_malloc(&b, bytes) != CMF_OK) {
        cmf_cuda_free(a);
        return 0;
    }
    cmf_cuda_memset(a, 1, bytes, NULL);
    for (int i = 0; i < 3; i++) cmf_cuda_copy(b, a, bytes, NULL);
    cmf_cuda_sync(NULL);
    const double t0 = now();
    for (int i = 0; i < 10; i++) cmf_cuda_copy(b, a, bytes, NULL);
    cmf_cuda_sync(NULL);
    const double t = now() - t0;
    cmf_cuda_free(a);
    cmf_cuda_free(b);
    return 2.0 * 10 * (double)bytes / t / 1e9;
#else
    return 0;
#endif
}

int main(int argc, char **argv) {
    cmf_model_params mp = {0};
    const char *path = NULL;
    int P = 512, G = 64, R = 3, graphs = 1, tg_row = 0;
    char ctxs[256] = "128,4096";
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-p") && i + 1 < argc) P = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-g") && i + 1 < argc) G = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-r") && i + 1 < argc) R = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-c") && i + 1 < argc) snprintf(ctxs, sizeof ctxs, "%s", argv[++i]);
        else if (!strcmp(argv[i], "--no-graph")) graphs = 0;
        else if (!strcmp(argv[i], "--tg-row")) tg_row = 1;
        else if (!strcmp(argv[i], "--cache-type") && i + 1 < argc)
            mp.cache_type = !strcmp(argv[++i], "f32") ? CMF_CACHE_F32 : CMF_CACHE_F16;
        else path = argv[i];
    }
    if (!path || P < 0 || G < 1 || R < 1 || R > 64) {
        fprintf(stderr, "usage: gpu_bench MODEL.cmf [-p 512] [-g 64] [-c 128,4096] [-r 3] [--no-graph] [--tg-row]\n");
        return 2;
    }
    /* weight bytes per decode token, from the file's directory */
    cmf_file *f = NULL;
    if (cmf_file_open(path, &f) != CMF_OK) return fail(path);
    double wbytes = 0, embed = 0;
    int has_head = 0;
    for (size_t i = 0; i < f->n_tensors; i++) {
        const cmf_tensor *t = &f->tensors[i];
        if (t->ndim != 2) continue;
        if (!strcmp(t->name, "model.embed_tokens.weight")) embed = (double)t->nbytes;
        else wbytes += (double)t->nbytes;
        if (!strcmp(t->name, "lm_head.weight")) has_head = 1;
    }
    if (!has_head) wbytes += embed;
    const cJSON *qt = cJSON_GetObjectItemCaseSensitive(f->header, "quant_type");
    char label[32];
    snprintf(label, sizeof label, "%s", cJSON_IsString(qt) ? qt->valuestring : "?");
    cmf_file_close(f);

    const double bw = copy_gbs();
    cmf_model *m = NULL;
    if (cmf_model_load_on(path, &mp, "cuda", &m) != CMF_OK) return fail("load on cuda");
#ifdef CMF_HAVE_CUDA
    cmf_backend_cuda_set_graphs(m->be, graphs);
#endif
    const int V = cmf_model_vocab_size(m);
    int maxc = P;
    for (const char *c = ctxs; *c;) {
        int v = atoi(c);
        if (v + G + 8 > maxc) maxc = v + G + 8;
        const char *comma = strchr(c, ',');
        if (!comma) break;
        c = comma + 1;
    }
    cmf_session *s = NULL;
    if (cmf_session_new(m, maxc, &s) != CMF_OK) return fail("session");
    cmf_sampler_params gp = cmf_sampler_default_params();
    gp.temperature = 0.0f; /* greedy, no penalties */
    gp.penalty_last_n = 0;
    cmf_sampler *greedy = NULL;
    if (cmf_sampler_new(V, &gp, &greedy) != CMF_OK) return fail("sampler");
    int32_t *buf = malloc(sizeof(int32_t) * (size_t)maxc);
    double t[64], mean, sd;
    printf("RESULT model=%s quant=%s weights_gb=%.4f copy_gbs=%.1f graphs=%d\n", path, label, wbytes / 1e9, bw, graphs);
    if (P > 0) {
        for (int r = -1; r < R; r++) {
            for (int i = 0; i < P; i++) buf[i] = rand_tok(V);
            cmf_session_reset(s);
            const double t0 = now();
            if (cmf_session_prefill(s, buf, P, NULL) != CMF_OK) return fail("prefill");
            if (!cmf_session_logits(s)) return fail("logits"); /* waits for the device, as the old head did */
            if (r >= 0) t[r] = P / (now() - t0);
        }
        stats(t, R, &mean, &sd);
        printf("RESULT model=%s test=pp%d tps=%.2f sd=%.2f\n", path, P, mean, sd);
    }
    for (const char *c = ctxs; *c;) {
        const int C = atoi(c);
        for (int r = 0; r < R; r++) {
            cmf_session_reset(s);
            for (int i = 0; i < C; i++) buf[i] = rand_tok(V);
            if (C > 0 && cmf_session_prefill(s, buf, C, NULL) != CMF_OK) return fail("prefill");
            int32_t tok = rand_tok(V);
            double t0 = 0;
            for (int i = -4; i < G; i++) { /* 4 untimed steps first */
                if (i == 0) t0 = now();
                if (cmf_session_decode(s, tok) != CMF_OK) return fail("decode");
                if (tg_row) {
                    if (!cmf_session_logits(s)) return fail("logits");
                    tok = rand_tok(V);
                } else if (cmf_session_sample(s, greedy, &tok) != CMF_OK) {
                    return fail("sample");
                }
            }
            t[r] = G / (now() - t0);
        }
        stats(t, R, &mean, &sd);
        printf("RESULT model=%s test=tg@%d tps=%.2f sd=%.2f\n", path, C, mean, sd);
#ifdef CMF_HAVE_CUDA
        if (getenv("CMF_TPROF") && atoi(getenv("CMF_TPROF")) == 1) { /* one more step's kernel timeline */
            int32_t tok = rand_tok(V);
            if (cmf_cuda_tprof_start() != CMF_OK) return fail("tprof_start");
            if (cmf_session_decode(s, tok) != CMF_OK || !cmf_session_logits(s)) return fail("decode");
            if (cmf_cuda_tprof_start() != CMF_OK) return fail("tprof_start"); /* the next step only */
            if (cmf_session_decode(s, tok) != CMF_OK || !cmf_session_logits(s)) return fail("decode");
            const int64_t cap = 1 << 20;
            cmf_cuda_tprec *rec = malloc(sizeof *rec * (size_t)cap);
            const int64_t n = rec ? cmf_cuda_tprof_read(rec, cap) : -1;
            char label[64];
            snprintf(label, sizeof label, "tg@%d", C);
            if (n < 0 || tprof_print(rec, n < cap ? n : cap, label) != 0) return fail("tprof_read");
            free(rec);
        }
#endif
        const char *comma = strchr(c, ',');
        if (!comma) break;
        c = comma + 1;
    }
#ifdef CMF_HAVE_CUDA
    uint64_t cap = 0, rep = 0;
    cmf_backend_cuda_graph_stats(m->be, &cap, &rep);
    printf("RESULT model=%s graphs_captured=%llu graphs_replayed=%llu persist_steps=%llu\n", path,
           (unsigned long long)cap, (unsigned long long)rep, (unsigned long long)cmf_backend_cuda_persist_steps(m->be));
    double us[21]; /* CMF_CUDA_PERSIST_PROF=1: the last persistent step's stages (persist.h) */
    if (cmf_backend_cuda_persist_profile(m->be, us)) {
        printf("RESULT model=%s persist_us", path);
        static const char *ST[5] = {"A", "B", "C", "D", "E"};
        for (int i = 0; i < 5; i++)
            printf(" %s:work=%.2f,max=%.2f,barrier=%.2f,spread=%.2f", ST[i], us[4 * i], us[4 * i + 1], us[4 * i + 2],
                   us[4 * i + 3]);
        printf(" stack=%.1f\n", us[20]);
    }
#endif
    fflush(stdout);
    free(buf);
    cmf_sampler_free(greedy);
    cmf_session_free(s);
    cmf_model_free(m);
    return 0;
}
