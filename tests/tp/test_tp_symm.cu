/* test_tp_symm.cu — the all-reduce of the cuda tp ranks (tp_nccl.cu cmf_tp_nccl_allreduce_stream) right after a
 * kernel that writes its input late, as the decode kernels of the cuda backend do: launched with programmatic
 * dependent launch (PDL), it waits for its predecessor, lets its dependents launch at once
 * (griddepcontrol.launch_dependents), and only then computes and writes. The sum must still be that of the written
 * values, on plain cudaMalloc buffers and in a symmetric NCCL window (NCCL's symmetric kernels, which NCCL launches
 * with PDL; NCCL 2.28 - 2.30.4 do not wait for the kernel before them, which tp_nccl.cu's guard covers), eagerly
 * and inside CUDA graphs replayed several times, for the hf-tiny step / prefill sizes (64, 448 floats) where
 * test_tp_cuda failed with windows in session 4 and a 32B-shaped step (5120).
 * Per rank (one thread per GPU with its communicator, as src/tp runs them), per iteration `it`: the producer writes
 * v(r, it, i) = 1000 (r + 1) + 7 (it % 97) + i % 13, the all-reduce sums in place, a checker kernel (PDL, waits
 * first) counts the elements that differ from the sum over ranks (exact in f32), and the next iteration's producer
 * overwrites the buffer (so a peer still reading it after its collective returned would be caught too).
 * CMF_TP_SYMM_GUARD=0 takes the guard away (to show the race on an NCCL that has it: then the window rows fail).
 * Needs 2 CUDA devices and a build with NCCL; exits 77 (ctest SKIP) with fewer devices. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>

extern "C" {
#include "tp/tp.h"
#include "util/error.h"
}

enum { NR = 2, ITERS = 40, GRAPH_ITERS = 8, REPLAYS = 5, NCOUNT = 3 };
static const int COUNTS[NCOUNT] = {64, 448, 5120};
static const long long SPIN = 20000; /* producer cycles between its trigger and its writes (~10 us) */

static int failures;
#define EXPECT(cond, ...)                                                                                        \
    do {                                                                                                         \
        if (!(cond)) {                                                                                           \
            fprintf(stderr, "%s:%d: CHECK failed: %s: ", __FILE__, __LINE__, #cond);                           \
            fprintf(stderr, __VA_ARGS__);                                                                        \
            fputc('\n', stderr);                                                                                 \
            __atomic_fetch_add(&failures, 1, __ATOMIC_RELAXED);                                                  \
        }                                                                                                        \
    } while (0)

static __device__ __forceinline__ float value(int r, int it, int i) {
    return (float)(1000 * (r + 1) + 7 * (it % 97) + i % 13);
}

/* The late producer: wait (PDL), trigger the dependents, spin, then write. Two blocks: most SMs stay free, as
 * around the small products of the hf-tiny models. */
static __global__ void k_produce(float *x, int n, int r, int it, long long spin) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
    const long long t0 = clock64();
    while (clock64() - t0 < spin) {
    }
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) x[i] = value(r, it, i);
}

/* Counts into *wrong the elements of x that are not the sum over nr ranks. */
static __global__ void k_check(const float *x, int n, int nr, int it, unsigned long long *wrong) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
        float want = 0;
        for (int k = 0; k < nr; k++) want += value(k, it, i);
        if (x[i] != want) atomicAdd(wrong, 1ull);
    }
}

