/* test_constrain.c — JSON mode (cmf.h "Constrained sampling"; src/sample/constrain.c) with real tokenizers:
 *  1. the bytes of each token (tokenizer.h tok_piece_bytes) put together give back the text it was tokenized from
 *     (byte-level BPE: qwen3, llama3; SentencePiece with byte fallback: mistral, where the first piece carries the
 *     Metaspace space), including tokens that are pieces of a UTF-8 character;
 *  2. a greedy row built to tempt the sampler out of JSON (eos and '}' above '{' from the start) gives '{', '}', eos,
 *     and ids past the tokenizer's (a padded lm_head) never come out;
 *  3. random rows drawn at temperature 1: every accepted text stays a prefix of a JSON object (fed again to a fresh
 *     recognizer) and eos comes only after the object closed; in those states the masked row (cmf_constraint_mask,
 *     with its first-byte and plain-string shortcuts) keeps exactly the tokens cmf_constraint_fits accepts;
 *  4. a token accepted although it does not fit breaks the constraint (the next draw fails, naming it);
 *     cmf_sampler_reset restarts it; rows where no fitting token has a finite logit fail with a message. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmf.h"
#include "sample/json_fsm.h"
#include "sample/sample.h"
#include "tokenizer/tokenizer.h"
#include "testutil.h"

static cmf_tokenizer *load(const char *name) {
    char rel[256];
    snprintf(rel, sizeof rel, "data/tokenizers/%s/tokenizer.json", name);
    cmf_tokenizer *t = NULL;
    CHECK_MSG(cmf_tokenizer_load_file(shared_path(rel), &t) == CMF_OK, "%s: %s", name, cmf_last_error());
    return t;
}

/* Part 1: the pieces of the ids of `text` joined equal `lead` + text. Returns the number of single-byte pieces that
 * are not UTF-8 on their own (pieces of a character). */
static int pieces_rejoin(const cmf_tokenizer *t, const char *name, const char *text, const char *lead) {
    int32_t *ids = NULL;
    size_t n = 0, tl = strlen(text), ll = strlen(lead);
    CHECK(cmf_tokenize(t, text, tl, 0, &ids, &n) == CMF_OK);
    tok_buf pre = {0}, one = {0}, all = {0};
    const int32_t anchor = tok_anchor_id(t);
    int partial = 0;
    CHECK_MSG(anchor >= 0, "%s: no anchor token", name);
    for (size_t i = 0; i < n; i++) {
        CHECK(tok_piece_bytes(t, anchor, ids[i], &pre, &one) == CMF_OK);
        if (one.n && tok_utf8_check(one.p, one.n) != one.n) partial++;
        CHECK(tok_buf_put(&all, one.p ? one.p : "", one.n) == 0);
    }
    CHECK_MSG(all.n == ll + tl && !memcmp(all.p, lead, ll) && !memcmp(all.p + ll, text, tl),
              "%s: the pieces of %zu ids give '%.*s', want '%s%s'", name, n, (int)all.n, all.p ? all.p : "", lead, text);
    free(ids);
    tok_buf_free(&pre);
    tok_buf_free(&one);
    tok_buf_free(&all);
    return partial;
}

static int32_t id_of(const cmf_tokenizer *t, const char *s) {
    const int32_t id = cmf_tokenizer_token_id(t, s);
    CHECK_MSG(id >= 0, "no token '%s'", s);
    return id;
}

/* Part 3: n draws from random rows; the accepted bytes stay a JSON prefix, eos only after the end. bias >= 0: that
 * token ('}') and '"' get a high logit too, so that objects close. Returns whether the walk ended with eos. */
