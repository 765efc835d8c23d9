/* test_safetensors.c — the safetensors reader: real checkpoints, a sharded index written here, and malformed files
 * that must be refused with a message naming the problem. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cmf.h"
#include "convert/safetensors.h"
#include "testutil.h"

static const char *CASES[] = {"llama", "mistral-swa", "qwen2", "qwen3", "gemma2", "bf16-llama"};

/* Writes a safetensors file: header JSON text (padded to 8) + data bytes. */
static void write_st(const char *path, const char *json, const void *data, size_t dlen, int64_t hlen_override) {
    FILE *f = fopen(path, "wb");
    if (!f) {
        fprintf(stderr, "cannot write %s\n", path);
        exit(1);
    }
    size_t jl = strlen(json);
    uint64_t hl = hlen_override >= 0 ? (uint64_t)hlen_override : jl;
    unsigned char b[8];
    for (int i = 0; i < 8; i++) b[i] = (unsigned char)(hl >> (8 * i));
    fwrite(b, 1, 8, f);
    fwrite(json, 1, jl, f);
    if (dlen) fwrite(data, 1, dlen, f);
    fclose(f);
}

static void expect_fail(const char *what, const char *path, const char *needle) {
    cmf_safetensors *st = NULL;
    cmf_status s = cmf_st_open(path, &st);
    CHECK_MSG(s == CMF_E_FORMAT, "%s: expected CMF_E_FORMAT, got %d (%s)", what, s, cmf_last_error());
    CHECK_MSG(strstr(cmf_last_error(), needle) != NULL, "%s: message '%s' lacks '%s'", what, cmf_last_error(), needle);
    cmf_st_close(st);
}

static void test_real(void) {
    for (size_t c = 0; c < sizeof CASES / sizeof CASES[0]; c++) {
        char rel[256];
        snprintf(rel, sizeof rel, "data/hf-tiny/%s/model.safetensors", CASES[c]);
        cmf_safetensors *st = NULL;
        cmf_status s = cmf_st_open(shared_path(rel), &st);
        CHECK_MSG(s == CMF_OK, "%s: %s", rel, cmf_last_error());
        if (s) continue;
        CHECK(cmf_st_count(st) > 10);
        const cmf_st_tensor *e = cmf_st_find(st, "model.embed_tokens.weight");
        CHECK_MSG(e && e->ndim == 2 && e->shape[0] == 1024, "%s: embed_tokens", CASES[c]);
        CHECK(cmf_st_find(st, "no.such.tensor") == NULL);
        /* every tensor converts and is found by name */
        for (size_t i = 0; i < cmf_st_count(st); i++) {
            const cmf_st_tensor *t = cmf_st_get(st, i);
            CHECK(cmf_st_find(st, t->name) == t);
            float *buf = malloc(cmf_st_numel(t) * sizeof *buf + 1);
            CHECK(cmf_st_to_f32(t, buf) == CMF_OK);
            int finite = 1;
            for (uint64_t k = 0; k < cmf_st_numel(t); k++) finite &= isfinite(buf[k]) != 0;
            CHECK_MSG(finite, "%s: %s has non-finite values", CASES[c], t->name);
            free(buf);
        }
        if (strcmp(CASES[c], "bf16-llama") == 0) CHECK(e && e->dtype == CMF_ST_BF16);
        cmf_st_close(st);
        /* the directory form opens the same file */
        snprintf(rel, sizeof rel, "data/hf-tiny/%s", CASES[c]);
        CHECK_MSG(cmf_st_open(shared_path(rel), &st) == CMF_OK, "%s dir: %s", rel, cmf_last_error());
        cmf_st_close(st);
    }
}

