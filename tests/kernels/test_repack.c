/* Tests of the load-time repack (src/backend/cpu/repack.c, rp_avx512.c, rp_avx2.c; layouts in kern.h cmf_rp), for
 * q4_block, q4_tiled, q4tp, q8_row and q8_2f at odd sizes (rows not a multiple of the 16-row group nor of the 32-row
 * panel, one row, several column chunks, q8 also cols % 32 != 0) on every path of this CPU that has repacked kernels
 * (scalar always; AVX2 and AVX-512 VNNI when the CPU has them; under qemu on arm64 the scalar one):
 *  - the layout: every element (u - 8) * scale read back from the copy equals cmf_weight_row_f32's value of the
 *    stored tensor bit for bit (q4tp, both layouts of kern.h on every path: the ladder-code copy's rung of the stored
 *    code on the ladder rebuilt from the copy's t0 and r by the sequential multiplies of CMF_FORMAT.md §2.6, 17 bytes
 *    per 32 values; the f32 copy's stored rung, 20 bytes per 32 values; a new copy takes the codes on the AVX-512 path
 *    and the f32 rungs on the others), pad rows are zero; q8: every
 *    u - 128 equals the stored int8 (0 past cols), every row scale the stored f16;
 *  - the decode kernel (rp_gemv) for 1 and 2 tokens over every group range, and the prefill kernel (rp_gemm) by
 *    panels with column chunks and accumulation (first = 0), against cmf_gemm_ref_i8 (double sums of the scalar
 *    path's decoded blocks): within 1e-5 of the sum of |terms|, nothing written past the rows asked for, and bit
 *    for bit equal to the scalar reference kernels (kern.h's one summation order; q4tp's rebuilt ladder rungs);
 *  - q4_block / q4_tiled with cols % 32 != 0 (stored groups straddling rows, §2.4): the split copy's layout (two copy
 *    rows per stored row, exact), cmf_matmul against a double product, and the same bits for a token whatever the
 *    number of tokens in the call (check_split_case);
 *  - cmf_matmul on a 2-thread pool with the copy (n = 1, 2, 3, 17, 40, with a bias; q8_2f's column scales folded
 *    into the activations as cmf_matmul does), on a row view starting at
 *    row 16 (uses the copy) and at row 3 (reads the mapping): the same bound;
 *  - the registry: views of one tensor share one copy; release frees it; a copy found at the same address over
 *    other bytes is not reused; CMF_CPU_REPACK off (cmf_cpu_set_repack(0)) makes none; a path without repacked
 *    kernels makes none;
 *  - cmf_cpu_repack_set (per path): one arena in the order given, twins and live copies shared, release in any
 *    order; cmf_cpu_repack_page_out keeps the bytes of a tensor in anonymous memory. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/kern.h"
#include "backend/cpu/ops.h"
#include "kerntest.h"
#include "testutil.h"

static double worst_seen;
static long compared;

/* Outputs of got (n tokens x rows, stride ld) off ref by more than 1e-5 * mag; columns rows..ld-1 must stay NaN. */
static int compare(const float *got, const float *ref, const double *mag, int64_t n, int64_t rows, int64_t ld) {
    int bad = 0;
    for (int64_t t = 0; t < n; t++) {
        for (int64_t r = 0; r < rows; r++) {
            const double e = fabs((double)got[t * ld + r] - (double)ref[t * ld + r]), m = mag[t * ld + r];
            if (!(e <= 1e-5 * m + 1e-30)) bad++;
            if (m > 0 && e / m > worst_seen) worst_seen = e / m;
            compared++;
        }
        for (int64_t r = rows; r < ld; r++) bad += !isnan(got[t * ld + r]);
    }
    return bad;
}

/* Outputs of rows [r0, rows) of n tokens (stride ld) whose bits differ between got and want. */
static int64_t diff_bits(const float *got, const float *want, int64_t n, int64_t r0, int64_t rows, int64_t ld) {
    int64_t d = 0;
    for (int64_t t = 0; t < n; t++)
        for (int64_t r = r0; r < rows; r++) d += memcmp(got + t * ld + r, want + t * ld + r, 4) != 0;
    return d;
}

/* q8 layout: every u - 128 against the stored int8 (0 past cols and in pad rows), every row scale against the
 * stored f16. */
static int check_layout_q8(const cmf_weight *w, const cmf_rp *rp) {
    int bad = 0;
    for (int64_t R = 0; R < rp->ngroups * KERN_RP_R; R++) {
        const uint8_t *gp = rp->buf + (size_t)(R / 16) * rp->gstride;
        const int i = (int)(R % 16);
        for (int64_t c = 0; c < 32 * rp->nb; c++) {
            const int v = (int)gp[(c / 32) * 512 + 64 * ((c % 32) / 4) + 4 * i + c % 4] - 128;
            const int want = R < w->full_rows && c < w->cols ? (int8_t)w->data[R * w->cols + c] : 0;
            bad += v != want;
        }
        float s;
        memcpy(&s, gp + rp->nb * 512 + 4 * i, 4);
        const uint8_t *h = w->data + w->full_rows * w->cols + 2 * R;
        const float want = R < w->full_rows ? cmf_f16_to_f32((uint16_t)(h[0] | h[1] << 8)) : 0.0f;
        bad += memcmp(&s, &want, 4) != 0;
    }
    return bad;
}

