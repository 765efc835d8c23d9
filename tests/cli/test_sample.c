/* test_sample.c — the sampler (src/sample): greedy, temperature, top-k, top-p, min-p, penalties, the PRNG. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "sample/sample.h"
#include "testutil.h"

static cmf_sampler *make(int vocab, cmf_sampler_params p) {
    cmf_sampler *s = NULL;
    cmf_status st = cmf_sampler_new(vocab, &p, &s);
    CHECK_MSG(st == CMF_OK, "%s", cmf_last_error());
    return s;
}

/* Deterministic pseudo-random logits for the tests (independent of the sampler's PRNG). */
static void fill_logits(float *l, int n, uint32_t seed) {
    uint32_t x = seed * 2654435761u + 1u;
    for (int i = 0; i < n; i++) {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        l[i] = (float)(x % 20000u) / 1000.0f - 10.0f;
    }
}

static void softmax(const float *l, int n, float temp, double *p) {
    double m = -INFINITY, z = 0;
    for (int i = 0; i < n; i++) m = fmax(m, l[i] / temp);
    for (int i = 0; i < n; i++) z += (p[i] = exp(l[i] / temp - m));
    for (int i = 0; i < n; i++) p[i] /= z;
}

/* PCG32 against the published pcg32-demo vector (pcg-c-basic: srandom(42, 54)). */
static void test_pcg32(void) {
    cmf_rng r = {0, (54u << 1) | 1u};
    (void)cmf_rng_u32(&r);
    r.state += 42u;
    (void)cmf_rng_u32(&r);
    const uint32_t want[6] = {0xa15c02b7u, 0x7b47f409u, 0xba1d3330u, 0x83d2f293u, 0xbfa4784bu, 0xcbed606eu};
    for (int i = 0; i < 6; i++) {
        uint32_t got = cmf_rng_u32(&r);
        CHECK_MSG(got == want[i], "pcg32 output %d: %08x != %08x", i, got, want[i]);
    }
    cmf_rng a, b;
    cmf_rng_seed(&a, 7);
    cmf_rng_seed(&b, 7);
    for (int i = 0; i < 100; i++) {
        double u = cmf_rng_uniform(&a);
        CHECK(u >= 0.0 && u < 1.0);
        CHECK(u == cmf_rng_uniform(&b));
    }
}

static void test_argmax(void) {
    float v[6] = {1, 3, -2, 3, NAN, 0};
    CHECK(cmf_argmax(v, 6) == 1); /* tie -> lowest id */
    float w[3] = {NAN, -INFINITY, NAN};
    CHECK(cmf_argmax(w, 3) == 1);
    float x[2] = {NAN, NAN};
    CHECK(cmf_argmax(x, 2) == -1);

    cmf_sampler_params p = cmf_sampler_default_params();
    p.temperature = 0;
    cmf_sampler *s = make(6, p);
    int32_t t = -1;
    CHECK(cmf_sampler_sample(s, v, &t) == CMF_OK && t == 1);
    float allnan[6] = {NAN, NAN, NAN, NAN, NAN, NAN};
    CHECK(cmf_sampler_sample(s, allnan, &t) == CMF_E_ARG);
    cmf_sampler_free(s);
}

/* temperature -> 0 converges to greedy; top-k = 1 is greedy at any temperature. */
static void test_greedy_limits(void) {
    enum { V = 1000 };
    float l[V];
    for (int trial = 0; trial < 20; trial++) {
        fill_logits(l, V, 100u + (uint32_t)trial);
        int32_t best = cmf_argmax(l, V);
        cmf_sampler_params p = cmf_sampler_default_params();
        p.temperature = 1e-4f;
        p.top_k = 0;
        p.top_p = 1.0f;
        p.seed = (uint64_t)trial;
        cmf_sampler *cold = make(V, p);
        p.temperature = 1.5f;
        p.top_k = 1;
        cmf_sampler *k1 = make(V, p);
        for (int i = 0; i < 50; i++) {
            int32_t a = -1, b = -1;
            CHECK(cmf_sampler_sample(cold, l, &a) == CMF_OK);
            CHECK(cmf_sampler_sample(k1, l, &b) == CMF_OK);
            /* the limit is uniform over the tied maxima: any of them (and nothing else) may be drawn */
            CHECK_MSG(a >= 0 && a < V && l[a] == l[best], "cold sample %d is not a maximum (argmax %d)", a, best);
            CHECK_MSG(b == best, "top-k=1 sample %d != argmax %d", b, best);
        }
        cmf_sampler_free(cold);
        cmf_sampler_free(k1);
    }
}

