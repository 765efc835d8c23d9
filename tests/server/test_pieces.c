/* test_pieces — llama-server's text of token ids (srv_llama_detokenize, review13 item 2) on byte-level BPE
 * tokenizers: such a tokenizer has no SentencePiece leading space to keep, so the text must equal the HF decode
 * (cmf_detokenize, checked against HF tokenizers by tests/tokenizer/test_hf_refs) for every text below, with and
 * without a leading special token, and for every suffix of the ids (one that starts inside a character included:
 * the anchor token ahead of the ids must not change how the rest decodes). The SentencePiece side (" Once upon") is
 * checked against llama-server itself by test_native. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/internal.h"
#include "testutil.h"
#include "tokenizer/tokenizer.h"

static const char *const TEXTS[] = {"Hello world", " leading space", "Once upon a time",
                                    "caf\xC3\xA9 \xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E \xF0\x9F\x98\x80!",
                                    "\n\n  two\tspaces", "a", "x = f(1, 2);  // \xE2\x98\x83"};

static void check_tokenizer(const char *dir) {
    char rel[256];
    snprintf(rel, sizeof rel, "data/tokenizers/%s/tokenizer.json", dir);
    cmf_tokenizer *t = NULL;
    CHECK_MSG(cmf_tokenizer_load_file(shared_path(rel), &t) == CMF_OK, "%s: %s", dir, cmf_last_error());
    if (!t) return;
    cmf_server s;
    memset(&s, 0, sizeof s);
    s.tok = t;
    s.anchor = srv_piece_anchor(t);
    CHECK_MSG(s.anchor >= 0, "%s: no anchor token", dir);
    int checked = 0;
    for (size_t k = 0; k < sizeof TEXTS / sizeof TEXTS[0]; k++) {
        int32_t *ids = NULL;
        size_t n = 0;
        CHECK_MSG(cmf_tokenize(t, TEXTS[k], strlen(TEXTS[k]), 1, &ids, &n) == CMF_OK, "%s", cmf_last_error());
        for (size_t from = 0; from < n; from++) { /* add_special: the first pass may start with a special token */
            for (int skip = 0; skip < 2; skip++) {
                char *want = NULL, *got = NULL;
                CHECK(cmf_detokenize(t, ids + from, n - from, skip, &want) == CMF_OK);
                CHECK(srv_llama_detokenize(&s, ids + from, n - from, skip, &got) == CMF_OK);
                CHECK_MSG(want && got && !strcmp(want, got), "%s: '%s' from id %zu (skip_special %d): '%s', HF '%s'",
                          dir, TEXTS[k], from, skip, got ? got : "-", want ? want : "-");
                free(want);
                free(got);
                checked++;
            }
        }
        free(ids);
    }
    CHECK_MSG(checked > 40, "%s: only %d decodes checked", dir, checked);
    cmf_tokenizer_free(t);
}

int main(void) {
    check_tokenizer("qwen3");
    check_tokenizer("llama3");
    CMF_TEST_END();
}
