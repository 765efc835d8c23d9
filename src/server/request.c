/* request.c — parsing of request bodies (split out of api.c, 2026-11-30): the body as one JSON object, the field
 * readers, the generation routes' fields (OpenAI's Chat Completions / Completions arguments and the vLLM / llama.cpp
 * extensions), prompts and chat rendering, tool_choice, and the check that every field is known. Errors are
 * srv_reply_err 400s naming the field (OpenAI's error object, api.c). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "format/format.h"
#include "server/internal.h"
#include "template/template.h"
#include "util/jsontext.h"

static int cmp_key(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* A key that object o repeats (the first in strcmp order), or NULL; *nomem is set when the scratch array fails.
 * cJSON keeps every member of an object, and its lookup returns the first, where Python's json, JS's JSON.parse and
 * llama-server (nlohmann::json) keep the last one: a repeated key is refused rather than read either way. */
static const char *repeated_key(const cJSON *o, int *nomem) {
    size_t n = 0, i = 0;
    for (const cJSON *e = o->child; e; e = e->next) n++;
    if (n < 2) return NULL;
    const char **keys = malloc(n * sizeof *keys);
    if (!keys) {
        *nomem = 1;
        return NULL;
    }
    for (const cJSON *e = o->child; e; e = e->next) keys[i++] = e->string ? e->string : "";
    qsort(keys, n, sizeof *keys, cmp_key);
    const char *dup = NULL;
    for (i = 1; i < n && !dup; i++)
        if (!strcmp(keys[i - 1], keys[i])) dup = keys[i];
    free(keys);
    return dup;
}

/* The body object j repeats no key at its top level, nor inside an object of its messages[] or tools[] arrays (or
 * a tool's "function" object); else -1 with a 400 naming the key. */
static int check_repeated_keys(const cJSON *j, srv_reply *err) {
    int nomem = 0;
    const char *dup = repeated_key(j, &nomem);
    if (dup) {
        *err = srv_reply_err(400, dup, "the request body repeats the key '%.200s' (give each field once)", dup);
        return -1;
    }
    static const char *const arrays[] = {"messages", "tools"};
    for (size_t a = 0; a < 2 && !nomem; a++) {
        const cJSON *arr = cJSON_GetObjectItemCaseSensitive(j, arrays[a]);
        int i = 0;
        for (const cJSON *e = cJSON_IsArray(arr) ? arr->child : NULL; e && !nomem; e = e->next, i++) {
            if (!cJSON_IsObject(e)) continue;
            const cJSON *fn = a == 1 ? cJSON_GetObjectItemCaseSensitive(e, "function") : NULL;
            const char *in = "";
            if (!(dup = repeated_key(e, &nomem)) && cJSON_IsObject(fn) && (dup = repeated_key(fn, &nomem)))
                in = ".function";
            if (dup) {
                char param[300];
                snprintf(param, sizeof param, "%s[%d]%s.%.200s", arrays[a], i, in, dup);
                *err = srv_reply_err(400, param, "'%s[%d]%s' repeats the key '%.200s' (give each field once)",
                                     arrays[a], i, in, dup);
                return -1;
            }
        }
    }
    if (nomem) {
        *err = srv_reply_err(500, NULL, "out of memory");
        return -1;
    }
    return 0;
}

cJSON *srv_parse_body(const char *body, size_t len, srv_reply *err) {
    size_t bad = cmf_utf8_invalid_at((const uint8_t *)body, len);
    if (bad < len) {
        *err = srv_reply_err(400, NULL, "the request body is not valid UTF-8 (byte offset %zu)", bad);
        return NULL;
    }
    const char *end = NULL;
    cJSON *j = len ? cJSON_ParseWithLengthOpts(body, len, &end, 0) : NULL;
    while (j && end && (size_t)(end - body) < len && strchr(" \t\r\n", *end) && *end) end++;
    if (j && end && (size_t)(end - body) < len) { /* a complete value followed by more text */
        cJSON_Delete(j);
        *err = srv_reply_err(400, NULL, "the request body has text after the JSON object (byte offset %zu)",
                         (size_t)(end - body));
        return NULL;
    }
    if (!j && len && end && end >= body && (size_t)(end - body) < len) { /* cJSON's end: where parsing stopped */
        const size_t at = (size_t)(end - body);
        if (len - at >= 6 && end[0] == '\\' && (end[1] == 'u' || end[1] == 'U') && (end[2] == 'd' || end[2] == 'D') &&
            strchr("89abcdefABCDEF", end[3]) && end[3])
            *err = srv_reply_err(400, NULL, "the request body has a lone UTF-16 surrogate escape %.6s at byte offset %zu "
                             "(not valid Unicode)", end, at);
        else
            *err = srv_reply_err(400, NULL, "the request body must be a JSON object (malformed JSON at byte offset %zu)",
                             at);
        return NULL;
    }
    if (!cJSON_IsObject(j)) {
        const char *what = !len ? "empty" : cJSON_IsArray(j) ? "got an array" : "got a JSON value that is not an object";
        cJSON_Delete(j);
        *err = srv_reply_err(400, NULL, "the request body must be a JSON object (%s)", what);
        return NULL;
    }
    size_t nul = cmf_json_nul_escape_at(body, len);
    if (nul < len) {
        cJSON_Delete(j);
        *err = srv_reply_err(400, NULL, "the request body has a string with an escaped NUL character (\\u0000 at byte "
                                    "offset %zu), which this server cannot represent", nul);
        return NULL;
    }
    if (check_repeated_keys(j, err)) {
        cJSON_Delete(j);
        return NULL;
    }
    return j;
}