static int random_walk(const cmf_tokenizer *t, const cmf_constraint *c, int V, int32_t eos, int32_t bias,
                       uint64_t seed, int n) {
    cmf_sampler_params p = cmf_sampler_default_params();
    p.temperature = 1.0f, p.top_k = 0, p.top_p = 1.0f, p.seed = seed;
    cmf_sampler *s = NULL;
    CHECK(cmf_sampler_new(V, &p, &s) == CMF_OK && cmf_sampler_set_constraint(s, c) == CMF_OK);
    float *row = malloc((size_t)V * sizeof *row), *mask = malloc((size_t)V * sizeof *mask);
    uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
    tok_buf pre = {0}, one = {0}, text = {0};
    const int32_t anchor = tok_anchor_id(t);
    int closed = 0;
    for (int step = 0; step < n && s && row && mask; step++) {
        for (int v = 0; v < V; v++) { /* xorshift64: logits in [-4, 4) */
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            row[v] = (float)((x >> 40) & 0xFFFF) / 8192.0f - 4.0f;
        }
        row[eos] = 6.0f; /* the most likely token everywhere: drawn only when it fits */
        if (bias >= 0) row[bias] = row[id_of(t, "\"")] = 14.0f;
        int32_t tok = -1;
        CHECK_MSG(cmf_sampler_sample(s, row, &tok) == CMF_OK, "step %d: %s", step, cmf_last_error());
        if (tok == eos) {
            CHECK_MSG(cmf_sampler_constraint_done(s), "seed %llu step %d: eos before the object closed: '%.*s'",
                      (unsigned long long)seed, step, (int)text.n, text.p ? text.p : "");
            closed = 1;
            break;
        }
        CHECK_MSG(!cmf_sampler_constraint_done(s), "step %d: token %d after the object closed", step, (int)tok);
        cmf_sampler_accept(s, tok);
        CHECK(tok_piece_bytes(t, anchor, tok, &pre, &one) == CMF_OK && one.n > 0);
        CHECK(tok_buf_put(&text, one.p, one.n) == 0);
        cmf_json_fsm f;
        cmf_json_fsm_init(&f);
        CHECK_MSG(cmf_json_fsm_feed(&f, text.p, text.n), "seed %llu step %d: '%.*s' is not a JSON prefix",
                  (unsigned long long)seed, step, (int)text.n, text.p);
        CHECK(cmf_json_fsm_done(&f) == cmf_sampler_constraint_done(s));
        /* the masked row (with its shortcuts) says what cmf_constraint_fits says, token by token, in this state */
        if (step % 3 == 0 || cmf_json_fsm_done(&f)) {
            int bad = 0, n_fit = 0;
            const int any = cmf_constraint_mask(c, &f, row, mask);
            for (int v = 0; v < V; v++) {
                const int fit = cmf_constraint_fits(c, &f, v);
                n_fit += fit;
                if (fit != (mask[v] != -INFINITY) || (fit && mask[v] != row[v])) bad++;
            }
            CHECK_MSG(!bad && any == (n_fit > 0), "seed %llu step %d ('%.*s'): the mask disagrees with fits on %d ids",
                      (unsigned long long)seed, step, (int)text.n, text.p, bad);
        }
    }
    printf("  seed %llu: %zu bytes%s\n", (unsigned long long)seed, text.n, closed ? ", closed, then eos" : "");
    free(row);
    free(mask);
    tok_buf_free(&pre);
    tok_buf_free(&one);
    tok_buf_free(&text);
    cmf_sampler_free(s);
    return closed;
}

