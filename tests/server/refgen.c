/* refgen.c — reference data for the Node tests of `cmf serve` (js_openai.sh -> js/openai.test.mjs).
 *
 *   server_refgen WORK_DIR STORIES.cmf OUT.json
 *
 * Writes WORK_DIR/chat.cmf, a Qwen3-architecture "chain" model with the real Qwen3 tokenizer and chat template
 * (testmodel.c: hidden 32, 1 layer): its greedy continuation of the newline that ends the template's assistant
 * header is a fixed text of CJK characters and emoji, some of which the Qwen3 BPE splits into several byte-level
 * tokens (a token that adds bytes but no complete character). Then generates, IN PROCESS through the library
 * (tokenizer, chat template, session, sampler, streaming detokenizer: what the server must reproduce), the cases
 * the Node client checks, and writes them to OUT.json with every text also as hex bytes (byte-exact comparison,
 * independent of JSON string escaping):
 *   - "wide_completion": /v1/completions from the token-id prompt [newline] (greedy);
 *   - "wide_chat": /v1/chat/completions of one user message, rendered with the model's template as the server
 *     does (greedy); both with "split_tokens", the number of their tokens that split a character;
 *   - "stories_greedy": stories260K's greedy continuation of "Once upon a time" (ids of the text prompt too);
 *   - "stop_split": a stop string made of the last two bytes of one token's text and the first two of the next,
 *     with the text expected before it.
 * Exit status 0, or 1 with a message on stderr. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "cmf.h"
#include "quant/dtype.h"
#include "sample/sample.h"
#include "testmodel.h"
#include "tokenizer/tokenizer.h"
#include "testutil.h"

#define MAXGEN 64

typedef struct gen {
    int32_t ids[MAXGEN];
    char *pieces[MAXGEN];
    int n, hit_eos;
    char text[MAXGEN * 64];
} gen;

static void gen_free(gen *g) {
    for (int i = 0; i < g->n; i++) free(g->pieces[i]);
    g->n = 0;
}

static int die(const char *what) {
    fprintf(stderr, "server_refgen: %s: %s\n", what, cmf_last_error());
    exit(1);
}

/* Sampler parameters as the server builds them from a request with only temperature and seed set. */
static cmf_sampler_params params(float temp, uint64_t seed) {
    cmf_sampler_params p = cmf_sampler_default_params();
    p.temperature = temp;
    p.top_k = 0;
    p.top_p = 1.0f;
    p.min_p = 0.0f;
    p.penalty_last_n = 0;
    p.seed = seed;
    return p;
}

/* Prefill, then sample / accept / stream-detokenize until an end-of-sequence id or max tokens (the server's loop). */
static void generate(cmf_model *m, const int32_t *prompt, int np, float temp, uint64_t seed, int max, gen *g) {
    memset(g, 0, sizeof *g);
    cmf_session *s = NULL;
    cmf_sampler *smp = NULL;
    cmf_detok_stream *ds = NULL;
    int n_eos = 0;
    const int32_t *eos = cmf_model_eos_ids(m, &n_eos);
    cmf_sampler_params sp = params(temp, seed);
    if (cmf_session_new(m, 512, &s) != CMF_OK) die("session");
    if (cmf_sampler_new(cmf_model_vocab_size(m), &sp, &smp) != CMF_OK) die("sampler");
    if (cmf_detok_stream_new(cmf_model_tokenizer(m), 1, &ds) != CMF_OK) die("detok stream");
    if (cmf_session_prefill(s, prompt, np, NULL) != CMF_OK) die("prefill");
    for (int i = 0; i < max; i++) {
        int32_t t = 0;
        if (cmf_sampler_sample(smp, cmf_session_logits(s), &t) != CMF_OK) die("sample");
        cmf_sampler_accept(smp, t);
        for (int e = 0; e < n_eos; e++) g->hit_eos |= t == eos[e];
        if (g->hit_eos) break;
        g->ids[g->n] = t;
        if (cmf_detok_stream_push(ds, t, &g->pieces[g->n]) != CMF_OK) die("detok");
        strncat(g->text, g->pieces[g->n], sizeof g->text - strlen(g->text) - 1);
        g->n++;
        if (i + 1 < max && cmf_session_decode(s, t) != CMF_OK) die("decode");
    }
    cmf_detok_stream_free(ds);
    cmf_sampler_free(smp);
    cmf_session_free(s);
}

/* Of the first k tokens: those whose own text is not empty but that added nothing to the stream yet (a character
 * split across tokens), and whether the text of the first k has a character of 3 or 4 bytes (CJK, emoji). */
