/* output.c — generated text -> client events, in two stages:
 *   1. stop strings (OpenAI `stop`): text that could still be the beginning of a stop string is held back, so a
 *      stop string is never sent even when its pieces arrive in different tokens; on a match the stop string and
 *      everything after it are dropped.
 *   2. tags: <think>...</think> becomes reasoning (the `reasoning_content` of vLLM / DeepSeek's API), and Qwen3's
 *      tool-call blocks <tool_call>{"name": ..., "arguments": {...}}</tool_call> (Qwen3's chat template / Hermes
 *      format) become OpenAI tool calls with the arguments as a JSON text. A block that is not valid JSON stays
 *      content, verbatim.
 * Both stages cut only at the start of a stop string or tag, which is a character boundary of valid UTF-8, so
 * complete characters in give complete characters out. */
#include <stdlib.h>
#include <string.h>

#include "server/internal.h"

/* ---- srv_buf ------------------------------------------------------------------------------------------------- */
int srv_buf_add(srv_buf *b, const char *s, size_t n) {
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 64;
        while (cap < b->len + n + 1) cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) return -1;
        b->p = p;
        b->cap = cap;
    }
    if (n) memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = 0;
    return 0;
}

int srv_buf_adds(srv_buf *b, const char *s) { return srv_buf_add(b, s, strlen(s)); }

void srv_buf_consume(srv_buf *b, size_t n) {
    if (n >= b->len) {
        b->len = 0;
    } else {
        memmove(b->p, b->p + n, b->len - n);
        b->len -= n;
    }
    if (b->p) b->p[b->len] = 0;
}

void srv_buf_free(srv_buf *b) {
    free(b->p);
    b->p = NULL;
    b->len = b->cap = 0;
}

/* ---- helpers ------------------------------------------------------------------------------------------------- */
size_t srv_partial_suffix(const char *s, size_t n, const char *pat) {
    size_t m = strlen(pat);
    size_t k = m > 0 ? m - 1 : 0;
    if (k > n) k = n;
    for (; k > 0; k--)
        if (!memcmp(s + n - k, pat, k)) return k;
    return 0;
}

/* First occurrence of pat in s[0..n), or NULL. */
static const char *find(const char *s, size_t n, const char *pat) {
    size_t m = strlen(pat);
    if (m == 0 || m > n) return NULL;
    for (size_t i = 0; i + m <= n; i++)
        if (s[i] == pat[0] && !memcmp(s + i, pat, m)) return s + i;
    return NULL;
}

