/* Tests of the CPU attention (src/backend/cpu: kern_attn_qk / kern_attn_pv of every path, cmf_attn_chunk,
 * cmf_attn_merge, and the chunked decode of backend_cpu.c):
 *  - each path's primitives against the scalar path within 1e-5 x sum|terms| (G = 1, 3, 7 query heads per KV head,
 *    head_dim 16, 50, 64, 128, 1..300 positions, KV rows strided as in the cache), and its exp_sum against expf;
 *  - cmf_attn_chunk on every path, over the range in two calls (the running state carried over) and split into
 *    chunks merged by cmf_attn_merge (empty chunks included),
 *    against softmax(q.k * scale (softcapped)) v computed in double: within 2e-5 x max|v|;
 *  - end to end, the hf-tiny qwen2 model at f32: the logits of a decode step at position 1100 (one token, so the
 *    positions are split across the threads and merged) equal those of the same position computed in a prefill
 *    (many tokens: one job per token and KV head, no split) within 1e-4 x max|logit|. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/kern.h"
#include "backend/cpu/ops.h"
#include "cmf.h"
#include "convert/convert.h"
#include "testutil.h"

static uint64_t rng = 0x2545f4914f6cdd1dull;
static float frand(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (float)(rng >> 40) / 16777216.0f * 2.0f - 1.0f;
}

static const cmf_kern *path_table(int p) {
    switch (p) {
    case CMF_CPU_AVX512: return cmf_kern_avx512;
    case CMF_CPU_AVX2: return cmf_kern_avx2;
    case CMF_CPU_NEON: return cmf_kern_neon;
    default: return &cmf_kern_scalar;
    }
}

static void check_primitives(int path, int G, int hd, int n) {
    const cmf_kern *k = path_table(path);
    if (!k || !k->attn_qk || !k->attn_pv) return;
    const int64_t ldq = hd + 3, ldkv = 2 * hd + 5, lds = n + 2, ldo = hd + 1;
    float *q = malloc(sizeof(float) * (size_t)(G * ldq)), *kv = malloc(sizeof(float) * (size_t)(n * ldkv));
    float *s0 = malloc(sizeof(float) * (size_t)(G * lds)), *s1 = malloc(sizeof(float) * (size_t)(G * lds));
    float *o0 = malloc(sizeof(float) * (size_t)(G * ldo)), *o1 = malloc(sizeof(float) * (size_t)(G * ldo));
    for (int64_t i = 0; i < G * ldq; i++) q[i] = frand();
    for (int64_t i = 0; i < n * ldkv; i++) kv[i] = frand() * 3.0f;
    cmf_kern_scalar.attn_qk(q, ldq, G, kv, ldkv, n, hd, s0, lds);
    k->attn_qk(q, ldq, G, kv, ldkv, n, hd, s1, lds);
    int bad = 0;
    for (int g = 0; g < G; g++)
        for (int j = 0; j < n; j++) {
            double mag = 0;
            for (int i = 0; i < hd; i++) mag += fabs((double)q[g * ldq + i] * kv[j * ldkv + i]);
            bad += !(fabs((double)s1[g * lds + j] - s0[g * lds + j]) <= 1e-5 * mag + 1e-30);
        }
    CHECK_MSG(bad == 0, "attn_qk %s G=%d hd=%d n=%d: %d of %d scores off the scalar path", cmf_cpu_path_name(path), G,
              hd, n, bad, G * n);
    for (int64_t i = 0; i < G * lds; i++) s0[i] = frand() * frand() + 0.5f; /* probabilities-like weights */
    for (int64_t i = 0; i < G * ldo; i++) o0[i] = o1[i] = frand();
    cmf_kern_scalar.attn_pv(s0, lds, G, kv + 1, ldkv, n, hd, o0, ldo);
    k->attn_pv(s0, lds, G, kv + 1, ldkv, n, hd, o1, ldo);
    bad = 0;
    for (int g = 0; g < G; g++)
        for (int i = 0; i < ldo; i++) {
            double mag = 1;
            for (int j = 0; j < n && i < hd; j++) mag += fabs((double)s0[g * lds + j] * kv[j * ldkv + 1 + i]);
            bad += !(fabs((double)o1[g * ldo + i] - o0[g * ldo + i]) <= 1e-5 * mag); /* i = hd: untouched pad */
        }
    CHECK_MSG(bad == 0, "attn_pv %s G=%d hd=%d n=%d: %d outputs off the scalar path", cmf_cpu_path_name(path), G, hd,
              n, bad);
    free(q), free(kv), free(s0), free(s1), free(o0), free(o1);
}

