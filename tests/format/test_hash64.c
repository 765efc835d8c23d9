/* hash64 test vectors of CMF_FORMAT.md §1.10 (from the reference's roundtrip.rs). */
#include <string.h>

#include "format/format.h"
#include "testutil.h"

int main(void) {
    CHECK(cmf_hash64("", 0) == 0x0000000000000000ull);
    CHECK(cmf_hash64(NULL, 0) == 0x0000000000000000ull);
    CHECK(cmf_hash64("CMF", 3) == 0xb59aa39a074033ecull);
    CHECK(cmf_hash64("0123456789abcdef", 16) == 0x30d401310062ea9full);
    unsigned char all[256];
    for (int i = 0; i < 256; i++) all[i] = (unsigned char)i;
    CHECK(cmf_hash64(all, 256) == 0x9955bb876c0706bfull);
    /* the length is mixed in: a trailing zero byte changes the hash */
    CHECK(cmf_hash64("CMF\0", 4) != cmf_hash64("CMF", 3));
    CMF_TEST_END();
}
