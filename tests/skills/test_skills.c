/* test_skills.c — skill baking, resolution, listing, export and apply (CMF_FORMAT.md §3.1–3.3) on the hf-tiny
 * llama checkpoint (shared/data/hf-tiny/llama) converted to f16. The donor is a copy of that base written with
 * the format writer in f32, with a few tensors perturbed: some perturbations are large (must be stored), one is
 * below f16 resolution (re-encodes to the backbone's bytes: must not be stored), one is outside the chosen
 * tensor families (must not be stored). Expected payloads are computed here independently (cmf_f32_to_f16 per
 * element), never hand-written. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "convert/convert.h"
#include "format/format.h"
#include "quant/dtype.h"
#include "skills/skills.h"
#include "testutil.h"

#define UP1 "model.layers.1.mlp.up_proj.weight"
#define Q2 "model.layers.2.self_attn.q_proj.weight"
#define GATE0 "model.layers.0.mlp.gate_proj.weight"
#define NORM "model.norm.weight"

static char P_BASE[512], P_DONOR[512], P_BAKED[512], P_EXTRA[512], P_SKILL[512], P_SKILL_SELF[512], P_APPLIED[512],
    P_FORCED[512], P_SPEC[512], P_SPEC_SKILL[512], P_SPEC_APPLIED[512];

static void set(char *dst, const char *name) { snprintf(dst, 512, "%s", tmp_path(name)); }

static float *decode(const cmf_tensor *t) {
    uint64_t n = cmf_tensor_numel(t);
    float *v = malloc((size_t)n * sizeof *v);
    if (!v || cmf_dequant(t->dtype, t->ndim, t->shape, t->data, t->nbytes, v) != CMF_OK) {
        fprintf(stderr, "decode %s failed: %s\n", t->name, cmf_last_error());
        exit(1);
    }
    return v;
}

/* Perturbation of element i of a tensor (deterministic). */
static float bump(const char *name, uint64_t i) {
    if (!strcmp(name, UP1) || !strcmp(name, Q2)) return 0.01f * sinf((float)i * 0.37f) + 0.005f;
    if (!strcmp(name, GATE0)) return 1e-9f; /* below half an f16 ulp of every value: rounds back */
    if (!strcmp(name, NORM)) return 0.25f;
    return 0.0f;
}

/* The donor: every tensor of `base` decoded and written as f32, perturbed by bump(). `extra`: also a tensor
 * the base does not have (for the specialist cut). */
static void write_donor(const char *base_path, const char *out, int extra) {
    cmf_file *b = NULL;
    CHECK(cmf_file_open(base_path, &b) == CMF_OK);
    cmf_writer *w = NULL;
    CHECK(cmf_writer_new(out, &w) == CMF_OK);
    for (size_t i = 0; i < b->n_tensors; i++) {
        const cmf_tensor *t = &b->tensors[i];
        float *v = decode(t);
        uint64_t n = cmf_tensor_numel(t);
        for (uint64_t k = 0; k < n; k++) v[k] += bump(t->name, k);
        CHECK(cmf_writer_add(w, t->name, CMF_DT_F32, t->ndim, t->shape, v, n * 4) == CMF_OK);
        free(v);
    }
    if (extra) {
        float e[4] = {1, 2, 3, 4};
        uint32_t sh[1] = {4};
        CHECK(cmf_writer_add(w, "extra.weight", CMF_DT_F32, 1, sh, e, sizeof e) == CMF_OK);
    }
    cmf_writer_set_header(w, cJSON_Duplicate(b->header, 1));
    CHECK(cmf_writer_finish(w) == CMF_OK);
    cmf_file_close(b);
}

/* f16 bytes of the donor's values of `name`, computed element by element. */
static uint16_t *expected_f16(const cmf_file *base, const char *name, uint64_t *n) {
    const cmf_tensor *t = cmf_file_find(base, name);
    float *v = decode(t);
    *n = cmf_tensor_numel(t);
    uint16_t *h = malloc((size_t)*n * 2);
    for (uint64_t k = 0; k < *n; k++) h[k] = cmf_f32_to_f16(v[k] + bump(name, k));
    free(v);
    return h;
}

static int n_warnings;
static char last_warning[512];
static void on_warn(void *ctx, const char *msg) {
    (void)ctx;
    n_warnings++;
    snprintf(last_warning, sizeof last_warning, "%s", msg);
}

