/* test_hf_refs.c — our encoder/decoder against reference outputs of Hugging Face tokenizers (the Rust library
 * through its official Node binding, npm `tokenizers`; tests/tokenizer/data/hf_refs_*.json, written by
 * scripts/tokenizer/make_refs.mjs) for: the qwen3, llama3 and mistral tokenizer.json files; variants of them
 * (GPT-2 ByteLevel with use_regex, Metaspace prepend_scheme "first"); the tokenizer.json inside the reference's
 * tiny-F16.cmf; small synthetic files (WordPiece/BERT, with truncation and padding, Unigram/Metaspace, BPE with unk/fuse_unk and the simple
 * pre-tokenizers, added tokens with lstrip/rstrip/single_word, every Split behaviour and invert).
 * Checked per string: ids without and with special tokens, decode, decode skipping special tokens, and streaming
 * decode == full decode with valid UTF-8 chunks; and per file, decode of ids with one that has no token. */
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "testutil.h"
#include "toktest.h"
#include "util/fileio.h"

#ifndef TOK_TEST_DATA
#define TOK_TEST_DATA "tests/tokenizer/data"
#endif

static int32_t *json_ids(const cJSON *a, size_t *n) {
    *n = (size_t)cJSON_GetArraySize(a);
    int32_t *v = malloc((*n + 1) * sizeof *v);
    size_t i = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, a) v[i++] = (int32_t)e->valuedouble;
    return v;
}

static void check_decode(const cmf_tokenizer *t, const char *label, const int32_t *ids, size_t n, int skip,
                         const char *want) {
    char *got = NULL;
    cmf_status st = cmf_detokenize(t, ids, n, skip, &got);
    CHECK_MSG(st == CMF_OK, "%s: detokenize: %s", label, cmf_last_error());
    CHECK_MSG(got && strcmp(got, want) == 0, "%s: decode(skip=%d) '%s' != '%s'", label, skip, got ? got : "", want);
    free(got);
}

