/* tprof_sum.c — gpu_bench's summary of one decode step's kernel timeline (cmf_cuda_tprof_*, src/backend/cuda/
 * tprof.cuh): the records are grouped into launches by (kind, key), the launches ordered by their first warp's start,
 * and each printed with, in us from the step's first stamp: its warps' starts, PDL wait releases, prologues (wait ->
 * activations in shared memory), bodies (prologue -> end) and ends (median and max over the warps), the handoff from
 * the previous launch (its last warp's end -> this launch's first wait release) and its span (first release -> last
 * end). Then the mean of each of those per position in the layer (launches of one kind cycle with the layers). */
#include <stdio.h>
#include <stdlib.h>

#include "backend/cuda/cuda_ops.h"
#include "tprof_sum.h"

static const char *kind_name(unsigned k) {
    static const char *n[] = {"?", "mv_i8s", "mv_i8", "attn_cl", "attn", "prequant"};
    return k < 6 ? n[k] : "?";
}

static int by_launch(const void *a, const void *b) {
    const cmf_cuda_tprec *x = a, *y = b;
    if (x->kind != y->kind) return x->kind < y->kind ? -1 : 1;
    if (x->key != y->key) return x->key < y->key ? -1 : 1;
    return x->t[0] < y->t[0] ? -1 : x->t[0] > y->t[0];
}

