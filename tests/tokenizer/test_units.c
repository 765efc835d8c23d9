/* test_units.c — tokenizer error handling and API edges: truncated / malformed tokenizer.json, unknown component
 * types (CMF_E_UNSUPPORTED naming the type), merges naming tokens outside the vocab, invalid UTF-8 input, ids
 * without a token (skipped by decode), token_id / vocab_size against the JSON itself, and concurrent encoding through the
 * shared word cache giving the same ids as encoding on one thread; the pooled string map (growth past its reservation,
 * keys holding NUL bytes, overwrites) and cmf_tokenizer_load_file (mapped file) against cmf_tokenizer_load. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "testutil.h"
#include "toktest.h"
#include "tokenizer/tokenizer.h"
#include "util/fileio.h"

#ifndef TOK_TEST_DATA
#define TOK_TEST_DATA "tests/tokenizer/data"
#endif

static char *read_data(const char *name, size_t *len) {
    char path[512], *s = NULL;
    snprintf(path, sizeof path, "%s/%s", TOK_TEST_DATA, name);
    CHECK_MSG(cmf_read_file(path, &s, len) == CMF_OK, "%s", cmf_last_error());
    return s;
}

/* Loads `json` after setting root[section].type (or root.model.type) to `type`; returns the status. */
static cmf_status load_with_type(const char *json, size_t len, const char *section, const char *type) {
    cJSON *root = cJSON_ParseWithLength(json, len);
    cJSON *obj = cJSON_GetObjectItemCaseSensitive(root, section);
    if (!cJSON_IsObject(obj)) {
        cJSON_DeleteItemFromObjectCaseSensitive(root, section);
        obj = cJSON_AddObjectToObject(root, section);
    }
    cJSON_DeleteItemFromObjectCaseSensitive(obj, "type");
    cJSON_AddStringToObject(obj, "type", type);
    char *txt = cJSON_PrintUnformatted(root);
    cmf_tokenizer *t = NULL;
    cmf_status st = cmf_tokenizer_load(txt, strlen(txt), &t);
    CHECK(st != CMF_OK ? t == NULL : 1);
    cmf_tokenizer_free(t);
    free(txt);
    cJSON_Delete(root);
    return st;
}

