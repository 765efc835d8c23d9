/* RoPE pairing of imported GGUFs, checked against Hugging Face transformers: the hf-tiny llama, qwen2 and qwen3
 * checkpoints (shared/data/hf-tiny, random weights, reference logits from transformers 5.17 in float32) are written
 * as GGUF files the way llama.cpp's convert_hf_to_gguf.py lays them out — names blk.N.*, ne = [in, out], F32, and
 * for llama only the Q/K rows permuted per head from HF's rotate-half order into the interleaved order (row 2i+j of
 * a head = HF row j·head_dim/2 + i) — then imported with cmf_convert_gguf. The logits at every position of the
 * three reference sequences must match logits_i within 1e-4 x max|logit| (the f32 bound of test_hf_parity), which
 * holds only when the importer records "interleaved" for llama and "half" for qwen2/qwen3.
 * The same qwen2 GGUF with llama.cpp's rope.scaling.* keys: type yarn must become arch.yarn with transformers'
 * default attention factor 1 + 0.1 ln(factor) (and change the logits), any other type but none/linear is refused. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "cmf.h"
#include "convert/convert.h"
#include "convert/safetensors.h"
#include "format/format.h"
#include "gguf_writer.h"
#include "testutil.h"
#include "util/fileio.h"

static const struct {
    const char *g, *h;
} NAMES[] = {
    {"attn_norm", "input_layernorm"},     {"attn_q", "self_attn.q_proj"},      {"attn_k", "self_attn.k_proj"},
    {"attn_v", "self_attn.v_proj"},       {"attn_output", "self_attn.o_proj"}, {"ffn_norm", "post_attention_layernorm"},
    {"ffn_gate", "mlp.gate_proj"},        {"ffn_up", "mlp.up_proj"},           {"ffn_down", "mlp.down_proj"},
    {"attn_q_norm", "self_attn.q_norm"},  {"attn_k_norm", "self_attn.k_norm"},
};

static int cfg_int(const cJSON *c, const char *k, int dflt) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(c, k);
    return cJSON_IsNumber(v) ? v->valueint : dflt;
}

/* HF rotate-half rows -> interleaved rows, per head of hd rows (llama.cpp's permute for llama Q/K). */
static void permute_rows(float *w, int rows, int cols, int hd) {
    float *tmp = malloc((size_t)rows * cols * sizeof(float));
    for (int h = 0; h < rows / hd; h++)
        for (int i = 0; i < hd / 2; i++)
            for (int j = 0; j < 2; j++)
                memcpy(tmp + ((size_t)h * hd + 2 * i + j) * cols, w + ((size_t)h * hd + j * hd / 2 + i) * cols,
                       (size_t)cols * sizeof(float));
    memcpy(w, tmp, (size_t)rows * cols * sizeof(float));
    free(tmp);
}

/* NULL: plain; "yarn" / "longrope": that rope.scaling.type (factor 4, original context 32). */
static const char *g_scaling;

/* The converted file's arch.yarn: factor 4, original window 32, attention factor 1 + 0.1 ln 4. */
static void check_yarn_header(const char *out) {
    cmf_file *f = NULL;
    CHECK(cmf_file_open(out, &f) == CMF_OK);
    if (!f) return;
    const cJSON *y = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(f->header, "arch"), "yarn");
    const cJSON *fa = cJSON_GetObjectItemCaseSensitive(y, "factor"),
                *om = cJSON_GetObjectItemCaseSensitive(y, "original_max_position_embeddings"),
                *af = cJSON_GetObjectItemCaseSensitive(y, "attention_factor");
    CHECK_MSG(cJSON_IsNumber(fa) && fa->valuedouble == 4.0, "yarn factor");
    CHECK_MSG(cJSON_IsNumber(om) && om->valuedouble == 32.0, "yarn original window");
    CHECK_MSG(cJSON_IsNumber(af) && fabs(af->valuedouble - (1 + 0.1 * log(4.0))) < 1e-12, "yarn attention factor %g",
              cJSON_IsNumber(af) ? af->valuedouble : -1.0);
    cmf_file_close(f);
}

