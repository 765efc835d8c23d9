/* dory.h — NVIDIA Nemotron Labs Dory1.0, the looped normalized GPT (spec: shared/spec/DORY.md §1–§2).
 *
 * A Dory model is a stack of *physical sub-layers*, each one attention (pattern char `S` sliding window, `*` full)
 * or one SwiGLU MLP (`-`), with the nGPT residual (every hidden vector lives on the unit sphere) and no norm
 * weights. The stack is split into an input block, a recurrent block that runs `loops` times with the same weights
 * (re-injecting the input-block output before each pass), and an output block; logits = (lm_head·h) ⊙ logit_scale/σ₀.
 *
 * Three objects, as in model.h:
 *   cmf_dory_config  — hyperparameters from header.arch (+ arch.dory, docs/HEADER_KEYS.md "Dory"),
 *   cmf_dory         — weights: views into the mapped CMF file (matrices) and f32 copies of the scale vectors,
 *   cmf_dory_state   — one session: KV caches (per loop or last loop, §1.8; sliding layers keep a ring of
 *                      window + batch rows), activations, the position, and the early-exit gate counters (§2).
 * Backends: the forward (dory_forward.c) is written once against the Dory op table of backend/dory_ops.h; a model
 * runs on the cpu (default) or, after cmf_dory_use_backend(d, "cuda"), on a CUDA device (weights resident there,
 * activations and KV caches in device memory; the O(1) far field stays cpu only).
 *
 * Wiring into the generic API (done by the model owner, see the report in the issue):
 *   cmf_model_load:  when header.arch.arch_name == "dory", call cmf_dory_load(m->file, n_threads, &m->dory)
 *                    instead of cmf_config_from_header + the transformer loader; free with cmf_dory_free. The
 *                    backend choice (--gpu, CMF_GPU, cmf_model_load_on's name) goes to cmf_dory_use_backend.
 *   cmf_session_new: cmf_dory_state_new(m->dory, n_ctx, 0, -1, &s->dory); free with cmf_dory_state_free.
 *   prefill/decode:  cmf_dory_forward(s->dory, tokens, n, 0, all_logits); logits from cmf_dory_logits(s->dory).
 *   reset:           cmf_dory_state_reset(s->dory). */
#ifndef CMF_MODEL_DORY_H
#define CMF_MODEL_DORY_H

#include <cjson/cJSON.h>
#include <stdint.h>

#include "backend/cpu/ops.h"
#include "backend/cpu/threadpool.h"
#include "backend/dory_ops.h"
#include "cmf.h"
#include "format/format.h"
#include "model/o1.h"

/* Largest loop count the runtime accepts (per request and in the config). llama.cpp accepts 1..4; vLLM tests use up
 * to 27; cortiq's MAX_LOOPS was not seen (DORY.md §1.7). Our choice: 16. */
#define CMF_DORY_MAX_LOOPS 16
/* Largest number of physical sub-layers. */
#define CMF_DORY_MAX_LAYERS 1024

typedef enum { CMF_DORY_KV_PER_LOOP = 0, CMF_DORY_KV_LAST_LOOP = 1 } cmf_dory_kv_mode;

typedef struct cmf_dory_config {
    int vocab_size, hidden_size, intermediate_size, n_layers, n_heads, n_kv_heads, head_dim;
    int max_position_embeddings;
    int n_input, n_recurrent, n_output; /* sub-layers per block; n_input + n_recurrent + n_output = n_layers */
    int n_loops;                        /* default loop count (config n_recurrent_loops), 1..CMF_DORY_MAX_LOOPS */
    cmf_dory_kv_mode kv_mode;           /* default KV mode (config recurrent_kv_cache_mode) */
    char pattern[CMF_DORY_MAX_LAYERS + 1]; /* one char per sub-layer: 'S', '*' or '-' */
    uint8_t rope_profile[CMF_DORY_MAX_LAYERS]; /* 1 -> rope_theta, 2 -> rope_theta_2 */
    float rope_theta, rope_theta_2;
    float init_std;   /* σ₀ = init_method_std */
    float alpha_init; /* ngpt_alpha_init */
    float gate_init;  /* g0 = attention_output_gate_logit_scale_init, √hidden_size when null */
    int swa_window;   /* W: a sliding layer at position t sees keys t-W < j <= t */
    int has_recon;     /* the file carries a Recon probe (tensor dory_recon.weight + arch.dory.recon_bias) */
    double recon_bias; /* its bias (arch.dory.recon_bias) */
} cmf_dory_config;

