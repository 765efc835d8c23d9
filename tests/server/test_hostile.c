/* test_hostile — 200+ generated malformed requests against `cmf serve` (stories260K, converted from its GGUF, with
 * an API key): bad JSON, wrong field types, huge and negative numbers, bodies over the 8 MiB limit, invalid UTF-8,
 * unknown fields, bad methods, paths and headers. Each must get a 4xx status with an answer whose message names no
 * internal function (no "cmf_tokenize: "), and afterwards the
 * server must still answer /health and generate the same greedy completion as before the attack, and exit 0 on
 * SIGTERM (under ASan in the sanitizer build: no leak, no memory error). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "client.h"
#include "testutil.h"

#define KEY "hostile-key"

static int g_port, g_total, g_4xx;

/* One raw request; the answer must be 4xx (any 4xx: 400, 401, 404, 405, 413, 414, 431 ...). */
static void expect_4xx(const char *what, const char *raw, size_t len) {
    http_resp r;
    int rc = http_raw(g_port, raw, len, &r);
    g_total++;
    if (rc == 0 && r.status >= 400 && r.status < 500)
        g_4xx++;
    else
        CHECK_MSG(0, "%s: status %d (rc %d), body %.200s", what, r.status, rc, r.body ? r.body : "");
    /* the message is for the client: no internal function name ("cmf_tokenize: ") or library prefix ("serve: ") */
    CHECK_MSG(!r.body || (!strstr(r.body, "cmf_") && !strstr(r.body, "serve: ")), "%s: internal name in %.300s", what,
              r.body);
    http_resp_free(&r);
}

static void req(const char *what, const char *method, const char *path, const char *auth, const char *extra_headers,
                const char *body, size_t body_len) {
    size_t cap = body_len + 4096 + strlen(path) + (extra_headers ? strlen(extra_headers) : 0);
    char *raw = malloc(cap);
    int n = snprintf(raw, cap, "%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n", method, path);
    if (auth) n += snprintf(raw + n, cap - (size_t)n, "Authorization: Bearer %s\r\n", auth);
    if (extra_headers) n += snprintf(raw + n, cap - (size_t)n, "%s", extra_headers);
    if (body) n += snprintf(raw + n, cap - (size_t)n, "Content-Type: application/json\r\nContent-Length: %zu\r\n", body_len);
    n += snprintf(raw + n, cap - (size_t)n, "\r\n");
    if (body) memcpy(raw + n, body, body_len);
    expect_4xx(what, raw, (size_t)n + (body ? body_len : 0));
    free(raw);
}

static void post(const char *path, const char *body) {
    req(body, "POST", path, KEY, NULL, body, strlen(body));
}

static const char *const GEN_ROUTES[] = {"/v1/chat/completions", "/v1/completions"};
static const char *const ALL_POST[] = {"/v1/chat/completions", "/v1/completions", "/tokenize", "/detokenize",
                                       "/apply-template"};

static void bad_json(void) {
    static const char *const bodies[] = {
        "", "{", "}", "[", "[]", "null", "true", "42", "\"str\"", "{\"a\":}", "{\"a\" 1}", "{'a': 1}",
        "{\"prompt\": \"x\",}", "{\"prompt\": \"x\"", "{\"prompt\": \"x\"}}", "{\"prompt\": \"\\x\"}",
        "{\"prompt\": \"\\u12\"}", "{\"prompt\": \"\\ud800\"}", "{\"prompt\": NaN}", "{\"a\": [1, 2,]}",
        "\x01\x02\x03", "{\"prompt\": \"x\"} trailing", "{\"max_tokens\": 01}", "{\"max_tokens\": -}",
    };
    for (size_t i = 0; i < sizeof bodies / sizeof bodies[0]; i++)
        for (size_t r = 0; r < sizeof ALL_POST / sizeof ALL_POST[0]; r++)
            req("bad json", "POST", ALL_POST[r], KEY, NULL, bodies[i], strlen(bodies[i]));
}

