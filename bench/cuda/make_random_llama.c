/* make_random_llama.c — writes a random Llama / Qwen3-shaped CMF file for throughput benchmarks (no tokenizer):
 *   make_random_llama OUT.cmf DTYPE [hidden 2048] [layers 16] [intermediate 8192] [vocab 32000]
 *                     [n_heads 32] [n_kv_heads 8] [head_dim hidden/n_heads] [qk_norm 0] [tied 0] [threads 16]
 * DTYPE is any name `cmf convert --quant` takes (f32, f16, bf16, q8, q8_2f, q4, q4t, q4tp, ...); each tensor gets
 * the dtype of the converters' §2.0 policy (quant/policy.h), so the file holds what `cmf convert --quant DTYPE`
 * would write for a checkpoint of that shape. qk_norm 1 adds Qwen3's per-head q_norm / k_norm (arch "qwen3");
 * tied 1 omits lm_head (tie_word_embeddings). RMSNorm weights are 1, matrices uniform in ±0.5/sqrt(cols) from a
 * per-tensor xorshift seed (repeatable). Tensors are generated and quantized `threads` at a time (pthreads), then
 * written in order. Defaults give the Llama 3.2 1B geometry with a 32000 vocabulary. Used by bench/cuda scripts
 * for shapes whose checkpoint would take too long to write and convert inside one device call, and by
 * tests/cli/cli_signal.sh for an input whose re-encoding takes seconds. Header keys as cmf convert writes them (CMF_FORMAT.md §1.4, docs/HEADER_KEYS.md). */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmf.h"
#include "format/format.h"
#include "quant/dtype.h"
#include "quant/policy.h"

typedef struct job {
    char name[128];
    uint32_t rows, cols; /* rows 1 = a 1-D vector of cols values */
    float fill;          /* != 0: constant (norm weights) */
    int dtype;
    uint64_t seed;
    uint8_t *buf;
    uint64_t nbytes;
    int rc;
} job;

static void *run_job(void *arg) {
    job *j = arg;
    const size_t n = (size_t)j->rows * j->cols;
    float *f = malloc(n * sizeof(float));
    uint32_t shape[2] = {j->rows, j->cols};
    const int nd = j->rows == 1 ? 1 : 2;
    if (nd == 1) shape[0] = j->cols;
    j->rc = -1;
    if (!f || cmf_dtype_nbytes(j->dtype, nd, shape, &j->nbytes) != 1 || !(j->buf = malloc(j->nbytes))) {
        free(f);
        return NULL;
    }
    const float a = 0.5f / sqrtf((float)j->cols);
    uint64_t r = j->seed | 1;
    for (size_t i = 0; i < n; i++) {
        r ^= r << 13;
        r ^= r >> 7;
        r ^= r << 17;
        f[i] = j->fill != 0 ? j->fill : a * (float)((r >> 40) * (1.0 / (1ull << 23)) - 1.0);
    }
    j->rc = cmf_quantize(j->dtype, nd == 1 ? 1 : j->rows, j->cols, f, j->buf) == CMF_OK ? 0 : -1;
    free(f);
    return NULL;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: make_random_llama OUT.cmf DTYPE [hidden] [layers] [intermediate] [vocab] [n_heads] "
                        "[n_kv_heads] [head_dim] [qk_norm 0|1] [tied 0|1] [threads]\n");
        return 2;
    }
    const int quant = cmf_dtype_from_name(argv[2]);
    const int D = argc > 3 ? atoi(argv[3]) : 2048, L = argc > 4 ? atoi(argv[4]) : 16;
    const int F = argc > 5 ? atoi(argv[5]) : 8192, V = argc > 6 ? atoi(argv[6]) : 32000;
    const int NH = argc > 7 ? atoi(argv[7]) : 32, NKV = argc > 8 ? atoi(argv[8]) : 8;
    const int HD = argc > 9 ? atoi(argv[9]) : (NH > 0 ? D / NH : 0);
    const int qk_norm = argc > 10 ? atoi(argv[10]) : 0, tied = argc > 11 ? atoi(argv[11]) : 0;
    const int T = argc > 12 ? atoi(argv[12]) : 16;
    if (quant < 0 || D < 1 || L < 1 || F < 1 || V < 1 || NH < 1 || NKV < 1 || NH % NKV || HD < 8 || HD % 8 || T < 1) {
        fprintf(stderr, "make_random_llama: bad dtype '%s' or shape\n", argv[2]);
        return 2;
    }
    /* the tensor list, in the converters' order (embed, layers, final norm, lm_head) */
    const int per_layer = 9 + 2 * (qk_norm != 0);
    const size_t nj = 1 + (size_t)L * per_layer + 1 + !tied;
    job *jobs = calloc(nj, sizeof(job));
    size_t k = 0;
#define ADD(nm, r, c, fl)                                                                                         \
    do {                                                                                                         \
        snprintf(jobs[k].name, sizeof jobs[k].name, "%s", nm);                                                   \
        jobs[k].rows = (uint32_t)(r), jobs[k].cols = (uint32_t)(c), jobs[k].fill = (fl);                         \
        k++;                                                                                                     \
    } while (0)
    ADD("model.embed_tokens.weight", V, D, 0);
    for (int l = 0; l < L; l++) {
        struct {
            const char *n;
            int rows, cols;
            float fill;
        } t[11] = {{"input_layernorm.weight", 1, D, 1},
                   {"self_attn.q_proj.weight", NH * HD, D, 0},
                   {"self_attn.k_proj.weight", NKV * HD, D, 0},
                   {"self_attn.v_proj.weight", NKV * HD, D, 0},
                   {"self_attn.o_proj.weight", D, NH * HD, 0},
                   {"post_attention_layernorm.weight", 1, D, 1},
                   {"mlp.gate_proj.weight", F, D, 0},
                   {"mlp.up_proj.weight", F, D, 0},
                   {"mlp.down_proj.weight", D, F, 0},
                   {"self_attn.q_norm.weight", 1, HD, 1},
                   {"self_attn.k_norm.weight", 1, HD, 1}};
        for (int i = 0; i < per_layer; i++) {
            char name[128];
            snprintf(name, sizeof name, "model.layers.%d.%s", l, t[i].n);
            ADD(name, t[i].rows, t[i].cols, t[i].fill);
        }
    }
    ADD("model.norm.weight", 1, D, 1);
    if (!tied) ADD("lm_head.weight", V, D, 0);
