/* internal.h — shared structures of src/server (see server.h for the layers). Private to this folder and its
 * tests. Locking: one server mutex (srv->mu) guards the queue, every request's output fields marked (mu) and the
 * metrics; slot state is touched only by the scheduler thread. */
#ifndef CMF_SERVER_INTERNAL_H
#define CMF_SERVER_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "sample/sample.h"
#include "server/server.h"

/* ---- growable byte buffer ------------------------------------------------------------------------------------ */
typedef struct srv_buf {
    char *p; /* NUL-terminated when non-NULL */
    size_t len, cap;
} srv_buf;

/* Appends n bytes (keeps a NUL after them). Returns 0, or -1 when out of memory (the buffer is unchanged). */
int srv_buf_add(srv_buf *b, const char *s, size_t n);
/* Appends a NUL-terminated string. */
int srv_buf_adds(srv_buf *b, const char *s);
/* Drops the first n bytes. */
void srv_buf_consume(srv_buf *b, size_t n);
void srv_buf_free(srv_buf *b);

/* ---- generated text -> events (output.c) --------------------------------------------------------------------- */
enum srv_event { SRV_EV_CONTENT, SRV_EV_REASONING, SRV_EV_TOOL };

/* Receives finished pieces of output: content or reasoning text (`text`, n bytes, valid UTF-8), or one tool call
 * (`text` = the function name, `args` = its arguments as a JSON text). Returns 0, or -1 on allocation failure. */
typedef int (*srv_emit_fn)(void *ctx, enum srv_event kind, const char *text, size_t n, const char *args);

typedef struct srv_out {
    char **stops; /* stop strings (not owned) */
    int n_stops;
    int parse_think, parse_tools;
    srv_buf raw;  /* text not yet cleared by the stop-string check (could still start a stop string) */
    srv_buf tags; /* text cleared of stops, not yet classified (could still start a tag) */
    int state;    /* 0 content, 1 reasoning, 2 inside <tool_call> */
    int skip_ws;  /* drop leading whitespace of the next content (after </think> or </tool_call>) */
    int n_tools;  /* tool calls emitted so far */
    int stopped;  /* a stop string matched: nothing more is accepted */
    int stop_hit; /* the index in stops of the stop string that matched, or -1 */
} srv_out;

/* Starts a parser. start_in_think: the prompt already opened <think> (the output begins as reasoning). */
void srv_out_init(srv_out *o, char **stops, int n_stops, int parse_think, int parse_tools, int start_in_think);
void srv_out_free(srv_out *o);
/* A forced tool call (tool_choice): the output begins inside a <tool_call> block whose first bytes, json_prefix
 * (e.g. {"name": "f", "arguments": ), were written into the prompt; they start the block the model completes.
 * Returns 0, or -1 when out of memory. */
int srv_out_force_tool(srv_out *o, const char *json_prefix);
/* Feeds generated text (complete UTF-8). Emits every piece that can no longer be part of a stop string or a tag.
 * When `final` is set everything held back is emitted (end of generation). Returns 1 when a stop string matched
 * (the stop string and everything after it are dropped), 0 otherwise, -1 on allocation failure. */
int srv_out_push(srv_out *o, const char *text, size_t n, int final, srv_emit_fn emit, void *ctx);

/* Longest suffix of s[0..n) that is a proper prefix of `pat` (0 when none). */
size_t srv_partial_suffix(const char *s, size_t n, const char *pat);

/* ---- requests ------------------------------------------------------------------------------------------------ */
/* SRV_NATIVE: llama-server's own POST /completion (a text completion answered in its JSON, native.c) */
typedef enum srv_kind { SRV_CHAT, SRV_COMPLETION, SRV_NATIVE } srv_kind;

typedef struct srv_req srv_req;
struct srv_req {
    /* set before submission, read-only afterwards */
    srv_kind kind;
    int32_t *prompt;
    int n_prompt;
    cmf_sampler_params sp;
    int max_tokens; /* > 0 */
    char **stops;
    int n_stops;
    int stream, include_usage, parse_tools, start_in_think;
    int ignore_eos; /* llama-server's ignore_eos: an end-of-generation id does not end the request */
    int json;       /* response_format {"type": "json_object"}: the sampler draws under s->json */
    char *tool_prefix; /* forced tool call: the call's JSON already in the prompt after "<tool_call>\n", or NULL */
    char id[64];
    long created;
    double t_arrival, deadline; /* seconds on the monotonic clock; deadline 0: none */
    const char *model_name;     /* the name answered in "model": the server's, or the skill's id when the
                                 * request named a skill (both outlive the request) */
    const char *skill;          /* the skill it runs with: one of the server's skill ids, or NULL (the backbone) */

