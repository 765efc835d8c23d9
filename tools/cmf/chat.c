/* chat.c — `cmf chat model.cmf`: an interactive conversation. Each turn renders the whole conversation with the
 * model's chat template (cmf_chat_render, include/cmf.h) and tokenizes it; the tokenizer's special tokens
 * (post-processor, e.g. BOS) are added only when the text does not already start with the BOS token string, so the
 * prompt holds exactly one BOS whether the template writes it (llama3) or not (the ChatML fallback); files
 * without a BOS id get no special tokens (the template writes them all, as transformers'
 * apply_chat_template(tokenize=True) does). It keeps the longest common prefix with the tokens already in the KV
 * cache (cmf_session_truncate), prefills only the new suffix, then streams the reply through the sampler
 * (src/sample) until an eos id, -n tokens or Ctrl-C (SIGINT). The reply joins the conversation as an assistant
 * message. Also `-p MESSAGE` (one turn, then exit) and `--template-only` (print the rendered prompt).
 * Line editing: when stdin and stderr are terminals and the CLI was built with libedit (CMF_HAVE_LIBEDIT,
 * CMakeLists.txt), the prompt is libedit's el_gets (emacs keys, history of this session on up/down, ~/.editrc
 * honoured); otherwise, and always for piped input, plain getline(). */
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>
#ifdef CMF_HAVE_LIBEDIT
#include <histedit.h>
#endif

#include "cli.h"
#include "sample/sample.h"
#include "template/template.h"

#define CHAT_DEFAULT_CTX_CAP 4096

static volatile sig_atomic_t g_sigint; /* set by SIGINT (interactive loop only) */

static const char *USAGE =
    "usage: cmf chat MODEL.cmf [options]\n"
    "\n"
    "Reads one user message per line on stdin and streams the model's replies to stdout. A line ending with '\\'\n"
    "continues on the next line (the backslash becomes a newline of the message; at the end of input the message\n"
    "is sent). Commands (on a line of their own): /reset (forget the conversation), /system TEXT (set the system\n"
    "message and restart; '/system' alone removes it), /exit (or end of input). Another line starting with '/' is\n"
    "not sent (a warning lists the commands); start it with '//' to send a message beginning with '/'. Ctrl-C\n"
    "stops the reply being generated (the part so far stays in the conversation); at the prompt a second Ctrl-C in\n"
    "a row quits. At a terminal the line can be edited (emacs keys; up/down walk this session's lines) when cmf was\n"
    "built with libedit.\n"
    "\n"
    "  -p, --prompt TEXT        answer this one message and exit (no stdin)\n"
    "  -s, --system TEXT        a system message at the start of the conversation (\"\": none)\n"
    "  --no-think               enable_thinking=false for the template (Qwen3: skip the thinking block)\n"
    "  --template-only          print the rendered prompt of [system,] -p's message and exit (no model run)\n"
    "  --show-ids               before each reply print the prompt's ids on stderr: \"ids: 1,2,3\"\n"
    "  --chat-template-file F   use the Jinja template in F instead of the model's\n"
    "  -n, --n-predict N        at most N tokens per reply (default 512; -1: no limit, until the context\n"
    "                           is full); stops earlier at any eos id\n"
    "  --ignore-eos             an eos id does not end the reply (its text is not shown), as serve's\n"
    "                           ignore_eos and llama-cli's --ignore-eos: the reply runs to -n or a full context\n"
    "  --json                   JSON mode for every reply (as serve's response_format json_object): only\n"
    "                           tokens that continue one JSON object are drawn; the reply ends when it closes;\n"
    "                           a template that leaves <think> open gets free reasoning, then the JSON after </think>\n"
    "  -c, --ctx-size N         context (KV cache) size; default the trained context capped at 4096; 0: the\n"
    "                           whole trained context (as llama.cpp)\n"
    "  -t, --threads N          worker threads (default 0: all online CPUs)\n"
    "%s%s"
    "\n"
    "Without a template in the file the conversation is rendered as ChatML. After each reply one line goes to\n"
    "stderr: turn K: prompt N tokens (R reused from the cache) | reply M tokens, Y tok/s\n";

