/* kern_avx512.c — the AVX-512 VNNI path (kern.h). Every function carries its own target attribute, so the file
 * builds without -march flags and the binary still runs on any x86-64 (cpu.c only selects this path when CPUID
 * reports AVX-512 F/BW/VL/DQ/VNNI, F16C and FMA).
 *
 * int8 family: weights are decoded to u = v + 128 (unsigned bytes) and multiplied with the signed activations by
 * vpdpbusd; each int32 lane starts at -128 * (the sum of its 4 activations) (cx), so it ends holding exactly
 * sum (v+128)*x - 128*sum x = sum v*x over its 4 columns (no large values that would cancel in f32). One zmm covers two blocks of 32: lanes 0-7 block b, 8-15 block
 * b+1; they are converted to f32 and scaled by wscale*xscale per lane (dx holds xscale per lane). */
#include "backend/cpu/kern.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#include <string.h>

#define TGT __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,fma,f16c")))
#define TGT_INLINE static inline __attribute__((always_inline)) TGT

/* ---- weight scales per block (f16 decoded 16 at a time) ---------------------------------------------------- */

TGT static void scales(const cmf_weight *w, int64_t r, int64_t b0, int64_t kb, float *ws) {
    const int64_t R = w->row0 + r, C = w->cols;
    if (w->dtype == CMF_DT_Q4_BLOCK || w->dtype == CMF_DT_Q4_TILED) {
        const int64_t g0 = R * (C / 32) + b0, G = (w->full_rows * C + 31) / 32;
        uint16_t h[16];
        for (int64_t b = 0; b < kb; b += 16) {
            const int m = kb - b < 16 ? (int)(kb - b) : 16;
            const __mmask16 k = (__mmask16)((1u << m) - 1u);
            __m256i hv;
            if (w->dtype == CMF_DT_Q4_BLOCK) {
                hv = _mm256_maskz_loadu_epi16(k, w->data + 16 * G + 2 * (g0 + b));
            } else {
                for (int i = 0; i < m; i++) h[i] = cmf_rd16(w->data + 18 * (g0 + b + i));
                hv = _mm256_maskz_loadu_epi16(k, h);
            }
            _mm512_mask_storeu_ps(ws + b, k, _mm512_cvtph_ps(hv));
        }
        return;
    }
    cmf_kern_scales(w, r, b0, kb, ws);
}

/* ---- int8 decoders: u = v + 128, natural column order ------------------------------------------------------ */

TGT static void dec_q8(const cmf_weight *w, int64_t r, int64_t b0, int64_t kb, int8_t *q, float *ws) {
    const int64_t R = w->row0 + r, C = w->cols, c0 = 32 * b0;
    const int8_t *src = (const int8_t *)w->data + R * C + c0;
    const int64_t m = C - c0 < 32 * kb ? C - c0 : 32 * kb;
    const __m512i off = _mm512_set1_epi8((char)0x80);
    int64_t c = 0;
    for (; c + 64 <= m; c += 64) _mm512_storeu_si512(q + c, _mm512_xor_si512(_mm512_loadu_si512(src + c), off));
    for (; c < 32 * kb; c += 64) { /* tail: padded columns hold v = 0, i.e. u = 128 */
        const int64_t left = m - c, full = 32 * kb - c;
        const __mmask64 lk = left <= 0 ? 0 : left >= 64 ? ~(__mmask64)0 : (((__mmask64)1 << left) - 1);
        const __mmask64 sk = full >= 64 ? ~(__mmask64)0 : (((__mmask64)1 << full) - 1);
        _mm512_mask_storeu_epi8(q + c, sk, _mm512_xor_si512(_mm512_maskz_loadu_epi8(lk, src + c), off));
    }
    scales(w, r, b0, kb, ws);
}

TGT_INLINE void nib32(const uint8_t *nib, int8_t *q) {
    const __m128i v = _mm_loadu_si128((const __m128i *)(const void *)nib), m = _mm_set1_epi8(15);
    const __m128i lo = _mm_and_si128(v, m), hi = _mm_and_si128(_mm_srli_epi16(v, 4), m), o = _mm_set1_epi8(120);
    _mm_storeu_si128((__m128i *)(void *)q, _mm_add_epi8(_mm_unpacklo_epi8(lo, hi), o));
    _mm_storeu_si128((__m128i *)(void *)(q + 16), _mm_add_epi8(_mm_unpackhi_epi8(lo, hi), o));
}

