/* rp_avx512.c — AVX-512 VNNI kernels over the repacked q4 layout (kern.h cmf_rp: row groups of 16 rows, per block
 * four 64-byte vectors whose low / high nibbles are the u = v + 8 of columns 4m..4m+3 / 16+4m..16+4m+3 of the 16
 * rows, then the 16 block scales). One vector load feeds 16 rows: (x & 15) and (x >> 4) & 15 are the unsigned
 * operands of two vpdpbusd, each against 4 int8 activations broadcast to every lane; the lanes start at -8 * s (the
 * block's activation sum), so they end at the exact sum v * x of their row, and F += I * (scale * d) in f32 (16
 * rows per zmm: no horizontal reductions). Decode walks its groups front to back (one sequential stream per
 * thread) with a software prefetch KERN_PF_BYTES ahead (each line once, up to rp->pf_end: from the last groups on into
 * the next matrix of the weight set's arena); prefill takes
 * 16 or 32 rows x up to 6 tokens per microkernel, and with a few tokens (KERN_RP_FEW, a serve step's batch) prefetches
 * the next panel during the first token tile. Instructions: Intel SDM (VPDPBUSD, VCVTPH2PS). */
#include "backend/cpu/kern.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#include <string.h>

#include "backend/cpu/rp_x86.h"
#define TGT __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,fma,f16c"))) RP_NOSAN
#define TGT_INLINE static inline __attribute__((always_inline)) TGT

/* The 16 block scales of block b of a group (scale plane sc). */
TGT_INLINE __m512 scales16(const uint8_t *sc, int64_t b, const int S4) {
    if (S4) return _mm512_load_ps((const float *)(const void *)(sc + 64 * b));
    return _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)(const void *)(sc + 32 * b)));
}

/* ---- decode ---------------------------------------------------------------------------------------------------- */

/* One group against T tokens: F[j] = the 16 rows' sums for token j. Prefetches the gstride bytes from pf (stopping
 * at pf_end) as it goes, each 64-byte line once, spread evenly over the blocks (one prefetch per line: more of
 * them stalled on full miss buffers in perf). Q8: the q8 layout (kern.h). */
TGT_INLINE void gemv_group(const uint8_t *gp, int64_t nb, int64_t gstride, const cmf_qact *a, const uint8_t *pf,
                           const uint8_t *pf_end, __m512 F[KERN_GEMV_T], const int T, const int S4, const int Q8) {
    const uint8_t *sc = gp + nb * (Q8 ? 512 : 256);
    const __m512i m15 = _mm512_set1_epi8(15);
    const int64_t lines = gstride / 64;
    for (int j = 0; j < T; j++) F[j] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        for (int64_t l = b * lines / nb, l1 = (b + 1) * lines / nb; l < l1 && pf + 64 * l < pf_end; l++)
            _mm_prefetch((const char *)(pf + 64 * l), _MM_HINT_T1);
        __m512i I0[KERN_GEMV_T], I1[KERN_GEMV_T];
        const int8_t *x[KERN_GEMV_T];
        for (int j = 0; j < T; j++) {
            x[j] = a->q + (j * a->nb + b) * 32;
            I0[j] = _mm512_set1_epi32((Q8 ? -128 : -8) * a->s[j * a->nb + b]);
            I1[j] = _mm512_setzero_si512();
        }
        if (Q8) {
            const uint8_t *u = gp + b * 512;
#pragma GCC unroll 4
            for (int g = 0; g < 8; g += 2) {
                const __m512i z0 = _mm512_load_si512(u + 64 * g), z1 = _mm512_load_si512(u + 64 * g + 64);
                for (int j = 0; j < T; j++) {
                    I0[j] = _mm512_dpbusd_epi32(I0[j], z0, _mm512_set1_epi32(rd32(x[j] + 4 * g)));
                    I1[j] = _mm512_dpbusd_epi32(I1[j], z1, _mm512_set1_epi32(rd32(x[j] + 4 * g + 4)));
                }
            }
            for (int j = 0; j < T; j++)
                F[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(I0[j], I1[j])),
                                       _mm512_set1_ps(a->d[j * a->nb + b]), F[j]);
            continue;
        }
        const uint8_t *u = gp + b * 256;
#pragma GCC unroll 4
        for (int m = 0; m < 4; m++) {
            const __m512i z = _mm512_load_si512(u + 64 * m);
            const __m512i lo = _mm512_and_si512(z, m15), hi = _mm512_and_si512(_mm512_srli_epi16(z, 4), m15);
            for (int j = 0; j < T; j++) {
                I0[j] = _mm512_dpbusd_epi32(I0[j], lo, _mm512_set1_epi32(rd32(x[j] + 4 * m)));
                I1[j] = _mm512_dpbusd_epi32(I1[j], hi, _mm512_set1_epi32(rd32(x[j] + 16 + 4 * m)));
            }
        }
        const __m512 S = scales16(sc, b, S4);
        for (int j = 0; j < T; j++)
            F[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(I0[j], I1[j])),
                                   _mm512_mul_ps(S, _mm512_set1_ps(a->d[j * a->nb + b])), F[j]);
    }
    if (Q8) { /* the row scales */
        const __m512 rs = _mm512_load_ps((const float *)(const void *)sc);
        for (int j = 0; j < T; j++) F[j] = _mm512_mul_ps(F[j], rs);
    }
}

