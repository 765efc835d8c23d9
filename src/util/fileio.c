/* fileio.c — whole-file reads and read-only memory maps. */
#include "util/fileio.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/error.h"

enum { READ_STREAM_MAX = 1 << 30 }; /* pipes and devices: at most 1 GiB */

/* Reads a non-seekable stream (pipe, /dev/stdin) to its end, refusing more than `max` bytes. */
static cmf_status read_stream(FILE *fp, const char *path, size_t max, char **data, size_t *len) {
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap + 1);
    if (!buf) return cmf_err(CMF_E_NOMEM, "%s: out of memory", path);
    for (;;) {
        if (n == cap) { /* (n <= max here: checked after every read) */
            char *nb = realloc(buf, 2 * cap + 1);
            if (!nb) {
                free(buf);
                return cmf_err(CMF_E_NOMEM, "%s: out of memory", path);
            }
            buf = nb;
            cap *= 2;
        }
        size_t got = fread(buf + n, 1, cap - n, fp);
        n += got;
        if (n > max) {
            free(buf);
            return cmf_err(CMF_E_IO, "%s: more than %zu bytes", path, max);
        }
        if (got == 0) break;
    }
    if (ferror(fp)) {
        free(buf);
        return cmf_err(CMF_E_IO, "%s: read error", path);
    }
    buf[n] = 0;
    *data = buf;
    *len = n;
    return CMF_OK;
}

static cmf_status read_file(const char *path, size_t max_regular, size_t max_stream, char **data, size_t *len) {
    *data = NULL;
    *len = 0;
    struct stat sb;
    if (stat(path, &sb) != 0) return cmf_err(CMF_E_IO, "%s: %s", path, strerror(errno));
    if (S_ISDIR(sb.st_mode)) return cmf_err(CMF_E_IO, "%s: is a directory", path);
    FILE *fp = fopen(path, "rb");
    if (!fp) return cmf_err(CMF_E_IO, "%s: %s", path, strerror(errno));
    if (!S_ISREG(sb.st_mode)) {
        cmf_status st = read_stream(fp, path, max_stream, data, len);
        fclose(fp);
        return st;
    }
    if (fseek(fp, 0, SEEK_END) != 0) {
        fclose(fp);
        return cmf_err(CMF_E_IO, "%s: cannot seek", path);
    }
    long sz = ftell(fp);
    if (sz < 0 || fseek(fp, 0, SEEK_SET) != 0) {
        fclose(fp);
        return cmf_err(CMF_E_IO, "%s: cannot determine size", path);
    }
    if ((unsigned long)sz > max_regular) {
        fclose(fp);
        return cmf_err(CMF_E_IO, "%s: %ld bytes, more than the %zu this file may have", path, sz, max_regular);
    }
    char *buf = malloc((size_t)sz + 1);
    if (!buf) {
        fclose(fp);
        return cmf_err(CMF_E_NOMEM, "%s: cannot allocate %ld bytes", path, sz);
    }
    size_t got = fread(buf, 1, (size_t)sz, fp);
    fclose(fp);
    if (got != (size_t)sz) {
        free(buf);
        return cmf_err(CMF_E_IO, "%s: short read", path);
    }
    buf[sz] = 0;
    *data = buf;
    *len = (size_t)sz;
    return CMF_OK;
}

cmf_status cmf_read_file(const char *path, char **data, size_t *len) {
    return read_file(path, SIZE_MAX, READ_STREAM_MAX, data, len);
}

cmf_status cmf_read_file_max(const char *path, size_t max, char **data, size_t *len) {
    return read_file(path, max, max, data, len);
}

cmf_status cmf_mmap_open(const char *path, cmf_mmap *m) {
    m->data = NULL;
    m->size = 0;
    int fd = open(path, O_RDONLY);
    if (fd < 0) return cmf_err(CMF_E_IO, "%s: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        close(fd);
        return cmf_err(CMF_E_IO, "%s: %s", path, strerror(errno));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        if (S_ISDIR(st.st_mode)) /* the likeliest case: a Hugging Face checkpoint folder, not yet converted */
            return cmf_err(CMF_E_IO, "%s: is a directory, not a model file (a Hugging Face checkpoint is converted "
                           "first: cmf convert DIR -o model.cmf)", path);
        return cmf_err(CMF_E_IO, "%s: not a regular file", path);
    }
    if (st.st_size == 0) {
        close(fd);
        return CMF_OK;
    }
    void *p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (p == MAP_FAILED) return cmf_err(CMF_E_IO, "%s: mmap: %s", path, strerror(errno));
    m->data = p;
    m->size = (size_t)st.st_size;
    return CMF_OK;
}

void cmf_mmap_close(cmf_mmap *m) {
    if (m->data) munmap(m->data, m->size);
    m->data = NULL;
    m->size = 0;
}

int cmf_is_dir(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

int cmf_is_file(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

cmf_status cmf_check_output_path(const char *path) {
    struct stat sb;
    if (lstat(path, &sb) != 0) {
        if (errno == ENOENT) return CMF_OK;
        return cmf_err(CMF_E_ARG, "%s: %s", path, strerror(errno));
    }
    if (S_ISLNK(sb.st_mode))
        return cmf_err(CMF_E_ARG, "%s: is a symbolic link; give the path of the file itself", path);
    if (S_ISDIR(sb.st_mode)) return cmf_err(CMF_E_ARG, "%s: is a directory", path);
    if (!S_ISREG(sb.st_mode))
        return cmf_err(CMF_E_ARG, "%s: is not a regular file (device, FIFO or socket); refusing to replace it", path);
    if (!(sb.st_mode & 0222) || access(path, W_OK) != 0)
        return cmf_err(CMF_E_ARG, "%s: is read-only; refusing to replace it", path);
    return CMF_OK;
}

int cmf_same_file(const char *a, const char *b) {
    struct stat sa, sb;
    if (stat(a, &sa) != 0 || stat(b, &sb) != 0) return 0;
    return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

char *cmf_path_join(const char *dir, const char *name) {
    size_t a = strlen(dir), b = strlen(name);
    char *p = malloc(a + b + 2);
    if (!p) return NULL;
    memcpy(p, dir, a);
    p[a] = '/';
    memcpy(p + a + 1, name, b + 1);
    return p;
}