static const cJSON *skill_record(const cmf_file *f, int i) {
    return cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(f->header, "skills"), i);
}

static size_t count_prefix(const cmf_file *f, const char *prefix) {
    size_t n = 0;
    for (size_t i = 0; i < f->n_tensors; i++) n += strncmp(f->tensors[i].name, prefix, strlen(prefix)) == 0;
    return n;
}

static int same_bytes(const cmf_tensor *a, const cmf_tensor *b) {
    return a && b && a->dtype == b->dtype && a->nbytes == b->nbytes && !memcmp(a->data, b->data, (size_t)a->nbytes);
}

static void test_bake(void) {
    cmf_skill_add_opts o = {.id = "math", .name = "Math", .skill_quant = -1, .warn = on_warn};
    cmf_skill_add_report rep;
    cmf_status st = cmf_skill_add(P_BASE, P_DONOR, P_BAKED, &o, &rep);
    CHECK_MSG(st == CMF_OK, "%s", cmf_last_error());
    CHECK(rep.n_stored == 2);
    CHECK(rep.n_skipped == 0);
    CHECK(rep.n_unchanged == 3 * 7 - 2); /* every other wanted tensor re-encodes to the backbone's bytes */

    cmf_file *base = NULL, *f = NULL;
    CHECK(cmf_file_open(P_BASE, &base) == CMF_OK);
    CHECK(cmf_file_open(P_BAKED, &f) == CMF_OK);
    CHECK(cmf_file_verify(f, NULL) == CMF_OK);
    CHECK(f->n_tensors == base->n_tensors + 2);
    CHECK(count_prefix(f, "skill.") == 2);
    /* the backbone is copied byte for byte */
    for (size_t i = 0; i < base->n_tensors; i++)
        CHECK_MSG(same_bytes(&base->tensors[i], cmf_file_find(f, base->tensors[i].name)), "%s", base->tensors[i].name);
    /* the stored tensors: backbone dtype (f16), the donor's values */
    const char *names[2] = {UP1, Q2};
    for (int k = 0; k < 2; k++) {
        char sn[256];
        snprintf(sn, sizeof sn, "skill.math.%s", names[k]);
        const cmf_tensor *t = cmf_file_find(f, sn), *b = cmf_file_find(base, names[k]);
        CHECK_MSG(t != NULL, "%s missing", sn);
        if (!t) continue;
        CHECK(t->dtype == CMF_DT_F16 && t->ndim == 2 && !memcmp(t->shape, b->shape, sizeof b->shape));
        uint64_t n;
        uint16_t *want = expected_f16(base, names[k], &n);
        CHECK(t->nbytes == n * 2 && !memcmp(t->data, want, (size_t)n * 2));
        free(want);
        /* resolution: the overlay replaces the backbone tensor (never added to it) */
        CHECK(cmf_skill_resolve(f, "math", names[k]) == t);
        CHECK(cmf_skill_resolve(f, NULL, names[k]) == cmf_file_find(f, names[k]));
        CHECK(cmf_skill_resolve(f, "", names[k]) == cmf_file_find(f, names[k]));
    }
    CHECK(cmf_skill_resolve(f, "math", GATE0) == cmf_file_find(f, GATE0));
    CHECK(cmf_skill_resolve(f, "math", NORM) == cmf_file_find(f, NORM));
    CHECK(cmf_skill_resolve(f, "math", "model.layers.7.mlp.up_proj.weight") == NULL);
    CHECK(cmf_file_find(f, "skill.math." GATE0) == NULL && cmf_file_find(f, "skill.math." NORM) == NULL);
    /* registry record */
    const cJSON *r = skill_record(f, 0);
    CHECK(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(f->header, "skills")) == 1);
    CHECK(!strcmp(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(r, "id")), "math"));
    CHECK(!strcmp(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(r, "name")), "Math"));
    CHECK(cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(r, "quality")));
    const cJSON *ly = cJSON_GetObjectItemCaseSensitive(r, "layers");
    CHECK(cJSON_GetArraySize(ly) == 2 && cJSON_GetArrayItem(ly, 0)->valueint == 1 &&
          cJSON_GetArrayItem(ly, 1)->valueint == 2);
    /* exists */
    CHECK(cmf_skill_exists(f, "math") == CMF_OK);
    CHECK(cmf_skill_exists(f, "nope") == CMF_E_NOT_FOUND && strstr(cmf_last_error(), "nope") &&
          strstr(cmf_last_error(), "math"));
    CHECK(cmf_skill_exists(f, "bad id!") == CMF_E_ARG);
    CHECK(cmf_skill_exists(base, "math") == CMF_E_NOT_FOUND);
    /* list */
    cmf_skill_info *list = NULL;
    size_t n = 0;
    CHECK(cmf_skills_list(f, &list, &n) == CMF_OK && n == 1);
    if (n == 1) {
        const cmf_tensor *a = cmf_file_find(f, "skill.math." UP1), *b = cmf_file_find(f, "skill.math." Q2);
        CHECK(list[0].n_tensors == 2 && list[0].bytes == a->nbytes + b->nbytes);
        CHECK(list[0].registered && !list[0].routable && !list[0].quality && list[0].n_layers == 2);
        CHECK(!strcmp(list[0].name, "Math"));
    }
    cmf_skills_free(list, n);
    cmf_file_close(f);
    cmf_file_close(base);
}

