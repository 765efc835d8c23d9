/* Sampling on the device (issue 6; src/backend/cuda/sample.cu, backend_sample.cu, src/model/session_sample.c):
 *  - the kernels on crafted and random rows against their definition written on the host (tests/model/
 *    sample_grid.h: the 64-bit keys sorted by qsort): cmf_cuda_argmax_key and cmf_cuda_topk_keys, raw (temp 0)
 *    and candidate (temp > 0) keys, over ties at the maximum, NaN, -inf, all -inf, all NaN, +inf, signed zeros,
 *    k above the number of finite values, k = n, n = 1, n not a multiple of the 4096-key tile, and a 151,936-wide
 *    row with k = 1, 40, 1024 (the merge's several rounds); cmf_cuda_penalize against cmf_sample_penalize bit for
 *    bit; the scratch's counters reused by back-to-back calls;
 *  - on hf-tiny llama (f16) and qwen3 (q8_row) loaded on "cuda": the grid of sample_grid.h (greedy, penalties,
 *    temperatures, top-k 1 .. vocab, top-p, min-p, top_k 0 / 2000 falling back to the row; 40 steps each):
 *    cmf_session_sample (the device path, called first) gives the token of cmf_sampler_sample on the downloaded
 *    cmf_session_logits and of the host model of the device path, step after step;
 *  - a cmf_batch_run of three sessions: cmf_session_sample on each (rows kept on the device per session) equals
 *    cmf_sampler_sample on each session's downloaded row.
 * Without a usable CUDA device (CI, this build machine): the crafted rows of the host model only, then exit 77
 * (ctest SKIP). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmf.h"
#include "convert/convert.h"
#include "quant/dtype.h"
#include "sample/sample.h"
#include "testutil.h"
#ifdef CMF_HAVE_CUDA
#include "backend/cuda/cuda_ops.h"
#endif

#include "../model/sample_grid.h"

#ifdef CMF_HAVE_CUDA
static void *g_work; /* sample.cu's scratch, zeroed once */
static int64_t g_work_n;

static void work_for(int64_t n) {
    if (g_work && n <= g_work_n) return;
    cmf_cuda_free(g_work);
    const size_t b = cmf_cuda_sample_work_bytes(n);
    CHECK(cmf_cuda_malloc(&g_work, b) == CMF_OK && cmf_cuda_memset(g_work, 0, b, NULL) == CMF_OK);
    g_work_n = n;
}

/* Device keys of row[0..n) (argmax when k == 0) against the host's sorted keys. */
static void check_keys(const char *what, const float *row, int n, int k, float temp) {
    work_for(n);
    float *d = NULL;
    CHECK(cmf_cuda_malloc((void **)&d, (size_t)n * sizeof(float)) == CMF_OK);
    CHECK(cmf_cuda_upload(d, row, (size_t)n * sizeof(float), NULL) == CMF_OK);
    uint64_t *want = malloc((size_t)n * sizeof *want), got[1024], *d_keys = NULL;
    grid_keys(row, n, temp, want);
    const int cnt = k > 0 ? k : 1;
    cmf_status st = k > 0 ? cmf_cuda_topk_keys(d, n, k, temp, g_work, NULL, &d_keys)
                          : cmf_cuda_argmax_key(d, n, g_work, NULL, &d_keys);
    CHECK_MSG(st == CMF_OK, "%s: %s", what, cmf_last_error());
    if (st == CMF_OK) {
        CHECK(cmf_cuda_download(got, d_keys, (size_t)cnt * sizeof(uint64_t), NULL) == CMF_OK);
        CHECK(cmf_cuda_sync(NULL) == CMF_OK);
        for (int i = 0; i < cnt; i++) {
            const uint64_t w = i < n ? want[i] : 0; /* k > n: key 0 behind the elements */
            if (got[i] != w) {
                CHECK_MSG(0, "%s (n %d k %d temp %g): key %d = %016llx (id %d), want %016llx (id %d)", what, n, k,
                          (double)temp, i, (unsigned long long)got[i], cmf_cuda_key_id(got[i]),
                          (unsigned long long)w, cmf_cuda_key_id(w));
                break;
            }
        }
        if (k == 0) { /* the public argmax too */
            int32_t id = -1;
            CHECK(cmf_cuda_argmax(d, n, &id, g_work, NULL) == CMF_OK && id == cmf_cuda_key_id(want[0]));
        }
    }
    free(want);
    cmf_cuda_free(d);
}

