/* http.c — the HTTP side of `cmf serve` on GNU libmicrohttpd (one thread per connection, so a handler may block
 * while its request is generated): routing (with llama-server's path aliases), Bearer-key (or llama-server's
 * X-Api-Key) authentication with a constant-time compare, the body
 * size limit, CORS, and Server-Sent Events (text/event-stream, "data: <json>\n\n" frames, as OpenAI streams)
 * through a callback response that blocks until the scheduler produces more. A client that disconnects is noticed
 * by a peek at its socket while waiting (EOF), and its request is cancelled so the slot frees up. */
#include <errno.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <time.h>

#include <microhttpd.h>

#include "model/model.h"
#include "server/internal.h"
#include "skills/skills.h"
#include "template/template.h"
#include "util/error.h"

enum {
    R_CHAT, R_COMPLETIONS, R_MODELS, R_HEALTH, R_METRICS, R_TOKENIZE, R_DETOKENIZE, R_TEMPLATE, R_PAGE, R_NATIVE,
    R_PROPS, R_OTHER, N_ROUTES
};

static const struct {
    const char *path, *method;
} ROUTES[N_ROUTES - 1] = {
    {"/v1/chat/completions", "POST"}, {"/v1/completions", "POST"}, {"/v1/models", "GET"},
    {"/health", "GET"},               {"/metrics", "GET"},         {"/tokenize", "POST"},
    {"/detokenize", "POST"},          {"/apply-template", "POST"},   {"/", "GET"},
    {"/completion", "POST"},          {"/props", "GET"}, /* llama-server's own (native.c) */
};
/* llama-server's other paths to the same routes (tools/server/server.cpp: "/v1/health", "/models", "/completions"
 * is its own /completion, not the OpenAI one, "/chat/completions"); requests count under the route's name */
static const struct {
    const char *path;
    int route;
} ALIASES[] = {
    {"/v1/health", R_HEALTH}, {"/models", R_MODELS}, {"/completions", R_NATIVE}, {"/chat/completions", R_CHAT}};
static const char *const ROUTE_NAMES[N_ROUTES] = {"chat_completions", "completions", "models",   "health", "metrics",
                                                  "tokenize",         "detokenize",  "apply_template", "page",
                                                  "completion",       "props",       "other"};

typedef struct conn {
    srv_buf body;
    int too_large;
} conn;

cmf_server_opts cmf_server_default_opts(void) {
    cmf_server_opts o;
    memset(&o, 0, sizeof o);
    o.host = "127.0.0.1";
    o.port = 8080;
    o.n_slots = 1;
    o.max_queue = 64;
    o.max_body = 8u << 20;
    o.batch_tokens = 512;
    o.idle_timeout_s = 60;
    return o;
}

int cmf_server_port(const cmf_server *s) { return s->port; }
int cmf_server_n_ctx(const cmf_server *s) { return s->n_ctx; }

/* ---- responses ------------------------------------------------------------------------------------------------- */
static void count_status(cmf_server *s, int status) {
    pthread_mutex_lock(&s->mu);
    if (status < 400)
        s->met.responses_2xx++;
    else if (status < 500)
        s->met.responses_4xx++;
    else
        s->met.responses_5xx++;
    pthread_mutex_unlock(&s->mu);
}

static void add_common_headers(cmf_server *s, struct MHD_Response *resp, const char *ctype) {
    if (ctype) MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, ctype);
    if (s->cors) {
        MHD_add_response_header(resp, MHD_HTTP_HEADER_ACCESS_CONTROL_ALLOW_ORIGIN, s->cors);
        MHD_add_response_header(resp, "Vary", "Origin");
    }
}

