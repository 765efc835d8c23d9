/* test_convert_hf.c — cmf_convert_hf on every hf-tiny checkpoint: the file opens and verifies, every tensor decodes
 * to exactly the source values at f32, the header carries the arch values each family needs, q8/q8_2f/bf16 follow
 * the §2.0 dtype policy, and the tokenizer bundle is taken from real tokenizer files. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cmf.h"
#include "convert/convert.h"
#include "convert/safetensors.h"
#include "format/format.h"
#include "quant/dtype.h"
#include "testutil.h"

static const char *CASES[] = {"llama", "mistral-swa", "qwen2", "qwen3", "gemma2", "bf16-llama"};

typedef struct warns {
    int n;
    char last[512];
    char all[4096]; /* every message, one per line */
} warns;

static void on_warn(void *ctx, const char *msg) {
    warns *w = ctx;
    w->n++;
    snprintf(w->last, sizeof w->last, "%s", msg);
    size_t l = strlen(w->all);
    snprintf(w->all + l, sizeof w->all - l, "%s\n", msg);
}

static int n_progress;
static void on_progress(void *ctx, uint64_t done, uint64_t total, double el, const char *t) {
    (void)ctx, (void)el, (void)t;
    if (done <= total) n_progress++;
}

static cmf_convert_opts make_opts(int quant, warns *w) {
    cmf_convert_opts o;
    memset(&o, 0, sizeof o);
    o.quant = quant;
    o.warn = on_warn;
    o.warn_ctx = w;
    o.progress = 1;
    o.on_progress = on_progress;
    return o;
}

static cmf_file *convert_open(const char *dir, const char *out, int quant, warns *w) {
    cmf_convert_opts o = make_opts(quant, w);
    cmf_status s = cmf_convert_hf(dir, out, &o);
    CHECK_MSG(s == CMF_OK, "convert %s: %s", dir, cmf_last_error());
    if (s) return NULL;
    cmf_file *f = NULL;
    s = cmf_file_open(out, &f);
    CHECK_MSG(s == CMF_OK, "open %s: %s", out, cmf_last_error());
    if (s) return NULL;
    char *report = NULL;
    s = cmf_file_verify(f, &report);
    CHECK_MSG(s == CMF_OK, "verify %s: %s", out, report ? report : "");
    free(report);
    return f;
}

static const cJSON *arch_of(const cmf_file *f, const char *key) {
    return cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(f->header, "arch"), key);
}

static double arch_num(const cmf_file *f, const char *key) {
    const cJSON *v = arch_of(f, key);
    return cJSON_IsNumber(v) ? v->valuedouble : NAN;
}

static const char *arch_str(const cmf_file *f, const char *key) {
    const cJSON *v = arch_of(f, key);
    return cJSON_IsString(v) ? v->valuestring : "";
}

static float *decode(const cmf_tensor *t) {
    float *out = malloc(cmf_tensor_numel(t) * sizeof *out + 4);
    cmf_status s = cmf_dequant(t->dtype, t->ndim, t->shape, t->data, t->nbytes, out);
    CHECK_MSG(s == CMF_OK, "dequant %s: %s", t->name, cmf_last_error());
    return out;
}

/* Every source tensor is in the CMF (lm_head only when not tied) and decodes exactly (f32 target) or within the
 * quantization error (others); dtypes follow the policy. */
