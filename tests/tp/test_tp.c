/* Tensor parallelism on the CPU (src/tp): the Megatron split simulated by N rank threads (sliced weights, partial
 * products summed by the cpu all-reduce) against the unsplit forward of the same file.
 *  - every hf-tiny case of shared/data (llama, mistral-swa, qwen2, qwen3, gemma2, bf16-llama) converted here to f32
 *    and f16; N = 2, 4, 8: the prefill logits of input_0 at every position and N_DECODE greedy decode steps within
 *    REL (max|tp - plain| / max|plain|) and the greedy tokens identical. Where N does not divide n_heads (N = 8
 *    with 4 heads) the load must be CMF_E_UNSUPPORTED naming n_heads.
 *  - tp = 1 is the plain path, bit for bit.
 *  - q8_row, q8_2f and q4_block at N = 2 (bound Q8_REL, or where the slices cut 32-value blocks twice the unsplit
 *    model's own int8 activation error, see below; and REL again with f32 activations, CMF_CPU_F32REF):
 *    a q4 slice that keeps whole 32-value blocks runs, one that cuts them is CMF_E_UNSUPPORTED naming the tensor, the dtype and N.
 *  - a continuous batch of two sessions through cmf_batch_run equals the same batch unsplit.
 *  - the runs above fold the residual into the all-reduce (tp.h fold, the default); f32 at N = 2, 4, 8 again with
 *    the fold off (residual added after the all-reduce): prefill, decode and the batch.
 *  - a file whose layers repeat (bench/tp/repeat_layers.c: 3K layers aliasing K) splits like any other and its
 *    ranks copy each distinct slice once.
 *  - the reference converter's tiny-F16.cmf: task masks, the O(1) far field and skills are refused clearly at
 *    tp 2; with the mask off the split equals the unsplit forward and the split KV cache has the same size.
 * REL = 1e-5 is the acceptance bound: the split changes only the summation order of the o_proj / down_proj
 * dot products (per-rank partial sums added in rank order) and of nothing else. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/ops.h"
#include "cmf.h"
#include "convert/convert.h"
#include "convert/requant.h"
#include "convert/safetensors.h"
#include "quant/dtype.h"
#include "model/model.h"
#include "repeat_layers.h"
#include "testutil.h"
#include "tp/tp.h"

static const char *CASES[] = {"llama", "mistral-swa", "qwen2", "qwen3", "gemma2", "bf16-llama"};
enum { N_DECODE = 6, N_CTX = 128 };
static const float REL = 1e-5f;
/* Quantized weights take int8 activations (Q8_0: blocks of 32 from column 0 of each rank's slice, one scale per
 * block, kern.h). A split whose row-parallel slices start on multiples of 32 sees the unsplit blocks; the all-reduce's
 * rank-ordered sum still differs from the unsplit dot product in the last bits, which can flip an occasional
 * round(x/d) of the next layer's int8 activations by one step. With the default one level such a flip is a whole
 * Q8_0 step (measured 8.5e-3 on mistral-swa q8_2f), so every quantized split is checked against the unsplit model's
 * own int8 error (check_envelope), and aligned splits again with two-level activations (cmf_cpu_set_act_levels(2):
 * measured up to 3.7e-7) against 2e-3; a greedy token may then differ only at a near-tie (see compare). A split that
 * cuts blocks (llama's down_proj at N = 2: 80 columns per rank) quantizes other blocks than the unsplit model. */
static const float Q8_REL = 2e-3f;

static cmf_status load(const char *path, int tp, cmf_model **m) {
    cmf_model_params p = {0};
    p.n_threads = tp > 1 ? tp : 1; /* one thread per rank */
    p.tp = tp;
    return cmf_model_load_on(path, &p, "cpu", m);
}

/* Prefill + greedy decode on both; returns the worst relative difference (or INFINITY on a failure). With
 * exact != 0 the logits must be bit-identical. */
