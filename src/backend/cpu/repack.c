/* repack.c — the load-time repack of the int8 family (q4_block, q4_tiled, q4tp, q8_row, q8_2f) for the CPU kernels
 * (layouts: kern.h, cmf_rp; API: ops.h,
 * cmf_cpu_repack_weight): the writer of the row-group layout, the process-wide registry that shares one copy among
 * the views of a stored tensor, and the scalar reference kernels over the layout (the scalar table's entries, and
 * what tests/kernels/test_repack.c checks the SIMD ones against). Source of the values: CMF_FORMAT.md §2.4 (q4_block:
 * nibble planes then f16 scales), §2.5 (q4_tiled: f16 scale in front of each tile), §2.6 (q4tp: nibble plane,
 * per-row f16 lo/step ladder, 5-bit codes), §2.2-2.3 (q8_row / q8_2f: int8 plane, f16 row scales). */
#if defined(__linux__) && !defined(_DEFAULT_SOURCE)
#define _DEFAULT_SOURCE /* madvise, MADV_PAGEOUT (not in POSIX) */
#endif
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#if defined(__linux__)
#include <sys/mman.h>
#include <unistd.h>
#endif

#include "backend/cpu/kern.h"
#include "util/error.h"

/* ---- switch ------------------------------------------------------------------------------------------------ */

static atomic_int g_repack = -1; /* -1: not read from CMF_CPU_REPACK yet */

int cmf_cpu_repack_enabled(void) {
    int on = atomic_load_explicit(&g_repack, memory_order_acquire);
    if (on >= 0) return on;
    const char *e = getenv("CMF_CPU_REPACK");
    on = !(e && !strcmp(e, "0"));
    atomic_store_explicit(&g_repack, on, memory_order_release);
    return on;
}

void cmf_cpu_set_repack(int on) {
    atomic_store_explicit(&g_repack, on ? 1 : 0, memory_order_release);
}

/* ---- the q4tp layout (kern.h cmf_rp_tp_layout) ------------------------------------------------------------------ */

static atomic_int g_tp_layout; /* 0: by the active path; 1 or 4: forced */

int cmf_rp_tp_layout(void) {
    const int f = atomic_load_explicit(&g_tp_layout, memory_order_acquire);
    if (f == 1 || f == 4) return f;
    return cmf_kern_avx512 && cmf_kern_active() == cmf_kern_avx512 ? 1 : 4;
}

void cmf_rp_set_tp_layout(int sbytes) {
    atomic_store_explicit(&g_tp_layout, sbytes == 1 || sbytes == 4 ? sbytes : 0, memory_order_release);
}

/* ---- the layout writer --------------------------------------------------------------------------------------- */

static int is_q8(int dtype) {
    return dtype == CMF_DT_Q8_ROW || dtype == CMF_DT_Q8_2F;
}

static int is_q4(int dtype) {
    return dtype == CMF_DT_Q4_BLOCK || dtype == CMF_DT_Q4_TILED;
}

static int rp_dtype(const cmf_weight *w) {
    if (w->cols <= 0 || w->full_rows <= 0) return 0;
    return is_q8(w->dtype) || is_q4(w->dtype) || (w->dtype == CMF_DT_Q4TP && w->cols % 32 == 0);
}

/* q4_block / q4_tiled (§2.4-2.5): the 32 values u (0..15) of column block b of stored row R that lie in ONE stored
 * group, the others set to 8 (v = 0); *scale = that group's f16 bytes, or NULL when no value of the block is in it.
 * The stored groups run over the flattened tensor, so with cols % 32 != 0 a row's block b can straddle two of them:
 * piece 0 is the group holding the block's first column, piece 1 the next group (empty when the row starts on a
 * group boundary). Columns past cols are 8. */
