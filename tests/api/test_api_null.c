/* test_api_null.c — every function of include/cmf.h called with each of its pointer arguments NULL (review 9,
 * item 4): calls returning cmf_status answer CMF_E_ARG with a message naming the call, getters return the
 * neutral value cmf.h documents (0 / -1 / NULL), *_free / *_close accept NULL. Also the argument checks of the
 * same review: model params and session params out of range, cmf_session_logits before the first prefill,
 * decode errors named "decode:".
 *
 * The list of cases below is checked against the header: the test parses cmf.h (path given by CMake as
 * CMF_HEADER_PATH) for every declared function, and a function without a case here (or a case for a function
 * the header no longer declares) fails the test. The model is stories260K (shared data, GGUF) converted to a
 * scratch CMF file that is deleted at the end. */
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cmf.h"
#include "convert/convert.h"
#include "testutil.h"

#define STORIES_GGUF "data/models/stories260K-gguf/stories260Ktok512.gguf"

static char g_path[1024];
static cmf_model *M;
static cmf_session *S;
static const cmf_tokenizer *T;

/* The call returned st == want and the message (for an error) contains `sub`. */
#define EXPECT(call, want, sub)                                                                                  \
    do {                                                                                                         \
        cmf_status st_ = (call);                                                                                 \
        CHECK_MSG(st_ == (want), "%s -> %d (%s) '%s', expected %d", #call, (int)st_, cmf_status_str(st_),       \
                  cmf_last_error(), (int)(want));                                                                \
        if ((want) != CMF_OK && (sub)[0])                                                                        \
            CHECK_MSG(strstr(cmf_last_error(), (sub)) != NULL, "%s: message '%s' lacks '%s'", #call,             \
                      cmf_last_error(), (sub));                                                                  \
    } while (0)
#define EXPECT_ARG(call, sub) EXPECT(call, CMF_E_ARG, sub)

/* ---- one case per public function ---------------------------------------------------------------------------- */

