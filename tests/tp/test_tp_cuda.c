/* Tensor parallelism on CUDA devices over NCCL (src/tp, tp_nccl.cu), on the hf-tiny cases converted here at f16 and
 * q8_row, input_0 of each ref.safetensors:
 *  - tp = 1 on "cuda" is the plain one-GPU path: logits bit for bit equal (prefill and N_DECODE greedy steps);
 *  - tp = 2 on "cuda" (devices 0 and 1) against one GPU: logits within BOUND = 2e-3 relative (the bound;
 *    the split changes the summation order of o_proj / down_proj and adds an f32 NCCL sum) and greedy tokens
 *    identical; first with the ranks' decode-step CUDA graphs (ncclAllReduce captured in them: every rank must
 *    have replayed graphs), then with the ranks' graphs off (eager NCCL calls). The all-reduced buffers are in
 *    symmetric NCCL windows unless CMF_TP_SYMM=0 or NCCL refuses them (the line says how many and why not).
 * Both sides run with the backend's default (graphs on unless CMF_CUDA_GRAPH=0).
 * Without a build with NCCL, or with fewer than 2 devices: checks that tp = 2 on cuda is a clear error, then exits
 * 77 (ctest SKIP), which is the case on CI. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmf.h"
#include "convert/convert.h"
#include "convert/safetensors.h"
#include "quant/dtype.h"
#include "model/model.h"
#include "testutil.h"
#include "tp/tp.h"
#ifdef CMF_HAVE_CUDA
#include "backend/cuda/cuda_ops.h"
#endif

static const char *CASES[] = {"llama", "mistral-swa", "qwen2", "qwen3", "gemma2", "bf16-llama"};
enum { N_DECODE = 24, N_CTX = 128 };
static const float BOUND = 2e-3f;

/* Prefill + greedy decode on both models; returns the worst relative difference. */
static float compare(const char *label, cmf_model *ref, cmf_model *tp, const int32_t *ids, int n, int exact) {
    const int V = cmf_model_vocab_size(ref);
    float worst = 0;
    cmf_session *a = NULL, *b = NULL;
    float *la = malloc((size_t)n * V * sizeof(float)), *lb = malloc((size_t)n * V * sizeof(float));
    int ok = cmf_session_new(ref, N_CTX, &a) == CMF_OK && cmf_session_new(tp, N_CTX, &b) == CMF_OK &&
             cmf_session_prefill(a, ids, n, la) == CMF_OK && cmf_session_prefill(b, ids, n, lb) == CMF_OK;
    CHECK_MSG(ok, "%s: sessions / prefill: %s", label, cmf_last_error());
    if (ok) {
        worst = cmf_test_rel_diff(la, lb, (size_t)n * V);
        if (exact) CHECK_MSG(!memcmp(la, lb, (size_t)n * V * sizeof(float)), "%s: prefill logits differ", label);
        for (int step = 0; step < N_DECODE && ok; step++) {
            const float *xa = cmf_session_logits(a), *xb = cmf_session_logits(b);
            float d = cmf_test_rel_diff(xa, xb, (size_t)V);
            if (d > worst) worst = d;
            if (exact) CHECK_MSG(!memcmp(xa, xb, (size_t)V * sizeof(float)), "%s: step %d logits differ", label, step);
            const int ta = cmf_test_argmax(xa, V), tb = cmf_test_argmax(xb, V);
            CHECK_MSG(ta == tb, "%s: greedy token %d: %d on one GPU, %d split (margin %.3e)", label, step, ta, tb,
                      (double)(xa[ta] - xa[tb]));
            ok = cmf_session_decode(a, ta) == CMF_OK && cmf_session_decode(b, ta) == CMF_OK;
            CHECK_MSG(ok, "%s: decode: %s", label, cmf_last_error());
        }
    }
    if (!ok) worst = INFINITY;
    CHECK_MSG(worst <= BOUND, "%s: max|tp - one GPU| / max|logit| = %.3e > %.0e", label, worst, BOUND);
    cmf_session_free(a);
    cmf_session_free(b);
    free(la);
    free(lb);
    return worst;
}

