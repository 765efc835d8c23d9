/* dequant.c — whole-tensor decode to f32 for the CMF dtypes (CMF_FORMAT.md §2.1–2.5, §2.8–2.10; q4tp/q2tp in
 * tiledp.c, q1s/q1t in q1x.c), and the
 * open-time payload validation of vbit / vbit_ro (§2.8–2.9). Arithmetic matches the reference Python reader
 * (python/cmf_reader.py): every product is one f32 multiply in the order written in the spec. */
#include <string.h>

#include "quant/dtype.h"
#include "quant/ladder.h"
#include "util/error.h"

static uint16_t rd16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }
static uint32_t rd32(const uint8_t *p) {
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}

static int vbit_width_ok(unsigned b) { return b == 3 || b == 4 || b == 5 || b == 6 || b == 8; }

/* Shared layout of vbit / vbit_ro after validation. */
typedef struct vbit_layout {
    uint64_t rows, cols, ng;
    const uint8_t *bits, *scales, *row_off, *packed; /* row_off NULL for vbit */
} vbit_layout;

static cmf_status vbit_parse(int dtype, int ndim, const uint32_t *shape, const uint8_t *data, uint64_t nbytes,
                             vbit_layout *L) {
    const char *nm = dtype == CMF_DT_VBIT ? "vbit" : "vbit_ro";
    if (ndim != 2) return cmf_err(CMF_E_FORMAT, "%s: shape must be 2-D, got ndim %d", nm, ndim);
    uint64_t rows = shape[0], cols = shape[1];
    if (cols == 0 || cols % 32 != 0)
        return cmf_err(CMF_E_FORMAT, "%s: cols %llu is not a positive multiple of 32", nm, (unsigned long long)cols);
    uint64_t ng = cols / 32;
    if (rows > nbytes)
        return cmf_err(CMF_E_FORMAT, "%s: width header of %llu rows does not fit in nbytes %llu", nm,
                       (unsigned long long)rows, (unsigned long long)nbytes);
    /* rows <= nbytes < 2^64 and ng < 2^27, so 2*rows*ng cannot overflow unless rows is huge; check anyway */
    if (rows > (UINT64_MAX - rows) / 2 / (ng ? ng : 1))
        return cmf_err(CMF_E_FORMAT, "%s: scale table size overflows", nm);
    uint64_t pos = rows + 2 * rows * ng, packed_sum = 0;
    for (uint64_t r = 0; r < rows; r++) {
        unsigned b = data[r];
        if (!vbit_width_ok(b))
            return cmf_err(CMF_E_FORMAT, "%s: payload byte %llu: row %llu width %u is not one of 3,4,5,6,8", nm,
                           (unsigned long long)r, (unsigned long long)r, b);
        uint64_t rb = (cols * b + 7) / 8; /* cols < 2^32: no overflow per row */
        if (packed_sum > UINT64_MAX - rb) return cmf_err(CMF_E_FORMAT, "%s: packed size overflows", nm);
        packed_sum += rb;
    }
    L->rows = rows;
    L->cols = cols;
    L->ng = ng;
    L->bits = data;
    L->scales = data + rows;
    L->row_off = NULL;
    if (dtype == CMF_DT_VBIT) {
        if (pos > UINT64_MAX - packed_sum || pos + packed_sum != nbytes)
            return cmf_err(CMF_E_FORMAT, "%s: nbytes %llu != rows + 2*rows*ng + packed rows = %llu", nm,
                           (unsigned long long)nbytes, (unsigned long long)(pos + packed_sum));
        L->packed = data + pos;
        return CMF_OK;
    }
    uint64_t tab = (rows + 1) * 4;
    if (pos > nbytes || nbytes - pos < tab)
        return cmf_err(CMF_E_FORMAT, "%s: row_off table at payload byte %llu (%llu bytes) runs past nbytes %llu",
                       nm, (unsigned long long)pos, (unsigned long long)tab, (unsigned long long)nbytes);
    const uint8_t *ro = data + pos;
    if (rd32(ro) != 0)
        return cmf_err(CMF_E_FORMAT, "%s: payload byte %llu: row_off[0] is %u, must be 0", nm,
                       (unsigned long long)pos, rd32(ro));
    for (uint64_t r = 0; r < rows; r++) {
        uint64_t a = rd32(ro + 4 * r), b = rd32(ro + 4 * (r + 1));
        uint64_t want = (cols * data[r] + 7) / 8;
        if (b < a || b - a != want)
            return cmf_err(CMF_E_FORMAT, "%s: payload byte %llu: row_off[%llu] - row_off[%llu] = %lld, expected %llu",
                           nm, (unsigned long long)(pos + 4 * (r + 1)), (unsigned long long)(r + 1),
                           (unsigned long long)r, (long long)(b - a), (unsigned long long)want);
    }
    uint64_t packed_off = pos + tab;
    uint64_t last = rd32(ro + 4 * rows);
    if (packed_off + last != nbytes)
        return cmf_err(CMF_E_FORMAT, "%s: packed_off %llu + row_off[rows] %llu != nbytes %llu", nm,
                       (unsigned long long)packed_off, (unsigned long long)last, (unsigned long long)nbytes);
    L->row_off = ro;
    L->packed = data + packed_off;
    return CMF_OK;
}

