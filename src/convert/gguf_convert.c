/* gguf_convert.c — cmf_convert_gguf: a GGUF of architecture llama, qwen2 or qwen3 (tensors F32, F16, BF16, Q8_0,
 * Q4_0, Q4_1, Q5_0, Q5_1, Q2_K..Q6_K, Q8_K, IQ4_NL, IQ4_XS) -> CMF v2.
 *
 * Metadata <arch>.* -> header.arch (llama.cpp's key names: embedding_length, feed_forward_length, block_count,
 * attention.head_count[_kv], attention.key_length, attention.layer_norm_rms_epsilon, rope.freq_base,
 * rope.dimension_count, context_length). Tensors are renamed to the HF names (§5.1; qwen2's attn_{q,k,v}.bias ->
 * self_attn.{q,k,v}_proj.bias, qwen3's attn_{q,k}_norm -> self_attn.{q,k}_norm) and reshaped from ggml's
 * innermost-first ne[] to the row-major CMF shape [ne1, ne0].
 *
 * RoPE pairing (arch.rope_pairing, docs/HEADER_KEYS.md): llama.cpp's converter permutes the Q/K rows of HF llama
 * checkpoints into the interleaved pairing (2i, 2i+1) its LLAMA_ROPE_TYPE_NORM kernel uses (llama2.c checkpoints
 * have it natively), so llama GGUFs get "interleaved". qwen2/qwen3 run with LLAMA_ROPE_TYPE_NEOX (HF rotate-half,
 * pairs (i, i + rot/2)) and their Q/K are written unpermuted, so they get "half". Weights are never permuted here.
 *
 * Tensor dtypes: F32/F16/BF16 are decoded to f32 and stored with the usual policy for opts->quant (emit.h).
 * Q4_0 2-D tensors are repacked losslessly into q4_tiled (same f16 scale and nibbles; only the nibble order inside
 * a block differs) when the user gave no --quant (opts->quant_auto) or asked for q4 / q4t: every decoded value is
 * identical to ggml's; another explicit target (f32, q8, q4tp, ...) decodes them and encodes with its policy. Q8_0 has no exact CMF
 * dtype (a q8_row scale is per row, not per 32-block): it is decoded to f32 (exact) and stored as f16 when the
 * user gave no --quant (opts->quant_auto with the f32 target; relative rounding error <= 2^-11 per value), as f32
 * (exact) when f32 was asked for, or re-quantized to the target (f16, bf16, q8_row, q8_2f) otherwise. Q4_1, Q5_0, Q5_1, the K-quants (Q2_K..Q6_K, Q8_K), IQ4_NL and IQ4_XS are
 * decoded exactly (gguf_kquant.c) and encoded with the policy of opts->quant, or, when the user gave no --quant
 * (opts->quant_auto), as q8 (auto_target). The embedded tokenizer becomes a tokenizer.json in the vocab section
 * (gguf_tokenizer.c). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "convert/convert.h"
#include "convert/emit.h"
#include "convert/gguf.h"
#include "format/format.h"
#include "quant/dtype.h"
#include "util/error.h"
#include "util/fileio.h"

/* blk.N.<gguf> -> model.layers.N.<hf> */
static const struct {
    const char *gguf, *hf;
} LAYER_NAMES[] = {
    {"attn_norm", "input_layernorm"},     {"attn_q", "self_attn.q_proj"},      {"attn_k", "self_attn.k_proj"},
    {"attn_v", "self_attn.v_proj"},       {"attn_output", "self_attn.o_proj"}, {"ffn_norm", "post_attention_layernorm"},
    {"ffn_gate", "mlp.gate_proj"},        {"ffn_up", "mlp.up_proj"},           {"ffn_down", "mlp.down_proj"},
    {"attn_q_norm", "self_attn.q_norm"},  {"attn_k_norm", "self_attn.k_norm"},
};

/* Supported general.architecture values and the RoPE pairing their GGUF Q/K weights are stored for. */
static const struct {
    const char *name, *rope_pairing;
} ARCHS[] = {{"llama", "interleaved"}, {"qwen2", "half"}, {"qwen3", "half"}};

