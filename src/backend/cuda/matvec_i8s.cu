/* matvec_i8s.cu — the streaming form of the int8-activation decode products (q8_row, q4tp; CMF_FORMAT.md §2.2,
 * §2.6): by default for rows of >= 2048 columns (q8_row: launches of >= 2048 rows too), the row-group kernel of
 * matvec_i8.cu below (mv_i8_stream_pick; CMF_CUDA_I8_STREAM / cmf_cuda_set_i8_stream force either; measured in
 * bench/cuda/RESULTS.md, "streaming int8-activation products").
 *
 * Why: the row-group kernel loads one batch of 16-byte chunks per warp, waits for it, sums, reduces and stores, then
 * starts the next row group: each round trip to DRAM is exposed, and the last round of groups over the resident
 * blocks runs part-empty (4096x4096 q8: 512 groups over 396 blocks). A decode product is a pure stream of bytes, so
 * here every warp of a persistent grid owns a contiguous range of whole rows (rows split evenly over all resident
 * warps, to within one row) and walks its rows' 16-byte chunks as one sequence through a ring of P register slots:
 * chunk k + P is loaded as soon as chunk k is summed, so each lane keeps P loads (P * 16 bytes, 2 rows for GLU) in
 * flight across row boundaries, and the next rows' q8 scales / q4tp tile codes arrive with their weights. The first
 * P chunks (and the ladders of all the warp's q4tp rows) are loaded before the PDL wait.
 *
 * Results: each output row is summed by one warp, lane l taking the row's chunks at columns step * STEP + l * W in
 * step order (q8: acc = fmaf((float)dp4a_sum, xscale, acc); q4tp: fmaf((isum - 8 * block sum) * xscale, tile scale,
 * acc)), then warp_sum, then the q8 row scale: the row-group kernel's order with one warp per row
 * (CMF_CUDA_I8_SPLIT=0). Plain, q/k/v multi and gate/up + GLU products use this one kernel with the same per-row
 * order, so fused outputs keep the plain product's bits; the prologue (Q8_0 activations, the fused RMSNorm) and the
 * epilogue (bias, residual add, GLU) are the row-group kernel's (matvec_i8.cuh). */
#include <stdlib.h>

#include "backend/cuda/matvec_i8.cuh"
#include "backend/cuda/tprof.cuh"

CMF_TPROF_BINDER(tprof_bind_i8s)

static int g_i8s = -2; /* -2: not read yet; -1: by size; a benign race (every thread computes the same value) */

int mv_i8_stream_mode(void) {
    if (g_i8s < -1) {
        const char *e = getenv("CMF_CUDA_I8_STREAM");
        g_i8s = e && e[0] >= '0' && e[0] <= '4' && !e[1] ? e[0] - '0' : -1;
    }
    return g_i8s;
}

extern "C" void cmf_cuda_set_i8_stream(int mode) { g_i8s = mode >= 0 && mode <= 4 ? mode : -1; }

int mv_i8_stream_pick(int dtype, int64_t cols, int64_t units) {
    const int m = mv_i8_stream_mode();
    if (m >= 0) return m;
    if (dtype == CMF_DT_Q4TP) return cols >= I8S_AUTO_COLS_Q4TP;
    return cols >= I8S_AUTO_Q8 && units >= I8S_AUTO_Q8;
}

/* The weight index and row of unit u (GLU: output row u of gate and up; else the rows of w[0], w[1], ... in
 * sequence). u may be one past the last unit (then nothing is loaded from the result). */
template <int GLU>
static __device__ __forceinline__ int i8s_unit(const I8Job &j, int64_t u, int64_t *row) {
    int k = 0;
    if (!GLU) {
        if (j.count > 1 && u >= j.w[0].rows) u -= j.w[0].rows, k = 1;
        if (j.count > 2 && k == 1 && u >= j.w[1].rows) u -= j.w[1].rows, k = 2;
    }
    *row = u;
    return k;
}

/* The load cursor of a warp: the unit / step of the next chunk to load, how many chunks are left, and the unit's
 * row pointers (weights; q4tp: also its codes). */
template <int R> struct I8sCur {
    int64_t u, row, left;
    int s, wi;
    const uint8_t *wp[R], *cp[R];
};

/* One of three kernel parameters by a run-time index, as selects (no local copy of the parameter arrays). */
template <typename T> static __device__ __forceinline__ T i8s_sel(int i, T a, T b, T c) {
    return i == 0 ? a : i == 1 ? b : c;
}

/* Points the cursor at unit c.u (one past the last unit: pointers that are never read). */
template <int DT, int GLU>
static __device__ __forceinline__ void i8s_seek(const I8Job &j, I8sCur<GLU ? 2 : 1> &c) {
    c.wi = i8s_unit<GLU>(j, c.u, &c.row);
#pragma unroll
    for (int i = 0; i < (GLU ? 2 : 1); i++) {
        const int k = GLU ? i : c.wi;
        const uint8_t *base = i8s_sel(k, j.w[0].base, j.w[1].base, j.w[2].base);
        if constexpr (DT == CMF_DT_Q8_ROW) {
            c.wp[i] = base + c.row * j.w[0].cols; /* one cols for all weights of a job */
            c.cp[i] = i8s_sel(k, j.w[0].s1, j.w[1].s1, j.w[2].s1) + 2 * c.row;
        } else {
            c.wp[i] = base + c.row * (j.w[0].cols >> 5) * 16;
            c.cp[i] = i8s_sel(k, j.w[0].s2, j.w[1].s2, j.w[2].s2) + c.row * j.w[0].stride;
        }
    }
}

/* The cursor's next chunk (the next unit after the row's last step). */
template <int DT, int GLU>
static __device__ __forceinline__ void i8s_advance(const I8Job &j, I8sCur<GLU ? 2 : 1> &c, int S) {
    if (++c.s == S) {
        c.s = 0;
        c.u++;
        i8s_seek<DT, GLU>(j, c);
    }
}

