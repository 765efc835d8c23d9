/* gemm_scalar.c — the reference of the int8 GEMM's arithmetic (kern.h, cmf_gemm_ref_i8), which the SIMD GEMMs
 * (gemm_avx512.c, gemm_avx2.c) are tested against. It shares no code with them: weights come from the scalar
 * path's decode_i8 (signed v in natural column order, one f32 scale per block: CMF_FORMAT.md §2.2–2.7), the
 * block dot products are plain int32 loops, and the scaled sum is taken in double. */
#include "backend/cpu/kern.h"

void cmf_gemm_ref_i8(const cmf_weight *w, const cmf_qact *a, int64_t n, float *out, int64_t ld_out,
                     const float *bias, double *mag) {
    enum { CB = 8 }; /* blocks decoded at a time */
    int8_t q[CB * 32];
    float ws[CB];
    const kern_decode_i8 dec = cmf_kern_scalar.decode_i8[w->dtype];
    for (int64_t r = 0; r < w->rows; r++) {
        for (int64_t t = 0; t < n; t++) {
            double s = bias ? (double)bias[r] : 0.0, m = bias ? (double)(bias[r] < 0 ? -bias[r] : bias[r]) : 0.0;
            for (int64_t b0 = 0; b0 < a->nb; b0 += CB) {
                const int64_t kb = a->nb - b0 < CB ? a->nb - b0 : CB;
                dec(w, r, b0, kb, q, ws); /* re-decoded per token: a reference, not fast */
                for (int64_t b = 0; b < kb; b++) {
                    const int8_t *x = a->q + (t * a->nb + b0 + b) * 32;
                    int32_t isum = 0;
                    for (int k = 0; k < 32; k++) isum += (int32_t)q[32 * b + k] * x[k];
                    const double term = (double)ws[b] * (double)a->d[t * a->nb + b0 + b] * (double)isum;
                    s += term;
                    m += term < 0 ? -term : term;
                }
            }
            out[t * ld_out + r] = (float)s;
            if (mag) mag[t * ld_out + r] = m;
        }
    }
}
