/* api.c — the JSON of the endpoints, after OpenAI's API reference (Chat Completions: /v1/chat/completions and its
 * "chat.completion" / "chat.completion.chunk" objects; Completions: /v1/completions, "text_completion"; Models:
 * /v1/models) and, for the routes OpenAI does not have, the llama.cpp / vLLM servers' shapes: /tokenize
 * {"content"|"prompt", "add_special", "model"; llama-server's "with_pieces" (true: [{"id", "piece"}], native.c),
 * "parse_special" true} -> {"tokens", "count"}, /detokenize {"tokens", "model"} -> {"content"} (llama-server's joined
 * token pieces, srv_llama_detokenize; other fields are a 400),
 * /apply-template {"messages", "tools"?, ...} -> {"prompt"}. Errors: {"error":{"message","type","code","param"}}
 * (OpenAI's error object). The requests are parsed in request.c. */
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "format/format.h"
#include "server/internal.h"
#include "util/jsontext.h"

/* ---- errors ---------------------------------------------------------------------------------------------------- */
static const char *error_type(int status) {
    switch (status) {
    case 401: return "authentication_error";
    case 404: return "not_found_error";
    case 405: return "method_not_allowed";
    case 413: return "request_too_large";
    case 429:
    case 503: return "server_overloaded";
    case 504: return "timeout_error";
    default: return status >= 500 ? "server_error" : "invalid_request_error";
    }
}

char *srv_error_json(int status, const char *message, const char *param) {
    cJSON *j = cJSON_CreateObject(), *e = cJSON_AddObjectToObject(j, "error");
    cJSON_AddStringToObject(e, "message", message);
    cJSON_AddStringToObject(e, "type", error_type(status));
    cJSON_AddNumberToObject(e, "code", status);
    if (param)
        cJSON_AddStringToObject(e, "param", param);
    else
        cJSON_AddNullToObject(e, "param");
    char *out = cJSON_PrintUnformatted(j);
    cJSON_Delete(j);
    return out;
}

srv_reply srv_reply_err(int status, const char *param, const char *fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    srv_reply r = {status, srv_error_json(status, msg, param)};
    return r;
}

static srv_reply reply_json(cJSON *j) {
    srv_reply r = {200, cJSON_PrintUnformatted(j)};
    cJSON_Delete(j);
    if (!r.body) r = srv_reply_err(500, NULL, "out of memory");
    return r;
}

/* ---- responses ------------------------------------------------------------------------------------------------- */
static cJSON *usage_json(const srv_req *r) {
    cJSON *u = cJSON_CreateObject();
    cJSON_AddNumberToObject(u, "prompt_tokens", r->n_prompt);
    cJSON_AddNumberToObject(u, "completion_tokens", r->n_gen);
    cJSON_AddNumberToObject(u, "total_tokens", r->n_prompt + r->n_gen);
    cJSON_AddNumberToObject(cJSON_AddObjectToObject(u, "prompt_tokens_details"), "cached_tokens", r->n_cached);
    return u;
}

static cJSON *envelope(const srv_req *r, const char *object) {
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "id", r->id);
    cJSON_AddStringToObject(j, "object", object);
    cJSON_AddNumberToObject(j, "created", (double)r->created);
    cJSON_AddStringToObject(j, "model", r->model_name);
    return j;
}

static cJSON *tool_call_json(const srv_req *r, int index, const char *name, size_t n, const char *args, int stream) {
    cJSON *c = cJSON_CreateObject();
    char id[96];
    snprintf(id, sizeof id, "call_%s_%d", r->id, index);
    if (stream) cJSON_AddNumberToObject(c, "index", index);
    cJSON_AddStringToObject(c, "id", id);
    cJSON_AddStringToObject(c, "type", "function");
    cJSON *f = cJSON_AddObjectToObject(c, "function");
    char *nm = strndup(name, n);
    cJSON_AddStringToObject(f, "name", nm ? nm : "");
    free(nm);
    cJSON_AddStringToObject(f, "arguments", args);
    return c;
}

