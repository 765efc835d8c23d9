/* args.c — shared argument helpers of the `cmf` command line: one-line errors, a flag cursor, validated number
 * and id-list parsers. */
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"
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

int cli_lib_error(const char *cmd, cmf_status st) {
    const char *m = cmf_last_error();
    return cli_fail(cmd, "%s", (m && *m) ? m : cmf_status_str(st));
}

void cli_args_init(cli_args *a, const char *cmd, int argc, char **argv) {
    memset(a, 0, sizeof *a);
    a->cmd = cmd;
    a->argc = argc;
    a->argv = argv;
    a->i = 0;
}

int cli_args_next(cli_args *a) {
    a->i++;
    a->inline_val = NULL;
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
    return 1;
}

int cli_is_flag(const cli_args *a) {
    const char *s = a->arg;
    if (!s || s[0] != '-' || s[1] == '\0') return 0;
    if (isdigit((unsigned char)s[1]) || s[1] == '.') return 0; /* a negative number */
    return 1;
}

int cli_is(const cli_args *a, const char *name, const char *alt) {
    if (!a->arg) return 0;
    if (!strcmp(a->arg, name)) return 1;
    return alt && !strcmp(a->arg, alt);
}

int cli_value(cli_args *a, const char **val) {
    if (a->inline_val) {
        *val = a->inline_val;
        return 0;
    }
    if (a->i + 1 >= a->argc) return cli_usage_error(a->cmd, "%s: missing value", a->arg);
    a->i++;
    *val = a->argv[a->i];
    return 0;
}

int cli_int(cli_args *a, long min, long max, long *out) {
    const char *v = NULL;
    int rc = cli_value(a, &v);
    if (rc) return rc;
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (end == v || *end != '\0' || isspace((unsigned char)v[0]))
        return cli_usage_error(a->cmd, "%s: '%s' is not a number", a->arg, v);
    if (errno == ERANGE || x < min || x > max)
        return cli_usage_error(a->cmd, "%s: %s must be in [%ld, %ld]", a->arg, v, min, max);
    *out = x;
    return 0;
}

int cli_float(cli_args *a, double min, double max, double *out) {
    const char *v = NULL;
    int rc = cli_value(a, &v);
    if (rc) return rc;
    char *end;
    errno = 0;
    double x = strtod(v, &end);
    if (end == v || *end != '\0' || isspace((unsigned char)v[0]) || isnan(x))
        return cli_usage_error(a->cmd, "%s: '%s' is not a number", a->arg, v);
    if (errno == ERANGE || !(x >= min && x <= max))
        return cli_usage_error(a->cmd, "%s: %s must be in [%g, %g]", a->arg, v, min, max);
    *out = x;
    return 0;
}

int cli_u64(cli_args *a, uint64_t *out) {
    const char *v = NULL;
    int rc = cli_value(a, &v);
    if (rc) return rc;
    char *end;
    errno = 0;
    if (!isdigit((unsigned char)v[0])) return cli_usage_error(a->cmd, "%s: '%s' is not a number", a->arg, v);
    unsigned long long x = strtoull(v, &end, 10);
    if (*end != '\0') return cli_usage_error(a->cmd, "%s: '%s' is not a number", a->arg, v);
    if (errno == ERANGE) return cli_usage_error(a->cmd, "%s: %s is too large", a->arg, v);
    *out = (uint64_t)x;
    return 0;
}

int cli_unknown(const cli_args *a) {
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

double cli_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}
