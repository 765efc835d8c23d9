/* kerntest.h — helpers shared by the kernel tests of tests/kernels (also built by the arm64 cross build,
 * cmake/kernels): a seeded xorshift generator, random weight payloads of any CMF dtype, and 2-D weight views. */
#ifndef CMF_TEST_KERNTEST_H
#define CMF_TEST_KERNTEST_H

#include <stdint.h>

#include "backend/cpu/ops.h"
#include "format/format.h"

/* The generator (xorshift64, Marsaglia 2003); one state per test program. kt_seed sets it (nonzero). */
void kt_seed(uint64_t seed);
uint32_t kt_rnd(void);
/* Uniform in [-1, 1). */
float kt_frand(void);

/* Random weights of dtype for rows x cols, malloc'd, *nbytes set: values frand * (1 + i % 7) encoded by
 * cmf_quantize when src/quant has an encoder for the dtype, else random bytes with sane q4tp/q2tp ladder
 * parameters (lo in [-8, -4], step in [0, 0.25]; CMF_FORMAT.md §2.6-2.7). NULL when the dtype has no 2-D size. */
uint8_t *kt_payload(int dtype, int64_t rows, int64_t cols, uint64_t *nbytes);

/* A 2-D cmf_tensor named "test.weight" over data (not copied). */
cmf_tensor kt_tensor(int dtype, int64_t rows, int64_t cols, const uint8_t *data, uint64_t nbytes);
/* cmf_weight_view of kt_tensor(...) into *w; 1 on success, 0 on error (cmf_last_error has the message). */
int kt_view(int dtype, int64_t rows, int64_t cols, const uint8_t *data, uint64_t nbytes, cmf_weight *w);

#endif
