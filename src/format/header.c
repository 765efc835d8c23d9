/* header.c — the header JSON (CMF_FORMAT.md §1.4): parse with cJSON and check every key the reference's strict
 * struct requires (missing keys, wrong types and unknown enum strings fail open; unknown keys are ignored;
 * optional keys may be null). Messages read "header@0x80: arch.hidden_size: ...". */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <utf8proc.h>

#include "format/format.h"
#include "util/error.h"

typedef enum { J_U32, J_U64, J_INT, J_NUM, J_STR, J_BOOL, J_OBJ, J_ARR } jkind;

static const char *kind_name(jkind k) {
    switch (k) {
    case J_U32: return "an unsigned 32-bit integer";
    case J_U64: return "an unsigned integer";
    case J_INT: return "an integer";
    case J_NUM: return "a number";
    case J_STR: return "a string";
    case J_BOOL: return "a boolean";
    case J_OBJ: return "an object";
    case J_ARR: return "an array";
    }
    return "?";
}

static const char *json_type(const cJSON *j) {
    if (cJSON_IsNull(j)) return "null";
    if (cJSON_IsBool(j)) return "boolean";
    if (cJSON_IsNumber(j)) return "number";
    if (cJSON_IsString(j)) return "string";
    if (cJSON_IsArray(j)) return "array";
    if (cJSON_IsObject(j)) return "object";
    return "invalid";
}

static int is_kind(const cJSON *j, jkind k) {
    double d;
    switch (k) {
    case J_U32:
    case J_U64:
    case J_INT:
        if (!cJSON_IsNumber(j)) return 0;
        d = j->valuedouble;
        if (!isfinite(d) || d != floor(d)) return 0;
        if (k == J_INT) return fabs(d) <= 9.3e18;
        if (d < 0) return 0;
        return k == J_U32 ? d <= 4294967295.0 : d < 18446744073709551616.0;
    case J_NUM: return cJSON_IsNumber(j);
    case J_STR: return cJSON_IsString(j) && j->valuestring;
    case J_BOOL: return cJSON_IsBool(j);
    case J_OBJ: return cJSON_IsObject(j);
    case J_ARR: return cJSON_IsArray(j);
    }
    return 0;
}

/* Looks up obj[key] (exact, case-sensitive). required: missing or null is an error; optional: missing or null
 * gives *out = NULL. A present value of the wrong kind is an error either way. */
static cmf_status field(const cJSON *obj, const char *path, const char *key, jkind k, int required,
                        uint64_t off, const cJSON **out) {
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(obj, key);
    *out = NULL;
    if (!j || cJSON_IsNull(j)) {
        if (!required) return CMF_OK;
        return cmf_err(CMF_E_FORMAT, "header@0x%llx: %s%s: missing required key (%s)", (unsigned long long)off,
                       path, key, kind_name(k));
    }
    if (!is_kind(j, k))
        return cmf_err(CMF_E_FORMAT, "header@0x%llx: %s%s: expected %s, got %s", (unsigned long long)off, path, key,
                       kind_name(k), json_type(j));
    *out = j;
    return CMF_OK;
}

/* A string field whose value must be one of `allowed` (NULL-terminated list). */
static cmf_status enum_field(const cJSON *obj, const char *path, const char *key, int required,
                             const char *const *allowed, uint64_t off) {
    const cJSON *j;
    cmf_status st = field(obj, path, key, J_STR, required, off, &j);
    if (st || !j) return st;
    for (const char *const *a = allowed; *a; a++)
        if (strcmp(j->valuestring, *a) == 0) return CMF_OK;
    return cmf_err(CMF_E_FORMAT, "header@0x%llx: %s%s: unknown value \"%.64s\"", (unsigned long long)off, path, key,
                   j->valuestring);
}

static cmf_status fields(const cJSON *obj, const char *path, const char *const *keys, jkind k, int required,
                         uint64_t off) {
    const cJSON *j;
    for (const char *const *key = keys; *key; key++) {
        cmf_status st = field(obj, path, *key, k, required, off, &j);
        if (st) return st;
    }
    return CMF_OK;
}

