/* tp_nccl.cu — the NCCL side of tensor parallelism over CUDA devices (src/tp/tp.h): one communicator per device
 * (ncclCommInitAll: one process drives all ranks, one thread per rank), and the backend.h allreduce of a cuda rank
 * as ncclAllReduce(sum, f32, in place) queued on the rank backend's stream, so it is ordered after the o_proj /
 * down_proj product that wrote the buffer and before the residual that reads it, with no host synchronisation.
 * CUDA graphs: NCCL collectives can be captured (NCCL >= 2.9, "Using NCCL with CUDA Graphs" in its user guide), so a
 * rank's decode step, collectives included, is one graph of its backend (backend_cuda.cu "CUDA graphs"): while the
 * backend captures, the ncclAllReduce below is recorded into the graph; while it replays a cached graph the
 * collective is already in it and nothing is queued. Each rank captures and replays its own graph; the ranks' NCCL
 * kernels meet on the devices.
 * Overlap (issue 9 item 3): the all-reduce leaves the rank's memory system idle for its ~10-20 us, and everything
 * after it on the stream depends on its result. With CMF_TP_PREFETCH_MB > 0, each all-reduce also forks a side
 * stream that issues L2 prefetches (PTX prefetch.global.L2) of the first bytes of the next products' weights (after
 * o_proj: gate/up of the same layer; after down_proj: q/k/v of the next layer), up to that many MiB, so those reads
 * overlap the collective; the side stream is joined back at the next all-reduce (the last of a forward only
 * joins), which keeps a captured step's fork and join inside one graph.
 * Built only with CMF_HAVE_NCCL (CMake option CMF_NCCL); NVLink SHARP (NVLS) is left to the environment
 * (NCCL_NVLS_ENABLE=0 on machines without multicast), as are NCCL's protocol / algorithm choices (NCCL_PROTO,
 * NCCL_ALGO; bench/tp/RESULTS.md has the measurements). */
#ifdef CMF_HAVE_NCCL
#include <stdlib.h>

#include <cuda_runtime.h>
#include <nccl.h>

extern "C" {
#include "model/model.h"
#include "tp/tp.h"
#include "util/error.h"
/* backend_cuda.cu */
void cmf_backend_cuda_stream(cmf_backend *be, void **stream, int *dev);
int cmf_backend_cuda_replaying(cmf_backend *be);
cmf_status cmf_backend_cuda_weight(cmf_backend *be, const cmf_weight *w, const void **d, size_t *bytes);
}

/* Per rank: the communicator and the prefetch side stream (block comment). */
struct rank_side {
    cudaStream_t side;
    cudaEvent_t fork, join;
    int pending; /* a fork not joined yet */
};
struct tp_nccl {
    int n;
    ncclComm_t comm[CMF_TP_MAX];
    rank_side rs[CMF_TP_MAX];
    size_t prefetch_bytes; /* CMF_TP_PREFETCH_MB; 0 = off */
};

/* L2 prefetch of up to 3 byte ranges, one instruction per 128-byte line (no data comes back to the SMs). */
struct pf_ranges {
    const char *p[3];
    size_t n[3];
};
__global__ void k_prefetch_l2(pf_ranges r) {
    const size_t step = (size_t)gridDim.x * blockDim.x * 128;
    for (int k = 0; k < 3; k++)
        for (size_t off = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * 128; off < r.n[k]; off += step)
            asm volatile("prefetch.global.L2 [%0];" ::"l"(r.p[k] + off));
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
        for (int i = 0; i < n && r == ncclSuccess; i++) r = ncclAllReduce(buf[i], buf[i], count, ncclFloat, ncclSum, c[i], s[i]);
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
    tp_nccl *t = (tp_nccl *)calloc(1, sizeof *t);
    if (!t) return cmf_err(CMF_E_NOMEM, "tp: out of memory");
    ncclResult_t r = ncclCommInitAll(t->comm, n, devs);
    if (r != ncclSuccess) {
        free(t);
        return cmf_err(CMF_E_IO, "tp: ncclCommInitAll over %d devices (from cuda:%d): %s", n, devs[0],
                       ncclGetErrorString(r));
    }
    t->n = n;
    const char *pf = getenv("CMF_TP_PREFETCH_MB");
    t->prefetch_bytes = pf && atof(pf) > 0 ? (size_t)(atof(pf) * 1048576.0) : 0;
    cmf_status st = CMF_OK;
    for (int i = 0; i < n && st == CMF_OK && t->prefetch_bytes; i++) {
        cudaError_t e = cudaSetDevice(devs[i]);
        if (e == cudaSuccess) e = cudaStreamCreateWithFlags(&t->rs[i].side, cudaStreamNonBlocking);
        if (e == cudaSuccess) e = cudaEventCreateWithFlags(&t->rs[i].fork, cudaEventDisableTiming);
        if (e == cudaSuccess) e = cudaEventCreateWithFlags(&t->rs[i].join, cudaEventDisableTiming);
        if (e != cudaSuccess)
            st = cmf_err(CMF_E_IO, "tp: prefetch stream on cuda:%d: %s", devs[i], cudaGetErrorString(e));
    }
    /* the decode sizes: one token's hidden state, and a batch of 8 (the largest step the backend captures) */
    if (st == CMF_OK && warm_count) st = warm_up(t->comm, n, devs, warm_count);
    if (st == CMF_OK && warm_count) st = warm_up(t->comm, n, devs, 8 * warm_count);
    if (st != CMF_OK) {
        cmf_tp_nccl_free(t, n);
        return st;
    }
    *out = t;
    return CMF_OK;
}

