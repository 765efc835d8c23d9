/* matvec_i8.cu — decode products y = x W^T (1..8 tokens) with int8 activations and integer dot products, for the
 * q8_row and q4tp layouts (CMF_FORMAT.md §2.2, §2.6) read in place: the row-group kernel here, and the entry points
 * (mv_i8_launch hands rows of >= 4096 / 2048 columns to the streaming kernel of matvec_i8s.cu by default). The
 * f32-activation kernels of matvec.cu stay for every other dtype and when CMF_CUDA_I8ACT=0 (cmf_cuda_set_i8act).
 *
 * Why: an f32-activation q8 product converts every weight to f32 and reads 4 bytes of activation from L1 per
 * weight byte; on Hopper that (not DRAM) limits it to 41-49 % of the copy bandwidth on 4096-wide rows
 * (bench/cuda/RESULTS.md). Here each block quantizes the activations once, in its prologue, to int8 per block of
 * 32 with one f32 scale (llama.cpp's Q8_0 rule as the CPU's one-level path, src/backend/cpu/kern_scalar.c:
 * d = absmax / 127, q = round-half-away(x * 127 / absmax), clamped to +-127) into shared memory, and the dot
 * products are __dp4a over 4 bytes: 16 weights of a q8 row per 16-byte load take 4 dp4a, a q4tp tile of 32
 * weights takes 8 dp4a on its nibbles (masked to bytes; the -8 offset applied once per tile through the block's
 * int sum, and the activation bytes stored in nibble order: even then odd elements of each group of 8).
 *
 * Layout: blocks of 8 warps; a warp owns 2 rows (GLU: gate row r and up row r), a lane one 16-byte chunk of each
 * row per step (q8: 16 columns, q4tp: a 32-column tile), 4 steps per batch (8 independent 16-byte loads in
 * flight per lane). Rows of 2048 columns or more are split over 2 warps (8192 or more: 4), each summing its own
 * range of column steps; the segment sums are added in segment order through shared memory, so a row takes fewer
 * dependent load rounds and the block's 8 warps cover 16 / 8 / 4 rows (GLU: 8 / 4 / 2 outputs) per row group.
 * Registers are capped for 3 blocks per SM (q8) / 2 (q4tp: its ladder's double arithmetic spills otherwise); the
 * grid is what the device holds at once and loops over the row groups, so the activation prologue is paid once
 * per block. The first batch of the block's first rows (and q4tp's row
 * ladders) is loaded before the PDL wait (common.cuh: weights are immutable), so the weight stream starts while
 * the previous kernel of the step finishes. Per chunk: an exact int32 sum, then acc += (float)isum * xscale (q4tp:
 * (isum - 8 * block sum) * xscale * tile scale); the row scale (q8) multiplies the warp-reduced sum. Every product
 * (plain, q/k/v multi, gate/up + GLU) of one row width runs one kernel, so the fused outputs keep the plain
 * product's bits. */
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/matvec_i8.cuh"
#include "backend/cuda/tprof.cuh"

CMF_TPROF_BINDER(tprof_bind_i8)


static int g_i8act = -1; /* -1: not read yet; a benign race (every thread computes the same value) */

extern "C" int cmf_cuda_i8act_on(void) {
    if (g_i8act < 0) {
        const char *e = getenv("CMF_CUDA_I8ACT");
        g_i8act = !e || !e[0] ? 1 : e[0] == '0' ? 0 : e[0] == '2' ? 2 : 1;
    }
    return g_i8act;
}

extern "C" void cmf_cuda_set_i8act(int levels) { g_i8act = levels <= 0 ? 0 : levels >= 2 ? 2 : 1; }

/* The calling thread's pending L2 prefetch spans (cmf_cuda_set_l2_prefetch), taken by its next launch. */
static thread_local cmf_cuda_span t_pf[CMF_CUDA_PF_SPANS];
static thread_local int t_npf;

