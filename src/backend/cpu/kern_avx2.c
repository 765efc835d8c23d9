/* kern_avx2.c — the AVX2 path (kern.h), for x86-64 CPUs without AVX-512 VNNI. Per-function target attributes,
 * selected by cpu.c when CPUID reports AVX2, FMA and F16C.
 *
 * int8 family: weights are decoded to signed v; one block of 32 is one ymm. vpmaddubsw needs an unsigned
 * operand, so the dot product is taken as maddubs(|v|, sign(x, v)) (|v| <= 128 and |x| <= 127 keep each pair
 * sum within int16: 2*128*127 = 32512), widened to int32 by vpmaddwd with ones: exact. */
#include "backend/cpu/kern.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#include <string.h>

#define TGT __attribute__((target("avx2,fma,f16c")))
#define TGT_INLINE static inline __attribute__((always_inline)) TGT

TGT_INLINE float hsum(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* ---- int8 decoders: signed v, natural column order --------------------------------------------------------- */

TGT static void dec_q8(const cmf_weight *w, int64_t r, int64_t b0, int64_t kb, int8_t *q, float *ws) {
    const int64_t R = w->row0 + r, C = w->cols, c0 = 32 * b0;
    const int64_t m = C - c0 < 32 * kb ? C - c0 : 32 * kb;
    const uint8_t *src = w->data + R * C + c0;
    int64_t c = 0;
    for (; c + 32 <= m; c += 32)
        _mm256_storeu_si256((__m256i *)(void *)(q + c), _mm256_loadu_si256((const __m256i *)(const void *)(src + c)));
    if (c < m) memcpy(q + c, src + c, (size_t)(m - c));
    if (m < 32 * kb) memset(q + m, 0, (size_t)(32 * kb - m));
    cmf_kern_scales(w, r, b0, kb, ws);
}

TGT_INLINE void nib32(const uint8_t *nib, int8_t *q) {
    const __m128i v = _mm_loadu_si128((const __m128i *)(const void *)nib), m = _mm_set1_epi8(15);
    const __m128i lo = _mm_and_si128(v, m), hi = _mm_and_si128(_mm_srli_epi16(v, 4), m), o = _mm_set1_epi8(-8);
    _mm_storeu_si128((__m128i *)(void *)q, _mm_add_epi8(_mm_unpacklo_epi8(lo, hi), o));
    _mm_storeu_si128((__m128i *)(void *)(q + 16), _mm_add_epi8(_mm_unpackhi_epi8(lo, hi), o));
}

TGT static void dec_q4(const cmf_weight *w, int64_t r, int64_t b0, int64_t kb, int8_t *q, float *ws) {
    const int64_t g0 = (w->row0 + r) * (w->cols / 32) + b0;
    const int tiled = w->dtype == CMF_DT_Q4_TILED;
    for (int64_t b = 0; b < kb; b++) nib32(tiled ? w->data + 18 * (g0 + b) + 2 : w->data + 16 * (g0 + b), q + 32 * b);
    cmf_kern_scales(w, r, b0, kb, ws);
}

TGT static void dec_q4tp(const cmf_weight *w, int64_t r, int64_t b0, int64_t kb, int8_t *q, float *ws) {
    const int64_t g0 = (w->row0 + r) * (w->cols / 32) + b0;
    for (int64_t b = 0; b < kb; b++) nib32(w->data + 16 * (g0 + b), q + 32 * b);
    cmf_kern_scales(w, r, b0, kb, ws);
}

TGT static void dec_q2tp(const cmf_weight *w, int64_t r, int64_t b0, int64_t kb, int8_t *q, float *ws) {
    const int64_t g0 = (w->row0 + r) * (w->cols / 32) + b0;
    const __m128i m3 = _mm_set1_epi8(3), o = _mm_set1_epi8(-3);
    for (int64_t b = 0; b < kb; b++) {
        const __m128i x = _mm_loadl_epi64((const __m128i *)(const void *)(w->data + 8 * (g0 + b)));
        const __m128i s0 = _mm_and_si128(x, m3), s1 = _mm_and_si128(_mm_srli_epi16(x, 2), m3);
        const __m128i s2 = _mm_and_si128(_mm_srli_epi16(x, 4), m3), s3 = _mm_and_si128(_mm_srli_epi16(x, 6), m3);
        const __m128i t0 = _mm_unpacklo_epi8(s0, s1), t1 = _mm_unpacklo_epi8(s2, s3);
        const __m128i e0 = _mm_unpacklo_epi16(t0, t1), e1 = _mm_unpackhi_epi16(t0, t1);
        _mm_storeu_si128((__m128i *)(void *)(q + 32 * b), _mm_add_epi8(_mm_add_epi8(e0, e0), o));
        _mm_storeu_si128((__m128i *)(void *)(q + 32 * b + 16), _mm_add_epi8(_mm_add_epi8(e1, e1), o));
    }
    cmf_kern_scales(w, r, b0, kb, ws);
}

/* ---- int8 microkernel ------------------------------------------------------------------------------------- */

TGT_INLINE void mk_i8_t(const int8_t *q, int64_t ldq, const float *ws, int64_t ldw, int64_t kb, const cmf_qact *a,
                        int64_t t0, int64_t b0, float acc[KERN_RB][KERN_TB], const int T) {
    __m256 s[KERN_RB][KERN_TB];
    const int8_t *xq[KERN_TB];
    const float *xd[KERN_TB];
    for (int j = 0; j < T; j++) {
        xq[j] = a->q + ((t0 + j) * a->nb + b0) * 32;
        xd[j] = a->dx + ((t0 + j) * a->nb + b0) * 8;
        for (int i = 0; i < KERN_RB; i++) s[i][j] = _mm256_setzero_ps();
    }
    const __m256i ones = _mm256_set1_epi16(1);
    for (int64_t b = 0; b < kb; b++) {
        __m256i X[KERN_TB];
        __m256 D[KERN_TB];
        for (int j = 0; j < T; j++) {
            X[j] = _mm256_loadu_si256((const __m256i *)(const void *)(xq[j] + 32 * b));
            D[j] = _mm256_loadu_ps(xd[j] + 8 * b);
        }
        for (int i = 0; i < KERN_RB; i++) {
            const __m256i W = _mm256_loadu_si256((const __m256i *)(const void *)(q + i * ldq + 32 * b));
            const __m256i A = _mm256_abs_epi8(W);
            const __m256 S = _mm256_broadcast_ss(ws + i * ldw + b);
            for (int j = 0; j < T; j++) {
                const __m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(A, _mm256_sign_epi8(X[j], W)), ones);
                s[i][j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_mul_ps(S, D[j]), s[i][j]);
            }
        }
    }
    for (int i = 0; i < KERN_RB; i++)
        for (int j = 0; j < T; j++) acc[i][j] = hsum(s[i][j]);
}

