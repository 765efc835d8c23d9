/* kern.h — the internal kernel table behind cmf_matmul: one table per instruction-set path (scalar reference,
 * AVX2, AVX-512 VNNI, NEON), chosen at run time from CPUID (cpu.c). The matmul driver (matmul.c) works in
 * tiles of KERN_RB weight rows x up to KERN_TB tokens x a chunk of columns:
 *
 *   int8 family (q8_row, q8_2f, q4_block / q4_tiled with cols % 32 == 0 or a split repacked copy (cmf_rp), q4tp,
 *   q2tp): the activations are
 *   quantized once per matmul to int8 per block of 32 (llama.cpp's Q8_0 scheme: d = absmax/127, q = round(x/d);
 *   one level, slot = token, as llama.cpp; see cmf_qact_quantize),
 *   a tile of weights is decoded to 32-wide int8 blocks with one f32 scale per block, and the microkernel sums
 *   exact int32 block dot products, then scales them in f32:  y += sum_b wscale_b * xscale_b * isum_b.
 *   float family (f32, f16, bf16, and q4 with cols % 32 != 0 without a repacked copy): weights decoded to f32, f32
 *   FMA dot products.
 *
 * The value of a decoded int8 weight is w = wscale * v with v in [-128, 127]: q8_row/q8_2f v = q (q8_2f's column
 * scales are folded into the activations before quantizing), q4 v = nibble - 8, q2tp v = 2c - 3 with
 * wscale = s/2 (CMF_FORMAT.md §2.2–2.7). Each path may store v in its own encoding (AVX-512 stores v + 128 as
 * an unsigned byte for vpdpbusd and corrects with the activation block sums). */
#ifndef CMF_CPU_KERN_H
#define CMF_CPU_KERN_H

#include <stdint.h>
#include <string.h>

#include "backend/cpu/ops.h"
#include "quant/dtype.h"

enum { KERN_RB = 4, KERN_TB = 4, KERN_KB = 32 /* blocks of 32 columns per column chunk */ };

/* Activations quantized per block of 32 (all arrays owned by the caller; see cmf_qact_bytes).
 * q: [n][nb*32] int8, zero-padded past cols; d: [n][nb] scales; s: [n][nb] sums of q;
 * dx: [n][nb*8] each d repeated 8 times (the per-lane scale vectors of the SIMD paths);
 * cx: [n][nb*8] lane k of block b = -128 * (sum of q[4k..4k+3]): the exact per-lane correction of a dot
 * product taken with weights stored as v + 128 (lane k then holds sum v*x over its 4 columns).
 * dx and cx may be NULL (both): the quantizers then skip them. matmul.c clears them for the repacked kernels (kern.h
 * cmf_rp), which read only q, d and s: at a serve step's 16 tokens their 32 KB per product were written into the
 * pool's shared buffer, line by line taken over from the other core that had read it in the previous product. */
typedef struct cmf_qact {
    int64_t n, nb;
    int8_t *q;
    float *d;
    int32_t *s;
    float *dx;
    int32_t *cx;
} cmf_qact;

/* Decodes blocks [b0, b0+kb) of view row r into q (kb*32 values, this path's encoding) and ws (kb scales). */
typedef void (*kern_decode_i8)(const cmf_weight *w, int64_t r, int64_t b0, int64_t kb, int8_t *q, float *ws);
/* acc[i][j] = sum over kb blocks of ws[i][b] * a.d[t0+j][b0+b] * dot(q_i block b, a.q[t0+j] block b0+b), for
 * i < KERN_RB rows (row i at q + i*ldq bytes, ws + i*ldw) and j < tb tokens (1..KERN_TB). */
typedef void (*kern_mk_i8)(const int8_t *q, int64_t ldq, const float *ws, int64_t ldw, int64_t kb,
                           const cmf_qact *a, int64_t t0, int tb, int64_t b0, float acc[KERN_RB][KERN_TB]);
