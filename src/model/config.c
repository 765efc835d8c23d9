/* config.c — the model's hyperparameters from the CMF header `arch` object (CMF_FORMAT.md §1.4, §5.2, and our
 * extension keys documented in docs/HEADER_KEYS.md), validated before any tensor is touched. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/model.h"
#include "util/error.h"

static cmf_status get_int(const cJSON *o, const char *key, int required, int def, int lo, int hi, int *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!v || cJSON_IsNull(v)) {
        if (required) return cmf_err(CMF_E_FORMAT, "header: arch.%s is missing", key);
        *out = def;
        return CMF_OK;
    }
    if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble))
        return cmf_err(CMF_E_FORMAT, "header: arch.%s is not an integer", key);
    if (v->valuedouble < lo || v->valuedouble > hi)
        return cmf_err(CMF_E_FORMAT, "header: arch.%s = %.0f is out of range [%d, %d]", key, v->valuedouble, lo, hi);
    *out = (int)v->valuedouble;
    return CMF_OK;
}

static cmf_status get_float(const cJSON *o, const char *key, double def, double *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!v || cJSON_IsNull(v)) {
        *out = def;
        return CMF_OK;
    }
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble))
        return cmf_err(CMF_E_FORMAT, "header: arch.%s is not a finite number", key);
    *out = v->valuedouble;
    return CMF_OK;
}

#define TRY(x)                                                                                                   \
    do {                                                                                                         \
        cmf_status st_ = (x);                                                                                    \
        if (st_ != CMF_OK) return st_;                                                                           \
    } while (0)

/* arch.yarn (CMF_FORMAT.md §1.4): {factor, original_max_position_embeddings, beta_fast = 32, beta_slow = 1,
 * attention_factor = 1, truncate = true (transformers' key)}. The attention factor multiplies cos and sin, so every
 * score q.k of the rotated dims by its square: folded into attn_scale, exact when all dims rotate. */
static cmf_status parse_yarn(const cJSON *a, cmf_config *c) {
    const cJSON *y = cJSON_GetObjectItemCaseSensitive(a, "yarn");
    if (!y || cJSON_IsNull(y)) return CMF_OK;
    if (!cJSON_IsObject(y)) return cmf_err(CMF_E_FORMAT, "header: arch.yarn is not an object");
    if (c->rope_factor > 0) return cmf_err(CMF_E_FORMAT, "header: arch.yarn together with arch.rope_scaling");
    double f = 0, bf = 0, bs = 0, af = 0;
    int orig = 0;
    const cJSON *fv = cJSON_GetObjectItemCaseSensitive(y, "factor");
    if (!cJSON_IsNumber(fv)) return cmf_err(CMF_E_FORMAT, "header: arch.yarn.factor is missing or not a number");
    TRY(get_float(y, "factor", 0, &f));
    TRY(get_float(y, "beta_fast", 32.0, &bf));
    TRY(get_float(y, "beta_slow", 1.0, &bs));
    TRY(get_float(y, "attention_factor", 1.0, &af));
    TRY(get_int(y, "original_max_position_embeddings", 1, 0, 1, 1 << 30, &orig));
    if (!(f >= 1 && f <= 1e6))
        return cmf_err(CMF_E_FORMAT, "header: arch.yarn.factor = %g is out of range [1, 1e6]", f);
    if (!(bf > 0 && bs > 0 && bf <= 1e6 && bs <= 1e6))
        return cmf_err(CMF_E_FORMAT, "header: arch.yarn.beta_fast = %g / beta_slow = %g must be in (0, 1e6]", bf, bs);
    if (!(af > 0 && af <= 100))
        return cmf_err(CMF_E_FORMAT, "header: arch.yarn.attention_factor = %g is out of range (0, 100]", af);
    const cJSON *tr = cJSON_GetObjectItemCaseSensitive(y, "truncate");
    if (tr && !cJSON_IsNull(tr) && !cJSON_IsBool(tr))
        return cmf_err(CMF_E_FORMAT, "header: arch.yarn.truncate is not a boolean");
    if (af != 1.0 && c->rot_dim != c->head_dim)
        return cmf_err(CMF_E_UNSUPPORTED, "header: arch.yarn.attention_factor %g with partial rotary dims (%d of %d) "
                       "is not supported", af, c->rot_dim, c->head_dim);
    if (af != 1.0 && c->local_rope_unscaled)
        return cmf_err(CMF_E_UNSUPPORTED, "header: arch.yarn.attention_factor with a separate local RoPE base "
                       "(rope_local_base_freq) is not supported");
    c->yarn_factor = (float)f;
    c->yarn_beta_fast = (float)bf;
    c->yarn_beta_slow = (float)bs;
    c->yarn_attention_factor = (float)af;
    c->yarn_original_max_pos = orig;
    c->yarn_truncate = !cJSON_IsFalse(tr);
    c->attn_scale = (float)((double)c->attn_scale * af * af);
    return CMF_OK;
}

