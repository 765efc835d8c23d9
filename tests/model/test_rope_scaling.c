/* test_rope_scaling.c — RoPE frequency scaling from the header (src/model/config.c): arch.yarn (CMF_FORMAT.md §1.4;
 * YaRN, Peng et al. 2023, "by-parts" interpolation as in transformers' _compute_yarn_parameters), its attention
 * factor, Gemma 3's unscaled local layers, and the header errors. The YaRN checks follow the paper's definition, not
 * our code: a dimension whose wavelength turns more than beta_fast times over the original window keeps its
 * frequency, one that turns fewer than beta_slow times is divided by the factor, the ones between are blended.
 * (Logit parity with transformers for YaRN checkpoints: scripts/reference/make_hf_refs.py's yarn cases.) */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "model/model.h"

static int failures;
#define CHECK(c, ...)                                                                                             \
    do {                                                                                                          \
        if (!(c)) {                                                                                               \
            failures++;                                                                                           \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                                                  \
            fprintf(stderr, __VA_ARGS__);                                                                         \
            fputc('\n', stderr);                                                                                  \
        }                                                                                                         \
    } while (0)

/* Parses a header whose arch is a small qwen2 (head_dim 16) plus `extra` (JSON members, may be ""). */
static cmf_status config_of(const char *extra, cmf_config *c) {
    char js[2048];
    snprintf(js, sizeof js,
             "{\"arch\": {\"arch_name\": \"qwen2\", \"hidden_size\": 64, \"intermediate_size\": 128, \"num_layers\": 2,"
             " \"num_attention_heads\": 4, \"num_kv_heads\": 2, \"head_dim\": 16, \"vocab_size\": 100,"
             " \"max_position_embeddings\": 256, \"rope_theta\": 10000.0,"
             " \"layer_types\": [\"FullAttention\", \"FullAttention\"]%s%s}}",
             *extra ? ", " : "", extra);
    cJSON *h = cJSON_Parse(js);
    if (!h) return CMF_E_FORMAT;
    cmf_status st = cmf_config_from_header(h, c);
    cJSON_Delete(h);
    return st;
}

/* The paper's dimension index at which a wavelength turns n_rot times over `orig` positions (eq. 17 solved for d). */
static double turns_dim(double n_rot, int rot, double base, int orig) {
    return rot * log(orig / (n_rot * 2 * 3.141592653589793)) / (2 * log(base));
}

static void check_yarn(double factor, int orig, double bf, double bs, int truncate) {
    cmf_config plain, y;
    CHECK(config_of("", &plain) == CMF_OK, "plain config");
    char extra[256];
    snprintf(extra, sizeof extra,
             "\"yarn\": {\"factor\": %g, \"original_max_position_embeddings\": %d, \"beta_fast\": %g, "
             "\"beta_slow\": %g, \"truncate\": %s}", factor, orig, bf, bs, truncate ? "true" : "false");
    cmf_status st = config_of(extra, &y);
    CHECK(st == CMF_OK, "yarn config: %s", cmf_last_error());
    if (st != CMF_OK) return;
    float p[8], f[8];
    cmf_rope_inv_freq(&plain, plain.rope_theta, 1, p);
    cmf_rope_inv_freq(&y, y.rope_theta, 1, f);
    double lo = turns_dim(bf, 16, 10000.0, orig), hi = turns_dim(bs, 16, 10000.0, orig);
    if (truncate) lo = floor(lo), hi = ceil(hi);
    /* The ramp is clamped to the existing dims [0, rot - 1] (as transformers' find_correction_range and llama.cpp's
     * ggml_rope_yarn_corr_dims both do). */
    if (lo < 0) lo = 0;
    if (hi > 15) hi = 15;
    int n_keep = 0, n_interp = 0, n_blend = 0;
    for (int i = 0; i < 8; i++) {
        double turns = orig * p[i] / (2 * 3.141592653589793); /* rotations of dim i over the original window */
        if (i <= lo) {
            CHECK(f[i] == p[i], "factor %g dim %d (%.2f turns, below the ramp): %g != plain %g", factor, i, turns,
                  f[i], p[i]);
            n_keep++;
        } else if (i >= hi) {
            CHECK(fabs(f[i] - p[i] / factor) <= 1e-6 * p[i], "dim %d (%.2f turns, past the ramp): %g != %g / %g", i,
                  turns, f[i], p[i], factor);
            n_interp++;
        } else {
            double w = (i - lo) / (hi - lo); /* the ramp's linear weight of the interpolated frequency */
            double want = p[i] / factor * w + p[i] * (1 - w);
            CHECK(fabs(f[i] - want) <= 1e-6 * p[i], "dim %d (in the ramp, weight %.3f): %g != %g", i, w, f[i], want);
            CHECK(f[i] < p[i] && f[i] > p[i] / factor, "dim %d: %g not between %g and %g", i, f[i], p[i] / factor,
                  p[i]);
            n_blend++;
        }
    }
    /* The chosen windows make every case exercise at least two of the three regions. */
    CHECK((n_keep > 0) + (n_interp > 0) + (n_blend > 0) >= 2, "factor %g orig %d: regions %d/%d/%d", factor, orig,
          n_keep, n_blend, n_interp);
    CHECK(y.attn_scale == plain.attn_scale, "attention_factor absent: scale %g != %g", y.attn_scale,
          plain.attn_scale);
    cmf_config_free(&plain);
    cmf_config_free(&y);
}

