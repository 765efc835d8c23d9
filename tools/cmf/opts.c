/* opts.c — option groups shared by several subcommands: sampling (run, chat) and the per-session model options
 * (run, chat, eval, bench, ppl): --skill, the O(1) far field, the looped-model (Dory) options, and the backend
 * (--gpu / --backend, through CMF_GPU, which cmf_model_load reads). */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "model/model.h"
#include "model/o1.h"
#include "sample/sample.h"

const char *const CLI_SAMPLING_USAGE =
    "sampling:\n"
    "  --temp T                 temperature (default 0.8); 0 = greedy (argmax, ties -> lowest id)\n"
    "  --top-k K                keep the K most probable tokens (default 40; 0 = off)\n"
    "  --top-p P                nucleus: the smallest set with probability >= P (default 0.95; 1 = off)\n"
    "  --min-p P                drop tokens with p < P * p_max (default 0 = off)\n"
    "  --repeat-penalty R       divide positive / multiply negative logits of recent tokens by R (default 1)\n"
    "  --presence-penalty X     subtract X from the logits of recent tokens (default 0)\n"
    "  --frequency-penalty X    subtract X * count from the logits of recent tokens (default 0)\n"
    "  --repeat-last-n N        the window of recent tokens (prompt included) the penalties see (default 64)\n"
    "  --seed S                 PRNG seed (default, or -1: from the clock); the same seed gives the same tokens\n";

#define BACKEND_USAGE_LINES                                                                                   \
    "  --gpu                    run the forward on CUDA device 0 (an error when there is none); = CMF_GPU=1\n"   \
    "  --backend cpu|cuda|cuda:N|auto   where the forward runs (auto: CUDA when usable, else the CPU); sets CMF_GPU\n"

const char *const CLI_BACKEND_USAGE = BACKEND_USAGE_LINES;

const char *const CLI_MODEL_USAGE =
    "model options:\n"
    "  --skill ID|none          use skill ID's tensors in place of the backbone's (CMF_FORMAT.md §3.1, in the\n"
    "                           shared folder's spec/, ../shared/spec/, not in this repository)\n"
    "  --task NAME|off          the task mask to run with (default: the file's Fallback mask, unless CMF_TASK=off)\n"
    "  --o1 all|deepN|i,j,k|off the O(1) far field on these full-attention layers (default: CMF_O1, else the\n"
    "                           file's provenance.o1_attn hint, else off)\n"
    "  --o1-m M, --o1-window W, --o1-sink S, --o1-seal N, --o1-rect agg|fm\n"
    "                           landmarks (32), exact window (128), sinks (4), seal length (32768), rectifier\n"
    "  --loops N                looped models (Dory): recurrent passes per token (default: the config's)\n"
    "  --kv-mode per_loop|last_loop   looped models: KV cache mode (default: the config's)\n"
    "  --gate T | conf:T        looped models: Conf early exit at top probability >= T (decode, 2 loops)\n"
    "  --gate recon | recon:FILE   looped models: Recon early exit with the file's probe (dory_recon.weight,\n"
    "                           arch.dory.recon_bias) or a dory_recon.safetensors probe file (decode, 2 loops)\n"
    BACKEND_USAGE_LINES
    "  --cache-type f16|f32     KV cache element type on the GPU (default f16; f32 follows the CPU closely at\n"
    "                           twice the cache memory, with f32 prefill products for float weights); CPU: f32\n"
    "  --tp N                   tensor parallelism over N ranks (cpu: N rank threads; cuda:k: devices k..k+N-1 over\n"
    "                           NCCL); n_heads and intermediate_size must divide by N; 1 = not split; sets CMF_TP\n";

void cli_sampling_defaults(cli_sampling *s) {
    memset(s, 0, sizeof *s);
    s->sp = cmf_sampler_default_params();
}