static void q4_piece(const cmf_weight *w, int64_t R, int64_t b, int piece, uint8_t u[32], const uint8_t **scale) {
    const int64_t C = w->cols, f0 = R * C + 32 * b, G = (w->full_rows * C + 31) / 32, gi = f0 / 32 + piece;
    const int tiled = w->dtype == CMF_DT_Q4_TILED;
    if (f0 % 32 == 0 && 32 * b + 32 <= C) { /* the whole block is one stored group: piece 0 holds it all */
        *scale = NULL;
        memset(u, 8, 32);
        if (piece) return;
        const uint8_t *src = tiled ? w->data + 18 * gi + 2 : w->data + 16 * gi;
        for (int k = 0; k < 16; k++) {
            u[2 * k] = src[k] & 15;
            u[2 * k + 1] = src[k] >> 4;
        }
        *scale = tiled ? w->data + 18 * gi : w->data + 16 * G + 2 * gi;
        return;
    }
    int any = 0;
    for (int k = 0; k < 32; k++) {
        const int64_t f = f0 + k;
        u[k] = 8;
        if (32 * b + k >= C || f / 32 != gi) continue;
        const uint8_t byte = tiled ? w->data[18 * gi + 2 + (f % 32) / 2] : w->data[16 * gi + (f % 32) / 2];
        u[k] = f % 2 ? byte >> 4 : byte & 15; /* byte k: element 2k low, 2k+1 high (§2.4) */
        any = 1;
    }
    *scale = !any ? NULL : tiled ? w->data + 18 * gi : w->data + 16 * G + 2 * gi;
}

/* The q8 layout of group g: u = v + 128 in VNNI order, row scales as f32 (kern.h). */
static void write_group_q8(const cmf_weight *w, cmf_rp *rp, int64_t g) {
    const int64_t nb = rp->nb, C = w->cols;
    uint8_t *q = rp->buf + (size_t)g * rp->gstride;
    float *rs = (float *)(void *)(q + (size_t)nb * 512);
    memset(q, 0x80, (size_t)nb * 512);
    for (int i = 0; i < KERN_RP_R; i++) {
        const int64_t R = g * KERN_RP_R + i;
        rs[i] = 0;
        if (R >= rp->full_rows) continue;
        const uint8_t *src = w->data + R * C;
        for (int64_t c = 0; c < C; c++) q[(c / 32) * 512 + 64 * ((c % 32) / 4) + 4 * i + c % 4] = src[c] ^ 0x80;
        rs[i] = cmf_f16_table[cmf_rd16(w->data + (size_t)(rp->full_rows * C) + 2 * (size_t)R)];
    }
}

/* Writes group g of the copy from the stored tensor of w (a view of it with row0 = 0 is not needed: stored rows are
 * addressed directly). A split copy (kern.h cmf_rp) holds stored row R as copy rows 2R (piece 0 of every block) and
 * 2R + 1 (piece 1): each block of a copy row then has one scale. */
static void write_group(const cmf_weight *w, cmf_rp *rp, int64_t g) {
    if (rp->q8) {
        write_group_q8(w, rp, g);
        return;
    }
    const int64_t nb = rp->nb, copy_rows = rp->full_rows << rp->split;
    uint8_t *nib = rp->buf + (size_t)g * rp->gstride, *sc = nib + (size_t)nb * 256;
    kern_tp tp;
    memset(&tp, 0, sizeof tp);
    if (w->dtype == CMF_DT_Q4TP) cmf_kern_tp(w, &tp);
    memset(nib, 0x88, (size_t)nb * 256); /* rows past the copy's rows: u = 8, v = 0 */
    memset(sc, 0, rp->gstride - (size_t)nb * 256); /* scales 0; q4tp: t0 = r = 0, codes 0, the tail pad 0 */
    float *lad = (float *)(void *)sc; /* q4tp codes: t0[16], r[16] (kern.h); q4tp f32: the rung plane */
    uint8_t *code = sc + 128;
    for (int i = 0; i < KERN_RP_R; i++) {
        const int64_t Rc = g * KERN_RP_R + i, R = Rc >> rp->split;
        if (Rc >= copy_rows) break;
        float t[32] = {0}; /* q4tp f32 layout: the row's ladder (§2.6 steps 2-3) */
        if (w->dtype == CMF_DT_Q4TP && rp->sbytes == 1) { /* §2.6 step 2, as cmf_kern_ladder; rungs: the kernels */
            lad[i] = exp2f(cmf_f16_table[cmf_rd16(tp.params + 4 * R)]);
            lad[16 + i] = exp2f(cmf_f16_table[cmf_rd16(tp.params + 4 * R + 2)]);
        } else if (w->dtype == CMF_DT_Q4TP) {
            cmf_kern_ladder(w, &tp, R, t);
        }
        for (int64_t b = 0; b < nb; b++) {
            uint8_t u[32];
            const uint8_t *h = NULL;
            if (w->dtype == CMF_DT_Q4TP) {
                const uint8_t *src = w->data + 16 * (R * nb + b);
                for (int k = 0; k < 16; k++) { /* byte k: column 2k low, 2k+1 high (§2.4) */
                    u[2 * k] = src[k] & 15;
                    u[2 * k + 1] = src[k] >> 4;
                }
            } else {
                q4_piece(w, R, b, (int)(Rc & rp->split), u, &h);
            }
            uint8_t *dst = nib + b * 256 + 4 * i;
            for (int m = 0; m < 4; m++)
                for (int j = 0; j < 4; j++) dst[64 * m + j] = (uint8_t)(u[4 * m + j] | u[16 + 4 * m + j] << 4);
            if (rp->sbytes == 2) {
                if (h) memcpy(sc + 2 * (b * 16 + i), h, 2);
            } else if (rp->sbytes == 4) {
                lad[b * 16 + i] = t[cmf_kern_code(&tp, R, b)];
            } else {
                code[i * nb + b] = (uint8_t)cmf_kern_code(&tp, R, b);
            }
        }
    }
}