typedef struct chat_opts {
    const char *model, *prompt, *system, *template_file;
    long n_predict, n_ctx, n_threads;
    int no_think, template_only, show_ids, ignore_eos, json;
    cli_sampling smp;
    cli_model_opts mo;
} chat_opts;

static int parse(int argc, char **argv, chat_opts *o) {
    cli_args a;
    cli_args_init(&a, "chat", argc, argv);
    memset(o, 0, sizeof *o);
    o->n_predict = 512;
    o->n_ctx = -1;
    cli_sampling_defaults(&o->smp);
    int rc = 0;
    while (cli_args_next(&a)) {
        if (cli_is(&a, "--help", "-h")) {
            printf(USAGE, CLI_SAMPLING_USAGE, CLI_MODEL_USAGE);
            return -1;
        } else if (cli_is(&a, "--prompt", "-p")) {
            rc = cli_value(&a, &o->prompt);
        } else if (cli_is(&a, "--system", "-s")) {
            rc = cli_value(&a, &o->system);
        } else if (cli_is(&a, "--chat-template-file", NULL)) {
            rc = cli_value(&a, &o->template_file);
        } else if (cli_is(&a, "--no-think", NULL)) {
            o->no_think = 1;
        } else if (cli_is(&a, "--ignore-eos", NULL)) {
            o->ignore_eos = 1;
        } else if (cli_is(&a, "--json", NULL)) {
            o->json = 1;
        } else if (cli_is(&a, "--template-only", NULL)) {
            o->template_only = 1;
        } else if (cli_is(&a, "--show-ids", NULL)) {
            o->show_ids = 1;
        } else if (cli_is(&a, "--n-predict", "-n")) {
            rc = cli_int(&a, -1, INT_MAX, &o->n_predict);
            if (!rc && o->n_predict < 0) o->n_predict = INT_MAX; /* -1: until eos or a full context (llama.cpp) */
        } else if (cli_is(&a, "--ctx-size", "-c")) {
            rc = cli_int(&a, 0, INT_MAX, &o->n_ctx);
        } else if (cli_is(&a, "--threads", "-t")) {
            rc = cli_int(&a, 0, 4096, &o->n_threads);
        } else if (cli_sampling_opt(&a, &o->smp, &rc) || cli_model_opt(&a, &o->mo, &rc)) {
            /* handled */
        } else if (!cli_is_flag(&a) && !o->model) {
            o->model = a.arg;
        } else {
            return cli_unknown(&a);
        }
        if (rc) return rc;
    }
    if (!o->model) return cli_usage_error("chat", "missing MODEL.cmf (see cmf chat --help)");
    if (o->template_only && !o->prompt) return cli_usage_error("chat", "--template-only needs -p MESSAGE");
    cli_sampling_finish(&o->smp);
    return 0;
}

/* Appends {"role": role, "content": content} to the messages array; returns 0 or CLI_FAIL (out of memory). */
static int add_message(cJSON *msgs, const char *role, const char *content) {
    cJSON *m = cJSON_CreateObject();
    if (!m || !cJSON_AddStringToObject(m, "role", role) || !cJSON_AddStringToObject(m, "content", content) ||
        !cJSON_AddItemToArray(msgs, m)) {
        cJSON_Delete(m);
        return cli_fail("chat", "out of memory");
    }
    return 0;
}

int cli_chat_render(const char *cmd, const cmf_model *m, const char *template_src, const cJSON *msgs,
                    int enable_thinking, char **text) {
    *text = NULL;
    char *json = cJSON_PrintUnformatted(msgs);
    if (!json) return cli_fail(cmd, "out of memory");
    cmf_chat_params p = cmf_chat_default_params();
    p.messages_json = json;
    p.template_src = template_src;
    p.enable_thinking = enable_thinking;
    cmf_status st = cmf_chat_render(m, &p, text, NULL);
    free(json);
    return st ? cli_lib_error(cmd, st) : 0;
}

