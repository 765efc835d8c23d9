/* main.c — the `cmf` command line: a table of subcommands, each in its own file (cli.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "cmf.h"
#include "quant/qpar.h"

static const struct {
    const char *name;
    int (*fn)(int argc, char **argv);
    const char *help;
} commands[] = {
    {"info", cmd_info, "describe a model file: architecture, geometry, sections, skills, tensors"},
    {"verify", cmd_verify, "check every hash of a model file (header, directory, sections, tensors)"},
    {"convert", cmd_convert, "convert a Hugging Face directory or a GGUF file to CMF"},
    {"run", cmd_run, "generate text from a prompt"},
    {"chat", cmd_chat, "talk with a model: its chat template, KV cache kept across turns"},
    {"template", cmd_template, "render a conversation with a chat template (model file or tokenizer_config.json)"},
    {"eval", cmd_eval, "write the logits of every position of a token sequence"},
    {"serve", cmd_serve, "an OpenAI-compatible HTTP server (continuous batching)"},
    {"skill", cmd_skill, "bake, list, export and apply skills (overlay tensors skill.<id>.*)"},
    {"masks", cmd_masks, "list the task masks of a model file and which one is active by default"},
    {"bench", cmd_bench, "llama-bench style speed test: prefill (ppP) and decode (tgN) tokens/second"},
    {"ppl", cmd_ppl, "perplexity of a text over fixed windows, as llama.cpp's llama-perplexity"},
    {"requant", cmd_requant, "re-encode the weight matrices of a CMF file with another quant"},
    {"tokenize", cmd_tokenize, "text on stdin -> token ids (model file or tokenizer.json)"},
    {"detokenize", cmd_detokenize, "token ids on stdin -> text (model file or tokenizer.json)"},
};
#define N_COMMANDS (sizeof commands / sizeof commands[0])

/* The CPU backend reads CMF_ACT_LEVELS ("2": two int8 activation levels; anything else: one), CMF_CPU_REPACK
 * ("0": no load-time repack; anything else: repack) and CMF_CPU_PATH (a kernel path to use) itself and, being
 * library code, cannot say so; the commands that run a forward warn here about a value it will ignore, and the
 * commands that encode weights (convert, requant, skill) about a CMF_QUANT_THREADS the encoders ignore. */
extern int cmf_cpu_path_from_env(void) __attribute__((weak)); /* backend/cpu/ops.h (weak: as bench.c's) */

static void check_cpu_env(const char *cmd, int argc, char **argv) {
    static const char *const forward_cmds[] = {"run", "chat", "eval", "bench", "ppl", "serve"};
    static const char *const encode_cmds[] = {"convert", "requant", "skill"}; /* the encoders' threads (quant/qpar) */
    const char *v = getenv("CMF_ACT_LEVELS"), *r = getenv("CMF_CPU_REPACK");
    int bad_levels = v && *v && strcmp(v, "1") && strcmp(v, "2"), bad_repack = r && *r && strcmp(r, "0") && strcmp(r, "1");
    const char *p = getenv("CMF_CPU_PATH");
    const int bad_path = cmf_cpu_path_from_env && cmf_cpu_path_from_env() == -2, bad_qt = cmf_qpar_threads_env_bad();
    if (!bad_levels && !bad_repack && !bad_path && !bad_qt) return;
    for (int i = 2; i < argc; i++)
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) return;
    for (size_t i = 0; bad_qt && i < sizeof encode_cmds / sizeof encode_cmds[0]; i++)
        if (!strcmp(cmd, encode_cmds[i]))
            cli_warn(cmd, "CMF_QUANT_THREADS='%.40s' is not a whole number 1..256; using %d encoder threads (the "
                          "online CPUs)", getenv("CMF_QUANT_THREADS"), cmf_qpar_threads());
    for (size_t i = 0; i < sizeof forward_cmds / sizeof forward_cmds[0]; i++)
        if (!strcmp(cmd, forward_cmds[i])) {
            if (bad_levels)
                cli_warn(cmd, "CMF_ACT_LEVELS='%.40s' is not 1 or 2; using 1 (one int8 activation level, the default)", v);
            if (bad_repack) /* backend/cpu/repack.c: only "0" turns it off */
                cli_warn(cmd, "CMF_CPU_REPACK='%.40s' is not 0 or 1; using 1 (q4 / q8 weights repacked at load)", r);
            if (bad_path)
                cli_warn(cmd, "CMF_CPU_PATH='%.40s' is not a kernel path this CPU and build run (the names: avx512-vnni, "
                              "avx2, neon, scalar); using the detected one", p);
            return;
        }
}

static void usage(FILE *out) {
    fprintf(out, "cmf %s — a runtime for language models stored in CMF v2 files\n\n", CMF_VERSION_STRING);
    fprintf(out, "usage: cmf <command> [options]   (cmf <command> --help for its options)\n\ncommands:\n");
    for (size_t i = 0; i < N_COMMANDS; i++) fprintf(out, "  %-10s %s\n", commands[i].name, commands[i].help);
    fprintf(out, "\nThe commands that take a model file as their first argument also take it as -m PATH or\n"
                 "--model PATH (llama.cpp's way). cmf -v / --version prints the version.\n");
    fprintf(out, "\nexit status: 0 success, 1 runtime error, 2 usage error (130: cmf run stopped by Ctrl-C)\n");
}

int main(int argc, char **argv) {
    if (argc < 2) { /* as `cmf --help`, on stderr: a usage error */
        usage(stderr);
        return CLI_USAGE;
    }
    const char *c = argv[1];
    if (!strcmp(c, "--help") || !strcmp(c, "-h") || !strcmp(c, "help")) {
        if (!strcmp(c, "help") && argc > 2) { /* cmf help <command> */
            for (size_t i = 0; i < N_COMMANDS; i++) {
                if (!strcmp(argv[2], commands[i].name)) {
                    char *sub[2] = {argv[2], "--help"};
                    return commands[i].fn(2, sub);
                }
            }
            return cli_usage_error(NULL, "unknown command '%s' (see cmf --help)", argv[2]);
        }
        usage(stdout);
        return CLI_OK;
    }
    if (!strcmp(c, "--version") || !strcmp(c, "-V") || !strcmp(c, "-v")) {
        printf("cmf %s\n", CMF_VERSION_STRING);
        return CLI_OK;
    }
    for (size_t i = 0; i < N_COMMANDS; i++)
        if (!strcmp(c, commands[i].name)) {
            check_cpu_env(c, argc, argv);
            return commands[i].fn(argc - 1, argv + 1);
        }
    if (c[0] == '-') return cli_usage_error(NULL, "unknown option '%s' (see cmf --help)", c);
    return cli_usage_error(NULL, "unknown command '%s' (see cmf --help)", c);
}
