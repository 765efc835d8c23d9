/* backend_cuda.cuh — internal to the cuda backend (backend_cuda.cu: residency, fusion, the ops; backend_graph.cu:
 * decode-step CUDA graphs and the ops held back until the graph mode is known): the backend's state and the
 * functions the two files share. Not part of any API. */
#ifndef CMF_BACKEND_CUDA_BACKEND_CUDA_CUH
#define CMF_BACKEND_CUDA_BACKEND_CUDA_CUH

#include <pthread.h>

#include <unordered_map>
#include <vector>

#include "backend/cuda/common.cuh"

extern "C" {
#include "backend/backend.h"
#include "model/model.h"
}

namespace cmf_cuda_be {

struct arena {
    const float *host;
    size_t n;
    float *dev;
};

/* A captured decode step (from the embedding to the last layer's residual) and what it was captured for. */
struct graph_entry {
    std::vector<uintptr_t> key;
    cudaGraphExec_t exec;
    uint64_t used; /* LRU stamp */
};

/* Where the current forward stands with respect to CUDA graphs (see the block comment above cu_begin). */
enum graph_mode { G_EAGER = 0, G_WAIT, G_CAPTURE, G_REPLAY, G_PERSIST /* the layers run in persist.cu's kernel */ };

enum { GRAPH_CACHE = 16, GRAPH_MAX_TOK = 8, LOGITS_PINNED_ROWS = 8 };

struct persist_state; /* persist.cu */

struct cuda_impl {
    const cmf_model *m;
    int dev;
    cudaStream_t stream;
    cmf_cuda_ctx *ctx;
    pthread_mutex_t mu;
    std::unordered_map<const void *, void *> payloads; /* host payload start -> device copy */
    std::vector<arena> arenas;                         /* f32 vectors: small-tensor arenas, RoPE frequencies */
    int32_t *d_step; /* [2][step_cap]: positions, then token ids of the current forward */
    int32_t *h_step; /* pinned host staging of d_step (one H2D copy per forward) */
    int step_cap;
    int n_cur;       /* tokens of the current forward */
    /* CUDA graphs of decode steps */
    int graphs_on;                    /* CMF_CUDA_GRAPH=0 turns them off */
    int fuse_norm;                    /* CMF_CUDA_FUSE_NORM=1 turns on product + add + norm fusion */
    int fuse_pre;                     /* residual add in the o / down product's epilogue, RMSNorm in the next
                                         products' prologue (int8-activation products; CMF_CUDA_FUSE_PRE=0: off) */
    int *d_cnt;                       /* zeroed counter of cmf_cuda_matvec_add_rmsnorm */
    int f16_cache;                    /* prefill GEMMs of quantized weights read an f16 copy made once (f16w): 2 under
                                         f16_copy's memory rule (default), 1 whenever it fits (CMF_CUDA_F16_CACHE=1),
                                         0 never (=0) */
    std::unordered_map<const void *, void *> f16w; /* device payload (view start) -> its f16 [rows][cols] copy */
    int kv_type;                      /* enum cmf_cuda_kv of the sessions' caches: the model's cache_type
                                         (cmf_model_params, include/cmf.h) */
    int exact_prefill;                /* CMF_CUDA_EXACT_PREFILL=1: prefill products by the f32 matvec, 8 rows at a
                                         time, instead of the f16 GEMM (a precision experiment, slow) */
    int mode;                         /* enum graph_mode */
    const cmf_weights *cur_w;         /* weight set of the current forward (known from the first kv_write) */
    std::vector<uintptr_t> cur_key;   /* key being captured */
    cudaGraphExec_t cur_exec;         /* graph being replayed */
    std::vector<graph_entry> graphs;  /* LRU cache */
    uint64_t stamp, weight_gen;
    uint64_t n_captured, n_replayed;  /* counters for tests and benchmarks */
    int persist;                      /* CMF_CUDA_PERSIST=1: one-token steps through persist.cu's kernel */
    persist_state *ps;                /* its state (NULL until first used) */
    /* deferred ops of the decode step, fused with the op that follows when it fits (block comment "fusion") */
    struct {
        const cmf_weight *w;
        float *out;
        const float *bias;
    } pm[3];                          /* pending products of one activation block (n <= 8) */
    int n_pm, pm_n;
    const float *pm_x;
    float *pm_rx;                     /* the pending product (one) also adds its output to these rows (fuse_pre) */
    struct {
        const float *x;
        float *out;
        const float *w;
        int rows, d, gemma;
        float eps;
    } nf;                             /* a pending RMSNorm out = norm(x), for the prologue of the products of out */
    int has_nf;
    int fuse_attn;                    /* the decode token's q/k norm + RoPE + cache write in the attention launch
                                         (cmf_cuda_attn_decode_rope; default, CMF_CUDA_FUSE_ATTN=0 turns it off) */
    struct {
        const cmf_layer *L;           /* pending (kv_write -> attention) when not NULL */
        cmf_batch *b;
        int layer, n;
        const cmf_session *s[GRAPH_MAX_TOK];
    } fa;
    float *pa_x, *pa_o;               /* pending residual add x += o (pa_x != NULL) */
    int pa_rows, pa_d;
    const cmf_layer *pr_L;            /* pending q/k norm + RoPE (pr_L != NULL) */
    cmf_batch *pr_b;
    int pr_layer, pr_n;
    /* ops held back while the graph mode is not known yet (G_WAIT): the embedding and the first RMSNorm */
    struct {
        cmf_cuda_weight w;
        float *x;
        int n;
        float mult;
    } pe;
    struct {
        float *out;
        const float *x, *w;
        int rows, d, gemma;
        float eps;
    } pn;
    int has_pn;
    void *d_work; /* flash-decoding scratch */
    size_t work_bytes;
    void *d_i8q; /* CMF_CUDA_I8Q_BYTES: wide products' activations quantized once (cmf_cuda_mv_ex.d_i8q); NULL: none */
    float *d_logits; /* head output [rows][V] */
    size_t logits_cap;
    float *h_logits; /* pinned host staging of d_logits for up to LOGITS_PINNED_ROWS rows */
    size_t h_logits_cap;
    /* sampling on the device (backend_sample.cu): sample.cu's scratch (zeroed once), a penalized copy of a row,
     * pinned staging of the answer */
    void *d_samp;
    int64_t samp_n;
    float *d_samp_row;
    uint64_t *h_samp;
    /* L2 prefetch plan of the decode products (CMF_CUDA_L2PF; block comment "L2 prefetch" in backend_cuda.cu) */
    struct pf_item {
        const uint8_t *d; /* device payload */
        uint64_t bytes;   /* its size */
        uint64_t voff;    /* offset in the forward's weight order (sum of the earlier items' bytes) */
        int set;          /* which load_weights call listed it */
    };
    std::vector<pf_item> pf_order;                   /* matrices in forward order, per weight set */
    std::unordered_map<const void *, size_t> pf_pos; /* device payload -> its first index in pf_order */
    int pf_sets;
};

inline cuda_impl *IMPL(cmf_backend *be) { return (cuda_impl *)be->impl; }

inline const int32_t *D_POS(cuda_impl *I) { return I->d_step; }
/* The layers' ops queue nothing: a replayed graph or the persistent kernel holds them. */
inline bool skip_ops(cuda_impl *I) { return I->mode == G_REPLAY || I->mode == G_PERSIST; }
inline const int32_t *D_TOK(cuda_impl *I) { return I->d_step + I->step_cap; }

/* ---- backend_cuda.cu (residency) ---- */
const float *dev_vec(cuda_impl *I, const float *h); /* device copy of a resident host f32 vector, or NULL */
cmf_status dev_weight(cuda_impl *I, const cmf_weight *w, cmf_cuda_weight *out, int upload); /* its device view */
int elem_bytes(int dtype);                           /* 4 / 2 for f32 / f16 / bf16, else 0 */

/* ---- backend_fuse.cu (block comment "fusion" there) ---- */
cmf_status mm_now(cuda_impl *I, float *out, const float *x, int n, const cmf_weight *w, const float *bias);
void pf_list(cuda_impl *I, const cmf_weight *w);     /* appends w to the L2 prefetch order (CMF_CUDA_L2PF) */
void pf_hint(cuda_impl *I, const cmf_weight *first, const cmf_weight *last);
uint64_t attn_pf_bytes(void);                        /* CMF_CUDA_ATTN_L2PF in bytes (0: off) */
void pf_hint_attn(cuda_impl *I, const cmf_weight *next); /* the attention launch's spans: attn_pf_bytes from next */
cmf_status flush_norm(cuda_impl *I);                 /* the pending RMSNorm alone */
bool nf_fits(cuda_impl *I, const cmf_cuda_weight *cw, int k, const float *x, int n);
cmf_status flush_mm(cuda_impl *I);                   /* pending products (with the pending norm / residual) */
cmf_status flush_add(cuda_impl *I);                  /* the pending residual add */
void *kv_at(cuda_impl *I, void *cache, size_t off);  /* element off of a K or V cache */
cmf_status rope_now(cuda_impl *I, cmf_batch *b, const cmf_layer *L, int layer, int t0, int r, const cmf_session *s);
cmf_status flush_rope(cuda_impl *I);
cmf_status flush_pending(cuda_impl *I);              /* everything pending, in the forward's order */
cmf_status flush_fa(cuda_impl *I);                   /* a kv_write held for the attention: norm + RoPE + cache now */
cmf_status rope_args(cuda_impl *I, cmf_batch *b, const cmf_layer *L, int layer, cmf_cuda_qk_rope *r);
void drop_pending(cuda_impl *I);

/* ---- backend_cuda.cu (ops) ---- */
/* The head's product (+ softcap) of `rows` rows into device memory out [rows][V], queued, nothing downloaded. */
cmf_status head_compute(cuda_impl *I, float *out, const float *xn, int rows, const cmf_weight *lm_head, float softcap);

/* ---- backend_sample.cu (the backend table's head_keep, sample, fetch) ---- */
cmf_status cu_head_keep(cmf_backend *be, cmf_batch *b, float *const *out, const float *xn, int rows,
                        const cmf_weight *lm_head, float softcap);
cmf_status cu_sample(cmf_backend *be, const float *logits, int n, cmf_dev_sample *req);
cmf_status cu_fetch(cmf_backend *be, void *dst, const void *src, size_t bytes);
void sample_free(cuda_impl *I); /* the scratch above (cu_destroy) */

/* ---- backend_graph.cu (block comment "CUDA graphs" there) ---- */
void graphs_clear(cuda_impl *I);                /* drops every cached graph */
void capture_abort(cuda_impl *I);               /* ends a capture in progress, drops it */
cmf_status graph_flush(cuda_impl *I);           /* G_CAPTURE / G_REPLAY: launches the step's graph, back to eager */
cmf_status graph_decide(cuda_impl *I, cmf_batch *b, cmf_session *const *seqs, int n); /* at the first kv_write */
cmf_status held_issue(cuda_impl *I);            /* queues the held embedding and first RMSNorm */
cmf_status wait_resolve(cuda_impl *I);          /* G_WAIT -> eager: the held ops run now */

/* ---- persist.cu (file comment there) ---- */
int persist_env(void); /* CMF_CUDA_PERSIST=1 */
cmf_status persist_try(cuda_impl *I, cmf_backend *be, cmf_batch *b, cmf_session *const *seqs, int n, bool *launched);
void persist_free(cuda_impl *I);

} // namespace cmf_cuda_be

#endif
