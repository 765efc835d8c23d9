/* bpe.c — the BPE model of tokenizer.json (HF tokenizers src/models/bpe/{model,word}.rs): vocabulary and merges in
 * hash tables, merges applied by rank with a binary heap (lowest rank first, then leftmost position), byte
 * fallback to <0xXX> tokens, unk / fuse_unk, ignore_merges, and a bounded thread-safe cache of word -> ids. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tokenizer.h"
#include "util/error.h"

/* ---- merge map: (id_a, id_b) -> (rank, new_id) ------------------------------------------------------------- */

/* Hash of a merge key (murmur3's 64-bit finalizer: the key is already one integer, no byte loop needed). */
static inline size_t pair_hash(uint64_t k) {
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdull;
    k ^= k >> 33;
    k *= 0xc4ceb9fe1a85ec53ull;
    k ^= k >> 33;
    return (size_t)k;
}

/* The table's largest load: 5/8. The table is the biggest one a tokenizer has (16 bytes a slot; llama3: 280k merges),
 * its pages are most of what loading costs besides JSON parsing, and at this load a miss still probes 3-4 slots on
 * average, one or two cache lines. */
static inline int merge_map_over(size_t n, size_t cap) { return n * 8 > cap * 5; }

/* Rehashes into a zeroed table of cap slots (a power of two, not over the load above). */
static int merge_map_rehash(tok_merge_map *m, size_t cap) {
    tok_merge_slot *t = calloc(cap, sizeof *t);
    if (!t) return -1;
    for (size_t i = 0; i < m->cap; i++) {
        if (!m->slots[i].key) continue;
        size_t h = pair_hash(m->slots[i].key) & (cap - 1);
        while (t[h].key) h = (h + 1) & (cap - 1);
        t[h] = m->slots[i];
    }
    free(m->slots);
    m->slots = t, m->cap = cap;
    return 0;
}

/* Sizes the table for n pairs in all, so that loading a merges array of known length never rehashes. */
static int merge_map_reserve(tok_merge_map *m, size_t n) {
    size_t cap = m->cap ? m->cap : 64;
    while (merge_map_over(n + 1, cap)) cap *= 2;
    return cap == m->cap ? 0 : merge_map_rehash(m, cap);
}

/* Later duplicates overwrite earlier ones, as HF's HashMap collect does. */
static int merge_map_set(tok_merge_map *m, int32_t a, int32_t b, uint32_t rank, int32_t new_id) {
    if (merge_map_over(m->n + 1, m->cap) && merge_map_rehash(m, m->cap ? m->cap * 2 : 4096)) return -1;
    uint64_t key = (((uint64_t)(uint32_t)a << 32) | (uint32_t)b) + 1;
    size_t h = pair_hash(key) & (m->cap - 1);
    while (m->slots[h].key && m->slots[h].key != key) h = (h + 1) & (m->cap - 1);
    if (!m->slots[h].key) m->n++;
    m->slots[h] = (tok_merge_slot){key, rank, new_id};
    return 0;
}

/* Slot of the pair, or -1. */
static inline long merge_map_find(const tok_merge_map *m, int32_t a, int32_t b) {
    if (!m->cap) return -1;
    uint64_t key = (((uint64_t)(uint32_t)a << 32) | (uint32_t)b) + 1;
    size_t h = pair_hash(key) & (m->cap - 1);
    while (m->slots[h].key) {
        if (m->slots[h].key == key) return (long)h;
        h = (h + 1) & (m->cap - 1);
    }
    return -1;
}

/* ---- word cache -------------------------------------------------------------------------------------------- */

#define CACHE_SLOTS 16384u
#define CACHE_MAX_WORD 256u /* HF caches words shorter than 256 bytes */

typedef struct cache_entry {
    char *key;
    uint32_t klen, n;
    int32_t *ids;
} cache_entry;

struct tok_cache {
    pthread_mutex_t lock;
    cache_entry e[CACHE_SLOTS];
};

static tok_cache *cache_new(void) {
    tok_cache *c = calloc(1, sizeof *c);
    if (c && pthread_mutex_init(&c->lock, NULL)) {
        free(c);
        return NULL;
    }
    return c;
}

