/* dory_ops.h — the operations of the Dory forward (src/model/dory_forward.c) that a backend provides: the second op
 * table next to backend.h's transformer ops. The model code (loops, KV modes and slot choice, the Conf and Recon
 * gates) is written once against this table; a backend decides where the activations and the KV cache live and
 * how each op runs.
 *
 *   cpu  (src/backend/cpu/dory_ops.c): host memory, weights read in place, the session's thread pool, f32 KV cache;
 *        the arithmetic of the first Dory forward, unchanged (the Dory CPU tests are bit for bit what they were).
 *   cuda (src/backend/cuda/dory_ops.cu): device memory, weights uploaded once (payloads as stored, the f32 scale
 *        arena), f32 KV cache on the device, one stream, decode segments replayed as CUDA graphs (segment); the
 *        host waits only for the logits (head) and the Recon gate's state read-out (to_host). The O(1) far field is
 *        CMF_E_UNSUPPORTED there.
 *
 * Math of every op: shared/spec/DORY.md §1.4–§1.7 (sections named per op). Conventions: `s` is the session
 * (model/dory.h); its activation buffers s->x, s->inp, s->state [n_batch][H], s->xr [n_batch][max(H, QD)],
 * s->q, s->g, s->att [n_batch][QD], s->k, s->v [n_batch][KVD], s->hb, s->hb2 [n_batch][F] and the KV slots
 * s->kv[i].k / .v [rows][KVD] are backend memory (allocated with buf_alloc); token ids, positions, layer structs
 * and cmf_weight descriptors are host memory. Sizes use the config's names: n = tokens of the call (<= n_batch),
 * H = hidden_size, QD = n_heads·head_dim, KVD = n_kv_heads·head_dim, F = intermediate_size, V = vocab_size.
 * Ops run in order; results are visible to the next op. Errors: CMF_OK or a status with the message set (cpu ops
 * never fail once the session exists; cuda: CMF_E_IO for a device fault, CMF_E_NOMEM). */
#ifndef CMF_BACKEND_DORY_OPS_H
#define CMF_BACKEND_DORY_OPS_H

#include <stddef.h>
#include <stdint.h>

#include "cmf.h"

