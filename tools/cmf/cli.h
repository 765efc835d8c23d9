/* cli.h — private to the `cmf` command line: the subcommands and the shared argument helpers (args.c).
 *
 * Conventions of every subcommand:
 *   - exit 0 on success, CLI_FAIL (1) for runtime errors (missing/corrupt file, model errors), CLI_USAGE (2) for
 *     usage errors (unknown flag, missing flag value, non-numeric number, missing positional argument);
 *   - an error is ONE line on stderr: "cmf <cmd>: <what went wrong>";
 *   - `--help` / `-h` prints the command's usage on stdout and exits 0.
 */
#ifndef CMF_CLI_H
#define CMF_CLI_H

#include <stddef.h>
#include <stdint.h>

#include "cmf.h"

#define CLI_OK 0
#define CLI_FAIL 1
#define CLI_USAGE 2
#define CLI_INTERRUPTED 130 /* stopped by Ctrl-C (SIGINT), as a shell reports 128 + SIGINT */

/* Subcommands: argv[0] is the subcommand's name, argv[1..argc) its arguments. Each returns the exit status. */
int cmd_info(int argc, char **argv);
int cmd_verify(int argc, char **argv);
int cmd_convert(int argc, char **argv);
int cmd_run(int argc, char **argv);
int cmd_eval(int argc, char **argv);
int cmd_skill(int argc, char **argv);
int cmd_masks(int argc, char **argv);
int cmd_chat(int argc, char **argv);
int cmd_requant(int argc, char **argv);
int cmd_serve(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_ppl(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_detokenize(int argc, char **argv);
int cmd_template(int argc, char **argv);

/* chat.c: renders the messages (a cJSON array) with the model's chat template, or `template_src` when not NULL
 * (cmf_chat_render; enable_thinking -1/0/1). *text is malloc'd. On error prints "cmf <cmd>: ..." and returns
 * CLI_FAIL. */
struct cJSON;
int cli_chat_render(const char *cmd, const cmf_model *m, const char *template_src, const struct cJSON *msgs,
                    int enable_thinking, char **text);

/* chat.c: the Ctrl-C (SIGINT) handler of chat and run. cli_sigint_install sets a handler (sigaction, no
 * SA_RESTART) that only sets a flag, which the generation loops poll between tokens; once = 1 adds SA_RESETHAND,
 * so a second Ctrl-C gets the default action (the process ends) as without the handler. The flag starts clear;
 * cli_sigint_pending says whether a SIGINT came since. */
void cli_sigint_install(int once);
int cli_sigint_pending(void);

/* ---------------------------------------------------------------------------------------------------------------
 * args.c — error lines and validated parsing.
 * ------------------------------------------------------------------------------------------------------------- */

/* Prints "cmf <cmd>: <message>\n" on stderr and returns CLI_USAGE / CLI_FAIL. */
int cli_usage_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int cli_fail(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Prints "cmf <cmd>: warning: <message>\n" on stderr. */
void cli_warn(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Prints "cmf <cmd>: <cmf_last_error()>" (or the status name when the message is empty), cleaned as
 * cli_clean_message does; returns CLI_FAIL. */
int cli_lib_error(const char *cmd, cmf_status st);
/* As cli_lib_error for a failure writing `out_path` (the path the user gave): a message naming one of the writer's
 * temporary files ("OUT.tmp", "OUT.blob.tmp", "OUT.tmp.<pid>") instead names OUT and adds the temporary file in
 * parentheses: "cannot create OUT: No such file or directory (temporary file OUT.blob.tmp)". */
int cli_write_error(const char *cmd, const char *out_path, cmf_status st);
/* For convert / requant: when SIGINT, SIGTERM or SIGHUP ends the process, first removes the writer's temporary
 * files of `out_path` ("OUT.tmp", "OUT.blob.tmp"; format/writer.c), then dies of the signal as without the handler
 * (exit status 128 + signal). OUT itself is never touched: a file already there stays as it was. A signal ignored
 * when the command starts (nohup's SIGHUP, SIGINT in a script's background job) stays ignored. Call once, after
 * the arguments are checked. */
void cli_remove_temps_on_signal(const char *out_path);
/* info.c: the tensors of f by directory dtype: count[d] tensors of bytes[d] payload bytes for d < CMF_DT_COUNT,
 * unknown ids in slot CMF_DT_COUNT (both arrays CMF_DT_COUNT + 1 long; filled, not added to). */
void cli_dtype_tally(const cmf_file *f, size_t *count, uint64_t *bytes);
/* A library message (cmf_last_error) as the user should read it after "cmf <cmd>: ": without a leading repeat of
 * the command ("serve: ...", "convert DIR: ...") and without internal function names ("cmf_tokenize: ") at its
 * start or after any ": ". Writes at most cap bytes (NUL included) to out. */
void cli_clean_message(const char *cmd, const char *msg, char *out, size_t cap);
/* cmf_last_error() (or the name of `st` when it is empty) cleaned as above into buf; returns buf. */
const char *cli_lib_message(const char *cmd, cmf_status st, char *buf, size_t cap);

/* A cursor over a subcommand's arguments that understands "--flag value" and "--flag=value". */
typedef struct cli_args {
    const char *cmd; /* for error messages: "run" */
    int argc;
    char **argv;
    int i;                  /* index of the current argument */
    const char *arg;        /* the current argument (without "=value") */
    const char *inline_val; /* the value after '=' in "--flag=value", else NULL */
    int inline_used;        /* the flag matched took inline_val (cli_value); else cli_args_next refuses it */
    int no_value;           /* arg is "--flag=value" again: the flag takes no value (cli_unknown says so) */
    int positional;         /* arg is the value of -m / --model (see cli_args_next) */
    char flagbuf[64];
    const char *match, *match_alt; /* the names cli_is last matched arg with (NULL: none yet) */
    struct {
        const char *name, *value;
    } seen[64]; /* the options that took a value so far (by cli_is's first name), with that value */
    int n_seen;
} cli_args;

/* Starts at argv[1]. */
void cli_args_init(cli_args *a, const char *cmd, int argc, char **argv);
/* Advances to the next argument; returns 0 when none is left. A flag that matched (cli_is) without taking the
 * "=value" given with it (a switch such as --json=0) comes back once more as the whole "--flag=value", with no_value
 * set, so that the command's usual fallback, cli_unknown, refuses it: "--json takes no value". "-m PATH", "--model PATH" and "--model=PATH"
 * (llama.cpp's way to name the model) arrive as the one positional argument PATH (cli_is_flag is 0 for it even when
 * it starts with '-'), so every command whose first positional argument is the model also takes -m. */
int cli_args_next(cli_args *a);
/* Whether the current argument is a flag (starts with '-' and is not "-" alone or a negative number). */
int cli_is_flag(const cli_args *a);
/* Whether the current argument is `name` (or `alt`, which may be NULL); a match is remembered for cli_value. */
int cli_is(cli_args *a, const char *name, const char *alt);
/* The value of the current flag (inline or the next argument). Returns 0, or prints
 * "cmf <cmd>: missing value for <flag>" and returns CLI_USAGE. Every option that takes a value takes it once: a
 * second occurrence (under either of cli_is's names) prints "cmf <cmd>: -p 'B': --prompt / -p was given already
 * ('A'); give each option once" and returns CLI_USAGE, as a second -m is refused (review13: -p A -p B silently kept
 * B; llama.cpp keeps the last value, which hides a mistyped command line). Flags without a value may repeat. */
int cli_value(cli_args *a, const char **val);
/* Value parsers with full validation: the whole string must be a number in [min, max] (cli_int: a decimal
 * integer; cli_seed: an integer in [-2^63, 2^64 - 1], a negative s stored as 2^64 + s, as `cmf serve` maps OpenAI's
 * int64 "seed"; *random = 1 for -1, which asks for a seed from the clock as in llama.cpp and llama-server). Every bad value gives one message shape and CLI_USAGE:
 * "cmf <cmd>: invalid value '1.5' for -t (expected an integer in [0, 4096])", or "(must be in [4, 1024])" for a
 * number of the right kind out of its range (also when max is INT_MAX: "(must be in [0, 2147483647])"), "(expected a
 * non-negative integer)" / "(expected a positive integer)" for a value that is no integer when max >= INT_MAX. */
int cli_int(cli_args *a, long min, long max, long *out);
int cli_float(cli_args *a, double min, double max, double *out);
int cli_seed(cli_args *a, uint64_t *out, int *random);
/* Unknown flag / unexpected argument: prints and returns CLI_USAGE. */
int cli_unknown(const cli_args *a);

/* Parses a list of token ids separated by commas and/or whitespace ("1,2, 3\n4"). Each id must be a decimal
 * integer in [0, INT32_MAX]. *ids is malloc'd (caller frees), *n its length (>= 1). On error prints
 * "cmf <cmd>: <what>: ..." and returns CLI_USAGE (CLI_FAIL on allocation failure). */
int cli_parse_ids(const char *cmd, const char *what, const char *s, int32_t **ids, size_t *n);

/* Reads a whole file (text) into a malloc'd NUL-terminated buffer; on error prints and returns CLI_FAIL. */
int cli_read_text(const char *cmd, const char *path, char **text, size_t *len);
/* As cli_read_text, for a --chat-template-file: a file that is empty or only whitespace is an error (exit 1). */
int cli_read_template(const char *cmd, const char *path, char **text, size_t *len);

/* Seconds on a monotonic clock. */
double cli_now(void);

/* ---- option groups (opts.c) ---- */
#include "sample/sample.h"

typedef struct cli_sampling {
    cmf_sampler_params sp;
    int seed_given;
} cli_sampling;
extern const char *const CLI_SAMPLING_USAGE; /* help text of the sampling flags */
void cli_sampling_defaults(cli_sampling *s);
/* If the current argument is a sampling flag, consumes it (and its value) and returns 1 with *rc = 0 or a usage
 * error code; otherwise returns 0. */
int cli_sampling_opt(cli_args *a, cli_sampling *s, int *rc);
/* After parsing: a seed from the clock when none was given. */
void cli_sampling_finish(cli_sampling *s);

typedef struct cli_model_opts {
    const char *skill;
    cmf_session_params sp; /* o1 and looped-model fields; n_ctx is set by cli_session_new */
    int cache_type;        /* --cache-type: cmf_model_params.cache_type (CMF_CACHE_*) */
} cli_model_opts;
extern const char *const CLI_MODEL_USAGE; /* help text of --skill, --o1*, --loops, --kv-mode, --gate */
/* As cli_sampling_opt, for the model options (cli_backend_opt's flags included). Values whose form is known
 * without the model (--o1, --o1-rect, --kv-mode, --gate, --backend) are checked here: a bad one is CLI_USAGE. */
int cli_model_opt(cli_args *a, cli_model_opts *o, int *rc);
/* As cli_sampling_opt, for the backend flags alone (also on `serve`): --gpu sets CMF_GPU=1, --backend
 * cpu|cuda|cuda:N|auto sets CMF_GPU to the name (anything else is CLI_USAGE); cmf_model_load reads CMF_GPU. */
extern const char *const CLI_BACKEND_USAGE; /* help text of --gpu and --backend */
int cli_backend_opt(cli_args *a, int *rc);
/* As cli_sampling_opt, for --cache-type f16|f32 alone (also on `serve`): sets *cache_type to CMF_CACHE_F16 or
 * CMF_CACHE_F32 (cmf_model_params.cache_type); another value is CLI_USAGE. */
int cli_cache_type_opt(cli_args *a, int *cache_type, int *rc);
/* Creates a session of n_ctx positions with the options (and the skill); prints the error and returns a CLI
 * status on failure; notes on stderr when the O(1) far field is on. */
int cli_session_new(const char *cmd, cmf_model *m, int n_ctx, const cli_model_opts *o, cmf_session **s);
/* --json: JSON mode's constraint for model m (cmf_constraint_new_json with its tokenizer, vocabulary size and eos
 * ids) into *out; prints the error ("--json needs the model's tokenizer and an eos id ...") and returns a CLI
 * status on failure. */
int cli_json_constraint(const char *cmd, const cmf_model *m, cmf_constraint **out);
/* --json after a chat template that leaves <think> open (cmf_chat_ends_in_think; as `serve`, src/server/sched.c):
 * the reasoning is free text and the JSON object starts after "</think>". cli_json_begin: with in_think, w waits
 * (a detokenizer of the reply, tok's, special tokens skipped as printed) and the constraint is set later; otherwise
 * json is set on smp now. cli_json_token: each accepted token of the reply; once the reply's text holds "</think>",
 * sets the constraint and feeds it the text after the tag less the whitespace after it (as serve). Both return 0 or
 * a CLI status (message printed). cli_json_wait_end frees w (zero-initialized, or after cli_json_begin). */
typedef struct cli_json_wait {
    cmf_detok_stream *ds;
    char tail[8]; /* the last bytes of the reply's text so far (up to 7: a tag split across pieces) */
    int waiting;
} cli_json_wait;
int cli_json_begin(const char *cmd, const cmf_tokenizer *tok, cmf_sampler *smp, cmf_constraint *json, int in_think,
                   cli_json_wait *w);
int cli_json_token(const char *cmd, cmf_sampler *smp, cmf_constraint *json, int32_t id, cli_json_wait *w);
void cli_json_wait_end(cli_json_wait *w);

#endif
