/* model.h — the decoder-only transformer families cmf runs (Llama/Mistral/SmolLM, Qwen2/2.5/3, Gemma 2/3,
 * Phi-3) as one forward pass whose family differences are data: llama2.c's trio of
 *   cmf_config  (hyperparameters from the CMF header, CMF_FORMAT.md §1.4 / §5.2),
 *   cmf_layer / cmf_model weights (views into the mapped file, nothing copied),
 *   cmf_session (activations and the KV cache, allocated once when the session is created). */
#ifndef CMF_MODEL_H
#define CMF_MODEL_H

#include <pthread.h>
#include <stdint.h>

#include "backend/backend.h"
#include "backend/cpu/ops.h"
#include "backend/cpu/threadpool.h"
#include "cmf.h"
#include "format/format.h"
#include "model/o1.h"

#define CMF_MAX_LAYERS 1024

typedef enum { CMF_ACT_SILU, CMF_ACT_GELU_TANH } cmf_act;
typedef enum { CMF_ROPE_HALF, CMF_ROPE_INTERLEAVED } cmf_rope_pairing;

typedef struct cmf_config {
    char arch_name[64];
    int hidden_size, intermediate_size, n_layers, n_heads, n_kv_heads, head_dim, vocab_size;
    int max_position_embeddings;
    float rms_norm_eps;
    int gemma_norm;               /* norm_style "gemma": x̂·(1+w) */
    cmf_act act;                  /* FFN activation of the gate branch */
    float rope_theta;             /* global layers */
    float rope_local_theta;       /* sliding layers (Gemma 3 rope_local_base_freq); = rope_theta when unset */
    int rot_dim;                  /* rotary dims per head: floor(head_dim * partial_rotary_factor) */
    cmf_rope_pairing rope_pairing;
    /* rope_scaling (our header extension arch.rope_scaling): "llama3" or "linear"; factor 0 = none */
    int rope_scaling_llama3;
    float rope_factor, rope_low_freq_factor, rope_high_freq_factor;
    int rope_original_max_pos;
    /* arch.yarn (CMF_FORMAT.md §1.4; transformers _compute_yarn_parameters): YaRN inverse frequencies, a ramp
     * between interpolated (divided by yarn_factor) and original frequencies over the dims whose rotation count in
     * the original window lies between beta_slow and beta_fast; yarn_factor 0 = none. yarn_attention_factor
     * scales cos/sin (folded into attn_scale as its square: needs rot_dim == head_dim unless it is 1). */
    float yarn_factor, yarn_beta_fast, yarn_beta_slow, yarn_attention_factor;
    int yarn_original_max_pos, yarn_truncate;
    int local_rope_unscaled;      /* Gemma 3: rope_local_base_freq set, sliding layers use plain RoPE (as HF) */
    float embed_multiplier;       /* Gemma: sqrt(hidden_size) */
    float attn_scale;             /* 1/sqrt(query_pre_attn_scalar or head_dim) */
    float attn_softcap, final_softcap; /* 0 = off; else C·tanh(x/C) */
    int sliding_window;           /* 0 = none */
    uint8_t *is_sliding;          /* [n_layers] 1 = SlidingAttention */
    int tie_word_embeddings;
} cmf_config;

/* One transformer block's weights. Optional pieces are NULL / has_* = 0. */
typedef struct cmf_layer {
    const float *attn_norm;        /* input_layernorm [hidden] (decoded to f32 at load) */
    cmf_weight wq, wk, wv, wo;     /* views (Phi-3's fused qkv_proj is split into three row views) */
    const float *bq, *bk, *bv;     /* Qwen2 biases, or NULL */
    const float *q_norm, *k_norm;  /* Qwen3/Gemma3 per-head norms [head_dim], or NULL */
    const float *post_attn_norm;   /* Gemma sandwich: norm of the attention output, or NULL */
    const float *ffn_norm;         /* pre-FFN norm: post_attention_layernorm (Llama) / pre_feedforward (Gemma) */
    const float *post_ffn_norm;    /* Gemma sandwich, or NULL */
    cmf_weight w_gate, w_up, w_down; /* Phi-3's fused gate_up_proj is split into two row views */
} cmf_layer;

/* One complete set of weights: the backbone's, or a skill's (CMF_FORMAT.md §3.1: each tensor N is
 * `skill.<id>.N` when the file has it, else the backbone's N; presence checks use backbone names). */
