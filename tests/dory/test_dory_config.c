/* test_dory_config.c — validation of Dory configs and inputs: cmf_hf_dory_arch on variants of the tiny model's
 * config.json (NoPE, partial rotary, separate sliding-window geometry, loops out of range, unknown KV mode, tied
 * embeddings, block counts, pattern, head_dim), the header keys it writes, the runtime reader's errors, converter
 * errors for missing / mis-shaped tensors, and forward-call argument errors. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "convert/convert.h"
#include "convert/hf_dory.h"
#include "dorytest.h"
#include "quant/dtype.h"
#include "testutil.h"
#include "util/fileio.h"

static cJSON *base_config(void) {
    char *txt;
    size_t len;
    if (cmf_read_file(testdata_path("dory/tiny/config.json"), &txt, &len) != CMF_OK) return NULL;
    cJSON *c = cJSON_ParseWithLength(txt, len);
    free(txt);
    return c;
}

/* Applies `edit` (a JSON object whose keys replace the config's) and expects status `want` with `needle` in the
 * message. */
static void expect(const char *edit, cmf_status want, const char *needle) {
    cJSON *c = base_config(), *e = cJSON_Parse(edit);
    CHECK(c && e);
    if (!c || !e) return;
    cJSON *it;
    cJSON_ArrayForEach(it, e) cJSON_ReplaceItemInObjectCaseSensitive(c, it->string, cJSON_Duplicate(it, 1));
    cJSON *arch = NULL;
    cmf_status st = cmf_hf_dory_arch(c, &arch);
    CHECK_MSG(st == want, "%s: status %d, want %d (%s)", edit, st, want, cmf_last_error());
    if (needle) CHECK_MSG(strstr(cmf_last_error(), needle) != NULL, "%s: message '%s' lacks '%s'", edit,
                          cmf_last_error(), needle);
    CHECK(st != CMF_OK ? arch == NULL : arch != NULL);
    cJSON_Delete(arch);
    cJSON_Delete(c);
    cJSON_Delete(e);
}

static double num(const cJSON *o, const char *k) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsNumber(v) ? v->valuedouble : -1;
}

static void check_arch_keys(void) {
    cJSON *c = base_config(), *arch = NULL;
    CHECK(c && cmf_hf_dory_arch(c, &arch) == CMF_OK);
    if (!arch) return;
    const cJSON *d = cJSON_GetObjectItemCaseSensitive(arch, "dory");
    CHECK(num(arch, "hidden_size") == num(c, "hidden_size") && num(arch, "num_layers") == num(c, "num_hidden_layers"));
    CHECK(num(arch, "head_dim") == num(c, "attention_head_dim") && num(arch, "num_kv_heads") == num(c, "num_key_value_heads"));
    CHECK(num(arch, "sliding_window") == num(c, "swa_window_size"));
    CHECK(num(d, "n_input_layers") == num(c, "n_input_layers") && num(d, "n_recurrent_loops") == num(c, "n_recurrent_loops"));
    CHECK(num(d, "rope_theta") == num(c, "rope_theta") && num(d, "rope_theta_2") == num(c, "rope_theta_2"));
    CHECK(num(d, "init_method_std") == num(c, "init_method_std") && num(d, "ngpt_alpha_init") == num(c, "ngpt_alpha_init"));
    /* attention_output_gate_logit_scale_init is null in the fixture: gate_init = sqrt(hidden_size) */
    CHECK(num(d, "gate_init") == 8.0);
    const cJSON *pat = cJSON_GetObjectItemCaseSensitive(d, "layer_pattern");
    CHECK(cJSON_IsString(pat) && !strcmp(pat->valuestring, cJSON_GetObjectItemCaseSensitive(c, "hybrid_layer_pattern")->valuestring));
    cmf_dory_config cfg;
    CHECK(cmf_dory_config_from_arch(arch, &cfg) == CMF_OK);
    CHECK(cfg.kv_mode == CMF_DORY_KV_PER_LOOP && cfg.swa_window == 4 && cfg.rope_profile[2] == 2 && cfg.rope_profile[0] == 1);
    /* the runtime reader names what is wrong */
    cJSON_ReplaceItemInObjectCaseSensitive((cJSON *)d, "n_recurrent_loops", cJSON_CreateNumber(CMF_DORY_MAX_LOOPS + 1));
    CHECK(cmf_dory_config_from_arch(arch, &cfg) == CMF_E_FORMAT && strstr(cmf_last_error(), "n_recurrent_loops"));
    cJSON_ReplaceItemInObjectCaseSensitive((cJSON *)d, "n_recurrent_loops", cJSON_CreateNumber(2));
    cJSON_DeleteItemFromObjectCaseSensitive((cJSON *)d, "gate_init");
    CHECK(cmf_dory_config_from_arch(arch, &cfg) == CMF_E_FORMAT && strstr(cmf_last_error(), "gate_init"));
    CHECK(cmf_dory_config_from_arch(NULL, &cfg) == CMF_E_FORMAT);
    cJSON_Delete(arch);
    cJSON_Delete(c);
}

