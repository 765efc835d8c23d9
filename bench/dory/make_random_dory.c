/* make_random_dory.c — writes a random-weight Dory CMF file for speed measurements (no tokenizer; the output text is
 * meaningless). Default shape: Dory1.0-4B as DORY.md §1.1 gives it (vocab 131072, hidden 2560, MLP 7168, 16 query /
 * 4 KV heads, head_dim 256, 72 sub-layers "S-S-S-*-" x 9, blocks 16 / 40 / 16, untied lm_head with logit_scale:
 * 3,975,229,440 elements, checked). The 4B's own rope_theta, rope_theta_2, window, σ₀ and max positions are unknown
 * (DORY.md §1.3 "UNCERTAIN"): this uses llama.cpp's fixture values (θ 1e7 full / 1e4 sliding, σ₀ 0.0177), the class
 * default window 1024, 2 loops and the last_loop KV mode, as scripts/dory/make_4b_shape.py does; only the window
 * changes the work per token.
 *
 *   make_random_dory OUT.cmf DTYPE [threads 16] [hidden 2560] [cycles 9] [intermediate 7168] [vocab 131072]
 *                    [n_heads 16] [n_kv_heads 4] [head_dim 256]
 *
 * DTYPE: any name `cmf convert --quant` takes (bf16, q8, q8_2f, q4tp, ...); every tensor gets the dtype the
 * converters' §2.0 policy (quant/policy.h) gives its name and shape, so the file holds what `cmf convert --quant
 * DTYPE` would write for such a checkpoint (src/convert/hf_dory.c: tensor names kept, header.arch + arch.dory).
 * `cycles` repeats the 8-sub-layer pattern (blocks 2 / 5 / 2 of 9 cycles scaled: input and output cycles/4.5 each,
 * at least 1), for small test files. Matrices are uniform in ±0.035 (σ 0.02), vectors (0.7..1.3)·σ₀, from a
 * per-tensor xorshift seed (repeatable); tensors are made and encoded `threads` at a time (pthreads), then written
 * in file order (embeddings, layers, lm_head, logit_scale: the converter's order). Prints the bytes of the
 * matrices and the elements. Errors: a message on stderr, exit 1 (2 for bad arguments). */
#include <cjson/cJSON.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmf.h"
#include "format/format.h"
#include "quant/dtype.h"
#include "quant/policy.h"

#define STD0 0.0177 /* σ₀ (init_method_std) */

typedef struct tensor_job {
    char name[96];
    uint32_t rows, cols; /* cols 0: a vector of `rows` values */
    int dtype;
    uint64_t seed;
    uint8_t *buf;
    uint64_t nbytes;
    int rc;
} tensor_job;

static void *make_tensor(void *arg) {
    tensor_job *j = arg;
    const int nd = j->cols ? 2 : 1;
    const uint32_t shape[2] = {j->rows, j->cols};
    const size_t n = (size_t)j->rows * (j->cols ? j->cols : 1);
    j->rc = -1;
    float *f = malloc(n * sizeof(float));
    if (!f || cmf_dtype_nbytes(j->dtype, nd, shape, &j->nbytes) != 1 || !(j->buf = malloc(j->nbytes))) {
        free(f);
        return NULL;
    }
    uint64_t r = j->seed | 1;
    for (size_t i = 0; i < n; i++) {
        r ^= r << 13;
        r ^= r >> 7;
        r ^= r << 17;
        const double u = (double)(r >> 11) * (1.0 / 9007199254740992.0); /* [0, 1) */
        f[i] = (float)(j->cols ? (2 * u - 1) * 0.035 : (0.7 + 0.6 * u) * STD0);
    }
    j->rc = cmf_quantize(j->dtype, nd == 2 ? j->rows : 1, nd == 2 ? j->cols : j->rows, f, j->buf) == CMF_OK ? 0 : -1;
    free(f);
    return NULL;
}

