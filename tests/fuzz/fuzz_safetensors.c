/* fuzz_safetensors.c — libFuzzer target: the input is a .safetensors file (src/convert/safetensors.h).
 *
 * cmf_st_open must succeed or fail with a message. When it opens, every tensor is found again by name, its byte
 * size must equal numel x the dtype size and lie inside the input, and tensors up to 1 Mi elements are converted
 * to float32 (CMF_E_UNSUPPORTED for other dtypes is fine). Seeds: corpus/safetensors/ (gen_corpus.c: small files
 * of each dtype, with and without __metadata__, a 0-d and an empty tensor). */
#include <stdlib.h>
#include <string.h>

#include "cmf.h"
#include "convert/safetensors.h"
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static uint64_t dtype_size(int dt) {
    switch (dt) {
    case CMF_ST_F32: case CMF_ST_I32: return 4;
    case CMF_ST_F16: case CMF_ST_BF16: return 2;
    case CMF_ST_I64: return 8;
    default: return 0;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fz_file in;
    if (fz_file_make(&in, data, size)) return 0;
    cmf_safetensors *st = NULL;
    cmf_status s = cmf_st_open(in.path, &st);
    fz_check_error(s, "cmf_st_open");
    if (s != CMF_OK) {
        if (st) fz_fail("cmf_st_open failed but set *out");
        fz_file_close(&in);
        return 0;
    }
    size_t n = cmf_st_count(st);
    for (size_t i = 0; i < n; i++) {
        const cmf_st_tensor *t = cmf_st_get(st, i);
        if (cmf_st_find(st, t->name) != t) fz_fail("cmf_st_find('%s') does not return tensor %zu", t->name, i);
        uint64_t numel = cmf_st_numel(t), es = dtype_size(t->dtype);
        if (t->nbytes > size) fz_fail("tensor '%s': %llu bytes in a %zu-byte file", t->name,
                                      (unsigned long long)t->nbytes, size);
        if (es && numel * es != t->nbytes)
            fz_fail("tensor '%s': numel %llu x %llu != nbytes %llu", t->name, (unsigned long long)numel,
                    (unsigned long long)es, (unsigned long long)t->nbytes);
        if (numel > (1u << 20)) continue;
        float *out = malloc((numel ? numel : 1) * sizeof *out);
        if (!out) continue;
        s = cmf_st_to_f32(t, out);
        fz_check_error(s, "cmf_st_to_f32");
        if (s != CMF_OK && es) fz_fail("cmf_st_to_f32('%s') refused a %s tensor", t->name, t->dtype_str);
        free(out);
    }
    cmf_st_close(st);
    fz_file_close(&in);
    return 0;
}
