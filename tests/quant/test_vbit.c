/* vbit golden vector (CMF_FORMAT.md §2.8; shared/data/golden/vbit_golden.json from the reference's tests):
 * decoding must match `expect` with max error 0; a width of 2 must be refused. Also vbit_ro (§2.9) built from
 * the same rows decodes identically, and a bad row_off table is refused. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "quant/dtype.h"
#include "testutil.h"
#include "util/fileio.h"

/* Standard base64 (RFC 4648) decoder for the test data; returns the length or -1. */
static long b64(const char *s, uint8_t *out) {
    long n = 0;
    uint32_t acc = 0;
    int bits = 0;
    for (; *s && *s != '='; s++) {
        const char *tab = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
        const char *p = strchr(tab, *s);
        if (!p) return -1;
        acc = (acc << 6) | (uint32_t)(p - tab);
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            out[n++] = (uint8_t)(acc >> bits);
        }
    }
    return n;
}

int main(void) {
    char *js;
    size_t len;
    CHECK(cmf_read_file(shared_path("data/golden/vbit_golden.json"), &js, &len) == CMF_OK);
    cJSON *g = cJSON_Parse(js);
    free(js);
    if (!g) {
        CHECK(!"golden JSON parses");
        CMF_TEST_END();
    }
    int rows = cJSON_GetObjectItem(g, "rows")->valueint, cols = cJSON_GetObjectItem(g, "cols")->valueint;
    const char *bytes = cJSON_GetObjectItem(g, "bytes")->valuestring;
    const cJSON *expect = cJSON_GetObjectItem(g, "expect");
    CHECK(rows == 16 && cols == 64 && cJSON_GetArraySize(expect) == rows * cols);
    uint8_t *p = malloc(strlen(bytes));
    long nb = b64(bytes, p);
    CHECK(nb == 656);
    const uint8_t widths[16] = {4, 5, 8, 4, 4, 5, 4, 3, 4, 5, 5, 4, 5, 4, 4, 4};
    CHECK(memcmp(p, widths, 16) == 0);
    const uint32_t shape[2] = {(uint32_t)rows, (uint32_t)cols};
    CHECK(cmf_dtype_check_payload(CMF_DT_VBIT, 2, shape, p, (uint64_t)nb) == CMF_OK);
    float *out = malloc(sizeof(float) * rows * cols), *out2 = malloc(sizeof(float) * rows * cols);
    CHECK(cmf_dequant(CMF_DT_VBIT, 2, shape, p, (uint64_t)nb, out) == CMF_OK);
    double maxerr = 0;
    int i = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, expect) {
        double d = fabs((double)out[i++] - e->valuedouble);
        if (d > maxerr) maxerr = d;
    }
    CHECK_MSG(maxerr == 0.0, "vbit golden max error %g", maxerr);

    /* vbit_ro: bits | scales | u32 row_off[rows+1] | packed rows */
    size_t head = (size_t)rows + 2 * (size_t)rows * (cols / 32), packed = (size_t)nb - head;
    size_t ro_len = head + 4 * (size_t)(rows + 1) + packed;
    uint8_t *ro = malloc(ro_len);
    memcpy(ro, p, head);
    uint32_t off = 0;
    for (int r = 0; r <= rows; r++) {
        uint8_t *q = ro + head + 4 * r;
        q[0] = (uint8_t)off, q[1] = (uint8_t)(off >> 8), q[2] = (uint8_t)(off >> 16), q[3] = (uint8_t)(off >> 24);
        if (r < rows) off += (uint32_t)((cols * p[r] + 7) / 8);
    }
    memcpy(ro + head + 4 * (rows + 1), p + head, packed);
    CHECK(cmf_dequant(CMF_DT_VBIT_RO, 2, shape, ro, ro_len, out2) == CMF_OK);
    CHECK(memcmp(out, out2, sizeof(float) * rows * cols) == 0);
    ro[head + 4] ^= 1; /* row_off[1] off by one */
    CHECK(cmf_dtype_check_payload(CMF_DT_VBIT_RO, 2, shape, ro, ro_len) == CMF_E_FORMAT);
    CHECK(strstr(cmf_last_error(), "row_off[1]") != NULL);
    ro[head + 4] ^= 1;
    ro[head] = 1; /* row_off[0] != 0 */
    CHECK(cmf_dequant(CMF_DT_VBIT_RO, 2, shape, ro, ro_len, out2) == CMF_E_FORMAT);
    CHECK(cmf_dtype_check_payload(CMF_DT_VBIT_RO, 2, shape, ro, ro_len - 1) == CMF_E_FORMAT);

    /* bits[0] = 2 is refused, by validation and by the decoder */
    p[0] = 2;
    CHECK(cmf_dtype_check_payload(CMF_DT_VBIT, 2, shape, p, (uint64_t)nb) == CMF_E_FORMAT);
    CHECK(strstr(cmf_last_error(), "width 2") != NULL);
    CHECK(cmf_dequant(CMF_DT_VBIT, 2, shape, p, (uint64_t)nb, out) == CMF_E_FORMAT);
    p[0] = 7;
    CHECK(cmf_dtype_check_payload(CMF_DT_VBIT, 2, shape, p, (uint64_t)nb) == CMF_E_FORMAT);
    p[0] = 4;
    CHECK(cmf_dtype_check_payload(CMF_DT_VBIT, 2, shape, p, (uint64_t)nb - 1) == CMF_E_FORMAT);
    const uint32_t odd[2] = {16, 48};
    CHECK(cmf_dtype_check_payload(CMF_DT_VBIT, 2, odd, p, (uint64_t)nb) == CMF_E_FORMAT);
    free(p), free(ro), free(out), free(out2);
    cJSON_Delete(g);
    CMF_TEST_END();
}
