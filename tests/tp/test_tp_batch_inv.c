/* Batch invariance at tp 2 on the CPU (src/tp): a token gives the same logits, bit for bit, whether the front model
 * decodes it alone or inside a batched step with other sessions' tokens and a prompt chunk, so the greedy text of
 * `cmf serve --tp 2` does not change with load (the README's claim for the default CPU path, tests/model/
 * test_batch_invariance.c, extended to the split). Why it holds: each rank's slices are repacked at load like an
 * unsplit model's weights (the repacked products sum a row in one order for any number of tokens), attention and
 * the norms are per token, and the cpu all-reduce sums every element over the ranks in rank order.
 *
 * stories260K (GGUF, the B2 case of the session-5 review: `cmf serve --tp 2` gave 6 of 16 greedy completions that
 * differed alone vs under load; its intermediate_size 172 puts rank 1's gate/up rows at row 86, off the repacked
 * copy's 16-row groups, so they are copied and repacked on their own) as q8_row, and hf-tiny qwen3 (q/k norm) as
 * q8_row, qwen2 (q/k/v biases) as q4_block, llama as q8_2f and gemma2 (post-norms) as q8_row, each converted here and
 * loaded at tp 2 with one and with two threads per rank:
 *   ref:     each of 3 sessions alone, token by token (cmf_session_decode), logits after every token; session 0
 *            runs LEN0 tokens, sessions 1 and 2 run LEN;
 *   batched: one cmf_batch_run per step, session 0 first prefilling a chunk of 40 tokens then chunks of 1..9 while
 *            sessions 1 and 2 decode one token each; each session's logits after the step equal ref's after the same
 *            token, bit for bit;
 *   prefill: session 0 as ONE cmf_session_prefill of its LEN0 tokens with all_logits: every row equals ref's.
 * The same with the residual added after the all-reduce (tp.h fold off). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmf.h"
#include "convert/convert.h"
#include "model/model.h"
#include "quant/dtype.h"
#include "testutil.h"
#include "tp/tp.h"

enum { NS = 3, LEN0 = 80, LEN = 24, NCTX = 96, CHUNK0 = 40 };
#define STORIES_GGUF "data/models/stories260K-gguf/stories260Ktok512.gguf"

static int len_of(int s) { return s == 0 ? LEN0 : LEN; }
static int32_t tok(int s, int i, int V) { return (int32_t)((s * 131 + i * 17 + 5 + (i * i) % 29) % V); }
static int differ(const float *a, const float *b, int V) { return memcmp(a, b, (size_t)V * sizeof(float)) != 0; }

/* Each session alone, token by token: ref[s][i] = logits after token i. */
static void run_alone(cmf_model *m, float *ref[NS]) {
    int lens[NS];
    for (int s = 0; s < NS; s++) lens[s] = len_of(s);
    cmf_test_decode_alone(m, NCTX, NS, lens, tok, ref);
}