TGT static void dec_q4(const cmf_weight *w, int64_t r, int64_t b0, int64_t kb, int8_t *q, float *ws) {
    const int64_t g0 = (w->row0 + r) * (w->cols / 32) + b0;
    if (w->dtype == CMF_DT_Q4_TILED)
        for (int64_t b = 0; b < kb; b++) nib32(w->data + 18 * (g0 + b) + 2, q + 32 * b);
    else
        for (int64_t b = 0; b < kb; b++) nib32(w->data + 16 * (g0 + b), q + 32 * b);
    scales(w, r, b0, kb, ws);
}

TGT static void dec_q4tp(const cmf_weight *w, int64_t r, int64_t b0, int64_t kb, int8_t *q, float *ws) {
    const int64_t g0 = (w->row0 + r) * (w->cols / 32) + b0;
    for (int64_t b = 0; b < kb; b++) nib32(w->data + 16 * (g0 + b), q + 32 * b);
    cmf_kern_scales(w, r, b0, kb, ws);
}

TGT static void dec_q2tp(const cmf_weight *w, int64_t r, int64_t b0, int64_t kb, int8_t *q, float *ws) {
    const int64_t g0 = (w->row0 + r) * (w->cols / 32) + b0;
    const __m128i m3 = _mm_set1_epi8(3), o = _mm_set1_epi8(125);
    for (int64_t b = 0; b < kb; b++) {
        const __m128i x = _mm_loadl_epi64((const __m128i *)(const void *)(w->data + 8 * (g0 + b)));
        const __m128i s0 = _mm_and_si128(x, m3), s1 = _mm_and_si128(_mm_srli_epi16(x, 2), m3);
        const __m128i s2 = _mm_and_si128(_mm_srli_epi16(x, 4), m3), s3 = _mm_and_si128(_mm_srli_epi16(x, 6), m3);
        const __m128i t0 = _mm_unpacklo_epi8(s0, s1), t1 = _mm_unpacklo_epi8(s2, s3);
        const __m128i e0 = _mm_unpacklo_epi16(t0, t1), e1 = _mm_unpackhi_epi16(t0, t1); /* c of 4k+j in order */
        _mm_storeu_si128((__m128i *)(void *)(q + 32 * b), _mm_add_epi8(_mm_add_epi8(e0, e0), o));
        _mm_storeu_si128((__m128i *)(void *)(q + 32 * b + 16), _mm_add_epi8(_mm_add_epi8(e1, e1), o));
    }
    cmf_kern_scales(w, r, b0, kb, ws);
}

/* ---- int8 microkernel ------------------------------------------------------------------------------------- */

/* Lane k of the result = the sum of the 16 lanes of v[k / 4][k % 4] (a transposing reduction: pairs of vectors
 * folded within 128-bit chunks, then the four chunks). */
TGT_INLINE __m512 reduce16(__m512 v[KERN_RB][KERN_TB]) {
    __m512 t[8], u[4];
    for (int k = 0; k < 8; k++) {
        const __m512 a = v[(2 * k) / 4][(2 * k) % 4], b = v[(2 * k + 1) / 4][(2 * k + 1) % 4];
        t[k] = _mm512_add_ps(_mm512_unpacklo_ps(a, b), _mm512_unpackhi_ps(a, b)); /* chunk: a02 b02 a13 b13 */
    }
    for (int k = 0; k < 4; k++) { /* chunk: the chunk sums of v[4k..4k+3] */
        const __m512 a = t[2 * k], b = t[2 * k + 1];
        const __m512 lo = _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(a), _mm512_castps_pd(b)));
        const __m512 hi = _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(a), _mm512_castps_pd(b)));
        u[k] = _mm512_add_ps(lo, hi);
    }
    const __m512 w01 = _mm512_add_ps(_mm512_shuffle_f32x4(u[0], u[1], _MM_SHUFFLE(1, 0, 1, 0)),
                                     _mm512_shuffle_f32x4(u[0], u[1], _MM_SHUFFLE(3, 2, 3, 2)));
    const __m512 w23 = _mm512_add_ps(_mm512_shuffle_f32x4(u[2], u[3], _MM_SHUFFLE(1, 0, 1, 0)),
                                     _mm512_shuffle_f32x4(u[2], u[3], _MM_SHUFFLE(3, 2, 3, 2)));
    return _mm512_add_ps(_mm512_shuffle_f32x4(w01, w23, _MM_SHUFFLE(2, 0, 2, 0)),
                         _mm512_shuffle_f32x4(w01, w23, _MM_SHUFFLE(3, 1, 3, 1)));
}

