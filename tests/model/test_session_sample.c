/* cmf_session_sample against cmf_sampler_sample on the CPU backend (issue 6: sampling on the device): on hf-tiny
 * llama / qwen3 / gemma2 (softcap) and stories260K, over the grid of tests/model/sample_grid.h (greedy, penalties,
 * temperatures, top-k 1 .. vocab, top-p, min-p, top_k 0, several seeds; 40 steps each), every step's token from
 * cmf_session_sample equals cmf_sampler_sample's on cmf_session_logits (a second sampler with the same settings)
 * and the host model of the CUDA path's selection (penalties from the sampler's window, the 64-bit keys of
 * sample.cu sorted, cmf_sampler_finish_topk) -- so the steps the device hands to the host are checked here on real
 * logits, and tests/gpu/test_gpu_sample checks the device against the same. Crafted rows (ties, NaN, +-inf, signed
 * zeros, k above the finite count, k = vocab) for the host model too, and the NULL / vocabulary errors. */
#include <stdio.h>
#include <string.h>

#include "cmf.h"
#include "convert/convert.h"
#include "quant/dtype.h"
#include "sample/sample.h"
#include "testutil.h"

#include "sample_grid.h"

static cmf_model *load(const char *hf, int dtype) {
    char path[1024], dir[256];
    snprintf(path, sizeof path, "sess-sample-%s.cmf", hf);
    snprintf(path, sizeof path, "%s", tmp_path(path));
    cmf_convert_opts o = {0};
    o.quant = dtype;
    cmf_status st;
    if (!strcmp(hf, "stories260K")) {
        st = cmf_convert_gguf(shared_path("data/models/stories260K-gguf/stories260Ktok512.gguf"), path, &o);
    } else {
        snprintf(dir, sizeof dir, "data/hf-tiny/%s", hf);
        st = cmf_convert_hf(shared_path(dir), path, &o);
    }
    CHECK_MSG(st == CMF_OK, "%s: convert: %s", hf, cmf_last_error());
    cmf_model *m = NULL;
    CHECK_MSG(cmf_model_load(path, NULL, &m) == CMF_OK, "%s: load: %s", hf, cmf_last_error());
    return m;
}

static void errors(cmf_model *m) {
    cmf_sampler_params p = cmf_sampler_default_params();
    cmf_sampler *smp = NULL, *small = NULL;
    CHECK(cmf_sampler_new(cmf_model_vocab_size(m), &p, &smp) == CMF_OK);
    CHECK(cmf_sampler_new(7, &p, &small) == CMF_OK);
    cmf_session *s = NULL;
    CHECK(cmf_session_new(m, 16, &s) == CMF_OK);
    int32_t t = -1;
    CHECK(cmf_session_sample(s, smp, &t) == CMF_E_ARG && strstr(cmf_last_error(), "no position"));
    const int32_t one = 1;
    CHECK(cmf_session_prefill(s, &one, 1, NULL) == CMF_OK);
    CHECK(cmf_session_sample(s, small, &t) == CMF_E_ARG && strstr(cmf_last_error(), "vocabulary"));
    CHECK(cmf_session_sample(s, smp, &t) == CMF_OK && t >= 0 && t < cmf_model_vocab_size(m));
    cmf_session_free(s);
    cmf_sampler_free(smp);
    cmf_sampler_free(small);
}

int main(void) {
    grid_crafted();
    static const struct {
        const char *hf;
        int dtype;
    } M[] = {{"llama", CMF_DT_F16}, {"qwen3", CMF_DT_Q8_ROW}, {"gemma2", CMF_DT_F16}, {"stories260K", 0}};
    for (size_t i = 0; i < sizeof M / sizeof *M; i++) {
        cmf_model *m = load(M[i].hf, M[i].dtype);
        if (!m) continue;
        if (i == 0) errors(m);
        const int n = grid_run(m, M[i].hf);
        printf("%s: %d steps agree\n", M[i].hf, n);
        CHECK_MSG(n == (int)(sizeof GRID / sizeof *GRID) * GRID_STEPS, "%s: %d steps", M[i].hf, n);
        cmf_model_free(m);
    }
    CMF_TEST_END();
}
