/* sample_grid.h — shared by tests/model/test_session_sample.c (CPU) and tests/gpu/test_gpu_sample.c (CUDA):
 * cmf_session_sample against cmf_sampler_sample over a grid of sampler settings, and a host model of the device's
 * selection (the 64-bit keys of src/backend/cuda/sample.cu, sorted by qsort) feeding cmf_sampler_finish_topk.
 * Static inline functions (a program may leave some unused); needs testutil.h, cmf.h, sample/sample.h before it. */
#ifndef CMF_TESTS_SAMPLE_GRID_H
#define CMF_TESTS_SAMPLE_GRID_H

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- the device's keys, written again on the host from their definition (cuda_ops.h) ---- */
static inline uint32_t grid_okey(float v) {
    if (isnan(v)) return 0u;
    if (v == 0.0f) v = 0.0f;
    uint32_t u;
    memcpy(&u, &v, sizeof u);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}
static inline uint64_t grid_key(uint32_t ok, int i) {
    return ((uint64_t)ok << 32) | (uint64_t)(0xffffffffu - (uint32_t)i);
}
static inline float grid_key_value(uint64_t key) {
    const uint32_t hi = (uint32_t)(key >> 32), b = (hi & 0x80000000u) ? (hi & 0x7fffffffu) : ~hi;
    float f;
    memcpy(&f, &b, sizeof f);
    return f;
}
static inline int grid_cmp_desc(const void *a, const void *b) {
    const uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? 1 : x > y ? -1 : 0;
}
/* Keys of row[0..n): greedy (temp <= 0) the values, else the candidates z = l / temp (+inf -> 3e38, NaN / -inf
 * -> 0), sorted descending into keys (caller's [n]). */
static inline void grid_keys(const float *row, int n, float temp, uint64_t *keys) {
    for (int i = 0; i < n; i++) {
        uint32_t ok;
        if (temp <= 0.0f) {
            ok = grid_okey(row[i]);
        } else {
            float z = row[i] / temp;
            if (isnan(z) || z == -INFINITY) ok = 0;
            else ok = grid_okey(z == INFINITY ? 3.0e38f : z);
        }
        keys[i] = grid_key(ok, i);
    }
    qsort(keys, (size_t)n, sizeof *keys, grid_cmp_desc);
}

/* What the device path computes, on the host: penalties from the sampler's window into a copy, then the greedy id
 * or the sorted top-k list handed to cmf_sampler_finish_topk; settings without a device path (top_k 0 or above
 * 1024 with a temperature) sample the row, as cmf_session_sample does. Returns the status as cmf_session_sample
 * would. */
static inline cmf_status grid_emulated(cmf_sampler *smp, const float *logits, int V, int32_t *token) {
    const cmf_sampler_params *p = cmf_sampler_params_of(smp);
    if (p->temperature > 0.0f && (p->top_k == 0 || p->top_k > 1024)) /* no device path (CMF_DEV_SAMPLE_MAXK) */
        return cmf_sampler_sample(smp, logits, token);
    float *row = malloc((size_t)V * sizeof *row);
    uint64_t *keys = malloc((size_t)V * sizeof *keys);
    cmf_sample_cand *c = malloc((size_t)V * sizeof *c);
    memcpy(row, logits, (size_t)V * sizeof *row);
    const int32_t *ids, *counts;
    const int m = cmf_sampler_penalty_window(smp, &ids, &counts);
    for (int i = 0; i < m; i++)
        row[ids[i]] = cmf_sample_penalize(row[ids[i]], counts[i], p->repeat_penalty, p->presence_penalty,
                                          p->frequency_penalty);
    cmf_status st;
    grid_keys(row, V, p->temperature, keys);
    if (p->temperature <= 0.0f) {
        /* session_sample.c's greedy branch: no number (all NaN) or the maximum is -inf: an error */
        st = (keys[0] >> 32) && grid_key_value(keys[0]) != -INFINITY ? CMF_OK : CMF_E_ARG;
        *token = (int32_t)(0xffffffffu - (uint32_t)keys[0]);
    } else {
        const int k = p->top_k < V ? p->top_k : V;
        int n = 0;
        while (n < k && (keys[n] >> 32)) {
            c[n].z = grid_key_value(keys[n]);
            c[n].id = (int32_t)(0xffffffffu - (uint32_t)keys[n]);
            n++;
        }
        st = cmf_sampler_finish_topk(smp, c, n, token);
    }
    free(row);
    free(keys);
    free(c);
    return st;
}

/* The settings of the grid. */
typedef struct grid_setting {
    const char *name;
    float temperature;
    int top_k;
    float top_p, min_p, repeat, presence, frequency;
    int last_n;
    uint64_t seed;
} grid_setting;