/* ---- field readers: absent or null leaves *out unchanged; a wrong type or range is a 400 naming the field ---- */
int srv_num_field(const cJSON *j, const char *name, double lo, double hi, double *out, srv_reply *err) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, name);
    if (!v || cJSON_IsNull(v)) return 0;
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble) || v->valuedouble < lo || v->valuedouble > hi) {
        *err = srv_reply_err(400, name, "'%s' must be a number in [%g, %g]", name, lo, hi);
        return -1;
    }
    *out = v->valuedouble;
    return 0;
}

int srv_int_field(const cJSON *j, const char *name, double lo, double hi, long long *out, srv_reply *err) {
    double d = 0;
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, name);
    if (!v || cJSON_IsNull(v)) return 0;
    if (srv_num_field(j, name, lo, hi, &d, err)) return -1;
    if (d != floor(d)) {
        *err = srv_reply_err(400, name, "'%s' must be an integer", name);
        return -1;
    }
    *out = (long long)d;
    return 0;
}

int srv_bool_field(const cJSON *j, const char *name, int *out, srv_reply *err) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, name);
    if (!v || cJSON_IsNull(v)) return 0;
    if (!cJSON_IsBool(v)) {
        *err = srv_reply_err(400, name, "'%s' must be a boolean", name);
        return -1;
    }
    *out = cJSON_IsTrue(v);
    return 0;
}

/* "stop": a string or an array of up to 16 strings; empty strings are ignored. */
static int stop_field(const cJSON *j, srv_req *r, srv_reply *err) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, "stop");
    if (!v || cJSON_IsNull(v)) return 0;
    int n = cJSON_IsString(v) ? 1 : cJSON_IsArray(v) ? cJSON_GetArraySize(v) : -1;
    if (n < 0 || n > 16) {
        *err = srv_reply_err(400, "stop", "'stop' must be a string or an array of at most 16 strings");
        return -1;
    }
    r->stops = calloc((size_t)n + 1, sizeof *r->stops);
    if (!r->stops) goto nomem;
    for (int i = 0; i < n; i++) {
        const cJSON *e = cJSON_IsString(v) ? v : cJSON_GetArrayItem(v, i);
        if (!cJSON_IsString(e)) {
            *err = srv_reply_err(400, "stop", "'stop[%d]' must be a string", i);
            return -1;
        }
        if (!*e->valuestring) continue;
        if (!(r->stops[r->n_stops] = strdup(e->valuestring))) goto nomem;
        r->n_stops++;
    }
    return 0;
nomem:
    *err = srv_reply_err(500, NULL, "out of memory");
    return -1;
}

/* Whether field `name` is given (present and not null). */
static int given(const cJSON *j, const char *name) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, name);
    return v && !cJSON_IsNull(v);
}

/* A llama-server field and its OpenAI synonym given with different values. */
static int conflict(srv_reply *err, const char *llama, const char *openai) {
    *err = srv_reply_err(400, llama, "'%s' and '%s' are synonyms but have different values: give one of them",
                         llama, openai);
    return -1;
}

