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
    /* The CPU's load-time repacked copy of the stored tensor (q4 family, kern.h cmf_rp), or NULL: set by
     * cmf_cpu_repack_weight, copied with the view; used only while it matches data/dtype/shape (kern.h cmf_rp_of). */
    const struct cmf_rp *rp;
} cmf_weight;

/* Makes a view of a 2-D tensor. Errors: CMF_E_FORMAT when the tensor is not 2-D, CMF_E_UNSUPPORTED when its dtype
 * has no CPU kernel (the message names the tensor and dtype). */
cmf_status cmf_weight_view(const cmf_tensor *t, cmf_weight *w);

/* The sub-view of rows [r0, r0+n) of `w`. */
cmf_weight cmf_weight_rows(const cmf_weight *w, int64_t r0, int64_t n);

/* Decodes row r of the view to cols floats (any dtype accepted by cmf_weight_view; the arithmetic of
 * cmf_dequant, CMF_FORMAT.md §2.1–2.7). out: caller-owned [cols]. */
void cmf_weight_row_f32(const cmf_weight *w, int64_t r, float *out);
/* Decodes columns [c0, c0+nc) of row r of the view to nc floats (same values as cmf_weight_row_f32). */
void cmf_weight_cols_f32(const cmf_weight *w, int64_t r, int64_t c0, int64_t nc, float *out);

/* out[t][r] = sum_c x[t][c] * W[r][c] (+ bias[r] when bias != NULL) for t < n, r < rows: the linear layer
 * y = x W^T of PyTorch. x is [n][cols] (row stride cols), out is [n][rows] with row stride ld_out (>= rows).
 * Quantized weights (q8_row, q8_2f, q4_block, q4_tiled, q4tp, q2tp; q4 with cols % 32 != 0 only through its
 * repacked copy, kern.h cmf_rp "split") take int8
 * activations: each token is quantized per block of 32 (llama.cpp's Q8_0: d = absmax/127, q = round(x/d); for
 * q8_2f the column scales are folded into x first), the inner loops are exact int32 block dot products and
 * y = sum_b wscale_b * d_b * isum_b in f32. f32/f16/bf16 weights (and q4 with other cols) use f32 FMA dot
 * products of the decoded weights with x. Work: rows in tiles of 4 shared among the pool's threads (dynamic
 * chunks), columns in chunks of 1024, every weight tile decoded once and used for all n tokens (cache-blocked
 * GEMM for prefill); for n <= 2 (decode) the SIMD paths run fused kernels instead, which decode each weight row
 * in registers straight from the mapping and dot it with the int8 activations in the same loop. A q4 view with a
 * load-time repacked copy (w->rp, cmf_cpu_repack_weight; one activation level) reads only that copy: 16 rows per
 * vector load in decode, 32 rows x 6 tokens per microkernel in prefill, no packing. Scratch: the pool's shared and per-thread buffers (grown on
 * demand); when they cannot be had, or pool is NULL, a slower allocation-free f32 path computes the same
 * product. The instruction-set path is the one cmf_cpu_features_str reports; under CMF_CPU_F32REF the product is
 * cmf_matmul_ref_f32's. Never fails. */
void cmf_matmul(cmf_pool *pool, float *out, int64_t ld_out, const float *x, int64_t n, const cmf_weight *w,
                const float *bias);

/* Several products of ONE input x [n][cols] (q/k/v of the normed hidden state; gate/up), and optionally the GLU
 * after them: for i < count, mm[i].out[t * mm[i].ld_out + r] = cmf_matmul's result for mm[i].w, mm[i].bias; then when
 * glu is 1 (SiLU) or 2 (GELU-tanh), with count == 2 and mm[0] the gate, mm[1] the up product of equal rows:
 * gate_out[t][r] = act(gate_out[t][r]) * up_out[t][r] (cmf_silu / cmf_gelu_tanh, then the product, as the backend's
 * glu op). When every product takes cmf_matmul's repacked path (kern.h cmf_rp, one activation level, not q8_2f, one
 * column count), x is quantized ONCE and all products (and the GLU, unit by unit right after a unit's gate and up
 * rows) run in ONE pool fan-out, the work units of each product cut as cmf_matmul cuts them and computed by the same
 * kernel calls, so the bits equal those of the products run one by one; otherwise (or when cmf_cpu_fuse_enabled()
 * is 0) the products run one by one through cmf_matmul, then the GLU on the caller. count <= 16 when fused (more
 * run one by one). The idea of the CUDA backend's deferred q/k/v and gate/up products (backend_cuda.cu). Never
 * fails. */