int cli_sampling_opt(cli_args *a, cli_sampling *s, int *rc) {
    long l;
    double d;
    cmf_sampler_params *sp = &s->sp;
    if (cli_is(a, "--temp", "--temperature")) {
        if (!(*rc = cli_float(a, 0.0, 1e6, &d))) sp->temperature = (float)d;
    } else if (cli_is(a, "--top-k", NULL)) {
        if (!(*rc = cli_int(a, 0, INT_MAX, &l))) sp->top_k = (int)l;
    } else if (cli_is(a, "--top-p", NULL)) {
        if (!(*rc = cli_float(a, 1e-9, 1.0, &d))) sp->top_p = (float)d;
    } else if (cli_is(a, "--min-p", NULL)) {
        if (!(*rc = cli_float(a, 0.0, 1.0, &d))) sp->min_p = (float)d;
    } else if (cli_is(a, "--repeat-penalty", NULL)) {
        if (!(*rc = cli_float(a, 1e-6, 1e6, &d))) sp->repeat_penalty = (float)d;
    } else if (cli_is(a, "--presence-penalty", NULL)) {
        if (!(*rc = cli_float(a, -1e6, 1e6, &d))) sp->presence_penalty = (float)d;
    } else if (cli_is(a, "--frequency-penalty", NULL)) {
        if (!(*rc = cli_float(a, -1e6, 1e6, &d))) sp->frequency_penalty = (float)d;
    } else if (cli_is(a, "--repeat-last-n", NULL)) {
        if (!(*rc = cli_int(a, 0, 1 << 20, &l))) sp->penalty_last_n = (int)l;
    } else if (cli_is(a, "--seed", NULL)) {
        int random = 0;
        if (!(*rc = cli_seed(a, &sp->seed, &random))) s->seed_given = !random;
    } else {
        return 0;
    }
    return 1;
}

void cli_sampling_finish(cli_sampling *s) {
    if (s->seed_given) return;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    s->sp.seed = (uint64_t)ts.tv_sec * 1000000007ULL ^ (uint64_t)ts.tv_nsec;
}

/* The names cmf_model_load takes for CMF_GPU (model.c choose_backend): cpu, auto, cuda, cuda:N. */
static int backend_name_ok(const char *v) {
    if (!strcmp(v, "cpu") || !strcmp(v, "auto") || !strcmp(v, "cuda")) return 1;
    if (strncmp(v, "cuda:", 5) || !v[5] || strlen(v + 5) > 4) return 0;
    for (const char *p = v + 5; *p; p++)
        if (*p < '0' || *p > '9') return 0;
    return 1;
}

int cli_backend_opt(cli_args *a, int *rc) {
    if (cli_is(a, "--gpu", NULL)) { /* read by cmf_model_load (CMF_GPU), so every subcommand honours it */
        *rc = 0;
        setenv("CMF_GPU", "1", 1);
    } else if (cli_is(a, "--backend", NULL)) {
        const char *v = NULL;
        if ((*rc = cli_value(a, &v))) return 1;
        if (!backend_name_ok(v))
            *rc = cli_usage_error(a->cmd, "invalid value '%s' for --backend (expected cpu, cuda, cuda:N or auto; "
                                          "--gpu is cuda)", v);
        else
            setenv("CMF_GPU", v, 1);
    } else {
        return 0;
    }
    return 1;
}

int cli_cache_type_opt(cli_args *a, int *cache_type, int *rc) {
    if (!cli_is(a, "--cache-type", NULL)) return 0;
    const char *v = NULL;
    if ((*rc = cli_value(a, &v))) return 1;
    if (!strcmp(v, "f16")) *cache_type = CMF_CACHE_F16;
    else if (!strcmp(v, "f32")) *cache_type = CMF_CACHE_F32;
    else *rc = cli_usage_error(a->cmd, "invalid value '%s' for --cache-type (expected f16 or f32)", v);
    return 1;
}