cmf_status cmf_config_from_header(const cJSON *header, cmf_config *c) {
    memset(c, 0, sizeof *c);
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(header, "arch");
    if (!cJSON_IsObject(a)) return cmf_err(CMF_E_FORMAT, "header: arch is missing or not an object");
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(a, "arch_name");
    if (!cJSON_IsString(name)) return cmf_err(CMF_E_FORMAT, "header: arch.arch_name is missing");
    snprintf(c->arch_name, sizeof c->arch_name, "%s", name->valuestring);

    const int BIG = 1 << 24;
    TRY(get_int(a, "hidden_size", 1, 0, 1, BIG, &c->hidden_size));
    TRY(get_int(a, "intermediate_size", 1, 0, 0, BIG, &c->intermediate_size));
    TRY(get_int(a, "num_layers", 1, 0, 1, CMF_MAX_LAYERS, &c->n_layers));
    TRY(get_int(a, "num_attention_heads", 1, 0, 1, 65536, &c->n_heads));
    TRY(get_int(a, "num_kv_heads", 1, 0, 1, 65536, &c->n_kv_heads));
    TRY(get_int(a, "head_dim", 1, 0, 1, 65536, &c->head_dim));
    TRY(get_int(a, "vocab_size", 1, 0, 1, 1 << 30, &c->vocab_size));
    TRY(get_int(a, "max_position_embeddings", 1, 0, 1, 1 << 30, &c->max_position_embeddings));
    /* the fused q/k/v row count (n_heads + 2 n_kv_heads) x head_dim is formed in int by the loader and backends */
    if ((long long)(c->n_heads + 2LL * c->n_kv_heads) * c->head_dim > (1LL << 30))
        return cmf_err(CMF_E_FORMAT, "header: (num_attention_heads %d + 2 x num_kv_heads %d) x head_dim %d is over 2^30",
                       c->n_heads, c->n_kv_heads, c->head_dim);
    if (c->n_heads % c->n_kv_heads != 0)
        return cmf_err(CMF_E_FORMAT, "header: num_attention_heads %d is not a multiple of num_kv_heads %d",
                       c->n_heads, c->n_kv_heads);

    double eps = 0, theta = 0, prf = 0, emb = 0, qpas = 0, cap_a = 0, cap_f = 0, local_theta = 0;
    TRY(get_float(a, "rms_norm_eps", 1e-6, &eps));
    TRY(get_float(a, "rope_theta", 10000.0, &theta));
    TRY(get_float(a, "partial_rotary_factor", 1.0, &prf));
    TRY(get_float(a, "embed_multiplier", 1.0, &emb));
    TRY(get_float(a, "query_pre_attn_scalar", 0.0, &qpas));
    TRY(get_float(a, "attn_logit_softcapping", 0.0, &cap_a));
    TRY(get_float(a, "final_logit_softcapping", 0.0, &cap_f));
    TRY(get_float(a, "rope_local_base_freq", theta, &local_theta));
    if (!(eps >= 0) || !(theta > 0) || !(prf > 0 && prf <= 1) || !(local_theta > 0) || qpas < 0 || cap_a < 0 ||
        cap_f < 0)
        return cmf_err(CMF_E_FORMAT, "header: arch has an out-of-range rms_norm_eps, rope_theta, "
                                     "partial_rotary_factor, query_pre_attn_scalar or softcapping value");
    c->rms_norm_eps = (float)eps;
    c->rope_theta = (float)theta;
    c->rope_local_theta = (float)local_theta;
    c->rot_dim = (int)floor(c->head_dim * prf);
    if (c->rot_dim < 2) c->rot_dim = 2;
    c->rot_dim &= ~1;
    if (c->rot_dim > c->head_dim) c->rot_dim = c->head_dim & ~1;
    c->embed_multiplier = (float)emb;
    c->attn_scale = (float)(1.0 / sqrt(qpas > 0 ? qpas : (double)c->head_dim));
    c->attn_softcap = (float)cap_a;
    c->final_softcap = (float)cap_f;

    const cJSON *ns = cJSON_GetObjectItemCaseSensitive(a, "norm_style");
    if (ns && !cJSON_IsNull(ns)) {
        if (!cJSON_IsString(ns)) return cmf_err(CMF_E_FORMAT, "header: arch.norm_style is not a string");
        if (!strcmp(ns->valuestring, "gemma")) c->gemma_norm = 1;
        else if (strcmp(ns->valuestring, "qwen") != 0)
            return cmf_err(CMF_E_FORMAT, "header: arch.norm_style '%s' is unknown", ns->valuestring);
    }
    const cJSON *act = cJSON_GetObjectItemCaseSensitive(a, "hidden_act");
    if (act && !cJSON_IsNull(act)) {
        if (!cJSON_IsString(act)) return cmf_err(CMF_E_FORMAT, "header: arch.hidden_act is not a string");
        if (!strcmp(act->valuestring, "silu")) c->act = CMF_ACT_SILU;
        else if (!strcmp(act->valuestring, "gelu_tanh")) c->act = CMF_ACT_GELU_TANH;
        else return cmf_err(CMF_E_UNSUPPORTED, "header: arch.hidden_act '%s' is not supported", act->valuestring);
    }
    const cJSON *rp = cJSON_GetObjectItemCaseSensitive(a, "rope_pairing");
    if (rp && !cJSON_IsNull(rp)) {
        if (cJSON_IsString(rp) && !strcmp(rp->valuestring, "interleaved")) c->rope_pairing = CMF_ROPE_INTERLEAVED;
        else if (cJSON_IsString(rp) && !strcmp(rp->valuestring, "half")) c->rope_pairing = CMF_ROPE_HALF;
        else return cmf_err(CMF_E_FORMAT, "header: arch.rope_pairing must be \"half\" or \"interleaved\"");
    }
    const cJSON *tie = cJSON_GetObjectItemCaseSensitive(a, "tie_word_embeddings");
    c->tie_word_embeddings = cJSON_IsTrue(tie);

    const cJSON *rs = cJSON_GetObjectItemCaseSensitive(a, "rope_scaling");
    if (cJSON_IsObject(rs)) {
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(rs, "rope_type");
        if (!type) type = cJSON_GetObjectItemCaseSensitive(rs, "type");
        double f = 0, lo = 0, hi = 0;
        int orig = 0;
        TRY(get_float(rs, "factor", 1.0, &f));
        if (!(f > 0)) return cmf_err(CMF_E_FORMAT, "header: arch.rope_scaling.factor must be > 0");
        if (cJSON_IsString(type) && !strcmp(type->valuestring, "llama3")) {
            TRY(get_float(rs, "low_freq_factor", 1.0, &lo));
            TRY(get_float(rs, "high_freq_factor", 4.0, &hi));
            TRY(get_int(rs, "original_max_position_embeddings", 1, 0, 1, 1 << 30, &orig));
            if (!(hi > lo)) return cmf_err(CMF_E_FORMAT, "header: rope_scaling high_freq_factor <= low_freq_factor");
            c->rope_scaling_llama3 = 1;
            c->rope_low_freq_factor = (float)lo;
            c->rope_high_freq_factor = (float)hi;
            c->rope_original_max_pos = orig;
            c->rope_factor = (float)f;
        } else if (cJSON_IsString(type) && !strcmp(type->valuestring, "linear")) {
            c->rope_factor = (float)f;
        } else if (!(cJSON_IsString(type) && !strcmp(type->valuestring, "default"))) {
            return cmf_err(CMF_E_UNSUPPORTED, "header: arch.rope_scaling type '%s' is not supported",
                           cJSON_IsString(type) ? type->valuestring : "?");
        }
    }

    /* Gemma 3's local layers use plain RoPE with rope_local_base_freq (transformers: rotary_emb_local has no
     * rope_scaling); every other model applies its scaling to all layers. */
    c->local_rope_unscaled = cJSON_GetObjectItemCaseSensitive(a, "rope_local_base_freq") != NULL;
    TRY(parse_yarn(a, c));

    const cJSON *lt = cJSON_GetObjectItemCaseSensitive(a, "layer_types");
    if (!cJSON_IsArray(lt)) return cmf_err(CMF_E_FORMAT, "header: arch.layer_types is missing");
    c->is_sliding = calloc((size_t)c->n_layers, 1);
    if (!c->is_sliding) return cmf_err(CMF_E_NOMEM, "config: out of memory");
    int n_lt = cJSON_GetArraySize(lt);
    if (n_lt != 0 && n_lt != c->n_layers) {
        cmf_config_free(c);
        return cmf_err(CMF_E_FORMAT, "header: arch.layer_types has %d entries for %d layers", n_lt, c->n_layers);
    }
    int any_sliding = 0;
    for (int i = 0; i < n_lt; i++) {
        const cJSON *e = cJSON_GetArrayItem(lt, i);
        if (!cJSON_IsString(e)) {
            cmf_config_free(c);
            return cmf_err(CMF_E_FORMAT, "header: arch.layer_types[%d] is not a string", i);
        }
        if (!strcmp(e->valuestring, "SlidingAttention")) c->is_sliding[i] = any_sliding = 1;
        else if (strcmp(e->valuestring, "FullAttention") != 0) {
            cmf_config_free(c);
            return cmf_err(CMF_E_UNSUPPORTED, "header: layer %d type '%s' is not supported by this runtime", i,
                           e->valuestring);
        }
    }
    cmf_status st = get_int(a, "sliding_window", 0, 0, 0, 1 << 30, &c->sliding_window);
    if (st != CMF_OK) {
        cmf_config_free(c);
        return st;
    }
    /* sliding_window_pattern P: layer i is global when (i+1) % P == 0 (used when layer_types says nothing). */
    int pattern = 0;
    if (get_int(a, "sliding_window_pattern", 0, 0, 0, 1 << 20, &pattern) == CMF_OK && pattern > 0 && !any_sliding &&
        c->sliding_window > 0) {
        for (int i = 0; i < c->n_layers; i++) c->is_sliding[i] = (i + 1) % pattern != 0;
        any_sliding = 1;
    }
    if (any_sliding && c->sliding_window <= 0) {
        cmf_config_free(c);
        return cmf_err(CMF_E_FORMAT, "header: SlidingAttention layers need arch.sliding_window");
    }
    return CMF_OK;
}