/* Every element of the copy against the stored tensor's decode. */
static int check_layout(const cmf_weight *w, const cmf_rp *rp) {
    if (rp->q8) return check_layout_q8(w, rp);
    int bad = 0;
    float *row = malloc((size_t)w->cols * sizeof(float));
    for (int64_t R = 0; R < rp->ngroups * KERN_RP_R; R++) {
        const uint8_t *gp = rp->buf + (size_t)(R / 16) * rp->gstride, *sc = gp + rp->nb * 256;
        const int i = (int)(R % 16);
        if (R < w->full_rows) cmf_weight_row_f32(w, R, row);
        float lad[32]; /* q4tp: row i's ladder from its t0 and r (§2.6 step 3: t[c] = t[c-1] * r in f32) */
        if (rp->sbytes == 1) {
            float r;
            memcpy(&lad[0], sc + 4 * i, 4);
            memcpy(&r, sc + 64 + 4 * i, 4);
            for (int c = 1; c < 32; c++) lad[c] = lad[c - 1] * r;
        }
        for (int64_t c = 0; c < w->cols; c++) {
            const int64_t b = c / 32, k = c % 32, m = (k % 16) / 4, j = k % 4;
            const uint8_t byte = gp[b * 256 + 64 * m + 4 * i + j];
            const int u = k < 16 ? byte & 15 : byte >> 4;
            float s;
            if (rp->sbytes == 2) {
                s = cmf_f16_to_f32((uint16_t)(sc[2 * (b * 16 + i)] | sc[2 * (b * 16 + i) + 1] << 8));
            } else if (rp->sbytes == 4) {
                memcpy(&s, sc + 4 * (b * 16 + i), 4);
            } else {
                const uint8_t code = sc[128 + i * rp->nb + b];
                if (code > 31) bad++;
                s = lad[code & 31];
            }
            const float v = (float)(u - 8) * s, want = R < w->full_rows ? row[c] : 0.0f;
            if (memcmp(&v, &want, 4) != 0 && !(v == 0 && want == 0)) bad++;
        }
    }
    free(row);
    return bad;
}

