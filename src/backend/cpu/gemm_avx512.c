/* gemm_avx512.c — the AVX-512 VNNI prefill GEMM of the int8 family (kern.h: kern_gemm_pack_i8, kern_gemm_i8).
 * Every function carries its own target attribute, like kern_avx512.c; cpu.c selects this path only when CPUID
 * reports AVX-512 F/BW/VL/DQ/VNNI.
 *
 * Packed panel (one per KERN_GEMM_R = 32 rows x up to KERN_GEMM_KB blocks of 32 columns), written by pack():
 *   head (64 bytes) | rs[32] f32 row scales (q8 dtypes) | ws[kb][32] f32 block scales | u[kb][8][2][64] bytes
 * u holds the weights as unsigned bytes u = v + 128 in the VNNI order: for block b and column group g (columns
 * 4g..4g+3 of the block) and half h (rows 16h..16h+15), 64 bytes = 16 rows x the 4 bytes of their columns, so
 * one zmm load feeds 16 rows and one vpdpbusd adds 4 columns of 16 rows for one token (its 4 int8 activations
 * broadcast to every lane). Rows past nr hold u = 128 (v = 0) and scale 0.
 *
 * Microkernel (mk): R = 1 or 2 halves (16 or 32 rows) x T tokens. Per block b and token t the int32 lanes start
 * at -128 * s_tb (s: the block's sum of the token's int8 values, so the lanes end at sum v*x exactly, not
 * sum (v+128)*x), take 8 vpdpbusd, are converted to f32 and added as F += (I * ws_b) * d_tb (q8_row / q8_2f:
 * F += I * d_tb, the row scale applied once at the end). Registers: R*T int32 + R*T f32 accumulators
 * (T = 6 for R = 2: 24 of the 32 zmm). The weights are decoded once per panel and chunk (by kern_avx512.c's
 * decoders, into a small buffer, then transposed by gathers) and reused by every token. Method: the
 * register-blocked int8 GEMM of oneDNN / llamafile's tinyBLAS, written from the instruction set definitions
 * (Intel SDM: VPDPBUSD). */
#include "backend/cpu/kern.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#include <string.h>

#define TGT __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,fma,f16c")))
#define TGT_INLINE static inline __attribute__((always_inline)) TGT

enum { PR = KERN_GEMM_R, DB = 8 /* blocks decoded per step */ };

typedef struct {
    int32_t nr, rowscaled;
    int64_t b0, kb;
    uint8_t pad[40];
} pk_head;

/* The parts of a packed panel of kb blocks. */
typedef struct {
    pk_head *h;
    float *rs, *ws;
    uint8_t *u, *tmp;
    float *tws;
} pk_parts;

static pk_parts parts(void *buf, int64_t kb) {
    pk_parts p;
    uint8_t *b = buf;
    p.h = (pk_head *)(void *)b;
    p.rs = (float *)(void *)(b + 64);
    p.ws = p.rs + PR;
    p.u = (uint8_t *)(p.ws + kb * PR);
    p.tmp = p.u + kb * 8 * 2 * 64; /* decode buffer: PR rows x DB blocks, then their scales */
    p.tws = (float *)(void *)(p.tmp + PR * DB * 32);
    return p;
}

TGT void cmf_gemm_pack_i8_avx512(const cmf_weight *w, int64_t r, int nr, int64_t b0, int64_t kb, void *buf) {
    pk_parts p = parts(buf, kb);
    p.h->nr = nr;
    p.h->b0 = b0;
    p.h->kb = kb;
    p.h->rowscaled = w->dtype == CMF_DT_Q8_ROW || w->dtype == CMF_DT_Q8_2F;
    const kern_decode_i8 dec = cmf_kern_avx512->decode_i8[w->dtype];
    const __m512i lane = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
    const __m512i idx = _mm512_mullo_epi32(lane, _mm512_set1_epi32(DB * 32)); /* byte offset of row lane in tmp */
    const int halves = nr > 16 ? 2 : 1;
    for (int64_t c = 0; c < kb; c += DB) {
        const int64_t m = kb - c < DB ? kb - c : DB;
        for (int i = 0; i < nr; i++) dec(w, r + i, b0 + c, m, (int8_t *)p.tmp + i * DB * 32, p.tws + i * DB);
        for (int i = nr; i < 16 * halves; i++) {
            memset(p.tmp + i * DB * 32, 0x80, DB * 32);
            memset(p.tws + i * DB, 0, DB * sizeof(float));
        }
        for (int64_t b = 0; b < m; b++) {
            for (int h = 0; h < halves; h++) {
                const uint8_t *src = p.tmp + h * 16 * DB * 32 + 32 * b;
                uint8_t *dst = p.u + ((c + b) * 16 + h) * 64;
                for (int g = 0; g < 8; g++)
                    _mm512_store_si512(dst + g * 128, _mm512_i32gather_epi32(idx, src + 4 * g, 1));
                for (int i = 0; i < 16; i++) p.ws[(c + b) * PR + 16 * h + i] = p.tws[(16 * h + i) * DB + b];
            }
        }
    }
    for (int i = 0; i < PR; i++) p.rs[i] = i < nr ? p.tws[i * DB] : 0.0f; /* q8: every block holds the row scale */
}

