/* sched.c — continuous batching (the scheme of Orca, Yu et al. OSDI 2022, with vLLM / llama.cpp's chunked
 * prefill): N slots, each a cmf_session with its own KV cache, fed by one scheduler thread. Every step is ONE
 * cmf_batch_run holding one decode token for every generating slot, then prompt tokens of slots still in prefill
 * (round-robin, up to the batch's token budget), so a long prompt never stalls the streams already decoding.
 * Each slot keeps the tokens in its KV cache; a new request goes to the free slot sharing the longest prefix
 * with its prompt, which is truncated to that prefix (cmf_session_truncate) so only the rest is prefilled.
 * Sampling is per request (its own cmf_sampler with its own seed), so batching never changes a request's tokens
 * beyond the batch kernels' rounding (test_batch bounds it). After a forward the rows are sampled first (when two
 * or more rows draw with a temperature or four or more are greedy, on the forward's own thread pool: a draw over a
 * 32k vocabulary costs ~0.2 ms, 16 of them 16% of a step on one thread; for a backend without a pool, on helper
 * threads; each row through cmf_session_sample, which on CUDA selects on the device, one locked call per row, and
 * finishes top-p / min-p / the draw on the calling thread), then each slot in turn detokenizes and builds its SSE
 * events in a buffer of its own, without the server mutex (on the scheduler thread; emitting on two threads
 * measured slower), and one locked pass hands all slots' events to their connections, whose HTTP threads are
 * signalled after the unlock. Which thread samples a row does not change its token. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "backend/cpu/threadpool.h"
#include "model/model.h"
#include "server/internal.h"
#include "util/error.h"

struct srv_slot {
    cmf_session *sess;
    int32_t *hist; /* tokens in the KV cache, n_hist == cmf_session_pos(sess) */
    int n_hist;
    srv_req *req; /* NULL: free */
    int n_fed;    /* prompt tokens in the KV cache */
    int32_t next; /* sampled, not yet fed */
    int has_next, in_batch;
    int32_t drawn;    /* the token sampled from the last forward's row (sample_rows) */
    cmf_status st;    /* and the sampler's status; err its message when not CMF_OK */
    char err[256];
    cmf_sampler *smp;
    int json_wait; /* JSON mode in a reply that starts inside <think>: the constraint starts after </think> */
    cmf_detok_stream *ds;
    srv_out out;
    /* a streaming request's events of this step, built without mu and handed to req->sse in one locked pass per
     * step (slot_flush), with the step's metrics: tokens accepted (n_new), time to the first token (ttft, < 0: none)
     */
    srv_buf ev;
    int n_new, wake, oom;
    double ttft;
    double handed; /* srv_now() of the last hand-over of events to the connection (0: none yet) */
};

/* Sampling helper threads (n_th of them, possibly 0) and the rows of the current step. The scheduler publishes
 * rows/n_rows under mu and bumps gen; every helper, and the scheduler itself, then takes rows by an atomic index
 * until none is left; the scheduler waits until all n_th helpers reported (pending == 0), so the rows array and the
 * slots' drawn/st are settled (mutex hand-over) before it reads them. */
struct srv_par {
    pthread_t *th;
    int n_th;
    pthread_mutex_t mu;
    pthread_cond_t go, done;
    unsigned gen;
    int quit, pending;
    srv_slot **rows; /* [n_slots] */
    int n_rows;
    atomic_int next;
    cmf_pool *pool; /* the batch's thread pool when the rows are sampled on it (then n_th == 0) */
    double hold_s;  /* stream coalescing (see step()): a stream's events are handed over at most this often... */
    int hold_min;   /* ...while at least this many streams generate; 0: never held */
};

double srv_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void srv_req_free(srv_req *r) {
    if (!r) return;
    free(r->prompt);
    free(r->tool_prefix);
    for (int i = 0; i < r->n_stops; i++) free(r->stops[i]);
    free(r->stops);
    srv_buf_free(&r->sse);
    srv_buf_free(&r->content);
    srv_buf_free(&r->reasoning);
    srv_buf_free(&r->sse_head);
    cJSON_Delete(r->tool_calls);
    pthread_cond_destroy(&r->cv);
    free(r);
}

/* ---- queue (mu held) ----------------------------------------------------------------------------------------- */
static void q_remove(cmf_server *s, srv_req *r) {
    srv_req **pp = &s->q_head, *prev = NULL;
    while (*pp && *pp != r) prev = *pp, pp = &(*pp)->next;
    if (!*pp) return;
    *pp = r->next;
    if (s->q_tail == r) s->q_tail = prev;
    r->next = NULL;
    s->q_len--;
}

