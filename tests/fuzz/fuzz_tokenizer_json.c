/* fuzz_tokenizer_json.c — libFuzzer target: the input is a Hugging Face tokenizer.json.
 *
 * cmf_tokenizer_load must succeed or fail with a message. A loaded tokenizer encodes a fixed text (with and
 * without special tokens; ASCII, accents, CJK, emoji, digits and whitespace runs), decodes the ids back (with and
 * without special tokens, and through the streaming decoder) and looks a few tokens up. Seeds: corpus/
 * tokenizer_json/ (small hand-written tokenizers of every model type, the tiny reference CMF's vocab section and the
 * tokenizers built from the synthetic GGUFs; gen_corpus.c). */
#include <stdlib.h>
#include <string.h>

#include "cmf.h"
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void roundtrip(const cmf_tokenizer *tok, const char *text, size_t len, int add_special) {
    int32_t *ids = NULL;
    size_t n = 0;
    cmf_status s = cmf_tokenize(tok, text, len, add_special, &ids, &n);
    fz_check_error(s, "cmf_tokenize");
    if (s != CMF_OK) return;
    for (int skip = 0; skip < 2; skip++) {
        char *back = NULL;
        s = cmf_detokenize(tok, ids, n, skip, &back);
        fz_check_error(s, "cmf_detokenize");
        free(back);
    }
    cmf_detok_stream *ds = NULL;
    s = cmf_detok_stream_new(tok, 1, &ds);
    fz_check_error(s, "cmf_detok_stream_new");
    for (size_t i = 0; s == CMF_OK && i < n; i++) {
        char *piece = NULL;
        s = cmf_detok_stream_push(ds, ids[i], &piece);
        fz_check_error(s, "cmf_detok_stream_push");
        free(piece);
    }
    cmf_detok_stream_free(ds);
    free(ids);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    cmf_tokenizer *tok = NULL;
    cmf_status s = cmf_tokenizer_load((const char *)data, size, &tok);
    fz_check_error(s, "cmf_tokenizer_load");
    if (s != CMF_OK) {
        if (tok) fz_fail("cmf_tokenizer_load failed but set *out");
        return 0;
    }
    static const char text[] = "Hello, World!  It's 2024: caf\xc3\xa9 na\xc3\xafve \xe4\xbd\xa0\xe5\xa5\xbd "
                               "\xf0\x9f\x98\x80\n\n\tend   <s></s><|endoftext|> 12345";
    roundtrip(tok, text, sizeof text - 1, 0);
    roundtrip(tok, text, sizeof text - 1, 1);
    roundtrip(tok, "", 0, 1);
    (void)cmf_tokenizer_vocab_size(tok);
    (void)cmf_tokenizer_token_id(tok, "<s>");
    (void)cmf_tokenizer_token_id(tok, "Hello");
    static const int32_t odd_ids[] = {0, 1, 2, 3, -1, 1 << 30, 255, 256};
    char *back = NULL;
    s = cmf_detokenize(tok, odd_ids, sizeof odd_ids / sizeof odd_ids[0], 0, &back);
    fz_check_error(s, "cmf_detokenize(out-of-range ids)");
    free(back);
    cmf_tokenizer_free(tok);
    return 0;
}