/* top-p keeps the minimal nucleus: probabilities 0.5, 0.3, 0.15, 0.05. */
static void test_top_p(void) {
    const float probs[4] = {0.15f, 0.5f, 0.05f, 0.3f}; /* ids 1, 3, 0, 2 in order */
    float l[4];
    for (int i = 0; i < 4; i++) l[i] = logf(probs[i]);
    struct {
        float top_p;
        int allowed[4];
    } cases[] = {
        {0.45f, {0, 1, 0, 0}}, {0.79f, {0, 1, 0, 1}}, {0.81f, {1, 1, 0, 1}}, {0.96f, {1, 1, 1, 1}}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        cmf_sampler_params p = cmf_sampler_default_params();
        p.temperature = 1.0f;
        p.top_k = 0;
        p.top_p = cases[c].top_p;
        p.seed = 1234;
        cmf_sampler *s = make(4, p);
        int seen[4] = {0};
        for (int i = 0; i < 4000; i++) {
            int32_t t = -1;
            CHECK(cmf_sampler_sample(s, l, &t) == CMF_OK);
            if (t >= 0 && t < 4) seen[t]++;
        }
        for (int i = 0; i < 4; i++) {
            if (cases[c].allowed[i])
                CHECK_MSG(seen[i] > 0, "top_p %.2f: id %d in the nucleus never drawn", cases[c].top_p, i);
            else
                CHECK_MSG(seen[i] == 0, "top_p %.2f: id %d outside the nucleus drawn %d times", cases[c].top_p,
                          i, seen[i]);
        }
        cmf_sampler_free(s);
    }
}

/* top-k on a large vocabulary: every draw is among the true k largest (checked with a full sort here). */
static int cmp_desc(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return x < y ? 1 : x > y ? -1 : 0;
}

static void test_top_k_large(void) {
    enum { V = 50000, K = 40 };
    float *l = malloc(V * sizeof *l), *sorted = malloc(V * sizeof *sorted);
    fill_logits(l, V, 7);
    memcpy(sorted, l, V * sizeof *l);
    qsort(sorted, V, sizeof *sorted, cmp_desc);
    float kth = sorted[K - 1];
    cmf_sampler_params p = cmf_sampler_default_params();
    p.temperature = 5.0f; /* flat enough that many of the k get drawn */
    p.top_k = K;
    p.top_p = 1.0f;
    p.seed = 99;
    cmf_sampler *s = make(V, p);
    int distinct = 0;
    char *hit = calloc(V, 1);
    for (int i = 0; i < 2000; i++) {
        int32_t t = -1;
        CHECK(cmf_sampler_sample(s, l, &t) == CMF_OK);
        CHECK_MSG(t >= 0 && t < V && l[t] >= kth, "draw %d: id %d (logit %g) not in the top %d (kth %g)", i, t,
                  t >= 0 && t < V ? (double)l[t] : 0.0, K, (double)kth);
        if (t >= 0 && t < V && !hit[t]) hit[t] = 1, distinct++;
    }
    CHECK_MSG(distinct > K / 2, "only %d distinct tokens among the top %d", distinct, K);
    cmf_sampler_free(s);
    free(hit);
    free(l);
    free(sorted);
}