/* ---- the registry ---------------------------------------------------------------------------------------------- */

/* Bytes of the stored tensor (§2.0 table) and a 64-bit fingerprint of them (multiply-xorshift over 8-byte words):
 * an entry found by address is reused only when the bytes there are still the ones it was made from (a freed model's
 * mapping, or a freed buffer, can come back at the same address with other contents). */
static size_t stored_bytes(const cmf_weight *w) {
    const size_t nb = (size_t)w->cols / 32, R = (size_t)w->full_rows, C = (size_t)w->cols;
    if (is_q8(w->dtype)) return R * C + 2 * R + (w->dtype == CMF_DT_Q8_2F ? 2 * C : 0);
    return w->dtype == CMF_DT_Q4TP ? R * (16 * nb + 4 + (5 * nb + 7) / 8) : (R * C + 31) / 32 * 18;
}

static uint64_t fingerprint(const uint8_t *p, size_t n) {
    uint64_t h = 0x9e3779b97f4a7c15ull ^ n, v;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        memcpy(&v, p + i, 8);
        h = (h ^ v) * 0xff51afd7ed558ccdull;
        h ^= h >> 29;
    }
    for (; i < n; i++) h = (h ^ p[i]) * 0x100000001b3ull;
    return h;
}

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static cmf_rp *g_list;
static size_t g_bytes;

/* One allocation holding the copies of a weight set in forward order (cmf_cpu_repack_set); freed with the last of
 * its copies (live counts them; changed with g_mu held). */
struct cmf_rp_arena {
    uint8_t *base;
    int live;
};

/* Frees an entry that left the registry (g_mu held, or not yet registered), and its arena with the arena's last. */
static void rp_free(cmf_rp *e) {
    if (e->arena) {
        if (--e->arena->live == 0) {
            free(e->arena->base);
            free(e->arena);
        }
    } else {
        free(e->buf);
    }
    free(e);
}

size_t cmf_cpu_repack_bytes(void) {
    pthread_mutex_lock(&g_mu);
    const size_t b = g_bytes;
    pthread_mutex_unlock(&g_mu);
    return b;
}

/* The live entry made from w's stored bytes (fingerprint fp), with one more reference; NULL when there is none. A
 * stale entry at the same address (other bytes) is unlinked and freed: nobody can use it any more, since its tensor
 * is gone. Called with g_mu held. */
static cmf_rp *take(const cmf_weight *w, uint64_t fp) {
    for (cmf_rp **pp = &g_list; *pp; pp = &(*pp)->next) {
        cmf_rp *e = *pp;
        if (e->data != w->data) continue;
        if (e->dtype == w->dtype && e->full_rows == w->full_rows && e->cols == w->cols && e->fp == fp) {
            e->refs++;
            return e;
        }
        *pp = e->next;
        g_bytes -= e->gstride * (size_t)e->ngroups;
        rp_free(e);
        return take(w, fp);
    }
    return NULL;
}

