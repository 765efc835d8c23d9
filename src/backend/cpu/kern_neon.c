/* kern_neon.c — the arm64 path (kern.h): AdvSIMD kernels for every entry of the kernel table, checked against the
 * scalar reference by tests/kernels/test_kern_tables.c and test_kernels.c (on x86 hosts under qemu-aarch64:
 * scripts/cross_neon.sh). cpu.c selects it on every arm64 CPU (AdvSIMD is part of the base AArch64 ISA).
 *
 * int8 family: weights decode to signed v in natural column order, byte for byte what kern_scalar.c writes, with
 * the same f32 block scales. A block of 32 is two int8x16 vectors; its exact int32 dot product with an activation
 * block is taken either by SDOT (vdotq_s32, FEAT_DotProd, ARMv8.2+) or, on cores without it, by SMULL + SMLAL2
 * into int16 (|v*x| <= 128*127, so the sum of two products stays <= 32512) widened and summed by SADALP. The int8
 * kernels are written once in kern_neon_i8.h and compiled here once per flavour: with SDOT when the build targets
 * it (-march=...+dotprod), else both flavours when the compiler can enable the extension per function, and each
 * table entry then picks one per call from the kernel's HWCAP_ASIMDDP bit (getauxval(AT_HWCAP), read once).
 * Prefill GEMM (kern.h gemm_pack_i8 / gemm_i8): panels packed 4 rows x 4 columns per vector for SDOT by element
 * (or its SMULL/ADDP/SADALP emulation), 8 rows x 4 tokens per microkernel.
 * float family: f16 by FCVTL (vcvt_f32_f16), bf16 by a 16-bit left shift (vshll_n_u16), FMA (vfmaq_f32) dot
 * products. Sources: Arm A64 ISA (SDOT by vector and by element, SMULL/SMLAL2, ADDP, SADALP, TRN1/TRN2,
 * LD2/LD4/ST2/ST4, FCVTL); the Linux arm64 ELF hwcaps (Documentation/arch/arm64/elf_hwcaps.rst: HWCAP_ASIMDDP);
 * CMF_FORMAT.md §2.2–2.7 for the layouts. Not measured on arm64 hardware: none is available here (qemu checks
 * results, not speed). */
#include "backend/cpu/kern.h"

/* little-endian only: the kernels reinterpret loaded bytes as f16/int32 lanes in memory order */
#if defined(__aarch64__) && !defined(__AARCH64EB__) && (defined(__GNUC__) || defined(__clang__))
#include <arm_neon.h>
#include <string.h>

#define AI static inline __attribute__((always_inline))

/* Which SDOT flavours are built: 2 = the build targets the extension (SDOT only), 1 = both, chosen at run time,
 * 0 = SMULL only (no way to detect the extension on this OS). */
#if defined(__ARM_FEATURE_DOTPROD)
#define NEON_DOT 2
#define DOT_TGT
#define kn_sdot vdotq_s32
#define KN_SDOT_LANE(acc, w, x, L) ((acc) = vdotq_laneq_s32((acc), (w), (x), L))
#elif defined(__linux__)
#define NEON_DOT 1
#include <sys/auxv.h>
#ifndef HWCAP_ASIMDDP
#define HWCAP_ASIMDDP (1 << 20) /* Linux arm64 uapi asm/hwcap.h */
#endif
#if defined(__clang__)
/* clang (before 16) declares vdotq_s32 only when the whole build targets the extension: the instruction itself,
 * in a function that enables it. */
#define DOT_TGT __attribute__((target("dotprod")))
DOT_TGT AI int32x4_t kn_sdot(int32x4_t acc, int8x16_t a, int8x16_t b) {
    __asm__("sdot %0.4s, %1.16b, %2.16b" : "+w"(acc) : "w"(a), "w"(b));
    return acc;
}
/* acc += the dot products of the four 4-byte rows of w with bytes 4L..4L+3 of x (SDOT by element) */
#define KN_SDOT_LANE(acc, w, x, L) __asm__("sdot %0.4s, %1.16b, %2.4b[" #L "]" : "+w"(acc) : "w"(w), "w"(x))
#else
#define DOT_TGT __attribute__((target("arch=armv8.2-a+dotprod")))
#define kn_sdot vdotq_s32
#define KN_SDOT_LANE(acc, w, x, L) ((acc) = vdotq_laneq_s32((acc), (w), (x), L))
#endif
#else
#define NEON_DOT 0
#endif

/* ---- per-block weight scales --------------------------------------------------------------------------------- */

