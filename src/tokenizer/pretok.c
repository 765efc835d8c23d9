/* pretok.c — tokenizer.json pre-tokenizers (HF tokenizers src/pre_tokenizers): Sequence, Split, ByteLevel,
 * Metaspace, Whitespace, WhitespaceSplit, Digits, Punctuation, BertPreTokenizer, CharDelimiterSplit.
 *
 * Every splitter turns a piece into ranges (start, end, is_match) covering it, then applies HF's
 * SplitDelimiterBehavior (normalizer.rs: NormalizedString::split) to decide which ranges become pieces. */
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "tokenizer/tokenizer.h"
#include "util/error.h"

typedef enum { PT_SEQUENCE, PT_SPLIT, PT_BYTELEVEL, PT_METASPACE, PT_WHITESPACE, PT_WSSPLIT, PT_DIGITS,
               PT_PUNCT, PT_BERT } pt_type;
typedef enum { B_REMOVED, B_ISOLATED, B_MERGED_PREV, B_MERGED_NEXT, B_CONTIGUOUS } split_behavior;
typedef enum { PRED_NONE, PRED_WHITESPACE, PRED_DIGIT, PRED_PUNCT } char_pred;

struct tok_pretok {
    pt_type type;
    tok_pretok **seq;
    size_t n_seq;
    pcre2_code *re;          /* Split, ByteLevel use_regex, Whitespace */
    split_behavior behavior; /* Split, Punctuation */
    int invert;              /* Split */
    int add_prefix_space;    /* ByteLevel */
    int use_regex;           /* ByteLevel */
    char replacement[8];     /* Metaspace */
    int prepend;             /* Metaspace: 0 never, 1 always, 2 first */
    int split;               /* Metaspace */
    int individual_digits;   /* Digits */
};

/* The GPT-2 pre-tokenization regex used by ByteLevel with use_regex (HF byte_level.rs). */
static const char GPT2_RE[] = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

void tok_pretok_free(tok_pretok *p) {
    if (!p) return;
    for (size_t i = 0; i < p->n_seq; i++) tok_pretok_free(p->seq[i]);
    free(p->seq);
    if (p->re) pcre2_code_free(p->re);
    free(p);
}

static int jbool(const cJSON *o, const char *k, int d) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsBool(v) ? cJSON_IsTrue(v) : d;
}

static cmf_status parse_behavior(const cJSON *j, const char *what, split_behavior *b) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, "behavior");
    if (!v) {
        *b = B_ISOLATED;
        return CMF_OK;
    }
    const char *s = cJSON_IsString(v) ? v->valuestring : "";
    if (!strcmp(s, "Removed")) *b = B_REMOVED;
    else if (!strcmp(s, "Isolated")) *b = B_ISOLATED;
    else if (!strcmp(s, "MergedWithPrevious")) *b = B_MERGED_PREV;
    else if (!strcmp(s, "MergedWithNext")) *b = B_MERGED_NEXT;
    else if (!strcmp(s, "Contiguous")) *b = B_CONTIGUOUS;
    else return cmf_err(CMF_E_UNSUPPORTED, "tokenizer.json: %s: behavior '%s' is not supported", what, s);
    return CMF_OK;
}