typedef struct cmf_mm {
    float *out;
    int64_t ld_out;
    const cmf_weight *w;
    const float *bias;
} cmf_mm;
void cmf_matmul_group(cmf_pool *pool, const float *x, int64_t n, const cmf_mm *mm, int count, int glu);
/* Fusion switch of cmf_matmul_group (and of the cpu backend's deferral of products of one input): 1 unless the
 * environment variable CMF_CPU_FUSE is "0" at the first call, or cmf_cpu_set_fuse(0) was called (process-wide; for
 * A/B runs and the test comparing both; not while a forward runs). */
int cmf_cpu_fuse_enabled(void);
void cmf_cpu_set_fuse(int on);

/* The same product in plain f32: each weight row decoded in chunks (cmf_weight_cols_f32) and dotted with every
 * token in order, no activation quantization, no threads, no allocation. The reference the tests compare with. */
void cmf_matmul_ref_f32(float *out, int64_t ld_out, const float *x, int64_t n, const cmf_weight *w,
                        const float *bias);

/* CPU paths of cmf_matmul, best last. CMF_CPU_F32REF is not an instruction set but a switch for tests and
 * accuracy checks: selected with cmf_cpu_set_path, every cmf_matmul computes cmf_matmul_ref_f32 (decoded weights,
 * f32 activations, no int8 quantization, single thread), so a quantized model then differs from its dequantized
 * f32 twin only by summation order. Never chosen by detection. */
enum cmf_cpu_path { CMF_CPU_SCALAR = 0, CMF_CPU_NEON = 1, CMF_CPU_AVX2 = 2, CMF_CPU_AVX512 = 3, CMF_CPU_F32REF = 4 };

/* A constant line naming the active path and the CPU features it was chosen from, e.g.
 * "avx512-vnni (cpu: avx2 fma f16c avx512f avx512bw avx512vl avx512vnni avx512bf16)", for `cmf bench`. */
const char *cmf_cpu_features_str(void);
/* The active path (enum cmf_cpu_path). Chosen once: the environment variable CMF_CPU_PATH ("avx512-vnni" or
 * "avx512", "avx2", "neon", "scalar") when it names a path this CPU and build support (so an AVX-512 machine can run
 * and measure the AVX2 kernels), else detected from CPUID (x86-64: AVX-512 F/BW/VL/DQ/VNNI with OS support ->
 * avx512; AVX2+FMA+F16C -> avx2; arm64 -> neon; else scalar). */
int cmf_cpu_path(void);
/* CMF_CPU_PATH's path: -1 when unset or empty, -2 when it names no path or one this CPU / build cannot run (then
 * cmf_cpu_path detects; the command line warns). */
int cmf_cpu_path_from_env(void);
/* 1 when this CPU and build can run `path`. */
int cmf_cpu_path_supported(int path);
/* Selects the path used by later cmf_matmul calls (process-wide; for tests and benchmarks; not to be called while
 * a matmul runs). Errors: CMF_E_UNSUPPORTED when the CPU or the build lacks it (message names it). */
cmf_status cmf_cpu_set_path(int path);
/* The name of a path ("scalar", "neon", "avx2", "avx512-vnni", "f32ref"), or "?" */
const char *cmf_cpu_path_name(int path);

/* Activation levels of the int8 family of cmf_matmul (cmf_qact_quantize, kern.h): 1 = llama.cpp's Q8_0 rule (one
 * int8 value and scale per block of 32; the default, and the only level the fused decode kernels and the prefill
 * GEMM take), 2 = the Q8_0 value plus the Q8_0 quantization of its remainder (about 250x less activation error,
 * twice the int8 work, through the tiled path). On random-weight checkpoints one level puts q8 logits up to 8.5%
 * (gemma2 38%) of max|logit| off the dequantized f32 forward and two levels within 2e-3; on a trained model
 * (stories260K) one level costs +0.13% perplexity over f32 (bench/RESULTS.md). The default is read once from the
 * environment variable CMF_ACT_LEVELS ("1" or "2"; anything else means 1). */
int cmf_cpu_act_levels(void);
/* Sets the levels for later cmf_matmul calls (process-wide; not while a matmul runs). Errors: CMF_E_ARG unless
 * levels is 1 or 2. */
cmf_status cmf_cpu_set_act_levels(int levels);

