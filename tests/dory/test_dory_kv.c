/* test_dory_kv.c — the KV cache modes of DORY.md §1.8 and the Conf early-exit gate of §2 on the tiny model:
 *  - per_loop and last_loop give the same logits for one chunk from position 0, and the last_loop cache then equals
 *    the per_loop cache of the final loop (input/output-block caches equal too);
 *  - under last_loop a chunk starting at position 0 equals the reference on its own rows (inside a chunk every loop
 *    sees its own K/V), while later chunks see the final-loop K/V of earlier tokens and so differ from per_loop;
 *  - last_loop with prompt chunks of 3 and 1 tokens equals OUR numpy model of that mode (see make_refs.py);
 *  - last_loop allows the loop count to change from call to call, per_loop refuses it;
 *  - the gate with threshold 0 always exits after one pass (= loops 1), with threshold > 1 never (= loops 2), and an
 *    intermediate threshold mixes both; the one-pass share is reported.
 * The last_loop difference is required to exceed 10x the reference tolerance (the measured F32 error is ~1e-6).*/
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dorytest.h"
#include "testutil.h"


static void check_final_loop_cache(const dory_fixture *fx, const int32_t *ids, int n) {
    const cmf_dory *d = fx->d;
    const cmf_dory_config *c = &d->cfg;
    const int loops = 2, KVD = c->n_kv_heads * c->head_dim, V = c->vocab_size;
    cmf_dory_state *pl, *ll;
    CHECK(cmf_dory_state_new(d, 16, 0, CMF_DORY_KV_PER_LOOP, loops, &pl) == CMF_OK);
    CHECK(cmf_dory_state_new(d, 16, 0, CMF_DORY_KV_LAST_LOOP, loops, &ll) == CMF_OK);
    float *a = malloc((size_t)n * V * sizeof(float)), *b = malloc((size_t)n * V * sizeof(float));
    CHECK(cmf_dory_forward(pl, ids, n, loops, a) == CMF_OK);
    CHECK(cmf_dory_forward(ll, ids, n, loops, b) == CMF_OK);
    CHECK(dory_max_abs_diff(a, b, (size_t)n * V, NULL) == 0);
    CHECK(pl->n_slots == ll->n_slots + 1); /* one recurrent attention layer: 2 loop slots vs 1 */
    int checked = 0;
    for (int l = 0; l < c->n_layers; l++) {
        if (c->pattern[l] == '-') continue;
        int rec = l >= c->n_input && l < c->n_input + c->n_recurrent;
        const cmf_dory_kv *kp = &pl->kv[pl->slot[l] + (rec ? loops - 1 : 0)], *kl = &ll->kv[ll->slot[l]];
        for (int p = 0; p < n; p++) {
            int rp = kp->ring ? p % kp->rows : p, rl = kl->ring ? p % kl->rows : p;
            CHECK_MSG(!memcmp(kp->k + (size_t)rp * KVD, kl->k + (size_t)rl * KVD, (size_t)KVD * sizeof(float)) &&
                          !memcmp(kp->v + (size_t)rp * KVD, kl->v + (size_t)rl * KVD, (size_t)KVD * sizeof(float)),
                      "layer %d position %d: last_loop K/V differ from the final loop's", l, p);
            checked++;
        }
        if (rec) { /* and the loop-0 cache of per_loop is a different thing */
            const cmf_dory_kv *k0 = &pl->kv[pl->slot[l]];
            CHECK(memcmp(k0->k, kl->k, (size_t)KVD * sizeof(float)) != 0);
        }
    }
    CHECK(checked == 3 * n);
    free(a);
    free(b);
    cmf_dory_state_free(pl);
    cmf_dory_state_free(ll);
}

/* last_loop in chunks (5, 3): the first chunk equals the reference rows 0..4; the second differs from per_loop. */
static void check_last_loop_chunks(const dory_fixture *fx, const int32_t *ids, int n, const float *ref2) {
    const int V = fx->d->cfg.vocab_size;
    float *ll = dory_run(fx->d, ids, n, CMF_DORY_KV_LAST_LOOP, 2, 5);
    float *pl = dory_run(fx->d, ids, n, CMF_DORY_KV_PER_LOOP, 2, 5);
    CHECK(ll && pl);
    if (ll && pl) {
        double mr, err = dory_max_abs_diff(ll, ref2, 5 * (size_t)V, &mr);
        CHECK_MSG(err <= 3e-5 * mr, "last_loop first chunk vs reference: %.3g", err);
        double d = dory_max_abs_diff(ll + 5 * (size_t)V, pl + 5 * (size_t)V, 3 * (size_t)V, &mr);
        CHECK_MSG(d > 10 * 3e-5 * mr, "last_loop later chunk should see final-loop K/V of earlier tokens (diff %.3g)", d);
        d = dory_max_abs_diff(pl + 5 * (size_t)V, ref2 + 5 * (size_t)V, 3 * (size_t)V, &mr);
        CHECK_MSG(d <= 3e-5 * mr, "per_loop later chunk vs reference: %.3g", d);
    }
    free(ll);
    free(pl);
}