/* Decodes columns [c0, c0+nc) of view row r to f32. */
typedef void (*kern_decode_f32)(const cmf_weight *w, int64_t r, int64_t c0, int64_t nc, float *out);
/* acc[i][j] = dot(wf + i*ldw, x + (t0+j)*ldx + c0) over nc columns, i < KERN_RB, j < tb. */
typedef void (*kern_mk_f32)(const float *wf, int64_t ldw, const float *x, int64_t ldx, int64_t t0, int tb,
                            int64_t c0, int64_t nc, float acc[KERN_RB][KERN_TB]);

/* Fused matrix-vector product for 1..KERN_GEMV_T tokens (decode): acc[i][j] = sum over all columns of
 * w[r+i][c] * x_j[c] for i < nr (1..KERN_RB; rows past nr are not computed) and j < nt, where token j's
 * activations are slot j of a (one level: d_b * q). Per block b the int32 dot product of the decoded weights
 * with q is exact; it is scaled in f32 by wscale_b * d_b and summed (any order). The weights are read
 * straight from the mapping and decoded in registers; ws is scratch of KERN_RB * KERN_KB floats. No bias.
 * A path without a fused kernel for a dtype leaves the entry NULL (the tiled path then runs). */
enum { KERN_GEMV_T = 2 };
/* Software prefetch distance of the gemv kernels: each row's weights are prefetched into L2 (prefetcht1) about this
 * many bytes ahead, rounded up to whole groups of KERN_RB rows (past a matrix's end it touches the next tensor of the
 * mapping: harmless). Measured on the 2-CPU EPYC VM, Qwen2.5-0.5B shape: q4 tg at 1 thread, loaded machine, none
 * 7.5 t/s, next row group into L1 12-14, 8-32 KiB into L2 22-32. With 2 threads it was 128 KiB while the work items
 * were dealt round robin (a prefetch had to reach past the other thread's item: 4 KiB 66-68 / 45-47 q4 / q8 tg, 32 KiB
 * 72-73 / 47, 128 KiB 77-78 / 48-49). Since each thread streams its own range (claim.h cmf_claim), the decode
 * products (matmul_bench stream, 2 threads, Zen 5 VM, medians of 5 interleaved rounds, q4_block / q4tp / q8_row
 * tok/s): none 101 / 77 / 106, 8 KiB 208 / 166 / 112, 16 KiB 156 / 172 / 103, 32 KiB 180-182 / 159-174 / 110-112,
 * 48 KiB 176 / 172 / 111, 64 KiB 171 / 164 / 106, 96 KiB 150 / 150 / 109, 128 KiB 135 / 132 / 95, 256 KiB 93 / 95 /
 * 77 (session 15, bench/RESULTS.md): a prefetch far ahead lands in the next thread's range. */
enum { KERN_PF_BYTES = 32768 };
typedef void (*kern_gemv_i8)(const cmf_weight *w, int64_t r, int nr, const cmf_qact *a, int nt, float *ws,
                             float acc[KERN_RB][KERN_TB]);

/* Register-blocked GEMM of the int8 family for prefill and batched decode (n > KERN_GEMV_T tokens, one activation
 * level: slot = token), gemm_avx512.c / gemm_avx2.c. matmul.c cuts the rows into panels of up to KERN_GEMM_R rows
 * and the columns into chunks of up to KERN_GEMM_KB blocks of 32; per panel and chunk:
 *   gemm_pack_i8(w, r, nr, b0, kb, pack): decodes rows [r, r+nr) (nr <= KERN_GEMM_R), blocks [b0, b0+kb)
 *     (kb <= KERN_GEMM_KB) once into pack (KERN_GEMM_PACK_BYTES, 64-byte aligned, the caller's; the layout is the
 *     path's own, usually rows interleaved so that one vector load feeds many rows; it may use the path's
 *     decode_i8), any int8 dtype of decode_i8;
 *   gemm_i8(pack, a, t0, t1, out, ld_out, bias, first): for tokens t in [t0, t1) and panel rows i < nr,
 *     out[t*ld_out + i] = (first ? bias[i] (0 when bias is NULL) : out[t*ld_out + i])
 *                         + sum over the chunk's blocks b of wscale_ib * a.d[t][b] * (exact int32 dot of v_i and
 *                         a.q[t] over block b)
 *     where out and bias point at the panel's first row. The f32 scaling and summation order are the path's own
 *     (tests/kernels/test_gemm.c: within 1e-5 of cmf_gemm_ref_i8 relative to the sum of |terms|).
 * A path that leaves both NULL (scalar, NEON for now) runs the tiled decode_i8 + mk_i8 path instead. */
