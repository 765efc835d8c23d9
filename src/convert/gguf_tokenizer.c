/* gguf_tokenizer.c — the tokenizer embedded in a GGUF (tokenizer.ggml.*) rewritten as a Hugging Face tokenizer.json.
 *
 * "llama" (SentencePiece BPE) follows transformers' LlamaConverter / SentencePieceExtractor (convert_slow_tokenizer.py):
 *   model BPE {byte_fallback, fuse_unk, unk_token}, vocab piece -> id, merges derived from the vocab: for each piece
 *   in id order, every split at a character boundary into two pieces that are both in the vocab, those of one piece
 *   ordered by (id of left, id of right); then all merges stably sorted by the score of the merged piece, highest
 *   first. Normalizer Prepend("▁") + Replace(" ", "▁"); no pre-tokenizer; decoder Replace("▁", " "), ByteFallback,
 *   Fuse, Strip(" ", 1, 0); post-processor TemplateProcessing with BOS (add_bos_token, default true) and EOS
 *   (add_eos_token, default false).
 * "gpt2" (byte-level BPE) follows the GPT-2 converter: vocab + tokenizer.ggml.merges, ByteLevel pre-tokenizer (or
 *   Split(regex) + ByteLevel for the tokenizer.ggml.pre values with a known regex), ByteLevel decoder.
 * Token types (llama.cpp llama_token_type): 2 unknown and 3 control become special added tokens; 4 user-defined
 * becomes a non-special added token. */
#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#include "convert/gguf.h"
#include "util/error.h"

/* ---- a string -> id hash table over (pointer, length) keys -------------------------------------------------- */
typedef struct strmap {
    const cmf_gguf_str *keys; /* the token array */
    int32_t *slots;           /* token id + 1, 0 = empty */
    size_t cap;
} strmap;

static uint64_t fnv(const char *p, size_t n) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ (uint8_t)p[i]) * 1099511628211ull;
    return h;
}

/* Builds the map; for repeated pieces the last id wins (as a Python dict built in id order). */
static int strmap_build(strmap *m, const cmf_gguf_str *keys, size_t n) {
    m->keys = keys;
    m->cap = 16;
    while (m->cap < 2 * n) m->cap *= 2;
    m->slots = calloc(m->cap, sizeof *m->slots);
    if (!m->slots) return 0;
    for (size_t i = 0; i < n; i++) {
        size_t j = fnv(keys[i].p, keys[i].len) & (m->cap - 1);
        while (m->slots[j]) {
            const cmf_gguf_str *k = &keys[m->slots[j] - 1];
            if (k->len == keys[i].len && memcmp(k->p, keys[i].p, k->len) == 0) break;
            j = (j + 1) & (m->cap - 1);
        }
        m->slots[j] = (int32_t)i + 1;
    }
    return 1;
}

static int32_t strmap_get(const strmap *m, const char *p, size_t n) {
    size_t j = fnv(p, n) & (m->cap - 1);
    while (m->slots[j]) {
        const cmf_gguf_str *k = &m->keys[m->slots[j] - 1];
        if (k->len == n && memcmp(k->p, p, n) == 0) return m->slots[j] - 1;
        j = (j + 1) & (m->cap - 1);
    }
    return -1;
}

/* ---- JSON helpers -------------------------------------------------------------------------------------------- */
static char *dup_n(const char *p, size_t n) {
    char *s = malloc(n + 1);
    if (s) {
        memcpy(s, p, n);
        s[n] = 0;
    }
    return s;
}

static cJSON *json_str_n(const char *p, size_t n) {
    char *s = dup_n(p, n);
    if (!s) return NULL;
    cJSON *j = cJSON_CreateString(s);
    free(s);
    return j;
}

static cJSON *obj_type(const char *type) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "type", type);
    return o;
}

static cJSON *replace_dec(const char *from, const char *to) {
    cJSON *r = obj_type("Replace");
    cJSON *pat = cJSON_AddObjectToObject(r, "pattern");
    cJSON_AddStringToObject(pat, "String", from);
    cJSON_AddStringToObject(r, "content", to);
    return r;
}

static cJSON *special_piece(const char *tok, int type_id) {
    cJSON *o = cJSON_CreateObject(), *in = cJSON_AddObjectToObject(o, "SpecialToken");
    cJSON_AddStringToObject(in, "id", tok);
    cJSON_AddNumberToObject(in, "type_id", type_id);
    return o;
}

static cJSON *seq_piece(const char *id, int type_id) {
    cJSON *o = cJSON_CreateObject(), *in = cJSON_AddObjectToObject(o, "Sequence");
    cJSON_AddStringToObject(in, "id", id);
    cJSON_AddNumberToObject(in, "type_id", type_id);
    return o;
}