extern "C" void cmf_cuda_set_l2_prefetch(const cmf_cuda_span *spans, int n) {
    t_npf = 0;
    for (int i = 0; spans && i < n && i < CMF_CUDA_PF_SPANS; i++)
        if (spans[i].d_ptr && spans[i].bytes >= 16 && !((uintptr_t)spans[i].d_ptr & 15))
            t_pf[t_npf++] = {spans[i].d_ptr, spans[i].bytes & ~(uint64_t)15};
}

CuPf cu_pf_pending(void) {
    CuPf pf = {};
    for (int i = 0; i < t_npf; i++) pf.p[i] = (const uint8_t *)t_pf[i].d_ptr, pf.n[i] = t_pf[i].bytes, pf.tot += pf.n[i];
    return pf;
}

int cu_pre_on(void) {
    static int pre = -1;
    if (pre < 0) pre = env_int("CMF_CUDA_I8_PRE", 1) != 0;
    return pre;
}

extern "C" uint64_t cmf_cuda_l2pf_bytes(void) {
    static int mib = -1;
    if (mib < 0) mib = env_int("CMF_CUDA_L2PF", 0) > 0 ? env_int("CMF_CUDA_L2PF", 0) : 0;
    return (uint64_t)mib << 20;
}

int mv_i8_usable(int dtype, int64_t cols, int n) {
    const int lv = cmf_cuda_i8act_on();
    return lv && (dtype == CMF_DT_Q8_ROW || dtype == CMF_DT_Q4TP) && cols > 0 && cols % 32 == 0 && n >= 1 && n <= 8 &&
           i8_smem(cols, n, lv) <= I8_SMEM_MAX;
}

/* Rows of row group g for this warp: the weight index, its two row slots (clamped into range) and whether the
 * warp has any row in range. */
template <int GLU>
static __device__ __forceinline__ bool i8_rows(const I8Job &j, unsigned g, int rg, int *wi, int64_t (&row)[I8_R],
                                               int64_t *rbase) {
    const int RG = I8_WARPS / j.ks; /* row slots (pairs; GLU: outputs) per group */
    if (GLU) {
        *wi = 0;
        const int64_t r = (int64_t)g * RG + rg;
        *rbase = r;
        row[0] = row[1] = r < j.w[0].rows ? r : j.w[0].rows - 1;
        return r < j.w[0].rows;
    }
    int k = 0;
    unsigned g0 = 0;
    while (k + 1 < j.count && g >= j.grp_end[k]) g0 = j.grp_end[k++];
    *wi = k;
    const int64_t rb = ((int64_t)(g - g0) * RG + rg) * I8_R, rows = j.w[k].rows;
    *rbase = rb;
#pragma unroll
    for (int i = 0; i < I8_R; i++) row[i] = rb + i < rows ? rb + i : rows - 1;
    return rb < rows;
}

/* The weight of row slot i. */
template <int GLU>
static __device__ __forceinline__ const DevW &i8_w(const I8Job &j, int wi, int i) {
    return GLU ? j.w[i] : j.w[wi];
}

/* One batch of I8_U steps of the warp's rows from column cb: 16-byte chunks (zero from cend on). */
template <int DT, int GLU>
static __device__ __forceinline__ void i8_load(const I8Job &j, int wi, const int64_t (&row)[I8_R], int64_t cb,
                                               int64_t cend, int lane, uint4 (&wv)[I8_U][I8_R]) {
    constexpr int W = I8Chunk<DT>::W, STEP = I8Chunk<DT>::STEP;
#pragma unroll
    for (int u = 0; u < I8_U; u++)
#pragma unroll
        for (int i = 0; i < I8_R; i++) {
            const DevW &w = i8_w<GLU>(j, wi, i);
            const int64_t c = cb + (int64_t)u * STEP + (int64_t)lane * W;
            wv[u][i] = make_uint4(0, 0, 0, 0);
            if (c < cend) {
                const uint4 *p = DT == CMF_DT_Q8_ROW ? (const uint4 *)(w.base + row[i] * w.cols + c)
                                                     : (const uint4 *)(w.base + (row[i] * (w.cols >> 5) + (c >> 5)) * 16);
                wv[u][i] = CMF_CUDA_W_EF ? ld_w16_ef(p) : __ldg(p);
            }
        }
}

