/* test_skill_apply_logits.c — export -> apply reproduces an in-file skill at the logits level (CMF_FORMAT.md §3.1,
 * §3.3), and a standalone skill file is refused for another base and as a model of its own.
 *
 * Base: shared/data/hf-tiny/llama converted (f32, and f16). Donor: the base with every tensor of layers 0 and 2
 * perturbed (FFN and attention), written with the format writer in f32. `skill add` bakes it as skill "mix"
 * (families all; and once more as "q8" with --skill-quant q8_row over the FFN). For each: the skill is exported
 * against the base and applied onto it; the applied model's logits (no skill) must equal bit for bit the baked
 * model's logits with the skill active, over a prefill and greedy decode steps, and differ from the backbone's. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmf.h"
#include "convert/convert.h"
#include "format/format.h"
#include "quant/dtype.h"
#include "skills/skills.h"
#include "testutil.h"

enum { N_PROMPT = 9, N_STEPS = 6 };

static char P_BASE[512], P_BASE16[512], P_DONOR[512], P_BAKED[512], P_SKILL[512], P_APPLIED[512], P_NEVER[512];

static void set(char *dst, const char *name) { snprintf(dst, 512, "%s", tmp_path(name)); }

/* The donor: every tensor of `base` as f32; those of layers 0 and 2 perturbed by a deterministic pattern. */
static int write_donor(const char *base, const char *out) {
    cmf_file *b = NULL;
    cmf_writer *w = NULL;
    if (cmf_file_open(base, &b) != CMF_OK || cmf_writer_new(out, &w) != CMF_OK) return -1;
    int bad = 0;
    for (size_t i = 0; i < b->n_tensors && !bad; i++) {
        const cmf_tensor *t = &b->tensors[i];
        uint64_t n = cmf_tensor_numel(t);
        float *v = malloc((size_t)n * sizeof *v);
        bad = !v || cmf_dequant(t->dtype, t->ndim, t->shape, t->data, t->nbytes, v) != CMF_OK;
        int pert = !strncmp(t->name, "model.layers.0.", 15) || !strncmp(t->name, "model.layers.2.", 15);
        for (uint64_t k = 0; !bad && pert && k < n; k++) v[k] = 0.8f * v[k] + 0.015f * cosf(0.3f * (float)k);
        if (!bad) bad = cmf_writer_add(w, t->name, CMF_DT_F32, t->ndim, t->shape, v, n * 4) != CMF_OK;
        free(v);
    }
    cmf_writer_set_header(w, cJSON_Duplicate(b->header, 1));
    if (bad) cmf_writer_abort(w);
    else bad = cmf_writer_finish(w) != CMF_OK;
    cmf_file_close(b);
    return bad ? -1 : 0;
}

/* Logits of a prefill then N_STEPS greedy decode steps: (1 + N_STEPS) rows of vocab floats, malloc'd. */
static float *trace(const char *path, const char *skill, int *vocab) {
    cmf_model *m = NULL;
    cmf_session *s = NULL;
    if (cmf_model_load(path, NULL, &m) != CMF_OK || cmf_session_new(m, 64, &s) != CMF_OK) {
        fprintf(stderr, "%s: %s\n", path, cmf_last_error());
        cmf_model_free(m);
        return NULL;
    }
    const int V = *vocab = cmf_model_vocab_size(m);
    float *out = malloc((size_t)(1 + N_STEPS) * (size_t)V * sizeof *out);
    const int32_t prompt[N_PROMPT] = {1, 44, 903, 12, 640, 7, 300, 1001, 58};
    int ok = cmf_session_set_skill(s, skill) == CMF_OK && cmf_session_prefill(s, prompt, N_PROMPT, NULL) == CMF_OK;
    for (int step = 0; ok && step <= N_STEPS; step++) {
        const float *l = cmf_session_logits(s);
        memcpy(out + (size_t)step * (size_t)V, l, (size_t)V * sizeof *l);
        int best = 0;
        for (int i = 1; i < V; i++)
            if (l[i] > l[best]) best = i;
        if (step < N_STEPS) ok = cmf_session_decode(s, best) == CMF_OK;
    }
    if (!ok) {
        fprintf(stderr, "%s (skill %s): %s\n", path, skill ? skill : "none", cmf_last_error());
        free(out);
        out = NULL;
    }
    cmf_session_free(s);
    cmf_model_free(m);
    return out;
}