/* Sends `body` (malloc'd, taken; NULL: an out-of-memory error). */
static enum MHD_Result send_body(cmf_server *s, struct MHD_Connection *c, int status, const char *ctype, char *body,
                                 const char *allow) {
    if (!body) {
        status = 500;
        ctype = "application/json";
        body = srv_error_json(500, "out of memory", NULL);
        if (!body) return MHD_NO;
    }
    struct MHD_Response *resp = MHD_create_response_from_buffer(strlen(body), body, MHD_RESPMEM_MUST_FREE);
    if (!resp) {
        free(body);
        return MHD_NO;
    }
    add_common_headers(s, resp, ctype);
    if (status == 401) MHD_add_response_header(resp, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer");
    if (allow) MHD_add_response_header(resp, MHD_HTTP_HEADER_ALLOW, allow);
    if (status == 503) MHD_add_response_header(resp, MHD_HTTP_HEADER_RETRY_AFTER, "1"); /* queue full: retry soon */
    count_status(s, status);
    enum MHD_Result rc = MHD_queue_response(c, (unsigned)status, resp);
    MHD_destroy_response(resp);
    return rc;
}

static enum MHD_Result send_reply(cmf_server *s, struct MHD_Connection *c, srv_reply r) {
    return send_body(s, c, r.status, "application/json", r.body, NULL);
}

static enum MHD_Result send_error(cmf_server *s, struct MHD_Connection *c, int status, const char *msg,
                                  const char *allow) {
    return send_body(s, c, status, "application/json", srv_error_json(status, msg, NULL), allow);
}

/* ---- authentication -------------------------------------------------------------------------------------------- */
/* Compares in time that depends only on the lengths, never on where the first difference is. */
static int key_equal(const char *a, size_t na, const char *b, size_t nb) {
    unsigned char d = (unsigned char)(na != nb);
    size_t n = na > nb ? na : nb;
    for (size_t i = 0; i < n; i++) {
        unsigned char x = i < na ? (unsigned char)a[i] : 0, y = i < nb ? (unsigned char)b[i] : 0;
        d |= (unsigned char)(x ^ y);
    }
    return d == 0;
}

/* The key in "Authorization: Bearer KEY" or, when there is no Authorization header, in "X-Api-Key: KEY" (with or
 * without "Bearer "), as llama-server's validate_api_key (tools/server/server-http.cpp) reads it. */
static int authorized(cmf_server *s, struct MHD_Connection *c) {
    if (!s->api_key) return 1;
    const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
    if (!h) {
        h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "X-Api-Key");
        if (!h) return 0;
        if (!strncasecmp(h, "Bearer ", 7)) h += 7;
        return key_equal(h, strlen(h), s->api_key, strlen(s->api_key));
    }
    if (strncasecmp(h, "Bearer ", 7) != 0) return 0; /* the scheme is case-insensitive (RFC 7235 2.1) */
    h += 7;
    while (*h == ' ') h++;
    return key_equal(h, strlen(h), s->api_key, strlen(s->api_key));
}

/* ---- waiting on the scheduler ---------------------------------------------------------------------------------- */
/* Whether the client has closed its side (EOF on a peek) or the socket failed. */
static int peer_gone(struct MHD_Connection *c) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (!ci) return 0;
    char ch;
    ssize_t n = recv(ci->connect_fd, &ch, 1, MSG_PEEK | MSG_DONTWAIT);
    return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

/* Waits (mu held) up to 100 ms for r's condition variable. */
static void wait_a_little(cmf_server *s, srv_req *r) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += 100 * 1000 * 1000;
    if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
    pthread_cond_timedwait(&r->cv, &s->mu, &ts);
}

static void cancel(cmf_server *s, srv_req *r) {
    atomic_store(&r->cancelled, 1);
    pthread_cond_signal(&s->wake);
}

typedef struct stream_ctx {
    cmf_server *s;
    srv_req *r;
    struct MHD_Connection *c;
} stream_ctx;

static ssize_t sse_read(void *cls, uint64_t pos, char *buf, size_t max) {
    (void)pos;
    stream_ctx *x = cls;
    cmf_server *s = x->s;
    srv_req *r = x->r;
    pthread_mutex_lock(&s->mu);
    for (;;) {
        if (r->sse.len > 0) {
            size_t n = r->sse.len < max ? r->sse.len : max;
            memcpy(buf, r->sse.p, n);
            srv_buf_consume(&r->sse, n);
            pthread_mutex_unlock(&s->mu);
            return (ssize_t)n;
        }
        if (r->done) {
            pthread_mutex_unlock(&s->mu);
            return MHD_CONTENT_READER_END_OF_STREAM;
        }
        wait_a_little(s, r);
        if (!r->done && r->sse.len == 0 && peer_gone(x->c)) {
            cancel(s, r);
            pthread_mutex_unlock(&s->mu);
            return MHD_CONTENT_READER_END_WITH_ERROR;
        }
    }
}

static void sse_free(void *cls) {
    stream_ctx *x = cls;
    srv_release(x->s, x->r);
    free(x);
}

/* The idle timeout in whole seconds (at least 1). */
static unsigned idle_timeout(const cmf_server *s) {
    return s->o.idle_timeout_s < 1 ? 1u : (unsigned)(s->o.idle_timeout_s + 0.5);
}

