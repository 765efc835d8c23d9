/* The cpu backend's decode attention split by KV head (backend_cpu.c: a one-token step of one chunk runs a job per
 * range of KV heads, each with its heads' RoPE, KV write and attention) gives the bits of the whole-token jobs, also
 * when the jobs really run on the pool's threads. The tiny test models never reach the default pool threshold, so
 * cmf_cpu_set_attn_serial_max(0) sends every step's attention to the pool here.
 *
 * Per model (hf-tiny qwen2 q4_block: q/k/v biases; qwen3 q8_row: q/k head norms; gemma2 q8_row: logit softcap,
 * sliding layers; llama q4tp: 4 query heads per KV head), 300 tokens (one chunk up to 256 positions, then two):
 *   ref:    one cmf_session_prefill of the 300 tokens with every position's logits (a job per token, all heads);
 *   alone:  the same tokens decoded one by one with the default threshold (the short steps on the calling thread);
 *   pool:   decoded one by one with threshold 0 (the KV-head jobs on the pool), fused RoPE and then CMF_CPU_FUSE off
 *           (RoPE and KV write before the fan-out);
 * every row of alone and pool equals ref's bit for bit. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/ops.h"
#include "cmf.h"
#include "convert/convert.h"
#include "quant/dtype.h"
#include "testutil.h"

enum { LEN = 300, NCTX = 320 };

static int32_t tok(int s, int i, int V) { return (int32_t)((s * 131 + i * 17 + 5 + (i * i) % 29) % V); }

/* Rows of got that differ from ref (first one reported). */
static int compare(const char *what, const char *hf, const float *got, const float *ref, int V) {
    int bad = 0;
    for (int i = 0; i < LEN; i++)
        if (memcmp(got + (size_t)i * V, ref + (size_t)i * V, (size_t)V * sizeof(float)) && !bad++)
            fprintf(stderr, "%s %s: first differing position %d\n", hf, what, i);
    return bad;
}

static void check_model(const char *hf, int dtype) {
    char path[1024], dir[256];
    snprintf(path, sizeof path, "%s", tmp_path(hf));
    strncat(path, "-split.cmf", sizeof path - strlen(path) - 1);
    snprintf(dir, sizeof dir, "data/hf-tiny/%s", hf);
    cmf_convert_opts o = {0};
    o.quant = dtype;
    CHECK_MSG(cmf_convert_hf(shared_path(dir), path, &o) == CMF_OK, "%s: %s", hf, cmf_last_error());
    cmf_model *m = NULL;
    CHECK_MSG(cmf_model_load(path, NULL, &m) == CMF_OK, "%s: %s", hf, cmf_last_error());
    if (!m) return;
    const int V = cmf_model_vocab_size(m);
    float *ref = malloc((size_t)LEN * V * sizeof(float)), *got = malloc((size_t)LEN * V * sizeof(float));
    CHECK(ref && got);
    if (!ref || !got) {
        free(ref), free(got), cmf_model_free(m);
        return;
    }
    cmf_session *s = NULL;
    CHECK_MSG(cmf_session_new(m, NCTX, &s) == CMF_OK, "%s", cmf_last_error());
    int32_t ids[LEN];
    for (int i = 0; i < LEN; i++) ids[i] = tok(0, i, V);
    if (s) CHECK_MSG(cmf_session_prefill(s, ids, LEN, ref) == CMF_OK, "%s", cmf_last_error());
    cmf_session_free(s);

    const int lens[1] = {LEN};
    float *rows[1] = {got};
    cmf_test_decode_alone(m, NCTX, 1, lens, tok, rows);
    const int b1 = compare("decoded alone (default threshold)", hf, got, ref, V);
    cmf_cpu_set_attn_serial_max(0);
    cmf_test_decode_alone(m, NCTX, 1, lens, tok, rows);
    const int b2 = compare("decoded alone, attention on the pool", hf, got, ref, V);
    cmf_cpu_set_fuse(0);
    cmf_test_decode_alone(m, NCTX, 1, lens, tok, rows);
    const int b3 = compare("decoded alone, attention on the pool, unfused", hf, got, ref, V);
    cmf_cpu_set_fuse(1);
    cmf_cpu_set_attn_serial_max(-1);
    CHECK_MSG(b1 == 0 && b2 == 0 && b3 == 0,
              "%s %s: rows differing from the prefill: default %d, pool %d, pool unfused %d (of %d)", hf,
              cmf_dtype_name(dtype), b1, b2, b3, LEN);
    if (!b1 && !b2 && !b3) fprintf(stderr, "%s %s: %d positions, identical bits\n", hf, cmf_dtype_name(dtype), LEN);
    free(ref);
    free(got);
    cmf_model_free(m);
}

int main(void) {
    check_model("qwen2", CMF_DT_Q4_BLOCK);
    check_model("qwen3", CMF_DT_Q8_ROW);
    check_model("gemma2", CMF_DT_Q8_ROW);
    check_model("llama", CMF_DT_Q4TP);
    CMF_TEST_END();
}