static float compare(const char *label, cmf_model *ref, cmf_model *tp, const int32_t *ids, int n, float bound,
                     int exact) {
    const int V = cmf_model_vocab_size(ref);
    float worst = 0;
    cmf_session *a = NULL, *b = NULL;
    float *la = malloc((size_t)n * V * sizeof(float)), *lb = malloc((size_t)n * V * sizeof(float));
    cmf_status s1 = cmf_session_new(ref, N_CTX, &a), s2 = cmf_session_new(tp, N_CTX, &b);
    CHECK_MSG(s1 == CMF_OK && s2 == CMF_OK, "%s: sessions: %s", label, cmf_last_error());
    if (s1 == CMF_OK && s2 == CMF_OK) {
        s1 = cmf_session_prefill(a, ids, n, la);
        s2 = cmf_session_prefill(b, ids, n, lb);
        CHECK_MSG(s1 == CMF_OK && s2 == CMF_OK, "%s: prefill: %s", label, cmf_last_error());
    }
    if (s1 == CMF_OK && s2 == CMF_OK) {
        worst = cmf_test_rel_diff(la, lb, (size_t)n * V);
        if (exact) CHECK_MSG(!memcmp(la, lb, (size_t)n * V * sizeof(float)), "%s: prefill logits differ", label);
        for (int step = 0; step < N_DECODE; step++) {
            const float *xa = cmf_session_logits(a), *xb = cmf_session_logits(b);
            float d = cmf_test_rel_diff(xa, xb, (size_t)V);
            if (d > worst) worst = d;
            if (exact) CHECK_MSG(!memcmp(xa, xb, (size_t)V * sizeof(float)), "%s: step %d logits differ", label, step);
            const int ta = cmf_test_argmax(xa, V), tb = cmf_test_argmax(xb, V);
            float mx = 0;
            for (int i = 0; i < V; i++) mx = fabsf(xa[i]) > mx ? fabsf(xa[i]) : mx;
            /* quantized files (bound > REL): a near-tie may swap, when the unsplit margin between the two tokens
             * is within twice the logit difference measured at this step; the float files must agree exactly */
            const int tie = bound > REL && ta != tb && xa[ta] - xa[tb] <= 2 * d * mx;
            if (tie) printf("%s: step %d: near-tie %d / %d (margin %.2e, 2 x diff %.2e) accepted\n", label, step, ta, tb,
                            (double)(xa[ta] - xa[tb]), (double)(2 * d * mx));
            CHECK_MSG(ta == tb || tie, "%s: greedy token %d: %d unsplit, %d split", label, step, ta, tb);
            if (cmf_session_decode(a, ta) != CMF_OK || cmf_session_decode(b, ta) != CMF_OK) {
                CHECK_MSG(0, "%s: decode: %s", label, cmf_last_error());
                worst = INFINITY;
                break;
            }
        }
    } else {
        worst = INFINITY;
    }
    CHECK_MSG(worst <= bound, "%s: max|tp - unsplit| / max|logit| = %.3e > %.0e", label, worst, bound);
    cmf_session_free(a);
    cmf_session_free(b);
    free(la);
    free(lb);
    return worst;
}

/* Prefill ids and N_DECODE decode steps on m; every logit row into out [(n + N_DECODE)][V] (the prompt's rows, then
 * the logits before each decode step). The decoded tokens are tok[0..N_DECODE): read from tok when `follow`, else
 * the greedy ones, written there. Returns 0 after a failed check. */
static int trace(const char *label, cmf_model *m, const int32_t *ids, int n, int32_t *tok, int follow, float *out) {
    const int V = cmf_model_vocab_size(m);
    cmf_session *s = NULL;
    int ok = cmf_session_new(m, N_CTX, &s) == CMF_OK && cmf_session_prefill(s, ids, n, out) == CMF_OK;
    for (int step = 0; step < N_DECODE && ok; step++) {
        float *row = out + (size_t)(n + step) * V;
        memcpy(row, cmf_session_logits(s), (size_t)V * sizeof(float));
        if (!follow) tok[step] = cmf_test_argmax(row, V);
        ok = cmf_session_decode(s, tok[step]) == CMF_OK;
    }
    CHECK_MSG(ok, "%s: %s", label, cmf_last_error());
    cmf_session_free(s);
    return ok;
}

