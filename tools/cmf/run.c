/* run.c — `cmf run model.cmf -p PROMPT`: tokenize, prefill the prompt in one batch, then decode with the sampler
 * (src/sample), streaming text through cmf_detok_stream (only complete UTF-8 is ever written), until an eos id or
 * N tokens. Timing of both phases goes to stderr at the end. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cjson/cJSON.h>

#include "cli.h"
#include "sample/sample.h"
#include "template/template.h"

#define RUN_DEFAULT_CTX_CAP 4096 /* -c default: the trained context, capped here for memory */

static const char *USAGE =
    "usage: cmf run MODEL.cmf (-p PROMPT | -f FILE | --tokens IDS) [options]\n"
    "\n"
    "input:\n"
    "  -p, --prompt TEXT        the prompt, tokenized with the model's tokenizer (its post-processor adds BOS\n"
    "                           when the model wants one)\n"
    "  -f, --file FILE          read the prompt from FILE (verbatim); '-' reads it from stdin\n"
    "  --tokens 1,2,3           start from token ids instead (no tokenizer needed)\n"
    "  --no-bos                 tokenize without the special tokens (no BOS)\n"
    "  --chat                   wrap the prompt as one user message in the model's chat template (ChatML when\n"
    "                           the file has none); the template writes the special tokens, and BOS is added\n"
    "                           only when it did not write it (exactly one BOS, as cmf chat)\n"
    "generation:\n"
    "  -n, --n-predict N        at most N new tokens (default 256; -1: no limit, until the context is\n"
    "                           full); stops earlier at any eos id\n"
    "  --ignore-eos             an eos id does not end generation and its text is not printed (--print-ids\n"
    "                           prints its id), as serve's ignore_eos and llama-cli's --ignore-eos\n"
    "  --json                   JSON mode (OpenAI's response_format json_object): only tokens that continue one\n"
    "                           JSON object are drawn, and an eos id only once it is closed, so generation ends\n"
    "                           there; if -n or the context stops it first, the text is incomplete (a warning);\n"
    "                           with --chat, a template that leaves <think> open gets free reasoning first and\n"
    "                           the JSON object after </think> (as serve)\n"
    "  -c, --ctx-size N         context (KV cache) size; default the model's trained context capped at 4096;\n"
    "                           0: the whole trained context (as llama.cpp); larger than trained is allowed\n"
    "                           with a warning\n"
    "  -t, --threads N          worker threads (default 0: all online CPUs)\n"
    "output:\n"
    "  --print-ids              print the generated ids (one line, comma-separated) instead of text\n"
    "%s%s"
    "\n"
    "Text goes to stdout (followed by a newline); on stderr at the end:\n"
    "  prompt: N tokens, X tok/s | decode: N tokens, Y tok/s\n"
    "Ctrl-C stops generating: the text so far, its newline and the line above are printed as at a normal end,\n"
    "and the exit status is 130; a second Ctrl-C ends the program at once.\n";

typedef struct run_opts {
    const char *model, *prompt, *prompt_file, *tokens;
    long n_predict, n_ctx, n_threads;
    int add_special, print_ids, chat, ignore_eos, json;
    cli_sampling smp;
    cli_model_opts mo;
} run_opts;

