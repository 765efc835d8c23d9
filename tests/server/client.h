/* client.h — a minimal HTTP/1.1 client over plain sockets (loopback only) and control of a `cmf serve` child
 * process for the server tests. */
#ifndef CMF_TEST_SERVER_CLIENT_H
#define CMF_TEST_SERVER_CLIENT_H

#include <stddef.h>
#include <sys/types.h>

#include "cmf.h"

typedef struct http_resp {
    int status;    /* 0 when no response was read */
    char *headers; /* raw header block (malloc'd) */
    char *body;    /* de-chunked body, NUL-terminated (malloc'd) */
    size_t body_len;
} http_resp;

/* One request on a fresh connection to 127.0.0.1:port ("Connection: close"); `auth` is the API key or NULL;
 * `body` NULL sends none. Reads to EOF (30 s limit). Returns 0, -1 on a socket error. */
int http_request(int port, const char *method, const char *path, const char *auth, const char *body,
                 http_resp *out);
/* Sends a raw request text and reads the answer the same way. */
int http_raw(int port, const char *raw, size_t raw_len, http_resp *out);
void http_resp_free(http_resp *r);
/* Value of header `name` (case-insensitive) copied into buf, or NULL. */
const char *http_header(const http_resp *r, const char *name, char *buf, size_t cap);

/* POSTs the JSON text body to path (no API key); returns the HTTP status (-1 on a socket error) and *j the parsed
 * answer (NULL when it is not JSON; the caller frees it with cJSON_Delete). */
struct cJSON;
int http_post_json(int port, const char *path, const char *body, struct cJSON **j);

/* The ids as a JSON array ("[1,2,3]") in buf (cap bytes; cut short when too small); returns buf. */
const char *ids_json_buf(char *buf, size_t cap, const int32_t *ids, int n);

/* Opens a connection and sends a request without reading (for disconnect tests); returns the socket or -1. */
int http_send_only(int port, const char *method, const char *path, const char *auth, const char *body);

typedef struct server_proc {
    pid_t pid;
    int port;
} server_proc;

/* Starts `$CMF_BIN serve model --port 0 args...` (args NULL-terminated) and waits (60 s at most) for its
 * "listening on" line. Installs an alarm so that a hung test still kills the child. Returns 0 or -1. */
int server_start(server_proc *p, const char *model, const char *const *args);
/* SIGTERM, then SIGKILL after 10 s; returns the exit status (or -1). */
int server_stop(server_proc *p);

/* Runs `$CMF_BIN args...` (args NULL-terminated, at most 22) with stdout and stderr into `log` (removed first, so
 * an earlier run's text is never read); returns its exit status once it exits (128 + signal for a signal), -2 when
 * `until` (NULL: never) appeared in the log first (the child is then SIGTERMed), -1 after wait_s seconds (killed) or
 * without CMF_BIN. */
int cli_run_until(const char *const *args, const char *log, const char *until, int wait_s);
/* The first 16 KiB of a file as a NUL-terminated string (empty when it cannot be read); the caller frees it. */
char *slurp_file(const char *path);

/* The server tests' model: the shared stories260K GGUF converted into tmp_path(file) (testutil.h), its path copied
 * into path[cap]; when out is not NULL the file is also loaded (1 thread) into *out (NULL on failure). Returns CMF_OK
 * or the failing call's status, with cmf_last_error() saying why. */
cmf_status stories_model(const char *file, char *path, size_t cap, cmf_model **out);

#endif
