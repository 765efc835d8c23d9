/* A file written by our writer opens, verifies, and gives every tensor back bit-exact; writer layout rules of
 * §1.12 hold; a failed write leaves the destination untouched. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fixture.h"
#include "quant/dtype.h"
#include "testutil.h"

static void test_roundtrip(void) {
    const char *path = tmp_path("fmt_roundtrip.cmf");
    cmf_status st = fx_write(path);
    CHECK_MSG(st == CMF_OK, "%s", cmf_last_error());
    cmf_file *f = NULL;
    st = cmf_file_open(path, &f);
    CHECK_MSG(st == CMF_OK, "%s", cmf_last_error());
    if (!f) return;
    char *rep = NULL;
    st = cmf_file_verify(f, &rep);
    CHECK_MSG(st == CMF_OK && rep && rep[0] == 0, "%s / %s", cmf_last_error(), rep ? rep : "(null)");
    free(rep);

    size_t n;
    const fx_tensor *t = fx_tensors(&n);
    CHECK(f->n_tensors == n);
    for (size_t i = 0; i < n; i++) {
        const cmf_tensor *ct = cmf_file_find(f, t[i].name);
        CHECK_MSG(ct != NULL, "%s not found", t[i].name);
        if (!ct) continue;
        CHECK(ct == &f->tensors[i]); /* directory order = add order */
        CHECK(ct->dtype == t[i].dtype && ct->ndim == t[i].ndim && ct->nbytes == t[i].nbytes);
        CHECK(memcmp(ct->shape, t[i].shape, sizeof ct->shape) == 0);
        CHECK_MSG(memcmp(ct->data, t[i].data, t[i].nbytes) == 0, "%s payload differs", t[i].name);
        CHECK(ct->off % (ct->nbytes >= 16384 ? 4096 : 64) == 0);
        CHECK(ct->hash == cmf_hash64(t[i].data, t[i].nbytes));
    }
    CHECK(cmf_file_find(f, "model.layers.0.a_proj.weigh") == NULL);
    CHECK(cmf_file_find(f, "nope") == NULL);

    /* envelope per §1.12 */
    const cmf_envelope *e = &f->env;
    CHECK(e->features == (CMF_FEAT_TENSOR_DIR | CMF_FEAT_BINARY_MASKS | CMF_FEAT_QUANT_2F));
    CHECK(e->header_off == 128 && e->dir_off == 128 + e->header_len);
    CHECK(e->data_off % 4096 == 0 && e->data_off >= e->dir_off + e->dir_len && e->data_off - (e->dir_off + e->dir_len) < 4096);
    size_t ml;
    const uint8_t *masks = fx_masks(&ml);
    CHECK(e->masks_len == ml && e->masks_off == e->data_off + e->data_len);
    CHECK(f->masks && memcmp(f->masks, masks, ml) == 0);
    CHECK(e->vocab_len == strlen(fx_vocab) && e->vocab_off == e->masks_off + e->masks_len);
    CHECK(f->vocab && memcmp(f->vocab, fx_vocab, strlen(fx_vocab)) == 0);
    CHECK(e->index_len == 0 && e->index_off == 0 && f->index == NULL);
    CHECK(f->map.size == e->vocab_off + e->vocab_len);
    const cJSON *sh = cJSON_GetObjectItemCaseSensitive(f->header, "section_hashes");
    const cJSON *hv = cJSON_GetObjectItemCaseSensitive(sh, "vocab");
    char hex[17];
    snprintf(hex, sizeof hex, "%016llx", (unsigned long long)cmf_hash64(fx_vocab, strlen(fx_vocab)));
    CHECK(cJSON_IsString(hv) && strcmp(hv->valuestring, hex) == 0);
    CHECK(cJSON_GetObjectItemCaseSensitive(sh, "masks") != NULL);
    CHECK(cJSON_GetObjectItemCaseSensitive(sh, "index") == NULL);

    /* dequant of the f32 tensor and the vbit one goes through */
    const cmf_tensor *a = cmf_file_find(f, "model.layers.0.a_proj.weight");
    float out[32];
    CHECK(a && cmf_dequant(a->dtype, a->ndim, a->shape, a->data, a->nbytes, out) == CMF_OK &&
          memcmp(out, a->data, sizeof out) == 0);
    cmf_file_close(f);
}

static void test_writer_errors(void) {
    const char *path = tmp_path("fmt_keep.cmf");
    fx_save(path, (const uint8_t *)"keep", 4);
    cmf_writer *w;
    CHECK(cmf_writer_new(path, &w) == CMF_OK);
    uint32_t shape[2] = {2, 2};
    float v[4] = {1, 2, 3, 4};
    CHECK(cmf_writer_add(w, "x", CMF_DT_F32, 2, shape, v, 16) == CMF_OK);
    CHECK(cmf_writer_add(w, "x", CMF_DT_F32, 2, shape, v, 16) == CMF_E_ARG);
    CHECK(strstr(cmf_last_error(), "duplicate") != NULL);
    CHECK(cmf_writer_add(w, "y", CMF_DT_F32, 2, shape, v, 12) == CMF_E_ARG);
    CHECK(strstr(cmf_last_error(), "nbytes 12") != NULL);
    CHECK(cmf_writer_add(w, "z", 17, 2, shape, v, 16) == CMF_E_ARG);
    CHECK(cmf_writer_add(w, "bad\xff", CMF_DT_F32, 2, shape, v, 16) == CMF_E_ARG);
    /* no header: finish fails, destination untouched, temporaries gone */
    CHECK(cmf_writer_finish(w) == CMF_E_ARG);
    CHECK(strstr(cmf_last_error(), "header") != NULL);
    size_t len;
    uint8_t *b = fx_read(path, &len);
    CHECK(len == 4 && memcmp(b, "keep", 4) == 0);
    free(b);
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    CHECK(access(tmp, F_OK) != 0);
    snprintf(tmp, sizeof tmp, "%s.blob.tmp", path);
    CHECK(access(tmp, F_OK) != 0);

    /* a header missing a required key is refused by the writer too */
    CHECK(cmf_writer_new(path, &w) == CMF_OK);
    cmf_writer_set_header(w, cJSON_Parse("{\"version\":2,\"quant_type\":\"F32\",\"arch\":{}}"));
    CHECK(cmf_writer_finish(w) == CMF_E_ARG);
    CHECK(strstr(cmf_last_error(), "arch.arch_name") != NULL);
    b = fx_read(path, &len);
    CHECK(len == 4 && memcmp(b, "keep", 4) == 0);
    free(b);
}

int main(void) {
    test_roundtrip();
    test_writer_errors();
    CMF_TEST_END();
}
