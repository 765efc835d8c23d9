/* Tests of the SIMD kernel tables (src/backend/cpu/kern.h) entry by entry against the scalar reference table:
 * every SIMD path this CPU runs (AVX2, AVX-512 VNNI; NEON on arm64, run on x86 hosts under qemu-aarch64 by
 * scripts/cross_neon.sh), on random payloads of every dtype with odd sizes (rows not a multiple of KERN_RB, q8 columns
 * not a multiple of 32, row-range views starting at stored row 3, the last partial chunk of KERN_KB blocks):
 *  - decode_f32 equals cmf_weight_cols_f32 (the reader's arithmetic) bit for bit on odd column windows;
 *  - mk_f32 within 1e-5 * sum|w*x| of the scalar microkernel (odd nc, every tb, odd strides);
 *  - decode_i8 gives the scalar decoder's block scales bit for bit, and its int8 blocks (in the path's own
 *    encoding) give, through the path's mk_i8 with unit scales, exactly the integer block sums of the scalar
 *    decode: the encodings agree;
 *  - mk_i8 within 1e-5 relative of the scalar microkernel on the scalar decode (relative to
 *    sum_b |ws_b d_b| sum_k |v_k x_k|);
 *  - gemv_i8, where the path has one, within the same bound of the double-precision sum of the scalar decode's
 *    block products, for nr = 1..KERN_RB rows at the start, middle and end of the view and nt = 1..KERN_GEMV_T
 *    tokens (one activation slot per token, kern.h);
 *  - gemm_pack_i8 + gemm_i8, where the path has them, driven panel by panel (KERN_GEMM_R rows) with column chunks
 *    of KERN_GEMM_KB and of 3 blocks, n = 1..9 tokens, with a bias: within 1e-5 of cmf_gemm_ref_i8 (gemm_scalar.c)
 *    relative to the sum of |terms|, and nothing written past the panel's rows.
 * Weight payloads are random bytes (q8 includes v = -128, nibbles the full 0..15) with random but finite scales,
 * each ending right before an inaccessible page, so a kernel that reads past the end of its tensor (a row past nr,
 * a partial last block read whole) crashes the test even without a sanitizer (as under qemu).
 * CMF_EXPECT_CPU, when set (scripts/cross_neon.sh sets it), must equal cmf_cpu_features_str(), so a run that was
 * meant to test a path (e.g. "neon (cpu: neon dotprod)" or "neon (cpu: neon)") cannot silently test another.
 * Exits 77 (skip) when this CPU and build run no SIMD path. */
#define _DEFAULT_SOURCE /* MAP_ANONYMOUS */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "backend/cpu/kern.h"
#include "backend/cpu/ops.h"
#include "quant/dtype.h"
#include "kerntest.h"
#include "testutil.h"

static uint16_t f16_of(float lo, float hi) { return cmf_f32_to_f16(lo + (hi - lo) * (kt_frand() * 0.5f + 0.5f)); }
static void put16(uint8_t *p, uint16_t v) {
    p[0] = (uint8_t)(v & 0xff);
    p[1] = (uint8_t)(v >> 8);
}

/* nb bytes that end where an inaccessible page begins; free with guarded_free. */
static uint8_t *guarded_alloc(uint64_t nb) {
    const size_t pg = (size_t)sysconf(_SC_PAGESIZE), len = ((size_t)nb + pg - 1) / pg * pg;
    uint8_t *m = mmap(NULL, len + pg, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) return NULL;
    if (mprotect(m + len, pg, PROT_NONE) != 0) {
        munmap(m, len + pg);
        return NULL;
    }
    return m + (len - (size_t)nb);
}
static void guarded_free(uint8_t *p, uint64_t nb) {
    const size_t pg = (size_t)sysconf(_SC_PAGESIZE), len = ((size_t)nb + pg - 1) / pg * pg;
    munmap(p - (len - (size_t)nb), len + pg);
}

