/* o1.h — the O(1) far-field attention operator ("--o1"): streaming Nyström attention for one KV group.
 *
 * Source of the math: /work/shared/spec/DORY.md §3.1 (the generic operator of cortiq's nystrom.rs) and §4 (its
 * golden test). For one query q at position t, keys split into
 *   near = the first `sink` positions (kept exact forever) ∪ the last `w` positions (an exact ring),
 *   far  = every other earlier key, summarised by m_eff landmarks,
 * and near and far share ONE softmax denominator:
 *   out(q) = (Σ_near e_j·v_j + F̂·M·T̂) / (Σ_near e_j + F̂·M·Ẑ),     e_j = exp(scale·q·k_j)
 *   K̃, Q̃   = contiguous segment means of the sealed prompt's keys / this head's queries   [m_eff × d]
 *   M      = (AᵀA + λI)⁻¹Aᵀ, A = exp(scale·Q̃K̃ᵀ)  (ridge pseudo-inverse, f64 Cholesky)   [m_eff × m_eff]
 *   T̂_b    = Σ_far exp(scale·q̃_b·k_j)·v_j, Ẑ_b = Σ_far exp(scale·q̃_b·k_j)                 [m_eff × dv], [m_eff]
 *   F̂_a    = exp(scale·q·k̃_a − f), f = max_a scale·q·k̃_a
 * with flash-style shifts everywhere so nothing overflows in f32 (T̂_b/Ẑ_b are kept at scale exp(−max_b)).
 *
 * State is per KV group (GQA): the sink rows, the window ring and K̃ are shared by the group's n_heads query
 * heads; Q̃, M, T̂, Ẑ and the running maxima are per query head. All memory is allocated by cmf_o1_create from
 * the geometry and never grows afterwards: decode runs in constant memory and does not allocate.
 *
 * Lifecycle. A new state is EXACT-ONLY with 0 rows. cmf_o1_seal(prompt rows) replaces the state:
 *   - t <= w + sink + 8: exact-only (no skeleton; readout is exact causal softmax attention over every row);
 *   - otherwise: builds the skeleton (m_eff = clamp(t/8, 4, m) landmarks) and replays positions 0..t-1 through
 *     the sinks and the ring, each key entering the far field exactly when it leaves the window ("delayed
 *     insertion": far_len + w + sink == t).
 * cmf_o1_step pushes one new row (k, v), evicting the oldest window row into the far field, then reads out.
 * Design choice (constant memory; the reference grows its exact-only buffer instead): an exact-only state keeps
 * the queries of its rows too, and when a step brings it to w + sink + 9 rows it seals itself over those rows,
 * exactly as cmf_o1_seal would have done for that prompt, and continues in skeleton mode. The query trace
 * can be left out (params.no_query_trace) when the caller always seals over long prompts itself.
 *
 * Attention scale. The operator approximates the kernel exp(scale·q·k), so `scale` is used for the landmark
 * kernel A, for far insertion and for readout alike. The default (scale = 0 in the params) is 1/sqrt(head_dim),
 * as in DORY.md §3.1 and for Llama/Qwen/Dory; models with another softmax scale (Gemma: query_pre_attn_scalar^-½)
 * must pass theirs. Logit soft-capping (Gemma 2) is not representable by the skeleton: the caller must not use
 * this operator on soft-capped layers (the reference refuses them too).
 *
 * Thread safety: a state is used by one thread at a time (it holds its own scratch); distinct states are
 * independent. */
#ifndef CMF_MODEL_O1_H
#define CMF_MODEL_O1_H

#include <stddef.h>
#include <stdint.h>

#include "cmf.h"

/* How the indefinite skeleton is kept from producing negative far mass (DORY.md §3.1). */
typedef enum cmf_o1_rect {
    CMF_O1_RECT_AGG = 0, /* default: a row whose far denominator Σ g_b·Ẑ_b is negative drops its whole far field */
    CMF_O1_RECT_FM = 1,  /* clamp the mixing row u = F̂·M at 0: every implied far weight is then >= 0 */
} cmf_o1_rect;