static void cache_free(tok_cache *c) {
    if (!c) return;
    for (size_t i = 0; i < CACHE_SLOTS; i++) free(c->e[i].ids); /* one block: ids then key */
    pthread_mutex_destroy(&c->lock);
    free(c);
}

/* Appends the cached ids of s to out: 1 on a hit, 0 on a miss, -1 on allocation failure. */
static int cache_get(tok_cache *c, const char *s, size_t len, tok_ids *out) {
    size_t h = tok_hash(s, len) & (CACHE_SLOTS - 1);
    int r = 0;
    pthread_mutex_lock(&c->lock);
    cache_entry *e = &c->e[h];
    if (e->key && e->klen == len && memcmp(e->key, s, len) == 0) r = tok_ids_append(out, e->ids, e->n) ? -1 : 1;
    pthread_mutex_unlock(&c->lock);
    return r;
}

static void cache_put(tok_cache *c, const char *s, size_t len, const int32_t *ids, size_t n) {
    char *blk = malloc(len + n * sizeof *ids + sizeof(int32_t));
    if (!blk) return; /* the cache is only an optimisation */
    int32_t *idc = (int32_t *)(void *)blk;
    if (n) memcpy(idc, ids, n * sizeof *ids);
    char *key = blk + n * sizeof *ids;
    if (len) memcpy(key, s, len);
    size_t h = tok_hash(s, len) & (CACHE_SLOTS - 1);
    pthread_mutex_lock(&c->lock);
    cache_entry *e = &c->e[h];
    free(e->ids);
    e->key = key, e->klen = (uint32_t)len, e->ids = idc, e->n = (uint32_t)n;
    pthread_mutex_unlock(&c->lock);
}

/* ---- loading ----------------------------------------------------------------------------------------------- */

/* Grows m->tok_entry to at least n ids (new ones are holes). */
static cmf_status ids_reserve(tok_model *m, int32_t n) {
    if (n <= m->ids_cap) return CMF_OK;
    uint32_t *t = realloc(m->tok_entry, (size_t)n * sizeof *t);
    if (!t) return cmf_err(CMF_E_NOMEM, "tokenizer.json: out of memory");
    memset(t + m->ids_cap, 0, (size_t)(n - m->ids_cap) * sizeof *t);
    m->tok_entry = t;
    m->ids_cap = n;
    return CMF_OK;
}

cmf_status tok_vocab_reserve(tok_model *m, size_t n) {
    if (n > TOK_MAX_ID) n = TOK_MAX_ID;
    /* 8 bytes a key is a guess (real BPE vocabularies average 6-7 bytes); the pool doubles when it is short */
    if (tok_strmap_reserve(&m->vocab, n, n * 8)) return cmf_err(CMF_E_NOMEM, "tokenizer.json: out of memory");
    return ids_reserve(m, (int32_t)n);
}

cmf_status tok_vocab_set_id(tok_model *m, int32_t id, const char *s, size_t len) {
    if (id < 0 || id >= TOK_MAX_ID)
        return cmf_err(CMF_E_FORMAT, "tokenizer.json: model.vocab: id %d for '%.*s' is out of range [0, %d)", id,
                       (int)len, s, TOK_MAX_ID);
    if (id >= m->ids_cap) {
        int32_t n = m->ids_cap ? m->ids_cap : 1024;
        while (n <= id) n = n > TOK_MAX_ID / 2 ? TOK_MAX_ID : n * 2;
        cmf_status st = ids_reserve(m, n);
        if (st != CMF_OK) return st;
    }
    long e = tok_strmap_put(&m->vocab, s, len, id);
    if (e < 0) return cmf_err(CMF_E_NOMEM, "tokenizer.json: out of memory");
    m->tok_entry[id] = (uint32_t)e + 1;
    if (id >= m->n_ids) m->n_ids = id + 1;
    return CMF_OK;
}

