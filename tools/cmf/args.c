/* args.c — shared argument helpers of the `cmf` command line: one-line errors, a flag cursor, validated number
 * and id-list parsers. */
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "template/template.h"
#include "util/fileio.h"

static void vline(const char *cmd, const char *tag, const char *fmt, va_list ap) {
    char msg[1024];
    vsnprintf(msg, sizeof msg, fmt, ap);
    /* one line: newlines inside a message become "; " */
    for (char *p = msg; *p; p++)
        if (*p == '\n' || *p == '\r') *p = ' ';
    fprintf(stderr, "cmf%s%s: %s%s\n", cmd ? " " : "", cmd ? cmd : "", tag, msg);
}

int cli_usage_error(const char *cmd, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vline(cmd, "", fmt, ap);
    va_end(ap);
    return CLI_USAGE;
}

int cli_fail(const char *cmd, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vline(cmd, "", fmt, ap);
    va_end(ap);
    return CLI_FAIL;
}

void cli_warn(const char *cmd, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vline(cmd, "warning: ", fmt, ap);
    va_end(ap);
}

/* A leading internal function name of a library message ("cmf_tokenize: "): the pointer after it, else NULL. */
static const char *skip_internal_name(const char *p) {
    if (strncmp(p, "cmf_", 4) != 0) return NULL;
    const char *q = p + 4;
    while ((*q >= 'a' && *q <= 'z') || (*q >= '0' && *q <= '9') || *q == '_') q++;
    return q > p + 4 && q[0] == ':' && q[1] == ' ' ? q + 2 : NULL;
}

/* Whether s starts with one path-like word (holds '/' or '.') followed by ": " ("x.cmf: ", "/a/b: "). */
static int path_word(const char *s) {
    int pathy = 0;
    for (const char *q = s; *q && *q != ' '; q++) {
        if (q[0] == ':' && q[1] == ' ') return pathy && q > s;
        if (*q == '/' || *q == '.') pathy = 1;
    }
    return 0;
}

void cli_clean_message(const char *cmd, const char *msg, char *out, size_t cap) {
    if (!cap) return;
    const char *p = msg ? msg : "";
    size_t cl = cmd ? strlen(cmd) : 0;
    for (;;) { /* the library's own prefix when it repeats the command ("serve: ", "convert DIR: ") */
        const char *q;
        if (cl && !strncmp(p, cmd, cl) && p[cl] == ':' && p[cl + 1] == ' ') p += cl + 2;
        else if (cl && !strncmp(p, cmd, cl) && p[cl] == ' ' && path_word(p + cl + 1)) p += cl + 1;
        else if ((q = skip_internal_name(p))) p = q;
        else break;
    }
    size_t k = 0;
    while (*p && k + 1 < cap) {
        if (p[0] == ':' && p[1] == ' ') { /* "...: cmf_writer_finish: cannot ..." -> "...: cannot ..." */
            out[k++] = *p++;
            if (k + 1 < cap) out[k++] = *p++;
            else p++;
            for (const char *q; (q = skip_internal_name(p)) != NULL;) p = q;
            continue;
        }
        out[k++] = *p++;
    }
    out[k] = '\0';
}

const char *cli_lib_message(const char *cmd, cmf_status st, char *buf, size_t cap) {
    const char *m = cmf_last_error();
    cli_clean_message(cmd, (m && *m) ? m : cmf_status_str(st), buf, cap);
    return buf;
}

int cli_lib_error(const char *cmd, cmf_status st) {
    char msg[1024];
    return cli_fail(cmd, "%s", cli_lib_message(cmd, st, msg, sizeof msg));
}

