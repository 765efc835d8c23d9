/* cpu.c — run-time choice of the kernel path from CPUID (x86-64) or the target and AT_HWCAP (arm64), and its report
 * string. Sources: Intel SDM vol. 2 (CPUID leaves 1 and 7, XGETBV/XCR0 state bits), AMD APM vol. 3; Linux arm64
 * elf_hwcaps (HWCAP_ASIMDDP). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/kern.h"
#include "util/error.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif
#if defined(__aarch64__) && defined(__linux__)
#include <sys/auxv.h>
#ifndef HWCAP_ASIMDDP
#define HWCAP_ASIMDDP (1 << 20) /* Linux arm64 uapi asm/hwcap.h */
#endif
#endif

typedef struct {
    int avx2, fma, f16c, avx512f, avx512bw, avx512vl, avx512dq, avx512vnni, avx512bf16, neon, dotprod;
} cpu_flags;

static cpu_flags g_flags;
static int g_detected;
static int g_path = -1;
static char g_str[256];

static void detect(void) {
    if (__atomic_load_n(&g_detected, __ATOMIC_ACQUIRE)) return;
    cpu_flags f;
    memset(&f, 0, sizeof f);
#if defined(__x86_64__) || defined(__i386__)
    unsigned a, b, c, d;
    if (__get_cpuid(1, &a, &b, &c, &d)) {
        const int osxsave = (c >> 27) & 1, avx = (c >> 28) & 1;
        f.fma = (c >> 12) & 1;
        f.f16c = (c >> 29) & 1;
        unsigned xlo = 0, xhi = 0;
        if (osxsave) __asm__ volatile("xgetbv" : "=a"(xlo), "=d"(xhi) : "c"(0));
        const int ymm_ok = (xlo & 6) == 6, zmm_ok = (xlo & 0xe6) == 0xe6;
        if (__get_cpuid_count(7, 0, &a, &b, &c, &d) && avx && ymm_ok) {
            f.avx2 = (b >> 5) & 1;
            if (zmm_ok) {
                f.avx512f = (b >> 16) & 1;
                f.avx512dq = (b >> 17) & 1;
                f.avx512bw = (b >> 30) & 1;
                f.avx512vl = (b >> 31) & 1;
                f.avx512vnni = (c >> 11) & 1;
                if (__get_cpuid_count(7, 1, &a, &b, &c, &d)) f.avx512bf16 = (a >> 5) & 1;
            }
        }
        if (!(avx && ymm_ok)) f.fma = f.f16c = 0;
    }
#elif defined(__aarch64__)
    f.neon = 1; /* AdvSIMD is part of the base AArch64 ISA */
#if defined(__ARM_FEATURE_DOTPROD)
    f.dotprod = 1;
#elif defined(__linux__)
    f.dotprod = (getauxval(AT_HWCAP) & HWCAP_ASIMDDP) != 0; /* SDOT/UDOT (FEAT_DotProd), as kern_neon.c reads it */
#endif
#endif
    g_flags = f;
    __atomic_store_n(&g_detected, 1, __ATOMIC_RELEASE);
}

int cmf_cpu_path_supported(int path) {
    detect();
    const cpu_flags *f = &g_flags;
    switch (path) {
    case CMF_CPU_SCALAR:
    case CMF_CPU_F32REF: return 1;
    case CMF_CPU_AVX2: return cmf_kern_avx2 && f->avx2 && f->fma && f->f16c;
    case CMF_CPU_AVX512:
        return cmf_kern_avx512 && f->avx512f && f->avx512bw && f->avx512vl && f->avx512dq && f->avx512vnni &&
               f->f16c && f->fma;
    case CMF_CPU_NEON: return cmf_kern_neon && f->neon;
    default: return 0;
    }
}

const char *cmf_cpu_path_name(int path) {
    switch (path) {
    case CMF_CPU_SCALAR: return "scalar";
    case CMF_CPU_NEON: return "neon";
    case CMF_CPU_AVX2: return "avx2";
    case CMF_CPU_AVX512: return "avx512-vnni";
    case CMF_CPU_F32REF: return "f32ref";
    default: return "?";
    }
}

int cmf_cpu_path_from_env(void) {
    const char *e = getenv("CMF_CPU_PATH");
    if (!e || !*e) return -1;
    static const int paths[] = {CMF_CPU_SCALAR, CMF_CPU_NEON, CMF_CPU_AVX2, CMF_CPU_AVX512};
    for (size_t i = 0; i < sizeof paths / sizeof paths[0]; i++)
        if (!strcmp(e, cmf_cpu_path_name(paths[i])) || (paths[i] == CMF_CPU_AVX512 && !strcmp(e, "avx512")))
            return cmf_cpu_path_supported(paths[i]) ? paths[i] : -2;
    return -2;
}

int cmf_cpu_path(void) {
    int p = __atomic_load_n(&g_path, __ATOMIC_ACQUIRE);
    if (p >= 0) return p;
    p = cmf_cpu_path_from_env();
    if (p < 0) {
        p = CMF_CPU_SCALAR;
        const int order[] = {CMF_CPU_AVX512, CMF_CPU_AVX2, CMF_CPU_NEON};
        for (int i = 0; i < 3; i++)
            if (cmf_cpu_path_supported(order[i])) {
                p = order[i];
                break;
            }
    }
    __atomic_store_n(&g_path, p, __ATOMIC_RELEASE);
    return p;
}

cmf_status cmf_cpu_set_path(int path) {
    if (!cmf_cpu_path_supported(path))
        return cmf_err(CMF_E_UNSUPPORTED, "cpu: path %s (%d) is not supported by this CPU or build",
                       cmf_cpu_path_name(path), path);
    __atomic_store_n(&g_path, path, __ATOMIC_RELEASE);
    return CMF_OK;
}

const cmf_kern *cmf_kern_active(void) {
    switch (cmf_cpu_path()) {
    case CMF_CPU_AVX512: return cmf_kern_avx512;
    case CMF_CPU_AVX2: return cmf_kern_avx2;
    case CMF_CPU_NEON: return cmf_kern_neon;
    default: return &cmf_kern_scalar;
    }
}

const char *cmf_cpu_features_str(void) {
    detect();
    const cpu_flags *f = &g_flags;
    char feats[160] = "";
    const struct {
        int on;
        const char *name;
    } list[] = {{f->avx2, "avx2"},         {f->fma, "fma"},           {f->f16c, "f16c"},
                {f->avx512f, "avx512f"},   {f->avx512bw, "avx512bw"}, {f->avx512vl, "avx512vl"},
                {f->avx512dq, "avx512dq"}, {f->avx512vnni, "avx512vnni"}, {f->avx512bf16, "avx512bf16"},
                {f->neon, "neon"},         {f->dotprod, "dotprod"}};
    size_t len = 0;
    for (size_t i = 0; i < sizeof list / sizeof list[0]; i++)
        if (list[i].on && len + strlen(list[i].name) + 2 < sizeof feats)
            len += (size_t)snprintf(feats + len, sizeof feats - len, "%s%s", len ? " " : "", list[i].name);
    snprintf(g_str, sizeof g_str, "%s (cpu: %s)", cmf_cpu_path_name(cmf_cpu_path()), len ? feats : "baseline");
    return g_str;
}