/* q8: the row scales of the warp's row slots (lane 0 of segment 0 uses them). */
template <int DT, int GLU>
static __device__ __forceinline__ void i8_rscale(const I8Job &j, int wi, const int64_t (&row)[I8_R], bool use,
                                                 float (&rs)[I8_R]) {
#pragma unroll
    for (int i = 0; i < I8_R; i++) {
        rs[i] = 1.0f;
        if constexpr (DT == CMF_DT_Q8_ROW)
            if (use) rs[i] = ld_f16u(i8_w<GLU>(j, wi, i).s1 + 2 * row[i]);
    }
}

/* q4tp: lanes < I8_R compute the ladder of row slot `lane` into lad[i][32]. */
template <int DT, int GLU>
static __device__ __forceinline__ void i8_ladders(const I8Job &j, int wi, const int64_t (&row)[I8_R], int lane,
                                                  float (*lad)[32]) {
    if constexpr (DT == CMF_DT_Q4TP) {
        if (lane < I8_R) dev_q4tp_ladder(i8_w<GLU>(j, wi, lane).s1 + 4 * row[lane], lad[lane]);
        __syncwarp();
    }
}

/* The batch's dot products: acc[i][t] += the exact int32 chunk sums, scaled (one fixed order for every mode). */
template <int DT, int N, int GLU>
static __device__ __forceinline__ void i8_dot(const I8Job &j, int wi, const int64_t (&row)[I8_R], int64_t cb,
                                              int64_t cend, int lane, const uint4 (&wv)[I8_U][I8_R], int lv,
                                              const int8_t *xq, const float *xs, const int *sx,
                                              const float (*lad)[32], int64_t cols, float (&acc)[I8_R][N]) {
    constexpr int W = I8Chunk<DT>::W, STEP = I8Chunk<DT>::STEP;
    const int64_t nb = cols >> 5, lstride = (int64_t)N * nb; /* one level's blocks */
#pragma unroll
    for (int u = 0; u < I8_U; u++) {
        const int64_t c = cb + (int64_t)u * STEP + (int64_t)lane * W;
        if (c >= cend) break;
        const int64_t blk = c >> 5;
        float ts[I8_R];
        if constexpr (DT == CMF_DT_Q4TP) {
#pragma unroll
            for (int i = 0; i < I8_R; i++) {
                const DevW &w = i8_w<GLU>(j, wi, i);
                ts[i] = lad[i][dev_tp_code(w.s2 + row[i] * w.stride, blk)];
            }
        }
#pragma unroll
        for (int t = 0; t < N; t++)
#pragma unroll
        for (int l = 0; l < 2; l++) { /* level 1, then (lv == 2) level 2 */
            if (l >= lv) break;
            const int8_t *xp = xq + l * lstride * 32 + (int64_t)t * cols + c;
            const float d = xs[l * lstride + t * nb + blk];
            if constexpr (DT == CMF_DT_Q8_ROW) {
                const int4 xv = *(const int4 *)xp;
#pragma unroll
                for (int i = 0; i < I8_R; i++) {
                    int s = __dp4a((int)wv[u][i].x, xv.x, 0);
                    s = __dp4a((int)wv[u][i].y, xv.y, s);
                    s = __dp4a((int)wv[u][i].z, xv.z, s);
                    s = __dp4a((int)wv[u][i].w, xv.w, s);
                    acc[i][t] = fmaf((float)s, d, acc[i][t]);
                }
            } else {
                const int4 xa = *(const int4 *)xp, xb = *(const int4 *)(xp + 16);
                const int X[8] = {xa.x, xa.y, xa.z, xa.w, xb.x, xb.y, xb.z, xb.w};
                const int corr = 8 * sx[l * lstride + t * nb + blk];
#pragma unroll
                for (int i = 0; i < I8_R; i++) {
                    const uint32_t wu[4] = {wv[u][i].x, wv[u][i].y, wv[u][i].z, wv[u][i].w};
                    int s = 0;
#pragma unroll
                    for (int k = 0; k < 4; k++) {
                        s = __dp4a((int)(wu[k] & 0x0f0f0f0fu), X[2 * k], s);
                        s = __dp4a((int)((wu[k] >> 4) & 0x0f0f0f0fu), X[2 * k + 1], s);
                    }
                    acc[i][t] = fmaf(__fmul_rn((float)(s - corr), d), ts[i], acc[i][t]);
                }
            }
        }
    }
}