/* Sampling and length fields shared by both generation routes, llama-server's synonyms included (llamacpp.c). */
static int common_fields(cmf_server *s, const cJSON *j, srv_req *r, srv_reply *err) {
    double d;
    long long ll;
    cmf_sampler_params *sp = &r->sp;
    /* OpenAI's defaults: temperature 1, top_p 1 (off), no top-k; llama-server's on its own /completion route */
    *sp = srv_sampling_defaults(r->kind == SRV_NATIVE);
    d = sp->temperature;
    if (srv_num_field(j, "temperature", 0, 100, &d, err)) return -1;
    sp->temperature = (float)d;
    d = sp->top_p;
    if (srv_num_field(j, "top_p", 1e-9, 1, &d, err)) return -1;
    sp->top_p = (float)d;
    ll = sp->top_k;
    if (srv_int_field(j, "top_k", -1, 1e9, &ll, err)) return -1;
    sp->top_k = ll < 0 ? 0 : (int)ll; /* -1: off (vLLM) */
    d = sp->min_p;
    if (srv_num_field(j, "min_p", 0, 1, &d, err)) return -1;
    sp->min_p = (float)d;
    d = 0;
    if (srv_num_field(j, "presence_penalty", -2, 2, &d, err)) return -1;
    sp->presence_penalty = (float)d;
    d = 0;
    if (srv_num_field(j, "frequency_penalty", -2, 2, &d, err)) return -1;
    sp->frequency_penalty = (float)d;
    d = 1;
    if (srv_num_field(j, "repetition_penalty", 1e-3, 100, &d, err)) return -1;
    srv_llama ll_f;
    if (srv_llama_fields(j, r->kind == SRV_CHAT, &ll_f, err)) return -1;
    if (!isnan(ll_f.repeat_penalty)) { /* llama-server's name for it */
        if (given(j, "repetition_penalty") && d != ll_f.repeat_penalty)
            return conflict(err, "repeat_penalty", "repetition_penalty");
        d = ll_f.repeat_penalty;
    }
    sp->repeat_penalty = (float)d;
    static atomic_ulong counter;
    sp->seed = (uint64_t)time(NULL) * 0x9E3779B97F4A7C15ULL ^ (uint64_t)atomic_fetch_add(&counter, 1);
    /* "seed": an int64 in OpenAI's API reference (-2^63 .. 2^63 - 1, negative seeds valid; vLLM takes the same
     * range), an unsigned 64-bit number for cmf run / cmf bench --seed. Accepted here: an integer in [-2^63, 2^64).
     * -1 asks for a random seed, as in llama-server (its default seed) and cmf run --seed -1; another negative seed s
     * draws as the unsigned seed 2^64 + s (its two's complement bits: "seed": -5 gives the tokens of cmf run --seed
     * -5). The JSON number passes through a double (cJSON keeps no text), so a seed beyond 2^53 in magnitude is
     * rounded to the nearest double first (IEEE 754 round-to-nearest-even, as strtod): the largest seed that can be
     * sent is 2^64 - 2048 = 18446744073709549568, and 2^64 - 1024 .. 2^64 - 1 round to 2^64 and are refused. */
    const cJSON *seed = cJSON_GetObjectItemCaseSensitive(j, "seed");
    if (seed && !cJSON_IsNull(seed)) {
        const double v = cJSON_IsNumber(seed) ? seed->valuedouble : NAN;
        if (!(v >= -0x1p63 && v < 0x1p64) || v != floor(v)) { /* NaN fails both */
            *err = srv_reply_err(400, "seed", "'seed' must be an integer in [-2^63, 2^64 - 2048] (-1: a random seed; "
                                          "JSON numbers are read as doubles, so beyond 2^53 they are rounded: "
                                          "18446744073709551615 = 2^64 - 1 rounds to 2^64, out of range)");
            return -1;
        }
        if (v != -1) sp->seed = v < 0 ? (uint64_t)(int64_t)v : (uint64_t)v;
    }
    ll = 1;
    if (srv_int_field(j, "n", 1, 1e9, &ll, err)) return -1;
    if (ll != 1) {
        *err = srv_reply_err(400, "n", "only n = 1 is supported");
        return -1;
    }
    /* "logprobs": a boolean in Chat Completions, an integer (how many per token) in the legacy Completions; null,
     * false and 0 mean off in both, anything else asks for what this server does not compute */
    const cJSON *lp = cJSON_GetObjectItemCaseSensitive(j, "logprobs");
    if (lp && !cJSON_IsNull(lp) && !cJSON_IsFalse(lp) && !(cJSON_IsNumber(lp) && lp->valuedouble == 0)) {
        *err = srv_reply_err(400, "logprobs", "logprobs is not supported");
        return -1;
    }
    int echo = 0;
    if (srv_bool_field(j, "echo", &echo, err)) return -1;
    if (echo) {
        *err = srv_reply_err(400, "echo", "echo is not supported");
        return -1;
    }
    long long max_tokens = -1;
    if (srv_int_field(j, "max_tokens", 1, 1e9, &max_tokens, err)) return -1;
    if (srv_int_field(j, "max_completion_tokens", 1, 1e9, &max_tokens, err)) return -1;
    if (ll_f.n_predict != -2) { /* llama-server's n_predict: -1 until the context is full (or an end token) */
        static const char *const synonyms[] = {"max_tokens", "max_completion_tokens"};
        for (int i = 0; i < 2; i++)
            if (given(j, synonyms[i]) &&
                cJSON_GetObjectItemCaseSensitive(j, synonyms[i])->valuedouble != (double)ll_f.n_predict)
                return conflict(err, "n_predict", synonyms[i]);
        max_tokens = ll_f.n_predict;
    }
    r->ignore_eos = ll_f.ignore_eos;
    long long room = (long long)s->n_ctx - r->n_prompt;
    r->max_tokens = (int)(max_tokens < 0 || max_tokens > room ? room : max_tokens);
    if (stop_field(j, r, err)) return -1;
    if (srv_bool_field(j, "stream", &r->stream, err)) return -1;
    const cJSON *so = cJSON_GetObjectItemCaseSensitive(j, "stream_options");
    if (so && !cJSON_IsNull(so)) {
        if (!cJSON_IsObject(so)) {
            *err = srv_reply_err(400, "stream_options", "'stream_options' must be an object");
            return -1;
        }
        if (srv_bool_field(so, "include_usage", &r->include_usage, err)) return -1;
        if (!r->stream && r->kind != SRV_NATIVE) { /* OpenAI's (and vLLM's) 400 */
            *err = srv_reply_err(400, "stream_options", "'stream_options' is only allowed when 'stream' is true");
            return -1;
        }
    }
    if (sp->presence_penalty != 0 || sp->frequency_penalty != 0 || sp->repeat_penalty != 1)
        sp->penalty_last_n = r->max_tokens; /* the penalties see the generated tokens (as vLLM's output tokens) */
    if (ll_f.repeat_last_n != -2) /* llama-server's window: the last N generated tokens here, -1 the context */
        sp->penalty_last_n =
            ll_f.repeat_last_n < 0 || ll_f.repeat_last_n > s->n_ctx ? s->n_ctx : (int)ll_f.repeat_last_n;
    return 0;
}

