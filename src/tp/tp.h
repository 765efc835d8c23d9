/* tp.h — tensor parallelism: one transformer split over N ranks (Megatron-LM, Shoeybi et al. 2019, §3).
 *
 * The split, per decoder layer (H = n_heads, KV = n_kv_heads, F = intermediate_size, V = vocab_size):
 *   column-parallel  q_proj / k_proj / v_proj (+ biases): rank r owns H/N query heads and its KV heads' rows;
 *                    gate_proj / up_proj: rank r owns F/N rows (neurons r*F/N ..);
 *   row-parallel     o_proj / down_proj: the matching input columns; each rank's product is a partial sum, and one
 *                    all-reduce (backend.h allreduce) after each of them gives every rank the full block output
 *                    before the residual (and Gemma's post-norms);
 *   KV heads         split with the query heads; when N > KV (N a multiple of KV), vLLM's replication: rank r uses
 *                    kv head r*KV/N, so each rank still holds one head and its KV cache;
 *   head             lm_head split along the vocabulary (rank r: rows [v0[r], v0[r+1]), uneven slices allowed), the
 *                    logits gathered on the host; the embedding stays replicated (every rank looks its tokens up in
 *                    the whole table: no collective before layer 0).
 * Norms, RoPE and everything elementwise run replicated on every rank over the full hidden state.
 *
 * Ranks are rank models (cmf_model with tp_of set): their cmf_config has the per-rank sizes, their weights are
 * views of the one mapped CMF file (row slices are plain views on the cpu; column slices, every slice that goes
 * to a device, and cpu row slices that start off the repacked copy's 16-row groups are copied once at load into
 * contiguous payloads of the same dtype, whole quantization blocks only). Cpu ranks repack their weights at load
 * (backend_cpu.c load_weights), as an unsplit cpu model does, so a rank's products are batch invariant and so is
 * the split forward (the cpu all-reduce sums each element in rank order): tests/tp/test_tp_batch_inv.
 * The front model (the one the caller loaded) keeps the full config and tokenizer; its sessions and batches hold
 * one rank session / rank batch per rank, and cmf_forward on a front batch runs the N rank forwards on N threads
 * (rank 0 on the caller's, ranks 1..N-1 on threads started once at setup and woken per forward) and gathers the
 * logits. A front model runs one forward at a time. */
#ifndef CMF_TP_H
#define CMF_TP_H

#include <pthread.h>
#ifdef __cplusplus /* tp_nccl.cu reads other fields; a lock-free _Atomic int has the plain int's layout */
#define CMF_TP_ATOMIC(t) t
#else
#include <stdatomic.h>
#define CMF_TP_ATOMIC(t) _Atomic t
#endif
#include <stdint.h>

#include "model/model.h"

#define CMF_TP_MAX 64

typedef struct cmf_tp {
    int n;                        /* ranks */
    cmf_model *front;
    cmf_model *rank[CMF_TP_MAX];  /* the rank models (owned) */
    int v0[CMF_TP_MAX + 1];       /* vocabulary slice of rank r: [v0[r], v0[r+1]) */
    uint8_t **owned;              /* copied weight payloads (column slices, device slices) */
    struct cmf_tp_slice_key {     /* owned[i] holds rows [r0, r0+nr) x columns [c0, c0+nc) of payload src */
        const uint8_t *src;
        int64_t r0, nr, c0, nc;
    } *owned_key;                 /* one per owned[]: a slice of the same payload is copied once (slice.c) */
    size_t n_owned, cap_owned;
    char desc[160];               /* "tp 2 x cuda:0: NVIDIA H200 ..." */
    pthread_mutex_t run_mu;       /* one forward at a time */
    /* the cpu all-reduce: a barrier with an abort flag, each rank's buffer, the sum */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int arrived, aborted, fail_rank;
    unsigned gen;
    CMF_TP_ATOMIC(unsigned) bar_gen; /* gen, readable without mu: a waiting rank polls it first (spin_us) */
    CMF_TP_ATOMIC(int) bar_abort;    /* aborted, the same way */
    float *bufs[CMF_TP_MAX];
    float *sum;
    size_t sum_cap;
    /* persistent rank threads (ranks 1..n-1; rank 0 runs on the caller's thread): started once by cmf_tp_setup,
     * woken per forward by job_gen, joined by cmf_tp_free */
    pthread_t worker[CMF_TP_MAX];
    int n_workers;                /* threads started (ranks 1..n_workers) */
    pthread_mutex_t job_mu;
    pthread_cond_t job_cv, done_cv;
    CMF_TP_ATOMIC(unsigned) job_gen; /* bumped per forward: the workers run their rank's job */
    CMF_TP_ATOMIC(int) job_done;     /* workers finished this forward */
    CMF_TP_ATOMIC(int) quit;         /* set by cmf_tp_free */
    int spin_us;                  /* a waiting rank thread (and the forward waiting for them, and a rank at the
                                   * all-reduce barrier) polls these for up to spin_us before sleeping on the
                                   * condition variable, so a wake-up costs no scheduler round trip; on the cpu
                                   * only when every rank's threads have a core of their own (else 0) */
    void *jobs;                   /* the current forward's per-rank jobs (tp.c rank_job[n]) */
    int dev0;                     /* cuda ranks: rank r runs on device dev0 + r */
    void *nccl;                   /* cuda ranks: the NCCL communicators (tp_nccl.cu); NULL on the cpu */
    /* symmetric all-reduce windows (cuda ranks, tp_nccl.cu): each front batch's rank batches have their xb at
     * offset 0 and their x (the residual stream, all-reduced under fold) right after it in one window (tp.c
     * attach_window) unless CMF_TP_SYMM=0 at load */
    struct cmf_tp_window *windows; /* one per front batch holding one (tp.c) */
    int sym;                       /* 1: new batches get a window (the default); 0: off (CMF_TP_SYMM=0, or a failed
                                    * attempt) */
    int n_windows;                 /* windows in use */
    long windows_made;             /* windows made since load (tests and benchmarks report it) */
    char sym_note[160];            /* why a window could not be made (NCCL's message), else "" */
    int fold;                     /* the residual folded into the all-reduce (forward.c tp_fold; the default,
                                   * CMF_TP_FOLD=0 at load turns it off): for blocks without a post-norm, rank 0's
                                   * o_proj / down_proj adds its partial to x (the residual), the other ranks write
                                   * theirs into x, and x is all-reduced in place, so x + sum of the partials comes
                                   * out of the collective and no separate add (+ norm) runs after it (cuda: the
                                   * add is rank 0's product epilogue, the norm the next products' prologue, as
                                   * on one GPU); Gemma's post-norm blocks keep the order product, all-reduce,
                                   * post-norm, add */
    int profile;                  /* CMF_TP_PROFILE set at load: time the all-reduces (cuda: serialising) */
    double allreduce_s;           /* seconds in rank 0's all-reduces (cpu: always, the wait for the others
                                   * included; cuda: with profile, the collective alone) */
    long allreduce_calls;
} cmf_tp;

