/* The CUDA backend against the CPU backend on the same CMF files: the hf-tiny checkpoints of shared/data (llama,
 * mistral-swa, qwen2, qwen3, gemma2, bf16-llama) converted here at f16 and q8_row, and every input_i sequence of
 * their ref.safetensors:
 *  - prefill logits at every position within BOUND x max|CPU logit|, and 24 greedy decode steps: each step's
 *    logits within the same bound and the greedy tokens identical (the strict check), near-ties excepted: when the two forwards pick different tokens, the CPU's logit of the GPU's pick must lie
 *    within BOUND x max|logit| of its best, and both continue with the CPU's token.
 *    BOUND, from the H200 run of 2026-11-29 19:17 UTC (bench/cuda/RESULTS.md; fixtures plus 2 seeded random
 *    sequences per checkpoint): f16 weights measured 2.3e-3 (qwen3) .. 4.4e-3 (llama), bound 6e-3; q8_row 3.4e-3 ..
 *    6.7e-3 (qwen2), bound 1e-2; gemma2 3.3e-2 (f16) and 4.4e-2 (q8_row), bound 6e-2 (its random weights are
 *    unusually sensitive, see tests/model/test_hf_parity.c). The task's 2e-3 is NOT met for f16 weights. Sources:
 *    the f16 KV cache (the CPU keeps f32), f16 operands in the cuBLAS prefill GEMM (the "f32-prefill" pass runs the
 *    same fixture with CMF_CUDA_EXACT_PREFILL=1 to separate the two). Bounds are ~1.4x the measurements, so a
 *    regression in any op still fails.
 *    The CPU side is the f32 reference path (cmf_cpu_set_path(CMF_CPU_F32REF): decoded weights, f32 activations),
 *    as the GPU kernels compute. Until 2026-11-29 21:48 the CPU's default int8 kernels quantized activations in two
 *    levels (close to f32); since commit c67628f they use one level, and the H200 run of 22:03 UTC measured q8_row
 *    GPU vs that CPU path at 3.5e-2 .. 1.1e-1 (gemma2 5.2e-1) with f16 unchanged; CPU default vs CPU f32ref on
 *    input_0 alone is 3.5e-2 (llama), 3.1e-2 (qwen3), 8.3e-2 (gemma2) (measured on the CPU), i.e. the CPU's own
 *    activation error. Since 2026-11-30 the GPU's q8_row decode products use int8 activations too (matvec_i8.cu):
 *    the q8_row bound is now 1.2e-1 (gemma2 4e-1), set in main from the H200 measurement; the "f32-act" and
 *    "i8x2-act" passes keep the 1e-2 check of the f32-activation and two-level kernels;
 *  - f16 weights with the f32 KV cache (cmf_model_params.cache_type = CMF_CACHE_F32): fixtures and 2 random
 *    sequences within the task's 2e-3 (measured 2.4e-6 .. 5.5e-6, gemma2 1.4e-5 against its own 6e-2);
 *  - q8_row with the opt-in f16 weight cache of prefill GEMMs (CMF_CUDA_F16_CACHE=1) on a 24-token random prompt,
 *    same bound (not yet run on a GPU);
 *  - CUDA graphs: the same greedy run with decode-step graphs on and off gives bit-identical logits, and the graphs
 *    are really captured and replayed (check_graphs; with CMF_CUDA_PERSIST=1 the one-token steps of the models the
 *    persistent kernel takes run through it instead, and must equal the eager launches too);
 *  - a continuous batch of two sessions (one decode token each, then one prefill chunk next to one decode token)
 *    through cmf_batch_run, against the same batch on the CPU;
 *  - refusals: the O(1) far field on the GPU is CMF_E_UNSUPPORTED.
 * Without a usable CUDA device (CI): checks that "cuda" is a clear CMF_E_UNSUPPORTED error, that "auto" falls back
 * to the CPU, then exits 77 (ctest SKIP). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmf.h"
#include "convert/convert.h"
#include "convert/safetensors.h"
#include "quant/dtype.h"
#include "testutil.h"
#include "backend/cpu/ops.h"
#ifdef CMF_HAVE_CUDA
#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/persist.h"
#include "model/model.h"
#endif

static const char *CASES[] = {"llama", "mistral-swa", "qwen2", "qwen3", "gemma2", "bf16-llama"};
enum { N_GREEDY = 24, N_CTX = 256 };
static float g_worst = 0;                 /* worst relative difference of the current checkpoint */
static float BOUND = 6e-3f;               /* set per case in main (see the header comment) */

