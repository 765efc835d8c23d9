/* test_spm.c — SentencePiece-style BPE from GGUF vocabularies converted by cmf_gguf_tokenizer_json():
 * llama.cpp's llama-spm vectors (ids from HF's Llama-2 tokenizer without special tokens) must match exactly; with the stories260K vocabulary (512 tokens, mostly byte fallback) encode -> decode must
 * give the text back and streaming decode must hold back partial UTF-8 characters split over <0xXX> tokens. */
#include <stdlib.h>
#include <string.h>

#include <stdio.h>

#include "convert/convert.h"
#include "util/fileio.h"
#include "testutil.h"
#include "toktest.h"

static cmf_tokenizer *load_gguf(const char *rel) {
    char *json = NULL;
    size_t len = 0;
    cmf_status st = cmf_gguf_tokenizer_json(shared_path(rel), &json, &len);
    CHECK_MSG(st == CMF_OK, "%s: cmf_gguf_tokenizer_json: %s", rel, cmf_last_error());
    if (st != CMF_OK) return NULL;
    cmf_tokenizer *t = NULL;
    st = cmf_tokenizer_load(json, len, &t);
    CHECK_MSG(st == CMF_OK, "%s: tokenizer load: %s", rel, cmf_last_error());
    free(json);
    return t;
}

/* shared/data/tokenizer-vectors/ggml-vocab-llama-spm.gguf is damaged (every byte sequence that is not UTF-8 was
 * replaced by U+FFFD, so its float metadata is unreadable). Its vocabulary is Llama 2's, which shared/ also holds
 * intact as llama2.c's tokenizer.bin (int32 max_len, then per token: f32 score, int32 len, bytes; "▁" written as
 * " ", <s>/</s> written as "\n<s>\n"/"\n</s>\n"). This rebuilds the vocab-only GGUF llama.cpp would have from it
 * (tokenizer.ggml.model "llama", tokens, scores, SentencePiece token types) so the converter can read it. */
static void put(FILE *f, const void *p, size_t n) { fwrite(p, 1, n, f); }
static void put_u32(FILE *f, uint32_t v) { put(f, &v, 4); }
static void put_u64(FILE *f, uint64_t v) { put(f, &v, 8); }
static void put_str(FILE *f, const char *s, size_t n) { put_u64(f, n), put(f, s, n); }
static void put_key(FILE *f, const char *k, uint32_t type) { put_str(f, k, strlen(k)), put_u32(f, type); }

static int gguf_from_llama2c(const char *bin_rel, const char *out_path) {
    char *b;
    size_t n;
    if (cmf_read_file(shared_path(bin_rel), &b, &n) != CMF_OK) return 0;
    size_t cap = 32000, cnt = 0, o = 4;
    char **tok = malloc(cap * sizeof *tok);
    size_t *tl = malloc(cap * sizeof *tl);
    float *sc = malloc(cap * sizeof *sc);
    while (o + 8 <= n && cnt < cap) {
        int32_t l;
        memcpy(&sc[cnt], b + o, 4), memcpy(&l, b + o + 4, 4), o += 8;
        if (l < 0 || o + (size_t)l > n) break;
        /* undo llama2.c's export: " " -> "▁" (3 bytes), and the BOS/EOS display names */
        tok[cnt] = malloc((size_t)l * 3 + 8);
        size_t k = 0;
        for (int32_t i = 0; i < l; i++) {
            if (b[o + (size_t)i] == ' ') memcpy(tok[cnt] + k, "\xe2\x96\x81", 3), k += 3;
            else tok[cnt][k++] = b[o + (size_t)i];
        }
        if (cnt == 1) k = 3, memcpy(tok[cnt], "<s>", 3);
        if (cnt == 2) k = 4, memcpy(tok[cnt], "</s>", 4);
        tl[cnt++] = k;
        o += (size_t)l;
    }
    free(b);
    FILE *f = fopen(out_path, "wb");
    if (f) {
        put(f, "GGUF", 4), put_u32(f, 3), put_u64(f, 0), put_u64(f, 7);
        put_key(f, "general.architecture", 8), put_str(f, "llama", 5);
        put_key(f, "tokenizer.ggml.model", 8), put_str(f, "llama", 5);
        put_key(f, "tokenizer.ggml.tokens", 9), put_u32(f, 8), put_u64(f, cnt);
        for (size_t i = 0; i < cnt; i++) put_str(f, tok[i], tl[i]);
        put_key(f, "tokenizer.ggml.scores", 9), put_u32(f, 6), put_u64(f, cnt), put(f, sc, cnt * 4);
        put_key(f, "tokenizer.ggml.token_type", 9), put_u32(f, 5), put_u64(f, cnt);
        for (size_t i = 0; i < cnt; i++) { /* llama.cpp: 1 normal, 2 unknown, 3 control, 6 byte */
            int byte = tl[i] == 6 && memcmp(tok[i], "<0x", 3) == 0 && tok[i][5] == '>';
            put_u32(f, i == 0 ? 2u : (i <= 2 ? 3u : (byte ? 6u : 1u)));
        }
        put_key(f, "tokenizer.ggml.bos_token_id", 4), put_u32(f, 1);
        put_key(f, "tokenizer.ggml.eos_token_id", 4), put_u32(f, 2);
        long pos = ftell(f);
        while (pos++ % 32) fputc(0, f);
        fclose(f);
    }
    for (size_t i = 0; i < cnt; i++) free(tok[i]);
    free(tok), free(tl), free(sc);
    return f != NULL && cnt == 32000;
}