TGT static void mk_i8(const int8_t *q, int64_t ldq, const float *ws, int64_t ldw, int64_t kb, const cmf_qact *a,
                      int64_t t0, int tb, int64_t b0, float acc[KERN_RB][KERN_TB]) {
    switch (tb) {
    case 1: mk_i8_t(q, ldq, ws, ldw, kb, a, t0, b0, acc, 1); break;
    case 2: mk_i8_t(q, ldq, ws, ldw, kb, a, t0, b0, acc, 2); break;
    case 3: mk_i8_t(q, ldq, ws, ldw, kb, a, t0, b0, acc, 3); break;
    default: mk_i8_t(q, ldq, ws, ldw, kb, a, t0, b0, acc, 4); break;
    }
}

/* ---- fused decode kernels (kern_gemv_i8) ---------------------------------------------------------------------
 * One block of 32 per ymm, weights read from the mapping and decoded in registers, four rows sharing the
 * activation loads, each decoded block dotted with each token's one-level int8 activations (slot = token), one
 * horizontal sum per row and token at the end. q8 (K = 0): maddubs(|v|, sign(x, v)) as in mk_i8. q4 (K = 1
 * q4_tiled, 2 q4_block, 3 q4tp with each row's ladder computed once): u = nibble = v + 8 (< 16, so maddubs pair
 * sums stay far inside int16), the nibble byte k (columns 2k, 2k+1) zero-extended to 16 bits and spread by
 * (x | x << 4) & 0x0f0f, and the lane correction cx >> 4 = -8 * (sum of the lane's 4 activations) added after
 * vpmaddwd. Lane totals are scaled in f32 by d * wscale (q8: by d, the row scale at the end). */

