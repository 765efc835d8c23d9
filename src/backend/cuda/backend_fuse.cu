/* backend_fuse.cu — the cuda backend's decode-step fusion (block comment "fusion" below) and what it launches: the
 * eager product (mm_now, with the f16 weight copies of prefill), the pending products, residual add, RMSNorm and
 * q/k norm + RoPE, the L2 prefetch plan of the products. Shares the backend state of backend_cuda.cuh with
 * backend_cuda.cu (the ops of backend.h) and backend_graph.cu (decode-step graphs). */
#include <string.h>

#include "backend/cuda/backend_cuda.cuh"

namespace cmf_cuda_be {

__global__ void k_bias(float *y, const float *bias, int64_t n, int64_t cols) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n * cols;
         i += (int64_t)gridDim.x * blockDim.x)
        y[i] += bias[i % cols];
}

/* ---- fusion ------------------------------------------------------------------------------------------------------
 * forward.c issues one op per call; the decode step fuses some of them by deferring an op until the next one shows
 * whether they combine (each fused kernel gives the bits of the separate ones, cuda_ops.h):
 *   matmul (n <= 8)  -> kept pending; products of the same input are grouped (q/k/v: one cmf_cuda_matvec_multi);
 *                       a glu of the pending gate/up outputs becomes one cmf_cuda_matvec_glu;
 *   qk_rope          -> kept pending; the kv_write that follows runs cmf_cuda_qk_norm_rope_kv (norm, RoPE and the
 *                       cache write in one launch);
 *   residual         -> kept pending (no post-norm); the rmsnorm of the same rows runs cmf_cuda_add_rmsnorm (its
 *                       output may be the added rows, the forward's xb); when the product that wrote those rows
 *                       (o_proj / down_proj) is still pending, product, add and norm can be one
 *                       cmf_cuda_matvec_add_rmsnorm: opt-in (CMF_CUDA_FUSE_NORM=1), because on the H200 it made
 *                       Qwen3-0.6B q8 decode slower (681 vs 789 tok/s at ctx 128, 22:03 UTC): the last block's
 *                       add + norm runs after every other block and a threadfence per block, longer than the
 *                       separate add+norm kernel whose launch PDL overlaps.
 * With fuse_pre (default; CMF_CUDA_FUSE_PRE=0 turns it off), when the products are int8-activation ones
 * (cmf_cuda_matvec_ex_ok): a residual (no post-norm) whose rows a pending product (o_proj / down_proj) writes becomes
 * that product's epilogue (x += y, cmf_cuda_mv_ex.d_res), and a following rmsnorm of <= 8 rows is kept pending (nf)
 * until the products of its output are launched: they normalize their input in their prologue (d_norm_x), so the
 * add+norm launch disappears (a Llama layer: 6 launches). Where the products cannot take it, the norm runs alone.
 * Any other op first runs what is pending (flush_pending), in the original order (a pending product before a
 * pending add). Per Llama layer that is 8 launches: add+norm, q/k/v, norm+RoPE+cache, attention (split + merge in
 * one), o, add+norm, gate/up+GLU, down (6 with CMF_CUDA_FUSE_NORM=1). Before 2026-11-29 evening it was 11: the
 * add+norm fusion never matched (it refused an output aliasing the added rows, which the forward uses). */

/* The f16 copy of quantized weight cw for prefill GEMMs: dequantized once with cmf_cuda_dequant (the values the
 * GEMM's row tiles would hold) and kept until the backend is destroyed; costs 2 bytes per weight of every quantized
 * matrix a prefill touches (Llama-3.1-8B: ~15 GB). Memory rule (the default, CMF_CUDA_F16_CACHE unset): a matrix
 * gets its copy only while at least half of the device's memory stays free after the allocation, so a model that
 * fills more than half of the card keeps the copy-free paths (q8: the int8 GEMM; q4: dequantized row tiles);
 * CMF_CUDA_F16_CACHE=1 copies whatever fits, =0 never. Measured on an H200 (bench/cuda/RESULTS.md, 2026-11-30):
 * pp512 Llama-8B q8 21,002 tok/s with the copies vs 13,418 through the int8 GEMM, Qwen3-0.6B q8 52,606 vs 38,600.
 * NULL when off, for float dtypes (used as stored), or when the rule or the device refuses the copy. */
