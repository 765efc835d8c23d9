/* json_mask — the cost of JSON mode's pieces on a real vocabulary (not a test): building the token table
 * (cmf_constraint_new_json), one fit check (the common case: the first draw fits), and the masked redraw
 * (cmf_sampler_sample_masked: the row with every token that does not fit at -inf, then a greedy draw) in two states,
 * inside a string and right after '{'. Median of R repetitions, one thread.
 * Usage: json_mask TOKENIZER.json EOS_ID [R]   (e.g. ../shared/data/tokenizers/qwen3/tokenizer.json 151645) */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cmf.h"
#include "sample/sample.h"
#include "tokenizer/tokenizer.h"

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int cmp_d(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Median ms of r masked greedy draws after the tokens of `text` were accepted. */
static double masked_ms(cmf_sampler *s, const cmf_constraint *c, const cmf_tokenizer *t, const char *text,
                        const float *row, int r) {
    int32_t *ids = NULL, tok;
    size_t n = 0;
    double *ms = malloc((size_t)r * sizeof *ms);
    cmf_sampler_set_constraint(s, c);
    if (!ms || cmf_tokenize(t, text, strlen(text), 0, &ids, &n) != CMF_OK) exit(1);
    for (size_t i = 0; i < n; i++) cmf_sampler_accept(s, ids[i]);
    for (int k = 0; k < r; k++) {
        const double t0 = now();
        if (cmf_sampler_sample_masked(s, row, &tok) != CMF_OK) {
            fprintf(stderr, "json_mask: %s\n", cmf_last_error());
            exit(1);
        }
        ms[k] = (now() - t0) * 1e3;
    }
    qsort(ms, (size_t)r, sizeof *ms, cmp_d);
    const double med = ms[r / 2];
    free(ms);
    free(ids);
    return med;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: json_mask TOKENIZER.json EOS_ID [R]\n");
        return 2;
    }
    const int r = argc > 3 ? atoi(argv[3]) : 31;
    const int32_t eos = (int32_t)atoi(argv[2]);
    cmf_tokenizer *t = NULL;
    if (cmf_tokenizer_load_file(argv[1], &t) != CMF_OK || r < 1) {
        fprintf(stderr, "json_mask: %s\n", cmf_last_error());
        return 1;
    }
    const int V = cmf_tokenizer_vocab_size(t);
    cmf_constraint *c = NULL;
    double t0 = now();
    if (cmf_constraint_new_json(t, V, &eos, 1, &c) != CMF_OK) {
        fprintf(stderr, "json_mask: %s\n", cmf_last_error());
        return 1;
    }
    const double build = now() - t0;
    cmf_sampler_params p = cmf_sampler_default_params();
    p.temperature = 0.0f;
    cmf_sampler *s = NULL;
    float *row = malloc((size_t)V * sizeof *row);
    if (!row || cmf_sampler_new(V, &p, &s) != CMF_OK) return 1;
    for (int v = 0; v < V; v++) row[v] = (float)(v % 97) * 0.1f;
    cmf_json_fsm f;
    cmf_json_fsm_init(&f);
    t0 = now();
    int fits = 0;
    for (int v = 0; v < V; v++) fits += cmf_constraint_fits(c, &f, v);
    const double check_ns = (now() - t0) * 1e9 / V;
    printf("vocab %d: table %.1f ms; one fit check %.0f ns (at the start: %d ids fit)\n", V, build * 1e3, check_ns, fits);
    printf("masked redraw inside a string: %.2f ms\n", masked_ms(s, c, t, "{\"a\": \"once upon", row, r));
    cmf_sampler_reset(s);
    printf("masked redraw after '{':       %.2f ms\n", masked_ms(s, c, t, "{", row, r));
    cmf_sampler_free(s);
    cmf_constraint_free(c);
    cmf_tokenizer_free(t);
    free(row);
    return 0;
}