enum { KERN_GEMM_R = 32, KERN_GEMM_KB = 40 };
/* Per-thread panel bytes (the pool scratch, kept under 64 KiB: tests/o1/test_o1_scratch.c bounds it). */
#define KERN_GEMM_PACK_BYTES ((size_t)56 * 1024)
typedef void (*kern_gemm_pack_i8)(const cmf_weight *w, int64_t r, int nr, int64_t b0, int64_t kb, void *pack);
typedef void (*kern_gemm_i8)(const void *pack, const cmf_qact *a, int64_t t0, int64_t t1, float *out,
                             int64_t ld_out, const float *bias, int first);
/* The AVX-512 VNNI and AVX2 implementations (x86-64 builds only). */
void cmf_gemm_pack_i8_avx512(const cmf_weight *w, int64_t r, int nr, int64_t b0, int64_t kb, void *pack);
void cmf_gemm_i8_avx512(const void *pack, const cmf_qact *a, int64_t t0, int64_t t1, float *out, int64_t ld_out,
                        const float *bias, int first);
/* The float family (f32, f16, bf16, q4 with cols % 32 != 0) in the same scheme, for n > KERN_GEMV_T tokens:
 *   gemm_pack_f32(w, r, nr, c0, nc, pack): rows [r, r+nr) (nr <= KERN_GEMM_R), columns [c0, c0+nc)
 *     (nc <= KERN_GEMM_KC_F32) decoded to f32 (the path's decode_f32) once into pack (KERN_GEMM_PACK_BYTES);
 *   gemm_f32(pack, x, ldx, t0, t1, out, ld_out, bias, first): for t in [t0, t1), i < nr,
 *     out[t*ld_out + i] = (first ? bias[i] (0 when NULL) : out[t*ld_out + i]) + sum over the chunk's columns c of
 *     W[i][c0+c] * x[t*ldx + c], where x points at column c0 of token 0 and out, bias at the panel's first row
 *     (f32 FMA, the path's order; test_gemm.c: within 1e-5 of a double sum relative to the sum of |terms|).
 * NULL (scalar, AVX2, NEON for now): the tiled decode_f32 + mk_f32 path. */
enum { KERN_GEMM_KC_F32 = 192 };
typedef void (*kern_gemm_pack_f32)(const cmf_weight *w, int64_t r, int nr, int64_t c0, int64_t nc, void *pack);
typedef void (*kern_gemm_f32)(const void *pack, const float *x, int64_t ldx, int64_t t0, int64_t t1, float *out,
                              int64_t ld_out, const float *bias, int first);
void cmf_gemm_pack_f32_avx512(const cmf_weight *w, int64_t r, int nr, int64_t c0, int64_t nc, void *pack);
void cmf_gemm_f32_avx512(const void *pack, const float *x, int64_t ldx, int64_t t0, int64_t t1, float *out,
                         int64_t ld_out, const float *bias, int first);
/* cmf_qact_quantize with levels = 1 in AVX-512 (gemm_avx512.c), bit-identical to it; matmul.c uses it for the
 * GEMM's activations on the avx512 path. */
void cmf_qact_quantize_avx512(cmf_qact *a, const float *x, int64_t ldx, int64_t cols, const float *col, int64_t t0,
                              int64_t t1);