TGT_INLINE __m256i nib_unpack(const uint8_t *p) {
    const __m256i w16 = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)(const void *)p));
    return _mm256_and_si256(_mm256_or_si256(w16, _mm256_slli_epi16(w16, 4)), _mm256_set1_epi16(0x0f0f));
}

TGT_INLINE void gemv_t(const cmf_weight *w, int64_t r, int nr, const cmf_qact *a, float *ws,
                       float acc[KERN_RB][KERN_TB], const int K, const int T) {
    const int64_t C = w->cols, nb = a->nb, G = C / 32;
    const uint8_t *base[KERN_RB];
    const float *wsi[KERN_RB];
    float rs[KERN_RB], lad[KERN_RB][32];
    kern_tp tp;
    memset(&tp, 0, sizeof tp);
    if (K == 3) {
        cmf_kern_tp(w, &tp);
        for (int i = 0; i < nr; i++) cmf_kern_ladder(w, &tp, w->row0 + r + i, lad[i]);
    }
    for (int i = 0; i < KERN_RB; i++) {
        const int ii = i < nr ? i : nr - 1; /* rows past nr repeat the last one; their sums are dropped */
        const int64_t R = w->row0 + r + ii;
        base[i] = K == 0 ? w->data + R * C : K == 1 ? w->data + 18 * R * G + 2 : w->data + 16 * R * G;
        rs[i] = K == 0 ? cmf_f16_table[cmf_rd16(w->data + (size_t)(w->full_rows * C) + 2 * (size_t)R)] : 1.0f;
        wsi[i] = ws + ii * KERN_KB;
    }
    const __m256i ones = _mm256_set1_epi16(1);
    const int64_t grp = KERN_RB * (K == 0 ? C : K == 1 ? 18 * G : 16 * G); /* bytes of KERN_RB rows */
    const int64_t ahead = (KERN_PF_BYTES + grp - 1) / grp * grp; /* L2 prefetch distance, whole row groups */
    __m256 s[KERN_RB][KERN_GEMV_T];
    for (int i = 0; i < KERN_RB; i++)
        for (int j = 0; j < T; j++) s[i][j] = _mm256_setzero_ps();
    for (int64_t b0 = 0; b0 < nb; b0 += KERN_KB) {
        const int64_t kb = nb - b0 < KERN_KB ? nb - b0 : KERN_KB;
        if (K == 3)
            for (int i = 0; i < nr; i++)
                for (int64_t b = 0; b < kb; b++) ws[i * KERN_KB + b] = lad[i][cmf_kern_code(&tp, w->row0 + r + i, b0 + b)];
        else if (K != 0)
            for (int i = 0; i < nr; i++) cmf_kern_scales(w, r + i, b0, kb, ws + i * KERN_KB);
        for (int64_t b = 0; b < kb; b++) {
            const int64_t B = b0 + b;
            __m256i X[KERN_GEMV_T], CX[KERN_GEMV_T];
            __m256 D[KERN_GEMV_T];
            for (int j = 0; j < T; j++) {
                const int64_t o = j * nb + B;
                X[j] = _mm256_loadu_si256((const __m256i *)(const void *)(a->q + 32 * o));
                D[j] = _mm256_loadu_ps(a->dx + 8 * o);
                CX[j] = K != 0 ? _mm256_srai_epi32(_mm256_loadu_si256((const __m256i *)(const void *)(a->cx + 8 * o)), 4)
                               : _mm256_setzero_si256();
            }
            for (int i = 0; i < KERN_RB; i++) {
                /* the same columns of a row group ~16 KiB on (short row streams do not train the prefetcher) */
                if ((b & 1) == 0)
                    _mm_prefetch((const char *)(base[i] + ahead + (K == 0 ? 32 * B : K == 1 ? 18 * B : 16 * B)), _MM_HINT_T1);
                __m256i W;
                if (K == 0) {
                    if (B < G) {
                        W = _mm256_loadu_si256((const __m256i *)(const void *)(base[i] + 32 * B));
                    } else { /* the last, partial block of a row: missing columns read as 0 */
                        int8_t tmp[32] = {0};
                        memcpy(tmp, base[i] + 32 * B, (size_t)(C - 32 * B));
                        W = _mm256_loadu_si256((const __m256i *)(const void *)tmp);
                    }
                } else {
                    W = nib_unpack(K == 1 ? base[i] + 18 * B : base[i] + 16 * B);
                }
                const __m256i AW = K == 0 ? _mm256_abs_epi8(W) : W;
                const __m256 S = K != 0 ? _mm256_set1_ps(wsi[i][b]) : _mm256_setzero_ps();
                for (int j = 0; j < T; j++) {
                    __m256i p;
                    if (K == 0)
                        p = _mm256_madd_epi16(_mm256_maddubs_epi16(AW, _mm256_sign_epi8(X[j], W)), ones);
                    else
                        p = _mm256_add_epi32(_mm256_madd_epi16(_mm256_maddubs_epi16(AW, X[j]), ones), CX[j]);
                    s[i][j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), K != 0 ? _mm256_mul_ps(S, D[j]) : D[j], s[i][j]);
                }
            }
        }
    }
    for (int i = 0; i < nr; i++)
        for (int j = 0; j < T; j++) acc[i][j] = hsum(s[i][j]) * rs[i];
}