typedef struct cmf_weights {
    char skill[64];               /* "" for the backbone */
    cmf_weight embed;             /* [vocab, hidden] */
    cmf_weight lm_head;           /* = embed when tied */
    const float *final_norm;      /* [hidden] */
    cmf_layer *layers;            /* [n_layers] */
    float *small;                 /* f32 copies of the 1-D tensors (norms, biases), one allocation */
    size_t n_small;               /* floats of `small` in use */
} cmf_weights;

#define CMF_MAX_SKILL_SETS 64

struct cmf_model {
    cmf_file *file;
    cmf_config cfg;
    cmf_weights base;             /* the backbone */
    cmf_weights *skill_sets[CMF_MAX_SKILL_SETS]; /* built on first use, kept until the model is freed */
    int n_skill_sets;
    pthread_mutex_t skill_mu;     /* guards skill_sets */
    int n_threads;
    int cache_type;               /* cmf_model_params.cache_type (the cuda backend's KV element type) */
    int32_t *eos_ids;
    int n_eos;
    int32_t bos_id;
    cmf_tokenizer *tokenizer;     /* NULL when the file has no vocab section or it failed to load */
    char *tokenizer_error;        /* why tokenizer is NULL (malloc'd), or NULL */
    float *rope_inv_freq;         /* [rot_dim/2] global layers, then [rot_dim/2] sliding layers */
    struct cmf_dory *dory;        /* Dory (looped nGPT, dory.c) instead of the transformer above; else NULL */
    struct cmf_masks *masks;      /* task masks of the file (src/skills), NULL when it has none */
    cmf_backend *be;              /* where the forward runs (backend.h): cpu, or cuda (owned) */
    /* Tensor parallelism (src/tp/tp.h). On the model the caller loaded (the "front"): tp holds its N rank models
     * and the forward runs there; NULL when not split. On a rank model: tp_of is its group, tp_rank its index. */
    struct cmf_tp *tp;
    struct cmf_tp *tp_of;
    int tp_rank;
};

/* Activation buffers and threads for one forward call over up to n_batch tokens from up to n_seq sessions
 * (the public cmf_batch; a session also owns a private one for cmf_session_prefill/decode, made on first use).
 * x .. hb2 and head_in are memory of the model's backend (device memory for cuda); the rest is host memory.
 * pool is NULL for backends other than cpu. */
struct cmf_batch {
    const cmf_model *m;
    cmf_pool *pool;
    int n_batch, n_seq;
    float *x, *xb, *q, *k, *v, *att, *hb, *hb2; /* [n_batch][...] */
    int *pos;                                   /* [n_batch]: position of each token in its session */
    float *head_in, *head_out;                  /* [n_seq][hidden] (backend), [n_seq][vocab] (host): head rows */
    int *head_tok;                              /* [n_seq]: which token each head row belongs to */
    float **head_dst;                           /* [n_seq]: scratch, each head row's session dlogits */
    cmf_session **sealed;                       /* [n_seq]: scratch for the O(1) far-field pass */
    cmf_batch **tp_rank;                        /* TP front batch: one batch per rank model (src/tp); else NULL */
};

/* The O(1) far field of a session (DORY.md §3.1): full-attention layers listed in `on` keep an exact KV cache
 * and a query trace only for the first `cap` positions (the prompt); when the prompt ends (the first
 * single-token step) or reaches `cap` rows, each such layer's (layer, KV head) state is sealed from them, and
 * every later position of that layer is read out from the constant-size state instead of the KV cache. */
typedef struct cmf_o1_sess {
    cmf_o1_params params;  /* m, window, sink, rect, scale; n_heads = the GQA group */
    uint8_t *on;           /* [n_layers] */
    int n_on;
    cmf_o1 **st;           /* [n_layers * n_kv_heads]; NULL for layers that are off */
    float **qtrace;        /* [n_layers] -> [cap][n_heads*head_dim] post-norm post-RoPE queries, or NULL */
    int cap;               /* the seal length */
    int sealed;
} cmf_o1_sess;