cmf_status cmf_dtype_check_payload(int dtype, int ndim, const uint32_t *shape, const uint8_t *data,
                                   uint64_t nbytes) {
    if (dtype != CMF_DT_VBIT && dtype != CMF_DT_VBIT_RO) return CMF_OK;
    vbit_layout L;
    return vbit_parse(dtype, ndim, shape, data, nbytes, &L);
}

/* vbit rows: MSB-first b-bit fields, w = (u - (2^(b-1) - 1)) * scale[r][i/32]. */
static void vbit_decode(const vbit_layout *L, float *out) {
    const uint8_t *p = L->packed;
    for (uint64_t r = 0; r < L->rows; r++) {
        unsigned b = L->bits[r];
        uint64_t row_bytes = (L->cols * b + 7) / 8;
        const uint8_t *row = L->row_off ? L->packed + rd32(L->row_off + 4 * r) : p;
        int lvl = (1 << (b - 1)) - 1;
        const uint8_t *sc = L->scales + 2 * r * L->ng;
        for (uint64_t i = 0; i < L->cols; i++) {
            uint64_t bit = i * b, byte = bit / 8;
            unsigned sh = (unsigned)(bit % 8);
            uint32_t win = (uint32_t)row[byte] << 8;
            if (byte + 1 < row_bytes) win |= row[byte + 1];
            uint32_t u = (win >> (16 - b - sh)) & ((1u << b) - 1u);
            out[r * L->cols + i] = (float)((int)u - lvl) * cmf_f16_to_f32(rd16(sc + 2 * (i / 32)));
        }
        p += row_bytes;
    }
}

