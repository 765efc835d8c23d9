/* Task masks at run time (CMF_FORMAT.md §1.7, §3.4), on the reference's own files (shared/data/cmf-reference:
 * masks "general" and "coding"): a masked session gives the logits of a dense run of the same weights with the
 * masked-off work zeroed out instead (gate/up rows of dead neurons, o_proj columns of dead heads, o_proj and
 * down_proj of dead layers) — the mask skips exactly that work. The default is the Fallback mask (the reference
 * runs masked by default); CMF_TASK=off and task "off" run dense; an unknown task is an error. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmf.h"
#include "format/format.h"
#include "quant/dtype.h"
#include "skills/skills.h"
#include "testutil.h"

static const int32_t IDS[] = {1, 17, 42, 99, 5, 127, 64, 3};
enum { N = 8 };

static int eval(cmf_model *m, const char *task, float *out) {
    cmf_session_params p = {0};
    p.n_ctx = 16;
    p.task = task;
    cmf_session *s = NULL;
    if (cmf_session_new_ex(m, &p, &s) != CMF_OK) return -1;
    int rc = cmf_session_prefill(s, IDS, N, out) == CMF_OK ? 0 : -1;
    cmf_session_free(s);
    return rc;
}

/* f32 copy of `src` (no masks section) with the work that mask `t` skips zeroed in the weights. */
static int write_zeroed(const char *src, const char *dst, const char *task) {
    cmf_file *f = NULL;
    cmf_masks *mk = NULL;
    cmf_writer *w = NULL;
    if (cmf_file_open(src, &f) != CMF_OK || cmf_masks_load(f, &mk) != CMF_OK || cmf_writer_new(dst, &w) != CMF_OK)
        return -1;
    const cmf_task_mask *t = &mk->masks[cmf_masks_find(mk, task)];
    const cJSON *arch = cJSON_GetObjectItemCaseSensitive(f->header, "arch");
    const int H = cJSON_GetObjectItemCaseSensitive(arch, "num_attention_heads")->valueint;
    const int HD = cJSON_GetObjectItemCaseSensitive(arch, "head_dim")->valueint;
    for (size_t i = 0; i < f->n_tensors; i++) {
        const cmf_tensor *tn = &f->tensors[i];
        uint64_t n = cmf_tensor_numel(tn);
        float *v = malloc(n * sizeof(float));
        if (cmf_dequant(tn->dtype, tn->ndim, tn->shape, tn->data, tn->nbytes, v) != CMF_OK) return -1;
        int l = -1;
        char kind[64] = "";
        if (sscanf(tn->name, "model.layers.%d.%63s", &l, kind) == 2) {
            const int alive = cmf_mask_layer_alive(mk, t, (uint32_t)l);
            const uint32_t rows = tn->shape[0], cols = tn->ndim == 2 ? tn->shape[1] : 1;
            if (!strcmp(kind, "mlp.gate_proj.weight") || !strcmp(kind, "mlp.up_proj.weight")) {
                const uint8_t *row = cmf_mask_ffn_row(mk, t, (uint32_t)l);
                for (uint32_t r = 0; r < rows; r++)
                    if (!cmf_mask_bit(row, r)) memset(v + (size_t)r * cols, 0, cols * sizeof(float));
            }
            if (!strcmp(kind, "self_attn.o_proj.weight")) {
                const uint8_t *hr = cmf_mask_head_row(mk, t, (uint32_t)l);
                for (uint32_t r = 0; r < rows; r++)
                    for (int h = 0; h < H; h++)
                        if (!alive || !cmf_mask_bit(hr, (uint32_t)h))
                            memset(v + (size_t)r * cols + (size_t)h * HD, 0, (size_t)HD * sizeof(float));
            }
            if (!alive && !strcmp(kind, "mlp.down_proj.weight")) memset(v, 0, n * sizeof(float));
        }
        if (cmf_writer_add(w, tn->name, CMF_DT_F32, tn->ndim, tn->shape, v, n * 4) != CMF_OK) return -1;
        free(v);
    }
    cJSON *h = cJSON_Duplicate(f->header, 1);
    cJSON_DeleteItemFromObjectCaseSensitive(h, "section_hashes");
    cmf_writer_set_header(w, h);
    int rc = cmf_writer_finish(w) == CMF_OK ? 0 : -1;
    cmf_masks_free(mk);
    cmf_file_close(f);
    return rc;
}

