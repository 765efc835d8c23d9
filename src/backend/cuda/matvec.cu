/* matvec.cu — decode-time products y = x W^T for 1..8 tokens, reading CMF weights in place (CMF_FORMAT.md §2).
 *
 * Design: blocks of 4 warps, each warp owns R = 2 consecutive rows. A lane takes one 16-byte chunk of each row per
 * step (f32: 4 weights, f16/bf16: 8, q8: 16, q4: one 32-weight tile; q4_tiled's 18-byte tiles are read as nine
 * 2-byte words), decodes it to f32 in registers and does N fused multiply-adds per weight against the
 * activations (read through the read-only cache; the vectors are small and shared by every warp). Per-tile
 * scales (q4) multiply the tile's partial sum, per-row scales (q8) the row's total. The 32 lanes' sums are
 * combined with shuffles at the end. Widths that break 16-byte alignment take an exact per-element path. */
#include <string.h>

#include "backend/cuda/weights.cuh"

#define MV_WARPS 4
#define MV_R 2

template <int DT> struct Chunk {
    static constexpr int CH = DT == CMF_DT_F32 ? 4 : (DT == CMF_DT_F16 || DT == CMF_DT_BF16) ? 8
                            : (DT == CMF_DT_Q8_ROW || DT == CMF_DT_Q8_2F)                   ? 16
                                                                                            : 32;
};

/* nib - 8 as a float without an int->float conversion: the bits 0x4B000000 | nib are 2^23 + nib. */
static __device__ __forceinline__ float nib_val(unsigned nib) { return __uint_as_float(0x4B000000u | nib) - 8388616.0f; }

/* Before pdl_wait (common.cuh): L2 prefetch of what the warp's first two steps read of rows row[0 .. MV_R) (the
 * main plane of the weights only, up to 2 KiB a row), so those loads start while the previous kernel of the step
 * ends. Only for matrices of at most MV_PREFETCH_MAX bytes (w.prefetch, set by the launchers): on the H200 the
 * whole-row prefetch took Qwen3-0.6B decode from 689 to 809 tok/s but cost 10-35 % of matvec bandwidth on large
 * matrices and Llama-8B decode fell from 244 to 200 tok/s (bench/cuda/RESULTS.md); small matrices are
 * latency-bound, large ones bandwidth-bound. */
#define MV_PREFETCH_MAX (16ll << 20)
template <int DT>
static __device__ __forceinline__ void mv_prefetch(const DevW &w, const int64_t (&row)[MV_R], int lane) {
    if (!w.prefetch) return;
    int64_t bytes;
    if constexpr (DT == CMF_DT_F32) bytes = w.cols * 4;
    else if constexpr (DT == CMF_DT_F16 || DT == CMF_DT_BF16) bytes = w.cols * 2;
    else if constexpr (DT == CMF_DT_Q8_ROW || DT == CMF_DT_Q8_2F) bytes = w.cols;
    else if constexpr (DT == CMF_DT_Q4_TILED) bytes = w.stride * 18;
    else bytes = (w.cols >> 5) * 16;
    const int64_t span = bytes < 2 * 32 * 18 ? bytes : 2 * 32 * 18; /* two steps of 32 lanes */
    for (int j = lane; j < MV_R * 16; j += 32) {
        const int i = j / 16;
        const int64_t off = (int64_t)(j % 16) * 128;
        if (off < span) prefetch_l2(w.base + row[i] * bytes + off);
    }
}

/* Whether matvec prefetches weight w before its PDL wait (see mv_prefetch). */
static int mv_small(const cmf_cuda_weight *w) {
    uint32_t shape[2] = {(uint32_t)w->rows, (uint32_t)w->cols};
    uint64_t nbytes = 0;
    return cmf_dtype_nbytes(w->dtype, 2, shape, &nbytes) == 1 && nbytes <= (uint64_t)MV_PREFETCH_MAX;
}

