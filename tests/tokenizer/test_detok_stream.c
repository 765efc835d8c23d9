/* test_detok_stream.c — the streaming decoder (cmf_detok_stream_*, include/cmf.h) on Mistral's SentencePiece
 * tokenizer.json (byte fallback, Metaspace, the decoder's Strip of one leading space):
 *  - a byte run that starts with a complete character and is cut off by a normal token ("<0xDD><0x8C>" = U+074C,
 *    then "<0xEE><0x82>", then "▁day"): HF's ByteFallback decodes the whole run as four U+FFFD, which rewrites the
 *    U+070C already streamed. push must not fail (cmf serve answered such sampled replies with HTTP 500): the
 *    held-back ids are decoded on their own, so the stream reads U+074C, then the lossy rest;
 *  - cmf_detok_stream_prime: seeded with "Once", the pushed "▁upon" streams as " upon" (the full decode's suffix),
 *    where an unseeded stream gives "upon" (the Strip decoder at the start of a decode); a primed stream emits
 *    nothing for the seed and refuses a second prime. */
#include <stdlib.h>
#include <string.h>

#include "cmf.h"
#include "testutil.h"
#include "tokenizer/tokenizer.h"

/* Pushes ids into s and appends every piece to out (cap bytes). Returns the number of failed pushes. */
static int push_all(cmf_detok_stream *s, const int32_t *ids, size_t n, char *out, size_t cap) {
    int bad = 0;
    for (size_t i = 0; i < n; i++) {
        char *piece = NULL;
        if (cmf_detok_stream_push(s, ids[i], &piece) != CMF_OK) {
            fprintf(stderr, "push %zu (id %d): %s\n", i, ids[i], cmf_last_error());
            bad++;
            continue;
        }
        strncat(out, piece, cap - strlen(out) - 1);
        free(piece);
    }
    return bad;
}

int main(void) {
    cmf_tokenizer *t = NULL;
    cmf_status st = cmf_tokenizer_load_file(shared_path("data/tokenizers/mistral/tokenizer.json"), &t);
    CHECK_MSG(st == CMF_OK, "load: %s", cmf_last_error());
    if (st != CMF_OK) return 1;

    /* a broken byte run after a complete character */
    const int32_t run[5] = {cmf_tokenizer_token_id(t, "<0xDD>"), cmf_tokenizer_token_id(t, "<0x8C>"),
                            cmf_tokenizer_token_id(t, "<0xEE>"), cmf_tokenizer_token_id(t, "<0x82>"),
                            cmf_tokenizer_token_id(t, "\xE2\x96\x81" "day")};
    for (int i = 0; i < 5; i++) CHECK_MSG(run[i] >= 0, "token %d missing", i);
    char *full = NULL;
    CHECK(cmf_detokenize(t, run, 5, 1, &full) == CMF_OK);
    CHECK_MSG(full && !strcmp(full, "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD day"),
              "HF's ByteFallback decodes the whole broken run as U+FFFD x4: got '%s'", full ? full : "");
    cmf_detok_stream *s = NULL;
    CHECK(cmf_detok_stream_new(t, 1, &s) == CMF_OK);
    char out[256] = "";
    CHECK(push_all(s, run, 5, out, sizeof out) == 0);
    char *tail = NULL;
    CHECK(cmf_detok_stream_flush(s, &tail) == CMF_OK);
    if (tail) strncat(out, tail, sizeof out - strlen(out) - 1);
    free(tail);
    CHECK_MSG(!strcmp(out, "\xDD\x8C\xEF\xBF\xBD\xEF\xBF\xBD day"), "streamed '%s'", out);
    free(full);

    /* priming keeps the leading space of the first pushed word */
    int32_t *ids = NULL;
    size_t n = 0;
    CHECK(cmf_tokenize(t, "Once upon", 9, 0, &ids, &n) == CMF_OK);
    CHECK_MSG(n == 2, "'Once upon' -> %zu ids", n);
    if (n == 2) {
        char a[64] = "", b[64] = "";
        cmf_detok_stream_free(s);
        CHECK(cmf_detok_stream_new(t, 1, &s) == CMF_OK);
        CHECK(push_all(s, ids + 1, 1, a, sizeof a) == 0);
        CHECK_MSG(!strcmp(a, "upon"), "unprimed: '%s'", a);
        cmf_detok_stream_free(s);
        CHECK(cmf_detok_stream_new(t, 1, &s) == CMF_OK);
        CHECK(cmf_detok_stream_prime(s, ids, 1) == CMF_OK);
        CHECK(cmf_detok_stream_prime(s, ids, 1) == CMF_E_ARG);
        CHECK(push_all(s, ids + 1, 1, b, sizeof b) == 0);
        CHECK_MSG(!strcmp(b, " upon"), "primed with 'Once': '%s'", b);
    }
    free(ids);
    CHECK(cmf_detok_stream_prime(NULL, NULL, 0) == CMF_E_ARG);
    cmf_detok_stream_free(s);
    cmf_tokenizer_free(t);
    CMF_TEST_END();
}
