/*
 * cmf.h — the public C API of cmf, a runtime for language models stored in CMF v2 files.
 *
 * Data flows one way: file -> model -> session -> tokens/text.
 *
 *   cmf_model *m; cmf_session *s;
 *   if (cmf_model_load("model.cmf", NULL, &m) != CMF_OK) { puts(cmf_last_error()); ... }
 *   cmf_session_new(m, 2048, &s);
 *   cmf_session_prefill(s, ids, n, NULL);        // logits of the last position: cmf_session_logits(s)
 *   cmf_session_decode(s, next_id);              // one more token
 *   cmf_session_free(s); cmf_model_free(m);
 *
 * Errors: every call that can fail returns a cmf_status; CMF_OK is 0. The message of the most recent failure on
 * the calling thread is returned by cmf_last_error() (SQLite's errmsg convention, kept per thread). The library
 * never prints, never exits and never aborts on bad input.
 *
 * NULL arguments: a call returning cmf_status answers CMF_E_ARG (message naming the call) for a NULL pointer that
 * is not documented as optional, and then writes NULL to its output pointer when that one is given. The *_free /
 * *_close calls accept NULL. Getters given a NULL object return a neutral value and touch nothing: 0 for counts
 * and sizes (vocab size, n_ctx_train, tp, task masks, state bytes, o1 layers, batch max tokens, gate share),
 * -1 for ids and positions (bos id, session pos, session n_ctx, token id), NULL for pointers (strings,
 * tokenizer, logits, eos ids); void calls do nothing. tests/api/test_api_null.c calls every function of this
 * header with each pointer argument NULL.
 *
 * Lifetimes and free order: a model owns what its getters return (strings, tokenizer, eos ids). Sessions,
 * batches and detok streams over its tokenizer keep pointers into the model: free them all BEFORE
 * cmf_model_free (using any of them after the model is freed is undefined behavior, as is freeing an object
 * twice). A sampler is independent of the model. Strings and id arrays returned through char ** / int32_t **
 * outputs are malloc'd and owned by the caller (free()). A tokenizer from cmf_tokenizer_load is freed with
 * cmf_tokenizer_free after its streams.
 *
 * Linking: `cmake --install BUILD --prefix P` installs P/include/cmf.h, P/lib/libcmf.a, P/bin/cmf and
 * P/lib/pkgconfig/cmf.pc; then `cc app.c $(pkg-config --cflags --libs cmf)` (with PKG_CONFIG_PATH=P/lib/pkgconfig
 * for a private prefix). Without pkg-config: `cc app.c -IP/include P/lib/libcmf.a -lcjson -lpcre2-8 -lutf8proc -lm
 * -lpthread -ldl` (a CUDA build adds the CUDA libraries that cmf.pc lists). The library is C11; this header also
 * compiles as C++ (extern "C").
 *
 * Thread safety: a cmf_model is read-only after load and may be shared by sessions on several threads; a
 * cmf_session is used by one thread at a time.
 */
#ifndef CMF_H
#define CMF_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define CMF_VERSION_STRING "0.1.0"

typedef enum cmf_status {
    CMF_OK = 0,
    CMF_E_IO = 1,          /* open/read/write/mmap failed */
    CMF_E_FORMAT = 2,      /* malformed or corrupt input (file, JSON, tensor payload) */
    CMF_E_UNSUPPORTED = 3, /* well-formed but not supported (feature bit, dtype, architecture) */
    CMF_E_NOMEM = 4,       /* allocation failed */
    CMF_E_ARG = 5,         /* bad argument from the caller (NULL, out of range, prompt longer than context) */
    CMF_E_INTEGRITY = 6,   /* hash mismatch found by verify */
    CMF_E_NOT_FOUND = 7,   /* a named tensor, file or token that does not exist */
} cmf_status;

/* The message of the last failure on this thread ("" if none). Valid until the next failing call on this thread. */
const char *cmf_last_error(void);

/* A short constant name for a status ("ok", "io error", ...). Never NULL. */
const char *cmf_status_str(cmf_status st);

/* ---------------------------------------------------------------------------------------------------------------
 * Files: the CMF v2 container (spec: CMF_FORMAT.md §1).
 * ------------------------------------------------------------------------------------------------------------- */
typedef struct cmf_file cmf_file;

/* Maps `path` read-only and checks everything open() must check (CMF_FORMAT.md §1.11): envelope, section bounds,
 * header JSON with its required keys, directory, dtype sizes, masks and index sections. Hashes are not checked
 * here (see cmf_file_verify). On success *out owns the mapping; free it with cmf_file_close.
 * Errors: CMF_E_IO (cannot open/map), CMF_E_FORMAT (corrupt; the message names the field and its offset),
 * CMF_E_UNSUPPORTED (version, feature bit). */
cmf_status cmf_file_open(const char *path, cmf_file **out);

/* Unmaps and frees. NULL is allowed. */
void cmf_file_close(cmf_file *f);

/* Recomputes the header hash, directory hash, section hashes and every tensor's hash64 (§1.10–1.11).
 * Returns CMF_OK when intact; CMF_E_INTEGRITY when any hash differs. If `report` is not NULL it receives a
 * malloc'd text (one problem per line, "" when intact) that the caller frees. */
cmf_status cmf_file_verify(const cmf_file *f, char **report);

/* ---------------------------------------------------------------------------------------------------------------
 * Models and sessions.
 * ------------------------------------------------------------------------------------------------------------- */