/* Decodes the chunk of row `r` at column c0 into v[CH] (unscaled for q4 / q8) and the chunk scale *cs (q4). */
template <int DT>
static __device__ __forceinline__ void load_chunk(const DevW &w, int64_t r, int64_t c0, float *v, float *cs,
                                                  const float *lad) {
    constexpr int CH = Chunk<DT>::CH;
    if constexpr (DT == CMF_DT_F32) {
        const void *p = (const float *)w.base + r * w.cols + c0;
        const uint4 a = CMF_CUDA_W_EF ? ld_w16_ef(p) : __ldg((const uint4 *)p);
        v[0] = __uint_as_float(a.x), v[1] = __uint_as_float(a.y), v[2] = __uint_as_float(a.z), v[3] = __uint_as_float(a.w);
    } else if constexpr (DT == CMF_DT_F16 || DT == CMF_DT_BF16) {
        const void *p = (const uint16_t *)w.base + r * w.cols + c0;
        const uint4 a = CMF_CUDA_W_EF ? ld_w16_ef(p) : __ldg((const uint4 *)p);
        uint32_t u[4] = {a.x, a.y, a.z, a.w};
#pragma unroll
        for (int k = 0; k < 4; k++) {
            if constexpr (DT == CMF_DT_F16) {
                float2 f = __half22float2(*(const __half2 *)&u[k]);
                v[2 * k] = f.x, v[2 * k + 1] = f.y;
            } else {
                v[2 * k] = __uint_as_float(u[k] << 16), v[2 * k + 1] = __uint_as_float(u[k] & 0xffff0000u);
            }
        }
    } else if constexpr (DT == CMF_DT_Q8_ROW || DT == CMF_DT_Q8_2F) {
        const void *p = w.base + r * w.cols + c0;
        const uint4 a = CMF_CUDA_W_EF ? ld_w16_ef(p) : __ldg((const uint4 *)p);
        uint32_t u[4] = {a.x, a.y, a.z, a.w};
        /* int8 -> f32 without I2F: bytes flipped to b + 128, placed as the low mantissa byte of 2^23, minus
         * 2^23 + 128 (exact; one PRMT and one FADD per weight) */
#pragma unroll
        for (int k = 0; k < 16; k++) {
            const uint32_t bits = __byte_perm(u[k >> 2] ^ 0x80808080u, 0x4B000000u, (unsigned)(k & 3) | 0x7440u);
            v[k] = __uint_as_float(bits) - 8388736.0f;
        }
        (void)CH;
    } else if constexpr (DT == CMF_DT_Q4_TILED) {
        const uint16_t *t = (const uint16_t *)(w.base + (r * w.stride + (c0 >> 5)) * 18);
        *cs = dev_f16(__ldg(t));
#pragma unroll
        for (int k = 0; k < 8; k++) {
            unsigned b = __ldg(t + 1 + k);
            v[4 * k + 0] = nib_val(b & 15u), v[4 * k + 1] = nib_val((b >> 4) & 15u);
            v[4 * k + 2] = nib_val((b >> 8) & 15u), v[4 * k + 3] = nib_val((b >> 12) & 15u);
        }
    } else if constexpr (DT == CMF_DT_Q4TP) {
        int64_t g = c0 >> 5;
        uint4 a = __ldg((const uint4 *)(w.base + (r * (w.cols >> 5) + g) * 16));
        uint32_t u[4] = {a.x, a.y, a.z, a.w};
#pragma unroll
        for (int k = 0; k < 32; k++) v[k] = nib_val((u[k >> 3] >> (4 * (k & 7))) & 15u);
        *cs = lad[dev_tp_code(w.s2 + r * w.stride, g)];
    }
}

/* One chunk of CH columns of MV_R decoded rows v against N activation rows x[t][c0 .. c0+CH): acc[i][t] += the
 * chunk's dot product (times the tile scale cs[i] for the tiled q4 formats), in one fixed FMA order so that every
 * matvec kernel built on it gives the same bits. */
template <int N, int CH, bool TILE_SCALE>
static __device__ __forceinline__ void mv_chunk_dot(const float (&v)[MV_R][CH], const float (&cs)[MV_R],
                                                    const float *__restrict__ x, int64_t cols, int64_t c0,
                                                    float (&acc)[MV_R][N]) {
#pragma unroll
    for (int t = 0; t < N; t++) {
        const float *xp = x + (int64_t)t * cols + c0;
        float part[MV_R];
#pragma unroll
        for (int i = 0; i < MV_R; i++) part[i] = 0.0f;
#pragma unroll
        for (int k = 0; k < CH; k += 4) {
            float4 xv = __ldg((const float4 *)(xp + k));
#pragma unroll
            for (int i = 0; i < MV_R; i++) {
                part[i] = fmaf(v[i][k], xv.x, part[i]);
                part[i] = fmaf(v[i][k + 1], xv.y, part[i]);
                part[i] = fmaf(v[i][k + 2], xv.z, part[i]);
                part[i] = fmaf(v[i][k + 3], xv.w, part[i]);
            }
        }
#pragma unroll
        for (int i = 0; i < MV_R; i++) {
            if constexpr (TILE_SCALE)
                acc[i][t] = fmaf(part[i], cs[i], acc[i][t]);
            else
                acc[i][t] += part[i];
        }
    }
}

