/* test_o1_hint.c — the file hint provenance.o1_attn written by the converter (cmf_convert_opts.o1, the library
 * side of `cmf convert --o1 SPEC`; CMF_FORMAT.md §1.4 "The o1 hint", DORY.md §3.1 priority order):
 *  - written: the header carries {"layers", "m", "w", "sink"} with the chosen layers;
 *  - used: a session opened with no --o1 runs the far field on exactly those layers with the file's m/w/sink, and
 *    its logits over a prompt + decode steps are bit-identical to a session given the same settings as flags (and
 *    differ from exact attention, so the far field really ran);
 *  - overridden: an explicit session spec ("off", "all") and CMF_O1 (off / all) take precedence over the file;
 *  - refused: malformed specs, out-of-range or sliding layers, no full-attention layer, soft-capping, m/w/sink out
 *    of range — each with CMF_E_ARG / CMF_E_UNSUPPORTED, a message naming the problem, and no output file.
 * Models: hf-tiny qwen3 (3 full-attention layers), mistral-swa (all sliding), gemma2 (soft-capped). */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cmf.h"
#include "convert/convert.h"
#include "format/format.h"
#include "model/model.h"
#include "quant/dtype.h"
#include "testutil.h"

enum { NOSINK = -100 };

static cmf_status convert(const char *model, const char *out, const char *spec, int m, int w, int sink) {
    cmf_convert_opts o;
    memset(&o, 0, sizeof o);
    o.quant = CMF_DT_F32;
    o.o1 = spec;
    o.o1_m = m, o.o1_window = w;
    if (sink != NOSINK) o.o1_sink = sink, o.o1_sink_set = 1;
    char src[512];
    snprintf(src, sizeof src, "%s", shared_path(model));
    unlink(out);
    return cmf_convert_hf(src, out, &o);
}

/* provenance.o1_attn of a file, or NULL (the returned item lives as long as *f). */
static const cJSON *hint_of(const char *path, cmf_file **f) {
    *f = NULL;
    if (cmf_file_open(path, f) != CMF_OK) return NULL;
    const cJSON *prov = cJSON_GetObjectItemCaseSensitive((*f)->header, "provenance");
    return cJSON_GetObjectItemCaseSensitive(prov, "o1_attn");
}

static int num(const cJSON *o, const char *k) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsNumber(v) ? v->valueint : -999;
}

enum { PROMPT = 40, STEPS = 6 };

/* Runs a PROMPT-token prefill and STEPS decode steps; writes the last logits to out [V]. */
static int run(cmf_model *m, const cmf_session_params *sp, float *out, int *o1_layers, cmf_session **keep) {
    cmf_session *s = NULL;
    if (cmf_session_new_ex(m, sp, &s) != CMF_OK) {
        fprintf(stderr, "session: %s\n", cmf_last_error());
        return -1;
    }
    const int V = cmf_model_vocab_size(m);
    int32_t ids[PROMPT];
    for (int i = 0; i < PROMPT; i++) ids[i] = (int32_t)((7 * i + 3) % V);
    int rc = cmf_session_prefill(s, ids, PROMPT, NULL) == CMF_OK ? 0 : -1;
    for (int i = 0; i < STEPS && !rc; i++) rc = cmf_session_decode(s, (int32_t)((5 * i + 1) % V)) == CMF_OK ? 0 : -1;
    if (!rc) memcpy(out, cmf_session_logits(s), (size_t)V * sizeof(float));
    *o1_layers = cmf_session_o1_layers(s);
    if (keep) *keep = s;
    else cmf_session_free(s);
    return rc;
}