typedef struct cmf_model cmf_model;
typedef struct cmf_session cmf_session;

typedef struct cmf_model_params {
    /* Every field is checked at load: a value outside its range below is CMF_E_ARG naming the field. */
    int n_threads; /* worker threads for matrix products, 0..4096; 0 = number of online CPUs */
    /* Tensor parallelism (Megatron-LM style, src/tp/tp.h): split every layer's heads, FFN neurons and the lm_head
     * vocabulary over `tp` ranks with one all-reduce after each attention and MLP block. 0 = the environment
     * variable CMF_TP (unset or empty: 1; anything but a whole integer in [1, 64] is CMF_E_ARG); 1 = not split (the plain path). With the backend "cpu" the ranks are threads of
     * this process (n_threads shared among them); with "cuda" / "cuda:k" rank r runs on device k+r (NCCL
     * all-reduce; needs a build with CMF_NCCL). n_heads and intermediate_size must divide by tp, and n_kv_heads and
     * tp must divide one another (CMF_E_UNSUPPORTED naming the size otherwise); the O(1) far field, task masks,
     * skills and Dory models are not split (CMF_E_UNSUPPORTED). Range 0..64. */
    int tp;
    /* KV cache element type on a GPU backend (as llama.cpp's --cache-type-k / -v), enum cmf_cache_type:
     * CMF_CACHE_DEFAULT (0) = f16; CMF_CACHE_F32 keeps K and V as computed (twice the cache memory and bandwidth)
     * and computes the prefill products of f32/f16/bf16 weights with f32 activations instead of the f16-operand
     * GEMM (slower prefill), so the GPU follows the CPU closely. The CPU backend always keeps an f32 cache and
     * ignores this field; so do Dory models (their own f32 cache). Tensor-parallel CUDA ranks follow it. Any value
     * other than the three of enum cmf_cache_type is CMF_E_ARG. */
    int cache_type;
} cmf_model_params;

/* KV cache element types (cmf_model_params.cache_type). */
enum cmf_cache_type { CMF_CACHE_DEFAULT = 0, CMF_CACHE_F16 = 1, CMF_CACHE_F32 = 2 };

/* Opens a CMF file and builds a model on the CPU: weights are read in place from the mapping, except q4-family and
 * q8 matrices, which are rewritten once into the CPU kernels' interleaved layout (anonymous memory about the size
 * of those tensors; CMF_CPU_REPACK=0 reads them in place too).
 * `params` may be NULL for defaults. On success *out owns the model; free it with cmf_model_free after every
 * session, batch and detok stream made from it. Errors: CMF_E_ARG (NULL path or out, a params field out of
 * range), those of cmf_file_open, plus CMF_E_UNSUPPORTED for an architecture or dtype the runtime cannot run and
 * CMF_E_FORMAT for missing or mis-shaped tensors (message names the tensor). */
cmf_status cmf_model_load(const char *path, const cmf_model_params *params, cmf_model **out);

/* cmf_model_load on a chosen backend: "cpu"; "cuda" or "cuda:N" (device N; a CUDA device is required: no device,
 * too little device memory, or a build without CUDA is an error naming the reason); "auto" (CUDA device 0 when
 * usable, else the CPU); NULL = the environment: CMF_GPU=1 means "cuda", unset or 0 "cpu",
 * any other value is taken as the name (cmf_model_load is this call with NULL). With CUDA, weights are uploaded to the device at load
 * (skills on first use), the KV cache is on the device (f16, or f32: cmf_model_params.cache_type), and task
 * masks and the O(1) far field are CMF_E_UNSUPPORTED when a session would use them; Dory files run only on the CPU (CMF_E_UNSUPPORTED).
 * Errors: those of cmf_model_load, CMF_E_ARG for an unknown backend name. */
cmf_status cmf_model_load_on(const char *path, const cmf_model_params *params, const char *backend,
                             cmf_model **out);

/* Frees the model and its file mapping. NULL is allowed. Sessions, batches and detok streams made from it must be
 * freed first (see "Lifetimes" above). */
void cmf_model_free(cmf_model *m);

/* Geometry of a loaded model (NULL model: 0 / NULL). Strings are owned by the model. */
int cmf_model_vocab_size(const cmf_model *m);   /* rows of the lm_head (logits per position) */
/* The context the model was trained for: arch.max_position_embeddings, or with YaRN rope scaling (arch.yarn)
 * factor x original_max_position_embeddings when that is larger (as vLLM sizes a YaRN model's context). */
int cmf_model_n_ctx_train(const cmf_model *m);
const char *cmf_model_arch(const cmf_model *m); /* header arch.arch_name ("llama", "qwen3", ...) */
/* The backend the model runs on: "cpu" or "cuda" (cmf_model_load_on). */
const char *cmf_model_backend(const cmf_model *m);
/* One line describing it ("cpu", "cuda: NVIDIA H200, cc 9.0, ..."); owned by the model. */
const char *cmf_model_backend_desc(const cmf_model *m);
/* The tensor-parallel ranks the model runs on (cmf_model_params.tp / CMF_TP after validation); 1 without TP,
 * 0 for a NULL model. */
int cmf_model_tp(const cmf_model *m);

/* End-of-sequence ids from header.tokenizer_config.eos_token_ids (§1.8), owned by the model. *n (when `n` is not
 * NULL) receives the count. NULL model: returns NULL and *n = 0. */