/* A random payload of dtype for rows x cols (guarded_alloc'd, *nb bytes): random bytes everywhere, then every scale,
 * ladder parameter and float value replaced by a finite one (f16 values avoid the NaN/Inf exponent; subnormals
 * stay). Layouts: CMF_FORMAT.md §2.1–2.7. */
static uint8_t *payload(int dtype, int64_t rows, int64_t cols, uint64_t *nb) {
    uint32_t shape[2] = {(uint32_t)rows, (uint32_t)cols};
    if (cmf_dtype_nbytes(dtype, 2, shape, nb) != 1) return NULL;
    uint8_t *p = guarded_alloc(*nb);
    if (!p) return NULL;
    for (uint64_t i = 0; i < *nb; i++) p[i] = (uint8_t)kt_rnd();
    const int64_t n = rows * cols, G = (n + 31) / 32, gpr = cols / 32;
    switch (dtype) {
    case CMF_DT_F32:
        for (int64_t i = 0; i < n; i++) {
            const float f = kt_frand() * 4.0f;
            memcpy(p + 4 * i, &f, 4);
        }
        break;
    case CMF_DT_F16:
        for (int64_t i = 0; i < n; i++)
            if (((p[2 * i + 1] >> 2) & 31) == 31) p[2 * i + 1] ^= 0x40; /* exponent 31 -> 15 */
        break;
    case CMF_DT_BF16:
        for (int64_t i = 0; i < n; i++)
            if ((p[2 * i + 1] & 0x7f) >= 0x5f) p[2 * i + 1] = (uint8_t)((p[2 * i + 1] & 0x80) | 0x3f); /* |x| < 2^64 */
        break;
    case CMF_DT_Q8_ROW:
    case CMF_DT_Q8_2F:
        for (int64_t r = 0; r < rows; r++) put16(p + n + 2 * r, f16_of(1e-3f, 2e-2f));
        if (dtype == CMF_DT_Q8_2F)
            for (int64_t c = 0; c < cols; c++) put16(p + n + 2 * rows + 2 * c, f16_of(0.25f, 4.0f));
        break;
    case CMF_DT_Q4_BLOCK:
        for (int64_t g = 0; g < G; g++) put16(p + 16 * G + 2 * g, f16_of(-0.3f, 0.3f));
        break;
    case CMF_DT_Q4_TILED:
        for (int64_t g = 0; g < G; g++) put16(p + 18 * g, f16_of(-0.3f, 0.3f));
        break;
    case CMF_DT_Q4TP:
    case CMF_DT_Q2TP: { /* lo in [-8, -4], step in [0, 0.25]; codes stay random */
        uint8_t *par = p + rows * gpr * (dtype == CMF_DT_Q4TP ? 16 : 8);
        for (int64_t r = 0; r < rows; r++) {
            put16(par + 4 * r, f16_of(-8.0f, -4.0f));
            put16(par + 4 * r + 2, f16_of(0.0f, 0.25f));
        }
        break;
    }
    default: break;
    }
    return p;
}


/* n token slots of random activations (a few large outliers per block, as real ones), quantized by the shared
 * quantizer (one level: slot = token). Returns the buffer to free. */
static void *qact_new(cmf_qact *a, int64_t n, int64_t cols) {
    void *buf = malloc(cmf_qact_bytes(n, cols));
    float *x = malloc((size_t)(n * cols) * sizeof(float));
    for (int64_t i = 0; i < n * cols; i++) x[i] = kt_frand() * (kt_rnd() % 11 == 0 ? 6.0f : 1.0f);
    cmf_qact_init(a, buf, n, cols);
    cmf_qact_quantize(a, x, cols, cols, NULL, 1, 0, n);
    free(x);
    return buf;
}

static const char *g_path; /* the name of the path under test, for messages */
static double g_worst;     /* the worst |got - ref| / bound seen */

