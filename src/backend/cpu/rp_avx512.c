/* rp_avx512.c — AVX-512 VNNI kernels over the repacked q4 layout (kern.h cmf_rp: row groups of 16 rows, per block
 * four 64-byte vectors whose low / high nibbles are the u = v + 8 of columns 4m..4m+3 / 16+4m..16+4m+3 of the 16
 * rows, then the 16 block scales: f16, or for q4tp one 5-bit ladder code per row and block (the copy this path
 * makes), the rungs rebuilt per group with 31 lane-wise f32 multiplies (lane = row, CMF_FORMAT.md §2.6) and looked up
 * once per group (decode) or chunk (GEMM) with a vpermt2ps per row and transposes; or q4tp's f32 rungs (a copy made
 * while the AVX2 or scalar path was active), read as is). One vector load feeds 16 rows: (x & 15) and (x >> 4) & 15
 * are the unsigned
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

enum { TP_KB = 64 };  /* q4tp GEMM: blocks of a chunk whose rungs are looked up per call (8 KiB of stack, 2 groups) */
enum { TP_NB = 512 }; /* q4tp decode: blocks per row of the rung plane on the stack (32 KiB); longer rows: the GEMM */

/* The 16 block scales of block b of a group: scale plane sc of f16 (q4_block / q4_tiled) or, F32, f32 (q4tp's f32
 * rungs). */
TGT_INLINE __m512 scales16(const uint8_t *sc, int64_t b, const int F32) {
    if (F32) return _mm512_load_ps((const float *)(const void *)(sc + 64 * b));
    return _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)(const void *)(sc + 32 * b)));
}

/* In-register transpose of 16 x 16 floats: r[j] lane i <- r[i] lane j (unpack ps, unpack pd, then two 128-bit lane
 * shuffles). */
TGT_INLINE void tr16(__m512 r[16]) {
    __m512 t[16];
    for (int k = 0; k < 8; k++) { /* lane L of t[2k]: r2k[4L], r2k+1[4L], r2k[4L+1], r2k+1[4L+1]; t[2k+1]: +2, +3 */
        t[2 * k] = _mm512_unpacklo_ps(r[2 * k], r[2 * k + 1]);
        t[2 * k + 1] = _mm512_unpackhi_ps(r[2 * k], r[2 * k + 1]);
    }
    __m512 u[4][4]; /* u[q][m] lane L: rows 4q..4q+3 at column 4L + m */
    for (int q = 0; q < 4; q++) {
        const __m512d a0 = _mm512_castps_pd(t[4 * q]), a1 = _mm512_castps_pd(t[4 * q + 2]);
        const __m512d b0 = _mm512_castps_pd(t[4 * q + 1]), b1 = _mm512_castps_pd(t[4 * q + 3]);
        u[q][0] = _mm512_castpd_ps(_mm512_unpacklo_pd(a0, a1));
        u[q][1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a0, a1));
        u[q][2] = _mm512_castpd_ps(_mm512_unpacklo_pd(b0, b1));
        u[q][3] = _mm512_castpd_ps(_mm512_unpackhi_pd(b0, b1));
    }
    for (int m = 0; m < 4; m++) { /* column 4L + m = lane L of u[0..3][m], one 128-bit lane each */
        const __m512 s0 = _mm512_shuffle_f32x4(u[0][m], u[1][m], 0x44), s1 = _mm512_shuffle_f32x4(u[0][m], u[1][m], 0xEE);
        const __m512 s2 = _mm512_shuffle_f32x4(u[2][m], u[3][m], 0x44), s3 = _mm512_shuffle_f32x4(u[2][m], u[3][m], 0xEE);
        r[m] = _mm512_shuffle_f32x4(s0, s2, 0x88);
        r[4 + m] = _mm512_shuffle_f32x4(s0, s2, 0xDD);
        r[8 + m] = _mm512_shuffle_f32x4(s1, s3, 0x88);
        r[12 + m] = _mm512_shuffle_f32x4(s1, s3, 0xDD);
    }
}