/* Writes dir/config.json (the tiny config) and dir/model.safetensors with one F32 tensor `name` of shape [r, cols]. */
static void write_dir(const char *dir, const char *name, int r, int cols) {
    char p[600];
    cJSON *c = base_config();
    char *txt = cJSON_Print(c);
    snprintf(p, sizeof p, "mkdir -p '%s'", dir);
    CHECK(system(p) == 0);
    snprintf(p, sizeof p, "%s/config.json", dir);
    FILE *f = fopen(p, "wb");
    CHECK(f != NULL);
    if (f) {
        fputs(txt, f);
        fclose(f);
    }
    free(txt);
    cJSON_Delete(c);
    char hdr[256];
    size_t nb = (size_t)r * cols * 4;
    int hl = snprintf(hdr, sizeof hdr, "{\"%s\":{\"dtype\":\"F32\",\"shape\":[%d,%d],\"data_offsets\":[0,%zu]}}", name, r,
                      cols, nb);
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    f = fopen(p, "wb");
    CHECK(f != NULL);
    if (!f) return;
    uint64_t n = (uint64_t)hl;
    fwrite(&n, 8, 1, f);
    fwrite(hdr, 1, (size_t)hl, f);
    float *z = calloc((size_t)r * cols, sizeof(float));
    fwrite(z, 4, (size_t)r * cols, f);
    free(z);
    fclose(f);
}

static void check_tensor_errors(void) {
    cmf_convert_opts o;
    memset(&o, 0, sizeof o);
    o.quant = CMF_DT_F32;
    char dir[512], out[512];
    snprintf(dir, sizeof dir, "%s", tmp_path("dory_missing"));
    snprintf(out, sizeof out, "%s", tmp_path("dory_missing.cmf"));
    write_dir(dir, "backbone.embeddings.weight", 32, 64);
    CHECK(cmf_convert_hf(dir, out, &o) == CMF_E_FORMAT);
    CHECK_MSG(strstr(cmf_last_error(), "backbone.layers.0.attn_alpha") && strstr(cmf_last_error(), "missing"), "%s",
              cmf_last_error());
    CHECK(!cmf_is_file(out));
    write_dir(dir, "backbone.embeddings.weight", 32, 63);
    CHECK(cmf_convert_hf(dir, out, &o) == CMF_E_FORMAT);
    CHECK_MSG(strstr(cmf_last_error(), "backbone.embeddings.weight") && strstr(cmf_last_error(), "shape"), "%s",
              cmf_last_error());
}

