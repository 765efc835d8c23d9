/* gemm_avx2.c — the AVX2 prefill GEMM of the int8 family (kern.h: kern_gemm_pack_i8, kern_gemm_i8), for x86-64
 * CPUs without AVX-512 VNNI. Per-function target attributes; cpu.c selects the path when CPUID reports AVX2, FMA
 * and F16C.
 *
 * Packed panel (KERN_GEMM_R = 32 rows x up to KERN_GEMM_KB blocks of 32 columns), written by pack():
 *   head (64 bytes) | rs[32] f32 row scales (q8 dtypes) | ws[kb][32] f32 block scales | e[kb][8][4][32] bytes
 * e holds the weights in the VNNI order: for block b, column group g (columns 4g..4g+3) and quarter h (rows
 * 8h..8h+7), 32 bytes = 8 rows x the 4 bytes of their columns (one ymm feeds 8 rows). Two encodings:
 *   q8_row / q8_2f: e = v (signed). vpmaddubsw wants one unsigned operand, so a column pair is taken as
 *     maddubs(|v|, sign(x, v)) (|v| <= 128, |x| <= 127: the pair sum fits int16), widened by vpmaddwd with ones.
 *   q4_block / q4_tiled / q4tp / q2tp: e = v + 8 (0..15), so maddubs(e, x) pair sums are at most 2*15*127 and the
 *     8 column groups of a block add up in int16 (<= 30480) before one vpmaddwd per block; the lanes then start
 *     at -8 * s_tb (s: the block's sum of the token's int8 values) so that they hold sum v*x exactly.
 * Then F += (I * ws_b) * d_tb per block (q8: F += I * d_tb and the row scale at the end). Microkernel: 8 rows x 4
 * tokens (16 ymm registers). Rows past nr hold v = 0 and scale 0. Method as gemm_avx512.c (Intel SDM: VPMADDUBSW,
 * VPMADDWD, VPSIGNB). */
#include "backend/cpu/kern.h"
#include "backend/cpu/gemm_pack.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#include <string.h>

#define TGT __attribute__((target("avx2,fma,f16c")))
#define TGT_INLINE static inline __attribute__((always_inline)) TGT

enum { PR = PK_PR, DB = PK_DB, TT = 4 /* tokens per microkernel */ };

TGT void cmf_gemm_pack_i8_avx2(const cmf_weight *w, int64_t r, int nr, int64_t b0, int64_t kb, void *buf) {
    pk_parts p = pk_parts_of(buf, kb);
    const int rs = w->dtype == CMF_DT_Q8_ROW || w->dtype == CMF_DT_Q8_2F;
    p.h->nr = nr;
    p.h->b0 = b0;
    p.h->kb = kb;
    p.h->rowscaled = rs;
    const kern_decode_i8 dec = cmf_kern_avx2->decode_i8[w->dtype];
    const __m256i idx = _mm256_mullo_epi32(_mm256_set_epi32(7, 6, 5, 4, 3, 2, 1, 0), _mm256_set1_epi32(DB * 32));
    const __m256i off = _mm256_set1_epi8(rs ? 0 : 8);
    const int quarters = (nr + 7) / 8;
    for (int64_t c = 0; c < kb; c += DB) {
        const int64_t m = kb - c < DB ? kb - c : DB;
        for (int i = 0; i < nr; i++) dec(w, r + i, b0 + c, m, (int8_t *)p.tmp + i * DB * 32, p.tws + i * DB);
        for (int i = nr; i < 8 * quarters; i++) {
            memset(p.tmp + i * DB * 32, 0, DB * 32);
            memset(p.tws + i * DB, 0, DB * sizeof(float));
        }
        for (int64_t b = 0; b < m; b++)
            for (int h = 0; h < quarters; h++) {
                const uint8_t *src = p.tmp + h * 8 * DB * 32 + 32 * b;
                uint8_t *dst = p.w8 + (c + b) * 1024 + h * 32;
                for (int g = 0; g < 8; g++) {
                    const __m256i v = _mm256_i32gather_epi32((const int *)(const void *)(src + 4 * g), idx, 1);
                    _mm256_store_si256((__m256i *)(void *)(dst + g * 128), _mm256_add_epi8(v, off));
                }
                for (int i = 0; i < 8; i++) p.ws[(c + b) * PR + 8 * h + i] = p.tws[(8 * h + i) * DB + b];
            }
    }
    for (int i = 0; i < PR; i++) p.rs[i] = i < nr ? p.tws[i * DB] : 0.0f; /* q8: every block holds the row scale */
}

static inline int32_t rd32(const int8_t *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return v;
}