/* last_loop with prompt chunks of 3 and 1 tokens (loops 2) against OUR numpy model of chunked last_loop inference
 * (scripts/dory/make_refs.py OurIncremental, itself checked against llama.cpp's forward where that applies). */
static void check_last_loop_ours(const dory_fixture *fx, int seq, const int32_t *ids, int n) {
    static const int CH[] = {3, 1};
    for (int i = 0; i < 2; i++) {
        char name[64];
        snprintf(name, sizeof name, "ours_lastloop_%d_k2_chunk%d", seq, CH[i]);
        size_t m = 0;
        float *ref = dory_ref_floats(fx, name, &m);
        float *got = dory_run(fx->d, ids, n, CMF_DORY_KV_LAST_LOOP, 2, CH[i]);
        CHECK_MSG(ref && got && m == (size_t)n * fx->d->cfg.vocab_size, "%s", name);
        if (ref && got && m == (size_t)n * fx->d->cfg.vocab_size) {
            double mr, err = dory_max_abs_diff(got, ref, m, &mr);
            CHECK_MSG(err <= 3e-5 * mr, "%s: max |err| %.3g, max |ref| %.3g", name, err, mr);
        }
        free(ref);
        free(got);
    }
}

static void check_loop_changes(const dory_fixture *fx, const int32_t *ids, int n) {
    cmf_dory_state *s;
    CHECK(cmf_dory_state_new(fx->d, 16, 0, CMF_DORY_KV_LAST_LOOP, 4, &s) == CMF_OK);
    static const int L[] = {1, 2, 4, 1, 3, 2, 1, 4};
    for (int i = 0; i < n; i++) CHECK(cmf_dory_forward(s, ids + i, 1, L[i % 8], NULL) == CMF_OK);
    CHECK(s->pos == n);
    for (int j = 0; j < fx->d->cfg.vocab_size; j++) CHECK(isfinite(cmf_dory_logits(s)[j]));
    CHECK(cmf_dory_forward(s, ids, 1, 5, NULL) == CMF_E_ARG); /* over the session's max_loops */
    cmf_dory_state_free(s);
    CHECK(cmf_dory_state_new(fx->d, 16, 0, CMF_DORY_KV_PER_LOOP, 4, &s) == CMF_OK);
    CHECK(cmf_dory_forward(s, ids, 2, 2, NULL) == CMF_OK);
    CHECK(cmf_dory_forward(s, ids + 2, 1, 3, NULL) == CMF_E_ARG);
    CHECK(strstr(cmf_last_error(), "per_loop") != NULL);
    CHECK(s->pos == 2);
    CHECK(cmf_dory_forward(s, ids + 2, 1, 2, NULL) == CMF_OK);
    cmf_dory_state_reset(s);
    CHECK(cmf_dory_forward(s, ids, 1, 3, NULL) == CMF_OK); /* a new context may choose again */
    cmf_dory_state_free(s);
}

/* Decodes ids one by one through the gate; returns the logits [n][V] (malloc'd) and the count of one-pass tokens. */
static float *run_gate(const cmf_dory *d, const int32_t *ids, int n, float threshold, int *one_pass, double *share) {
    const int V = d->cfg.vocab_size;
    cmf_dory_state *s;
    if (cmf_dory_state_new(d, 16, 0, CMF_DORY_KV_LAST_LOOP, 2, &s) != CMF_OK) return NULL;
    float *out = malloc((size_t)n * V * sizeof(float));
    *one_pass = 0;
    for (int i = 0; i < n; i++) {
        int passes = 0;
        CHECK(cmf_dory_decode_gated(s, ids[i], threshold, &passes) == CMF_OK);
        CHECK(passes == 1 || passes == 2);
        *one_pass += passes == 1;
        memcpy(out + (size_t)i * V, cmf_dory_logits(s), (size_t)V * sizeof(float));
    }
    long nt;
    *share = cmf_dory_gate_one_pass_share(s, &nt);
    CHECK(nt == n);
    cmf_dory_state_free(s);
    return out;
}

