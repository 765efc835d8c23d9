/* test_vectors.c — llama.cpp's tokenizer test vectors (shared/data/tokenizer-vectors, produced by HF tokenizers
 * with add_special_tokens=False, as llama.cpp's test-tokenizer-0 consumes them) against our encoder; plus, for
 * every vector string, decode(encode(s)) == s (when s is NFC-stable for an NFC tokenizer) and streaming decode ==
 * full decode. Built once per TOKCASE. */
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "testutil.h"
#include "tokenizer/tokenizer.h"
#include "toktest.h"

#if defined(TOKCASE_QWEN3)
#define JSON "data/tokenizers/qwen3/tokenizer.json"
#define VECTORS "data/tokenizer-vectors/ggml-vocab-qwen2.gguf"
#define NFC 1
#elif defined(TOKCASE_LLAMA3)
#define JSON "data/tokenizers/llama3/tokenizer.json"
#define VECTORS "data/tokenizer-vectors/ggml-vocab-llama-bpe.gguf"
#define NFC 0
#elif defined(TOKCASE_GPT2)
/* GPT-2's tokenizer.json, built from OpenAI's encoder.json + vocab.bpe by scripts/tokenizer/make_gpt2.mjs and
 * committed (tests/tokenizer/gpt2/README.md): the shared ggml-vocab-gpt-2.gguf is damaged, its vectors are not. */
#define JSON_IN_REPO TOK_GPT2_JSON
#define VECTORS "data/tokenizer-vectors/ggml-vocab-gpt-2.gguf"
#define NFC 0
#else
#error "define a TOKCASE"
#endif

static int nfc_stable(const char *s, size_t n) {
    if (!NFC || !n) return 1;
    utf8proc_uint8_t *r = NULL;
    utf8proc_ssize_t l = utf8proc_map((const utf8proc_uint8_t *)s, (utf8proc_ssize_t)n, &r,
                                      UTF8PROC_STABLE | UTF8PROC_COMPOSE);
    int same = l == (utf8proc_ssize_t)n && memcmp(r, s, n) == 0;
    free(r);
    return same;
}

int main(void) {
#ifdef JSON_IN_REPO
    cmf_tokenizer *t = NULL;
    CHECK_MSG(cmf_tokenizer_load_file(JSON_IN_REPO, &t) == CMF_OK, "load %s: %s", JSON_IN_REPO, cmf_last_error());
#else
    cmf_tokenizer *t = toktest_load_shared(JSON);
#endif
    if (!t) CMF_TEST_END();
    toktest_case *c;
    size_t n = toktest_read_vectors(VECTORS, &c);
    CHECK_MSG(n > 30, "only %zu vector cases", n);
    size_t pass = 0;
    for (size_t i = 0; i < n; i++) {
        char label[160];
        snprintf(label, sizeof label, "%s case %zu", VECTORS, i);
        pass += (size_t)toktest_check_encode(t, label, c[i].text, c[i].len, c[i].ids, c[i].n, 0);
        char *dec = NULL;
        CHECK(cmf_detokenize(t, c[i].ids, c[i].n, 0, &dec) == CMF_OK);
        if (dec && nfc_stable(c[i].text, c[i].len))
            CHECK_MSG(strlen(dec) == c[i].len && memcmp(dec, c[i].text, c[i].len) == 0,
                      "%s: decode round trip gave '%s' for '%s'", label, dec, c[i].text);
        free(dec);
        toktest_check_stream(t, label, c[i].ids, c[i].n, 0);
    }
    fprintf(stderr, "%s: %zu/%zu vector strings match\n", VECTORS, pass, n);
    toktest_free_vectors(c, n);
    cmf_tokenizer_free(t);
    CMF_TEST_END();
}