cmf_status tok_vocab_from_object(const cJSON *vocab, tok_model *m) {
    if (!cJSON_IsObject(vocab)) return cmf_err(CMF_E_FORMAT, "tokenizer.json: model.vocab must be an object");
    cmf_status st = tok_vocab_reserve(m, (size_t)cJSON_GetArraySize(vocab));
    if (st != CMF_OK) return st;
    const cJSON *e;
    cJSON_ArrayForEach(e, vocab) {
        double d = e->valuedouble;
        if (!cJSON_IsNumber(e) || d < 0 || d > 2147483647.0 || d != (double)(int32_t)d)
            return cmf_err(CMF_E_FORMAT, "tokenizer.json: model.vocab['%s'] is not a valid id", e->string);
        if ((st = tok_vocab_set_id(m, (int32_t)d, e->string, strlen(e->string))) != CMF_OK) return st;
    }
    return CMF_OK;
}

static char *opt_string(const cJSON *j, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, key);
    if (!cJSON_IsString(v) || !v->valuestring[0]) return NULL;
    size_t n = strlen(v->valuestring);
    char *c = malloc(n + 1);
    if (c) memcpy(c, v->valuestring, n + 1);
    return c;
}

cmf_status tok_bpe_load(const cJSON *j, tok_model *m) {
    cmf_status st = tok_vocab_from_object(cJSON_GetObjectItemCaseSensitive(j, "vocab"), m);
    if (st != CMF_OK) return st;
    m->cont_prefix = opt_string(j, "continuing_subword_prefix");
    m->eow_suffix = opt_string(j, "end_of_word_suffix");
    const cJSON *v;
    m->fuse_unk = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, "fuse_unk"));
    m->byte_fallback = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, "byte_fallback"));
    m->ignore_merges = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, "ignore_merges"));
    v = cJSON_GetObjectItemCaseSensitive(j, "dropout");
    if (cJSON_IsNumber(v) && v->valuedouble > 0.0)
        return cmf_err(CMF_E_UNSUPPORTED, "tokenizer.json: BPE dropout %g is not supported", v->valuedouble);
    v = cJSON_GetObjectItemCaseSensitive(j, "unk_token");
    m->unk_id = -1;
    if (cJSON_IsString(v)) {
        m->unk_id = tok_strmap_get(&m->vocab, v->valuestring, strlen(v->valuestring));
        if (m->unk_id < 0)
            return cmf_err(CMF_E_FORMAT, "tokenizer.json: BPE unk_token '%s' is not in the vocab", v->valuestring);
    }
    for (int b = 0; b < 256; b++) {
        char name[8];
        snprintf(name, sizeof name, "<0x%02X>", b);
        m->byte_ids[b] = tok_strmap_get(&m->vocab, name, 6);
    }
    const cJSON *merges = cJSON_GetObjectItemCaseSensitive(j, "merges");
    if (merges && !cJSON_IsArray(merges)) return cmf_err(CMF_E_FORMAT, "tokenizer.json: model.merges must be an array");
    if (merges && merge_map_reserve(&m->merges, (size_t)cJSON_GetArraySize(merges)))
        return cmf_err(CMF_E_NOMEM, "tokenizer.json: out of memory");
    size_t plen = m->cont_prefix ? strlen(m->cont_prefix) : 0;
    tok_buf nt = {0};
    uint32_t rank = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, merges) {
        const char *a, *b;
        size_t al, bl;
        if (cJSON_IsString(e)) {
            const char *sp = strchr(e->valuestring, ' ');
            if (!sp || !sp[1] || strchr(sp + 1, ' ')) {
                tok_buf_free(&nt);
                return cmf_err(CMF_E_FORMAT, "tokenizer.json: model.merges[%u] '%s' is not 'a b'", rank,
                               e->valuestring);
            }
            a = e->valuestring, al = (size_t)(sp - a), b = sp + 1, bl = strlen(b);
        } else if (cJSON_IsArray(e) && cJSON_GetArraySize(e) == 2 && cJSON_IsString(e->child) &&
                   cJSON_IsString(e->child->next)) {
            a = e->child->valuestring, al = strlen(a), b = e->child->next->valuestring, bl = strlen(b);
        } else {
            tok_buf_free(&nt);
            return cmf_err(CMF_E_FORMAT, "tokenizer.json: model.merges[%u] is neither \"a b\" nor [a, b]", rank);
        }
        int32_t ia = tok_strmap_get(&m->vocab, a, al), ib = tok_strmap_get(&m->vocab, b, bl);
        size_t skip = (plen && bl >= plen) ? plen : 0;
        nt.n = 0;
        if (tok_buf_put(&nt, a, al) || tok_buf_put(&nt, b + skip, bl - skip)) {
            tok_buf_free(&nt);
            return cmf_err(CMF_E_NOMEM, "tokenizer.json: out of memory");
        }
        int32_t in = tok_strmap_get(&m->vocab, nt.p, nt.n);
        if (ia < 0 || ib < 0 || in < 0) {
            tok_buf_free(&nt);
            return cmf_err(CMF_E_FORMAT, "tokenizer.json: model.merges[%u] ('%.*s' '%.*s'): token not in vocab", rank,
                           (int)al, a, (int)bl, b);
        }
        if (merge_map_set(&m->merges, ia, ib, rank, in)) {
            tok_buf_free(&nt);
            return cmf_err(CMF_E_NOMEM, "tokenizer.json: out of memory");
        }
        rank++;
    }
    tok_buf_free(&nt);
    m->cache = cache_new();
    if (!m->cache) return cmf_err(CMF_E_NOMEM, "tokenizer.json: out of memory");
    return CMF_OK;
}

