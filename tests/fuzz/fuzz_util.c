/* fuzz_util.c — see fuzz_util.h. */
#define _GNU_SOURCE /* memfd_create, mkdtemp */
#include "fuzz_util.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cmf.h"

#ifndef CMF_FUZZ_SHARED_DIR
#define CMF_FUZZ_SHARED_DIR "../shared"
#endif

int fz_file_make(fz_file *f, const uint8_t *data, size_t size) {
    f->fd = memfd_create("cmf-fuzz", MFD_CLOEXEC);
    f->path[0] = 0;
    if (f->fd < 0) return -1;
    size_t done = 0;
    while (done < size) {
        ssize_t w = write(f->fd, data + done, size - done);
        if (w <= 0) {
            fz_file_close(f);
            return -1;
        }
        done += (size_t)w;
    }
    snprintf(f->path, sizeof f->path, "/proc/self/fd/%d", f->fd);
    return 0;
}

void fz_file_close(fz_file *f) {
    if (f->fd >= 0) close(f->fd);
    f->fd = -1;
}

static char g_dir[256];

static void remove_dir(void) {
    if (g_dir[0]) rmdir(g_dir); /* only succeeds when the targets cleaned up after themselves */
}

const char *fz_scratch(const char *name) {
    static char path[512];
    if (!g_dir[0]) {
        const char *bases[3] = {getenv("TMPDIR"), "/dev/shm", "/tmp"};
        for (int i = 0; i < 3 && !g_dir[0]; i++) {
            struct stat st;
            if (!bases[i] || stat(bases[i], &st) != 0 || !S_ISDIR(st.st_mode)) continue;
            snprintf(g_dir, sizeof g_dir, "%s/cmf-fuzz-XXXXXX", bases[i]);
            if (!mkdtemp(g_dir)) g_dir[0] = 0;
        }
        if (!g_dir[0]) fz_fail("fuzz harness: cannot create a scratch directory");
        atexit(remove_dir);
    }
    snprintf(path, sizeof path, "%s/%s", g_dir, name);
    return path;
}

const char *fz_shared(const char *rel) {
    static char path[1024];
    const char *base = getenv("CMF_SHARED");
    snprintf(path, sizeof path, "%s/%s", base && *base ? base : CMF_FUZZ_SHARED_DIR, rel);
    return path;
}

char *fz_read(const char *path, size_t *len) {
    FILE *fp = fopen(path, "rb");
    if (!fp) fz_fail("fuzz harness: cannot open %s (set CMF_SHARED to the shared/ folder)", path);
    char *buf = NULL;
    size_t n = 0, cap = 0;
    for (;;) {
        if (cap - n < 65536) {
            cap = cap ? 2 * cap : 1 << 20;
            char *nb = realloc(buf, cap + 1);
            if (!nb) fz_fail("fuzz harness: out of memory reading %s", path);
            buf = nb;
        }
        size_t r = fread(buf + n, 1, cap - n, fp);
        n += r;
        if (r == 0) break;
    }
    fclose(fp);
    buf[n] = 0;
    *len = n;
    return buf;
}

void fz_fail(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("cmf fuzz: broken invariant: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    abort();
}

void fz_check_error(int status, const char *call) {
    static int verbose = -1;
    if (verbose < 0) verbose = getenv("CMF_FUZZ_VERBOSE") != NULL;
    if (verbose)
        fprintf(stderr, "  %s: %s%s%s\n", call, cmf_status_str((cmf_status)status), status ? ": " : "",
                status ? cmf_last_error() : "");
    if (status != CMF_OK && cmf_last_error()[0] == 0)
        fz_fail("%s failed with status %d (%s) and an empty cmf_last_error()", call, status,
                cmf_status_str((cmf_status)status));
}