/* A new unregistered entry for w's stored tensor (fingerprint fp), without its buffer; NULL when out of memory. */
static cmf_rp *new_entry(const cmf_weight *w, uint64_t fp) {
    cmf_rp *rp = calloc(1, sizeof *rp);
    if (!rp) return NULL;
    rp->data = w->data;
    rp->dtype = w->dtype;
    rp->full_rows = w->full_rows;
    rp->cols = w->cols;
    rp->q8 = is_q8(w->dtype);
    rp->split = is_q4(w->dtype) && w->cols % 32 != 0;
    rp->nb = (w->cols + 31) / 32;
    rp->ngroups = ((w->full_rows << rp->split) + KERN_RP_R - 1) / KERN_RP_R;
    rp->sbytes = rp->q8 ? 4 : w->dtype == CMF_DT_Q4TP ? cmf_rp_tp_layout() : 2;
    const size_t nbs = (size_t)rp->nb;
    rp->gstride = rp->q8 ? nbs * 512 + 64 : ((nbs * (256 + 16 * (size_t)rp->sbytes) + (rp->sbytes == 1 ? 128 : 0) + 63) &
                                              ~(size_t)63);
    rp->refs = 1;
    rp->fp = fp;
    return rp;
}

static size_t rp_bytes(const cmf_rp *rp) {
    return rp->gstride * (size_t)rp->ngroups;
}

static int can_repack(const cmf_weight *w) {
    const cmf_kern *k = cmf_kern_active();
    return rp_dtype(w) && cmf_cpu_repack_enabled() && k->rp_gemv && k->rp_gemm;
}

cmf_status cmf_cpu_repack_weight(cmf_weight *w) {
    w->rp = NULL;
    if (!can_repack(w)) return CMF_OK;
    const uint64_t fp = fingerprint(w->data, stored_bytes(w));
    pthread_mutex_lock(&g_mu);
    w->rp = take(w, fp);
    pthread_mutex_unlock(&g_mu);
    if (w->rp) return CMF_OK;
    /* made outside the lock (the writer reads the whole tensor); a racing twin is dropped below */
    cmf_rp *rp = new_entry(w, fp);
    if (!rp) return cmf_err(CMF_E_NOMEM, "cpu repack: out of memory");
    const size_t bytes = rp_bytes(rp);
    rp->buf = aligned_alloc(64, bytes);
    if (!rp->buf) {
        free(rp);
        return cmf_err(CMF_E_NOMEM, "cpu repack: cannot allocate %zu bytes for a %s [%lld, %lld] matrix", bytes,
                       cmf_dtype_name(w->dtype), (long long)w->full_rows, (long long)w->cols);
    }
    rp->pf_end = rp->buf + bytes;
    for (int64_t g = 0; g < rp->ngroups; g++) write_group(w, rp, g);
    pthread_mutex_lock(&g_mu);
    cmf_rp *twin = take(w, fp);
    if (twin) {
        w->rp = twin;
        pthread_mutex_unlock(&g_mu);
        rp_free(rp);
        return CMF_OK;
    }
    rp->next = g_list;
    g_list = rp;
    g_bytes += bytes;
    w->rp = rp;
    pthread_mutex_unlock(&g_mu);
    return CMF_OK;
}

