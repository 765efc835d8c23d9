/* backend.h — the compute backend the transformer forward (src/model/forward.c) is written against, at the level
 * of operations (the shape of ggml-backend's interface): buffers, weight residency, and the ops of one decoder
 * layer. The forward calls only this table, so the model is written once; a backend decides where activations,
 * weights and the KV cache live and how each op runs.
 *
 *   cpu  (src/backend/cpu/backend_cpu.c): host memory, weights read in place from the mapping, the kernels of
 *        src/backend/cpu/ops.h on the batch's thread pool; f32 KV cache; supports everything (skills, task masks,
 *        the O(1) far field).
 *   cuda (src/backend/cuda/backend_cuda.cu): device memory, weights uploaded once, f16 KV cache on the device, the
 *        kernels of src/backend/cuda/cuda_ops.h on one stream; a decode forward leaves its logits in each
 *        session's device row (head_keep) and does not synchronize; sampling (sample) or cmf_session_logits
 *        (fetch) does, later. Task masks and the O(1) far field are CMF_E_UNSUPPORTED there.
 *
 * Conventions: "buffer" pointers (activations, norm vectors after residency) are memory of the backend: host
 * memory for cpu, device memory for cuda. Host-side arguments (token ids, positions, cmf_weight descriptors, the
 * layer / session structs) are always host memory. Every op is asynchronous with respect to the host unless it
 * says otherwise; results are visible to the next op of the same backend. Ops return CMF_OK or a status with the
 * message set (cmf_last_error); the cpu ops never fail once the batch exists. Shapes use the config's names:
 * n = tokens of the batch, D = hidden_size, QD = n_heads*head_dim, KVD = n_kv_heads*head_dim,
 * F = intermediate_size, V = vocab_size. Activations are f32 row-major [n][width]. */
#ifndef CMF_BACKEND_H
#define CMF_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "cmf.h"

