/* test_family_templates.c — real model-family chat templates (qwen3, llama3, llama3_1, and gemma3 when its
 * git-ignored template file is present) over the conversations of tests/template/data/family_cases.json, whose
 * expected texts and errors come from Python jinja2 set up as transformers' apply_chat_template
 * (scripts/template/make_family_refs.py). Each case is rendered twice and compared byte for byte:
 *   1. cmf_template_apply with the case's context exactly as jinja2 saw it;
 *   2. the chat API's renderer (cmf_chat_render_src): messages/tools JSON, add_generation_prompt,
 *      enable_thinking, bos/eos tokens, the other variables through extra_json, content parts passed unchanged
 *      (CMF_CHAT_CONTENT_PARTS, what transformers does).
 * Expected errors: "raise" must fail with CMF_E_ARG and exactly the template's message (the chat API prefixes
 * "chat template: "); "runtime" must fail with any error. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <string.h>

#include "cmf.h"
#include "template/template.h"
#include "testutil.h"
#include "util/fileio.h"

/* The family's template source (malloc'd), or NULL when absent (*optional_missing set for optional families). */
static char *family_template(const cJSON *fam, int *optional_missing) {
    const cJSON *path = cJSON_GetObjectItemCaseSensitive(fam, "template_path");
    const cJSON *shared = cJSON_GetObjectItemCaseSensitive(fam, "template_shared");
    char *data = NULL, p[1024];
    size_t len;
    *optional_missing = 0;
    if (cJSON_IsString(path)) {
        snprintf(p, sizeof p, "%s/%s", CMF_TEMPLATE_DATA, path->valuestring);
        if (cmf_read_file(p, &data, &len) == CMF_OK) return data;
        if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(fam, "optional"))) {
            *optional_missing = 1;
            return NULL;
        }
        CHECK_MSG(0, "%s", cmf_last_error());
        return NULL;
    }
    if (cJSON_IsString(shared)) {
        snprintf(p, sizeof p, "data/%s", shared->valuestring);
        if (cmf_read_file(shared_path(p), &data, &len) != CMF_OK) {
            CHECK_MSG(0, "%s", cmf_last_error());
            return NULL;
        }
        cJSON *cfg = cJSON_ParseWithLength(data, len);
        free(data);
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(cfg, "chat_template");
        char *src = cJSON_IsString(t) ? strdup(t->valuestring) : NULL;
        CHECK_MSG(src != NULL, "%s: no chat_template", p);
        cJSON_Delete(cfg);
        return src;
    }
    CHECK_MSG(0, "family without a template source");
    return NULL;
}

static void show_diff(const char *name, const char *got, const char *want) {
    size_t i = 0;
    while (got[i] && got[i] == want[i]) i++;
    size_t from = i > 40 ? i - 40 : 0;
    fprintf(stderr, "  %s: first difference at byte %zu\n    got:  \"%.120s\"\n    want: \"%.120s\"\n", name, i,
            got + from, want + from);
}

/* Compares one render's outcome with the case's expectation; returns 1 when it matches. `prefix` is what the
 * renderer puts before a raise_exception message. */
static int check_outcome(const char *name, const char *how, cmf_status st, const char *out, const cJSON *c,
                         const char *prefix) {
    const cJSON *exp = cJSON_GetObjectItemCaseSensitive(c, "expected");
    const cJSON *err = cJSON_GetObjectItemCaseSensitive(c, "error");
    if (cJSON_IsString(exp)) {
        if (st != CMF_OK) {
            CHECK_MSG(0, "%s [%s]: failed: %s", name, how, cmf_last_error());
            return 0;
        }
        if (strcmp(out, exp->valuestring) != 0) {
            CHECK_MSG(0, "%s [%s]: output differs", name, how);
            show_diff(name, out, exp->valuestring);
            return 0;
        }
        return 1;
    }
    const cJSON *kind = cJSON_GetObjectItemCaseSensitive(err, "kind");
    const cJSON *msg = cJSON_GetObjectItemCaseSensitive(err, "message");
    if (st == CMF_OK) {
        CHECK_MSG(0, "%s [%s]: rendered but jinja2 failed (%s: %s)", name, how,
                  cJSON_IsString(kind) ? kind->valuestring : "?", cJSON_IsString(msg) ? msg->valuestring : "?");
        return 0;
    }
    if (cJSON_IsString(kind) && strcmp(kind->valuestring, "raise") == 0) {
        char want[1024];
        snprintf(want, sizeof want, "%s%s", prefix, cJSON_IsString(msg) ? msg->valuestring : "");
        int ok = st == CMF_E_ARG && strcmp(cmf_last_error(), want) == 0;
        CHECK_MSG(ok, "%s [%s]: status %d message '%s', want CMF_E_ARG '%s'", name, how, (int)st, cmf_last_error(),
                  want);
        return ok;
    }
    return 1; /* runtime: any error */
}