static int is_eos(const int32_t *eos, int n_eos, int32_t id) {
    for (int i = 0; i < n_eos; i++)
        if (eos[i] == id) return 1;
    return 0;
}

/* The state of a conversation: the messages, the session, and the ids its KV cache holds. */
typedef struct chat_state {
    const chat_opts *o;
    cmf_model *m;
    const cmf_tokenizer *tok;
    const char *template_src;
    char *system; /* the system message (malloc'd; -s, then /system), or NULL */
    cJSON *msgs;
    cmf_session *s;
    cmf_sampler *smp;
    cmf_constraint *json; /* --json: the constraint each reply starts afresh, or NULL */
    int32_t *cache; /* the ids at positions 0..pos-1 of the session */
    int n_ctx, turn;
} chat_state;

/* One turn: the conversation (ending with the user's message) -> a streamed reply appended as a message.
 * Returns 0, CLI_FAIL for errors that end the program, or -1 for errors of this turn only (message printed). */
static int run_turn(chat_state *c) {
    const chat_opts *o = c->o;
    char *text = NULL, *reply = NULL;
    int32_t *ids = NULL;
    size_t n_ids = 0, reply_len = 0;
    cmf_detok_stream *ds = NULL;
    int rc = cli_chat_render("chat", c->m, c->template_src, c->msgs, o->no_think ? 0 : -1, &text);
    if (rc) return -1;
    const int in_think = cmf_chat_ends_in_think(text); /* --json: the JSON object starts after </think> */
    /* exactly one BOS: the post-processor's special tokens only when the template did not write the BOS itself */
    cmf_status st = cmf_chat_tokenize(c->m, text, strlen(text), &ids, &n_ids);
    free(text);
    if (st) {
        rc = cli_lib_error("chat", st);
        return -1;
    }
    if (o->show_ids) {
        fputs("ids: ", stderr);
        for (size_t i = 0; i < n_ids; i++) fprintf(stderr, i ? ",%d" : "%d", (int)ids[i]);
        fputc('\n', stderr);
    }
    if (n_ids == 0 || (long)n_ids >= c->n_ctx) {
        free(ids);
        cli_fail("chat", "the conversation has %zu tokens; the context holds %d (see -c, or /reset)", n_ids, c->n_ctx);
        return -1;
    }
    /* reuse the longest common prefix of the cache; at least one token is prefilled (its logits start the reply) */
    int pos = cmf_session_pos(c->s), keep = 0;
    while (keep < pos && (size_t)keep < n_ids && c->cache[keep] == ids[keep]) keep++;
    if ((size_t)keep == n_ids) keep--;
    int n_new = (int)n_ids - keep;
    if ((st = cmf_session_truncate(c->s, keep)) != CMF_OK) {
        free(ids);
        return cli_lib_error("chat", st);
    }
    double t0 = cli_now();
    if ((st = cmf_session_prefill(c->s, ids + keep, n_new, NULL)) != CMF_OK) {
        free(ids);
        cmf_session_reset(c->s);
        return cli_lib_error("chat", st);
    }
    memcpy(c->cache + keep, ids + keep, (size_t)n_new * sizeof *ids);
    /* the prompt's tokens count for the penalties, outside JSON mode; the reply's JSON text starts after them */
    cmf_sampler_set_constraint(c->smp, NULL);
    for (int i = keep; i < (int)n_ids; i++) cmf_sampler_accept(c->smp, ids[i]);
    free(ids);
    cli_json_wait jw = {0};
    if (c->json && (rc = cli_json_begin("chat", c->tok, c->smp, c->json, in_think, &jw))) return rc;
    (void)cmf_session_logits(c->s); /* waits for a device (CUDA keeps them there): the prompt's time is whole */
    double t1 = cli_now();

    int n_eos = 0, n_gen = 0, full = 0, stopped = 0;
    const int32_t *eos = cmf_model_eos_ids(c->m, &n_eos);
    if ((st = cmf_detok_stream_new(c->tok, 1, &ds)) != CMF_OK) {
        cli_json_wait_end(&jw);
        return cli_lib_error("chat", st);
    }
    while (n_gen < o->n_predict) {
        if (g_sigint) { /* Ctrl-C: stop this reply, keep the conversation */
            g_sigint = 0;
            stopped = 1;
            break;
        }
        int32_t next;
        if ((st = cmf_session_sample(c->s, c->smp, &next)) != CMF_OK) {
            rc = cli_lib_error("chat", st);
            break;
        }
        if (!o->ignore_eos && is_eos(eos, n_eos, next)) break; /* ignored: the stream shows no special text */
        cmf_sampler_accept(c->smp, next);
        if (jw.waiting && cli_json_token("chat", c->smp, c->json, next, &jw)) { /* message printed */
            rc = -1; /* this reply fails; the conversation goes on */
            break;
        }
        char *piece = NULL;
        if ((st = cmf_detok_stream_push(ds, next, &piece)) != CMF_OK) {
            rc = cli_lib_error("chat", st);
            break;
        }
        fputs(piece, stdout);
        fflush(stdout);
        size_t pl = strlen(piece);
        char *r = realloc(reply, reply_len + pl + 1);
        if (!r) {
            free(piece);
            rc = cli_fail("chat", "out of memory");
            break;
        }
        reply = r;
        memcpy(reply + reply_len, piece, pl + 1);
        reply_len += pl;
        free(piece);
        n_gen++;
        if (n_gen >= o->n_predict) break;
        if (c->json && o->ignore_eos && cmf_sampler_constraint_done(c->smp)) break; /* only (ignored) eos ids fit */
        int p = cmf_session_pos(c->s);
        if (p >= c->n_ctx) {
            full = 1;
            break;
        }
        if ((st = cmf_session_decode(c->s, next)) != CMF_OK) {
            rc = cli_lib_error("chat", st);
            break;
        }
        c->cache[p] = next;
    }
    double t2 = cli_now();
    char *rest = NULL; /* a character that never completed: its bytes as HF's lossy decode gives them */
    if (!rc && cmf_detok_stream_flush(ds, &rest) == CMF_OK && *rest) {
        char *r = realloc(reply, reply_len + strlen(rest) + 1);
        if (r) {
            fputs(rest, stdout);
            reply = r;
            memcpy(reply + reply_len, rest, strlen(rest) + 1);
            reply_len += strlen(rest);
        }
    }
    free(rest);
    cmf_detok_stream_free(ds);
    const int thinking = jw.waiting; /* --json: the reply never left its <think> block */
    cli_json_wait_end(&jw);
    putchar('\n');
    fflush(stdout);
    if (full) cli_warn("chat", "the context of %d tokens is full; the reply was cut (try /reset)", c->n_ctx);
    if (c->json && !rc && thinking)
        cli_warn("chat", "--json: the reply stopped inside its <think> block, before its JSON object");
    else if (c->json && !rc && !cmf_sampler_constraint_done(c->smp))
        cli_warn("chat", "--json: the reply stopped before its JSON object was closed; it is incomplete");
    if (stopped) fprintf(stderr, "[interrupted: reply stopped after %d token%s]\n", n_gen, n_gen == 1 ? "" : "s");
    c->turn++;
    double td = t2 - t1;
    fprintf(stderr, "turn %d: prompt %zu token%s (%d reused from the cache), %.1f tok/s | reply %d token%s, %.1f tok/s\n",
            c->turn, n_ids, n_ids == 1 ? "" : "s", keep, t1 > t0 ? n_new / (t1 - t0) : 0.0, n_gen,
            n_gen == 1 ? "" : "s", td > 0 ? n_gen / td : 0.0);
    if (!rc) rc = add_message(c->msgs, "assistant", reply ? reply : "");
    free(reply);
    return rc;
}