template <int DT, int N, int GLU, int XP>
static __global__ void __launch_bounds__(256, DT == CMF_DT_Q8_ROW ? 3 : 2) k_mv_i8(I8Job j, const float *__restrict__ x,
                                                                                  int gelu) {
    TP_DECL;
    TP_AT(0);
    extern __shared__ __align__(16) int8_t i8_sm[];
    __shared__ float lad[I8_WARPS][I8_R][32];
    __shared__ float red[I8_WARPS][I8_R][N]; /* split-column partial sums (j.ks > 1) */
    __shared__ float nsh[9], ninv[N];        /* prologue RMSNorm (j.nx) */
    constexpr int BATCH = I8_U * I8Chunk<DT>::STEP;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, ks = j.ks;
    const int rg = warp / ks, seg = warp % ks; /* row slot of the group, column segment */
    const int64_t cols = j.w[0].cols, nb = cols >> 5;
    const int lv = j.levels;
    int8_t *xq = i8_sm;
    float *xs = (float *)(i8_sm + (int64_t)lv * N * cols);
    int *sx = (int *)(xs + lv * N * nb);
    /* this warp's columns: steps [seg * S / ks, (seg + 1) * S / ks) of the S warp steps of a row */
    const int64_t S = (cols + I8Chunk<DT>::STEP - 1) / I8Chunk<DT>::STEP;
    const int64_t cbeg = seg * S / ks * I8Chunk<DT>::STEP, cstop = (seg + 1) * S / ks * I8Chunk<DT>::STEP;
    const int64_t cend = cstop < cols ? cstop : cols;

    unsigned g = blockIdx.x;
    int wi = 0;
    int64_t row[I8_R] = {0, 0}, rbase = 0;
    bool pre = j.wpre != 0 && g < j.groups && i8_rows<GLU>(j, g, rg, &wi, row, &rbase);
    uint4 wv[I8_U][I8_R];
    float rs[I8_R] = {1.0f, 1.0f};
    const bool out_lane = seg == 0 && lane == 0; /* the lane that scales and stores the row sums */
    if (threadIdx.x == 0 && j.pf_tot && !j.pf_at) i8_l2pf(j);
    if (pre) { /* weights only: before the wait (the ladders first: nothing else is live then) */
        i8_ladders<DT, GLU>(j, wi, row, lane, lad[warp]);
        i8_load<DT, GLU>(j, wi, row, cbeg, cend, lane, wv);
        if (j.pre) i8_rscale<DT, GLU>(j, wi, row, out_lane, rs);
        if constexpr (DT == CMF_DT_Q4TP) /* the first batch's tile codes into L2 (read in i8_dot after the wait) */
            if (j.pre && cbeg + (int64_t)lane * 32 < cend)
#pragma unroll
                for (int i = 0; i < I8_R; i++) {
                    const DevW &w = i8_w<GLU>(j, wi, i);
                    prefetch_l2(w.s2 + row[i] * w.stride + ((cbeg >> 5) + lane) * 5 / 8);
                }
    }
    pdl_wait();
    pdl_trigger();
    TP_AT(1);
    if (j.nx) i8_norm_inv<N>(j, cols, ninv, nsh, TP_ARG);
    i8_quantize<DT, N>(j.nx ? j.nx : x, cols, lv, xq, xs, sx, j, j.nx ? ninv : nullptr,
                       j.nx && blockIdx.x == 0 ? j.nout : nullptr, 0, 4 * 32, TP_ARG);
    __syncthreads();
    TP_AT(2);

    for (; g < j.groups; g += gridDim.x) { /* block-uniform trip count (the split-column reduction syncs) */
        bool act = pre;
        if (!pre) {
            act = i8_rows<GLU>(j, g, rg, &wi, row, &rbase);
            if (act) i8_ladders<DT, GLU>(j, wi, row, lane, lad[warp]);
            if (act && j.pre) i8_rscale<DT, GLU>(j, wi, row, out_lane, rs);
        }
        float acc[I8_R][N];
#pragma unroll
        for (int i = 0; i < I8_R; i++)
#pragma unroll
            for (int t = 0; t < N; t++) acc[i][t] = 0.0f;
        if (act)
            for (int64_t cb = cbeg; cb < cend; cb += BATCH) {
                if (!pre) i8_load<DT, GLU>(j, wi, row, cb, cend, lane, wv);
                pre = false;
                i8_dot<DT, N, GLU>(j, wi, row, cb, cend, lane, wv, lv, xq, xs, sx, lad[warp], cols, acc);
            }
        pre = false;
        /* XP (j.xpre): the next group's rows, ladders, scales and first batch now, so that its loads are in flight
         * during this group's sums and stores (the weights are immutable; lad[warp] is free after the dots) */
        int nwi = wi;
        int64_t nrow[I8_R], nrbase = rbase;
        float nrs[I8_R];
#pragma unroll
        for (int i = 0; i < I8_R; i++) nrow[i] = row[i], nrs[i] = rs[i];
        bool npre = false;
        if (XP && g + gridDim.x < j.groups) {
            npre = i8_rows<GLU>(j, g + gridDim.x, rg, &nwi, nrow, &nrbase);
            if (npre) {
                i8_ladders<DT, GLU>(j, nwi, nrow, lane, lad[warp]);
                i8_load<DT, GLU>(j, nwi, nrow, cbeg, cend, lane, wv);
                if (j.pre) i8_rscale<DT, GLU>(j, nwi, nrow, out_lane, nrs);
            }
        }
        float s[I8_R][N];
#pragma unroll
        for (int i = 0; i < I8_R; i++)
#pragma unroll
            for (int t = 0; t < N; t++) s[i][t] = warp_sum(acc[i][t]);
        if (ks > 1) { /* the segments' sums in segment order, by the segment-0 warp */
            if (lane == 0)
#pragma unroll
                for (int i = 0; i < I8_R; i++)
#pragma unroll
                    for (int t = 0; t < N; t++) red[warp][i][t] = s[i][t];
            __syncthreads();
            if (seg == 0)
#pragma unroll
                for (int i = 0; i < I8_R; i++)
#pragma unroll
                    for (int t = 0; t < N; t++) {
                        float v = red[warp][i][t];
                        for (int k = 1; k < ks; k++) v += red[warp + k][i][t];
                        s[i][t] = v;
                    }
            __syncthreads();
        }
        if (!act || !out_lane) {
            if (XP && npre) { /* the next group starts with its first batch in wv */
                wi = nwi, rbase = nrbase, pre = true;
#pragma unroll
                for (int i = 0; i < I8_R; i++) row[i] = nrow[i], rs[i] = nrs[i];
            }
            continue;
        }
        if (!j.pre) i8_rscale<DT, GLU>(j, wi, row, true, rs);
        const int64_t rows = j.w[wi].rows;
#pragma unroll
        for (int t = 0; t < N; t++) {
            float o[I8_R];
#pragma unroll
            for (int i = 0; i < I8_R; i++) o[i] = s[i][t] * rs[i];
            if (GLU) {
                j.y[0][(int64_t)t * rows + rbase] = i8_act(o[0], gelu) * o[1];
            } else {
#pragma unroll
                for (int i = 0; i < I8_R; i++) {
                    if (rbase + i >= rows) continue;
                    float v = o[i];
                    if (j.bias[wi]) v = v + j.bias[wi][rbase + i];
                    j.y[wi][(int64_t)t * rows + rbase + i] = v;
                    if (j.rx) { /* the residual add x += y of the output (cmf_cuda_add's x + o) */
                        float *r = j.rx + (int64_t)t * rows + rbase + i;
                        *r = *r + v;
                    }
                }
            }
        }
        if (XP && npre) { /* (as above, for the lane that stored) */
            wi = nwi, rbase = nrbase, pre = true;
#pragma unroll
            for (int i = 0; i < I8_R; i++) row[i] = nrow[i], rs[i] = nrs[i];
        }
    }
    if (threadIdx.x == 0 && j.pf_tot && j.pf_at) i8_l2pf(j);
    TP_AT(3);
    TP_PUT(TP_I8, j.w[0].base);
}

