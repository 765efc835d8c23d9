/* ppl.c — `cmf ppl model.cmf -f text.txt`: teacher-forced perplexity over fixed windows, the method of llama.cpp's
 * tools/perplexity (perplexity(), its default mode), so the two figures are comparable on the same weights:
 *
 *  1. the whole text is tokenized once with the model's tokenizer, special tokens added as its post-processor
 *     says (a SentencePiece llama tokenizer adds BOS at the start; llama.cpp's common_tokenize(..., add_special)
 *     does the same);
 *  2. it is cut into windows of c tokens starting every `stride` tokens (default stride = c: non-overlapping, as
 *     llama.cpp's chunks); only whole windows are used, at most --max-windows of them;
 *  3. each window is evaluated from an empty KV cache in one prefill with the logits of every position; when the
 *     tokenizer adds BOS, the window's first token is replaced by BOS (llama.cpp does the same per chunk);
 *     with --o1-prefill P (not in llama.cpp) only the window's first P tokens are one prefill and the others are
 *     fed one token at a time, each step's logits kept: a session with the O(1) far field (--o1) seals it at the
 *     first single-token step, so every later position is read out from the far field, as in generation;
 *  4. scored: the second half only — the logits at positions first = c/2 .. c-2 predict tokens c/2+1 .. c-1
 *     (c - 1 - c/2 predictions per window), so every scored token has at least c/2 tokens of context;
 *  5. PPL = exp(mean NLL) over all scored tokens; its standard error is PPL·sqrt(var(NLL)/(N-1)) (the delta method,
 *     as llama.cpp prints "PPL = x +/- y"). NLL_i = -log softmax(logits)_target, computed in double.
 *
 * With --baseline other.cmf the other file is evaluated on the very same token windows and both figures and their
 * ratio are printed. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static const char *USAGE =
    "usage: cmf ppl MODEL.cmf -f TEXT [-c 512] [--stride S] [--max-windows N] [--baseline OTHER.cmf]\n"
    "               [--o1-prefill P] [-t THREADS]\n"
    "\n"
    "Teacher-forced perplexity as llama.cpp's llama-perplexity computes it: the text is tokenized once, cut into\n"
    "windows of c tokens (a new window every S tokens; default S = c, non-overlapping), each window evaluated\n"
    "from an empty KV cache (first token replaced by BOS when the tokenizer adds one), and the second half of\n"
    "each window scored (positions c/2 .. c-2 predict the next token). Prints PPL +/- its standard error.\n"
    "\n"
    "  -f, --file TEXT        the text to score (UTF-8)\n"
    "  -c, --ctx N            window length in tokens (default 512, or the model's trained context when that is\n"
    "                         smaller, as stories260K's 128; >= 4); a larger -c than trained is allowed with a\n"
    "                         warning\n"
    "  --stride S             tokens between window starts (default c)\n"
    "  --max-windows N        use at most N windows (default: all whole windows)\n"
    "  --baseline FILE        also evaluate FILE on the same windows and print the ratio PPL / PPL(baseline)\n"
    "  --o1-prefill P         prefill only each window's first P tokens (1 <= P < c), then feed the rest one token\n"
    "                         at a time: with --o1 the far field seals after P tokens and serves the rest\n"
    "  -t, --threads N        worker threads (default 0: all online CPUs)\n"
    "%s"
    "(without --o1-prefill each window is one prefill, so the O(1) far field, sealed after a prompt, never serves\n"
    "a ppl position; the scored positions are the same with or without it)\n";

/* Running sums of one model's scored predictions. */
typedef struct ppl_acc {
    double nll, nll2;
    long count;
} ppl_acc;

static double acc_ppl(const ppl_acc *a) { return a->count ? exp(a->nll / (double)a->count) : NAN; }

/* Standard error of the perplexity (delta method): ppl * sqrt(var(nll) / (count - 1)). */
static double acc_err(const ppl_acc *a) {
    if (a->count < 2) return NAN;
    double mean = a->nll / (double)a->count, var = a->nll2 / (double)a->count - mean * mean;
    return var > 0 ? acc_ppl(a) * sqrt(var / (double)(a->count - 1)) : 0.0;
}

/* Evaluates one window from an empty cache into logits [c][vocab]: one prefill of all c tokens (prefill = 0 or
 * >= c), or a prefill of the first `prefill` tokens and then single-token steps for positions prefill..c-2 (the
 * logits of position c-1 are never scored, so it is not fed). */
static cmf_status eval_window(cmf_session *s, const int32_t *win, int c, int prefill, float *logits, int vocab) {
    cmf_session_reset(s);
    if (prefill <= 0 || prefill >= c) return cmf_session_prefill(s, win, c, logits);
    cmf_status st = cmf_session_prefill(s, win, prefill, logits);
    for (int i = prefill; i < c - 1 && st == CMF_OK; i++)
        if ((st = cmf_session_decode(s, win[i])) == CMF_OK)
            memcpy(logits + (size_t)i * (size_t)vocab, cmf_session_logits(s), (size_t)vocab * sizeof *logits);
    return st;
}