static uint64_t g_rng = 0x9e3779b97f4a7c15ull;
static float frand(void) {
    g_rng ^= g_rng << 13, g_rng ^= g_rng >> 7, g_rng ^= g_rng << 17;
    return (float)((g_rng >> 40) & 0xffffff) / 16777216.0f * 16.0f - 8.0f;
}

static void kernel_cases(void) {
    enum { N = 151936 };
    float *x = malloc(N * sizeof *x);
    const float NANF = nanf(""), INF = INFINITY;
    /* random rows, a tie at the maximum, values repeated (coarse grid): every k, both key kinds */
    for (int i = 0; i < N; i++) x[i] = roundf(frand() * 64.0f) / 64.0f;
    x[77777] = x[150000] = x[123] = 9.5f;
    static const int KS[] = {0, 1, 2, 40, 100, 1000, 1024};
    for (size_t i = 0; i < sizeof KS / sizeof *KS; i++) {
        check_keys("random 151936 raw", x, N, KS[i], 0.0f);
        if (KS[i]) check_keys("random 151936 z", x, N, KS[i], 0.7f);
    }
    for (int rep = 0; rep < 3; rep++) check_keys("counter reuse", x, N, 40, 1.3f); /* back to back, one scratch */
    for (int rep = 0; rep < 3; rep++) check_keys("counter reuse argmax", x, N, 0, 0.0f);
    /* widths around the tile */
    static const int NS[] = {1, 7, 4095, 4096, 4097, 12289, 128256};
    for (size_t i = 0; i < sizeof NS / sizeof *NS; i++) {
        check_keys("width raw", x, NS[i], 0, 0.0f);
        check_keys("width k40", x, NS[i], 40, 1.0f);
        check_keys("width k=n", x, NS[i], NS[i] <= 1024 ? NS[i] : 1024, 2.0f);
    }
    /* crafted rows of 1000 */
    enum { M = 1000 };
    float *r = malloc(M * sizeof *r);
    for (int c = 0; c < 9; c++) {
        for (int i = 0; i < M; i++) {
            switch (c) {
            case 0: r[i] = (i % 7 == 3) ? 5.0f : frand(); break;                  /* ties at the maximum */
            case 1: r[i] = (i % 3 == 0) ? NANF : frand(); break;                  /* NaN */
            case 2: r[i] = (i % 2) ? -INF : frand(); break;                       /* -inf */
            case 3: r[i] = -INF; break;                                           /* all -inf */
            case 4: r[i] = NANF; break;                                           /* all NaN */
            case 5: r[i] = i < 10 ? frand() : (i % 2 ? -INF : NANF); break;       /* 10 finite values < k */
            case 6: r[i] = (i % 100 == 0) ? INF : frand(); break;                 /* +inf */
            case 7: r[i] = (i % 2) ? -0.0f : 0.0f; break;                          /* signed zeros */
            case 8: r[i] = (i % 5 == 0) ? 3.3e38f : frand() * 1e37f; break;        /* z overflows at small temp */
            }
        }
        char what[64];
        snprintf(what, sizeof what, "crafted %d", c);
        check_keys(what, r, M, 0, 0.0f);
        static const int CK[] = {1, 5, 40, 999, 1000, 1024};
        static const float CT[] = {0.0f, 1.0f, 0.01f, 1e30f};
        for (size_t k = 0; k < sizeof CK / sizeof *CK; k++)
            for (size_t t = 0; t < sizeof CT / sizeof *CT; t++) check_keys(what, r, M, CK[k], CT[t]);
    }
    /* penalties: bit for bit */
    {
        float *d = NULL, *out = malloc(M * sizeof *out);
        for (int i = 0; i < M; i++) r[i] = frand();
        int32_t ids[100], counts[100];
        for (int i = 0; i < 100; i++) ids[i] = i * 9 + 1, counts[i] = 1 + i % 4;
        CHECK(cmf_cuda_malloc((void **)&d, M * sizeof(float)) == CMF_OK);
        CHECK(cmf_cuda_upload(d, r, M * sizeof(float), NULL) == CMF_OK);
        CHECK(cmf_cuda_penalize(d, M, ids, counts, 100, 1.37f, 0.11f, -0.29f, NULL) == CMF_OK);
        CHECK(cmf_cuda_download(out, d, M * sizeof(float), NULL) == CMF_OK && cmf_cuda_sync(NULL) == CMF_OK);
        for (int i = 0; i < 100; i++) r[ids[i]] = cmf_sample_penalize(r[ids[i]], counts[i], 1.37f, 0.11f, -0.29f);
        CHECK_MSG(!memcmp(out, r, M * sizeof(float)), "penalized row differs from the host's bits");
        CHECK(cmf_cuda_penalize(d, M, (const int32_t[]){M}, (const int32_t[]){1}, 1, 1, 0, 0, NULL) == CMF_E_ARG);
        cmf_cuda_free(d);
        free(out);
    }
    free(r);
    free(x);
}