static uint64_t g_rng = 0x2545f4914f6cdd1dull; /* fixed seed: the random inputs are the same every run */
static uint64_t rng_next(void) {
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return g_rng;
}

/* Prefill + greedy decode of one sequence on both backends. */
static void check_sequence(const char *label, cmf_model *cpu, cmf_model *gpu, const int32_t *ids, int n) {
    const int V = cmf_model_vocab_size(cpu);
    cmf_session *sc = NULL, *sg = NULL;
    float *lc = malloc((size_t)n * V * sizeof(float)), *lg = malloc((size_t)n * V * sizeof(float));
    cmf_status a = cmf_session_new(cpu, N_CTX, &sc), b = cmf_session_new(gpu, N_CTX, &sg);
    CHECK_MSG(a == CMF_OK && b == CMF_OK, "%s: sessions: %s", label, cmf_last_error());
    if (a == CMF_OK && b == CMF_OK) {
        a = cmf_session_prefill(sc, ids, n, lc);
        b = cmf_session_prefill(sg, ids, n, lg);
        CHECK_MSG(a == CMF_OK && b == CMF_OK, "%s: prefill: %s", label, cmf_last_error());
    }
    if (a == CMF_OK && b == CMF_OK) {
        float worst = cmf_test_rel_diff(lc, lg, (size_t)n * V);
        CHECK_MSG(worst <= BOUND, "%s: prefill (%d tokens) max|gpu-cpu|/max|logit| = %.3e > %.1e", label, n, worst,
                  BOUND);
        worst = cmf_test_rel_diff(cmf_session_logits(sc), cmf_session_logits(sg), (size_t)V);
        CHECK_MSG(worst <= BOUND, "%s: last-token logits %.3e", label, worst);
        float dec_worst = 0;
        int steps = 0;
        int ties = 0;
        for (int g = 0; g < N_GREEDY; g++) {
            const float *lcpu = cmf_session_logits(sc);
            const int tc = cmf_test_argmax(lcpu, V), tg = cmf_test_argmax(cmf_session_logits(sg), V);
            if (tc != tg) {
                /* a near-tie: the CPU ranks the GPU's pick within the logit bound of its own best, so the two
                 * forwards may order them either way; both continue with the CPU's token */
                float mx = 0;
                for (int i = 0; i < V; i++) mx = fabsf(lcpu[i]) > mx ? fabsf(lcpu[i]) : mx;
                const float gap = lcpu[tc] - lcpu[tg];
                CHECK_MSG(gap <= BOUND * mx, "%s: greedy token %d: gpu %d, cpu %d (cpu logit gap %.3e of max %.3e)",
                          label, g, tg, tc, gap, mx);
                if (gap > BOUND * mx) break;
                ties++;
            }
            a = cmf_session_decode(sc, tc);
            b = cmf_session_decode(sg, tc);
            if (a != CMF_OK || b != CMF_OK) {
                CHECK_MSG(0, "%s: decode step %d: %s", label, g, cmf_last_error());
                break;
            }
            const float d = cmf_test_rel_diff(cmf_session_logits(sc), cmf_session_logits(sg), (size_t)V);
            CHECK_MSG(d <= BOUND, "%s: decode step %d: %.3e > %.1e", label, g, d, BOUND);
            if (d > dec_worst) dec_worst = d;
            steps++;
        }
        printf("%-28s len %3d: prefill %.2e, %d decode steps, worst %.2e, near-ties %d\n", label, n,
               cmf_test_rel_diff(lc, lg, (size_t)n * V), steps, dec_worst, ties);
        if (dec_worst > g_worst) g_worst = dec_worst;
        if (cmf_test_rel_diff(lc, lg, (size_t)n * V) > g_worst) g_worst = cmf_test_rel_diff(lc, lg, (size_t)n * V);
    }
    cmf_session_free(sc);
    cmf_session_free(sg);
    free(lc);
    free(lg);
}