void cmf_gemm_pack_i8_avx2(const cmf_weight *w, int64_t r, int nr, int64_t b0, int64_t kb, void *pack);
void cmf_gemm_i8_avx2(const void *pack, const cmf_qact *a, int64_t t0, int64_t t1, float *out, int64_t ld_out,
                      const float *bias, int first);
/* The reference of the GEMM's arithmetic (gemm_scalar.c, for tests): out[t*ld_out + r] = bias[r] (or 0) + sum over
 * all blocks b of ws_rb * a.d[t][b] * isum_trb in double (ws from the scalar path's decode_i8), rounded to f32, for
 * t < n (slot = token), r < w->rows; when mag is not NULL, mag[t*ld_out + r] = |bias| + sum |terms| (the scale of
 * the rounding error). Allocation-free, single thread. */
void cmf_gemm_ref_i8(const cmf_weight *w, const cmf_qact *a, int64_t n, float *out, int64_t ld_out,
                     const float *bias, double *mag);

/* Load-time repack of the q4 family (repack.c): q4_block, q4_tiled (any cols: see split below) and q4tp matrices
 * rewritten once into row groups of KERN_RP_R = 16 stored rows, so that one vector load of nibbles feeds 16 rows (the
 * idea of llama.cpp's CPU "repack" buffer type, Q4_0 x 8 rows; this layout is our own). Group g (stored rows
 * 16g..16g+15, rows past full_rows zero: nibble 8 and scale 0) at buf + g * gstride:
 *   nib[nb][4][64] bytes: for block b (columns 32b..32b+31) and quarter m (0..3), byte 4i+j (row i < 16, j < 4)
 *     holds in its low nibble u = v + 8 of column 32b + 4m + j and in its high nibble that of column
 *     32b + 16 + 4m + j, so (x & 15) and (x >> 4) & 15 of one 64-byte vector are the VNNI operands (16 rows x 4
 *     columns) of quarters m and m + 4;
 *   q4_block / q4_tiled (sbytes 2): sc[nb][16], the block scales of the 16 rows, f16 as stored (exact);
 *     gstride = nb * 288 rounded up to 64 bytes;
 *   q4tp has two layouts, chosen when the copy is made by the kernel path then active (cmf_rp_tp_layout):
 *   q4tp, f32 rungs (sbytes 4: 16 + 4 bytes per 32 values; the AVX2 and scalar paths): sc[nb][16] f32, rung
 *     t[code] of each row's ladder per block (§2.6 steps 2-3, cmf_kern_ladder: the same bits as below);
 *     gstride = nb * 320. AVX2 has no 32-entry permute: looking the rungs up from codes cost its compute-bound
 *     decode ~27% (bench/RESULTS.md, issue 4 session 7), reading the f32 rung costs nothing.
 *   q4tp, ladder codes (sbytes 1: 16 + 1 bytes per 32 values; the AVX-512 path): lad[2][16] f32, the 16 rows' t0 = exp2f(lo) then r = exp2f(step)
 *     (§2.6 step 2, from the stored f16 lo / step), then code[16][nb]: byte i * nb + b is the 5-bit code of row i's
 *     block b (§2.6). The block scale is rung t[code] of the row's ladder t[0] = t0, t[c] = t[c-1] * r (§2.6 step
 *     3: the same f32 multiplies, so the same bits as cmf_kern_ladder); the kernels rebuild the 16 ladders of a group
 *     lane-wise (lane i = row i; cmf_rp_tp_ladders) into 2 KiB of scratch and look the rungs up there (AVX-512: one
 *     vpermt2ps per row and 16 blocks, then a transpose). Pad rows: t0 = r = 0 (every rung 0).
 *     gstride = nb * 272 + 128 rounded up to 64 bytes.
 * buf is 64-byte aligned. The value of an element is
 * (u - 8) * scale exactly as the stored tensor's (CMF_FORMAT.md §2.4-2.6). Kernels take the activations of one
 * level (cmf_qact, slot = token) and use the block sums s for the -8 offset: dot(v, x) = dot(u, x) - 8 * s.
 * q8_row / q8_2f (q8 = 1; any cols, nb = ceil(cols / 32)): q[nb][8][64] bytes, for block b and column quad g (0..7)
 * byte 4i+j holds u = v + 128 of column 32b + 4g + j of row i (columns past cols: u = 128, v = 0), then rs[16] f32:
 * the rows' f16 scales (§2.2-2.3; q8_2f's column scales are folded into the activations by cmf_matmul); gstride =
 * nb * 512 + 64; the offset is -128 * s; value (u - 128) * rs.
 * Split q4 (q4_block / q4_tiled with cols % 32 != 0, split = 1): the stored groups of 32 run over the flattened tensor
 * (§2.4), so a row's column block b (columns 32b..32b+31, the activations' block) can hold values of two stored groups
 * with two scales. Stored row R is then written as TWO copy rows in the q4 layout above: copy row 2R holds the values
 * of each block that lie in the stored group of the block's first column, copy row 2R + 1 those of the next group
 * (the rest of both: u = 8, v = 0; a block with no value in a row has scale 0), so every copy block has one scale and
 * value(R, c) = value(2R, c) + value(2R + 1, c) with one of the two 0: exact. The kernels see 2 * full_rows rows;
 * cmf_matmul adds each pair's outputs, y_R = y_2R + y_2R+1 (one f32 add, then the bias), for any token count. */
