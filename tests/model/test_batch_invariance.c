/* Batch invariance of the default CPU path: a token gives the same logits, bit for bit, whether it is decoded alone
 * or inside a batched step with other sessions' tokens or a prompt chunk (the repacked products sum in one order for
 * any number of tokens, kern.h; attention splits a token's positions by its own range only, backend_cpu.c), so the
 * greedy text of `cmf serve` does not change with load. And the cpu backend's grouping of q/k/v and gate/up+GLU into
 * one fan-out (cmf_matmul_group) gives the bits of the ops one by one (CMF_CPU_FUSE=0).
 *
 * hf-tiny qwen2 (q/k/v biases, tied head) as q4_block, qwen3 (q/k norm) as q8_row, llama as q4tp, and the trained
 * stories260K (GGUF) as q4_block, whose 172-column down_proj has stored groups of 32 straddling its rows (CMF_FORMAT.md
 * §2.4: the repack's split copy, kern.h cmf_rp), converted here:
 *   ref:     each of 3 sessions alone, token by token (cmf_session_decode), logits after every token; session 0 runs
 *            300 tokens (attention over more than 256 positions: several chunks), sessions 1 and 2 run 40;
 *   batched: one cmf_batch_run per step, session 0 first prefilling 150 tokens then chunks of 1..9 while 1 and 2
 *            decode one token each (interleaved in the batch); each session's logits after the step equal ref's
 *            after the same token, bit for bit; then session 0 alone as ONE cmf_session_prefill of its 300 tokens
 *            with all_logits: every position's row equals ref's;
 *   unfused: ref again with cmf_cpu_set_fuse(0): the same bits. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/ops.h"
#include "cmf.h"
#include "convert/convert.h"
#include "quant/dtype.h"
#include "testutil.h"

enum { NS = 3, LEN0 = 300, LEN = 40, VMAX = 1024, NCTX = 320 };
#define STORIES_GGUF "data/models/stories260K-gguf/stories260Ktok512.gguf"

static int len_of(int s) { return s == 0 ? LEN0 : LEN; }
static int32_t tok(int s, int i, int V) { return (int32_t)((s * 131 + i * 17 + 5 + (i * i) % 29) % V); }

/* Each session alone, token by token: ref[s][i] = logits after token i. */
static void run_alone(cmf_model *m, float *ref[NS]) {
    int lens[NS];
    for (int s = 0; s < NS; s++) lens[s] = len_of(s);
    cmf_test_decode_alone(m, NCTX, NS, lens, tok, ref);
}

static int differ(const float *a, const float *b, int V) { return memcmp(a, b, (size_t)V * sizeof(float)) != 0; }

