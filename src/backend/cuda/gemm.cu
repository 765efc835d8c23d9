/* gemm.cu — prefill products y = x W^T for any number of tokens (cmf_cuda_gemm), three ways:
 *  cuBLAS: row tiles of W decoded to f16 (bf16 weights and f16 weights are used as stored, f32 as f32) in the
 *          context's scratch, activations converted to the same type once, cublasGemmEx with f32 accumulation;
 *  int8:   q8_row / q8_2f weights read as stored by an int8 tensor-core GEMM over int8 levels of the activations
 *          (block comment "q8 weights on the integer tensor cores"); the AUTO choice for them;
 *  tiled:  one kernel, 64x64 output tiles, W decoded element by element (weights.cuh, exact values) and x
 *          converted into shared memory as f16, WMMA 16x16x16 tensor-core fragments with f32 accumulators.
 * Which wins at which size is measured by bench/cuda (RESULTS.md). */
#include <cublas_v2.h>
#include <mma.h>
#include <stdlib.h>

#include <type_traits>

#include "backend/cuda/weights.cuh"

struct cmf_cuda_ctx {
    cublasHandle_t blas;
    void *scratch;
    size_t scratch_bytes;
};

static cmf_status blas_fail(cublasStatus_t s, const char *what) {
    return cmf_err(CMF_E_IO, "cublas: %s: %s (%d)", what, cublasGetStatusString(s), (int)s);
}

extern "C" cmf_status cmf_cuda_ctx_create(cmf_cuda_ctx **ctx, size_t scratch_bytes) {
    if (!ctx) return cmf_err(CMF_E_ARG, "cuda_ctx_create: ctx is NULL");
    *ctx = NULL;
    cmf_cuda_ctx *c = (cmf_cuda_ctx *)calloc(1, sizeof *c);
    if (!c) return cmf_err(CMF_E_NOMEM, "cuda_ctx_create: out of host memory");
    c->scratch_bytes = scratch_bytes ? scratch_bytes : (size_t)256 << 20;
    cmf_status st = cmf_cuda_malloc(&c->scratch, c->scratch_bytes);
    if (st != CMF_OK) {
        free(c);
        return st;
    }
    cublasStatus_t bs = cublasCreate(&c->blas);
    if (bs != CUBLAS_STATUS_SUCCESS) {
        cmf_cuda_free(c->scratch);
        free(c);
        return blas_fail(bs, "cublasCreate");
    }
    *ctx = c;
    return CMF_OK;
}

extern "C" void cmf_cuda_ctx_free(cmf_cuda_ctx *ctx) {
    if (!ctx) return;
    cublasDestroy(ctx->blas);
    cmf_cuda_free(ctx->scratch);
    free(ctx);
}

template <typename T> static __global__ void k_cvt(T *out, const float *in, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        if constexpr (std::is_same<T, __half>::value) out[i] = __float2half_rn(in[i]);
        else out[i] = __float2bfloat16_rn(in[i]);
    }
}
/* The same values 4 at a time (16-byte loads, 8-byte stores): n4 groups of 4; in / out 16- / 8-byte aligned. */
template <typename T> static __global__ void k_cvt4(T *out, const float *in, int64_t n4) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n4; i += (int64_t)gridDim.x * blockDim.x) {
        const float4 v = ((const float4 *)in)[i];
        __align__(8) T h[4];
        if constexpr (std::is_same<T, __half>::value)
            h[0] = __float2half_rn(v.x), h[1] = __float2half_rn(v.y), h[2] = __float2half_rn(v.z),
            h[3] = __float2half_rn(v.w);
        else
            h[0] = __float2bfloat16_rn(v.x), h[1] = __float2bfloat16_rn(v.y), h[2] = __float2bfloat16_rn(v.z),
            h[3] = __float2bfloat16_rn(v.w);
        ((uint2 *)out)[i] = *(const uint2 *)h;
    }
}
/* f32 activations -> f16 / bf16 (round to nearest even), n values. */
template <typename T> static cmf_status cvt_act(T *out, const float *in, int64_t n, cudaStream_t s) {
    if (n % 4 == 0 && ((uintptr_t)in & 15) == 0 && ((uintptr_t)out & 7) == 0)
        k_cvt4<T><<<grid1d(n / 4, 256), 256, 0, s>>>(out, in, n / 4);
    else
        k_cvt<T><<<grid1d(n, 256), 256, 0, s>>>(out, in, n);
    CU_LAUNCHED("gemm: activation conversion");
    return CMF_OK;
}

