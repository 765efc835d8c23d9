/* client.c — see client.h. */
#include "client.h"

#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "convert/convert.h"
#include "testutil.h"

static int connect_local(int port) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return -1;
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_port = htons((unsigned short)port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    struct timeval tv = {30, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

static int send_all(int fd, const char *p, size_t n) {
    while (n) {
        ssize_t k = send(fd, p, n, MSG_NOSIGNAL);
        if (k <= 0) return -1;
        p += k, n -= (size_t)k;
    }
    return 0;
}

static char *build(const char *method, const char *path, const char *auth, const char *body, size_t *len) {
    size_t bl = body ? strlen(body) : 0, cap = bl + 1024 + (auth ? strlen(auth) : 0);
    char *req = malloc(cap);
    int n = snprintf(req, cap, "%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n", method, path);
    if (auth) n += snprintf(req + n, cap - (size_t)n, "Authorization: Bearer %s\r\n", auth);
    if (body) n += snprintf(req + n, cap - (size_t)n, "Content-Type: application/json\r\nContent-Length: %zu\r\n", bl);
    n += snprintf(req + n, cap - (size_t)n, "\r\n");
    if (body) memcpy(req + n, body, bl);
    *len = (size_t)n + bl;
    return req;
}

/* Undoes chunked transfer coding in place; returns the new length. */
static size_t dechunk(char *b, size_t n) {
    size_t r = 0, w = 0;
    while (r < n) {
        char *end;
        unsigned long sz = strtoul(b + r, &end, 16);
        char *nl = strstr(end, "\r\n");
        if (!nl) break;
        r = (size_t)(nl - b) + 2;
        if (sz == 0 || r + sz > n) break;
        memmove(b + w, b + r, sz);
        w += sz, r += sz + 2;
    }
    b[w] = 0;
    return w;
}

static int read_resp(int fd, http_resp *out) {
    memset(out, 0, sizeof *out);
    size_t cap = 65536, n = 0;
    char *buf = malloc(cap);
    for (;;) {
        if (n + 4096 > cap) buf = realloc(buf, cap *= 2);
        ssize_t k = recv(fd, buf + n, cap - n - 1, 0);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) break;
        n += (size_t)k;
    }
    buf[n] = 0;
    char *sep = strstr(buf, "\r\n\r\n");
    if (!sep || sscanf(buf, "HTTP/1.%*d %d", &out->status) != 1) {
        free(buf);
        out->status = 0;
        return -1;
    }
    size_t hl = (size_t)(sep - buf);
    out->headers = strndup(buf, hl);
    size_t bl = n - hl - 4;
    out->body = malloc(bl + 1);
    memcpy(out->body, sep + 4, bl);
    out->body[bl] = 0;
    out->body_len = bl;
    char v[64];
    if (http_header(out, "Transfer-Encoding", v, sizeof v) && !strcasecmp(v, "chunked"))
        out->body_len = dechunk(out->body, bl);
    free(buf);
    return 0;
}

int http_raw(int port, const char *raw, size_t raw_len, http_resp *out) {
    memset(out, 0, sizeof *out);
    int fd = connect_local(port);
    if (fd < 0) return -1;
    int rc = send_all(fd, raw, raw_len);
    /* a server may answer and close before the whole request is sent (413 on a large body): read what it said */
    int rr = read_resp(fd, out);
    close(fd);
    return out->status > 0 ? 0 : rc ? rc : rr;
}

int http_request(int port, const char *method, const char *path, const char *auth, const char *body,
                 http_resp *out) {
    size_t len;
    char *req = build(method, path, auth, body, &len);
    int rc = http_raw(port, req, len, out);
    free(req);
    return rc;
}

int http_send_only(int port, const char *method, const char *path, const char *auth, const char *body) {
    size_t len;
    char *req = build(method, path, auth, body, &len);
    int fd = connect_local(port);
    if (fd >= 0 && send_all(fd, req, len)) {
        close(fd);
        fd = -1;
    }
    free(req);
    return fd;
}

void http_resp_free(http_resp *r) {
    free(r->headers);
    free(r->body);
    memset(r, 0, sizeof *r);
}

const char *http_header(const http_resp *r, const char *name, char *buf, size_t cap) {
    if (!r->headers) return NULL;
    size_t nl = strlen(name);
    for (const char *p = r->headers; p && *p; p = strstr(p, "\r\n") ? strstr(p, "\r\n") + 2 : NULL) {
        if (!strncasecmp(p, name, nl) && p[nl] == ':') {
            p += nl + 1;
            while (*p == ' ') p++;
            size_t k = strcspn(p, "\r\n");
            if (k >= cap) k = cap - 1;
            memcpy(buf, p, k);
            buf[k] = 0;
            return buf;
        }
    }
    return NULL;
}

/* ---- the server process ---------------------------------------------------------------------------------------- */
static volatile pid_t g_child;

static void on_alarm(int sig) {
    (void)sig;
    if (g_child > 0) kill(g_child, SIGKILL);
    static const char msg[] = "test timed out: server killed\n";
    if (write(2, msg, sizeof msg - 1) < 0) _exit(3);
    _exit(3);
}

int server_start(server_proc *p, const char *model, const char *const *args) {
    const char *bin = getenv("CMF_BIN");
    if (!bin) return -1;
    int pipefd[2];
    if (pipe(pipefd)) return -1;
    const char *argv[32];
    int n = 0;
    argv[n++] = bin, argv[n++] = "serve", argv[n++] = model, argv[n++] = "--port", argv[n++] = "0";
    for (int i = 0; args && args[i] && n < 31; i++) argv[n++] = args[i];
    argv[n] = NULL;
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        dup2(pipefd[1], 1);
        close(pipefd[0]);
        close(pipefd[1]);
        execv(bin, (char *const *)argv);
        _exit(127);
    }
    close(pipefd[1]);
    g_child = pid;
    signal(SIGALRM, on_alarm);
    alarm(240); /* the whole test, whatever happens */
    p->pid = pid;
    p->port = 0;
    char line[512];
    size_t ln = 0;
    struct pollfd pf = {pipefd[0], POLLIN, 0};
    time_t t0 = time(NULL);
    while (ln < sizeof line - 1 && time(NULL) - t0 < 60) {
        if (poll(&pf, 1, 1000) <= 0) continue;
        ssize_t k = read(pipefd[0], line + ln, 1);
        if (k <= 0) break;
        if (line[ln] == '\n') break;
        ln++;
    }
    line[ln] = 0;
    close(pipefd[0]); /* later output (none expected) would get SIGPIPE/EPIPE; the server writes one line only */
    const char *at = strstr(line, "http://");
    const char *colon = at ? strrchr(at, ':') : NULL;
    if (colon) p->port = atoi(colon + 1);
    if (p->port <= 0) {
        server_stop(p);
        return -1;
    }
    return 0;
}