/* Adds the predictions of one window: rows first..c-2 of logits predict win[first+1..c-1]. */
static void score_window(ppl_acc *a, const float *logits, int vocab, const int32_t *win, int c) {
    for (int i = c / 2; i < c - 1; i++) {
        const float *row = logits + (size_t)i * (size_t)vocab;
        float mx = row[0];
        for (int v = 1; v < vocab; v++)
            if (row[v] > mx) mx = row[v];
        double se = 0;
        for (int v = 0; v < vocab; v++) se += exp((double)row[v] - mx);
        double nll = log(se) - ((double)row[win[i + 1]] - mx);
        a->nll += nll;
        a->nll2 += nll * nll;
        a->count++;
    }
}

typedef struct ppl_model {
    const char *path;
    cmf_model *m;
    cmf_session *s;
    ppl_acc acc;
} ppl_model;

/* Loads the model and a session of *c positions. When -c was not given (c_given 0) a trained context smaller than
 * *c (but >= 4) becomes the window length: the default never asks for positions the model was not trained on. */
static int open_model(ppl_model *pm, const char *path, int threads, long *c_io, int c_given, const cli_model_opts *mo) {
    cmf_model_params mp = {.n_threads = threads, .cache_type = mo->cache_type};
    pm->path = path;
    cmf_status st = cmf_model_load(path, &mp, &pm->m);
    if (st) return cli_lib_error("ppl", st);
    int n_train = cmf_model_n_ctx_train(pm->m); /* llama-perplexity warns the same way and goes on */
    if (!c_given && n_train >= 4 && *c_io > n_train) *c_io = n_train;
    int c = (int)*c_io;
    if (n_train > 0 && c > n_train)
        cli_warn("ppl", "-c %d is larger than the trained context %d of %s; positions past it are out of the "
                 "model's training range", c, n_train, path);
    return cli_session_new("ppl", pm->m, c, mo, &pm->s);
}