static void c_last_error(void) { CHECK(cmf_last_error() != NULL); }
static void c_status_str(void) {
    CHECK(cmf_status_str((cmf_status)99) != NULL);
    CHECK(cmf_status_str((cmf_status)-1) != NULL);
}
static void c_file_open(void) {
    cmf_file *f = (cmf_file *)1;
    EXPECT_ARG(cmf_file_open(NULL, &f), "");
    EXPECT_ARG(cmf_file_open(g_path, NULL), "");
}
static void c_file_close(void) { cmf_file_close(NULL); }
static void c_file_verify(void) {
    char *rep = NULL;
    EXPECT_ARG(cmf_file_verify(NULL, &rep), "");
    CHECK(rep == NULL);
    cmf_file *f = NULL;
    EXPECT(cmf_file_open(g_path, &f), CMF_OK, "");
    EXPECT(cmf_file_verify(f, NULL), CMF_OK, ""); /* report is optional */
    cmf_file_close(f);
}
static void c_model_load(void) {
    cmf_model *m = (cmf_model *)1;
    EXPECT_ARG(cmf_model_load(NULL, NULL, &m), "cmf_model_load");
    CHECK(m == NULL);
    EXPECT_ARG(cmf_model_load(g_path, NULL, NULL), "cmf_model_load");
    /* params out of range (review 9 item 10): CMF_E_ARG naming the field, nothing loaded */
    cmf_model_params p = {0};
    p.n_threads = -5;
    EXPECT_ARG(cmf_model_load(g_path, &p, &m), "n_threads");
    CHECK(m == NULL);
    p.n_threads = 0, p.tp = -1;
    EXPECT_ARG(cmf_model_load(g_path, &p, &m), "tp");
    p.tp = 0, p.cache_type = 77;
    EXPECT_ARG(cmf_model_load(g_path, &p, &m), "cache_type");
    p.cache_type = CMF_CACHE_F32; /* valid values still load */
    EXPECT(cmf_model_load(g_path, &p, &m), CMF_OK, "");
    cmf_model_free(m);
}
static void c_model_load_on(void) {
    cmf_model *m = (cmf_model *)1;
    EXPECT_ARG(cmf_model_load_on(NULL, NULL, "cpu", &m), "cmf_model_load");
    CHECK(m == NULL);
    EXPECT_ARG(cmf_model_load_on(g_path, NULL, "cpu", NULL), "cmf_model_load");
    EXPECT(cmf_model_load_on(g_path, NULL, "cpu", &m), CMF_OK, ""); /* NULL params = defaults */
    cmf_model_free(m);
}
static void c_model_free(void) { cmf_model_free(NULL); }
static void c_model_vocab_size(void) { CHECK(cmf_model_vocab_size(NULL) == 0); }
static void c_model_n_ctx_train(void) { CHECK(cmf_model_n_ctx_train(NULL) == 0); }
static void c_model_arch(void) { CHECK(cmf_model_arch(NULL) == NULL); }
static void c_model_backend(void) { CHECK(cmf_model_backend(NULL) == NULL); }
static void c_model_backend_desc(void) { CHECK(cmf_model_backend_desc(NULL) == NULL); }
static void c_model_tp(void) { CHECK(cmf_model_tp(NULL) == 0); }
static void c_model_eos_ids(void) {
    int n = 5;
    CHECK(cmf_model_eos_ids(NULL, &n) == NULL && n == 0);
    CHECK(cmf_model_eos_ids(NULL, NULL) == NULL);
    const int32_t *e = cmf_model_eos_ids(M, NULL); /* the count is optional */
    CHECK(e == cmf_model_eos_ids(M, &n));
}
static void c_model_bos_id(void) { CHECK(cmf_model_bos_id(NULL) == -1); }
static void c_session_new(void) {
    cmf_session *s = (cmf_session *)1;
    EXPECT_ARG(cmf_session_new(NULL, 16, &s), "cmf_session_new");
    CHECK(s == NULL);
    EXPECT_ARG(cmf_session_new(M, 16, NULL), "cmf_session_new");
}
static void c_session_free(void) { cmf_session_free(NULL); }
static void c_session_new_ex(void) {
    cmf_session *s = (cmf_session *)1;
    cmf_session_params p = {0};
    EXPECT_ARG(cmf_session_new_ex(NULL, &p, &s), "cmf_session_new");
    CHECK(s == NULL);
    EXPECT_ARG(cmf_session_new_ex(M, &p, NULL), "cmf_session_new");
    EXPECT(cmf_session_new_ex(M, NULL, &s), CMF_OK, ""); /* NULL params = defaults */
    cmf_session_free(s);
    p.gate = NAN;
    EXPECT_ARG(cmf_session_new_ex(M, &p, &s), "gate");
    p.gate = 0, p.o1 = "all", p.o1_seal = -1;
    EXPECT_ARG(cmf_session_new_ex(M, &p, &s), "o1_seal");
    p.o1_seal = 0, p.o1 = NULL, p.loops = -2;
    EXPECT_ARG(cmf_session_new_ex(M, &p, &s), "loops");
}
static void c_session_task(void) { CHECK(cmf_session_task(NULL) == NULL); }
static void c_model_n_task_masks(void) { CHECK(cmf_model_n_task_masks(NULL) == 0); }
static void c_session_state_bytes(void) { CHECK(cmf_session_state_bytes(NULL) == 0); }
static void c_session_o1_layers(void) { CHECK(cmf_session_o1_layers(NULL) == 0); }
static void c_session_gate_one_pass_share(void) {
    long n = 7;
    CHECK(cmf_session_gate_one_pass_share(NULL, &n) == 0 && n == 0);
    CHECK(cmf_session_gate_one_pass_share(NULL, NULL) == 0);
}
static void c_session_set_skill(void) {
    EXPECT_ARG(cmf_session_set_skill(NULL, "x"), "cmf_session_set_skill");
    EXPECT(cmf_session_set_skill(S, NULL), CMF_OK, ""); /* NULL = the backbone */
}
static void c_session_skill(void) { CHECK(cmf_session_skill(NULL) == NULL); }
static void c_session_reset(void) { cmf_session_reset(NULL); }
static void c_session_pos(void) { CHECK(cmf_session_pos(NULL) == -1); }
static void c_session_n_ctx(void) { CHECK(cmf_session_n_ctx(NULL) == -1); }
static void c_session_prefill(void) {
    const int32_t ids[3] = {1, 2, 3};
    EXPECT_ARG(cmf_session_prefill(NULL, ids, 3, NULL), "prefill");
    EXPECT_ARG(cmf_session_prefill(S, NULL, 3, NULL), "prefill");
    CHECK(cmf_session_pos(S) == 0);
}
static void c_session_decode(void) {
    EXPECT_ARG(cmf_session_decode(NULL, 1), "decode");
    /* review 9 item 12: a decode error names the call */
    EXPECT_ARG(cmf_session_decode(S, -1), "decode: token id -1");
    CHECK(strncmp(cmf_last_error(), "prefill", 7) != 0);
}
static void c_session_logits(void) {
    CHECK(cmf_session_logits(NULL) == NULL);
    cmf_session_reset(S);
    /* before the first prefill there are no logits (review 9 item 10): NULL and a message */
    CHECK(cmf_session_logits(S) == NULL);
    CHECK(strstr(cmf_last_error(), "no position") != NULL);
    EXPECT(cmf_session_decode(S, 1), CMF_OK, "");
    CHECK(cmf_session_logits(S) != NULL);
    cmf_session_reset(S);
    CHECK(cmf_session_logits(S) == NULL);
}
static void c_session_truncate(void) { EXPECT_ARG(cmf_session_truncate(NULL, 0), "truncate"); }
static void c_batch_new(void) {
    cmf_batch *b = (cmf_batch *)1;
    EXPECT_ARG(cmf_batch_new(NULL, 8, 2, &b), "cmf_batch_new");
    CHECK(b == NULL);
    EXPECT_ARG(cmf_batch_new(M, 8, 2, NULL), "cmf_batch_new");
}
static void c_batch_free(void) { cmf_batch_free(NULL); }
static void c_batch_max_tokens(void) { CHECK(cmf_batch_max_tokens(NULL) == 0); }
static void c_batch_run(void) {
    cmf_batch *b = NULL;
    EXPECT(cmf_batch_new(M, 8, 2, &b), CMF_OK, "");
    cmf_session *seqs[1] = {S};
    const int32_t ids[1] = {1};
    cmf_session_reset(S);
    EXPECT_ARG(cmf_batch_run(NULL, seqs, ids, 1), "cmf_batch_run");
    EXPECT_ARG(cmf_batch_run(b, NULL, ids, 1), "cmf_batch_run");
    EXPECT_ARG(cmf_batch_run(b, seqs, NULL, 1), "cmf_batch_run");
    cmf_session *nul[1] = {NULL};
    EXPECT_ARG(cmf_batch_run(b, nul, ids, 1), "session");
    CHECK(cmf_session_pos(S) == 0);
    cmf_batch_free(b);
}
static void c_model_tokenizer(void) { CHECK(cmf_model_tokenizer(NULL) == NULL); }
static void c_model_tokenizer_error(void) { CHECK(cmf_model_tokenizer_error(NULL) == NULL); }
static void c_tokenizer_load(void) {
    cmf_tokenizer *t = (cmf_tokenizer *)1;
    EXPECT_ARG(cmf_tokenizer_load(NULL, 2, &t), "");
    EXPECT_ARG(cmf_tokenizer_load("{}", 2, NULL), "");
}
static void c_tokenizer_free(void) { cmf_tokenizer_free(NULL); }
static void c_tokenize(void) {
    int32_t *ids = NULL;
    size_t n = 0;
    EXPECT_ARG(cmf_tokenize(NULL, "a", 1, 1, &ids, &n), "");
    EXPECT_ARG(cmf_tokenize(T, NULL, 1, 1, &ids, &n), "");
    EXPECT_ARG(cmf_tokenize(T, "a", 1, 1, NULL, &n), "");
    EXPECT_ARG(cmf_tokenize(T, "a", 1, 1, &ids, NULL), "");
    EXPECT(cmf_tokenize(T, NULL, 0, 0, &ids, &n), CMF_OK, ""); /* no text, no ids */
    CHECK(n == 0);
    free(ids);
}
static void c_detokenize(void) {
    const int32_t ids[2] = {1, 2};
    char *text = (char *)1;
    EXPECT_ARG(cmf_detokenize(NULL, ids, 2, 0, &text), "");
    EXPECT_ARG(cmf_detokenize(T, NULL, 2, 0, &text), "");
    EXPECT_ARG(cmf_detokenize(T, ids, 2, 0, NULL), "");
    /* ids without a token are skipped as HF decode does (documented in cmf.h): the text of {1, 2} */
    const int V = cmf_tokenizer_vocab_size(T);
    const int32_t bad[4] = {1, -1, V, 2};
    char *want = NULL;
    EXPECT(cmf_detokenize(T, ids, 2, 0, &want), CMF_OK, "");
    EXPECT(cmf_detokenize(T, bad, 4, 0, &text), CMF_OK, "");
    CHECK(want && text && *want && !strcmp(want, text));
    free(text);
    free(want);
}
static void c_tokenizer_vocab_size(void) { CHECK(cmf_tokenizer_vocab_size(NULL) == 0); }
static void c_detok_stream_new(void) {
    cmf_detok_stream *d = (cmf_detok_stream *)1;
    EXPECT_ARG(cmf_detok_stream_new(NULL, 0, &d), "");
    EXPECT_ARG(cmf_detok_stream_new(T, 0, NULL), "");
}
static void c_detok_stream_prime(void) {
    cmf_detok_stream *d = NULL;
    EXPECT(cmf_detok_stream_new(T, 0, &d), CMF_OK, "");
    const int32_t ids[2] = {1, 2};
    EXPECT_ARG(cmf_detok_stream_prime(NULL, ids, 2), "");
    EXPECT_ARG(cmf_detok_stream_prime(d, NULL, 2), "");
    EXPECT(cmf_detok_stream_prime(d, ids, 2), CMF_OK, "");
    cmf_detok_stream_free(d);
}
static void c_detok_stream_push(void) {
    cmf_detok_stream *d = NULL;
    EXPECT(cmf_detok_stream_new(T, 0, &d), CMF_OK, "");
    char *text = NULL;
    EXPECT_ARG(cmf_detok_stream_push(NULL, 1, &text), "");
    EXPECT_ARG(cmf_detok_stream_push(d, 1, NULL), "");
    cmf_detok_stream_free(d);
}
static void c_detok_stream_flush(void) {
    cmf_detok_stream *d = NULL;
    EXPECT(cmf_detok_stream_new(T, 0, &d), CMF_OK, "");
    char *text = NULL;
    EXPECT_ARG(cmf_detok_stream_flush(NULL, &text), "");
    EXPECT_ARG(cmf_detok_stream_flush(d, NULL), "");
    cmf_detok_stream_free(d);
}
static void c_detok_stream_free(void) { cmf_detok_stream_free(NULL); }
static void c_tokenizer_token_id(void) {
    CHECK(cmf_tokenizer_token_id(NULL, "a") == -1);
    CHECK(cmf_tokenizer_token_id(T, NULL) == -1);
}
static void c_model_chat_template(void) { CHECK(cmf_model_chat_template(NULL) == NULL); }
static void c_chat_template_chatml(void) { CHECK(cmf_chat_template_chatml() != NULL); }
static void c_chat_default_params(void) { CHECK(cmf_chat_default_params().messages_json == NULL); }
static void c_chat_render(void) {
    cmf_chat_params p = cmf_chat_default_params();
    p.messages_json = "[{\"role\":\"user\",\"content\":\"hi\"}]";
    char *out = NULL;
    EXPECT_ARG(cmf_chat_render(M, NULL, &out, NULL), "");
    EXPECT_ARG(cmf_chat_render(M, &p, NULL, NULL), "");
    EXPECT(cmf_chat_render(NULL, &p, &out, NULL), CMF_OK, ""); /* no model: ChatML, out_len optional */
    CHECK(out && strstr(out, "<|im_start|>user\nhi<|im_end|>"));
    free(out);
}
static void c_chat_tokenize(void) {
    int32_t *ids = (int32_t *)1;
    size_t n = 9;
    EXPECT_ARG(cmf_chat_tokenize(NULL, "a", 1, &ids, &n), "");
    CHECK(ids == NULL && n == 0); /* outputs cleared on a NULL-argument error */
    EXPECT_ARG(cmf_chat_tokenize(M, "a", 1, NULL, &n), "");
    EXPECT_ARG(cmf_chat_tokenize(M, "a", 1, &ids, NULL), "");
    EXPECT_ARG(cmf_chat_tokenize(M, NULL, 1, &ids, &n), "");
    EXPECT(cmf_chat_tokenize(M, "a", 1, &ids, &n), CMF_OK, "");
    CHECK(ids != NULL && n >= 1);
    free(ids);
}
static void c_detokenize_n(void) {
    const int32_t ids[1] = {1};
    char *text = NULL;
    size_t len = 9;
    EXPECT_ARG(cmf_detokenize_n(NULL, ids, 1, 0, &text, &len), "");
    CHECK(len == 0);
    EXPECT_ARG(cmf_detokenize_n(T, NULL, 1, 0, &text, &len), "");
    EXPECT_ARG(cmf_detokenize_n(T, ids, 1, 0, NULL, &len), "");
    EXPECT(cmf_detokenize_n(T, ids, 1, 0, &text, NULL), CMF_OK, ""); /* len optional */
    free(text);
}
static void c_detok_stream_push_n(void) {
    cmf_detok_stream *d = NULL;
    EXPECT(cmf_detok_stream_new(T, 0, &d), CMF_OK, "");
    char *text = NULL;
    size_t len = 9;
    EXPECT_ARG(cmf_detok_stream_push_n(NULL, 1, &text, &len), "");
    EXPECT_ARG(cmf_detok_stream_push_n(d, 1, NULL, &len), "");
    EXPECT(cmf_detok_stream_push_n(d, 1, &text, NULL), CMF_OK, "");
    free(text);
    cmf_detok_stream_free(d);
}
static void c_detok_stream_flush_n(void) {
    cmf_detok_stream *d = NULL;
    EXPECT(cmf_detok_stream_new(T, 0, &d), CMF_OK, "");
    char *text = NULL;
    size_t len = 9;
    EXPECT_ARG(cmf_detok_stream_flush_n(NULL, &text, &len), "");
    EXPECT_ARG(cmf_detok_stream_flush_n(d, NULL, &len), "");
    EXPECT(cmf_detok_stream_flush_n(d, &text, NULL), CMF_OK, "");
    free(text);
    cmf_detok_stream_free(d);
}
static void c_sampler_default_params(void) { CHECK(cmf_sampler_default_params().top_k == 40); }
static void c_sampler_new(void) {
    cmf_sampler_params p = cmf_sampler_default_params();
    cmf_sampler *s = (cmf_sampler *)1;
    EXPECT_ARG(cmf_sampler_new(8, NULL, &s), "");
    CHECK(s == NULL);
    EXPECT_ARG(cmf_sampler_new(8, &p, NULL), "");
}
static void c_sampler_free(void) { cmf_sampler_free(NULL); }
static void c_sampler_reset(void) { cmf_sampler_reset(NULL); }
static void c_sampler_accept(void) { cmf_sampler_accept(NULL, 1); }
static void c_sampler_sample(void) {
    cmf_sampler_params p = cmf_sampler_default_params();
    cmf_sampler *s = NULL;
    EXPECT(cmf_sampler_new(4, &p, &s), CMF_OK, "");
    const float l[4] = {0, 1, 2, 3};
    int32_t t = -1;
    EXPECT_ARG(cmf_sampler_sample(NULL, l, &t), "");
    EXPECT_ARG(cmf_sampler_sample(s, NULL, &t), "");
    EXPECT_ARG(cmf_sampler_sample(s, l, NULL), "");
    cmf_sampler_free(s);
}
static void c_session_sample(void) {
    cmf_sampler_params p = cmf_sampler_default_params();
    cmf_sampler *s = NULL;
    EXPECT(cmf_sampler_new(cmf_model_vocab_size(M), &p, &s), CMF_OK, "");
    int32_t t = -1;
    EXPECT_ARG(cmf_session_sample(NULL, s, &t), "cmf_session_sample");
    EXPECT_ARG(cmf_session_sample(S, NULL, &t), "cmf_session_sample");
    EXPECT_ARG(cmf_session_sample(S, s, NULL), "cmf_session_sample");
    cmf_sampler_free(s);
}
static void c_constraint_new_json(void) {
    cmf_constraint *c = (cmf_constraint *)1;
    const int32_t eos = 2;
    const int V = cmf_model_vocab_size(M);
    EXPECT_ARG(cmf_constraint_new_json(NULL, V, &eos, 1, &c), "cmf_constraint_new_json");
    CHECK(c == NULL);
    EXPECT_ARG(cmf_constraint_new_json(T, V, NULL, 1, &c), "cmf_constraint_new_json");
    EXPECT_ARG(cmf_constraint_new_json(T, V, &eos, 1, NULL), "cmf_constraint_new_json");
    EXPECT_ARG(cmf_constraint_new_json(T, V, &eos, 0, &c), "cmf_constraint_new_json");
    EXPECT_ARG(cmf_constraint_new_json(T, 0, &eos, 1, &c), "cmf_constraint_new_json");
    const int32_t bad = V;
    EXPECT_ARG(cmf_constraint_new_json(T, V, &bad, 1, &c), "outside");
}
static void c_constraint_free(void) { cmf_constraint_free(NULL); }
static void c_sampler_set_constraint(void) {
    cmf_sampler_params p = cmf_sampler_default_params();
    cmf_sampler *s = NULL;
    cmf_constraint *c = NULL;
    const int32_t eos = 2;
    EXPECT(cmf_sampler_new(cmf_model_vocab_size(M) + 1, &p, &s), CMF_OK, "");
    EXPECT(cmf_constraint_new_json(T, cmf_model_vocab_size(M), &eos, 1, &c), CMF_OK, "");
    EXPECT_ARG(cmf_sampler_set_constraint(NULL, c), "cmf_sampler_set_constraint");
    EXPECT_ARG(cmf_sampler_set_constraint(s, c), "the sampler"); /* another vocabulary size */
    EXPECT(cmf_sampler_set_constraint(s, NULL), CMF_OK, "");
    cmf_sampler_free(s);
    cmf_constraint_free(c);
}
static void c_sampler_constraint_done(void) { CHECK(cmf_sampler_constraint_done(NULL) == 0); }

