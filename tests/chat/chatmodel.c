/* chatmodel.c — see chatmodel.h. */
#include "chatmodel.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cjson/cJSON.h>

#include "convert/convert.h"
#include "quant/dtype.h"
#include "testutil.h"
#include "util/fileio.h"

enum { HIDDEN = 16, N_HEADS = 2, N_KV = 1, HEAD_DIM = 8, FFN = 32, N_LAYERS = 1 };

static int save(const char *path, const void *p, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(p, 1, n, f) != n) {
        fprintf(stderr, "chatmodel: cannot write %s\n", path);
        if (f) fclose(f);
        return -1;
    }
    return fclose(f) ? -1 : 0;
}

static int copy(const char *from, const char *to) {
    char *text = NULL;
    size_t len = 0;
    if (cmf_read_file(from, &text, &len) != CMF_OK) {
        fprintf(stderr, "chatmodel: cannot read %s: %s\n", from, cmf_last_error());
        return -1;
    }
    int rc = save(to, text, len);
    free(text);
    return rc;
}

typedef struct st_tensor {
    char name[96];
    uint32_t rows, cols; /* cols 0: 1-D */
} st_tensor;

/* Writes a safetensors file with the tensors in `t`: norms are 1, everything else uniform in [-0.5, 0.5) from a
 * fixed LCG (the model's outputs are random text; the tests only need it to run deterministically). */
static int write_safetensors(const char *path, const st_tensor *t, int n) {
    cJSON *h = cJSON_CreateObject();
    uint64_t off = 0;
    for (int i = 0; i < n; i++) {
        cJSON *e = cJSON_AddObjectToObject(h, t[i].name);
        cJSON_AddStringToObject(e, "dtype", "F32");
        cJSON *shape = cJSON_AddArrayToObject(e, "shape");
        cJSON_AddItemToArray(shape, cJSON_CreateNumber(t[i].rows));
        if (t[i].cols) cJSON_AddItemToArray(shape, cJSON_CreateNumber(t[i].cols));
        uint64_t bytes = (uint64_t)t[i].rows * (t[i].cols ? t[i].cols : 1) * 4;
        cJSON *offs = cJSON_AddArrayToObject(e, "data_offsets");
        cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)off));
        cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)(off + bytes)));
        off += bytes;
    }
    char *json = cJSON_PrintUnformatted(h);
    cJSON_Delete(h);
    if (!json) return -1;
    size_t hl = strlen(json);
    FILE *f = fopen(path, "wb");
    if (!f) {
        free(json);
        return -1;
    }
    uint8_t len8[8];
    for (int i = 0; i < 8; i++) len8[i] = (uint8_t)((uint64_t)hl >> (8 * i));
    int bad = fwrite(len8, 1, 8, f) != 8 || fwrite(json, 1, hl, f) != hl;
    free(json);
    uint64_t state = 0x9E3779B97F4A7C15ULL;
    float buf[4096];
    for (int i = 0; i < n && !bad; i++) {
        uint64_t count = (uint64_t)t[i].rows * (t[i].cols ? t[i].cols : 1);
        int is_norm = t[i].cols == 0;
        while (count && !bad) {
            size_t k = count < 4096 ? (size_t)count : 4096;
            for (size_t j = 0; j < k; j++) {
                state = state * 6364136223846793005ULL + 1442695040888963407ULL;
                buf[j] = is_norm ? 1.0f : (float)((double)(state >> 40) / (double)(1 << 24) - 0.5);
            }
            bad = fwrite(buf, 4, k, f) != k;
            count -= k;
        }
    }
    if (fclose(f) || bad) {
        fprintf(stderr, "chatmodel: cannot write %s\n", path);
        return -1;
    }
    return 0;
}

static int add(st_tensor *t, int *n, const char *name, uint32_t rows, uint32_t cols) {
    snprintf(t[*n].name, sizeof t[*n].name, "%s", name);
    t[*n].rows = rows;
    t[*n].cols = cols;
    (*n)++;
    return 0;
}

