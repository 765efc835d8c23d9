/* test_template_cases.c — renders every case of tests/template/data/cases.json (expected strings produced by
 * Python jinja2 3.1 configured like transformers, see scripts/template/make_refs.py) and compares byte for byte.
 * Cases marked "error" must fail: "raise" with exactly the template's raise_exception message (CMF_E_ARG),
 * "syntax" at the reported line (CMF_E_FORMAT "template:LINE:COL: ..."), "runtime" with any error. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <string.h>

#include "template/template.h"
#include "testutil.h"
#include "util/fileio.h"

static char *load_template(const cJSON *c) {
    const cJSON *inl = cJSON_GetObjectItem(c, "template"), *path = cJSON_GetObjectItem(c, "template_path"),
                *shared = cJSON_GetObjectItem(c, "template_shared");
    char *data = NULL;
    size_t len;
    if (cJSON_IsString(inl)) return strdup(inl->valuestring);
    if (cJSON_IsString(path)) {
        char p[1024];
        snprintf(p, sizeof(p), "%s/%s", CMF_TEMPLATE_DATA, path->valuestring);
        if (cmf_read_file(p, &data, &len) != CMF_OK) return NULL;
        return data;
    }
    if (cJSON_IsString(shared)) {
        char rel[512];
        snprintf(rel, sizeof(rel), "data/%s", shared->valuestring);
        if (cmf_read_file(shared_path(rel), &data, &len) != CMF_OK) return NULL;
        cJSON *cfg = cJSON_Parse(data);
        free(data);
        const cJSON *t = cJSON_GetObjectItem(cfg, "chat_template");
        char *src = cJSON_IsString(t) ? strdup(t->valuestring) : NULL;
        cJSON_Delete(cfg);
        return src;
    }
    return NULL;
}

/* Prints where two strings first differ. */
static void show_diff(const char *name, const char *got, const char *want) {
    size_t i = 0;
    while (got[i] && got[i] == want[i]) i++;
    size_t from = i > 40 ? i - 40 : 0;
    fprintf(stderr, "  %s: first difference at byte %zu\n    got:  \"%.80s\"\n    want: \"%.80s\"\n", name, i,
            got + from, want + from);
}

int main(void) {
    char *json;
    size_t len;
    char p[1024];
    snprintf(p, sizeof(p), "%s/cases.json", CMF_TEMPLATE_DATA);
    CHECK(cmf_read_file(p, &json, &len) == CMF_OK);
    if (cmf_test_failures) CMF_TEST_END();
    cJSON *root = cJSON_Parse(json);
    free(json);
    const cJSON *cases = cJSON_GetObjectItem(root, "cases");
    CHECK(cJSON_GetArraySize(cases) >= 100);
    int n = 0, ok = 0;
    const cJSON *c;
    cJSON_ArrayForEach(c, cases) {
        const char *name = cJSON_GetObjectItem(c, "name")->valuestring;
        const cJSON *err = cJSON_GetObjectItem(c, "error"), *ctx = cJSON_GetObjectItem(c, "context");
        char *src = load_template(c);
        n++;
        CHECK_MSG(src != NULL, "%s: template not found", name);
        if (!src) continue;
        cmf_template *t = NULL;
        char *out = NULL;
        cmf_status st = cmf_template_parse(src, strlen(src), &t);
        if (st == CMF_OK) st = cmf_template_render(t, ctx, NULL, &out, NULL);
        int pass;
        if (!err) {
            const char *want = cJSON_GetObjectItem(c, "expected")->valuestring;
            pass = st == CMF_OK && strcmp(out, want) == 0;
            if (st) fprintf(stderr, "  %s: %s\n", name, cmf_last_error());
            else if (!pass) show_diff(name, out, want);
        } else if (!strcmp(err->valuestring, "raise")) {
            const char *msg = cJSON_GetObjectItem(c, "message")->valuestring;
            pass = st == CMF_E_ARG && strcmp(cmf_last_error(), msg) == 0;
            if (!pass) fprintf(stderr, "  %s: status %d, message \"%s\", want \"%s\"\n", name, st, cmf_last_error(), msg);
        } else if (!strcmp(err->valuestring, "syntax")) {
            char prefix[64];
            snprintf(prefix, sizeof(prefix), "template:%d:", cJSON_GetObjectItem(c, "line")->valueint);
            pass = t == NULL && st == CMF_E_FORMAT && strncmp(cmf_last_error(), prefix, strlen(prefix)) == 0;
            if (!pass) fprintf(stderr, "  %s: status %d, message \"%s\", want prefix %s\n", name, st, cmf_last_error(), prefix);
        } else {
            pass = st != CMF_OK;
            if (!pass) fprintf(stderr, "  %s: rendered but Python jinja2 fails\n", name);
        }
        CHECK_MSG(pass, "%s", name);
        ok += pass;
        free(out);
        cmf_template_free(t);
        free(src);
    }
    fprintf(stderr, "%d/%d template cases pass\n", ok, n);
    cJSON_Delete(root);
    CMF_TEST_END();
}
