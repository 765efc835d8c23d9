/* elementwise.cu — RMSNorm (Zhang & Sennrich 2019), RoPE (Su et al. 2021), SwiGLU / GeGLU (Shazeer 2020),
 * residual add, softmax and f32 -> f16 conversion on the device (cuda_ops.h). */
#include "backend/cuda/common.cuh"

/* Sum over a block of 256 threads (result valid in every thread). */
static __device__ float block_max256(float v, float *sh) {
    v = warp_max(v);
    if ((threadIdx.x & 31) == 0) sh[threadIdx.x >> 5] = v;
    __syncthreads();
    float t = threadIdx.x < 8 ? sh[threadIdx.x] : -INFINITY;
    if (threadIdx.x < 32) t = warp_max(t);
    if (threadIdx.x == 0) sh[8] = t;
    __syncthreads();
    float r = sh[8];
    __syncthreads();
    return r;
}

/* The norm weights w[0..d) into L2 before the PDL wait (immutable; read after the block's sum), when pre. */
static __device__ __forceinline__ void pre_l2(const float *w, int64_t d, int pre) {
    if (pre && w)
        for (int64_t i = (int64_t)threadIdx.x * 32; i < d; i += (int64_t)blockDim.x * 32) prefetch_l2(w + i);
}

static __global__ void k_rmsnorm(float *out, const float *x, const float *w, int64_t d, float eps, int gemma,
                                 int pre) {
    pre_l2(w, d, pre);
    pdl_enter();
    __shared__ float sh[9];
    const float *xr = x + blockIdx.x * d;
    float *o = out + blockIdx.x * d;
    float ss = 0.0f;
    for (int64_t i = threadIdx.x; i < d; i += 256) ss = fmaf(xr[i], xr[i], ss);
    ss = block_sum256(ss, sh);
    float inv = 1.0f / sqrtf(ss / (float)d + eps);
    for (int64_t i = threadIdx.x; i < d; i += 256) {
        float g = w ? (gemma ? 1.0f + w[i] : w[i]) : 1.0f;
        o[i] = xr[i] * inv * g;
    }
}

/* x += o, then out = RMSNorm(x): each thread adds the elements it later sums, so no barrier is needed between the
 * two; the sum, the scale and the products are k_rmsnorm's. out may be o: element i of both is touched by one
 * thread only, read (loop 1) before written (loop 2). */
static __global__ void k_add_rmsnorm(float *x, const float *o, float *out, const float *w, int64_t d, float eps,
                                     int gemma, int pre) {
    pre_l2(w, d, pre);
    pdl_enter();
    __shared__ float sh[9];
    float *xr = x + blockIdx.x * d;
    const float *orow = o + blockIdx.x * d;
    float *dst = out + blockIdx.x * d;
    float ss = 0.0f;
    for (int64_t i = threadIdx.x; i < d; i += 256) {
        const float v = xr[i] + orow[i];
        xr[i] = v;
        ss = fmaf(v, v, ss);
    }
    ss = block_sum256(ss, sh);
    float inv = 1.0f / sqrtf(ss / (float)d + eps);
    for (int64_t i = threadIdx.x; i < d; i += 256) {
        float g = w ? (gemma ? 1.0f + w[i] : w[i]) : 1.0f;
        dst[i] = xr[i] * inv * g;
    }
}

extern "C" cmf_status cmf_cuda_add_rmsnorm(float *d_x, const float *d_o, float *d_out, const float *d_w, int64_t n,
                                           int64_t d, float eps, int gemma_style, cmf_cuda_stream stream) {
    if (n < 1 || n > 0x7fffffff || d < 1) return cmf_err(CMF_E_ARG, "cuda_add_rmsnorm: n = %lld, d = %lld", (long long)n, (long long)d);
    cu_launch(k_add_rmsnorm, (unsigned)n, 256, 0, CU_STREAM(stream), d_x, d_o, d_out, d_w, d, eps, gemma_style, cu_pre_on());
    CU_LAUNCHED("add_rmsnorm kernel");
    return CMF_OK;
}

extern "C" cmf_status cmf_cuda_rmsnorm(float *d_out, const float *d_x, const float *d_w, int64_t n, int64_t d,
                                       float eps, int gemma_style, cmf_cuda_stream stream) {
    if (n < 1 || n > 0x7fffffff || d < 1) return cmf_err(CMF_E_ARG, "cuda_rmsnorm: n = %lld, d = %lld", (long long)n, (long long)d);
    cu_launch(k_rmsnorm, (unsigned)n, 256, 0, CU_STREAM(stream), d_out, d_x, d_w, d, eps, gemma_style, cu_pre_on());
    CU_LAUNCHED("rmsnorm kernel");
    return CMF_OK;
}

