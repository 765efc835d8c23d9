/* decode.c — tokenizer.json decoders (HF tokenizers src/decoders: ByteLevel, Replace, ByteFallback, Fuse,
 * Strip, Metaspace, WordPiece, BPEDecoder, Sequence), cmf_detokenize, and the streaming decoder (HF
 * tokenizers DecodeStream: decode a window of ids, emit only the text after the previous window's decode, and
 * hold back while the text ends in U+FFFD, i.e. inside an incomplete UTF-8 character). */
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tokenizer.h"
#include "util/error.h"

typedef enum { DEC_SEQUENCE, DEC_BYTELEVEL, DEC_REPLACE, DEC_BYTEFALLBACK, DEC_FUSE, DEC_STRIP, DEC_METASPACE,
               DEC_WORDPIECE, DEC_BPE } dec_type;

struct tok_decoder {
    dec_type type;
    tok_decoder **seq;
    size_t n_seq;
    pcre2_code *re;   /* Replace */
    char *content;    /* Replace content, Strip char, Metaspace replacement, WordPiece prefix, BPE suffix */
    size_t content_len;
    int start, stop;  /* Strip */
    int prepend;      /* Metaspace: drop the replacements of the first token */
    int cleanup;      /* WordPiece */
};

void tok_decoder_free(tok_decoder *d) {
    if (!d) return;
    for (size_t i = 0; i < d->n_seq; i++) tok_decoder_free(d->seq[i]);
    free(d->seq);
    if (d->re) pcre2_code_free(d->re);
    free(d->content);
    free(d);
}

static cmf_status set_content(tok_decoder *d, const cJSON *j, const char *key, const char *dflt, const char *what) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, key);
    const char *s = cJSON_IsString(v) ? v->valuestring : dflt;
    if (!s) return cmf_err(CMF_E_FORMAT, "tokenizer.json: decoder %s: '%s' must be a string", what, key);
    d->content_len = strlen(s);
    d->content = malloc(d->content_len + 1);
    if (!d->content) return cmf_err(CMF_E_NOMEM, "tokenizer.json: out of memory");
    memcpy(d->content, s, d->content_len + 1);
    return CMF_OK;
}

