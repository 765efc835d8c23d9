/* error.h — the per-thread last-error message behind cmf_last_error() (SQLite's errmsg convention). */
#ifndef CMF_UTIL_ERROR_H
#define CMF_UTIL_ERROR_H

#include "cmf.h"

/* Records a printf-style message for cmf_last_error() on this thread and returns `st`, so that error paths read
 * `return cmf_err(CMF_E_FORMAT, "dir: record %zu: bad dtype %u", i, dt);`. Messages are cut at 1023 bytes. */
cmf_status cmf_err(cmf_status st, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Prefixes the current message with a printf-style context ("loading x.cmf: " + old message); returns `st`. */
cmf_status cmf_err_prefix(cmf_status st, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Clears the message. */
void cmf_err_clear(void);

#endif