static int within(double got, double ref, double mag) {
    const double bound = 1e-5 * mag + 1e-30;
    const double e = fabs(got - ref) / bound;
    if (e > g_worst || e != e) g_worst = e != e ? INFINITY : e;
    return fabs(got - ref) <= bound;
}

/* ---- float family ---------------------------------------------------------------------------------------------- */

static void check_decode_f32(const cmf_kern *k, int dtype, int64_t rows, int64_t cols) {
    uint64_t nb;
    uint8_t *p = payload(dtype, rows, cols, &nb);
    cmf_weight w0, w;
    CHECK(p && kt_view(dtype, rows, cols, p, nb, &w0));
    if (!p) return;
    w = cmf_weight_rows(&w0, 3, rows - 3);
    float *got = malloc((size_t)cols * sizeof(float)), *ref = malloc((size_t)cols * sizeof(float));
    const int64_t c0s[] = {0, 1, 7, 32, 33};
    int bad = 0;
    for (int64_t r = 0; r < w.rows; r++)
        for (size_t ci = 0; ci < sizeof c0s / sizeof c0s[0]; ci++) {
            const int64_t c0 = c0s[ci];
            if (c0 >= cols) continue;
            const int64_t ncs[] = {1, 9, 17, cols - c0};
            for (size_t ni = 0; ni < 4; ni++) {
                const int64_t nc = ncs[ni] < cols - c0 ? ncs[ni] : cols - c0;
                k->decode_f32(&w, r, c0, nc, got);
                cmf_weight_cols_f32(&w, r, c0, nc, ref);
                bad += memcmp(got, ref, (size_t)nc * sizeof(float)) != 0;
            }
        }
    CHECK_MSG(bad == 0, "%s decode_f32 %s %lldx%lld: %d windows differ from cmf_weight_cols_f32", g_path,
              cmf_dtype_name(dtype), (long long)rows, (long long)cols, bad);
    free(got);
    free(ref);
    guarded_free(p, nb);
}

static void check_mk_f32(const cmf_kern *k) {
    const int64_t ncs[] = {1, 3, 4, 7, 50, 77, 1024}, n = 7;
    int bad = 0;
    for (size_t ni = 0; ni < sizeof ncs / sizeof ncs[0]; ni++) {
        const int64_t nc = ncs[ni], ldw = nc + 5, c0 = ni % 2 ? 5 : 0, ldx = c0 + nc + 3;
        float *wf = malloc((size_t)(KERN_RB * ldw) * sizeof(float)), *x = malloc((size_t)(n * ldx) * sizeof(float));
        for (int64_t i = 0; i < KERN_RB * ldw; i++) wf[i] = kt_frand();
        for (int64_t i = 0; i < n * ldx; i++) x[i] = kt_frand() * 3.0f;
        for (int64_t t0 = 0; t0 <= 3; t0 += 3)
            for (int tb = 1; tb <= KERN_TB; tb++) {
                float got[KERN_RB][KERN_TB], ref[KERN_RB][KERN_TB];
                k->mk_f32(wf, ldw, x, ldx, t0, tb, c0, nc, got);
                cmf_kern_scalar.mk_f32(wf, ldw, x, ldx, t0, tb, c0, nc, ref);
                for (int i = 0; i < KERN_RB; i++)
                    for (int j = 0; j < tb; j++) {
                        const float *xj = x + (t0 + j) * ldx + c0;
                        double mag = 0;
                        for (int64_t c = 0; c < nc; c++) mag += fabs((double)wf[i * ldw + c] * xj[c]);
                        bad += !within(got[i][j], ref[i][j], mag);
                    }
            }
        free(wf);
        free(x);
    }
    CHECK_MSG(bad == 0, "%s mk_f32: %d dot products off the scalar microkernel by more than 1e-5 relative", g_path,
              bad);
}

/* ---- int8 family ----------------------------------------------------------------------------------------------- */

