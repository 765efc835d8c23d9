/* Dtype consistency on the hf-tiny checkpoints (shared/data/hf-tiny/<case>, Hugging Face random-weight models of
 * real architectures; the input ids are input_0 and input_1 of each case's ref.safetensors, 7 + 40 positions).
 *
 * For every dtype D in f16, bf16, q8_row, q8_2f, q4_block, q4_tiled, q4tp, q2tp and every case:
 *   M_D   = cmf_convert_hf(case, --quant D)       (the §2.0 policy: 1-D tensors f16, q2tp a profile with q4tp)
 *   M_deq = M_D with every tensor replaced by its cmf_dequant f32 decode (same names, shapes, header)
 * so M_D and M_deq hold exactly the same weight values. Then, over every position of every input sequence:
 *   - best CPU path with two-level int8 activations (cmf_cpu_set_act_levels(2)) for the quantized dtypes, f32 FMA
 *     for f16/bf16 (issue 4's bound):
 *       max|logits(M_D) - logits(M_deq)| <= 5e-2 x max|logits(M_deq)|
 *   - best CPU path with the default one-level activations (llama.cpp's Q8_0 rule): these random-weight models
 *     amplify its error, measured 3.4-7.0% of max|logit| with cortiq's encoders and 3.4-13.0% with the searched
 *     ones (gemma2 up to 34.8%); the 13.0% is llama q2tp+search, whose q4tp tensors' other values move the
 *     activations, while its two-level and f32ref rows stay at 2e-4 / 2e-6. Bound 1.5e-1 (gemma2 4e-1), so a
 *     kernel bug (errors of order 1) still fails
 *   - CMF_CPU_F32REF forced (cmf_cpu_set_path; every matmul is cmf_matmul_ref_f32, f32 activations):
 *       max|logits(M_D) - logits(M_deq)| <= 1e-4 x max|logits(M_deq)|
 * The rows without "+search" are written with CMF_Q4_SEARCH=0 (cortiq's encoders); the 4-bit dtypes are run again
 * with the default searched scales (q4_block / q4_tiled: negative scales reach the kernels; q2tp: its q4tp tensors).
 * The measured ratios are printed. The f32 twin itself is checked against transformers by tests/model. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/ops.h"
#include "cmf.h"
#include "convert/convert.h"
#include "convert/safetensors.h"
#include "format/format.h"
#include "quant/dtype.h"
#include "testutil.h"

static const char *CASES[] = {"llama", "mistral-swa", "qwen2", "qwen3", "gemma2", "bf16-llama"};
/* the last four: the 4-bit dtypes written with the searched scales (the default; the others CMF_Q4_SEARCH=0) */
static const int DTYPES[] = {CMF_DT_F16,      CMF_DT_BF16,     CMF_DT_Q8_ROW, CMF_DT_Q8_2F, CMF_DT_Q4_BLOCK,
                             CMF_DT_Q4_TILED, CMF_DT_Q4TP,     CMF_DT_Q2TP,   CMF_DT_Q4_BLOCK, CMF_DT_Q4_TILED,
                             CMF_DT_Q4TP,     CMF_DT_Q2TP};
enum { N_DT = sizeof DTYPES / sizeof DTYPES[0], N_SEARCH = 4, MAX_SEQ = 2 /* input_0, input_1 (7 and 40 tokens); input_2 (100) only adds run time */ };

/* Prefill of ids; malloc'd logits [n][vocab] or NULL. */
static float *eval(cmf_model *m, const int32_t *ids, int n) {
    cmf_session *s = NULL;
    if (cmf_session_new(m, 512, &s) != CMF_OK) return NULL;
    float *lg = malloc((size_t)n * cmf_model_vocab_size(m) * sizeof(float));
    if (lg && cmf_session_prefill(s, ids, n, lg) != CMF_OK) {
        free(lg);
        lg = NULL;
    }
    cmf_session_free(s);
    return lg;
}

