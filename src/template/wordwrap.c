/* wordwrap.c — jinja2 3.1's wordwrap filter (filters.py do_wordwrap): each line of s.splitlines() is wrapped as
 * Python 3.11's textwrap.wrap does with expand_tabs=False, replace_whitespace=False, drop_whitespace=True and no
 * indents, and the wrapped lines and the paragraphs are joined with wrapstring (default "\n").
 *
 * textwrap splits a line into chunks (runs of whitespace and words; with break_on_hyphens, words also end after a
 * hyphen between letters and before/after a run of dashes) and fills lines greedily with them; a chunk longer than
 * the width is cut (after its last hyphen within the room left when break_on_hyphens). The chunk rules are a regular
 * expression over Python's \w and \d: PCRE2 with UTF and UCP gives the same classes (\w: letters, digits and '_'). */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <stdlib.h>
#include <string.h>

#include <pcre2.h>
#include <utf8proc.h>

#include "template/eval.h"
#include "util/error.h"

#define NOMEM() cmf_err(CMF_E_NOMEM, "template render")
#define TRY(x) do { cmf_status st_ = (x); if (st_) return st_; } while (0)

/* textwrap's whitespace (ASCII only) and the pieces of its word-separator rule. */
#define WS "[\\t\\n\\x0b\\x0c\\r ]"
#define NWS "[^\\t\\n\\x0b\\x0c\\r ]"
#define LETTER "[^\\d\\W]"
#define WORD_PUNCT "[\\w!\"'&.,?]"
static const char CHUNK_HYPHENS[] =
    WS "+"                                                   /* a run of whitespace */
    "|(?<=" WORD_PUNCT ")-{2,}(?=\\w)"                      /* a run of dashes between words */
    "|" NWS "+?(?:"                                          /* a word, shortest first, ending: */
    "-(?:(?<=" LETTER "{2}-)|(?<=" LETTER "-" LETTER "-))(?=" LETTER "-?" LETTER ")" /* after a hyphen in a word */
    "|(?=" WS "|\\z)"                                        /* before whitespace or the end */
    "|(?<=" WORD_PUNCT ")(?=-{2,}\\w))";                     /* before a run of dashes */
static const char CHUNK_SIMPLE[] = WS "+";

typedef struct chunk {
    size_t off, n; /* bytes of the line */
    size_t cps;    /* code points */
} chunk;

typedef struct chunks {
    chunk *v;
    size_t n, cap;
} chunks;

static int push_chunk(chunks *cs, const char *line, size_t off, size_t n) {
    if (n == 0) return 0;
    if (cs->n == cs->cap) {
        size_t nc = cs->cap ? cs->cap * 2 : 16;
        chunk *p = realloc(cs->v, nc * sizeof(*p));
        if (!p) return -1;
        cs->v = p;
        cs->cap = nc;
    }
    cs->v[cs->n++] = (chunk){off, n, utf8_count(line + off, n)};
    return 0;
}

/* re.split of the line by the chunk rule (the separators are kept: the rule's whole match is its group). */
static cmf_status split_chunks(const jnode *at, const pcre2_code *re, pcre2_match_data *md, const char *line,
                               size_t n, chunks *cs) {
    size_t pos = 0;
    while (pos < n) {
        int rc = pcre2_match(re, (PCRE2_SPTR)line, n, pos, PCRE2_NO_UTF_CHECK, md, NULL); /* (checked once) */
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc == PCRE2_ERROR_MATCHLIMIT || rc == PCRE2_ERROR_HEAPLIMIT || rc == PCRE2_ERROR_DEPTHLIMIT)
            return jinja_rt_err(at, "wordwrap: a word of %zu bytes at byte %zu is longer than this engine's word "
                                "splitter handles (about a million characters)", n - pos, pos);
        if (rc < 0) return jinja_rt_err(at, "wordwrap: splitting a line failed (PCRE2 error %d)", rc);
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
        if (ov[1] <= ov[0]) return jinja_rt_err(at, "wordwrap: empty chunk"); /* (the rule never matches empty) */
        if (push_chunk(cs, line, pos, ov[0] - pos) || push_chunk(cs, line, ov[0], ov[1] - ov[0])) return NOMEM();
        pos = ov[1];
    }
    if (push_chunk(cs, line, pos, n - pos)) return NOMEM();
    return CMF_OK;
}

