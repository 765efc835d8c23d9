/* bench_batch — what one continuous-batching step of `cmf serve` costs, without HTTP: cmf_batch_run over n
 * sessions (one decode token each) for n = 1, 4, 8, 16 on the same file, plus the per-token work the scheduler does
 * after the forward (greedy argmax, the default top-k/top-p sampler, streaming detokenization), each timed alone.
 * Not a test (numbers from a benchmark, not a timed unit test); src/server/sched.c is what it models.
 *
 * usage: bench_batch MODEL.cmf [threads (0: all)] [steps per n (default 48)] [n,n,... (default 1,4,8,16)] [forward]
 * (`forward`: the forwards only, for a profile of them alone)
 * Each session is prefilled with 8 distinct tokens, then runs `steps` greedy decode steps per n (the sessions are
 * truncated back to their prompt between the n values, so every n sees the same context lengths 8..8+steps).
 * Prints one line per n: ms per forward (the median step and the mean), aggregate tok/s by the median, and that
 * over the n = 1 rate, and the caller thread's CPU time per forward (the median; with 1 thread the forward's own
 * running time, robust to other processes' load); then the per-token costs of sampling and detokenizing in microseconds, and each product of
 * layer 0 and the head alone (cmf_matmul on the batch's pool, cpu backend; the best of 5 batches of calls) at n = 1
 * and at the largest n. Run under perf for the per-op split, e.g.
 *   perf record -g -- tests/server/bench_batch model.cmf 2 64 16 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend/backend.h"
#include "backend/cpu/ops.h"
#include "cmf.h"
#include "model/model.h"
#include "sample/sample.h"

enum { MAX_SEQ = 64, PROMPT = 8 };

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* CPU time of the calling thread: with 1 thread the forward's own running time, which other processes' load on the
 * machine does not stretch (they still share the caches and the memory bus). */
