/* test_dory_ref64.c — our f32 Dory forward against this project's own float64 reference (scripts/dory/ref64.py,
 * written from DORY.md §1; fixtures tests/data/dory/r64_a and r64_b, see ref.json there):
 *   r64_a: "*-S-*-", blocks 2/2/2, 8 q / 2 kv heads (GQA 4:1), window 3, F32 checkpoint;
 *   r64_b: "S-S-S-*-"x3, blocks 8/8/8, 4 q / 2 kv heads (GQA 2:1), window 4, BF16 checkpoint, gate init 4.5,
 *          signed alphas, rope profiles that do not follow the layer kind.
 * Per case, 2 sequences of 12 tokens, loops 1..4, every logit at every position within 3e-5 absolute:
 *   - one-shot prefill in per_loop and in last_loop  vs oneshot_<s>_k<L>;
 *   - per_loop in calls of 8, 3 and 1 tokens, and per_loop chunked prefill (5, 2) then one-token decode
 *     vs oneshot_<s>_k<L> (the reference asserts these equal one-shot in float64);
 *   - last_loop in calls of 8, 3 and 1 tokens vs the reference run with the same calls (lastloop_<s>_k<L>_c<C>);
 *   - last_loop with a per-token loop schedule (2,1,2,2,1,3,4,1,2,4,3,1): the public API takes the loop count per
 *     call, so this is one token per call with that call's loop count, vs sched_<s>;
 *   - last_loop with calls of (3,4,2,3) tokens at loops (2,1,4,3) vs csched_<s>.
 * Sessions use n_batch = the largest call, so the sliding rings (window + n_batch rows) wrap for short calls. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dorytest.h"
#include "testutil.h"

#define TOL 3e-5
#define MAXC 64

/* Runs ids through one session in `nc` calls of lens[i] tokens with loops[i] loops; returns all logits or NULL. */
static float *run_calls(const cmf_dory *d, const int32_t *ids, int kv_mode, const int *lens, const int *loops, int nc) {
    int nb = 1, ml = 1;
    for (int i = 0; i < nc; i++) {
        if (lens[i] > nb) nb = lens[i];
        if (loops[i] > ml) ml = loops[i];
    }
    return dory_run_calls(d, ids, 64, kv_mode, nb, ml, lens, loops, nc);
}

/* Calls of `chunk` tokens, all at `loops`. */
static int chunk_calls(int n, int chunk, int loops, int *lens, int *lps) {
    int nc = 0;
    for (int p = 0; p < n && nc < MAXC; p += chunk, nc++) {
        lens[nc] = n - p < chunk ? n - p : chunk;
        lps[nc] = loops;
    }
    return nc;
}

typedef struct {
    const char *name;
    double worst;
    int runs;
} tally;

static void compare(const dory_fixture *fx, const char *refname, const float *got, int n, tally *t, const char *what) {
    size_t m = 0;
    float *ref = dory_ref_floats(fx, refname, &m);
    const size_t V = (size_t)fx->d->cfg.vocab_size;
    CHECK_MSG(ref && got && m == (size_t)n * V, "%s: reference %s missing or run failed", what, refname);
    if (ref && got && m == (size_t)n * V) {
        double mr, err = dory_max_abs_diff(got, ref, m, &mr);
        CHECK_MSG(err <= TOL, "%s vs %s: max |err| %.3g (max |ref| %.3g)", what, refname, err, mr);
        if (!(err <= t->worst)) t->worst = err;
        t->runs++;
        if (getenv("DORY_VERBOSE")) printf("  %-40s vs %-22s max |err| %.3g\n", what, refname, err);
    }
    free(ref);
}

static int32_t *ref_ints(const dory_fixture *fx, const char *name, int *n) {
    size_t m;
    float *f = dory_ref_floats(fx, name, &m);
    if (!f) return NULL;
    int32_t *v = malloc(m * sizeof(int32_t));
    for (size_t i = 0; v && i < m; i++) v[i] = (int32_t)f[i];
    free(f);
    *n = (int)m;
    return v;
}