/* exp_sum of a path against expf: every value within 1e-6 relative (the polynomial's ~2e-7 plus rounding) and the
 * returned sum within 1e-6 of the sum of the written values; arguments from 0 down to below the clamp at -87. */
static void check_exp(int path) {
    const cmf_kern *k = path_table(path);
    if (!k || !k->exp_sum) return;
    enum { N = 203 };
    float x[N], want[N];
    const float m = 3.5f;
    for (int j = 0; j < N; j++) x[j] = m - (j < 200 ? 0.45f * (float)j * (1.0f + 0.1f * frand()) : 100.0f + j);
    for (int j = 0; j < N; j++) want[j] = expf(x[j] - m);
    const float sum = k->exp_sum(x, N, m);
    double s = 0;
    int bad = 0;
    for (int j = 0; j < N; j++) {
        s += x[j];
        bad += !(fabsf(x[j] - want[j]) <= 1e-6f * want[j] + 1e-37f);
    }
    CHECK_MSG(bad == 0 && fabs(s - sum) <= 1e-6 * s, "exp_sum %s: %d values off expf, sum %g vs %g", cmf_cpu_path_name(path),
              bad, (double)sum, s);
}

/* cmf_attn_chunk (whole range, and nch chunks merged) against the double-precision softmax attention. */
static void check_chunk(int G, int hd, int n, float softcap, int nch) {
    const int64_t ldkv = hd + 7, rec = 2 + hd;
    const float scale = 1.0f / sqrtf((float)hd);
    float *q = malloc(sizeof(float) * (size_t)(G * hd)), *k = malloc(sizeof(float) * (size_t)(n * ldkv));
    float *v = malloc(sizeof(float) * (size_t)(n * ldkv)), *scratch = malloc(sizeof(float) * (size_t)G * CMF_ATTN_SB);
    float *o = malloc(sizeof(float) * (size_t)(G * hd)), *ml = malloc(sizeof(float) * (size_t)(2 * G));
    float *part = malloc(sizeof(float) * (size_t)(nch * G * rec)), *mo = malloc(sizeof(float) * (size_t)hd);
    double *p = malloc(sizeof(double) * (size_t)n);
    for (int i = 0; i < G * hd; i++) q[i] = frand() * 2.0f;
    for (int64_t i = 0; i < n * ldkv; i++) k[i] = frand() * 2.0f, v[i] = frand();
    cmf_attn_reset(G, hd, o, hd, ml, 2); /* the whole range in two calls (the state carries over) */
    cmf_attn_chunk(q, hd, G, k, v, ldkv, n / 2, hd, scale, softcap, scratch, o, hd, ml, 2);
    cmf_attn_chunk(q, hd, G, k + n / 2 * ldkv, v + n / 2 * ldkv, ldkv, n - n / 2, hd, scale, softcap, scratch, o, hd,
                   ml, 2);
    for (int c = 0; c < nch; c++) { /* chunk c of nch, records interleaved by head as backend_cpu.c lays them */
        const int j0 = n * c / nch, j1 = n * (c + 1) / nch;
        float *pc = part + (int64_t)c * G * rec;
        cmf_attn_reset(G, hd, pc + 2, rec, pc, rec);
        cmf_attn_chunk(q, hd, G, k + j0 * ldkv, v + j0 * ldkv, ldkv, j1 - j0, hd, scale, softcap, scratch, pc + 2, rec,
                       pc, rec);
    }
    int bad = 0, badm = 0;
    for (int g = 0; g < G; g++) {
        double mx = -INFINITY, sum = 0;
        for (int j = 0; j < n; j++) {
            double d = 0;
            for (int i = 0; i < hd; i++) d += (double)q[g * hd + i] * k[j * ldkv + i];
            d *= scale;
            if (softcap > 0) d = softcap * tanh(d / softcap);
            p[j] = d;
            mx = d > mx ? d : mx;
        }
        for (int j = 0; j < n; j++) sum += p[j] = exp(p[j] - mx);
        cmf_attn_merge(part + (int64_t)g * rec, nch, (int64_t)G * rec, hd, mo);
        for (int i = 0; i < hd; i++) {
            double want = 0;
            for (int j = 0; j < n; j++) want += p[j] / sum * v[j * ldkv + i];
            bad += !(fabs(o[g * hd + i] / ml[2 * g + 1] - want) <= 2e-5);
            badm += !(fabs(mo[i] - want) <= 2e-5);
        }
    }
    CHECK_MSG(bad == 0 && badm == 0,
              "cmf_attn_chunk %s G=%d hd=%d n=%d softcap=%g: %d outputs off the double reference, %d after a %d-way "
              "merge",
              cmf_cpu_path_name(cmf_cpu_path()), G, hd, n, (double)softcap, bad, badm, nch);
    free(q), free(k), free(v), free(scratch), free(o), free(ml), free(part), free(mo), free(p);
}