/* Starts (or restarts) the conversation: only the system message, if any. */
static int reset_messages(chat_state *c) {
    cJSON_Delete(c->msgs);
    if (!(c->msgs = cJSON_CreateArray())) return cli_fail("chat", "out of memory");
    return c->system ? add_message(c->msgs, "system", c->system) : 0;
}

/* Where the prompt's lines come from: stdin through getline(), or (a terminal, libedit built in) libedit. */
typedef struct line_reader {
    int tty;  /* stdin is a terminal: print prompts */
    int cont; /* the next line continues a message ('\\' at the end of the last one) */
    int nul;  /* a line of the message just read held a NUL byte (set by read_line, cleared by read_message) */
#ifdef CMF_HAVE_LIBEDIT
    EditLine *el; /* NULL: getline() */
    History *hist;
#endif
} line_reader;

#ifdef CMF_HAVE_LIBEDIT
static const char *edit_prompt(EditLine *el) {
    line_reader *lr = NULL;
    el_get(el, EL_CLIENTDATA, &lr);
    return lr && lr->cont ? ". " : "> ";
}
#endif

/* Sets up the reader: libedit only when stdin and stderr are terminals (and it initializes); prompts and the
 * edited line go to stderr, so stdout holds only replies (with stderr redirected, the terminal's own echo is
 * kept: plain lines). */