int srv_submit(cmf_server *s, srv_req *r) {
    pthread_mutex_lock(&s->mu);
    if (s->quit || s->q_len >= s->o.max_queue) {
        if (!s->quit) s->met.rejected_queue_full++;
        pthread_mutex_unlock(&s->mu);
        return 503;
    }
    r->next = NULL;
    if (s->q_tail)
        s->q_tail->next = r;
    else
        s->q_head = r;
    s->q_tail = r;
    s->q_len++;
    s->met.prompt_tokens += (uint64_t)r->n_prompt;
    pthread_cond_signal(&s->wake);
    pthread_mutex_unlock(&s->mu);
    return 0;
}

void srv_release(cmf_server *s, srv_req *r) {
    if (!r) return;
    pthread_mutex_lock(&s->mu);
    if (!r->done) {
        atomic_store(&r->cancelled, 1);
        int queued = 0;
        for (srv_req *q = s->q_head; q; q = q->next) queued |= q == r;
        if (queued) {
            q_remove(s, r);
            r->done = 1;
            s->met.cancelled++;
        } else {
            pthread_cond_signal(&s->wake);
            while (!r->done) pthread_cond_wait(&r->cv, &s->mu);
        }
    }
    pthread_mutex_unlock(&s->mu);
    srv_req_free(r);
}

/* ---- output of a slot ---------------------------------------------------------------------------------------- */
typedef struct emit_ctx {
    cmf_server *s;
    srv_req *r;
    srv_slot *sl;
} emit_ctx;

/* A stream's piece becomes an SSE event in the slot's ev without the mutex (the HTTP threads take it for every
 * send; building the chunk under it held them off); step() hands all slots' events over under the mutex once per
 * step. A non-stream piece goes to the request's result (its HTTP thread reads it after done). */
static int on_piece(void *ctx, enum srv_event kind, const char *text, size_t n, const char *args) {
    emit_ctx *e = ctx;
    if (e->r->stream) return srv_sse_piece_to(&e->sl->ev, e->r, kind, text, n, args);
    pthread_mutex_lock(&e->s->mu);
    int rc = srv_result_piece(e->r, kind, text, n, args);
    pthread_mutex_unlock(&e->s->mu);
    return rc;
}

/* (mu held) Adds the slot's metrics of this step and, when `events`, moves its events (of this step and any held
 * back, see step()) to its request's sse (the buffers swap when the connection has sent everything, the common
 * case). Returns 1 when events were handed to an empty sse (the connection's thread may be waiting for them: the
 * caller signals req->cv after unlocking; r outlives that, it is freed only after done is set, by this thread), 2
 * when they were appended to events the connection has not taken yet (its thread is not waiting: it takes sse
 * whenever it is not empty, under mu, before it waits), 0 when none were handed over, -1 when out of memory (the
 * events are dropped). */
static int slot_flush(cmf_server *s, srv_slot *sl, int events) {
    srv_req *r = sl->req;
    s->met.generated_tokens += (uint64_t)sl->n_new;
    sl->n_new = 0;
    if (sl->ttft >= 0) srv_hist_add(&s->met.ttft, sl->ttft);
    sl->ttft = -1;
    if (!events || sl->ev.len == 0) return 0;
    int rc = 1;
    if (r->sse.len == 0) {
        srv_buf t = r->sse;
        r->sse = sl->ev;
        sl->ev = t;
    } else {
        rc = srv_buf_add(&r->sse, sl->ev.p, sl->ev.len) ? -1 : 2;
    }
    srv_buf_consume(&sl->ev, sl->ev.len);
    return rc;
}

void srv_finish(cmf_server *s, srv_req *r, const char *reason, int http_status, const char *error) {
    pthread_mutex_lock(&s->mu);
    r->finish_reason = reason;
    if (http_status) {
        r->http_status = http_status;
        snprintf(r->error, sizeof r->error, "%s", error ? error : "internal error");
    }
    if (r->stream) r->kind == SRV_NATIVE ? srv_native_sse_end(r) : srv_sse_end(r);
    double now = srv_now();
    srv_hist_add(&s->met.latency, now - r->t_arrival);
    if (http_status == 504 || r->timed_out)
        s->met.timed_out++;
    else if (atomic_load(&r->cancelled))
        s->met.cancelled++;
    else if (http_status)
        s->met.failed++;
    else if (reason && !strcmp(reason, "length"))
        s->met.finished_length++;
    else if (reason && !strcmp(reason, "tool_calls"))
        s->met.finished_tool_calls++;
    else if (reason)
        s->met.finished_stop++;
    r->done = 1;
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&s->mu);
}

