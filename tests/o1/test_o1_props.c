/* test_o1_props.c — properties of the O(1) far-field operator (DORY.md §3.1; the reference's own property tests
 * are listed in §4): exact-only prompts equal exact softmax attention, a window wider than the run is exact, a GQA
 * group equals independent single-head states bit for bit, one far insertion per eviction, the FM rectifier never
 * implies negative far weights on iid data, constant memory over 1000 steps, the self-seal at w + sink + 9 rows,
 * snapshot/restore, and argument errors. Exact attention is recomputed here in double from the same rows. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/o1.h"
#include "testutil.h"

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define O1_TEST_ASAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__)
#define O1_TEST_ASAN 1
#endif
#ifdef O1_TEST_ASAN
size_t __sanitizer_get_current_allocated_bytes(void); /* the ASan runtime's allocator statistics */
static size_t heap_in_use(void) { return __sanitizer_get_current_allocated_bytes(); }
#else
#include <malloc.h>
static size_t heap_in_use(void) {
    struct mallinfo2 mi = mallinfo2();
    return mi.uordblks + mi.hblkhd; /* small chunks in use + mmapped chunks */
}
#endif

/* ---- deterministic iid N(0, sd²) data (PCG32 + Box–Muller) ---- */
static uint64_t rng_state = 0x853c49e6748fea9bULL;
static uint32_t pcg32(void) {
    uint64_t old = rng_state;
    rng_state = old * 6364136223846793005ULL + 1442695040888963407ULL;
    uint32_t xs = (uint32_t)(((old >> 18u) ^ old) >> 27u), rot = (uint32_t)(old >> 59u);
    return (xs >> rot) | (xs << ((-rot) & 31));
}
static float gauss(float sd) {
    double u1 = (pcg32() + 1.0) / 4294967297.0, u2 = pcg32() / 4294967296.0;
    return (float)(sd * sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}
static float *randn(size_t n, float sd) {
    float *x = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) x[i] = gauss(sd);
    return x;
}

/* Exact causal softmax attention, double: query q [d] against rows 0..t of k [.][k_stride] / v [.][v_stride]. */
static void exact_attn(const float *q, const float *k, size_t ks, const float *v, size_t vs, int d, int dv, int t,
                       double scale, double *out) {
    double mx = -INFINITY, den = 0.0, *s = malloc(sizeof(double) * (size_t)(t + 1));
    for (int j = 0; j <= t; j++) {
        double a = 0.0;
        for (int c = 0; c < d; c++) a += (double)q[c] * k[(size_t)j * ks + c];
        s[j] = a * scale;
        if (s[j] > mx) mx = s[j];
    }
    for (int c = 0; c < dv; c++) out[c] = 0.0;
    for (int j = 0; j <= t; j++) {
        double p = exp(s[j] - mx);
        den += p;
        for (int c = 0; c < dv; c++) out[c] += p * v[(size_t)j * vs + c];
    }
    for (int c = 0; c < dv; c++) out[c] /= den;
    free(s);
}

static cmf_o1 *make(int H, int d, int dv, int m, int w, int sink, float scale, cmf_o1_rect rect) {
    cmf_o1_params p;
    cmf_o1_default_params(&p, H, d, dv);
    p.m = m, p.window = w, p.sink = sink, p.scale = scale, p.rect = rect;
    cmf_o1 *st = NULL;
    cmf_status s = cmf_o1_create(&p, &st);
    CHECK_MSG(s == CMF_OK, "create: %s", cmf_last_error());
    return st;
}

/* Max |operator − exact| over rows [lo, hi) of a GQA group whose out rows are [H][dv]. */
static double err_vs_exact(const float *q, const float *k, const float *v, const float *out, int H, int d, int dv,
                           int lo, int hi, double scale) {
    double worst = 0.0, ex[64];
    for (int i = lo; i < hi; i++)
        for (int h = 0; h < H; h++) {
            exact_attn(q + ((size_t)i * H + h) * d, k, (size_t)d, v, (size_t)dv, d, dv, i, scale, ex);
            for (int c = 0; c < dv; c++) {
                double e = fabs(ex[c] - out[((size_t)i * H + h) * dv + c]);
                if (!(e <= worst)) worst = e; /* NaN wins */
            }
        }
    return worst;
}

/* A short prompt (t <= w + sink + 8) stays exact-only: seal readout and every step equal exact attention, up to
 * the last exact-only row; the next row seals the state itself, exactly as an explicit seal of those rows. */