/* ws[b] for blocks [b0, b0+kb) of view row r: q4_block's f16 scales are contiguous (§2.4) and converted four at a
 * time by FCVTL (exact, as the table); the other dtypes through cmf_kern_scales. */
static void scales(const cmf_weight *w, int64_t r, int64_t b0, int64_t kb, float *ws) {
    if (w->dtype != CMF_DT_Q4_BLOCK) {
        cmf_kern_scales(w, r, b0, kb, ws);
        return;
    }
    const int64_t C = w->cols, G = (w->full_rows * C + 31) / 32, g0 = (w->row0 + r) * (C / 32) + b0;
    const uint8_t *p = w->data + 16 * G + 2 * g0;
    int64_t b = 0;
    for (; b + 4 <= kb; b += 4)
        vst1q_f32(ws + b, vcvt_f32_f16(vreinterpret_f16_u8(vld1_u8(p + 2 * b))));
    for (; b < kb; b++) ws[b] = cmf_f16_table[cmf_rd16(p + 2 * b)];
}

/* ---- int8 decoders: signed v, natural column order (as kern_scalar.c) ------------------------------------------ */

static void dec_q8(const cmf_weight *w, int64_t r, int64_t b0, int64_t kb, int8_t *q, float *ws) {
    const int64_t R = w->row0 + r, C = w->cols, c0 = 32 * b0;
    const int64_t m = C - c0 < 32 * kb ? C - c0 : 32 * kb;
    const int8_t *src = (const int8_t *)w->data + R * C + c0;
    int64_t c = 0;
    for (; c + 32 <= m; c += 32) {
        vst1q_s8(q + c, vld1q_s8(src + c));
        vst1q_s8(q + c + 16, vld1q_s8(src + c + 16));
    }
    if (c < m) memcpy(q + c, src + c, (size_t)(m - c));
    if (m < 32 * kb) memset(q + m, 0, (size_t)(32 * kb - m));
    cmf_kern_scales(w, r, b0, kb, ws);
}

/* 16 nibble bytes -> 32 values v = nibble - 8; byte k holds columns 2k (low) and 2k+1 (high): ST2 interleaves. */
AI void nib32(const uint8_t *nib, int8_t *q) {
    const uint8x16_t u = vld1q_u8(nib);
    const int8x16_t e = vdupq_n_s8(8);
    int8x16x2_t v;
    v.val[0] = vsubq_s8(vreinterpretq_s8_u8(vandq_u8(u, vdupq_n_u8(15))), e);
    v.val[1] = vsubq_s8(vreinterpretq_s8_u8(vshrq_n_u8(u, 4)), e);
    vst2q_s8(q, v);
}

static void dec_q4(const cmf_weight *w, int64_t r, int64_t b0, int64_t kb, int8_t *q, float *ws) {
    const int64_t g0 = (w->row0 + r) * (w->cols / 32) + b0;
    if (w->dtype == CMF_DT_Q4_TILED)
        for (int64_t b = 0; b < kb; b++) nib32(w->data + 18 * (g0 + b) + 2, q + 32 * b);
    else
        for (int64_t b = 0; b < kb; b++) nib32(w->data + 16 * (g0 + b), q + 32 * b);
    scales(w, r, b0, kb, ws);
}

static void dec_q4tp(const cmf_weight *w, int64_t r, int64_t b0, int64_t kb, int8_t *q, float *ws) {
    const int64_t g0 = (w->row0 + r) * (w->cols / 32) + b0;
    for (int64_t b = 0; b < kb; b++) nib32(w->data + 16 * (g0 + b), q + 32 * b);
    cmf_kern_scales(w, r, b0, kb, ws);
}

/* q2tp (§2.7): 8 bytes per tile, byte i holds columns 4i..4i+3 at bits 0-1, 2-3, 4-5, 6-7; v = 2c - 3. Plane m
 * of the four holds columns 4i+m; ST4 interleaves them back into column order. */
AI int8x8_t q2v(uint8x8_t c) {
    return vsub_s8(vreinterpret_s8_u8(vshl_n_u8(vand_u8(c, vdup_n_u8(3)), 1)), vdup_n_s8(3));
}

