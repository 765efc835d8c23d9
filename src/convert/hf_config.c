/* hf_config.c — config.json / generation_config.json / tokenizer_config.json -> header.arch and
 * header.tokenizer_config (CMF_FORMAT.md §1.4, §1.8, §5.2; extension keys in docs/HEADER_KEYS.md).
 *
 * transformers 5 moved rope_theta (and rope_scaling) into `rope_parameters` {rope_type, rope_theta, ...}, and for
 * Gemma-3 into per-layer-type entries {full_attention: {...}, sliding_attention: {...}}; both spellings are read. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "convert/emit.h"
#include "convert/hf.h"
#include "util/error.h"

typedef struct hfcfg {
    const cJSON *root, *text; /* text = text_config of multimodal configs (or NULL) */
} hfcfg;

/* A key of the text config, else of the top level; JSON null counts as absent. */
static const cJSON *get(const hfcfg *c, const char *key) {
    const cJSON *v = c->text ? cJSON_GetObjectItemCaseSensitive(c->text, key) : NULL;
    if (!v || cJSON_IsNull(v)) v = cJSON_GetObjectItemCaseSensitive(c->root, key);
    return v && !cJSON_IsNull(v) ? v : NULL;
}

static int get_num(const hfcfg *c, const char *key, double *out) {
    const cJSON *v = get(c, key);
    if (!cJSON_IsNumber(v)) return 0;
    *out = v->valuedouble;
    return 1;
}

/* A required positive integer (< 2^31). */
static cmf_status get_pos_int(const hfcfg *c, const char *key, int *out) {
    double d;
    if (!get_num(c, key, &d)) return cmf_err(CMF_E_FORMAT, "config.json: '%s' is missing or not a number", key);
    if (floor(d) != d || d < 1)
        return cmf_err(CMF_E_FORMAT, "config.json: '%s' = %g is not a positive integer", key, d);
    if (d > 2147483647.0)
        return cmf_err(CMF_E_FORMAT, "config.json: '%s' = %.0f is out of range [1, 2147483647]", key, d);
    *out = (int)d;
    return CMF_OK;
}

