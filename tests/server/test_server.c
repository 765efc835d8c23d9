/* End-to-end tests of `cmf serve` over loopback sockets: a random-weight Qwen3 model (hidden 32, 1 layer) with the
 * real Qwen3 tokenizer and chat template is written and converted (testmodel.c), the server binary is started on
 * a free port and always stopped, and every answer is checked against the same model run in-process through the
 * library (tokenizer, chat template, session, sampler): tokens, text, usage counts and finish reasons. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "client.h"
#include "format/format.h"
#include "quant/dtype.h"
#include "sample/sample.h"
#include "testmodel.h"
#include "testutil.h"

#define KEY "sekret-key"
#define CTX 256

static int g_port;
static cmf_model *g_m;

/* ---- local reference generation --------------------------------------------------------------------------------- */
typedef struct gen {
    int32_t ids[CTX];
    char *pieces[CTX]; /* cmf_detok_stream output per token */
    int n;
    int hit_eos;
    char text[8 * CTX * 8];
} gen;

static void gen_free(gen *g) {
    for (int i = 0; i < g->n; i++) free(g->pieces[i]);
}

/* What the server must produce: prefill, then sample/accept/decode until an eos id or max tokens. */
static void local_generate(const int32_t *prompt, int np, const cmf_sampler_params *sp, int max, gen *g) {
    memset(g, 0, sizeof *g);
    cmf_session *s = NULL;
    cmf_sampler *smp = NULL;
    cmf_detok_stream *ds = NULL;
    int n_eos = 0;
    const int32_t *eos = cmf_model_eos_ids(g_m, &n_eos);
    CHECK(cmf_session_new(g_m, CTX, &s) == CMF_OK);
    CHECK(cmf_sampler_new(cmf_model_vocab_size(g_m), sp, &smp) == CMF_OK);
    CHECK(cmf_detok_stream_new(cmf_model_tokenizer(g_m), 1, &ds) == CMF_OK);
    CHECK(cmf_session_prefill(s, prompt, np, NULL) == CMF_OK);
    for (int i = 0; i < max; i++) {
        int32_t t = 0;
        CHECK(cmf_sampler_sample(smp, cmf_session_logits(s), &t) == CMF_OK);
        cmf_sampler_accept(smp, t);
        for (int e = 0; e < n_eos; e++) g->hit_eos |= t == eos[e];
        if (g->hit_eos) break;
        g->ids[g->n] = t;
        CHECK(cmf_detok_stream_push(ds, t, &g->pieces[g->n]) == CMF_OK);
        strncat(g->text, g->pieces[g->n], sizeof g->text - strlen(g->text) - 1);
        g->n++;
        if (i + 1 < max) CHECK(cmf_session_decode(s, t) == CMF_OK);
    }
    cmf_detok_stream_free(ds);
    cmf_sampler_free(smp);
    cmf_session_free(s);
}

static cmf_sampler_params params(float temp, uint64_t seed) {
    cmf_sampler_params p = cmf_sampler_default_params(); /* as the server builds them from a request */
    p.temperature = temp;
    p.top_k = 0;
    p.top_p = 1.0f;
    p.min_p = 0.0f;
    p.penalty_last_n = 0;
    p.seed = seed;
    return p;
}

static int32_t *tokenize(const char *text, int add_special, int *n) {
    int32_t *ids = NULL;
    size_t k = 0;
    CHECK(cmf_tokenize(cmf_model_tokenizer(g_m), text, strlen(text), add_special, &ids, &k) == CMF_OK);
    *n = (int)k;
    return ids;
}

static char *ids_json(const int32_t *ids, int n) {
    cJSON *a = cJSON_CreateArray();
    for (int i = 0; i < n; i++) cJSON_AddItemToArray(a, cJSON_CreateNumber(ids[i]));
    char *s = cJSON_PrintUnformatted(a);
    cJSON_Delete(a);
    return s;
}

/* ---- HTTP helpers ----------------------------------------------------------------------------------------------- */
static cJSON *call(const char *method, const char *path, const char *body, int want_status) {
    http_resp r;
    int rc = http_request(g_port, method, path, KEY, body, &r);
    CHECK_MSG(rc == 0 && r.status == want_status, "%s %s: status %d (want %d): %s", method, path, r.status,
              want_status, r.body ? r.body : "");
    cJSON *j = r.body ? cJSON_Parse(r.body) : NULL;
    http_resp_free(&r);
    return j;
}

static const char *jstr(const cJSON *j, const char *path) { /* "a.b.0.c" */
    char buf[256];
    snprintf(buf, sizeof buf, "%s", path);
    const cJSON *cur = j;
    for (char *tok = strtok(buf, "."); tok && cur; tok = strtok(NULL, "."))
        cur = (*tok >= '0' && *tok <= '9') ? cJSON_GetArrayItem(cur, atoi(tok)) : cJSON_GetObjectItemCaseSensitive(cur, tok);
    return cJSON_IsString(cur) ? cur->valuestring : NULL;
}

static double jnum(const cJSON *j, const char *path) {
    char buf[256];
    snprintf(buf, sizeof buf, "%s", path);
    const cJSON *cur = j;
    for (char *tok = strtok(buf, "."); tok && cur; tok = strtok(NULL, "."))
        cur = (*tok >= '0' && *tok <= '9') ? cJSON_GetArrayItem(cur, atoi(tok)) : cJSON_GetObjectItemCaseSensitive(cur, tok);
    return cJSON_IsNumber(cur) ? cur->valuedouble : -1;
}

static int is_error_shape(const cJSON *j, int code) {
    return j && jstr(j, "error.message") && jstr(j, "error.type") && (int)jnum(j, "error.code") == code;
}

