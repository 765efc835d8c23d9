/* dynload.c — cuBLAS and NCCL loaded on first use (dlopen), not at program start.
 *
 * Linking libcublas (and with it libcublasLt) and libnccl the ordinary way maps and relocates several hundred MB of
 * library at every start: a CUDA-enabled `cmf info` had a 224 MB resident set against 5 MB without CUDA. Only the
 * cuda backend and tensor parallelism need those libraries, so this file defines the few entry points the project
 * calls (under their ABI names: cublas_v2.h maps cublasCreate to cublasCreate_v2 and so on; the headers' prototypes
 * check every signature here at compile time) as forwarders that open the library on the first call and resolve the
 * symbol once (kept in an atomic pointer). The same idea as ggml's dynamically loaded backends, at the granularity of the two vendor libraries.
 *
 * Paths: the library found at configure time (CMF_CUBLAS_LIB / CMF_NCCL_PATH, absolute), then the soname through the
 * loader's search path. A library that cannot be loaded is not fatal: the forwarder returns the library's own
 * "not initialized" / "system error" status, and the status-string functions return the loader's message, so the
 * caller's usual error path (gemm.cu, tp_nccl.cu) names the problem ("cublas: create: libcublas.so.13: cannot open
 * shared object file"). Thread-safe: each library is opened under pthread_once. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>

#include <cublas_v2.h>
#ifdef CMF_HAVE_NCCL
#include <nccl.h>
#endif

#define CMF_STR_(x) #x
#define CMF_STR(x) CMF_STR_(x) /* the macro-expanded name: CMF_STR(cublasCreate) is "cublasCreate_v2" */

typedef struct {
    const char *path, *soname;
    pthread_once_t once;
    void *handle;
    char why[512]; /* the loader's message when the library could not be opened */
} dyn_lib;

static void *dyn_sym(dyn_lib *L, void (*open_once)(void), const char *name) {
    pthread_once(&L->once, open_once);
    if (!L->handle) return NULL;
    return dlsym(L->handle, name); /* a missing symbol: the forwarder returns the library's failure status */
}

static void dyn_open(dyn_lib *L) {
    const char *err = "not found";
    if (L->path && L->path[0]) {
        L->handle = dlopen(L->path, RTLD_NOW | RTLD_LOCAL);
        if (L->handle) return;
        err = dlerror();
    }
    L->handle = dlopen(L->soname, RTLD_NOW | RTLD_LOCAL);
    if (!L->handle) {
        const char *e2 = dlerror();
        snprintf(L->why, sizeof L->why, "%s", e2 ? e2 : err);
    }
}

/* ---- cuBLAS ---------------------------------------------------------------------------------------------------- */
#ifndef CMF_CUBLAS_LIB
#define CMF_CUBLAS_LIB ""
#endif
#ifndef CMF_CUBLAS_SONAME
#define CMF_CUBLAS_SONAME "libcublas.so"
#endif
static dyn_lib g_cublas = {CMF_CUBLAS_LIB, CMF_CUBLAS_SONAME, PTHREAD_ONCE_INIT, NULL, {0}};
static void cublas_open(void) { dyn_open(&g_cublas); }

/* Resolves `fn` (a macro name is expanded first) into a local pointer `p` of type `type`; returns `fail` when the
 * library or the symbol is missing. */
#define CUBLAS_FWD(type, fn, fail)                                                                                     \
    static _Atomic(type) p_;                                                                                           \
    type p = atomic_load_explicit(&p_, memory_order_acquire);                                                          \
    if (!p && (p = (type)dyn_sym(&g_cublas, cublas_open, CMF_STR(fn))) != NULL)                                       \
        atomic_store_explicit(&p_, p, memory_order_release);                                                           \
    if (!p) return fail

cublasStatus_t CUBLASWINAPI cublasCreate(cublasHandle_t *handle) {
    typedef cublasStatus_t (*fn_t)(cublasHandle_t *);
    CUBLAS_FWD(fn_t, cublasCreate, CUBLAS_STATUS_NOT_INITIALIZED);
    return p(handle);
}

cublasStatus_t CUBLASWINAPI cublasDestroy(cublasHandle_t handle) {
    typedef cublasStatus_t (*fn_t)(cublasHandle_t);
    CUBLAS_FWD(fn_t, cublasDestroy, CUBLAS_STATUS_NOT_INITIALIZED);
    return p(handle);
}

cublasStatus_t CUBLASWINAPI cublasSetStream(cublasHandle_t handle, cudaStream_t stream) {
    typedef cublasStatus_t (*fn_t)(cublasHandle_t, cudaStream_t);
    CUBLAS_FWD(fn_t, cublasSetStream, CUBLAS_STATUS_NOT_INITIALIZED);
    return p(handle, stream);
}

const char *CUBLASWINAPI cublasGetStatusString(cublasStatus_t status) {
    typedef const char *(*fn_t)(cublasStatus_t);
    CUBLAS_FWD(fn_t, cublasGetStatusString, g_cublas.why[0] ? g_cublas.why : "cuBLAS not loaded");
    return p(status);
}

