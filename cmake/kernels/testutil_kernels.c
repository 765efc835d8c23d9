/* testutil_kernels.c — the part of tests/testutil.c the kernel tests use (the failure counter behind CHECK), for the
 * kernel-only build of cmake/kernels: the rest of testutil.c needs the safetensors reader, which needs cJSON,
 * which the cross build does not have. */
#include "testutil.h"

int cmf_test_failures = 0;