/* Reads and validates header.arch of a Dory file (arch_name "dory", the keys of docs/HEADER_KEYS.md "Dory").
 * Checks: every size positive, n_heads % n_kv_heads == 0, block counts add up to num_layers and each is >= 1,
 * pattern chars only 'S', '*', '-' and num_layers of them, profiles 1 or 2, loops in 1..CMF_DORY_MAX_LOOPS, kv mode
 * per_loop|last_loop, σ₀/alpha/gate/θ finite and > 0, window >= 1. Errors: CMF_E_FORMAT naming the key (value
 * missing, wrong type or out of range), CMF_E_UNSUPPORTED (arch_name not "dory"). */
cmf_status cmf_dory_config_from_arch(const cJSON *arch, cmf_dory_config *cfg);

/* One physical sub-layer. Attention layers fill the attention fields, MLP layers the MLP ones. The scale vectors are
 * stored pre-multiplied as the math uses them (§1.4–1.6). */
typedef struct cmf_dory_layer {
    char kind;                     /* 'S', '*', '-' */
    const float *lambda;           /* [H] |alpha · alpha_init/σ₀| (attn_alpha or mlp_alpha) */
    cmf_weight wq, wk, wv, wg, wo; /* q,g: [n_heads·hd, H]; k,v: [n_kv_heads·hd, H]; o: [H, n_heads·hd] */
    const float *q_scale;          /* [n_heads·hd] (sqk·√hd/σ₀)² */
    const float *g_scale;          /* [n_heads·hd] (s_gate·√g0/σ₀)² */
    cmf_weight w_gate, w_up, w_down; /* gate/up [F, H]; down [H, F] */
    const float *suv_gate, *suv_up;  /* [F] suv·√H */
} cmf_dory_layer;

typedef struct cmf_dory {
    const cmf_file *file; /* not owned */
    cmf_dory_config cfg;
    cmf_weight embed;     /* backbone.embeddings.weight [V, H] */
    cmf_weight lm_head;   /* lm_head.weight [V, H] */
    const float *logit_scale; /* [V] lm_head.logit_scale / σ₀ */
    cmf_dory_layer *layers;   /* [n_layers] */
    float *arena;             /* every f32 vector above, one allocation */
    float *inv_freq;          /* [2][hd/2]: θ^(-2j/hd) for profile 1 and profile 2 */
    const float *recon_w;     /* [H] the file's Recon probe weights (dory_recon.weight), NULL when it has none */
    size_t arena_n;           /* floats in arena (scale vectors, logit scale, RoPE tables, probe) */
    int n_threads;
    const cmf_dory_ops *ops;  /* the backend the forward runs on (backend/dory_ops.h): cpu unless moved to cuda */
    void *be;                 /* that backend's model state (cuda: stream, resident weights), NULL for cpu */
} cmf_dory;

/* Builds a Dory model over an open CMF file (which must outlive it): reads header.arch, makes views of every
 * matrix (any dtype with a CPU kernel) and decodes the scale vectors to f32. n_threads 0 = one per core.
 * Errors: those of cmf_dory_config_from_arch; CMF_E_FORMAT when a tensor is missing or mis-shaped (message names it);
 * CMF_E_UNSUPPORTED for a dtype without a kernel; CMF_E_NOMEM. */
cmf_status cmf_dory_load(const cmf_file *f, int n_threads, cmf_dory **out);
void cmf_dory_free(cmf_dory *d);

/* Puts the forward of model d on a backend: "cpu" (the default after cmf_dory_load), "cuda" or "cuda:N" (device
 * N: weights copied to the device, the ops of src/backend/cuda/dory_ops.cu), "auto" (cuda:0 when usable, else the
 * cpu with no error). Call before creating sessions (a session keeps the backend it was made on). On cuda the
 * O(1) far field is CMF_E_UNSUPPORTED; everything else (loops, both KV modes, sliding rings, the Conf and Recon
 * gates) runs there. Errors: CMF_E_ARG (a name other than those), CMF_E_UNSUPPORTED (no CUDA in the build or
 * no usable device, a dtype without a device kernel; the message says which), CMF_E_NOMEM, CMF_E_IO; d stays on
 * its backend on error. */