struct RopeFreq {
    float inv[256];
};

static __global__ void k_rope(float *x, const int32_t *pos, int64_t total, int n_heads, int head_dim, int rot_dim,
                              int interleaved, RopeFreq f) {
    const int half = rot_dim / 2;
    for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < total; e += (int64_t)gridDim.x * blockDim.x) {
        int i = (int)(e % half);
        int64_t th = e / half; /* token * n_heads + head */
        int64_t t = th / n_heads;
        float ang = (float)pos[t] * f.inv[i];
        float sn, cs;
        sincosf(ang, &sn, &cs);
        float *v = x + th * head_dim;
        int a = interleaved ? 2 * i : i, b = interleaved ? 2 * i + 1 : i + half;
        float x0 = v[a], x1 = v[b];
        v[a] = x0 * cs - x1 * sn;
        v[b] = x0 * sn + x1 * cs;
    }
}

extern "C" cmf_status cmf_cuda_rope(float *d_x, const int32_t *d_pos, int64_t n_tok, int n_heads, int head_dim,
                                    int rot_dim, float theta, int pairing, cmf_cuda_stream stream) {
    if (rot_dim <= 0 || rot_dim % 2 || rot_dim > head_dim || rot_dim > 512 || n_heads < 1 || n_tok < 0)
        return cmf_err(CMF_E_ARG, "cuda_rope: rot_dim %d must be even, <= head_dim %d and <= 512", rot_dim, head_dim);
    if (!(theta > 0.0f)) return cmf_err(CMF_E_ARG, "cuda_rope: rope_theta %g must be > 0", (double)theta);
    if (pairing != CMF_CUDA_ROPE_HALF && pairing != CMF_CUDA_ROPE_INTERLEAVED)
        return cmf_err(CMF_E_ARG, "cuda_rope: unknown pairing %d", pairing);
    if (n_tok == 0) return CMF_OK;
    RopeFreq f;
    for (int i = 0; i < rot_dim / 2; i++) f.inv[i] = (float)pow((double)theta, -2.0 * i / (double)rot_dim);
    int64_t total = n_tok * n_heads * (rot_dim / 2);
    k_rope<<<grid1d(total, 256), 256, 0, CU_STREAM(stream)>>>(d_x, d_pos, total, n_heads, head_dim, rot_dim,
                                                                pairing == CMF_CUDA_ROPE_INTERLEAVED, f);
    CU_LAUNCHED("rope kernel");
    return CMF_OK;
}

static __global__ void k_glu(float *out, const float *g, const float *u, int64_t n, int gelu) {
    pdl_enter();
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        float a = g[i], act;
        if (gelu) act = 0.5f * a * (1.0f + tanhf(0.7978845608028654f * (a + 0.044715f * a * a * a)));
        else act = a / (1.0f + expf(-a));
        out[i] = act * u[i];
    }
}

extern "C" cmf_status cmf_cuda_glu(float *d_out, const float *d_gate, const float *d_up, int64_t n, int gelu_tanh,
                                   cmf_cuda_stream stream) {
    if (n <= 0) return CMF_OK;
    cu_launch(k_glu, grid1d(n, 256), 256, 0, CU_STREAM(stream), d_out, d_gate, d_up, n, gelu_tanh);
    CU_LAUNCHED("glu kernel");
    return CMF_OK;
}

static __global__ void k_add(float *out, const float *a, const float *b, int64_t n) {
    pdl_enter();
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        out[i] = a[i] + b[i];
}

extern "C" cmf_status cmf_cuda_add(float *d_out, const float *d_a, const float *d_b, int64_t n,
                                   cmf_cuda_stream stream) {
    if (n <= 0) return CMF_OK;
    cu_launch(k_add, grid1d(n, 256), 256, 0, CU_STREAM(stream), d_out, d_a, d_b, n);
    CU_LAUNCHED("add kernel");
    return CMF_OK;
}

static __global__ void k_softmax(float *x, int64_t d) {
    __shared__ float sh[9];
    float *r = x + blockIdx.x * d;
    float m = -INFINITY;
    for (int64_t i = threadIdx.x; i < d; i += 256) m = fmaxf(m, r[i]);
    m = block_max256(m, sh);
    float s = 0.0f;
    for (int64_t i = threadIdx.x; i < d; i += 256) {
        float e = expf(r[i] - m);
        r[i] = e;
        s += e;
    }
    s = block_sum256(s, sh);
    float inv = 1.0f / s;
    for (int64_t i = threadIdx.x; i < d; i += 256) r[i] *= inv;
}