cmf_status cmf_dequant(int dtype, int ndim, const uint32_t *shape, const uint8_t *data, uint64_t nbytes,
                       float *out) {
    const char *nm = cmf_dtype_name(dtype);
    if (!nm) return cmf_err(CMF_E_UNSUPPORTED, "dequant: unknown dtype id %d", dtype);
    if (dtype == CMF_DT_VBIT || dtype == CMF_DT_VBIT_RO) {
        vbit_layout L;
        cmf_status st = vbit_parse(dtype, ndim, shape, data, nbytes, &L);
        if (st) return st;
        vbit_decode(&L, out);
        return CMF_OK;
    }
    if (dtype == CMF_DT_Q4TP || dtype == CMF_DT_Q2TP) return cmf_dequant_tp(dtype, ndim, shape, data, nbytes, out);
    if (dtype == CMF_DT_Q1S) return cmf_dequant_q1s(ndim, shape, data, nbytes, out);
    if (dtype == CMF_DT_Q1T) return cmf_dequant_q1t(ndim, shape, data, nbytes, out);
    switch (dtype) {
    case CMF_DT_F32: case CMF_DT_F16: case CMF_DT_BF16: case CMF_DT_Q8_ROW: case CMF_DT_Q8_2F:
    case CMF_DT_Q4_BLOCK: case CMF_DT_Q4_TILED: case CMF_DT_Q1: break;
    default: return cmf_err(CMF_E_UNSUPPORTED, "dequant: dtype %s (%d) has no decoder", nm, dtype);
    }
    uint64_t want;
    int k = cmf_dtype_nbytes(dtype, ndim, shape, &want);
    if (k < 0) return cmf_err(CMF_E_FORMAT, "dequant %s: shape product overflows", nm);
    if (k == 0) return cmf_err(CMF_E_FORMAT, "dequant %s: bad shape (ndim %d)", nm, ndim);
    if (want != nbytes)
        return cmf_err(CMF_E_FORMAT, "dequant %s: nbytes %llu, expected %llu for the shape", nm,
                       (unsigned long long)nbytes, (unsigned long long)want);
    uint64_t n = 1;
    for (int i = 0; i < ndim; i++) n *= shape[i];
    switch (dtype) {
    case CMF_DT_F32: memcpy(out, data, n * 4); return CMF_OK;
    case CMF_DT_F16:
        for (uint64_t i = 0; i < n; i++) out[i] = cmf_f16_to_f32(rd16(data + 2 * i));
        return CMF_OK;
    case CMF_DT_BF16:
        for (uint64_t i = 0; i < n; i++) out[i] = cmf_bf16_to_f32(rd16(data + 2 * i));
        return CMF_OK;
    case CMF_DT_Q8_ROW:
    case CMF_DT_Q8_2F: {
        if (ndim != 2) return cmf_err(CMF_E_FORMAT, "dequant %s: shape must be 2-D, got ndim %d", nm, ndim);
        uint64_t rows = shape[0], cols = shape[1];
        const uint8_t *rs = data + n, *cs = rs + 2 * rows;
        for (uint64_t r = 0; r < rows; r++) {
            float s = cmf_f16_to_f32(rd16(rs + 2 * r));
            for (uint64_t c = 0; c < cols; c++) {
                float v = (float)(int8_t)data[r * cols + c] * s;
                if (dtype == CMF_DT_Q8_2F) v *= cmf_f16_to_f32(rd16(cs + 2 * c));
                out[r * cols + c] = v;
            }
        }
        return CMF_OK;
    }
    case CMF_DT_Q4_BLOCK:
    case CMF_DT_Q4_TILED: {
        uint64_t G = n / 32 + (n % 32 != 0);
        for (uint64_t g = 0; g < G; g++) {
            const uint8_t *nib, *sc;
            if (dtype == CMF_DT_Q4_BLOCK) {
                nib = data + 16 * g;
                sc = data + 16 * G + 2 * g;
            } else {
                sc = data + 18 * g;
                nib = sc + 2;
            }
            float s = cmf_f16_to_f32(rd16(sc));
            for (unsigned k = 0; k < 32; k++) {
                uint64_t i = 32 * g + k;
                if (i >= n) break;
                int q = (k & 1) ? (nib[k / 2] >> 4) : (nib[k / 2] & 15);
                out[i] = (float)(q - 8) * s;
            }
        }
        return CMF_OK;
    }
    case CMF_DT_Q1: {
        uint64_t G = n / 32 + (n % 32 != 0);
        for (uint64_t g = 0; g < G; g++) {
            const uint8_t *t = data + 6 * g;
            float s = cmf_f16_to_f32(rd16(t));
            for (unsigned k = 0; k < 32 && 32 * g + k < n; k++)
                out[32 * g + k] = ((t[2 + k / 8] >> (k % 8)) & 1) ? s : -s;
        }
        return CMF_OK;
    }
    }
    return cmf_err(CMF_E_UNSUPPORTED, "dequant: dtype %s (%d) has no decoder", nm, dtype);
}
