/* The searched-scale encoder of q4_block / q4_tiled (src/quant/quantize.c, cmf_q4_search_scale), on by default:
 *  - CMF_Q4_SEARCH=0 (or off / false / no, any case): bytes identical to the cortiq rule of CMF_FORMAT.md §2.4
 *    (re-derived here group by group);
 *  - on (unset, or "1"): the same §2.4 layout, decoded by cmf_dequant; every group's squared error <= the cortiq
 *    rule's, and the tensor's total squared error <= that of llama.cpp's Q4_0 rule (d = m / -8 for the value m of
 *    largest magnitude, q = min(15, trunc(x/d + 8.5)), ggml-quants.c quantize_row_q4_0_ref) on the same data;
 *  - q4_tiled on = q4_block on with each scale moved in front of its nibbles (§2.5);
 *  - q4tp (§2.6, src/quant/tiledp.c): on, the row ladders fit the searched (positive) tile scales; the payload
 *    decodes, every ladder scale is positive, and the tensor's squared error is below 0.98 x the default's.
 *  - threads (src/quant/qpar.c): q4_block, q4_tiled, q4tp and q2tp give the same bytes with CMF_QUANT_THREADS=1
 *    and 7 (ranges that split rows and groups unevenly), and a tensor with two overflowing groups fails with the
 *    same message, naming the first of them, whatever the count.
 *  - cmf_f16_scale, the integer form of the stored-scale rule the encoders use, against the f16 converter.
 * Data: deterministic pseudo-random rows (Gaussian-like sums of uniforms, some groups with one large outlier of
 * either sign, one all-zero group). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "quant/dtype.h"
#include "quant/ladder.h"
#include "testutil.h"

enum { ROWS = 64, COLS = 256, N = ROWS * COLS, G = N / 32 };

static uint64_t rng = 88172645463325252ull;
static double urand(void) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (double)(rng >> 11) / 9007199254740992.0;
}

static float f16r(float x) { return cmf_f16_to_f32(cmf_f32_to_f16(x)); }

/* Encodes src (rows x cols) as dt with CMF_QUANT_THREADS=t into a fresh buffer; *st gets the status, msg the
 * message. */
static uint8_t *enc_threads(int dt, int rows, int cols, const float *src, const char *t, cmf_status *st,
                            char msg[256]) {
    uint32_t shape[2] = {(uint32_t)rows, (uint32_t)cols};
    uint64_t n = 0;
    CHECK(cmf_dtype_nbytes(dt, 2, shape, &n) == 1);
    uint8_t *out = malloc(n);
    memset(out, 0xa5, n);
    setenv("CMF_QUANT_THREADS", t, 1);
    *st = cmf_quantize(dt, (uint64_t)rows, (uint64_t)cols, src, out);
    unsetenv("CMF_QUANT_THREADS");
    snprintf(msg, 256, "%s", *st ? cmf_last_error() : "");
    return out;
}

/* cmf_f16_scale (integer rounding) against max(cmf_f16_round(x), CMF_F16_TINY) (the f16 converter): every 4099th
 * f32 bit pattern >= 0, every 61st between 2^-15 and 2^16, and per exponent the rounding ties of both parities and
 * their neighbours, the bounds 2^-14, 65504, 65520 and inf; NaN stays NaN. */
static void test_f16_scale(void) {
    int bad = 0;
    uint32_t first = 0;
    const float tiny = 6.103515625e-05f;
    for (int pass = 0; pass < 3; pass++) {
        uint64_t lo = pass == 1 ? 0x38000000u : 0, hi = pass == 1 ? 0x47800000u : 0x7f800001u;
        uint64_t step = pass == 1 ? 61 : 4099;
        if (pass == 2) lo = 0x38000000u, hi = 0x47800000u, step = 0x800000u; /* one per exponent, ties below */
        for (uint64_t b = lo; b < hi; b += step) {
            uint32_t probes[7] = {(uint32_t)b, 0, 0, 0, 0, 0, 0};
            int np = 1;
            if (pass == 2)
                for (uint32_t m = 0x1000u; m <= 0x3000u; m += 0x2000u) /* ties with even and odd kept bit */
                    for (int d = -1; d <= 1 && np < 7; d++) probes[np++] = (uint32_t)b + m + (uint32_t)d;
            for (int k = 0; k < np; k++) {
                float x, r;
                memcpy(&x, &probes[k], 4);
                r = cmf_f16_round(x);
                const float want = r < tiny ? tiny : r, got = cmf_f16_scale(x);
                if (memcmp(&want, &got, 4) != 0 && !bad++) first = probes[k];
            }
        }
    }
    const float edge[6] = {0.0f, tiny, 65504.0f, 65519.99f, 65520.0f, INFINITY};
    for (int k = 0; k < 6; k++) {
        const float r = cmf_f16_round(edge[k]), want = r < tiny ? tiny : r, got = cmf_f16_scale(edge[k]);
        if (memcmp(&want, &got, 4) != 0 && !bad++) memcpy(&first, &edge[k], 4);
    }
    CHECK_MSG(bad == 0, "cmf_f16_scale differs from the f16 converter on %d inputs (first 0x%08x)", bad, first);
    CHECK(isnan(cmf_f16_scale(NAN)));
}