/* Same seed, same tokens; another seed, another sequence. */
static void test_seed(void) {
    enum { V = 300, N = 500 };
    float l[V];
    fill_logits(l, V, 3);
    for (int i = 0; i < V; i++) l[i] *= 0.2f;
    cmf_sampler_params p = cmf_sampler_default_params();
    p.seed = 42;
    cmf_sampler *a = make(V, p), *b = make(V, p);
    p.seed = 43;
    cmf_sampler *c = make(V, p);
    int32_t ta[N], tb[N], tc[N];
    for (int i = 0; i < N; i++) {
        CHECK(cmf_sampler_sample(a, l, &ta[i]) == CMF_OK);
        CHECK(cmf_sampler_sample(b, l, &tb[i]) == CMF_OK);
        CHECK(cmf_sampler_sample(c, l, &tc[i]) == CMF_OK);
    }
    CHECK(memcmp(ta, tb, sizeof ta) == 0);
    CHECK(memcmp(ta, tc, sizeof ta) != 0);
    cmf_sampler_reset(a); /* reset restarts the stream */
    for (int i = 0; i < N; i++) {
        int32_t t;
        CHECK(cmf_sampler_sample(a, l, &t) == CMF_OK && t == ta[i]);
    }
    cmf_sampler_free(a);
    cmf_sampler_free(b);
    cmf_sampler_free(c);
}

/* Empirical frequencies over many draws match softmax(l / T) (renormalized over what top-k / min-p keep). */
static void check_freq(const char *what, const float *l, int V, cmf_sampler_params p, const double *want) {
    enum { N = 200000 };
    cmf_sampler *s = make(V, p);
    int *cnt = calloc((size_t)V, sizeof *cnt);
    for (int i = 0; i < N; i++) {
        int32_t t = -1;
        if (cmf_sampler_sample(s, l, &t) != CMF_OK || t < 0 || t >= V) {
            CHECK_MSG(0, "%s: sample failed", what);
            break;
        }
        cnt[t]++;
    }
    for (int i = 0; i < V; i++) {
        double f = (double)cnt[i] / N;
        /* 5 standard deviations of a binomial proportion, plus a floor */
        double tol = 5.0 * sqrt(want[i] * (1 - want[i]) / N) + 1e-4;
        CHECK_MSG(fabs(f - want[i]) <= tol, "%s: id %d frequency %.5f vs probability %.5f (tol %.5f)", what, i, f,
                  want[i], tol);
    }
    free(cnt);
    cmf_sampler_free(s);
}

static void test_frequencies(void) {
    enum { V = 8 };
    const float l[V] = {1.0f, 0.2f, -0.5f, 2.0f, 0.9f, -3.0f, 1.5f, 0.0f};
    double q[V], want[V];

    cmf_sampler_params p = cmf_sampler_default_params();
    p.temperature = 0.7f;
    p.top_k = 0;
    p.top_p = 1.0f;
    p.seed = 2024;
    softmax(l, V, 0.7f, q);
    check_freq("temp 0.7", l, V, p, q);

    /* top-k = 3 keeps ids 3, 6, 0 */
    p.top_k = 3;
    double z = q[3] + q[6] + q[0];
    for (int i = 0; i < V; i++) want[i] = (i == 3 || i == 6 || i == 0) ? q[i] / z : 0.0;
    check_freq("temp 0.7 top-k 3", l, V, p, want);

    /* min-p = 0.2 at T = 1: keep p_i >= 0.2 p_max, i.e. l_i >= 2 + ln 0.2 = 0.39: ids 3, 6, 0, 4 */
    p.temperature = 1.0f;
    p.top_k = 0;
    p.min_p = 0.2f;
    softmax(l, V, 1.0f, q);
    z = q[3] + q[6] + q[0] + q[4];
    for (int i = 0; i < V; i++) want[i] = (i == 3 || i == 6 || i == 0 || i == 4) ? q[i] / z : 0.0;
    check_freq("min-p 0.2", l, V, p, want);
}

