/* Continuous batching: one cmf_batch_run over interleaved tokens of several sessions gives each session the
 * same logits as running it alone (the f32 reference path within 1e-5 x max|logit|; the int8 paths: see main), and a
 * failing call changes nothing. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/ops.h"
#include "cmf.h"
#include "convert/convert.h"
#include "quant/dtype.h"
#include "testutil.h"

static float maxdiff(const float *a, const float *b, int n, float *scale) {
    float d = 0, mx = 0;
    for (int i = 0; i < n; i++) {
        if (fabsf(a[i] - b[i]) > d) d = fabsf(a[i] - b[i]);
        if (fabsf(b[i]) > mx) mx = fabsf(b[i]);
    }
    *scale = mx;
    return d;
}

/* Runs every session alone, then batched, and compares the logits after every token within bound x max|logit|. */
static void check_batched(cmf_model *m, float bound, const char *label) {
    const int V = cmf_model_vocab_size(m);
    enum { NS = 3, LEN = 12 };
    int32_t toks[NS][LEN];
    for (int s = 0; s < NS; s++)
        for (int i = 0; i < LEN; i++) toks[s][i] = (int32_t)((s * 131 + i * 17 + 5) % V);

    /* reference: each session alone, token by token, logits after every token */
    static float ref[NS][LEN][1024];
    CHECK(V <= 1024);
    for (int s = 0; s < NS; s++) {
        cmf_session *ss = NULL;
        CHECK(cmf_session_new(m, 64, &ss) == CMF_OK);
        for (int i = 0; i < LEN; i++) {
            CHECK(cmf_session_decode(ss, toks[s][i]) == CMF_OK);
            memcpy(ref[s][i], cmf_session_logits(ss), V * sizeof(float));
        }
        cmf_session_free(ss);
    }

    /* batched: session 0 prefills 5 tokens while 1 and 2 decode one each, then all decode together */
    cmf_session *sess[NS];
    for (int s = 0; s < NS; s++) CHECK(cmf_session_new(m, 64, &sess[s]) == CMF_OK);
    cmf_batch *b = NULL;
    CHECK(cmf_batch_new(m, 16, 4, &b) == CMF_OK);
    int done[NS] = {0};
    for (int step = 0; done[0] < LEN || done[1] < LEN || done[2] < LEN; step++) {
        cmf_session *seqs[16];
        int32_t ids[16];
        int n = 0;
        for (int s = 0; s < NS; s++) {
            int want = (s == 0 && step == 0) ? 5 : 1;
            for (int k = 0; k < want && done[s] < LEN; k++, n++) {
                seqs[n] = sess[s];
                ids[n] = toks[s][done[s]++];
            }
        }
        /* interleave: move the last token to the front to check order handling across sessions */
        if (n > 2) {
            cmf_session *ts = seqs[n - 1];
            int32_t ti = ids[n - 1];
            memmove(seqs + 1, seqs, (size_t)(n - 1) * sizeof *seqs);
            memmove(ids + 1, ids, (size_t)(n - 1) * sizeof *ids);
            seqs[0] = ts;
            ids[0] = ti;
        }
        CHECK_MSG(cmf_batch_run(b, seqs, ids, n) == CMF_OK, "%s", cmf_last_error());
        for (int s = 0; s < NS; s++) {
            float scale = 0;
            float d = maxdiff(cmf_session_logits(sess[s]), ref[s][done[s] - 1], V, &scale);
            CHECK_MSG(d <= bound * scale, "%s: step %d session %d pos %d: max|diff| %g (scale %g)", label, step, s, done[s], d,
                      scale);
        }
    }
    for (int s = 0; s < NS; s++) CHECK(cmf_session_pos(sess[s]) == LEN);
    cmf_batch_free(b);
    for (int s = 0; s < NS; s++) cmf_session_free(sess[s]);
}


int main(void) {
    char path[1024];
    snprintf(path, sizeof path, "%s", tmp_path("batch-qwen3.cmf"));
    cmf_convert_opts o = {0};
    o.quant = CMF_DT_Q8_ROW;
    CHECK_MSG(cmf_convert_hf(shared_path("data/hf-tiny/qwen3"), path, &o) == CMF_OK, "%s", cmf_last_error());
    cmf_model *m = NULL;
    CHECK_MSG(cmf_model_load(path, NULL, &m) == CMF_OK, "%s", cmf_last_error());
    if (!m) CMF_TEST_END();
    /* The f32 reference path computes every product the same way whatever the number of tokens: batching must
     * then change nothing beyond rounding. The int8 paths: the repacked kernels (the default) sum a token in the
     * same order alone or in a batch, so they give the same bits (tests/model/test_batch_invariance checks that
     * exactly); with CMF_CPU_REPACK=0 the kernels for 1-2 tokens and the tiles for more sum in different orders,
     * which moves activations by ~1e-7 and can flip the rounding of an int8 activation in the next layer (one
     * step of a 1/127 block scale), up to ~1e-4 x max|logit| here: hence the 1e-3 bound below. */
    const int cpu_path = cmf_cpu_path();
    CHECK(cmf_cpu_set_path(CMF_CPU_F32REF) == CMF_OK);
    check_batched(m, 1e-5f, "f32ref");
    CHECK(cmf_cpu_set_path(cpu_path) == CMF_OK);
    check_batched(m, 1e-3f, "int8");

    enum { NS = 3, LEN = 12 };
    const int V = cmf_model_vocab_size(m);
    cmf_session *sess[NS];
    for (int s = 0; s < NS; s++) CHECK(cmf_session_new(m, 64, &sess[s]) == CMF_OK);
    for (int s = 0; s < NS; s++)
        for (int i = 0; i < LEN; i++) CHECK(cmf_session_decode(sess[s], (int32_t)i) == CMF_OK);
    cmf_batch *b = NULL;
    CHECK(cmf_batch_new(m, 16, 4, &b) == CMF_OK);
    /* errors leave everything unchanged */
    cmf_session *seqs[20];
    int32_t ids[20] = {0};
    for (int i = 0; i < 20; i++) seqs[i] = sess[i % NS];
    CHECK(cmf_batch_run(b, seqs, ids, 17) == CMF_E_ARG); /* more than max_tokens */
    ids[2] = V;                                          /* out of vocabulary */
    CHECK(cmf_batch_run(b, seqs, ids, 6) == CMF_E_ARG);
    CHECK(strstr(cmf_last_error(), "vocabulary") != NULL);
    for (int s = 0; s < NS; s++) CHECK(cmf_session_pos(sess[s]) == LEN);
    cmf_batch *small = NULL;
    CHECK(cmf_batch_new(m, 4, 1, &small) == CMF_OK);
    ids[2] = 0;
    CHECK(cmf_batch_run(small, seqs, ids, 2) == CMF_E_ARG); /* two sessions, batch takes one */
    cmf_batch *bad = NULL;
    CHECK(cmf_batch_new(m, 4, 5, &bad) == CMF_E_ARG && bad == NULL); /* more sessions than tokens */
    cmf_batch_free(small);
    cmf_batch_free(b);
    for (int s = 0; s < NS; s++) cmf_session_free(sess[s]);
    cmf_model_free(m);
    CMF_TEST_END();
}