const int32_t *cmf_model_eos_ids(const cmf_model *m, int *n);

/* BOS id, or -1 when the file has none (or m is NULL). */
int32_t cmf_model_bos_id(const cmf_model *m);

/* Creates a session with a KV cache for `n_ctx` positions (allocated here, once). n_ctx <= 0 uses the model's
 * trained context. The session points into `m`: free it before the model. Errors: CMF_E_NOMEM, CMF_E_ARG (NULL m
 * or out, n_ctx over 2^24). */
cmf_status cmf_session_new(cmf_model *m, int n_ctx, cmf_session **out);

/* Frees the session (KV cache, its own workspace). NULL is allowed. */
void cmf_session_free(cmf_session *s);

/* Session options. Zero-initialize, then set what you need. Numeric fields out of range (a negative o1_* count,
 * loops outside 0..16, a negative or NaN gate, a NaN gate_recon_bias) are CMF_E_ARG naming the field. */
typedef struct cmf_session_params {
    int n_ctx;           /* KV positions; <= 0: the model's trained context */
    /* The O(1) far field (DORY.md §3.1): constant-memory attention for long contexts on full-attention layers:
     * a few exact sink keys, an exact recent window and a Nyström landmark sketch of everything older under one
     * softmax denominator; weights unchanged. o1 = NULL: the environment (CMF_O1, CMF_O1_M/_WINDOW/_SINK/_RECT;
     * CMF_O1=off disables) or else the file hint provenance.o1_attn decide; "off"; "all"; "deepN" (the N deepest
     * full-attention layers); "i,j,k". The prompt (up to o1_seal positions) runs exactly; the state is sealed at
     * the first single-token step (or when the prompt reaches o1_seal) and every later position of those layers
     * is read out from it; their KV cache holds only o1_seal rows. */
    const char *o1;
    int o1_m;            /* landmarks; 0 = 32 */
    int o1_window;       /* exact window rows; 0 = 128 */
    int o1_sink;         /* exact sink rows (used when o1_sink_set); default 4 */
    int o1_sink_set;
    int o1_seal;         /* seal length; 0 = 32768; negative: CMF_E_ARG */
    const char *o1_rect; /* "agg" (default) or "fm" */
    /* Looped models (Dory, DORY.md §1.7–§2); an error for other models when set. */
    int loops;                /* recurrent passes per token, 1..16; 0 = the config's n_recurrent_loops */
    const char *dory_kv_mode; /* "per_loop" | "last_loop"; NULL = the config's (last_loop when gate > 0) */
    float gate;               /* Conf early exit for decode steps with 2 loops: accept one pass when the top
                               * probability reaches it; 0 = off */
    /* Task mask (CMF_FORMAT.md §1.7, §3.4) of a file with a masks section: a mask name, "off"/"none" = dense, or
     * NULL = the reference's default (the Fallback-priority mask, dense when CMF_TASK=off). Dead layers are
     * skipped, dead heads are not computed, dead FFN neurons' gate/up rows are not computed. */
    const char *task;
    /* Recon early-exit gate of looped models (DORY.md §2 "Recon(probe, bias)"; the probe is a linear score of the
     * state h after the first recurrent pass, score = dot(w, h) with w = dory_recon.weight [hidden_size]): every decode
     * step (a single-token cmf_session_prefill/decode call) runs one recurrent pass when score >= bias, else two;
     * prompts (calls of several tokens) run `loops`. NULL = off; "model" = the file's own probe (tensor
     * dory_recon.weight and header arch.dory.recon_bias, docs/HEADER_KEYS.md; CMF_E_NOT_FOUND when the file has
     * none); any other string = the path of a safetensors probe file holding dory_recon.weight [hidden_size] and
     * dory_recon.bias [1]. Exclusive with `gate` (CMF_E_ARG); needs the last_loop KV mode (chosen when dory_kv_mode
     * is NULL) and at least 2 loops; works with the O(1) far field (the Conf gate does not: CMF_E_UNSUPPORTED). */
    const char *gate_recon;
    int gate_recon_bias_set; /* when non-zero, gate_recon_bias replaces the probe's bias */
    double gate_recon_bias;  /* +inf: every step takes two passes (= loops 2); -inf: one pass (= loops 1) */
} cmf_session_params;

/* cmf_session_new with options. Errors: as cmf_session_new; CMF_E_ARG for a malformed o1 spec (message names
 * it), CMF_E_UNSUPPORTED for o1 on a model with attention soft-capping or together with the Conf gate (Dory);
 * for gate_recon those of reading the probe (CMF_E_IO, CMF_E_FORMAT naming the tensor), CMF_E_NOT_FOUND when
 * "model" has none, CMF_E_ARG with gate also set or under the per_loop KV mode. */
cmf_status cmf_session_new_ex(cmf_model *m, const cmf_session_params *p, cmf_session **out);

/* Name of the session's active task mask ("" = dense; NULL session: NULL), and the number of task masks in the
 * model's file (NULL model: 0). */
const char *cmf_session_task(const cmf_session *s);
int cmf_model_n_task_masks(const cmf_model *m);

/* Bytes of per-sequence state: KV cache + O(1) far-field states and query trace (NULL session: 0). A far-field
 * layer keeps min(n_ctx, seal) exact rows plus, until the seal, a query trace of as many rows (freed at the seal),
 * so with n_ctx <= seal its state exceeds the exact cache's; the far field saves memory beyond the seal. */
