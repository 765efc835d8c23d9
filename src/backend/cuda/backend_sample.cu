/* backend_sample.cu — the cuda backend's logits kept on the device and sampled there (backend.h: head_keep,
 * sample, fetch): a decode step's head leaves each row in its session's device buffer, cmf_session_sample
 * (src/model/session_sample.c) asks for the argmax or the top-k candidates (sample.cu's one-launch kernels) and
 * only those cross the bus; cmf_session_logits downloads the whole row only when someone reads it. */
#include "backend/cuda/backend_cuda.cuh"

namespace cmf_cuda_be {

cmf_status cu_head_keep(cmf_backend *be, cmf_batch *b, float *const *out, const float *xn, int rows,
                        const cmf_weight *lm_head, float softcap) {
    (void)b;
    cuda_impl *I = IMPL(be);
    cmf_status st = wait_resolve(I);
    if (st == CMF_OK) st = flush_pending(I);
    if (st == CMF_OK) st = graph_flush(I); /* normally done at the final norm already */
    if (st != CMF_OK) return st;
    if (rows == 1) return head_compute(I, out[0], xn, 1, lm_head, softcap); /* straight into the session's row */
    const size_t V = (size_t)lm_head->rows, need = (size_t)rows * V;
    if (need > I->logits_cap) /* begin() sized it for n rows of the vocabulary */
        return cmf_err(CMF_E_ARG, "cuda: head of %d rows x %zu exceeds the logits buffer", rows, V);
    if ((st = head_compute(I, I->d_logits, xn, rows, lm_head, softcap)) != CMF_OK) return st;
    for (int r = 0; r < rows; r++)
        CU_TRY(cudaMemcpyAsync(out[r], I->d_logits + (size_t)r * V, V * sizeof(float), cudaMemcpyDeviceToDevice,
                               I->stream),
               "head: logits row copy");
    return CMF_OK;
}

void sample_free(cuda_impl *I) {
    cmf_cuda_free(I->d_samp);
    cmf_cuda_free(I->d_samp_row);
    if (I->h_samp) cudaFreeHost(I->h_samp);
    I->d_samp = NULL;
    I->d_samp_row = NULL;
    I->h_samp = NULL;
    I->samp_n = 0;
}

/* The scratch for rows of n logits (caller holds I->mu). */
static cmf_status sample_scratch(cuda_impl *I, int64_t n) {
    if (I->d_samp && n <= I->samp_n) return CMF_OK;
    sample_free(I);
    const size_t wb = cmf_cuda_sample_work_bytes(n);
    cmf_status st = cmf_cuda_malloc(&I->d_samp, wb);
    if (st == CMF_OK) st = cmf_cuda_memset(I->d_samp, 0, wb, I->stream); /* the kernels' block counters */
    if (st == CMF_OK) st = cmf_cuda_malloc((void **)&I->d_samp_row, (size_t)n * sizeof(float));
    if (st == CMF_OK && cudaMallocHost((void **)&I->h_samp, CMF_DEV_SAMPLE_MAXK * sizeof(uint64_t)) != cudaSuccess) {
        cudaGetLastError();
        I->h_samp = NULL;
        st = cmf_err(CMF_E_NOMEM, "cuda: %zu bytes of pinned host memory", CMF_DEV_SAMPLE_MAXK * sizeof(uint64_t));
    }
    if (st != CMF_OK) {
        sample_free(I);
        return st;
    }
    I->samp_n = n;
    return CMF_OK;
}

/* Under the lock: penalties into a copy of the row (the session's row stays as the forward left it), the selection
 * kernel, one small download, one synchronisation. */
static cmf_status sample_locked(cuda_impl *I, const float *logits, int n, cmf_dev_sample *req) {
    cmf_status st = sample_scratch(I, n);
    if (st != CMF_OK) return st;
    const float *row = logits;
    if (req->n_pen > 0) {
        CU_TRY(cudaMemcpyAsync(I->d_samp_row, logits, (size_t)n * sizeof(float), cudaMemcpyDeviceToDevice, I->stream),
               "sample: row copy");
        st = cmf_cuda_penalize(I->d_samp_row, n, req->pen_ids, req->pen_counts, req->n_pen, req->repeat_penalty,
                               req->presence_penalty, req->frequency_penalty, I->stream);
        if (st != CMF_OK) return st;
        row = I->d_samp_row;
    }
    uint64_t *d_keys = NULL;
    const int cnt = req->k > 0 ? req->k : 1;
    st = req->k > 0 ? cmf_cuda_topk_keys(row, n, req->k, req->temperature, I->d_samp, I->stream, &d_keys)
                    : cmf_cuda_argmax_key(row, n, I->d_samp, I->stream, &d_keys);
    if (st != CMF_OK) return st;
    CU_TRY(cudaMemcpyAsync(I->h_samp, d_keys, (size_t)cnt * sizeof(uint64_t), cudaMemcpyDeviceToHost, I->stream),
           "sample: candidates download");
    CU_TRY(cudaStreamSynchronize(I->stream), "sample: sync");
    req->n_out = 0;
    for (int i = 0; i < cnt && cmf_cuda_key_valid(I->h_samp[i]); i++) { /* candidates first, in order */
        req->ids[i] = cmf_cuda_key_id(I->h_samp[i]);
        if (req->z) req->z[i] = cmf_cuda_key_value(I->h_samp[i]); /* greedy: the maximum itself */
        req->n_out = i + 1;
    }
    return CMF_OK;
}

cmf_status cu_sample(cmf_backend *be, const float *logits, int n, cmf_dev_sample *req) {
    if (!logits || !req || n < 1 || !req->ids || (req->k > 0 && !req->z))
        return cmf_err(CMF_E_ARG, "cuda sample: NULL argument or n = %d", n);
    if (req->k < 0 || req->k > CMF_DEV_SAMPLE_MAXK)
        return cmf_err(CMF_E_ARG, "cuda sample: k = %d outside 0..%d", req->k, CMF_DEV_SAMPLE_MAXK);
    if (req->k > 0 && !(req->temperature > 0.0f))
        return cmf_err(CMF_E_ARG, "cuda sample: temperature %g must be > 0 with k", (double)req->temperature);
    cuda_impl *I = IMPL(be);
    pthread_mutex_lock(&I->mu); /* not inside another thread's forward; one user of the scratch at a time */
    cudaSetDevice(I->dev);
    cmf_status st = sample_locked(I, logits, n, req);
    pthread_mutex_unlock(&I->mu);
    return st;
}

cmf_status cu_fetch(cmf_backend *be, void *dst, const void *src, size_t bytes) {
    cuda_impl *I = IMPL(be);
    pthread_mutex_lock(&I->mu);
    cudaSetDevice(I->dev);
    cmf_status st;
    if (bytes <= I->h_logits_cap * sizeof(float)) { /* through the head's pinned staging: direct DMA */
        st = cmf_cuda_download(I->h_logits, src, bytes, I->stream);
        if (st == CMF_OK) st = cmf_cuda_sync(I->stream);
        if (st == CMF_OK) memcpy(dst, I->h_logits, bytes);
    } else {
        st = cmf_cuda_download(dst, src, bytes, I->stream);
        if (st == CMF_OK) st = cmf_cuda_sync(I->stream);
    }
    pthread_mutex_unlock(&I->mu);
    return st;
}

} // namespace cmf_cuda_be