/* Python's str.strip() == '' for a chunk: all of it Unicode whitespace. */
static int all_space(const char *s, size_t n) {
    for (size_t i = 0; i < n;) {
        utf8proc_int32_t cp;
        utf8proc_ssize_t k = utf8proc_iterate((const utf8proc_uint8_t *)s + i, (utf8proc_ssize_t)(n - i), &cp);
        if (k <= 0) return 0;
        int sp = (cp >= 0x9 && cp <= 0xD) || (cp >= 0x1C && cp <= 0x20) || cp == 0x85 || cp == 0xA0 ||
                 cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F ||
                 cp == 0x205F || cp == 0x3000;
        if (!sp) return 0;
        i += (size_t)k;
    }
    return 1;
}

typedef struct wrapopt {
    int64_t width;
    int break_long, break_hyphens;
    const char *sep;
    size_t sepn;
} wrapopt;

/* textwrap's _wrap_chunks over cs (its chunks are consumed from the front), the lines joined with o->sep into b. */
static void fill_lines(const char *line, chunks *cs, const wrapopt *o, jbuf *b) {
    size_t next = 0, nlines = 0;
    chunk *cur = malloc((cs->n + 1) * sizeof(*cur)), *v = cs->v; /* the current line's chunks */
    if (!cur) { b->oom = 1; return; }
    while (next < cs->n && !b->over) {
        size_t nc = 0;
        int64_t len = 0, width = o->width;
        if (nlines && all_space(line + v[next].off, v[next].n)) next++; /* a line does not start with whitespace */
        while (next < cs->n && len + (int64_t)v[next].cps <= width) { len += (int64_t)v[next].cps; cur[nc++] = v[next++]; }
        if (next < cs->n && (int64_t)v[next].cps > width) { /* a chunk longer than any line */
            chunk *c = &v[next];
            if (o->break_long) {
                int64_t room = width - len; /* (width >= 1, len <= width) */
                size_t end = (size_t)room;
                if (o->break_hyphens) { /* after the last hyphen within the room, when something else precedes it */
                    size_t lim = utf8_offset(line + c->off, c->n, (size_t)room), hy = SIZE_MAX;
                    for (size_t i = lim; i-- > 0;)
                        if (line[c->off + i] == '-') { hy = i; break; }
                    int other = 0;
                    for (size_t i = 0; hy != SIZE_MAX && i < hy && !other; i++) other = line[c->off + i] != '-';
                    if (hy != SIZE_MAX && hy > 0 && other) end = utf8_count(line + c->off, hy) + 1;
                }
                size_t eb = utf8_offset(line + c->off, c->n, end);
                cur[nc++] = (chunk){c->off, eb, end};
                c->off += eb;
                c->n -= eb;
                c->cps -= end;
            } else if (nc == 0) {
                cur[nc++] = v[next++];
            }
        }
        if (nc && all_space(line + cur[nc - 1].off, cur[nc - 1].n)) nc--; /* nor end with it */
        if (nc == 0) continue;
        if (nlines++) jbuf_put(b, o->sep, o->sepn);
        for (size_t i = 0; i < nc; i++) jbuf_put(b, line + cur[i].off, cur[i].n);
    }
    free(cur);
}

