/* matmul.c — the cmf_matmul driver: activation quantization, the split of weight rows among threads and the
 * cache blocking around the path's decode + microkernel pair (kern.h).
 *
 * Prefill and batched decode (n > KERN_GEMV_T tokens) on a path with a GEMM (kern.h gemm_pack_* / gemm_*: AVX-512
 * for both families, AVX2 and NEON for the int8 one): work items are (panel of KERN_GEMM_R = 32 rows, token
 * range); per item and column chunk the panel is packed once into the thread's scratch and multiplied with every
 * token of the range by a register-blocked microkernel (gemm_worker), the next panel prefetched meanwhile.
 * Otherwise the tiled path. Loop order inside one of its work items (a block of up to 64 rows):
 *   for each chunk of 1024 columns:            the activations of that chunk (n x 1 KiB int8) stay in L2
 *     for each tile of 4 rows:                 decoded once (int8 blocks + scales, or f32) into L1
 *       for each group of 4 tokens:            microkernel: 4 x 4 dot products over the chunk
 *         out[t][r] (+)= result
 * so each weight byte is read from memory once per matmul whatever n is (GEMM for prefill).
 * Decode (n <= KERN_GEMV_T tokens, int8 family, a path with a fused kernel for the dtype): each work item instead
 * calls the path's gemv kernel per group of 4 rows, which reads the weights straight from the mapping, decodes
 * them in registers and keeps its f32 sums in registers over the whole row (kern.h, kern_gemv_i8).
 * A view with a load-time repacked copy (kern.h cmf_rp) reads only the copy: decode kernel for n <= KERN_GEMV_T, the
 * repacked GEMM above it, both summing each row in one order (batch invariance); a split copy (q4 with
 * cols % 32 != 0) through matmul_split.
 * Decode and the tiled path hand out their work items in one contiguous range per thread, stolen from the back
 * when a thread's own range is done (claim.h cmf_claim): each thread streams through adjacent rows. */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/claim.h"
#include "backend/cpu/kern.h"
#include "util/error.h"

enum {
    MAX_ROWS_PER_ITEM = 64,
    QUANT_PAR_MIN = 16384, /* values; fewer are quantized on the caller */
    MM_PAR_MIN = 65536,    /* multiply-adds; a smaller product runs on the caller: waking the pool costs more */
    RP_SPLIT = 16,         /* repacked decode: work items per thread (Qwen2.5-0.5B q4 tg128, 2 threads, load 1.5,
                              items dealt round robin then: 1 -> 70, 4 -> 63, 8 -> 62-73, 16 -> 75-82, 32 -> 71-85,
                              64 -> 61-79 t/s; in per-thread ranges (cmf_claim) 1, 4 and 16 are within the noise) */
};

/* Activation levels of the int8 family (ops.h: cmf_cpu_act_levels): 0 until first read from CMF_ACT_LEVELS. */
static atomic_int g_act_levels;

int cmf_cpu_act_levels(void) {
    int lv = atomic_load_explicit(&g_act_levels, memory_order_acquire);
    if (lv) return lv;
    const char *e = getenv("CMF_ACT_LEVELS");
    lv = e && !strcmp(e, "2") ? 2 : 1;
    atomic_store_explicit(&g_act_levels, lv, memory_order_release);
    return lv;
}

cmf_status cmf_cpu_set_act_levels(int levels) {
    if (levels != 1 && levels != 2) return cmf_err(CMF_E_ARG, "cpu: activation levels must be 1 or 2, not %d", levels);
    atomic_store_explicit(&g_act_levels, levels, memory_order_release);
    return CMF_OK;
}

static int is_i8(const cmf_weight *w) {
    switch (w->dtype) {
    case CMF_DT_Q8_ROW:
    case CMF_DT_Q8_2F:
    case CMF_DT_Q4TP:
    case CMF_DT_Q2TP: return 1;
    case CMF_DT_Q4_BLOCK:
    case CMF_DT_Q4_TILED: return w->cols % 32 == 0;
    default: return 0;
    }
}

/* How the repacked GEMM cuts a product's panels of 32 rows into work items (runs of consecutive panels): one panel
 * per item when the panels are split into token ranges (tchunks > 1) or the tokens are many (prefill: the weights
 * are reused from cache by every token tile). For a few tokens (a serve step's batch) each item is a run, so that a
 * thread reads one sequential stream, which the kernel prefetches one panel ahead (kern.h): first ub = 4 runs per
 * thread of sb panels (about 3/4 of the panels), then the rest in short runs of st panels, so that the threads
 * finish within a short run of each other (equal runs left one thread idle for up to a whole run at the end of each
 * product: 15 runs of 6 panels for an 88-panel gate/up pair on 2 threads, 16 runs of 63 panels for a 32000-row
 * head). Which thread computes which rows never changes a value (each row's sum has one order). */
typedef struct {
    int64_t ub, sb, st, items; /* ub runs of sb panels, then runs of st panels (the last one shorter): items */
} rp_runs;