static void test_short_prompt_and_self_seal(void) {
    const int H = 2, d = 16, dv = 8, w = 16, sink = 4, m = 8, t0 = 20, tx = w + sink + 8, T = 70;
    float *q = randn((size_t)T * H * d, 1.0f), *k = randn((size_t)T * d, 1.0f), *v = randn((size_t)T * dv, 1.0f);
    float *out = calloc((size_t)T * H * dv, sizeof(float)), *ref = calloc((size_t)T * H * dv, sizeof(float));
    cmf_o1 *st = make(H, d, dv, m, w, sink, 0.0f, CMF_O1_RECT_AGG);
    /* The boundary: t = w + sink + 8 is exact-only (seal readout = exact attention), t = w + sink + 9 is not. */
    CHECK(cmf_o1_seal(st, q, (size_t)H * d, k, (size_t)d, v, (size_t)dv, tx, out, (size_t)H * dv) == CMF_OK);
    CHECK(cmf_o1_sealed(st) == 0 && cmf_o1_rows(st) == tx && cmf_o1_window_len(st) == tx);
    double eb = err_vs_exact(q, k, v, out, H, d, dv, 0, tx, 1.0 / sqrt((double)d));
    CHECK_MSG(eb < 1e-5, "exact-only seal of %d rows differs from exact attention by %g", tx, eb);
    CHECK(cmf_o1_seal(st, q, (size_t)H * d, k, (size_t)d, v, (size_t)dv, tx + 1, NULL, 0) == CMF_OK);
    CHECK(cmf_o1_sealed(st) == 1 && cmf_o1_m_eff(st) == 4 && cmf_o1_far_len(st) + w + sink == tx + 1);
    /* A shorter prompt, then single steps up to the boundary: still exact. */
    memset(out, 0, sizeof(float) * (size_t)T * H * dv);
    CHECK(cmf_o1_seal(st, q, (size_t)H * d, k, (size_t)d, v, (size_t)dv, t0, out, (size_t)H * dv) == CMF_OK);
    CHECK(cmf_o1_sealed(st) == 0 && cmf_o1_rows(st) == t0 && cmf_o1_m_eff(st) == 0);
    for (int i = t0; i < tx; i++) {
        CHECK(cmf_o1_step(st, q + (size_t)i * H * d, k + (size_t)i * d, v + (size_t)i * dv,
                          out + (size_t)i * H * dv) == CMF_OK);
        CHECK(cmf_o1_sealed(st) == 0);
    }
    double e = err_vs_exact(q, k, v, out, H, d, dv, 0, tx, 1.0 / sqrt((double)d));
    printf("short prompt: max |err| vs exact over %d rows: %.3g\n", tx, e);
    CHECK_MSG(e < 1e-5, "short prompt differs from exact attention by %g", e);

    /* Row tx: the self-seal. The state must now equal one sealed explicitly over rows 0..tx. */
    CHECK(cmf_o1_step(st, q + (size_t)tx * H * d, k + (size_t)tx * d, v + (size_t)tx * dv,
                      out + (size_t)tx * H * dv) == CMF_OK);
    CHECK(cmf_o1_sealed(st) == 1 && cmf_o1_rows(st) == tx + 1);
    CHECK(cmf_o1_far_len(st) + w + sink == tx + 1);
    cmf_o1 *st2 = make(H, d, dv, m, w, sink, 0.0f, CMF_O1_RECT_AGG);
    CHECK(cmf_o1_seal(st2, q, (size_t)H * d, k, (size_t)d, v, (size_t)dv, tx + 1, ref, (size_t)H * dv) == CMF_OK);
    CHECK(memcmp(out + (size_t)tx * H * dv, ref + (size_t)tx * H * dv, sizeof(float) * H * dv) == 0);
    for (int i = tx + 1; i < T; i++) {
        cmf_o1_step(st, q + (size_t)i * H * d, k + (size_t)i * d, v + (size_t)i * dv, out + (size_t)i * H * dv);
        cmf_o1_step(st2, q + (size_t)i * H * d, k + (size_t)i * d, v + (size_t)i * dv, ref + (size_t)i * H * dv);
    }
    CHECK_MSG(memcmp(out + (size_t)tx * H * dv, ref + (size_t)tx * H * dv, sizeof(float) * (T - tx) * H * dv) == 0,
              "self-sealed state and explicitly sealed state diverge");
    /* Once the far field is in use the output is no longer exact (the check above is not vacuous). */
    double far = err_vs_exact(q, k, v, out, H, d, dv, tx + 1, T, 1.0 / sqrt((double)d));
    CHECK_MSG(far > 1e-4, "skeleton rows equal exact attention (%g): far field unused?", far);

    /* reset: back to an empty exact-only state. */
    cmf_o1_reset(st);
    CHECK(cmf_o1_rows(st) == 0 && cmf_o1_sealed(st) == 0 && cmf_o1_far_len(st) == 0);
    CHECK(cmf_o1_step(st, q, k, v, out) == CMF_OK);
    CHECK(err_vs_exact(q, k, v, out, H, d, dv, 0, 1, 1.0 / sqrt((double)d)) < 1e-6);
    cmf_o1_free(st), cmf_o1_free(st2);
    free(q), free(k), free(v), free(out), free(ref);
}

