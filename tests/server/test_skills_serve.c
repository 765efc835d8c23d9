/* test_skills_serve — `cmf serve` with skills (CMF_FORMAT.md §3.1): a request names a skill of the file by its id
 * as "model" (as vLLM serves a LoRA adapter by its name), `--skill ID` sets the skill of requests that name the
 * served model, /v1/models lists the skills with "parent", and a step runs the slots of one skill (cmf_batch_run
 * takes one weight set), so requests on different skills at once each get the text they get alone.
 * The model: a random one-layer Qwen3 (test_server's shape, q8 matrices: the decode is batch invariant) with the
 * FFN of a second random model of the same shape baked in as skill "sk" (cmf_skill_add). References: greedy
 * generations with the library (cmf_session_set_skill) detokenized; the server's text must equal them. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "client.h"
#include "cmf.h"
#include "quant/dtype.h"
#include "skills/skills.h"
#include "testmodel.h"
#include "testutil.h"

enum { N_GEN = 12 };
static const int32_t PROMPT[] = {9707, 11, 1879, 0, 2585, 525};
#define N_PROMPT ((int)(sizeof PROMPT / sizeof PROMPT[0]))

/* The library's greedy text after PROMPT with skill `skill` ("none": the backbone). Caller frees. */
static char *lib_text(cmf_model *m, const char *skill) {
    cmf_session *s = NULL;
    char *text = NULL;
    int32_t ids[N_GEN];
    if (cmf_session_new(m, 64, &s) != CMF_OK || cmf_session_set_skill(s, skill) != CMF_OK ||
        cmf_session_prefill(s, PROMPT, N_PROMPT, NULL) != CMF_OK) {
        fprintf(stderr, "lib_text %s: %s\n", skill, cmf_last_error());
        cmf_session_free(s);
        return NULL;
    }
    const int V = cmf_model_vocab_size(m);
    for (int i = 0; i < N_GEN; i++) {
        const float *lg = cmf_session_logits(s);
        int best = 0;
        for (int v = 1; v < V; v++)
            if (lg[v] > lg[best]) best = v;
        ids[i] = best;
        if (i + 1 < N_GEN && cmf_session_decode(s, best) != CMF_OK) break;
    }
    if (cmf_detokenize(cmf_model_tokenizer(m), ids, N_GEN, 0, &text) != CMF_OK) text = NULL;
    cmf_session_free(s);
    return text;
}

/* POST /v1/completions, greedy, ignore_eos; model NULL: no "model" field. Returns the status; *text (malloc'd) the
 * choice's text and *echo the answer's "model" (malloc'd), when 200. */
static int complete(int port, const char *model, char **text, char **echo) {
    char body[512], mfield[128] = "", pj[256];
    if (model) snprintf(mfield, sizeof mfield, "\"model\": \"%s\", ", model);
    snprintf(body, sizeof body, "{%s\"prompt\": %s, \"max_tokens\": %d, \"temperature\": 0, \"ignore_eos\": true}",
             mfield, ids_json_buf(pj, sizeof pj, PROMPT, N_PROMPT), N_GEN);
    cJSON *j = NULL;
    int st = http_post_json(port, "/v1/completions", body, &j);
    *text = NULL;
    if (echo) *echo = NULL;
    const cJSON *c = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(j, "choices"), 0);
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(c, "text"), *mo = cJSON_GetObjectItemCaseSensitive(j, "model");
    if (st == 200 && cJSON_IsString(t)) *text = strdup(t->valuestring);
    if (st == 200 && echo && cJSON_IsString(mo)) *echo = strdup(mo->valuestring);
    cJSON_Delete(j);
    return st;
}

typedef struct {
    int port;
    const char *model;
    char *text;
    int st;
} job;

static void *run_job(void *arg) {
    job *jb = arg;
    jb->st = complete(jb->port, jb->model, &jb->text, NULL);
    return NULL;
}

static int same(const char *a, const char *b) { return a && b && !strcmp(a, b); }