/* One launch of the kernel for n tokens; the grid is the row groups, at most the blocks the device holds at once
 * (occupancy of this instance at this shared-memory size, cached per instance), so no block waits for a second
 * wave: the blocks loop over the groups. */
template <int DT, int N, int GLU, int XP = 0>
static void i8_launch_inst(const I8Job &j, size_t smem, const float *x, int gelu, cudaStream_t s) {
    enum { SLOTS = 8 };
    static size_t occ_smem[SLOTS], attr_smem = 48 * 1024; /* per instance; benign races (same values) */
    static int occ_val[SLOTS], occ_n;
    if (smem > attr_smem) { /* above 48 KiB of dynamic shared memory needs the opt-in */
        if (cudaFuncSetAttribute(k_mv_i8<DT, N, GLU, XP>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)I8_SMEM_MAX) ==
            cudaSuccess)
            attr_smem = I8_SMEM_MAX;
    }
    int occ = 0;
    for (int i = 0; i < occ_n && !occ; i++)
        if (occ_smem[i] == smem) occ = occ_val[i];
    if (!occ) { /* blocks per SM at this shared-memory size, looked up once per size (a model has a few) */
        int b = 0;
        if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&b, k_mv_i8<DT, N, GLU, XP>, 256, smem) != cudaSuccess || b < 1)
            b = 1;
        occ = b < 4 ? b : 4;
        const int slot = occ_n < SLOTS ? occ_n++ : (int)(smem % SLOTS);
        occ_smem[slot] = smem, occ_val[slot] = occ;
    }
    const unsigned cap = (unsigned)(i8_sms() * occ), grid = j.groups < cap ? j.groups : cap;
    cu_launch(k_mv_i8<DT, N, GLU, XP>, grid, 256, smem, s, j, x, gelu);
}