/* Loads the cursor's chunk of each row slot into one ring slot (zeros when none is left or the columns end) and
 * advances the cursor. aux: q8 the row's f16 scale bits (step 0 only), q4tp the two code bytes of the lane's tile. */
template <int DT, int GLU>
static __device__ __forceinline__ void i8s_issue(const I8Job &j, I8sCur<GLU ? 2 : 1> &c, int cols, int S, int lane,
                                                 uint4 (&wv)[GLU ? 2 : 1], uint32_t (&aux)[GLU ? 2 : 1]) {
    constexpr int R = GLU ? 2 : 1, W = I8Chunk<DT>::W, STEP = I8Chunk<DT>::STEP;
#pragma unroll
    for (int i = 0; i < R; i++) wv[i] = make_uint4(0, 0, 0, 0), aux[i] = 0;
    if (c.left <= 0) return;
    c.left--;
    const int col = c.s * STEP + lane * W;
#pragma unroll
    for (int i = 0; i < R; i++) {
        if (col < cols) {
            if constexpr (DT == CMF_DT_Q8_ROW) {
                wv[i] = CMF_CUDA_W_EF_STREAM ? ld_w16_ef(c.wp[i] + col) : ld_w16(c.wp[i] + col);
            } else {
                wv[i] = CMF_CUDA_W_EF_STREAM ? ld_w16_ef(c.wp[i] + (col >> 5) * 16) : ld_w16(c.wp[i] + (col >> 5) * 16);
                const int bit = 5 * (col >> 5);
                const uint8_t *p = c.cp[i] + (bit >> 3);
                aux[i] = (uint32_t)__ldg(p) | ((bit & 7) > 3 ? (uint32_t)__ldg(p + 1) << 8 : 0u);
            }
        }
        if constexpr (DT == CMF_DT_Q8_ROW) /* the row scale (f16, maybe 1-byte aligned) */
            if (c.s == 0) aux[i] = (uint32_t)__ldg(c.cp[i]) | (uint32_t)__ldg(c.cp[i] + 1) << 8;
    }
    i8s_advance<DT, GLU>(j, c, S);
}

/* L2 prefetch of the next q chunks after the ring's (a copy of the cursor; lanes of every 128-byte line). */
template <int DT, int GLU>
static __device__ __forceinline__ void i8s_prefetch(const I8Job &j, I8sCur<GLU ? 2 : 1> c, int cols, int S, int lane,
                                                    int q) {
    constexpr int W = I8Chunk<DT>::W, STEP = I8Chunk<DT>::STEP;
    for (; q > 0 && c.left > 0; q--, c.left--) {
        const int col = c.s * STEP + lane * W;
        if (col < cols && (lane & 7) == 0)
#pragma unroll
            for (int i = 0; i < (GLU ? 2 : 1); i++)
                prefetch_l2(DT == CMF_DT_Q8_ROW ? c.wp[i] + col : c.wp[i] + (col >> 5) * 16);
        i8s_advance<DT, GLU>(j, c, S);
    }
}

/* The linear cursor (LIN, one token, cols a multiple of STEP): a weight's rows are contiguous and each row is a
 * whole number of warp steps, so within one weight the next step's 512 bytes follow the last ones (q4tp: its 32
 * tile codes, 160 bits, follow in the 20 code bytes after the last step's: the codes plane has no row padding when
 * 5 x the tiles per row is a multiple of 8). The cursor only adds; it seeks at a weight's end (a q/k/v group: at
 * most twice). Same chunks, same order as I8sCur: the sums are bit for bit the same. */
template <int R> struct I8sLin {
    const uint8_t *wp[R], *cp[R]; /* the next step's weights; q8 the row's f16 scale, q4tp the step's codes */
    int64_t unext;                /* the first unit after this weight's rows */
    int left, seg, s;             /* chunks left in all / of this weight; q8: the next chunk's step in its row */
};

/* Points the linear cursor at unit u (its step 0); left is set by the caller. */
template <int DT, int GLU>
static __device__ __forceinline__ void i8s_lin_seek(const I8Job &j, I8sLin<GLU ? 2 : 1> &c, int64_t u, int S) {
    int64_t row;
    const int wi = i8s_unit<GLU>(j, u, &row);
    const int64_t rows = i8s_sel(wi, j.w[0].rows, j.w[1].rows, j.w[2].rows);
#pragma unroll
    for (int i = 0; i < (GLU ? 2 : 1); i++) {
        const int k = GLU ? i : wi;
        const uint8_t *base = i8s_sel(k, j.w[0].base, j.w[1].base, j.w[2].base);
        if constexpr (DT == CMF_DT_Q8_ROW) {
            c.wp[i] = base + row * j.w[0].cols;
            c.cp[i] = i8s_sel(k, j.w[0].s1, j.w[1].s1, j.w[2].s1) + 2 * row;
        } else {
            c.wp[i] = base + row * (j.w[0].cols >> 5) * 16;
            c.cp[i] = i8s_sel(k, j.w[0].s2, j.w[1].s2, j.w[2].s2) + row * j.w[0].stride;
        }
    }
    c.unext = u + rows - row;
    const int64_t seg = (rows - row) * S;
    c.seg = seg < c.left ? (int)seg : c.left;
    c.s = 0;
}

