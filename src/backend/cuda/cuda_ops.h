/* cuda_ops.h — the CUDA kernel library (C API): device memory, matrix products over weights stored in CMF
 * layouts (read in place, CMF_FORMAT.md §2), prefill GEMM, RMSNorm, RoPE, attention (flash-decoding and causal
 * prefill), activations, softmax and on-device sampling. Design notes: src/backend/cuda/README.md.
 *
 * Conventions for every function below:
 *  - Pointers named d_* are device pointers (cmf_cuda_malloc); everything else is host memory.
 *  - `stream` is a cudaStream_t passed as void* (NULL = the legacy default stream). Kernels are launched
 *    asynchronously on it; outputs are valid after cmf_cuda_sync(stream) or any later work on the same stream.
 *  - Activations are f32, row-major: x[t][c] for token t, column c.
 *  - Errors: CMF_E_ARG for bad shapes / unsupported parameter combinations (the message names the argument),
 *    CMF_E_UNSUPPORTED for a dtype without a kernel, CMF_E_IO for a CUDA / cuBLAS failure (the message gives the
 *    CUDA error string and the operation). Launch errors are checked right after every launch (asynchronous
 *    faults surface at the next cmf_cuda_sync). Nothing prints, nothing exits.
 * Available only when the build defines CMF_HAVE_CUDA (CMake option CMF_CUDA). */
#ifndef CMF_BACKEND_CUDA_OPS_H
#define CMF_BACKEND_CUDA_OPS_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "cmf.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef void *cmf_cuda_stream; /* a cudaStream_t */

/* ---- device and memory ------------------------------------------------------------------------------------ */

/* Number of usable CUDA devices in *n (0 when there is no driver or no GPU: that is not an error here, and
 * the message of cmf_last_error() then says why, e.g. "cuda: no device: CUDA driver version is insufficient").
 * Returns CMF_OK always unless n is NULL (CMF_E_ARG). */
cmf_status cmf_cuda_device_count(int *n);
/* One line describing device `dev` ("NVIDIA H200, cc 9.0, 132 SMs, 139.8 GiB, L2 60 MiB") into buf.
 * Errors: CMF_E_IO from the CUDA runtime. */
cmf_status cmf_cuda_device_info(int dev, char *buf, size_t len);

/* Device allocation of `bytes` (cudaMalloc; 256-byte aligned) / free (NULL is fine). Errors: CMF_E_NOMEM. */
cmf_status cmf_cuda_malloc(void **d_ptr, size_t bytes);
void cmf_cuda_free(void *d_ptr);
/* Copies host -> device, device -> host, device -> device (asynchronous on `stream`; host memory need not be
 * pinned, then the copy is synchronous with respect to the host). Errors: CMF_E_IO. */
cmf_status cmf_cuda_upload(void *d_dst, const void *src, size_t bytes, cmf_cuda_stream stream);
cmf_status cmf_cuda_download(void *dst, const void *d_src, size_t bytes, cmf_cuda_stream stream);
cmf_status cmf_cuda_copy(void *d_dst, const void *d_src, size_t bytes, cmf_cuda_stream stream);
/* Sets `bytes` bytes to the byte value `v`. Errors: CMF_E_IO. */
cmf_status cmf_cuda_memset(void *d_dst, int v, size_t bytes, cmf_cuda_stream stream);
/* Waits for all work on `stream`; reports an asynchronous kernel fault. Errors: CMF_E_IO. */
cmf_status cmf_cuda_sync(cmf_cuda_stream stream);
/* Stream creation / destruction (non-blocking stream). Errors: CMF_E_IO. */
cmf_status cmf_cuda_stream_create(cmf_cuda_stream *stream);
void cmf_cuda_stream_destroy(cmf_cuda_stream stream);

/* ---- weights --------------------------------------------------------------------------------------------- */

/* A 2-D weight [rows = out_features][cols = in_features] whose payload (exactly the bytes of the CMF tensor,
 * CMF_FORMAT.md §2) sits in device memory at d_data. Supported dtypes (enum cmf_dtype in quant/dtype.h):
 * f32, f16, bf16, q8_row, q8_2f (any cols), q4_tiled (cols % 32 == 0), q4tp (cols % 32 == 0). The payload must
 * be at least 16-byte aligned (cmf_cuda_malloc gives 256). */
typedef struct cmf_cuda_weight {
    int dtype;
    int64_t rows, cols;
    const void *d_data;
} cmf_cuda_weight;

/* Checks that dtype / shape are supported by the kernels (the message names the dtype and the shape rule).
 * Errors: CMF_E_UNSUPPORTED (dtype), CMF_E_ARG (shape, NULL data). */
cmf_status cmf_cuda_weight_check(const cmf_cuda_weight *w);

/* Output element types of cmf_cuda_dequant. */
enum cmf_cuda_type { CMF_CUDA_F32 = 0, CMF_CUDA_F16 = 1, CMF_CUDA_BF16 = 2 };

