/* metrics.c — the /metrics page in Prometheus' text exposition format 0.0.4 (prometheus.io/docs/instrumenting/
 * exposition_formats): counters end in _total, histograms have cumulative _bucket{le=...} lines, _sum, _count. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "server/internal.h"

/* Upper bounds in seconds; the (SRV_N_BUCKETS+1)-th bucket is +Inf. */
static const double BOUNDS[SRV_N_BUCKETS] = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300};

void srv_hist_add(srv_hist *h, double v) {
    int i = 0;
    while (i < SRV_N_BUCKETS && v > BOUNDS[i]) i++;
    h->counts[i]++;
    h->sum += v;
    h->n++;
}

static void put(srv_buf *b, int *err, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void put(srv_buf *b, int *err, const char *fmt, ...) {
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof line || srv_buf_add(b, line, (size_t)n)) *err = 1;
}

static void counter(srv_buf *b, int *err, const char *name, const char *help, uint64_t v) {
    put(b, err, "# HELP %s %s\n# TYPE %s counter\n%s %llu\n", name, help, name, name, (unsigned long long)v);
}

static void gauge(srv_buf *b, int *err, const char *name, const char *help, long v) {
    put(b, err, "# HELP %s %s\n# TYPE %s gauge\n%s %ld\n", name, help, name, name, v);
}

static void hist(srv_buf *b, int *err, const char *name, const char *help, const srv_hist *h) {
    put(b, err, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
    uint64_t cum = 0;
    for (int i = 0; i < SRV_N_BUCKETS; i++) {
        cum += h->counts[i];
        put(b, err, "%s_bucket{le=\"%g\"} %llu\n", name, BOUNDS[i], (unsigned long long)cum);
    }
    cum += h->counts[SRV_N_BUCKETS];
    put(b, err, "%s_bucket{le=\"+Inf\"} %llu\n%s_sum %.6f\n%s_count %llu\n", name, (unsigned long long)cum, name,
        h->sum, name, (unsigned long long)h->n);
}

char *srv_metrics_text(const srv_metrics *m, const char *const *route_names, int n_routes, int queue_depth,
                       int slots_busy, int n_slots) {
    srv_buf b = {0};
    int err = 0;
    put(&b, &err, "# HELP cmf_requests_total HTTP requests received, by route.\n# TYPE cmf_requests_total counter\n");
    for (int i = 0; i < n_routes && i < 12; i++)
        put(&b, &err, "cmf_requests_total{route=\"%s\"} %llu\n", route_names[i], (unsigned long long)m->requests[i]);
    put(&b, &err, "# HELP cmf_responses_total HTTP responses sent, by status class.\n"
                  "# TYPE cmf_responses_total counter\n"
                  "cmf_responses_total{class=\"2xx\"} %llu\ncmf_responses_total{class=\"4xx\"} %llu\n"
                  "cmf_responses_total{class=\"5xx\"} %llu\n",
        (unsigned long long)m->responses_2xx, (unsigned long long)m->responses_4xx,
        (unsigned long long)m->responses_5xx);
    counter(&b, &err, "cmf_prompt_tokens_total", "Prompt tokens of generation requests.", m->prompt_tokens);
    counter(&b, &err, "cmf_prompt_tokens_cached_total", "Prompt tokens whose KV cache was reused from a slot.",
            m->prompt_tokens_cached);
    counter(&b, &err, "cmf_generation_tokens_total", "Tokens generated.", m->generated_tokens);
    put(&b, &err, "# HELP cmf_requests_finished_total Generation requests finished, by reason.\n"
                  "# TYPE cmf_requests_finished_total counter\n"
                  "cmf_requests_finished_total{reason=\"stop\"} %llu\n"
                  "cmf_requests_finished_total{reason=\"length\"} %llu\n"
                  "cmf_requests_finished_total{reason=\"tool_calls\"} %llu\n"
                  "cmf_requests_finished_total{reason=\"cancelled\"} %llu\n"
                  "cmf_requests_finished_total{reason=\"timeout\"} %llu\n"
                  "cmf_requests_finished_total{reason=\"error\"} %llu\n",
        (unsigned long long)m->finished_stop, (unsigned long long)m->finished_length,
        (unsigned long long)m->finished_tool_calls, (unsigned long long)m->cancelled,
        (unsigned long long)m->timed_out, (unsigned long long)m->failed);
    counter(&b, &err, "cmf_requests_rejected_total", "Requests refused because the queue was full.",
            m->rejected_queue_full);
    counter(&b, &err, "cmf_batch_steps_total", "Forward passes (cmf_batch_run calls).", m->batch_steps);
    counter(&b, &err, "cmf_batch_tokens_total", "Tokens run through forward passes (prefill + decode).",
            m->batch_tokens);
    counter(&b, &err, "cmf_decode_steps_total", "Forward passes of decode tokens only (no prompt tokens).",
            m->decode_steps);
    counter(&b, &err, "cmf_decode_step_tokens_total", "Tokens of those decode-only passes.", m->decode_tokens);
    put(&b, &err, "# HELP cmf_scheduler_seconds_total Scheduler thread time, by phase: forward (cmf_batch_run), "
                  "sample (sampling the rows of a forward), emit (detokenizing, queueing events, ending requests), "
                  "idle (no slot busy).\n"
                  "# TYPE cmf_scheduler_seconds_total counter\n"
                  "cmf_scheduler_seconds_total{phase=\"forward\"} %.6f\n"
                  "cmf_scheduler_seconds_total{phase=\"sample\"} %.6f\n"
                  "cmf_scheduler_seconds_total{phase=\"emit\"} %.6f\n"
                  "cmf_scheduler_seconds_total{phase=\"idle\"} %.6f\n",
        m->t_forward, m->t_sample, m->t_emit, m->t_idle);
    gauge(&b, &err, "cmf_queue_depth", "Requests waiting for a slot.", queue_depth);
    gauge(&b, &err, "cmf_slots_busy", "Slots running a request.", slots_busy);
    gauge(&b, &err, "cmf_slots_total", "Slots (--parallel).", n_slots);
    hist(&b, &err, "cmf_request_latency_seconds", "Time from arrival to the end of a generation request.",
         &m->latency);
    hist(&b, &err, "cmf_time_to_first_token_seconds", "Time from arrival to the first generated token.", &m->ttft);
    if (err) {
        srv_buf_free(&b);
        return NULL;
    }
    return b.p;
}