TGT_INLINE void mk_i8_t(const int8_t *q, int64_t ldq, const float *ws, int64_t ldw, int64_t kb, const cmf_qact *a,
                        int64_t t0, int64_t b0, float acc[KERN_RB][KERN_TB], const int T) {
    __m512 s[KERN_RB][KERN_TB];
    const int8_t *xq[KERN_TB];
    const float *xd[KERN_TB];
    const int32_t *cx[KERN_TB];
    for (int j = 0; j < T; j++) {
        xq[j] = a->q + ((t0 + j) * a->nb + b0) * 32;
        xd[j] = a->dx + ((t0 + j) * a->nb + b0) * 8;
        cx[j] = a->cx + ((t0 + j) * a->nb + b0) * 8;
        for (int i = 0; i < KERN_RB; i++) s[i][j] = _mm512_setzero_ps();
    }
    const __m512i pair = _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0);
    int64_t b = 0;
    for (; b + 2 <= kb; b += 2) {
        __m512i X[KERN_TB], CX[KERN_TB];
        __m512 D[KERN_TB];
        for (int j = 0; j < T; j++) {
            X[j] = _mm512_loadu_si512(xq[j] + 32 * b);
            CX[j] = _mm512_loadu_si512(cx[j] + 8 * b);
            D[j] = _mm512_loadu_ps(xd[j] + 8 * b);
        }
        for (int i = 0; i < KERN_RB; i++) {
            const __m512i W = _mm512_loadu_si512(q + i * ldq + 32 * b);
            const __m512 S = _mm512_permutexvar_ps(pair, _mm512_castps128_ps512(_mm_castpd_ps(
                                                             _mm_load_sd((const double *)(const void *)(ws + i * ldw + b)))));
            for (int j = 0; j < T; j++) {
                const __m512i p = _mm512_dpbusd_epi32(CX[j], W, X[j]);
                s[i][j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), _mm512_mul_ps(S, D[j]), s[i][j]);
            }
        }
    }
    if (b < kb) { /* one block left: the low half of the vectors */
        const __mmask64 k8 = 0xffffffffull;
        const __mmask16 k32 = 0x00ff;
        for (int i = 0; i < KERN_RB; i++) {
            const __m512i W = _mm512_maskz_loadu_epi8(k8, q + i * ldq + 32 * b);
            const __m512 S = _mm512_set1_ps(ws[i * ldw + b]);
            for (int j = 0; j < T; j++) {
                const __m512i X = _mm512_maskz_loadu_epi8(k8, xq[j] + 32 * b);
                const __m512i p = _mm512_dpbusd_epi32(_mm512_maskz_loadu_epi32(k32, cx[j] + 8 * b), W, X);
                const __m512 D = _mm512_maskz_loadu_ps(k32, xd[j] + 8 * b);
                s[i][j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), _mm512_mul_ps(S, D), s[i][j]);
            }
        }
    }
    if (T == KERN_TB) { /* all 16 sums at once: 45 shuffles/adds instead of 16 separate reductions */
        float o[16];
        _mm512_storeu_ps(o, reduce16(s));
        for (int i = 0; i < KERN_RB; i++)
            for (int j = 0; j < T; j++) acc[i][j] = o[i * KERN_TB + j];
        return;
    }
    for (int i = 0; i < KERN_RB; i++)
        for (int j = 0; j < T; j++) acc[i][j] = _mm512_reduce_add_ps(s[i][j]);
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
 * Weights are read from the mapping and decoded in registers, 2 blocks (64 columns) per zmm, and dotted with each
 * token's one-level int8 activations (slot = token): p = dpbusd(cx, u, x) is the exact sum v*x of each 4-column
 * lane, scaled in f32 as p * (d * wscale) (q8: p * d, the row scale applied at the end). Four rows share every
 * activation load; one horizontal reduce per row and token at the end. K selects the weight encoding:
 *   K = 0: q8_row / q8_2f, u = q ^ 0x80 = v + 128, per-lane correction cx (one row scale, applied at the end);
 *   K = 1: q4_tiled, 16 nibble bytes at byte 2 of each 18-byte tile; K = 2: q4_block, 16 bytes per group;
 *   K = 3: q4tp, laid out as q4_block, each row's scale ladder computed once per call.
 *   q4: u = nibble = v + 8, correction cx >> 4 = -8 * (sum of the lane's 4 activations). A nibble byte k holds
 *   columns 2k (low) and 2k+1 (high): zero-extended to 16 bits, (x | x << 4) & 0x0f0f puts them in bytes 2k, 2k+1. */

TGT_INLINE __m512 pair_scale(const float *ws, int64_t b) {
    const __m512i pair = _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0);
    return _mm512_permutexvar_ps(pair, _mm512_castps128_ps512(_mm_castpd_ps(_mm_load_sd((const double *)(const void *)(ws + b)))));
}

TGT_INLINE __m512i nib_unpack(__m256i n) {
    const __m512i w16 = _mm512_cvtepu8_epi16(n);
    return _mm512_ternarylogic_epi32(w16, _mm512_slli_epi16(w16, 4), _mm512_set1_epi16(0x0f0f), 0xa8);
}