static enum MHD_Result generate(cmf_server *s, struct MHD_Connection *c, srv_kind kind, conn *k) {
    /* The request is complete and the client now waits for us: no idle timeout until the answer is sent (a queued
     * request, a long prefill or a slow non-stream generation would otherwise be closed by libmicrohttpd when the
     * handler returns, and a stream with long gaps between tokens cut). on_completed restores the timeout. */
    MHD_set_connection_option(c, MHD_CONNECTION_OPTION_TIMEOUT, 0u);
    srv_reply err = {0, NULL};
    srv_req *r = srv_parse_generation(s, kind, k->body.p ? k->body.p : "", k->body.len, &err);
    if (!r) return send_reply(s, c, err);
    int stream = r->stream;
    if (srv_submit(s, r)) {
        srv_req_free(r);
        return send_error(s, c, 503, "the server is busy: the request queue is full, retry later", NULL);
    }
    if (stream) {
        stream_ctx *x = calloc(1, sizeof *x);
        struct MHD_Response *resp = NULL;
        if (x) {
            x->s = s, x->r = r, x->c = c;
            resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 4096, sse_read, x, sse_free);
        }
        if (!resp) {
            free(x);
            srv_release(s, r);
            return send_error(s, c, 500, "out of memory", NULL);
        }
        add_common_headers(s, resp, "text/event-stream");
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
        count_status(s, 200);
        enum MHD_Result rc = MHD_queue_response(c, MHD_HTTP_OK, resp);
        MHD_destroy_response(resp); /* sse_free runs when the connection is done with it */
        return rc;
    }
    pthread_mutex_lock(&s->mu);
    int gone = 0;
    while (!r->done) {
        wait_a_little(s, r);
        if (!r->done && !gone && peer_gone(c)) {
            gone = 1;
            cancel(s, r);
        }
    }
    pthread_mutex_unlock(&s->mu);
    srv_reply rep = srv_generation_reply(s, r);
    srv_release(s, r);
    if (gone) {
        free(rep.body);
        return MHD_NO; /* nobody to answer */
    }
    return send_reply(s, c, rep);
}