static void test_threads(void) {
    enum { TR = 333, TC = 1024 }; /* 1.3 MB of input: several ranges, 333 rows split unevenly */
    float *x = malloc((size_t)TR * TC * sizeof(float));
    for (int i = 0; i < TR * TC; i++) x[i] = (float)((urand() + urand() - 1.0) * 0.1);
    const int dts[4] = {CMF_DT_Q4_BLOCK, CMF_DT_Q4_TILED, CMF_DT_Q4TP, CMF_DT_Q2TP};
    uint32_t shape[2] = {TR, TC};
    for (int d = 0; d < 4; d++) {
        cmf_status s1, s7;
        char m1[256], m7[256];
        uint8_t *a = enc_threads(dts[d], TR, TC, x, "1", &s1, m1), *b = enc_threads(dts[d], TR, TC, x, "7", &s7, m7);
        uint64_t n = 0;
        CHECK(s1 == CMF_OK && s7 == CMF_OK && cmf_dtype_nbytes(dts[d], 2, shape, &n) == 1);
        CHECK_MSG(memcmp(a, b, n) == 0, "%s: 7 threads wrote other bytes than 1",
                  cmf_dtype_name(dts[d]));
        free(a), free(b);
    }
    /* two groups past the f16 scale range, in rows 40 and 300 (different ranges at 7 threads) */
    x[40 * TC + 64] = 1e7f, x[300 * TC + 5] = -2e7f;
    for (int d = 0; d < 3; d++) {
        cmf_status s1, s7;
        char m1[256], m7[256];
        free(enc_threads(dts[d], TR, TC, x, "1", &s1, m1));
        free(enc_threads(dts[d], TR, TC, x, "7", &s7, m7));
        CHECK_MSG(s1 == CMF_E_ARG && s7 == CMF_E_ARG && strcmp(m1, m7) == 0, "%s overflow: '%s' vs '%s'",
                  cmf_dtype_name(dts[d]), m1, m7);
        CHECK_MSG(strstr(m1, d < 2 ? "group 1282" : "row 40 ") != NULL, "%s: '%s' does not name the first group",
                  cmf_dtype_name(dts[d]), m1);
    }
    free(x);
}

