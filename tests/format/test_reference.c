/* Compatibility with files written by the reference converter (shared/data/cmf-reference, see its README):
 * they open and verify, every tensor dequantizes bit-for-bit to the reference reader's float32 output
 * (*.dequant.safetensors), and re-encoding the q8_row values with our encoder gives back the stored payload
 * (for q8_2f see check_file: only the row part can be reproduced exactly). The safetensors file is parsed here (u64 header length + JSON header + raw data). */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "format/format.h"
#include "quant/dtype.h"
#include "testutil.h"
#include "util/fileio.h"

typedef struct st_file {
    char *buf;
    size_t len;
    cJSON *hdr;
    const uint8_t *data;
} st_file;

static int st_open(const char *path, st_file *s) {
    memset(s, 0, sizeof *s);
    if (cmf_read_file(path, &s->buf, &s->len) != CMF_OK || s->len < 8) return 0;
    uint64_t hl = 0;
    for (int i = 7; i >= 0; i--) hl = (hl << 8) | (uint8_t)s->buf[i];
    if (hl > s->len - 8) return 0;
    s->hdr = cJSON_ParseWithLength(s->buf + 8, hl);
    s->data = (const uint8_t *)s->buf + 8 + hl;
    return s->hdr != NULL;
}

/* F32 tensor `name`: pointer to its floats and element count, or NULL. */
static const float *st_get(const st_file *s, const char *name, size_t *n) {
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(s->hdr, name);
    const cJSON *dt = cJSON_GetObjectItem(t, "dtype"), *off = cJSON_GetObjectItem(t, "data_offsets");
    if (!cJSON_IsString(dt) || strcmp(dt->valuestring, "F32") != 0 || cJSON_GetArraySize(off) != 2) return NULL;
    size_t a = (size_t)cJSON_GetArrayItem(off, 0)->valuedouble, b = (size_t)cJSON_GetArrayItem(off, 1)->valuedouble;
    *n = (b - a) / 4;
    return (const float *)(s->data + a); /* 8 + hl is 8-aligned in these files; checked below */
}

