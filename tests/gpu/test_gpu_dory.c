/* test_gpu_dory.c — the Dory forward on CUDA (src/backend/cuda/dory_ops.cu) against the same forward on the CPU
 * (src/backend/cpu/dory_ops.c), on the same CMF files: the Dory fixtures of tests/data/dory (tiny, deep, r64_a,
 * r64_b: patterns "*-S-*-" / "S-S-S-*-"x9 / x3, windows 3-4, GQA 2:1 and 4:1, head_dim 8 and 16) and "mid", a seeded
 * random checkpoint written here (head_dim 256, window 8, hidden 256) so that the device kernels also run at a
 * real head size, each converted at f32 and f16. Token inputs: the fixtures' reference sequences and seeded random
 * sequences (seed from CMF_TEST_SEED, printed). Per model and dtype:
 *  - one-shot prefill, both KV modes (per_loop, last_loop), loops 1..4: all logits;
 *  - chunked calls of 3 tokens with n_batch 3 (the sliding rings of window + 3 rows wrap), both KV modes;
 *  - greedy decode (last_loop, the loop count changing per token 1,2,3,4,..; and per_loop at the config's loops):
 *    each step's GPU argmax equals the CPU's (the strict check; a near tie, where the CPU's logit of the GPU's pick
 *    is within BOUND x max|logit| of its best, is counted and printed, not failed), both continue with the CPU's;
 *  - the Conf gate (thresholds 0, 2 and one that splits the model's one-pass read-outs in half, also with the
 *    exit-rate tracker pausing) and the Recon gate (a seeded random probe, bias 0): the same number of passes per
 *    token, the same probe scores, and the logits;
 *  - CUDA graphs: decode segments replayed as graphs give bit for bit the logits of eager launches (last_loop with
 *    the loop count changing per token, per_loop, 3-token chunks, the Conf gate), and graphs are captured and replayed;
 *  - the O(1) far field on a CUDA session is CMF_E_UNSUPPORTED.
 * Every compared set of logits must satisfy max|gpu - cpu| / max|cpu| <= BOUND = 2e-3 (issue 6's acceptance); the
 * worst per model and dtype is printed ("WORST"). Prefill products (n > 8) of f32/f16 weights run in f32 on the
 * device (cuBLAS SGEMM over f32 row tiles); "mid" sets CMF_DORY_CUDA_TILE so that its f16 weights are decoded in
 * several tiles, and also runs at q8_row and bf16, whose prefill products take the tensor cores (see main). CMF_GPU_DORY_QUICK=1 runs a subset (tiny and mid at f16: the
 * compute-sanitizer run). Without a usable CUDA device (CI): checks that "cuda" is a clear CMF_E_UNSUPPORTED,
 * "auto" stays on the CPU and an unknown name is CMF_E_ARG, then exits 77 (ctest SKIP). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cmf.h"
#include "convert/convert.h"
#include "convert/safetensors.h"
#include "model/dory.h"
#include "quant/dtype.h"
#include "backend/cpu/ops.h"
#include "dory/dorytest.h"
#include "testutil.h"
#ifdef CMF_HAVE_CUDA
#include "backend/cuda/cuda_ops.h"
static int i8act_get(void) { return cmf_cuda_i8act_on(); }
static void i8act_set(int levels) { cmf_cuda_set_i8act(levels); }
#else
static int i8act_get(void) { return 0; }
static void i8act_set(int levels) { (void)levels; }
#endif

static double BOUND = 2e-3; /* issue 6's acceptance for f32/f16 weights; main sets it per dtype */
/* bf16 weights: the prefill products take bf16 activation operands on the GPU (2^-9 relative rounding against the
 * f32 ones of the CPU). Measured on the H200 (2026-11-30 06:58, 4aff16f; bench/dory/RESULTS.md): mid-bf16 2.1e-3. */
#define BOUND_BF16 6e-3
enum { N_CTX = 64, N_RAND = 40, N_GREEDY = 16 };

static uint64_t g_rng;
static uint64_t rng_next(void) {
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return g_rng;
}
static double rng_unit(void) { return (double)(rng_next() >> 11) / 9007199254740992.0; }

static double g_worst; /* worst relative difference of the current model and dtype */
static int g_ties;     /* greedy near ties of the current model and dtype */