static double thread_cpu(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static int fail(const char *what) {
    fprintf(stderr, "bench_batch: %s: %s\n", what, cmf_last_error());
    return 1;
}

/* The per-token work after a forward on one row of logits `lg`: argmax, the sampler, detokenizing `gen`. */
static int per_token_costs(const cmf_model *m, const float *lg, int V, const int32_t *gen, int steps) {
    const int reps = 2000;
    volatile int32_t sink = 0;
    double t0 = now();
    for (int r = 0; r < reps; r++) sink += cmf_argmax(lg, V);
    const double t_argmax = (now() - t0) / reps;
    /* the sampler with: greedy; OpenAI's defaults (temperature 1, top_p 1, no top-k: a draw over the whole
     * vocabulary); cmf's defaults (temperature 0.8, top-k 40, top-p 0.95); top-p 0.95 alone (no top-k) */
    double t_smp[4];
    for (int k = 0; k < 4; k++) {
        cmf_sampler_params sp = cmf_sampler_default_params();
        if (k == 0) sp.temperature = 0;
        if (k == 1) sp.temperature = 1, sp.top_p = 1, sp.top_k = 0;
        if (k == 3) sp.top_k = 0;
        cmf_sampler *smp = NULL;
        if (cmf_sampler_new(V, &sp, &smp) != CMF_OK) return fail("sampler");
        int32_t tok = 0;
        const int r_k = k == 3 ? reps / 10 : reps;
        t0 = now();
        for (int r = 0; r < r_k; r++) cmf_sampler_sample(smp, lg, &tok), sink += tok;
        t_smp[k] = (now() - t0) / r_k;
        cmf_sampler_free(smp);
    }
    double t_detok = 0;
    const cmf_tokenizer *tk = cmf_model_tokenizer(m);
    cmf_detok_stream *ds = NULL;
    int n_detok = 0;
    t0 = now();
    for (int r = 0; tk && steps > 0 && r < reps / steps + 1; r++) { /* a fresh stream over the greedy tokens */
        if (cmf_detok_stream_new(tk, 1, &ds) != CMF_OK) return fail("detok");
        for (int s = 0; s < steps; s++, n_detok++) {
            char *text = NULL;
            if (cmf_detok_stream_push(ds, gen[s], &text) != CMF_OK) return fail("detok");
            free(text);
        }
        cmf_detok_stream_free(ds);
    }
    if (n_detok) t_detok = (now() - t0) / n_detok;
    printf("per token (vocab %d): argmax %.1f us; sampler: greedy %.1f us, temperature 1 over the whole vocab %.1f us, "
           "top-k 40 + top-p 0.95 %.1f us, top-p 0.95 alone %.1f us; detok %.2f us\n",
           V, 1e6 * t_argmax, 1e6 * t_smp[0], 1e6 * t_smp[1], 1e6 * t_smp[2], 1e6 * t_smp[3], 1e6 * t_detok);
    (void)sink;
    return 0;
}

/* Layer 0's seven products and the head one by one (cmf_matmul on the batch's pool), at n = 1 and n = max_n. */
static void product_costs(const cmf_model *m, cmf_batch *b, int max_n) {
    /* the products one by one: layer 0's seven matrices and the head, at n = 1 and n = max_n */
    const cmf_layer *L0 = &m->base.layers[0];
    const cmf_weight *mats[8] = {&L0->wq, &L0->wk, &L0->wv, &L0->wo, &L0->w_gate, &L0->w_up, &L0->w_down,
                                 &m->base.lm_head};
    const char *names[8] = {"q", "k", "v", "o", "gate", "up", "down", "head"};
    size_t widest = 0;
    for (int i = 0; i < 8; i++) {
        size_t r = (size_t)mats[i]->rows, c = (size_t)mats[i]->cols;
        widest = r > widest ? r : widest;
        widest = c > widest ? c : widest;
    }
    float *xin = calloc((size_t)max_n * widest, sizeof(float)), *yout = calloc((size_t)max_n * widest, sizeof(float));
    if (m->be->kind == CMF_BACKEND_CPU && b->pool && xin && yout) {
        for (size_t i = 0; i < (size_t)max_n * widest; i++) xin[i] = (float)((i * 7919) % 2001) / 1000.0f - 1.0f;
        double tot1 = 0, totn = 0;
        printf("products (rows x cols: us at n=1, us at n=%d, ratio):", max_n);
        for (int i = 0; i < 8; i++) {
            double t[2];
            for (int k = 0; k < 2; k++) {
                const int n = k ? max_n : 1, r = i == 7 ? 8 : 40;
                cmf_matmul(b->pool, yout, mats[i]->rows, xin, n, mats[i], NULL);
                t[k] = 1e30;
                for (int rep = 0; rep < 5; rep++) { /* the best of 5 batches of r calls (other processes' bursts) */
                    double t1 = now();
                    for (int j = 0; j < r; j++) cmf_matmul(b->pool, yout, mats[i]->rows, xin, n, mats[i], NULL);
                    const double tr = (now() - t1) / r;
                    t[k] = tr < t[k] ? tr : t[k];
                }
            }
            const int per_model = i == 7 ? 1 : m->cfg.n_layers;
            tot1 += per_model * t[0];
            totn += per_model * t[1];
            printf(" %s %lldx%lld: %.0f, %.0f, %.1fx;", names[i], (long long)mats[i]->rows, (long long)mats[i]->cols,
                   1e6 * t[0], 1e6 * t[1], t[1] / t[0]);
        }
        printf("\nall products of a forward: %.2f ms at n=1, %.2f ms at n=%d (%.1fx)\n", 1e3 * tot1, 1e3 * totn, max_n,
               totn / tot1);
    }
    free(xin);
    free(yout);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: bench_batch MODEL.cmf [threads] [steps] [n,n,...]\n");
        return 2;
    }
    cmf_model_params mp = {0};
    mp.n_threads = argc > 2 ? atoi(argv[2]) : 0;
    const int steps = argc > 3 ? atoi(argv[3]) : 48;
    int ns[16], n_ns = 0, max_n = 1;
    for (const char *p = argc > 4 ? argv[4] : "1,4,8,16"; *p && n_ns < 16;) {
        int v = atoi(p);
        if (v < 1 || v > MAX_SEQ) {
            fprintf(stderr, "bench_batch: n must be in [1, %d]\n", MAX_SEQ);
            return 2;
        }
        ns[n_ns++] = v;
        max_n = v > max_n ? v : max_n;
        while (*p && *p != ',') p++;
        if (*p == ',') p++;
    }
    cmf_model *m = NULL;
    if (cmf_model_load(argv[1], &mp, &m) != CMF_OK) return fail("load");
    const int V = cmf_model_vocab_size(m), ctx = PROMPT + steps + 1;
    cmf_session *sess[MAX_SEQ];
    int32_t next[MAX_SEQ], ids[MAX_SEQ];
    int32_t *gen = malloc((size_t)(steps > 0 ? steps : 1) * sizeof *gen); /* session 0's greedy tokens */
    double *step_t = malloc((size_t)(steps > 0 ? steps : 1) * sizeof *step_t);
    double *step_c = malloc((size_t)(steps > 0 ? steps : 1) * sizeof *step_c); /* the caller's CPU time */
    if (!gen || !step_t || !step_c) return 2;
    for (int i = 0; i < max_n; i++) {
        if (cmf_session_new(m, ctx, &sess[i]) != CMF_OK) return fail("session");
        int32_t prompt[PROMPT];
        for (int j = 0; j < PROMPT; j++) prompt[j] = (int32_t)((1 + 37 * i + 101 * j) % V);
        if (cmf_session_prefill(sess[i], prompt, PROMPT, NULL) != CMF_OK) return fail("prefill");
        next[i] = cmf_argmax(cmf_session_logits(sess[i]), V);
    }
    cmf_batch *b = NULL;
    if (cmf_batch_new(m, max_n, max_n, &b) != CMF_OK) return fail("batch");
    if (cmf_batch_run(b, sess, next, 1) != CMF_OK) return fail("warm-up"); /* first touch of the weights */
    cmf_session_truncate(sess[0], PROMPT);
    double base = 0;
    printf("threads %d, %d decode steps per n, context %d..%d\n", mp.n_threads, steps, PROMPT, PROMPT + steps);
    for (int k = 0; k < n_ns; k++) {
        const int n = ns[k];
        for (int i = 0; i < n; i++) cmf_session_truncate(sess[i], PROMPT);
        double fwd = 0;
        for (int s = 0; s < steps; s++) {
            for (int i = 0; i < n; i++) ids[i] = next[i];
            double t0 = now(), c0 = thread_cpu();
            if (cmf_batch_run(b, sess, ids, n) != CMF_OK) return fail("forward");
            step_t[s] = now() - t0;
            step_c[s] = thread_cpu() - c0;
            fwd += step_t[s];
            for (int i = 0; i < n; i++) next[i] = cmf_argmax(cmf_session_logits(sess[i]), V);
            gen[s] = next[0];
        }
        /* the median step too: on a shared machine it moves less with other processes' bursts than the mean */
        qsort(step_t, (size_t)steps, sizeof *step_t, cmp_double);
        qsort(step_c, (size_t)steps, sizeof *step_c, cmp_double);
        const double med = step_t[steps / 2], tps = n / med;
        if (n == 1) base = tps;
        printf("n %2d: %7.2f ms per forward (median; mean %.2f), %8.1f tok/s", n, 1e3 * med, 1e3 * fwd / steps, tps);
        if (base > 0) printf(", %.2fx the n=1 rate", tps / base);
        printf("; caller CPU %.2f ms (median)\n", 1e3 * step_c[steps / 2]);
    }
    int rc = 0;
    if (!(argc > 5 && !strcmp(argv[5], "forward"))) { /* `forward`: the forwards only */
        rc = per_token_costs(m, cmf_session_logits(sess[0]), V, gen, steps);
        if (!rc) product_costs(m, b, max_n);
    }
    cmf_batch_free(b);
    for (int i = 0; i < max_n; i++) cmf_session_free(sess[i]);
    cmf_model_free(m);
    free(gen);
    free(step_t);
    free(step_c);
    return rc;
}