static void compare(const char *dir, const cmf_file *f, int quant) {
    cmf_safetensors *st = NULL;
    if (cmf_st_open(dir, &st) != CMF_OK) {
        CHECK_MSG(0, "%s: %s", dir, cmf_last_error());
        return;
    }
    size_t expected = 0;
    for (size_t i = 0; i < cmf_st_count(st); i++) {
        const cmf_st_tensor *s = cmf_st_get(st, i);
        const cmf_tensor *t = cmf_file_find(f, s->name);
        if (!t) {
            CHECK_MSG(!strcmp(s->name, "lm_head.weight") && cJSON_IsTrue(arch_of(f, "tie_word_embeddings")),
                      "%s: tensor %s missing", dir, s->name);
            continue;
        }
        expected++;
        uint64_t n = cmf_st_numel(s);
        CHECK(t->ndim == s->ndim);
        for (int d = 0; d < s->ndim; d++) CHECK(t->shape[d] == s->shape[d]);
        int matrix = s->ndim == 2 && n >= 32;
        int want = matrix ? quant : (quant == CMF_DT_F32 || quant == CMF_DT_BF16) ? quant : CMF_DT_F16;
        CHECK_MSG(t->dtype == want, "%s: %s dtype %d, want %d", dir, s->name, t->dtype, want);
        float *src = malloc(n * sizeof *src), *got = decode(t);
        cmf_st_to_f32(s, src);
        float amax = 0;
        for (uint64_t k = 0; k < n; k++) amax = fmaxf(amax, fabsf(src[k]));
        uint64_t bad = 0;
        for (uint64_t k = 0; k < n; k++) {
            float tol = 0;
            if (t->dtype == CMF_DT_F16) tol = fabsf(src[k]) * 1e-3f + 1e-7f;
            if (t->dtype == CMF_DT_BF16) tol = fabsf(src[k]) * 8e-3f;
            if (t->dtype == CMF_DT_Q8_ROW || t->dtype == CMF_DT_Q8_2F) tol = amax * 0.03f;
            if (!(fabsf(got[k] - src[k]) <= tol)) bad++;
        }
        CHECK_MSG(bad == 0, "%s: %s: %llu of %llu values differ (dtype %d)", dir, s->name, (unsigned long long)bad,
                  (unsigned long long)n, t->dtype);
        free(src);
        free(got);
    }
    CHECK_MSG(f->n_tensors == expected, "%s: CMF has %zu tensors, expected %zu", dir, f->n_tensors, expected);
    cmf_st_close(st);
}

