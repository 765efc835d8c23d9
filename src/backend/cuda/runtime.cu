/* runtime.cu — devices, memory, streams and the weight check of the CUDA kernel library (cuda_ops.h). */
#include <stdio.h>

#include <stdlib.h>

#include "backend/cuda/common.cuh"

extern "C" int cmf_cuda_pdl_on(void) {
    static int on = -1; /* a benign race: every thread computes the same value */
    if (on < 0) {
        const char *e = getenv("CMF_CUDA_PDL");
        on = !(e && e[0] == '0');
    }
    return on;
}

extern "C" cmf_status cmf_cuda_device_count(int *n) {
    if (!n) return cmf_err(CMF_E_ARG, "cuda_device_count: n is NULL");
    int c = 0;
    cudaError_t e = cudaGetDeviceCount(&c);
    if (e != cudaSuccess) {
        *n = 0;
        cudaGetLastError(); /* clear the sticky-free error so later calls start clean */
        if (e == cudaErrorInsufficientDriver || e == cudaErrorNoDevice)
            cmf_err(CMF_E_IO, "cuda: no device: no NVIDIA GPU with a driver was found, or its driver is older than the "
                              "CUDA runtime (%s)", cudaGetErrorString(e));
        else
            cmf_err(CMF_E_IO, "cuda: no device: %s", cudaGetErrorString(e));
        return CMF_OK;
    }
    *n = c;
    if (c == 0) cmf_err(CMF_E_IO, "cuda: no device: cudaGetDeviceCount returned 0");
    return CMF_OK;
}

extern "C" cmf_status cmf_cuda_device_info(int dev, char *buf, size_t len) {
    cudaDeviceProp p;
    CU_TRY(cudaGetDeviceProperties(&p, dev), "cudaGetDeviceProperties");
    if (buf && len)
        snprintf(buf, len, "%s, cc %d.%d, %d SMs, %.1f GiB, L2 %d MiB", p.name, p.major, p.minor,
                 p.multiProcessorCount, (double)p.totalGlobalMem / (1024.0 * 1024.0 * 1024.0),
                 p.l2CacheSize / (1024 * 1024));
    return CMF_OK;
}

extern "C" cmf_status cmf_cuda_malloc(void **d_ptr, size_t bytes) {
    if (!d_ptr) return cmf_err(CMF_E_ARG, "cuda_malloc: d_ptr is NULL");
    *d_ptr = NULL;
    cudaError_t e = cudaMalloc(d_ptr, bytes ? bytes : 1);
    if (e != cudaSuccess) {
        *d_ptr = NULL;
        return cmf_err(CMF_E_NOMEM, "cuda: cudaMalloc(%zu bytes): %s", bytes, cudaGetErrorString(e));
    }
    return CMF_OK;
}

extern "C" void cmf_cuda_free(void *d_ptr) {
    if (d_ptr) cudaFree(d_ptr);
}

extern "C" cmf_status cmf_cuda_upload(void *d_dst, const void *src, size_t bytes, cmf_cuda_stream stream) {
    CU_TRY(cudaMemcpyAsync(d_dst, src, bytes, cudaMemcpyHostToDevice, CU_STREAM(stream)), "upload");
    return CMF_OK;
}
extern "C" cmf_status cmf_cuda_download(void *dst, const void *d_src, size_t bytes, cmf_cuda_stream stream) {
    CU_TRY(cudaMemcpyAsync(dst, d_src, bytes, cudaMemcpyDeviceToHost, CU_STREAM(stream)), "download");
    return CMF_OK;
}
extern "C" cmf_status cmf_cuda_copy(void *d_dst, const void *d_src, size_t bytes, cmf_cuda_stream stream) {
    CU_TRY(cudaMemcpyAsync(d_dst, d_src, bytes, cudaMemcpyDeviceToDevice, CU_STREAM(stream)), "copy");
    return CMF_OK;
}
extern "C" cmf_status cmf_cuda_memset(void *d_dst, int v, size_t bytes, cmf_cuda_stream stream) {
    CU_TRY(cudaMemsetAsync(d_dst, v, bytes, CU_STREAM(stream)), "memset");
    return CMF_OK;
}
extern "C" cmf_status cmf_cuda_sync(cmf_cuda_stream stream) {
    CU_TRY(cudaStreamSynchronize(CU_STREAM(stream)), "stream sync");
    return CMF_OK;
}
extern "C" cmf_status cmf_cuda_stream_create(cmf_cuda_stream *stream) {
    if (!stream) return cmf_err(CMF_E_ARG, "cuda_stream_create: stream is NULL");
    cudaStream_t s;
    CU_TRY(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");
    *stream = (cmf_cuda_stream)s;
    return CMF_OK;
}
extern "C" void cmf_cuda_stream_destroy(cmf_cuda_stream stream) {
    if (stream) cudaStreamDestroy(CU_STREAM(stream));
}

extern "C" cmf_status cmf_cuda_weight_check(const cmf_cuda_weight *w) {
    if (!w || !w->d_data) return cmf_err(CMF_E_ARG, "cuda weight: NULL weight or data");
    if (w->rows <= 0 || w->cols <= 0 || w->rows > (int64_t)1 << 31 || w->cols > (int64_t)1 << 24)
        return cmf_err(CMF_E_ARG, "cuda weight: shape [%lld, %lld] out of range", (long long)w->rows,
                       (long long)w->cols);
    switch (w->dtype) {
    case CMF_DT_F32:
    case CMF_DT_F16:
    case CMF_DT_BF16:
    case CMF_DT_Q8_ROW:
    case CMF_DT_Q8_2F: return CMF_OK;
    case CMF_DT_Q4_TILED:
    case CMF_DT_Q4TP:
        if (w->cols % 32 != 0)
            return cmf_err(CMF_E_ARG, "cuda weight: %s needs cols %% 32 == 0, got [%lld, %lld]",
                           cmf_dtype_name(w->dtype), (long long)w->rows, (long long)w->cols);
        return CMF_OK;
    default: {
        const char *nm = cmf_dtype_name(w->dtype);
        return cmf_err(CMF_E_UNSUPPORTED, "cuda weight: dtype %d (%s) has no CUDA kernel", w->dtype,
                       nm ? nm : "unknown");
    }
    }
}
