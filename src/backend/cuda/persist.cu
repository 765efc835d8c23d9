/* persist.cu — the persistent decode kernel of the cuda backend (opt-in: CMF_CUDA_PERSIST=1): all layers of a
 * one-token decode step in ONE launch, for Llama / Qwen3-shaped layers whose seven matrices are q8_row (CMF_FORMAT.md
 * §2.2) with the int8-activation products (matvec_i8.cu). The embedding, the final norm and the head stay the
 * backend's ordinary launches.
 *
 * Why: a decode step of small matrices is a chain of dependent kernels, and each costs a few us of DRAM / L2 round
 * trips (weights ramp-up, activation read, reduction, write) whatever its size (bench/cuda/RESULTS.md, "Decode fixed
 * cost": a 1024x1024 q8 product runs at 7% of the copy bandwidth). Here a grid of one block per SM (a cooperative
 * launch, so every block is resident) walks the layers' stages and waits on a global-memory barrier instead of
 * kernel boundaries, and while it waits, the block's slice of the NEXT product's weights is already streaming into
 * its shared memory (cp.async into one of two buffers; the weights do not depend on the activations), so the
 * dependency chain pays the activation hop and the barrier, not the weight stream (the "no bubbles" megakernel idea,
 * Hazy Research 2025, "Look Ma, No Bubbles!").
 *
 * The host side (which steps it takes, the layer table, the launch, the profile) is persist_host.cu; the types both
 * share, persist.cuh.
 *
 * Stages of layer l (a grid barrier before each, except the first of layer 0, whose input the embedding launch
 * wrote):
 *   A  q/k/v products; every block normalizes x (attn_norm, RMSNorm) and quantizes it to Q8_0 in its prologue;
 *   B  attention: q/k norm + RoPE + cache write + flash-decoding (attn_decode.cuh's work items, with the norm and
 *      RoPE inside, as cmf_cuda_attn_decode_rope), two items at a time per block (128-thread halves);
 *   C  o_proj, its output added to x (the residual) in the epilogue;
 *   D  gate / up + SiLU / GELU-tanh GLU into hb, with the ffn_norm RMSNorm of x in the prologue;
 *   E  down_proj, added to x.
 * Products: tasks of two rows (q/k/v, o, down: consecutive rows of one matrix; gate/up: gate row r and up row r),
 * contiguous task ranges per block, a warp per task. Every sum has the bits of the graph path's kernels (matvec_i8.cu
 * with the fused norm / residual, attention.cu with the fused RoPE; tests/cuda/test_cuda_persist.c checks the logits
 * bit for bit): the RMSNorm in k_rmsnorm's order, Q8_0 per block of 32, each lane's 16-column chunks in column order
 * as fmaf((float)dp4a sum, activation scale, acc), warp_sum, the split-column segments of rows of >= 2048 / 8192
 * columns (CMF_CUDA_I8_SPLIT, CMF_CUDA_I8_KS4) summed apart and added in segment order, times the row scale.
 * Activations written in the launch are read through L2 (__ldcg); the barrier is a release / acquire pair at gpu
 * scope. A barrier that waits longer than 2 s traps (a launch error at the next sync) rather than hanging. */
#include "backend/cuda/matvec_i8.cuh"
#include "backend/cuda/persist.cuh"
#include "backend/cuda/weights.cuh"