size_t cmf_session_state_bytes(const cmf_session *s);

/* Number of attention KV caches running the O(1) far field (0 = exact attention everywhere): one per converted
 * layer; for Dory one per converted (full layer, loop slot): loops x layers under per_loop. NULL session: 0. */
int cmf_session_o1_layers(const cmf_session *s);

/* Looped models with the early-exit gate: share of gated decode tokens that took one pass, in [0, 1];
 * *n_tokens (may be NULL) receives how many were gated. 0 for other sessions and for NULL. */
double cmf_session_gate_one_pass_share(const cmf_session *s, long *n_tokens);

/* Selects the skill whose weights this session uses from now on (CMF_FORMAT.md §3.1: each tensor N is replaced
 * by `skill.<id>.N` when the file has it). "none" or NULL = the backbone. A skill's weight views are built on
 * first use and shared by all sessions; switching needs no reload, and an unused skill's tensors are never
 * touched. The KV cache is kept: call cmf_session_reset when the new skill should not see the old positions.
 * Errors: CMF_E_NOT_FOUND for an id neither in header.skills nor as a tensor prefix, CMF_E_ARG for a NULL session
 * or a malformed id, CMF_E_FORMAT for a skill tensor of the wrong shape (message names it). */
cmf_status cmf_session_set_skill(cmf_session *s, const char *skill);

/* The session's active skill id ("" for the backbone; NULL session: NULL). */
const char *cmf_session_skill(const cmf_session *s);

/* Forgets all positions (the KV cache is reused); cmf_session_logits is NULL until the next prefill. NULL: no-op. */
void cmf_session_reset(cmf_session *s);

/* Number of positions already in the KV cache, and the session's capacity (NULL session: -1). */
int cmf_session_pos(const cmf_session *s);
int cmf_session_n_ctx(const cmf_session *s);

/* Runs `n` tokens through the model at positions pos..pos+n-1 as one batch (prefill) and appends them to the KV
 * cache. If `all_logits` is not NULL it receives n*vocab floats (row-major, one row per position); the last
 * row is always available from cmf_session_logits. Errors: CMF_E_ARG for a NULL session, NULL tokens, n <= 0,
 * pos+n over n_ctx or an id out of range (nothing is appended then; messages start with "prefill:"). */
cmf_status cmf_session_prefill(cmf_session *s, const int32_t *tokens, int n, float *all_logits);

/* One decode step: prefill of a single token (errors as cmf_session_prefill, messages start with "decode:"). */
cmf_status cmf_session_decode(cmf_session *s, int32_t token);

/* Logits of the last processed position: vocab floats owned by the session, valid until the next call that
 * changes the session. NULL (and cmf_last_error() says why) for a NULL session and while the session holds no
 * position: before its first prefill/decode, after cmf_session_reset or a truncate to 0. On the CUDA backend the
 * logits of a forward stay on the device until asked for: the first call after a forward downloads the row (it
 * waits for the device; later calls return the same copy), and a device fault there also gives NULL. */
const float *cmf_session_logits(const cmf_session *s);

/* Keeps the first `n_keep` positions of the KV cache and forgets the rest, so that a new sequence sharing that
 * prefix only needs its differing suffix prefilled (chat turns reuse the cache this way). 0 <= n_keep <= pos;
 * the logits of cmf_session_logits are stale until the next prefill/decode. Errors: CMF_E_ARG when n_keep is
 * outside [0, pos] (nothing changes then). */
cmf_status cmf_session_truncate(cmf_session *s, int n_keep);

/* ---------------------------------------------------------------------------------------------------------------
 * Batches: one forward over tokens of several sessions (continuous batching). The matrix products run once for
 * all tokens of the batch (matrix-matrix); attention reads each token's own session's KV cache.
 * ------------------------------------------------------------------------------------------------------------- */
typedef struct cmf_batch cmf_batch;

/* A workspace (activations for max_tokens tokens from up to max_seqs sessions, and worker threads; allocated
 * here, once). The batch points into `m`: free it before the model. Errors: CMF_E_ARG (NULL m or out; need
 * 1 <= max_seqs <= max_tokens <= 65536), CMF_E_NOMEM. */
cmf_status cmf_batch_new(const cmf_model *m, int max_tokens, int max_seqs, cmf_batch **out);
/* Frees the workspace. NULL is allowed. */
void cmf_batch_free(cmf_batch *b);
/* The max_tokens given to cmf_batch_new (NULL: 0). */
int cmf_batch_max_tokens(const cmf_batch *b);

/* Runs tokens[i] for session seqs[i] at that session's next position, for i < n (a session's tokens in order;
 * sessions may repeat and interleave, e.g. one decode token each for 8 sessions plus a 100-token prompt chunk of
 * a ninth). Afterwards each session's pos has advanced and cmf_session_logits(s) holds the logits after its last
 * token of the batch. Errors (nothing changes then): CMF_E_ARG for NULL b (or NULL seqs / tokens with n > 0), when n exceeds max_tokens, more than max_seqs
 * sessions appear, a session lacks room, an id is out of the vocabulary, or a session belongs to another model.
 * A batch is used by one thread at a time; its sessions must not be used elsewhere during the call. */
cmf_status cmf_batch_run(cmf_batch *b, cmf_session *const *seqs, const int32_t *tokens, int n);