static void check_case(cmf_pool *pool, int path, int dtype, int64_t rows, int64_t cols) {
    const cmf_kern *k = cmf_kern_active();
    uint64_t nbytes;
    uint8_t *p = kt_payload(dtype, rows, cols, &nbytes);
    cmf_weight w;
    CHECK(p && kt_view(dtype, rows, cols, p, nbytes, &w));
    if (!p) return;
    const size_t before = cmf_cpu_repack_bytes();
    CHECK(cmf_cpu_repack_weight(&w) == CMF_OK);
    const cmf_rp *rp = w.rp;
    CHECK_MSG(rp && cmf_rp_of(&w) == rp, "%s %s %lldx%lld: no copy", cmf_cpu_path_name(path), cmf_dtype_name(dtype),
              (long long)rows, (long long)cols);
    if (!rp) {
        free(p);
        return;
    }
    CHECK(cmf_cpu_repack_bytes() == before + rp->gstride * (size_t)rp->ngroups);
    if (dtype == CMF_DT_Q4TP && cmf_rp_tp_layout() == 1) /* 16 nibble bytes + 1 code byte per 32 values, 8 bytes of
                                                            ladder per row (kern.h) */
        CHECK_MSG(rp->sbytes == 1 && rp->gstride == (((size_t)rp->nb * 272 + 128 + 63) & ~(size_t)63),
                  "q4tp gstride %zu for %lld blocks", rp->gstride, (long long)rp->nb);
    if (dtype == CMF_DT_Q4TP && cmf_rp_tp_layout() == 4) /* 16 nibble bytes + 4 bytes of f32 rung per 32 values */
        CHECK_MSG(rp->sbytes == 4 && rp->gstride == (size_t)rp->nb * 320, "q4tp f32 gstride %zu for %lld blocks",
                  rp->gstride, (long long)rp->nb);
    float *col = NULL;
    if (dtype == CMF_DT_Q8_2F) { /* its f16 column scales (§2.3) */
        col = malloc((size_t)cols * sizeof(float));
        const uint8_t *cs = p + rows * cols + 2 * rows;
        for (int64_t c = 0; c < cols; c++) col[c] = cmf_f16_to_f32((uint16_t)(cs[2 * c] | cs[2 * c + 1] << 8));
    }
    const int lbad = check_layout(&w, rp);
    CHECK_MSG(lbad == 0, "%s %lldx%lld: %d elements of the copy differ from the stored tensor", cmf_dtype_name(dtype),
              (long long)rows, (long long)cols, lbad);

    const int64_t ns[] = {1, 2, 3, 17, 40};
    for (size_t ni = 0; ni < sizeof ns / sizeof ns[0]; ni++) {
        const int64_t n = ns[ni], ld = rows + 3;
        float *x = malloc((size_t)(n * cols) * sizeof(float)), *bias = malloc((size_t)rows * sizeof(float));
        for (int64_t i = 0; i < n * cols; i++) x[i] = kt_frand() * (i % 13 == 0 ? 5.0f : 1.0f);
        for (int64_t r = 0; r < rows; r++) bias[r] = kt_frand();
        float *ref = malloc((size_t)(n * ld) * sizeof(float)), *got = malloc((size_t)(n * ld) * sizeof(float));
        float *ref0 = malloc((size_t)(n * ld) * sizeof(float)), *sref = malloc((size_t)(n * ld) * sizeof(float));
        double *mag = malloc((size_t)(n * ld) * sizeof(double)), *mag0 = malloc((size_t)(n * ld) * sizeof(double));
        void *abuf = malloc(cmf_qact_bytes(n, cols));
        cmf_qact a;
        cmf_qact_init(&a, abuf, n, cols);
        cmf_qact_quantize(&a, x, cols, cols, NULL, 1, 0, n);
        cmf_gemm_ref_i8(&w, &a, n, ref, ld, bias, mag);
        cmf_gemm_ref_i8(&w, &a, n, ref0, ld, NULL, mag0);
        float *refm = ref;
        double *magd = mag;
        if (col) { /* cmf_matmul folds q8_2f's column scales into the activations (§2.3): its reference */
            void *cbuf = malloc(cmf_qact_bytes(n, cols));
            cmf_qact ac;
            cmf_qact_init(&ac, cbuf, n, cols);
            cmf_qact_quantize(&ac, x, cols, cols, col, 1, 0, n);
            refm = malloc((size_t)(n * ld) * sizeof(float));
            magd = malloc((size_t)(n * ld) * sizeof(double));
            cmf_gemm_ref_i8(&w, &ac, n, refm, ld, bias, magd);
            free(cbuf);
        }
        if (n <= KERN_GEMV_T) { /* decode kernel over group ranges: all, from group 1, a partial last group */
            const int64_t starts[] = {0, 1};
            for (int si = 0; si < 2; si++) {
                const int64_t g0 = starts[si];
                if (16 * g0 >= rows) continue;
                for (int64_t i = 0; i < n * ld; i++) got[i] = NAN;
                k->rp_gemv(rp, g0, rows - 16 * g0, &a, (int)n, got + 16 * g0, ld);
                for (int64_t t = 0; t < n; t++)
                    for (int64_t r = 0; r < 16 * g0; r++) got[t * ld + r] = ref0[t * ld + r];
                const int bad = compare(got, ref0, mag0, n, rows, ld);
                CHECK_MSG(bad == 0, "%s %s %lldx%lld n=%lld rp_gemv from group %lld: %d off", cmf_cpu_path_name(path),
                          cmf_dtype_name(dtype), (long long)rows, (long long)cols, (long long)n, (long long)g0, bad);
                /* the one summation chain of kern.h: the scalar reference's bits (q4tp: its ladders' bits too) */
                for (int64_t i = 0; i < n * ld; i++) sref[i] = NAN;
                cmf_rp_gemv_scalar(rp, g0, rows - 16 * g0, &a, (int)n, sref + 16 * g0, ld);
                const int64_t dif = diff_bits(got, sref, n, 16 * g0, rows, ld);
                CHECK_MSG(dif == 0, "%s %s %lldx%lld n=%lld rp_gemv from group %lld: %lld outputs not the scalar bits",
                          cmf_cpu_path_name(path), cmf_dtype_name(dtype), (long long)rows, (long long)cols,
                          (long long)n, (long long)g0, (long long)dif);
            }
        }
        for (int ci = 0; ci < 2; ci++) { /* prefill kernel by panels of 32 rows, chunks of 3 blocks (accumulating),
                                            then each row in one chunk (q4tp past 64 blocks: the kernels' sub-chunks) */
            const int64_t ck = ci ? a.nb : 3;
            for (int64_t i = 0; i < n * ld; i++) got[i] = sref[i] = NAN;
            for (int64_t r = 0; r < rows; r += 32) {
                const int nr = rows - r < 32 ? (int)(rows - r) : 32;
                for (int64_t b0 = 0; b0 < a.nb; b0 += ck) {
                    const int64_t kb = a.nb - b0 < ck ? a.nb - b0 : ck;
                    k->rp_gemm(rp, r / 16, nr > 16 ? 2 : 1, nr, b0, kb, &a, 0, n, got + r, ld, bias + r, b0 == 0,
                              b0 + kb == rp->nb);
                    cmf_rp_gemm_scalar(rp, r / 16, nr > 16 ? 2 : 1, nr, b0, kb, &a, 0, n, sref + r, ld, bias + r,
                                       b0 == 0, b0 + kb == rp->nb);
                }
            }
            const int bad = compare(got, ref, mag, n, rows, ld);
            CHECK_MSG(bad == 0, "%s %s %lldx%lld n=%lld rp_gemm (chunks of %lld blocks): %d off",
                      cmf_cpu_path_name(path), cmf_dtype_name(dtype), (long long)rows, (long long)cols, (long long)n,
                      (long long)ck, bad);
            const int64_t dif = diff_bits(got, sref, n, 0, rows, ld);
            CHECK_MSG(dif == 0, "%s %s %lldx%lld n=%lld rp_gemm (chunks of %lld blocks): %lld outputs not the scalar bits",
                      cmf_cpu_path_name(path), cmf_dtype_name(dtype), (long long)rows, (long long)cols, (long long)n,
                      (long long)ck, (long long)dif);
        }
        { /* cmf_matmul with the copy, on the pool */
            for (int64_t i = 0; i < n * ld; i++) got[i] = NAN;
            cmf_matmul(pool, got, ld, x, n, &w, bias);
            const int bad = compare(got, refm, magd, n, rows, ld);
            CHECK_MSG(bad == 0, "%s %s %lldx%lld n=%lld cmf_matmul: %d off", cmf_cpu_path_name(path),
                      cmf_dtype_name(dtype), (long long)rows, (long long)cols, (long long)n, bad);
        }
        for (int64_t v0 = 16; v0 >= 3; v0 -= 13) { /* row views: 16 (a group boundary: the copy), 3 (the mapping) */
            if (rows <= v0) continue;
            const cmf_weight sub = cmf_weight_rows(&w, v0, rows - v0);
            CHECK((cmf_rp_of(&sub) != NULL) == (v0 % 16 == 0));
            for (int64_t i = 0; i < n * ld; i++) got[i] = NAN;
            cmf_matmul(pool, got, ld, x, n, &sub, bias + v0);
            float *rs = malloc((size_t)(n * ld) * sizeof(float));
            double *ms = malloc((size_t)(n * ld) * sizeof(double));
            for (int64_t t = 0; t < n; t++)
                for (int64_t r = 0; r < ld; r++) {
                    rs[t * ld + r] = r < rows - v0 ? refm[t * ld + r + v0] : NAN;
                    ms[t * ld + r] = r < rows - v0 ? magd[t * ld + r + v0] : 0;
                }
            const int bad = compare(got, rs, ms, n, rows - v0, ld);
            CHECK_MSG(bad == 0, "%s %s %lldx%lld n=%lld view from row %lld: %d off", cmf_cpu_path_name(path),
                      cmf_dtype_name(dtype), (long long)rows, (long long)cols, (long long)n, (long long)v0, bad);
            free(rs);
            free(ms);
        }
        if (col) {
            free(refm);
            free(magd);
        }
        free(abuf);
        free(x);
        free(bias);
        free(ref);
        free(ref0);
        free(sref);
        free(got);
        free(mag);
        free(mag0);
    }
    cmf_cpu_repack_release(&w);
    CHECK(w.rp == NULL && cmf_cpu_repack_bytes() == before);
    free(col);
    free(p);
}

