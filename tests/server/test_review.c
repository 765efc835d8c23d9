/* test_review — the findings of a new user's review of `cmf serve`, each checked against a live server: the
 * random-weight Qwen3 test model (testmodel.c: real Qwen3 tokenizer and chat template) served in-process by
 * cmf_server_start, plus `cmf serve` child processes for the command-line side.
 *   1. the port in use: cmf_server_start and `cmf serve` fail with a message naming host:port (before the fix the
 *      message read freed memory: ASan's heap-use-after-free in the sanitizer build), the CLI exits non-zero;
 *   2. OpenAI's multi-turn tool flow (assistant "content": null with tool_calls, then a tool message) renders as
 *      the template renders "content": ""; a user/system message with null or numeric content is a 400 naming
 *      messages[i].content;
 *   3. a string with a \u0000 escape is a 400 on every JSON route (an escaped backslash before "u0000" is not);
 *   4. HEAD on GET routes: the GET status and headers, no body;
 *   5. a 503 for a full queue carries Retry-After: 1;
 *   6. /v1/completions "logprobs": 0 / false / null are accepted (off), 5 is "logprobs is not supported";
 *   7. --host ::1 prints http://[::1]:PORT (when this machine can bind ::1);
 *   8. the idle timeout (1 s in this test) closes a client that stops sending its headers, but never a client that
 *      waits for its answer (a request queued 2.5 s behind another, non-stream and stream). */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "client.h"
#include "quant/dtype.h"
#include "server/internal.h"
#include "testmodel.h"
#include "testutil.h"

static int g_port;
static cmf_model *g_m;

static void sleep_ms(long ms) { nanosleep(&(struct timespec){ms / 1000, (ms % 1000) * 1000000L}, NULL); }

/* POSTs body to path; checks the status; returns the parsed answer (caller frees). */
static cJSON *post(const char *path, const char *body, int want) {
    http_resp r;
    int rc = http_request(g_port, "POST", path, NULL, body, &r);
    CHECK_MSG(rc == 0 && r.status == want, "POST %s %.120s: status %d (want %d): %s", path, body, r.status, want,
              r.body ? r.body : "");
    cJSON *j = r.body ? cJSON_Parse(r.body) : NULL;
    http_resp_free(&r);
    return j;
}

static const char *err_field(const cJSON *j, const char *name) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(j, "error"), name);
    return cJSON_IsString(v) ? v->valuestring : "";
}

/* ---- 2. null content ------------------------------------------------------------------------------------------ */
static const char *TOOLS = "[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"description\":\"Weather "
                           "of a city\",\"parameters\":{\"type\":\"object\",\"properties\":{\"city\":{\"type\":"
                           "\"string\"}}}}}]";

static char *turns(const char *assistant_content) {
    char *m = malloc(1024);
    snprintf(m, 1024,
             "[{\"role\":\"user\",\"content\":\"Weather in Paris?\"},{\"role\":\"assistant\",\"content\":%s,"
             "\"tool_calls\":[{\"id\":\"call_1\",\"type\":\"function\",\"function\":{\"name\":\"get_weather\","
             "\"arguments\":\"{\\\"city\\\": \\\"Paris\\\"}\"}}]},{\"role\":\"tool\",\"tool_call_id\":\"call_1\","
             "\"content\":\"sunny, 21 C\"}]",
             assistant_content);
    return m;
}