const void *f16_copy(cuda_impl *I, const cmf_cuda_weight *cw) {
    if (!I->f16_cache || cw->dtype == CMF_DT_F32 || cw->dtype == CMF_DT_F16 || cw->dtype == CMF_DT_BF16) return NULL;
    auto it = I->f16w.find(cw->d_data);
    if (it != I->f16w.end()) return it->second;
    void *h = NULL;
    const size_t bytes = (size_t)cw->rows * (size_t)cw->cols * 2;
    size_t free_b = 0, total_b = 0;
    if (I->f16_cache == 2 && (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess || free_b < bytes ||
                              free_b - bytes < total_b / 2))
        return NULL;
    if (cmf_cuda_malloc(&h, bytes) != CMF_OK) return NULL;
    if (cmf_cuda_dequant(cw, 0, cw->rows, h, CMF_CUDA_F16, I->stream) != CMF_OK) {
        cmf_cuda_free(h);
        return NULL;
    }
    I->f16w[cw->d_data] = h;
    return h;
}

/* The eager product: matvec (n <= 8) or GEMM, then the bias. */
cmf_status mm_now(cuda_impl *I, float *out, const float *x, int n, const cmf_weight *w, const float *bias) {
    cmf_cuda_weight cw;
    cmf_status st = dev_weight(I, w, &cw, 0);
    if (st != CMF_OK) return st;
    const float *db = bias ? dev_vec(I, bias) : NULL;
    if (bias && !db) return cmf_err(CMF_E_ARG, "cuda: a bias is not resident");
    if (n <= 8 && cmf_cuda_matvec_multi_ok(&cw, 1, n)) return cmf_cuda_matvec_multi(&cw, 1, x, &out, &db, n, I->stream);
    /* f32 prefill products (8 tokens per matvec) when asked, and for float weights under the f32 KV cache: the
     * f16-operand GEMM is the other half of the f16 path's error (test_gpu_forward) */
    if (n > 8 && (I->exact_prefill || (I->kv_type == CMF_CUDA_KV_F32 && elem_bytes(w->dtype)))) {
        for (int t = 0; t < n && st == CMF_OK; t += 8)
            st = mm_now(I, out + (size_t)t * (size_t)w->rows, x + (size_t)t * (size_t)w->cols, n - t < 8 ? n - t : 8, w,
                        bias);
        return st;
    }
    const void *h16 = n > 8 ? f16_copy(I, &cw) : NULL;
    const cmf_cuda_weight c16 = {CMF_DT_F16, cw.rows, cw.cols, h16};
    st = n <= 8 ? cmf_cuda_matvec(&cw, x, out, n, I->stream)
                : cmf_cuda_gemm(I->ctx, h16 ? &c16 : &cw, x, out, n, CMF_CUDA_GEMM_AUTO, I->stream);
    if (st != CMF_OK || !db) return st;
    k_bias<<<grid1d((int64_t)n * w->rows, 256), 256, 0, I->stream>>>(out, db, n, w->rows);
    CU_LAUNCHED("bias");
    return CMF_OK;
}

/* ---- L2 prefetch --------------------------------------------------------------------------------------------
 * With CMF_CUDA_L2PF=<MiB> (D bytes; off by default until measured), every decode product of weights first..last
 * (consecutive in the forward's weight order: per layer q, k, v, o, gate, up, down, then lm_head, as load_weights
 * lists them) asks its kernel to prefetch into L2 the bytes of the order that lie D ahead of its own end:
 * [end + D - size, end + D) in the order's byte offsets (from end when the group is larger than D). The products
 * in sequence cover the order without gaps or repeats, each prefetching as many bytes as it reads, so the weights
 * of the next products are in L2 (or on their way) when their kernels start: DRAM works through the kernel
 * boundaries and the dependent chain reads from L2 (H200: 50 MB of L2; a Qwen3-0.6B q8 layer is ~15 MB). */