/* POST `body` to `route` expecting a 400 in OpenAI's error shape whose message contains `part`. */
static void expect_400_message(const char *route, const char *body, const char *part) {
    cJSON *j = call("POST", route, body, 400);
    const char *m = jstr(j, "error.message");
    CHECK_MSG(is_error_shape(j, 400) && m && strstr(m, part), "%s %.200s: message '%s', want '%s'", route, body,
              m ? m : "?", part);
    cJSON_Delete(j);
}

/* Splits an SSE body into its data payloads (checks the framing: every event is one "data: " line). */
static int sse_events(const char *body, char **ev, int max) {
    int n = 0;
    const char *p = body;
    while (*p && n < max) {
        const char *end = strstr(p, "\n\n");
        CHECK_MSG(end != NULL, "SSE event not terminated by a blank line: '%.60s'", p);
        if (!end) break;
        CHECK_MSG(!strncmp(p, "data: ", 6), "SSE line without 'data: ': '%.60s'", p);
        CHECK_MSG(memchr(p, '\n', (size_t)(end - p)) == NULL, "multi-line SSE event");
        ev[n++] = strndup(p + 6, (size_t)(end - p - 6));
        p = end + 2;
    }
    return n;
}

static int valid_utf8(const char *s) { return cmf_utf8_invalid_at((const uint8_t *)s, strlen(s)) == strlen(s); }

/* ---- the tests -------------------------------------------------------------------------------------------------- */
static void test_routes_and_auth(void) {
    http_resp r;
    CHECK(http_request(g_port, "GET", "/v1/models", NULL, NULL, &r) == 0 && r.status == 401);
    cJSON *j = cJSON_Parse(r.body ? r.body : "");
    CHECK_MSG(is_error_shape(j, 401), "%s", r.body);
    cJSON_Delete(j);
    http_resp_free(&r);
    CHECK(http_request(g_port, "GET", "/v1/models", "wrong-key", NULL, &r) == 0 && r.status == 401);
    http_resp_free(&r);
    CHECK(http_request(g_port, "GET", "/v1/models", KEY "x", NULL, &r) == 0 && r.status == 401);
    http_resp_free(&r);
    CHECK(http_request(g_port, "GET", "/health", NULL, NULL, &r) == 0 && r.status == 200); /* no key needed */
    j = cJSON_Parse(r.body ? r.body : "");
    CHECK(jstr(j, "status") && !strcmp(jstr(j, "status"), "ok"));
    cJSON_Delete(j);
    http_resp_free(&r);

    j = call("GET", "/v1/models", NULL, 200);
    CHECK(jstr(j, "object") && !strcmp(jstr(j, "object"), "list"));
    CHECK(jstr(j, "data.0.id") && !strcmp(jstr(j, "data.0.id"), "server-tiny"));
    CHECK(jstr(j, "data.0.object") && !strcmp(jstr(j, "data.0.object"), "model"));
    cJSON_Delete(j);

    j = call("GET", "/nope", NULL, 404);
    CHECK(is_error_shape(j, 404));
    cJSON_Delete(j);
    http_request(g_port, "GET", "/v1/chat/completions", KEY, NULL, &r);
    char allow[32];
    CHECK(r.status == 405 && http_header(&r, "Allow", allow, sizeof allow) && !strcmp(allow, "POST"));
    http_resp_free(&r);
    const char *bad[] = {"{\"messages\": [", "[1,2]", "", "{\"messages\": []}",
                         "{\"messages\": [{\"role\":\"user\",\"content\":\"hi\"}], \"n\": 2}",
                         "{\"messages\": [{\"role\":\"user\",\"content\":\"hi\"}], \"temperature\": \"hot\"}",
                         "{\"messages\": [{\"role\":\"user\",\"content\":\"hi\"}], \"max_tokens\": 0}",
                         "{\"messages\": [{\"role\":\"user\",\"content\":\"hi\"}], \"stop\": 3}",
                         "{\"messages\": [{\"content\":\"no role\"}]}"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        j = call("POST", "/v1/chat/completions", bad[i], 400);
        CHECK_MSG(is_error_shape(j, 400), "body %zu", i);
        cJSON_Delete(j);
    }
    j = call("POST", "/v1/completions", "{\"prompt\": [1, 99999999]}", 400);
    CHECK(is_error_shape(j, 400) && jstr(j, "error.param") && !strcmp(jstr(j, "error.param"), "prompt"));
    cJSON_Delete(j);
    /* malformed JSON names the byte offset; a lone surrogate escape is named as such; valid JSON that is not an
     * object is named as such, not as malformed (review nit) */
    expect_400_message("/v1/completions", "{\"prompt\": \"\\ud800x\", \"max_tokens\": 3}",
                       "lone UTF-16 surrogate escape \\ud800 at byte offset 12");
    expect_400_message("/v1/completions", "{\"prompt\": [1, 2,}", "malformed JSON at byte offset 17");
    expect_400_message("/v1/completions", "[1]", "must be a JSON object (got an array)");
    expect_400_message("/v1/completions", "{\"prompt\": [\"a\", \"b\"], \"max_tokens\": 3}",
                       "holds a batch of 2 prompts");
    expect_400_message("/v1/completions", "{\"prompt\": [[1], [2, 3]], \"max_tokens\": 3}",
                       "holds a batch of 2 prompts");
    expect_400_message("/v1/completions", "{\"prompt\": [[\"Once\"]], \"max_tokens\": 3}", "nested too deeply");
    expect_400_message("/v1/completions", "{\"prompt\": [[[1]]], \"max_tokens\": 3}", "nested too deeply");
    /* a body over the limit (8 MiB) */
    size_t big = (9u << 20);
    char *body = malloc(big + 1);
    memset(body, ' ', big);
    body[big] = 0;
    body[0] = '{', body[big - 1] = '}';
    CHECK(http_request(g_port, "POST", "/tokenize", KEY, body, &r) == 0);
    CHECK_MSG(r.status == 413, "status %d", r.status);
    http_resp_free(&r);
    free(body);
    /* texts over 256 KiB are tokenized one at a time (a lock): each path that takes it gives it back, so the same
     * requests answer twice in a row (a leaked lock would hang the second one until the test's timeout) */
    size_t n_big = 300u << 10;
    body = malloc(n_big + 64);
    int off = snprintf(body, 64, "{\"content\": \"");
    for (size_t i = 0; i < n_big; i += 2) body[off + i] = 'a', body[off + i + 1] = ' ';
    snprintf(body + off + n_big, 64, "\"}");
    for (int k = 0; k < 2; k++) {
        cJSON *j = call("POST", "/tokenize", body, 200);
        CHECK_MSG(jnum(j, "count") >= 100000, "/tokenize of 300 KiB: count %g", jnum(j, "count"));
        cJSON_Delete(j);
        memcpy(body, "{\"prompt\":  \"", (size_t)off); /* same length as the /tokenize prefix */
        expect_400_message("/v1/completions", body, "but the context holds 256: at most 255 prompt tokens leave "
                                                    "room for the completion");
        memcpy(body, "{\"content\": \"", (size_t)off);
    }
    free(body);
}