/* A sequence: its KV cache and position. */
struct cmf_session {
    cmf_model *m;
    const cmf_weights *w;     /* backbone or the active skill */
    int n_ctx, pos;
    float *k_cache, *v_cache; /* cpu: per layer l, kv_rows[l] rows of n_kv_heads*head_dim f32 from kv_off[l] */
    void *dk, *dv;            /* cuda: the same rows as f16 in device memory (k_cache/v_cache are NULL) */
    size_t *kv_off;           /* [n_layers] offsets in floats */
    int *kv_rows;             /* [n_layers]: n_ctx, or the seal length for O(1) layers */
    cmf_o1_sess *o1;          /* NULL when the far field is off */
    struct cmf_dory_state *dory; /* Dory sessions: the whole state lives here (k_cache etc. unused) */
    const struct cmf_task_mask *mask; /* the active task mask (CMF_FORMAT.md §1.7), NULL = dense */
    int *ffn_runs;            /* [n_layers] offsets into runs: layer l's runs are runs[2*ffn_runs[l] ..] */
    int *runs;                /* (start, length) pairs of active FFN neurons, layer after layer; -1 ends a layer */
    int dory_loops;              /* loops per token (0 = the config's) */
    float dory_gate;             /* Conf early-exit threshold for decode; 0 = off */
    struct cmf_dory_probe *dory_recon; /* Recon early-exit probe for decode (owned); NULL = off */
    float *logits;            /* [vocab]: the logits after this session's last processed token (host) */
    float *dlogits;           /* [vocab] backend memory, on backends with head_keep (cuda) without TP; else NULL */
    int logits_dev;           /* 1: the last forward left its logits in dlogits only (s->logits is stale until
                               * cmf_session_logits downloads them) */
    cmf_batch *own;           /* private workspace for cmf_session_prefill/decode (lazily created) */
    cmf_session **tp_rank;    /* TP front session: one session per rank model holding its KV heads; else NULL */
};

/* Key rows the CPU attention of a call can read for session s's `count` tokens (session.c), i.e. the score
 * entries it needs per thread (attn_worker: one float per row read), so the size of the batch pool's per-thread
 * scratch: an exact full-attention layer reads every row up to the last token (pos + count), a sliding layer at
 * most sliding_window of them, a far-field layer at most the seal length before its seal and none after it (its
 * rows come from the constant state, o1.c). `sealing`: the session seals in this call, before the forward. The
 * result only grows with the position, so a session converted with --o1 all keeps a scratch of the seal length
 * (or of the sliding window) for its whole life. Used by batch_run (session.c) and the TP forward (tp.c). */
int cmf_session_attn_rows(const cmf_session *s, int count, int sealing);

/* The loader's own checks without building a model: the header's arch (cmf_config_from_header) and every tensor
 * the forward reads present with its expected shape (build_weights: 2-D weights are only viewed, 1-D tensors are
 * decoded into a scratch arena that is freed), with no backend, repacking or tokenizer. Dory files and standalone
 * skill files are not checked here (CMF_OK). Used by the converters before a file is renamed into place, so that
 * convert and load cannot disagree. Errors: those cmf_model_load would report for the same file. */
cmf_status cmf_model_check_file(const cmf_file *f);

/* Reads and validates `arch` (and tokenizer_config) of a header into cfg. Errors: CMF_E_FORMAT naming the key. */
cmf_status cmf_config_from_header(const cJSON *header, cmf_config *cfg);
void cmf_config_free(cmf_config *cfg);

/* RoPE inverse frequencies for rot_dim dims and base theta; inv_freq has rot_dim/2 entries. With scaled != 0 the
 * config's scaling is applied (llama3: Meta's Llama 3.1 frequency smoothing; linear: divide by factor; yarn: the
 * YaRN ramp of transformers' _compute_yarn_parameters), else plain theta^(-2i/rot_dim) (Gemma 3's local layers). */
void cmf_rope_inv_freq(const cmf_config *cfg, float theta, int scaled, float *inv_freq);

/* The forward pass (forward.c): token i goes to session seqs[i] at that session's next position (tokens of one
 * session in order; sessions may interleave). Appends every token's k/v to its session's KV cache, advances each
 * session's pos, and writes each session's last-token logits to its ->logits; when all_logits is not NULL it also
 * receives [n][vocab] logits of every token. Preconditions (checked by cmf_batch_run): n <= b->n_batch, at most
 * b->n_seq distinct sessions, every session has room, ids in range, b->pool scratch reserved. Every op runs on
 * m->be. Errors: those of the backend's ops (cpu: none; cuda: CMF_E_IO for a device fault); on error no
 * session's pos moves. */
cmf_status cmf_forward(cmf_batch *b, cmf_session *const *seqs, const int32_t *tokens, int n, float *all_logits);

#endif