/* Split copy (q4_block / q4_tiled with cols % 32 != 0, kern.h cmf_rp): copy rows 2R and 2R + 1 against the stored
 * row R, element by element: one of the two is 0 and their sum is the stored value bit for bit; rows past them 0. */
static int check_layout_split(const cmf_weight *w, const cmf_rp *rp) {
    int bad = 0;
    float *row = malloc((size_t)w->cols * sizeof(float)), v[2];
    for (int64_t R = 0; R < rp->ngroups * KERN_RP_R / 2; R++) {
        if (R < w->full_rows) cmf_weight_row_f32(w, R, row);
        for (int64_t c = 0; c < w->cols; c++) {
            const int64_t b = c / 32, k = c % 32, m = (k % 16) / 4, j = k % 4;
            for (int h = 0; h < 2; h++) {
                const int64_t Rc = 2 * R + h;
                const uint8_t *gp = rp->buf + (size_t)(Rc / 16) * rp->gstride, *sc = gp + rp->nb * 256;
                const int i = (int)(Rc % 16);
                const uint8_t byte = gp[b * 256 + 64 * m + 4 * i + j];
                const int u = k < 16 ? byte & 15 : byte >> 4;
                const uint8_t *h16 = sc + 2 * (b * 16 + i);
                v[h] = (float)(u - 8) * cmf_f16_to_f32((uint16_t)(h16[0] | h16[1] << 8));
            }
            const float want = R < w->full_rows ? row[c] : 0.0f, sum = v[0] + v[1];
            if ((v[0] != 0 && v[1] != 0) || (memcmp(&sum, &want, 4) != 0 && !(sum == 0 && want == 0))) bad++;
        }
    }
    free(row);
    return bad;
}