int chat_make_model(const char *out_dir, const char *tok, const char *arch, int vocab, int bos, int eos,
                    char *path) {
    char dir[512], p[640], src[640];
    mkdir(out_dir, 0755);
    snprintf(dir, sizeof dir, "%s/%s-hf", out_dir, tok);
    mkdir(dir, 0755);
    int qwen = !strcmp(arch, "qwen3");

    /* config.json: the hf-tiny one of this architecture, shrunk */
    snprintf(src, sizeof src, "%s", shared_path(qwen ? "data/hf-tiny/qwen3/config.json" : "data/hf-tiny/llama/config.json"));
    char *text = NULL;
    size_t len = 0;
    if (cmf_read_file(src, &text, &len) != CMF_OK) {
        fprintf(stderr, "chatmodel: %s\n", cmf_last_error());
        return -1;
    }
    cJSON *cfg = cJSON_Parse(text);
    free(text);
    if (!cfg) return -1;
    struct { const char *k; double v; } set[] = {
        {"hidden_size", HIDDEN}, {"num_attention_heads", N_HEADS}, {"num_key_value_heads", N_KV},
        {"head_dim", HEAD_DIM}, {"intermediate_size", FFN}, {"num_hidden_layers", N_LAYERS},
        {"vocab_size", vocab}, {"max_position_embeddings", 1024}};
    for (size_t i = 0; i < sizeof set / sizeof set[0]; i++)
        cJSON_ReplaceItemInObjectCaseSensitive(cfg, set[i].k, cJSON_CreateNumber(set[i].v));
    cJSON_ReplaceItemInObjectCaseSensitive(cfg, "bos_token_id", bos >= 0 ? cJSON_CreateNumber(bos) : cJSON_CreateNull());
    cJSON_ReplaceItemInObjectCaseSensitive(cfg, "eos_token_id", eos >= 0 ? cJSON_CreateNumber(eos) : cJSON_CreateNull());
    if (cJSON_GetObjectItemCaseSensitive(cfg, "layer_types")) {
        cJSON *lt = cJSON_CreateArray();
        for (int l = 0; l < N_LAYERS; l++) cJSON_AddItemToArray(lt, cJSON_CreateString("full_attention"));
        cJSON_ReplaceItemInObjectCaseSensitive(cfg, "layer_types", lt);
    }
    char *cj = cJSON_Print(cfg);
    cJSON_Delete(cfg);
    snprintf(p, sizeof p, "%s/config.json", dir);
    int rc = cj ? save(p, cj, strlen(cj)) : -1;
    free(cj);
    if (rc) return -1;

    /* weights */
    st_tensor t[64];
    int n = 0;
    char name[96];
    add(t, &n, "model.embed_tokens.weight", (uint32_t)vocab, HIDDEN);
    for (int l = 0; l < N_LAYERS; l++) {
#define L(s) (snprintf(name, sizeof name, "model.layers.%d.%s", l, s), name)
        add(t, &n, L("input_layernorm.weight"), HIDDEN, 0);
        add(t, &n, L("self_attn.q_proj.weight"), N_HEADS * HEAD_DIM, HIDDEN);
        add(t, &n, L("self_attn.k_proj.weight"), N_KV * HEAD_DIM, HIDDEN);
        add(t, &n, L("self_attn.v_proj.weight"), N_KV * HEAD_DIM, HIDDEN);
        add(t, &n, L("self_attn.o_proj.weight"), HIDDEN, N_HEADS * HEAD_DIM);
        if (qwen) {
            add(t, &n, L("self_attn.q_norm.weight"), HEAD_DIM, 0);
            add(t, &n, L("self_attn.k_norm.weight"), HEAD_DIM, 0);
        }
        add(t, &n, L("post_attention_layernorm.weight"), HIDDEN, 0);
        add(t, &n, L("mlp.gate_proj.weight"), FFN, HIDDEN);
        add(t, &n, L("mlp.up_proj.weight"), FFN, HIDDEN);
        add(t, &n, L("mlp.down_proj.weight"), HIDDEN, FFN);
#undef L
    }
    add(t, &n, "model.norm.weight", HIDDEN, 0);
    if (!qwen) add(t, &n, "lm_head.weight", (uint32_t)vocab, HIDDEN);
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    if (write_safetensors(p, t, n)) return -1;

    /* the real tokenizer bundle */
    const char *files[] = {"tokenizer.json", "tokenizer_config.json"};
    for (int i = 0; i < 2; i++) {
        char rel[128];
        snprintf(rel, sizeof rel, "data/tokenizers/%s/%s", tok, files[i]);
        snprintf(src, sizeof src, "%s", shared_path(rel));
        snprintf(p, sizeof p, "%s/%s", dir, files[i]);
        if (copy(src, p)) return -1;
    }
    snprintf(path, 512, "%s/%s.cmf", out_dir, tok);
    cmf_convert_opts opts = {.quant = CMF_DT_F16};
    if (cmf_convert_hf(dir, path, &opts) != CMF_OK) {
        fprintf(stderr, "chatmodel: converting %s: %s\n", dir, cmf_last_error());
        return -1;
    }
    return 0;
}
