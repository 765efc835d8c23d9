/* hf_dory.c — Dory checkpoints (HF / vLLM schema, DORY.md §1.2–§1.3) -> CMF v2. The config fields are validated
 * against what src/model/dory.c runs and stored under header.arch (+ arch.dory; docs/HEADER_KEYS.md "Dory"); the
 * tensors keep their HF names and are written in execution order. */
#include "convert/hf_dory.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "convert/emit.h"
#include "convert/hf.h"
#include "convert/safetensors.h"
#include "model/dory.h"
#include "util/error.h"
#include "util/fileio.h"

#define TRY(x)                                                                                                   \
    do {                                                                                                         \
        cmf_status st_ = (x);                                                                                    \
        if (st_ != CMF_OK) return st_;                                                                           \
    } while (0)

/* ---- config.json -> arch -------------------------------------------------------------------------------------- */

/* A key, JSON null counting as absent. */
static const cJSON *get(const cJSON *c, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(c, key);
    return v && !cJSON_IsNull(v) ? v : NULL;
}

/* An integer in [lo, hi]; the default when absent and dflt >= lo, else an error. */
static cmf_status int_key(const cJSON *c, const char *key, long dflt, long lo, long hi, int *out) {
    const cJSON *v = get(c, key);
    if (!v) {
        if (dflt < lo) return cmf_err(CMF_E_FORMAT, "config.json: '%s' is missing", key);
        *out = (int)dflt;
        return CMF_OK;
    }
    if (!cJSON_IsNumber(v)) return cmf_err(CMF_E_FORMAT, "config.json: '%s' is not a number", key);
    double d = v->valuedouble;
    if (!(d >= (double)lo && d <= (double)hi) || floor(d) != d)
        return cmf_err(CMF_E_FORMAT, "config.json: '%s' = %g is not an integer in [%ld, %ld]", key, d, lo, hi);
    *out = (int)d;
    return CMF_OK;
}

/* A finite number > 0 (dflt when absent; dflt <= 0 means required). */
static cmf_status pos_key(const cJSON *c, const char *key, double dflt, double *out) {
    const cJSON *v = get(c, key);
    if (!v) {
        if (!(dflt > 0)) return cmf_err(CMF_E_FORMAT, "config.json: '%s' is missing", key);
        *out = dflt;
        return CMF_OK;
    }
    if (!cJSON_IsNumber(v) || !(v->valuedouble > 0) || !isfinite(v->valuedouble))
        return cmf_err(CMF_E_FORMAT, "config.json: '%s' must be a finite number > 0", key);
    *out = v->valuedouble;
    return CMF_OK;
}

/* A boolean that must have value `want` when present. */
static cmf_status bool_key(const cJSON *c, const char *key, int want, const char *why) {
    const cJSON *v = get(c, key);
    if (!v) return CMF_OK;
    if (!cJSON_IsBool(v)) return cmf_err(CMF_E_FORMAT, "config.json: '%s' is not a boolean", key);
    if (cJSON_IsTrue(v) != want)
        return cmf_err(CMF_E_UNSUPPORTED, "config.json: '%s' = %s is not supported (%s)", key, want ? "false" : "true",
                       why);
    return CMF_OK;
}

/* A string that must equal `want` when present. */
static cmf_status str_key(const cJSON *c, const char *key, const char *want) {
    const cJSON *v = get(c, key);
    if (!v) return CMF_OK;
    if (!cJSON_IsString(v)) return cmf_err(CMF_E_FORMAT, "config.json: '%s' is not a string", key);
    if (strcmp(v->valuestring, want) != 0)
        return cmf_err(CMF_E_UNSUPPORTED, "config.json: '%s' = \"%.64s\" is not supported (only \"%s\")", key,
                       v->valuestring, want);
    return CMF_OK;
}