/* Overlays without a backbone tensor, prefix-only skills, a mis-shaped overlay. */
static void test_presence(void) {
    cmf_file *f = NULL;
    CHECK(cmf_file_open(P_BAKED, &f) == CMF_OK);
    cmf_writer *w = NULL;
    CHECK(cmf_writer_new(P_EXTRA, &w) == CMF_OK);
    for (size_t i = 0; i < f->n_tensors; i++) {
        const cmf_tensor *t = &f->tensors[i];
        CHECK(cmf_writer_add(w, t->name, t->dtype, t->ndim, t->shape, t->data, t->nbytes) == CMF_OK);
    }
    const cmf_tensor *up = cmf_file_find(f, UP1), *norm = cmf_file_find(f, NORM);
    CHECK(cmf_writer_add(w, "skill.math.model.layers.9.mlp.up_proj.weight", up->dtype, up->ndim, up->shape, up->data,
                         up->nbytes) == CMF_OK);
    CHECK(cmf_writer_add(w, "skill.ghost." NORM, norm->dtype, norm->ndim, norm->shape, norm->data, norm->nbytes) ==
          CMF_OK);
    CHECK(cmf_writer_add(w, "skill.bad." NORM, up->dtype, up->ndim, up->shape, up->data, up->nbytes) == CMF_OK);
    cmf_writer_set_header(w, cJSON_Duplicate(f->header, 1));
    CHECK(cmf_writer_finish(w) == CMF_OK);
    cmf_file_close(f);

    CHECK(cmf_file_open(P_EXTRA, &f) == CMF_OK);
    /* presence is checked on the backbone name: an overlay cannot add a tensor */
    CHECK(cmf_skill_resolve(f, "math", "model.layers.9.mlp.up_proj.weight") == NULL);
    CHECK(cmf_skill_exists(f, "ghost") == CMF_OK); /* known from the tensor prefix only */
    CHECK(cmf_skill_resolve(f, "ghost", NORM) == cmf_file_find(f, "skill.ghost." NORM));
    CHECK(cmf_skill_exists(f, "bad") == CMF_E_FORMAT && strstr(cmf_last_error(), "skill.bad." NORM));
    cmf_skill_info *list = NULL;
    size_t n = 0;
    CHECK(cmf_skills_list(f, &list, &n) == CMF_OK && n == 3);
    if (n == 3) {
        CHECK(!strcmp(list[0].id, "math") && list[0].registered && list[0].n_tensors == 3);
        CHECK(!strcmp(list[1].id, "ghost") && !list[1].registered && list[1].n_tensors == 1);
        CHECK(!strcmp(list[2].id, "bad") && !list[2].registered);
    }
    cmf_skills_free(list, n);
    cmf_file_close(f);
}

