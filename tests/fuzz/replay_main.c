/* replay_main.c — a main() for the fuzz targets when they are built without libFuzzer (any compiler): runs
 * LLVMFuzzerTestOneInput once on every file named on the command line (directories: every regular file in them,
 * sorted by name), so the seed corpora run as ordinary ctest regression tests (and under ASan+UBSan in CI).
 * A crash, sanitizer report or broken invariant (abort) fails the test; the file being run is printed first. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv) __attribute__((weak));

static int run_file(const char *path) {
    size_t len;
    char *buf = fz_read(path, &len);
    fprintf(stderr, "replay %s (%zu bytes)\n", path, len);
    LLVMFuzzerTestOneInput((const uint8_t *)buf, len);
    free(buf);
    return 1;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static int run_path(const char *path) {
    struct stat st;
    if (stat(path, &st) != 0) {
        fprintf(stderr, "replay: %s does not exist\n", path);
        exit(2);
    }
    if (!S_ISDIR(st.st_mode)) return run_file(path);
    DIR *d = opendir(path);
    if (!d) return 0;
    char **names = NULL;
    size_t n = 0, cap = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        if (n == cap) {
            cap = cap ? 2 * cap : 64;
            char **nn = realloc(names, cap * sizeof *names);
            if (!nn) exit(2);
            names = nn;
        }
        size_t l = strlen(path) + strlen(e->d_name) + 2;
        names[n] = malloc(l);
        if (!names[n]) exit(2);
        snprintf(names[n++], l, "%s/%s", path, e->d_name);
    }
    closedir(d);
    qsort(names, n, sizeof *names, cmp_str);
    int count = 0;
    for (size_t i = 0; i < n; i++) {
        if (stat(names[i], &st) == 0 && S_ISREG(st.st_mode)) count += run_file(names[i]);
        free(names[i]);
    }
    free(names);
    return count;
}

int main(int argc, char **argv) {
    if (LLVMFuzzerInitialize) LLVMFuzzerInitialize(&argc, &argv);
    int count = 0;
    for (int i = 1; i < argc; i++) count += run_path(argv[i]);
    fprintf(stderr, "replay: %d input(s) ran without a crash\n", count);
    if (count == 0) {
        fprintf(stderr, "replay: no inputs (an empty corpus is an error)\n");
        return 1;
    }
    return 0;
}