static void check_call_errors(void) {
    dory_fixture fx;
    if (dory_fixture_open("tiny", &fx) != 0) {
        CHECK(0);
        return;
    }
    cmf_dory_state *s;
    CHECK(cmf_dory_state_new(fx.d, 4, 0, 7, 0, &s) == CMF_E_ARG);
    CHECK(cmf_dory_state_new(fx.d, 4, 0, -1, CMF_DORY_MAX_LOOPS + 1, &s) == CMF_E_ARG);
    CHECK(cmf_dory_state_new(fx.d, 4, 0, -1, 0, &s) == CMF_OK);
    CHECK(s->max_loops == fx.d->cfg.n_loops); /* per_loop default: the config's loops */
    int32_t ids[5] = {1, 2, 3, 4, 5}, bad = 32;
    CHECK(cmf_dory_forward(s, &bad, 1, 0, NULL) == CMF_E_ARG && strstr(cmf_last_error(), "token id 32"));
    CHECK(cmf_dory_forward(s, ids, 5, 0, NULL) == CMF_E_ARG && strstr(cmf_last_error(), "do not fit"));
    CHECK(cmf_dory_forward(s, ids, 0, 0, NULL) == CMF_E_ARG);
    CHECK(cmf_dory_forward(s, ids, 1, 3, NULL) == CMF_E_ARG && strstr(cmf_last_error(), "loops"));
    CHECK(s->pos == 0);
    CHECK(cmf_dory_forward(s, ids, 4, 0, NULL) == CMF_OK && s->pos == 4);
    CHECK(cmf_dory_forward(s, ids, 1, 0, NULL) == CMF_E_ARG);
    cmf_dory_state_free(s);
    dory_fixture_close(&fx);
}

int main(void) {
    expect("{}", CMF_OK, NULL);
    expect("{\"rope_profile_layers\": [1, 1, 0, 1, 1, 1]}", CMF_E_UNSUPPORTED, "rope_profile_layers[2]");
    expect("{\"no_rope_layers\": [0, 0, 0, 0, 1, 0]}", CMF_E_UNSUPPORTED, "no_rope_layers[4]");
    expect("{\"partial_rotary_factor\": 0.5}", CMF_E_UNSUPPORTED, "partial_rotary_factor");
    expect("{\"partial_rotary_factor_2\": 0.25}", CMF_E_UNSUPPORTED, "partial_rotary_factor_2");
    expect("{\"swa_num_attention_heads\": 8}", CMF_E_UNSUPPORTED, "swa_num_attention_heads");
    expect("{\"swa_num_key_value_heads\": 1}", CMF_E_UNSUPPORTED, "swa_num_key_value_heads");
    expect("{\"swa_head_dim\": 32}", CMF_E_UNSUPPORTED, "swa_head_dim");
    expect("{\"swa_num_attention_heads\": 4, \"swa_head_dim\": 16}", CMF_OK, NULL); /* equal to the full ones */
    expect("{\"n_recurrent_loops\": 0}", CMF_E_UNSUPPORTED, "n_recurrent_loops");
    expect("{\"n_recurrent_loops\": 17}", CMF_E_UNSUPPORTED, "n_recurrent_loops");
    expect("{\"recurrent_kv_cache_mode\": \"every_loop\"}", CMF_E_UNSUPPORTED, "recurrent_kv_cache_mode");
    expect("{\"recurrent_kv_cache_mode\": \"last_loop\"}", CMF_OK, NULL);
    expect("{\"tie_word_embeddings\": true}", CMF_E_UNSUPPORTED, "tie_word_embeddings");
    expect("{\"ngpt_enable_final_norm\": true}", CMF_E_UNSUPPORTED, "ngpt_enable_final_norm");
    expect("{\"mlp_hidden_act\": \"gelu\"}", CMF_E_UNSUPPORTED, "mlp_hidden_act");
    expect("{\"n_output_layers\": 3}", CMF_E_FORMAT, "num_hidden_layers");
    expect("{\"hybrid_layer_pattern\": \"*-S-*x\"}", CMF_E_FORMAT, "layer_pattern[5]");
    expect("{\"hybrid_layer_pattern\": \"*-S-*\"}", CMF_E_FORMAT, "hybrid_layer_pattern");
    expect("{\"head_dim\": 32}", CMF_E_FORMAT, "head_dim");
    expect("{\"init_method_std\": -1}", CMF_E_FORMAT, "init_method_std");
    expect("{\"model_type\": \"llama\"}", CMF_E_UNSUPPORTED, "model_type");
    expect("{\"hidden_size\": \"64\"}", CMF_E_FORMAT, "hidden_size");
    check_arch_keys();
    check_tensor_errors();
    check_call_errors();
    CMF_TEST_END();
}
