/* error.c — per-thread last-error message. */
#include "util/error.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static _Thread_local char g_msg[1024];

const char *cmf_last_error(void) { return g_msg; }

const char *cmf_status_str(cmf_status st) {
    switch (st) {
    case CMF_OK: return "ok";
    case CMF_E_IO: return "i/o error";
    case CMF_E_FORMAT: return "malformed input";
    case CMF_E_UNSUPPORTED: return "unsupported";
    case CMF_E_NOMEM: return "out of memory";
    case CMF_E_ARG: return "bad argument";
    case CMF_E_INTEGRITY: return "integrity check failed";
    case CMF_E_NOT_FOUND: return "not found";
    }
    return "unknown status";
}

cmf_status cmf_err(cmf_status st, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g_msg, sizeof g_msg, fmt, ap);
    va_end(ap);
    return st;
}

cmf_status cmf_err_prefix(cmf_status st, const char *fmt, ...) {
    char old[sizeof g_msg], pre[256];
    memcpy(old, g_msg, sizeof old);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(pre, sizeof pre, fmt, ap);
    va_end(ap);
    size_t a = strlen(pre);
    if (a >= sizeof g_msg) a = sizeof g_msg - 1;
    memcpy(g_msg, pre, a);
    size_t b = strlen(old);
    if (b > sizeof g_msg - 1 - a) b = sizeof g_msg - 1 - a;
    memcpy(g_msg + a, old, b);
    g_msg[a + b] = 0;
    return st;
}

void cmf_err_clear(void) { g_msg[0] = 0; }
