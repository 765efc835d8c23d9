/* test_review11 — fixes from the eleventh review of `cmf serve` (/tmp/review11/REPORT.md items 1, 2, 7, 8), on
 * stories260K converted from its GGUF:
 *   1. a key repeated in the request body ({"max_tokens":2,"max_tokens":5}) is a 400 naming it, at the top level and
 *      in messages[i] / tools[i] / tools[i].function (before: cJSON's first value won silently; Python, JS and
 *      llama-server take the last); the same bodies without the repeat are a 200;
 *   2. "seed": 18446744073709551615 is a 400 whose message gives the real upper bound 2^64 - 2048 (a JSON number
 *      is a double here); 18446744073709549568 = 2^64 - 2048 is accepted and samples as -2048 does (the same
 *      unsigned seed);
 *   3. GET /v1/models/{id} (OpenAI's "Retrieve model") answers the served model's object as /v1/models lists it,
 *      and another id is an OpenAI-shaped 404 naming param "model";
 *   4. a model whose tokenizer has ids past its vocabulary (qwen3's tokenizer on 1024 embedding rows) is refused by
 *      cmf_server_start (CMF_E_ARG) and by `cmf serve` (exit 1 with the message) instead of serving 500s. */
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

static const char *err_field(const cJSON *j, const char *name) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(j, "error"), name);
    return cJSON_IsString(v) ? v->valuestring : "";
}

/* A 400 whose error names `param` (and whose message quotes the key), or a 200 when param is NULL. */
static void expect(int port, const char *path, const char *body, const char *param, const char *key) {
    cJSON *j = NULL;
    int st = http_post_json(port, path, body, &j);
    if (!param) {
        CHECK_MSG(st == 200, "%s %s: status %d (%s)", path, body, st, err_field(j, "message"));
    } else {
        char quoted[128];
        snprintf(quoted, sizeof quoted, "'%s'", key);
        CHECK_MSG(st == 400 && !strcmp(err_field(j, "param"), param) && strstr(err_field(j, "message"), quoted) &&
                      !strcmp(err_field(j, "type"), "invalid_request_error"),
                  "%s %s: status %d, param '%s', message '%s'", path, body, st, err_field(j, "param"),
                  err_field(j, "message"));
    }
    cJSON_Delete(j);
}

/* 1. repeated keys */
static void test_repeated_keys(int port) {
    expect(port, "/v1/completions", "{\"prompt\":\"Once\",\"max_tokens\":2}", NULL, NULL);
    expect(port, "/v1/completions", "{\"prompt\":\"Once\",\"max_tokens\":2,\"max_tokens\":5}", "max_tokens",
           "max_tokens");
    expect(port, "/v1/completions", "{\"max_tokens\":2,\"prompt\":\"Once\",\"max_tokens\":\"bad\"}", "max_tokens",
           "max_tokens");
    const char *tools_ok = "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":{}}}]";
    char body[512];
    snprintf(body, sizeof body, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"max_tokens\":1,%s}", tools_ok);
    expect(port, "/v1/chat/completions", body, NULL, NULL);
    expect(port, "/v1/chat/completions",
           "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"},{\"role\":\"user\",\"content\":\"a\","
           "\"content\":\"b\"}],\"max_tokens\":1}",
           "messages[1].content", "content");
    expect(port, "/v1/chat/completions",
           "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"max_tokens\":1,\"tools\":[{\"type\":\"function\","
           "\"type\":\"function\",\"function\":{\"name\":\"f\"}}]}",
           "tools[0].type", "type");
    expect(port, "/v1/chat/completions",
           "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"max_tokens\":1,\"tools\":[{\"type\":\"function\","
           "\"function\":{\"name\":\"f\",\"name\":\"g\"}}]}",
           "tools[0].function.name", "name");
    /* every route that reads a body */
    expect(port, "/tokenize", "{\"content\":\"a\",\"content\":\"b\"}", "content", "content");
    const char *tpl = "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}]%s}";
    const char *again = ",\"messages\":[{\"role\":\"user\",\"content\":\"b\"}]";
    snprintf(body, sizeof body, tpl, "");
    expect(port, "/apply-template", body, NULL, NULL);
    snprintf(body, sizeof body, tpl, again);
    expect(port, "/apply-template", body, "messages", "messages");
}

