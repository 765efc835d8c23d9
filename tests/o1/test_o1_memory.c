/* test_o1_memory.c — acceptance line 2 of the O(1) far field (DORY.md §3.1: decode in constant memory), on a
 * tiny real-architecture model (hf-tiny qwen3: 3 full-attention layers, 4 heads / 2 KV heads, head_dim 32):
 *  - with --o1 all (m 8, window 32, sink 4, seal 128) the session's KV + far-field state bytes
 *    (cmf_session_state_bytes) and its measured growth of touched anonymous memory (RssAnon) are the same at
 *    512, 1024 and 2048 tokens of context, and the state bytes do not grow while the tokens are fed (the seal
 *    gives the prompt's query trace back);
 *  - the exact session's bytes are exactly proportional to the context (2 · n_layers · n_kv_heads · head_dim
 *    floats per position), and its RSS growth follows that KV growth.
 * Each figure is measured in a fresh child process (bench/o1/o1_mem.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../bench/o1/o1_mem.h"
#include "cmf.h"
#include "convert/convert.h"
#include "quant/dtype.h"
#include "testutil.h"

enum { N_CTX = 3 };
static const int CTX[N_CTX] = {512, 1024, 2048};

int main(void) {
    unsetenv("CMF_O1");
    char path[1024];
    snprintf(path, sizeof path, "%s", tmp_path("o1-mem-qwen3.cmf"));
    cmf_convert_opts o = {0};
    o.quant = CMF_DT_F32;
    CHECK_MSG(cmf_convert_hf(shared_path("data/hf-tiny/qwen3"), path, &o) == CMF_OK, "%s", cmf_last_error());
    /* per-position KV bytes of the exact cache: 3 layers x (K + V) x 2 KV heads x head_dim 32 x f32 */
    const size_t row_bytes = 3 * 2 * 2 * 32 * sizeof(float);

    cmf_session_params exact = {0}, o1 = {0};
    o1.o1 = "all", o1.o1_m = 8, o1.o1_window = 32, o1.o1_sink = 4, o1.o1_sink_set = 1, o1.o1_seal = 128;
    o1_mem_result re[N_CTX], ro[N_CTX];
    for (int i = 0; i < N_CTX; i++) {
        CHECK_MSG(o1_mem_measure(path, 2, &exact, CTX[i], 256, &re[i]) == 0, "exact %d: %s", CTX[i], re[i].error);
        CHECK_MSG(o1_mem_measure(path, 2, &o1, CTX[i], 256, &ro[i]) == 0, "o1 %d: %s", CTX[i], ro[i].error);
        printf("ctx %5d  exact: %8zu bytes, RssAnon +%6ld KiB | o1 (%d layers): %8zu bytes, RssAnon +%6ld KiB\n",
               CTX[i], re[i].state_bytes, re[i].rss_growth_kb, ro[i].o1_layers, ro[i].state_bytes,
               ro[i].rss_growth_kb);
        CHECK(re[i].pos == CTX[i] && ro[i].pos == CTX[i]);
        CHECK(ro[i].o1_layers == 3 && re[i].o1_layers == 0);
        CHECK_MSG(re[i].state_bytes == (size_t)CTX[i] * row_bytes, "exact bytes %zu at ctx %d, expected %zu",
                  re[i].state_bytes, CTX[i], (size_t)CTX[i] * row_bytes);
        /* nothing grows while decoding; the seal gives back the query trace (3 layers x 128 rows x 4 heads x 32) */
        CHECK_MSG(ro[i].state_bytes + 3 * 128 * 4 * 32 * sizeof(float) == ro[i].state_bytes_new,
                  "o1 bytes %zu after feeding, %zu at creation", ro[i].state_bytes, ro[i].state_bytes_new);
        CHECK_MSG(ro[i].state_bytes == ro[0].state_bytes, "o1 bytes differ: %zu at %d vs %zu at %d",
                  ro[i].state_bytes, CTX[i], ro[0].state_bytes, CTX[0]);
        /* identical allocations, touched identically: equal up to a few pages of allocator noise */
        long d = ro[i].rss_growth_kb - ro[0].rss_growth_kb;
        CHECK_MSG(d >= -64 && d <= 64, "o1 RSS growth %ld KiB at %d vs %ld KiB at %d", ro[i].rss_growth_kb, CTX[i],
                  ro[0].rss_growth_kb, CTX[0]);
    }
    /* the exact cache's touched memory grows with the KV rows written (sanitizer shadow memory adds 1/8) */
    const double kv_kb = (double)(re[N_CTX - 1].state_bytes - re[0].state_bytes) / 1024.0;
    const double rss_kb = (double)(re[N_CTX - 1].rss_growth_kb - re[0].rss_growth_kb);
    CHECK_MSG(rss_kb >= 0.9 * kv_kb && rss_kb <= 1.5 * kv_kb + 256,
              "exact RSS growth %d -> %d: %.0f KiB for %.0f KiB of KV", CTX[0], CTX[N_CTX - 1], rss_kb, kv_kb);
    CHECK(ro[0].state_bytes < re[0].state_bytes);
    CMF_TEST_END();
}