/* Decodes rows [row0, row0 + nrows) of `w` into d_out ([nrows][cols], type `out_type`). The f32 output is bit for
 * bit the value of cmf_dequant (src/quant/dequant.c): the same f32 products in the same order, q4tp ladders
 * through a correctly rounded exp2f (§2.6). f16 / bf16 outputs are that value rounded to nearest even.
 * Errors: those of cmf_cuda_weight_check, CMF_E_ARG for a row range outside the tensor, CMF_E_IO. */
cmf_status cmf_cuda_dequant(const cmf_cuda_weight *w, int64_t row0, int64_t nrows, void *d_out, int out_type,
                            cmf_cuda_stream stream);

/* Embedding lookup with device token ids: d_out[t][c] = W[d_ids[t]][c] * mult for t < n (the f32 values of
 * cmf_cuda_dequant; mult == 1 leaves them exact). Ids must lie in [0, rows) (the caller checks them on the host
 * before the upload). One launch for the n rows. Errors: cmf_cuda_weight_check's, CMF_E_ARG, CMF_E_IO. */
cmf_status cmf_cuda_embed(const cmf_cuda_weight *w, const int32_t *d_ids, int64_t n, float mult, float *d_out,
                          cmf_cuda_stream stream);

/* d_out[i] = exp2f(d_in[i]) correctly rounded to nearest-even (the device twin of cmf_exp2f, src/quant/exp2f.c),
 * for i < n. Exposed so that tests can prove the q4tp ladder bit-exact. Errors: CMF_E_IO. */
cmf_status cmf_cuda_exp2f(const float *d_in, float *d_out, int64_t n, cmf_cuda_stream stream);

/* Small-batch product (decode): d_y[t][r] = sum_c d_x[t][c] * W[r][c] for t < n (1 <= n <= 8), r < rows;
 * d_x is [n][cols] f32, d_y is [n][rows] f32 (fully overwritten). The weight is read once, in place, with
 * 16-byte loads where the layout allows, several rows per warp, f32 accumulation. Sums are in a different order
 * than the CPU's: compare with a relative tolerance. Errors: cmf_cuda_weight_check's, CMF_E_ARG (n), CMF_E_IO. */
cmf_status cmf_cuda_matvec(const cmf_cuda_weight *w, const float *d_x, float *d_y, int n, cmf_cuda_stream stream);

/* Int8 activations for the decode products of q8_row and q4tp weights (cmf_cuda_matvec, _multi, _glu; not
 * _add_rmsnorm, which keeps f32): each launch quantizes d_x per block of 32 columns (Q8_0: scale absmax / 127,
 * round half away from zero, as the CPU's one-level path; with 2 levels also the remainder x - d q, as the CPU's
 * CMF_ACT_LEVELS=2) and sums exact int8 products (dp4a), so the result carries that activation rounding (one level:
 * ~1e-2 relative per product, like the CPU's default kernels; two levels: ~100x less) instead of f32 accumulation
 * of f32 activations. Levels: 1 by default; CMF_CUDA_I8ACT=0 / 1 / 2 in the environment (read at the first call)
 * or cmf_cuda_set_i8act(levels) select the f32-activation kernels / one / two levels (process-wide; for tests and
 * accuracy checks; not while products are captured into a CUDA graph: cached graphs keep the kernels they were
 * captured with). cmf_cuda_i8act_on returns the levels (0 = f32 activations). */
int cmf_cuda_i8act_on(void);
void cmf_cuda_set_i8act(int levels);
/* Which kernel runs those int8-activation products (matvec_i8s.cu): -1 (default) by the shape: the streaming
 * kernel for rows of >= 2048 columns (q8_row: in launches of >= 2048 output rows, a q/k/v group's rows counted
 * together), the row-group kernel of matvec_i8.cu below (mv_i8_stream_pick); 0 always the row-group kernel; 1 always the streaming kernel (each warp of a persistent grid streams whole
 * rows through a ring of loads in flight); 2 that with the next CMF_CUDA_I8S_PF (8) chunks of every warp
 * prefetched into L2 before the PDL wait; 3 that with one block per multiprocessor; 4 the rows streamed into shared
 * memory by the bulk-copy engine (q8_row, one token, columns a multiple of 512; other launches take mode 1; slots set
 * by CMF_CUDA_I8T_C / _D / _BPS; measured slower, session 14). Modes 1-4 give the same bits (each row summed by one
 * warp in the row-group kernel's order with CMF_CUDA_I8_SPLIT=0); in every mode the plain / multi / GLU outputs
 * agree bit for bit. CMF_CUDA_I8_STREAM=0..4 in the environment (read at the first call) or this setter
 * (process-wide; tests and benchmarks; not while products are captured into a CUDA graph). Measured:
 * bench/cuda/RESULTS.md (helper cudamv; session 14 for mode 4). */
void cmf_cuda_set_i8_stream(int mode);
/* Mode 1's one-token launches whose rows are whole warp steps (q8_row: columns a multiple of 512, q4tp of 1024) can
 * walk a weight's rows with a cursor that only adds (matvec_i8s.cu I8sLin) instead of one that locates every chunk's
 * row: same chunks, same order, same bits. mode 0: never; 1 (the default): q4tp only (Llama-3.1-8B q4tp decode
 * +6.8%; q8_row measured -1.1%, bench/cuda/RESULTS.md session 19); 2: q8_row too; other values: 1.
 * CMF_CUDA_I8S_LIN=0..2 in the environment (read at the first call) or this setter (tests and benchmarks; not while
 * products are captured). */