cublasStatus_t CUBLASWINAPI cublasSgemm(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb,
                                        int m, int n, int k, const float *alpha, const float *A, int lda,
                                        const float *B, int ldb, const float *beta, float *C, int ldc) {
    typedef cublasStatus_t (*fn_t)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int,
                                   const float *, const float *, int, const float *, int, const float *, float *,
                                   int);
    CUBLAS_FWD(fn_t, cublasSgemm, CUBLAS_STATUS_NOT_INITIALIZED);
    return p(handle, transa, transb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc);
}

cublasStatus_t CUBLASWINAPI cublasGemmEx(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb,
                                         int m, int n, int k, const void *alpha, const void *A, cudaDataType Atype,
                                         int lda, const void *B, cudaDataType Btype, int ldb, const void *beta,
                                         void *C, cudaDataType Ctype, int ldc, cublasComputeType_t computeType,
                                         cublasGemmAlgo_t algo) {
    typedef cublasStatus_t (*fn_t)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const void *,
                                   const void *, cudaDataType, int, const void *, cudaDataType, int, const void *,
                                   void *, cudaDataType, int, cublasComputeType_t, cublasGemmAlgo_t);
    CUBLAS_FWD(fn_t, cublasGemmEx, CUBLAS_STATUS_NOT_INITIALIZED);
    return p(handle, transa, transb, m, n, k, alpha, A, Atype, lda, B, Btype, ldb, beta, C, Ctype, ldc, computeType,
             algo);
}

/* ---- NCCL ------------------------------------------------------------------------------------------------------ */
#ifdef CMF_HAVE_NCCL
#ifndef CMF_NCCL_PATH
#define CMF_NCCL_PATH ""
#endif
static dyn_lib g_nccl = {CMF_NCCL_PATH, "libnccl.so.2", PTHREAD_ONCE_INIT, NULL, {0}};
static void nccl_open(void) { dyn_open(&g_nccl); }

#define NCCL_FWD_OR(type, fn, fail)                                                                                    \
    static _Atomic(type) p_;                                                                                           \
    type p = atomic_load_explicit(&p_, memory_order_acquire);                                                          \
    if (!p && (p = (type)dyn_sym(&g_nccl, nccl_open, #fn)) != NULL)                                                   \
        atomic_store_explicit(&p_, p, memory_order_release);                                                           \
    if (!p) return fail
#define NCCL_FWD(type, fn) NCCL_FWD_OR(type, fn, ncclSystemError)

const char *ncclGetErrorString(ncclResult_t result) {
    typedef const char *(*fn_t)(ncclResult_t);
    NCCL_FWD_OR(fn_t, ncclGetErrorString, g_nccl.why[0] ? g_nccl.why : "NCCL not loaded");
    return p(result);
}

ncclResult_t ncclGetVersion(int *version) {
    typedef ncclResult_t (*fn_t)(int *);
    NCCL_FWD(fn_t, ncclGetVersion);
    return p(version);
}

ncclResult_t ncclCommInitAll(ncclComm_t *comm, int ndev, const int *devlist) {
    typedef ncclResult_t (*fn_t)(ncclComm_t *, int, const int *);
    NCCL_FWD(fn_t, ncclCommInitAll);
    return p(comm, ndev, devlist);
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
    typedef ncclResult_t (*fn_t)(ncclComm_t);
    NCCL_FWD(fn_t, ncclCommDestroy);
    return p(comm);
}

ncclResult_t ncclGroupStart(void) {
    typedef ncclResult_t (*fn_t)(void);
    NCCL_FWD(fn_t, ncclGroupStart);
    return p();
}

ncclResult_t ncclGroupEnd(void) {
    typedef ncclResult_t (*fn_t)(void);
    NCCL_FWD(fn_t, ncclGroupEnd);
    return p();
}

ncclResult_t ncclAllReduce(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype,
                           ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
    typedef ncclResult_t (*fn_t)(const void *, void *, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t,
                                 cudaStream_t);
    NCCL_FWD(fn_t, ncclAllReduce);
    return p(sendbuff, recvbuff, count, datatype, op, comm, stream);
}

#if defined(NCCL_WIN_COLL_SYMMETRIC)
ncclResult_t ncclMemAlloc(void **ptr, size_t size) {
    typedef ncclResult_t (*fn_t)(void **, size_t);
    NCCL_FWD(fn_t, ncclMemAlloc);
    return p(ptr, size);
}

ncclResult_t ncclMemFree(void *ptr) {
    typedef ncclResult_t (*fn_t)(void *);
    NCCL_FWD(fn_t, ncclMemFree);
    return p(ptr);
}

ncclResult_t ncclCommWindowRegister(ncclComm_t comm, void *buff, size_t size, ncclWindow_t *win, int winFlags) {
    typedef ncclResult_t (*fn_t)(ncclComm_t, void *, size_t, ncclWindow_t *, int);
    NCCL_FWD(fn_t, ncclCommWindowRegister);
    return p(comm, buff, size, win, winFlags);
}

ncclResult_t ncclCommWindowDeregister(ncclComm_t comm, ncclWindow_t win) {
    typedef ncclResult_t (*fn_t)(ncclComm_t, ncclWindow_t);
    NCCL_FWD(fn_t, ncclCommWindowDeregister);
    return p(comm, win);
}
#endif
#endif
