/* test_llamacpp — llama-server's request fields on `cmf serve` (src/server/llamacpp.c) and
 * `cmf serve --chat-template-file`:
 *   1. stories260K (converted from its GGUF; it never emits EOS within its context): n_predict N gives exactly N
 *      completion tokens on both generation routes, n_predict -1 runs to the full context; n_predict and
 *      max_tokens / max_completion_tokens, repeat_penalty and repetition_penalty: equal values are accepted,
 *      different ones a 400 naming the llama-server field; repeat_penalty gives repetition_penalty's text;
 *      repeat_last_n 0 switches the penalty off, -1 gives the default window's text (all generated tokens);
 *      cache_prompt and id_slot -1 are accepted; each refused field (grammar, json_schema, n_probs > 0,
 *      typical_p != 1, mirostat != 0, ...) is a 400 naming it, also on /apply-template; their disabled values
 *      are accepted; reasoning_format "none" is refused on the chat route only;
 *   2. a random "chain" model (testmodel.c) whose greedy output after token 100 is 200, 300, 400, then the EOS
 *      <|im_end|>: without ignore_eos the request stops there ("stop", 4 tokens), with ignore_eos it runs to
 *      max_tokens ("length") past the EOS, whose text is not shown;
 *   3. --chat-template-file: /apply-template renders with the file's template (the library's rendering of the
 *      same source, cmf_chat_render template_src) instead of the model's; a template that does not parse and a
 *      missing file exit 1 with a message naming the file; cmf_server_start refuses such a template (CMF_E_FORMAT). */
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

static int g_port;

/* POSTs body and returns the parsed answer (NULL when it is not JSON); *status gets the HTTP status. */
static cJSON *post(const char *path, const char *body, int *status) {
    http_resp r;
    *status = 0;
    if (http_request(g_port, "POST", path, NULL, body, &r) != 0) return NULL;
    *status = r.status;
    cJSON *j = r.body ? cJSON_Parse(r.body) : NULL;
    http_resp_free(&r);
    return j;
}

static const cJSON *choice0(const cJSON *j) {
    return cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(j, "choices"), 0);
}

static int usage(const cJSON *j, const char *name) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(j, "usage"), name);
    return cJSON_IsNumber(v) ? v->valueint : -1;
}

static const char *finish(const cJSON *j) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(choice0(j), "finish_reason");
    return cJSON_IsString(v) ? v->valuestring : "";
}

/* The completion text (or chat message content) of a 200 answer, malloc'd ("" when absent). */
static char *text_of(const cJSON *j) {
    const cJSON *c = choice0(j), *t = cJSON_GetObjectItemCaseSensitive(c, "text");
    if (!t) t = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(c, "message"), "content");
    return strdup(cJSON_IsString(t) ? t->valuestring : "");
}

/* A completion of `extra` fields after a fixed prompt, greedy; returns its text (malloc'd) or NULL on non-200. */
static char *complete(const char *extra, int *n_tokens) {
    char body[1024];
    snprintf(body, sizeof body, "{\"prompt\":\"Once upon a time\",\"temperature\":0%s%s}", *extra ? "," : "", extra);
    int st;
    cJSON *j = post("/v1/completions", body, &st);
    char *t = st == 200 ? text_of(j) : NULL;
    if (n_tokens) *n_tokens = usage(j, "completion_tokens");
    CHECK_MSG(st == 200, "%s -> %d", body, st);
    cJSON_Delete(j);
    return t;
}

/* A 400 whose error.param names `field`. */
static void expect_400(const char *path, const char *body, const char *field) {
    int st;
    cJSON *j = post(path, body, &st);
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(j, "error"), "param");
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(j, "error"), "message");
    CHECK_MSG(st == 400 && cJSON_IsString(p) && !strcmp(p->valuestring, field) && cJSON_IsString(m) &&
                  strstr(m->valuestring, field),
              "%s %s -> %d, param %s, message %s", path, body, st, cJSON_IsString(p) ? p->valuestring : "-",
              cJSON_IsString(m) ? m->valuestring : "-");
    cJSON_Delete(j);
}

