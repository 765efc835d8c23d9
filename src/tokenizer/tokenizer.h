/* tokenizer.h — internals of the Hugging Face tokenizer.json engine (public API: include/cmf.h).
 *
 * The pipeline follows HF tokenizers' TokenizerImpl::encode:
 *   text -> added tokens split off (non-normalized ones on the raw text) -> normalizer per remaining segment ->
 *   added tokens split off again (normalized ones) -> pre-tokenizer (pieces) -> model (ids per piece, cached) ->
 *   post-processor (template) when add_special.
 * Decoding: ids -> token strings (added vocabulary first) -> decoder chain -> joined text.
 *
 * Files: tokenizer.c (json loading, added tokens, public API), util.c (buffers, hash maps, byte-level table,
 * UTF-8 helpers), normalize.c, pretok.c, bpe.c (BPE model + cache), models.c (WordLevel, WordPiece, Unigram),
 * decode.c (decoders, streaming decode).
 */
#ifndef CMF_TOKENIZER_TOKENIZER_H
#define CMF_TOKENIZER_TOKENIZER_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "cmf.h"

/* ------------------------------------------------------------------------------------------------------------
 * Small containers (util.c)
 * ---------------------------------------------------------------------------------------------------------- */

/* A growable byte string (not NUL-terminated unless tok_buf_cstr is called). */
typedef struct tok_buf {
    char *p;
    size_t n, cap;
} tok_buf;

int tok_buf_reserve(tok_buf *b, size_t extra); /* 0 on success, -1 on allocation failure */
int tok_buf_put(tok_buf *b, const void *s, size_t n);
const char *tok_buf_cstr(tok_buf *b); /* NUL-terminates (NULL on allocation failure) */
void tok_buf_free(tok_buf *b);

/* A growable int32 array of token ids. */
typedef struct tok_ids {
    int32_t *v;
    size_t n, cap;
} tok_ids;

/* Append one id / n ids (amortized doubling). Return 0, or -1 on allocation failure (the array is unchanged). */
int tok_ids_push(tok_ids *a, int32_t id);
int tok_ids_append(tok_ids *a, const int32_t *ids, size_t n);

/* A hash map from byte strings to int32 (open addressing, linear probing). Keys are copied into one pool (each
 * followed by a NUL) and entries refer to them by offset, so a map of n keys costs a few allocations, not n. */
typedef struct tok_strmap_entry {
    uint32_t off, len; /* key = pool[off .. off + len) */
    int32_t val;
} tok_strmap_entry;

typedef struct tok_strmap {
    uint32_t *slots; /* entry index + 1, 0 = empty */
    size_t cap;      /* power of two */
    tok_strmap_entry *e;
    size_t n, ncap;
    char *pool; /* keys back to back, each NUL-terminated; owned */
    size_t pool_n, pool_cap;
} tok_strmap;

/* Makes room for n_keys more keys of key_bytes bytes in all (NULs not counted) without further growth of the slot
 * table or entry array (the pool still grows by doubling if key_bytes was an underestimate). Returns 0, or -1 on
 * allocation failure (the map is unchanged and still valid). */
int tok_strmap_reserve(tok_strmap *m, size_t n_keys, size_t key_bytes);
/* Sets key -> val (overwrites). Returns the entry index (stable for the map's life: entries are never removed), or
 * -1 on allocation failure or when the pool would pass 4 GiB. */
long tok_strmap_put(tok_strmap *m, const char *key, size_t len, int32_t val);
/* Sets key -> val (overwrites). Returns 0, or -1 on allocation failure. */
int tok_strmap_set(tok_strmap *m, const char *key, size_t len, int32_t val);
/* Value for key, or -1. */
int32_t tok_strmap_get(const tok_strmap *m, const char *key, size_t len);
/* The NUL-terminated key of entry e (< m->n); valid until the next put/set (the pool may move). */
static inline const char *tok_strmap_key(const tok_strmap *m, size_t e) { return m->pool + m->e[e].off; }
/* Frees the keys and tables; the map is left empty and reusable. */
void tok_strmap_free(tok_strmap *m);

/* 64-bit hash of n bytes (FNV-style multiply-rotate over 8-byte words, murmur3 finalizer); used by the hash
 * tables and the word cache (not stored anywhere: any change only moves entries between slots). */
uint64_t tok_hash(const void *p, size_t n);

/* GPT-2's bytes_to_unicode table: each byte's replacement character as UTF-8 (1 or 2 bytes). */
extern const char *const tok_byte_to_utf8[256];
/* Inverse: code point (< 324) -> byte, or -1 when the code point is not in the table. */
int tok_unicode_to_byte(uint32_t cp);