/* u of blocks B, B+1 of a row (K as above); all 64 columns present. */
TGT_INLINE __m512i wpair(const uint8_t *p, int64_t B, const int K) {
    if (K == 0) return _mm512_xor_si512(_mm512_loadu_si512(p + 32 * B), _mm512_set1_epi8((char)0x80));
    if (K == 1) /* K = 3 (q4tp) reads as K = 2 */
        return nib_unpack(_mm256_inserti128_si256(
            _mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)(const void *)(p + 18 * B))),
            _mm_loadu_si128((const __m128i *)(const void *)(p + 18 * (B + 1))), 1));
    return nib_unpack(_mm256_loadu_si256((const __m256i *)(const void *)(p + 16 * B)));
}

/* The same for the last nbl (1 or 2) blocks of a row; q8: m columns present from block B on (the rest read as
 * v = 0). */
TGT_INLINE __m512i wpair_tail(const uint8_t *p, int64_t B, int nbl, int64_t m, const int K) {
    if (K == 0) {
        const __mmask64 k = m >= 64 ? ~(__mmask64)0 : m <= 0 ? 0 : (((__mmask64)1 << m) - 1);
        return _mm512_xor_si512(_mm512_maskz_loadu_epi8(k, p + 32 * B), _mm512_set1_epi8((char)0x80));
    }
    if (nbl == 2) return wpair(p, B, K);
    const uint8_t *q = K == 1 ? p + 18 * B : p + 16 * B;
    return nib_unpack(_mm256_zextsi128_si256(_mm_loadu_si128((const __m128i *)(const void *)q)));
}

/* Activations of blocks B, B+1 (k8/k32: the masks of 1 or 2 blocks) of token slot j: x, its lane correction
 * (>> 4 for the q4 encodings) and the per-lane scale. */
TGT_INLINE void act_pair(const cmf_qact *a, int64_t j, int64_t B, __mmask64 k8, __mmask16 k32, const int K,
                         __m512i *X, __m512i *C, __m512 *D) {
    const int64_t o = j * a->nb + B;
    *X = _mm512_maskz_loadu_epi8(k8, a->q + 32 * o);
    *C = _mm512_maskz_loadu_epi32(k32, a->cx + 8 * o);
    if (K != 0) *C = _mm512_srai_epi32(*C, 4);
    *D = _mm512_maskz_loadu_ps(k32, a->dx + 8 * o);
}

/* The f16 scales of blocks B, B+1 of a q4 row as the pair layout (lanes 0-7 block B, 8-15 block B+1); K = 1:
 * at the head of each 18-byte tile (p = the row's first nibble byte), K = 2: the row's run of f16 scales sp. Read
 * in the loop, next to the nibbles (a separate pass over the tile heads stalled on their first touch). */
TGT_INLINE __m512 pair_scale_h(const uint8_t *p, const uint8_t *sp, int64_t B, int two, const int K) {
    uint16_t h0, h1 = 0;
    if (K == 1) {
        memcpy(&h0, p + 18 * B - 2, 2);
        if (two) memcpy(&h1, p + 18 * B + 16, 2);
    } else {
        memcpy(&h0, sp + 2 * B, 2);
        if (two) memcpy(&h1, sp + 2 * B + 2, 2);
    }
    const __m128 f = _mm_cvtph_ps(_mm_cvtsi32_si128((int)((uint32_t)h0 | (uint32_t)h1 << 16)));
    const __m512i pair = _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0);
    return _mm512_permutexvar_ps(pair, _mm512_castps128_ps512(f));
}

