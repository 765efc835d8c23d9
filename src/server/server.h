/* server.h — `cmf serve`: an OpenAI-compatible HTTP server over one model, with continuous batching.
 *
 * Layers (one file each):
 *   http.c    libmicrohttpd glue: routes, auth (Bearer key, constant-time compare), body limit, CORS, SSE streaming
 *   api.c     the OpenAI response JSON (chat/completions, completions, models, tokenize, ...) and errors
 *   request.c request bodies: field readers, the generation routes' fields, prompts, chat rendering, tool_choice
 *   llamacpp.c llama-server's own request fields (n_predict, repeat_penalty, ignore_eos, ...; refused samplers)
 *   sched.c   the scheduler thread: N slots (one cmf_session each), a bounded queue, one cmf_batch_run per step
 *             with one decode token for every generating slot plus a chunk of a waiting prompt (chunked prefill
 *             interleaved with decode), per-slot sampler, KV-cache prefix reuse across requests
 *   output.c  generated text -> events: stop strings (held back while they could still match), <think>
 *             reasoning and Qwen3-style <tool_call>{json}</tool_call> blocks
 *   metrics.c Prometheus text counters, gauges and histograms
 *   page.c    the self-contained chat page served at GET / (inline HTML/CSS/JS, streams /v1/chat/completions)
 *   native.c  llama-server's own routes: POST /completion's answer and events, GET /props, /tokenize's pieces
 *
 * Hostile input: a request body must be valid UTF-8 holding exactly one JSON object; unknown request fields are a
 * 400 (as OpenAI answers), a Content-Length over the body limit is refused (413) before the body is read.
 * tool_choice "required" or a named function forces a call by writing "<tool_call>\n" and the start of the call's
 * JSON after the prompt (Qwen3 / Hermes templates only; other templates get a 400).
 *
 * The API follows OpenAI's "Chat Completions" and "Completions" references (platform.openai.com/docs/api-reference)
 * and the conventions of vLLM / llama.cpp servers for the non-OpenAI routes (/tokenize, /detokenize,
 * /apply-template, /health, /metrics). The library part never prints; `cmf serve` (tools/cmf/serve.c) does.
 */
#ifndef CMF_SERVER_H
#define CMF_SERVER_H

#include "cmf.h"

typedef struct cmf_server cmf_server;

typedef struct cmf_server_opts {
    const char *host;      /* numeric address or name to bind; NULL: "127.0.0.1" (loopback) */
    int port;              /* TCP port; 0: an ephemeral port (read it back with cmf_server_port) */
    const char *api_key;   /* NULL or "": no authentication; else every route but /health needs
                              "Authorization: Bearer <api_key>" (401 otherwise) */
    int n_slots;           /* concurrent sequences (--parallel); each has its own KV cache of n_ctx positions */
    int n_ctx;             /* positions per slot; <= 0: the model's trained context capped at 4096 */
    int max_queue;         /* requests waiting for a slot beyond which new ones get 503; <= 0: 64 */
    double timeout_s;      /* a request (queue wait + generation) ends after this many seconds; <= 0: none. One that
                            * is generating answers its text so far with finish_reason "length" (as llama-server's
                            * t_max_predict_ms); queued or still reading its prompt: 504 */
    const char *cors;      /* NULL: no CORS headers; else the Access-Control-Allow-Origin value */
    size_t max_body;       /* request body limit in bytes (413 beyond); 0: 8 MiB */
    int batch_tokens;      /* tokens per forward (decode tokens + prefill chunk); <= 0: 512 */
    const char *model_name; /* the id reported by /v1/models (and /props' model_alias) and the only "model" a
                               request may name; NULL: "cmf" */
    const char *model_path; /* the model file, reported by GET /props (llama-server's model_path); NULL: not sent */
    double idle_timeout_s; /* a connection silent this long while sending its request (headers or body) or between
                              keep-alive requests is closed; never while its generation runs; <= 0: 60 */
    const char *chat_template; /* NULL or "": the model's chat template (ChatML when it has none); else this Jinja
                                  source for /v1/chat/completions and /apply-template (llama-server's
                                  --chat-template-file); copied; it must parse */
    const char *skill;     /* the skill (CMF_FORMAT.md §3.1) of requests that name model_name or no model, and of
                              llama-server's /completion; NULL, "" or "none": the backbone. Whatever this is, a
                              request selects any skill of the file by giving its id as "model" (as vLLM serves a
                              LoRA adapter by its name); /v1/models lists the skills with "parent" = model_name */
} cmf_server_opts;

/* Defaults as documented above (host 127.0.0.1, port 8080, 1 slot, ...). */
cmf_server_opts cmf_server_default_opts(void);

/* Starts the scheduler thread and the HTTP daemon (thread per connection) for model `m`, which must outlive the
 * server and have a tokenizer. Allocates the slots' sessions (n_slots x n_ctx KV cache) and the batch here.
 * Errors: CMF_E_NOT_FOUND (opts->skill is not a skill of the file), CMF_E_ARG (bad option, no tokenizer, a tokenizer with ids at or past cmf_model_vocab_size: one that does
 * not belong to the weights), CMF_E_FORMAT (a chat_template that does not parse: the message
 * gives the engine's "template:LINE:COL: ..."), CMF_E_IO (cannot bind host:port; the message names them),
 * CMF_E_NOMEM. */
cmf_status cmf_server_start(cmf_model *m, const cmf_server_opts *o, cmf_server **out);

/* The bound TCP port (useful after port 0). */
int cmf_server_port(const cmf_server *s);

/* Positions per slot actually used. */
int cmf_server_n_ctx(const cmf_server *s);

/* Stops accepting, ends running and queued requests (they receive an error), joins every thread and frees.
 * NULL is allowed. */
void cmf_server_stop(cmf_server *s);

#endif