static const char *const k_quant_types[] = {"Q8_ROW", "Q4_BLOCK", "Q8_2F", "VBIT", "BF16", "F16", "F32", NULL};
static const char *const k_layer_types[] = {"FullAttention", "SlidingAttention", "LinearAttention", "ShortConv",
                                            "Kda", NULL};
static const char *const k_norm_styles[] = {"qwen", "gemma", NULL};
static const char *const k_acts[] = {"silu", "gelu_tanh", "situ", NULL};
static const char *const k_linear_kinds[] = {"gated_delta_net", "vmf_phase", NULL};

static cmf_status check_arch(const cJSON *arch, uint64_t off) {
    static const char *const req_uint[] = {"hidden_size", "intermediate_size", "num_layers", "num_attention_heads",
                                           "num_kv_heads", "head_dim", "vocab_size", NULL};
    static const char *const opt_num[] = {"rope_theta", "partial_rotary_factor", "embed_multiplier",
                                          "query_pre_attn_scalar", "rope_local_base_freq",
                                          "local_partial_rotary_factor", "global_partial_rotary_factor",
                                          "final_logit_softcapping", "attn_logit_softcapping", "logit_multiplier",
                                          "kda_gate_lower_bound", NULL};
    static const char *const opt_uint[] = {"num_loops", "sliding_window", "sliding_window_pattern",
                                           "global_head_dim", "num_global_kv_heads", "head_clusters",
                                           "linear_conv_kernel_dim", "linear_num_key_heads",
                                           "linear_num_value_heads", "linear_key_head_dim",
                                           "linear_value_head_dim", NULL};
    static const char *const opt_bool[] = {"tie_word_embeddings", "attn_v_norm", "loop_final_norm", NULL};
    const char *P = "arch.";
    const cJSON *j;
    cmf_status st;
    if ((st = field(arch, P, "arch_name", J_STR, 1, off, &j))) return st;
    if ((st = fields(arch, P, req_uint, J_U64, 1, off))) return st;
    if ((st = field(arch, P, "rms_norm_eps", J_NUM, 1, off, &j))) return st;
    if ((st = field(arch, P, "max_position_embeddings", J_INT, 1, off, &j))) return st;
    if ((st = field(arch, P, "layer_types", J_ARR, 1, off, &j))) return st;
    int i = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, j) {
        int ok = 0;
        if (cJSON_IsString(e))
            for (const char *const *a = k_layer_types; *a && !ok; a++) ok = strcmp(e->valuestring, *a) == 0;
        if (!ok)
            return cmf_err(CMF_E_FORMAT, "header@0x%llx: arch.layer_types[%d]: %s is not one of FullAttention, "
                           "SlidingAttention, LinearAttention, ShortConv, Kda", (unsigned long long)off, i,
                           cJSON_IsString(e) ? "unknown string" : json_type(e));
        i++;
    }
    if ((st = enum_field(arch, P, "norm_style", 0, k_norm_styles, off))) return st;
    if ((st = enum_field(arch, P, "hidden_act", 0, k_acts, off))) return st;
    if ((st = fields(arch, P, opt_num, J_NUM, 0, off))) return st;
    if ((st = fields(arch, P, opt_uint, J_U64, 0, off))) return st;
    if ((st = fields(arch, P, opt_bool, J_BOOL, 0, off))) return st;
    if ((st = field(arch, P, "attention_heads_per_layer", J_ARR, 0, off, &j))) return st;
    i = 0;
    cJSON_ArrayForEach(e, j) {
        if (!is_kind(e, J_U64))
            return cmf_err(CMF_E_FORMAT, "header@0x%llx: arch.attention_heads_per_layer[%d]: expected an unsigned "
                           "integer, got %s", (unsigned long long)off, i, json_type(e));
        i++;
    }
    if ((st = field(arch, P, "moe", J_OBJ, 0, off, &j))) return st;
    if (j) {
        static const char *const moe_req[] = {"num_experts", "top_k", "moe_intermediate_size", NULL};
        if ((st = fields(j, "arch.moe.", moe_req, J_U64, 1, off))) return st;
    }
    if ((st = field(arch, P, "mtp", J_OBJ, 0, off, &j))) return st;
    if (j) {
        const cJSON *x;
        if ((st = field(j, "arch.mtp.", "num_layers", J_U64, 1, off, &x))) return st;
    }
    if ((st = field(arch, P, "mla", J_OBJ, 0, off, &j))) return st;
    if (j) {
        static const char *const mla_req[] = {"kv_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim",
                                              NULL};
        if ((st = fields(j, "arch.mla.", mla_req, J_U64, 1, off))) return st;
    }
    if ((st = field(arch, P, "yarn", J_OBJ, 0, off, &j))) return st;
    if (j) {
        const cJSON *x;
        if ((st = field(j, "arch.yarn.", "factor", J_NUM, 1, off, &x))) return st;
        if ((st = field(j, "arch.yarn.", "original_max_position_embeddings", J_U64, 1, off, &x))) return st;
    }
    if ((st = field(arch, P, "linear_core", J_OBJ, 0, off, &j))) return st;
    if (j) {
        const cJSON *x;
        if ((st = enum_field(j, "arch.linear_core.", "kind", 1, k_linear_kinds, off))) return st;
        if ((st = field(j, "arch.linear_core.", "num_heads", J_U64, 1, off, &x))) return st;
        if ((st = field(j, "arch.linear_core.", "value_head_dim", J_U64, 1, off, &x))) return st;
    }
    return CMF_OK;
}

