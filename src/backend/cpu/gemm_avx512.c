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
#include "backend/cpu/gemm_pack.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#include <math.h>
#include <string.h>

#define TGT __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,fma,f16c")))
#define TGT_INLINE static inline __attribute__((always_inline)) TGT

enum { PR = PK_PR, DB = PK_DB };
_Static_assert(64 + PR * 4 + (size_t)KERN_GEMM_KB * (PR * 4 + 1024) + PR * DB * 36 <= KERN_GEMM_PACK_BYTES,
               "int8 panel fits KERN_GEMM_PACK_BYTES");
_Static_assert(64 + (2 * (size_t)KERN_GEMM_KC_F32 + 8) * PR * 4 <= KERN_GEMM_PACK_BYTES, "f32 panel fits");


/* The generic packer (q2tp, and any dtype without a direct one below): kern_avx512.c's decoder writes DB blocks
 * of every row to tmp, gathers transpose them. */
TGT static void pack_generic(const cmf_weight *w, int64_t r, int nr, int64_t b0, int64_t kb, const pk_parts *p) {
    const kern_decode_i8 dec = cmf_kern_avx512->decode_i8[w->dtype];
    const __m512i lane = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
    const __m512i idx = _mm512_mullo_epi32(lane, _mm512_set1_epi32(DB * 32)); /* byte offset of row lane in tmp */
    const int halves = nr > 16 ? 2 : 1;
    for (int64_t c = 0; c < kb; c += DB) {
        const int64_t m = kb - c < DB ? kb - c : DB;
        for (int i = 0; i < nr; i++) dec(w, r + i, b0 + c, m, (int8_t *)p->tmp + i * DB * 32, p->tws + i * DB);
        for (int i = nr; i < 16 * halves; i++) {
            memset(p->tmp + i * DB * 32, 0x80, DB * 32);
            memset(p->tws + i * DB, 0, DB * sizeof(float));
        }
        for (int64_t b = 0; b < m; b++) {
            for (int h = 0; h < halves; h++) {
                const uint8_t *src = p->tmp + h * 16 * DB * 32 + 32 * b;
                uint8_t *dst = p->w8 + ((c + b) * 16 + h) * 64;
                for (int g = 0; g < 8; g++)
                    _mm512_store_si512(dst + g * 128, _mm512_i32gather_epi32(idx, src + 4 * g, 1));
                for (int i = 0; i < 16; i++) p->ws[(c + b) * PR + 16 * h + i] = p->tws[(16 * h + i) * DB + b];
            }
        }
        if (c == 0)
            for (int i = 0; i < PR; i++) p->rs[i] = i < nr ? p->tws[i * DB] : 0.0f; /* q8: every block's scale */
    }
}

/* In: z[i] = [8 dwords of row i | 8 dwords of row i+8]; out: z[g] = [dword g of rows 0..7 | of rows 8..15], an
 * 8x8 dword transpose in each 256-bit half (unpack 32, unpack 64, then 128-bit lanes of two vectors). */
TGT_INLINE void tr8x8(__m512i z[8]) {
    __m512i t[8], u[8];
    for (int k = 0; k < 4; k++) {
        t[2 * k] = _mm512_unpacklo_epi32(z[2 * k], z[2 * k + 1]);
        t[2 * k + 1] = _mm512_unpackhi_epi32(z[2 * k], z[2 * k + 1]);
    }
    for (int k = 0; k < 2; k++) { /* u[k]: dwords k, k+4 (lo/hi lane) of rows 4k'..; see below */
        u[4 * k + 0] = _mm512_unpacklo_epi64(t[4 * k], t[4 * k + 2]);
        u[4 * k + 1] = _mm512_unpackhi_epi64(t[4 * k], t[4 * k + 2]);
        u[4 * k + 2] = _mm512_unpacklo_epi64(t[4 * k + 1], t[4 * k + 3]);
        u[4 * k + 3] = _mm512_unpackhi_epi64(t[4 * k + 1], t[4 * k + 3]);
    }
    /* u[d] (d < 4) holds dword d of rows 0-3 in 128-bit lanes 0 and 2 and dword d+4 in lanes 1 and 3; u[4+d] the
     * same for rows 4-7 */
    const __m512i lo = _mm512_set_epi64(13, 12, 5, 4, 9, 8, 1, 0), hi = _mm512_set_epi64(15, 14, 7, 6, 11, 10, 3, 2);
    for (int d = 0; d < 4; d++) {
        z[d] = _mm512_permutex2var_epi64(u[d], lo, u[4 + d]);
        z[d + 4] = _mm512_permutex2var_epi64(u[d], hi, u[4 + d]);
    }
}

