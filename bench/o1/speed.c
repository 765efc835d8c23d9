/* speed.c — decode speed (tokens/s of single-token steps) at given context positions, exact attention against
 * the O(1) far field (DORY.md §3.1), both measured in ONE run and reported side by side with their ratio.
 *
 *   o1_speed MODEL.cmf [--at 4096,32768] [-n 8] [-t T] [--o1 all] [--o1-seal 2048] [--real] [--o1-only]
 *
 * Two sessions of the same model are built for each position A of --at: "exact" (o1 off) and "o1" (--o1 SPEC,
 * seal length S = --o1-seal). Each is brought to position A - 1, one untimed single-token step runs at A - 1,
 * then the n timed steps run at positions A .. A+n-1, alternating exact / o1 step by step (so a change of load
 * on the shared machine hits both columns alike). t/s = n / (sum of that session's step times); the CPU time
 * of the process (all threads) per step is reported beside it, being far less sensitive to other jobs' load.
 *
 * How a session reaches position A - 1:
 *  - synthetic (default; prefilling 32K tokens exactly takes hours on 2 cores): no model run. The KV cache rows
 *    0..A-2 of every layer that keeps them, and the query trace rows 0..S-1 of far-field layers, are filled
 *    through the session's internals (src/model/model.h) with pseudo-random values of unit variance (uniform on
 *    [-sqrt 3, sqrt 3], xorshift64*, fixed seed) — the scale of real rows, which are RMS-normalised (q/k norm,
 *    weight 1 here) and rotated (RoPE keeps the norm). For the o1 session: the position is set to S and one
 *    real untimed step at position S seals the far field from those S rows (cmf_o1_seal through the session,
 *    exactly as after a real prompt), then the position is set to A - 1. Far-field layers keep no rows past S;
 *    layers left exact (e.g. --o1 deep4) get their rows up to A - 2 filled like the exact session's.
 *    Why this times the real thing: one exact decode step reads every cached row of every layer (cost linear
 *    in the position, independent of the values); one far-field step reads its constant state (window + sinks
 *    + m landmarks per KV head), whose size does not depend on the position or on S; the position itself only
 *    enters RoPE. The rest of the step (weights, norms, MLP, head) is the same real code as in any decode.
 *  - --real: one real prompt of A - 1 tokens (ids (37·i + 11) mod vocab) is prefilled exactly in the o1
 *    session (seal length A - 1: its far-field layers keep every prompt row and record the query trace), and
 *    the exact session receives a copy of those KV rows, so both continue from one real prefill; the o1
 *    session's first step seals from the real rows. One --at value only. This is the end-to-end check of the
 *    synthetic figure at the same position.
 * --o1-only: the far-field session alone (no exact column), for a sweep over many positions; without the exact
 * session's multi-GB KV pass in between, its steps also run with warmer caches than in the alternating run.
 * The timed steps feed tokens (37·i + 11) mod vocab. The session internals are a benchmark device, not an API.
 */
#include <math.h>
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

/* CPU seconds of the whole process (every thread): on a shared, loaded machine the wall time of a step stretches
 * with the other jobs' load, its CPU time much less; both are reported. */
static double cpu_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int32_t tok(int i, int V) { return (int32_t)((37 * (int64_t)i + 11) % V); }

/* Unit-variance pseudo-random floats: uniform on [-sqrt 3, sqrt 3] from xorshift64*. */
static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static void fill_random(float *x, size_t n) {
    for (size_t i = 0; i < n; i++) {
        rng_state ^= rng_state >> 12, rng_state ^= rng_state << 25, rng_state ^= rng_state >> 27;
        uint64_t r = rng_state * 0x2545F4914F6CDD1Dull;
        x[i] = (float)(((double)(r >> 11) * (1.0 / 9007199254740992.0) * 2.0 - 1.0) * 1.7320508075688772);
    }
}

/* Fills KV rows [from, to) of every layer l with s->kv_rows[l] >= to (far-field layers keep only S rows and are
 * skipped once to > S). */
