/* rp_avx2.c — AVX2 kernels over the repacked q4 layout (kern.h cmf_rp), for x86-64 CPUs without AVX-512 VNNI. A
 * 64-byte quarter of a group is two ymm of 8 rows x 4 columns; (x & 15) and (x >> 4) & 15 are the unsigned operands
 * of vpmaddubsw against 4 int8 activations broadcast to every lane (u <= 15, |x| <= 127: each pair sum fits int16,
 * and so do the 8 of a block: at most 8 * 2 * 15 * 127 = 30480), one vpmaddwd with ones per block widens to int32,
 * the lanes get -8 * s (the block's activation sum) and F += I * (scale * d) in f32, 8 rows per ymm (q4tp: the copy
 * made for this path holds the f32 rung per block, read as is; a copy with ladder codes, made while the AVX-512 path
 * was active, has its rungs looked up per group into L1 scratch with vpermps, tp_plane: ~0.94x the f32 copy's decode
 * speed on a compute-bound 2-core Zen 4, bench/RESULTS.md issue 4 session 7 cpu7). Decode streams
 * its groups front to back with a software prefetch KERN_PF_BYTES ahead (each line once); prefill takes 8 rows x up
 * to 4 tokens per microkernel. Instructions: Intel SDM (VPMADDUBSW, VPMADDWD, VCVTPH2PS). */
#include "backend/cpu/kern.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#include <string.h>

#include "backend/cpu/rp_x86.h"
#define TGT __attribute__((target("avx2,fma,f16c"))) RP_NOSAN
#define TGT_INLINE static inline __attribute__((always_inline)) TGT

enum { TP_KB = 64 };  /* q4tp GEMM: blocks of a chunk whose rungs are looked up per call (4 KiB of stack) */
enum { TP_NB = 512 }; /* q4tp decode: blocks per row of the rung plane on the stack (32 KiB); longer rows: the GEMM */

/* The 8 block scales of rows 8h..8h+7 of block b: scale plane sc of f16 (SB 2: q4_block / q4_tiled) or f32 (SB 4:
 * q4tp's f32 rungs). */
TGT_INLINE __m256 scales8(const uint8_t *sc, int64_t b, int h, const int SB) {
    if (SB == 4) return _mm256_load_ps((const float *)(const void *)(sc + 64 * b + 32 * h));
    return _mm256_cvtph_ps(_mm_load_si128((const __m128i *)(const void *)(sc + 32 * b + 16 * h)));
}

/* In-register transpose of 8 x 8 floats: r[j] lane i <- r[i] lane j (unpack, shuffle, 128-bit lane permute). */
TGT_INLINE void tr8(__m256 r[8]) {
    __m256 t[8], u[8];
    for (int k = 0; k < 4; k++) {
        t[2 * k] = _mm256_unpacklo_ps(r[2 * k], r[2 * k + 1]);
        t[2 * k + 1] = _mm256_unpackhi_ps(r[2 * k], r[2 * k + 1]);
    }
    for (int k = 0; k < 2; k++) {
        u[4 * k] = _mm256_shuffle_ps(t[4 * k], t[4 * k + 2], 0x44);
        u[4 * k + 1] = _mm256_shuffle_ps(t[4 * k], t[4 * k + 2], 0xEE);
        u[4 * k + 2] = _mm256_shuffle_ps(t[4 * k + 1], t[4 * k + 3], 0x44);
        u[4 * k + 3] = _mm256_shuffle_ps(t[4 * k + 1], t[4 * k + 3], 0xEE);
    }
    for (int k = 0; k < 4; k++) {
        r[k] = _mm256_permute2f128_ps(u[k], u[4 + k], 0x20);
        r[4 + k] = _mm256_permute2f128_ps(u[k], u[4 + k], 0x31);
    }
}

/* q4tp codes layout: the rungs of blocks [b0, b0 + kb) of group gp (nb blocks per row) as S[16(b - b0) + i] (row i,
 * block b; kb rounded up to 8 entries are written). Per half of 8 rows: the ladders built lane-wise (lane = row:
 * t[c] = t[c-1] * r, §2.6 step 3, the multiplies of cmf_rp_tp_ladders: the same bits), transposed to 4 ymm of rungs
 * per row; per row and 8 blocks, vpermps of the 8 codes into each quarter of the ladder and two blends by code bits
 * 3 and 4, then a transpose back to rows in lanes. */