#ifdef CMF_HAVE_CUDA
/* CUDA graphs change nothing visible: the same greedy run (prefill, then 24 decode steps of one session, then 6
 * steps of a two-session decode batch) with decode-step graphs on and off gives bit-identical logits, and with
 * graphs on the steps really are replayed graphs. */
static void check_graphs(const char *label, cmf_model *gpu, const int32_t *ids, int n) {
    const int V = cmf_model_vocab_size(gpu);
    enum { STEPS = N_GREEDY, BSTEPS = 6 };
    float *lg[2];
    uint64_t cap0 = 0, rep0 = 0, cap1 = 0, rep1 = 0, per0 = 0, per1 = 0;
    for (int on = 1; on >= 0; on--) {
        cmf_backend_cuda_set_graphs(gpu->be, on);
        cmf_backend_cuda_graph_stats(gpu->be, &cap0, &rep0);
        per0 = cmf_backend_cuda_persist_steps(gpu->be);
        float *out = lg[on] = calloc((size_t)(STEPS + 2 * BSTEPS) * V, sizeof(float));
        cmf_session *s = NULL, *s2 = NULL;
        cmf_batch *b = NULL;
        int ok = cmf_session_new(gpu, N_CTX, &s) == CMF_OK && cmf_session_new(gpu, N_CTX, &s2) == CMF_OK &&
                 cmf_batch_new(gpu, 8, 2, &b) == CMF_OK && cmf_session_prefill(s, ids, n, NULL) == CMF_OK &&
                 cmf_session_prefill(s2, ids, n / 2 + 1, NULL) == CMF_OK;
        for (int g = 0; g < STEPS && ok; g++) {
            ok = cmf_session_decode(s, cmf_test_argmax(cmf_session_logits(s), V)) == CMF_OK;
            if (ok) memcpy(out + (size_t)g * V, cmf_session_logits(s), (size_t)V * sizeof(float));
        }
        for (int g = 0; g < BSTEPS && ok; g++) {
            cmf_session *seqs[2] = {s, s2};
            int32_t toks[2] = {cmf_test_argmax(cmf_session_logits(s), V), cmf_test_argmax(cmf_session_logits(s2), V)};
            ok = cmf_batch_run(b, seqs, toks, 2) == CMF_OK;
            for (int i = 0; i < 2 && ok; i++)
                memcpy(out + (size_t)(STEPS + 2 * g + i) * V, cmf_session_logits(seqs[i]), (size_t)V * sizeof(float));
        }
        CHECK_MSG(ok, "%s: graphs %s: %s", label, on ? "on" : "off", cmf_last_error());
        cmf_batch_free(b);
        cmf_session_free(s);
        cmf_session_free(s2);
        cmf_backend_cuda_graph_stats(gpu->be, &cap1, &rep1);
        per1 = cmf_backend_cuda_persist_steps(gpu->be);
        /* with CMF_CUDA_PERSIST=1 the one-token steps of a model it takes run as persistent launches instead
         * (persist.cu; they start from the G_WAIT state of graph mode, so not while graphs are off) */
        const uint64_t per = per1 - per0;
        if (on) /* one capture per shape (1 token, 2 sessions), every other step a replay (or a persistent step) */
            CHECK_MSG(cap1 - cap0 >= (per ? 1u : 2u) && rep1 - rep0 + per >= STEPS + BSTEPS - 3,
                      "%s: graphs captured %llu, replayed %llu, persistent steps %llu", label,
                      (unsigned long long)(cap1 - cap0), (unsigned long long)(rep1 - rep0), (unsigned long long)per);
        else
            CHECK_MSG(cap1 == cap0 && rep1 == rep0 && per == 0, "%s: graphs / persistent steps used while off", label);
    }
    size_t differ = 0;
    for (size_t i = 0; i < (size_t)(STEPS + 2 * BSTEPS) * V; i++) differ += memcmp(&lg[0][i], &lg[1][i], sizeof(float)) != 0;
    CHECK_MSG(differ == 0, "%s: %zu logits differ between graph replay and eager launches", label, differ);
    cmf_backend_cuda_set_graphs(gpu->be, 1);
    free(lg[0]);
    free(lg[1]);
}
#endif