/* ---- prompts --------------------------------------------------------------------------------------------------- */
/* Texts over this many bytes are tokenized one at a time (cmf_server.big_mu): the peak memory of a burst of huge
 * prompts is then one tokenization's, not one per HTTP thread. */
#define SRV_BIG_TEXT (256u << 10)

void srv_big_lock(cmf_server *s, size_t len) {
    if (len > SRV_BIG_TEXT) pthread_mutex_lock(&s->big_mu);
}
void srv_big_unlock(cmf_server *s, size_t len) {
    if (len > SRV_BIG_TEXT) pthread_mutex_unlock(&s->big_mu);
}

/* add_special: 0 none, 1 the post-processor's special tokens, SRV_CHAT_BOS a rendered chat prompt (exactly one
 * BOS, as `cmf chat`: cmf_chat_tokenize). */
#define SRV_CHAT_BOS 2
static int tokenize_text(cmf_server *s, const char *text, int add_special, srv_req *r, srv_reply *err) {
    size_t n = 0, len = strlen(text);
    srv_big_lock(s, len);
    cmf_status st = add_special == SRV_CHAT_BOS ? cmf_chat_tokenize(s->m, text, len, &r->prompt, &n)
                                                : cmf_tokenize(s->tok, text, len, add_special, &r->prompt, &n);
    srv_big_unlock(s, len);
    if (st != CMF_OK) {
        *err = srv_reply_err(400, "prompt", "cannot tokenize the prompt: %s", cmf_last_error());
        return -1;
    }
    r->n_prompt = (int)n;
    return 0;
}

static int completion_prompt(cmf_server *s, const cJSON *j, srv_req *r, srv_reply *err) {
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(j, "prompt");
    if (cJSON_IsArray(p) && cJSON_GetArraySize(p) == 1 &&
        (cJSON_IsString(p->child) || cJSON_IsArray(p->child)))
        p = p->child; /* a batch of one prompt */
    if (cJSON_IsString(p)) return tokenize_text(s, p->valuestring, 1, r, err);
    if (cJSON_IsArray(p) && (cJSON_IsString(p->child) || cJSON_IsArray(p->child))) {
        if (cJSON_GetArraySize(p) == 1) /* [[["a"]]], [[[1]]]: one prompt, nested once too often */
            *err = srv_reply_err(400, "prompt", "'prompt' is nested too deeply: give a string, an array of token ids, "
                             "or an array holding one of those");
        else
            *err = srv_reply_err(400, "prompt", "'prompt' holds a batch of %d prompts; this server takes one prompt per "
                             "request (send each prompt in its own request)", cJSON_GetArraySize(p));
        return -1;
    }
    if (!cJSON_IsArray(p) || cJSON_GetArraySize(p) == 0) {
        *err = srv_reply_err(400, "prompt", "'prompt' must be a string or a non-empty array of token ids");
        return -1;
    }
    int n = cJSON_GetArraySize(p);
    if (!(r->prompt = malloc((size_t)n * sizeof *r->prompt))) {
        *err = srv_reply_err(500, NULL, "out of memory");
        return -1;
    }
    int i = 0;
    for (const cJSON *e = p->child; e; e = e->next, i++) {
        if (!cJSON_IsNumber(e) || e->valuedouble != floor(e->valuedouble) || e->valuedouble < 0 ||
            e->valuedouble >= s->vocab) {
            *err = srv_reply_err(400, "prompt", "'prompt[%d]' is not a token id in [0, %d)", i, s->vocab);
            return -1;
        }
        r->prompt[i] = (int32_t)e->valuedouble;
    }
    r->n_prompt = n;
    return 0;
}

/* Each message must be an object with a string "role"; the content of a user or system message must be a string
 * or an array of content parts (OpenAI); a null content is allowed for assistant messages (the SDKs send it next
 * to tool_calls) and tool messages. A 400 names the first offending field. */
static int check_messages(const cJSON *msgs, srv_reply *err) {
    int i = 0;
    for (const cJSON *e = msgs->child; e; e = e->next, i++) {
        char field[48];
        const cJSON *role = cJSON_GetObjectItemCaseSensitive(e, "role");
        if (!cJSON_IsObject(e) || !cJSON_IsString(role)) {
            snprintf(field, sizeof field, "messages[%d].role", i);
            *err = srv_reply_err(400, field, "'messages[%d].role' must be a string (each message is an object with a role)", i);
            return -1;
        }
        const cJSON *c = cJSON_GetObjectItemCaseSensitive(e, "content");
        int needs_text = !strcmp(role->valuestring, "user") || !strcmp(role->valuestring, "system") ||
                         !strcmp(role->valuestring, "developer");
        if (needs_text && !cJSON_IsString(c) && !cJSON_IsArray(c)) {
            snprintf(field, sizeof field, "messages[%d].content", i);
            *err = srv_reply_err(400, field, "'messages[%d].content' of a %s message must be a string or an array of "
                             "content parts, not %s", i, role->valuestring,
                             !c ? "absent" : cJSON_IsNull(c) ? "null" : cJSON_IsNumber(c) ? "a number"
                             : cJSON_IsBool(c) ? "a boolean" : "an object");
            return -1;
        }
    }
    return 0;
}