int main(void) {
    float *src = malloc(N * sizeof(float)), *dec = malloc(N * sizeof(float)), *ref = malloc(N * sizeof(float));
    uint8_t *blk = malloc(18 * G), *til = malloc(18 * G), *plain = malloc(18 * G);
    for (int i = 0; i < N; i++) src[i] = (float)((urand() + urand() + urand() - 1.5) * 0.05);
    for (int g = 0; g < G; g += 5) src[32 * g + (g % 32)] = (g % 2 ? 1.0f : -1.0f) * (float)(0.2 + urand() * 0.3);
    memset(src + 32 * 7, 0, 32 * sizeof(float));
    const uint32_t shape[2] = {ROWS, COLS};

    /* CMF_Q4_SEARCH=0: cortiq bytes */
    unsetenv("CMF_Q4_SEARCH");
    CHECK(cmf_q4_search_enabled()); /* the default */
    static const char *const OFF[] = {"0", "off", "OFF", "false", "False", "no"};
    static const char *const ON[] = {"1", "on", "", "00", "yes"};
    for (size_t i = 0; i < sizeof OFF / sizeof OFF[0]; i++) {
        setenv("CMF_Q4_SEARCH", OFF[i], 1);
        CHECK_MSG(!cmf_q4_search_enabled(), "CMF_Q4_SEARCH=%s leaves the search on", OFF[i]);
    }
    for (size_t i = 0; i < sizeof ON / sizeof ON[0]; i++) {
        setenv("CMF_Q4_SEARCH", ON[i], 1);
        CHECK_MSG(cmf_q4_search_enabled(), "CMF_Q4_SEARCH='%s' turns the search off", ON[i]);
    }
    setenv("CMF_Q4_SEARCH", "0", 1);
    CHECK(cmf_quantize(CMF_DT_Q4_BLOCK, ROWS, COLS, src, plain) == CMF_OK);
    int mismatch = 0;
    for (int g = 0; g < G; g++) {
        float amax = 0;
        for (int k = 0; k < 32; k++) amax = fmaxf(amax, fabsf(src[32 * g + k]));
        float s = f16r(amax / 7.0f);
        if (s < 6.103515625e-05f) s = 6.103515625e-05f;
        for (int k = 0; k < 32; k++) {
            float q = rintf(src[32 * g + k] / s);
            q = q < -8 ? -8 : q > 7 ? 7 : q;
            const int want = (int)q + 8, got = (plain[16 * g + k / 2] >> (4 * (k % 2))) & 15;
            mismatch += want != got;
        }
        mismatch += cmf_f32_to_f16(s) != (uint16_t)(plain[16 * G + 2 * g] | plain[16 * G + 2 * g + 1] << 8);
    }
    CHECK_MSG(mismatch == 0, "default encoder: %d nibbles/scales differ from the §2.4 rule", mismatch);
    CHECK(cmf_dequant(CMF_DT_Q4_BLOCK, 2, shape, plain, 18 * G, ref) == CMF_OK);

    /* search on (the default) */
    unsetenv("CMF_Q4_SEARCH");
    CHECK(cmf_quantize(CMF_DT_Q4_BLOCK, ROWS, COLS, src, blk) == CMF_OK);
    CHECK(cmf_quantize(CMF_DT_Q4_TILED, ROWS, COLS, src, til) == CMF_OK);
    int tiled_ok = 1, worse = 0, neg = 0;
    for (int g = 0; g < G; g++) {
        tiled_ok &= !memcmp(til + 18 * g, blk + 16 * G + 2 * g, 2) && !memcmp(til + 18 * g + 2, blk + 16 * g, 16);
        neg += (blk[16 * G + 2 * g + 1] & 0x80) != 0;
    }
    CHECK_MSG(tiled_ok, "q4_tiled (search) is not q4_block (search) with the scales moved");
    CHECK(cmf_dequant(CMF_DT_Q4_BLOCK, 2, shape, blk, 18 * G, dec) == CMF_OK);
    double e_search = 0, e_plain = 0, e_ggml = 0;
    for (int g = 0; g < G; g++) {
        double es = 0, ep = 0;
        const float *x = src + 32 * g;
        float amax = 0, m = 0;
        for (int k = 0; k < 32; k++) {
            es += (double)(x[k] - dec[32 * g + k]) * (x[k] - dec[32 * g + k]);
            ep += (double)(x[k] - ref[32 * g + k]) * (x[k] - ref[32 * g + k]);
            if (fabsf(x[k]) > amax) amax = fabsf(x[k]), m = x[k];
        }
        const float d = m / -8.0f, id = d != 0.0f ? 1.0f / d : 0.0f, dh = f16r(d);
        for (int k = 0; k < 32; k++) {
            int q = (int)(int8_t)(x[k] * id + 8.5f);
            q = q > 15 ? 15 : q;
            const double e = x[k] - (float)(q - 8) * dh;
            e_ggml += e * e;
        }
        worse += es > ep * (1 + 1e-6) + 1e-30;
        e_search += es, e_plain += ep;
    }
    printf("q4 squared error: cortiq rule %.4e, llama.cpp Q4_0 rule %.4e, CMF_Q4_SEARCH %.4e (%d of %d scales < 0)\n",
           e_plain, e_ggml, e_search, neg, G);
    CHECK_MSG(worse == 0, "%d groups have a larger error with the search than with the cortiq rule", worse);
    CHECK_MSG(e_search <= e_ggml, "search error %g > Q4_0 rule error %g", e_search, e_ggml);
    CHECK_MSG(e_search < 0.9 * e_plain, "search error %g not clearly below the cortiq rule's %g", e_search, e_plain);
    CHECK(neg > 0);

    /* q4tp: the same data, search off then on */
    uint64_t po, co, stride;
    const uint64_t tpn = cmf_tp_layout(0, ROWS, COLS, &po, &co, &stride);
    uint8_t *tp0 = malloc(tpn), *tp1 = malloc(tpn);
    setenv("CMF_Q4_SEARCH", "0", 1);
    CHECK(cmf_quantize(CMF_DT_Q4TP, ROWS, COLS, src, tp0) == CMF_OK);
    setenv("CMF_Q4_SEARCH", "1", 1);
    CHECK(cmf_quantize(CMF_DT_Q4TP, ROWS, COLS, src, tp1) == CMF_OK);
    unsetenv("CMF_Q4_SEARCH");
    CHECK_MSG(memcmp(tp0, tp1, tpn) != 0, "q4tp: the search changed no byte");
    double e_tp[2] = {0, 0};
    int nonpos = 0;
    for (int v = 0; v < 2; v++) {
        CHECK(cmf_dequant(CMF_DT_Q4TP, 2, shape, v ? tp1 : tp0, tpn, dec) == CMF_OK);
        for (int i = 0; i < N; i++) e_tp[v] += (double)(src[i] - dec[i]) * (src[i] - dec[i]);
        for (int r = 0; r < ROWS; r++) {
            float t[32];
            cmf_q4tp_ladder((v ? tp1 : tp0) + po + 4 * r, t);
            for (int c = 0; c < 32; c++) nonpos += !(t[c] > 0.0f);
        }
    }
    printf("q4tp squared error: default %.4e, CMF_Q4_SEARCH %.4e\n", e_tp[0], e_tp[1]);
    CHECK_MSG(nonpos == 0, "q4tp: %d ladder scales are not positive", nonpos);
    CHECK_MSG(e_tp[1] < 0.98 * e_tp[0], "q4tp search error %g not clearly below the default's %g", e_tp[1], e_tp[0]);
    free(tp0), free(tp1);
    free(src), free(dec), free(ref), free(blk), free(til), free(plain);
    test_threads();
    test_f16_scale();
    CMF_TEST_END();
}
