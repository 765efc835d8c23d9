/* tp_nccl.cu — the NCCL side of tensor parallelism over CUDA devices (src/tp/tp.h): one communicator per device
 * (ncclCommInitAll: one process drives all ranks, one thread per rank), and the backend.h allreduce of a cuda rank
 * as ncclAllReduce(sum, f32, in place) queued on the rank backend's stream, so it is ordered after the o_proj /
 * down_proj product that wrote the buffer and before the op that reads it, with no host synchronisation. With the
 * residual folded into it (src/tp/tp.h fold, the default) the buffer is the residual stream x itself: rank 0's product
 * added its partial to x in its epilogue, the others wrote theirs into x, and the next RMSNorm reads the sum.
 * CUDA graphs: NCCL collectives can be captured (NCCL >= 2.9, "Using NCCL with CUDA Graphs" in its user guide), so a
 * rank's decode step, collectives included, is one graph of its backend (backend_cuda.cu "CUDA graphs"): while the
 * backend captures, the ncclAllReduce below is recorded into the graph; while it replays a cached graph the
 * collective is already in it and nothing is queued. Each rank captures and replays its own graph; the ranks' NCCL
 * kernels meet on the devices.
 * Overlap (issue 9 item 3): after the all-reduce everything on the stream depends on its result; the one thing that
 * could overlap it is the next products' weight reads. An L2 prefetch of those weights on a forked side stream during
 * each all-reduce was measured (commit 9c383c1, bench/tp/RESULTS.md) and cost 1-2% instead of gaining, so the rank
 * step stays one stream; the backend's matvec itself prefetches its first rows before its dependency wait (PDL).
 * The backend's own prefetch of the next weights in forward order (CMF_CUDA_L2PF, backend_cuda.cu pf_hint), which
 * keeps the weight reads going across the all-reduce, measured no gain at tp 2 either (session 5: 8 MiB ahead, 32B
 * shape 99.6 / 102.9 tok/s against 101.0 / 105.0 without, plain buffers / windows). Nor did the guard kernel below
 * prefetching 8 MiB of the next products' weights (bulk L2 prefetches from its one block) while NCCL's kernel ran
 * (session 5, commit 96f761d, since removed): 32B shape tp 2 67.5 against 94.7 tok/s, 8B 176.9 against 284.2;
 * one block issues 8 MiB far slower than the collective lasts, and the following kernels waited for it. On the
 * 64-layer 32B shape the all-reduces, with the ranks meeting at them, are ~11-16% of a tp 2 token (9% with the fold,
 * session 6), and a rank's own kernels cap tp 2 at 1.53x (session 4) to 1.61x (session 5) one GPU.
 * Built only with CMF_HAVE_NCCL (CMake option CMF_NCCL); NVLink SHARP (NVLS) is left to the environment
 * (NCCL_NVLS_ENABLE=0 on machines without multicast), as are NCCL's protocol / algorithm choices (NCCL_PROTO,
 * NCCL_ALGO; bench/tp/RESULTS.md has the measurements). */
#ifdef CMF_HAVE_NCCL
#include <stdlib.h>

#include <cuda_runtime.h>
#include <nccl.h>

extern "C" {
#include "tp/tp.h"
#include "util/error.h"
void cmf_backend_cuda_stream(cmf_backend *be, void **stream, int *dev); /* backend_cuda.cu */
int cmf_backend_cuda_replaying(cmf_backend *be);                        /* backend_cuda.cu */
}

/* One sum of `count` floats on every communicator, from this thread (a group call), waited for: NCCL connects its
 * peers at a communicator's first collective of a size class, which is then done here, at load, rather than
 * inside a rank's first graph capture. */
static cmf_status warm_up(ncclComm_t *c, int n, const int *devs, size_t count) {
    float *buf[CMF_TP_MAX] = {};
    cudaStream_t s[CMF_TP_MAX] = {};
    cmf_status st = CMF_OK;
    for (int i = 0; i < n && st == CMF_OK; i++) {
        cudaError_t e = cudaSetDevice(devs[i]);
        if (e == cudaSuccess) e = cudaMalloc((void **)&buf[i], count * sizeof(float));
        if (e == cudaSuccess) e = cudaMemset(buf[i], 0, count * sizeof(float));
        if (e == cudaSuccess) e = cudaStreamCreateWithFlags(&s[i], cudaStreamNonBlocking);
        if (e != cudaSuccess)
            st = cmf_err(CMF_E_IO, "tp: warm-up all-reduce on cuda:%d: %s", devs[i], cudaGetErrorString(e));
    }
    if (st == CMF_OK) {
        ncclResult_t r = ncclGroupStart();
        for (int i = 0; i < n && r == ncclSuccess; i++)
            r = ncclAllReduce(buf[i], buf[i], count, ncclFloat, ncclSum, c[i], s[i]);
        ncclResult_t r2 = ncclGroupEnd();
        if (r == ncclSuccess) r = r2;
        if (r != ncclSuccess)
            st = cmf_err(CMF_E_IO, "tp: warm-up ncclAllReduce of %zu floats: %s", count, ncclGetErrorString(r));
    }
    for (int i = 0; i < n; i++) {
        cudaSetDevice(devs[i]);
        if (s[i]) {
            cudaError_t e = cudaStreamSynchronize(s[i]);
            if (e != cudaSuccess && st == CMF_OK)
                st = cmf_err(CMF_E_IO, "tp: warm-up all-reduce on cuda:%d: %s", devs[i], cudaGetErrorString(e));
            cudaStreamDestroy(s[i]);
        }
        cudaFree(buf[i]);
    }
    return st;
}