static rp_runs rp_runs_make(int64_t panels, int64_t tchunks, int64_t n, int nth) {
    const rp_runs one = {panels, 1, 1, panels}; /* a panel per item */
    if (tchunks > 1 || n > KERN_RP_FEW) return one;
    rp_runs r = {4 * (int64_t)nth, 0, 1, 0};
    r.sb = 3 * panels / (4 * r.ub);
    if (r.sb < 2) return one;
    r.st = r.sb / 16 > 1 ? r.sb / 16 : 1;
    r.items = r.ub + (panels - r.ub * r.sb + r.st - 1) / r.st;
    return r;
}

/* Item i's panels [*p0, *pe) (i < r->items). */
static void rp_run(const rp_runs *r, int64_t panels, int64_t i, int64_t *p0, int64_t *pe) {
    *p0 = i < r->ub ? i * r->sb : r->ub * r->sb + (i - r->ub) * r->st;
    *pe = *p0 + (i < r->ub ? r->sb : r->st);
    if (*pe > panels) *pe = panels;
}

typedef struct {
    cmf_pool *pool;
    const cmf_kern *k;
    float *out;
    int64_t ld_out;
    const float *x;
    int64_t n;
    const cmf_weight *w;
    const float *bias;
    int i8, levels; /* levels: activation slots per token (1 for the float family) */
    kern_gemv_i8 gemv; /* the fused decode kernel when n <= KERN_GEMV_T and the path has one for the dtype */
    int gemm;          /* GEMM (kern.h gemm_pack_i8 / gemm_i8, or _f32 for the float family) for n > KERN_GEMV_T
                          when the path has one */
    int64_t tchunks, kc; /* GEMM: token ranges per row panel, blocks (int8) or columns (float) per chunk */
    rp_runs runs;        /* repacked GEMM: the panels' work items per token range (rp_runs_make) */
    int fastq;           /* GEMM on the avx512 path: cmf_qact_quantize_avx512 (bit-identical) quantizes */
    const cmf_rp *rp;    /* the view's load-time repacked copy (kern.h cmf_rp) when the path has kernels for it */
    int64_t gpi;         /* repacked decode: row groups of 16 per work item */
    cmf_claim claim;     /* decode (repacked or not) and the tiled path: the items, one contiguous range per thread
                            (claim.h) */
    cmf_qact a;
    const float *col; /* q8_2f column scales, f32 [cols] */
    int64_t rows_per_item;
    atomic_llong next;
} mm_task;

static size_t tile_bytes(int i8) {
    return i8 ? (size_t)KERN_RB * KERN_KB * 32 + (size_t)KERN_RB * KERN_KB * 4
              : (size_t)KERN_RB * KERN_KB * 32 * 4;
}

static void quantize(mm_task *t, int64_t t0, int64_t t1) {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    if (t->fastq) {
        cmf_qact_quantize_avx512(&t->a, t->x, t->w->cols, t->w->cols, t->col, t0, t1);
        return;
    }
#endif
    cmf_qact_quantize(&t->a, t->x, t->w->cols, t->w->cols, t->col, t->levels, t0, t1);
}

static void quant_worker(void *ctx, int ith, int nth) {
    mm_task *t = ctx;
    quantize(t, t->n * ith / nth, t->n * (ith + 1) / nth);
}

/* Adds acc (slots t0..t0+tb-1) into out; slot v belongs to token v / levels, and the first slot of a token in
 * the first column chunk sets the output (bias included). */
static void store(mm_task *t, int64_t r, int nr, int64_t t0, int tb, int first, float acc[KERN_RB][KERN_TB]) {
    for (int j = 0; j < tb; j++) {
        float *o = t->out + (t0 + j) / t->levels * t->ld_out + r;
        const int init = first && (t0 + j) % t->levels == 0;
        for (int i = 0; i < nr; i++) {
            if (init) o[i] = acc[i][j] + (t->bias ? t->bias[r + i] : 0.0f);
            else o[i] += acc[i][j];
        }
    }
}

static void tile_i8(mm_task *t, int8_t *q, float *ws, int64_t r, int nr, int64_t b0, int64_t kb) {
    const cmf_weight *w = t->w;
    const int64_t ldq = KERN_KB * 32;
    for (int i = 0; i < nr; i++) t->k->decode_i8[w->dtype](w, r + i, b0, kb, q + i * ldq, ws + i * KERN_KB);
    for (int i = nr; i < KERN_RB; i++) {
        memset(q + i * ldq, 0, (size_t)kb * 32);
        memset(ws + i * KERN_KB, 0, (size_t)kb * sizeof(float));
    }
    float acc[KERN_RB][KERN_TB];
    const int64_t slots = t->n * t->levels;
    for (int64_t t0 = 0; t0 < slots; t0 += KERN_TB) {
        const int tb = slots - t0 < KERN_TB ? (int)(slots - t0) : KERN_TB;
        t->k->mk_i8(q, ldq, ws, KERN_KB, kb, &t->a, t0, tb, b0, acc);
        store(t, r, nr, t0, tb, b0 == 0, acc);
    }
}

