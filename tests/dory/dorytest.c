/* dorytest.c — see dorytest.h. */
#include "dorytest.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "convert/convert.h"
#include "quant/dtype.h"
#include "testutil.h"
#include "util/error.h"

int dory_fixture_open(const char *name, dory_fixture *fx) { return dory_fixture_open_q(name, CMF_DT_F32, fx); }

int dory_fixture_open_q(const char *name, int quant, dory_fixture *fx) {
    memset(fx, 0, sizeof *fx);
    char rel[256], out[256], ref[600];
    snprintf(rel, sizeof rel, "dory/%s", name);
    snprintf(out, sizeof out, "%s", tmp_path(name));
    size_t k = strlen(out);
    snprintf(out + k, sizeof out - k, ".dory%d.cmf", quant);
    cmf_convert_opts opts;
    memset(&opts, 0, sizeof opts);
    opts.quant = quant;
    char dir[512];
    snprintf(dir, sizeof dir, "%s", testdata_path(rel));
    /* ctest -j runs several tests of one fixture at once: each converts to its own name and renames the result
     * over the shared one (atomic), so no test opens a file another is still writing */
    char mine[300];
    snprintf(mine, sizeof mine, "%s.%ld", out, (long)getpid());
    cmf_status st = cmf_convert_hf(dir, mine, &opts);
    if (st == CMF_OK && rename(mine, out) != 0) st = cmf_err(CMF_E_IO, "fixture: cannot rename %s to %s", mine, out);
    if (st == CMF_OK) st = cmf_file_open(out, &fx->file);
    if (st == CMF_OK) st = cmf_dory_load(fx->file, 2, &fx->d);
    snprintf(ref, sizeof ref, "%s/ref.safetensors", dir);
    if (st == CMF_OK) st = cmf_st_open(ref, &fx->ref);
    if (st != CMF_OK) {
        fprintf(stderr, "fixture %s: %s\n", name, cmf_last_error());
        dory_fixture_close(fx);
        return -1;
    }
    return 0;
}

void dory_fixture_close(dory_fixture *fx) {
    cmf_dory_free(fx->d);
    cmf_file_close(fx->file);
    cmf_st_close(fx->ref);
    memset(fx, 0, sizeof *fx);
}

float *dory_ref_floats(const dory_fixture *fx, const char *name, size_t *n) {
    const cmf_st_tensor *t = cmf_st_find(fx->ref, name);
    if (!t) return NULL;
    *n = (size_t)cmf_st_numel(t);
    float *out = malloc(*n * sizeof(float));
    if (out && cmf_st_to_f32(t, out) != CMF_OK) {
        free(out);
        return NULL;
    }
    return out;
}

int32_t *dory_ref_tokens(const dory_fixture *fx, int i, int *n) {
    char name[64];
    snprintf(name, sizeof name, "tokens_%d", i);
    size_t m;
    float *f = dory_ref_floats(fx, name, &m);
    if (!f) return NULL;
    int32_t *ids = malloc(m * sizeof(int32_t));
    for (size_t j = 0; ids && j < m; j++) ids[j] = (int32_t)f[j];
    free(f);
    *n = (int)m;
    return ids;
}

double dory_max_abs_diff(const float *a, const float *b, size_t n, double *max_ref) {
    double m = 0, r = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]);
        if (!(d <= m)) m = d; /* NaN propagates */
        if (fabs(b[i]) > r) r = fabs(b[i]);
    }
    if (max_ref) *max_ref = r;
    return m;
}

float *dory_run(const cmf_dory *d, const int32_t *tokens, int n, int kv_mode, int loops, int chunk) {
    return dory_run_batch(d, tokens, n, kv_mode, loops, chunk, 0);
}

float *dory_run_batch(const cmf_dory *d, const int32_t *tokens, int n, int kv_mode, int loops, int chunk,
                      int n_batch) {
    cmf_dory_state *s;
    if (cmf_dory_state_new(d, 64, n_batch, kv_mode, loops, &s) != CMF_OK) {
        fprintf(stderr, "state: %s\n", cmf_last_error());
        return NULL;
    }
    const int V = d->cfg.vocab_size;
    float *out = malloc((size_t)n * V * sizeof(float));
    for (int i = 0; out && i < n; i += chunk) {
        int b = n - i < chunk ? n - i : chunk;
        if (cmf_dory_forward(s, tokens + i, b, loops, out + (size_t)i * V) != CMF_OK) {
            fprintf(stderr, "forward: %s\n", cmf_last_error());
            free(out);
            out = NULL;
        }
    }
    cmf_dory_state_free(s);
    return out;
}

float *dory_run_calls(const cmf_dory *d, const int32_t *ids, int n_ctx, int kv_mode, int n_batch, int max_loops,
                      const int *lens, const int *loops, int nc) {
    cmf_dory_state *s = NULL;
    if (cmf_dory_state_new(d, n_ctx, n_batch, kv_mode, max_loops, &s) != CMF_OK) {
        fprintf(stderr, "state: %s\n", cmf_last_error());
        return NULL;
    }
    const size_t V = (size_t)d->cfg.vocab_size;
    int total = 0;
    for (int i = 0; i < nc; i++) total += lens[i];
    float *out = malloc((size_t)total * V * sizeof(float));
    for (int i = 0, p = 0; out && i < nc; p += lens[i], i++)
        if (cmf_dory_forward(s, ids + p, lens[i], loops[i], out + (size_t)p * V) != CMF_OK) {
            fprintf(stderr, "forward: %s\n", cmf_last_error());
            free(out);
            out = NULL;
        }
    cmf_dory_state_free(s);
    return out;
}
