/* test_chat_session.c — KV-cache reuse across chat turns through the session API: after turn 1 (prompt + reply in
 * the cache), turn 2's rendered conversation shares a prefix with the cache; cmf_session_truncate to the longest
 * common prefix + prefill of the suffix must give the logits of a fresh prefill of the whole turn-2 prompt (within
 * 1e-5), at the last position and at every position of the suffix. Also cmf_session_truncate's argument checks. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chatmodel.h"
#include "cmf.h"
#include "testutil.h"


static int32_t *render_ids(cmf_model *m, const char *messages, size_t *n) {
    cmf_chat_params p = cmf_chat_default_params();
    p.messages_json = messages;
    char *text = NULL;
    int32_t *ids = NULL;
    *n = 0;
    CHECK_MSG(cmf_chat_render(m, &p, &text, NULL) == CMF_OK, "%s", cmf_last_error());
    if (text) CHECK(cmf_tokenize(cmf_model_tokenizer(m), text, strlen(text), 0, &ids, n) == CMF_OK);
    free(text);
    return ids;
}

static float max_diff(const float *a, const float *b, size_t n) {
    float d = 0;
    for (size_t i = 0; i < n; i++) {
        float x = fabsf(a[i] - b[i]);
        if (!(x <= d)) d = x; /* NaN counts as a difference */
    }
    return d;
}

int main(void) {
    char path[512];
    /* qwen3: bos none, eos <|im_end|> (ids from tokenizer.json; see data/chat_refs.json) */
    if (chat_make_model(tmp_path("chat-session"), "qwen3", "qwen3", 151669, -1, 151645, path)) return 1;
    cmf_model *m = NULL;
    cmf_session *s = NULL, *fresh = NULL;
    if (cmf_model_load(path, NULL, &m) != CMF_OK || cmf_session_new(m, 256, &s) != CMF_OK ||
        cmf_session_new(m, 256, &fresh) != CMF_OK) {
        fprintf(stderr, "%s\n", cmf_last_error());
        return 1;
    }
    const int V = cmf_model_vocab_size(m);
    size_t n1, n2;
    int32_t *t1 = render_ids(m, "[{\"role\":\"system\",\"content\":\"Be brief.\"},"
                                "{\"role\":\"user\",\"content\":\"Hello there\"}]", &n1);
    int32_t *t2 = render_ids(m, "[{\"role\":\"system\",\"content\":\"Be brief.\"},"
                                "{\"role\":\"user\",\"content\":\"Hello there\"},"
                                "{\"role\":\"assistant\",\"content\":\"Hi! How can I help?\"},"
                                "{\"role\":\"user\",\"content\":\"Tell me a joke.\"}]", &n2);
    CHECK(t1 && t2 && n1 > 4 && n2 > n1 && n1 + 7 < 512);
    if (!t1 || !t2) CMF_TEST_END();

    /* turn 1: the prompt, then a "reply" of a few tokens decoded one at a time (as cmf chat does) */
    CHECK(cmf_session_prefill(s, t1, (int)n1, NULL) == CMF_OK);
    const int32_t reply[] = {9707, 0, 2585, 646, 358, 1492, 30};
    for (size_t i = 0; i < sizeof reply / sizeof reply[0]; i++) CHECK(cmf_session_decode(s, reply[i]) == CMF_OK);
    int pos = cmf_session_pos(s);
    CHECK(pos == (int)n1 + 7);

    /* turn 2: keep the common prefix with what the cache holds (t1 + reply) */
    int32_t cache[512];
    memcpy(cache, t1, n1 * sizeof *t1);
    memcpy(cache + n1, reply, sizeof reply);
    int keep = 0;
    while (keep < pos && (size_t)keep < n2 && cache[keep] == t2[keep]) keep++;
    /* the whole turn-1 prompt is reused; the sampled reply ("Hello! How...") differs from the rendered one ("Hi!") */
    CHECK(keep == (int)n1);
    CHECK(cmf_session_truncate(s, keep) == CMF_OK && cmf_session_pos(s) == keep);
    int n_new = (int)n2 - keep;
    float *reuse = malloc((size_t)n_new * V * sizeof(float)), *full = malloc(n2 * (size_t)V * sizeof(float));
    CHECK(cmf_session_prefill(s, t2 + keep, n_new, reuse) == CMF_OK);
    CHECK(cmf_session_prefill(fresh, t2, (int)n2, full) == CMF_OK);
    float d_last = max_diff(cmf_session_logits(s), cmf_session_logits(fresh), (size_t)V);
    float d_all = max_diff(reuse, full + (size_t)keep * V, (size_t)n_new * V);
    CHECK_MSG(d_last <= 1e-5f && d_all <= 1e-5f, "reused prefix vs fresh prefill: last %g, suffix %g", d_last, d_all);
    CHECK(cmf_session_pos(s) == (int)n2 && cmf_session_pos(fresh) == (int)n2);

    /* truncating to the whole cache is a no-op; a truncated-then-regrown session equals the fresh one */
    CHECK(cmf_session_truncate(s, (int)n2) == CMF_OK && cmf_session_pos(s) == (int)n2);
    CHECK(cmf_session_truncate(s, (int)n2 - 1) == CMF_OK);
    CHECK(cmf_session_decode(s, t2[n2 - 1]) == CMF_OK);
    d_last = max_diff(cmf_session_logits(s), cmf_session_logits(fresh), (size_t)V);
    CHECK_MSG(d_last <= 1e-5f, "re-decoding the last token: %g", d_last);
    /* errors: outside [0, pos] changes nothing */
    CHECK(cmf_session_truncate(s, (int)n2 + 1) == CMF_E_ARG && cmf_session_pos(s) == (int)n2);
    CHECK(strstr(cmf_last_error(), "n_keep") != NULL);
    CHECK(cmf_session_truncate(s, -1) == CMF_E_ARG && cmf_session_pos(s) == (int)n2);
    CHECK(cmf_session_truncate(NULL, 0) == CMF_E_ARG);
    CHECK(cmf_session_truncate(s, 0) == CMF_OK && cmf_session_pos(s) == 0);

    free(reuse);
    free(full);
    free(t1);
    free(t2);
    cmf_session_free(s);
    cmf_session_free(fresh);
    cmf_model_free(m);
    CMF_TEST_END();
}