/* The checks of DORY.md §1.3 on features the runtime does not have. */
static cmf_status check_features(const cJSON *c, int heads, int kv_heads, int head_dim) {
    TRY(bool_key(c, "tie_word_embeddings", 0, "Dory has a separate lm_head"));
    TRY(bool_key(c, "ngpt", 1, "Dory is an nGPT"));
    TRY(bool_key(c, "fngpt", 1, "Dory is an nGPT"));
    TRY(bool_key(c, "ngpt_enable_final_norm", 0, "Dory has no final norm"));
    TRY(bool_key(c, "attention_output_gate", 1, "the runtime applies the output gate"));
    TRY(bool_key(c, "mlp_bias", 0, "no biases"));
    TRY(bool_key(c, "attention_bias", 0, "no biases"));
    TRY(str_key(c, "mlp_hidden_act", "silu"));
    TRY(str_key(c, "initial_state", "input_copy"));
    TRY(str_key(c, "input_transform", "residual"));
    TRY(str_key(c, "output_transform", "replace"));
    if (get(c, "mixer_type")) return cmf_err(CMF_E_UNSUPPORTED, "config.json: 'mixer_type' must be null");
    const cJSON *fv = get(c, "dory_format_version");
    if (fv && (!cJSON_IsNumber(fv) || fv->valuedouble != 1))
        return cmf_err(CMF_E_UNSUPPORTED, "config.json: 'dory_format_version' must be 1");
    static const char *PF[] = {"partial_rotary_factor", "partial_rotary_factor_2"};
    for (int i = 0; i < 2; i++) {
        const cJSON *v = get(c, PF[i]);
        if (v && (!cJSON_IsNumber(v) || v->valuedouble != 1.0))
            return cmf_err(CMF_E_UNSUPPORTED, "config.json: '%s' must be 1 (partial rotary is not supported)", PF[i]);
    }
    static const char *SWA[] = {"swa_num_attention_heads", "swa_num_key_value_heads", "swa_head_dim"};
    const int full[] = {heads, kv_heads, head_dim};
    for (int i = 0; i < 3; i++) {
        const cJSON *v = get(c, SWA[i]);
        if (v && (!cJSON_IsNumber(v) || v->valuedouble != full[i]))
            return cmf_err(CMF_E_UNSUPPORTED, "config.json: '%s' differs from the full-attention value %d (a separate "
                                              "sliding-window geometry is not supported)", SWA[i], full[i]);
    }
    return CMF_OK;
}

