/* bench_server — aggregate decode throughput of `cmf serve` with 1, 4 and 8 concurrent requests.
 * Writes (once) a random-weight Qwen3-shaped model: hidden 1024, 8 layers, 16 heads / 4 KV heads (head_dim 64),
 * FFN 2816, vocab 32000 (Mistral's tokenizer from shared/data/tokenizers/mistral), q8_row matrices; starts the
 * server with --parallel 8 and times greedy /v1/completions requests (64 new tokens each, 8-token prompts).
 * Usage (from a build directory): CMF_SHARED=../../shared CMF_BIN=./cmf CMF_TMP=/tmp tests/server/bench_server
 * [max_tokens] [threads]. Prints one line per concurrency: streams, tokens, seconds, aggregate tok/s. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include <cjson/cJSON.h>

#include "client.h"
#include "quant/dtype.h"
#include "testmodel.h"
#include "testutil.h"

static int g_port, g_max = 64;

typedef struct job {
    int idx, tokens, status;
} job;

static void *run(void *arg) {
    job *j = arg;
    char body[512];
    snprintf(body, sizeof body,
             "{\"prompt\": [1, %d, %d, %d, %d, %d, %d, %d], \"temperature\": 0, \"max_tokens\": %d}", 100 + j->idx,
             200 + j->idx, 300 + j->idx, 400, 500, 600, 700, g_max);
    http_resp r;
    j->status = http_request(g_port, "POST", "/v1/completions", NULL, body, &r) == 0 ? r.status : 0;
    cJSON *o = r.body ? cJSON_Parse(r.body) : NULL;
    const cJSON *u = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(o, "usage"), "completion_tokens");
    j->tokens = cJSON_IsNumber(u) ? u->valueint : 0;
    cJSON_Delete(o);
    http_resp_free(&r);
    return NULL;
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int main(int argc, char **argv) {
    if (argc > 1) g_max = atoi(argv[1]);
    const char *threads = argc > 2 ? argv[2] : "0";
    char dir[1024], model[1024];
    snprintf(dir, sizeof dir, "%s", tmp_path("bench-hf"));
    snprintf(model, sizeof model, "%s", tmp_path("bench-1024x8-q8.cmf"));
    struct stat sb;
    if (stat(model, &sb) != 0) {
        testmodel_spec sp = {shared_path("data/tokenizers/mistral"), 32000, 1024, 8, 16, 4, 64, 2816, CMF_DT_Q8_ROW,
                             11, "2", NULL, 0, 0};
        fprintf(stderr, "writing %s ...\n", model);
        if (testmodel_write(&sp, dir, model) != CMF_OK) {
            fprintf(stderr, "bench: %s\n", cmf_last_error());
            return 1;
        }
    }
    server_proc srv;
    const char *args[] = {"--parallel", "8", "-c", "512", "-t", threads, NULL};
    if (server_start(&srv, model, args)) {
        fprintf(stderr, "bench: the server did not start\n");
        return 1;
    }
    g_port = srv.port;
    job warm = {0, 0, 0};
    g_max = g_max > 8 ? g_max : 8;
    run(&warm);
    const int conc[] = {1, 4, 8};
    for (int c = 0; c < 3; c++) {
        int n = conc[c];
        job jobs[8];
        pthread_t th[8];
        double t0 = now();
        for (int i = 0; i < n; i++) {
            jobs[i] = (job){i + 1, 0, 0};
            pthread_create(&th[i], NULL, run, &jobs[i]);
        }
        int total = 0, ok = 1;
        for (int i = 0; i < n; i++) {
            pthread_join(th[i], NULL);
            total += jobs[i].tokens;
            ok &= jobs[i].status == 200;
        }
        double dt = now() - t0;
        printf("streams %d: %d tokens in %.2f s = %.1f tok/s aggregate%s\n", n, total, dt, total / dt,
               ok ? "" : " (some requests failed)");
        fflush(stdout);
    }
    server_stop(&srv);
    return 0;
}