extern "C" cmf_status cmf_tp_nccl_init(int n, const int *devs, size_t warm_count, void **out) {
    *out = NULL;
    ncclComm_t *c = (ncclComm_t *)calloc((size_t)n, sizeof *c);
    if (!c) return cmf_err(CMF_E_NOMEM, "tp: out of memory");
    ncclResult_t r = ncclCommInitAll(c, n, devs);
    if (r != ncclSuccess) {
        free(c);
        return cmf_err(CMF_E_IO, "tp: ncclCommInitAll over %d devices (from cuda:%d): %s", n, devs[0],
                       ncclGetErrorString(r));
    }
    /* the decode sizes: one token's hidden state, and a batch of 8 (the largest step the backend captures) */
    cmf_status st = warm_count ? warm_up(c, n, devs, warm_count) : CMF_OK;
    if (st == CMF_OK && warm_count) st = warm_up(c, n, devs, 8 * warm_count);
    if (st != CMF_OK) {
        cmf_tp_nccl_free(c, n);
        return st;
    }
    *out = c;
    return CMF_OK;
}

extern "C" void cmf_tp_nccl_free(void *comms, int n) {
    ncclComm_t *c = (ncclComm_t *)comms;
    for (int i = 0; c && i < n; i++)
        if (c[i]) ncclCommDestroy(c[i]);
    free(c);
}

/* ---- the guard before a symmetric all-reduce ----------------------------------------------------------------
 * NCCL launches its symmetric kernels with the programmatic-serialization attribute (PDL) on sm_90 (enqueue.cc:
 * `plan->isSymColl && compCap >= 90`), so such a kernel may start as soon as the kernel before it on the stream
 * executes griddepcontrol.launch_dependents, which every decode kernel of the cuda backend does right after its own
 * wait (common.cuh "Programmatic Dependent Launch"), i.e. before it writes its output. NCCL 2.27 waited for the
 * predecessor inside the kernel (cudaGridDependencySynchronize in the symmetric primitives); 2.28.0 - 2.30.4 do not
 * (restored in 2.30.7: "newly launched kernels cannot access memory modified by prior kernels before it reaches
 * point of coherency"). So with NCCL 2.28.3 (the device machine's) a rank's symmetric all-reduce could read its own
 * o_proj / down_proj output, or signal it ready to the peer, before the product had written it: the wrong sums of
 * bench/tp/RESULTS.md (2026-11-30), worst on the hf-tiny models whose small products leave SMs free for NCCL's
 * blocks to start early. The guard is a one-block kernel launched without the attribute just before the
 * collective: by stream order it starts only after the producer completed with its writes visible, and it lets
 * NCCL's kernel launch at once (launch_dependents first), so the collective starts after the producer and no later
 * than a plain (non-PDL) launch would. Plain-buffer all-reduces are not launched with PDL and need no guard. */
static __global__ void k_symm_guard(void) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

/* 1 when symmetric all-reduces get the guard: CMF_TP_SYMM_GUARD=0 / 1 forces it (0 only to show the race, e.g.
 * tests/tp/test_tp_symm), else on for a loaded NCCL older than 2.30.7 (the release that restored the wait). Read
 * once per process. */
static int symm_guard_on(void) {
    static const int on = [] {
        const char *e = getenv("CMF_TP_SYMM_GUARD");
        if (e && (e[0] == '0' || e[0] == '1') && !e[1]) return e[0] == '1';
        int v = 0;
        return ncclGetVersion(&v) != ncclSuccess || v < 23007;
    }();
    return on;
}

extern "C" int cmf_tp_nccl_symm_guard(void) { return symm_guard_on(); }