static cmf_status gemm_cublas(cmf_cuda_ctx *ctx, const cmf_cuda_weight *w, const float *x, float *y, int64_t n,
                              cudaStream_t s) {
    const int64_t rows = w->rows, cols = w->cols;
    cublasStatus_t bs = cublasSetStream(ctx->blas, s);
    if (bs != CUBLAS_STATUS_SUCCESS) return blas_fail(bs, "cublasSetStream");
    const float one = 1.0f, zero = 0.0f;
    if (w->dtype == CMF_DT_F32) {
        bs = cublasGemmEx(ctx->blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)rows, (int)n, (int)cols, &one, w->d_data,
                          CUDA_R_32F, (int)cols, x, CUDA_R_32F, (int)cols, &zero, y, CUDA_R_32F, (int)rows,
                          CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
        return bs == CUBLAS_STATUS_SUCCESS ? CMF_OK : blas_fail(bs, "cublasGemmEx f32");
    }
    const bool bf = w->dtype == CMF_DT_BF16;
    const cudaDataType_t ty = bf ? CUDA_R_16BF : CUDA_R_16F;
    size_t xbytes = ((size_t)n * (size_t)cols * 2 + 255) & ~(size_t)255;
    if (xbytes > ctx->scratch_bytes)
        return cmf_err(CMF_E_ARG, "cuda_gemm: scratch %zu bytes < %zu for the converted activations",
                       ctx->scratch_bytes, xbytes);
    void *xc = ctx->scratch;
    cmf_status st = bf ? cvt_act<__nv_bfloat16>((__nv_bfloat16 *)xc, x, n * cols, s)
                       : cvt_act<__half>((__half *)xc, x, n * cols, s);
    if (st != CMF_OK) return st;
    const bool direct = w->dtype == CMF_DT_F16 || bf;
    int64_t tile = direct ? rows : (int64_t)((ctx->scratch_bytes - xbytes) / ((size_t)cols * 2)) / 16 * 16;
    if (tile > rows) tile = rows;
    if (tile < 16 && tile < rows)
        return cmf_err(CMF_E_ARG, "cuda_gemm: scratch %zu bytes too small for a 16-row tile of %lld cols",
                       ctx->scratch_bytes, (long long)cols);
    uint8_t *wt = (uint8_t *)ctx->scratch + xbytes;
    for (int64_t r0 = 0; r0 < rows; r0 += tile) {
        int64_t m = rows - r0 < tile ? rows - r0 : tile;
        const void *a = direct ? (const void *)((const uint8_t *)w->d_data + (size_t)r0 * cols * 2) : wt;
        if (!direct) {
            st = cmf_cuda_dequant(w, r0, m, wt, CMF_CUDA_F16, (cmf_cuda_stream)s);
            if (st != CMF_OK) return st;
        }
        bs = cublasGemmEx(ctx->blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)m, (int)n, (int)cols, &one, a, ty, (int)cols, xc,
                          ty, (int)cols, &zero, y + r0, CUDA_R_32F, (int)rows, CUBLAS_COMPUTE_32F,
                          CUBLAS_GEMM_DEFAULT);
        if (bs != CUBLAS_STATUS_SUCCESS) return blas_fail(bs, "cublasGemmEx");
    }
    return CMF_OK;
}

