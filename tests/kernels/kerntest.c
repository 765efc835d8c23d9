/* kerntest.c — see kerntest.h. */
#include "kerntest.h"

#include <stdlib.h>
#include <string.h>

#include "quant/dtype.h"

static uint64_t rng = 0x9e3779b97f4a7c15ull;

void kt_seed(uint64_t seed) { rng = seed ? seed : 0x9e3779b97f4a7c15ull; }

uint32_t kt_rnd(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng >> 16);
}

float kt_frand(void) { return (float)kt_rnd() / 4294967296.0f * 2.0f - 1.0f; }

uint8_t *kt_payload(int dtype, int64_t rows, int64_t cols, uint64_t *nbytes) {
    uint32_t shape[2] = {(uint32_t)rows, (uint32_t)cols};
    if (cmf_dtype_nbytes(dtype, 2, shape, nbytes) != 1) return NULL;
    uint8_t *p = malloc(*nbytes ? *nbytes : 1);
    float *src = malloc((size_t)(rows * cols) * sizeof(float));
    if (!p || !src) {
        free(p);
        free(src);
        return NULL;
    }
    for (int64_t i = 0; i < rows * cols; i++) src[i] = kt_frand() * (1.0f + (float)(i % 7));
    if (cmf_quantize(dtype, (uint64_t)rows, (uint64_t)cols, src, p) != CMF_OK) {
        for (uint64_t i = 0; i < *nbytes; i++) p[i] = (uint8_t)kt_rnd();
        if (dtype == CMF_DT_Q4TP || dtype == CMF_DT_Q2TP) {
            uint8_t *par = p + rows * (cols / 32) * (dtype == CMF_DT_Q4TP ? 16 : 8);
            for (int64_t r = 0; r < rows; r++) {
                const uint16_t lo = cmf_f32_to_f16(-8.0f + 4.0f * (float)(kt_rnd() % 1000) / 1000.0f);
                const uint16_t st = cmf_f32_to_f16(0.25f * (float)(kt_rnd() % 1000) / 1000.0f);
                memcpy(par + 4 * r, &lo, 2);
                memcpy(par + 4 * r + 2, &st, 2);
            }
        }
    }
    free(src);
    return p;
}

cmf_tensor kt_tensor(int dtype, int64_t rows, int64_t cols, const uint8_t *data, uint64_t nbytes) {
    cmf_tensor t;
    memset(&t, 0, sizeof t);
    t.name = "test.weight";
    t.dtype = (uint8_t)dtype;
    t.ndim = 2;
    t.shape[0] = (uint32_t)rows;
    t.shape[1] = (uint32_t)cols;
    t.nbytes = nbytes;
    t.data = data;
    return t;
}

int kt_view(int dtype, int64_t rows, int64_t cols, const uint8_t *data, uint64_t nbytes, cmf_weight *w) {
    cmf_tensor t = kt_tensor(dtype, rows, cols, data, nbytes);
    return cmf_weight_view(&t, w) == CMF_OK;
}