extern "C" cmf_status cmf_tp_nccl_allreduce_stream(cmf_tp *tp, int r, void *stream, float *buf, int64_t count,
                                                   int symm) {
    cudaStream_t s = (cudaStream_t)stream;
    if (symm && symm_guard_on()) {
        k_symm_guard<<<1, 32, 0, s>>>();
        cudaError_t e = cudaGetLastError();
        if (e != cudaSuccess)
            return cmf_err(CMF_E_IO, "tp rank %d: the launch before a symmetric all-reduce: %s", r,
                           cudaGetErrorString(e));
    }
    ncclResult_t res = ncclAllReduce(buf, buf, (size_t)count, ncclFloat, ncclSum, ((ncclComm_t *)tp->nccl)[r], s);
    if (res != ncclSuccess)
        return cmf_err(CMF_E_IO, "tp rank %d (cuda:%d): ncclAllReduce of %lld floats%s: %s", r, tp->dev0 + r,
                       (long long)count, symm ? " (symmetric window)" : "", ncclGetErrorString(res));
    return CMF_OK;
}

extern "C" cmf_status cmf_tp_nccl_allreduce(cmf_backend *be, cmf_batch *b, float *buf, int64_t count) {
    cmf_tp *tp = b->m->tp_of;
    const int r = b->m->tp_rank;
    if (cmf_backend_cuda_replaying(be)) return CMF_OK; /* the collective is inside the graph being replayed */
    void *sp = NULL;
    int dev = 0;
    cmf_backend_cuda_stream(be, &sp, &dev);
    cudaStream_t stream = (cudaStream_t)sp;
    /* The backend defers small products to fuse them with the next op (backend_cuda.cu "fusion"); any other op
     * first queues what is pending, so a zero-byte zero() puts the o_proj / down_proj product that wrote buf on
     * the stream (or into the capture) before the collective. */
    cmf_status fst = be->zero(be, buf, 0);
    if (fst != CMF_OK) return fst;
    /* CMF_TP_PROFILE (benchmarks; the rank backends then run without graphs, tp.c): the collective alone, timed
     * on rank 0 with events after every rank's stream drained and the ranks met at the host barrier; this
     * serialises the forward, so tok/s comes from runs without */
    const int prof = tp->profile;
    cudaEvent_t e0 = NULL, e1 = NULL;
    if (prof) {
        cudaStreamSynchronize(stream);
        if (cmf_tp_barrier(tp)) return cmf_err(CMF_E_IO, "tp: another rank failed");
        if (r == 0) {
            cudaEventCreate(&e0);
            cudaEventCreate(&e1);
            cudaEventRecord(e0, stream);
        }
    }
    cmf_status st = cmf_tp_nccl_allreduce_stream(tp, r, sp, buf, count, cmf_tp_in_window(tp, r, buf));
    if (prof && r == 0) {
        float ms = 0;
        cudaEventRecord(e1, stream);
        cudaEventSynchronize(e1);
        cudaEventElapsedTime(&ms, e0, e1);
        cudaEventDestroy(e0);
        cudaEventDestroy(e1);
        tp->allreduce_s += 1e-3 * ms;
        tp->allreduce_calls++;
    }
    return st;
}

/* ---- symmetric windows (NCCL >= 2.27) -----------------------------------------------------------------------
 * NCCL's symmetric kernels (2.27 release notes, "Symmetric memory API and symmetric kernels"; user guide "Window
 * registration") run an all-reduce whose buffers every rank registered with ncclCommWindowRegister(...,
 * NCCL_WIN_COLL_SYMMETRIC) at the same offset: each rank reads its peers' buffers over NVLink directly, which is
 * faster for decode-sized messages than the LL protocol's staged copies. The buffers must be VMM memory
 * (ncclMemAlloc). src/tp/tp.c puts each rank batch's xb (the o_proj / down_proj output, all-reduced in place when
 * the fold is off) at offset 0 of such a window and its x (all-reduced under the fold) right after it, by default
 * (CMF_TP_SYMM=0: plain cudaMalloc buffers). Those symmetric kernels
 * are launched with PDL and, in NCCL 2.28 - 2.30.4, do not wait for the kernel before them: without the guard above,
 * test_tp_cuda's hf-tiny models differed from one GPU by up to 0.9 relative and tests/tp/test_tp_symm fails; with it
 * both pass. Measured on 2 x H200 (bench/tp/RESULTS.md session 5, NCCL 2.28.3), inside a graph: 5120 floats 5.2 us
 * per all-reduce with the guard (4.25 without, 7.3 in a plain buffer); 32B shape, 64 layers, tp 2 decode 105.0
 * against 101.0 tok/s with plain buffers. */
