/* test_dory_recon.c — the Recon early-exit gate (DORY.md §2; probe form and storage as defined in model/dory.h) on
 * the r64_a fixture (12 tokens of sequence 0, last_loop, one token per call):
 *   - a probe no state passes (bias +inf) takes two passes on every token and equals loops = 2, one token per call,
 *     bit for bit, and the float64 reference (lastloop_0_k2_c1) within 3e-5;
 *   - a probe every state passes (bias -inf) takes one pass and equals loops = 1 and oneshot_0_k1;
 *   - a probe whose bias is the median score mixes both, and equals cmf_dory_forward with the per-token loop count
 *     the gate chose (bit for bit); the one-pass share is the count of one-pass tokens;
 *   - storage: the probe written as <ckpt>/dory_recon.safetensors is read back exactly by cmf_dory_probe_read, and
 *     converted into the CMF file (tensor dory_recon.weight + arch.dory.recon_bias) it loads back exactly and
 *     makes the same decisions; the same from a two-shard checkpoint whose second shard holds the probe; a model
 *     without one has none;
 *   - refusals: per_loop sessions, a probe of the wrong size, a probe file with a mis-shaped weight or without a
 *     bias (read and convert), each naming the problem. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "convert/convert.h"
#include "dorytest.h"
#include "quant/dtype.h"
#include "testutil.h"

#define N_TOK 12

/* Writes a safetensors file with F32 dory_recon.weight [nw] and, when with_bias, dory_recon.bias [1]. */
static int write_probe(const char *path, const float *w, int nw, float bias, int with_bias) {
    char hdr[512];
    int n = with_bias ? snprintf(hdr, sizeof hdr,
                                 "{\"dory_recon.weight\":{\"dtype\":\"F32\",\"shape\":[%d],\"data_offsets\":[0,%d]},"
                                 "\"dory_recon.bias\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[%d,%d]}}",
                                 nw, 4 * nw, 4 * nw, 4 * nw + 4)
                      : snprintf(hdr, sizeof hdr,
                                 "{\"dory_recon.weight\":{\"dtype\":\"F32\",\"shape\":[%d],\"data_offsets\":[0,%d]}}",
                                 nw, 4 * nw);
    while (n % 8) hdr[n++] = ' ';
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    uint64_t hl = (uint64_t)n; /* little-endian host assumed (x86-64, aarch64) */
    int ok = fwrite(&hl, 8, 1, f) == 1 && fwrite(hdr, 1, (size_t)n, f) == (size_t)n &&
             fwrite(w, sizeof(float), (size_t)nw, f) == (size_t)nw && (!with_bias || fwrite(&bias, 4, 1, f) == 1);
    return fclose(f) == 0 && ok ? 0 : -1;
}

/* Gated decode of ids; passes[i], scores[i] and logits [n][V] out. */
static int gated(const cmf_dory *d, const int32_t *ids, int n, const cmf_dory_probe *p, int *passes, double *scores,
                 float *logits, double *share) {
    cmf_dory_state *s;
    if (cmf_dory_state_new(d, 64, 1, CMF_DORY_KV_LAST_LOOP, 2, &s) != CMF_OK) return -1;
    const size_t V = (size_t)d->cfg.vocab_size;
    int rc = 0;
    for (int i = 0; i < n && !rc; i++) {
        if (cmf_dory_decode_recon(s, ids[i], p, &passes[i], &scores[i]) != CMF_OK) {
            fprintf(stderr, "recon: %s\n", cmf_last_error());
            rc = -1;
        } else {
            memcpy(logits + i * V, cmf_dory_logits(s), V * sizeof(float));
        }
    }
    long nt;
    *share = cmf_dory_gate_one_pass_share(s, &nt);
    if (nt != n) rc = -1;
    cmf_dory_state_free(s);
    return rc;
}

/* cmf_dory_forward, one token per call, with loops[i]. */
static float *scheduled(const cmf_dory *d, const int32_t *ids, int n, const int *loops) {
    cmf_dory_state *s;
    if (cmf_dory_state_new(d, 64, 1, CMF_DORY_KV_LAST_LOOP, 2, &s) != CMF_OK) return NULL;
    const size_t V = (size_t)d->cfg.vocab_size;
    float *out = malloc(n * V * sizeof(float));
    for (int i = 0; out && i < n; i++)
        if (cmf_dory_forward(s, ids + i, 1, loops[i], out + i * V) != CMF_OK) {
            free(out);
            out = NULL;
        }
    cmf_dory_state_free(s);
    return out;
}

