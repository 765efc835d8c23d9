/* claim.h — work items handed out in per-thread ranges for the CPU pool's dynamic tasks (implemented in
 * threadpool.c). C only: the CUDA sources include threadpool.h, not this. */
#ifndef CMF_CPU_CLAIM_H
#define CMF_CPU_CLAIM_H

#include <stdatomic.h>

/* Work items [0, n) for a cmf_pool_run_dyn task, cut into one contiguous range per thread: thread ith takes the
 * items of range ith % nr front to back, then, its range done, takes items from the back of the other ranges
 * (work stealing), so every item is taken once and, when the caller's fn returns, all are taken. Each thread so
 * reads one sequential stream of weights, which the hardware prefetcher follows. A shared counter dealt the items
 * round robin instead, and the decode kernels' software prefetch (KERN_PF_BYTES ahead) then fetched the next item,
 * another thread's: the decode products of a Qwen2.5-0.5B shape on 2 threads (matmul_bench stream, Zen 5 VM, 4
 * interleaved rounds, medians) ran q8_row 59 -> 100, q4_block 91 -> 147, q4tp 98 -> 141 tok/s (bench/RESULTS.md,
 * session 15). A range is one 64-bit word (front | back << 32) on a cache line of its own, changed by CAS. */
enum { CMF_CLAIM_MAX = 64 }; /* ranges; with more threads, threads ith and ith + 64k start in the same range */
typedef struct {
    _Alignas(64) _Atomic unsigned long long fb;
} cmf_claim_range;
typedef struct {
    int nr;
    cmf_claim_range r[CMF_CLAIM_MAX];
} cmf_claim;
/* Cuts items [0, n) (n < 2^32) into min(nth, CMF_CLAIM_MAX) ranges of equal size (+-1), before the fan-out. */
void cmf_claim_init(cmf_claim *c, long long n, int nth);
/* The next item for thread ith (its own range first, then stolen from the back of another), or -1 when none is
 * left. Thread-safe; lock-free. */
long long cmf_claim_next(cmf_claim *c, int ith);

#endif
