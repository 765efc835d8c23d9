/* tokenizer.c — loading a Hugging Face tokenizer.json, added-token splitting, the encode pipeline and the public
 * tokenizer API of include/cmf.h. The order of steps is HF tokenizers' TokenizerImpl::encode_single_sequence
 * (tokenizer/mod.rs) with AddedVocabulary::extract_and_normalize (tokenizer/added_vocabulary.rs). */
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "tokenizer/tokenizer.h"
#include "util/error.h"
#include "util/fileio.h"

#define OOM() cmf_err(CMF_E_NOMEM, "tokenizer: out of memory")

/* ---- post-processors --------------------------------------------------------------------------------------- */

static void post_free(tok_post *p) {
    if (!p) return;
    for (size_t i = 0; i < p->n_seq; i++) post_free(p->seq[i]);
    free(p->seq);
    free(p->single);
    free(p);
}

/* Reads ["token", id] (RobertaProcessing / BertProcessing cls and sep). */
static cmf_status pair_id(const cJSON *j, const char *key, const char *what, int32_t *id) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, key);
    if (!cJSON_IsArray(v) || cJSON_GetArraySize(v) != 2 || !cJSON_IsNumber(v->child->next) ||
        v->child->next->valuedouble < 0 || v->child->next->valuedouble >= TOK_MAX_ID)
        return cmf_err(CMF_E_FORMAT, "tokenizer.json: post_processor %s: '%s' must be [token, id]", what, key);
    *id = (int32_t)v->child->next->valuedouble;
    return CMF_OK;
}

static cmf_status template_load(const cJSON *j, tok_post *p) {
    const cJSON *single = cJSON_GetObjectItemCaseSensitive(j, "single");
    const cJSON *specials = cJSON_GetObjectItemCaseSensitive(j, "special_tokens");
    if (!cJSON_IsArray(single))
        return cmf_err(CMF_E_FORMAT, "tokenizer.json: post_processor TemplateProcessing: 'single' must be an array");
    size_t cap = 0, i = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, single) {
        const cJSON *sp = cJSON_GetObjectItemCaseSensitive(e, "SpecialToken");
        const cJSON *seq = cJSON_GetObjectItemCaseSensitive(e, "Sequence");
        const cJSON *ids = NULL;
        if (sp) {
            const cJSON *name = cJSON_GetObjectItemCaseSensitive(sp, "id");
            const cJSON *st = cJSON_IsString(name) ? cJSON_GetObjectItemCaseSensitive(specials, name->valuestring) : NULL;
            ids = cJSON_GetObjectItemCaseSensitive(st, "ids");
            if (!cJSON_IsArray(ids))
                return cmf_err(CMF_E_FORMAT, "tokenizer.json: TemplateProcessing: single[%zu]: special token '%s' "
                               "has no ids in special_tokens", i, cJSON_IsString(name) ? name->valuestring : "?");
        } else if (!seq) {
            return cmf_err(CMF_E_FORMAT, "tokenizer.json: TemplateProcessing: single[%zu] is neither SpecialToken "
                           "nor Sequence", i);
        }
        size_t add = ids ? (size_t)cJSON_GetArraySize(ids) : 1;
        if (p->n_single + add > cap) {
            cap = (p->n_single + add) * 2;
            int32_t *v = realloc(p->single, cap * sizeof *v);
            if (!v) return OOM();
            p->single = v;
        }
        if (!ids) {
            p->single[p->n_single++] = -1;
        } else {
            const cJSON *x;
            cJSON_ArrayForEach(x, ids) {
                if (!cJSON_IsNumber(x) || x->valuedouble < 0 || x->valuedouble >= TOK_MAX_ID)
                    return cmf_err(CMF_E_FORMAT, "tokenizer.json: TemplateProcessing: bad id in special_tokens");
                p->single[p->n_single++] = (int32_t)x->valuedouble;
            }
        }
        i++;
    }
    return CMF_OK;
}