static void test_tokenize_template(void) {
    int n = 0;
    int32_t *ids = tokenize("Hello world, héllo 世界!", 0, &n);
    cJSON *j = call("POST", "/tokenize", "{\"content\": \"Hello world, h\\u00e9llo \\u4e16\\u754c!\"}", 200);
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(j, "tokens");
    CHECK(cJSON_GetArraySize(t) == n && (int)jnum(j, "count") == n);
    for (int i = 0; i < n && i < cJSON_GetArraySize(t); i++) CHECK(cJSON_GetArrayItem(t, i)->valueint == ids[i]);
    cJSON_Delete(j);
    char *ij = ids_json(ids, n), body[4096];
    snprintf(body, sizeof body, "{\"tokens\": %s}", ij);
    j = call("POST", "/detokenize", body, 200);
    CHECK(jstr(j, "content") && !strcmp(jstr(j, "content"), "Hello world, héllo 世界!"));
    cJSON_Delete(j);
    free(ij);
    free(ids);

    const char *msgs = "[{\"role\":\"system\",\"content\":\"Be brief.\"},{\"role\":\"user\",\"content\":\"Hi\"}]";
    cmf_chat_params p = cmf_chat_default_params();
    p.messages_json = msgs;
    char *want = NULL;
    CHECK(cmf_chat_render(g_m, &p, &want, NULL) == CMF_OK);
    snprintf(body, sizeof body, "{\"messages\": %s}", msgs);
    j = call("POST", "/apply-template", body, 200);
    CHECK_MSG(want && jstr(j, "prompt") && !strcmp(jstr(j, "prompt"), want), "%s", jstr(j, "prompt"));
    CHECK(want && strstr(want, "<|im_start|>assistant\n")); /* Qwen3's template, generation prompt */
    cJSON_Delete(j);
    free(want);
    /* a field chat/completions refuses (e.g. a custom chat_template) is refused here too, not ignored */
    snprintf(body, sizeof body, "{\"messages\": %s, \"chat_template\": \"{{ 1 }}\"}", msgs);
    j = call("POST", "/apply-template", body, 400);
    CHECK(is_error_shape(j, 400) && jstr(j, "error.param") && !strcmp(jstr(j, "error.param"), "chat_template"));
    cJSON_Delete(j);

    /* tools and chat_template_kwargs reach the template as cmf_chat_render passes them */
    const char *tools = "[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"description\":\"Weather of a city\","
                        "\"parameters\":{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"}}}}}]";
    p.tools_json = tools;
    p.extra_json = "{\"enable_thinking\":false}";
    CHECK(cmf_chat_render(g_m, &p, &want, NULL) == CMF_OK);
    CHECK(want && strstr(want, "get_weather") && strstr(want, "<think>\n\n</think>")); /* Qwen3: tools, no thinking */
    snprintf(body, sizeof body, "{\"messages\": %s, \"tools\": %s, \"chat_template_kwargs\": {\"enable_thinking\": false}}",
             msgs, tools);
    j = call("POST", "/apply-template", body, 200);
    CHECK_MSG(want && jstr(j, "prompt") && !strcmp(jstr(j, "prompt"), want), "%s", jstr(j, "prompt"));
    cJSON_Delete(j);
    free(want);
    /* a chat request with tools renders the same prompt: usage.prompt_tokens counts its tokens */
    p.extra_json = NULL;
    CHECK(cmf_chat_render(g_m, &p, &want, NULL) == CMF_OK);
    int nt = 0;
    int32_t *tids = tokenize(want ? want : "", 0, &nt);
    snprintf(body, sizeof body, "{\"messages\": %s, \"tools\": %s, \"tool_choice\": \"auto\", \"max_tokens\": 2}", msgs, tools);
    j = call("POST", "/v1/chat/completions", body, 200);
    CHECK_MSG((int)jnum(j, "usage.prompt_tokens") == nt, "%g vs %d", jnum(j, "usage.prompt_tokens"), nt);
    cJSON_Delete(j);
    free(tids);
    free(want);
}

