/* test_tok_null.c — a NULL tokenizer (what cmf_model_tokenizer returns for a model without one) given to the
 * tokenizer calls: CMF_E_ARG with a message that says the tokenizer is NULL and where to look (review11 item 9:
 * the message was only "NULL argument"). */
#include <string.h>

#include "cmf.h"
#include "testutil.h"

static void check_msg(cmf_status st, const char *call) {
    CHECK_MSG(st == CMF_E_ARG, "%s: status %d", call, (int)st);
    const char *m = cmf_last_error();
    CHECK_MSG(m && strstr(m, "the tokenizer is NULL") && strstr(m, "cmf_model_tokenizer_error"), "%s: '%s'", call,
              m ? m : "(null)");
}

int main(void) {
    int32_t *ids = NULL;
    size_t n = 0;
    check_msg(cmf_tokenize(cmf_model_tokenizer(NULL), "hi", 2, 1, &ids, &n), "cmf_tokenize");
    CHECK(ids == NULL && n == 0);
    char *text = NULL;
    const int32_t one = 1;
    check_msg(cmf_detokenize_n(NULL, &one, 1, 0, &text, NULL), "cmf_detokenize_n");
    CHECK(text == NULL);
    cmf_detok_stream *ds = NULL;
    check_msg(cmf_detok_stream_new(NULL, 1, &ds), "cmf_detok_stream_new");
    CHECK(ds == NULL);
    CMF_TEST_END();
}