/* A window wider than the whole run: every row is exact attention, with the default and with a custom scale. */
static void test_wide_window(void) {
    const int H = 2, d = 16, dv = 16, w = 200, sink = 4, t0 = 60, T = 150;
    float *q = randn((size_t)T * H * d, 1.0f), *k = randn((size_t)T * d, 1.0f), *v = randn((size_t)T * dv, 1.0f);
    float *out = calloc((size_t)T * H * dv, sizeof(float));
    const float scales[2] = {0.0f, 0.4f};
    for (int si = 0; si < 2; si++) {
        cmf_o1 *st = make(H, d, dv, 32, w, sink, scales[si], CMF_O1_RECT_AGG);
        CHECK(cmf_o1_seal(st, q, (size_t)H * d, k, (size_t)d, v, (size_t)dv, t0, out, (size_t)H * dv) == CMF_OK);
        CHECK(cmf_o1_step_chunk(st, T - t0, q + (size_t)t0 * H * d, (size_t)H * d, k + (size_t)t0 * d, (size_t)d,
                                v + (size_t)t0 * dv, (size_t)dv, out + (size_t)t0 * H * dv,
                                (size_t)H * dv) == CMF_OK);
        CHECK(cmf_o1_sealed(st) == 0 && cmf_o1_far_len(st) == 0 && cmf_o1_rows(st) == T);
        double scale = scales[si] > 0.0f ? (double)scales[si] : 1.0 / sqrt((double)d);
        double e = err_vs_exact(q, k, v, out, H, d, dv, 0, T, scale);
        printf("wide window (scale %g): max |err| vs exact over %d rows: %.3g\n", scale, T, e);
        CHECK_MSG(e < 1e-5, "wide window (scale %g) differs from exact attention by %g", scale, e);
        cmf_o1_free(st);
    }
    free(q), free(k), free(v), free(out);
}

/* A GQA group of H heads equals H independent single-head states fed the same k/v, bit for bit (both
 * rectifiers; seal readout and steps; q rows read with a padded stride). */
static void test_gqa_equals_heads(void) {
    enum { H = 4 };
    const int d = 16, dv = 8, w = 16, sink = 4, m = 8, t0 = 100, T = 160, qs = H * d + 3;
    float *q = randn((size_t)T * qs, 1.0f), *k = randn((size_t)T * d, 1.0f), *v = randn((size_t)T * dv, 1.0f);
    float *og = calloc((size_t)T * H * dv, sizeof(float)), *oh = calloc((size_t)T * dv, sizeof(float));
    for (int r = 0; r < 2; r++) {
        cmf_o1_rect rect = r ? CMF_O1_RECT_FM : CMF_O1_RECT_AGG;
        cmf_o1 *g = make(H, d, dv, m, w, sink, 0.0f, rect);
        CHECK(cmf_o1_seal(g, q, (size_t)qs, k, (size_t)d, v, (size_t)dv, t0, og, (size_t)H * dv) == CMF_OK);
        CHECK(cmf_o1_step_chunk(g, T - t0, q + (size_t)t0 * qs, (size_t)qs, k + (size_t)t0 * d, (size_t)d,
                                v + (size_t)t0 * dv, (size_t)dv, og + (size_t)t0 * H * dv, (size_t)H * dv) == CMF_OK);
        int same = 1;
        for (int h = 0; h < H; h++) {
            cmf_o1 *s1 = make(1, d, dv, m, w, sink, 0.0f, rect);
            CHECK(cmf_o1_seal(s1, q + (size_t)h * d, (size_t)qs, k, (size_t)d, v, (size_t)dv, t0, oh, (size_t)dv) ==
                  CMF_OK);
            for (int i = t0; i < T; i++)
                cmf_o1_step(s1, q + (size_t)i * qs + (size_t)h * d, k + (size_t)i * d, v + (size_t)i * dv,
                            oh + (size_t)i * dv);
            for (int i = 0; i < T; i++)
                if (memcmp(og + ((size_t)i * H + h) * dv, oh + (size_t)i * dv, sizeof(float) * dv) != 0) same = 0;
            CHECK(cmf_o1_far_len(s1) == cmf_o1_far_len(g));
            cmf_o1_free(s1);
        }
        CHECK_MSG(same, "GQA group (rect %d) differs from independent heads", (int)rect);
        cmf_o1_free(g);
    }
    free(q), free(k), free(v), free(og), free(oh);
}