/* A quantized split whose row-parallel slices cut 32-value blocks (see Q8_REL): rank r quantizes
 * its slice's activations in other blocks than the unsplit model does, so the two int8 paths differ by up to about
 * the int8 activation error itself. Checked against that error as measured here: with the same tokens, the split
 * (int8) must stay within twice the distance between the unsplit model's int8 and f32 activation paths (the triangle
 * bound |split - unsplit| <= |split - f32| + |f32 - unsplit|, where both int8 paths are one Q8_0 quantization of the
 * same f32 values, which the CMF_CPU_F32REF check below shows the split computes within REL). Returns the ratio. */
static float check_envelope(const char *label, cmf_model *ref, cmf_model *tp, const int32_t *ids, int n) {
    const int V = cmf_model_vocab_size(ref);
    const size_t rows = (size_t)(n + N_DECODE);
    float *a = malloc(rows * V * sizeof(float)), *b = malloc(rows * V * sizeof(float)),
          *c = malloc(rows * V * sizeof(float));
    int32_t tok[N_DECODE];
    float ratio = INFINITY;
    const int path0 = cmf_cpu_path();
    int ok = a && b && c && trace(label, ref, ids, n, tok, 0, a) && trace(label, tp, ids, n, tok, 1, b) &&
             cmf_cpu_set_path(CMF_CPU_F32REF) == CMF_OK && trace(label, ref, ids, n, tok, 1, c);
    cmf_cpu_set_path(path0);
    if (ok) {
        const float eq = cmf_test_rel_diff(c, a, rows * V), d = cmf_test_rel_diff(a, b, rows * V);
        ratio = d / eq;
        CHECK_MSG(d <= 2 * eq, "%s: max|split - unsplit| / max|logit| = %.3e exceeds twice the unsplit int8 activation "
                               "error %.3e", label, d, eq);
        printf("%-24s max rel %.2e (int8 activations, slices cut 32-blocks: %.2f x the unsplit int8 error %.2e)\n",
               label, d, ratio, eq);
    }
    free(a);
    free(b);
    free(c);
    return ratio;
}

/* Two sessions in one continuous batch (a decode token of one next to a prompt chunk of the other), split and not. */
static void check_batch(const char *label, cmf_model *ref, cmf_model *tp, const int32_t *ids, int n) {
    const int V = cmf_model_vocab_size(ref);
    cmf_model *ms[2] = {ref, tp};
    float *out[2][2];
    for (int k = 0; k < 2; k++) {
        cmf_session *s[2] = {NULL, NULL};
        cmf_batch *b = NULL;
        int ok = cmf_session_new(ms[k], N_CTX, &s[0]) == CMF_OK && cmf_session_new(ms[k], N_CTX, &s[1]) == CMF_OK &&
                 cmf_batch_new(ms[k], 16, 2, &b) == CMF_OK && cmf_session_prefill(s[0], ids, 3, NULL) == CMF_OK;
        const int chunk = n < 8 ? n : 8;
        cmf_session *seqs[9];
        int32_t toks[9];
        seqs[0] = s[0];
        toks[0] = ids[3 % n];
        for (int i = 0; i < chunk; i++) seqs[1 + i] = s[1], toks[1 + i] = ids[i];
        ok = ok && cmf_batch_run(b, seqs, toks, 1 + chunk) == CMF_OK;
        CHECK_MSG(ok, "%s batch: %s", label, cmf_last_error());
        for (int j = 0; j < 2; j++) {
            out[k][j] = calloc((size_t)V, sizeof(float));
            if (ok) memcpy(out[k][j], cmf_session_logits(s[j]), (size_t)V * sizeof(float));
        }
        cmf_batch_free(b);
        cmf_session_free(s[0]);
        cmf_session_free(s[1]);
    }
    for (int j = 0; j < 2; j++) {
        float d = cmf_test_rel_diff(out[0][j], out[1][j], (size_t)V);
        CHECK_MSG(d <= REL, "%s batch session %d: %.3e > %.0e", label, j, d, REL);
        free(out[0][j]);
        free(out[1][j]);
    }
}

/* The reference converter's tiny file (task masks, an MTP head, a tokenizer): what is not split is refused clearly,
 * and with the mask off the split equals the unsplit forward. */