/* A NaN in one head's q (or in one key) makes that head's output NaN, whole-range and merged, while the other heads
 * stay finite: the max / exp steps of the online softmax must not drop it (a NaN q_proj weight gave finite
 * logits before; review12). */
static void check_nan(void) {
    enum { G = 3, HD = 32, N = 40, NCH = 3, REC = 2 + HD };
    const int64_t ldkv = HD, rec = REC;
    static float q[G * HD], k[N * HD], v[N * HD], scratch[G * CMF_ATTN_SB], o[G * HD], ml[2 * G];
    static float part[NCH * G * REC], mo[HD];
    for (int kind = 0; kind < 2; kind++) {
        for (int i = 0; i < G * HD; i++) q[i] = frand();
        for (int i = 0; i < N * HD; i++) k[i] = frand(), v[i] = frand();
        if (kind == 0) q[1 * HD + 5] = NAN; /* head 1's query */
        else k[17 * HD + 3] = NAN;          /* key 17: every head's score */
        cmf_attn_reset(G, HD, o, HD, ml, 2);
        cmf_attn_chunk(q, HD, G, k, v, ldkv, N, HD, 0.2f, 0.0f, scratch, o, HD, ml, 2);
        for (int c = 0; c < NCH; c++) {
            const int j0 = N * c / NCH, j1 = N * (c + 1) / NCH;
            float *pc = part + (int64_t)c * G * rec;
            cmf_attn_reset(G, HD, pc + 2, rec, pc, rec);
            cmf_attn_chunk(q, HD, G, k + j0 * ldkv, v + j0 * ldkv, ldkv, j1 - j0, HD, 0.2f, 0.0f, scratch, pc + 2, rec,
                           pc, rec);
        }
        for (int g = 0; g < G; g++) {
            const int want_nan = kind == 1 || g == 1;
            cmf_attn_merge(part + (int64_t)g * rec, NCH, (int64_t)G * rec, HD, mo);
            int nan_w = 0, nan_m = 0;
            for (int i = 0; i < HD; i++) {
                nan_w += isnan(o[g * HD + i] / ml[2 * g + 1]) != 0;
                nan_m += isnan(mo[i]) != 0;
            }
            CHECK_MSG(nan_w == (want_nan ? HD : 0) && nan_m == (want_nan ? HD : 0),
                      "%s: NaN in %s, head %d: %d / %d NaN outputs (whole / merged), want %d",
                      cmf_cpu_path_name(cmf_cpu_path()), kind ? "a key" : "head 1's q", g, nan_w, nan_m,
                      want_nan ? HD : 0);
        }
    }
}