#undef ADD
    for (size_t i = 0; i < nj; i++) {
        const uint64_t shape[2] = {jobs[i].rows, jobs[i].cols};
        jobs[i].dtype = jobs[i].rows == 1 ? CMF_DT_F32 : cmf_quant_policy(quant, jobs[i].name, 2, shape, 0);
        if (jobs[i].rows == 1 && (quant == CMF_DT_F16 || quant == CMF_DT_BF16)) jobs[i].dtype = CMF_DT_F32;
        jobs[i].seed = 0x9e3779b97f4a7c15ull * (i + 1);
    }
    cmf_writer *w = NULL;
    if (cmf_writer_new(argv[1], &w) != CMF_OK) {
        fprintf(stderr, "make_random_llama: %s\n", cmf_last_error());
        return 1;
    }
    int rc = 0;
    double bytes = 0;
    pthread_t *th = malloc((size_t)T * sizeof(pthread_t));
    for (size_t c0 = 0; c0 < nj && !rc; c0 += (size_t)T) {
        const size_t c1 = c0 + (size_t)T < nj ? c0 + (size_t)T : nj;
        for (size_t i = c0; i < c1; i++) pthread_create(&th[i - c0], NULL, run_job, &jobs[i]);
        for (size_t i = c0; i < c1; i++) pthread_join(th[i - c0], NULL);
        for (size_t i = c0; i < c1; i++) {
            job *j = &jobs[i];
            uint32_t shape[2] = {j->rows, j->cols};
            const int nd = j->rows == 1 ? 1 : 2;
            if (nd == 1) shape[0] = j->cols;
            if (!rc && (j->rc || cmf_writer_add(w, j->name, j->dtype, nd, shape, j->buf, j->nbytes) != CMF_OK)) {
                fprintf(stderr, "make_random_llama: %s: %s\n", j->name, cmf_last_error());
                rc = 1;
            }
            if (nd == 2) bytes += (double)j->nbytes;
            free(j->buf);
            j->buf = NULL;
        }
    }
    free(th);
    if (rc) {
        cmf_writer_abort(w);
        free(jobs);
        return 1;
    }
    cJSON *h = cJSON_CreateObject(), *a = cJSON_AddObjectToObject(h, "arch"), *lt = cJSON_CreateArray();
    cJSON_AddStringToObject(h, "format", "cmf");
    cJSON_AddNumberToObject(h, "version", 2);
    cJSON_AddStringToObject(a, "arch_name", qk_norm ? "qwen3" : "llama");
    cJSON_AddNumberToObject(a, "hidden_size", D);
    cJSON_AddNumberToObject(a, "intermediate_size", F);
    cJSON_AddNumberToObject(a, "num_layers", L);
    cJSON_AddNumberToObject(a, "num_attention_heads", NH);
    cJSON_AddNumberToObject(a, "num_kv_heads", NKV);
    cJSON_AddNumberToObject(a, "head_dim", HD);
    cJSON_AddNumberToObject(a, "vocab_size", V);
    for (int l = 0; l < L; l++) cJSON_AddItemToArray(lt, cJSON_CreateString("FullAttention"));
    cJSON_AddItemToObject(a, "layer_types", lt);
    cJSON_AddNumberToObject(a, "rms_norm_eps", 1e-6);
    cJSON_AddNumberToObject(a, "max_position_embeddings", 40960);
    cJSON_AddStringToObject(a, "norm_style", "qwen");
    cJSON_AddNumberToObject(a, "rope_theta", qk_norm ? 1000000 : 500000);
    cJSON_AddStringToObject(a, "rope_pairing", "half");
    cJSON_AddBoolToObject(a, "tie_word_embeddings", tied != 0);
    cJSON_AddStringToObject(a, "hidden_act", "silu");
    char label[32];
    snprintf(label, sizeof label, "%s", cmf_dtype_name(quant) ? cmf_dtype_name(quant) : "?");
    for (char *p = label; *p; p++)
        if (*p >= 'a' && *p <= 'z') *p = (char)(*p - 32);
    cJSON_AddStringToObject(h, "quant_type", quant == CMF_DT_Q4TP || quant == CMF_DT_Q4_TILED ? "Q4_BLOCK" : label);
    cmf_writer_set_header(w, h);
    if (cmf_writer_finish(w) != CMF_OK) {
        fprintf(stderr, "make_random_llama: %s\n", cmf_last_error());
        free(jobs);
        return 1;
    }
    const double params = (double)V * D * (2 - (tied != 0)) +
                          (double)L * (2.0 * D * NH * HD + 2.0 * D * NKV * HD + 3.0 * D * F);
    printf("wrote %s: %s, %.4g parameters, %.3f GB of matrices\n", argv[1], argv[2], params, bytes / 1e9);
    free(jobs);
    return 0;
}
