/* The two layouts of the q4tp repacked copy (kern.h cmf_rp: f32 rungs, sbytes 4, made on the AVX2 and scalar paths;
 * ladder codes, sbytes 1, made on the AVX-512 path; cmf_rp_set_tp_layout forces one) give a whole model the same
 * logits bit for bit: hf-tiny llama converted to q4tp (CMF_FORMAT.md §2.6), loaded once per layout on every path this
 * CPU runs that has repacked kernels, a 24-token prompt prefilled with every position's logits (the GEMM) and 6 tokens
 * decoded one by one (the decode kernel); the layouts' copies differ in size (so the copy really changed: 20 vs
 * 17 bytes per 32 values plus, for codes, 8 bytes of ladder per row; at these widths of 2-5 blocks the f32 one is
 * the smaller). Paths are compared with themselves only (attention's exp differs between paths). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/kern.h"
#include "backend/cpu/ops.h"
#include "cmf.h"
#include "convert/convert.h"
#include "quant/dtype.h"
#include "testutil.h"

enum { NP = 24, ND = 6 };

/* Loads path's model with q4tp layout lay; out = NP prefill rows then ND decode rows of V logits; *bytes = the copy. */
static int run(const char *file, int lay, float **out, int *V, size_t *bytes) {
    cmf_rp_set_tp_layout(lay);
    cmf_model *m = NULL;
    const size_t before = cmf_cpu_repack_bytes();
    CHECK_MSG(cmf_model_load(file, NULL, &m) == CMF_OK, "%s", cmf_last_error());
    cmf_rp_set_tp_layout(0);
    if (!m) return 0;
    *bytes = cmf_cpu_repack_bytes() - before;
    *V = cmf_model_vocab_size(m);
    *out = malloc((size_t)(NP + ND) * (size_t)*V * sizeof(float));
    cmf_session *s = NULL;
    CHECK(cmf_session_new(m, 64, &s) == CMF_OK);
    int32_t ids[NP];
    for (int i = 0; i < NP; i++) ids[i] = (int32_t)((7 + 13 * i + (i * i) % 11) % *V);
    CHECK_MSG(s && cmf_session_prefill(s, ids, NP, *out) == CMF_OK, "%s", cmf_last_error());
    for (int i = 0; s && i < ND; i++) {
        CHECK_MSG(cmf_session_decode(s, (int32_t)((3 + 29 * i) % *V)) == CMF_OK, "%s", cmf_last_error());
        memcpy(*out + (size_t)(NP + i) * *V, cmf_session_logits(s), (size_t)*V * sizeof(float));
    }
    cmf_session_free(s);
    cmf_model_free(m);
    return 1;
}

int main(void) {
    char file[1024];
    snprintf(file, sizeof file, "%s", tmp_path("llama-tp-layout.cmf"));
    cmf_convert_opts o = {0};
    o.quant = CMF_DT_Q4TP;
    CHECK_MSG(cmf_convert_hf(shared_path("data/hf-tiny/llama"), file, &o) == CMF_OK, "%s", cmf_last_error());
    const int paths[] = {CMF_CPU_SCALAR, CMF_CPU_AVX2, CMF_CPU_AVX512};
    int tested = 0;
    for (size_t pi = 0; pi < sizeof paths / sizeof paths[0]; pi++) {
        if (!cmf_cpu_path_supported(paths[pi])) continue;
        CHECK(cmf_cpu_set_path(paths[pi]) == CMF_OK);
        if (!cmf_kern_active()->rp_gemv) continue;
        float *a = NULL, *b = NULL;
        int Va = 0, Vb = 0;
        size_t ba = 0, bb = 0;
        if (run(file, 1, &a, &Va, &ba) && run(file, 4, &b, &Vb, &bb)) {
            CHECK(Va == Vb && Va > 0);
            CHECK_MSG(ba > 0 && bb > 0 && bb != ba, "%s: copies of %zu (codes) and %zu (f32) bytes",
                      cmf_cpu_path_name(paths[pi]), ba, bb);
            int bad = 0, first = -1;
            for (int r = 0; r < NP + ND && Va == Vb; r++)
                if (memcmp(a + (size_t)r * Va, b + (size_t)r * Va, (size_t)Va * sizeof(float)))
                    bad++, first = first < 0 ? r : first;
            CHECK_MSG(bad == 0, "%s: %d of %d logits rows differ between the q4tp layouts (first %d)",
                      cmf_cpu_path_name(paths[pi]), bad, NP + ND, first);
            if (!bad)
                fprintf(stderr, "%s: q4tp copies %zu / %zu bytes, %d logits rows identical\n",
                        cmf_cpu_path_name(paths[pi]), ba, bb, NP + ND);
            tested++;
        }
        free(a);
        free(b);
    }
    CHECK(tested > 0);
    remove(file);
    CMF_TEST_END();
}