typedef struct {
    const char *name;
    void (*run)(void);
} api_case;

#define C(fn) {"cmf_" #fn, c_##fn}
static const api_case CASES[] = {
    C(last_error), C(status_str), C(file_open), C(file_close), C(file_verify), C(model_load), C(model_load_on),
    C(model_free), C(model_vocab_size), C(model_n_ctx_train), C(model_arch), C(model_backend),
    C(model_backend_desc), C(model_tp), C(model_eos_ids), C(model_bos_id), C(session_new), C(session_free),
    C(session_new_ex), C(session_task), C(model_n_task_masks), C(session_state_bytes), C(session_o1_layers),
    C(session_gate_one_pass_share), C(session_set_skill), C(session_skill), C(session_reset), C(session_pos),
    C(session_n_ctx), C(session_prefill), C(session_decode), C(session_logits), C(session_truncate),
    C(batch_new), C(batch_free), C(batch_max_tokens), C(batch_run), C(model_tokenizer),
    C(model_tokenizer_error), C(tokenizer_load), C(tokenizer_free), C(tokenize), C(detokenize),
    C(tokenizer_vocab_size), C(detok_stream_new), C(detok_stream_prime), C(detok_stream_push),
    C(detok_stream_flush), C(detok_stream_free), C(tokenizer_token_id), C(model_chat_template),
    C(chat_template_chatml), C(chat_default_params), C(chat_render), C(chat_tokenize), C(detokenize_n),
    C(detok_stream_push_n), C(detok_stream_flush_n), C(sampler_default_params), C(sampler_new), C(sampler_free),
    C(sampler_reset), C(sampler_accept), C(sampler_sample), C(session_sample), C(constraint_new_json),
    C(constraint_free), C(sampler_set_constraint), C(sampler_constraint_done),
};
enum { N_CASES = sizeof CASES / sizeof CASES[0] };