/* Load-time repack of the int8-family matrices for the CPU kernels (repack.c; layouts in kern.h, cmf_rp). A q4_block,
 * q4_tiled, q4tp, q8_row or q8_2f matrix is rewritten once into row groups of 16 interleaved rows (one vector load
 * feeds 16 rows) with their scales next to them (q4: f16 block scales as stored, q4tp's ladder rungs as exact f32; q8:
 * the row scales); cmf_matmul then reads only that copy for views starting on a 16-row boundary (8 for a split copy)
 * (decode and prefill alike, no per-call panel packing), and the mapping's bytes of the matrix are no longer read.
 * Memory: the copy is anonymous memory of the process, 18 bytes per 32 values for q4_block / q4_tiled (the same as
 * the file; 36 when cols % 32 != 0: two copy rows per row, kern.h "split"), 20 for q4tp (the file: about 16.7),
 * 32 + 4/16 per row group for q8 (the file: 32 + 2 per row); the file's pages, read once while repacking, stay as
 * clean page cache (counted in RSS while mapped, reclaimable). Process-wide registry: views of the
 * same stored tensor (tied embeddings, fused row views, skill sets) share one copy by reference count.
 *
 * cmf_cpu_repack_weight(w): makes (or takes another reference to) the copy of w's stored tensor and sets w->rp.
 *   Does nothing (CMF_OK, w->rp = NULL) for other dtypes, q4tp with cols % 32 != 0, when repacking is off
 *   (cmf_cpu_repack_enabled) or the active path has no repacked kernels. Errors: CMF_E_NOMEM (naming the size).
 * cmf_cpu_repack_release(w): drops w's reference (frees the copy with its last one) and clears w->rp; NULL rp fine.
 *   Every cmf_cpu_repack_weight that set rp needs one release before the stored bytes go away (the copy is found
 *   by the address of the stored tensor).
 * cmf_cpu_repack_enabled(): 1 unless the environment variable CMF_CPU_REPACK is "0" at the first call, or
 *   cmf_cpu_set_repack(0) was called (process-wide; for A/B runs and tests; affects later repack calls only).
 * cmf_cpu_repack_bytes(): bytes of all live copies. */
cmf_status cmf_cpu_repack_weight(cmf_weight *w);
/* cmf_cpu_repack_set(ws, n): cmf_cpu_repack_weight for each of the n matrices ws[0..n-1] (n >= 0), except that the
 *   copies it has to make (no live one found) go into ONE 64-byte aligned allocation in the order given, each right
 *   after the previous one, so the decode prefetch runs on from one matrix into the next (kern.h cmf_rp.pf_end;
 *   the layout of llama.cpp's single repacked CPU buffer). Copies found in the registry are shared as before, and a
 *   tensor listed twice gets one copy. The allocation is freed with the last of its copies. Every ws[i] needs one
 *   cmf_cpu_repack_release afterwards (any order). Errors: CMF_E_NOMEM (naming the size); then no ws[i] holds a
 *   reference (all rp NULL). */
cmf_status cmf_cpu_repack_set(cmf_weight *const *ws, int n);
/* cmf_cpu_repack_page_out(w): when w has a copy (w->rp), asks the kernel to reclaim the memory pages lying wholly
 *   inside w's stored tensor (madvise MADV_PAGEOUT, Linux >= 5.4; elsewhere nothing), so the file pages the repack
 *   read drop out of RSS. Contents are kept in every case: a file mapping's pages are read again from the file, and
 *   anonymous memory (a tensor built in memory) is swapped or left alone, never zeroed as MADV_DONTNEED would zero
 *   it; so the views that still read the stored bytes (row views off a 16-row boundary, other backends) stay
 *   right, only slower at their first touch. Returns the bytes advised (0: none, or the call failed). */
size_t cmf_cpu_repack_page_out(const cmf_weight *w);
/* The cpu backend's load_weights (backend_cpu.c) repacks every matrix of a weight set with cmf_cpu_repack_set in
 * forward order (per layer q, k, v, o, gate, up, down; lm_head last); cmf_cpu_weights_release drops those
 * references again. It then pages out the repacked stored tensors (cmf_cpu_repack_page_out), except the embedding
 * table of a tied head (read row by row by the embedding lookup). The model must call it for
 * each set the cpu backend loaded, before the set's views or the file mapping go away. */