/* ---- routing --------------------------------------------------------------------------------------------------- */
static enum MHD_Result dispatch(cmf_server *s, struct MHD_Connection *c, const char *url, const char *method,
                                conn *k) {
    int route = R_OTHER;
    for (int i = 0; i < N_ROUTES - 1; i++)
        if (!strcmp(url, ROUTES[i].path)) route = i;
    for (size_t i = 0; i < sizeof ALIASES / sizeof ALIASES[0]; i++)
        if (!strcmp(url, ALIASES[i].path)) route = ALIASES[i].route;
    const char *model_id = NULL; /* GET /v1/models/{id}: OpenAI's "Retrieve model" (the SDK's models.retrieve) */
    if (route == R_OTHER && !strncmp(url, "/v1/models/", 11)) route = R_MODELS, model_id = url + 11;
    pthread_mutex_lock(&s->mu);
    s->met.requests[route]++;
    pthread_mutex_unlock(&s->mu);
    if (!strcmp(method, "OPTIONS") && s->cors) { /* CORS preflight */
        struct MHD_Response *resp = MHD_create_response_from_buffer(0, "", MHD_RESPMEM_PERSISTENT);
        if (!resp) return MHD_NO;
        add_common_headers(s, resp, NULL);
        MHD_add_response_header(resp, "Access-Control-Allow-Methods", "GET, POST, OPTIONS");
        MHD_add_response_header(resp, "Access-Control-Allow-Headers", "Authorization, X-Api-Key, Content-Type");
        MHD_add_response_header(resp, "Access-Control-Max-Age", "86400");
        count_status(s, 204);
        enum MHD_Result rc = MHD_queue_response(c, MHD_HTTP_NO_CONTENT, resp);
        MHD_destroy_response(resp);
        return rc;
    }
    if (route != R_HEALTH && route != R_PAGE && !authorized(s, c)) /* the page asks for the key itself */
        return send_error(s, c, 401, "missing or invalid API key (Authorization: Bearer <key>)", NULL);
    if (route == R_OTHER) {
        char msg[300];
        snprintf(msg, sizeof msg, "no route %.200s", url);
        return send_error(s, c, 404, msg, NULL);
    }
    /* HEAD is GET without the body (RFC 9110 9.3.2): the handler runs as for GET and libmicrohttpd sends only the
     * headers (Content-Length included) */
    int head_ok = !strcmp(method, "HEAD") && !strcmp(ROUTES[route].method, "GET");
    if (!head_ok && strcmp(method, ROUTES[route].method) != 0) {
        char msg[300];
        snprintf(msg, sizeof msg, "%s needs %s, not %.20s", ROUTES[route].path, ROUTES[route].method, method);
        return send_error(s, c, 405, msg, strcmp(ROUTES[route].method, "GET") ? ROUTES[route].method : "GET, HEAD");
    }
    if (k->too_large) {
        char msg[128];
        snprintf(msg, sizeof msg, "the request body exceeds %zu bytes", s->o.max_body);
        return send_error(s, c, 413, msg, NULL);
    }
    const char *body = k->body.p ? k->body.p : "";
    switch (route) {
    case R_CHAT: return generate(s, c, SRV_CHAT, k);
    case R_COMPLETIONS: return generate(s, c, SRV_COMPLETION, k);
    case R_NATIVE: return generate(s, c, SRV_NATIVE, k);
    case R_PROPS: return send_reply(s, c, srv_api_props(s));
    case R_MODELS: return send_reply(s, c, model_id ? srv_api_model(s, model_id) : srv_api_models(s));
    case R_HEALTH: return send_body(s, c, 200, "application/json", strdup("{\"status\":\"ok\"}"), NULL);
    case R_METRICS: {
        pthread_mutex_lock(&s->mu);
        char *t = srv_metrics_text(&s->met, ROUTE_NAMES, N_ROUTES, s->q_len, s->busy, s->o.n_slots);
        pthread_mutex_unlock(&s->mu);
        return send_body(s, c, 200, "text/plain; version=0.0.4", t, NULL);
    }
    case R_TOKENIZE: return send_reply(s, c, srv_api_tokenize(s, body, k->body.len));
    case R_DETOKENIZE: return send_reply(s, c, srv_api_detokenize(s, body, k->body.len));
    case R_TEMPLATE: return send_reply(s, c, srv_api_apply_template(s, body, k->body.len));
    case R_PAGE: {
        size_t n = 0;
        const char *html = srv_page_html(&n);
        char *copy = malloc(n + 1);
        if (copy) memcpy(copy, html, n + 1);
        return send_body(s, c, 200, "text/html; charset=utf-8", copy, NULL);
    }
    default: return send_error(s, c, 404, "no such route", NULL);
    }
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                  const char *version, const char *upload, size_t *upload_size, void **con_cls) {
    (void)version;
    cmf_server *s = cls;
    conn *k = *con_cls;
    if (!k) { /* first call: headers only */
        if (!(k = calloc(1, sizeof *k))) return MHD_NO;
        *con_cls = k;
        const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
        if (cl && strtoull(cl, NULL, 10) > s->o.max_body) { /* refuse now, without reading the body */
            char msg[128];
            snprintf(msg, sizeof msg, "the request body exceeds %zu bytes", s->o.max_body);
            return send_error(s, c, 413, msg, NULL);
        }
        return MHD_YES;
    }
    if (*upload_size) {
        if (!k->too_large) {
            if (k->body.len + *upload_size > s->o.max_body) {
                k->too_large = 1;
                srv_buf_free(&k->body);
            } else if (srv_buf_add(&k->body, upload, *upload_size)) {
                return MHD_NO;
            }
        }
        *upload_size = 0;
        return MHD_YES;
    }
    return dispatch(s, c, url, method, k);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode t) {
    (void)t;
    cmf_server *s = cls;
    if (c) MHD_set_connection_option(c, MHD_CONNECTION_OPTION_TIMEOUT, idle_timeout(s)); /* keep-alive: idle again */
    conn *k = *con_cls;
    if (!k) return;
    srv_buf_free(&k->body);
    free(k);
    *con_cls = NULL;
}

/* Percent-decodes the path as libmicrohttpd does, except that a path with an encoded NUL ("%00") stays encoded: it
 * then matches no route (404) instead of being cut at the NUL ("/%00" would otherwise read as "/"). */
static size_t unescape_url(void *cls, struct MHD_Connection *c, char *uri) {
    (void)cls, (void)c;
    if (strstr(uri, "%00")) return strlen(uri);
    return MHD_http_unescape(uri);
}

/* ---- start / stop ---------------------------------------------------------------------------------------------- */
static char *dup_or_null(const char *s) { return s && *s ? strdup(s) : NULL; }

/* s->skills: the ids of the file's skills (header records, then tensor prefixes: cmf_skills_list), and s->skill,
 * the default one (`--skill`: NULL, "" or "none" is the backbone; another id must be in the list). */