static int is_hex16(const char *s) {
    if (strlen(s) != 16) return 0;
    for (int i = 0; i < 16; i++) {
        char c = s[i];
        if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'))) return 0;
    }
    return 1;
}

cmf_status cmf_header_check(const cJSON *h, uint64_t off) {
    const cJSON *j, *e;
    cmf_status st;
    if (!cJSON_IsObject(h))
        return cmf_err(CMF_E_FORMAT, "header@0x%llx: the header must be a JSON object, got %s",
                       (unsigned long long)off, json_type(h));
    if ((st = field(h, "", "version", J_U32, 1, off, &j))) return st;
    if ((st = field(h, "", "arch", J_OBJ, 1, off, &j))) return st;
    if ((st = check_arch(j, off))) return st;
    if ((st = enum_field(h, "", "quant_type", 1, k_quant_types, off))) return st;
    if ((st = field(h, "", "format", J_STR, 0, off, &j))) return st;

    if ((st = field(h, "", "tokenizer_config", J_OBJ, 0, off, &j))) return st;
    if (j) {
        const cJSON *x;
        if ((st = field(j, "tokenizer_config.", "chat_template", J_STR, 0, off, &x))) return st;
        if ((st = field(j, "tokenizer_config.", "bos_token_id", J_U32, 0, off, &x))) return st;
        if ((st = field(j, "tokenizer_config.", "pad_token_id", J_U32, 0, off, &x))) return st;
        if ((st = field(j, "tokenizer_config.", "eos_token_ids", J_ARR, 0, off, &x))) return st;
        int i = 0;
        cJSON_ArrayForEach(e, x) {
            if (!is_kind(e, J_U32))
                return cmf_err(CMF_E_FORMAT, "header@0x%llx: tokenizer_config.eos_token_ids[%d]: expected an "
                               "unsigned 32-bit integer, got %s", (unsigned long long)off, i, json_type(e));
            i++;
        }
    }

    if ((st = field(h, "", "section_hashes", J_OBJ, 0, off, &j))) return st;
    if (j) {
        static const char *const keys[] = {"masks", "vocab", "index", NULL};
        for (const char *const *k = keys; *k; k++) {
            const cJSON *x;
            if ((st = field(j, "section_hashes.", *k, J_STR, 0, off, &x))) return st;
            if (x && !is_hex16(x->valuestring))
                return cmf_err(CMF_E_FORMAT, "header@0x%llx: section_hashes.%s: \"%.40s\" is not 16 hex digits",
                               (unsigned long long)off, *k, x->valuestring);
        }
    }

    if ((st = field(h, "", "skills", J_ARR, 0, off, &j))) return st;
    int i = 0;
    cJSON_ArrayForEach(e, j) {
        char path[48];
        const cJSON *x;
        snprintf(path, sizeof path, "skills[%d].", i);
        if (!cJSON_IsObject(e))
            return cmf_err(CMF_E_FORMAT, "header@0x%llx: skills[%d]: expected an object, got %s",
                           (unsigned long long)off, i, json_type(e));
        if ((st = field(e, path, "id", J_STR, 1, off, &x))) return st;
        if ((st = field(e, path, "selection", J_OBJ, 0, off, &x))) return st;
        if (x) {
            static const char *const sel_req[] = {"phi_layer", "rank", NULL};
            char sp[64];
            const cJSON *y;
            snprintf(sp, sizeof sp, "skills[%d].selection.", i);
            if ((st = fields(x, sp, sel_req, J_U64, 1, off))) return st;
            if ((st = field(x, sp, "metric", J_STR, 1, off, &y))) return st;
            if ((st = field(x, sp, "mean", J_STR, 1, off, &y))) return st;
            if ((st = field(x, sp, "basis", J_STR, 1, off, &y))) return st;
        }
        i++;
    }

    if ((st = field(h, "", "shard", J_OBJ, 0, off, &j))) return st;
    if (j) {
        static const char *const req[] = {"no", "count", NULL};
        if ((st = fields(j, "shard.", req, J_U32, 1, off))) return st;
    }
    if ((st = field(h, "", "calibration", J_OBJ, 0, off, &j))) return st;
    if (j) {
        const cJSON *x;
        if ((st = field(j, "calibration.", "temperature", J_NUM, 1, off, &x))) return st;
    }
    if ((st = field(h, "", "routing", J_OBJ, 0, off, &j))) return st;
    if (j) {
        static const char *const req[] = {"temperature", "novelty_theta", "samples", "target_fpr", NULL};
        if ((st = fields(j, "routing.", req, J_NUM, 1, off))) return st;
    }
    return CMF_OK;
}