/* The length of a temporary-file suffix at s (".blob.tmp", ".tmp", ".tmp.<digits>"), else 0. */
static size_t temp_suffix(const char *s) {
    size_t n = !strncmp(s, ".blob.tmp", 9) ? 9 : !strncmp(s, ".tmp", 4) ? 4 : 0;
    if (n && s[n] == '.' && isdigit((unsigned char)s[n + 1])) {
        n++;
        while (isdigit((unsigned char)s[n])) n++;
    }
    if (n && s[n] && s[n] != ':' && s[n] != ' ' && s[n] != ',' && s[n] != ')') return 0; /* "x.tmpl": not ours */
    return n;
}

int cli_write_error(const char *cmd, const char *out_path, cmf_status st) {
    char msg[1024];
    cli_lib_message(cmd, st, msg, sizeof msg);
    size_t ol = out_path ? strlen(out_path) : 0;
    for (const char *p = ol ? strstr(msg, out_path) : NULL; p; p = strstr(p + 1, out_path))
        if (!temp_suffix(p + ol)) return cli_fail(cmd, "%s", msg); /* it names the user's path already */
    for (const char *p = ol ? strstr(msg, out_path) : NULL; p; p = strstr(p + 1, out_path)) {
        size_t n = temp_suffix(p + ol);
        if (!n) continue;
        /* "cannot create OUT.blob.tmp: E" -> "cannot create OUT: E (temporary file OUT.blob.tmp)" */
        return cli_fail(cmd, "%.*s%s (temporary file %.*s)", (int)(p - msg) + (int)ol, msg, p + ol + n,
                        (int)(ol + n), p);
    }
    return cli_fail(cmd, "%s", msg);
}

static char g_temps[2][4096]; /* OUT.tmp, OUT.blob.tmp: set before the handler is installed, read-only after */

static void remove_temps(int sig) { /* async-signal-safe: unlink, sigaction, raise */
    for (int i = 0; i < 2; i++)
        if (g_temps[i][0]) unlink(g_temps[i]);
    struct sigaction dfl;
    memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    sigaction(sig, &dfl, NULL);
    raise(sig);
}

void cli_remove_temps_on_signal(const char *out_path) {
    static const char *const SUFFIX[2] = {".tmp", ".blob.tmp"};
    for (int i = 0; i < 2; i++) {
        int n = snprintf(g_temps[i], sizeof g_temps[i], "%s%s", out_path, SUFFIX[i]);
        if (n < 0 || (size_t)n >= sizeof g_temps[i]) g_temps[i][0] = '\0'; /* too long to be created anyway */
    }
    struct sigaction sa, old;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = remove_temps;
    sigemptyset(&sa.sa_mask);
    static const int SIGS[3] = {SIGINT, SIGTERM, SIGHUP};
    for (int i = 0; i < 3; i++) /* a signal ignored on entry (nohup, a script's background job) stays ignored */
        if (sigaction(SIGS[i], NULL, &old) == 0 && old.sa_handler != SIG_IGN) sigaction(SIGS[i], &sa, NULL);
}

void cli_args_init(cli_args *a, const char *cmd, int argc, char **argv) {
    memset(a, 0, sizeof *a);
    a->cmd = cmd;
    a->argc = argc;
    a->argv = argv;
    a->i = 0;
}

int cli_args_next(cli_args *a) {
    if (a->inline_val && !a->inline_used && a->match && !a->no_value) {
        a->no_value = 1; /* the same argument again, whole: no cli_is matches it; cli_unknown refuses it */
        a->arg = a->argv[a->i];
        a->inline_val = NULL;
        a->match = a->match_alt = NULL;
        return 1;
    }
    a->no_value = 0;
    a->inline_used = 0;
    a->i++;
    a->inline_val = NULL;
    a->match = a->match_alt = NULL;
    if (a->i >= a->argc) {
        a->arg = NULL;
        return 0;
    }
    a->arg = a->argv[a->i];
    const char *eq = strchr(a->arg, '=');
    if (a->arg[0] == '-' && a->arg[1] == '-' && eq && (size_t)(eq - a->arg) < sizeof a->flagbuf) {
        memcpy(a->flagbuf, a->arg, (size_t)(eq - a->arg));
        a->flagbuf[eq - a->arg] = '\0';
        a->arg = a->flagbuf;
        a->inline_val = eq + 1;
    }
    a->positional = 0;
    if (!strcmp(a->arg, "-m") || !strcmp(a->arg, "--model")) { /* llama.cpp's -m PATH: the model positional */
        if (a->inline_val) {
            a->arg = a->inline_val;
            a->inline_val = NULL;
            a->positional = 1;
        } else if (a->i + 1 < a->argc) {
            a->arg = a->argv[++a->i];
            a->positional = 1;
        } /* else "-m" stays a flag: cli_unknown says its value is missing */
    }
    return 1;
}