#define GEMV_FN(name, K)                                                                                          \
    TGT static void name(const cmf_weight *w, int64_t r, int nr, const cmf_qact *a, int nt, float *ws,             \
                         float acc[KERN_RB][KERN_TB]) {                                                           \
        if (nt == 1) gemv_t(w, r, nr, a, ws, acc, K, 1);                                                          \
        else gemv_t(w, r, nr, a, ws, acc, K, 2);                                                                  \
    }
GEMV_FN(gemv_q8, 0)
GEMV_FN(gemv_q4t, 1)
GEMV_FN(gemv_q4b, 2)
GEMV_FN(gemv_q4tp, 3)

/* ---- float family ------------------------------------------------------------------------------------------ */

TGT static void dec_f32(const cmf_weight *w, int64_t r, int64_t c0, int64_t nc, float *out) {
    const int64_t R = w->row0 + r, C = w->cols;
    if (w->dtype != CMF_DT_F16 && w->dtype != CMF_DT_BF16) {
        cmf_weight_cols_f32(w, r, c0, nc, out);
        return;
    }
    const uint8_t *p = w->data + (size_t)(R * C + c0) * 2;
    int64_t c = 0;
    for (; c + 8 <= nc; c += 8) {
        const __m128i h = _mm_loadu_si128((const __m128i *)(const void *)(p + 2 * c));
        const __m256 v = w->dtype == CMF_DT_F16
                             ? _mm256_cvtph_ps(h)
                             : _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
        _mm256_storeu_ps(out + c, v);
    }
    if (c < nc) cmf_weight_cols_f32(w, r, c0 + c, nc - c, out + c);
}

TGT_INLINE void mk_f32_t(const float *wf, int64_t ldw, const float *x, int64_t ldx, int64_t t0, int64_t c0,
                         int64_t nc, float acc[KERN_RB][KERN_TB], const int T) {
    __m256 s[KERN_RB][KERN_TB];
    for (int i = 0; i < KERN_RB; i++)
        for (int j = 0; j < T; j++) s[i][j] = _mm256_setzero_ps();
    const __m256i lane = _mm256_set_epi32(7, 6, 5, 4, 3, 2, 1, 0);
    for (int64_t c = 0; c < nc; c += 8) {
        const int m = nc - c < 8 ? (int)(nc - c) : 8;
        const __m256i k = _mm256_cmpgt_epi32(_mm256_set1_epi32(m), lane);
        __m256 X[KERN_TB];
        for (int j = 0; j < T; j++) X[j] = _mm256_maskload_ps(x + (t0 + j) * ldx + c0 + c, k);
        for (int i = 0; i < KERN_RB; i++) {
            const __m256 W = _mm256_maskload_ps(wf + i * ldw + c, k);
            for (int j = 0; j < T; j++) s[i][j] = _mm256_fmadd_ps(W, X[j], s[i][j]);
        }
    }
    for (int i = 0; i < KERN_RB; i++)
        for (int j = 0; j < T; j++) acc[i][j] = hsum(s[i][j]);
}