namespace cmf_cuda_be {

/* One product stage of a layer. */
struct PSt {
    const uint8_t *w[3];
    int64_t rows[3];
    unsigned tend[3]; /* tasks [tend[i-1], tend[i]) belong to weight i */
    unsigned tasks;
    int count, glu, norm, ks;
    int64_t cols;
    float *y[3];   /* outputs (NULL: not stored) */
    const float *in, *nw;
    float *res;    /* residual: res[r] += output */
};

static __device__ __forceinline__ PSt p_stage(const PArgs &p, int l, int kind) {
    const PLayer &L = p.layers[l];
    PSt s;
    s.count = 1, s.glu = 0, s.norm = 0, s.nw = nullptr, s.res = nullptr;
    s.y[0] = s.y[1] = s.y[2] = nullptr;
    s.w[1] = s.w[2] = nullptr, s.rows[1] = s.rows[2] = 0;
    switch (kind) {
    case 0: /* q / k / v */
        s.count = 3, s.norm = 1, s.nw = L.attn_norm, s.in = p.x, s.cols = p.D, s.ks = p.ks_qkv;
        s.w[0] = L.w[0], s.w[1] = L.w[1], s.w[2] = L.w[2];
        s.rows[0] = p.QD, s.rows[1] = p.KVD, s.rows[2] = p.KVD;
        s.y[0] = p.q, s.y[1] = p.k, s.y[2] = p.v;
        break;
    case 1: /* o, + residual */
        s.in = p.att, s.cols = p.QD, s.ks = p.ks_qd, s.w[0] = L.w[3], s.rows[0] = p.D, s.res = p.x;
        break;
    case 2: /* gate / up + GLU */
        s.count = 2, s.glu = 1, s.norm = 1, s.nw = L.ffn_norm, s.in = p.x, s.cols = p.D, s.ks = p.ks_gu;
        s.w[0] = L.w[4], s.w[1] = L.w[5], s.rows[0] = s.rows[1] = p.F, s.y[0] = p.hb;
        break;
    default: /* down, + residual */
        s.in = p.hb, s.cols = p.F, s.ks = p.ks_f, s.w[0] = L.w[6], s.rows[0] = p.D, s.res = p.x;
        break;
    }
    if (s.glu) {
        s.tasks = s.tend[0] = s.tend[1] = s.tend[2] = (unsigned)s.rows[0];
    } else {
        unsigned t = 0;
        for (int i = 0; i < 3; i++) {
            if (i < s.count) t += (unsigned)((s.rows[i] + 1) / 2);
            s.tend[i] = t;
        }
        s.tasks = t;
    }
    return s;
}

/* Task t: its weight index and its two rows (the second clamped into range). */
static __device__ __forceinline__ void p_task(const PSt &s, unsigned t, int *wi, int64_t *r0, int64_t *r1) {
    if (s.glu) {
        *wi = 0, *r0 = *r1 = t;
        return;
    }
    int k = 0;
    unsigned t0 = 0;
    while (k + 1 < s.count && t >= s.tend[k]) t0 = s.tend[k++];
    *wi = k;
    *r0 = (int64_t)(t - t0) * 2;
    *r1 = *r0 + 1 < s.rows[k] ? *r0 + 1 : s.rows[k] - 1;
}
/* The weight / row count of a task's row slot (GLU: gate, up). */
static __device__ __forceinline__ const uint8_t *p_w(const PSt &s, int wi, int slot) {
    return s.glu ? s.w[slot] : s.w[wi];
}
static __device__ __forceinline__ int64_t p_rows(const PSt &s, int wi, int slot) {
    return s.glu ? s.rows[slot] : s.rows[wi];
}

/* The block's task range. */
static __device__ __forceinline__ void p_range(const PSt &s, unsigned *t0, unsigned *t1) {
    *t0 = (unsigned)((uint64_t)blockIdx.x * s.tasks / gridDim.x);
    *t1 = (unsigned)((uint64_t)(blockIdx.x + 1) * s.tasks / gridDim.x);
}
/* Tasks of the block's range held in one weight buffer of cap bytes. */
static __device__ __forceinline__ unsigned p_fit(const PSt &s, unsigned n, unsigned cap) {
    const unsigned f = (unsigned)(cap / (2 * (uint64_t)s.cols));
    return n < f ? n : f;
}

static __device__ __forceinline__ void cp_async16(void *dst, const void *src) {
    const unsigned d = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(d), "l"(src) : "memory");
}
static __device__ __forceinline__ void cp_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
static __device__ __forceinline__ void cp_wait1() { asm volatile("cp.async.wait_group 1;" ::: "memory"); }

/* Starts copying the block's weight rows of stage s (the tasks that fit) into buf: task k's rows at
 * buf + (2k + i) * cols. The caller commits the group. */