/* 1. stories260K */
static void test_fields(int n_ctx) {
    int st, n = 0;
    /* n_predict: exactly N tokens (stories260K does not stop by itself), on both routes */
    char *t = complete("\"n_predict\":3", &n);
    CHECK_MSG(n == 3, "n_predict 3: %d tokens", n);
    free(t);
    cJSON *j = post("/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"n_predict\":2}",
                    &st);
    CHECK_MSG(st == 200 && usage(j, "completion_tokens") == 2 && !strcmp(finish(j), "length"),
              "chat n_predict 2: %d, %d", st, usage(j, "completion_tokens"));
    cJSON_Delete(j);
    j = post("/v1/completions", "{\"prompt\":\"Once upon a time\",\"temperature\":0,\"n_predict\":-1}", &st);
    CHECK_MSG(st == 200 && usage(j, "prompt_tokens") + usage(j, "completion_tokens") == n_ctx &&
                  !strcmp(finish(j), "length"),
              "n_predict -1: %d, %d + %d tokens (context %d)", st, usage(j, "prompt_tokens"),
              usage(j, "completion_tokens"), n_ctx);
    cJSON_Delete(j);
    /* synonyms: equal values accepted, different ones refused */
    t = complete("\"n_predict\":4,\"max_tokens\":4", &n);
    CHECK_MSG(n == 4, "n_predict = max_tokens = 4: %d tokens", n);
    free(t);
    expect_400("/v1/completions", "{\"prompt\":\"Once\",\"n_predict\":4,\"max_tokens\":5}", "n_predict");
    expect_400("/v1/completions", "{\"prompt\":\"Once\",\"n_predict\":-1,\"max_completion_tokens\":5}", "n_predict");
    expect_400("/v1/chat/completions",
               "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"repeat_penalty\":1.3,"
               "\"repetition_penalty\":1.2}",
               "repeat_penalty");
    /* repeat_penalty is repetition_penalty; repeat_last_n 0 turns it off, -1 keeps every generated token */
    char *plain = complete("\"max_tokens\":40", NULL);
    char *rp = complete("\"max_tokens\":40,\"repetition_penalty\":2", NULL);
    char *lrp = complete("\"max_tokens\":40,\"repeat_penalty\":2", NULL);
    char *both = complete("\"max_tokens\":40,\"repeat_penalty\":2,\"repetition_penalty\":2", NULL);
    char *off = complete("\"max_tokens\":40,\"repeat_penalty\":2,\"repeat_last_n\":0", NULL);
    char *all = complete("\"max_tokens\":40,\"repeat_penalty\":2,\"repeat_last_n\":-1", NULL);
    char *short_w = complete("\"max_tokens\":40,\"repeat_penalty\":2,\"repeat_last_n\":2", NULL);
    if (plain && rp && lrp && both && off && all && short_w) {
        CHECK_MSG(strcmp(plain, rp) != 0, "the penalty changes nothing here: '%s'", plain);
        CHECK_MSG(!strcmp(rp, lrp) && !strcmp(rp, both), "repeat_penalty '%s' vs repetition_penalty '%s'", lrp, rp);
        CHECK_MSG(!strcmp(off, plain), "repeat_last_n 0: '%s', no penalty: '%s'", off, plain);
        CHECK_MSG(!strcmp(all, rp), "repeat_last_n -1: '%s', default window: '%s'", all, rp);
        CHECK_MSG(strcmp(short_w, rp) != 0, "repeat_last_n 2 gives the full window's text '%s'", rp);
    }
    free(plain), free(rp), free(lrp), free(both), free(off), free(all), free(short_w);
    /* accepted as given: cache_prompt, id_slot -1, and the disabled values of the refused samplers */
    t = complete("\"max_tokens\":2,\"cache_prompt\":false,\"id_slot\":-1,\"typical_p\":1,\"mirostat\":0,"
                 "\"mirostat_tau\":5,\"mirostat_eta\":0.1,\"dynatemp_range\":0,\"dynatemp_exponent\":1,"
                 "\"dry_multiplier\":0,\"dry_base\":1.75,\"dry_allowed_length\":2,\"dry_penalty_last_n\":-1,"
                 "\"dry_sequence_breakers\":[\"\\n\"],\"xtc_probability\":0,\"xtc_threshold\":0.1,\"top_n_sigma\":-1,"
                 "\"n_probs\":0,\"min_keep\":0,\"n_indent\":0,\"n_keep\":0,\"n_discard\":0,\"n_cache_reuse\":0,"
                 "\"n_cmpl\":1,\"t_max_predict_ms\":0,\"grammar\":\"\",\"return_tokens\":false,"
                 "\"timings_per_token\":false,\"logit_bias\":[],\"lora\":[],\"ignore_eos\":false",
                 &n);
    CHECK_MSG(t && n == 2, "neutral llama-server fields: %d tokens", n);
    free(t);
    /* reasoning_format: the chat route does "deepseek" / "auto"; the completions text is raw, as "none" asks */
    j = post("/v1/chat/completions",
             "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"max_tokens\":1,"
             "\"reasoning_format\":\"deepseek\"}",
             &st);
    CHECK_MSG(st == 200, "chat reasoning_format deepseek: %d", st);
    cJSON_Delete(j);
    t = complete("\"max_tokens\":1,\"reasoning_format\":\"none\"", &n);
    free(t);
    expect_400("/v1/chat/completions",
               "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"reasoning_format\":\"none\"}",
               "reasoning_format");
    expect_400("/v1/completions", "{\"prompt\":\"Once\",\"reasoning_format\":\"raw\"}", "reasoning_format");
    /* refused: a 400 naming the field, on both routes and /apply-template */
    static const char *const refused[][2] = {
        {"grammar", "\"root ::= [a-z]+\""}, {"json_schema", "{}"}, {"n_probs", "3"}, {"typical_p", "0.9"},
        {"mirostat", "2"}, {"dynatemp_range", "0.5"}, {"dry_multiplier", "0.8"}, {"xtc_probability", "0.5"},
        {"top_n_sigma", "1"}, {"penalty_prompt", "\"x\""}, {"samplers", "[\"top_k\",\"temperature\"]"},
        {"id_slot", "0"}, {"t_max_predict_ms", "100"}, {"n_indent", "2"}, {"min_keep", "5"}, {"n_cmpl", "2"},
        {"return_tokens", "true"}, {"timings_per_token", "true"}, {"lora", "[{\"id\":0,\"scale\":1}]"},
        {"n_predict", "0"}, {"repeat_last_n", "-2"}, {"cache_prompt", "1"}, {"ignore_eos", "\"yes\""},
        {"response_fields", "[\"content\"]"}};
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        char body[512];
        snprintf(body, sizeof body, "{\"prompt\":\"Once\",\"%s\":%s}", refused[i][0], refused[i][1]);
        expect_400("/v1/completions", body, refused[i][0]);
        snprintf(body, sizeof body, "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"%s\":%s}",
                 refused[i][0], refused[i][1]);
        expect_400("/v1/chat/completions", body, refused[i][0]);
        if (strcmp(refused[i][0], "n_predict") != 0 && strcmp(refused[i][0], "repeat_last_n") != 0 &&
            strcmp(refused[i][0], "ignore_eos") != 0) /* read by the generation routes only */
            expect_400("/apply-template", body, refused[i][0]);
    }
}