void cmf_cuda_set_i8s_linear(int mode);

/* L2 prefetch of weights ahead of the decode products (the next products' weights stream into L2 while this one
 * runs, so the dependent chain of small kernels reads them from L2 and DRAM stays busy across kernel boundaries).
 * cmf_cuda_set_l2_prefetch stores up to CMF_CUDA_PF_SPANS spans (device pointers 16-byte aligned, bytes multiples
 * of 16, each inside one allocation) for the calling thread; the next int8-activation product this thread launches
 * (cmf_cuda_matvec, _multi, _glu on q8_row / q4tp) takes them: its blocks issue cp.async.bulk.prefetch.L2 over
 * their share of the spans (PTX ISA, "cp.async.bulk.prefetch"), at each block's start before the PDL wait, or at
 * its end with CMF_CUDA_L2PF_AT=1. n = 0 (or spans NULL) clears them. A hint only: results do not change. The
 * distance ahead is the caller's: cmf_cuda_l2pf_bytes() is CMF_CUDA_L2PF (MiB, read once; 0 or unset: none). */
#define CMF_CUDA_PF_SPANS 4
typedef struct cmf_cuda_span {
    const void *d_ptr;
    uint64_t bytes;
} cmf_cuda_span;
void cmf_cuda_set_l2_prefetch(const cmf_cuda_span *spans, int n);
uint64_t cmf_cuda_l2pf_bytes(void);

/* Several products of the same activations in one launch (the decode step's q/k/v): d_y[i][t][r] =
 * sum_c d_x[t][c] W_i[r][c] (+ d_bias[i][r] when d_bias and d_bias[i] are not NULL) for i < count (1..3), t < n
 * (1..8). The weights must share dtype and cols (cols a multiple of the dtype's 16-byte chunk). Each output is bit
 * for bit what cmf_cuda_matvec (then the bias add) gives. cmf_cuda_matvec_multi_ok says whether the weights
 * qualify (1) without setting an error. Errors: CMF_E_ARG (the rules above), cmf_cuda_weight_check's, CMF_E_IO. */
cmf_status cmf_cuda_matvec_multi(const cmf_cuda_weight *w, int count, const float *d_x, float *const *d_y,
                                 const float *const *d_bias, int n, cmf_cuda_stream stream);
int cmf_cuda_matvec_multi_ok(const cmf_cuda_weight *w, int count, int n);
/* A product followed by the residual add and the next RMSNorm, in one launch (the o_proj / down_proj of a decode
 * step and the norm after it): d_y[t] = W d_in[t] (+ d_bias) as cmf_cuda_matvec_multi with one weight, then the
 * last block to finish runs d_x[t] += d_y[t], d_out[t] = RMSNorm(d_x[t]) * d_nw as cmf_cuda_add_rmsnorm, for t < n
 * (1..8), rows of d = w->rows. Bit for bit cmf_cuda_matvec_multi then cmf_cuda_add_rmsnorm. d_out may be d_y, not
 * d_x. d_counter: one int of device memory, zero before the first call, left zero (one stream at a time).
 * Errors: as cmf_cuda_matvec_multi, CMF_E_ARG for NULL buffers. */
cmf_status cmf_cuda_matvec_add_rmsnorm(const cmf_cuda_weight *w, const float *d_in, float *d_y, const float *d_bias,
                                       int n, float *d_x, float *d_out, const float *d_nw, float eps, int gemma_style,
                                       int *d_counter, cmf_cuda_stream stream);
/* The gated MLP's first half in one launch (Shazeer 2020): d_out[t][r] = act(gate_r · x_t) * (up_r · x_t), act =
 * SiLU or GELU-tanh (gelu_tanh != 0), for t < n (1..8); gate and up of the same dtype and shape. Bit for bit
 * cmf_cuda_matvec twice followed by cmf_cuda_glu. Errors: as cmf_cuda_matvec_multi. */
cmf_status cmf_cuda_matvec_glu(const cmf_cuda_weight *gate, const cmf_cuda_weight *up, const float *d_x,
                               float *d_out, int n, int gelu_tanh, cmf_cuda_stream stream);

/* Decode products with a fused prologue / epilogue (the int8-activation kernel only: q8_row / q4tp weights,
 * cols % 32 == 0, n 1..8; cmf_cuda_matvec_ex_ok says whether w[0..count) qualify, without setting an error).
 *  - d_res (one plain product, count 1): after y = W x (+ bias) is stored, d_res[t][r] += y[t][r] (the residual add
 *    x += o of the o / down projection, with cmf_cuda_add's bits); d_res must not be the product's input.
 *  - d_norm_x: the products' input is RMSNorm(d_norm_x[t]) * d_norm_w (1 + w when gemma_style; d_norm_w may be NULL)
 *    over cols, as cmf_cuda_rmsnorm computes it (same order of the sum, same bits); every block normalizes the rows
 *    itself (no separate norm launch) and block 0 also writes them to d_x, which is then an output of cols x n f32.
 * Each output is bit for bit what the separate launches give (cmf_cuda_matvec_multi / _glu, cmf_cuda_add,
 * cmf_cuda_rmsnorm). Source: the RMSNorm (Zhang & Sennrich 2019) and residual of the decoder layer, fused as the
 * decode "fewer launches" step of bench/cuda/RESULTS.md. Errors: CMF_E_UNSUPPORTED (the path does not apply),
 * CMF_E_ARG (d_res with count > 1 or GLU, NULL outputs), CMF_E_IO. */