    /* results (mu) */
    srv_buf sse;       /* stream: event bytes not yet handed to the connection */
    srv_buf content;   /* non-stream: the message text / completion text */
    srv_buf reasoning; /* non-stream: <think> text */
    cJSON *tool_calls; /* non-stream: OpenAI tool_calls array, or NULL */
    int done;          /* the scheduler has let go of the request */
    int http_status;   /* 0 while fine; else an error to report (message in error) */
    char error[256];
    const char *finish_reason;
    int timed_out;       /* ended by --timeout (counted as such in the metrics, whatever was answered) */
    int n_gen, n_cached; /* completion tokens (written by the scheduler thread only, without mu: others read it
                          * after done); prompt tokens whose KV came from the slot's previous request */
    /* for /completion's answer, written by the scheduler thread like n_gen: the slot's index (-1: none yet), the
     * tokens in its KV cache at the end, the index in stops of the stop string that ended it (-1: none), and the
     * srv_now() times of the slot taking it, of its first and of its last sampled token (0: none) */
    int id_slot, n_past, stop_hit;
    int truncated; /* llama-server's "truncated": the context was full at the last sampled token
                    * (n_past + 1 >= n_ctx) */
    double t_start, t_first, t_last;
    int role_sent;
    int n_tool_calls; /* tool calls sent so far (stream; the scheduler thread's) */
    srv_buf sse_head; /* the scheduler thread's: start of every streamed text piece (api.c sse_head), or empty */
    pthread_cond_t cv; /* signalled on new output and on done */

    atomic_int cancelled; /* set by the connection (client gone) */
    srv_req *next;        /* queue link (mu) */
};

/* Frees a request that no thread refers to anymore. NULL is allowed. */
void srv_req_free(srv_req *r);

/* ---- metrics (metrics.c; guarded by srv->mu) ----------------------------------------------------------------- */
#define SRV_N_BUCKETS 14
typedef struct srv_hist {
    uint64_t counts[SRV_N_BUCKETS + 1]; /* per bucket (not cumulative); the last is +Inf */
    double sum;
    uint64_t n;
} srv_hist;

typedef struct srv_metrics {
    uint64_t requests[16];      /* by route index (http.c's table) */
    uint64_t responses_2xx, responses_4xx, responses_5xx;
    uint64_t prompt_tokens, prompt_tokens_cached, generated_tokens;
    uint64_t finished_stop, finished_length, finished_tool_calls, cancelled, timed_out, failed, rejected_queue_full;
    uint64_t batch_steps, batch_tokens;
    uint64_t decode_steps, decode_tokens; /* steps that ran decode tokens only (no prompt tokens), their tokens */
    /* the scheduler thread's time in seconds: in cmf_batch_run; sampling the rows after it; detokenizing and
     * queueing their events (and ending finished requests); waiting for work (no slot busy) */
    double t_forward, t_sample, t_emit, t_idle;
    srv_hist latency, ttft; /* seconds: whole request; time to first token */
} srv_metrics;

void srv_hist_add(srv_hist *h, double v);
/* Prometheus text exposition format 0.0.4 of everything, plus the gauges given. Malloc'd; NULL when out of
 * memory. */
char *srv_metrics_text(const srv_metrics *m, const char *const *route_names, int n_routes, int queue_depth,
                       int slots_busy, int n_slots);

/* ---- the server ---------------------------------------------------------------------------------------------- */
typedef struct srv_slot srv_slot;
typedef struct srv_par srv_par; /* sched.c: the sampling helper threads */

struct cmf_server {
    cmf_model *m;
    const cmf_tokenizer *tok;
    cmf_server_opts o;
    char *host, *api_key, *cors, *model_name, *model_path; /* owned copies (model_path may be NULL) */
    char *chat_template;                      /* owned copy of the --chat-template-file text, or NULL */
    char **skills;                            /* the file's skill ids (cmf_skills_list order), owned */
    int n_skills;
    const char *skill;                        /* the default skill (opts.skill): one of skills, or NULL */
    int skills_off;                           /* 1 under --tp: skills are listed nowhere and refused by name */
    int n_ctx, vocab;
    const int32_t *eos;
    int n_eos;
    cmf_constraint *json; /* JSON mode's token table (response_format json_object), or NULL without a tokenizer / eos */
    int32_t anchor; /* a token decoded ahead of llama-server's texts (srv_piece_anchor), or -1 */

    pthread_mutex_t mu;
    pthread_cond_t wake; /* the scheduler waits here for work */
    pthread_mutex_t big_mu; /* one big text (over SRV_BIG_TEXT bytes) tokenized at a time: the tokenizer's working
                             * memory is ~30 bytes per input byte, so 16 concurrent 8 MB prompts took 4 GB */
    srv_req *q_head, *q_tail;
    int q_len, busy, quit, sched_started;
    pthread_t sched;
    srv_slot *slots;
    srv_par *par;
    cmf_batch *batch;
    srv_metrics met;