/* q4tp: the 32-rung ladders of a group's 16 rows (t0, r at sc; kern.h), built lane-wise (lane i = row i: t[c] =
 * t[c-1] * r in f32, §2.6 step 3, the same multiplies in the same order as cmf_rp_tp_ladders: the same bits) and
 * stored row by row: RL[32i + c] = rung c of row i. */
TGT_INLINE void ladders_rows(const uint8_t *sc, float *RL) {
    const __m512 r = _mm512_load_ps((const float *)(const void *)(sc + 64));
    __m512 v[16];
    v[0] = _mm512_load_ps((const float *)(const void *)sc);
    for (int h = 0; h < 2; h++) {
        if (h) v[0] = _mm512_mul_ps(v[15], r);
        for (int c = 1; c < 16; c++) v[c] = _mm512_mul_ps(v[c - 1], r);
        const __m512 last = v[15];
        tr16(v);
        for (int i = 0; i < 16; i++) _mm512_store_ps(RL + 32 * i + 16 * h, v[i]);
        v[15] = last;
    }
}

/* q4tp: the rungs of blocks [b0, b0 + kb) of a group (codes cd: row i's at cd + i * nb; row ladders RL) as
 * S[16(b - b0) + i] (row i, block b; kb rounded up to 16 entries are written). Per row one vpermt2ps takes 16 blocks'
 * rungs from the row's 2-register ladder, then a transpose: a vgatherdps per block, or 16 scalar loads, ran the decode
 * kernel at less than half speed on Zen 4. */
TGT_INLINE void tp_plane(const uint8_t *cd, int64_t nb, const float *RL, int64_t b0, int64_t kb, float *S) {
    for (int64_t c = 0; c < kb; c += 16) {
        const int64_t n = kb - c < 16 ? kb - c : 16;
        const __mmask16 m = (__mmask16)((1u << n) - 1u);
        __m512 v[16];
        for (int i = 0; i < 16; i++) {
            const __m512i idx = _mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(m, cd + i * nb + b0 + c));
            v[i] = _mm512_permutex2var_ps(_mm512_load_ps(RL + 32 * i), idx, _mm512_load_ps(RL + 32 * i + 16));
        }
        tr16(v);
        for (int b = 0; b < 16; b++) _mm512_store_ps(S + 16 * (c + b), v[b]);
    }
}

/* ---- decode ---------------------------------------------------------------------------------------------------- */

void cmf_rp_gemm_avx512(const cmf_rp *rp, int64_t g0, int ng, int nr, int64_t b0, int64_t kb, const cmf_qact *a,
                        int64_t t0, int64_t t1, float *out, int64_t ld_out, const float *bias, int first, int last);

/* One group against T tokens: F[j] = the 16 rows' sums for token j. Prefetches the gstride bytes from pf (stopping
 * at pf_end) as it goes, each 64-byte line once, spread evenly over the blocks (one prefetch per line: more of
 * them stalled on full miss buffers in perf). Q8: the q8 layout (kern.h). TP 1 (q4tp codes): the block scales are
 * read from S, the group's rung plane (tp_plane); TP 4: q4tp's f32 rungs from the copy; 0: f16 scales. */
TGT_INLINE void gemv_group(const uint8_t *gp, int64_t nb, int64_t gstride, const cmf_qact *a, const uint8_t *pf,
                           const uint8_t *pf_end, __m512 F[KERN_GEMV_T], const float *S, const int T, const int TP,
                           const int Q8) {
    const uint8_t *sc = gp + nb * (Q8 ? 512 : 256);
    const __m512i m15 = _mm512_set1_epi8(15);
    const int64_t lines = gstride / 64;
    /* lines [l, l1) at block b: l1 = floor((b + 1) * lines / nb), kept as l1 + frac / nb (no division per block) */
    const int64_t step = lines / nb, sfrac = lines % nb;
    int64_t l = 0, l1 = 0, frac = 0;
    for (int j = 0; j < T; j++) F[j] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        l1 += step, frac += sfrac;
        if (frac >= nb) l1++, frac -= nb;
        for (; l < l1; l++)
            if (pf + 64 * l < pf_end) _mm_prefetch((const char *)(pf + 64 * l), _MM_HINT_T1);
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
        const __m512 Sb = TP == 1 ? _mm512_load_ps(S + 16 * b) : scales16(sc, b, TP == 4);
        for (int j = 0; j < T; j++)
            F[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(I0[j], I1[j])),
                                   _mm512_mul_ps(Sb, _mm512_set1_ps(a->d[j * a->nb + b])), F[j]);
    }
    if (Q8) { /* the row scales */
        const __m512 rs = _mm512_load_ps((const float *)(const void *)sc);
        for (int j = 0; j < T; j++) F[j] = _mm512_mul_ps(F[j], rs);
    }
}