static __device__ void p_prefetch(const PSt &s, uint8_t *buf, unsigned cap) {
    unsigned t0, t1;
    p_range(s, &t0, &t1);
    const unsigned nfit = p_fit(s, t1 - t0, cap);
    const unsigned per_row = (unsigned)(s.cols / 16), per_task = 2 * per_row;
    const unsigned units = nfit * per_task;
    for (unsigned u = threadIdx.x; u < units; u += PK_THREADS) {
        const unsigned k = u / per_task, rem = u - k * per_task, i = rem / per_row, ch = rem - i * per_row;
        int wi;
        int64_t r0, r1;
        p_task(s, t0 + k, &wi, &r0, &r1);
        const uint8_t *src = p_w(s, wi, i) + (i ? r1 : r0) * s.cols + (int64_t)ch * 16;
        cp_async16(buf + (uint64_t)u * 16, src);
    }
}

/* ---- the same slices by the Hopper bulk-copy engine (CMF_CUDA_PERSIST_TMA=1): one cp.async.bulk per task (its two
 * rows, contiguous when they are consecutive rows of one matrix; GLU: gate row and up row), completion counted in
 * bytes on an mbarrier per buffer (PTX ISA, "cp.async.bulk", "mbarrier"), so a block's copies take a few
 * instructions of warp 0 instead of one 16-byte request per thread and chunk. */
/* Bytes of the block's fitting tasks of stage s (0: nothing to copy, no mbarrier phase). */
static __device__ __forceinline__ unsigned p_tma_bytes(const PSt &s, unsigned t0, unsigned nfit) {
    unsigned b = 0;
    for (unsigned k = 0; k < nfit; k++) {
        int wi;
        int64_t r0, r1;
        p_task(s, t0 + k, &wi, &r0, &r1);
        b += (unsigned)((s.glu || r1 != r0 ? 2 : 1) * s.cols);
    }
    return b;
}
/* Warp 0 issues the bulk copies of stage s's fitting tasks into buf (task k at buf + 2k * cols, as p_prefetch). */
static __device__ void p_prefetch_tma(const PSt &s, uint8_t *buf, unsigned cap, uint64_t *mb) {
    if (threadIdx.x >= 32) return;
    unsigned t0, t1;
    p_range(s, &t0, &t1);
    const unsigned nfit = p_fit(s, t1 - t0, cap);
    if (!nfit) return;
    const int lane = threadIdx.x;
    if (lane == 0) {
        mb_expect(mb, p_tma_bytes(s, t0, nfit)); /* earlier generic reads of buf first (its proxy fence) */
    }
    __syncwarp();
    for (unsigned k = lane; k < nfit; k += 32) {
        int wi;
        int64_t r0, r1;
        p_task(s, t0 + k, &wi, &r0, &r1);
        uint8_t *dst = buf + (uint64_t)k * 2 * s.cols;
        const int parts = s.glu ? 2 : 1;
        for (int i = 0; i < parts; i++) {
            const uint8_t *src = p_w(s, wi, i) + (i ? r1 : r0) * s.cols;
            const unsigned n = (unsigned)((!s.glu && r1 != r0 ? 2 : 1) * s.cols);
            bulk_copy(dst + (uint64_t)i * s.cols, src, n, mb);
        }
    }
}

/* Row scales (f16 after the int8 plane) of the warp's first PK_PRE tasks, loaded before the barrier. */
static __device__ __forceinline__ void p_scales(const PSt &s, float (&rs)[PK_PRE][2]) {
    unsigned t0, t1;
    p_range(s, &t0, &t1);
    const unsigned warp = threadIdx.x >> 5;
#pragma unroll
    for (int k = 0; k < PK_PRE; k++) {
        const unsigned t = t0 + warp + (unsigned)k * PK_WARPS;
        rs[k][0] = rs[k][1] = 1.0f;
        if (t < t1) {
            int wi;
            int64_t r0, r1;
            p_task(s, t, &wi, &r0, &r1);
#pragma unroll
            for (int i = 0; i < 2; i++) {
                const int64_t rows = p_rows(s, wi, i);
                rs[k][i] = ld_f16u(p_w(s, wi, i) + rows * s.cols + 2 * (i ? r1 : r0));
            }
        }
    }
}

/* The stage's input (RMSNorm of x when s.norm) quantized into xq [cols] int8 / xs [cols / 32] scales by the whole
 * block: groups of 8 lanes own a block of 32 (a float4 each), as matvec_i8.cu's prologue; the sum of squares in
 * k_rmsnorm's order (thread i: elements i, i + 256, ..., then block_sum256). The first pass's loads are issued
 * before the sum's, so a row of up to 4096 values costs one L2 round trip. */
