/* weights.cuh — device-side reading of CMF weight payloads (CMF_FORMAT.md §2): plane offsets, the correctly
 * rounded exp2f behind the q4tp ladder (§2.6, the device twin of src/quant/exp2f.c) and an exact per-element
 * decoder that reproduces cmf_dequant's f32 arithmetic. Internal to the CUDA backend. */
#ifndef CMF_BACKEND_CUDA_WEIGHTS_CUH
#define CMF_BACKEND_CUDA_WEIGHTS_CUH

#include "backend/cuda/common.cuh"

/* Kernel-side view of a weight: plane pointers resolved on the host. */
struct DevW {
    const uint8_t *base; /* payload start */
    int64_t rows, cols;
    const uint8_t *s1;   /* q8: row scales (f16, maybe 1-byte aligned); q4tp: params plane */
    const uint8_t *s2;   /* q8_2f: column scales; q4tp: codes plane */
    int64_t stride;      /* q4tp: code bytes per row; gpr otherwise */
    int prefetch;        /* matvec: L2-prefetch the first steps before the PDL wait (small matrices, matvec.cu) */
};

static inline DevW make_devw(const cmf_cuda_weight *w) {
    DevW d;
    d.base = (const uint8_t *)w->d_data;
    d.rows = w->rows;
    d.cols = w->cols;
    d.s1 = d.s2 = nullptr;
    d.stride = w->cols / 32;
    d.prefetch = 0;
    uint64_t n = (uint64_t)w->rows * (uint64_t)w->cols;
    if (w->dtype == CMF_DT_Q8_ROW || w->dtype == CMF_DT_Q8_2F) {
        d.s1 = d.base + n;
        d.s2 = d.base + n + 2 * (uint64_t)w->rows;
    } else if (w->dtype == CMF_DT_Q4TP) {
        uint64_t gpr = (uint64_t)w->cols / 32;
        d.s1 = d.base + w->rows * gpr * 16;
        d.s2 = d.s1 + 4 * (uint64_t)w->rows;
        d.stride = (int64_t)((5 * gpr + 7) / 8);
    }
    return d;
}

/* A decode product for the int8-activation kernel (matvec_i8.cu): up to 3 weights of one input (q/k/v), or gate
 * and up (GLU). grp_end / groups are filled by mv_i8_launch. */
struct I8Job {
    DevW w[3];
    float *y[3];
    const float *bias[3];
    unsigned grp_end[3]; /* row groups [grp_end[i-1], grp_end[i]) belong to weight i */
    unsigned groups;
    int count;
    int ks;     /* warps that split each row's columns (1, 2 or 4; from cols alone), set by mv_i8_launch */
    int levels; /* activation levels (1, or 2 with CMF_CUDA_I8ACT=2), set by mv_i8_launch */
    int pre;    /* q8 row scales loaded with the rows (before the PDL wait), not after the sums (CMF_CUDA_I8_PRE) */
    int xpre;   /* the next row group's first batch loaded before this group's sums (CMF_CUDA_I8_XPRE=1) */
    int pf_at;  /* L2 prefetch of pf[] at each block's start (0, before the PDL wait) or end (1) */
    const uint8_t *pf[CMF_CUDA_PF_SPANS]; /* L2 prefetch spans (cmf_cuda_set_l2_prefetch), set by mv_i8_launch */
    uint64_t pfn[CMF_CUDA_PF_SPANS];      /* their bytes (multiples of 16; pf 16-byte aligned) */
    uint64_t pf_tot;                      /* sum of pfn; 0: no prefetch */
    float *rx;       /* epilogue residual add (count 1, not GLU): rx[t][r] += y[t][r]; NULL: none */
    const float *nx; /* prologue RMSNorm: the input is RMSNorm(nx[t]) * nw, block 0 writes it to x; NULL: none */
    const float *nw; /* its weight (NULL: 1) */
    float *nout;     /* where block 0 writes the normalized input (the caller's d_x) */
    float neps;
    int ngemma; /* 1 + w */
    int spf;    /* streaming kernel: chunks per lane prefetched into L2 beyond its load ring (CMF_CUDA_I8S_PF) */
    int wpre;      /* weight loads issued before the PDL wait (CMF_CUDA_I8_WPRE; streaming: ring slots 0..P, < 0 all;
                    * row groups: 0 none, else the first batch); the rest follow the activations' loads */
    int norm1;     /* the prologue RMSNorm's loads issued 8 at a time per thread (CMF_CUDA_I8_NORM1, default 1) */
    int qilp;      /* one activation level: each slot quantized without the level loop (CMF_CUDA_I8_QILP, 1) */
    uint8_t *qbuf; /* device scratch (CMF_CUDA_I8Q_BYTES) for activations quantized once by k_i8_prequant; NULL: the
                    * kernel's blocks quantize them (mv_i8s_launch decides, i8s_prequant_cols) */
};
/* Whether the int8-activation kernel takes this product: cmf_cuda_i8act_on(), q8_row or q4tp, cols % 32 == 0,
 * n in 1..8 and the quantized activations (levels * 1.25 * n * cols bytes) within 200 KiB of shared memory. */
