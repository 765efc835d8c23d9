/* chain_bench.cu — the floor under a decode step made of dependent kernels: how long one kernel of a chain of
 * kernels takes when each depends on the previous one, replayed from a CUDA graph, with and without Programmatic
 * Dependent Launch (PDL; CUDA programming guide, "Programmatic Dependent Launch and Synchronization").
 *
 * A Qwen3-0.6B decode step is ~145 such kernels (5 per layer, 28 layers, plus embedding, norm, head, argmax); at
 * 2,000 tok/s the whole step has 500 us. This program measures what a kernel costs before it does any real work:
 *   empty   every block only passes griddepcontrol.wait (the PDL wait; a no-op without PDL) and exits;
 *   chain   every block reads the previous kernel's d-float vector (L2-resident), reduces it, and writes its
 *           slice of the next vector: one dependent read, one block reduction, one write, as a product's
 *           activation prologue and epilogue;
 *   weights chain plus a stream of B bytes of weights split over the blocks (16-byte loads; the first 4 loads of
 *           each thread issued before the PDL wait, as the int8 products do), each kernel its own slab so the
 *           stream comes from DRAM: a product of that many bytes without its arithmetic.
 *   code    (PDL on) every block reads one value of the previous vector, then runs L straight-line FMAs (8
 *           independent chains, each FMA one instruction with its own constant) and writes a sum: a kernel whose
 *           critical path is instruction fetch and issue. The chain cycles through V distinct kernels of L
 *           instructions each (V = 1: the same code every time; V = 6: 6 x L x 16 bytes of code in turn, like a
 *           decode layer's kernels), so the V > 1 / V = 1 difference at one L is what refetching code costs, and
 *           the V x L x 16 bytes where it starts is the instruction cache's capacity.
 * Grid: one block of 256 threads per multiprocessor (132 on an H100 / H200). Each chain of N kernels is captured
 * into one graph (as the backend does), replayed 20 times after a warm-up; the time per kernel is the replay's time
 * over N (median of 5 repetitions).
 *
 *   cmake --build build --target chain_bench && build/tests/cuda/chain_bench [N=145] [d=1024] [bytes=2097152]
 * Output: one line per mode x PDL setting, "RESULT mode=... pdl=0|1 n=N us_per_kernel=..."; code: one per (L, V) pair
 * (PDL on), "RESULT mode=code L=... V=... pdl=1 n=N us_per_kernel=...". */
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include <cuda_runtime.h>

#include "backend/cuda/common.cuh"

