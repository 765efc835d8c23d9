/* test_chat_render.c — the chat API (cmf_chat_render) on tiny random models built around the real qwen3, llama3
 * and mistral tokenizer bundles (chatmodel.h), against data/chat_refs.json (Python jinja2 renderings set up as
 * transformers does, made by scripts/template/make_chat_refs.py): every case byte for byte, the ChatML fallback of
 * a file without a template, the template's own exceptions and bad-input errors. The rendered prompts are also
 * tokenized without special tokens to check that the template's special tokens come out as single ids. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "chatmodel.h"
#include "cmf.h"
#include "testutil.h"
#include "util/fileio.h"


typedef struct fam {
    const char *name, *arch;
    cmf_model *m;
} fam;

static fam FAMS[] = {{"qwen3", "qwen3", NULL}, {"llama3", "llama", NULL}, {"mistral", "llama", NULL}};

static cmf_model *model_of(const char *family) {
    for (size_t i = 0; i < 3; i++)
        if (!strcmp(FAMS[i].name, family)) return FAMS[i].m;
    return NULL;
}

static int num(const cJSON *o, const char *k) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsNumber(v) ? v->valueint : -1;
}

static void run_case(const cJSON *c) {
    const char *name = cJSON_GetObjectItemCaseSensitive(c, "name")->valuestring;
    cmf_model *m = model_of(cJSON_GetObjectItemCaseSensitive(c, "family")->valuestring);
    if (!m) return;
    cmf_chat_params p = cmf_chat_default_params();
    char *msgs = cJSON_PrintUnformatted(cJSON_GetObjectItemCaseSensitive(c, "messages"));
    const cJSON *tools = cJSON_GetObjectItemCaseSensitive(c, "tools");
    const cJSON *extra = cJSON_GetObjectItemCaseSensitive(c, "extra");
    char *tools_s = tools ? cJSON_PrintUnformatted(tools) : NULL;
    char *extra_s = extra ? cJSON_PrintUnformatted(extra) : NULL;
    const cJSON *tsrc = cJSON_GetObjectItemCaseSensitive(c, "template_src");
    p.messages_json = msgs;
    p.tools_json = tools_s;
    p.extra_json = extra_s;
    p.template_src = cJSON_IsString(tsrc) ? tsrc->valuestring : NULL;
    p.add_generation_prompt = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(c, "add_generation_prompt"));
    p.enable_thinking = num(c, "enable_thinking");
    const char *content = cJSON_GetObjectItemCaseSensitive(c, "content")->valuestring;
    p.content = !strcmp(content, "string") ? CMF_CHAT_CONTENT_STRING
                : !strcmp(content, "parts") ? CMF_CHAT_CONTENT_PARTS : CMF_CHAT_CONTENT_AUTO;
    char *out = NULL;
    size_t len = 0;
    cmf_status st = cmf_chat_render(m, &p, &out, &len);
    const cJSON *exp = cJSON_GetObjectItemCaseSensitive(c, "expected");
    const cJSON *err = cJSON_GetObjectItemCaseSensitive(c, "error");
    if (cJSON_IsString(exp)) {
        CHECK_MSG(st == CMF_OK, "%s: %s", name, cmf_last_error());
        if (st == CMF_OK) {
            CHECK_MSG(len == strlen(exp->valuestring) && !strcmp(out, exp->valuestring),
                      "%s:\n--- got ---\n%s\n--- want ---\n%s", name, out, exp->valuestring);
            /* the template's special tokens are single ids when tokenized without adding special tokens */
            const cmf_tokenizer *tok = cmf_model_tokenizer(m);
            int32_t *ids = NULL;
            size_t n = 0;
            CHECK_MSG(tok && cmf_tokenize(tok, out, len, 0, &ids, &n) == CMF_OK, "%s: tokenize", name);
            const char *marks[] = {"<|im_start|>", "<|start_header_id|>"};
            for (int k = 0; k < 2 && tok; k++) {
                int32_t id = cmf_tokenizer_token_id(tok, marks[k]);
                if (id < 0 || !strstr(out, marks[k])) continue;
                size_t want = 0, got = 0;
                for (const char *q = out; (q = strstr(q, marks[k])); q++) want++;
                for (size_t i = 0; i < n; i++) got += ids[i] == id;
                CHECK_MSG(got == want, "%s: %zu of %zu %s became one id", name, got, want, marks[k]);
            }
            free(ids);
        }
    } else {
        const char *kind = cJSON_GetObjectItemCaseSensitive(err, "kind")->valuestring;
        CHECK_MSG(st != CMF_OK && out == NULL, "%s: expected an error", name);
        if (!strcmp(kind, "raise")) {
            const char *msg = cJSON_GetObjectItemCaseSensitive(err, "message")->valuestring;
            CHECK_MSG(st == CMF_E_ARG && strstr(cmf_last_error(), msg), "%s: %d %s", name, st, cmf_last_error());
        } else {
            CHECK_MSG(st == CMF_E_FORMAT && !strncmp(cmf_last_error(), "chat template: template:", 24),
                      "%s: %d %s", name, st, cmf_last_error());
        }
    }
    free(out);
    free(msgs);
    free(tools_s);
    free(extra_s);
}

/* Bad input: each call must fail with `want` and a message containing `needle`. */
static void expect_err(cmf_model *m, const char *messages, const char *tools, const char *extra, const char *tpl,
                       cmf_status want, const char *needle) {
    cmf_chat_params p = cmf_chat_default_params();
    p.messages_json = messages;
    p.tools_json = tools;
    p.extra_json = extra;
    p.template_src = tpl;
    char *out = (char *)"unchanged";
    cmf_status st = cmf_chat_render(m, &p, &out, NULL);
    CHECK_MSG(st == want && out == NULL && strstr(cmf_last_error(), needle), "%s: got %d '%s', want %d '%s'",
              messages, st, cmf_last_error(), want, needle);
}