TGT static void mk_f32(const float *wf, int64_t ldw, const float *x, int64_t ldx, int64_t t0, int tb, int64_t c0,
                       int64_t nc, float acc[KERN_RB][KERN_TB]) {
    switch (tb) {
    case 1: mk_f32_t(wf, ldw, x, ldx, t0, c0, nc, acc, 1); break;
    case 2: mk_f32_t(wf, ldw, x, ldx, t0, c0, nc, acc, 2); break;
    case 3: mk_f32_t(wf, ldw, x, ldx, t0, c0, nc, acc, 3); break;
    default: mk_f32_t(wf, ldw, x, ldx, t0, c0, nc, acc, 4); break;
    }
}

/* ---- attention primitives (kern.h): 8 head_dim values per ymm, the last chunk masked ------------------------- */

TGT_INLINE __m256i tail_mask(int m) { return _mm256_cmpgt_epi32(_mm256_set1_epi32(m), _mm256_set_epi32(7, 6, 5, 4, 3, 2, 1, 0)); }

TGT static void attn_qk(const float *q, int64_t ldq, int G, const float *k, int64_t ldk, int n, int hd, float *s,
                        int64_t lds) {
    const int full = hd / 8;
    const __m256i tm = tail_mask(hd % 8);
    for (int j = 0; j < n; j++) {
        const float *kj = k + (int64_t)j * ldk;
        for (int g = 0; g < G; g++) {
            const float *qg = q + (int64_t)g * ldq;
            __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
            int c = 0;
            for (; c + 2 <= full; c += 2) {
                a0 = _mm256_fmadd_ps(_mm256_loadu_ps(qg + 8 * c), _mm256_loadu_ps(kj + 8 * c), a0);
                a1 = _mm256_fmadd_ps(_mm256_loadu_ps(qg + 8 * c + 8), _mm256_loadu_ps(kj + 8 * c + 8), a1);
            }
            if (c < full) a0 = _mm256_fmadd_ps(_mm256_loadu_ps(qg + 8 * c), _mm256_loadu_ps(kj + 8 * c), a0);
            if (hd % 8)
                a1 = _mm256_fmadd_ps(_mm256_maskload_ps(qg + 8 * full, tm), _mm256_maskload_ps(kj + 8 * full, tm), a1);
            s[(int64_t)g * lds + j] = hsum(_mm256_add_ps(a0, a1));
        }
    }
}

TGT static void attn_pv(const float *p, int64_t ldp, int G, const float *v, int64_t ldv, int n, int hd, float *o,
                        int64_t ldo) {
    enum { GB = 8 }; /* query heads per pass: GB accumulators stay in registers */
    for (int c = 0; c < hd; c += 8) {
        const __m256i m = tail_mask(hd - c >= 8 ? 8 : hd - c);
        for (int g0 = 0; g0 < G; g0 += GB) {
            const int gb = G - g0 < GB ? G - g0 : GB;
            __m256 acc[GB];
            for (int g = 0; g < gb; g++) acc[g] = _mm256_maskload_ps(o + (int64_t)(g0 + g) * ldo + c, m);
            for (int j = 0; j < n; j++) {
                const __m256 vj = _mm256_maskload_ps(v + (int64_t)j * ldv + c, m);
                for (int g = 0; g < gb; g++)
                    acc[g] = _mm256_fmadd_ps(_mm256_set1_ps(p[(int64_t)(g0 + g) * ldp + j]), vj, acc[g]);
            }
            for (int g = 0; g < gb; g++) _mm256_maskstore_ps(o + (int64_t)(g0 + g) * ldo + c, m, acc[g]);
        }
    }
}

/* exp(v) for v in [-87, 88] (callers clamp) as kern_avx512.c's exp_ps, 2^k built in the exponent bits (k in
 * [-126, 127]). */