cmf_status cmf_hf_dory_arch(const cJSON *c, cJSON **out) {
    *out = NULL;
    const cJSON *mt = get(c, "model_type");
    if (!cJSON_IsString(mt) || strcmp(mt->valuestring, "dory") != 0)
        return cmf_err(CMF_E_UNSUPPORTED, "config.json: model_type is not \"dory\"");
    const long BIG = 1L << 30;
    int vocab = 0, hidden = 0, layers = 0, inter = 0, heads = 0, kv_heads = 0, head_dim = 0, max_pos = 0, n_in = 0,
        n_rec = 0, n_out = 0, loops = 0, window = 0;
    TRY(int_key(c, "vocab_size", -1, 1, BIG, &vocab));
    TRY(int_key(c, "hidden_size", -1, 1, 1L << 20, &hidden));
    TRY(int_key(c, "num_hidden_layers", -1, 1, CMF_DORY_MAX_LAYERS, &layers));
    TRY(int_key(c, "intermediate_size", -1, 1, 1L << 22, &inter));
    TRY(int_key(c, "num_attention_heads", -1, 1, 4096, &heads));
    TRY(int_key(c, "num_key_value_heads", heads, 1, 4096, &kv_heads));
    int ahd = 0, hd = 0;
    if (get(c, "attention_head_dim")) TRY(int_key(c, "attention_head_dim", -1, 1, 1L << 14, &ahd));
    if (get(c, "head_dim")) TRY(int_key(c, "head_dim", -1, 1, 1L << 14, &hd));
    if (ahd && hd && ahd != hd)
        return cmf_err(CMF_E_FORMAT, "config.json: 'head_dim' %d differs from 'attention_head_dim' %d", hd, ahd);
    head_dim = ahd ? ahd : hd ? hd : hidden / heads;
    if (!ahd && !hd && hidden % heads)
        return cmf_err(CMF_E_FORMAT, "config.json: no 'attention_head_dim' and hidden_size %% heads != 0");
    TRY(int_key(c, "max_position_embeddings", 8192, 1, BIG, &max_pos));
    TRY(int_key(c, "n_input_layers", -1, 1, CMF_DORY_MAX_LAYERS, &n_in));
    TRY(int_key(c, "n_recurrent_layers", -1, 1, CMF_DORY_MAX_LAYERS, &n_rec));
    TRY(int_key(c, "n_output_layers", -1, 1, CMF_DORY_MAX_LAYERS, &n_out));
    const cJSON *lv = get(c, "n_recurrent_loops");
    if (lv && cJSON_IsNumber(lv) && (lv->valuedouble < 1 || lv->valuedouble > CMF_DORY_MAX_LOOPS))
        return cmf_err(CMF_E_UNSUPPORTED, "config.json: 'n_recurrent_loops' = %g is outside 1..%d", lv->valuedouble,
                       CMF_DORY_MAX_LOOPS);
    TRY(int_key(c, "n_recurrent_loops", 1, 1, CMF_DORY_MAX_LOOPS, &loops));
    TRY(int_key(c, "swa_window_size", 1024, 1, BIG, &window));
    if (n_in + n_rec + n_out != layers)
        return cmf_err(CMF_E_FORMAT, "config.json: n_input_layers + n_recurrent_layers + n_output_layers = %d + %d + %d "
                                     "!= num_hidden_layers %d", n_in, n_rec, n_out, layers);
    TRY(check_features(c, heads, kv_heads, head_dim));
    const cJSON *mode = get(c, "recurrent_kv_cache_mode");
    const char *kv_mode = "per_loop";
    if (mode) {
        if (!cJSON_IsString(mode) ||
            (strcmp(mode->valuestring, "per_loop") != 0 && strcmp(mode->valuestring, "last_loop") != 0))
            return cmf_err(CMF_E_UNSUPPORTED, "config.json: 'recurrent_kv_cache_mode' must be \"per_loop\" or "
                                              "\"last_loop\"");
        kv_mode = mode->valuestring;
    }
    const cJSON *pat = get(c, "hybrid_layer_pattern");
    if (!cJSON_IsString(pat)) return cmf_err(CMF_E_FORMAT, "config.json: 'hybrid_layer_pattern' is missing");
    if (strlen(pat->valuestring) != (size_t)layers)
        return cmf_err(CMF_E_FORMAT, "config.json: 'hybrid_layer_pattern' has %zu characters for %d layers",
                       strlen(pat->valuestring), layers);
    const cJSON *prof = get(c, "rope_profile_layers"), *nope = get(c, "no_rope_layers");
    if (prof && (!cJSON_IsArray(prof) || cJSON_GetArraySize(prof) != layers))
        return cmf_err(CMF_E_FORMAT, "config.json: 'rope_profile_layers' must list %d values", layers);
    if (nope && (!cJSON_IsArray(nope) || cJSON_GetArraySize(nope) != layers))
        return cmf_err(CMF_E_FORMAT, "config.json: 'no_rope_layers' must list %d values", layers);
    int uses2 = 0;
    for (int i = 0; i < layers; i++) {
        const cJSON *p = prof ? cJSON_GetArrayItem(prof, i) : NULL, *z = nope ? cJSON_GetArrayItem(nope, i) : NULL;
        if (z && (!cJSON_IsNumber(z) || z->valuedouble != 0))
            return cmf_err(CMF_E_UNSUPPORTED, "config.json: no_rope_layers[%d] is set (NoPE layers are not supported)", i);
        if (p && (!cJSON_IsNumber(p) || (p->valuedouble != 1 && p->valuedouble != 2)))
            return cmf_err(CMF_E_UNSUPPORTED, "config.json: rope_profile_layers[%d] is not 1 or 2 (profile 0 = NoPE "
                                              "is not supported)", i);
        uses2 |= p && p->valuedouble == 2;
    }
    double theta = 0, theta2 = 0, std = 0, alpha = 0, gate = 0;
    TRY(pos_key(c, "rope_theta", 10000.0, &theta));
    if (uses2 || get(c, "rope_theta_2")) TRY(pos_key(c, "rope_theta_2", -1, &theta2));
    if (!uses2 && !theta2) theta2 = theta;
    TRY(pos_key(c, "init_method_std", 0.02, &std));
    TRY(pos_key(c, "ngpt_alpha_init", 0.05, &alpha));
    TRY(pos_key(c, "attention_output_gate_logit_scale_init", sqrt((double)hidden), &gate));

    cJSON *arch = cJSON_CreateObject(), *d = cJSON_CreateObject(), *pa = cJSON_CreateArray();
    if (!arch || !d || !pa) {
        cJSON_Delete(arch);
        cJSON_Delete(d);
        cJSON_Delete(pa);
        return cmf_err(CMF_E_NOMEM, "out of memory");
    }
    cJSON_AddStringToObject(arch, "arch_name", "dory");
    cJSON_AddNumberToObject(arch, "hidden_size", hidden);
    cJSON_AddNumberToObject(arch, "intermediate_size", inter);
    cJSON_AddNumberToObject(arch, "num_layers", layers);
    cJSON_AddNumberToObject(arch, "num_attention_heads", heads);
    cJSON_AddNumberToObject(arch, "num_kv_heads", kv_heads);
    cJSON_AddNumberToObject(arch, "head_dim", head_dim);
    cJSON_AddNumberToObject(arch, "vocab_size", vocab);
    cJSON_AddNumberToObject(arch, "max_position_embeddings", max_pos);
    /* Keys CMF_FORMAT.md §1.4 requires of every arch. rms_norm_eps: the justnorm eps (added to the sum of squares,
     * §1.4). layer_types: the enum has no MLP-only value, so '-' sub-layers are listed as FullAttention; the
     * authoritative kinds are arch.dory.layer_pattern. */
    cJSON_AddNumberToObject(arch, "rms_norm_eps", 1e-6);
    cJSON *lt = cJSON_AddArrayToObject(arch, "layer_types");
    for (int i = 0; i < layers; i++)
        cJSON_AddItemToArray(lt, cJSON_CreateString(pat->valuestring[i] == 'S' ? "SlidingAttention" : "FullAttention"));
    cJSON_AddNumberToObject(arch, "rope_theta", theta);
    cJSON_AddStringToObject(arch, "rope_pairing", "half");
    cJSON_AddNumberToObject(arch, "sliding_window", window);
    cJSON_AddBoolToObject(arch, "tie_word_embeddings", 0);
    cJSON_AddStringToObject(arch, "hidden_act", "silu");
    cJSON_AddItemToObject(arch, "dory", d);
    cJSON_AddNumberToObject(d, "format_version", 1);
    cJSON_AddStringToObject(d, "layer_pattern", pat->valuestring);
    cJSON_AddNumberToObject(d, "n_input_layers", n_in);
    cJSON_AddNumberToObject(d, "n_recurrent_layers", n_rec);
    cJSON_AddNumberToObject(d, "n_output_layers", n_out);
    cJSON_AddNumberToObject(d, "n_recurrent_loops", loops);
    cJSON_AddStringToObject(d, "recurrent_kv_cache_mode", kv_mode);
    for (int i = 0; i < layers; i++) {
        const cJSON *p = prof ? cJSON_GetArrayItem(prof, i) : NULL;
        cJSON_AddItemToArray(pa, cJSON_CreateNumber(p ? p->valuedouble : 1));
    }
    cJSON_AddItemToObject(d, "rope_profile_layers", pa);
    cJSON_AddNumberToObject(d, "rope_theta", theta);
    cJSON_AddNumberToObject(d, "rope_theta_2", theta2);
    cJSON_AddNumberToObject(d, "init_method_std", std);
    cJSON_AddNumberToObject(d, "ngpt_alpha_init", alpha);
    cJSON_AddNumberToObject(d, "gate_init", gate);
    cJSON_AddNumberToObject(d, "swa_window_size", window);
    /* One validation path: the runtime's own reader must accept what was written. */
    cmf_dory_config cfg;
    cmf_status st = cmf_dory_config_from_arch(arch, &cfg);
    if (st != CMF_OK) {
        cJSON_Delete(arch);
        return cmf_err_prefix(st, "config.json: ");
    }
    *out = arch;
    return CMF_OK;
}

