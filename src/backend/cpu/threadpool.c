/* threadpool.c — persistent workers woken per operation with a generation counter. A worker spins briefly on
 * the counter before sleeping on the condition variable, so back-to-back matmuls of one token do not pay the
 * wake-up latency of a futex each time. */
#include "backend/cpu/threadpool.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <unistd.h>

#include "util/error.h"

struct cmf_pool {
    int n;
    pthread_t *threads;
    pthread_mutex_t mu;
    pthread_cond_t wake, done;
    atomic_uint gen;     /* bumped for each operation */
    atomic_int pending;  /* workers still running the current operation */
    int stop;
    cmf_task_fn fn;
    void *ctx;
    void **scratch;      /* per-thread scratch buffers */
    size_t *scratch_len;
    void *shared;        /* one buffer for all threads (e.g. a matmul's quantized activations) */
    size_t shared_len;
};

typedef struct {
    cmf_pool *p;
    int ith;
} worker_arg;

/* Spins on the counter before sleeping (a few hundred microseconds on the 2-CPU EPYC VM). 20000 let the worker fall
 * asleep between the operations of a 16-token serve step (its serial parts between fan-outs are longer than the
 * 1-token ones): tests/server/bench_batch random-q4_0 n = 16, 2 threads, load 0.7-0.9, same run: 20000 -> 10.7-11.3
 * ms per forward, 200000 -> 9.7-9.8 (n = 1 unchanged, 3.1-3.2 ms). */
enum { SPIN_ITERS = 200000 };

static void *worker(void *arg) {
    worker_arg *wa = arg;
    cmf_pool *p = wa->p;
    int ith = wa->ith;
    free(wa);
    unsigned seen = 0;
    for (;;) {
        unsigned g;
        int spins = 0;
        while ((g = atomic_load_explicit(&p->gen, memory_order_acquire)) == seen && spins < SPIN_ITERS) spins++;
        if (g == seen) {
            pthread_mutex_lock(&p->mu);
            while ((g = atomic_load(&p->gen)) == seen && !p->stop) pthread_cond_wait(&p->wake, &p->mu);
            int stop = p->stop;
            pthread_mutex_unlock(&p->mu);
            if (stop) return NULL;
        }
        seen = g;
        if (p->stop) return NULL;
        p->fn(p->ctx, ith, p->n);
        if (atomic_fetch_sub_explicit(&p->pending, 1, memory_order_acq_rel) == 1) {
            pthread_mutex_lock(&p->mu);
            pthread_cond_signal(&p->done);
            pthread_mutex_unlock(&p->mu);
        }
    }
}

cmf_status cmf_pool_new(int n_threads, cmf_pool **out) {
    *out = NULL;
    if (n_threads <= 0) {
        long c = sysconf(_SC_NPROCESSORS_ONLN);
        n_threads = c > 0 ? (int)c : 1;
    }
    if (n_threads > 256) n_threads = 256;
    cmf_pool *p = calloc(1, sizeof *p);
    if (!p) return cmf_err(CMF_E_NOMEM, "thread pool: out of memory");
    p->n = n_threads;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->wake, NULL);
    pthread_cond_init(&p->done, NULL);
    atomic_init(&p->gen, 0);
    atomic_init(&p->pending, 0);
    p->threads = calloc((size_t)n_threads, sizeof *p->threads);
    p->scratch = calloc((size_t)n_threads, sizeof *p->scratch);
    p->scratch_len = calloc((size_t)n_threads, sizeof *p->scratch_len);
    if (!p->threads || !p->scratch || !p->scratch_len) {
        free(p->threads);
        free(p->scratch);
        free(p->scratch_len);
        free(p);
        return cmf_err(CMF_E_NOMEM, "thread pool: out of memory");
    }
    for (int i = 1; i < n_threads; i++) {
        worker_arg *wa = malloc(sizeof *wa);
        if (!wa || pthread_create(&p->threads[i], NULL, worker, wa ? (wa->p = p, wa->ith = i, wa) : NULL) != 0) {
            free(wa);
            p->n = i; /* workers 1..i-1 exist */
            cmf_pool_free(p);
            return cmf_err(CMF_E_NOMEM, "thread pool: cannot start thread %d", i);
        }
    }
    *out = p;
    return CMF_OK;
}

void cmf_pool_free(cmf_pool *p) {
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    p->stop = 1;
    atomic_fetch_add(&p->gen, 1);
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mu);
    for (int i = 1; i < p->n; i++) pthread_join(p->threads[i], NULL);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->wake);
    pthread_cond_destroy(&p->done);
    for (int i = 0; i < p->n; i++) free(p->scratch[i]);
    free(p->shared);
    free(p->scratch);
    free(p->scratch_len);
    free(p->threads);
    free(p);
}

void *cmf_pool_scratch(cmf_pool *p, int ith, size_t bytes) {
    if (!p || ith < 0 || ith >= p->n) return NULL;
    if (p->scratch_len[ith] < bytes) {
        size_t n = (bytes + 63) & ~(size_t)63;
        void *m = NULL;
        if (posix_memalign(&m, 64, n) != 0) return NULL;
        free(p->scratch[ith]);
        p->scratch[ith] = m;
        p->scratch_len[ith] = n;
    }
    return p->scratch[ith];
}

void *cmf_pool_shared(cmf_pool *p, size_t bytes) {
    if (!p) return NULL;
    if (p->shared_len < bytes) {
        size_t n = (bytes + 63) & ~(size_t)63;
        void *m = NULL;
        if (posix_memalign(&m, 64, n) != 0) return NULL;
        free(p->shared);
        p->shared = m;
        p->shared_len = n;
    }
    return p->shared;
}

int cmf_pool_size(const cmf_pool *p) { return p ? p->n : 1; }

void cmf_pool_run(cmf_pool *p, cmf_task_fn fn, void *ctx) {
    if (!p || p->n == 1) {
        fn(ctx, 0, 1);
        return;
    }
    p->fn = fn;
    p->ctx = ctx;
    atomic_store(&p->pending, p->n - 1);
    pthread_mutex_lock(&p->mu);
    atomic_fetch_add_explicit(&p->gen, 1, memory_order_release);
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mu);
    fn(ctx, 0, p->n);
    int spins = 0;
    while (atomic_load_explicit(&p->pending, memory_order_acquire) > 0 && spins < SPIN_ITERS) spins++;
    if (atomic_load(&p->pending) > 0) {
        pthread_mutex_lock(&p->mu);
        while (atomic_load(&p->pending) > 0) pthread_cond_wait(&p->done, &p->mu);
        pthread_mutex_unlock(&p->mu);
    }
}

cmf_status cmf_pool_reserve(cmf_pool *p, size_t bytes) {
    for (int i = 0; i < p->n; i++)
        if (!cmf_pool_scratch(p, i, bytes)) return cmf_err(CMF_E_NOMEM, "thread pool: cannot reserve %zu bytes", bytes);
    return CMF_OK;
}