/* The text of a /v1/completions answer with this seed ("" on an error, which is CHECKed). */
static char *seeded_text(int port, const char *seed) {
    char body[256];
    snprintf(body, sizeof body, "{\"prompt\":\"Once upon\",\"max_tokens\":12,\"temperature\":1,\"seed\":%s}", seed);
    cJSON *j = NULL;
    int st = http_post_json(port, "/v1/completions", body, &j);
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(j, "choices"), 0), "text");
    CHECK_MSG(st == 200 && cJSON_IsString(t), "seed %s: status %d (%s)", seed, st, err_field(j, "message"));
    char *out = strdup(cJSON_IsString(t) ? t->valuestring : "");
    cJSON_Delete(j);
    return out;
}

/* 2. the seed range */
/* review12 item 8: OpenAI's modalities ["text"] and prediction (Predicted Outputs: a speed hint) are accepted;
 * another modality is a 400 naming the field */
static void test_openai_fields(int port) {
    expect(port, "/v1/chat/completions",
           "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"max_tokens\":1,\"modalities\":[\"text\"],"
           "\"prediction\":{\"type\":\"content\",\"content\":\"Once upon\"}}",
           NULL, NULL);
    expect(port, "/v1/chat/completions",
           "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"max_tokens\":1,\"prediction\":null}", NULL, NULL);
    expect(port, "/v1/chat/completions",
           "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"max_tokens\":1,\"modalities\":[\"text\",\"audio\"]}",
           "modalities", "modalities");
}

/* review12 item 8: /tokenize and /detokenize refuse fields they would ignore and take the neutral values
 * (with_pieces: true, which returns the pieces, is checked against llama-server in test_native) */
static void test_tokenize_fields(int port) {
    expect(port, "/tokenize", "{\"content\":\"Once\",\"with_pieces\":false,\"parse_special\":true,\"model\":\"stories\"}",
           NULL, NULL);
    expect(port, "/tokenize", "{\"content\":\"Once\",\"with_pieces\":1}", "with_pieces", "with_pieces");
    expect(port, "/tokenize", "{\"content\":\"Once\",\"parse_special\":false}", "parse_special", "parse_special");
    expect(port, "/tokenize", "{\"content\":\"Once\",\"bogus\":1}", "bogus", "bogus");
    expect(port, "/detokenize", "{\"tokens\":[1,2]}", NULL, NULL);
    expect(port, "/detokenize", "{\"tokens\":[1,2],\"skip\":true}", "skip", "skip");
}

static void test_seed(int port) {
    cJSON *j = NULL;
    int st = http_post_json(port, "/v1/completions", "{\"prompt\":\"Once\",\"max_tokens\":1,\"seed\":18446744073709551615}", &j);
    CHECK_MSG(st == 400 && !strcmp(err_field(j, "param"), "seed") && strstr(err_field(j, "message"), "2^64 - 2048"),
              "seed 2^64-1: status %d, message '%s'", st, err_field(j, "message"));
    cJSON_Delete(j);
    char *top = seeded_text(port, "18446744073709549568"), *neg = seeded_text(port, "-2048");
    CHECK_MSG(!strcmp(top, neg) && *top, "seed 2^64-2048 '%s' vs -2048 '%s'", top, neg);
    free(top);
    free(neg);
}