static const char *get_str(const hfcfg *c, const char *key) {
    const cJSON *v = get(c, key);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

static int get_bool(const hfcfg *c, const char *key, int dflt) {
    const cJSON *v = get(c, key);
    return cJSON_IsBool(v) ? cJSON_IsTrue(v) : dflt;
}

/* A bool key that must be true/false when present (HF reads it as a Python bool; "yes" would be truthy there but
 * is a typo here): *out = dflt when absent. */
static cmf_status get_strict_bool(const hfcfg *c, const char *key, int dflt, int *out) {
    const cJSON *v = get(c, key);
    if (v && !cJSON_IsBool(v)) return cmf_err(CMF_E_FORMAT, "config.json: '%s' is not true or false", key);
    *out = v ? cJSON_IsTrue(v) : dflt;
    return CMF_OK;
}

/* An optional number that must be positive and finite when present (and not another JSON type). */
static cmf_status get_pos_num(const hfcfg *c, const char *key, int *present, double *out) {
    const cJSON *v = get(c, key);
    *present = v != NULL;
    if (!v) return CMF_OK;
    if (!cJSON_IsNumber(v) || !(v->valuedouble > 0) || !isfinite(v->valuedouble))
        return cmf_err(CMF_E_FORMAT, "config.json: '%s' must be a positive finite number", key);
    *out = v->valuedouble;
    return CMF_OK;
}

static const cJSON *obj_num(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsNumber(v) ? v : NULL;
}

static const char *rope_type_of(const cJSON *o) {
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(o, "rope_type");
    if (!cJSON_IsString(t)) t = cJSON_GetObjectItemCaseSensitive(o, "type");
    return cJSON_IsString(t) ? t->valuestring : NULL;
}

/* rope_theta: top-level, else rope_parameters.rope_theta, else rope_parameters.full_attention.rope_theta. */
static double rope_theta(const hfcfg *c) {
    double d;
    if (get_num(c, "rope_theta", &d)) return d;
    const cJSON *rp = get(c, "rope_parameters");
    if (obj_num(rp, "rope_theta")) return obj_num(rp, "rope_theta")->valuedouble;
    const cJSON *fa = cJSON_GetObjectItemCaseSensitive(rp, "full_attention");
    if (obj_num(fa, "rope_theta")) return obj_num(fa, "rope_theta")->valuedouble;
    return 10000.0;
}

/* The rope scaling profile: rope_scaling, else rope_parameters (or its full_attention entry) when its type is not
 * "default". NULL when none. */
static const cJSON *rope_scaling(const hfcfg *c) {
    const cJSON *rs = get(c, "rope_scaling");
    if (cJSON_IsObject(rs) && rope_type_of(rs) && strcmp(rope_type_of(rs), "default") != 0) return rs;
    const cJSON *rp = get(c, "rope_parameters");
    const cJSON *fa = cJSON_GetObjectItemCaseSensitive(rp, "full_attention");
    if (cJSON_IsObject(fa)) rp = fa;
    if (cJSON_IsObject(rp) && rope_type_of(rp) && strcmp(rope_type_of(rp), "default") != 0) return rp;
    return NULL;
}

static int is_gemma(const char *mt) { return strncmp(mt, "gemma", 5) == 0; }

/* Adds arch.rope_scaling / arch.yarn, or caps max_position_embeddings for profiles the runtime does not apply. */
static cmf_status add_rope_scaling(const hfcfg *c, cJSON *arch, const cmf_convert_opts *opts, int *max_pos) {
    const cJSON *rs = rope_scaling(c);
    if (!rs) return CMF_OK;
    const char *type = rope_type_of(rs);
    const cJSON *factor = obj_num(rs, "factor");
    if (cJSON_GetObjectItemCaseSensitive(rs, "factor") && (!factor || !(factor->valuedouble > 0)))
        return cmf_err(CMF_E_FORMAT, "config.json: rope scaling '%s': 'factor' must be a positive number", type);
    if (!strcmp(type, "llama3")) {
        static const char *KEYS[] = {"factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"};
        cJSON *o = cJSON_AddObjectToObject(arch, "rope_scaling");
        cJSON_AddStringToObject(o, "rope_type", "llama3");
        for (int i = 0; i < 4; i++) {
            if (!obj_num(rs, KEYS[i])) return cmf_err(CMF_E_FORMAT, "config.json: llama3 rope scaling without '%s'", KEYS[i]);
            cJSON_AddNumberToObject(o, KEYS[i], obj_num(rs, KEYS[i])->valuedouble);
        }
        return CMF_OK;
    }
    if (!strcmp(type, "linear")) {
        if (!factor) return cmf_err(CMF_E_FORMAT, "config.json: linear rope scaling without 'factor'");
        cJSON *o = cJSON_AddObjectToObject(arch, "rope_scaling");
        cJSON_AddStringToObject(o, "rope_type", "linear");
        cJSON_AddNumberToObject(o, "factor", factor->valuedouble);
        return CMF_OK;
    }
    const cJSON *orig = obj_num(rs, "original_max_position_embeddings");
    if (!orig) orig = obj_num(c->text ? c->text : c->root, "original_max_position_embeddings");
    if (!strcmp(type, "yarn")) {
        /* transformers _compute_yarn_parameters: factor defaults to max_position_embeddings / original; the
         * attention factor, when not given, is mscale(factor, mscale) / mscale(factor, mscale_all_dim) if both are
         * set, else mscale(factor) = 1 + 0.1 ln(factor). It is written explicitly: arch.yarn's default is 1. */
        /* without original_max_position_embeddings transformers takes max_position_embeddings as the original */
        const double ov = orig ? orig->valuedouble : (double)*max_pos;
        if (!(ov >= 1 && ov <= (double)(1 << 30)))
            return cmf_err(CMF_E_FORMAT, "config.json: yarn rope scaling: 'original_max_position_embeddings' %g is "
                           "out of range [1, 2^30]", ov);
        double f = factor ? factor->valuedouble : (double)*max_pos / ov;
        if (!(f >= 1 && f <= 1e6))
            return cmf_err(CMF_E_FORMAT, "config.json: yarn rope scaling factor %g is out of range [1, 1e6]", f);
        const cJSON *af = obj_num(rs, "attention_factor"), *ms = obj_num(rs, "mscale"),
                    *msa = obj_num(rs, "mscale_all_dim");
        double a;
        if (af) a = af->valuedouble;
        else if (ms && msa && ms->valuedouble != 0 && msa->valuedouble != 0)
            a = (0.1 * ms->valuedouble * log(f) + 1.0) / (0.1 * msa->valuedouble * log(f) + 1.0);
        else a = f <= 1 ? 1.0 : 0.1 * log(f) + 1.0;
        cJSON *y = cJSON_AddObjectToObject(arch, "yarn");
        cJSON_AddNumberToObject(y, "factor", f);
        cJSON_AddNumberToObject(y, "original_max_position_embeddings", ov);
        cJSON_AddNumberToObject(y, "attention_factor", a);
        static const char *OPT[] = {"beta_fast", "beta_slow", "mscale_all_dim"};
        for (int i = 0; i < 3; i++)
            if (obj_num(rs, OPT[i])) cJSON_AddNumberToObject(y, OPT[i], obj_num(rs, OPT[i])->valuedouble);
        const cJSON *tr = cJSON_GetObjectItemCaseSensitive(rs, "truncate");
        if (cJSON_IsBool(tr)) cJSON_AddBoolToObject(y, "truncate", cJSON_IsTrue(tr));
        return CMF_OK;
    }
    /* longrope, su, dynamic, mrope, ...: not applied (§5.2); the context is capped at the original window. */
    if (orig && orig->valuedouble >= 1 && orig->valuedouble < *max_pos) *max_pos = (int)orig->valuedouble;
    cmf_convert_warn(opts, "rope scaling '%s' is not applied; max_position_embeddings capped at %d", type, *max_pos);
    return CMF_OK;
}

/* layer_types (§1.4 PascalCase) and sliding-window keys, per model family (see docs/HEADER_KEYS.md). */
static cmf_status add_layers(const hfcfg *c, const char *mt, int n_layers, cJSON *arch) {
    double sw = 0;
    int has_sw = get_num(c, "sliding_window", &sw) && sw >= 1;
    const cJSON *lt = get(c, "layer_types");
    int qwen = !strcmp(mt, "qwen2") || !strcmp(mt, "qwen3");
    if (qwen && !get_bool(c, "use_sliding_window", 0)) has_sw = 0; /* HF ignores it then (§5.2) */
    cJSON *types = cJSON_AddArrayToObject(arch, "layer_types");
    int any_sliding = 0;
    int pattern = 0;
    if (!strcmp(mt, "gemma2")) pattern = 2;
    if (!strcmp(mt, "gemma3") || !strcmp(mt, "gemma3_text")) {
        double p;
        pattern = get_num(c, "sliding_window_pattern", &p) && p >= 1 ? (int)p : 6;
    }
    if (cJSON_IsArray(lt) && has_sw) {
        if (cJSON_GetArraySize(lt) != n_layers)
            return cmf_err(CMF_E_FORMAT, "config.json: layer_types has %d entries for %d layers", cJSON_GetArraySize(lt),
                           n_layers);
        for (int i = 0; i < n_layers; i++) {
            const cJSON *t = cJSON_GetArrayItem(lt, i);
            const char *s = cJSON_IsString(t) ? t->valuestring : "";
            if (!strcmp(s, "sliding_attention")) {
                cJSON_AddItemToArray(types, cJSON_CreateString("SlidingAttention"));
                any_sliding = 1;
            } else if (!strcmp(s, "full_attention")) {
                cJSON_AddItemToArray(types, cJSON_CreateString("FullAttention"));
            } else {
                return cmf_err(CMF_E_UNSUPPORTED, "config.json: layer_types[%d] = '%s' is not supported", i, s);
            }
        }
    } else {
        for (int i = 0; i < n_layers; i++) {
            int sliding = has_sw && (pattern ? (i + 1) % pattern != 0 : 1);
            any_sliding |= sliding;
            cJSON_AddItemToArray(types, cJSON_CreateString(sliding ? "SlidingAttention" : "FullAttention"));
        }
    }
    if (any_sliding) {
        cJSON_AddNumberToObject(arch, "sliding_window", sw);
        if (pattern) cJSON_AddNumberToObject(arch, "sliding_window_pattern", pattern);
    }
    return CMF_OK;
}

static const char *SUPPORTED[] = {"llama", "mistral", "qwen2", "qwen3", "gemma", "gemma2", "gemma3", "gemma3_text",
                                  "phi3", "smollm"};

cmf_status cmf_hf_arch(const cJSON *config, const cmf_convert_opts *opts, cJSON **out) {
    *out = NULL;
    if (!cJSON_IsObject(config)) return cmf_err(CMF_E_FORMAT, "config.json: not a JSON object");
    hfcfg c = {config, cJSON_GetObjectItemCaseSensitive(config, "text_config")};
    if (!cJSON_IsObject(c.text)) c.text = NULL;
    const cJSON *mtj = cJSON_GetObjectItemCaseSensitive(config, "model_type");
    if (!cJSON_IsString(mtj)) return cmf_err(CMF_E_FORMAT, "config.json: 'model_type' is missing");
    const char *mt = mtj->valuestring;
    size_t k = 0;
    while (k < sizeof SUPPORTED / sizeof SUPPORTED[0] && strcmp(SUPPORTED[k], mt)) k++;
    if (k == sizeof SUPPORTED / sizeof SUPPORTED[0])
        return cmf_err(CMF_E_UNSUPPORTED, "config.json: model_type '%s' is not supported (llama, mistral, qwen2, "
                                          "qwen3, gemma, gemma2, gemma3, phi3, smollm)", mt);
    int hidden, inter, layers, heads, kv_heads, vocab, max_pos, head_dim;
    cmf_status s;
    if ((s = get_pos_int(&c, "hidden_size", &hidden)) || (s = get_pos_int(&c, "intermediate_size", &inter)) ||
        (s = get_pos_int(&c, "num_hidden_layers", &layers)) || (s = get_pos_int(&c, "num_attention_heads", &heads)) ||
        (s = get_pos_int(&c, "vocab_size", &vocab)) || (s = get_pos_int(&c, "max_position_embeddings", &max_pos)))
        return s;
    if (get(&c, "num_key_value_heads")) {
        if ((s = get_pos_int(&c, "num_key_value_heads", &kv_heads))) return s;
    } else {
        kv_heads = heads;
    }
    if (heads % kv_heads)
        return cmf_err(CMF_E_FORMAT, "config.json: num_attention_heads %d is not a multiple of num_key_value_heads %d",
                       heads, kv_heads);
    if (get(&c, "head_dim")) {
        if ((s = get_pos_int(&c, "head_dim", &head_dim))) return s;
    } else {
        if (hidden % heads)
            return cmf_err(CMF_E_FORMAT, "config.json: no head_dim and hidden_size %d %% num_attention_heads %d != 0",
                           hidden, heads);
        head_dim = hidden / heads;
    }
    double eps = 1e-6, theta_in = 0;
    int have = 0;
    if ((s = get_pos_num(&c, "rms_norm_eps", &have, &eps))) return s;
    if (!have && (s = get_pos_num(&c, "norm_eps", &have, &eps))) return s;
    if ((s = get_pos_num(&c, "rope_theta", &have, &theta_in))) return s;
    if (!(rope_theta(&c) > 0) || !isfinite(rope_theta(&c)))
        return cmf_err(CMF_E_FORMAT, "config.json: rope_parameters.rope_theta %g must be a positive finite number",
                       rope_theta(&c));
    int gemma = is_gemma(mt), tie = 0;
    if ((s = get_strict_bool(&c, "tie_word_embeddings", gemma, &tie))) return s;
    const char *act = get_str(&c, "hidden_activation");
    /* HF Gemma/Gemma2/Gemma3 MLPs apply ACT2FN[hidden_activation]; "gelu" there is the exact erf GELU, which this
     * runtime does not implement. (A legacy Gemma config with only hidden_act "gelu" gets gelu_pytorch_tanh in HF,
     * so that case is mapped to gelu_tanh below.) */
    if (act && !strcmp(act, "gelu"))
        return cmf_err(CMF_E_UNSUPPORTED, "config.json: hidden_activation 'gelu' is the exact (erf) GELU in HF "
                                          "transformers; the runtime implements only silu and gelu_tanh "
                                          "(gelu_pytorch_tanh)");
    if (!act) act = get_str(&c, "hidden_act");
    if (!act) act = gemma ? "gelu_pytorch_tanh" : "silu";
    const char *act_out;
    if (!strcmp(act, "silu") || !strcmp(act, "swish"))
        act_out = "silu";
    else if (!strcmp(act, "gelu_pytorch_tanh") || !strcmp(act, "gelu_tanh") || !strcmp(act, "gelu_new") ||
             (gemma && !strcmp(act, "gelu")))
        act_out = "gelu_tanh";
    else
        return cmf_err(CMF_E_UNSUPPORTED, "config.json: hidden activation '%s' is not supported (silu, gelu_tanh)", act);

    cJSON *arch = cJSON_CreateObject();
    if (!arch) return cmf_err(CMF_E_NOMEM, "out of memory");
    cJSON_AddStringToObject(arch, "arch_name", mt);
    cJSON_AddNumberToObject(arch, "hidden_size", hidden);
    cJSON_AddNumberToObject(arch, "intermediate_size", inter);
    cJSON_AddNumberToObject(arch, "num_layers", layers);
    cJSON_AddNumberToObject(arch, "num_attention_heads", heads);
    cJSON_AddNumberToObject(arch, "num_kv_heads", kv_heads);
    cJSON_AddNumberToObject(arch, "head_dim", head_dim);
    cJSON_AddNumberToObject(arch, "vocab_size", vocab);
    if ((s = add_layers(&c, mt, layers, arch))) goto fail;
    cJSON_AddNumberToObject(arch, "rms_norm_eps", eps);
    if ((s = add_rope_scaling(&c, arch, opts, &max_pos))) goto fail;
    cJSON_AddNumberToObject(arch, "max_position_embeddings", max_pos);
    cJSON_AddStringToObject(arch, "norm_style", gemma ? "gemma" : "qwen");
    cJSON_AddNumberToObject(arch, "rope_theta", rope_theta(&c));
    cJSON_AddStringToObject(arch, "rope_pairing", "half");
    cJSON_AddBoolToObject(arch, "tie_word_embeddings", tie);
    cJSON_AddStringToObject(arch, "hidden_act", act_out);
    double d;
    if (get_num(&c, "partial_rotary_factor", &d) && d != 1.0) {
        if (!(d > 0 && d <= 1)) {
            s = cmf_err(CMF_E_FORMAT, "config.json: partial_rotary_factor %g is not in (0, 1]", d);
            goto fail;
        }
        cJSON_AddNumberToObject(arch, "partial_rotary_factor", d);
    }
    if (gemma) cJSON_AddNumberToObject(arch, "embed_multiplier", sqrt((double)hidden));
    if (get_num(&c, "query_pre_attn_scalar", &d))
        cJSON_AddNumberToObject(arch, "query_pre_attn_scalar", d);
    else if (!strcmp(mt, "gemma2") || !strcmp(mt, "gemma3") || !strcmp(mt, "gemma3_text"))
        cJSON_AddNumberToObject(arch, "query_pre_attn_scalar", 256); /* Gemma2Config / Gemma3TextConfig default */
    if (get_num(&c, "final_logit_softcapping", &d)) cJSON_AddNumberToObject(arch, "final_logit_softcapping", d);
    if (get_num(&c, "attn_logit_softcapping", &d)) cJSON_AddNumberToObject(arch, "attn_logit_softcapping", d);
    if (!strcmp(mt, "gemma3") || !strcmp(mt, "gemma3_text")) {
        const cJSON *sa = cJSON_GetObjectItemCaseSensitive(get(&c, "rope_parameters"), "sliding_attention");
        if (!get_num(&c, "rope_local_base_freq", &d)) d = obj_num(sa, "rope_theta") ? obj_num(sa, "rope_theta")->valuedouble : 10000.0;
        cJSON_AddNumberToObject(arch, "rope_local_base_freq", d);
    }
    *out = arch;
    return CMF_OK;
fail:
    cJSON_Delete(arch);
    return s;
}

/* ---- tokenizer_config ---------------------------------------------------------------------------------------- */

/* The content string of a token given as "text" or {"content": "text", ...}. */
static const char *token_text(const cJSON *v) {
    if (cJSON_IsString(v)) return v->valuestring;
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(v, "content");
    return cJSON_IsString(c) ? c->valuestring : NULL;
}

/* Resolves a token string to its id; -1 when not found. */
static double resolve_token(const char *text, const cJSON *tok_cfg, const cJSON *tok_json) {
    if (!text) return -1;
    const cJSON *atd = cJSON_GetObjectItemCaseSensitive(tok_cfg, "added_tokens_decoder");
    for (const cJSON *e = cJSON_IsObject(atd) ? atd->child : NULL; e; e = e->next) {
        const char *c = token_text(e);
        char *end;
        double id = strtod(e->string, &end);
        if (c && !strcmp(c, text) && *end == 0 && id >= 0) return id;
    }
    const cJSON *at = cJSON_GetObjectItemCaseSensitive(tok_json, "added_tokens");
    for (const cJSON *e = cJSON_IsArray(at) ? at->child : NULL; e; e = e->next) {
        const char *c = token_text(e);
        const cJSON *id = obj_num(e, "id");
        if (c && id && !strcmp(c, text)) return id->valuedouble;
    }
    const cJSON *vocab = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(tok_json, "model"), "vocab");
    const cJSON *id = cJSON_IsObject(vocab) ? obj_num(vocab, text) : NULL;
    return id ? id->valuedouble : -1;
}