/* i8s_issue for the linear cursor. */
template <int DT, int GLU>
static __device__ __forceinline__ void i8s_lin_issue(const I8Job &j, I8sLin<GLU ? 2 : 1> &c, int S, int lane,
                                                     uint4 (&wv)[GLU ? 2 : 1], uint32_t (&aux)[GLU ? 2 : 1]) {
    constexpr int R = GLU ? 2 : 1;
#pragma unroll
    for (int i = 0; i < R; i++) wv[i] = make_uint4(0, 0, 0, 0), aux[i] = 0;
    if (c.left <= 0) return;
    c.left--;
#pragma unroll
    for (int i = 0; i < R; i++) {
        wv[i] = CMF_CUDA_W_EF_STREAM ? ld_w16_ef(c.wp[i] + lane * 16) : ld_w16(c.wp[i] + lane * 16);
        c.wp[i] += 512;
        if constexpr (DT == CMF_DT_Q8_ROW) {
            if (c.s == 0) aux[i] = (uint32_t)__ldg(c.cp[i]) | (uint32_t)__ldg(c.cp[i] + 1) << 8;
        } else {
            const uint8_t *p = c.cp[i] + ((5 * lane) >> 3);
            aux[i] = (uint32_t)__ldg(p) | (((5 * lane) & 7) > 3 ? (uint32_t)__ldg(p + 1) << 8 : 0u);
            c.cp[i] += 20;
        }
    }
    if constexpr (DT == CMF_DT_Q8_ROW)
        if (++c.s == S) {
            c.s = 0;
#pragma unroll
            for (int i = 0; i < R; i++) c.cp[i] += 2;
        }
    if (--c.seg == 0 && c.left > 0) i8s_lin_seek<DT, GLU>(j, c, c.unext, S);
}

/* q4tp ladders: a warp owns at most LR rows (the launch sizes the grid so) and computes all their ladders at once
 * before the PDL wait, one row per lane (GLU: LR outputs of gate and up, lanes 0..15 / 16..31), into its
 * lad[LR][R][32]; the ring then only reads them. */
template <int GLU> struct I8sLad {
    static constexpr int LR = GLU ? 16 : 32;
};


/* The ladders of units [u, u + LR) ∩ [u, u1) into lad (the whole warp; __syncwarp before and after). */
template <int GLU>
static __device__ __forceinline__ void i8s_ladders(const I8Job &j, int64_t u, int64_t u1, int lane, float *lad) {
    constexpr int LR = I8sLad<GLU>::LR;
    const int i = lane % LR, r = lane / LR; /* unit u + i, row slot r */
    __syncwarp();
    if (u + i < u1) {
        int64_t row;
        const int wi = i8s_unit<GLU>(j, u + i, &row);
        const int k = GLU ? r : wi;
        dev_q4tp_ladder(i8s_sel(k, j.w[0].s1, j.w[1].s1, j.w[2].s1) + 4 * row, lad + (i * (GLU ? 2 : 1) + r) * 32);
    }
    __syncwarp();
}