#ifdef __cplusplus
extern "C" {
#endif

struct cmf_dory;       /* model/dory.h */
struct cmf_dory_state; /* model/dory.h */
struct cmf_dory_layer; /* model/dory.h */
struct cmf_weight;     /* backend/cpu/ops.h */

typedef struct cmf_dory_ops {
    const char *name; /* "cpu", "cuda" */

    /* ---- session resources -------------------------------------------------------------------------------- */
    /* n_floats zeroed f32 values of backend memory into *out. Errors: CMF_E_NOMEM naming the size. */
    cmf_status (*buf_alloc)(struct cmf_dory_state *s, size_t n_floats, float **out);
    void (*buf_free)(struct cmf_dory_state *s, float *buf); /* NULL is fine */
    /* The backend's own per-session state (cuda: logits and token-id staging), made after the buffers; NULL op or
     * CMF_OK when none. state_free is called before the buffers are freed. Errors: CMF_E_NOMEM. */
    cmf_status (*state_init)(struct cmf_dory_state *s);
    void (*state_free)(struct cmf_dory_state *s);
    /* Brackets one public call (forward or one gated token): cuda takes the model's device lock (one stream for
     * every session of the model); end reports an asynchronous device fault. Errors: CMF_E_IO. */
    cmf_status (*begin)(struct cmf_dory_state *s);
    cmf_status (*end)(struct cmf_dory_state *s);

    /* ---- copies -------------------------------------------------------------------------------------------- */
    /* dst = src for n floats, both backend memory (the Conf gate's saved state). */
    cmf_status (*copy)(struct cmf_dory_state *s, float *dst, const float *src, size_t n);
    /* n floats of backend memory into host memory (waits for the ops before it). */
    cmf_status (*to_host)(struct cmf_dory_state *s, float *host, const float *src, size_t n);

    /* ---- the forward's ops ----------------------------------------------------------------------------------- */
    /* x[t] = embed[tokens[t]] as f32 for t < n (tokens: host ids, checked by the caller). §1.7 "h = embed[id]". */
    cmf_status (*embed)(struct cmf_dory_state *s, float *x, const int32_t *tokens, int n);
    /* out[t][r] = Σ_c x[t][c]·W[r][c] for t < n, r < W.rows (out rows of exactly W.rows). */
    cmf_status (*matmul)(struct cmf_dory_state *s, float *out, const float *x, int n, const struct cmf_weight *w);
    /* count products of the same input, each exactly matmul(s, out[i], x, n, w[i]) (cuda: up to three weights per
     * launch in decode, cmf_cuda_matvec_multi, bit for bit its single products). count 1..4. */
    cmf_status (*matmuls)(struct cmf_dory_state *s, int count, float *const *out, const float *x, int n,
                          const struct cmf_weight *const *w);
    /* §1.5 steps 2–3 and the §1.8 cache write, on s->q [n][QD] and s->k [n][KVD] of tokens at positions
     * pos0..pos0+n-1, in place: NeoX RoPE with the table of layer `layer`'s profile (d->inv_freq), then per query
     * head q = q_scale ⊙ justnorm(q) and per KV head k = justnorm(k); then the n rows of s->k / s->v go into KV slot
     * `slot` at the rows of their positions (a sliding ring: row p % rows; a full cache: row p, skipped when
     * p >= rows, i.e. past a far-field cut). */
    cmf_status (*qk_norm_kv)(struct cmf_dory_state *s, const struct cmf_dory_layer *L, int layer, int slot, int n,
                             int pos0);
    /* §1.5 step 4: s->att[t] = causal softmax(q·k/√hd) · v of s->q[t] over slot `slot`'s rows of positions
     * lo..pos0+t (lo = p − W + 1 clipped at 0 when `sliding`, else 0), GQA (head h reads KV head h / group). */
    cmf_status (*attend)(struct cmf_dory_state *s, int slot, int n, int pos0, int sliding);
    /* §1.5 steps 5–6: s->att[t] ⊙= sigmoid(s->g[t] ⊙ L->g_scale), then justnorm over the whole QD vector. */
    cmf_status (*gate_norm)(struct cmf_dory_state *s, const struct cmf_dory_layer *L, int n);
    /* §1.6: s->hb[t] = justnorm(silu(s->hb[t] ⊙ suv_gate) ⊙ (s->hb2[t] ⊙ suv_up)). */
    cmf_status (*swiglu_norm)(struct cmf_dory_state *s, const struct cmf_dory_layer *L, int n);
    /* §1.4 nGPT residual of n rows: x = justnorm(a + λ ⊙ (b − a)), a = justnorm(s->x), b = justnorm(s->xr)
     * (s->xr is clobbered); lambda: host pointer into the model's scale arena. */
    cmf_status (*residual)(struct cmf_dory_state *s, const float *lambda, int n);
    /* §1.7 re-injection before a recurrent pass: s->x[t] = justnorm(s->x[t] + s->inp[t]). */
    cmf_status (*reinject)(struct cmf_dory_state *s, int n);
    /* §1.7 after a recurrent pass: s->x[t] = justnorm(s->x[t]). */
    cmf_status (*normalize)(struct cmf_dory_state *s, int n);
    /* The head (§1.7 last line): out_host[r][j] = (lm_head · h[r])[j] · logit_scale[j] / σ₀ for r < rows, h of
     * backend memory [rows][H] (rows <= n_batch), out_host host memory [rows][V]. */
    cmf_status (*head)(struct cmf_dory_state *s, const float *h, int rows, float *out_host);

    /* Optional (NULL: the caller runs body(s, tokens, loop, n) itself). Runs one segment of a chunk of n tokens at
     * position s->pos (dory_forward.c: the input block with pass 0, a later recurrent pass, or the output block) so
     * that the backend may replay it: cuda captures the body's launches into a CUDA graph cached per session under
     * `key` (which must identify everything the body launches apart from s->pos and the token ids) and replays that
     * graph the next time, for n <= 8; tokens (host, NULL when the body embeds none) and s->pos are copied to the
     * device before the graph runs. The body must queue device work only (no host copies, no waits). Errors: the
     * body's; CMF_E_IO for a device fault. */
    cmf_status (*segment)(struct cmf_dory_state *s, int key,
                          cmf_status (*body)(struct cmf_dory_state *s, const int32_t *tokens, int loop, int n),
                          const int32_t *tokens, int loop, int n);

    /* Frees what the backend holds for the model (resident weights, streams); called by cmf_dory_free. */
    void (*destroy)(struct cmf_dory *d);
} cmf_dory_ops;

/* The cpu table (src/backend/cpu/dory_ops.c); a static singleton. */
const cmf_dory_ops *cmf_dory_ops_cpu(void);

/* Moves model d to CUDA device `dev` (src/backend/cuda/dory_ops.cu; available when built with CMF_HAVE_CUDA): a
 * stream and a cuBLAS context, every matrix payload and the f32 scale arena copied to the device; on success
 * d->ops is the cuda table and d->be its state. Sessions made before keep their backend (call it before any).
 * Errors: CMF_E_UNSUPPORTED (no usable device, naming why; a dtype or shape without a device kernel, naming the
 * tensor; head_dim above 256 or not a multiple of 4), CMF_E_NOMEM (device memory), CMF_E_IO; d is unchanged on
 * error. */
cmf_status cmf_dory_cuda_attach(struct cmf_dory *d, int dev);

/* CUDA graphs of the Dory decode segments (dory_ops.cu; with CMF_HAVE_CUDA): on (default, unless the environment has
 * CMF_DORY_CUDA_GRAPH=0) or off for every session of model d on cuda; a no-op for a cpu model. Graph replays launch
 * the same kernels with the same arguments as eager runs, so the results are bit for bit the same. */
void cmf_dory_cuda_set_graphs(struct cmf_dory *d, int on);
/* Segments of model d captured into graphs and replayed since it was moved to cuda (0 for a cpu model). */
void cmf_dory_cuda_graph_stats(const struct cmf_dory *d, uint64_t *captured, uint64_t *replayed);

#ifdef __cplusplus
}
#endif

#endif