cmf_status tok_decoder_load(const cJSON *j, tok_decoder **out) {
    *out = NULL;
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(j, "type");
    if (!cJSON_IsString(t)) return cmf_err(CMF_E_FORMAT, "tokenizer.json: decoder without a string 'type'");
    const char *ty = t->valuestring;
    tok_decoder *d = calloc(1, sizeof *d);
    if (!d) return cmf_err(CMF_E_NOMEM, "tokenizer.json: out of memory");
    cmf_status st = CMF_OK;
    if (!strcmp(ty, "Sequence")) {
        d->type = DEC_SEQUENCE;
        const cJSON *arr = cJSON_GetObjectItemCaseSensitive(j, "decoders");
        if (!cJSON_IsArray(arr)) {
            st = cmf_err(CMF_E_FORMAT, "tokenizer.json: decoder Sequence: 'decoders' must be an array");
        } else {
            d->seq = calloc((size_t)cJSON_GetArraySize(arr) + 1, sizeof *d->seq);
            if (!d->seq) st = cmf_err(CMF_E_NOMEM, "tokenizer.json: out of memory");
            const cJSON *e;
            cJSON_ArrayForEach(e, arr) {
                if (st != CMF_OK) break;
                st = tok_decoder_load(e, &d->seq[d->n_seq]);
                if (st == CMF_OK) d->n_seq++;
            }
        }
    } else if (!strcmp(ty, "ByteLevel")) {
        d->type = DEC_BYTELEVEL;
    } else if (!strcmp(ty, "Replace")) {
        d->type = DEC_REPLACE;
        st = tok_pattern_from_json(cJSON_GetObjectItemCaseSensitive(j, "pattern"), "decoder Replace", &d->re);
        if (st == CMF_OK) st = set_content(d, j, "content", NULL, "Replace");
    } else if (!strcmp(ty, "ByteFallback")) {
        d->type = DEC_BYTEFALLBACK;
    } else if (!strcmp(ty, "Fuse")) {
        d->type = DEC_FUSE;
    } else if (!strcmp(ty, "Strip")) {
        d->type = DEC_STRIP;
        st = set_content(d, j, "content", " ", "Strip");
        const cJSON *a = cJSON_GetObjectItemCaseSensitive(j, "start"), *b = cJSON_GetObjectItemCaseSensitive(j, "stop");
        d->start = cJSON_IsNumber(a) ? a->valueint : 0;
        d->stop = cJSON_IsNumber(b) ? b->valueint : 0;
    } else if (!strcmp(ty, "Metaspace")) {
        d->type = DEC_METASPACE;
        st = set_content(d, j, "replacement", "\xe2\x96\x81", "Metaspace");
        const cJSON *ps = cJSON_GetObjectItemCaseSensitive(j, "prepend_scheme");
        const cJSON *ap = cJSON_GetObjectItemCaseSensitive(j, "add_prefix_space");
        if (cJSON_IsString(ps)) d->prepend = strcmp(ps->valuestring, "never") != 0;
        else d->prepend = cJSON_IsBool(ap) ? cJSON_IsTrue(ap) : 1;
    } else if (!strcmp(ty, "WordPiece")) {
        d->type = DEC_WORDPIECE;
        st = set_content(d, j, "prefix", "##", "WordPiece");
        const cJSON *c = cJSON_GetObjectItemCaseSensitive(j, "cleanup");
        d->cleanup = cJSON_IsBool(c) ? cJSON_IsTrue(c) : 1;
    } else if (!strcmp(ty, "BPEDecoder")) {
        d->type = DEC_BPE;
        st = set_content(d, j, "suffix", "</w>", "BPEDecoder");
    } else {
        st = cmf_err(CMF_E_UNSUPPORTED, "tokenizer.json: decoder type '%s' is not supported", ty);
    }
    if (st != CMF_OK) {
        tok_decoder_free(d);
        return st;
    }
    *out = d;
    return CMF_OK;
}

/* ---- decode_chain ------------------------------------------------------------------------------------------ */

#define OOM() cmf_err(CMF_E_NOMEM, "tokenizer: out of memory")

/* Replaces toks' contents with `out` (ownership moves). */
static void strs_swap(tok_strs *toks, tok_strs *out) {
    tok_strs_free(toks);
    *toks = *out;
    memset(out, 0, sizeof *out);
}

static int byte_token(const char *s, size_t n, unsigned char *b) {
    if (n != 6 || memcmp(s, "<0x", 3) != 0 || s[5] != '>') return 0;
    int v = 0;
    for (int i = 3; i < 5; i++) {
        char c = s[i];
        int d = (c >= '0' && c <= '9') ? c - '0' : (c >= 'A' && c <= 'F') ? c - 'A' + 10 : -1;
        if (d < 0) return 0;
        v = v * 16 + d;
    }
    *b = (unsigned char)v;
    return 1;
}

static const char *WP_CLEANUP[][2] = {{" .", "."}, {" ?", "?"}, {" !", "!"}, {" ,", ","}, {" ' ", "'"},
                                       {" n't", "n't"}, {" 'm", "'m"}, {" do not", " don't"}, {" 's", "'s"},
                                       {" 've", "'ve"}, {" 're", "'re"}};

static int replace_literal(tok_buf *b, const char *from, const char *to) {
    size_t fl = strlen(from), tl = strlen(to);
    tok_buf o = {0};
    size_t i = 0;
    while (i < b->n) {
        if (i + fl <= b->n && memcmp(b->p + i, from, fl) == 0) {
            if (tok_buf_put(&o, to, tl)) return -1;
            i += fl;
        } else {
            if (tok_buf_put(&o, b->p + i, 1)) return -1;
            i++;
        }
    }
    tok_buf_free(b);
    *b = o;
    return 0;
}

