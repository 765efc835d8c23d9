/* Fuzz-style robustness: random byte flips in the envelope / header / directory / masks of a valid file, and
 * random truncations. open() must never crash (run under ASan+UBSan) and must either succeed or fail with a
 * non-empty message; when it succeeds, verify and dequant of every tensor must be safe too. */
#include <stdlib.h>
#include <string.h>

#include "fixture.h"
#include "quant/dtype.h"
#include "testutil.h"

static uint32_t rng(uint32_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 17;
    *s ^= *s << 5;
    return *s;
}

static void try_open(const uint8_t *buf, size_t len, int *n_ok, int *n_err) {
    const char *path = tmp_path("fmt_fuzz.cmf");
    fx_save(path, buf, len);
    cmf_file *f = NULL;
    cmf_status st = cmf_file_open(path, &f);
    if (st != CMF_OK) {
        CHECK_MSG(cmf_last_error()[0] != 0, "status %d with an empty message", st);
        CHECK(f == NULL);
        (*n_err)++;
        return;
    }
    (*n_ok)++;
    char *rep = NULL;
    cmf_file_verify(f, &rep);
    free(rep);
    for (size_t i = 0; i < f->n_tensors; i++) {
        const cmf_tensor *t = &f->tensors[i];
        uint64_t n = cmf_tensor_numel(t);
        if (n > (1u << 20)) continue;
        float *out = malloc((n ? n : 1) * sizeof *out);
        cmf_dequant(t->dtype, t->ndim, t->shape, t->data, t->nbytes, out);
        free(out);
        CHECK(cmf_file_find(f, t->name) == t);
    }
    cmf_file_close(f);
}

int main(void) {
    const char *path = tmp_path("fmt_fuzz_good.cmf");
    CHECK(fx_write(path) == CMF_OK);
    size_t len;
    uint8_t *good = fx_read(path, &len);
    cmf_envelope e;
    cmf_envelope_decode(good, &e);
    size_t meta_end = (size_t)(e.dir_off + e.dir_len); /* envelope + header + directory */
    uint8_t *buf = malloc(len);
    int ok = 0, err = 0;
    for (uint32_t seed = 1; seed <= 400; seed++) {
        uint32_t s = seed * 2654435761u;
        memcpy(buf, good, len);
        int flips = 1 + (int)(rng(&s) % 4);
        for (int k = 0; k < flips; k++) {
            uint32_t r = rng(&s);
            size_t at;
            switch (r % 4) {
            case 0: at = rng(&s) % 128; break;                                          /* envelope */
            case 1: at = (size_t)(e.dir_off + rng(&s) % e.dir_len); break;              /* directory */
            case 2: at = (size_t)(e.masks_off + rng(&s) % e.masks_len); break;           /* masks */
            default: at = rng(&s) % meta_end; break;                                    /* anywhere up front */
            }
            buf[at] = (rng(&s) & 1) ? (uint8_t)rng(&s) : (uint8_t)(buf[at] ^ (1u << (rng(&s) % 8)));
        }
        try_open(buf, len, &ok, &err);
        /* truncation at a random length (biased toward the front) */
        size_t cut = (seed & 1) ? rng(&s) % (meta_end + 64) : rng(&s) % len;
        try_open(good, cut, &ok, &err);
    }
    fprintf(stderr, "fuzz: %d opened, %d refused\n", ok, err);
    CHECK(err > 0 && ok > 0);
    free(buf);
    free(good);
    CMF_TEST_END();
}