static void fill_kv(cmf_session *s, int from, int to) {
    const cmf_config *c = &s->m->cfg;
    const size_t KVD = (size_t)c->n_kv_heads * c->head_dim;
    for (int l = 0; l < c->n_layers; l++) {
        if (s->kv_rows[l] < to) continue;
        fill_random(s->k_cache + s->kv_off[l] + (size_t)from * KVD, (size_t)(to - from) * KVD);
        fill_random(s->v_cache + s->kv_off[l] + (size_t)from * KVD, (size_t)(to - from) * KVD);
    }
}

/* Brings s to position a - 1 synthetically (see the file comment). o1 sessions: seal over S rows first. */
static int synth_to(cmf_session *s, int a, int seal, int V) {
    const cmf_config *c = &s->m->cfg;
    if (!s->k_cache) return fprintf(stderr, "o1_speed: the session has no CPU KV cache\n"), -1;
    if (s->o1) {
        fill_kv(s, 0, seal);
        for (int l = 0; l < c->n_layers; l++)
            if (s->o1->on[l]) fill_random(s->o1->qtrace[l], (size_t)seal * c->n_heads * c->head_dim);
        s->pos = seal;
        if (cmf_session_decode(s, tok(seal, V)) != CMF_OK) return -1; /* seals, then one real far-field step */
        if (!s->o1->sealed) return fprintf(stderr, "o1_speed: the far field did not seal\n"), -1;
    }
    fill_kv(s, s->pos, a - 1);
    s->pos = a - 1;
    return 0;
}

/* --real: prefills A-1 tokens in o1 (exactly: the seal length is A-1) and copies the KV rows into ex. */
static int real_to(cmf_session *ex, cmf_session *o1, int a, int V) {
    const cmf_config *c = &ex->m->cfg;
    const int P = a - 1;
    int32_t *ids = malloc((size_t)P * sizeof *ids);
    if (!ids) return -1;
    for (int i = 0; i < P; i++) ids[i] = tok(i, V);
    double t0 = now_s();
    cmf_status st = cmf_session_prefill(o1, ids, P, NULL);
    free(ids);
    if (st != CMF_OK) return -1;
    printf("real prompt: %d tokens prefilled exactly in %.1f s (%.2f tok/s)\n", P, now_s() - t0, P / (now_s() - t0));
    if (!ex->k_cache || !o1->k_cache) return fprintf(stderr, "o1_speed: the session has no CPU KV cache\n"), -1;
    const size_t KVD = (size_t)c->n_kv_heads * c->head_dim;
    for (int l = 0; l < c->n_layers; l++) {
        memcpy(ex->k_cache + ex->kv_off[l], o1->k_cache + o1->kv_off[l], (size_t)P * KVD * sizeof(float));
        memcpy(ex->v_cache + ex->kv_off[l], o1->v_cache + o1->kv_off[l], (size_t)P * KVD * sizeof(float));
    }
    ex->pos = P;
    return 0;
}

static int timed_step(cmf_session *s, int32_t t, double *acc, double *cpu) {
    double t0 = now_s(), c0 = cpu_s();
    cmf_status st = cmf_session_decode(s, t);
    *acc += now_s() - t0;
    *cpu += cpu_s() - c0;
    return st == CMF_OK ? 0 : -1;
}