/* The messages as the template gets them: an assistant message's null content becomes "" (as llama.cpp and vLLM
 * do: OpenAI SDKs send "content": null with tool_calls, which templates cannot compare with strings). Malloc'd JSON
 * text, NULL when out of memory. */
static char *print_messages(const cJSON *msgs) {
    cJSON *copy = cJSON_Duplicate(msgs, 1);
    if (!copy) return NULL;
    for (cJSON *e = copy->child; e; e = e->next) {
        const cJSON *role = cJSON_GetObjectItemCaseSensitive(e, "role");
        if (cJSON_IsString(role) && !strcmp(role->valuestring, "assistant") &&
            cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(e, "content"))) {
            cJSON *empty = cJSON_CreateString("");
            if (!empty || !cJSON_ReplaceItemInObjectCaseSensitive(e, "content", empty)) {
                cJSON_Delete(empty);
                cJSON_Delete(copy);
                return NULL;
            }
        }
    }
    char *m = cJSON_PrintUnformatted(copy);
    cJSON_Delete(copy);
    return m;
}

/* Renders messages (+ tools, chat_template_kwargs) with the server's chat template (--chat-template-file, else the
 * model's); *text is malloc'd. */
int srv_render_chat(cmf_server *s, const cJSON *j, int with_tools, char **text, srv_reply *err) {
    const cJSON *msgs = cJSON_GetObjectItemCaseSensitive(j, "messages");
    if (!cJSON_IsArray(msgs) || cJSON_GetArraySize(msgs) == 0) {
        *err = srv_reply_err(400, "messages", "'messages' must be a non-empty array");
        return -1;
    }
    const cJSON *tools = cJSON_GetObjectItemCaseSensitive(j, "tools");
    if (tools && !cJSON_IsNull(tools) && !cJSON_IsArray(tools)) {
        *err = srv_reply_err(400, "tools", "'tools' must be an array");
        return -1;
    }
    const cJSON *kw = cJSON_GetObjectItemCaseSensitive(j, "chat_template_kwargs");
    if (kw && !cJSON_IsNull(kw) && !cJSON_IsObject(kw)) {
        *err = srv_reply_err(400, "chat_template_kwargs", "'chat_template_kwargs' must be an object");
        return -1;
    }
    if (check_messages(msgs, err)) return -1;
    cmf_chat_params p = cmf_chat_default_params();
    char *m = print_messages(msgs);
    char *t = with_tools && cJSON_IsArray(tools) && cJSON_GetArraySize(tools) > 0 ? cJSON_PrintUnformatted(tools) : NULL;
    char *x = cJSON_IsObject(kw) ? cJSON_PrintUnformatted(kw) : NULL;
    int agp = 1;
    if (srv_bool_field(j, "add_generation_prompt", &agp, err)) {
        free(m), free(t), free(x);
        return -1;
    }
    p.template_src = s->chat_template; /* NULL: the model's */
    p.messages_json = m;
    p.tools_json = t;
    p.extra_json = x;
    p.add_generation_prompt = agp;
    cmf_status st = m ? cmf_chat_render(s->m, &p, text, NULL) : CMF_E_NOMEM;
    free(m), free(t), free(x);
    if (st != CMF_OK) {
        *err = srv_reply_err(st == CMF_E_NOMEM ? 500 : 400, "messages", "%s",
                         st == CMF_E_NOMEM ? "out of memory" : cmf_last_error());
        return -1;
    }
    return 0;
}

/* "tool_choice": "auto" / absent / null (the model decides), "none" (tools are not shown to the model), "required"
 * or {"type": "function", "function": {"name": N}} (a call is forced). *forced (malloc'd) is set for a forced call:
 * the start of the call's JSON that force_tool_call puts after the prompt: {"name": "N", "arguments":  for a named
 * function or when exactly one tool is offered, else {"name": " so that the model picks the function. */