static int is_ws(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

void srv_out_init(srv_out *o, char **stops, int n_stops, int parse_think, int parse_tools, int start_in_think) {
    memset(o, 0, sizeof *o);
    o->stops = stops;
    o->n_stops = n_stops;
    o->parse_think = parse_think;
    o->parse_tools = parse_tools;
    o->state = start_in_think ? 1 : 0;
    o->stop_hit = -1;
}

int srv_out_force_tool(srv_out *o, const char *json_prefix) {
    o->parse_tools = 1;
    o->state = 2;
    return srv_buf_adds(&o->tags, json_prefix);
}

void srv_out_free(srv_out *o) {
    srv_buf_free(&o->raw);
    srv_buf_free(&o->tags);
}

/* ---- stage 2: tags ------------------------------------------------------------------------------------------- */
static int emit_content(srv_out *o, const char *s, size_t n, srv_emit_fn emit, void *ctx) {
    if (o->skip_ws) {
        while (n > 0 && is_ws(*s)) s++, n--;
        if (n == 0) return 0;
        o->skip_ws = 0;
    }
    return n ? emit(ctx, SRV_EV_CONTENT, s, n, NULL) : 0;
}

/* A finished <tool_call> block: {"name": string, "arguments": object|string}. Returns 1 when emitted as a call. */
static int emit_tool(srv_out *o, const char *s, size_t n, srv_emit_fn emit, void *ctx, int *rc) {
    cJSON *j = cJSON_ParseWithLength(s, n);
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(j, "name");
    const cJSON *args = cJSON_GetObjectItemCaseSensitive(j, "arguments");
    if (!args) args = cJSON_GetObjectItemCaseSensitive(j, "parameters");
    int ok = 0;
    if (cJSON_IsObject(j) && cJSON_IsString(name) && (!args || cJSON_IsObject(args) || cJSON_IsString(args))) {
        char *a = NULL;
        if (cJSON_IsString(args))
            a = strdup(args->valuestring);
        else if (args)
            a = cJSON_PrintUnformatted(args);
        else
            a = strdup("{}");
        if (!a) {
            *rc = -1;
        } else {
            *rc = emit(ctx, SRV_EV_TOOL, name->valuestring, strlen(name->valuestring), a);
            o->n_tools++;
            free(a);
        }
        ok = 1;
    }
    cJSON_Delete(j);
    return ok;
}

static const char *const TAG_THINK = "<think>", *const TAG_THINK_END = "</think>";
static const char *const TAG_TOOL = "<tool_call>", *const TAG_TOOL_END = "</tool_call>";

/* Classifies o->tags; keeps only what could still start a tag (all of it when final). */
static int run_tags(srv_out *o, int final, srv_emit_fn emit, void *ctx) {
    for (;;) {
        const char *s = o->tags.p;
        size_t n = o->tags.len;
        if (n == 0) return 0;
        int rc = 0;
        if (o->state == 0) {
            const char *t1 = o->parse_think ? find(s, n, TAG_THINK) : NULL;
            const char *t2 = o->parse_tools ? find(s, n, TAG_TOOL) : NULL;
            const char *t = t1 && (!t2 || t1 < t2) ? t1 : t2;
            if (t) {
                size_t pre = (size_t)(t - s);
                int is_tool = t == t2;
                if (is_tool) { /* whitespace right before a tool call is layout, not content */
                    size_t k = pre;
                    while (k > 0 && is_ws(s[k - 1])) k--;
                    rc = emit_content(o, s, k, emit, ctx);
                } else {
                    rc = emit_content(o, s, pre, emit, ctx);
                }
                srv_buf_consume(&o->tags, pre + strlen(is_tool ? TAG_TOOL : TAG_THINK));
                o->state = is_tool ? 2 : 1;
                if (rc) return rc;
                continue;
            }
            size_t hold = 0;
            if (!final) {
                size_t h1 = o->parse_think ? srv_partial_suffix(s, n, TAG_THINK) : 0;
                size_t h2 = o->parse_tools ? srv_partial_suffix(s, n, TAG_TOOL) : 0;
                hold = h1 > h2 ? h1 : h2;
                /* trailing whitespace may precede a tool call: hold it too once tools are in play */
                if (o->parse_tools) {
                    while (hold < n && is_ws(s[n - hold - 1])) hold++;
                }
            }
            rc = emit_content(o, s, n - hold, emit, ctx);
            srv_buf_consume(&o->tags, n - hold);
            return rc;
        } else if (o->state == 1) {
            const char *t = find(s, n, TAG_THINK_END);
            if (t) {
                size_t pre = (size_t)(t - s);
                if (pre) rc = emit(ctx, SRV_EV_REASONING, s, pre, NULL);
                srv_buf_consume(&o->tags, pre + strlen(TAG_THINK_END));
                o->state = 0;
                o->skip_ws = 1;
                if (rc) return rc;
                continue;
            }
            size_t hold = final ? 0 : srv_partial_suffix(s, n, TAG_THINK_END);
            if (n - hold) rc = emit(ctx, SRV_EV_REASONING, s, n - hold, NULL);
            srv_buf_consume(&o->tags, n - hold);
            return rc;
        } else {
            const char *t = find(s, n, TAG_TOOL_END);
            if (!t && !final) return 0; /* the whole block is needed */
            size_t body = t ? (size_t)(t - s) : n;
            if (!emit_tool(o, s, body, emit, ctx, &rc)) { /* not a call: give the text back as content */
                o->skip_ws = 0;
                rc = emit(ctx, SRV_EV_CONTENT, TAG_TOOL, strlen(TAG_TOOL), NULL);
                if (!rc) rc = emit(ctx, SRV_EV_CONTENT, s, body, NULL);
                if (!rc && t) rc = emit(ctx, SRV_EV_CONTENT, TAG_TOOL_END, strlen(TAG_TOOL_END), NULL);
            } else {
                o->skip_ws = 1;
            }
            srv_buf_consume(&o->tags, t ? body + strlen(TAG_TOOL_END) : body);
            o->state = 0;
            if (rc) return rc;
        }
    }
}

/* ---- stage 1: stop strings ----------------------------------------------------------------------------------- */
int srv_out_push(srv_out *o, const char *text, size_t n, int final, srv_emit_fn emit, void *ctx) {
    if (o->stopped) return 1;
    if (srv_buf_add(&o->raw, text, n)) return -1;
    const char *s = o->raw.p ? o->raw.p : "";
    size_t len = o->raw.len;
    /* earliest match of any stop string */
    const char *hit = NULL;
    for (int i = 0; i < o->n_stops; i++) {
        const char *h = find(s, len, o->stops[i]);
        if (h && (!hit || h < hit)) hit = h, o->stop_hit = i;
    }
    size_t pass = len, hold = 0;
    if (hit) {
        pass = (size_t)(hit - s);
        o->stopped = 1;
    } else if (!final) {
        for (int i = 0; i < o->n_stops; i++) {
            size_t h = srv_partial_suffix(s, len, o->stops[i]);
            if (h > hold) hold = h;
        }
        pass = len - hold;
    }
    if (srv_buf_add(&o->tags, s, pass)) return -1;
    srv_buf_consume(&o->raw, hit ? len : pass);
    int rc = run_tags(o, final || o->stopped, emit, ctx);
    if (rc < 0) return -1;
    return o->stopped;
}
