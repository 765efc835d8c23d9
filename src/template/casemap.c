/* casemap.c — Python's str case mapping for the engine: str.upper/lower/title/capitalize/swapcase and jinja2's
 * upper/lower/title/capitalize filters, with Unicode's full (multi-code-point) mappings ('ß'.upper() is 'SS',
 * 'ﬁ'.title() is 'Fi') and the final-sigma rule of lower() ('ΑΣ'.lower() is 'ας').
 *
 * Semantics: CPython 3.11 Objects/unicodeobject.c (do_upper, do_lower, do_title, do_capitalize, do_swapcase,
 * lower_ucs4, handle_capital_sigma) and jinja2 3.1 filters.py do_title. Single-code-point mappings and categories
 * come from utf8proc; the full mappings of SpecialCasing.txt, the cased code points outside Lu/Ll/Lt and the numeric
 * ones outside Nd/Nl/No from unicase_tables.h (generated from Python by scripts/template/make_unicase_tables.py,
 * which also checks the Case_Ignorable rule below against Python for every code point). */
#include <string.h>

#include <utf8proc.h>

#include "template/eval.h"
#include "template/unicase_tables.h"
#include "util/error.h"

#define NR(t) (sizeof(t) / sizeof((t)[0]))

static int in_range_table(const unicase_range *r, size_t n, int32_t cp) {
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (cp < r[mid].a) hi = mid;
        else if (cp > r[mid].b) lo = mid + 1;
        else return 1;
    }
    return 0;
}

static const unicase_full *find_full(const unicase_full *t, size_t n, int32_t cp) {
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (cp < t[mid].cp) hi = mid;
        else if (cp > t[mid].cp) lo = mid + 1;
        else return &t[mid];
    }
    return NULL;
}

int jinja_cp_is_cased(int32_t cp) {
    utf8proc_category_t cat = utf8proc_category(cp);
    return cat == UTF8PROC_CATEGORY_LU || cat == UTF8PROC_CATEGORY_LL || cat == UTF8PROC_CATEGORY_LT ||
           in_range_table(UNICASE_CASED_EXTRA, NR(UNICASE_CASED_EXTRA), cp);
}

int jinja_cp_is_numeric(int32_t cp) {
    utf8proc_category_t cat = utf8proc_category(cp);
    return (cat >= UTF8PROC_CATEGORY_ND && cat <= UTF8PROC_CATEGORY_NO) ||
           in_range_table(UNICASE_NUMERIC_EXTRA, NR(UNICASE_NUMERIC_EXTRA), cp);
}

/* Case_Ignorable (Unicode 3.13 D136): categories Mn, Me, Cf, Lm, Sk, or Word_Break MidLetter / MidNumLet /
 * Single_Quote (the list below, as in make_unicase_tables.py). */
static int case_ignorable(int32_t cp) {
    static const int32_t WB_IGNORABLE[] = {0x27, 0x2E, 0x3A, 0xB7, 0x387, 0x55F, 0x5F4, 0x2018, 0x2019, 0x2024,
                                           0x2027, 0xFE13, 0xFE52, 0xFE55, 0xFF07, 0xFF0E, 0xFF1A};
    utf8proc_category_t cat = utf8proc_category(cp);
    if (cat == UTF8PROC_CATEGORY_MN || cat == UTF8PROC_CATEGORY_ME || cat == UTF8PROC_CATEGORY_CF ||
        cat == UTF8PROC_CATEGORY_LM || cat == UTF8PROC_CATEGORY_SK)
        return 1;
    for (size_t i = 0; i < NR(WB_IGNORABLE); i++)
        if (WB_IGNORABLE[i] == cp) return 1;
    return 0;
}

enum { FULL_UPPER, FULL_LOWER, FULL_TITLE };

/* The full mapping of cp into out[0..3); returns its length (1..3). */
static int full_map(int32_t cp, int which, int32_t out[3]) {
    const unicase_full *f = which == FULL_UPPER   ? find_full(UNICASE_UPPER, NR(UNICASE_UPPER), cp)
                            : which == FULL_LOWER ? find_full(UNICASE_LOWER, NR(UNICASE_LOWER), cp)
                                                  : find_full(UNICASE_TITLE, NR(UNICASE_TITLE), cp);
    if (f) {
        int k = 0;
        while (k < 3 && f->to[k]) { out[k] = f->to[k]; k++; }
        return k;
    }
    out[0] = which == FULL_UPPER ? utf8proc_toupper(cp) : which == FULL_LOWER ? utf8proc_tolower(cp) : utf8proc_totitle(cp);
    return 1;
}

int32_t jinja_prev_cp(const char *p, size_t i, size_t *start) {
    size_t b = i - 1;
    while (b > 0 && i - b < 4 && ((unsigned char)p[b] & 0xC0) == 0x80) b--;
    utf8proc_int32_t cp;
    utf8proc_ssize_t k = utf8proc_iterate((const utf8proc_uint8_t *)p + b, (utf8proc_ssize_t)(i - b), &cp);
    if (k != (utf8proc_ssize_t)(i - b)) { *start = i - 1; return -1; }
    *start = b;
    return cp;
}

static int32_t cp_at(const char *p, size_t hi, size_t i, size_t *k) {
    utf8proc_int32_t cp;
    utf8proc_ssize_t m = utf8proc_iterate((const utf8proc_uint8_t *)p + i, (utf8proc_ssize_t)(hi - i), &cp);
    if (m <= 0) { *k = 1; return -1; }
    *k = (size_t)m;
    return cp;
}

