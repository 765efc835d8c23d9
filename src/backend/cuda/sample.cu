/* sample.cu — greedy and top-k selection on the device (cuda_ops.h), so that only an id or k candidates cross the
 * bus, plus the device-side draw of cmf_cuda_sample_topk_topp.
 *
 * Every element becomes one 64-bit key: the high word orders the value (okey: the IEEE bits made monotone as
 * unsigned, -0.0 taken as +0.0, NaN -> 0, below every number), the low word is 0xffffffff - id, so that among equal
 * values the lower id has the larger key. The host's order "value desc, id asc, NaN never first" (src/sample/
 * sample.c: cmf_argmax, before()) is then simply "key desc", and a key decodes back to (value, id) on the host
 * (cmf_cuda_key_value / cmf_cuda_key_id in cuda_ops.h).
 *
 * argmax: one launch. Each block takes AM_PER_BLOCK consecutive logits and writes its largest key; the last block
 * to finish (a counter in the scratch, the threadFenceReduction pattern of the CUDA samples) reduces the block
 * results and resets the counter.
 * top-k: one launch. Each block sorts TK_TILE consecutive keys in shared memory (bitonic sort, Batcher 1968) and
 * writes its first k (padded with key 0, below every element); the last block merges the gridDim.x lists: it sorts
 * a tile of them, keeps the first k, refills the rest of the tile with the next keys, sorts again, ... (k < TK_TILE),
 * so the vocabulary is read once, whatever k. */
#include "backend/cuda/common.cuh"

typedef unsigned long long u64;

#define AM_THREADS 256
#define AM_PER_BLOCK 2048
#define TK_THREADS 1024
#define TK_TILE 4096 /* keys sorted at once: 32 KiB of shared memory */
#define TK_MAXK 1024 /* = CMF_DEV_SAMPLE_MAXK (backend.h); < TK_TILE */

/* Scratch layout (cmf_cuda_sample_work_bytes): counters and single results, the k output keys, the block lists. */
#define W_CNT_AM 0    /* u32: argmax blocks done */
#define W_CNT_TK 4    /* u32: top-k blocks done */
#define W_KEY_AM 8    /* u64: argmax result */
#define W_PICK 16     /* i32: cmf_cuda_sample_topk_topp's pick */
#define W_OUT 256     /* u64[TK_MAXK]: top-k result */
#define W_PART (W_OUT + TK_MAXK * 8)

static int64_t tk_blocks(int64_t n) { return (n + TK_TILE - 1) / TK_TILE; }
static int64_t am_blocks(int64_t n) { return (n + AM_PER_BLOCK - 1) / AM_PER_BLOCK; }

/* Monotone unsigned image of a float: NaN -> 0; -0.0 -> the image of +0.0; -inf -> 0x007fffff > 0. */
static __device__ __forceinline__ unsigned okey(float v) {
    if (v != v) return 0u;
    if (v == 0.0f) v = 0.0f;
    const unsigned u = __float_as_uint(v);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}
/* The candidate key of sample.c step 3: z = l / temperature rounded as the host's division (__fdiv_rn: IEEE, never
 * contracted); NaN and -inf are not candidates (0); +inf -> 3e38 as the host clamps it. */
static __device__ __forceinline__ unsigned zkey(float l, float temp) {
    float z = __fdiv_rn(l, temp);
    if (z != z || z == __int_as_float(0xff800000)) return 0u;
    if (z == __int_as_float(0x7f800000)) z = 3.0e38f;
    return okey(z);
}
static __device__ __forceinline__ u64 mkkey(unsigned ok, int64_t i) {
    return ((u64)ok << 32) | (u64)(0xffffffffu - (unsigned)i);
}

/* The largest key of the block (every thread gets it); sh: 32 entries. */
static __device__ u64 block_max(u64 v, u64 *sh) {
    for (int o = 16; o > 0; o >>= 1) {
        const u64 w = __shfl_xor_sync(0xffffffffu, v, o);
        v = w > v ? w : v;
    }
    if ((threadIdx.x & 31) == 0) sh[threadIdx.x >> 5] = v;
    __syncthreads();
    if (threadIdx.x < 32) {
        v = threadIdx.x < (blockDim.x >> 5) ? sh[threadIdx.x] : 0ull;
        for (int o = 16; o > 0; o >>= 1) {
            const u64 w = __shfl_xor_sync(0xffffffffu, v, o);
            v = w > v ? w : v;
        }
        if (threadIdx.x == 0) sh[0] = v;
    }
    __syncthreads();
    v = sh[0];
    __syncthreads();
    return v;
}

