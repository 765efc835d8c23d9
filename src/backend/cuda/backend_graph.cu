/* backend_graph.cu — decode-step CUDA graphs of the cuda backend (backend_cuda.cu has the ops): the choice between
 * replay, capture and eager launches, made before any kernel of a forward is queued, the LRU cache of instantiated
 * graphs, and the C entry points for graph statistics, switching graphs off and tensor parallelism. */
#include "backend/cuda/backend_cuda.cuh"

namespace cmf_cuda_be {

/* ---- CUDA graphs -----------------------------------------------------------------------------------------------
 * A decode step (n <= 8 tokens, each its session's only token of the batch) is one CUDA graph from the embedding to
 * the last layer's residual; the final norm, the head and the logits download run eagerly after it. Every op of
 * the step reads positions and token ids from d_step (one H2D copy per forward, from pinned memory, before the
 * graph), so the same graph replays at every position. How a forward finds out whether it is such a step without
 * a change to the backend interface: when n <= 8, embed() queues nothing and holds its launch back (G_WAIT), and so
 * do the ops up to the first kv_write (the first RMSNorm, the q/k/v products, which are pending for fusion anyway,
 * and qk_rope). That kv_write sees the sessions and decides before any kernel of the forward is queued:
 *   - not a decode step (a session has several tokens): the held ops run eagerly (G_EAGER);
 *   - a cached graph has the same key: the held ops are dropped and every op until the final norm returns at once
 *     (G_REPLAY); the cached graph is launched there, so a replayed step costs the host one graph launch;
 *   - else a capture begins, the held ops are issued into it and the rest follows (G_CAPTURE); at the final norm
 *     it is instantiated, cached, and launched.
 * Any other op seen while waiting (a forward not shaped like forward.c's) runs the held ops eagerly first.
 * Tensor parallelism (tp_nccl.cu): a rank's allreduce comes after the first kv_write, so it is queued on I->stream
 * inside the capture (ncclAllReduce is capturable; its communicator is fixed per rank backend and its buffers are
 * the batch's, which the key covers) and skipped on replay (cmf_backend_cuda_replaying).
 * The key is everything baked into the launches: the batch's buffers, n, the weight set (and a generation bumped
 * when weights are loaded), and each token's session with its KV cache pointers, n_ctx and layer offsets.
 * Invalidation: load_weights and reallocation of shared scratch clear the cache, kv_free drops the graphs that
 * use the session's cache. Graph and eager paths launch the same kernels with the same arguments, so the logits
 * are bit for bit the same (tests/gpu checks this with CMF_CUDA_GRAPH=0). */

void graphs_clear(cuda_impl *I) {
    for (graph_entry &g : I->graphs) cudaGraphExecDestroy(g.exec);
    I->graphs.clear();
}

/* Ends a capture in progress and drops what was captured. */
void capture_abort(cuda_impl *I) {
    cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing(I->stream, &cs) == cudaSuccess && cs != cudaStreamCaptureStatusNone) {
        cudaGraph_t g = NULL;
        cudaStreamEndCapture(I->stream, &g);
        if (g) cudaGraphDestroy(g);
    }
    cudaGetLastError(); /* a failed capture leaves a sticky launch error of its own */
    I->mode = G_EAGER;
}

/* Ends the capture and instantiates it into *exec. */
cmf_status capture_end(cuda_impl *I, cudaGraphExec_t *exec) {
    cudaGraph_t g = NULL;
    cudaError_t e = cudaStreamEndCapture(I->stream, &g);
    I->mode = G_EAGER;
    if (e != cudaSuccess) {
        if (g) cudaGraphDestroy(g);
        return cu_fail(e, "end of a decode-step graph capture");
    }
    e = cudaGraphInstantiate(exec, g, 0);
    cudaGraphDestroy(g);
    return e == cudaSuccess ? CMF_OK : cu_fail(e, "instantiating a decode-step graph");
}

/* Brings the forward back to eager mode: runs what the graph machinery holds (see above). */
cmf_status graph_flush(cuda_impl *I) {
    cmf_status st = CMF_OK;
    cudaGraphExec_t ex = NULL;
    switch (I->mode) {
    case G_CAPTURE:
        st = capture_end(I, &ex);
        if (st != CMF_OK) return st;
        if (I->graphs.size() >= GRAPH_CACHE) { /* evict the least recently used */
            size_t lru = 0;
            for (size_t i = 1; i < I->graphs.size(); i++)
                if (I->graphs[i].used < I->graphs[lru].used) lru = i;
            cudaGraphExecDestroy(I->graphs[lru].exec);
            I->graphs.erase(I->graphs.begin() + (ptrdiff_t)lru);
        }
        I->graphs.push_back(graph_entry{I->cur_key, ex, ++I->stamp});
        I->n_captured++;
        CU_TRY(cudaGraphLaunch(ex, I->stream), "launching a decode-step graph");
        return CMF_OK;
    case G_PERSIST: /* the layers were launched at the first kv_write (persist.cu) */
        I->mode = G_EAGER;
        return CMF_OK;
    case G_REPLAY:
        I->mode = G_EAGER;
        I->n_replayed++;
        CU_TRY(cudaGraphLaunch(I->cur_exec, I->stream), "replaying a decode-step graph");
        return CMF_OK;
    default: return CMF_OK;
    }
}