static cmf_status list_skills(cmf_server *s, const char *want) {
    cmf_skill_info *list = NULL;
    size_t n = 0;
    cmf_status st = cmf_skills_list(s->m->file, &list, &n);
    if (st != CMF_OK) return cmf_err_prefix(st, "serve: skills: ");
    if (n && !(s->skills = calloc(n, sizeof *s->skills))) {
        cmf_skills_free(list, n);
        return cmf_err(CMF_E_NOMEM, "serve: out of memory");
    }
    for (size_t i = 0; i < n; i++)
        if ((s->skills[s->n_skills] = strdup(list[i].id))) s->n_skills++;
    cmf_skills_free(list, n);
    if ((size_t)s->n_skills != n) return cmf_err(CMF_E_NOMEM, "serve: out of memory");
    for (int i = 0; i < s->n_skills; i++) /* the name would always mean the served model: the skill unreachable */
        if (!strcmp(s->skills[i], s->model_name))
            return cmf_err(CMF_E_ARG, "serve: the served name '%s' is also a skill id of the file: give the model "
                                      "another name (--alias)", s->model_name);
    s->skills_off = s->m->tp != NULL;
    if (!want || !*want || !strcmp(want, "none")) return CMF_OK;
    for (int i = 0; i < s->n_skills; i++)
        if (!strcmp(s->skills[i], want)) {
            s->skill = s->skills[i];
            return CMF_OK;
        }
    char have[512];
    srv_skills_joined(s, have, sizeof have);
    return cmf_err(CMF_E_NOT_FOUND, "serve: --skill '%.64s' is not in this file (%s%s)", want,
                   s->n_skills ? "its skills: " : "it has no skills", have);
}