static cmf_status post_load(const cJSON *j, tok_post **out) {
    *out = NULL;
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(j, "type");
    if (!cJSON_IsString(t)) return cmf_err(CMF_E_FORMAT, "tokenizer.json: post_processor without a string 'type'");
    const char *ty = t->valuestring;
    tok_post *p = calloc(1, sizeof *p);
    if (!p) return OOM();
    cmf_status st = CMF_OK;
    if (!strcmp(ty, "ByteLevel")) {
        p->type = TOK_POST_BYTELEVEL; /* only trims offsets: ids are unchanged */
    } else if (!strcmp(ty, "TemplateProcessing")) {
        p->type = TOK_POST_TEMPLATE;
        st = template_load(j, p);
    } else if (!strcmp(ty, "RobertaProcessing") || !strcmp(ty, "BertProcessing")) {
        p->type = TOK_POST_TEMPLATE;
        int32_t cls = -1, sep = -1;
        st = pair_id(j, "cls", ty, &cls);
        if (st == CMF_OK) st = pair_id(j, "sep", ty, &sep);
        if (st == CMF_OK && !(p->single = malloc(3 * sizeof *p->single))) st = OOM();
        if (st == CMF_OK) p->single[0] = cls, p->single[1] = -1, p->single[2] = sep, p->n_single = 3;
    } else if (!strcmp(ty, "Sequence")) {
        p->type = TOK_POST_SEQUENCE;
        const cJSON *arr = cJSON_GetObjectItemCaseSensitive(j, "processors");
        if (!cJSON_IsArray(arr)) {
            st = cmf_err(CMF_E_FORMAT, "tokenizer.json: post_processor Sequence: 'processors' must be an array");
        } else if (!(p->seq = calloc((size_t)cJSON_GetArraySize(arr) + 1, sizeof *p->seq))) {
            st = OOM();
        } else {
            const cJSON *e;
            cJSON_ArrayForEach(e, arr) {
                if (st != CMF_OK) break;
                st = post_load(e, &p->seq[p->n_seq]);
                if (st == CMF_OK) p->n_seq++;
            }
        }
    } else {
        st = cmf_err(CMF_E_UNSUPPORTED, "tokenizer.json: post_processor type '%s' is not supported", ty);
    }
    if (st != CMF_OK) {
        post_free(p);
        return st;
    }
    *out = p;
    return CMF_OK;
}

/* Number of ids the template adds to a single sequence (HF PostProcessor::added_tokens(false)). */
static size_t post_count(const tok_post *p) {
    size_t n = 0;
    for (size_t i = 0; i < p->n_single; i++) n += p->single[i] >= 0;
    for (size_t i = 0; i < p->n_seq; i++) n += post_count(p->seq[i]);
    return n;
}

/* HF pad_encodings for one sequence: the target is the fixed length or the sequence's own length, rounded up to
 * pad_to_multiple_of; pad ids go to the right or the left. */
static cmf_status pad_ids(const cmf_tokenizer *t, tok_ids *ids) {
    size_t target = t->pad_fixed ? t->pad_fixed : ids->n;
    if (t->pad_multiple && target % t->pad_multiple) target += t->pad_multiple - target % t->pad_multiple;
    if (ids->n >= target) return CMF_OK;
    size_t old = ids->n, add = target - old;
    for (size_t i = 0; i < add; i++)
        if (tok_ids_push(ids, t->pad_id)) return OOM();
    if (t->pad_left) {
        memmove(ids->v + add, ids->v, old * sizeof *ids->v);
        for (size_t i = 0; i < add; i++) ids->v[i] = t->pad_id;
    }
    return CMF_OK;
}