static int parse(int argc, char **argv, run_opts *o) {
    cli_args a;
    cli_args_init(&a, "run", argc, argv);
    memset(o, 0, sizeof *o);
    o->n_predict = 256;
    o->n_ctx = -1;
    o->add_special = 1;
    cli_sampling_defaults(&o->smp);
    int rc = 0;
    while (cli_args_next(&a)) {
        if (cli_is(&a, "--help", "-h")) {
            printf(USAGE, CLI_SAMPLING_USAGE, CLI_MODEL_USAGE);
            return -1;
        } else if (cli_is(&a, "--prompt", "-p")) {
            rc = cli_value(&a, &o->prompt);
        } else if (cli_is(&a, "--file", "-f")) {
            rc = cli_value(&a, &o->prompt_file);
        } else if (cli_is(&a, "--tokens", NULL)) {
            rc = cli_value(&a, &o->tokens);
        } else if (cli_is(&a, "--chat", NULL)) {
            o->chat = 1;
        } else if (cli_is(&a, "--ignore-eos", NULL)) {
            o->ignore_eos = 1;
        } else if (cli_is(&a, "--json", NULL)) {
            o->json = 1;
        } else if (cli_is(&a, "--no-bos", NULL)) {
            o->add_special = 0;
        } else if (cli_is(&a, "--n-predict", "-n")) {
            rc = cli_int(&a, -1, INT_MAX, &o->n_predict);
            if (!rc && o->n_predict < 0) o->n_predict = INT_MAX; /* -1: until eos or a full context (llama.cpp) */
        } else if (cli_is(&a, "--ctx-size", "-c")) {
            rc = cli_int(&a, 0, INT_MAX, &o->n_ctx);
        } else if (cli_is(&a, "--threads", "-t")) {
            rc = cli_int(&a, 0, 4096, &o->n_threads);
        } else if (cli_sampling_opt(&a, &o->smp, &rc) || cli_model_opt(&a, &o->mo, &rc)) {
        } else if (cli_is(&a, "--print-ids", NULL)) {
            o->print_ids = 1;
        } else if (!cli_is_flag(&a) && !o->model) {
            o->model = a.arg;
        } else {
            return cli_unknown(&a);
        }
        if (rc) return rc;
    }
    if (!o->model) return cli_usage_error("run", "missing MODEL.cmf (see cmf run --help)");
    int inputs = !!o->prompt + !!o->prompt_file + !!o->tokens;
    if (inputs == 0) return cli_usage_error("run", "missing input: give -p PROMPT, -f FILE or --tokens IDS");
    if (inputs > 1) return cli_usage_error("run", "give only one of -p, -f and --tokens");
    if (o->chat && o->tokens) return cli_usage_error("run", "--chat needs a text prompt (-p or -f), not --tokens");
    cli_sampling_finish(&o->smp);
    return 0;
}

/* The prompt as ids: parsed from --tokens, or tokenized from -p / -f; *in_think: --chat's rendered prompt leaves
 * <think> open (cmf_chat_ends_in_think). */
static int prompt_ids(const run_opts *o, const cmf_model *m, int32_t **ids, size_t *n, int *in_think) {
    *in_think = 0;
    if (o->tokens) return cli_parse_ids("run", "--tokens", o->tokens, ids, n);
    const cmf_tokenizer *tok = cmf_model_tokenizer(m);
    if (!tok) {
        const char *why = cmf_model_tokenizer_error(m);
        if (why && *why) return cli_fail("run", "%s: the tokenizer cannot be used: %s (use --tokens)", o->model, why);
        return cli_fail("run", "%s has no tokenizer (no vocab section): give the prompt as --tokens IDS", o->model);
    }
    char *text = NULL;
    size_t len = 0;
    if (o->prompt_file) { /* -f -: stdin, as llama.cpp's -f and most Unix tools take '-' */
        int rc = cli_read_text("run", strcmp(o->prompt_file, "-") ? o->prompt_file : "/dev/stdin", &text, &len);
        if (rc) return rc;
    }
    const char *src = text ? text : o->prompt;
    size_t src_len = text ? len : strlen(src);
    int add_special = o->add_special;
    char *rendered = NULL;
    int chat_bos = 0;
    if (o->chat) { /* one user message through the chat template; its text carries the special tokens */
        cJSON *msgs = cJSON_CreateArray(), *msg = cJSON_CreateObject();
        int rc = 0;
        if (!msgs || !msg || !cJSON_AddItemToArray(msgs, msg) || !cJSON_AddStringToObject(msg, "role", "user") ||
            !cJSON_AddStringToObject(msg, "content", src)) {
            if (msg && !cJSON_GetArraySize(msgs)) cJSON_Delete(msg);
            rc = cli_fail("run", "out of memory");
        }
        if (!rc) rc = cli_chat_render("run", m, NULL, msgs, -1, &rendered);
        cJSON_Delete(msgs);
        free(text);
        if (rc) return rc;
        text = NULL;
        src = rendered;
        src_len = strlen(rendered);
        *in_think = cmf_chat_ends_in_think(rendered);
        /* exactly one BOS, as `cmf chat` (README): cmf_chat_tokenize; --no-bos: no special tokens at all */
        chat_bos = o->add_special;
        add_special = 0;
    }
    cmf_status st = chat_bos ? cmf_chat_tokenize(m, src, src_len, ids, n)
                                     : cmf_tokenize(tok, src, src_len, add_special, ids, n);
    free(text);
    free(rendered);
    if (st != CMF_OK && o->prompt_file) { /* name the file the bad text came from (e.g. invalid UTF-8) */
        char msg[512];
        cli_clean_message("run", cmf_last_error(), msg, sizeof msg);
        return cli_fail("run", "%s: %s", o->prompt_file, msg);
    }
    if (st != CMF_OK) return cli_lib_error("run", st);
    if (*n == 0) {
        free(*ids);
        *ids = NULL;
        return cli_fail("run", "the prompt is empty (0 tokens)");
    }
    return 0;
}