/* header.arch as src/convert/hf_dory.c writes it for this shape (docs/HEADER_KEYS.md "Dory"). */
static cJSON *dory_header(int V, int H, int F, int NH, int NKV, int HD, const char *pattern, int n_in, int n_rec,
                          int n_out, const char *quant_label) {
    const int NL = (int)strlen(pattern);
    cJSON *h = cJSON_CreateObject(), *a = cJSON_AddObjectToObject(h, "arch"), *lt = cJSON_CreateArray();
    cJSON *d = cJSON_CreateObject(), *prof = cJSON_CreateArray();
    cJSON_AddStringToObject(h, "format", "cmf");
    cJSON_AddNumberToObject(h, "version", 2);
    cJSON_AddStringToObject(h, "quant_type", quant_label);
    cJSON_AddStringToObject(a, "arch_name", "dory");
    cJSON_AddNumberToObject(a, "hidden_size", H);
    cJSON_AddNumberToObject(a, "intermediate_size", F);
    cJSON_AddNumberToObject(a, "num_layers", NL);
    cJSON_AddNumberToObject(a, "num_attention_heads", NH);
    cJSON_AddNumberToObject(a, "num_kv_heads", NKV);
    cJSON_AddNumberToObject(a, "head_dim", HD);
    cJSON_AddNumberToObject(a, "vocab_size", V);
    cJSON_AddNumberToObject(a, "max_position_embeddings", 262144);
    cJSON_AddNumberToObject(a, "rms_norm_eps", 1e-6);
    for (int i = 0; i < NL; i++)
        cJSON_AddItemToArray(lt, cJSON_CreateString(pattern[i] == 'S' ? "SlidingAttention" : "FullAttention"));
    cJSON_AddItemToObject(a, "layer_types", lt);
    cJSON_AddNumberToObject(a, "rope_theta", 1e7);
    cJSON_AddStringToObject(a, "rope_pairing", "half");
    cJSON_AddNumberToObject(a, "sliding_window", 1024);
    cJSON_AddBoolToObject(a, "tie_word_embeddings", 0);
    cJSON_AddStringToObject(a, "hidden_act", "silu");
    cJSON_AddItemToObject(a, "dory", d);
    cJSON_AddNumberToObject(d, "format_version", 1);
    cJSON_AddStringToObject(d, "layer_pattern", pattern);
    cJSON_AddNumberToObject(d, "n_input_layers", n_in);
    cJSON_AddNumberToObject(d, "n_recurrent_layers", n_rec);
    cJSON_AddNumberToObject(d, "n_output_layers", n_out);
    cJSON_AddNumberToObject(d, "n_recurrent_loops", 2);
    cJSON_AddStringToObject(d, "recurrent_kv_cache_mode", "last_loop");
    for (int i = 0; i < NL; i++) cJSON_AddItemToArray(prof, cJSON_CreateNumber(pattern[i] == 'S' ? 2 : 1));
    cJSON_AddItemToObject(d, "rope_profile_layers", prof);
    cJSON_AddNumberToObject(d, "rope_theta", 1e7);
    cJSON_AddNumberToObject(d, "rope_theta_2", 1e4);
    cJSON_AddNumberToObject(d, "init_method_std", STD0);
    cJSON_AddNumberToObject(d, "ngpt_alpha_init", 0.05);
    cJSON_AddNumberToObject(d, "gate_init", sqrt((double)H));
    cJSON_AddNumberToObject(d, "swa_window_size", 1024);
    return h;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: make_random_dory OUT.cmf DTYPE [threads 16] [hidden 2560] [cycles 9] "
                        "[intermediate 7168] [vocab 131072] [n_heads 16] [n_kv_heads 4] [head_dim 256]\n");
        return 2;
    }
    const int quant = cmf_dtype_from_name(argv[2]);
    const int T = argc > 3 ? atoi(argv[3]) : 16, H = argc > 4 ? atoi(argv[4]) : 2560;
    const int C = argc > 5 ? atoi(argv[5]) : 9, F = argc > 6 ? atoi(argv[6]) : 7168;
    const int V = argc > 7 ? atoi(argv[7]) : 131072, NH = argc > 8 ? atoi(argv[8]) : 16;
    const int NKV = argc > 9 ? atoi(argv[9]) : 4, HD = argc > 10 ? atoi(argv[10]) : 256;
    if (quant < 0 || T < 1 || H < 8 || C < 3 || C > 100 || F < 8 || V < 2 || NH < 1 || NKV < 1 || NH % NKV ||
        HD < 4 || HD % 4) {
        fprintf(stderr, "make_random_dory: bad dtype '%s' or shape\n", argv[2]);
        return 2;
    }
    /* blocks: 9 cycles -> 2 / 5 / 2 (DORY.md §1.1: 16 input, 40 recurrent, 16 output sub-layers) */
    int c_in = (int)(C / 4.5 + 0.5);
    if (c_in < 1) c_in = 1;
    const int c_rec = C - 2 * c_in;
    if (c_rec < 1) {
        fprintf(stderr, "make_random_dory: %d cycles leave no recurrent block\n", C);
        return 2;
    }
    const int NL = 8 * C;
    char *pattern = malloc((size_t)NL + 1);
    if (!pattern) return 1;
    for (int i = 0; i < NL; i++) pattern[i] = "S-S-S-*-"[i % 8];
    pattern[NL] = 0;
    const uint32_t QD = (uint32_t)NH * (uint32_t)HD, KVD = (uint32_t)NKV * (uint32_t)HD;
    /* the tensor list in the converter's order (src/convert/hf_dory.c emit_all) */
    const size_t nj = 1 + (size_t)NL * 8 + 2;
    tensor_job *jobs = calloc(nj, sizeof *jobs);
    if (!jobs) return 1;
    size_t k = 0;