int cmd_ppl(int argc, char **argv) {
    cli_args a;
    cli_args_init(&a, "ppl", argc, argv);
    const char *model = NULL, *file = NULL, *baseline = NULL;
    long c = 512, stride = 0, max_windows = 0, threads = 0, o1_prefill = 0;
    int rc = 0, c_given = 0;
    cli_model_opts mo;
    memset(&mo, 0, sizeof mo);
    while (cli_args_next(&a)) {
        if (cli_is(&a, "--help", "-h")) {
            printf(USAGE, CLI_MODEL_USAGE);
            return CLI_OK;
        } else if (cli_model_opt(&a, &mo, &rc)) {
        } else if (cli_is(&a, "--file", "-f")) {
            rc = cli_value(&a, &file);
        } else if (cli_is(&a, "--ctx", "-c")) {
            rc = cli_int(&a, 4, 1 << 20, &c);
            c_given = 1;
        } else if (cli_is(&a, "--stride", NULL)) {
            rc = cli_int(&a, 1, 1 << 20, &stride);
        } else if (cli_is(&a, "--max-windows", NULL)) {
            rc = cli_int(&a, 1, 1L << 30, &max_windows);
        } else if (cli_is(&a, "--baseline", NULL)) {
            rc = cli_value(&a, &baseline);
        } else if (cli_is(&a, "--o1-prefill", NULL)) {
            rc = cli_int(&a, 1, 1 << 20, &o1_prefill);
        } else if (cli_is(&a, "--threads", "-t")) {
            rc = cli_int(&a, 0, 4096, &threads);
        } else if (!cli_is_flag(&a) && !model) {
            model = a.arg;
        } else {
            return cli_unknown(&a);
        }
        if (rc) return rc;
    }
    if (!model) return cli_usage_error("ppl", "missing MODEL.cmf (see cmf ppl --help)");
    if (!file) return cli_usage_error("ppl", "missing -f TEXT");
    if (c_given && o1_prefill >= c)
        return cli_usage_error("ppl", "invalid value '%ld' for --o1-prefill (must be less than the window length -c %ld)",
                               o1_prefill, c);

    ppl_model pm[2];
    memset(pm, 0, sizeof pm);
    int n_models = baseline ? 2 : 1;
    char *text = NULL;
    size_t len = 0, n_tok = 0;
    int32_t *ids = NULL, *win = NULL;
    float *logits = NULL;
    if ((rc = open_model(&pm[0], model, (int)threads, &c, c_given, &mo))) goto done; /* may lower a default c */
    if (!stride) stride = c;
    if (o1_prefill >= c) { /* -c not given: the default 512, or the trained context when smaller */
        rc = cli_usage_error("ppl", "invalid value '%ld' for --o1-prefill (must be less than the window length %ld, "
                             "%s)", o1_prefill, c, c < 512 ? "the model's trained context" : "the default -c");
        goto done;
    }
    if (baseline && (rc = open_model(&pm[1], baseline, (int)threads, &c, 1, &mo))) goto done;
    int vocab = cmf_model_vocab_size(pm[0].m);
    if (baseline && cmf_model_vocab_size(pm[1].m) != vocab) {
        rc = cli_fail("ppl", "%s has a vocabulary of %d, %s of %d: not comparable", baseline,
                      cmf_model_vocab_size(pm[1].m), model, vocab);
        goto done;
    }
    const cmf_tokenizer *tok = cmf_model_tokenizer(pm[0].m);
    if (!tok) {
        const char *why = cmf_model_tokenizer_error(pm[0].m);
        rc = cli_fail("ppl", "%s: no tokenizer%s%s", model, why && *why ? ": " : " (the file has no vocab section)",
                      why && *why ? why : "");
        goto done;
    }
    if ((rc = cli_read_text("ppl", file, &text, &len))) goto done;
    cmf_status st = cmf_tokenize(tok, text, len, 1, &ids, &n_tok);
    if (st) {
        rc = cli_lib_error("ppl", st);
        goto done;
    }
    int32_t bos = cmf_model_bos_id(pm[0].m);
    int add_bos = n_tok > 0 && bos >= 0 && ids[0] == bos; /* the tokenizer adds BOS: so does every window */
    long n_win = n_tok >= (size_t)c ? (long)((n_tok - (size_t)c) / (size_t)stride) + 1 : 0;
    if (max_windows && n_win > max_windows) n_win = max_windows;
    if (n_win < 1) {
        rc = cli_fail("ppl", "%s: %zu token%s, fewer than one window of %ld (use a smaller -c)", file, n_tok,
                      n_tok == 1 ? "" : "s", c);
        goto done;
    }
    for (size_t i = 0; i < n_tok; i++)
        if (ids[i] >= vocab) {
            rc = cli_fail("ppl", "token id %d (position %zu) is out of range for a vocabulary of %d", ids[i], i, vocab);
            goto done;
        }
    logits = malloc((size_t)c * (size_t)vocab * sizeof *logits);
    win = malloc((size_t)c * sizeof *win);
    if (!logits || !win) {
        rc = cli_fail("ppl", "out of memory for %ld x %d logits", c, vocab);
        goto done;
    }
    printf("method: llama.cpp perplexity — %zu tokens, %ld window(s) of %ld tokens every %ld, %s, each from an "
           "empty KV cache; logits at positions %ld..%ld predict tokens %ld..%ld (%ld per window)\n",
           n_tok, n_win, c, stride, add_bos ? "first token of each window = BOS" : "no BOS", c / 2, c - 2, c / 2 + 1, c - 1,
           c - 1 - c / 2);
    if (o1_prefill)
        printf("--o1-prefill %ld: positions 0..%ld of each window are one prefill, %ld..%ld single-token steps\n",
               o1_prefill, o1_prefill - 1, o1_prefill, c - 2);
    double t0 = cli_now();
    for (long w = 0; w < n_win; w++) {
        memcpy(win, ids + (size_t)w * (size_t)stride, (size_t)c * sizeof *win);
        if (add_bos) win[0] = bos;
        for (int k = 0; k < n_models; k++) {
            if ((st = eval_window(pm[k].s, win, (int)c, (int)o1_prefill, logits, vocab))) {
                rc = cli_lib_error("ppl", st);
                goto done;
            }
            score_window(&pm[k].acc, logits, vocab, win, (int)c);
        }
        printf("[%ld]%.4f%s", w + 1, acc_ppl(&pm[0].acc), w + 1 == n_win ? "\n" : ",");
        fflush(stdout);
    }
    double dt = cli_now() - t0;
    for (int k = 0; k < n_models; k++)
        printf("%s: PPL = %.4f +/- %.5f  (%ld predictions)\n", pm[k].path, acc_ppl(&pm[k].acc), acc_err(&pm[k].acc),
               pm[k].acc.count);
    if (baseline)
        printf("ratio PPL(%s) / PPL(%s) = %.6f\n", model, baseline, acc_ppl(&pm[0].acc) / acc_ppl(&pm[1].acc));
    for (int k = 0; k < n_models; k++)
        if (!isfinite(acc_ppl(&pm[k].acc))) { /* NaN / inf logits: a broken model, not a score (review: exit 0) */
            rc = cli_fail("ppl", "%s: the perplexity is not finite (the model produced NaN or infinite logits)",
                          pm[k].path);
            goto done;
        }
    fprintf(stderr, "cmf ppl: %.2f s (%.1f tokens/s)\n", dt, (double)(n_win * c * n_models) / (dt > 0 ? dt : 1e-9));

done:
    for (int k = 0; k < 2; k++) {
        cmf_session_free(pm[k].s);
        cmf_model_free(pm[k].m);
    }
    free(logits);
    free(win);
    free(ids);
    free(text);
    return rc;
}