struct cmf_weights;
void cmf_cpu_weights_release(struct cmf_weights *w, int n_layers);
/* The cpu backend's attention (backend_cpu.c) runs a step on the calling thread when its work (positions x n_heads x
 * head_dim, summed over the tokens) is below a threshold (16384 for a one-token step split by KV head, 65536
 * otherwise: waking the pool costs more), else on the pool. cmf_cpu_set_attn_serial_max(w) sets that threshold to w
 * multiply-adds for every step (0: always the pool; -1: the defaults again). Process-wide, for tests (the tiny test
 * models never reach the defaults) and A/B runs; never changes a result (the jobs' arithmetic does not depend on
 * the thread). */
void cmf_cpu_set_attn_serial_max(long long work);
void cmf_cpu_repack_release(cmf_weight *w);
int cmf_cpu_repack_enabled(void);
void cmf_cpu_set_repack(int on);
size_t cmf_cpu_repack_bytes(void);

/* RMSNorm of one vector: out = x / sqrt(mean(x^2) + eps) * (w or 1 + w when gemma_style). w may be NULL (no
 * weight). The mean is accumulated in double. out may alias x. */
void cmf_rmsnorm(float *out, const float *x, const float *w, int64_t n, float eps, int gemma_style);
/* cmf_rmsnorm of `rows` consecutive vectors of n floats (x and out row stride n; out may alias x), the same bits
 * row by row: each row's sum of squares is the same sequential double chain, up to 8 rows' chains interleaved (a
 * 16-token serve step normed its rows one after the other on one thread, ~1 us each, twice per layer). */
void cmf_rmsnorm_rows(float *out, const float *x, const float *w, int64_t rows, int64_t n, float eps,
                      int gemma_style);

/* Attention of G query heads that share one KV head over n cached positions (one block of a flash-decoding split):
 * with s_j = dot(q_g, k_j) * scale, then softcap * tanh(s_j / softcap) when softcap > 0 (Gemma 2), each head's
 * running state (m_g, l_g, o_g) = (max s, sum exp(s - m_g), sum exp(s - m_g) v, unnormalized) is extended by the n
 * positions, so that after all blocks softmax(s) v = o_g / l_g; states of disjoint ranges merge by rescaling with
 * exp(m - max m) (Dao et al. 2022, FlashAttention; flash-decoding). Start a state with cmf_attn_reset (m = -inf,
 * l = 0, o = 0). q_g = q + g*ldq [hd]; k_j = k + j*ldkv, v_j = v + j*ldkv [hd] (f32 KV cache rows); o_g at
 * o + g*ldo [hd], m_g at ml[g*ldml], l_g at ml[g*ldml + 1]. Positions are taken CMF_ATTN_SB at a time; scratch:
 * caller-owned, at least G * CMF_ATTN_SB floats. The dot products and p*v sums use the active path's kern_attn_qk /
 * kern_attn_pv. A NaN score (NaN in q_g or a key) makes the head's state NaN (m, l and o), so its output is NaN as
 * an exact softmax's would be, not dropped by the max / exp steps. */
enum { CMF_ATTN_SB = 64 };
void cmf_attn_chunk(const float *q, int64_t ldq, int G, const float *k, const float *v, int64_t ldkv, int n, int hd,
                    float scale, float softcap, float *scratch, float *o, int64_t ldo, float *ml, int64_t ldml);
/* Starts G empty states for cmf_attn_chunk: o_g = 0 [hd], m_g = -inf, l_g = 0 (layout as there). */
void cmf_attn_reset(int G, int hd, float *o, int64_t ldo, float *ml, int64_t ldml);

/* Merges nch partial results of cmf_attn_chunk for one query head into the attention output: record c at
 * part + c*cstride is (m, l, o[hd]) (an empty chunk has l = 0); out[hd] = sum_c exp(m_c - M) o_c / sum_c exp(m_c - M)
 * l_c with M = max_c m_c (flash-decoding's reduction); a NaN chunk (l = NaN) makes out NaN. */
void cmf_attn_merge(const float *part, int nch, int64_t cstride, int hd, float *out);

/* Softmax in place over n values (max-subtracted, f32). */
void cmf_softmax(float *x, int64_t n);

/* Activations, in place over n values: SiLU x*sigmoid(x) (the active path's vector kernel when it has one, kern.h
 * kern_silu: within 1e-6 relative of the expf form, which the scalar path and CMF_CPU_F32REF compute; elementwise,
 * so any split of x gives the same bits); GELU tanh approximation 0.5x(1+tanh(sqrt(2/pi)(x+0.044715x^3))). */
void cmf_silu(float *x, int64_t n);
void cmf_gelu_tanh(float *x, int64_t n);

#endif