extern "C" void cmf_tp_nccl_free(void *comms, int n) {
    tp_nccl *t = (tp_nccl *)comms;
    for (int i = 0; t && i < n; i++) {
        if (t->comm[i]) ncclCommDestroy(t->comm[i]);
        if (t->rs[i].side) cudaStreamDestroy(t->rs[i].side);
        if (t->rs[i].fork) cudaEventDestroy(t->rs[i].fork);
        if (t->rs[i].join) cudaEventDestroy(t->rs[i].join);
    }
    free(t);
}

/* The prefetch around all-reduce number k of the forward (block comment): joins the previous fork into `stream`,
 * then, unless this is the forward's last all-reduce, forks the side stream at this point of `stream` and queues
 * the prefetch of the next products' weights there. */
static cmf_status prefetch_next(tp_nccl *t, cmf_backend *be, cmf_batch *b, int k, cudaStream_t stream) {
    rank_side *rs = &t->rs[b->m->tp_rank];
    const cmf_model *m = b->m;
    if (k == 0) rs->pending = 0; /* a new forward (an earlier one may have failed half-way) */
    cudaError_t e = cudaSuccess;
    if (rs->pending) {
        e = cudaStreamWaitEvent(stream, rs->join, 0);
        rs->pending = 0;
        if (e != cudaSuccess) return cmf_err(CMF_E_IO, "tp: joining the prefetch stream: %s", cudaGetErrorString(e));
    }
    const int layer = k / 2, L = m->cfg.n_layers;
    if (layer >= L || (k % 2 && layer + 1 >= L)) return CMF_OK; /* nothing follows in the layers */
    const cmf_layer *ly = &m->base.layers[k % 2 ? layer + 1 : layer];
    const cmf_weight *w[3] = {&ly->wq, &ly->wk, &ly->wv};
    int nw = 3;
    if (k % 2 == 0) w[0] = &ly->w_gate, w[1] = &ly->w_up, nw = 2; /* after o_proj: the MLP's gate/up */
    pf_ranges pr = {};
    size_t left = t->prefetch_bytes;
    for (int i = 0; i < nw; i++) {
        const void *d = NULL;
        size_t bytes = 0;
        cmf_status st = cmf_backend_cuda_weight(be, w[i], &d, &bytes);
        if (st != CMF_OK) return st;
        const size_t share = left / (size_t)(nw - i); /* gate/up: the first rows of both, as the fused GLU reads */
        pr.p[i] = (const char *)d;
        pr.n[i] = bytes < share ? bytes : share;
        left -= pr.n[i];
    }
    e = cudaEventRecord(rs->fork, stream);
    if (e == cudaSuccess) e = cudaStreamWaitEvent(rs->side, rs->fork, 0);
    if (e == cudaSuccess) {
        k_prefetch_l2<<<132, 256, 0, rs->side>>>(pr);
        e = cudaGetLastError();
    }
    if (e == cudaSuccess) e = cudaEventRecord(rs->join, rs->side);
    if (e != cudaSuccess) return cmf_err(CMF_E_IO, "tp: the weight prefetch: %s", cudaGetErrorString(e));
    rs->pending = 1;
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
    tp_nccl *t = (tp_nccl *)tp->nccl;
    ncclComm_t c = t->comm[r];
    const int k = tp->ar_index[r]++; /* this rank's all-reduce number k of the forward: after layer k/2's o_proj
                                      * (k even) or down_proj (k odd) */
    /* The backend defers small products to fuse them with the next op (backend_cuda.cu "fusion"); any other op
     * first queues what is pending, so a zero-byte zero() puts the o_proj / down_proj product that wrote buf on
     * the stream (or into the capture) before the collective. */
    cmf_status fst = be->zero(be, buf, 0);
    if (fst == CMF_OK && t->prefetch_bytes && !tp->profile && count <= 8 * (int64_t)b->m->cfg.hidden_size) fst = prefetch_next(t, be, b, k, stream);
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
    ncclResult_t res = ncclAllReduce(buf, buf, (size_t)count, ncclFloat, ncclSum, c, stream);
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
    if (res != ncclSuccess)
        return cmf_err(CMF_E_IO, "tp rank %d (cuda:%d): ncclAllReduce of %lld floats: %s", r, dev, (long long)count,
                       ncclGetErrorString(res));
    return CMF_OK;
}

extern "C" int cmf_tp_cuda_get_device(void) {
    int dev = 0;
    return cudaGetDevice(&dev) == cudaSuccess ? dev : 0;
}

extern "C" cmf_status cmf_tp_cuda_set_device(int dev) {
    cudaError_t e = cudaSetDevice(dev);
    return e == cudaSuccess ? CMF_OK : cmf_err(CMF_E_IO, "tp: cudaSetDevice(%d): %s", dev, cudaGetErrorString(e));
}
#endif