void cmf_config_free(cmf_config *c) {
    free(c->is_sliding);
    c->is_sliding = NULL;
}

/* YaRN's dimension whose wavelength turns n_rot times over the original window (transformers
 * find_correction_dim; the YaRN paper, Peng et al. 2023, eq. 17). */
static double yarn_corr_dim(double n_rot, int dim, double base, int orig) {
    return dim * log(orig / (n_rot * 2 * 3.141592653589793)) / (2 * log(base));
}

void cmf_rope_inv_freq(const cmf_config *c, float theta, int scaled, float *inv_freq) {
    const int half = c->rot_dim / 2;
    double lo = 0, hi = 0;
    if (scaled && c->yarn_factor > 0) {
        /* transformers _compute_yarn_parameters: the ramp runs over dims [low, high] (floored / ceiled unless
         * truncate is false), clamped to [0, rot_dim - 1]. */
        lo = yarn_corr_dim(c->yarn_beta_fast, c->rot_dim, theta, c->yarn_original_max_pos);
        hi = yarn_corr_dim(c->yarn_beta_slow, c->rot_dim, theta, c->yarn_original_max_pos);
        if (c->yarn_truncate) lo = floor(lo), hi = ceil(hi);
        if (lo < 0) lo = 0;
        if (hi > c->rot_dim - 1) hi = c->rot_dim - 1;
        if (lo == hi) hi += 0.001;
    }
    for (int i = 0; i < half; i++) {
        /* As HF: 1 / theta^(2i/rot), the exponent computed in float. */
        double f = 1.0 / pow((double)theta, (double)(float)(2.0 * i / c->rot_dim));
        if (scaled && c->yarn_factor > 0) {
            /* Extrapolated (original) frequencies where the ramp is 0, interpolated (f / factor) where it is 1. */
            double ramp = (i - lo) / (hi - lo);
            ramp = ramp < 0 ? 0 : ramp > 1 ? 1 : ramp;
            f = f / c->yarn_factor * ramp + f * (1 - ramp);
        } else if (scaled && c->rope_scaling_llama3) {
            /* Llama 3.1 (transformers _compute_llama3_parameters): long wavelengths are divided by factor,
             * short ones kept, the band between smoothly interpolated. */
            const double two_pi = 6.283185307179586;
            double low_wl = c->rope_original_max_pos / c->rope_low_freq_factor;
            double high_wl = c->rope_original_max_pos / c->rope_high_freq_factor;
            double wl = two_pi / f;
            if (wl > low_wl) {
                f = f / c->rope_factor;
            } else if (wl >= high_wl) {
                double smooth = (c->rope_original_max_pos / wl - c->rope_low_freq_factor) /
                                (c->rope_high_freq_factor - c->rope_low_freq_factor);
                f = (1 - smooth) * f / c->rope_factor + smooth * f;
            }
        } else if (scaled && c->rope_factor > 0) {
            f = f / c->rope_factor;
        }
        inv_freq[i] = (float)f;
    }
}