static void reader_open(line_reader *lr) {
    memset(lr, 0, sizeof *lr);
    lr->tty = isatty(0);
#ifdef CMF_HAVE_LIBEDIT
    if (!lr->tty || !isatty(2)) return;
    HistEvent ev;
    if (!(lr->el = el_init("cmf", stdin, stderr, stderr)) || !(lr->hist = history_init())) {
        if (lr->el) el_end(lr->el);
        lr->el = NULL;
        return;
    }
    history(lr->hist, &ev, H_SETSIZE, 1000);
    history(lr->hist, &ev, H_SETUNIQUE, 1);
    el_set(lr->el, EL_CLIENTDATA, lr);
    el_set(lr->el, EL_PROMPT, edit_prompt);
    el_set(lr->el, EL_EDITOR, "emacs");
    el_set(lr->el, EL_SIGNAL, 1); /* the terminal is restored around signals; ours still runs (Ctrl-C) */
    el_set(lr->el, EL_HIST, history, lr->hist);
    el_source(lr->el, NULL); /* the user's ~/.editrc, if any */
#endif
}

static void reader_close(line_reader *lr) {
#ifdef CMF_HAVE_LIBEDIT
    if (lr->hist) history_end(lr->hist);
    if (lr->el) el_end(lr->el);
    lr->el = NULL;
    lr->hist = NULL;
#else
    (void)lr;
#endif
}

/* Reads the next line without its newline into *line (malloc'd). Returns 1, 0 at end of input, or -1 when a signal
 * (Ctrl-C) interrupted the read (what was typed is dropped). */
static int read_line(line_reader *lr, char **line) {
    *line = NULL;
    errno = 0;
    ssize_t n;
#ifdef CMF_HAVE_LIBEDIT
    if (lr->el) {
        int count = 0;
        const char *l = el_gets(lr->el, &count);
        if (!l || count <= 0) return count < 0 && errno == EINTR ? -1 : 0;
        if (!(*line = strdup(l))) return 0;
        n = (ssize_t)strlen(*line);
        while (n > 0 && ((*line)[n - 1] == '\n' || (*line)[n - 1] == '\r')) (*line)[--n] = '\0';
        if (n > 0) {
            HistEvent ev;
            history(lr->hist, &ev, H_ENTER, *line);
        }
        return 1;
    }
#endif
    if (lr->tty) {
        fputs(lr->cont ? ". " : "> ", stderr);
        fflush(stderr);
    }
    size_t cap = 0;
    n = getline(line, &cap, stdin);
    if (n < 0) {
        int intr = errno == EINTR;
        free(*line);
        *line = NULL;
        if (intr) clearerr(stdin);
        return intr ? -1 : 0;
    }
    if (memchr(*line, '\0', (size_t)n)) lr->nul = 1; /* the text after it would be lost: the message is refused */
    while (n > 0 && ((*line)[n - 1] == '\n' || (*line)[n - 1] == '\r')) (*line)[--n] = '\0';
    return 1;
}

