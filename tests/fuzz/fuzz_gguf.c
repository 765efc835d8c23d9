/* fuzz_gguf.c — libFuzzer target: the input is a GGUF file converted to CMF (cmf_convert_gguf, convert.h).
 *
 * The conversion must succeed or fail with a message. When it succeeds, its output must open and verify (the
 * writer promises that a written file always opens): a failure there aborts as a broken invariant; the vocab section
 * (the tokenizer.json built from the GGUF's tokenizer.ggml.*) is then loaded and encodes a fixed text (errors
 * allowed: fuzzed token strings need not form a loadable tokenizer). cmf_gguf_tokenizer_json runs on the input too.
 * The output goes to a per-process scratch directory (/dev/shm when present) and is removed after each input.
 * Seeds: corpus/gguf/ (gen_corpus.c: tiny llama/SentencePiece and qwen2/byte-level-BPE GGUFs with F32, F16, BF16,
 * Q8_0 and Q4_0 tensors; a vocab-only one). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cmf.h"
#include "convert/convert.h"
#include "format/format.h"
#include "fuzz_util.h"
#include "quant/dtype.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_output(const char *path) {
    cmf_file *f = NULL;
    cmf_status s = cmf_file_open(path, &f);
    if (s != CMF_OK) fz_fail("cmf_convert_gguf wrote a file that does not open: %s", cmf_last_error());
    char *report = NULL;
    s = cmf_file_verify(f, &report);
    if (s != CMF_OK) fz_fail("cmf_convert_gguf wrote a file that does not verify: %s", report ? report : "");
    free(report);
    if (f->vocab && f->env.vocab_len) {
        cmf_tokenizer *tok = NULL;
        s = cmf_tokenizer_load((const char *)f->vocab, (size_t)f->env.vocab_len, &tok);
        fz_check_error(s, "cmf_tokenizer_load(converted vocab)");
        if (s == CMF_OK) {
            static const char text[] = "Hello world, caf\xc3\xa9 \xe4\xbd\xa0\xe5\xa5\xbd 42";
            int32_t *ids = NULL;
            size_t n = 0;
            s = cmf_tokenize(tok, text, sizeof text - 1, 1, &ids, &n);
            fz_check_error(s, "cmf_tokenize(converted vocab)");
            free(ids);
        }
        cmf_tokenizer_free(tok);
    }
    cmf_file_close(f);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fz_file in;
    if (fz_file_make(&in, data, size)) return 0;
    char out[512];
    snprintf(out, sizeof out, "%s", fz_scratch("out.cmf"));
    cmf_convert_opts opts;
    memset(&opts, 0, sizeof opts);
    opts.quant = size % 2 ? CMF_DT_F32 : CMF_DT_Q8_ROW; /* the default and a quantized target alternate */
    cmf_status s = cmf_convert_gguf(in.path, out, &opts);
    fz_check_error(s, "cmf_convert_gguf");
    if (s == CMF_OK) check_output(out);
    unlink(out);
    char *json = NULL;
    size_t len = 0;
    s = cmf_gguf_tokenizer_json(in.path, &json, &len);
    fz_check_error(s, "cmf_gguf_tokenizer_json");
    if (s == CMF_OK && (!json || strlen(json) != len)) fz_fail("cmf_gguf_tokenizer_json: length mismatch");
    free(json);
    fz_file_close(&in);
    return 0;
}