template <int DT, int N, int GLU, int P, int LIN>
static __global__ void __launch_bounds__(256, 2)
    k_mv_i8s(I8Job j, const float *__restrict__ x, int gelu) {
    constexpr int R = GLU ? 2 : 1, W = I8Chunk<DT>::W, STEP = I8Chunk<DT>::STEP;
    TP_DECL;
    TP_AT(0);
    extern __shared__ __align__(16) int8_t i8_sm[];
    constexpr int LR = I8sLad<GLU>::LR, LW = DT == CMF_DT_Q4TP ? LR * R * 32 : 1; /* ladder floats per warp */
    __shared__ float lad[I8_WARPS][LW];
    __shared__ float nsh[9], ninv[N]; /* prologue RMSNorm (j.nx) */
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int cols = (int)j.w[0].cols, nb = cols >> 5, S = (cols + STEP - 1) / STEP;
    const int lv = j.levels;
    int8_t *xq = i8_sm;
    float *xs = (float *)(i8_sm + (int64_t)lv * N * cols);
    int *sx = (int *)(xs + lv * N * nb);
    const int lstride = N * nb; /* one level's blocks */

    /* this warp's units [u0, u1): all resident warps share the units evenly */
    const int64_t U = j.groups, nw = (int64_t)gridDim.x * I8_WARPS, gw = (int64_t)blockIdx.x * I8_WARPS + warp;
    const int64_t u0 = gw * U / nw, u1 = (gw + 1) * U / nw, total = (u1 - u0) * S;
    I8sCur<R> lc; /* the load cursor (LIN: ln) */
    I8sLin<R> ln;
    if constexpr (LIN) {
        ln.left = (int)total; /* the launch checked that it fits */
        i8s_lin_seek<DT, GLU>(j, ln, u0, S);
    } else {
        lc.u = u0, lc.s = 0, lc.left = total;
        i8s_seek<DT, GLU>(j, lc);
    }
    int64_t crow, cu = u0; /* the consume cursor */
    int cwi = i8s_unit<GLU>(j, u0, &crow), cs = 0, li = 0; /* li: the row's index among the warp's rows (q4tp: its ladder) */
    const int sh = (5 * lane) & 7; /* q4tp: the bit of the lane's tile code in its first byte (every step: 160 bits) */

    uint4 wv[P][R];
    uint32_t aux[P][R];
    if (threadIdx.x == 0 && j.pf_tot && !j.pf_at) i8_l2pf(j);
    if (DT == CMF_DT_Q4TP && total > 0) i8s_ladders<GLU>(j, u0, u1, lane, lad[warp]); /* all of them, before the wait */
    const int wpre = j.wpre < 0 || j.wpre > P ? P : j.wpre; /* ring slots [0, wpre) now, the rest after the wait */
#pragma unroll
    for (int k = 0; k < P; k++) {
        if (k >= wpre) break;
        if constexpr (LIN) i8s_lin_issue<DT, GLU>(j, ln, S, lane, wv[k], aux[k]);
        else i8s_issue<DT, GLU>(j, lc, cols, S, lane, wv[k], aux[k]);
    }
    if constexpr (!LIN)
        if (j.spf && wpre == P) i8s_prefetch<DT, GLU>(j, lc, cols, S, lane, j.spf); /* CMF_CUDA_I8S_PF */
    pdl_wait();
    pdl_trigger();
    TP_AT(1);
#pragma unroll
    for (int k = 0; k < P; k++) {
        if (k < wpre) continue;
        if constexpr (LIN) i8s_lin_issue<DT, GLU>(j, ln, S, lane, wv[k], aux[k]);
        else i8s_issue<DT, GLU>(j, lc, cols, S, lane, wv[k], aux[k]);
    }
    if constexpr (!LIN)
        if (j.spf && wpre < P) i8s_prefetch<DT, GLU>(j, lc, cols, S, lane, j.spf);
    if (j.qbuf) { /* quantized once by k_i8_prequant, in this layout: copy it in */
        const int64_t n8 = (int64_t)lv * N * cols * 5 / 32; /* i8_smem / 8 */
        const uint2 *src = (const uint2 *)j.qbuf;
        uint2 *dst = (uint2 *)i8_sm;
        for (int64_t i = threadIdx.x; i < n8; i += 256) dst[i] = __ldcg(src + i);
    } else {
        if (j.nx) i8_norm_inv<N>(j, cols, ninv, nsh, TP_ARG);
        i8_quantize<DT, N>(j.nx ? j.nx : x, cols, lv, xq, xs, sx, j, j.nx ? ninv : nullptr,
                           j.nx && blockIdx.x == 0 ? j.nout : nullptr, 0, 4 * 32, TP_ARG);
    }
    __syncthreads();
    TP_AT(2);

    float acc[R][N];
#pragma unroll
    for (int i = 0; i < R; i++)
#pragma unroll
        for (int t = 0; t < N; t++) acc[i][t] = 0.0f;
    float rs[R], rxv[N], bv = 0.0f; /* the current row's q8 scales, residual values and bias */
#pragma unroll
    for (int i = 0; i < R; i++) rs[i] = 1.0f;
#pragma unroll
    for (int t = 0; t < N; t++) rxv[t] = 0.0f;

    for (int64_t it = 0; it < total; it += P) {
#pragma unroll
        for (int k = 0; k < P; k++) {
            if (it + k < total) { /* warp-uniform */
                if (cs == 0) {    /* a new row: its scale (loaded with its first chunk), ladders, epilogue inputs */
                    if constexpr (DT == CMF_DT_Q8_ROW) {
#pragma unroll
                        for (int i = 0; i < R; i++) rs[i] = dev_f16((uint16_t)aux[k][i]);
                    }
                    if (!GLU && lane == 0) {
                        const int64_t rows = i8s_sel(cwi, j.w[0].rows, j.w[1].rows, j.w[2].rows);
                        if (j.rx)
#pragma unroll
                            for (int t = 0; t < N; t++) rxv[t] = j.rx[(int64_t)t * rows + crow];
                        const float *b = i8s_sel(cwi, j.bias[0], j.bias[1], j.bias[2]);
                        if (b) bv = b[crow];
                    }
                }
                const int c = cs * STEP + lane * W;
                if (LIN || c < cols) {
                    const int blk = c >> 5;
                    float ts[R];
                    if constexpr (DT == CMF_DT_Q4TP) {
#pragma unroll
                        for (int i = 0; i < R; i++)
                            ts[i] = lad[warp][(li * R + i) * 32 + ((aux[k][i] >> sh) & 31u)];
                    }
#pragma unroll
                    for (int t = 0; t < N; t++)
#pragma unroll
                        for (int l = 0; l < 2; l++) { /* level 1, then (lv == 2) level 2 */
                            if (l >= lv) break;
                            const int8_t *xp = xq + l * lstride * 32 + t * cols + c;
                            const float d = xs[l * lstride + t * nb + blk];
                            if constexpr (DT == CMF_DT_Q8_ROW) {
                                const int4 xv = *(const int4 *)xp;
#pragma unroll
                                for (int i = 0; i < R; i++)
                                    acc[i][t] = fmaf((float)i8_chunk_q8(wv[k][i], xv), d, acc[i][t]);
                            } else {
                                const int4 xa = *(const int4 *)xp, xb = *(const int4 *)(xp + 16);
                                const int corr = 8 * sx[l * lstride + t * nb + blk];
#pragma unroll
                                for (int i = 0; i < R; i++)
                                    acc[i][t] = fmaf(__fmul_rn((float)(i8_chunk_q4tp(wv[k][i], xa, xb) - corr), d),
                                                     ts[i], acc[i][t]);
                            }
                        }
                }
                if (++cs == S) { /* the row is summed: reduce, scale, store (lane 0) */
                    float o[R][N];
#pragma unroll
                    for (int i = 0; i < R; i++)
#pragma unroll
                        for (int t = 0; t < N; t++) {
                            o[i][t] = warp_sum(acc[i][t]) * rs[i];
                            acc[i][t] = 0.0f;
                        }
                    if (lane == 0) {
                        const int64_t rows = i8s_sel(cwi, j.w[0].rows, j.w[1].rows, j.w[2].rows);
                        float *y = i8s_sel(cwi, j.y[0], j.y[1], j.y[2]);
#pragma unroll
                        for (int t = 0; t < N; t++) {
                            if (GLU) {
                                y[(int64_t)t * rows + crow] = i8_act(o[0][t], gelu) * o[R - 1][t];
                            } else {
                                float v = o[0][t];
                                if (i8s_sel(cwi, j.bias[0], j.bias[1], j.bias[2])) v = v + bv;
                                y[(int64_t)t * rows + crow] = v;
                                if (j.rx) j.rx[(int64_t)t * rows + crow] = rxv[t] + v; /* cmf_cuda_add's x + o */
                            }
                        }
                    }
                    cs = 0;
                    li++;
                    cwi = i8s_unit<GLU>(j, ++cu, &crow);
                }
            }
            if constexpr (LIN) i8s_lin_issue<DT, GLU>(j, ln, S, lane, wv[k], aux[k]); /* chunk it + k + P ... */
            else i8s_issue<DT, GLU>(j, lc, cols, S, lane, wv[k], aux[k]);            /* ... into the freed slot */
        }
    }
    if (threadIdx.x == 0 && j.pf_tot && j.pf_at) i8_l2pf(j);
    TP_AT(3);
    TP_PUT(TP_I8S, j.w[0].base);
}