static void check_refusals(void) {
    const char *path = shared_path("data/cmf-reference/tiny-F16.cmf");
    cmf_model *ref = NULL, *tp = NULL;
    cmf_model_params p1 = {.n_threads = 1, .tp = 1}, p2 = {.n_threads = 2, .tp = 2};
    int ok = cmf_model_load_on(path, &p1, "cpu", &ref) == CMF_OK && cmf_model_load_on(path, &p2, "cpu", &tp) == CMF_OK;
    CHECK_MSG(ok, "tiny-F16: %s", cmf_last_error());
    if (ok) {
        cmf_session *s = NULL;
        cmf_session_params sp = {.n_ctx = 32};
        cmf_status st = cmf_session_new_ex(tp, &sp, &s); /* the file's Fallback task mask */
        CHECK_MSG(st == CMF_E_UNSUPPORTED && strstr(cmf_last_error(), "task masks"), "mask: %d %s", st,
                  cmf_last_error());
        sp.task = "off";
        sp.o1 = "all";
        st = cmf_session_new_ex(tp, &sp, &s);
        CHECK_MSG(st == CMF_E_UNSUPPORTED && strstr(cmf_last_error(), "O(1)"), "o1: %d %s", st, cmf_last_error());
        sp.o1 = "off";
        st = cmf_session_new_ex(tp, &sp, &s);
        CHECK_MSG(st == CMF_OK, "dense session: %s", cmf_last_error());
        if (st == CMF_OK) {
            st = cmf_session_set_skill(s, "anything");
            CHECK_MSG(st == CMF_E_UNSUPPORTED && strstr(cmf_last_error(), "skills"), "skill: %d %s", st,
                      cmf_last_error());
            CHECK(cmf_session_set_skill(s, "none") == CMF_OK);
            cmf_session *r = NULL;
            const int32_t ids[6] = {1, 5, 9, 17, 33, 65};
            const int V = cmf_model_vocab_size(ref);
            float *la = malloc(6 * (size_t)V * sizeof(float)), *lb = malloc(6 * (size_t)V * sizeof(float));
            ok = cmf_session_new_ex(ref, &sp, &r) == CMF_OK && cmf_session_prefill(r, ids, 6, la) == CMF_OK &&
                 cmf_session_prefill(s, ids, 6, lb) == CMF_OK;
            CHECK_MSG(ok, "tiny-F16 prefill: %s", cmf_last_error());
            if (ok) {
                float d = cmf_test_rel_diff(la, lb, 6 * (size_t)V);
                CHECK_MSG(d <= REL, "tiny-F16 tp2 (mask off): %.3e", d);
                printf("%-24s max rel %.2e; mask, o1 and skills refused\n", "tiny-F16 tp2", d);
                CHECK(cmf_session_state_bytes(s) == cmf_session_state_bytes(r)); /* the KV heads, split */
            }
            free(la);
            free(lb);
            cmf_session_free(r);
        }
        cmf_session_free(s);
    }
    cmf_model_free(tp);
    cmf_model_free(ref);
}

/* bench/tp/repeat_layers.c on a converted file: 3K layers aliasing the K stored ones open as a valid model whose
 * layer l reads layer l mod K's payloads; split over 2 ranks it equals its own unsplit forward (REL), and the
 * ranks copy each distinct slice once (as many copies as the K-layer file's split). */
static void check_repeated(const char *label, const char *path, cmf_model *ref, const int32_t *ids, int n) {
    char rp[512];
    snprintf(rp, sizeof rp, "%s", tmp_path("tp-repeated.cmf"));
    const int K = ref->cfg.n_layers;
    cmf_model *big = NULL, *big2 = NULL, *small2 = NULL;
    int ok = tp_repeat_layers(path, rp, 3 * K) == 0 && load(rp, 1, &big) == CMF_OK;
    CHECK_MSG(ok, "%s: repeat_layers / load: %s", label, cmf_last_error());
    if (!ok) return;
    CHECK_MSG(big->cfg.n_layers == 3 * K, "%s: %d layers after repeating %d three times", label, big->cfg.n_layers, K);
    for (int l = 0; l < big->cfg.n_layers; l++) {
        const cmf_layer *a = &big->base.layers[l], *b = &big->base.layers[l % K];
        CHECK_MSG(a->wq.data == b->wq.data && a->w_down.data == b->w_down.data && a->wo.data == b->wo.data,
                  "%s: layer %d does not alias layer %d", label, l, l % K);
    }
    char l2[160];
    snprintf(l2, sizeof l2, "%s x3 layers tp2", label);
    ok = load(rp, 2, &big2) == CMF_OK && load(path, 2, &small2) == CMF_OK;
    CHECK_MSG(ok, "%s: load: %s", l2, cmf_last_error());
    if (ok) {
        float w = compare(l2, big, big2, ids, n, REL, 0);
        CHECK_MSG(big2->tp->n_owned == small2->tp->n_owned && big2->tp->n_owned > 0,
                  "%s: %zu slice copies for %d layers, %zu for the %d stored ones", l2, big2->tp->n_owned, 3 * K,
                  small2->tp->n_owned, K);
        printf("%-24s max rel %.2e, %zu slice copies (as for %d layers)\n", l2, w, big2->tp->n_owned, K);
    }
    cmf_model_free(small2);
    cmf_model_free(big2);
    cmf_model_free(big);
}

