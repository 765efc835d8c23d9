/* test_dory_session.c — the Dory gates and the O(1) far field through the public session API (cmf_session_params:
 * gate_recon, gate_recon_bias, o1), on the r64_a fixture (its 12 reference tokens, one decode call per token):
 *   - Recon gate from a probe file whose bias is overridden with +inf: every step takes two passes and the logits
 *     equal a last_loop session with loops 2, bit for bit; with -inf: one pass, equal to loops 1; the one-pass
 *     share reports 0 and 1 over all 12 steps; with the file's own bias every step is gated;
 *   - the far field (o1 "all") on a Dory session: an exact window wider than the text gives the exact session's
 *     logits up to rounding (1e-5 relative); a window of 2 rows (+1 sink) gives finite logits that differ from exact after the seal;
 *   - refusals: Conf and Recon together, Recon "model" on a file without a probe, a missing probe file, Recon
 *     under per_loop, the Conf gate with the far field (each with its status). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmf.h"
#include "dorytest.h"
#include "testutil.h"

/* Writes a safetensors probe file: F32 dory_recon.weight [nw] and dory_recon.bias [1]. */
static int write_probe(const char *path, const float *w, int nw, float bias) {
    char hdr[512];
    int n = snprintf(hdr, sizeof hdr,
                     "{\"dory_recon.weight\":{\"dtype\":\"F32\",\"shape\":[%d],\"data_offsets\":[0,%d]},"
                     "\"dory_recon.bias\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[%d,%d]}}",
                     nw, 4 * nw, 4 * nw, 4 * nw + 4);
    while (n % 8) hdr[n++] = ' ';
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    uint64_t hl = (uint64_t)n; /* little-endian host assumed (x86-64, aarch64) */
    int ok = fwrite(&hl, 8, 1, f) == 1 && fwrite(hdr, 1, (size_t)n, f) == (size_t)n &&
             fwrite(w, sizeof(float), (size_t)nw, f) == (size_t)nw && fwrite(&bias, 4, 1, f) == 1;
    return fclose(f) == 0 && ok ? 0 : -1;
}

/* Feeds ids through a new session with params p: the first `prompt` tokens as one prefill (0: none), then one
 * decode call per token; returns the logits after every token ([n][V], malloc'd; prompt rows from the prefill), or
 * NULL (the error is reported). *share and *gated (may be NULL) get the gate counters. */
static float *run(cmf_model *m, const cmf_session_params *p, const int32_t *ids, int n, int prompt, double *share,
                  long *gated) {
    const size_t V = (size_t)cmf_model_vocab_size(m);
    cmf_session *s = NULL;
    if (cmf_session_new_ex(m, p, &s) != CMF_OK) {
        fprintf(stderr, "session: %s\n", cmf_last_error());
        return NULL;
    }
    float *out = malloc((size_t)n * V * sizeof(float));
    int ok = out != NULL;
    if (ok && prompt > 0) ok = cmf_session_prefill(s, ids, prompt, out) == CMF_OK;
    for (int i = prompt; ok && i < n; i++) {
        ok = cmf_session_decode(s, ids[i]) == CMF_OK;
        if (ok) memcpy(out + (size_t)i * V, cmf_session_logits(s), V * sizeof(float));
    }
    if (!ok) fprintf(stderr, "run: %s\n", cmf_last_error());
    double sh = cmf_session_gate_one_pass_share(s, gated);
    if (share) *share = sh;
    cmf_session_free(s);
    if (!ok) {
        free(out);
        return NULL;
    }
    return out;
}

