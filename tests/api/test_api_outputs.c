/* test_api_outputs.c — review 9b: (1) on a NULL-argument error every output pointer a call was given is set to
 * NULL / 0 (cmf.h: "*out NULL on error"), so a caller that frees it after an error frees nothing; (2) cmf_chat_render
 * refuses enum values outside their range and JSON strings holding U+0000 (cJSON would cut the string there and the
 * rest of the message would be lost silently), while the same message without it renders whole. */
#include <stdint.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include "cmf.h"
#include "testutil.h"

#define JUNK ((void *)1)

int main(void) {
    cmf_file *f = JUNK;
    CHECK(cmf_file_open(NULL, &f) == CMF_E_ARG && f == NULL);
    cmf_tokenizer *tk = JUNK;
    CHECK(cmf_tokenizer_load(NULL, 3, &tk) == CMF_E_ARG && tk == NULL);
    int32_t *ids = JUNK;
    size_t n = 7;
    CHECK(cmf_tokenize(NULL, "abc", 3, 0, &ids, &n) == CMF_E_ARG && ids == NULL && n == 0);
    char *text = JUNK;
    CHECK(cmf_detokenize(NULL, NULL, 0, 0, &text) == CMF_E_ARG && text == NULL);
    text = JUNK;
    size_t len = 9;
    CHECK(cmf_detokenize_n(NULL, NULL, 0, 0, &text, &len) == CMF_E_ARG && text == NULL && len == 0);
    cmf_detok_stream *ds = JUNK;
    CHECK(cmf_detok_stream_new(NULL, 0, &ds) == CMF_E_ARG && ds == NULL);
    text = JUNK;
    CHECK(cmf_detok_stream_push(NULL, 5, &text) == CMF_E_ARG && text == NULL);
    text = JUNK;
    CHECK(cmf_detok_stream_flush(NULL, &text) == CMF_E_ARG && text == NULL);

    const char *tpl = "{% for m in messages %}[{{ m.content }}|{{ m.content|length }}]{% endfor %}";
    cmf_chat_params p = cmf_chat_default_params();
    p.template_src = tpl;
    p.messages_json = "[{\"role\": \"user\", \"content\": \"a\\\\u0000b\"}]"; /* an escaped backslash: text "a\u0000b" */
    char *out = NULL;
    CHECK_MSG(cmf_chat_render(NULL, &p, &out, NULL) == CMF_OK && out && !strcmp(out, "[a\\u0000b|8]"), "%s / %s",
              out ? out : "(null)", cmf_last_error());
    free(out);
    out = JUNK;
    p.messages_json = "[{\"role\": \"user\", \"content\": \"a\\u0000b\"}]";
    CHECK_MSG(cmf_chat_render(NULL, &p, &out, NULL) == CMF_E_UNSUPPORTED && out == NULL &&
                  strstr(cmf_last_error(), "U+0000"), "%s", cmf_last_error());
    p.messages_json = "[{\"role\": \"user\", \"content\": \"ab\"}]";
    p.tools_json = "[{\"name\": \"x\\u0000\"}]";
    CHECK_MSG(cmf_chat_render(NULL, &p, &out, NULL) == CMF_E_UNSUPPORTED && strstr(cmf_last_error(), "tools"), "%s",
              cmf_last_error());
    p.tools_json = NULL;
    p.content = (cmf_chat_content)7;
    CHECK(cmf_chat_render(NULL, &p, &out, NULL) == CMF_E_ARG && strstr(cmf_last_error(), "content"));
    p.content = CMF_CHAT_CONTENT_AUTO;
    p.enable_thinking = 7;
    CHECK(cmf_chat_render(NULL, &p, &out, NULL) == CMF_E_ARG && strstr(cmf_last_error(), "enable_thinking"));
    p.enable_thinking = 1;
    CHECK_MSG(cmf_chat_render(NULL, &p, &out, NULL) == CMF_OK && out && !strcmp(out, "[ab|2]"), "%s",
              cmf_last_error());
    free(out);
    CMF_TEST_END();
}
