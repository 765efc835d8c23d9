/* test_dynload.c — cuBLAS and NCCL are opened on first use (src/backend/cuda/dynload.c), not at program start.
 * Runs without a GPU (the status-string and version calls need no device), so CI checks it:
 *   1. before any call, /proc/self/maps holds no libcublas / libnccl mapping (nothing was linked in);
 *   2. cublasGetStatusString goes through to the real library (its own texts, "success" in cuBLAS 13, which differ
 *      per status; not the forwarder's "not loaded" fallback), and libcublas is mapped afterwards;
 *   3. with NCCL: ncclGetVersion returns the library's version code (>= 2.0.0) and libnccl is mapped afterwards. */
#include <stdio.h>
#include <string.h>

#include <cublas_v2.h>
#ifdef CMF_HAVE_NCCL
#include <nccl.h>
#endif

#include "testutil.h"

/* 1 when a mapping whose path contains `name` is in this process's address space. */
static int mapped(const char *name) {
    FILE *f = fopen("/proc/self/maps", "r");
    if (!f) return -1;
    char line[4096];
    int found = 0;
    while (!found && fgets(line, sizeof line, f)) found = strstr(line, name) != NULL;
    fclose(f);
    return found;
}

int main(void) {
    CHECK(mapped("libcublas") == 0);
    const char *s = cublasGetStatusString(CUBLAS_STATUS_SUCCESS);
    const char *e = cublasGetStatusString(CUBLAS_STATUS_NOT_INITIALIZED);
    CHECK(s != NULL && e != NULL);
    if (s && e) {
        printf("cublasGetStatusString: SUCCESS \"%s\", NOT_INITIALIZED \"%s\"\n", s, e);
        CHECK(strcmp(s, e) != 0);
        CHECK(strstr(s, "not loaded") == NULL && strstr(s, "cannot open") == NULL);
    }
    CHECK(mapped("libcublas") == 1);
#ifdef CMF_HAVE_NCCL
    CHECK(mapped("libnccl") == 0);
    int v = 0;
    ncclResult_t r = ncclGetVersion(&v);
    printf("ncclGetVersion = %d (%s)\n", v, r == ncclSuccess ? "ok" : ncclGetErrorString(r));
    CHECK(r == ncclSuccess && v >= 20000);
    CHECK(mapped("libnccl") == 1);
#endif
    CMF_TEST_END();
}