void pf_list(cuda_impl *I, const cmf_weight *w) {
    auto it = I->payloads.find(w->data);
    if (it == I->payloads.end() || I->pf_pos.count(it->second)) return;
    uint32_t shape[2] = {(uint32_t)w->full_rows, (uint32_t)w->cols};
    uint64_t nbytes = 0;
    if (cmf_dtype_nbytes(w->dtype, 2, shape, &nbytes) != 1 || !nbytes) return;
    const uint64_t voff = I->pf_order.empty() ? 0 : I->pf_order.back().voff + I->pf_order.back().bytes;
    I->pf_pos[it->second] = I->pf_order.size();
    I->pf_order.push_back({(const uint8_t *)it->second, nbytes, voff, I->pf_sets});
}

/* Sets the prefetch spans of the next product (weights first..last of the order; none when not listed). */
void pf_hint(cuda_impl *I, const cmf_weight *first, const cmf_weight *last) {
    cmf_cuda_span sp[CMF_CUDA_PF_SPANS];
    int n = 0;
    const uint64_t D = cmf_cuda_l2pf_bytes();
    auto fa = I->payloads.find(first->data), fb = I->payloads.find(last->data);
    if (D && fa != I->payloads.end() && fb != I->payloads.end()) {
        auto pa = I->pf_pos.find(fa->second), pb = I->pf_pos.find(fb->second);
        if (pa != I->pf_pos.end() && pb != I->pf_pos.end() && pb->second >= pa->second) {
            const cuda_impl::pf_item &A = I->pf_order[pa->second], &B = I->pf_order[pb->second];
            const uint64_t end = B.voff + B.bytes, size = end - A.voff;
            const uint64_t lo = size < D ? end + D - size : end, hi = end + D;
            for (size_t i = pb->second + 1; i < I->pf_order.size() && n < CMF_CUDA_PF_SPANS; i++) {
                const cuda_impl::pf_item &it = I->pf_order[i];
                if (it.set != B.set || it.voff >= hi) break;
                const uint64_t s = ((lo > it.voff ? lo - it.voff : 0) + 15) & ~(uint64_t)15;
                const uint64_t e = (hi < it.voff + it.bytes ? hi - it.voff : it.bytes) & ~(uint64_t)15;
                if (e > s) sp[n++] = {it.d + s, e - s};
            }
        }
    }
    cmf_cuda_set_l2_prefetch(sp, n);
}

/* With CMF_CUDA_ATTN_L2PF=<MiB> (off by default until measured), a single-token decode attention launch prefetches
 * into L2 the MiB of the forward's weight order that start at the layer's o_proj (o_proj first, then what follows
 * it): attention reads almost no DRAM at short contexts, so the o product (and, with more MiB, the next ones) then
 * starts from L2 instead of DRAM. Spans are issued by every attention block after its PDL wait, when the q/k/v
 * product has finished streaming (CMF_CUDA_ATTN_L2PF_AT=1: before the wait, overlapping that product's tail). */
uint64_t attn_pf_bytes(void) {
    static int mib = -1; /* read once (a benign race: every thread reads the same value) */
    if (mib < 0) {
        const char *e = getenv("CMF_CUDA_ATTN_L2PF");
        const int v = e && e[0] ? atoi(e) : 0;
        mib = v > 0 && v <= 4096 ? v : 0;
    }
    return (uint64_t)mib << 20;
}

void pf_hint_attn(cuda_impl *I, const cmf_weight *next) {
    cmf_cuda_span sp[CMF_CUDA_PF_SPANS];
    int n = 0;
    const uint64_t D = attn_pf_bytes();
    auto fa = next && D ? I->payloads.find(next->data) : I->payloads.end();
    if (fa != I->payloads.end()) {
        auto pa = I->pf_pos.find(fa->second);
        if (pa != I->pf_pos.end()) {
            const cuda_impl::pf_item &A = I->pf_order[pa->second];
            const uint64_t hi = A.voff + D;
            for (size_t i = pa->second; i < I->pf_order.size() && n < CMF_CUDA_PF_SPANS; i++) {
                const cuda_impl::pf_item &it = I->pf_order[i];
                if (it.set != A.set || it.voff >= hi) break;
                const uint64_t e = (hi < it.voff + it.bytes ? hi - it.voff : it.bytes) & ~(uint64_t)15;
                if (e) sp[n++] = {it.d, e};
            }
        }
    }
    cmf_cuda_set_l2_prefetch(sp, n);
}

