/* qpar.c — worker threads for the encoders (qpar.h). A tensor is quantized once per conversion, so a thread per
 * range and per call is cheap next to the work; the ranges are contiguous so each thread writes its own span. */
#include "quant/qpar.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { QPAR_MAX = 64, QPAR_MIN_BYTES = 256 * 1024 };

typedef struct {
    cmf_qpar_fn fn;
    void *ctx;
    uint64_t lo, hi;
    cmf_status st;
    char msg[1024]; /* the thread's cmf_last_error when st != CMF_OK */
} qpar_job;

static void *qpar_main(void *arg) {
    qpar_job *j = arg;
    j->st = j->fn(j->ctx, j->lo, j->hi);
    if (j->st != CMF_OK) {
        strncpy(j->msg, cmf_last_error(), sizeof j->msg - 1);
        j->msg[sizeof j->msg - 1] = '\0';
    }
    return NULL;
}

/* CMF_QUANT_THREADS as a count 1..256, 0 when unset or empty, -1 when set to anything else. */
static int env_threads(void) {
    const char *v = getenv("CMF_QUANT_THREADS");
    if (!v || !*v) return 0;
    char *end;
    long t = strtol(v, &end, 10);
    return *end == '\0' && t >= 1 && t <= 256 ? (int)t : -1;
}

int cmf_qpar_threads(void) {
    const int t = env_threads();
    if (t > 0) return t;
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : n > QPAR_MAX ? QPAR_MAX : (int)n;
}

int cmf_qpar_threads_env_bad(void) { return env_threads() < 0; }

cmf_status cmf_qpar_run(uint64_t n, uint64_t work, cmf_qpar_fn fn, void *ctx) {
    uint64_t T = (uint64_t)cmf_qpar_threads();
    if (T > QPAR_MAX) T = QPAR_MAX;
    if (T > n) T = n;
    if (T > work / QPAR_MIN_BYTES + 1) T = work / QPAR_MIN_BYTES + 1;
    if (T <= 1) return fn(ctx, 0, n);
    qpar_job job[QPAR_MAX];
    pthread_t tid[QPAR_MAX];
    int started[QPAR_MAX] = {0};
    for (uint64_t k = 0; k < T; k++) {
        job[k] = (qpar_job){fn, ctx, k * n / T, (k + 1) * n / T, CMF_OK, {0}};
        if (k > 0) started[k] = pthread_create(&tid[k], NULL, qpar_main, &job[k]) == 0;
    }
    qpar_main(&job[0]);
    for (uint64_t k = 1; k < T; k++) {
        if (started[k])
            pthread_join(tid[k], NULL);
        else
            qpar_main(&job[k]); /* no thread: the caller runs the range */
    }
    for (uint64_t k = 0; k < T; k++)
        if (job[k].st != CMF_OK) return cmf_err(job[k].st, "%s", job[k].msg);
    return CMF_OK;
}