/* ---- slice.c: the split of a config and of a weight set ------------------------------------------------- */

/* The config of rank r of n: n_heads/n, the rank's KV heads (n_kv_heads/n, or 1 when n > n_kv_heads),
 * intermediate_size/n, vocab_size of its slice [v0, v1). *q0 / *kv0 receive the rank's first query / KV head.
 * The result shares c->is_sliding (do not cmf_config_free it). Errors: CMF_E_UNSUPPORTED naming the size that
 * does not divide by n (n_heads, n_kv_heads vs n, intermediate_size). */
cmf_status cmf_tp_rank_config(const cmf_config *c, int n, int r, int v0, int v1, cmf_config *out, int *q0,
                              int *kv0);

#define CMF_TP_COPY_UNALIGNED 2
/* Builds rank r's weight set `out` from the front model's backbone (layers allocated here: free out->layers;
 * `small` is shared with the front model). copy_rows = 0: row slices are views into the mapping; 1: every
 * sliced matrix is copied (device ranks, whose payload uploads need whole tensors); CMF_TP_COPY_UNALIGNED (cpu
 * ranks): views, except row slices of a dtype the cpu repacks that do not start on a multiple of 16 stored rows
 * (the repacked copy's row groups, kern.h KERN_RP_R), which are copied so that load_weights repacks them and the
 * rank runs the batch-invariant repacked kernels everywhere (slice.c rows_of). Copies are recorded in
 * tp->owned; the same slice of the same payload (tensors that alias one payload, which CMF_FORMAT.md §1.11 allows,
 * e.g. bench/tp/repeat_layers.c) is copied once and shared, as the cuda backend uploads one copy per payload.
 * Errors: CMF_E_UNSUPPORTED for a column slice that cuts a quantization block or a dtype whose column
 * slice is not implemented (message names the tensor, dtype and N), CMF_E_NOMEM. */
cmf_status cmf_tp_slice_weights(cmf_tp *tp, int r, int copy_rows, cmf_weights *out);

/* ---- tp.c: the group ------------------------------------------------------------------------------------ */

/* Splits the loaded front model m (config and backbone built, on the cpu singleton) over n >= 2 ranks on
 * `backend` ("cpu": n cpu ranks, threads per rank = m's threads / n; "cuda" / "cuda:k": devices k .. k+n-1 with
 * NCCL; "auto": cuda when that works, else cpu; NULL: CMF_GPU as cmf_model_load_on). Sets m->tp. Errors:
 * CMF_E_UNSUPPORTED (Dory models, n > CMF_TP_MAX, sizes that do not divide, a build without NCCL for cuda), those
 * of the slicing and of the backends. */
cmf_status cmf_tp_setup(cmf_model *m, int n, const char *backend);
void cmf_tp_free(cmf_tp *tp);

/* Waits until all ranks of the forward in progress arrive (the cpu all-reduce's barrier; the cuda profile's
 * meeting point). Returns -1 when a rank failed (the group was aborted), else 0. */
int cmf_tp_barrier(cmf_tp *tp);