cmf_status tok_pretok_load(const cJSON *j, tok_pretok **out) {
    *out = NULL;
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(j, "type");
    if (!cJSON_IsString(t)) return cmf_err(CMF_E_FORMAT, "tokenizer.json: pre_tokenizer without a string 'type'");
    const char *ty = t->valuestring;
    tok_pretok *p = calloc(1, sizeof *p);
    if (!p) return cmf_err(CMF_E_NOMEM, "tokenizer.json: out of memory");
    cmf_status st = CMF_OK;
    if (!strcmp(ty, "Sequence")) {
        p->type = PT_SEQUENCE;
        const cJSON *arr = cJSON_GetObjectItemCaseSensitive(j, "pretokenizers");
        if (!cJSON_IsArray(arr)) {
            st = cmf_err(CMF_E_FORMAT, "tokenizer.json: pre_tokenizer Sequence: 'pretokenizers' must be an array");
        } else {
            p->seq = calloc((size_t)cJSON_GetArraySize(arr) + 1, sizeof *p->seq);
            if (!p->seq) st = cmf_err(CMF_E_NOMEM, "tokenizer.json: out of memory");
            const cJSON *e;
            cJSON_ArrayForEach(e, arr) {
                if (st != CMF_OK) break;
                st = tok_pretok_load(e, &p->seq[p->n_seq]);
                if (st == CMF_OK) p->n_seq++;
            }
        }
    } else if (!strcmp(ty, "Split")) {
        p->type = PT_SPLIT;
        st = tok_pattern_from_json(cJSON_GetObjectItemCaseSensitive(j, "pattern"), "pre_tokenizer Split", &p->re);
        if (st == CMF_OK) st = parse_behavior(j, "pre_tokenizer Split", &p->behavior);
        p->invert = jbool(j, "invert", 0);
    } else if (!strcmp(ty, "ByteLevel")) {
        p->type = PT_BYTELEVEL;
        p->add_prefix_space = jbool(j, "add_prefix_space", 1);
        p->use_regex = jbool(j, "use_regex", 1);
        if (p->use_regex) st = tok_regex_compile(GPT2_RE, strlen(GPT2_RE), "pre_tokenizer ByteLevel", &p->re);
    } else if (!strcmp(ty, "Metaspace")) {
        p->type = PT_METASPACE;
        const cJSON *r = cJSON_GetObjectItemCaseSensitive(j, "replacement");
        const char *rep = cJSON_IsString(r) ? r->valuestring : "\xe2\x96\x81";
        uint32_t cp;
        if (strlen(rep) >= sizeof p->replacement || tok_utf8_decode(rep, strlen(rep), &cp) != (int)strlen(rep))
            st = cmf_err(CMF_E_FORMAT, "tokenizer.json: pre_tokenizer Metaspace: 'replacement' must be one char");
        else strcpy(p->replacement, rep);
        const cJSON *ps = cJSON_GetObjectItemCaseSensitive(j, "prepend_scheme");
        if (cJSON_IsString(ps)) {
            if (!strcmp(ps->valuestring, "always")) p->prepend = 1;
            else if (!strcmp(ps->valuestring, "first")) p->prepend = 2;
            else if (!strcmp(ps->valuestring, "never")) p->prepend = 0;
            else st = cmf_err(CMF_E_UNSUPPORTED, "tokenizer.json: Metaspace prepend_scheme '%s'", ps->valuestring);
        } else {
            p->prepend = jbool(j, "add_prefix_space", 1);
        }
        p->split = jbool(j, "split", 1);
    } else if (!strcmp(ty, "Whitespace")) {
        p->type = PT_WHITESPACE;
        st = tok_regex_compile("\\w+|[^\\w\\s]+", 13, "pre_tokenizer Whitespace", &p->re);
    } else if (!strcmp(ty, "WhitespaceSplit")) {
        p->type = PT_WSSPLIT;
    } else if (!strcmp(ty, "Digits")) {
        p->type = PT_DIGITS;
        p->individual_digits = jbool(j, "individual_digits", 0);
    } else if (!strcmp(ty, "Punctuation")) {
        p->type = PT_PUNCT;
        st = parse_behavior(j, "pre_tokenizer Punctuation", &p->behavior);
    } else if (!strcmp(ty, "BertPreTokenizer")) {
        p->type = PT_BERT;
    } else if (!strcmp(ty, "CharDelimiterSplit")) {
        p->type = PT_SPLIT; /* HF: split on one character, delimiter removed */
        const cJSON *d = cJSON_GetObjectItemCaseSensitive(j, "delimiter");
        uint32_t cp;
        if (!cJSON_IsString(d) || !d->valuestring[0] ||
            tok_utf8_decode(d->valuestring, strlen(d->valuestring), &cp) != (int)strlen(d->valuestring))
            st = cmf_err(CMF_E_FORMAT, "tokenizer.json: pre_tokenizer CharDelimiterSplit: 'delimiter' must be one char");
        else
            st = tok_regex_literal(d->valuestring, strlen(d->valuestring), "pre_tokenizer CharDelimiterSplit", &p->re);
        p->behavior = B_REMOVED;
    } else {
        st = cmf_err(CMF_E_UNSUPPORTED, "tokenizer.json: pre_tokenizer type '%s' is not supported", ty);
    }
    if (st != CMF_OK) {
        tok_pretok_free(p);
        return st;
    }
    *out = p;
    return CMF_OK;
}

