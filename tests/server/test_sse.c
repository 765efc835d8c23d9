/* Unit tests of the streamed piece events of src/server/api.c (srv_sse_piece_to / srv_sse_piece): every event is one
 * "data: <json>\n\n" frame whose JSON, parsed back with cJSON, is OpenAI's chunk object (chat.completion.chunk with
 * delta.content / delta.reasoning_content / delta.tool_calls, or text_completion with text and logprobs null) carrying
 * the request's id, created and model and exactly the piece's text: quotes, backslashes, control bytes, multi-byte
 * UTF-8, an empty piece and a piece longer than the escaper's stack buffer. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "server/internal.h"
#include "testutil.h"

static srv_req *new_req(srv_kind kind) {
    srv_req *r = calloc(1, sizeof *r);
    if (!r) return NULL;
    r->kind = kind;
    snprintf(r->id, sizeof r->id, "%s", kind == SRV_CHAT ? "chatcmpl-q\"uo\\te" : "cmpl-7");
    r->created = 1764460800;
    r->model_name = "dir/m\xc3\xb6""del \"x\"";
    pthread_cond_init(&r->cv, NULL);
    return r;
}

static const cJSON *get(const cJSON *j, const char *k) { return cJSON_GetObjectItemCaseSensitive(j, k); }

/* The one event in out[from..): its framing, then its parsed JSON (NULL when broken). */
static cJSON *one_event(const srv_buf *out, size_t from) {
    const char *p = out->p + from, *end = out->p + out->len;
    CHECK_MSG(end - p > 8 && !strncmp(p, "data: ", 6) && !strcmp(end - 2, "\n\n"), "framing: '%.60s'", p);
    CHECK_MSG(memchr(p, '\n', (size_t)(end - p) - 2) == NULL, "a newline inside the event: '%.60s'", p);
    return cJSON_ParseWithLength(p + 6, (size_t)(end - p) - 8);
}

/* The envelope every chunk carries, and its one choice. */
static const cJSON *check_envelope(const cJSON *j, const srv_req *r) {
    const int chat = r->kind == SRV_CHAT;
    CHECK(cJSON_IsString(get(j, "id")) && !strcmp(get(j, "id")->valuestring, r->id));
    CHECK(cJSON_IsString(get(j, "object")) &&
          !strcmp(get(j, "object")->valuestring, chat ? "chat.completion.chunk" : "text_completion"));
    CHECK(cJSON_IsNumber(get(j, "created")) && get(j, "created")->valuedouble == (double)r->created);
    CHECK(cJSON_IsString(get(j, "model")) && !strcmp(get(j, "model")->valuestring, r->model_name));
    const cJSON *ch = get(j, "choices");
    CHECK(cJSON_IsArray(ch) && cJSON_GetArraySize(ch) == 1);
    const cJSON *c = cJSON_GetArrayItem(ch, 0);
    CHECK(cJSON_IsNumber(get(c, "index")) && get(c, "index")->valueint == 0);
    CHECK(cJSON_IsNull(get(c, "finish_reason")));
    if (!chat) CHECK(cJSON_IsNull(get(c, "logprobs")));
    return c;
}