/* The HF name of a GGUF llama/qwen2/qwen3 tensor into buf; 0 when the tensor has no mapping. */
static int hf_name(const char *g, char *buf, size_t cap) {
    const char *suffix = strrchr(g, '.');
    if (!suffix || (strcmp(suffix, ".weight") && strcmp(suffix, ".bias"))) return 0;
    size_t stem = (size_t)(suffix - g);
    if (stem == 10 && !strncmp(g, "token_embd.", 11)) return snprintf(buf, cap, "model.embed_tokens%s", suffix) < (int)cap;
    if (stem == 11 && !strncmp(g, "output_norm.", 12)) return snprintf(buf, cap, "model.norm%s", suffix) < (int)cap;
    if (stem == 6 && !strncmp(g, "output.", 7)) return snprintf(buf, cap, "lm_head%s", suffix) < (int)cap;
    if (strncmp(g, "blk.", 4)) return 0;
    char *end;
    long layer = strtol(g + 4, &end, 10);
    if (end == g + 4 || *end != '.' || layer < 0) return 0;
    size_t plen = (size_t)(g + stem - (end + 1));
    for (size_t i = 0; i < sizeof LAYER_NAMES / sizeof LAYER_NAMES[0]; i++)
        if (strlen(LAYER_NAMES[i].gguf) == plen && !strncmp(end + 1, LAYER_NAMES[i].gguf, plen))
            return snprintf(buf, cap, "model.layers.%ld.%s%s", layer, LAYER_NAMES[i].hf, suffix) < (int)cap;
    return 0;
}

/* "<arch>.<suffix>" into buf. */
static const char *akey(char *buf, size_t cap, const char *arch, const char *suffix) {
    snprintf(buf, cap, "%s.%s", arch, suffix);
    return buf;
}

static cmf_status req_int(const cmf_gguf *g, const char *arch, const char *suffix, int64_t *v) {
    char key[128];
    akey(key, sizeof key, arch, suffix);
    if (!cmf_gguf_get_int(g, key, v)) return cmf_err(CMF_E_FORMAT, "%s: metadata '%s' is missing", g->path, key);
    if (*v < 1 || *v > INT32_MAX)
        return cmf_err(CMF_E_FORMAT, "%s: metadata '%s' = %lld is out of range", g->path, key, (long long)*v);
    return CMF_OK;
}

/* <a>.rope.scaling.* (llama.cpp's keys) -> arch.rope_scaling (linear) or arch.yarn (§1.4). YaRN's attention factor
 * is rope.scaling.attn_factor when the file has it, else 1 + 0.1 ln factor as llama.cpp and transformers use; any
 * other type is refused rather than silently run unscaled. */
static cmf_status rope_scaling(const cmf_gguf *g, const char *an, const char *type, cJSON *a) {
    char key[160];
    double factor = 0, v;
    int64_t orig = 0;
    if (!strcmp(type, "none")) return CMF_OK;
    int has_factor = cmf_gguf_get_float(g, akey(key, sizeof key, an, "rope.scaling.factor"), &factor);
    if (!has_factor || !(factor > 0) || !isfinite(factor))
        return cmf_err(CMF_E_FORMAT, "%s: rope.scaling.type '%s' without a positive rope.scaling.factor", g->path, type);
    if (!strcmp(type, "linear")) {
        cJSON *rs = cJSON_AddObjectToObject(a, "rope_scaling");
        cJSON_AddStringToObject(rs, "rope_type", "linear");
        cJSON_AddNumberToObject(rs, "factor", factor);
        return CMF_OK;
    }
    if (strcmp(type, "yarn") != 0)
        return cmf_err(CMF_E_UNSUPPORTED, "%s: rope.scaling.type '%s' is not supported (none, linear, yarn)", g->path,
                       type);
    if (!cmf_gguf_get_int(g, akey(key, sizeof key, an, "rope.scaling.original_context_length"), &orig) ||
        orig < 1 || orig > 1 << 30)
        return cmf_err(CMF_E_FORMAT, "%s: yarn rope scaling without a valid rope.scaling.original_context_length",
                       g->path);
    if (!(factor >= 1 && factor <= 1e6))
        return cmf_err(CMF_E_FORMAT, "%s: yarn rope.scaling.factor %g is out of range [1, 1e6]", g->path, factor);
    cJSON *y = cJSON_AddObjectToObject(a, "yarn");
    cJSON_AddNumberToObject(y, "factor", factor);
    cJSON_AddNumberToObject(y, "original_max_position_embeddings", (double)orig);
    double af = 0.1 * log(factor) + 1.0;
    if (cmf_gguf_get_float(g, akey(key, sizeof key, an, "rope.scaling.attn_factor"), &v) && v > 0 && isfinite(v)) af = v;
    cJSON_AddNumberToObject(y, "attention_factor", af);
    if (cmf_gguf_get_float(g, akey(key, sizeof key, an, "rope.scaling.yarn_beta_fast"), &v) && v > 0 && isfinite(v))
        cJSON_AddNumberToObject(y, "beta_fast", v);
    if (cmf_gguf_get_float(g, akey(key, sizeof key, an, "rope.scaling.yarn_beta_slow"), &v) && v > 0 && isfinite(v))
        cJSON_AddNumberToObject(y, "beta_slow", v);
    return CMF_OK;
}