TGT static inline __m256 exp_ps(__m256 v) {
    const __m256 l2e = _mm256_set1_ps(1.44269504088896341f), c1 = _mm256_set1_ps(0.693359375f);
    const __m256 c2 = _mm256_set1_ps(-2.12194440e-4f), one = _mm256_set1_ps(1.0f);
    const __m256 kf = _mm256_round_ps(_mm256_mul_ps(v, l2e), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m256 r = _mm256_fnmadd_ps(kf, c2, _mm256_fnmadd_ps(kf, c1, v));
    __m256 p = _mm256_set1_ps(1.9875691500e-4f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
    p = _mm256_fmadd_ps(_mm256_mul_ps(p, r), r, _mm256_add_ps(r, one));
    const __m256i e2 = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(kf), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(p, _mm256_castsi256_ps(e2));
}

/* x[j] = exp(x[j] - m) for j < n (arguments clamped at -87); returns their sum (masked tail). */
TGT static float exp_sum(float *x, int n, float m) {
    const __m256 M = _mm256_set1_ps(m), lo = _mm256_set1_ps(-87.0f);
    __m256 sum = _mm256_setzero_ps();
    for (int j = 0; j < n; j += 8) {
        const __m256i mk = tail_mask(n - j >= 8 ? 8 : n - j);
        const __m256 v = _mm256_max_ps(_mm256_sub_ps(_mm256_maskload_ps(x + j, mk), M), lo);
        const __m256 e = _mm256_and_ps(exp_ps(v), _mm256_castsi256_ps(mk));
        _mm256_maskstore_ps(x + j, mk, e);
        sum = _mm256_add_ps(sum, e);
    }
    return hsum(sum);
}

/* SiLU x / (1 + exp(-x)), exp(-x) by exp_ps (argument clamped to [-87, 88]), an IEEE division; masked loads and
 * stores for the tail. */
TGT static void silu(float *x, int64_t n) {
    const __m256 lo = _mm256_set1_ps(-87.0f), hi = _mm256_set1_ps(88.0f), one = _mm256_set1_ps(1.0f);
    for (int64_t j = 0; j < n; j += 8) {
        const __m256i mk = tail_mask(n - j >= 8 ? 8 : (int)(n - j));
        const __m256 xv = _mm256_maskload_ps(x + j, mk);
        const __m256 e = exp_ps(_mm256_min_ps(_mm256_max_ps(_mm256_sub_ps(_mm256_setzero_ps(), xv), lo), hi));
        _mm256_maskstore_ps(x + j, mk, _mm256_div_ps(xv, _mm256_add_ps(one, e)));
    }
}

static const cmf_kern kern = {
    .name = "avx2",
    .decode_i8 = {[CMF_DT_Q8_ROW] = dec_q8, [CMF_DT_Q8_2F] = dec_q8, [CMF_DT_Q4_BLOCK] = dec_q4,
                  [CMF_DT_Q4_TILED] = dec_q4, [CMF_DT_Q4TP] = dec_q4tp, [CMF_DT_Q2TP] = dec_q2tp},
    .gemv_i8 = {[CMF_DT_Q8_ROW] = gemv_q8, [CMF_DT_Q8_2F] = gemv_q8, [CMF_DT_Q4_BLOCK] = gemv_q4b,
                [CMF_DT_Q4_TILED] = gemv_q4t, [CMF_DT_Q4TP] = gemv_q4tp},
    .mk_i8 = mk_i8,
    .decode_f32 = dec_f32,
    .mk_f32 = mk_f32,
    .gemm_pack_i8 = cmf_gemm_pack_i8_avx2, /* gemm_avx2.c */
    .gemm_i8 = cmf_gemm_i8_avx2,
    .attn_qk = attn_qk,
    .attn_pv = attn_pv,
    .exp_sum = exp_sum,
    .silu = silu,
    .rp_gemv = cmf_rp_gemv_avx2, /* the repacked q4 family (repack.c, rp_avx2.c) */
    .rp_gemm = cmf_rp_gemm_avx2,
};
const cmf_kern *const cmf_kern_avx2 = &kern;

#else
const cmf_kern *const cmf_kern_avx2 = 0;
#endif
