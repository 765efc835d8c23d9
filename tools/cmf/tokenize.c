/* tokenize.c — `cmf tokenize` and `cmf detokenize`: the tokenizer of a model file (its vocab section) or of a
 * Hugging Face tokenizer.json, as a filter for scripts.
 *
 *   tokenize:   stdin (all of it, one input) or --jsonl (one JSON string per line, one input each) -> one line of
 *               comma-separated ids per input (an input of zero tokens gives an empty line).
 *   detokenize: stdin lines of comma-separated ids (an empty line is zero ids) -> the text of each. With exactly
 *               one input line the text is written exactly, with no newline added; with several lines each text is
 *               followed by "\n" (ambiguous when a text holds a newline: --jsonl prints each text as one JSON
 *               string per line instead).
 *
 * Encoding and decoding are cmf_tokenize / cmf_detokenize_n (include/cmf.h: HF tokenizers' encode(text,
 * add_special_tokens) and decode(ids, skip_special_tokens)); texts are byte strings with a length, so U+0000 passes
 * both ways ("\u0000" in --jsonl). Errors are one line "cmf <cmd>: ..." naming the input
 * line; exit 1 for bad input data, 2 for usage errors (cli.h). */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


#include "cli.h"
#include "tokenizer/tokenizer.h"

static const char *TOK_USAGE =
    "usage: cmf tokenize (MODEL.cmf | tokenizer.json) [--special] [--jsonl]\n"
    "\n"
    "Reads text on stdin and prints its token ids on one line, comma-separated.\n"
    "\n"
    "  --special    add the special tokens of the tokenizer's post-processor (e.g. BOS); default: none\n"
    "  --jsonl      stdin holds one JSON string per line; print one line of ids per input line (a line must be\n"
    "               exactly one JSON string: other text or a lone surrogate escape is an error naming the line)\n"
    "\n"
    "Without --jsonl all of stdin (newlines included) is one input. An input of zero tokens prints an empty line.\n"
    "A file that does not start with the CMF magic is read as a tokenizer.json when its name ends in .json or its\n"
    "first non-blank byte (after an optional UTF-8 BOM) is '{' or '['; anything else as a CMF file.\n";

static const char *DETOK_USAGE =
    "usage: cmf detokenize (MODEL.cmf | tokenizer.json) [--skip-special] [--jsonl]\n"
    "\n"
    "Reads lines of comma-separated token ids on stdin (an empty line is zero ids) and prints the text of each.\n"
    "\n"
    "  --skip-special   leave out special tokens (HF decode's skip_special_tokens)\n"
    "  --jsonl          print each text as one JSON string per line\n"
    "\n"
    "Framing without --jsonl: with one input line the text is printed exactly, with no newline added; with\n"
    "several lines each text is followed by a newline (use --jsonl when texts may hold newlines).\n"
    "Ids in [0, vocabulary size) without a token are skipped, as HF decode does; larger ids are an error.\n";

/* Whether `path` is to be read as a tokenizer.json rather than a CMF file: it does not start with the CMF magic
 * "CMF" (CMF_FORMAT.md §1) and either its name ends in ".json" (any case) or its first non-blank byte (after an
 * optional UTF-8 BOM) is '{' or '[' (a JSON document). So an empty or short .json file gets a tokenizer.json error,
 * not a CMF envelope error. On error prints and returns -1. */
static int looks_like_json(const char *cmd, const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        cli_fail(cmd, "%s: cannot open", path);
        return -1;
    }
    unsigned char head[3] = {0};
    size_t got = fread(head, 1, 3, f);
    if (got == 3 && !memcmp(head, "CMF", 3)) {
        fclose(f);
        return 0;
    }
    rewind(f);
    int c = fgetc(f);
    if (c == 0xEF && fgetc(f) == 0xBB && fgetc(f) == 0xBF) c = fgetc(f); /* skip a UTF-8 BOM */
    while (c == ' ' || c == '\t' || c == '\n' || c == '\r') c = fgetc(f);
    fclose(f);
    size_t pl = strlen(path);
    int json_name = pl >= 5 && path[pl - 5] == '.';
    for (size_t i = 0; json_name && i < 4; i++) json_name = tolower((unsigned char)path[pl - 4 + i]) == "json"[i];
    return c == '{' || c == '[' || json_name;
}