/* The magnitude sum_b |ws_b d_b| sum_k |v_k x_k| of one row x slot over blocks [b0, b0+kb) of the scalar decode q
 * (kb*32 values), and the exact double sum itself in *exact. */
static double i8_mag(const int8_t *q, const float *ws, const cmf_qact *a, int64_t slot, int64_t b0, int64_t kb,
                     double *exact) {
    double mag = 0, sum = 0;
    for (int64_t b = 0; b < kb; b++) {
        const int8_t *x = a->q + (slot * a->nb + b0 + b) * 32;
        int64_t isum = 0, iabs = 0;
        for (int c = 0; c < 32; c++) {
            isum += (int64_t)q[32 * b + c] * x[c];
            iabs += llabs((int64_t)q[32 * b + c] * x[c]);
        }
        const double s = (double)ws[b] * a->d[slot * a->nb + b0 + b];
        sum += s * (double)isum;
        mag += fabs(s) * (double)iabs;
    }
    if (exact) *exact = sum;
    return mag;
}

/* decode_i8 + mk_i8 on KERN_RB rows from r (nr of them real, the rest zero as matmul.c pads), blocks [b0, b0+kb). */
static int check_tile(const cmf_kern *k, const cmf_weight *w, int64_t r, int nr, int64_t b0, int64_t kb,
                      cmf_qact *a, cmf_qact *unit) {
    enum { LDQ = KERN_KB * 32 };
    static int8_t qk[KERN_RB * LDQ], qs[KERN_RB * LDQ];
    static float wk[KERN_RB * KERN_KB], wsc[KERN_RB * KERN_KB], ones[KERN_RB * KERN_KB];
    int bad = 0;
    memset(qk, 0, sizeof qk);
    memset(qs, 0, sizeof qs);
    memset(wk, 0, sizeof wk);
    memset(wsc, 0, sizeof wsc);
    for (int i = 0; i < KERN_RB * KERN_KB; i++) ones[i] = 1.0f;
    for (int i = 0; i < nr; i++) {
        k->decode_i8[w->dtype](w, r + i, b0, kb, qk + i * LDQ, wk + i * KERN_KB);
        cmf_kern_scalar.decode_i8[w->dtype](w, r + i, b0, kb, qs + i * LDQ, wsc + i * KERN_KB);
    }
    if (memcmp(wk, wsc, sizeof wk) != 0) {
        fprintf(stderr, "%s decode_i8 %s: block scales differ from the scalar decoder (row %lld, blocks %lld+%lld)\n",
                g_path, cmf_dtype_name(w->dtype), (long long)r, (long long)b0, (long long)kb);
        bad++;
    }
    for (int64_t t0 = 0; t0 + 1 <= a->n; t0 += 3)
        for (int tb = 1; tb <= KERN_TB && t0 + tb <= a->n; tb++) {
            float got[KERN_RB][KERN_TB], ref[KERN_RB][KERN_TB];
            /* unit scales: exact integer block sums */
            k->mk_i8(qk, LDQ, ones, KERN_KB, kb, unit, t0, tb, b0, got);
            for (int i = 0; i < nr; i++)
                for (int j = 0; j < tb; j++) {
                    int64_t e = 0;
                    for (int64_t c = 0; c < 32 * kb; c++)
                        e += (int64_t)qs[i * LDQ + c] * unit->q[((t0 + j) * unit->nb + b0) * 32 + c];
                    if ((double)got[i][j] != (double)e) {
                        if (bad < 5)
                            fprintf(stderr, "%s %s exact: row %lld slot %lld blocks %lld+%lld: %.1f, want %lld\n",
                                    g_path, cmf_dtype_name(w->dtype), (long long)(r + i), (long long)(t0 + j),
                                    (long long)b0, (long long)kb, got[i][j], (long long)e);
                        bad++;
                    }
                }
            /* real scales: the scalar microkernel on the scalar decode */
            k->mk_i8(qk, LDQ, wk, KERN_KB, kb, a, t0, tb, b0, got);
            cmf_kern_scalar.mk_i8(qs, LDQ, wsc, KERN_KB, kb, a, t0, tb, b0, ref);
            for (int i = 0; i < nr; i++)
                for (int j = 0; j < tb; j++) {
                    const double mag = i8_mag(qs + i * LDQ, wsc + i * KERN_KB, a, t0 + j, b0, kb, NULL);
                    bad += !within(got[i][j], ref[i][j], mag);
                }
        }
    return bad;
}