TGT_INLINE void gemv_t(const cmf_weight *w, int64_t r, int nr, const cmf_qact *a, float *ws,
                       float acc[KERN_RB][KERN_TB], const int K, const int T) {
    const int64_t C = w->cols, nb = a->nb, G = C / 32;
    const uint8_t *base[KERN_RB], *sbase[KERN_RB];
    const float *wsi[KERN_RB];
    float rs[KERN_RB], lad[KERN_RB][32];
    kern_tp tp;
    memset(&tp, 0, sizeof tp);
    if (K == 3) { /* q4tp: each row's ladder once (§2.6), then one rung per block */
        cmf_kern_tp(w, &tp);
        for (int i = 0; i < nr; i++) cmf_kern_ladder(w, &tp, w->row0 + r + i, lad[i]);
    }
    const int64_t Gall = (w->full_rows * C + 31) / 32; /* q4_block: groups of the whole tensor (§2.4) */
    for (int i = 0; i < KERN_RB; i++) {
        const int ii = i < nr ? i : nr - 1; /* rows past nr repeat the last one; their sums are dropped */
        const int64_t R = w->row0 + r + ii;
        base[i] = K == 0 ? w->data + R * C : K == 1 ? w->data + 18 * R * G + 2 : w->data + 16 * R * G; /* K 2, 3 */
        sbase[i] = K == 2 ? w->data + 16 * Gall + 2 * R * G : base[i];
        rs[i] = K == 0 ? cmf_f16_table[cmf_rd16(w->data + (size_t)(w->full_rows * C) + 2 * (size_t)R)] : 1.0f;
        wsi[i] = ws + ii * KERN_KB;
    }
    /* software prefetch into L2, whole row groups about KERN_PF_BYTES ahead (kern.h) */
    const int64_t grp = KERN_RB * (K == 0 ? C : K == 1 ? 18 * G : 16 * G); /* bytes of KERN_RB rows */
    const int64_t ahead = (KERN_PF_BYTES + grp - 1) / grp * grp;
    const int64_t chunk = K == 3 ? KERN_KB : nb; /* q4tp: rungs of KERN_KB blocks at a time into ws */
    __m512 s[KERN_RB][KERN_GEMV_T];
    for (int i = 0; i < KERN_RB; i++)
        for (int j = 0; j < T; j++) s[i][j] = _mm512_setzero_ps();
    for (int64_t b0 = 0; b0 < nb; b0 += chunk) {
        const int64_t kb = nb - b0 < chunk ? nb - b0 : chunk;
        if (K == 3)
            for (int i = 0; i < nr; i++)
                for (int64_t b = 0; b < kb; b++) ws[i * KERN_KB + b] = lad[i][cmf_kern_code(&tp, w->row0 + r + i, b0 + b)];
        const int64_t fullb = K == 0 ? (G - b0 < kb ? G - b0 : kb) : kb; /* blocks with all 32 columns */
        int64_t b = 0;
        for (; b + 2 <= fullb; b += 2) {
            const int64_t B = b0 + b;
            __m512i X[KERN_GEMV_T], CX[KERN_GEMV_T];
            __m512 D[KERN_GEMV_T];
            for (int j = 0; j < T; j++) act_pair(a, j, B, ~(__mmask64)0, 0xffff, K, &X[j], &CX[j], &D[j]);
            for (int i = 0; i < KERN_RB; i++) {
                /* the same columns of a row group ~16 KiB on: short interleaved row streams (896 columns in
                 * Qwen2.5-0.5B) do not train the hardware prefetcher */
                _mm_prefetch((const char *)(base[i] + ahead + (K == 0 ? 32 * B : K == 1 ? 18 * B : 16 * B)), _MM_HINT_T1);
                if (K != 0) /* q4: also the next row group into L1 (measured +10-25% at 1 thread; none seen on q8) */
                    _mm_prefetch((const char *)(base[i] + grp + (K == 1 ? 18 * B : 16 * B)), _MM_HINT_T0);
                const __m512i W = wpair(base[i], B, K);
                __m512 S = _mm512_setzero_ps();
                if (K == 3) S = pair_scale(wsi[i], b);
                else if (K != 0) S = pair_scale_h(base[i], sbase[i], B, 1, K);
                for (int j = 0; j < T; j++) {
                    const __m512 f = _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(CX[j], W, X[j]));
                    s[i][j] = _mm512_fmadd_ps(f, K != 0 ? _mm512_mul_ps(S, D[j]) : D[j], s[i][j]);
                }
            }
        }
        for (; b < kb; b += 2) { /* 1 or 2 blocks left (q8: possibly partial) */
            const int nbl = kb - b >= 2 ? 2 : 1;
            const int64_t B = b0 + b;
            const __mmask64 k8 = nbl == 2 ? ~(__mmask64)0 : 0xffffffffull;
            const __mmask16 k32 = nbl == 2 ? 0xffff : 0x00ff;
            __m512i X[KERN_GEMV_T], CX[KERN_GEMV_T];
            __m512 D[KERN_GEMV_T];
            for (int j = 0; j < T; j++) act_pair(a, j, B, k8, k32, K, &X[j], &CX[j], &D[j]);
            for (int i = 0; i < KERN_RB; i++) {
                const __m512i W = wpair_tail(base[i], B, nbl, C - 32 * B, K);
                __m512 S = _mm512_setzero_ps();
                if (K == 3) S = nbl == 2 ? pair_scale(wsi[i], b) : _mm512_set1_ps(wsi[i][b]);
                else if (K != 0) S = pair_scale_h(base[i], sbase[i], B, nbl == 2, K);
                for (int j = 0; j < T; j++) {
                    const __m512 f = _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(CX[j], W, X[j]));
                    s[i][j] = _mm512_fmadd_ps(f, K != 0 ? _mm512_mul_ps(S, D[j]) : D[j], s[i][j]);
                }
            }
        }
    }
    float red[KERN_RB][KERN_GEMV_T]; /* all rows reduced (fixed bounds keep s in registers), rows < nr kept */
    for (int i = 0; i < KERN_RB; i++)
        for (int j = 0; j < T; j++) red[i][j] = _mm512_reduce_add_ps(s[i][j]) * rs[i];
    for (int i = 0; i < nr; i++)
        for (int j = 0; j < T; j++) acc[i][j] = red[i][j];
}

