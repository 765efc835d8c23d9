/* Unit tests of src/server/output.c: the same generated text cut into pieces at every byte position (as tokens
 * would cut it) gives the same events: stop strings never leak (not even a prefix), <think> becomes reasoning,
 * <tool_call>{json}</tool_call> becomes a tool call with its arguments as JSON text, invalid blocks stay content. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/internal.h"
#include "testutil.h"

typedef struct rec {
    srv_buf content, reasoning, tools; /* tools: "name(args);" per call */
    int n_content_events;
} rec;

static int on_ev(void *ctx, enum srv_event kind, const char *text, size_t n, const char *args) {
    rec *r = ctx;
    if (kind == SRV_EV_CONTENT) {
        r->n_content_events++;
        return srv_buf_add(&r->content, text, n);
    }
    if (kind == SRV_EV_REASONING) return srv_buf_add(&r->reasoning, text, n);
    srv_buf_add(&r->tools, text, n);
    srv_buf_adds(&r->tools, "(");
    srv_buf_adds(&r->tools, args);
    return srv_buf_adds(&r->tools, ");");
}

static const char *s_or(const srv_buf *b) { return b->p ? b->p : ""; }

/* Feeds `text` cut at cut1 and cut2 (two cuts: three pieces), then the final flush. */
static int run(const char *text, size_t cut1, size_t cut2, char **stops, int n_stops, int think, int tools,
               rec *r, srv_buf *sent_before_stop) {
    srv_out o;
    srv_out_init(&o, stops, n_stops, think, tools, 0);
    memset(r, 0, sizeof *r);
    size_t n = strlen(text), cuts[4] = {0, cut1, cut2, n};
    int stopped = 0;
    for (int i = 0; i < 3 && !stopped; i++) {
        stopped = srv_out_push(&o, text + cuts[i], cuts[i + 1] - cuts[i], 0, on_ev, r);
        if (sent_before_stop && stopped == 0) { /* everything sent so far must be a prefix of the answer */
            srv_buf_free(sent_before_stop);
            srv_buf_adds(sent_before_stop, s_or(&r->content));
        }
    }
    if (!stopped) stopped = srv_out_push(&o, "", 0, 1, on_ev, r);
    srv_out_free(&o);
    return stopped;
}

static void free_rec(rec *r) {
    srv_buf_free(&r->content);
    srv_buf_free(&r->reasoning);
    srv_buf_free(&r->tools);
}