static void test_all_f32(void) {
    for (size_t c = 0; c < sizeof CASES / sizeof CASES[0]; c++) {
        char dir[4096], out[4096], rel[128];
        snprintf(rel, sizeof rel, "data/hf-tiny/%s", CASES[c]);
        snprintf(dir, sizeof dir, "%s", shared_path(rel));
        snprintf(rel, sizeof rel, "conv_%s_f32.cmf", CASES[c]);
        snprintf(out, sizeof out, "%s", tmp_path(rel));
        warns w = {0, "", ""};
        n_progress = 0;
        cmf_file *f = convert_open(dir, out, CMF_DT_F32, &w);
        if (!f) continue;
        /* the hf-tiny dirs have no tokenizer files: one warning, no vocab section */
        CHECK_MSG(w.n == 1 && strstr(w.last, "no tokenizer.json"), "%s: warnings %d '%s'", CASES[c], w.n, w.last);
        CHECK(f->env.vocab_len == 0);
        CHECK(n_progress > 5);
        const cJSON *qt = cJSON_GetObjectItemCaseSensitive(f->header, "quant_type");
        CHECK(cJSON_IsString(qt) && !strcmp(qt->valuestring, "F32"));
        const cJSON *prov = cJSON_GetObjectItemCaseSensitive(f->header, "provenance");
        const cJSON *tool = cJSON_GetObjectItemCaseSensitive(prov, "tool");
        CHECK(cJSON_IsString(tool) && !strcmp(tool->valuestring, "cmf convert"));
        CHECK(!strcmp(arch_str(f, "arch_name"), strcmp(CASES[c], "bf16-llama") ? (strcmp(CASES[c], "mistral-swa") ? CASES[c] : "mistral") : "llama"));
        CHECK(!strcmp(arch_str(f, "rope_pairing"), "half"));
        compare(dir, f, CMF_DT_F32);
        /* execution order: the embedding first */
        CHECK(f->n_tensors > 0 && !strcmp(f->tensors[0].name, "model.embed_tokens.weight"));
        const cJSON *eos = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(f->header, "tokenizer_config"),
                                                            "eos_token_ids");
        CHECK(cJSON_IsArray(eos));
        if (!strcmp(CASES[c], "qwen3")) {
            CHECK(arch_num(f, "head_dim") == 32);
            CHECK(arch_num(f, "num_attention_heads") == 4 && arch_num(f, "hidden_size") == 64);
            CHECK(arch_num(f, "rope_theta") == 1e6);
            CHECK(cJSON_IsTrue(arch_of(f, "tie_word_embeddings")));
            CHECK(cmf_file_find(f, "lm_head.weight") == NULL);
            CHECK(cmf_file_find(f, "model.layers.0.self_attn.q_norm.weight") != NULL);
            CHECK(arch_of(f, "sliding_window") == NULL);
            CHECK(!strcmp(arch_str(f, "norm_style"), "qwen"));
        }
        if (!strcmp(CASES[c], "qwen2")) {
            CHECK(arch_num(f, "head_dim") == 16);
            CHECK(arch_of(f, "sliding_window") == NULL);
            CHECK(cmf_file_find(f, "model.layers.0.self_attn.q_proj.bias") != NULL);
        }
        if (!strcmp(CASES[c], "gemma2")) {
            CHECK(!strcmp(arch_str(f, "norm_style"), "gemma"));
            CHECK(arch_num(f, "final_logit_softcapping") == 30 && arch_num(f, "attn_logit_softcapping") == 50);
            CHECK(arch_num(f, "query_pre_attn_scalar") == 16);
            CHECK(arch_num(f, "sliding_window") == 16 && arch_num(f, "sliding_window_pattern") == 2);
            CHECK(arch_num(f, "embed_multiplier") == 8);
            CHECK(!strcmp(arch_str(f, "hidden_act"), "gelu_tanh"));
            CHECK(cJSON_IsTrue(arch_of(f, "tie_word_embeddings")));
            const cJSON *lt = arch_of(f, "layer_types");
            CHECK(cJSON_GetArraySize(lt) == 4);
            for (int i = 0; i < cJSON_GetArraySize(lt); i++)
                CHECK(!strcmp(cJSON_GetArrayItem(lt, i)->valuestring, i % 2 ? "FullAttention" : "SlidingAttention"));
            const cJSON *tc = cJSON_GetObjectItemCaseSensitive(f->header, "tokenizer_config");
            CHECK(cJSON_GetArraySize(eos) == 1 && cJSON_GetArrayItem(eos, 0)->valuedouble == 1);
            CHECK(cJSON_GetObjectItemCaseSensitive(tc, "bos_token_id")->valuedouble == 2);
            CHECK(cJSON_GetObjectItemCaseSensitive(tc, "pad_token_id")->valuedouble == 0);
        }
        if (!strcmp(CASES[c], "mistral-swa")) {
            CHECK(arch_num(f, "sliding_window") == 16);
            const cJSON *lt = arch_of(f, "layer_types");
            for (int i = 0; i < cJSON_GetArraySize(lt); i++)
                CHECK(!strcmp(cJSON_GetArrayItem(lt, i)->valuestring, "SlidingAttention"));
        }
        if (!strcmp(CASES[c], "llama")) {
            CHECK(arch_num(f, "num_kv_heads") == 2 && arch_num(f, "num_layers") == 3);
            CHECK(arch_num(f, "rms_norm_eps") == 1e-5 && arch_num(f, "max_position_embeddings") == 512);
            CHECK(!cJSON_IsTrue(arch_of(f, "tie_word_embeddings")) && cmf_file_find(f, "lm_head.weight"));
            CHECK(cJSON_GetArraySize(eos) == 1 && cJSON_GetArrayItem(eos, 0)->valuedouble == 2);
        }
        cmf_file_close(f);
    }
}