/* Bakes `id` from the donor into the base, exports it against the base, applies it, compares the logits. */
static void round_trip(const char *id, int families, int skill_quant, size_t want_stored) {
    cmf_skill_add_opts o = {.id = id, .families = families, .skill_quant = skill_quant};
    cmf_skill_add_report rep;
    CHECK_MSG(cmf_skill_add(P_BASE, P_DONOR, P_BAKED, &o, &rep) == CMF_OK, "%s", cmf_last_error());
    CHECK_MSG(rep.n_stored == want_stored, "%s: %zu stored, want %zu", id, rep.n_stored, want_stored);
    size_t n = 0;
    CHECK_MSG(cmf_skill_export(P_BAKED, id, P_BASE, NULL, P_SKILL, NULL, NULL, &n) == CMF_OK, "%s",
              cmf_last_error());
    CHECK(n == want_stored);
    cmf_skill_apply_report ar;
    CHECK_MSG(cmf_skill_apply(P_BASE, P_SKILL, P_APPLIED, 0, NULL, NULL, &ar) == CMF_OK, "%s", cmf_last_error());
    CHECK(ar.n_replaced == want_stored && ar.n_dropped == 0 && !ar.forced);

    int V1 = 0, V2 = 0, V3 = 0;
    float *in_file = trace(P_BAKED, id, &V1), *applied = trace(P_APPLIED, NULL, &V2), *backbone = trace(P_BASE, NULL, &V3);
    CHECK(in_file && applied && backbone && V1 == V2 && V2 == V3);
    if (in_file && applied && backbone && V1 == V2 && V2 == V3) {
        size_t bytes = (size_t)(1 + N_STEPS) * (size_t)V1 * sizeof(float);
        CHECK_MSG(memcmp(in_file, applied, bytes) == 0, "%s: applied logits differ from the in-file skill's", id);
        CHECK_MSG(memcmp(in_file, backbone, bytes) != 0, "%s: the skill does not change the logits", id);
        double maxd = 0;
        for (size_t i = 0; i < bytes / sizeof(float); i++) maxd = fmax(maxd, fabs((double)in_file[i] - backbone[i]));
        CHECK_MSG(maxd > 1e-3, "%s: skill vs backbone max |diff| %g", id, maxd);
    }
    free(in_file);
    free(applied);
    free(backbone);

    /* the skill file is bound to its base: another base (same architecture and shapes, other dir_hash) is refused
     * and nothing is written; a skill file is not a model */
    remove(P_NEVER);
    CHECK(cmf_skill_apply(P_BASE16, P_SKILL, P_NEVER, 0, NULL, NULL, &ar) == CMF_E_ARG &&
          strstr(cmf_last_error(), "different base"));
    FILE *fp = fopen(P_NEVER, "rb");
    CHECK(fp == NULL);
    if (fp) fclose(fp);
    cmf_model *m = NULL;
    CHECK(cmf_model_load(P_SKILL, NULL, &m) == CMF_E_UNSUPPORTED && m == NULL &&
          strstr(cmf_last_error(), "skill file"));
}

int main(void) {
    set(P_BASE, "skills-al-base.cmf");
    set(P_BASE16, "skills-al-base16.cmf");
    set(P_DONOR, "skills-al-donor.cmf");
    set(P_BAKED, "skills-al-baked.cmf");
    set(P_SKILL, "skills-al.skill.cmf");
    set(P_APPLIED, "skills-al-applied.cmf");
    set(P_NEVER, "skills-al-never.cmf");
    cmf_convert_opts co = {.quant = CMF_DT_F32};
    CHECK_MSG(cmf_convert_hf(shared_path("data/hf-tiny/llama"), P_BASE, &co) == CMF_OK, "%s", cmf_last_error());
    co.quant = CMF_DT_F16;
    CHECK_MSG(cmf_convert_hf(shared_path("data/hf-tiny/llama"), P_BASE16, &co) == CMF_OK, "%s", cmf_last_error());
    CHECK(write_donor(P_BASE, P_DONOR) == 0);
    if (cmf_test_failures) CMF_TEST_END();
    /* layers 0 and 2: 3 FFN + 4 attention weights each (hf-tiny llama has no q/k/v biases) */
    round_trip("mix", CMF_SKILL_ALL, -1, 2 * 7);
    round_trip("q8", CMF_SKILL_FFN, CMF_DT_Q8_ROW, 2 * 3);
    CMF_TEST_END();
}
