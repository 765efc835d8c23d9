/* test_native — llama-server's own routes in `cmf serve` (review12 item 8), checked against llama-server itself:
 * tests/server/data/llama_server_refs.json holds llama.cpp's llama-server answers on the shared stories260K GGUF
 * (written by tests/server/make_llama_refs.py); the same requests go to cmf's server on that GGUF converted to CMF
 * (2 slots of 128 positions, as the reference run):
 *   1. POST /completion (plain): the same content, stop_type, stopping_word, tokens_predicted, tokens_evaluated,
 *      truncated, has_new_line as llama-server; every field cmf sends is one llama-server sends, with the same JSON
 *      type (recursively: generation_settings, timings), and the fields native.c documents are all there; the
 *      timings count the prompt (prompt_n + cache_n) and the generated tokens;
 *   2. POST /completion streamed: the same events' contents, "stop" false then true on the last, which has the final
 *      fields, and no "data: [DONE]" (llama-server sends none on this route);
 *   3. GET /props: every field is llama-server's with its type; bos/eos tokens, total_slots, n_ctx and the sampling
 *      defaults (temperature, top_k, top_p, min_p) equal llama-server's;
 *   4. POST /tokenize with "with_pieces": true: the same [{"id", "piece"}] array (strings, and byte arrays for
 *      byte-fallback tokens of partial characters);
 *   5. samplers cmf lacks: at their neutral values accepted (the reference's third request), otherwise a 400
 *      naming the field; an unknown field is a 400 naming it;
 *   6. `cmf serve --alias NAME`: /v1/models and /props report NAME, a request naming NAME is served, the file's
 *      own name is then a 404, and an empty alias is a usage error (exit 2);
 *   7. (review13) POST /detokenize: the same content as llama-server (its joined token pieces: " Once upon" for
 *      [403, 407], the leading space kept); the /completion references above include a generation that fills the
 *      context ("truncated": true) and one after an empty prompt (" Once upon a");
 *   8. (review13) llama-server's path aliases (/v1/health public, /models, /completions = its /completion,
 *      /chat/completions), its X-Api-Key header, "model" ignored on /completion (a 404 on the OpenAI routes, as
 *      vLLM), and stream_options without "stream": true a 400 on the OpenAI routes (as OpenAI). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "client.h"
#include "cmf.h"
#include "server/server.h"
#include "testutil.h"

static int g_port;

/* method + path (+ body); returns the parsed answer (NULL when it is not JSON), *status the HTTP status, *raw the
 * body text when raw is not NULL (malloc'd). */
static cJSON *call(const char *method, const char *path, const char *body, int *status, char **raw) {
    http_resp r;
    *status = 0;
    if (raw) *raw = NULL;
    if (http_request(g_port, method, path, NULL, body, &r) != 0) return NULL;
    *status = r.status;
    cJSON *j = r.body ? cJSON_Parse(r.body) : NULL;
    if (raw && r.body) *raw = strdup(r.body);
    http_resp_free(&r);
    return j;
}

static const cJSON *get(const cJSON *j, const char *k) { return cJSON_GetObjectItemCaseSensitive(j, k); }

/* The JSON type of v, true and false as one. */
static int kind(const cJSON *v) { return cJSON_IsBool(v) ? cJSON_True : v ? (v->type & 0xFF) : -1; }

/* Every field of got (recursively into objects) is a field of ref with the same JSON type. */
static void same_shape(const cJSON *ref, const cJSON *got, const char *where) {
    for (const cJSON *e = got ? got->child : NULL; e; e = e->next) {
        const cJSON *r = get(ref, e->string);
        CHECK_MSG(r && kind(r) == kind(e), "%s: field '%s' %s", where, e->string,
                  r ? "has another JSON type than llama-server's" : "is not one llama-server sends");
        if (r && cJSON_IsObject(e) && cJSON_IsObject(r)) {
            char sub[256];
            snprintf(sub, sizeof sub, "%s.%s", where, e->string);
            same_shape(r, e, sub);
        }
    }
}

/* Every name in names (NULL-terminated) is a field of j. */
static void has_fields(const cJSON *j, const char *const *names, const char *where) {
    for (int i = 0; names[i]; i++) CHECK_MSG(get(j, names[i]) != NULL, "%s: no field '%s'", where, names[i]);
}