/* ---------------------------------------------------------------------------------------------------------------
 * Tokenizer (tokenizer.json, stored verbatim in the file's vocab section).
 * ------------------------------------------------------------------------------------------------------------- */
typedef struct cmf_tokenizer cmf_tokenizer;

/* The model's tokenizer, or NULL when the file has no vocab section, its tokenizer failed to load (or m is NULL).
 * Owned by the model. A NULL tokenizer passed on to cmf_tokenize, cmf_detokenize or cmf_detok_stream_new gives
 * CMF_E_ARG with "the tokenizer is NULL" in cmf_last_error; cmf_model_tokenizer_error says why it is NULL. */
const cmf_tokenizer *cmf_model_tokenizer(const cmf_model *m);

/* Why cmf_model_tokenizer returned NULL: the tokenizer's load error, or "" when the file has no vocab section
 * (NULL model: NULL). */
const char *cmf_model_tokenizer_error(const cmf_model *m);

/* Parses a Hugging Face tokenizer.json (`json` need not be NUL-terminated). Errors: CMF_E_FORMAT for malformed
 * JSON, CMF_E_UNSUPPORTED for a component the tokenizer does not implement (the message names it), CMF_E_ARG for
 * NULL json or out. */
cmf_status cmf_tokenizer_load(const char *json, size_t len, cmf_tokenizer **out);
/* Frees a tokenizer from cmf_tokenizer_load (never the model's own). NULL is allowed. */
void cmf_tokenizer_free(cmf_tokenizer *t);

/* Encodes UTF-8 text as HF tokenizers' encode(text, add_special_tokens) does: added tokens matched first, then
 * normalizer, pre-tokenizer, model, and (when add_special) the post-processor's template. *ids receives a
 * malloc'd array the caller frees; *n its length. Errors: CMF_E_ARG (NULL t, ids or n; NULL text with len > 0;
 * text that is not UTF-8, the message names the byte offset), CMF_E_NOMEM. */
cmf_status cmf_tokenize(const cmf_tokenizer *t, const char *text, size_t len, int add_special, int32_t **ids,
                        size_t *n);

/* Decodes ids to UTF-8 text (HF decode with skip_special_tokens as given). *text is malloc'd, NUL-terminated.
 * Ids that have no token (negative, at or past cmf_tokenizer_vocab_size, or a gap in the vocabulary) are skipped,
 * as HF tokenizers' decode skips ids its vocabulary lacks (tests/tokenizer/test_hf_refs checks this against HF
 * outputs): a generation loop must not fail on a sampled id of a padded lm_head. Validate ids against
 * cmf_tokenizer_vocab_size first for strictness; `cmf detokenize` does, and refuses an id past the vocabulary.
 * Errors: CMF_E_ARG (NULL t or text, NULL ids with n > 0), CMF_E_NOMEM. */
cmf_status cmf_detokenize(const cmf_tokenizer *t, const int32_t *ids, size_t n, int skip_special, char **text);

/* Ids the tokenizer knows: max(model ids, added ids) + 1 (NULL: 0). May be smaller than cmf_model_vocab_size
 * when the model's lm_head is padded. */
int cmf_tokenizer_vocab_size(const cmf_tokenizer *t);

/* Streaming decode (as HF tokenizers' DecodeStream): feed generated ids one at a time and get back only text
 * that is complete UTF-8; bytes of a character that spans tokens are held back until it is complete. */
typedef struct cmf_detok_stream cmf_detok_stream;
/* A stream over `t` (which must outlive it). Errors: CMF_E_ARG (NULL t or out), CMF_E_NOMEM. */
cmf_status cmf_detok_stream_new(const cmf_tokenizer *t, int skip_special, cmf_detok_stream **out);
/* Seeds an empty stream with context ids (e.g. the whole prompt; only its last 5 ids are kept) whose text is never
 * emitted, so that the first pushed id decodes as it does after them: a SentencePiece word's leading space is kept
 * (" upon" after "Once", not "upon"), as vLLM's incremental detokenizer seeds itself with the prompt's last 5.
 * Errors: CMF_E_ARG (NULL, or the stream already holds ids), CMF_E_NOMEM, a decode error. */
cmf_status cmf_detok_stream_prime(cmf_detok_stream *s, const int32_t *ids, size_t n);
/* Appends id; *text receives a malloc'd NUL-terminated string (possibly "") the caller frees. When the decode of
 * the window would rewrite text already returned (SentencePiece byte fallback turns a whole broken byte run into
 * U+FFFD, also a complete character streamed before it), the held-back ids are decoded on their own (lossy, as
 * flush does) instead: no error. An id without a token decodes to nothing, as in cmf_detokenize.
 * Errors: CMF_E_ARG (NULL s or text), CMF_E_NOMEM. */
cmf_status cmf_detok_stream_push(cmf_detok_stream *s, int32_t id, char **text);
/* Ends a stream: *text receives the bytes still held back (a character that never completed, decoded as HF's
 * lossy decode does, with U+FFFD), so that the concatenation of every push and the flush equals cmf_detokenize of
 * all ids — except where that decode rewrites text already streamed (SentencePiece byte fallback turns every
 * byte of a broken run into U+FFFD): then the held-back ids are decoded on their own. The stream is then empty
 * and may be reused. *text is malloc'd (possibly ""); the caller frees it.
 * Errors: CMF_E_ARG (NULL), CMF_E_NOMEM. */