/* ---- q8 weights on the integer tensor cores ----------------------------------------------------------------
 * q8_row W[r][c] = q[r][c] * s_r (q8_2f: * s_c as well, §2.3-2.4), so y[t][r] = s_r * sum_c q[r][c] x'[t][c] with
 * x' = x (q8_2f: x[c] * s_c). x' is written as L levels of int8 per token (the CPU kernels' multi-level activations,
 * src/backend/cpu, per token here): x' ~= a1 q1 + ... + aL qL, a1 = max|x'| / 127, q1 = round(x' / a1), each next
 * level the same over the remainder, so |x' - sum a_l q_l| <= max|x'| / (2 * 127 * 254^(L-1)): L = 2 is finer than
 * bf16 rounding while max|x'| stays under ~250x the typical |x'|, L = 3 (the default) finer than f16 rounding up to
 * ~4,000x (activation outliers). One int8 GEMM (cublasGemmEx CUDA_R_8I -> CUDA_R_32I, CUBLAS_COMPUTE_32I, TN: the
 * layout the IMMA kernels take) over the L*n stacked rows [q1; ...; qL] reads the weights as stored (no dequant
 * pass, no copy); the epilogue is y[t][r] = s_r * sum_l a_l[t] C[l n + t][r]. Sums are exact in int32 (|C| <= 127^2
 * cols < 2^31 for cols < 133,000). CMF_CUDA_Q8_LEVELS=2 selects two levels, CMF_CUDA_Q8_GEMM=f16 the dequantized f16
 * path (both read once). */

#define IM_THREADS 256

static __device__ __forceinline__ float block_max256(float v, float *sh) {
    v = warp_max(v);
    if ((threadIdx.x & 31) == 0) sh[threadIdx.x >> 5] = v;
    __syncthreads();
    float m = sh[0];
#pragma unroll
    for (int i = 1; i < IM_THREADS / 32; i++) m = fmaxf(m, sh[i]);
    __syncthreads();
    return m;
}

/* 4 values of x'[t] from column c (cols % 4 == 0): x, times the q8_2f column scales when colsc is not NULL. */
static __device__ __forceinline__ void im_load4(const float *xr, const uint8_t *colsc, int64_t c, float f[4]) {
    const float4 v = *(const float4 *)(xr + c);
    f[0] = v.x, f[1] = v.y, f[2] = v.z, f[3] = v.w;
    if (colsc)
#pragma unroll
        for (int k = 0; k < 4; k++) f[k] *= ld_f16u(colsc + 2 * (c + k));
}

/* Block t (IM_THREADS threads): token t's L int8 levels into q[l * nc + t], their scales into a[l * nc + t]. The
 * remainder after the levels so far is recomputed from x' and the stored levels (no extra buffer). */
template <int L>
static __global__ void __launch_bounds__(IM_THREADS) k_quant_levels(const float *__restrict__ x, int64_t cols,
                                                                     const uint8_t *colsc, int nc,
                                                                     int8_t *__restrict__ q, float *__restrict__ a) {
    __shared__ float sh[IM_THREADS / 32];
    const int t = blockIdx.x;
    const float *xr = x + (int64_t)t * cols;
    float al[L];
#pragma unroll
    for (int l = 0; l < L; l++) {
        float m = 0.0f; /* max |remainder| after levels 0 .. l-1 */
        for (int64_t c = 4 * (int64_t)threadIdx.x; c < cols; c += 4 * IM_THREADS) {
            float f[4];
            im_load4(xr, colsc, c, f);
#pragma unroll
            for (int j = 0; j < l; j++) {
                const char4 p = *(const char4 *)(q + ((int64_t)j * nc + t) * cols + c);
                f[0] -= (float)p.x * al[j], f[1] -= (float)p.y * al[j], f[2] -= (float)p.z * al[j],
                    f[3] -= (float)p.w * al[j];
            }
            m = fmaxf(m, fmaxf(fmaxf(fabsf(f[0]), fabsf(f[1])), fmaxf(fabsf(f[2]), fabsf(f[3]))));
        }
        al[l] = block_max256(m, sh) / 127.0f;
        const float inv = al[l] > 0.0f ? 1.0f / al[l] : 0.0f;
        for (int64_t c = 4 * (int64_t)threadIdx.x; c < cols; c += 4 * IM_THREADS) {
            float f[4];
            im_load4(xr, colsc, c, f);
#pragma unroll
            for (int j = 0; j < l; j++) {
                const char4 p = *(const char4 *)(q + ((int64_t)j * nc + t) * cols + c);
                f[0] -= (float)p.x * al[j], f[1] -= (float)p.y * al[j], f[2] -= (float)p.z * al[j],
                    f[3] -= (float)p.w * al[j];
            }
            char4 o;
            o.x = (signed char)fminf(fmaxf(rintf(f[0] * inv), -127.0f), 127.0f);
            o.y = (signed char)fminf(fmaxf(rintf(f[1] * inv), -127.0f), 127.0f);
            o.z = (signed char)fminf(fmaxf(rintf(f[2] * inv), -127.0f), 127.0f);
            o.w = (signed char)fminf(fmaxf(rintf(f[3] * inv), -127.0f), 127.0f);
            *(char4 *)(q + ((int64_t)l * nc + t) * cols + c) = o;
        }
        if (threadIdx.x == 0) a[(int64_t)l * nc + t] = al[l];
    }
}