int cli_is_flag(const cli_args *a) {
    const char *s = a->arg;
    if (a->positional) return 0; /* the value of -m / --model */
    if (!s || s[0] != '-' || s[1] == '\0') return 0;
    if (isdigit((unsigned char)s[1]) || s[1] == '.') return 0; /* a negative number */
    return 1;
}

int cli_is(cli_args *a, const char *name, const char *alt) {
    if (!a->arg) return 0;
    if (strcmp(a->arg, name) && (!alt || strcmp(a->arg, alt))) return 0;
    a->match = name; /* remembered for cli_value's repeat check */
    a->match_alt = alt;
    return 1;
}

int cli_value(cli_args *a, const char **val) {
    if (a->inline_val) {
        *val = a->inline_val;
        a->inline_used = 1;
    } else {
        if (a->i + 1 >= a->argc) return cli_usage_error(a->cmd, "missing value for %s", a->arg);
        a->i++;
        *val = a->argv[a->i];
    }
    if (!a->match) return 0;
    for (int k = 0; k < a->n_seen; k++)
        if (!strcmp(a->seen[k].name, a->match)) {
            if (a->match_alt)
                return cli_usage_error(a->cmd, "%s '%s': %s / %s was given already ('%s'); give each option once",
                                       a->arg, *val, a->match, a->match_alt, a->seen[k].value);
            return cli_usage_error(a->cmd, "%s '%s': %s was given already ('%s'); give each option once", a->arg,
                                   *val, a->match, a->seen[k].value);
        }
    if (a->n_seen < (int)(sizeof a->seen / sizeof a->seen[0])) {
        a->seen[a->n_seen].name = a->match;
        a->seen[a->n_seen++].value = *val;
    }
    return 0;
}

/* A bound as a person writes it: 1000000 rather than 1e+06, 0.5 as is. */
static void fmt_bound(char *out, size_t cap, double x) {
    if (x == floor(x) && fabs(x) < 1e15) snprintf(out, cap, "%.0f", x);
    else snprintf(out, cap, "%g", x);
}

/* "invalid value 'V' for FLAG (expected an integer in [A, B])", the one shape of every bad number. `kind` is
 * "integer" or "number"; max >= INT_MAX means no upper bound ("a positive integer"). */
static int bad_number(const cli_args *a, const char *v, const char *kind, double min, double max, int in_form) {
    char lo[32], hi[32], what[96];
    fmt_bound(lo, sizeof lo, min);
    fmt_bound(hi, sizeof hi, max);
    int integer = kind[0] == 'i';
    if (max >= (double)INT_MAX && integer && min == 0) snprintf(what, sizeof what, "a non-negative integer");
    else if (max >= (double)INT_MAX && integer && min == 1) snprintf(what, sizeof what, "a positive integer");
    else if (max >= (double)INT_MAX) snprintf(what, sizeof what, "%s %s >= %s", integer ? "an" : "a", kind, lo);
    else if (!integer && min > 0 && min < 1e-6) snprintf(what, sizeof what, "a number > 0 and <= %s", hi);
    else snprintf(what, sizeof what, "%s %s in [%s, %s]", integer ? "an" : "a", kind, lo, hi);
    if (in_form || (!integer && max >= (double)INT_MAX) || (!integer && min > 0 && min < 1e-6))
        return cli_usage_error(a->cmd, "invalid value '%s' for %s (expected %s)", v, a->arg, what);
    /* a number of the right kind out of range: the range, even when its top is INT_MAX (review13: -c 999999999999
     * said only "expected a non-negative integer", which the value is) */
    return cli_usage_error(a->cmd, "invalid value '%s' for %s (must be in [%s, %s])", v, a->arg, lo, hi);
}