/* Reads one message: lines ending with '\\' continue (the backslash becomes "\n"); at the end of input such a
 * message ends there (the last backslash is dropped). Returns as read_line. */
static int read_message(line_reader *lr, char **msg) {
    char *acc = NULL;
    size_t len = 0;
    lr->cont = 0;
    lr->nul = 0;
    for (;;) {
        char *line = NULL;
        int r = read_line(lr, &line);
        if (r == 0 && acc) { /* end of input after a '\\' line: the message is sent without that newline */
            acc[len - 1] = '\0';
            break;
        }
        if (r <= 0) { /* an interrupted message (Ctrl-C) is dropped */
            free(acc);
            *msg = NULL;
            return r;
        }
        size_t ll = strlen(line);
        int more = ll > 0 && line[ll - 1] == '\\';
        if (more) line[ll - 1] = '\n';
        char *na = realloc(acc, len + ll + 1);
        if (!na) {
            free(line);
            free(acc);
            *msg = NULL;
            return 0;
        }
        acc = na;
        memcpy(acc + len, line, ll + 1);
        len += ll;
        free(line);
        if (!more) break;
        lr->cont = 1;
    }
    *msg = acc;
    return 1;
}

/* Ctrl-C: sets the flag that run_turn (and cmf run) polls between tokens; the read at the prompt returns with EINTR. */
static void on_sigint(int sig) {
    (void)sig;
    g_sigint = 1;
}

void cli_sigint_install(int once) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigint; /* no SA_RESTART: a read at the prompt is interrupted */
    sa.sa_flags = once ? SA_RESETHAND : 0; /* once: the next SIGINT gets the default action again */
    sigemptyset(&sa.sa_mask);
    g_sigint = 0;
    sigaction(SIGINT, &sa, NULL);
}

int cli_sigint_pending(void) { return g_sigint != 0; }

/* Reads messages until the end of input or /exit. A message that fails (context overflow, template error, a NUL
 * byte) is reported and forgotten and the loop goes on; when stdin is not a terminal the program then exits with
 * CLI_FAIL at the end, as `chat -p` does for its one message. */
static int loop(chat_state *c) {
    int rc = 0, sigints = 0, failed = 0;
    line_reader lr;
    cli_sigint_install(0);
    reader_open(&lr);
    for (;;) {
        g_sigint = 0;
        char *line = NULL;
        int r = read_message(&lr, &line);
        if (r < 0 || (r > 0 && g_sigint)) { /* Ctrl-C at the prompt */
            free(line);
            if (++sigints >= 2) {
                fputc('\n', stderr);
                break;
            }
            fputs("\n(Ctrl-C again to quit, or /exit)\n", stderr);
            continue;
        }
        sigints = 0;
        if (!line) break;
        if (lr.nul) {
            cli_fail("chat", "a message holds a NUL byte (the text after it would be lost): not sent");
            failed = 1;
        } else if (!strcmp(line, "/exit")) {
            free(line);
            break;
        } else if (!strcmp(line, "/reset") || !strcmp(line, "/system") || !strncmp(line, "/system ", 8)) {
            if (line[1] == 's') { /* /system TEXT: the new system message (none when TEXT is empty) */
                const char *text = line + 7;
                while (*text == ' ' || *text == '\t') text++; /* only the spaces after the command */
                free(c->system);
                c->system = *text ? strdup(text) : NULL;
                if (*text && !c->system) rc = cli_fail("chat", "out of memory");
            }
            cmf_session_reset(c->s);
            cmf_sampler_reset(c->smp);
            if (!rc) rc = reset_messages(c);
        } else if (line[0] == '/' && line[1] != '/') {
            size_t w = strcspn(line, " \t\n");
            cli_warn("chat", "unknown command '%.*s' (not sent): the commands are /reset, /system [TEXT], /exit; "
                     "start a message with '//' to send a leading '/'",
                     (int)(w > 40 ? 40 : w), line);
        } else if (line[0]) {
            int n_before = cJSON_GetArraySize(c->msgs);
            rc = add_message(c->msgs, "user", line[0] == '/' ? line + 1 : line); /* "//text" sends "/text" */
            if (!rc && (rc = run_turn(c)) < 0) { /* this turn failed: forget its message, keep going */
                while (cJSON_GetArraySize(c->msgs) > n_before) cJSON_DeleteItemFromArray(c->msgs, n_before);
                rc = 0;
                failed = 1;
            }
        }
        free(line);
        if (rc) break;
    }
    reader_close(&lr);
    if (!rc && failed && !lr.tty) rc = CLI_FAIL; /* piped input: a failed message fails the run */
    return rc;
}

