/* test_o1_golden.c — the O(1) far-field operator against the reference golden
 * (data/golden/nystrom_golden.json, DORY.md §4; generator: cortiq tools/gen_nystrom_golden.py).
 *
 * How the golden defines its outputs (checked below, not assumed): every row t is
 *   near = sinks ∪ the last w rows (exact), far = rows sink..t-w under the skeleton whose landmarks are the
 *   segment means of the PREFILL rows 0..p-1, one joint denominator.
 * So rows t < w + sink (no far keys yet) are exact causal attention, and rows in [w + sink, p) are NOT exact:
 * they use the landmarks of the whole prefill. The streaming operator reproduces them when the sealed state is
 * replayed with readout (cmf_o1_seal's `out`), and rows p..t-1 by stepping after the seal. Both are checked for
 * sink = 4 (`out`) and sink = 0 (`out_sink0`) with the reference's tolerance: max |err| < 1e-3, mean < 1e-4. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/o1.h"
#include "testutil.h"

static char *read_all(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    if (buf) buf[n] = 0;
    fclose(f);
    return buf;
}

static int get_int(const cJSON *root, const char *key) {
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(root, key);
    return cJSON_IsNumber(it) ? it->valueint : -1;
}

/* A [rows][cols] JSON matrix as floats (the generator rounded its inputs to the f32 grid); NULL on bad shape. */
static float *get_mat(const cJSON *root, const char *key, int rows, int cols) {
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(root, key);
    if (!cJSON_IsArray(a) || cJSON_GetArraySize(a) != rows) return NULL;
    float *m = malloc(sizeof(float) * (size_t)rows * (size_t)cols);
    for (int r = 0; r < rows; r++) {
        const cJSON *row = cJSON_GetArrayItem(a, r);
        if (!cJSON_IsArray(row) || cJSON_GetArraySize(row) != cols) {
            free(m);
            return NULL;
        }
        for (int c = 0; c < cols; c++) m[(size_t)r * cols + c] = (float)cJSON_GetArrayItem(row, c)->valuedouble;
    }
    return m;
}

/* Exact causal softmax attention of row t over rows 0..t, in double (an independent reference). */
static void exact_row(const float *q, const float *k, const float *v, int d, int dv, int t, double *out) {
    double mx = -INFINITY, den = 0.0;
    double *s = malloc(sizeof(double) * (size_t)(t + 1));
    for (int j = 0; j <= t; j++) {
        double acc = 0.0;
        for (int c = 0; c < d; c++) acc += (double)q[(size_t)t * d + c] * k[(size_t)j * d + c];
        s[j] = acc / sqrt((double)d);
        if (s[j] > mx) mx = s[j];
    }
    for (int c = 0; c < dv; c++) out[c] = 0.0;
    for (int j = 0; j <= t; j++) {
        double p = exp(s[j] - mx);
        den += p;
        for (int c = 0; c < dv; c++) out[c] += p * v[(size_t)j * dv + c];
    }
    for (int c = 0; c < dv; c++) out[c] /= den;
    free(s);
}