TGT_INLINE void tp_plane(const uint8_t *gp, int64_t nb, int64_t b0, int64_t kb, float *S) {
    const float *lad = (const float *)(const void *)(gp + (size_t)nb * 256);
    const uint8_t *cd = cmf_rp_tp_codes(gp, nb);
    _Alignas(32) float RL[8 * 32]; /* RL[32i + c]: rung c of row 8h + i */
    for (int h = 0; h < 2; h++) {
        const __m256 r = _mm256_loadu_ps(lad + 16 + 8 * h);
        __m256 v[8], V = _mm256_loadu_ps(lad + 8 * h);
        for (int q = 0; q < 4; q++) {
            for (int c = 0; c < 8; c++) {
                if (q || c) V = _mm256_mul_ps(V, r);
                v[c] = V;
            }
            tr8(v);
            for (int i = 0; i < 8; i++) _mm256_store_ps(RL + 32 * i + 8 * q, v[i]);
        }
        for (int64_t c = 0; c < kb; c += 8) {
            __m256 w[8];
            for (int i = 0; i < 8; i++) {
                const uint8_t *p = cd + (8 * h + i) * nb + b0 + c;
                uint64_t b8 = 0;
                memcpy(&b8, p, (size_t)(kb - c < 8 ? kb - c : 8));
                const __m256i idx = _mm256_cvtepu8_epi32(_mm_cvtsi64_si128((long long)b8));
                const float *L = RL + 32 * i;
                const __m256 a0 = _mm256_permutevar8x32_ps(_mm256_load_ps(L), idx);
                const __m256 a1 = _mm256_permutevar8x32_ps(_mm256_load_ps(L + 8), idx);
                const __m256 a2 = _mm256_permutevar8x32_ps(_mm256_load_ps(L + 16), idx);
                const __m256 a3 = _mm256_permutevar8x32_ps(_mm256_load_ps(L + 24), idx);
                const __m256 m3 = _mm256_castsi256_ps(_mm256_slli_epi32(idx, 28));
                const __m256 m4 = _mm256_castsi256_ps(_mm256_slli_epi32(idx, 27));
                w[i] = _mm256_blendv_ps(_mm256_blendv_ps(a0, a1, m3), _mm256_blendv_ps(a2, a3, m3), m4);
            }
            tr8(w);
            for (int k = 0; k < 8; k++) _mm256_store_ps(S + 16 * (c + k) + 8 * h, w[k]);
        }
    }
}

/* The int32 sums v * x of rows 8h..8h+7 of block b (u at gp + 256 b) with the token's 32 values x, s their sum. */
TGT_INLINE __m256i dot8(const uint8_t *u, int h, const int8_t *x, int32_t s) {
    const __m256i m15 = _mm256_set1_epi8(15);
    __m256i acc = _mm256_setzero_si256();
    for (int m = 0; m < 4; m++) {
        const __m256i z = _mm256_load_si256((const __m256i *)(const void *)(u + 64 * m + 32 * h));
        const __m256i lo = _mm256_and_si256(z, m15), hi = _mm256_and_si256(_mm256_srli_epi16(z, 4), m15);
        acc = _mm256_add_epi16(acc, _mm256_maddubs_epi16(lo, _mm256_set1_epi32(rd32(x + 4 * m))));
        acc = _mm256_add_epi16(acc, _mm256_maddubs_epi16(hi, _mm256_set1_epi32(rd32(x + 16 + 4 * m))));
    }
    return _mm256_add_epi32(_mm256_madd_epi16(acc, _mm256_set1_epi16(1)), _mm256_set1_epi32(-8 * s));
}

/* The same for the q8 layout (u = v + 128 at gp + 512 b): v = u ^ 0x80, then maddubs(|v|, sign(x, v)) (|v| <= 128,
 * |x| <= 127: each pair sum fits int16), widened per column quad. */
TGT_INLINE __m256i dot8_q8(const uint8_t *u, int h, const int8_t *x) {
    const __m256i off = _mm256_set1_epi8((char)0x80), ones = _mm256_set1_epi16(1);
    __m256i acc = _mm256_setzero_si256();
    for (int g = 0; g < 8; g++) {
        const __m256i v =
            _mm256_xor_si256(_mm256_load_si256((const __m256i *)(const void *)(u + 64 * g + 32 * h)), off);
        const __m256i p =
            _mm256_maddubs_epi16(_mm256_abs_epi8(v), _mm256_sign_epi8(_mm256_set1_epi32(rd32(x + 4 * g)), v));
        acc = _mm256_add_epi32(acc, _mm256_madd_epi16(p, ones));
    }
    return acc;
}

/* ---- decode ---------------------------------------------------------------------------------------------------- */

void cmf_rp_gemm_avx2(const cmf_rp *rp, int64_t g0, int ng, int nr, int64_t b0, int64_t kb, const cmf_qact *a,
                      int64_t t0, int64_t t1, float *out, int64_t ld_out, const float *bias, int first, int last);