static void wrong_fields(void) {
    /* field: JSON values that are wrong for it (type, range, or not supported) */
    static const struct {
        const char *field, *values[8];
    } F[] = {
        {"temperature", {"\"hot\"", "[]", "{}", "-1", "1e308", "true", "101", NULL}},
        {"top_p", {"\"x\"", "0", "-0.5", "2", "1e999", "[1]", NULL}},
        {"top_k", {"\"5\"", "1.5", "-2", "1e20", "{}", NULL}},
        {"min_p", {"\"x\"", "-1", "1.5", "[]", NULL}},
        {"presence_penalty", {"\"x\"", "3", "-3", "1e300", NULL}},
        {"frequency_penalty", {"\"x\"", "2.5", "-1e10", NULL}},
        {"repetition_penalty", {"0", "-1", "\"x\"", "1e9", NULL}},
        {"seed", {"\"s\"", "1.5", "1e30", "-1e30", "[]", NULL}},
        {"n", {"2", "0", "-1", "\"1\"", "1e12", NULL}},
        {"max_tokens", {"-1", "0", "-1e18", "1e300", "\"5\"", "2.5", "[]", NULL}},
        {"max_completion_tokens", {"-5", "0", "\"x\"", "1e40", NULL}},
        {"stop", {"5", "{}", "[1]", "[\"a\",2]", "[\"1\",\"2\",\"3\",\"4\",\"5\",\"6\",\"7\",\"8\",\"9\",\"10\",\"11\",\"12\",\"13\",\"14\",\"15\",\"16\",\"17\"]", NULL}},
        {"stream", {"\"yes\"", "1", "[]", NULL}},
        {"stream_options", {"\"x\"", "[]", "{\"include_usage\": \"yes\"}", NULL}},
        {"logprobs", {"true", "5", NULL}},
        {"echo", {"true", "\"x\"", NULL}},
        {"model", {"5", "\"no-such-model\"", "[]", "{}", NULL}},
        {"logit_bias", {"{\"1\": 5}", "5", NULL}},
        {"response_format", {"{\"type\": \"json_schema\"}", "\"json\"", NULL}},
        {"suffix", {"\"x\"", NULL}},
        {"best_of", {"3", NULL}},
        {"unknown_field", {"1", "null", "\"x\"", NULL}},
        {"temprature", {"0.5", NULL}},
    };
    for (size_t f = 0; f < sizeof F / sizeof F[0]; f++)
        for (int v = 0; F[f].values[v]; v++)
            for (int r = 0; r < 2; r++) {
                char body[1024];
                snprintf(body, sizeof body, "{%s, \"%s\": %s}",
                         r == 0 ? "\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}]" : "\"prompt\": \"Once\"",
                         F[f].field, F[f].values[v]);
                post(GEN_ROUTES[r], body);
            }
    /* the prompt / messages themselves */
    static const char *const chat[] = {
        "{}", "{\"messages\": []}", "{\"messages\": \"hi\"}", "{\"messages\": {}}", "{\"messages\": null}",
        "{\"messages\": [1, 2]}", "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], \"tools\": 5}",
        "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], \"chat_template_kwargs\": []}",
        "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], \"add_generation_prompt\": \"y\"}",
    };
    for (size_t i = 0; i < sizeof chat / sizeof chat[0]; i++) post("/v1/chat/completions", chat[i]);
    static const char *const comp[] = {
        "{}", "{\"prompt\": 5}", "{\"prompt\": []}", "{\"prompt\": {}}", "{\"prompt\": [1.5]}", "{\"prompt\": [-1]}",
        "{\"prompt\": [1e12]}", "{\"prompt\": [\"a\", \"b\"]}", "{\"prompt\": [512]}", "{\"prompt\": [[]]}",
        "{\"prompt\": [[1, 2], [3]]}", "{\"prompt\": null}",
    };
    for (size_t i = 0; i < sizeof comp / sizeof comp[0]; i++) post("/v1/completions", comp[i]);
    static const char *const tok[] = {"{}", "{\"content\": 5}", "{\"content\": \"x\", \"add_special\": \"y\"}",
                                      "{\"content\": []}"};
    for (size_t i = 0; i < sizeof tok / sizeof tok[0]; i++) post("/tokenize", tok[i]);
    static const char *const detok[] = {"{}", "{\"tokens\": 5}", "{\"tokens\": [\"a\"]}", "{\"tokens\": [-1]}",
                                        "{\"tokens\": [1e9]}", "{\"tokens\": [0.5]}"};
    for (size_t i = 0; i < sizeof detok / sizeof detok[0]; i++) post("/detokenize", detok[i]);
    /* a prompt longer than the context (128) is a 400, not a truncation */
    char *big = malloc(64 * 1024);
    int n = snprintf(big, 64 * 1024, "{\"prompt\": \"");
    for (int i = 0; i < 300; i++) n += snprintf(big + n, (size_t)(64 * 1024 - n), "once upon ");
    snprintf(big + n, (size_t)(64 * 1024 - n), "\"}");
    post("/v1/completions", big);
    free(big);
}

