/* test_dory_api.c — Dory through the public API (cmf_model_load / cmf_session_new_ex / prefill / decode): the
 * logits equal llama.cpp's numpy reference (tests/data/dory/tiny) for loops 1, 2 and 4, token by token too; the
 * early-exit gate through session params; options that do not apply are refused. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmf.h"
#include "dorytest.h"
#include "testutil.h"

int main(void) {
    dory_fixture fx;
    if (dory_fixture_open("tiny", &fx) != 0) return 1;
    cmf_model *m = NULL;
    char path[1024];
    snprintf(path, sizeof path, "%s.dory%d.cmf", tmp_path("tiny"), 0); /* written by dory_fixture_open (f32) */
    CHECK_MSG(cmf_model_load(path, NULL, &m) == CMF_OK, "%s", cmf_last_error());
    if (!m) return 1;
    CHECK(!strcmp(cmf_model_arch(m), "dory"));
    const int V = cmf_model_vocab_size(m);
    int n = 0;
    int32_t *ids = dory_ref_tokens(&fx, 0, &n);
    CHECK(ids && n > 2);
    static const int LOOPS[] = {1, 2, 4};
    for (int li = 0; li < 3 && ids; li++) {
        char name[64];
        size_t cnt = 0;
        snprintf(name, sizeof name, "logits_0_k%d", LOOPS[li]);
        float *ref = dory_ref_floats(&fx, name, &cnt);
        CHECK(ref && cnt == (size_t)n * V);
        cmf_session_params p = {0};
        p.n_ctx = 64;
        p.loops = LOOPS[li];
        p.dory_kv_mode = "per_loop";
        cmf_session *s = NULL;
        CHECK_MSG(cmf_session_new_ex(m, &p, &s) == CMF_OK, "%s", cmf_last_error());
        float *all = malloc((size_t)n * V * sizeof(float));
        CHECK(s && cmf_session_prefill(s, ids, n, all) == CMF_OK);
        double mr, err = dory_max_abs_diff(all, ref, (size_t)n * V, &mr);
        CHECK_MSG(err <= 3e-5 * mr, "loops %d: prefill max|err| %g (max|ref| %g)", LOOPS[li], err, mr);
        /* token by token: each step's logits equal the reference row */
        cmf_session_reset(s);
        for (int i = 0; i < n && s; i++) {
            CHECK(cmf_session_decode(s, ids[i]) == CMF_OK);
            err = dory_max_abs_diff(cmf_session_logits(s), ref + (size_t)i * V, (size_t)V, &mr);
            CHECK_MSG(err <= 3e-5 * mr, "loops %d pos %d: decode max|err| %g", LOOPS[li], i, err);
        }
        CHECK(s && cmf_session_pos(s) == n);
        free(all);
        free(ref);
        cmf_session_free(s);
    }
    /* gate above 1: always two passes = a last_loop session with loops 2, bit for bit */
    cmf_session_params g = {0}, l2 = {0};
    g.n_ctx = l2.n_ctx = 64;
    g.loops = l2.loops = 2;
    g.gate = 1.5f;
    l2.dory_kv_mode = "last_loop";
    cmf_session *s = NULL, *s2 = NULL;
    CHECK_MSG(cmf_session_new_ex(m, &g, &s) == CMF_OK, "%s", cmf_last_error());
    CHECK_MSG(cmf_session_new_ex(m, &l2, &s2) == CMF_OK, "%s", cmf_last_error());
    for (int i = 0; s && s2 && i < n; i++) {
        CHECK(cmf_session_decode(s, ids[i]) == CMF_OK && cmf_session_decode(s2, ids[i]) == CMF_OK);
        CHECK_MSG(!memcmp(cmf_session_logits(s), cmf_session_logits(s2), (size_t)V * sizeof(float)),
                  "gate 1.5 pos %d differs from loops 2", i);
    }
    long gated = 0;
    CHECK(s && cmf_session_gate_one_pass_share(s, &gated) == 0.0 && gated == n);
    cmf_session_free(s);
    cmf_session_free(s2);
    /* options that do not apply */
    cmf_session_params bad = {0};
    bad.dory_kv_mode = "sometimes";
    CHECK(cmf_session_new_ex(m, &bad, &s) == CMF_E_ARG);
    bad.dory_kv_mode = NULL;
    bad.o1 = "all"; /* the far field runs on Dory sessions now (test_dory_session); with the Conf gate it cannot */
    CHECK(cmf_session_new_ex(m, &bad, &s) == CMF_OK && s && cmf_session_o1_layers(s) > 0);
    cmf_session_free(s);
    s = NULL;
    bad.gate = 0.5f;
    CHECK(cmf_session_new_ex(m, &bad, &s) == CMF_E_UNSUPPORTED && !s);
    cmf_batch *b = NULL;
    CHECK(cmf_batch_new(m, 4, 1, &b) == CMF_E_UNSUPPORTED && b == NULL);
    free(ids);
    cmf_model_free(m);
    dory_fixture_close(&fx);
    CMF_TEST_END();
}