static float maxrel(const float *a, const float *b, size_t n) {
    float d = 0, mx = 0;
    for (size_t i = 0; i < n; i++) {
        if (fabsf(a[i] - b[i]) > d) d = fabsf(a[i] - b[i]);
        if (fabsf(b[i]) > mx) mx = fabsf(b[i]);
    }
    return d / mx;
}

int main(void) {
    unsetenv("CMF_TASK");
    char src[1024], z[1024];
    snprintf(src, sizeof src, "%s", shared_path("data/cmf-reference/tiny-F16.cmf"));
    cmf_model *m = NULL;
    CHECK_MSG(cmf_model_load(src, NULL, &m) == CMF_OK, "%s", cmf_last_error());
    if (!m) CMF_TEST_END();
    CHECK(cmf_model_n_task_masks(m) == 2);
    const int V = cmf_model_vocab_size(m);
    float *dense = malloc((size_t)N * V * 4), *masked = malloc((size_t)N * V * 4), *ref = malloc((size_t)N * V * 4);
    CHECK(eval(m, "off", dense) == 0);
    const char *tasks[] = {"general", "coding"};
    for (int k = 0; k < 2; k++) {
        snprintf(z, sizeof z, "%s", tmp_path(k ? "masks-zeroed-coding.cmf" : "masks-zeroed-general.cmf"));
        CHECK(write_zeroed(src, z, tasks[k]) == 0);
        cmf_model *mz = NULL;
        CHECK_MSG(cmf_model_load(z, NULL, &mz) == CMF_OK, "%s", cmf_last_error());
        CHECK(mz && eval(mz, NULL, ref) == 0); /* no masks section: dense */
        CHECK(eval(m, tasks[k], masked) == 0);
        float d = maxrel(masked, ref, (size_t)N * V);
        printf("task %s: masked vs zeroed-dense max rel diff %.3g; vs unmasked %.3g\n", tasks[k], d,
               maxrel(masked, dense, (size_t)N * V));
        CHECK_MSG(d < 1e-5f, "task %s: %g", tasks[k], d);
        if (k == 1) CHECK(maxrel(masked, dense, (size_t)N * V) > 1e-4f); /* "coding" changes the output ("general"
                                                                           activates everything in these files) */
        cmf_model_free(mz);
    }
    /* default: the Fallback mask (or the first); CMF_TASK=off: dense; explicit task beats the environment */
    cmf_session *s = NULL;
    cmf_session_params p = {0};
    p.n_ctx = 16;
    CHECK(cmf_session_new_ex(m, &p, &s) == CMF_OK && strlen(cmf_session_task(s)) > 0);
    printf("default task: %s\n", s ? cmf_session_task(s) : "?");
    cmf_session_free(s);
    setenv("CMF_TASK", "off", 1);
    CHECK(cmf_session_new_ex(m, &p, &s) == CMF_OK && strcmp(cmf_session_task(s), "") == 0);
    cmf_session_free(s);
    p.task = "coding";
    CHECK(cmf_session_new_ex(m, &p, &s) == CMF_OK && strcmp(cmf_session_task(s), "coding") == 0);
    cmf_session_free(s);
    unsetenv("CMF_TASK");
    p.task = "poetry";
    CHECK(cmf_session_new_ex(m, &p, &s) == CMF_E_NOT_FOUND);
    free(dense);
    free(masked);
    free(ref);
    cmf_model_free(m);
    CMF_TEST_END();
}