/* Two sessions in one batch: step 1 one decode token each; step 2 a 3-token chunk of A next to one token of B. */
static void check_batch(const char *label, cmf_model *cpu, cmf_model *gpu, const int32_t *ids, int n) {
    const int V = cmf_model_vocab_size(cpu);
    cmf_model *ms[2] = {cpu, gpu};
    float *out[2][2] = {{NULL, NULL}, {NULL, NULL}};
    for (int k = 0; k < 2; k++) {
        cmf_session *s[2] = {NULL, NULL};
        cmf_batch *b = NULL;
        int ok = cmf_session_new(ms[k], N_CTX, &s[0]) == CMF_OK && cmf_session_new(ms[k], N_CTX, &s[1]) == CMF_OK &&
                 cmf_batch_new(ms[k], 8, 2, &b) == CMF_OK && cmf_session_prefill(s[0], ids, n, NULL) == CMF_OK &&
                 cmf_session_prefill(s[1], ids, n / 2 + 1, NULL) == CMF_OK;
        cmf_session *seqs[4] = {s[0], s[1]};
        int32_t toks[4] = {ids[0], ids[1]};
        ok = ok && cmf_batch_run(b, seqs, toks, 2) == CMF_OK;
        cmf_session *seqs2[4] = {s[1], s[0], s[0], s[0]};
        int32_t toks2[4] = {ids[2], ids[3], ids[4 % n], ids[5 % n]};
        ok = ok && cmf_batch_run(b, seqs2, toks2, 4) == CMF_OK;
        CHECK_MSG(ok, "%s: batch on %s: %s", label, k ? "gpu" : "cpu", cmf_last_error());
        for (int i = 0; i < 2 && ok; i++) {
            out[k][i] = malloc((size_t)V * sizeof(float));
            memcpy(out[k][i], cmf_session_logits(s[i]), (size_t)V * sizeof(float));
        }
        cmf_batch_free(b);
        cmf_session_free(s[0]);
        cmf_session_free(s[1]);
    }
    for (int i = 0; i < 2; i++) {
        if (!out[0][i] || !out[1][i]) continue;
        const float d = cmf_test_rel_diff(out[0][i], out[1][i], (size_t)V);
        CHECK_MSG(d <= BOUND, "%s: batch session %d: %.3e > %.1e", label, i, d, BOUND);
        const int tc = cmf_test_argmax(out[0][i], V), tg = cmf_test_argmax(out[1][i], V);
        float mx = 0; /* a near-tie as in check_sequence: the CPU ranks the GPU's pick within the bound of its best */
        for (int j = 0; j < V; j++) mx = fabsf(out[0][i][j]) > mx ? fabsf(out[0][i][j]) : mx;
        CHECK_MSG(tc == tg || out[0][i][tc] - out[0][i][tg] <= BOUND * mx, "%s: batch session %d argmax %d vs cpu %d",
                  label, i, tg, tc);
    }
    for (int k = 0; k < 2; k++) free(out[k][0]), free(out[k][1]);
}

static int gpu_available(void) {
#ifdef CMF_HAVE_CUDA
    int n = 0;
    cmf_cuda_device_count(&n);
    return n > 0;
#else
    return 0;
#endif
}