/* Field k of a and b is equal (cJSON_Compare; numbers within 1e-6 relative). */
static void same_value(const cJSON *a, const cJSON *b, const char *k, const char *where) {
    const cJSON *x = get(a, k), *y = get(b, k);
    int eq = x && y && (cJSON_IsNumber(x) && cJSON_IsNumber(y)
                            ? fabs(x->valuedouble - y->valuedouble) <= 1e-6 * fmax(1, fabs(x->valuedouble))
                            : cJSON_Compare(x, y, 1));
    char *sx = x ? cJSON_PrintUnformatted(x) : NULL, *sy = y ? cJSON_PrintUnformatted(y) : NULL;
    CHECK_MSG(eq, "%s: '%s' is %s, llama-server's %s", where, k, sy ? sy : "absent", sx ? sx : "absent");
    free(sx), free(sy);
}

static const char *const FINAL_FIELDS[] = {"index", "content", "tokens", "id_slot", "stop", "model",
                                           "tokens_predicted", "tokens_evaluated", "generation_settings",
                                           "has_new_line", "truncated", "stop_type", "stopping_word",
                                           "tokens_cached", "timings", NULL};
static const char *const TIMING_FIELDS[] = {"cache_n", "prompt_n", "prompt_ms", "prompt_per_token_ms",
                                            "prompt_per_second", "predicted_n", "predicted_ms",
                                            "predicted_per_token_ms", "predicted_per_second", NULL};

/* The final object of a /completion (plain answer or last event) against llama-server's. */
static void check_final(const cJSON *ref, const cJSON *got, const char *where) {
    same_shape(ref, got, where);
    has_fields(got, FINAL_FIELDS, where);
    has_fields(get(got, "timings"), TIMING_FIELDS, where);
    static const char *const equal[] = {"index", "stop", "stop_type", "stopping_word", "tokens_predicted",
                                        "tokens_evaluated", "truncated", "has_new_line"};
    for (size_t i = 0; i < sizeof equal / sizeof equal[0]; i++) same_value(ref, got, equal[i], where);
    const cJSON *t = get(got, "timings");
    const double pn = cJSON_GetNumberValue(get(t, "prompt_n")), cn = cJSON_GetNumberValue(get(t, "cache_n"));
    CHECK_MSG(pn + cn == cJSON_GetNumberValue(get(got, "tokens_evaluated")) && pn >= 1 &&
                  cJSON_GetNumberValue(get(t, "predicted_n")) == cJSON_GetNumberValue(get(got, "tokens_predicted")),
              "%s: timings prompt_n %g + cache_n %g, predicted_n %g", where, pn, cn,
              cJSON_GetNumberValue(get(t, "predicted_n")));
}

/* 1. plain /completion */
static void test_completion(const cJSON *refs) {
    const cJSON *c;
    cJSON_ArrayForEach(c, get(refs, "completion")) {
        char *body = cJSON_PrintUnformatted(get(c, "body"));
        int st;
        cJSON *j = call("POST", "/completion", body, &st, NULL);
        const cJSON *ref = get(c, "response");
        CHECK_MSG(st == 200, "/completion %s: status %d", body, st);
        if (j) {
            same_value(ref, j, "content", body);
            check_final(ref, j, body);
        }
        cJSON_Delete(j);
        free(body);
    }
}

/* 2. streamed /completion */
static void test_stream(const cJSON *refs) {
    const cJSON *s = get(refs, "stream"), *want = get(s, "events");
    char *body = cJSON_PrintUnformatted(get(s, "body")), *raw = NULL;
    int st;
    cJSON_Delete(call("POST", "/completion", body, &st, &raw));
    CHECK_MSG(st == 200 && raw, "stream: status %d", st);
    int n = 0;
    const int n_want = cJSON_GetArraySize(want);
    for (const char *p = raw ? strstr(raw, "data: ") : NULL; p; p = strstr(p + 1, "data: "), n++) {
        const char *end = strstr(p, "\n\n");
        cJSON *e = cJSON_ParseWithLength(p + 6, end ? (size_t)(end - p - 6) : strlen(p + 6));
        const cJSON *ref = cJSON_GetArrayItem(want, n);
        char where[64];
        snprintf(where, sizeof where, "stream event %d", n);
        CHECK_MSG(e && ref, "%s: not JSON, or more events than llama-server's %d", where, n_want);
        if (e && ref) {
            same_value(ref, e, "content", where);
            same_value(ref, e, "stop", where);
            if (n == n_want - 1)
                check_final(ref, e, where);
            else
                same_shape(ref, e, where);
        }
        cJSON_Delete(e);
    }
    CHECK_MSG(n == n_want, "stream: %d events, llama-server %d", n, n_want);
    CHECK_MSG(raw && !strstr(raw, "[DONE]") && !cJSON_IsTrue(get(s, "done_marker")), "stream: a [DONE] marker");
    free(raw);
    free(body);
}