static void test_null_content(void) {
    char *with_null = turns("null"), *with_empty = turns("\"\"");
    cmf_chat_params p = cmf_chat_default_params();
    p.messages_json = with_empty;
    p.tools_json = TOOLS;
    char *want = NULL;
    CHECK_MSG(cmf_chat_render(g_m, &p, &want, NULL) == CMF_OK, "%s", cmf_last_error());
    CHECK(want && strstr(want, "<tool_call>") && strstr(want, "<tool_response>\nsunny, 21 C"));
    char body[4096];
    snprintf(body, sizeof body, "{\"messages\": %s, \"tools\": %s}", with_null, TOOLS);
    cJSON *j = post("/apply-template", body, 200);
    const cJSON *got = cJSON_GetObjectItemCaseSensitive(j, "prompt");
    CHECK_MSG(want && cJSON_IsString(got) && !strcmp(got->valuestring, want), "%s", cJSON_IsString(got) ? got->valuestring : "");
    cJSON_Delete(j);
    snprintf(body, sizeof body, "{\"messages\": %s, \"tools\": %s, \"max_tokens\": 2}", with_null, TOOLS);
    cJSON_Delete(post("/v1/chat/completions", body, 200));
    free(want), free(with_null), free(with_empty);

    static const char *const bad[][2] = {
        {"[{\"role\":\"user\",\"content\":null}]", "messages[0].content"},
        {"[{\"role\":\"system\",\"content\":5},{\"role\":\"user\",\"content\":\"Hi\"}]", "messages[0].content"},
        {"[{\"role\":\"system\",\"content\":\"Be brief\"},{\"role\":\"user\",\"content\":1.5}]", "messages[1].content"},
        {"[{\"role\":\"user\",\"content\":\"Hi\"},{\"content\":\"x\"}]", "messages[1].role"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        for (int route = 0; route < 2; route++) {
            snprintf(body, sizeof body, "{\"messages\": %s}", bad[i][0]);
            j = post(route ? "/v1/chat/completions" : "/apply-template", body, 400);
            CHECK_MSG(!strcmp(err_field(j, "param"), bad[i][1]) && strstr(err_field(j, "message"), bad[i][1]) &&
                          !strstr(err_field(j, "message"), "NoneType"),
                      "%s: %s / %s", bad[i][0], err_field(j, "param"), err_field(j, "message"));
            cJSON_Delete(j);
        }
}

/* ---- 3. \u0000 ------------------------------------------------------------------------------------------------ */
static void test_escaped_nul(void) {
    static const char *const bad[][2] = {
        {"/tokenize", "{\"content\": \"a\\u0000b\"}"},
        {"/apply-template", "{\"messages\": [{\"role\":\"user\",\"content\":\"x\\u0000y\"}]}"},
        {"/v1/completions", "{\"prompt\": \"Once\\u0000 upon\", \"max_tokens\": 1}"},
        {"/v1/chat/completions", "{\"messages\": [{\"role\":\"user\",\"content\":\"\\\\\\u0000\"}], \"max_tokens\": 1}"},
        {"/detokenize", "{\"tokens\": [], \"x\\u0000\": 1}"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        cJSON *j = post(bad[i][0], bad[i][1], 400);
        CHECK_MSG(strstr(err_field(j, "message"), "\\u0000") != NULL, "%s: %s", bad[i][1], err_field(j, "message"));
        cJSON_Delete(j);
    }
    /* "\\u0000" is an escaped backslash and the text u0000: 7 characters, tokenized whole */
    int32_t *ids = NULL;
    size_t n = 0;
    CHECK(cmf_tokenize(cmf_model_tokenizer(g_m), "a\\u0000b", 8, 0, &ids, &n) == CMF_OK && n > 0);
    cJSON *j = post("/tokenize", "{\"content\": \"a\\\\u0000b\"}", 200);
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(j, "tokens");
    CHECK_MSG(cJSON_GetArraySize(t) == (int)n, "%d tokens, want %zu", cJSON_GetArraySize(t), n);
    for (int i = 0; i < (int)n && i < cJSON_GetArraySize(t); i++) CHECK(cJSON_GetArrayItem(t, i)->valueint == ids[i]);
    cJSON_Delete(j);
    free(ids);
}

/* ---- 4, 6 ----------------------------------------------------------------------------------------------------- */
static void test_head_and_logprobs(void) {
    http_resp g, h;
    CHECK(http_request(g_port, "GET", "/health", NULL, NULL, &g) == 0 && g.status == 200 && g.body_len > 0);
    const char *raw = "HEAD /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    CHECK(http_raw(g_port, raw, strlen(raw), &h) == 0);
    char a[64] = "", b[64] = "";
    CHECK_MSG(h.status == 200 && h.body_len == 0, "HEAD /health: status %d, %zu body bytes", h.status, h.body_len);
    CHECK(http_header(&g, "Content-Type", a, sizeof a) && http_header(&h, "Content-Type", b, sizeof b) && !strcmp(a, b));
    http_resp_free(&g), http_resp_free(&h);
    raw = "HEAD /v1/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"; /* a POST route stays 405 */
    CHECK(http_raw(g_port, raw, strlen(raw), &h) == 0 && h.status == 405);
    http_resp_free(&h);

    static const char *const off[] = {"0", "false", "null"};
    char body[256];
    for (int i = 0; i < 3; i++) {
        snprintf(body, sizeof body, "{\"prompt\": \"Once upon\", \"max_tokens\": 2, \"logprobs\": %s}", off[i]);
        cJSON_Delete(post("/v1/completions", body, 200));
    }
    static const char *const on[] = {"5", "1", "true"};
    for (int i = 0; i < 3; i++) {
        snprintf(body, sizeof body, "{\"prompt\": \"Once upon\", \"max_tokens\": 2, \"logprobs\": %s}", on[i]);
        cJSON *j = post("/v1/completions", body, 400);
        CHECK_MSG(!strcmp(err_field(j, "message"), "logprobs is not supported"), "%s", err_field(j, "message"));
        cJSON_Delete(j);
    }
}

/* ---- 5. a full queue ------------------------------------------------------------------------------------------ */
static int queue_state(cmf_server *s, int *busy) {
    pthread_mutex_lock(&s->mu);
    int q = s->q_len;
    *busy = s->busy;
    pthread_mutex_unlock(&s->mu);
    return q;
}

/* Waits until the server has `queued` requests in its queue and `busy` slots busy (-1: any), polling every 10 ms for
 * up to STATE_WAIT_S seconds of wall time (a deadline, not a count of sleeps: on a loaded 2-core machine a 10 ms
 * sleep can take much longer). Returns 1 when the state was reached, 0 at the deadline. */
enum { STATE_WAIT_S = 60 };
static int wait_state(cmf_server *s, int queued, int busy) {
    const double end = srv_now() + STATE_WAIT_S;
    for (;;) {
        int b = 0, q = queue_state(s, &b);
        if ((queued < 0 || q == queued) && (busy < 0 || b == busy)) return 1;
        if (srv_now() > end) return 0;
        sleep_ms(10);
    }
}

static void test_retry_after(cmf_server *s) {
    /* greedy, so that the random model cannot end it early by sampling an end-of-sequence token; 30000 tokens, so
     * that the first request still runs when the checks below look (4000 took ~2 s once greedy stopped copying the
     * 151669 logits per token, and a loaded machine could then see it end before the queue check); not streamed,
     * so that no event fills the socket of a client that never reads */
    const char *longreq = "{\"prompt\": \"Tell a long story\", \"max_tokens\": 30000, \"temperature\": 0}";
    CHECK_MSG(wait_state(s, 0, 0), "the server is not idle before the queue test");
    int a = http_send_only(g_port, "POST", "/v1/completions", NULL, longreq), busy = 0;
    CHECK_MSG(wait_state(s, 0, 1), "the first request did not start within %d s", STATE_WAIT_S);
    int b = http_send_only(g_port, "POST", "/v1/completions", NULL, longreq);
    CHECK_MSG(wait_state(s, 1, 1), "the second request was not queued within %d s", STATE_WAIT_S);
    CHECK_MSG(queue_state(s, &busy) == 1 && busy == 1, "queue %d, busy %d", queue_state(s, &busy), busy);
    http_resp r;
    CHECK(http_request(g_port, "POST", "/v1/completions", NULL, longreq, &r) == 0);
    char v[32] = "";
    CHECK_MSG(r.status == 503 && http_header(&r, "Retry-After", v, sizeof v) && !strcmp(v, "1"),
              "status %d, Retry-After '%s'", r.status, v);
    http_resp_free(&r);
    close(a), close(b); /* the server cancels both */
    CHECK_MSG(wait_state(s, 0, 0), "the two closed requests were not cancelled within %d s", STATE_WAIT_S);
}

/* ---- 8. the idle timeout (1 s here) ---------------------------------------------------------------------------- */
/* Reads what the server sends until it closes (READ_ALL_S seconds at most: every server answer here ends well before
 * that, even on a loaded machine). */
enum { READ_ALL_S = 60 };
static char *read_all(int fd) {
    size_t cap = 1 << 16, n = 0;
    char *b = malloc(cap);
    struct pollfd pf = {fd, POLLIN, 0};
    const double t0 = srv_now();
    while (srv_now() - t0 < READ_ALL_S && poll(&pf, 1, 200) >= 0) {
        if (!(pf.revents & (POLLIN | POLLHUP | POLLERR))) continue;
        if (n + 4096 > cap) b = realloc(b, cap *= 2);
        ssize_t k = recv(fd, b + n, cap - n - 1, 0);
        if (k <= 0) break;
        n += (size_t)k;
    }
    b[n] = 0;
    return b;
}

static void test_idle_timeout(cmf_server *s) {
    /* a client that stops in the middle of its headers is closed after about 1 s */
    int fd = http_send_only(g_port, "GET", "/health", NULL, NULL); /* complete request: answered */
    char *ans = read_all(fd);
    CHECK(strstr(ans, "HTTP/1.1 200") == ans);
    free(ans), close(fd);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)g_port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    fd = socket(AF_INET, SOCK_STREAM, 0);
    CHECK(connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0);
    const char *part = "GET /health HTTP/1.1\r\nHost: x\r\n";
    CHECK(send(fd, part, strlen(part), 0) == (ssize_t)strlen(part));
    double t0 = srv_now();
    ans = read_all(fd);
    double waited = srv_now() - t0;
    /* closed by the 1 s timeout: not before 0.5 s, and well before read_all gives up (libmicrohttpd's connection
     * thread may wake late on a loaded machine; a server without the timeout never closes it) */
    CHECK_MSG(!*ans && waited > 0.5 && waited < READ_ALL_S / 2, "half-sent headers: closed after %.2f s, answer '%.60s'",
              waited, ans);
    free(ans), close(fd);

    /* a request queued for longer than the idle timeout behind a long one still gets its answer, non-stream and
     * stream: the timeout is off while the client waits for us */
    static const char *const waiting[] = {"{\"prompt\": \"Once upon\", \"max_tokens\": 3}",
                                          "{\"prompt\": \"Once upon\", \"max_tokens\": 3, \"stream\": true}"};
    const char *longreq =
        "{\"prompt\": \"Tell a long story\", \"max_tokens\": 30000, \"temperature\": 0, \"stream\": true}";
    for (int k = 0; k < 2; k++) {
        CHECK_MSG(wait_state(s, 0, 0), "request %d: the server is not idle before it", k);
        int busy = 0, a = http_send_only(g_port, "POST", "/v1/completions", NULL, longreq);
        CHECK_MSG(wait_state(s, 0, 1), "request %d: the long request did not start within %d s", k, STATE_WAIT_S);
        int b = http_send_only(g_port, "POST", "/v1/completions", NULL, waiting[k]);
        CHECK_MSG(wait_state(s, 1, 1), "request %d: not queued within %d s", k, STATE_WAIT_S);
        sleep_ms(2500); /* 2.5 times the idle timeout in the queue */
        CHECK_MSG(queue_state(s, &busy) == 1 && busy == 1, "request %d: not queued behind the long one", k);
        close(a); /* the long request is cancelled; the waiting one runs */
        ans = read_all(b);
        close(b);
        CHECK_MSG(strstr(ans, "HTTP/1.1 200") == ans &&
                      strstr(ans, k ? "data: [DONE]" : "\"completion_tokens\":3") != NULL,
                  "request %d waited 2.5 s: '%.300s'", k, ans);
        free(ans);
        CHECK_MSG(wait_state(s, 0, 0), "request %d: the server did not become idle within %d s", k, STATE_WAIT_S);
    }
}

/* ---- 1, 7: the command line ----------------------------------------------------------------------------------- */
/* Runs `cmf serve model args...` (client.c cli_run_until: the exit status, -2 when `until` appeared, -1). */
static int run_serve(const char *model, const char *const *args, const char *log, const char *until, int wait_s) {
    const char *argv[24];
    int n = 0;
    argv[n++] = "serve", argv[n++] = model;
    for (int i = 0; args[i] && n < 22; i++) argv[n++] = args[i];
    argv[n] = NULL;
    return cli_run_until(argv, log, until, wait_s);
}

static void test_cli(const char *model) {
    char port[16], want[64];
    snprintf(port, sizeof port, "%d", g_port);
    snprintf(want, sizeof want, "127.0.0.1:%d", g_port);
    const char *log = tmp_path("review-serve.log");
    const char *busy_args[] = {"--port", port, "-t", "1", "-c", "64", NULL};
    int rc = run_serve(model, busy_args, log, NULL, 60);
    char *out = slurp_file(log);
    CHECK_MSG(rc > 0 && rc < 128 && strstr(out, want) && strstr(out, "cannot listen"),
              "port in use: exit %d, output '%s'", rc, out);
    free(out);

    int fd = socket(AF_INET6, SOCK_STREAM, 0);
    struct sockaddr_in6 sa = {.sin6_family = AF_INET6, .sin6_addr = IN6ADDR_LOOPBACK_INIT};
    int v6 = fd >= 0 && bind(fd, (struct sockaddr *)&sa, sizeof sa) == 0;
    if (fd >= 0) close(fd);
    if (!v6) {
        printf("note: this machine cannot bind ::1; the IPv6 URL check is skipped\n");
        return;
    }
    const char *v6_args[] = {"--host", "::1", "--port", "0", "-t", "1", "-c", "64", NULL};
    rc = run_serve(model, v6_args, log, "listening on", 60);
    out = slurp_file(log);
    CHECK_MSG(rc == -2 && strstr(out, "listening on http://[::1]:"), "--host ::1: exit %d, output '%s'", rc, out);
    free(out);
}

int main(void) {
    char dir[1024], model[1024];
    snprintf(dir, sizeof dir, "%s", tmp_path("review-hf"));
    snprintf(model, sizeof model, "%s", tmp_path("review-tiny.cmf"));
    testmodel_spec sp = {shared_path("data/tokenizers/qwen3"), 151669, 32, 1, 4, 2, 8, 64, CMF_DT_F32, 11,
                         "[151645, 151643]", NULL, 0, 0};
    CHECK_MSG(testmodel_write(&sp, dir, model) == CMF_OK, "%s", cmf_last_error());
    cmf_model_params mp = {.n_threads = 1};
    CHECK_MSG(cmf_model_load(model, &mp, &g_m) == CMF_OK, "%s", cmf_last_error());
    if (!g_m) CMF_TEST_END();

    cmf_server_opts o = cmf_server_default_opts();
    o.port = 0, o.n_slots = 1, o.max_queue = 1, o.n_ctx = 32768, o.idle_timeout_s = 1;
    cmf_server *s = NULL;
    CHECK_MSG(cmf_server_start(g_m, &o, &s) == CMF_OK, "%s", cmf_last_error());
    if (!s) CMF_TEST_END();
    g_port = cmf_server_port(s);

    /* 1. the same port again: an error naming host:port (read after the half-started server was freed) */
    cmf_server *s2 = NULL;
    o.port = g_port;
    char want[64];
    snprintf(want, sizeof want, "127.0.0.1:%d", g_port);
    CHECK(cmf_server_start(g_m, &o, &s2) == CMF_E_IO && s2 == NULL);
    CHECK_MSG(strstr(cmf_last_error(), want) != NULL, "%s", cmf_last_error());

    test_null_content();
    test_escaped_nul();
    test_head_and_logprobs();
    test_retry_after(s);
    test_idle_timeout(s);
    test_cli(model);

    cmf_server_stop(s);
    cmf_model_free(g_m);
    CMF_TEST_END();
}