int main(void) {
    /* a small file for the backend selection checks */
    char f16[1024];
    snprintf(f16, sizeof f16, "%s", tmp_path("gpu-llama-f16.cmf"));
    cmf_convert_opts opts = {0};
    opts.quant = CMF_DT_F16;
    CHECK_MSG(cmf_convert_hf(shared_path("data/hf-tiny/llama"), f16, &opts) == CMF_OK, "convert: %s",
              cmf_last_error());
    cmf_model *m = NULL;
    CHECK(cmf_model_load_on(f16, NULL, "tpu", &m) == CMF_E_ARG && !m);
    CHECK_MSG(strstr(cmf_last_error(), "tpu") != NULL, "unknown backend message: %s", cmf_last_error());

    if (!gpu_available()) {
        cmf_status st = cmf_model_load_on(f16, NULL, "cuda", &m);
        CHECK_MSG(st == CMF_E_UNSUPPORTED && !m, "cuda without a device: status %d", (int)st);
        CHECK_MSG(strstr(cmf_last_error(), "cuda") != NULL, "no-device message: %s", cmf_last_error());
        st = cmf_model_load_on(f16, NULL, "auto", &m);
        CHECK_MSG(st == CMF_OK && m && !strcmp(cmf_model_backend(m), "cpu"), "auto fallback: %s", cmf_last_error());
        cmf_model_free(m);
        if (cmf_test_failures) CMF_TEST_END();
        printf("SKIP: no usable CUDA device\n");
        return 77;
    }

    /* the CPU reference computes every product from the decoded weights and f32 activations (cmf_cpu_set_path
     * F32REF), the arithmetic the GPU kernels do; the CPU's own int8-activation kernels (one level since c67628f)
     * are 3-8% of max|logit| away from it on the q8_row fixtures (see the header comment) */
    CHECK_MSG(cmf_cpu_set_path(CMF_CPU_F32REF) == CMF_OK, "cpu f32ref path: %s", cmf_last_error());

    static const int QUANTS[2] = {CMF_DT_F16, CMF_DT_Q8_ROW};
    const char *only = getenv("CMF_GPU_TEST_CASES"); /* e.g. "llama,qwen3": a subset (the memcheck run) */
    for (size_t ci = 0; ci < sizeof CASES / sizeof *CASES; ci++) {
        char dir[512], ref[640];
        if (only) {
            char list[256];
            int hit = 0;
            snprintf(list, sizeof list, "%s", only);
            for (char *tok = strtok(list, ","); tok && !hit; tok = strtok(NULL, ",")) hit = !strcmp(tok, CASES[ci]);
            if (!hit) continue;
        }
        snprintf(dir, sizeof dir, "data/hf-tiny/%s", CASES[ci]);
        snprintf(dir, sizeof dir, "%s", shared_path(dir));
        snprintf(ref, sizeof ref, "%s/ref.safetensors", dir);
        const int gemma2 = !strcmp(CASES[ci], "gemma2");
        cmf_safetensors *st = NULL;
        if (cmf_st_open(ref, &st) != CMF_OK) {
            CHECK_MSG(0, "%s: %s", CASES[ci], cmf_last_error());
            continue;
        }
        for (int qi = 0; qi < 2; qi++) {
            char path[1024], label[96];
            snprintf(label, sizeof label, "%s/%s", CASES[ci], cmf_dtype_name(QUANTS[qi]));
            snprintf(path, sizeof path, "gpu-%s-%s.cmf", CASES[ci], cmf_dtype_name(QUANTS[qi]));
            snprintf(path, sizeof path, "%s", tmp_path(path));
            opts.quant = QUANTS[qi];
            /* q8_row: products of <= 8 tokens use int8 activations (matvec_i8.cu: one-level Q8_0, as the CPU's
             * default kernels), compared with the CPU's f32 reference path. Measured on an H200 (2026-11-30 01:07,
             * commit 3365b23): 5.8e-2 (qwen3) .. 1.14e-1 (llama), gemma2 3.3e-1; with f32 activations
             * (CMF_CUDA_I8ACT=0, the "f32-act" pass below) 1.5e-3 .. 3.2e-3, gemma2 8.3e-3. */
            BOUND = QUANTS[qi] == CMF_DT_F16 ? (gemma2 ? 6e-2f : 6e-3f) : (gemma2 ? 4e-1f : 1.2e-1f);
            cmf_model *cpu = NULL, *gpu = NULL;
            int ok = cmf_convert_hf(dir, path, &opts) == CMF_OK && cmf_model_load_on(path, NULL, "cpu", &cpu) == CMF_OK &&
                     cmf_model_load_on(path, NULL, "cuda", &gpu) == CMF_OK;
            CHECK_MSG(ok, "%s: convert / load: %s", label, cmf_last_error());
            if (ok) {
                g_worst = 0;
                CHECK(!strcmp(cmf_model_backend(gpu), "cuda"));
                int32_t *ids0 = NULL;
                int n0 = 0;
                for (int seq = 0;; seq++) {
                    char key[32];
                    int n = 0;
                    snprintf(key, sizeof key, "input_%d", seq);
                    int32_t *ids = cmf_test_st_ids(st, key, &n);
                    if (!ids) break;
                    char sl[128];
                    snprintf(sl, sizeof sl, "%s seq %d", label, seq);
                    check_sequence(sl, cpu, gpu, ids, n);
                    if (!ids0) ids0 = ids, n0 = n;
                    else free(ids);
                }
                /* where the difference comes from: the same fixture with the prefill products in f32 (matvec)
                 * instead of the f16-operand GEMM (CMF_CUDA_EXACT_PREFILL); reported, bounded like the rest */
                if (QUANTS[qi] == CMF_DT_F16 && ids0) {
                    setenv("CMF_CUDA_EXACT_PREFILL", "1", 1);
                    cmf_model *ex = NULL;
                    if (cmf_model_load_on(path, NULL, "cuda", &ex) == CMF_OK) {
                        char sl[128];
                        snprintf(sl, sizeof sl, "%s f32-prefill", label);
                        const float keep = g_worst;
                        check_sequence(sl, cpu, ex, ids0, n0);
                        g_worst = keep;
                    }
                    cmf_model_free(ex);
                    unsetenv("CMF_CUDA_EXACT_PREFILL");
                }
                /* f16 weights with the f32 KV cache (cmf_model_params.cache_type, which also runs the prefill
                 * products of float weights in f32): fixtures and two fresh random sequences within 2e-3 (gemma2:
                 * its own bound). Measured before the f32 prefill products (H200, 01:07, 3365b23): 1.5e-3 ..
                 * 2.9e-3, the rest from the f16-operand prefill GEMM; with them (01:53, 60ffba6): 2.4e-6 .. 5.5e-6,
                 * gemma2 1.4e-5. */
                if (QUANTS[qi] == CMF_DT_F16 && ids0) {
                    const float keep_bound = BOUND;
                    if (!gemma2) BOUND = 2e-3f;
                    cmf_model_params mp = {0};
                    mp.cache_type = CMF_CACHE_F32;
                    cmf_model *kf = NULL;
                    if (cmf_model_load_on(path, &mp, "cuda", &kf) == CMF_OK) {
                        const float keep = g_worst;
                        g_worst = 0;
                        char sl[128];
                        for (int seq = 0;; seq++) {
                            char key[32];
                            int n = 0;
                            snprintf(key, sizeof key, "input_%d", seq);
                            int32_t *ids = cmf_test_st_ids(st, key, &n);
                            if (!ids) break;
                            snprintf(sl, sizeof sl, "%s f32-kv seq %d", label, seq);
                            check_sequence(sl, cpu, kf, ids, n);
                            free(ids);
                        }
                        uint64_t r = 0x243f6a8885a308d3ull; /* its own stream: the random passes below keep theirs */
                        for (int k = 0; k < 2; k++) {
                            int32_t rnd[40];
                            const int V = cmf_model_vocab_size(cpu);
                            r ^= r << 13, r ^= r >> 7, r ^= r << 17;
                            const int rn = 5 + (int)(r % 36);
                            for (int i = 0; i < rn; i++) {
                                r ^= r << 13, r ^= r >> 7, r ^= r << 17;
                                rnd[i] = (int32_t)(r % (uint64_t)V);
                            }
                            snprintf(sl, sizeof sl, "%s f32-kv random %d", label, k);
                            check_sequence(sl, cpu, kf, rnd, rn);
                        }
                        snprintf(sl, sizeof sl, "%s f32-kv", label);
                        printf("WORST %-20s max|gpu-cpu|/max|logit| = %.2e (bound %.1e)\n", sl, g_worst, BOUND);
                        g_worst = keep;
                    } else {
                        CHECK_MSG(0, "%s: load with the f32 KV cache: %s", label, cmf_last_error());
                    }
                    cmf_model_free(kf);
                    BOUND = keep_bound;
                }
                /* quantized weights with the opt-in f16 weight cache for prefill GEMMs (CMF_CUDA_F16_CACHE=1): a
                 * 24-token prompt (more than 8 tokens: the GEMM path) within the same bound */
                if (QUANTS[qi] == CMF_DT_Q8_ROW) {
                    setenv("CMF_CUDA_F16_CACHE", "1", 1);
                    cmf_model *fc = NULL;
                    if (cmf_model_load_on(path, NULL, "cuda", &fc) == CMF_OK) {
                        int32_t p24[24];
                        const int V = cmf_model_vocab_size(cpu);
                        uint64_t r = 0x9e3779b97f4a7c15ull; /* its own stream: the random passes below keep theirs */
                        for (int i = 0; i < 24; i++) {
                            r ^= r << 13, r ^= r >> 7, r ^= r << 17;
                            p24[i] = (int32_t)(r % (uint64_t)V);
                        }
                        char sl[128];
                        snprintf(sl, sizeof sl, "%s f16-cache", label);
                        check_sequence(sl, cpu, fc, p24, 24);
                    } else {
                        CHECK_MSG(0, "%s: load with CMF_CUDA_F16_CACHE=1: %s", label, cmf_last_error());
                    }
                    cmf_model_free(fc);
                    unsetenv("CMF_CUDA_F16_CACHE");
                }
#ifdef CMF_HAVE_CUDA
                /* q8_row decode products with f32 activations (CMF_CUDA_I8ACT=0: matvec.cu instead of the int8
                 * activations of matvec_i8.cu), and with two int8 activation levels (CMF_CUDA_I8ACT=2), against the
                 * same CPU f32 reference at the f32-activation bound (H200, 01:53: f32 8.9e-4 .. 3.2e-3, two levels
                 * 8.8e-4 .. 3.3e-3, gemma2 8.3e-3 / 7.9e-3) */
                for (int lv = 0; lv <= 2 && QUANTS[qi] == CMF_DT_Q8_ROW && ids0; lv += 2) {
                    const int i8_prev = cmf_cuda_i8act_on();
                    cmf_cuda_set_i8act(lv);
                    cmf_model *fa = NULL;
                    if (cmf_model_load_on(path, NULL, "cuda", &fa) == CMF_OK) {
                        char sl[128];
                        snprintf(sl, sizeof sl, "%s %s", label, lv ? "i8x2-act" : "f32-act");
                        const float keep = g_worst, keep_bound = BOUND;
                        g_worst = 0;
                        BOUND = gemma2 ? 6e-2f : 1e-2f;
                        check_sequence(sl, cpu, fa, ids0, n0);
                        printf("WORST %-20s max|gpu-cpu|/max|logit| = %.2e (bound %.1e)\n", sl, g_worst, BOUND);
                        g_worst = keep, BOUND = keep_bound;
                    } else {
                        CHECK_MSG(0, "%s: load with activation levels %d: %s", label, lv, cmf_last_error());
                    }
                    cmf_model_free(fa);
                    cmf_cuda_set_i8act(i8_prev);
                }
#endif
                if (ids0 && n0 >= 6) check_batch(label, cpu, gpu, ids0, n0);
#ifdef CMF_HAVE_CUDA
                if (ids0 && n0 >= 6) check_graphs(label, gpu, ids0, n0);
#endif
                free(ids0);
                /* fresh random inputs, not only the fixtures: 2 seeded random sequences of 5..40 tokens */
                for (int r = 0; r < 2; r++) {
                    int32_t rnd[40];
                    const int V = cmf_model_vocab_size(cpu);
                    const int rn = 5 + (int)(rng_next() % 36);
                    for (int i = 0; i < rn; i++) rnd[i] = (int32_t)(rng_next() % (uint64_t)V);
                    char sl[128];
                    snprintf(sl, sizeof sl, "%s random %d", label, r);
                    check_sequence(sl, cpu, gpu, rnd, rn);
                }
                printf("WORST %-20s max|gpu-cpu|/max|logit| = %.2e (bound %.1e)\n", label, g_worst, BOUND);
                if (qi == 0 && ci == 0) { /* refusals */
                    cmf_session_params sp = {0};
                    sp.n_ctx = 64;
                    sp.o1 = "all";
                    cmf_session *s = NULL;
                    cmf_status r = cmf_session_new_ex(gpu, &sp, &s);
                    CHECK_MSG(r == CMF_E_UNSUPPORTED && !s, "o1 on cuda: status %d", (int)r);
                    CHECK_MSG(strstr(cmf_last_error(), "O(1)") != NULL, "o1 message: %s", cmf_last_error());
                }
            }
            cmf_model_free(gpu);
            cmf_model_free(cpu);
        }
        cmf_st_close(st);
    }
    CMF_TEST_END();
}