static __device__ void p_quantize(const PSt &s, const PArgs &p, int8_t *xq, float *xs, float *sh) {
    const int sub = threadIdx.x & 7, oct = threadIdx.x >> 3;
    const int64_t nb = s.cols >> 5;
    float4 v[4];
#pragma unroll
    for (int k = 0; k < 4; k++) {
        const int64_t b = 32 * k + oct;
        v[k] = b < nb ? __ldcg((const float4 *)(s.in + b * 32 + sub * 4)) : make_float4(0, 0, 0, 0);
    }
    float inv = 1.0f;
    if (s.norm) {
        float ss = 0.0f;
        for (int64_t i = threadIdx.x; i < s.cols; i += PK_THREADS) {
            const float xv = __ldcg(s.in + i);
            ss = fmaf(xv, xv, ss);
        }
        ss = block_sum256(ss, sh);
        inv = 1.0f / sqrtf(ss / (float)s.cols + p.eps);
    }
    for (int64_t base = 0; base < nb; base += 4 * 32) {
        if (base) {
#pragma unroll
            for (int k = 0; k < 4; k++) {
                const int64_t b = base + 32 * k + oct;
                v[k] = b < nb ? __ldcg((const float4 *)(s.in + b * 32 + sub * 4)) : make_float4(0, 0, 0, 0);
            }
        }
#pragma unroll
        for (int k = 0; k < 4; k++) {
            const int64_t b = base + 32 * k + oct;
            float e[4] = {v[k].x, v[k].y, v[k].z, v[k].w};
            if (s.norm && b < nb) {
                const int64_t c = b * 32 + sub * 4;
#pragma unroll
                for (int m = 0; m < 4; m++) {
                    const float g = s.nw ? (p.gemma ? 1.0f + __ldg(s.nw + c + m) : __ldg(s.nw + c + m)) : 1.0f;
                    e[m] = __fmul_rn(__fmul_rn(e[m], inv), g);
                }
            }
            float d;
            int q[4], sum;
            uint32_t pk;
            i8_qblock<CMF_DT_Q8_ROW>(e, sub, &d, q, &pk, &sum); /* matvec_i8.cuh: the Q8_0 rule of the products */
            if (b < nb) {
                *(uint32_t *)(xq + b * 32 + sub * 4) = pk;
                if (sub == 0) xs[b] = d;
            }
        }
    }
}

/* The dot products of one task's two rows (from shared memory when sm, else from global memory) against the
 * quantized input: every lane gets the rows' sums in matvec_i8.cu's order. */
static __device__ __forceinline__ void p_dot(const PSt &s, const uint8_t *g0, const uint8_t *g1, const uint8_t *sm,
                                             const int8_t *xq, const float *xs, int lane, float (&tot)[2]) {
    const int64_t cols = s.cols, S = (cols + 511) / 512;
    for (int seg = 0; seg < s.ks; seg++) {
        const int64_t cbeg = seg * S / s.ks * 512, cstop = (seg + 1) * S / s.ks * 512;
        const int64_t cend = cstop < cols ? cstop : cols;
        float acc0 = 0.0f, acc1 = 0.0f;
        for (int64_t cb = cbeg; cb < cend; cb += 4 * 512) {
            uint4 w0[4], w1[4];
#pragma unroll
            for (int u = 0; u < 4; u++) {
                const int64_t c = cb + u * 512 + lane * 16;
                w0[u] = w1[u] = make_uint4(0, 0, 0, 0);
                if (c < cend) {
                    if (sm) {
                        w0[u] = *(const uint4 *)(sm + c);
                        w1[u] = *(const uint4 *)(sm + cols + c);
                    } else {
                        w0[u] = __ldg((const uint4 *)(g0 + c));
                        w1[u] = __ldg((const uint4 *)(g1 + c));
                    }
                }
            }
#pragma unroll
            for (int u = 0; u < 4; u++) {
                const int64_t c = cb + u * 512 + lane * 16;
                if (c >= cend) break;
                const int4 xv = *(const int4 *)(xq + c);
                const float d = xs[c >> 5];
                acc0 = fmaf((float)i8_chunk_q8(w0[u], xv), d, acc0); /* matvec_i8.cuh's chunk dot */
                acc1 = fmaf((float)i8_chunk_q8(w1[u], xv), d, acc1);
            }
        }
        const float s0 = warp_sum(acc0), s1 = warp_sum(acc1);
        tot[0] = seg ? tot[0] + s0 : s0;
        tot[1] = seg ? tot[1] + s1 : s1;
    }
}