static void invalid_utf8(void) {
    static const char *const bad[] = {"\xff", "\xfe\xff", "\xc0\xaf", "\xe0\x80\xaf", "\xed\xa0\x80", "\xf4\x90\x80\x80",
                                      "\xc3", "\xe4\xbd", "a\x80z", "\xf8\x88\x80\x80\x80"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char body[256];
        snprintf(body, sizeof body, "{\"messages\": [{\"role\": \"user\", \"content\": \"x%sy\"}]}", bad[i]);
        post("/v1/chat/completions", body);
        snprintf(body, sizeof body, "{\"prompt\": \"x%sy\"}", bad[i]);
        post("/v1/completions", body);
        snprintf(body, sizeof body, "{\"content\": \"%s\"}", bad[i]);
        post("/tokenize", body);
    }
}

static void big_bodies(void) {
    size_t n = 10u << 20; /* 10 MB: over the 8 MiB default limit */
    char *b = malloc(n + 64);
    memcpy(b, "{\"prompt\": \"", 12);
    memset(b + 12, 'a', n - 14);
    memcpy(b + n - 2, "\"}", 2);
    req("10 MB completion", "POST", "/v1/completions", KEY, NULL, b, n);
    req("10 MB tokenize", "POST", "/tokenize", KEY, NULL, b, n);
    /* a Content-Length that announces 10 MB but sends little: refused from the header alone */
    char raw[512];
    int k = snprintf(raw, sizeof raw,
                     "POST /v1/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\nAuthorization: Bearer " KEY
                     "\r\nContent-Length: %zu\r\n\r\n{\"prompt\":",
                     n);
    expect_4xx("announced 10 MB", raw, (size_t)k);
    free(b);
}