static void test_quant(void) {
    const int quants[] = {CMF_DT_Q8_ROW, CMF_DT_Q8_2F, CMF_DT_F16};
    const char *labels[] = {"Q8_ROW", "Q8_2F", "F16"};
    for (int q = 0; q < 3; q++) {
        char dir[4096];
        snprintf(dir, sizeof dir, "%s", shared_path("data/hf-tiny/llama"));
        warns w = {0, "", ""};
        cmf_file *f = convert_open(dir, tmp_path("conv_llama_q.cmf"), quants[q], &w);
        if (!f) continue;
        const cJSON *qt = cJSON_GetObjectItemCaseSensitive(f->header, "quant_type");
        CHECK(cJSON_IsString(qt) && !strcmp(qt->valuestring, labels[q]));
        const cmf_tensor *t = cmf_file_find(f, "model.layers.0.mlp.down_proj.weight");
        CHECK(t && t->dtype == quants[q]);
        t = cmf_file_find(f, "model.embed_tokens.weight");
        CHECK(t && t->dtype == quants[q]);
        t = cmf_file_find(f, "model.norm.weight");
        CHECK(t && t->dtype == CMF_DT_F16);
        compare(dir, f, quants[q]);
        cmf_file_close(f);
    }
    /* bf16 target from the BF16 checkpoint: everything bf16 and exact */
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", shared_path("data/hf-tiny/bf16-llama"));
    warns w = {0, "", ""};
    cmf_file *f = convert_open(dir, tmp_path("conv_bf16_bf16.cmf"), CMF_DT_BF16, &w);
    if (f) {
        compare(dir, f, CMF_DT_BF16);
        for (size_t i = 0; i < f->n_tensors; i++) CHECK(f->tensors[i].dtype == CMF_DT_BF16);
        cmf_file_close(f);
    }
}

static void copy_file(const char *from, const char *to) {
    FILE *a = fopen(from, "rb"), *b = fopen(to, "wb");
    if (!a || !b) {
        CHECK_MSG(0, "copy %s -> %s", from, to);
        if (a) fclose(a);
        if (b) fclose(b);
        return;
    }
    char buf[65536];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, a)) > 0) fwrite(buf, 1, n, b);
    fclose(a);
    fclose(b);
}

/* A qwen3 directory with the real Qwen3 tokenizer files: vocab stored verbatim, template and eos id from them. */
static void test_tokenizer_bundle(void) {
    char dir[4096], p[4200], q[4200];
    snprintf(dir, sizeof dir, "%s", tmp_path("hf_qwen3_tok"));
    mkdir(dir, 0755);
    const char *files[][2] = {{"data/hf-tiny/qwen3/config.json", "config.json"},
                              {"data/hf-tiny/qwen3/generation_config.json", "generation_config.json"},
                              {"data/hf-tiny/qwen3/model.safetensors", "model.safetensors"},
                              {"data/tokenizers/qwen3/tokenizer.json", "tokenizer.json"},
                              {"data/tokenizers/qwen3/tokenizer_config.json", "tokenizer_config.json"}};
    for (int i = 0; i < 5; i++) {
        snprintf(p, sizeof p, "%s/%s", dir, files[i][1]);
        copy_file(shared_path(files[i][0]), p);
    }
    warns w = {0, "", ""};
    cmf_file *f = convert_open(dir, tmp_path("conv_qwen3_tok.cmf"), CMF_DT_F16, &w);
    if (!f) return;
    /* the real tokenizer (151669 ids) on the tiny weights (vocab 1024): converted, with one warning about the
     * tokenizer and one for each of eos/pad, whose ids the runtime ignores */
    CHECK_MSG(w.n == 3 && strstr(w.all, "vocab_size is 1024") && strstr(w.all, "eos token id 151645 is not below") &&
                  strstr(w.all, "pad_token_id 151643 is not below"),
              "warnings: %d: %s", w.n, w.all);
    char *tok = NULL, *cfg = NULL;
    size_t tok_len = 0, cfg_len = 0;
    snprintf(q, sizeof q, "%s", shared_path("data/tokenizers/qwen3/tokenizer.json"));
    CHECK(cmf_read_file(q, &tok, &tok_len) == CMF_OK);
    CHECK(f->env.vocab_len == tok_len && f->vocab && !memcmp(f->vocab, tok, tok_len));
    snprintf(q, sizeof q, "%s", shared_path("data/tokenizers/qwen3/tokenizer_config.json"));
    CHECK(cmf_read_file(q, &cfg, &cfg_len) == CMF_OK);
    cJSON *tcj = cJSON_Parse(cfg), *tj = cJSON_Parse(tok);
    const cJSON *tc = cJSON_GetObjectItemCaseSensitive(f->header, "tokenizer_config");
    const cJSON *tpl = cJSON_GetObjectItemCaseSensitive(tc, "chat_template");
    CHECK(cJSON_IsString(tpl) && !strcmp(tpl->valuestring, cJSON_GetObjectItemCaseSensitive(tcj, "chat_template")->valuestring));
    /* eos "<|im_end|>" and pad "<|endoftext|>" resolved to the ids tokenizer.json's added_tokens give them */
    double im_end = -1, eot = -1;
    for (const cJSON *e = cJSON_GetObjectItemCaseSensitive(tj, "added_tokens")->child; e; e = e->next) {
        const char *c = cJSON_GetObjectItemCaseSensitive(e, "content")->valuestring;
        if (!strcmp(c, "<|im_end|>")) im_end = cJSON_GetObjectItemCaseSensitive(e, "id")->valuedouble;
        if (!strcmp(c, "<|endoftext|>")) eot = cJSON_GetObjectItemCaseSensitive(e, "id")->valuedouble;
    }
    const cJSON *eos = cJSON_GetObjectItemCaseSensitive(tc, "eos_token_ids");
    CHECK(im_end > 0 && cJSON_GetArraySize(eos) == 1 && cJSON_GetArrayItem(eos, 0)->valuedouble == im_end);
    const cJSON *pad = cJSON_GetObjectItemCaseSensitive(tc, "pad_token_id");
    CHECK(eot > 0 && cJSON_IsNumber(pad) && pad->valuedouble == eot);
    CHECK(cJSON_GetObjectItemCaseSensitive(tc, "bos_token_id") == NULL);
    cJSON_Delete(tcj);
    cJSON_Delete(tj);
    free(tok);
    free(cfg);
    cmf_file_close(f);
}