/* The tokenizer of `path`: a tokenizer.json (*own set, freed by the caller) or a model file's (*m set, the
 * tokenizer owned by the model). On error prints and returns CLI_FAIL. */
static int load_tokenizer(const char *cmd, const char *path, cmf_model **m, cmf_tokenizer **own,
                          const cmf_tokenizer **tok) {
    *m = NULL;
    *own = NULL;
    *tok = NULL;
    int js = looks_like_json(cmd, path);
    if (js < 0) return CLI_FAIL;
    cmf_status st;
    if (js) {
        if ((st = cmf_tokenizer_load_file(path, own)) != CMF_OK) return cli_lib_error(cmd, st);
        *tok = *own;
        return 0;
    }
    cmf_model_params mp = {.n_threads = 1};
    if ((st = cmf_model_load(path, &mp, m)) != CMF_OK) return cli_lib_error(cmd, st);
    if (!(*tok = cmf_model_tokenizer(*m))) {
        const char *why = cmf_model_tokenizer_error(*m);
        return cli_fail(cmd, "%s: %s", path, why && *why ? why : "the model has no tokenizer (no vocab section)");
    }
    return 0;
}

/* Reads all of stdin into a malloc'd NUL-terminated buffer (*len bytes, NULs included). */
static int read_stdin(const char *cmd, char **buf, size_t *len) {
    size_t cap = 4096, n = 0;
    char *b = malloc(cap);
    if (!b) return cli_fail(cmd, "out of memory");
    for (;;) {
        if (cap - n < 2) {
            char *nb = realloc(b, cap * 2);
            if (!nb) {
                free(b);
                return cli_fail(cmd, "out of memory");
            }
            b = nb;
            cap *= 2;
        }
        size_t r = fread(b + n, 1, cap - n - 1, stdin);
        n += r;
        if (r == 0) break;
    }
    if (ferror(stdin)) {
        free(b);
        return cli_fail(cmd, "error reading stdin");
    }
    b[n] = '\0';
    *buf = b;
    *len = n;
    return 0;
}

/* The next line of buf[*pos..len) without its "\n" (and a "\r" before it): start and length; 0 at the end. */
static int next_line(const char *buf, size_t len, size_t *pos, const char **line, size_t *line_len) {
    if (*pos >= len) return 0;
    const char *s = buf + *pos;
    const char *nl = memchr(s, '\n', len - *pos);
    size_t l = nl ? (size_t)(nl - s) : len - *pos;
    *pos += l + (nl ? 1 : 0);
    if (l > 0 && s[l - 1] == '\r') l--;
    *line = s;
    *line_len = l;
    return 1;
}

static int print_ids(const int32_t *ids, size_t n) {
    for (size_t i = 0; i < n; i++) printf(i ? ",%d" : "%d", (int)ids[i]);
    putchar('\n');
    return 0;
}

/* Tokenizes one input and prints its ids line. */
static int tokenize_one(const char *cmd, const cmf_tokenizer *tok, const char *text, size_t len, int special,
                        long line) {
    int32_t *ids = NULL;
    size_t n = 0;
    cmf_status st = cmf_tokenize(tok, text, len, special, &ids, &n);
    if (st != CMF_OK) {
        char msg[1024];
        if (line > 0) return cli_fail(cmd, "line %ld: %s", line, cli_lib_message(cmd, st, msg, sizeof msg));
        return cli_lib_error(cmd, st);
    }
    print_ids(ids, n);
    free(ids);
    return 0;
}