static cmf_model *load_gpu(const char *hf, int dtype) {
    char path[1024], dir[256];
    snprintf(path, sizeof path, "gpu-sample-%s.cmf", hf);
    snprintf(path, sizeof path, "%s", tmp_path(path));
    snprintf(dir, sizeof dir, "data/hf-tiny/%s", hf);
    cmf_convert_opts o = {0};
    o.quant = dtype;
    CHECK_MSG(cmf_convert_hf(shared_path(dir), path, &o) == CMF_OK, "%s: %s", hf, cmf_last_error());
    cmf_model *m = NULL;
    CHECK_MSG(cmf_model_load_on(path, NULL, "cuda", &m) == CMF_OK, "%s on cuda: %s", hf, cmf_last_error());
    return m;
}

/* Three sessions through one batch (rows kept on the device per session), sampled each. */
static void batch_case(cmf_model *m) {
    const int V = cmf_model_vocab_size(m);
    enum { NS = 3 };
    cmf_session *s[NS] = {0};
    cmf_sampler *a[NS] = {0}, *b[NS] = {0};
    cmf_batch *bt = NULL;
    CHECK(cmf_batch_new(m, 16, NS, &bt) == CMF_OK);
    for (int i = 0; i < NS; i++) {
        CHECK(cmf_session_new(m, 64, &s[i]) == CMF_OK);
        a[i] = grid_sampler(V, &GRID[i == 0 ? 0 : i == 1 ? 5 : 6]);
        b[i] = grid_sampler(V, &GRID[i == 0 ? 0 : i == 1 ? 5 : 6]);
    }
    int32_t next[NS] = {1, 2, 3};
    for (int step = 0; step < 20 && bt; step++) {
        CHECK_MSG(cmf_batch_run(bt, s, next, NS) == CMF_OK, "batch: %s", cmf_last_error());
        for (int i = 0; i < NS; i++) {
            int32_t ta = -1, tb = -2;
            CHECK(cmf_session_sample(s[i], a[i], &ta) == CMF_OK);
            CHECK(cmf_sampler_sample(b[i], cmf_session_logits(s[i]), &tb) == CMF_OK);
            CHECK_MSG(ta == tb, "batch step %d session %d: device %d, host %d", step, i, ta, tb);
            cmf_sampler_accept(a[i], tb), cmf_sampler_accept(b[i], tb);
            next[i] = tb;
        }
    }
    for (int i = 0; i < NS; i++) cmf_session_free(s[i]), cmf_sampler_free(a[i]), cmf_sampler_free(b[i]);
    cmf_batch_free(bt);
}
#endif

int main(void) {
    grid_crafted(); /* the host model of the device path, as tests/model/test_session_sample */
    int n = 0;
#ifdef CMF_HAVE_CUDA
    cmf_cuda_device_count(&n);
#endif
    if (n <= 0) {
        if (cmf_test_failures) CMF_TEST_END();
        printf("SKIP: no usable CUDA device\n");
        return 77;
    }
#ifdef CMF_HAVE_CUDA
    kernel_cases();
    static const struct {
        const char *hf;
        int dtype;
    } MS[] = {{"llama", CMF_DT_F16}, {"qwen3", CMF_DT_Q8_ROW}};
    for (size_t i = 0; i < sizeof MS / sizeof *MS; i++) {
        cmf_model *m = load_gpu(MS[i].hf, MS[i].dtype);
        if (!m) continue;
        const int steps = grid_run(m, MS[i].hf);
        printf("%s on cuda: %d steps agree\n", MS[i].hf, steps);
        CHECK_MSG(steps == (int)(sizeof GRID / sizeof *GRID) * GRID_STEPS, "%s: %d steps", MS[i].hf, steps);
        batch_case(m);
        cmf_model_free(m);
    }
    cmf_cuda_free(g_work);
#endif
    CMF_TEST_END();
}
