/* test_dory_o1.c — the O(1) far field in Dory sessions (DORY.md §3.2, src/model/dory_o1.c) on the r64_b fixture
 * ("S-S-S-*-"x3: full layers 6 (input), 14 (recurrent), 22 (output); window 4), 48 seeded random tokens:
 *   - slots: "all" = one per (full layer, KV slot): 4 under per_loop with 2 loops, 3 under last_loop; "deep1" = 1;
 *   - an operator window wider than the run keeps every state exact-only: logits equal exact attention within 1e-5
 *     for a chunked prompt then decode, in per_loop, and in last_loop with a per-token loop schedule (where a missing
 *     rewind would push rows twice) and through the Recon gate; every state then holds exactly pos rows;
 *   - a real far field (window 4, sink 2, m 8, prompt 24 > w + sink + 8): every state sealed in skeleton mode with
 *     far_len + window + sink == rows == pos after decode (so last_loop loops > 0 rewound), logits finite and
 *     different from exact; the perplexity of the decoded positions against exact is printed as a ratio and must
 *     stay within [0.5, 2] on this random model; a traced-query stride of 3 also runs and seals;
 *   - refusals: an MLP or sliding sub-layer in the list, enabling on a used session, the Conf gate with the far field. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dorytest.h"
#include "testutil.h"

#define NT 48
#define PROMPT 24

typedef struct {
    const char *layers;
    int window, sink, m, qt_stride; /* layers NULL: exact */
} o1cfg;

/* Prompt of `prompt` tokens in calls of `chunk`, then one token per call with loops sched[i % ns] (per_loop: the
 * fixed `loops`). Returns all logits [NT][V]; *rows_ok = every far state holds pos rows and (skeleton) satisfies
 * far_len + window + sink == rows; *skel = number of states in skeleton mode. */
static float *run(const cmf_dory *d, const int32_t *ids, int mode, int loops, const int *sched, int ns, int chunk,
                  const o1cfg *o, int *rows_ok, int *skel, int *slots) {
    cmf_dory_state *s;
    if (cmf_dory_state_new(d, 64, chunk, mode, mode == CMF_DORY_KV_LAST_LOOP ? 4 : loops, &s) != CMF_OK) return NULL;
    if (o && o->layers && cmf_dory_o1_enable(s, o->layers, o->m, o->window, o->sink, 0, o->qt_stride, 0) != CMF_OK) {
        fprintf(stderr, "o1: %s\n", cmf_last_error());
        cmf_dory_state_free(s);
        return NULL;
    }
    const size_t V = (size_t)d->cfg.vocab_size;
    float *out = malloc(NT * V * sizeof(float));
    int p = 0;
    while (out && p < PROMPT) {
        int b = PROMPT - p < chunk ? PROMPT - p : chunk;
        if (cmf_dory_forward(s, ids + p, b, loops, out + p * V) != CMF_OK) {
            fprintf(stderr, "forward: %s\n", cmf_last_error());
            free(out);
            out = NULL;
        }
        p += b;
    }
    for (; out && p < NT; p++) {
        int L = mode == CMF_DORY_KV_LAST_LOOP && sched ? sched[p % ns] : loops;
        if (cmf_dory_forward(s, ids + p, 1, L, out + p * V) != CMF_OK) {
            fprintf(stderr, "decode: %s\n", cmf_last_error());
            free(out);
            out = NULL;
        }
    }
    *rows_ok = 1;
    *skel = 0;
    *slots = cmf_dory_o1_slots(s);
    for (int i = 0; i < *slots; i++)
        for (int g = 0; g < d->cfg.n_kv_heads; g++) {
            const cmf_o1 *st = cmf_dory_o1_state(s, i, g);
            if (!st || cmf_o1_rows(st) != s->pos) *rows_ok = 0;
            if (st && cmf_o1_sealed(st)) {
                (*skel)++;
                if (cmf_o1_far_len(st) + cmf_o1_window_len(st) + cmf_o1_sink_len(st) != cmf_o1_rows(st)) *rows_ok = 0;
            }
        }
    if (o && o->layers && !cmf_dory_o1_sealed(s)) *rows_ok = 0;
    cmf_dory_state_free(s);
    return out;
}

/* Perplexity of ids[p+1] under logits row p for p in [PROMPT, NT-1). */
static double ppl(const float *lg, const int32_t *ids, int V) {
    double nll = 0;
    int n = 0;
    for (int p = PROMPT; p + 1 < NT; p++, n++) {
        const float *l = lg + (size_t)p * V;
        double mx = l[0], sum = 0;
        for (int j = 1; j < V; j++) mx = l[j] > mx ? l[j] : mx;
        for (int j = 0; j < V; j++) sum += exp(l[j] - mx);
        nll -= l[ids[p + 1]] - mx - log(sum);
    }
    return exp(nll / n);
}