static void tile_f32(mm_task *t, float *buf, int64_t r, int nr, int64_t c0, int64_t nc) {
    const cmf_weight *w = t->w;
    const float *wf;
    int64_t ldw;
    if (w->dtype == CMF_DT_F32 && nr == KERN_RB) {
        wf = (const float *)(const void *)w->data + (w->row0 + r) * w->cols + c0;
        ldw = w->cols;
    } else {
        ldw = KERN_KB * 32;
        for (int i = 0; i < nr; i++) t->k->decode_f32(w, r + i, c0, nc, buf + i * ldw);
        for (int i = nr; i < KERN_RB; i++) memset(buf + i * ldw, 0, (size_t)nc * sizeof(float));
        wf = buf;
    }
    float acc[KERN_RB][KERN_TB];
    for (int64_t t0 = 0; t0 < t->n; t0 += KERN_TB) {
        const int tb = t->n - t0 < KERN_TB ? (int)(t->n - t0) : KERN_TB;
        t->k->mk_f32(wf, ldw, t->x, w->cols, t0, tb, c0, nc, acc);
        store(t, r, nr, t0, tb, c0 == 0, acc);
    }
}

static void mm_worker(void *ctx, int ith, int nth) {
    (void)nth;
    mm_task *t = ctx;
    const cmf_weight *w = t->w;
    uint8_t *scratch = cmf_pool_scratch(t->pool, ith, tile_bytes(t->i8)); /* reserved by cmf_matmul */
    if (!scratch) return;
    const int64_t nb = (w->cols + 31) / 32;
    for (;;) {
        const int64_t item = cmf_claim_next(&t->claim, ith), r0 = item * t->rows_per_item;
        if (item < 0 || r0 >= w->rows) break;
        const int64_t r1 = r0 + t->rows_per_item < w->rows ? r0 + t->rows_per_item : w->rows;
        if (t->gemv) {
            float *ws = (float *)(void *)(scratch + (size_t)KERN_RB * KERN_KB * 32);
            for (int64_t r = r0; r < r1; r += KERN_RB) {
                const int nr = r1 - r < KERN_RB ? (int)(r1 - r) : KERN_RB;
                float acc[KERN_RB][KERN_TB];
                t->gemv(w, r, nr, &t->a, (int)t->n, ws, acc);
                for (int64_t j = 0; j < t->n; j++)
                    for (int i = 0; i < nr; i++)
                        t->out[j * t->ld_out + r + i] = acc[i][j] + (t->bias ? t->bias[r + i] : 0.0f);
            }
            continue;
        }
        for (int64_t b0 = 0; b0 < nb; b0 += KERN_KB) {
            const int64_t kb = nb - b0 < KERN_KB ? nb - b0 : KERN_KB;
            for (int64_t r = r0; r < r1; r += KERN_RB) {
                const int nr = r1 - r < KERN_RB ? (int)(r1 - r) : KERN_RB;
                if (t->i8) {
                    int8_t *q = (int8_t *)scratch;
                    float *ws = (float *)(void *)(scratch + (size_t)KERN_RB * KERN_KB * 32);
                    tile_i8(t, q, ws, r, nr, b0, kb);
                } else {
                    const int64_t c0 = 32 * b0, nc = w->cols - c0 < 32 * kb ? w->cols - c0 : 32 * kb;
                    tile_f32(t, (float *)(void *)scratch, r, nr, c0, nc);
                }
            }
        }
    }
}

/* Prefetches (into L2) the stored bytes of rows [r, r+nr), blocks [b0, b0+kb) of an int8-family view: the
 * packer's next input, fetched while the current panel is multiplied. Scales and q4tp codes are left to the
 * hardware. */
static void prefetch_panel(const cmf_weight *w, int64_t r, int nr, int64_t b0, int64_t kb) {
    const int64_t C = w->cols, G = C / 32;
    for (int i = 0; i < nr; i++) {
        const int64_t R = w->row0 + r + i;
        const uint8_t *p;
        int64_t len;
        switch (w->dtype) {
        case CMF_DT_Q8_ROW:
        case CMF_DT_Q8_2F:
            p = w->data + R * C + 32 * b0;
            len = C - 32 * b0 < 32 * kb ? C - 32 * b0 : 32 * kb;
            break;
        case CMF_DT_Q4_TILED: p = w->data + 18 * (R * G + b0), len = 18 * kb; break;
        case CMF_DT_Q2TP: p = w->data + 8 * (R * G + b0), len = 8 * kb; break;
        default: p = w->data + 16 * (R * G + b0), len = 16 * kb; break; /* q4_block, q4tp nibbles */
        }
        for (int64_t o = 0; o < len; o += 64) __builtin_prefetch(p + o, 0, 2);
    }
}

/* The GEMM path: work items are (row panel of KERN_GEMM_R rows, token range); per item and column chunk the
 * panel is packed once into this thread's scratch and multiplied with every token of the range. Each thread
 * claims its next item before computing the current one, so that the weights it packs next are prefetched
 * while it computes (rows of a few hundred bytes do not train the hardware prefetcher). */