/* Delayed insertion: exactly one far insertion per eviction, far_len + w + sink == t after every step. */
static void test_one_insertion_per_eviction(void) {
    const int H = 3, d = 8, dv = 8, w = 12, sink = 3, m = 6, t0 = 40, T = 140;
    float *q = randn((size_t)T * H * d, 1.0f), *k = randn((size_t)T * d, 1.0f), *v = randn((size_t)T * dv, 1.0f);
    float *out = calloc((size_t)H * dv * 4, sizeof(float));
    cmf_o1 *st = make(H, d, dv, m, w, sink, 0.0f, CMF_O1_RECT_AGG);
    CHECK(cmf_o1_seal(st, q, (size_t)H * d, k, (size_t)d, v, (size_t)dv, t0, NULL, 0) == CMF_OK);
    CHECK(cmf_o1_m_eff(st) == 5); /* clamp(40/8, 4, 6) */
    int ok = cmf_o1_far_len(st) + w + sink == t0;
    for (int i = t0; i < T;) {
        int n = (i % 3) + 1; /* mix single steps and chunks */
        if (i + n > T) n = T - i;
        int64_t before = cmf_o1_far_len(st);
        CHECK(cmf_o1_step_chunk(st, n, q + (size_t)i * H * d, (size_t)H * d, k + (size_t)i * d, (size_t)d,
                                v + (size_t)i * dv, (size_t)dv, out, (size_t)H * dv) == CMF_OK);
        i += n;
        if (cmf_o1_far_len(st) != before + n || cmf_o1_far_len(st) + w + sink != i || cmf_o1_rows(st) != i ||
            cmf_o1_window_len(st) != w || cmf_o1_sink_len(st) != sink)
            ok = 0;
    }
    CHECK_MSG(ok, "far_len + w + sink != t at some step (far_len %lld, rows %lld)",
              (long long)cmf_o1_far_len(st), (long long)cmf_o1_rows(st));
    cmf_o1_free(st);
    free(q), free(k), free(v), free(out);
}

/* FM rectifier on iid data: every far weight the skeleton implies is >= 0 for every decode query and every far
 * key; under AGG the same data does give negative implied weights (so the check can fail). */
static void test_fm_nonnegative(void) {
    const int d = 16, dv = 8, w = 16, sink = 4, m = 16, t0 = 128, T = 192;
    float *q = randn((size_t)T * d, 1.5f), *k = randn((size_t)T * d, 1.5f), *v = randn((size_t)T * dv, 1.0f);
    float out[8], *wt = malloc(sizeof(float) * T);
    for (int r = 0; r < 2; r++) {
        cmf_o1 *st = make(1, d, dv, m, w, sink, 0.0f, r ? CMF_O1_RECT_FM : CMF_O1_RECT_AGG);
        CHECK(cmf_o1_seal(st, q, (size_t)d, k, (size_t)d, v, (size_t)dv, t0, NULL, 0) == CMF_OK);
        long neg = 0, total = 0;
        for (int i = t0; i < T; i++) {
            cmf_o1_step(st, q + (size_t)i * d, k + (size_t)i * d, v + (size_t)i * dv, out);
            int nfar = (int)cmf_o1_far_len(st); /* far keys are rows sink .. sink + far_len - 1 */
            CHECK(cmf_o1_far_weights(st, 0, q + (size_t)i * d, k + (size_t)sink * d, nfar, (size_t)d, wt) == CMF_OK);
            for (int j = 0; j < nfar; j++) neg += wt[j] < 0.0f;
            total += nfar;
        }
        printf("%s: %ld of %ld implied far weights negative\n", r ? "fm" : "agg", neg, total);
        if (r)
            CHECK_MSG(neg == 0, "FM rectifier implied %ld negative far weights", neg);
        else
            CHECK_MSG(neg > 0, "AGG on iid data implied no negative far weight: the FM check would be vacuous");
        cmf_o1_free(st);
    }
    free(q), free(k), free(v), free(wt);
}