template <int DT, int N>
static __global__ void __launch_bounds__(128) k_matvec(DevW w, const float *__restrict__ x, float *__restrict__ y) {
    constexpr int CH = Chunk<DT>::CH;
    constexpr bool TILE_SCALE = DT == CMF_DT_Q4_TILED || DT == CMF_DT_Q4TP;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int64_t rbase = ((int64_t)blockIdx.x * MV_WARPS + warp) * MV_R;
    if (rbase >= w.rows) return; /* whole warp: no block barrier follows */
    __shared__ float lad[MV_WARPS][MV_R][32];
    int64_t row[MV_R];
#pragma unroll
    for (int i = 0; i < MV_R; i++) row[i] = rbase + i < w.rows ? rbase + i : w.rows - 1;
    mv_prefetch<DT>(w, row, lane);
    pdl_wait();
    pdl_trigger();
    if constexpr (DT == CMF_DT_Q4TP) {
        int64_t rr = rbase + lane < w.rows ? rbase + lane : w.rows - 1;
        if (lane < MV_R) dev_q4tp_ladder(w.s1 + 4 * rr, lad[warp][lane]);
        __syncwarp();
    }
    const int64_t cols = w.cols;
    float acc[MV_R][N];
#pragma unroll
    for (int i = 0; i < MV_R; i++)
#pragma unroll
        for (int t = 0; t < N; t++) acc[i][t] = 0.0f;

#pragma unroll 2
    for (int64_t c0 = (int64_t)lane * CH; c0 < cols; c0 += 32 * CH) {
        float v[MV_R][CH], cs[MV_R];
#pragma unroll
        for (int i = 0; i < MV_R; i++) load_chunk<DT>(w, row[i], c0, v[i], &cs[i], lad[warp][i]);
        if constexpr (DT == CMF_DT_Q8_2F) {
#pragma unroll
            for (int k = 0; k < CH; k++) {
                float cscale = dev_f16(__ldg((const uint16_t *)w.s2 + c0 + k));
#pragma unroll
                for (int i = 0; i < MV_R; i++) v[i][k] *= cscale;
            }
        }
        mv_chunk_dot<N, CH, TILE_SCALE>(v, cs, x, cols, c0, acc);
    }
#pragma unroll
    for (int i = 0; i < MV_R; i++) {
        float rs = 1.0f;
        if constexpr (DT == CMF_DT_Q8_ROW || DT == CMF_DT_Q8_2F) rs = ld_f16u(w.s1 + 2 * row[i]);
#pragma unroll
        for (int t = 0; t < N; t++) {
            float s = warp_sum(acc[i][t]);
            if (lane == 0 && rbase + i < w.rows) y[(int64_t)t * w.rows + rbase + i] = s * rs;
        }
    }
}

/* Exact per-element path for widths the vector path cannot take (cols % chunk != 0): one warp per row. */
template <int DT>
static __global__ void __launch_bounds__(128) k_matvec_any(DevW w, const float *__restrict__ x, float *__restrict__ y,
                                                           int n) {
    pdl_enter();
    const int lane = threadIdx.x & 31;
    const int64_t r = (int64_t)blockIdx.x * 4 + (threadIdx.x >> 5);
    if (r >= w.rows) return;
    float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (int64_t c = lane; c < w.cols; c += 32) {
        float v = dev_elem<DT>(w, r, c, nullptr);
#pragma unroll
        for (int t = 0; t < 8; t++)
            if (t < n) acc[t] = fmaf(v, __ldg(x + (int64_t)t * w.cols + c), acc[t]);
    }
#pragma unroll
    for (int t = 0; t < 8; t++) {
        float s = warp_sum(acc[t]);
        if (lane == 0 && t < n) y[(int64_t)t * w.rows + r] = s;
    }
}