static void gemm_worker(void *ctx, int ith, int nth) {
    (void)nth;
    mm_task *t = ctx;
    const cmf_weight *w = t->w;
    void *pack = cmf_pool_scratch(t->pool, ith, KERN_GEMM_PACK_BYTES); /* reserved by cmf_matmul */
    if (!pack) return;
    const int64_t panels = (w->rows + KERN_GEMM_R - 1) / KERN_GEMM_R, nb = t->a.nb, items = panels * t->tchunks;
    int64_t item = atomic_fetch_add_explicit(&t->next, 1, memory_order_relaxed);
    while (item < items) {
        const int64_t next = atomic_fetch_add_explicit(&t->next, 1, memory_order_relaxed);
        const int64_t p = item / t->tchunks, c = item % t->tchunks, r = p * KERN_GEMM_R;
        const int nr = w->rows - r < KERN_GEMM_R ? (int)(w->rows - r) : KERN_GEMM_R;
        const int64_t t0 = t->n * c / t->tchunks, t1 = t->n * (c + 1) / t->tchunks;
        if (!t->i8) { /* float family: column chunks of kc values */
            for (int64_t c0 = 0; c0 < w->cols; c0 += t->kc) {
                const int64_t nc = w->cols - c0 < t->kc ? w->cols - c0 : t->kc;
                t->k->gemm_pack_f32(w, r, nr, c0, nc, pack);
                t->k->gemm_f32(pack, t->x + c0, w->cols, t0, t1, t->out + r, t->ld_out, t->bias ? t->bias + r : NULL,
                               c0 == 0);
            }
            item = next;
            continue;
        }
        for (int64_t b0 = 0; b0 < nb; b0 += t->kc) {
            const int64_t kb = nb - b0 < t->kc ? nb - b0 : t->kc;
            t->k->gemm_pack_i8(w, r, nr, b0, kb, pack);
            if (b0 + kb < nb) { /* the next chunk of this panel, else the first of the next item's panel */
                prefetch_panel(w, r, nr, b0 + kb, nb - b0 - kb < t->kc ? nb - b0 - kb : t->kc);
            } else if (next < items && next / t->tchunks != p) {
                const int64_t rn = next / t->tchunks * KERN_GEMM_R;
                prefetch_panel(w, rn, w->rows - rn < KERN_GEMM_R ? (int)(w->rows - rn) : KERN_GEMM_R, 0,
                               nb < t->kc ? nb : t->kc);
            }
            t->k->gemm_i8(pack, &t->a, t0, t1, t->out + r, t->ld_out, t->bias ? t->bias + r : NULL, b0 == 0);
        }
        item = next;
    }
}

/* The repacked copy (kern.h cmf_rp), decode: work items of gpi groups of 16 rows, each one sequential stream that
 * the kernel prefetches inside, taken from the thread's own range of items first (cmf_claim); the bias is added
 * after. */
static void rp_gemv_worker(void *ctx, int ith, int nth) {
    (void)nth;
    mm_task *t = ctx;
    const cmf_weight *w = t->w;
    const int64_t G0 = w->row0 / KERN_RP_R, ng = (w->rows + KERN_RP_R - 1) / KERN_RP_R;
    for (;;) {
        const int64_t it = cmf_claim_next(&t->claim, ith), g = it * t->gpi;
        if (it < 0 || g >= ng) break;
        const int64_t r = KERN_RP_R * g, re = g + t->gpi < ng ? KERN_RP_R * (g + t->gpi) : w->rows;
        t->k->rp_gemv(t->rp, G0 + g, re - r, &t->a, (int)t->n, t->out + r, t->ld_out);
        if (t->bias)
            for (int64_t j = 0; j < t->n; j++)
                for (int64_t i = r; i < re; i++) t->out[j * t->ld_out + i] += t->bias[i];
    }
}

/* The repacked copy, prefill: work items are (panel of 2 groups = 32 rows, token range), column chunks of kc blocks;
 * the weights are read in place from the copy (no packing). */
static void rp_gemm_worker(void *ctx, int ith, int nth) {
    (void)ith, (void)nth;
    mm_task *t = ctx;
    const cmf_weight *w = t->w;
    const int64_t G0 = w->row0 / KERN_RP_R, panels = (w->rows + 31) / 32, nb = t->a.nb;
    const int64_t items = t->runs.items * t->tchunks;
    for (;;) {
        const int64_t item = atomic_fetch_add_explicit(&t->next, 1, memory_order_relaxed);
        if (item >= items) break;
        const int64_t c = item % t->tchunks, t0 = t->n * c / t->tchunks, t1 = t->n * (c + 1) / t->tchunks;
        int64_t p, pe;
        rp_run(&t->runs, panels, item / t->tchunks, &p, &pe);
        for (; p < pe; p++) {
            const int64_t r = 32 * p;
            const int nr = w->rows - r < 32 ? (int)(w->rows - r) : 32;
            for (int64_t b0 = 0; b0 < nb; b0 += t->kc) {
                const int64_t kb = nb - b0 < t->kc ? nb - b0 : t->kc;
                t->k->rp_gemm(t->rp, G0 + 2 * p, nr > 16 ? 2 : 1, nr, b0, kb, &t->a, t0, t1, t->out + r, t->ld_out,
                              t->bias ? t->bias + r : NULL, b0 == 0, b0 + kb == nb);
            }
        }
    }
}

