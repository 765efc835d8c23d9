/* test_o1_scratch.c — the per-thread attention-score scratch of a session's batch is sized by the key rows its
 * attention can read (session.c attn_rows_read), not by the context size: a session whose full-attention layers
 * all run the far field (--o1 all, seal 64) on a context of 4M positions keeps a scratch of about the seal length,
 * where sizing by n_ctx would reserve 16 MiB per thread; an exact session's scratch follows its position. The
 * scratch is read through the pool (cmf_pool_scratch) and measured with malloc_usable_size (glibc; ASan too).
 * Also: a sealed session gives its query trace back, and after a reset records a new one (same logits again).
 * Reads past the scratch would be reported by the ASan build of this and every other session test.
 * Model: hf-tiny qwen3 (3 full-attention layers, 4 heads of 32). */
#define _GNU_SOURCE
#include <malloc.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/threadpool.h"
#include "cmf.h"
#include "model/model.h"
#include "testutil.h"

enum { N_CTX = 1 << 22, SEAL = 64, STEPS = 8 };

/* Largest usable scratch over the pool's threads of s's private batch. */
static size_t scratch_bytes(const cmf_session *s) {
    size_t most = 0;
    if (!s->own || !s->own->pool) return 0;
    for (int i = 0; i < cmf_pool_size(s->own->pool); i++) {
        size_t u = malloc_usable_size(cmf_pool_scratch(s->own->pool, i, 0));
        if (u > most) most = u;
    }
    return most;
}

static void feed(cmf_session *s, int n_prompt, int steps, int V) {
    int32_t ids[SEAL];
    for (int i = 0; i < n_prompt; i++) ids[i] = (int32_t)((11 * i + 5) % V);
    CHECK_MSG(cmf_session_prefill(s, ids, n_prompt, NULL) == CMF_OK, "prefill: %s", cmf_last_error());
    for (int i = 0; i < steps; i++)
        CHECK_MSG(cmf_session_decode(s, (int32_t)((3 * i + 1) % V)) == CMF_OK, "decode: %s", cmf_last_error());
}

int main(void) {
    unsetenv("CMF_O1");
    char path[512];
    snprintf(path, sizeof path, "%s", tmp_path("o1_scratch_qwen3.cmf"));
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "\"%s\" convert \"%s\" -o \"%s\" --quant f32 >/dev/null 2>&1", getenv("CMF_BIN"),
             shared_path("data/hf-tiny/qwen3"), path);
    CHECK_MSG(system(cmd) == 0, "%s", cmd);
    cmf_model *m = NULL;
    cmf_model_params mp = {.n_threads = 2};
    CHECK_MSG(cmf_model_load(path, &mp, &m) == CMF_OK, "load: %s", cmf_last_error());
    if (!m) CMF_TEST_END();
    const int V = cmf_model_vocab_size(m);
    const cmf_config *c = &m->cfg;
    /* the widest weight row a matmul decodes into the same scratch (session.c cmf_batch_new) */
    size_t widest = (size_t)c->hidden_size;
    if ((size_t)c->n_heads * c->head_dim > widest) widest = (size_t)c->n_heads * c->head_dim;
    if ((size_t)c->intermediate_size > widest) widest = (size_t)c->intermediate_size;
    const size_t bound = 64 * 1024; /* far above the seal's 64 rows and any matmul tile of this model */

    cmf_session_params po = {.n_ctx = N_CTX, .o1 = "all", .o1_seal = SEAL};
    cmf_session *s = NULL;
    CHECK_MSG(cmf_session_new_ex(m, &po, &s) == CMF_OK, "o1 session: %s", cmf_last_error());
    if (s) {
        feed(s, SEAL, STEPS, V);
        CHECK(s->o1 && s->o1->sealed && cmf_session_pos(s) == SEAL + STEPS);
        /* the seal gave the query trace back; a reset records a new one, and the run repeats bit for bit */
        float *first = malloc((size_t)V * sizeof *first);
        memcpy(first, cmf_session_logits(s), (size_t)V * sizeof *first);
        const size_t bytes = cmf_session_state_bytes(s);
        for (int l = 0; s->o1 && l < c->n_layers; l++) CHECK(s->o1->qtrace[l] == NULL);
        cmf_session_reset(s);
        feed(s, SEAL, STEPS, V);
        CHECK(s->o1 && s->o1->sealed && cmf_session_state_bytes(s) == bytes);
        CHECK_MSG(memcmp(first, cmf_session_logits(s), (size_t)V * sizeof *first) == 0,
                  "after a reset the same tokens give other logits");
        free(first);
        size_t got = scratch_bytes(s);
        CHECK_MSG(got >= SEAL * sizeof(float) && got >= widest * sizeof(float) && got < bound,
                  "--o1 all, n_ctx %d: scratch %zu bytes, want [%zu, %zu) (n_ctx floats would be %zu)", N_CTX, got,
                  SEAL * sizeof(float), bound, (size_t)N_CTX * sizeof(float));
        cmf_session_free(s);
    }

    cmf_session_params pe = {.n_ctx = 1 << 17, .o1 = "off"}; /* n_ctx floats: 512 KiB */
    CHECK_MSG(cmf_session_new_ex(m, &pe, &s) == CMF_OK, "exact session: %s", cmf_last_error());
    if (s) {
        feed(s, SEAL, STEPS, V);
        size_t got = scratch_bytes(s);
        CHECK_MSG(got >= (SEAL + STEPS) * sizeof(float) && got < bound,
                  "exact, n_ctx %d at position %d: scratch %zu bytes, want [%zu, %zu)", 1 << 17, SEAL + STEPS, got,
                  (SEAL + STEPS) * sizeof(float), bound);
        cmf_session_free(s);
    }
    cmf_model_free(m);
    remove(path);
    CMF_TEST_END();
}