static void run(const char *name) {
    char path[512], rel[128];
    snprintf(path, sizeof path, "%s/hf_refs_%s.json", TOK_TEST_DATA, name);
    char *json;
    size_t len;
    if (cmf_read_file(path, &json, &len) != CMF_OK) {
        CHECK_MSG(0, "%s", cmf_last_error());
        return;
    }
    cJSON *doc = cJSON_ParseWithLength(json, len);
    free(json);
    CHECK_MSG(doc != NULL, "%s: bad JSON", path);
    const cJSON *tokrel = cJSON_GetObjectItemCaseSensitive(doc, "tokenizer");
    cmf_tokenizer *t = NULL;
    if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(doc, "tokenizer_in_data_dir"))) {
        /* a synthetic tokenizer.json written next to the references */
        snprintf(path, sizeof path, "%s/%s", TOK_TEST_DATA, cJSON_IsString(tokrel) ? tokrel->valuestring : "?");
        if (cmf_read_file(path, &json, &len) == CMF_OK) {
            CHECK_MSG(cmf_tokenizer_load(json, len, &t) == CMF_OK, "load %s: %s", path, cmf_last_error());
            free(json);
        } else {
            CHECK_MSG(0, "%s", cmf_last_error());
        }
    } else if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(doc, "tokenizer_in_cmf_vocab"))) {
        /* the vocab section of a real CMF file: vocab_off / vocab_len are u64 at 0x50 / 0x58 (CMF_FORMAT.md §1.2) */
        snprintf(rel, sizeof rel, "data/%s", cJSON_IsString(tokrel) ? tokrel->valuestring : "?");
        if (cmf_read_file(shared_path(rel), &json, &len) == CMF_OK && len >= 128) {
            uint64_t off, vl;
            memcpy(&off, json + 0x50, 8), memcpy(&vl, json + 0x58, 8);
            CHECK_MSG(vl > 0 && off <= len && vl <= len - off, "%s: bad vocab section", rel);
            if (vl > 0 && off <= len && vl <= len - off)
                CHECK_MSG(cmf_tokenizer_load(json + off, (size_t)vl, &t) == CMF_OK, "load: %s", cmf_last_error());
            free(json);
        } else {
            CHECK_MSG(0, "%s: %s", rel, cmf_last_error());
        }
    } else if (cJSON_IsObject(cJSON_GetObjectItemCaseSensitive(doc, "override"))) {
        /* a real tokenizer.json with some top-level components replaced, as the generator did */
        snprintf(rel, sizeof rel, "data/tokenizers/%s", cJSON_IsString(tokrel) ? tokrel->valuestring : "?");
        if (cmf_read_file(shared_path(rel), &json, &len) == CMF_OK) {
            cJSON *tj = cJSON_ParseWithLength(json, len);
            free(json);
            const cJSON *o;
            cJSON_ArrayForEach(o, cJSON_GetObjectItemCaseSensitive(doc, "override"))
                cJSON_ReplaceItemInObjectCaseSensitive(tj, o->string, cJSON_Duplicate(o, 1));
            char *txt = cJSON_PrintUnformatted(tj);
            CHECK_MSG(cmf_tokenizer_load(txt, strlen(txt), &t) == CMF_OK, "load %s: %s", rel, cmf_last_error());
            free(txt);
            cJSON_Delete(tj);
        } else {
            CHECK_MSG(0, "%s", cmf_last_error());
        }
    } else {
        snprintf(rel, sizeof rel, "data/tokenizers/%s", cJSON_IsString(tokrel) ? tokrel->valuestring : "?");
        t = toktest_load_shared(rel);
    }
    const cJSON *cases = cJSON_GetObjectItemCaseSensitive(doc, "cases");
    CHECK_MSG(cJSON_GetArraySize(cases) >= 16, "%s: too few cases", path);
    size_t i = 0, pass = 0;
    const cJSON *c;
    cJSON_ArrayForEach(c, cases) {
        if (!t) break;
        char label[96];
        snprintf(label, sizeof label, "%s case %zu", name, i++);
        const char *text = cJSON_GetObjectItemCaseSensitive(c, "text")->valuestring;
        size_t n1, n2;
        int32_t *ids = json_ids(cJSON_GetObjectItemCaseSensitive(c, "ids"), &n1);
        int32_t *ids_sp = json_ids(cJSON_GetObjectItemCaseSensitive(c, "ids_special"), &n2);
        int ok = toktest_check_encode(t, label, text, strlen(text), ids, n1, 0);
        ok &= toktest_check_encode(t, label, text, strlen(text), ids_sp, n2, 1);
        pass += (size_t)ok;
        check_decode(t, label, ids, n1, 0, cJSON_GetObjectItemCaseSensitive(c, "decoded")->valuestring);
        check_decode(t, label, ids_sp, n2, 1, cJSON_GetObjectItemCaseSensitive(c, "decoded_skip")->valuestring);
        toktest_check_stream(t, label, ids_sp, n2, 0);
        toktest_check_stream(t, label, ids_sp, n2, 1);
        free(ids);
        free(ids_sp);
    }
    /* ids without a token are skipped by decode */
    const cJSON *u = cJSON_GetObjectItemCaseSensitive(doc, "unknown_id_decode");
    CHECK_MSG(cJSON_IsObject(u), "%s: no unknown_id_decode", name);
    if (t && cJSON_IsObject(u)) {
        size_t nu;
        int32_t *ids = json_ids(cJSON_GetObjectItemCaseSensitive(u, "ids"), &nu);
        check_decode(t, "unknown id", ids, nu, 0, cJSON_GetObjectItemCaseSensitive(u, "decoded")->valuestring);
        free(ids);
    }
    fprintf(stderr, "%s: %zu/%zu HF reference strings encode identically\n", name, pass, i);
    cmf_tokenizer_free(t);
    cJSON_Delete(doc);
}

int main(void) {
    run("qwen3");
    run("llama3");
    run("mistral");
    run("qwen3_gpt2");
    run("mistral_metaspace");
    run("cmf_tiny");
    run("synth_bert");
    run("synth_bert_trunc");
    run("synth_bert_trunc_left");
    run("synth_unigram");
    run("synth_bpe_misc");
    run("synth_split_prev");
    run("synth_split_next");
    run("synth_split_contig");
    run("synth_split_invert");
    CMF_TEST_END();
}
