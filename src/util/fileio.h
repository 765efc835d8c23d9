/* fileio.h — small file helpers shared by the format, converters and tools. */
#ifndef CMF_UTIL_FILEIO_H
#define CMF_UTIL_FILEIO_H

#include <stddef.h>
#include <stdint.h>

#include "cmf.h"

/* Reads a whole file into a malloc'd buffer with one extra NUL byte after the end (so text can be parsed in
 * place). *len excludes the NUL. Errors: CMF_E_IO (message names the path), CMF_E_NOMEM. */
cmf_status cmf_read_file(const char *path, char **data, size_t *len);
/* cmf_read_file refusing a file (or stream) of more than `max` bytes before reading it whole (CMF_E_IO naming the
 * path and the limit); cmf_read_file is this with 1 GiB. */
cmf_status cmf_read_file_max(const char *path, size_t max, char **data, size_t *len);

/* A read-only memory map of a whole file. */
typedef struct cmf_mmap {
    uint8_t *data;
    size_t size;
} cmf_mmap;

/* Maps `path` read-only (MAP_PRIVATE). An empty file maps to data=NULL, size=0. Errors: CMF_E_IO. */
cmf_status cmf_mmap_open(const char *path, cmf_mmap *m);
void cmf_mmap_close(cmf_mmap *m);

/* Whether `path` names an existing directory / regular file. */
int cmf_is_dir(const char *path);
int cmf_is_file(const char *path);

/* Checks that `path` may be replaced by a newly written file: it does not exist, or it is a regular, writable file
 * (not a directory, device, FIFO or symbolic link, not read-only). Errors: CMF_E_ARG with a message naming the path
 * and the reason. */
cmf_status cmf_check_output_path(const char *path);

/* 1 when a and b name the same existing file (same device and inode), else 0. */
int cmf_same_file(const char *a, const char *b);

/* Joins dir + "/" + name into a malloc'd string (NULL on allocation failure). */
char *cmf_path_join(const char *dir, const char *name);

#endif