static void errors(void) {
    size_t len;
    char *json = read_data("synth_bpe_misc.tokenizer.json", &len);
    if (!json) return;
    cmf_tokenizer *t = NULL;
    CHECK_MSG(cmf_tokenizer_load(json, len, &t) == CMF_OK, "%s", cmf_last_error());

    /* every truncation of the file is malformed JSON: a clean CMF_E_FORMAT, never a crash */
    for (size_t cut = 0; cut < len - 2; cut += 1 + cut / 7) {
        cmf_tokenizer *x = NULL;
        cmf_status st = cmf_tokenizer_load(json, cut, &x);
        CHECK_MSG(st == CMF_E_FORMAT && x == NULL, "truncated at %zu: status %d", cut, st);
        CHECK_MSG(strstr(cmf_last_error(), "tokenizer.json") != NULL, "message '%s'", cmf_last_error());
    }
    cmf_tokenizer *none = NULL;
    CHECK(cmf_tokenizer_load_file("/nonexistent/tokenizer.json", &none) == CMF_E_IO && none == NULL);
    CHECK_MSG(strstr(cmf_last_error(), "/nonexistent/tokenizer.json") != NULL, "'%s'", cmf_last_error());
    CHECK(cmf_tokenizer_load("[1,2]", 5, &(cmf_tokenizer *){NULL}) == CMF_E_FORMAT);
    CHECK(cmf_tokenizer_load("{}", 2, &(cmf_tokenizer *){NULL}) == CMF_E_FORMAT); /* no model */

    /* unknown component types are named */
    struct { const char *section, *type, *msg; } unk[] = {
        {"pre_tokenizer", "Foo", "pre_tokenizer type 'Foo' is not supported"},
        {"normalizer", "Bar", "normalizer type 'Bar' is not supported"},
        {"decoder", "Baz", "decoder type 'Baz' is not supported"},
        {"post_processor", "Zed", "post_processor type 'Zed' is not supported"},
        {"model", "Qux", "model type 'Qux' is not supported"},
    };
    for (size_t i = 0; i < sizeof unk / sizeof unk[0]; i++) {
        cmf_status st = load_with_type(json, len, unk[i].section, unk[i].type);
        CHECK_MSG(st == CMF_E_UNSUPPORTED, "%s: status %d", unk[i].type, st);
        CHECK_MSG(strstr(cmf_last_error(), unk[i].msg) != NULL, "message '%s'", cmf_last_error());
    }

    /* a merge naming a token outside the vocab */
    cJSON *root = cJSON_ParseWithLength(json, len);
    cJSON *merges = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(root, "model"), "merges");
    cJSON *bad = cJSON_CreateArray();
    cJSON_AddItemToArray(bad, cJSON_CreateString("zz"));
    cJSON_AddItemToArray(bad, cJSON_CreateString("q"));
    cJSON_AddItemToArray(merges, bad);
    char *txt = cJSON_PrintUnformatted(root);
    cmf_tokenizer *x = NULL;
    CHECK(cmf_tokenizer_load(txt, strlen(txt), &x) == CMF_E_FORMAT && x == NULL);
    CHECK_MSG(strstr(cmf_last_error(), "merges[") && strstr(cmf_last_error(), "zz"), "'%s'", cmf_last_error());
    free(txt);

    /* ids far outside any real vocabulary are rejected (they index dense tables) */
    const char *huge_paths[][2] = {{"added_tokens", "id"}, {"model", "vocab"}};
    for (int k = 0; k < 2; k++) {
        cJSON *r2 = cJSON_ParseWithLength(json, len);
        cJSON *sec = cJSON_GetObjectItemCaseSensitive(r2, huge_paths[k][0]);
        if (k == 0) cJSON_SetNumberValue(cJSON_GetObjectItemCaseSensitive(sec->child, "id"), 1e12);
        else cJSON_SetNumberValue(cJSON_GetObjectItemCaseSensitive(sec, huge_paths[k][1])->child, 1073741824.0);
        char *t2 = cJSON_PrintUnformatted(r2);
        cmf_tokenizer *x2 = NULL;
        CHECK_MSG(cmf_tokenizer_load(t2, strlen(t2), &x2) == CMF_E_FORMAT && x2 == NULL, "huge id in %s",
                  huge_paths[k][0]);
        free(t2);
        cJSON_Delete(r2);
    }

    /* token_id and vocab_size agree with the JSON */
    const cJSON *vocab = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(root, "model"), "vocab");
    const cJSON *e;
    int max_id = -1, all = 1;
    cJSON_ArrayForEach(e, vocab) {
        if (cmf_tokenizer_token_id(t, e->string) != e->valueint) all = 0;
        if (e->valueint > max_id) max_id = e->valueint;
    }
    CHECK(all);
    cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(root, "added_tokens")) {
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(e, "id");
        const cJSON *content = cJSON_GetObjectItemCaseSensitive(e, "content");
        /* HF assigns added-token ids itself (see load_added); the id must decode back to the content */
        (void)id;
        int32_t tid = cmf_tokenizer_token_id(t, content->valuestring);
        char *dec = NULL;
        CHECK(tid >= 0 && cmf_detokenize(t, &tid, 1, 0, &dec) == CMF_OK && strcmp(dec, content->valuestring) == 0);
        free(dec);
        if (tid > max_id) max_id = tid;
    }
    CHECK(cmf_tokenizer_vocab_size(t) == max_id + 1);
    CHECK(cmf_tokenizer_token_id(t, "no-such-token") == -1);
    cJSON_Delete(root);

    /* invalid input */
    int32_t *ids = NULL;
    size_t n = 0;
    CHECK(cmf_tokenize(t, "ab\xff" "cd", 5, 0, &ids, &n) == CMF_E_ARG && ids == NULL);
    CHECK_MSG(strstr(cmf_last_error(), "byte 2") != NULL, "'%s'", cmf_last_error());
    CHECK(cmf_tokenize(t, "\xe2\x82", 2, 0, &ids, &n) == CMF_E_ARG); /* truncated character */
    CHECK(cmf_tokenize(NULL, "a", 1, 0, &ids, &n) == CMF_E_ARG);
    char *text = NULL;
    /* ids without a token (negative or past the vocabulary) are skipped, as HF's decode does */
    int32_t bad_ids[] = {-1, 1, max_id + 5}, one = 1;
    char *text1 = NULL;
    CHECK(cmf_detokenize(t, bad_ids, 3, 0, &text) == CMF_OK && cmf_detokenize(t, &one, 1, 0, &text1) == CMF_OK);
    CHECK(text && text1 && strcmp(text, text1) == 0);
    free(text), free(text1);
    cmf_detok_stream *s = NULL;
    CHECK(cmf_detok_stream_new(t, 0, &s) == CMF_OK);
    CHECK(cmf_detok_stream_push(s, max_id + 1, &text) == CMF_OK && text && text[0] == 0);
    free(text);
    cmf_detok_stream_free(s);
    /* empty input */
    CHECK(cmf_tokenize(t, "", 0, 1, &ids, &n) == CMF_OK && n == 0);
    free(ids);
    CHECK(cmf_detokenize(t, NULL, 0, 0, &text) == CMF_OK && text && text[0] == 0);
    free(text);
    cmf_tokenizer_free(t);
    free(json);
}