/* y[t][r] = s_r * sum_l a[l nc + t] C[l nc + t][r] for r < rows, t = blockIdx.y < nc (C column-major, ld rows; y rows
 * of `rows` floats). */
template <int L>
static __global__ void k_imma_out(const int32_t *__restrict__ C, const float *__restrict__ a, const uint8_t *rs,
                                  int64_t rows, int nc, float *__restrict__ y) {
    const int64_t t = blockIdx.y, r = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (r >= rows) return;
    const int64_t i = t * rows + r;
    float v = 0.0f;
#pragma unroll
    for (int l = 0; l < L; l++) v += a[(int64_t)l * nc + t] * (float)C[i + (int64_t)l * nc * rows];
    y[i] = v * ld_f16u(rs + 2 * r);
}

/* Levels of the int8 path: 0 = off (CMF_CUDA_Q8_GEMM=f16), else CMF_CUDA_Q8_LEVELS (2 or 3; default 3). */
static int imma_levels(void) {
    static int lv = -1;
    if (lv < 0) {
        const char *e = getenv("CMF_CUDA_Q8_GEMM"), *l = getenv("CMF_CUDA_Q8_LEVELS");
        lv = e && e[0] == 'f' ? 0 : l && l[0] == '2' ? 2 : 3;
    }
    return lv;
}

/* Whether the int8 path applies: q8 weights, int8 GEMM alignment (cols and rows % 4, payload and activations 16-byte
 * aligned), int32 sums that cannot overflow, and not turned off. */
static bool imma_ok(const cmf_cuda_weight *w, const float *x) {
    return imma_levels() && (w->dtype == CMF_DT_Q8_ROW || w->dtype == CMF_DT_Q8_2F) && w->cols % 4 == 0 &&
           w->rows % 4 == 0 && w->cols < 133000 && ((uintptr_t)w->d_data & 15) == 0 && ((uintptr_t)x & 15) == 0;
}

