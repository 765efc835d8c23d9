/* test_cuda_fuse.c — the fused prologue / epilogue of the int8-activation decode products (cuda_ops.h,
 * cmf_cuda_matvec_multi_ex / cmf_cuda_matvec_glu_ex) give, bit for bit, what the separate launches give:
 *  - d_res: product then cmf_cuda_add(x, x, y) (the residual add of o_proj / down_proj);
 *  - d_norm_x: cmf_cuda_rmsnorm then the products (q/k/v of three weights, gate/up + GLU), and the normalized rows
 *    written to d_x; plain and gemma-style norm weights, no weight;
 * for q8_row and q4tp, n = 1, 3, 8, rows of 1024 / 4096 / 8224 columns (one, two and four warps per row), one and two
 * activation levels, on fresh random data with poisoned outputs; the decode attention with the q/k norm + RoPE +
 * cache write inside (cmf_cuda_attn_decode_rope) against qk_norm_rope_kv + attn_decode_dpos; one-token products
 * with several row groups per block against the double reference (run with CMF_CUDA_I8_XPRE=1 too). Also the
 * refusals (f16 weights, d_res on several products, a GQA group over 8); d_res with d_i8q (the activations quantized
 * once by k_i8_prequant, 8224 columns) on the streaming kernel. Exits 77 (ctest SKIP) without a device. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_ref.h"
#include "quant/dtype.h"

static uint64_t rng = 0x2545f4914f6cdd1dull;

/* A random rows x cols matrix encoded as dt, on the device, and its decoded floats (cuda_ref.h). */
static float *dev_weight_dec(int dt, int64_t rows, int64_t cols, cmf_cuda_weight *w) {
    return ref_dev_weight(&rng, dt, rows, cols, 0, w);
}

/* dev_weight_dec without the decoded floats. */
static void dev_weight(int dt, int64_t rows, int64_t cols, cmf_cuda_weight *w) {
    free(dev_weight_dec(dt, rows, cols, w));
}

/* Whether n floats of the device buffers a and b are the same bits. */
static int same_bits(const float *a, const float *b, int64_t n) {
    const size_t bytes = (size_t)n * sizeof(float);
    float *ha = malloc(bytes), *hb = malloc(bytes);
    OK(cmf_cuda_download(ha, a, bytes, NULL));
    OK(cmf_cuda_download(hb, b, bytes, NULL));
    OK(cmf_cuda_sync(NULL));
    const int same = memcmp(ha, hb, bytes) == 0;
    free(ha);
    free(hb);
    return same;
}

/* d_res: W [rows x cols] times a [n][cols], then x [n][rows] += y. */
static void test_residual(int dt, int64_t rows, int64_t cols, int n) {
    cmf_cuda_weight w;
    dev_weight(dt, rows, cols, &w);
    float *ha = ref_rand_vec(&rng, n * cols, 1.0f), *hx = ref_rand_vec(&rng, n * rows, 2.0f);
    float *a = ref_dev_from(ha, sizeof(float) * (size_t)(n * cols));
    const size_t rb = sizeof(float) * (size_t)(n * rows);
    float *x_ref = ref_dev_from(hx, rb), *x = ref_dev_from(hx, rb);
    float *y_ref = ref_dev_poison(rb), *y = ref_dev_poison(rb);
    OK(cmf_cuda_matvec_multi(&w, 1, a, &y_ref, NULL, n, NULL));
    OK(cmf_cuda_add(x_ref, x_ref, y_ref, (int64_t)n * rows, NULL));
    cmf_cuda_mv_ex ex;
    memset(&ex, 0, sizeof ex);
    ex.d_res = x;
    OK(cmf_cuda_matvec_multi_ex(&w, 1, a, &y, NULL, n, &ex, NULL));
    CHECK_MSG(same_bits(y, y_ref, (int64_t)n * rows), "residual epilogue: dtype %d [%lld, %lld] n=%d: y differs", dt,
              (long long)rows, (long long)cols, n);
    CHECK_MSG(same_bits(x, x_ref, (int64_t)n * rows), "residual epilogue: dtype %d [%lld, %lld] n=%d: x differs", dt,
              (long long)rows, (long long)cols, n);
    /* the same with the activations quantized once (d_i8q: k_i8_prequant for the streaming kernel's rows of >= 8192
     * columns, one token) on the streaming kernel, against the plain product on it and then the add */
    cmf_cuda_set_i8_stream(1);
    float *x2_ref = ref_dev_from(hx, rb), *x2 = ref_dev_from(hx, rb), *y2 = ref_dev_poison(rb);
    OK(cmf_cuda_matvec_multi(&w, 1, a, &y_ref, NULL, n, NULL));
    OK(cmf_cuda_add(x2_ref, x2_ref, y_ref, (int64_t)n * rows, NULL));
    void *qb = NULL;
    OK(cmf_cuda_malloc(&qb, CMF_CUDA_I8Q_BYTES));
    ex.d_i8q = qb, ex.d_res = x2;
    OK(cmf_cuda_matvec_multi_ex(&w, 1, a, &y2, NULL, n, &ex, NULL));
    CHECK_MSG(same_bits(y2, y_ref, (int64_t)n * rows) && same_bits(x2, x2_ref, (int64_t)n * rows),
              "residual epilogue, activations quantized once: dtype %d [%lld, %lld] n=%d: y or x differs", dt,
              (long long)rows, (long long)cols, n);
    ex.d_i8q = NULL, ex.d_res = x;
    cmf_cuda_set_i8_stream(-1);
    cmf_cuda_free(qb);
    cmf_cuda_free(x2_ref);
    cmf_cuda_free(x2);
    cmf_cuda_free(y2);
    /* d_res on several products is refused */
    cmf_cuda_weight w2[2] = {w, w};
    float *ys[2] = {y, y_ref};
    CHECK(cmf_cuda_matvec_multi_ex(w2, 2, a, ys, NULL, n, &ex, NULL) == CMF_E_ARG);
    cmf_cuda_free((void *)w.d_data);
    cmf_cuda_free(a);
    cmf_cuda_free(x_ref);
    cmf_cuda_free(x);
    cmf_cuda_free(y_ref);
    cmf_cuda_free(y);
    free(ha);
    free(hx);
}