/* The block's tasks of stage s (its weights in buf for the first ones, the input quantized in xq / xs). */
static __device__ void p_product(const PSt &s, const PArgs &p, const uint8_t *buf, const int8_t *xq, const float *xs,
                                 const float (&rs)[PK_PRE][2]) {
    unsigned t0, t1;
    p_range(s, &t0, &t1);
    const unsigned nfit = p_fit(s, t1 - t0, p.cap);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    int k = 0;
    for (unsigned t = t0 + warp; t < t1; t += PK_WARPS, k++) {
        int wi;
        int64_t r0, r1;
        p_task(s, t, &wi, &r0, &r1);
        const uint8_t *w0 = p_w(s, wi, 0), *w1 = p_w(s, wi, 1);
        const unsigned lk = t - t0;
        float rv[2] = {0.0f, 0.0f}; /* the residual rows (only this warp writes them in this stage): read early */
        if (s.res && !lane) {
            rv[0] = __ldcg(s.res + r0);
            if (r0 + 1 < s.rows[wi]) rv[1] = __ldcg(s.res + r0 + 1);
        }
        float tot[2];
        p_dot(s, w0 + r0 * s.cols, w1 + r1 * s.cols, lk < nfit ? buf + (uint64_t)lk * 2 * s.cols : nullptr, xq, xs,
              lane, tot);
        if (lane) continue;
        float sc[2];
#pragma unroll
        for (int i = 0; i < 2; i++) {
            const int64_t rows = p_rows(s, wi, i);
            sc[i] = k < PK_PRE ? rs[k < PK_PRE ? k : 0][i] : ld_f16u(p_w(s, wi, i) + rows * s.cols + 2 * (i ? r1 : r0));
        }
        const float o0 = tot[0] * sc[0], o1 = tot[1] * sc[1];
        if (s.glu) {
            s.y[0][r0] = i8_act(o0, p.gelu) * o1;
            continue;
        }
        const int64_t rows = s.rows[wi];
        const float o[2] = {o0, o1};
#pragma unroll
        for (int i = 0; i < 2; i++) {
            const int64_t r = r0 + i;
            if (r >= rows) continue;
            if (s.y[wi]) s.y[wi][r] = o[i];
            if (s.res) s.res[r] = rv[i] + o[i];
        }
    }
}

/* The cache rows (K and V, keys < pos) that this block's attention items of layer l will read, prefetched into L2
 * (they do not change during the step; only row pos is written, by stage B itself). */
static __device__ void p_kv_prefetch(const PArgs &p, int64_t kv_off, int64_t pos, int ns, int nz) {
    const int half = threadIdx.x >> 7, tid = threadIdx.x & 127, D = p.a.head_dim;
    const int items = p.a.n_kv_heads * ns * nz;
    const split_geo geo = decode_geo(p.a.n_kv_heads, p.a.window, pos, p.mk);
    const int64_t row = (int64_t)p.a.n_kv_heads * D, lines = (D * 2 + 127) / 128;
    for (int it = blockIdx.x + half * gridDim.x; it < items; it += 2 * gridDim.x) {
        const int kvh = it % p.a.n_kv_heads, split = (it / p.a.n_kv_heads) % ns;
        const int64_t j0 = geo.kf + (int64_t)split * geo.len;
        int64_t j1 = j0 + geo.len;
        if (j1 > pos) j1 = pos; /* row pos is written in this step */
        for (int64_t e = tid; e < (j1 - j0) * lines; e += 128) {
            const int64_t off = kv_off + (j0 + e / lines) * row + (int64_t)kvh * D + (e % lines) * 64;
            prefetch_l2(p.kc + off);
            prefetch_l2(p.vc + off);
        }
    }
}