/* ---- concurrent encoding ----------------------------------------------------------------------------------- */

typedef struct job {
    const cmf_tokenizer *t;
    toktest_case *c;
    size_t n;
    int mismatches;
} job;

static void *encode_all(void *arg) {
    job *j = arg;
    for (int rep = 0; rep < 20; rep++)
        for (size_t i = 0; i < j->n; i++) {
            int32_t *ids = NULL;
            size_t n = 0;
            if (cmf_tokenize(j->t, j->c[i].text, j->c[i].len, 0, &ids, &n) != CMF_OK || n != j->c[i].n ||
                (n && memcmp(ids, j->c[i].ids, n * sizeof *ids) != 0))
                j->mismatches++;
            free(ids);
        }
    return NULL;
}

static void threads(void) {
    cmf_tokenizer *t = toktest_load_shared("data/tokenizers/llama3/tokenizer.json");
    if (!t) return;
    toktest_case *c;
    size_t n = toktest_read_vectors("data/tokenizer-vectors/ggml-vocab-llama-bpe.gguf", &c);
    job jobs[4];
    pthread_t th[4];
    for (int i = 0; i < 4; i++) {
        jobs[i] = (job){t, c, n, 0};
        CHECK(pthread_create(&th[i], NULL, encode_all, &jobs[i]) == 0);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        CHECK_MSG(jobs[i].mismatches == 0, "thread %d: %d mismatches", i, jobs[i].mismatches);
    }
    toktest_free_vectors(c, n);
    cmf_tokenizer_free(t);
}

/* ---- random text: byte-level BPE without a normalizer must give decode(encode(s)) == s for any UTF-8 ------ */

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static uint32_t rnd(uint32_t n) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (uint32_t)(rng % n);
}

static size_t put_cp(char *o, uint32_t c) {
    if (c < 0x80) return o[0] = (char)c, 1;
    if (c < 0x800) return o[0] = (char)(0xC0 | c >> 6), o[1] = (char)(0x80 | (c & 0x3F)), 2;
    if (c < 0x10000)
        return o[0] = (char)(0xE0 | c >> 12), o[1] = (char)(0x80 | ((c >> 6) & 0x3F)), o[2] = (char)(0x80 | (c & 0x3F)), 3;
    o[0] = (char)(0xF0 | c >> 18), o[1] = (char)(0x80 | ((c >> 12) & 0x3F));
    o[2] = (char)(0x80 | ((c >> 6) & 0x3F)), o[3] = (char)(0x80 | (c & 0x3F));
    return 4;
}