/* gemv_i8 on rows [r, r+nr) of w, nt tokens, against the double sum of the scalar decode's block products. */
static int check_gemv(const cmf_kern *k, const cmf_weight *w, int64_t r, int nr, int nt, const cmf_qact *a) {
    static float ws[KERN_RB * KERN_KB];
    static int8_t q[KERN_KB * 32];
    float sc[KERN_KB];
    float acc[KERN_RB][KERN_TB];
    for (int i = 0; i < KERN_RB * KERN_KB; i++) ws[i] = NAN; /* scratch: the kernel must fill what it reads */
    for (int i = 0; i < KERN_RB; i++)
        for (int j = 0; j < KERN_TB; j++) acc[i][j] = NAN;
    k->gemv_i8[w->dtype](w, r, nr, a, nt, ws, acc);
    int bad = 0;
    for (int i = 0; i < nr; i++)
        for (int j = 0; j < nt; j++) {
            double ref = 0, mag = 0;
            for (int64_t b0 = 0; b0 < a->nb; b0 += KERN_KB) {
                const int64_t kb = a->nb - b0 < KERN_KB ? a->nb - b0 : KERN_KB;
                double e;
                cmf_kern_scalar.decode_i8[w->dtype](w, r + i, b0, kb, q, sc);
                mag += i8_mag(q, sc, a, j, b0, kb, &e);
                ref += e;
            }
            if (!within(acc[i][j], ref, mag)) {
                if (bad < 5)
                    fprintf(stderr, "%s gemv %s: row %lld token %d: %.9g, want %.9g (mag %.3g)\n", g_path,
                            cmf_dtype_name(w->dtype), (long long)(r + i), j, acc[i][j], ref, mag);
                bad++;
            }
        }
    return bad;
}

static void check_i8(const cmf_kern *k, int dtype, int64_t rows, int64_t cols) {
    uint64_t nbytes;
    uint8_t *p = payload(dtype, rows, cols, &nbytes);
    cmf_weight w0;
    CHECK(p && kt_view(dtype, rows, cols, p, nbytes, &w0));
    if (!p) return;
    const cmf_weight w = cmf_weight_rows(&w0, 3, rows - 3); /* row0 = 3: the view offsets */
    cmf_qact a, unit;
    const int64_t n = 7;
    void *abuf = qact_new(&a, n, cols), *ubuf = qact_new(&unit, n, cols);
    for (int64_t i = 0; i < n * unit.nb; i++) unit.d[i] = 1.0f;
    for (int64_t i = 0; i < n * unit.nb * 8; i++) unit.dx[i] = 1.0f;
    int bad = 0;
    /* tiles: the first, a middle and the last chunk of blocks; full and partial row groups */
    const int64_t nb = a.nb, b0s[] = {0, nb > 2 ? nb / 2 - 1 : 0, (nb - 1) / KERN_KB * KERN_KB};
    for (size_t bi = 0; bi < 3; bi++) {
        const int64_t b0 = b0s[bi], kb = nb - b0 < KERN_KB ? nb - b0 : KERN_KB;
        for (int nr = 1; nr <= KERN_RB; nr++) bad += check_tile(k, &w, w.rows - nr, nr, b0, kb, &a, &unit);
        bad += check_tile(k, &w, 0, KERN_RB, b0, kb < 3 ? kb : 3, &a, &unit);
    }
    CHECK_MSG(bad == 0, "%s decode_i8/mk_i8 %s %lldx%lld: %d mismatches", g_path, cmf_dtype_name(dtype),
              (long long)rows, (long long)cols, bad);
    if (k->gemv_i8[dtype]) {
        bad = 0;
        for (int nt = 1; nt <= KERN_GEMV_T; nt++)
            for (int nr = 1; nr <= KERN_RB; nr++) {
                bad += check_gemv(k, &w, 0, nr, nt, &a);
                bad += check_gemv(k, &w, w.rows - nr, nr, nt, &a);
                bad += check_gemv(k, &w, (w.rows - nr) / 2, nr, nt, &a);
            }
        CHECK_MSG(bad == 0, "%s gemv_i8 %s %lldx%lld: %d outputs off the scalar decode by more than 1e-5 relative",
                  g_path, cmf_dtype_name(dtype), (long long)rows, (long long)cols, bad);
    }
    free(abuf);
    free(ubuf);
    guarded_free(p, nbytes);
}