template <int L>
static cmf_status gemm_imma(cmf_cuda_ctx *ctx, const cmf_cuda_weight *w, const float *x, float *y, int64_t n,
                            cudaStream_t s, bool *unsupported) {
    *unsupported = false;
    const int64_t rows = w->rows, cols = w->cols;
    const DevW dw = make_devw(w);
    /* scratch per token: L int8 rows, L scales, L int32 output rows */
    const size_t per = L * ((size_t)cols + 4 + 4 * (size_t)rows);
    int64_t nc = (int64_t)((ctx->scratch_bytes - 1024) / per);
    if (nc > n) nc = n;
    if (nc > 32768) nc = 32768; /* grid.y of the epilogue */
    if (nc < 1)
        return cmf_err(CMF_E_ARG, "cuda_gemm: scratch %zu bytes too small for one token of %lld x %lld",
                       ctx->scratch_bytes, (long long)rows, (long long)cols);
    cublasStatus_t bs = cublasSetStream(ctx->blas, s);
    if (bs != CUBLAS_STATUS_SUCCESS) return blas_fail(bs, "cublasSetStream");
    int8_t *q = (int8_t *)ctx->scratch;
    float *a = (float *)((uint8_t *)ctx->scratch + ((L * (size_t)nc * cols + 255) & ~(size_t)255));
    int32_t *C = (int32_t *)((uint8_t *)a + ((4 * L * (size_t)nc + 255) & ~(size_t)255));
    const int32_t one = 1, zero = 0;
    for (int64_t t0 = 0; t0 < n; t0 += nc) {
        const int m = (int)(n - t0 < nc ? n - t0 : nc);
        k_quant_levels<L><<<(unsigned)m, IM_THREADS, 0, s>>>(x + t0 * cols, cols,
                                                               w->dtype == CMF_DT_Q8_2F ? dw.s2 : nullptr, m, q, a);
        CU_LAUNCHED("gemm: int8 activation levels");
        bs = cublasGemmEx(ctx->blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)rows, L * m, (int)cols, &one, w->d_data,
                          CUDA_R_8I, (int)cols, q, CUDA_R_8I, (int)cols, &zero, C, CUDA_R_32I, (int)rows,
                          CUBLAS_COMPUTE_32I, CUBLAS_GEMM_DEFAULT);
        if (bs == CUBLAS_STATUS_NOT_SUPPORTED && t0 == 0) {
            *unsupported = true; /* this cuBLAS has no int8 kernel for the shape: the caller takes the f16 path */
            return CMF_OK;
        }
        if (bs != CUBLAS_STATUS_SUCCESS) return blas_fail(bs, "cublasGemmEx int8");
        k_imma_out<L><<<dim3((unsigned)((rows + 255) / 256), (unsigned)m), 256, 0, s>>>(C, a, dw.s1, rows, m,
                                                                                        y + t0 * rows);
        CU_LAUNCHED("gemm: int8 epilogue");
    }
    return CMF_OK;
}

/* ---- the tiled tensor-core kernel -------------------------------------------------------------------------- */

#define TG_BM 64
#define TG_BN 64
#define TG_BK 32
#define TG_LD (TG_BK + 8)

template <int DT>
static __global__ void __launch_bounds__(128) k_gemm_tiled(DevW w, const float *__restrict__ x, float *__restrict__ y,
                                                           int64_t n) {
    using namespace nvcuda;
    __shared__ __align__(32) __half ws[TG_BM * TG_LD];
    __shared__ __align__(32) __half xs[TG_BN * TG_LD];
    __shared__ __align__(32) float cs[TG_BM * (TG_BN + 4)];
    __shared__ float lad[DT == CMF_DT_Q4TP ? TG_BM : 1][32];
    const int64_t r0 = (int64_t)blockIdx.x * TG_BM, t0 = (int64_t)blockIdx.y * TG_BN;
    const int tid = threadIdx.x, warp = tid >> 5;
    if constexpr (DT == CMF_DT_Q4TP) {
        if (tid < TG_BM && r0 + tid < w.rows) dev_q4tp_ladder(w.s1 + 4 * (r0 + tid), lad[tid]);
        __syncthreads();
    }
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[2][2];
#pragma unroll
    for (int i = 0; i < 2; i++)
#pragma unroll
        for (int j = 0; j < 2; j++) wmma::fill_fragment(acc[i][j], 0.0f);
    const int wr = (warp >> 1) * 32, wc = (warp & 1) * 32;
    for (int64_t k0 = 0; k0 < w.cols; k0 += TG_BK) {
        for (int e = tid; e < TG_BM * TG_BK; e += 128) {
            int rr = e / TG_BK, kk = e % TG_BK;
            int64_t r = r0 + rr, c = k0 + kk;
            float v = 0.0f;
            if (r < w.rows && c < w.cols) v = dev_elem<DT>(w, r, c, DT == CMF_DT_Q4TP ? lad[rr] : nullptr);
            ws[rr * TG_LD + kk] = __float2half_rn(v);
            int64_t t = t0 + rr;
            float xv = (t < n && c < w.cols) ? __ldg(x + t * w.cols + c) : 0.0f;
            xs[rr * TG_LD + kk] = __float2half_rn(xv);
        }
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < TG_BK; kk += 16) {
            wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> fa[2];
            wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::col_major> fb[2];
#pragma unroll
            for (int i = 0; i < 2; i++) wmma::load_matrix_sync(fa[i], ws + (wr + 16 * i) * TG_LD + kk, TG_LD);
#pragma unroll
            for (int j = 0; j < 2; j++) wmma::load_matrix_sync(fb[j], xs + (wc + 16 * j) * TG_LD + kk, TG_LD);
#pragma unroll
            for (int i = 0; i < 2; i++)
#pragma unroll
                for (int j = 0; j < 2; j++) wmma::mma_sync(acc[i][j], fa[i], fb[j], acc[i][j]);
        }
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < 2; i++)
#pragma unroll
        for (int j = 0; j < 2; j++)
            wmma::store_matrix_sync(cs + (wr + 16 * i) * (TG_BN + 4) + wc + 16 * j, acc[i][j], TG_BN + 4,
                                    wmma::mem_row_major);
    __syncthreads();
    for (int e = tid; e < TG_BM * TG_BN; e += 128) {
        int tt = e / TG_BM, rr = e % TG_BM; /* consecutive threads: consecutive rows of one token (coalesced) */
        if (r0 + rr < w.rows && t0 + tt < n) y[(t0 + tt) * w.rows + r0 + rr] = cs[rr * (TG_BN + 4) + tt];
    }
}