cmf_status cmf_detok_stream_flush(cmf_detok_stream *s, char **text);
/* Frees a stream. NULL is allowed. */
void cmf_detok_stream_free(cmf_detok_stream *s);

/* Id of a token string (exact vocabulary or added-token match), or -1 (also for NULL t or token). */
int32_t cmf_tokenizer_token_id(const cmf_tokenizer *t, const char *token);

/* ---------------------------------------------------------------------------------------------------------------
 * Chat templates (src/template/chat.c): a conversation in OpenAI form -> the prompt text the model was trained on,
 * rendered with the file's Jinja chat template (header.tokenizer_config.chat_template, CMF_FORMAT.md §1.8) with
 * Hugging Face transformers' semantics (jinja2 with trim_blocks, lstrip_blocks, loopcontrols, raise_exception,
 * strftime_now and a json.dumps tojson; see src/template/template.h).
 * ------------------------------------------------------------------------------------------------------------- */

/* The file's chat template (header.tokenizer_config.chat_template), or NULL when it has none (or m is NULL).
 * Owned by the model. */
const char *cmf_model_chat_template(const cmf_model *m);

/* The template used when a file has none (CMF_FORMAT.md §1.8: the runtime falls back to ChatML): every message as
 * "<|im_start|>ROLE\nCONTENT<|im_end|>\n", then "<|im_start|>assistant\n" when add_generation_prompt is set.
 * A constant string. */
const char *cmf_chat_template_chatml(void);

/* How message content given as a list of parts ([{"type":"text","text":...}, ...]) reaches the template.
 * transformers passes it unchanged, so a template written for string content either fails ('+' of a str and a
 * list) or prints the list's Python repr; serving runtimes (vLLM's "string" content format) join the text parts
 * with "\n" instead. */
typedef enum cmf_chat_content {
    CMF_CHAT_CONTENT_AUTO = 0, /* lists stay lists when the template loops over a message's content (it handles
                                * parts), else they are joined as CMF_CHAT_CONTENT_STRING does */
    CMF_CHAT_CONTENT_STRING,   /* text parts joined with "\n"; a part of another type is an error */
    CMF_CHAT_CONTENT_PARTS,    /* passed unchanged (exactly what transformers renders) */
} cmf_chat_content;

typedef struct cmf_chat_params {
    const char *messages_json; /* required: JSON array of {"role", "content"?, "tool_calls"?, ...} objects */
    const char *tools_json;    /* NULL (the template sees tools = none, as in transformers) or a JSON array */
    const char *extra_json;    /* NULL or a JSON object of extra variables; they override every other variable */
    const char *template_src;  /* NULL: the model's template (ChatML when it has none); else this template */
    int add_generation_prompt; /* nonzero: end with the opening of an assistant turn */
    int enable_thinking;       /* -1: not defined for the template; 0: false; 1: true (Qwen3's switch) */
    cmf_chat_content content;  /* part-list handling, above */
} cmf_chat_params;

/* Defaults: no messages, no tools/extra, the model's template, add_generation_prompt 1, enable_thinking -1,
 * CMF_CHAT_CONTENT_AUTO. */
cmf_chat_params cmf_chat_default_params(void);

/* Renders the conversation `p` for model `m` (may be NULL: no bos/eos tokens, template_src or ChatML) into *out (malloc'd, NUL-terminated, owned by the caller; *out_len
 * receives its length when not NULL). Variables: messages, tools, documents (none), add_generation_prompt,
 * enable_thinking (when >= 0), bos_token / eos_token (the token strings of tokenizer_config's bos_token_id and
 * first eos_token_ids entry, looked up in the model's tokenizer; absent when the id or the tokenizer is), then
 * extra_json's keys. The result is text: tokenize it WITHOUT adding special tokens (the template writes them).
 * Errors (*out NULL): CMF_E_FORMAT for malformed JSON or a message that is not an object with a string "role"
 * (the message names the index), a template syntax/runtime error ("chat template: template:LINE:COL: ...");
 * CMF_E_ARG for the template's raise_exception ("chat template: <its message>") or a NULL argument;
 * CMF_E_UNSUPPORTED for a non-text content part under CMF_CHAT_CONTENT_STRING (or AUTO joining) or a template
 * sandbox limit; CMF_E_NOMEM. */
cmf_status cmf_chat_render(const cmf_model *m, const cmf_chat_params *p, char **out, size_t *out_len);

/* Tokenizes a prompt rendered by cmf_chat_render (`text`, `len` bytes, UTF-8) with m's tokenizer so that it
 * holds exactly one BOS: the tokenizer's post-processor special tokens (cmf_tokenize's add_special) are added only
 * when the file has a BOS id whose token text the rendered text does not already start with (the ChatML fallback
 * and templates without bos_token get the post-processor's BOS; the llama3 template, which writes it, gets no
 * second one; a file without a BOS id gets no special tokens). README's rule for `cmf chat`; `cmf chat`,
 * `cmf run --chat` and `cmf serve`'s /v1/chat/completions all tokenize through this function. *ids is malloc'd (the caller frees it), *n its length.
 * Errors: CMF_E_ARG (NULL m, ids or n; text that is not UTF-8), CMF_E_FORMAT (the model has no usable
 * tokenizer), CMF_E_NOMEM. */