static void test_errors(void) {
    cmf_skill_add_opts o = {.id = "x", .skill_quant = -1};
    char out[512];
    set(out, "skills-never.cmf");
    /* a donor equal to the backbone stores nothing: the HF checkpoint the base was converted from */
    CHECK(cmf_skill_add(P_BASE, shared_path("data/hf-tiny/llama"), out, &o, NULL) == CMF_E_ARG &&
          strstr(cmf_last_error(), "no donor tensor differs"));
    /* another architecture: the message names the tensor and both shapes */
    CHECK(cmf_skill_add(P_BASE, shared_path("data/hf-tiny/qwen2"), out, &o, NULL) == CMF_E_FORMAT &&
          strstr(cmf_last_error(), "model.layers.0.mlp.gate_proj.weight") && strstr(cmf_last_error(), "[192, 64]"));
    o.layers = "1-7";
    CHECK(cmf_skill_add(P_BASE, P_DONOR, out, &o, NULL) == CMF_E_ARG && strstr(cmf_last_error(), "1-7"));
    o.layers = "1,x";
    CHECK(cmf_skill_add(P_BASE, P_DONOR, out, &o, NULL) == CMF_E_ARG);
    o.layers = NULL;
    o.id = "no/slash";
    CHECK(cmf_skill_add(P_BASE, P_DONOR, out, &o, NULL) == CMF_E_ARG);
    o.id = "x";
    CHECK(cmf_skill_add(P_BASE, "/nonexistent/donor.cmf", out, &o, NULL) == CMF_E_IO);
    FILE *fp = fopen(out, "rb");
    CHECK(fp == NULL); /* nothing was written under the output name */
    if (fp) fclose(fp);
    uint32_t *ly = NULL;
    size_t n = 0;
    CHECK(cmf_skill_parse_layers("2, 0,2", 3, &ly, &n) == CMF_OK && n == 2 && ly[0] == 0 && ly[1] == 2);
    free(ly);
    CHECK(cmf_skill_parse_layers("0-2", 3, &ly, &n) == CMF_OK && n == 3);
    free(ly);
    CHECK(cmf_skill_parse_layers("3", 3, &ly, &n) == CMF_E_ARG);
    CHECK(cmf_skill_parse_layers("", 3, &ly, &n) == CMF_E_ARG);
    CHECK(cmf_skill_parse_layers("2-1", 3, &ly, &n) == CMF_E_ARG);
}

/* Re-adding an id replaces its tensors and record; a second skill with --skill-quant q8_row. */
static void test_readd(void) {
    char p[512];
    set(p, "skills-readd.cmf");
    cmf_skill_add_opts o = {.id = "math", .families = CMF_SKILL_ATTN, .layers = "2", .skill_quant = -1};
    cmf_skill_add_report rep;
    CHECK_MSG(cmf_skill_add(P_BAKED, P_DONOR, p, &o, &rep) == CMF_OK, "%s", cmf_last_error());
    CHECK(rep.n_stored == 1 && rep.n_replaced == 2);
    cmf_skill_add_opts o2 = {.id = "code", .families = CMF_SKILL_FFN, .layers = "1", .skill_quant = CMF_DT_Q8_ROW};
    CHECK_MSG(cmf_skill_add(p, P_DONOR, p, &o2, &rep) == CMF_OK, "%s", cmf_last_error()); /* in place */
    CHECK(rep.n_stored == 1 && rep.n_replaced == 0);
    cmf_file *f = NULL, *base = NULL;
    CHECK(cmf_file_open(p, &f) == CMF_OK);
    CHECK(cmf_file_open(P_BASE, &base) == CMF_OK);
    CHECK(cmf_file_verify(f, NULL) == CMF_OK);
    CHECK(count_prefix(f, "skill.math.") == 1 && cmf_file_find(f, "skill.math." Q2));
    CHECK(count_prefix(f, "skill.code.") == 1);
    const cmf_tensor *c = cmf_file_find(f, "skill.code." UP1);
    CHECK(c && c->dtype == CMF_DT_Q8_ROW);
    if (c) { /* q8_row of the donor's f32 values */
        const cmf_tensor *b = cmf_file_find(base, UP1);
        float *v = decode(b);
        uint64_t n = cmf_tensor_numel(b);
        for (uint64_t k = 0; k < n; k++) v[k] += bump(UP1, k);
        uint8_t *q = malloc((size_t)c->nbytes);
        CHECK(cmf_quantize(CMF_DT_Q8_ROW, b->shape[0], b->shape[1], v, q) == CMF_OK);
        CHECK(!memcmp(q, c->data, (size_t)c->nbytes));
        free(q);
        free(v);
    }
    const cJSON *sk = cJSON_GetObjectItemCaseSensitive(f->header, "skills");
    CHECK(cJSON_GetArraySize(sk) == 2);
    int seen_math = 0;
    const cJSON *r;
    cJSON_ArrayForEach(r, sk) {
        if (strcmp(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(r, "id")), "math")) continue;
        seen_math++;
        const cJSON *ly = cJSON_GetObjectItemCaseSensitive(r, "layers");
        CHECK(cJSON_GetArraySize(ly) == 1 && cJSON_GetArrayItem(ly, 0)->valueint == 2);
        CHECK(cJSON_GetObjectItemCaseSensitive(r, "name") == NULL);
    }
    CHECK(seen_math == 1);
    cmf_file_close(base);
    cmf_file_close(f);
}

