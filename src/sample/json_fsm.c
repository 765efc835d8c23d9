/* json_fsm.c — the byte-level JSON object recognizer of json_fsm.h. One switch on the state per byte; the grammar is
 * RFC 8259's (object §4, array §5, number §6, string §7, literals §3), UTF-8 per RFC 3629 §4 (the table of
 * well-formed byte sequences). */
#include "sample/json_fsm.h"

enum {
    S_START,    /* before the object: whitespace or '{' */
    S_KEY_END,  /* after '{': whitespace, '"' (a key) or '}' */
    S_KEY,      /* after ',' in an object: whitespace or '"' */
    S_COLON,    /* after a key: whitespace or ':' */
    S_VALUE,    /* after ':' or ',' in an array: whitespace or a value */
    S_VAL_END,  /* after '[': whitespace, a value or ']' */
    S_AFTER,    /* after a value in a container: whitespace, ',' or the container's closing bracket */
    S_STR,      /* in a string (lit: 'k' a key, 0 a value) */
    S_ESC,      /* after '\' in a string */
    S_HEX,      /* in the 4 hex digits of \u (aux: digits left) */
    S_UTF8,     /* in a multi-byte UTF-8 character (aux: bytes left; lo..hi: the next byte's range) */
    S_MINUS,    /* after a number's '-': a digit */
    S_ZERO,     /* after a leading 0: '.', 'e', 'E' or the number's end */
    S_INT,      /* in the integer digits */
    S_DOT,      /* after '.': a digit */
    S_FRAC,     /* in the fraction digits */
    S_EXP,      /* after 'e' / 'E': '+', '-' or a digit */
    S_EXP_SIGN, /* after the exponent's sign: a digit */
    S_EXP_DIG,  /* in the exponent digits */
    S_LIT,      /* in true / false / null (lit: its first letter; aux: letters matched) */
    S_DONE      /* the object closed: nothing more */
};

static const char *literal(uint8_t c) { return c == 't' ? "true" : c == 'f' ? "false" : "null"; }

