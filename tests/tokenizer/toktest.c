/* toktest.c — helpers shared by the tokenizer tests (see toktest.h). */
#include "toktest.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "tokenizer/tokenizer.h"
#include "util/fileio.h"

cmf_tokenizer *toktest_load_shared(const char *rel) {
    cmf_tokenizer *t = NULL;
    cmf_status st = cmf_tokenizer_load_file(shared_path(rel), &t);
    CHECK_MSG(st == CMF_OK, "load %s: %s", rel, cmf_last_error());
    return t;
}

size_t toktest_read_vectors(const char *base_rel, toktest_case **cases) {
    char path[1024];
    char *inp, *out;
    size_t ninp, nout;
    *cases = NULL;
    snprintf(path, sizeof path, "%s.inp", base_rel);
    if (cmf_read_file(shared_path(path), &inp, &ninp) != CMF_OK) {
        CHECK_MSG(0, "%s", cmf_last_error());
        return 0;
    }
    snprintf(path, sizeof path, "%s.out", base_rel);
    if (cmf_read_file(shared_path(path), &out, &nout) != CMF_OK) {
        CHECK_MSG(0, "%s", cmf_last_error());
        free(inp);
        return 0;
    }
    /* inputs: split on the separator; the text after the last separator (if any) is one more case */
    const char *sep = "\n__ggml_vocab_test__\n";
    size_t seplen = strlen(sep), cap = 64, n = 0;
    toktest_case *c = calloc(cap, sizeof *c);
    size_t pos = 0;
    while (pos < ninp) {
        char *next = NULL;
        for (size_t i = pos; i + seplen <= ninp; i++)
            if (memcmp(inp + i, sep, seplen) == 0) {
                next = inp + i;
                break;
            }
        size_t end = next ? (size_t)(next - inp) : ninp;
        if (n == cap) c = realloc(c, (cap *= 2) * sizeof *c);
        c[n].len = end - pos;
        c[n].text = malloc(c[n].len + 1);
        memcpy(c[n].text, inp + pos, c[n].len);
        c[n].text[c[n].len] = 0;
        n++;
        if (!next) break;
        pos = end + seplen;
    }
    /* outputs: one line per case */
    size_t line = 0;
    char *p = out;
    while (p < out + nout) {
        char *nl = memchr(p, '\n', (size_t)(out + nout - p));
        char *e = nl ? nl : out + nout;
        if (line < n) {
            size_t cnt = 0, cap2 = 16;
            int32_t *ids = malloc(cap2 * sizeof *ids);
            char *q = p;
            while (q < e) {
                while (q < e && *q == ' ') q++;
                if (q >= e) break;
                char *qe;
                long v = strtol(q, &qe, 10);
                if (qe == q) break;
                if (cnt == cap2) ids = realloc(ids, (cap2 *= 2) * sizeof *ids);
                ids[cnt++] = (int32_t)v;
                q = qe;
            }
            c[line].ids = ids;
            c[line].n = cnt;
        }
        line++;
        p = e + 1;
    }
    CHECK_MSG(line == n, "%s: %zu inputs but %zu output lines", base_rel, n, line);
    free(inp);
    free(out);
    *cases = c;
    return line == n ? n : 0;
}

void toktest_free_vectors(toktest_case *c, size_t n) {
    for (size_t i = 0; i < n; i++) free(c[i].text), free(c[i].ids);
    free(c);
}

static void print_ids(const char *what, const int32_t *ids, size_t n) {
    fprintf(stderr, "  %s:", what);
    for (size_t i = 0; i < n; i++) fprintf(stderr, " %d", ids[i]);
    fprintf(stderr, "\n");
}

int toktest_check_encode(const cmf_tokenizer *t, const char *label, const char *text, size_t len,
                         const int32_t *ids, size_t n, int add_special) {
    int32_t *got = NULL;
    size_t ng = 0;
    cmf_status st = cmf_tokenize(t, text, len, add_special, &got, &ng);
    CHECK_MSG(st == CMF_OK, "%s: tokenize: %s", label, cmf_last_error());
    int ok = st == CMF_OK && ng == n && (n == 0 || memcmp(got, ids, n * sizeof *ids) == 0);
    if (!ok) {
        CHECK_MSG(0, "%s: encode mismatch for '%.*s'", label, (int)len, text);
        print_ids("expected", ids, n);
        print_ids("got     ", got, ng);
    }
    free(got);
    return ok;
}