/* ---- tensors -------------------------------------------------------------------------------------------------- */

/* Emits source tensor `name`, which must have the given shape (ndim 1 or 2). */
static cmf_status emit_one(cmf_emit *em, const cmf_safetensors *st, const char *name, int ndim, uint64_t d0,
                           uint64_t d1) {
    const cmf_st_tensor *t = cmf_st_find(st, name);
    if (!t) return cmf_err(CMF_E_FORMAT, "tensor '%s' is missing from the checkpoint", name);
    if (t->ndim != ndim || t->shape[0] != d0 || (ndim == 2 && t->shape[1] != d1))
        return ndim == 2 ? cmf_err(CMF_E_FORMAT, "tensor '%s' must have shape [%llu, %llu]", name,
                                   (unsigned long long)d0, (unsigned long long)d1)
                         : cmf_err(CMF_E_FORMAT, "tensor '%s' must have shape [%llu]", name, (unsigned long long)d0);
    if (t->dtype_str[0] && strcmp(t->dtype_str, "F32") && strcmp(t->dtype_str, "F16") && strcmp(t->dtype_str, "BF16"))
        return cmf_err(CMF_E_UNSUPPORTED, "tensor '%s': source dtype %s (the converter reads F32, F16, BF16)", name,
                       t->dtype_str);
    float *buf = cmf_emit_scratch(em, cmf_st_numel(t));
    if (!buf) return cmf_err(CMF_E_NOMEM, "tensor '%s': out of memory", name);
    TRY(cmf_st_to_f32(t, buf));
    return cmf_emit_tensor(em, name, t->ndim, t->shape, buf, t->nbytes);
}