TGT_INLINE void gemv_t(const cmf_rp *rp, int64_t g0, int64_t nrows, const cmf_qact *a, float *y, int64_t ldy,
                       const int T, const int TP, const int Q8) {
    const int64_t ng = (nrows + 15) / 16, nb = rp->nb;
    const uint8_t *end = rp->pf_end; /* the arena's end: past this matrix, the next one of the set */
    _Alignas(64) float RL[512], S[TP_NB * 16]; /* q4tp: the group's row ladders and rung plane */
    for (int64_t k = 0; k < ng; k++) {
        const uint8_t *gp = rp->buf + (size_t)(g0 + k) * rp->gstride;
        if (TP == 1) {
            ladders_rows(gp + nb * 256, RL);
            tp_plane(cmf_rp_tp_codes(gp, nb), nb, RL, 0, nb, S);
        }
        __m512 F[KERN_GEMV_T];
        gemv_group(gp, nb, (int64_t)rp->gstride, a, gp + KERN_PF_BYTES, end, F, S, T, TP, Q8);
        const int64_t left = nrows - 16 * k;
        const __mmask16 msk = left >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << left) - 1u);
        for (int j = 0; j < T; j++) _mm512_mask_storeu_ps(y + j * ldy + 16 * k, msk, F[j]);
    }
}

