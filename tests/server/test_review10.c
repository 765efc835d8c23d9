/* test_review10 — fixes from the tenth review of `cmf serve`, on stories260K (converted from its GGUF: no chat
 * template, so the ChatML fallback, and a tokenizer whose post-processor adds BOS):
 *   1. /v1/chat/completions tokenizes the rendered prompt as `cmf chat` / `cmf run --chat` do (cmf_chat_tokenize:
 *      exactly one BOS): its usage.prompt_tokens equals the ids the library's chat path gives, which start with
 *      BOS, and a greedy reply equals `cmf run --chat --temp 0` (before the fix the server dropped the BOS: 48
 *      prompt tokens instead of 49, and other text); a rendered text that already starts with the BOS text gets
 *      no second one;
 *   2. "Authorization: bearer KEY" and "BEARER KEY" are accepted (RFC 7235: the scheme is case-insensitive); a
 *      wrong key is still a 401;
 *   3. `cmf serve --api-key ""` and CMF_API_KEY="" exit 2 with a message instead of serving with no key;
 *   4. `cmf serve -c N` beyond the trained context warns as `cmf run` does. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "client.h"
#include "cmf.h"
#include "server/server.h"
#include "testutil.h"

static const char *MSGS = "[{\"role\":\"user\",\"content\":\"Tell me a story\"}]";

/* 1. the chat prompt's BOS */
static void test_chat_bos(const cmf_model *m, int port, const char *model) {
    cmf_chat_params p = cmf_chat_default_params();
    p.messages_json = MSGS;
    char *text = NULL;
    CHECK_MSG(cmf_chat_render(m, &p, &text, NULL) == CMF_OK, "%s", cmf_last_error());
    if (!text) return;
    const cmf_tokenizer *tok = cmf_model_tokenizer(m);
    int32_t bos = cmf_model_bos_id(m), *ids = NULL, *plain = NULL, *again = NULL;
    size_t n = 0, n_plain = 0, n_again = 0;
    CHECK(bos >= 0);
    CHECK_MSG(cmf_chat_tokenize(m, text, strlen(text), &ids, &n) == CMF_OK, "%s", cmf_last_error());
    CHECK(cmf_tokenize(tok, text, strlen(text), 0, &plain, &n_plain) == CMF_OK);
    /* ChatML does not write BOS, so the post-processor's is added: one more id than the bare text, BOS first */
    CHECK_MSG(n == n_plain + 1 && ids[0] == bos && (n_plain == 0 || plain[0] != bos), "chat ids %zu, plain %zu", n,
              n_plain);
    /* a text that starts with the BOS text (a template that writes bos_token) gets no second BOS */
    char *bos_text = NULL;
    CHECK(cmf_detokenize(tok, &bos, 1, 0, &bos_text) == CMF_OK && bos_text && *bos_text);
    size_t bl = bos_text ? strlen(bos_text) : 0, tl = strlen(text);
    char *with = malloc(bl + tl + 1);
    memcpy(with, bos_text, bl);
    memcpy(with + bl, text, tl + 1);
    CHECK(cmf_chat_tokenize(m, with, bl + tl, &again, &n_again) == CMF_OK);
    CHECK_MSG(n_again == n && again[0] == bos && (n_again < 2 || again[1] != bos), "BOS-led text: %zu ids", n_again);

    /* the server counts the same prompt */
    char body[512];
    snprintf(body, sizeof body, "{\"messages\":%s,\"max_tokens\":8,\"temperature\":0}", MSGS);
    http_resp r;
    CHECK(http_request(port, "POST", "/v1/chat/completions", NULL, body, &r) == 0 && r.status == 200);
    cJSON *j = r.body ? cJSON_Parse(r.body) : NULL;
    const cJSON *pt =
        cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(j, "usage"), "prompt_tokens");
    CHECK_MSG(cJSON_IsNumber(pt) && pt->valueint == (int)n, "server prompt_tokens %d, chat path %zu",
              cJSON_IsNumber(pt) ? pt->valueint : -1, n);
    const cJSON *msg = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(j, "choices"), 0),
                                         "message"),
        "content");
    /* and the same greedy text as `cmf run --chat` (which tokenizes through cmf_chat_tokenize too) */
    const char *log = tmp_path("review10-run.log");
    const char *run_args[] = {"run", model, "--chat", "-p", "Tell me a story", "-n", "8", "--temp", "0", "-t", "1",
                              NULL};
    int rc = cli_run_until(run_args, log, NULL, 120);
    char *out = slurp_file(log);
    CHECK_MSG(rc == 0 && cJSON_IsString(msg) && strstr(out, msg->valuestring) && *msg->valuestring,
              "run --chat exit %d, output '%s'; server '%s'", rc, out, cJSON_IsString(msg) ? msg->valuestring : "");
    free(out);
    cJSON_Delete(j);
    http_resp_free(&r);
    free(text), free(ids), free(plain), free(again), free(bos_text), free(with);
}