srv_reply srv_generation_reply(cmf_server *s, srv_req *r) {
    (void)s;
    if (r->kind == SRV_NATIVE) return srv_native_reply(r); /* llama-server's /completion (native.c) */
    if (r->http_status) return srv_reply_err(r->http_status, NULL, "%s", r->error);
    int chat = r->kind == SRV_CHAT;
    cJSON *j = envelope(r, chat ? "chat.completion" : "text_completion");
    cJSON *choice = cJSON_CreateObject();
    cJSON_AddItemToArray(cJSON_AddArrayToObject(j, "choices"), choice);
    cJSON_AddNumberToObject(choice, "index", 0);
    const char *text = r->content.p ? r->content.p : "";
    if (chat) {
        cJSON *msg = cJSON_AddObjectToObject(choice, "message");
        cJSON_AddStringToObject(msg, "role", "assistant");
        if (r->tool_calls && !*text)
            cJSON_AddNullToObject(msg, "content");
        else
            cJSON_AddStringToObject(msg, "content", text);
        if (r->reasoning.len) cJSON_AddStringToObject(msg, "reasoning_content", r->reasoning.p);
        if (r->tool_calls) {
            cJSON_AddItemToObject(msg, "tool_calls", r->tool_calls);
            r->tool_calls = NULL;
        }
    } else {
        cJSON_AddStringToObject(choice, "text", text);
    }
    cJSON_AddNullToObject(choice, "logprobs");
    cJSON_AddStringToObject(choice, "finish_reason", r->finish_reason ? r->finish_reason : "stop");
    cJSON_AddItemToObject(j, "usage", usage_json(r));
    return reply_json(j);
}

int srv_result_piece(srv_req *r, enum srv_event kind, const char *text, size_t n, const char *args) {
    if (kind == SRV_EV_CONTENT) return srv_buf_add(&r->content, text, n);
    if (kind == SRV_EV_REASONING) return srv_buf_add(&r->reasoning, text, n);
    if (!r->tool_calls && !(r->tool_calls = cJSON_CreateArray())) return -1;
    cJSON_AddItemToArray(r->tool_calls, tool_call_json(r, cJSON_GetArraySize(r->tool_calls), text, n, args, 0));
    return 0;
}

/* Appends "data: <json>\n\n" to out and frees j. */
static int sse_add_to(srv_buf *out, cJSON *j) {
    char *s = cJSON_PrintUnformatted(j);
    cJSON_Delete(j);
    if (!s) return -1;
    int rc = srv_buf_adds(out, "data: ") || srv_buf_adds(out, s) || srv_buf_adds(out, "\n\n");
    free(s);
    return rc ? -1 : 0;
}

static int sse_add(srv_req *r, cJSON *j) { return sse_add_to(&r->sse, j); }

/* Appends s[0..n) as a JSON string (quoted and escaped by cJSON; like cJSON_AddStringToObject, the text ends at a
 * NUL byte). Returns 0, or -1 when out of memory. */
static int json_str(srv_buf *b, const char *s, size_t n) {
    char small[1024];
    const size_t cap = 6 * n + 16; /* cJSON writes at most 6 bytes per input byte (\u00XX), 2 quotes and a NUL */
    if (cap > (size_t)INT_MAX) return -1;
    char *buf = n + 1 + cap <= sizeof small ? small : malloc(n + 1 + cap);
    if (!buf) return -1;
    memcpy(buf, s, n);
    buf[n] = 0;
    cJSON item;
    memset(&item, 0, sizeof item);
    item.type = cJSON_String | cJSON_IsReference;
    item.valuestring = buf;
    char *out = buf + n + 1;
    int rc = cJSON_PrintPreallocated(&item, out, (int)cap, 0) ? srv_buf_adds(b, out) : -1;
    if (buf != small) free(buf);
    return rc;
}

/* The bytes every streamed text piece of r starts with, up to the piece's key (a completion: ..."text":, a chat
 * chunk: ..."delta":{), built on r's first piece: the same object as chunk() + envelope() print, without building
 * and printing a cJSON tree per token. */