cmf_status cmf_server_start(cmf_model *m, const cmf_server_opts *opts, cmf_server **out) {
    *out = NULL;
    if (!m || !opts) return cmf_err(CMF_E_ARG, "serve: NULL model or options");
    cmf_server_opts o = *opts;
    if (o.n_slots < 1 || o.n_slots > 1024) return cmf_err(CMF_E_ARG, "serve: --parallel %d: need 1..1024", o.n_slots);
    if (o.port < 0 || o.port > 65535) return cmf_err(CMF_E_ARG, "serve: --port %d: need 0..65535", o.port);
    if (o.max_queue <= 0) o.max_queue = 64;
    if (o.max_body == 0) o.max_body = 8u << 20;
    if (o.batch_tokens <= 0) o.batch_tokens = 512;
    if (!o.host || !*o.host) o.host = "127.0.0.1";
    if (!(o.idle_timeout_s > 0)) o.idle_timeout_s = 60;
    if (o.idle_timeout_s > 86400) o.idle_timeout_s = 86400;
    if (!strcmp(cmf_model_arch(m), "dory")) /* its forward has no batched (multi-session) path yet */
        return cmf_err(CMF_E_UNSUPPORTED, "serve: looped (Dory) models cannot be served yet (continuous batching "
                                          "needs a batched Dory forward); cmf run, chat, bench and ppl take them");
    const cmf_tokenizer *tok = cmf_model_tokenizer(m);
    if (!tok) {
        const char *why = cmf_model_tokenizer_error(m);
        return cmf_err(CMF_E_ARG, "serve: the model has no usable tokenizer: %s",
                       *why ? why : "the file has no tokenizer section (convert from a checkpoint with tokenizer.json)");
    }
    /* a tokenizer with ids past the embedding's rows (the converter warns) would fail requests one by one (their
     * prompts' ids out of range): refused here, as cmf run refuses such a prompt */
    const int tok_vocab = cmf_tokenizer_vocab_size(tok), model_vocab = cmf_model_vocab_size(m);
    if (tok_vocab > model_vocab)
        return cmf_err(CMF_E_ARG, "serve: the tokenizer has ids up to %d, outside the model's vocabulary of %d: the "
                                  "file's tokenizer does not belong to these weights", tok_vocab - 1, model_vocab);
    if (o.chat_template && *o.chat_template) { /* a template that cannot parse fails here, not in every request */
        cmf_template *tpl = NULL;
        cmf_status ts = cmf_template_parse(o.chat_template, strlen(o.chat_template), &tpl);
        cmf_template_free(tpl);
        if (ts != CMF_OK) return cmf_err_prefix(ts, "serve: the chat template does not parse: ");
    }
    cmf_server *s = calloc(1, sizeof *s);
    if (!s) return cmf_err(CMF_E_NOMEM, "serve: out of memory");
    s->m = m;
    s->tok = tok;
    s->vocab = cmf_model_vocab_size(m);
    s->eos = cmf_model_eos_ids(m, &s->n_eos);
    s->anchor = srv_piece_anchor(tok);
    if (tok && s->n_eos > 0 && cmf_constraint_new_json(tok, s->vocab, s->eos, s->n_eos, &s->json) != CMF_OK)
        s->json = NULL; /* out of memory: JSON-mode requests are refused, naming it */
    int train = cmf_model_n_ctx_train(m);
    s->n_ctx = o.n_ctx > 0 ? o.n_ctx : (train > 0 && train < 4096 ? train : 4096);
    s->host = strdup(o.host);
    s->api_key = dup_or_null(o.api_key);
    s->cors = dup_or_null(o.cors);
    s->model_name = strdup(o.model_name && *o.model_name ? o.model_name : "cmf");
    s->model_path = dup_or_null(o.model_path);
    s->chat_template = dup_or_null(o.chat_template);
    o.host = s->host, o.api_key = s->api_key, o.cors = s->cors, o.model_name = s->model_name;
    o.model_path = s->model_path;
    o.chat_template = s->chat_template;
    s->o = o;
    pthread_mutex_init(&s->mu, NULL);
    pthread_mutex_init(&s->big_mu, NULL);
    pthread_cond_init(&s->wake, NULL);
    if (!s->host || !s->model_name || (o.api_key && *opts->api_key && !s->api_key) ||
        (opts->cors && *opts->cors && !s->cors) || (opts->model_path && *opts->model_path && !s->model_path) ||
        (opts->chat_template && *opts->chat_template && !s->chat_template)) {
        cmf_server_stop(s);
        return cmf_err(CMF_E_NOMEM, "serve: out of memory");
    }
    cmf_status st = list_skills(s, opts->skill);
    if (st == CMF_OK) st = srv_sched_start(s);
    if (st != CMF_OK) {
        cmf_server_stop(s);
        return st;
    }
    char port[16];
    snprintf(port, sizeof port, "%d", o.port);
    struct addrinfo hints, *ai = NULL;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICSERV;
    int gai = getaddrinfo(s->host, port, &hints, &ai);
    if (gai != 0 || !ai) {
        /* the message is built before cmf_server_stop frees s->host (o.host points at it) */
        cmf_status e = cmf_err(CMF_E_IO, "serve: cannot resolve --host %s: %s", s->host, gai_strerror(gai));
        cmf_server_stop(s);
        return e;
    }
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION | MHD_USE_POLL;
    if (ai->ai_family == AF_INET6) flags |= MHD_USE_IPv6;
    s->d = MHD_start_daemon(flags, (uint16_t)o.port, NULL, NULL, on_request, s, MHD_OPTION_SOCK_ADDR, ai->ai_addr,
                            MHD_OPTION_NOTIFY_COMPLETED, on_completed, s, MHD_OPTION_CONNECTION_LIMIT, 512u,
                            MHD_OPTION_CONNECTION_TIMEOUT, idle_timeout(s), MHD_OPTION_UNESCAPE_CALLBACK, unescape_url, NULL,
                            MHD_OPTION_END);
    freeaddrinfo(ai);
    if (!s->d) {
        int v6 = strchr(s->host, ':') != NULL; /* an IPv6 literal is written [addr]:port */
        cmf_status e = cmf_err(CMF_E_IO, "serve: cannot listen on %s%s%s:%d (address in use or not available?)",
                               v6 ? "[" : "", s->host, v6 ? "]" : "", o.port);
        cmf_server_stop(s);
        return e;
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(s->d, MHD_DAEMON_INFO_BIND_PORT);
    s->port = di ? di->port : o.port;
    *out = s;
    return CMF_OK;
}

void cmf_server_stop(cmf_server *s) {
    if (!s) return;
    srv_sched_stop(s); /* every request ends (with an error if still running); waiting connections wake up */
    if (s->d) MHD_stop_daemon(s->d);
    pthread_cond_destroy(&s->wake);
    pthread_mutex_destroy(&s->mu);
    pthread_mutex_destroy(&s->big_mu);
    free(s->host);
    free(s->api_key);
    free(s->cors);
    free(s->model_name);
    free(s->model_path);
    free(s->chat_template);
    for (int i = 0; i < s->n_skills; i++) free(s->skills[i]);
    free(s->skills);
    cmf_constraint_free(s->json);
    free(s);
}