/* Greedy completion from token ids: text, finish_reason length, usage. Returns the local generation. */
static void test_completion_greedy(gen *g, int32_t **prompt, int *np) {
    *prompt = tokenize("The quick brown fox jumps over", 1, np);
    cmf_sampler_params sp = params(0, 0);
    local_generate(*prompt, *np, &sp, 24, g);
    CHECK_MSG(g->n == 24 && !g->hit_eos, "the random model stopped early (%d tokens)", g->n);
    char *ij = ids_json(*prompt, *np), body[2048];
    snprintf(body, sizeof body, "{\"model\":\"server-tiny\",\"prompt\": %s, \"temperature\": 0, \"max_tokens\": 24}", ij);
    free(ij);
    cJSON *j = call("POST", "/v1/completions", body, 200);
    CHECK(jstr(j, "object") && !strcmp(jstr(j, "object"), "text_completion"));
    CHECK(jstr(j, "id") && !strncmp(jstr(j, "id"), "cmpl-", 5));
    CHECK_MSG(jstr(j, "choices.0.text") && !strcmp(jstr(j, "choices.0.text"), g->text), "server '%s' vs local '%s'",
              jstr(j, "choices.0.text"), g->text);
    CHECK(jstr(j, "choices.0.finish_reason") && !strcmp(jstr(j, "choices.0.finish_reason"), "length"));
    CHECK((int)jnum(j, "usage.prompt_tokens") == *np && (int)jnum(j, "usage.completion_tokens") == 24 &&
          (int)jnum(j, "usage.total_tokens") == *np + 24);
    cJSON_Delete(j);
    /* the same prompt as text gives the same answer (the server tokenizes it the same way) */
    j = call("POST", "/v1/completions",
             "{\"prompt\": \"The quick brown fox jumps over\", \"temperature\": 0, \"max_tokens\": 24}", 200);
    CHECK(jstr(j, "choices.0.text") && !strcmp(jstr(j, "choices.0.text"), g->text));
    /* the second identical request reuses the slot's KV cache for all but the last prompt token */
    CHECK_MSG((int)jnum(j, "usage.prompt_tokens_details.cached_tokens") == *np - 1, "cached %g",
              jnum(j, "usage.prompt_tokens_details.cached_tokens"));
    cJSON_Delete(j);
}

/* A stop string made of the end of one token's text and the start of the next one's. */
static void test_stop_across_tokens(const gen *g, const int32_t *prompt, int np) {
    int found = -1;
    for (int i = 0; i + 1 < g->n && found < 0; i++) {
        const char *a = g->pieces[i], *b = g->pieces[i + 1];
        size_t la = strlen(a), lb = strlen(b);
        if (la >= 2 && lb >= 2 && (a[la - 2] & 0xC0) != 0x80 && (unsigned char)a[la - 1] < 0x80 &&
            (unsigned char)b[0] < 0x80 && (unsigned char)b[1] < 0x80)
            found = i;
    }
    CHECK_MSG(found >= 0, "no token pair with ASCII edges in the greedy output '%s'", g->text);
    if (found < 0) return;
    char stop[8];
    size_t la = strlen(g->pieces[found]);
    snprintf(stop, sizeof stop, "%c%c%c%c", g->pieces[found][la - 2], g->pieces[found][la - 1],
             g->pieces[found + 1][0], g->pieces[found + 1][1]);
    const char *hit = strstr(g->text, stop);
    size_t want_len = (size_t)(hit - g->text);
    cJSON *stop_j = cJSON_CreateString(stop);
    char *ij = ids_json(prompt, np), *sj = cJSON_PrintUnformatted(stop_j), body[4096];
    cJSON_Delete(stop_j);
    for (int stream = 0; stream < 2; stream++) {
        snprintf(body, sizeof body,
                 "{\"prompt\": %s, \"temperature\": 0, \"max_tokens\": 24, \"stop\": [\"zzzz-never\", %s], "
                 "\"stream\": %s}", ij, sj, stream ? "true" : "false");
        http_resp r;
        CHECK(http_request(g_port, "POST", "/v1/completions", KEY, body, &r) == 0 && r.status == 200);
        char text[4096] = "", *finish = NULL;
        if (!stream) {
            cJSON *j = cJSON_Parse(r.body);
            snprintf(text, sizeof text, "%s", jstr(j, "choices.0.text") ? jstr(j, "choices.0.text") : "?");
            finish = strdup(jstr(j, "choices.0.finish_reason") ? jstr(j, "choices.0.finish_reason") : "?");
            cJSON_Delete(j);
        } else {
            char *ev[64];
            int n = sse_events(r.body, ev, 64);
            for (int i = 0; i < n; i++) {
                cJSON *j = cJSON_Parse(ev[i]);
                if (jstr(j, "choices.0.text")) strncat(text, jstr(j, "choices.0.text"), sizeof text - strlen(text) - 1);
                if (jstr(j, "choices.0.finish_reason")) finish = strdup(jstr(j, "choices.0.finish_reason"));
                cJSON_Delete(j);
                free(ev[i]);
            }
        }
        CHECK_MSG(strlen(text) == want_len && !strncmp(text, g->text, want_len),
                  "stream %d: stop '%s': got '%s', want the first %zu bytes of '%s'", stream, stop, text, want_len,
                  g->text);
        CHECK(finish && !strcmp(finish, "stop"));
        free(finish);
        http_resp_free(&r);
    }
    free(ij);
    free(sj);
}