/* One decoder over toks (in place). raw: ByteLevel and ByteFallback keep their bytes as they are (tok_piece_bytes)
 * instead of HF's lossy UTF-8 (U+FFFD for an incomplete or invalid sequence). */
static cmf_status decode_one(const tok_decoder *d, tok_strs *toks, int raw_mode) {
    tok_strs out = {0};
    tok_buf b = {0};
    cmf_status st = CMF_OK;
    switch (d->type) {
    case DEC_SEQUENCE:
        for (size_t i = 0; i < d->n_seq && st == CMF_OK; i++) st = decode_one(d->seq[i], toks, raw_mode);
        return st;
    case DEC_BYTELEVEL: {
        tok_buf bytes = {0};
        for (size_t i = 0; i < toks->n && st == CMF_OK; i++) {
            /* a token all of whose characters are in the byte table becomes those bytes, otherwise its UTF-8 */
            size_t mark = bytes.n, k = 0;
            const char *s = toks->s[i];
            int all = 1;
            while (k < toks->len[i]) {
                uint32_t cp;
                int l = tok_utf8_decode(s + k, toks->len[i] - k, &cp);
                int byte = l ? tok_unicode_to_byte(cp) : -1;
                if (byte < 0) {
                    all = 0;
                    break;
                }
                unsigned char c = (unsigned char)byte;
                if (tok_buf_put(&bytes, &c, 1)) st = OOM();
                k += (size_t)l;
            }
            if (!all) {
                bytes.n = mark;
                if (tok_buf_put(&bytes, s, toks->len[i])) st = OOM();
            }
        }
        if (st == CMF_OK && raw_mode && tok_strs_push(&out, bytes.p ? bytes.p : "", bytes.n)) st = OOM();
        else if (st == CMF_OK && !raw_mode &&
                 (tok_utf8_lossy(&b, bytes.p ? bytes.p : "", bytes.n) || tok_strs_push(&out, b.p ? b.p : "", b.n)))
            st = OOM();
        tok_buf_free(&bytes);
        break;
    }
    case DEC_REPLACE: {
        pcre2_match_data *md = pcre2_match_data_create_from_pattern(d->re, NULL);
        if (!md) return OOM();
        for (size_t i = 0; i < toks->n && st == CMF_OK; i++) {
            b.n = 0;
            size_t pos = 0, ms, me;
            int r;
            while ((r = tok_regex_next(d->re, md, toks->s[i], toks->len[i], pos, &ms, &me)) == 1) {
                if (tok_buf_put(&b, toks->s[i] + pos, ms - pos) || tok_buf_put(&b, d->content, d->content_len)) {
                    r = -2;
                    break;
                }
                pos = me;
            }
            if (r == -1) st = CMF_E_FORMAT;
            else if (r == -2 || tok_buf_put(&b, toks->s[i] + pos, toks->len[i] - pos) ||
                     tok_strs_push(&out, b.p ? b.p : "", b.n))
                st = OOM();
        }
        pcre2_match_data_free(md);
        break;
    }
    case DEC_BYTEFALLBACK: {
        /* runs of <0xXX> tokens become their bytes when valid UTF-8, else one U+FFFD per byte token */
        tok_buf run = {0};
        size_t nrun = 0;
        for (size_t i = 0; i <= toks->n && st == CMF_OK; i++) {
            unsigned char c;
            if (i < toks->n && byte_token(toks->s[i], toks->len[i], &c)) {
                if (tok_buf_put(&run, &c, 1)) st = OOM();
                nrun++;
                continue;
            }
            if (nrun) {
                if (raw_mode || tok_utf8_check(run.p, run.n) == run.n) {
                    if (tok_strs_push(&out, run.p, run.n)) st = OOM();
                } else {
                    for (size_t k = 0; k < nrun && st == CMF_OK; k++)
                        if (tok_strs_push(&out, "\xEF\xBF\xBD", 3)) st = OOM();
                }
                run.n = 0, nrun = 0;
            }
            if (i < toks->n && st == CMF_OK && tok_strs_push(&out, toks->s[i], toks->len[i])) st = OOM();
        }
        tok_buf_free(&run);
        break;
    }
    case DEC_FUSE:
        for (size_t i = 0; i < toks->n && st == CMF_OK; i++)
            if (tok_buf_put(&b, toks->s[i], toks->len[i])) st = OOM();
        if (st == CMF_OK && tok_strs_push(&out, b.p ? b.p : "", b.n)) st = OOM();
        break;
    case DEC_STRIP:
        for (size_t i = 0; i < toks->n && st == CMF_OK; i++) {
            const char *s = toks->s[i];
            size_t a = 0, e = toks->len[i], cl = d->content_len;
            for (int k = 0; k < d->start && a + cl <= e && memcmp(s + a, d->content, cl) == 0; k++) a += cl;
            for (int k = 0; k < d->stop && e >= a + cl && memcmp(s + e - cl, d->content, cl) == 0; k++) e -= cl;
            if (tok_strs_push(&out, s + a, e - a)) st = OOM();
        }
        break;
    case DEC_METASPACE:
        /* HF: every replacement becomes ' ', except in the first token where (unless prepend_scheme is never)
         * replacements are dropped altogether */
        for (size_t i = 0; i < toks->n && st == CMF_OK; i++) {
            b.n = 0;
            const char *s = toks->s[i];
            int drop = i == 0 && d->prepend;
            for (size_t k = 0; k < toks->len[i] && st == CMF_OK;) {
                if (d->content_len && k + d->content_len <= toks->len[i] && memcmp(s + k, d->content, d->content_len) == 0) {
                    if (!drop && tok_buf_put(&b, " ", 1)) st = OOM();
                    k += d->content_len;
                } else {
                    if (tok_buf_put(&b, s + k, 1)) st = OOM();
                    k++;
                }
            }
            if (st == CMF_OK && tok_strs_push(&out, b.p ? b.p : "", b.n)) st = OOM();
        }
        break;
    case DEC_WORDPIECE:
        for (size_t i = 0; i < toks->n && st == CMF_OK; i++) {
            b.n = 0;
            const char *s = toks->s[i];
            size_t n = toks->len[i];
            int fail = 0;
            if (i != 0) {
                if (n >= d->content_len && memcmp(s, d->content, d->content_len) == 0) s += d->content_len, n -= d->content_len;
                else fail = tok_buf_put(&b, " ", 1);
            }
            fail = fail || tok_buf_put(&b, s, n);
            for (size_t k = 0; d->cleanup && !fail && k < sizeof WP_CLEANUP / sizeof WP_CLEANUP[0]; k++)
                fail = replace_literal(&b, WP_CLEANUP[k][0], WP_CLEANUP[k][1]);
            if (fail || tok_strs_push(&out, b.p ? b.p : "", b.n)) st = OOM();
        }
        break;
    case DEC_BPE:
        for (size_t i = 0; i < toks->n && st == CMF_OK; i++) {
            b.n = 0;
            if (tok_buf_put(&b, toks->s[i], toks->len[i]) ||
                replace_literal(&b, d->content, i + 1 == toks->n ? "" : " ") || tok_strs_push(&out, b.p ? b.p : "", b.n))
                st = OOM();
        }
        break;
    }
    tok_buf_free(&b);
    if (st == CMF_OK) strs_swap(toks, &out);
    tok_strs_free(&out);
    return st;
}

