/* Parity with Hugging Face transformers on tiny checkpoints (random weights, real architectures).
 * References: shared/data/hf-tiny/<case>/ref.safetensors and tests/data/hf-extra/<case>/ref.safetensors (made by
 * scripts/reference/make_hf_refs.py: Phi-3, Gemma 3, Llama 3.1 rope scaling, and bf16-llama's reference
 * recomputed in float32 — the shipped one was computed in bfloat16 arithmetic), transformers 5.17, float32, eager.
 *  - f32: logits within 1e-4 x max|logit| at every position, and the 24 greedy tokens equal greedy_i;
 *  - q8_row and q8_2f: logits within 1e-1 x max|logit| of our own f32 forward on the same weights dequantized
 *    (so only the kernels and their int8 activations differ), and teacher-forced top-1 agreement with logits_i on
 *    >= 80% of positions. The activations are quantized as llama.cpp's Q8_0 (one int8 level per block of 32,
 *    d = absmax/127: issue 4's decision, for decode and prefill speed), which on these random-weight models puts
 *    the logits 1.6-8.5% of max|logit| off the dequantized twin (measured on the AVX-512, AVX2 and scalar paths;
 *    worst qwen2 seq 2 q8_row 8.5%) and top-1 agreement at 85.0-93.9% (the earlier two-level activations gave
 *    <= 2e-3 and 85-94%). A broken kernel is off by the order of max|logit| itself, so 1e-1 still catches it.
 *    Exception, measured and reported: gemma2, whose random weights make it unusually sensitive (quantizing only
 *    its tied embedding, which the reference converter quantizes, CMF_FORMAT.md §2.0, already drops agreement to
 *    79.6%): 8.3-38.3% of max|logit| over seq 0-2 and 68.0% (q8_row) / 70.1% (q8_2f) agreement with one-level
 *    activations (72.8% / 77.6% with two levels). Its bounds are 5e-1 and 65%. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmf.h"
#include "convert/convert.h"
#include "convert/safetensors.h"
#include "format/format.h"
#include "quant/dtype.h"
#include "testutil.h"

/* {name, checkpoint dir, reference dir}; "S:" = shared/data/hf-tiny, "T:" = tests/data/hf-extra */
static const char *CASES[][3] = {
    {"llama", "S:llama", "S:llama"},
    {"mistral-swa", "S:mistral-swa", "S:mistral-swa"},
    {"qwen2", "S:qwen2", "S:qwen2"},
    {"qwen3", "S:qwen3", "S:qwen3"},
    {"gemma2", "S:gemma2", "S:gemma2"},
    {"bf16-llama", "S:bf16-llama", "T:bf16-llama-f32ref"},
    {"phi3", "T:phi3", "T:phi3"},
    {"gemma3", "T:gemma3", "T:gemma3"},
    {"llama31-rope", "T:llama31-rope", "T:llama31-rope"},
    {"qwen2-yarn", "T:qwen2-yarn", "T:qwen2-yarn"},
    {"llama-yarn-af", "T:llama-yarn-af", "T:llama-yarn-af"},
};

static void resolve(const char *spec, char *out, size_t n) {
    char rel[256];
    if (spec[0] == 'S') {
        snprintf(rel, sizeof rel, "data/hf-tiny/%s", spec + 2);
        snprintf(out, n, "%s", shared_path(rel));
    } else {
        snprintf(rel, sizeof rel, "hf-extra/%s", spec + 2);
        snprintf(out, n, "%s", testdata_path(rel));
    }
}

static int argmax(const float *x, int n) {
    int b = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[b]) b = i;
    return b;
}

/* Runs one prefill of ids and returns malloc'd logits [n][vocab]. */
static float *eval(cmf_model *m, const int32_t *ids, int n) {
    cmf_session *s = NULL;
    if (cmf_session_new(m, 512, &s) != CMF_OK) return NULL;
    float *lg = malloc((size_t)n * cmf_model_vocab_size(m) * sizeof(float));
    if (cmf_session_prefill(s, ids, n, lg) != CMF_OK) {
        free(lg);
        lg = NULL;
    }
    cmf_session_free(s);
    return lg;
}