static int count_slots(const cmf_dory *d, int mode, const char *layers) {
    cmf_dory_state *s;
    if (cmf_dory_state_new(d, 64, 8, mode, 2, &s) != CMF_OK) return -1;
    int n = cmf_dory_o1_enable(s, layers, 0, 0, -1, 0, 0, 0) == CMF_OK ? cmf_dory_o1_slots(s) : -1;
    cmf_dory_state_free(s);
    return n;
}

int main(void) {
    dory_fixture fx;
    if (dory_fixture_open("r64_b", &fx) != 0) {
        cmf_test_failures++;
        CMF_TEST_END();
    }
    const cmf_dory *d = fx.d;
    const int V = d->cfg.vocab_size;
    int32_t ids[NT];
    uint32_t r = 777;
    for (int i = 0; i < NT; i++) {
        r = r * 1664525u + 1013904223u;
        ids[i] = (int32_t)((r >> 8) % (uint32_t)V);
    }
    static const int SCHED[] = {2, 1, 2, 2, 1, 3, 4, 1};
    int ok, skel, slots;

    CHECK(count_slots(d, CMF_DORY_KV_PER_LOOP, "all") == 4);
    CHECK(count_slots(d, CMF_DORY_KV_LAST_LOOP, "all") == 3);
    CHECK(count_slots(d, CMF_DORY_KV_LAST_LOOP, "deep1") == 1);
    CHECK(count_slots(d, CMF_DORY_KV_LAST_LOOP, "14") == 1);

    /* a window wider than the run: exact */
    const o1cfg wide = {"all", 64, 4, 8, 1}, exact = {NULL, 0, 0, 0, 0};
    for (int mode = 0; mode < 2; mode++) {
        const int *sc = mode ? SCHED : NULL;
        float *a = run(d, ids, mode, 2, sc, 8, 5, &exact, &ok, &skel, &slots);
        float *b = run(d, ids, mode, 2, sc, 8, 5, &wide, &ok, &skel, &slots);
        CHECK(a && b);
        if (a && b) {
            double e = dory_max_abs_diff(b, a, (size_t)NT * V, NULL);
            printf("o1 window 64 vs exact, %s: max |diff| %.3g, states ok %d, skeleton %d of %d slots\n",
                   mode ? "last_loop schedule" : "per_loop", e, ok, skel, slots);
            CHECK(e <= 1e-5 && ok && skel == 0 && slots == (mode ? 3 : 4));
        }
        free(a);
        free(b);
    }
    { /* the Recon gate with the far field on: rows still enter once */
        cmf_dory_state *s;
        CHECK(cmf_dory_state_new(d, 64, 8, CMF_DORY_KV_LAST_LOOP, 2, &s) == CMF_OK);
        CHECK(cmf_dory_o1_enable(s, "all", 8, 4, 2, 0, 0, 0) == CMF_OK);
        CHECK(cmf_dory_forward(s, ids, PROMPT, 2, NULL) == CMF_OK);
        float w[64];
        for (int j = 0; j < d->cfg.hidden_size; j++) w[j] = (float)((j % 3) - 1);
        cmf_dory_probe pr = {d->cfg.hidden_size, w, 0.0};
        int ones = 0, np;
        for (int p = PROMPT; p < NT; p++) {
            CHECK(cmf_dory_decode_recon(s, ids[p], &pr, &np, NULL) == CMF_OK);
            ones += np == 1;
        }
        int rows = 1;
        for (int i = 0; i < cmf_dory_o1_slots(s); i++)
            rows &= cmf_o1_rows(cmf_dory_o1_state(s, i, 0)) == NT && cmf_o1_sealed(cmf_dory_o1_state(s, i, 0));
        printf("o1 + recon gate: %d of %d tokens one pass, every state %d rows: %d\n", ones, NT - PROMPT, NT, rows);
        CHECK(rows);
        CHECK(cmf_dory_decode_gated(s, ids[0], 0.5f, NULL) == CMF_E_UNSUPPORTED);
        cmf_dory_state_free(s);
    }

    /* a real far field */
    const o1cfg far = {"all", 4, 2, 8, 1}, far3 = {"all", 4, 2, 8, 3};
    for (int mode = 0; mode < 2; mode++) {
        const int *sc = mode ? SCHED : NULL;
        float *a = run(d, ids, mode, 2, sc, 8, 8, &exact, &ok, &skel, &slots);
        float *b = run(d, ids, mode, 2, sc, 8, 8, &far, &ok, &skel, &slots);
        CHECK(a && b);
        if (a && b) {
            int finite = 1;
            for (size_t i = 0; i < (size_t)NT * V; i++) finite &= isfinite(b[i]) != 0;
            double e_prompt = dory_max_abs_diff(b, a, (size_t)PROMPT * V, NULL);
            double e = dory_max_abs_diff(b + (size_t)PROMPT * V, a + (size_t)PROMPT * V, (size_t)(NT - PROMPT) * V, NULL);
            double pe = ppl(a, ids, V), po = ppl(b, ids, V);
            printf("o1 w4 s2 m8 %s: prompt max |diff| %.3g, decode max |diff| %.3g; ppl exact %.4f, o1 %.4f, "
                   "ratio %.4f; %d of %d states in skeleton mode, invariants %d\n",
                   mode ? "last_loop schedule" : "per_loop", e_prompt, e, pe, po, po / pe, skel,
                   slots * d->cfg.n_kv_heads, ok);
            CHECK(finite && ok && skel == slots * d->cfg.n_kv_heads && e_prompt == 0 && e > 1e-4);
            CHECK(po / pe > 0.5 && po / pe < 2.0);
        }
        free(a);
        free(b);
        b = run(d, ids, mode, 2, sc, 8, 8, &far3, &ok, &skel, &slots);
        CHECK(b && ok && skel == slots * d->cfg.n_kv_heads);
        free(b);
    }

    /* seal during the prefill at seal_at = 16 (prompt calls of 10: the second is split at 16): the far slots' exact
     * caches hold 16 rows, every state ends with NT rows, the prompt rows before the seal are exact */
    for (int mode = 0; mode < 2; mode++) {
        cmf_dory_state *s;
        CHECK(cmf_dory_state_new(d, 64, 10, mode, 2, &s) == CMF_OK);
        CHECK(cmf_dory_o1_enable(s, "all", 8, 4, 2, 0, 2, 16) == CMF_OK);
        int cut = 1;
        for (int l = 0; l < d->cfg.n_layers; l++)
            if (d->cfg.pattern[l] == '*') cut &= s->kv[s->slot[l]].rows == 16;
        CHECK(cut);
        float *lg = malloc((size_t)NT * V * sizeof(float));
        for (int p = 0; p < PROMPT; p += 10)
            CHECK(cmf_dory_forward(s, ids + p, PROMPT - p < 10 ? PROMPT - p : 10, 2, lg + (size_t)p * V) == CMF_OK);
        CHECK(cmf_dory_o1_sealed(s));
        for (int p = PROMPT; p < NT; p++) CHECK(cmf_dory_forward(s, ids + p, 1, 2, lg + (size_t)p * V) == CMF_OK);
        int rows = 1, finite = 1;
        for (int i = 0; i < cmf_dory_o1_slots(s); i++)
            for (int g = 0; g < d->cfg.n_kv_heads; g++) rows &= cmf_o1_rows(cmf_dory_o1_state(s, i, g)) == NT;
        for (size_t i = 0; i < (size_t)NT * V; i++) finite &= isfinite(lg[i]) != 0;
        int ok2, sk2, sl2;
        /* exact in calls of 10: the same first 16 rows under per_loop; under last_loop the same first 10 (the split
         * call's rows 10..15 saw their own loops' K/V in a 6-row call instead of a 10-row one) */
        float *a = run(d, ids, mode, 2, NULL, 1, 10, &exact, &ok2, &sk2, &sl2);
        CHECK(a && dory_max_abs_diff(lg, a, (mode ? 10 : 16) * (size_t)V, NULL) <= 1e-5);
        printf("o1 seal_at 16 (%s): states %d rows each: %d, finite %d\n", mode ? "last_loop" : "per_loop", NT, rows,
               finite);
        CHECK(rows && finite);
        free(a);
        free(lg);
        cmf_dory_state_free(s);
    }

    /* refusals */
    cmf_dory_state *s;
    CHECK(cmf_dory_state_new(d, 64, 8, CMF_DORY_KV_LAST_LOOP, 2, &s) == CMF_OK);
    CHECK(cmf_dory_o1_enable(s, "6,7", 0, 0, -1, 0, 0, 0) == CMF_E_ARG && strstr(cmf_last_error(), "MLP"));
    CHECK(cmf_dory_o1_enable(s, "2", 0, 0, -1, 0, 0, 0) == CMF_E_ARG && strstr(cmf_last_error(), "slid"));
    CHECK(cmf_dory_o1_enable(s, "off", 0, 0, -1, 0, 0, 0) == CMF_OK && s->o1 == NULL); /* nothing to convert */
    CHECK(s->o1 == NULL);
    CHECK(cmf_dory_forward(s, ids, 3, 2, NULL) == CMF_OK);
    CHECK(cmf_dory_o1_enable(s, "all", 0, 0, -1, 0, 0, 0) == CMF_E_ARG);
    cmf_dory_state_free(s);

    dory_fixture_close(&fx);
    CMF_TEST_END();
}
