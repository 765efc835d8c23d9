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

/* Decodes a whole tensor payload to n = prod(shape) floats in `out` (row-major). Supported: f32, f16, bf16,
 * q8_row, q8_2f (and, once implemented, the 4-bit family). Errors: CMF_E_UNSUPPORTED for dtypes without a
 * decoder, CMF_E_FORMAT when nbytes or the shape do not fit the dtype. */
cmf_status cmf_dequant(int dtype, int ndim, const uint32_t *shape, const uint8_t *data, uint64_t nbytes,
                       float *out);

/* Encodes rows x cols floats (row-major) as `dtype`, writing exactly cmf_dtype_nbytes bytes to `dst`
 * (allocated by the caller). 1-D tensors are rows = 1. The encoders follow cortiq bit for bit (§2.2–2.3):
 * scale rounded to f16 and floored before quantizing, round-half-even, q8_2f column RMS in f64 blocks of 256 rows.
 * Errors: CMF_E_UNSUPPORTED for a dtype without an encoder. */
cmf_status cmf_quantize(int dtype, uint64_t rows, uint64_t cols, const float *src, uint8_t *dst);

#endif