TGT_INLINE void gemv_t(const cmf_rp *rp, int64_t g0, int64_t nrows, const cmf_qact *a, float *y, int64_t ldy,
                       const int T, const int SB, const int Q8) {
    const int TP = SB == 1; /* q4tp ladder codes: the rungs from the group's plane S */
    const int64_t ng = (nrows + 15) / 16, nb = rp->nb, lines = (int64_t)rp->gstride / 64;
    const uint8_t *end = rp->pf_end; /* the arena's end: past this matrix, the next one of the set */
    _Alignas(32) float S[TP_NB * 16]; /* q4tp: the group's rung plane */
    for (int64_t k = 0; k < ng; k++) {
        const uint8_t *gp = rp->buf + (size_t)(g0 + k) * rp->gstride, *sc = gp + nb * (Q8 ? 512 : 256);
        if (TP) tp_plane(gp, nb, 0, nb, S);
        __m256 F[2][KERN_GEMV_T];
        for (int h = 0; h < 2; h++)
            for (int j = 0; j < T; j++) F[h][j] = _mm256_setzero_ps();
        for (int64_t b = 0; b < nb; b++) {
            const uint8_t *pf = gp + KERN_PF_BYTES; /* each line of the group KERN_PF_BYTES on, once */
            for (int64_t l = b * lines / nb, l1 = (b + 1) * lines / nb; l < l1 && pf + 64 * l < end; l++)
                _mm_prefetch((const char *)(pf + 64 * l), _MM_HINT_T1);
            for (int h = 0; h < 2; h++) {
                const __m256 Sb = Q8   ? _mm256_set1_ps(1.0f)
                                  : TP ? _mm256_load_ps(S + 16 * b + 8 * h)
                                       : scales8(sc, b, h, SB);
                for (int j = 0; j < T; j++) {
                    const int64_t o = j * a->nb + b;
                    const __m256i I =
                        Q8 ? dot8_q8(gp + b * 512, h, a->q + o * 32) : dot8(gp + b * 256, h, a->q + o * 32, a->s[o]);
                    F[h][j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(I),
                                              Q8 ? _mm256_set1_ps(a->d[o]) : _mm256_mul_ps(Sb, _mm256_set1_ps(a->d[o])),
                                              F[h][j]);
                }
            }
        }
        float t[KERN_GEMV_T][16];
        for (int j = 0; j < T; j++) {
            _mm256_storeu_ps(t[j],
                             Q8 ? _mm256_mul_ps(F[0][j], _mm256_load_ps((const float *)(const void *)sc)) : F[0][j]);
            _mm256_storeu_ps(t[j] + 8,
                             Q8 ? _mm256_mul_ps(F[1][j], _mm256_load_ps((const float *)(const void *)(sc + 32)))
                                : F[1][j]);
        }
        const int64_t left = nrows - 16 * k, n = left < 16 ? left : 16;
        for (int j = 0; j < T; j++) memcpy(y + j * ldy + 16 * k, t[j], (size_t)n * sizeof(float));
    }
}

TGT void cmf_rp_gemv_avx2(const cmf_rp *rp, int64_t g0, int64_t nrows, const cmf_qact *a, int nt, float *y,
                          int64_t ldy) {
    if (rp->q8) {
        if (nt == 1)
            gemv_t(rp, g0, nrows, a, y, ldy, 1, 2, 1);
        else
            gemv_t(rp, g0, nrows, a, y, ldy, 2, 2, 1);
    } else if (rp->sbytes == 4) { /* q4tp, f32 rungs */
        if (nt == 1)
            gemv_t(rp, g0, nrows, a, y, ldy, 1, 4, 0);
        else
            gemv_t(rp, g0, nrows, a, y, ldy, 2, 4, 0);
    } else if (rp->sbytes == 1 && rp->nb <= TP_NB) {
        if (nt == 1)
            gemv_t(rp, g0, nrows, a, y, ldy, 1, 1, 0);
        else
            gemv_t(rp, g0, nrows, a, y, ldy, 2, 1, 0);
    } else if (rp->sbytes == 1) { /* q4tp rows of more than TP_NB blocks: the prefill kernel (the same chain) */
        for (int64_t k = 0; 16 * k < nrows; k++)
            cmf_rp_gemm_avx2(rp, g0 + k, 1, nrows - 16 * k < 16 ? (int)(nrows - 16 * k) : 16, 0, rp->nb, a, 0, nt,
                             y + 16 * k, ldy, NULL, 1, 1);
    } else {
        if (nt == 1)
            gemv_t(rp, g0, nrows, a, y, ldy, 1, 2, 0);
        else
            gemv_t(rp, g0, nrows, a, y, ldy, 2, 2, 0);
    }
}

/* ---- prefill ---------------------------------------------------------------------------------------------------- */