static void errors(cmf_model *qwen) {
    expect_err(qwen, "[{\"role\":\"user\",\"content\":\"x\"", NULL, NULL, NULL, CMF_E_FORMAT, "messages: malformed JSON");
    expect_err(qwen, "{\"role\":\"user\"}", NULL, NULL, NULL, CMF_E_FORMAT, "messages must be a JSON array");
    expect_err(qwen, "[{\"role\":\"user\",\"content\":\"a\"}, 3]", NULL, NULL, NULL, CMF_E_FORMAT,
               "messages[1] is not a JSON object");
    expect_err(qwen, "[{\"content\":\"a\"}]", NULL, NULL, NULL, CMF_E_FORMAT, "messages[0] has no string \"role\"");
    expect_err(qwen, "[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"a\"},{\"type\":\"image_url\"}]}]",
               NULL, NULL, NULL, CMF_E_UNSUPPORTED, "messages[0].content[1]: part type 'image_url'");
    expect_err(qwen, "[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":5}]}]", NULL, NULL, NULL,
               CMF_E_FORMAT, "messages[0].content[0]: \"text\" must be a string");
    expect_err(qwen, "[]", "{\"a\":1}", NULL, NULL, CMF_E_FORMAT, "tools must be a JSON array");
    expect_err(qwen, "[]", NULL, "[1]", NULL, CMF_E_FORMAT, "extra variables must be a JSON object");
    expect_err(qwen, "[]", NULL, NULL, "{% for x in messages %}", CMF_E_FORMAT, "chat template: template:1:");
    expect_err(qwen, "[]", NULL, NULL, "{{ raise_exception('no ' ~ messages|length) }}", CMF_E_ARG,
               "chat template: no 0");
    cmf_chat_params p = cmf_chat_default_params();
    char *out = NULL;
    CHECK(cmf_chat_render(qwen, &p, &out, NULL) == CMF_E_ARG && out == NULL); /* no messages */
    CHECK(cmf_chat_render(qwen, NULL, &out, NULL) == CMF_E_ARG);
    CHECK(cmf_chat_render(qwen, &p, NULL, NULL) == CMF_E_ARG);
    /* no model: the given template (or ChatML), no bos/eos */
    p.messages_json = "[{\"role\":\"user\",\"content\":\"hi\"}]";
    p.template_src = "[{{ bos_token }}|{{ messages[0].content }}]";
    CHECK(cmf_chat_render(NULL, &p, &out, NULL) == CMF_OK && out && !strcmp(out, "[|hi]"));
    free(out);
}

int main(void) {
    char *text = NULL;
    size_t len = 0;
    if (cmf_read_file(CMF_CHAT_DATA "/chat_refs.json", &text, &len) != CMF_OK) {
        fprintf(stderr, "%s\n", cmf_last_error());
        return 1;
    }
    cJSON *refs = cJSON_Parse(text);
    free(text);
    CHECK(refs != NULL);
    if (!refs) CMF_TEST_END();
    const cJSON *fams = cJSON_GetObjectItemCaseSensitive(refs, "families");
    char dir[512];
    snprintf(dir, sizeof dir, "%s", tmp_path("chat-render"));
    for (size_t i = 0; i < 3; i++) {
        const cJSON *f = cJSON_GetObjectItemCaseSensitive(fams, FAMS[i].name);
        char path[512];
        int rc = chat_make_model(dir, FAMS[i].name, FAMS[i].arch, num(f, "vocab_size"), num(f, "bos_token_id"),
                                 num(f, "eos_token_id"), path);
        CHECK_MSG(rc == 0, "building the %s model", FAMS[i].name);
        if (rc) continue;
        cmf_status st = cmf_model_load(path, NULL, &FAMS[i].m);
        CHECK_MSG(st == CMF_OK, "%s", cmf_last_error());
        if (st) continue;
        CHECK_MSG(cmf_model_tokenizer(FAMS[i].m) != NULL, "%s: %s", FAMS[i].name,
                  cmf_model_tokenizer_error(FAMS[i].m));
        /* the template is the tokenizer_config.json one (the converter's reading), or none for mistral */
        const char *tpl = cmf_model_chat_template(FAMS[i].m);
        int has = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(f, "has_template"));
        CHECK_MSG(has ? tpl != NULL : tpl == NULL, "%s: template presence", FAMS[i].name);
        int n_eos = 0;
        const int32_t *eos = cmf_model_eos_ids(FAMS[i].m, &n_eos);
        CHECK_MSG(n_eos >= 1 && eos[0] == num(f, "eos_token_id"), "%s: eos id", FAMS[i].name);
        CHECK_MSG(cmf_model_bos_id(FAMS[i].m) == num(f, "bos_token_id"), "%s: bos id", FAMS[i].name);
    }
    CHECK(strstr(cmf_chat_template_chatml(), "<|im_start|>") != NULL);
    const cJSON *c;
    int n = 0;
    cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(refs, "cases")) {
        run_case(c);
        n++;
    }
    CHECK(n >= 30);
    if (FAMS[0].m) errors(FAMS[0].m);
    for (size_t i = 0; i < 3; i++) cmf_model_free(FAMS[i].m);
    cJSON_Delete(refs);
    printf("%d chat cases\n", n);
    CMF_TEST_END();
}