static void check_refused(const char *model, const char *spec, int m, int w, int sink, cmf_status want,
                          const char *needle) {
    const char *out = tmp_path("o1_hint_bad.cmf");
    cmf_status st = convert(model, out, spec, m, w, sink);
    CHECK_MSG(st == want, "%s --o1 '%s' m %d w %d sink %d: status %d, want %d (%s)", model, spec, m, w, sink, (int)st,
              (int)want, cmf_last_error());
    CHECK_MSG(strstr(cmf_last_error(), needle) != NULL, "%s --o1 '%s': message '%s' lacks '%s'", model, spec,
              cmf_last_error(), needle);
    CHECK_MSG(access(out, F_OK) != 0, "%s --o1 '%s': an output file was left behind", model, spec);
}

int main(void) {
    unsetenv("CMF_O1");
    unsetenv("CMF_O1_M");
    unsetenv("CMF_O1_WINDOW");
    unsetenv("CMF_O1_SINK");
    unsetenv("CMF_O1_RECT");
    char path[512];
    snprintf(path, sizeof path, "%s", tmp_path("o1_hint_deep2.cmf"));

    /* 1. written: deep2 on a 3-layer model = layers [1, 2] */
    CHECK_MSG(convert("data/hf-tiny/qwen3", path, "deep2", 16, 8, 2) == CMF_OK, "convert: %s", cmf_last_error());
    cmf_file *f = NULL;
    const cJSON *h = hint_of(path, &f);
    CHECK(cJSON_IsObject(h));
    const cJSON *layers = cJSON_GetObjectItemCaseSensitive(h, "layers");
    CHECK(cJSON_IsArray(layers) && cJSON_GetArraySize(layers) == 2 && cJSON_GetArrayItem(layers, 0)->valueint == 1 &&
          cJSON_GetArrayItem(layers, 1)->valueint == 2);
    CHECK(num(h, "m") == 16 && num(h, "w") == 8 && num(h, "sink") == 2);
    cmf_file_close(f);

    /* 2. used: no session spec -> the hint; same logits as the same settings given as flags */
    cmf_model *m = NULL;
    CHECK_MSG(cmf_model_load(path, NULL, &m) == CMF_OK, "load: %s", cmf_last_error());
    if (!m) CMF_TEST_END();
    const int V = cmf_model_vocab_size(m);
    float *a = malloc((size_t)V * sizeof *a), *b = malloc((size_t)V * sizeof *b), *e = malloc((size_t)V * sizeof *e);
    int n_a = -1, n_b = -1, n_e = -1;
    cmf_session *sa = NULL;
    cmf_session_params p_hint = {.n_ctx = 128};
    CHECK(run(m, &p_hint, a, &n_a, &sa) == 0);
    CHECK_MSG(n_a == 2, "hint session: %d far-field layers, want 2", n_a);
    if (sa && sa->o1) {
        CHECK(!sa->o1->on[0] && sa->o1->on[1] && sa->o1->on[2]);
        CHECK(sa->o1->params.m == 16 && sa->o1->params.window == 8 && sa->o1->params.sink == 2);
        CHECK(sa->o1->sealed && cmf_o1_sealed(sa->o1->st[1 * m->cfg.n_kv_heads]));
    }
    cmf_session_free(sa);
    cmf_session_params p_flags = {.n_ctx = 128, .o1 = "1,2", .o1_m = 16, .o1_window = 8, .o1_sink = 2,
                                  .o1_sink_set = 1};
    CHECK(run(m, &p_flags, b, &n_b, NULL) == 0 && n_b == 2);
    CHECK_MSG(memcmp(a, b, (size_t)V * sizeof *a) == 0, "hint and flags give different logits");
    cmf_session_params p_exact = {.n_ctx = 128, .o1 = "off"};
    CHECK(run(m, &p_exact, e, &n_e, NULL) == 0 && n_e == 0);
    double diff = 0;
    for (int i = 0; i < V; i++) diff = fmax(diff, fabs((double)a[i] - e[i]));
    CHECK_MSG(diff > 0, "the far field changed nothing against exact attention (max |diff| %g)", diff);

    /* 3. overridden: the session's own spec, then CMF_O1 */
    cmf_session_params p_all = {.n_ctx = 128, .o1 = "all"};
    CHECK(run(m, &p_all, b, &n_b, &sa) == 0 && n_b == 3);
    if (sa && sa->o1) CHECK(sa->o1->params.m == 32 && sa->o1->params.window == 128 && sa->o1->params.sink == 4);
    cmf_session_free(sa);
    setenv("CMF_O1", "off", 1);
    CHECK(run(m, &p_hint, b, &n_b, NULL) == 0 && n_b == 0);
    CHECK_MSG(memcmp(b, e, (size_t)V * sizeof *b) == 0, "CMF_O1=off is not exact attention");
    setenv("CMF_O1", "all", 1);
    CHECK(run(m, &p_hint, b, &n_b, NULL) == 0 && n_b == 3);
    unsetenv("CMF_O1");
    cmf_model_free(m);

    /* "all" is written as the string; "off" writes no hint */
    CHECK_MSG(convert("data/hf-tiny/qwen3", path, "all", 0, 0, NOSINK) == CMF_OK, "convert all: %s", cmf_last_error());
    h = hint_of(path, &f);
    layers = cJSON_GetObjectItemCaseSensitive(h, "layers");
    CHECK(cJSON_IsString(layers) && !strcmp(layers->valuestring, "all"));
    CHECK(num(h, "m") == 32 && num(h, "w") == 128 && num(h, "sink") == 4);
    cmf_file_close(f);
    CHECK_MSG(convert("data/hf-tiny/qwen3", path, "off", 0, 0, NOSINK) == CMF_OK, "convert off: %s", cmf_last_error());
    CHECK(hint_of(path, &f) == NULL && f != NULL);
    cmf_file_close(f);
    unlink(path);

    /* 4. refused */
    check_refused("data/hf-tiny/qwen3", "deep0", 0, 0, NOSINK, CMF_E_ARG, "deep0");
    check_refused("data/hf-tiny/qwen3", "deep", 0, 0, NOSINK, CMF_E_ARG, "deepN");
    check_refused("data/hf-tiny/qwen3", "x", 0, 0, NOSINK, CMF_E_ARG, "'x'");
    check_refused("data/hf-tiny/qwen3", "", 0, 0, NOSINK, CMF_E_ARG, "''");
    check_refused("data/hf-tiny/qwen3", "1,,2", 0, 0, NOSINK, CMF_E_ARG, "'1,,2'");
    check_refused("data/hf-tiny/qwen3", "1,", 0, 0, NOSINK, CMF_E_ARG, "'1,'");
    check_refused("data/hf-tiny/qwen3", "-1", 0, 0, NOSINK, CMF_E_ARG, "'-1'");
    check_refused("data/hf-tiny/qwen3", "1,3", 0, 0, NOSINK, CMF_E_ARG, "layer 3 in '1,3' is out of range [0, 3)");
    check_refused("data/hf-tiny/qwen3", "all", 3, 0, NOSINK, CMF_E_ARG, "m 3");
    check_refused("data/hf-tiny/qwen3", "all", 2000, 0, NOSINK, CMF_E_ARG, "m 2000");
    check_refused("data/hf-tiny/qwen3", "all", 0, -5, NOSINK, CMF_E_ARG, "window -5");
    check_refused("data/hf-tiny/qwen3", "all", 0, 0, -3, CMF_E_ARG, "sink -3");
    check_refused("data/hf-tiny/mistral-swa", "all", 0, 0, NOSINK, CMF_E_ARG, "no full-attention layer");
    check_refused("data/hf-tiny/mistral-swa", "1", 0, 0, NOSINK, CMF_E_ARG, "layer 1 is a sliding-window layer");
    check_refused("data/hf-tiny/gemma2", "all", 0, 0, NOSINK, CMF_E_UNSUPPORTED, "soft-capping");
    free(a);
    free(b);
    free(e);
    CMF_TEST_END();
}