/* The 4 hex digits at s (a \\u escape's value), or -1. */
static long hex4(const char *s) {
    long v = 0;
    for (int i = 0; i < 4; i++) {
        int c = (unsigned char)s[i], d = c >= '0' && c <= '9' ? c - '0'
                                        : c >= 'a' && c <= 'f' ? c - 'a' + 10
                                        : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0) return -1;
        v = v * 16 + d;
    }
    return v;
}

/* Decodes line `line` of --jsonl input (l, ll bytes): exactly one JSON string literal, with optional whitespace
 * around it (RFC 8259). cJSON is not used here because its strings end at the first NUL, and "\u0000" is valid
 * JSON that must reach the tokenizer. *out (malloc'd, *out_len bytes, NULs included) is the UTF-8 text: escapes
 * decoded, a surrogate pair joined; a lone surrogate is an error, as in Python's json + str.encode("utf-8").
 * Other bytes are copied as they are. On error prints "line N: ..." and returns CLI_FAIL. */
static int jsonl_string(const char *l, size_t ll, long line, char **out, size_t *out_len) {
    static const char *WANT = "(--jsonl wants one JSON string per line)";
    size_t i = 0, n = 0;
    while (i < ll && (l[i] == ' ' || l[i] == '\t' || l[i] == '\r')) i++;
    if (i == ll || l[i] != '"') return cli_fail("tokenize", "line %ld: not a JSON string %s", line, WANT);
    char *b = malloc(ll + 1); /* the decoded text is never longer than the literal */
    if (!b) return cli_fail("tokenize", "out of memory");
    const char *err = NULL;
    size_t at = 0;
    long u = 0;
    for (i++;; i++) {
        if (i >= ll) {
            err = "unterminated JSON string", at = i;
            break;
        }
        unsigned char c = (unsigned char)l[i];
        if (c == '"') break;
        if (c < 0x20) {
            err = "a control character must be escaped in a JSON string", at = i;
            break;
        }
        if (c != '\\') {
            b[n++] = (char)c;
            continue;
        }
        at = i++;
        char e = i < ll ? l[i] : 0;
        const char *simple = strchr("\"\\/bfnrt", e);
        if (e && simple) {
            b[n++] = "\"\\/\b\f\n\r\t"[simple - "\"\\/bfnrt"];
            continue;
        }
        u = e == 'u' && i + 4 < ll ? hex4(l + i + 1) : -1;
        if (u < 0) {
            err = e == 'u' ? "\\u wants 4 hex digits" : "invalid escape in a JSON string";
            break;
        }
        i += 4;
        if (u >= 0xDC00 && u <= 0xDFFF) {
            err = "a lone low surrogate \\u%04lx: not valid Unicode (a JSON string, but no UTF-8 text)";
            break;
        }
        if (u >= 0xD800 && u <= 0xDBFF) {
            long lo = i + 6 < ll && l[i + 1] == '\\' && l[i + 2] == 'u' ? hex4(l + i + 3) : -1;
            if (lo < 0xDC00 || lo > 0xDFFF) {
                err = "a lone high surrogate \\u%04lx (no low surrogate after it): not valid Unicode (a JSON string, "
                      "but no UTF-8 text)";
                break;
            }
            i += 6;
            u = 0x10000 + ((u - 0xD800) << 10) + (lo - 0xDC00);
        }
        if (u < 0x80) {
            b[n++] = (char)u;
        } else if (u < 0x800) {
            b[n++] = (char)(0xC0 | (u >> 6)), b[n++] = (char)(0x80 | (u & 0x3F));
        } else if (u < 0x10000) {
            b[n++] = (char)(0xE0 | (u >> 12)), b[n++] = (char)(0x80 | ((u >> 6) & 0x3F));
            b[n++] = (char)(0x80 | (u & 0x3F));
        } else {
            b[n++] = (char)(0xF0 | (u >> 18)), b[n++] = (char)(0x80 | ((u >> 12) & 0x3F));
            b[n++] = (char)(0x80 | ((u >> 6) & 0x3F)), b[n++] = (char)(0x80 | (u & 0x3F));
        }
    }
    if (!err) {
        for (i++; i < ll && (l[i] == ' ' || l[i] == '\t' || l[i] == '\r');) i++;
        if (i < ll) err = "text after the JSON string", at = i;
    }
    if (err) {
        char msg[160];
        snprintf(msg, sizeof msg, err, u);
        free(b);
        return cli_fail("tokenize", "line %ld, byte %zu: %s %s", line, at + 1, msg, WANT);
    }
    b[n] = '\0';
    *out = b;
    *out_len = n;
    return 0;
}