template <int DT>
static cmf_status launch_matvec(const DevW &dw, const float *x, float *y, int n, cudaStream_t s) {
    if (dw.cols % Chunk<DT>::CH != 0) {
        if constexpr (DT == CMF_DT_Q4_TILED || DT == CMF_DT_Q4TP) return cmf_err(CMF_E_ARG, "matvec: q4 cols");
        else cu_launch(k_matvec_any<DT>, (unsigned)((dw.rows + 3) / 4), 128, 0, s, dw, x, y, n);
    } else {
        unsigned blocks = (unsigned)((dw.rows + MV_WARPS * MV_R - 1) / (MV_WARPS * MV_R));
        switch (n) {
        case 1: cu_launch(k_matvec<DT, 1>, blocks, 128, 0, s, dw, x, y); break;
        case 2: cu_launch(k_matvec<DT, 2>, blocks, 128, 0, s, dw, x, y); break;
        case 3: cu_launch(k_matvec<DT, 3>, blocks, 128, 0, s, dw, x, y); break;
        case 4: cu_launch(k_matvec<DT, 4>, blocks, 128, 0, s, dw, x, y); break;
        case 5: cu_launch(k_matvec<DT, 5>, blocks, 128, 0, s, dw, x, y); break;
        case 6: cu_launch(k_matvec<DT, 6>, blocks, 128, 0, s, dw, x, y); break;
        case 7: cu_launch(k_matvec<DT, 7>, blocks, 128, 0, s, dw, x, y); break;
        default: cu_launch(k_matvec<DT, 8>, blocks, 128, 0, s, dw, x, y); break;
        }
    }
    CU_LAUNCHED("matvec kernel");
    return CMF_OK;
}

extern "C" cmf_status cmf_cuda_matvec(const cmf_cuda_weight *w, const float *d_x, float *d_y, int n,
                                      cmf_cuda_stream stream) {
    cmf_status st = cmf_cuda_weight_check(w);
    if (st != CMF_OK) return st;
    if (n < 1 || n > 8) return cmf_err(CMF_E_ARG, "cuda_matvec: n = %d, need 1..8 (use cmf_cuda_gemm)", n);
    if (!d_x || !d_y) return cmf_err(CMF_E_ARG, "cuda_matvec: NULL activations or output");
    DevW dw = make_devw(w);
    dw.prefetch = mv_small(w);
    cudaStream_t s = CU_STREAM(stream);
    if (mv_i8_usable(w->dtype, w->cols, n)) { /* int8 activations (matvec_i8.cu) */
        I8Job j;
        memset(&j, 0, sizeof j);
        j.count = 1;
        j.w[0] = dw;
        j.y[0] = d_y;
        return mv_i8_launch(j, w->dtype, d_x, n, 0, 0, s);
    }
#define MV(DT) st = launch_matvec<DT>(dw, d_x, d_y, n, s)
    CMF_CUDA_DISPATCH_DT(w->dtype, MV)
#undef MV
    return st;
}

/* ---- fused products of the decode step: q/k/v in one launch, gate/up with the GLU ------------------------------
 * The same per-row arithmetic as k_matvec (chunks, lane partial sums, shuffle reduction, row scale), so each output
 * is bit for bit what cmf_cuda_matvec (+ bias, + cmf_cuda_glu) gives; only the launch count changes. */

struct MultiW {
    DevW w[3];
    float *y[3];
    const float *bias[3];
    unsigned block_end[3]; /* blocks [block_end[i-1], block_end[i]) compute weight i */
    int count;
    /* epilogue (count 1, GLU 0; ex != NULL): the last block to finish runs ex[t] += y[0][t], eout[t] =
     * RMSNorm(ex[t]) * ew (cmf_cuda_matvec_add_rmsnorm) */
    float *ex, *eout;
    const float *ew;
    float eeps;
    int egemma;
    int *ecnt;
};

static __device__ __forceinline__ float act_glu(float a, int gelu) {
    return gelu ? 0.5f * a * (1.0f + tanhf(0.7978845608028654f * (a + 0.044715f * a * a * a))) : a / (1.0f + expf(-a));
}

/* GLU = 0: block b computes MV_WARPS * MV_R consecutive rows of the weight whose block range holds b.
 * GLU = 1: w[0] = gate, w[1] = up (same shape); a warp computes row r of both (its two "rows") and writes
 * act(gate) * up to y[0]. */