cmf_status cmf_dory_use_backend(cmf_dory *d, const char *name);
/* "cpu" or "cuda". */
const char *cmf_dory_backend(const cmf_dory *d);

/* One KV cache slot: a full-attention layer keeps n_ctx rows; a sliding one a ring of `rows` = W + n_batch rows
 * (row of position p at p % rows). Each row is n_kv_heads·hd floats, keys already RoPE'd and normalised. */
typedef struct cmf_dory_kv {
    float *k, *v;
    int rows, ring;
} cmf_dory_kv;

/* Per-session state. The KV slots: one per attention layer of the input and output blocks, and per recurrent
 * attention layer either max_loops slots (per_loop: loop i reads and writes slot i) or one (last_loop: every loop
 * overwrites this chunk's rows, so earlier tokens are seen through their final-loop K/V). */
typedef struct cmf_dory_state {
    const cmf_dory *d;
    cmf_pool *pool;
    cmf_dory_kv_mode kv_mode;
    int n_ctx, n_batch, max_loops, pos;
    int loops_used;      /* per_loop: the loop count of the session's first chunk (0 before it); later chunks must match */
    int *slot;           /* [n_layers] first slot of an attention layer, -1 for MLP layers */
    cmf_dory_kv *kv;     /* [n_slots] */
    int n_slots;
    float *x, *inp, *state, *xr, *q, *k, *v, *g, *att, *hb, *hb2; /* activations for n_batch tokens (backend
                                                                   * memory, as kv[i].k / .v: device memory on cuda) */
    float *logits;       /* [vocab]: logits of the last position of the last call */
    /* early-exit gate counters (§2) */
    long gate_tokens, gate_one_pass;
    /* the Conf gate's exit-rate tracker (§2 "ExitRate"; see cmf_dory_gate_tracker) */
    int track_window, track_pause;  /* probed tokens per verdict (0: off); tokens per pause */
    double track_min_rate;          /* pause when the one-pass share of a window is below this */
    int track_probes, track_exits;  /* in the current window */
    int pause_left;                 /* tokens still to run without a probe */
    long gate_probed;               /* gated tokens that were probed (read out after the first pass) */
    struct cmf_dory_o1 *o1; /* the O(1) far field (dory_o1.c), NULL when off */
    const cmf_dory_ops *ops; /* the model's backend when the session was made (backend/dory_ops.h) */
    void *be;                /* its per-session state (cuda: logits and token-id staging) */
    float *h_host;           /* [H] host copy of one hidden vector (the Recon gate's φ) */
} cmf_dory_state;

/* Creates a session of n_ctx positions (0: max_position_embeddings) with chunks of up to n_batch tokens (0: 256,
 * capped at n_ctx), for up to max_loops loops (0: CMF_DORY_MAX_LOOPS under last_loop, the config's n_loops under
 * per_loop), KV mode kv_mode (-1: the config's). Memory: full layers n_ctx rows, sliding layers W + n_batch rows,
 * per slot. Errors: CMF_E_ARG (sizes, kv_mode, max_loops out of 1..CMF_DORY_MAX_LOOPS), CMF_E_NOMEM. */
cmf_status cmf_dory_state_new(const cmf_dory *d, int n_ctx, int n_batch, int kv_mode, int max_loops,
                              cmf_dory_state **out);
void cmf_dory_state_free(cmf_dory_state *s);
/* Forgets the context (position 0) and the gate counters; the per_loop loop count may be chosen anew. */
void cmf_dory_state_reset(cmf_dory_state *s);

/* Runs n tokens at positions s->pos.. with `loops` recurrent passes (0: the config's n_loops), in chunks of n_batch
 * (§1.7 per chunk; chunking does not change the result). Writes all logits ([n][vocab]) when all_logits != NULL and
 * always the last position's into cmf_dory_logits(s). Under per_loop every call of a session must use the same
 * loop count; under last_loop it may change from call to call (token to token).
 * Errors: CMF_E_ARG (n <= 0, context full, token id out of range, loops outside 1..max_loops, per_loop loop
 * count change); the state is unchanged on error. */
cmf_status cmf_dory_forward(cmf_dory_state *s, const int32_t *tokens, int n, int loops, float *all_logits);