typedef struct cmf_cuda_mv_ex {
    float *d_res;
    const float *d_norm_x;
    const float *d_norm_w;
    float eps;
    int gemma_style;
    void *d_i8q; /* NULL, or CMF_CUDA_I8Q_BYTES of device scratch: a wide product without the norm prologue may then
                  * quantize its activations once (a small kernel) instead of in every block (matvec_i8s.cu) */
} cmf_cuda_mv_ex;
#define CMF_CUDA_I8Q_BYTES (256 * 1024)
int cmf_cuda_matvec_ex_ok(const cmf_cuda_weight *w, int count, int n);
cmf_status cmf_cuda_matvec_multi_ex(const cmf_cuda_weight *w, int count, float *d_x, float *const *d_y,
                                    const float *const *d_bias, int n, const cmf_cuda_mv_ex *ex,
                                    cmf_cuda_stream stream);
cmf_status cmf_cuda_matvec_glu_ex(const cmf_cuda_weight *gate, const cmf_cuda_weight *up, float *d_x, float *d_out,
                                  int n, int gelu_tanh, const cmf_cuda_mv_ex *ex, cmf_cuda_stream stream);

/* ---- prefill GEMM (needs a context for cuBLAS and scratch) ------------------------------------------------- */

typedef struct cmf_cuda_ctx cmf_cuda_ctx;

/* Creates a context on the current device: a cuBLAS handle and a scratch buffer of `scratch_bytes` (0 picks
 * 256 MiB) for dequantized weight tiles and converted activations. Errors: CMF_E_NOMEM, CMF_E_IO. */
cmf_status cmf_cuda_ctx_create(cmf_cuda_ctx **ctx, size_t scratch_bytes);
void cmf_cuda_ctx_free(cmf_cuda_ctx *ctx);

/* GEMM algorithms of cmf_cuda_gemm. */
enum cmf_cuda_gemm_algo {
    CMF_CUDA_GEMM_AUTO = 0,   /* q8_row / q8_2f weights: the int8 tensor-core GEMM (gemm.cu: the weights as stored,
                                 3 int8 levels of each token's activations, cublasGemmEx int8 -> int32, row and
                                 token scales in the epilogue; relative error ~1e-6) when rows and cols are
                                 multiples of 4; CMF_CUDA_Q8_LEVELS=2 (faster, coarser) and CMF_CUDA_Q8_GEMM=f16
                                 (CUBLAS) in the environment. Everything else: CUBLAS (bench/cuda/RESULTS.md) */
    CMF_CUDA_GEMM_CUBLAS = 1, /* weight row tiles dequantized to f16 (bf16 for bf16 weights, f32 stays f32) in
                                 scratch, activations converted likewise, cublasGemmEx with f32 accumulation */
    CMF_CUDA_GEMM_TILED = 2,  /* one kernel: quantized weights decoded into shared memory as f16, tensor-core
                                 (WMMA 16x16x16) tiles, f32 accumulation */
};

/* Prefill product d_y[t][r] = sum_c d_x[t][c] * W[r][c] for t < n (any n >= 1), same layouts as
 * cmf_cuda_matvec. Runs on `stream` (the cuBLAS handle is bound to it per call). Operands are rounded to
 * f16 / bf16 (not for f32 weights): expect relative errors near 1e-3. Errors: cmf_cuda_weight_check's,
 * CMF_E_ARG (n, algo, scratch too small for one 16-row tile), CMF_E_IO (CUDA / cuBLAS status in the message). */
cmf_status cmf_cuda_gemm(cmf_cuda_ctx *ctx, const cmf_cuda_weight *w, const float *d_x, float *d_y, int64_t n,
                         int algo, cmf_cuda_stream stream);

/* ---- elementwise blocks (Zhang & Sennrich 2019; Su et al. 2021; Shazeer 2020) ------------------------------ */

/* RMSNorm of n rows of d values: d_out[t] = d_x[t] / sqrt(mean(d_x[t]^2) + eps) * g, g = d_w (plain) or 1 + d_w
 * (gemma_style != 0); d_w may be NULL (g = 1). d_out may alias d_x. One block per row, f32 sums.
 * Errors: CMF_E_ARG (n, d), CMF_E_IO. */
cmf_status cmf_cuda_rmsnorm(float *d_out, const float *d_x, const float *d_w, int64_t n, int64_t d, float eps,
                            int gemma_style, cmf_cuda_stream stream);

/* RoPE pairings: HALF pairs element i with i + rot_dim/2 (GPT-NeoX / HF "rotate_half"); INTERLEAVED pairs 2i with
 * 2i+1 (GPT-J / llama2.c / GGUF llama). */
enum cmf_cuda_rope_pairing { CMF_CUDA_ROPE_HALF = 0, CMF_CUDA_ROPE_INTERLEAVED = 1 };

