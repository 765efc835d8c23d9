/* lexer.c — Jinja2 template tokenizer with Hugging Face's whitespace settings.
 *
 * Rules (jinja2 3.1 lexer.py, as transformers' chat-template environment configures it):
 *  - "\r\n" and "\r" become "\n"; one trailing newline of the template is dropped (keep_trailing_newline=False);
 *  - `{%-`, `{{-`, `{#-` strip all whitespace before the tag; `-%}`, `-}}`, `-#}` all whitespace after;
 *  - lstrip_blocks: spaces/tabs between a line start and `{%` / `{#` are removed (unless `{%+`);
 *  - trim_blocks: the first newline after `%}` / `#}` is removed (unless `+%}`);
 *  - `{% raw %}...{% endraw %}` is text; `{# ... #}` is dropped. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "template/eval.h"
#include "util/error.h"

struct jchunk {
    struct jchunk *next;
    size_t used, cap;
    _Alignas(16) unsigned char mem[];
};

void *jarena_alloc(jarena *a, size_t n) {
    n = (n + 15) & ~(size_t)15;
    struct jchunk *c = a->head;
    if (!c || c->cap - c->used < n) {
        size_t cap = n > 65536 ? n : 65536;
        c = malloc(sizeof(*c) + cap);
        if (!c) return NULL;
        c->cap = cap;
        c->used = 0;
        c->next = a->head;
        a->head = c;
    }
    void *p = c->mem + c->used;
    c->used += n;
    memset(p, 0, n);
    return p;
}

char *jarena_strdup(jarena *a, const char *s, size_t n) {
    char *p = jarena_alloc(a, n + 1);
    if (p) { memcpy(p, s, n); p[n] = 0; }
    return p;
}

int jarena_keep(jarena *a, jv v) {
    if (a->nconst == a->capconst) {
        size_t nc = a->capconst ? a->capconst * 2 : 64;
        jv *p = realloc(a->consts, nc * sizeof(jv));
        if (!p) { jv_release(v); return -1; }
        a->consts = p;
        a->capconst = nc;
    }
    a->consts[a->nconst++] = v;
    return 0;
}

void jarena_free(jarena *a) {
    for (size_t i = 0; i < a->nconst; i++) jv_release(a->consts[i]);
    free(a->consts);
    while (a->head) {
        struct jchunk *n = a->head->next;
        free(a->head);
        a->head = n;
    }
    memset(a, 0, sizeof(*a));
}

typedef struct lexer {
    jarena *a;
    const char *s; /* normalized source */
    size_t n, pos;
    jtok *toks;
    size_t ntoks, cap;
    size_t lc_pos; /* line/column cache: position lc_pos is at lc_line:lc_col */
    int too_many;  /* push refused a token: more than CMF_TEMPLATE_MAX_TOKENS */
    int lc_line, lc_col;
} lexer;

static void line_col(lexer *L, size_t at, int *line, int *col) {
    if (at < L->lc_pos) { L->lc_pos = 0; L->lc_line = 1; L->lc_col = 1; }
    for (size_t i = L->lc_pos; i < at && i < L->n; i++) {
        if (L->s[i] == '\n') { L->lc_line++; L->lc_col = 1; }
        else if (((unsigned char)L->s[i] & 0xC0) != 0x80) L->lc_col++;
    }
    L->lc_pos = at;
    *line = L->lc_line;
    *col = L->lc_col;
}

static cmf_status lex_err(lexer *L, size_t at, const char *msg) {
    int line, col;
    line_col(L, at, &line, &col);
    return cmf_err(CMF_E_FORMAT, "template:%d:%d: %s", line, col, msg);
}

/* A failed push or allocation: the token cap, else out of memory. */
static cmf_status lex_nomem(const lexer *L) {
    if (L->too_many)
        return cmf_err(CMF_E_FORMAT, "template: too long: more than " JINJA_STR(CMF_TEMPLATE_MAX_TOKENS) " tokens");
    return cmf_err(CMF_E_NOMEM, "template");
}

