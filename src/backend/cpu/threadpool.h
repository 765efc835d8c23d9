/* threadpool.h — a pool of worker threads that stay alive between operations (no create/join per matmul).
 * cmf_pool_run runs fn(ctx, ith, nth) on every thread, the caller's thread being ith = 0, and returns when all
 * are done. One caller at a time per pool (a pool belongs to one session). */
#ifndef CMF_CPU_THREADPOOL_H
#define CMF_CPU_THREADPOOL_H

#include <stddef.h>

#include "cmf.h"

typedef struct cmf_pool cmf_pool;
typedef void (*cmf_task_fn)(void *ctx, int ith, int nth);

/* Starts n_threads - 1 workers (n_threads >= 1; 0 means the number of online CPUs). Errors: CMF_E_NOMEM. */
cmf_status cmf_pool_new(int n_threads, cmf_pool **out);
/* Stops and joins the workers. NULL is allowed. */
void cmf_pool_free(cmf_pool *p);
int cmf_pool_size(const cmf_pool *p);
/* Runs fn on all threads and waits. With a NULL pool, runs fn(ctx, 0, 1) on the caller. */
void cmf_pool_run(cmf_pool *p, cmf_task_fn fn, void *ctx);
/* cmf_pool_run for a task whose threads take its work items from a shared counter until none is left (never by
 * ith): once the caller's fn(ctx, 0, nth) returns, every item has been taken, so a worker that has not started fn
 * yet is skipped (it never runs fn for this operation and never touches ctx) and only the workers already inside fn
 * are waited for. Saves the wake-up of a sleeping or preempted worker whose share the caller did. The task must not
 * need every ith to run (no per-thread outputs, no ith / nth partition). */
void cmf_pool_run_dyn(cmf_pool *p, cmf_task_fn fn, void *ctx);

/* Per-thread scratch memory owned by the pool, for use inside a task by thread ith: at least `bytes` bytes,
 * 64-byte aligned, kept between operations (grown only when a larger size is asked for). Returns NULL when
 * growing fails or the pool is NULL (callers always pass a real pool). */
void *cmf_pool_scratch(cmf_pool *p, int ith, size_t bytes);

/* One buffer shared by all threads, owned by the pool: at least `bytes` bytes, 64-byte aligned, kept between
 * operations (grown only when a larger size is asked for; the old contents are then lost). Call it from the
 * caller's thread outside cmf_pool_run, then hand the pointer to the task. NULL when growing fails or p is NULL. */
void *cmf_pool_shared(cmf_pool *p, size_t bytes);

/* Grows every thread's scratch to at least `bytes` now, so that tasks never allocate. Errors: CMF_E_NOMEM. */
cmf_status cmf_pool_reserve(cmf_pool *p, size_t bytes);

#endif