cmf_status tok_decode_chain(const tok_decoder *d, tok_strs *toks) { return decode_one(d, toks, 0); }

/* ---- public API -------------------------------------------------------------------------------------------- */

/* Decodes ids into b (cleared first); raw as decode_one's. */
static cmf_status decode_ids_raw(const cmf_tokenizer *t, const int32_t *ids, size_t n, int skip_special, int raw,
                                 tok_buf *b) {
    tok_strs toks = {0};
    b->n = 0;
    for (size_t i = 0; i < n; i++) {
        int32_t id = ids[i];
        const char *s = NULL;
        size_t len = 0;
        if (id >= 0 && id < t->n_ids && t->added_by_id[id] >= 0) {
            const tok_added *a = &t->added[t->added_by_id[id]];
            if (skip_special && a->special) continue;
            s = a->content, len = a->len;
        } else if (!(s = tok_model_token(t->model, id, &len))) {
            continue; /* HF decode skips ids that have no token */
        }
        if (tok_strs_push(&toks, s, len)) {
            tok_strs_free(&toks);
            return OOM();
        }
    }
    cmf_status st = CMF_OK;
    if (t->decoder) st = decode_one(t->decoder, &toks, raw);
    for (size_t i = 0; i < toks.n && st == CMF_OK; i++)
        if ((!t->decoder && i && tok_buf_put(b, " ", 1)) || tok_buf_put(b, toks.s[i], toks.len[i])) st = OOM();
    tok_strs_free(&toks);
    if (st == CMF_OK && !tok_buf_cstr(b)) st = OOM();
    return st;
}