/* kernel<<<grid, 256, 0, s>>> with the PDL attribute, as the backend's cu_launch. */
template <typename... K, typename... A>
static cudaError_t launch_pdl(void (*k)(K...), int grid, cudaStream_t s, A... args) {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3((unsigned)grid);
    cfg.blockDim = dim3(256);
    cfg.stream = s;
    cudaLaunchAttribute at[1];
    at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    at[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = at;
    cfg.numAttrs = 1;
    return cudaLaunchKernelEx(&cfg, k, ((K)args)...);
}

static cmf_tp tp;
static float *plain[NR], *winbuf[NR];
static pthread_barrier_t bar;
static unsigned long long wrong_eager[NR][2][NCOUNT], wrong_graph[NR][2][NCOUNT];

/* Queues iteration `it` on rank r: produce, all-reduce, check. Returns 0 after a failed call. */
static int step(int r, cudaStream_t s, float *buf, int n, int symm, int it, unsigned long long *wrong) {
    cudaError_t e = launch_pdl(k_produce, 2, s, buf, n, r, it, SPIN);
    EXPECT(e == cudaSuccess, "rank %d: producer: %s", r, cudaGetErrorString(e));
    cmf_status st = cmf_tp_nccl_allreduce_stream(&tp, r, (void *)s, buf, n, symm);
    EXPECT(st == CMF_OK, "rank %d: %s", r, cmf_last_error());
    cudaError_t e2 = launch_pdl(k_check, 8, s, (const float *)buf, n, (int)NR, it, wrong);
    EXPECT(e2 == cudaSuccess, "rank %d: checker: %s", r, cudaGetErrorString(e2));
    return e == cudaSuccess && st == CMF_OK && e2 == cudaSuccess;
}

static void *rank_main(void *arg) {
    const int r = (int)(size_t)arg;
    if (cmf_tp_cuda_set_device(tp.dev0 + r) != CMF_OK) {
        EXPECT(0, "rank %d: %s", r, cmf_last_error());
        return NULL;
    }
    cudaStream_t s;
    unsigned long long *wrong = NULL, host = 0;
    int ok = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess &&
             cudaMalloc((void **)&wrong, sizeof *wrong) == cudaSuccess;
    EXPECT(ok, "rank %d: stream / counter", r);
    for (int mode = 0; mode < 2 && ok; mode++) { /* 0: plain buffer, 1: symmetric window */
        float *buf = mode ? winbuf[r] : plain[r];
        for (int c = 0; c < NCOUNT && ok; c++) {
            const int n = COUNTS[c];
            /* eager */
            pthread_barrier_wait(&bar);
            ok = cudaMemsetAsync(wrong, 0, sizeof *wrong, s) == cudaSuccess;
            for (int it = 0; it < ITERS && ok; it++) ok = step(r, s, buf, n, mode, it, wrong);
            ok = ok && cudaMemcpyAsync(&host, wrong, sizeof host, cudaMemcpyDeviceToHost, s) == cudaSuccess &&
                 cudaStreamSynchronize(s) == cudaSuccess;
            EXPECT(ok, "rank %d: eager iterations: %s", r, cudaGetErrorString(cudaGetLastError()));
            wrong_eager[r][mode][c] = host;
            /* a graph of GRAPH_ITERS iterations, replayed */
            cudaGraph_t g = NULL;
            cudaGraphExec_t ge = NULL;
            ok = ok && cudaMemsetAsync(wrong, 0, sizeof *wrong, s) == cudaSuccess &&
                 cudaStreamSynchronize(s) == cudaSuccess &&
                 cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal) == cudaSuccess;
            for (int it = 0; it < GRAPH_ITERS && ok; it++) ok = step(r, s, buf, n, mode, 1000 + it, wrong);
            cudaError_t ec = cudaStreamEndCapture(s, &g);
            ok = ok && ec == cudaSuccess && cudaGraphInstantiate(&ge, g, 0) == cudaSuccess;
            EXPECT(ok, "rank %d: capture: %s", r, cudaGetErrorString(ec));
            pthread_barrier_wait(&bar);
            for (int k = 0; k < REPLAYS && ok; k++) ok = cudaGraphLaunch(ge, s) == cudaSuccess;
            ok = ok && cudaMemcpyAsync(&host, wrong, sizeof host, cudaMemcpyDeviceToHost, s) == cudaSuccess &&
                 cudaStreamSynchronize(s) == cudaSuccess;
            EXPECT(ok, "rank %d: replays: %s", r, cudaGetErrorString(cudaGetLastError()));
            wrong_graph[r][mode][c] = host;
            if (ge) cudaGraphExecDestroy(ge);
            if (g) cudaGraphDestroy(g);
        }
    }
    if (!ok) fprintf(stderr, "rank %d stopped early; the other rank may wait for it at NCCL\n", r);
    cudaFree(wrong);
    cudaStreamDestroy(s);
    return NULL;
}

int main(void) {
    int devices = 0;
    if (cudaGetDeviceCount(&devices) != cudaSuccess || devices < NR) {
        printf("SKIP: %d CUDA devices (the symmetric all-reduce test needs %d)\n", devices, NR);
        return 77;
    }
    const int devs[NR] = {0, 1};
    tp.n = NR;
    tp.dev0 = 0;
    cmf_status st = cmf_tp_nccl_init(NR, devs, 0, &tp.nccl);
    EXPECT(st == CMF_OK, "NCCL init: %s", cmf_last_error());
    if (st != CMF_OK) return 1;
    const size_t bytes = (size_t)COUNTS[NCOUNT - 1] * sizeof(float);
    void *ptrs[CMF_TP_MAX], *wins[CMF_TP_MAX];
    st = cmf_tp_nccl_window(&tp, bytes, ptrs, wins);
    if (st != CMF_OK) { /* NCCL < 2.27 or no VMM: the plain rows still run */
        printf("no symmetric window: %s\n", cmf_last_error());
        cmf_err_clear();
    }
    for (int r = 0; r < NR; r++) {
        cmf_tp_cuda_set_device(r);
        EXPECT(cudaMalloc((void **)&plain[r], bytes) == cudaSuccess, "cudaMalloc on cuda:%d", r);
        winbuf[r] = st == CMF_OK ? (float *)ptrs[r] : plain[r];
    }
    pthread_barrier_init(&bar, NULL, NR);
    pthread_t th[NR];
    for (int r = 0; r < NR; r++) pthread_create(&th[r], NULL, rank_main, (void *)(size_t)r);
    for (int r = 0; r < NR; r++) pthread_join(th[r], NULL);
    for (int mode = 0; mode < 2; mode++)
        for (int c = 0; c < NCOUNT; c++) {
            unsigned long long we = 0, wg = 0;
            for (int r = 0; r < NR; r++) we += wrong_eager[r][mode][c], wg += wrong_graph[r][mode][c];
            const char *what = mode ? (st == CMF_OK ? "symmetric window" : "plain (no window)") : "plain buffer";
            printf("%-17s count %5d: wrong sums %llu of %d eager, %llu of %d in graphs (guard %s)\n", what,
                   COUNTS[c], we, NR * ITERS * COUNTS[c], wg, NR * GRAPH_ITERS * REPLAYS * COUNTS[c],
                   cmf_tp_nccl_symm_guard() ? "on" : "off");
            EXPECT(we == 0 && wg == 0, "%s, count %d: %llu eager and %llu graph elements differ from the sum", what,
                   COUNTS[c], we, wg);
        }
    if (st == CMF_OK) cmf_tp_nccl_window_free(&tp, ptrs, wins);
    for (int r = 0; r < NR; r++) {
        cmf_tp_cuda_set_device(r);
        cudaFree(plain[r]);
    }
    cmf_tp_nccl_free(tp.nccl, NR);
    if (failures) fprintf(stderr, "%d check(s) failed\n", failures);
    return failures ? 1 : 0;
}
