/* test_corpus.c — the tokenizer conformance corpus (tests/tokenizer/corpus/corpus.txt: one case per line, each a
 * JSON string literal; many scripts, emoji sequences, code, whitespace runs, numbers, text spelling special tokens,
 * very long words) against Hugging Face tokenizers' own outputs (refs_<name>.json, written by
 * scripts/tokenizer/make_corpus_refs.mjs with npm tokenizers@0.23.2) for the real qwen3, llama3 and mistral
 * tokenizer.json files of the shared data, for GPT-2 (tests/tokenizer/gpt2/, committed) and for gemma3 (its
 * tokenizer.json is not committed — Gemma Terms of Use — so that part is skipped unless
 * tests/tokenizer/corpus/gemma3/tokenizer.json or $CMF_GEMMA3_TOKENIZER exists).
 *
 * Checked per line and tokenizer, all by exact equality: encode without and with special tokens; decode(ids)
 * (skip_special=0) == HF's decode, and == the input itself wherever HF round-trips; decode(ids_special, skip=1)
 * == HF's; streaming decode == full decode with valid UTF-8 chunks. */
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "testutil.h"
#include "tokenizer/tokenizer.h"
#include "toktest.h"
#include "util/fileio.h"

#ifndef TOK_CORPUS_DIR
#define TOK_CORPUS_DIR "tests/tokenizer/corpus"
#endif

typedef struct corpus {
    char **text; /* decoded JSON strings, NUL-terminated (the corpus has no NUL characters) */
    size_t n;
} corpus;

static int read_corpus(corpus *c) {
    char path[1024], *buf;
    size_t len;
    c->text = NULL, c->n = 0;
    snprintf(path, sizeof path, "%s/corpus.txt", TOK_CORPUS_DIR);
    if (cmf_read_file(path, &buf, &len) != CMF_OK) {
        CHECK_MSG(0, "%s", cmf_last_error());
        return 0;
    }
    size_t cap = 0, line = 0;
    for (size_t i = 0; i < len;) {
        size_t e = i;
        while (e < len && buf[e] != '\n') e++;
        line++;
        if (e > i) {
            cJSON *s = cJSON_ParseWithLength(buf + i, e - i);
            CHECK_MSG(cJSON_IsString(s), "corpus.txt:%zu: not a JSON string", line);
            if (cJSON_IsString(s)) {
                if (c->n == cap) c->text = realloc(c->text, (cap = cap ? 2 * cap : 512) * sizeof *c->text);
                c->text[c->n++] = strdup(s->valuestring);
            }
            cJSON_Delete(s);
        }
        i = e + 1;
    }
    free(buf);
    return c->n > 0;
}

static int32_t *json_ids(const cJSON *a, size_t *n) {
    *n = (size_t)cJSON_GetArraySize(a);
    int32_t *v = malloc((*n + 1) * sizeof *v);
    size_t i = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, a) v[i++] = (int32_t)e->valuedouble;
    return v;
}

static const char *jstr(const cJSON *o, const char *k) {
    const cJSON *s = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsString(s) ? s->valuestring : NULL;
}

/* Decodes ids and compares with want; returns 1 when equal. */
static int check_decode(const cmf_tokenizer *t, const char *label, const int32_t *ids, size_t n, int skip,
                        const char *want) {
    char *got = NULL;
    cmf_status st = cmf_detokenize(t, ids, n, skip, &got);
    CHECK_MSG(st == CMF_OK, "%s: detokenize: %s", label, cmf_last_error());
    int ok = got && want && strcmp(got, want) == 0;
    CHECK_MSG(ok, "%s: decode(skip=%d) '%s' != '%s'", label, skip, got ? got : "(null)", want ? want : "(null)");
    free(got);
    return ok;
}

