/* ladder.h — the "tiled predicted" dtypes q4tp (id 15) and q2tp (id 16), CMF_FORMAT.md §2.6–2.7: the per-row
 * geometric scale ladder, the 5-bit rung codes, whole-tensor decode and the cortiq-compatible encoders; plus the
 * strict decoders of q1s / q1t (§2.11–2.12). Kernels (backend/) build each row's ladder with cmf_q4tp_ladder /
 * cmf_q2tp_ladder so that they land on the same f32 bits as this reference decoder. */
#ifndef CMF_QUANT_LADDER_H
#define CMF_QUANT_LADDER_H

#include <stdint.h>

#include "cmf.h"

#define CMF_TP_GROUP 32 /* weights per tile */
#define CMF_Q4TP_NIB 16 /* nibble bytes per q4tp tile */
#define CMF_Q2TP_CHUNK 8 /* 2-bit chunk bytes per q2tp group */

/* exp2f(x) correctly rounded to nearest (ties to even), computed without libm, so the same bits on every platform
 * (§7.14). NaN in -> NaN, x >= 128 -> +inf, x < -151 -> +0, subnormal results rounded correctly. */
float cmf_exp2f(float x);
/* The same function through the slow double-double path only (for tests of the fast path's midpoint test). */
float cmf_exp2f_dd(float x);

/* Byte offsets of a q4tp (q2 = 0) or q2tp (q2 = 1) payload of rows x cols (cols % 32 == 0), §2.6/§2.7:
 * weight plane at 0, params (rows x {f16 lo, f16 step}) at *params_off, codes (rows x stride) at *codes_off,
 * stride = ceil(5*gpr/8). Returns the total size. Sizes are not overflow-checked (callers check with
 * cmf_dtype_nbytes first). */
uint64_t cmf_tp_layout(int q2, uint64_t rows, uint64_t cols, uint64_t *params_off, uint64_t *codes_off,
                       uint64_t *stride);

/* Row ladder (§2.6): lo, step = the f16 pair at params[0..3] (little-endian); t[0] = cmf_exp2f(lo),
 * ratio = cmf_exp2f(step), t[c] = t[c-1]*ratio in f32 for c = 1..31. */
void cmf_q4tp_ladder(const uint8_t *params, float t[32]);
/* q2tp ladder (§2.7): t[0] = +0.0 exactly, t[c] = q4tp_t[c-1] for c = 1..31. */
void cmf_q2tp_ladder(const uint8_t *params, float t[32]);

/* 5-bit code of tile g of one row's code bytes (§2.6): bit 5g LSB-first; the next byte is read only when the
 * field crosses it (shift > 3), which the stride always allows. */
unsigned cmf_tp_code(const uint8_t *codes, uint64_t g);

/* Whole-tensor decode of q4tp / q2tp (dtype CMF_DT_Q4TP or CMF_DT_Q2TP) to rows*cols floats.
 * w = (nibble - 8) * t[code] (q4tp) or (c - 1.5) * t[code] (q2tp, 2-bit fields LSB-first). Errors: CMF_E_FORMAT when
 * the shape is not 2-D with cols % 32 == 0 or nbytes differs from the §2.0 size (the message gives both). */
cmf_status cmf_dequant_tp(int dtype, int ndim, const uint32_t *shape, const uint8_t *data, uint64_t nbytes,
                          float *out);

/* Encodes rows x cols floats (cols % 32 == 0, finite) as q4tp or q2tp exactly as cortiq's converter does
 * (crates/cortiq-cli/src/convert.rs encode_q4tp/encode_q2tp, §2.6–2.7): tile lg = log2(f16 scale of absmax/7
 * (q4tp) or absmax/1.5 (q2tp)), all-zero tiles dead, lo/step rounded to f16 before codes are chosen, step raised
 * by ULPs until the top rung (31 for q4tp, 30 above rung 1 for q2tp) covers the row, q2tp tries ladder tops
 * {1.0,0.9,0.8,0.7}·(hi-lo); codes searched around the nominal rung when `search` (the CMF_Q2TP_SEARCH switch);
 * weights quantized as round-half-even(w * (1/s)) (cortiq multiplies by the reciprocal). Writes exactly
 * cmf_tp_layout bytes to dst. Errors: CMF_E_ARG for cols % 32 != 0, a non-finite input, or a tile whose scale
 * overflows f16 (absmax above about 458000 for q4tp / 98000 for q2tp); messages name the element / row. */
cmf_status cmf_quantize_tp(int dtype, uint64_t rows, uint64_t cols, const float *src, uint8_t *dst, int search);

/* The CMF_Q2TP_SEARCH switch (§2.6 step 6): 1 unless the variable is set to exactly "0". Read on every call. */
int cmf_tp_search_enabled(void);

/* Strict decoders of the overlay dtypes. q1s (§2.11): q1 base (6*ceil(n/32) bytes) + u32 count + count x
 * {u32 flat index, f16 value}; nbytes must equal that size exactly and every index be < n. q1t (§2.12, 2-D only):
 * ceil(n/32) 9-byte ternary tiles + u32 row_ptr[rows+1] + {u16 col, f16 value} entries; row_ptr[0] == 0,
 * non-decreasing, the entries must end exactly at nbytes and every col < cols. Errors: CMF_E_FORMAT naming the
 * payload byte offset (a truncated overlay is an error, not silently tolerated as in the reference decoder). */
cmf_status cmf_dequant_q1s(int ndim, const uint32_t *shape, const uint8_t *data, uint64_t nbytes, float *out);
cmf_status cmf_dequant_q1t(int ndim, const uint32_t *shape, const uint8_t *data, uint64_t nbytes, float *out);

#endif
