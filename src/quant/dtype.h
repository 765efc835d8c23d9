/* dtype.h — the one table of CMF weight dtypes (CMF_FORMAT.md §2): ids, names, payload sizes, f16/bf16
 * conversion, whole-tensor decode to f32 and the reference encoders. Kernels (backend/) read these layouts
 * directly; this file is the reference they are tested against. */
#ifndef CMF_QUANT_DTYPE_H
#define CMF_QUANT_DTYPE_H

#include <stddef.h>
#include <stdint.h>

#include "cmf.h"

enum cmf_dtype {
    CMF_DT_F32 = 0,
    CMF_DT_F16 = 1,
    CMF_DT_BF16 = 2,
    CMF_DT_Q8_ROW = 3,
    CMF_DT_Q4_BLOCK = 4,
    CMF_DT_MIX8_4 = 5, /* reserved: accepted at open, not decodable */
    CMF_DT_U8 = 6,     /* raw bytes */
    CMF_DT_Q4_COL = 7, /* reserved */
    CMF_DT_VBIT = 8,
    CMF_DT_Q8_2F = 9,
    CMF_DT_VBIT_RO = 10,
    CMF_DT_Q4_TILED = 11,
    CMF_DT_Q1 = 12,
    CMF_DT_Q1S = 13,
    CMF_DT_Q1T = 14,
    CMF_DT_Q4TP = 15,
    CMF_DT_Q2TP = 16,
    CMF_DT_COUNT = 17,
};

#define CMF_F16_TINY 6.1035156e-5f /* smallest normal f16: the floor of every stored scale (§2.13) */

/* Spec name ("f32", "q8_row", ...), or NULL for an id >= CMF_DT_COUNT. */
const char *cmf_dtype_name(int dtype);

/* Parses a --quant style name ("f32", "f16", "bf16", "q8", "q8_row", "q8_2f", ...); -1 if unknown. */
int cmf_dtype_from_name(const char *name);

/* Expected payload size of a tensor (§2.0 table). Returns 1 and sets *nbytes for fixed-size dtypes, 0 when the
 * size is variable or not checked at open (vbit*, q1s, q1t, reserved ids, q4tp/q2tp with ndim != 2), and -1 on
 * arithmetic overflow. */
int cmf_dtype_nbytes(int dtype, int ndim, const uint32_t *shape, uint64_t *nbytes);

/* IEEE binary16 <-> f32: exact decode incl. subnormals; encode round-to-nearest-even, overflow -> inf,
 * subnormals produced (§2.13). */
float cmf_f16_to_f32(uint16_t h);
uint16_t cmf_f32_to_f16(float f);
/* bf16: upper half of an f32. Encode rounds to nearest even (NaN kept quiet). */
float cmf_bf16_to_f32(uint16_t h);
uint16_t cmf_f32_to_bf16(float f);
/* Round-trip through f16 (the scale rounding of §2.2). */
float cmf_f16_round(float f);
/* The stored-scale rule of §2.13: cmf_f16_round(x) floored at CMF_F16_TINY (so 0 and anything below the smallest
 * normal f16 give CMF_F16_TINY; 65520 and up give inf; NaN stays NaN), computed with integer operations only (the
 * encoders call it for every candidate scale). Same bits as max(cmf_f16_round(x), CMF_F16_TINY) for every x >= 0 and
 * NaN (tests/quant3/test_q4_search sweeps the f32 bit patterns). */
float cmf_f16_scale(float x);

/* Decodes a whole tensor payload to n = prod(shape) floats in `out` (row-major, caller-allocated). Supported:
 * f32, f16, bf16 (§2.1), q8_row (§2.2, 2-D), q8_2f (§2.3, 2-D; w = (q*row_scale)*col in f32, as the reference
 * Python reader), q4_block (§2.4), q4_tiled (§2.5), q4tp / q2tp (§2.6–2.7, 2-D, ladder.h), q1 (§2.10), q1s / q1t
 * (§2.11–2.12, strict lengths), vbit (§2.8), vbit_ro (§2.9).
 * Errors: CMF_E_UNSUPPORTED for dtypes without a decoder (mix8_4, u8, q4_col, unknown),
 * CMF_E_FORMAT when nbytes or the shape do not fit the dtype (message names the expected size). */
