/* ar_bench.cu — the latency of one NCCL all-reduce of decode-sized messages between the GPUs of one host, eager
 * and inside a CUDA graph (how the tp ranks issue it now, src/backend/cuda/tp_nccl.cu):
 *   ar_bench [N_GPUS 2] [COUNTS 64,448,4096,5120,40960]
 * One thread per GPU with one communicator each (ncclCommInitAll), as src/tp does. For every count (floats) and
 * payload (f32; bf16: half the bytes; f32 in a symmetric window: ncclMemAlloc + ncclCommWindowRegister with
 * NCCL_WIN_COLL_SYMMETRIC, NCCL >= 2.27's symmetric kernels, as src/tp uses by default), each rank
 *   eager: queues EAGER back-to-back in-place sums on its stream; rank 0 times them with events;
 *   graph: captures K sums (K = 64: the two per layer of a 32-layer decode step) into one graph and replays it R
 *          times; rank 0 times the replays with events.
 * and prints one line: microseconds per all-reduce, eager and in a graph. Payload f32-symm-guard is f32-symm with
 * tp_nccl.cu's guard (a one-block kernel launched without PDL that triggers its dependents at once) queued before
 * every all-reduce, as the tp ranks queue it with NCCL < 2.30.7: its rows give the guard's cost per call. NCCL's own
 * choices (NCCL_PROTO, NCCL_ALGO, NCCL_MIN_NCHANNELS / NCCL_MAX_NCHANNELS, NCCL_GRAPH_MIXING_SUPPORT) come from the
 * environment, so bench/tp/run_tp.sh runs this once per setting. Keep NCCL_NVLS_ENABLE=0 on machines without
 * NVLink multicast.
 * The buffers hold constants (the values do not change NCCL's time); every element of the first sum is checked, and
 * (f32) of a sum after a producer that triggers its dependents early and writes late (k_fill_late): the line ends
 * with the wrong element counts over all ranks. Counts 64 and 448 are those of the hf-tiny models' step and 7-token
 * prefill, where test_tp_cuda failed with symmetric windows (bench/tp/RESULTS.md, 2026-11-30). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <nccl.h>

enum { MAXG = 8, EAGER = 200, K = 64, R = 30 };

#define CK(call)                                                                                                 \
    do {                                                                                                         \
        cudaError_t e_ = (call);                                                                                 \
        if (e_ != cudaSuccess) {                                                                                 \
            fprintf(stderr, "ar_bench: %s: %s (line %d)\n", #call, cudaGetErrorString(e_), __LINE__);            \
            exit(1);                                                                                             \
        }                                                                                                        \
    } while (0)
#define NK(call)                                                                                                 \
    do {                                                                                                         \
        ncclResult_t r_ = (call);                                                                                \
        if (r_ != ncclSuccess) {                                                                                 \
            fprintf(stderr, "ar_bench: %s: %s (line %d)\n", #call, ncclGetErrorString(r_), __LINE__);            \
            exit(1);                                                                                             \
        }                                                                                                        \
    } while (0)

static int n_gpu = 2;
static ncclComm_t comms[MAXG];
static pthread_barrier_t bar;
static size_t cur_count;
static int cur_bf16, cur_symm, cur_guard;
static float res_eager_us, res_graph_us;
static int bad;
static long wrong[MAXG][3]; /* per rank: wrong elements after the plain fill, the late fill eager, in a graph */

__global__ void k_fill(float *x, size_t n, float v) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) x[i] = v;
}
__global__ void k_fill_bf16(__nv_bfloat16 *x, size_t n, float v) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        x[i] = __float2bfloat16(v);
}

/* A producer that lets a programmatically dependent next kernel launch at once (griddepcontrol.launch_dependents,
 * PDL), then spins `spin` cycles and only then writes its output, as the decode kernels of the CUDA backend do (they
 * trigger early). A collective queued after it must still see the written values: if NCCL launched its kernel as a
 * dependent and read (or let a peer read) the buffer before this grid completed, the sum would be wrong. */
__global__ void k_fill_late(float *x, size_t n, float v, long long spin) {
    asm volatile("griddepcontrol.launch_dependents;");
    const long long t0 = clock64();
    while (clock64() - t0 < spin) {
    }
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) x[i] = v;
}

/* tp_nccl.cu's guard before a symmetric all-reduce (the same kernel; see there). */
__global__ void k_guard(void) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}
#define GUARD(s)                                                                                                 \
    do {                                                                                                         \
        if (cur_guard) k_guard<<<1, 32, 0, s>>>();                                                               \
    } while (0)