/* The pending RMSNorm (nf) as its own launch. */
cmf_status flush_norm(cuda_impl *I) {
    if (!I->has_nf) return CMF_OK;
    I->has_nf = 0;
    return cmf_cuda_rmsnorm(I->nf.out, I->nf.x, I->nf.w, I->nf.rows, I->nf.d, I->nf.eps, I->nf.gemma, I->stream);
}

/* Whether the pending norm can be the prologue of products cw[0..k) of input x, n tokens. */
bool nf_fits(cuda_impl *I, const cmf_cuda_weight *cw, int k, const float *x, int n) {
    return I->has_nf && x == I->nf.out && n == I->nf.rows && cw[0].cols == I->nf.d && cmf_cuda_matvec_ex_ok(cw, k, n);
}

cmf_status flush_mm(cuda_impl *I) {
    const int k = I->n_pm;
    if (!k) return flush_norm(I);
    I->n_pm = 0;
    cmf_cuda_weight cw[3] = {};
    float *y[3] = {};
    const float *bias[3] = {};
    for (int i = 0; i < k; i++) {
        cmf_status st = dev_weight(I, I->pm[i].w, &cw[i], 0);
        if (st != CMF_OK) return st;
        y[i] = I->pm[i].out;
        bias[i] = I->pm[i].bias ? dev_vec(I, I->pm[i].bias) : NULL;
        if (I->pm[i].bias && !bias[i]) return cmf_err(CMF_E_ARG, "cuda: a bias is not resident");
    }
    float *rx = I->pm_rx;
    I->pm_rx = NULL;
    const bool norm = nf_fits(I, cw, k, I->pm_x, I->pm_n);
    if ((norm || (rx && k == 1)) && cmf_cuda_matvec_ex_ok(cw, k, I->pm_n)) { /* fuse_pre (block comment "fusion") */
        cmf_cuda_mv_ex ex = {};
        ex.d_res = k == 1 ? rx : NULL;
        ex.d_i8q = I->d_i8q;
        if (norm) {
            ex.d_norm_x = I->nf.x, ex.d_norm_w = I->nf.w, ex.eps = I->nf.eps, ex.gemma_style = I->nf.gemma;
            I->has_nf = 0;
        }
        if (ex.d_res) rx = NULL;
        pf_hint(I, I->pm[0].w, I->pm[k - 1].w);
        cmf_status st = cmf_cuda_matvec_multi_ex(cw, k, (float *)I->pm_x, y, bias, I->pm_n, &ex, I->stream);
        cmf_cuda_set_l2_prefetch(NULL, 0);
        if (st == CMF_OK && rx) st = flush_norm(I); /* (not reached: rx goes with k == 1) */
        return st;
    }
    cmf_status st = flush_norm(I); /* a norm the products cannot take runs first */
    if (st == CMF_OK && cmf_cuda_matvec_multi_ok(cw, k, I->pm_n)) {
        pf_hint(I, I->pm[0].w, I->pm[k - 1].w);
        st = cmf_cuda_matvec_multi(cw, k, I->pm_x, y, bias, I->pm_n, I->stream);
        cmf_cuda_set_l2_prefetch(NULL, 0);
    } else {
        for (int i = 0; i < k && st == CMF_OK; i++) st = mm_now(I, y[i], I->pm_x, I->pm_n, I->pm[i].w, I->pm[i].bias);
    }
    if (st == CMF_OK && rx) /* the residual add the product could not take */
        st = cmf_cuda_add(rx, rx, y[0], (int64_t)I->pm_n * cw[0].rows, I->stream);
    return st;
}

cmf_status flush_add(cuda_impl *I) {
    if (!I->pa_x) return CMF_OK;
    if (I->n_pm) { /* a product kept pending before the add (cu_residual) goes first: the add reads its output */
        cmf_status st = flush_mm(I);
        if (st != CMF_OK) return st;
    }
    float *x = I->pa_x;
    I->pa_x = NULL;
    return cmf_cuda_add(x, x, I->pa_o, (int64_t)I->pa_rows * I->pa_d, I->stream);
}

/* Element `off` of a session's K or V cache (f16 or f32 elements, I->kv_type). */
void *kv_at(cuda_impl *I, void *cache, size_t off) {
    return (char *)cache + off * (I->kv_type == CMF_CUDA_KV_F32 ? 4 : 2);
}

