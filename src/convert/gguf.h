/* gguf.h — a validating, read-only reader of GGUF v2/v3 files (ggml's container: ggml/docs/gguf.md).
 *
 * Layout: "GGUF" magic, u32 version, u64 tensor_count, u64 kv_count; kv_count metadata pairs (string key, u32 value
 * type, value); tensor_count tensor infos (string name, u32 n_dims, u64 ne[n_dims] innermost first, u32 ggml type,
 * u64 offset); padding to general.alignment (default 32); the data section. Strings are u64 length + bytes (no NUL).
 * Every length, count and offset is checked against the file size before use: a corrupt file is an error. */
#ifndef CMF_CONVERT_GGUF_H
#define CMF_CONVERT_GGUF_H

#include <stddef.h>
#include <stdint.h>

#include "cmf.h"
#include "util/fileio.h"

/* Metadata value types (gguf.md "gguf_metadata_value_type"). */
enum cmf_gguf_vtype {
    CMF_GGUF_U8 = 0, CMF_GGUF_I8 = 1, CMF_GGUF_U16 = 2, CMF_GGUF_I16 = 3, CMF_GGUF_U32 = 4, CMF_GGUF_I32 = 5,
    CMF_GGUF_F32 = 6, CMF_GGUF_BOOL = 7, CMF_GGUF_STRING = 8, CMF_GGUF_ARRAY = 9, CMF_GGUF_U64 = 10,
    CMF_GGUF_I64 = 11, CMF_GGUF_F64 = 12,
};

/* ggml tensor types the converter reads (others are sized for validation only). Q4_0 and Q8_0 are blocks of 32
 * elements along ne[0]: Q4_0 = f16 d + 16 bytes qs (element j < 16 in the low nibble of qs[j], j >= 16 in the high
 * nibble of qs[j-16], value (q - 8)·d); Q8_0 = f16 d + 32 int8 q (value q·d). Source: ggml-common.h block_q4_0 /
 * block_q8_0 and ggml-quants.c dequantize_row_q4_0 / dequantize_row_q8_0. */
enum {
    CMF_GGML_F32 = 0, CMF_GGML_F16 = 1, CMF_GGML_Q4_0 = 2, CMF_GGML_Q4_1 = 3, CMF_GGML_Q5_0 = 6, CMF_GGML_Q5_1 = 7,
    CMF_GGML_Q8_0 = 8, CMF_GGML_Q2_K = 10, CMF_GGML_Q3_K = 11, CMF_GGML_Q4_K = 12, CMF_GGML_Q5_K = 13,
    CMF_GGML_Q6_K = 14, CMF_GGML_Q8_K = 15, CMF_GGML_IQ4_NL = 20, CMF_GGML_IQ4_XS = 23, CMF_GGML_BF16 = 30
};

/* A string inside the mapping: not NUL-terminated. */
typedef struct cmf_gguf_str {
    const char *p;
    uint64_t len;
} cmf_gguf_str;

typedef struct cmf_gguf_kv {
    char *key;    /* NUL-terminated copy */
    int type;     /* enum cmf_gguf_vtype */
    union {
        uint64_t u; /* unsigned integer types and bool */
        int64_t i;  /* signed integer types */
        double f;   /* f32/f64 */
    } v;
    cmf_gguf_str str;        /* CMF_GGUF_STRING */
    int arr_type;            /* CMF_GGUF_ARRAY: element type */
    uint64_t arr_n;          /* element count */
    const uint8_t *arr_data; /* first element in the mapping (numeric arrays: packed little-endian) */
    cmf_gguf_str *arr_strs;  /* string arrays: arr_n strings (malloc'd index into the mapping) */
} cmf_gguf_kv;

typedef struct cmf_gguf_tensor {
    char *name;          /* NUL-terminated copy */
    int ndim;            /* 1..4 */
    uint64_t ne[4];      /* ggml order: ne[0] is the innermost (contiguous) dimension */
    int type;            /* ggml type id */
    uint64_t offset;     /* relative to the data section, a multiple of the alignment */
    uint64_t nbytes;     /* from type and ne */
    const uint8_t *data; /* into the mapping */
} cmf_gguf_tensor;

typedef struct cmf_gguf {
    char *path;
    cmf_mmap map;
    uint32_t version;
    uint64_t alignment;
    size_t n_kv;
    cmf_gguf_kv *kv;
    size_t n_tensors;
    cmf_gguf_tensor *tensors;
    const uint8_t *data; /* data section */
    uint64_t data_len;
} cmf_gguf;

