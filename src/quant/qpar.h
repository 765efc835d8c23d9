/* qpar.h — the encoders' worker threads: a tensor's independent rows / groups split in contiguous ranges. */
#ifndef CMF_QUANT_QPAR_H
#define CMF_QUANT_QPAR_H

#include <stdint.h>

#include "util/error.h"

/* One range of items [lo, hi) of an encoder; returns CMF_OK or an error status with the thread's message set
 * (cmf_err). Must write only the output bytes of its own items. */
typedef cmf_status (*cmf_qpar_fn)(void *ctx, uint64_t lo, uint64_t hi);

/* Runs fn over items [0, n) in T contiguous ranges, range k = [k*n/T, (k+1)*n/T), on T-1 new threads and the
 * caller; T = min(cmf_qpar_threads(), n, work / 256 KiB + 1) so that small tensors stay on the caller. `work`: the job's cost in
 * input bytes (times a factor for the slower encoders). Every range runs to its end or its first error; the result is
 * the error of the lowest failing range, with that range's message (so the error a sequential loop would meet first),
 * or CMF_OK. The output is the same bytes for any T (the items are independent). A range whose thread cannot be
 * started runs on the caller (same result). */
cmf_status cmf_qpar_run(uint64_t n, uint64_t work, cmf_qpar_fn fn, void *ctx);

/* The encoders' thread count: the environment variable CMF_QUANT_THREADS when it is a whole number 1..256 (more
 * than 64 runs 64), else the online CPUs (sysconf), at most 64. Read on every call. */
int cmf_qpar_threads(void);

/* 1 when CMF_QUANT_THREADS is set, not empty, and not a whole number 1..256 (cmf_qpar_threads then ignores it: the
 * command line warns, as library code cannot), else 0. */
int cmf_qpar_threads_env_bad(void);

#endif