TGT static void gemv_q8(const cmf_weight *w, int64_t r, int nr, const cmf_qact *a, int nt, float *ws,
                        float acc[KERN_RB][KERN_TB]) {
    if (nt == 1) gemv_t(w, r, nr, a, ws, acc, 0, 1);
    else gemv_t(w, r, nr, a, ws, acc, 0, 2);
}

TGT static void gemv_q4t(const cmf_weight *w, int64_t r, int nr, const cmf_qact *a, int nt, float *ws,
                         float acc[KERN_RB][KERN_TB]) {
    if (nt == 1) gemv_t(w, r, nr, a, ws, acc, 1, 1);
    else gemv_t(w, r, nr, a, ws, acc, 1, 2);
}

TGT static void gemv_q4tp(const cmf_weight *w, int64_t r, int nr, const cmf_qact *a, int nt, float *ws,
                          float acc[KERN_RB][KERN_TB]) {
    if (nt == 1) gemv_t(w, r, nr, a, ws, acc, 3, 1);
    else gemv_t(w, r, nr, a, ws, acc, 3, 2);
}

TGT static void gemv_q4b(const cmf_weight *w, int64_t r, int nr, const cmf_qact *a, int nt, float *ws,
                         float acc[KERN_RB][KERN_TB]) {
    if (nt == 1) gemv_t(w, r, nr, a, ws, acc, 2, 1);
    else gemv_t(w, r, nr, a, ws, acc, 2, 2);
}

/* ---- float family ------------------------------------------------------------------------------------------ */

TGT static void dec_f32(const cmf_weight *w, int64_t r, int64_t c0, int64_t nc, float *out) {
    const int64_t R = w->row0 + r, C = w->cols;
    if (w->dtype != CMF_DT_F16 && w->dtype != CMF_DT_BF16) {
        cmf_weight_cols_f32(w, r, c0, nc, out);
        return;
    }
    const uint8_t *p = w->data + (size_t)(R * C + c0) * 2;
    for (int64_t c = 0; c < nc; c += 16) {
        const int m = nc - c < 16 ? (int)(nc - c) : 16;
        const __mmask16 k = (__mmask16)((1u << m) - 1u);
        const __m256i h = _mm256_maskz_loadu_epi16(k, p + 2 * c);
        const __m512 v = w->dtype == CMF_DT_F16
                             ? _mm512_cvtph_ps(h)
                             : _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
        _mm512_mask_storeu_ps(out + c, k, v);
    }
}