static __global__ void __launch_bounds__(AM_THREADS) k_argmax(const float *x, int64_t n, u64 *part, unsigned *cnt,
                                                                 u64 *out) {
    __shared__ u64 sh[32];
    __shared__ bool last;
    const int64_t lo = (int64_t)blockIdx.x * AM_PER_BLOCK, hi = lo + AM_PER_BLOCK < n ? lo + AM_PER_BLOCK : n;
    u64 best = 0; /* below every element (the lowest real key is NaN at id 0xfffffffe) */
#pragma unroll 8
    for (int64_t i = lo + threadIdx.x; i < hi; i += AM_THREADS) {
        const u64 k = mkkey(okey(x[i]), i);
        best = k > best ? k : best;
    }
    best = block_max(best, sh);
    if (threadIdx.x == 0) {
        part[blockIdx.x] = best;
        __threadfence(); /* the block result is visible before the counter says so */
        last = atomicAdd(cnt, 1u) == gridDim.x - 1;
    }
    __syncthreads();
    if (!last) return;
    __threadfence();
    u64 b = 0;
    for (unsigned i = threadIdx.x; i < gridDim.x; i += AM_THREADS) {
        const u64 k = __ldcg(&part[i]); /* L2, not a stale L1 line */
        b = k > b ? k : b;
    }
    b = block_max(b, sh);
    if (threadIdx.x == 0) {
        *out = b;
        *cnt = 0; /* ready for the next launch */
    }
}

/* Sorts sh[0..TK_TILE) into descending order (bitonic network), all threads of the block. */
static __device__ void bitonic_desc(u64 *sh) {
    for (int size = 2; size <= TK_TILE; size <<= 1)
        for (int stride = size >> 1; stride > 0; stride >>= 1) {
            __syncthreads();
            for (int t = threadIdx.x; t < TK_TILE / 2; t += TK_THREADS) {
                const int i = 2 * t - (t & (stride - 1)), j = i + stride;
                const u64 a = sh[i], b = sh[j];
                const bool desc = (i & size) == 0; /* the last merge (size == TK_TILE) is descending */
                if (desc ? a < b : a > b) {
                    sh[i] = b;
                    sh[j] = a;
                }
            }
        }
    __syncthreads();
}

/* temp > 0: candidate keys (zkey); temp == 0: the raw logits' order (okey). k in 1..TK_MAXK. */
static __global__ void __launch_bounds__(TK_THREADS) k_topk(const float *x, int64_t n, int k, float temp, u64 *part,
                                                               unsigned *cnt, u64 *out) {
    __shared__ u64 sh[TK_TILE];
    __shared__ bool last;
    const int64_t lo = (int64_t)blockIdx.x * TK_TILE;
    const int len = n - lo < TK_TILE ? (int)(n - lo) : TK_TILE;
    for (int i = threadIdx.x; i < TK_TILE; i += TK_THREADS) {
        u64 key = 0;
        if (i < len) {
            const float l = x[lo + i];
            key = mkkey(temp > 0.0f ? zkey(l, temp) : okey(l), lo + i);
        }
        sh[i] = key;
    }
    bitonic_desc(sh);
    for (int i = threadIdx.x; i < k; i += TK_THREADS) part[(int64_t)blockIdx.x * k + i] = i < len ? sh[i] : 0ull;
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) last = atomicAdd(cnt, 1u) == gridDim.x - 1;
    __syncthreads();
    if (!last) return;
    __threadfence();
    /* merge: the tile keeps the best k so far in sh[0..k) and takes the next TK_TILE - k keys behind them */
    const int64_t total = (int64_t)gridDim.x * k;
    int64_t next = 0;
    int have = 0;
    for (;;) {
        for (int i = have + threadIdx.x; i < TK_TILE; i += TK_THREADS) {
            const int64_t j = next + (i - have);
            sh[i] = j < total ? __ldcg(&part[j]) : 0ull;
        }
        next += TK_TILE - have;
        bitonic_desc(sh); /* starts with a barrier: the refill is visible */
        if (next >= total) break;
        have = k;
    }
    for (int i = threadIdx.x; i < k; i += TK_THREADS) out[i] = sh[i];
    if (threadIdx.x == 0) *cnt = 0;
}