static void run_case(const char *name) {
    dory_fixture fx;
    if (dory_fixture_open(name, &fx) != 0) {
        cmf_test_failures++;
        return;
    }
    tally t[6] = {{"one-shot (per_loop, last_loop)", 0, 0}, {"per_loop chunks 8/3/1", 0, 0},
                  {"per_loop prefill + decode", 0, 0},     {"last_loop chunks 8/3/1", 0, 0},
                  {"last_loop per-token schedule", 0, 0},  {"last_loop per-call schedule", 0, 0}};
    int lens[MAXC], lps[MAXC];
    char ref[64], what[96];
    for (int s = 0; s < 2; s++) {
        int n;
        int32_t *ids = dory_ref_tokens(&fx, s, &n);
        CHECK(ids != NULL && n == 12);
        if (!ids || n != 12) {
            free(ids);
            continue;
        }
        for (int L = 1; L <= 4; L++) {
            snprintf(ref, sizeof ref, "oneshot_%d_k%d", s, L);
            for (int mode = 0; mode < 2; mode++) {
                int nc = chunk_calls(n, n, L, lens, lps);
                float *got = run_calls(fx.d, ids, mode, lens, lps, nc);
                snprintf(what, sizeof what, "%s seq %d loops %d %s one-shot", name, s, L, mode ? "last_loop" : "per_loop");
                compare(&fx, ref, got, n, &t[0], what);
                free(got);
            }
            static const int CH[] = {8, 3, 1};
            for (int c = 0; c < 3; c++) {
                int nc = chunk_calls(n, CH[c], L, lens, lps);
                float *got = run_calls(fx.d, ids, CMF_DORY_KV_PER_LOOP, lens, lps, nc);
                snprintf(what, sizeof what, "%s seq %d loops %d per_loop chunk %d", name, s, L, CH[c]);
                compare(&fx, ref, got, n, &t[1], what);
                free(got);
            }
            { /* prefill in calls of 5 and 2 tokens, then one token per call */
                int nc = 0;
                lens[nc++] = 5;
                lens[nc++] = 2;
                while (nc < 2 + (n - 7)) lens[nc++] = 1;
                for (int i = 0; i < nc; i++) lps[i] = L;
                float *got = run_calls(fx.d, ids, CMF_DORY_KV_PER_LOOP, lens, lps, nc);
                snprintf(what, sizeof what, "%s seq %d loops %d per_loop 5+2 then decode", name, s, L);
                compare(&fx, ref, got, n, &t[2], what);
                free(got);
            }
            for (int c = 0; c < 3; c++) {
                char lref[64];
                if (L == 1)
                    snprintf(lref, sizeof lref, "%s", ref); /* one loop: the last loop is the only loop */
                else
                    snprintf(lref, sizeof lref, "lastloop_%d_k%d_c%d", s, L, CH[c]);
                int nc = chunk_calls(n, CH[c], L, lens, lps);
                float *got = run_calls(fx.d, ids, CMF_DORY_KV_LAST_LOOP, lens, lps, nc);
                snprintf(what, sizeof what, "%s seq %d loops %d last_loop chunk %d", name, s, L, CH[c]);
                compare(&fx, lref, got, n, &t[3], what);
                free(got);
            }
        }
        { /* per-token loop schedule: one token per call */
            int m;
            snprintf(ref, sizeof ref, "sched_loops_%d", s);
            int32_t *sl = ref_ints(&fx, ref, &m);
            CHECK(sl && m == n);
            if (sl && m == n) {
                for (int i = 0; i < n; i++) {
                    lens[i] = 1;
                    lps[i] = sl[i];
                }
                float *got = run_calls(fx.d, ids, CMF_DORY_KV_LAST_LOOP, lens, lps, n);
                snprintf(ref, sizeof ref, "sched_%d", s);
                snprintf(what, sizeof what, "%s seq %d last_loop per-token schedule", name, s);
                compare(&fx, ref, got, n, &t[4], what);
                free(got);
            }
            free(sl);
        }
        { /* per-call schedule */
            int m1, m2;
            snprintf(ref, sizeof ref, "csched_len_%d", s);
            int32_t *cl = ref_ints(&fx, ref, &m1);
            snprintf(ref, sizeof ref, "csched_loops_%d", s);
            int32_t *cp = ref_ints(&fx, ref, &m2);
            CHECK(cl && cp && m1 == m2 && m1 <= MAXC);
            if (cl && cp && m1 == m2 && m1 <= MAXC) {
                for (int i = 0; i < m1; i++) {
                    lens[i] = cl[i];
                    lps[i] = cp[i];
                }
                float *got = run_calls(fx.d, ids, CMF_DORY_KV_LAST_LOOP, lens, lps, m1);
                snprintf(ref, sizeof ref, "csched_%d", s);
                snprintf(what, sizeof what, "%s seq %d last_loop per-call schedule", name, s);
                compare(&fx, ref, got, n, &t[5], what);
                free(got);
            }
            free(cl);
            free(cp);
        }
        free(ids);
    }
    for (int i = 0; i < 6; i++)
        printf("%s: %-32s %2d runs, max |err| %.3g (tolerance %.0e)\n", name, t[i].name, t[i].runs, t[i].worst, TOL);
    dory_fixture_close(&fx);
}

int main(void) {
    run_case("r64_a");
    run_case("r64_b");
    CMF_TEST_END();
}