/* Constant memory: 1000 decode steps allocate nothing (heap in use unchanged) and the state size is fixed. */
static void test_constant_memory(void) {
    const int H = 4, d = 64, dv = 64, t0 = 256, steps = 1000;
    float *q = randn((size_t)(t0 + steps) * H * d, 1.0f), *k = randn((size_t)(t0 + steps) * d, 1.0f);
    float *v = randn((size_t)(t0 + steps) * dv, 1.0f), *out = calloc((size_t)H * dv, sizeof(float));
    cmf_o1 *st = make(H, d, dv, 32, 128, 4, 0.0f, CMF_O1_RECT_AGG);
    size_t bytes0 = cmf_o1_state_bytes(st);
    CHECK(cmf_o1_seal(st, q, (size_t)H * d, k, (size_t)d, v, (size_t)dv, t0, NULL, 0) == CMF_OK);
    size_t heap0 = heap_in_use();
    int finite = 1;
    for (int i = t0; i < t0 + steps; i++) {
        cmf_o1_step(st, q + (size_t)i * H * d, k + (size_t)i * d, v + (size_t)i * dv, out);
        for (int c = 0; c < H * dv; c++) finite &= isfinite(out[c]) != 0;
    }
    size_t heap1 = heap_in_use();
    printf("constant memory: state %zu bytes; heap in use %zu -> %zu after %d steps\n", bytes0, heap0, heap1, steps);
    CHECK(heap0 > 0);
    CHECK_MSG(heap1 == heap0, "heap in use grew from %zu to %zu bytes over %d steps", heap0, heap1, steps);
    CHECK(cmf_o1_state_bytes(st) == bytes0);
    CHECK(finite);
    CHECK(cmf_o1_far_len(st) + 128 + 4 == t0 + steps);
    cmf_o1_free(st);
    free(q), free(k), free(v), free(out);
}