/* Column bytes of 32 consecutive values from 16 nibble bytes: byte k holds columns 2k (low) and 2k+1 (high). */
TGT_INLINE __m512i nib2(const uint8_t *a, const uint8_t *b) {
    const __m256i n = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)(const void *)a)),
                                              _mm_loadu_si128((const __m128i *)(const void *)b), 1);
    const __m512i w16 = _mm512_cvtepu8_epi16(n);
    return _mm512_ternarylogic_epi32(w16, _mm512_slli_epi16(w16, 4), _mm512_set1_epi16(0x0f0f), 0xa8);
}

enum { PF_AHEAD = 1536 }; /* bytes of each row stream prefetched ahead of the packer (a whole chunk row) */

/* Direct packer: K = 0 q8_row / q8_2f, 1 q4_tiled, 2 q4_block, 3 q4tp. Reads each block of 16 rows straight from
 * the mapping (rows past nr repeat row nr-1: their outputs are never stored and their scales are 0), converts to
 * u = v + 128 and transposes in registers; the 32 row streams are prefetched PF_AHEAD bytes ahead (at the start:
 * the whole chunk row; rows of a few hundred bytes do not train the hardware prefetcher). */
TGT_INLINE void pack_direct(const cmf_weight *w, int64_t r, int nr, int64_t b0, int64_t kb, const pk_parts *p,
                            const int K) {
    const int64_t C = w->cols, G = C / 32, Gall = (w->full_rows * C + 31) / 32;
    const int64_t bpb = K == 0 ? 32 : K == 1 ? 18 : 16; /* bytes per block of a row */
    const int halves = nr > 16 ? 2 : 1;
    const uint8_t *base[PR];
    for (int i = 0; i < PR; i++) {
        const int64_t R = w->row0 + r + (i < nr ? i : nr - 1);
        base[i] = K == 0   ? w->data + R * C + 32 * b0
                  : K == 1 ? w->data + 18 * (R * G + b0) + 2
                           : w->data + 16 * (R * G + b0);
    }
    for (int i = 0; i < nr; i++)
        for (int64_t o = 0; o < PF_AHEAD && o < kb * bpb; o += 64)
            _mm_prefetch((const char *)(base[i] + o), _MM_HINT_T0);
    /* scales: q8 one per row; q4 one f16 per block (tile head, or the tensor's scale plane); q4tp a ladder rung */
    kern_tp tp;
    memset(&tp, 0, sizeof tp);
    if (K == 3) cmf_kern_tp(w, &tp);
    for (int i = 0; i < PR; i++) {
        const int64_t R = w->row0 + r + i;
        if (i >= nr) {
            p->rs[i] = 0;
            for (int64_t b = 0; b < kb; b++) p->ws[b * PR + i] = 0;
            continue;
        }
        if (K == 0) {
            p->rs[i] = cmf_f16_table[cmf_rd16(w->data + (size_t)(w->full_rows * C) + 2 * (size_t)R)];
        } else if (K == 3) {
            float lad[32];
            cmf_kern_ladder(w, &tp, R, lad);
            for (int64_t b = 0; b < kb; b++) p->ws[b * PR + i] = lad[cmf_kern_code(&tp, R, b0 + b)];
        } else {
            const uint8_t *sp = K == 1 ? w->data + 18 * (R * G + b0) : w->data + 16 * Gall + 2 * (R * G + b0);
            for (int64_t b = 0; b < kb; b++) p->ws[b * PR + i] = cmf_f16_table[cmf_rd16(sp + (K == 1 ? 18 : 2) * b)];
        }
    }
    const __m512i off = _mm512_set1_epi8((char)0x80), off4 = _mm512_set1_epi8(120);
    for (int64_t b = 0; b < kb; b++) {
        if ((b * bpb) % 64 < bpb)
            for (int i = 0; i < nr; i++) _mm_prefetch((const char *)(base[i] + b * bpb + PF_AHEAD), _MM_HINT_T0);
        const int64_t left = C - 32 * (b0 + b); /* q8: columns present in this block */
        const __mmask32 k = left >= 32 ? 0xffffffffu : (__mmask32)((1u << left) - 1u);
        for (int h = 0; h < halves; h++) {
            __m512i z[8];
            for (int i = 0; i < 8; i++) {
                const uint8_t *a = base[16 * h + i] + b * bpb, *c = base[16 * h + i + 8] + b * bpb;
                if (K == 0)
                    z[i] = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_maskz_loadu_epi8(k, a)),
                                              _mm256_maskz_loadu_epi8(k, c), 1);
                else
                    z[i] = nib2(a, c);
            }
            tr8x8(z);
            uint8_t *dst = p->w8 + b * 1024 + h * 64;
            for (int g = 0; g < 8; g++)
                _mm512_store_si512(dst + g * 128, K == 0 ? _mm512_xor_si512(z[g], off) : _mm512_add_epi8(z[g], off4));
        }
    }
}