/* SSE framing and UTF-8: a sampled stream whose tokens include pieces of multi-byte characters. */
static void test_stream_utf8(void) {
    int np = 0;
    int32_t *prompt = tokenize("中文测试：", 1, &np);
    gen g;
    uint64_t seed = 0;
    int fragments = 0;
    for (seed = 1; seed < 200 && !fragments; seed++) { /* find a seed whose tokens split a character */
        cmf_sampler_params sp = params(1.5f, seed);
        local_generate(prompt, np, &sp, 40, &g);
        for (int i = 0; i < g.n; i++) {
            char *t = NULL;
            cmf_detokenize(cmf_model_tokenizer(g_m), &g.ids[i], 1, 1, &t);
            if (t && *t && !*g.pieces[i]) fragments++; /* text of its own, none yet in the stream: held back */
            free(t);
        }
        if (!fragments) gen_free(&g);
    }
    seed--;
    CHECK_MSG(fragments > 0, "no sampled stream with a split character in 200 seeds");
    if (!fragments) {
        free(prompt);
        return;
    }
    char *ij = ids_json(prompt, np), body[2048];
    snprintf(body, sizeof body,
             "{\"prompt\": %s, \"temperature\": 1.5, \"seed\": %llu, \"max_tokens\": 40, \"stream\": true, "
             "\"stream_options\": {\"include_usage\": true}}", ij, (unsigned long long)seed);
    http_resp r;
    CHECK(http_request(g_port, "POST", "/v1/completions", KEY, body, &r) == 0 && r.status == 200);
    char ct[64];
    CHECK(http_header(&r, "Content-Type", ct, sizeof ct) && !strcmp(ct, "text/event-stream"));
    char *ev[128], text[8192] = "";
    int n = sse_events(r.body ? r.body : "", ev, 128);
    CHECK_MSG(n >= 3 && !strcmp(ev[n - 1], "[DONE]"), "last event '%s'", n ? ev[n - 1] : "");
    for (int i = 0; i + 1 < n; i++) {
        cJSON *j = cJSON_Parse(ev[i]);
        CHECK_MSG(j != NULL, "event %d is not JSON", i);
        const char *t = jstr(j, "choices.0.text");
        if (t) {
            CHECK_MSG(valid_utf8(t), "event %d carries invalid UTF-8", i);
            strncat(text, t, sizeof text - strlen(text) - 1);
        }
        if (i == n - 2) { /* the usage chunk: no choices, the counts */
            CHECK(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(j, "choices")) == 0);
            CHECK((int)jnum(j, "usage.completion_tokens") == g.n + g.hit_eos);
            CHECK((int)jnum(j, "usage.prompt_tokens") == np);
        } else if (i == n - 3) {
            CHECK(jstr(j, "choices.0.finish_reason") != NULL);
        } else {
            CHECK(cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(j, "choices"), 0), "finish_reason")));
        }
        cJSON_Delete(j);
    }
    CHECK_MSG(!strcmp(text, g.text), "server '%s' vs local '%s'", text, g.text);
    for (int i = 0; i < n; i++) free(ev[i]);
    http_resp_free(&r);
    gen_free(&g);
    free(ij);
    free(prompt);
}

/* "seed" (api.c): OpenAI's is an int64, negative seeds included. -1 is a random seed (llama-server's convention, and
 * cmf run --seed -1): two requests draw different texts. Another negative seed s draws as the unsigned seed 2^64 + s
 * (what cmf run --seed takes), both ends of [-2^63, 2^64) are accepted (as the tokens of the in-process sampler with
 * that seed show), and the doubles just outside, fractions and huge values get a 400 naming "seed". */
static void test_seed(void) {
    int np = 0;
    int32_t *prompt = tokenize("Once upon a time", 1, &np);
    char *ij = ids_json(prompt, np), body[2048];
    static const struct {
        const char *json;
        uint64_t as;
    } ok[] = {
        {"5", 5},
        {"-5", 18446744073709551611ULL},                   /* 2^64 - 5 */
        {"-9223372036854775808", 9223372036854775808ULL},  /* -2^63 */
        {"18446744073709549568", 18446744073709549568ULL}, /* the largest double below 2^64 */
    };
    char first[2][8 * CTX * 8];
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        gen g;
        cmf_sampler_params sp = params(1.5f, ok[i].as);
        local_generate(prompt, np, &sp, 12, &g);
        if (i < 2) snprintf(first[i], sizeof first[i], "%s", g.text);
        snprintf(body, sizeof body, "{\"prompt\": %s, \"temperature\": 1.5, \"seed\": %s, \"max_tokens\": 12}", ij,
                 ok[i].json);
        cJSON *j = call("POST", "/v1/completions", body, 200);
        CHECK_MSG(jstr(j, "choices.0.text") && !strcmp(jstr(j, "choices.0.text"), g.text),
                  "seed %s: server '%s' vs local (seed %llu) '%s'", ok[i].json, jstr(j, "choices.0.text"),
                  (unsigned long long)ok[i].as, g.text);
        cJSON_Delete(j);
        gen_free(&g);
    }
    CHECK_MSG(strcmp(first[0], first[1]) != 0, "seeds 5 and 2^64 - 5 drew the same text: the check above is blind");
    char *rnd[2] = {NULL, NULL};
    for (int r = 0; r < 2; r++) {
        snprintf(body, sizeof body, "{\"prompt\": %s, \"temperature\": 1.5, \"seed\": -1, \"max_tokens\": 12}", ij);
        cJSON *j = call("POST", "/v1/completions", body, 200);
        const char *t = jstr(j, "choices.0.text");
        rnd[r] = strdup(t ? t : "");
        cJSON_Delete(j);
    }
    CHECK_MSG(rnd[0] && rnd[1] && strcmp(rnd[0], rnd[1]) != 0, "seed -1 twice drew the same text '%s': not random",
              rnd[0] ? rnd[0] : "");
    free(rnd[0]);
    free(rnd[1]);
    static const char *const bad[] = {"-9223372036854777856", "18446744073709551616", "-1.5", "1e300", "-1e19"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(body, sizeof body, "{\"prompt\": %s, \"seed\": %s, \"max_tokens\": 4}", ij, bad[i]);
        cJSON *j = call("POST", "/v1/completions", body, 400);
        CHECK_MSG(is_error_shape(j, 400) && jstr(j, "error.param") && !strcmp(jstr(j, "error.param"), "seed"),
                  "seed %s: not a 400 naming 'seed'", bad[i]);
        cJSON_Delete(j);
    }
    free(ij);
    free(prompt);
}