static void vectors(void) {
    const char *gguf = tmp_path("tok_llama_spm.gguf");
    char path[4096];
    snprintf(path, sizeof path, "%s", gguf);
    CHECK_MSG(gguf_from_llama2c("data/tokenizers/llama2-sentencepiece/tokenizer.bin", path), "llama2.c tokenizer.bin");
    char *json = NULL;
    size_t len = 0;
    cmf_status st = cmf_gguf_tokenizer_json(path, &json, &len);
    CHECK_MSG(st == CMF_OK, "cmf_gguf_tokenizer_json: %s", cmf_last_error());
    cmf_tokenizer *t = NULL;
    if (st == CMF_OK) CHECK_MSG(cmf_tokenizer_load(json, len, &t) == CMF_OK, "load: %s", cmf_last_error());
    free(json);
    if (!t) return;
    toktest_case *c;
    size_t n = toktest_read_vectors("data/tokenizer-vectors/ggml-vocab-llama-spm.gguf", &c), pass = 0;
    CHECK_MSG(n > 30, "only %zu vector cases", n);
    for (size_t i = 0; i < n; i++) {
        char label[64];
        snprintf(label, sizeof label, "llama-spm case %zu", i);
        pass += (size_t)toktest_check_encode(t, label, c[i].text, c[i].len, c[i].ids, c[i].n, 0);
        char *dec = NULL;
        CHECK(cmf_detokenize(t, c[i].ids, c[i].n, 0, &dec) == CMF_OK);
        CHECK_MSG(dec && strlen(dec) == c[i].len && memcmp(dec, c[i].text, c[i].len) == 0,
                  "%s: decode round trip gave '%s' for '%s'", label, dec ? dec : "", c[i].text);
        free(dec);
        toktest_check_stream(t, label, c[i].ids, c[i].n, 0);
    }
    fprintf(stderr, "llama-spm: %zu/%zu vector strings match\n", pass, n);
    toktest_free_vectors(c, n);
    cmf_tokenizer_free(t);
}

static void stories(void) {
    cmf_tokenizer *t = load_gguf("data/models/stories260K-gguf/stories260Ktok512.gguf");
    if (!t) return;
    CHECK(cmf_tokenizer_vocab_size(t) == 512);
    const char *texts[] = {"Once upon a time, there was a little girl named Lily.",
                           "She saw a 🐶 and said \"你好\"! Ünïcödé 😀👍🏽", " two  spaces\tand\nnewline"};
    for (size_t k = 0; k < sizeof texts / sizeof texts[0]; k++) {
        int32_t *ids = NULL;
        size_t n = 0;
        CHECK_MSG(cmf_tokenize(t, texts[k], strlen(texts[k]), 1, &ids, &n) == CMF_OK, "%s", cmf_last_error());
        CHECK_MSG(n > 1 && ids[0] == 1, "stories260K: BOS (1) expected first");
        char *dec = NULL;
        CHECK(cmf_detokenize(t, ids, n, 1, &dec) == CMF_OK);
        CHECK_MSG(dec && strcmp(dec, texts[k]) == 0, "stories260K: round trip '%s' != '%s'", dec ? dec : "", texts[k]);
        free(dec);
        toktest_check_stream(t, "stories260K", ids, n, 1);
        free(ids);
    }
    /* a known encoding: every piece of this sentence is in the 512-token vocabulary */
    int32_t *ids = NULL;
    size_t n = 0;
    CHECK(cmf_tokenize(t, "Lily", 4, 0, &ids, &n) == CMF_OK);
    CHECK_MSG(n >= 1 && cmf_tokenizer_token_id(t, "<0x0A>") == 13, "byte token ids follow the SentencePiece layout");
    free(ids);
    cmf_tokenizer_free(t);
}

int main(void) {
    vectors();
    stories();
    CMF_TEST_END();
}