template <int DT, int N, int GLU>
static __global__ void __launch_bounds__(128) k_matvec_multi(MultiW mw, const float *__restrict__ x, int gelu) {
    constexpr int CH = Chunk<DT>::CH;
    constexpr bool TILE_SCALE = DT == CMF_DT_Q4_TILED || DT == CMF_DT_Q4TP;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    int wi = 0;
    unsigned b0 = 0;
    if (!GLU)
        while (wi + 1 < mw.count && blockIdx.x >= mw.block_end[wi]) b0 = mw.block_end[wi++];
    const DevW &w0 = mw.w[wi];
    const int64_t rbase = GLU ? (int64_t)blockIdx.x * MV_WARPS + warp
                              : ((int64_t)(blockIdx.x - b0) * MV_WARPS + warp) * MV_R;
    const bool active = rbase < w0.rows;
    if (!active && (GLU || !mw.ex)) return; /* whole warp: no block barrier follows */
    if (active) {
    __shared__ float lad[MV_WARPS][MV_R][32];
    int64_t row[MV_R];
    const DevW *wr[MV_R];
#pragma unroll
    for (int i = 0; i < MV_R; i++) {
        wr[i] = GLU ? &mw.w[i] : &mw.w[wi];
        row[i] = GLU ? rbase : (rbase + i < w0.rows ? rbase + i : w0.rows - 1);
    }
    if (GLU) {
        const int64_t r1[MV_R] = {row[0], row[0]};
        mv_prefetch<DT>(mw.w[0], r1, lane);
        mv_prefetch<DT>(mw.w[1], r1, lane);
    } else {
        mv_prefetch<DT>(w0, row, lane);
    }
    pdl_wait();
    pdl_trigger();
    if constexpr (DT == CMF_DT_Q4TP) {
        if (lane < MV_R) {
            int64_t rr = GLU ? rbase : (rbase + lane < w0.rows ? rbase + lane : w0.rows - 1);
            dev_q4tp_ladder(wr[lane]->s1 + 4 * rr, lad[warp][lane]);
        }
        __syncwarp();
    }
    const int64_t cols = w0.cols;
    float acc[MV_R][N];
#pragma unroll
    for (int i = 0; i < MV_R; i++)
#pragma unroll
        for (int t = 0; t < N; t++) acc[i][t] = 0.0f;
#pragma unroll 2
    for (int64_t c0 = (int64_t)lane * CH; c0 < cols; c0 += 32 * CH) {
        float v[MV_R][CH], cs[MV_R];
#pragma unroll
        for (int i = 0; i < MV_R; i++) load_chunk<DT>(*wr[i], row[i], c0, v[i], &cs[i], lad[warp][i]);
        if constexpr (DT == CMF_DT_Q8_2F) {
#pragma unroll
            for (int k = 0; k < CH; k++) {
#pragma unroll
                for (int i = 0; i < MV_R; i++) v[i][k] *= dev_f16(__ldg((const uint16_t *)wr[i]->s2 + c0 + k));
            }
        }
        mv_chunk_dot<N, CH, TILE_SCALE>(v, cs, x, cols, c0, acc);
    }
    float rs[MV_R];
#pragma unroll
    for (int i = 0; i < MV_R; i++) {
        rs[i] = 1.0f;
        if constexpr (DT == CMF_DT_Q8_ROW || DT == CMF_DT_Q8_2F) rs[i] = ld_f16u(wr[i]->s1 + 2 * row[i]);
    }
#pragma unroll
    for (int t = 0; t < N; t++) {
        float s[MV_R];
#pragma unroll
        for (int i = 0; i < MV_R; i++) s[i] = warp_sum(acc[i][t]) * rs[i];
        if (lane != 0) continue;
        if (GLU) {
            mw.y[0][(int64_t)t * w0.rows + rbase] = act_glu(s[0], gelu) * s[1];
        } else {
#pragma unroll
            for (int i = 0; i < MV_R; i++) {
                if (rbase + i >= w0.rows) continue;
                float o = s[i];
                if (mw.bias[wi]) o = o + mw.bias[wi][rbase + i];
                mw.y[wi][(int64_t)t * w0.rows + rbase + i] = o;
            }
        }
    }
    } /* active */
    if (GLU || !mw.ex) return;
    /* the last block to finish adds the product to the residual and norms it (threadfence reduction) */
    __shared__ int last;
    __shared__ float sh[9];
    pdl_wait(); /* (inactive warps skipped it above) */
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) last = atomicAdd(mw.ecnt, 1) == (int)gridDim.x - 1;
    __syncthreads();
    if (!last) return;
    __threadfence();
    for (int t = 0; t < N; t++)
        block_add_rmsnorm128(mw.ex + (int64_t)t * w0.rows, mw.y[0] + (int64_t)t * w0.rows,
                             mw.eout + (int64_t)t * w0.rows, mw.ew, w0.rows, mw.eeps, mw.egemma, sh);
    if (threadIdx.x == 0) *mw.ecnt = 0; /* ready for the next launch (stream order) */
}