/* 2. ignore_eos on a model that emits EOS */
static void test_ignore_eos(void) {
    static const int32_t chain[] = {100, 200, 300, 400};
    testmodel_spec sp = {shared_path("data/tokenizers/qwen3"), 151669, 32, 1, 4, 2, 8, 64, CMF_DT_F32, 5,
                         "[151645, 151643]", chain, 4, 151645};
    char dir[1024], model[1024];
    snprintf(dir, sizeof dir, "%s", tmp_path("llamacpp-chain-hf"));
    snprintf(model, sizeof model, "%s", tmp_path("llamacpp-chain.cmf"));
    CHECK_MSG(testmodel_write(&sp, dir, model) == CMF_OK, "%s", cmf_last_error());
    cmf_model_params mp = {.n_threads = 1};
    cmf_model *m = NULL;
    CHECK_MSG(cmf_model_load(model, &mp, &m) == CMF_OK, "%s", cmf_last_error());
    if (!m) return;
    char *want = NULL; /* the text of the chain after its first token */
    CHECK(cmf_detokenize(cmf_model_tokenizer(m), chain + 1, 3, 1, &want) == CMF_OK && want && *want);
    cmf_server_opts o = cmf_server_default_opts();
    o.port = 0, o.n_slots = 1, o.n_ctx = 64;
    cmf_server *s = NULL;
    CHECK_MSG(cmf_server_start(m, &o, &s) == CMF_OK, "%s", cmf_last_error());
    if (s && want) {
        g_port = cmf_server_port(s);
        int st;
        cJSON *j = post("/v1/completions", "{\"prompt\":[100],\"temperature\":0,\"max_tokens\":8}", &st);
        char *t = text_of(j);
        CHECK_MSG(st == 200 && usage(j, "completion_tokens") == 4 && !strcmp(finish(j), "stop") && !strcmp(t, want),
                  "without ignore_eos: %d, %d tokens, %s, '%s' (want '%s')", st, usage(j, "completion_tokens"),
                  finish(j), t, want);
        free(t);
        cJSON_Delete(j);
        j = post("/v1/completions", "{\"prompt\":[100],\"temperature\":0,\"max_tokens\":8,\"ignore_eos\":true}", &st);
        t = text_of(j);
        CHECK_MSG(st == 200 && usage(j, "completion_tokens") == 8 && !strcmp(finish(j), "length") &&
                      !strncmp(t, want, strlen(want)) && !strstr(t, "<|im_end|>"),
                  "ignore_eos: %d, %d tokens, %s, '%s'", st, usage(j, "completion_tokens"), finish(j), t);
        free(t);
        cJSON_Delete(j);
    }
    cmf_server_stop(s);
    free(want);
    cmf_model_free(m);
}