/* Appends the non-negative integer ids of an int-or-list value; returns how many. */
static int add_ids(cJSON *arr, const cJSON *v) {
    int n = 0;
    if (cJSON_IsNumber(v) && v->valuedouble >= 0) {
        cJSON_AddItemToArray(arr, cJSON_CreateNumber(v->valuedouble));
        return 1;
    }
    for (const cJSON *e = cJSON_IsArray(v) ? v->child : NULL; e; e = e->next)
        if (cJSON_IsNumber(e) && e->valuedouble >= 0) {
            cJSON_AddItemToArray(arr, cJSON_CreateNumber(e->valuedouble));
            n++;
        }
    return n;
}

/* A single id: generation_config, else config (or its text_config), else the token string of tokenizer_config. */
static double single_id(const char *key, const char *tok_key, const cJSON *config, const cJSON *gen,
                        const cJSON *tok_cfg, const cJSON *tok_json) {
    const cJSON *v = obj_num(gen, key);
    if (!v) v = obj_num(config, key);
    if (!v) v = obj_num(cJSON_GetObjectItemCaseSensitive(config, "text_config"), key);
    if (v && v->valuedouble >= 0) return v->valuedouble;
    return resolve_token(token_text(cJSON_GetObjectItemCaseSensitive(tok_cfg, tok_key)), tok_cfg, tok_json);
}