int mv_i8_usable(int dtype, int64_t cols, int n);
/* Launches it (weights of one dtype and cols; glu: w[0] = gate, w[1] = up, y[0] = act(gate) * up). */
cmf_status mv_i8_launch(I8Job &j, int dtype, const float *d_x, int n, int glu, int gelu, cudaStream_t s);

/* Unaligned little-endian f16 at p. */
static __device__ __forceinline__ float ld_f16u(const uint8_t *p) {
    return dev_f16((uint16_t)(__ldg(p) | (__ldg(p + 1) << 8)));
}

/* ---- correctly rounded exp2f (round to nearest even), as src/quant/exp2f.c: a double polynomial whose result
 * decides the rounding unless it lies within 64 double ulps of a float midpoint; then a double-double series
 * with an exact midpoint test. two_prod uses fma (exact), so no splitting is needed on the device. ---------- */

struct dd2 {
    double hi, lo;
};
static __device__ __forceinline__ dd2 qts(double a, double b) {
    double s = __dadd_rn(a, b);
    return {s, __dsub_rn(b, __dsub_rn(s, a))};
}
static __device__ __forceinline__ dd2 tsum(double a, double b) {
    double s = __dadd_rn(a, b), bb = __dsub_rn(s, a);
    return {s, __dadd_rn(__dsub_rn(a, __dsub_rn(s, bb)), __dsub_rn(b, bb))};
}
static __device__ __forceinline__ dd2 tprod(double a, double b) {
    double p = __dmul_rn(a, b);
    return {p, fma(a, b, -p)};
}
static __device__ __forceinline__ dd2 ddmul(dd2 a, dd2 b) {
    dd2 p = tprod(a.hi, b.hi);
    return qts(p.hi, p.lo + (a.hi * b.lo + a.lo * b.hi));
}
static __device__ __forceinline__ dd2 ddadd(dd2 a, dd2 b) {
    dd2 s = tsum(a.hi, b.hi);
    return qts(s.hi, __dadd_rn(__dadd_rn(s.lo, a.lo), b.lo));
}
static __device__ __forceinline__ dd2 dddiv(dd2 a, double d) {
    double q1 = __ddiv_rn(a.hi, d);
    dd2 p = tprod(q1, d);
    double r = __dadd_rn(__dsub_rn(__dsub_rn(a.hi, p.hi), p.lo), a.lo);
    return qts(q1, __ddiv_rn(r, d));
}

static __device__ __noinline__ float dev_round_dd(double hi, double lo) {
    float f = __double2float_rn(hi);
    if ((double)f == hi || (__float_as_uint(f) & 0x7fffffffu) >= 0x7f800000u) return f;
    float g = hi > (double)f ? __uint_as_float(__float_as_uint(f) + 1) : __uint_as_float(__float_as_uint(f) - 1);
    double mid = ((double)f + (double)g) * 0.5;
    if (hi == mid && lo != 0.0) return (lo > 0.0) == ((double)g > (double)f) ? g : f;
    return f;
}

static __device__ __noinline__ float dev_exp2f_dd(int k, double r) {
    const double LN2_HI = 0x1.62e42fefa39efp-1, LN2_LO = 0x1.abc9e3b39803fp-56;
    dd2 t = ddadd(tprod(r, LN2_HI), dd2{r * LN2_LO, 0.0});
    const int N = 27;
    dd2 c = {1.0, 0.0};
    dd2 coef[N + 1];
    coef[0] = c;
    for (int n = 1; n <= N; n++) coef[n] = dddiv(coef[n - 1], (double)n);
    dd2 p = coef[N];
    for (int n = N - 1; n >= 0; n--) p = ddadd(ddmul(p, t), coef[n]);
    double s = ldexp(1.0, k);
    return dev_round_dd(p.hi * s, p.lo * s);
}

