/* test_timeout — `cmf serve --timeout` (cmf_server_opts.timeout_s) cutting a request that is generating
 * (/tmp/review11/REPORT.md item 13). llama-server's time limit (t_max_predict_ms; tools/server/server-context.cpp
 * sets STOP_TYPE_LIMIT, which server-task.cpp answers as finish_reason "length") returns the text generated so far;
 * cmf answered 504 and dropped it. Now, on /v1/completions and /v1/chat/completions, a non-streamed request cut
 * while generating is a 200 whose choice has finish_reason "length", the text so far (not empty) and usage
 * completion_tokens between 1 and max_tokens - 1; the metrics count both as timeouts. (The streamed case, which
 * now ends with the same finish_reason instead of an error event, and a request timed out in the queue, still a
 * 504, are checked by test_server's test_limits.)
 * The model: test_server's random one-layer model with the qwen3 tokenizer (151,669 ids: a slow head, so 4000
 * tokens take several seconds on one thread), `ignore_eos` so that no end token stops it early. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "client.h"
#include "cmf.h"
#include "quant/dtype.h"
#include "server/server.h"
#include "testmodel.h"
#include "testutil.h"

#define MAX_TOKENS 4000

/* j.choices[0] */
static const cJSON *choice0(const cJSON *j) {
    return cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(j, "choices"), 0);
}

static const char *str_of(const cJSON *o, const char *name) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* A request cut by the timeout: 200, finish_reason "length", the partial text, 0 < completion_tokens < max. */
static void expect_partial(int port, const char *path, const char *body, int chat) {
    cJSON *j = NULL;
    int st = http_post_json(port, path, body, &j);
    const cJSON *c = choice0(j);
    const char *reason = str_of(c, "finish_reason");
    const char *text = chat ? str_of(cJSON_GetObjectItemCaseSensitive(c, "message"), "content") : str_of(c, "text");
    const cJSON *ct = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(j, "usage"),
                                                       "completion_tokens");
    int n = cJSON_IsNumber(ct) ? ct->valueint : -1;
    char *dump = j ? cJSON_PrintUnformatted(j) : NULL;
    CHECK_MSG(st == 200 && reason && !strcmp(reason, "length") && text && text[0] && n > 0 && n < MAX_TOKENS,
              "%s: status %d, finish_reason %s, %d completion tokens, answer %.300s", path, st,
              reason ? reason : "(none)", n, dump ? dump : "(none)");
    free(dump);
    cJSON_Delete(j);
}

/* The value of a metric line "name value" in /metrics, or -1. */
static long long metric_value(int port, const char *name) {
    http_resp r;
    if (http_request(port, "GET", "/metrics", NULL, NULL, &r) != 0) return -1;
    const char *p = r.body ? strstr(r.body, name) : NULL;
    long long v = p ? strtoll(p + strlen(name), NULL, 10) : -1;
    http_resp_free(&r);
    return v;
}

int main(void) {
    char dir[1024], model[1024];
    snprintf(dir, sizeof dir, "%s", tmp_path("timeout-hf"));
    snprintf(model, sizeof model, "%s", tmp_path("timeout-tiny.cmf"));
    testmodel_spec sp = {shared_path("data/tokenizers/qwen3"), 151669, 32, 1, 4, 2, 8, 64, CMF_DT_F32, 7,
                         "[151645, 151643]", NULL, 0, 0};
    CHECK_MSG(testmodel_write(&sp, dir, model) == CMF_OK, "%s", cmf_last_error());
    cmf_model_params mp = {.n_threads = 1};
    cmf_model *m = NULL;
    CHECK_MSG(cmf_model_load(model, &mp, &m) == CMF_OK, "%s", cmf_last_error());
    if (!m) CMF_TEST_END();
    cmf_server_opts o = cmf_server_default_opts();
    o.port = 0, o.n_slots = 1, o.n_ctx = 4096, o.timeout_s = 1.0;
    cmf_server *s = NULL;
    CHECK_MSG(cmf_server_start(m, &o, &s) == CMF_OK, "%s", cmf_last_error());
    if (s) {
        int port = cmf_server_port(s);
        char body[512];
        snprintf(body, sizeof body, "{\"prompt\":\"Tell a long story\",\"max_tokens\":%d,\"ignore_eos\":true}",
                 MAX_TOKENS);
        expect_partial(port, "/v1/completions", body, 0);
        snprintf(body, sizeof body,
                 "{\"messages\":[{\"role\":\"user\",\"content\":\"Tell a long story\"}],\"max_tokens\":%d,"
                 "\"ignore_eos\":true}",
                 MAX_TOKENS);
        expect_partial(port, "/v1/chat/completions", body, 1);
        long long t = metric_value(port, "cmf_requests_finished_total{reason=\"timeout\"} ");
        CHECK_MSG(t == 2, "timeouts counted: %lld (want 2)", t);
        t = metric_value(port, "cmf_requests_finished_total{reason=\"length\"} ");
        CHECK_MSG(t == 0, "finished by length: %lld (want 0: both were timeouts)", t);
    }
    cmf_server_stop(s);
    cmf_model_free(m);
    CMF_TEST_END();
}