/* Parses all of v as a decimal long in [min, max]: 0, -1 when it is not an integer, 1 when out of range. */
static int parse_long(const char *v, long min, long max, long *out) {
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (end == v || *end != '\0' || isspace((unsigned char)v[0])) return -1;
    if (errno == ERANGE || x < min || x > max) return 1;
    *out = x;
    return 0;
}

int cli_int(cli_args *a, long min, long max, long *out) {
    const char *v = NULL;
    int rc = cli_value(a, &v);
    if (rc) return rc;
    int e = parse_long(v, min, max, out);
    return e ? bad_number(a, v, "integer", (double)min, (double)max, e < 0) : 0;
}

int cli_float(cli_args *a, double min, double max, double *out) {
    const char *v = NULL;
    int rc = cli_value(a, &v);
    if (rc) return rc;
    char *end;
    errno = 0;
    double x = strtod(v, &end);
    if (end == v || *end != '\0' || isspace((unsigned char)v[0]) || isnan(x))
        return bad_number(a, v, "number", min, max, 1);
    if (errno == ERANGE || !(x >= min && x <= max)) return bad_number(a, v, "number", min, max, 0);
    *out = x;
    return 0;
}

int cli_seed(cli_args *a, uint64_t *out, int *random) {
    const char *v = NULL;
    int rc = cli_value(a, &v);
    if (rc) return rc;
    const int neg = v[0] == '-';
    const char *d = v + neg;
    char *end;
    errno = 0;
    unsigned long long x = isdigit((unsigned char)d[0]) ? strtoull(d, &end, 10) : 0;
    if (!isdigit((unsigned char)d[0]) || *end != '\0')
        return cli_usage_error(a->cmd, "invalid value '%s' for %s (expected an integer)", v, a->arg);
    if (errno == ERANGE || (neg && x > (1ull << 63)))
        return cli_usage_error(a->cmd, "invalid value '%s' for %s (must be in [-%llu, %llu])", v, a->arg,
                               1ull << 63, ULLONG_MAX);
    *out = neg ? (uint64_t)0 - (uint64_t)x : (uint64_t)x; /* two's complement: serve's "seed" maps the same way */
    *random = neg && x == 1; /* -1: llama.cpp's "random seed" */
    return 0;
}

int cli_unknown(const cli_args *a) {
    if (a->no_value) { /* "--json=0": a switch given a value */
        const char *eq = strchr(a->arg, '=');
        return cli_usage_error(a->cmd, "%.*s takes no value (given '%s'; see cmf %s --help)",
                               (int)(eq ? eq - a->arg : (ptrdiff_t)strlen(a->arg)), a->arg, a->arg, a->cmd);
    }
    if (!a->positional && (!strcmp(a->arg, "-m") || !strcmp(a->arg, "--model")))
        return cli_usage_error(a->cmd, "missing value for %s", a->arg);
    if (a->positional) /* -m PATH after the model was given already */
        return cli_usage_error(a->cmd, "-m / --model '%s': the model was given already (see cmf %s --help)", a->arg,
                               a->cmd);
    if (!strcmp(a->arg, "-ngl") || !strcmp(a->arg, "--n-gpu-layers") || !strcmp(a->arg, "--gpu-layers"))
        return cli_usage_error(a->cmd, "unknown option '%s': cmf runs the whole model on the GPU with --gpu (or "
                                       "--backend cuda[:N]); there is no per-layer offload (see cmf %s --help)",
                               a->arg, a->cmd);
    if (cli_is_flag(a)) return cli_usage_error(a->cmd, "unknown option '%s' (see cmf %s --help)", a->arg, a->cmd);
    return cli_usage_error(a->cmd, "unexpected argument '%s' (see cmf %s --help)", a->arg, a->cmd);
}