static int split_chars(cmf_model *m, const gen *g, int k, int *wide) {
    int n = 0;
    size_t len = 0;
    for (int i = 0; i < k; i++) {
        char *t = NULL;
        cmf_detokenize(cmf_model_tokenizer(m), &g->ids[i], 1, 1, &t);
        if (t && *t && !*g->pieces[i]) n++;
        free(t);
        len += strlen(g->pieces[i]);
    }
    *wide = 0;
    for (size_t i = 0; i < len; i++) *wide += (unsigned char)g->text[i] >= 0xE0;
    return n;
}

static int32_t *tokenize(cmf_model *m, const char *text, int add_special, int *n) {
    int32_t *ids = NULL;
    size_t k = 0;
    if (cmf_tokenize(cmf_model_tokenizer(m), text, strlen(text), add_special, &ids, &k) != CMF_OK) die("tokenize");
    *n = (int)k;
    return ids;
}

static cJSON *ids_array(const int32_t *ids, int n) {
    cJSON *a = cJSON_CreateArray();
    for (int i = 0; i < n; i++) cJSON_AddItemToArray(a, cJSON_CreateNumber(ids[i]));
    return a;
}

static void add_text(cJSON *o, const char *key, const char *text, size_t n) {
    char *t = strndup(text, n), *hex = malloc(2 * n + 1);
    if (!t || !hex) exit(1);
    for (size_t i = 0; i < n; i++) snprintf(hex + 2 * i, 3, "%02x", (unsigned char)text[i]);
    hex[2 * n] = 0;
    cJSON_AddStringToObject(o, key, t);
    char hk[64];
    snprintf(hk, sizeof hk, "%s_hex", key);
    cJSON_AddStringToObject(o, hk, hex);
    free(t);
    free(hex);
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: server_refgen WORK_DIR STORIES.cmf OUT.json\n");
        return 2;
    }
    char hf[1024], chat_path[1024];
    snprintf(hf, sizeof hf, "%s/chat-hf", argv[1]);
    snprintf(chat_path, sizeof chat_path, "%s/chat.cmf", argv[1]);
    /* the chain: the newline ending "<|im_start|>assistant\n", then the text (distinct tokens) */
    static const char CHAIN_TEXT[] = "你好，世界！🪼再见 😀";
    cmf_tokenizer *qt = NULL;
    if (cmf_tokenizer_load_file(shared_path("data/tokenizers/qwen3/tokenizer.json"), &qt) != CMF_OK)
        die("qwen3 tokenizer");
    int32_t *nl = NULL, *body = NULL, chain[32];
    size_t n_nl = 0, n_body = 0;
    if (cmf_tokenize(qt, "\n", 1, 0, &nl, &n_nl) != CMF_OK || n_nl != 1 ||
        cmf_tokenize(qt, CHAIN_TEXT, strlen(CHAIN_TEXT), 0, &body, &n_body) != CMF_OK || n_body + 1 > 32)
        die("tokenizing the chain");
    chain[0] = nl[0];
    for (size_t i = 0; i < n_body; i++) chain[i + 1] = body[i];
    int n_chain = (int)n_body + 1;
    for (int a = 0; a < n_chain; a++)
        for (int b = a + 1; b < n_chain; b++)
            if (chain[a] == chain[b]) {
                fprintf(stderr, "server_refgen: the chain repeats token %d\n", chain[a]);
                return 1;
            }
    free(nl);
    free(body);
    cmf_tokenizer_free(qt);
    testmodel_spec spec = {shared_path("data/tokenizers/qwen3"), 151669, 32, 1, 4, 2, 8, 64, CMF_DT_F32, 7,
                           "[151645, 151643]", chain, n_chain, 151645};
    if (testmodel_write(&spec, hf, chat_path) != CMF_OK) die("writing the chat model");
    cmf_model_params mp = {.n_threads = 1};
    cmf_model *chat = NULL, *stories = NULL;
    if (cmf_model_load(chat_path, &mp, &chat) != CMF_OK) die(chat_path);
    if (cmf_model_load(argv[2], &mp, &stories) != CMF_OK) die(argv[2]);

    cJSON *out = cJSON_CreateObject();
    cJSON_AddStringToObject(out, "chat_model", chat_path);
    cJSON_AddStringToObject(out, "stories_model", argv[2]);
    gen g;

    /* 1. completion from [newline], 2. chat: both must produce the chain's text, then <|im_end|> */
    int np = 1, wide = 0;
    generate(chat, chain, 1, 0.0f, 1, 40, &g);
    if (strcmp(g.text, CHAIN_TEXT) != 0 || !g.hit_eos) {
        fprintf(stderr, "server_refgen: the chain model generated '%s' (eos %d), not its text\n", g.text, g.hit_eos);
        return 1;
    }
    cJSON *c = cJSON_AddObjectToObject(out, "wide_completion");
    cJSON_AddItemToObject(c, "prompt", ids_array(chain, 1));
    cJSON_AddNumberToObject(c, "seed", 1);
    cJSON_AddNumberToObject(c, "temperature", 0);
    cJSON_AddNumberToObject(c, "max_tokens", 40);
    cJSON_AddNumberToObject(c, "completion_tokens", g.n + g.hit_eos);
    add_text(c, "text", g.text, strlen(g.text));
    cJSON_AddNumberToObject(c, "split_tokens", split_chars(chat, &g, g.n, &wide));
    gen_free(&g);

    const char *msgs = "[{\"role\":\"user\",\"content\":\"你好 👋 写一首诗\"}]";
    cmf_chat_params p = cmf_chat_default_params();
    p.messages_json = msgs;
    p.add_generation_prompt = 1;
    char *rendered = NULL;
    if (cmf_chat_render(chat, &p, &rendered, NULL) != CMF_OK) die("chat render");
    int32_t *prompt = tokenize(chat, rendered, 0, &np);
    free(rendered);
    generate(chat, prompt, np, 0.0f, 1, 40, &g);
    c = cJSON_AddObjectToObject(out, "wide_chat");
    cJSON_AddItemToObject(c, "messages", cJSON_Parse(msgs));
    cJSON_AddNumberToObject(c, "seed", 1);
    cJSON_AddNumberToObject(c, "temperature", 0);
    cJSON_AddNumberToObject(c, "max_tokens", 40);
    cJSON_AddNumberToObject(c, "prompt_tokens", np);
    cJSON_AddNumberToObject(c, "completion_tokens", g.n + g.hit_eos);
    add_text(c, "text", g.text, strlen(g.text));
    cJSON_AddNumberToObject(c, "split_tokens", split_chars(chat, &g, g.n, &wide));
    if (strcmp(g.text, CHAIN_TEXT) != 0) {
        fprintf(stderr, "server_refgen: the chat prompt does not end with the chain's newline ('%s')\n", g.text);
        return 1;
    }
    gen_free(&g);
    free(prompt);

    /* 3. stories260K greedy, and 4. a stop string across two tokens */
    prompt = tokenize(stories, "Once upon a time", 1, &np);
    generate(stories, prompt, np, 0.0f, 1, 40, &g);
    c = cJSON_AddObjectToObject(out, "stories_greedy");
    cJSON_AddStringToObject(c, "prompt", "Once upon a time");
    cJSON_AddItemToObject(c, "prompt_ids", ids_array(prompt, np));
    cJSON_AddNumberToObject(c, "max_tokens", 40);
    cJSON_AddNumberToObject(c, "completion_tokens", g.n + g.hit_eos);
    add_text(c, "text", g.text, strlen(g.text));
    int found = 0;
    for (int i = 4; i + 1 < g.n && !found; i++) {
        size_t a = strlen(g.pieces[i]), b = strlen(g.pieces[i + 1]);
        if (a < 2 || b < 2) continue;
        char stop[8];
        snprintf(stop, sizeof stop, "%c%c%c%c", g.pieces[i][a - 2], g.pieces[i][a - 1], g.pieces[i + 1][0],
                 g.pieces[i + 1][1]);
        size_t boundary = 0;
        for (int k = 0; k <= i; k++) boundary += strlen(g.pieces[k]);
        const char *hit = strstr(g.text, stop);
        if (!hit || (size_t)(hit - g.text) != boundary - 2) continue; /* must first occur across the boundary */
        c = cJSON_AddObjectToObject(out, "stop_split");
        cJSON_AddStringToObject(c, "stop", stop);
        add_text(c, "text", g.text, boundary - 2);
        found = 1;
    }
    if (!found) {
        fprintf(stderr, "server_refgen: no stop string across tokens in the stories text\n");
        return 1;
    }
    gen_free(&g);
    free(prompt);

    char *txt = cJSON_Print(out);
    FILE *f = fopen(argv[3], "w");
    if (!txt || !f || fputs(txt, f) < 0 || fclose(f)) {
        fprintf(stderr, "server_refgen: cannot write %s\n", argv[3]);
        return 1;
    }
    free(txt);
    cJSON_Delete(out);
    cmf_model_free(chat);
    cmf_model_free(stories);
    return 0;
}