/* Decodes one UTF-8 character at s[0..n): returns its length (1..4) and sets *cp, or 0 if invalid. */
int tok_utf8_decode(const char *s, size_t n, uint32_t *cp);
/* Byte offset of the first invalid UTF-8 sequence in s[0..n), or n when valid. */
size_t tok_utf8_check(const char *s, size_t n);
/* Appends s[0..n) to out replacing invalid sequences by U+FFFD as Rust's String::from_utf8_lossy does (one
 * replacement per maximal invalid subpart). Returns 0 or -1 on allocation failure. */
int tok_utf8_lossy(tok_buf *out, const char *s, size_t n);
/* Unicode White_Space (Rust char::is_whitespace). */
int tok_is_whitespace(uint32_t cp);

/* Compiles a tokenizer.json regex (Oniguruma syntax) with PCRE2 in UTF+UCP mode; `\s`/`\S` are rewritten to
 * Unicode White_Space classes as Oniguruma defines them. Errors: CMF_E_FORMAT naming `what`. */
cmf_status tok_regex_compile(const char *pattern, size_t len, const char *what, pcre2_code **out);
/* Compiles a literal string pattern (HF `{"String": ...}`) as an escaped regex. */
cmf_status tok_regex_literal(const char *s, size_t len, const char *what, pcre2_code **out);
/* Reads a HF pattern object {"String": s} or {"Regex": r} into a compiled regex. */
cmf_status tok_pattern_from_json(const cJSON *pat, const char *what, pcre2_code **out);

/* Finds the next non-empty match of re in s[0..n) at or after `from`: 1 with [*ms,*me), 0 for none, -1 on a
 * matching failure (message set). `md` is match data created for re. */
int tok_regex_next(const pcre2_code *re, pcre2_match_data *md, const char *s, size_t n, size_t from, size_t *ms,
                   size_t *me);

/* ------------------------------------------------------------------------------------------------------------
 * Pieces: the pre-tokenized string, a list of byte ranges in one buffer.
 * ---------------------------------------------------------------------------------------------------------- */
typedef struct tok_piece {
    size_t off, len;
    int first; /* the piece starts at offset 0 of the original input (Metaspace prepend_scheme "first") */
} tok_piece;

typedef struct tok_pieces {
    tok_buf buf;
    tok_piece *v;
    size_t n, cap;
} tok_pieces;

/* Appends a piece, copying s[0..len) into p->buf. Returns 0, or -1 on allocation failure. */
int tok_pieces_add(tok_pieces *p, const char *s, size_t len, int first);
/* Frees the buffer and the list; the struct is left empty. */
void tok_pieces_free(tok_pieces *p);

/* ------------------------------------------------------------------------------------------------------------
 * Normalizers (normalize.c)
 * ---------------------------------------------------------------------------------------------------------- */
typedef struct tok_normalizer tok_normalizer;

/* Builds a normalizer from its tokenizer.json object. Errors: CMF_E_FORMAT, CMF_E_UNSUPPORTED (names the type). */
cmf_status tok_normalizer_load(const cJSON *j, tok_normalizer **out);
/* Frees a normalizer tree; NULL is allowed. */
void tok_normalizer_free(tok_normalizer *n);
/* Normalizes s[0..len) (valid UTF-8) into `out` (cleared first). */
cmf_status tok_normalize(const tok_normalizer *n, const char *s, size_t len, tok_buf *out);

/* ------------------------------------------------------------------------------------------------------------
 * Pre-tokenizers (pretok.c)
 * ---------------------------------------------------------------------------------------------------------- */
typedef struct tok_pretok tok_pretok;

/* Builds a pre-tokenizer from its tokenizer.json object (*out owned by the caller). Errors: CMF_E_FORMAT (bad
 * field or regex, named), CMF_E_UNSUPPORTED ("pre_tokenizer type 'X' is not supported"), CMF_E_NOMEM. */
cmf_status tok_pretok_load(const cJSON *j, tok_pretok **out);
/* Frees a pre-tokenizer tree; NULL is allowed. */
void tok_pretok_free(tok_pretok *p);
/* Splits every piece of *io further (HF PreTokenizer::pre_tokenize); *io is replaced. */
cmf_status tok_pretokenize(const tok_pretok *p, tok_pieces *io);

/* ------------------------------------------------------------------------------------------------------------
 * Models (bpe.c, models.c)
 * ---------------------------------------------------------------------------------------------------------- */
/* Largest token id accepted (ids index dense tables; real vocabularies stay far below). */
#define TOK_MAX_ID (1 << 24)