TGT void cmf_gemm_pack_i8_avx512(const cmf_weight *w, int64_t r, int nr, int64_t b0, int64_t kb, void *buf) {
    pk_parts p = pk_parts_of(buf, kb);
    p.h->nr = nr;
    p.h->b0 = b0;
    p.h->kb = kb;
    p.h->rowscaled = w->dtype == CMF_DT_Q8_ROW || w->dtype == CMF_DT_Q8_2F;
    switch (w->dtype) {
    case CMF_DT_Q8_ROW:
    case CMF_DT_Q8_2F: pack_direct(w, r, nr, b0, kb, &p, 0); break;
    case CMF_DT_Q4_TILED: pack_direct(w, r, nr, b0, kb, &p, 1); break;
    case CMF_DT_Q4_BLOCK: pack_direct(w, r, nr, b0, kb, &p, 2); break;
    case CMF_DT_Q4TP: pack_direct(w, r, nr, b0, kb, &p, 3); break;
    default: pack_generic(w, r, nr, b0, kb, &p); break;
    }
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
        const uint8_t *u = p->w8 + b * 1024;
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
    const pk_parts p = pk_parts_of((void *)(uintptr_t)pack_buf, h->kb);
    const int two = h->nr > 16;
    for (int64_t t = t0; t < t1; t += 6) {
        if (two && h->rowscaled) TOKENS(2, 1)
        else if (two) TOKENS(2, 0)
        else if (h->rowscaled) TOKENS(1, 1)
        else TOKENS(1, 0)
    }
}

/* ---- float family (f32, f16, bf16, q4 with cols % 32 != 0) ------------------------------------------------
 * Packed panel: head (64 bytes) | wt[nc + 8][32] f32 (column c of the 32 rows: two zmm, rows 0-15 and 16-31);
 * f32 / f16 / bf16 are converted and transposed in registers straight from the mapping, other dtypes (q4 with
 * cols % 32 != 0) decoded by kern_avx512.c's decode_f32 into tmp[32][nc] after wt and gathered. Microkernel:
 * R halves x T <= 12 tokens of f32 accumulators, F += W_c * x[t][c] (one zmm load feeds 16 rows, the token's
 * value broadcast), one pass over the chunk's columns, no horizontal reductions. */

typedef struct {
    int32_t nr, pad0;
    int64_t nc;
    uint8_t pad[48];
} pkf_head;

/* f32 / f16 / bf16 rows read straight from the mapping, 8 columns of rows i and i+8 per zmm (converted to f32),
 * transposed by tr8x8 into the [column][row] layout; columns past nc read as 0 (masked loads) and rows past nr
 * repeat row nr-1 (never stored). wt has room for nc rounded up to 8. */
TGT static void pack_f32_direct(const cmf_weight *w, int64_t r, int nr, int64_t c0, int64_t nc, float *wt) {
    const int64_t C = w->cols;
    const int es = w->dtype == CMF_DT_F32 ? 4 : 2;
    const int halves = nr > 16 ? 2 : 1;
    const uint8_t *base[PR];
    for (int i = 0; i < PR; i++) base[i] = w->data + ((w->row0 + r + (i < nr ? i : nr - 1)) * C + c0) * es;
    for (int64_t c = 0; c < nc; c += 8) {
        const int m = nc - c < 8 ? (int)(nc - c) : 8;
        const __mmask8 k = (__mmask8)((1u << m) - 1u);
        for (int h = 0; h < halves; h++) {
            __m512i z[8];
            for (int i = 0; i < 8; i++) {
                const uint8_t *a = base[16 * h + i] + c * es, *b = base[16 * h + i + 8] + c * es;
                if (es == 4) {
                    z[i] = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_maskz_loadu_epi32(k, a)),
                                              _mm256_maskz_loadu_epi32(k, b), 1);
                } else {
                    const __m256i hv = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_maskz_loadu_epi16(k, a)),
                                                               _mm_maskz_loadu_epi16(k, b), 1);
                    z[i] = w->dtype == CMF_DT_F16 ? _mm512_castps_si512(_mm512_cvtph_ps(hv))
                                                  : _mm512_slli_epi32(_mm512_cvtepu16_epi32(hv), 16);
                }
            }
            tr8x8(z);
            for (int g = 0; g < 8; g++) _mm512_store_si512(wt + (c + g) * PR + 16 * h, z[g]);
        }
    }
}

