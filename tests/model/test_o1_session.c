/* The O(1) far field inside sessions (DORY.md §3.1, wired in src/model/session.c + forward.c):
 *  - a window wider than the whole run keeps attention exact: logits equal the exact session's;
 *  - with a small window the far field is really used (logits differ), stays finite, and the per-sequence state
 *    does not grow with the context (only seal-length rows of KV are kept for far-field layers);
 *  - priority: explicit spec > CMF_O1 environment > the file hint provenance.o1_attn; CMF_O1=off disables;
 *  - bad specs and soft-capped models are clear errors. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmf.h"
#include "convert/convert.h"
#include "format/format.h"
#include "quant/dtype.h"
#include "testutil.h"

enum { PROMPT = 48, GEN = 40 };

/* Runs PROMPT tokens as one prefill then GEN single-token steps; returns the logits after every step. */
static float *run(cmf_model *m, const cmf_session_params *p, size_t *state_bytes, int *o1_layers) {
    cmf_session *s = NULL;
    if (cmf_session_new_ex(m, p, &s) != CMF_OK) return NULL;
    const int V = cmf_model_vocab_size(m);
    int32_t ids[PROMPT + GEN];
    for (int i = 0; i < PROMPT + GEN; i++) ids[i] = (int32_t)((i * 37 + 11) % V);
    float *out = malloc((size_t)GEN * V * sizeof(float));
    int ok = cmf_session_prefill(s, ids, PROMPT, NULL) == CMF_OK;
    for (int g = 0; ok && g < GEN; g++) {
        ok = cmf_session_decode(s, ids[PROMPT + g]) == CMF_OK;
        memcpy(out + (size_t)g * V, cmf_session_logits(s), (size_t)V * sizeof(float));
    }
    if (state_bytes) *state_bytes = cmf_session_state_bytes(s);
    if (o1_layers) *o1_layers = cmf_session_o1_layers(s);
    cmf_session_free(s);
    if (!ok) {
        free(out);
        return NULL;
    }
    return out;
}

static float maxrel(const float *a, const float *b, size_t n) {
    float d = 0, mx = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(a[i])) return INFINITY;
        if (fabsf(a[i] - b[i]) > d) d = fabsf(a[i] - b[i]);
        if (fabsf(b[i]) > mx) mx = fabsf(b[i]);
    }
    return d / mx;
}

/* Writes a copy of src whose header carries provenance.o1_attn = {"layers": layers, "m": 8, "w": 8, "sink": 2}. */
static int write_hint(const char *src, const char *dst, const char *layers) {
    cmf_file *f = NULL;
    cmf_writer *w = NULL;
    if (cmf_file_open(src, &f) != CMF_OK || cmf_writer_new(dst, &w) != CMF_OK) return -1;
    for (size_t i = 0; i < f->n_tensors; i++) {
        const cmf_tensor *t = &f->tensors[i];
        if (cmf_writer_add(w, t->name, t->dtype, t->ndim, t->shape, t->data, t->nbytes) != CMF_OK) return -1;
    }
    cJSON *h = cJSON_Duplicate(f->header, 1);
    cJSON_DeleteItemFromObjectCaseSensitive(h, "section_hashes");
    cJSON *prov = cJSON_GetObjectItemCaseSensitive(h, "provenance");
    if (!cJSON_IsObject(prov)) {
        cJSON_DeleteItemFromObjectCaseSensitive(h, "provenance");
        prov = cJSON_AddObjectToObject(h, "provenance");
    }
    cJSON *hint = cJSON_AddObjectToObject(prov, "o1_attn");
    cJSON_AddStringToObject(hint, "layers", layers);
    cJSON_AddNumberToObject(hint, "m", 8);
    cJSON_AddNumberToObject(hint, "w", 8);
    cJSON_AddNumberToObject(hint, "sink", 2);
    cmf_writer_set_header(w, h);
    int rc = cmf_writer_finish(w) == CMF_OK ? 0 : -1;
    cmf_file_close(f);
    return rc;
}