/* Front batch b (m, n_batch, n_seq set): one rank batch per rank in b->tp_rank, plus b->pos / head_tok. Cuda
 * ranks: the rank batches' xb and x (n_batch x hidden_size f32 each, the all-reduced buffers) are moved into a
 * symmetric NCCL window (NCCL's symmetric all-reduce kernels) when tp->sym (the default; CMF_TP_SYMM=0 turns it off); when that
 * fails the plain buffers stay and tp->sym_note says why. Errors: those of cmf_batch_new on the ranks.
 * cmf_tp_batch_fini frees them (NULL-safe). */
cmf_status cmf_tp_batch_init(cmf_batch *b);
void cmf_tp_batch_fini(cmf_batch *b);

/* 1 when p points into rank r's part of one of tp's symmetric windows (the all-reduced xb of a batch that has one),
 * else 0. */
int cmf_tp_in_window(const cmf_tp *tp, int r, const void *p);

/* Front session s (n_ctx set): one rank session per rank, each with the KV cache of its KV heads. Errors:
 * CMF_E_UNSUPPORTED for the O(1) far field or a task mask (not split), those of cmf_session_new_ex. */
cmf_status cmf_tp_session_init(cmf_session *s);
void cmf_tp_session_fini(cmf_session *s);
/* Bytes of the rank sessions' KV caches. */
size_t cmf_tp_session_state_bytes(const cmf_session *s);

/* cmf_forward for a front batch: the N rank forwards on N threads, the logits of each session (and all_logits
 * [n][V] when not NULL) gathered from the vocabulary slices, positions advanced. Errors: the first failing rank's
 * error, prefixed "tp rank r: "; nothing moves then. */
cmf_status cmf_tp_forward(cmf_batch *b, cmf_session *const *seqs, const int32_t *tokens, int n, float *all_logits);

/* ---- tp_nccl.cu (built with CMF_HAVE_NCCL) --------------------------------------------------------------- */
#ifdef CMF_HAVE_NCCL
/* One NCCL communicator per device devs[0..n) (ncclCommInitAll) into *out, then (warm_count > 0) one all-reduce of
 * warm_count and of 8 * warm_count floats on all of them (NCCL connects its peers at first use: done here rather
 * than inside a rank's first CUDA graph capture). Errors: CMF_E_IO with NCCL's or CUDA's reason. */
cmf_status cmf_tp_nccl_init(int n, const int *devs, size_t warm_count, void **out);
void cmf_tp_nccl_free(void *comms, int n);
/* backend.h allreduce for cuda ranks: ncclAllReduce(sum, f32) in place on the rank backend's stream (recorded into
 * the backend's decode-step graph while it captures; nothing queued while it replays one, which holds it). */
cmf_status cmf_tp_nccl_allreduce(cmf_backend *be, cmf_batch *b, float *buf, int64_t count);
/* The collective of rank r on its cudaStream_t `stream` (as void *): ncclAllReduce(sum, f32) of `count` floats in
 * place at buf (device memory of device dev0 + r), queued, not waited for (also while the stream captures a graph).
 * symm: buf lies in a symmetric window (cmf_tp_nccl_window), so NCCL runs a symmetric kernel, which NCCL launches
 * with programmatic dependent launch; when cmf_tp_nccl_symm_guard() a guard kernel is queued first so that it
 * cannot start before the kernel that wrote buf completed (tp_nccl.cu "the guard" says why). Every rank must call
 * it with the same count (NCCL's rule). Errors: CMF_E_IO with NCCL's / CUDA's reason, naming the rank. */
cmf_status cmf_tp_nccl_allreduce_stream(cmf_tp *tp, int r, void *stream, float *buf, int64_t count, int symm);
/* 1 when symmetric all-reduces get the guard: CMF_TP_SYMM_GUARD=0/1, else whether the loaded NCCL is older than
 * 2.30.7. */
int cmf_tp_nccl_symm_guard(void);
/* A symmetric NCCL window of `bytes` per rank (ncclMemAlloc on device dev0 + r, zeroed, registered with
 * NCCL_WIN_COLL_SYMMETRIC on every communicator in one group: a collective, so no forward may run meanwhile):
 * ptrs[r] / wins[r] for r < n. All-reduces of buffers at the same offset of it run NCCL's symmetric kernels.
 * Errors: CMF_E_UNSUPPORTED (NCCL < 2.27), CMF_E_IO (no VMM memory, NCCL's reason); nothing is held then.
 * cmf_tp_nccl_window_free waits for the ranks' devices, deregisters and frees (NULL entries skipped). */
cmf_status cmf_tp_nccl_window(cmf_tp *tp, size_t bytes, void **ptrs, void **wins);
void cmf_tp_nccl_window_free(cmf_tp *tp, void **ptrs, void **wins);
/* cudaSetDevice for the calling thread (buffers of a rank are allocated on its device), and the current device
 * (restored after a rank's work on the caller's thread: a plain cuda backend allocates on the current device). */
cmf_status cmf_tp_cuda_set_device(int dev);
int cmf_tp_cuda_get_device(void);
#endif

#endif