TGT void cmf_gemm_pack_f32_avx512(const cmf_weight *w, int64_t r, int nr, int64_t c0, int64_t nc, void *buf) {
    pkf_head *h = buf;
    float *wt = (float *)(void *)((uint8_t *)buf + 64);
    h->nr = nr;
    h->nc = nc;
    if (w->dtype == CMF_DT_F32 || w->dtype == CMF_DT_F16 || w->dtype == CMF_DT_BF16) {
        pack_f32_direct(w, r, nr, c0, nc, wt);
        return;
    }
    float *tmp = wt + (nc + 8) * PR; /* the generic path: decode_f32 into tmp, gathers into wt */
    const int halves = nr > 16 ? 2 : 1;
    for (int i = 0; i < nr; i++) cmf_kern_avx512->decode_f32(w, r + i, c0, nc, tmp + i * nc);
    for (int i = nr; i < 16 * halves; i++) memset(tmp + i * nc, 0, (size_t)nc * sizeof(float));
    const __m512i idx = _mm512_mullo_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
                                           _mm512_set1_epi32((int)nc));
    for (int hh = 0; hh < halves; hh++)
        for (int64_t c = 0; c < nc; c++)
            _mm512_store_ps(wt + c * PR + 16 * hh, _mm512_i32gather_ps(idx, tmp + 16 * hh * nc + c, 4));
}

TGT_INLINE void mkf(const float *wt, int nr, int64_t nc, const float *x, int64_t ldx, int64_t t0, float *out,
                    int64_t ldo, const float *bias, int first, const int R, const int T) {
    __m512 F[2][12];
    for (int j = 0; j < T; j++)
        for (int h = 0; h < R; h++) F[h][j] = _mm512_setzero_ps();
    const float *xt = x + t0 * ldx;
    for (int64_t c = 0; c < nc; c++) {
        __m512 W[2];
        for (int h = 0; h < R; h++) W[h] = _mm512_load_ps(wt + c * PR + 16 * h);
        for (int j = 0; j < T; j++) {
            const __m512 X = _mm512_set1_ps(xt[j * ldx + c]);
            for (int h = 0; h < R; h++) F[h][j] = _mm512_fmadd_ps(W[h], X, F[h][j]);
        }
    }
    for (int h = 0; h < R; h++) {
        const int left = nr - 16 * h;
        const __mmask16 k = left >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << left) - 1u);
        const __m512 bv = first && bias ? _mm512_maskz_loadu_ps(k, bias + 16 * h) : _mm512_setzero_ps();
        for (int j = 0; j < T; j++) {
            float *o = out + (t0 + j) * ldo + 16 * h;
            const __m512 base = first ? bv : _mm512_maskz_loadu_ps(k, o);
            _mm512_mask_storeu_ps(o, k, _mm512_add_ps(F[h][j], base));
        }
    }
}

#define MKF(R, T) mkf(wt, h->nr, h->nc, x, ldx, t, out, ld_out, bias, first, R, T)
#define TOKENS_F(R)                                                                                             \
    if (left >= 12) MKF(R, 12), t += 12;                                                                        \
    else if (left >= 8) MKF(R, 8), t += 8;                                                                      \
    else if (left >= 4) MKF(R, 4), t += 4;                                                                      \
    else if (left == 3) MKF(R, 3), t += 3;                                                                      \
    else if (left == 2) MKF(R, 2), t += 2;                                                                      \
    else MKF(R, 1), t += 1;

TGT void cmf_gemm_f32_avx512(const void *pack_buf, const float *x, int64_t ldx, int64_t t0, int64_t t1, float *out,
                             int64_t ld_out, const float *bias, int first) {
    const pkf_head *h = pack_buf;
    const float *wt = (const float *)(const void *)((const uint8_t *)pack_buf + 64);
    for (int64_t t = t0; t < t1;) {
        const int64_t left = t1 - t;
        if (h->nr > 16) {
            TOKENS_F(2)
        } else {
            TOKENS_F(1)
        }
    }
}

/* One-level activation quantization with the arithmetic of cmf_qact_quantize (kern_scalar.c) step by step, so the
 * results are bit-identical to it (tests/kernels/test_gemm.c checks): v = x (* col), amax = the largest |v| (NaN
 * skipped as the scalar comparison skips it), d = amax / 127 (NaN when a value is NaN, whose q is then 0), id = 127 / amax (0 when amax is 0), q = the
 * truncation of v*id + (v*id >= 0 ? 0.5 : -0.5) clamped to [-127, 127]; s = sum q, dx = d x 8, cx lane k =
 * -128 * (q[4k] + ... + q[4k+3]). Tokens [t0, t1), slot = token. */