int main(void) {
    /* stop strings across pieces */
    {
        const char *text = "Hello wor<ld> and END of story ENDING";
        char *stops[] = {"END", "<ld>x"};
        for (size_t a = 0; a <= strlen(text); a++)
            for (size_t b = a; b <= strlen(text); b += 3) {
                rec r;
                int st = run(text, a, b, stops, 2, 0, 0, &r, NULL);
                CHECK_MSG(st == 1, "cut %zu/%zu", a, b);
                CHECK_MSG(!strcmp(s_or(&r.content), "Hello wor<ld> and "), "cut %zu/%zu: '%s'", a, b, s_or(&r.content));
                free_rec(&r);
            }
        /* no stop: everything comes out, held-back prefixes included, at the final flush */
        const char *t2 = "abc EN";
        for (size_t a = 0; a <= strlen(t2); a++) {
            rec r;
            CHECK(run(t2, a, a, stops, 2, 0, 0, &r, NULL) == 0);
            CHECK_MSG(!strcmp(s_or(&r.content), t2), "'%s'", s_or(&r.content));
            free_rec(&r);
        }
        /* what was sent before the final piece never contains a prefix of the stop string beyond the answer */
        const char *t3 = "xyz ENDQ";
        for (size_t a = 0; a <= strlen(t3); a++) {
            rec r;
            srv_buf sent = {0};
            run(t3, a, a, stops, 2, 0, 0, &r, &sent);
            CHECK_MSG(strncmp(s_or(&sent), "xyz ", strlen(s_or(&sent))) == 0 && strlen(s_or(&sent)) <= 4,
                      "cut %zu sent '%s'", a, s_or(&sent));
            srv_buf_free(&sent);
            free_rec(&r);
        }
    }
    /* reasoning + tool calls, cut anywhere */
    {
        const char *text = "<think>\nweigh it</think>\n\nLet me call.\n<tool_call>\n{\"name\": \"get_weather\", "
                           "\"arguments\": {\"city\": \"Paris\", \"days\": 2}}\n</tool_call>\n<tool_call>\n"
                           "{\"name\": \"f\", \"arguments\": \"{}\"}\n</tool_call>";
        size_t n = strlen(text);
        for (size_t a = 0; a <= n; a++)
            for (size_t b = a; b <= n; b += 7) {
                rec r;
                CHECK(run(text, a, b, NULL, 0, 1, 1, &r, NULL) == 0);
                CHECK_MSG(!strcmp(s_or(&r.reasoning), "\nweigh it"), "cut %zu/%zu: '%s'", a, b, s_or(&r.reasoning));
                CHECK_MSG(!strcmp(s_or(&r.content), "Let me call."), "cut %zu/%zu: '%s'", a, b, s_or(&r.content));
                CHECK_MSG(!strcmp(s_or(&r.tools), "get_weather({\"city\":\"Paris\",\"days\":2});f({});"),
                          "cut %zu/%zu: '%s'", a, b, s_or(&r.tools));
                free_rec(&r);
            }
        /* tools off: the tags are plain content */
        rec r;
        run("<tool_call>{\"name\":\"f\"}</tool_call>", 3, 9, NULL, 0, 1, 0, &r, NULL);
        CHECK(!strcmp(s_or(&r.content), "<tool_call>{\"name\":\"f\"}</tool_call>"));
        CHECK(r.tools.len == 0);
        free_rec(&r);
        /* an invalid block stays content, verbatim */
        run("a<tool_call>not json</tool_call>", 5, 20, NULL, 0, 1, 1, &r, NULL);
        CHECK_MSG(!strcmp(s_or(&r.content), "a<tool_call>not json</tool_call>"), "'%s'", s_or(&r.content));
        CHECK(r.tools.len == 0);
        free_rec(&r);
        /* an unterminated think block is reasoning to the end */
        run("<think>still thinking", 4, 12, NULL, 0, 1, 1, &r, NULL);
        CHECK(!strcmp(s_or(&r.reasoning), "still thinking"));
        CHECK(r.content.len == 0);
        free_rec(&r);
    }
    /* a stop string inside reasoning ends everything there */
    {
        char *stops[] = {"STOP"};
        rec r;
        CHECK(run("<think>abSTOPcd</think>x", 9, 11, stops, 1, 1, 0, &r, NULL) == 1);
        CHECK(!strcmp(s_or(&r.reasoning), "ab"));
        CHECK(r.content.len == 0);
        free_rec(&r);
    }
    /* multi-byte characters pass whole: cut points only at stop/tag starts */
    {
        const char *text = "h\xc3\xa9llo \xe4\xb8\x96\xe7\x95\x8c<think>x";
        char *stops[] = {"\xe4\xb8\x96\xe7\x95\x8c<"};
        rec r;
        CHECK(run(text, 3, 9, stops, 1, 1, 1, &r, NULL) == 1);
        CHECK(!strcmp(s_or(&r.content), "h\xc3\xa9llo "));
        free_rec(&r);
    }
    /* forced tool calls (tool_choice): the output starts inside a block whose JSON began in the prompt */
    {
        static const struct {
            const char *prefix, *gen, *want;
        } F[] = {
            {"{\"name\": \"get_weather\", \"arguments\": ", "{\"city\": \"Paris\"}}\n</tool_call>",
             "get_weather({\"city\":\"Paris\"});"},
            {"{\"name\": \"", "f\", \"arguments\": {\"x\": [1, 2]}}</tool_call>\nafter", "f({\"x\":[1,2]});"},
        };
        for (int k = 0; k < 2; k++) {
            size_t n = strlen(F[k].gen);
            for (size_t a = 0; a <= n; a++) {
                srv_out o;
                rec r;
                memset(&r, 0, sizeof r);
                srv_out_init(&o, NULL, 0, 1, 0, 0);
                CHECK(srv_out_force_tool(&o, F[k].prefix) == 0);
                CHECK(srv_out_push(&o, F[k].gen, a, 0, on_ev, &r) == 0);
                CHECK(srv_out_push(&o, F[k].gen + a, n - a, 0, on_ev, &r) == 0);
                CHECK(srv_out_push(&o, "", 0, 1, on_ev, &r) == 0);
                CHECK_MSG(!strcmp(s_or(&r.tools), F[k].want), "cut %zu: '%s'", a, s_or(&r.tools));
                CHECK_MSG(!strcmp(s_or(&r.content), k ? "after" : ""), "cut %zu: content '%s'", a, s_or(&r.content));
                CHECK(o.n_tools == 1);
                srv_out_free(&o);
                free_rec(&r);
            }
        }
    }
    CHECK(srv_partial_suffix("abcEN", 5, "END") == 2);
    CHECK(srv_partial_suffix("abcEND", 6, "END") == 0); /* a whole match is not a partial one */
    CHECK(srv_partial_suffix("", 0, "END") == 0);
    CMF_TEST_END();
}
