/* eval.c — `cmf eval model.cmf --tokens 1,2,3 -o logits.f32`: one prefill of all tokens; writes the float32 logits
 * of every position ([n_tokens, vocab], row-major, little-endian) to a temporary name, then renames it into
 * place, so a failure never leaves a partial output file (a device or FIFO such as /dev/null is written in place). */
#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "util/fileio.h"

static const char *USAGE =
    "usage: cmf eval MODEL.cmf (--tokens 1,2,3 | --tokens-file F) -o LOGITS.f32 [-t THREADS]\n"
    "\n"
    "Runs all tokens through the model in one prefill (positions 0..n-1) and writes the logits of every\n"
    "position as float32, [n_tokens, vocab] row-major, little-endian (n_tokens * vocab * 4 bytes).\n"
    "\n"
    "  --tokens IDS         token ids separated by commas and/or whitespace\n"
    "  --tokens-file F      read the ids from F (same syntax)\n"
    "  -o, --output F       the output file (written to a temporary name and renamed when complete); '-' writes\n"
    "                       the raw float32 bytes to stdout (refused when stdout is a terminal); a device or\n"
    "                       FIFO (/dev/null, a named pipe) is written in place\n"
    "  -t, --threads N      worker threads (default 0: all online CPUs)\n"
    "%s"
    "\n"
    "All positions run in one prefill, so the O(1) far field (sealed after a prompt) never applies here.\n"
    "Prints \"wrote N x V logits to F\" on stderr.\n";

/* Writes n floats as little-endian float32 (byte-swapped on a big-endian host). Returns 0 or -1 (errno). */
static int write_le_f32(FILE *fp, const float *v, size_t n) {
    const uint32_t one = 1;
    uint8_t little;
    memcpy(&little, &one, 1);
    if (little) return fwrite(v, sizeof *v, n, fp) == n ? 0 : -1;
    for (size_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &v[i], 4);
        uint8_t b[4] = {(uint8_t)u, (uint8_t)(u >> 8), (uint8_t)(u >> 16), (uint8_t)(u >> 24)};
        if (fwrite(b, 1, 4, fp) != 4) return -1;
    }
    return 0;
}

/* Writes the file under "<path>.tmp.<pid>", flushes it to disk, renames it to `path`. */
static int write_atomic(const char *path, const float *v, size_t n) {
    size_t plen = strlen(path);
    char *tmp = malloc(plen + 32);
    if (!tmp) return cli_fail("eval", "out of memory");
    snprintf(tmp, plen + 32, "%s.tmp.%ld", path, (long)getpid());
    FILE *fp = fopen(tmp, "wb");
    if (!fp) {
        int rc = cli_fail("eval", "cannot write %s: %s (temporary file %s)", path, strerror(errno), tmp);
        free(tmp);
        return rc;
    }
    int bad = write_le_f32(fp, v, n);
    int err = errno;
    if (!bad && fflush(fp) != 0) bad = -1, err = errno;
    if (!bad && fsync(fileno(fp)) != 0) bad = -1, err = errno;
    if (fclose(fp) != 0 && !bad) bad = -1, err = errno;
    if (!bad && rename(tmp, path) != 0) bad = -1, err = errno;
    int rc = CLI_OK;
    if (bad) {
        remove(tmp);
        rc = cli_fail("eval", "cannot write %s: %s (temporary file %s)", path, strerror(err), tmp);
    }
    free(tmp);
    return rc;
}

/* -o -: the same bytes on stdout, flushed; a write error (a closed pipe gives EPIPE) is reported. */
static int write_stdout(const float *v, size_t n) {
    int bad = write_le_f32(stdout, v, n);
    int err = errno;
    if (!bad && fflush(stdout) != 0) bad = -1, err = errno;
    if (bad) return cli_fail("eval", "cannot write the logits to stdout: %s", strerror(err));
    return CLI_OK;
}

/* Whether `path` names an existing character device or FIFO (symbolic links followed: /dev/stdout): written in
 * place, as `> /dev/null` would, since it cannot be replaced by a rename (review13: -o /dev/null was refused). */
static int is_stream_device(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0 && (S_ISCHR(sb.st_mode) || S_ISFIFO(sb.st_mode));
}

/* Writes the bytes to the device / FIFO `path` directly (no temporary file, no rename). */
static int write_device(const char *path, const float *v, size_t n) {
    FILE *fp = fopen(path, "wb");
    if (!fp) return cli_fail("eval", "cannot write %s: %s", path, strerror(errno));
    int bad = write_le_f32(fp, v, n);
    int err = errno;
    if (fclose(fp) != 0 && !bad) bad = -1, err = errno;
    if (bad) return cli_fail("eval", "cannot write %s: %s", path, strerror(err));
    return CLI_OK;
}