/* CPython handle_capital_sigma: the Σ at bytes [i, i + k) of p[lo..hi) is final (ς) when a cased code point comes
 * before it, after any case-ignorable ones, and none comes after it, after any case-ignorable ones. */
static int final_sigma(const char *p, size_t lo, size_t hi, size_t i, size_t k) {
    int32_t c = -1;
    size_t j = i;
    while (j > lo) {
        c = jinja_prev_cp(p, j, &j);
        if (c < 0 || !case_ignorable(c)) break;
        c = -1;
    }
    if (c < 0 || !jinja_cp_is_cased(c)) return 0;
    for (j = i + k; j < hi;) {
        size_t m;
        c = cp_at(p, hi, j, &m);
        j += m;
        if (c < 0 || !case_ignorable(c)) return c < 0 || !jinja_cp_is_cased(c);
    }
    return 1;
}

/* lower_ucs4: the full lower-case mapping, with the final-sigma rule inside p[lo..hi). */
static int lower_at(const char *p, size_t lo, size_t hi, size_t i, size_t k, int32_t cp, int32_t out[3]) {
    if (cp == 0x3A3) { out[0] = final_sigma(p, lo, hi, i, k) ? 0x3C2 : 0x3C3; return 1; }
    return full_map(cp, FULL_LOWER, out);
}

static void put_cps(jbuf *b, const int32_t *cps, int n) {
    for (int j = 0; j < n; j++) {
        utf8proc_uint8_t enc[4];
        jbuf_put(b, (const char *)enc, (size_t)utf8proc_encode_char(cps[j], enc));
    }
}

/* Python's \s in a str pattern (str.isspace) and the other separators of jinja2's _word_beginning_split_re. */
static int word_sep(int32_t cp) {
    return cp > 0 && ((cp < 128 && strchr("-({[<", (int)cp)) || jinja_cp_is_space(cp));
}

cmf_status jb_map_case(jv s, int mode, jv *out) {
    jbuf b = {0};
    const char *p = s.u.s->s;
    size_t n = s.u.s->len, i = 0, word_lo = 0, word_hi = 0;
    int prev_cased = 0, first = 1, word_start = 1;
    while (i < n) {
        size_t k;
        int32_t cp = cp_at(p, n, i, &k), m[3];
        if (cp < 0) { jbuf_put(&b, p + i, 1); i++; prev_cased = 0; first = 0; continue; } /* a stray byte: as is */
        int nm = 1;
        m[0] = cp;
        switch (mode) {
        case CASE_UPPER: nm = full_map(cp, FULL_UPPER, m); break;
        case CASE_LOWER: nm = lower_at(p, 0, n, i, k, cp, m); break;
        case CASE_PYTITLE: nm = prev_cased ? lower_at(p, 0, n, i, k, cp, m) : full_map(cp, FULL_TITLE, m); break;
        case CASE_CAPITALIZE: nm = first ? full_map(cp, FULL_TITLE, m) : lower_at(p, 0, n, i, k, cp, m); break;
        case CASE_SWAPCASE:
            if (jinja_cp_is_upper(cp)) nm = lower_at(p, 0, n, i, k, cp, m);
            else if (jinja_cp_is_lower(cp)) nm = full_map(cp, FULL_UPPER, m);
            break;
        case CASE_JTITLE: { /* item[0].upper() + item[1:].lower() for the words between separator runs */
            if (word_sep(cp)) { word_start = 1; break; }
            if (word_start) { /* a word: its first code point upper, the rest lower with the word as the context */
                nm = full_map(cp, FULL_UPPER, m);
                word_start = 0;
                word_lo = word_hi = i + k;
                while (word_hi < n) {
                    size_t kk;
                    if (word_sep(cp_at(p, n, word_hi, &kk))) break;
                    word_hi += kk;
                }
            } else nm = lower_at(p, word_lo, word_hi, i, k, cp, m);
            break;
        }
        }
        prev_cased = jinja_cp_is_cased(cp);
        first = 0;
        put_cps(&b, m, nm);
        i += k;
    }
    return jb_ret_buf(out, &b);
}

/* One string's lower-cased code points, produced one at a time. */
typedef struct lower_iter {
    const char *p;
    size_t n, i;
    int32_t q[3];
    int nq, iq;
} lower_iter;

/* The next code point of s.lower() (a stray byte: 0x110000 + its value, after every code point), or -1 at the end. */
static int32_t lower_next(lower_iter *it) {
    if (it->iq < it->nq) return it->q[it->iq++];
    if (it->i >= it->n) return -1;
    size_t k;
    int32_t cp = cp_at(it->p, it->n, it->i, &k);
    if (cp < 0) return 0x110000 + (unsigned char)it->p[it->i++];
    it->nq = lower_at(it->p, 0, it->n, it->i, k, cp, it->q);
    it->iq = 1;
    it->i += k;
    return it->q[0];
}

int jinja_compare_lower(const char *a, size_t an, const char *b, size_t bn) {
    lower_iter x = {.p = a, .n = an}, y = {.p = b, .n = bn};
    for (;;) {
        int32_t u = lower_next(&x), v = lower_next(&y);
        if (u != v) return u < v ? -1 : 1;
        if (u < 0) return 0;
    }
}
