/* make_random_llama.c — writes a random Llama-shaped CMF file for throughput benchmarks (no tokenizer):
 *   make_random_llama OUT.cmf f16|q8_row|f32 [hidden 2048] [layers 16] [intermediate 8192] [vocab 32000]
 * Shape otherwise: 32 heads of head_dim hidden/32, 8 KV heads, untied lm_head, RMSNorm weights 1, matrices
 * uniform in ±0.5/sqrt(cols) from a fixed xorshift seed (so runs are repeatable). Defaults give 1.07e9 parameters
 * (the Llama 3.2 1B geometry with a 32000 vocabulary). Header keys as cmf convert writes them (CMF_FORMAT.md §1.4). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmf.h"
#include "format/format.h"
#include "quant/dtype.h"

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static float urand(void) { /* uniform in [-1, 1) */
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (float)((rng >> 40) * (1.0 / (1ull << 23)) - 1.0);
}

static int add(cmf_writer *w, const char *name, int dtype, uint32_t rows, uint32_t cols, float fill) {
    const size_t n = (size_t)rows * cols;
    float *f = malloc(n * sizeof(float));
    if (!f) return -1;
    const float a = 0.5f / sqrtf((float)cols);
    for (size_t i = 0; i < n; i++) f[i] = fill != 0 ? fill : a * urand();
    uint32_t shape[2] = {rows, cols};
    const int nd = rows == 1 ? 1 : 2;
    if (nd == 1) shape[0] = cols;
    const int dt = nd == 1 ? CMF_DT_F32 : dtype;
    uint64_t nbytes = 0;
    cmf_dtype_nbytes(dt, nd, shape, &nbytes);
    uint8_t *buf = malloc(nbytes);
    int rc = !buf || cmf_quantize(dt, nd == 1 ? 1 : rows, cols, f, buf) != CMF_OK ||
             cmf_writer_add(w, name, dt, nd, shape, buf, nbytes) != CMF_OK;
    if (rc) fprintf(stderr, "make_random_llama: %s: %s\n", name, cmf_last_error());
    free(buf);
    free(f);
    return rc ? -1 : 0;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: make_random_llama OUT.cmf f16|q8_row|f32 [hidden] [layers] [intermediate] [vocab]\n");
        return 2;
    }
    const int dtype = cmf_dtype_from_name(argv[2]);
    const int D = argc > 3 ? atoi(argv[3]) : 2048, L = argc > 4 ? atoi(argv[4]) : 16;
    const int F = argc > 5 ? atoi(argv[5]) : 8192, V = argc > 6 ? atoi(argv[6]) : 32000;
    const int NH = 32, NKV = 8, HD = D / NH;
    if ((dtype != CMF_DT_F16 && dtype != CMF_DT_Q8_ROW && dtype != CMF_DT_F32) || D % NH || HD % 8) {
        fprintf(stderr, "make_random_llama: bad dtype '%s' or hidden %d\n", argv[2], D);
        return 2;
    }
    cmf_writer *w = NULL;
    if (cmf_writer_new(argv[1], &w) != CMF_OK) {
        fprintf(stderr, "make_random_llama: %s\n", cmf_last_error());
        return 1;
    }
    int rc = add(w, "model.embed_tokens.weight", dtype, V, D, 0);
    char name[128];
    for (int l = 0; l < L && !rc; l++) {
        struct {
            const char *n;
            int rows, cols;
            float fill;
        } t[9] = {{"input_layernorm.weight", 1, D, 1},
                  {"self_attn.q_proj.weight", NH * HD, D, 0},
                  {"self_attn.k_proj.weight", NKV * HD, D, 0},
                  {"self_attn.v_proj.weight", NKV * HD, D, 0},
                  {"self_attn.o_proj.weight", D, NH * HD, 0},
                  {"post_attention_layernorm.weight", 1, D, 1},
                  {"mlp.gate_proj.weight", F, D, 0},
                  {"mlp.up_proj.weight", F, D, 0},
                  {"mlp.down_proj.weight", D, F, 0}};
        for (int i = 0; i < 9 && !rc; i++) {
            snprintf(name, sizeof name, "model.layers.%d.%s", l, t[i].n);
            rc = add(w, name, dtype, (uint32_t)t[i].rows, (uint32_t)t[i].cols, t[i].fill);
        }
    }
    if (!rc) rc = add(w, "model.norm.weight", dtype, 1, D, 1);
    if (!rc) rc = add(w, "lm_head.weight", dtype, V, D, 0);
    if (rc) {
        cmf_writer_abort(w);
        return 1;
    }
    cJSON *h = cJSON_CreateObject(), *a = cJSON_AddObjectToObject(h, "arch"), *lt = cJSON_CreateArray();
    cJSON_AddStringToObject(h, "format", "cmf");
    cJSON_AddNumberToObject(h, "version", 2);
    cJSON_AddStringToObject(a, "arch_name", "llama");
    cJSON_AddNumberToObject(a, "hidden_size", D);
    cJSON_AddNumberToObject(a, "intermediate_size", F);
    cJSON_AddNumberToObject(a, "num_layers", L);
    cJSON_AddNumberToObject(a, "num_attention_heads", NH);
    cJSON_AddNumberToObject(a, "num_kv_heads", NKV);
    cJSON_AddNumberToObject(a, "head_dim", HD);
    cJSON_AddNumberToObject(a, "vocab_size", V);
    for (int l = 0; l < L; l++) cJSON_AddItemToArray(lt, cJSON_CreateString("FullAttention"));
    cJSON_AddItemToObject(a, "layer_types", lt);
    cJSON_AddNumberToObject(a, "rms_norm_eps", 1e-5);
    cJSON_AddNumberToObject(a, "max_position_embeddings", 4096);
    cJSON_AddStringToObject(a, "norm_style", "qwen");
    cJSON_AddNumberToObject(a, "rope_theta", 500000);
    cJSON_AddStringToObject(a, "rope_pairing", "half");
    cJSON_AddBoolToObject(a, "tie_word_embeddings", 0);
    cJSON_AddStringToObject(a, "hidden_act", "silu");
    cJSON_AddStringToObject(h, "quant_type", dtype == CMF_DT_Q8_ROW ? "Q8_ROW" : dtype == CMF_DT_F16 ? "F16" : "F32");
    cmf_writer_set_header(w, h);
    if (cmf_writer_finish(w) != CMF_OK) {
        fprintf(stderr, "make_random_llama: %s\n", cmf_last_error());
        return 1;
    }
    const double params = (double)V * D * 2 + (double)L * (2.0 * D * NH * HD + 2.0 * D * NKV * HD + 3.0 * D * F);
    printf("wrote %s: %s, %.3g parameters\n", argv[1], argv[2], params);
    return 0;
}