static int cmp_u64(const void *a, const void *b) {
    const uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

typedef struct {
    int64_t i0, n; /* records [i0, i0 + n) */
    unsigned kind;
    uint64_t t0min, t0max, t1min, t1med, t3med, t3max, pro_med, pro_max, body_med, body_max;
    double st[5]; /* medians of the prologue's steps, -1 where the launch has no such stamps: products t7 - t1 (norm
                   * inputs in), t6 - t1 (norm scale), t4 - t1 (activations in), t5 - t4 (quantized), t2 - t5 (synced);
                   * attention t4 - t1 (q / k normalized and rotated), t5 - t4 (first K / V in), t6 - t5 (key rounds
                   * done), t7 - t6 (lane groups' partials stored), t2 - t7 (their merge, the split's partial written) */
} launch;

/* median over the launch's records of t[b] - t[a] (us), those with both stamps; -1 when none */
static double step_med(const cmf_cuda_tprec *r, int64_t n, int a, int b, uint64_t *v) {
    int64_t k = 0;
    for (int64_t i = 0; i < n; i++)
        if (r[i].t[a] && r[i].t[b]) v[k++] = r[i].t[b] - r[i].t[a];
    if (!k) return -1.0;
    qsort(v, (size_t)k, sizeof *v, cmp_u64);
    return (double)v[k / 2] / 1000.0;
}

static int by_start(const void *a, const void *b) {
    const launch *x = a, *y = b;
    return x->t0min < y->t0min ? -1 : x->t0min > y->t0min;
}

/* median / max of v[0..n) (sorts v) */
static uint64_t med(uint64_t *v, int64_t n) {
    qsort(v, (size_t)n, sizeof *v, cmp_u64);
    return v[n / 2];
}

int tprof_print(cmf_cuda_tprec *r, int64_t n, const char *label) {
    if (n <= 0) return 0;
    qsort(r, (size_t)n, sizeof *r, by_launch);
    launch *L = calloc((size_t)n, sizeof *L);
    uint64_t *v = malloc(sizeof(uint64_t) * (size_t)n);
    if (!L || !v) {
        free(L), free(v);
        return -1;
    }
    int64_t nl = 0;
    uint64_t base = UINT64_MAX;
    for (int64_t i = 0; i < n;) {
        int64_t e = i;
        while (e < n && r[e].kind == r[i].kind && r[e].key == r[i].key) e++;
        launch *l = &L[nl++];
        l->i0 = i, l->n = e - i, l->kind = r[i].kind;
        l->t0min = l->t1min = UINT64_MAX;
        for (int64_t k = i; k < e; k++) {
            if (r[k].t[0] < l->t0min) l->t0min = r[k].t[0];
            if (r[k].t[0] > l->t0max) l->t0max = r[k].t[0];
            if (r[k].t[1] < l->t1min) l->t1min = r[k].t[1];
            if (r[k].t[3] > l->t3max) l->t3max = r[k].t[3];
        }
        if (l->t0min < base) base = l->t0min;
        for (int64_t k = i; k < e; k++) v[k - i] = r[k].t[1];
        l->t1med = med(v, l->n);
        for (int64_t k = i; k < e; k++) v[k - i] = r[k].t[3];
        l->t3med = med(v, l->n);
        for (int64_t k = i; k < e; k++) v[k - i] = r[k].t[2] - r[k].t[1];
        l->pro_med = med(v, l->n), l->pro_max = v[l->n - 1];
        for (int64_t k = i; k < e; k++) v[k - i] = r[k].t[3] - r[k].t[2];
        l->body_med = med(v, l->n), l->body_max = v[l->n - 1];
        static const int PROD[5][2] = {{1, 7}, {1, 6}, {1, 4}, {4, 5}, {5, 2}};
        static const int ATTN[5][2] = {{1, 4}, {4, 5}, {5, 6}, {6, 7}, {7, 2}};
        const int(*ab)[2] = l->kind == 3 || l->kind == 4 ? ATTN : PROD; /* 3, 4: the attention kinds (cuda_ops.h) */
        for (int k = 0; k < 5; k++) l->st[k] = step_med(r + i, l->n, ab[k][0], ab[k][1], v);
        i = e;
    }
    qsort(L, (size_t)nl, sizeof *L, by_start);
#define US(x) ((double)(x) / 1000.0)
    printf("TPROF %s: %lld launches, %lld warp records; us from the step's first stamp\n", label, (long long)nl,
           (long long)n);
    printf("TPROF  #  kernel    warps | start min..max | release min/med | prologue med/max | body med/max | "
           "end med/max | handoff  span\n");
    for (int64_t i = 0; i < nl; i++) {
        const launch *l = &L[i];
        const double hand = i ? US((double)l->t1min - (double)L[i - 1].t3max) : 0.0;
        printf("TPROF %3lld %-8s %6lld | %7.2f..%7.2f | %7.2f/%7.2f | %5.2f/%5.2f | %6.2f/%6.2f | %7.2f/%7.2f | %6.2f "
               "%6.2f\n",
               (long long)i, kind_name(l->kind), (long long)l->n, US(l->t0min - base), US(l->t0max - base),
               US(l->t1min - base), US(l->t1med - base), US(l->pro_med), US(l->pro_max), US(l->body_med),
               US(l->body_max), US(l->t3med - base), US(l->t3max - base), hand, US(l->t3max - l->t1min));
    }
    /* the layer's cycle: the launch pattern repeats every `per` launches from the first kind that recurs */
    int per = 0;
    for (int64_t p = 1; p < nl && !per; p++)
        if (L[p].kind == L[0].kind && p + p <= nl) {
            int ok = 1;
            for (int64_t k = 0; k + p < nl && k < 2 * p; k++) ok &= L[k].kind == L[k + p].kind;
            if (ok) per = (int)p;
        }
    if (per) {
        const int64_t cyc = nl / per;
        printf("TPROF per layer position (mean over %lld layers): kernel | prologue med | body med | tail (end max - "
               "med) | handoff | span || prologue steps (-: none): products: norm inputs in, norm scale, activations "
               "in (these three from the wait), quantized, synced (durations); attention: q/k normalized + rotated "
               "(from the wait), first K/V in, key rounds done, groups' partials stored, merged + written (durations)\n",
               (long long)cyc);
        double tot = 0;
        for (int p = 0; p < per; p++) {
            double pro = 0, body = 0, tail = 0, hand = 0, span = 0, st[5] = {0, 0, 0, 0, 0};
            int nst[5] = {0, 0, 0, 0, 0};
            for (int64_t c = 0; c < cyc; c++) {
                const int64_t i = c * per + p;
                const launch *l = &L[i];
                pro += US(l->pro_med), body += US(l->body_med), tail += US(l->t3max - l->t3med);
                hand += i ? US((double)l->t1min - (double)L[i - 1].t3max) : 0.0;
                span += US(l->t3max - l->t1min);
                for (int k = 0; k < 5; k++)
                    if (l->st[k] >= 0) st[k] += l->st[k], nst[k]++;
            }
            printf("TPROF  pos %d %-8s | %5.2f | %6.2f | %5.2f | %5.2f | %6.2f ||", p, kind_name(L[p].kind), pro / cyc,
                   body / cyc, tail / cyc, hand / cyc, span / cyc);
            for (int k = 0; k < 5; k++) { /* means over the layers whose launch has the step */
                if (!nst[k]) printf("     -");
                else printf(" %5.2f", st[k] / nst[k]);
            }
            printf("\n");
            tot += (hand + span) / cyc;
        }
        printf("TPROF  layer (handoffs + spans): %.2f us\n", tot);
    }
    uint64_t end = 0;
    for (int64_t i = 0; i < nl; i++)
        if (L[i].t3max > end) end = L[i].t3max;
    printf("TPROF step: first start -> last end %.2f us\n", US(end - base));
#undef US
    free(L), free(v);
    return 0;
}