extern "C" cmf_status cmf_cuda_softmax(float *d_x, int64_t n, int64_t d, cmf_cuda_stream stream) {
    if (n < 1 || n > 0x7fffffff || d < 1) return cmf_err(CMF_E_ARG, "cuda_softmax: n = %lld, d = %lld", (long long)n, (long long)d);
    k_softmax<<<(unsigned)n, 256, 0, CU_STREAM(stream)>>>(d_x, d);
    CU_LAUNCHED("softmax kernel");
    return CMF_OK;
}

static __global__ void k_f16(uint16_t *out, const float *in, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        out[i] = __half_as_ushort(__float2half_rn(in[i]));
}

extern "C" cmf_status cmf_cuda_f32_to_f16(uint16_t *d_out, const float *d_in, int64_t n, cmf_cuda_stream stream) {
    if (n <= 0) return CMF_OK;
    k_f16<<<grid1d(n, 256), 256, 0, CU_STREAM(stream)>>>(d_out, d_in, n);
    CU_LAUNCHED("f32_to_f16 kernel");
    return CMF_OK;
}


/* K and V rows of n_tok tokens into the cache at each token's own position (read from the device, so that a
 * captured decode step replays at the next position). */
static __global__ void k_kv_write(void *kc, void *vc, const float *k, const float *v, const int32_t *pos, int64_t n,
                                  int64_t kvd, int f32) {
    pdl_enter();
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t t = i / kvd, dst = (int64_t)pos[t] * kvd + i % kvd;
        kv_store(kc, dst, k[i], f32);
        kv_store(vc, dst, v[i], f32);
    }
}

extern "C" cmf_status cmf_cuda_kv_write(void *d_kc, void *d_vc, const float *d_k, const float *d_v,
                                        const int32_t *d_pos, int64_t n_tok, int64_t kvd, int kv_type,
                                        cmf_cuda_stream stream) {
    if (n_tok < 0 || kvd < 1 || (kv_type != CMF_CUDA_KV_F16 && kv_type != CMF_CUDA_KV_F32))
        return cmf_err(CMF_E_ARG, "cuda_kv_write: n_tok %lld, kvd %lld, kv_type %d", (long long)n_tok, (long long)kvd,
                       kv_type);
    if (n_tok == 0) return CMF_OK;
    cu_launch(k_kv_write, grid1d(n_tok * kvd, 256), 256, 0, CU_STREAM(stream), d_kc, d_vc, d_k, d_v, d_pos, n_tok * kvd,
              kvd, kv_type == CMF_CUDA_KV_F32);
    CU_LAUNCHED("kv_write kernel");
    return CMF_OK;
}

/* One warp per (token, head): q heads first, then k heads. The head's values are in registers (lane + 32 i);
 * RMSNorm as k_rmsnorm (x * inv * g, f32 sum of squares), written back, then the RoPE pairs of the first rot_dim
 * dims rotated by pos * inv_freq[i] (one pair per lane per step; __syncwarp orders the lanes' global writes). */
static __global__ void __launch_bounds__(128) k_qk_norm_rope(float *q, float *k, int64_t n_tok, int nh, int nkv,
                                                             int hd, const float *qw, const float *kw, float eps,
                                                             int gemma, int rot, const float *inv_freq,
                                                             const int32_t *pos, int interleaved, const float *vsrc,
                                                             void *kc, void *vc, int kv_f32, int pre) {
    const int64_t wid = (int64_t)blockIdx.x * 4 + (threadIdx.x >> 5);
    const int lane = threadIdx.x & 31;
    const int64_t nq = n_tok * nh;
    const bool isq = wid < nq;
    const float *w = isq ? qw : kw;
    if (pre && wid < nq + n_tok * nkv) { /* norm weights and RoPE frequencies (immutable) into L2 before the wait */
        if (w && lane * 32 < hd) prefetch_l2(w + lane * 32);
        if (inv_freq && lane * 32 < rot / 2) prefetch_l2(inv_freq + lane * 32);
    }
    pdl_enter();
    if (wid >= nq + n_tok * nkv) return;
    const int64_t th = isq ? wid : wid - nq; /* token * heads + head */
    const int64_t t = isq ? th / nh : th / nkv;
    float *v = (isq ? q : k) + th * hd;
    warp_head_norm_rope(v, v, hd, w, eps, gemma, rot, inv_freq, rot > 0 ? (float)pos[t] : 0.0f, interleaved, lane);
    if (!isq && kc) { /* the rotated K row and the V row of this kv head into the cache at pos[t] */
        const int64_t kvd = (int64_t)nkv * hd, dst = (int64_t)pos[t] * kvd + (th - t * nkv) * hd;
        const float *vr = vsrc + th * hd;
        for (int c = lane; c < hd; c += 32) {
            kv_store(kc, dst + c, v[c], kv_f32);
            kv_store(vc, dst + c, vr[c], kv_f32);
        }
    }
}