/* Elements of the n-value buffer that are not the sum 1 + .. + n_gpu (exact in f32 and bf16 for small n_gpu). */
static long count_wrong(const void *buf, size_t n, int b16) {
    const float want = 0.5f * (float)(n_gpu * (n_gpu + 1));
    const size_t eb = b16 ? 2 : 4;
    char *h = (char *)malloc(n * eb);
    CK(cudaMemcpy(h, buf, n * eb, cudaMemcpyDeviceToHost));
    long k = 0;
    for (size_t i = 0; i < n; i++) {
        const float v = b16 ? __bfloat162float(((__nv_bfloat16 *)h)[i]) : ((float *)h)[i];
        k += v != want;
    }
    free(h);
    return k;
}

/* rank r's work for the current (count, type): fill with r+1, one checked sum (f32: also after the late producer,
 * eagerly and inside a graph), then the two timings. */
static void *rank_main(void *arg) {
    const int r = (int)(size_t)arg;
    CK(cudaSetDevice(r));
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    const size_t n = cur_count, eb = cur_bf16 ? 2 : 4;
    const ncclDataType_t dt = cur_bf16 ? ncclBfloat16 : ncclFloat;
    void *buf;
#if defined(NCCL_WIN_COLL_SYMMETRIC)
    ncclWindow_t win = NULL;
    if (cur_symm) { /* registration is collective: every rank thread registers its own communicator */
        NK(ncclMemAlloc(&buf, n * eb));
        NK(ncclCommWindowRegister(comms[r], buf, n * eb, &win, NCCL_WIN_COLL_SYMMETRIC));
    } else
#endif
        CK(cudaMalloc(&buf, n * eb));
    if (cur_bf16) k_fill_bf16<<<64, 256, 0, s>>>((__nv_bfloat16 *)buf, n, (float)(r + 1));
    else k_fill<<<64, 256, 0, s>>>((float *)buf, n, (float)(r + 1));
    CK(cudaGetLastError());
    NK(ncclAllReduce(buf, buf, n, dt, ncclSum, comms[r], s));
    CK(cudaStreamSynchronize(s));
    wrong[r][0] = count_wrong(buf, n, cur_bf16);
    wrong[r][1] = wrong[r][2] = 0;
    if (!cur_bf16) { /* the late producer (k_fill_late, ~20 us) then the sum: eagerly, then captured in a graph */
        pthread_barrier_wait(&bar);
        k_fill_late<<<64, 256, 0, s>>>((float *)buf, n, (float)(r + 1), 40000);
        CK(cudaGetLastError());
        GUARD(s);
        NK(ncclAllReduce(buf, buf, n, dt, ncclSum, comms[r], s));
        CK(cudaStreamSynchronize(s));
        wrong[r][1] = count_wrong(buf, n, 0);
        cudaGraph_t g;
        cudaGraphExec_t ge;
        CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed));
        k_fill_late<<<64, 256, 0, s>>>((float *)buf, n, (float)(r + 1), 40000);
        GUARD(s);
        NK(ncclAllReduce(buf, buf, n, dt, ncclSum, comms[r], s));
        CK(cudaStreamEndCapture(s, &g));
        CK(cudaGraphInstantiate(&ge, g, 0));
        pthread_barrier_wait(&bar);
        CK(cudaGraphLaunch(ge, s));
        CK(cudaStreamSynchronize(s));
        wrong[r][2] = count_wrong(buf, n, 0);
        CK(cudaGraphExecDestroy(ge));
        CK(cudaGraphDestroy(g));
    }
    if (wrong[r][0] || wrong[r][1] || wrong[r][2]) bad = 1;
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    float ms = 0;
    /* eager */
    for (int i = 0; i < 20; i++) {
        GUARD(s);
        NK(ncclAllReduce(buf, buf, n, dt, ncclSum, comms[r], s));
    }
    CK(cudaStreamSynchronize(s));
    pthread_barrier_wait(&bar);
    CK(cudaEventRecord(e0, s));
    for (int i = 0; i < EAGER; i++) {
        GUARD(s);
        NK(ncclAllReduce(buf, buf, n, dt, ncclSum, comms[r], s));
    }
    CK(cudaEventRecord(e1, s));
    CK(cudaEventSynchronize(e1));
    CK(cudaEventElapsedTime(&ms, e0, e1));
    if (r == 0) res_eager_us = 1e3f * ms / EAGER;
    /* graph */
    cudaGraph_t g;
    cudaGraphExec_t ge;
    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed));
    for (int i = 0; i < K; i++) {
        GUARD(s);
        NK(ncclAllReduce(buf, buf, n, dt, ncclSum, comms[r], s));
    }
    CK(cudaStreamEndCapture(s, &g));
    CK(cudaGraphInstantiate(&ge, g, 0));
    for (int i = 0; i < 3; i++) CK(cudaGraphLaunch(ge, s));
    CK(cudaStreamSynchronize(s));
    pthread_barrier_wait(&bar);
    CK(cudaEventRecord(e0, s));
    for (int i = 0; i < R; i++) CK(cudaGraphLaunch(ge, s));
    CK(cudaEventRecord(e1, s));
    CK(cudaEventSynchronize(e1));
    CK(cudaEventElapsedTime(&ms, e0, e1));
    if (r == 0) res_graph_us = 1e3f * ms / (K * R);
    CK(cudaGraphExecDestroy(ge));
    CK(cudaGraphDestroy(g));
    CK(cudaEventDestroy(e0));
    CK(cudaEventDestroy(e1));
