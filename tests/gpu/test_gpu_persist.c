/* The persistent decode kernel (src/backend/cuda/persist.cu, CMF_CUDA_PERSIST) against the decode-step graph path
 * of the same backend: a prompt, then greedy decode steps (one session, one token each) with the kernel on and off
 * (cmf_backend_cuda_set_persist); every step's logits must be bit for bit the same (the kernel reproduces the graph
 * path's sums: Q8_0 activations, the int8 products' order, the fused RoPE attention), and with it on every decode
 * step must have run through it (cmf_backend_cuda_persist_steps). Files:
 *  - hf-tiny qwen3 (shared/data) converted to q8_row: hidden 64, head_dim 32, GQA 2, q/k norms, 3 layers;
 *  - make_random_llama files (the writer of bench/cuda, q8): a Qwen3-0.6B-shaped pair of layers (hidden 1024,
 *    16 / 8 heads of 128, MLP 3072: o_proj and down_proj rows take matvec_i8.cu's 2-warp split-column sums) and a
 *    Llama-shaped MHA pair (hidden 512, 4 / 4 heads of 128, MLP 1536, no q/k norm).
 * The prompt is 60 tokens and 24 steps follow, so the attention's split count changes inside the run (64 keys per
 * split). A two-session batch step must fall back (not counted) and still match. The same with the weights moved
 * by the bulk-copy engine (CMF_CUDA_PERSIST_TMA=1). Without a CUDA device: exit 77. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmf.h"
#include "convert/convert.h"
#include "quant/dtype.h"
#include "testutil.h"
#ifdef CMF_HAVE_CUDA
#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/persist.h"
#include "model/model.h"

enum { N_PROMPT = 60, N_STEPS = 24, N_CTX = 128 };

/* Prompt + N_STEPS greedy steps (+ one two-session batch step) with the kernel on or off; logits into out
 * [(N_STEPS + 2) * V]. Returns the persistent steps taken. */
static uint64_t run(const char *label, cmf_model *m, int on, float *out) {
    const int V = cmf_model_vocab_size(m);
    cmf_backend_cuda_set_persist(m->be, on);
    const uint64_t s0 = cmf_backend_cuda_persist_steps(m->be);
    int32_t ids[N_PROMPT];
    uint64_t rng = 0x9e3779b97f4a7c15ull;
    for (int i = 0; i < N_PROMPT; i++) {
        rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
        ids[i] = (int32_t)(rng % (uint64_t)V);
    }
    cmf_session *s = NULL, *s2 = NULL;
    cmf_batch *b = NULL;
    int ok = cmf_session_new(m, N_CTX, &s) == CMF_OK && cmf_session_new(m, N_CTX, &s2) == CMF_OK &&
             cmf_batch_new(m, 8, 2, &b) == CMF_OK && cmf_session_prefill(s, ids, N_PROMPT, NULL) == CMF_OK &&
             cmf_session_prefill(s2, ids, 9, NULL) == CMF_OK;
    for (int g = 0; g < N_STEPS && ok; g++) {
        ok = cmf_session_decode(s, cmf_test_argmax(cmf_session_logits(s), V)) == CMF_OK;
        if (ok) memcpy(out + (size_t)g * V, cmf_session_logits(s), (size_t)V * sizeof(float));
    }
    if (ok) { /* two sessions, one token each: not a one-token step, the graph path runs it */
        cmf_session *seqs[2] = {s, s2};
        int32_t toks[2] = {cmf_test_argmax(cmf_session_logits(s), V), cmf_test_argmax(cmf_session_logits(s2), V)};
        ok = cmf_batch_run(b, seqs, toks, 2) == CMF_OK;
        for (int i = 0; i < 2 && ok; i++)
            memcpy(out + (size_t)(N_STEPS + i) * V, cmf_session_logits(seqs[i]), (size_t)V * sizeof(float));
    }
    CHECK_MSG(ok, "%s: persist %s: %s", label, on ? "on" : "off", cmf_last_error());
    cmf_batch_free(b);
    cmf_session_free(s);
    cmf_session_free(s2);
    return cmf_backend_cuda_persist_steps(m->be) - s0;
}

