/* dequant.cu — whole-row decoding of CMF weights on the device (cmf_cuda_dequant) and the correctly rounded
 * exp2f (cmf_cuda_exp2f). The f32 values are cmf_dequant's bit for bit (CMF_FORMAT.md §2.1–2.6). */
#include <stdlib.h>

#include "backend/cuda/weights.cuh"

template <typename T> static __device__ __forceinline__ T conv(float v);
template <> __device__ __forceinline__ float conv<float>(float v) { return v; }
template <> __device__ __forceinline__ __half conv<__half>(float v) { return __float2half_rn(v); }
template <> __device__ __forceinline__ __nv_bfloat16 conv<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }

/* One block per row (grid.x = nrows, blocks of 256 threads); q4tp ladders computed once per row in shared memory. */
template <int DT, typename T> static __global__ void k_dequant(DevW w, int64_t row0, T *out) {
    __shared__ float lad[32];
    int64_t r = row0 + blockIdx.x;
    if constexpr (DT == CMF_DT_Q4TP) {
        if (threadIdx.x == 0) dev_q4tp_ladder(w.s1 + 4 * r, lad);
        __syncthreads();
    }
    T *o = out + (int64_t)blockIdx.x * w.cols;
    for (int64_t c = threadIdx.x; c < w.cols; c += blockDim.x) o[c] = conv<T>(dev_elem<DT>(w, r, c, lad));
}

/* The f16 output of the quantized dtypes, 16-byte stores (the prefill GEMM's row tiles and the f16 weight cache):
 * one block per row, one thread per 16 weights (q8_row, q8_2f: one 16-byte load) or per 32-weight tile (q4_tiled,
 * q4tp: the tile's 16 nibble bytes, its scale / ladder code once). Each weight is dev_elem's f32 product (the same
 * __fmul_rn operands, so cmf_dequant's value) rounded to f16 as k_dequant does: bit for bit its output. Needs
 * cols % 32 == 0 (q4: the tile; q8: two chunks) and a 16-byte aligned payload and output (checked by the caller). */
template <int DT> static __global__ void k_dequant_f16v(DevW w, int64_t row0, __half *out) {
    __shared__ float lad[32];
    const int64_t r = row0 + blockIdx.x;
    if constexpr (DT == CMF_DT_Q4TP) {
        if (threadIdx.x == 0) dev_q4tp_ladder(w.s1 + 4 * r, lad);
        __syncthreads();
    }
    __half *o = out + (int64_t)blockIdx.x * w.cols;
    if constexpr (DT == CMF_DT_Q8_ROW || DT == CMF_DT_Q8_2F) {
        const float sr = ld_f16u(w.s1 + 2 * r);
        for (int64_t c0 = 16 * (int64_t)threadIdx.x; c0 < w.cols; c0 += 16 * (int64_t)blockDim.x) {
            const uint4 q = __ldg((const uint4 *)(w.base + r * w.cols + c0));
            const int8_t *qb = (const int8_t *)&q;
            __align__(16) __half h[16];
#pragma unroll
            for (int k = 0; k < 16; k++) {
                float v = __fmul_rn((float)qb[k], sr);
                if constexpr (DT == CMF_DT_Q8_2F) v = __fmul_rn(v, ld_f16u(w.s2 + 2 * (c0 + k)));
                h[k] = __float2half_rn(v);
            }
            ((uint4 *)(o + c0))[0] = ((const uint4 *)h)[0];
            ((uint4 *)(o + c0))[1] = ((const uint4 *)h)[1];
        }
    } else {
        const int64_t gpr = w.cols >> 5;
        for (int64_t g = threadIdx.x; g < gpr; g += blockDim.x) {
            uint4 nb;
            float sc;
            if constexpr (DT == CMF_DT_Q4_TILED) { /* 18-byte tiles: 2-byte aligned, read as nine u16 */
                const uint16_t *t = (const uint16_t *)(w.base + (r * gpr + g) * 18);
                sc = dev_f16(__ldg(t));
                uint16_t u[8];
#pragma unroll
                for (int k = 0; k < 8; k++) u[k] = __ldg(t + 1 + k);
                nb = make_uint4(u[0] | (uint32_t)u[1] << 16, u[2] | (uint32_t)u[3] << 16, u[4] | (uint32_t)u[5] << 16,
                                u[6] | (uint32_t)u[7] << 16);
            } else {
                nb = __ldg((const uint4 *)(w.base + (r * gpr + g) * 16));
                sc = lad[dev_tp_code(w.s2 + r * w.stride, g)];
            }
            const uint8_t *b = (const uint8_t *)&nb;
            __align__(16) __half h[32];
#pragma unroll
            for (int k = 0; k < 32; k++) {
                const unsigned nib = (k & 1) ? (b[k >> 1] >> 4) : (b[k >> 1] & 15u);
                h[k] = __float2half_rn(__fmul_rn((float)((int)nib - 8), sc));
            }
            uint4 *dst = (uint4 *)(o + 32 * g);
#pragma unroll
            for (int k = 0; k < 4; k++) dst[k] = ((const uint4 *)h)[k];
        }
    }
}

/* Whether k_dequant_f16v serves (dtype, shape, alignment of payload and output); CMF_CUDA_DEQUANT_VEC=0 in the
 * environment (read once) keeps the element kernel (for A/B timing). */