/* A text piece of `kind` gives one event whose text field is `want`. */
static void check_text(srv_kind rk, enum srv_event kind, const char *text, size_t n, const char *want) {
    srv_req *r = new_req(rk);
    CHECK(r != NULL);
    if (!r) return;
    srv_buf out = {0};
    CHECK(srv_buf_adds(&out, "data: {\"earlier\":1}\n\n") == 0); /* appends after what is there */
    const size_t from = out.len;
    CHECK(srv_sse_piece_to(&out, r, kind, text, n, NULL) == 0);
    cJSON *j = one_event(&out, from);
    CHECK_MSG(j != NULL, "not JSON: '%s'", out.p + from);
    if (j) {
        const cJSON *c = check_envelope(j, r), *t;
        if (rk == SRV_CHAT) {
            const cJSON *d = get(c, "delta");
            CHECK(cJSON_IsObject(d) && cJSON_GetArraySize(d) == 1);
            t = get(d, kind == SRV_EV_REASONING ? "reasoning_content" : "content");
        } else {
            t = get(c, "text");
        }
        CHECK_MSG(cJSON_IsString(t) && !strcmp(t->valuestring, want), "kind %d: got '%s', want '%s'", (int)kind,
                  cJSON_IsString(t) ? t->valuestring : "(none)", want);
    }
    cJSON_Delete(j);
    /* srv_sse_piece writes the same bytes into the request's own stream buffer (a second piece reuses the head) */
    for (int k = 0; k < 2; k++) {
        CHECK(srv_sse_piece(r, kind, text, n, NULL) == 0);
        CHECK_MSG(r->sse.len == (size_t)(k + 1) * (out.len - from) &&
                      !memcmp(r->sse.p + (size_t)k * (out.len - from), out.p + from, out.len - from),
                  "srv_sse_piece differs from srv_sse_piece_to");
    }
    srv_buf_free(&out);
    srv_req_free(r);
}

int main(void) {
    static const char *const texts[] = {
        "Once",
        " quote\" back\\slash /slash ctrl\x01\x1f nl\n tab\t cr\r bs\b ff\f del\x7f",
        "h\xc3\xa9llo \xe4\xb8\x96\xe7\x95\x8c \xf0\x9f\x98\x80",
        "",
    };
    for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++) {
        const size_t n = strlen(texts[i]);
        check_text(SRV_CHAT, SRV_EV_CONTENT, texts[i], n, texts[i]);
        check_text(SRV_CHAT, SRV_EV_REASONING, texts[i], n, texts[i]);
        check_text(SRV_COMPLETION, SRV_EV_CONTENT, texts[i], n, texts[i]);
    }
    /* longer than the escaper's stack buffer: every byte escaped or not, 3000 of them */
    char big[3001];
    for (int i = 0; i < 3000; i++) big[i] = "a\"\\\n\x02\xc3\xa9z"[i % 8];
    big[3000] = 0; /* 375 whole patterns: no character cut */
    check_text(SRV_CHAT, SRV_EV_CONTENT, big, 3000, big);
    check_text(SRV_COMPLETION, SRV_EV_CONTENT, big, 3000, big);
    /* a piece is cut at a NUL byte, as cJSON strings are */
    check_text(SRV_CHAT, SRV_EV_CONTENT, "ab\0cd", 5, "ab");
    /* tool calls: OpenAI's delta.tool_calls with a running index and the call's id */
    {
        srv_req *r = new_req(SRV_CHAT);
        CHECK(r != NULL);
        srv_buf out = {0};
        for (int k = 0; r && k < 2; k++) {
            const size_t from = out.len;
            const char *name = k ? "f" : "get_weather", *args = k ? "{}" : "{\"city\":\"Paris\"}";
            CHECK(srv_sse_piece_to(&out, r, SRV_EV_TOOL, name, strlen(name), args) == 0);
            cJSON *j = one_event(&out, from);
            CHECK(j != NULL);
            const cJSON *tc = cJSON_GetArrayItem(get(get(check_envelope(j, r), "delta"), "tool_calls"), 0);
            char id[96];
            snprintf(id, sizeof id, "call_%s_%d", r->id, k);
            CHECK(cJSON_IsNumber(get(tc, "index")) && get(tc, "index")->valueint == k);
            CHECK(cJSON_IsString(get(tc, "id")) && !strcmp(get(tc, "id")->valuestring, id));
            const cJSON *f = get(tc, "function");
            CHECK(cJSON_IsString(get(f, "name")) && !strcmp(get(f, "name")->valuestring, name));
            CHECK(cJSON_IsString(get(f, "arguments")) && !strcmp(get(f, "arguments")->valuestring, args));
            cJSON_Delete(j);
        }
        srv_buf_free(&out);
        srv_req_free(r);
    }
    CMF_TEST_END();
}