TGT_INLINE void mk_f32_t(const float *wf, int64_t ldw, const float *x, int64_t ldx, int64_t t0, int64_t c0,
                         int64_t nc, float acc[KERN_RB][KERN_TB], const int T) {
    __m512 s[KERN_RB][KERN_TB];
    for (int i = 0; i < KERN_RB; i++)
        for (int j = 0; j < T; j++) s[i][j] = _mm512_setzero_ps();
    for (int64_t c = 0; c < nc; c += 16) {
        const int m = nc - c < 16 ? (int)(nc - c) : 16;
        const __mmask16 k = (__mmask16)((1u << m) - 1u);
        __m512 X[KERN_TB];
        for (int j = 0; j < T; j++) X[j] = _mm512_maskz_loadu_ps(k, x + (t0 + j) * ldx + c0 + c);
        for (int i = 0; i < KERN_RB; i++) {
            const __m512 W = _mm512_maskz_loadu_ps(k, wf + i * ldw + c);
            for (int j = 0; j < T; j++) s[i][j] = _mm512_fmadd_ps(W, X[j], s[i][j]);
        }
    }
    for (int i = 0; i < KERN_RB; i++)
        for (int j = 0; j < T; j++) acc[i][j] = _mm512_reduce_add_ps(s[i][j]);
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

/* ---- attention primitives (kern.h): 16 head_dim values per zmm, the last chunk masked ------------------------ */

/* 16 positions at a time (hd a multiple of 16, at most 256): one accumulator per position, the 16 reduced together
 * by the transposing reduce16 into one vector of scores. */
TGT_INLINE void attn_qk16(const float *qg, const float *k, int64_t ldk, int hd, float *s) {
    __m512 Q[16], a[KERN_RB][KERN_TB];
    const int nc = hd / 16;
    for (int c = 0; c < nc; c++) Q[c] = _mm512_loadu_ps(qg + 16 * c);
    for (int j = 0; j < 16; j++) {
        const float *kj = k + (int64_t)j * ldk;
        __m512 acc = _mm512_mul_ps(Q[0], _mm512_loadu_ps(kj));
        for (int c = 1; c < nc; c++) acc = _mm512_fmadd_ps(Q[c], _mm512_loadu_ps(kj + 16 * c), acc);
        a[j / KERN_TB][j % KERN_TB] = acc;
    }
    _mm512_storeu_ps(s, reduce16(a));
}

TGT static void attn_qk(const float *q, int64_t ldq, int G, const float *k, int64_t ldk, int n, int hd, float *s,
                        int64_t lds) {
    const int full = hd / 16;
    const __mmask16 tail = (__mmask16)((1u << (hd % 16)) - 1u);
    int j0 = 0;
    if (hd % 16 == 0 && hd <= 256) {
        for (; j0 + 16 <= n; j0 += 16)
            for (int g = 0; g < G; g++) attn_qk16(q + (int64_t)g * ldq, k + (int64_t)j0 * ldk, ldk, hd, s + (int64_t)g * lds + j0);
    }
    for (int j = j0; j < n; j++) {
        const float *kj = k + (int64_t)j * ldk;
        for (int g = 0; g < G; g++) {
            const float *qg = q + (int64_t)g * ldq;
            __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
            int c = 0;
            for (; c + 2 <= full; c += 2) {
                a0 = _mm512_fmadd_ps(_mm512_loadu_ps(qg + 16 * c), _mm512_loadu_ps(kj + 16 * c), a0);
                a1 = _mm512_fmadd_ps(_mm512_loadu_ps(qg + 16 * c + 16), _mm512_loadu_ps(kj + 16 * c + 16), a1);
            }
            if (c < full) a0 = _mm512_fmadd_ps(_mm512_loadu_ps(qg + 16 * c), _mm512_loadu_ps(kj + 16 * c), a0);
            if (tail)
                a1 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(tail, qg + 16 * full), _mm512_maskz_loadu_ps(tail, kj + 16 * full), a1);
            s[(int64_t)g * lds + j] = _mm512_reduce_add_ps(_mm512_add_ps(a0, a1));
        }
    }
}

/* GB query heads x 64 head_dim values (4 zmm, masked past hd) from c: GB * 4 independent accumulators, so the
 * multiply-adds do not wait on each other (one chain per head and 16 values stalled on the fma latency with 1-2 heads
 * per KV head); each output value still sums over j in order, as the scalar loop does. */
TGT_INLINE void pv_tile(const float *p, int64_t ldp, const float *v, int64_t ldv, int n, int c, int hd, float *o,
                        int64_t ldo, const int GB) {
    __mmask16 m[4];
    for (int q = 0; q < 4; q++) {
        const int left = hd - c - 16 * q;
        m[q] = left >= 16 ? (__mmask16)0xffff : left > 0 ? (__mmask16)((1u << left) - 1u) : (__mmask16)0;
    }
    __m512 acc[4][4];
    for (int g = 0; g < GB; g++)
        for (int q = 0; q < 4; q++) acc[g][q] = _mm512_maskz_loadu_ps(m[q], o + (int64_t)g * ldo + c + 16 * q);
    for (int j = 0; j < n; j++) {
        __m512 vj[4];
        for (int q = 0; q < 4; q++) vj[q] = _mm512_maskz_loadu_ps(m[q], v + (int64_t)j * ldv + c + 16 * q);
        for (int g = 0; g < GB; g++) {
            const __m512 P = _mm512_set1_ps(p[(int64_t)g * ldp + j]);
            for (int q = 0; q < 4; q++) acc[g][q] = _mm512_fmadd_ps(P, vj[q], acc[g][q]);
        }
    }
    for (int g = 0; g < GB; g++)
        for (int q = 0; q < 4; q++) _mm512_mask_storeu_ps(o + (int64_t)g * ldo + c + 16 * q, m[q], acc[g][q]);
}

TGT static void attn_pv(const float *p, int64_t ldp, int G, const float *v, int64_t ldv, int n, int hd, float *o,
                        int64_t ldo) {
    for (int c = 0; c < hd; c += 64)
        for (int g0 = 0; g0 < G; g0 += 4) {
            const float *pg = p + (int64_t)g0 * ldp;
            float *og = o + (int64_t)g0 * ldo;
            switch (G - g0 < 4 ? G - g0 : 4) {
            case 1: pv_tile(pg, ldp, v, ldv, n, c, hd, og, ldo, 1); break;
            case 2: pv_tile(pg, ldp, v, ldv, n, c, hd, og, ldo, 2); break;
            case 3: pv_tile(pg, ldp, v, ldv, n, c, hd, og, ldo, 3); break;
            default: pv_tile(pg, ldp, v, ldv, n, c, hd, og, ldo, 4); break;
            }
        }
}