int server_stop(server_proc *p) {
    if (p->pid <= 0) return -1;
    kill(p->pid, SIGTERM);
    int status = 0;
    for (int i = 0; i < 100; i++) {
        pid_t w = waitpid(p->pid, &status, WNOHANG);
        if (w == p->pid) {
            p->pid = 0;
            g_child = 0;
            return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
        }
        struct timespec ts = {0, 100 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    kill(p->pid, SIGKILL);
    waitpid(p->pid, &status, 0);
    p->pid = 0;
    g_child = 0;
    return -1;
}

static void nap_ms(long ms) { nanosleep(&(struct timespec){ms / 1000, (ms % 1000) * 1000000L}, NULL); }

int cli_run_until(const char *const *args, const char *log, const char *until, int wait_s) {
    const char *bin = getenv("CMF_BIN");
    if (!bin) return -1;
    const char *argv[24];
    int n = 0;
    argv[n++] = bin;
    for (int i = 0; args[i] && n < 23; i++) argv[n++] = args[i];
    argv[n] = NULL;
    remove(log);
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        if (!freopen(log, "w", stdout) || dup2(1, 2) < 0) _exit(126);
        execv(bin, (char *const *)argv);
        _exit(127);
    }
    for (int i = 0; i < wait_s * 20; i++) {
        int st = 0;
        if (waitpid(pid, &st, WNOHANG) == pid) return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        FILE *f = until ? fopen(log, "r") : NULL;
        char buf[4096] = "";
        if (f) {
            size_t k = fread(buf, 1, sizeof buf - 1, f);
            buf[k] = 0;
            fclose(f);
        }
        if (until && strstr(buf, until)) {
            kill(pid, SIGTERM);
            waitpid(pid, &st, 0);
            return -2;
        }
        nap_ms(50);
    }
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    return -1;
}

char *slurp_file(const char *path) {
    FILE *f = fopen(path, "r");
    char *b = calloc(1, 16384);
    if (f && b) {
        size_t k = fread(b, 1, 16383, f);
        b[k] = 0;
    }
    if (f) fclose(f);
    return b;
}

cmf_status stories_model(const char *file, char *path, size_t cap, cmf_model **out) {
    if (out) *out = NULL;
    snprintf(path, cap, "%s", tmp_path(file));
    cmf_convert_opts co = {0};
    cmf_status st = cmf_convert_gguf(shared_path("data/models/stories260K-gguf/stories260Ktok512.gguf"), path, &co);
    if (st != CMF_OK || !out) return st;
    cmf_model_params mp = {.n_threads = 1};
    return cmf_model_load(path, &mp, out);
}

int http_post_json(int port, const char *path, const char *body, cJSON **j) {
    http_resp r;
    *j = NULL;
    if (http_request(port, "POST", path, NULL, body, &r) != 0) return -1;
    *j = r.body ? cJSON_Parse(r.body) : NULL;
    const int st = r.status;
    http_resp_free(&r);
    return st;
}

const char *ids_json_buf(char *buf, size_t cap, const int32_t *ids, int n) {
    size_t k = (size_t)snprintf(buf, cap, "[");
    for (int i = 0; i < n && k < cap; i++) k += (size_t)snprintf(buf + k, cap - k, "%s%d", i ? "," : "", (int)ids[i]);
    if (k < cap) snprintf(buf + k, cap - k, "]");
    return buf;
}