/* chat_template of tokenizer_config: a string, or a list of {name, template} (the "default" one, else the first). */
static const char *config_template(const cJSON *tok_cfg) {
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(tok_cfg, "chat_template");
    if (cJSON_IsString(t)) return t->valuestring;
    const char *first = NULL;
    for (const cJSON *e = cJSON_IsArray(t) ? t->child : NULL; e; e = e->next) {
        const cJSON *nm = cJSON_GetObjectItemCaseSensitive(e, "name"), *tp = cJSON_GetObjectItemCaseSensitive(e, "template");
        if (!cJSON_IsString(tp)) continue;
        if (cJSON_IsString(nm) && !strcmp(nm->valuestring, "default")) return tp->valuestring;
        if (!first) first = tp->valuestring;
    }
    return first;
}

cmf_status cmf_hf_tokenizer_config(const cJSON *config, const cJSON *gen, const cJSON *tok_cfg, const cJSON *tok_json,
                                   const char *template_file, cJSON **out) {
    cJSON *tc = cJSON_CreateObject();
    if (!tc) return cmf_err(CMF_E_NOMEM, "out of memory");
    const char *tpl = config_template(tok_cfg);
    if (!tpl) tpl = template_file;
    if (tpl) cJSON_AddStringToObject(tc, "chat_template", tpl);
    cJSON *eos = cJSON_AddArrayToObject(tc, "eos_token_ids");
    if (!add_ids(eos, cJSON_GetObjectItemCaseSensitive(gen, "eos_token_id")) &&
        !add_ids(eos, cJSON_GetObjectItemCaseSensitive(config, "eos_token_id")) &&
        !add_ids(eos, cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(config, "text_config"),
                                                       "eos_token_id"))) {
        double id = resolve_token(token_text(cJSON_GetObjectItemCaseSensitive(tok_cfg, "eos_token")), tok_cfg, tok_json);
        if (id >= 0) cJSON_AddItemToArray(eos, cJSON_CreateNumber(id));
    }
    double bos = single_id("bos_token_id", "bos_token", config, gen, tok_cfg, tok_json);
    if (bos >= 0) cJSON_AddNumberToObject(tc, "bos_token_id", bos);
    double pad = single_id("pad_token_id", "pad_token", config, gen, tok_cfg, tok_json);
    if (pad >= 0) cJSON_AddNumberToObject(tc, "pad_token_id", pad);
    *out = tc;
    return CMF_OK;
}