/* Decodes one token with the Conf(threshold) early-exit gate of §2 for a two-pass model: runs the input block,
 * loop 0, the output block and the head; if the largest softmax probability of those logits is >= threshold the
 * token is done after one pass, otherwise loop 1 runs from the saved state/input and the output block and head run
 * again for this position (overwriting its output-block K/V). *passes (may be NULL) receives 1 or 2, and the
 * session's counters are updated. threshold <= 0 always exits after one pass (same logits as loops = 1); a
 * threshold > 1 never does (same as loops = 2). While the exit-rate tracker (cmf_dory_gate_tracker) pauses probing,
 * a token runs both passes with one read-out (same result as a probed two-pass token). Requires the last_loop KV
 * mode (a one-pass token leaves no loop-1 K/V that per_loop would need) and max_loops >= 2.
 * Errors: CMF_E_ARG (mode, context full, id out of range); CMF_E_UNSUPPORTED with the O(1) far field on. */
cmf_status cmf_dory_decode_gated(cmf_dory_state *s, int32_t token, float threshold, int *passes);

/* Recon early-exit probe (DORY.md §2 "Recon(probe, bias)"; the spec leaves the probe's form and storage open, so
 * this is OUR definition): a linear probe on φ, the state after the first recurrent pass (the unit-norm H-vector
 * `state` of §1.7 after loop 0). score(φ) = Σ_j w[j]·φ[j] (accumulated in double); the token takes ONE pass when
 * score >= bias, else two.
 * Storage: in a checkpoint or probe file (safetensors) as `dory_recon.weight` [H] and `dory_recon.bias` [1]
 * (F32/F16/BF16); in a CMF file as tensor `dory_recon.weight` [H] (the converter's vector dtype policy) and the
 * exact bias as the header number arch.dory.recon_bias (docs/HEADER_KEYS.md "Dory"). */
typedef struct cmf_dory_probe {
    int n;       /* hidden_size */
    float *w;    /* [n], owned */
    double bias;
} cmf_dory_probe;

/* The file's own probe as a new cmf_dory_probe (*out = NULL and CMF_OK when the file has none).
 * Errors: CMF_E_NOMEM. Free with cmf_dory_probe_free. */
cmf_status cmf_dory_probe_from_model(const cmf_dory *d, cmf_dory_probe **out);
/* Reads a probe from a safetensors file holding `dory_recon.weight` [hidden_size] and `dory_recon.bias` [1]
 * (F32, F16 or BF16; finite values). Errors: CMF_E_IO (cannot open), CMF_E_FORMAT (a tensor missing, mis-shaped or
 * not finite; the message names it), CMF_E_UNSUPPORTED (dtype), CMF_E_NOMEM. */
cmf_status cmf_dory_probe_read(const char *path, int hidden_size, cmf_dory_probe **out);
void cmf_dory_probe_free(cmf_dory_probe *p);

/* Decodes one token with the Recon early-exit gate of §2 for a two-pass model: input block and loop 0; if the probe
 * scores the post-pass state φ at >= bias the output block and head run at once (one pass), otherwise loop 1 runs
 * first (two passes). There is no read-out before the decision. A one-pass token gives the logits of loops = 1 and a
 * two-pass token those of loops = 2 for that position (DORY.md §1.8 last_loop: the recurrent K/V of this row is the
 * last loop's either way). *passes (may be NULL) receives 1 or 2; *score (may be NULL) the probe's score; the
 * session's gate counters are updated. Requires the last_loop KV mode and max_loops >= 2.
 * Errors: CMF_E_ARG (mode, NULL probe, probe size != hidden_size, context full, id out of range). */
cmf_status cmf_dory_decode_recon(cmf_dory_state *s, int32_t token, const cmf_dory_probe *probe, int *passes,
                                 double *score);

/* Sets the Conf gate's exit-rate tracker (DORY.md §2: an ExitRate tracker "can stop probing when one-pass exits are
 * rare"; the spec gives no parameters, these are ours). Probed tokens are counted in windows of `window`; at the end
 * of a window whose one-pass share is below min_rate, the next `pause` gated tokens are not probed: they run both
 * passes and the output block once (the logits, K/V and position are exactly those of a probed two-pass token, the
 * wasted read-out after pass 1 is saved). Then probing resumes with a fresh window. window 0 turns it off. New
 * sessions start with window 64, min_rate 1/16, pause 256. Errors: CMF_E_ARG (window or pause < 0, min_rate outside
 * [0, 1]); the tracker is then unchanged. */
cmf_status cmf_dory_gate_tracker(cmf_dory_state *s, int window, double min_rate, int pause);
/* Gated tokens that were probed (read out after the first pass); the rest of cmf_dory_gate_one_pass_share's count
 * ran two passes under a tracker pause. */