static void check_file(const char *label, const char *path) {
    cmf_model *m = NULL;
    if (cmf_model_load_on(path, NULL, "cuda", &m) != CMF_OK) {
        CHECK_MSG(0, "%s: load: %s", label, cmf_last_error());
        return;
    }
    const int V = cmf_model_vocab_size(m);
    const size_t n = (size_t)(N_STEPS + 2) * V;
    float *off = calloc(n, sizeof(float)), *on = calloc(n, sizeof(float));
    const uint64_t p_off = run(label, m, 0, off), p_on = run(label, m, 1, on);
    CHECK_MSG(p_off == 0, "%s: %llu persistent steps while off", label, (unsigned long long)p_off);
    CHECK_MSG(p_on == N_STEPS, "%s: %llu persistent steps of %d", label, (unsigned long long)p_on, N_STEPS);
    size_t differ = 0, first = n;
    for (size_t i = 0; i < n; i++)
        if (memcmp(&off[i], &on[i], sizeof(float))) differ++, first = first < i ? first : i;
    CHECK_MSG(differ == 0, "%s: %zu of %zu logits differ (first: step %zu, token %zu: %.9g vs %.9g; rel %.3e)", label,
              differ, n, first / (size_t)V, first % (size_t)V, differ ? off[first] : 0.0, differ ? on[first] : 0.0,
              (double)cmf_test_rel_diff(off, on, n));
    printf("%s: %llu persistent steps, logits %s\n", label, (unsigned long long)p_on,
           differ ? "DIFFER" : "bit-identical to the graph path");
    cmf_model_free(m);
    /* the weights by bulk copies (CMF_CUDA_PERSIST_TMA=1, read when the backend builds its kernel table) */
    setenv("CMF_CUDA_PERSIST_TMA", "1", 1);
    m = NULL;
    if (cmf_model_load_on(path, NULL, "cuda", &m) == CMF_OK) {
        const uint64_t p_tma = run(label, m, 1, on);
        differ = 0;
        for (size_t i = 0; i < n; i++) differ += memcmp(&off[i], &on[i], sizeof(float)) != 0;
        CHECK_MSG(p_tma == N_STEPS && differ == 0, "%s: bulk copies: %llu persistent steps, %zu logits differ", label,
                  (unsigned long long)p_tma, differ);
        printf("%s: bulk copies: %llu persistent steps, logits %s\n", label, (unsigned long long)p_tma,
               differ ? "DIFFER" : "bit-identical to the graph path");
    } else {
        CHECK_MSG(0, "%s: load: %s", label, cmf_last_error());
    }
    unsetenv("CMF_CUDA_PERSIST_TMA");
    free(off);
    free(on);
    cmf_model_free(m);
}

static int have_device(void) {
    int n = 0;
    cmf_cuda_device_count(&n);
    return n > 0;
}
#endif

int main(void) {
#ifndef CMF_HAVE_CUDA
    printf("SKIP: built without CUDA\n");
    return 77;
#else
    if (!have_device()) {
        printf("SKIP: no usable CUDA device\n");
        return 77;
    }
    /* the persistent kernel's attention items are the plain decode kernel's (attn_split_item), so the graph path it
     * is compared with takes that form, not the cluster form (attention.cu) */
    cmf_cuda_set_attn_cluster(0);
    char path[1024];
    snprintf(path, sizeof path, "%s", tmp_path("persist-qwen3-q8.cmf"));
    cmf_convert_opts opts = {0};
    opts.quant = CMF_DT_Q8_ROW;
    CHECK_MSG(cmf_convert_hf(shared_path("data/hf-tiny/qwen3"), path, &opts) == CMF_OK, "convert: %s",
              cmf_last_error());
    check_file("hf-tiny qwen3 q8_row", path);
    /* make_random_llama OUT DTYPE hidden layers intermediate vocab n_heads n_kv_heads head_dim qk_norm tied threads */
    static const char *SHAPES[][2] = {
        {"qwen3-0.6b-shaped 2 layers", "1024 2 3072 4096 16 8 128 1 1 4"},
        {"llama-shaped MHA 2 layers", "512 2 1536 2048 4 4 128 0 0 4"},
    };
    for (size_t i = 0; i < sizeof SHAPES / sizeof *SHAPES; i++) {
        char file[1024], cmd[4096];
        snprintf(file, sizeof file, "%s", tmp_path(i ? "persist-llama-q8.cmf" : "persist-qwen3s-q8.cmf"));
        snprintf(cmd, sizeof cmd, "'%s' '%s' q8 %s > /dev/null", CMF_MAKE_RANDOM_LLAMA, file, SHAPES[i][1]);
        const int rc = system(cmd);
        CHECK_MSG(rc == 0, "%s: '%s' exited %d", SHAPES[i][0], cmd, rc);
        if (rc == 0) check_file(SHAPES[i][0], file);
    }
    CMF_TEST_END();
#endif
}