static void bad_http(void) {
    static const struct {
        const char *method, *path;
    } mp[] = {
        {"GET", "/v1/chat/completions"}, {"DELETE", "/v1/completions"}, {"PUT", "/tokenize"},
        {"PATCH", "/v1/models"},         {"POST", "/v1/models"},        {"POST", "/health"},
        {"GET", "/v2/chat"},             {"GET", "/../../etc/passwd"},  {"GET", "/v1/models/../../x"},
        {"GET", "/%00"},                 {"GET", "/v1/chat/completions%00"}, {"BREW", "/"},
        {"GET", "/metrics/x"},           {"POST", "/"},                  {"GET", "//"},
    };
    for (size_t i = 0; i < sizeof mp / sizeof mp[0]; i++) req("method/path", mp[i].method, mp[i].path, KEY, NULL, NULL, 0);
    /* authentication */
    req("no key", "GET", "/v1/models", NULL, NULL, NULL, 0);
    req("wrong key", "GET", "/v1/models", "hostile-kex", NULL, NULL, 0);
    req("key prefix", "GET", "/v1/models", "hostile", NULL, NULL, 0);
    req("basic auth", "GET", "/v1/models", NULL, "Authorization: Basic aG9zdGlsZS1rZXk=\r\n", NULL, 0);
    req("empty bearer", "GET", "/metrics", NULL, "Authorization: Bearer \r\n", NULL, 0);
    req("key + NUL", "POST", "/tokenize", NULL, "Authorization: Bearer hostile-key\\0\r\n", "{\"content\":\"a\"}", 15);
    /* a very long path and a huge header */
    char *longp = malloc(20000);
    longp[0] = '/';
    memset(longp + 1, 'a', 19998);
    longp[19999] = 0;
    req("long path", "GET", longp, KEY, NULL, NULL, 0);
    char *hdr = malloc(40000);
    int n = snprintf(hdr, 40000, "X-Big: ");
    memset(hdr + n, 'b', 39000 - (size_t)n);
    memcpy(hdr + 39000, "\r\n", 3);
    req("huge header", "GET", "/v1/models", KEY, hdr, NULL, 0);
    free(longp);
    free(hdr);
    /* raw protocol garbage */
    static const char *const raws[] = {
        "GET /v1/models HTTP/1.1\r\nConnection: close\r\n\r\n",              /* HTTP/1.1 without Host */
        "POST /v1/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: abc\r\n\r\n{}",
        "POST /v1/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: -5\r\n\r\n{}",
        "POST /v1/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: 99999999999999999999999\r\n\r\n",
        "GET /v1/models HTTP/1.1\r\nHost: x\r\nConnection: close\r\nBad Header Line\r\n\r\n",
        "GET /v1/models HTTP/1.1\r\nHost: x\r\nConnection: close\r\n: empty-name\r\n\r\n",
        "POST /v1/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\nAuthorization: Bearer " KEY
        "\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n",
    };
    for (size_t i = 0; i < sizeof raws / sizeof raws[0]; i++) expect_4xx(raws[i], raws[i], strlen(raws[i]));
    /* an unknown HTTP version is the one malformed request whose right answer is a 5xx (505, RFC 9110 15.6.6) */
    static const char v99[] = "GET /v1/models HTTP/9.9\r\nHost: x\r\nConnection: close\r\n\r\n";
    http_resp r;
    CHECK(http_raw(g_port, v99, sizeof v99 - 1, &r) == 0 && r.status == 505);
    http_resp_free(&r);
}

/* The text of a greedy completion (usage differs between runs: the second one reuses the cached prompt). */
static char *greedy(void) {
    http_resp r;
    CHECK(http_request(g_port, "POST", "/v1/completions", KEY,
                       "{\"prompt\": \"Once upon a time\", \"temperature\": 0, \"max_tokens\": 24}", &r) == 0);
    CHECK_MSG(r.status == 200, "status %d: %s", r.status, r.body ? r.body : "");
    cJSON *j = r.body ? cJSON_Parse(r.body) : NULL;
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(j, "choices"), 0), "text");
    char *b = cJSON_IsString(t) ? strdup(t->valuestring) : NULL;
    cJSON_Delete(j);
    http_resp_free(&r);
    return b;
}

int main(void) {
    char model[1024];
    CHECK_MSG(stories_model("hostile-stories.cmf", model, sizeof model, NULL) == CMF_OK, "%s", cmf_last_error());
    server_proc srv;
    const char *args[] = {"--api-key", KEY, "--parallel", "2", "-c", "128", "-t", "1", NULL};
    CHECK(server_start(&srv, model, args) == 0);
    if (srv.port <= 0) CMF_TEST_END();
    g_port = srv.port;
    char *before = greedy();

    bad_json();
    wrong_fields();
    invalid_utf8();
    big_bodies();
    bad_http();

    fprintf(stderr, "test_hostile: %d malformed requests, %d answered 4xx\n", g_total, g_4xx);
    CHECK_MSG(g_total >= 200, "only %d requests generated", g_total);
    http_resp r;
    CHECK(http_request(g_port, "GET", "/health", NULL, NULL, &r) == 0 && r.status == 200);
    http_resp_free(&r);
    char *after = greedy();
    CHECK_MSG(before && after && !strcmp(before, after), "the server answers differently after the attack: %s vs %s",
              before ? before : "", after ? after : "");
    free(before);
    free(after);
    CHECK_MSG(server_stop(&srv) == 0, "the server did not exit cleanly");
    CMF_TEST_END();
}