void cmf_matmul_ref_f32(float *out, int64_t ld_out, const float *x, int64_t n, const cmf_weight *w,
                        const float *bias) {
    enum { CH = 256 };
    float buf[CH];
    for (int64_t r = 0; r < w->rows; r++) {
        for (int64_t t = 0; t < n; t++) out[t * ld_out + r] = bias ? bias[r] : 0.0f;
        for (int64_t c0 = 0; c0 < w->cols; c0 += CH) {
            const int64_t nc = w->cols - c0 < CH ? w->cols - c0 : CH;
            cmf_weight_cols_f32(w, r, c0, nc, buf);
            for (int64_t t = 0; t < n; t++) {
                const float *xt = x + t * w->cols + c0;
                float s = 0;
                for (int64_t c = 0; c < nc; c++) s += buf[c] * xt[c];
                out[t * ld_out + r] += s;
            }
        }
    }
}

/* The repacked path of a task whose activations are quantized (t->a, one level): decode (n <= KERN_GEMV_T: one item
 * of contiguous groups per thread and split, a few long streams) or the GEMM, on the pool unless the product is
 * small. */
static void rp_launch(mm_task *t) {
    const cmf_weight *w = t->w;
    const int64_t n = t->n;
    const int nth = cmf_pool_size(t->pool);
    const int small = (double)w->rows * (double)w->cols * (double)n < MM_PAR_MIN;
    if (n <= KERN_GEMV_T) {
        const int64_t ng = (w->rows + KERN_RP_R - 1) / KERN_RP_R, items = (int64_t)nth * RP_SPLIT;
        t->gpi = (ng + items - 1) / items;
        cmf_claim_init(&t->claim, (ng + t->gpi - 1) / t->gpi, small ? 1 : nth);
        if (small) rp_gemv_worker(t, 0, 1);
        else cmf_pool_run_dyn(t->pool, rp_gemv_worker, t);
        return;
    }
    const int64_t nb = t->a.nb, panels = (w->rows + 31) / 32, chunks = (nb + KERN_GEMM_KB - 1) / KERN_GEMM_KB;
    t->kc = (nb + chunks - 1) / chunks;
    t->tchunks = panels >= 4 * nth ? 1 : (4 * nth + panels - 1) / panels;
    if (t->tchunks > n / 8) t->tchunks = n / 8 > 1 ? n / 8 : 1;
    t->runs = rp_runs_make(panels, t->tchunks, n, nth);
    atomic_init(&t->next, 0);
    if (small) rp_gemm_worker(t, 0, 1);
    else cmf_pool_run_dyn(t->pool, rp_gemm_worker, t);
}

/* A view with a split repacked copy (kern.h cmf_rp: q4_block / q4_tiled with cols % 32 != 0): the copy's two rows
 * per stored row are multiplied as a view of 2 * rows rows into a temporary (decode or GEMM kernel, as for any copy),
 * then out[t][r] = tmp[t][2r] + tmp[t][2r + 1] (+ bias[r]): the same operations for any n, so batch invariant. Out
 * of memory: the f32 reference product. */
static void matmul_split(cmf_pool *pool, float *out, int64_t ld_out, const float *x, int64_t n, const cmf_weight *w,
                         const float *bias, const cmf_rp *rp) {
    const int64_t R = w->rows, ld = 2 * R;
    float *tmp = malloc((size_t)(n * ld) * sizeof(float));
    if (!tmp) {
        cmf_matmul_ref_f32(out, ld_out, x, n, w, bias);
        return;
    }
    cmf_weight v = *w; /* the copy's rows of the view: [2 row0, 2 row0 + 2 rows) */
    v.rows = ld;
    v.row0 = 2 * w->row0;
    mm_task t = {.pool = pool, .k = cmf_kern_active(), .out = tmp, .ld_out = ld, .x = x, .n = n, .w = &v,
                 .i8 = 1, .levels = 1, .rp = rp, .fastq = cmf_cpu_path() == CMF_CPU_AVX512};
    uint8_t *sh = cmf_pool_shared(pool, cmf_qact_bytes(n, w->cols));
    if (!sh) {
        free(tmp);
        cmf_matmul_ref_f32(out, ld_out, x, n, w, bias);
        return;
    }
    cmf_qact_init(&t.a, sh, n, w->cols);
    t.a.dx = NULL, t.a.cx = NULL; /* the repacked kernels read only q, d, s (kern.h cmf_qact) */
    if (n * w->cols < QUANT_PAR_MIN) quantize(&t, 0, n);
    else cmf_pool_run(pool, quant_worker, &t);
    rp_launch(&t);
    for (int64_t j = 0; j < n; j++) {
        const float *s = tmp + j * ld;
        float *o = out + j * ld_out;
        if (bias)
            for (int64_t r = 0; r < R; r++) o[r] = (s[2 * r] + s[2 * r + 1]) + bias[r];
        else
            for (int64_t r = 0; r < R; r++) o[r] = s[2 * r] + s[2 * r + 1];
    }
    free(tmp);
}