TGT void cmf_qact_quantize_avx512(cmf_qact *a, const float *x, int64_t ldx, int64_t cols, const float *col,
                                  int64_t t0, int64_t t1) {
    const __m512 zero = _mm512_setzero_ps(), half = _mm512_set1_ps(0.5f), mhalf = _mm512_set1_ps(-0.5f);
    const __m512i lo = _mm512_set1_epi32(-127), hi = _mm512_set1_epi32(127);
    const __m512 absmask = _mm512_castsi512_ps(_mm512_set1_epi32(0x7fffffff));
    /* the arrays once: the int8 stores may alias a, which made every block reload its pointers */
    int8_t *const aq = a->q;
    float *const ad = a->d, *const adx = a->dx;
    int32_t *const as = a->s, *const acx = a->cx;
    const int64_t nb = a->nb;
    for (int64_t t = t0; t < t1; t++) {
        const float *xt = x + t * ldx;
        for (int64_t b = 0; b < nb; b++) {
            const int64_t c0 = 32 * b, m = cols - c0 < 32 ? cols - c0 : 32;
            const __mmask16 k0 = m >= 16 ? 0xffff : (__mmask16)((1u << m) - 1u);
            const __mmask16 k1 = m >= 32 ? 0xffff : m <= 16 ? 0 : (__mmask16)((1u << (m - 16)) - 1u);
            __m512 v0 = _mm512_maskz_loadu_ps(k0, xt + c0), v1 = _mm512_maskz_loadu_ps(k1, xt + c0 + 16);
            if (col) {
                v0 = _mm512_mul_ps(v0, _mm512_maskz_loadu_ps(k0, col + c0));
                v1 = _mm512_mul_ps(v1, _mm512_maskz_loadu_ps(k1, col + c0 + 16));
            }
            __m512 mx = _mm512_max_ps(_mm512_and_ps(v0, absmask), zero); /* a NaN lane yields the second operand */
            mx = _mm512_max_ps(_mm512_and_ps(v1, absmask), mx);
            const float amax = _mm512_reduce_max_ps(mx);
            const __mmask16 n0 = _mm512_cmp_ps_mask(v0, v0, _CMP_UNORD_Q), n1 = _mm512_cmp_ps_mask(v1, v1, _CMP_UNORD_Q);
            const float d = n0 | n1 ? NAN : amax / 127.0f, id = amax > 0 ? 127.0f / amax : 0.0f;
            v0 = _mm512_mask_mov_ps(v0, n0, zero), v1 = _mm512_mask_mov_ps(v1, n1, zero); /* NaN lanes: q = 0 */
            const __m512 idv = _mm512_set1_ps(id);
            const __m512 y0 = _mm512_mul_ps(v0, idv), y1 = _mm512_mul_ps(v1, idv);
            const __mmask16 p0 = _mm512_cmp_ps_mask(y0, zero, _CMP_GE_OQ);
            const __mmask16 p1 = _mm512_cmp_ps_mask(y1, zero, _CMP_GE_OQ);
            const __m512 r0 = _mm512_add_ps(y0, _mm512_mask_blend_ps(p0, mhalf, half));
            const __m512 r1 = _mm512_add_ps(y1, _mm512_mask_blend_ps(p1, mhalf, half));
            const __m512i q0 = _mm512_min_epi32(_mm512_max_epi32(_mm512_cvttps_epi32(r0), lo), hi);
            const __m512i q1 = _mm512_min_epi32(_mm512_max_epi32(_mm512_cvttps_epi32(r1), lo), hi);
            const int64_t o = t * nb + b;
            const __m256i q8 = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm512_cvtepi32_epi8(q0)),
                                                       _mm512_cvtepi32_epi8(q1), 1);
            _mm256_storeu_si256((__m256i *)(void *)(aq + 32 * o), q8);
            ad[o] = d;
            as[o] = _mm512_reduce_add_epi32(_mm512_add_epi32(q0, q1));
            if (!adx) continue; /* dx / cx not wanted (kern.h cmf_qact) */
            _mm256_storeu_ps(adx + 8 * o, _mm256_set1_ps(d));
            const __m256i s4 = _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_set1_epi8(1), q8);
            _mm256_storeu_si256((__m256i *)(void *)(acx + 8 * o), _mm256_mullo_epi32(s4, _mm256_set1_epi32(-128)));
        }
    }
}

#endif