/* Geometry and settings of one KV group's state. Reference defaults: m = 32, window = 128, sink = 4, AGG. */
typedef struct cmf_o1_params {
    int n_heads;  /* query heads reading this KV head (the GQA ratio n_heads/n_kv_heads), >= 1 */
    int head_dim; /* d: width of q and k rows, >= 1 */
    int v_dim;    /* dv: width of v rows and of the output, >= 1 (usually = head_dim) */
    int m;        /* landmark budget, >= 4 (the effective count m_eff is fixed at seal) */
    int window;   /* w: exact window rows, >= 1 */
    int sink;     /* permanent exact rows at positions 0..sink-1, >= 0 */
    float scale;  /* softmax scale on q·k; 0 selects 1/sqrt(head_dim); otherwise finite and > 0 */
    cmf_o1_rect rect;
    int no_query_trace; /* 0 (default): an exact-only state keeps its rows' queries and seals itself when a step
                         * brings it to w + sink + 9 rows. 1: no queries are kept (saves n_heads·(w+sink+9)·
                         * head_dim floats, about half the state at Dory's shape); such a step then fails with
                         * CMF_E_ARG, and the caller must seal over a prompt longer than w + sink + 8 rows */
} cmf_o1_params;

typedef struct cmf_o1 cmf_o1;

/* Parses a far-field layer spec (DORY.md §3.1 "Generic --o1 flag"; CMF_FORMAT.md §1.4 "The o1 hint") over a
 * model of n_layers layers, is_sliding[l] != 0 marking a sliding-window layer (those never convert):
 *   "all"   every full-attention layer;          "deepN" the N deepest full-attention layers (N >= 1);
 *   "i,j,k" exactly those layers (0 <= i < n_layers, each full attention);   "off" or "0": none.
 * on: [n_layers], set to 1 for the chosen layers and 0 elsewhere (caller-owned). Returns the number chosen
 * (0 for "off", or "all"/"deepN" on a model without full-attention layers), or -1 with the message set
 * (CMF_E_ARG) naming the malformed spec or the offending layer. */
int cmf_o1_parse_layers(const char *spec, int n_layers, const uint8_t *is_sliding, uint8_t *on);

/* Fills `p` with the reference defaults for the given shape: m = 32, window = 128, sink = 4, scale = 0
 * (1/sqrt(head_dim)), rect = AGG (DORY.md §3.1 "Defaults"), no_query_trace = 0. */
void cmf_o1_default_params(cmf_o1_params *p, int n_heads, int head_dim, int v_dim);

/* Allocates an empty exact-only state (0 rows) with all the memory it will ever use. *out owns it; free it with
 * cmf_o1_free. Errors: CMF_E_ARG for a NULL argument or a parameter out of range (the message names it; sizes
 * are limited so that the state stays below 2^31 floats), CMF_E_NOMEM. */
cmf_status cmf_o1_create(const cmf_o1_params *p, cmf_o1 **out);

/* Frees the state (NULL is allowed). */
void cmf_o1_free(cmf_o1 *st);

/* Returns the state to empty exact-only with 0 rows (a new sequence); no memory is touched by the allocator. */
void cmf_o1_reset(cmf_o1 *st);

/* Seals the state over a prompt of `t` rows that the caller has already run exactly, replacing whatever the
 * state held (DORY.md §3.1 "Building it"). Row layouts (strides in floats, so that the rows can be read straight
 * from a KV cache laid out [pos][n_kv_heads·head_dim]):
 *   q:   row i, group head h at q[i·q_stride + h·head_dim .. +head_dim)   (post-RoPE/post-norm queries)
 *   k:   row i at k[i·k_stride .. +head_dim),   v: row i at v[i·v_stride .. +v_dim)
 *   out: optional (NULL = none); row i, head h receives at out[i·out_stride + h·v_dim] the operator's own
 *        readout for query i when the sealed state is replayed position by position (landmarks from the whole
 *        prompt, far field as of row i). For an exact-only seal this is exact causal attention. This is the
 *        quantity the reference golden lists for the prompt rows (DORY.md §4); an exact prefill does not need it.
 * t = 0 gives an empty state. Errors: CMF_E_ARG (NULL rows with t > 0, t < 0, a stride narrower than its row);
 * the state is then empty. No allocation happens. */
cmf_status cmf_o1_seal(cmf_o1 *st, const float *q, size_t q_stride, const float *k, size_t k_stride,
                       const float *v, size_t v_stride, int t, float *out, size_t out_stride);