/* Reads "truncation" and "padding" (null or absent: none). */
static cmf_status load_trunc_pad(cmf_tokenizer *t, const cJSON *root) {
    const cJSON *tr = cJSON_GetObjectItemCaseSensitive(root, "truncation");
    if (tr && !cJSON_IsNull(tr)) {
        const cJSON *ml = cJSON_GetObjectItemCaseSensitive(tr, "max_length");
        const cJSON *dir = cJSON_GetObjectItemCaseSensitive(tr, "direction");
        const cJSON *strat = cJSON_GetObjectItemCaseSensitive(tr, "strategy");
        if (!cJSON_IsNumber(ml) || ml->valuedouble < 0 || ml->valuedouble > 1e9)
            return cmf_err(CMF_E_FORMAT, "tokenizer.json: truncation.max_length must be a non-negative integer");
        if (cJSON_IsString(strat) && !strcmp(strat->valuestring, "OnlySecond"))
            return cmf_err(CMF_E_UNSUPPORTED, "tokenizer.json: truncation strategy 'OnlySecond' needs a pair of "
                           "sequences");
        t->has_trunc = 1;
        t->trunc_max = (size_t)ml->valuedouble;
        t->trunc_left = cJSON_IsString(dir) && !strcmp(dir->valuestring, "Left");
    }
    const cJSON *pd = cJSON_GetObjectItemCaseSensitive(root, "padding");
    if (pd && !cJSON_IsNull(pd)) {
        const cJSON *strat = cJSON_GetObjectItemCaseSensitive(pd, "strategy");
        const cJSON *fixed = cJSON_GetObjectItemCaseSensitive(strat, "Fixed");
        const cJSON *dir = cJSON_GetObjectItemCaseSensitive(pd, "direction");
        const cJSON *mult = cJSON_GetObjectItemCaseSensitive(pd, "pad_to_multiple_of");
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(pd, "pad_id");
        if (cJSON_IsObject(strat) && !(cJSON_IsNumber(fixed) && fixed->valuedouble >= 0 && fixed->valuedouble <= 1e9))
            return cmf_err(CMF_E_FORMAT, "tokenizer.json: padding.strategy must be \"BatchLongest\" or {\"Fixed\": n}");
        if (!cJSON_IsNumber(id) || id->valuedouble < 0 || id->valuedouble >= TOK_MAX_ID)
            return cmf_err(CMF_E_FORMAT, "tokenizer.json: padding.pad_id must be a token id");
        t->has_pad = 1;
        t->pad_fixed = cJSON_IsNumber(fixed) ? (size_t)fixed->valuedouble : 0;
        t->pad_multiple = cJSON_IsNumber(mult) && mult->valuedouble > 0 && mult->valuedouble <= 1e9 ? (size_t)mult->valuedouble : 0;
        t->pad_left = cJSON_IsString(dir) && !strcmp(dir->valuestring, "Left");
        t->pad_id = (int32_t)id->valuedouble;
    }
    return CMF_OK;
}

/* Template ids must exist in the vocabulary (checked through Sequence processors). */
static cmf_status post_check(const tok_post *p, int32_t n_ids) {
    for (size_t i = 0; i < p->n_single; i++)
        if (p->single[i] >= n_ids)
            return cmf_err(CMF_E_FORMAT, "tokenizer.json: post_processor: special id %d is outside the vocabulary",
                           p->single[i]);
    for (size_t i = 0; i < p->n_seq; i++) {
        cmf_status st = post_check(p->seq[i], n_ids);
        if (st != CMF_OK) return st;
    }
    return CMF_OK;
}

/* Applies the single-sequence template to ids (in place). */
static cmf_status post_apply(const tok_post *p, tok_ids *ids) {
    if (p->type == TOK_POST_SEQUENCE) {
        for (size_t i = 0; i < p->n_seq; i++) {
            cmf_status st = post_apply(p->seq[i], ids);
            if (st != CMF_OK) return st;
        }
        return CMF_OK;
    }
    if (p->type != TOK_POST_TEMPLATE) return CMF_OK;
    tok_ids out = {0};
    for (size_t i = 0; i < p->n_single; i++) {
        int fail = p->single[i] < 0 ? tok_ids_append(&out, ids->v, ids->n) : tok_ids_push(&out, p->single[i]);
        if (fail) {
            free(out.v);
            return OOM();
        }
    }
    free(ids->v);
    *ids = out;
    return CMF_OK;
}

/* ---- added tokens ------------------------------------------------------------------------------------------ */

static void matcher_free(tok_matcher *m) {
    for (size_t i = 0; i < m->n; i++) free(m->norm_content[i]);
    free(m->norm_content);
    free(m->norm_len);
    free(m->cand);
    memset(m, 0, sizeof *m);
}

typedef struct cand_sort {
    const tok_added *a;
    char *s;
    size_t n;
} cand_sort;

static int cand_cmp(const void *x, const void *y) {
    const cand_sort *a = x, *b = y;
    unsigned char ca = (unsigned char)a->s[0], cb = (unsigned char)b->s[0];
    if (ca != cb) return ca < cb ? -1 : 1;
    if (a->n != b->n) return a->n > b->n ? -1 : 1; /* longest first */
    return a->a < b->a ? -1 : (a->a > b->a);
}

/* Builds the matcher of the added tokens whose `normalized` flag equals `normalized`; their content is passed
 * through the normalizer first when they are normalized (HF AddedVocabulary::refresh_added_tokens). */