int cmd_eval(int argc, char **argv) {
    cli_args a;
    cli_args_init(&a, "eval", argc, argv);
    const char *model = NULL, *tokens = NULL, *tokens_file = NULL, *out = NULL;
    long n_threads = 0;
    int rc = 0;
    cli_model_opts mo;
    memset(&mo, 0, sizeof mo);
    while (cli_args_next(&a)) {
        if (cli_is(&a, "--help", "-h")) {
            printf(USAGE, CLI_MODEL_USAGE);
            return CLI_OK;
        } else if (cli_model_opt(&a, &mo, &rc)) {
        } else if (cli_is(&a, "--tokens", NULL)) {
            rc = cli_value(&a, &tokens);
        } else if (cli_is(&a, "--tokens-file", NULL)) {
            rc = cli_value(&a, &tokens_file);
        } else if (cli_is(&a, "--output", "-o")) {
            rc = cli_value(&a, &out);
        } else if (cli_is(&a, "--threads", "-t")) {
            rc = cli_int(&a, 0, 4096, &n_threads);
        } else if (!cli_is_flag(&a) && !model) {
            model = a.arg;
        } else {
            return cli_unknown(&a);
        }
        if (rc) return rc;
    }
    if (!model) return cli_usage_error("eval", "missing MODEL.cmf (see cmf eval --help)");
    if (!tokens && !tokens_file) return cli_usage_error("eval", "missing --tokens IDS or --tokens-file F");
    if (tokens && tokens_file) return cli_usage_error("eval", "give only one of --tokens and --tokens-file");
    if (!out) return cli_usage_error("eval", "missing -o LOGITS.f32");
    const int to_stdout = !strcmp(out, "-");
    const int to_device = !to_stdout && is_stream_device(out);
    if (to_stdout && isatty(STDOUT_FILENO))
        return cli_usage_error("eval", "-o - writes binary float32 logits to stdout, which is a terminal: redirect "
                               "it (cmf eval ... -o - > FILE, or | a reader)");
    if (!to_stdout && !to_device &&
        (cmf_same_file(model, out) || (tokens_file && cmf_same_file(tokens_file, out))))
        return cli_fail("eval", "-o %s is one of the inputs; write the logits under another name", out);
    cmf_status chk = to_stdout || to_device ? CMF_OK : cmf_check_output_path(out);
    if (chk != CMF_OK) return cli_lib_error("eval", chk);

    int32_t *ids = NULL;
    size_t n = 0;
    if (tokens) {
        if ((rc = cli_parse_ids("eval", "--tokens", tokens, &ids, &n))) return rc;
    } else {
        char *text = NULL;
        size_t len = 0;
        if ((rc = cli_read_text("eval", tokens_file, &text, &len))) return rc;
        rc = cli_parse_ids("eval", tokens_file, text, &ids, &n);
        free(text);
        if (rc) return rc;
    }

    cmf_model_params mp = {.n_threads = (int)n_threads, .cache_type = mo.cache_type};
    cmf_model *m = NULL;
    cmf_session *s = NULL;
    float *logits = NULL;
    cmf_status st = cmf_model_load(model, &mp, &m);
    if (st != CMF_OK) {
        free(ids);
        return cli_lib_error("eval", st);
    }
    int vocab = cmf_model_vocab_size(m);
    int n_train = cmf_model_n_ctx_train(m);
    for (size_t i = 0; i < n; i++) {
        if (ids[i] >= vocab) {
            rc = cli_fail("eval", "token id %d (position %zu) is out of range for a vocabulary of %d", (int)ids[i],
                          i, vocab);
            goto done;
        }
    }
    if (n > (size_t)INT_MAX || (vocab > 0 && n > SIZE_MAX / sizeof(float) / (size_t)vocab)) {
        rc = cli_fail("eval", "%zu tokens are too many", n);
        goto done;
    }
    if (n_train > 0 && n > (size_t)n_train)
        cli_warn("eval", "%zu tokens exceed the trained context of %d", n, n_train);
    logits = malloc(n * (size_t)vocab * sizeof *logits);
    if (!logits) {
        rc = cli_fail("eval", "out of memory for %zu x %d logits", n, vocab);
        goto done;
    }
    if ((rc = cli_session_new("eval", m, (int)n, &mo, &s)) != 0) goto done;
    if ((st = cmf_session_prefill(s, ids, (int)n, logits)) != CMF_OK) {
        rc = cli_lib_error("eval", st);
        goto done;
    }
    if ((rc = to_stdout   ? write_stdout(logits, n * (size_t)vocab)
              : to_device ? write_device(out, logits, n * (size_t)vocab)
                          : write_atomic(out, logits, n * (size_t)vocab)))
        goto done;
    fprintf(stderr, "wrote %zu x %d logits to %s\n", n, vocab, to_stdout ? "stdout" : out);

done:
    free(logits);
    cmf_session_free(s);
    cmf_model_free(m);
    free(ids);
    return rc;
}