/* ---- mode 4: the same rows streamed by the bulk-copy engine (q8_row, one token, cols % 512 == 0) ---------------
 * Each warp owns rpw consecutive units (the grid is sized so every warp but the last ones has exactly rpw: no warp
 * waits on a neighbour with one row more) and walks their 512-byte steps in the same order as k_mv_i8s. The steps of
 * consecutive units of one matrix are consecutive in memory (q8_row's int8 plane is [rows][cols]), so lane 0 fills a
 * ring of D slots of C bytes per matrix (GLU: gate and up halves) with cp.async.bulk, completion counted on one
 * mbarrier per slot, and refills a slot as soon as the warp has read it; the first D slots are issued before the PDL
 * wait. The lanes read their 16-byte chunks from shared memory (4 steps' loads issued together) instead of holding a
 * register ring. The row scales come from a window of 32 rows per lane, the next window loaded a window ahead. Per
 * row: lane l sums the chunks at columns step * 512 + 16 l in step order, warp_sum, times the row scale: k_mv_i8s's
 * order, so the bits are mode 1's. Opt-in: measured slower than mode 1 at every slot setting (bench/cuda/RESULTS.md,
 * session 14). */
#define I8T_DMAX 8
#define I8T_B 4 /* steps whose shared-memory loads are issued together */

/* Lane 0's issue cursor: the unit and step of the next step to copy, and the steps left. */
struct I8tCur {
    int64_t u, left;
    int s;
};

/* Lane 0: the cursor's next slot (up to SPS steps; C = 512 SPS bytes per matrix) into dst, completion on mb;
 * advances the cursor. */
template <int GLU>
static __device__ void i8t_issue(const I8Job &j, I8tCur &c, int S, int SPS, uint8_t *dst, uint64_t *mb) {
    constexpr int R = GLU ? 2 : 1;
    const int C = SPS * 512;
    int todo = c.left < SPS ? (int)c.left : SPS;
    const int64_t cols = j.w[0].cols;
    mb_expect(mb, (unsigned)(todo * 512 * R));
    c.left -= todo;
    while (todo > 0) { /* runs of contiguous steps: a multi product's units change matrix at most twice */
        int64_t row;
        const int wi = i8s_unit<GLU>(j, c.u, &row);
        const int64_t rows = i8s_sel(wi, j.w[0].rows, j.w[1].rows, j.w[2].rows), room = (rows - row) * S - c.s;
        const int n = room < todo ? (int)room : todo;
#pragma unroll
        for (int i = 0; i < R; i++) {
            const uint8_t *base = i8s_sel(GLU ? i : wi, j.w[0].base, j.w[1].base, j.w[2].base);
            bulk_copy(dst + i * C, base + row * cols + (int64_t)c.s * 512, (unsigned)(n * 512), mb);
        }
        dst += n * 512, todo -= n;
        c.s += n; /* n <= SPS steps: a few units on at most */
        while (c.s >= S) c.s -= S, c.u++;
    }
}

/* The f16 row-scale bits of units [u, u + 32) of weight slot i (GLU: gate / up), one per lane (0 past u1). */
template <int GLU>
static __device__ __forceinline__ uint32_t i8t_scales(const I8Job &j, int64_t u, int64_t u1, int i, int lane) {
    if (u + lane >= u1) return 0;
    int64_t row;
    const int wi = i8s_unit<GLU>(j, u + lane, &row);
    const uint8_t *p = i8s_sel(GLU ? i : wi, j.w[0].s1, j.w[1].s1, j.w[2].s1) + 2 * row;
    return (uint32_t)__ldg(p) | (uint32_t)__ldg(p + 1) << 8;
}