/* max|g - c| / max|c| over n values, checked against BOUND and folded into g_worst. */
static void compare(const char *what, const float *c, const float *g, size_t n) {
    const double rel = cmf_test_rel_diff(c, g, n);
    CHECK_MSG(rel <= BOUND, "%s: max|gpu-cpu|/max|logit| = %.3g > %.1g", what, rel, BOUND);
    if (!(rel <= g_worst)) g_worst = rel;
}

/* A greedy step: the GPU's pick must be the CPU's, or a near tie. */
static void check_pick(const char *what, const float *c, const float *g, int V) {
    const int a = cmf_test_argmax(c, V), b = cmf_test_argmax(g, V);
    if (a == b) return;
    float mx = 0;
    for (int j = 0; j < V; j++) mx = fabsf(c[j]) > mx ? fabsf(c[j]) : mx;
    const int tie = c[a] - c[b] <= BOUND * mx;
    CHECK_MSG(tie, "%s: greedy token %d on the GPU, %d on the CPU (gap %.3g)", what, b, a, c[a] - c[b]);
    g_ties += tie;
}


/* The same calls on both models, all logits compared. */
static void both_calls(const char *what, const cmf_dory *cpu, const cmf_dory *gpu, const int32_t *ids, int kv_mode,
                       int n_batch, int max_loops, const int *lens, const int *loops, int nc) {
    int total = 0;
    for (int i = 0; i < nc; i++) total += lens[i];
    float *c = dory_run_calls(cpu, ids, N_CTX, kv_mode, n_batch, max_loops, lens, loops, nc);
    float *g = dory_run_calls(gpu, ids, N_CTX, kv_mode, n_batch, max_loops, lens, loops, nc);
    CHECK_MSG(c && g, "%s: a run failed", what);
    if (c && g) compare(what, c, g, (size_t)total * cpu->cfg.vocab_size);
    free(c);
    free(g);
}

/* Prefill of the first 8 ids, then N_GREEDY greedy steps fed the CPU's tokens; under last_loop the loop count
 * cycles 1..4 per step, under per_loop it is the config's. */
static void greedy(const char *label, const cmf_dory *cpu, const cmf_dory *gpu, const int32_t *ids, int kv_mode) {
    const int V = cpu->cfg.vocab_size, lp = kv_mode == CMF_DORY_KV_PER_LOOP ? cpu->cfg.n_loops : 0;
    cmf_dory_state *sc = NULL, *sg = NULL;
    cmf_status a = cmf_dory_state_new(cpu, N_CTX, 8, kv_mode, 4, &sc), b = cmf_dory_state_new(gpu, N_CTX, 8, kv_mode, 4, &sg);
    CHECK_MSG(a == CMF_OK && b == CMF_OK, "%s: states: %s", label, cmf_last_error());
    char what[160];
    if (a == CMF_OK && b == CMF_OK) {
        a = cmf_dory_forward(sc, ids, 8, lp, NULL);
        b = cmf_dory_forward(sg, ids, 8, lp, NULL);
        CHECK_MSG(a == CMF_OK && b == CMF_OK, "%s: prefill: %s", label, cmf_last_error());
        for (int i = 0; i < N_GREEDY && a == CMF_OK && b == CMF_OK; i++) {
            snprintf(what, sizeof what, "%s greedy %s step %d", label, kv_mode ? "last_loop" : "per_loop", i);
            compare(what, cmf_dory_logits(sc), cmf_dory_logits(sg), (size_t)V);
            check_pick(what, cmf_dory_logits(sc), cmf_dory_logits(sg), V);
            int32_t tok = cmf_test_argmax(cmf_dory_logits(sc), V);
            const int loops = lp ? lp : 1 + i % 4;
            a = cmf_dory_forward(sc, &tok, 1, loops, NULL);
            b = cmf_dory_forward(sg, &tok, 1, loops, NULL);
            CHECK_MSG(a == CMF_OK && b == CMF_OK, "%s: decode: %s", what, cmf_last_error());
        }
    }
    cmf_dory_state_free(sc);
    cmf_dory_state_free(sg);
}