static cmf_status emit_all(cmf_emit *em, const cmf_safetensors *st, const cmf_dory_config *c, size_t *used) {
    const uint64_t V = (uint64_t)c->vocab_size, H = (uint64_t)c->hidden_size, F = (uint64_t)c->intermediate_size,
                   QD = (uint64_t)c->n_heads * c->head_dim, KVD = (uint64_t)c->n_kv_heads * c->head_dim;
    char n[256];
    *used = 0;
#define EMIT(nd, a, b)                                                                                           \
    do {                                                                                                         \
        TRY(emit_one(em, st, n, nd, a, b));                                                                      \
        (*used)++;                                                                                               \
    } while (0)
    snprintf(n, sizeof n, "backbone.embeddings.weight");
    EMIT(2, V, H);
    for (int i = 0; i < c->n_layers; i++) {
        static const char *ATT[] = {"attn_alpha", "mixer.q_proj.weight", "mixer.k_proj.weight", "mixer.v_proj.weight",
                                    "mixer.g_proj.weight", "mixer.sqk", "mixer.s_gate", "mixer.o_proj.weight"};
        static const char *MLP[] = {"mlp_alpha", "mixer.gate_proj.weight", "mixer.up_proj.weight", "mixer.suv_gate",
                                    "mixer.suv_up", "mixer.down_proj.weight"};
        if (c->pattern[i] == '-') {
            const uint64_t sh[6][3] = {{1, H, 0}, {2, F, H}, {2, F, H}, {1, F, 0}, {1, F, 0}, {2, H, F}};
            for (int j = 0; j < 6; j++) {
                snprintf(n, sizeof n, "backbone.layers.%d.%s", i, MLP[j]);
                EMIT((int)sh[j][0], sh[j][1], sh[j][2]);
            }
        } else {
            const uint64_t sh[8][3] = {{1, H, 0},  {2, QD, H}, {2, KVD, H}, {2, KVD, H},
                                       {2, QD, H}, {1, QD, 0}, {1, QD, 0},  {2, H, QD}};
            for (int j = 0; j < 8; j++) {
                snprintf(n, sizeof n, "backbone.layers.%d.%s", i, ATT[j]);
                EMIT((int)sh[j][0], sh[j][1], sh[j][2]);
            }
        }
    }
    snprintf(n, sizeof n, "lm_head.weight");
    EMIT(2, V, H);
    snprintf(n, sizeof n, "lm_head.logit_scale");
    EMIT(1, V, 0);
#undef EMIT
    return CMF_OK;
}