int main(void) {
    check_refusals();
    const int quants[2] = {CMF_DT_F32, CMF_DT_F16};
    for (size_t ci = 0; ci < sizeof CASES / sizeof *CASES; ci++) {
        const char *c = CASES[ci];
        int n = 0;
        int32_t *ids = cmf_test_hf_input_ids(c, "input_0", &n);
        CHECK_MSG(ids && n > 0, "%s: no input_0 in ref.safetensors", c);
        if (!ids) continue;
        if (n > 32) n = 32;
        char dir[256], path[512], label[128];
        snprintf(dir, sizeof dir, "%s", shared_path("data/hf-tiny"));
        snprintf(dir + strlen(dir), sizeof dir - strlen(dir), "/%s", c);
        for (int qi = 0; qi < 2; qi++) {
            snprintf(path, sizeof path, "tp-%s-%s.cmf", c, cmf_dtype_name(quants[qi]));
            snprintf(path, sizeof path, "%s", tmp_path(path));
            cmf_convert_opts opts = {0};
            opts.quant = quants[qi];
            cmf_model *ref = NULL;
            int ok = cmf_convert_hf(dir, path, &opts) == CMF_OK && load(path, 1, &ref) == CMF_OK;
            CHECK_MSG(ok, "%s: convert / load: %s", c, cmf_last_error());
            if (!ok) continue;
            if (qi == 0 && ci == 0) check_repeated(c, path, ref, ids, n);
            if (qi == 0) { /* tp = 1: the plain path, bit for bit */
                cmf_model *one = NULL;
                cmf_model_params p = {.n_threads = 1, .tp = 1};
                CHECK(cmf_model_load_on(path, &p, "cpu", &one) == CMF_OK);
                snprintf(label, sizeof label, "%s f32 tp1", c);
                if (one) compare(label, ref, one, ids, n, 0, 1);
                cmf_model_free(one);
            }
            for (int N = 2; N <= 8; N *= 2) {
                snprintf(label, sizeof label, "%s %s tp%d", c, cmf_dtype_name(quants[qi]), N);
                cmf_model *tp = NULL;
                cmf_status st = load(path, N, &tp);
                int heads = 0;
                {
                    char rel[256];
                    snprintf(rel, sizeof rel, "data/hf-tiny/%s/config.json", c);
                    FILE *f = fopen(shared_path(rel), "r");
                    char buf[8192] = "";
                    if (f) {
                        buf[fread(buf, 1, sizeof buf - 1, f)] = 0;
                        fclose(f);
                    }
                    const char *h = strstr(buf, "\"num_attention_heads\"");
                    if (h) heads = atoi(strchr(h, ':') + 1);
                }
                if (heads % N) {
                    CHECK_MSG(st == CMF_E_UNSUPPORTED && strstr(cmf_last_error(), "n_heads"),
                              "%s: %d heads: expected the n_heads error, got %d: %s", label, heads, st,
                              cmf_last_error());
                    printf("%-24s refused as expected: %s\n", label, cmf_last_error());
                    cmf_model_free(tp);
                    continue;
                }
                CHECK_MSG(st == CMF_OK, "%s: load: %s", label, cmf_last_error());
                if (st != CMF_OK) continue;
                float w = compare(label, ref, tp, ids, n, REL, 0);
                printf("%-24s max rel %.2e (%d prompt tokens + %d decode steps)\n", label, w, n, N_DECODE);
                if (qi == 0 && N == 2) check_batch(label, ref, tp, ids, n);
                if (qi == 0) { /* the residual added after the all-reduce (tp.h fold off): the same bound */
                    tp->tp->fold = 0;
                    snprintf(label + strlen(label), sizeof label - strlen(label), " nofold");
                    w = compare(label, ref, tp, ids, n, REL, 0);
                    printf("%-24s max rel %.2e (%d prompt tokens + %d decode steps)\n", label, w, n, N_DECODE);
                    if (N == 2) check_batch(label, ref, tp, ids, n);
                }
                cmf_model_free(tp);
            }
            if (qi == 0) { /* quantized files from the f32 one */
                const int qs[3] = {CMF_DT_Q8_ROW, CMF_DT_Q8_2F, CMF_DT_Q4_BLOCK};
                for (int k = 0; k < 3; k++) {
                    char qp[512];
                    snprintf(qp, sizeof qp, "tp-%s-%s.cmf", c, cmf_dtype_name(qs[k]));
                    snprintf(qp, sizeof qp, "%s", tmp_path(qp));
                    cmf_model *qref = NULL, *qtp = NULL;
                    ok = cmf_requant(path, qp, qs[k], NULL) == CMF_OK && load(qp, 1, &qref) == CMF_OK;
                    CHECK_MSG(ok, "%s: requant %s: %s", c, cmf_dtype_name(qs[k]), cmf_last_error());
                    snprintf(label, sizeof label, "%s %s tp2", c, cmf_dtype_name(qs[k]));
                    cmf_status st = ok ? load(qp, 2, &qtp) : CMF_E_IO;
                    if (ok && qs[k] == CMF_DT_Q4_BLOCK && st != CMF_OK) { /* a slice cutting 32-value blocks */
                        CHECK_MSG(st == CMF_E_UNSUPPORTED && strstr(cmf_last_error(), "q4_block") &&
                                      strstr(cmf_last_error(), "2 ranks") && strstr(cmf_last_error(), "model.layers."),
                                  "%s: %d %s", label, st, cmf_last_error());
                        printf("%-24s refused: %s\n", label, cmf_last_error());
                    } else if (ok) {
                        CHECK_MSG(st == CMF_OK, "%s: load: %s", label, cmf_last_error());
                        /* the row-parallel inputs (o_proj: a rank's heads, down_proj: its neurons) on 32-blocks */
                        const cmf_config *qc = &qref->cfg;
                        const int cut = (qc->n_heads / 2 * qc->head_dim) % 32 || (qc->intermediate_size / 2) % 32;
                        if (st == CMF_OK) check_envelope(label, qref, qtp, ids, n);
                        if (st == CMF_OK) {
                            /* aligned slices: with two-level activations (a flipped rounding costs ~1/250 of a
                             * one-level step) the split stays within Q8_REL */
                            CHECK(cmf_cpu_set_act_levels(2) == CMF_OK);
                            float w = cut ? 0 : compare(label, qref, qtp, ids, n, Q8_REL, 0);
                            CHECK(cmf_cpu_set_act_levels(1) == CMF_OK);
                            /* the same with f32 activations (CMF_CPU_F32REF): within REL, so the difference
                             * above is the int8 activation requantization, not the slicing */
                            const int path0 = cmf_cpu_path();
                            char l2[160];
                            snprintf(l2, sizeof l2, "%s f32ref", label);
                            float w2 = cmf_cpu_set_path(CMF_CPU_F32REF) == CMF_OK
                                           ? compare(l2, qref, qtp, ids, n, REL, 0)
                                           : INFINITY;
                            cmf_cpu_set_path(path0);
                            if (cut)
                                printf("%-24s max rel %.2e (f32 activations)\n", l2, w2);
                            else
                                printf("%-24s max rel %.2e (int8 activations), %.2e (f32 activations)\n", label, w,
                                       w2);
                        }
                    }
                    cmf_model_free(qtp);
                    cmf_model_free(qref);
                }
            }
            cmf_model_free(ref);
        }
        free(ids);
    }
    CMF_TEST_END();
}