template <int GLU>
static __global__ void __launch_bounds__(256) k_mv_i8t(I8Job j, const float *__restrict__ x, int gelu, int rpw,
                                                      int D, int SPS) {
    constexpr int R = GLU ? 2 : 1;
    const int C = SPS * 512;
    extern __shared__ __align__(128) uint8_t i8t_sm[];
    __shared__ __align__(8) uint64_t mb[I8_WARPS][I8T_DMAX];
    __shared__ float nsh[9], ninv[1];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int cols = (int)j.w[0].cols, nb = cols >> 5, S = cols / 512, lv = j.levels;
    uint8_t *ring = i8t_sm + (size_t)warp * D * R * C;
    int8_t *xq = (int8_t *)(i8t_sm + (size_t)I8_WARPS * D * R * C);
    float *xs = (float *)(xq + (int64_t)lv * cols);
    int *sx = (int *)(xs + lv * nb);

    const int64_t U = j.groups, gw = (int64_t)blockIdx.x * I8_WARPS + warp;
    const int64_t u0 = gw * rpw < U ? gw * rpw : U, u1 = u0 + rpw < U ? u0 + rpw : U, steps = (u1 - u0) * S;
    const int64_t uses = (steps + SPS - 1) / SPS;
    I8tCur ic = {u0, steps, 0};
    if (lane == 0) {
        for (int k = 0; k < D; k++) mb_init(&mb[warp][k]);
        mb_init_fence();
        for (int k = 0; k < D && k < uses; k++) i8t_issue<GLU>(j, ic, S, SPS, ring + k * R * C, &mb[warp][k]);
    }
    __syncwarp();
    uint32_t scw[2][R]; /* scale windows: rows [32 w, 32 w + 32) and the next 32 of the warp's units */
#pragma unroll
    for (int i = 0; i < R; i++) scw[0][i] = i8t_scales<GLU>(j, u0, u1, i, lane), scw[1][i] = i8t_scales<GLU>(j, u0 + 32, u1, i, lane);
    pdl_wait();
    pdl_trigger();
    if (j.nx) i8_norm_inv<1>(j, cols, ninv, nsh);
    i8_quantize<CMF_DT_Q8_ROW, 1>(j.nx ? j.nx : x, cols, lv, xq, xs, sx, j, j.nx ? ninv : nullptr,
                                  j.nx && blockIdx.x == 0 ? j.nout : nullptr);
    __syncthreads();

    float acc[R], rs[R], rxv = 0.0f, bv = 0.0f;
#pragma unroll
    for (int i = 0; i < R; i++) acc[i] = 0.0f, rs[i] = 1.0f;
    int64_t crow, cu = u0;
    int cwi = i8s_unit<GLU>(j, cu, &crow), cs = 0, li = 0;
    for (int64_t g = 0; g < uses; g++) {
        const int k = (int)(g % D);
        mb_wait(&mb[warp][k], (unsigned)(g / D) & 1u);
        const uint8_t *sp = ring + k * R * C;
        const int nq = g * SPS + SPS <= steps ? SPS : (int)(steps - g * SPS); /* steps in this slot */
        for (int q0 = 0; q0 < nq; q0 += I8T_B) {
            /* a batch of I8T_B steps: every shared-memory load first (weights, level-1 activations and scales),
             * then the sums in step order */
            uint4 wv[I8T_B][R];
            int4 xv[I8T_B];
            float xd[I8T_B];
            int cc = cs;
#pragma unroll
            for (int t = 0; t < I8T_B; t++) {
                const int c = cc * 512 + lane * 16;
                if (q0 + t < nq) {
#pragma unroll
                    for (int i = 0; i < R; i++) wv[t][i] = *(const uint4 *)(sp + i * C + (q0 + t) * 512 + lane * 16);
                    xv[t] = *(const int4 *)(xq + c);
                    xd[t] = xs[c >> 5];
                }
                cc = cc + 1 == S ? 0 : cc + 1;
            }
#pragma unroll
            for (int t = 0; t < I8T_B; t++) {
                if (q0 + t >= nq) break; /* warp-uniform */
                if (cs == 0) {           /* a new row: its scale, epilogue inputs */
                    if (li > 0 && (li & 31) == 0) { /* the next window; load the one after it */
#pragma unroll
                        for (int i = 0; i < R; i++)
                            scw[0][i] = scw[1][i], scw[1][i] = i8t_scales<GLU>(j, u0 + li + 32, u1, i, lane);
                    }
#pragma unroll
                    for (int i = 0; i < R; i++)
                        rs[i] = dev_f16((uint16_t)__shfl_sync(0xffffffffu, scw[0][i], li & 31));
                    if (!GLU && lane == 0) {
                        if (j.rx) rxv = j.rx[crow];
                        const float *b = i8s_sel(cwi, j.bias[0], j.bias[1], j.bias[2]);
                        if (b) bv = b[crow];
                    }
                }
#pragma unroll
                for (int i = 0; i < R; i++) acc[i] = fmaf((float)i8_chunk_q8(wv[t][i], xv[t]), xd[t], acc[i]);
                if (lv > 1) { /* level 2 (CMF_CUDA_I8ACT=2), after level 1 as in k_mv_i8s */
                    const int c = cs * 512 + lane * 16;
                    const int4 x2 = *(const int4 *)(xq + nb * 32 + c);
                    const float d2 = xs[nb + (c >> 5)];
#pragma unroll
                    for (int i = 0; i < R; i++) acc[i] = fmaf((float)i8_chunk_q8(wv[t][i], x2), d2, acc[i]);
                }
                if (++cs == S) { /* the row is summed: reduce, scale, store (lane 0) */
                    float o[R];
#pragma unroll
                    for (int i = 0; i < R; i++) o[i] = warp_sum(acc[i]) * rs[i], acc[i] = 0.0f;
                    if (lane == 0) {
                        float *y = i8s_sel(cwi, j.y[0], j.y[1], j.y[2]);
                        if (GLU) {
                            y[crow] = i8_act(o[0], gelu) * o[R - 1];
                        } else {
                            float v = o[0];
                            if (i8s_sel(cwi, j.bias[0], j.bias[1], j.bias[2])) v = v + bv;
                            y[crow] = v;
                            if (j.rx) j.rx[crow] = rxv + v; /* cmf_cuda_add's x + o */
                        }
                    }
                    cs = 0;
                    li++;
                    cwi = i8s_unit<GLU>(j, ++cu, &crow);
                }
            }
        }
        __syncwarp(); /* every lane has read slot k */
        if (lane == 0 && g + D < uses) i8t_issue<GLU>(j, ic, S, SPS, ring + k * R * C, &mb[warp][k]);
    }
}

/* Whether mode 4 takes this launch: q8_row, one token, whole 512-byte steps, one level of activations. */
static int i8t_usable(int dtype, int64_t cols, int n) { return dtype == CMF_DT_Q8_ROW && n == 1 && cols % 512 == 0; }

/* CMF_CUDA_I8T_D (slots per warp, 1..8; default 4), CMF_CUDA_I8T_C (bytes per slot and matrix, 512..8192 in
 * steps of 512; default 1024) and CMF_CUDA_I8T_BPS (blocks per SM the rows are spread over, 1..4; default 1), read
 * once: A/B switches. Slots are dropped until the block fits in 200 KiB of shared memory; *taken = 0 (nothing
 * launched) when not even one does. */
