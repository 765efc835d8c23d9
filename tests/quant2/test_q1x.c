/* q1s / q1t strict decoders (CMF_FORMAT.md §2.11–2.12) on payloads laid out by hand from the spec: base values,
 * overlay overwrites, and every length / index violation refused with the payload offset in the message. */
#include <math.h>
#include <string.h>

#include "quant/dtype.h"
#include "testutil.h"

static void wr16(uint8_t *p, uint16_t v) { p[0] = (uint8_t)v, p[1] = (uint8_t)(v >> 8); }
static void wr32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}

static void test_q1s(void) {
    /* 2 x 32 -> 2 groups: scales 0.5 and 2.0, sign bits 0xA5.. */
    uint32_t sh[2] = {2, 32};
    uint8_t b[6 * 2 + 4 + 6 * 2 + 1];
    memset(b, 0, sizeof b);
    wr16(b, 0x3800);     /* 0.5 */
    wr16(b + 6, 0x4000); /* 2.0 */
    for (int j = 0; j < 4; j++) b[2 + j] = 0xA5, b[8 + j] = (uint8_t)(0x0F << j);
    wr32(b + 12, 2);
    wr32(b + 16, 5), wr16(b + 20, 0x4200);  /* w[5] = 3.0 */
    wr32(b + 22, 63), wr16(b + 26, 0xBC00); /* w[63] = -1.0 */
    float out[64];
    CHECK(cmf_dequant(CMF_DT_Q1S, 2, sh, b, 28, out) == CMF_OK);
    for (int k = 0; k < 32; k++) {
        float want0 = ((0xA5 >> (k % 8)) & 1) ? 0.5f : -0.5f;
        float want1 = (((0x0F << (k / 8)) & 0xff) >> (k % 8) & 1) ? 2.0f : -2.0f;
        if (k == 5) want0 = 3.0f;
        if (k == 31) want1 = -1.0f;
        CHECK_MSG(out[k] == want0 && out[32 + k] == want1, "q1s element %d: %g %g", k, (double)out[k], (double)out[32 + k]);
    }
    /* truncated overlay (one byte short), trailing byte, count beyond the payload, index out of range */
    CHECK(cmf_dequant(CMF_DT_Q1S, 2, sh, b, 27, out) == CMF_E_FORMAT && strstr(cmf_last_error(), "payload byte 12"));
    CHECK(cmf_dequant(CMF_DT_Q1S, 2, sh, b, 29, out) == CMF_E_FORMAT);
    CHECK(cmf_dequant(CMF_DT_Q1S, 2, sh, b, 14, out) == CMF_E_FORMAT); /* no room for the count */
    wr32(b + 12, 0xFFFFFFFFu);
    CHECK(cmf_dequant(CMF_DT_Q1S, 2, sh, b, 28, out) == CMF_E_FORMAT);
    wr32(b + 12, 2);
    wr32(b + 22, 64);
    CHECK(cmf_dequant(CMF_DT_Q1S, 2, sh, b, 28, out) == CMF_E_FORMAT && strstr(cmf_last_error(), "index 64"));
    wr32(b + 12, 0); /* empty overlay: the plain q1 base */
    float q1[64];
    CHECK(cmf_dequant(CMF_DT_Q1S, 2, sh, b, 16, out) == CMF_OK && cmf_dequant(CMF_DT_Q1, 2, sh, b, 12, q1) == CMF_OK);
    CHECK(!memcmp(out, q1, sizeof q1));
}

/* trit k of a group: byte k/5, digit k%5 in base 3 */
static void put_trit(uint8_t *codes, int k, int t) {
    static const int P[5] = {1, 3, 9, 27, 81};
    codes[k / 5] = (uint8_t)(codes[k / 5] + t * P[k % 5]);
}

static void test_q1t(void) {
    uint32_t sh[2] = {2, 32}; /* 2 groups of 9 bytes, row_ptr[3], 3 entries */
    uint8_t b[18 + 12 + 12 + 1];
    memset(b, 0, sizeof b);
    wr16(b, 0x3C00);     /* 1.0 */
    wr16(b + 9, 0x3800); /* 0.5 */
    int trits[2][32];
    for (int g = 0; g < 2; g++)
        for (int k = 0; k < 32; k++) {
            trits[g][k] = (k * 7 + g) % 3;
            put_trit(b + 9 * g + 2, k, trits[g][k]);
        }
    wr32(b + 18, 0), wr32(b + 22, 1), wr32(b + 26, 3); /* row 0: 1 entry, row 1: 2 */
    wr16(b + 30, 4), wr16(b + 32, 0x4400);             /* w[0][4] = 4.0 */
    wr16(b + 34, 0), wr16(b + 36, 0xC000);             /* w[1][0] = -2.0 */
    wr16(b + 38, 31), wr16(b + 40, 0x3400);            /* w[1][31] = 0.25 */
    float out[64];
    CHECK(cmf_dequant(CMF_DT_Q1T, 2, sh, b, 42, out) == CMF_OK);
    for (int g = 0; g < 2; g++)
        for (int k = 0; k < 32; k++) {
            float s = g ? 0.5f : 1.0f, want = trits[g][k] == 1 ? s : trits[g][k] == 2 ? -s : 0.0f;
            if (g == 0 && k == 4) want = 4.0f;
            if (g == 1 && k == 0) want = -2.0f;
            if (g == 1 && k == 31) want = 0.25f;
            CHECK_MSG(out[32 * g + k] == want, "q1t element %d: %g want %g", 32 * g + k, (double)out[32 * g + k],
                      (double)want);
        }
    CHECK(cmf_dequant(CMF_DT_Q1T, 2, sh, b, 41, out) == CMF_E_FORMAT && strstr(cmf_last_error(), "payload byte 26"));
    CHECK(cmf_dequant(CMF_DT_Q1T, 2, sh, b, 43, out) == CMF_E_FORMAT);
    CHECK(cmf_dequant(CMF_DT_Q1T, 2, sh, b, 25, out) == CMF_E_FORMAT); /* row_ptr cut */
    CHECK(cmf_dequant(CMF_DT_Q1T, 1, (const uint32_t[]){64}, b, 42, out) == CMF_E_FORMAT);
    wr32(b + 22, 4); /* row_ptr decreasing */
    CHECK(cmf_dequant(CMF_DT_Q1T, 2, sh, b, 42, out) == CMF_E_FORMAT && strstr(cmf_last_error(), "row_ptr[2]"));
    wr32(b + 22, 1);
    wr32(b + 18, 1); /* row_ptr[0] != 0 */
    CHECK(cmf_dequant(CMF_DT_Q1T, 2, sh, b, 42, out) == CMF_E_FORMAT && strstr(cmf_last_error(), "row_ptr[0]"));
    wr32(b + 18, 0);
    wr16(b + 38, 32); /* col out of range */
    CHECK(cmf_dequant(CMF_DT_Q1T, 2, sh, b, 42, out) == CMF_E_FORMAT && strstr(cmf_last_error(), "col 32"));
}

int main(void) {
    test_q1s();
    test_q1t();
    CMF_TEST_END();
}