/* Writes a copy of src whose every tensor is its f32 decode (header kept, quant_type F32). */
static int write_dequantized(const char *src, const char *dst) {
    cmf_file *f = NULL;
    if (cmf_file_open(src, &f) != CMF_OK) return -1;
    cmf_writer *w = NULL;
    if (cmf_writer_new(dst, &w) != CMF_OK) {
        cmf_file_close(f);
        return -1;
    }
    int rc = 0;
    for (size_t i = 0; i < f->n_tensors && !rc; i++) {
        const cmf_tensor *t = &f->tensors[i];
        const uint64_t n = cmf_tensor_numel(t);
        float *buf = malloc(n * sizeof(float) + 4);
        if (!buf || cmf_dequant(t->dtype, t->ndim, t->shape, t->data, t->nbytes, buf) != CMF_OK ||
            cmf_writer_add(w, t->name, CMF_DT_F32, t->ndim, t->shape, buf, n * 4) != CMF_OK)
            rc = -1;
        free(buf);
    }
    cJSON *h = cJSON_Duplicate(f->header, 1);
    cJSON_DeleteItemFromObjectCaseSensitive(h, "section_hashes");
    cJSON_ReplaceItemInObjectCaseSensitive(h, "quant_type", cJSON_CreateString("F32"));
    cmf_writer_set_header(w, h);
    if (rc) cmf_writer_abort(w);
    else if (cmf_writer_finish(w) != CMF_OK) rc = -1;
    cmf_file_close(f);
    return rc;
}

typedef struct {
    int n_seq, len[MAX_SEQ];
    int32_t *ids[MAX_SEQ];
} inputs;

static int load_inputs(const char *refpath, inputs *in) {
    cmf_safetensors *st = NULL;
    memset(in, 0, sizeof *in);
    if (cmf_st_open(refpath, &st) != CMF_OK) return -1;
    for (int s = 0; s < MAX_SEQ; s++) {
        char key[32];
        snprintf(key, sizeof key, "input_%d", s);
        const cmf_st_tensor *t = cmf_st_find(st, key);
        if (!t) break;
        const int n = (int)cmf_st_numel(t);
        float *f = malloc((size_t)n * sizeof(float));
        in->ids[s] = malloc((size_t)n * sizeof(int32_t));
        cmf_st_to_f32(t, f);
        for (int i = 0; i < n; i++) in->ids[s][i] = (int32_t)f[i];
        free(f);
        in->len[s] = n;
        in->n_seq = s + 1;
    }
    cmf_st_close(st);
    return in->n_seq > 0 ? 0 : -1;
}

/* max|a-b| / max|b| over all sequences' logits of the two models on the current CPU path; -1 on failure. */
static double rel_diff(cmf_model *a, cmf_model *b, const inputs *in) {
    const int V = cmf_model_vocab_size(b);
    double md = 0, mx = 0;
    for (int s = 0; s < in->n_seq; s++) {
        float *la = eval(a, in->ids[s], in->len[s]), *lb = eval(b, in->ids[s], in->len[s]);
        if (!la || !lb) {
            free(la);
            free(lb);
            return -1;
        }
        for (size_t i = 0; i < (size_t)in->len[s] * V; i++) {
            if (fabs(lb[i]) > mx) mx = fabs(lb[i]);
            if (fabs(la[i] - lb[i]) > md) md = fabs(la[i] - lb[i]);
            if (!isfinite(la[i])) md = INFINITY;
        }
        free(la);
        free(lb);
    }
    return mx > 0 ? md / mx : -1;
}