static __device__ __forceinline__ void p_stamp(const PArgs &p, int i) {
    if (p.prof && threadIdx.x == 0) {
        unsigned long long t;
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
        p.prof[(uint64_t)blockIdx.x * (1 + 10 * (uint64_t)p.n_layers) + i] = t;
    }
}

/* Grid barrier, split in two so that a block's work that does not depend on the other blocks (the next product's
 * weight prefetch, row scales, cache-row prefetch) runs between its arrival and its wait. Thread 0 of each block
 * arrives on the counter bar[0]; the last of the epoch's gridDim.x arrivals releases the epoch in bar[32], the others
 * wait for it. bar_mode 1 (default): the arrival is an acq_rel atomic (the last arriver acquires every block's
 * release), the release a st.release, the wait a relaxed poll then one fence.acq_rel; 0 (CMF_CUDA_PERSIST_BAR=0): a
 * __threadfence before a plain atomicAdd, an ld.acquire poll and a __threadfence after (cooperative groups' pattern).
 * A wait longer than 2 s traps (a launch error at the next sync) rather than hanging the device. */
static __device__ __forceinline__ void p_arrive(const PArgs &p, unsigned &epoch, bool &last) {
    __syncthreads();
    epoch++;
    if (threadIdx.x == 0) {
        unsigned old;
        if (p.bar_mode == 0) {
            __threadfence();
            old = atomicAdd(p.bar, 1u);
        } else {
            asm volatile("atom.add.acq_rel.gpu.global.u32 %0, [%1], 1;" : "=r"(old) : "l"(p.bar) : "memory");
        }
        last = old + 1 == epoch * gridDim.x;
        if (last) asm volatile("st.release.gpu.global.u32 [%0], %1;" ::"l"(p.bar + 32), "r"(epoch) : "memory");
    }
}
static __device__ __forceinline__ void p_wait(const PArgs &p, unsigned epoch, bool last) {
    if (threadIdx.x == 0 && !last) {
        const unsigned *flag = p.bar + 32;
        uint64_t t_start = 0;
        for (unsigned it = 0;; it++) {
            unsigned f;
            if (p.bar_mode == 0) asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(f) : "l"(flag) : "memory");
            else asm volatile("ld.relaxed.gpu.global.u32 %0, [%1];" : "=r"(f) : "l"(flag) : "memory");
            if ((int)(f - epoch) >= 0) break;
            if ((it & 1023) == 1023) { /* a lost block would hang the device: trap after 2 s */
                uint64_t now;
                asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
                if (!t_start) t_start = now;
                else if (now - t_start > 2000000000ull) __trap();
            }
        }
        if (p.bar_mode == 0) __threadfence();
        else asm volatile("fence.acq_rel.gpu;" ::: "memory");
    }
    __syncthreads();
}