static int sse_head(srv_req *r) {
    if (r->sse_head.len) return 0;
    srv_buf *h = &r->sse_head;
    const int chat = r->kind == SRV_CHAT;
    char created[32];
    snprintf(created, sizeof created, "%ld", r->created);
    int bad = srv_buf_adds(h, "data: {\"id\":") || json_str(h, r->id, strlen(r->id)) ||
              srv_buf_adds(h, chat ? ",\"object\":\"chat.completion.chunk\"" : ",\"object\":\"text_completion\"") ||
              srv_buf_adds(h, ",\"created\":") || srv_buf_adds(h, created) || srv_buf_adds(h, ",\"model\":") ||
              json_str(h, r->model_name, strlen(r->model_name)) ||
              srv_buf_adds(h, chat ? ",\"choices\":[{\"index\":0,\"finish_reason\":null,\"delta\":{"
                                   : ",\"choices\":[{\"index\":0,\"logprobs\":null,\"finish_reason\":null,\"text\":");
    if (bad) srv_buf_free(h);
    return bad ? -1 : 0;
}

/* A chunk with one choice; returns the choice (its delta / text is added by the caller). */
static cJSON *chunk(const srv_req *r, cJSON **j, const char *finish) {
    *j = envelope(r, r->kind == SRV_CHAT ? "chat.completion.chunk" : "text_completion");
    cJSON *c = cJSON_CreateObject();
    cJSON_AddItemToArray(cJSON_AddArrayToObject(*j, "choices"), c);
    cJSON_AddNumberToObject(c, "index", 0);
    if (r->kind != SRV_CHAT) cJSON_AddNullToObject(c, "logprobs");
    if (finish)
        cJSON_AddStringToObject(c, "finish_reason", finish);
    else
        cJSON_AddNullToObject(c, "finish_reason");
    return c;
}

int srv_sse_role(srv_req *r) {
    if (r->kind != SRV_CHAT || r->role_sent) return 0;
    r->role_sent = 1;
    cJSON *j, *d = cJSON_AddObjectToObject(chunk(r, &j, NULL), "delta");
    cJSON_AddStringToObject(d, "role", "assistant");
    cJSON_AddStringToObject(d, "content", "");
    return sse_add(r, j);
}

int srv_sse_piece_to(srv_buf *out, srv_req *r, enum srv_event kind, const char *text, size_t n, const char *args) {
    if (r->kind == SRV_NATIVE) return srv_native_sse_piece_to(out, r, text, n); /* content only: no tags parsed */
    const size_t len0 = out->len;
    const int chat = r->kind == SRV_CHAT;
    int bad;
    if (kind == SRV_EV_TOOL && chat) { /* rare: the whole chunk through cJSON */
        cJSON *j, *d = cJSON_AddObjectToObject(chunk(r, &j, NULL), "delta");
        cJSON_AddItemToArray(cJSON_AddArrayToObject(d, "tool_calls"),
                             tool_call_json(r, r->n_tool_calls++, text, n, args, 1));
        bad = sse_add_to(out, j) != 0;
    } else {
        const char *key = !chat ? "" : kind == SRV_EV_REASONING ? "\"reasoning_content\":" : "\"content\":";
        bad = sse_head(r) || srv_buf_add(out, r->sse_head.p, r->sse_head.len) || srv_buf_adds(out, key) ||
              json_str(out, kind == SRV_EV_TOOL ? "" : text, kind == SRV_EV_TOOL ? 0 : n) ||
              srv_buf_adds(out, chat ? "}}]}\n\n" : "}]}\n\n");
    }
    if (bad) { /* nothing half-written stays */
        out->len = len0;
        if (out->p) out->p[len0] = 0;
    }
    return bad ? -1 : 0;
}

int srv_sse_piece(srv_req *r, enum srv_event kind, const char *text, size_t n, const char *args) {
    return srv_sse_piece_to(&r->sse, r, kind, text, n, args);
}

