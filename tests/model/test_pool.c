/* The cpu thread pool's hand-offs (src/backend/cpu/threadpool.c): cmf_pool_run runs its task on every thread, and
 * cmf_pool_run_dyn runs every item of a shared-counter task exactly once while a worker that has not started by the
 * time the caller's share is done is skipped and never touches the task afterwards. Each task's context is a heap
 * block freed right after the run, so under AddressSanitizer a late worker reading it is a heap-use-after-free.
 * More threads than cores, workers slowed at random inside the task (some runs), and pauses of a few milliseconds
 * between runs (workers fall asleep: the sleeping / waking path) exercise the skip, the spin and the sleep paths. */
#define _POSIX_C_SOURCE 200809L
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend/cpu/threadpool.h"
#include "testutil.h"

enum { NTH = 4, RUNS = 6000, ITEMS_MAX = 64 };

typedef struct {
    atomic_int next;
    int items;
    int slow; /* workers (ith > 0) pause before taking items */
    atomic_int done[ITEMS_MAX];
    atomic_int entered[NTH];
} dyn_task;

static void pause_us(long us) {
    struct timespec ts = {0, us * 1000};
    nanosleep(&ts, NULL);
}

static void dyn_fn(void *ctx, int ith, int nth) {
    dyn_task *t = ctx;
    (void)nth;
    atomic_fetch_add(&t->entered[ith], 1);
    if (t->slow && ith > 0) pause_us(20);
    for (int i; (i = atomic_fetch_add(&t->next, 1)) < t->items;) atomic_fetch_add(&t->done[i], 1);
}

typedef struct {
    atomic_int ran[NTH];
    int nth_seen[NTH];
} all_task;

static void all_fn(void *ctx, int ith, int nth) {
    all_task *t = ctx;
    atomic_fetch_add(&t->ran[ith], 1);
    t->nth_seen[ith] = nth;
}

int main(void) {
    cmf_pool *p = NULL;
    CHECK(cmf_pool_new(NTH, &p) == CMF_OK);
    if (!p) CMF_TEST_END();
    CHECK(cmf_pool_size(p) == NTH);
    unsigned seed = 12345;
    int bad_dyn = 0, bad_all = 0, entered_total = 0, dyn_runs = 0;
    for (int r = 0; r < RUNS; r++) {
        seed = seed * 1103515245u + 12345u;
        const unsigned rnd = seed >> 8;
        if (rnd % 97 == 0) pause_us(2000 + (long)(rnd % 3000)); /* long enough for the workers to sleep */
        if (rnd % 3 == 0) {
            all_task *t = calloc(1, sizeof *t);
            CHECK(t != NULL);
            if (!t) break;
            cmf_pool_run(p, all_fn, t);
            for (int i = 0; i < NTH; i++) bad_all += atomic_load(&t->ran[i]) != 1 || t->nth_seen[i] != NTH;
            free(t);
            continue;
        }
        dyn_task *t = calloc(1, sizeof *t);
        CHECK(t != NULL);
        if (!t) break;
        t->items = 1 + (int)(rnd % ITEMS_MAX);
        t->slow = rnd % 5 == 0;
        cmf_pool_run_dyn(p, dyn_fn, t);
        dyn_runs++;
        for (int i = 0; i < t->items; i++) bad_dyn += atomic_load(&t->done[i]) != 1;
        CHECK(atomic_load(&t->entered[0]) == 1);
        for (int i = 0; i < NTH; i++) {
            bad_dyn += atomic_load(&t->entered[i]) > 1;
            entered_total += atomic_load(&t->entered[i]);
        }
        memset(t, 0xa5, sizeof *t); /* a late reader would see garbage (and ASan the freed block) */
        free(t);
    }
    CHECK_MSG(bad_dyn == 0, "%d dyn runs with an item not run exactly once or a thread entering twice", bad_dyn);
    CHECK_MSG(bad_all == 0, "%d static runs that missed a thread", bad_all);
    CHECK(entered_total > 0);
    fprintf(stderr, "dyn runs: %d thread entries of %d possible (the rest skipped)\n", entered_total, dyn_runs * NTH);
    cmf_pool_free(p);
    /* a NULL pool runs the task on the caller */
    dyn_task *t = calloc(1, sizeof *t);
    CHECK(t != NULL);
    if (t) {
        t->items = 5;
        cmf_pool_run_dyn(NULL, dyn_fn, t);
        for (int i = 0; i < 5; i++) CHECK(atomic_load(&t->done[i]) == 1);
        free(t);
    }
    CMF_TEST_END();
}