static void test_sharded(void) {
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", tmp_path("st_sharded"));
    mkdir(dir, 0755);
    char p[4200];
    float a[6] = {1, 2, 3, 4, 5, 6};
    uint16_t h[2] = {0x3c00, 0xc000}; /* f16 1.0, -2.0 */
    int32_t iv[3] = {7, -8, 9};
    unsigned char d2[12 + 4];
    memcpy(d2, iv, 12);
    memcpy(d2 + 12, h, 4);
    snprintf(p, sizeof p, "%s/model-00001-of-00002.safetensors", dir);
    write_st(p, "{\"__metadata__\":{\"format\":\"pt\"},\"a\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]}}", a,
             sizeof a, -1);
    snprintf(p, sizeof p, "%s/model-00002-of-00002.safetensors", dir);
    write_st(p,
             "{\"c\":{\"dtype\":\"F16\",\"shape\":[2],\"data_offsets\":[12,16]},"
             "\"b\":{\"dtype\":\"I32\",\"shape\":[3],\"data_offsets\":[0,12]}}",
             d2, sizeof d2, -1);
    snprintf(p, sizeof p, "%s/model.safetensors.index.json", dir);
    FILE *f = fopen(p, "w");
    fputs("{\"metadata\":{\"total_size\":40},\"weight_map\":{\"a\":\"model-00001-of-00002.safetensors\","
          "\"b\":\"model-00002-of-00002.safetensors\",\"c\":\"model-00002-of-00002.safetensors\"}}",
          f);
    fclose(f);
    cmf_safetensors *st = NULL;
    cmf_status s = cmf_st_open(dir, &st);
    CHECK_MSG(s == CMF_OK, "sharded: %s", cmf_last_error());
    if (s) return;
    CHECK(cmf_st_count(st) == 3);
    /* file order: shard 1, then shard 2 in data order (b before c) */
    CHECK(strcmp(cmf_st_get(st, 0)->name, "a") == 0);
    CHECK(strcmp(cmf_st_get(st, 1)->name, "b") == 0);
    CHECK(strcmp(cmf_st_get(st, 2)->name, "c") == 0);
    float out[6];
    const cmf_st_tensor *t = cmf_st_find(st, "a");
    CHECK(t && t->ndim == 2 && t->shape[0] == 2 && t->shape[1] == 3 && cmf_st_to_f32(t, out) == CMF_OK);
    CHECK(memcmp(out, a, sizeof a) == 0);
    t = cmf_st_find(st, "b");
    CHECK(t && cmf_st_to_f32(t, out) == CMF_OK && out[0] == 7 && out[1] == -8 && out[2] == 9);
    t = cmf_st_find(st, "c");
    CHECK(t && cmf_st_to_f32(t, out) == CMF_OK && out[0] == 1.0f && out[1] == -2.0f);
    cmf_st_close(st);

    /* an index naming a tensor its shard lacks */
    f = fopen(p, "w");
    fputs("{\"weight_map\":{\"a\":\"model-00001-of-00002.safetensors\",\"zz\":\"model-00002-of-00002.safetensors\"}}", f);
    fclose(f);
    expect_fail("index with missing tensor", dir, "'zz'");
    /* a name present in two shards */
    snprintf(p, sizeof p, "%s/model-00002-of-00002.safetensors", dir);
    write_st(p, "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", a, 4, -1);
    snprintf(p, sizeof p, "%s/model.safetensors.index.json", dir);
    f = fopen(p, "w");
    fputs("{\"weight_map\":{\"a\":\"model-00001-of-00002.safetensors\",\"x\":\"model-00002-of-00002.safetensors\"}}", f);
    fclose(f);
    expect_fail("duplicate across shards", dir, "twice");
    /* a weight_map value that is not a plain shard name: the message names the tensor (it was read after the
     * index JSON was freed: garbage, or an ASan heap-use-after-free) */
    static const char *const BAD[] = {"../../../etc/passwd", "/etc/passwd"};
    for (int i = 0; i < 2; i++) {
        f = fopen(p, "w");
        fprintf(f, "{\"weight_map\":{\"a\":\"model-00001-of-00002.safetensors\",\"lm_head.weight\":\"%s\"}}", BAD[i]);
        fclose(f);
        expect_fail("shard path outside the directory", dir, "weight_map['lm_head.weight'] is not a shard file name");
    }
}

static void test_malformed(void) {
    float a[4] = {1, 2, 3, 4};
    const char *p = tmp_path("st_bad.safetensors");
    const char *good = "{\"w\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,16]}}";
    write_st(p, good, a, sizeof a, -1);
    cmf_safetensors *st = NULL;
    CHECK_MSG(cmf_st_open(p, &st) == CMF_OK, "good file: %s", cmf_last_error());
    cmf_st_close(st);

    FILE *f = fopen(p, "wb");
    fwrite("abc", 1, 3, f);
    fclose(f);
    expect_fail("3-byte file", p, "too short");
    write_st(p, good, a, sizeof a, 1000);
    expect_fail("header length past EOF", p, "header length");
    write_st(p, good, a, 8, -1);
    expect_fail("truncated data", p, "past the data");
    write_st(p, "{\"w\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,16]", a, sizeof a, -1);
    expect_fail("bad JSON", p, "malformed");
    write_st(p, "[1,2]", a, sizeof a, -1);
    expect_fail("not an object", p, "not an object");
    write_st(p, "{\"w\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,1000]}}", a, sizeof a, -1);
    expect_fail("offset past EOF", p, "'w'");
    write_st(p, "{\"w\":{\"dtype\":\"F32\",\"shape\":[3,2],\"data_offsets\":[0,16]}}", a, sizeof a, -1);
    expect_fail("size mismatch", p, "needs 24");
    write_st(p, "{\"w\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[16,0]}}", a, sizeof a, -1);
    expect_fail("end before begin", p, "end before begin");
    write_st(p, "{\"w\":{\"dtype\":\"Q4\",\"shape\":[2,2],\"data_offsets\":[0,16]}}", a, sizeof a, -1);
    expect_fail("unknown dtype", p, "unknown dtype");
    write_st(p, "{\"w\":{\"dtype\":\"F32\",\"shape\":[-2,2],\"data_offsets\":[0,16]}}", a, sizeof a, -1);
    expect_fail("negative dim", p, "shape[0]");
    write_st(p, "{\"w\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296,4294967296],\"data_offsets\":[0,16]}}", a,
             sizeof a, -1);
    expect_fail("overflowing shape", p, "overflow");
    write_st(p, "{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},\"v\":{\"dtype\":\"F32\",\"shape\":[2],"
                "\"data_offsets\":[4,12]}}",
             a, sizeof a, -1);
    expect_fail("overlap", p, "overlaps");
    write_st(p, "{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},\"w\":{\"dtype\":\"F32\",\"shape\":[1],"
                "\"data_offsets\":[4,8]}}",
             a, sizeof a, -1);
    expect_fail("duplicate name", p, "twice");
    write_st(p, "{\"w\":{\"dtype\":\"F32\",\"shape\":[2,2]}}", a, sizeof a, -1);
    expect_fail("missing offsets", p, "data_offsets");
    /* a converted-but-unsupported dtype opens, and to_f32 refuses it */
    write_st(p, "{\"w\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]}}", a, sizeof a, -1);
    CHECK(cmf_st_open(p, &st) == CMF_OK);
    float out[4];
    CHECK(st && cmf_st_to_f32(cmf_st_get(st, 0), out) == CMF_E_UNSUPPORTED);
    cmf_st_close(st);
    CHECK(cmf_st_open(tmp_path("no_such_file.safetensors"), &st) == CMF_E_IO);
}

int main(void) {
    test_real();
    test_sharded();
    test_malformed();
    CMF_TEST_END();
}