static cmf_status decode_ids(const cmf_tokenizer *t, const int32_t *ids, size_t n, int skip_special, tok_buf *b) {
    return decode_ids_raw(t, ids, n, skip_special, 0, b);
}

/* The bytes of `id` after `anchor`: see tokenizer.h. */
cmf_status tok_piece_bytes(const cmf_tokenizer *t, int32_t anchor, int32_t id, tok_buf *pre, tok_buf *out) {
    out->n = 0;
    if (id < 0 || id >= t->n_ids || (t->added_by_id[id] >= 0 && t->added[t->added_by_id[id]].special)) return CMF_OK;
    int32_t two[2] = {anchor, id};
    cmf_status st = CMF_OK;
    if (pre->n == 0 && (st = decode_ids_raw(t, two, 1, 0, 1, pre)) != CMF_OK) return st;
    if ((st = decode_ids_raw(t, two, 2, 0, 1, out)) != CMF_OK) return st;
    if (out->n < pre->n || memcmp(out->p, pre->p, pre->n) != 0) /* the anchor's text changed: take the id alone */
        return decode_ids_raw(t, &id, 1, 0, 1, out);
    memmove(out->p, out->p + pre->n, out->n - pre->n);
    out->n -= pre->n;
    return CMF_OK;
}

int32_t tok_anchor_id(const cmf_tokenizer *t) {
    int32_t *ids = NULL, id = -1;
    size_t n = 0;
    char *text = NULL;
    if (cmf_tokenize(t, "a", 1, 0, &ids, &n) == CMF_OK && n > 0 &&
        cmf_detokenize(t, &ids[n - 1], 1, 0, &text) == CMF_OK && text && *text)
        id = ids[n - 1];
    free(ids);
    free(text);
    return id;
}

/* Decodes ids to text as HF Tokenizer::decode; *len (when not NULL) gets the byte length. See cmf.h. */
cmf_status cmf_detokenize_n(const cmf_tokenizer *t, const int32_t *ids, size_t n, int skip_special, char **text,
                            size_t *len) {
    if (len) *len = 0;
    if (text) *text = NULL;
    if (!t)
        return cmf_err(CMF_E_ARG, "cmf_detokenize: the tokenizer is NULL (cmf_model_tokenizer returns NULL for a "
                                  "model without a usable tokenizer; cmf_model_tokenizer_error says why)");
    if (!text || (n && !ids)) return cmf_err(CMF_E_ARG, "cmf_detokenize: NULL argument (text or ids)");
    tok_buf b = {0};
    cmf_status st = decode_ids(t, ids, n, skip_special, &b);
    if (st != CMF_OK) {
        tok_buf_free(&b);
        return st;
    }
    *text = b.p;
    if (len) *len = b.n;
    return CMF_OK;
}