/* Step 1 of sample.c for m <= PEN_MAX distinct tokens, in place: cmf_sample_penalize's operations, each rounded
 * on its own (_rn intrinsics are never contracted into an fma), so the bits equal the host's. */
#define PEN_MAX 64
struct PenArgs {
    int n;
    float rep, pres, freq;
    int32_t id[PEN_MAX], cnt[PEN_MAX];
};
static __global__ void k_penalize(float *row, PenArgs a) {
    const int i = threadIdx.x;
    if (i >= a.n) return;
    float x = row[a.id[i]];
    if (a.rep != 1.0f) x = x > 0.0f ? __fdiv_rn(x, a.rep) : __fmul_rn(x, a.rep);
    const float f = __fmul_rn((float)a.cnt[i], a.freq);
    const float d = __fadd_rn(a.pres, f);
    row[a.id[i]] = __fsub_rn(x, d);
}

size_t cmf_cuda_sample_work_bytes(int64_t n) {
    const int64_t nb = tk_blocks(n) > am_blocks(n) ? tk_blocks(n) : am_blocks(n);
    return (size_t)W_PART + (size_t)nb * TK_MAXK * sizeof(u64);
}

extern "C" cmf_status cmf_cuda_penalize(float *d_row, int64_t n, const int32_t *ids, const int32_t *counts, int m,
                                        float repeat, float presence, float frequency, cmf_cuda_stream stream) {
    if (!d_row || m < 0 || (m > 0 && (!ids || !counts)))
        return cmf_err(CMF_E_ARG, "cuda_penalize: NULL argument or m = %d", m);
    cudaStream_t s = CU_STREAM(stream);
    for (int done = 0; done < m; done += PEN_MAX) {
        PenArgs a;
        a.n = m - done < PEN_MAX ? m - done : PEN_MAX;
        a.rep = repeat, a.pres = presence, a.freq = frequency;
        for (int i = 0; i < a.n; i++) {
            if (ids[done + i] < 0 || ids[done + i] >= n)
                return cmf_err(CMF_E_ARG, "cuda_penalize: token %d outside [0, %lld)", ids[done + i], (long long)n);
            a.id[i] = ids[done + i];
            a.cnt[i] = counts[done + i];
        }
        k_penalize<<<1, PEN_MAX, 0, s>>>(d_row, a);
        CU_LAUNCHED("penalty kernel");
    }
    return CMF_OK;
}

extern "C" cmf_status cmf_cuda_argmax_key(const float *d_logits, int64_t n, void *d_work, cmf_cuda_stream stream,
                                          uint64_t **d_key) {
    if (n < 1 || n > 0x7fffffff || !d_logits || !d_work)
        return cmf_err(CMF_E_ARG, "cuda_argmax: n = %lld or NULL buffer", (long long)n);
    char *w = (char *)d_work;
    k_argmax<<<(unsigned)am_blocks(n), AM_THREADS, 0, CU_STREAM(stream)>>>(
        d_logits, n, (u64 *)(w + W_PART), (unsigned *)(w + W_CNT_AM), (u64 *)(w + W_KEY_AM));
    CU_LAUNCHED("argmax kernel");
    if (d_key) *d_key = (uint64_t *)(w + W_KEY_AM);
    return CMF_OK;
}

