/* The CMF_Q4_SEARCH encoder of q4_block / q4_tiled (src/quant/quantize.c, q4_search_scale):
 *  - off (default): bytes identical to the cortiq rule of CMF_FORMAT.md §2.4 (re-derived here group by group);
 *  - on: the same §2.4 layout, decoded by cmf_dequant; every group's squared error <= the cortiq rule's, and the
 *    tensor's total squared error <= that of llama.cpp's Q4_0 rule (d = m / -8 for the value m of largest
 *    magnitude, q = min(15, trunc(x/d + 8.5)), ggml-quants.c quantize_row_q4_0_ref) on the same data;
 *  - q4_tiled on = q4_block on with each scale moved in front of its nibbles (§2.5);
 *  - q4tp (§2.6, src/quant/tiledp.c): on, the row ladders fit the searched (positive) tile scales; the payload
 *    decodes, every ladder scale is positive, and the tensor's squared error is below 0.98 x the default's.
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

int main(void) {
    float *src = malloc(N * sizeof(float)), *dec = malloc(N * sizeof(float)), *ref = malloc(N * sizeof(float));
    uint8_t *blk = malloc(18 * G), *til = malloc(18 * G), *plain = malloc(18 * G);
    for (int i = 0; i < N; i++) src[i] = (float)((urand() + urand() + urand() - 1.5) * 0.05);
    for (int g = 0; g < G; g += 5) src[32 * g + (g % 32)] = (g % 2 ? 1.0f : -1.0f) * (float)(0.2 + urand() * 0.3);
    memset(src + 32 * 7, 0, 32 * sizeof(float));
    const uint32_t shape[2] = {ROWS, COLS};

    /* default: cortiq bytes */
    unsetenv("CMF_Q4_SEARCH");
    CHECK(!cmf_q4_search_enabled());
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

    /* search on */
    setenv("CMF_Q4_SEARCH", "1", 1);
    CHECK(cmf_q4_search_enabled());
    CHECK(cmf_quantize(CMF_DT_Q4_BLOCK, ROWS, COLS, src, blk) == CMF_OK);
    CHECK(cmf_quantize(CMF_DT_Q4_TILED, ROWS, COLS, src, til) == CMF_OK);
    unsetenv("CMF_Q4_SEARCH");
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
    CMF_TEST_END();
}