int cmd_tokenize(int argc, char **argv) {
    cli_args a;
    cli_args_init(&a, "tokenize", argc, argv);
    const char *path = NULL;
    int special = 0, jsonl = 0;
    while (cli_args_next(&a)) {
        if (cli_is(&a, "--help", "-h")) {
            fputs(TOK_USAGE, stdout);
            return CLI_OK;
        } else if (cli_is(&a, "--special", NULL)) {
            special = 1;
        } else if (cli_is(&a, "--jsonl", NULL)) {
            jsonl = 1;
        } else if (!cli_is_flag(&a) && !path) {
            path = a.arg;
        } else {
            return cli_unknown(&a);
        }
    }
    if (!path) return cli_usage_error("tokenize", "missing MODEL.cmf or tokenizer.json (see cmf tokenize --help)");
    cmf_model *m = NULL;
    cmf_tokenizer *own = NULL;
    const cmf_tokenizer *tok = NULL;
    char *in = NULL;
    size_t in_len = 0;
    int rc = load_tokenizer("tokenize", path, &m, &own, &tok);
    if (!rc) rc = read_stdin("tokenize", &in, &in_len);
    if (!rc && !jsonl) rc = tokenize_one("tokenize", tok, in, in_len, special, 0);
    if (!rc && jsonl) {
        size_t pos = 0, ll;
        const char *l;
        for (long line = 1; !rc && next_line(in, in_len, &pos, &l, &ll); line++) {
            char *text = NULL;
            size_t len = 0;
            if (!(rc = jsonl_string(l, ll, line, &text, &len)))
                rc = tokenize_one("tokenize", tok, text, len, special, line);
            free(text);
        }
    }
    if (fflush(stdout) != 0 && !rc) rc = cli_fail("tokenize", "error writing stdout");
    free(in);
    cmf_tokenizer_free(own);
    cmf_model_free(m);
    return rc;
}

/* A line of ids ("" is zero ids): *ids malloc'd (NULL when none). Prints "line N: ..." errors. */
static int parse_line(const char *l, size_t ll, long line, int vocab, int32_t **ids, size_t *n) {
    *ids = NULL;
    *n = 0;
    size_t i = 0;
    while (i < ll && (l[i] == ' ' || l[i] == '\t')) i++;
    if (i == ll) return 0;
    char *s = malloc(ll + 1), what[32];
    if (!s) return cli_fail("detokenize", "out of memory");
    memcpy(s, l, ll);
    s[ll] = '\0';
    snprintf(what, sizeof what, "line %ld", line);
    int rc = strlen(s) != ll ? cli_fail("detokenize", "%s: a NUL byte", what)
                             : cli_parse_ids("detokenize", what, s, ids, n);
    free(s);
    if (rc) return CLI_FAIL; /* bad input data, not a usage error */
    for (size_t k = 0; k < *n; k++) {
        if ((*ids)[k] >= vocab) {
            rc = cli_fail("detokenize", "%s: id %d (position %zu) is out of range for a vocabulary of %d", what,
                          (int)(*ids)[k], k + 1, vocab);
            free(*ids);
            *ids = NULL;
            return rc;
        }
    }
    return 0;
}

