/* toktest.h — helpers shared by the tokenizer tests. */
#ifndef CMF_TESTS_TOKTEST_H
#define CMF_TESTS_TOKTEST_H

#include <stddef.h>
#include <stdint.h>

#include "cmf.h"

/* Loads a tokenizer.json from a path under $CMF_SHARED (NULL on failure, reported as a failed check). */
cmf_tokenizer *toktest_load_shared(const char *rel);

/* llama.cpp test-tokenizer-0 framing: strings of `.inp` separated by "\n__ggml_vocab_test__\n", one line of ids
 * per string in `.out`. */
typedef struct toktest_case {
    char *text;
    size_t len;
    int32_t *ids;
    size_t n;
} toktest_case;

/* Reads <base>.inp/.out (paths under $CMF_SHARED). Returns the number of cases (0 on failure). */
size_t toktest_read_vectors(const char *base_rel, toktest_case **cases);
void toktest_free_vectors(toktest_case *c, size_t n);

/* Checks encode(text) == ids (no special tokens); prints a diff on failure. Returns 1 when equal. */
int toktest_check_encode(const cmf_tokenizer *t, const char *label, const char *text, size_t len,
                         const int32_t *ids, size_t n, int add_special);

/* Checks that pushing ids one by one through a detok stream and flushing it yields exactly cmf_detokenize(ids)
 * (also for ids cut before the last one) and that every
 * chunk is valid UTF-8. */
void toktest_check_stream(const cmf_tokenizer *t, const char *label, const int32_t *ids, size_t n, int skip);

/* Whether s[0..n) is valid UTF-8. */
int toktest_utf8_ok(const char *s, size_t n);

#endif