/* tool_choice "required" / a named function: the prompt ends with "<tool_call>\n" and the call's JSON start (the
 * server's forcing scheme), so the model's tokens continue the call; with this random model the block is not valid
 * JSON, so the reply gives it back verbatim as content: "<tool_call>" + JSON start + the generated text. */
static void test_tool_choice(void) {
    const char *msgs = "[{\"role\":\"user\",\"content\":\"Weather in Paris?\"}]";
    const char *tools = "[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"description\":\"w\","
                        "\"parameters\":{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"}}}}}]";
    const char *prefix = "{\"name\": \"get_weather\", \"arguments\": ";
    cmf_chat_params p = cmf_chat_default_params();
    p.messages_json = msgs;
    p.tools_json = tools;
    char *rendered = NULL;
    CHECK(cmf_chat_render(g_m, &p, &rendered, NULL) == CMF_OK);
    CHECK(rendered && strstr(rendered, "<tool_call>"));
    char *full = malloc(strlen(rendered ? rendered : "") + 256);
    sprintf(full, "%s<tool_call>\n%s", rendered ? rendered : "", prefix);
    int np = 0;
    int32_t *prompt = tokenize(full, 0, &np);
    cmf_sampler_params sp = params(0, 0);
    gen g;
    local_generate(prompt, np, &sp, 12, &g);
    char want[20000];
    snprintf(want, sizeof want, "<tool_call>%s%s", prefix, g.text);
    const char *choices[] = {"{\"type\":\"function\",\"function\":{\"name\":\"get_weather\"}}", "\"required\""};
    for (int c = 0; c < 2; c++) {
        char body[4096];
        snprintf(body, sizeof body, "{\"messages\": %s, \"tools\": %s, \"tool_choice\": %s, \"temperature\": 0, "
                 "\"max_tokens\": 12}", msgs, tools, choices[c]);
        cJSON *j = call("POST", "/v1/chat/completions", body, 200);
        CHECK_MSG((int)jnum(j, "usage.prompt_tokens") == np, "tool_choice %s: prompt %d tokens, want %d", choices[c],
                  (int)jnum(j, "usage.prompt_tokens"), np);
        CHECK_MSG(jstr(j, "choices.0.message.content") && !strcmp(jstr(j, "choices.0.message.content"), want),
                  "tool_choice %s: '%s' vs '%s'", choices[c], jstr(j, "choices.0.message.content"), want);
        cJSON_Delete(j);
    }
    /* refused: a name not among the tools, no tools, a bad value */
    char body[4096];
    snprintf(body, sizeof body, "{\"messages\": %s, \"tools\": %s, \"tool_choice\": "
             "{\"type\":\"function\",\"function\":{\"name\":\"nope\"}}}", msgs, tools);
    cJSON_Delete(call("POST", "/v1/chat/completions", body, 400));
    snprintf(body, sizeof body, "{\"messages\": %s, \"tool_choice\": \"required\"}", msgs);
    cJSON_Delete(call("POST", "/v1/chat/completions", body, 400));
    snprintf(body, sizeof body, "{\"messages\": %s, \"tools\": %s, \"tool_choice\": \"always\"}", msgs, tools);
    cJSON_Delete(call("POST", "/v1/chat/completions", body, 400));
    gen_free(&g);
    free(prompt);
    free(full);
    free(rendered);
}

static void test_chat(void) {
    const char *msgs = "[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"Tell me\"},"
                       "{\"type\":\"text\",\"text\":\"a story\"}]}]";
    cmf_chat_params p = cmf_chat_default_params();
    p.messages_json = msgs;
    char *prompt_text = NULL;
    CHECK(cmf_chat_render(g_m, &p, &prompt_text, NULL) == CMF_OK);
    int np = 0;
    int32_t *prompt = tokenize(prompt_text ? prompt_text : "", 0, &np);
    cmf_sampler_params sp = params(0, 0);
    gen g;
    local_generate(prompt, np, &sp, 10, &g);
    char body[2048];
    snprintf(body, sizeof body, "{\"model\":\"server-tiny\",\"messages\": %s, \"temperature\": 0, \"max_completion_tokens\": 10}", msgs);
    cJSON *j = call("POST", "/v1/chat/completions", body, 200);
    CHECK(jstr(j, "object") && !strcmp(jstr(j, "object"), "chat.completion"));
    CHECK(jstr(j, "choices.0.message.role") && !strcmp(jstr(j, "choices.0.message.role"), "assistant"));
    CHECK_MSG(jstr(j, "choices.0.message.content") && !strcmp(jstr(j, "choices.0.message.content"), g.text),
              "server '%s' vs local '%s'", jstr(j, "choices.0.message.content"), g.text);
    CHECK(jstr(j, "choices.0.finish_reason") && !strcmp(jstr(j, "choices.0.finish_reason"), g.hit_eos ? "stop" : "length"));
    CHECK((int)jnum(j, "usage.prompt_tokens") == np);
    cJSON_Delete(j);
    /* streamed: role first, the same content, a finish chunk, [DONE] (no usage chunk unless asked) */
    snprintf(body, sizeof body, "{\"messages\": %s, \"temperature\": 0, \"max_tokens\": 10, \"stream\": true}", msgs);
    http_resp r;
    CHECK(http_request(g_port, "POST", "/v1/chat/completions", KEY, body, &r) == 0 && r.status == 200);
    char *ev[64], text[4096] = "";
    int n = sse_events(r.body ? r.body : "", ev, 64);
    CHECK(n >= 3 && !strcmp(ev[n - 1], "[DONE]"));
    for (int i = 0; i + 1 < n; i++) {
        cJSON *e = cJSON_Parse(ev[i]);
        CHECK(jstr(e, "object") && !strcmp(jstr(e, "object"), "chat.completion.chunk"));
        if (i == 0) CHECK(jstr(e, "choices.0.delta.role") && !strcmp(jstr(e, "choices.0.delta.role"), "assistant"));
        if (jstr(e, "choices.0.delta.content")) strncat(text, jstr(e, "choices.0.delta.content"), sizeof text - strlen(text) - 1);
        if (i == n - 2) CHECK(jstr(e, "choices.0.finish_reason") != NULL);
        CHECK(cJSON_GetObjectItemCaseSensitive(e, "usage") == NULL);
        cJSON_Delete(e);
    }
    CHECK(!strcmp(text, g.text));
    for (int i = 0; i < n; i++) free(ev[i]);
    http_resp_free(&r);
    gen_free(&g);
    free(prompt);
    free(prompt_text);
}