static const grid_setting GRID[] = {
    {"greedy", 0.0f, 40, 1.0f, 0.0f, 1.0f, 0.0f, 0.0f, 64, 0},
    {"greedy+penalties", 0.0f, 0, 1.0f, 0.0f, 1.3f, 0.2f, 0.15f, 16, 0},
    {"greedy+neg presence", -1.0f, 0, 1.0f, 0.0f, 0.9f, -0.4f, 0.0f, 8, 0},
    {"top-k 40 t0.8", 0.8f, 40, 1.0f, 0.0f, 1.0f, 0.0f, 0.0f, 64, 1},
    {"top-k 40 t0.8 seed 7", 0.8f, 40, 1.0f, 0.0f, 1.0f, 0.0f, 0.0f, 64, 7},
    {"top-k 40 top-p 0.9 min-p 0.05", 1.0f, 40, 0.9f, 0.05f, 1.0f, 0.0f, 0.0f, 64, 2},
    {"top-k 50 top-p 0.95 penalties", 0.7f, 50, 0.95f, 0.0f, 1.1f, 0.1f, 0.05f, 32, 3},
    {"top-k 5 t1.5 penalties", 1.5f, 5, 1.0f, 0.0f, 1.5f, 0.0f, 0.3f, 64, 4},
    {"top-k 1 t2", 2.0f, 1, 1.0f, 0.0f, 1.0f, 0.0f, 0.0f, 64, 5},
    {"top-k 1000 t0.3 min-p 0.1", 0.3f, 1000, 1.0f, 0.1f, 1.0f, 0.0f, 0.0f, 64, 6},
    {"top-k 1024 t3 top-p 0.5", 3.0f, 1024, 0.5f, 0.0f, 1.0f, 0.0f, 0.0f, 64, 8},
    {"top-k 0 top-p 0.9 t0.7 (row fallback)", 0.7f, 0, 0.9f, 0.0f, 1.0f, 0.0f, 0.0f, 64, 9},
    {"top-k 0 t1", 1.0f, 0, 1.0f, 0.0f, 1.2f, 0.0f, 0.0f, 64, 10},
    {"top-k 2000 t1 (row fallback)", 1.0f, 2000, 1.0f, 0.0f, 1.0f, 0.0f, 0.0f, 64, 11},
    {"top-k 40 t0.05 seed 12", 0.05f, 40, 0.8f, 0.0f, 1.0f, 0.0f, 0.0f, 64, 12},
};
enum { GRID_STEPS = 40 };

static inline cmf_sampler *grid_sampler(int V, const grid_setting *g) {
    cmf_sampler_params p = cmf_sampler_default_params();
    p.temperature = g->temperature;
    p.top_k = g->top_k;
    p.top_p = g->top_p;
    p.min_p = g->min_p;
    p.repeat_penalty = g->repeat;
    p.presence_penalty = g->presence;
    p.frequency_penalty = g->frequency;
    p.penalty_last_n = g->last_n;
    p.seed = g->seed;
    cmf_sampler *s = NULL;
    CHECK_MSG(cmf_sampler_new(V, &p, &s) == CMF_OK, "sampler %s: %s", g->name, cmf_last_error());
    return s;
}

/* Every grid setting on model m: a prompt, then GRID_STEPS steps; each step cmf_session_sample (sampler a; FIRST,
 * so that on CUDA it reads the device row), cmf_sampler_sample on cmf_session_logits (sampler b, the downloaded
 * row) and the host model of the device path (sampler c) must give the same token; all three accept it and it is
 * decoded next. Returns the number of steps checked. */
static inline int grid_run(cmf_model *m, const char *label) {
    const int V = cmf_model_vocab_size(m);
    int checked = 0;
    for (size_t gi = 0; gi < sizeof GRID / sizeof *GRID; gi++) {
        const grid_setting *g = &GRID[gi];
        cmf_sampler *a = grid_sampler(V, g), *b = grid_sampler(V, g), *c = grid_sampler(V, g);
        cmf_session *s = NULL;
        CHECK_MSG(cmf_session_new(m, 128, &s) == CMF_OK, "%s: session: %s", label, cmf_last_error());
        if (!a || !b || !c || !s) break;
        int32_t prompt[6];
        for (int i = 0; i < 6; i++) prompt[i] = (int32_t)((gi * 37 + (size_t)i * 11 + 1) % (size_t)V);
        for (int i = 0; i < 6; i++) cmf_sampler_accept(a, prompt[i]), cmf_sampler_accept(b, prompt[i]),
                                    cmf_sampler_accept(c, prompt[i]);
        CHECK_MSG(cmf_session_prefill(s, prompt, 6, NULL) == CMF_OK, "%s: prefill: %s", label, cmf_last_error());
        for (int step = 0; step < GRID_STEPS; step++) {
            int32_t ta = -1, tb = -2, tc = -3;
            cmf_status sa = cmf_session_sample(s, a, &ta);
            cmf_status sb = cmf_sampler_sample(b, cmf_session_logits(s), &tb);
            cmf_status sc = grid_emulated(c, cmf_session_logits(s), V, &tc);
            CHECK_MSG(sa == CMF_OK && sb == CMF_OK && sc == CMF_OK, "%s %s step %d: status %d %d %d: %s", label,
                      g->name, step, (int)sa, (int)sb, (int)sc, cmf_last_error());
            CHECK_MSG(ta == tb && tb == tc, "%s %s step %d: session_sample %d, sampler_sample %d, emulated %d",
                      label, g->name, step, ta, tb, tc);
            if (sa != CMF_OK || ta != tb || tb != tc) break;
            checked++;
            cmf_sampler_accept(a, ta), cmf_sampler_accept(b, ta), cmf_sampler_accept(c, ta);
            if (cmf_session_decode(s, ta) != CMF_OK) {
                CHECK_MSG(0, "%s: decode: %s", label, cmf_last_error());
                break;
            }
        }
        cmf_session_free(s);
        cmf_sampler_free(a);
        cmf_sampler_free(b);
        cmf_sampler_free(c);
    }
    return checked;
}