template <int DT, int GLU>
static void i8_launch_n(const I8Job &j, size_t smem, const float *x, int n, int gelu, cudaStream_t s) {
    switch (n) {
    case 1: /* XP (CMF_CUDA_I8_XPRE=1) instantiated for single-token decode only */
        if (j.xpre) i8_launch_inst<DT, 1, GLU, 1>(j, smem, x, gelu, s);
        else i8_launch_inst<DT, 1, GLU>(j, smem, x, gelu, s);
        break;
    case 2: i8_launch_inst<DT, 2, GLU>(j, smem, x, gelu, s); break;
    case 3: i8_launch_inst<DT, 3, GLU>(j, smem, x, gelu, s); break;
    case 4: i8_launch_inst<DT, 4, GLU>(j, smem, x, gelu, s); break;
    case 5: i8_launch_inst<DT, 5, GLU>(j, smem, x, gelu, s); break;
    case 6: i8_launch_inst<DT, 6, GLU>(j, smem, x, gelu, s); break;
    case 7: i8_launch_inst<DT, 7, GLU>(j, smem, x, gelu, s); break;
    default: i8_launch_inst<DT, 8, GLU>(j, smem, x, gelu, s); break;
    }
}

extern "C" int cmf_cuda_matvec_ex_ok(const cmf_cuda_weight *w, int count, int n) {
    return w && count >= 1 && count <= 3 && cmf_cuda_matvec_multi_ok(w, count, n) &&
           mv_i8_usable(w[0].dtype, w[0].cols, n);
}

