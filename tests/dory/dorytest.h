/* dorytest.h — helpers of the Dory tests: convert a checkpoint of tests/data/dory/ to CMF, load it, read the
 * reference logits (ref.safetensors, written by scripts/dory/make_refs.py from llama.cpp's numpy reference). */
#ifndef CMF_DORYTEST_H
#define CMF_DORYTEST_H

#include "convert/safetensors.h"
#include "model/dory.h"

typedef struct dory_fixture {
    cmf_file *file;
    cmf_dory *d;
    cmf_safetensors *ref; /* the case's ref.safetensors */
} dory_fixture;

/* Converts tests/data/dory/<name> to f32 CMF (tmp/dory_<name>.cmf), opens and loads it and opens its ref file.
 * Returns 0 on success; prints the error and returns -1 otherwise. */
int dory_fixture_open(const char *name, dory_fixture *fx);
/* The same with another target dtype for the matrices (enum cmf_dtype; vectors follow the §2.0 policy). */
int dory_fixture_open_q(const char *name, int quant, dory_fixture *fx);
void dory_fixture_close(dory_fixture *fx);

/* A reference tensor as floats (malloc'd, *n values), or NULL when absent. */
float *dory_ref_floats(const dory_fixture *fx, const char *name, size_t *n);
/* tokens_<i> as int32 (malloc'd), or NULL. */
int32_t *dory_ref_tokens(const dory_fixture *fx, int i, int *n);

/* max |a-b| over n values, and max |b| (for relative errors). */
double dory_max_abs_diff(const float *a, const float *b, size_t n, double *max_ref);
/* Runs ids through one new session of d (n_ctx, n_batch, kv_mode, max_loops) in nc calls of lens[i] tokens at
 * loops[i] loops; returns every position's logits [sum lens][vocab] (malloc'd) or NULL, the reason on stderr. */
float *dory_run_calls(const cmf_dory *d, const int32_t *ids, int n_ctx, int kv_mode, int n_batch, int max_loops,
                      const int *lens, const int *loops, int nc);

/* Runs `tokens` through a new session (64 positions, kv_mode, loops) in calls of `chunk` tokens and returns all
 * logits ([n][V], malloc'd), or NULL on error (printed). */
float *dory_run(const cmf_dory *d, const int32_t *tokens, int n, int kv_mode, int loops, int chunk);
/* The same with the session's n_batch set (sliding layers then keep a ring of window + n_batch rows). */
float *dory_run_batch(const cmf_dory *d, const int32_t *tokens, int n, int kv_mode, int loops, int chunk, int n_batch);

#endif