static void dec_q2tp(const cmf_weight *w, int64_t r, int64_t b0, int64_t kb, int8_t *q, float *ws) {
    const int64_t g0 = (w->row0 + r) * (w->cols / 32) + b0;
    for (int64_t b = 0; b < kb; b++) {
        const uint8x8_t c = vld1_u8(w->data + 8 * (g0 + b));
        int8x8x4_t v;
        v.val[0] = q2v(c);
        v.val[1] = q2v(vshr_n_u8(c, 2));
        v.val[2] = q2v(vshr_n_u8(c, 4));
        v.val[3] = q2v(vshr_n_u8(c, 6));
        vst4_s8(q + 32 * b, v);
    }
    cmf_kern_scales(w, r, b0, kb, ws);
}

/* ---- int8 GEMM panel packing (kern_gemm_pack_i8) ----------------------------------------------------------------
 * Packed panel of KERN_GEMM_R rows x up to KERN_GEMM_KB blocks of 32 columns:
 *   head (64 bytes: nr, b0, kb) | ws[kb][KERN_GEMM_R] f32 block scales | e[kb][KERN_GEMM_R/4][8][16] int8 | scratch
 * e holds v (signed, as decode_i8) in the order of SDOT by element: for block b, row quad q (rows 4q..4q+3) and
 * column group g (columns 4g..4g+3), 16 bytes = the 4 bytes of each of the 4 rows, so that one vector times the 4
 * activation bytes of group g (a lane of the activation vector) gives 4 row sums. Rows past nr hold v = 0 and
 * scale 0. q8 dtypes store their row scale as every block's scale. */
enum { PK_R = KERN_GEMM_R, PK_DB = 8 /* blocks decoded per step */ };
typedef struct {
    int32_t nr, pad;
    int64_t b0, kb;
} pk_head;
static float *pk_ws(const void *buf) { return (float *)(void *)((uint8_t *)(uintptr_t)buf + 64); }
static int8_t *pk_e(const void *buf, int64_t kb) { return (int8_t *)(pk_ws(buf) + kb * PK_R); }
_Static_assert(64 + (size_t)KERN_GEMM_KB * PK_R * (4 + 32) + (size_t)PK_R * PK_DB * (32 + 4) <= KERN_GEMM_PACK_BYTES,
               "the NEON GEMM panel must fit KERN_GEMM_PACK_BYTES");
_Static_assert(PK_R % 8 == 0, "the NEON GEMM microkernel takes rows 8 at a time");

static void gemm_pack(const cmf_weight *w, int64_t r, int nr, int64_t b0, int64_t kb, void *buf) {
    pk_head *h = buf;
    float *ws = pk_ws(buf);
    int8_t *e = pk_e(buf, kb), *tmp = e + kb * PK_R * 32;
    float *tws = (float *)(void *)(tmp + PK_R * PK_DB * 32);
    h->nr = nr;
    h->b0 = b0;
    h->kb = kb;
    const kern_decode_i8 dec = cmf_kern_neon->decode_i8[w->dtype];
    const int rows = (nr + 7) / 8 * 8; /* the microkernel reads rows in groups of 8 */
    for (int64_t c = 0; c < kb; c += PK_DB) {
        const int64_t m = kb - c < PK_DB ? kb - c : PK_DB;
        for (int i = 0; i < nr; i++) dec(w, r + i, b0 + c, m, tmp + i * PK_DB * 32, tws + i * PK_DB);
        for (int i = nr; i < rows; i++) {
            memset(tmp + i * PK_DB * 32, 0, PK_DB * 32);
            memset(tws + i * PK_DB, 0, PK_DB * sizeof(float));
        }
        for (int64_t b = 0; b < m; b++) {
            int8_t *eb = e + (c + b) * PK_R * 32;
            for (int q = 0; q < rows / 4; q++) {
                for (int half = 0; half < 2; half++) { /* columns 16*half.., groups 4*half..4*half+3 */
                    int64x2_t v[4];
                    for (int i = 0; i < 4; i++) {
                        const int8_t *src = tmp + (4 * q + i) * PK_DB * 32 + 32 * b + 16 * half;
                        v[i] = vreinterpretq_s64_s8(vld1q_s8(src));
                    }
                    /* 4x4 transpose of 32-bit cells: out[g] = (row 0, 1, 2, 3) of column group g */
                    const int32x4_t r0 = vreinterpretq_s32_s64(v[0]), r1 = vreinterpretq_s32_s64(v[1]);
                    const int32x4_t r2 = vreinterpretq_s32_s64(v[2]), r3 = vreinterpretq_s32_s64(v[3]);
                    const int64x2_t t0 = vreinterpretq_s64_s32(vtrn1q_s32(r0, r1));
                    const int64x2_t t1 = vreinterpretq_s64_s32(vtrn2q_s32(r0, r1));
                    const int64x2_t t2 = vreinterpretq_s64_s32(vtrn1q_s32(r2, r3));
                    const int64x2_t t3 = vreinterpretq_s64_s32(vtrn2q_s32(r2, r3));
                    int8_t *o = eb + q * 128 + half * 64;
                    vst1q_s8(o, vreinterpretq_s8_s64(vtrn1q_s64(t0, t2)));
                    vst1q_s8(o + 16, vreinterpretq_s8_s64(vtrn1q_s64(t1, t3)));
                    vst1q_s8(o + 32, vreinterpretq_s8_s64(vtrn2q_s64(t0, t2)));
                    vst1q_s8(o + 48, vreinterpretq_s8_s64(vtrn2q_s64(t1, t3)));
                }
            }
            for (int i = 0; i < rows; i++) ws[(c + b) * PK_R + i] = tws[i * PK_DB + b];
        }
    }
}

