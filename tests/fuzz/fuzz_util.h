/* fuzz_util.h — helpers shared by the libFuzzer targets in tests/fuzz/ (see README.md there).
 *
 * The library reads files by path (cmf_file_open, cmf_st_open, cmf_convert_gguf), so a target writes its input to
 * an anonymous in-memory file (memfd) and passes "/proc/self/fd/N": no disk I/O and nothing to clean up. */
#ifndef CMF_FUZZ_UTIL_H
#define CMF_FUZZ_UTIL_H

#include <stddef.h>
#include <stdint.h>

/* An in-memory file holding data[0..size). fd is -1 when it could not be made (the target then skips the input). */
typedef struct fz_file {
    int fd;
    char path[64]; /* "/proc/self/fd/N" */
} fz_file;

/* Creates the file. Returns 0, or -1 (errno set) when memfd_create or the write fails. */
int fz_file_make(fz_file *f, const uint8_t *data, size_t size);
/* Closes it (the memory is released). */
void fz_file_close(fz_file *f);

/* A scratch directory private to this process, created on first call (under $TMPDIR, else /dev/shm, else /tmp),
 * and a path inside it: dir + "/" + name in a static buffer. Aborts when no directory can be made (the harness,
 * not the library, failed). */
const char *fz_scratch(const char *name);

/* Path of shared test data: $CMF_SHARED/rel, else the build's CMF_SHARED_DIR/rel (static buffer). */
const char *fz_shared(const char *rel);

/* Reads a whole file (malloc'd, NUL-terminated, *len without the NUL); aborts on failure (a harness error). */
char *fz_read(const char *path, size_t *len);

/* Reports a broken invariant (a library bug that is not a memory error, e.g. a converted file that does not open)
 * on stderr and aborts, so that libFuzzer saves the input as a crash. */
void fz_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

/* Checks the error contract after a failing call: cmf_last_error() is not empty. With CMF_FUZZ_VERBOSE set in the
 * environment, also prints every call's outcome (to see what a seed reaches). */
void fz_check_error(int status, const char *call);

#endif
