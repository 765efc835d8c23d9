/* serve.c — `cmf serve MODEL.cmf`: an OpenAI-compatible HTTP server (src/server) with continuous batching.
 * Prints one line "cmf serve: listening on http://HOST:PORT ..." on stdout once it accepts connections, then runs
 * until SIGINT / SIGTERM (both handled by sigwait on the main thread, so the shutdown is orderly). */
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "server/server.h"
#include "template/template.h"

int cmd_serve(int argc, char **argv);

static const char *USAGE =
    "usage: cmf serve MODEL.cmf [options]\n"
    "\n"
    "An OpenAI-compatible server: POST /v1/chat/completions, /v1/completions (stream with SSE), GET /v1/models,\n"
    "GET /v1/models/{id}, GET /health, GET /metrics (Prometheus), POST /tokenize, /detokenize, /apply-template,\n"
    "llama-server's own POST /completion (its JSON and stream; its sampling defaults: temperature 0.8, top_k 40,\n"
    "top_p 0.95, min_p 0.05) and GET /props, and a chat page at GET / (open http://HOST:PORT/ in a browser).\n"
    "Sampling defaults of a request are OpenAI's: temperature 1, top_p 1, no top_k, min_p 0 (not cmf run's\n"
    "--temp 0.8 --top-k 40 --top-p 0.95); set them in the request for the same text as cmf run --seed S.\n"
    "Request fields: OpenAI's (model, messages / prompt, max_tokens, max_completion_tokens, temperature, top_p,\n"
    "seed, stop, stream, stream_options, presence_penalty, frequency_penalty, n = 1, tools, tool_choice, ...), plus\n"
    "top_k, min_p, repetition_penalty, chat_template_kwargs, add_generation_prompt and llama-server's n_predict\n"
    "(= max_tokens; -1: until the context is full), repeat_penalty (= repetition_penalty), repeat_last_n (the\n"
    "penalty window over generated tokens; 0: off, -1: the context), ignore_eos, cache_prompt, id_slot -1,\n"
    "reasoning_format auto / deepseek, and response_format {\"type\": \"json_object\"} (JSON mode: the reply is one\n"
    "JSON object, or a prefix of one when max_tokens cuts it; README.md, \"JSON mode\").\n"
    "Synonyms given with different values are a 400. Sampling or output fields cmf cannot honour are a 400 naming\n"
    "them: logprobs, logit_bias, echo, suffix, grammar, json_schema (also as a response_format), samplers,\n"
    "n_probs > 0, typical_p != 1, mirostat != 0, dynatemp_range != 0, dry_multiplier != 0, xtc_probability != 0,\n"
    "top_n_sigma > 0, ...\n"
    "(README.md, \"cmf serve request fields\", has the whole list); so is any field it does not know, and a key\n"
    "given twice. seed: an integer in [-2^63, 2^64 - 2048] (-1: random; JSON numbers are read as doubles, so\n"
    "beyond 2^53 a seed is rounded, and 2^64 - 1 rounds to 2^64: a 400).\n"
    "A model whose tokenizer has ids past its vocabulary is refused at start (exit 1).\n"
    "\n"
    "  --host ADDR        address to bind (default 127.0.0.1: this machine only)\n"
    "  --port N           TCP port (default 8080; 0 = any free port, printed at start)\n"
    "  --api-key KEY      require \"Authorization: Bearer KEY\" (default: $CMF_API_KEY; none when unset)\n"
    "  --parallel N       requests generated at once (slots, each with its own KV cache; default 1)\n"
    "  -c, --ctx-size N   KV cache positions per slot (default: trained context capped at 4096; 0: the\n"
    "                     whole trained context, as llama-server)\n"
    "  --max-queue Q      requests that may wait for a slot; more get 503 (default 64)\n"
    "  --timeout S        end a request after S seconds, queue wait included (default 0 = never): one that\n"
    "                     is generating returns its text so far, finish_reason \"length\"; else a 504\n"
    "  --idle-timeout S   close a connection silent for S seconds while sending its request or between\n"
    "                     requests (default 60; never while its answer is generated)\n"
    "  --cors ORIGIN      send Access-Control-Allow-Origin: ORIGIN (and answer preflights)\n"
    "  --batch N          tokens per forward pass: decode tokens + a prompt chunk (default 512)\n"
    "  -t, --threads N    worker threads (default 0: all online CPUs)\n"
    "  --tp N             tensor parallelism over N ranks (on the backend chosen below; default: $CMF_TP, else 1)\n"
    "  --cache-type f16|f32   KV cache element type on the GPU (default f16; f32: twice the cache memory); CPU: f32\n"
    "  --chat-template-file F   use the Jinja chat template in F instead of the model's (as llama-server; read and\n"
    "                     parsed at start: a missing, empty or unparsable file exits 1)\n"
    "  -a, --alias NAME   the model id /v1/models reports and requests may name (as llama-server; default: the\n"
    "                     file name without .cmf); another \"model\" in a request is a 404, but for a skill's id\n"
    "  --skill ID|none    the skill of requests that name the model (or none, and of /completion); any request may\n"
    "                     name a skill of the file by its id as \"model\" (as vLLM's LoRA adapters); /v1/models\n"
    "                     lists them. A step runs the slots of one skill; its tensors load on first use\n"
    "backend (default: $CMF_GPU, else the CPU):\n"
    "%s";