static float *st_f32(const cmf_safetensors *st, const char *name) {
    const cmf_st_tensor *t = cmf_st_find(st, name);
    if (!t) return NULL;
    float *f = malloc(cmf_st_numel(t) * sizeof(float));
    cmf_st_to_f32(t, f);
    return f;
}

/* Writes a copy of `src` whose every tensor is its f32 decode (same names, shapes and header). */
static int write_dequantized(const char *src, const char *dst) {
    cmf_file *f = NULL;
    if (cmf_file_open(src, &f) != CMF_OK) return -1;
    cmf_writer *w = NULL;
    if (cmf_writer_new(dst, &w) != CMF_OK) return -1;
    int rc = 0;
    for (size_t i = 0; i < f->n_tensors && !rc; i++) {
        const cmf_tensor *t = &f->tensors[i];
        uint64_t n = cmf_tensor_numel(t);
        float *buf = malloc(n * sizeof(float));
        if (cmf_dequant(t->dtype, t->ndim, t->shape, t->data, t->nbytes, buf) != CMF_OK ||
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

static void check_case(const char *name, const char *model_spec, const char *ref_spec) {
    char dir[1024], refdir[1024], ref[1100], out[1100];
    resolve(model_spec, dir, sizeof dir);
    resolve(ref_spec, refdir, sizeof refdir);
    snprintf(ref, sizeof ref, "%s/ref.safetensors", refdir);
    cmf_safetensors *st = NULL;
    if (cmf_st_open(ref, &st) != CMF_OK) {
        CHECK_MSG(0, "%s: %s", name, cmf_last_error());
        return;
    }
    cmf_convert_opts opts = {0};
    opts.quant = CMF_DT_F32;
    snprintf(out, sizeof out, "%s", tmp_path(name));
    strncat(out, "-f32.cmf", sizeof out - strlen(out) - 1);
    cmf_status cst = cmf_convert_hf(dir, out, &opts);
    CHECK_MSG(cst == CMF_OK, "%s: convert: %s", name, cmf_last_error());
    cmf_model *m = NULL;
    cmf_status lst = cst == CMF_OK ? cmf_model_load(out, NULL, &m) : cst;
    CHECK_MSG(lst == CMF_OK, "%s: load: %s", name, cmf_last_error());
    if (lst != CMF_OK) {
        cmf_st_close(st);
        return;
    }
    const int V = cmf_model_vocab_size(m);

    /* quantized variants and their dequantized-f32 twins */
    static const int QUANTS[2] = {CMF_DT_Q8_ROW, CMF_DT_Q8_2F};
    cmf_model *qm[2] = {0}, *dqm[2] = {0};
    for (int qi = 0; qi < 2; qi++) {
        char qp[1200], dp[1200];
        snprintf(qp, sizeof qp, "%s.%s.cmf", out, cmf_dtype_name(QUANTS[qi]));
        snprintf(dp, sizeof dp, "%s.%s.deq.cmf", out, cmf_dtype_name(QUANTS[qi]));
        opts.quant = QUANTS[qi];
        int ok = cmf_convert_hf(dir, qp, &opts) == CMF_OK && write_dequantized(qp, dp) == 0 &&
                 cmf_model_load(qp, NULL, &qm[qi]) == CMF_OK && cmf_model_load(dp, NULL, &dqm[qi]) == CMF_OK;
        CHECK_MSG(ok, "%s: %s variant: %s", name, cmf_dtype_name(QUANTS[qi]), cmf_last_error());
    }

    int agree[2] = {0, 0}, total = 0;
    for (int seq = 0;; seq++) {
        char key[64];
        int n = 0, ng = 0;
        snprintf(key, sizeof key, "input_%d", seq);
        int32_t *ids = cmf_test_st_ids(st, key, &n);
        if (!ids) break;
        snprintf(key, sizeof key, "logits_%d", seq);
        float *want = st_f32(st, key);
        snprintf(key, sizeof key, "greedy_%d", seq);
        int32_t *greedy = cmf_test_st_ids(st, key, &ng);
        float *got = eval(m, ids, n);
        CHECK_MSG(got && want && greedy, "%s seq %d: missing data or eval failed: %s", name, seq, cmf_last_error());
        if (got && want && greedy) {
            float maxabs = 0, maxdiff = 0;
            for (size_t i = 0; i < (size_t)n * V; i++) {
                if (fabsf(want[i]) > maxabs) maxabs = fabsf(want[i]);
                if (fabsf(want[i] - got[i]) > maxdiff) maxdiff = fabsf(want[i] - got[i]);
            }
            CHECK_MSG(maxdiff <= 1e-4f * maxabs, "%s seq %d (len %d): f32 max|diff| %g > 1e-4 x %g", name, seq, n,
                      maxdiff, maxabs);
            printf("%-12s seq %d len %3d: f32 max|diff|/max|logit| = %.2e\n", name, seq, n, maxdiff / maxabs);

            /* greedy continuation: prefill, then 24 decode steps by argmax */
            cmf_session *s = NULL;
            CHECK(cmf_session_new(m, 512, &s) == CMF_OK);
            int match = s && cmf_session_prefill(s, ids, n, NULL) == CMF_OK;
            for (int g = 0; match && g < ng; g++) {
                int tok = argmax(cmf_session_logits(s), V);
                if (tok != greedy[g]) {
                    CHECK_MSG(0, "%s seq %d: greedy token %d is %d, transformers gives %d", name, seq, g, tok,
                              greedy[g]);
                    match = 0;
                    break;
                }
                if (g + 1 < ng) match = cmf_session_decode(s, tok) == CMF_OK;
            }
            cmf_session_free(s);

            for (int qi = 0; qi < 2; qi++) {
                if (!qm[qi] || !dqm[qi]) continue;
                float *ql = eval(qm[qi], ids, n), *dl = eval(dqm[qi], ids, n);
                CHECK(ql && dl);
                if (ql && dl) {
                    float mx = 0, md = 0;
                    for (size_t i = 0; i < (size_t)n * V; i++) {
                        if (fabsf(dl[i]) > mx) mx = fabsf(dl[i]);
                        if (fabsf(dl[i] - ql[i]) > md) md = fabsf(dl[i] - ql[i]);
                    }
                    const float qb = strcmp(name, "gemma2") == 0 ? 5e-1f : 1e-1f;
                    printf("%-12s seq %d %s: max|diff|/max|logit| vs dequantized f32 = %.2e\n", name, seq,
                           cmf_dtype_name(QUANTS[qi]), md / mx);
                    CHECK_MSG(md <= qb * mx, "%s seq %d %s: max|diff| %g > %g x %g vs dequantized f32", name, seq,
                              cmf_dtype_name(QUANTS[qi]), md, (double)qb, mx);
                    for (int p = 0; p < n; p++)
                        agree[qi] += argmax(ql + (size_t)p * V, V) == argmax(want + (size_t)p * V, V);
                }
                free(ql);
                free(dl);
            }
            total += n;
        }
        free(ids);
        free(want);
        free(greedy);
        free(got);
    }
    CHECK_MSG(total > 0, "%s: no input_i sequences in ref.safetensors", name);
    for (int qi = 0; qi < 2; qi++) {
        if (!qm[qi] || !total) continue;
        double frac = (double)agree[qi] / total;
        printf("%-12s %s: top-1 agreement with transformers %.1f%% (%d/%d)\n", name, cmf_dtype_name(QUANTS[qi]),
               100 * frac, agree[qi], total);
        const double bound = strcmp(name, "gemma2") == 0 ? 0.65 : 0.80;
        CHECK_MSG(frac >= bound, "%s %s: top-1 agreement %.3f < %.2f", name, cmf_dtype_name(QUANTS[qi]), frac, bound);
        cmf_model_free(qm[qi]);
        cmf_model_free(dqm[qi]);
    }
    cmf_model_free(m);
    cmf_st_close(st);
}

int main(int argc, char **argv) {
    for (size_t i = 0; i < sizeof CASES / sizeof *CASES; i++)
        if (argc < 2 || !strcmp(argv[1], CASES[i][0])) check_case(CASES[i][0], CASES[i][1], CASES[i][2]);
    CMF_TEST_END();
}