_Static_assert(KERN_GEMV_T == 2, "the NEON gemv kernels take 1 or 2 tokens (kern_neon_i8.h, KN_GEMV_FN)");

/* ---- int8 microkernels and fused decode kernels, once per dot-product flavour ----------------------------------- */

#if NEON_DOT >= 1
#define KN_DOT 1
#define KN(name) name##_dot
#define KN_TGT DOT_TGT
#include "backend/cpu/kern_neon_i8.h"
#undef KN_DOT
#undef KN
#undef KN_TGT
#endif
#if NEON_DOT <= 1
#define KN_DOT 0
#define KN(name) name##_base
#define KN_TGT
#include "backend/cpu/kern_neon_i8.h"
#undef KN_DOT
#undef KN
#undef KN_TGT
#endif

#if NEON_DOT == 1
/* 1 when the kernel reports SDOT (HWCAP_ASIMDDP); read once, the race benign (every thread stores the same). */
static int has_dot(void) {
    static int cached = -1;
    int v = __atomic_load_n(&cached, __ATOMIC_RELAXED);
    if (v < 0) {
        v = (getauxval(AT_HWCAP) & HWCAP_ASIMDDP) != 0;
        __atomic_store_n(&cached, v, __ATOMIC_RELAXED);
    }
    return v;
}

static void mk_i8_pick(const int8_t *q, int64_t ldq, const float *ws, int64_t ldw, int64_t kb, const cmf_qact *a,
                       int64_t t0, int tb, int64_t b0, float acc[KERN_RB][KERN_TB]) {
    if (has_dot()) mk_i8_dot(q, ldq, ws, ldw, kb, a, t0, tb, b0, acc);
    else mk_i8_base(q, ldq, ws, ldw, kb, a, t0, tb, b0, acc);
}

#define GEMV_PICK(name)                                                                                            \
    static void name##_pick(const cmf_weight *w, int64_t r, int nr, const cmf_qact *a, int nt, float *ws,          \
                            float acc[KERN_RB][KERN_TB]) {                                                         \
        if (has_dot()) name##_dot(w, r, nr, a, nt, ws, acc);                                                       \
        else name##_base(w, r, nr, a, nt, ws, acc);                                                                \
    }
GEMV_PICK(gemv_q8)
GEMV_PICK(gemv_q4t)
GEMV_PICK(gemv_q4b)
GEMV_PICK(gemv_q4tp)
GEMV_PICK(gemv_q2tp)

static void gemm_i8_pick(const void *pack, const cmf_qact *a, int64_t t0, int64_t t1, float *out, int64_t ld_out,
                         const float *bias, int first) {
    if (has_dot()) gemm_i8_dot(pack, a, t0, t1, out, ld_out, bias, first);
    else gemm_i8_base(pack, a, t0, t1, out, ld_out, bias, first);
}
#define I8FN(f) f##_pick
#elif NEON_DOT == 2
#define I8FN(f) f##_dot
#else
#define I8FN(f) f##_base
#endif

/* ---- float family ---------------------------------------------------------------------------------------------- */

/* f16 (FCVTL, exact) and bf16 (the 16 bits shifted into the top of an f32) eight columns at a time; the tail and
 * every other dtype through cmf_weight_cols_f32 (ops.c). */