static void check_file(const char *q) {
    char rel[256];
    snprintf(rel, sizeof rel, "data/cmf-reference/tiny-%s.cmf", q);
    cmf_file *f = NULL;
    cmf_status st = cmf_file_open(shared_path(rel), &f);
    CHECK_MSG(st == CMF_OK, "%s: %s", q, cmf_last_error());
    if (!f) return;
    char *rep = NULL;
    st = cmf_file_verify(f, &rep);
    CHECK_MSG(st == CMF_OK, "%s verify: %s", q, rep ? rep : cmf_last_error());
    free(rep);
    CHECK(f->masks && f->vocab && f->index); /* all three sections present and validated */

    snprintf(rel, sizeof rel, "data/cmf-reference/tiny-%s.dequant.safetensors", q);
    st_file s;
    CHECK_MSG(st_open(shared_path(rel), &s), "%s: cannot parse %s", q, rel);
    if (!s.hdr) {
        cmf_file_close(f);
        return;
    }
    int n_quant = 0;
    CHECK(cJSON_GetArraySize(s.hdr) - (cJSON_GetObjectItem(s.hdr, "__metadata__") ? 1 : 0) == (int)f->n_tensors);
    for (size_t i = 0; i < f->n_tensors; i++) {
        const cmf_tensor *t = &f->tensors[i];
        size_t n = 0;
        const float *ref = st_get(&s, t->name, &n);
        CHECK_MSG(ref && n == cmf_tensor_numel(t), "%s: %s missing or wrong size in the safetensors", q, t->name);
        if (!ref) continue;
        float *out = malloc(n * sizeof *out), *refc = malloc(n * sizeof *refc);
        memcpy(refc, ref, n * sizeof *refc); /* unaligned-safe copy */
        st = cmf_dequant(t->dtype, t->ndim, t->shape, t->data, t->nbytes, out);
        CHECK_MSG(st == CMF_OK, "%s: %s: %s", q, t->name, cmf_last_error());
        CHECK_MSG(memcmp(out, refc, n * sizeof *out) == 0, "%s: %s (%s) differs from the reference", q, t->name,
                  cmf_dtype_name(t->dtype));
        if (t->dtype == CMF_DT_Q8_ROW) {
            /* q8_row: re-encoding the decoded values reproduces the stored payload exactly */
            n_quant++;
            uint8_t *re = malloc(t->nbytes);
            st = cmf_quantize(t->dtype, t->shape[0], t->shape[1], refc, re);
            size_t diff = 0;
            for (uint64_t k = 0; k < t->nbytes; k++) diff += re[k] != t->data[k];
            CHECK_MSG(st == CMF_OK && diff == 0, "%s: %s: re-encoding differs in %zu of %llu bytes", q, t->name, diff,
                      (unsigned long long)t->nbytes);
            free(re);
        }
        if (t->dtype == CMF_DT_Q8_2F) {
            /* q8_2f: the column field is the RMS of the ORIGINAL weights, which are not available, so a full
             * re-encode cannot reproduce it (the decoded weights' RMS differs by a few f16 ulps). Checked
             * instead: (1) the row part, exactly: dividing the decoded rows by the stored col and quantizing
             * them with our row encoder gives back the stored int8 values and row scales; (2) the column field
             * is within 1% of the decoded weights' column RMS. */
            n_quant++;
            uint64_t R = t->shape[0], C = t->shape[1];
            const uint8_t *cs = t->data + R * C + 2 * R;
            float *wn = malloc(R * C * sizeof *wn);
            uint8_t *re = malloc(R * C + 2 * R);
            for (uint64_t r = 0; r < R; r++)
                for (uint64_t c = 0; c < C; c++)
                    wn[r * C + c] = refc[r * C + c] / cmf_f16_to_f32((uint16_t)(cs[2 * c] | (cs[2 * c + 1] << 8)));
            st = cmf_quantize(CMF_DT_Q8_ROW, R, C, wn, re);
            size_t diff = 0;
            for (uint64_t k = 0; k < R * C + 2 * R; k++) diff += re[k] != t->data[k];
            CHECK_MSG(st == CMF_OK && diff == 0, "%s: %s: row re-encoding differs in %zu bytes", q, t->name, diff);
            int far = 0;
            for (uint64_t c = 0; c < C; c++) {
                double acc = 0;
                for (uint64_t r = 0; r < R; r++) acc += (double)refc[r * C + c] * refc[r * C + c];
                double rms = sqrt(acc / (double)R), col = cmf_f16_to_f32((uint16_t)(cs[2 * c] | (cs[2 * c + 1] << 8)));
                if (fabs(rms - col) > 0.01 * col) far++;
            }
            CHECK_MSG(far == 0, "%s: %s: %d column fields are not the column RMS", q, t->name, far);
            free(wn), free(re);
        }
        free(out), free(refc);
    }
    if (!strcmp(q, "Q8_ROW") || !strcmp(q, "Q8_2F")) CHECK(n_quant == 24);
    cJSON_Delete(s.hdr);
    free(s.buf);
    cmf_file_close(f);
}

/* A truncated sparse index in a real file is refused (§1.11 item 13). */
static void check_index_truncation(void) {
    char *buf;
    size_t len;
    CHECK(cmf_read_file(shared_path("data/cmf-reference/tiny-F16.cmf"), &buf, &len) == CMF_OK);
    cmf_envelope e;
    cmf_envelope_decode((const uint8_t *)buf, &e);
    uint64_t il = e.index_len - 10;
    for (int i = 0; i < 8; i++) buf[0x68 + i] = (char)(il >> (8 * i));
    FILE *fp = fopen(tmp_path("ref_index_cut.cmf"), "wb");
    fwrite(buf, 1, len, fp);
    fclose(fp);
    free(buf);
    cmf_file *f = NULL;
    CHECK(cmf_file_open(tmp_path("ref_index_cut.cmf"), &f) == CMF_E_FORMAT);
    CHECK_MSG(strstr(cmf_last_error(), "index@0x") != NULL, "%s", cmf_last_error());
    cmf_file_close(f);
}

int main(void) {
    check_file("F16");
    check_file("Q8_ROW");
    check_file("Q8_2F");
    check_file("Q4_BLOCK");
    check_index_truncation();
    CMF_TEST_END();
}