static inline int32_t rd32(const int8_t *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return v;
}

/* Tokens [t0, t0+T) against the panel: R halves, T tokens, RS = row-scaled (q8) or per-block scales. */
TGT_INLINE void mk(const pk_parts *p, const cmf_qact *a, int64_t t0, float *out, int64_t ldo, const float *bias,
                   int first, const int R, const int T, const int RS) {
    const int64_t kb = p->h->kb, b0 = p->h->b0, nb = a->nb;
    const int nr = p->h->nr;
    __m512 F[2][8];
    const int8_t *xq[8];
    const float *xd[8];
    const int32_t *xs[8];
    for (int j = 0; j < T; j++) {
        xq[j] = a->q + ((t0 + j) * nb + b0) * 32;
        xd[j] = a->d + (t0 + j) * nb + b0;
        xs[j] = a->s + (t0 + j) * nb + b0;
        for (int h = 0; h < R; h++) F[h][j] = _mm512_setzero_ps();
    }
    for (int64_t b = 0; b < kb; b++) {
        __m512i I[2][8];
        for (int j = 0; j < T; j++) {
            const __m512i c = _mm512_set1_epi32(-128 * xs[j][b]);
            for (int h = 0; h < R; h++) I[h][j] = c;
        }
        const uint8_t *u = p->u + b * 1024;
#pragma GCC unroll 8
        for (int g = 0; g < 8; g++) {
            __m512i W[2];
            for (int h = 0; h < R; h++) W[h] = _mm512_load_si512(u + g * 128 + h * 64);
            for (int j = 0; j < T; j++) {
                const __m512i X = _mm512_set1_epi32(rd32(xq[j] + 32 * b + 4 * g));
                for (int h = 0; h < R; h++) I[h][j] = _mm512_dpbusd_epi32(I[h][j], W[h], X);
            }
        }
        if (RS) {
            for (int j = 0; j < T; j++) {
                const __m512 D = _mm512_set1_ps(xd[j][b]);
                for (int h = 0; h < R; h++) F[h][j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(I[h][j]), D, F[h][j]);
            }
        } else {
            __m512 S[2];
            for (int h = 0; h < R; h++) S[h] = _mm512_load_ps(p->ws + b * PR + 16 * h);
            for (int j = 0; j < T; j++) {
                const __m512 D = _mm512_set1_ps(xd[j][b]);
                for (int h = 0; h < R; h++)
                    F[h][j] = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(I[h][j]), S[h]), D, F[h][j]);
            }
        }
    }
    for (int h = 0; h < R; h++) {
        const int left = nr - 16 * h;
        const __mmask16 k = left >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << left) - 1u);
        const __m512 rs = RS ? _mm512_load_ps(p->rs + 16 * h) : _mm512_set1_ps(1.0f);
        const __m512 bv = first && bias ? _mm512_maskz_loadu_ps(k, bias + 16 * h) : _mm512_setzero_ps();
        for (int j = 0; j < T; j++) {
            float *o = out + (t0 + j) * ldo + 16 * h;
            const __m512 base = first ? bv : _mm512_maskz_loadu_ps(k, o);
            const __m512 v = RS ? _mm512_fmadd_ps(F[h][j], rs, base) : _mm512_add_ps(F[h][j], base);
            _mm512_mask_storeu_ps(o, k, v);
        }
    }
}

#define TOKENS(R, RS)                                                                                           \
    switch (t1 - t) {                                                                                           \
    case 1: mk(&p, a, t, out, ld_out, bias, first, R, 1, RS); break;                                           \
    case 2: mk(&p, a, t, out, ld_out, bias, first, R, 2, RS); break;                                           \
    case 3: mk(&p, a, t, out, ld_out, bias, first, R, 3, RS); break;                                           \
    case 4: mk(&p, a, t, out, ld_out, bias, first, R, 4, RS); break;                                           \
    case 5: mk(&p, a, t, out, ld_out, bias, first, R, 5, RS); break;                                           \
    default: mk(&p, a, t, out, ld_out, bias, first, R, 6, RS); break;                                          \
    }

TGT void cmf_gemm_i8_avx512(const void *pack_buf, const cmf_qact *a, int64_t t0, int64_t t1, float *out,
                            int64_t ld_out, const float *bias, int first) {
    const pk_head *h = pack_buf;
    const pk_parts p = parts((void *)(uintptr_t)pack_buf, h->kb);
    const int two = h->nr > 16;
    for (int64_t t = t0; t < t1; t += 6) {
        if (two && h->rowscaled) TOKENS(2, 1)
        else if (two) TOKENS(2, 0)
        else if (h->rowscaled) TOKENS(1, 1)
        else TOKENS(1, 0)
    }
}

#endif