/* gemm_pack_i8 + gemm_i8 over the whole view (panels of KERN_GEMM_R rows, column chunks of kc blocks) against
 * cmf_gemm_ref_i8; outputs past the view's rows must stay NaN. */
static void check_gemm(const cmf_kern *k, int dtype, int64_t rows, int64_t cols) {
    uint64_t nbytes;
    uint8_t *p = payload(dtype, rows, cols, &nbytes);
    cmf_weight w0;
    CHECK(p && kt_view(dtype, rows, cols, p, nbytes, &w0));
    if (!p) return;
    const cmf_weight w = cmf_weight_rows(&w0, 3, rows - 3);
    void *pack = NULL;
    CHECK(posix_memalign(&pack, 64, KERN_GEMM_PACK_BYTES) == 0);
    const int64_t n = 9, ld = w.rows + 5;
    cmf_qact a;
    void *abuf = qact_new(&a, n, cols);
    float *bias = malloc((size_t)w.rows * sizeof(float)), *ref = malloc((size_t)(n * ld) * sizeof(float));
    float *got = malloc((size_t)(n * ld) * sizeof(float));
    double *mag = malloc((size_t)(n * ld) * sizeof(double));
    for (int64_t r = 0; r < w.rows; r++) bias[r] = kt_frand();
    int bad = 0;
    for (int64_t nt = 1; nt <= n; nt += 2) {
        cmf_gemm_ref_i8(&w, &a, nt, ref, ld, bias, mag);
        const int64_t kcs[2] = {KERN_GEMM_KB, 3};
        for (int ki = 0; ki < 2; ki++) {
            for (int64_t i = 0; i < n * ld; i++) got[i] = NAN;
            for (int64_t r = 0; r < w.rows; r += KERN_GEMM_R) {
                const int nr = w.rows - r < KERN_GEMM_R ? (int)(w.rows - r) : KERN_GEMM_R;
                for (int64_t b0 = 0; b0 < a.nb; b0 += kcs[ki]) {
                    const int64_t kb = a.nb - b0 < kcs[ki] ? a.nb - b0 : kcs[ki];
                    k->gemm_pack_i8(&w, r, nr, b0, kb, pack);
                    k->gemm_i8(pack, &a, 0, nt, got + r, ld, bias + r, b0 == 0);
                }
            }
            for (int64_t t = 0; t < n; t++)
                for (int64_t r = 0; r < ld; r++) {
                    if (t >= nt || r >= w.rows) {
                        bad += !isnan(got[t * ld + r]);
                    } else if (!within(got[t * ld + r], ref[t * ld + r], mag[t * ld + r])) {
                        if (bad < 5)
                            fprintf(stderr, "%s gemm %s: row %lld token %lld (n %lld, chunks of %lld): %.9g, "
                                    "want %.9g\n",
                                    g_path, cmf_dtype_name(dtype), (long long)r, (long long)t, (long long)nt,
                                    (long long)kcs[ki], got[t * ld + r], ref[t * ld + r]);
                        bad++;
                    }
                }
        }
    }
    CHECK_MSG(bad == 0, "%s gemm_i8 %s %lldx%lld: %d outputs off cmf_gemm_ref_i8 or written past the rows", g_path,
              cmf_dtype_name(dtype), (long long)rows, (long long)cols, bad);
    free(abuf);
    free(bias);
    free(ref);
    free(got);
    free(mag);
    free(pack);
    guarded_free(p, nbytes);
}