/* Ends the slot's request; `final_flush` emits text still held back (not after a stop string matched). */
static void slot_end(cmf_server *s, srv_slot *sl, const char *reason, int http_status, const char *error) {
    srv_req *r = sl->req;
    emit_ctx e = {s, r, sl};
    char *rest = NULL; /* bytes the streaming decoder still holds (an unfinished character: U+FFFD as HF decodes) */
    if (!http_status && !sl->out.stopped && sl->ds && cmf_detok_stream_flush(sl->ds, &rest) != CMF_OK) {
        http_status = 500;
        error = cmf_last_error();
    }
    if (!http_status && !sl->out.stopped &&
        srv_out_push(&sl->out, rest ? rest : "", rest ? strlen(rest) : 0, 1, on_piece, &e) < 0) {
        http_status = 500;
        error = "out of memory";
    }
    free(rest);
    if (reason && !strcmp(reason, "stop") && sl->out.n_tools > 0) reason = "tool_calls";
    r->stop_hit = sl->out.stop_hit;
    r->n_past = sl->n_hist;
    r->truncated = sl->n_hist + 1 >= s->n_ctx; /* llama-server's rule (native.c) */
    pthread_mutex_lock(&s->mu); /* this step's events before the end's */
    if (slot_flush(s, sl, 1) < 0 && !http_status) {
        http_status = 500;
        error = "out of memory";
    }
    pthread_mutex_unlock(&s->mu);
    srv_finish(s, r, reason, http_status, error);
    srv_out_free(&sl->out);
    cmf_sampler_free(sl->smp);
    cmf_detok_stream_free(sl->ds);
    sl->smp = NULL;
    sl->ds = NULL;
    sl->req = NULL;
    sl->has_next = 0;
    pthread_mutex_lock(&s->mu);
    s->busy--;
    pthread_mutex_unlock(&s->mu);
}

static int lcp(const int32_t *a, int na, const int32_t *b, int nb) {
    int i = 0;
    while (i < na && i < nb && a[i] == b[i]) i++;
    return i;
}

/* Gives request r to the free slot with the longest common prefix (ties: the lowest index). */
/* Whether the slot's session runs skill `skill` (NULL: the backbone). */
static int slot_has_skill(const srv_slot *sl, const char *skill) {
    return !strcmp(cmf_session_skill(sl->sess), skill ? skill : "");
}