/* Snapshot/restore is bit-exact, also into another state; mismatched or corrupt snapshots are refused. */
static void test_snapshot(void) {
    const int H = 2, d = 16, dv = 8, w = 16, sink = 4, m = 8, t0 = 80, T = 130, mid = 100;
    float *q = randn((size_t)T * H * d, 1.0f), *k = randn((size_t)T * d, 1.0f), *v = randn((size_t)T * dv, 1.0f);
    float *a = calloc((size_t)T * H * dv, sizeof(float)), *b = calloc((size_t)T * H * dv, sizeof(float));
    cmf_o1 *st = make(H, d, dv, m, w, sink, 0.0f, CMF_O1_RECT_AGG);
    CHECK(cmf_o1_seal(st, q, (size_t)H * d, k, (size_t)d, v, (size_t)dv, t0, NULL, 0) == CMF_OK);
    CHECK(cmf_o1_step_chunk(st, mid - t0, q + (size_t)t0 * H * d, (size_t)H * d, k + (size_t)t0 * d, (size_t)d,
                            v + (size_t)t0 * dv, (size_t)dv, a, (size_t)H * dv) == CMF_OK);
    size_t n = cmf_o1_snapshot_size(st);
    unsigned char *snap = malloc(n), *bad = malloc(n);
    CHECK(cmf_o1_snapshot(st, snap, n) == CMF_OK);
    CHECK(cmf_o1_snapshot(st, snap, n - 1) == CMF_E_ARG);
#define RUN(s, o)                                                                                                    \
    cmf_o1_step_chunk(s, T - mid, q + (size_t)mid * H * d, (size_t)H * d, k + (size_t)mid * d, (size_t)d,         \
                      v + (size_t)mid * dv, (size_t)dv, o, (size_t)H * dv)
    CHECK(RUN(st, a) == CMF_OK);
    CHECK(cmf_o1_restore(st, snap, n) == CMF_OK);
    CHECK(cmf_o1_rows(st) == mid && cmf_o1_far_len(st) + w + sink == mid);
    CHECK(RUN(st, b) == CMF_OK);
    CHECK_MSG(memcmp(a, b, sizeof(float) * (size_t)(T - mid) * H * dv) == 0, "restore: outputs differ");
    cmf_o1 *other = make(H, d, dv, m, w, sink, 0.0f, CMF_O1_RECT_AGG);
    CHECK(cmf_o1_restore(other, snap, n) == CMF_OK);
    memset(b, 0, sizeof(float) * (size_t)T * H * dv);
    CHECK(RUN(other, b) == CMF_OK);
    CHECK_MSG(memcmp(a, b, sizeof(float) * (size_t)(T - mid) * H * dv) == 0, "restore into a new state: differs");
#undef RUN
    /* A restored state must not have been changed by the refused restores below. */
    int64_t rows = cmf_o1_rows(other);
    cmf_o1 *wrong = make(H, d, dv, m, w + 1, sink, 0.0f, CMF_O1_RECT_AGG);
    CHECK(cmf_o1_restore(wrong, snap, n) != CMF_OK); /* other geometry: other size or header */
    cmf_o1 *wrong_rect = make(H, d, dv, m, w, sink, 0.0f, CMF_O1_RECT_FM);
    CHECK(cmf_o1_restore(wrong_rect, snap, n) == CMF_E_FORMAT);
    memcpy(bad, snap, n);
    bad[0] ^= 1;
    CHECK(cmf_o1_restore(other, bad, n) == CMF_E_FORMAT);
    /* corrupt the counters: flip a byte in each of the first 112 bytes after the magic (parameters and counters) in turn; every
     * accepted buffer must still give a consistent state. */
    for (size_t off = 8; off < 120 && off < n; off++) {
        memcpy(bad, snap, n);
        bad[off] ^= 0x40;
        if (cmf_o1_restore(other, bad, n) == CMF_OK)
            CHECK(cmf_o1_sealed(other) == 0 ||
                  cmf_o1_far_len(other) + cmf_o1_window_len(other) + cmf_o1_sink_len(other) == cmf_o1_rows(other));
    }
    CHECK(cmf_o1_restore(other, snap, n) == CMF_OK && cmf_o1_rows(other) == rows - (T - mid));
    CHECK(cmf_o1_restore(other, snap, n - 1) == CMF_E_ARG);
    cmf_o1_free(st), cmf_o1_free(other), cmf_o1_free(wrong), cmf_o1_free(wrong_rect);
    free(snap), free(bad), free(q), free(k), free(v), free(a), free(b);
}

/* The self-seal reads its rows from the state's own buffers while it replays them into the same buffers: check
 * it against an explicit seal for small and lopsided geometries (w = 1, sink 0; sink larger than w; ...), and
 * check that rows read with a KV-cache stride ([pos][n_kv_heads·head_dim], here KV head 1 of 3) give the same
 * bits as packed rows. */
