/* readbw.c — memory read bandwidth with T threads (the ceiling for a memory-bound decode step).
 * usage: readbw [THREADS=2] [MIB=1024] [REPS=10]
 * Each thread sums its own contiguous slice of one MIB-MiB buffer (first-touched by that thread) with 8 independent
 * 64-bit accumulators; a repetition is timed from a barrier to the last thread's finish; prints the best and the
 * median GB/s (1 GB = 1e9 bytes) over REPS repetitions. Build: cc -O2 -march=native -pthread readbw.c -o readbw */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static uint64_t *buf;
static size_t n_words;
static int n_threads;
static pthread_barrier_t bar;
static volatile uint64_t sink;

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void *worker(void *arg) {
    const size_t id = (size_t)(uintptr_t)arg, w0 = n_words * id / n_threads, w1 = n_words * (id + 1) / n_threads;
    memset(buf + w0, (int)id + 1, (w1 - w0) * 8);
    pthread_barrier_wait(&bar); /* touched */
    for (;;) {
        pthread_barrier_wait(&bar); /* start */
        if (!buf) break;
        uint64_t a[8] = {0};
        for (size_t i = w0; i + 8 <= w1; i += 8)
            for (int k = 0; k < 8; k++) a[k] += buf[i + k];
        sink += a[0] + a[1] + a[2] + a[3] + a[4] + a[5] + a[6] + a[7];
        pthread_barrier_wait(&bar); /* done */
    }
    return NULL;
}

static int cmp(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    n_threads = argc > 1 ? atoi(argv[1]) : 2;
    const size_t mib = argc > 2 ? (size_t)atol(argv[2]) : 1024;
    const int reps = argc > 3 ? atoi(argv[3]) : 10;
    if (n_threads < 1 || n_threads > 256 || mib < 1 || reps < 1 || reps > 1000) {
        fprintf(stderr, "usage: readbw [THREADS] [MIB] [REPS]\n");
        return 2;
    }
    n_words = mib * 1024 * 1024 / 8;
    uint64_t *mem = aligned_alloc(64, n_words * 8);
    if (!mem) return 1;
    buf = mem;
    pthread_barrier_init(&bar, NULL, (unsigned)n_threads + 1);
    pthread_t th[256];
    for (int i = 0; i < n_threads; i++) pthread_create(&th[i], NULL, worker, (void *)(uintptr_t)i);
    pthread_barrier_wait(&bar);
    double gbs[1000];
    for (int r = 0; r < reps; r++) {
        const double t0 = now();
        pthread_barrier_wait(&bar);
        pthread_barrier_wait(&bar);
        gbs[r] = (double)n_words * 8 / (now() - t0) / 1e9;
    }
    buf = NULL;
    pthread_barrier_wait(&bar);
    for (int i = 0; i < n_threads; i++) pthread_join(th[i], NULL);
    qsort(gbs, (size_t)reps, sizeof gbs[0], cmp);
    printf("{\"threads\": %d, \"mib\": %zu, \"best_gbs\": %.2f, \"median_gbs\": %.2f}\n", n_threads, mib,
           gbs[reps - 1], gbs[reps / 2]);
    free(mem);
    return 0;
}