int main(int argc, char **argv) {
    const char *model = NULL, *spec = "all";
    int n = 8, threads = 0, seal = 2048, real = 0, only = 0, at[16], n_at = 2;
    at[0] = 4096, at[1] = 32768;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int has = i + 1 < argc;
        if (!strcmp(a, "-n") && has) n = atoi(argv[++i]);
        else if (!strcmp(a, "-t") && has) threads = atoi(argv[++i]);
        else if (!strcmp(a, "--o1") && has) spec = argv[++i];
        else if (!strcmp(a, "--o1-seal") && has) seal = atoi(argv[++i]);
        else if (!strcmp(a, "--real")) real = 1;
        else if (!strcmp(a, "--o1-only")) only = 1;
        else if (!strcmp(a, "--at") && has) {
            char *s = argv[++i], *end;
            for (n_at = 0; *s && n_at < 16; s = *end ? end + 1 : end) at[n_at++] = (int)strtol(s, &end, 10);
        } else if (a[0] != '-' && !model) model = a;
        else {
            fprintf(stderr, "usage: o1_speed MODEL.cmf [--at 4096,32768] [-n 8] [-t T] [--o1 all] [--o1-seal 2048] "
                            "[--real]\n");
            return 2;
        }
    }
    if (!model || n < 1 || n_at < 1 || (real && (n_at != 1 || only))) {
        fprintf(stderr, "o1_speed: need MODEL.cmf, -n >= 1, one --at value and no --o1-only with --real\n");
        return 2;
    }
    for (int i = 0; i < n_at; i++)
        if (!real && at[i] <= seal + 1) {
            fprintf(stderr, "o1_speed: --at %d must exceed the seal length %d + 1\n", at[i], seal);
            return 2;
        }
    cmf_model_params mp = {.n_threads = threads};
    cmf_model *m = NULL;
    if (cmf_model_load(model, &mp, &m) != CMF_OK) {
        fprintf(stderr, "o1_speed: %s\n", cmf_last_error());
        return 1;
    }
    const int V = cmf_model_vocab_size(m);
    printf("model %s, threads %d, %s context, o1 '%s' seal %s, %d timed steps per position (alternating)\n", model,
           threads, real ? "real-prefill" : "synthetic", spec, real ? "= prompt" : "--o1-seal", n);
    printf("| position | exact t/s | exact ms/tok | exact CPU ms/tok | o1 t/s | o1 ms/tok | o1 CPU ms/tok | o1/exact "
           "(wall) | o1/exact (CPU) | exact KV bytes | o1 KV+state bytes |\n"
           "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    int rc = 0;
    for (int i = 0; i < n_at && !rc; i++) {
        const int A = at[i];
        cmf_session *ex = NULL, *o1 = NULL;
        cmf_session_params pe = {.n_ctx = A + n, .o1 = "off"};
        cmf_session_params po = {.n_ctx = A + n, .o1 = spec, .o1_seal = real ? A - 1 : seal};
        if ((!only && cmf_session_new_ex(m, &pe, &ex) != CMF_OK) || cmf_session_new_ex(m, &po, &o1) != CMF_OK) rc = 1;
        if (!rc && !o1->o1) {
            fprintf(stderr, "o1_speed: --o1 %s converts no layer of this model\n", spec);
            rc = 2;
        }
        if (!rc && real) rc = real_to(ex, o1, A, V) ? 1 : 0;
        if (!rc && !real) rc = (ex && synth_to(ex, A, seal, V)) || synth_to(o1, A, seal, V) ? 1 : 0;
        double te = 0, to = 0, ce = 0, co = 0, dummy = 0;
        if (!rc) /* untimed */
            rc = (ex && timed_step(ex, tok(A - 1, V), &dummy, &dummy)) ||
                 timed_step(o1, tok(A - 1, V), &dummy, &dummy);
        for (int j = 0; j < n && !rc; j++)
            rc = (ex && timed_step(ex, tok(A + j, V), &te, &ce)) || timed_step(o1, tok(A + j, V), &to, &co);
        if (!rc && ((ex && cmf_session_pos(ex) != A + n) || cmf_session_pos(o1) != A + n || !o1->o1->sealed)) {
            fprintf(stderr, "o1_speed: sessions not at position %d or not sealed\n", A + n);
            rc = 1;
        }
        if (!rc && !ex)
            printf("| %d | - | - | - | %.2f | %.1f | %.1f | - | - | - | %zu |\n", A, n / to, 1e3 * to / n, 1e3 * co / n,
                   cmf_session_state_bytes(o1));
        else if (!rc)
            printf("| %d | %.2f | %.1f | %.1f | %.2f | %.1f | %.1f | %.2fx | %.2fx | %zu | %zu |\n", A, n / te,
                   1e3 * te / n, 1e3 * ce / n, n / to, 1e3 * to / n, 1e3 * co / n, te / to, ce / co,
                   cmf_session_state_bytes(ex), cmf_session_state_bytes(o1));
        else if (rc == 1)
            fprintf(stderr, "o1_speed: %s\n", cmf_last_error());
        fflush(stdout);
        cmf_session_free(ex);
        cmf_session_free(o1);
    }
    cmf_model_free(m);
    return rc;
}