template <int GH, int L>
static __global__ void __launch_bounds__(PK_THREADS, 1) k_persist(PArgs p) {
    extern __shared__ __align__(16) uint8_t psm[];
    __shared__ float sh[9];
    uint8_t *buf[2] = {psm, psm + p.cap};
    uint8_t *act = psm + 2 * (uint64_t)p.cap;
    int8_t *xq = (int8_t *)act;
    float *xs = (float *)(act + p.xs_off);
    AttnSm<GH, L, true> *S = (AttnSm<GH, L, true> *)act;
    const int64_t pos = *p.dpos;
    unsigned epoch = 0;
    int bi = 0;
    __shared__ __align__(8) uint64_t mbar[2]; /* TMA path: completion of each weight buffer's copies */
    unsigned ph[2] = {0, 0};
    if (p.tma) {
        if (threadIdx.x == 0) {
            mb_init(&mbar[0]), mb_init(&mbar[1]);
            mb_init_fence();
        }
        __syncthreads();
    }
    PSt cur = p_stage(p, 0, 0);
    if (p.tma) p_prefetch_tma(cur, buf[0], p.cap, &mbar[0]);
    else p_prefetch(cur, buf[0], p.cap);
    cp_commit();
    const int G = p.a.n_heads / p.a.n_kv_heads, nz = (G + AD_MAXG - 1) / AD_MAXG;
    const int ns = decode_geo(p.a.n_kv_heads, p.a.window, pos, p.mk).ns;
    p_stamp(p, 0);
    bool last = false;
    for (int l = 0; l < p.n_layers; l++) {
        const PLayer &Ly = p.layers[l];
        for (int kind = 0; kind < 4; kind++) {
            const bool more = !(l == p.n_layers - 1 && kind == 3), bar = l || kind;
            if (bar) p_arrive(p, epoch, last); /* this block's part of the previous stage is done */
            /* work that needs no other block, before the wait: the next product's weights stream into the other
             * buffer during this stage, this product's row scales, the layer's cache rows for the attention */
            PSt nxt = cur;
            if (more) {
                nxt = p_stage(p, kind == 3 ? l + 1 : l, (kind + 1) & 3);
                if (p.tma) p_prefetch_tma(nxt, buf[bi ^ 1], p.cap, &mbar[bi ^ 1]);
                else p_prefetch(nxt, buf[bi ^ 1], p.cap);
            }
            cp_commit();
            float rs[PK_PRE][2];
            p_scales(cur, rs);
            if (kind == 0 && p.kv_pf) p_kv_prefetch(p, Ly.kv_off, pos, ns, nz);
            if (kind == 1) { /* attention (stage B) between the q/k/v and o products */
                p_wait(p, epoch, last);
                p_stamp(p, 1 + 10 * l + 2);
                AttnRope fr;
                fr.k = p.k, fr.v = p.v, fr.qw = Ly.q_norm, fr.kw = Ly.k_norm, fr.inv_freq = p.inv_freq;
                fr.kc = p.kc + Ly.kv_off, fr.vc = p.vc + Ly.kv_off, fr.eps = p.rope_eps, fr.gemma = p.gemma;
                fr.rot = p.rot, fr.interleaved = p.interleaved, fr.on = 1;
                const int half = threadIdx.x >> 7, items = p.a.n_kv_heads * ns * nz;
                for (int it = blockIdx.x + half * gridDim.x; it < items; it += 2 * gridDim.x) {
                    const int kvh = it % p.a.n_kv_heads, rest = it / p.a.n_kv_heads;
                    attn_split_item<GH, L, false, true>(p.a, p.q, p.kc + Ly.kv_off, p.vc + Ly.kv_off, pos, p.nsplit,
                                                        p.work, p.done, p.att, fr, kvh, rest % ns, rest / ns, nz,
                                                        threadIdx.x & 127, 1 + half, p.mk, S[half]);
                }
                p_stamp(p, 1 + 10 * l + 3);
                p_arrive(p, epoch, last);
            }
            if (bar) p_wait(p, epoch, last);
            const int si = kind ? 2 * kind + 2 : 0; /* stamps: A 0 1, B 2 3, C 4 5, D 6 7, E 8 9 */
            p_stamp(p, 1 + 10 * l + si);
            if (p.tma) { /* this stage's copies (when it had any) */
                unsigned t0, t1;
                p_range(cur, &t0, &t1);
                if (p_fit(cur, t1 - t0, p.cap)) mb_wait(&mbar[bi], ph[bi]), ph[bi] ^= 1;
            } else {
                cp_wait1(); /* this stage's weights (the group before the one just committed) */
            }
            __syncthreads();
            p_quantize(cur, p, xq, xs, sh);
            __syncthreads();
            p_product(cur, p, buf[bi], xq, xs, rs);
            p_stamp(p, 1 + 10 * l + si + 1);
            cur = nxt;
            bi ^= 1;
        }
    }
}

template <int GH, int L> static void pick(void (**fn)(PArgs), size_t *attn_smem) {
    *fn = k_persist<GH, L>;
    *attn_smem = 2 * sizeof(AttnSm<GH, L, true>);
}

void persist_kernel(int GH, int L, void (**fn)(PArgs), size_t *attn_smem) {
#define PK(g, l) else if (GH == g && L == l) pick<g, l>(fn, attn_smem)
    if (0) {}
    PK(1, 4); PK(1, 8); PK(1, 16); PK(1, 32);
    PK(2, 4); PK(2, 8); PK(2, 16); PK(2, 32);
    PK(4, 4); PK(4, 8); PK(4, 16); PK(4, 32);
    PK(8, 4); PK(8, 8); PK(8, 16); PK(8, 32);
    else *fn = nullptr, *attn_smem = 0;
#undef PK
}

} // namespace cmf_cuda_be