int cmd_chat(int argc, char **argv) {
    chat_opts o;
    int rc = parse(argc, argv, &o);
    if (rc) return rc < 0 ? CLI_OK : rc;
    chat_state c = {.o = &o};
    char *tpl = NULL;
    if (o.system && o.system[0] && !(c.system = strdup(o.system))) /* -s "": no system message */
        return cli_fail("chat", "out of memory");
    if (o.template_file) {
        size_t len;
        if ((rc = cli_read_template("chat", o.template_file, &tpl, &len))) {
            free(c.system);
            return rc;
        }
        c.template_src = tpl;
    }
    cmf_model_params mp = {.n_threads = (int)o.n_threads, .cache_type = o.mo.cache_type};
    cmf_status st = cmf_model_load(o.model, &mp, &c.m);
    if (st != CMF_OK) {
        free(tpl);
        free(c.system);
        return cli_lib_error("chat", st);
    }
    if ((rc = reset_messages(&c))) goto done;
    if (o.template_only) {
        char *text = NULL;
        if (!(rc = add_message(c.msgs, "user", o.prompt)) &&
            !(rc = cli_chat_render("chat", c.m, c.template_src, c.msgs, o.no_think ? 0 : -1, &text)))
            fputs(text, stdout);
        free(text);
        goto done;
    }
    if (!(c.tok = cmf_model_tokenizer(c.m))) {
        const char *why = cmf_model_tokenizer_error(c.m);
        rc = cli_fail("chat", "%s: %s", o.model, why && *why ? why : "the model has no tokenizer (no vocab section)");
        goto done;
    }
    int n_train = cmf_model_n_ctx_train(c.m);
    long n_ctx = o.n_ctx;
    if (n_ctx == 0) { /* -c 0: the whole trained context, uncapped (llama.cpp's -c 0) */
        n_ctx = n_train > 0 ? n_train : CHAT_DEFAULT_CTX_CAP;
    } else if (n_ctx < 0) {
        n_ctx = n_train > 0 ? n_train : CHAT_DEFAULT_CTX_CAP;
        if (n_ctx > CHAT_DEFAULT_CTX_CAP) n_ctx = CHAT_DEFAULT_CTX_CAP;
    } else if (n_train > 0 && n_ctx > n_train) {
        cli_warn("chat", "-c %ld is larger than the trained context %d; output quality may degrade", n_ctx, n_train);
    }
    c.n_ctx = (int)n_ctx;
    if ((rc = cli_session_new("chat", c.m, c.n_ctx, &o.mo, &c.s)) != 0) goto done;
    if ((st = cmf_sampler_new(cmf_model_vocab_size(c.m), &o.smp.sp, &c.smp)) != CMF_OK) {
        rc = cli_lib_error("chat", st);
        goto done;
    }
    if (o.json && (rc = cli_json_constraint("chat", c.m, &c.json))) goto done;
    if (!(c.cache = malloc((size_t)c.n_ctx * sizeof *c.cache))) {
        rc = cli_fail("chat", "out of memory");
        goto done;
    }
    if (o.prompt) {
        if (!(rc = add_message(c.msgs, "user", o.prompt)) && (rc = run_turn(&c)) < 0) rc = CLI_FAIL;
    } else {
        rc = loop(&c);
    }
done:
    free(c.cache);
    cmf_sampler_free(c.smp);
    cmf_constraint_free(c.json);
    cmf_session_free(c.s);
    cJSON_Delete(c.msgs);
    cmf_model_free(c.m);
    free(c.system);
    free(tpl);
    return rc;
}