/* ---- ranges ------------------------------------------------------------------------------------------------ */

typedef struct range {
    size_t s, e;
    int m;
} range;

typedef struct ranges {
    range *v;
    size_t n, cap;
} ranges;

static int ranges_push(ranges *r, size_t s, size_t e, int m) {
    if (r->n == r->cap) {
        size_t cap = r->cap ? r->cap * 2 : 32;
        range *v = realloc(r->v, cap * sizeof *v);
        if (!v) return -1;
        r->v = v;
        r->cap = cap;
    }
    r->v[r->n++] = (range){s, e, m};
    return 0;
}

static int is_punct(uint32_t cp) {
    if (cp < 0x80) return (cp >= 0x21 && cp <= 0x2F) || (cp >= 0x3A && cp <= 0x40) || (cp >= 0x5B && cp <= 0x60) ||
                          (cp >= 0x7B && cp <= 0x7E);
    utf8proc_category_t c = utf8proc_category((utf8proc_int32_t)cp);
    return c >= UTF8PROC_CATEGORY_PC && c <= UTF8PROC_CATEGORY_PO;
}

static int pred_match(char_pred p, uint32_t cp) {
    switch (p) {
    case PRED_WHITESPACE: return tok_is_whitespace(cp);
    case PRED_DIGIT: { /* Rust char::is_numeric: Nd, Nl, No */
        utf8proc_category_t c = utf8proc_category((utf8proc_int32_t)cp);
        return c == UTF8PROC_CATEGORY_ND || c == UTF8PROC_CATEGORY_NL || c == UTF8PROC_CATEGORY_NO;
    }
    case PRED_PUNCT: return is_punct(cp);
    case PRED_NONE: break;
    }
    return 0;
}

/* Ranges covering s[0..n): matches of `re` (or single characters satisfying `pred`) and the gaps between. */
static cmf_status find_matches(const pcre2_code *re, pcre2_match_data *md, char_pred pred, const char *s, size_t n,
                               ranges *out) {
    out->n = 0;
    if (re) {
        size_t pos = 0, ms, me;
        int r;
        while ((r = tok_regex_next(re, md, s, n, pos, &ms, &me)) == 1) {
            if (ms > pos && ranges_push(out, pos, ms, 0)) return cmf_err(CMF_E_NOMEM, "tokenizer: out of memory");
            if (ranges_push(out, ms, me, 1)) return cmf_err(CMF_E_NOMEM, "tokenizer: out of memory");
            pos = me;
        }
        if (r < 0) return CMF_E_FORMAT;
        if (pos < n && ranges_push(out, pos, n, 0)) return cmf_err(CMF_E_NOMEM, "tokenizer: out of memory");
        return CMF_OK;
    }
    size_t i = 0, gap = 0;
    while (i < n) {
        uint32_t cp;
        int l = tok_utf8_decode(s + i, n - i, &cp);
        if (!l) return cmf_err(CMF_E_ARG, "tokenizer: invalid UTF-8 at byte %zu", i);
        if (pred_match(pred, cp)) {
            if (i > gap && ranges_push(out, gap, i, 0)) return cmf_err(CMF_E_NOMEM, "tokenizer: out of memory");
            if (ranges_push(out, i, i + (size_t)l, 1)) return cmf_err(CMF_E_NOMEM, "tokenizer: out of memory");
            gap = i + (size_t)l;
        }
        i += (size_t)l;
    }
    if (n > gap && ranges_push(out, gap, n, 0)) return cmf_err(CMF_E_NOMEM, "tokenizer: out of memory");
    return CMF_OK;
}