/* The batched steps and the one-call prefill against ref; returns the number of differing logit rows. */
static int run_batched(const char *label, cmf_model *m, float *ref[NS]) {
    const int V = cmf_model_vocab_size(m);
    cmf_session *sess[NS] = {NULL};
    for (int s = 0; s < NS; s++) CHECK(cmf_session_new(m, NCTX, &sess[s]) == CMF_OK);
    cmf_batch *b = NULL;
    CHECK_MSG(cmf_batch_new(m, CHUNK0 + NS, NS, &b) == CMF_OK, "%s: %s", label, cmf_last_error());
    int done[NS] = {0}, bad = 0, steps = 0;
    while (b && sess[NS - 1] && (done[0] < LEN0 || done[1] < LEN || done[2] < LEN)) {
        cmf_session *seqs[CHUNK0 + NS];
        int32_t ids[CHUNK0 + NS];
        int n = 0;
        for (int s = NS - 1; s >= 0; s--) { /* the decode tokens first, then session 0's chunk */
            const int want = s ? 1 : steps == 0 ? CHUNK0 : 1 + steps % 9;
            for (int k = 0; k < want && done[s] < len_of(s); k++, n++) {
                seqs[n] = sess[s];
                ids[n] = tok(s, done[s]++, V);
            }
        }
        if (cmf_batch_run(b, seqs, ids, n) != CMF_OK) {
            CHECK_MSG(0, "%s: %s", label, cmf_last_error());
            break;
        }
        for (int s = 0; s < NS; s++)
            if (differ(cmf_session_logits(sess[s]), ref[s] + (size_t)(done[s] - 1) * V, V) && !bad++)
                fprintf(stderr, "%s: step %d (%d tokens): session %d at token %d differs from alone\n", label, steps,
                        n, s, done[s] - 1);
        steps++;
    }
    cmf_batch_free(b);
    /* session 0's prompt as one prefill, every position */
    int32_t ids0[LEN0];
    for (int i = 0; i < LEN0; i++) ids0[i] = tok(0, i, V);
    float *all = malloc((size_t)LEN0 * V * sizeof(float));
    int pbad = 0, first = -1;
    if (sess[0] && all) {
        cmf_session_reset(sess[0]);
        CHECK_MSG(cmf_session_prefill(sess[0], ids0, LEN0, all) == CMF_OK, "%s: %s", label, cmf_last_error());
        for (int i = 0; i < LEN0; i++)
            if (differ(all + (size_t)i * V, ref[0] + (size_t)i * V, V)) pbad++, first = first < 0 ? i : first;
    }
    CHECK_MSG(bad == 0, "%s: %d batched logit rows differ from the token decoded alone", label, bad);
    CHECK_MSG(pbad == 0, "%s: %d of %d prefill positions differ from decoding alone (first %d)", label, pbad, LEN0,
              first);
    fprintf(stderr, "%s: %d batched steps (%d rows differ), prefill of %d (%d rows differ)\n", label, steps, bad, LEN0,
            pbad);
    free(all);
    for (int s = 0; s < NS; s++) cmf_session_free(sess[s]);
    return bad + pbad;
}

static void check_model(const char *src, int dtype) {
    char path[1024], label[160];
    snprintf(path, sizeof path, "%s", tmp_path(src));
    snprintf(path + strlen(path), sizeof path - strlen(path), "-%s-tpinv.cmf", cmf_dtype_name(dtype));
    cmf_convert_opts o = {0};
    o.quant = dtype;
    cmf_status st;
    if (!strcmp(src, "stories260K")) {
        st = cmf_convert_gguf(shared_path(STORIES_GGUF), path, &o);
    } else {
        char dir[256];
        snprintf(dir, sizeof dir, "data/hf-tiny/%s", src);
        st = cmf_convert_hf(shared_path(dir), path, &o);
    }
    CHECK_MSG(st == CMF_OK, "%s: convert: %s", src, cmf_last_error());
    for (int threads = 2; threads <= 4 && st == CMF_OK; threads += 2) { /* 1 and 2 threads per rank */
        cmf_model *m = NULL;
        cmf_model_params p = {.n_threads = threads, .tp = 2};
        CHECK_MSG(cmf_model_load_on(path, &p, "cpu", &m) == CMF_OK, "%s: load: %s", src, cmf_last_error());
        if (!m) return;
        const int V = cmf_model_vocab_size(m);
        float *ref[NS];
        for (int s = 0; s < NS; s++) ref[s] = malloc((size_t)len_of(s) * V * sizeof(float));
        for (int fold = 1; fold >= 0; fold--) {
            m->tp->fold = fold;
            snprintf(label, sizeof label, "%s %s tp2 x %d threads%s", src, cmf_dtype_name(dtype), threads / 2,
                     fold ? "" : " nofold");
            run_alone(m, ref);
            run_batched(label, m, ref);
        }
        for (int s = 0; s < NS; s++) free(ref[s]);
        cmf_model_free(m);
    }
}

int main(void) {
    check_model("stories260K", CMF_DT_Q8_ROW);
    check_model("qwen3", CMF_DT_Q8_ROW);
    check_model("qwen2", CMF_DT_Q4_BLOCK);
    check_model("llama", CMF_DT_Q8_2F);
    check_model("gemma2", CMF_DT_Q8_ROW); /* post-norms: the residual is added after the all-reduce either way */
    CMF_TEST_END();
}
