/* kern_neon.c — the arm64 path (kern.h). Not written yet: on arm64 cmf_matmul uses the scalar reference path
 * (cpu.c never selects a NULL table). */
#include "backend/cpu/kern.h"

const cmf_kern *const cmf_kern_neon = 0;