/* The residual add followed by the next RMSNorm, in one launch: d_x[t] += d_o[t], then d_out[t] = RMSNorm(d_x[t])
 * exactly as cmf_cuda_rmsnorm. d_out may be d_o (each element of d_o is read by the thread that later writes that
 * element of d_out), not d_x. n rows of d. Errors: CMF_E_ARG, CMF_E_IO. */
cmf_status cmf_cuda_add_rmsnorm(float *d_x, const float *d_o, float *d_out, const float *d_w, int64_t n, int64_t d,
                                float eps, int gemma_style, cmf_cuda_stream stream);

/* Rotates, in place, the first rot_dim dims (even, <= head_dim; partial rotary leaves the rest) of every head of
 * d_x = [n_tok][n_heads][head_dim] by angle pos[t] * inv_freq[i], inv_freq[i] = (float)(theta^(-2i/rot_dim))
 * (computed in double, stored as f32), the angle product in f32 as Hugging Face computes it. d_pos: device
 * int32 [n_tok]. Errors: CMF_E_ARG (odd / too large rot_dim, theta <= 0), CMF_E_IO. */
cmf_status cmf_cuda_rope(float *d_x, const int32_t *d_pos, int64_t n_tok, int n_heads, int head_dim, int rot_dim,
                         float theta, int pairing, cmf_cuda_stream stream);

/* Gated activations over n rows of d values: d_out[t][i] = act(d_gate[t][i]) * d_up[t][i], act = SiLU (SwiGLU)
 * or the tanh-approximated GELU (GeGLU, gelu_tanh != 0). d_out may alias either input. Errors: CMF_E_IO. */
cmf_status cmf_cuda_glu(float *d_out, const float *d_gate, const float *d_up, int64_t n, int gelu_tanh,
                        cmf_cuda_stream stream);
/* d_out[i] = d_a[i] + d_b[i] for i < n (residual add; d_out may alias). Errors: CMF_E_IO. */
cmf_status cmf_cuda_add(float *d_out, const float *d_a, const float *d_b, int64_t n, cmf_cuda_stream stream);
/* Softmax over each of n rows of d values, in place (max-subtracted, f32 sums). Errors: CMF_E_ARG, CMF_E_IO. */
cmf_status cmf_cuda_softmax(float *d_x, int64_t n, int64_t d, cmf_cuda_stream stream);
/* f32 -> f16 (round to nearest even) for n values, e.g. K/V rows into the cache. Errors: CMF_E_IO. */
cmf_status cmf_cuda_f32_to_f16(uint16_t *d_out, const float *d_in, int64_t n, cmf_cuda_stream stream);

/* KV-cache append with device positions: for t < n_tok, row d_pos[t] of the caches d_kc / d_vc ([n_ctx][kvd] of
 * kv_type, enum cmf_cuda_kv) receives d_k[t] / d_v[t] ([n_tok][kvd] f32), rounded to nearest even for f16, as is
 * for f32. One launch for K and V. Positions must lie inside the cache (the caller's invariant). Errors: CMF_E_ARG,
 * CMF_E_IO. */
cmf_status cmf_cuda_kv_write(void *d_kc, void *d_vc, const float *d_k, const float *d_v, const int32_t *d_pos,
                             int64_t n_tok, int64_t kvd, int kv_type, cmf_cuda_stream stream);

/* Per-head q/k RMSNorm (Qwen3, Gemma 3; skipped when d_qw and d_kw are NULL) followed by RoPE (Su et al. 2021) of
 * d_q [n_tok][n_heads][head_dim] and d_k [n_tok][n_kv_heads][head_dim], in place, in one launch (one warp per
 * token and head). Norm: x / sqrt(mean(x^2) + eps) * (w or 1 + w when gemma_style), w [head_dim]. RoPE: the first
 * rot_dim dims (even, <= head_dim; 0 = none) rotated by d_pos[t] * d_inv_freq[i] (f32 product, as HF), pairs as
 * enum cmf_cuda_rope_pairing. head_dim <= 256. Errors: CMF_E_ARG, CMF_E_IO. */
cmf_status cmf_cuda_qk_norm_rope(float *d_q, float *d_k, int64_t n_tok, int n_heads, int n_kv_heads, int head_dim,
                                 const float *d_qw, const float *d_kw, float eps, int gemma_style, int rot_dim,
                                 const float *d_inv_freq, const int32_t *d_pos, int pairing, cmf_cuda_stream stream);

/* cmf_cuda_qk_norm_rope followed by cmf_cuda_kv_write of the same tokens, in one launch: after the rotation, each
 * token's K row and its V row (d_v [n_tok][n_kv_heads][head_dim]) go to row d_pos[t] of the caches d_kc / d_vc
 * ([n_ctx][n_kv_heads * head_dim] of kv_type, enum cmf_cuda_kv). Bit for bit the two calls. Errors: as those. */
cmf_status cmf_cuda_qk_norm_rope_kv(float *d_q, float *d_k, const float *d_v, int64_t n_tok, int n_heads,
                                    int n_kv_heads, int head_dim, const float *d_qw, const float *d_kw, float eps,
                                    int gemma_style, int rot_dim, const float *d_inv_freq, const int32_t *d_pos,
                                    int pairing, void *d_kc, void *d_vc, int kv_type, cmf_cuda_stream stream);

