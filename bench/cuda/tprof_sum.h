/* tprof_sum.h — gpu_bench's printout of one decode step's kernel timeline (tprof_sum.c). */
#ifndef CMF_BENCH_TPROF_SUM_H
#define CMF_BENCH_TPROF_SUM_H

#include <stdint.h>

#include "backend/cuda/cuda_ops.h"

/* Prints the n records r (reordered in place) as "TPROF" lines under label; 0, or -1 without memory. */
int tprof_print(cmf_cuda_tprec *r, int64_t n, const char *label);

#endif