template <int DT, int GLU>
static void launch_multi(const MultiW &mw, unsigned blocks, const float *x, int n, int gelu, cudaStream_t s) {
    switch (n) {
    case 1: cu_launch(k_matvec_multi<DT, 1, GLU>, blocks, 128, 0, s, mw, x, gelu); break;
    case 2: cu_launch(k_matvec_multi<DT, 2, GLU>, blocks, 128, 0, s, mw, x, gelu); break;
    case 3: cu_launch(k_matvec_multi<DT, 3, GLU>, blocks, 128, 0, s, mw, x, gelu); break;
    case 4: cu_launch(k_matvec_multi<DT, 4, GLU>, blocks, 128, 0, s, mw, x, gelu); break;
    case 5: cu_launch(k_matvec_multi<DT, 5, GLU>, blocks, 128, 0, s, mw, x, gelu); break;
    case 6: cu_launch(k_matvec_multi<DT, 6, GLU>, blocks, 128, 0, s, mw, x, gelu); break;
    case 7: cu_launch(k_matvec_multi<DT, 7, GLU>, blocks, 128, 0, s, mw, x, gelu); break;
    default: cu_launch(k_matvec_multi<DT, 8, GLU>, blocks, 128, 0, s, mw, x, gelu); break;
    }
}

/* Shared checks: same dtype and cols, the vector path's alignment (cols % chunk == 0). */
static cmf_status multi_check(const cmf_cuda_weight *w, int count, int n) {
    if (count < 1 || count > 3 || n < 1 || n > 8)
        return cmf_err(CMF_E_ARG, "cuda_matvec_multi: %d weights, n = %d (need 1..3, 1..8)", count, n);
    for (int i = 0; i < count; i++) {
        cmf_status st = cmf_cuda_weight_check(&w[i]);
        if (st != CMF_OK) return st;
        if (w[i].dtype != w[0].dtype || w[i].cols != w[0].cols)
            return cmf_err(CMF_E_ARG, "cuda_matvec_multi: weight %d differs in dtype or cols from weight 0", i);
    }
    int ch = 0;
#define CHK(DT) ch = Chunk<DT>::CH
    CMF_CUDA_DISPATCH_DT(w[0].dtype, CHK)
#undef CHK
    if (!ch || w[0].cols % ch) return cmf_err(CMF_E_ARG, "cuda_matvec_multi: cols %lld not a multiple of %d", (long long)w[0].cols, ch);
    return CMF_OK;
}

extern "C" int cmf_cuda_matvec_multi_ok(const cmf_cuda_weight *w, int count, int n) {
    return multi_check(w, count, n) == CMF_OK;
}

extern "C" cmf_status cmf_cuda_matvec_multi(const cmf_cuda_weight *w, int count, const float *d_x, float *const *d_y,
                                            const float *const *d_bias, int n, cmf_cuda_stream stream) {
    cmf_status st = multi_check(w, count, n);
    if (st != CMF_OK) return st;
    if (mv_i8_usable(w[0].dtype, w[0].cols, n)) { /* int8 activations (matvec_i8.cu) */
        I8Job j;
        memset(&j, 0, sizeof j);
        j.count = count;
        for (int i = 0; i < count; i++) {
            j.w[i] = make_devw(&w[i]);
            j.y[i] = d_y[i];
            j.bias[i] = d_bias ? d_bias[i] : NULL;
        }
        return mv_i8_launch(j, w[0].dtype, d_x, n, 0, 0, CU_STREAM(stream));
    }
    MultiW mw;
    memset(&mw, 0, sizeof mw);
    mw.count = count;
    unsigned blocks = 0;
    for (int i = 0; i < count; i++) {
        mw.w[i] = make_devw(&w[i]);
        mw.w[i].prefetch = mv_small(&w[i]);
        mw.y[i] = d_y[i];
        mw.bias[i] = d_bias ? d_bias[i] : NULL;
        blocks += (unsigned)((w[i].rows + MV_WARPS * MV_R - 1) / (MV_WARPS * MV_R));
        mw.block_end[i] = blocks;
    }
    cudaStream_t s = CU_STREAM(stream);
#define MM(DT) launch_multi<DT, 0>(mw, blocks, d_x, n, 0, s)
    CMF_CUDA_DISPATCH_DT(w[0].dtype, MM)
#undef MM
    CU_LAUNCHED("matvec_multi kernel");
    return CMF_OK;
}