void tok_bpe_free(tok_model *m) {
    free(m->merges.slots);
    free(m->cont_prefix), free(m->eow_suffix);
    cache_free(m->cache);
}

/* ---- encoding ---------------------------------------------------------------------------------------------- */

typedef struct sym {
    int32_t id;
    int32_t prev, next; /* -1 at the ends */
    uint32_t len;       /* bytes of the word covered; 0 = merged away */
} sym;

typedef struct merge {
    uint32_t rank;
    uint32_t pos;
    int32_t new_id;
} merge;

static inline int merge_less(merge a, merge b) { return a.rank != b.rank ? a.rank < b.rank : a.pos < b.pos; }

static void heap_push(merge *h, size_t *n, merge x) {
    size_t i = (*n)++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!merge_less(x, h[p])) break;
        h[i] = h[p];
        i = p;
    }
    h[i] = x;
}

static merge heap_pop(merge *h, size_t *n) {
    merge top = h[0], x = h[--(*n)];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= *n) break;
        if (c + 1 < *n && merge_less(h[c + 1], h[c])) c++;
        if (!merge_less(h[c], x)) break;
        h[i] = h[c];
        i = c;
    }
    if (*n) h[i] = x;
    return top;
}

/* Pushes the merge of symbols (i, next(i)) when the pair is in the merge table. */
static void push_pair(const tok_model *m, const sym *w, merge *heap, size_t *hn, int32_t i) {
    if (i < 0 || w[i].next < 0) return;
    long k = merge_map_find(&m->merges, w[i].id, w[w[i].next].id);
    if (k >= 0) heap_push(heap, hn, (merge){m->merges.slots[k].rank, (uint32_t)i, m->merges.slots[k].new_id});
}