/* cmf_detokenize_n without the length. See cmf.h. */
cmf_status cmf_detokenize(const cmf_tokenizer *t, const int32_t *ids, size_t n, int skip_special, char **text) {
    return cmf_detokenize_n(t, ids, n, skip_special, text, NULL);
}

struct cmf_detok_stream {
    const cmf_tokenizer *t;
    int skip_special;
    tok_ids ids;         /* the current window */
    tok_buf prefix;      /* decode of ids[0..prefix_index) */
    size_t prefix_index;
    tok_buf cur;
};

/* Creates a streaming decoder (HF DecodeStream). See cmf.h. */
cmf_status cmf_detok_stream_new(const cmf_tokenizer *t, int skip_special, cmf_detok_stream **out) {
    if (out) *out = NULL;
    if (!t)
        return cmf_err(CMF_E_ARG, "cmf_detok_stream_new: the tokenizer is NULL (cmf_model_tokenizer returns NULL for "
                                  "a model without a usable tokenizer; cmf_model_tokenizer_error says why)");
    if (!out) return cmf_err(CMF_E_ARG, "cmf_detok_stream_new: NULL argument (out)");
    *out = calloc(1, sizeof **out);
    if (!*out) return OOM();
    (*out)->t = t;
    (*out)->skip_special = skip_special;
    return CMF_OK;
}

static int ends_with_fffd(const tok_buf *b) { return b->n >= 3 && memcmp(b->p + b->n - 3, "\xEF\xBF\xBD", 3) == 0; }

/* Feeds one id; *text gets the newly completed text (malloc'd, possibly ""). See cmf.h. */
cmf_status cmf_detok_stream_push_n(cmf_detok_stream *s, int32_t id, char **text, size_t *len) {
    if (len) *len = 0;
    if (text) *text = NULL;
    if (!s || !text) return cmf_err(CMF_E_ARG, "cmf_detok_stream_push: NULL argument");
    cmf_status st;
    if (s->prefix.n == 0 && s->ids.n) {
        /* the window's leading text may still be empty (e.g. a skipped special token): recompute it */
        if ((st = decode_ids(s->t, s->ids.v, s->ids.n, s->skip_special, &s->cur)) != CMF_OK) return st;
        if (!ends_with_fffd(&s->cur)) {
            tok_buf t = s->prefix;
            s->prefix = s->cur, s->cur = t;
            s->prefix_index = s->ids.n;
        }
    }
    if (tok_ids_push(&s->ids, id)) return OOM();
    if ((st = decode_ids(s->t, s->ids.v, s->ids.n, s->skip_special, &s->cur)) != CMF_OK) {
        s->ids.n--;
        return st;
    }
    const char *emit = "";
    size_t emit_len = 0;
    const int rewrites = s->cur.n < s->prefix.n || memcmp(s->cur.p, s->prefix.p ? s->prefix.p : "", s->prefix.n) != 0;
    if ((s->cur.n > s->prefix.n || rewrites) && !ends_with_fffd(&s->cur)) {
        size_t from = s->prefix.n;
        if (rewrites) {
            /* SentencePiece byte fallback turned a byte run that began in text already streamed into U+FFFD (a
             * complete character, then bytes cut off by a normal token): a stream cannot take text back, so the
             * held-back ids are decoded on their own, lossy, as flush does */
            if ((st = decode_ids(s->t, s->ids.v + s->prefix_index, s->ids.n - s->prefix_index, s->skip_special,
                                 &s->cur)) != CMF_OK)
                return st;
            from = 0;
        }
        emit = s->cur.p + from, emit_len = s->cur.n - from;
        *text = malloc(emit_len + 1);
        if (!*text) return OOM();
        memcpy(*text, emit, emit_len);
        (*text)[emit_len] = 0;
        /* slide the window: keep the ids after the old prefix; the new prefix is their decode */
        size_t new_prefix_index = s->ids.n - s->prefix_index;
        memmove(s->ids.v, s->ids.v + s->prefix_index, new_prefix_index * sizeof *s->ids.v);
        s->ids.n = new_prefix_index;
        if ((st = decode_ids(s->t, s->ids.v, s->ids.n, s->skip_special, &s->prefix)) != CMF_OK) {
            free(*text);
            *text = NULL;
            return st;
        }
        s->prefix_index = new_prefix_index;
        if (len) *len = emit_len;
        return CMF_OK;
    }
    *text = calloc(1, 1);
    return *text ? CMF_OK : OOM();
}