static __device__ float dev_exp2f_cr(float x) {
    uint32_t u = __float_as_uint(x);
    if ((u & 0x7fffffffu) > 0x7f800000u) return x + x;
    if (x >= 128.0f) return __uint_as_float(0x7f800000u);
    if (x < -151.0f) return 0.0f;
    double xd = x;
    double kd = xd >= 0 ? floor(xd + 0.5) : -floor(-xd + 0.5); /* round half away, as the host */
    int k = (int)kd;
    double r = xd - kd;
    double t = r * 0x1.62e42fefa39efp-1;
    double p = 1.0 / 6227020800.0;
    p = fma(p, t, 1.0 / 479001600.0);
    p = fma(p, t, 1.0 / 39916800.0);
    p = fma(p, t, 1.0 / 3628800.0);
    p = fma(p, t, 1.0 / 362880.0);
    p = fma(p, t, 1.0 / 40320.0);
    p = fma(p, t, 1.0 / 5040.0);
    p = fma(p, t, 1.0 / 720.0);
    p = fma(p, t, 1.0 / 120.0);
    p = fma(p, t, 1.0 / 24.0);
    p = fma(p, t, 1.0 / 6.0);
    p = fma(p, t, 0.5);
    p = fma(p, t, 1.0);
    p = fma(p, t, 1.0);
    double z = ldexp(p, k);
    if (z < 0x1p-126) return dev_exp2f_dd(k, r);
    uint64_t b = (uint64_t)__double_as_longlong(z);
    int64_t m29 = (int64_t)(b & ((1u << 29) - 1u)), half = (int64_t)1 << 28;
    int64_t dist = m29 > half ? m29 - half : half - m29;
    if (dist <= 64) return dev_exp2f_dd(k, r);
    return __double2float_rn(z);
}

/* q4tp ladder of one row (§2.6): t[0] = exp2f(lo), ratio = exp2f(step), t[c] = t[c-1] * ratio in f32. */
static __device__ void dev_q4tp_ladder(const uint8_t *params, float *t) {
    float lo = ld_f16u(params), step = ld_f16u(params + 2);
    float ratio = dev_exp2f_cr(step), v = dev_exp2f_cr(lo);
    t[0] = v;
    for (int c = 1; c < 32; c++) {
        v = __fmul_rn(v, ratio);
        t[c] = v;
    }
}

/* 5-bit code of tile g of a q4tp row (§2.6). */
static __device__ __forceinline__ unsigned dev_tp_code(const uint8_t *codes, int64_t g) {
    int64_t bit = 5 * g, byte = bit >> 3;
    unsigned sh = (unsigned)(bit & 7);
    unsigned v = __ldg(codes + byte);
    if (sh > 3) v |= (unsigned)__ldg(codes + byte + 1) << 8;
    return (v >> sh) & 31u;
}

/* Exact value of element (r, c), the f32 arithmetic of cmf_dequant. `lad` is row r's q4tp ladder (q4tp only). */
template <int DT>
static __device__ __forceinline__ float dev_elem(const DevW &w, int64_t r, int64_t c, const float *lad) {
    int64_t i = r * w.cols + c;
    if constexpr (DT == CMF_DT_F32) return __ldg((const float *)w.base + i);
    if constexpr (DT == CMF_DT_F16) return dev_f16(__ldg((const uint16_t *)w.base + i));
    if constexpr (DT == CMF_DT_BF16) return dev_bf16(__ldg((const uint16_t *)w.base + i));
    if constexpr (DT == CMF_DT_Q8_ROW) return __fmul_rn((float)(int8_t)__ldg(w.base + i), ld_f16u(w.s1 + 2 * r));
    if constexpr (DT == CMF_DT_Q8_2F)
        return __fmul_rn(__fmul_rn((float)(int8_t)__ldg(w.base + i), ld_f16u(w.s1 + 2 * r)), ld_f16u(w.s2 + 2 * c));
    if constexpr (DT == CMF_DT_Q4_TILED) {
        const uint8_t *tile = w.base + (i >> 5) * 18;
        unsigned k = (unsigned)(i & 31), b = __ldg(tile + 2 + (k >> 1));
        unsigned nib = (k & 1) ? (b >> 4) : (b & 15u);
        return __fmul_rn((float)((int)nib - 8), ld_f16u(tile));
    }
    if constexpr (DT == CMF_DT_Q4TP) {
        int64_t g = c >> 5;
        unsigned k = (unsigned)(c & 31), b = __ldg(w.base + (r * (w.cols >> 5) + g) * 16 + (k >> 1));
        unsigned nib = (k & 1) ? (b >> 4) : (b & 15u);
        return __fmul_rn((float)((int)nib - 8), lad[dev_tp_code(w.s2 + r * w.stride, g)]);
    }
    return 0.0f;
}

/* Calls f.template operator()<DT>() for the runtime dtype (only the supported ones). */
#define CMF_CUDA_DISPATCH_DT(dt, F)                                                                              \
    switch (dt) {                                                                                                \
    case CMF_DT_F32: F(CMF_DT_F32); break;                                                                       \
    case CMF_DT_F16: F(CMF_DT_F16); break;                                                                       \
    case CMF_DT_BF16: F(CMF_DT_BF16); break;                                                                     \
    case CMF_DT_Q8_ROW: F(CMF_DT_Q8_ROW); break;                                                                 \
    case CMF_DT_Q8_2F: F(CMF_DT_Q8_2F); break;                                                                   \
    case CMF_DT_Q4_TILED: F(CMF_DT_Q4_TILED); break;                                                             \
    case CMF_DT_Q4TP: F(CMF_DT_Q4TP); break;                                                                     \
    default: break;                                                                                              \
    }

#endif