static bool f16v_ok_dt(int dt, const DevW &w, const void *out) {
    static int on = -1;
    if (on < 0) {
        const char *e = getenv("CMF_CUDA_DEQUANT_VEC");
        on = !(e && e[0] == '0');
    }
    if (!on) return false;
    const bool q = dt == CMF_DT_Q8_ROW || dt == CMF_DT_Q8_2F || dt == CMF_DT_Q4_TILED || dt == CMF_DT_Q4TP;
    const bool al = dt == CMF_DT_Q4_TILED ? ((uintptr_t)w.base & 1) == 0 : ((uintptr_t)w.base & 15) == 0;
    return q && w.cols % 32 == 0 && al && ((uintptr_t)out & 15) == 0;
}

template <int DT>
static cmf_status launch_dequant(const DevW &dw, int64_t row0, int64_t nrows, void *out, int type, cudaStream_t s) {
    const bool vec = type == CMF_CUDA_F16 && f16v_ok_dt(DT, dw, out);
    for (int64_t done = 0; done < nrows;) {
        int64_t chunk = nrows - done > 1 << 30 ? 1 << 30 : nrows - done;
        size_t off = (size_t)(done * dw.cols);
        if (vec) {
            if constexpr (DT == CMF_DT_Q8_ROW || DT == CMF_DT_Q8_2F || DT == CMF_DT_Q4_TILED || DT == CMF_DT_Q4TP)
                k_dequant_f16v<DT><<<(unsigned)chunk, 128, 0, s>>>(dw, row0 + done, (__half *)out + off);
        } else if (type == CMF_CUDA_F32)
            k_dequant<DT, float><<<(unsigned)chunk, 256, 0, s>>>(dw, row0 + done, (float *)out + off);
        else if (type == CMF_CUDA_F16)
            k_dequant<DT, __half><<<(unsigned)chunk, 256, 0, s>>>(dw, row0 + done, (__half *)out + off);
        else
            k_dequant<DT, __nv_bfloat16><<<(unsigned)chunk, 256, 0, s>>>(dw, row0 + done, (__nv_bfloat16 *)out + off);
        CU_LAUNCHED("dequant kernel");
        done += chunk;
    }
    return CMF_OK;
}

extern "C" cmf_status cmf_cuda_dequant(const cmf_cuda_weight *w, int64_t row0, int64_t nrows, void *d_out,
                                       int out_type, cmf_cuda_stream stream) {
    cmf_status st = cmf_cuda_weight_check(w);
    if (st != CMF_OK) return st;
    if (row0 < 0 || nrows < 0 || row0 + nrows > w->rows)
        return cmf_err(CMF_E_ARG, "cuda_dequant: rows [%lld, %lld) outside [0, %lld)", (long long)row0,
                       (long long)(row0 + nrows), (long long)w->rows);
    if (out_type != CMF_CUDA_F32 && out_type != CMF_CUDA_F16 && out_type != CMF_CUDA_BF16)
        return cmf_err(CMF_E_ARG, "cuda_dequant: unknown output type %d", out_type);
    if (!d_out) return cmf_err(CMF_E_ARG, "cuda_dequant: d_out is NULL");
    if (nrows == 0) return CMF_OK;
    DevW dw = make_devw(w);
    cudaStream_t s = CU_STREAM(stream);
    st = CMF_OK;
#define DQ(DT) st = launch_dequant<DT>(dw, row0, nrows, d_out, out_type, s)
    CMF_CUDA_DISPATCH_DT(w->dtype, DQ)
#undef DQ
    return st;
}

static __global__ void k_exp2f(const float *in, float *out, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        out[i] = dev_exp2f_cr(in[i]);
}

extern "C" cmf_status cmf_cuda_exp2f(const float *d_in, float *d_out, int64_t n, cmf_cuda_stream stream) {
    if (n <= 0) return CMF_OK;
    k_exp2f<<<grid1d(n, 256), 256, 0, CU_STREAM(stream)>>>(d_in, d_out, n);
    CU_LAUNCHED("exp2f kernel");
    return CMF_OK;
}

/* Embedding rows by device token ids: out[t] = row ids[t] of w (cmf_dequant's f32 values) * mult. One block per token. */
template <int DT> static __global__ void k_embed(DevW w, const int32_t *ids, float mult, float *out) {
    __shared__ float lad[32];
    const int64_t r = ids[blockIdx.x];
    if constexpr (DT == CMF_DT_Q4TP) {
        if (threadIdx.x == 0) dev_q4tp_ladder(w.s1 + 4 * r, lad);
        __syncthreads();
    }
    float *o = out + (int64_t)blockIdx.x * w.cols;
    for (int64_t c = threadIdx.x; c < w.cols; c += blockDim.x) {
        const float v = dev_elem<DT>(w, r, c, lad);
        o[c] = mult != 1.0f ? v * mult : v;
    }
}

extern "C" cmf_status cmf_cuda_embed(const cmf_cuda_weight *w, const int32_t *d_ids, int64_t n, float mult,
                                     float *d_out, cmf_cuda_stream stream) {
    cmf_status st = cmf_cuda_weight_check(w);
    if (st != CMF_OK) return st;
    if (n < 0 || n > 0x7fffffff || !d_ids || !d_out) return cmf_err(CMF_E_ARG, "cuda_embed: n = %lld or NULL buffer", (long long)n);
    if (n == 0) return CMF_OK;
    DevW dw = make_devw(w);
    cudaStream_t s = CU_STREAM(stream);
#define EM(DT) k_embed<DT><<<(unsigned)n, 256, 0, s>>>(dw, d_ids, mult, d_out)
    CMF_CUDA_DISPATCH_DT(w->dtype, EM)
#undef EM
    CU_LAUNCHED("embed kernel");
    return CMF_OK;
}