static void hex_of(const cmf_file *f, char hex[17]) {
    snprintf(hex, 17, "%016llx", (unsigned long long)f->env.dir_hash);
}

static void test_export_apply(void) {
    size_t n = 0;
    n_warnings = 0;
    CHECK_MSG(cmf_skill_export(P_BAKED, "math", P_BASE, NULL, P_SKILL, on_warn, NULL, &n) == CMF_OK, "%s",
              cmf_last_error());
    CHECK(n == 2 && n_warnings == 0);
    cmf_file *base = NULL, *baked = NULL, *sf = NULL, *out = NULL, *donor = NULL;
    CHECK(cmf_file_open(P_BASE, &base) == CMF_OK);
    CHECK(cmf_file_open(P_BAKED, &baked) == CMF_OK);
    CHECK(cmf_file_open(P_SKILL, &sf) == CMF_OK);
    CHECK(cmf_file_open(P_DONOR, &donor) == CMF_OK);
    CHECK(sf->env.features & CMF_FEAT_SKILL_FILE);
    CHECK(sf->n_tensors == 2 && cmf_file_verify(sf, NULL) == CMF_OK);
    CHECK(same_bytes(cmf_file_find(sf, UP1), cmf_file_find(baked, "skill.math." UP1)));
    CHECK(same_bytes(cmf_file_find(sf, Q2), cmf_file_find(baked, "skill.math." Q2)));
    char hex[17];
    hex_of(base, hex);
    const cJSON *r = skill_record(sf, 0);
    CHECK(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(sf->header, "skills")) == 1);
    CHECK(!strcmp(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(r, "base_dir_hash")), hex));
    CHECK(!strcmp(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(r, "base_arch")), "llama"));
    CHECK(!strcmp(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(r, "name")), "Math"));
    const cJSON *prov = cJSON_GetObjectItemCaseSensitive(r, "provenance");
    CHECK(cJSON_GetObjectItemCaseSensitive(prov, "tensors")->valueint == 2);
    cmf_skill_info *list = NULL;
    size_t ln = 0;
    CHECK(cmf_skills_list(sf, &list, &ln) == CMF_OK && ln == 1 && list[0].base_dir_hash && list[0].n_tensors == 2);
    cmf_skills_free(list, ln);

    /* without --base the model itself is the base */
    CHECK(cmf_skill_export(P_BAKED, "math", NULL, "M", P_SKILL_SELF, NULL, NULL, &n) == CMF_OK && n == 2);
    cmf_file *self = NULL;
    CHECK(cmf_file_open(P_SKILL_SELF, &self) == CMF_OK);
    hex_of(baked, hex);
    CHECK(!strcmp(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(skill_record(self, 0), "base_dir_hash")), hex));
    cmf_file_close(self);
    CHECK(cmf_skill_export(P_BAKED, "nope", NULL, NULL, P_SKILL_SELF, NULL, NULL, &n) == CMF_E_NOT_FOUND);
    CHECK(cmf_skill_export(P_BAKED, "math", shared_path("data/cmf-reference/tiny-F16.cmf"), NULL, P_SKILL_SELF, NULL,
                           NULL, &n) == CMF_E_ARG); /* another architecture */

    /* apply onto the same base reproduces the baked file's skill tensors */
    cmf_skill_apply_report rep;
    n_warnings = 0;
    CHECK_MSG(cmf_skill_apply(P_BASE, P_SKILL, P_APPLIED, 0, on_warn, NULL, &rep) == CMF_OK, "%s", cmf_last_error());
    CHECK(rep.n_replaced == 2 && rep.n_dropped == 0 && !rep.forced && n_warnings == 0);
    CHECK(cmf_file_open(P_APPLIED, &out) == CMF_OK);
    CHECK(cmf_file_verify(out, NULL) == CMF_OK);
    CHECK(!(out->env.features & CMF_FEAT_SKILL_FILE));
    CHECK(out->n_tensors == base->n_tensors);
    for (size_t i = 0; i < base->n_tensors; i++) {
        const char *nm = base->tensors[i].name;
        char sn[256];
        snprintf(sn, sizeof sn, "skill.math.%s", nm);
        const cmf_tensor *want = cmf_file_find(baked, sn) ? cmf_file_find(baked, sn) : &base->tensors[i];
        CHECK_MSG(same_bytes(cmf_file_find(out, nm), want), "%s", nm);
    }
    r = skill_record(out, 0);
    CHECK(r && !cJSON_GetObjectItemCaseSensitive(r, "base_dir_hash"));
    CHECK(!strcmp(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(r, "id")), "math"));
    CHECK(out->env.vocab_len == base->env.vocab_len);
    cmf_file_close(out);

    /* another base is refused without --force */
    CHECK(cmf_skill_apply(P_DONOR, P_SKILL, P_FORCED, 0, on_warn, NULL, &rep) == CMF_E_ARG &&
          strstr(cmf_last_error(), "different base"));
    FILE *fp = fopen(P_FORCED, "rb");
    CHECK(fp == NULL);
    if (fp) fclose(fp);
    n_warnings = 0;
    CHECK(cmf_skill_apply(P_DONOR, P_SKILL, P_FORCED, 1, on_warn, NULL, &rep) == CMF_OK);
    CHECK(rep.forced && rep.n_replaced == 2 && n_warnings == 1 && strstr(last_warning, "--force"));
    /* a plain model is not a skill file */
    CHECK(cmf_skill_apply(P_BASE, P_BAKED, P_FORCED, 0, NULL, NULL, &rep) == CMF_E_ARG &&
          strstr(cmf_last_error(), "not a skill file"));

    /* a specialist cut against the base: tensors that differ, including one the base lacks (dropped by apply,
     * with a warning) */
    write_donor(P_BASE, P_SPEC, 1);
    CHECK_MSG(cmf_skill_export(P_SPEC, "spec", P_BASE, NULL, P_SPEC_SKILL, NULL, NULL, &n) == CMF_OK, "%s",
              cmf_last_error());
    CHECK(n == base->n_tensors + 1); /* every tensor differs (f32 vs f16) */
    n_warnings = 0;
    CHECK(cmf_skill_apply(P_BASE, P_SPEC_SKILL, P_SPEC_APPLIED, 0, on_warn, NULL, &rep) == CMF_OK);
    CHECK(rep.n_dropped == 1 && n_warnings == 1 && strstr(last_warning, "extra.weight"));
    CHECK(cmf_file_open(P_SPEC_APPLIED, &out) == CMF_OK);
    CHECK(!cmf_file_find(out, "extra.weight") && same_bytes(cmf_file_find(out, UP1), cmf_file_find(donor, UP1)));
    cmf_file_close(out);

    cmf_file_close(donor);
    cmf_file_close(sf);
    cmf_file_close(baked);
    cmf_file_close(base);
}