/* Prints s (n bytes, NULs included) as a JSON string literal escaped as cJSON prints strings (the quote, the
 * backslash, \b \f \n \r \t; other bytes below 0x20 as \u00XX; everything else as it is), so U+0000 prints as
 * \u0000 (cJSON_PrintUnformatted would stop there). */
static void print_json_string(const char *s, size_t n) {
    putchar('"');
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        const char *e = c == '"' ? "\\\"" : c == '\\' ? "\\\\" : c == '\b' ? "\\b" : c == '\f' ? "\\f"
                      : c == '\n' ? "\\n" : c == '\r' ? "\\r" : c == '\t' ? "\\t" : NULL;
        if (e)
            fputs(e, stdout);
        else if (c < 0x20)
            printf("\\u%04x", c);
        else
            putchar(c);
    }
    putchar('"');
}

int cmd_detokenize(int argc, char **argv) {
    cli_args a;
    cli_args_init(&a, "detokenize", argc, argv);
    const char *path = NULL;
    int skip = 0, jsonl = 0;
    while (cli_args_next(&a)) {
        if (cli_is(&a, "--help", "-h")) {
            fputs(DETOK_USAGE, stdout);
            return CLI_OK;
        } else if (cli_is(&a, "--skip-special", NULL)) {
            skip = 1;
        } else if (cli_is(&a, "--jsonl", NULL)) {
            jsonl = 1;
        } else if (!cli_is_flag(&a) && !path) {
            path = a.arg;
        } else {
            return cli_unknown(&a);
        }
    }
    if (!path)
        return cli_usage_error("detokenize", "missing MODEL.cmf or tokenizer.json (see cmf detokenize --help)");
    cmf_model *m = NULL;
    cmf_tokenizer *own = NULL;
    const cmf_tokenizer *tok = NULL;
    char *in = NULL, **texts = NULL;
    size_t in_len = 0, n_texts = 0, *lens = NULL;
    int rc = load_tokenizer("detokenize", path, &m, &own, &tok);
    if (!rc) rc = read_stdin("detokenize", &in, &in_len);
    /* decode every line first: an error prints nothing on stdout, and the framing depends on the line count */
    size_t pos = 0, ll;
    const char *l;
    for (long line = 1; !rc && next_line(in, in_len, &pos, &l, &ll); line++) {
        int32_t *ids = NULL;
        size_t n = 0;
        char *text = NULL;
        size_t len = 0;
        if ((rc = parse_line(l, ll, line, cmf_tokenizer_vocab_size(tok), &ids, &n))) break;
        cmf_status st = cmf_detokenize_n(tok, ids, n, skip, &text, &len);
        free(ids);
        if (st != CMF_OK) {
            char msg[1024];
            rc = cli_fail("detokenize", "line %ld: %s", line, cli_lib_message("detokenize", st, msg, sizeof msg));
            break;
        }
        char **nt = realloc(texts, (n_texts + 1) * sizeof *nt);
        if (nt) texts = nt;
        size_t *nl = nt ? realloc(lens, (n_texts + 1) * sizeof *nl) : NULL;
        if (nl) lens = nl;
        if (!nt || !nl) {
            free(text);
            rc = cli_fail("detokenize", "out of memory");
            break;
        }
        lens[n_texts] = len;
        texts[n_texts++] = text;
    }
    for (size_t i = 0; !rc && i < n_texts; i++) {
        if (jsonl) {
            print_json_string(texts[i], lens[i]);
            putchar('\n');
        } else {
            fwrite(texts[i], 1, lens[i], stdout);
            if (n_texts > 1) putchar('\n');
        }
    }
    if (fflush(stdout) != 0 && !rc) rc = cli_fail("detokenize", "error writing stdout");
    for (size_t i = 0; i < n_texts; i++) free(texts[i]);
    free(texts);
    free(lens);
    free(in);
    cmf_tokenizer_free(own);
    cmf_model_free(m);
    return rc;
}