/* ---- ops held back while the graph mode is unknown (G_WAIT; block comment "CUDA graphs") ---------------------- */

/* Issues the held embedding and first RMSNorm on the stream (into a capture when one has begun). */
cmf_status held_issue(cuda_impl *I) {
    cmf_status st = cmf_cuda_embed(&I->pe.w, D_TOK(I), I->pe.n, I->pe.mult, I->pe.x, I->stream);
    if (st != CMF_OK) return cmf_err_prefix(st, "embed: ");
    if (I->has_pn) {
        I->has_pn = 0;
        st = cmf_cuda_rmsnorm(I->pn.out, I->pn.x, I->pn.w, I->pn.rows, I->pn.d, I->pn.eps, I->pn.gemma, I->stream);
    }
    return st;
}

/* Leaves G_WAIT for eager launches: the held ops run now (the pending products stay pending). */
cmf_status wait_resolve(cuda_impl *I) {
    if (I->mode != G_WAIT) return CMF_OK;
    I->mode = G_EAGER;
    return held_issue(I);
}

/* The graph key of this forward (see the block comment on CUDA graphs). */
void graph_key(cuda_impl *I, cmf_batch *b, cmf_session *const *seqs, int n, std::vector<uintptr_t> &key) {
    const cmf_session *s0 = seqs[0];
    key.clear();
    uintptr_t head[] = {(uintptr_t)b,      (uintptr_t)n,      (uintptr_t)s0->w,   (uintptr_t)I->weight_gen,
                        (uintptr_t)b->x,   (uintptr_t)b->xb,  (uintptr_t)b->q,    (uintptr_t)b->k,
                        (uintptr_t)b->v,   (uintptr_t)b->att, (uintptr_t)b->hb,   (uintptr_t)b->hb2};
    key.assign(head, head + sizeof head / sizeof *head);
    for (int t = 0; t < n; t++) {
        const cmf_session *s = seqs[t];
        uint64_t h = 1469598103934665603ull; /* FNV-1a over the layer offsets */
        for (int l = 0; l < b->m->cfg.n_layers; l++) h = (h ^ (uint64_t)s->kv_off[l]) * 1099511628211ull;
        uintptr_t tk[] = {(uintptr_t)s, (uintptr_t)s->dk, (uintptr_t)s->dv, (uintptr_t)s->n_ctx, (uintptr_t)h};
        key.insert(key.end(), tk, tk + sizeof tk / sizeof *tk);
    }
}

/* At the first kv_write of a forward in G_WAIT, before any of its kernels is queued: replay, capture or eager
 * (block comment "CUDA graphs"). */
cmf_status graph_decide(cuda_impl *I, cmf_batch *b, cmf_session *const *seqs, int n) {
    I->cur_w = seqs[0]->w;
    bool step = I->cur_w->final_norm != NULL; /* the end of the layers is found by the final norm */
    for (int t = 0; step && t < n; t++)
        for (int u = t + 1; u < n; u++) step = step && seqs[u] != seqs[t]; /* one token per session */
    if (!step) return wait_resolve(I);
    graph_key(I, b, seqs, n, I->cur_key);
    for (graph_entry &g : I->graphs)
        if (g.key == I->cur_key) { /* the held ops are inside the cached graph */
            g.used = ++I->stamp;
            I->cur_exec = g.exec;
            I->mode = G_REPLAY;
            I->has_pn = 0;
            return CMF_OK;
        }
    cudaError_t e = cudaStreamBeginCapture(I->stream, cudaStreamCaptureModeRelaxed);
    if (e != cudaSuccess) { /* no graph this time */
        cudaGetLastError();
        return wait_resolve(I);
    }
    I->mode = G_CAPTURE;
    return held_issue(I);
}

} // namespace cmf_cuda_be

using namespace cmf_cuda_be;

extern "C" void cmf_backend_cuda_graph_stats(cmf_backend *be, uint64_t *captured, uint64_t *replayed) {
    cuda_impl *I = be && be->kind == CMF_BACKEND_CUDA ? IMPL(be) : NULL;
    if (captured) *captured = I ? I->n_captured : 0;
    if (replayed) *replayed = I ? I->n_replayed : 0;
}

extern "C" void cmf_backend_cuda_set_graphs(cmf_backend *be, int on) {
    if (!be || be->kind != CMF_BACKEND_CUDA) return;
    cuda_impl *I = IMPL(be);
    pthread_mutex_lock(&I->mu);
    I->graphs_on = on != 0;
    if (!on) graphs_clear(I);
    pthread_mutex_unlock(&I->mu);
}

/* For tensor parallelism (tp_nccl.cu): 1 while the current forward replays a cached decode-step graph (every op
 * until the final norm is already in it, the rank's collectives included: queue nothing), else 0 (eager, or
 * capturing: a collective queued on the stream now is recorded into the graph). */
extern "C" int cmf_backend_cuda_replaying(cmf_backend *be) { return IMPL(be)->mode == G_REPLAY; }