/* ---- concurrency: 8 requests at once over 4 slots give the sequential answers ----------------------------------- */
typedef struct job {
    char body[512];
    char text[4096];
    int status;
} job;

static void run_job(job *jb) {
    http_resp r;
    jb->status = http_request(g_port, "POST", "/v1/completions", KEY, jb->body, &r) == 0 ? r.status : 0;
    cJSON *j = r.body ? cJSON_Parse(r.body) : NULL;
    snprintf(jb->text, sizeof jb->text, "%s", jstr(j, "choices.0.text") ? jstr(j, "choices.0.text") : "(none)");
    cJSON_Delete(j);
    http_resp_free(&r);
}

static void *job_thread(void *arg) {
    run_job(arg);
    return NULL;
}

static void test_concurrency(void) {
    enum { N = 8 };
    static const char *prompts[N] = {"Once upon a time", "In a galaxy far away", "def main():", "1, 2, 3,",
                                     "The weather today", "Bonjour, je suis", "SELECT * FROM", "Roses are red"};
    job seq[N], par[N];
    for (int i = 0; i < N; i++) {
        snprintf(seq[i].body, sizeof seq[i].body,
                 "{\"prompt\": \"%s\", \"temperature\": 0, \"max_tokens\": %d}", prompts[i], 10 + 3 * i);
        par[i] = seq[i];
        run_job(&seq[i]);
        CHECK(seq[i].status == 200);
    }
    pthread_t th[N];
    for (int i = 0; i < N; i++) pthread_create(&th[i], NULL, job_thread, &par[i]);
    for (int i = 0; i < N; i++) pthread_join(th[i], NULL);
    for (int i = 0; i < N; i++) {
        CHECK_MSG(par[i].status == 200, "parallel request %d: status %d", i, par[i].status);
        CHECK_MSG(!strcmp(par[i].text, seq[i].text), "request %d: parallel '%s' vs sequential '%s'", i, par[i].text,
                  seq[i].text);
    }
}

static unsigned long long metric(const char *text, const char *name) {
    const char *p = text ? strstr(text, name) : NULL;
    while (p && p != text && p[-1] != '\n') p = strstr(p + 1, name);
    return p ? strtoull(p + strlen(name), NULL, 10) : 0;
}

/* A client that goes away mid-stream frees its slot (counted as cancelled). */
static void test_disconnect(void) {
    int fd = http_send_only(g_port, "POST", "/v1/completions", KEY,
                            "{\"prompt\": \"Go on and on\", \"temperature\": 1, \"max_tokens\": 200, \"stream\": true}");
    http_resp m0;
    http_request(g_port, "GET", "/metrics", KEY, NULL, &m0);
    unsigned long long before = metric(m0.body, "cmf_requests_finished_total{reason=\"cancelled\"} ");
    http_resp_free(&m0);
    CHECK(fd >= 0);
    char buf[256];
    CHECK(read(fd, buf, sizeof buf) > 0); /* the answer has started */
    close(fd);
    int cancelled = 0;
    for (int i = 0; i < 50 && !cancelled; i++) {
        http_resp r;
        http_request(g_port, "GET", "/metrics", KEY, NULL, &r);
        cancelled = metric(r.body, "cmf_requests_finished_total{reason=\"cancelled\"} ") > before;
        http_resp_free(&r);
        if (!cancelled) nanosleep(&(struct timespec){0, 100 * 1000 * 1000}, NULL);
    }
    CHECK_MSG(cancelled, "the disconnected stream was not cancelled");
}

/* Reads a raw answer to EOF (30 s at most per read). */
static char *read_all(int fd) {
    size_t cap = 1 << 16, n = 0;
    char *b = malloc(cap);
    for (;;) {
        if (n + 4096 > cap) b = realloc(b, cap *= 2);
        ssize_t k = read(fd, b + n, cap - n - 1);
        if (k <= 0) break;
        n += (size_t)k;
    }
    b[n] = 0;
    return b;
}

static unsigned long long metric_now(const char *name) {
    http_resp r;
    http_request(g_port, "GET", "/metrics", NULL, NULL, &r);
    unsigned long long v = metric(r.body, name);
    http_resp_free(&r);
    return v;
}