/* 8 rows (half h of group g) x T tokens from t0, blocks [b0, b0+kb); n rows of them stored. */
TGT_INLINE void mk(const cmf_rp *rp, int64_t g, int h, int n, int64_t b0, int64_t kb, const cmf_qact *a, int64_t t0,
                   float *out, int64_t ldo, const float *bias, int first, int last, const float *scl, const int T,
                   const int SB, const int Q8) {
    const int TP = SB == 1; /* q4tp ladder codes: the rungs from the chunk's plane scl */
    const int64_t nb = a->nb;
    const uint8_t *gp = rp->buf + (size_t)g * rp->gstride, *sc = gp + rp->nb * (Q8 ? 512 : 256);
    __m256 F[4]; /* the chain of kern.h: from 0, or from a previous chunk's partial sums in out */
    for (int j = 0; j < T; j++) {
        float p[8] = {0};
        if (!first) memcpy(p, out + (t0 + j) * ldo, (size_t)n * sizeof(float));
        F[j] = _mm256_loadu_ps(p);
    }
    for (int64_t b = b0; b < b0 + kb; b++) {
        const __m256 S = Q8   ? _mm256_set1_ps(1.0f)
                         : TP ? _mm256_load_ps(scl + (b - b0) * 16 + 8 * h)
                              : scales8(sc, b, h, SB);
        for (int j = 0; j < T; j++) {
            const int64_t o = (t0 + j) * nb + b;
            const __m256i I =
                Q8 ? dot8_q8(gp + b * 512, h, a->q + o * 32) : dot8(gp + b * 256, h, a->q + o * 32, a->s[o]);
            F[j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(I),
                                   Q8 ? _mm256_set1_ps(a->d[o]) : _mm256_mul_ps(S, _mm256_set1_ps(a->d[o])), F[j]);
        }
    }
    const __m256 rs = Q8 ? _mm256_load_ps((const float *)(const void *)(sc + 32 * h)) : _mm256_set1_ps(1.0f);
    for (int j = 0; j < T; j++) {
        float t[8];
        _mm256_storeu_ps(t, last && Q8 ? _mm256_mul_ps(F[j], rs) : F[j]); /* the chain's end */
        float *o = out + (t0 + j) * ldo;
        for (int i = 0; i < n; i++) o[i] = last && bias ? t[i] + bias[i] : t[i];
    }
}

TGT void cmf_rp_gemm_avx2(const cmf_rp *rp, int64_t g0, int ng, int nr, int64_t b0, int64_t kb, const cmf_qact *a,
                          int64_t t0, int64_t t1, float *out, int64_t ld_out, const float *bias, int first,
                          int last) {
    const int TP = rp->sbytes == 1 && !rp->q8;
    if (TP && kb > TP_KB) { /* q4tp: chunks of TP_KB blocks, the chain continued in out */
        for (int64_t c = b0; c < b0 + kb; c += TP_KB) {
            const int64_t m = b0 + kb - c < TP_KB ? b0 + kb - c : TP_KB;
            cmf_rp_gemm_avx2(rp, g0, ng, nr, c, m, a, t0, t1, out, ld_out, bias, first && c == b0,
                             last && c + m == b0 + kb);
        }
        return;
    }
    _Alignas(32) float scl[TP_KB * 16]; /* q4tp: a group's rungs of the chunk's blocks, [b - b0][16] */
    for (int q = 0; q < 2 * ng && 8 * q < nr; q++) {
        const int n = nr - 8 * q < 8 ? nr - 8 * q : 8;
        float *o = out + 8 * q;
        const float *bq = bias ? bias + 8 * q : NULL;
        if (TP && q % 2 == 0) /* a new group: its rungs, looked up once for all token tiles */
            tp_plane(rp->buf + (size_t)(g0 + q / 2) * rp->gstride, rp->nb, b0, kb, scl);
        for (int64_t t = t0; t < t1; t += 4) {
            const int T = t1 - t < 4 ? (int)(t1 - t) : 4;
#define RP_MK(TT)                                                                                                      \
    (rp->q8              ? mk(rp, g0 + q / 2, q % 2, n, b0, kb, a, t, o, ld_out, bq, first, last, scl, TT, 2, 1)       \
     : TP                ? mk(rp, g0 + q / 2, q % 2, n, b0, kb, a, t, o, ld_out, bq, first, last, scl, TT, 1, 0)       \
     : rp->sbytes == 4 ? mk(rp, g0 + q / 2, q % 2, n, b0, kb, a, t, o, ld_out, bq, first, last, scl, TT, 4, 0)         \
                         : mk(rp, g0 + q / 2, q % 2, n, b0, kb, a, t, o, ld_out, bq, first, last, scl, TT, 2, 0))
            switch (T) {
            case 1: RP_MK(1); break;
            case 2: RP_MK(2); break;
            case 3: RP_MK(3); break;
            default: RP_MK(4); break;
            }
#undef RP_MK
        }
    }
}

#endif
