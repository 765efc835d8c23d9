/* Skills at run time (CMF_FORMAT.md §3.1): a session with skill S uses `skill.S.N` in place of N, and gives exactly
 * the logits of a plain file where N was replaced by that tensor; the backbone is unchanged; switching needs no
 * reload; an unknown id is an error; sessions of different skills cannot share a batch. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmf.h"
#include "convert/convert.h"
#include "format/format.h"
#include "quant/dtype.h"
#include "testutil.h"

static const char *TARGET = "model.layers.1.mlp.up_proj.weight";

/* Copies src to dst; mode 0: adds skill.sql.<TARGET> (perturbed) + a registry record; mode 1: replaces TARGET
 * itself with the same perturbed tensor. */
static int write_variant(const char *src, const char *dst, int mode) {
    cmf_file *f = NULL;
    cmf_writer *w = NULL;
    if (cmf_file_open(src, &f) != CMF_OK || cmf_writer_new(dst, &w) != CMF_OK) return -1;
    const cmf_tensor *t = cmf_file_find(f, TARGET);
    if (!t || t->dtype != CMF_DT_F32) return -1;
    uint64_t n = cmf_tensor_numel(t);
    float *pert = malloc(n * sizeof(float));
    memcpy(pert, t->data, n * sizeof(float));
    for (uint64_t i = 0; i < n; i++) pert[i] = pert[i] * -1.5f + 0.01f * (float)(i % 7);
    for (size_t i = 0; i < f->n_tensors; i++) {
        const cmf_tensor *u = &f->tensors[i];
        const void *data = (mode == 1 && u == t) ? (const void *)pert : (const void *)u->data;
        if (cmf_writer_add(w, u->name, u->dtype, u->ndim, u->shape, data, u->nbytes) != CMF_OK) return -1;
    }
    if (mode == 0) {
        char name[256];
        snprintf(name, sizeof name, "skill.sql.%s", TARGET);
        if (cmf_writer_add(w, name, CMF_DT_F32, t->ndim, t->shape, pert, n * 4) != CMF_OK) return -1;
    }
    cJSON *h = cJSON_Duplicate(f->header, 1);
    cJSON_DeleteItemFromObjectCaseSensitive(h, "section_hashes");
    if (mode == 0) {
        cJSON *skills = cJSON_CreateArray(), *rec = cJSON_CreateObject();
        cJSON_AddStringToObject(rec, "id", "sql");
        cJSON_AddStringToObject(rec, "name", "SQL");
        cJSON_AddItemToArray(skills, rec);
        cJSON_DeleteItemFromObjectCaseSensitive(h, "skills");
        cJSON_AddItemToObject(h, "skills", skills);
    }
    cmf_writer_set_header(w, h);
    int rc = cmf_writer_finish(w) == CMF_OK ? 0 : -1;
    free(pert);
    cmf_file_close(f);
    return rc;
}

static void logits_of(cmf_model *m, const char *skill, float *out) {
    cmf_session *s = NULL;
    const int32_t ids[] = {3, 14, 15, 92, 65};
    CHECK(cmf_session_new(m, 16, &s) == CMF_OK);
    CHECK_MSG(cmf_session_set_skill(s, skill) == CMF_OK, "%s", cmf_last_error());
    CHECK(cmf_session_prefill(s, ids, 5, NULL) == CMF_OK);
    memcpy(out, cmf_session_logits(s), (size_t)cmf_model_vocab_size(m) * sizeof(float));
    cmf_session_free(s);
}

int main(void) {
    char base[1024], withskill[1024], replaced[1024];
    snprintf(base, sizeof base, "%s", tmp_path("skillrt-base.cmf"));
    snprintf(withskill, sizeof withskill, "%s", tmp_path("skillrt-skill.cmf"));
    snprintf(replaced, sizeof replaced, "%s", tmp_path("skillrt-replaced.cmf"));
    cmf_convert_opts o = {0};
    o.quant = CMF_DT_F32;
    CHECK_MSG(cmf_convert_hf(shared_path("data/hf-tiny/llama"), base, &o) == CMF_OK, "%s", cmf_last_error());
    CHECK(write_variant(base, withskill, 0) == 0);
    CHECK(write_variant(base, replaced, 1) == 0);
    cmf_model *ms = NULL, *mb = NULL, *mr = NULL;
    CHECK_MSG(cmf_model_load(withskill, NULL, &ms) == CMF_OK, "%s", cmf_last_error());
    CHECK(cmf_model_load(base, NULL, &mb) == CMF_OK);
    CHECK(cmf_model_load(replaced, NULL, &mr) == CMF_OK);
    if (!ms || !mb || !mr) CMF_TEST_END();
    const int V = cmf_model_vocab_size(ms);
    float *a = malloc(V * 4), *b = malloc(V * 4), *c = malloc(V * 4), *d = malloc(V * 4);
    logits_of(ms, "none", a);
    logits_of(mb, "none", b);
    logits_of(ms, "sql", c);
    logits_of(mr, "none", d);
    CHECK(memcmp(a, b, V * 4) == 0);  /* backbone untouched by the skill's presence */
    CHECK(memcmp(c, d, V * 4) == 0);  /* skill == a file with the tensor replaced */
    CHECK(memcmp(a, c, V * 4) != 0);  /* and the skill does change something */

    cmf_session *s1 = NULL, *s2 = NULL;
    CHECK(cmf_session_new(ms, 16, &s1) == CMF_OK && cmf_session_new(ms, 16, &s2) == CMF_OK);
    CHECK(cmf_session_set_skill(s1, "nope") == CMF_E_NOT_FOUND);
    CHECK(strstr(cmf_last_error(), "nope") != NULL);
    CHECK(cmf_session_set_skill(s1, "bad id!") == CMF_E_ARG);
    CHECK(strcmp(cmf_session_skill(s1), "") == 0);
    CHECK(cmf_session_set_skill(s1, "sql") == CMF_OK && strcmp(cmf_session_skill(s1), "sql") == 0);
    cmf_batch *bt = NULL;
    CHECK(cmf_batch_new(ms, 4, 2, &bt) == CMF_OK);
    cmf_session *seqs[2] = {s1, s2};
    int32_t ids[2] = {1, 2};
    CHECK(cmf_batch_run(bt, seqs, ids, 2) == CMF_E_ARG); /* different skills */
    CHECK(cmf_session_set_skill(s2, "sql") == CMF_OK);
    CHECK(cmf_batch_run(bt, seqs, ids, 2) == CMF_OK);
    CHECK(cmf_session_set_skill(s1, NULL) == CMF_OK && strcmp(cmf_session_skill(s1), "") == 0);
    cmf_batch_free(bt);
    cmf_session_free(s1);
    cmf_session_free(s2);
    free(a);
    free(b);
    free(c);
    free(d);
    cmf_model_free(ms);
    cmf_model_free(mb);
    cmf_model_free(mr);
    CMF_TEST_END();
}
