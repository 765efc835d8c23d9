/* test_think_json.c — JSON mode after a template that opens <think> (README "JSON mode"), end to end on a model
 * that actually closes its reasoning: `cmf serve` (response_format json_object) and `cmf run --chat --json` give
 * the same content for the same seed and settings, the content is a prefix of a JSON object (the recognizer that
 * test_json_fsm checks against Python's json), and enough seeds reach the object for the path to be tested.
 * The model: a random one-layer Qwen3 with tests/data/think_json's tokenizer (make.py there: a small Qwen3-style
 * vocabulary in which `</think>` is frequent, whole, followed by whitespace or `{`, or split over two tokens), so
 * a sampled reply leaves its reasoning within a few dozen tokens. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "client.h"
#include "cmf.h"
#include "quant/dtype.h"
#include "sample/json_fsm.h"
#include "testmodel.h"
#include "testutil.h"

enum { N_GEN = 64, N_SEEDS = 10 };

/* A JSON prefix: the recognizer takes every byte. */
static int json_prefix(const char *s) {
    cmf_json_fsm f;
    cmf_json_fsm_init(&f);
    return cmf_json_fsm_feed(&f, s, strlen(s));
}

/* The chat reply in JSON mode (temperature 3: a flat draw; seed; N_GEN tokens; top_k 0 / top_p 1): content ("" when
 * none) and finish_reason, malloc'd. Returns the status. */
static int chat(int port, int seed, char **content, char **finish) {
    char body[512];
    snprintf(body, sizeof body, "{\"messages\": [{\"role\": \"user\", \"content\": \"Give JSON\"}], \"max_tokens\": %d, "
             "\"temperature\": 3, \"seed\": %d, \"response_format\": {\"type\": \"json_object\"}}", N_GEN, seed);
    cJSON *j = NULL;
    int st = http_post_json(port, "/v1/chat/completions", body, &j);
    const cJSON *c = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(j, "choices"), 0);
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(c, "message"), "content");
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(c, "finish_reason");
    *content = strdup(cJSON_IsString(t) ? t->valuestring : "");
    *finish = strdup(cJSON_IsString(f) ? f->valuestring : "");
    cJSON_Delete(j);
    return st;
}

/* `cmf run --chat --json` with the same prompt and settings; *content: the printed text after "</think>" less the
 * whitespace after the tag (what serve drops), up to the lines run writes on stderr after the text (the log holds
 * both); NULL when the reply never closed its reasoning. Returns run's exit status. */
static int cli(const char *model, int seed, char **content) {
    char sd[16], n[16], log[1024];
    snprintf(sd, sizeof sd, "%d", seed);
    snprintf(n, sizeof n, "%d", N_GEN);
    snprintf(log, sizeof log, "%s", tmp_path("think-json-run.log"));
    const char *args[] = {"run", model, "--chat", "-p", "Give JSON", "--json", "-n", n, "--seed", sd, "--temp", "3",
                          "--top-k", "0", "--top-p", "1", "-t", "1", NULL};
    const int rc = cli_run_until(args, log, NULL, 60);
    char *text = slurp_file(log);
    *content = NULL;
    const char *tag = text ? strstr(text, "</think>") : NULL;
    if (tag) {
        const char *b = tag + 8 + strspn(tag + 8, " \t\r\n"), *e = text + strlen(text);
        const char *w = strstr(b, "\ncmf run: warning: "), *p = NULL;
        for (const char *q = strstr(b, "\nprompt: "); q; q = strstr(q + 1, "\nprompt: ")) p = q;
        if (p && p < e) e = p;
        if (w && w < e) e = w;
        if (e < b) e = b;
        *content = strndup(b, (size_t)(e - b));
    }
    free(text);
    return rc;
}

int main(void) {
    char dir[1024], model[1024];
    snprintf(dir, sizeof dir, "%s", tmp_path("think-json-hf"));
    snprintf(model, sizeof model, "%s", tmp_path("think-json.cmf"));
    testmodel_spec sp = {testdata_path("think_json"), 1007, 32, 1, 4, 2, 8, 64, CMF_DT_Q8_ROW, 11, "[1002, 1000]",
                         NULL, 0, 0};
    CHECK_MSG(testmodel_write(&sp, dir, model) == CMF_OK, "%s", cmf_last_error());
    server_proc srv;
    const char *args[] = {"-c", "256", "-t", "1", NULL};
    CHECK(server_start(&srv, model, args) == 0);
    if (srv.port <= 0) CMF_TEST_END();
    int reached = 0;
    for (int seed = 1; seed <= N_SEEDS; seed++) {
        char *sc = NULL, *sf = NULL, *cc = NULL;
        CHECK(chat(srv.port, seed, &sc, &sf) == 200);
        const int rc = cli(model, seed, &cc);
        printf("seed %d: serve (%s) '%s' | run (rc %d) '%s'\n", seed, sf ? sf : "", sc ? sc : "", rc, cc ? cc : "(no </think>)");
        CHECK_MSG(rc == 0, "seed %d: cmf run exited %d", seed, rc);
        CHECK_MSG(sc && json_prefix(sc), "seed %d: serve's content is not a JSON prefix: '%s'", seed, sc ? sc : "");
        if (sc && *sc) { /* the object started: run printed the same after </think> */
            reached++;
            CHECK_MSG(cc && !strcmp(cc, sc), "seed %d: run '%s', serve '%s'", seed, cc ? cc : "(no </think>)", sc);
        } else {
            CHECK_MSG(!cc || !*cc, "seed %d: run wrote '%s' after </think>, serve nothing", seed, cc);
        }
        free(sc), free(sf), free(cc);
    }
    CHECK_MSG(reached >= 3, "only %d of %d seeds left the reasoning: the test needs a model that does", reached, N_SEEDS);
    CHECK_MSG(server_stop(&srv) == 0, "the server did not exit cleanly");
    CMF_TEST_END();
}