static void slot_attach(cmf_server *s, srv_req *r) {
    /* the free slot sharing the longest prefix among those already on the request's skill (a slot on another
     * skill shares none: its KV cache came from other weights), then the one with the shortest history */
    int best = -1, best_l = -1, best_same = 0;
    for (int i = 0; i < s->o.n_slots; i++) {
        srv_slot *sl = &s->slots[i];
        if (sl->req) continue;
        const int same = slot_has_skill(sl, r->skill);
        int l = same ? lcp(sl->hist, sl->n_hist, r->prompt, r->n_prompt) : -1 - sl->n_hist;
        if (best < 0 || same > best_same || (same == best_same && l > best_l)) best = i, best_l = l, best_same = same;
    }
    srv_slot *sl = &s->slots[best];
    const char *err = NULL;
    if (!best_same) { /* switching weights: nothing of its cache is kept */
        best_l = 0;
        if (cmf_session_set_skill(sl->sess, r->skill ? r->skill : "none") != CMF_OK) err = cmf_last_error();
    }
    /* JSON mode and a template that opened <think>: the reasoning is free text and the reply's content, after
     * </think>, the JSON object (as vLLM's structured outputs with a reasoning parser); slot_emit sets it then */
    sl->json_wait = r->json && r->start_in_think;
    int keep = best_l < r->n_prompt ? best_l : r->n_prompt - 1; /* the last prompt token must run: its logits */
    cmf_session_truncate(sl->sess, keep);                     /* keep <= pos: cannot fail */
    sl->n_hist = keep;
    sl->n_fed = keep;
    sl->req = r;
    sl->has_next = 0;
    sl->handed = 0; /* its first events are handed over at once */
    r->id_slot = (int)(sl - s->slots);
    r->t_start = srv_now();
    r->n_cached = keep;
    /* JSON mode from the first token: the reply is the object, so no tag in it is parsed */
    const int json_now = r->json && !r->start_in_think;
    srv_out_init(&sl->out, r->stops, r->n_stops, r->kind == SRV_CHAT && !json_now, r->parse_tools && !json_now,
                 r->start_in_think);
    if (!err && r->tool_prefix && srv_out_force_tool(&sl->out, r->tool_prefix)) err = "out of memory";
    /* the detokenizer starts after the prompt (not emitted), so the first generated word keeps its SentencePiece
     * leading space (" upon" after "Once"), as vLLM and llama-server return it; on llama-server's /completion also
     * after a prompt of special tokens only ("" is [BOS]: " Once upon a"), as its joined pieces: the anchor token
     * (srv_piece_anchor) goes ahead of the prompt, and only the prompt's last 5 ids are kept anyway */
    const int anchored = r->kind == SRV_NATIVE && s->anchor >= 0;
    int32_t prime[6];
    const int n_prime = r->n_prompt < 5 ? r->n_prompt : 5;
    prime[0] = s->anchor;
    memcpy(prime + 1, r->prompt + r->n_prompt - n_prime, (size_t)n_prime * sizeof *prime);
    if (!err && (cmf_sampler_new(s->vocab, &r->sp, &sl->smp) != CMF_OK ||
                 (r->json && !r->start_in_think && cmf_sampler_set_constraint(sl->smp, s->json) != CMF_OK) ||
                 cmf_detok_stream_new(s->tok, 1, &sl->ds) != CMF_OK ||
                 cmf_detok_stream_prime(sl->ds, anchored ? prime : prime + 1, (size_t)(n_prime + anchored)) != CMF_OK))
        err = cmf_last_error();
    pthread_mutex_lock(&s->mu);
    s->met.prompt_tokens_cached += (uint64_t)keep;
    if (r->stream && !err) srv_sse_role(r);
    pthread_mutex_unlock(&s->mu);
    if (err) {
        char msg[256];
        snprintf(msg, sizeof msg, "%s", err);
        slot_end(s, sl, NULL, 500, msg);
    }
}

/* Draws the slot's next token from its session's logits into drawn / st (err: the message, which is thread-local). */
static void sample_one(srv_slot *sl) {
    sl->st = cmf_session_sample(sl->sess, sl->smp, &sl->drawn);
    if (sl->st != CMF_OK) snprintf(sl->err, sizeof sl->err, "%s", cmf_last_error());
}

/* Samples the published rows until none is left (the scheduler and every helper run this at once). */
static void sample_rows(srv_par *p) {
    for (int i; (i = atomic_fetch_add(&p->next, 1)) < p->n_rows;) sample_one(p->rows[i]);
}