static cmf_status matcher_build(cmf_tokenizer *t, int normalized, tok_matcher *m) {
    cand_sort *cs = calloc(t->n_added + 1, sizeof *cs);
    if (!cs) return OOM();
    size_t n = 0;
    cmf_status st = CMF_OK;
    tok_buf b = {0};
    for (size_t i = 0; i < t->n_added && st == CMF_OK; i++) {
        const tok_added *a = &t->added[i];
        if (a->normalized != normalized || a->len == 0) continue;
        const char *s = a->content;
        size_t len = a->len;
        if (normalized && t->normalizer) {
            st = tok_normalize(t->normalizer, s, len, &b);
            s = b.p ? b.p : "", len = b.n;
            if (st != CMF_OK || len == 0) continue;
        }
        cs[n].a = a;
        cs[n].n = len;
        if (!(cs[n].s = malloc(len + 1))) st = OOM();
        else memcpy(cs[n].s, s, len), cs[n].s[len] = 0, n++;
    }
    tok_buf_free(&b);
    if (st == CMF_OK) {
        qsort(cs, n, sizeof *cs, cand_cmp);
        m->cand = malloc((n + 1) * sizeof *m->cand);
        m->norm_content = malloc((n + 1) * sizeof *m->norm_content);
        m->norm_len = malloc((n + 1) * sizeof *m->norm_len);
        if (!m->cand || !m->norm_content || !m->norm_len) st = OOM();
    }
    if (st != CMF_OK) {
        for (size_t i = 0; i < n; i++) free(cs[i].s);
        free(cs);
        return st;
    }
    for (size_t i = 0; i < n; i++) m->cand[i] = cs[i].a, m->norm_content[i] = cs[i].s, m->norm_len[i] = cs[i].n;
    m->n = n;
    size_t k = 0;
    for (int c = 0; c < 256; c++) {
        m->start[c] = (uint32_t)k;
        while (k < n && (unsigned char)m->norm_content[k][0] == c) k++;
    }
    m->start[256] = (uint32_t)k;
    free(cs);
    return CMF_OK;
}

static int is_word_char(uint32_t cp) {
    if (cp == '_') return 1;
    utf8proc_category_t c = utf8proc_category((utf8proc_int32_t)cp);
    return (c >= UTF8PROC_CATEGORY_LU && c <= UTF8PROC_CATEGORY_NO) || c == UTF8PROC_CATEGORY_PC;
}

/* Finds the next added-token match in s[from..n) (leftmost, then longest), honouring single_word and extending
 * over whitespace for lstrip (not before `floor`) / rstrip. Returns the candidate index or -1. */
static long match_next(const tok_matcher *m, const char *s, size_t n, size_t from, size_t floor, size_t *ms,
                       size_t *me) {
    for (size_t i = from; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        for (uint32_t k = m->start[c]; k < m->start[c + 1]; k++) {
            size_t l = m->norm_len[k];
            if (i + l > n || memcmp(s + i, m->norm_content[k], l) != 0) continue;
            const tok_added *a = m->cand[k];
            size_t st = i, en = i + l;
            if (a->single_word) {
                uint32_t cp;
                int before = 0;
                if (st > 0) {
                    size_t q = st - 1;
                    while (q > 0 && ((unsigned char)s[q] & 0xC0) == 0x80) q--;
                    before = tok_utf8_decode(s + q, st - q, &cp) && is_word_char(cp);
                }
                int after = en < n && tok_utf8_decode(s + en, n - en, &cp) && is_word_char(cp);
                if (before || after) { /* rejected: the automaton resumes after this match */
                    i = en - 1;
                    goto next_pos;
                }
            }
            if (a->lstrip) {
                while (st > floor) {
                    size_t q = st - 1;
                    uint32_t cp;
                    while (q > floor && ((unsigned char)s[q] & 0xC0) == 0x80) q--;
                    if (!tok_utf8_decode(s + q, st - q, &cp) || !tok_is_whitespace(cp)) break;
                    st = q;
                }
            }
            if (a->rstrip) {
                uint32_t cp;
                int cl;
                while (en < n && (cl = tok_utf8_decode(s + en, n - en, &cp)) && tok_is_whitespace(cp)) en += (size_t)cl;
            }
            *ms = st, *me = en;
            return (long)k;
        }
    next_pos:;
    }
    return -1;
}

/* ---- encoding ---------------------------------------------------------------------------------------------- */