static void test_self_seal_geometries(void) {
    const int geo[][2] = {{1, 0}, {1, 5}, {3, 7}, {5, 0}, {2, 1}};
    const int H = 2, d = 8, dv = 4, m = 5, T = 60, nkv = 3;
    float *q = randn((size_t)T * H * d, 1.0f), *kc = randn((size_t)T * nkv * d, 1.0f);
    float *vc = randn((size_t)T * nkv * dv, 1.0f);
    float *k = malloc(sizeof(float) * (size_t)T * d), *v = malloc(sizeof(float) * (size_t)T * dv);
    for (int i = 0; i < T; i++) {
        memcpy(k + (size_t)i * d, kc + ((size_t)i * nkv + 1) * d, sizeof(float) * d);
        memcpy(v + (size_t)i * dv, vc + ((size_t)i * nkv + 1) * dv, sizeof(float) * dv);
    }
    float *a = calloc((size_t)T * H * dv, sizeof(float)), *b = calloc((size_t)T * H * dv, sizeof(float));
    for (size_t gi = 0; gi < sizeof geo / sizeof geo[0]; gi++) {
        const int w = geo[gi][0], sink = geo[gi][1], tx = w + sink + 8;
        cmf_o1 *s1 = make(H, d, dv, m, w, sink, 0.0f, CMF_O1_RECT_AGG);
        cmf_o1 *s2 = make(H, d, dv, m, w, sink, 0.0f, CMF_O1_RECT_AGG);
        CHECK(cmf_o1_step_chunk(s1, T, q, (size_t)H * d, k, (size_t)d, v, (size_t)dv, a, (size_t)H * dv) == CMF_OK);
        CHECK(cmf_o1_seal(s2, q, (size_t)H * d, kc + d, (size_t)nkv * d, vc + dv, (size_t)nkv * dv, tx + 1, b,
                          (size_t)H * dv) == CMF_OK);
        CHECK(cmf_o1_step_chunk(s2, T - tx - 1, q + (size_t)(tx + 1) * H * d, (size_t)H * d,
                                kc + ((size_t)(tx + 1) * nkv + 1) * d, (size_t)nkv * d,
                                vc + ((size_t)(tx + 1) * nkv + 1) * dv, (size_t)nkv * dv,
                                b + (size_t)(tx + 1) * H * dv, (size_t)H * dv) == CMF_OK);
        CHECK_MSG(memcmp(a + (size_t)tx * H * dv, b + (size_t)tx * H * dv, sizeof(float) * (T - tx) * H * dv) == 0,
                  "w %d sink %d: self-seal differs from an explicit seal", w, sink);
        CHECK(cmf_o1_sealed(s1) && cmf_o1_far_len(s1) + w + sink == T && cmf_o1_far_len(s2) == cmf_o1_far_len(s1));
        cmf_o1_free(s1), cmf_o1_free(s2);
    }
    free(q), free(kc), free(vc), free(k), free(v), free(a), free(b);
}

/* no_query_trace: the same exact-only outputs and skeleton outputs (bit for bit) from a state that is smaller by
 * exactly the query trace, and the step that would need the trace is refused without changing the state. */
static void test_no_query_trace(void) {
    const int H = 2, d = 16, dv = 8, w = 16, sink = 4, m = 8, tx = w + sink + 8, T = 80;
    float *q = randn((size_t)T * H * d, 1.0f), *k = randn((size_t)T * d, 1.0f), *v = randn((size_t)T * dv, 1.0f);
    float *a = calloc((size_t)T * H * dv, sizeof(float)), *b = calloc((size_t)T * H * dv, sizeof(float));
    cmf_o1_params p;
    cmf_o1_default_params(&p, H, d, dv);
    p.m = m, p.window = w, p.sink = sink;
    cmf_o1 *full = NULL, *lean = NULL;
    CHECK(cmf_o1_create(&p, &full) == CMF_OK);
    p.no_query_trace = 1;
    CHECK(cmf_o1_create(&p, &lean) == CMF_OK);
    if (!full || !lean) return;
    CHECK(cmf_o1_state_bytes(full) - cmf_o1_state_bytes(lean) == sizeof(float) * (size_t)H * (tx + 1) * d);
    CHECK(cmf_o1_step_chunk(full, tx, q, (size_t)H * d, k, (size_t)d, v, (size_t)dv, a, (size_t)H * dv) == CMF_OK);
    CHECK(cmf_o1_step_chunk(lean, tx, q, (size_t)H * d, k, (size_t)d, v, (size_t)dv, b, (size_t)H * dv) == CMF_OK);
    CHECK(memcmp(a, b, sizeof(float) * (size_t)tx * H * dv) == 0);
    CHECK(cmf_o1_step(lean, q + (size_t)tx * H * d, k + (size_t)tx * d, v + (size_t)tx * dv, b) == CMF_E_ARG);
    CHECK_MSG(strstr(cmf_last_error(), "no_query_trace") != NULL, "message: %s", cmf_last_error());
    CHECK(cmf_o1_rows(lean) == tx && cmf_o1_sealed(lean) == 0);
    CHECK(cmf_o1_step_chunk(lean, 2, q, (size_t)H * d, k, (size_t)d, v, (size_t)dv, b, (size_t)H * dv) == CMF_E_ARG);
    CHECK_MSG(strstr(cmf_last_error(), "row 0 of 2") != NULL, "message: %s", cmf_last_error());
    const int t0 = 50;
    CHECK(cmf_o1_seal(full, q, (size_t)H * d, k, (size_t)d, v, (size_t)dv, t0, a, (size_t)H * dv) == CMF_OK);
    CHECK(cmf_o1_seal(lean, q, (size_t)H * d, k, (size_t)d, v, (size_t)dv, t0, b, (size_t)H * dv) == CMF_OK);
    for (int i = t0; i < T; i++) {
        cmf_o1_step(full, q + (size_t)i * H * d, k + (size_t)i * d, v + (size_t)i * dv, a + (size_t)i * H * dv);
        cmf_o1_step(lean, q + (size_t)i * H * d, k + (size_t)i * d, v + (size_t)i * dv, b + (size_t)i * H * dv);
    }
    CHECK(memcmp(a, b, sizeof(float) * (size_t)T * H * dv) == 0);
    size_t n = cmf_o1_snapshot_size(full);
    unsigned char *snap = malloc(n);
    CHECK(cmf_o1_snapshot(full, snap, n) == CMF_OK);
    CHECK(cmf_o1_restore(lean, snap, n) != CMF_OK); /* other parameters */
    cmf_o1_free(full), cmf_o1_free(lean);
    free(snap), free(q), free(k), free(v), free(a), free(b);
}