int cmd_serve(int argc, char **argv) {
    cli_args a;
    cli_args_init(&a, "serve", argc, argv);
    cmf_server_opts o = cmf_server_default_opts();
    o.api_key = getenv("CMF_API_KEY");
    int key_from_env = o.api_key != NULL, ctx_whole = 0;
    const char *model = NULL;
    long l, threads = 0, tp = 0;
    int cache_type = CMF_CACHE_DEFAULT;
    const char *template_file = NULL, *alias = NULL, *skill = NULL;
    double d;
    int rc = 0;
    while (cli_args_next(&a)) {
        if (cli_is(&a, "--help", "-h")) {
            printf(USAGE, CLI_BACKEND_USAGE);
            return CLI_OK;
        } else if (cli_is(&a, "--host", NULL)) {
            rc = cli_value(&a, &o.host);
        } else if (cli_is(&a, "--port", NULL)) {
            if (!(rc = cli_int(&a, 0, 65535, &l))) o.port = (int)l;
        } else if (cli_is(&a, "--api-key", NULL)) {
            rc = cli_value(&a, &o.api_key);
            key_from_env = 0;
        } else if (cli_is(&a, "--parallel", "-np")) {
            if (!(rc = cli_int(&a, 1, 1024, &l))) o.n_slots = (int)l;
        } else if (cli_is(&a, "--ctx-size", "-c")) {
            if (!(rc = cli_int(&a, 0, INT_MAX, &l))) o.n_ctx = (int)l, ctx_whole = l == 0;
        } else if (cli_is(&a, "--max-queue", NULL)) {
            if (!(rc = cli_int(&a, 1, 1 << 20, &l))) o.max_queue = (int)l;
        } else if (cli_is(&a, "--timeout", NULL)) {
            if (!(rc = cli_float(&a, 0, 1e9, &d))) o.timeout_s = d;
        } else if (cli_is(&a, "--idle-timeout", NULL)) {
            if (!(rc = cli_float(&a, 1, 86400, &d))) o.idle_timeout_s = d;
        } else if (cli_is(&a, "--cors", NULL)) {
            rc = cli_value(&a, &o.cors);
        } else if (cli_is(&a, "--batch", NULL)) {
            if (!(rc = cli_int(&a, 1, 65536, &l))) o.batch_tokens = (int)l;
        } else if (cli_is(&a, "--threads", "-t")) {
            rc = cli_int(&a, 0, 4096, &threads);
        } else if (cli_is(&a, "--tp", NULL)) {
            rc = cli_int(&a, 1, 64, &tp);
        } else if (cli_is(&a, "--chat-template-file", NULL)) {
            rc = cli_value(&a, &template_file);
        } else if (cli_is(&a, "--skill", NULL)) {
            rc = cli_value(&a, &skill);
        } else if (cli_is(&a, "--alias", "-a")) {
            if (!(rc = cli_value(&a, &alias)) && !*alias) return cli_usage_error("serve", "--alias is empty: give a name");
        } else if (cli_backend_opt(&a, &rc) || cli_cache_type_opt(&a, &cache_type, &rc)) {
        } else if (!cli_is_flag(&a) && !model) {
            model = a.arg;
        } else {
            return cli_unknown(&a);
        }
        if (rc) return rc;
    }
    if (!model) return cli_usage_error("serve", "missing MODEL.cmf (see cmf serve --help)");
    if (skill && !*skill) return cli_usage_error("serve", "--skill is empty: give a skill id, or none for the backbone");
    if (o.api_key && !*o.api_key) /* an empty key would silently mean no authentication at all */
        return cli_usage_error("serve", "%s",
                               key_from_env ? "CMF_API_KEY is set but empty: unset it to serve without a key"
                                            : "--api-key is empty: give a key, or leave the option out to serve "
                                              "without one");

    /* the model's id: --alias, else the file name without directory and .cmf */
    const char *base = strrchr(model, '/') ? strrchr(model, '/') + 1 : model;
    char name[256];
    snprintf(name, sizeof name, "%s", alias ? alias : base);
    size_t nl = strlen(name);
    if (!alias && nl > 4 && !strcmp(name + nl - 4, ".cmf")) name[nl - 4] = 0;
    o.model_name = alias ? alias : name;
    o.model_path = model;
    o.skill = skill;

    /* the template file is read and parsed before the model is loaded: a bad file fails at once (exit 1) */
    char *tpl = NULL;
    size_t tpl_len = 0;
    if (template_file) {
        if ((rc = cli_read_template("serve", template_file, &tpl, &tpl_len))) return rc;
        cmf_template *t = NULL;
        cmf_status ts = cmf_template_parse(tpl, tpl_len, &t);
        cmf_template_free(t);
        if (ts != CMF_OK) {
            free(tpl);
            return cli_fail("serve", "%s: the chat template does not parse: %s", template_file, cmf_last_error());
        }
        o.chat_template = tpl;
    }

    cmf_model_params mp = {.n_threads = (int)threads, .tp = (int)tp, .cache_type = cache_type};
    cmf_model *m = NULL;
    cmf_status st = cmf_model_load(model, &mp, &m);
    if (st != CMF_OK) {
        free(tpl);
        return cli_lib_error("serve", st);
    }
    int n_train = cmf_model_n_ctx_train(m);
    if (ctx_whole && n_train > 0) o.n_ctx = n_train; /* -c 0: the whole trained context, uncapped */
    if (o.n_ctx > 0 && n_train > 0 && o.n_ctx > n_train) /* as run / chat */
        cli_warn("serve", "-c %d is larger than the trained context %d; output quality may degrade", o.n_ctx, n_train);

    /* SIGINT/SIGTERM are blocked in every thread and taken by sigwait below; SIGPIPE never kills the server */
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    signal(SIGPIPE, SIG_IGN);

    cmf_server *s = NULL;
    st = cmf_server_start(m, &o, &s);
    free(tpl); /* the server keeps its own copy */
    if (st != CMF_OK) {
        int r = cli_lib_error("serve", st);
        cmf_model_free(m);
        return r;
    }
    const char *host = o.host && *o.host ? o.host : "127.0.0.1";
    int v6 = strchr(host, ':') != NULL; /* an IPv6 literal goes in brackets in a URL (RFC 3986 3.2.2) */
    printf("cmf serve: listening on http://%s%s%s:%d (model %s%s%s, %d slot%s x %d positions%s)\n", v6 ? "[" : "",
           host, v6 ? "]" : "", cmf_server_port(s), o.model_name, skill && strcmp(skill, "none") ? " with skill " : "",
           skill && strcmp(skill, "none") ? skill : "", o.n_slots, o.n_slots == 1 ? "" : "s", cmf_server_n_ctx(s),
           o.api_key && *o.api_key ? ", API key required" : "");
    fflush(stdout);
    int sig = 0;
    sigwait(&set, &sig);
    fprintf(stderr, "cmf serve: %s: shutting down\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
    cmf_server_stop(s);
    cmf_model_free(m);
    return CLI_OK;
}