static void random_text(void) {
    cmf_tokenizer *t = toktest_load_shared("data/tokenizers/llama3/tokenizer.json");
    if (!t) return;
    static const uint32_t pool[] = {' ', ' ', ' ', '\n', '\t', '\r', 'a', 'Z', '7', '\'', '!', '<', '|', '>', 0xA0, 0x85,
                                    0x301, 0x2028, 0x3000, 0x4E2D, 0x6587, 0xAC00, 0x1F600, 0x1F44D, 0x1F3FD, 0x200D,
                                    0x10FFFF, 0xFFFD, 0x0627, 0x05D0, 0x0E01, 0x1780};
    static const char *frags[] = {"<|begin_of_text|>", "<|eot_id|>", "'s", "'LL", "    ", "\r\n", "1234567"};
    char buf[512];
    int bad = 0;
    for (int it = 0; it < 400; it++) {
        size_t n = 0, want = 1 + rnd(120);
        while (n < want) {
            if (rnd(8) == 0) {
                const char *f = frags[rnd(sizeof frags / sizeof frags[0])];
                memcpy(buf + n, f, strlen(f)), n += strlen(f);
            } else {
                n += put_cp(buf + n, pool[rnd(sizeof pool / sizeof pool[0])]);
            }
        }
        int32_t *ids = NULL;
        size_t k = 0;
        char *dec = NULL;
        if (cmf_tokenize(t, buf, n, 0, &ids, &k) != CMF_OK || cmf_detokenize(t, ids, k, 0, &dec) != CMF_OK ||
            strlen(dec) != n || memcmp(dec, buf, n) != 0) {
            if (bad++ < 3) CHECK_MSG(0, "random text %d: round trip failed: %s", it, cmf_last_error());
        }
        if (it % 20 == 0) toktest_check_stream(t, "random text", ids, k, 0);
        free(ids);
        free(dec);
    }
    CHECK_MSG(bad == 0, "%d of 400 random texts did not round-trip", bad);
    cmf_tokenizer_free(t);
}

static uint32_t rnd(uint32_t n);

/* The byte-level table against GPT-2's bytes_to_unicode definition (printable Latin-1 bytes keep their code point,
 * the others get U+0100, U+0101, ... in byte order), and its inverse. */
static void byte_table(void) {
    int n = 0;
    for (int b = 0; b < 256; b++) {
        int printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
        uint32_t want = printable ? (uint32_t)b : 0x100u + (uint32_t)n++, cp = 0;
        const char *u = tok_byte_to_utf8[b];
        CHECK_MSG(tok_utf8_decode(u, strlen(u), &cp) == (int)strlen(u) && cp == want, "byte %d", b);
        CHECK_MSG(tok_unicode_to_byte(want) == b, "inverse of U+%04X", want);
    }
    CHECK(tok_unicode_to_byte(0x144) == -1 && tok_unicode_to_byte(0xAD) == -1 && tok_unicode_to_byte(' ') == -1);
}

/* Random byte mutations of a small tokenizer.json: loading returns OK or an error with a message, never crashes
 * (run under ASan/UBSan in CI); a mutant that loads must still encode and decode. */
static void mutations(void) {
    size_t len;
    char *json = read_data("synth_bert.tokenizer.json", &len);
    if (!json) return;
    char *m = malloc(len);
    static const char pokes[] = "{}[]\":,0-9eE.\\ntfa \xff\xc3";
    int loaded = 0;
    for (int it = 0; it < 300; it++) {
        memcpy(m, json, len);
        for (int k = 0, nk = 1 + (int)rnd(4); k < nk; k++) m[rnd((uint32_t)len)] = pokes[rnd(sizeof pokes - 1)];
        cmf_tokenizer *t = NULL;
        cmf_status st = cmf_tokenizer_load(m, len, &t);
        if (st != CMF_OK) {
            CHECK_MSG(t == NULL && cmf_last_error()[0] != 0, "mutant %d: status %d without a message", it, st);
            continue;
        }
        loaded++;
        int32_t *ids = NULL;
        size_t n = 0;
        char *text = NULL;
        if (cmf_tokenize(t, "Hello, unaffable [MASK] world!", 30, 1, &ids, &n) == CMF_OK) {
            cmf_detokenize(t, ids, n, 0, &text); /* may fail on a mutated vocabulary, but must not crash */
            free(text);
        }
        free(ids);
        cmf_tokenizer_free(t);
    }
    fprintf(stderr, "mutations: %d of 300 mutants still loaded\n", loaded);
    free(m);
    free(json);
}

/* tok_strmap keeps keys in one pool that moves as it grows: every key must still be found with its value, each
 * entry's key must read back byte for byte (NULs included), and an overwrite must not add an entry. */