cmf_status cmf_chat_tokenize(const cmf_model *m, const char *text, size_t len, int32_t **ids, size_t *n);

/* ---------------------------------------------------------------------------------------------------------------
 * Decoding with a length (added 2026-11-29): decoded text may hold U+0000 (e.g. qwen3's id 188 is the byte 0x00),
 * which a NUL-terminated string cannot carry. These are cmf_detokenize / cmf_detok_stream_push / _flush with
 * `*len` (when `len` is not NULL) receiving the byte length of *text (0 on error); *text is still malloc'd and
 * NUL-terminated after those bytes. Same semantics and errors as the functions without _n.
 * ------------------------------------------------------------------------------------------------------------- */
cmf_status cmf_detokenize_n(const cmf_tokenizer *t, const int32_t *ids, size_t n, int skip_special, char **text,
                            size_t *len);
cmf_status cmf_detok_stream_push_n(cmf_detok_stream *s, int32_t id, char **text, size_t *len);
cmf_status cmf_detok_stream_flush_n(cmf_detok_stream *s, char **text, size_t *len);

/* ---------------------------------------------------------------------------------------------------------------
 * Sampling: choosing the next token from a row of logits, as `cmf run` / `cmf chat` / `cmf serve` do
 * (src/sample/sample.h gives the algorithm and its sources). Order of operations (Hugging Face transformers'
 * generate(): logits processors, then warpers):
 *   1. penalties over the last penalty_last_n accepted tokens, each distinct token once with its count c:
 *      repetition (CTRL, Keskar et al. 2019; HF RepetitionPenaltyLogitsProcessor) l = l > 0 ? l / r : l * r;
 *      presence / frequency (OpenAI API) l -= presence + c * frequency;
 *   2. temperature <= 0: greedy argmax (ties -> the lowest id), stop here; else z = l / temperature;
 *   3. top-k (k largest z), 4. top-p (smallest most-probable set with probability >= top_p, renormalized over
 *      what top-k kept, at least one token), 5. min-p (p >= min_p * p_max), 6. one draw from softmax(z) over the
 *      kept tokens with a seeded PCG32 generator (the same seed gives the same tokens on every platform).
 * A generation loop:
 *   cmf_sampler_params sp = cmf_sampler_default_params(); sp.seed = 42;
 *   cmf_sampler *smp; cmf_sampler_new(cmf_model_vocab_size(m), &sp, &smp);
 *   for (i < n_prompt) cmf_sampler_accept(smp, prompt[i]);   // the prompt counts for the penalties
 *   cmf_session_prefill(s, prompt, n_prompt, NULL);
 *   for (;;) { int32_t t; if (cmf_session_sample(s, smp, &t)) break;   // = cmf_sampler_sample on the row
 *              cmf_sampler_accept(smp, t); ...stop on an eos id...; cmf_session_decode(s, t); }
 *   cmf_sampler_free(smp);
 * A sampler is independent of any model (it only knows the vocabulary size) and is used by one thread at a time.
 * ------------------------------------------------------------------------------------------------------------- */
typedef struct cmf_sampler_params {
    float temperature;       /* <= 0: greedy; not NaN */
    int top_k;               /* keep the k most likely; 0: off; >= 0 */
    float top_p;             /* nucleus mass in (0, 1]; 1: off */
    float min_p;             /* in [0, 1]; 0: off */
    float repeat_penalty;    /* > 0 and finite; 1: off */
    float presence_penalty;  /* finite; 0: off */
    float frequency_penalty; /* finite; 0: off */
    int penalty_last_n;      /* window of recent accepted tokens the penalties look at, >= 0; 0: penalties off */
    uint64_t seed;           /* PCG32 seed; any value */
} cmf_sampler_params;

typedef struct cmf_sampler cmf_sampler;

/* The defaults (llama.cpp's, except min_p): temperature 0.8, top_k 40, top_p 0.95, min_p 0, repeat_penalty 1,
 * presence/frequency 0, penalty_last_n 64, seed 0. */
cmf_sampler_params cmf_sampler_default_params(void);

/* Creates a sampler for `vocab` ids (use cmf_model_vocab_size: logits rows have that length); buffers of
 * O(vocab + penalty_last_n) are allocated here, once, and sampling allocates nothing. *out is freed with
 * cmf_sampler_free. Errors: CMF_E_ARG (NULL p or out, vocab <= 0, a field outside the range given in
 * cmf_sampler_params, a NaN), CMF_E_NOMEM. */
cmf_status cmf_sampler_new(int vocab, const cmf_sampler_params *p, cmf_sampler **out);

/* Frees the sampler. NULL is allowed. */
void cmf_sampler_free(cmf_sampler *s);

/* Forgets the penalty window and restarts the generator from the seed (a new conversation). NULL: no-op. */
void cmf_sampler_reset(cmf_sampler *s);

/* Records a token (prompt or generated) in the penalty window. Ids outside [0, vocab) and a NULL s are ignored by
 * the window; with a constraint set (cmf_sampler_set_constraint) the token also advances the constraint's text, and
 * one that does not fit (an id outside [0, vocab) included) breaks it. */
void cmf_sampler_accept(cmf_sampler *s, int32_t token);

