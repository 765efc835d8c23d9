/* test_json_mode.c — `cmf serve` with response_format {"type": "json_object"} (OpenAI's JSON mode; cmf.h
 * "Constrained sampling"): each answer is the text the library draws for the same prompt, seed and settings with a
 * JSON-mode sampler (the reference: the session + sampler + constraint of the library, detokenized), on
 * /v1/completions, streamed and not, greedy and sampled, and that text is a prefix of a JSON object; a chat reply in
 * JSON mode starts an object; with ignore_eos the reply ends when the object closes; a template that opens <think>
 * keeps the reasoning free (JSON mode starts after </think>); response_format other than {"type": "text"} /
 * {"type": "json_object"} (a schema, another key, a repeated key) and JSON mode with a forced tool call are 400s
 * naming response_format.
 * The model: a random one-layer Qwen3 (test_server's shape) with the qwen3 tokenizer and eos ids. */
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

enum { N_GEN = 24 };
static const int32_t PROMPT[] = {9707, 11, 1879, 0, 2585, 525};
#define N_PROMPT ((int)(sizeof PROMPT / sizeof PROMPT[0]))

/* The library's JSON-mode text after PROMPT (temperature temp, seed), at most N_GEN tokens or up to an eos id.
 * Caller frees. */
static char *lib_text(cmf_model *m, float temp, uint64_t seed) {
    cmf_session *s = NULL;
    cmf_sampler *smp = NULL;
    cmf_constraint *c = NULL;
    char *text = NULL;
    int32_t ids[N_GEN];
    int n = 0, n_eos = 0;
    const int32_t *eos = cmf_model_eos_ids(m, &n_eos);
    cmf_sampler_params p = cmf_sampler_default_params();
    p.temperature = temp, p.seed = seed, p.top_k = 0, p.top_p = 1.0f; /* the server's (OpenAI's) defaults */
    if (cmf_session_new(m, 64, &s) != CMF_OK || cmf_session_prefill(s, PROMPT, N_PROMPT, NULL) != CMF_OK ||
        cmf_sampler_new(cmf_model_vocab_size(m), &p, &smp) != CMF_OK ||
        cmf_constraint_new_json(cmf_model_tokenizer(m), cmf_model_vocab_size(m), eos, n_eos, &c) != CMF_OK ||
        cmf_sampler_set_constraint(smp, c) != CMF_OK) {
        fprintf(stderr, "lib_text: %s\n", cmf_last_error());
        goto done;
    }
    for (; n < N_GEN; n++) {
        int32_t t;
        if (cmf_session_sample(s, smp, &t) != CMF_OK) goto done;
        int end = 0;
        for (int i = 0; i < n_eos; i++) end |= t == eos[i];
        if (end) break;
        cmf_sampler_accept(smp, t);
        ids[n] = t;
        if (n + 1 < N_GEN && cmf_session_decode(s, t) != CMF_OK) goto done;
    }
    if (cmf_detokenize(cmf_model_tokenizer(m), ids, (size_t)n, 0, &text) != CMF_OK) text = NULL;
done:
    cmf_sampler_free(smp);
    cmf_constraint_free(c);
    cmf_session_free(s);
    return text;
}

/* A JSON prefix: the recognizer takes every byte (it is checked against Python's json in test_json_fsm). */
static int json_prefix(const char *s) {
    cmf_json_fsm f;
    cmf_json_fsm_init(&f);
    return s && cmf_json_fsm_feed(&f, s, strlen(s));
}

/* /v1/completions in JSON mode; stream: the deltas joined. Returns the status, *text the text (malloc'd). */
static int complete(int port, float temp, uint64_t seed, int stream, char **text) {
    char body[1024], pj[256];
    snprintf(body, sizeof body, "{\"prompt\": %s, \"max_tokens\": %d, \"temperature\": %g, \"seed\": %llu, "
             "\"stream\": %s, \"response_format\": {\"type\": \"json_object\"}}",
             ids_json_buf(pj, sizeof pj, PROMPT, N_PROMPT), N_GEN, (double)temp, (unsigned long long)seed,
             stream ? "true" : "false");
    *text = NULL;
    if (!stream) {
        cJSON *j = NULL;
        int st = http_post_json(port, "/v1/completions", body, &j);
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(
            cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(j, "choices"), 0), "text");
        if (st == 200 && cJSON_IsString(t)) *text = strdup(t->valuestring);
        cJSON_Delete(j);
        return st;
    }
    http_resp r;
    if (http_request(port, "POST", "/v1/completions", NULL, body, &r) != 0) return -1;
    size_t cap = r.body_len + 1, n = 0;
    char *out = calloc(cap, 1);
    for (char *line = r.body ? strstr(r.body, "data: {") : NULL; line && out; line = strstr(line + 1, "data: {")) {
        char *end = strstr(line, "\n\n");
        if (!end) break;
        cJSON *j = cJSON_ParseWithLength(line + 6, (size_t)(end - line - 6));
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(
            cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(j, "choices"), 0), "text");
        if (cJSON_IsString(t) && n + strlen(t->valuestring) < cap) {
            memcpy(out + n, t->valuestring, strlen(t->valuestring));
            n += strlen(t->valuestring);
        }
        cJSON_Delete(j);
    }
    const int st = r.status;
    http_resp_free(&r);
    *text = out;
    return st;
}