/* 3. --chat-template-file */
static void test_template_file(const char *model, const cmf_model *m) {
    static const char SRC[] = "{% for m in messages %}[{{ m.role | upper }}] {{ m.content }}\n{% endfor %}"
                              "{% if add_generation_prompt %}[ASSISTANT] {% endif %}";
    const char *msgs = "[{\"role\":\"system\",\"content\":\"Be brief.\"},{\"role\":\"user\",\"content\":\"hi\"}]";
    char tpl[1024], bad[1024], body[512];
    snprintf(tpl, sizeof tpl, "%s", tmp_path("llamacpp-tpl.jinja"));
    snprintf(bad, sizeof bad, "%s", tmp_path("llamacpp-bad.jinja"));
    FILE *f = fopen(tpl, "w");
    CHECK(f && fputs(SRC, f) >= 0 && fclose(f) == 0);
    f = fopen(bad, "w");
    CHECK(f && fputs("{% for m in messages %}{{ m.content }}", f) >= 0 && fclose(f) == 0);
    cmf_chat_params p = cmf_chat_default_params();
    p.messages_json = msgs;
    char *dflt = NULL, *want = NULL;
    CHECK(cmf_chat_render(m, &p, &dflt, NULL) == CMF_OK);
    p.template_src = SRC;
    CHECK(cmf_chat_render(m, &p, &want, NULL) == CMF_OK);
    CHECK(dflt && want && strcmp(dflt, want) != 0);

    server_proc srv;
    const char *args[] = {"-t", "1", "-c", "128", "--chat-template-file", tpl, NULL};
    CHECK(server_start(&srv, model, args) == 0);
    if (srv.port > 0 && want) {
        g_port = srv.port;
        snprintf(body, sizeof body, "{\"messages\":%s}", msgs);
        int st;
        cJSON *j = post("/apply-template", body, &st);
        const cJSON *pr = cJSON_GetObjectItemCaseSensitive(j, "prompt");
        CHECK_MSG(st == 200 && cJSON_IsString(pr) && !strcmp(pr->valuestring, want), "/apply-template: %d '%s'", st,
                  cJSON_IsString(pr) ? pr->valuestring : "");
        cJSON_Delete(j);
        snprintf(body, sizeof body, "{\"messages\":%s,\"n_predict\":1}", msgs);
        j = post("/v1/chat/completions", body, &st); /* the prompt the chat route tokenizes is the same text */
        int32_t *ids = NULL;
        size_t n = 0;
        CHECK(cmf_chat_tokenize(m, want, strlen(want), &ids, &n) == CMF_OK);
        CHECK_MSG(st == 200 && usage(j, "prompt_tokens") == (int)n, "chat: %d, %d prompt tokens, want %zu", st,
                  usage(j, "prompt_tokens"), n);
        free(ids);
        cJSON_Delete(j);
        CHECK_MSG(server_stop(&srv) == 0, "the server did not exit cleanly");
    }
    const char *log = tmp_path("llamacpp-serve.log");
    const char *bad_args[] = {"serve", model, "--port", "0", "--chat-template-file", bad, NULL};
    int rc = cli_run_until(bad_args, log, "listening on", 60);
    char *out = slurp_file(log);
    CHECK_MSG(rc == 1 && strstr(out, "does not parse") && strstr(out, "llamacpp-bad.jinja") &&
                  strstr(out, "template:1:"),
              "unparsable template: exit %d, '%s'", rc, out);
    free(out);
    const char *missing[] = {"serve", model, "--port", "0", "--chat-template-file", "/nonexistent/t.jinja", NULL};
    rc = cli_run_until(missing, log, "listening on", 60);
    out = slurp_file(log);
    CHECK_MSG(rc == 1 && strstr(out, "/nonexistent/t.jinja"), "missing template: exit %d, '%s'", rc, out);
    free(out);
    free(dflt), free(want);
}

int main(void) {
    char model[1024];
    cmf_model *m = NULL;
    CHECK_MSG(stories_model("llamacpp-stories.cmf", model, sizeof model, &m) == CMF_OK, "%s", cmf_last_error());
    if (!m) CMF_TEST_END();
    cmf_server_opts o = cmf_server_default_opts();
    o.port = 0, o.n_slots = 1, o.n_ctx = 128;
    cmf_server *s = NULL;
    CHECK_MSG(cmf_server_start(m, &o, &s) == CMF_OK, "%s", cmf_last_error());
    if (s) {
        g_port = cmf_server_port(s);
        test_fields(o.n_ctx);
    }
    cmf_server_stop(s);
    /* the library refuses a chat template that does not parse at start (cmf_server_opts.chat_template) */
    o.chat_template = "{% if messages %}";
    s = NULL;
    CHECK(cmf_server_start(m, &o, &s) == CMF_E_FORMAT && s == NULL);
    CHECK_MSG(strstr(cmf_last_error(), "does not parse") && strstr(cmf_last_error(), "template:1:"), "%s",
              cmf_last_error());
    cmf_server_stop(s);
    test_ignore_eos();
    test_template_file(model, m);
    cmf_model_free(m);
    CMF_TEST_END();
}
