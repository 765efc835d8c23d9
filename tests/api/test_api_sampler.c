/* test_api_sampler.c — the public sampler (cmf.h, cmf_sampler_*) on real logits: stories260K (shared GGUF,
 * converted to a scratch file) after a prompt. Checks, each against the logits themselves:
 *   - temperature 0 picks the argmax; temperature 0.8 with top_k 1 too;
 *   - a repeat penalty on the argmax token (accepted) makes greedy pick the second-largest logit;
 *   - the same seed gives the same 32 draws (temperature 100: not all one token), and cmf_sampler_reset restarts them; every draw is inside the
 *     top-k set (k = 5) of the logits;
 *   - bad params are CMF_E_ARG (top_p 0, min_p 2, repeat_penalty 0, NaN temperature, vocab 0). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cmf.h"
#include "convert/convert.h"
#include "testutil.h"

static int rank_of(const float *l, int V, int id) { /* how many logits are larger */
    int r = 0;
    for (int i = 0; i < V; i++) r += l[i] > l[id];
    return r;
}

int main(void) {
    char path[1024];
    snprintf(path, sizeof path, "%s", tmp_path("api_sampler_stories.cmf"));
    cmf_convert_opts o = {0};
    CHECK_MSG(cmf_convert_gguf(shared_path("data/models/stories260K-gguf/stories260Ktok512.gguf"), path, &o) == CMF_OK,
              "%s", cmf_last_error());
    cmf_model *m = NULL;
    cmf_session *s = NULL;
    CHECK_MSG(cmf_model_load(path, NULL, &m) == CMF_OK, "%s", cmf_last_error());
    if (m) CHECK(cmf_session_new(m, 32, &s) == CMF_OK);
    const int32_t prompt[4] = {1, 403, 407, 261};
    if (!s || cmf_session_prefill(s, prompt, 4, NULL) != CMF_OK) {
        CHECK_MSG(0, "prefill: %s", cmf_last_error());
        cmf_model_free(m);
        unlink(path);
        CMF_TEST_END();
    }
    const int V = cmf_model_vocab_size(m);
    const float *l = cmf_session_logits(s);
    int best = 0, second = -1;
    for (int i = 1; i < V; i++)
        if (l[i] > l[best]) best = i;
    for (int i = 0; i < V; i++)
        if (i != best && (second < 0 || l[i] > l[second])) second = i;

    cmf_sampler_params p = cmf_sampler_default_params();
    cmf_sampler *smp = NULL;
    int32_t t = -1;
    p.temperature = 0;
    CHECK(cmf_sampler_new(V, &p, &smp) == CMF_OK);
    CHECK(cmf_sampler_sample(smp, l, &t) == CMF_OK && t == best);
    cmf_sampler_free(smp);

    p = cmf_sampler_default_params();
    p.top_k = 1;
    CHECK(cmf_sampler_new(V, &p, &smp) == CMF_OK);
    for (int i = 0; i < 8; i++) CHECK(cmf_sampler_sample(smp, l, &t) == CMF_OK && t == best);
    cmf_sampler_free(smp);

    /* repetition penalty: the accepted argmax is divided (or multiplied) by 1e6 and drops below the second */
    p = cmf_sampler_default_params();
    p.temperature = 0, p.repeat_penalty = 1e6f, p.penalty_last_n = 4;
    CHECK(cmf_sampler_new(V, &p, &smp) == CMF_OK);
    cmf_sampler_accept(smp, best);
    CHECK_MSG(cmf_sampler_sample(smp, l, &t) == CMF_OK && t == second, "penalized greedy %d, want %d", t, second);
    cmf_sampler_reset(smp); /* forgets the window */
    CHECK(cmf_sampler_sample(smp, l, &t) == CMF_OK && t == best);
    cmf_sampler_free(smp);

    /* seeded draws: reproducible, restartable, inside the top-k set */
    p = cmf_sampler_default_params();
    p.temperature = 100.0f, p.top_k = 5, p.top_p = 1.0f, p.seed = 1234; /* nearly flat over the top 5 */
    int32_t a[32], b[32];
    CHECK(cmf_sampler_new(V, &p, &smp) == CMF_OK);
    for (int i = 0; i < 32; i++) CHECK(cmf_sampler_sample(smp, l, &a[i]) == CMF_OK && rank_of(l, V, a[i]) < 5);
    cmf_sampler_reset(smp);
    for (int i = 0; i < 32; i++) CHECK(cmf_sampler_sample(smp, l, &b[i]) == CMF_OK);
    CHECK(!memcmp(a, b, sizeof a));
    int distinct = 0;
    for (int i = 1; i < 32; i++) distinct |= a[i] != a[0];
    CHECK_MSG(distinct, "32 draws at temperature 100 over 5 tokens were all %d", a[0]);
    cmf_sampler_free(smp);

    /* refused params */
    cmf_sampler_params bad[5];
    for (int i = 0; i < 5; i++) bad[i] = cmf_sampler_default_params();
    bad[0].top_p = 0, bad[1].min_p = 2, bad[2].repeat_penalty = 0, bad[3].temperature = NAN, bad[4].top_k = -1;
    for (int i = 0; i < 5; i++) {
        smp = (cmf_sampler *)1;
        CHECK_MSG(cmf_sampler_new(V, &bad[i], &smp) == CMF_E_ARG && smp == NULL, "bad params %d accepted", i);
    }
    CHECK(cmf_sampler_new(0, &p, &smp) == CMF_E_ARG);

    cmf_session_free(s);
    cmf_model_free(m);
    unlink(path);
    CMF_TEST_END();
}