/* Pre-tokenizes and runs the model over one text segment that holds no added token. */
static cmf_status encode_segment(const cmf_tokenizer *t, const char *s, size_t len, int first, tok_ids *out) {
    if (!len) return CMF_OK;
    tok_pieces p = {0};
    if (tok_pieces_add(&p, s, len, first)) return OOM();
    cmf_status st = t->pretok ? tok_pretokenize(t->pretok, &p) : CMF_OK;
    for (size_t i = 0; i < p.n && st == CMF_OK; i++) st = tok_model_encode(t->model, p.buf.p + p.v[i].off, p.v[i].len, out);
    tok_pieces_free(&p);
    return st;
}

/* Normalizes a raw segment, splits off normalized added tokens, and encodes the rest. */
static cmf_status encode_raw_segment(const cmf_tokenizer *t, const char *s, size_t len, int first, tok_ids *out) {
    if (!len) return CMF_OK;
    tok_buf nb = {0};
    const char *ns = s;
    size_t nl = len;
    cmf_status st = CMF_OK;
    if (t->normalizer) {
        st = tok_normalize(t->normalizer, s, len, &nb);
        ns = nb.p ? nb.p : "", nl = nb.n;
    }
    size_t pos = 0, ms, me;
    long k;
    while (st == CMF_OK && t->match_norm.n && (k = match_next(&t->match_norm, ns, nl, pos, pos, &ms, &me)) >= 0) {
        st = encode_segment(t, ns + pos, ms - pos, first && pos == 0, out);
        if (st == CMF_OK && tok_ids_push(out, t->match_norm.cand[k]->id)) st = OOM();
        pos = me;
    }
    if (st == CMF_OK) st = encode_segment(t, ns + pos, nl - pos, first && pos == 0, out);
    tok_buf_free(&nb);
    return st;
}

/* Encodes text as HF Tokenizer::encode(text, add_special_tokens). See cmf.h. */
cmf_status cmf_tokenize(const cmf_tokenizer *t, const char *text, size_t len, int add_special, int32_t **ids,
                        size_t *n) {
    if (ids) *ids = NULL;
    if (n) *n = 0;
    if (!t) /* the usual cause: cmf_model_tokenizer of a file without a vocab section */
        return cmf_err(CMF_E_ARG, "cmf_tokenize: the tokenizer is NULL (cmf_model_tokenizer returns NULL for a model "
                                  "without a usable tokenizer; cmf_model_tokenizer_error says why)");
    if (!ids || !n || (len && !text)) return cmf_err(CMF_E_ARG, "cmf_tokenize: NULL argument (ids, n or text)");
    size_t bad = tok_utf8_check(text, len);
    if (bad != len) return cmf_err(CMF_E_ARG, "cmf_tokenize: text is not valid UTF-8 at byte %zu", bad);
    tok_ids out = {0};
    cmf_status st = CMF_OK;
    size_t pos = 0, ms, me;
    long k;
    while (t->match_raw.n && (k = match_next(&t->match_raw, text, len, pos, pos, &ms, &me)) >= 0) {
        st = encode_raw_segment(t, text + pos, ms - pos, pos == 0, &out);
        if (st == CMF_OK && tok_ids_push(&out, t->match_raw.cand[k]->id)) st = OOM();
        if (st != CMF_OK) break;
        pos = me;
    }
    if (st == CMF_OK) st = encode_raw_segment(t, text + pos, len - pos, pos == 0, &out);
    if (st == CMF_OK && t->has_trunc) {
        /* room for the template's special tokens is kept when they are added */
        size_t added = add_special && t->post ? post_count(t->post) : 0;
        size_t max = t->trunc_max > added ? t->trunc_max - added : 0;
        if (out.n > max) {
            if (t->trunc_left) memmove(out.v, out.v + (out.n - max), max * sizeof *out.v);
            out.n = max;
        }
    }
    if (st == CMF_OK && add_special && t->post) st = post_apply(t->post, &out);
    if (st == CMF_OK && t->has_pad) st = pad_ids(t, &out);
    if (st == CMF_OK && !out.v && !(out.v = malloc(sizeof *out.v))) st = OOM();
    if (st != CMF_OK) {
        free(out.v);
        return st;
    }
    *ids = out.v;
    *n = out.n;
    return CMF_OK;
}

/* ---- loading ----------------------------------------------------------------------------------------------- */