/* Decode at a long position (split and merged) against the same position inside a prefill (not split). */
static void check_decode_split(void) {
    char path[1024];
    snprintf(path, sizeof path, "%s", tmp_path("attn-qwen2.cmf"));
    cmf_convert_opts o = {0};
    CHECK_MSG(cmf_convert_hf(shared_path("data/hf-tiny/qwen2"), path, &o) == CMF_OK, "%s", cmf_last_error());
    cmf_model_params mp;
    memset(&mp, 0, sizeof mp);
    mp.n_threads = 2;
    cmf_model *m = NULL;
    CHECK_MSG(cmf_model_load(path, &mp, &m) == CMF_OK, "%s", cmf_last_error());
    if (!m) return;
    enum { P = 1100 };
    const int V = cmf_model_vocab_size(m);
    int32_t *ids = malloc(sizeof(int32_t) * (P + 1));
    for (int i = 0; i <= P; i++) ids[i] = (int32_t)((i * 7919 + 13) % V);
    float *lp = malloc(sizeof(float) * (size_t)(P + 1) * V);
    cmf_session *a = NULL, *b = NULL;
    CHECK(cmf_session_new(m, P + 8, &a) == CMF_OK && cmf_session_new(m, P + 8, &b) == CMF_OK);
    if (a && b) {
        CHECK_MSG(cmf_session_prefill(a, ids, P + 1, lp) == CMF_OK, "%s", cmf_last_error());
        CHECK_MSG(cmf_session_prefill(b, ids, P, NULL) == CMF_OK, "%s", cmf_last_error());
        CHECK_MSG(cmf_session_decode(b, ids[P]) == CMF_OK, "%s", cmf_last_error());
        const float *want = lp + (size_t)P * V, *got = cmf_session_logits(b);
        float mx = 0, md = 0;
        for (int i = 0; i < V; i++) {
            mx = fabsf(want[i]) > mx ? fabsf(want[i]) : mx;
            md = fabsf(want[i] - got[i]) > md ? fabsf(want[i] - got[i]) : md;
        }
        printf("decode at position %d vs prefill: max|diff|/max|logit| = %.2e\n", P, md / mx);
        CHECK_MSG(mx > 0 && md <= 1e-4f * mx, "decode at %d: max|diff| %g > 1e-4 x %g", P, md, mx);
    }
    cmf_session_free(a);
    cmf_session_free(b);
    cmf_model_free(m);
    free(ids);
    free(lp);
    remove(path);
}

int main(void) {
    const int best = cmf_cpu_path();
    int paths[4], np = 0;
    for (int p = CMF_CPU_NEON; p <= CMF_CPU_AVX512; p++)
        if (cmf_cpu_path_supported(p)) paths[np++] = p;
    paths[np++] = CMF_CPU_SCALAR;
    const int Gs[] = {1, 3, 7}, hds[] = {16, 50, 64, 128}, ns[] = {1, 17, 64, 65, 300};
    for (int pi = 0; pi < np; pi++)
        for (int a = 0; a < 3; a++)
            for (int h = 0; h < 4; h++)
                for (int c = 0; c < 5; c++) check_primitives(paths[pi], Gs[a], hds[h], ns[c]);
    for (int pi = 0; pi < np; pi++) check_exp(paths[pi]);
    for (int pi = 0; pi < np; pi++) {
        CHECK(cmf_cpu_set_path(paths[pi]) == CMF_OK);
        check_chunk(1, 64, 1, 0, 1);
        check_chunk(3, 50, 200, 0, 3);
        check_chunk(7, 64, 300, 0, 5);
        check_chunk(2, 128, 129, 50.0f, 4);
        check_chunk(4, 16, 3, 0, 5); /* more chunks than positions: empty chunks */
        check_nan();
    }
    CHECK(cmf_cpu_set_path(best) == CMF_OK);
    check_decode_split();
    CMF_TEST_END();
}