static void dec_f32(const cmf_weight *w, int64_t r, int64_t c0, int64_t nc, float *out) {
    const int64_t R = w->row0 + r, C = w->cols;
    if (w->dtype != CMF_DT_F16 && w->dtype != CMF_DT_BF16) {
        cmf_weight_cols_f32(w, r, c0, nc, out);
        return;
    }
    const uint8_t *p = w->data + (size_t)(R * C + c0) * 2;
    int64_t c = 0;
    if (w->dtype == CMF_DT_F16) {
        for (; c + 8 <= nc; c += 8) {
            const float16x8_t h = vreinterpretq_f16_u8(vld1q_u8(p + 2 * c));
            vst1q_f32(out + c, vcvt_f32_f16(vget_low_f16(h)));
            vst1q_f32(out + c + 4, vcvt_high_f32_f16(h));
        }
    } else {
        for (; c + 8 <= nc; c += 8) {
            const uint16x8_t h = vreinterpretq_u16_u8(vld1q_u8(p + 2 * c));
            vst1q_f32(out + c, vreinterpretq_f32_u32(vshll_n_u16(vget_low_u16(h), 16)));
            vst1q_f32(out + c + 4, vreinterpretq_f32_u32(vshll_high_n_u16(h, 16)));
        }
    }
    if (c < nc) cmf_weight_cols_f32(w, r, c0 + c, nc - c, out + c);
}

/* KERN_RB rows x T tokens of f32 dot products over nc columns: four columns per FMA, one accumulator per pair,
 * the nc % 4 tail added in scalar FMA, one horizontal add per pair at the end. */
AI void mk_f32_t(const float *wf, int64_t ldw, const float *x, int64_t ldx, int64_t t0, int64_t c0, int64_t nc,
                 float acc[KERN_RB][KERN_TB], const int T) {
    float32x4_t s[KERN_RB][KERN_TB];
    const float *xt[KERN_TB];
    for (int j = 0; j < T; j++) {
        xt[j] = x + (t0 + j) * ldx + c0;
        for (int i = 0; i < KERN_RB; i++) s[i][j] = vdupq_n_f32(0.0f);
    }
    int64_t c = 0;
    for (; c + 4 <= nc; c += 4) {
        float32x4_t X[KERN_TB];
        for (int j = 0; j < T; j++) X[j] = vld1q_f32(xt[j] + c);
        for (int i = 0; i < KERN_RB; i++) {
            const float32x4_t W = vld1q_f32(wf + i * ldw + c);
            for (int j = 0; j < T; j++) s[i][j] = vfmaq_f32(s[i][j], W, X[j]);
        }
    }
    for (int i = 0; i < KERN_RB; i++)
        for (int j = 0; j < T; j++) {
            float t = vaddvq_f32(s[i][j]);
            for (int64_t k = c; k < nc; k++) t = __builtin_fmaf(wf[i * ldw + k], xt[j][k], t);
            acc[i][j] = t;
        }
}

static void mk_f32(const float *wf, int64_t ldw, const float *x, int64_t ldx, int64_t t0, int tb, int64_t c0,
                   int64_t nc, float acc[KERN_RB][KERN_TB]) {
    switch (tb) {
    case 1: mk_f32_t(wf, ldw, x, ldx, t0, c0, nc, acc, 1); break;
    case 2: mk_f32_t(wf, ldw, x, ldx, t0, c0, nc, acc, 2); break;
    case 3: mk_f32_t(wf, ldw, x, ldx, t0, c0, nc, acc, 3); break;
    default: mk_f32_t(wf, ldw, x, ldx, t0, c0, nc, acc, 4); break;
    }
}

static const cmf_kern kern = {
    .name = "neon",
    .decode_i8 = {[CMF_DT_Q8_ROW] = dec_q8, [CMF_DT_Q8_2F] = dec_q8, [CMF_DT_Q4_BLOCK] = dec_q4,
                  [CMF_DT_Q4_TILED] = dec_q4, [CMF_DT_Q4TP] = dec_q4tp, [CMF_DT_Q2TP] = dec_q2tp},
    .gemv_i8 = {[CMF_DT_Q8_ROW] = I8FN(gemv_q8), [CMF_DT_Q8_2F] = I8FN(gemv_q8),
                [CMF_DT_Q4_BLOCK] = I8FN(gemv_q4b), [CMF_DT_Q4_TILED] = I8FN(gemv_q4t),
                [CMF_DT_Q4TP] = I8FN(gemv_q4tp), [CMF_DT_Q2TP] = I8FN(gemv_q2tp)},
    .mk_i8 = I8FN(mk_i8),
    .decode_f32 = dec_f32,
    .mk_f32 = mk_f32,
    .gemm_pack_i8 = gemm_pack,
    .gemm_i8 = I8FN(gemm_i8),
};
const cmf_kern *const cmf_kern_neon = &kern;

#else
const cmf_kern *const cmf_kern_neon = 0;
#endif