int main(void) {
    dory_fixture fx;
    if (dory_fixture_open("r64_a", &fx) != 0) return 1;
    char path[1024], probe[1024];
    snprintf(path, sizeof path, "%s.dory%d.cmf", tmp_path("r64_a"), 0); /* written by dory_fixture_open (f32) */
    cmf_model *m = NULL;
    CHECK_MSG(cmf_model_load(path, NULL, &m) == CMF_OK, "%s", cmf_last_error());
    int n = 0;
    int32_t *ids = dory_ref_tokens(&fx, 0, &n);
    CHECK(ids && n == 12);
    if (!m || !ids || n != 12) {
        dory_fixture_close(&fx);
        CMF_TEST_END();
    }
    const int H = fx.d->cfg.hidden_size;
    const size_t V = (size_t)cmf_model_vocab_size(m), NV = (size_t)n * V;
    float *w = malloc((size_t)H * sizeof(float));
    uint32_t r = 777;
    for (int j = 0; j < H; j++) {
        r = r * 1664525u + 1013904223u;
        w[j] = (float)((r >> 8) / 16777216.0 - 0.5);
    }
    snprintf(probe, sizeof probe, "%s", tmp_path("dory_session_probe.safetensors"));
    CHECK(write_probe(probe, w, H, 0.0f) == 0);

    /* the exact references: last_loop sessions with loops 2 and 1, one token per call */
    cmf_session_params ex = {0};
    ex.n_ctx = 64;
    ex.dory_kv_mode = "last_loop";
    ex.loops = 2;
    float *l2 = run(m, &ex, ids, n, 0, NULL, NULL);
    ex.loops = 1;
    float *l1 = run(m, &ex, ids, n, 0, NULL, NULL);
    CHECK(l1 && l2);

    /* Recon, bias +inf / -inf (the session allows 2 loops: loops 2) */
    cmf_session_params rp = {0};
    rp.n_ctx = 64;
    rp.loops = 2;
    rp.gate_recon = probe;
    rp.gate_recon_bias_set = 1;
    rp.gate_recon_bias = INFINITY;
    double share = -1;
    long gated = -1;
    float *g = run(m, &rp, ids, n, 0, &share, &gated);
    CHECK(g && l2 && !memcmp(g, l2, NV * sizeof(float)));
    CHECK_MSG(share == 0 && gated == n, "bias +inf: share %g of %ld", share, gated);
    free(g);
    rp.gate_recon_bias = -INFINITY;
    g = run(m, &rp, ids, n, 0, &share, &gated);
    CHECK(g && l1 && !memcmp(g, l1, NV * sizeof(float)));
    CHECK_MSG(share == 1 && gated == n, "bias -inf: share %g of %ld", share, gated);
    free(g);
    /* the file's bias (0): each step is one of the two; the share counts the one-pass ones */
    rp.gate_recon_bias_set = 0;
    g = run(m, &rp, ids, n, 0, &share, &gated);
    CHECK(g && gated == n && share >= 0 && share <= 1);
    printf("recon with the file's bias: one-pass share %.3f of %ld steps\n", share, gated);
    free(g);

    /* the far field: a window wider than the text is exact; a narrow one serves the steps after the seal */
    cmf_session_params op = {0};
    op.n_ctx = 64;
    op.dory_kv_mode = "last_loop";
    op.loops = 2;
    float *exact = run(m, &op, ids, n, 4, NULL, NULL);
    op.o1 = "all";
    op.o1_window = 64;
    float *wide = run(m, &op, ids, n, 4, NULL, NULL);
    CHECK(exact && wide);
    if (exact && wide) { /* the operator's exact part sums in its own order: equal up to rounding */
        double mr, e = dory_max_abs_diff(wide, exact, NV, &mr);
        printf("o1 window 64: max |logit - exact| %.3g (max |logit| %.3g)\n", e, mr);
        CHECK_MSG(e <= 1e-5 * mr, "o1 with a window wider than the text: max |err| %g", e);
    }
    op.o1_window = 2;
    op.o1_sink = 1;
    op.o1_sink_set = 1;
    op.o1_m = 4;
    float *narrow = run(m, &op, ids, n, 4, NULL, NULL);
    CHECK(narrow != NULL);
    int finite = 1;
    for (size_t i = 0; narrow && i < NV; i++) finite &= isfinite(narrow[i]) != 0;
    CHECK(narrow && finite);
    CHECK(narrow && exact && !memcmp(narrow, exact, 4 * V * sizeof(float))); /* the prompt runs exactly */
    CHECK(narrow && exact && memcmp(narrow + 4 * V, exact + 4 * V, (NV - 4 * V) * sizeof(float)) != 0);
    if (narrow && exact) printf("o1 window 2: max |logit - exact| %.3g\n", dory_max_abs_diff(narrow, exact, NV, NULL));
    /* the far field is reported through cmf_session_o1_layers */
    cmf_session *s = NULL;
    CHECK(cmf_session_new_ex(m, &op, &s) == CMF_OK && cmf_session_o1_layers(s) > 0);
    cmf_session_free(s);
    s = NULL;
    /* Recon works with it */
    op.gate_recon = probe;
    g = run(m, &op, ids, n, 4, &share, &gated);
    CHECK(g && gated == n - 4);
    free(g);

    /* refusals */
    cmf_session_params bad = {0};
    bad.n_ctx = 64;
    bad.gate = 0.5f;
    bad.gate_recon = probe;
    CHECK(cmf_session_new_ex(m, &bad, &s) == CMF_E_ARG && !s && strstr(cmf_last_error(), "one early-exit gate"));
    bad.gate = 0;
    bad.gate_recon = "model";
    CHECK(cmf_session_new_ex(m, &bad, &s) == CMF_E_NOT_FOUND && !s && strstr(cmf_last_error(), "dory_recon.weight"));
    bad.gate_recon = tmp_path("no_such_probe.safetensors");
    CHECK(cmf_session_new_ex(m, &bad, &s) == CMF_E_IO && !s);
    bad.gate_recon = probe;
    bad.dory_kv_mode = "per_loop";
    CHECK(cmf_session_new_ex(m, &bad, &s) == CMF_E_ARG && !s && strstr(cmf_last_error(), "last_loop"));
    bad.dory_kv_mode = NULL;
    bad.gate_recon = NULL;
    bad.gate = 0.5f;
    bad.o1 = "all";
    CHECK(cmf_session_new_ex(m, &bad, &s) == CMF_E_UNSUPPORTED && !s && strstr(cmf_last_error(), "Conf gate"));

    free(exact);
    free(wide);
    free(narrow);
    free(l1);
    free(l2);
    free(w);
    free(ids);
    cmf_model_free(m);
    dory_fixture_close(&fx);
    CMF_TEST_END();
}