/* Maps and validates a GGUF v2/v3 file: magic, version, every string/array length, unique keys, unique tensor
 * names, n_dims 1..4, known ggml types, offsets aligned and offset + nbytes inside the data section.
 * Errors: CMF_E_IO, CMF_E_FORMAT (message names the file offset, key or tensor), CMF_E_UNSUPPORTED (version 1 or
 * > 3, unknown ggml type). Free with cmf_gguf_close. */
cmf_status cmf_gguf_open(const char *path, cmf_gguf **out);
void cmf_gguf_close(cmf_gguf *g);

/* Metadata lookup by exact key; NULL when absent. */
const cmf_gguf_kv *cmf_gguf_kv_find(const cmf_gguf *g, const char *key);

/* Scalar getters: return 1 and set *out when `key` exists with a compatible type (any integer type or bool for
 * get_int; any integer or float type for get_float), else 0. */
int cmf_gguf_get_int(const cmf_gguf *g, const char *key, int64_t *out);
int cmf_gguf_get_float(const cmf_gguf *g, const char *key, double *out);

/* A malloc'd NUL-terminated copy of a string value; NULL when absent, not a string, or out of memory. */
char *cmf_gguf_get_str(const cmf_gguf *g, const char *key);

/* Element i (< arr_n) of a numeric array as a double (integers converted exactly up to 2^53). 0 for non-numeric. */
double cmf_gguf_arr_num(const cmf_gguf_kv *kv, uint64_t i);

/* Tensor lookup by exact name; NULL when absent. */
const cmf_gguf_tensor *cmf_gguf_tensor_find(const cmf_gguf *g, const char *name);

/* Element count (product of ne). */
uint64_t cmf_gguf_numel(const cmf_gguf_tensor *t);

/* 1 when cmf_gguf_tensor_f32 decodes ggml type `type`: F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K,
 * Q4_K, Q5_K, Q6_K, Q8_K, IQ4_NL, IQ4_XS (not the other IQ*, the TQ* and the integer types). */
int cmf_gguf_type_decodable(int type);

/* ggml's name of a type id ("Q4_K", "IQ2_XS", ...); "?" for an id this reader does not know. */
const char *cmf_gguf_type_name(int type);

/* Decodes a tensor of a decodable type (above) into numel floats (ggml memory order, i.e. row-major [ne1][ne0]);
 * quantized blocks decode exactly as ggml's dequantize_row_<type> (ggml-quants.c; the block types in
 * gguf_kquant.c). Errors: CMF_E_UNSUPPORTED for other types (message names the tensor and its type). */
cmf_status cmf_gguf_tensor_f32(const cmf_gguf_tensor *t, float *out);

/* Decodes n elements (a multiple of the type's block: 32 for Q4_1/Q5_0/Q5_1/IQ4_NL, 256 for the K-quants and
 * IQ4_XS) of ggml type Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, Q8_K, IQ4_NL or IQ4_XS from `src` (n / block blocks, ggml's byte layout) into
 * out[n], bit-identical to ggml-quants.c's dequantize_row_<type> (layouts and formulas: gguf_kquant.c). Returns 1,
 * or 0 (nothing written) for any other type. `src` must hold the blocks: the caller checks sizes (the reader
 * does at open). */
int cmf_gguf_dequant_blocks(int type, const uint8_t *src, uint64_t n, float *out);

/* Repacks a Q4_0 tensor losslessly into the CMF q4_tiled payload (CMF_FORMAT.md §2.5): one 18-byte tile per
 * 32-element block, [f16 scale = the block's d, bit for bit][16 bytes: element 2k in the low nibble of byte k,
 * 2k+1 in the high nibble]. Blocks run along ne[0], so with ne[0] % 32 == 0 (checked at open) tile g of the
 * flattened tensor is block g of the GGUF and every decoded value (q - 8)·d is identical. `dst` receives
 * t->nbytes bytes (the two layouts have the same size). Errors: CMF_E_ARG when t is not Q4_0; CMF_E_FORMAT (naming
 * the first block) when a block's scale is NaN or inf, as the decoded path refuses NaN/inf for a quantized target. */
cmf_status cmf_gguf_q4_0_to_q4_tiled(const cmf_gguf_tensor *t, uint8_t *dst);

/* Builds the Hugging Face tokenizer.json equivalent to the tokenizer embedded in an opened GGUF (tokenizer.ggml.*);
 * see cmf_gguf_tokenizer_json in convert/convert.h for the mapping. *json is malloc'd and NUL-terminated.
 * Errors: CMF_E_FORMAT (missing/mis-sized arrays, ids out of range), CMF_E_UNSUPPORTED (other tokenizer models). */
cmf_status cmf_gguf_build_tokenizer(const cmf_gguf *g, char **json, size_t *len);

#endif