/* q4_block / q4_tiled with cols % 32 != 0 (the stored groups of 32 straddle rows, §2.4): the split copy's layout, and
 * cmf_matmul (n = 1, 2, 3, 17, 40, with a bias) against a double product of the stored values and the quantized
 * activations within 1e-5 of the sum of |terms|; every token of the n = 40 call gives the bits of the same token
 * alone (n = 1) and in a pair (n = 2): batch invariant; a view from row 8 (a copy group boundary) uses the copy,
 * one from row 3 reads the mapping (float family). */
static void check_split_case(cmf_pool *pool, int path, int dtype, int64_t rows, int64_t cols) {
    uint64_t nbytes;
    uint8_t *p = kt_payload(dtype, rows, cols, &nbytes);
    cmf_weight w;
    CHECK(p && kt_view(dtype, rows, cols, p, nbytes, &w));
    if (!p) return;
    CHECK(cmf_cpu_repack_weight(&w) == CMF_OK);
    const cmf_rp *rp = w.rp;
    CHECK_MSG(rp && rp->split && cmf_rp_of(&w) == rp, "%s %s %lldx%lld: no split copy", cmf_cpu_path_name(path),
              cmf_dtype_name(dtype), (long long)rows, (long long)cols);
    if (!rp) {
        free(p);
        return;
    }
    const int lbad = check_layout_split(&w, rp);
    CHECK_MSG(lbad == 0, "%s %lldx%lld: %d elements of the split copy differ from the stored tensor",
              cmf_dtype_name(dtype), (long long)rows, (long long)cols, lbad);
    enum { NMAX = 40 };
    const int64_t ld = rows + 3;
    float *x = malloc((size_t)(NMAX * cols) * sizeof(float)), *bias = malloc((size_t)rows * sizeof(float));
    float *wr = malloc((size_t)(rows * cols) * sizeof(float));
    float *ref = malloc((size_t)(NMAX * ld) * sizeof(float)), *got = malloc((size_t)(NMAX * ld) * sizeof(float));
    float *all = malloc((size_t)(NMAX * ld) * sizeof(float));
    double *mag = malloc((size_t)(NMAX * ld) * sizeof(double));
    void *abuf = malloc(cmf_qact_bytes(NMAX, cols));
    for (int64_t i = 0; i < NMAX * cols; i++) x[i] = kt_frand() * (i % 13 == 0 ? 5.0f : 1.0f);
    for (int64_t r = 0; r < rows; r++) bias[r] = kt_frand();
    for (int64_t r = 0; r < rows; r++) cmf_weight_row_f32(&w, r, wr + r * cols);
    cmf_qact a;
    cmf_qact_init(&a, abuf, NMAX, cols);
    cmf_qact_quantize(&a, x, cols, cols, NULL, 1, 0, NMAX);
    for (int64_t t = 0; t < NMAX; t++)
        for (int64_t r = 0; r < ld; r++) {
            double s = r < rows ? bias[r] : 0, m = r < rows ? fabs(bias[r]) : 0;
            for (int64_t c = 0; r < rows && c < cols; c++) {
                const int64_t blk = t * a.nb + c / 32;
                const double term = (double)wr[r * cols + c] * a.d[blk] * a.q[blk * 32 + c % 32];
                s += term, m += fabs(term);
            }
            ref[t * ld + r] = r < rows ? (float)s : NAN;
            mag[t * ld + r] = m;
        }
    for (int64_t i = 0; i < NMAX * ld; i++) all[i] = NAN;
    cmf_matmul(pool, all, ld, x, NMAX, &w, bias);
    int bad = compare(all, ref, mag, NMAX, rows, ld);
    CHECK_MSG(bad == 0, "%s %s %lldx%lld n=%d split cmf_matmul: %d off", cmf_cpu_path_name(path), cmf_dtype_name(dtype),
              (long long)rows, (long long)cols, NMAX, bad);
    const int64_t ns[] = {1, 2, 3, 17};
    int vbad = 0;
    for (size_t ni = 0; ni < sizeof ns / sizeof ns[0]; ni++) {
        const int64_t n = ns[ni];
        for (int64_t t0 = 0; t0 + n <= NMAX; t0 += n) {
            for (int64_t i = 0; i < n * ld; i++) got[i] = NAN;
            cmf_matmul(pool, got, ld, x + t0 * cols, n, &w, bias);
            bad = compare(got, ref + t0 * ld, mag + t0 * ld, n, rows, ld);
            CHECK_MSG(bad == 0, "%s %s %lldx%lld n=%lld split cmf_matmul: %d off", cmf_cpu_path_name(path),
                      cmf_dtype_name(dtype), (long long)rows, (long long)cols, (long long)n, bad);
            for (int64_t t = 0; t < n; t++)
                vbad += memcmp(got + t * ld, all + (t0 + t) * ld, (size_t)rows * sizeof(float)) != 0;
        }
    }
    CHECK_MSG(vbad == 0, "%s %s %lldx%lld: %d tokens of calls of 1..17 tokens differ in bits from the call of 40",
              cmf_cpu_path_name(path), cmf_dtype_name(dtype), (long long)rows, (long long)cols, vbad);
    for (int64_t v0 = 8; v0 >= 3; v0 -= 5) { /* row views: 8 (the copy's group boundary), 3 (the mapping) */
        if (rows <= v0) continue;
        const cmf_weight sub = cmf_weight_rows(&w, v0, rows - v0);
        CHECK((cmf_rp_of(&sub) != NULL) == (v0 == 8));
        for (int64_t i = 0; i < NMAX * ld; i++) got[i] = NAN;
        cmf_matmul(pool, got, ld, x, 2, &sub, bias + v0);
        bad = 0;
        for (int64_t t = 0; t < 2; t++)
            for (int64_t r = 0; r < rows - v0; r++) {
                double want = ref[t * ld + r + v0], m = mag[t * ld + r + v0];
                if (v0 != 8) { /* the float family multiplies the unquantized activations */
                    want = bias[r + v0], m = fabs(bias[r + v0]);
                    for (int64_t c = 0; c < cols; c++) {
                        const double term = (double)wr[(r + v0) * cols + c] * x[t * cols + c];
                        want += term, m += fabs(term);
                    }
                }
                bad += !(fabs((double)got[t * ld + r] - want) <= 1e-5 * m + 1e-30);
            }
        CHECK_MSG(bad == 0, "%s %s %lldx%lld split view from row %lld: %d off", cmf_cpu_path_name(path),
                  cmf_dtype_name(dtype), (long long)rows, (long long)cols, (long long)v0, bad);
    }
    free(abuf), free(x), free(bias), free(wr), free(ref), free(got), free(all), free(mag);
    cmf_cpu_repack_release(&w);
    free(p);
}