/* The Conf gate (probe != NULL: the Recon gate) over a prompt of 6 tokens and N_GREEDY gated greedy tokens. */
static void gates(const char *label, const cmf_dory *cpu, const cmf_dory *gpu, const int32_t *ids, float thr,
                  const cmf_dory_probe *probe, int tracker) {
    const int V = cpu->cfg.vocab_size;
    cmf_dory_state *s[2] = {NULL, NULL};
    cmf_status st = CMF_OK;
    for (int k = 0; k < 2 && st == CMF_OK; k++) {
        st = cmf_dory_state_new(k ? gpu : cpu, N_CTX, 6, CMF_DORY_KV_LAST_LOOP, 2, &s[k]);
        if (st == CMF_OK && tracker) st = cmf_dory_gate_tracker(s[k], 3, 1.0, 4); /* always below: pauses */
        if (st == CMF_OK) st = cmf_dory_forward(s[k], ids, 6, 2, NULL);
    }
    CHECK_MSG(st == CMF_OK, "%s: gate setup: %s", label, cmf_last_error());
    char what[320];
    int mism = 0;
    for (int i = 0; i < N_GREEDY && st == CMF_OK; i++) {
        int32_t tok = cmf_test_argmax(cmf_dory_logits(s[0]), V);
        int np[2] = {0, 0};
        double sc[2] = {0, 0};
        for (int k = 0; k < 2 && st == CMF_OK; k++)
            st = probe ? cmf_dory_decode_recon(s[k], tok, probe, &np[k], &sc[k]) : cmf_dory_decode_gated(s[k], tok, thr, &np[k]);
        CHECK_MSG(st == CMF_OK, "%s: gated decode: %s", label, cmf_last_error());
        if (st != CMF_OK) break;
        snprintf(what, sizeof what, "%s token %d (passes cpu %d gpu %d)", label, i, np[0], np[1]);
        if (probe) CHECK_MSG(fabs(sc[0] - sc[1]) <= 1e-3 * (1 + fabs(sc[0])), "%s: scores %.6g vs %.6g", what, sc[0], sc[1]);
        CHECK_MSG(np[0] == np[1], "%s: passes differ", what);
        mism += np[0] != np[1];
        if (np[0] == np[1]) compare(what, cmf_dory_logits(s[0]), cmf_dory_logits(s[1]), (size_t)V);
    }
    if (st == CMF_OK) {
        long n0 = 0, n1 = 0;
        double sh0 = cmf_dory_gate_one_pass_share(s[0], &n0), sh1 = cmf_dory_gate_one_pass_share(s[1], &n1);
        CHECK_MSG(n0 == n1 && (mism || sh0 == sh1), "%s: gate counters %ld/%g vs %ld/%g", label, n0, sh0, n1, sh1);
        CHECK(cmf_dory_gate_probed(s[0]) == cmf_dory_gate_probed(s[1]));
        if (getenv("DORY_VERBOSE")) printf("  %s: one-pass share %.2f, probed %ld\n", label, sh0, cmf_dory_gate_probed(s[0]));
    }
    cmf_dory_state_free(s[0]);
    cmf_dory_state_free(s[1]);
}

/* The largest softmax probability of V logits (what the Conf gate compares with its threshold). */
static double top_prob(const float *l, int V) {
    float mx = l[0];
    for (int j = 1; j < V; j++) mx = l[j] > mx ? l[j] : mx;
    double sum = 0;
    for (int j = 0; j < V; j++) sum += exp((double)l[j] - mx);
    return 1.0 / sum;
}