static void run(const char *name, const corpus *c) {
    char path[1024], label[160];
    snprintf(path, sizeof path, "%s/refs_%s.json", TOK_CORPUS_DIR, name);
    char *json;
    size_t len;
    if (cmf_read_file(path, &json, &len) != CMF_OK) {
        CHECK_MSG(0, "%s", cmf_last_error());
        return;
    }
    cJSON *doc = cJSON_ParseWithLength(json, len);
    free(json);
    CHECK_MSG(doc != NULL, "%s: bad JSON", path);
    const char *rel = jstr(doc, "tokenizer");
    const cJSON *cases = cJSON_GetObjectItemCaseSensitive(doc, "cases");
    CHECK_MSG(rel && cJSON_IsArray(cases), "%s: no tokenizer/cases", path);
    if (!rel || !cJSON_IsArray(cases)) {
        cJSON_Delete(doc);
        return;
    }
    cmf_tokenizer *t = NULL;
    if (strcmp(name, "gemma3") == 0) {
        /* not committed (Gemma Terms of Use): skip when absent */
        const char *env = getenv("CMF_GEMMA3_TOKENIZER");
        if (env && *env)
            snprintf(path, sizeof path, "%s", env);
        else
            snprintf(path, sizeof path, "%s/%s", TOK_CORPUS_DIR, rel);
        FILE *f = fopen(path, "rb");
        if (!f) {
            printf("gemma3: %s not present, skipped (scripts/tokenizer/make_corpus_refs.mjs --install-gemma3)\n",
                   path);
            cJSON_Delete(doc);
            return;
        }
        fclose(f);
        CHECK_MSG(cmf_tokenizer_load_file(path, &t) == CMF_OK, "load %s: %s", path, cmf_last_error());
    } else if (strncmp(rel, "../", 3) == 0) { /* committed in the repository (gpt2) */
        snprintf(path, sizeof path, "%s/%s", TOK_CORPUS_DIR, rel);
        CHECK_MSG(cmf_tokenizer_load_file(path, &t) == CMF_OK, "load %s: %s", path, cmf_last_error());
    } else {
        snprintf(path, sizeof path, "data/%s", rel);
        t = toktest_load_shared(path);
    }
    if (!t) {
        cJSON_Delete(doc);
        return;
    }
    CHECK_MSG((size_t)cJSON_GetArraySize(cases) == c->n, "%s: %d reference cases for %zu corpus lines (regenerate)",
              name, cJSON_GetArraySize(cases), c->n);
    size_t i = 0, enc_ok = 0, dec_ok = 0, rt = 0;
    const cJSON *cs;
    cJSON_ArrayForEach(cs, cases) {
        if (i >= c->n) break;
        const char *text = c->text[i];
        size_t n, ns;
        int32_t *ids = json_ids(cJSON_GetObjectItemCaseSensitive(cs, "ids"), &n);
        int32_t *ids_sp = json_ids(cJSON_GetObjectItemCaseSensitive(cs, "ids_special"), &ns);
        snprintf(label, sizeof label, "%s line %zu", name, i + 1);
        int ok = toktest_check_encode(t, label, text, strlen(text), ids, n, 0);
        ok &= toktest_check_encode(t, label, text, strlen(text), ids_sp, ns, 1);
        enc_ok += (size_t)ok;
        const char *decoded = jstr(cs, "decoded");
        ok = check_decode(t, label, ids, n, 0, decoded);
        ok &= check_decode(t, label, ids_sp, ns, 1, jstr(cs, "decoded_skip"));
        dec_ok += (size_t)ok;
        if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(cs, "roundtrip"))) {
            /* HF gives the input back: so must we (decode(encode(x)) == x) */
            CHECK_MSG(decoded && strcmp(decoded, text) == 0, "%s: reference marked round trip but differs", label);
            rt++;
        }
        toktest_check_stream(t, label, ids, n, 0);
        free(ids);
        free(ids_sp);
        i++;
    }
    printf("%s: %zu lines, encode equal %zu, decode equal %zu, round trips %zu\n", name, i, enc_ok, dec_ok, rt);
    cmf_tokenizer_free(t);
    cJSON_Delete(doc);
}

int main(void) {
    corpus c;
    if (read_corpus(&c)) {
        CHECK_MSG(c.n >= 300, "corpus has %zu lines", c.n);
        run("qwen3", &c);
        run("llama3", &c);
        run("mistral", &c);
        run("gpt2", &c);
        run("gemma3", &c);
    }
    for (size_t i = 0; i < c.n; i++) free(c.text[i]);
    free(c.text);
    CMF_TEST_END();
}