/* A chat reply (temperature 1, seed, 16 tokens; json: JSON mode): its content, reasoning_content ("" when none) and
 * finish_reason, malloc'd. Returns the status. */
static int chat(int port, uint64_t seed, int json, char **content, char **reasoning, char **finish) {
    char body[512];
    snprintf(body, sizeof body, "{\"messages\": [{\"role\": \"user\", \"content\": \"Give JSON\"}], \"max_tokens\": "
             "16, \"seed\": %llu%s}", (unsigned long long)seed,
             json ? ", \"response_format\": {\"type\": \"json_object\"}" : "");
    cJSON *j = NULL;
    int st = http_post_json(port, "/v1/chat/completions", body, &j);
    const cJSON *c = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(j, "choices"), 0);
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(c, "message");
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(m, "content"), *r = cJSON_GetObjectItemCaseSensitive(m, "reasoning_content");
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(c, "finish_reason");
    *content = cJSON_IsString(t) ? strdup(t->valuestring) : NULL;
    *reasoning = strdup(cJSON_IsString(r) ? r->valuestring : "");
    *finish = cJSON_IsString(f) ? strdup(f->valuestring) : NULL;
    cJSON_Delete(j);
    return st;
}

static int status_of(int port, const char *path, const char *body, const char *param) {
    cJSON *j = NULL;
    int st = http_post_json(port, path, body, &j);
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(j, "error"), "param");
    if (st == 400 && !(cJSON_IsString(p) && !strcmp(p->valuestring, param))) st = -400; /* another field named */
    cJSON_Delete(j);
    return st;
}