/* Applies a SplitDelimiterBehavior to the ranges in place (HF NormalizedString::split). */
static void apply_behavior(ranges *r, split_behavior b, int invert) {
    if (invert)
        for (size_t i = 0; i < r->n; i++) r->v[i].m = !r->v[i].m;
    size_t k = 0;
    int prev = 0;
    switch (b) {
    case B_ISOLATED: break;
    case B_REMOVED:
        for (size_t i = 0; i < r->n; i++)
            if (!r->v[i].m) r->v[k++] = r->v[i];
        r->n = k;
        break;
    case B_MERGED_PREV:
        for (size_t i = 0; i < r->n; i++) {
            if (r->v[i].m && !prev && k > 0) r->v[k - 1].e = r->v[i].e;
            else r->v[k++] = r->v[i];
            prev = r->v[i].m;
        }
        r->n = k;
        break;
    case B_MERGED_NEXT: {
        /* walk backwards: a match is prepended to the range after it */
        size_t w = r->n;
        for (size_t i = r->n; i-- > 0;) {
            range cur = r->v[i];
            if (cur.m && !prev && w < r->n) r->v[w].s = cur.s;
            else r->v[--w] = cur;
            prev = cur.m;
        }
        memmove(r->v, r->v + w, (r->n - w) * sizeof *r->v);
        r->n -= w;
        break;
    }
    case B_CONTIGUOUS:
        for (size_t i = 0; i < r->n; i++) {
            if (k > 0 && r->v[i].m == prev) r->v[k - 1].e = r->v[i].e;
            else r->v[k++] = r->v[i];
            prev = r->v[i].m;
        }
        r->n = k;
        break;
    }
}

/* Splits every piece of *io with re/pred and behavior. */
static cmf_status split_pieces(tok_pieces *io, const pcre2_code *re, char_pred pred, split_behavior b, int invert) {
    tok_pieces out = {0};
    ranges r = {0};
    pcre2_match_data *md = NULL;
    cmf_status st = CMF_OK;
    if (re && !(md = pcre2_match_data_create_from_pattern(re, NULL))) st = cmf_err(CMF_E_NOMEM, "out of memory");
    for (size_t i = 0; i < io->n && st == CMF_OK; i++) {
        const char *s = io->buf.p + io->v[i].off;
        st = find_matches(re, md, pred, s, io->v[i].len, &r);
        if (st != CMF_OK) break;
        apply_behavior(&r, b, invert);
        for (size_t k = 0; k < r.n; k++) {
            if (r.v[k].e == r.v[k].s) continue;
            if (tok_pieces_add(&out, s + r.v[k].s, r.v[k].e - r.v[k].s, io->v[i].first && r.v[k].s == 0)) {
                st = cmf_err(CMF_E_NOMEM, "tokenizer: out of memory");
                break;
            }
        }
    }
    free(r.v);
    if (md) pcre2_match_data_free(md);
    if (st != CMF_OK) {
        tok_pieces_free(&out);
        return st;
    }
    tok_pieces_free(io);
    *io = out;
    return CMF_OK;
}

/* ByteLevel: optional prefix space, optional GPT-2 split, then every byte becomes its bytes_to_unicode char. */
static cmf_status byte_level(const tok_pretok *p, tok_pieces *io) {
    if (p->add_prefix_space) {
        tok_pieces out = {0};
        for (size_t i = 0; i < io->n; i++) {
            const char *s = io->buf.p + io->v[i].off;
            size_t off = out.buf.n;
            int fail = (io->v[i].len == 0 || s[0] != ' ') ? tok_buf_put(&out.buf, " ", 1) : 0;
            fail = fail || tok_buf_put(&out.buf, s, io->v[i].len) || tok_pieces_add(&out, "", 0, io->v[i].first);
            if (fail) {
                tok_pieces_free(&out);
                return cmf_err(CMF_E_NOMEM, "tokenizer: out of memory");
            }
            out.v[out.n - 1].off = off;
            out.v[out.n - 1].len = out.buf.n - off;
        }
        tok_pieces_free(io);
        *io = out;
    }
    if (p->use_regex) {
        cmf_status st = split_pieces(io, p->re, PRED_NONE, B_ISOLATED, 0);
        if (st != CMF_OK) return st;
    }
    tok_pieces out = {0};
    if (tok_buf_reserve(&out.buf, io->buf.n * 2)) return cmf_err(CMF_E_NOMEM, "tokenizer: out of memory");
    for (size_t i = 0; i < io->n; i++) {
        const unsigned char *s = (const unsigned char *)io->buf.p + io->v[i].off;
        size_t off = out.buf.n;
        int fail = 0;
        /* each byte becomes at most 2 bytes: reserve once, then write directly */
        fail = tok_buf_reserve(&out.buf, 2 * io->v[i].len);
        for (size_t k = 0; k < io->v[i].len && !fail; k++) {
            const char *u = tok_byte_to_utf8[s[k]];
            out.buf.p[out.buf.n++] = u[0];
            if (u[1]) out.buf.p[out.buf.n++] = u[1];
        }
        if (fail || tok_pieces_add(&out, "", 0, io->v[i].first)) {
            tok_pieces_free(&out);
            return cmf_err(CMF_E_NOMEM, "tokenizer: out of memory");
        }
        out.v[out.n - 1].off = off;
        out.v[out.n - 1].len = out.buf.n - off;
    }
    tok_pieces_free(io);
    *io = out;
    return CMF_OK;
}

