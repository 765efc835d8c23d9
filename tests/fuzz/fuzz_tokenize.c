/* fuzz_tokenize.c — libFuzzer target: encode and decode fuzzed text with real tokenizers.
 *
 * The tokenizers are loaded once: shared/data/tokenizers/{qwen3,llama3,mistral}/tokenizer.json (byte-level BPE
 * with a regex pre-tokenizer, the same with another regex and added tokens, SentencePiece-style BPE with byte
 * fallback). Input byte 0 picks the tokenizer (bits 0-1, mod 3), add_special (bit 2) and the mode (bit 3):
 *   mode 0: the rest is text (any bytes, also invalid UTF-8): encode, then decode the ids (both skip_special
 *           values, and streaming); for the byte-level tokenizers (qwen3, llama3) without special tokens, a valid
 *           UTF-8 text without '<' (every added token starts with '<') must decode back to itself (qwen3: to its
 *           NFC form, its normalizer);
 *   mode 1: the rest is a list of little-endian int32 ids (any values): decode and stream-decode them.
 * Seeds: corpus/tokenize/ (gen_corpus.c: llama.cpp's tokenizer test strings from shared/data/tokenizer-vectors). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <utf8proc.h>

#include "cmf.h"
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

static const char *const NAMES[3] = {"qwen3", "llama3", "mistral"};
static cmf_tokenizer *g_tok[3];

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    for (int i = 0; i < 3; i++) {
        char rel[128];
        snprintf(rel, sizeof rel, "data/tokenizers/%s/tokenizer.json", NAMES[i]);
        size_t len;
        char *json = fz_read(fz_shared(rel), &len);
        if (cmf_tokenizer_load(json, len, &g_tok[i]) != CMF_OK)
            fz_fail("loading %s: %s", fz_shared(rel), cmf_last_error());
        free(json);
    }
    return 0;
}

static int valid_utf8(const uint8_t *p, size_t n) {
    size_t i = 0;
    while (i < n) {
        uint8_t c = p[i];
        size_t k = c < 0x80 ? 1 : (c & 0xe0) == 0xc0 ? 2 : (c & 0xf0) == 0xe0 ? 3 : (c & 0xf8) == 0xf0 ? 4 : 0;
        if (!k || i + k > n) return 0;
        uint32_t cp = k == 1 ? c : (uint32_t)(c & (0x7f >> k));
        for (size_t j = 1; j < k; j++) {
            if ((p[i + j] & 0xc0) != 0x80) return 0;
            cp = cp << 6 | (p[i + j] & 0x3f);
        }
        if ((k == 2 && cp < 0x80) || (k == 3 && cp < 0x800) || (k == 4 && cp < 0x10000) || cp > 0x10ffff ||
            (cp >= 0xd800 && cp <= 0xdfff))
            return 0;
        i += k;
    }
    return 1;
}

static void decode_all(const cmf_tokenizer *tok, const int32_t *ids, size_t n) {
    for (int skip = 0; skip < 2; skip++) {
        char *text = NULL;
        cmf_status s = cmf_detokenize(tok, ids, n, skip, &text);
        fz_check_error(s, "cmf_detokenize");
        free(text);
        cmf_detok_stream *ds = NULL;
        s = cmf_detok_stream_new(tok, skip, &ds);
        fz_check_error(s, "cmf_detok_stream_new");
        for (size_t i = 0; s == CMF_OK && i < n; i++) {
            char *piece = NULL;
            s = cmf_detok_stream_push(ds, ids[i], &piece);
            fz_check_error(s, "cmf_detok_stream_push");
            free(piece);
        }
        cmf_detok_stream_free(ds);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    int which = (data[0] & 3) % 3, add_special = (data[0] >> 2) & 1, mode = (data[0] >> 3) & 1;
    const cmf_tokenizer *tok = g_tok[which];
    const uint8_t *p = data + 1;
    size_t n = size - 1;
    if (mode == 1) {
        size_t nid = n / 4;
        int32_t *ids = malloc((nid ? nid : 1) * sizeof *ids);
        if (!ids) return 0;
        for (size_t i = 0; i < nid; i++)
            ids[i] = (int32_t)((uint32_t)p[4 * i] | (uint32_t)p[4 * i + 1] << 8 | (uint32_t)p[4 * i + 2] << 16 |
                               (uint32_t)p[4 * i + 3] << 24);
        decode_all(tok, ids, nid);
        free(ids);
        return 0;
    }
    int32_t *ids = NULL;
    size_t nid = 0;
    cmf_status s = cmf_tokenize(tok, (const char *)p, n, add_special, &ids, &nid);
    fz_check_error(s, "cmf_tokenize");
    if (s != CMF_OK) return 0;
    int vocab = cmf_tokenizer_vocab_size(tok);
    for (size_t i = 0; i < nid; i++)
        if (ids[i] < 0 || ids[i] >= vocab) fz_fail("%s: id %d out of [0, %d) at %zu", NAMES[which], ids[i], vocab, i);
    decode_all(tok, ids, nid);
    if (which != 2 && !add_special && valid_utf8(p, n) && !memchr(p, '<', n) && !memchr(p, 0, n)) {
        utf8proc_uint8_t *want = NULL;
        utf8proc_ssize_t wn = (utf8proc_ssize_t)n;
        if (which == 0) wn = utf8proc_map(p, (utf8proc_ssize_t)n, &want, UTF8PROC_STABLE | UTF8PROC_COMPOSE);
        char *back = NULL;
        s = cmf_detokenize(tok, ids, nid, 0, &back);
        fz_check_error(s, "cmf_detokenize");
        const uint8_t *w = which == 0 ? want : p;
        if (s == CMF_OK && wn >= 0 && w && (strlen(back) != (size_t)wn || memcmp(back, w, (size_t)wn)))
            fz_fail("%s: decode(encode(text)) != text for a %zu-byte valid UTF-8 text", NAMES[which], n);
        free(back);
        free(want);
    }
    free(ids);
    return 0;
}