TGT void cmf_rp_gemv_avx512(const cmf_rp *rp, int64_t g0, int64_t nrows, const cmf_qact *a, int nt, float *y,
                            int64_t ldy) {
    if (rp->q8) {
        if (nt == 1)
            gemv_t(rp, g0, nrows, a, y, ldy, 1, 0, 1);
        else
            gemv_t(rp, g0, nrows, a, y, ldy, 2, 0, 1);
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
            cmf_rp_gemm_avx512(rp, g0 + k, 1, nrows - 16 * k < 16 ? (int)(nrows - 16 * k) : 16, 0, rp->nb, a, 0, nt,
                               y + 16 * k, ldy, NULL, 1, 1);
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
                   float *out, int64_t ldo, const float *bias, int first, int last, int64_t pfd, const float *scl,
                   const int R, const int T, const int TP, const int Q8, const int PF) {
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
    const float *sp = scl;               /* q4tp: block b's rungs of group h at sp + h * TP_KB * 16 */
    for (int64_t b = b0; b < b0 + kb; b++, sp += 16) {
        if (PF && pfd) /* the same blocks pfd bytes on: 4 (q8: 8) lines, half a line of scales (q8: none) */
            for (int h = 0; h < R; h++) {
                const uint8_t *p = gp[h] + pfd + b * bw;
                if (gp[h] + pfd + rp->gstride > rp->pf_end) break; /* past the arena */
                for (int l = 0; l < bw; l += 64) _mm_prefetch((const char *)(p + l), _MM_HINT_T1);
                if (!Q8 && (b == b0 || !((b * 16 * (TP == 1 ? 1 : TP == 4 ? 4 : 2)) & 63)))
                    _mm_prefetch((const char *)(sc[h] + pfd + (TP == 1 ? 128 + 16 * b : TP == 4 ? 64 * b : 32 * b)),
                                 _MM_HINT_T1);
                if (TP == 1 && b == b0) { /* the ladder parameters */
                    _mm_prefetch((const char *)(sc[h] + pfd), _MM_HINT_T1);
                    _mm_prefetch((const char *)(sc[h] + pfd + 64), _MM_HINT_T1);
                }
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
        for (int h = 0; h < R; h++)
            S[h] = TP == 1 ? _mm512_load_ps(sp + h * TP_KB * 16) : scales16(sc[h], b, TP == 4);
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

/* PF: the instance that prefetches the next panel (the first token tile of a call with a few tokens); the others carry
 * no prefetch code (its branches and pointers cost the hot loop registers: zmm and pointer spills at 512 tokens) */
#define RP_MK(R, T, TP, Q8)                                                                                            \
    (pf ? mk(rp, g0, nr, b0, kb, a, t, out, ld_out, bias, first, last, pfd, scl, R, T, TP, Q8, 1)                      \
        : mk(rp, g0, nr, b0, kb, a, t, out, ld_out, bias, first, last, 0, scl, R, T, TP, Q8, 0))
#define RP_TOKENS(R, TP, Q8)                                                                                           \
    switch (t1 - t) {                                                                                                  \
    case 1: RP_MK(R, 1, TP, Q8); break;                                                                                \
    case 2: RP_MK(R, 2, TP, Q8); break;                                                                                \
    case 3: RP_MK(R, 3, TP, Q8); break;                                                                                \
    case 4: RP_MK(R, 4, TP, Q8); break;                                                                                \
    case 5: RP_MK(R, 5, TP, Q8); break;                                                                                \
    default: RP_MK(R, 6, TP, Q8); break;                                                                               \
    }

TGT void cmf_rp_gemm_avx512(const cmf_rp *rp, int64_t g0, int ng, int nr, int64_t b0, int64_t kb, const cmf_qact *a,
                            int64_t t0, int64_t t1, float *out, int64_t ld_out, const float *bias, int first,
                            int last) {
    const int two = ng > 1 && nr > 16;
    if (rp->sbytes == 1 && !rp->q8 && kb > TP_KB) { /* q4tp: chunks of TP_KB blocks, the chain continued in out */
        for (int64_t c = b0; c < b0 + kb; c += TP_KB) {
            const int64_t n = b0 + kb - c < TP_KB ? b0 + kb - c : TP_KB;
            cmf_rp_gemm_avx512(rp, g0, ng, nr, c, n, a, t0, t1, out, ld_out, bias, first && c == b0,
                               last && c + n == b0 + kb);
        }
        return;
    }
    /* q4tp: the rungs of the chunk's blocks, looked up once for all token tiles (scl[h][b - b0][16]) */
    _Alignas(64) float scl[2 * TP_KB * 16], RL[512];
    if (rp->sbytes == 1 && !rp->q8)
        for (int h = 0; h < 1 + two; h++) {
            const uint8_t *gp = rp->buf + (size_t)(g0 + h) * rp->gstride;
            ladders_rows(gp + rp->nb * 256, RL);
            tp_plane(cmf_rp_tp_codes(gp, rp->nb), rp->nb, RL, b0, kb, scl + h * TP_KB * 16);
        }
    /* a few tokens: the weights come from memory once per product; the first token tile prefetches the next panel
     * (2 groups on: the next one of this thread's run, matmul.c rp_runs_make). bench_batch random-q4_0 n = 16, 2
     * threads, same run (load 0.9): none 13.0-13.6 ms per forward, 2 groups on 11.5-12.0; 4 groups 12.0 */
    const int64_t pfd = t1 - t0 <= KERN_RP_FEW ? 2 * (int64_t)rp->gstride : 0;
    for (int64_t t = t0; t < t1; t += 6) {
        const int pf = t == t0 && pfd; /* the first tile prefetches */
        if (rp->q8 && two)
            RP_TOKENS(2, 0, 1)
        else if (rp->q8)
            RP_TOKENS(1, 0, 1)
        else if (two && rp->sbytes == 1)
            RP_TOKENS(2, 1, 0)
        else if (two && rp->sbytes == 4)
            RP_TOKENS(2, 4, 0)
        else if (two)
            RP_TOKENS(2, 0, 0)
        else if (rp->sbytes == 1)
            RP_TOKENS(1, 1, 0)
        else if (rp->sbytes == 4)
            RP_TOKENS(1, 4, 0)
        else
            RP_TOKENS(1, 0, 0)
    }
}

#endif