static void check_case(const char *arch) {
    char rel[128], path[1024];
    snprintf(rel, sizeof rel, "data/hf-tiny/%s/config.json", arch);
    char *cj = NULL;
    size_t cl = 0;
    if (cmf_read_file(shared_path(rel), &cj, &cl) != CMF_OK) {
        CHECK_MSG(0, "%s: %s", arch, cmf_last_error());
        return;
    }
    cJSON *cfg = cJSON_Parse(cj);
    free(cj);
    int hidden = cfg_int(cfg, "hidden_size", 0), heads = cfg_int(cfg, "num_attention_heads", 0);
    int kv = cfg_int(cfg, "num_key_value_heads", heads), hd = cfg_int(cfg, "head_dim", hidden / heads);
    const cJSON *rp = cJSON_GetObjectItemCaseSensitive(cfg, "rope_parameters");
    const cJSON *th = cJSON_GetObjectItemCaseSensitive(rp, "rope_theta");
    const cJSON *eps = cJSON_GetObjectItemCaseSensitive(cfg, "rms_norm_eps");

    gw *w = gw_new();
    char k[128];
    gw_str(w, "general.architecture", arch);
#define KEY(s) (snprintf(k, sizeof k, "%s." s, arch), k)
    gw_u32(w, KEY("embedding_length"), (uint32_t)hidden);
    gw_u32(w, KEY("feed_forward_length"), (uint32_t)cfg_int(cfg, "intermediate_size", 0));
    gw_u32(w, KEY("block_count"), (uint32_t)cfg_int(cfg, "num_hidden_layers", 0));
    gw_u32(w, KEY("attention.head_count"), (uint32_t)heads);
    gw_u32(w, KEY("attention.head_count_kv"), (uint32_t)kv);
    gw_u32(w, KEY("attention.key_length"), (uint32_t)hd);
    gw_u32(w, KEY("context_length"), (uint32_t)cfg_int(cfg, "max_position_embeddings", 512));
    gw_f32(w, KEY("attention.layer_norm_rms_epsilon"), (float)eps->valuedouble);
    gw_f32(w, KEY("rope.freq_base"), cJSON_IsNumber(th) ? (float)th->valuedouble : 10000.0f);
    if (g_scaling) {
        gw_str(w, KEY("rope.scaling.type"), g_scaling);
        gw_f32(w, KEY("rope.scaling.factor"), 4.0f);
        gw_u32(w, KEY("rope.scaling.original_context_length"), 32);
    }
#undef KEY
    snprintf(rel, sizeof rel, "data/hf-tiny/%s/model.safetensors", arch);
    cmf_safetensors *st = NULL;
    CHECK(cmf_st_open(shared_path(rel), &st) == CMF_OK);
    for (size_t i = 0; st && i < cmf_st_count(st); i++) {
        const cmf_st_tensor *t = cmf_st_get(st, i);
        char gname[128] = "";
        const char *suffix = strrchr(t->name, '.');
        if (!strcmp(t->name, "model.embed_tokens.weight")) snprintf(gname, sizeof gname, "token_embd.weight");
        else if (!strcmp(t->name, "model.norm.weight")) snprintf(gname, sizeof gname, "output_norm.weight");
        else if (!strcmp(t->name, "lm_head.weight")) snprintf(gname, sizeof gname, "output.weight");
        else {
            int layer;
            char rest[96];
            if (sscanf(t->name, "model.layers.%d.%95s", &layer, rest) == 2)
                for (size_t n = 0; n < sizeof NAMES / sizeof NAMES[0]; n++)
                    if (!strncmp(rest, NAMES[n].h, strlen(NAMES[n].h)) && rest[strlen(NAMES[n].h)] == '.')
                        snprintf(gname, sizeof gname, "blk.%d.%s%s", layer, NAMES[n].g, suffix);
        }
        CHECK_MSG(gname[0], "%s: no GGUF name for %s", arch, t->name);
        if (!gname[0]) continue;
        uint64_t n = cmf_st_numel(t);
        float *f = malloc(n * sizeof(float));
        CHECK(cmf_st_to_f32(t, f) == CMF_OK);
        int is_qk = strstr(t->name, "q_proj.weight") || strstr(t->name, "k_proj.weight");
        if (!strcmp(arch, "llama") && is_qk && t->ndim == 2) permute_rows(f, (int)t->shape[0], (int)t->shape[1], hd);
        uint64_t ne[2] = {t->ndim == 2 ? t->shape[1] : t->shape[0], t->ndim == 2 ? t->shape[0] : 0};
        gw_tensor(w, gname, t->ndim, ne, GW_F32, f, n * 4);
        free(f);
    }
    cmf_st_close(st);
    char gg[600], out[620];
    snprintf(gg, sizeof gg, "%s", tmp_path(arch));
    strcat(gg, "-hf.gguf");
    snprintf(out, sizeof out, "%s.cmf", gg);
    CHECK(gw_write(w, gg) == 0);
    gw_free(w);
    cJSON_Delete(cfg);

    cmf_convert_opts o;
    memset(&o, 0, sizeof o);
    o.quant = 0; /* f32 */
    cmf_status s = cmf_convert_gguf(gg, out, &o);
    if (g_scaling && strcmp(g_scaling, "yarn") != 0) {
        CHECK_MSG(s == CMF_E_UNSUPPORTED && strstr(cmf_last_error(), g_scaling), "%s: status %d (%s)", g_scaling, s,
                  cmf_last_error());
        remove(gg);
        return;
    }
    CHECK_MSG(s == CMF_OK, "%s: %s", arch, cmf_last_error());
    if (g_scaling && s == CMF_OK) check_yarn_header(out);
    cmf_model *m = NULL;
    if (s || cmf_model_load(out, NULL, &m) != CMF_OK) {
        CHECK_MSG(0, "%s: load: %s", arch, cmf_last_error());
        return;
    }
    snprintf(rel, sizeof rel, "data/hf-tiny/%s/ref.safetensors", arch);
    snprintf(path, sizeof path, "%s", shared_path(rel));
    cmf_safetensors *ref = NULL;
    CHECK(cmf_st_open(path, &ref) == CMF_OK);
    int V = cmf_model_vocab_size(m);
    for (int seq = 0; ref && seq < 3; seq++) {
        char in_name[32], lg_name[32];
        snprintf(in_name, sizeof in_name, "input_%d", seq);
        snprintf(lg_name, sizeof lg_name, "logits_%d", seq);
        const cmf_st_tensor *ti = cmf_st_find(ref, in_name), *tl = cmf_st_find(ref, lg_name);
        if (!ti || !tl) {
            CHECK_MSG(0, "%s: %s missing", arch, in_name);
            continue;
        }
        int n = (int)cmf_st_numel(ti);
        float *fi = malloc((size_t)n * sizeof(float)), *want = malloc(cmf_st_numel(tl) * sizeof(float));
        float *got = malloc((size_t)n * V * sizeof(float));
        int32_t *ids = malloc((size_t)n * sizeof(int32_t));
        cmf_st_to_f32(ti, fi);
        cmf_st_to_f32(tl, want);
        for (int i = 0; i < n; i++) ids[i] = (int32_t)fi[i];
        cmf_session *ss = NULL;
        CHECK(cmf_session_new(m, 512, &ss) == CMF_OK);
        CHECK(ss && cmf_session_prefill(ss, ids, n, got) == CMF_OK);
        double maxabs = 0, maxdiff = 0;
        for (size_t i = 0; i < (size_t)n * V; i++) {
            maxabs = fmax(maxabs, fabs(want[i]));
            maxdiff = fmax(maxdiff, fabs(want[i] - got[i]));
        }
        if (!g_scaling)
            CHECK_MSG(maxdiff <= 1e-4 * maxabs, "%s seq %d: max |diff| %g vs max |logit| %g", arch, seq, maxdiff,
                      maxabs);
        else /* YaRN changes the frequencies at every position: the unscaled reference must not match */
            CHECK_MSG(maxdiff > 1e-3 * maxabs, "%s yarn seq %d: logits equal the unscaled ones", arch, seq);
        cmf_session_free(ss);
        free(fi);
        free(want);
        free(got);
        free(ids);
    }
    cmf_st_close(ref);
    cmf_model_free(m);
    remove(gg);
    remove(out);
}

int main(void) {
    check_case("llama");
    check_case("qwen2");
    check_case("qwen3");
    g_scaling = "yarn";
    check_case("qwen2");
    g_scaling = "longrope";
    check_case("qwen2");
    CMF_TEST_END();
}