enum { KERN_RP_R = 16 };
/* The repacked GEMM with at most this many tokens per call (a serve step's batch) reads its weights from memory
 * once per product, as decode does, and prefetches them (rp_avx512.c: the next panel of 32 rows, into L2, during the
 * first token tile); matmul.c gives each thread runs of consecutive panels for it (rp_runs_make). */
enum { KERN_RP_FEW = 32 };
typedef struct cmf_rp {
    const uint8_t *data; /* identity of the stored tensor the copy was made from: data, dtype, full_rows, cols */
    int dtype;
    int64_t full_rows, cols;
    int64_t nb, ngroups; /* blocks of 32 per row; row groups = ceil(full_rows / 16) */
    int sbytes;          /* q4: 2: f16 scales (q4_block / q4_tiled); q4tp: 4: f32 rungs, 1: ladder codes; q8: 4 */
    int q8;              /* 1: the q8 layout (one scale per row) */
    int split;           /* 1: q4_block / q4_tiled with cols % 32 != 0: stored row R is copy rows 2R and 2R + 1
                            (below); ngroups counts the copy's 2 * full_rows rows */
    size_t gstride;      /* bytes per row group */
    uint8_t *buf;        /* ngroups * gstride bytes, 64-byte aligned (owned, or a slice of arena) */
    const uint8_t *pf_end; /* the decode prefetch may read up to here: the end of the arena (the next matrices of
                              the weight set in forward order) or of the copy */
    struct cmf_rp_arena *arena; /* NULL: buf is this copy's own allocation; else the shared one (repack.c) */
    int refs;            /* registry (repack.c): views holding it, and the fingerprint of the stored bytes */
    uint64_t fp;
    struct cmf_rp *next;
} cmf_rp;
/* Both kernels sum in ONE order, so that a token's outputs have the same bits whether it is decoded alone or inside a
 * batch of any size (batch invariance; tests/kernels/test_fuse.c, tests/model/test_batch_invariance.c). Per output
 * row i and token j, over the blocks b = 0, 1, ... nb-1 in order:
 *   q4 family: acc = fma((float)isum_b, wscale_ib * a.d[j][b], acc) from acc = 0; y = acc
 *   q8:        acc = fma((float)isum_b, a.d[j][b], acc) from acc = 0;            y = acc * rs_i
 * with isum_b the exact int32 dot of v_i and a.q[j] over block b (the int32 order is free: it is exact), then
 * y + bias_i as a separate f32 add (the bias is added by the caller in decode).
 * Decode (n <= KERN_GEMV_T tokens): y[j * ldy + i] = y above for the stored rows 16 * g0 + i, i < nrows (the groups
 * from g0 on; nothing is written past nrows), and tokens j < nt (1..KERN_GEMV_T). The SIMD paths prefetch ahead
 * only up to rp->pf_end.
 * Prefill (n > KERN_GEMV_T): for groups g0 .. g0 + ng - 1 (ng 1 or 2; nr <= 16 * ng rows stored), blocks [b0, b0+kb)
 * and tokens t in [t0, t1), rows i < nr (out and bias point at the group's first row): the chain acc above continued
 * over those blocks from acc = 0 (first) or from out[t * ld_out + i] (a previous call's partial acc, stored raw);
 * when last (b0 + kb == nb) out = y (+ bias[i] when bias), else out = acc. NULL: no repacked path. */