int main(void) {
    char dir[1024], model[1024];
    snprintf(dir, sizeof dir, "%s", tmp_path("json-mode-hf"));
    snprintf(model, sizeof model, "%s", tmp_path("json-mode.cmf"));
    testmodel_spec sp = {shared_path("data/tokenizers/qwen3"), 151669, 32, 1, 4, 2, 8, 64, CMF_DT_Q8_ROW, 7,
                         "[151645, 151643]", NULL, 0, 0};
    CHECK_MSG(testmodel_write(&sp, dir, model) == CMF_OK, "%s", cmf_last_error());
    cmf_model_params mp = {.n_threads = 1};
    cmf_model *m = NULL;
    CHECK_MSG(cmf_model_load(model, &mp, &m) == CMF_OK, "%s", cmf_last_error());
    if (!m) CMF_TEST_END();
    struct {
        float temp;
        uint64_t seed;
    } runs[] = {{0.0f, 0}, {1.0f, 1}, {1.0f, 2}, {0.7f, 3}};
    enum { N_RUNS = sizeof runs / sizeof runs[0] };
    char *ref[N_RUNS];
    for (int i = 0; i < N_RUNS; i++) {
        ref[i] = lib_text(m, runs[i].temp, runs[i].seed);
        CHECK_MSG(ref[i] && json_prefix(ref[i]), "reference %d is not a JSON prefix: '%s'", i, ref[i] ? ref[i] : "");
        printf("reference %d (temp %g, seed %llu): '%s'\n", i, (double)runs[i].temp, (unsigned long long)runs[i].seed,
               ref[i] ? ref[i] : "");
    }
    cmf_model_free(m);

    server_proc srv;
    const char *args[] = {"--parallel", "2", "-c", "256", "-t", "1", NULL};
    CHECK(server_start(&srv, model, args) == 0);
    if (srv.port <= 0) CMF_TEST_END();
    for (int i = 0; i < N_RUNS; i++)
        for (int stream = 0; stream < 2; stream++) {
            char *t = NULL;
            int st = complete(srv.port, runs[i].temp, runs[i].seed, stream, &t);
            CHECK_MSG(st == 200 && t && ref[i] && !strcmp(t, ref[i]), "run %d (temp %g, seed %llu, stream %d): %d '%s', "
                      "want '%s'", i, (double)runs[i].temp, (unsigned long long)runs[i].seed, stream, st, t ? t : "",
                      ref[i] ? ref[i] : "");
            free(t);
        }
    /* a chat reply in JSON mode starts an object */
    char *content = NULL, *reasoning = NULL, *finish = NULL;
    CHECK(chat(srv.port, 5, 1, &content, &reasoning, &finish) == 200);
    CHECK_MSG(content && json_prefix(content) && strchr(content, '{'), "chat JSON mode: '%s'", content ? content : "");
    free(content), free(reasoning), free(finish);
    /* ignore_eos: the reply ends when the object closes (only end tokens could follow), "stop" */
    cmf_json_fsm f;
    cmf_json_fsm_init(&f);
    CHECK_MSG(ref[0] && cmf_json_fsm_feed(&f, ref[0], strlen(ref[0])) && cmf_json_fsm_done(&f),
              "the greedy reference does not close its object: the ignore_eos check needs one that does");
    char body[1024], pj[256];
    snprintf(body, sizeof body, "{\"prompt\": %s, \"max_tokens\": %d, \"temperature\": 0, \"ignore_eos\": true, "
             "\"response_format\": {\"type\": \"json_object\"}}", ids_json_buf(pj, sizeof pj, PROMPT, N_PROMPT), N_GEN);
    cJSON *j = NULL;
    CHECK(http_post_json(srv.port, "/v1/completions", body, &j) == 200);
    const cJSON *c0 = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(j, "choices"), 0);
    const cJSON *tx = cJSON_GetObjectItemCaseSensitive(c0, "text"), *fr = cJSON_GetObjectItemCaseSensitive(c0, "finish_reason");
    CHECK_MSG(cJSON_IsString(tx) && ref[0] && !strcmp(tx->valuestring, ref[0]) && cJSON_IsString(fr) &&
                  !strcmp(fr->valuestring, "stop"), "ignore_eos in JSON mode: '%s' (%s)",
              cJSON_IsString(tx) ? tx->valuestring : "", cJSON_IsString(fr) ? fr->valuestring : "");
    cJSON_Delete(j);
    /* refused, naming response_format: a schema in either form, another key, a repeated key, a bad type or shape,
     * JSON mode with a forced tool call */
    static const char *const BAD[] = {
        "{\"type\": \"json_schema\", \"json_schema\": {\"name\": \"x\", \"schema\": {}}}",
        "{\"type\": \"json_object\", \"schema\": {\"type\": \"object\"}}",
        "{\"type\": \"json_object\", \"json_schema\": {}}", "{\"type\": \"json_object\", \"strict\": true}",
        "{\"type\": \"text\", \"type\": \"json_object\"}", "{\"type\": 1}", "{\"type\": null}", "{}", "[]",
        "\"json_object\"", "{\"type\": \"xml\"}"};
    for (size_t i = 0; i < sizeof BAD / sizeof BAD[0]; i++) {
        snprintf(body, sizeof body, "{\"prompt\": \"a\", \"max_tokens\": 2, \"response_format\": %s}", BAD[i]);
        CHECK_MSG(status_of(srv.port, "/v1/completions", body, "response_format") == 400, "response_format %s", BAD[i]);
    }
    CHECK(status_of(srv.port, "/v1/completions", "{\"prompt\": \"a\", \"max_tokens\": 2, \"response_format\": "
                    "{\"type\": \"text\"}}", "response_format") == 200);
    CHECK(status_of(srv.port, "/v1/chat/completions", "{\"messages\": [{\"role\": \"user\", \"content\": \"w\"}], "
                    "\"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"f\", \"parameters\": {}}}], "
                    "\"tool_choice\": \"required\", \"response_format\": {\"type\": \"json_object\"}}",
                    "response_format") == 400);
    CHECK_MSG(server_stop(&srv) == 0, "the server did not exit cleanly");

    /* a template that opens <think> for the reply: the reasoning is free text, JSON mode starts after </think>;
     * this random model does not close its think block in 16 tokens, so a JSON-mode reply is the plain reply */
    const char *tpl = tmp_path("json-mode-think.jinja");
    FILE *tf = fopen(tpl, "w");
    CHECK(tf != NULL);
    if (tf) {
        fputs("{%- for m in messages %}{{- '<|im_start|>' + m.role + '\\n' + m.content + '<|im_end|>\\n' }}{%- endfor %}"
              "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n<think>\\n' }}{%- endif %}", tf);
        fclose(tf);
    }
    const char *args2[] = {"-c", "256", "-t", "1", "--chat-template-file", tpl, NULL};
    CHECK(server_start(&srv, model, args2) == 0);
    for (uint64_t seed = 1; seed <= 3 && srv.port > 0; seed++) {
        char *pc = NULL, *pr = NULL, *pf = NULL, *jc = NULL, *jr = NULL, *jf = NULL;
        CHECK(chat(srv.port, seed, 0, &pc, &pr, &pf) == 200 && chat(srv.port, seed, 1, &jc, &jr, &jf) == 200);
        CHECK_MSG(pr && jr && *pr && !strcmp(pr, jr) && pc && jc && !strcmp(pc, jc),
                  "seed %llu: JSON mode changed the reasoning: plain ('%s', '%s'), JSON ('%s', '%s')",
                  (unsigned long long)seed, pr ? pr : "", pc ? pc : "", jr ? jr : "", jc ? jc : "");
        free(pc), free(pr), free(pf), free(jc), free(jr), free(jf);
    }
    if (srv.port > 0) CHECK_MSG(server_stop(&srv) == 0, "the think server did not exit cleanly");
    for (int i = 0; i < N_RUNS; i++) free(ref[i]);
    CMF_TEST_END();
}
