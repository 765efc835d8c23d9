/* threadpool.c — persistent workers woken per operation with a generation counter. A worker spins briefly on
 * the counter before sleeping on the condition variable, so back-to-back matmuls of one token do not pay the
 * wake-up latency of a futex each time. The mutex and condition variables are touched only when a thread really
 * sleeps (counted in `sleepers` / `waiting`; each side publishes its flag and then reads the other's counter, both
 * sequentially consistent, so one of them always sees the other: Dekker's pattern). Each operation (generation g)
 * is claimed once per worker, by the worker itself (it runs fn) or, for cmf_pool_run_dyn, by the caller when the
 * worker has not started by the time the caller's own share is done (the worker then skips it): a preempted or
 * sleeping worker no longer holds up a fan-out whose items the caller has already taken. */
#include "backend/cpu/threadpool.h"
#include "backend/cpu/claim.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <unistd.h>

#include "util/error.h"

/* One worker's claim: the last generation it ran or the caller took from it; a cache line of its own. */
typedef struct {
    _Alignas(64) atomic_uint gen;
} claim_slot;

struct cmf_pool {
    int n;
    pthread_t *threads;
    pthread_mutex_t mu;
    pthread_cond_t wake, done;
    _Alignas(64) atomic_uint gen; /* bumped for each operation (workers spin on this line) */
    _Alignas(64) atomic_int pending; /* workers still to finish the current operation */
    atomic_int sleepers; /* workers asleep (or going to sleep) on `wake` */
    atomic_int waiting;  /* 1 while the caller sleeps on `done` */
    claim_slot *claim;   /* [n]: per worker (index 0 unused) */
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
            atomic_fetch_add(&p->sleepers, 1); /* then read gen: the caller bumps gen, then reads sleepers */
            while ((g = atomic_load(&p->gen)) == seen && !p->stop) pthread_cond_wait(&p->wake, &p->mu);
            atomic_fetch_sub(&p->sleepers, 1);
            int stop = p->stop;
            pthread_mutex_unlock(&p->mu);
            if (stop) return NULL;
        }
        seen = g;
        if (p->stop) return NULL;
        /* every earlier generation was claimed (the caller returns only then), so the slot holds g - 1 unless the
         * caller took g already (cmf_pool_run_dyn: then fn and ctx may belong to a later operation: not touched) */
        unsigned expect = g - 1;
        if (!atomic_compare_exchange_strong(&p->claim[ith].gen, &expect, g)) continue;
        p->fn(p->ctx, ith, p->n);
        if (atomic_fetch_sub(&p->pending, 1) == 1 && atomic_load(&p->waiting)) {
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
    if (posix_memalign((void **)&p->claim, 64, (size_t)n_threads * sizeof *p->claim) != 0) p->claim = NULL;
    for (int i = 0; p->claim && i < n_threads; i++) atomic_init(&p->claim[i].gen, 0);
    atomic_init(&p->sleepers, 0);
    atomic_init(&p->waiting, 0);
    if (!p->threads || !p->scratch || !p->scratch_len || !p->claim) {
        free(p->claim);
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
    free(p->claim);
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

static void pool_run(cmf_pool *p, cmf_task_fn fn, void *ctx, int dyn) {
    if (!p || p->n == 1) {
        fn(ctx, 0, 1);
        return;
    }
    p->fn = fn;
    p->ctx = ctx;
    atomic_store(&p->pending, p->n - 1);
    const unsigned g = atomic_fetch_add(&p->gen, 1) + 1; /* then read sleepers (worker: sleepers, then gen) */
    if (atomic_load(&p->sleepers) > 0) {
        pthread_mutex_lock(&p->mu);
        pthread_cond_broadcast(&p->wake);
        pthread_mutex_unlock(&p->mu);
    }
    fn(ctx, 0, p->n);
    if (dyn) { /* the items are all taken: a worker that has not started yet skips this operation */
        int taken = 0;
        for (int i = 1; i < p->n; i++) {
            unsigned expect = g - 1;
            taken += atomic_compare_exchange_strong(&p->claim[i].gen, &expect, g);
        }
        if (taken) atomic_fetch_sub(&p->pending, taken);
    }
    int spins = 0;
    while (atomic_load_explicit(&p->pending, memory_order_acquire) > 0 && spins < SPIN_ITERS) spins++;
    if (atomic_load(&p->pending) > 0) {
        pthread_mutex_lock(&p->mu);
        atomic_store(&p->waiting, 1); /* then read pending (worker: pending, then waiting) */
        while (atomic_load(&p->pending) > 0) pthread_cond_wait(&p->done, &p->mu);
        atomic_store(&p->waiting, 0);
        pthread_mutex_unlock(&p->mu);
    }
}

void cmf_pool_run(cmf_pool *p, cmf_task_fn fn, void *ctx) { pool_run(p, fn, ctx, 0); }

void cmf_pool_run_dyn(cmf_pool *p, cmf_task_fn fn, void *ctx) { pool_run(p, fn, ctx, 1); }

cmf_status cmf_pool_reserve(cmf_pool *p, size_t bytes) {
    for (int i = 0; i < p->n; i++)
        if (!cmf_pool_scratch(p, i, bytes)) return cmf_err(CMF_E_NOMEM, "thread pool: cannot reserve %zu bytes", bytes);
    return CMF_OK;
}

void cmf_claim_init(cmf_claim *c, long long n, int nth) {
    c->nr = nth < 1 ? 1 : nth > CMF_CLAIM_MAX ? CMF_CLAIM_MAX : nth;
    for (int i = 0; i < c->nr; i++) {
        const unsigned long long f = (unsigned long long)(n * i / c->nr), b = (unsigned long long)(n * (i + 1) / c->nr);
        atomic_init(&c->r[i].fb, f | b << 32);
    }
}

long long cmf_claim_next(cmf_claim *c, int ith) {
    const int own = ith % c->nr;
    cmf_claim_range *r = &c->r[own];
    unsigned long long v = atomic_load_explicit(&r->fb, memory_order_relaxed);
    while ((v & 0xffffffffu) < v >> 32) /* own range: from the front */
        if (atomic_compare_exchange_weak_explicit(&r->fb, &v, v + 1, memory_order_relaxed, memory_order_relaxed))
            return (long long)(v & 0xffffffffu);
    for (int k = 1; k < c->nr; k++) { /* the others': from the back */
        r = &c->r[(own + k) % c->nr];
        v = atomic_load_explicit(&r->fb, memory_order_relaxed);
        while ((v & 0xffffffffu) < v >> 32)
            if (atomic_compare_exchange_weak_explicit(&r->fb, &v, v - (1ull << 32), memory_order_relaxed,
                                                      memory_order_relaxed))
                return (long long)(v >> 32) - 1;
    }
    return -1;
}
