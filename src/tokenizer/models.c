/* models.c — the tokenizer.json model: loading and dispatch (BPE lives in bpe.c), plus WordLevel, WordPiece
 * (greedy longest-match-first, HF models/wordpiece) and Unigram (Viterbi over the vocab scores, HF
 * models/unigram/lattice.rs, unk penalty 10, consecutive unks fused, optional byte fallback). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tokenizer.h"
#include "util/error.h"

void tok_model_free(tok_model *m) {
    if (!m) return;
    if (m->type == TOK_MODEL_BPE) tok_bpe_free(m);
    tok_strmap_free(&m->vocab);
    free(m->tok_entry);
    free(m->cont_prefix == NULL || m->type == TOK_MODEL_BPE ? NULL : m->cont_prefix);
    free(m->scores);
    free(m);
}

static cmf_status unk_from_token(const cJSON *j, tok_model *m, const char *what) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, "unk_token");
    m->unk_id = -1;
    if (!cJSON_IsString(v)) return CMF_OK;
    m->unk_id = tok_strmap_get(&m->vocab, v->valuestring, strlen(v->valuestring));
    if (m->unk_id < 0)
        return cmf_err(CMF_E_FORMAT, "tokenizer.json: %s unk_token '%s' is not in the vocab", what, v->valuestring);
    return CMF_OK;
}

static cmf_status unigram_load(const cJSON *j, tok_model *m) {
    const cJSON *vocab = cJSON_GetObjectItemCaseSensitive(j, "vocab");
    if (!cJSON_IsArray(vocab)) return cmf_err(CMF_E_FORMAT, "tokenizer.json: Unigram model.vocab must be an array");
    int n = cJSON_GetArraySize(vocab);
    m->scores = malloc(((size_t)n + 1) * sizeof *m->scores);
    if (!m->scores) return cmf_err(CMF_E_NOMEM, "tokenizer.json: out of memory");
    cmf_status st = tok_vocab_reserve(m, (size_t)n);
    if (st != CMF_OK) return st;
    m->min_score = 1e300;
    int32_t id = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, vocab) {
        if (!cJSON_IsArray(e) || cJSON_GetArraySize(e) != 2 || !cJSON_IsString(e->child) ||
            !cJSON_IsNumber(e->child->next))
            return cmf_err(CMF_E_FORMAT, "tokenizer.json: Unigram model.vocab[%d] is not [piece, score]", id);
        const char *s = e->child->valuestring;
        size_t len = strlen(s);
        if ((st = tok_vocab_set_id(m, id, s, len)) != CMF_OK) return st;
        m->scores[id] = e->child->next->valuedouble;
        if (m->scores[id] < m->min_score) m->min_score = m->scores[id];
        if (len > m->max_tok_len) m->max_tok_len = len;
        id++;
    }
    m->n_ids = id;
    const cJSON *u = cJSON_GetObjectItemCaseSensitive(j, "unk_id");
    m->unk_id = -1;
    if (cJSON_IsNumber(u)) {
        if (u->valueint < 0 || u->valueint >= id)
            return cmf_err(CMF_E_FORMAT, "tokenizer.json: Unigram unk_id %d out of range", u->valueint);
        m->unk_id = u->valueint;
    }
    m->unigram_byte_fallback = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, "byte_fallback"));
    for (int b = 0; b < 256; b++) {
        char name[8];
        snprintf(name, sizeof name, "<0x%02X>", b);
        m->byte_ids[b] = tok_strmap_get(&m->vocab, name, 6);
    }
    return CMF_OK;
}

cmf_status tok_model_load(const cJSON *j, tok_model **out) {
    *out = NULL;
    if (!cJSON_IsObject(j)) return cmf_err(CMF_E_FORMAT, "tokenizer.json: 'model' must be an object");
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(j, "type");
    const char *ty = cJSON_IsString(t) ? t->valuestring : NULL;
    if (!ty) { /* old files omit the type of a BPE model that has merges */
        if (cJSON_GetObjectItemCaseSensitive(j, "merges")) ty = "BPE";
        else return cmf_err(CMF_E_FORMAT, "tokenizer.json: model without a 'type'");
    }
    tok_model *m = calloc(1, sizeof *m);
    if (!m) return cmf_err(CMF_E_NOMEM, "tokenizer.json: out of memory");
    m->unk_id = -1;
    cmf_status st;
    if (!strcmp(ty, "BPE")) {
        m->type = TOK_MODEL_BPE;
        st = tok_bpe_load(j, m);
    } else if (!strcmp(ty, "WordLevel")) {
        m->type = TOK_MODEL_WORDLEVEL;
        st = tok_vocab_from_object(cJSON_GetObjectItemCaseSensitive(j, "vocab"), m);
        if (st == CMF_OK) st = unk_from_token(j, m, "WordLevel");
    } else if (!strcmp(ty, "WordPiece")) {
        m->type = TOK_MODEL_WORDPIECE;
        st = tok_vocab_from_object(cJSON_GetObjectItemCaseSensitive(j, "vocab"), m);
        if (st == CMF_OK) st = unk_from_token(j, m, "WordPiece");
        const cJSON *p = cJSON_GetObjectItemCaseSensitive(j, "continuing_subword_prefix");
        const char *pre = cJSON_IsString(p) ? p->valuestring : "##";
        m->cont_prefix = malloc(strlen(pre) + 1);
        if (!m->cont_prefix) st = cmf_err(CMF_E_NOMEM, "tokenizer.json: out of memory");
        else strcpy(m->cont_prefix, pre);
        const cJSON *mx = cJSON_GetObjectItemCaseSensitive(j, "max_input_chars_per_word");
        m->max_input_chars_per_word = cJSON_IsNumber(mx) ? mx->valueint : 100;
    } else if (!strcmp(ty, "Unigram")) {
        m->type = TOK_MODEL_UNIGRAM;
        st = unigram_load(j, m);
    } else {
        st = cmf_err(CMF_E_UNSUPPORTED, "tokenizer.json: model type '%s' is not supported", ty);
    }
    if (st != CMF_OK) {
        tok_model_free(m);
        return st;
    }
    *out = m;
    return CMF_OK;
}