/* Renders through the chat API's renderer, splitting the context as cmf_chat_render takes it. */
static cmf_status render_chat(const char *src, const cJSON *ctx, char **out) {
    const cJSON *msgs = cJSON_GetObjectItemCaseSensitive(ctx, "messages");
    const cJSON *tools = cJSON_GetObjectItemCaseSensitive(ctx, "tools");
    const cJSON *bos = cJSON_GetObjectItemCaseSensitive(ctx, "bos_token");
    const cJSON *eos = cJSON_GetObjectItemCaseSensitive(ctx, "eos_token");
    const cJSON *think = cJSON_GetObjectItemCaseSensitive(ctx, "enable_thinking");
    cJSON *extra = cJSON_CreateObject();
    const cJSON *it;
    cJSON_ArrayForEach(it, ctx) {
        static const char *const own[] = {"messages", "tools", "documents", "add_generation_prompt",
                                          "enable_thinking", "bos_token", "eos_token"};
        int skip = 0;
        for (size_t i = 0; i < sizeof own / sizeof own[0]; i++) skip |= strcmp(it->string, own[i]) == 0;
        if (!skip) cJSON_AddItemToObject(extra, it->string, cJSON_Duplicate(it, 1));
    }
    char *mj = cJSON_PrintUnformatted(msgs);
    char *tj = cJSON_IsArray(tools) ? cJSON_PrintUnformatted(tools) : NULL;
    char *ej = cJSON_PrintUnformatted(extra);
    cmf_chat_params p = cmf_chat_default_params();
    p.messages_json = mj;
    p.tools_json = tj;
    p.extra_json = ej;
    p.add_generation_prompt = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(ctx, "add_generation_prompt"));
    p.enable_thinking = cJSON_IsBool(think) ? cJSON_IsTrue(think) : -1;
    p.content = CMF_CHAT_CONTENT_PARTS;
    cmf_status st = cmf_chat_render_src(src, strlen(src), cJSON_IsString(bos) ? bos->valuestring : NULL,
                                        cJSON_IsString(eos) ? eos->valuestring : NULL, &p, out, NULL);
    free(mj), free(tj), free(ej);
    cJSON_Delete(extra);
    return st;
}

int main(void) {
    char *json, p[1024];
    size_t len;
    snprintf(p, sizeof p, "%s/family_cases.json", CMF_TEMPLATE_DATA);
    CHECK_MSG(cmf_read_file(p, &json, &len) == CMF_OK, "%s", cmf_last_error());
    if (cmf_test_failures) CMF_TEST_END();
    cJSON *root = cJSON_ParseWithLength(json, len);
    free(json);
    const cJSON *fams = cJSON_GetObjectItemCaseSensitive(root, "families");
    const cJSON *cases = cJSON_GetObjectItemCaseSensitive(root, "cases");
    CHECK(cJSON_IsObject(fams) && cJSON_IsArray(cases) && cJSON_GetArraySize(cases) >= 160);
    const cJSON *fam;
    cJSON_ArrayForEach(fam, fams) {
        int missing = 0;
        char *src = family_template(fam, &missing);
        if (!src) {
            if (missing) printf("%s: template not present, skipped (scripts/template/make_family_refs.py)\n", fam->string);
            continue;
        }
        int n = 0, ok_direct = 0, ok_chat = 0, n_err = 0;
        const cJSON *c;
        cJSON_ArrayForEach(c, cases) {
            const cJSON *f = cJSON_GetObjectItemCaseSensitive(c, "family");
            if (!cJSON_IsString(f) || strcmp(f->valuestring, fam->string) != 0) continue;
            const cJSON *nm = cJSON_GetObjectItemCaseSensitive(c, "name");
            const char *name = cJSON_IsString(nm) ? nm->valuestring : "?";
            const cJSON *ctx = cJSON_GetObjectItemCaseSensitive(c, "context");
            n++;
            n_err += cJSON_HasObjectItem(c, "error");
            char *out = NULL;
            cmf_status st = cmf_template_apply(src, strlen(src), ctx, &out);
            ok_direct += check_outcome(name, "template", st, out, c, "");
            free(out);
            out = NULL;
            st = render_chat(src, ctx, &out);
            ok_chat += check_outcome(name, "chat", st, out, c, "chat template: ");
            free(out);
        }
        printf("%s: %d cases (%d expected errors): template %d ok, chat API %d ok\n", fam->string, n, n_err,
               ok_direct, ok_chat);
        CHECK_MSG(n >= 40, "%s: only %d cases", fam->string, n);
        free(src);
    }
    cJSON_Delete(root);
    CMF_TEST_END();
}