/* ---- attention ------------------------------------------------------------------------------------------- */

/* KV cache layout (one layer): f16 [n_ctx][n_kv_heads][head_dim], position-major, so that one token's K (or V)
 * projection is one contiguous row. Query layout: f32 [n_tok][n_heads][head_dim]; output likewise. Query head h
 * reads KV head h / (n_heads / n_kv_heads) (GQA). */
/* Element type of a KV cache ([n_ctx][n_kv_heads][head_dim] per layer): f16 (rounded to nearest even; half the
 * memory and cache bandwidth) or f32 (the values as computed, as the CPU backend keeps them). The attention
 * functions take the cache pointers as uint16_t * in both cases (cast an f32 cache). */
enum cmf_cuda_kv { CMF_CUDA_KV_F16 = 0, CMF_CUDA_KV_F32 = 1 };

typedef struct cmf_cuda_attn {
    int n_heads, n_kv_heads, head_dim; /* head_dim % 8 == 0, <= 256; n_heads % n_kv_heads == 0 */
    float scale;                       /* score scale, usually 1/sqrt(head_dim) */
    float softcap;                     /* 0: none; else s = softcap * tanh(s / softcap) (Gemma 2) */
    int window;                        /* 0: none; else query at p sees keys j with p - window < j <= p */
    int kv_type;                       /* the caches' element type: enum cmf_cuda_kv (0 = f16) */
} cmf_cuda_attn;

/* Decode attention of one query at position pos (keys 0..pos, i.e. pos + 1 cached rows) by flash-decoding: the
 * key range is split across blocks (each split: online softmax over its keys for all query heads of one KV head),
 * and the last split block of each (kv head, head chunk) to finish merges the splits' (max, sum, partial output)
 * (one launch). d_q: [n_heads][head_dim]; d_out likewise. d_work: device scratch of
 * cmf_cuda_attn_decode_work_bytes bytes, zeroed once before its first use (its split counters are back at zero
 * after every launch; one stream at a time per scratch). Errors: CMF_E_ARG (shape rules above,
 * pos < 0), CMF_E_IO. */
cmf_status cmf_cuda_attn_decode(const cmf_cuda_attn *a, const float *d_q, const uint16_t *d_k,
                                const uint16_t *d_v, int64_t pos, float *d_out, void *d_work,
                                cmf_cuda_stream stream);
/* cmf_cuda_attn_decode with the position read from device memory (*d_pos), so that the launch can be captured in a
 * CUDA graph and replayed at later positions: the grid covers the split count of the longest context (n_ctx, or
 * the window when smaller) and each block derives its position's own split geometry, so the result is bit for
 * bit the one cmf_cuda_attn_decode gives at that position. *d_pos must be < n_ctx. Same scratch. Errors: as
 * cmf_cuda_attn_decode (n_ctx < 1: CMF_E_ARG). */
cmf_status cmf_cuda_attn_decode_dpos(const cmf_cuda_attn *a, const float *d_q, const uint16_t *d_k,
                                     const uint16_t *d_v, const int32_t *d_pos, int64_t n_ctx, float *d_out,
                                     void *d_work, cmf_cuda_stream stream);
/* The decode token's q/k RMSNorm + RoPE + K/V cache write inside the attention launch: bit for bit
 * cmf_cuda_qk_norm_rope_kv(d_q, d_k, d_v, 1 token, ...) followed by cmf_cuda_attn_decode_dpos, except that d_q / d_k
 * (the raw projections [n_heads][head_dim] / [n_kv_heads][head_dim]) are read, not rewritten; d_kc / d_vc are the
 * cache (a->kv_type elements), written at *d_pos. One launch instead of two (the decode step's fewer-launches
 * work, bench/cuda/RESULTS.md); opt-in in the backend (CMF_CUDA_FUSE_ATTN=1). cmf_cuda_attn_decode_rope_ok: whether
 * it applies (a GQA group of at most 8 query heads per KV head, head_dim 40..256, the rules of
 * cmf_cuda_qk_norm_rope_kv), without setting an error. Errors: CMF_E_ARG, CMF_E_IO. */
typedef struct cmf_cuda_qk_rope {
    const float *d_qw, *d_kw; /* q / k norm weights [head_dim] (both NULL: no norm) */
    float eps;
    int gemma_style;
    int rot_dim;              /* 0: no RoPE */
    const float *d_inv_freq;  /* [rot_dim / 2] */
    int pairing;              /* CMF_CUDA_ROPE_HALF / _INTERLEAVED */
} cmf_cuda_qk_rope;
cmf_status cmf_cuda_attn_decode_rope(const cmf_cuda_attn *a, const float *d_q, const float *d_k, const float *d_v,
                                     const cmf_cuda_qk_rope *r, void *d_kc, void *d_vc, const int32_t *d_pos,
                                     int64_t n_ctx, float *d_out, void *d_work, cmf_cuda_stream stream);
