/* test_dory_gate.c — the Conf gate's exit-rate tracker (DORY.md §2 "ExitRate"; parameters ours, see
 * cmf_dory_gate_tracker) on the r64_a fixture, 48 seeded random tokens decoded one by one:
 *   - threshold 1.5 (no token can exit) with windows of 8 probes, min rate 1/16, pauses of 5: probing stops after
 *     every window, so 32 of the 48 tokens are probed, and the logits equal loops = 2 one token per call bit for bit
 *     (a paused token is a two-pass token without the wasted read-out);
 *   - threshold 0 (every token exits) never pauses: 48 probed, logits equal loops = 1;
 *   - the tracker off: threshold 1.5 probes all 48;
 *   - the default tracker (window 64) does not pause within 48 tokens; bad parameters are refused. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dorytest.h"
#include "testutil.h"

#define NT 48

static float *gate_run(const cmf_dory *d, const int32_t *ids, float thr, int window, double rate, int pause,
                       long *probed, long *gated, int *twos) {
    cmf_dory_state *s;
    if (cmf_dory_state_new(d, 64, 1, CMF_DORY_KV_LAST_LOOP, 2, &s) != CMF_OK) return NULL;
    if (window >= 0 && cmf_dory_gate_tracker(s, window, rate, pause) != CMF_OK) {
        cmf_dory_state_free(s);
        return NULL;
    }
    const size_t V = (size_t)d->cfg.vocab_size;
    float *out = malloc(NT * V * sizeof(float));
    *twos = 0;
    for (int i = 0; out && i < NT; i++) {
        int np = 0;
        if (cmf_dory_decode_gated(s, ids[i], thr, &np) != CMF_OK) {
            free(out);
            out = NULL;
            break;
        }
        *twos += np == 2;
        memcpy(out + i * V, cmf_dory_logits(s), V * sizeof(float));
    }
    *probed = cmf_dory_gate_probed(s);
    cmf_dory_gate_one_pass_share(s, gated);
    cmf_dory_state_free(s);
    return out;
}

static float *loops_run(const cmf_dory *d, const int32_t *ids, int loops) {
    cmf_dory_state *s;
    if (cmf_dory_state_new(d, 64, 1, CMF_DORY_KV_LAST_LOOP, 2, &s) != CMF_OK) return NULL;
    const size_t V = (size_t)d->cfg.vocab_size;
    float *out = malloc(NT * V * sizeof(float));
    for (int i = 0; out && i < NT; i++)
        if (cmf_dory_forward(s, ids + i, 1, loops, out + i * V) != CMF_OK) {
            free(out);
            out = NULL;
        }
    cmf_dory_state_free(s);
    return out;
}

int main(void) {
    dory_fixture fx;
    if (dory_fixture_open("r64_a", &fx) != 0) {
        cmf_test_failures++;
        CMF_TEST_END();
    }
    const cmf_dory *d = fx.d;
    const size_t V = (size_t)d->cfg.vocab_size;
    int32_t ids[NT];
    uint32_t r = 99;
    for (int i = 0; i < NT; i++) {
        r = r * 1664525u + 1013904223u;
        ids[i] = (int32_t)((r >> 8) % (uint32_t)V);
    }
    float *l1 = loops_run(d, ids, 1), *l2 = loops_run(d, ids, 2);
    CHECK(l1 && l2);
    long probed, gated;
    int twos;
    float *g = gate_run(d, ids, 1.5f, 8, 1.0 / 16, 5, &probed, &gated, &twos);
    CHECK(g && l2 && !memcmp(g, l2, NT * V * sizeof(float)));
    printf("tracker window 8 pause 5, threshold 1.5: %ld of %ld tokens probed, %d two-pass\n", probed, gated, twos);
    CHECK(probed == 32 && gated == NT && twos == NT);
    free(g);
    g = gate_run(d, ids, 0.0f, 8, 1.0 / 16, 5, &probed, &gated, &twos);
    CHECK(g && l1 && !memcmp(g, l1, NT * V * sizeof(float)) && probed == NT && twos == 0);
    free(g);
    g = gate_run(d, ids, 1.5f, 0, 0, 0, &probed, &gated, &twos);
    CHECK(g && l2 && !memcmp(g, l2, NT * V * sizeof(float)) && probed == NT);
    free(g);
    g = gate_run(d, ids, 1.5f, -1, 0, 0, &probed, &gated, &twos); /* defaults: window 64 */
    CHECK(g && probed == NT);
    free(g);
    cmf_dory_state *s;
    CHECK(cmf_dory_state_new(d, 64, 1, CMF_DORY_KV_LAST_LOOP, 2, &s) == CMF_OK);
    CHECK(cmf_dory_gate_tracker(s, -1, 0.1, 4) == CMF_E_ARG);
    CHECK(cmf_dory_gate_tracker(s, 8, 1.5, 4) == CMF_E_ARG);
    CHECK(cmf_dory_gate_tracker(s, 8, 0.1, -2) == CMF_E_ARG);
    CHECK(s->track_window == 64 && s->track_pause == 256);
    cmf_dory_state_free(s);
    free(l1);
    free(l2);
    dory_fixture_close(&fx);
    CMF_TEST_END();
}