static void run_case(const float *q, const float *k, const float *v, const float *gold, int d, int dv, int m, int w,
                     int t, int p, int sink, const char *name) {
    cmf_o1_params prm;
    cmf_o1_default_params(&prm, 1, d, dv);
    prm.m = m, prm.window = w, prm.sink = sink, prm.rect = CMF_O1_RECT_AGG;
    cmf_o1 *st = NULL;
    CHECK(cmf_o1_create(&prm, &st) == CMF_OK);
    if (!st) return;
    float *out = calloc((size_t)t * dv, sizeof(float));
    CHECK(cmf_o1_seal(st, q, (size_t)d, k, (size_t)d, v, (size_t)dv, p, out, (size_t)dv) == CMF_OK);
    CHECK(cmf_o1_sealed(st) == 1);
    CHECK(cmf_o1_m_eff(st) == 4); /* clamp(64/8, 4, m=4) */
    CHECK(cmf_o1_far_len(st) + w + sink == p);
    for (int i = p; i < t; i++) {
        CHECK(cmf_o1_step(st, q + (size_t)i * d, k + (size_t)i * d, v + (size_t)i * dv, out + (size_t)i * dv) ==
              CMF_OK);
        CHECK(cmf_o1_far_len(st) + w + sink == i + 1);
    }

    /* 1. The golden's definition: rows before the first far key are exact attention (to f32/f64 rounding). */
    double worst_exact = 0.0, ex[64];
    for (int i = 0; i < w + sink && i < t; i++) {
        exact_row(q, k, v, d, dv, i, ex);
        for (int c = 0; c < dv; c++) {
            double e = fabs(ex[c] - gold[(size_t)i * dv + c]);
            if (e > worst_exact) worst_exact = e;
        }
    }
    CHECK_MSG(worst_exact < 1e-6, "%s: golden rows < w+sink differ from exact attention by %g", name, worst_exact);
    /* ... and the rows after it are not (so the far field is really exercised by this data). */
    double far_effect = 0.0;
    for (int i = w + sink; i < t; i++) {
        exact_row(q, k, v, d, dv, i, ex);
        for (int c = 0; c < dv; c++) far_effect = fmax(far_effect, fabs(ex[c] - gold[(size_t)i * dv + c]));
    }
    CHECK_MSG(far_effect > 1e-4, "%s: golden rows >= w+sink equal exact attention (%g): data not as documented",
              name, far_effect);

    /* 2. Operator vs golden: prompt rows (sealed replay) and decoded rows (steps), separately. */
    for (int part = 0; part < 2; part++) {
        int lo = part ? p : 0, hi = part ? t : p;
        double mx = 0.0, sum = 0.0;
        for (int i = lo; i < hi; i++)
            for (int c = 0; c < dv; c++) {
                double e = fabs((double)out[(size_t)i * dv + c] - gold[(size_t)i * dv + c]);
                sum += e;
                if (e > mx || isnan(e)) mx = isnan(e) ? INFINITY : e;
            }
        double mean = sum / ((double)(hi - lo) * dv);
        printf("%s rows %d..%d: max |err| %.3g, mean %.3g\n", name, lo, hi - 1, mx, mean);
        CHECK_MSG(mx < 1e-3, "%s rows %d..%d: max |err| %g >= 1e-3", name, lo, hi - 1, mx);
        CHECK_MSG(mean < 1e-4, "%s rows %d..%d: mean |err| %g >= 1e-4", name, lo, hi - 1, mean);
    }

    /* 3. The same decode as one chunk call gives the same bits as the single steps. */
    float *out2 = calloc((size_t)t * dv, sizeof(float));
    CHECK(cmf_o1_seal(st, q, (size_t)d, k, (size_t)d, v, (size_t)dv, p, NULL, 0) == CMF_OK);
    CHECK(cmf_o1_step_chunk(st, t - p, q + (size_t)p * d, (size_t)d, k + (size_t)p * d, (size_t)d,
                            v + (size_t)p * dv, (size_t)dv, out2 + (size_t)p * dv, (size_t)dv) == CMF_OK);
    CHECK(memcmp(out + (size_t)p * dv, out2 + (size_t)p * dv, sizeof(float) * (size_t)(t - p) * dv) == 0);
    free(out2);
    free(out);
    cmf_o1_free(st);
}

int main(void) {
    char *json = read_all(shared_path("data/golden/nystrom_golden.json"));
    CHECK_MSG(json != NULL, "cannot read %s", shared_path("data/golden/nystrom_golden.json"));
    if (!json) CMF_TEST_END();
    cJSON *root = cJSON_Parse(json);
    CHECK(root != NULL);
    if (!root) {
        free(json);
        CMF_TEST_END();
    }
    int d = get_int(root, "d"), dv = get_int(root, "dv"), m = get_int(root, "m"), w = get_int(root, "w");
    int t = get_int(root, "t"), p = get_int(root, "p"), sink = get_int(root, "sink");
    CHECK(d == 16 && dv == 8 && m == 4 && w == 16 && t == 96 && p == 64 && sink == 4);
    float *q = get_mat(root, "q", t, d), *k = get_mat(root, "k", t, d), *v = get_mat(root, "v", t, dv);
    float *out = get_mat(root, "out", t, dv), *out0 = get_mat(root, "out_sink0", t, dv);
    CHECK(q && k && v && out && out0);
    if (q && k && v && out && out0 && dv <= 64) {
        run_case(q, k, v, out, d, dv, m, w, t, p, sink, "sink=4");
        run_case(q, k, v, out0, d, dv, m, w, t, p, 0, "sink=0");
    }
    free(q), free(k), free(v), free(out), free(out0);
    cJSON_Delete(root);
    free(json);
    CMF_TEST_END();
}
