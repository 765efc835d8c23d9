/* testmodel.c — see testmodel.h. Weights: uniform in [-a, a] with a = sqrt(3 / fan_in) (unit-variance outputs),
 * norms 1, embeddings uniform in [-1, 1]; a 64-bit LCG drives them, so one seed gives one model. */
#include "testmodel.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "convert/convert.h"

typedef struct tensor_def {
    char name[96];
    int rows, cols; /* cols 0: a vector of rows */
    int kind;       /* 0 matrix, 1 norm (ones), 2 embedding */
} tensor_def;

static float next_uniform(unsigned long long *st) {
    *st = *st * 6364136223846793005ULL + 1442695040888963407ULL;
    return (float)((double)(*st >> 11) / 9007199254740992.0) * 2.0f - 1.0f;
}

static int copy_file(const char *src, const char *dst) {
    FILE *in = fopen(src, "rb"), *out = in ? fopen(dst, "wb") : NULL;
    int rc = in && out ? 0 : -1;
    char buf[65536];
    size_t n;
    while (!rc && (n = fread(buf, 1, sizeof buf, in)) > 0)
        if (fwrite(buf, 1, n, out) != n) rc = -1;
    if (in) fclose(in);
    if (out && fclose(out)) rc = -1;
    return rc;
}

static int write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    if (!f) return -1;
    int rc = fputs(text, f) < 0 ? -1 : 0;
    return fclose(f) || rc ? -1 : 0;
}