/* q/k norm + RoPE of the pending qk_rope; with a session, also its K/V rows into the cache (tokens t0 .. t0+r). */
/* The q/k norm + RoPE arguments of layer L (cmf_cuda_attn_decode_rope). */
cmf_status rope_args(cuda_impl *I, cmf_batch *b, const cmf_layer *L, int layer, cmf_cuda_qk_rope *r) {
    const cmf_config *c = &b->m->cfg;
    memset(r, 0, sizeof *r);
    if (L->q_norm) {
        r->d_qw = dev_vec(I, L->q_norm), r->d_kw = dev_vec(I, L->k_norm);
        if (!r->d_qw || !r->d_kw) return cmf_err(CMF_E_ARG, "cuda: q/k norm of layer %d is not resident", layer);
    }
    r->eps = c->rms_norm_eps, r->gemma_style = c->gemma_norm, r->rot_dim = c->rot_dim > 0 ? c->rot_dim : 0;
    r->d_inv_freq = c->rot_dim > 0 ? dev_vec(I, b->m->rope_inv_freq + (c->is_sliding[layer] ? c->rot_dim / 2 : 0))
                                   : NULL;
    r->pairing = c->rope_pairing == CMF_ROPE_INTERLEAVED ? CMF_CUDA_ROPE_INTERLEAVED : CMF_CUDA_ROPE_HALF;
    return CMF_OK;
}

cmf_status flush_fa(cuda_impl *I) {
    if (!I->fa.L) return CMF_OK;
    const cmf_layer *L = I->fa.L;
    I->fa.L = NULL;
    cmf_status st = CMF_OK;
    for (int t = 0; t < I->fa.n && st == CMF_OK; t++) st = rope_now(I, I->fa.b, L, I->fa.layer, t, 1, I->fa.s[t]);
    return st;
}

cmf_status rope_now(cuda_impl *I, cmf_batch *b, const cmf_layer *L, int layer, int t0, int r, const cmf_session *s) {
    const cmf_config *c = &b->m->cfg;
    const float *qn = NULL, *kn = NULL;
    if (L->q_norm) {
        qn = dev_vec(I, L->q_norm), kn = dev_vec(I, L->k_norm);
        if (!qn || !kn) return cmf_err(CMF_E_ARG, "cuda: q/k norm of layer %d is not resident", layer);
    }
    const float *f = c->rot_dim > 0 ? dev_vec(I, b->m->rope_inv_freq + (c->is_sliding[layer] ? c->rot_dim / 2 : 0))
                                    : NULL;
    const size_t QD = (size_t)c->n_heads * c->head_dim, KVD = (size_t)c->n_kv_heads * c->head_dim;
    const int pairing = c->rope_pairing == CMF_ROPE_INTERLEAVED ? CMF_CUDA_ROPE_INTERLEAVED : CMF_CUDA_ROPE_HALF;
    if (!s && !qn && c->rot_dim <= 0) return CMF_OK;
    return cmf_cuda_qk_norm_rope_kv(b->q + t0 * QD, b->k + t0 * KVD, b->v + t0 * KVD, r, c->n_heads, c->n_kv_heads,
                                    c->head_dim, qn, kn, c->rms_norm_eps, c->gemma_norm,
                                    c->rot_dim > 0 ? c->rot_dim : 0, f, D_POS(I) + t0, pairing,
                                    s ? kv_at(I, s->dk, s->kv_off[layer]) : NULL,
                                    s ? kv_at(I, s->dv, s->kv_off[layer]) : NULL, I->kv_type, I->stream);
}

cmf_status flush_rope(cuda_impl *I) {
    if (!I->pr_L) return CMF_OK;
    const cmf_layer *L = I->pr_L;
    I->pr_L = NULL;
    return rope_now(I, I->pr_b, L, I->pr_layer, 0, I->pr_n, NULL);
}

cmf_status flush_pending(cuda_impl *I) {
    cmf_status st = flush_fa(I);
    if (st == CMF_OK) st = flush_add(I);
    if (st == CMF_OK) st = flush_mm(I);
    if (st == CMF_OK) st = flush_rope(I);
    return st;
}

void drop_pending(cuda_impl *I) {
    I->n_pm = 0;
    I->pm_rx = NULL;
    I->has_nf = 0;
    I->fa.L = NULL;
    I->pa_x = NULL;
    I->pr_L = NULL;
}

} // namespace cmf_cuda_be
