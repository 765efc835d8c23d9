/* tprof.cu — the host side of the decode kernels' timeline (tprof.cuh; cuda_ops.h cmf_cuda_tprof_*): one device ring
 * of records shared by the instrumented translation units, each bound through its own g_tp. */
#include "backend/cuda/common.cuh"
#include "backend/cuda/tprof.cuh"

extern "C" int tprof_bind_i8s(const void *b);
extern "C" int tprof_bind_i8(const void *b);
extern "C" int tprof_bind_attn_g1(const void *b); /* attn_decode_g{1,2,4,8}.cu */
extern "C" int tprof_bind_attn_g2(const void *b);
extern "C" int tprof_bind_attn_g4(const void *b);
extern "C" int tprof_bind_attn_g8(const void *b);

#define TP_CAP (1u << 20)

static TpBuf g_host = {nullptr, nullptr, TP_CAP - 1};

extern "C" cmf_status cmf_cuda_tprof_start(void) {
    if (!CMF_CUDA_TPROF) return cmf_err(CMF_E_UNSUPPORTED, "cuda timeline: this build lacks -DCMF_CUDA_TPROF=1");
    if (!g_host.rec) {
        if (cudaMalloc(&g_host.rec, sizeof(cmf_cuda_tprec) * TP_CAP) != cudaSuccess ||
            cudaMalloc(&g_host.n, sizeof(unsigned)) != cudaSuccess) {
            cudaFree(g_host.rec);
            g_host.rec = nullptr;
            cudaGetLastError();
            return cmf_err(CMF_E_NOMEM, "cuda timeline: no device memory for %u records", TP_CAP);
        }
    }
    CU_TRY(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    CU_TRY(cudaMemset(g_host.n, 0, sizeof(unsigned)), "cudaMemset");
    if (!tprof_bind_i8s(&g_host) || !tprof_bind_i8(&g_host) || !tprof_bind_attn_g1(&g_host) ||
        !tprof_bind_attn_g2(&g_host) || !tprof_bind_attn_g4(&g_host) || !tprof_bind_attn_g8(&g_host))
        return cmf_err(CMF_E_IO, "cuda timeline: cudaMemcpyToSymbol failed");
    return CMF_OK;
}

extern "C" int64_t cmf_cuda_tprof_read(cmf_cuda_tprec *dst, int64_t cap) {
    unsigned n = 0;
    if (!g_host.rec || cudaDeviceSynchronize() != cudaSuccess ||
        cudaMemcpy(&n, g_host.n, sizeof n, cudaMemcpyDeviceToHost) != cudaSuccess)
        return -1;
    int64_t k = n < TP_CAP ? n : TP_CAP;
    if (k > cap) k = cap;
    if (k > 0 && cudaMemcpy(dst, g_host.rec, sizeof(cmf_cuda_tprec) * (size_t)k, cudaMemcpyDeviceToHost) != cudaSuccess)
        return -1;
    return n;
}
