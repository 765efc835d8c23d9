/* q1x.c — strict decoders of the overlay dtypes q1s (id 13) and q1t (id 14), CMF_FORMAT.md §2.11–2.12.
 * The reference decoder stops silently at a truncated overlay; here every length is checked before it is used
 * and a payload that does not end exactly where its counts say is an error naming the byte offset. */
#include "quant/dtype.h"
#include "quant/ladder.h"
#include "util/error.h"

static uint16_t rd16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }
static uint32_t rd32(const uint8_t *p) {
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}

/* n = prod(shape) (0 on overflow with *ok = 0). */
static uint64_t numel(int ndim, const uint32_t *shape, int *ok) {
    uint64_t n = 1;
    *ok = 1;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] && n > UINT64_MAX / 64 / shape[i]) *ok = 0;
        n *= shape[i];
    }
    return *ok ? n : 0;
}

cmf_status cmf_dequant_q1s(int ndim, const uint32_t *shape, const uint8_t *data, uint64_t nbytes, float *out) {
    int ok;
    uint64_t n = numel(ndim, shape, &ok);
    if (!ok || ndim < 0 || ndim > 6) return cmf_err(CMF_E_FORMAT, "dequant q1s: bad shape (ndim %d)", ndim);
    uint64_t G = n / 32 + (n % 32 != 0), base = 6 * G;
    if (nbytes < base + 4)
        return cmf_err(CMF_E_FORMAT, "dequant q1s: nbytes %llu cannot hold the q1 base (%llu bytes) and the u32 count",
                       (unsigned long long)nbytes, (unsigned long long)base);
    uint64_t count = rd32(data + base);
    if ((nbytes - base - 4) / 6 < count || nbytes - base - 4 != 6 * count)
        return cmf_err(CMF_E_FORMAT,
                       "dequant q1s: payload byte %llu: count %llu needs %llu overlay bytes, %llu present",
                       (unsigned long long)base, (unsigned long long)count, (unsigned long long)(6 * count),
                       (unsigned long long)(nbytes - base - 4));
    for (uint64_t g = 0; g < G; g++) {
        const uint8_t *t = data + 6 * g;
        float s = cmf_f16_to_f32(rd16(t));
        for (unsigned k = 0; k < 32 && 32 * g + k < n; k++)
            out[32 * g + k] = ((t[2 + k / 8] >> (k % 8)) & 1) ? s : -s;
    }
    const uint8_t *e = data + base + 4;
    for (uint64_t i = 0; i < count; i++, e += 6) {
        uint64_t idx = rd32(e);
        if (idx >= n)
            return cmf_err(CMF_E_FORMAT, "dequant q1s: payload byte %llu: overlay entry %llu index %llu >= n %llu",
                           (unsigned long long)(base + 4 + 6 * i), (unsigned long long)i, (unsigned long long)idx,
                           (unsigned long long)n);
        out[idx] = cmf_f16_to_f32(rd16(e + 4));
    }
    return CMF_OK;
}

cmf_status cmf_dequant_q1t(int ndim, const uint32_t *shape, const uint8_t *data, uint64_t nbytes, float *out) {
    if (ndim != 2) return cmf_err(CMF_E_FORMAT, "dequant q1t: shape must be 2-D, got ndim %d", ndim);
    uint64_t rows = shape[0], cols = shape[1], n = rows * cols; /* u32 x u32 fits u64 */
    if (cols > 65535) return cmf_err(CMF_E_FORMAT, "dequant q1t: cols %llu > 65535", (unsigned long long)cols);
    uint64_t G = n / 32 + (n % 32 != 0), base = 9 * G, rp = base, ent = base + 4 * (rows + 1);
    if (nbytes < ent)
        return cmf_err(CMF_E_FORMAT, "dequant q1t: nbytes %llu cannot hold the base (%llu bytes) and row_ptr[%llu]",
                       (unsigned long long)nbytes, (unsigned long long)base, (unsigned long long)(rows + 1));
    if (rd32(data + rp) != 0)
        return cmf_err(CMF_E_FORMAT, "dequant q1t: payload byte %llu: row_ptr[0] is %u, must be 0",
                       (unsigned long long)rp, rd32(data + rp));
    for (uint64_t r = 0; r < rows; r++)
        if (rd32(data + rp + 4 * (r + 1)) < rd32(data + rp + 4 * r))
            return cmf_err(CMF_E_FORMAT, "dequant q1t: payload byte %llu: row_ptr[%llu] = %u < row_ptr[%llu] = %u",
                           (unsigned long long)(rp + 4 * (r + 1)), (unsigned long long)(r + 1),
                           rd32(data + rp + 4 * (r + 1)), (unsigned long long)r, rd32(data + rp + 4 * r));
    uint64_t total = rd32(data + rp + 4 * rows);
    if (nbytes - ent != 4 * total)
        return cmf_err(CMF_E_FORMAT, "dequant q1t: payload byte %llu: row_ptr[%llu] = %llu entries need %llu bytes, "
                       "%llu present", (unsigned long long)(rp + 4 * rows), (unsigned long long)rows,
                       (unsigned long long)total, (unsigned long long)(4 * total), (unsigned long long)(nbytes - ent));
    static const unsigned POW3[5] = {1, 3, 9, 27, 81};
    for (uint64_t g = 0; g < G; g++) {
        const uint8_t *t = data + 9 * g;
        float s = cmf_f16_to_f32(rd16(t));
        for (unsigned k = 0; k < 32 && 32 * g + k < n; k++) {
            unsigned c = (t[2 + k / 5] / POW3[k % 5]) % 3;
            out[32 * g + k] = c == 1 ? s : c == 2 ? -s : 0.0f;
        }
    }
    for (uint64_t r = 0; r < rows; r++) {
        uint64_t p0 = rd32(data + rp + 4 * r), p1 = rd32(data + rp + 4 * (r + 1));
        for (uint64_t p = p0; p < p1; p++) {
            const uint8_t *e = data + ent + 4 * p;
            uint64_t c = rd16(e);
            if (c >= cols)
                return cmf_err(CMF_E_FORMAT, "dequant q1t: payload byte %llu: row %llu entry col %llu >= cols %llu",
                               (unsigned long long)(ent + 4 * p), (unsigned long long)r, (unsigned long long)c,
                               (unsigned long long)cols);
            out[r * cols + c] = cmf_f16_to_f32(rd16(e + 2));
        }
    }
    return CMF_OK;
}