/* One new position: pushes (k [head_dim], v [v_dim]) into the group's window (in skeleton mode the evicted row
 * enters every head's far field first), then writes each head's attention output for its query.
 * q is [n_heads][head_dim] contiguous, out is [n_heads][v_dim] contiguous (DORY.md §3.1 "Readout": near logits
 * with shift c, landmark row shift f, joint shift c_all, gains g_b, rectifier, one denominator max(den, 1e-30)).
 * An exact-only state that reaches w + sink + 9 rows seals itself first (see the file comment).
 * Errors: CMF_E_ARG for NULL pointers, or for that step under no_query_trace (the state is then unchanged).
 * No allocation happens. */
cmf_status cmf_o1_step(cmf_o1 *st, const float *q, const float *k, const float *v, float *out);

/* n new positions in order, each exactly as cmf_o1_step (push, then read out): row i uses q + i·q_stride
 * ([n_heads][head_dim] contiguous), k + i·k_stride, v + i·v_stride and writes out + i·out_stride
 * ([n_heads][v_dim]). Errors: CMF_E_ARG (NULL pointers, n < 0, narrow strides: nothing is processed; or a row
 * refused as by cmf_o1_step: the rows before it were processed, the message names the row). */
cmf_status cmf_o1_step_chunk(cmf_o1 *st, int n, const float *q, size_t q_stride, const float *k, size_t k_stride,
                             const float *v, size_t v_stride, float *out, size_t out_stride);

/* Introspection. rows: positions absorbed so far (t). far_len: keys absorbed into each head's far field (every
 * head absorbs each evicted key exactly once, so one number serves the group). window_len: rows in the exact
 * window (in exact-only mode: every row). sink_len: sink rows held (0 in exact-only mode). m_eff: landmarks
 * (0 in exact-only mode). sealed: 1 in skeleton mode, 0 in exact-only mode. In skeleton mode the invariant
 * far_len + window_len + sink_len == rows holds after every call. */
int64_t cmf_o1_rows(const cmf_o1 *st);
int64_t cmf_o1_far_len(const cmf_o1 *st);
int cmf_o1_window_len(const cmf_o1 *st);
int cmf_o1_sink_len(const cmf_o1 *st);
int cmf_o1_m_eff(const cmf_o1 *st);
int cmf_o1_sealed(const cmf_o1 *st);

/* Bytes of heap the state holds (the single block cmf_o1_create allocated); constant for the state's life. */
size_t cmf_o1_state_bytes(const cmf_o1 *st);

/* Diagnostic: the far weight the skeleton implies for each of n keys under query q of head `head`, i.e. its
 * estimate of exp(scale·q·k_j) = e^f · Σ_b u_b·exp(scale·q̃_b·k_j), returned divided by the positive factor
 * e^f·exp(max_b scale·q̃_b·k_j) (so only sign and relative size within a key are meaningful). u is the mixing
 * row after the state's rectifier, so under CMF_O1_RECT_FM every value is >= 0. keys: row j at
 * keys[j·k_stride .. +head_dim); w: [n]. Errors: CMF_E_ARG (NULL, head out of range, n < 0, narrow stride,
 * or a state in exact-only mode, which has no skeleton). */
cmf_status cmf_o1_far_weights(cmf_o1 *st, int head, const float *q, const float *keys, int n, size_t k_stride,
                              float *w);

/* Snapshot/restore of the whole mutable state, bit-exact (e.g. for speculative decoding): cmf_o1_snapshot
 * writes cmf_o1_snapshot_size(st) bytes to buf; cmf_o1_restore reads them back into a state created with the
 * same parameters. The bytes are a private in-memory format (host endianness), not a file format.
 * Errors: CMF_E_ARG (NULL, len too small / not the snapshot size), CMF_E_FORMAT (restore: a buffer that is not
 * a snapshot of a state with these parameters, or whose counters are inconsistent; the state is then unchanged). */
size_t cmf_o1_snapshot_size(const cmf_o1 *st);
cmf_status cmf_o1_snapshot(const cmf_o1 *st, void *buf, size_t len);
cmf_status cmf_o1_restore(cmf_o1 *st, const void *buf, size_t len);

#endif