/* 3. /props */
static void test_props(const cJSON *refs) {
    int st;
    cJSON *j = call("GET", "/props", NULL, &st, NULL);
    const cJSON *ref = get(refs, "props");
    CHECK_MSG(st == 200 && j, "/props: status %d", st);
    static const char *const fields[] = {"default_generation_settings", "total_slots", "model_alias", "model_path",
                                         "chat_template", "bos_token", "eos_token", "build_info", NULL};
    if (j) {
        same_shape(ref, j, "props");
        has_fields(j, fields, "props");
        same_value(ref, j, "bos_token", "props");
        same_value(ref, j, "eos_token", "props");
        same_value(ref, j, "total_slots", "props");
        const cJSON *dr = get(ref, "default_generation_settings"), *dg = get(j, "default_generation_settings");
        same_value(dr, dg, "n_ctx", "props.default_generation_settings");
        static const char *const defaults[] = {"temperature", "top_k", "top_p", "min_p", "n_predict"};
        for (size_t i = 0; i < sizeof defaults / sizeof defaults[0]; i++)
            same_value(get(dr, "params"), get(dg, "params"), defaults[i], "props params");
    }
    cJSON_Delete(j);
}

/* Each recorded request of refs[key] POSTed to path: status 200 and the response's field equal to llama-server's. */
static void replay_refs(const cJSON *refs, const char *key, const char *path, const char *field) {
    const cJSON *c;
    cJSON_ArrayForEach(c, get(refs, key)) {
        char *body = cJSON_PrintUnformatted(get(c, "body"));
        int st;
        cJSON *j = call("POST", path, body, &st, NULL);
        CHECK_MSG(st == 200, "%s %s: status %d", path, body, st);
        same_value(get(c, "response"), j, field, body);
        cJSON_Delete(j);
        free(body);
    }
}

/* 4. /tokenize with_pieces */
static void test_pieces(const cJSON *refs) { replay_refs(refs, "tokenize", "/tokenize", "tokens"); }

/* 7. /detokenize */
static void test_detokenize(const cJSON *refs) {
    replay_refs(refs, "detokenize", "/detokenize", "content");
    CHECK_MSG(cJSON_GetArraySize(get(refs, "detokenize")) >= 2, "no /detokenize references");
}

/* One request with extra header lines (each ending in \r\n); returns the status, *j the parsed body. */
static int call_hdr(const char *method, const char *path, const char *hdr, const char *body, cJSON **j) {
    char req[2048];
    int n = snprintf(req, sizeof req,
                     "%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n%sContent-Type: application/json\r\n"
                     "Content-Length: %zu\r\n\r\n%s",
                     method, path, hdr, body ? strlen(body) : 0, body ? body : "");
    http_resp r;
    *j = NULL;
    if (n <= 0 || (size_t)n >= sizeof req || http_raw(g_port, req, (size_t)n, &r) != 0) return -1;
    *j = r.body ? cJSON_Parse(r.body) : NULL;
    const int st = r.status;
    http_resp_free(&r);
    return st;
}