int srv_sse_end(srv_req *r) {
    int rc = 0;
    if (r->http_status) {
        char *txt = srv_error_json(r->http_status, r->error, NULL);
        cJSON *e = txt ? cJSON_Parse(txt) : NULL;
        free(txt);
        rc = e ? sse_add(r, e) : -1;
    } else {
        cJSON *j, *c = chunk(r, &j, r->finish_reason ? r->finish_reason : "stop");
        if (r->kind == SRV_CHAT)
            cJSON_AddObjectToObject(c, "delta");
        else
            cJSON_AddStringToObject(c, "text", "");
        rc = sse_add(r, j);
        if (r->include_usage) {
            cJSON *u = envelope(r, r->kind == SRV_CHAT ? "chat.completion.chunk" : "text_completion");
            cJSON_AddArrayToObject(u, "choices");
            cJSON_AddItemToObject(u, "usage", usage_json(r));
            rc |= sse_add(r, u);
        }
    }
    rc |= srv_buf_adds(&r->sse, "data: [DONE]\n\n");
    return rc ? -1 : 0;
}

/* ---- other routes ---------------------------------------------------------------------------------------------- */
/* A model object (OpenAI's Model: id, object "model", created, owned_by; plus vLLM's max_model_len, and for a skill
 * vLLM's "parent" of a LoRA adapter: the served model's name). */
static cJSON *model_object(const cmf_server *s, const char *id) {
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "id", id);
    cJSON_AddStringToObject(m, "object", "model");
    cJSON_AddNumberToObject(m, "created", (double)time(NULL));
    cJSON_AddStringToObject(m, "owned_by", "cmf");
    cJSON_AddNumberToObject(m, "max_model_len", s->n_ctx);
    if (id != s->model_name) cJSON_AddStringToObject(m, "parent", s->model_name);
    return m;
}

srv_reply srv_api_models(cmf_server *s) {
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "object", "list");
    cJSON *data = cJSON_AddArrayToObject(j, "data");
    cJSON_AddItemToArray(data, model_object(s, s->model_name));
    for (int i = 0; i < s->n_skills && !s->skills_off; i++) cJSON_AddItemToArray(data, model_object(s, s->skills[i]));
    return reply_json(j);
}

srv_reply srv_api_model(cmf_server *s, const char *id) {
    const char *skill, *name;
    if (!srv_model_lookup(s, id, &skill, &name)) return srv_unknown_model(s, id);
    return reply_json(model_object(s, name));
}

/* A 400 for a field of j outside known[] (NULL-terminated), or for a known boolean field of llama-server's whose
 * non-default value this server cannot honour (must_be: "name=0" or "name=1", NULL-terminated); 0 when all is
 * well. So /tokenize and /detokenize refuse what they would otherwise ignore, as the generation routes do. */
static int check_fields(const cJSON *j, const char *const *known, const char *const *must_be, srv_reply *err) {
    for (const cJSON *e = j->child; e; e = e->next) {
        int ok = 0;
        for (int i = 0; known[i] && !ok; i++) ok = e->string && !strcmp(e->string, known[i]);
        if (!ok) {
            *err = srv_reply_err(400, e->string, "unrecognized request argument '%.100s'", e->string ? e->string : "");
            return -1;
        }
    }
    for (int i = 0; must_be && must_be[i]; i++) {
        char name[32];
        const char *eq = strchr(must_be[i], '=');
        snprintf(name, sizeof name, "%.*s", (int)(eq - must_be[i]), must_be[i]);
        int v = eq[1] == '1';
        if (srv_bool_field(j, name, &v, err)) return -1;
        if (v != (eq[1] == '1')) {
            *err = srv_reply_err(400, name, "'%s': only %s is supported", name, eq[1] == '1' ? "true" : "false");
            return -1;
        }
    }
    return 0;
}

