/* ops.h — CPU kernels the model is written against: matrix products over weights stored in any CMF dtype
 * (read in place from the mapping), and the small elementwise blocks (RMSNorm, RoPE, softmax, activations).
 * Math sources: RMSNorm (Zhang & Sennrich 2019), RoPE (Su et al. 2021, RoFormer), SwiGLU/GeGLU (Shazeer 2020);
 * the per-dtype layouts are CMF_FORMAT.md §2. */
#ifndef CMF_CPU_OPS_H
#define CMF_CPU_OPS_H

#include <stdint.h>

#include "backend/cpu/threadpool.h"
#include "cmf.h"
#include "format/format.h"

/* A 2-D weight [rows = out_features, cols = in_features] in a CMF dtype, pointing into the mapping.
 * `row0` selects a row range of a fused tensor (e.g. the k rows of Phi-3's qkv_proj): rows row0..row0+rows-1. */
typedef struct cmf_weight {
    int dtype;
    int64_t rows, cols;    /* of this view */
    int64_t full_rows;     /* rows of the whole stored tensor (for dtypes with trailing per-column data) */
    int64_t row0;          /* first stored row of the view */
    const uint8_t *data;   /* start of the whole stored payload */
} cmf_weight;

/* Makes a view of a 2-D tensor. Errors: CMF_E_FORMAT when the tensor is not 2-D, CMF_E_UNSUPPORTED when its dtype
 * has no CPU kernel (the message names the tensor and dtype). */
cmf_status cmf_weight_view(const cmf_tensor *t, cmf_weight *w);

/* The sub-view of rows [r0, r0+n) of `w`. */
cmf_weight cmf_weight_rows(const cmf_weight *w, int64_t r0, int64_t n);

/* Decodes row r of the view to cols floats. */
void cmf_weight_row_f32(const cmf_weight *w, int64_t r, float *out);

/* out[t][r] = sum_c x[t][c] * W[r][c] (+ bias[r] when bias != NULL) for t < n, r < rows: the linear layer
 * y = x W^T of PyTorch. x is [n][cols], out is [n][rows] with row stride ld_out (>= rows). f32 accumulation.
 * Rows are split across the pool's threads; each weight row is decoded once and used for all n tokens. */
void cmf_matmul(cmf_pool *pool, float *out, int64_t ld_out, const float *x, int64_t n, const cmf_weight *w,
                const float *bias);

/* RMSNorm of one vector: out = x / sqrt(mean(x^2) + eps) * (w or 1 + w when gemma_style). w may be NULL (no
 * weight). The mean is accumulated in double. out may alias x. */
void cmf_rmsnorm(float *out, const float *x, const float *w, int64_t n, float eps, int gemma_style);

/* Softmax in place over n values (max-subtracted, f32). */
void cmf_softmax(float *x, int64_t n);

/* Activations, in place over n values: SiLU x*sigmoid(x); GELU tanh approximation
 * 0.5x(1+tanh(sqrt(2/pi)(x+0.044715x^3))). */
void cmf_silu(float *x, int64_t n);
void cmf_gelu_tanh(float *x, int64_t n);

#endif