/* Penalties: repetition (divide positive, multiply negative), presence, frequency, and the window. */
static void test_penalties(void) {
    cmf_sampler_params p = cmf_sampler_default_params();
    p.temperature = 0;
    p.repeat_penalty = 1.1f;
    p.penalty_last_n = 2;
    cmf_sampler *s = make(3, p);
    float a[3] = {2.0f, 1.9f, -5.0f};
    int32_t t = -1;
    CHECK(cmf_sampler_sample(s, a, &t) == CMF_OK && t == 0);
    cmf_sampler_accept(s, 0); /* 2.0 / 1.1 = 1.82 < 1.9 */
    CHECK(cmf_sampler_sample(s, a, &t) == CMF_OK && t == 1);
    cmf_sampler_accept(s, 1);
    cmf_sampler_accept(s, 1); /* window of 2 is now {1, 1}: 0 is no longer penalized */
    CHECK(cmf_sampler_sample(s, a, &t) == CMF_OK && t == 0);
    float b[3] = {-1.0f, -1.05f, -9.0f};
    cmf_sampler_reset(s);
    cmf_sampler_accept(s, 0); /* -1.0 * 1.1 = -1.1 < -1.05 */
    CHECK(cmf_sampler_sample(s, b, &t) == CMF_OK && t == 1);
    cmf_sampler_free(s);

    p = cmf_sampler_default_params();
    p.temperature = 0;
    p.frequency_penalty = 0.3f;
    p.presence_penalty = 0.05f;
    p.penalty_last_n = 8;
    s = make(3, p);
    float c[3] = {1.0f, 0.5f, 0.0f};
    cmf_sampler_accept(s, 0); /* 1.0 - 0.05 - 0.3 = 0.65 > 0.5 */
    CHECK(cmf_sampler_sample(s, c, &t) == CMF_OK && t == 0);
    cmf_sampler_accept(s, 0); /* 1.0 - 0.05 - 0.6 = 0.35 < 0.5 */
    CHECK(cmf_sampler_sample(s, c, &t) == CMF_OK && t == 1);
    CHECK(c[0] == 1.0f); /* the caller's logits are not modified */
    cmf_sampler_free(s);
}

static void test_bad_params(void) {
    cmf_sampler *s = NULL;
    cmf_sampler_params p = cmf_sampler_default_params();
    CHECK(cmf_sampler_new(0, &p, &s) == CMF_E_ARG && s == NULL);
    p.top_p = 0.0f;
    CHECK(cmf_sampler_new(10, &p, &s) == CMF_E_ARG);
    CHECK(strstr(cmf_last_error(), "top_p") != NULL);
    p = cmf_sampler_default_params();
    p.top_k = -1;
    CHECK(cmf_sampler_new(10, &p, &s) == CMF_E_ARG);
    p = cmf_sampler_default_params();
    p.repeat_penalty = 0.0f;
    CHECK(cmf_sampler_new(10, &p, &s) == CMF_E_ARG);
    p = cmf_sampler_default_params();
    p.min_p = 1.5f;
    CHECK(cmf_sampler_new(10, &p, &s) == CMF_E_ARG);
    p = cmf_sampler_default_params();
    p.temperature = NAN;
    CHECK(cmf_sampler_new(10, &p, &s) == CMF_E_ARG);

    /* all -inf (fully masked) logits cannot be sampled */
    p = cmf_sampler_default_params();
    s = make(3, p);
    float m[3] = {-INFINITY, -INFINITY, -INFINITY};
    int32_t t;
    CHECK(cmf_sampler_sample(s, m, &t) == CMF_E_ARG);
    float one[3] = {-INFINITY, 0.0f, -INFINITY}; /* only id 1 can be drawn */
    for (int i = 0; i < 20; i++) CHECK(cmf_sampler_sample(s, one, &t) == CMF_OK && t == 1);
    cmf_sampler_free(s);
    /* greedy as well: an all -inf row is an error, not id 0 */
    p = cmf_sampler_default_params();
    p.temperature = 0.0f;
    s = make(3, p);
    t = -7;
    CHECK(cmf_sampler_sample(s, m, &t) == CMF_E_ARG && t == -7);
    CHECK(strstr(cmf_last_error(), "-inf") != NULL);
    CHECK(cmf_sampler_sample(s, one, &t) == CMF_OK && t == 1);
    float nan_inf[3] = {NAN, -INFINITY, NAN}; /* NaN never wins; the only number is -inf */
    CHECK(cmf_sampler_sample(s, nan_inf, &t) == CMF_E_ARG);
    cmf_sampler_free(s);
}

int main(void) {
    test_pcg32();
    test_argmax();
    test_greedy_limits();
    test_top_p();
    test_top_k_large();
    test_seed();
    test_frequencies();
    test_penalties();
    test_bad_params();
    CMF_TEST_END();
}