cmf_status tok_bpe_encode(const tok_model *m, const char *s, size_t len, tok_ids *out) {
    if (len == 0) return CMF_OK;
    if (m->ignore_merges) {
        int32_t id = tok_strmap_get(&m->vocab, s, len);
        if (id >= 0) return tok_ids_push(out, id) ? cmf_err(CMF_E_NOMEM, "tokenizer: out of memory") : CMF_OK;
    }
    int cacheable = len < CACHE_MAX_WORD;
    if (cacheable) {
        int r = cache_get(m->cache, s, len, out);
        if (r < 0) return cmf_err(CMF_E_NOMEM, "tokenizer: out of memory");
        if (r) return CMF_OK;
    }
    /* A word has at most `len` initial symbols (one per byte in the worst case of byte fallback). */
    sym stack_w[64];
    merge stack_h[128];
    sym *w = len <= 64 ? stack_w : malloc(len * sizeof *w);
    merge *heap = len <= 64 ? stack_h : malloc(2 * len * sizeof *heap + sizeof *heap);
    tok_buf tmp = {0};
    cmf_status st = CMF_OK;
    if (!w || !heap) {
        st = cmf_err(CMF_E_NOMEM, "tokenizer: out of memory");
        goto done;
    }
    int32_t n = 0;
    int32_t unk_id = -1;
    uint32_t unk_len = 0;
    size_t plen = m->cont_prefix ? strlen(m->cont_prefix) : 0, slen = m->eow_suffix ? strlen(m->eow_suffix) : 0;
#define ADD_SYM(ID, L) (w[n] = (sym){(ID), n - 1, -1, (L)}, n > 0 ? (void)(w[n - 1].next = n) : (void)0, n++)
    for (size_t i = 0; i < len;) {
        uint32_t cp;
        int cl = tok_utf8_decode(s + i, len - i, &cp);
        if (!cl) cl = 1; /* pieces are valid UTF-8; a stray byte is treated as one character */
        const char *c = s + i;
        size_t clen = (size_t)cl;
        int first = i == 0, last = i + (size_t)cl == len;
        if ((plen && !first) || (slen && last)) {
            tmp.n = 0;
            if ((plen && !first && tok_buf_put(&tmp, m->cont_prefix, plen)) || tok_buf_put(&tmp, c, clen) ||
                (slen && last && tok_buf_put(&tmp, m->eow_suffix, slen))) {
                st = cmf_err(CMF_E_NOMEM, "tokenizer: out of memory");
                goto done;
            }
            c = tmp.p, clen = tmp.n;
        }
        int32_t id = tok_strmap_get(&m->vocab, c, clen);
        if (id >= 0) {
            if (unk_id >= 0) ADD_SYM(unk_id, unk_len), unk_id = -1;
            ADD_SYM(id, (uint32_t)cl);
        } else {
            int done_bytes = 0;
            if (m->byte_fallback) {
                int all = 1;
                for (size_t k = 0; k < clen; k++)
                    if (m->byte_ids[(unsigned char)c[k]] < 0) all = 0;
                if (all) {
                    /* as in HF, a pending unk is not flushed before the byte tokens */
                    for (size_t k = 0; k < clen; k++) ADD_SYM(m->byte_ids[(unsigned char)c[k]], 1);
                    done_bytes = 1;
                }
            }
            if (!done_bytes && m->unk_id >= 0) {
                if (unk_id >= 0 && m->fuse_unk) {
                    unk_len += (uint32_t)cl;
                } else {
                    if (unk_id >= 0) ADD_SYM(unk_id, unk_len);
                    unk_id = m->unk_id, unk_len = (uint32_t)cl;
                }
            }
        }
        i += (size_t)cl;
    }
    if (unk_id >= 0) ADD_SYM(unk_id, unk_len);
#undef ADD_SYM
    /* merge_all: every merge pushes at most two entries and removes one symbol, so the heap stays under 2n+1 */
    size_t hn = 0;
    for (int32_t i = 0; i + 1 < n; i++) push_pair(m, w, heap, &hn, i);
    while (hn) {
        merge top = heap_pop(heap, &hn);
        sym *a = &w[top.pos];
        if (a->len == 0 || a->next < 0) continue;
        int32_t bpos = a->next;
        long k = merge_map_find(&m->merges, a->id, w[bpos].id);
        if (k < 0 || m->merges.slots[k].new_id != top.new_id) continue; /* stale entry */
        a->id = top.new_id;
        a->len += w[bpos].len;
        a->next = w[bpos].next;
        w[bpos].len = 0;
        if (a->next >= 0) w[a->next].prev = (int32_t)top.pos;
        push_pair(m, w, heap, &hn, a->prev);
        push_pair(m, w, heap, &hn, (int32_t)top.pos);
    }
    size_t start = out->n;
    for (int32_t i = 0; i < n; i++)
        if (w[i].len && tok_ids_push(out, w[i].id)) {
            st = cmf_err(CMF_E_NOMEM, "tokenizer: out of memory");
            goto done;
        }
    if (cacheable) cache_put(m->cache, s, len, out->n > start ? out->v + start : NULL, out->n - start);
done:
    if (w != stack_w) free(w);
    if (heap != stack_h) free(heap);
    tok_buf_free(&tmp);
    return st;
}