/* header.arch from <arch>.* metadata; ai indexes ARCHS. */
static cmf_status build_arch(const cmf_gguf *g, size_t ai, int tied, cJSON **out) {
    const char *an = ARCHS[ai].name;
    char key[128];
    int64_t hidden, inter, layers, heads, kv = 0, ctx, head_dim, vocab;
    cmf_status s;
    if ((s = req_int(g, an, "embedding_length", &hidden)) || (s = req_int(g, an, "feed_forward_length", &inter)) ||
        (s = req_int(g, an, "block_count", &layers)) || (s = req_int(g, an, "attention.head_count", &heads)) ||
        (s = req_int(g, an, "context_length", &ctx)))
        return s;
    /* every layer must be present (this also bounds block_count by the file before any allocation) */
    if (layers < 1 || (uint64_t)layers > g->n_tensors)
        return cmf_err(CMF_E_FORMAT, "%s: block_count %lld does not match the file's %zu tensors", g->path,
                       (long long)layers, g->n_tensors);
    for (int64_t i = 0; i < layers; i++) {
        char tn[64];
        snprintf(tn, sizeof tn, "blk.%lld.attn_q.weight", (long long)i);
        if (!cmf_gguf_tensor_find(g, tn))
            return cmf_err(CMF_E_FORMAT, "%s: block_count is %lld but tensor %s is missing", g->path,
                           (long long)layers, tn);
    }
    if (cmf_gguf_kv_find(g, akey(key, sizeof key, an, "attention.head_count_kv"))) {
        if ((s = req_int(g, an, "attention.head_count_kv", &kv))) return s;
    } else {
        kv = heads;
    }
    if (heads % kv)
        return cmf_err(CMF_E_FORMAT, "%s: head_count %lld is not a multiple of head_count_kv %lld", g->path,
                       (long long)heads, (long long)kv);
    if (cmf_gguf_kv_find(g, akey(key, sizeof key, an, "attention.key_length"))) {
        if ((s = req_int(g, an, "attention.key_length", &head_dim))) return s;
    } else {
        if (hidden % heads)
            return cmf_err(CMF_E_FORMAT, "%s: embedding_length %% head_count != 0", g->path);
        head_dim = hidden / heads;
    }
    const cmf_gguf_tensor *emb = cmf_gguf_tensor_find(g, "token_embd.weight");
    if (!emb || emb->ndim != 2 || emb->ne[0] != (uint64_t)hidden)
        return cmf_err(CMF_E_FORMAT, "%s: token_embd.weight missing or not [vocab, %lld]", g->path, (long long)hidden);
    if (!cmf_gguf_get_int(g, akey(key, sizeof key, an, "vocab_size"), &vocab)) vocab = (int64_t)emb->ne[1];
    double eps = 1e-5, theta = 10000.0;
    /* present but not a number (a string, an array) is an error, not the default */
    static const char *const FKEYS[2] = {"attention.layer_norm_rms_epsilon", "rope.freq_base"};
    double *fvals[2] = {&eps, &theta};
    for (int i = 0; i < 2; i++) {
        const char *k = akey(key, sizeof key, an, FKEYS[i]);
        if (cmf_gguf_kv_find(g, k) && !cmf_gguf_get_float(g, k, fvals[i]))
            return cmf_err(CMF_E_FORMAT, "%s: metadata '%s' is not a number", g->path, k);
        if (!(*fvals[i] > 0) || !isfinite(*fvals[i]))
            return cmf_err(CMF_E_FORMAT, "%s: metadata '%s' = %g must be a positive finite number", g->path, k,
                           *fvals[i]);
    }
    cJSON *a = cJSON_CreateObject();
    if (!a) return cmf_err(CMF_E_NOMEM, "out of memory");
    cJSON_AddStringToObject(a, "arch_name", an);
    cJSON_AddNumberToObject(a, "hidden_size", (double)hidden);
    cJSON_AddNumberToObject(a, "intermediate_size", (double)inter);
    cJSON_AddNumberToObject(a, "num_layers", (double)layers);
    cJSON_AddNumberToObject(a, "num_attention_heads", (double)heads);
    cJSON_AddNumberToObject(a, "num_kv_heads", (double)kv);
    cJSON_AddNumberToObject(a, "head_dim", (double)head_dim);
    cJSON_AddNumberToObject(a, "vocab_size", (double)vocab);
    cJSON *lt = cJSON_AddArrayToObject(a, "layer_types");
    for (int64_t i = 0; i < layers; i++) cJSON_AddItemToArray(lt, cJSON_CreateString("FullAttention"));
    cJSON_AddNumberToObject(a, "rms_norm_eps", eps);
    cJSON_AddNumberToObject(a, "max_position_embeddings", (double)ctx);
    cJSON_AddStringToObject(a, "norm_style", "qwen");
    cJSON_AddNumberToObject(a, "rope_theta", theta);
    cJSON_AddStringToObject(a, "rope_pairing", ARCHS[ai].rope_pairing);
    cJSON_AddBoolToObject(a, "tie_word_embeddings", tied);
    cJSON_AddStringToObject(a, "hidden_act", "silu");
    int64_t rot;
    if (cmf_gguf_get_int(g, akey(key, sizeof key, an, "rope.dimension_count"), &rot) && rot != head_dim) {
        if (rot < 2 || rot > head_dim) {
            cJSON_Delete(a);
            return cmf_err(CMF_E_FORMAT, "%s: rope.dimension_count %lld is not in [2, head_dim]", g->path, (long long)rot);
        }
        cJSON_AddNumberToObject(a, "partial_rotary_factor", (double)rot / (double)head_dim);
    }
    char *stype = cmf_gguf_get_str(g, akey(key, sizeof key, an, "rope.scaling.type"));
    cmf_status st = stype ? rope_scaling(g, an, stype, a) : CMF_OK;
    free(stype);
    if (st != CMF_OK) {
        cJSON_Delete(a);
        return st;
    }
    *out = a;
    return CMF_OK;
}