/* 3. GET /v1/models/{id} */
static void test_model_retrieve(int port) {
    http_resp r;
    CHECK(http_request(port, "GET", "/v1/models", NULL, NULL, &r) == 0 && r.status == 200);
    cJSON *list = r.body ? cJSON_Parse(r.body) : NULL;
    http_resp_free(&r);
    const cJSON *want = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(list, "data"), 0);
    CHECK(http_request(port, "GET", "/v1/models/stories", NULL, NULL, &r) == 0);
    cJSON *got = r.body ? cJSON_Parse(r.body) : NULL;
    CHECK_MSG(r.status == 200 && got, "GET /v1/models/stories: %d %s", r.status, r.body ? r.body : "");
    http_resp_free(&r);
    static const char *const keys[] = {"id", "object", "owned_by", "max_model_len"};
    int n_want = cJSON_GetArraySize(want), n_got = cJSON_GetArraySize(got);
    CHECK_MSG(want && n_got == n_want, "model object: %d keys, /v1/models lists %d", n_got, n_want);
    for (size_t i = 0; i < sizeof keys / sizeof *keys; i++) {
        const cJSON *a = cJSON_GetObjectItemCaseSensitive(want, keys[i]), *b = cJSON_GetObjectItemCaseSensitive(got,
                                                                                                                 keys[i]);
        CHECK_MSG(a && b && cJSON_Compare(a, b, 1), "model object's '%s' differs from /v1/models'", keys[i]);
    }
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(got, "id"), *obj = cJSON_GetObjectItemCaseSensitive(got, "object");
    CHECK(cJSON_IsString(id) && !strcmp(id->valuestring, "stories") && cJSON_IsString(obj) &&
          !strcmp(obj->valuestring, "model"));
    cJSON_Delete(got);
    cJSON_Delete(list);
    static const char *const others[] = {"/v1/models/gpt-4o-mini", "/v1/models/", "/v1/models/stories/x"};
    for (size_t i = 0; i < 3; i++) {
        CHECK(http_request(port, "GET", others[i], NULL, NULL, &r) == 0);
        cJSON *e = r.body ? cJSON_Parse(r.body) : NULL;
        CHECK_MSG(r.status == 404 && !strcmp(err_field(e, "type"), "not_found_error") &&
                      !strcmp(err_field(e, "param"), "model"),
                  "GET %s: %d %s", others[i], r.status, r.body ? r.body : "");
        cJSON_Delete(e);
        http_resp_free(&r);
    }
}

/* 4. a tokenizer that does not belong to the weights */
static void test_mismatched_tokenizer(void) {
    testmodel_spec sp = {shared_path("data/tokenizers/qwen3"), 1024, 32, 1, 4, 2, 8, 64, CMF_DT_F32, 3,
                         "[151645, 151643]", NULL, 0, 0};
    char dir[1024], model[1024];
    snprintf(dir, sizeof dir, "%s", tmp_path("review11-mix-hf"));
    snprintf(model, sizeof model, "%s", tmp_path("review11-mix.cmf"));
    CHECK_MSG(testmodel_write(&sp, dir, model) == CMF_OK, "%s", cmf_last_error());
    cmf_model_params mp = {.n_threads = 1};
    cmf_model *m = NULL;
    CHECK_MSG(cmf_model_load(model, &mp, &m) == CMF_OK, "%s", cmf_last_error());
    if (!m) return;
    cmf_server_opts o = cmf_server_default_opts();
    o.port = 0, o.n_slots = 1, o.n_ctx = 64;
    cmf_server *s = NULL;
    cmf_status st = cmf_server_start(m, &o, &s);
    CHECK_MSG(st == CMF_E_ARG && !s && strstr(cmf_last_error(), "does not belong"), "start: %d '%s'", (int)st,
              cmf_last_error());
    cmf_server_stop(s);
    cmf_model_free(m);
    const char *log = tmp_path("review11-mix.log");
    const char *args[] = {"serve", model, "--port", "0", "-t", "1", NULL};
    int rc = cli_run_until(args, log, "listening on", 60);
    char *out = slurp_file(log);
    CHECK_MSG(rc == 1 && strstr(out, "vocabulary of 1024") && strstr(out, "does not belong"),
              "cmf serve: exit %d, output '%s'", rc, out);
    free(out);
}

int main(void) {
    char model[1024];
    cmf_model *m = NULL;
    CHECK_MSG(stories_model("review11-stories.cmf", model, sizeof model, &m) == CMF_OK, "%s", cmf_last_error());
    if (!m) CMF_TEST_END();
    cmf_server_opts o = cmf_server_default_opts();
    o.port = 0, o.n_slots = 1, o.n_ctx = 128, o.model_name = "stories";
    cmf_server *s = NULL;
    CHECK_MSG(cmf_server_start(m, &o, &s) == CMF_OK, "%s", cmf_last_error());
    if (s) {
        test_repeated_keys(cmf_server_port(s));
        test_seed(cmf_server_port(s));
        test_model_retrieve(cmf_server_port(s));
        test_openai_fields(cmf_server_port(s));
        test_tokenize_fields(cmf_server_port(s));
    }
    cmf_server_stop(s);
    cmf_model_free(m);
    test_mismatched_tokenizer();
    CMF_TEST_END();
}