#if defined(NCCL_WIN_COLL_SYMMETRIC)
    if (cur_symm) {
        CK(cudaDeviceSynchronize());
        NK(ncclCommWindowDeregister(comms[r], win));
        NK(ncclMemFree(buf));
    } else
#endif
        CK(cudaFree(buf));
    CK(cudaStreamDestroy(s));
    return NULL;
}

int main(int argc, char **argv) {
    if (argc > 1) n_gpu = atoi(argv[1]);
    const char *counts = argc > 2 ? argv[2] : "64,448,4096,5120,40960";
    int have = 0;
    CK(cudaGetDeviceCount(&have));
    if (n_gpu < 2 || n_gpu > MAXG || n_gpu > have) {
        fprintf(stderr, "ar_bench: %d GPUs asked, %d present (2..%d)\n", n_gpu, have, MAXG);
        return 77;
    }
    int devs[MAXG];
    for (int i = 0; i < n_gpu; i++) devs[i] = i;
    NK(ncclCommInitAll(comms, n_gpu, devs));
    int ver = 0;
    ncclGetVersion(&ver);
    const char *env[] = {"NCCL_PROTO", "NCCL_ALGO", "NCCL_MIN_NCHANNELS", "NCCL_MAX_NCHANNELS",
                         "NCCL_GRAPH_MIXING_SUPPORT"};
    char setting[256] = "";
    for (size_t i = 0; i < sizeof env / sizeof *env; i++)
        if (getenv(env[i]))
            snprintf(setting + strlen(setting), sizeof setting - strlen(setting), " %s=%s", env[i], getenv(env[i]));
    pthread_barrier_init(&bar, NULL, (unsigned)n_gpu);
    char list[256];
    snprintf(list, sizeof list, "%s", counts);
    for (char *tok = strtok(list, ","); tok; tok = strtok(NULL, ",")) {
        for (int mode = 0; mode < 4; mode++) { /* f32, bf16, f32 in a symmetric window, the same with the guard */
#if !defined(NCCL_WIN_COLL_SYMMETRIC)
            if (mode >= 2) break;
#endif
            const int b16 = mode == 1;
            cur_count = (size_t)atol(tok);
            cur_bf16 = b16;
            cur_symm = mode >= 2;
            cur_guard = mode == 3;
            pthread_t th[MAXG];
            for (int r = 0; r < n_gpu; r++) pthread_create(&th[r], NULL, rank_main, (void *)(size_t)r);
            for (int r = 0; r < n_gpu; r++) pthread_join(th[r], NULL);
            long w[3] = {0, 0, 0};
            for (int r = 0; r < n_gpu; r++)
                for (int k = 0; k < 3; k++) w[k] += wrong[r][k];
            const char *what = b16 ? "bf16" : mode == 3 ? "f32-symm-guard" : mode == 2 ? "f32-symm" : "f32";
            printf("ar gpus=%d nccl=%d count=%zu %s bytes=%zu eager %.2f us graph %.2f us; wrong sums: %ld, after a "
                   "late producer %ld eager %ld graph%s%s\n",
                   n_gpu, ver, cur_count, what, cur_count * (b16 ? 2 : 4),
                   (double)res_eager_us, (double)res_graph_us, w[0], w[1], w[2], *setting ? " |" : "", setting);
            fflush(stdout);
        }
    }
    for (int i = 0; i < n_gpu; i++) ncclCommDestroy(comms[i]);
    return bad;
}
