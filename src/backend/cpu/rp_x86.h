/* rp_x86.h — what the x86 repacked-weight kernels (rp_avx2.c, rp_avx512.c) share: the sanitizer opt-out and an
 * unaligned 4-byte load. Included by those files only, after <immintrin.h> and <string.h>. */
#ifndef CMF_CPU_RP_X86_H
#define CMF_CPU_RP_X86_H

/* clang: no sanitizer instrumentation in these kernels. Under clang's ASan at -O2 (the fuzz build) the fully inlined
 * microkernels took over 10 minutes to compile, as gemm_avx512.c did (tests/fuzz/CMakeLists.txt); no fuzz target
 * reaches them, and the gcc ASan+UBSan build (CMF_SANITIZE, the CI's sanitizer stage) still instruments them. */
#if defined(__clang__)
#define RP_NOSAN __attribute__((no_sanitize("address", "undefined")))
#else
#define RP_NOSAN
#endif

/* The 4 bytes at p as an int32 (any alignment). */
RP_NOSAN static inline int32_t rd32(const int8_t *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return v;
}

#endif