/* The extras of cmf_cuda_mv_ex into the job (after the checks of cmf_cuda_matvec_ex_ok). */
static cmf_status i8_ex(I8Job &j, const cmf_cuda_mv_ex *ex, float *d_x, int count, int glu) {
    if (!ex) return CMF_OK;
    if (ex->d_res && (count != 1 || glu))
        return cmf_err(CMF_E_ARG, "cuda_matvec_ex: the residual epilogue takes one plain product (count %d%s)", count,
                       glu ? ", glu" : "");
    j.rx = ex->d_res;
    j.nx = ex->d_norm_x;
    j.nw = ex->d_norm_w;
    j.neps = ex->eps;
    j.ngemma = ex->gemma_style;
    j.nout = d_x;
    j.qbuf = (uint8_t *)ex->d_i8q;
    return CMF_OK;
}

extern "C" cmf_status cmf_cuda_matvec_multi_ex(const cmf_cuda_weight *w, int count, float *d_x, float *const *d_y,
                                               const float *const *d_bias, int n, const cmf_cuda_mv_ex *ex,
                                               cmf_cuda_stream stream) {
    if (!cmf_cuda_matvec_ex_ok(w, count, n) || !d_x || !d_y)
        return cmf_err(CMF_E_UNSUPPORTED, "cuda_matvec_multi_ex: needs 1..3 q8_row / q4tp weights of one shape class "
                                          "on the int8-activation path, n 1..8, buffers (n = %d)", n);
    I8Job j;
    memset(&j, 0, sizeof j);
    j.count = count;
    for (int i = 0; i < count; i++) {
        if (!d_y[i]) return cmf_err(CMF_E_ARG, "cuda_matvec_multi_ex: NULL output %d", i);
        j.w[i] = make_devw(&w[i]);
        j.y[i] = d_y[i];
        j.bias[i] = d_bias ? d_bias[i] : NULL;
    }
    cmf_status st = i8_ex(j, ex, d_x, count, 0);
    return st != CMF_OK ? st : mv_i8_launch(j, w[0].dtype, d_x, n, 0, 0, CU_STREAM(stream));
}

extern "C" cmf_status cmf_cuda_matvec_glu_ex(const cmf_cuda_weight *gate, const cmf_cuda_weight *up, float *d_x,
                                             float *d_out, int n, int gelu_tanh, const cmf_cuda_mv_ex *ex,
                                             cmf_cuda_stream stream) {
    const cmf_cuda_weight w[2] = {*gate, *up};
    if (!cmf_cuda_matvec_ex_ok(w, 2, n) || gate->rows != up->rows || !d_x || !d_out)
        return cmf_err(CMF_E_UNSUPPORTED, "cuda_matvec_glu_ex: needs gate / up of one shape (q8_row / q4tp) on the "
                                          "int8-activation path, n 1..8, buffers (n = %d)", n);
    I8Job j;
    memset(&j, 0, sizeof j);
    j.count = 2;
    j.w[0] = make_devw(gate);
    j.w[1] = make_devw(up);
    j.y[0] = d_out;
    cmf_status st = i8_ex(j, ex, d_x, 2, 1);
    return st != CMF_OK ? st : mv_i8_launch(j, gate->dtype, d_x, n, 1, gelu_tanh, CU_STREAM(stream));
}