/* TemplateProcessing: single = [BOS] $A [EOS], pair = [BOS] $A [EOS] [BOS] $B [EOS] (HF LlamaTokenizerFast). */
static cJSON *template_processor(const char *bos, int32_t bos_id, const char *eos, int32_t eos_id) {
    cJSON *pp = obj_type("TemplateProcessing");
    cJSON *single = cJSON_AddArrayToObject(pp, "single"), *pair = cJSON_AddArrayToObject(pp, "pair");
    for (int seg = 0; seg < 2; seg++) {
        if (bos) cJSON_AddItemToArray(pair, special_piece(bos, seg));
        cJSON_AddItemToArray(pair, seq_piece(seg ? "B" : "A", seg));
        if (eos) cJSON_AddItemToArray(pair, special_piece(eos, seg));
    }
    if (bos) cJSON_AddItemToArray(single, special_piece(bos, 0));
    cJSON_AddItemToArray(single, seq_piece("A", 0));
    if (eos) cJSON_AddItemToArray(single, special_piece(eos, 0));
    cJSON *sp = cJSON_AddObjectToObject(pp, "special_tokens");
    const char *names[2] = {bos, eos};
    int32_t ids[2] = {bos_id, eos_id};
    for (int i = 0; i < 2; i++) {
        if (!names[i] || cJSON_GetObjectItemCaseSensitive(sp, names[i])) continue;
        cJSON *e = cJSON_AddObjectToObject(sp, names[i]);
        cJSON_AddStringToObject(e, "id", names[i]);
        cJSON_AddItemToObject(e, "ids", cJSON_CreateIntArray(&ids[i], 1));
        cJSON *toks = cJSON_AddArrayToObject(e, "tokens");
        cJSON_AddItemToArray(toks, cJSON_CreateString(names[i]));
    }
    return pp;
}

/* ---- SentencePiece merges ------------------------------------------------------------------------------------ */
typedef struct merge {
    int32_t l, r;   /* part ids */
    float score;    /* score of the merged piece */
    size_t order;   /* position before the stable sort */
} merge;

static int cmp_merge(const void *a, const void *b) {
    const merge *x = a, *y = b;
    if (x->score != y->score) return x->score > y->score ? -1 : 1; /* highest score first */
    return x->order < y->order ? -1 : x->order > y->order;         /* stable */
}

static int cmp_local(const void *a, const void *b) {
    const merge *x = a, *y = b;
    if (x->l != y->l) return x->l < y->l ? -1 : 1;
    return (x->r > y->r) - (x->r < y->r);
}

/* Derives the merges of a SentencePiece vocabulary (see the file comment). *out is malloc'd. */
static cmf_status spm_merges(const cmf_gguf_str *tok, const cmf_gguf_kv *scores, size_t n, const strmap *map,
                             merge **out, size_t *n_out) {
    size_t cap = 1024, cnt = 0;
    merge *m = malloc(cap * sizeof *m);
    if (!m) return cmf_err(CMF_E_NOMEM, "out of memory (merges)");
    for (size_t id = 0; id < n; id++) {
        const char *p = tok[id].p;
        size_t len = tok[id].len;
        if (strmap_get(map, p, len) != (int32_t)id) {
            /* a repeated piece: the Python dict keeps its first position, so handle it only at first sight */
            size_t first = 0;
            while (first < id && !(tok[first].len == len && memcmp(tok[first].p, p, len) == 0)) first++;
            if (first < id) continue;
        }
        int32_t vid = strmap_get(map, p, len);
        float sc = (float)cmf_gguf_arr_num(scores, (uint64_t)vid);
        size_t start = cnt;
        for (size_t k = 1; k < len; k++) {
            if (((uint8_t)p[k] & 0xC0) == 0x80) continue; /* split at character boundaries only */
            int32_t l = strmap_get(map, p, k), r = strmap_get(map, p + k, len - k);
            if (l < 0 || r < 0) continue;
            if (cnt == cap) {
                merge *nm = realloc(m, 2 * cap * sizeof *m);
                if (!nm) {
                    free(m);
                    return cmf_err(CMF_E_NOMEM, "out of memory (merges)");
                }
                m = nm;
                cap *= 2;
            }
            m[cnt++] = (merge){l, r, sc, 0};
        }
        qsort(m + start, cnt - start, sizeof *m, cmp_local);
    }
    for (size_t i = 0; i < cnt; i++) m[i].order = i;
    qsort(m, cnt, sizeof *m, cmp_merge);
    *out = m;
    *n_out = cnt;
    return CMF_OK;
}

