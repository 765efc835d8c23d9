/* mkmodel.c — helper of cli_chat.sh:
 *   chat_mkmodel model OUT_DIR FAMILY     builds OUT_DIR/FAMILY.cmf (chatmodel.h) from data/chat_refs.json's family
 *   chat_mkmodel expected CASE OUT_FILE   writes the reference rendering of a case of data/chat_refs.json */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "chatmodel.h"
#include "testutil.h"
#include "util/fileio.h"

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: chat_mkmodel (model OUT_DIR FAMILY | expected CASE OUT_FILE)\n");
        return 2;
    }
    char *text = NULL;
    size_t len = 0;
    if (cmf_read_file(CMF_CHAT_DATA "/chat_refs.json", &text, &len) != CMF_OK) {
        fprintf(stderr, "%s\n", cmf_last_error());
        return 1;
    }
    cJSON *refs = cJSON_Parse(text);
    free(text);
    int rc = 1;
    if (!strcmp(argv[1], "model")) {
        const cJSON *f = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(refs, "families"), argv[3]);
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(f, "vocab_size");
        const cJSON *b = cJSON_GetObjectItemCaseSensitive(f, "bos_token_id");
        const cJSON *e = cJSON_GetObjectItemCaseSensitive(f, "eos_token_id");
        char path[512];
        if (cJSON_IsNumber(v) && cJSON_IsNumber(b) && cJSON_IsNumber(e))
            rc = chat_make_model(argv[2], argv[3], strcmp(argv[3], "qwen3") ? "llama" : "qwen3", v->valueint,
                                 b->valueint, e->valueint, path) ? 1 : 0;
        else
            fprintf(stderr, "no family '%s'\n", argv[3]);
    } else {
        const cJSON *c;
        cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(refs, "cases")) {
            const cJSON *name = cJSON_GetObjectItemCaseSensitive(c, "name");
            const cJSON *exp = cJSON_GetObjectItemCaseSensitive(c, "expected");
            if (!cJSON_IsString(name) || strcmp(name->valuestring, argv[2]) || !cJSON_IsString(exp)) continue;
            FILE *out = fopen(argv[3], "wb");
            rc = out && fputs(exp->valuestring, out) >= 0 && !fclose(out) ? 0 : 1;
        }
        if (rc) fprintf(stderr, "no case '%s' with an expected rendering\n", argv[2]);
    }
    cJSON_Delete(refs);
    return rc;
}
