/* Bad input to the model API gives a clear error and a non-zero status, never a crash:
 * a missing file, a file with a tensor missing or mis-shaped, a prompt longer than the context, token ids
 * outside the vocabulary. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmf.h"
#include "convert/convert.h"
#include "format/format.h"
#include "quant/dtype.h"
#include "testutil.h"

/* arch keys to set in rewrite()'s copy (NULL: none) */
static const char *g_arch_key[2];
static double g_arch_val[2];

/* Copies `src` to `dst` leaving out tensor `drop` (NULL: none) and transposing tensor `flip`'s shape. */
static int rewrite(const char *src, const char *dst, const char *drop, const char *flip) {
    cmf_file *f = NULL;
    cmf_writer *w = NULL;
    if (cmf_file_open(src, &f) != CMF_OK || cmf_writer_new(dst, &w) != CMF_OK) return -1;
    for (size_t i = 0; i < f->n_tensors; i++) {
        const cmf_tensor *t = &f->tensors[i];
        if (drop && !strcmp(t->name, drop)) continue;
        uint32_t shape[6];
        memcpy(shape, t->shape, sizeof shape);
        if (flip && !strcmp(t->name, flip) && t->ndim == 2) {
            shape[0] = t->shape[1];
            shape[1] = t->shape[0];
        }
        if (cmf_writer_add(w, t->name, t->dtype, t->ndim, shape, t->data, t->nbytes) != CMF_OK) return -1;
    }
    cJSON *h = cJSON_Duplicate(f->header, 1);
    cJSON_DeleteItemFromObjectCaseSensitive(h, "section_hashes");
    for (int k = 0; k < 2; k++)
        if (g_arch_key[k])
            cJSON_ReplaceItemInObjectCaseSensitive(cJSON_GetObjectItemCaseSensitive(h, "arch"), g_arch_key[k],
                                                   cJSON_CreateNumber(g_arch_val[k]));
    cmf_writer_set_header(w, h);
    int rc = cmf_writer_finish(w) == CMF_OK ? 0 : -1;
    cmf_file_close(f);
    return rc;
}

int main(void) {
    cmf_model *m = NULL;
    CHECK(cmf_model_load(tmp_path("does-not-exist.cmf"), NULL, &m) == CMF_E_IO && m == NULL);
    CHECK(strstr(cmf_last_error(), "does-not-exist.cmf") != NULL);

    char good[512];
    snprintf(good, sizeof good, "%s", tmp_path("errors-llama.cmf"));
    cmf_convert_opts opts = {0};
    opts.quant = CMF_DT_F16;
    CHECK_MSG(cmf_convert_hf(shared_path("data/hf-tiny/llama"), good, &opts) == CMF_OK, "%s", cmf_last_error());

    char bad[512];
    snprintf(bad, sizeof bad, "%s", tmp_path("errors-missing.cmf"));
    CHECK(rewrite(good, bad, "model.layers.1.mlp.up_proj.weight", NULL) == 0);
    CHECK(cmf_model_load(bad, NULL, &m) == CMF_E_FORMAT);
    CHECK_MSG(strstr(cmf_last_error(), "model.layers.1.mlp.up_proj.weight") != NULL, "%s", cmf_last_error());

    CHECK(rewrite(good, bad, NULL, "model.layers.0.mlp.gate_proj.weight") == 0);
    CHECK(cmf_model_load(bad, NULL, &m) == CMF_E_FORMAT);
    CHECK_MSG(strstr(cmf_last_error(), "gate_proj") != NULL, "%s", cmf_last_error());

    /* a geometry whose fused q/k/v row count overflows int: refused by the config check, before any tensor */
    g_arch_key[0] = "num_attention_heads", g_arch_val[0] = 65536;
    g_arch_key[1] = "head_dim", g_arch_val[1] = 65536;
    CHECK(rewrite(good, bad, NULL, NULL) == 0);
    g_arch_key[0] = g_arch_key[1] = NULL;
    CHECK(cmf_model_load(bad, NULL, &m) == CMF_E_FORMAT);
    CHECK_MSG(strstr(cmf_last_error(), "2^30") != NULL, "%s", cmf_last_error());

    CHECK(cmf_model_load(good, NULL, &m) == CMF_OK);
    if (m) {
        cmf_session *s = NULL;
        CHECK(cmf_session_new(m, 16, &s) == CMF_OK);
        int32_t ids[20] = {0};
        CHECK(cmf_session_prefill(s, ids, 20, NULL) == CMF_E_ARG); /* longer than the context */
        CHECK(strstr(cmf_last_error(), "context") != NULL);
        CHECK(cmf_session_pos(s) == 0);
        ids[3] = 5000; /* vocab is 1024 */
        CHECK(cmf_session_prefill(s, ids, 8, NULL) == CMF_E_ARG);
        CHECK(strstr(cmf_last_error(), "5000") != NULL);
        ids[3] = -1;
        CHECK(cmf_session_prefill(s, ids, 8, NULL) == CMF_E_ARG);
        ids[3] = 7;
        CHECK(cmf_session_prefill(s, ids, 16, NULL) == CMF_OK);
        CHECK(cmf_session_decode(s, 1) == CMF_E_ARG); /* full */
        cmf_session_reset(s);
        CHECK(cmf_session_decode(s, 1) == CMF_OK && cmf_session_pos(s) == 1);
        cmf_session_free(s);
        cmf_model_free(m);
    }
    CMF_TEST_END();
}