/* Chooses the next token from `logits` (vocab floats, not modified) into *token; it does not accept it (call
 * cmf_sampler_accept). With a constraint (cmf_sampler_set_constraint) only a token that fits is chosen (below).
 * Errors: CMF_E_ARG for a NULL argument (e.g. cmf_session_logits of a session without a position) or when every
 * logit is NaN or -inf after the penalties (no token can be drawn), and with a constraint when no fitting token has
 * a finite logit or the constraint is broken. */
cmf_status cmf_sampler_sample(cmf_sampler *s, const float *logits, int32_t *token);

/* The next token from session `s`'s last logits into *token: always the token of
 * cmf_sampler_sample(smp, cmf_session_logits(s), token), with the same advance of smp's generator, and it does
 * not accept it either. smp must have been made for the model's vocabulary size. Where it runs: on the CUDA
 * backend (without tensor parallelism) the logits stay on the device (src/backend/cuda/sample.cu): temperature <= 0
 * takes the argmax there and only the id is downloaded; top_k in 1..1024 selects the top_k candidates there
 * (penalties applied on the device first with the host's float operations, so the same bits) and downloads only
 * those (id, z) pairs, and the host finishes (top-p, min-p, the draw; src/sample/sample.h); other settings (top_k
 * 0 or above 1024 with a temperature) download the row, as cmf_session_logits. Other backends sample the host row.
 * The row of cmf_session_logits is not downloaded by the device paths (a later cmf_session_logits still can),
 * except when a constraint refuses the device's token: then the row is downloaded for the masked redraw.
 * Errors: CMF_E_ARG for a NULL argument, a session without a position (as cmf_session_logits), a sampler of
 * another vocabulary size, or no token that can be drawn (as cmf_sampler_sample); CMF_E_IO for a device fault. */
cmf_status cmf_session_sample(cmf_session *s, cmf_sampler *smp, int32_t *token);

/* ---------------------------------------------------------------------------------------------------------------
 * Constrained sampling: JSON mode (OpenAI's response_format {"type": "json_object"}; llama.cpp's json.gbnf).
 * A constraint is an immutable table built once per tokenizer (the bytes of every token: tokenizer.h's
 * tok_piece_bytes) and shared by any number of samplers and threads; a sampler given one draws only tokens whose
 * bytes continue a text that is one JSON object (src/sample/json_fsm.h: RFC 8259, well-formed UTF-8, nesting <= 32,
 * whitespace between tokens as llama.cpp's json.gbnf: nothing, one space, or a newline and up to 20 spaces or tabs;
 * nothing after the closing brace), and an end-of-text id only once the object is closed (then nothing else). The
 * draw: the unconstrained draw first; when its token does not fit, the logits of the tokens that do not fit are set
 * to -inf and the sampler draws again from that row, as llama.cpp's grammar sampler does. Without top-k / top-p /
 * min-p that is exactly sampling the masked row; with them the first draw is truncated on the whole row, so the
 * odds differ from truncating the masked row. Special added tokens never fit; non-special ones (e.g. Qwen's <think>)
 * fit where their text does, inside strings.
 * A generation loop as above; the prompt's tokens are accepted before the constraint is set (once it is set, every
 * accepted token advances the JSON text):
 *   cmf_constraint *json; cmf_constraint_new_json(cmf_model_tokenizer(m), cmf_model_vocab_size(m), eos, n_eos, &json);
 *   cmf_sampler_set_constraint(smp, json);   // then cmf_sampler_accept advances it with each generated token
 *   ...the loop; it ends on an eos id; if it ends on a length limit first, the text is a JSON prefix...
 *   cmf_sampler_free(smp); cmf_constraint_free(json);
 * ------------------------------------------------------------------------------------------------------------- */
typedef struct cmf_constraint cmf_constraint;

/* Builds the JSON-mode constraint for logits rows of `vocab` ids (cmf_model_vocab_size; ids past the tokenizer's
 * have no bytes and never fit, and cost no memory) with the end-of-text ids eos[0..n_eos) (cmf_model_eos_ids; at
 * least one, each in [0, vocab)). Costs one decode per tokenizer id (~0.03 s for a 150k vocabulary); *out is freed
 * with cmf_constraint_free, after every sampler using it. Errors: CMF_E_ARG (NULL tok, eos or out, vocab <= 0, n_eos < 1, an eos id outside [0,
 * vocab)), CMF_E_NOMEM. */
cmf_status cmf_constraint_new_json(const cmf_tokenizer *tok, int vocab, const int32_t *eos, int n_eos,
                                   cmf_constraint **out);

/* Frees the constraint. NULL is allowed. */
void cmf_constraint_free(cmf_constraint *c);

/* Gives sampler s the constraint c (NULL: none), starting at the beginning of the text; the constraint is not
 * copied and must outlive its use by s. From then on cmf_sampler_sample / cmf_session_sample draw only fitting
 * tokens, and cmf_sampler_accept advances the text by the accepted token (a token that does not fit, accepted
 * anyway, leaves the constraint broken: the next draw fails with CMF_E_ARG). cmf_sampler_reset restarts it.
 * Errors: CMF_E_ARG (NULL s, a constraint for another vocabulary size), CMF_E_NOMEM. */
cmf_status cmf_sampler_set_constraint(cmf_sampler *s, const cmf_constraint *c);

/* 1 when s has a constraint and the accepted tokens complete its text (a JSON object closed: only an eos id fits
 * now), else 0 (also for NULL s). */
int cmf_sampler_constraint_done(const cmf_sampler *s);

#ifdef __cplusplus
}
#endif
#endif /* CMF_H */