typedef void (*kern_rp_gemv)(const cmf_rp *rp, int64_t g0, int64_t nrows, const cmf_qact *a, int nt, float *y,
                             int64_t ldy);
typedef void (*kern_rp_gemm)(const cmf_rp *rp, int64_t g0, int ng, int nr, int64_t b0, int64_t kb, const cmf_qact *a,
                             int64_t t0, int64_t t1, float *out, int64_t ld_out, const float *bias, int first,
                             int last);
/* The scalar reference of both (repack.c; also the scalar table's entries) and the SIMD ones (rp_avx512.c,
 * rp_avx2.c). */
void cmf_rp_gemv_scalar(const cmf_rp *rp, int64_t g0, int64_t nrows, const cmf_qact *a, int nt, float *y, int64_t ldy);
void cmf_rp_gemm_scalar(const cmf_rp *rp, int64_t g0, int ng, int nr, int64_t b0, int64_t kb, const cmf_qact *a,
                        int64_t t0, int64_t t1, float *out, int64_t ld_out, const float *bias, int first, int last);
void cmf_rp_gemv_avx512(const cmf_rp *rp, int64_t g0, int64_t nrows, const cmf_qact *a, int nt, float *y, int64_t ldy);
void cmf_rp_gemm_avx512(const cmf_rp *rp, int64_t g0, int ng, int nr, int64_t b0, int64_t kb, const cmf_qact *a,
                        int64_t t0, int64_t t1, float *out, int64_t ld_out, const float *bias, int first, int last);
void cmf_rp_gemv_avx2(const cmf_rp *rp, int64_t g0, int64_t nrows, const cmf_qact *a, int nt, float *y, int64_t ldy);
void cmf_rp_gemm_avx2(const cmf_rp *rp, int64_t g0, int ng, int nr, int64_t b0, int64_t kb, const cmf_qact *a,
                      int64_t t0, int64_t t1, float *out, int64_t ld_out, const float *bias, int first, int last);
/* The q4tp layout a new copy gets (repack.c): sbytes 1 (ladder codes) when the active kernel path is AVX-512, else 4
 * (f32 rungs); cmf_rp_set_tp_layout(1 or 4) forces one for copies made after it (tests, bench A/B runs), 0 restores
 * the choice by path. Every path's kernels read both layouts (a copy outlives a path switch). Copies already made are
 * not changed; the registry shares a copy whatever its layout. */
int cmf_rp_tp_layout(void);
void cmf_rp_set_tp_layout(int sbytes);
/* q4tp copy (sbytes 1): the 32-rung ladders of the 16 rows of group gp (a group of rp, nb blocks per row) as
 * L[32][16] f32: L[16c + i] = rung c of row i = t0_i * r_i * ... * r_i (c sequential f32 multiplies, §2.6 step 3),
 * the values the SIMD kernels build lane-wise; the scalar reference and the tests' view of the layout. */