/* header.tokenizer_config from tokenizer.ggml.{eos,bos,padding}_token_id and tokenizer.chat_template. */
static cJSON *build_tokenizer_config(const cmf_gguf *g) {
    cJSON *tc = cJSON_CreateObject();
    char *tpl = cmf_gguf_get_str(g, "tokenizer.chat_template");
    /* a template that is not valid UTF-8 cannot go into the JSON header: it is left out (the file stays valid) */
    if (tpl && cmf_utf8_invalid_at((const uint8_t *)tpl, strlen(tpl)) == strlen(tpl))
        cJSON_AddStringToObject(tc, "chat_template", tpl);
    free(tpl);
    cJSON *eos = cJSON_AddArrayToObject(tc, "eos_token_ids");
    int64_t id;
    /* ids of 0xFFFFFFFF (-1 as u32) mean "none" in llama.cpp's writer */
    if (cmf_gguf_get_int(g, "tokenizer.ggml.eos_token_id", &id) && id >= 0 && id < INT32_MAX)
        cJSON_AddItemToArray(eos, cJSON_CreateNumber((double)id));
    if (cmf_gguf_get_int(g, "tokenizer.ggml.bos_token_id", &id) && id >= 0 && id < INT32_MAX)
        cJSON_AddNumberToObject(tc, "bos_token_id", (double)id);
    if (cmf_gguf_get_int(g, "tokenizer.ggml.padding_token_id", &id) && id >= 0 && id < INT32_MAX)
        cJSON_AddNumberToObject(tc, "pad_token_id", (double)id);
    return tc;
}