srv_reply srv_api_tokenize(cmf_server *s, const char *body, size_t len) {
    srv_reply err;
    cJSON *j = srv_parse_body(body, len, &err);
    if (!j) return err;
    /* llama-server's fields too: with_pieces (each id with its piece, srv_token_pieces), parse_special (true only:
     * special tokens written in the text are always matched, as HF tokenizers do) */
    static const char *const known[] = {"content", "prompt", "add_special", "model", "with_pieces", "parse_special",
                                        NULL};
    static const char *const must_be[] = {"parse_special=1", NULL};
    if (check_fields(j, known, must_be, &err)) {
        cJSON_Delete(j);
        return err;
    }
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(j, "content");
    if (!c) c = cJSON_GetObjectItemCaseSensitive(j, "prompt");
    int add_special = 0, with_pieces = 0;
    if (!cJSON_IsString(c)) {
        cJSON_Delete(j);
        return srv_reply_err(400, "content", "'content' must be a string");
    }
    if (srv_bool_field(j, "add_special", &add_special, &err) || srv_bool_field(j, "with_pieces", &with_pieces, &err)) {
        cJSON_Delete(j);
        return err;
    }
    int32_t *ids = NULL;
    size_t n = 0, tlen = strlen(c->valuestring);
    srv_big_lock(s, tlen); /* held while the answer is built too: ~70 bytes of cJSON per token */
    cmf_status st = cmf_tokenize(s->tok, c->valuestring, tlen, add_special, &ids, &n);
    cJSON_Delete(j);
    if (st != CMF_OK) {
        srv_big_unlock(s, tlen);
        return srv_reply_err(400, "content", "cannot tokenize: %s", cmf_last_error());
    }
    cJSON *o = cJSON_CreateObject(), *a = NULL;
    if (with_pieces) {
        if ((a = srv_token_pieces(s, ids, n))) cJSON_AddItemToObject(o, "tokens", a);
    } else if ((a = cJSON_AddArrayToObject(o, "tokens"))) {
        for (size_t i = 0; i < n; i++) cJSON_AddItemToArray(a, cJSON_CreateNumber(ids[i]));
    }
    if (!a) { /* out of memory, or a decode error of the pieces */
        free(ids);
        cJSON_Delete(o);
        srv_big_unlock(s, tlen);
        return srv_reply_err(500, NULL, "cannot build the tokens: %s", cmf_last_error());
    }
    cJSON_AddNumberToObject(o, "count", (double)n);
    cJSON_AddNumberToObject(o, "max_model_len", s->n_ctx);
    free(ids);
    srv_reply rep = reply_json(o);
    srv_big_unlock(s, tlen);
    return rep;
}

srv_reply srv_api_detokenize(cmf_server *s, const char *body, size_t len) {
    srv_reply err;
    cJSON *j = srv_parse_body(body, len, &err);
    if (!j) return err;
    static const char *const known[] = {"tokens", "model", NULL};
    if (check_fields(j, known, NULL, &err)) {
        cJSON_Delete(j);
        return err;
    }
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(j, "tokens");
    if (!cJSON_IsArray(t)) {
        cJSON_Delete(j);
        return srv_reply_err(400, "tokens", "'tokens' must be an array of token ids");
    }
    int n = cJSON_GetArraySize(t), i = 0;
    int32_t *ids = malloc(((size_t)n + 1) * sizeof *ids);
    if (!ids) {
        cJSON_Delete(j);
        return srv_reply_err(500, NULL, "out of memory");
    }
    for (const cJSON *e = t->child; e; e = e->next, i++) {
        if (!cJSON_IsNumber(e) || e->valuedouble != floor(e->valuedouble) || e->valuedouble < 0 ||
            e->valuedouble >= s->vocab) {
            free(ids);
            cJSON_Delete(j);
            return srv_reply_err(400, "tokens", "'tokens[%d]' is not a token id in [0, %d)", i, s->vocab);
        }
        ids[i] = (int32_t)e->valuedouble;
    }
    cJSON_Delete(j);
    char *text = NULL;
    cmf_status st = srv_llama_detokenize(s, ids, (size_t)n, 0, &text); /* llama-server's route: its joined pieces */
    free(ids);
    if (st != CMF_OK) return srv_reply_err(400, "tokens", "cannot detokenize: %s", cmf_last_error());
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "content", text);
    free(text);
    return reply_json(o);
}

srv_reply srv_api_apply_template(cmf_server *s, const char *body, size_t len) {
    srv_reply err;
    cJSON *j = srv_parse_body(body, len, &err);
    if (!j) return err;
    if (srv_known_fields(j, &err)) { /* as /v1/chat/completions: a field it would refuse is not silently ignored here */
        cJSON_Delete(j);
        return err;
    }
    char *text = NULL;
    int bad = srv_render_chat(s, j, 1, &text, &err);
    cJSON_Delete(j);
    if (bad) return err;
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "prompt", text);
    free(text);
    return reply_json(o);
}