extern "C" cmf_status cmf_cuda_topk_keys(const float *d_logits, int64_t n, int k, float temp, void *d_work,
                                         cmf_cuda_stream stream, uint64_t **d_keys) {
    if (n < 1 || n > 0x7fffffff || !d_logits || !d_work)
        return cmf_err(CMF_E_ARG, "cuda_topk: n = %lld or NULL buffer", (long long)n);
    if (k < 1 || k > TK_MAXK) return cmf_err(CMF_E_ARG, "cuda_topk: k = %d outside 1..%d", k, TK_MAXK);
    if (!(temp >= 0.0f)) return cmf_err(CMF_E_ARG, "cuda_topk: temperature %g is negative or NaN", (double)temp);
    char *w = (char *)d_work;
    k_topk<<<(unsigned)tk_blocks(n), TK_THREADS, 0, CU_STREAM(stream)>>>(
        d_logits, n, k, temp, (u64 *)(w + W_PART), (unsigned *)(w + W_CNT_TK), (u64 *)(w + W_OUT));
    CU_LAUNCHED("top-k kernel");
    if (d_keys) *d_keys = (uint64_t *)(w + W_OUT);
    return CMF_OK;
}

extern "C" cmf_status cmf_cuda_argmax(const float *d_logits, int64_t n, int32_t *id, void *d_work,
                                      cmf_cuda_stream stream) {
    if (!id) return cmf_err(CMF_E_ARG, "cuda_argmax: NULL id");
    uint64_t *d_key = NULL, key = 0;
    cmf_status st = cmf_cuda_argmax_key(d_logits, n, d_work, stream, &d_key);
    if (st != CMF_OK) return st;
    cudaStream_t s = CU_STREAM(stream);
    CU_TRY(cudaMemcpyAsync(&key, d_key, sizeof key, cudaMemcpyDeviceToHost, s), "argmax: key download");
    CU_TRY(cudaStreamSynchronize(s), "argmax: sync");
    *id = cmf_cuda_key_id(key);
    return CMF_OK;
}

/* One thread: softmax at temperature over the k keys (raw logits, NaN -> weight 0), the top-p prefix, the pick. */
static __global__ void k_pick(const u64 *keys, int k, float top_p, float temp, float u, int32_t *id) {
    if (threadIdx.x != 0 || blockIdx.x != 0) return;
    auto val = [&](int r) -> float {
        const unsigned hi = (unsigned)(keys[r] >> 32);
        const unsigned b = (hi & 0x80000000u) ? (hi & 0x7fffffffu) : ~hi;
        return __uint_as_float(b);
    };
    auto ok = [&](int r) -> bool { return (keys[r] >> 32) != 0; };
    const float mx = val(0);
    float total = 0.0f;
    for (int r = 0; r < k; r++) total += ok(r) ? expf((val(r) - mx) / temp) : 0.0f;
    float cum = 0.0f;
    int keep = k;
    for (int r = 0; r < k; r++) {
        cum += ok(r) ? expf((val(r) - mx) / temp) / total : 0.0f;
        if (cum >= top_p) {
            keep = r + 1;
            break;
        }
    }
    float mass = 0.0f;
    for (int r = 0; r < keep; r++) mass += ok(r) ? expf((val(r) - mx) / temp) / total : 0.0f;
    float target = u * mass, c2 = 0.0f;
    int32_t pick = (int32_t)(0xffffffffu - (unsigned)keys[keep - 1]);
    for (int r = 0; r < keep; r++) {
        c2 += ok(r) ? expf((val(r) - mx) / temp) / total : 0.0f;
        if (c2 > target) {
            pick = (int32_t)(0xffffffffu - (unsigned)keys[r]);
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
    int k = top_k > TK_MAXK ? TK_MAXK : top_k;
    if (k > n) k = (int)n;
    uint64_t *d_keys = NULL;
    cmf_status st = cmf_cuda_topk_keys(d_logits, n, k, 0.0f, d_work, stream, &d_keys);
    if (st != CMF_OK) return st;
    cudaStream_t s = CU_STREAM(stream);
    int32_t *d_id = (int32_t *)((char *)d_work + W_PICK);
    k_pick<<<1, 32, 0, s>>>((const u64 *)d_keys, k, top_p, temp, u, d_id);
    CU_LAUNCHED("top-p pick kernel");
    CU_TRY(cudaMemcpyAsync(id, d_id, sizeof *id, cudaMemcpyDeviceToHost, s), "sample: id download");
    CU_TRY(cudaStreamSynchronize(s), "sample: sync");
    return CMF_OK;
}
