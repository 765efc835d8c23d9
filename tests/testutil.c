#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include <string.h>

#include "cmf.h"
#include "convert/safetensors.h"

int cmf_test_failures = 0;

const char *shared_path(const char *rel) {
    static char buf[4096];
    const char *root = getenv("CMF_SHARED");
    snprintf(buf, sizeof buf, "%s/%s", root ? root : "../shared", rel);
    return buf;
}

const char *tmp_path(const char *name) {
    static char buf[4096];
    const char *root = getenv("CMF_TMP");
    snprintf(buf, sizeof buf, "%s/%s", root ? root : "/tmp", name);
    return buf;
}

const char *testdata_path(const char *rel) {
    static char buf[4096];
    const char *root = getenv("CMF_TESTDATA");
    snprintf(buf, sizeof buf, "%s/%s", root ? root : "tests/data", rel);
    return buf;
}

int cmf_test_argmax(const float *x, int n) {
    int b = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[b]) b = i;
    return b;
}

float cmf_test_rel_diff(const float *ref, const float *x, size_t n) {
    float mx = 0, md = 0;
    for (size_t i = 0; i < n; i++) {
        if (fabsf(ref[i]) > mx) mx = fabsf(ref[i]);
        if (!(fabsf(ref[i] - x[i]) <= md)) md = isnan(x[i]) ? INFINITY : fabsf(ref[i] - x[i]);
    }
    return mx > 0 ? md / mx : md;
}

int32_t *cmf_test_st_ids(const cmf_safetensors *st, const char *name, int *n) {
    const cmf_st_tensor *t = cmf_st_find(st, name);
    if (!t) return NULL;
    *n = (int)cmf_st_numel(t);
    float *f = malloc((size_t)*n * sizeof(float));
    int32_t *ids = malloc((size_t)*n * sizeof(int32_t));
    if (f && ids && cmf_st_to_f32(t, f) == CMF_OK) {
        for (int i = 0; i < *n; i++) ids[i] = (int32_t)f[i];
    } else {
        free(ids);
        ids = NULL;
    }
    free(f);
    return ids;
}

int32_t *cmf_test_hf_input_ids(const char *hf_case, const char *name, int *n) {
    char rel[256];
    snprintf(rel, sizeof rel, "data/hf-tiny/%s/ref.safetensors", hf_case);
    cmf_safetensors *st = NULL;
    if (cmf_st_open(shared_path(rel), &st) != CMF_OK) return NULL;
    int32_t *ids = cmf_test_st_ids(st, name, n);
    cmf_st_close(st);
    return ids;
}

void cmf_test_decode_alone(cmf_model *m, int n_ctx, int n_seq, const int *lens, int32_t (*tok)(int s, int i, int V),
                           float **ref) {
    const int V = cmf_model_vocab_size(m);
    for (int s = 0; s < n_seq; s++) {
        cmf_session *ss = NULL;
        CHECK_MSG(cmf_session_new(m, n_ctx, &ss) == CMF_OK, "%s", cmf_last_error());
        if (!ss) return;
        for (int i = 0; i < lens[s]; i++) {
            CHECK(cmf_session_decode(ss, tok(s, i, V)) == CMF_OK);
            memcpy(ref[s] + (size_t)i * V, cmf_session_logits(ss), (size_t)V * sizeof(float));
        }
        cmf_session_free(ss);
    }
}