/* d_norm_x: products of RMSNorm(x) (three weights of cols = d, and gate/up + GLU). mode: 0 plain weight, 1 gemma
 * style, 2 no weight. */
static void test_norm(int dt, int64_t d, int n, int mode) {
    const int64_t R[3] = {130, 64, 96}; /* q / k / v rows (130: a row group left half full) */
    cmf_cuda_weight w[3];
    for (int i = 0; i < 3; i++) dev_weight(dt, R[i], d, &w[i]);
    float *hx = ref_rand_vec(&rng, n * d, 3.0f), *hw = ref_rand_vec(&rng, d, 1.0f);
    const size_t xb = sizeof(float) * (size_t)(n * d);
    float *x = ref_dev_from(hx, xb), *nw = mode == 2 ? NULL : ref_dev_from(hw, sizeof(float) * (size_t)d);
    const float eps = 1e-6f;
    float *h_ref = ref_dev_poison(xb), *h = ref_dev_poison(xb);
    OK(cmf_cuda_rmsnorm(h_ref, x, nw, n, d, eps, mode == 1, NULL));
    float *y_ref[3], *y[3];
    for (int i = 0; i < 3; i++) {
        y_ref[i] = ref_dev_poison(sizeof(float) * (size_t)(n * R[i]));
        y[i] = ref_dev_poison(sizeof(float) * (size_t)(n * R[i]));
    }
    OK(cmf_cuda_matvec_multi(w, 3, h_ref, y_ref, NULL, n, NULL));
    cmf_cuda_mv_ex ex;
    memset(&ex, 0, sizeof ex);
    ex.d_norm_x = x, ex.d_norm_w = nw, ex.eps = eps, ex.gemma_style = mode == 1;
    OK(cmf_cuda_matvec_multi_ex(w, 3, h, y, NULL, n, &ex, NULL));
    CHECK_MSG(same_bits(h, h_ref, (int64_t)n * d), "norm prologue: dtype %d d=%lld n=%d mode %d: normalized rows "
              "differ", dt, (long long)d, n, mode);
    for (int i = 0; i < 3; i++)
        CHECK_MSG(same_bits(y[i], y_ref[i], (int64_t)n * R[i]),
                  "norm prologue: dtype %d d=%lld n=%d mode %d: output %d differs", dt, (long long)d, n, mode, i);
    /* gate/up + GLU (gate = w[0], up = a second 130-row weight) */
    cmf_cuda_weight up;
    dev_weight(dt, R[0], d, &up);
    const size_t gb = sizeof(float) * (size_t)(n * R[0]);
    float *g_ref = ref_dev_poison(gb), *g = ref_dev_poison(gb);
    float *h2 = ref_dev_poison(xb);
    OK(cmf_cuda_matvec_glu(&w[0], &up, h_ref, g_ref, n, mode == 1, NULL));
    OK(cmf_cuda_matvec_glu_ex(&w[0], &up, h2, g, n, mode == 1, &ex, NULL));
    CHECK_MSG(same_bits(g, g_ref, (int64_t)n * R[0]) && same_bits(h2, h_ref, (int64_t)n * d),
              "norm prologue + glu: dtype %d d=%lld n=%d mode %d differs", dt, (long long)d, n, mode);
    for (int i = 0; i < 3; i++) {
        cmf_cuda_free((void *)w[i].d_data);
        cmf_cuda_free(y_ref[i]);
        cmf_cuda_free(y[i]);
    }
    cmf_cuda_free((void *)up.d_data);
    cmf_cuda_free(x);
    cmf_cuda_free(nw);
    cmf_cuda_free(h_ref);
    cmf_cuda_free(h);
    cmf_cuda_free(h2);
    cmf_cuda_free(g_ref);
    cmf_cuda_free(g);
    free(hx);
    free(hw);
}