/* ---- the header's function list ------------------------------------------------------------------------------ */

/* Reads cmf.h, blanks comments and preprocessor lines, and collects every identifier `cmf_...` directly followed
 * by '(' (the header holds declarations only, so each is a declared function). Returns the count (<= cap). */
static int header_functions(const char *path, char names[][64], int cap) {
    FILE *f = fopen(path, "rb");
    CHECK_MSG(f != NULL, "cannot open %s", path);
    if (!f) return 0;
    static char src[1 << 17];
    size_t n = fread(src, 1, sizeof src - 1, f);
    fclose(f);
    src[n] = '\0';
    CHECK_MSG(n < sizeof src - 1, "%s is larger than the test's buffer", path);
    for (size_t i = 0; i < n; i++) { /* comments -> spaces */
        if (src[i] == '/' && src[i + 1] == '*') {
            size_t j = i;
            while (j + 1 < n && !(src[j] == '*' && src[j + 1] == '/')) src[j++] = ' ';
            if (j + 1 < n) src[j] = src[j + 1] = ' ';
            i = j + 1;
        } else if (src[i] == '/' && src[i + 1] == '/') {
            while (i < n && src[i] != '\n') src[i++] = ' ';
        } else if (src[i] == '#' && (i == 0 || src[i - 1] == '\n')) {
            while (i < n && src[i] != '\n') src[i++] = ' ';
        }
    }
    int k = 0;
    for (size_t i = 0; i + 4 < n; i++) {
        if (strncmp(src + i, "cmf_", 4) != 0 || (i > 0 && (isalnum((unsigned char)src[i - 1]) || src[i - 1] == '_')))
            continue;
        size_t j = i;
        while (j < n && (isalnum((unsigned char)src[j]) || src[j] == '_')) j++;
        size_t e = j;
        while (e < n && isspace((unsigned char)src[e])) e++;
        if (src[e] == '(' && j - i < 64 && k < cap) {
            memcpy(names[k], src + i, j - i);
            names[k][j - i] = '\0';
            k++;
        }
        i = j;
    }
    return k;
}