static inline void cmf_rp_tp_ladders(const uint8_t *gp, int64_t nb, float L[512]) {
    float r[16];
    memcpy(L, gp + (size_t)nb * 256, 64);
    memcpy(r, gp + (size_t)nb * 256 + 64, 64);
    for (int c = 1; c < 32; c++)
        for (int i = 0; i < 16; i++) L[16 * c + i] = L[16 * (c - 1) + i] * r[i];
}
/* q4tp copy: the code plane of group gp (byte i * nb + b: row i, block b). */
static inline const uint8_t *cmf_rp_tp_codes(const uint8_t *gp, int64_t nb) {
    return gp + (size_t)nb * 256 + 128;
}

/* The repacked copy a view can use: w->rp when it was made from w's stored tensor (same data, dtype, full_rows,
 * cols) and the view starts on a group boundary of the copy (row0 % 16 == 0; split: row0 % 8 == 0); else NULL (the
 * view is read from the mapping). */
static inline const cmf_rp *cmf_rp_of(const cmf_weight *w) {
    const cmf_rp *rp = w->rp;
    return rp && rp->data == w->data && rp->dtype == w->dtype && rp->full_rows == w->full_rows && rp->cols == w->cols &&
                   (w->row0 << rp->split) % KERN_RP_R == 0
               ? rp
               : NULL;
}

/* Attention primitives over an f32 KV cache (backend_cpu.c, cmf_attn_chunk in ops.c), for G query heads that share
 * one KV head (grouped-query attention), head_dim hd:
 *   attn_qk: s[g*lds + j] = dot(q + g*ldq, k + j*ldk) over hd values, for g < G, j < n;
 *   attn_pv: o[g*ldo + i] += sum over j < n of p[g*ldp + j] * v[j*ldv + i], for g < G, i < hd.
 * Any summation order (each path's own; tests/kernels checks them against the scalar path within 1e-5 relative to
 * the sum of |terms|). A path may leave them NULL: the scalar ones (kern_scalar.c) then run. */
typedef void (*kern_attn_qk)(const float *q, int64_t ldq, int G, const float *k, int64_t ldk, int n, int hd, float *s,
                             int64_t lds);
typedef void (*kern_attn_pv)(const float *p, int64_t ldp, int G, const float *v, int64_t ldv, int n, int hd, float *o,
                             int64_t ldo);
/* The softmax numerator: x[j] = exp(x[j] - m) for j < n (x[j] <= m; arguments below -87 give ~0), returns their sum.
 * The SIMD paths use a Cephes-style polynomial (relative error ~2e-7, checked against expf in tests/kernels). */
typedef float (*kern_exp_sum)(float *x, int n, float m);
/* SiLU in place: x[i] = x[i] / (1 + exp(-x[i])) for i < n, exp as exp_sum's polynomial (arguments clamped to
 * [-87, 88]); within 1e-6 relative of the expf form (tests/kernels/test_fuse.c). cmf_silu (ops.c) calls it. */
typedef void (*kern_silu)(float *x, int64_t n);

typedef struct cmf_kern {
    const char *name;
    kern_decode_i8 decode_i8[CMF_DT_COUNT];
    kern_gemv_i8 gemv_i8[CMF_DT_COUNT]; /* NULL: the dtype takes the tiled path */
    kern_mk_i8 mk_i8;
    kern_decode_f32 decode_f32; /* f16/bf16 (and the generic row decode for anything else) */
    kern_mk_f32 mk_f32;
    kern_gemm_pack_i8 gemm_pack_i8; /* NULL (with gemm_i8): prefill takes the tiled path */
    kern_gemm_i8 gemm_i8;
    kern_gemm_pack_f32 gemm_pack_f32; /* NULL (with gemm_f32): float prefill takes the tiled path */
    kern_gemm_f32 gemm_f32;
    kern_attn_qk attn_qk; /* NULL: the scalar one */
    kern_attn_pv attn_pv;
    kern_exp_sum exp_sum; /* NULL: the scalar one (expf) */
    kern_silu silu;       /* NULL: the scalar one (expf) */
    kern_rp_gemv rp_gemv; /* NULL (with rp_gemm): no repacked path; the load-time repack is then not made */
    kern_rp_gemm rp_gemm;
} cmf_kern;

