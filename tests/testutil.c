#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>

int cmf_test_failures = 0;

const char *shared_path(const char *rel) {
    static char buf[4096];
    const char *root = getenv("CMF_SHARED");
    snprintf(buf, sizeof buf, "%s/%s", root ? root : "../shared", rel);
    return buf;
}

const char *tmp_path(const char *name) {
    static char buf[4096];
    const char *root = getenv("CMF_TMP");
    snprintf(buf, sizeof buf, "%s/%s", root ? root : "/tmp", name);
    return buf;
}

const char *testdata_path(const char *rel) {
    static char buf[4096];
    const char *root = getenv("CMF_TESTDATA");
    snprintf(buf, sizeof buf, "%s/%s", root ? root : "tests/data", rel);
    return buf;
}