long cmf_dory_gate_probed(const cmf_dory_state *s);

/* Share of gated tokens that took one pass, in [0, 1] (0 when none was gated); *n_tokens (may be NULL) gets the
 * count of gated tokens. */
double cmf_dory_gate_one_pass_share(const cmf_dory_state *s, long *n_tokens);

/* ---- the O(1) far field for Dory (DORY.md §3.2; dory_o1.c, on the operator of model/o1.h) ------------------- */
typedef struct cmf_dory_o1 cmf_dory_o1;

/* Turns the far field on for a fresh session (pos 0). layers: "all" | "deepN" (counting full-attention sub-layers
 * only) | "off" | an explicit list "i,j,k" of physical sub-layers, each of which must be full attention ('*').
 * One operator state per (chosen layer, KV slot, KV head): per_loop recurrent layers have one slot per loop index.
 * m, window: landmark budget and exact window (0: the operator's defaults 32 and 128); sink: permanent exact rows
 * (-1: default 4); rect: 0 aggregate rectifier, 1 fm; qt_stride: every qt_stride-th prompt row's query is traced
 * for the landmarks (0: 1, every row); seal_at: the prompt length at which the session seals during a prefill
 * (0: 32768). The session seals at its first single-token call after a prompt, or when the prompt reaches seal_at
 * rows; from then on the chosen layers read out from the far state (last_loop rewinds loops > 0, see dory_o1.c).
 * Memory: the chosen slots' exact caches are cut to min(n_ctx, seal_at) rows (the exact prefill never goes past the
 * seal: cmf_dory_forward splits calls there); a query trace of that many rows / qt_stride × n_heads·head_dim floats
 * per slot; the operator states. A spec that chooses no layer ("off") leaves the session exact (s->o1 NULL).
 * Errors: CMF_E_ARG (not fresh, already on, bad spec naming the layer, params
 * out of range), CMF_E_NOMEM; the session is unchanged on error. */
cmf_status cmf_dory_o1_enable(cmf_dory_state *s, const char *layers, int m, int window, int sink, int rect,
                              int qt_stride, int seal_at);
void cmf_dory_o1_free(cmf_dory_o1 *o);
/* The far-field spec's choice over a Dory layer pattern (n_layers chars of 'S', '*', '-'), by the rules of
 * cmf_dory_o1_enable: on[l] = 1 for each converted physical sub-layer (all full-attention ones for "all", the last
 * N of them for "deepN", none for "off"). Used at run time and by `cmf convert --o1` to check the file hint.
 * Errors: CMF_E_ARG naming the spec or the sub-layer (sliding, MLP, out of range), CMF_E_NOMEM. */
cmf_status cmf_dory_o1_layers(const char *pattern, int n_layers, const char *spec, uint8_t *on);
/* Back to an empty, unsealed far field (with cmf_dory_state_reset). */
void cmf_dory_o1_reset(cmf_dory_o1 *o);
/* Hooks of the forward (dory_forward.c): begin seals when due before a call of n tokens; attend handles the
 * attention of KV slot kv_slot at recurrent loop `loop` for the n rows at pos0 (q/k/v in s->q/k/v, output into
 * s->att) and returns 1, or records the query trace and returns 0 (the caller then attends exactly); end returns
 * the first operator failure of the call. */
cmf_status cmf_dory_o1_begin(cmf_dory_state *s, int n);
/* The part of a chunk of n tokens that may run before the seal: n, or fewer so that an unsealed prefill stops at
 * seal_at rows (the next chunk then seals first). */
int cmf_dory_o1_clip(const cmf_dory_state *s, int n);
int cmf_dory_o1_attend(cmf_dory_state *s, int kv_slot, int loop, int n, int pos0);
cmf_status cmf_dory_o1_end(cmf_dory_state *s);
/* Introspection: sealed yet; number of far slots; the operator state of slot i, KV head g (NULL when out of range). */
int cmf_dory_o1_sealed(const cmf_dory_state *s);
int cmf_dory_o1_slots(const cmf_dory_state *s);
const cmf_o1 *cmf_dory_o1_state(const cmf_dory_state *s, int i, int kv_head);

/* The last position's logits of the last call ([vocab], owned by the state). */
const float *cmf_dory_logits(const cmf_dory_state *s);

#endif