extern "C" cmf_status cmf_cuda_qk_norm_rope_kv(float *d_q, float *d_k, const float *d_v, int64_t n_tok, int n_heads,
                                               int n_kv_heads, int head_dim, const float *d_qw, const float *d_kw,
                                               float eps, int gemma_style, int rot_dim, const float *d_inv_freq,
                                               const int32_t *d_pos, int pairing, void *d_kc, void *d_vc, int kv_type,
                                               cmf_cuda_stream stream) {
    if (n_tok < 1 || n_heads < 1 || n_kv_heads < 1 || head_dim < 1 || head_dim > 256 || rot_dim < 0 ||
        rot_dim % 2 || rot_dim > head_dim || (rot_dim && (!d_inv_freq || !d_pos)))
        return cmf_err(CMF_E_ARG, "cuda_qk_norm_rope: n_tok %lld, heads %d/%d, head_dim %d, rot_dim %d", (long long)n_tok,
                       n_heads, n_kv_heads, head_dim, rot_dim);
    if (!d_qw != !d_kw) return cmf_err(CMF_E_ARG, "cuda_qk_norm_rope: q and k norm weights must both be given or not");
    if (d_kc && (!d_vc || !d_v || !d_pos)) return cmf_err(CMF_E_ARG, "cuda_qk_norm_rope_kv: cache without V / positions");
    if (kv_type != CMF_CUDA_KV_F16 && kv_type != CMF_CUDA_KV_F32)
        return cmf_err(CMF_E_ARG, "cuda_qk_norm_rope_kv: kv_type %d", kv_type);
    const int64_t warps = n_tok * (n_heads + n_kv_heads);
    cu_launch(k_qk_norm_rope, (unsigned)((warps + 3) / 4), 128, 0, CU_STREAM(stream),
        d_q, d_k, n_tok, n_heads, n_kv_heads, head_dim, d_qw, d_kw, eps, gemma_style, rot_dim, d_inv_freq, d_pos,
        pairing == CMF_CUDA_ROPE_INTERLEAVED, d_v, d_kc, d_vc, kv_type == CMF_CUDA_KV_F32, cu_pre_on());
    CU_LAUNCHED("qk_norm_rope kernel");
    return CMF_OK;
}

extern "C" cmf_status cmf_cuda_qk_norm_rope(float *d_q, float *d_k, int64_t n_tok, int n_heads, int n_kv_heads,
                                            int head_dim, const float *d_qw, const float *d_kw, float eps,
                                            int gemma_style, int rot_dim, const float *d_inv_freq,
                                            const int32_t *d_pos, int pairing, cmf_cuda_stream stream) {
    if (n_tok < 1 || n_heads < 1 || n_kv_heads < 1 || head_dim < 1 || head_dim > 256 || rot_dim < 0 ||
        rot_dim % 2 || rot_dim > head_dim || (rot_dim && (!d_inv_freq || !d_pos)))
        return cmf_err(CMF_E_ARG, "cuda_qk_norm_rope: n_tok %lld, heads %d/%d, head_dim %d, rot_dim %d", (long long)n_tok,
                       n_heads, n_kv_heads, head_dim, rot_dim);
    if (!d_qw != !d_kw) return cmf_err(CMF_E_ARG, "cuda_qk_norm_rope: q and k norm weights must both be given or not");
    const int64_t warps = n_tok * (n_heads + n_kv_heads);
    cu_launch(k_qk_norm_rope, (unsigned)((warps + 3) / 4), 128, 0, CU_STREAM(stream),
        d_q, d_k, n_tok, n_heads, n_kv_heads, head_dim, d_qw, d_kw, eps, gemma_style, rot_dim, d_inv_freq, d_pos,
        pairing == CMF_CUDA_ROPE_INTERLEAVED, nullptr, nullptr, nullptr, 0, cu_pre_on());
    CU_LAUNCHED("qk_norm_rope kernel");
    return CMF_OK;
}