static void strmap_pool(void) {
    tok_strmap m = {0};
    CHECK(tok_strmap_reserve(&m, 10, 10) == 0); /* far too small: the slots, entries and pool all grow */
    enum { N = 20000 };
    char key[32];
    int ok = 1;
    for (int i = 0; i < N; i++) {
        int len = snprintf(key, sizeof key, "k%d", i * 7919);
        key[1] = (char)(i % 3 == 0 ? 0 : key[1]); /* a NUL inside one key in three */
        long e = tok_strmap_put(&m, key, (size_t)len, i);
        if (e != i) ok = 0;
    }
    CHECK(ok && m.n == N);
    for (int i = 0; i < N && ok; i++) {
        int len = snprintf(key, sizeof key, "k%d", i * 7919);
        key[1] = (char)(i % 3 == 0 ? 0 : key[1]);
        if (tok_strmap_get(&m, key, (size_t)len) != i) ok = 0;
        if (m.e[i].len != (uint32_t)len || memcmp(tok_strmap_key(&m, (size_t)i), key, (size_t)len) != 0) ok = 0;
        if (tok_strmap_key(&m, (size_t)i)[len] != 0) ok = 0;
    }
    CHECK_MSG(ok, "a key lost or changed after the pool grew");
    CHECK(tok_strmap_get(&m, "k", 1) == -1 && tok_strmap_get(&m, "", 0) == -1);
    CHECK(tok_strmap_put(&m, "k7919", 5, -5) == 1 && m.n == N && tok_strmap_get(&m, "k7919", 5) == -5);
    CHECK(tok_strmap_put(&m, "", 0, 42) == N && tok_strmap_get(&m, "", 0) == 42);
    tok_strmap_free(&m);
    CHECK(m.n == 0 && tok_strmap_get(&m, "k7919", 5) == -1);
}

/* cmf_tokenizer_load_file parses a regular file from a mapping: the same tokenizer as cmf_tokenizer_load of the
 * file's bytes (vocabulary size, every vocab entry's id and decoded string, ids of a text). */
static void load_file_mapped(void) {
    const char *path = shared_path("data/tokenizers/mistral/tokenizer.json");
    size_t len = 0;
    char *json = NULL;
    CHECK_MSG(cmf_read_file(path, &json, &len) == CMF_OK, "%s", cmf_last_error());
    cmf_tokenizer *a = NULL, *b = NULL;
    CHECK_MSG(cmf_tokenizer_load_file(path, &a) == CMF_OK, "%s", cmf_last_error());
    CHECK(cmf_tokenizer_load(json, len, &b) == CMF_OK);
    CHECK(cmf_tokenizer_vocab_size(a) == cmf_tokenizer_vocab_size(b) && cmf_tokenizer_vocab_size(a) == 32000);
    int same = 1;
    for (int32_t id = 0; id < cmf_tokenizer_vocab_size(a) && same; id++) {
        char *da = NULL, *db = NULL;
        if (cmf_detokenize(a, &id, 1, 0, &da) != CMF_OK || cmf_detokenize(b, &id, 1, 0, &db) != CMF_OK ||
            strcmp(da, db) != 0)
            same = 0;
        free(da), free(db);
        size_t len_a = 0;
        const char *tok = tok_model_token(a->model, id, &len_a);
        if (!tok || cmf_tokenizer_token_id(a, tok) != cmf_tokenizer_token_id(b, tok)) same = 0;
    }
    CHECK_MSG(same, "the mapped and the in-memory load differ");
    const char *text = "Loading from a mapping: \xc3\xa7" "a va, \xe4\xb8\xad\xe6\x96\x87 123";
    int32_t *ia = NULL, *ib = NULL;
    size_t na = 0, nb = 0;
    CHECK(cmf_tokenize(a, text, strlen(text), 1, &ia, &na) == CMF_OK);
    CHECK(cmf_tokenize(b, text, strlen(text), 1, &ib, &nb) == CMF_OK);
    CHECK(na == nb && na > 10 && memcmp(ia, ib, na * sizeof *ia) == 0);
    free(ia), free(ib);
    cmf_tokenizer_free(a);
    cmf_tokenizer_free(b);
    free(json);
    CHECK(cmf_tokenizer_load_file(TOK_TEST_DATA, &a) == CMF_E_IO && a == NULL); /* a directory: read, not mapped */
}

int main(void) {
    strmap_pool();
    load_file_mapped();
    byte_table();
    mutations();
    errors();
    threads();
    random_text();
    CMF_TEST_END();
}
