/* o1_golden.c — `o1_golden PATH.json`: checks the O(1) far-field operator (src/model/o1.h) against any golden in
 * the format of the reference's nystrom_golden.json (DORY.md §4; generator: cortiq tools/gen_nystrom_golden.py).
 *
 * The file gives the dimensions d (q/k width), dv (v width), m (landmark budget), w (window), t (rows),
 * p (prefill rows) and sink, the inputs q [t][d], k [t][d], v [t][dv], and the expected outputs `out` [t][dv]
 * (computed with the file's sink) and optionally `out_sink0` [t][dv] (the same with sink = 0).
 *
 * For each output set the operator is built with the Aggregate rectifier and scale 1/sqrt(d) (the reference
 * test's settings), rows 0..p-1 are prefilled (cmf_o1_seal, whose replay readout gives the prompt rows' outputs)
 * and rows p..t-1 are stepped one at a time (cmf_o1_step). Over all t rows it prints, on its own line,
 *   max_err mean_err
 * (absolute errors; the set's name goes to stderr with more detail) and exits 0 when every set has
 * max < 1e-3 and mean < 1e-4 (the reference's tolerance), 1 when a set is above it, 2 on a bad file or
 * argument (the message names the key and the expected shape). */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/o1.h"

enum { TOL_EXIT = 1, BAD_EXIT = 2 };
static const double MAX_TOL = 1e-3, MEAN_TOL = 1e-4;

static char *read_all(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *buf = NULL;
    long n = -1;
    if (fseek(f, 0, SEEK_END) == 0) n = ftell(f);
    if (n >= 0 && fseek(f, 0, SEEK_SET) == 0 && (buf = malloc((size_t)n + 1)) != NULL) {
        if (fread(buf, 1, (size_t)n, f) != (size_t)n) {
            free(buf);
            buf = NULL;
        } else {
            buf[n] = 0;
        }
    }
    fclose(f);
    return buf;
}

/* A positive integer dimension `key` of the golden; -1 (message printed) when missing or out of range. */
static int get_dim(const char *path, const cJSON *root, const char *key, int lo) {
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(root, key);
    if (!cJSON_IsNumber(it) || it->valuedouble != (double)(int)it->valuedouble || it->valueint < lo ||
        it->valueint > (1 << 20)) {
        fprintf(stderr, "o1_golden: %s: \"%s\" must be an integer in [%d, 2^20]\n", path, key, lo);
        return -1;
    }
    return it->valueint;
}

/* The [rows][cols] matrix `key` as floats; NULL (message printed) on a missing key or a bad shape/element. */
static float *get_mat(const char *path, const cJSON *root, const char *key, int rows, int cols) {
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(root, key);
    if (!cJSON_IsArray(a) || cJSON_GetArraySize(a) != rows) {
        fprintf(stderr, "o1_golden: %s: \"%s\" must be an array of %d rows\n", path, key, rows);
        return NULL;
    }
    float *m = malloc(sizeof(float) * (size_t)rows * (size_t)cols);
    if (!m) {
        fprintf(stderr, "o1_golden: out of memory for \"%s\" [%d][%d]\n", key, rows, cols);
        return NULL;
    }
    for (int r = 0; r < rows; r++) {
        const cJSON *row = cJSON_GetArrayItem(a, r);
        if (!cJSON_IsArray(row) || cJSON_GetArraySize(row) != cols) {
            fprintf(stderr, "o1_golden: %s: \"%s\" row %d must be an array of %d numbers\n", path, key, r, cols);
            free(m);
            return NULL;
        }
        for (int c = 0; c < cols; c++) {
            const cJSON *x = cJSON_GetArrayItem(row, c);
            if (!cJSON_IsNumber(x) || !isfinite(x->valuedouble)) {
                fprintf(stderr, "o1_golden: %s: \"%s\"[%d][%d] is not a finite number\n", path, key, r, c);
                free(m);
                return NULL;
            }
            m[(size_t)r * cols + c] = (float)x->valuedouble;
        }
    }
    return m;
}

typedef struct golden {
    int d, dv, m, w, t, p, sink;
    float *q, *k, *v;
} golden;

/* Runs the operator over the golden's rows with the given sink: prefill (seal) 0..p-1, steps p..t-1.
 * Writes [t][dv] into out; returns 0, or -1 with a message printed. */
static int run_operator(const golden *g, int sink, float *out) {
    cmf_o1_params prm;
    cmf_o1_default_params(&prm, 1, g->d, g->dv);
    prm.m = g->m, prm.window = g->w, prm.sink = sink, prm.rect = CMF_O1_RECT_AGG;
    cmf_o1 *st = NULL;
    cmf_status s = cmf_o1_create(&prm, &st);
    if (s == CMF_OK)
        s = cmf_o1_seal(st, g->q, (size_t)g->d, g->k, (size_t)g->d, g->v, (size_t)g->dv, g->p, out, (size_t)g->dv);
    for (int i = g->p; i < g->t && s == CMF_OK; i++)
        s = cmf_o1_step(st, g->q + (size_t)i * g->d, g->k + (size_t)i * g->d, g->v + (size_t)i * g->dv,
                        out + (size_t)i * g->dv);
    if (s != CMF_OK) fprintf(stderr, "o1_golden: operator (sink %d): %s\n", sink, cmf_last_error());
    cmf_o1_free(st);
    return s == CMF_OK ? 0 : -1;
}