#ifdef __cplusplus
extern "C" {
#endif

struct cmf_weight;  /* backend/cpu/ops.h: a 2-D weight view in a CMF dtype (host mapping) */
struct cmf_weights; /* model/model.h: one weight set (backbone or skill) */
struct cmf_layer;   /* model/model.h */

/* Backend kinds (cmf_backend.kind). */
enum cmf_backend_kind { CMF_BACKEND_CPU = 0, CMF_BACKEND_CUDA = 1 };

/* A sampling request for cmf_backend.sample (filled by session.c's cmf_session_sample from a cmf_sampler).
 * Penalties (step 1, cmf_sample_penalize's float operations) for the n_pen distinct tokens pen_ids[i] seen
 * pen_counts[i] times; then
 *   k == 0: greedy: *ids = the argmax of the penalized row (NaN never wins, ties -> the lower id, -0.0 == 0.0)
 *           and, when z is given, *z = its value (-inf: no token has a finite logit), n_out = 1, or n_out = 0
 *           when every value is NaN;
 *   k >= 1: z = l / temperature (IEEE division; +inf -> 3e38; NaN and -inf are not candidates): the min(k,
 *           candidates) first candidates in the order (z desc, id asc) into ids[] / z[] (host arrays of k),
 *           sorted, n_out of them (0: no candidate). */
#define CMF_DEV_SAMPLE_MAXK 1024
typedef struct cmf_dev_sample {
    int k;
    float temperature;                   /* > 0 when k >= 1 */
    const int32_t *pen_ids, *pen_counts; /* host arrays of n_pen */
    int n_pen;
    float repeat_penalty, presence_penalty, frequency_penalty;
    int32_t *ids; /* out: host [max(k, 1)] */
    float *z;     /* out: host [max(k, 1)] (k >= 1; optional with k == 0) */
    int n_out;    /* out */
} cmf_dev_sample;

typedef struct cmf_backend cmf_backend;
struct cmf_backend {
    int kind;         /* enum cmf_backend_kind */
    const char *name; /* "cpu", "cuda" */
    char desc[160];   /* one line for logs, e.g. "cuda: NVIDIA H200, cc 9.0, 132 SMs, 139.8 GiB" */
    void *impl;       /* the backend's own state */

    /* ---- buffers -------------------------------------------------------------------------------------- */
    /* bytes of backend memory into *out (zeroed). Errors: CMF_E_NOMEM naming the size. */
    cmf_status (*buf_alloc)(cmf_backend *be, size_t bytes, void **out);
    void (*buf_free)(cmf_backend *be, void *buf); /* NULL is fine */
    /* host -> backend and backend -> host copies of `bytes`; download waits for all earlier ops (the one
     * synchronisation point of a forward). Errors: CMF_E_IO (device fault, message from the runtime). */
    cmf_status (*upload)(cmf_backend *be, void *dst, const void *src, size_t bytes);
    cmf_status (*download)(cmf_backend *be, void *dst, const void *src, size_t bytes);
    /* sets `bytes` bytes of a buffer to zero (in order with the ops). Errors: CMF_E_IO. */
    cmf_status (*zero)(cmf_backend *be, void *buf, size_t bytes);
    /* Optional (NULL: use download): download under the backend's lock, for copies outside a forward from any
     * thread (cuda: cmf_session_logits' lazy download, safe next to another thread's forward). Errors: CMF_E_IO. */
    cmf_status (*fetch)(cmf_backend *be, void *dst, const void *src, size_t bytes);
    /* waits for every queued op; reports an asynchronous fault. Errors: CMF_E_IO. */
    cmf_status (*sync)(cmf_backend *be);

    /* ---- weight residency ------------------------------------------------------------------------------ */
    /* Makes a weight set resident once (cuda: every matrix payload and the set's f32 small-tensor arena copied to
     * the device; cpu: the q4 family and q8_row/q8_2f matrices rewritten once into the kernels' 16-row interleaved
     * layout (backend/cpu/repack.c; CMF_CPU_REPACK=0 keeps reading the mapping), everything else read in place).
     * Ops later resolve the set's cmf_weight views and norm / bias pointers to their resident copies. Errors:
     * CMF_E_NOMEM (device or host memory, naming the tensor size), CMF_E_UNSUPPORTED (a dtype or a fused row view
     * without a kernel, naming it). */
    cmf_status (*load_weights)(cmf_backend *be, const struct cmf_weights *w, int n_layers);
    /* Optional (NULL: `destroy` frees the resident copies): drops what load_weights made for set w, before the set
     * itself is freed (cpu: the repacked copies, which are reference-counted across sets and models). */
    void (*unload_weights)(cmf_backend *be, struct cmf_weights *w, int n_layers);

    /* ---- sessions: the KV cache ---------------------------------------------------------------------------- */
    /* Allocates the KV cache of session s from s->kv_off / s->kv_rows (rows of KVD values per layer, `total`
     * rows*KVD values over all layers): cpu keeps f32 s->k_cache / s->v_cache, cuda f16 s->dk / s->dv on the
     * device. Also refuses session features the backend lacks (cuda: task masks, the O(1) far field:
     * CMF_E_UNSUPPORTED). Errors: CMF_E_NOMEM naming the size. */
    cmf_status (*kv_alloc)(cmf_backend *be, cmf_session *s, size_t total);
    void (*kv_free)(cmf_backend *be, cmf_session *s);

    /* ---- the ops of one forward over a batch b (tokens t < n going to sessions seqs[t]) --------------- */
    /* Starts a forward: b->pos[t] (host) holds each token's position; cuda copies them to the device and takes
     * the backend's lock until end(). Errors: CMF_E_IO, CMF_E_NOMEM. */
    cmf_status (*begin)(cmf_backend *be, cmf_batch *b, int n);
    void (*end)(cmf_backend *be, cmf_batch *b);
    /* x[t] = embed[tokens[t]] * mult (tokens: host ids, range-checked by the caller). */
    cmf_status (*embed)(cmf_backend *be, cmf_batch *b, float *x, const struct cmf_weight *embed,
                        const int32_t *tokens, int n, float mult);
    /* RMSNorm of `rows` rows of d values (Zhang & Sennrich 2019): out = x/sqrt(mean(x^2)+eps) * (w or 1+w when
     * gemma); w is a host pointer of a resident weight set (NULL = no weight); out may alias x. */
    cmf_status (*rmsnorm)(cmf_backend *be, cmf_batch *b, float *out, const float *x, const float *w, int rows, int d,
                          float eps, int gemma);
    /* out[t][r] = sum_c x[t][c] W[r][c] (+ bias[r]) for t < n, r < W.rows; out row stride ld_out (cuda: must be
     * W.rows, CMF_E_UNSUPPORTED otherwise). bias: host pointer of a resident set or NULL. */
    cmf_status (*matmul)(cmf_backend *be, cmf_batch *b, float *out, int64_t ld_out, const float *x, int n,
                         const struct cmf_weight *w, const float *bias);
    /* Per-head q/k RMSNorm (when L has q_norm/k_norm; Qwen3, Gemma 3) and RoPE (Su et al. 2021) at b->pos over
     * b->q [n][QD] and b->k [n][KVD], in place, with the layer's frequencies (sliding layers: the local theta). */
    cmf_status (*qk_rope)(cmf_backend *be, cmf_batch *b, const struct cmf_layer *L, int layer, int n);
    /* Appends b->k / b->v rows of each token to its session's KV cache at b->pos (and the O(1) far field's query
     * trace on cpu). */
    cmf_status (*kv_write)(cmf_backend *be, cmf_batch *b, cmf_session *const *seqs, int layer, int n);
    /* b->att[t] = causal attention of b->q[t] over its session's cached rows 0..pos[t] (the last sliding_window
     * rows on sliding layers), GQA, scale and softcap of the config (cpu also: dead heads of the task mask, the
     * sealed O(1) far field). */
    cmf_status (*attention)(cmf_backend *be, cmf_batch *b, cmf_session *const *seqs, int layer, int n);
    /* gate[i] = act(gate[i]) * up[i] for i < count; act = GELU-tanh when gelu else SiLU (Shazeer 2020). */
    cmf_status (*glu)(cmf_backend *be, cmf_batch *b, float *gate, const float *up, int64_t count, int gelu);
    /* Residual: x[t] += post_norm ? RMSNorm(o[t]) : o[t] over `rows` rows of d (o may be overwritten). */
    cmf_status (*residual)(cmf_backend *be, cmf_batch *b, float *x, float *o, const float *post_norm, int rows,
                           int d, float eps, int gemma);
    /* The head: out_host[r] = softcap(lm_head · xn[r]) for r < rows (xn already normed, backend memory), written
     * to HOST memory out_host [rows][V] (cuda: computed on the device, one download). softcap 0 = off. */
    cmf_status (*head)(cmf_backend *be, cmf_batch *b, float *out_host, const float *xn, int rows,
                       const struct cmf_weight *lm_head, float softcap);

    /* Optional (NULL: forward.c uses `head` and the host rows): the head as `head`, but row r is left in backend
     * memory out[r] (V floats each, e.g. a session's dlogits), nothing downloaded, no synchronisation. cuda: one
     * product into its logits buffer (or straight into out[0] for one row), then a device copy per row. Errors:
     * as `head`. */
    cmf_status (*head_keep)(cmf_backend *be, cmf_batch *b, float *const *out, const float *xn, int rows,
                            const struct cmf_weight *lm_head, float softcap);
    /* Optional (NULL: sampling reads host rows): step 1, then step 2 or steps 3-4 of src/sample/sample.h on a row
     * of n logits in backend memory, exactly (the same bits as the host): see cmf_dev_sample. Takes the backend's
     * lock and synchronizes. Errors: CMF_E_ARG (req->k outside 0..CMF_DEV_SAMPLE_MAXK), CMF_E_NOMEM, CMF_E_IO. */
    cmf_status (*sample)(cmf_backend *be, const float *logits, int n, struct cmf_dev_sample *req);

    void (*destroy)(cmf_backend *be); /* frees everything the backend holds (resident weights too) */

    /* ---- tensor parallelism (src/tp/tp.h) --------------------------------------------------------------- */
    /* All-reduce (sum) of `count` f32 values of backend memory over the N ranks of a tensor-parallel group:
     * afterwards buf[i] on every rank is the sum of every rank's buf[i]. b is the rank's batch (b->m is the rank
     * model, b->m->tp_of its group). forward.c calls it after the o_proj and down_proj products (Megatron-LM's
     * row-parallel layers, Shoeybi et al. 2019). cpu ranks: sum in rank order 0..N-1 through shared memory and a
     * barrier (deterministic); cuda ranks: ncclAllReduce on the backend's stream. NULL for a plain
     * single-device backend (the forward then does nothing). Errors: CMF_E_IO (another rank failed, NCCL). */
    cmf_status (*allreduce)(cmf_backend *be, cmf_batch *b, float *buf, int64_t count);
};

/* The cpu backend (backend_cpu.c), a static singleton: ops run on the batch's thread pool. Never fails. */
cmf_backend *cmf_backend_cpu(void);

/* Creates the cuda backend on device `dev` for model m (backend_cuda.cu; available when built with
 * CMF_HAVE_CUDA): a stream, a cuBLAS context, the model's RoPE frequencies on the device. Errors:
 * CMF_E_UNSUPPORTED when there is no usable device (the message says why) or the build has no CUDA,
 * CMF_E_NOMEM / CMF_E_IO from the runtime. */
cmf_status cmf_backend_cuda_new(const cmf_model *m, int dev, cmf_backend **out);

#ifdef __cplusplus
}
#endif

#endif
