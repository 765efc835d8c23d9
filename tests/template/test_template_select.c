/* test_template_select.c — cmf_chat_template_select (src/template/template.h): which template of a
 * tokenizer_config.json's "chat_template" is used, by transformers' rule (PreTrainedTokenizerBase.get_chat_template:
 * the list becomes a dict {name: template}; with tools, "tool_use" when present, else "default"; a string as is),
 * and the errors for malformed values. */
#include <string.h>

#include <cjson/cJSON.h>

#include "template/template.h"
#include "testutil.h"

/* The template chosen from the JSON value `json` (NULL on error / none), with `has_tools`. */
static const char *pick(cJSON **keep, const char *json, int has_tools, cmf_status *st) {
    *keep = cJSON_Parse(json);
    const char *src = "unset";
    *st = cmf_chat_template_select(*keep, has_tools, &src);
    return src;
}

int main(void) {
    cJSON *j = NULL;
    cmf_status st;
    const char *both = "[{\"name\": \"default\", \"template\": \"D\"}, {\"name\": \"tool_use\", \"template\": \"T\"}]";
    const char *s = pick(&j, both, 1, &st);
    CHECK(st == CMF_OK && s && !strcmp(s, "T")); /* tools passed: tool_use */
    cJSON_Delete(j);
    s = pick(&j, both, 0, &st);
    CHECK(st == CMF_OK && s && !strcmp(s, "D")); /* no tools: default */
    cJSON_Delete(j);
    s = pick(&j, "[{\"name\": \"tool_use\", \"template\": \"T\"}, {\"name\": \"default\", \"template\": \"D\"}]", 1,
             &st);
    CHECK(st == CMF_OK && s && !strcmp(s, "T")); /* order does not matter */
    cJSON_Delete(j);
    s = pick(&j, "[{\"name\": \"default\", \"template\": \"D\"}, {\"name\": \"rag\", \"template\": \"R\"}]", 1, &st);
    CHECK(st == CMF_OK && s && !strcmp(s, "D")); /* tools but no tool_use: default */
    cJSON_Delete(j);
    s = pick(&j, "[{\"name\": \"default\", \"template\": \"D1\"}, {\"name\": \"default\", \"template\": \"D2\"}]", 0,
             &st);
    CHECK(st == CMF_OK && s && !strcmp(s, "D2")); /* a dict: the later duplicate wins */
    cJSON_Delete(j);
    s = pick(&j, "\"S\"", 1, &st);
    CHECK(st == CMF_OK && s && !strcmp(s, "S")); /* a string is the template, tools or not */
    cJSON_Delete(j);
    s = pick(&j, "null", 0, &st);
    CHECK(st == CMF_OK && s == NULL); /* no template: the caller falls back to ChatML */
    cJSON_Delete(j);
    CHECK(cmf_chat_template_select(NULL, 0, &s) == CMF_OK && s == NULL);

    /* errors name what is wrong */
    s = pick(&j, "[{\"name\": \"tool_use\", \"template\": \"T\"}, {\"name\": \"rag\", \"template\": \"R\"}]", 0, &st);
    CHECK(st == CMF_E_FORMAT && s == NULL);
    CHECK_MSG(strstr(cmf_last_error(), "no \"default\"") && strstr(cmf_last_error(), "\"tool_use\", \"rag\""), "%s",
              cmf_last_error());
    cJSON_Delete(j);
    s = pick(&j, "[{\"name\": \"default\", \"template\": \"D\"}, {\"name\": 3, \"template\": \"T\"}]", 0, &st);
    CHECK_MSG(st == CMF_E_FORMAT && strstr(cmf_last_error(), "chat_template[1]"), "%s", cmf_last_error());
    cJSON_Delete(j);
    s = pick(&j, "42", 0, &st);
    CHECK_MSG(st == CMF_E_FORMAT && strstr(cmf_last_error(), "neither a string nor a list"), "%s", cmf_last_error());
    cJSON_Delete(j);
    s = pick(&j, "[]", 1, &st);
    CHECK_MSG(st == CMF_E_FORMAT && strstr(cmf_last_error(), "it has: none"), "%s", cmf_last_error());
    cJSON_Delete(j);
    CHECK(cmf_chat_template_select(NULL, 0, NULL) == CMF_E_ARG);
    CMF_TEST_END();
}