cmf_status tok_wordpiece_encode(const tok_model *m, const char *s, size_t len, tok_ids *out) {
    size_t nchars = 0;
    for (size_t i = 0; i < len; i++) nchars += ((unsigned char)s[i] & 0xC0) != 0x80;
    size_t start_n = out->n;
    if (nchars <= (size_t)m->max_input_chars_per_word) {
        size_t plen = strlen(m->cont_prefix);
        tok_buf tmp = {0};
        size_t start = 0;
        int bad = 0;
        while (start < len && !bad) {
            size_t end = len;
            int32_t found = -1;
            while (end > start) {
                tmp.n = 0;
                if ((start > 0 && tok_buf_put(&tmp, m->cont_prefix, plen)) || tok_buf_put(&tmp, s + start, end - start)) {
                    tok_buf_free(&tmp);
                    return cmf_err(CMF_E_NOMEM, "tokenizer: out of memory");
                }
                found = tok_strmap_get(&m->vocab, tmp.p, tmp.n);
                if (found >= 0) break;
                do end--; while (end > start && ((unsigned char)s[end] & 0xC0) == 0x80);
            }
            if (found < 0) bad = 1;
            else if (tok_ids_push(out, found)) bad = 2;
            start = end;
        }
        tok_buf_free(&tmp);
        if (bad == 2) return cmf_err(CMF_E_NOMEM, "tokenizer: out of memory");
        if (!bad) return CMF_OK;
    }
    out->n = start_n;
    if (m->unk_id < 0) return cmf_err(CMF_E_ARG, "tokenizer: WordPiece cannot encode a word and has no unk_token");
    return tok_ids_push(out, m->unk_id) ? cmf_err(CMF_E_NOMEM, "tokenizer: out of memory") : CMF_OK;
}