int cli_model_opt(cli_args *a, cli_model_opts *o, int *rc) {
    long l;
    double d;
    cmf_session_params *p = &o->sp;
    if (cli_is(a, "--skill", NULL)) {
        *rc = cli_value(a, &o->skill);
    } else if (cli_is(a, "--task", NULL)) {
        *rc = cli_value(a, &p->task);
    } else if (cli_is(a, "--o1", NULL)) { /* its form now; layer numbers are checked against the model */
        static uint8_t on[CMF_MAX_LAYERS];
        if (!(*rc = cli_value(a, &p->o1)) && cmf_o1_parse_layers(p->o1, CMF_MAX_LAYERS, NULL, on) < 0)
            *rc = cli_usage_error(a->cmd, "invalid value '%s' for --o1 (expected all, deepN, off or a list i,j,k)",
                                  p->o1);
    } else if (cli_is(a, "--o1-m", NULL)) {
        if (!(*rc = cli_int(a, 4, 1 << 16, &l))) p->o1_m = (int)l;
    } else if (cli_is(a, "--o1-window", NULL)) {
        if (!(*rc = cli_int(a, 1, 1 << 24, &l))) p->o1_window = (int)l;
    } else if (cli_is(a, "--o1-sink", NULL)) {
        if (!(*rc = cli_int(a, 0, 1 << 20, &l))) p->o1_sink = (int)l, p->o1_sink_set = 1;
    } else if (cli_is(a, "--o1-seal", NULL)) {
        if (!(*rc = cli_int(a, 1, 1 << 24, &l))) p->o1_seal = (int)l;
    } else if (cli_is(a, "--o1-rect", NULL)) {
        if (!(*rc = cli_value(a, &p->o1_rect)) && strcmp(p->o1_rect, "agg") && strcmp(p->o1_rect, "fm"))
            *rc = cli_usage_error(a->cmd, "invalid value '%s' for --o1-rect (expected agg or fm)", p->o1_rect);
    } else if (cli_is(a, "--loops", NULL)) {
        if (!(*rc = cli_int(a, 1, 16, &l))) p->loops = (int)l;
    } else if (cli_is(a, "--kv-mode", NULL)) {
        if (!(*rc = cli_value(a, &p->dory_kv_mode)) && strcmp(p->dory_kv_mode, "per_loop") &&
            strcmp(p->dory_kv_mode, "last_loop"))
            *rc = cli_usage_error(a->cmd, "invalid value '%s' for --kv-mode (expected per_loop or last_loop)",
                                  p->dory_kv_mode);
    } else if (cli_is(a, "--gate", NULL)) { /* T | conf:T | recon | recon:FILE */
        const char *v = NULL;
        if ((*rc = cli_value(a, &v))) return 1;
        p->gate = 0;
        p->gate_recon = NULL;
        if (!strcmp(v, "recon")) {
            p->gate_recon = "model";
        } else if (!strncmp(v, "recon:", 6) && v[6]) {
            p->gate_recon = v + 6;
        } else {
            const char *t = !strncmp(v, "conf:", 5) ? v + 5 : v;
            char *end = NULL;
            d = *t ? strtod(t, &end) : -1;
            if (!end || *end || !(d >= 0 && d <= 1e6)) {
                *rc = cli_usage_error(a->cmd, "invalid value '%s' for --gate (expected a threshold T in [0, 1000000], "
                                              "conf:T, recon or recon:FILE)", v);
                return 1;
            }
            p->gate = (float)d;
        }
    } else if (cli_backend_opt(a, rc)) {
    } else if (cli_cache_type_opt(a, &o->cache_type, rc)) {
    } else if (cli_is(a, "--tp", NULL)) { /* read by cmf_model_load (CMF_TP, cmf_model_params.tp) */
        if (!(*rc = cli_int(a, 1, 64, &l))) {
            char v[16];
            snprintf(v, sizeof v, "%ld", l);
            setenv("CMF_TP", v, 1);
        }
    } else {
        return 0;
    }
    return 1;
}