cmf_status mv_i8_launch(I8Job &j, int dtype, const float *d_x, int n, int glu, int gelu, cudaStream_t s) {
    const int64_t cols = j.w[0].cols;
    static int split = -1; /* CMF_CUDA_I8_SPLIT=0: one warp per row (an A/B switch; read once, benign race) */
    if (split < 0) split = !(getenv("CMF_CUDA_I8_SPLIT") && getenv("CMF_CUDA_I8_SPLIT")[0] == '0');
    static int ks4 = -1; /* CMF_CUDA_I8_KS4: the least cols that take 4 warps per row (an A/B switch; 8192) */
    if (ks4 < 0) ks4 = env_int("CMF_CUDA_I8_KS4", 8192) > 0 ? env_int("CMF_CUDA_I8_KS4", 8192) : 8192;
    j.ks = !split ? 1 : cols >= ks4 ? 4 : cols >= 2048 ? 2 : 1; /* wide rows: more warps per row */
    const int rg = I8_WARPS / j.ks;
    j.groups = 0;
    if (glu) {
        j.groups = (unsigned)((j.w[0].rows + rg - 1) / rg);
    } else {
        for (int i = 0; i < j.count; i++) {
            j.groups += (unsigned)((j.w[i].rows + rg * I8_R - 1) / (rg * I8_R));
            j.grp_end[i] = j.groups;
        }
    }
    j.levels = cmf_cuda_i8act_on() >= 2 ? 2 : 1;
    static int pf_at = -1; /* CMF_CUDA_L2PF_AT=1: an A/B switch (read once) */
    if (pf_at < 0) pf_at = env_int("CMF_CUDA_L2PF_AT", 0) != 0;
    static int xpre = -1; /* CMF_CUDA_I8_XPRE=1: the next row group's first batch during this one's sums (opt-in) */
    if (xpre < 0) xpre = env_int("CMF_CUDA_I8_XPRE", 0) == 1;
    j.pre = cu_pre_on(), j.pf_at = pf_at, j.pf_tot = 0, j.xpre = xpre;
    static int wpre = -2, norm1 = -1, qilp = -1; /* CMF_CUDA_I8_WPRE, _NORM1, _QILP: A/B switches (weights.cuh) */
    if (wpre < -1) wpre = env_int("CMF_CUDA_I8_WPRE", -1) < 0 ? -1 : env_int("CMF_CUDA_I8_WPRE", -1);
    if (norm1 < 0) norm1 = env_int("CMF_CUDA_I8_NORM1", 1) != 0;
    if (qilp < 0) qilp = env_int("CMF_CUDA_I8_QILP", 1) != 0;
    j.wpre = wpre, j.norm1 = norm1, j.qilp = qilp;
    for (int i = 0; i < t_npf; i++) {
        j.pf[i] = (const uint8_t *)t_pf[i].d_ptr, j.pfn[i] = t_pf[i].bytes;
        j.pf_tot += t_pf[i].bytes;
    }
    t_npf = 0;
    const size_t smem = i8_smem(j.w[0].cols, n, j.levels);
    int64_t units = j.w[0].rows;
    for (int i = 1; !glu && i < j.count; i++) units += j.w[i].rows;
    const int sm = mv_i8_stream_pick(dtype, cols, units); /* CMF_CUDA_I8_STREAM; by the shape when unset */
    if (sm && smem <= (size_t)I8S_SMEM_MAX(dtype)) return mv_i8s_launch(j, dtype, d_x, n, glu, gelu, sm, s);
    if (dtype == CMF_DT_Q8_ROW) {
        if (glu) i8_launch_n<CMF_DT_Q8_ROW, 1>(j, smem, d_x, n, gelu, s);
        else i8_launch_n<CMF_DT_Q8_ROW, 0>(j, smem, d_x, n, gelu, s);
    } else {
        if (glu) i8_launch_n<CMF_DT_Q4TP, 1>(j, smem, d_x, n, gelu, s);
        else i8_launch_n<CMF_DT_Q4TP, 0>(j, smem, d_x, n, gelu, s);
    }
    CU_LAUNCHED("matvec (int8 activations) kernel");
    return CMF_OK;
}
