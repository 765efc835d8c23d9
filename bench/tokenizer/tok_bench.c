/* tok_bench.c — encoding speed of cmf's tokenizer (include/cmf.h: cmf_tokenizer_load, cmf_tokenize).
 *
 * Usage: tok_bench TOKENIZER_JSON TEXT_FILE [--runs N] [--lines] [--special] [--dump IDS_FILE]
 *
 * Loads the tokenizer, reads the text file, encodes it once as a warm-up, then N more times (default 5), and
 * prints one line of key=value pairs: the median and best throughput in MB/s (10^6 bytes of input text per second
 * of wall time), the id count, and a hash of the ids (FNV-1a 32 over each id as 4 little-endian bytes; the same
 * hash is computed by hf_bench.mjs so the two sides can be compared).
 *   default  the whole file is one string, encoded by one cmf_tokenize call;
 *   --lines  the file is cut after every '\n' (the newline stays at the end of its line) and every line is
 *            encoded by its own call; the ids of all lines are concatenated (and hashed) in order.
 *   --special  add_special_tokens = true (default false).
 *   --dump   writes the ids of the last run as raw int32 (host order) for a diff.
 * Single-threaded: cmf_tokenize uses the calling thread only. */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cmf.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static char *read_all(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 1 << 20, n = 0;
    char *p = malloc(cap);
    while (p) {
        if (n == cap) {
            char *q = realloc(p, cap *= 2);
            if (!q) {
                free(p);
                p = NULL;
                break;
            }
            p = q;
        }
        size_t r = fread(p + n, 1, cap - n, f);
        if (r == 0) break;
        n += r;
    }
    fclose(f);
    *len = n;
    return p;
}

typedef struct ids {
    int32_t *v;
    size_t n, cap;
} ids;

static int ids_append(ids *a, const int32_t *v, size_t n) {
    if (a->n + n > a->cap) {
        size_t cap = a->cap ? a->cap : 1024;
        while (cap < a->n + n) cap *= 2;
        int32_t *p = realloc(a->v, cap * sizeof *p);
        if (!p) return -1;
        a->v = p, a->cap = cap;
    }
    if (n) memcpy(a->v + a->n, v, n * sizeof *v);
    a->n += n;
    return 0;
}

/* One full encode of the text into *out (cleared first). 0, or -1 with a message printed. */
static int encode_all(const cmf_tokenizer *t, const char *text, size_t len, int lines, int special, ids *out) {
    out->n = 0;
    size_t pos = 0;
    do {
        size_t end = len;
        if (lines) {
            const char *nl = memchr(text + pos, '\n', len - pos);
            end = nl ? (size_t)(nl - text) + 1 : len;
        }
        int32_t *v;
        size_t n;
        cmf_status st = cmf_tokenize(t, text + pos, end - pos, special, &v, &n);
        if (st != CMF_OK) {
            fprintf(stderr, "tok_bench: cmf_tokenize: %s\n", cmf_last_error());
            return -1;
        }
        int fail = ids_append(out, v, n);
        free(v);
        if (fail) {
            fprintf(stderr, "tok_bench: out of memory\n");
            return -1;
        }
        pos = end;
    } while (pos < len);
    return 0;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    const char *tj = NULL, *txt = NULL, *dump = NULL;
    int runs = 5, lines = 0, special = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--runs") && i + 1 < argc) runs = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--lines")) lines = 1;
        else if (!strcmp(argv[i], "--special")) special = 1;
        else if (!strcmp(argv[i], "--dump") && i + 1 < argc) dump = argv[++i];
        else if (!tj) tj = argv[i];
        else if (!txt) txt = argv[i];
        else tj = NULL, txt = NULL, i = argc;
    }
    if (!tj || !txt || runs < 1 || runs > 1000) {
        fprintf(stderr, "usage: tok_bench TOKENIZER_JSON TEXT_FILE [--runs N] [--lines] [--special] [--dump F]\n");
        return 2;
    }
    size_t jlen, tlen;
    char *json = read_all(tj, &jlen), *text = read_all(txt, &tlen);
    if (!json || !text) {
        fprintf(stderr, "tok_bench: cannot read %s\n", !json ? tj : txt);
        return 1;
    }
    cmf_tokenizer *t;
    double t0 = now_s();
    if (cmf_tokenizer_load(json, jlen, &t) != CMF_OK) {
        fprintf(stderr, "tok_bench: %s: %s\n", tj, cmf_last_error());
        return 1;
    }
    double load_s = now_s() - t0;
    free(json);
    ids out = {0};
    if (encode_all(t, text, tlen, lines, special, &out)) return 1; /* warm-up */
    double *mbs = malloc((size_t)runs * sizeof *mbs);
    if (!mbs) return 1;
    for (int r = 0; r < runs; r++) {
        t0 = now_s();
        if (encode_all(t, text, tlen, lines, special, &out)) return 1;
        mbs[r] = (double)tlen / 1e6 / (now_s() - t0);
    }
    qsort(mbs, (size_t)runs, sizeof *mbs, cmp_double);
    double med = runs % 2 ? mbs[runs / 2] : 0.5 * (mbs[runs / 2 - 1] + mbs[runs / 2]);
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < out.n; i++) {
        uint32_t v = (uint32_t)out.v[i];
        for (int b = 0; b < 4; b++) h = (h ^ ((v >> (8 * b)) & 0xFF)) * 16777619u;
    }
    printf("impl=cmf bytes=%zu ids=%zu hash=%08x runs=%d median_mbs=%.3f best_mbs=%.3f load_s=%.3f mode=%s\n", tlen,
           out.n, h, runs, med, mbs[runs - 1], load_s, lines ? "lines" : "whole");
    if (dump) {
        FILE *f = fopen(dump, "wb");
        if (!f || fwrite(out.v, sizeof *out.v, out.n, f) != out.n) fprintf(stderr, "tok_bench: cannot write %s\n", dump);
        if (f) fclose(f);
    }
    free(mbs);
    free(out.v);
    free(text);
    cmf_tokenizer_free(t);
    return 0;
}