static void test_errors(void) {
    char dir[4096], p[4200];
    snprintf(dir, sizeof dir, "%s", tmp_path("hf_bad"));
    mkdir(dir, 0755);
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    copy_file(shared_path("data/hf-tiny/llama/model.safetensors"), p);
    snprintf(p, sizeof p, "%s/config.json", dir);
    const char *out = tmp_path("conv_bad.cmf");
    unlink(out);
    warns w = {0, "", ""};
    cmf_convert_opts o = make_opts(CMF_DT_F32, &w);
    struct {
        const char *config, *needle;
        cmf_status st;
    } cases[] = {
        {"{\"model_type\": \"llama\", \"hidden_size\": 64", "malformed", CMF_E_FORMAT},
        {"{\"model_type\": \"bert\"}", "bert", CMF_E_UNSUPPORTED},
        {"{\"model_type\": \"llama\", \"hidden_size\": 64}", "intermediate_size", CMF_E_FORMAT},
        {"{\"model_type\": \"llama\", \"hidden_size\": 64, \"intermediate_size\": 160, \"num_hidden_layers\": 3,"
         "\"num_attention_heads\": 8, \"vocab_size\": 1024, \"max_position_embeddings\": 512, \"hidden_act\": \"relu\"}",
         "relu", CMF_E_UNSUPPORTED},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        FILE *fp = fopen(p, "w");
        fputs(cases[i].config, fp);
        fclose(fp);
        cmf_status s = cmf_convert_hf(dir, out, &o);
        CHECK_MSG(s == cases[i].st && strstr(cmf_last_error(), cases[i].needle), "case %zu: %d '%s'", i, s,
                  cmf_last_error());
        CHECK(access(out, F_OK) != 0);
    }
    CHECK(cmf_convert_hf(tmp_path("no_such_dir"), out, &o) != CMF_OK);
    /* a target dtype the converter does not write */
    fclose(fopen(p, "w"));
    copy_file(shared_path("data/hf-tiny/llama/config.json"), p);
    o.quant = CMF_DT_VBIT_RO;
    CHECK(cmf_convert_hf(dir, out, &o) == CMF_E_ARG);
    CHECK(access(out, F_OK) != 0);
}

int main(void) {
    test_all_f32();
    test_quant();
    test_tokenizer_bundle();
    test_errors();
    CMF_TEST_END();
}
