/* o1_mem.c — see o1_mem.h. */
#define _POSIX_C_SOURCE 200809L
#include "o1_mem.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* RssAnon of this process in KiB (Linux /proc/self/status), or -1. */
static long rss_anon_kb(void) {
    FILE *f = fopen("/proc/self/status", "r");
    if (!f) return -1;
    char line[256];
    long kb = -1;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "RssAnon: %ld kB", &kb) == 1) break;
    fclose(f);
    return kb;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The child's work; fills *r (r->error set on failure). */
static void measure_here(const char *path, int n_threads, const cmf_session_params *sp, int n_tokens, int chunk,
                         o1_mem_result *r) {
    cmf_model_params mp = {.n_threads = n_threads};
    cmf_model *m = NULL;
    cmf_session *s = NULL;
    int32_t *ids = NULL;
    cmf_status st = cmf_model_load(path, &mp, &m);
    if (st != CMF_OK) goto fail;
    const int V = cmf_model_vocab_size(m);
    ids = malloc((size_t)n_tokens * sizeof *ids);
    if (!ids) {
        snprintf(r->error, sizeof r->error, "out of memory for %d token ids", n_tokens);
        goto out;
    }
    for (int i = 0; i < n_tokens; i++) ids[i] = (int32_t)((37 * (int64_t)i + 11) % V);
    { /* warm-up: weights, thread pool, lazily allocated scratch */
        cmf_session *w = NULL;
        if ((st = cmf_session_new(m, 16, &w)) != CMF_OK) goto fail;
        st = cmf_session_prefill(w, ids, n_tokens < 8 ? n_tokens : 8, NULL);
        cmf_session_free(w);
        if (st != CMF_OK) goto fail;
    }
    long before = rss_anon_kb();
    cmf_session_params p = *sp;
    p.n_ctx = n_tokens;
    if ((st = cmf_session_new_ex(m, &p, &s)) != CMF_OK) goto fail;
    r->state_bytes_new = cmf_session_state_bytes(s);
    r->o1_layers = cmf_session_o1_layers(s);
    const int seal = p.o1_seal > 0 ? p.o1_seal : 32768; /* the runtime's default seal length */
    double t0 = now_s();
    for (int pos = 0; pos < n_tokens;) {
        int n = n_tokens - pos < chunk ? n_tokens - pos : chunk;
        if (r->o1_layers > 0 && pos < seal && pos + n > seal) n = seal - pos; /* chunks may not cross the seal */
        if ((st = cmf_session_prefill(s, ids + pos, n, NULL)) != CMF_OK) goto fail;
        pos += n;
    }
    r->seconds = now_s() - t0;
    r->pos = cmf_session_pos(s);
    r->state_bytes = cmf_session_state_bytes(s);
    long after = rss_anon_kb();
    if (before < 0 || after < 0) snprintf(r->error, sizeof r->error, "cannot read RssAnon from /proc/self/status");
    r->rss_growth_kb = after - before;
    goto out;
fail:
    snprintf(r->error, sizeof r->error, "%s", cmf_last_error());
out:
    cmf_session_free(s);
    cmf_model_free(m);
    free(ids);
}

int o1_mem_measure(const char *path, int n_threads, const cmf_session_params *sp, int n_tokens, int chunk,
                   o1_mem_result *r) {
    memset(r, 0, sizeof *r);
    if (!path || !sp || n_tokens < 1 || chunk < 1) {
        snprintf(r->error, sizeof r->error, "o1_mem_measure: bad argument");
        return -1;
    }
    int fd[2];
    if (pipe(fd) != 0) {
        snprintf(r->error, sizeof r->error, "pipe failed");
        return -1;
    }
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        close(fd[0]), close(fd[1]);
        snprintf(r->error, sizeof r->error, "fork failed");
        return -1;
    }
    if (pid == 0) {
        close(fd[0]);
        o1_mem_result cr;
        memset(&cr, 0, sizeof cr);
        measure_here(path, n_threads, sp, n_tokens, chunk, &cr);
        ssize_t w = write(fd[1], &cr, sizeof cr);
        close(fd[1]);
        _exit(w == (ssize_t)sizeof cr ? 0 : 1);
    }
    close(fd[1]);
    size_t got = 0;
    while (got < sizeof *r) {
        ssize_t n = read(fd[0], (char *)r + got, sizeof *r - got);
        if (n <= 0) break;
        got += (size_t)n;
    }
    close(fd[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    if (got != sizeof *r || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        memset(r, 0, sizeof *r);
        snprintf(r->error, sizeof r->error, "the measuring child process failed (status %d)", status);
        return -1;
    }
    r->error[sizeof r->error - 1] = 0;
    return r->error[0] ? -1 : 0;
}