/* 8. llama-server's aliases, X-Api-Key, its /completion ignoring "model"; stream_options needs stream */
static void test_llama_paths(const char *model) {
    server_proc srv;
    const char *args[] = {"-t", "1", "-c", "128", "--api-key", "sekret", NULL};
    CHECK(server_start(&srv, model, args) == 0);
    if (srv.port <= 0) return;
    g_port = srv.port;
    const char *key = "X-Api-Key: sekret\r\n", *bearer = "Authorization: Bearer sekret\r\n";
    cJSON *j = NULL;
    int st = call_hdr("GET", "/v1/health", "", NULL, &j);
    CHECK_MSG(st == 200 && cJSON_IsString(get(j, "status")), "/v1/health without a key: %d", st);
    cJSON_Delete(j);
    st = call_hdr("GET", "/models", key, NULL, &j);
    CHECK_MSG(st == 200 && cJSON_IsArray(get(j, "data")), "/models with X-Api-Key: %d", st);
    cJSON_Delete(j);
    st = call_hdr("GET", "/models", "X-Api-Key: Bearer sekret\r\n", NULL, &j);
    CHECK_MSG(st == 200, "/models with X-Api-Key: Bearer: %d", st);
    cJSON_Delete(j);
    st = call_hdr("GET", "/models", "X-Api-Key: wrong\r\n", NULL, &j);
    CHECK_MSG(st == 401, "/models with a wrong X-Api-Key: %d", st);
    cJSON_Delete(j);
    st = call_hdr("GET", "/v1/models", "Authorization: Bearer wrong\r\nX-Api-Key: sekret\r\n", NULL, &j);
    CHECK_MSG(st == 401, "a wrong Authorization next to a right X-Api-Key (llama-server reads Authorization): %d", st);
    cJSON_Delete(j);
    const char *native = "{\"prompt\":\"Once upon a time\",\"n_predict\":4,\"temperature\":0}";
    cJSON *ref = NULL;
    st = call_hdr("POST", "/completion", bearer, native, &ref);
    CHECK_MSG(st == 200 && cJSON_IsString(get(ref, "content")), "/completion with X-Api-Key: %d", st);
    st = call_hdr("POST", "/completions", bearer, native, &j); /* llama-server's /completion, not the OpenAI route */
    CHECK_MSG(st == 200 && cJSON_IsString(get(j, "stop_type")) && !get(j, "choices"), "/completions: %d", st);
    same_value(ref, j, "content", "/completions");
    cJSON_Delete(j);
    st = call_hdr("POST", "/completion", bearer,
                  "{\"prompt\":\"Once upon a time\",\"n_predict\":4,\"temperature\":0,"
                  "\"model\":\"gpt-3.5-turbo\"}",
                  &j);
    const cJSON *mj = get(j, "model");
    CHECK_MSG(st == 200 && cJSON_IsString(mj) && !strcmp(mj->valuestring, "native-stories"),
              "/completion naming another model: %d", st);
    same_value(ref, j, "content", "/completion with model");
    cJSON_Delete(j);
    cJSON_Delete(ref);
    st = call_hdr("POST", "/v1/completions", bearer,
                  "{\"prompt\":\"Once\",\"max_tokens\":2,\"model\":\"gpt-3.5-turbo\"}", &j);
    CHECK_MSG(st == 404, "/v1/completions naming another model: %d", st);
    cJSON_Delete(j);
    st = call_hdr("POST", "/chat/completions", bearer,
                  "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"max_tokens\":2}", &j);
    CHECK_MSG(st == 200 && cJSON_IsArray(get(j, "choices")), "/chat/completions: %d", st);
    cJSON_Delete(j);
    static const char *const so[][2] = {
        {"/v1/completions", "{\"prompt\":\"Once\",\"max_tokens\":2,\"stream_options\":{\"include_usage\":true}}"},
        {"/v1/completions", "{\"prompt\":\"Once\",\"max_tokens\":2,\"stream\":false,\"stream_options\":{}}"},
        {"/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"max_tokens\":2,"
                                 "\"stream_options\":{\"include_usage\":false}}"}};
    for (size_t i = 0; i < sizeof so / sizeof so[0]; i++) {
        st = call_hdr("POST", so[i][0], bearer, so[i][1], &j);
        const cJSON *p = get(get(j, "error"), "param");
        CHECK_MSG(st == 400 && cJSON_IsString(p) && !strcmp(p->valuestring, "stream_options"),
                  "%s %s: status %d", so[i][0], so[i][1], st);
        cJSON_Delete(j);
    }
    st = call_hdr("POST", "/v1/completions", bearer,
                  "{\"prompt\":\"Once\",\"max_tokens\":2,\"stream\":true,"
                  "\"stream_options\":{\"include_usage\":true}}",
                  &j);
    CHECK_MSG(st == 200, "stream_options with stream: %d", st);
    cJSON_Delete(j);
    CHECK_MSG(server_stop(&srv) == 0, "the server did not exit cleanly");
}

/* 5. refused fields: a 400 naming param */
static void expect_400(const char *body, const char *param) {
    int st;
    cJSON *j = call("POST", "/completion", body, &st, NULL);
    const cJSON *p = get(get(j, "error"), "param");
    CHECK_MSG(st == 400 && cJSON_IsString(p) && !strcmp(p->valuestring, param), "%s: status %d, param %s", body, st,
              cJSON_IsString(p) ? p->valuestring : "-");
    cJSON_Delete(j);
}