/* Tensors in execution order: embed, layers (GGUF order inside a layer is kept), final norm, lm_head. */
static int tensor_rank(const char *hf, long *layer) {
    *layer = 0;
    if (!strncmp(hf, "model.embed_tokens.", 19)) return 0;
    if (!strncmp(hf, "model.layers.", 13)) {
        *layer = strtol(hf + 13, NULL, 10);
        return 1;
    }
    if (!strncmp(hf, "model.norm.", 11)) return 2;
    return 3;
}

typedef struct gentry {
    const cmf_gguf_tensor *t;
    char name[128];
    int rank;
    long layer;
    size_t idx;
} gentry;

static int cmp_gentry(const void *a, const void *b) {
    const gentry *x = a, *y = b;
    if (x->rank != y->rank) return x->rank - y->rank;
    if (x->layer != y->layer) return x->layer < y->layer ? -1 : 1;
    return x->idx < y->idx ? -1 : x->idx > y->idx;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ggml type ids below this bound are the ones auto_target can map (IQ4_XS = 23 is the largest). */
#define CMF_GGML_AUTO_TYPES 24

/* The dtype a tensor of ggml type `ty` gets when the user gave no --quant (opts->quant_auto), for the types cmf
 * has no dtype for (Q4_1, Q5_0, Q5_1, Q2_K..Q6_K, Q8_K, IQ4_NL, IQ4_XS): q8 (q8_row), whatever their width, so that the model the
 * user picked is kept with little added loss. Measured (bench/kquant_reencode.py, bench/RESULTS.md): on a random
 * llama, re-encoding to q8 adds a logit error of 4-6% RMS, below the K-quants' own (Q4_K: 28%, Q6_K: 7%), at
 * 1.8x the size of a Q4_K file; the 4-bit q4tp keeps the size but adds 34-38%, more than Q4_K's own error.
 * -1 for the other types (F32/F16/BF16 follow opts->quant; Q4_0 and Q8_0 have their own rule above). */
static int auto_target(int ty) {
    switch (ty) {
    case CMF_GGML_Q4_1: case CMF_GGML_Q5_0: case CMF_GGML_Q5_1: case CMF_GGML_Q2_K: case CMF_GGML_Q3_K:
    case CMF_GGML_Q4_K: case CMF_GGML_Q5_K: case CMF_GGML_Q6_K: case CMF_GGML_Q8_K: case CMF_GGML_IQ4_NL:
    case CMF_GGML_IQ4_XS: return CMF_DT_Q8_ROW;
    default: return -1;
    }
}

/* The one-line note (through opts->warn) of which source types were re-encoded under quant_auto, and as what. */
static void auto_note(const cmf_convert_opts *opts, const size_t *n_auto) {
    char buf[384];
    size_t len = 0;
    int target = -1;
    for (int ty = 0; ty < CMF_GGML_AUTO_TYPES && len < sizeof buf; ty++) {
        if (!n_auto[ty]) continue;
        int k = snprintf(buf + len, sizeof buf - len, "%s%zu %s", len ? ", " : "", n_auto[ty], cmf_gguf_type_name(ty));
        if (k > 0) len += (size_t)k;
        target = auto_target(ty);
    }
    if (len)
        cmf_convert_warn(opts, "cmf has no dtype for these GGUF tensors (%s): decoded exactly and re-encoded as %s; "
                         "--quant f32 keeps ggml's dequantized values, --quant q4tp gives a file of about the GGUF's "
                         "size with more loss (README)", buf, cmf_dtype_name(target));
}

/* Writes one tensor: Q4_0 2-D -> q4_tiled (lossless repack, bypassing the policy) when no --quant was given or q4 /
 * q4t was asked for; Q8_0 -> decoded, f16 when no --quant was given; everything else (an explicit --quant included)
 * decoded to f32 and encoded with the policy. *dtype receives the stored dtype. */
static cmf_status emit_one(cmf_emit *em, const gentry *e, int *dtype) {
    const cmf_gguf_tensor *t = e->t;
    uint64_t shape[4];
    for (int d = 0; d < t->ndim; d++) shape[d] = t->ne[t->ndim - 1 - d]; /* ggml ne[] is innermost first */
    const int q4 = em->quant == CMF_DT_Q4_TILED || em->quant == CMF_DT_Q4_BLOCK;
    if (t->type == CMF_GGML_Q4_0 && t->ndim == 2 && (em->opts->quant_auto || q4)) {
        uint32_t sh[2] = {(uint32_t)shape[0], (uint32_t)shape[1]};
        if (shape[0] > UINT32_MAX || shape[1] > UINT32_MAX)
            return cmf_err(CMF_E_ARG, "tensor '%s': a dimension does not fit a u32", t->name);
        float *scratch = cmf_emit_scratch(em, (t->nbytes + 3) / 4); /* room for the repacked bytes */
        if (!scratch) return cmf_err(CMF_E_NOMEM, "tensor '%s': out of memory", t->name);
        uint8_t *buf = (uint8_t *)scratch;
        cmf_status s = cmf_gguf_q4_0_to_q4_tiled(t, buf);
        if (!s) s = cmf_writer_add(em->w, e->name, CMF_DT_Q4_TILED, 2, sh, buf, t->nbytes);
        if (s) return cmf_err_prefix(s, "tensor '%s': ", t->name);
        *dtype = CMF_DT_Q4_TILED;
        em->done += t->nbytes;
        if (em->opts->progress && em->opts->on_progress)
            em->opts->on_progress(em->opts->progress_ctx, em->done, em->total, now_s() - em->t0, e->name);
        return CMF_OK;
    }
    float *buf = cmf_emit_scratch(em, cmf_gguf_numel(t));
    if (!buf) return cmf_err(CMF_E_NOMEM, "tensor '%s': out of memory", t->name);
    cmf_status s = cmf_gguf_tensor_f32(t, buf);
    if (s) return s;
    int saved = em->quant;
    if (t->type == CMF_GGML_Q8_0 && em->quant == CMF_DT_F32 && em->opts->quant_auto) em->quant = CMF_DT_F16;
    else if (em->opts->quant_auto && auto_target(t->type) >= 0) em->quant = auto_target(t->type);
    *dtype = cmf_emit_dtype(em, e->name, t->ndim, shape);
    s = cmf_emit_tensor(em, e->name, t->ndim, shape, buf, t->nbytes);
    em->quant = saved;
    return s;
}

/* header.quant_type: the label of the dtype that holds the most elements of 2-D matrices (q4_tiled -> "Q4_BLOCK",
 * as cortiq's converter labels q4t, §1.4). Elements, not the source's bytes: a K-quant's few bits per weight made
 * one f32 embedding outweigh six matrices re-encoded as q8_row, and the file was labelled F32 (review13). */
static const char *file_label(const uint64_t *elems_by_dtype, int fallback) {
    int best = -1;
    for (int d = 0; d < CMF_DT_COUNT; d++)
        if (elems_by_dtype[d] && (best < 0 || elems_by_dtype[d] > elems_by_dtype[best])) best = d;
    if (best == CMF_DT_Q4_TILED) return "Q4_BLOCK";
    const char *l = best >= 0 ? cmf_quant_label(best) : NULL;
    return l ? l : cmf_quant_label(fallback);
}

cmf_status cmf_convert_gguf(const char *gguf_path, const char *out_path, const cmf_convert_opts *opts) {
    if (!gguf_path || !out_path || !opts) return cmf_err(CMF_E_ARG, "cmf_convert_gguf: NULL argument");
    /* the output (or the writer's out.tmp / out.blob.tmp) must not be the source */
    cmf_status s = cmf_writer_check_source(out_path, gguf_path, "conversion");
    if (s) return s;
    cmf_gguf *g = NULL;
    s = cmf_gguf_open(gguf_path, &g);
    if (s) return s;
    char *archname = cmf_gguf_get_str(g, "general.architecture");
    cJSON *arch = NULL, *header = NULL;
    char *vocab = NULL;
    size_t vocab_len = 0, ai = 0;
    gentry *es = NULL;
    cmf_emit em;
    memset(&em, 0, sizeof em);
    while (archname && ai < sizeof ARCHS / sizeof ARCHS[0] && strcmp(archname, ARCHS[ai].name)) ai++;
    if (!archname || ai == sizeof ARCHS / sizeof ARCHS[0])
        s = cmf_err(CMF_E_UNSUPPORTED, "%s: general.architecture '%s' (supported: llama, qwen2, qwen3)", gguf_path,
                    archname ? archname : "(missing)");
    if (!s && !(es = calloc(g->n_tensors ? g->n_tensors : 1, sizeof *es))) s = cmf_err(CMF_E_NOMEM, "out of memory");
    uint64_t total = 0;
    size_t n_auto[CMF_GGML_AUTO_TYPES] = {0};
    for (size_t i = 0; !s && i < g->n_tensors; i++) {
        gentry *e = &es[i];
        e->t = &g->tensors[i];
        e->idx = i;
        int ty = e->t->type;
        if (!hf_name(e->t->name, e->name, sizeof e->name))
            s = cmf_err(CMF_E_UNSUPPORTED, "%s: tensor '%s' has no %s mapping", gguf_path, e->t->name, archname);
        else if (!cmf_gguf_type_decodable(ty))
            s = cmf_err(CMF_E_UNSUPPORTED, "%s: tensor '%s': ggml type %s (%d) is not supported (F32, F16, BF16, "
                        "Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, Q8_K, IQ4_NL and IQ4_XS only; "
                        "requantize the GGUF with llama-quantize, e.g. to Q4_K_M or Q8_0)", gguf_path, e->t->name,
                        cmf_gguf_type_name(ty), ty);
        else if (opts->quant_auto && auto_target(ty) >= 0)
            n_auto[ty]++;
        e->rank = tensor_rank(e->name, &e->layer);
        total += e->t->nbytes;
    }
    if (!s) {
        qsort(es, g->n_tensors, sizeof *es, cmp_gentry);
        s = build_arch(g, ai, cmf_gguf_tensor_find(g, "output.weight") == NULL, &arch);
    }
    free(archname);
    if (!s && cmf_gguf_kv_find(g, "tokenizer.ggml.model"))
        s = cmf_gguf_build_tokenizer(g, &vocab, &vocab_len);
    else if (!s)
        cmf_convert_warn(opts, "no tokenizer.ggml.model: the file has no vocab section");
    if (!s) auto_note(opts, n_auto);
    if (!s) s = cmf_emit_begin(&em, out_path, opts, total);
    uint64_t matrix_elems[CMF_DT_COUNT] = {0};
    for (size_t i = 0; !s && i < g->n_tensors; i++) {
        int dt = -1;
        s = emit_one(&em, &es[i], &dt);
        if (!s && es[i].t->ndim == 2 && dt >= 0 && dt < CMF_DT_COUNT) matrix_elems[dt] += cmf_gguf_numel(es[i].t);
    }
    if (!s) {
        char bn[256];
        const char *slash = strrchr(gguf_path, '/');
        snprintf(bn, sizeof bn, "%s", slash ? slash + 1 : gguf_path);
        header = cJSON_CreateObject();
        cJSON_AddStringToObject(header, "format", "cmf");
        cJSON_AddNumberToObject(header, "version", 2);
        cJSON_AddItemToObject(header, "arch", arch);
        arch = NULL;
        cJSON_AddStringToObject(header, "quant_type", file_label(matrix_elems, opts->quant));
        cJSON *prov = cJSON_AddObjectToObject(header, "provenance");
        cJSON_AddStringToObject(prov, "tool", "cmf convert");
        cJSON_AddStringToObject(prov, "source_model", bn);
        cJSON_AddStringToObject(prov, "source_format", "gguf");
        cJSON_AddItemToObject(header, "tokenizer_config", build_tokenizer_config(g));
    }
    s = cmf_emit_end(&em, s, header, vocab, vocab_len);
    cJSON_Delete(arch);
    free(vocab);
    free(es);
    cmf_gguf_close(g);
    return s;
}

cmf_status cmf_gguf_tokenizer_json(const char *gguf_path, char **json, size_t *len) {
    if (!gguf_path || !json || !len) return cmf_err(CMF_E_ARG, "cmf_gguf_tokenizer_json: NULL argument");
    *json = NULL;
    *len = 0;
    cmf_gguf *g = NULL;
    cmf_status s = cmf_gguf_open(gguf_path, &g);
    if (s) return s;
    s = cmf_gguf_build_tokenizer(g, json, len);
    cmf_gguf_close(g);
    return s;
}