/* Sharing, release, stale copies, the switch. */
static void check_registry(void) {
    const int64_t rows = 40, cols = 64;
    uint64_t nbytes;
    uint8_t *p = kt_payload(CMF_DT_Q4_BLOCK, rows, cols, &nbytes),
            *p2 = kt_payload(CMF_DT_Q4_BLOCK, rows, cols, &nbytes);
    CHECK(p && p2);
    if (!p || !p2) return;
    const size_t base = cmf_cpu_repack_bytes();
    cmf_weight w1, w2, w3;
    CHECK(kt_view(CMF_DT_Q4_BLOCK, rows, cols, p, nbytes, &w1) && kt_view(CMF_DT_Q4_BLOCK, rows, cols, p, nbytes, &w2));
    CHECK(cmf_cpu_repack_weight(&w1) == CMF_OK && cmf_cpu_repack_weight(&w2) == CMF_OK);
    CHECK(w1.rp && w1.rp == w2.rp);
    const size_t one = cmf_cpu_repack_bytes() - base;
    CHECK(one > 0);
    cmf_cpu_repack_release(&w1);
    CHECK(cmf_cpu_repack_bytes() == base + one && w2.rp);
    /* other bytes at the same address (a freed tensor's memory reused): w2's copy must not be taken */
    memcpy(p, p2, nbytes);
    CHECK(kt_view(CMF_DT_Q4_BLOCK, rows, cols, p, nbytes, &w3));
    CHECK(cmf_cpu_repack_weight(&w3) == CMF_OK);
    CHECK(w3.rp && cmf_cpu_repack_bytes() == base + one); /* the stale copy was dropped, a new one made */
    CHECK(check_layout(&w3, w3.rp) == 0);
    cmf_cpu_repack_release(&w3);
    CHECK(cmf_cpu_repack_bytes() == base);
    /* off: no copy */
    cmf_cpu_set_repack(0);
    CHECK(!cmf_cpu_repack_enabled());
    CHECK(cmf_cpu_repack_weight(&w3) == CMF_OK && w3.rp == NULL);
    cmf_cpu_set_repack(1);
    /* other dtypes and cols % 32 != 0 (q4_block falls to the float family): no copy */
    uint8_t *f16 = kt_payload(CMF_DT_F16, rows, cols, &nbytes);
    CHECK(f16 && kt_view(CMF_DT_F16, rows, cols, f16, nbytes, &w3) && cmf_cpu_repack_weight(&w3) == CMF_OK &&
          w3.rp == NULL);
    free(f16);
    uint8_t *odd = kt_payload(CMF_DT_Q4_BLOCK, rows, 40, &nbytes); /* cols % 32 != 0: a split copy */
    CHECK(odd && kt_view(CMF_DT_Q4_BLOCK, rows, 40, odd, nbytes, &w3) && cmf_cpu_repack_weight(&w3) == CMF_OK &&
          w3.rp && w3.rp->split && w3.rp->ngroups == (2 * rows + 15) / 16);
    cmf_cpu_repack_release(&w3);
    free(odd);
    free(p);
    free(p2);
}

