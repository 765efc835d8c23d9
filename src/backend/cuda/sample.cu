/* sample.cu — greedy and top-k / top-p sampling on the device (cuda_ops.h); only the chosen id is copied back.
 * Order used everywhere: larger logit first, lower id first on ties, NaN below every number. */
#include "backend/cuda/common.cuh"

#define SP_THREADS 1024
#define SP_MAXK 1024

struct Cand {
    float v;
    int32_t id;
};

/* a before b in (logit desc, id asc); NaN counts as -inf-and-below. */
static __device__ __forceinline__ bool before(Cand a, Cand b) {
    if (b.id < 0) return a.id >= 0;
    if (a.id < 0) return false;
    bool an = a.v != a.v, bn = b.v != b.v;
    if (an != bn) return bn;
    if (!an && a.v != b.v) return a.v > b.v;
    return a.id < b.id;
}

static __device__ Cand block_best(Cand c, Cand *sh) {
    for (int o = 16; o > 0; o >>= 1) {
        Cand d = {__shfl_xor_sync(0xffffffffu, c.v, o), __shfl_xor_sync(0xffffffffu, c.id, o)};
        if (before(d, c)) c = d;
    }
    if ((threadIdx.x & 31) == 0) sh[threadIdx.x >> 5] = c;
    __syncthreads();
    if (threadIdx.x < 32) {
        c = threadIdx.x < (blockDim.x >> 5) ? sh[threadIdx.x] : Cand{0.0f, -1};
        for (int o = 16; o > 0; o >>= 1) {
            Cand d = {__shfl_xor_sync(0xffffffffu, c.v, o), __shfl_xor_sync(0xffffffffu, c.id, o)};
            if (before(d, c)) c = d;
        }
        if (threadIdx.x == 0) sh[32] = c;
    }
    __syncthreads();
    Cand r = sh[32];
    __syncthreads();
    return r;
}

/* Pass 1 of argmax: each block's best of its slice into part[blockIdx.x]. */
static __global__ void k_argmax_part(const float *x, int64_t n, Cand *part) {
    __shared__ Cand sh[33];
    Cand c = {0.0f, -1};
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        Cand d = {x[i], (int32_t)i};
        if (before(d, c)) c = d;
    }
    c = block_best(c, sh);
    if (threadIdx.x == 0) part[blockIdx.x] = c;
}
static __global__ void k_argmax_final(const Cand *part, int np, int32_t *id) {
    __shared__ Cand sh[33];
    Cand c = {0.0f, -1};
    for (int i = threadIdx.x; i < np; i += blockDim.x)
        if (before(part[i], c)) c = part[i];
    c = block_best(c, sh);
    if (threadIdx.x == 0) *id = c.id;
}

size_t cmf_cuda_sample_work_bytes(int64_t n) {
    (void)n;
    return 256 * sizeof(Cand) + SP_MAXK * sizeof(Cand) + 16;
}

extern "C" cmf_status cmf_cuda_argmax(const float *d_logits, int64_t n, int32_t *id, void *d_work,
                                      cmf_cuda_stream stream) {
    if (n < 1 || n > 0x7fffffff || !d_logits || !id || !d_work)
        return cmf_err(CMF_E_ARG, "cuda_argmax: n = %lld or NULL buffer", (long long)n);
    cudaStream_t s = CU_STREAM(stream);
    Cand *part = (Cand *)d_work;
    int32_t *d_id = (int32_t *)(part + 256 + SP_MAXK);
    int np = (int)((n + 4095) / 4096);
    if (np > 256) np = 256;
    k_argmax_part<<<np, 256, 0, s>>>(d_logits, n, part);
    CU_LAUNCHED("argmax kernel");
    k_argmax_final<<<1, 256, 0, s>>>(part, np, d_id);
    CU_LAUNCHED("argmax final kernel");
    CU_TRY(cudaMemcpyAsync(id, d_id, sizeof *id, cudaMemcpyDeviceToHost, s), "argmax: id download");
    CU_TRY(cudaStreamSynchronize(s), "argmax: sync");
    return CMF_OK;
}