cmf_status testmodel_write(const testmodel_spec *sp, const char *workdir, const char *out_path) {
    char path[1024], src[1024];
    mkdir(workdir, 0755);
    int nd = 0;
    int chain = sp->n_chain > 0;
    tensor_def *t = calloc((size_t)(4 + sp->layers * 11), sizeof *t);
    if (!t) return CMF_E_NOMEM;
    snprintf(t[nd].name, sizeof t[nd].name, "model.embed_tokens.weight");
    t[nd].rows = sp->vocab, t[nd].cols = sp->hidden, t[nd++].kind = 2;
    for (int l = 0; l < sp->layers; l++) {
        const struct {
            const char *n;
            int r, c, k;
        } L[] = {
            {"input_layernorm", sp->hidden, 0, 1},
            {"post_attention_layernorm", sp->hidden, 0, 1},
            {"self_attn.q_proj", sp->n_heads * sp->head_dim, sp->hidden, 0},
            {"self_attn.k_proj", sp->n_kv_heads * sp->head_dim, sp->hidden, 0},
            {"self_attn.v_proj", sp->n_kv_heads * sp->head_dim, sp->hidden, 0},
            {"self_attn.o_proj", sp->hidden, sp->n_heads * sp->head_dim, chain ? 4 : 0},
            {"self_attn.q_norm", sp->head_dim, 0, 1},
            {"self_attn.k_norm", sp->head_dim, 0, 1},
            {"mlp.gate_proj", sp->intermediate, sp->hidden, 0},
            {"mlp.up_proj", sp->intermediate, sp->hidden, 0},
            {"mlp.down_proj", sp->hidden, sp->intermediate, chain ? 4 : 0},
        };
        for (size_t i = 0; i < sizeof L / sizeof L[0]; i++) {
            snprintf(t[nd].name, sizeof t[nd].name, "model.layers.%d.%s.weight", l, L[i].n);
            t[nd].rows = L[i].r, t[nd].cols = L[i].c, t[nd++].kind = L[i].k;
        }
    }
    snprintf(t[nd].name, sizeof t[nd].name, "model.norm.weight");
    t[nd].rows = sp->hidden, t[nd].cols = 0, t[nd++].kind = 1;
    if (chain) {
        snprintf(t[nd].name, sizeof t[nd].name, "lm_head.weight");
        t[nd].rows = sp->vocab, t[nd].cols = sp->hidden, t[nd++].kind = 3;
    }

    /* safetensors: u64 header length, JSON header (padded with spaces to 8 bytes), then the data */
    size_t hcap = (size_t)nd * 160 + 64, hl = 0;
    char *hdr = malloc(hcap);
    unsigned long long off = 0;
    hl += (size_t)snprintf(hdr + hl, hcap - hl, "{");
    for (int i = 0; i < nd; i++) {
        unsigned long long bytes = 4ULL * (unsigned long long)t[i].rows * (unsigned long long)(t[i].cols ? t[i].cols : 1);
        if (t[i].cols)
            hl += (size_t)snprintf(hdr + hl, hcap - hl, "%s\"%s\":{\"dtype\":\"F32\",\"shape\":[%d,%d],\"data_offsets\":[%llu,%llu]}",
                                   i ? "," : "", t[i].name, t[i].rows, t[i].cols, off, off + bytes);
        else
            hl += (size_t)snprintf(hdr + hl, hcap - hl, "%s\"%s\":{\"dtype\":\"F32\",\"shape\":[%d],\"data_offsets\":[%llu,%llu]}",
                                   i ? "," : "", t[i].name, t[i].rows, off, off + bytes);
        off += bytes;
    }
    hl += (size_t)snprintf(hdr + hl, hcap - hl, "}");
    while (hl % 8) hdr[hl++] = ' ';
    snprintf(path, sizeof path, "%s/model.safetensors", workdir);
    FILE *f = fopen(path, "wb");
    cmf_status st = f ? CMF_OK : CMF_E_IO;
    unsigned long long hl64 = hl, rng = 0x853c49e6748fea9bULL ^ sp->seed;
    if (f && (fwrite(&hl64, 8, 1, f) != 1 || fwrite(hdr, 1, hl, f) != hl)) st = CMF_E_IO;
    float *row = malloc(sizeof(float) * (size_t)(sp->intermediate > sp->hidden ? sp->intermediate : sp->hidden) * 8);
    for (int i = 0; i < nd && st == CMF_OK; i++) {
        int cols = t[i].cols ? t[i].cols : t[i].rows, rows = t[i].cols ? t[i].rows : 1;
        float a = t[i].kind == 0 ? sqrtf(3.0f / (float)cols) : 1.0f;
        for (int r = 0; r < rows && st == CMF_OK; r++) {
            for (int c = 0; c < cols; c++) row[c] = t[i].kind == 1 ? 1.0f : a * next_uniform(&rng);
            if (t[i].kind == 4) memset(row, 0, sizeof(float) * (size_t)cols);
            if (chain && (t[i].kind == 2 || t[i].kind == 3)) { /* the chain's one-hot embeddings and successors */
                int hot = -1;
                for (int k = 0; k < sp->n_chain && k < cols; k++) {
                    if (t[i].kind == 2 && sp->chain[k] == r) hot = k;
                    if (t[i].kind == 3 && (k + 1 < sp->n_chain ? sp->chain[k + 1] : sp->chain_end) == r) hot = k;
                }
                for (int c = 0; c < cols; c++) row[c] *= 0.01f;
                if (hot >= 0) {
                    memset(row, 0, sizeof(float) * (size_t)cols);
                    row[hot] = t[i].kind == 2 ? 1.0f : 10.0f;
                }
            }
            if (fwrite(row, sizeof(float), (size_t)cols, f) != (size_t)cols) st = CMF_E_IO;
        }
    }
    free(row);
    free(hdr);
    if (f && fclose(f)) st = CMF_E_IO;

    char cfg[2048];
    snprintf(cfg, sizeof cfg,
             "{\"architectures\":[\"Qwen3ForCausalLM\"],\"model_type\":\"qwen3\",\"attention_bias\":false,"
             "\"head_dim\":%d,\"hidden_act\":\"silu\",\"hidden_size\":%d,\"intermediate_size\":%d,"
             "\"max_position_embeddings\":4096,\"num_attention_heads\":%d,\"num_hidden_layers\":%d,"
             "\"num_key_value_heads\":%d,\"rms_norm_eps\":1e-06,\"rope_theta\":1000000.0,"
             "\"tie_word_embeddings\":%s,\"torch_dtype\":\"float32\",\"vocab_size\":%d}",
             sp->head_dim, sp->hidden, sp->intermediate, sp->n_heads, sp->layers, sp->n_kv_heads,
             chain ? "false" : "true", sp->vocab);
    snprintf(path, sizeof path, "%s/config.json", workdir);
    if (st == CMF_OK && write_text(path, cfg)) st = CMF_E_IO;
    snprintf(cfg, sizeof cfg, "{\"eos_token_id\":%s}", sp->eos_json ? sp->eos_json : "null");
    snprintf(path, sizeof path, "%s/generation_config.json", workdir);
    if (st == CMF_OK && write_text(path, cfg)) st = CMF_E_IO;
    const char *files[] = {"tokenizer.json", "tokenizer_config.json"};
    for (int i = 0; i < 2 && st == CMF_OK; i++) {
        snprintf(src, sizeof src, "%s/%s", sp->tokenizer_dir, files[i]);
        snprintf(path, sizeof path, "%s/%s", workdir, files[i]);
        struct stat sb;
        if (stat(src, &sb) == 0 && copy_file(src, path)) st = CMF_E_IO;
    }
    free(t);
    if (st != CMF_OK) return st;
    cmf_convert_opts o = {0};
    o.quant = sp->quant;
    return cmf_convert_hf(workdir, out_path, &o);
}