int main(void) {
    kt_seed(0x2545f4914f6cdd1dull);
    const char *feat = cmf_cpu_features_str(), *want = getenv("CMF_EXPECT_CPU");
    printf("cpu: %s\n", feat);
    if (want && *want) CHECK_MSG(strcmp(feat, want) == 0, "cpu features \"%s\", expected \"%s\"", feat, want);
    const struct {
        int path;
        const cmf_kern *const *k;
    } tables[] = {{CMF_CPU_NEON, &cmf_kern_neon}, {CMF_CPU_AVX2, &cmf_kern_avx2}, {CMF_CPU_AVX512, &cmf_kern_avx512}};
    int tested = 0;
    for (size_t ti = 0; ti < sizeof tables / sizeof tables[0]; ti++) {
        if (!cmf_cpu_path_supported(tables[ti].path) || !*tables[ti].k) continue;
        const cmf_kern *k = *tables[ti].k;
        g_path = cmf_cpu_path_name(tables[ti].path);
        g_worst = 0;
        tested++;
        const int fdt[] = {CMF_DT_F32,      CMF_DT_F16,      CMF_DT_BF16, CMF_DT_Q8_ROW, CMF_DT_Q8_2F,
                           CMF_DT_Q4_BLOCK, CMF_DT_Q4_TILED, CMF_DT_Q4TP, CMF_DT_Q2TP};
        for (size_t d = 0; d < sizeof fdt / sizeof fdt[0]; d++) {
            const int tp = fdt[d] == CMF_DT_Q4TP || fdt[d] == CMF_DT_Q2TP;
            check_decode_f32(k, fdt[d], 9, tp ? 96 : 77);
            check_decode_f32(k, fdt[d], 6, tp ? 64 : 50);
        }
        check_mk_f32(k);
        const int idt[] = {CMF_DT_Q8_ROW, CMF_DT_Q8_2F, CMF_DT_Q4_BLOCK, CMF_DT_Q4_TILED, CMF_DT_Q4TP, CMF_DT_Q2TP};
        for (size_t d = 0; d < sizeof idt / sizeof idt[0]; d++) {
            const int q8 = idt[d] == CMF_DT_Q8_ROW || idt[d] == CMF_DT_Q8_2F;
            /* rows - 3 (the view) = 8, 9, 4, 10: multiples of KERN_RB and not */
            check_i8(k, idt[d], 11, q8 ? 13 : 32);
            check_i8(k, idt[d], 12, q8 ? 45 : 96);
            check_i8(k, idt[d], 7, q8 ? 32 * 37 + 7 : 32 * 37);
            check_i8(k, idt[d], 13, q8 ? 32 * 70 + 19 : 32 * 70);
            if (k->gemm_pack_i8 && k->gemm_i8) {
                /* view rows 42: a full panel and a partial one (not a multiple of 8); 5 rows: one partial group */
                check_gemm(k, idt[d], 45, q8 ? 32 * 9 + 11 : 32 * 9);
                check_gemm(k, idt[d], 8, q8 ? 32 * 131 + 5 : 32 * 131); /* two column chunks of KERN_GEMM_KB */
            }
        }
        printf("%s: worst error %.3g of the 1e-5 relative bound\n", g_path, g_worst);
    }
    if (!tested) {
        printf("SKIP: no SIMD kernel path on this CPU and build (%s)\n", feat);
        return cmf_test_failures ? 1 : 77;
    }
    CMF_TEST_END();
}