size_t cmf_utf8_invalid_at(const uint8_t *p, size_t len) {
    size_t i = 0;
    while (i < len) {
        if (p[i] < 0x80) {
            i++;
            continue;
        }
        utf8proc_int32_t cp;
        size_t left = len - i;
        utf8proc_ssize_t k = utf8proc_iterate(p + i, left > 8 ? 8 : (utf8proc_ssize_t)left, &cp);
        if (k <= 0 || cp < 0) return i;
        i += (size_t)k;
    }
    return len;
}

cmf_status cmf_header_parse(const uint8_t *p, uint64_t len, uint64_t off, cJSON **out) {
    *out = NULL;
    size_t bad = cmf_utf8_invalid_at(p, len);
    if (bad != len)
        return cmf_err(CMF_E_FORMAT, "header@0x%llx: invalid UTF-8 at header byte %zu", (unsigned long long)off, bad);
    const char *end = NULL;
    cJSON *h = cJSON_ParseWithLengthOpts((const char *)p, len, &end, 0);
    if (!h) {
        size_t at = end && end >= (const char *)p ? (size_t)(end - (const char *)p) : 0;
        return cmf_err(CMF_E_FORMAT, "header@0x%llx: malformed JSON near header byte %zu (header_len %llu)",
                       (unsigned long long)off, at, (unsigned long long)len);
    }
    for (size_t i = (size_t)(end - (const char *)p); i < len; i++) {
        char c = (char)p[i];
        if (c != ' ' && c != '\t' && c != '\n' && c != '\r') {
            cJSON_Delete(h);
            return cmf_err(CMF_E_FORMAT, "header@0x%llx: trailing data after the JSON value at header byte %zu",
                           (unsigned long long)off, i);
        }
    }
    cmf_status st = cmf_header_check(h, off);
    if (st) {
        cJSON_Delete(h);
        return st;
    }
    *out = h;
    return CMF_OK;
}

int cmf_header_set_tool(cJSON *h, const char *tool) {
    if (!cJSON_IsObject(h) || !tool) return 0;
    cJSON *prov = cJSON_GetObjectItemCaseSensitive(h, "provenance");
    if (!prov) prov = cJSON_AddObjectToObject(h, "provenance");
    if (!cJSON_IsObject(prov)) return prov != NULL; /* free-form provenance of another shape: left as it is */
    cJSON *v = cJSON_CreateString(tool);
    if (!v) return 0;
    if (cJSON_GetObjectItemCaseSensitive(prov, "tool")) return cJSON_ReplaceItemInObjectCaseSensitive(prov, "tool", v);
    return cJSON_AddItemToObject(prov, "tool", v);
}