static int tool_choice_field(const cJSON *j, const cJSON *tools, int *tools_on, char **forced, srv_reply *err) {
    const cJSON *tc = cJSON_GetObjectItemCaseSensitive(j, "tool_choice");
    *forced = NULL;
    if (!tc || cJSON_IsNull(tc)) return 0;
    const char *name = NULL;
    if (cJSON_IsString(tc)) {
        if (!strcmp(tc->valuestring, "none")) {
            *tools_on = 0;
            return 0;
        }
        if (!strcmp(tc->valuestring, "auto")) return 0;
        if (strcmp(tc->valuestring, "required") != 0) {
            *err = srv_reply_err(400, "tool_choice", "'tool_choice' must be \"none\", \"auto\", \"required\" or "
                                                 "{\"type\": \"function\", \"function\": {\"name\": ...}}");
            return -1;
        }
    } else {
        const cJSON *ty = cJSON_GetObjectItemCaseSensitive(tc, "type");
        const cJSON *nm = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(tc, "function"), "name");
        if (!cJSON_IsObject(tc) || !cJSON_IsString(ty) || strcmp(ty->valuestring, "function") != 0 ||
            !cJSON_IsString(nm)) {
            *err = srv_reply_err(400, "tool_choice", "'tool_choice' object must be {\"type\": \"function\", "
                                                 "\"function\": {\"name\": string}}");
            return -1;
        }
        name = nm->valuestring;
    }
    if (!cJSON_IsArray(tools) || cJSON_GetArraySize(tools) == 0) {
        *err = srv_reply_err(400, "tool_choice", "'tool_choice' forces a tool call but no 'tools' are given");
        return -1;
    }
    const char *only = NULL;
    int found = 0;
    for (const cJSON *t = tools->child; t; t = t->next) {
        const cJSON *nm = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(t, "function"), "name");
        if (!cJSON_IsString(nm)) {
            *err = srv_reply_err(400, "tools", "every tool needs function.name (a string)");
            return -1;
        }
        found |= name && !strcmp(name, nm->valuestring);
        only = nm->valuestring;
    }
    if (name && !found) {
        *err = srv_reply_err(400, "tool_choice", "'tool_choice' names '%.100s', which is not among 'tools'", name);
        return -1;
    }
    if (!name && cJSON_GetArraySize(tools) == 1) name = only;
    cJSON *js = name ? cJSON_CreateString(name) : NULL; /* the name as a JSON string (escaped) */
    char *q = js ? cJSON_PrintUnformatted(js) : NULL;
    cJSON_Delete(js);
    size_t cap = (q ? strlen(q) : 0) + 64;
    if ((name && !q) || !(*forced = malloc(cap))) {
        free(q);
        *err = srv_reply_err(500, NULL, "out of memory");
        return -1;
    }
    if (name)
        snprintf(*forced, cap, "{\"name\": %s, \"arguments\": ", q);
    else
        snprintf(*forced, cap, "{\"name\": \"");
    free(q);
    return 0;
}

/* A forced tool call, as Qwen3 / Hermes templates write calls: the prompt gets the opening "<tool_call>\n" and the
 * start of the call's JSON appended (after closing a <think> block the template left open), so the model can only
 * continue the call; the output parser starts inside the block with that JSON (srv_out_force_tool), so the reply
 * is the call. Needs a template whose tool prompt uses <tool_call> blocks (the rendered prompt mentions
 * <tool_call>): otherwise a 400, since this server parses no other tool-call format. */
static int force_tool_call(srv_req *r, char **text, const char *forced, srv_reply *err) {
    if (!strstr(*text, "<tool_call>")) {
        *err = srv_reply_err(400, "tool_choice", "forcing a tool call needs a chat template that writes Qwen3 / Hermes "
                                             "<tool_call> blocks; this model's template does not");
        return -1;
    }
    const char *close = r->start_in_think ? "\n</think>\n\n" : "";
    size_t n = strlen(*text) + strlen(close) + strlen(forced) + 32;
    char *t = malloc(n);
    r->tool_prefix = strdup(forced);
    if (!t || !r->tool_prefix) {
        free(t);
        *err = srv_reply_err(500, NULL, "out of memory");
        return -1;
    }
    snprintf(t, n, "%s%s<tool_call>\n%s", *text, close, forced);
    free(*text);
    *text = t;
    r->start_in_think = 0;
    r->parse_tools = 1;
    return 0;
}

/* Request fields the generation routes know: OpenAI's Chat Completions and Completions arguments (some accepted and
 * ignored because they do not change the output: user, metadata, store, service_tier, parallel_tool_calls,
 * prediction (OpenAI's Predicted Outputs only speed generation up), modalities ["text"], ...)
 * and the usual server extensions (vLLM / llama.cpp: top_k, min_p, repetition_penalty, chat_template_kwargs,
 * add_generation_prompt; llama-server's own fields are SRV_LLAMA_FIELDS, llamacpp.c). Anything else is a 400, as
 * OpenAI answers "Unrecognized request argument supplied". */
static const char *const KNOWN_FIELDS[] = {
    "model", "messages", "prompt", "temperature", "top_p", "top_k", "min_p", "presence_penalty", "frequency_penalty",
    "repetition_penalty", "seed", "n", "logprobs", "top_logprobs", "echo", "max_tokens", "max_completion_tokens",
    "stop", "stream", "stream_options", "tools", "tool_choice", "parallel_tool_calls", "functions",
    "function_call", "user", "metadata", "store", "service_tier", "chat_template_kwargs",
    "add_generation_prompt", "response_format", "logit_bias", "best_of", "suffix", "reasoning_effort",
    "modalities", "prediction", NULL};

