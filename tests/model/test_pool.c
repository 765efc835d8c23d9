/* The cpu thread pool's hand-offs (src/backend/cpu/threadpool.c): cmf_pool_run runs its task on every thread, and
 * cmf_pool_run_dyn runs every item of a shared-counter task, or of a cmf_claim (per-thread ranges with stealing:
 * each range's owner runs a prefix of it), exactly once while a worker that has not started by the
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
#include "backend/cpu/claim.h"
#include "testutil.h"

enum { NTH = 4, RUNS = 6000, ITEMS_MAX = 64 };

typedef struct {
    atomic_int next;
    int items;
    int slow;  /* workers (ith > 0) pause before taking items */
    int claim; /* items from a cmf_claim (one range per thread, stealing) instead of the counter */
    cmf_claim c;
    atomic_int done[ITEMS_MAX];
    atomic_int who[ITEMS_MAX]; /* the thread that ran the item */
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
    if (t->claim) {
        for (long long i; (i = cmf_claim_next(&t->c, ith)) >= 0;) {
            atomic_fetch_add(&t->done[i], 1);
            atomic_store(&t->who[i], ith);
            if (t->slow && ith > 0 && i % 3 == 0) pause_us(5); /* stolen from while it sleeps */
        }
        return;
    }
    for (int i; (i = atomic_fetch_add(&t->next, 1)) < t->items;) atomic_fetch_add(&t->done[i], 1);
}

/* In each range of a claim run, the owner ran a prefix (taken front to back) and other threads the rest (stolen
 * from the back): no item of the owner's after one of another thread's. Returns the ranges that break this. */
static int claim_order_bad(const dyn_task *t) {
    int bad = 0;
    for (int r = 0; r < NTH; r++) {
        int other = 0;
        for (int i = t->items * r / NTH; i < t->items * (r + 1) / NTH; i++) {
            const int w = atomic_load(&t->who[i]);
            if (w != r) other = 1;
            else if (other) bad++;
        }
    }
    return bad;
}

/* cmf_claim on one thread: its own range front to back, then the others' from the back, then -1. */
static void test_claim_sequence(void) {
    cmf_claim c;
    cmf_claim_init(&c, 10, 3); /* ranges [0,3) [3,6) [6,10) */
    static const long long want[] = {0, 1, 2, 5, 4, 3, 9, 8, 7, 6, -1, -1};
    for (int i = 0; i < 12; i++) {
        const long long got = cmf_claim_next(&c, 0);
        CHECK_MSG(got == want[i], "claim step %d: %lld, want %lld", i, got, want[i]);
    }
    cmf_claim_init(&c, 10, 3);
    CHECK(cmf_claim_next(&c, 5) == 6); /* thread 5 starts in range 5 % 3 */
    cmf_claim_init(&c, 2, 4); /* more threads than items: empty ranges */
    int seen = 0;
    for (long long i; (i = cmf_claim_next(&c, 3)) >= 0;) seen |= 1 << i;
    CHECK(seen == 3 && cmf_claim_next(&c, 1) == -1);
    cmf_claim_init(&c, 1000, 200); /* past CMF_CLAIM_MAX threads: CMF_CLAIM_MAX ranges */
    CHECK(c.nr == CMF_CLAIM_MAX);
    int n = 0;
    while (cmf_claim_next(&c, 199) >= 0) n++;
    CHECK(n == 1000);
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
    test_claim_sequence();
    cmf_pool *p = NULL;
    CHECK(cmf_pool_new(NTH, &p) == CMF_OK);
    if (!p) CMF_TEST_END();
    CHECK(cmf_pool_size(p) == NTH);
    unsigned seed = 12345;
    int bad_dyn = 0, bad_all = 0, bad_order = 0, entered_total = 0, dyn_runs = 0;
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
        t->claim = (rnd >> 4) % 2;
        if (t->claim) cmf_claim_init(&t->c, t->items, NTH);
        cmf_pool_run_dyn(p, dyn_fn, t);
        dyn_runs++;
        for (int i = 0; i < t->items; i++) bad_dyn += atomic_load(&t->done[i]) != 1;
        if (t->claim) bad_order += claim_order_bad(t);
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
    CHECK_MSG(bad_order == 0, "%d claim ranges whose owner ran an item after another thread's", bad_order);
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