/* Rows [8h, 8h+8) x tokens [t0, t0+T) against the panel; RS: q8 encoding and row scales. */
TGT_INLINE void mk(const pk_parts *p, int h, const cmf_qact *a, int64_t t0, float *out, int64_t ldo,
                   const float *bias, int first, const int T, const int RS) {
    const int64_t kb = p->h->kb, b0 = p->h->b0, nb = a->nb;
    const __m256i ones = _mm256_set1_epi16(1);
    __m256 F[TT];
    const int8_t *xq[TT];
    const float *xd[TT];
    const int32_t *xs[TT];
    for (int j = 0; j < T; j++) {
        xq[j] = a->q + ((t0 + j) * nb + b0) * 32;
        xd[j] = a->d + (t0 + j) * nb + b0;
        xs[j] = a->s + (t0 + j) * nb + b0;
        F[j] = _mm256_setzero_ps();
    }
    for (int64_t b = 0; b < kb; b++) {
        const uint8_t *e = p->w8 + b * 1024 + h * 32;
        __m256i I[TT];
        for (int j = 0; j < T; j++) I[j] = _mm256_setzero_si256();
#pragma GCC unroll 8
        for (int g = 0; g < 8; g++) {
            const __m256i W = _mm256_load_si256((const __m256i *)(const void *)(e + g * 128));
            if (RS) {
                const __m256i A = _mm256_abs_epi8(W);
                for (int j = 0; j < T; j++) {
                    const __m256i X = _mm256_sign_epi8(_mm256_set1_epi32(rd32(xq[j] + 32 * b + 4 * g)), W);
                    I[j] = _mm256_add_epi32(I[j], _mm256_madd_epi16(_mm256_maddubs_epi16(A, X), ones));
                }
            } else {
                for (int j = 0; j < T; j++) {
                    const __m256i X = _mm256_set1_epi32(rd32(xq[j] + 32 * b + 4 * g));
                    I[j] = _mm256_add_epi16(I[j], _mm256_maddubs_epi16(W, X));
                }
            }
        }
        if (RS) {
            for (int j = 0; j < T; j++)
                F[j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(I[j]), _mm256_set1_ps(xd[j][b]), F[j]);
        } else {
            const __m256 S = _mm256_load_ps(p->ws + b * PR + 8 * h);
            for (int j = 0; j < T; j++) {
                const __m256i i32 = _mm256_add_epi32(_mm256_madd_epi16(I[j], ones), _mm256_set1_epi32(-8 * xs[j][b]));
                F[j] = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(i32), S), _mm256_set1_ps(xd[j][b]), F[j]);
            }
        }
    }
    const int left = p->h->nr - 8 * h;
    const __m256i k = _mm256_cmpgt_epi32(_mm256_set1_epi32(left), _mm256_set_epi32(7, 6, 5, 4, 3, 2, 1, 0));
    const __m256 rs = RS ? _mm256_load_ps(p->rs + 8 * h) : _mm256_set1_ps(1.0f);
    const __m256 bv = first && bias ? _mm256_maskload_ps(bias + 8 * h, k) : _mm256_setzero_ps();
    for (int j = 0; j < T; j++) {
        float *o = out + (t0 + j) * ldo + 8 * h;
        const __m256 base = first ? bv : _mm256_maskload_ps(o, k);
        _mm256_maskstore_ps(o, k, RS ? _mm256_fmadd_ps(F[j], rs, base) : _mm256_add_ps(F[j], base));
    }
}

#define TOKENS(RS)                                                                                              \
    switch (t1 - t) {                                                                                           \
    case 1: mk(&p, h, a, t, out, ld_out, bias, first, 1, RS); break;                                           \
    case 2: mk(&p, h, a, t, out, ld_out, bias, first, 2, RS); break;                                           \
    case 3: mk(&p, h, a, t, out, ld_out, bias, first, 3, RS); break;                                           \
    default: mk(&p, h, a, t, out, ld_out, bias, first, 4, RS); break;                                          \
    }

TGT void cmf_gemm_i8_avx2(const void *pack_buf, const cmf_qact *a, int64_t t0, int64_t t1, float *out,
                          int64_t ld_out, const float *bias, int first) {
    const pk_head *hd = pack_buf;
    const pk_parts p = pk_parts_of((void *)(uintptr_t)pack_buf, hd->kb);
    for (int h = 0; h < (hd->nr + 7) / 8; h++)
        for (int64_t t = t0; t < t1; t += TT) {
            if (hd->rowscaled) TOKENS(1)
            else TOKENS(0)
        }
}

#endif
