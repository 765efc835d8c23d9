/* tp_nccl.cu — the NCCL side of tensor parallelism over CUDA devices (src/tp/tp.h): one communicator per device
 * (ncclCommInitAll: one process drives all ranks, one thread per rank), and the backend.h allreduce of a cuda rank
 * as ncclAllReduce(sum, f32, in place) queued on the rank backend's stream, so it is ordered after the o_proj /
 * down_proj product that wrote the buffer and before the residual that reads it, with no host synchronisation.
 * Built only with CMF_HAVE_NCCL (CMake option CMF_NCCL); NVLink SHARP (NVLS) is left to the environment
 * (NCCL_NVLS_ENABLE=0 on machines without multicast). */
#ifdef CMF_HAVE_NCCL
#include <stdlib.h>

#include <cuda_runtime.h>
#include <nccl.h>

extern "C" {
#include "tp/tp.h"
#include "util/error.h"
void cmf_backend_cuda_stream(cmf_backend *be, void **stream, int *dev); /* backend_cuda.cu */
}

extern "C" cmf_status cmf_tp_nccl_init(int n, const int *devs, void **out) {
    *out = NULL;
    ncclComm_t *c = (ncclComm_t *)calloc((size_t)n, sizeof *c);
    if (!c) return cmf_err(CMF_E_NOMEM, "tp: out of memory");
    ncclResult_t r = ncclCommInitAll(c, n, devs);
    if (r != ncclSuccess) {
        free(c);
        return cmf_err(CMF_E_IO, "tp: ncclCommInitAll over %d devices (from cuda:%d): %s", n, devs[0],
                       ncclGetErrorString(r));
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

extern "C" cmf_status cmf_tp_nccl_allreduce(cmf_backend *be, cmf_batch *b, float *buf, int64_t count) {
    cmf_tp *tp = b->m->tp_of;
    const int r = b->m->tp_rank;
    void *sp = NULL;
    int dev = 0;
    cmf_backend_cuda_stream(be, &sp, &dev);
    cudaStream_t stream = (cudaStream_t)sp;
    ncclComm_t c = ((ncclComm_t *)tp->nccl)[r];
    /* The backend defers small products to fuse them with the next op (backend_cuda.cu "fusion"); any other op
     * first queues what is pending, so a zero-byte zero() puts the o_proj / down_proj product that wrote buf on
     * the stream before the collective. */
    cmf_status fst = be->zero(be, buf, 0);
    if (fst != CMF_OK) return fst;
    /* CMF_TP_PROFILE (benchmarks): the collective alone, timed on rank 0 with events after every rank's stream
     * drained and the ranks met at the host barrier; this serialises the forward, so tok/s comes from runs without */
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
