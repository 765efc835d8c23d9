/* testutil.h — tiny assertion helpers for the ctest programs. A test prints one line per failed check and
 * returns non-zero from main through CMF_TEST_END. */
#ifndef CMF_TESTUTIL_H
#define CMF_TESTUTIL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

extern int cmf_test_failures;

#define CHECK(cond)                                                                                              \
    do {                                                                                                         \
        if (!(cond)) {                                                                                           \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond);                          \
            cmf_test_failures++;                                                                                 \
        }                                                                                                        \
    } while (0)

#define CHECK_MSG(cond, ...)                                                                                     \
    do {                                                                                                         \
        if (!(cond)) {                                                                                           \
            fprintf(stderr, "%s:%d: CHECK failed: %s: ", __FILE__, __LINE__, #cond);                           \
            fprintf(stderr, __VA_ARGS__);                                                                        \
            fputc('\n', stderr);                                                                                 \
            cmf_test_failures++;                                                                                 \
        }                                                                                                        \
    } while (0)

#define CMF_TEST_END()                                                                                           \
    do {                                                                                                         \
        if (cmf_test_failures) fprintf(stderr, "%d check(s) failed\n", cmf_test_failures);                     \
        return cmf_test_failures ? 1 : 0;                                                                        \
    } while (0)

/* $CMF_SHARED/<rel>: a path into the shared test data (static buffer, one at a time). */
const char *shared_path(const char *rel);
/* $CMF_TMP/<name>: a scratch path for files a test writes (static buffer, one at a time). */
const char *tmp_path(const char *name);
/* $CMF_TESTDATA/<rel>: the repository's own test data (tests/data), static buffer, one at a time. */
const char *testdata_path(const char *rel);

/* Index of the largest of n values (the first on ties): a greedy token. */
int cmf_test_argmax(const float *x, int n);
/* max|ref - x| / max|ref| over n values (max|ref - x| when ref is all zero; +inf when x has a NaN). */
float cmf_test_rel_diff(const float *ref, const float *x, size_t n);
struct cmf_safetensors;
/* The token ids stored as numbers in tensor `name` of an open safetensors file, malloc'd; *n their count. NULL when
 * the tensor is missing or unreadable. */
int32_t *cmf_test_st_ids(const struct cmf_safetensors *st, const char *name, int *n);
/* The same from $CMF_SHARED/data/hf-tiny/<hf_case>/ref.safetensors ("input_0", ...). NULL when the file or tensor
 * is missing. */
int32_t *cmf_test_hf_input_ids(const char *hf_case, const char *name, int *n);

struct cmf_model;
/* Batch-invariance reference: n_seq sessions of m (n_ctx positions each), each decoded alone one token at a time;
 * session s feeds tok(s, i, V) for i < lens[s] and ref[s] + i*V receives the logits after token i (V = the
 * model's vocabulary). Failures are CHECKs. */
void cmf_test_decode_alone(struct cmf_model *m, int n_ctx, int n_seq, const int *lens,
                           int32_t (*tok)(int s, int i, int V), float **ref);

#endif