cmf_status cmf_cpu_repack_set(cmf_weight *const *ws, int n) {
    if (n <= 0) return CMF_OK;
    cmf_rp **fresh = calloc((size_t)n, sizeof *fresh); /* fresh[i]: the new entry made for ws[i] */
    if (!fresh) return cmf_err(CMF_E_NOMEM, "cpu repack: out of memory");
    size_t total = 0;
    int nfresh = 0;
    for (int i = 0; i < n; i++) ws[i]->rp = NULL;
    for (int i = 0; i < n; i++) {
        cmf_weight *w = ws[i];
        if (!can_repack(w)) continue;
        const uint64_t fp = fingerprint(w->data, stored_bytes(w));
        pthread_mutex_lock(&g_mu);
        w->rp = take(w, fp);
        pthread_mutex_unlock(&g_mu);
        for (int j = 0; j < i && !w->rp; j++) { /* a view of a tensor met earlier in this set */
            cmf_rp *e = fresh[j];
            if (e && e->data == w->data && e->dtype == w->dtype && e->full_rows == w->full_rows &&
                e->cols == w->cols && e->fp == fp) {
                e->refs++;
                w->rp = e;
            }
        }
        if (w->rp) continue;
        fresh[i] = new_entry(w, fp);
        if (!fresh[i]) goto nomem;
        total += rp_bytes(fresh[i]);
        nfresh++;
    }
    if (nfresh) {
        struct cmf_rp_arena *ar = calloc(1, sizeof *ar);
        uint8_t *base = ar ? aligned_alloc(64, total) : NULL;
        if (!base) {
            free(ar);
            cmf_err(CMF_E_NOMEM, "cpu repack: cannot allocate %zu bytes for the copies of %d matrices", total,
                    nfresh);
            goto fail;
        }
        ar->base = base;
        size_t off = 0;
        for (int i = 0; i < n; i++) {
            cmf_rp *e = fresh[i];
            if (!e) continue;
            e->buf = base + off; /* gstride is a multiple of 64: every copy stays 64-byte aligned */
            e->pf_end = base + total;
            e->arena = ar;
            ar->live++;
            off += rp_bytes(e);
            ws[i]->rp = e;
            for (int64_t g = 0; g < e->ngroups; g++) write_group(ws[i], e, g);
        }
        pthread_mutex_lock(&g_mu);
        for (int i = 0; i < n; i++)
            if (fresh[i]) {
                fresh[i]->next = g_list;
                g_list = fresh[i];
            }
        g_bytes += total;
        pthread_mutex_unlock(&g_mu);
    }
    free(fresh);
    return CMF_OK;
nomem:
    cmf_err(CMF_E_NOMEM, "cpu repack: out of memory");
fail:
    /* unregistered entries go; references taken from the registry are given back */
    for (int i = 0; i < n; i++) {
        int mine = 0;
        for (int j = 0; j < n && !mine; j++) mine = fresh[j] && ws[i]->rp == fresh[j];
        if (mine) ws[i]->rp = NULL;
        else cmf_cpu_repack_release(ws[i]);
    }
    for (int i = 0; i < n; i++) free(fresh[i]);
    free(fresh);
    return CMF_E_NOMEM;
}

size_t cmf_cpu_repack_page_out(const cmf_weight *w) {
#if defined(__linux__) && defined(MADV_PAGEOUT)
    if (!w->rp) return 0;
    const long pg = sysconf(_SC_PAGESIZE);
    if (pg <= 0) return 0;
    const uintptr_t lo = (uintptr_t)w->data, hi = lo + stored_bytes(w);
    const uintptr_t a = (lo + (uintptr_t)pg - 1) / (uintptr_t)pg * (uintptr_t)pg, b = hi / (uintptr_t)pg * (uintptr_t)pg;
    if (b <= a) return 0;
    /* advice only: an old kernel (EINVAL) or an unmapped range changes nothing the kernels rely on */
    return madvise((void *)a, (size_t)(b - a), MADV_PAGEOUT) == 0 ? (size_t)(b - a) : 0;
#else
    (void)w;
    return 0;
#endif
}

void cmf_cpu_repack_release(cmf_weight *w) {
    const cmf_rp *rp = w->rp;
    w->rp = NULL;
    if (!rp) return;
    pthread_mutex_lock(&g_mu);
    for (cmf_rp **pp = &g_list; *pp; pp = &(*pp)->next) {
        cmf_rp *e = *pp;
        if (e != rp) continue;
        if (--e->refs == 0) {
            *pp = e->next;
            g_bytes -= e->gstride * (size_t)e->ngroups;
            rp_free(e);
        }
        break;
    }
    pthread_mutex_unlock(&g_mu);
}

/* ---- scalar reference kernels --------------------------------------------------------------------------------- */

/* The block scale of row i of group gp's block b (q8: the row scale); q4tp f32 layout: the stored rung; q4tp codes:
 * rung code of the row's ladder, from L (cmf_rp_tp_ladders of the group). */
static float rp_scale(const cmf_rp *rp, const uint8_t *gp, const float *L, int64_t b, int i) {
    if (rp->q8) {
        float s;
        memcpy(&s, gp + (size_t)rp->nb * 512 + 4 * i, 4);
        return s;
    }
    const uint8_t *sc = gp + (size_t)rp->nb * 256;
    if (rp->sbytes == 2) return cmf_f16_table[cmf_rd16(sc + 2 * (b * 16 + i))];
    if (rp->sbytes == 4) { /* q4tp f32 layout */
        float s;
        memcpy(&s, sc + 4 * (b * 16 + i), 4);
        return s;
    }
    return L[16 * (cmf_rp_tp_codes(gp, rp->nb)[i * rp->nb + b] & 31) + i];
}