static int cmp_dbl(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void check_against(const dory_fixture *fx, const float *got, const char *ref, int n) {
    size_t m;
    float *r = dory_ref_floats(fx, ref, &m);
    CHECK(r && m == (size_t)n * fx->d->cfg.vocab_size);
    if (r && m == (size_t)n * fx->d->cfg.vocab_size) {
        double e = dory_max_abs_diff(got, r, m, NULL);
        CHECK_MSG(e <= 3e-5, "recon vs %s: %.3g", ref, e);
        printf("recon vs float64 reference %s: max |err| %.3g\n", ref, e);
    }
    free(r);
}

int main(void) {
    dory_fixture fx;
    if (dory_fixture_open("r64_a", &fx) != 0) {
        cmf_test_failures++;
        CMF_TEST_END();
    }
    const cmf_dory *d = fx.d;
    const int H = d->cfg.hidden_size;
    const size_t V = (size_t)d->cfg.vocab_size;
    int n;
    int32_t *ids = dory_ref_tokens(&fx, 0, &n);
    CHECK(ids && n == N_TOK);
    if (!ids || n != N_TOK) CMF_TEST_END();
    cmf_dory_probe pr = {H, malloc((size_t)H * sizeof(float)), INFINITY};
    uint32_t r = 12345;
    for (int j = 0; j < H; j++) {
        r = r * 1664525u + 1013904223u;
        pr.w[j] = (float)((r >> 8) / 16777216.0 - 0.5);
    }
    int passes[N_TOK], loops[N_TOK], passes2[N_TOK];
    double scores[N_TOK], sorted[N_TOK], share;
    float *lg = malloc(N_TOK * V * sizeof(float)), *lg2 = malloc(N_TOK * V * sizeof(float));

    /* never passes: two passes everywhere = loops 2 */
    CHECK(gated(d, ids, n, &pr, passes, scores, lg, &share) == 0);
    for (int i = 0; i < n; i++) loops[i] = 2;
    float *want = scheduled(d, ids, n, loops);
    CHECK(want && !memcmp(want, lg, N_TOK * V * sizeof(float)) && share == 0);
    for (int i = 0; i < n; i++) CHECK(passes[i] == 2);
    check_against(&fx, lg, "lastloop_0_k2_c1", n);
    free(want);

    /* always passes: one pass everywhere = loops 1 */
    pr.bias = -INFINITY;
    CHECK(gated(d, ids, n, &pr, passes, scores, lg, &share) == 0);
    for (int i = 0; i < n; i++) loops[i] = 1;
    want = scheduled(d, ids, n, loops);
    CHECK(want && !memcmp(want, lg, N_TOK * V * sizeof(float)) && share == 1);
    for (int i = 0; i < n; i++) CHECK(passes[i] == 1);
    check_against(&fx, lg, "oneshot_0_k1", n);
    free(want);

    /* the median score of that run as the bias: a mix, equal to the schedule the gate chose */
    memcpy(sorted, scores, sizeof sorted);
    qsort(sorted, N_TOK, sizeof(double), cmp_dbl);
    pr.bias = (float)sorted[N_TOK / 2];
    CHECK(gated(d, ids, n, &pr, passes, scores, lg, &share) == 0);
    int ones = 0;
    for (int i = 0; i < n; i++) {
        ones += passes[i] == 1;
        CHECK(passes[i] == (scores[i] >= pr.bias ? 1 : 2));
    }
    printf("recon at bias %.4f: %d of %d tokens took one pass (share %.3f)\n", pr.bias, ones, n, share);
    CHECK(ones > 0 && ones < n && fabs(share - (double)ones / n) < 1e-12);
    want = scheduled(d, ids, n, passes);
    CHECK(want && !memcmp(want, lg, N_TOK * V * sizeof(float)));
    free(want);

    /* storage: a probe file next to the checkpoint, read back and converted into the CMF */
    char src[512], path[600], target[600], out[600];
    snprintf(src, sizeof src, "%s", tmp_path("dory_recon_ckpt"));
    mkdir(src, 0755);
    static const char *FILES[] = {"config.json", "model.safetensors"};
    for (int i = 0; i < 2; i++) {
        snprintf(path, sizeof path, "dory/r64_a/%s", FILES[i]);
        snprintf(target, sizeof target, "%s", testdata_path(path));
        snprintf(path, sizeof path, "%s/%s", src, FILES[i]);
        unlink(path);
        CHECK(symlink(target, path) == 0);
    }
    snprintf(path, sizeof path, "%s/dory_recon.safetensors", src);
    CHECK(write_probe(path, pr.w, H, (float)pr.bias, 1) == 0);
    cmf_dory_probe *rd = NULL;
    CHECK(cmf_dory_probe_read(path, H, &rd) == CMF_OK);
    CHECK(rd && rd->n == H && rd->bias == pr.bias && !memcmp(rd->w, pr.w, (size_t)H * sizeof(float)));
    cmf_dory_probe_free(rd);
    CHECK(cmf_dory_probe_read(path, H + 1, &rd) == CMF_E_FORMAT && strstr(cmf_last_error(), "dory_recon.weight"));

    cmf_dory_probe *none = (cmf_dory_probe *)1;
    CHECK(cmf_dory_probe_from_model(d, &none) == CMF_OK && none == NULL && !d->cfg.has_recon);

    snprintf(out, sizeof out, "%s", tmp_path("dory_recon.cmf"));
    cmf_convert_opts opts;
    memset(&opts, 0, sizeof opts);
    opts.quant = CMF_DT_F32;
    CHECK(cmf_convert_hf(src, out, &opts) == CMF_OK);
    cmf_file *f = NULL;
    cmf_dory *d2 = NULL;
    CHECK(cmf_file_open(out, &f) == CMF_OK && cmf_dory_load(f, 2, &d2) == CMF_OK);
    if (d2) {
        CHECK(d2->cfg.has_recon && d2->cfg.recon_bias == pr.bias);
        cmf_dory_probe *fp = NULL;
        CHECK(cmf_dory_probe_from_model(d2, &fp) == CMF_OK && fp);
        if (fp) {
            CHECK(!memcmp(fp->w, pr.w, (size_t)H * sizeof(float)) && fp->bias == pr.bias);
            CHECK(gated(d2, ids, n, fp, passes2, scores, lg2, &share) == 0);
            CHECK(!memcmp(passes, passes2, sizeof passes) && !memcmp(lg, lg2, N_TOK * V * sizeof(float)));
        }
        cmf_dory_probe_free(fp);
    }
    cmf_dory_free(d2);
    cmf_file_close(f);

    { /* the probe inside the checkpoint: a two-shard checkpoint whose second shard holds dory_recon.* */
        char dir[512], idx[700], sh1[700], sh2[700];
        snprintf(dir, sizeof dir, "%s", tmp_path("dory_recon_sharded"));
        mkdir(dir, 0755);
        snprintf(sh1, sizeof sh1, "%s/model-00001-of-00002.safetensors", dir);
        snprintf(sh2, sizeof sh2, "%s/model-00002-of-00002.safetensors", dir);
        snprintf(idx, sizeof idx, "%s/config.json", dir);
        unlink(sh1);
        unlink(idx);
        CHECK(symlink(testdata_path("dory/r64_a/config.json"), idx) == 0);
        CHECK(symlink(testdata_path("dory/r64_a/model.safetensors"), sh1) == 0);
        CHECK(write_probe(sh2, pr.w, H, (float)pr.bias, 1) == 0);
        cmf_safetensors *st = NULL;
        CHECK(cmf_st_open(testdata_path("dory/r64_a/model.safetensors"), &st) == CMF_OK);
        cJSON *root = cJSON_CreateObject(), *wm = cJSON_AddObjectToObject(root, "weight_map");
        for (size_t i = 0; st && i < cmf_st_count(st); i++)
            cJSON_AddStringToObject(wm, cmf_st_get(st, i)->name, "model-00001-of-00002.safetensors");
        cJSON_AddStringToObject(wm, "dory_recon.weight", "model-00002-of-00002.safetensors");
        cJSON_AddStringToObject(wm, "dory_recon.bias", "model-00002-of-00002.safetensors");
        char *js = cJSON_PrintUnformatted(root);
        snprintf(idx, sizeof idx, "%s/model.safetensors.index.json", dir);
        FILE *f2 = fopen(idx, "w");
        CHECK(f2 && js && fputs(js, f2) >= 0 && fclose(f2) == 0);
        free(js);
        cJSON_Delete(root);
        cmf_st_close(st);
        cmf_file *f3 = NULL;
        cmf_dory *d3 = NULL;
        CHECK(cmf_convert_hf(dir, out, &opts) == CMF_OK);
        CHECK(cmf_file_open(out, &f3) == CMF_OK && cmf_dory_load(f3, 2, &d3) == CMF_OK);
        CHECK(d3 && d3->cfg.has_recon && d3->cfg.recon_bias == pr.bias && d3->recon_w &&
              !memcmp(d3->recon_w, pr.w, (size_t)H * sizeof(float)));
        cmf_dory_free(d3);
        cmf_file_close(f3);
    }

    /* refusals */
    cmf_dory_state *s;
    CHECK(cmf_dory_state_new(d, 64, 1, CMF_DORY_KV_PER_LOOP, 2, &s) == CMF_OK);
    CHECK(cmf_dory_decode_recon(s, ids[0], &pr, NULL, NULL) == CMF_E_ARG && strstr(cmf_last_error(), "last_loop"));
    cmf_dory_state_free(s);
    CHECK(cmf_dory_state_new(d, 64, 1, CMF_DORY_KV_LAST_LOOP, 2, &s) == CMF_OK);
    cmf_dory_probe small = {H - 1, pr.w, 0};
    CHECK(cmf_dory_decode_recon(s, ids[0], &small, NULL, NULL) == CMF_E_ARG && s->pos == 0);
    cmf_dory_state_free(s);
    CHECK(write_probe(path, pr.w, H, 0, 0) == 0); /* no bias */
    CHECK(cmf_dory_probe_read(path, H, &rd) == CMF_E_FORMAT && strstr(cmf_last_error(), "dory_recon.bias"));
    CHECK(cmf_convert_hf(src, out, &opts) != CMF_OK && strstr(cmf_last_error(), "dory_recon.bias"));
    CHECK(write_probe(path, pr.w, H - 2, 0.5f, 1) == 0); /* wrong size */
    CHECK(cmf_convert_hf(src, out, &opts) != CMF_OK && strstr(cmf_last_error(), "dory_recon.weight"));

    free(lg);
    free(lg2);
    free(pr.w);
    free(ids);
    dory_fixture_close(&fx);
    CMF_TEST_END();
}