cmf_status tok_unigram_encode(const tok_model *m, const char *s, size_t len, tok_ids *out) {
    if (!len) return CMF_OK;
    double *best = malloc((len + 1) * sizeof *best);
    int32_t *from = malloc((len + 1) * sizeof *from), *tid = malloc((len + 1) * sizeof *tid);
    if (!best || !from || !tid) {
        free(best), free(from), free(tid);
        return cmf_err(CMF_E_NOMEM, "tokenizer: out of memory");
    }
    const double unk_score = m->min_score - 10.0;
    for (size_t i = 0; i <= len; i++) from[i] = -1;
    from[0] = 0;
    best[0] = 0;
    for (size_t pos = 0; pos < len; pos++) {
        if (from[pos] < 0 || ((unsigned char)s[pos] & 0xC0) == 0x80) continue;
        uint32_t cp;
        int cl = tok_utf8_decode(s + pos, len - pos, &cp);
        if (!cl) cl = 1;
        int single = 0;
        for (size_t l = 1; l <= m->max_tok_len && pos + l <= len; l++) {
            if (pos + l < len && ((unsigned char)s[pos + l] & 0xC0) == 0x80) continue;
            int32_t id = tok_strmap_get(&m->vocab, s + pos, l);
            if (id < 0) continue;
            double sc = best[pos] + m->scores[id];
            if (from[pos + l] < 0 || sc > best[pos + l]) best[pos + l] = sc, from[pos + l] = (int32_t)pos, tid[pos + l] = id;
            if (l == (size_t)cl) single = 1;
        }
        if (!single && m->unk_id >= 0) {
            double sc = best[pos] + unk_score;
            size_t e = pos + (size_t)cl;
            if (from[e] < 0 || sc > best[e]) best[e] = sc, from[e] = (int32_t)pos, tid[e] = m->unk_id;
        }
    }
    cmf_status st = CMF_OK;
    if (from[len] < 0) {
        st = cmf_err(CMF_E_ARG, "tokenizer: Unigram cannot encode the input and has no unk_id");
        goto done;
    }
    /* backtrack into (start, end, id) triples, stored reversed in best/from reuse: collect ends first */
    size_t cnt = 0;
    for (size_t e = len; e > 0; e = (size_t)from[e]) cnt++;
    size_t *ends = malloc(cnt * sizeof *ends);
    if (!ends) {
        st = cmf_err(CMF_E_NOMEM, "tokenizer: out of memory");
        goto done;
    }
    size_t k = cnt;
    for (size_t e = len; e > 0; e = (size_t)from[e]) ends[--k] = e;
    for (size_t i = 0; i < cnt && st == CMF_OK; i++) {
        size_t e = ends[i], b = (size_t)from[e];
        int32_t id = tid[e];
        if (id == m->unk_id) { /* fuse consecutive unknowns */
            while (i + 1 < cnt && tid[ends[i + 1]] == m->unk_id) e = ends[++i];
            if (m->unigram_byte_fallback) {
                int all = 1;
                for (size_t q = b; q < e; q++)
                    if (m->byte_ids[(unsigned char)s[q]] < 0) all = 0;
                if (all) {
                    for (size_t q = b; q < e && st == CMF_OK; q++)
                        if (tok_ids_push(out, m->byte_ids[(unsigned char)s[q]])) st = cmf_err(CMF_E_NOMEM, "oom");
                    continue;
                }
            }
        }
        if (tok_ids_push(out, id)) st = cmf_err(CMF_E_NOMEM, "tokenizer: out of memory");
    }
    free(ends);
done:
    free(best), free(from), free(tid);
    return st;
}

cmf_status tok_model_encode(const tok_model *m, const char *s, size_t len, tok_ids *out) {
    switch (m->type) {
    case TOK_MODEL_BPE: return tok_bpe_encode(m, s, len, out);
    case TOK_MODEL_WORDPIECE: return tok_wordpiece_encode(m, s, len, out);
    case TOK_MODEL_UNIGRAM: return tok_unigram_encode(m, s, len, out);
    case TOK_MODEL_WORDLEVEL: {
        if (!len) return CMF_OK;
        int32_t id = tok_strmap_get(&m->vocab, s, len);
        if (id < 0) id = m->unk_id;
        if (id < 0) return cmf_err(CMF_E_ARG, "tokenizer: WordLevel: '%.*s' not in vocab, no unk_token", (int)len, s);
        return tok_ids_push(out, id) ? cmf_err(CMF_E_NOMEM, "tokenizer: out of memory") : CMF_OK;
    }
    }
    return cmf_err(CMF_E_UNSUPPORTED, "tokenizer: unknown model");
}
