/* hash.c — hash64, the CMF integrity hash (CMF_FORMAT.md §1.10). */
#include <string.h>

#include "format/format.h"

static uint64_t fmix64(uint64_t x) {
    x ^= x >> 33;
    x *= 0xFF51AFD7ED558CCDull;
    x ^= x >> 33;
    x *= 0xC4CEB9FE1A85EC53ull;
    x ^= x >> 33;
    return x;
}

static uint64_t rd64le(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

uint64_t cmf_hash64(const void *data, size_t n) {
    const uint8_t *p = data;
    uint64_t acc = 0, i = 0;
    size_t full = n / 8;
    for (; i < full; i++) acc ^= fmix64(rd64le(p + 8 * i)) ^ (i * 0x9E3779B97F4A7C15ull);
    size_t rem = n % 8;
    if (rem) {
        uint8_t last[8] = {0};
        memcpy(last, p + 8 * full, rem);
        acc ^= fmix64(rd64le(last)) ^ (i * 0x9E3779B97F4A7C15ull);
    }
    acc ^= (uint64_t)n;
    return fmix64(acc);
}