cmf_status jinja_wordwrap(jctx *c, const jnode *at, jv in, const jargs *a, jv *out) {
    if (in.k != JV_STR) return jinja_rt_err(at, "filter 'wordwrap' needs a string, got '%s'", jv_kind_name(in));
    /* PCRE2 needs well-formed UTF-8 (checked here once, not per match: that was quadratic); only a lone surrogate
     * from a string escape is not, and Python could not encode the prompt holding one either */
    size_t bad = utf8_invalid_at(in.u.s->s, in.u.s->len);
    if (bad < in.u.s->len)
        return jinja_rt_err(at, "wordwrap: the text is not valid UTF-8 at byte offset %zu (a lone surrogate)", bad);
    /* a regular-expression split and a fill per byte: ~32 times the work a plain scan is charged (a loop of
     * wordwrap over 1 MB strings ran for 36 s within the common budget) */
    TRY(jinja_charge_work(c, at, 32 * jinja_work_of(in)));
    const jv *w = jargs_get(a, 0, "width"), *bl = jargs_get(a, 1, "break_long_words");
    const jv *ws = jargs_get(a, 2, "wrapstring"), *bh = jargs_get(a, 3, "break_on_hyphens");
    wrapopt o = {.width = 79, .break_long = !bl || jv_truthy(*bl), .break_hyphens = !bh || jv_truthy(*bh),
                 .sep = "\n", .sepn = 1};
    if (w && w->k != JV_INT && w->k != JV_BOOL) return jinja_rt_err(at, "wordwrap: width must be an integer");
    if (w) o.width = w->k == JV_INT ? w->u.i : w->u.b;
    if (ws && ws->k != JV_NONE) {
        if (ws->k != JV_STR) return jinja_rt_err(at, "wordwrap: wrapstring must be a string");
        o.sep = ws->u.s->s;
        o.sepn = ws->u.s->len;
    }
    int err;
    PCRE2_SIZE eo;
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)(o.break_hyphens ? CHUNK_HYPHENS : CHUNK_SIMPLE), PCRE2_ZERO_TERMINATED,
                                   PCRE2_UTF | PCRE2_UCP | PCRE2_NO_UTF_CHECK, &err, &eo, NULL);
    pcre2_match_data *md = re ? pcre2_match_data_create_from_pattern(re, NULL) : NULL;
    if (!re || !md) { pcre2_match_data_free(md); pcre2_code_free(re); return NOMEM(); }
    jbuf b = {.limit = c->lim.max_output};
    cmf_status st = CMF_OK;
    const char *s = in.u.s->s;
    size_t n = in.u.s->len, i = 0, para = 0;
    while (i < n && !st && !b.over) { /* s.splitlines(): the same line ends as str.splitlines */
        size_t e = i, next = n;
        while (e < n) {
            utf8proc_int32_t cp;
            utf8proc_ssize_t k = utf8proc_iterate((const utf8proc_uint8_t *)s + e, (utf8proc_ssize_t)(n - e), &cp);
            if (k <= 0) { e++; continue; }
            if (cp == '\n' || cp == '\r' || cp == 0x0B || cp == 0x0C || (cp >= 0x1C && cp <= 0x1E) || cp == 0x85 ||
                cp == 0x2028 || cp == 0x2029) {
                next = e + (size_t)k + (cp == '\r' && e + 1 < n && s[e + 1] == '\n');
                break;
            }
            e += (size_t)k;
        }
        if (para++) jbuf_put(&b, o.sep, o.sepn);
        if (e > i) {
            if (o.width <= 0) { st = jinja_rt_err(at, "invalid width %lld (must be > 0)", (long long)o.width); break; }
            chunks cs = {0};
            st = split_chunks(at, re, md, s + i, e - i, &cs);
            if (!st) fill_lines(s + i, &cs, &o, &b);
            free(cs.v);
        }
        i = next;
    }
    pcre2_match_data_free(md);
    pcre2_code_free(re);
    if (!st) st = jinja_buf_status(c, at, &b, "string size");
    if (st) { jbuf_free(&b); return st; }
    return jb_ret_buf(out, &b);
}