int cli_parse_ids(const char *cmd, const char *what, const char *s, int32_t **ids, size_t *n) {
    *ids = NULL;
    *n = 0;
    size_t cap = 0, count = 0;
    int32_t *v = NULL;
    const char *p = s;
    int expect_id = 1; /* after a comma another id must follow */
    size_t index = 0;
    for (;;) {
        while (isspace((unsigned char)*p)) p++;
        if (*p == '\0') break;
        if (*p == ',') {
            if (expect_id) {
                free(v);
                return cli_usage_error(cmd, "%s: empty entry at position %zu", what, index + 1);
            }
            expect_id = 1;
            p++;
            continue;
        }
        if (!isdigit((unsigned char)*p)) {
            int len = 0;
            while (p[len] && p[len] != ',' && !isspace((unsigned char)p[len]) && len < 32) len++;
            free(v);
            return cli_usage_error(cmd, "%s: '%.*s' is not a token id", what, len, p);
        }
        errno = 0;
        char *end;
        unsigned long long x = strtoull(p, &end, 10);
        if (errno == ERANGE || x > (unsigned long long)INT32_MAX) {
            free(v);
            return cli_usage_error(cmd, "%s: id %.*s is out of range", what, (int)(end - p), p);
        }
        if (*end && *end != ',' && !isspace((unsigned char)*end)) {
            int len = 0;
            while (p[len] && p[len] != ',' && !isspace((unsigned char)p[len]) && len < 32) len++;
            free(v);
            return cli_usage_error(cmd, "%s: '%.*s' is not a token id", what, len, p);
        }
        if (count == cap) {
            cap = cap ? cap * 2 : 64;
            int32_t *nv = realloc(v, cap * sizeof *nv);
            if (!nv) {
                free(v);
                return cli_fail(cmd, "out of memory");
            }
            v = nv;
        }
        v[count++] = (int32_t)x;
        index++;
        expect_id = 0;
        p = end;
    }
    if (count == 0 || expect_id) {
        free(v);
        return cli_usage_error(cmd, "%s: %s", what, count ? "trailing comma" : "no token ids");
    }
    *ids = v;
    *n = count;
    return 0;
}

int cli_read_text(const char *cmd, const char *path, char **text, size_t *len) {
    cmf_status st = cmf_read_file(path, text, len);
    if (st != CMF_OK) return cli_lib_error(cmd, st);
    return 0;
}

int cli_read_template(const char *cmd, const char *path, char **text, size_t *len) {
    /* the engine refuses more than CMF_TEMPLATE_MAX_SOURCE bytes anyway: do not read a bigger file whole first */
    cmf_status st = cmf_read_file_max(path, CMF_TEMPLATE_MAX_SOURCE, text, len);
    if (st != CMF_OK) return cli_lib_error(cmd, st);
    size_t i = 0;
    while (i < *len && isspace((unsigned char)(*text)[i])) i++;
    if (i == *len) { /* an empty template renders no message at all: the model would answer a bare BOS */
        free(*text);
        *text = NULL;
        return cli_fail(cmd, "%s: the chat template file is empty", path);
    }
    const char *nul = memchr(*text, 0, *len); /* the template is passed on as a C string: it would end there */
    if (nul) {
        size_t at = (size_t)(nul - *text);
        free(*text);
        *text = NULL;
        return cli_fail(cmd, "%s: the chat template file has a NUL byte at offset %zu", path, at);
    }
    return 0;
}

double cli_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}