/* Metaspace: spaces become the replacement, a replacement is prepended per prepend_scheme, and (split) the piece is
 * cut before every replacement character (MergedWithNext). */
static cmf_status metaspace(const tok_pretok *p, tok_pieces *io) {
    tok_pieces out = {0};
    size_t rl = strlen(p->replacement);
    for (size_t i = 0; i < io->n; i++) {
        const char *s = io->buf.p + io->v[i].off;
        size_t n = io->v[i].len;
        tok_buf t = {0};
        int fail = 0;
        for (size_t k = 0; k < n && !fail; k++)
            fail = s[k] == ' ' ? tok_buf_put(&t, p->replacement, rl) : tok_buf_put(&t, s + k, 1);
        int starts = t.n >= rl && memcmp(t.p, p->replacement, rl) == 0;
        if (!fail && !starts && (p->prepend == 1 || (p->prepend == 2 && io->v[i].first))) {
            fail = tok_buf_reserve(&t, rl);
            if (!fail) {
                memmove(t.p + rl, t.p, t.n);
                memcpy(t.p, p->replacement, rl);
                t.n += rl;
            }
        }
        if (!fail) {
            if (!p->split) {
                fail = t.n && tok_pieces_add(&out, t.p, t.n, io->v[i].first);
            } else {
                size_t st = 0;
                for (size_t k = 1; k <= t.n && !fail; k++) {
                    if (k == t.n || (k + rl <= t.n && memcmp(t.p + k, p->replacement, rl) == 0)) {
                        fail = tok_pieces_add(&out, t.p + st, k - st, io->v[i].first && st == 0);
                        st = k;
                    }
                }
            }
        }
        tok_buf_free(&t);
        if (fail) {
            tok_pieces_free(&out);
            return cmf_err(CMF_E_NOMEM, "tokenizer: out of memory");
        }
    }
    tok_pieces_free(io);
    *io = out;
    return CMF_OK;
}

cmf_status tok_pretokenize(const tok_pretok *p, tok_pieces *io) {
    cmf_status st;
    switch (p->type) {
    case PT_SEQUENCE:
        for (size_t i = 0; i < p->n_seq; i++)
            if ((st = tok_pretokenize(p->seq[i], io)) != CMF_OK) return st;
        return CMF_OK;
    case PT_SPLIT: return split_pieces(io, p->re, PRED_NONE, p->behavior, p->invert);
    case PT_BYTELEVEL: return byte_level(p, io);
    case PT_METASPACE: return metaspace(p, io);
    case PT_WHITESPACE: return split_pieces(io, p->re, PRED_NONE, B_REMOVED, 1);
    case PT_WSSPLIT: return split_pieces(io, NULL, PRED_WHITESPACE, B_REMOVED, 0);
    case PT_DIGITS:
        return split_pieces(io, NULL, PRED_DIGIT, p->individual_digits ? B_ISOLATED : B_CONTIGUOUS, 0);
    case PT_PUNCT: return split_pieces(io, NULL, PRED_PUNCT, p->behavior, 0);
    case PT_BERT:
        if ((st = split_pieces(io, NULL, PRED_WHITESPACE, B_REMOVED, 0)) != CMF_OK) return st;
        return split_pieces(io, NULL, PRED_PUNCT, B_ISOLATED, 0);
    }
    return cmf_err(CMF_E_UNSUPPORTED, "tokenizer: unknown pre_tokenizer");
}