#define ADD(r, c, ...)                                                                                            \
    do {                                                                                                          \
        snprintf(jobs[k].name, sizeof jobs[k].name, __VA_ARGS__);                                                 \
        jobs[k].rows = (uint32_t)(r), jobs[k].cols = (uint32_t)(c);                                               \
        k++;                                                                                                      \
    } while (0)
    ADD(V, H, "backbone.embeddings.weight");
    for (int i = 0; i < NL; i++) {
        if (pattern[i] == '-') {
            ADD(H, 0, "backbone.layers.%d.mlp_alpha", i);
            ADD(F, H, "backbone.layers.%d.mixer.gate_proj.weight", i);
            ADD(F, H, "backbone.layers.%d.mixer.up_proj.weight", i);
            ADD(F, 0, "backbone.layers.%d.mixer.suv_gate", i);
            ADD(F, 0, "backbone.layers.%d.mixer.suv_up", i);
            ADD(H, F, "backbone.layers.%d.mixer.down_proj.weight", i);
        } else {
            ADD(H, 0, "backbone.layers.%d.attn_alpha", i);
            ADD(QD, H, "backbone.layers.%d.mixer.q_proj.weight", i);
            ADD(KVD, H, "backbone.layers.%d.mixer.k_proj.weight", i);
            ADD(KVD, H, "backbone.layers.%d.mixer.v_proj.weight", i);
            ADD(QD, H, "backbone.layers.%d.mixer.g_proj.weight", i);
            ADD(QD, 0, "backbone.layers.%d.mixer.sqk", i);
            ADD(QD, 0, "backbone.layers.%d.mixer.s_gate", i);
            ADD(H, QD, "backbone.layers.%d.mixer.o_proj.weight", i);
        }
    }
    ADD(V, H, "lm_head.weight");
    ADD(V, 0, "lm_head.logit_scale");
#undef ADD
    const size_t nt = k;
    double elems = 0;
    for (size_t i = 0; i < nt; i++) {
        const uint64_t shape[2] = {jobs[i].rows, jobs[i].cols};
        jobs[i].dtype = cmf_quant_policy(quant, jobs[i].name, jobs[i].cols ? 2 : 1, shape, 0);
        jobs[i].seed = 0x9e3779b97f4a7c15ull * (i + 1);
        elems += (double)jobs[i].rows * (jobs[i].cols ? jobs[i].cols : 1);
    }
    if (H == 2560 && C == 9 && F == 7168 && V == 131072 && NH == 16 && NKV == 4 && HD == 256 && elems != 3975229440.0) {
        fprintf(stderr, "make_random_dory: %.0f elements, the 4B card says 3,975,229,440\n", elems);
        return 1;
    }
    cmf_writer *w = NULL;
    if (cmf_writer_new(argv[1], &w) != CMF_OK) {
        fprintf(stderr, "make_random_dory: %s\n", cmf_last_error());
        return 1;
    }
    int rc = 0;
    double mat_bytes = 0;
    pthread_t *th = malloc((size_t)T * sizeof *th);
    for (size_t c0 = 0; th && c0 < nt && !rc; c0 += (size_t)T) {
        const size_t c1 = c0 + (size_t)T < nt ? c0 + (size_t)T : nt;
        for (size_t i = c0; i < c1; i++) pthread_create(&th[i - c0], NULL, make_tensor, &jobs[i]);
        for (size_t i = c0; i < c1; i++) pthread_join(th[i - c0], NULL);
        for (size_t i = c0; i < c1; i++) {
            tensor_job *j = &jobs[i];
            const uint32_t shape[2] = {j->rows, j->cols};
            if (!rc &&
                (j->rc || cmf_writer_add(w, j->name, j->dtype, j->cols ? 2 : 1, shape, j->buf, j->nbytes) != CMF_OK)) {
                fprintf(stderr, "make_random_dory: %s: %s\n", j->name, j->rc ? "encoding failed" : cmf_last_error());
                rc = 1;
            }
            if (j->cols) mat_bytes += (double)j->nbytes;
            free(j->buf);
            j->buf = NULL;
        }
    }
    if (!th) rc = 1;
    free(th);
    if (rc) {
        cmf_writer_abort(w);
        free(jobs);
        free(pattern);
        return 1;
    }
    char label[32];
    snprintf(label, sizeof label, "%s", cmf_dtype_name(quant) ? cmf_dtype_name(quant) : "?");
    for (char *p = label; *p; p++)
        if (*p >= 'a' && *p <= 'z') *p = (char)(*p - 32);
    cmf_writer_set_header(w, dory_header(V, H, F, NH, NKV, HD, pattern, 8 * c_in, 8 * c_rec, 8 * c_in,
                                         quant == CMF_DT_Q4TP || quant == CMF_DT_Q4_TILED ? "Q4_BLOCK" : label));
    if (cmf_writer_finish(w) != CMF_OK) {
        fprintf(stderr, "make_random_dory: %s\n", cmf_last_error());
        free(jobs);
        free(pattern);
        return 1;
    }
    printf("wrote %s: %s, %.0f elements, %.3f GB of matrices, blocks %d/%d/%d\n", argv[1], argv[2], elems,
           mat_bytes / 1e9, 8 * c_in, 8 * c_rec, 8 * c_in);
    free(jobs);
    free(pattern);
    return 0;
}