/* Frees a tokenizer from cmf_tokenizer_load; NULL is allowed. */
void cmf_tokenizer_free(cmf_tokenizer *t) {
    if (!t) return;
    tok_model_free(t->model);
    tok_normalizer_free(t->normalizer);
    tok_pretok_free(t->pretok);
    tok_decoder_free(t->decoder);
    post_free(t->post);
    for (size_t i = 0; i < t->n_added; i++) free(t->added[i].content);
    free(t->added);
    tok_strmap_free(&t->added_map);
    free(t->added_by_id);
    matcher_free(&t->match_raw);
    matcher_free(&t->match_norm);
    free(t);
}

static int jflag(const cJSON *o, const char *k, int dflt) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsBool(v) ? cJSON_IsTrue(v) : dflt;
}

/* Reads "added_tokens". Ids are assigned as HF's AddedVocabulary::add_tokens does when a tokenizer.json is loaded
 * (the "id" field is only checked there): a content already in the model vocabulary keeps its vocabulary id; any
 * other gets vocab_len (the number of vocabulary entries) for the first one, then max(added ids) + 1 once that
 * maximum reaches vocab_len. Empty contents are ignored; a repeated content updates the flags of the first. */
static cmf_status load_added(cmf_tokenizer *t, const cJSON *arr) {
    if (!arr || cJSON_IsNull(arr)) return CMF_OK;
    if (!cJSON_IsArray(arr)) return cmf_err(CMF_E_FORMAT, "tokenizer.json: 'added_tokens' must be an array");
    t->added = calloc((size_t)cJSON_GetArraySize(arr) + 1, sizeof *t->added);
    if (!t->added) return OOM();
    const int32_t vocab_len = (int32_t)t->model->vocab.n;
    int32_t max_added = -1;
    size_t k = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, arr) {
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(e, "id");
        const cJSON *c = cJSON_GetObjectItemCaseSensitive(e, "content");
        if (!cJSON_IsNumber(id) || id->valuedouble < 0 || id->valuedouble >= TOK_MAX_ID || !cJSON_IsString(c))
            return cmf_err(CMF_E_FORMAT, "tokenizer.json: added_tokens[%zu] needs an 'id' in [0, %d) and a string "
                           "'content'", k, TOK_MAX_ID);
        k++;
        size_t len = strlen(c->valuestring);
        if (len == 0) continue;
        int32_t prev = tok_strmap_get(&t->added_map, c->valuestring, len);
        tok_added *a = prev >= 0 ? &t->added[prev] : &t->added[t->n_added];
        if (prev < 0) {
            a->len = len;
            if (!(a->content = malloc(len + 1))) return OOM();
            memcpy(a->content, c->valuestring, len + 1);
            a->id = tok_strmap_get(&t->model->vocab, a->content, len);
            if (a->id < 0) a->id = (max_added < 0) ? vocab_len : (max_added >= vocab_len ? max_added + 1 : vocab_len);
            if (a->id >= TOK_MAX_ID)
                return cmf_err(CMF_E_FORMAT, "tokenizer.json: added_tokens[%zu]: id out of range", k - 1);
            if (a->id > max_added) max_added = a->id;
        }
        a->special = jflag(e, "special", 0);
        a->normalized = jflag(e, "normalized", !a->special);
        a->lstrip = jflag(e, "lstrip", 0);
        a->rstrip = jflag(e, "rstrip", 0);
        a->single_word = jflag(e, "single_word", 0);
        if (prev < 0) {
            if (tok_strmap_set(&t->added_map, a->content, a->len, (int32_t)t->n_added)) return OOM();
            t->n_added++;
        }
    }
    return CMF_OK;
}

/* Loads the optional component `key` with loader `fn` (absent or null means none). */
#define LOAD_OPT(key, fn, dst)                                                                                   \
    do {                                                                                                         \
        const cJSON *c_ = cJSON_GetObjectItemCaseSensitive(root, key);                                          \
        if (st == CMF_OK && c_ && !cJSON_IsNull(c_)) st = fn(c_, dst);                                           \
    } while (0)