    struct MHD_Daemon *d;
    int port;
};

double srv_now(void);

/* sched.c: allocate slots and batch, start / stop the scheduler thread. */
cmf_status srv_sched_start(cmf_server *s);
void srv_sched_stop(cmf_server *s);
/* Queues a request (takes ownership when it returns 0). Returns 0, or 503 when the queue is full, or 503 when
 * the server is shutting down. */
int srv_submit(cmf_server *s, srv_req *r);
/* The connection is done with `r`: cancels it when still running, waits for the scheduler to let go, frees it. */
void srv_release(cmf_server *s, srv_req *r);
/* Ends a request from the scheduler: final events, done = 1, wakes the connection. Called without mu held. */
void srv_finish(cmf_server *s, srv_req *r, const char *reason, int http_status, const char *error);

/* api.c: JSON of the endpoints. Each handler returns the HTTP status and sets *out (malloc'd JSON text). */
typedef struct srv_reply {
    int status;
    char *body; /* malloc'd */
} srv_reply;

/* Builds an OpenAI error body {"error":{"message","type","code","param"}}. */
char *srv_error_json(int status, const char *message, const char *param);
/* The reply {status, srv_error_json(status, printf(fmt, ...) (up to 511 bytes), param)}; param may be NULL. */
srv_reply srv_reply_err(int status, const char *param, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* request.c: request bodies. srv_parse_body: the body must be valid UTF-8 holding exactly one JSON object without
 * an escaped NUL and without a repeated key (at the top level, in messages[i], tools[i], tools[i].function: a 400
 * naming it); returns it (the caller frees it with cJSON_Delete) or NULL with a 400 (500: out of memory) in *err. */
cJSON *srv_parse_body(const char *body, size_t len, srv_reply *err);
/* Field readers: an absent or null field leaves *out unchanged and returns 0; a wrong type or a value outside
 * [lo, hi] (an integer for srv_int_field, a boolean for srv_bool_field) returns -1 with a 400 naming it in *err. */
int srv_num_field(const cJSON *j, const char *name, double lo, double hi, double *out, srv_reply *err);
int srv_int_field(const cJSON *j, const char *name, double lo, double hi, long long *out, srv_reply *err);
int srv_bool_field(const cJSON *j, const char *name, int *out, srv_reply *err);
/* Every field of j is one the generation routes know, and those known but refused in some forms (logit_bias,
 * response_format, ...) are in an accepted form; else -1 with a 400 naming the field. */
int srv_known_fields(const cJSON *j, srv_reply *err);
/* Renders j's messages (+ tools when with_tools, chat_template_kwargs, add_generation_prompt) with the server's
 * chat template; *text is malloc'd. Returns 0, or -1 with a 400 (a 500 when out of memory) in *err. */
int srv_render_chat(cmf_server *s, const cJSON *j, int with_tools, char **text, srv_reply *err);
/* Texts over 256 KiB are tokenized one at a time (s->big_mu); below that these do nothing. */
void srv_big_lock(cmf_server *s, size_t len);
void srv_big_unlock(cmf_server *s, size_t len);

/* llamacpp.c: llama-server's own request fields (the file's comment lists which are accepted and which refused).
 * SRV_LLAMA_FIELDS: their names (NULL-terminated), known to srv_known_fields. */
extern const char *const SRV_LLAMA_FIELDS[];
/* The llama-server fields that ask for what cmf cannot do (typical_p != 1, grammar, ...) or are malformed: -1
 * with a 400 naming the field; 0 when none does. */
int srv_llama_refused(const cJSON *j, srv_reply *err);
/* The llama-server fields with an effect, as given (request.c merges them with their OpenAI synonyms). */
typedef struct srv_llama {
    long long n_predict;     /* -2: absent; -1: until the context is full; else >= 1 */
    long long repeat_last_n; /* -2: absent; -1: the context; 0: penalties off; else the window */
    double repeat_penalty;   /* NaN: absent; else in [1e-3, 100] */
    int ignore_eos;          /* 0 / 1 */
} srv_llama;
/* Reads them from j: -1 with a 400 naming a malformed one (n_predict 0 included). chat: the request is a chat
 * completion (reasoning_format "none" / "deepseek-legacy" are refused there). */
int srv_llama_fields(const cJSON *j, int chat, srv_llama *out, srv_reply *err);
/* Parses a /v1/chat/completions, /v1/completions or /completion (SRV_NATIVE: parsed as /v1/completions, with
 * llama-server's sampling defaults) body into a request ready to submit, or fills *err. */
srv_req *srv_parse_generation(cmf_server *s, srv_kind kind, const char *body, size_t len, srv_reply *err);
/* The model ids a request may name: the served model_name (runs with the default skill s->skill) or a skill id of
 * the file. Returns 1 and sets *skill (NULL: the backbone) and *name (the id, echoed in answers), else 0. */
int srv_model_lookup(const cmf_server *s, const char *id, const char **skill, const char **name);
/* The file's skill ids quoted and joined ("'a', 'b'"; "" when none) into buf[cap], truncated to fit. */
void srv_skills_joined(const cmf_server *s, char *buf, size_t cap);
/* The 404 for an unknown model id, naming the served model and the skills. */
srv_reply srv_unknown_model(const cmf_server *s, const char *id);
/* The complete (non-stream) response of a finished request. */
srv_reply srv_generation_reply(cmf_server *s, srv_req *r);
/* Streaming: appends to r->sse (caller holds mu) an SSE event for one output piece / the role / the end. */
int srv_sse_piece(srv_req *r, enum srv_event kind, const char *text, size_t n, const char *args);
/* The SSE event of one output piece ("data: <chat.completion.chunk or text_completion JSON>\n\n", as
 * srv_sse_piece) appended to `out` instead: reads only r's fields fixed at submission and the scheduler thread's
 * (n_tool_calls, sse_head), so the scheduler builds it without holding mu. Returns 0, or -1 when out of memory
 * (out unchanged). */
int srv_sse_piece_to(srv_buf *out, srv_req *r, enum srv_event kind, const char *text, size_t n, const char *args);
int srv_sse_role(srv_req *r);
int srv_sse_end(srv_req *r);
/* Non-stream: appends a piece to the request's result (caller holds mu). */
int srv_result_piece(srv_req *r, enum srv_event kind, const char *text, size_t n, const char *args);

/* native.c: llama-server's own routes and shapes (its tools/server: server-task.cpp, server-context.cpp).
 * srv_native_reply: the complete answer of a finished POST /completion request (to_json_non_oaicompat's fields that
 * cmf can fill truthfully). srv_native_sse_piece_to: one streamed piece, "data: {"index":0,"content":...,
 * "stop":false,...}\n\n" appended to out (-1 when out of memory, out unchanged); srv_native_sse_end: the final
 * event (stop true, the whole answer's fields, content ""), no [DONE] (llama-server sends none on this route);
 * caller holds mu. srv_api_props: GET /props. srv_token_pieces: /tokenize's with_pieces array for ids[0..n)
 * (cJSON array, NULL when out of memory). */
/* A request's sampling defaults: OpenAI's (temperature 1, top_p 1 = off, no top_k, min_p 0, no penalties), or for
 * llama-server's /completion (native) its defaults (common/common.h common_params_sampling: temperature 0.8,
 * top_k 40, top_p 0.95, min_p 0.05; its repeat_penalty 1 and the other samplers off), the seed left at 0. */
cmf_sampler_params srv_sampling_defaults(int native);
srv_reply srv_native_reply(srv_req *r);
int srv_native_sse_piece_to(srv_buf *out, srv_req *r, const char *text, size_t n);
int srv_native_sse_end(srv_req *r);
/* llama-server joins each token's piece (common_token_to_piece, llama_token_to_piece with lstrip 0: see
 * srv_llama_detokenize), where HF's decode drops a SentencePiece leading space at the start of the text. cmf gets the
 * pieces' join by decoding after an anchor token, whose text is then cut off. srv_piece_anchor: the id of "a" (the
 * last of its ids) when its decode is non-empty, else -1 (then llama-server's routes decode as HF does).
 * srv_llama_detokenize: ids[0..n) decoded as llama-server's tokens_to_str (special tokens shown unless skip_special)
 * into *text (malloc'd); the HF decode when there is no anchor or the anchor's text is not a prefix of the decode.
 * Errors: those of cmf_detokenize (CMF_E_NOMEM). */
int32_t srv_piece_anchor(const cmf_tokenizer *tok);
cmf_status srv_llama_detokenize(const cmf_server *s, const int32_t *ids, size_t n, int skip_special, char **text);
srv_reply srv_api_props(cmf_server *s);
cJSON *srv_token_pieces(cmf_server *s, const int32_t *ids, size_t n);

/* page.c: the chat page served at GET / (static, NUL-terminated, *len bytes without the NUL). */
const char *srv_page_html(size_t *len);

/* GET /v1/models: {"object":"list","data":[the model]}. GET /v1/models/{id} (OpenAI's "Retrieve model"): the same
 * model object when id (percent-decoded) is the served model's name, else a 404 naming param "model". */
srv_reply srv_api_models(cmf_server *s);
srv_reply srv_api_model(cmf_server *s, const char *id);
srv_reply srv_api_tokenize(cmf_server *s, const char *body, size_t len);
srv_reply srv_api_detokenize(cmf_server *s, const char *body, size_t len);
srv_reply srv_api_apply_template(cmf_server *s, const char *body, size_t len);

#endif