cmf_status cmf_dequant(int dtype, int ndim, const uint32_t *shape, const uint8_t *data, uint64_t nbytes,
                       float *out);

/* Validates the payload of a variable-size dtype whose layout is checkable at open (§1.11.10): vbit (§2.8:
 * 2-D, cols a positive multiple of 32, every row width in {3,4,5,6,8}, nbytes == rows + 2*rows*ng +
 * sum ceil(cols*b/8)) and vbit_ro (§2.9: the same plus the u32 row_off table: row_off[0] == 0, each step ==
 * ceil(cols*b/8), packed_off + row_off[rows] == nbytes). `data` holds nbytes readable bytes. Other dtypes:
 * CMF_OK (nothing to check). Errors: CMF_E_FORMAT with a message naming the byte offset inside the payload
 * (the caller prefixes the tensor name). */
cmf_status cmf_dtype_check_payload(int dtype, int ndim, const uint32_t *shape, const uint8_t *data,
                                   uint64_t nbytes);

/* Encodes rows x cols floats (row-major) as `dtype`, writing exactly cmf_dtype_nbytes bytes to `dst` (allocated by the
 * caller). 1-D tensors are rows = 1. The encoders follow cortiq bit for bit (§2.2–2.4; 4-bit: see below): scale
 * rounded to f16 and floored before quantizing, round-half-even, q8_2f column RMS in f64 blocks of 256 rows.
 * Supported: f32, f16, bf16, q8_row, q8_2f, q4_block, q4_tiled (size rows*cols + 2*rows [+ 2*cols] for the q8 pair,
 * 18*ceil(rows*cols/32) for the q4 pair; note that a file's q8 shape must be 2-D for its size to match), q4tp and q2tp
 * (§2.6–2.7, cols % 32 == 0; see cmf_quantize_tp in ladder.h; the code search follows the CMF_Q2TP_SEARCH environment
 * variable). The 4-bit encoders choose scales by squared error by default (cmf_q4_search_enabled; CMF_Q4_SEARCH=0
 * gives cortiq's bytes exactly), same format: q4_block/q4_tiled pick each group's scale by cmf_q4_search_scale
 * (negative scales included, so both signs of the extreme value reach the -8 level as in llama.cpp's Q4_0), q4tp fits
 * its row ladder to the tiles' cmf_q4_search_scale (positive) instead of absmax/7. q2tp is not affected. Measured on
 * stories260K in bench/RESULTS.md (perplexity below llama.cpp's Q4_0 for all three; cortiq's rule is 2-6% above). The
 * 4-bit encoders run on cmf_qpar_threads() threads (quant/qpar.h); the bytes do not depend on the count. Errors:
 * CMF_E_UNSUPPORTED for a dtype without an encoder; CMF_E_ARG for a non-finite input to a quantized dtype (the message
 * names the element), a stored scale that rounds past the f16 range (q8 row absmax > ~8.3e6, q4 group absmax > ~4.6e5,
 * a q8_2f column RMS > 65504: the message names the row / group / column) or a size that overflows. */
cmf_status cmf_quantize(int dtype, uint64_t rows, uint64_t cols, const float *src, uint8_t *dst);

/* The searched scale (the default; CMF_Q4_SEARCH=0 turns it off) of one group of 32 values v with absmax amax (an
 * encoder-quality choice, not in the format): among s = f16_scale(amax / k) for k = 7 (cortiq's §2.4 rule, tried
 * first), then k = 6, 6.0625, ..., 9, each with the + sign and, when `negative`, the - sign, the one with the least
 * squared error of clamp(round-half-even(v / s), -8, 7) * s (the first minimum wins). A negative scale maps the -8
 * level onto the largest positive value (llama.cpp's Q4_0 rule d = m / -8 is the candidate k = 8 with the sign of -m,
 * ggml-quants.c quantize_row_q4_0_ref); k < 7 rounds the extreme to +-7 with finer steps below it. amax == 0 gives the
 * floor scale. */
float cmf_q4_search_scale(const float v[32], float amax, int negative);

/* The CMF_Q4_SEARCH switch: 1 unless the environment variable is "0", "off", "false" or "no" (any case; then the
 * 4-bit encoders are bit-exact with cortiq's converter, §2.4-2.6). Read on every call. */
int cmf_q4_search_enabled(void);

#endif