static cmf_status i8t_launch(const I8Job &j, const float *x, int glu, int gelu, cudaStream_t s, int *taken) {
    static int D0 = 0, sps = 0, bps = 0; /* benign races: every thread reads the same values */
    if (!D0) {
        const int d = env_int("CMF_CUDA_I8T_D", 4), c = env_int("CMF_CUDA_I8T_C", 1024),
                  b = env_int("CMF_CUDA_I8T_BPS", 1);
        D0 = d >= 1 && d <= I8T_DMAX ? d : 4;
        sps = c >= 512 && c <= 8192 && c % 512 == 0 ? c / 512 : 2;
        bps = b >= 1 && b <= 4 ? b : 1;
    }
    const int R = glu ? 2 : 1;
    int D = D0;
    size_t smem = 0;
    for (; D >= 1; D--)
        if ((smem = (size_t)I8_WARPS * D * R * sps * 512 + i8_smem(j.w[0].cols, 1, j.levels)) <= 200 * 1024) break;
    *taken = D >= 1;
    if (!*taken) return CMF_OK; /* the activations leave no room for a slot: the caller takes mode 1 */
    static int attr[2];
    if (!attr[glu]) {
        if (cudaFuncSetAttribute(glu ? k_mv_i8t<1> : k_mv_i8t<0>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 200 * 1024) != cudaSuccess)
            return cu_fail(cudaGetLastError(), "matvec (int8 activations, bulk copies): shared memory opt-in");
        attr[glu] = 1;
    }
    const int64_t U = j.groups, warps = (int64_t)i8_sms() * bps * I8_WARPS;
    const int rpw = (int)((U + warps - 1) / warps);
    const unsigned grid = (unsigned)((U + (int64_t)rpw * I8_WARPS - 1) / ((int64_t)rpw * I8_WARPS));
    if (glu) cu_launch(k_mv_i8t<1>, grid, 256, smem, s, j, x, gelu, rpw, D, sps);
    else cu_launch(k_mv_i8t<0>, grid, 256, smem, s, j, x, gelu, rpw, D, sps);
    return CMF_OK;
}

/* One launch for n tokens: the grid is what the device holds at once of this instance at this shared-memory size
 * (cached per instance), at most one block per 8 units; q4tp: at least enough blocks for LR units per warp. */
template <int DT, int N, int GLU, int P, int LIN>
static cmf_status i8s_launch_inst(const I8Job &j, size_t smem, const float *x, int gelu, int mode, cudaStream_t s) {
    enum { SLOTS = 8 };
    static size_t occ_smem[SLOTS]; /* per instance; benign races (same values) */
    static int occ_val[SLOTS], occ_n, attr;
    if (!attr) { /* static (q4tp: 32 KiB of ladders) + dynamic above 48 KiB needs the opt-in: always take it */
        if (cudaFuncSetAttribute(k_mv_i8s<DT, N, GLU, P, LIN>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 (int)I8S_SMEM_MAX(DT)) != cudaSuccess)
            return cu_fail(cudaGetLastError(), "matvec (int8 activations, streaming): shared memory opt-in");
        attr = 1;
    }
    int occ = 0;
    for (int i = 0; i < occ_n && !occ; i++)
        if (occ_smem[i] == smem) occ = occ_val[i];
    if (!occ) {
        int b = 0;
        if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&b, k_mv_i8s<DT, N, GLU, P, LIN>, 256, smem) != cudaSuccess ||
            b < 1)
            b = 1;
        occ = b < 4 ? b : 4;
        const int slot = occ_n < SLOTS ? occ_n++ : (int)(smem % SLOTS);
        occ_smem[slot] = smem, occ_val[slot] = occ;
    }
    if (mode == 3) occ = 1; /* one block per SM: room for the next kernel's early blocks */
    const unsigned cap = (unsigned)(i8_sms() * occ), need = (j.groups + I8_WARPS - 1) / I8_WARPS;
    unsigned grid = need < cap ? (need ? need : 1) : cap;
    if (DT == CMF_DT_Q4TP) { /* at most LR rows per warp (their ladders in shared memory): more blocks, in waves */
        const unsigned lr = (unsigned)I8sLad<GLU>::LR, least = (j.groups + I8_WARPS * lr - 1) / (I8_WARPS * lr);
        if (grid < least) grid = least;
    }
    cu_launch(k_mv_i8s<DT, N, GLU, P, LIN>, grid, 256, smem, s, j, x, gelu);
    return CMF_OK;
}

/* The activations of one token quantized once, into j.qbuf in the shared-memory layout of k_mv_i8s's prologue
 * (xq [lv][cols] int8, xs [lv][nb] scales, sx [lv][nb] sums): block b takes passes b, b + gridDim.x, ... of
 * i8_quantize, whose blocks of 32 are independent, so the bytes are those every block of the product would compute. */
template <int DT>
static __global__ void __launch_bounds__(256) k_i8_prequant(I8Job j, const float *__restrict__ x, int lv) {
    const int64_t cols = j.w[0].cols, nb = cols >> 5;
    int8_t *xq = (int8_t *)j.qbuf;
    float *xs = (float *)(j.qbuf + (int64_t)lv * cols);
    int *sx = (int *)(xs + (int64_t)lv * nb);
    TP_DECL;
    TP_AT(0);
    pdl_wait();
    pdl_trigger();
    TP_AT(1);
    i8_quantize<DT, 1>(x, cols, lv, xq, xs, sx, j, nullptr, nullptr, (int64_t)blockIdx.x * 128,
                       (int64_t)gridDim.x * 128, TP_ARG);
    TP_AT(2);
    TP_AT(3);
    TP_PUT(TP_PREQ, j.w[0].base);
}

/* The least columns whose single-token activations are quantized once by k_i8_prequant (one small launch) instead
 * of in each of the product's blocks: CMF_CUDA_I8Q_COLS (default 8192; 0: never). The prologue of a 14336-column
 * down product cost ~6.5 us per launch (bench/cuda/RESULTS.md, session 17). Only without the RMSNorm prologue. */
static int i8s_prequant_cols(void) {
    static int c = -1; /* read once (a benign race) */
    if (c < 0) {
        const char *e = getenv("CMF_CUDA_I8Q_COLS");
        c = e && e[0] ? (atoi(e) > 0 ? atoi(e) : 0) : 8192;
    }
    return c;
}

/* Whether a one-token launch takes the linear cursor (I8sLin): mode 1, cols a multiple of a warp step (q8 512,
 * q4tp 1024 columns), q4tp codes planes without row padding, the launch's chunk count (so any warp's) within an int,
 * and the setting: CMF_CUDA_I8S_LIN / cmf_cuda_set_i8s_linear 0 (never), 1 (q4tp only: the default) or 2 (q8_row
 * too). Measured (bench/cuda/RESULTS.md, session 19): Llama-3.1-8B q4tp decode +6.8%, q8 -1.1%. */