/* Adds merges as "left right" strings, or as [left, right] pairs when a part contains a space. */
static cmf_status add_merges(cJSON *model, const cmf_gguf_str *tok, const merge *m, size_t n) {
    int pairs = 0;
    for (size_t i = 0; i < n && !pairs; i++)
        pairs = memchr(tok[m[i].l].p, ' ', tok[m[i].l].len) || memchr(tok[m[i].r].p, ' ', tok[m[i].r].len);
    cJSON *arr = cJSON_AddArrayToObject(model, "merges");
    for (size_t i = 0; i < n; i++) {
        const cmf_gguf_str *a = &tok[m[i].l], *b = &tok[m[i].r];
        cJSON *item;
        if (pairs) {
            item = cJSON_CreateArray();
            cJSON_AddItemToArray(item, json_str_n(a->p, a->len));
            cJSON_AddItemToArray(item, json_str_n(b->p, b->len));
        } else {
            char *s = malloc(a->len + b->len + 2);
            if (!s) return cmf_err(CMF_E_NOMEM, "out of memory (merges)");
            memcpy(s, a->p, a->len);
            s[a->len] = ' ';
            memcpy(s + a->len + 1, b->p, b->len);
            s[a->len + 1 + b->len] = 0;
            item = cJSON_CreateString(s);
            free(s);
        }
        if (!item) return cmf_err(CMF_E_NOMEM, "out of memory (merges)");
        cJSON_AddItemToArray(arr, item);
    }
    return CMF_OK;
}

/* GPT-2 style merges from tokenizer.ggml.merges ("left right" strings), copied as they are. */
static cmf_status copy_merges(cJSON *model, const cmf_gguf_kv *mk) {
    cJSON *arr = cJSON_AddArrayToObject(model, "merges");
    for (uint64_t i = 0; mk && i < mk->arr_n; i++) {
        cJSON *s = json_str_n(mk->arr_strs[i].p, mk->arr_strs[i].len);
        if (!s) return cmf_err(CMF_E_NOMEM, "out of memory (merges)");
        cJSON_AddItemToArray(arr, s);
    }
    return CMF_OK;
}

/* Pre-tokenizer regexes of the tokenizer.ggml.pre values we can map (llama.cpp llama-vocab.cpp; the same
 * patterns appear in the models' own tokenizer.json files). */
static const char *pre_regex(const char *pre) {
    if (!pre) return NULL;
    if (!strcmp(pre, "llama-bpe") || !strcmp(pre, "llama3") || !strcmp(pre, "llama-v3"))
        return "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
               "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
    if (!strcmp(pre, "qwen2"))
        return "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
               "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
    return NULL;
}

static cJSON *bytelevel(int add_prefix_space, int trim_offsets, int use_regex) {
    cJSON *o = obj_type("ByteLevel");
    cJSON_AddBoolToObject(o, "add_prefix_space", add_prefix_space);
    cJSON_AddBoolToObject(o, "trim_offsets", trim_offsets);
    cJSON_AddBoolToObject(o, "use_regex", use_regex);
    return o;
}

static const cmf_gguf_kv *num_array(const cmf_gguf *g, const char *key, uint64_t n, cmf_status *st) {
    const cmf_gguf_kv *kv = cmf_gguf_kv_find(g, key);
    if (!kv) return NULL;
    if (kv->type != CMF_GGUF_ARRAY || kv->arr_type == CMF_GGUF_STRING || kv->arr_type == CMF_GGUF_ARRAY ||
        kv->arr_n != n)
        *st = cmf_err(CMF_E_FORMAT, "GGUF %s: expected a numeric array of %llu entries", key, (unsigned long long)n);
    return kv;
}

static int get_id(const cmf_gguf *g, const char *key, size_t n, int32_t *id) {
    int64_t v;
    if (!cmf_gguf_get_int(g, key, &v) || v < 0 || (uint64_t)v >= n) return 0; /* absent, -1 or out of range */
    *id = (int32_t)v;
    return 1;
}

static int get_bool(const cmf_gguf *g, const char *key, int dflt) {
    int64_t v;
    return cmf_gguf_get_int(g, key, &v) ? v != 0 : dflt;
}