/* The optional Recon probe (model/dory.h, our definition): tensors dory_recon.weight [H] and dory_recon.bias [1], in
 * the checkpoint itself or in <dir>/dory_recon.safetensors. Emits the weight as tensor dory_recon.weight and stores
 * the bias as arch.dory.recon_bias (exact); *used counts the checkpoint tensors taken. */
static cmf_status emit_recon(cmf_emit *em, const char *dir, const cmf_safetensors *st, const cmf_dory_config *c,
                             cJSON *arch, size_t *used) {
    cmf_safetensors *side = NULL;
    const cmf_safetensors *src = st;
    const int in_ckpt = cmf_st_find(st, "dory_recon.weight") || cmf_st_find(st, "dory_recon.bias");
    if (!in_ckpt) {
        char *path = cmf_path_join(dir, "dory_recon.safetensors");
        if (!path) return cmf_err(CMF_E_NOMEM, "out of memory");
        cmf_status s = cmf_is_file(path) ? cmf_st_open(path, &side) : CMF_OK;
        free(path);
        if (s) return s;
        if (!side) return CMF_OK; /* no probe */
        src = side;
    }
    const cmf_st_tensor *b = cmf_st_find(src, "dory_recon.bias");
    float bias = 0;
    cmf_status s = CMF_OK;
    if (!b || b->ndim != 1 || b->shape[0] != 1)
        s = cmf_err(CMF_E_FORMAT, "tensor 'dory_recon.bias' (Recon probe) must be present with shape [1]");
    else if (strcmp(b->dtype_str, "F32") && strcmp(b->dtype_str, "F16") && strcmp(b->dtype_str, "BF16"))
        s = cmf_err(CMF_E_UNSUPPORTED, "tensor 'dory_recon.bias': source dtype %s (F32, F16, BF16)", b->dtype_str);
    if (!s) s = cmf_st_to_f32(b, &bias);
    if (!s && !isfinite(bias)) s = cmf_err(CMF_E_FORMAT, "tensor 'dory_recon.bias' is not finite");
    if (!s) s = emit_one(em, src, "dory_recon.weight", 1, (uint64_t)c->hidden_size, 0);
    if (!s) {
        cJSON *d = cJSON_GetObjectItemCaseSensitive(arch, "dory");
        if (!d) s = cmf_err(CMF_E_FORMAT, "internal: arch has no dory object");
        else cJSON_AddNumberToObject(d, "recon_bias", (double)bias);
    }
    if (!s && in_ckpt) *used += 2;
    cmf_st_close(side);
    return s;
}