int toktest_utf8_ok(const char *s, size_t n) {
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0;
    while (i < n) {
        unsigned c = u[i];
        size_t l = c < 0x80 ? 1 : (c >= 0xC2 && c <= 0xDF) ? 2 : (c >= 0xE0 && c <= 0xEF) ? 3 : (c >= 0xF0 && c <= 0xF4) ? 4 : 0;
        if (!l || i + l > n) return 0;
        for (size_t k = 1; k < l; k++)
            if ((u[i + k] & 0xC0) != 0x80) return 0;
        if (l == 3 && ((c == 0xE0 && u[i + 1] < 0xA0) || (c == 0xED && u[i + 1] > 0x9F))) return 0;
        if (l == 4 && ((c == 0xF0 && u[i + 1] < 0x90) || (c == 0xF4 && u[i + 1] > 0x8F))) return 0;
        i += l;
    }
    return 1;
}

static void check_stream_n(const cmf_tokenizer *t, const char *label, const int32_t *ids, size_t n, int skip, int cut);

/* Streams all ids, and all but the last (a cut that may end inside a character: the flush must then give what the
 * lossy full decode gives). */
void toktest_check_stream(const cmf_tokenizer *t, const char *label, const int32_t *ids, size_t n, int skip) {
    check_stream_n(t, label, ids, n, skip, 0);
    if (n > 1) check_stream_n(t, label, ids, n - 1, skip, 1);
}

static void check_stream_n(const cmf_tokenizer *t, const char *label, const int32_t *ids, size_t n, int skip, int cut) {
    char *full = NULL;
    CHECK_MSG(cmf_detokenize(t, ids, n, skip, &full) == CMF_OK, "%s: detokenize: %s", label, cmf_last_error());
    cmf_detok_stream *s = NULL;
    CHECK(cmf_detok_stream_new(t, skip, &s) == CMF_OK);
    size_t cap = 256, len = 0;
    char *acc = malloc(cap);
    acc[0] = 0;
    for (size_t i = 0; s && i < n; i++) {
        char *chunk = NULL;
        cmf_status st = cmf_detok_stream_push(s, ids[i], &chunk);
        CHECK_MSG(st == CMF_OK, "%s: stream push: %s", label, cmf_last_error());
        if (st != CMF_OK) break;
        size_t cl = strlen(chunk);
        CHECK_MSG(toktest_utf8_ok(chunk, cl), "%s: chunk %zu is not valid UTF-8", label, i);
        while (len + cl + 1 > cap) acc = realloc(acc, cap *= 2);
        memcpy(acc + len, chunk, cl + 1);
        len += cl;
        free(chunk);
    }
    char *rest = NULL;
    CHECK_MSG(s && cmf_detok_stream_flush(s, &rest) == CMF_OK, "%s: stream flush: %s", label, cmf_last_error());
    /* byte fallback may turn already-streamed bytes of a broken run into U+FFFD in the full decode (see cmf.h) */
    const int rewrites = cut && full && strncmp(full, acc, len) != 0;
    if (rest) {
        CHECK_MSG(toktest_utf8_ok(rest, strlen(rest)), "%s: flush is not valid UTF-8", label);
        if (rewrites) {
            free(rest);
            rest = NULL;
        }
    }
    if (rest) {
        size_t rl = strlen(rest);
        while (len + rl + 1 > cap) acc = realloc(acc, cap *= 2);
        memcpy(acc + len, rest, rl + 1);
        len += rl;
        free(rest);
    }
    CHECK_MSG(full && (rewrites || strcmp(acc, full) == 0), "%s: streamed '%s' != decoded '%s'", label, acc, full ? full : "(null)");
    free(acc);
    free(full);
    cmf_detok_stream_free(s);
}