/* A file the reference's converter wrote (tiny-F16.cmf: task masks, a vocab section, an MTP head): baking keeps
 * the masks and vocab sections byte for byte; a same-dtype donor tensor is stored byte for byte; export carries
 * the masks and names the catalog's default task; apply carries the skill file's masks. */
static void test_reference_file(void) {
    const char *ref = shared_path("data/cmf-reference/tiny-F16.cmf");
    char ref_path[512], donor[512], baked[512], skill[512], applied[512];
    snprintf(ref_path, sizeof ref_path, "%s", ref);
    set(donor, "skills-tiny-donor.cmf");
    set(baked, "skills-tiny-baked.cmf");
    set(skill, "skills-tiny.skill.cmf");
    set(applied, "skills-tiny-applied.cmf");
    const char *down = "model.layers.1.mlp.down_proj.weight";
    cmf_file *r = NULL;
    CHECK(cmf_file_open(ref_path, &r) == CMF_OK);
    if (!r) return;
    cmf_writer *w = NULL;
    CHECK(cmf_writer_new(donor, &w) == CMF_OK);
    uint8_t *pert = NULL;
    for (size_t i = 0; i < r->n_tensors; i++) {
        const cmf_tensor *t = &r->tensors[i];
        const void *data = t->data;
        if (!strcmp(t->name, down)) { /* flip the low bit of every f16 value */
            pert = malloc((size_t)t->nbytes);
            memcpy(pert, t->data, (size_t)t->nbytes);
            for (uint64_t k = 0; k < t->nbytes; k += 2) pert[k] ^= 1;
            data = pert;
        }
        CHECK(cmf_writer_add(w, t->name, t->dtype, t->ndim, t->shape, data, t->nbytes) == CMF_OK);
    }
    cmf_writer_set_header(w, cJSON_Duplicate(r->header, 1));
    CHECK(cmf_writer_finish(w) == CMF_OK);

    cmf_skill_add_opts o = {.id = "code", .families = CMF_SKILL_FFN, .skill_quant = -1};
    cmf_skill_add_report rep;
    CHECK_MSG(cmf_skill_add(ref_path, donor, baked, &o, &rep) == CMF_OK, "%s", cmf_last_error());
    CHECK(rep.n_stored == 1);
    cmf_file *b = NULL;
    CHECK(cmf_file_open(baked, &b) == CMF_OK);
    if (b) {
        const cmf_tensor *t = cmf_file_find(b, "skill.code.model.layers.1.mlp.down_proj.weight");
        CHECK(t && t->dtype == CMF_DT_F16 && t->nbytes == cmf_file_find(r, down)->nbytes &&
              !memcmp(t->data, pert, (size_t)t->nbytes));
        CHECK(b->env.masks_len == r->env.masks_len && !memcmp(b->masks, r->masks, (size_t)r->env.masks_len));
        CHECK(b->env.vocab_len == r->env.vocab_len && !memcmp(b->vocab, r->vocab, (size_t)r->env.vocab_len));
        CHECK(b->env.features & CMF_FEAT_BINARY_MASKS);
        CHECK(cmf_file_verify(b, NULL) == CMF_OK);
    }
    size_t n = 0;
    CHECK_MSG(cmf_skill_export(baked, "code", NULL, NULL, skill, NULL, NULL, &n) == CMF_OK, "%s", cmf_last_error());
    cmf_file *sf = NULL, *out = NULL;
    CHECK(cmf_file_open(skill, &sf) == CMF_OK);
    if (sf) {
        CHECK(n == 1 && sf->env.masks_len == r->env.masks_len && sf->env.vocab_len == 0);
        CHECK((sf->env.features & (CMF_FEAT_SKILL_FILE | CMF_FEAT_BINARY_MASKS)) ==
              (CMF_FEAT_SKILL_FILE | CMF_FEAT_BINARY_MASKS));
        CHECK(!strcmp(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(skill_record(sf, 0), "task")), "general"));
    }
    cmf_skill_apply_report ar;
    CHECK_MSG(cmf_skill_apply(baked, skill, applied, 0, NULL, NULL, &ar) == CMF_OK, "%s", cmf_last_error());
    CHECK(cmf_file_open(applied, &out) == CMF_OK);
    if (out && b) {
        CHECK(ar.n_replaced == 1 &&
              same_bytes(cmf_file_find(out, down), cmf_file_find(b, "skill.code.model.layers.1.mlp.down_proj.weight")));
        CHECK(out->env.masks_len == r->env.masks_len && !memcmp(out->masks, r->masks, (size_t)r->env.masks_len));
        CHECK(out->env.vocab_len == r->env.vocab_len);
    }
    free(pert);
    cmf_file_close(out);
    cmf_file_close(sf);
    cmf_file_close(b);
    cmf_file_close(r);
}

int main(void) {
    set(P_BASE, "skills-base.cmf");
    set(P_DONOR, "skills-donor.cmf");
    set(P_BAKED, "skills-baked.cmf");
    set(P_EXTRA, "skills-extra.cmf");
    set(P_SKILL, "skills-math.skill.cmf");
    set(P_SKILL_SELF, "skills-math-self.skill.cmf");
    set(P_APPLIED, "skills-applied.cmf");
    set(P_FORCED, "skills-forced.cmf");
    set(P_SPEC, "skills-spec.cmf");
    set(P_SPEC_SKILL, "skills-spec.skill.cmf");
    set(P_SPEC_APPLIED, "skills-spec-applied.cmf");
    remove(P_FORCED);
    cmf_convert_opts co = {.quant = CMF_DT_F16};
    cmf_status st = cmf_convert_hf(shared_path("data/hf-tiny/llama"), P_BASE, &co);
    if (st) {
        fprintf(stderr, "convert failed: %s\n", cmf_last_error());
        return 1;
    }
    write_donor(P_BASE, P_DONOR, 0);
    test_bake();
    test_presence();
    test_errors();
    test_readd();
    test_export_apply();
    test_reference_file();
    CMF_TEST_END();
}