/* exp(v) for v in [-87, 88] (callers clamp) by exp(r) * 2^k, k = round(v log2 e), r = v - k ln 2 (ln 2 split in two),
 * exp(r) by the Cephes expf polynomial; 2^k applied by vscalefps. */
TGT static inline __m512 exp_ps(__m512 v) {
    const __m512 l2e = _mm512_set1_ps(1.44269504088896341f), c1 = _mm512_set1_ps(0.693359375f);
    const __m512 c2 = _mm512_set1_ps(-2.12194440e-4f), one = _mm512_set1_ps(1.0f);
    const __m512 kf = _mm512_roundscale_ps(_mm512_mul_ps(v, l2e), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m512 r = _mm512_fnmadd_ps(kf, c2, _mm512_fnmadd_ps(kf, c1, v));
    __m512 p = _mm512_set1_ps(1.9875691500e-4f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
    p = _mm512_fmadd_ps(_mm512_mul_ps(p, r), r, _mm512_add_ps(r, one));
    return _mm512_scalef_ps(p, kf);
}

/* x[j] = exp(x[j] - m) for j < n (arguments clamped at -87: exp ~1.6e-38); returns their sum. */
TGT static float exp_sum(float *x, int n, float m) {
    const __m512 M = _mm512_set1_ps(m), lo = _mm512_set1_ps(-87.0f);
    __m512 sum = _mm512_setzero_ps();
    for (int j = 0; j < n; j += 16) {
        const __mmask16 k = n - j >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - j)) - 1u);
        const __m512 e = exp_ps(_mm512_max_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, x + j), M), lo));
        _mm512_mask_storeu_ps(x + j, k, e);
        sum = _mm512_mask_add_ps(sum, k, sum, e);
    }
    return _mm512_reduce_add_ps(sum);
}

/* SiLU x / (1 + exp(-x)), exp(-x) as in exp_sum (argument clamped to [-87, 88]: beyond, x / (1 + e) is x or ~0
 * either way), an IEEE division. */
TGT static void silu(float *x, int64_t n) {
    const __m512 lo = _mm512_set1_ps(-87.0f), hi = _mm512_set1_ps(88.0f), one = _mm512_set1_ps(1.0f);
    for (int64_t j = 0; j < n; j += 16) {
        const __mmask16 k = n - j >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - j)) - 1u);
        const __m512 xv = _mm512_maskz_loadu_ps(k, x + j);
        const __m512 e = exp_ps(_mm512_min_ps(_mm512_max_ps(_mm512_sub_ps(_mm512_setzero_ps(), xv), lo), hi));
        _mm512_mask_storeu_ps(x + j, k, _mm512_div_ps(xv, _mm512_add_ps(one, e)));
    }
}

static const cmf_kern kern = {
    .name = "avx512-vnni",
    .decode_i8 = {[CMF_DT_Q8_ROW] = dec_q8, [CMF_DT_Q8_2F] = dec_q8, [CMF_DT_Q4_BLOCK] = dec_q4,
                  [CMF_DT_Q4_TILED] = dec_q4, [CMF_DT_Q4TP] = dec_q4tp, [CMF_DT_Q2TP] = dec_q2tp},
    .gemv_i8 = {[CMF_DT_Q8_ROW] = gemv_q8, [CMF_DT_Q8_2F] = gemv_q8, [CMF_DT_Q4_BLOCK] = gemv_q4b,
                [CMF_DT_Q4_TILED] = gemv_q4t, [CMF_DT_Q4TP] = gemv_q4tp},
    .mk_i8 = mk_i8,
    .decode_f32 = dec_f32,
    .mk_f32 = mk_f32,
    .gemm_pack_i8 = cmf_gemm_pack_i8_avx512, /* gemm_avx512.c */
    .gemm_i8 = cmf_gemm_i8_avx512,
    .gemm_pack_f32 = cmf_gemm_pack_f32_avx512,
    .gemm_f32 = cmf_gemm_f32_avx512,
    .attn_qk = attn_qk,
    .attn_pv = attn_pv,
    .exp_sum = exp_sum,
    .silu = silu,
    .rp_gemv = cmf_rp_gemv_avx512, /* the repacked q4 family (repack.c, rp_avx512.c) */
    .rp_gemm = cmf_rp_gemm_avx512,
};
const cmf_kern *const cmf_kern_avx512 = &kern;

#else
const cmf_kern *const cmf_kern_avx512 = 0;
#endif