int main(void) {
    check_yarn(4.0, 64, 32, 1, 1);
    check_yarn(8.0, 256, 32, 1, 1);
    check_yarn(4.0, 64, 16, 2, 0);

    /* attention_factor multiplies cos and sin: every score q.k by its square. */
    cmf_config c, plain;
    CHECK(config_of("", &plain) == CMF_OK, "plain");
    CHECK(config_of("\"yarn\": {\"factor\": 4, \"original_max_position_embeddings\": 64, \"attention_factor\": 1.25}",
                    &c) == CMF_OK, "attention_factor: %s", cmf_last_error());
    CHECK(fabsf(c.attn_scale - plain.attn_scale * 1.5625f) <= 1e-7f, "attn_scale %g, want %g", c.attn_scale,
          plain.attn_scale * 1.5625);
    cmf_config_free(&c);

    /* Gemma 3: rope_local_base_freq set -> the sliding layers' table is plain RoPE of the local base. */
    CHECK(config_of("\"rope_local_base_freq\": 10000.0, \"rope_scaling\": {\"rope_type\": \"linear\", \"factor\": 8}",
                    &c) == CMF_OK, "gemma-style: %s", cmf_last_error());
    CHECK(c.local_rope_unscaled == 1, "rope_local_base_freq must mark the local layers unscaled");
    float g[8], l[8], p[8];
    cmf_rope_inv_freq(&c, c.rope_theta, 1, g);
    cmf_rope_inv_freq(&c, c.rope_local_theta, !c.local_rope_unscaled, l);
    cmf_rope_inv_freq(&plain, plain.rope_theta, 1, p);
    for (int i = 0; i < 8; i++) {
        CHECK(l[i] == p[i], "local dim %d scaled: %g != %g", i, l[i], p[i]);
        CHECK(fabsf(g[i] - p[i] / 8) <= 1e-6f * p[i], "global dim %d: %g != %g / 8", i, g[i], p[i]);
    }
    cmf_config_free(&c);
    CHECK(config_of("\"rope_scaling\": {\"rope_type\": \"linear\", \"factor\": 8}", &c) == CMF_OK, "linear");
    CHECK(c.local_rope_unscaled == 0, "without rope_local_base_freq every layer is scaled");
    cmf_config_free(&c);
    cmf_config_free(&plain);

    /* Header errors: each a clear status, never a silently ignored key. */
    static const struct {
        const char *extra;
        cmf_status want;
        const char *msg;
    } bad[] = {
        {"\"yarn\": {\"factor\": 0.5, \"original_max_position_embeddings\": 64}", CMF_E_FORMAT, "factor"},
        {"\"yarn\": {\"original_max_position_embeddings\": 64}", CMF_E_FORMAT, "factor"},
        {"\"yarn\": {\"factor\": 4}", CMF_E_FORMAT, "original_max_position_embeddings"},
        {"\"yarn\": {\"factor\": 4, \"original_max_position_embeddings\": 64, \"truncate\": 1}", CMF_E_FORMAT,
         "truncate"},
        {"\"yarn\": {\"factor\": 4, \"original_max_position_embeddings\": 64, \"beta_fast\": -1}", CMF_E_FORMAT,
         "beta_fast"},
        {"\"yarn\": {\"factor\": 4, \"original_max_position_embeddings\": 64, \"attention_factor\": 0}", CMF_E_FORMAT,
         "attention_factor"},
        {"\"yarn\": 3", CMF_E_FORMAT, "arch.yarn"},
        {"\"partial_rotary_factor\": 0.5, \"yarn\": {\"factor\": 4, \"original_max_position_embeddings\": 64, "
         "\"attention_factor\": 1.2}", CMF_E_UNSUPPORTED, "partial rotary"},
        {"\"rope_scaling\": {\"rope_type\": \"linear\", \"factor\": 2}, \"yarn\": {\"factor\": 4, "
         "\"original_max_position_embeddings\": 64}", CMF_E_FORMAT, "rope_scaling"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        cmf_status st = config_of(bad[i].extra, &c);
        CHECK(st == bad[i].want, "case %zu: status %d, want %d (%s)", i, st, bad[i].want, cmf_last_error());
        CHECK(st == CMF_OK || strstr(cmf_last_error(), bad[i].msg), "case %zu: message '%s' lacks '%s'", i,
              cmf_last_error(), bad[i].msg);
        if (st == CMF_OK) cmf_config_free(&c);
    }
    if (failures) {
        fprintf(stderr, "test_rope_scaling: %d failure(s)\n", failures);
        return 1;
    }
    printf("test_rope_scaling: YaRN ramp, attention factor, Gemma 3 local layers and %zu header errors OK\n",
           sizeof bad / sizeof bad[0]);
    return 0;
}