/* cmf_cpu_repack_set: the new copies of a set lie back to back in one allocation in the order given (pf_end its
 * end), a tensor listed twice gets one copy, a copy already live is shared (not put in the arena), the layouts are
 * right, and the references can be released in any order (the allocation goes with the last; ASan/LSan watch). */
static void check_set(void) {
    uint64_t na, nbb, nc;
    uint8_t *pa = kt_payload(CMF_DT_Q4_BLOCK, 256, 1024, &na), *pb = kt_payload(CMF_DT_Q8_ROW, 33, 96, &nbb),
            *pc = kt_payload(CMF_DT_Q4TP, 20, 64, &nc);
    CHECK(pa && pb && pc);
    if (!pa || !pb || !pc) return;
    const size_t base = cmf_cpu_repack_bytes();
    cmf_weight a, a2, b, b0, c;
    CHECK(kt_view(CMF_DT_Q4_BLOCK, 256, 1024, pa, na, &a) && kt_view(CMF_DT_Q4_BLOCK, 256, 1024, pa, na, &a2) &&
          kt_view(CMF_DT_Q8_ROW, 33, 96, pb, nbb, &b) && kt_view(CMF_DT_Q8_ROW, 33, 96, pb, nbb, &b0) &&
          kt_view(CMF_DT_Q4TP, 20, 64, pc, nc, &c));
    CHECK(cmf_cpu_repack_weight(&b0) == CMF_OK && b0.rp); /* b's copy exists before the set */
    const size_t with_b = cmf_cpu_repack_bytes();
    cmf_weight *set[] = {&a, &b, &a2, &c};
    CHECK(cmf_cpu_repack_set(set, 4) == CMF_OK);
    const cmf_rp *ra = a.rp, *rc = c.rp;
    CHECK(ra && rc && a2.rp == ra && b.rp == b0.rp);
    if (!ra || !rc) return;
    const size_t sa = ra->gstride * (size_t)ra->ngroups, sc = rc->gstride * (size_t)rc->ngroups;
    CHECK(rc->buf == ra->buf + sa && ra->pf_end == rc->buf + sc && rc->pf_end == ra->pf_end);
    CHECK(b.rp->pf_end == b.rp->buf + b.rp->gstride * (size_t)b.rp->ngroups);
    CHECK(cmf_cpu_repack_bytes() == with_b + sa + sc);
    CHECK(check_layout(&a, ra) == 0 && check_layout(&c, rc) == 0 && check_layout(&b, b.rp) == 0);
    { /* page-out of a stored tensor in anonymous memory keeps its bytes (MADV_DONTNEED would zero them) */
        uint8_t *keep = malloc(na);
        CHECK(keep != NULL);
        if (keep) {
            memcpy(keep, pa, na);
            const size_t adv = cmf_cpu_repack_page_out(&a);
            CHECK(adv <= na && memcmp(keep, pa, na) == 0);
            free(keep);
        }
        cmf_weight none = a;
        none.rp = NULL;
        CHECK(cmf_cpu_repack_page_out(&none) == 0);
    }
    cmf_cpu_repack_release(&a);
    CHECK(cmf_cpu_repack_bytes() == with_b + sa + sc && a2.rp == ra);
    cmf_cpu_repack_release(&c); /* the arena stays: a2 still holds a's copy in it */
    CHECK(cmf_cpu_repack_bytes() == with_b + sa && check_layout(&a2, a2.rp) == 0);
    cmf_cpu_repack_release(&b0);
    cmf_cpu_repack_release(&a2);
    CHECK(cmf_cpu_repack_bytes() == with_b);
    cmf_cpu_repack_release(&b);
    CHECK(cmf_cpu_repack_bytes() == base);
    /* off: nothing is made, every rp NULL */
    cmf_cpu_set_repack(0);
    CHECK(cmf_cpu_repack_set(set, 4) == CMF_OK && !a.rp && !b.rp && !a2.rp && !c.rp);
    cmf_cpu_set_repack(1);
    CHECK(cmf_cpu_repack_set(set, 0) == CMF_OK);
    free(pa);
    free(pb);
    free(pc);
}