int cmf_cuda_attn_decode_rope_ok(const cmf_cuda_attn *a, const cmf_cuda_qk_rope *r);
/* The decode attention kernels' variant (every decode entry point above; an A/B and test switch, read at each
 * launch; -1 or any other value: the environment's choice or the default): tile = keys per lane group and
 * online-softmax update (4, the default, or 1: the per-key update; CMF_CUDA_ATTN_TILE), pf = 1 to prefetch each
 * split's K / V rows into L2 before the kernel's PDL wait (default 0; CMF_CUDA_ATTN_PF), merge = 1 for the merge of
 * the splits with independent loads (the default), 0 for the serial one (CMF_CUDA_ATTN_MERGE=0). Results
 * depend on tile and merge only through the order of the f32 operations (each as exact as the others); graph
 * replays keep the variant they were captured with. No errors. */
void cmf_cuda_set_attn_decode(int tile, int pf, int merge);
/* The cluster form of every decode entry point above (attention.cu: the splits of a KV head merged through the
 * distributed shared memory of sm_90 thread-block clusters): on = 1 / 0, -1 the environment's choice
 * (CMF_CUDA_ATTN_CLUSTER) or the default. The same tile and a different order of the f32 operations than the plain
 * kernel (each as exact); graph replays keep the form they were captured with. No errors. */
void cmf_cuda_set_attn_cluster(int on);
/* Scratch needed by cmf_cuda_attn_decode for contexts up to n_ctx positions. */
size_t cmf_cuda_attn_decode_work_bytes(const cmf_cuda_attn *a, int64_t n_ctx);

/* Causal prefill attention: queries at positions pos0 .. pos0 + n_tok - 1 (their K/V rows already written into
 * the cache), each attending to keys 0..its position (within the window). d_q / d_out: [n_tok][n_heads][head_dim].
 * One block per (64 queries, head): K/V tiles staged in shared memory, online softmax, f32 throughout.
 * Errors: CMF_E_ARG, CMF_E_IO. */
cmf_status cmf_cuda_attn_prefill(const cmf_cuda_attn *a, const float *d_q, const uint16_t *d_k,
                                 const uint16_t *d_v, int64_t pos0, int64_t n_tok, float *d_out,
                                 cmf_cuda_stream stream);
/* The same causal prefill attention on the tensor cores (attn_prefill.cu): blocks of 64 queries x 1 head, key tiles of
 * 64, S = Q K^T and O += P V as WMMA f16 fragments with f32 accumulators, online softmax in f32 (FlashAttention's
 * recurrence). Q (times the scale) and P are rounded to f16 for the products, so results differ from
 * cmf_cuda_attn_prefill by about 1e-3 relative. f16 caches (kv_type CMF_CUDA_KV_F16), head_dim 64, 80, 96, 128
 * or 256 and 16-byte aligned caches; anything else (an f32 cache too), one token, or CMF_CUDA_ATTN_TC=0 in the
 * environment runs cmf_cuda_attn_prefill instead. Errors:
 * CMF_E_ARG, CMF_E_IO. */
cmf_status cmf_cuda_attn_prefill_tc(const cmf_cuda_attn *a, const float *d_q, const uint16_t *d_k,
                                    const uint16_t *d_v, int64_t pos0, int64_t n_tok, float *d_out,
                                    cmf_cuda_stream stream);

/* ---- sampling (sample.cu) ----------------------------------------------------------------------------------
 * Selection works on 64-bit keys, larger = first: high word = the value's IEEE bits made monotone (-0.0 as +0.0,
 * NaN = 0, below -inf), low word = 0xffffffff - id (ties: the lower id first), i.e. the host sampler's order
 * (src/sample/sample.c). d_work for all of them: cmf_cuda_sample_work_bytes(n) bytes, ZEROED before its first use
 * (cmf_cuda_memset): the one-launch kernels count finished blocks there and leave the counters at 0 again; one
 * d_work serves one stream at a time. */

/* The value (NaN when the key says NaN / not a candidate) and the id of a key (host). */
static inline float cmf_cuda_key_value(uint64_t key) {
    const uint32_t hi = (uint32_t)(key >> 32);
    const uint32_t b = (hi & 0x80000000u) ? (hi & 0x7fffffffu) : ~hi;
    const uint32_t u = hi ? b : 0x7fc00000u;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}
static inline int32_t cmf_cuda_key_id(uint64_t key) { return (int32_t)(0xffffffffu - (uint32_t)key); }
/* Whether the key is a number (argmax) / a candidate (top-k with a temperature). */
static inline int cmf_cuda_key_valid(uint64_t key) { return (key >> 32) != 0; }

/* Step 1 of src/sample/sample.h in place on a device row of n logits: for i < m, row[ids[i]] gets the repetition
 * penalty, then presence + counts[i] * frequency subtracted, each operation rounded as the host's
 * cmf_sample_penalize (same bits). ids / counts: host arrays, ids distinct and in [0, n). Asynchronous (one launch
 * per 64 tokens). Errors: CMF_E_ARG, CMF_E_IO. */
cmf_status cmf_cuda_penalize(float *d_row, int64_t n, const int32_t *ids, const int32_t *counts, int m, float repeat,
                             float presence, float frequency, cmf_cuda_stream stream);