/* cmf_cuda_attn_decode_rope against cmf_cuda_qk_norm_rope_kv + cmf_cuda_attn_decode_dpos: the output and the whole
 * cache bit for bit, the raw q / k left as they were. Cache rows before pos random, the rest zero. */
static void test_attn_rope(int kv_type, int H, int NKV, int D, int rot, int pairing, int qknorm, int window,
                           int64_t pos) {
    const int64_t n_ctx = 300, row = (int64_t)NKV * D;
    const size_t es = kv_type == CMF_CUDA_KV_F32 ? 4 : 2, cb = (size_t)(n_ctx * row) * es;
    cmf_cuda_attn a;
    memset(&a, 0, sizeof a);
    a.n_heads = H, a.n_kv_heads = NKV, a.head_dim = D, a.scale = 0.088f, a.window = window, a.kv_type = kv_type;
    /* the cache: random rows before pos (f32 values, or f16 bits of them) */
    uint8_t *hc = calloc(1, cb), *hv = calloc(1, cb);
    float *r1 = ref_rand_vec(&rng, pos * row, 1.0f), *r2 = ref_rand_vec(&rng, pos * row, 1.0f);
    for (int64_t i = 0; i < pos * row; i++) {
        if (es == 4) {
            memcpy(hc + 4 * i, &r1[i], 4), memcpy(hv + 4 * i, &r2[i], 4);
        } else { /* f16 bits of finite values below 2 (bit 14, the exponent's top bit, clear) */
            const uint16_t b1 = (uint16_t)((uint32_t)((r1[i] + 1.0f) * 16384.0f) & 0xbfffu);
            const uint16_t b2 = (uint16_t)((uint32_t)((r2[i] + 1.0f) * 16384.0f) & 0xbfffu);
            memcpy(hc + 2 * i, &b1, 2), memcpy(hv + 2 * i, &b2, 2);
        }
    }
    void *k1 = ref_dev_from(hc, cb), *v1 = ref_dev_from(hv, cb), *k2 = ref_dev_from(hc, cb), *v2 = ref_dev_from(hv, cb);
    float *hq = ref_rand_vec(&rng, (int64_t)H * D, 2.0f), *hk = ref_rand_vec(&rng, row, 2.0f);
    float *hvv = ref_rand_vec(&rng, row, 1.0f), *hw = ref_rand_vec(&rng, 2 * D, 1.0f);
    float hf[128];
    for (int i = 0; i < rot / 2; i++) hf[i] = powf(10000.0f, -2.0f * (float)i / (float)rot);
    const size_t qb = sizeof(float) * (size_t)(H * D);
    float *q1 = ref_dev_from(hq, qb), *q2 = ref_dev_from(hq, qb);
    float *kk1 = ref_dev_from(hk, sizeof(float) * (size_t)row), *kk2 = ref_dev_from(hk, sizeof(float) * (size_t)row);
    float *vv = ref_dev_from(hvv, sizeof(float) * (size_t)row), *w = ref_dev_from(hw, sizeof(float) * (size_t)(2 * D));
    float *f = ref_dev_from(hf, sizeof hf);
    const int32_t hp = (int32_t)pos;
    int32_t *dpos = ref_dev_from(&hp, sizeof hp);
    const size_t wb = cmf_cuda_attn_decode_work_bytes(&a, n_ctx);
    void *w1 = NULL, *w2 = NULL;
    OK(cmf_cuda_malloc(&w1, wb));
    OK(cmf_cuda_malloc(&w2, wb));
    OK(cmf_cuda_memset(w1, 0, wb, NULL));
    OK(cmf_cuda_memset(w2, 0, wb, NULL));
    const size_t ob = sizeof(float) * (size_t)(H * D);
    float *o1 = ref_dev_poison(ob), *o2 = ref_dev_poison(ob);
    const float *qw = qknorm ? w : NULL, *kw = qknorm ? w + D : NULL;
    OK(cmf_cuda_qk_norm_rope_kv(q1, kk1, vv, 1, H, NKV, D, qw, kw, 1e-6f, qknorm == 2, rot, f, dpos, pairing, k1, v1,
                                kv_type, NULL));
    OK(cmf_cuda_attn_decode_dpos(&a, q1, k1, v1, dpos, n_ctx, o1, w1, NULL));
    cmf_cuda_qk_rope r = {qw, kw, 1e-6f, qknorm == 2, rot, f, pairing};
    CHECK(cmf_cuda_attn_decode_rope_ok(&a, &r));
    OK(cmf_cuda_attn_decode_rope(&a, q2, kk2, vv, &r, k2, v2, dpos, n_ctx, o2, w2, NULL));
    CHECK_MSG(same_bits(o2, o1, (int64_t)H * D), "attn_decode_rope H %d/%d D %d rot %d pairing %d qknorm %d window %d "
              "pos %lld kv %d: output differs", H, NKV, D, rot, pairing, qknorm, window, (long long)pos, kv_type);
    CHECK_MSG(same_bits(k2, k1, (int64_t)(cb / 4)) && same_bits(v2, v1, (int64_t)(cb / 4)),
              "attn_decode_rope pos %lld: cache differs", (long long)pos);
    float *q0 = ref_dev_from(hq, sizeof(float) * (size_t)(H * D));
    CHECK_MSG(same_bits(q2, q0, (int64_t)H * D), "attn_decode_rope: q was modified");
    void *bufs[] = {k1, v1, k2, v2, q1, q2, kk1, kk2, vv, w, f, dpos, w1, w2, o1, o2, q0};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) cmf_cuda_free(bufs[i]);
    free(hc), free(hv), free(r1), free(r2), free(hq), free(hk), free(hvv), free(hw);
}

