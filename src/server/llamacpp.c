/* llamacpp.c — llama.cpp's llama-server request fields on /v1/completions, /v1/chat/completions and llama-server's
 * own /completion (native.c answers it; and the field check of /apply-template). Source: llama.cpp tools/server/README.md, "POST /completion" options, which
 * llama-server also takes on its OpenAI-compatible routes ("llama.cpp /completion-specific features such as
 * mirostat are supported").
 *
 * Accepted with llama-server's meaning (request.c applies them, next to their OpenAI synonyms):
 *   n_predict       the most tokens to generate (= max_tokens); -1: until the context is full or an end token
 *   repeat_penalty  = repetition_penalty
 *   repeat_last_n   how many of the last accepted tokens the penalties look at; 0: penalties off; -1: the context
 *   ignore_eos      end-of-generation ids do not end the request (see srv_llama below)
 *   cache_prompt    a boolean, either value: cmf always reuses a slot's longest cached prefix
 *   id_slot         -1 (any idle slot) only
 * Accepted while they ask for nothing (llama-server's "disabled" values), else a 400 naming the field, because cmf
 * has no such sampler or output and ignoring them would change what was asked for: typical_p 1, mirostat 0,
 * dynatemp_range 0, dry_multiplier 0, xtc_probability 0, top_n_sigma <= 0, n_probs 0, min_keep 0 or 1, n_indent 0,
 * n_cmpl 1, t_max_predict_ms 0, grammar "" (or null), return_tokens / timings_per_token / return_progress /
 * post_sampling_probs false, lora []. Parameters of those samplers that do nothing while the sampler is off are
 * accepted with any value of their type: mirostat_tau, mirostat_eta, dynatemp_exponent, dry_base,
 * dry_allowed_length, dry_penalty_last_n, dry_sequence_breakers, xtc_threshold; so are n_keep, n_discard (they
 * act only when llama-server shifts the context, which cmf never does: it ends the request at the full context,
 * as llama-server without --context-shift) and n_cache_reuse (KV shifting for cache reuse: the same output).
 * Refused whenever present (non-null): json_schema, samplers (cmf's order is fixed: penalties, temperature,
 * top-k, top-p, min-p, as transformers; llama-server's default applies the temperature last), penalty_prompt,
 * response_fields. reasoning_format: "auto" and "deepseek" are what the chat route does (a <think> block becomes
 * reasoning_content); "none" and "deepseek-legacy" are refused there, and all four are accepted on
 * /v1/completions, whose text is raw in llama-server and here. Fields of neither list stay unrecognized (a 400
 * naming them, request.c). */
#include <math.h>
#include <string.h>

#include "server/internal.h"

const char *const SRV_LLAMA_FIELDS[] = {
    "n_predict", "repeat_penalty", "repeat_last_n", "ignore_eos", "cache_prompt", "id_slot", "typical_p",
    "mirostat", "mirostat_tau", "mirostat_eta", "dynatemp_range", "dynatemp_exponent", "dry_multiplier", "dry_base",
    "dry_allowed_length", "dry_penalty_last_n", "dry_sequence_breakers", "xtc_probability", "xtc_threshold",
    "top_n_sigma", "n_probs", "min_keep", "n_indent", "n_keep", "n_discard", "n_cache_reuse", "n_cmpl",
    "t_max_predict_ms", "grammar", "json_schema", "samplers", "penalty_prompt", "return_tokens",
    "timings_per_token", "return_progress", "post_sampling_probs", "response_fields", "lora", "reasoning_format",
    NULL};

/* A number field whose only accepted values are those where `off` says the feature is disabled. */
typedef struct num_rule {
    const char *name;
    int integer;      /* must be an integer */
    double off_lo, off_hi; /* the accepted (disabled) range */
    const char *what; /* why a value outside it is refused */
} num_rule;

static const num_rule NUM_RULES[] = {
    {"typical_p", 0, 1, 1, "locally typical sampling (typical_p != 1) is not supported"},
    {"mirostat", 1, 0, 0, "Mirostat sampling (mirostat != 0) is not supported"},
    {"dynatemp_range", 0, 0, 0, "dynamic temperature (dynatemp_range != 0) is not supported"},
    {"dry_multiplier", 0, 0, 0, "DRY sampling (dry_multiplier != 0) is not supported"},
    {"xtc_probability", 0, 0, 0, "XTC sampling (xtc_probability != 0) is not supported"},
    {"top_n_sigma", 0, -INFINITY, 0, "top-n-sigma sampling (top_n_sigma > 0) is not supported"},
    {"n_probs", 1, 0, 0, "token probabilities (n_probs > 0) are not supported"},
    {"min_keep", 1, 0, 1, "min_keep > 1 is not supported (cmf's samplers keep at least one token)"},
    {"n_indent", 1, 0, 0, "n_indent > 0 (stopping at a less indented line) is not supported"},
    {"n_cmpl", 1, 1, 1, "only n_cmpl = 1 is supported"},
    {"t_max_predict_ms", 0, 0, 0, "a prediction time limit (t_max_predict_ms > 0) is not supported; the server's "
                                  "--timeout bounds whole requests"},
    {"id_slot", 1, -1, -1, "choosing a slot (id_slot other than -1) is not supported: requests take any idle slot "
                           "(cmf reuses the slot with the longest cached prefix)"},
};

/* Parameters of disabled samplers and context-shift settings: any number is accepted. */
static const char *const ANY_NUMBER[] = {"mirostat_tau", "mirostat_eta", "dynatemp_exponent", "dry_base",
                                         "dry_allowed_length", "dry_penalty_last_n", "xtc_threshold", "n_keep",
                                         "n_discard", "n_cache_reuse", NULL};