int cli_session_new(const char *cmd, cmf_model *m, int n_ctx, const cli_model_opts *o, cmf_session **s) {
    cmf_session_params p = o->sp;
    p.n_ctx = n_ctx;
    /* the runtime reads only CMF_TASK=off (the reference's rule, cmf_masks_choose): say so for any other value */
    const char *task_env = getenv("CMF_TASK");
    if (task_env && *task_env && strcmp(task_env, "off") != 0)
        cli_warn(cmd, "CMF_TASK='%.40s' is ignored: only CMF_TASK=off is read (choose a mask with --task NAME)",
                 task_env);
    cmf_status st = cmf_session_new_ex(m, &p, s);
    if (st == CMF_OK && o->skill && (st = cmf_session_set_skill(*s, o->skill)) != CMF_OK) {
        cmf_session_free(*s);
        *s = NULL;
    }
    if (st != CMF_OK) return cli_lib_error(cmd, st);
    if (cmf_session_task(*s)[0])
        fprintf(stderr, "cmf %s: task mask '%s' active (--task off or CMF_TASK=off for dense)\n", cmd,
                cmf_session_task(*s));
    if (cmf_session_o1_layers(*s) > 0)
        fprintf(stderr, "cmf %s: O(1) far field on %d attention cache(s)\n", cmd, cmf_session_o1_layers(*s));
    return 0;
}

int cli_json_constraint(const char *cmd, const cmf_model *m, cmf_constraint **out) {
    int n_eos = 0;
    const int32_t *eos = cmf_model_eos_ids(m, &n_eos);
    const cmf_tokenizer *tok = cmf_model_tokenizer(m);
    if (!tok || n_eos < 1)
        return cli_fail(cmd, "--json needs the model's tokenizer and an eos id (the file has %s)",
                        tok ? "no eos_token_ids" : "no usable tokenizer");
    cmf_status st = cmf_constraint_new_json(tok, cmf_model_vocab_size(m), eos, n_eos, out);
    return st == CMF_OK ? 0 : cli_lib_error(cmd, st);
}

int cli_json_begin(const char *cmd, const cmf_tokenizer *tok, cmf_sampler *smp, cmf_constraint *json, int in_think,
                   cli_json_wait *w) {
    memset(w, 0, sizeof *w);
    cmf_status st;
    if (!in_think) {
        st = cmf_sampler_set_constraint(smp, json);
        return st == CMF_OK ? 0 : cli_lib_error(cmd, st);
    }
    /* the text as printed (special tokens skipped), which is also the text serve's reasoning parser watches: a
     * </think> that the tokenizer marks special is not seen by either */
    if ((st = cmf_detok_stream_new(tok, 1, &w->ds)) != CMF_OK) return cli_lib_error(cmd, st);
    w->waiting = 1;
    return 0;
}

int cli_json_token(const char *cmd, cmf_sampler *smp, cmf_constraint *json, int32_t id, cli_json_wait *w) {
    if (!w->waiting) return 0;
    char *piece = NULL;
    cmf_status st = cmf_detok_stream_push(w->ds, id, &piece);
    if (st != CMF_OK) return cli_lib_error(cmd, st);
    /* the tag may straddle pieces: search the last 7 bytes of the text before this piece followed by the piece */
    const size_t tl = strlen(w->tail), pl = strlen(piece);
    char *t = malloc(tl + pl + 1);
    if (!t) {
        free(piece);
        return cli_fail(cmd, "out of memory");
    }
    memcpy(t, w->tail, tl);
    memcpy(t + tl, piece, pl + 1);
    free(piece);
    const char *tag = strstr(t, "</think>");
    if (!tag) {
        const size_t n = tl + pl, keep = n < 7 ? n : 7;
        memcpy(w->tail, t + n - keep, keep + 1);
        free(t);
        return 0;
    }
    w->waiting = 0; /* the reply's content: the JSON text, from the bytes after the tag less the whitespace that
                     * follows it (serve's parser drops it from the content too) */
    const char *rest = tag + 8;
    rest += strspn(rest, " \t\r\n");
    int rc = 0;
    if ((st = cmf_sampler_set_constraint(smp, json)) != CMF_OK)
        rc = cli_lib_error(cmd, st);
    else if (*rest && cmf_sampler_constraint_feed(smp, rest, strlen(rest)) != CMF_OK)
        rc = cli_fail(cmd, "--json: the model wrote text after </think> that cannot start a JSON object");
    free(t);
    return rc;
}

void cli_json_wait_end(cli_json_wait *w) {
    cmf_detok_stream_free(w->ds);
    memset(w, 0, sizeof *w);
}
