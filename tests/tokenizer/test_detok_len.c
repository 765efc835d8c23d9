/* test_detok_len.c — cmf_detokenize_n, cmf_detok_stream_push_n and cmf_detok_stream_flush_n (include/cmf.h) on text
 * holding U+0000, with the real qwen3 tokenizer.json: "a\0b" tokenizes to three ids, the middle one being the
 * vocabulary's byte-level token for byte 0x00 ("Ā", U+0100, in GPT-2's byte-to-unicode table); decoding them
 * gives back all three bytes with their length, in one call and streamed; the functions without _n still work. */
#include <stdlib.h>
#include <string.h>

#include "cmf.h"
#include "testutil.h"
#include "tokenizer/tokenizer.h"

int main(void) {
    cmf_tokenizer *t = NULL;
    cmf_status st = cmf_tokenizer_load_file(shared_path("data/tokenizers/qwen3/tokenizer.json"), &t);
    CHECK_MSG(st == CMF_OK, "load: %s", cmf_last_error());
    if (st != CMF_OK) return 1;
    const int32_t id_a = cmf_tokenizer_token_id(t, "a"), id_b = cmf_tokenizer_token_id(t, "b");
    const int32_t id_nul = cmf_tokenizer_token_id(t, "\xC4\x80"); /* "Ā": byte 0x00 in the byte-level alphabet */
    CHECK(id_a >= 0 && id_b >= 0 && id_nul >= 0);

    /* encode: the NUL byte is a character like any other */
    int32_t *ids = NULL;
    size_t n = 0;
    CHECK(cmf_tokenize(t, "a\0b", 3, 0, &ids, &n) == CMF_OK);
    CHECK_MSG(n == 3 && ids[0] == id_a && ids[1] == id_nul && ids[2] == id_b, "n=%zu", n);

    /* decode with a length */
    char *text = NULL;
    size_t len = 99;
    CHECK(cmf_detokenize_n(t, ids, n, 0, &text, &len) == CMF_OK);
    CHECK_MSG(len == 3 && memcmp(text, "a\0b", 4) == 0, "len=%zu", len); /* NUL-terminated after the bytes too */
    free(text);
    /* without the length (backward compatible): the same bytes, read up to the NUL */
    CHECK(cmf_detokenize(t, ids, n, 0, &text) == CMF_OK);
    CHECK(text && strcmp(text, "a") == 0 && text[1] == '\0' && text[2] == 'b');
    free(text);
    CHECK(cmf_detokenize_n(t, ids, n, 0, &text, NULL) == CMF_OK); /* len may be NULL */
    free(text);
    len = 99;
    CHECK(cmf_detokenize_n(NULL, ids, n, 0, &text, &len) == CMF_E_ARG && len == 0);

    /* streaming: the concatenation of the pieces (with their lengths) is the whole text */
    cmf_detok_stream *s = NULL;
    CHECK(cmf_detok_stream_new(t, 0, &s) == CMF_OK);
    char all[16];
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        CHECK(cmf_detok_stream_push_n(s, ids[i], &text, &len) == CMF_OK);
        CHECK(text && len <= 1 && total + len < sizeof all);
        memcpy(all + total, text, len);
        total += len;
        free(text);
    }
    CHECK(cmf_detok_stream_flush_n(s, &text, &len) == CMF_OK && len == 0);
    free(text);
    CHECK_MSG(total == 3 && memcmp(all, "a\0b", 3) == 0, "streamed %zu bytes", total);
    /* a piece that is only the NUL byte: length 1, where strlen would say 0 */
    CHECK(cmf_detok_stream_push_n(s, id_nul, &text, &len) == CMF_OK && len == 1 && text[0] == '\0');
    free(text);
    CHECK(cmf_detok_stream_push_n(NULL, id_a, &text, &len) == CMF_E_ARG && len == 0);
    CHECK(cmf_detok_stream_flush_n(NULL, &text, &len) == CMF_E_ARG && len == 0);
    cmf_detok_stream_free(s);
    free(ids);
    cmf_tokenizer_free(t);
    CMF_TEST_END();
}
