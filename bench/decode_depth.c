/* decode_depth.c — decode speed at a given context depth (the cost of attention over a long KV cache, which
 * `cmf bench`'s tgN from an empty context does not show): prefills P tokens (seeded pseudo-random ids, in prompt
 * chunks of 512), then times N single-token decode steps, and prints the prefill rate and the decode time per token.
 *
 *   cmake --build build --target decode_depth && build/tests/kernels/decode_depth MODEL.cmf [P=4096] [N=16] [T=2]
 *
 * Attention cost per token at depth P = decode ms/token at P minus at a small P (same run conditions). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cmf.h"

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: decode_depth MODEL.cmf [P=4096] [N=16] [THREADS=2]\n");
        return 2;
    }
    const int P = argc > 2 ? atoi(argv[2]) : 4096, N = argc > 3 ? atoi(argv[3]) : 16, T = argc > 4 ? atoi(argv[4]) : 2;
    if (P < 0 || N < 1) {
        fprintf(stderr, "decode_depth: P must be >= 0 and N >= 1\n");
        return 2;
    }
    cmf_model_params mp;
    memset(&mp, 0, sizeof mp);
    mp.n_threads = T;
    cmf_model *m = NULL;
    cmf_session *s = NULL;
    if (cmf_model_load(argv[1], &mp, &m) != CMF_OK || cmf_session_new(m, P + N + 1, &s) != CMF_OK) {
        fprintf(stderr, "decode_depth: %s\n", cmf_last_error());
        cmf_model_free(m);
        return 1;
    }
    const int V = cmf_model_vocab_size(m);
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)(P + N));
    if (!ids) return 1;
    uint32_t r = 1234;
    for (int i = 0; i < P + N; i++) {
        r = r * 1664525u + 1013904223u;
        ids[i] = (int32_t)((r >> 8) % (uint32_t)V);
    }
    int rc = 0;
    const double t0 = now();
    for (int i = 0; i < P && !rc; i += 512) rc = cmf_session_prefill(s, ids + i, P - i < 512 ? P - i : 512, NULL) != CMF_OK;
    const double t1 = now();
    for (int i = 0; i < N && !rc; i++) rc = cmf_session_decode(s, ids[P + i]) != CMF_OK;
    const double t2 = now();
    if (rc) fprintf(stderr, "decode_depth: %s\n", cmf_last_error());
    else
        printf("depth %d: prefill %.2f s (%.1f t/s), decode %.1f ms/token (%d tokens, %d threads)\n", P, t1 - t0,
               P ? P / (t1 - t0) : 0.0, 1e3 * (t2 - t1) / N, N, T);
    free(ids);
    cmf_session_free(s);
    cmf_model_free(m);
    return rc;
}
