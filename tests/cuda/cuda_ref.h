/* cuda_ref.h — CPU references (double accumulation) and helpers for the CUDA kernel tests and the bench. */
#ifndef CMF_TESTS_CUDA_REF_H
#define CMF_TESTS_CUDA_REF_H

#include <stddef.h>
#include <stdint.h>

#include "backend/cuda/cuda_ops.h"
#include "testutil.h"

/* xorshift64* stream; uniform float in [-1, 1). */
float ref_rand(uint64_t *s);
/* ||a - b|| / ||b|| over n values (double); NaN in a gives +inf. */
double ref_rel_err(const float *a, const double *b, int64_t n);
/* y[t][r] = sum_c x[t][c] * w[r][c] in double. w: [rows][cols] decoded floats. */
void ref_matmul(const float *w, int64_t rows, int64_t cols, const float *x, int64_t n, double *y);
/* The same product with x first quantized per block of 32 columns as the int8-activation kernels do (llama.cpp's
 * Q8_0: d = absmax / 127, q = x * 127 / absmax rounded half away from zero, clamped to +-127; levels = 2 adds the
 * Q8_0 of the remainder x - d q), then exact double sums of w * sum of q * d. */
void ref_matmul_qact(const float *w, int64_t rows, int64_t cols, const float *x, int64_t n, int levels, double *y);
/* Device helpers of the kernel tests; a failing CUDA call is a failed CHECK (testutil.h) naming the call. */
#define OK(call)                                                                                                 \
    do {                                                                                                         \
        cmf_status st_ = (call);                                                                                 \
        CHECK_MSG(st_ == CMF_OK, "%s -> %d: %s", #call, (int)st_, cmf_last_error());                            \
    } while (0)
/* A device buffer of `bytes` filled with 0xff (the NaN pattern for f32 / f16), so unwritten outputs show. */
void *ref_dev_poison(size_t bytes);
/* 1 when a CUDA device is usable; else prints "SKIP: no CUDA device (why)" and returns 0 (the test then exits 77,
 * ctest's SKIP, as on CI). */
int ref_have_device(void);
/* A device copy of the host buffer h. */
void *ref_dev_from(const void *h, size_t bytes);
/* n floats uniform in [-amp, amp) from the stream *rng (malloc'd; the caller frees). */
float *ref_rand_vec(uint64_t *rng, int64_t n, float amp);
/* A random rows x cols matrix (ref_rand_vec amplitude 0.5; row r times 1 + r % row_mod when row_mod > 0, rows of
 * different magnitude) encoded as dt and uploaded (w->d_data; the caller frees it); returns the decoded floats of
 * the encoded matrix (malloc'd; the caller frees them). */
float *ref_dev_weight(uint64_t *rng, int dt, int64_t rows, int64_t cols, int row_mod, cmf_cuda_weight *w);

/* Attention reference: q [n_tok][H][D] at positions pos0.., K/V f16 cache [ctx][KV][D]; out [n_tok][H][D]. */
void ref_attention(int H, int KV, int D, float scale, float softcap, int window, const float *q,
                   const uint16_t *k, const uint16_t *v, int64_t pos0, int64_t n_tok, double *out);

#endif