/* One-token products with more row groups than the resident grid (each block loops over several groups, the path
 * of CMF_CUDA_I8_XPRE=1, which the main run of this test may set): plain and gate/up + GLU against the double
 * reference of the Q8_0-quantized activations (one level). */
static void test_big(int dt, int64_t rows, int64_t cols) {
    cmf_cuda_weight w, u;
    float *wd = dev_weight_dec(dt, rows, cols, &w), *ud = dev_weight_dec(dt, rows, cols, &u);
    float *hx = ref_rand_vec(&rng, cols, 1.0f);
    double *ref = malloc(sizeof(double) * (size_t)rows), *ru = malloc(sizeof(double) * (size_t)rows);
    ref_matmul_qact(wd, rows, cols, hx, 1, 1, ref);
    ref_matmul_qact(ud, rows, cols, hx, 1, 1, ru);
    float *x = ref_dev_from(hx, sizeof(float) * (size_t)cols), *y = ref_dev_poison(sizeof(float) * (size_t)rows);
    float *hy = malloc(sizeof(float) * (size_t)rows);
    OK(cmf_cuda_matvec(&w, x, y, 1, NULL));
    OK(cmf_cuda_download(hy, y, sizeof(float) * (size_t)rows, NULL));
    OK(cmf_cuda_sync(NULL));
    CHECK_MSG(ref_rel_err(hy, ref, rows) < 1e-5, "big product dtype %d [%lld, %lld]: %g", dt, (long long)rows,
              (long long)cols, ref_rel_err(hy, ref, rows));
    for (int64_t r = 0; r < rows; r++) ref[r] = ref[r] / (1.0 + exp(-ref[r])) * ru[r]; /* SiLU(gate) * up */
    OK(cmf_cuda_matvec_glu(&w, &u, x, y, 1, 0, NULL));
    OK(cmf_cuda_download(hy, y, sizeof(float) * (size_t)rows, NULL));
    OK(cmf_cuda_sync(NULL));
    CHECK_MSG(ref_rel_err(hy, ref, rows) < 1e-5, "big gate/up + GLU dtype %d [%lld, %lld]: %g", dt, (long long)rows,
              (long long)cols, ref_rel_err(hy, ref, rows));
    cmf_cuda_free((void *)w.d_data);
    cmf_cuda_free((void *)u.d_data);
    cmf_cuda_free(x);
    cmf_cuda_free(y);
    free(wd), free(ud), free(hx), free(ref), free(ru), free(hy);
}