cmf_status cmf_convert_hf_dory(const char *dir, const char *out_path, const cmf_convert_opts *opts) {
    if (!dir || !out_path || !opts) return cmf_err(CMF_E_ARG, "cmf_convert_hf_dory: NULL argument");
    cJSON *config = NULL, *gen = NULL, *tok_cfg = NULL, *tok_json = NULL, *arch = NULL, *tc = NULL, *header = NULL;
    char *vocab = NULL, *tpl = NULL;
    size_t vocab_len = 0, tpl_len = 0, used = 0;
    cmf_safetensors *st = NULL;
    cmf_dory_config cfg;
    cmf_emit em;
    memset(&em, 0, sizeof em);
    cmf_status s = cmf_hf_parse_opt(dir, "config.json", &config);
    if (!s && !config) s = cmf_err(CMF_E_NOT_FOUND, "%s: no config.json", dir);
    if (!s) s = cmf_hf_dory_arch(config, &arch);
    if (!s) s = cmf_dory_config_from_arch(arch, &cfg);
    if (!s) s = cmf_hf_parse_opt(dir, "generation_config.json", &gen);
    if (!s) s = cmf_hf_parse_opt(dir, "tokenizer_config.json", &tok_cfg);
    if (!s) s = cmf_hf_read_opt(dir, "tokenizer.json", &vocab, &vocab_len);
    if (!s && vocab && !(tok_json = cJSON_ParseWithLength(vocab, vocab_len)))
        s = cmf_err(CMF_E_FORMAT, "%s/tokenizer.json: malformed JSON", dir);
    if (!s && !vocab) cmf_convert_warn(opts, "no tokenizer.json: the file has no vocab section");
    if (!s) s = cmf_hf_read_opt(dir, "chat_template.jinja", &tpl, &tpl_len);
    if (!s) s = cmf_hf_tokenizer_config(config, gen, tok_cfg, tok_json, tpl, &tc);
    if (!s) s = cmf_st_open(dir, &st);
    if (!s) s = cmf_hf_check_output(dir, out_path, st);
    if (!s) {
        uint64_t total = 0;
        for (size_t i = 0; i < cmf_st_count(st); i++) total += cmf_st_get(st, i)->nbytes;
        s = cmf_emit_begin(&em, out_path, opts, total);
    }
    if (!s) s = emit_all(&em, st, &cfg, &used);
    if (!s) s = emit_recon(&em, dir, st, &cfg, arch, &used);
    if (!s && used != cmf_st_count(st))
        cmf_convert_warn(opts, "%zu checkpoint tensor(s) not used by Dory were skipped", cmf_st_count(st) - used);
    if (!s) {
        header = cJSON_CreateObject();
        cJSON_AddStringToObject(header, "format", "cmf");
        cJSON_AddNumberToObject(header, "version", 2);
        cJSON_AddItemToObject(header, "arch", arch);
        arch = NULL;
        cJSON_AddStringToObject(header, "quant_type", cmf_quant_label(opts->quant));
        cJSON *prov = cJSON_AddObjectToObject(header, "provenance");
        cJSON_AddStringToObject(prov, "tool", "cmf convert");
        size_t n = strlen(dir);
        while (n > 1 && dir[n - 1] == '/') n--;
        size_t b = n;
        while (b > 0 && dir[b - 1] != '/') b--;
        char bn[256];
        snprintf(bn, sizeof bn, "%.*s", (int)(n - b), dir + b);
        cJSON_AddStringToObject(prov, "source_model", bn);
        cJSON_AddItemToObject(header, "tokenizer_config", tc);
        tc = NULL;
    }
    s = cmf_emit_end(&em, s, header, vocab, vocab_len);
    cmf_st_close(st);
    cJSON_Delete(config);
    cJSON_Delete(gen);
    cJSON_Delete(tok_cfg);
    cJSON_Delete(tok_json);
    cJSON_Delete(arch);
    cJSON_Delete(tc);
    free(vocab);
    free(tpl);
    if (s) return cmf_err_prefix(s, "convert %s: ", dir);
    return CMF_OK;
}