static int is_ws(uint8_t c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

static int is_digit(uint8_t c) { return c >= '0' && c <= '9'; }

static int is_hex(uint8_t c) { return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }

void cmf_json_fsm_init(cmf_json_fsm *f) {
    *f = (cmf_json_fsm){0};
    f->state = S_START;
}

/* Whitespace byte c in a structural state: the run is one space, or a newline and at most CMF_JSON_MAX_INDENT
 * spaces or tabs (json_fsm.h). */
static int take_ws(cmf_json_fsm *f, uint8_t c) {
    if (f->ws == 0) {
        if (c == ' ') return f->ws = 255, 1;
        return c == '\n' ? (f->ws = 1, 1) : 0;
    }
    if (f->ws == 255 || f->ws > CMF_JSON_MAX_INDENT || (c != ' ' && c != '\t')) return 0;
    f->ws++;
    return 1;
}

/* Opens a container ('{' or '['). */
static int push(cmf_json_fsm *f, int object) {
    if (f->depth >= CMF_JSON_MAX_DEPTH) return 0;
    if (object) f->stack |= 1u << f->depth;
    else f->stack &= ~(1u << f->depth);
    f->depth++;
    f->state = object ? S_KEY_END : S_VAL_END;
    return 1;
}

/* Closes the innermost container with byte c ('}' or ']'), when it is of that kind. */
static int pop(cmf_json_fsm *f, uint8_t c) {
    const int object = (f->stack >> (f->depth - 1)) & 1u;
    if (c != (object ? '}' : ']')) return 0;
    f->depth--;
    f->state = f->depth ? S_AFTER : S_DONE;
    return 1;
}

/* The first byte of a value. */
static int value(cmf_json_fsm *f, uint8_t c) {
    switch (c) {
    case '{': return push(f, 1);
    case '[': return push(f, 0);
    case '"': f->state = S_STR, f->lit = 0; return 1;
    case '-': f->state = S_MINUS; return 1;
    case '0': f->state = S_ZERO; return 1;
    case 't':
    case 'f':
    case 'n': f->state = S_LIT, f->lit = c, f->aux = 1; return 1;
    default:
        if (c >= '1' && c <= '9') return f->state = S_INT, 1;
        return 0;
    }
}

/* After a value in a container (also the byte that ends a number). */
static int after(cmf_json_fsm *f, uint8_t c) {
    f->state = S_AFTER;
    if (is_ws(c)) return take_ws(f, c);
    if (c == ',') return f->state = (f->stack >> (f->depth - 1)) & 1u ? S_KEY : S_VALUE, 1;
    return c == '}' || c == ']' ? pop(f, c) : 0;
}

/* A string byte that is not '"' or '\': printable ASCII, or the lead byte of a well-formed UTF-8 character. */
static int str_byte(cmf_json_fsm *f, uint8_t c) {
    if (c < 0x20) return 0;
    if (c < 0x80) return 1;
    uint8_t lo = 0x80, hi = 0xBF, n;
    if (c >= 0xC2 && c <= 0xDF) n = 1;
    else if (c >= 0xE0 && c <= 0xEF) n = 2, lo = c == 0xE0 ? 0xA0 : 0x80, hi = c == 0xED ? 0x9F : 0xBF;
    else if (c >= 0xF0 && c <= 0xF4) n = 3, lo = c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF;
    else return 0;
    f->state = S_UTF8, f->aux = n, f->lo = lo, f->hi = hi;
    return 1;
}

static int step(cmf_json_fsm *f, uint8_t c) {
    if (!is_ws(c) && f->state != S_STR && f->state != S_UTF8) f->ws = 0;
    switch (f->state) {
    case S_START: return is_ws(c) ? take_ws(f, c) : c == '{' ? push(f, 1) : 0;
    case S_KEY_END:
        if (c == '}') return pop(f, c);
        /* fall through */
    case S_KEY:
        if (is_ws(c)) return take_ws(f, c);
        return c == '"' ? (f->state = S_STR, f->lit = 'k', 1) : 0;
    case S_COLON:
        if (is_ws(c)) return take_ws(f, c);
        return c == ':' ? (f->state = S_VALUE, 1) : 0;
    case S_VAL_END:
        if (c == ']') return pop(f, c);
        /* fall through */
    case S_VALUE: return is_ws(c) ? take_ws(f, c) : value(f, c);
    case S_AFTER: return after(f, c);
    case S_STR:
        if (c == '"') {
            f->ws = 0;
            f->state = f->lit == 'k' ? S_COLON : S_AFTER;
            return 1;
        }
        if (c == '\\') return f->state = S_ESC, 1;
        return str_byte(f, c);
    case S_ESC:
        if (c == 'u') return f->state = S_HEX, f->aux = 4, 1;
        if (c == '"' || c == '\\' || c == '/' || c == 'b' || c == 'f' || c == 'n' || c == 'r' || c == 't')
            return f->state = S_STR, 1;
        return 0;
    case S_HEX:
        if (!is_hex(c)) return 0;
        if (--f->aux == 0) f->state = S_STR;
        return 1;
    case S_UTF8:
        if (c < f->lo || c > f->hi) return 0;
        f->lo = 0x80, f->hi = 0xBF;
        if (--f->aux == 0) f->state = S_STR;
        return 1;
    case S_MINUS:
        if (c == '0') return f->state = S_ZERO, 1;
        return c >= '1' && c <= '9' ? (f->state = S_INT, 1) : 0;
    case S_INT:
        if (is_digit(c)) return 1;
        /* fall through */
    case S_ZERO:
        if (c == '.') return f->state = S_DOT, 1;
        if (c == 'e' || c == 'E') return f->state = S_EXP, 1;
        return after(f, c);
    case S_DOT: return is_digit(c) ? (f->state = S_FRAC, 1) : 0;
    case S_FRAC:
        if (is_digit(c)) return 1;
        if (c == 'e' || c == 'E') return f->state = S_EXP, 1;
        return after(f, c);
    case S_EXP:
        if (c == '+' || c == '-') return f->state = S_EXP_SIGN, 1;
        /* fall through */
    case S_EXP_SIGN: return is_digit(c) ? (f->state = S_EXP_DIG, 1) : 0;
    case S_EXP_DIG: return is_digit(c) ? 1 : after(f, c);
    case S_LIT: {
        const char *w = literal(f->lit);
        if (c != (uint8_t)w[f->aux]) return 0;
        if (w[++f->aux] == '\0') f->state = S_AFTER;
        return 1;
    }
    default: return 0; /* S_DONE: the language ends with the object */
    }
}

int cmf_json_fsm_feed(cmf_json_fsm *f, const void *bytes, size_t n) {
    const uint8_t *p = bytes;
    for (size_t i = 0; i < n && !f->bad; i++)
        if (!step(f, p[i])) f->bad = 1;
    return !f->bad;
}

int cmf_json_fsm_done(const cmf_json_fsm *f) { return !f->bad && f->state == S_DONE; }

int cmf_json_fsm_in_string(const cmf_json_fsm *f) { return !f->bad && f->state == S_STR; }