/* A second server: one slot, a queue of one, 1 s timeout, CORS. */
static void test_limits(const char *model) {
    server_proc srv;
    const char *args[] = {"--parallel", "1", "--max-queue", "1", "--timeout", "1", "-c", "4096", "-t", "1",
                          "--cors", "https://example.org", NULL};
    CHECK(server_start(&srv, model, args) == 0);
    if (srv.port <= 0) return;
    g_port = srv.port;
    const char *longreq = "{\"prompt\": \"Tell a long story\", \"temperature\": 1, \"max_tokens\": 4000, \"stream\": true}";
    int a = http_send_only(g_port, "POST", "/v1/completions", NULL, longreq);
    for (int i = 0; i < 100 && metric_now("cmf_slots_busy ") != 1; i++)
        nanosleep(&(struct timespec){0, 20 * 1000 * 1000}, NULL);
    int b = http_send_only(g_port, "POST", "/v1/completions", NULL, longreq);
    for (int i = 0; i < 100 && metric_now("cmf_queue_depth ") != 1; i++)
        nanosleep(&(struct timespec){0, 20 * 1000 * 1000}, NULL);
    CHECK(metric_now("cmf_queue_depth ") == 1);
    http_resp r;
    CHECK(http_request(g_port, "POST", "/v1/completions", NULL, longreq, &r) == 0);
    CHECK_MSG(r.status == 503, "a request over a full queue: status %d", r.status);
    cJSON *j = cJSON_Parse(r.body ? r.body : "");
    CHECK(is_error_shape(j, 503));
    cJSON_Delete(j);
    http_resp_free(&r);
    for (int k = 0; k < 2; k++) { /* one generating when cut ends as at max_tokens (finish_reason "length", as
                                     * llama-server's time limit), one cut before (queue, prompt) with a 504 event; b
                                     * gets a's slot just before its own deadline: either may happen */
        char *ans = read_all(k ? b : a);
        close(k ? b : a);
        CHECK_MSG(strstr(ans, "HTTP/1.1 200") == ans, "request %d: '%.40s'", k, ans);
        int e504 = strstr(ans, "\"code\":504") != NULL, len = strstr(ans, "\"finish_reason\":\"length\"") != NULL;
        CHECK_MSG(e504 != len && (k || len) && strstr(ans, "data: [DONE]"), "request %d: '%.300s'", k, ans);
        free(ans);
    }
    CHECK(metric_now("cmf_requests_finished_total{reason=\"timeout\"} ") == 2);
    http_resp mr; /* failed requests (HTTP 500 after admission) have their own reason; a timeout is not one */
    http_request(g_port, "GET", "/metrics", NULL, NULL, &mr);
    CHECK(mr.body && strstr(mr.body, "\ncmf_requests_finished_total{reason=\"error\"} 0\n"));
    http_resp_free(&mr);
    CHECK(metric_now("cmf_requests_rejected_total ") == 1);
    /* CORS: the preflight and the header on answers */
    const char *pre = "OPTIONS /v1/models HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    CHECK(http_raw(g_port, pre, strlen(pre), &r) == 0);
    char v[128];
    CHECK_MSG(r.status == 204 && http_header(&r, "Access-Control-Allow-Origin", v, sizeof v) &&
                  !strcmp(v, "https://example.org"), "status %d", r.status);
    http_resp_free(&r);
    CHECK(http_request(g_port, "GET", "/health", NULL, NULL, &r) == 0 && r.status == 200);
    CHECK(http_header(&r, "Access-Control-Allow-Origin", v, sizeof v) && !strcmp(v, "https://example.org"));
    http_resp_free(&r);
    CHECK_MSG(server_stop(&srv) == 0, "the second server did not exit cleanly");
}

int main(void) {
    char dir[1024], model[1024];
    snprintf(dir, sizeof dir, "%s", tmp_path("server-hf"));
    snprintf(model, sizeof model, "%s", tmp_path("server-tiny.cmf"));
    testmodel_spec sp = {shared_path("data/tokenizers/qwen3"), 151669, 32, 1, 4, 2, 8, 64, CMF_DT_F32, 7,
                         "[151645, 151643]", NULL, 0, 0};
    CHECK_MSG(testmodel_write(&sp, dir, model) == CMF_OK, "%s", cmf_last_error());
    cmf_model_params mp = {.n_threads = 1};
    CHECK_MSG(cmf_model_load(model, &mp, &g_m) == CMF_OK, "%s", cmf_last_error());
    if (!g_m) CMF_TEST_END();
    CHECK(cmf_model_vocab_size(g_m) == 151669 && cmf_model_tokenizer(g_m) != NULL);

    server_proc srv;
    const char *args[] = {"--api-key", KEY, "--parallel", "4", "-c", "256", "-t", "1", NULL};
    CHECK(server_start(&srv, model, args) == 0);
    if (srv.port <= 0) CMF_TEST_END();
    g_port = srv.port;

    http_resp r;
    http_request(g_port, "GET", "/metrics", KEY, NULL, &r);
    unsigned long long gen0 = metric(r.body, "cmf_generation_tokens_total ");
    unsigned long long req0 = metric(r.body, "cmf_requests_total{route=\"completions\"} ");
    http_resp_free(&r);

    test_routes_and_auth();
    test_tokenize_template();
    gen g;
    int32_t *prompt = NULL;
    int np = 0;
    test_completion_greedy(&g, &prompt, &np);
    test_stop_across_tokens(&g, prompt, np);
    gen_free(&g);
    free(prompt);
    test_stream_utf8();
    test_seed();
    test_chat();
    test_tool_choice();
    test_concurrency();

    http_request(g_port, "GET", "/metrics", KEY, NULL, &r);
    CHECK(r.status == 200);
    CHECK_MSG(metric(r.body, "cmf_generation_tokens_total ") > gen0 + 100, "generation tokens %llu -> %llu", gen0,
              metric(r.body, "cmf_generation_tokens_total "));
    CHECK(metric(r.body, "cmf_requests_total{route=\"completions\"} ") >= req0 + 20);
    CHECK(metric(r.body, "cmf_request_latency_seconds_count ") >= 20);
    CHECK(r.body && strstr(r.body, "cmf_time_to_first_token_seconds_bucket{le=\"+Inf\"}"));
    CHECK(r.body && strstr(r.body, "# TYPE cmf_request_latency_seconds histogram"));
    http_resp_free(&r);

    test_disconnect();
    CHECK_MSG(server_stop(&srv) == 0, "the server did not exit cleanly on SIGTERM");
    test_limits(model);
    cmf_model_free(g_m);
    CMF_TEST_END();
}
