/* fuzz_template.c — libFuzzer target: the input is Jinja chat-template source (src/template/template.h).
 *
 * cmf_template_parse must succeed or fail with a message; a parsed template is rendered with a fixed context (a
 * conversation with system/user/assistant/tool messages, tool calls, tools, bos/eos tokens,
 * add_generation_prompt, enable_thinking) under tight sandbox limits (1 MiB of output, 100,000 loop iterations,
 * depth 32), so that every input ends quickly; the render must succeed or fail with a message, never hang. When it
 * succeeds, the same source also goes through cmf_chat_render (the chat API's own context building, with
 * list content, extra variables, default limits). Seeds: corpus/template/ (the chat templates of
 * shared/data/tokenizers/{qwen3,llama3}/tokenizer_config.json, ChatML and small templates using each statement;
 * gen_corpus.c). */
#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#include "cmf.h"
#include "fuzz_util.h"
#include "template/template.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

static const char MESSAGES[] =
    "[{\"role\":\"system\",\"content\":\"You are helpful.\"},"
    "{\"role\":\"user\",\"content\":\"What is 2+2? \\u00e9\\u4f60\"},"
    "{\"role\":\"assistant\",\"content\":\"<think>\\nadd\\n</think>\\n\\n4\","
    "\"tool_calls\":[{\"type\":\"function\",\"function\":{\"name\":\"calc\",\"arguments\":{\"x\":2,\"y\":[1,2.5]}}}]},"
    "{\"role\":\"tool\",\"content\":\"4\",\"name\":\"calc\"},"
    "{\"role\":\"user\",\"content\":\"and 3+3?\"}]";
/* The chat API call gets list content (joined or kept by CMF_CHAT_CONTENT_AUTO). */
static const char MESSAGES_PARTS[] =
    "[{\"role\":\"system\",\"content\":\"sys\"},"
    "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"a\"},{\"type\":\"text\",\"text\":\"b\"}]},"
    "{\"role\":\"assistant\",\"content\":\"ok\"},{\"role\":\"user\",\"content\":\"more\"}]";
static const char TOOLS[] =
    "[{\"type\":\"function\",\"function\":{\"name\":\"calc\",\"description\":\"adds\",\"parameters\":"
    "{\"type\":\"object\",\"properties\":{\"x\":{\"type\":\"number\"}},\"required\":[\"x\"]}}}]";

static cJSON *g_ctx;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    g_ctx = cJSON_CreateObject();
    cJSON *msgs = cJSON_Parse(MESSAGES), *tools = cJSON_Parse(TOOLS);
    if (!g_ctx || !msgs || !tools) fz_fail("fuzz_template: building the context");
    cJSON_AddItemToObject(g_ctx, "messages", msgs);
    cJSON_AddItemToObject(g_ctx, "tools", tools);
    cJSON_AddBoolToObject(g_ctx, "add_generation_prompt", 1);
    cJSON_AddBoolToObject(g_ctx, "enable_thinking", 0);
    cJSON_AddStringToObject(g_ctx, "bos_token", "<s>");
    cJSON_AddStringToObject(g_ctx, "eos_token", "</s>");
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    cmf_template *t = NULL;
    cmf_status s = cmf_template_parse((const char *)data, size, &t);
    fz_check_error(s, "cmf_template_parse");
    if (s != CMF_OK) {
        if (t) fz_fail("cmf_template_parse failed but set *out");
        return 0;
    }
    (void)cmf_template_loops_over_content(t);
    cmf_template_limits lim = {.max_output = 1 << 20, .max_iterations = 100000, .max_depth = 32};
    char *out = NULL;
    size_t out_len = 0;
    s = cmf_template_render(t, g_ctx, &lim, &out, &out_len);
    fz_check_error(s, "cmf_template_render");
    if (s == CMF_OK && (!out || strlen(out) > out_len)) fz_fail("cmf_template_render: output/length mismatch");
    if (s != CMF_OK && out) fz_fail("cmf_template_render failed but set *out");
    free(out);
    cmf_template_free(t);
    if (s != CMF_OK || memchr(data, 0, size)) return 0;
    char *src = malloc(size + 1);
    if (!src) return 0;
    memcpy(src, data, size);
    src[size] = 0;
    cmf_chat_params p = cmf_chat_default_params();
    p.messages_json = MESSAGES_PARTS;
    p.tools_json = TOOLS;
    p.template_src = src;
    p.enable_thinking = 1;
    p.extra_json = "{\"bos_token\":\"<s>\",\"eos_token\":\"</s>\",\"custom\":[1,{\"k\":null}]}";
    out = NULL;
    s = cmf_chat_render(NULL, &p, &out, &out_len);
    fz_check_error(s, "cmf_chat_render");
    free(out);
    free(src);
    return 0;
}