/* Compares one output set; prints "max mean" on stdout; returns 0 within tolerance, TOL_EXIT above it,
 * BAD_EXIT when the operator failed. */
static int check_set(const golden *g, int sink, const float *gold, const char *name) {
    float *out = calloc((size_t)g->t * g->dv, sizeof *out);
    if (!out || run_operator(g, sink, out) != 0) {
        free(out);
        return BAD_EXIT;
    }
    double mx = 0.0, sum = 0.0, mx_pre = 0.0, mx_dec = 0.0;
    for (int i = 0; i < g->t; i++)
        for (int c = 0; c < g->dv; c++) {
            double e = fabs((double)out[(size_t)i * g->dv + c] - gold[(size_t)i * g->dv + c]);
            if (isnan(e)) e = INFINITY;
            sum += e;
            mx = fmax(mx, e);
            if (i < g->p) mx_pre = fmax(mx_pre, e);
            else mx_dec = fmax(mx_dec, e);
        }
    double mean = sum / ((double)g->t * g->dv);
    int ok = mx < MAX_TOL && mean < MEAN_TOL;
    printf("%.6e %.6e\n", mx, mean);
    fprintf(stderr, "o1_golden: %s (sink %d): max_err %.3e mean_err %.3e over %d x %d (prefill rows 0..%d max %.3e, "
                    "stepped rows %d..%d max %.3e): %s\n",
            name, sink, mx, mean, g->t, g->dv, g->p - 1, mx_pre, g->p, g->t - 1, mx_dec,
            ok ? "ok" : "ABOVE TOLERANCE (max 1e-3, mean 1e-4)");
    free(out);
    return ok ? 0 : TOL_EXIT;
}

int main(int argc, char **argv) {
    if (argc != 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        fprintf(stderr, "usage: o1_golden PATH.json\n"
                        "Checks the O(1) far-field operator against a nystrom_golden.json-format golden: prints\n"
                        "'max_err mean_err' per output set (out, then out_sink0 when present); exit 1 above\n"
                        "max 1e-3 / mean 1e-4, 2 on a bad file.\n");
        return BAD_EXIT;
    }
    const char *path = argv[1];
    char *json = read_all(path);
    if (!json) {
        fprintf(stderr, "o1_golden: cannot read %s\n", path);
        return BAD_EXIT;
    }
    cJSON *root = cJSON_Parse(json);
    free(json);
    if (!cJSON_IsObject(root)) {
        fprintf(stderr, "o1_golden: %s: not a JSON object\n", path);
        cJSON_Delete(root);
        return BAD_EXIT;
    }
    golden g = {0};
    float *out = NULL, *out0 = NULL;
    int rc = BAD_EXIT;
    g.d = get_dim(path, root, "d", 1), g.dv = get_dim(path, root, "dv", 1), g.m = get_dim(path, root, "m", 4);
    g.w = get_dim(path, root, "w", 1), g.t = get_dim(path, root, "t", 1), g.p = get_dim(path, root, "p", 0);
    g.sink = get_dim(path, root, "sink", 0);
    if (g.d < 0 || g.dv < 0 || g.m < 0 || g.w < 0 || g.t < 0 || g.p < 0 || g.sink < 0) goto done;
    if (g.p > g.t) {
        fprintf(stderr, "o1_golden: %s: p = %d prefill rows exceed t = %d\n", path, g.p, g.t);
        goto done;
    }
    if (!(g.q = get_mat(path, root, "q", g.t, g.d)) || !(g.k = get_mat(path, root, "k", g.t, g.d)) ||
        !(g.v = get_mat(path, root, "v", g.t, g.dv)) || !(out = get_mat(path, root, "out", g.t, g.dv)))
        goto done;
    int has0 = cJSON_GetObjectItemCaseSensitive(root, "out_sink0") != NULL;
    if (has0 && !(out0 = get_mat(path, root, "out_sink0", g.t, g.dv))) goto done;
    fprintf(stderr, "o1_golden: %s: d %d, dv %d, m %d, w %d, t %d, p %d, sink %d\n", path, g.d, g.dv, g.m, g.w, g.t,
            g.p, g.sink);
    int r1 = check_set(&g, g.sink, out, "out");
    int r2 = has0 ? check_set(&g, 0, out0, "out_sink0") : 0;
    rc = r1 > r2 ? r1 : r2;
done:
    free(g.q), free(g.k), free(g.v), free(out), free(out0);
    cJSON_Delete(root);
    return rc;
}