/* One block: k rounds of "best element after the previous one in the order" (exact top-k with the tie rule),
 * then thread 0 forms the softmax at temperature, the top-p prefix and the pick. */
static __global__ void __launch_bounds__(SP_THREADS) k_topk_topp(const float *x, int64_t n, int k, float top_p,
                                                                 float temp, float u, Cand *cand, int32_t *id) {
    __shared__ Cand sh[33];
    Cand prev = {0.0f, -1};
    for (int r = 0; r < k; r++) {
        Cand c = {0.0f, -1};
        for (int64_t i = threadIdx.x; i < n; i += SP_THREADS) {
            Cand d = {x[i], (int32_t)i};
            if ((prev.id < 0 || before(prev, d)) && before(d, c)) c = d;
        }
        c = block_best(c, sh);
        if (threadIdx.x == 0) cand[r] = c;
        prev = c;
    }
    if (threadIdx.x != 0) return;
    float mx = cand[0].v;
    float total = 0.0f;
    for (int r = 0; r < k; r++) total += (cand[r].v == cand[r].v) ? expf((cand[r].v - mx) / temp) : 0.0f;
    float cum = 0.0f;
    int keep = k;
    for (int r = 0; r < k; r++) {
        cum += (cand[r].v == cand[r].v) ? expf((cand[r].v - mx) / temp) / total : 0.0f;
        if (cum >= top_p) {
            keep = r + 1;
            break;
        }
    }
    float mass = 0.0f;
    for (int r = 0; r < keep; r++) mass += (cand[r].v == cand[r].v) ? expf((cand[r].v - mx) / temp) / total : 0.0f;
    float target = u * mass, c2 = 0.0f;
    int32_t pick = cand[keep - 1].id;
    for (int r = 0; r < keep; r++) {
        c2 += (cand[r].v == cand[r].v) ? expf((cand[r].v - mx) / temp) / total : 0.0f;
        if (c2 > target) {
            pick = cand[r].id;
            break;
        }
    }
    *id = pick;
}

extern "C" cmf_status cmf_cuda_sample_topk_topp(const float *d_logits, int64_t n, int top_k, float top_p,
                                                float temp, float u, int32_t *id, void *d_work,
                                                cmf_cuda_stream stream) {
    if (n < 1 || n > 0x7fffffff || !d_logits || !id || !d_work)
        return cmf_err(CMF_E_ARG, "cuda_sample: n = %lld or NULL buffer", (long long)n);
    if (top_k < 1) return cmf_err(CMF_E_ARG, "cuda_sample: top_k %d < 1", top_k);
    if (!(top_p > 0.0f && top_p <= 1.0f)) return cmf_err(CMF_E_ARG, "cuda_sample: top_p %g not in (0, 1]", (double)top_p);
    if (!(temp > 0.0f)) return cmf_err(CMF_E_ARG, "cuda_sample: temperature %g must be > 0", (double)temp);
    if (!(u >= 0.0f && u < 1.0f)) return cmf_err(CMF_E_ARG, "cuda_sample: u %g not in [0, 1)", (double)u);
    int k = top_k > SP_MAXK ? SP_MAXK : top_k;
    if (k > n) k = (int)n;
    cudaStream_t s = CU_STREAM(stream);
    Cand *cand = (Cand *)d_work + 256;
    int32_t *d_id = (int32_t *)(cand + SP_MAXK);
    k_topk_topp<<<1, SP_THREADS, 0, s>>>(d_logits, n, k, top_p, temp, u, cand, d_id);
    CU_LAUNCHED("top-k/top-p kernel");
    CU_TRY(cudaMemcpyAsync(id, d_id, sizeof *id, cudaMemcpyDeviceToHost, s), "sample: id download");
    CU_TRY(cudaStreamSynchronize(s), "sample: sync");
    return CMF_OK;
}