/* Parses a Hugging Face tokenizer.json. See cmf.h. */
cmf_status cmf_tokenizer_load(const char *json, size_t len, cmf_tokenizer **out) {
    if (out) *out = NULL;
    if (!json || !out) return cmf_err(CMF_E_ARG, "cmf_tokenizer_load: NULL argument");
    if (len >= 3 && !memcmp(json, "\xEF\xBB\xBF", 3)) json += 3, len -= 3; /* a UTF-8 BOM (some editors write one) */
    cJSON *root = cJSON_ParseWithLength(json, len);
    if (!root) {
        const char *ep = cJSON_GetErrorPtr();
        size_t off = (ep && ep >= json && ep <= json + len) ? (size_t)(ep - json) : 0;
        return cmf_err(CMF_E_FORMAT, "tokenizer.json: malformed JSON near byte %zu", off);
    }
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return cmf_err(CMF_E_FORMAT, "tokenizer.json: the top level must be an object");
    }
    cmf_tokenizer *t = calloc(1, sizeof *t);
    if (!t) {
        cJSON_Delete(root);
        return OOM();
    }
    cmf_status st = tok_model_load(cJSON_GetObjectItemCaseSensitive(root, "model"), &t->model);
    LOAD_OPT("normalizer", tok_normalizer_load, &t->normalizer);
    LOAD_OPT("pre_tokenizer", tok_pretok_load, &t->pretok);
    LOAD_OPT("decoder", tok_decoder_load, &t->decoder);
    LOAD_OPT("post_processor", post_load, &t->post);
    if (st == CMF_OK) st = load_trunc_pad(t, root);
    if (st == CMF_OK) st = load_added(t, cJSON_GetObjectItemCaseSensitive(root, "added_tokens"));
    cJSON_Delete(root);
    if (st == CMF_OK) {
        t->n_ids = t->model->n_ids;
        for (size_t i = 0; i < t->n_added; i++)
            if (t->added[i].id >= t->n_ids) t->n_ids = t->added[i].id + 1;
        t->added_by_id = malloc(((size_t)t->n_ids + 1) * sizeof *t->added_by_id);
        if (!t->added_by_id) st = OOM();
        for (int32_t i = 0; st == CMF_OK && i < t->n_ids; i++) t->added_by_id[i] = -1;
        for (size_t i = 0; st == CMF_OK && i < t->n_added; i++) t->added_by_id[t->added[i].id] = (int32_t)i;
    }
    if (st == CMF_OK) st = matcher_build(t, 0, &t->match_raw);
    if (st == CMF_OK) st = matcher_build(t, 1, &t->match_norm);
    if (st == CMF_OK && t->post) st = post_check(t->post, t->n_ids);
    if (st != CMF_OK) {
        cmf_tokenizer_free(t);
        return st;
    }
    *out = t;
    return CMF_OK;
}

/* Reads a tokenizer.json file and parses it (see tokenizer.h). A regular file is parsed straight from a read-only
 * mapping (no copy of a file that can be 10+ MB); anything else (a pipe, a device) or a file that cannot be mapped
 * is read into memory. */
cmf_status cmf_tokenizer_load_file(const char *path, cmf_tokenizer **out) {
    if (out) *out = NULL;
    if (!path || !out) return cmf_err(CMF_E_ARG, "cmf_tokenizer_load_file: NULL argument");
    cmf_status st;
    cmf_mmap map;
    if (cmf_is_file(path) && cmf_mmap_open(path, &map) == CMF_OK) {
        st = cmf_tokenizer_load(map.data ? (const char *)map.data : "", map.size, out);
        cmf_mmap_close(&map);
    } else {
        char *json;
        size_t len;
        if ((st = cmf_read_file(path, &json, &len)) != CMF_OK) return st;
        st = cmf_tokenizer_load(json, len, out);
        free(json);
    }
    if (st != CMF_OK) cmf_err_prefix(st, "%s: ", path);
    return st;
}

/* max id + 1 over the model vocabulary and the added tokens (HF get_vocab_size(true) for dense vocabularies). */
int cmf_tokenizer_vocab_size(const cmf_tokenizer *t) { return t ? t->n_ids : 0; }

/* Id of an added token or vocabulary entry, or -1 (HF token_to_id: added vocabulary first). */
int32_t cmf_tokenizer_token_id(const cmf_tokenizer *t, const char *token) {
    if (!t || !token) return -1;
    size_t n = strlen(token);
    int32_t i = tok_strmap_get(&t->added_map, token, n);
    if (i >= 0) return t->added[i].id;
    return tok_strmap_get(&t->model->vocab, token, n);
}