/* 6. --alias */
static void test_alias(const char *model) {
    server_proc srv;
    const char *args[] = {"-t", "1", "--alias", "my-alias", NULL};
    CHECK(server_start(&srv, model, args) == 0);
    if (srv.port <= 0) return;
    g_port = srv.port;
    int st;
    cJSON *j = call("GET", "/v1/models", NULL, &st, NULL);
    const cJSON *id = get(cJSON_GetArrayItem(get(j, "data"), 0), "id");
    CHECK_MSG(st == 200 && cJSON_IsString(id) && !strcmp(id->valuestring, "my-alias"), "/v1/models: %d %s", st,
              cJSON_IsString(id) ? id->valuestring : "-");
    cJSON_Delete(j);
    j = call("GET", "/props", NULL, &st, NULL);
    id = get(j, "model_alias");
    CHECK_MSG(st == 200 && cJSON_IsString(id) && !strcmp(id->valuestring, "my-alias"), "/props: %d", st);
    cJSON_Delete(j);
    j = call("POST", "/completion", "{\"prompt\":\"Once\",\"n_predict\":2,\"model\":\"my-alias\"}", &st, NULL);
    id = get(j, "model");
    CHECK_MSG(st == 200 && cJSON_IsString(id) && !strcmp(id->valuestring, "my-alias"), "/completion: %d", st);
    cJSON_Delete(j);
    j = call("POST", "/v1/completions", "{\"prompt\":\"Once\",\"max_tokens\":2,\"model\":\"my-alias\"}", &st, NULL);
    CHECK_MSG(st == 200, "/v1/completions with the alias: %d", st);
    cJSON_Delete(j);
    j = call("POST", "/v1/completions", "{\"prompt\":\"Once\",\"max_tokens\":2,\"model\":\"native-stories\"}", &st,
             NULL);
    CHECK_MSG(st == 404, "the file's name next to an alias: %d", st);
    cJSON_Delete(j);
    CHECK_MSG(server_stop(&srv) == 0, "the server did not exit cleanly");
    const char *empty[] = {"serve", model, "--port", "0", "--alias", "", NULL};
    int rc = cli_run_until(empty, tmp_path("native-alias.log"), "listening on", 60);
    char *out = slurp_file(tmp_path("native-alias.log"));
    CHECK_MSG(rc == 2 && strstr(out, "--alias"), "--alias \"\": exit %d, '%s'", rc, out);
    free(out);
}

int main(void) {
    char path[1024];
    snprintf(path, sizeof path, "%s/llama_server_refs.json", CMF_SERVER_DATA);
    FILE *f = fopen(path, "rb");
    char *text = NULL;
    long len = 0;
    if (f && fseek(f, 0, SEEK_END) == 0 && (len = ftell(f)) > 0 && fseek(f, 0, SEEK_SET) == 0 &&
        (text = calloc(1, (size_t)len + 1)) && fread(text, 1, (size_t)len, f) != (size_t)len) {
        free(text);
        text = NULL;
    }
    if (f) fclose(f);
    cJSON *refs = text ? cJSON_Parse(text) : NULL;
    free(text);
    CHECK_MSG(refs != NULL, "cannot read %s", path);
    char model[1024];
    cmf_model *m = NULL;
    CHECK_MSG(stories_model("native-stories.cmf", model, sizeof model, &m) == CMF_OK, "%s", cmf_last_error());
    if (!m || !refs) CMF_TEST_END();
    cmf_server_opts o = cmf_server_default_opts();
    o.port = 0, o.n_slots = 2, o.n_ctx = 128;
    o.model_path = model;
    cmf_server *s = NULL;
    CHECK_MSG(cmf_server_start(m, &o, &s) == CMF_OK, "%s", cmf_last_error());
    if (s) {
        g_port = cmf_server_port(s);
        test_completion(refs);
        test_stream(refs);
        test_props(refs);
        test_pieces(refs);
        test_detokenize(refs);
        expect_400("{\"prompt\":\"Once\",\"mirostat\":2}", "mirostat");
        expect_400("{\"prompt\":\"Once\",\"typical_p\":0.5}", "typical_p");
        expect_400("{\"prompt\":\"Once\",\"dry_multiplier\":0.8}", "dry_multiplier");
        expect_400("{\"prompt\":\"Once\",\"frobnicate\":1}", "frobnicate");
    }
    cmf_server_stop(s);
    cmf_model_free(m);
    cJSON_Delete(refs);
    test_alias(model);
    test_llama_paths(model);
    CMF_TEST_END();
}