int main(void) {
    static const char *TEXT = "{\"name\": \"Ünïcode 日本語 😀 𝄞\", \"n\": [1, -2.5e3, true, null], \"q\": \"a\\\"b\"}";
    cmf_tokenizer *qwen = load("qwen3"), *llama = load("llama3"), *mistral = load("mistral");
    if (!qwen || !llama || !mistral) CMF_TEST_END();
    pieces_rejoin(qwen, "qwen3", TEXT, "");
    pieces_rejoin(llama, "llama3", TEXT, "");
    pieces_rejoin(qwen, "qwen3", "Hello world, once upon a time", "");
    /* SentencePiece: the first piece keeps its Metaspace space mid-sequence; 𝄞 is not in the vocabulary and goes
     * through byte fallback: four single-byte pieces that are not UTF-8 alone */
    const int partial = pieces_rejoin(mistral, "mistral", TEXT, " ");
    CHECK_MSG(partial >= 4, "mistral: %d byte-fallback pieces of a character (want >= 4 for U+1D11E)", partial);

    /* Part 2: greedy on a row that prefers eos, then '}', then '{'; a padded vocabulary's extra ids prefer more */
    const int n_ids = cmf_tokenizer_vocab_size(qwen), V = n_ids + 64;
    const int32_t eos = id_of(qwen, "<|im_end|>"), lb = id_of(qwen, "{"), rb = id_of(qwen, "}");
    cmf_constraint *c = NULL;
    CHECK_MSG(cmf_constraint_new_json(qwen, V, &eos, 1, &c) == CMF_OK, "%s", cmf_last_error());
    float *row = calloc((size_t)V, sizeof *row);
    cmf_sampler_params p = cmf_sampler_default_params();
    p.temperature = 0.0f;
    cmf_sampler *s = NULL;
    CHECK(c && row && cmf_sampler_new(V, &p, &s) == CMF_OK && cmf_sampler_set_constraint(s, c) == CMF_OK);
    if (!c || !row || !s) CMF_TEST_END();
    row[eos] = 11.0f, row[rb] = 10.0f, row[lb] = 9.0f, row[V - 1] = 50.0f;
    const int32_t want[3] = {lb, rb, eos};
    for (int round = 0; round < 2; round++) { /* the second round after cmf_sampler_reset: the same */
        for (int i = 0; i < 3; i++) {
            int32_t tok = -1;
            CHECK_MSG(cmf_sampler_sample(s, row, &tok) == CMF_OK && tok == want[i], "round %d draw %d: %d (want %d) %s",
                      round, i, (int)tok, (int)want[i], cmf_last_error());
            CHECK(cmf_sampler_constraint_done(s) == (i == 2));
            cmf_sampler_accept(s, tok);
        }
        cmf_sampler_reset(s);
        CHECK(!cmf_sampler_constraint_done(s));
    }
    /* Part 4: '}' accepted at the start does not fit: the constraint is broken and says so */
    cmf_sampler_accept(s, rb);
    int32_t tok = -1;
    CHECK(cmf_sampler_sample(s, row, &tok) == CMF_E_ARG && strstr(cmf_last_error(), "JSON mode"));
    cmf_sampler_reset(s);
    for (int v = 0; v < V; v++) row[v] = NAN;
    CHECK(cmf_sampler_sample(s, row, &tok) == CMF_E_ARG); /* the plain draw fails first */
    row[eos] = 1.0f; /* the plain draw gives eos, which does not fit; every token that fits is NaN */
    CHECK_MSG(cmf_sampler_sample(s, row, &tok) == CMF_E_ARG && strstr(cmf_last_error(), "finite logit"), "%s",
              cmf_last_error());
    /* text that was not drawn (the server: content after a </think> written in pieces) advances the constraint */
    cmf_sampler_reset(s);
    CHECK(cmf_sampler_constraint_feed(s, "{\"a\": ", 6) == CMF_OK && !cmf_sampler_constraint_done(s));
    CHECK(cmf_sampler_constraint_feed(s, "1}", 2) == CMF_OK && cmf_sampler_constraint_done(s));
    CHECK(cmf_sampler_constraint_feed(s, "x", 1) == CMF_E_ARG && strstr(cmf_last_error(), "JSON mode"));
    cmf_sampler_reset(s);
    CHECK(cmf_sampler_constraint_feed(s, "x", 1) == CMF_E_ARG);
    cmf_sampler_free(s);
    free(row);

    /* Part 3 */
    for (uint64_t seed = 1; seed <= 3; seed++) random_walk(qwen, c, V, eos, -1, seed, 60);
    int closed = 0;
    for (uint64_t seed = 4; seed <= 6; seed++) closed += random_walk(qwen, c, V, eos, rb, seed, 60);
    CHECK_MSG(closed == 3, "%d of 3 walks that favour '}' closed their object", closed);
    cmf_constraint_free(c);
    cmf_tokenizer_free(qwen);
    cmf_tokenizer_free(llama);
    cmf_tokenizer_free(mistral);
    CMF_TEST_END();
}