static jtok *push(lexer *L, jtok_type t, size_t at, const char *s, size_t len) {
    if (L->ntoks >= CMF_TEMPLATE_MAX_TOKENS) { L->too_many = 1; return NULL; }
    if (L->ntoks == L->cap) {
        size_t nc = L->cap ? L->cap * 2 : 256;
        jtok *p = realloc(L->toks, nc * sizeof(jtok));
        if (!p) return NULL;
        L->toks = p;
        L->cap = nc;
    }
    jtok *k = &L->toks[L->ntoks++];
    memset(k, 0, sizeof(*k));
    k->type = t;
    line_col(L, at, &k->line, &k->col);
    if (s) {
        k->s = jarena_strdup(L->a, s, len);
        if (!k->s) { L->ntoks--; return NULL; }
        k->len = len;
    }
    return k;
}

static int is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }
static int is_name0(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
static int is_digit(char c) { return c >= '0' && c <= '9'; }
static int is_digit_of(char c, int base) {
    int d = is_digit(c) ? c - '0' : (c | 0x20) >= 'a' && (c | 0x20) <= 'f' ? (c | 0x20) - 'a' + 10 : 99;
    return d < base;
}

/* End of a run of digits of `base` from `at`, with single underscores between digits (jinja2's `(\d+_)*\d+`);
 * `at` when there is no digit there. */
static size_t digits_run(const lexer *L, size_t at, int base) {
    size_t j = at;
    for (;;) {
        size_t k = j;
        while (k < L->n && is_digit_of(L->s[k], base)) k++;
        if (k == j) return j == at ? at : j - 1; /* no digit: drop the underscore that led here */
        j = k;
        if (j + 1 < L->n && L->s[j] == '_' && is_digit_of(L->s[j + 1], base)) { j++; continue; }
        return j;
    }
}

/* Emits s[from,to) as text after the strip rules for the tag at `to` (kind '{', '%' or '#', marker c2). */
static cmf_status emit_text(lexer *L, size_t from, size_t to, char kind, char c2) {
    size_t end = to;
    if (c2 == '-') {
        while (end > from && is_ws(L->s[end - 1])) end--;
    } else if ((kind == '%' || kind == '#') && c2 != '+') {
        size_t l = end;
        while (l > from && (L->s[l - 1] == ' ' || L->s[l - 1] == '\t')) l--;
        if (l == 0 || L->s[l - 1] == '\n') end = l;
    }
    if (end > from && !push(L, T_TEXT, from, L->s + from, end - from)) return lex_nomem(L);
    return CMF_OK;
}

/* After a tag's closing marker at [close, close+len): returns where text resumes. */
static size_t after_tag(lexer *L, size_t close, size_t len, int minus, int plus, int block) {
    size_t p = close + len;
    if (minus) {
        while (p < L->n && is_ws(L->s[p])) p++;
    } else if (block && !plus && p < L->n && L->s[p] == '\n') {
        p++;
    }
    return p;
}

/* Appends code point cp as UTF-8; a surrogate (a lone "\ud800" in a literal: Python keeps it in the str and fails
 * only when the text is encoded) becomes its 3-byte generalized form, which cmf_template_render refuses if it
 * reaches the output. */
static size_t put_cp(char *buf, uint32_t cp) {
    if (cp < 0x80) { buf[0] = (char)cp; return 1; }
    if (cp < 0x800) { buf[0] = (char)(0xC0 | (cp >> 6)); buf[1] = (char)(0x80 | (cp & 0x3F)); return 2; }
    if (cp < 0x10000) {
        buf[0] = (char)(0xE0 | (cp >> 12)); buf[1] = (char)(0x80 | ((cp >> 6) & 0x3F)); buf[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    buf[0] = (char)(0xF0 | (cp >> 18)); buf[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    buf[2] = (char)(0x80 | ((cp >> 6) & 0x3F)); buf[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* Decodes the string literal opening with quote q at `at` (Python's unicode-escape rules as jinja2's lexer applies
 * them: \a \b \f \n \r \t \v \\ \' \" \<newline>, \xXX, \uXXXX, \UXXXXXXXX, octal \ooo; a backslash before any other
 * character stays). Returns 0, -1 when unterminated, -2 out of memory, -3 longer than JINJA_MAX_STRING_LITERAL,
 * -4 for a bad escape, *why then naming it (*bad_at its offset): a truncated \x / \u / \U (Python's message), a
 * \U past U+10FFFF, a malformed \N, or a \N{NAME}, which Python decodes by the character's Unicode name and which
 * we refuse (no name database) rather than print wrong. */
static int decode_string(lexer *L, size_t at, char q, char **out, size_t *olen, size_t *endp, const char **why,
                         size_t *bad_at) {
    size_t i = at + 1;
    char *buf = malloc(L->n - at + 1);
    if (!buf) return -2;
    size_t o = 0;
    while (i < L->n && L->s[i] != q) {
        char c = L->s[i];
        if (c != '\\' || i + 1 >= L->n) { buf[o++] = c; i++; continue; }
        char e = L->s[i + 1];
        i += 2;
        switch (e) {
        case 'n': buf[o++] = '\n'; break;
        case 't': buf[o++] = '\t'; break;
        case 'r': buf[o++] = '\r'; break;
        case 'b': buf[o++] = '\b'; break;
        case 'f': buf[o++] = '\f'; break;
        case 'v': buf[o++] = '\v'; break;
        case 'a': buf[o++] = '\a'; break;
        case '\\': buf[o++] = '\\'; break;
        case '\'': buf[o++] = '\''; break;
        case '"': buf[o++] = '"'; break;
        case '\n': break;
        case 'N': { /* \N{NAME}: as Python, "\N" without {NAME} is malformed; a name is unsupported */
            size_t k = i;
            if (k < L->n && L->s[k] == '{')
                while (++k < L->n && L->s[k] != '}' && L->s[k] != q) {}
            *why = k > i + 1 && k < L->n && L->s[k] == '}'
                       ? "\\N{...} escapes are not supported (a character by its Unicode name: cmf has no name "
                         "database; write the character itself or \\uXXXX)"
                       : "malformed \\N character escape";
            *bad_at = i - 2;
            free(buf);
            return -4;
        }
        case 'x': case 'u': case 'U': {
            int nd = e == 'x' ? 2 : e == 'u' ? 4 : 8;
            uint32_t cp = 0;
            for (int k = 0; k < nd; k++, i++) {
                char h = i < L->n ? L->s[i] : 0;
                int d = is_digit(h) ? h - '0' : (h >= 'a' && h <= 'f') ? h - 'a' + 10 : (h >= 'A' && h <= 'F') ? h - 'A' + 10 : -1;
                if (d < 0) {
                    *why = e == 'x' ? "truncated \\xXX escape" : e == 'u' ? "truncated \\uXXXX escape" : "truncated \\UXXXXXXXX escape";
                    *bad_at = i - 2 - (size_t)k;
                    free(buf);
                    return -4;
                }
                cp = cp * 16 + (uint32_t)d;
            }
            if (cp > 0x10FFFF) { *why = "illegal Unicode character"; *bad_at = i - 10; free(buf); return -4; }
            o += put_cp(buf + o, cp); /* (at most 4 bytes from the 6 to 10 bytes of the escape) */
            break;
        }
        default:
            if (e >= '0' && e <= '7') { /* octal, up to 3 digits: a code point (\377 is U+00FF, not a byte) */
                uint32_t v = (uint32_t)(e - '0');
                for (int k = 0; k < 2 && i < L->n && L->s[i] >= '0' && L->s[i] <= '7'; k++, i++) v = v * 8 + (uint32_t)(L->s[i] - '0');
                o += put_cp(buf + o, v); /* (at most 2 bytes from 2 to 4) */
            } else {
                buf[o++] = '\\';
                buf[o++] = e;
            }
        }
    }
    if (i >= L->n) { free(buf); return -1; }
    if (o > JINJA_MAX_STRING_LITERAL) { free(buf); return -3; } /* (the source cap bounds the loop above) */
    *out = jarena_strdup(L->a, buf, o);
    free(buf);
    if (!*out) return -2;
    *olen = o;
    *endp = i + 1;
    return 0;
}

/* Tokenizes the inside of a `{{ }}` (block=0) or `{% %}` (block=1) tag starting at L->pos; leaves L->pos after the
 * closing marker (strip rules applied). */
static cmf_status lex_tag(lexer *L, int block, size_t open_at) {
    int depth = 0;
    char open[JINJA_MAX_BRACKETS]; /* the closing bracket each open one expects */
    size_t i = L->pos;
    for (;;) {
        while (i < L->n && is_ws(L->s[i])) i++;
        if (i >= L->n) return lex_err(L, open_at, block ? "unclosed block tag ('%}' expected)" : "unclosed variable tag ('}}' expected)");
        const char *p = L->s + i;
        size_t rest = L->n - i;
        /* closing markers */
        int minus = 0, plus = 0;
        size_t m = 0;
        if ((p[0] == '-' || p[0] == '+') && rest >= 3) { minus = p[0] == '-'; plus = p[0] == '+'; m = 1; }
        if (block && rest >= m + 2 && p[m] == '%' && p[m + 1] == '}' && (m == 0 || p[0] != '+' || block)) {
            if (!push(L, T_BEND, i, NULL, 0)) return lex_nomem(L);
            L->pos = after_tag(L, i, m + 2, minus, plus, 1);
            return CMF_OK;
        }
        if (!block && depth == 0 && !plus && rest >= m + 2 && p[m] == '}' && p[m + 1] == '}') {
            if (!push(L, T_VEND, i, NULL, 0)) return lex_nomem(L);
            L->pos = after_tag(L, i, m + 2, minus, 0, 0);
            return CMF_OK;
        }
        char c = p[0];
        if (is_name0(c)) {
            size_t j = i;
            while (j < L->n && (is_name0(L->s[j]) || is_digit(L->s[j]))) j++;
            if (!push(L, T_NAME, i, p, j - i)) return lex_nomem(L);
            i = j;
        } else if (is_digit(c)) {
            /* jinja2 3.1 lexer: a float is digits[_digits] then .digits and/or e[+-]digits; an integer is 0b / 0o / 0x
             * with digits of that base, [1-9] digits, or zeros (underscores single, between digits) */
            size_t j = digits_run(L, i, 10), k;
            int isf = 0;
            if (j < L->n && L->s[j] == '.' && (k = digits_run(L, j + 1, 10)) > j + 1) { isf = 1; j = k; }
            if (j > i && j < L->n && (L->s[j] == 'e' || L->s[j] == 'E')) {
                k = j + 1 + (j + 1 < L->n && (L->s[j + 1] == '+' || L->s[j + 1] == '-'));
                size_t e = digits_run(L, k, 10);
                if (e > k) { isf = 1; j = e; }
            }
            int base = 10;
            if (!isf) {
                char p = i + 1 < L->n ? (char)(L->s[i + 1] | 0x20) : 0;
                base = c == '0' && p == 'x' ? 16 : c == '0' && p == 'o' ? 8 : c == '0' && p == 'b' ? 2 : 10;
                if (base != 10) {
                    k = i + 2 + (i + 2 < L->n && L->s[i + 2] == '_');
                    j = digits_run(L, k, base);
                    if (j == k) { base = 10; j = i + 1; } /* "0x" alone: the integer 0, then a name */
                } else if (c == '0') {
                    j = i + 1;
                    while (j + 1 < L->n && L->s[j] == '_' && L->s[j + 1] == '0') j += 2;
                    while (j < L->n && L->s[j] == '0') j++;
                }
            }
            char num[80];
            size_t o = 0;
            if (j - i >= sizeof(num)) return lex_err(L, i, "number literal too long");
            for (size_t q = i; q < j; q++) num[o++] = L->s[q];
            num[o] = 0;
            jtok *t = push(L, isf ? T_FLOAT : T_INT, i, num, o);
            if (!t) return lex_nomem(L);
            if (isf) {
                size_t w = 0;
                for (size_t q = 0; q < o; q++) if (num[q] != '_') num[w++] = num[q];
                num[w] = 0;
                t->fval = strtod(num, NULL);
            } else if (jinja_parse_int(num, o, base == 10 ? 10 : 0, &t->ival)) {
                return lex_err(L, i, "integer literal too large (the engine's integers are 64-bit: at most 9223372036854775807)");
            }
            i = j;
        } else if (c == '\'' || c == '"') {
            char *s;
            size_t len, end;
            const char *why = NULL;
            size_t bad_at = i;
            int r = decode_string(L, i, c, &s, &len, &end, &why, &bad_at);
            if (r == -2) return lex_nomem(L);
            if (r == -3) return lex_err(L, i, "string literal too long (limit " JINJA_STR(JINJA_MAX_STRING_LITERAL) " bytes)");
            if (r == -4) return lex_err(L, bad_at, why);
            if (r) return lex_err(L, i, "unterminated string literal");
            jtok *t = push(L, T_STR, i, NULL, 0);
            if (!t) return lex_nomem(L);
            t->s = s;
            t->len = len;
            i = end;
        } else {
            static const char *two[] = {"//", "**", "==", "!=", "<=", ">="};
            size_t len = 0;
            for (size_t k = 0; k < sizeof(two) / sizeof(two[0]); k++)
                if (rest >= 2 && p[0] == two[k][0] && p[1] == two[k][1]) len = 2;
            if (!len && strchr("+-*/%~<>=()[]{}.,:|", c)) len = 1;
            if (!len) {
                char msg[64];
                snprintf(msg, sizeof(msg), "unexpected character '%c' in tag", c);
                return lex_err(L, i, msg);
            }
            if (c == '(' || c == '[' || c == '{') { /* jinja2's lexer balances brackets too */
                if (depth == JINJA_MAX_BRACKETS)
                    return lex_err(L, i, "expression nested too deeply (more than " JINJA_STR(JINJA_MAX_BRACKETS) " open brackets)");
                open[depth++] = c == '(' ? ')' : c == '[' ? ']' : '}';
            }
            if ((c == ')' || c == ']' || c == '}') && depth > 0) {
                if (c != open[depth - 1]) {
                    char msg[64];
                    snprintf(msg, sizeof(msg), "unexpected '%c', expected '%c'", c, open[depth - 1]);
                    return lex_err(L, i, msg);
                }
                depth--;
            }
            if (!push(L, T_OP, i, p, len)) return lex_nomem(L);
            i += len;
        }
    }
}

/* `{% raw %}` at tag start `at`: emits the raw body as text. Returns 1 if handled, 0 if not a raw tag. */
static int try_raw(lexer *L, size_t at, cmf_status *st) {
    size_t i = at + 2;
    if (i < L->n && (L->s[i] == '-' || L->s[i] == '+')) i++;
    while (i < L->n && is_ws(L->s[i])) i++;
    if (L->n - i < 3 || memcmp(L->s + i, "raw", 3) != 0) return 0;
    i += 3;
    while (i < L->n && is_ws(L->s[i])) i++;
    int minus = 0;
    if (i < L->n && (L->s[i] == '-' || L->s[i] == '+')) { minus = L->s[i] == '-'; i++; }
    if (L->n - i < 2 || L->s[i] != '%' || L->s[i + 1] != '}') return 0;
    size_t body = after_tag(L, i, 2, minus, 0, 1);
    for (size_t j = body; j + 1 < L->n; j++) {
        if (L->s[j] != '{' || L->s[j + 1] != '%') continue;
        size_t k = j + 2;
        char c2 = k < L->n ? L->s[k] : 0;
        if (c2 == '-' || c2 == '+') k++;
        while (k < L->n && is_ws(L->s[k])) k++;
        if (L->n - k < 6 || memcmp(L->s + k, "endraw", 6) != 0) continue;
        k += 6;
        while (k < L->n && is_ws(L->s[k])) k++;
        int m2 = 0, p2 = 0;
        if (k < L->n && (L->s[k] == '-' || L->s[k] == '+')) { m2 = L->s[k] == '-'; p2 = L->s[k] == '+'; k++; }
        if (L->n - k < 2 || L->s[k] != '%' || L->s[k + 1] != '}') continue;
        *st = emit_text(L, L->pos, at, '%', L->s[at + 2]);
        if (*st == CMF_OK) *st = emit_text(L, body, j, '%', c2);
        L->pos = after_tag(L, k, 2, m2, p2, 1);
        return 1;
    }
    *st = lex_err(L, at, "unclosed raw block ('{% endraw %}' expected)");
    return 1;
}

cmf_status jinja_lex(jarena *a, const char *src, size_t n, jtok **toks, size_t *ntoks) {
    lexer L = {.a = a, .lc_line = 1, .lc_col = 1};
    char *norm = jarena_alloc(a, n + 1);
    if (!norm) return cmf_err(CMF_E_NOMEM, "template");
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        if (src[i] == '\r') { norm[o++] = '\n'; if (i + 1 < n && src[i + 1] == '\n') i++; }
        else norm[o++] = src[i];
    }
    if (o && norm[o - 1] == '\n') o--;
    norm[o] = 0;
    L.s = norm;
    L.n = o;
    cmf_status st = CMF_OK;
    while (L.pos < L.n && st == CMF_OK) {
        size_t i = L.pos;
        while (i + 1 < L.n && !(L.s[i] == '{' && (L.s[i + 1] == '{' || L.s[i + 1] == '%' || L.s[i + 1] == '#'))) i++;
        if (i + 1 >= L.n) { /* no more tags */
            if (!push(&L, T_TEXT, L.pos, L.s + L.pos, L.n - L.pos)) st = lex_nomem(&L);
            break;
        }
        char kind = L.s[i + 1];
        char c2 = i + 2 < L.n ? L.s[i + 2] : 0;
        if (kind == '%' && try_raw(&L, i, &st)) continue;
        st = emit_text(&L, L.pos, i, kind, c2);
        if (st) break;
        if (kind == '#') {
            size_t j = i + 2;
            while (j + 1 < L.n && !(L.s[j] == '#' && L.s[j + 1] == '}')) j++;
            if (j + 1 >= L.n) { st = lex_err(&L, i, "unclosed comment ('#}' expected)"); break; }
            int minus = j > i + 2 && L.s[j - 1] == '-', plus = j > i + 2 && L.s[j - 1] == '+';
            L.pos = after_tag(&L, j, 2, minus, plus, 1);
            continue;
        }
        L.pos = i + 2 + (c2 == '-' || c2 == '+');
        if (!push(&L, kind == '%' ? T_BBEGIN : T_VBEGIN, i, NULL, 0)) { st = lex_nomem(&L); break; }
        st = lex_tag(&L, kind == '%', i);
    }
    if (st == CMF_OK && !push(&L, T_EOF, L.n, NULL, 0)) st = lex_nomem(&L);
    if (st) { free(L.toks); return st; }
    *toks = jarena_alloc(a, L.ntoks * sizeof(jtok));
    if (!*toks) { free(L.toks); return lex_nomem(&L); }
    memcpy(*toks, L.toks, L.ntoks * sizeof(jtok));
    *ntoks = L.ntoks;
    free(L.toks);
    return CMF_OK;
}