static void *par_main(void *arg) {
    srv_par *p = arg;
    unsigned seen = 0;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (p->gen == seen && !p->quit) pthread_cond_wait(&p->go, &p->mu);
        if (p->quit) break;
        seen = p->gen;
        pthread_mutex_unlock(&p->mu);
        sample_rows(p);
        pthread_mutex_lock(&p->mu);
        if (--p->pending == 0) pthread_cond_signal(&p->done);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

/* The batch pool's task: samples the published rows until none is left. */
static void pool_sample(void *ctx, int ith, int nth) {
    (void)ith, (void)nth;
    sample_rows(ctx);
}

/* Samples rows[0..n) (each slot's own sampler on its session's logits) into their drawn/st: when two or more rows
 * draw with a temperature, or SAMPLE_POOL_ROWS or more rows are greedy, on all threads of the batch's pool (its
 * worker still spins from the forward, so this costs no wake-up); without a pool, when two or more draw with a
 * temperature, on the helpers too; else on the scheduler thread (one greedy row, an argmax over the vocabulary of
 * ~5-20 us, is not worth a wake-up). */
#define SAMPLE_POOL_ROWS 4
static void sample_all(srv_par *p, int n) {
    int heavy = 0;
    for (int i = 0; i < n; i++) heavy += p->rows[i]->req->sp.temperature > 0.0f;
    p->n_rows = n;
    atomic_store(&p->next, 0);
    if (p->pool && (heavy >= 2 || n >= SAMPLE_POOL_ROWS)) {
        cmf_pool_run_dyn(p->pool, pool_sample, p); /* rows by an atomic index: a late worker is skipped */
        return;
    }
    if (p->n_th == 0 || heavy < 2) {
        sample_rows(p);
        return;
    }
    pthread_mutex_lock(&p->mu);
    p->pending = p->n_th;
    p->gen++;
    pthread_cond_broadcast(&p->go);
    pthread_mutex_unlock(&p->mu);
    sample_rows(p);
    pthread_mutex_lock(&p->mu);
    while (p->pending > 0) pthread_cond_wait(&p->done, &p->mu);
    pthread_mutex_unlock(&p->mu);
}

/* After sample_all, the slot's drawn token: its events into sl->ev (handed over by step()), decide whether the
 * request goes on. now: the step's clock for the time to the first token. */
static void slot_emit(cmf_server *s, srv_slot *sl, double now) {
    srv_req *r = sl->req;
    const int32_t tok = sl->drawn;
    if (sl->st != CMF_OK) {
        slot_end(s, sl, NULL, 500, sl->err);
        return;
    }
    cmf_sampler_accept(sl->smp, tok);
    r->t_last = srv_now(); /* after the forward and the draw (now is the step's start) */
    if (r->n_gen == 0) sl->ttft = now - r->t_arrival, r->t_first = r->t_last;
    r->n_gen++; /* written by this thread only; read by others after done */
    sl->n_new++;
    for (int i = 0; i < s->n_eos && !r->ignore_eos; i++) /* ignore_eos: detokenized as special, so not shown */
        if (tok == s->eos[i]) {
            slot_end(s, sl, "stop", 0, NULL);
            return;
        }
    char *text = NULL;
    if (cmf_detok_stream_push(sl->ds, tok, &text) != CMF_OK) {
        slot_end(s, sl, NULL, 500, cmf_last_error());
        return;
    }
    emit_ctx e = {s, r, sl};
    int rc = srv_out_push(&sl->out, text, strlen(text), 0, on_piece, &e);
    if (rc == 0 && sl->json_wait && sl->out.state == 0) { /* </think> came: the content is the JSON text */
        /* a </think> written in pieces can end in a token that goes on ("</" "think" ">{"): what follows the tag's
         * '>' in this token (less the whitespace the parser drops after </think>) is already content */
        const char *gt = strrchr(text, '>');
        const char *rest = gt ? gt + 1 + strspn(gt + 1, " \t\r\n") : "";
        sl->json_wait = 0;
        sl->out.parse_think = sl->out.parse_tools = 0; /* the rest is the object: a <think> in it is string text */
        if (cmf_sampler_set_constraint(sl->smp, s->json) != CMF_OK) {
            rc = -1;
        } else if (*rest && cmf_sampler_constraint_feed(sl->smp, rest, strlen(rest)) != CMF_OK) {
            free(text);
            slot_end(s, sl, NULL, 500, "JSON mode: the model wrote text after </think> that cannot start a JSON object");
            return;
        }
    }
    free(text);
    if (rc < 0) {
        slot_end(s, sl, NULL, 500, "out of memory");
    } else if (rc == 1) {
        slot_end(s, sl, "stop", 0, NULL);
    } else if (r->json && r->ignore_eos && cmf_sampler_constraint_done(sl->smp)) {
        slot_end(s, sl, "stop", 0, NULL); /* the object closed: only end tokens could follow, which would not end it */
    } else if (r->n_gen >= r->max_tokens || sl->n_hist >= s->n_ctx) {
        slot_end(s, sl, "length", 0, NULL);
    } else {
        sl->next = tok;
        sl->has_next = 1;
    }
}

/* One step: gather tokens, run one forward, sample. Returns the number of tokens run. */
static int step(cmf_server *s, cmf_session **seqs, int32_t *ids, int *rr) {
    const int max = cmf_batch_max_tokens(s->batch);
    int n = 0;
    double now = srv_now();
    for (int i = 0; i < s->o.n_slots; i++) { /* cancellations and timeouts */
        srv_slot *sl = &s->slots[i];
        sl->in_batch = 0;
        if (!sl->req) continue;
        if (atomic_load(&sl->req->cancelled))
            slot_end(s, sl, NULL, 499, "client disconnected");
        else if (sl->req->deadline > 0 && now > sl->req->deadline) {
            /* As llama-server's t_max_predict_ms (server-context.cpp: STOP_TYPE_LIMIT, which server-task.cpp
             * reports as finish_reason "length"): once generating, the request ends as if max_tokens were reached,
             * with the text so far (HTTP 200; streamed: the usual final chunk). Still reading its prompt: 504. */
            sl->req->timed_out = 1;
            if (sl->n_fed >= sl->req->n_prompt)
                slot_end(s, sl, "length", 0, NULL);
            else
                slot_end(s, sl, NULL, 504, "request timed out while reading its prompt (--timeout)");
        }
    }
    /* one weight set per forward (cmf_batch_run): the step runs the slots on the skill of the first slot from the
     * round-robin start that has work; the others wait for a later step */
    const char *skill = NULL;
    for (int k = 0; k < s->o.n_slots; k++) {
        const srv_slot *sl = &s->slots[(*rr + k) % s->o.n_slots];
        if (sl->req && (sl->has_next || sl->n_fed < sl->req->n_prompt)) {
            skill = cmf_session_skill(sl->sess);
            break;
        }
    }
    if (!skill) skill = "";
    for (int i = 0; i < s->o.n_slots; i++) { /* decode tokens first */
        srv_slot *sl = &s->slots[i];
        if (!sl->req || !sl->has_next || strcmp(cmf_session_skill(sl->sess), skill)) continue;
        seqs[n] = sl->sess;
        ids[n++] = sl->next;
        sl->hist[sl->n_hist++] = sl->next;
        sl->has_next = 0;
        sl->in_batch = 1;
    }
    const int n_decode = n;
    for (int k = 0; k < s->o.n_slots && n < max; k++) { /* then prompt chunks, round-robin */
        srv_slot *sl = &s->slots[(*rr + k) % s->o.n_slots];
        if (!sl->req || sl->n_fed >= sl->req->n_prompt || strcmp(cmf_session_skill(sl->sess), skill)) continue;
        int take = sl->req->n_prompt - sl->n_fed;
        if (take > max - n) take = max - n;
        for (int j = 0; j < take; j++) {
            seqs[n] = sl->sess;
            ids[n++] = sl->req->prompt[sl->n_fed];
            sl->hist[sl->n_hist++] = sl->req->prompt[sl->n_fed++];
        }
        sl->in_batch = 1;
    }
    *rr = (*rr + 1) % s->o.n_slots;
    if (n == 0) return 0;
    const double t0 = srv_now();
    if (cmf_batch_run(s->batch, seqs, ids, n) != CMF_OK) {
        char msg[256];
        snprintf(msg, sizeof msg, "forward failed: %s", cmf_last_error());
        for (int i = 0; i < s->o.n_slots; i++) {
            srv_slot *sl = &s->slots[i];
            if (!sl->in_batch) continue;
            sl->n_hist = 0; /* nothing was appended, but the history no longer says what is cached: start over */
            cmf_session_reset(sl->sess);
            if (sl->req) slot_end(s, sl, NULL, 500, msg);
        }
        return n;
    }
    const double t1 = srv_now();
    srv_par *p = s->par;
    int nr = 0;
    for (int i = 0; i < s->o.n_slots; i++) {
        srv_slot *sl = &s->slots[i];
        if (sl->in_batch && sl->req && sl->n_fed == sl->req->n_prompt) p->rows[nr++] = sl;
    }
    sample_all(p, nr);
    const double t2 = srv_now();
    int streams = 0;
    for (int i = 0; i < nr; i++) streams += p->rows[i]->req->stream;
    for (int i = 0; i < nr; i++) slot_emit(s, p->rows[i], t2);
    /* Stream coalescing: while hold_min or more streams generate, a stream's events are handed to its connection at
     * most every hold_s seconds (its first ones at once; all of them when it ends, in slot_end), the rest kept in
     * sl->ev. Each hand-over wakes the connection's thread, which copies the events out, sends them (a syscall, and
     * a wake-up of the client) and polls: ~30-45 us of CPU per hand-over (bench/server/RESULTS.md run 8), run on
     * the cores that compute the next forward, 16 of them per step at 16 streams. The events and their order do
     * not change, only how many arrive per send. */
    const int hold = p->hold_min > 0 && streams >= p->hold_min;
    pthread_mutex_lock(&s->mu); /* one hand-over of every slot's events */
    for (int i = 0; i < nr; i++) {
        srv_slot *sl = p->rows[i];
        if (!sl->req) continue; /* ended in slot_emit (flushed there) */
        const int f = slot_flush(s, sl, !hold || t2 - sl->handed >= p->hold_s);
        if (f > 0) sl->handed = t2;
        sl->wake = f == 1;
        sl->oom = f < 0;
    }
    const double t3 = srv_now();
    s->met.batch_steps++;
    s->met.batch_tokens += (uint64_t)n;
    if (n == n_decode) {
        s->met.decode_steps++;
        s->met.decode_tokens += (uint64_t)n;
    }
    s->met.t_forward += t1 - t0;
    s->met.t_sample += t2 - t1;
    s->met.t_emit += t3 - t2;
    pthread_mutex_unlock(&s->mu);
    for (int i = 0; i < nr; i++) {
        srv_slot *sl = p->rows[i];
        if (sl->req && sl->wake) pthread_cond_signal(&sl->req->cv);
        if (sl->req && sl->oom) slot_end(s, sl, NULL, 500, "out of memory");
    }
    return n;
}

static void *sched_main(void *arg) {
    cmf_server *s = arg;
    int max = cmf_batch_max_tokens(s->batch), rr = 0;
    cmf_session **seqs = malloc((size_t)max * sizeof *seqs);
    int32_t *ids = malloc((size_t)max * sizeof *ids);
    pthread_mutex_lock(&s->mu);
    while (!s->quit) {
        /* expire queued requests, then fill free slots */
        double now = srv_now();
        for (srv_req *r = s->q_head, *nx; r; r = nx) {
            nx = r->next;
            int gone = atomic_load(&r->cancelled);
            if (gone || (r->deadline > 0 && now > r->deadline)) {
                q_remove(s, r);
                pthread_mutex_unlock(&s->mu);
                if (gone)
                    srv_finish(s, r, NULL, 499, "client disconnected");
                else
                    srv_finish(s, r, NULL, 504, "request timed out in the queue (--timeout)");
                pthread_mutex_lock(&s->mu);
                nx = s->q_head; /* the queue may have changed while unlocked */
            }
        }
        while (s->q_head && s->busy < s->o.n_slots && seqs && ids) {
            srv_req *r = s->q_head;
            q_remove(s, r);
            s->busy++;
            pthread_mutex_unlock(&s->mu);
            slot_attach(s, r);
            pthread_mutex_lock(&s->mu);
        }
        if (s->busy == 0) {
            if (s->q_head && (!seqs || !ids)) { /* cannot run anything: fail the queue */
                srv_req *r = s->q_head;
                q_remove(s, r);
                pthread_mutex_unlock(&s->mu);
                srv_finish(s, r, NULL, 500, "out of memory");
                pthread_mutex_lock(&s->mu);
                continue;
            }
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_nsec += 200 * 1000 * 1000; /* wake now and then to expire queued requests */
            if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
            const double w0 = srv_now();
            pthread_cond_timedwait(&s->wake, &s->mu, &ts);
            s->met.t_idle += srv_now() - w0;
            continue;
        }
        pthread_mutex_unlock(&s->mu);
        step(s, seqs, ids, &rr);
        pthread_mutex_lock(&s->mu);
    }
    /* shutting down: everything still running or queued ends with an error */
    while (s->q_head) {
        srv_req *r = s->q_head;
        q_remove(s, r);
        pthread_mutex_unlock(&s->mu);
        srv_finish(s, r, NULL, 503, "server shutting down");
        pthread_mutex_lock(&s->mu);
    }
    pthread_mutex_unlock(&s->mu);
    for (int i = 0; i < s->o.n_slots; i++)
        if (s->slots[i].req) slot_end(s, &s->slots[i], NULL, 503, "server shutting down");
    free(seqs);
    free(ids);
    return NULL;
}

/* Stream coalescing defaults: from 4 generating streams on, each stream's events are handed to its connection at
 * most every 40 ms (a reader sees tokens in bursts of a few, well under what a person notices; one to three streams
 * get every token at once, as before). bench/server/RESULTS.md run 10 has the A/B. */
enum { HOLD_MS = 40, HOLD_STREAMS = 4 };

cmf_status srv_sched_start(cmf_server *s) {
    s->slots = calloc((size_t)s->o.n_slots, sizeof *s->slots);
    if (!s->slots) return cmf_err(CMF_E_NOMEM, "serve: out of memory for %d slots", s->o.n_slots);
    for (int i = 0; i < s->o.n_slots; i++) {
        srv_slot *sl = &s->slots[i];
        cmf_status st = cmf_session_new(s->m, s->n_ctx, &sl->sess);
        if (st == CMF_OK && s->skill) st = cmf_session_set_skill(sl->sess, s->skill); /* built here, once */
        if (st != CMF_OK) return cmf_err_prefix(st, "serve: slot %d: ", i);
        sl->hist = malloc((size_t)s->n_ctx * sizeof *sl->hist);
        if (!sl->hist) return cmf_err(CMF_E_NOMEM, "serve: slot %d: out of memory", i);
        sl->ttft = -1;
    }
    int bt = s->o.batch_tokens > s->o.n_slots ? s->o.batch_tokens : s->o.n_slots;
    cmf_status st = cmf_batch_new(s->m, bt, s->o.n_slots, &s->batch);
    if (st != CMF_OK) return cmf_err_prefix(st, "serve: batch: ");
    /* sampling rows with a temperature after a forward: on the batch's thread pool when it has one (cpu backend,
     * whose workers still spin from the forward); else on helpers, one fewer than the model's threads (the scheduler
     * is the other), at most 7. Neither when CMF_SERVE_SAMPLE_HELPERS=0 (the A/B switch of bench/server: all on the
     * scheduler thread); a helper that cannot be started only means fewer of them */
    srv_par *p = calloc(1, sizeof *p);
    if (!p || !(p->rows = calloc((size_t)s->o.n_slots, sizeof *p->rows))) {
        free(p);
        return cmf_err(CMF_E_NOMEM, "serve: out of memory for the sampling rows");
    }
    s->par = p;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->go, NULL);
    pthread_cond_init(&p->done, NULL);
    long nt = s->m->n_threads > 0 ? s->m->n_threads : sysconf(_SC_NPROCESSORS_ONLN);
    nt = nt - 1 < 7 ? nt - 1 : 7;
    if (nt > s->o.n_slots - 1) nt = s->o.n_slots - 1;
    /* stream coalescing (step()): CMF_SERVE_HOLD_MS (0: off) and CMF_SERVE_HOLD_STREAMS override the defaults, the
     * A/B switches of bench/server */
    const char *hm = getenv("CMF_SERVE_HOLD_MS"), *hn = getenv("CMF_SERVE_HOLD_STREAMS");
    p->hold_s = (hm && *hm ? atof(hm) : HOLD_MS) / 1000.0;
    p->hold_min = hn && *hn ? atoi(hn) : HOLD_STREAMS;
    if (!(p->hold_s > 0)) p->hold_min = 0;
    const char *env = getenv("CMF_SERVE_SAMPLE_HELPERS");
    if (env && !strcmp(env, "0")) nt = 0;
    else if (s->batch->pool && cmf_pool_size(s->batch->pool) > 1) p->pool = s->batch->pool, nt = 0;
    p->th = nt > 0 ? calloc((size_t)nt, sizeof *p->th) : NULL;
    for (int i = 0; p->th && i < nt; i++) {
        if (pthread_create(&p->th[i], NULL, par_main, p) != 0) break;
        p->n_th++;
    }
    if (pthread_create(&s->sched, NULL, sched_main, s) != 0)
        return cmf_err(CMF_E_NOMEM, "serve: cannot start the scheduler thread");
    s->sched_started = 1;
    return CMF_OK;
}

void srv_sched_stop(cmf_server *s) {
    if (s->sched_started) {
        pthread_mutex_lock(&s->mu);
        s->quit = 1;
        pthread_cond_signal(&s->wake);
        pthread_mutex_unlock(&s->mu);
        pthread_join(s->sched, NULL);
        s->sched_started = 0;
    }
    srv_par *p = s->par;
    if (p) {
        pthread_mutex_lock(&p->mu);
        p->quit = 1;
        pthread_cond_broadcast(&p->go);
        pthread_mutex_unlock(&p->mu);
        for (int i = 0; i < p->n_th; i++) pthread_join(p->th[i], NULL);
        pthread_mutex_destroy(&p->mu);
        pthread_cond_destroy(&p->go);
        pthread_cond_destroy(&p->done);
        free(p->th);
        free(p->rows);
        free(p);
        s->par = NULL;
    }
    if (s->slots) {
        for (int i = 0; i < s->o.n_slots; i++) {
            cmf_session_free(s->slots[i].sess);
            free(s->slots[i].hist);
            srv_buf_free(&s->slots[i].ev);
        }
        free(s->slots);
        s->slots = NULL;
    }
    cmf_batch_free(s->batch);
    s->batch = NULL;
}