cmf_status cmf_gguf_build_tokenizer(const cmf_gguf *g, char **json, size_t *len) {
    *json = NULL;
    *len = 0;
    char *model_name = cmf_gguf_get_str(g, "tokenizer.ggml.model");
    if (!model_name) return cmf_err(CMF_E_FORMAT, "%s: no tokenizer.ggml.model", g->path);
    int spm = !strcmp(model_name, "llama"), bpe = !strcmp(model_name, "gpt2");
    if (!spm && !bpe) {
        cmf_status s = cmf_err(CMF_E_UNSUPPORTED, "%s: tokenizer.ggml.model '%s' (supported: llama, gpt2)", g->path,
                               model_name);
        free(model_name);
        return s;
    }
    free(model_name);
    const cmf_gguf_kv *tk = cmf_gguf_kv_find(g, "tokenizer.ggml.tokens");
    if (!tk || tk->type != CMF_GGUF_ARRAY || tk->arr_type != CMF_GGUF_STRING || tk->arr_n == 0 ||
        tk->arr_n > INT32_MAX)
        return cmf_err(CMF_E_FORMAT, "%s: tokenizer.ggml.tokens must be a non-empty string array", g->path);
    size_t n = (size_t)tk->arr_n;
    const cmf_gguf_str *tok = tk->arr_strs;
    for (size_t i = 0; i < n; i++)
        if (memchr(tok[i].p, 0, tok[i].len))
            return cmf_err(CMF_E_FORMAT, "%s: tokenizer.ggml.tokens[%zu] contains a NUL byte", g->path, i);
    cmf_status s = CMF_OK;
    const cmf_gguf_kv *scores = num_array(g, "tokenizer.ggml.scores", n, &s);
    const cmf_gguf_kv *types = num_array(g, "tokenizer.ggml.token_type", n, &s);
    if (s) return s;
    if (spm && !scores) return cmf_err(CMF_E_FORMAT, "%s: SentencePiece vocabulary without tokenizer.ggml.scores", g->path);
    const cmf_gguf_kv *mk = cmf_gguf_kv_find(g, "tokenizer.ggml.merges");
    if (bpe && (!mk || mk->type != CMF_GGUF_ARRAY || mk->arr_type != CMF_GGUF_STRING))
        return cmf_err(CMF_E_FORMAT, "%s: byte-level BPE vocabulary without a string array tokenizer.ggml.merges",
                       g->path);
    int32_t bos = -1, eos = -1, unk = -1;
    int has_bos = get_id(g, "tokenizer.ggml.bos_token_id", n, &bos);
    int has_eos = get_id(g, "tokenizer.ggml.eos_token_id", n, &eos);
    int has_unk = get_id(g, "tokenizer.ggml.unknown_token_id", n, &unk);
    int add_bos = get_bool(g, "tokenizer.ggml.add_bos_token", spm), add_eos = get_bool(g, "tokenizer.ggml.add_eos_token", 0);

    strmap map = {0};
    if (!strmap_build(&map, tok, n)) return cmf_err(CMF_E_NOMEM, "out of memory (vocab map)");
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "version", "1.0");
    cJSON_AddNullToObject(root, "truncation");
    cJSON_AddNullToObject(root, "padding");
    cJSON *added = cJSON_AddArrayToObject(root, "added_tokens");
    for (size_t i = 0; types && i < n; i++) {
        int t = (int)cmf_gguf_arr_num(types, i);
        if (t != 2 && t != 3 && t != 4) continue;
        cJSON *a = cJSON_CreateObject();
        cJSON_AddNumberToObject(a, "id", (double)i);
        cJSON_AddItemToObject(a, "content", json_str_n(tok[i].p, tok[i].len));
        cJSON_AddBoolToObject(a, "single_word", 0);
        cJSON_AddBoolToObject(a, "lstrip", 0);
        cJSON_AddBoolToObject(a, "rstrip", 0);
        cJSON_AddBoolToObject(a, "normalized", 0);
        cJSON_AddBoolToObject(a, "special", t != 4);
        cJSON_AddItemToArray(added, a);
    }
    char *bos_s = has_bos ? dup_n(tok[bos].p, tok[bos].len) : NULL;
    char *eos_s = has_eos ? dup_n(tok[eos].p, tok[eos].len) : NULL;
    cJSON *model = obj_type("BPE");
    cJSON_AddNullToObject(model, "dropout");
    if (spm) {
        cJSON *norm = obj_type("Sequence"), *ns = cJSON_AddArrayToObject(norm, "normalizers");
        cJSON *pre = obj_type("Prepend");
        cJSON_AddStringToObject(pre, "prepend", "\xe2\x96\x81");
        cJSON_AddItemToArray(ns, pre);
        cJSON_AddItemToArray(ns, replace_dec(" ", "\xe2\x96\x81"));
        cJSON_AddItemToObject(root, "normalizer", norm);
        cJSON_AddNullToObject(root, "pre_tokenizer");
        cJSON_AddItemToObject(root, "post_processor", template_processor(add_bos ? bos_s : NULL, bos,
                                                                         add_eos ? eos_s : NULL, eos));
        cJSON *dec = obj_type("Sequence"), *ds = cJSON_AddArrayToObject(dec, "decoders");
        cJSON_AddItemToArray(ds, replace_dec("\xe2\x96\x81", " "));
        cJSON_AddItemToArray(ds, obj_type("ByteFallback"));
        cJSON_AddItemToArray(ds, obj_type("Fuse"));
        cJSON *strip = obj_type("Strip");
        cJSON_AddStringToObject(strip, "content", " ");
        cJSON_AddNumberToObject(strip, "start", 1);
        cJSON_AddNumberToObject(strip, "stop", 0);
        cJSON_AddItemToArray(ds, strip);
        cJSON_AddItemToObject(root, "decoder", dec);
        if (has_unk)
            cJSON_AddItemToObject(model, "unk_token", json_str_n(tok[unk].p, tok[unk].len));
        else
            cJSON_AddStringToObject(model, "unk_token", "<unk>");
        cJSON_AddNullToObject(model, "continuing_subword_prefix");
        cJSON_AddNullToObject(model, "end_of_word_suffix");
        cJSON_AddBoolToObject(model, "fuse_unk", 1);
        cJSON_AddBoolToObject(model, "byte_fallback", 1);
    } else {
        char *pre_name = cmf_gguf_get_str(g, "tokenizer.ggml.pre");
        const char *rx = pre_regex(pre_name);
        free(pre_name);
        cJSON_AddNullToObject(root, "normalizer");
        if (rx) {
            cJSON *seq = obj_type("Sequence"), *ps = cJSON_AddArrayToObject(seq, "pretokenizers");
            cJSON *split = obj_type("Split"), *pat = cJSON_AddObjectToObject(split, "pattern");
            cJSON_AddStringToObject(pat, "Regex", rx);
            cJSON_AddStringToObject(split, "behavior", "Isolated");
            cJSON_AddBoolToObject(split, "invert", 0);
            cJSON_AddItemToArray(ps, split);
            cJSON_AddItemToArray(ps, bytelevel(0, 1, 0));
            cJSON_AddItemToObject(root, "pre_tokenizer", seq);
        } else {
            cJSON_AddItemToObject(root, "pre_tokenizer", bytelevel(0, 1, 1));
        }
        if (add_bos && has_bos)
            cJSON_AddItemToObject(root, "post_processor", template_processor(bos_s, bos, add_eos ? eos_s : NULL, eos));
        else
            cJSON_AddItemToObject(root, "post_processor", bytelevel(1, 0, 1));
        cJSON_AddItemToObject(root, "decoder", bytelevel(1, 1, 1));
        cJSON_AddNullToObject(model, "unk_token");
        cJSON_AddNullToObject(model, "continuing_subword_prefix");
        cJSON_AddNullToObject(model, "end_of_word_suffix");
        cJSON_AddBoolToObject(model, "fuse_unk", 0);
        cJSON_AddBoolToObject(model, "byte_fallback", 0);
    }
    free(bos_s);
    free(eos_s);
    cJSON_AddBoolToObject(model, "ignore_merges", 0);
    cJSON *vocab = cJSON_AddObjectToObject(model, "vocab");
    for (size_t i = 0; i < n; i++) {
        if (strmap_get(&map, tok[i].p, tok[i].len) != (int32_t)i) continue; /* repeated piece: last id wins */
        char *k = dup_n(tok[i].p, tok[i].len);
        if (!k) {
            s = cmf_err(CMF_E_NOMEM, "out of memory (vocab)");
            break;
        }
        cJSON_AddNumberToObject(vocab, k, (double)i);
        free(k);
    }
    if (!s && spm) {
        merge *m = NULL;
        size_t nm = 0;
        s = spm_merges(tok, scores, n, &map, &m, &nm);
        if (!s) s = add_merges(model, tok, m, nm);
        free(m);
    } else if (!s) {
        s = copy_merges(model, mk);
    }
    cJSON_AddItemToObject(root, "model", model);
    free(map.slots);
    if (!s) {
        char *txt = cJSON_PrintUnformatted(root);
        if (!txt)
            s = cmf_err(CMF_E_NOMEM, "out of memory (tokenizer.json)");
        else {
            *json = txt;
            *len = strlen(txt);
        }
    }
    cJSON_Delete(root);
    return s;
}