/* "response_format": absent or null, {"type": "text"} or {"type": "json_object"} (*json = 1; json may be NULL), with
 * no other key and "type" once; else -1 with a 400 naming response_format (a schema, in OpenAI's json_schema type or
 * in llama-server's "schema" key, is refused rather than ignored). */
static int response_format(const cJSON *j, int *json, srv_reply *err) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, "response_format");
    if (json) *json = 0;
    if (!v || cJSON_IsNull(v)) return 0;
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(v, "type");
    int nomem = 0, n = 0;
    for (const cJSON *e = cJSON_IsObject(v) ? v->child : NULL; e; e = e->next) n++;
    const char *what = NULL;
    if (!cJSON_IsObject(v) || !cJSON_IsString(t))
        what = "must be an object with a \"type\"";
    else if (!strcmp(t->valuestring, "json_schema") || cJSON_GetObjectItemCaseSensitive(v, "schema") ||
             cJSON_GetObjectItemCaseSensitive(v, "json_schema"))
        what = "asks for a JSON schema, which is not supported (JSON mode without a schema is: {\"type\": "
               "\"json_object\"})";
    else if (strcmp(t->valuestring, "text") && strcmp(t->valuestring, "json_object"))
        what = "has an unknown type";
    else if (n != 1 || repeated_key(v, &nomem))
        what = "must hold only \"type\", once";
    if (what) {
        *err = srv_reply_err(400, "response_format", "response_format %s: give {\"type\": \"text\"} or {\"type\": "
                             "\"json_object\"} (JSON mode: the reply is one JSON object)", what);
        return -1;
    }
    if (json) *json = !strcmp(t->valuestring, "json_object");
    return 0;
}

int srv_known_fields(const cJSON *j, srv_reply *err) {
    for (const cJSON *e = j->child; e; e = e->next) {
        int ok = 0;
        for (int i = 0; KNOWN_FIELDS[i] && !ok; i++) ok = e->string && !strcmp(e->string, KNOWN_FIELDS[i]);
        for (int i = 0; SRV_LLAMA_FIELDS[i] && !ok; i++) ok = e->string && !strcmp(e->string, SRV_LLAMA_FIELDS[i]);
        if (!ok) {
            *err = srv_reply_err(400, e->string, "unrecognized request argument '%.100s'", e->string ? e->string : "");
            return -1;
        }
    }
    /* known but only meaningful in a form this server cannot honour: refuse rather than ignore */
    if (srv_llama_refused(j, err)) return -1;
    const cJSON *mo = cJSON_GetObjectItemCaseSensitive(j, "modalities"); /* null or ["text"]: text is all we make */
    if (mo && !cJSON_IsNull(mo)) {
        int ok = cJSON_IsArray(mo);
        for (const cJSON *m = ok ? mo->child : NULL; m && ok; m = m->next)
            ok = cJSON_IsString(m) && !strcmp(m->valuestring, "text");
        if (!ok) {
            *err = srv_reply_err(400, "modalities", "'modalities' must be [\"text\"]: this server only generates text");
            return -1;
        }
    }
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, "logit_bias");
    if (v && !cJSON_IsNull(v) && !((cJSON_IsObject(v) || cJSON_IsArray(v)) && !v->child)) { /* {} or llama's [] */
        *err = srv_reply_err(400, "logit_bias", "logit_bias is not supported");
        return -1;
    }
    if (response_format(j, NULL, err)) return -1;
    v = cJSON_GetObjectItemCaseSensitive(j, "best_of");
    if (v && !cJSON_IsNull(v) && !(cJSON_IsNumber(v) && v->valuedouble == 1)) {
        *err = srv_reply_err(400, "best_of", "only best_of = 1 is supported");
        return -1;
    }
    v = cJSON_GetObjectItemCaseSensitive(j, "suffix");
    if (v && !cJSON_IsNull(v)) {
        *err = srv_reply_err(400, "suffix", "suffix is not supported");
        return -1;
    }
    if (cJSON_GetObjectItemCaseSensitive(j, "functions") || cJSON_GetObjectItemCaseSensitive(j, "function_call")) {
        *err = srv_reply_err(400, "functions", "the deprecated 'functions' / 'function_call' are not supported: use 'tools'");
        return -1;
    }
    return 0;
}

int srv_model_lookup(const cmf_server *s, const char *id, const char **skill, const char **name) {
    if (!strcmp(id, s->model_name)) {
        *skill = s->skill, *name = s->model_name;
        return 1;
    }
    if (s->skills_off) return 0; /* --tp: skills are not split across ranks */
    for (int i = 0; i < s->n_skills; i++)
        if (!strcmp(id, s->skills[i])) {
            *skill = *name = s->skills[i];
            return 1;
        }
    return 0;
}

srv_reply srv_unknown_model(const cmf_server *s, const char *id) {
    for (int i = 0; s->skills_off && i < s->n_skills; i++)
        if (!strcmp(id, s->skills[i]))
            return srv_reply_err(400, "model", "the skill '%.64s' is not served with --tp (skills are not split across "
                                               "ranks: serve without --tp)", id);
    char have[512];
    srv_skills_joined(s, have, sizeof have);
    const int n = s->skills_off ? 0 : s->n_skills;
    return srv_reply_err(404, "model", "the model '%.200s' does not exist; this server has '%s'%s%s", id,
                         s->model_name, n ? " and the skills " : "", n ? have : "");
}