int main(void) {
    kt_seed(0x5eed4b1d);
    cmf_pool *pool = NULL;
    CHECK(cmf_pool_new(2, &pool) == CMF_OK);
    const int paths[] = {CMF_CPU_SCALAR, CMF_CPU_AVX2, CMF_CPU_AVX512, CMF_CPU_NEON};
    const int dts[] = {CMF_DT_Q4_BLOCK, CMF_DT_Q4_TILED, CMF_DT_Q4TP, CMF_DT_Q8_ROW, CMF_DT_Q8_2F};
    const int64_t shapes[][2] = {{1, 32},      {15, 64},      {16, 96}, {17, 32}, {33, 160},
                                 {77, 32 * 9}, {50, 32 * 45}, {19, 40}, {33, 77}, {18, 32 * 150}};
    int tested = 0;
    for (size_t pi = 0; pi < sizeof paths / sizeof paths[0]; pi++) {
        if (!cmf_cpu_path_supported(paths[pi])) continue;
        CHECK(cmf_cpu_set_path(paths[pi]) == CMF_OK);
        const cmf_kern *k = cmf_kern_active();
        if (!k->rp_gemv || !k->rp_gemm) { /* no repacked kernels on this path: no copy is made */
            uint64_t nbytes;
            cmf_weight w;
            uint8_t *p = kt_payload(CMF_DT_Q4_BLOCK, 16, 32, &nbytes);
            CHECK(p && kt_view(CMF_DT_Q4_BLOCK, 16, 32, p, nbytes, &w) && cmf_cpu_repack_weight(&w) == CMF_OK &&
                  w.rp == NULL);
            free(p);
            continue;
        }
        { /* the q4tp layout a new copy gets: ladder codes on the AVX-512 path, f32 rungs on the others (kern.h) */
            uint64_t nbytes;
            cmf_weight w;
            uint8_t *p = kt_payload(CMF_DT_Q4TP, 16, 64, &nbytes);
            CHECK(p && kt_view(CMF_DT_Q4TP, 16, 64, p, nbytes, &w) && cmf_cpu_repack_weight(&w) == CMF_OK && w.rp);
            const int want = paths[pi] == CMF_CPU_AVX512 ? 1 : 4;
            CHECK_MSG(w.rp && w.rp->sbytes == want && cmf_rp_tp_layout() == want, "%s: q4tp copy layout %d, not %d",
                      cmf_cpu_path_name(paths[pi]), w.rp ? w.rp->sbytes : -1, want);
            cmf_cpu_repack_release(&w);
            free(p);
        }
        for (size_t d = 0; d < sizeof dts / sizeof dts[0]; d++)
            for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
                if (dts[d] == CMF_DT_Q4TP && shapes[s][1] % 32 == 0) /* both layouts on every path */
                    for (int l = 1; l <= 4; l += 3) {
                        cmf_rp_set_tp_layout(l);
                        check_case(pool, paths[pi], dts[d], shapes[s][0], shapes[s][1]);
                        cmf_rp_set_tp_layout(0);
                    }
                else if (shapes[s][1] % 32 == 0 || dts[d] == CMF_DT_Q8_ROW || dts[d] == CMF_DT_Q8_2F)
                    check_case(pool, paths[pi], dts[d], shapes[s][0], shapes[s][1]);
                else if (dts[d] != CMF_DT_Q4TP) /* q4_block / q4_tiled: a split copy */
                    check_split_case(pool, paths[pi], dts[d], shapes[s][0], shapes[s][1]);
        /* q4tp rows longer than the decode kernels' rung plane (TP_NB = 512 blocks): their GEMM fallback */
        for (int l = 1; l <= 4; l += 3) {
            cmf_rp_set_tp_layout(l);
            check_case(pool, paths[pi], CMF_DT_Q4TP, 17, 32 * 520);
            cmf_rp_set_tp_layout(0);
        }
        const int64_t split_shapes[][2] = {{64, 172}, {5, 12}, {1, 33}, {40, 200}, {21, 1000}};
        for (size_t s = 0; s < sizeof split_shapes / sizeof split_shapes[0]; s++) {
            check_split_case(pool, paths[pi], CMF_DT_Q4_BLOCK, split_shapes[s][0], split_shapes[s][1]);
            check_split_case(pool, paths[pi], CMF_DT_Q4_TILED, split_shapes[s][0], split_shapes[s][1]);
        }
        if (!tested++) check_registry();
        check_set();
        fprintf(stderr, "%s: repacked kernels checked\n", cmf_cpu_path_name(paths[pi]));
    }
    CHECK(tested > 0);
    CHECK(cmf_cpu_repack_bytes() == 0);
    fprintf(stderr, "worst |got - ref| / sum|terms| over %ld outputs: %.3g\n", compared, worst_seen);
    cmf_pool_free(pool);
    CMF_TEST_END();
}