void cmf_matmul(cmf_pool *pool, float *out, int64_t ld_out, const float *x, int64_t n, const cmf_weight *w,
                const float *bias) {
    if (n <= 0 || w->rows <= 0) return;
    if (w->cols <= 0) {
        for (int64_t t = 0; t < n; t++)
            for (int64_t r = 0; r < w->rows; r++) out[t * ld_out + r] = bias ? bias[r] : 0.0f;
        return;
    }
    mm_task t = {.pool = pool, .k = cmf_kern_active(), .out = out, .ld_out = ld_out, .x = x, .n = n, .w = w,
                 .bias = bias, .i8 = is_i8(w)};
    const cmf_rp *rp = t.k->rp_gemv && t.k->rp_gemm && cmf_cpu_act_levels() == 1 ? cmf_rp_of(w) : NULL;
    if (rp && rp->split && pool && cmf_cpu_path() != CMF_CPU_F32REF) { /* q4 with cols % 32 != 0: its copy */
        matmul_split(pool, out, ld_out, x, n, w, bias, rp);
        return;
    }
    t.levels = t.i8 ? cmf_cpu_act_levels() : 1;
    if (t.i8 && t.levels == 1) t.rp = rp;
    if (t.i8 && t.levels == 1 && n <= KERN_GEMV_T) t.gemv = t.k->gemv_i8[w->dtype];
    t.gemm = t.i8 ? t.levels == 1 && n > KERN_GEMV_T && t.k->gemm_pack_i8 && t.k->gemm_i8
                  : n > KERN_GEMV_T && t.k->gemm_pack_f32 && t.k->gemm_f32;
    const size_t scratch = t.gemm ? KERN_GEMM_PACK_BYTES : tile_bytes(t.i8);
    if (!pool || cmf_cpu_path() == CMF_CPU_F32REF || cmf_pool_reserve(pool, scratch) != CMF_OK) {
        cmf_matmul_ref_f32(out, ld_out, x, n, w, bias);
        return;
    }
    if (t.i8) {
        size_t qb = cmf_qact_bytes(n * t.levels, w->cols), cb = w->dtype == CMF_DT_Q8_2F ? (size_t)w->cols * 4 : 0;
        uint8_t *sh = cmf_pool_shared(pool, qb + cb);
        if (!sh) {
            cmf_matmul_ref_f32(out, ld_out, x, n, w, bias);
            return;
        }
        cmf_qact_init(&t.a, sh, n * t.levels, w->cols);
        if (t.rp) t.a.dx = NULL, t.a.cx = NULL; /* the repacked kernels read only q, d, s (kern.h cmf_qact) */
        if (cb) { /* q8_2f: f16 column scales after the row scales (§2.3), folded into the activations */
            float *col = (float *)(void *)(sh + qb);
            const uint8_t *cs = w->data + (size_t)(w->full_rows * w->cols) + 2 * (size_t)w->full_rows;
            for (int64_t c = 0; c < w->cols; c++) col[c] = cmf_f16_table[cmf_rd16(cs + 2 * c)];
            t.col = col;
        }
        t.fastq = (t.gemm || t.rp) && cmf_cpu_path() == CMF_CPU_AVX512;
        if (n * w->cols < QUANT_PAR_MIN) quantize(&t, 0, n);
        else cmf_pool_run(pool, quant_worker, &t);
    }
    const int nth = cmf_pool_size(pool);
    if (t.rp) {
        rp_launch(&t);
        return;
    }
    if (t.gemm) {
        /* column chunks of equal size; token ranges so that every thread gets about 4 items when the panels are
         * few (each range packs the panel again: cheap against n / tchunks tokens of products) */
        const int64_t nb = t.i8 ? t.a.nb : w->cols, kmax = t.i8 ? KERN_GEMM_KB : KERN_GEMM_KC_F32;
        const int64_t panels = (w->rows + KERN_GEMM_R - 1) / KERN_GEMM_R, chunks = (nb + kmax - 1) / kmax;
        t.kc = (nb + chunks - 1) / chunks;
        t.tchunks = panels >= 4 * nth ? 1 : (4 * nth + panels - 1) / panels;
        if (t.tchunks > n / 8) t.tchunks = n / 8 > 1 ? n / 8 : 1;
        atomic_init(&t.next, 0);
        if ((double)w->rows * (double)w->cols * (double)n < MM_PAR_MIN) gemm_worker(&t, 0, 1);
        else cmf_pool_run_dyn(pool, gemm_worker, &t);
        return;
    }
    int64_t rpi = (w->rows / (4 * nth) + KERN_RB - 1) / KERN_RB * KERN_RB;
    t.rows_per_item = rpi < KERN_RB ? KERN_RB : rpi > MAX_ROWS_PER_ITEM ? MAX_ROWS_PER_ITEM : rpi;
    const int small = (double)w->rows * (double)w->cols * (double)n < MM_PAR_MIN;
    cmf_claim_init(&t.claim, (w->rows + t.rows_per_item - 1) / t.rows_per_item, small ? 1 : nth);
    if (small) mm_worker(&t, 0, 1);
    else cmf_pool_run_dyn(pool, mm_worker, &t);
}

/* ---- products of one input as one fan-out (cmf_matmul_group) -------------------------------------------------- */

enum { GROUP_MAX = 16 };