static void test_errors(void) {
    cmf_o1_params p;
    cmf_o1 *st = NULL;
    cmf_o1_default_params(&p, 2, 16, 16);
    p.m = 3;
    CHECK(cmf_o1_create(&p, &st) == CMF_E_ARG && st == NULL);
    CHECK_MSG(strstr(cmf_last_error(), "m = 3") != NULL, "message: %s", cmf_last_error());
    cmf_o1_default_params(&p, 2, 16, 16);
    p.window = 0;
    CHECK(cmf_o1_create(&p, &st) == CMF_E_ARG && strstr(cmf_last_error(), "window") != NULL);
    cmf_o1_default_params(&p, 2, 16, 16);
    p.no_query_trace = 2;
    CHECK(cmf_o1_create(&p, &st) == CMF_E_ARG && strstr(cmf_last_error(), "no_query_trace") != NULL);
    cmf_o1_default_params(&p, 2, 16, 16);
    p.scale = -1.0f;
    CHECK(cmf_o1_create(&p, &st) == CMF_E_ARG && strstr(cmf_last_error(), "scale") != NULL);
    cmf_o1_default_params(&p, 4096, 65536, 65536);
    CHECK(cmf_o1_create(&p, &st) == CMF_E_ARG && strstr(cmf_last_error(), "too large") != NULL);
    CHECK(cmf_o1_create(NULL, &st) == CMF_E_ARG);

    cmf_o1_default_params(&p, 2, 4, 4);
    CHECK(cmf_o1_create(&p, &st) == CMF_OK);
    float q[8] = {0}, k[4] = {0}, v[4] = {0}, out[8];
    CHECK(cmf_o1_seal(st, q, 8, k, 4, v, 4, -1, NULL, 0) == CMF_E_ARG);
    CHECK(cmf_o1_seal(st, NULL, 8, k, 4, v, 4, 1, NULL, 0) == CMF_E_ARG);
    CHECK(cmf_o1_seal(st, q, 7, k, 4, v, 4, 1, NULL, 0) == CMF_E_ARG && strstr(cmf_last_error(), "q_stride"));
    CHECK(cmf_o1_seal(st, q, 8, k, 4, v, 4, 1, out, 7) == CMF_E_ARG && strstr(cmf_last_error(), "out_stride"));
    CHECK(cmf_o1_step(st, q, NULL, v, out) == CMF_E_ARG);
    CHECK(cmf_o1_step_chunk(st, -1, q, 8, k, 4, v, 4, out, 8) == CMF_E_ARG);
    CHECK(cmf_o1_step_chunk(st, 2, q, 8, k, 3, v, 4, out, 8) == CMF_E_ARG);
    CHECK(cmf_o1_far_weights(st, 0, q, k, 1, 4, out) == CMF_E_ARG); /* exact-only: no skeleton */
    CHECK(cmf_o1_far_weights(st, 2, q, k, 1, 4, out) == CMF_E_ARG);
    CHECK(cmf_o1_rows(st) == 0);
    cmf_o1_free(st);
    cmf_o1_free(NULL);
}

int main(void) {
    test_short_prompt_and_self_seal();
    test_wide_window();
    test_gqa_equals_heads();
    test_one_insertion_per_eviction();
    test_fm_nonnegative();
    test_constant_memory();
    test_snapshot();
    test_self_seal_geometries();
    test_no_query_trace();
    test_errors();
    CMF_TEST_END();
}