void srv_skills_joined(const cmf_server *s, char *buf, size_t cap) {
    buf[0] = 0;
    for (int i = 0; i < s->n_skills; i++)
        snprintf(buf + strlen(buf), cap - strlen(buf), "%s'%s'", i ? ", " : "", s->skills[i]);
}

/* "model": absent or null means the served one (with the server's default skill); else the served name or a skill
 * id of the file (404 otherwise, as OpenAI answers an unknown model). Sets *skill and *name (srv_model_lookup). */
static int model_field(cmf_server *s, const cJSON *j, const char **skill, const char **name, srv_reply *err) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, "model");
    *skill = s->skill, *name = s->model_name;
    if (!v || cJSON_IsNull(v)) return 0;
    if (!cJSON_IsString(v)) {
        *err = srv_reply_err(400, "model", "'model' must be a string");
        return -1;
    }
    if (!srv_model_lookup(s, v->valuestring, skill, name)) {
        *err = srv_unknown_model(s, v->valuestring);
        return -1;
    }
    return 0;
}

srv_req *srv_parse_generation(cmf_server *s, srv_kind kind, const char *body, size_t len, srv_reply *err) {
    cJSON *j = srv_parse_body(body, len, err);
    if (!j) return NULL;
    /* llama-server's own /completion ignores "model" (it answers with the served name), the OpenAI routes do not */
    const char *skill = s->skill, *name = s->model_name;
    if (kind == SRV_NATIVE) { /* llama-server's /completion ignores "model", but a skill's id still selects it */
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, "model");
        const char *sk, *nm;
        if (cJSON_IsString(v) && srv_model_lookup(s, v->valuestring, &sk, &nm) && sk) skill = sk;
    }
    if (srv_known_fields(j, err) || (kind != SRV_NATIVE && model_field(s, j, &skill, &name, err))) {
        cJSON_Delete(j);
        return NULL;
    }
    srv_req *r = calloc(1, sizeof *r);
    if (!r) {
        cJSON_Delete(j);
        *err = srv_reply_err(500, NULL, "out of memory");
        return NULL;
    }
    pthread_cond_init(&r->cv, NULL);
    r->kind = kind;
    r->id_slot = r->stop_hit = -1;
    r->model_name = name;
    r->skill = skill;
    r->created = (long)time(NULL);
    r->t_arrival = srv_now();
    r->deadline = s->o.timeout_s > 0 ? r->t_arrival + s->o.timeout_s : 0;
    static atomic_ulong seq;
    snprintf(r->id, sizeof r->id, "%s-%lx%lx", kind == SRV_CHAT ? "chatcmpl" : "cmpl", (unsigned long)r->created,
             (unsigned long)atomic_fetch_add(&seq, 1));
    int bad = 0;
    if (kind == SRV_CHAT) {
        const cJSON *tools = cJSON_GetObjectItemCaseSensitive(j, "tools");
        int tools_on = 1;
        char *forced = NULL, *text = NULL;
        bad = tool_choice_field(j, tools, &tools_on, &forced, err);
        if (!bad) bad = srv_render_chat(s, j, tools_on, &text, err);
        if (!bad) {
            r->start_in_think = cmf_chat_ends_in_think(text);
            r->parse_tools = tools_on && cJSON_IsArray(tools) && cJSON_GetArraySize(tools) > 0;
            if (forced) bad = force_tool_call(r, &text, forced, err);
        }
        if (!bad) bad = tokenize_text(s, text, SRV_CHAT_BOS, r, err);
        free(text);
        free(forced);
    } else {
        bad = completion_prompt(s, j, r, err);
    }
    if (!bad && r->n_prompt == 0) {
        *err = srv_reply_err(400, "prompt", "the prompt is empty (0 tokens)");
        bad = 1;
    }
    if (!bad && r->n_prompt >= s->n_ctx) {
        *err = srv_reply_err(400, kind == SRV_CHAT ? "messages" : "prompt",
                         "the prompt has %d tokens, but the context holds %d: at most %d prompt tokens leave room "
                         "for the completion", r->n_prompt, s->n_ctx, s->n_ctx - 1);
        bad = 1;
    }
    if (!bad) bad = common_fields(s, j, r, err);
    if (!bad) bad = response_format(j, &r->json, err);
    if (!bad && r->json && !s->json) {
        *err = srv_reply_err(400, "response_format", "JSON mode needs the model's tokenizer and an end-of-text id "
                             "(tokenizer_config's eos_token_ids), and this model has %s", s->tok ? "no eos id" :
                             "no tokenizer");
        bad = 1;
    }
    if (!bad && r->json && r->tool_prefix) {
        *err = srv_reply_err(400, "response_format", "response_format json_object and a forced tool call "
                             "(tool_choice) cannot be combined: the reply would have to be both");
        bad = 1;
    }
    cJSON_Delete(j);
    if (bad) {
        srv_req_free(r);
        return NULL;
    }
    return r;
}