template <int DT>
static cmf_status launch_tiled(const DevW &dw, const float *x, float *y, int64_t n, cudaStream_t s) {
    dim3 grid((unsigned)((dw.rows + TG_BM - 1) / TG_BM), (unsigned)((n + TG_BN - 1) / TG_BN));
    k_gemm_tiled<DT><<<grid, 128, 0, s>>>(dw, x, y, n);
    CU_LAUNCHED("tiled gemm kernel");
    return CMF_OK;
}

extern "C" cmf_status cmf_cuda_gemm(cmf_cuda_ctx *ctx, const cmf_cuda_weight *w, const float *d_x, float *d_y,
                                    int64_t n, int algo, cmf_cuda_stream stream) {
    cmf_status st = cmf_cuda_weight_check(w);
    if (st != CMF_OK) return st;
    if (!ctx) return cmf_err(CMF_E_ARG, "cuda_gemm: ctx is NULL");
    if (n < 1 || n > 65535 * (int64_t)TG_BN) return cmf_err(CMF_E_ARG, "cuda_gemm: n = %lld out of range", (long long)n);
    if (!d_x || !d_y) return cmf_err(CMF_E_ARG, "cuda_gemm: NULL activations or output");
    cudaStream_t s = CU_STREAM(stream);
    if (algo == CMF_CUDA_GEMM_AUTO && imma_ok(w, d_x)) {
        bool unsupported = false;
        st = imma_levels() == 2 ? gemm_imma<2>(ctx, w, d_x, d_y, n, s, &unsupported)
                                : gemm_imma<3>(ctx, w, d_x, d_y, n, s, &unsupported);
        if (st != CMF_OK || !unsupported) return st;
    }
    if (algo == CMF_CUDA_GEMM_AUTO || algo == CMF_CUDA_GEMM_CUBLAS) return gemm_cublas(ctx, w, d_x, d_y, n, s);
    if (algo != CMF_CUDA_GEMM_TILED) return cmf_err(CMF_E_ARG, "cuda_gemm: unknown algo %d", algo);
    DevW dw = make_devw(w);
#define TG(DT) st = launch_tiled<DT>(dw, d_x, d_y, n, s)
    CMF_CUDA_DISPATCH_DT(w->dtype, TG)
#undef TG
    return st;
}