#if defined(NCCL_WIN_COLL_SYMMETRIC)
extern "C" cmf_status cmf_tp_nccl_window(cmf_tp *tp, size_t bytes, void **ptrs, void **wins) {
    ncclComm_t *c = (ncclComm_t *)tp->nccl;
    cmf_status st = CMF_OK;
    for (int r = 0; r < tp->n; r++) ptrs[r] = wins[r] = NULL;
    for (int r = 0; r < tp->n && st == CMF_OK; r++) {
        cudaError_t e = cudaSetDevice(tp->dev0 + r);
        ncclResult_t res = e == cudaSuccess ? ncclMemAlloc(&ptrs[r], bytes) : ncclSuccess;
        if (e == cudaSuccess && res == ncclSuccess) e = cudaMemset(ptrs[r], 0, bytes);
        if (e != cudaSuccess || res != ncclSuccess)
            st = cmf_err(CMF_E_IO, "tp rank %d: ncclMemAlloc of %zu bytes: %s", r, bytes,
                         e != cudaSuccess ? cudaGetErrorString(e) : ncclGetErrorString(res));
    }
    if (st == CMF_OK) { /* a collective: one group over every rank's communicator from this thread */
        ncclResult_t res = ncclGroupStart();
        for (int r = 0; r < tp->n && res == ncclSuccess; r++)
            res = ncclCommWindowRegister(c[r], ptrs[r], bytes, (ncclWindow_t *)&wins[r], NCCL_WIN_COLL_SYMMETRIC);
        ncclResult_t r2 = ncclGroupEnd();
        if (res == ncclSuccess) res = r2;
        if (res != ncclSuccess) {
            st = cmf_err(CMF_E_IO, "tp: ncclCommWindowRegister of %zu bytes: %s", bytes, ncclGetErrorString(res));
            for (int r = 0; r < tp->n; r++) wins[r] = NULL;
        }
    }
    if (st == CMF_OK) { /* one sum of the (zeroed) window on every rank, waited for: its first use, at load */
        ncclResult_t res = ncclGroupStart();
        for (int r = 0; r < tp->n && res == ncclSuccess; r++)
            res = ncclAllReduce(ptrs[r], ptrs[r], bytes / sizeof(float), ncclFloat, ncclSum, c[r], 0);
        ncclResult_t r2 = ncclGroupEnd();
        if (res == ncclSuccess) res = r2;
        for (int r = 0; r < tp->n; r++) {
            cudaSetDevice(tp->dev0 + r);
            cudaError_t e = cudaDeviceSynchronize();
            if (e != cudaSuccess && res == ncclSuccess) res = ncclUnhandledCudaError;
        }
        if (res != ncclSuccess)
            st = cmf_err(CMF_E_IO, "tp: first all-reduce in a symmetric window: %s", ncclGetErrorString(res));
    }
    if (st != CMF_OK) cmf_tp_nccl_window_free(tp, ptrs, wins);
    return st;
}

extern "C" void cmf_tp_nccl_window_free(cmf_tp *tp, void **ptrs, void **wins) {
    ncclComm_t *c = (ncclComm_t *)tp->nccl;
    int any = 0;
    for (int r = 0; r < tp->n; r++) any |= wins[r] != NULL;
    if (any) {
        for (int r = 0; r < tp->n; r++) { /* the rank's work on the window is done before it goes */
            cudaSetDevice(tp->dev0 + r);
            cudaDeviceSynchronize();
        }
        ncclGroupStart();
        for (int r = 0; r < tp->n; r++)
            if (wins[r]) ncclCommWindowDeregister(c[r], (ncclWindow_t)wins[r]);
        ncclGroupEnd();
    }
    for (int r = 0; r < tp->n; r++) {
        if (ptrs[r]) {
            cudaSetDevice(tp->dev0 + r);
            ncclMemFree(ptrs[r]);
        }
        ptrs[r] = wins[r] = NULL;
    }
}
#else
extern "C" cmf_status cmf_tp_nccl_window(cmf_tp *tp, size_t bytes, void **ptrs, void **wins) {
    (void)bytes;
    for (int r = 0; r < tp->n; r++) ptrs[r] = wins[r] = NULL;
    return cmf_err(CMF_E_UNSUPPORTED, "tp: NCCL %d.%d has no symmetric windows (2.27 or later)", NCCL_MAJOR,
                   NCCL_MINOR);
}
extern "C" void cmf_tp_nccl_window_free(cmf_tp *tp, void **ptrs, void **wins) {
    (void)tp, (void)ptrs, (void)wins;
}
#endif

extern "C" int cmf_tp_cuda_get_device(void) {
    int dev = 0;
    return cudaGetDevice(&dev) == cudaSuccess ? dev : 0;
}

extern "C" cmf_status cmf_tp_cuda_set_device(int dev) {
    cudaError_t e = cudaSetDevice(dev);
    return e == cudaSuccess ? CMF_OK : cmf_err(CMF_E_IO, "tp: cudaSetDevice(%d): %s", dev, cudaGetErrorString(e));
}
#endif