typedef enum { TOK_MODEL_BPE, TOK_MODEL_WORDLEVEL, TOK_MODEL_WORDPIECE, TOK_MODEL_UNIGRAM } tok_model_type;

/* One slot of the merge table: key, rank and result side by side, so a lookup touches one cache line. */
typedef struct tok_merge_slot {
    uint64_t key; /* (a << 32 | b) + 1, 0 = empty */
    uint32_t rank;
    int32_t new_id;
} tok_merge_slot;

typedef struct tok_merge_map {
    tok_merge_slot *slots; /* open addressing, linear probing */
    size_t cap, n;
} tok_merge_map;

typedef struct tok_cache tok_cache;

typedef struct tok_model {
    tok_model_type type;
    tok_strmap vocab;   /* token -> id */
    uint32_t *tok_entry; /* id -> vocab entry index + 1 (its string), 0 for holes; tok_model_token reads it */
    int32_t ids_cap;     /* allocated length of tok_entry (>= n_ids) */
    int32_t n_ids;       /* max id + 1 */
    int32_t unk_id;     /* -1 when none */
    /* BPE */
    tok_merge_map merges;
    char *cont_prefix;  /* continuing_subword_prefix or NULL (BPE, WordPiece) */
    char *eow_suffix;   /* end_of_word_suffix or NULL */
    int fuse_unk, byte_fallback, ignore_merges;
    int32_t byte_ids[256]; /* id of "<0xXX>" or -1 (byte_fallback) */
    tok_cache *cache;
    /* WordPiece */
    int max_input_chars_per_word;
    /* Unigram */
    double *scores;
    double min_score;
    int unigram_byte_fallback;
    size_t max_tok_len;
} tok_model;

/* Builds the model from tokenizer.json "model" (BPE, WordLevel, WordPiece, Unigram). Errors: CMF_E_FORMAT (bad
 * vocab entry or merge, named with its index), CMF_E_UNSUPPORTED (other types, BPE dropout), CMF_E_NOMEM. */
cmf_status tok_model_load(const cJSON *j, tok_model **out);
/* Frees the model, its tables and its cache; NULL is allowed. */
void tok_model_free(tok_model *m);
/* Appends the ids of one pre-tokenized piece (HF Model::tokenize). */
cmf_status tok_model_encode(const tok_model *m, const char *s, size_t len, tok_ids *out);

/* BPE (bpe.c, HF models/bpe): load fills vocab, merges ((id_a, id_b) -> (rank, new_id); a later duplicate wins),
 * byte-fallback ids and the cache; encode appends the ids of one word (thread-safe: the cache has a lock);
 * free releases what load added to m. */
cmf_status tok_bpe_load(const cJSON *j, tok_model *m);
cmf_status tok_bpe_encode(const tok_model *m, const char *s, size_t len, tok_ids *out);
void tok_bpe_free(tok_model *m);
/* WordPiece: greedy longest match with the continuing prefix, the whole word -> unk when a part is missing or
 * it exceeds max_input_chars_per_word. Unigram: best-score segmentation (HF models/unigram). Both append ids;
 * CMF_E_ARG when a word cannot be encoded and there is no unk. */
cmf_status tok_wordpiece_encode(const tok_model *m, const char *s, size_t len, tok_ids *out);
cmf_status tok_unigram_encode(const tok_model *m, const char *s, size_t len, tok_ids *out);
/* Fills m->vocab / id_to_tok from a {"token": id} object (BPE, WordLevel, WordPiece). Errors: CMF_E_FORMAT
 * naming the entry whose id is not a non-negative integer. */
cmf_status tok_vocab_from_object(const cJSON *vocab, tok_model *m);
/* Records id <-> s[0..len) (copied once, into the vocab's pool), growing tok_entry as needed. */
cmf_status tok_vocab_set_id(tok_model *m, int32_t id, const char *s, size_t len);
/* Sizes the vocab map and the id table for n entries with ids below n (a hint: more still fit). Errors: NOMEM. */
cmf_status tok_vocab_reserve(tok_model *m, size_t n);

/* The token string of a model id (NUL-terminated, *len bytes), or NULL when id is outside [0, n_ids) or a hole. The
 * string lives in m->vocab's pool (valid as long as the model). */
static inline const char *tok_model_token(const tok_model *m, int32_t id, size_t *len) {
    if (id < 0 || id >= m->n_ids || !m->tok_entry[id]) return NULL;
    size_t e = m->tok_entry[id] - 1;
    *len = m->vocab.e[e].len;
    return tok_strmap_key(&m->vocab, e);
}

/* ------------------------------------------------------------------------------------------------------------
 * Decoders (decode.c)
 * ---------------------------------------------------------------------------------------------------------- */
