/* chat_pty.c — drives `cmf chat` at a pseudo-terminal to check its line editing (libedit, tools/cmf/chat.c).
 *
 *   chat_pty CMF_BIN MODEL OUT_FILE [cmf chat options...]
 *
 * Runs `CMF_BIN chat MODEL options...` with stdin and stderr on a pty (so chat.c sees a terminal and prompts there)
 * and stdout to OUT_FILE (the replies only), then types, each time after the prompt "> " has appeared:
 *   1. "hx", Backspace, "i", Ctrl-A, "o", Ctrl-E, Enter -> "ohi" only if the editing keys work
 *      (Ctrl-A = start of line, Ctrl-E = end, Backspace deletes the character before the cursor)
 *   2. Up, Enter                                          -> "ohi" again from this session's history
 *   3. Ctrl-C at the prompt                               -> "(Ctrl-C again to quit" and the prompt comes back
 *   4. "/exit", Enter
 * The caller compares OUT_FILE with the replies of the same options to the piped input "ohi\nohi\n".
 * Exit 0 when the session ran to its end, 1 on a failure (the terminal transcript is printed), 77 (skip) when cmf
 * was built without libedit (CMF_HAVE_LIBEDIT unset for this program too). */
#define _XOPEN_SOURCE 600
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifndef CMF_HAVE_LIBEDIT
int main(void) {
    fprintf(stderr, "chat_pty: cmf was built without libedit: no line editing to test\n");
    return 77;
}
#else
#define TRANSCRIPT_CAP (1 << 20)
#define WAIT_MS 60000 /* per step; generous for sanitizer builds on a loaded machine */

static char g_buf[TRANSCRIPT_CAP];
static size_t g_len, g_seen; /* transcript length; how far the last expect() matched */

static long now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000L + ts.tv_nsec / 1000000L;
}

/* Reads from the pty until `want` appears after the previous match; 1 when found, 0 on timeout or end. */
static int expect(int fd, const char *want) {
    long end = now_ms() + WAIT_MS;
    for (;;) {
        g_buf[g_len] = '\0';
        char *hit = strstr(g_buf + g_seen, want);
        if (hit) {
            g_seen = (size_t)(hit - g_buf) + strlen(want);
            return 1;
        }
        long left = end - now_ms();
        if (left <= 0) return 0;
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, (int)left) <= 0) continue;
        ssize_t n = read(fd, g_buf + g_len, TRANSCRIPT_CAP - 1 - g_len);
        if (n <= 0) return 0; /* EIO: the child closed the terminal */
        g_len += (size_t)n;
    }
}

static int type(int fd, const char *keys) {
    size_t n = strlen(keys);
    return write(fd, keys, n) == (ssize_t)n;
}

static int fail(const char *step, pid_t pid) {
    g_buf[g_len] = '\0';
    fprintf(stderr, "chat_pty: %s\n--- terminal transcript ---\n%s\n---\n", step, g_buf);
    if (pid > 0) {
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
    }
    return 1;
}

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: chat_pty CMF_BIN MODEL OUT_FILE [options...]\n");
        return 2;
    }
    int master = posix_openpt(O_RDWR | O_NOCTTY);
    if (master < 0 || grantpt(master) || unlockpt(master)) return fail("no pseudo-terminal", -1);
    const char *slave_name = ptsname(master);
    if (!slave_name) return fail("ptsname", -1);
    int out = open(argv[3], O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (out < 0) return fail("cannot create the output file", -1);
    pid_t pid = fork();
    if (pid < 0) return fail("fork", -1);
    if (pid == 0) {
        setsid();
        int slave = open(slave_name, O_RDWR); /* becomes the controlling terminal: Ctrl-C sends SIGINT */
        if (slave < 0) _exit(126);
        dup2(slave, 0);
        dup2(out, 1);
        dup2(slave, 2);
        close(master);
        if (slave > 2) close(slave);
        close(out);
        setenv("TERM", "xterm", 1);
        char **args = calloc((size_t)argc + 1, sizeof *args);
        if (!args) _exit(126);
        int k = 0;
        args[k++] = argv[1];
        args[k++] = "chat";
        args[k++] = argv[2];
        for (int i = 4; i < argc; i++) args[k++] = argv[i];
        execv(argv[1], args);
        _exit(127);
    }
    close(out);
    if (!expect(master, "> ")) return fail("no first prompt", pid);
    if (!type(master, "hx\x7fi\x01o\x05\r")) return fail("write", pid);
    if (!expect(master, "turn 1:") || !expect(master, "> ")) return fail("turn 1 did not run", pid);
    if (!type(master, "\x1b[A\r")) return fail("write", pid);
    if (!expect(master, "turn 2:") || !expect(master, "> ")) return fail("turn 2 (history) did not run", pid);
    /* a signal is not queued like keys: wait until the prompt is surely blocked reading before Ctrl-C */
    struct timespec settle = {0, 300 * 1000000L};
    nanosleep(&settle, NULL);
    if (!type(master, "\x03")) return fail("write", pid);
    if (!expect(master, "(Ctrl-C again to quit") || !expect(master, "> "))
        return fail("Ctrl-C at the prompt did not give the prompt back", pid);
    if (!type(master, "/exit\r")) return fail("write", pid);
    int status = 0;
    long end = now_ms() + WAIT_MS;
    while (waitpid(pid, &status, WNOHANG) == 0) {
        if (now_ms() > end) return fail("cmf chat did not exit after /exit", pid);
        char tmp[4096]; /* keep draining the terminal so the child never blocks writing to it */
        struct pollfd p = {.fd = master, .events = POLLIN};
        if (poll(&p, 1, 50) > 0 && read(master, tmp, sizeof tmp) <= 0) {
            struct timespec ts = {0, 10 * 1000000L}; /* closed (EIO): just wait for the exit */
            nanosleep(&ts, NULL);
        }
    }
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) return fail("cmf chat did not exit with status 0", -1);
    g_buf[g_len] = '\0';
    if (strstr(g_buf, "ERROR: AddressSanitizer") || strstr(g_buf, "runtime error:"))
        return fail("sanitizer report", -1);
    close(master);
    return 0;
}
#endif