/* Seeds an empty stream with context ids whose text is not emitted. See cmf.h. */
cmf_status cmf_detok_stream_prime(cmf_detok_stream *s, const int32_t *ids, size_t n) {
    if (!s || (n && !ids)) return cmf_err(CMF_E_ARG, "cmf_detok_stream_prime: NULL argument");
    if (s->ids.n) return cmf_err(CMF_E_ARG, "cmf_detok_stream_prime: the stream already holds ids");
    enum { PRIME_IDS = 5 }; /* context kept: vLLM seeds its incremental detokenizer with 5 prompt tokens */
    if (n > PRIME_IDS) ids += n - PRIME_IDS, n = PRIME_IDS;
    for (size_t i = 0; i < n; i++)
        if (tok_ids_push(&s->ids, ids[i])) return OOM();
    cmf_status st = decode_ids(s->t, s->ids.v, s->ids.n, s->skip_special, &s->prefix);
    if (st != CMF_OK) {
        s->ids.n = 0;
        s->prefix.n = 0;
        return st;
    }
    s->prefix_index = s->ids.n;
    return CMF_OK;
}

/* cmf_detok_stream_push_n without the length. See cmf.h. */
cmf_status cmf_detok_stream_push(cmf_detok_stream *s, int32_t id, char **text) {
    return cmf_detok_stream_push_n(s, id, text, NULL);
}

/* Emits what the window holds beyond its prefix (lossy, U+FFFD for incomplete bytes) and empties it. See cmf.h. */
cmf_status cmf_detok_stream_flush_n(cmf_detok_stream *s, char **text, size_t *len) {
    if (len) *len = 0;
    if (text) *text = NULL;
    if (!s || !text) return cmf_err(CMF_E_ARG, "cmf_detok_stream_flush: NULL argument");
    cmf_status st = decode_ids(s->t, s->ids.v, s->ids.n, s->skip_special, &s->cur);
    if (st != CMF_OK) return st;
    size_t from = s->prefix.n;
    if (s->cur.n < s->prefix.n || memcmp(s->cur.p, s->prefix.p ? s->prefix.p : "", s->prefix.n) != 0) {
        /* SentencePiece byte fallback turns every byte of a broken run into U+FFFD, also bytes already streamed;
         * a stream cannot take text back, so the held-back ids are decoded on their own */
        if ((st = decode_ids(s->t, s->ids.v + s->prefix_index, s->ids.n - s->prefix_index, s->skip_special,
                             &s->cur)) != CMF_OK)
            return st;
        from = 0;
    }
    const size_t n = s->cur.n - from;
    *text = malloc(n + 1);
    if (!*text) return OOM();
    if (n) memcpy(*text, s->cur.p + from, n);
    (*text)[n] = 0;
    s->ids.n = 0;
    s->prefix.n = 0;
    s->prefix_index = 0;
    if (len) *len = n;
    return CMF_OK;
}

/* cmf_detok_stream_flush_n without the length. See cmf.h. */
cmf_status cmf_detok_stream_flush(cmf_detok_stream *s, char **text) { return cmf_detok_stream_flush_n(s, text, NULL); }

/* Frees a streaming decoder; NULL is allowed. */
void cmf_detok_stream_free(cmf_detok_stream *s) {
    if (!s) return;
    free(s->ids.v);
    tok_buf_free(&s->prefix);
    tok_buf_free(&s->cur);
    free(s);
}