extern "C" cmf_status cmf_cuda_matvec_add_rmsnorm(const cmf_cuda_weight *w, const float *d_in, float *d_y,
                                                  const float *d_bias, int n, float *d_x, float *d_out,
                                                  const float *d_nw, float eps, int gemma_style, int *d_counter,
                                                  cmf_cuda_stream stream) {
    cmf_status st = multi_check(w, 1, n);
    if (st != CMF_OK) return st;
    if (!d_in || !d_y || !d_x || !d_out || !d_counter || d_out == d_x)
        return cmf_err(CMF_E_ARG, "cuda_matvec_add_rmsnorm: NULL buffer or the output aliases the residual");
    MultiW mw;
    memset(&mw, 0, sizeof mw);
    mw.count = 1;
    mw.w[0] = make_devw(w);
    mw.w[0].prefetch = mv_small(w);
    mw.y[0] = d_y;
    mw.bias[0] = d_bias;
    const unsigned blocks = (unsigned)((w->rows + MV_WARPS * MV_R - 1) / (MV_WARPS * MV_R));
    mw.block_end[0] = blocks;
    mw.ex = d_x;
    mw.eout = d_out;
    mw.ew = d_nw;
    mw.eeps = eps;
    mw.egemma = gemma_style;
    mw.ecnt = d_counter;
    cudaStream_t s = CU_STREAM(stream);
#define MA(DT) launch_multi<DT, 0>(mw, blocks, d_in, n, 0, s)
    CMF_CUDA_DISPATCH_DT(w->dtype, MA)
#undef MA
    CU_LAUNCHED("matvec_add_rmsnorm kernel");
    return CMF_OK;
}

extern "C" cmf_status cmf_cuda_matvec_glu(const cmf_cuda_weight *gate, const cmf_cuda_weight *up, const float *d_x,
                                          float *d_out, int n, int gelu_tanh, cmf_cuda_stream stream) {
    cmf_cuda_weight w[2] = {*gate, *up};
    cmf_status st = multi_check(w, 2, n);
    if (st != CMF_OK) return st;
    if (gate->rows != up->rows) return cmf_err(CMF_E_ARG, "cuda_matvec_glu: gate rows %lld != up rows %lld", (long long)gate->rows, (long long)up->rows);
    if (mv_i8_usable(gate->dtype, gate->cols, n)) { /* int8 activations (matvec_i8.cu) */
        I8Job j;
        memset(&j, 0, sizeof j);
        j.count = 2;
        j.w[0] = make_devw(gate);
        j.w[1] = make_devw(up);
        j.y[0] = d_out;
        return mv_i8_launch(j, gate->dtype, d_x, n, 1, gelu_tanh, CU_STREAM(stream));
    }
    MultiW mw;
    memset(&mw, 0, sizeof mw);
    mw.count = 2;
    mw.w[0] = make_devw(gate);
    mw.w[1] = make_devw(up);
    mw.w[0].prefetch = mw.w[1].prefetch = mv_small(gate);
    mw.y[0] = d_out;
    const unsigned blocks = (unsigned)((gate->rows + MV_WARPS - 1) / MV_WARPS);
    cudaStream_t s = CU_STREAM(stream);
#define MG(DT) launch_multi<DT, 1>(mw, blocks, d_x, n, gelu_tanh, s)
    CMF_CUDA_DISPATCH_DT(gate->dtype, MG)
#undef MG
    CU_LAUNCHED("matvec_glu kernel");
    return CMF_OK;
}