int main(void) {
    unsetenv("CMF_O1");
    char path[1024], hinted[1024], gpath[1024];
    snprintf(path, sizeof path, "%s", tmp_path("o1-qwen3.cmf"));
    snprintf(hinted, sizeof hinted, "%s", tmp_path("o1-qwen3-hint.cmf"));
    snprintf(gpath, sizeof gpath, "%s", tmp_path("o1-gemma2.cmf"));
    cmf_convert_opts o = {0};
    o.quant = CMF_DT_F32;
    CHECK_MSG(cmf_convert_hf(shared_path("data/hf-tiny/qwen3"), path, &o) == CMF_OK, "%s", cmf_last_error());
    CHECK(write_hint(path, hinted, "deep2") == 0);
    cmf_model *m = NULL, *mh = NULL;
    CHECK_MSG(cmf_model_load(path, NULL, &m) == CMF_OK, "%s", cmf_last_error());
    CHECK_MSG(cmf_model_load(hinted, NULL, &mh) == CMF_OK, "%s", cmf_last_error());
    if (!m || !mh) CMF_TEST_END();
    const int V = cmf_model_vocab_size(m);
    const size_t N = (size_t)GEN * V;

    cmf_session_params exact = {0};
    exact.n_ctx = 512;
    size_t bytes_exact = 0;
    int layers = -1;
    float *ref = run(m, &exact, &bytes_exact, &layers);
    CHECK(ref && layers == 0);

    /* window wider than the run: exact */
    cmf_session_params wide = exact;
    wide.o1 = "all";
    wide.o1_window = 256;
    float *a = run(m, &wide, NULL, &layers);
    CHECK_MSG(a != NULL, "%s", cmf_last_error());
    CHECK(layers == 3);
    if (a && ref) CHECK_MSG(maxrel(a, ref, N) < 1e-5f, "wide window differs from exact: %g", maxrel(a, ref, N));

    /* small window: the far field is used, output finite, state bounded by the seal length */
    cmf_session_params small = exact;
    small.o1 = "all";
    small.o1_window = 8;
    small.o1_sink = 2;
    small.o1_sink_set = 1;
    small.o1_m = 8;
    small.n_ctx = 4096;
    small.o1_seal = 64;
    size_t bytes_small = 0;
    float *b = run(m, &small, &bytes_small, &layers);
    CHECK_MSG(b != NULL, "%s", cmf_last_error());
    if (b && ref) {
        float d = maxrel(b, ref, N);
        printf("o1 w8 m8 sink2 vs exact: max rel logit diff %.3g; state %zu bytes at ctx 4096 (exact KV at ctx 512: "
               "%zu)\n",
               d, bytes_small, bytes_exact);
        CHECK(isfinite(d) && d > 1e-6f); /* the far field changed something */
    }
    CHECK(bytes_small < bytes_exact); /* ctx 4096 with o1 costs less than exact at ctx 512 */

    /* the file hint applies when no spec is given; CMF_O1=off disables it; an explicit spec wins */
    cmf_session_params none = {0};
    none.n_ctx = 256;
    float *h = run(mh, &none, NULL, &layers);
    CHECK(h && layers == 2);
    setenv("CMF_O1", "off", 1);
    free(run(mh, &none, NULL, &layers));
    CHECK(layers == 0);
    setenv("CMF_O1", "1", 1); /* the environment beats the file hint */
    free(run(mh, &none, NULL, &layers));
    CHECK(layers == 1);
    setenv("CMF_O1", "0", 1); /* "0" disables, as "off" (the reference's convention) */
    free(run(mh, &none, NULL, &layers));
    CHECK(layers == 0);
    unsetenv("CMF_O1");
    cmf_session *bad = NULL;
    cmf_session_params expl = none;
    expl.o1 = "0,1";
    free(run(mh, &expl, NULL, &layers));
    CHECK(layers == 2);

    /* errors */
    const char *bad_specs[] = {"deep0", "9", "x", "1,,2", "all2"};
    for (size_t i = 0; i < sizeof bad_specs / sizeof *bad_specs; i++) {
        cmf_session_params p = none;
        p.o1 = bad_specs[i];
        cmf_session *s = NULL;
        CHECK_MSG(cmf_session_new_ex(m, &p, &s) == CMF_E_ARG && s == NULL, "spec '%s' accepted", bad_specs[i]);
    }
    cmf_session_params frect = none;
    frect.o1 = "all";
    frect.o1_rect = "max";
    CHECK(cmf_session_new_ex(m, &frect, &bad) == CMF_E_ARG);
    CHECK(cmf_convert_hf(shared_path("data/hf-tiny/gemma2"), gpath, &o) == CMF_OK);
    cmf_model *g = NULL;
    CHECK(cmf_model_load(gpath, NULL, &g) == CMF_OK);
    if (g) {
        cmf_session_params p = none;
        p.o1 = "all";
        CHECK(cmf_session_new_ex(g, &p, &bad) == CMF_E_UNSUPPORTED); /* soft-capping */
        p.o1 = "1,2";                                                /* layer 2 is sliding */
        CHECK(cmf_session_new_ex(g, &p, &bad) == CMF_E_ARG);
        CHECK(strstr(cmf_last_error(), "sliding") != NULL);
        cmf_model_free(g);
    }
    free(ref);
    free(a);
    free(b);
    free(h);
    cmf_model_free(m);
    cmf_model_free(mh);
    CMF_TEST_END();
}