/* Crafted rows: cmf_sampler_sample and the host model of the device path agree (ties at the maximum, NaN, -inf,
 * all -inf, +inf, signed zeros, k above the finite count, k = vocab). */
static inline void grid_crafted(void) {
    enum { V = 12 };
    const float NANF = nanf(""), INF = INFINITY;
    static float rows[][V] = {
        {1, 3, 3, 2, 3, 0, -1, 3, 2, 1, 0, 3},                                /* ties at the maximum */
        {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},                                 /* all equal */
        {-0.0f, 0.0f, -0.0f, -1, -2, -3, -4, -5, -6, -7, -8, -0.0f},          /* signed zeros */
        {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11},                               /* ascending */
        {-1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1},                     /* equal negatives */
        {1e38f, 3e38f, 3.3e38f, 1, 2, 3, 4, 5, 6, 7, 8, 9},                   /* huge values overflow z */
        {-1e38f, -3e38f, -3.3e38f, 1e-30f, 2e-38f, 1e-45f, 0, 0, 0, 0, 0, 0}, /* tiny values underflow z */
    };
    float special[6][V];
    for (int i = 0; i < V; i++) {
        special[0][i] = i % 3 == 0 ? NANF : (float)(i % 5); /* NaN */
        special[1][i] = i % 2 ? -INF : (float)i;            /* -inf */
        special[2][i] = -INF;                                /* all -inf: nothing to draw, greedy too */
        special[3][i] = i == 7 || i == 4 ? INF : (float)i;   /* +inf ties */
        special[4][i] = i < 3 ? (float)i : -INF;            /* fewer finite values than k */
        special[5][i] = NANF;                                /* all NaN: an error everywhere */
    }
    static const grid_setting cfg[] = {
        {"greedy", 0.0f, 0, 1.0f, 0.0f, 1.0f, 0.0f, 0.0f, 0, 0},
        {"k3", 1.0f, 3, 1.0f, 0.0f, 1.0f, 0.0f, 0.0f, 0, 1},
        {"k5 p0.6", 0.5f, 5, 0.6f, 0.0f, 1.0f, 0.0f, 0.0f, 0, 2},
        {"k=vocab min-p", 2.0f, V, 1.0f, 0.3f, 1.0f, 0.0f, 0.0f, 0, 3},
        {"k above vocab", 1e-30f, 100, 1.0f, 0.0f, 1.0f, 0.0f, 0.0f, 0, 4},
        {"k4 t1e30", 1e30f, 4, 0.9f, 0.0f, 1.0f, 0.0f, 0.0f, 0, 5},
    };
    for (size_t r = 0; r < sizeof rows / sizeof *rows + 6; r++) {
        const float *row = r < sizeof rows / sizeof *rows ? rows[r] : special[r - sizeof rows / sizeof *rows];
        for (size_t ci = 0; ci < sizeof cfg / sizeof *cfg; ci++) {
            cmf_sampler *b = grid_sampler(V, &cfg[ci]), *c = grid_sampler(V, &cfg[ci]);
            for (int d = 0; d < 8 && b && c; d++) {
                int32_t tb = -2, tc = -3;
                cmf_status sb = cmf_sampler_sample(b, row, &tb), sc = grid_emulated(c, row, V, &tc);
                CHECK_MSG(sb == sc && (sb != CMF_OK || tb == tc), "crafted row %zu %s draw %d: status %d/%d, %d/%d",
                          r, cfg[ci].name, d, (int)sb, (int)sc, tb, tc);
            }
            cmf_sampler_free(b);
            cmf_sampler_free(c);
        }
    }
}

#endif