/* One product of a group: its repacked copy, output, bias, and the work units [u0, u0 + units) of the task's
 * numbering (decode: gpi row groups of 16 each; prefill: (panel of 32 rows, token range) pairs). */
typedef struct {
    const cmf_rp *rp;
    const cmf_weight *w;
    float *out;
    int64_t ld_out;
    const float *bias;
    rp_runs runs; /* prefill: the panels' work items (rp_runs_make) */
    int64_t u0, units;
} grp_prod;

typedef struct {
    const cmf_kern *k;
    cmf_qact a;
    int64_t n;
    int glu;         /* 0; 1 SiLU, 2 GELU-tanh of prods[0] (gate) times prods[1] (up), unit by unit */
    int gemv;        /* n <= KERN_GEMV_T: the decode kernel */
    int64_t gpi;     /* decode: row groups per unit */
    int64_t tchunks; /* prefill: token ranges per panel */
    int64_t kc;      /* prefill: blocks per column chunk */
    grp_prod p[GROUP_MAX];
    int np;
    int64_t units;   /* all products' units (with glu: the gate's only) */
    atomic_llong next; /* prefill: the next unit */
    cmf_claim claim;   /* decode: the units, one contiguous range per thread (claim.h) */
} grp_task;

/* Unit u of product p: rows [*r, *re) for tokens [*t0, *t1), computed exactly as rp_gemv_worker / rp_gemm_worker
 * compute them (same kernel calls, bias added the same way), so the bits equal cmf_matmul's. */
static void grp_unit(const grp_task *t, const grp_prod *p, int64_t u, int64_t *r, int64_t *re, int64_t *t0,
                     int64_t *t1) {
    const cmf_weight *w = p->w;
    const int64_t G0 = w->row0 / KERN_RP_R;
    if (t->gemv) {
        const int64_t ng = (w->rows + KERN_RP_R - 1) / KERN_RP_R, g = u * t->gpi;
        *r = KERN_RP_R * g;
        *re = g + t->gpi < ng ? KERN_RP_R * (g + t->gpi) : w->rows;
        *t0 = 0, *t1 = t->n;
        t->k->rp_gemv(p->rp, G0 + g, *re - *r, &t->a, (int)t->n, p->out + *r, p->ld_out);
        if (p->bias)
            for (int64_t j = 0; j < t->n; j++)
                for (int64_t i = *r; i < *re; i++) p->out[j * p->ld_out + i] += p->bias[i];
        return;
    }
    const int64_t c = u % t->tchunks, panels = (w->rows + 31) / 32;
    int64_t p0, pe;
    rp_run(&p->runs, panels, u / t->tchunks, &p0, &pe);
    *r = 32 * p0, *re = 32 * pe < w->rows ? 32 * pe : w->rows;
    *t0 = t->n * c / t->tchunks, *t1 = t->n * (c + 1) / t->tchunks;
    for (int64_t pn = p0; pn < pe; pn++) {
        const int64_t r0 = 32 * pn;
        const int nr = w->rows - r0 < 32 ? (int)(w->rows - r0) : 32;
        for (int64_t b0 = 0; b0 < t->a.nb; b0 += t->kc) {
            const int64_t kb = t->a.nb - b0 < t->kc ? t->a.nb - b0 : t->kc;
            t->k->rp_gemm(p->rp, G0 + 2 * pn, nr > 16 ? 2 : 1, nr, b0, kb, &t->a, *t0, *t1, p->out + r0, p->ld_out,
                          p->bias ? p->bias + r0 : NULL, b0 == 0, b0 + kb == t->a.nb);
        }
    }
}

static void grp_worker(void *ctx, int ith, int nth) {
    (void)nth;
    grp_task *t = ctx;
    for (;;) {
        const int64_t u = t->gemv ? cmf_claim_next(&t->claim, ith)
                                  : atomic_fetch_add_explicit(&t->next, 1, memory_order_relaxed);
        if (u < 0 || u >= t->units) break;
        int i = 0;
        while (u >= t->p[i].u0 + t->p[i].units) i++;
        int64_t r, re, t0, t1;
        grp_unit(t, &t->p[i], u - t->p[i].u0, &r, &re, &t0, &t1);
        if (!t->glu) continue;
        grp_unit(t, &t->p[1], u, &r, &re, &t0, &t1); /* the up rows of the same unit, then gate = act(gate) * up */
        for (int64_t j = t0; j < t1; j++) {
            float *g = t->p[0].out + j * t->p[0].ld_out + r;
            const float *up = t->p[1].out + j * t->p[1].ld_out + r;
            if (t->glu == 2) cmf_gelu_tanh(g, re - r);
            else cmf_silu(g, re - r);
            for (int64_t c = 0; c < re - r; c++) g[c] *= up[c];
        }
    }
}

/* The group can run as one fan-out: every product takes the repacked path of cmf_matmul with the same quantized
 * activations (one level, no q8_2f column scales, no split copy, one column count). */
