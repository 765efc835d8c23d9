/* fuzz_cmf.c — libFuzzer target: the input is a whole CMF v2 file (CMF_FORMAT.md §1).
 *
 * cmf_file_open must either succeed or fail with a message; on success cmf_file_verify runs (hash mismatches are
 * expected, crashes are not), every tensor is looked up by name and dequantized (tensors up to 1 Mi elements), and
 * the vocab section, when present, is loaded as a tokenizer. Seeds: corpus/cmf/ (gen_corpus.c). */
#include <stdlib.h>
#include <string.h>

#include "cmf.h"
#include "format/format.h"
#include "fuzz_util.h"
#include "quant/dtype.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fz_file in;
    if (fz_file_make(&in, data, size)) return 0;
    cmf_file *f = NULL;
    cmf_status s = cmf_file_open(in.path, &f);
    fz_check_error(s, "cmf_file_open");
    if (s != CMF_OK) {
        if (f) fz_fail("cmf_file_open failed but set *out");
        fz_file_close(&in);
        return 0;
    }
    char *report = NULL;
    s = cmf_file_verify(f, &report);
    fz_check_error(s, "cmf_file_verify");
    if (s == CMF_OK && report && report[0]) fz_fail("cmf_file_verify: CMF_OK with a report '%s'", report);
    free(report);
    for (size_t i = 0; i < f->n_tensors; i++) {
        const cmf_tensor *t = &f->tensors[i];
        if (cmf_file_find(f, t->name) != t) fz_fail("cmf_file_find('%s') does not return tensor %zu", t->name, i);
        uint64_t n = cmf_tensor_numel(t);
        if (n > (1u << 20)) continue;
        float *out = malloc((n ? n : 1) * sizeof *out);
        if (!out) continue;
        s = cmf_dequant(t->dtype, t->ndim, t->shape, t->data, t->nbytes, out);
        fz_check_error(s, "cmf_dequant");
        free(out);
    }
    if (f->vocab && f->env.vocab_len) {
        cmf_tokenizer *tok = NULL;
        s = cmf_tokenizer_load((const char *)f->vocab, (size_t)f->env.vocab_len, &tok);
        fz_check_error(s, "cmf_tokenizer_load(vocab section)");
        if (s == CMF_OK) {
            int32_t *ids = NULL;
            size_t n = 0;
            static const char text[] = "Hello, world! 123";
            s = cmf_tokenize(tok, text, sizeof text - 1, 1, &ids, &n);
            fz_check_error(s, "cmf_tokenize");
            free(ids);
        }
        cmf_tokenizer_free(tok);
    }
    cmf_file_close(f);
    fz_file_close(&in);
    return 0;
}