TGT_INLINE void gemv_t(const cmf_rp *rp, int64_t g0, int64_t nrows, const cmf_qact *a, float *y, int64_t ldy,
                       const int T, const int S4, const int Q8) {
    const int64_t ng = (nrows + 15) / 16;
    const uint8_t *end = rp->pf_end; /* the arena's end: past this matrix, the next one of the set */
    for (int64_t k = 0; k < ng; k++) {
        const uint8_t *gp = rp->buf + (size_t)(g0 + k) * rp->gstride;
        __m512 F[KERN_GEMV_T];
        gemv_group(gp, rp->nb, (int64_t)rp->gstride, a, gp + KERN_PF_BYTES, end, F, T, S4, Q8);
        const int64_t left = nrows - 16 * k;
        const __mmask16 msk = left >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << left) - 1u);
        for (int j = 0; j < T; j++) _mm512_mask_storeu_ps(y + j * ldy + 16 * k, msk, F[j]);
    }
}

TGT void cmf_rp_gemv_avx512(const cmf_rp *rp, int64_t g0, int64_t nrows, const cmf_qact *a, int nt, float *y,
                            int64_t ldy) {
    if (rp->q8) {
        if (nt == 1)
            gemv_t(rp, g0, nrows, a, y, ldy, 1, 1, 1);
        else
            gemv_t(rp, g0, nrows, a, y, ldy, 2, 1, 1);
    } else if (rp->sbytes == 4) {
        if (nt == 1)
            gemv_t(rp, g0, nrows, a, y, ldy, 1, 1, 0);
        else
            gemv_t(rp, g0, nrows, a, y, ldy, 2, 1, 0);
    } else {
        if (nt == 1)
            gemv_t(rp, g0, nrows, a, y, ldy, 1, 0, 0);
        else
            gemv_t(rp, g0, nrows, a, y, ldy, 2, 0, 0);
    }
}

/* ---- prefill ---------------------------------------------------------------------------------------------------- */

/* R groups (16 or 32 rows) x T tokens from t0, blocks [b0, b0+kb). Registers: R*T int32 + R*T f32 accumulators
 * (24 of 32 zmm for R = 2, T = 6), the unpacked nibbles of one quarter (2R). */
TGT_INLINE void mk(const cmf_rp *rp, int64_t g0, int nr, int64_t b0, int64_t kb, const cmf_qact *a, int64_t t0,
                   float *out, int64_t ldo, const float *bias, int first, int last, int64_t pfd, const int R,
                   const int T, const int S4, const int Q8) {
    const int64_t nb = a->nb;
    const uint8_t *gp[2], *sc[2];
    for (int h = 0; h < R; h++) {
        gp[h] = rp->buf + (size_t)(g0 + h) * rp->gstride;
        sc[h] = gp[h] + rp->nb * (Q8 ? 512 : 256);
    }
    const __m512i m15 = _mm512_set1_epi8(15);
    __mmask16 k[2];
    for (int h = 0; h < R; h++) {
        const int left = nr - 16 * h;
        k[h] = left >= 16 ? (__mmask16)0xffff : left > 0 ? (__mmask16)((1u << left) - 1u) : (__mmask16)0;
    }
    __m512 F[2][6]; /* the chain of kern.h: from 0, or from a previous chunk's partial sums in out */
    for (int h = 0; h < R; h++)
        for (int j = 0; j < T; j++)
            F[h][j] = first ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(k[h], out + (t0 + j) * ldo + 16 * h);
    const int64_t bw = Q8 ? 512 : 256; /* nibble (q8: int8) bytes per block and group */
    for (int64_t b = b0; b < b0 + kb; b++) {
        if (pfd) /* the same blocks pfd bytes on: 4 (q8: 8) lines, half a line of scales (q8: none) */
            for (int h = 0; h < R; h++) {
                const uint8_t *p = gp[h] + pfd + b * bw;
                if (gp[h] + pfd + rp->gstride > rp->pf_end) break; /* past the arena */
                for (int l = 0; l < bw; l += 64) _mm_prefetch((const char *)(p + l), _MM_HINT_T1);
                if (!Q8 && (b == b0 || !((b * 16 * (S4 ? 4 : 2)) & 63)))
                    _mm_prefetch((const char *)(sc[h] + pfd + b * 16 * (S4 ? 4 : 2)), _MM_HINT_T1);
            }
        __m512i I[2][6];
        for (int j = 0; j < T; j++) {
            const __m512i c = _mm512_set1_epi32((Q8 ? -128 : -8) * a->s[(t0 + j) * nb + b]);
            for (int h = 0; h < R; h++) I[h][j] = c;
        }
        if (Q8) {
#pragma GCC unroll 8
            for (int g = 0; g < 8; g++) {
                __m512i W[2];
                for (int h = 0; h < R; h++) W[h] = _mm512_load_si512(gp[h] + b * 512 + 64 * g);
                for (int j = 0; j < T; j++) {
                    const __m512i X = _mm512_set1_epi32(rd32(a->q + ((t0 + j) * nb + b) * 32 + 4 * g));
                    for (int h = 0; h < R; h++) I[h][j] = _mm512_dpbusd_epi32(I[h][j], W[h], X);
                }
            }
            for (int j = 0; j < T; j++) {
                const __m512 D = _mm512_set1_ps(a->d[(t0 + j) * nb + b]);
                for (int h = 0; h < R; h++) F[h][j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(I[h][j]), D, F[h][j]);
            }
            continue;
        }
#pragma GCC unroll 4
        for (int m = 0; m < 4; m++) {
            __m512i lo[2], hi[2];
            for (int h = 0; h < R; h++) {
                const __m512i z = _mm512_load_si512(gp[h] + b * 256 + 64 * m);
                lo[h] = _mm512_and_si512(z, m15);
                hi[h] = _mm512_and_si512(_mm512_srli_epi16(z, 4), m15);
            }
            for (int j = 0; j < T; j++) {
                const int8_t *x = a->q + ((t0 + j) * nb + b) * 32;
                const __m512i X0 = _mm512_set1_epi32(rd32(x + 4 * m)), X1 = _mm512_set1_epi32(rd32(x + 16 + 4 * m));
                for (int h = 0; h < R; h++)
                    I[h][j] = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(I[h][j], lo[h], X0), hi[h], X1);
            }
        }
        __m512 S[2];
        for (int h = 0; h < R; h++) S[h] = scales16(sc[h], b, S4);
        for (int j = 0; j < T; j++) {
            const __m512 D = _mm512_set1_ps(a->d[(t0 + j) * nb + b]);
            for (int h = 0; h < R; h++)
                F[h][j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(I[h][j]), _mm512_mul_ps(S[h], D), F[h][j]);
        }
    }
    for (int h = 0; h < R; h++) {
        if (!k[h]) break;
        const __m512 bv = last && bias ? _mm512_maskz_loadu_ps(k[h], bias + 16 * h) : _mm512_setzero_ps();
        const __m512 rs = Q8 ? _mm512_load_ps((const float *)(const void *)sc[h]) : _mm512_set1_ps(1.0f);
        for (int j = 0; j < T; j++) {
            __m512 y = F[h][j];
            if (last && Q8) y = _mm512_mul_ps(y, rs); /* the chain's end, then the bias as a separate add */
            if (last && bias) y = _mm512_add_ps(y, bv);
            _mm512_mask_storeu_ps(out + (t0 + j) * ldo + 16 * h, k[h], y);
        }
    }
}

