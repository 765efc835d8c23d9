/* gate_speed.c — decode speed of a Dory CMF file with and without the early-exit gates of DORY.md §2, in one run:
 *   loops 1, loops 2, the Conf gate (threshold T), the Recon gate (a probe whose bias is the median score of a
 *   calibration run, so about half the tokens exit; its weights are seeded random, as the model's usually are here).
 * Every configuration decodes the same N seeded random tokens one by one from an empty last_loop session, after one
 * untimed warm-up token; prints tok/s, the one-pass share and the speed relative to loops 2.
 * usage: dory_gate_speed MODEL.cmf [N=8] [THREADS=2] [CONF_THRESHOLD=0.5] */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "format/format.h"
#include "model/dory.h"

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* mode 0: forward with `loops`; 1: Conf gate; 2: Recon gate. Returns tok/s (-1 on error); *share one-pass share. */
static double run(const cmf_dory *d, const int32_t *ids, int n, int mode, int loops, float thr,
                  const cmf_dory_probe *pr, double *scores, double *share) {
    cmf_dory_state *s;
    if (cmf_dory_state_new(d, n + 2, 1, CMF_DORY_KV_LAST_LOOP, 2, &s) != CMF_OK) return -1;
    double t0 = 0;
    int rc = 0;
    for (int i = 0; i <= n && !rc; i++) {
        if (i == 1) t0 = now(); /* token 0 is the warm-up */
        if (mode == 0) rc = cmf_dory_forward(s, ids + i, 1, loops, NULL) != CMF_OK;
        else if (mode == 1) rc = cmf_dory_decode_gated(s, ids[i], thr, NULL) != CMF_OK;
        else rc = cmf_dory_decode_recon(s, ids[i], pr, NULL, scores ? &scores[i] : NULL) != CMF_OK;
    }
    double dt = now() - t0;
    *share = cmf_dory_gate_one_pass_share(s, NULL);
    cmf_dory_state_free(s);
    if (rc) fprintf(stderr, "decode: %s\n", cmf_last_error());
    return rc ? -1 : n / dt;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s MODEL.cmf [N=8] [THREADS=2] [CONF_THRESHOLD=0.5]\n", argv[0]);
        return 2;
    }
    int n = argc > 2 ? atoi(argv[2]) : 8, threads = argc > 3 ? atoi(argv[3]) : 2;
    float thr = argc > 4 ? (float)atof(argv[4]) : 0.5f;
    if (n < 1 || n > 4096) return 2;
    cmf_file *f;
    cmf_dory *d;
    if (cmf_file_open(argv[1], &f) != CMF_OK || cmf_dory_load(f, threads, &d) != CMF_OK) {
        fprintf(stderr, "%s: %s\n", argv[1], cmf_last_error());
        return 1;
    }
    const int H = d->cfg.hidden_size;
    int32_t *ids = malloc((size_t)(n + 1) * sizeof(int32_t));
    double *scores = calloc((size_t)n + 1, sizeof(double));
    cmf_dory_probe pr = {H, malloc((size_t)H * sizeof(float)), INFINITY};
    uint32_t r = 2026;
    for (int i = 0; i <= n; i++) {
        r = r * 1664525u + 1013904223u;
        ids[i] = (int32_t)((r >> 8) % (uint32_t)d->cfg.vocab_size);
    }
    for (int j = 0; j < H; j++) {
        r = r * 1664525u + 1013904223u;
        pr.w[j] = (float)((r >> 8) / 16777216.0 - 0.5);
    }
    double sh, s1 = run(d, ids, n, 0, 1, 0, NULL, NULL, &sh), s2 = run(d, ids, n, 0, 2, 0, NULL, NULL, &sh);
    double shc, sc = run(d, ids, n, 1, 2, thr, NULL, NULL, &shc);
    /* calibration: the scores on the all-two-pass trajectory (bias +inf); not timed for the table */
    double shr;
    run(d, ids, n, 2, 2, 0, &pr, scores, &shr);
    qsort(scores + 1, (size_t)n, sizeof(double), cmp);
    pr.bias = scores[1 + n / 2];
    double sr = run(d, ids, n, 2, 2, 0, &pr, NULL, &shr);
    printf("model %s, %d decode tokens, %d threads\n", argv[1], n, threads);
    printf("| config | tok/s | one-pass share | vs loops 2 |\n|---|---|---|---|\n");
    printf("| loops 1 | %.3f | 1 | %.2fx |\n", s1, s1 / s2);
    printf("| loops 2 | %.3f | 0 | 1.00x |\n", s2);
    printf("| conf gate, threshold %.2f | %.3f | %.2f | %.2fx |\n", thr, sc, shc, sc / s2);
    printf("| recon gate, median bias %.4g | %.3f | %.2f | %.2fx |\n", pr.bias, sr, shr, sr / s2);
    free(pr.w);
    free(ids);
    free(scores);
    cmf_dory_free(d);
    cmf_file_close(f);
    return s1 > 0 && s2 > 0 && sc > 0 && sr > 0 ? 0 : 1;
}