/* 2. the Bearer scheme in any case */
static void test_bearer_case(int port) {
    static const struct {
        const char *header;
        int want;
    } cases[] = {{"Bearer k10", 200}, {"bearer k10", 200}, {"BEARER k10", 200}, {"bEaReR   k10", 200},
                 {"bearer k11", 401}, {"Basic k10", 401},  {"bearerk10", 401}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char raw[512];
        int len = snprintf(raw, sizeof raw,
                           "GET /v1/models HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: %s\r\n"
                           "Connection: close\r\n\r\n",
                           cases[i].header);
        http_resp r;
        CHECK(http_raw(port, raw, (size_t)len, &r) == 0);
        CHECK_MSG(r.status == cases[i].want, "Authorization: %s -> %d (want %d)", cases[i].header, r.status,
                  cases[i].want);
        http_resp_free(&r);
    }
}

/* 3. an empty key, 4. -c beyond the trained context */
static void test_cli(const char *model, int n_train) {
    const char *log = tmp_path("review10-serve.log");
    const char *empty[] = {"serve", model, "--port", "0", "--api-key", "", NULL};
    int rc = cli_run_until(empty, log, "listening on", 60);
    char *out = slurp_file(log);
    CHECK_MSG(rc == 2 && strstr(out, "--api-key is empty"), "--api-key \"\": exit %d, output '%s'", rc, out);
    free(out);

    setenv("CMF_API_KEY", "", 1);
    const char *env[] = {"serve", model, "--port", "0", NULL};
    rc = cli_run_until(env, log, "listening on", 60);
    unsetenv("CMF_API_KEY");
    out = slurp_file(log);
    CHECK_MSG(rc == 2 && strstr(out, "CMF_API_KEY is set but empty"), "CMF_API_KEY=\"\": exit %d, output '%s'", rc,
              out);
    free(out);

    char big[32], small[32];
    snprintf(big, sizeof big, "%d", 2 * n_train);
    snprintf(small, sizeof small, "%d", n_train);
    const char *wide[] = {"serve", model, "--port", "0", "-t", "1", "-c", big, NULL};
    rc = cli_run_until(wide, log, "listening on", 60);
    out = slurp_file(log);
    CHECK_MSG(rc == -2 && strstr(out, "is larger than the trained context"), "-c %s: exit %d, output '%s'", big, rc,
              out);
    free(out);
    const char *fits[] = {"serve", model, "--port", "0", "-t", "1", "-c", small, NULL};
    rc = cli_run_until(fits, log, "listening on", 60);
    out = slurp_file(log);
    CHECK_MSG(rc == -2 && !strstr(out, "trained context"), "-c %s: exit %d, output '%s'", small, rc, out);
    free(out);
}

int main(void) {
    char model[1024];
    cmf_model *m = NULL;
    CHECK_MSG(stories_model("review10-stories.cmf", model, sizeof model, &m) == CMF_OK, "%s", cmf_last_error());
    if (!m) CMF_TEST_END();
    CHECK(cmf_model_chat_template(m) == NULL); /* the ChatML fallback, which does not write BOS */

    cmf_server_opts o = cmf_server_default_opts();
    o.port = 0, o.n_slots = 1, o.n_ctx = 256;
    cmf_server *s = NULL;
    CHECK_MSG(cmf_server_start(m, &o, &s) == CMF_OK, "%s", cmf_last_error());
    if (s) test_chat_bos(m, cmf_server_port(s), model);
    cmf_server_stop(s);

    o.api_key = "k10";
    s = NULL;
    CHECK_MSG(cmf_server_start(m, &o, &s) == CMF_OK, "%s", cmf_last_error());
    if (s) test_bearer_case(cmf_server_port(s));
    cmf_server_stop(s);

    test_cli(model, cmf_model_n_ctx_train(m));
    cmf_model_free(m);
    CMF_TEST_END();
}