#define RP_TOKENS(R, S4, Q8)                                                                                           \
    switch (t1 - t) {                                                                                                  \
    case 1: mk(rp, g0, nr, b0, kb, a, t, out, ld_out, bias, first, last, pt, R, 1, S4, Q8); break;                     \
    case 2: mk(rp, g0, nr, b0, kb, a, t, out, ld_out, bias, first, last, pt, R, 2, S4, Q8); break;                     \
    case 3: mk(rp, g0, nr, b0, kb, a, t, out, ld_out, bias, first, last, pt, R, 3, S4, Q8); break;                     \
    case 4: mk(rp, g0, nr, b0, kb, a, t, out, ld_out, bias, first, last, pt, R, 4, S4, Q8); break;                     \
    case 5: mk(rp, g0, nr, b0, kb, a, t, out, ld_out, bias, first, last, pt, R, 5, S4, Q8); break;                     \
    default: mk(rp, g0, nr, b0, kb, a, t, out, ld_out, bias, first, last, pt, R, 6, S4, Q8); break;                    \
    }

TGT void cmf_rp_gemm_avx512(const cmf_rp *rp, int64_t g0, int ng, int nr, int64_t b0, int64_t kb, const cmf_qact *a,
                            int64_t t0, int64_t t1, float *out, int64_t ld_out, const float *bias, int first,
                            int last) {
    const int two = ng > 1 && nr > 16;
    /* a few tokens: the weights come from memory once per product; the first token tile prefetches the next panel
     * (2 groups on: the next one of this thread's run, matmul.c rp_runs_make). bench_batch random-q4_0 n = 16, 2
     * threads, same run (load 0.9): none 13.0-13.6 ms per forward, 2 groups on 11.5-12.0; 4 groups 12.0 */
    const int64_t pfd = t1 - t0 <= KERN_RP_FEW ? 2 * (int64_t)rp->gstride : 0;
    for (int64_t t = t0; t < t1; t += 6) {
        const int64_t pt = t == t0 ? pfd : 0;
        if (rp->q8 && two)
            RP_TOKENS(2, 1, 1)
        else if (rp->q8)
            RP_TOKENS(1, 1, 1)
        else if (two && rp->sbytes == 4)
            RP_TOKENS(2, 1, 0)
        else if (two)
            RP_TOKENS(2, 0, 0)
        else if (rp->sbytes == 4)
            RP_TOKENS(1, 1, 0)
        else
            RP_TOKENS(1, 0, 0)
    }
}

#endif