typedef struct tok_decoder tok_decoder;

/* Builds a decoder from its tokenizer.json object. Errors: CMF_E_FORMAT, CMF_E_UNSUPPORTED ("decoder type 'X'
 * is not supported"), CMF_E_NOMEM. */
cmf_status tok_decoder_load(const cJSON *j, tok_decoder **out);
/* Frees a decoder tree; NULL is allowed. */
void tok_decoder_free(tok_decoder *d);

/* A list of token strings being decoded (each owned). */
typedef struct tok_strs {
    char **s;
    size_t *len;
    size_t n, cap;
} tok_strs;

/* Appends a copy of s[0..len) (NUL-terminated). Returns 0, or -1 on allocation failure. */
int tok_strs_push(tok_strs *a, const char *s, size_t len);
/* Frees every string and the list; the struct is left empty. */
void tok_strs_free(tok_strs *a);

/* Runs the decoder chain (HF Decoder::decode_chain) over *toks, replacing it. */
cmf_status tok_decode_chain(const tok_decoder *d, tok_strs *toks);

/* ------------------------------------------------------------------------------------------------------------
 * The tokenizer
 * ---------------------------------------------------------------------------------------------------------- */
typedef struct tok_added {
    char *content;
    size_t len;
    int32_t id;
    int special, normalized, lstrip, rstrip, single_word;
} tok_added;

/* Added-token matcher: candidates indexed by first byte, longest first. */
typedef struct tok_matcher {
    const tok_added **cand; /* all candidates, grouped by first byte, longest first in each group */
    char **norm_content;    /* content to match (normalized content for the normalized matcher) */
    size_t *norm_len;
    uint32_t start[257];    /* cand index range per first byte */
    size_t n;
} tok_matcher;

typedef enum { TOK_POST_NONE, TOK_POST_BYTELEVEL, TOK_POST_TEMPLATE, TOK_POST_SEQUENCE } tok_post_type;

typedef struct tok_post {
    tok_post_type type;
    int32_t *single;  /* template: ids, with -1 for the sequence A */
    size_t n_single;
    struct tok_post **seq;
    size_t n_seq;
} tok_post;

struct cmf_tokenizer {
    tok_model *model;
    tok_normalizer *normalizer; /* NULL when none */
    tok_pretok *pretok;         /* NULL when none */
    tok_decoder *decoder;       /* NULL when none: tokens joined by " " */
    tok_post *post;             /* NULL when none */
    /* "truncation" and "padding" of tokenizer.json, applied by encode as HF's post_process does */
    int has_trunc, trunc_left;
    size_t trunc_max;
    int has_pad, pad_left;
    size_t pad_fixed, pad_multiple; /* pad_fixed 0: BatchLongest (the sequence itself) */
    int32_t pad_id;
    tok_added *added;
    size_t n_added;
    tok_strmap added_map; /* content -> index in added */
    int32_t *added_by_id; /* id -> index in added, for ids < n_ids; -1 none */
    int32_t n_ids;        /* vocab size: max(model ids, added ids) + 1 */
    tok_matcher match_raw, match_norm;
};

/* The bytes token `id` adds to a text in the middle of a sequence, for a sampler that checks candidate tokens
 * against the text (sample/constrain.c): the decode of [anchor, id] after the decode of [anchor] (the decoders'
 * first-token rules, Metaspace's dropped space or Strip, then apply to the anchor, as in srv_llama_detokenize), with
 * ByteLevel and ByteFallback bytes kept raw (a piece of a UTF-8 character stays those bytes; HF's decode would give
 * U+FFFD). Special added tokens and ids outside the vocabulary have none (out->n = 0). pre caches the anchor's
 * decode between calls (start with an empty one; free both with tok_buf_free). out is not NUL-terminated in
 * general. Errors: CMF_E_NOMEM. */
cmf_status tok_piece_bytes(const cmf_tokenizer *t, int32_t anchor, int32_t id, tok_buf *pre, tok_buf *out);

/* An ordinary token to decode ahead of others (tok_piece_bytes, the server's llama.cpp-style pieces): the last id
 * of "a" tokenized without special tokens, when it decodes to text; -1 when none. */
int32_t tok_anchor_id(const cmf_tokenizer *t);

/* Reads and parses a tokenizer.json file (e.g. a sidecar next to a model, CMF_FORMAT.md §1.8). *out is freed with
 * cmf_tokenizer_free. Errors: CMF_E_IO (message names the path), and those of cmf_tokenizer_load. */
cmf_status cmf_tokenizer_load_file(const char *path, cmf_tokenizer **out);

#endif