int main(void) {
    static char names[256][64];
    const int nh = header_functions(CMF_HEADER_PATH, names, 256);
    CHECK_MSG(nh >= 60, "parsed only %d functions from %s", nh, CMF_HEADER_PATH);
    printf("cmf.h declares %d functions; %d cases\n", nh, (int)N_CASES);
    for (int i = 0; i < nh; i++) {
        int found = 0;
        for (int c = 0; c < N_CASES; c++) found |= !strcmp(CASES[c].name, names[i]);
        CHECK_MSG(found, "%s is declared in cmf.h but has no NULL-argument case in test_api_null.c", names[i]);
    }
    for (int c = 0; c < N_CASES; c++) {
        int found = 0;
        for (int i = 0; i < nh; i++) found |= !strcmp(CASES[c].name, names[i]);
        CHECK_MSG(found, "test case %s: cmf.h declares no such function", CASES[c].name);
    }

    snprintf(g_path, sizeof g_path, "%s", tmp_path("api_null_stories.cmf"));
    cmf_convert_opts o = {0};
    CHECK_MSG(cmf_convert_gguf(shared_path(STORIES_GGUF), g_path, &o) == CMF_OK, "convert: %s", cmf_last_error());
    CHECK_MSG(cmf_model_load(g_path, NULL, &M) == CMF_OK, "load: %s", cmf_last_error());
    if (M) CHECK_MSG(cmf_session_new(M, 32, &S) == CMF_OK, "session: %s", cmf_last_error());
    T = cmf_model_tokenizer(M);
    CHECK(T != NULL);
    if (M && S && T)
        for (int c = 0; c < N_CASES; c++) {
            const int before = cmf_test_failures;
            CASES[c].run();
            printf("%-40s %s\n", CASES[c].name, cmf_test_failures == before ? "ok" : "FAILED");
        }
    cmf_session_free(S);
    cmf_model_free(M);
    unlink(g_path);
    CMF_TEST_END();
}
