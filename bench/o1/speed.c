/* speed.c — `o1_speed MODEL.cmf [--prompt 4096] [--at 4096,32768] [-n 16] [--o1 SPEC] [--o1-seal S] [-t T]`
 * Decode speed (tokens/s of single-token steps) at given context positions, exact attention or the O(1) far
 * field (DORY.md §3.1). What is measured, exactly:
 *  1. a session of n_ctx = max(at) + n + 1 on the CPU backend; a synthetic prompt of P tokens (ids
 *     (37·i + 11) mod vocab) is prefilled exactly in chunks of 512 (with --o1 the seal length defaults to P, so
 *     the whole prompt is exact and is what the far field is built from);
 *  2. one untimed single-token step at position P (for --o1 this seals the far field);
 *  3. for each position A of --at (ascending): the session is moved to position A without running the model on
 *     positions pos..A-1: the exact KV rows those positions would hold (on layers that keep them: every layer
 *     without --o1, none with --o1 all, whose sealed layers keep only P rows) are filled by repeating the
 *     prompt's real KV rows, and the position counter is set to A. The per-token decode cost depends on the
 *     position only through the rows attention reads (exact) or not at all (sealed far field: constant state;
 *     the position enters only RoPE), so this times the decode of a session at position A without spending
 *     hours of 2-core CPU time on the 28K intermediate tokens. Then n single-token steps (ids as above) are
 *     timed: t/s = n / seconds. An untimed step precedes them (warm caches after the fill).
 * The move in step 3 reaches into the session's CPU KV cache (src/model/model.h): a benchmark device, not an API.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cmf.h"
#include "model/model.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int32_t tok(int i, int V) { return (int32_t)((37 * (int64_t)i + 11) % V); }

/* Moves s to position a (> s->pos): fills the KV rows pos..a-1 of every layer that keeps them by repeating rows
 * 0..p-1, then sets pos. Returns 0, or -1 when the session has no CPU KV cache. */
static int move_to(cmf_session *s, int a, int p) {
    const cmf_config *c = &s->m->cfg;
    const size_t KVD = (size_t)c->n_kv_heads * c->head_dim;
    if (!s->k_cache || !s->v_cache) return -1;
    for (int l = 0; l < c->n_layers; l++) {
        if (s->kv_rows[l] < a) continue; /* a sealed far-field layer: its cache stops at the seal */
        float *k = s->k_cache + s->kv_off[l], *v = s->v_cache + s->kv_off[l];
        for (int r = s->pos; r < a; r++) {
            memcpy(k + (size_t)r * KVD, k + (size_t)(r % p) * KVD, KVD * sizeof(float));
            memcpy(v + (size_t)r * KVD, v + (size_t)(r % p) * KVD, KVD * sizeof(float));
        }
    }
    s->pos = a;
    return 0;
}

int main(int argc, char **argv) {
    const char *model = NULL, *spec = NULL;
    int prompt = 4096, n = 16, threads = 0, seal = 0, at[16], n_at = 2;
    at[0] = 4096, at[1] = 32768;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int has = i + 1 < argc;
        if (!strcmp(a, "--prompt") && has) prompt = atoi(argv[++i]);
        else if (!strcmp(a, "-n") && has) n = atoi(argv[++i]);
        else if (!strcmp(a, "-t") && has) threads = atoi(argv[++i]);
        else if (!strcmp(a, "--o1") && has) spec = argv[++i];
        else if (!strcmp(a, "--o1-seal") && has) seal = atoi(argv[++i]);
        else if (!strcmp(a, "--at") && has) {
            char *s = argv[++i], *end;
            for (n_at = 0; *s && n_at < 16; s = *end ? end + 1 : end) at[n_at++] = (int)strtol(s, &end, 10);
        } else if (a[0] != '-' && !model) model = a;
        else {
            fprintf(stderr, "usage: o1_speed MODEL.cmf [--prompt 4096] [--at 4096,32768] [-n 16] [--o1 SPEC] "
                            "[--o1-seal S] [-t T]\n");
            return 2;
        }
    }
    int max_at = 0;
    for (int i = 0; i < n_at; i++) {
        if (at[i] <= prompt || (i && at[i] <= at[i - 1])) {
            fprintf(stderr, "o1_speed: --at positions must be ascending and greater than the prompt (%d)\n", prompt);
            return 2;
        }
        max_at = at[i];
    }
    if (!model || prompt < 1 || n < 1) {
        fprintf(stderr, "o1_speed: need MODEL.cmf, --prompt >= 1, -n >= 1\n");
        return 2;
    }
    cmf_model_params mp = {.n_threads = threads};
    cmf_model *m = NULL;
    cmf_session *s = NULL;
    if (cmf_model_load(model, &mp, &m) != CMF_OK) {
        fprintf(stderr, "o1_speed: %s\n", cmf_last_error());
        return 1;
    }
    const int V = cmf_model_vocab_size(m);
    cmf_session_params sp = {0};
    sp.n_ctx = max_at + n + 2;
    sp.o1 = spec ? spec : "off";
    sp.o1_seal = seal > 0 ? seal : prompt;
    if (cmf_session_new_ex(m, &sp, &s) != CMF_OK) {
        fprintf(stderr, "o1_speed: %s\n", cmf_last_error());
        cmf_model_free(m);
        return 1;
    }
    int rc = 0;
    int32_t *ids = malloc(512 * sizeof *ids);
    double t0 = now_s();
    for (int pos = 0; pos < prompt && !rc;) {
        int k = prompt - pos < 512 ? prompt - pos : 512;
        if (pos < sp.o1_seal && pos + k > sp.o1_seal) k = sp.o1_seal - pos;
        for (int i = 0; i < k; i++) ids[i] = tok(pos + i, V);
        if (cmf_session_prefill(s, ids, k, NULL) != CMF_OK) rc = 1;
        pos += k;
    }
    double t_prompt = now_s() - t0;
    if (!rc && cmf_session_decode(s, tok(prompt, V)) != CMF_OK) rc = 1;
    printf("model %s, o1 %s (%d layers, seal %d), threads %d: prompt %d tokens prefilled in %.1f s, %zu bytes of "
           "KV + state\n",
           model, sp.o1, cmf_session_o1_layers(s), sp.o1_seal, threads, prompt, t_prompt, cmf_session_state_bytes(s));
    for (int i = 0; i < n_at && !rc; i++) {
        if (move_to(s, at[i] - 1, prompt) != 0) {
            fprintf(stderr, "o1_speed: the session has no CPU KV cache\n");
            rc = 1;
            break;
        }
        if (cmf_session_decode(s, tok(at[i] - 1, V)) != CMF_OK) rc = 1; /* untimed */
        double t1 = now_s();
        for (int j = 0; j < n && !rc; j++)
            if (cmf_session_decode(s, tok(at[i] + j, V)) != CMF_OK) rc = 1;
        double dt = now_s() - t1;
        if (!rc)
            printf("| %s | %d | %d | %.2f | %.1f |\n", spec ? spec : "exact", at[i], n, n / dt, 1e3 * dt / n);
        fflush(stdout);
    }
    if (rc) fprintf(stderr, "o1_speed: %s\n", cmf_last_error());
    free(ids);
    cmf_session_free(s);
    cmf_model_free(m);
    return rc;
}