/* Writes one generated token to stdout: its text (through the stream) or its id. */
static int emit(const run_opts *o, cmf_detok_stream *ds, int32_t id, int index) {
    if (o->print_ids || !ds) {
        printf("%s%d", index ? "," : "", (int)id);
        return 0;
    }
    char *piece = NULL;
    cmf_status st = cmf_detok_stream_push(ds, id, &piece);
    if (st != CMF_OK) return cli_lib_error("run", st);
    fputs(piece, stdout);
    fflush(stdout);
    free(piece);
    return 0;
}

static int is_eos(const int32_t *eos, int n_eos, int32_t id) {
    for (int i = 0; i < n_eos; i++)
        if (eos[i] == id) return 1;
    return 0;
}

int cmd_run(int argc, char **argv) {
    run_opts o;
    int rc = parse(argc, argv, &o);
    if (rc) return rc < 0 ? CLI_OK : rc;

    cmf_model_params mp = {.n_threads = (int)o.n_threads, .cache_type = o.mo.cache_type};
    cmf_model *m = NULL;
    cmf_session *s = NULL;
    cmf_sampler *smp = NULL;
    cmf_constraint *json = NULL;
    cmf_detok_stream *ds = NULL;
    cli_json_wait jw = {0}; /* --json after an open <think> (cli_json_begin) */
    int32_t *ids = NULL;
    size_t n_ids = 0;
    cmf_status st = cmf_model_load(o.model, &mp, &m);
    if (st != CMF_OK) return cli_lib_error("run", st);

    int in_think = 0;
    if ((rc = prompt_ids(&o, m, &ids, &n_ids, &in_think))) goto done;
    int vocab = cmf_model_vocab_size(m);
    for (size_t i = 0; i < n_ids; i++) {
        if (ids[i] >= vocab) {
            if (o.tokens)
                rc = cli_fail("run", "--tokens: id %d (position %zu) is out of range for a vocabulary of %d",
                              (int)ids[i], i, vocab);
            else
                rc = cli_fail("run", "the tokenizer gave id %d (position %zu), outside the model's vocabulary of %d: "
                                     "the file's tokenizer does not belong to these weights",
                              (int)ids[i], i, vocab);
            goto done;
        }
    }

    /* context: the trained one capped for memory, or -c (warn beyond trained) */
    int n_train = cmf_model_n_ctx_train(m);
    long n_ctx = o.n_ctx;
    if (n_ctx == 0) { /* -c 0: the whole trained context, uncapped (llama.cpp's -c 0) */
        n_ctx = n_train > 0 ? n_train : RUN_DEFAULT_CTX_CAP;
    } else if (n_ctx < 0) {
        n_ctx = n_train > 0 ? n_train : RUN_DEFAULT_CTX_CAP;
        if (n_ctx > RUN_DEFAULT_CTX_CAP) n_ctx = RUN_DEFAULT_CTX_CAP;
    } else if (n_train > 0 && n_ctx > n_train) {
        cli_warn("run", "-c %ld is larger than the trained context %d; output quality may degrade", n_ctx, n_train);
    }
    if ((long)n_ids > n_ctx) {
        rc = cli_fail("run", "the prompt has %zu tokens, more than the context of %ld (see -c)", n_ids, n_ctx);
        goto done;
    }
    /* the KV cache only needs room for the prompt and the new tokens */
    long need = (long)n_ids + o.n_predict;
    if (need < n_ctx) n_ctx = need;

    if ((rc = cli_session_new("run", m, (int)n_ctx, &o.mo, &s)) != 0) goto done;
    if ((st = cmf_sampler_new(vocab, &o.smp.sp, &smp)) != CMF_OK) {
        rc = cli_lib_error("run", st);
        goto done;
    }
    const cmf_tokenizer *tok = cmf_model_tokenizer(m);
    if (!o.print_ids) {
        if (!tok) { /* (--json fails below, saying why) */
            if (!o.json) cli_warn("run", "the model has no tokenizer: printing token ids");
            o.print_ids = 1;
        } else if ((st = cmf_detok_stream_new(tok, 1, &ds)) != CMF_OK ||
                   /* after the prompt's last tokens: the first word keeps its leading space, as in the server */
                   (st = cmf_detok_stream_prime(ds, ids, n_ids)) != CMF_OK) {
            rc = cli_lib_error("run", st);
            goto done;
        }
    }
    for (size_t i = 0; i < n_ids; i++) cmf_sampler_accept(smp, ids[i]);
    int n_eos = 0;
    const int32_t *eos = cmf_model_eos_ids(m, &n_eos);
    if (o.json) { /* after the prompt's tokens (and an open <think> block): every accepted token continues the JSON */
        if ((rc = cli_json_constraint("run", m, &json))) goto done;
        if ((rc = cli_json_begin("run", tok, smp, json, in_think, &jw))) goto done;
    }

    cli_sigint_install(1); /* the first Ctrl-C ends generation as a normal end would; a second one kills */
    double t0 = cli_now();
    if ((st = cmf_session_prefill(s, ids, (int)n_ids, NULL)) != CMF_OK) {
        rc = cli_lib_error("run", st);
        goto done;
    }
    (void)cmf_session_logits(s); /* waits for a device (CUDA keeps them there): the prompt's time is whole */
    double t1 = cli_now();
    int n_gen = 0, ctx_full = 0, interrupted = 0, ended = 0;
    while (n_gen < o.n_predict) {
        if (cli_sigint_pending()) {
            interrupted = 1;
            break;
        }
        int32_t next;
        if ((st = cmf_session_sample(s, smp, &next)) != CMF_OK) {
            rc = cli_lib_error("run", st);
            break;
        }
        if (!o.ignore_eos && is_eos(eos, n_eos, next)) { /* ignored: special text, not shown */
            ended = 1;
            break;
        }
        cmf_sampler_accept(smp, next);
        if (jw.waiting && (rc = cli_json_token("run", smp, json, next, &jw))) break;
        if ((rc = emit(&o, ds, next, n_gen))) break;
        n_gen++;
        if (n_gen >= o.n_predict) break;
        if (json && o.ignore_eos && cmf_sampler_constraint_done(smp)) break; /* only (ignored) eos ids could follow */
        if (cmf_session_pos(s) >= cmf_session_n_ctx(s)) {
            ctx_full = 1; /* reported after the text's final newline */
            break;
        }
        if ((st = cmf_session_decode(s, next)) != CMF_OK) {
            rc = cli_lib_error("run", st);
            break;
        }
    }
    double t2 = cli_now();
    if (!rc && ds && !o.print_ids) { /* a character that never completed: its bytes as HF's lossy decode gives them */
        char *rest = NULL;
        if ((st = cmf_detok_stream_flush(ds, &rest)) != CMF_OK)
            rc = cli_lib_error("run", st);
        else
            fputs(rest, stdout);
        free(rest);
    }
    if (n_gen > 0 || o.print_ids) putchar('\n');
    fflush(stdout);
    if (ctx_full)
        cli_warn("run", "the context of %d tokens is full; stopped after %d token%s", cmf_session_n_ctx(s), n_gen,
                 n_gen == 1 ? "" : "s");
    if (json && !rc && jw.waiting)
        cli_warn("run", "--json: generation stopped inside the <think> block, before the JSON object (%s)",
                 interrupted ? "Ctrl-C"
                 : ctx_full  ? "the context is full"
                 : ended     ? "the model ended its reply"
                             : "-n reached");
    else if (json && !rc && !cmf_sampler_constraint_done(smp))
        cli_warn("run", "--json: generation stopped before the JSON object was closed (%s); the text is incomplete",
                 interrupted ? "Ctrl-C" : ctx_full ? "the context is full" : "-n reached");
    if (!rc) {
        double tp = t1 - t0, td = t2 - t1;
        fprintf(stderr, "prompt: %zu token%s, %.1f tok/s | decode: %d token%s, %.1f tok/s\n", n_ids,
                n_ids == 1 ? "" : "s", tp > 0 ? (double)n_ids / tp : 0.0, n_gen, n_gen == 1 ? "" : "s",
                td > 0 ? n_gen / td : 0.0);
        long gated = 0;
        double share = cmf_session_gate_one_pass_share(s, &gated);
        if (gated > 0) fprintf(stderr, "early exit: %.1f%% of %ld gated tokens took one pass\n", 100 * share, gated);
        if (interrupted) rc = CLI_INTERRUPTED;
    }

done:
    cmf_detok_stream_free(ds);
    cmf_sampler_free(smp);
    cli_json_wait_end(&jw);
    cmf_constraint_free(json);
    cmf_session_free(s);
    cmf_model_free(m);
    free(ids);
    return rc;
}