static int cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* A Conf threshold that splits this model's one-pass read-outs in half: the CPU decodes N_GREEDY gated tokens at
 * threshold 0 (every token read out after pass 1); the threshold is the midpoint of the widest gap between
 * neighbouring sorted top probabilities in the middle half, as far as possible from any of them (so that the
 * GPU's rounding does not flip a decision). */
static float split_threshold(const cmf_dory *cpu, const int32_t *ids) {
    const int V = cpu->cfg.vocab_size;
    double tp[N_GREEDY];
    int n = 0;
    cmf_dory_state *s = NULL;
    if (cmf_dory_state_new(cpu, N_CTX, 6, CMF_DORY_KV_LAST_LOOP, 2, &s) == CMF_OK &&
        cmf_dory_forward(s, ids, 6, 2, NULL) == CMF_OK)
        for (; n < N_GREEDY; n++) {
            int32_t tok = cmf_test_argmax(cmf_dory_logits(s), V);
            if (cmf_dory_decode_gated(s, tok, 0.0f, NULL) != CMF_OK) break;
            tp[n] = top_prob(cmf_dory_logits(s), V);
        }
    cmf_dory_state_free(s);
    if (n < 2) return 0.5f;
    qsort(tp, (size_t)n, sizeof *tp, cmp_double);
    int best = n / 2; /* the widest gap between neighbours in the middle half */
    for (int i = n / 4 > 0 ? n / 4 : 1; i <= 3 * n / 4 && i < n; i++)
        if (tp[i] - tp[i - 1] > tp[best] - tp[best - 1]) best = i;
    return (float)(0.5 * (tp[best - 1] + tp[best]));
}

#ifdef CMF_HAVE_CUDA
/* GPU-only calls for the graph check: nc calls of lens[i] tokens at loops[i] (all logits), then, when gate_thr >= 0,
 * N_GREEDY Conf-gated tokens (logits and passes appended). Returns the logits (malloc'd) or NULL. */
static float *gpu_calls(const cmf_dory *gpu, const int32_t *ids, int kv_mode, int n_batch, const int *lens,
                        const int *loops, int nc, float gate_thr, int *passes) {
    const size_t V = (size_t)gpu->cfg.vocab_size;
    int total = 0;
    for (int i = 0; i < nc; i++) total += lens[i];
    float *out = malloc((size_t)(total + N_GREEDY) * V * sizeof(float));
    cmf_dory_state *s = NULL;
    cmf_status st = out ? cmf_dory_state_new(gpu, N_CTX, n_batch, kv_mode, 4, &s) : CMF_E_NOMEM;
    for (int i = 0, p = 0; st == CMF_OK && i < nc; p += lens[i], i++)
        st = cmf_dory_forward(s, ids + p, lens[i], loops[i], out + (size_t)p * V);
    for (int i = 0; st == CMF_OK && gate_thr >= 0 && i < N_GREEDY; i++) {
        st = cmf_dory_decode_gated(s, ids[i % total], gate_thr, &passes[i]);
        if (st == CMF_OK) memcpy(out + (size_t)(total + i) * V, cmf_dory_logits(s), V * sizeof(float));
    }
    CHECK_MSG(st == CMF_OK, "graph check: %s", cmf_last_error());
    cmf_dory_state_free(s);
    if (st != CMF_OK) {
        free(out);
        return NULL;
    }
    return out;
}

/* Decode segments replayed as CUDA graphs give bit for bit the logits of eager launches (same kernels, same
 * arguments), for single-token steps with the loop count changing per token (last_loop), per_loop steps, 3-token
 * chunks and the Conf gate; and graphs are really captured and replayed. */
static void graph_vs_eager(const char *label, const cmf_dory *gpu, const int32_t *ids, int n, float thr) {
    if (n < 8) return;
    int lens[64], lp[64], nc = 0, total = 0;
    lens[nc] = 8, lp[nc++] = 2, total = 8;
    for (int i = 0; total < n; i++, total++) lens[nc] = 1, lp[nc++] = 1 + i % 4;
    int l3[64], p3[64], n3 = 0;
    for (int p = 0; p < n && n3 < 64; p += 3, n3++) l3[n3] = n - p < 3 ? n - p : 3, p3[n3] = 2;
    const size_t V = (size_t)gpu->cfg.vocab_size;
    float *r[2][3];
    int passes[2][N_GREEDY];
    uint64_t cap0 = 0, rep0 = 0, cap1 = 0, rep1 = 0;
    cmf_dory_cuda_graph_stats(gpu, &cap0, &rep0);
    for (int k = 0; k < 2; k++) { /* k 0: graphs, 1: eager */
        cmf_dory_cuda_set_graphs((cmf_dory *)gpu, k == 0);
        for (int i = 0; i < nc; i++) lp[i] = i ? 1 + (i - 1) % 4 : 2;
        r[k][0] = gpu_calls(gpu, ids, CMF_DORY_KV_LAST_LOOP, 8, lens, lp, nc, thr, passes[k]);
        for (int i = 0; i < nc; i++) lp[i] = gpu->cfg.n_loops;
        r[k][1] = gpu_calls(gpu, ids, CMF_DORY_KV_PER_LOOP, 8, lens, lp, nc, -1, NULL);
        r[k][2] = gpu_calls(gpu, ids, CMF_DORY_KV_PER_LOOP, 3, l3, p3, n3, -1, NULL);
        if (k == 0) cmf_dory_cuda_graph_stats(gpu, &cap1, &rep1);
    }
    cmf_dory_cuda_set_graphs((cmf_dory *)gpu, 1);
    const size_t rows[3] = {(size_t)total + N_GREEDY, (size_t)total, (size_t)n};
    for (int j = 0; j < 3; j++) {
        CHECK_MSG(r[0][j] && r[1][j] && !memcmp(r[0][j], r[1][j], rows[j] * V * sizeof(float)),
                  "%s: graph replay differs from eager launches (run %d)", label, j);
        free(r[0][j]);
        free(r[1][j]);
    }
    CHECK_MSG(!memcmp(passes[0], passes[1], sizeof passes[0]), "%s: gate passes differ with graphs", label);
    CHECK_MSG(cap1 > cap0 && rep1 > rep0 + (uint64_t)total, "%s: graphs captured %llu, replayed %llu", label,
              (unsigned long long)(cap1 - cap0), (unsigned long long)(rep1 - rep0));
}
#endif

/* All checks of one model pair; ids[0..nseq) are sequences of at least N_RAND tokens... or shorter fixtures. */
static void check_model(const char *label, const cmf_dory *cpu, const cmf_dory *gpu, int32_t *const *ids,
                        const int *lens, int nseq, int quick) {
    CHECK(!strcmp(cmf_dory_backend(gpu), "cuda") && !strcmp(cmf_dory_backend(cpu), "cpu"));
    char what[200];
    for (int si = 0; si < nseq; si++) {
        const int n = lens[si];
        for (int kv = 0; kv < 2; kv++) {
            const char *kvn = kv ? "last_loop" : "per_loop";
            for (int loops = 1; loops <= 4; loops++) {
                if (quick && loops != 2) continue;
                int L[1] = {n}, lp[1] = {loops};
                snprintf(what, sizeof what, "%s seq %d prefill %s loops %d", label, si, kvn, loops);
                both_calls(what, cpu, gpu, ids[si], kv, n, 4, L, lp, 1);
                int cl[64], cp[64], nc = 0;
                for (int p = 0; p < n && nc < 64; p += 3, nc++) {
                    cl[nc] = n - p < 3 ? n - p : 3;
                    cp[nc] = loops;
                }
                snprintf(what, sizeof what, "%s seq %d calls of 3 (rings wrap) %s loops %d", label, si, kvn, loops);
                both_calls(what, cpu, gpu, ids[si], kv, 3, 4, cl, cp, nc);
            }
            if (n >= 8) greedy(label, cpu, gpu, ids[si], kv);
        }
        if (n < 6) continue;
        const float mid_thr = split_threshold(cpu, ids[si]);
        const float thr[] = {0.0f, mid_thr, 2.0f};
        for (int ti = 0; ti < 3; ti++) {
            if (quick && ti != 1) continue;
            snprintf(what, sizeof what, "%s seq %d Conf gate %.4g", label, si, (double)thr[ti]);
            gates(what, cpu, gpu, ids[si], thr[ti], NULL, 0);
        }
        snprintf(what, sizeof what, "%s seq %d Conf gate %.4g with tracker pauses", label, si, (double)mid_thr);
        gates(what, cpu, gpu, ids[si], mid_thr, NULL, 1);
        const int H = cpu->cfg.hidden_size;
        cmf_dory_probe pr = {H, malloc((size_t)H * sizeof(float)), 0.0};
        for (int j = 0; pr.w && j < H; j++) pr.w[j] = (float)(rng_unit() * 2 - 1);
        snprintf(what, sizeof what, "%s seq %d Recon gate", label, si);
        if (pr.w) gates(what, cpu, gpu, ids[si], 0, &pr, 0);
        free(pr.w);
#ifdef CMF_HAVE_CUDA
        snprintf(what, sizeof what, "%s seq %d", label, si);
        graph_vs_eager(what, gpu, ids[si], n, mid_thr);
#endif
    }
    cmf_dory_state *s = NULL;
    if (cmf_dory_state_new(gpu, N_CTX, 4, CMF_DORY_KV_LAST_LOOP, 2, &s) == CMF_OK) {
        cmf_status st = cmf_dory_o1_enable(s, "all", 0, 0, -1, 0, 0, 0);
        CHECK_MSG(st == CMF_E_UNSUPPORTED, "%s: o1 on cuda gave %d (%s)", label, (int)st, cmf_last_error());
        cmf_dory_state_free(s);
    }
}

/* ---- "mid": a seeded random Dory checkpoint at head_dim 256 ------------------------------------------------ */

static int write_mid(const char *dir) {
    enum { V = 512, H = 256, F = 512, NH = 2, NKV = 1, HD = 256, NL = 8 };
    const char *pattern = "S-*-S-*-";
    mkdir(dir, 0755);
    char path[640];
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *f = fopen(path, "w");
    if (!f) return -1;
    fprintf(f, "{\"model_type\": \"dory\", \"architectures\": [\"DoryForCausalLM\"], \"dory_format_version\": 1, \"vocab_size\": %d, \"hidden_size\": %d, "
               "\"num_hidden_layers\": %d, \"intermediate_size\": %d, \"num_attention_heads\": %d, "
               "\"num_key_value_heads\": %d, \"attention_head_dim\": %d, \"head_dim\": %d, "
               "\"max_position_embeddings\": 64, \"tie_word_embeddings\": false, \"hybrid_layer_pattern\": \"%s\", "
               "\"swa_window_size\": 8, \"rope_theta\": 10000000.0, \"partial_rotary_factor\": 1.0, "
               "\"rope_theta_2\": 10000.0, \"partial_rotary_factor_2\": 1.0, "
               "\"rope_profile_layers\": [2, 1, 1, 1, 2, 1, 1, 1], \"no_rope_layers\": [0, 0, 0, 0, 0, 0, 0, 0], "
               "\"ngpt\": true, \"fngpt\": true, \"init_method_std\": 0.0177, \"ngpt_alpha_init\": 0.05, "
               "\"ngpt_enable_final_norm\": false, \"attention_output_gate\": true, "
               "\"attention_output_gate_logit_scale_init\": null, \"mlp_hidden_act\": \"silu\", \"mlp_bias\": false, "
               "\"attention_bias\": false, \"n_input_layers\": 2, \"n_recurrent_layers\": 4, \"n_output_layers\": 2, "
               "\"n_recurrent_loops\": 2, \"recurrent_kv_cache_mode\": \"per_loop\", \"initial_state\": "
               "\"input_copy\", \"input_transform\": \"residual\", \"output_transform\": \"replace\", "
               "\"mixer_type\": null, \"torch_dtype\": \"float32\"}\n",
            V, H, NL, F, NH, NKV, HD, HD, pattern);
    fclose(f);
    /* tensors in file order: name, rows, cols (cols 0: a vector of `rows`) */
    struct { char name[96]; int rows, cols; } t[8 * 9 + 3];
    int nt = 0;
#define ADD(nm, r, c) (snprintf(t[nt].name, sizeof t[nt].name, "%s", nm), t[nt].rows = (r), t[nt].cols = (c), nt++)
    ADD("backbone.embeddings.weight", V, H);
    ADD("lm_head.weight", V, H);
    ADD("lm_head.logit_scale", V, 0);
    char nm[96];
    for (int i = 0; i < NL; i++) {
#define L(s) (snprintf(nm, sizeof nm, "backbone.layers.%d.%s", i, s), nm)
        if (pattern[i] == '-') {
            ADD(L("mlp_alpha"), H, 0);
            ADD(L("mixer.gate_proj.weight"), F, H);
            ADD(L("mixer.up_proj.weight"), F, H);
            ADD(L("mixer.down_proj.weight"), H, F);
            ADD(L("mixer.suv_gate"), F, 0);
            ADD(L("mixer.suv_up"), F, 0);
        } else {
            ADD(L("attn_alpha"), H, 0);
            ADD(L("mixer.q_proj.weight"), NH * HD, H);
            ADD(L("mixer.k_proj.weight"), NKV * HD, H);
            ADD(L("mixer.v_proj.weight"), NKV * HD, H);
            ADD(L("mixer.g_proj.weight"), NH * HD, H);
            ADD(L("mixer.o_proj.weight"), H, NH * HD);
            ADD(L("mixer.sqk"), NH * HD, 0);
            ADD(L("mixer.s_gate"), NH * HD, 0);
        }
#undef L
    }
#undef ADD
    char *hdr = malloc(1 << 16);
    if (!hdr) return -1;
    size_t hl = 0, off = 0;
    hl += (size_t)snprintf(hdr + hl, (1 << 16) - hl, "{");
    for (int i = 0; i < nt; i++) {
        const size_t n = (size_t)t[i].rows * (size_t)(t[i].cols ? t[i].cols : 1) * 4;
        if (t[i].cols)
            hl += (size_t)snprintf(hdr + hl, (1 << 16) - hl, "%s\"%s\":{\"dtype\":\"F32\",\"shape\":[%d,%d],\"data_offsets\":[%zu,%zu]}",
                                   i ? "," : "", t[i].name, t[i].rows, t[i].cols, off, off + n);
        else
            hl += (size_t)snprintf(hdr + hl, (1 << 16) - hl, "%s\"%s\":{\"dtype\":\"F32\",\"shape\":[%d],\"data_offsets\":[%zu,%zu]}",
                                   i ? "," : "", t[i].name, t[i].rows, off, off + n);
        off += n;
    }
    hl += (size_t)snprintf(hdr + hl, (1 << 16) - hl, "}");
    while (hl % 8) hdr[hl++] = ' ';
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    f = fopen(path, "wb");
    int ok = f != NULL;
    uint64_t h64 = hl;
    if (ok) ok = fwrite(&h64, 8, 1, f) == 1 && fwrite(hdr, 1, hl, f) == hl;
    for (int i = 0; ok && i < nt; i++) {
        const size_t n = (size_t)t[i].rows * (size_t)(t[i].cols ? t[i].cols : 1);
        float *v = malloc(n * sizeof(float));
        ok = v != NULL;
        for (size_t j = 0; ok && j < n; j++) /* matrices ~ U(-0.035, 0.035) (σ 0.02); vectors (0.7..1.3)·σ₀ */
            v[j] = (float)(t[i].cols ? (rng_unit() * 2 - 1) * 0.035 : (0.7 + 0.6 * rng_unit()) * 0.0177);
        if (ok) ok = fwrite(v, sizeof(float), n, f) == n;
        free(v);
    }
    if (f && fclose(f) != 0) ok = 0;
    free(hdr);
    return ok ? 0 : -1;
}

/* Converts checkpoint dir to `quant`, opens it and loads it twice (cpu, cuda). Returns 0 or -1 (error printed). */
static int open_pair(const char *dir, const char *label, int quant, cmf_file **f, cmf_dory **cpu, cmf_dory **gpu) {
    char out[600];
    snprintf(out, sizeof out, "gpu-dory-%s.cmf", label);
    snprintf(out, sizeof out, "%s", tmp_path(out));
    cmf_convert_opts opts;
    memset(&opts, 0, sizeof opts);
    opts.quant = quant;
    *f = NULL;
    *cpu = *gpu = NULL;
    cmf_status st = cmf_convert_hf(dir, out, &opts);
    if (st == CMF_OK) st = cmf_file_open(out, f);
    if (st == CMF_OK) st = cmf_dory_load(*f, 2, cpu);
    if (st == CMF_OK) st = cmf_dory_load(*f, 0, gpu);
    if (st == CMF_OK) st = cmf_dory_use_backend(*gpu, "cuda");
    CHECK_MSG(st == CMF_OK, "%s: %s", label, cmf_last_error());
    return st == CMF_OK ? 0 : -1;
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
    const char *seed_env = getenv("CMF_TEST_SEED");
    const uint64_t seed = seed_env ? strtoull(seed_env, NULL, 0) : 0x9e3779b97f4a7c15ull;
    g_rng = seed ? seed : 1;
    char tiny[512];
    snprintf(tiny, sizeof tiny, "%s", testdata_path("dory/tiny"));
    if (!gpu_available()) { /* the selection paths, then SKIP */
        cmf_file *f = NULL;
        cmf_dory *d = NULL;
        char out[600];
        snprintf(out, sizeof out, "%s", tmp_path("gpu-dory-sel.cmf"));
        cmf_convert_opts opts;
        memset(&opts, 0, sizeof opts);
        opts.quant = CMF_DT_F32;
        int ok = cmf_convert_hf(tiny, out, &opts) == CMF_OK && cmf_file_open(out, &f) == CMF_OK &&
                 cmf_dory_load(f, 1, &d) == CMF_OK;
        CHECK_MSG(ok, "tiny: %s", cmf_last_error());
        if (ok) {
            cmf_status st = cmf_dory_use_backend(d, "cuda");
            CHECK_MSG(st == CMF_E_UNSUPPORTED && strstr(cmf_last_error(), "cuda"), "cuda without a device: %d (%s)",
                      (int)st, cmf_last_error());
            CHECK(cmf_dory_use_backend(d, "auto") == CMF_OK && !strcmp(cmf_dory_backend(d), "cpu"));
            CHECK(cmf_dory_use_backend(d, "tpu") == CMF_E_ARG && strstr(cmf_last_error(), "tpu"));
        }
        cmf_dory_free(d);
        cmf_file_close(f);
        if (cmf_test_failures) CMF_TEST_END();
        printf("SKIP: no usable CUDA device\n");
        return 77;
    }
    const int quick = getenv("CMF_GPU_DORY_QUICK") && getenv("CMF_GPU_DORY_QUICK")[0] == '1';
    const int best_path = cmf_cpu_path(), i8act = i8act_get();
    printf("seed %#llx%s\n", (unsigned long long)seed, quick ? " (quick subset)" : "");
    char mid[600];
    snprintf(mid, sizeof mid, "%s", tmp_path("gpu-dory-mid"));
    CHECK_MSG(write_mid(mid) == 0, "writing %s", mid);
    const char *CASES[] = {"tiny", "r64_a", "r64_b", "deep", "mid"};
    for (size_t ci = 0; ci < sizeof CASES / sizeof *CASES; ci++) {
        const int is_mid = !strcmp(CASES[ci], "mid");
        if (quick && strcmp(CASES[ci], "tiny") && !is_mid) continue;
        char dir[600], ref[700];
        if (is_mid) snprintf(dir, sizeof dir, "%s", mid);
        else {
            snprintf(ref, sizeof ref, "dory/%s", CASES[ci]);
            snprintf(dir, sizeof dir, "%s", testdata_path(ref));
        }
        /* f32 and f16 for every case; "mid" also at q8_row and bf16, whose prefill products run on the tensor cores
         * (dory_ops.cu prefill_tc). q8_row: the int8 GEMM (~1e-6 relative) against the CPU's f32 reference path, the
         * decode products with f32 activations on both sides, so the 2e-3 bound holds. bf16: bf16 activation
         * operands in the prefill products (PyTorch's bf16 precision) against f32 ones on the CPU: BOUND_BF16. */
        const int QUANTS[] = {CMF_DT_F32, CMF_DT_F16, CMF_DT_Q8_ROW, CMF_DT_BF16};
        for (int qi = 0; qi < (is_mid ? 4 : 2); qi++) {
            const int quant = QUANTS[qi];
            if (quick && qi != 1) continue;
            BOUND = quant == CMF_DT_BF16 ? BOUND_BF16 : 2e-3;
            const int exact_cpu = quant == CMF_DT_Q8_ROW;
            if (exact_cpu) {
                CHECK_MSG(cmf_cpu_set_path(CMF_CPU_F32REF) == CMF_OK, "cpu f32ref path: %s", cmf_last_error());
                i8act_set(0);
            }
            char label[64];
            snprintf(label, sizeof label, "%s-%s", CASES[ci], cmf_dtype_name(quant));
            cmf_file *f;
            cmf_dory *cpu, *gpu;
            if (is_mid) setenv("CMF_DORY_CUDA_TILE", "40000", 1); /* f16 prefill products in several row tiles */
            else unsetenv("CMF_DORY_CUDA_TILE");
            if (open_pair(dir, label, quant, &f, &cpu, &gpu) == 0) {
                const int V = cpu->cfg.vocab_size;
                int32_t *ids[4] = {NULL, NULL, NULL, NULL};
                int lens[4], nseq = 0;
                if (!is_mid) { /* the fixture's reference sequences */
                    snprintf(ref, sizeof ref, "%s/ref.safetensors", dir);
                    cmf_safetensors *st = NULL;
                    if (cmf_st_open(ref, &st) == CMF_OK) {
                        for (int i = 0; i < 2; i++) {
                            char nm[32];
                            snprintf(nm, sizeof nm, "tokens_%d", i);
                            if ((ids[nseq] = cmf_test_st_ids(st, nm, &lens[nseq])) && lens[nseq] <= N_CTX - N_GREEDY - 8) nseq++;
                        }
                        cmf_st_close(st);
                    }
                    CHECK_MSG(nseq > 0, "%s: no reference tokens", label);
                }
                for (int r = 0; r < (quick ? 1 : 2); r++) { /* seeded random sequences */
                    ids[nseq] = malloc(N_RAND * sizeof(int32_t));
                    for (int i = 0; ids[nseq] && i < N_RAND; i++) ids[nseq][i] = (int32_t)(rng_next() % (uint64_t)V);
                    lens[nseq] = N_RAND;
                    if (ids[nseq]) nseq++;
                }
                g_worst = 0;
                g_ties = 0;
                check_model(label, cpu, gpu, ids, lens, nseq, quick);
                printf("WORST %-12s max|gpu-cpu|/max|logit| = %.3g (bound %.0e), greedy near-ties %d\n", label, g_worst,
                       BOUND, g_ties);
                for (int i = 0; i < nseq; i++) free(ids[i]);
            }
            cmf_dory_free(gpu);
            cmf_dory_free(cpu);
            cmf_file_close(f);
            if (exact_cpu) {
                cmf_cpu_set_path(best_path);
                i8act_set(i8act);
            }
        }
    }
    CMF_TEST_END();
}