int main(void) {
    int devices = 0;
#if defined(CMF_HAVE_CUDA)
    if (cmf_cuda_device_count(&devices) != CMF_OK) devices = 0;
#endif
    char path[512];
    snprintf(path, sizeof path, "%s", tmp_path("tpc-llama-f16.cmf"));
    cmf_convert_opts opts = {0};
    opts.quant = CMF_DT_F16;
    CHECK_MSG(cmf_convert_hf(shared_path("data/hf-tiny/llama"), path, &opts) == CMF_OK, "convert: %s",
              cmf_last_error());
#ifndef CMF_HAVE_NCCL
    {
        cmf_model *m = NULL;
        cmf_model_params p = {.tp = 2};
        cmf_status st = cmf_model_load_on(path, &p, "cuda", &m);
        CHECK_MSG(st == CMF_E_UNSUPPORTED && strstr(cmf_last_error(), "NCCL"), "tp 2 on cuda without NCCL: %d %s",
                  st, cmf_last_error());
        cmf_model_free(m);
        printf("SKIP: this build has no NCCL (%s)\n", cmf_last_error());
        if (cmf_test_failures) CMF_TEST_END();
        return 77;
    }
#endif
    if (devices < 1) {
        printf("SKIP: no CUDA device\n");
        if (cmf_test_failures) CMF_TEST_END();
        return 77;
    }
    const char *genv = getenv("CMF_CUDA_GRAPH");
    const int graphs_default = !(genv && genv[0] == '0');
    (void)graphs_default; /* read only in a build with NCCL */
    const int quants[2] = {CMF_DT_F16, CMF_DT_Q8_ROW};
    for (size_t ci = 0; ci < sizeof CASES / sizeof *CASES; ci++) {
        int n = 0;
        int32_t *ids = cmf_test_hf_input_ids(CASES[ci], "input_0", &n);
        CHECK_MSG(ids != NULL, "%s: no input_0", CASES[ci]);
        if (!ids) continue;
        for (int qi = 0; qi < 2; qi++) {
            char dir[256], label[128];
            snprintf(dir, sizeof dir, "%s", shared_path("data/hf-tiny"));
            snprintf(dir + strlen(dir), sizeof dir - strlen(dir), "/%s", CASES[ci]);
            snprintf(path, sizeof path, "tpc-%s-%s.cmf", CASES[ci], cmf_dtype_name(quants[qi]));
            snprintf(path, sizeof path, "%s", tmp_path(path));
            opts.quant = quants[qi];
            cmf_model *one = NULL, *tp1 = NULL, *tp2 = NULL;
            cmf_model_params p1 = {.tp = 1}, p2 = {.tp = 2};
            int ok = cmf_convert_hf(dir, path, &opts) == CMF_OK && cmf_model_load_on(path, NULL, "cuda", &one) == CMF_OK;
            CHECK_MSG(ok, "%s: convert / load: %s", CASES[ci], cmf_last_error());
            if (ok) {
                snprintf(label, sizeof label, "%s %s tp1", CASES[ci], cmf_dtype_name(quants[qi]));
                if (cmf_model_load_on(path, &p1, "cuda", &tp1) == CMF_OK) {
                    float w = compare(label, one, tp1, ids, n, 1);
                    printf("%-24s max rel %.2e (bit-exact check)\n", label, w);
                } else {
                    CHECK_MSG(0, "%s: %s", label, cmf_last_error());
                }
            }
            if (ok && devices >= 2) {
                snprintf(label, sizeof label, "%s %s tp2", CASES[ci], cmf_dtype_name(quants[qi]));
                if (cmf_model_load_on(path, &p2, "cuda", &tp2) == CMF_OK) {
                    float w = compare(label, one, tp2, ids, n, 0);
                    int replayed_all = 1;
#ifdef CMF_HAVE_NCCL /* (tp 2 loads only then) */
                    for (int r = 0; r < tp2->tp->n; r++) {
                        uint64_t cap = 0, rep = 0;
                        cmf_backend_cuda_graph_stats(tp2->tp->rank[r]->be, &cap, &rep);
                        if (graphs_default) CHECK_MSG(rep > 0, "%s: rank %d replayed no decode graph (captured %llu)",
                                                      label, r, (unsigned long long)cap);
                        replayed_all = replayed_all && rep > 0;
                        cmf_backend_cuda_set_graphs(tp2->tp->rank[r]->be, 0);
                    }
#endif
                    printf("%-24s max rel %.2e vs one GPU (%d prompt + %d decode, rank graphs %s, %ld symmetric "
                           "windows%s%s), %s\n",
                           label, w, n, N_DECODE, replayed_all ? "replayed" : "off", tp2->tp->windows_made,
                           tp2->tp->sym_note[0] ? ": " : "", tp2->tp->sym_note, cmf_model_backend_desc(tp2));
                    snprintf(label + strlen(label), sizeof label - strlen(label), " eager");
                    w = compare(label, one, tp2, ids, n, 0);
                    printf("%-24s max rel %.2e vs one GPU (rank graphs off)\n", label, w);
                } else {
                    CHECK_MSG(0, "%s: %s", label, cmf_last_error());
                }
            }
            cmf_model_free(tp2);
            cmf_model_free(tp1);
            cmf_model_free(one);
        }
        free(ids);
    }
    if (devices < 2) {
        printf("SKIP: tp = 2 needs 2 CUDA devices (%d found); tp = 1 checked\n", devices);
        if (cmf_test_failures) CMF_TEST_END();
        return 77;
    }
    CMF_TEST_END();
}
