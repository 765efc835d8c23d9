/* fuzz_http.c — libFuzzer target: the request parser of `cmf serve` (src/server/api.c). The first input byte picks
 * the route (chat completions, completions, tokenize, detokenize, apply-template), the rest is the request body
 * exactly as it arrives over HTTP. The parser runs against a server structure holding stories260K (converted once
 * from shared/data/models/stories260K-gguf into a scratch directory; its tokenizer and fallback chat template), with
 * no HTTP daemon and no scheduler. Invariants: a parse either yields a request with a prompt inside the context
 * and max_tokens >= 1, or an error status 400..599 with an OpenAI-shaped JSON error body; a successful reply of
 * the other routes is a JSON object; a parsed request's complete (non-stream) reply and its SSE events build. */
#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#include "cmf.h"
#include "convert/convert.h"
#include "fuzz_util.h"
#include "server/internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

static cmf_model *g_m;
static cmf_server g_s;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    const char *out = fz_scratch("stories.cmf");
    cmf_convert_opts co = {0};
    if (cmf_convert_gguf(fz_shared("data/models/stories260K-gguf/stories260Ktok512.gguf"), out, &co) != CMF_OK)
        fz_fail("fuzz_http: converting stories260K: %s", cmf_last_error());
    cmf_model_params mp = {.n_threads = 1};
    if (cmf_model_load(out, &mp, &g_m) != CMF_OK) fz_fail("fuzz_http: loading stories260K: %s", cmf_last_error());
    g_s.m = g_m;
    g_s.tok = cmf_model_tokenizer(g_m);
    g_s.vocab = cmf_model_vocab_size(g_m);
    g_s.n_ctx = 128;
    g_s.model_name = "stories";
    g_s.o = cmf_server_default_opts();
    g_s.o.n_ctx = 128;
    if (!g_s.tok) fz_fail("fuzz_http: stories260K has no tokenizer");
    return 0;
}

static void check_error(const srv_reply *r, const char *route) {
    if (r->status < 400 || r->status > 599) fz_fail("%s: error status %d", route, r->status);
    cJSON *j = r->body ? cJSON_Parse(r->body) : NULL;
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(j, "error");
    if (!cJSON_IsString(cJSON_GetObjectItemCaseSensitive(e, "message")))
        fz_fail("%s: error body without error.message: %s", route, r->body ? r->body : "(null)");
    cJSON_Delete(j);
}

static void check_reply(srv_reply r, const char *route) {
    if (r.status != 200) {
        check_error(&r, route);
    } else {
        cJSON *j = r.body ? cJSON_Parse(r.body) : NULL;
        if (!cJSON_IsObject(j)) fz_fail("%s: 200 with a body that is not a JSON object", route);
        cJSON_Delete(j);
    }
    free(r.body);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size == 0) return 0;
    const char *body = (const char *)data + 1;
    size_t len = size - 1;
    switch (data[0] % 5) {
    case 0:
    case 1: {
        srv_kind kind = data[0] % 5 == 0 ? SRV_CHAT : SRV_COMPLETION;
        srv_reply err = {0, NULL};
        srv_req *r = srv_parse_generation(&g_s, kind, body, len, &err);
        if (!r) {
            check_error(&err, "generation");
            free(err.body);
            return 0;
        }
        if (err.body) fz_fail("generation: a request and an error body");
        if (r->n_prompt < 1 || r->n_prompt >= g_s.n_ctx) fz_fail("generation: prompt of %d tokens", r->n_prompt);
        if (r->max_tokens < 1 || r->max_tokens > g_s.n_ctx - r->n_prompt)
            fz_fail("generation: max_tokens %d (prompt %d)", r->max_tokens, r->n_prompt);
        for (int i = 0; i < r->n_prompt; i++)
            if (r->prompt[i] < 0 || r->prompt[i] >= g_s.vocab) fz_fail("generation: token id %d", r->prompt[i]);
        /* the replies of a request that generated a little text */
        srv_sse_role(r);
        srv_sse_piece(r, SRV_EV_CONTENT, "Once", 4, NULL);
        srv_result_piece(r, SRV_EV_CONTENT, "Once", 4, NULL);
        r->finish_reason = "stop";
        srv_sse_end(r);
        check_reply(srv_generation_reply(&g_s, r), "generation reply");
        srv_req_free(r);
        return 0;
    }
    case 2: check_reply(srv_api_tokenize(&g_s, body, len), "tokenize"); return 0;
    case 3: check_reply(srv_api_detokenize(&g_s, body, len), "detokenize"); return 0;
    default: check_reply(srv_api_apply_template(&g_s, body, len), "apply-template"); return 0;
    }
}