/* The largest key of n logits (one launch, asynchronous) into device memory *d_key (inside d_work; valid until the
 * next call with that d_work). cmf_cuda_key_valid(key) == 0: every logit is NaN. Errors: CMF_E_ARG, CMF_E_IO. */
cmf_status cmf_cuda_argmax_key(const float *d_logits, int64_t n, void *d_work, cmf_cuda_stream stream,
                               uint64_t **d_key);

/* The k (1..1024) largest keys of n logits, sorted, into device memory *d_keys[0..k) (inside d_work; one launch,
 * asynchronous). temp > 0: keys of z = logit / temp (IEEE division as the host's; +inf -> 3e38; NaN and -inf are
 * not candidates and get keys below every candidate) -- sample.c's steps 3-4; temp == 0: keys of the logits
 * themselves. When k exceeds the elements, the rest are key 0. Errors: CMF_E_ARG, CMF_E_IO. */
cmf_status cmf_cuda_topk_keys(const float *d_logits, int64_t n, int k, float temp, void *d_work,
                              cmf_cuda_stream stream, uint64_t **d_keys);

/* Index of the largest of n logits (the first on ties; NaN never wins unless all are NaN: then 0) into *id (host).
 * Only the key crosses the bus; the call synchronizes `stream`. Errors: CMF_E_ARG, CMF_E_IO. */
cmf_status cmf_cuda_argmax(const float *d_logits, int64_t n, int32_t *id, void *d_work, cmf_cuda_stream stream);

/* Top-k / top-p (nucleus) sampling from n logits at temperature temp > 0, drawn on the device in f32 (NOT the host
 * sampler's arithmetic; cmf_session_sample uses cmf_cuda_topk_keys instead): keep the top_k largest
 * (1 <= top_k <= 1024; larger values are clamped), softmax of logit/temp over them, keep the smallest prefix (by
 * descending probability, ties by lower id) whose mass reaches top_p (0 < top_p <= 1), and pick with the uniform
 * number u in [0, 1) the first kept token whose cumulative (renormalized) mass exceeds u. The draw `u` comes from
 * the caller so that the choice is reproducible. Only the id crosses the bus; the call synchronizes `stream`.
 * Errors: CMF_E_ARG, CMF_E_IO. */
cmf_status cmf_cuda_sample_topk_topp(const float *d_logits, int64_t n, int top_k, float top_p, float temp,
                                     float u, int32_t *id, void *d_work, cmf_cuda_stream stream);
/* Scratch bytes for the calls above over n logits. */
size_t cmf_cuda_sample_work_bytes(int64_t n);

/* ---- the decode kernels' timeline (tprof.cu, tprof.cuh; a profiling build: -DCMF_CUDA_TPROF=1) ------------- */

/* One warp of one instrumented launch: %globaltimer (ns) at its start, after the PDL wait, after its prologue and at
 * its end (and the products' prologue steps, the cluster attention's partial steps); kind (tprof.cuh: 1 streaming product, 2 row-group product, 3 cluster attention, 4 split attention,
 * 5 activation prequantization), key (the launch's first weight or K cache base), SM, block, warp. */
typedef struct {
    uint64_t t[8]; /* 0 start, 1 PDL wait done, 2 prologue done, 3 end; products: 4 first activations in, 5
                    * quantized, 6 RMSNorm scale known, 7 its first inputs in; cluster attention: 4 q / k normalized
                    * and rotated, 5 first K / V in, 6 key rounds done, 7 lane groups' partials stored (their merge
                    * runs from 7 to 2) (0: not reached) */
    uint64_t key;
    uint32_t kind, sm, block, warp;
} cmf_cuda_tprec;
/* Allocates the device ring of 2^20 records on first use and points the instrumented kernels at it, empty; later
 * launches (graph replays included) append. Errors: CMF_E_UNSUPPORTED when the build lacks CMF_CUDA_TPROF=1,
 * CMF_E_NOMEM, CMF_E_IO. */
cmf_status cmf_cuda_tprof_start(void);
/* Waits for the device and copies the records appended since cmf_cuda_tprof_start (up to cap, in append order)
 * into dst; returns how many were appended (more than cap or than the ring holds: the rest are lost), or -1 on a
 * CUDA error or when profiling was not started. */
int64_t cmf_cuda_tprof_read(cmf_cuda_tprec *dst, int64_t cap);

/* ---- the cuda backend's CUDA graphs (backend_cuda.cu) ----------------------------------------------------- */

struct cmf_backend;
/* Decode-step graphs captured and replayed so far by a cuda backend (0 for any other backend). */
void cmf_backend_cuda_graph_stats(struct cmf_backend *be, uint64_t *captured, uint64_t *replayed);
/* Turns decode-step graphs on or off (off also drops the cached ones); the default is on unless the environment
 * has CMF_CUDA_GRAPH=0. Ops outside the backend table that a forward queues between layers are captured with the
 * step; they must queue nothing while cmf_backend_cuda_replaying() is 1 (tp_nccl.cu's all-reduce does this). No
 * effect on other backends. */
void cmf_backend_cuda_set_graphs(struct cmf_backend *be, int on);

#ifdef __cplusplus
}
#endif

#endif