/* The kernel tables; the SIMD ones are NULL when the compiler cannot build them for this target. */
extern const cmf_kern cmf_kern_scalar;
extern const cmf_kern *const cmf_kern_avx2;
extern const cmf_kern *const cmf_kern_avx512;
extern const cmf_kern *const cmf_kern_neon;

/* The table in use (cpu.c): the best supported path unless changed by cmf_cpu_set_path. */
const cmf_kern *cmf_kern_active(void);

/* Quantizes tokens [t0, t1) of x (token t at x + t*ldx, cols values) into a. When col (f32 [cols]) is not NULL
 * each value is multiplied by col[c] first (q8_2f). levels = 1: token t is slot t (plain Q8_0). levels = 2:
 * token t takes slots 2t (the Q8_0 quantization) and 2t+1 (the Q8_0 quantization of the remainder
 * x - d*q), so x = d0*q0 + d1*q1 + e with |e| <= d1/2, about 1/254 of the one-level error; a dot product is then
 * the sum of the two slots' dot products. (A second level on the fixed grid d1 = d0/256, which would let a kernel
 * sum 256*isum0 + isum1 in int32, was tried: it put gemma2's q8 logits 3.2e-3 x max|logit| off its dequantized
 * twin over 100 tokens.) cmf_matmul uses cmf_cpu_act_levels() (ops.h: 1 by default, 2 with
 * CMF_ACT_LEVELS=2 or cmf_cpu_set_act_levels). a must hold t1*levels slots. Shared by every path, so all paths see the
 * same int8 activations. */
void cmf_qact_quantize(cmf_qact *a, const float *x, int64_t ldx, int64_t cols, const float *col, int levels,
                       int64_t t0, int64_t t1);
/* Bytes of the arrays of a cmf_qact for n tokens of cols values (each array 64-byte aligned), and the carving of
 * a buffer of that size into a. */
size_t cmf_qact_bytes(int64_t n, int64_t cols);
void cmf_qact_init(cmf_qact *a, void *buf, int64_t n, int64_t cols);

/* Shared helpers of the decoders (ops.c). f16 decode through a 64K-entry table (filled by cmf_weight_view). */
extern float cmf_f16_table[65536];
static inline uint16_t cmf_rd16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }
/* q4tp/q2tp geometry of a view: gpr = cols/32, the params/codes planes and the per-row code stride. */
typedef struct kern_tp {
    int64_t gpr, stride;
    const uint8_t *params, *codes;
} kern_tp;
void cmf_kern_tp(const cmf_weight *w, kern_tp *tp);
/* The 32-rung scale ladder of stored row R (§2.6: t[0] = exp2f(lo), t[c] = t[c-1] * exp2f(step)). */
void cmf_kern_ladder(const cmf_weight *w, const kern_tp *tp, int64_t R, float t[32]);
/* The 5-bit code of tile g of stored row R (§2.6). */
static inline unsigned cmf_kern_code(const kern_tp *tp, int64_t R, int64_t g) {
    const uint8_t *c = tp->codes + R * tp->stride;
    const int64_t bit = 5 * g, byte = bit / 8;
    const unsigned sh = (unsigned)(bit % 8);
    unsigned v = c[byte];
    if (sh > 3) v |= (unsigned)c[byte + 1] << 8;
    return (v >> sh) & 31u;
}

/* Scalar decoders reused by the SIMD paths for per-block scales (kern_scalar.c): ws[b] for blocks [b0, b0+kb). */
void cmf_kern_scales(const cmf_weight *w, int64_t r, int64_t b0, int64_t kb, float *ws);

#endif