int main(void) {
    char dir[1024], dir2[1024], base[1024], donor[1024], model[1024];
    snprintf(dir, sizeof dir, "%s", tmp_path("skills-serve-hf"));
    snprintf(dir2, sizeof dir2, "%s", tmp_path("skills-serve-hf2"));
    snprintf(base, sizeof base, "%s", tmp_path("skills-serve-base.cmf"));
    snprintf(donor, sizeof donor, "%s", tmp_path("skills-serve-donor.cmf"));
    snprintf(model, sizeof model, "%s", tmp_path("skills-serve.cmf"));
    testmodel_spec sp = {shared_path("data/tokenizers/qwen3"), 151669, 32, 1, 4, 2, 8, 64, CMF_DT_Q8_ROW, 7,
                         "[151645, 151643]", NULL, 0, 0};
    CHECK_MSG(testmodel_write(&sp, dir, base) == CMF_OK, "%s", cmf_last_error());
    sp.seed = 8; /* the donor: same shapes, other weights */
    CHECK_MSG(testmodel_write(&sp, dir2, donor) == CMF_OK, "%s", cmf_last_error());
    cmf_skill_add_opts ao = {.id = "sk", .name = "second", .families = CMF_SKILL_FFN, .skill_quant = -1};
    CHECK_MSG(cmf_skill_add(base, dir2, model, &ao, NULL) == CMF_OK, "skill add: %s", cmf_last_error());

    cmf_model_params mp = {.n_threads = 1};
    cmf_model *m = NULL;
    CHECK_MSG(cmf_model_load(model, &mp, &m) == CMF_OK, "%s", cmf_last_error());
    if (!m) CMF_TEST_END();
    char *ref_base = lib_text(m, "none"), *ref_sk = lib_text(m, "sk");
    cmf_model_free(m);
    CHECK(ref_base && ref_sk);
    CHECK_MSG(!same(ref_base, ref_sk), "the skill does not change the greedy text ('%s')", ref_base ? ref_base : "");

    /* a server on the backbone: the served name and no "model" run the backbone, "sk" the skill */
    server_proc srv;
    const char *args[] = {"--parallel", "3", "-c", "64", "-t", "1", "--alias", "tiny", NULL};
    CHECK(server_start(&srv, model, args) == 0);
    if (srv.port <= 0) CMF_TEST_END();
    char *t = NULL, *echo = NULL;
    CHECK(complete(srv.port, "tiny", &t, &echo) == 200 && same(t, ref_base) && same(echo, "tiny"));
    free(t), free(echo);
    CHECK(complete(srv.port, NULL, &t, NULL) == 200 && same(t, ref_base));
    free(t);
    int st = complete(srv.port, "sk", &t, &echo);
    CHECK_MSG(st == 200 && same(t, ref_sk) && same(echo, "sk"), "skill request: %d '%s' (want '%s'), model '%s'", st,
              t ? t : "", ref_sk ? ref_sk : "", echo ? echo : "");
    free(t), free(echo);

    /* requests on both at once, more than once: each gets its own text (one weight set per step) */
    for (int round = 0; round < 3; round++) {
        job jobs[3] = {{srv.port, "sk", NULL, 0}, {srv.port, "tiny", NULL, 0}, {srv.port, "sk", NULL, 0}};
        pthread_t th[3];
        for (int i = 0; i < 3; i++) pthread_create(&th[i], NULL, run_job, &jobs[i]);
        for (int i = 0; i < 3; i++) pthread_join(th[i], NULL);
        for (int i = 0; i < 3; i++) {
            const char *want = i == 1 ? ref_base : ref_sk;
            CHECK_MSG(jobs[i].st == 200 && same(jobs[i].text, want), "round %d job %d (%s): %d '%s' (want '%s')", round,
                      i, jobs[i].model, jobs[i].st, jobs[i].text ? jobs[i].text : "", want ? want : "");
            free(jobs[i].text);
        }
    }

    /* /v1/models lists the skill with its parent; /v1/models/sk answers; an unknown id is a 404 naming both */
    http_resp r;
    CHECK(http_request(srv.port, "GET", "/v1/models", NULL, NULL, &r) == 0 && r.status == 200);
    cJSON *j = r.body ? cJSON_Parse(r.body) : NULL;
    const cJSON *data = cJSON_GetObjectItemCaseSensitive(j, "data");
    const cJSON *m1 = cJSON_GetArrayItem(data, 1), *p1 = cJSON_GetObjectItemCaseSensitive(m1, "parent");
    CHECK_MSG(cJSON_GetArraySize(data) == 2 && same(cJSON_GetObjectItemCaseSensitive(m1, "id")->valuestring, "sk") &&
                  cJSON_IsString(p1) && same(p1->valuestring, "tiny"),
              "/v1/models: %s", r.body ? r.body : "");
    cJSON_Delete(j);
    http_resp_free(&r);
    CHECK(http_request(srv.port, "GET", "/v1/models/sk", NULL, NULL, &r) == 0 && r.status == 200 && r.body &&
          strstr(r.body, "\"parent\":\"tiny\""));
    http_resp_free(&r);
    st = complete(srv.port, "other", &t, NULL);
    CHECK(st == 404);
    /* llama-server's /completion ignores "model", except that a skill's id selects the skill */
    char body[512], pj[256];
    snprintf(body, sizeof body, "{\"model\": \"sk\", \"prompt\": %s, \"n_predict\": %d, \"temperature\": 0, "
             "\"ignore_eos\": true}", ids_json_buf(pj, sizeof pj, PROMPT, N_PROMPT), N_GEN);
    j = NULL;
    CHECK(http_post_json(srv.port, "/completion", body, &j) == 200);
    const cJSON *content = cJSON_GetObjectItemCaseSensitive(j, "content");
    CHECK_MSG(cJSON_IsString(content) && same(content->valuestring, ref_sk), "/completion with the skill: '%s'",
              cJSON_IsString(content) ? content->valuestring : "");
    cJSON_Delete(j);
    CHECK(http_request(srv.port, "GET", "/v1/models/other", NULL, NULL, &r) == 0 && r.status == 404 && r.body &&
          strstr(r.body, "this server has 'tiny' and the skills 'sk'"));
    http_resp_free(&r);
    CHECK_MSG(server_stop(&srv) == 0, "the server did not exit cleanly");

    /* --skill sk: the served name runs the skill; an unknown --skill exits 1 naming the file's skills */
    const char *args2[] = {"--parallel", "2", "-c", "64", "-t", "1", "--alias", "tiny", "--skill", "sk", NULL};
    CHECK(server_start(&srv, model, args2) == 0);
    if (srv.port > 0) {
        CHECK(complete(srv.port, "tiny", &t, NULL) == 200 && same(t, ref_sk));
        free(t);
        CHECK(complete(srv.port, "sk", &t, NULL) == 200 && same(t, ref_sk));
        free(t);
        CHECK_MSG(server_stop(&srv) == 0, "the --skill server did not exit cleanly");
    }
    const char *bad[] = {"serve", model, "--port", "0", "--skill", "nope", NULL};
    const char *log = tmp_path("skills-serve.log");
    CHECK(cli_run_until(bad, log, NULL, 60) == 1);
    char *out = slurp_file(log);
    CHECK_MSG(out && strstr(out, "--skill 'nope' is not in this file (its skills: 'sk')"), "log: %s", out ? out : "");
    free(out);
    const char *empty[] = {"serve", model, "--port", "0", "--skill", "", NULL}; /* as run: a usage error */
    CHECK(cli_run_until(empty, log, NULL, 60) == 2);
    /* a served name equal to a skill id would hide the skill: refused, naming it */
    const char *clash[] = {"serve", model, "--port", "0", "--alias", "sk", NULL};
    CHECK(cli_run_until(clash, log, NULL, 60) == 1);
    out = slurp_file(log);
    CHECK_MSG(out && strstr(out, "the served name 'sk' is also a skill id of the file"), "log: %s", out ? out : "");
    free(out);
    /* --tp: skills are not split across ranks, so none is listed and naming one is a 400 that says so */
    const char *args3[] = {"--parallel", "1", "-c", "64", "-t", "2", "--tp", "2", "--alias", "tiny", NULL};
    CHECK(server_start(&srv, model, args3) == 0);
    if (srv.port > 0) {
        CHECK(http_request(srv.port, "GET", "/v1/models", NULL, NULL, &r) == 0 && r.status == 200 && r.body &&
              !strstr(r.body, "\"sk\""));
        http_resp_free(&r);
        CHECK(complete(srv.port, "tiny", &t, NULL) == 200 && same(t, ref_base));
        free(t);
        CHECK(http_request(srv.port, "POST", "/v1/completions", NULL, "{\"model\": \"sk\", \"prompt\": \"a\"}", &r) == 0 &&
              r.status == 400 && r.body && strstr(r.body, "not served with --tp"));
        http_resp_free(&r);
        CHECK_MSG(server_stop(&srv) == 0, "the --tp server did not exit cleanly");
    }
    free(ref_base);
    free(ref_sk);
    remove(model), remove(base), remove(donor), remove(log);
    CMF_TEST_END();
}