/* Output extras cmf does not produce: false (or null) only. */
static const char *const FALSE_ONLY[] = {"return_tokens", "timings_per_token", "return_progress",
                                         "post_sampling_probs", NULL};

/* Refused whenever present and not null. */
static const struct {
    const char *name, *what;
} REFUSED[] = {
    {"json_schema", "JSON-schema constrained sampling (json_schema) is not supported"},
    {"samplers", "a sampler order (samplers) is not supported: cmf applies penalties, temperature, top_k, top_p, "
                 "min_p in that fixed order"},
    {"penalty_prompt", "penalty_prompt is not supported"},
    {"response_fields", "response_fields is not supported"},
};

static int present(const cJSON *v) { return v && !cJSON_IsNull(v); }

int srv_llama_refused(const cJSON *j, srv_reply *err) {
    for (size_t i = 0; i < sizeof NUM_RULES / sizeof NUM_RULES[0]; i++) {
        const num_rule *u = &NUM_RULES[i];
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, u->name);
        if (!present(v)) continue;
        if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble) ||
            (u->integer && v->valuedouble != floor(v->valuedouble))) {
            *err = srv_reply_err(400, u->name, "'%s' must be %s", u->name, u->integer ? "an integer" : "a number");
            return -1;
        }
        if (v->valuedouble < u->off_lo || v->valuedouble > u->off_hi) {
            *err = srv_reply_err(400, u->name, "%s", u->what);
            return -1;
        }
    }
    for (int i = 0; ANY_NUMBER[i]; i++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, ANY_NUMBER[i]);
        if (present(v) && (!cJSON_IsNumber(v) || !isfinite(v->valuedouble))) {
            *err = srv_reply_err(400, ANY_NUMBER[i], "'%s' must be a number", ANY_NUMBER[i]);
            return -1;
        }
    }
    for (int i = 0; FALSE_ONLY[i]; i++) {
        int on = 0;
        if (srv_bool_field(j, FALSE_ONLY[i], &on, err)) return -1;
        if (on) {
            *err = srv_reply_err(400, FALSE_ONLY[i], "%s: true is not supported (this server does not send it)",
                                 FALSE_ONLY[i]);
            return -1;
        }
    }
    int cache = 1;
    if (srv_bool_field(j, "cache_prompt", &cache, err)) return -1;
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, "dry_sequence_breakers");
    if (present(v)) {
        int ok = cJSON_IsArray(v);
        for (const cJSON *e = ok ? v->child : NULL; e && ok; e = e->next) ok = cJSON_IsString(e);
        if (!ok) {
            *err = srv_reply_err(400, "dry_sequence_breakers", "'dry_sequence_breakers' must be an array of strings");
            return -1;
        }
    }
    v = cJSON_GetObjectItemCaseSensitive(j, "grammar");
    if (present(v) && !(cJSON_IsString(v) && !*v->valuestring)) {
        *err = srv_reply_err(400, "grammar", "grammar-constrained sampling (grammar) is not supported");
        return -1;
    }
    v = cJSON_GetObjectItemCaseSensitive(j, "lora");
    if (present(v) && !(cJSON_IsArray(v) && !v->child)) {
        *err = srv_reply_err(400, "lora", "LoRA adapters (lora) are not supported; a skill of the file (CMF's "
                                                 "per-task weights) is chosen by naming its id as \"model\"");
        return -1;
    }
    for (size_t i = 0; i < sizeof REFUSED / sizeof REFUSED[0]; i++)
        if (present(cJSON_GetObjectItemCaseSensitive(j, REFUSED[i].name))) {
            *err = srv_reply_err(400, REFUSED[i].name, "%s", REFUSED[i].what);
            return -1;
        }
    return 0;
}

int srv_llama_fields(const cJSON *j, int chat, srv_llama *out, srv_reply *err) {
    memset(out, 0, sizeof *out);
    const cJSON *rf = cJSON_GetObjectItemCaseSensitive(j, "reasoning_format");
    if (present(rf)) {
        static const char *const kinds[] = {"auto", "deepseek", "none", "deepseek-legacy"};
        int k = -1;
        for (int i = 0; i < 4 && cJSON_IsString(rf); i++)
            if (!strcmp(rf->valuestring, kinds[i])) k = i;
        if (k < 0) {
            *err = srv_reply_err(400, "reasoning_format", "'reasoning_format' must be \"auto\", \"deepseek\", "
                                                          "\"none\" or \"deepseek-legacy\"");
            return -1;
        }
        if (chat && k >= 2) { /* the completions route returns the raw text anyway */
            *err = srv_reply_err(400, "reasoning_format", "reasoning_format \"%s\" is not supported: a chat reply's "
                                 "<think> text is always returned as reasoning_content (\"deepseek\", \"auto\")",
                                 kinds[k]);
            return -1;
        }
    }
    out->n_predict = out->repeat_last_n = -2;
    out->repeat_penalty = NAN;
    if (srv_int_field(j, "n_predict", -1, 1e9, &out->n_predict, err)) return -1;
    if (out->n_predict == 0) {
        *err = srv_reply_err(400, "n_predict", "n_predict = 0 (evaluating the prompt only) is not supported; give -1 "
                                               "or a positive number");
        return -1;
    }
    if (srv_int_field(j, "repeat_last_n", -1, 1e9, &out->repeat_last_n, err)) return -1;
    double d = NAN;
    if (srv_num_field(j, "repeat_penalty", 1e-3, 100, &d, err)) return -1;
    out->repeat_penalty = d;
    return srv_bool_field(j, "ignore_eos", &out->ignore_eos, err);
}