int main(void) {
    if (!ref_have_device()) return 77;
    const int dts[2] = {CMF_DT_Q8_ROW, CMF_DT_Q4TP};
    cmf_cuda_set_i8act(1);
    for (int di = 0; di < 2; di++) {
        test_big(dts[di], 8000, 1024);  /* one warp per row: 500 groups of 16 rows */
        test_big(dts[di], 4000, 2048);  /* two: 500 groups of 8 */
        test_big(dts[di], 2051, 8224);  /* four: 513 groups of 4, the last one partial */
    }
    const int64_t cols[3] = {1024, 4096, 8224};
    const int ns[3] = {1, 3, 8};
    for (int lv = 1; lv <= 2; lv++) {
        cmf_cuda_set_i8act(lv);
        for (int di = 0; di < 2; di++)
            for (int ci = 0; ci < 3; ci++)
                for (int ni = 0; ni < 3; ni++) {
                    test_residual(dts[di], 130, cols[ci], ns[ni]);
                    test_norm(dts[di], cols[ci], ns[ni], (ci + ni) % 3);
                }
    }
    /* the decode attention with the q/k norm + RoPE + cache write inside: qwen3-like (q/k norm, half pairing),
     * llama-like (no norm), gemma-style norm weights, interleaved partial rotary, no RoPE, a sliding window, f32
     * caches, 8 query heads per KV head; first token, one split, several splits, the cache's end */
    const int64_t poss[4] = {0, 40, 170, 299};
    /* with every decode kernel variant (cmf_cuda_set_attn_decode: keys per softmax update, L2 prefetch, merge of
     * the splits): fused and separate kernels take the same variant, so they must agree bit for bit in each */
    static const int tile[5] = {1, 4, 4, 4, 4}, pf[5] = {0, 0, 1, 0, 0}, mg[5] = {1, 1, 1, 0, 1};
    static const int cl[5] = {0, 0, 0, 0, 1}; /* the cluster form (cmf_cuda_set_attn_cluster) */
    for (int pi = 0; pi < 20; pi++) {
        const int64_t p = poss[pi % 4];
        cmf_cuda_set_attn_decode(tile[pi / 4], pf[pi / 4], mg[pi / 4]);
        cmf_cuda_set_attn_cluster(cl[pi / 4]);
        test_attn_rope(CMF_CUDA_KV_F16, 16, 8, 128, 128, CMF_CUDA_ROPE_HALF, 1, 0, p);
        test_attn_rope(CMF_CUDA_KV_F16, 32, 8, 128, 128, CMF_CUDA_ROPE_HALF, 0, 0, p);
        test_attn_rope(CMF_CUDA_KV_F32, 16, 4, 64, 32, CMF_CUDA_ROPE_INTERLEAVED, 2, 0, p);
        test_attn_rope(CMF_CUDA_KV_F16, 8, 8, 256, 0, CMF_CUDA_ROPE_HALF, 1, 64, p);
        test_attn_rope(CMF_CUDA_KV_F32, 64, 8, 96, 96, CMF_CUDA_ROPE_HALF, 0, 100, p);
    }
    cmf_cuda_set_attn_decode(-1, -1, -1);
    cmf_cuda_set_attn_cluster(-1);
    {
        cmf_cuda_attn a;
        memset(&a, 0, sizeof a);
        a.n_heads = 32, a.n_kv_heads = 2, a.head_dim = 128, a.scale = 0.1f;
        cmf_cuda_qk_rope r;
        memset(&r, 0, sizeof r);
        CHECK(!cmf_cuda_attn_decode_rope_ok(&a, &r)); /* 16 query heads per KV head: not in one block */
    }
    /* the f32-activation path and f16 weights are refused */
    cmf_cuda_weight f;
    dev_weight(CMF_DT_F16, 64, 1024, &f);
    CHECK(!cmf_cuda_matvec_ex_ok(&f, 1, 1));
    cmf_cuda_set_i8act(0);
    cmf_cuda_weight q;
    dev_weight(CMF_DT_Q8_ROW, 64, 1024, &q);
    CHECK(!cmf_cuda_matvec_ex_ok(&q, 1, 1));
    float *x = ref_dev_poison(4096), *y = ref_dev_poison(256);
    cmf_cuda_mv_ex ex;
    memset(&ex, 0, sizeof ex);
    CHECK(cmf_cuda_matvec_multi_ex(&q, 1, x, &y, NULL, 1, &ex, NULL) == CMF_E_UNSUPPORTED);
    cmf_cuda_set_i8act(1);
    cmf_cuda_free((void *)f.d_data);
    cmf_cuda_free((void *)q.d_data);
    cmf_cuda_free(x);
    cmf_cuda_free(y);
    CMF_TEST_END();
}