static void check_case(const char *name, int best_path) {
    char dir[1024], ref[1100];
    snprintf(dir, sizeof dir, "%s", shared_path("data/hf-tiny"));
    strncat(dir, "/", sizeof dir - strlen(dir) - 1);
    strncat(dir, name, sizeof dir - strlen(dir) - 1);
    snprintf(ref, sizeof ref, "%s/ref.safetensors", dir);
    inputs in;
    if (load_inputs(ref, &in) != 0) {
        CHECK_MSG(0, "%s: no input_i in %s: %s", name, ref, cmf_last_error());
        return;
    }
    for (int d = 0; d < N_DT; d++) {
        const int dt = DTYPES[d], search = d >= N_DT - N_SEARCH;
        char qp[1200], dp[1200], label[32];
        snprintf(label, sizeof label, "%s%s", cmf_dtype_name(dt), search ? "+search" : "");
        snprintf(qp, sizeof qp, "%s", tmp_path("quant3-"));
        snprintf(qp + strlen(qp), sizeof qp - strlen(qp), "%s-%s.cmf", name, label);
        snprintf(dp, sizeof dp, "%.1180s.deq.cmf", qp);
        cmf_convert_opts opts = {0};
        opts.quant = dt;
        cmf_model *qm = NULL, *dm = NULL;
        setenv("CMF_Q4_SEARCH", search ? "1" : "0", 1);
        const cmf_status cst = cmf_convert_hf(dir, qp, &opts);
        unsetenv("CMF_Q4_SEARCH");
        const int ok = cst == CMF_OK && write_dequantized(qp, dp) == 0 &&
                       cmf_model_load(qp, NULL, &qm) == CMF_OK && cmf_model_load(dp, NULL, &dm) == CMF_OK;
        CHECK_MSG(ok, "%s %s: convert/dequantize/load: %s", name, label, cmf_last_error());
        if (ok) {
            CHECK(cmf_cpu_set_path(best_path) == CMF_OK);
            CHECK(cmf_cpu_set_act_levels(2) == CMF_OK);
            const double r_best = rel_diff(qm, dm, &in);
            CHECK(cmf_cpu_set_act_levels(1) == CMF_OK);
            const double r_one = rel_diff(qm, dm, &in);
            CHECK(cmf_cpu_set_path(CMF_CPU_F32REF) == CMF_OK);
            const double r_ref = rel_diff(qm, dm, &in);
            CHECK(cmf_cpu_set_path(best_path) == CMF_OK);
            printf("%-12s %-15s max|diff|/max|logit| vs dequantized f32: %s two-level %.2e  one-level %.2e   "
                   "f32ref %.2e\n", name, label, cmf_cpu_path_name(best_path), r_best, r_one, r_ref);
            CHECK_MSG(r_best >= 0 && r_best <= 5e-2, "%s %s: %s path, two levels: %g > 5e-2 (or eval failed: %s)",
                      name, label, cmf_cpu_path_name(best_path), r_best, cmf_last_error());
            const double one_bound = strcmp(name, "gemma2") == 0 ? 4e-1 : 1.5e-1;
            CHECK_MSG(r_one >= 0 && r_one <= one_bound, "%s %s: %s path, one level: %g > %g (or eval failed: %s)",
                      name, label, cmf_cpu_path_name(best_path), r_one, one_bound, cmf_last_error());
            CHECK_MSG(r_ref >= 0 && r_ref <= 1e-4, "%s %s: f32ref path: %g > 1e-4 (or eval failed: %s)", name,
                      label, r_ref, cmf_last_error());
        }
        cmf_model_free(qm);
        cmf_model_free(dm);
        remove(qp);
        remove(dp);
    }
    for (int s = 0; s < in.n_seq; s++) free(in.ids[s]);
}

int main(int argc, char **argv) {
    const int best = cmf_cpu_path();
    /* the switch itself: supported everywhere, named, and not what detection picks */
    CHECK(cmf_cpu_path_supported(CMF_CPU_F32REF));
    CHECK(!strcmp(cmf_cpu_path_name(CMF_CPU_F32REF), "f32ref"));
    CHECK(best != CMF_CPU_F32REF);
    for (size_t i = 0; i < sizeof CASES / sizeof *CASES; i++)
        if (argc < 2 || !strcmp(argv[1], CASES[i])) check_case(CASES[i], best);
    CMF_TEST_END();
}
