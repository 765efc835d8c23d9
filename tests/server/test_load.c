/* test_load — 32 concurrent streaming clients x 64 tokens against `cmf serve --parallel 32` on stories260K
 * (converted from its GGUF): every stream must be a well-formed SSE answer (200, JSON chunks, a finish chunk, the
 * usage chunk, [DONE]) with 64 completion tokens or an earlier end-of-sequence, and each client's text must equal
 * the same request (same seed) replayed alone afterwards. The server must then report no busy slot and no queue, and
 * exit 0 on SIGTERM; in the ASan+UBSan build (scripts/test.sh) a leak or memory error in the server makes that exit
 * status non-zero, so the test fails. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "client.h"
#include "testutil.h"

#define N_CLIENTS 32
#define MAX_TOKENS 64

static int g_port;

typedef struct job {
    int idx, status, tokens, events, done_seen, usage_seen, bad_json;
    char finish[16];
    char *text;
} job;

static void run(job *j) {
    char body[512];
    snprintf(body, sizeof body,
             "{\"prompt\": \"Once upon a time %d\", \"temperature\": 0.8, \"seed\": %d, \"max_tokens\": %d, "
             "\"stream\": true, \"stream_options\": {\"include_usage\": true}}",
             j->idx, 1000 + j->idx, MAX_TOKENS);
    http_resp r;
    j->status = http_request(g_port, "POST", "/v1/completions", NULL, body, &r) == 0 ? r.status : 0;
    size_t cap = 1, len = 0;
    j->text = calloc(1, 1);
    for (char *p = r.body ? strstr(r.body, "data: ") : NULL; p; p = strstr(p, "data: ")) {
        p += 6;
        char *end = strstr(p, "\n\n");
        if (!end) break;
        *end = 0;
        j->events++;
        if (!strcmp(p, "[DONE]")) {
            j->done_seen = 1;
        } else {
            cJSON *e = cJSON_Parse(p);
            if (!e) j->bad_json++;
            const cJSON *ch = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(e, "choices"), 0);
            const cJSON *t = cJSON_GetObjectItemCaseSensitive(ch, "text");
            const cJSON *f = cJSON_GetObjectItemCaseSensitive(ch, "finish_reason");
            const cJSON *u = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(e, "usage"),
                                                              "completion_tokens");
            if (cJSON_IsString(t)) {
                size_t n = strlen(t->valuestring);
                while (len + n + 1 > cap) j->text = realloc(j->text, cap *= 2);
                memcpy(j->text + len, t->valuestring, n + 1);
                len += n;
            }
            if (cJSON_IsString(f)) snprintf(j->finish, sizeof j->finish, "%s", f->valuestring);
            if (cJSON_IsNumber(u)) j->usage_seen = 1, j->tokens = u->valueint;
            cJSON_Delete(e);
        }
        p = end + 2;
    }
    http_resp_free(&r);
}

static void *thread_main(void *arg) {
    run(arg);
    return NULL;
}

static unsigned long long metric(const char *name) {
    http_resp r;
    unsigned long long v = ~0ULL;
    if (http_request(g_port, "GET", "/metrics", NULL, NULL, &r) == 0 && r.body) {
        const char *p = strstr(r.body, name);
        if (p) v = strtoull(p + strlen(name), NULL, 10);
    }
    http_resp_free(&r);
    return v;
}

int main(void) {
    char model[1024];
    CHECK_MSG(stories_model("load-stories.cmf", model, sizeof model, NULL) == CMF_OK, "%s", cmf_last_error());
    server_proc srv;
    const char *args[] = {"--parallel", "32", "-c", "128", "-t", "2", NULL};
    CHECK(server_start(&srv, model, args) == 0);
    if (srv.port <= 0) CMF_TEST_END();
    g_port = srv.port;

    job jobs[N_CLIENTS];
    pthread_t th[N_CLIENTS];
    for (int i = 0; i < N_CLIENTS; i++) {
        memset(&jobs[i], 0, sizeof jobs[i]);
        jobs[i].idx = i;
        CHECK(pthread_create(&th[i], NULL, thread_main, &jobs[i]) == 0);
    }
    int total = 0;
    for (int i = 0; i < N_CLIENTS; i++) {
        pthread_join(th[i], NULL);
        job *j = &jobs[i];
        CHECK_MSG(j->status == 200 && j->done_seen && j->usage_seen && !j->bad_json && j->events >= 4,
                  "client %d: status %d, %d events, done %d, usage %d, bad json %d", i, j->status, j->events,
                  j->done_seen, j->usage_seen, j->bad_json);
        CHECK_MSG(j->tokens == MAX_TOKENS ? !strcmp(j->finish, "length") : (j->tokens > 0 && !strcmp(j->finish, "stop")),
                  "client %d: %d tokens, finish '%s'", i, j->tokens, j->finish);
        total += j->tokens;
    }
    fprintf(stderr, "test_load: %d clients, %d tokens streamed\n", N_CLIENTS, total);
    CHECK(metric("cmf_slots_busy ") == 0);
    CHECK(metric("cmf_queue_depth ") == 0);
    /* the same requests one at a time: batching must not change what a request generates */
    int same = 0;
    for (int i = 0; i < N_CLIENTS; i++) {
        job alone;
        memset(&alone, 0, sizeof alone);
        alone.idx = i;
        run(&alone);
        same += alone.status == 200 && !strcmp(alone.text, jobs[i].text);
        CHECK_MSG(alone.status == 200 && !strcmp(alone.text, jobs[i].text), "client %d: batched '%s' vs alone '%s'",
                  i, jobs[i].text, alone.text);
        free(alone.text);
        free(jobs[i].text);
    }
    fprintf(stderr, "test_load: %d of %d texts equal when replayed alone\n", same, N_CLIENTS);
    CHECK_MSG(server_stop(&srv) == 0, "the server did not exit 0 (under ASan: a leak or memory error)");
    CMF_TEST_END();
}