#define CK(x)                                                                                                    \
    do {                                                                                                         \
        cudaError_t e_ = (x);                                                                                    \
        if (e_ != cudaSuccess) {                                                                                 \
            fprintf(stderr, "chain_bench: %s: %s\n", #x, cudaGetErrorString(e_));                                \
            exit(1);                                                                                             \
        }                                                                                                        \
    } while (0)

enum { THREADS = 256, PRE = 4 };

static __global__ void __launch_bounds__(THREADS) k_empty(int unused) {
    (void)unused;
    pdl_enter();
}

/* sum of the block's values v (all threads get it) */
static __device__ float block_sum(float v) {
    __shared__ float part[THREADS / 32];
    __shared__ float total;
    v = warp_sum(v);
    if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = v;
    __syncthreads();
    if (threadIdx.x < 32) {
        float s = threadIdx.x < THREADS / 32 ? part[threadIdx.x] : 0.0f;
        s = warp_sum(s);
        if (threadIdx.x == 0) total = s;
    }
    __syncthreads();
    return total;
}

/* out[i] = in[i] * 0.5 + sum(in) * 1e-6 for the block's slice; the weights (w, per_block 16-byte chunks per block,
 * may be 0) are summed into the same value so that their loads cannot be dropped. */
static __global__ void __launch_bounds__(THREADS) k_chain(const float *__restrict__ in, float *__restrict__ out, int d,
                                                           const uint4 *__restrict__ w, int per_block) {
    const uint4 *wb = w + (size_t)blockIdx.x * per_block;
    uint4 first[PRE];
    unsigned acc = 0;
#pragma unroll
    for (int k = 0; k < PRE; k++) { /* weights are immutable: loaded before the PDL wait, as the products do */
        const int i = threadIdx.x + k * THREADS;
        first[k] = i < per_block ? wb[i] : make_uint4(0, 0, 0, 0);
    }
    pdl_enter();
    float s = 0.0f;
    for (int i = threadIdx.x; i < d; i += THREADS) s += in[i];
    for (int i = threadIdx.x + PRE * THREADS; i < per_block; i += THREADS) {
        const uint4 v = wb[i];
        acc += v.x ^ v.y ^ v.z ^ v.w;
    }
#pragma unroll
    for (int k = 0; k < PRE; k++) acc += first[k].x ^ first[k].y ^ first[k].z ^ first[k].w;
    const float tot = block_sum(s + (float)(acc & 1) * 1e-30f);
    const int per = (d + gridDim.x - 1) / gridDim.x;
    for (int i = blockIdx.x * per + threadIdx.x; i < d && i < (int)(blockIdx.x + 1) * per; i += THREADS)
        out[i] = in[i] * 0.5f + tot * 1e-6f;
}

/* L FMAs in 8 chains after the PDL wait; V only makes the constants (so the code) of each instance distinct */
template <int V, int L>
static __global__ void __launch_bounds__(THREADS) k_code(const float *__restrict__ in, float *__restrict__ out, int d) {
    pdl_enter();
    const float x = in[threadIdx.x % d] + 1.0f;
    float a[8];
#pragma unroll
    for (int c = 0; c < 8; c++) a[c] = x * (float)(c + 1);
#pragma unroll
    for (int i = 0; i < L; i++) a[i & 7] = fmaf(a[i & 7], x, 1.0f + (float)(i * 7 + V * 131 + 1) * 1.0e-7f);
    const float s = ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
    if (blockIdx.x * THREADS + threadIdx.x < (unsigned)d) out[blockIdx.x * THREADS + threadIdx.x] = s * 1e-30f;
}

template <int L> static void launch_code(int v, cudaLaunchConfig_t *cfg, const float *in, float *out, int d) {
    switch (v) {
    case 0: CK(cudaLaunchKernelEx(cfg, k_code<0, L>, in, out, d)); break;
    case 1: CK(cudaLaunchKernelEx(cfg, k_code<1, L>, in, out, d)); break;
    case 2: CK(cudaLaunchKernelEx(cfg, k_code<2, L>, in, out, d)); break;
    case 3: CK(cudaLaunchKernelEx(cfg, k_code<3, L>, in, out, d)); break;
    case 4: CK(cudaLaunchKernelEx(cfg, k_code<4, L>, in, out, d)); break;
    default: CK(cudaLaunchKernelEx(cfg, k_code<5, L>, in, out, d)); break;
    }
}

/* the code modes' (L, V) pairs */
static const int CODE_L[] = {256, 256, 1024, 1024, 2048, 2048, 2048, 4096, 4096, 4096, 4096};
static const int CODE_V[] = {1, 6, 1, 6, 1, 3, 6, 1, 2, 3, 6};
enum { CODE_MODES = sizeof CODE_L / sizeof CODE_L[0] };

static void launch(int mode, bool pdl, int blocks, cudaStream_t s, const float *in, float *out, int d, const uint4 *w,
                   int per_block) {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3((unsigned)blocks);
    cfg.blockDim = dim3(THREADS);
    cfg.stream = s;
    cudaLaunchAttribute at[1];
    at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    at[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = at;
    cfg.numAttrs = pdl ? 1 : 0;
    if (mode >= 3) { /* code: CODE_L[mode - 3], the kernel variant in per_block */
        const int l = CODE_L[mode - 3];
        if (l == 256) launch_code<256>(per_block, &cfg, in, out, d);
        else if (l == 1024) launch_code<1024>(per_block, &cfg, in, out, d);
        else if (l == 2048) launch_code<2048>(per_block, &cfg, in, out, d);
        else launch_code<4096>(per_block, &cfg, in, out, d);
    } else if (mode == 0) CK(cudaLaunchKernelEx(&cfg, k_empty, 0));
    else CK(cudaLaunchKernelEx(&cfg, k_chain, in, out, d, mode == 2 ? w : (const uint4 *)nullptr,
                               mode == 2 ? per_block : 0));
}

int main(int argc, char **argv) {
    const int n = argc > 1 ? atoi(argv[1]) : 145, d = argc > 2 ? atoi(argv[2]) : 1024;
    const long long bytes = argc > 3 ? atoll(argv[3]) : 2097152;
    int dev_count = 0;
    if (cudaGetDeviceCount(&dev_count) != cudaSuccess || dev_count < 1) {
        fprintf(stderr, "chain_bench: no CUDA device\n");
        return 1;
    }
    if (n < 1 || n > 100000 || d < 1 || d > (1 << 24) || bytes < 0 || bytes > (1LL << 30)) {
        fprintf(stderr, "usage: chain_bench [N 1..100000] [d 1..2^24] [bytes 0..2^30]\n");
        return 2;
    }
    cudaDeviceProp p;
    CK(cudaGetDeviceProperties(&p, 0));
    const int blocks = p.multiProcessorCount;
    const int per_block = (int)(bytes / 16 / blocks);
    printf("device: %s, %d SMs; chain of %d kernels, d = %d, weights %lld bytes per kernel (%d B per block)\n", p.name,
           blocks, n, d, bytes, per_block * 16);
    float *vec;
    uint4 *w;
    CK(cudaMalloc(&vec, sizeof(float) * (size_t)d * 2));
    CK(cudaMemset(vec, 0, sizeof(float) * (size_t)d * 2));
    const size_t wbytes = (size_t)per_block * 16 * blocks * (size_t)n; /* each kernel its own slab: from DRAM */
    CK(cudaMalloc(&w, wbytes ? wbytes : 16));
    CK(cudaMemset(w, 1, wbytes ? wbytes : 16));
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    const char *names[3] = {"empty", "chain", "weights"};
    for (int mode = 0; mode < 3 + CODE_MODES; mode++)
        for (int pdl = mode >= 3 ? 1 : 0; pdl < 2; pdl++) {
            const int nv = mode >= 3 ? CODE_V[mode - 3] : 0; /* code: distinct kernels in turn */
            cudaGraph_t g;
            cudaGraphExec_t ge;
            CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
            for (int i = 0; i < n; i++)
                launch(mode, pdl != 0, blocks, s, vec + (i & 1) * d, vec + ((i + 1) & 1) * d, d,
                       w + (size_t)i * per_block * blocks, mode >= 3 ? i % nv : per_block);
            CK(cudaStreamEndCapture(s, &g));
            CK(cudaGraphInstantiate(&ge, g, 0));
            cudaEvent_t e0, e1;
            CK(cudaEventCreate(&e0));
            CK(cudaEventCreate(&e1));
            std::vector<float> t;
            for (int rep = 0; rep < 6; rep++) {
                CK(cudaEventRecord(e0, s));
                for (int r = 0; r < 20; r++) CK(cudaGraphLaunch(ge, s));
                CK(cudaEventRecord(e1, s));
                CK(cudaEventSynchronize(e1));
                float ms = 0;
                CK(cudaEventElapsedTime(&ms, e0, e1));
                if (rep) t.push_back(ms * 1000.0f / 20.0f / (float)n); /* rep 0: warm-up */
            }
            std::sort(t.begin(), t.end());
            if (mode >= 3)
                printf("RESULT mode=code L=%d V=%d pdl=1 n=%d us_per_kernel=%.3f step_us=%.1f\n", CODE_L[mode - 3],
                       nv, n, t[t.size() / 2], t[t.size() / 2] * n);
            else
            printf("RESULT mode=%s pdl=%d n=%d d=%d bytes=%lld us_per_kernel=%.3f step_us=%.1f\n", names[mode], pdl, n,
                   d, mode == 2 ? (long long)per_block * 16 * blocks : 0LL, t[t.size() / 2], t[t.size() / 2] * n);
            CK(cudaEventDestroy(e0));
            CK(cudaEventDestroy(e1));
            CK(cudaGraphExecDestroy(ge));
            CK(cudaGraphDestroy(g));
        }
    CK(cudaStreamDestroy(s));
    CK(cudaFree(w));
    CK(cudaFree(vec));
    return 0;
}