static int g_i8s_lin = -1; /* -1: not read yet (a benign race: every thread computes the same value) */

extern "C" void cmf_cuda_set_i8s_linear(int mode) { g_i8s_lin = mode >= 0 && mode <= 2 ? mode : 1; }

static int i8s_linear(const I8Job &j, int dtype, int mode) {
    if (g_i8s_lin < 0) {
        const char *e = getenv("CMF_CUDA_I8S_LIN");
        g_i8s_lin = e && e[0] >= '0' && e[0] <= '2' && !e[1] ? e[0] - '0' : 1;
    }
    const int64_t cols = j.w[0].cols, step = dtype == CMF_DT_Q8_ROW ? 512 : 1024;
    if (g_i8s_lin < (dtype == CMF_DT_Q8_ROW ? 2 : 1) || mode != 1 || j.spf || cols % step ||
        (int64_t)j.groups * (cols / step) > INT32_MAX)
        return 0;
    if (dtype == CMF_DT_Q4TP)
        for (int i = 0; i < j.count; i++)
            if (j.w[i].stride * 8 != 5 * (cols >> 5)) return 0;
    return 1;
}

/* Ring depth: 8 chunks of 16 bytes in flight per lane (GLU: 4 per row of the pair). (16 measured slower on Llama-8B
 * q8 decode: 218 vs 288 tok/s, the ring spilled.) */
template <int DT, int GLU>
static cmf_status i8s_launch_n(const I8Job &j, size_t smem, const float *x, int n, int gelu, int mode, cudaStream_t s) {
    constexpr int P = GLU ? 4 : 8;
    switch (n) {
    case 1:
        return i8s_linear(j, DT, mode) ? i8s_launch_inst<DT, 1, GLU, P, 1>(j, smem, x, gelu, mode, s)
                                       : i8s_launch_inst<DT, 1, GLU, P, 0>(j, smem, x, gelu, mode, s);
    case 2: return i8s_launch_inst<DT, 2, GLU, P, 0>(j, smem, x, gelu, mode, s);
    case 3: return i8s_launch_inst<DT, 3, GLU, P, 0>(j, smem, x, gelu, mode, s);
    case 4: return i8s_launch_inst<DT, 4, GLU, P, 0>(j, smem, x, gelu, mode, s);
    case 5: return i8s_launch_inst<DT, 5, GLU, P, 0>(j, smem, x, gelu, mode, s);
    case 6: return i8s_launch_inst<DT, 6, GLU, P, 0>(j, smem, x, gelu, mode, s);
    case 7: return i8s_launch_inst<DT, 7, GLU, P, 0>(j, smem, x, gelu, mode, s);
    default: return i8s_launch_inst<DT, 8, GLU, P, 0>(j, smem, x, gelu, mode, s);
    }
}

cmf_status mv_i8s_launch(I8Job &j, int dtype, const float *d_x, int n, int glu, int gelu, int mode, cudaStream_t s) {
    int64_t units = glu ? j.w[0].rows : 0;
    if (!glu)
        for (int i = 0; i < j.count; i++) units += j.w[i].rows;
    if (units < 1 || units > (int64_t)0xffffffffu)
        return cmf_err(CMF_E_ARG, "cuda matvec (int8 activations, streaming): %lld rows", (long long)units);
    j.groups = (unsigned)units; /* here: units (rows; GLU: outputs) */
    const size_t smem = i8_smem(j.w[0].cols, n, j.levels);
    static int spf = -1; /* modes 2, 3: L2 prefetch of CMF_CUDA_I8S_PF (8) chunks beyond the ring before the wait */
    if (spf < 0) {
        const char *e = getenv("CMF_CUDA_I8S_PF");
        spf = e && atoi(e) > 0 ? (atoi(e) < 64 ? atoi(e) : 64) : 8;
    }
    j.spf = mode >= 2 && mode <= 3 ? spf : 0;
    const int pq = i8s_prequant_cols();
    if (!(j.qbuf && !glu && !j.nx && n == 1 && mode != 4 && pq > 0 && j.w[0].cols >= pq &&
          smem <= (size_t)CMF_CUDA_I8Q_BYTES))
        j.qbuf = NULL;
    if (j.qbuf) {
        const unsigned g = (unsigned)(((j.w[0].cols >> 5) + 127) / 128);
        if (dtype == CMF_DT_Q8_ROW) cu_launch(k_i8_prequant<CMF_DT_Q8_ROW>, g, 256, 0, s, j, d_x, j.levels);
        else cu_launch(k_i8_prequant<CMF_DT_Q4TP>, g, 256, 0, s, j, d_x, j.levels);
        CU_LAUNCHED("activation quantization (k_i8_prequant)");
    }
    cmf_status st = CMF_OK;
    int taken = 0; /* mode 4 where it applies and fits; mode 1 otherwise */
    if (mode == 4 && i8t_usable(dtype, j.w[0].cols, n)) st = i8t_launch(j, d_x, glu, gelu, s, &taken);
    if (st != CMF_OK) return st;
    if (!taken) {
        if (dtype == CMF_DT_Q8_ROW)
            st = glu ? i8s_launch_n<CMF_DT_Q8_ROW, 1>(j, smem, d_x, n, gelu, mode, s)
                     : i8s_launch_n<CMF_DT_Q8_ROW, 0>(j, smem, d_x, n, gelu, mode, s);
        else
            st = glu ? i8s_launch_n<CMF_DT_Q4TP, 1>(j, smem, d_x, n, gelu, mode, s)
                     : i8s_launch_n<CMF_DT_Q4TP, 0>(j, smem, d_x, n, gelu, mode, s);
        if (st != CMF_OK) return st;
    }
    CU_LAUNCHED("matvec (int8 activations, streaming) kernel");
    return CMF_OK;
}