static int grp_fusable(const cmf_kern *k, const cmf_mm *mm, int count) {
    if (count < 1 || count > GROUP_MAX || !k->rp_gemv || !k->rp_gemm || cmf_cpu_act_levels() != 1 ||
        cmf_cpu_path() == CMF_CPU_F32REF)
        return 0;
    for (int i = 0; i < count; i++) {
        const cmf_weight *w = mm[i].w;
        if (!is_i8(w) || w->dtype == CMF_DT_Q8_2F || !cmf_rp_of(w) || cmf_rp_of(w)->split ||
            w->cols != mm[0].w->cols || w->rows <= 0)
            return 0;
    }
    return 1;
}

static atomic_int g_fuse = -1; /* -1: not read from CMF_CPU_FUSE yet */

int cmf_cpu_fuse_enabled(void) {
    int on = atomic_load_explicit(&g_fuse, memory_order_acquire);
    if (on >= 0) return on;
    const char *e = getenv("CMF_CPU_FUSE");
    on = !(e && !strcmp(e, "0"));
    atomic_store_explicit(&g_fuse, on, memory_order_release);
    return on;
}

void cmf_cpu_set_fuse(int on) { atomic_store_explicit(&g_fuse, on ? 1 : 0, memory_order_release); }

void cmf_matmul_group(cmf_pool *pool, const float *x, int64_t n, const cmf_mm *mm, int count, int glu) {
    if (n <= 0 || count <= 0) return;
    const cmf_kern *k = cmf_kern_active();
    const int fuse = pool && cmf_cpu_fuse_enabled() && (count > 1 || glu) && grp_fusable(k, mm, count) &&
                     (!glu || (count == 2 && mm[0].w->rows == mm[1].w->rows));
    size_t qb = 0;
    uint8_t *sh = NULL;
    if (fuse) {
        qb = cmf_qact_bytes(n, mm[0].w->cols);
        sh = cmf_pool_shared(pool, qb);
    }
    if (!sh) { /* one product after the other, then the GLU: what the ops do one by one */
        for (int i = 0; i < count; i++) cmf_matmul(pool, mm[i].out, mm[i].ld_out, x, n, mm[i].w, mm[i].bias);
        if (glu)
            for (int64_t j = 0; j < n; j++) {
                float *g = mm[0].out + j * mm[0].ld_out;
                const float *up = mm[1].out + j * mm[1].ld_out;
                if (glu == 2) cmf_gelu_tanh(g, mm[0].w->rows);
                else cmf_silu(g, mm[0].w->rows);
                for (int64_t c = 0; c < mm[0].w->rows; c++) g[c] *= up[c];
            }
        return;
    }
    grp_task task, *t = &task;
    memset(t, 0, sizeof *t);
    t->k = k, t->n = n, t->glu = glu, t->np = count, t->gemv = n <= KERN_GEMV_T;
    cmf_qact_init(&t->a, sh, n, mm[0].w->cols);
    t->a.dx = NULL, t->a.cx = NULL; /* every product is a repacked one: q, d, s only (kern.h cmf_qact) */
    mm_task q = {.x = x, .n = n, .w = mm[0].w, .levels = 1, .a = t->a, .fastq = cmf_cpu_path() == CMF_CPU_AVX512};
    if (n * mm[0].w->cols < QUANT_PAR_MIN) quantize(&q, 0, n);
    else cmf_pool_run(pool, quant_worker, &q);
    const int nth = cmf_pool_size(pool);
    double work = 0;
    for (int i = 0; i < count; i++) work += (double)mm[i].w->rows * (double)mm[i].w->cols * (double)n;
    for (int i = 0; i < count; i++) {
        grp_prod *p = &t->p[i];
        p->w = mm[i].w, p->rp = cmf_rp_of(mm[i].w), p->out = mm[i].out, p->ld_out = mm[i].ld_out;
        p->bias = mm[i].bias;
        p->u0 = i && !glu ? t->p[i - 1].u0 + t->p[i - 1].units : 0;
        if (t->gemv) { /* each product split as cmf_matmul splits it (the split does not change the bits) */
            const int64_t ng = (p->w->rows + KERN_RP_R - 1) / KERN_RP_R, items = (int64_t)nth * RP_SPLIT;
            if (i == 0) t->gpi = (ng + items - 1) / items;
            p->units = (ng + t->gpi - 1) / t->gpi;
        } else {
            const int64_t panels = (p->w->rows + 31) / 32;
            if (i == 0) {
                const int64_t nb = t->a.nb, chunks = (nb + KERN_GEMM_KB - 1) / KERN_GEMM_KB;
                t->kc = (nb + chunks - 1) / chunks;
                t->tchunks = panels >= 4 * nth ? 1 : (4 * nth + panels - 1) / panels;
                if (t->tchunks > n / 8) t->tchunks = n / 8 > 1 ? n / 8 : 1;
            }
            p->runs = rp_runs_make(panels, t->tchunks, n, nth);
            p->units = p->runs.items * t->tchunks;
        }
    }
    t->units = glu ? t->p[0].units : t->p[count - 1].u0 + t->p[count - 1].units;
    atomic_init(&t->next, 0);
    if (t->gemv) cmf_claim_init(&t->claim, t->units, work < MM_PAR_MIN ? 1 : nth);
    if (work < MM_PAR_MIN) grp_worker(t, 0, 1);
    else cmf_pool_run_dyn(pool, grp_worker, t);
}