static void check_gate(const dory_fixture *fx, const int32_t *ids, int n, const float *ref1) {
    const cmf_dory *d = fx->d;
    const int V = d->cfg.vocab_size;
    int one;
    double share, mr;
    float *g0 = run_gate(d, ids, n, 0.0f, &one, &share);
    CHECK(one == n && share == 1.0);
    CHECK_MSG(dory_max_abs_diff(g0, ref1, (size_t)n * V, &mr) <= 3e-5 * mr, "gate threshold 0 vs loops-1 reference");
    float *k1 = dory_run(d, ids, n, CMF_DORY_KV_LAST_LOOP, 1, 1);
    CHECK(k1 && dory_max_abs_diff(g0, k1, (size_t)n * V, NULL) == 0);
    float *g2 = run_gate(d, ids, n, 1.5f, &one, &share);
    CHECK(one == 0 && share == 0.0);
    float *k2 = dory_run(d, ids, n, CMF_DORY_KV_LAST_LOOP, 2, 1);
    CHECK(k2 && dory_max_abs_diff(g2, k2, (size_t)n * V, NULL) == 0);
    /* a threshold between the top probabilities of the first pass: the median of the threshold-0 run */
    float tops[64] = {0};
    for (int i = 0; i < n && i < 64; i++) {
        const float *l = g0 + (size_t)i * V;
        float mx = l[0];
        for (int j = 1; j < V; j++) mx = l[j] > mx ? l[j] : mx;
        double sum = 0;
        for (int j = 0; j < V; j++) sum += exp((double)l[j] - mx);
        tops[i] = (float)(1.0 / sum);
    }
    float sorted[64] = {0};
    memcpy(sorted, tops, sizeof sorted);
    for (int i = 0; i < n; i++)
        for (int j = i + 1; j < n; j++)
            if (sorted[j] < sorted[i]) {
                float t = sorted[i];
                sorted[i] = sorted[j];
                sorted[j] = t;
            }
    float thr = 0.5f * (sorted[n / 2 - 1] + sorted[n / 2]); /* between two first-pass values: no ties */
    float *gm = run_gate(d, ids, n, thr, &one, &share);
    CHECK_MSG(one > 0 && one < n, "mixed threshold %g: %d of %d one-pass tokens", thr, one, n);
    CHECK(fabs(share - (double)one / n) < 1e-12);
    /* the first token's decision follows its first-pass probability, and its logits are the matching pass's */
    if (gm) {
        int first_one = tops[0] >= thr;
        CHECK(dory_max_abs_diff(gm, first_one ? g0 : g2, (size_t)V, NULL) == 0);
    }
    printf("gate: threshold %.4f -> %d of %d tokens took one pass (share %.2f)\n", thr, one, n, share);
    cmf_dory_state *s;
    CHECK(cmf_dory_state_new(d, 16, 0, CMF_DORY_KV_PER_LOOP, 2, &s) == CMF_OK);
    CHECK(cmf_dory_decode_gated(s, ids[0], 0.5f, NULL) == CMF_E_ARG);
    cmf_dory_state_free(s);
    free(g0);
    free(g2);
    free(gm);
    free(k1);
    free(k2);
}

int main(void) {
    dory_fixture fx;
    if (dory_fixture_open("tiny", &fx) != 0) return 1;
    for (int seq = 0; seq < 3; seq++) {
        int n;
        int32_t *ids = dory_ref_tokens(&fx, seq, &n);
        size_t m;
        float *ref1 = dory_ref_floats(&fx, seq == 0 ? "logits_0_k1" : seq == 1 ? "logits_1_k1" : "logits_2_k1", &m);
        float *ref2 = dory_ref_floats(&fx, seq == 0 ? "logits_0_k2" : seq == 1 ? "logits_1_k2" : "logits_2_k2", &m);
        CHECK(ids && ref1 && ref2 && n == 8);
        if (ids && ref1 && ref2) {
            check_final_loop_cache(&fx, ids, n);
            check_last_loop_chunks(&fx, ids, n, ref2);
            check_last_loop_ours(&fx, seq, ids, n);
            check_loop_changes(&fx, ids, n);
            check_gate(&fx, ids, n, ref1);
        }
        free(ids);
        free(ref1);
        free(ref2);
    }
    dory_fixture_close(&fx);
    CMF_TEST_END();
}
