/* app_greedy.c — a program outside the tree, built by test_install.sh against the installed cmf (only <cmf.h> and
 * `pkg-config --cflags --libs cmf`): loads MODEL, prefills the token ids given as arguments, and prints the
 * greedy next token from the public sampler and the argmax of cmf_session_logits, which must agree. */
#include <cmf.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: app_greedy MODEL.cmf ID...\n");
        return 2;
    }
    cmf_model *m = NULL;
    cmf_session *s = NULL;
    cmf_sampler *smp = NULL;
    int32_t ids[64];
    int n = 0;
    for (int i = 2; i < argc && n < 64; i++) ids[n++] = (int32_t)atoi(argv[i]);
    cmf_sampler_params sp = cmf_sampler_default_params();
    sp.temperature = 0;
    int32_t next = -1;
    if (cmf_model_load(argv[1], NULL, &m) || cmf_session_new(m, 64, &s) ||
        cmf_sampler_new(cmf_model_vocab_size(m), &sp, &smp) || cmf_session_prefill(s, ids, n, NULL) ||
        cmf_sampler_sample(smp, cmf_session_logits(s), &next)) {
        fprintf(stderr, "app_greedy: %s\n", cmf_last_error());
        return 1;
    }
    const float *l = cmf_session_logits(s);
    int best = 0;
    for (int i = 1; i < cmf_model_vocab_size(m); i++)
        if (l[i] > l[best]) best = i;
    printf("%d %d\n", (int)next, best);
    cmf_sampler_free(smp);
    cmf_session_free(s);
    cmf_model_free(m);
    return next == best ? 0 : 1;
}