static void check_model(const char *hf, int dtype) {
    char path[1024];
    snprintf(path, sizeof path, "%s", tmp_path(hf));
    strncat(path, "-inv.cmf", sizeof path - strlen(path) - 1);
    cmf_convert_opts o = {0};
    o.quant = dtype;
    char dir[256];
    if (!strcmp(hf, "stories260K")) {
        CHECK_MSG(cmf_convert_gguf(shared_path(STORIES_GGUF), path, &o) == CMF_OK, "%s: %s", hf, cmf_last_error());
    } else {
        snprintf(dir, sizeof dir, "data/hf-tiny/%s", hf);
        CHECK_MSG(cmf_convert_hf(shared_path(dir), path, &o) == CMF_OK, "%s: %s", hf, cmf_last_error());
    }
    cmf_model *m = NULL;
    CHECK_MSG(cmf_model_load(path, NULL, &m) == CMF_OK, "%s: %s", hf, cmf_last_error());
    if (!m) return;
    const int V = cmf_model_vocab_size(m);
    CHECK(V <= VMAX);
    float *ref[NS], *unf[NS];
    for (int s = 0; s < NS; s++) {
        ref[s] = malloc((size_t)len_of(s) * V * sizeof(float));
        unf[s] = malloc((size_t)len_of(s) * V * sizeof(float));
    }
    run_alone(m, ref);

    /* batched steps */
    cmf_session *sess[NS];
    for (int s = 0; s < NS; s++) CHECK(cmf_session_new(m, NCTX, &sess[s]) == CMF_OK);
    cmf_batch *b = NULL;
    CHECK(cmf_batch_new(m, 160, NS, &b) == CMF_OK);
    int done[NS] = {0}, bad = 0, steps = 0;
    while (b && (done[0] < LEN0 || done[1] < LEN || done[2] < LEN)) {
        cmf_session *seqs[160];
        int32_t ids[160];
        int n = 0;
        for (int s = NS - 1; s >= 0; s--) { /* the decode tokens first, then session 0's chunk */
            const int want = s ? 1 : steps == 0 ? 150 : 1 + steps % 9;
            for (int k = 0; k < want && done[s] < len_of(s); k++, n++) {
                seqs[n] = sess[s];
                ids[n] = tok(s, done[s]++, V);
            }
        }
        CHECK_MSG(cmf_batch_run(b, seqs, ids, n) == CMF_OK, "%s", cmf_last_error());
        for (int s = 0; s < NS; s++)
            if (differ(cmf_session_logits(sess[s]), ref[s] + (size_t)(done[s] - 1) * V, V)) {
                if (!bad++)
                    fprintf(stderr, "%s %s: step %d (%d tokens): session %d at token %d differs from alone\n", hf,
                            cmf_dtype_name(dtype), steps, n, s, done[s] - 1);
            }
        steps++;
    }
    CHECK_MSG(bad == 0, "%s %s: %d batched logits rows differ from the token decoded alone", hf, cmf_dtype_name(dtype),
              bad);
    cmf_batch_free(b);

    /* session 0's prompt as one prefill, every position */
    cmf_session_reset(sess[0]);
    int32_t ids0[LEN0];
    for (int i = 0; i < LEN0; i++) ids0[i] = tok(0, i, V);
    float *all = malloc((size_t)LEN0 * V * sizeof(float));
    CHECK_MSG(cmf_session_prefill(sess[0], ids0, LEN0, all) == CMF_OK, "%s", cmf_last_error());
    int pbad = 0, first = -1;
    for (int i = 0; i < LEN0; i++)
        if (differ(all + (size_t)i * V, ref[0] + (size_t)i * V, V)) pbad++, first = first < 0 ? i : first;
    CHECK_MSG(pbad == 0, "%s %s: %d of %d prefill positions differ from decoding alone (first %d)", hf,
              cmf_dtype_name(dtype), pbad, LEN0, first);
    free(all);
    for (int s = 0; s < NS; s++) cmf_session_free(sess[s]);

    /* unfused: the same bits */
    cmf_cpu_set_fuse(0);
    run_alone(m, unf);
    cmf_cpu_set_fuse(1);
    int ubad = 0;
    for (int s = 0; s < NS; s++)
        for (int i = 0; i < len_of(s); i++) ubad += differ(unf[s] + (size_t)i * V, ref[s] + (size_t)i * V, V);
    CHECK_MSG(ubad == 0, "%s %s: %d logits rows differ between fused and unfused products", hf,
              cmf_dtype_name(dtype), ubad);
    fprintf(stderr, "%s %s: %d batched steps, prefill of %d, unfused: identical bits\n", hf, cmf_dtype_name(dtype),
            steps, LEN0);
    for (int s = 0; s < NS; s++) free(ref[s]), free(unf[s]);
    cmf_model_free(m);
}

int main(void) {
    check_model("qwen2", CMF_DT_Q4_BLOCK);
    check_model("qwen3", CMF_DT_Q8_ROW);
    check_model("llama", CMF_DT_Q4TP);
    check_model("stories260K", CMF_DT_Q4_BLOCK); /* down_proj 64 x 172: rows end in a partial block of 32 */
    CMF_TEST_END();
}