/* The exact int32 dot of row i's block b (v = u - 8) with the 32 int8 values x. */
static int32_t rp_dot(const cmf_rp *rp, const uint8_t *gp, int64_t b, int i, const int8_t *x) {
    int32_t s = 0;
    if (rp->q8) {
        const uint8_t *p = gp + b * 512 + 4 * i;
        for (int g = 0; g < 8; g++)
            for (int j = 0; j < 4; j++) s += ((int32_t)p[64 * g + j] - 128) * x[4 * g + j];
        return s;
    }
    const uint8_t *p = gp + b * 256 + 4 * i;
    for (int m = 0; m < 4; m++)
        for (int j = 0; j < 4; j++) {
            const uint8_t u = p[64 * m + j];
            s += ((int32_t)(u & 15) - 8) * x[4 * m + j] + ((int32_t)(u >> 4) - 8) * x[16 + 4 * m + j];
        }
    return s;
}

/* One step of the kernels' summation chain (kern.h): block b of row i (in its group gp) for the token whose
 * activations are x (scale d); fmaf keeps one rounding per step as the SIMD paths' fused multiply-adds. */
static float rp_step(const cmf_rp *rp, const uint8_t *gp, const float *L, int64_t b, int i, const int8_t *x, float d,
                     float acc) {
    const float isum = (float)rp_dot(rp, gp, b, i, x);
    return fmaf(isum, rp->q8 ? d : rp_scale(rp, gp, L, b, i) * d, acc);
}

/* The end of the chain: q8's row scale (kern.h). */
static float rp_final(const cmf_rp *rp, const uint8_t *gp, int i, float acc) {
    return rp->q8 ? acc * rp_scale(rp, gp, NULL, 0, i) : acc;
}

void cmf_rp_gemv_scalar(const cmf_rp *rp, int64_t g0, int64_t nrows, const cmf_qact *a, int nt, float *y, int64_t ldy) {
    float L[512]; /* q4tp: the group's ladders */
    for (int64_t r = 0; r < nrows; r++) {
        const uint8_t *gp = rp->buf + (size_t)(g0 + r / 16) * rp->gstride;
        const int i = (int)(r % 16);
        if (rp->sbytes == 1 && (r == 0 || i == 0)) cmf_rp_tp_ladders(gp, rp->nb, L);
        for (int j = 0; j < nt; j++) {
            float acc = 0;
            for (int64_t b = 0; b < rp->nb; b++)
                acc = rp_step(rp, gp, L, b, i, a->q + (j * a->nb + b) * 32, a->d[j * a->nb + b], acc);
            y[j * ldy + r] = rp_final(rp, gp, i, acc);
        }
    }
}

void cmf_rp_gemm_scalar(const cmf_rp *rp, int64_t g0, int ng, int nr, int64_t b0, int64_t kb, const cmf_qact *a,
                        int64_t t0, int64_t t1, float *out, int64_t ld_out, const float *bias, int first, int last) {
    float L[2][512]; /* q4tp: the groups' ladders */
    if (rp->sbytes == 1)
        for (int h = 0; h < ng && h < 2; h++) cmf_rp_tp_ladders(rp->buf + (size_t)(g0 + h) * rp->gstride, rp->nb, L[h]);
    for (int64_t t = t0; t < t1; t++)
        for (int r = 0; r < nr && r < 16 * ng && r < 32; r++) {
            const uint8_t *gp = rp->buf + (size_t)(g0 + r / 16) * rp->gstride;
            float *o = out + t * ld_out + r;
            float acc = first ? 0.0f : *o;
            for (int64_t b = b0; b < b0 + kb; b++)
                acc = rp_step(rp, gp, L[r / 16], b, r % 16, a->q + (t * a->nb + b) * 32, a->d[t * a->nb + b], acc);
            if (last) {
                acc = rp_final(rp, gp, r % 16, acc);
                if (bias) acc += bias[r];
            }
            *o = acc;
        }
}
