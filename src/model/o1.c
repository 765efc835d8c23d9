/* o1.c — the O(1) far-field attention operator: streaming Nyström attention for one KV group.
 * Math and state: DORY.md §3.1 (cortiq nystrom.rs); see o1.h for the formulas and the lifecycle.
 *
 * Memory: cmf_o1_create makes ONE allocation holding the struct, a float arena and a small f64 scratch arena:
 *   kbuf  [cap][d], vbuf [cap][dv]   cap = w + sink + 9 rows. Skeleton mode: rows 0..sink-1 are the sinks and
 *                                    rows sink..sink+w-1 the window ring (slot s at row sink+s). Exact-only mode:
 *                                    rows 0..win_len-1 are every row so far, in order.
 *   qtr   [cap][n_heads][d]          exact-only mode: the queries of those rows (for the self-seal); absent
 *                                    (0 floats) with no_query_trace.
 *   ktil  [m][d]                     key landmarks K̃ (m_eff rows used).
 *   per head h (blocks of the full budget m, m_eff used): qtil [m][d], mix [m][m] (M, row stride m_eff),
 *                                    that [m][dv], zhat [m], fmax [m].
 *   scratch: s [cap], fh [m], u [m], l [m] (floats); k64, q64 [m][d], a, ata, g [m][m], x [m] (doubles).
 * The near field is always the contiguous kbuf rows 0..sink_len+win_len-1 (in skeleton mode sink_len < sink only
 * while replaying the first sink rows, when the window is still empty). */
#include "model/o1.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "util/error.h"

#define O1_RIDGE_REL 1e-6   /* λ = O1_RIDGE_REL · mean(diag AᵀA) (§3.1) */
#define O1_RIDGE_TRIES 12   /* λ ×10 per failed Cholesky, then a scaled identity (§3.1) */
#define O1_DEN_EPS 1e-30f   /* floor of the joint denominator (§3.1) */
#define O1_EXACT_SLACK 8    /* t <= w + sink + 8 stays exact-only (§3.1) */

/* The counters: everything mutable that is not an array. Part of the snapshot. */
typedef struct o1_vars {
    int64_t rows;    /* positions absorbed (t) */
    int64_t far_len; /* keys absorbed into the far field (each head absorbs each one once) */
    int32_t sealed;  /* 1 = skeleton mode, 0 = exact-only */
    int32_t m_eff;   /* landmarks in use (skeleton mode) */
    int32_t sink_len;
    int32_t win_len;  /* exact-only: every row held */
    int32_t win_head; /* ring slot of the oldest window row (0 until the ring is full) */
    int32_t pad_;
} o1_vars;

struct cmf_o1 {
    cmf_o1_params p; /* p.scale resolved (never 0) */
    int cap;         /* kbuf rows: w + sink + O1_EXACT_SLACK + 1 */
    o1_vars v;
    size_t n_floats, bytes;
    float *arena; /* n_floats: every float array below, in order (the snapshot copies it whole) */
    float *kbuf, *vbuf, *qtr, *ktil, *qtil, *mix, *that, *zhat, *fmax, *s, *fh, *u, *l;
    double *k64, *q64, *a, *ata, *g, *x;
};

/* ---------------------------------------------------------------------------------------------------------------
 * Creation
 * ------------------------------------------------------------------------------------------------------------- */

void cmf_o1_default_params(cmf_o1_params *p, int n_heads, int head_dim, int v_dim) {
    p->n_heads = n_heads;
    p->head_dim = head_dim;
    p->v_dim = v_dim;
    p->m = 32;
    p->window = 128;
    p->sink = 4;
    p->scale = 0.0f;
    p->rect = CMF_O1_RECT_AGG;
    p->no_query_trace = 0;
}

int cmf_o1_parse_layers(const char *spec, int n_layers, const uint8_t *is_sliding, uint8_t *on) {
    if (!spec || !on || n_layers < 1) {
        cmf_err(CMF_E_ARG, "o1: layer spec: NULL argument or no layers");
        return -1;
    }
    memset(on, 0, (size_t)n_layers);
#define O1_FULL(l) (!is_sliding || !is_sliding[l])
    if (!strcmp(spec, "off") || !strcmp(spec, "0")) return 0;
    int n = 0;
    if (!strcmp(spec, "all")) {
        for (int l = 0; l < n_layers; l++)
            if (O1_FULL(l)) on[l] = 1, n++;
        return n;
    }
    if (!strncmp(spec, "deep", 4)) {
        char *end;
        long k = strtol(spec + 4, &end, 10);
        if (end == spec + 4 || *end || k < 1 || spec[4] == '+' || spec[4] == '-' || spec[4] == ' ') {
            cmf_err(CMF_E_ARG, "o1: '%s' is not deepN with N >= 1", spec);
            return -1;
        }
        for (int l = n_layers - 1; l >= 0 && n < k; l--) /* the N deepest full-attention layers */
            if (O1_FULL(l)) on[l] = 1, n++;
        return n;
    }
    for (const char *p = spec;;) {
        char *end = (char *)p;
        long l = *p >= '0' && *p <= '9' ? strtol(p, &end, 10) : -1;
        if (l >= n_layers && (!*end || *end == ',')) {
            cmf_err(CMF_E_ARG, "o1: layer %ld in '%s' is out of range [0, %d)", l, spec, n_layers);
            return -1;
        }
        if (l < 0 || (*end && *end != ',') || (*end == ',' && !end[1])) {
            cmf_err(CMF_E_ARG, "o1: layer spec '%s' is not all, deepN, off or a list i,j,k with 0 <= i < %d", spec,
                    n_layers);
            return -1;
        }
        if (!O1_FULL(l)) {
            cmf_err(CMF_E_ARG, "o1: layer %ld is a sliding-window layer (only full-attention layers convert)", l);
            return -1;
        }
        n += !on[l];
        on[l] = 1;
        if (!*end) break;
        p = end + 1;
    }
#undef O1_FULL
    return n;
}

static cmf_status check_range(const char *name, int val, int lo, int hi) {
    if (val < lo || val > hi) return cmf_err(CMF_E_ARG, "o1: %s = %d out of range [%d, %d]", name, val, lo, hi);
    return CMF_OK;
}

cmf_status cmf_o1_create(const cmf_o1_params *p, cmf_o1 **out) {
    if (!p || !out) return cmf_err(CMF_E_ARG, "o1: create: NULL argument");
    *out = NULL;
    cmf_status st;
    if ((st = check_range("n_heads", p->n_heads, 1, 4096)) || (st = check_range("head_dim", p->head_dim, 1, 65536)) ||
        (st = check_range("v_dim", p->v_dim, 1, 65536)) || (st = check_range("m", p->m, 4, 1024)) ||
        (st = check_range("window", p->window, 1, 1 << 24)) || (st = check_range("sink", p->sink, 0, 1 << 20)))
        return st;
    if (p->rect != CMF_O1_RECT_AGG && p->rect != CMF_O1_RECT_FM)
        return cmf_err(CMF_E_ARG, "o1: rect = %d is neither AGG (0) nor FM (1)", (int)p->rect);
    if (p->no_query_trace != 0 && p->no_query_trace != 1)
        return cmf_err(CMF_E_ARG, "o1: no_query_trace = %d is neither 0 nor 1", p->no_query_trace);
    if (!(p->scale == 0.0f || (isfinite(p->scale) && p->scale > 0.0f)))
        return cmf_err(CMF_E_ARG, "o1: scale = %g must be 0 (1/sqrt(head_dim)) or finite and > 0", (double)p->scale);

    /* Sizes in double precision first: every factor is bounded above, so the products cannot overflow a double,
     * and the total is checked against 2^31 floats before any size_t arithmetic. */
    const double H = p->n_heads, d = p->head_dim, dv = p->v_dim, m = p->m;
    const double cap = (double)p->window + p->sink + O1_EXACT_SLACK + 1;
    const double trace = p->no_query_trace ? 0.0 : cap * H * d;
    const double nf = cap * d + cap * dv + trace + m * d + H * (m * d + m * m + m * dv + 2 * m) + cap + 3 * m;
    const double nd = 2 * m * d + 3 * m * m + m;
    if (nf > 2147483647.0 || nd > 2147483647.0)
        return cmf_err(CMF_E_ARG, "o1: state of %.0f floats is too large (n_heads %d, head_dim %d, v_dim %d, m %d, "
                                  "window %d, sink %d)", nf, p->n_heads, p->head_dim, p->v_dim, p->m, p->window, p->sink);
    size_t head = (sizeof(cmf_o1) + 63) / 64 * 64;
    size_t dbytes = (size_t)nd * sizeof(double);
    size_t fbytes = (size_t)nf * sizeof(float);
    size_t bytes = head + dbytes + fbytes;
    unsigned char *mem = calloc(1, bytes);
    if (!mem) return cmf_err(CMF_E_NOMEM, "o1: cannot allocate %zu bytes of state", bytes);

    cmf_o1 *o = (cmf_o1 *)mem;
    o->p = *p;
    if (o->p.scale == 0.0f) o->p.scale = 1.0f / sqrtf((float)p->head_dim);
    o->cap = (int)cap;
    o->n_floats = (size_t)nf;
    o->bytes = bytes;

    double *dp = (double *)(mem + head);
    size_t Md = (size_t)p->m * (size_t)p->head_dim, Mm = (size_t)p->m * (size_t)p->m;
    o->k64 = dp, dp += Md;
    o->q64 = dp, dp += Md;
    o->a = dp, dp += Mm;
    o->ata = dp, dp += Mm;
    o->g = dp, dp += Mm;
    o->x = dp;

    size_t C = (size_t)o->cap, Hs = (size_t)p->n_heads, ds = (size_t)p->head_dim, dvs = (size_t)p->v_dim;
    size_t ms = (size_t)p->m;
    float *fp = (float *)(mem + head + dbytes);
    o->arena = fp;
    o->kbuf = fp, fp += C * ds;
    o->vbuf = fp, fp += C * dvs;
    o->qtr = fp, fp += p->no_query_trace ? 0 : C * Hs * ds;
    o->ktil = fp, fp += ms * ds;
    o->qtil = fp, fp += Hs * ms * ds;
    o->mix = fp, fp += Hs * Mm;
    o->that = fp, fp += Hs * ms * dvs;
    o->zhat = fp, fp += Hs * ms;
    o->fmax = fp, fp += Hs * ms;
    o->s = fp, fp += C;
    o->fh = fp, fp += ms;
    o->u = fp, fp += ms;
    o->l = fp;
    cmf_o1_reset(o);
    *out = o;
    return CMF_OK;
}

void cmf_o1_free(cmf_o1 *st) { free(st); }

void cmf_o1_reset(cmf_o1 *st) {
    if (!st) return;
    memset(&st->v, 0, sizeof st->v);
}

/* ---------------------------------------------------------------------------------------------------------------
 * Small kernels (f32, sequential sums: the same order for every head, so a GQA group equals independent heads)
 * ------------------------------------------------------------------------------------------------------------- */

static float dot(const float *a, const float *b, int n) {
    float s = 0.0f;
    for (int i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

static void axpy(float *y, const float *x, float a, int n) {
    for (int i = 0; i < n; i++) y[i] += a * x[i];
}

/* Per-head blocks. */
static float *qtil_of(const cmf_o1 *st, int h) { return st->qtil + (size_t)h * st->p.m * st->p.head_dim; }
static float *mix_of(const cmf_o1 *st, int h) { return st->mix + (size_t)h * st->p.m * st->p.m; }
static float *that_of(const cmf_o1 *st, int h) { return st->that + (size_t)h * st->p.m * st->p.v_dim; }
static float *zhat_of(const cmf_o1 *st, int h) { return st->zhat + (size_t)h * st->p.m; }
static float *fmax_of(const cmf_o1 *st, int h) { return st->fmax + (size_t)h * st->p.m; }
static float *krow(const cmf_o1 *st, int r) { return st->kbuf + (size_t)r * st->p.head_dim; }
static float *vrow(const cmf_o1 *st, int r) { return st->vbuf + (size_t)r * st->p.v_dim; }

/* ---------------------------------------------------------------------------------------------------------------
 * Far field: insertion and the mixing row
 * ------------------------------------------------------------------------------------------------------------- */

/* Absorbs key k / value v into every head's far accumulators (§3.1 "Insertion"): l_i = scale·q̃_i·k; when l_i
 * exceeds the running max, T̂_i and Ẑ_i are rescaled by exp(old − new) (0 on the first insertion: max = −inf);
 * then e = exp(l_i − max_i) is added to Ẑ_i and e·v to T̂_i. One eviction = one insertion per head. */
static void far_insert(cmf_o1 *st, const float *k, const float *v) {
    const int d = st->p.head_dim, dv = st->p.v_dim, me = st->v.m_eff;
    for (int h = 0; h < st->p.n_heads; h++) {
        const float *qt = qtil_of(st, h);
        float *th = that_of(st, h), *zh = zhat_of(st, h), *fm = fmax_of(st, h);
        for (int i = 0; i < me; i++) {
            float li = dot(qt + (size_t)i * d, k, d) * st->p.scale;
            float *ti = th + (size_t)i * dv;
            if (li > fm[i]) {
                float r = expf(fm[i] - li);
                zh[i] *= r;
                for (int c = 0; c < dv; c++) ti[c] *= r;
                fm[i] = li;
            }
            float e = expf(li - fm[i]);
            zh[i] += e;
            axpy(ti, v, e, dv);
        }
    }
    st->v.far_len++;
}

/* The landmark mixing row of head h for query q (§3.1 "Readout"): f_a = scale·q·k̃_a, f = max_a f_a,
 * F̂_a = exp(f_a − f), u = F̂·M (u_b = Σ_a F̂_a·M[a][b]); clamped at 0 under the FM rectifier. Writes st->u
 * [m_eff] and returns f. */
static float mix_row(cmf_o1 *st, int h, const float *q) {
    const int d = st->p.head_dim, me = st->v.m_eff;
    const float *M = mix_of(st, h);
    float f = -INFINITY;
    for (int a = 0; a < me; a++) {
        st->fh[a] = dot(q, st->ktil + (size_t)a * d, d) * st->p.scale;
        if (st->fh[a] > f) f = st->fh[a];
    }
    for (int a = 0; a < me; a++) st->fh[a] = expf(st->fh[a] - f);
    for (int b = 0; b < me; b++) {
        float s = 0.0f;
        for (int a = 0; a < me; a++) s += st->fh[a] * M[(size_t)a * me + b];
        st->u[b] = (st->p.rect == CMF_O1_RECT_FM && !(s > 0.0f)) ? 0.0f : s;
    }
    return f;
}

/* ---------------------------------------------------------------------------------------------------------------
 * Readout (§3.1): near logits s_j over kbuf rows 0..n-1 with shift c; far gains g_b = u_b·exp(f + max_b − c_all)
 * with c_all = max(c, max_b(f + max_b)); AGG drops the far field when Σ g_b·Ẑ_b < 0 (FM keeps the same guard,
 * which then fires only on rounding); out = (Σ g_b·T̂_b + Σ exp(s_j − c_all)·v_j) / max(den, 1e-30).
 * ------------------------------------------------------------------------------------------------------------- */
static void readout(cmf_o1 *st, int h, const float *q, float *out) {
    const int d = st->p.head_dim, dv = st->p.v_dim;
    const int n = st->v.sink_len + st->v.win_len;
    float c = -INFINITY;
    for (int j = 0; j < n; j++) {
        st->s[j] = dot(q, krow(st, j), d) * st->p.scale;
        if (st->s[j] > c) c = st->s[j];
    }
    float c_all = c, far_den = 0.0f;
    int have_far = 0;
    if (st->v.sealed && st->v.far_len > 0) {
        const int me = st->v.m_eff;
        const float *fm = fmax_of(st, h), *zh = zhat_of(st, h);
        float f = mix_row(st, h, q);
        for (int b = 0; b < me; b++)
            if (f + fm[b] > c_all) c_all = f + fm[b];
        for (int b = 0; b < me; b++) {
            st->u[b] *= expf(f + fm[b] - c_all); /* u_b becomes the gain g_b */
            far_den += st->u[b] * zh[b];
        }
        if (far_den >= 0.0f)
            have_far = 1;
        else
            far_den = 0.0f; /* the aggregate rectifier (also catches NaN) */
    }
    memset(out, 0, (size_t)dv * sizeof *out);
    if (have_far) {
        const float *th = that_of(st, h);
        for (int b = 0; b < st->v.m_eff; b++) axpy(out, th + (size_t)b * dv, st->u[b], dv);
    }
    float den = far_den;
    for (int j = 0; j < n; j++) {
        float pj = expf(st->s[j] - c_all);
        den += pj;
        axpy(out, vrow(st, j), pj, dv);
    }
    if (!(den > O1_DEN_EPS)) den = O1_DEN_EPS;
    for (int i = 0; i < dv; i++) out[i] /= den;
}

static void readout_all(cmf_o1 *st, const float *q, float *out) {
    for (int h = 0; h < st->p.n_heads; h++)
        readout(st, h, q + (size_t)h * st->p.head_dim, out + (size_t)h * st->p.v_dim);
}

/* ---------------------------------------------------------------------------------------------------------------
 * Pushing rows
 * ------------------------------------------------------------------------------------------------------------- */

/* Exact-only mode: appends row (k, v, q of every head) at index win_len (the caller checked capacity). memmove:
 * the sources may be the state's own rows. */
static void push_exact(cmf_o1 *st, const float *q, const float *k, const float *v) {
    const size_t d = (size_t)st->p.head_dim, dv = (size_t)st->p.v_dim, H = (size_t)st->p.n_heads;
    const size_t r = (size_t)st->v.win_len;
    memmove(st->kbuf + r * d, k, d * sizeof(float));
    memmove(st->vbuf + r * dv, v, dv * sizeof(float));
    if (!st->p.no_query_trace) memmove(st->qtr + r * H * d, q, H * d * sizeof(float));
    st->v.win_len++;
    st->v.rows++;
}

/* Skeleton mode: the next position. The first `sink` positions become sinks; later ones enter the ring, a full
 * ring first evicting its oldest row into the far field (delayed insertion, §3.1). memmove: during the self-seal
 * the source row lies at or after the destination row in the same buffer. */
static void push_skeleton(cmf_o1 *st, const float *k, const float *v) {
    const size_t d = (size_t)st->p.head_dim, dv = (size_t)st->p.v_dim;
    const int sink = st->p.sink, w = st->p.window;
    int row;
    if (st->v.sink_len < sink) {
        row = st->v.sink_len++;
    } else if (st->v.win_len == w) {
        row = sink + st->v.win_head;
        far_insert(st, krow(st, row), vrow(st, row));
        st->v.win_head = (st->v.win_head + 1) % w;
    } else {
        row = sink + st->v.win_len++;
    }
    memmove(st->kbuf + (size_t)row * d, k, d * sizeof(float));
    memmove(st->vbuf + (size_t)row * dv, v, dv * sizeof(float));
    st->v.rows++;
}

/* ---------------------------------------------------------------------------------------------------------------
 * Seal: landmarks, M, replay (§3.1 "Building it")
 * ------------------------------------------------------------------------------------------------------------- */

/* Contiguous segment means in f64: out[i] = mean of rows [i·t/me, (i+1)·t/me) (integer division) of the rows
 * x + r·stride, r < t. Requires t >= me (no empty segment). */
static void seg_means(double *out, const float *x, size_t stride, int t, int d, int me) {
    for (int i = 0; i < me; i++) {
        int64_t lo = (int64_t)i * t / me, hi = (int64_t)(i + 1) * t / me;
        double *o = out + (size_t)i * d;
        for (int c = 0; c < d; c++) o[c] = 0.0;
        for (int64_t r = lo; r < hi; r++) {
            const float *xr = x + (size_t)r * stride;
            for (int c = 0; c < d; c++) o[c] += (double)xr[c];
        }
        double inv = 1.0 / (double)(hi - lo);
        for (int c = 0; c < d; c++) o[c] *= inv;
    }
}

/* In-place lower Cholesky of the n×n SPD matrix g; returns 0 when a pivot is not positive and finite. */
static int cholesky(double *g, int n) {
    for (int i = 0; i < n; i++) {
        for (int j = 0; j <= i; j++) {
            double s = g[(size_t)i * n + j];
            for (int k = 0; k < j; k++) s -= g[(size_t)i * n + k] * g[(size_t)j * n + k];
            if (i == j) {
                if (!(s > 0.0) || !isfinite(s)) return 0;
                g[(size_t)i * n + i] = sqrt(s);
            } else {
                g[(size_t)i * n + j] = s / g[(size_t)j * n + j];
            }
        }
    }
    return 1;
}

/* M = (AᵀA + λI)⁻¹Aᵀ for the n×n matrix st->a, λ = 1e-6·mean(diag AᵀA), by f64 Cholesky; on failure λ ×10, up
 * to 12 tries, then M = I / mean(diag AᵀA). Writes M (row stride n) as f32 to `mout`: M[i][j] is the weight of
 * key landmark i's score in query landmark j's mixing coefficient. */
static void ridge_pinv(cmf_o1 *st, int n, float *mout) {
    const double *a = st->a;
    double *ata = st->ata, *g = st->g, *x = st->x;
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++) {
            double s = 0.0;
            for (int k = 0; k < n; k++) s += a[(size_t)k * n + i] * a[(size_t)k * n + j];
            ata[(size_t)i * n + j] = s;
        }
    double mean_diag = 0.0;
    for (int i = 0; i < n; i++) mean_diag += ata[(size_t)i * n + i];
    mean_diag /= n;
    if (!(mean_diag > DBL_MIN)) mean_diag = DBL_MIN; /* also maps NaN to DBL_MIN */
    double lambda = O1_RIDGE_REL * mean_diag;
    for (int tries = 0; tries < O1_RIDGE_TRIES; tries++, lambda *= 10.0) {
        memcpy(g, ata, (size_t)n * n * sizeof *g);
        for (int i = 0; i < n; i++) g[(size_t)i * n + i] += lambda;
        if (!cholesky(g, n)) continue;
        /* Solve G·X = Aᵀ column by column; column j of Aᵀ is row j of A. */
        for (int j = 0; j < n; j++) {
            const double *rhs = a + (size_t)j * n;
            for (int i = 0; i < n; i++) { /* L·y = rhs */
                double s = rhs[i];
                for (int k = 0; k < i; k++) s -= g[(size_t)i * n + k] * x[k];
                x[i] = s / g[(size_t)i * n + i];
            }
            for (int i = n - 1; i >= 0; i--) { /* Lᵀ·x = y */
                double s = x[i];
                for (int k = i + 1; k < n; k++) s -= g[(size_t)k * n + i] * x[k];
                x[i] = s / g[(size_t)i * n + i];
            }
            for (int i = 0; i < n; i++) mout[(size_t)i * n + j] = (float)x[i];
        }
        return;
    }
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++) mout[(size_t)i * n + j] = i == j ? (float)(1.0 / mean_diag) : 0.0f;
}

/* The seal proper (arguments already checked). The sources may be the state's own exact-only rows (self-seal,
 * out == NULL): landmarks are computed before any row moves, and replay only writes rows at or before the one
 * it reads. */
static void seal_rows(cmf_o1 *st, const float *q, size_t qs, const float *k, size_t ks, const float *v, size_t vs,
                      int t, float *out, size_t os) {
    const int d = st->p.head_dim, H = st->p.n_heads, w = st->p.window, sink = st->p.sink;
    memset(&st->v, 0, sizeof st->v);
    if (t <= w + sink + O1_EXACT_SLACK) { /* short prompt: exact-only, no skeleton */
        for (int j = 0; j < t; j++) {
            push_exact(st, q + (size_t)j * qs, k + (size_t)j * ks, v + (size_t)j * vs);
            if (out) readout_all(st, q + (size_t)j * qs, out + (size_t)j * os);
        }
        return;
    }
    int me = t / 8;
    if (me < 4) me = 4;
    if (me > st->p.m) me = st->p.m;
    st->v.m_eff = me;
    st->v.sealed = 1;
    seg_means(st->k64, k, ks, t, d, me);
    for (size_t i = 0; i < (size_t)me * d; i++) st->ktil[i] = (float)st->k64[i];
    const double scale = st->p.scale;
    for (int h = 0; h < H; h++) {
        seg_means(st->q64, q + (size_t)h * d, qs, t, d, me);
        float *qt = qtil_of(st, h);
        for (size_t i = 0; i < (size_t)me * d; i++) qt[i] = (float)st->q64[i];
        for (int i = 0; i < me; i++) /* A = exp(scale·Q̃K̃ᵀ), rows = query landmarks */
            for (int j = 0; j < me; j++) {
                double sdot = 0.0;
                for (int c = 0; c < d; c++) sdot += st->q64[(size_t)i * d + c] * st->k64[(size_t)j * d + c];
                st->a[(size_t)i * me + j] = exp(sdot * scale);
            }
        ridge_pinv(st, me, mix_of(st, h));
        memset(that_of(st, h), 0, (size_t)me * st->p.v_dim * sizeof(float));
        memset(zhat_of(st, h), 0, (size_t)me * sizeof(float));
        float *fm = fmax_of(st, h);
        for (int i = 0; i < me; i++) fm[i] = -INFINITY;
    }
    for (int j = 0; j < t; j++) {
        push_skeleton(st, k + (size_t)j * ks, v + (size_t)j * vs);
        if (out) readout_all(st, q + (size_t)j * qs, out + (size_t)j * os);
    }
}

cmf_status cmf_o1_seal(cmf_o1 *st, const float *q, size_t q_stride, const float *k, size_t k_stride,
                       const float *v, size_t v_stride, int t, float *out, size_t out_stride) {
    if (!st) return cmf_err(CMF_E_ARG, "o1: seal: NULL state");
    cmf_o1_reset(st);
    const size_t d = (size_t)st->p.head_dim, dv = (size_t)st->p.v_dim, H = (size_t)st->p.n_heads;
    if (t < 0) return cmf_err(CMF_E_ARG, "o1: seal: t = %d rows is negative", t);
    if (t == 0) return CMF_OK;
    if (!q || !k || !v) return cmf_err(CMF_E_ARG, "o1: seal: NULL %s rows for t = %d", !q ? "q" : !k ? "k" : "v", t);
    if (q_stride < H * d) return cmf_err(CMF_E_ARG, "o1: seal: q_stride %zu < n_heads·head_dim %zu", q_stride, H * d);
    if (k_stride < d) return cmf_err(CMF_E_ARG, "o1: seal: k_stride %zu < head_dim %zu", k_stride, d);
    if (v_stride < dv) return cmf_err(CMF_E_ARG, "o1: seal: v_stride %zu < v_dim %zu", v_stride, dv);
    if (out && out_stride < H * dv)
        return cmf_err(CMF_E_ARG, "o1: seal: out_stride %zu < n_heads·v_dim %zu", out_stride, H * dv);
    seal_rows(st, q, q_stride, k, k_stride, v, v_stride, t, out, out_stride);
    return CMF_OK;
}

/* ---------------------------------------------------------------------------------------------------------------
 * Steps
 * ------------------------------------------------------------------------------------------------------------- */

static cmf_status step_row(cmf_o1 *st, const float *q, const float *k, const float *v, float *out) {
    if (st->v.sealed) {
        push_skeleton(st, k, v);
    } else if (st->v.win_len < st->p.window + st->p.sink + O1_EXACT_SLACK) {
        push_exact(st, q, k, v);
    } else if (st->p.no_query_trace) {
        return cmf_err(CMF_E_ARG, "o1: step: the exact-only state holds its maximum of %d rows and keeps no "
                                  "queries to seal itself (no_query_trace); seal with the whole prompt instead",
                       st->v.win_len);
    } else { /* the row that ends exact-only mode: seal over every row held, this one included */
        push_exact(st, q, k, v);
        const size_t d = (size_t)st->p.head_dim;
        seal_rows(st, st->qtr, (size_t)st->p.n_heads * d, st->kbuf, d, st->vbuf, (size_t)st->p.v_dim,
                  st->v.win_len, NULL, 0);
    }
    readout_all(st, q, out);
    return CMF_OK;
}

cmf_status cmf_o1_step(cmf_o1 *st, const float *q, const float *k, const float *v, float *out) {
    if (!st || !q || !k || !v || !out) return cmf_err(CMF_E_ARG, "o1: step: NULL argument");
    return step_row(st, q, k, v, out);
}

cmf_status cmf_o1_step_chunk(cmf_o1 *st, int n, const float *q, size_t q_stride, const float *k, size_t k_stride,
                             const float *v, size_t v_stride, float *out, size_t out_stride) {
    if (!st) return cmf_err(CMF_E_ARG, "o1: step_chunk: NULL state");
    if (n < 0) return cmf_err(CMF_E_ARG, "o1: step_chunk: n = %d rows is negative", n);
    if (n == 0) return CMF_OK;
    if (!q || !k || !v || !out) return cmf_err(CMF_E_ARG, "o1: step_chunk: NULL rows for n = %d", n);
    const size_t d = (size_t)st->p.head_dim, dv = (size_t)st->p.v_dim, H = (size_t)st->p.n_heads;
    if (n > 1 && (q_stride < H * d || k_stride < d || v_stride < dv || out_stride < H * dv))
        return cmf_err(CMF_E_ARG, "o1: step_chunk: a stride is narrower than its row (q %zu < %zu, k %zu < %zu, "
                                  "v %zu < %zu or out %zu < %zu)", q_stride, H * d, k_stride, d, v_stride, dv,
                       out_stride, H * dv);
    for (int i = 0; i < n; i++) {
        cmf_status s = step_row(st, q + (size_t)i * q_stride, k + (size_t)i * k_stride, v + (size_t)i * v_stride,
                                out + (size_t)i * out_stride);
        if (s) return cmf_err_prefix(s, "o1: step_chunk: row %d of %d: ", i, n);
    }
    return CMF_OK;
}

/* ---------------------------------------------------------------------------------------------------------------
 * Introspection and the far-weight diagnostic
 * ------------------------------------------------------------------------------------------------------------- */

int64_t cmf_o1_rows(const cmf_o1 *st) { return st ? st->v.rows : 0; }
int64_t cmf_o1_far_len(const cmf_o1 *st) { return st ? st->v.far_len : 0; }
int cmf_o1_window_len(const cmf_o1 *st) { return st ? st->v.win_len : 0; }
int cmf_o1_sink_len(const cmf_o1 *st) { return st ? st->v.sink_len : 0; }
int cmf_o1_m_eff(const cmf_o1 *st) { return st ? st->v.m_eff : 0; }
int cmf_o1_sealed(const cmf_o1 *st) { return st ? st->v.sealed : 0; }
size_t cmf_o1_state_bytes(const cmf_o1 *st) { return st ? st->bytes : 0; }

cmf_status cmf_o1_far_weights(cmf_o1 *st, int head, const float *q, const float *keys, int n, size_t k_stride,
                              float *w) {
    if (!st || !q || (n > 0 && (!keys || !w))) return cmf_err(CMF_E_ARG, "o1: far_weights: NULL argument");
    if (head < 0 || head >= st->p.n_heads)
        return cmf_err(CMF_E_ARG, "o1: far_weights: head %d out of range [0, %d)", head, st->p.n_heads);
    if (n < 0) return cmf_err(CMF_E_ARG, "o1: far_weights: n = %d keys is negative", n);
    if (n > 1 && k_stride < (size_t)st->p.head_dim)
        return cmf_err(CMF_E_ARG, "o1: far_weights: k_stride %zu < head_dim %d", k_stride, st->p.head_dim);
    if (!st->v.sealed) return cmf_err(CMF_E_ARG, "o1: far_weights: the state is exact-only (no skeleton)");
    const int d = st->p.head_dim, me = st->v.m_eff;
    const float *qt = qtil_of(st, head);
    (void)mix_row(st, head, q);
    for (int j = 0; j < n; j++) {
        const float *kj = keys + (size_t)j * k_stride;
        float mx = -INFINITY;
        for (int b = 0; b < me; b++) {
            st->l[b] = dot(qt + (size_t)b * d, kj, d) * st->p.scale;
            if (st->l[b] > mx) mx = st->l[b];
        }
        float s = 0.0f;
        for (int b = 0; b < me; b++) s += st->u[b] * expf(st->l[b] - mx);
        w[j] = s;
    }
    return CMF_OK;
}

/* ---------------------------------------------------------------------------------------------------------------
 * Snapshot / restore: a header (magic, parameters, counters) followed by the whole float arena.
 * ------------------------------------------------------------------------------------------------------------- */

typedef struct o1_snap_head {
    char magic[8];
    int32_t n_heads, head_dim, v_dim, m, window, sink, rect, no_query_trace;
    float scale;
    uint64_t n_floats;
    o1_vars v;
} o1_snap_head;

static const char O1_SNAP_MAGIC[8] = {'C', 'M', 'F', 'O', '1', 'S', 'N', '1'};

size_t cmf_o1_snapshot_size(const cmf_o1 *st) {
    return st ? sizeof(o1_snap_head) + st->n_floats * sizeof(float) : 0;
}

static void snap_head_of(const cmf_o1 *st, o1_snap_head *h) {
    memset(h, 0, sizeof *h);
    memcpy(h->magic, O1_SNAP_MAGIC, sizeof h->magic);
    h->n_heads = st->p.n_heads, h->head_dim = st->p.head_dim, h->v_dim = st->p.v_dim, h->m = st->p.m;
    h->window = st->p.window, h->sink = st->p.sink, h->rect = (int32_t)st->p.rect, h->scale = st->p.scale;
    h->no_query_trace = st->p.no_query_trace;
    h->n_floats = st->n_floats;
    h->v = st->v;
}

cmf_status cmf_o1_snapshot(const cmf_o1 *st, void *buf, size_t len) {
    if (!st || !buf) return cmf_err(CMF_E_ARG, "o1: snapshot: NULL argument");
    if (len < cmf_o1_snapshot_size(st))
        return cmf_err(CMF_E_ARG, "o1: snapshot: buffer of %zu bytes < %zu needed", len, cmf_o1_snapshot_size(st));
    o1_snap_head h;
    snap_head_of(st, &h);
    memcpy(buf, &h, sizeof h);
    memcpy((unsigned char *)buf + sizeof h, st->arena, st->n_floats * sizeof(float));
    return CMF_OK;
}

/* Are the counters of a snapshot a state this geometry can be in? */
static int vars_consistent(const cmf_o1 *st, const o1_vars *v) {
    const int w = st->p.window, sink = st->p.sink;
    if (v->rows < 0 || v->far_len < 0) return 0;
    if (v->sealed == 0)
        return v->m_eff == 0 && v->sink_len == 0 && v->win_head == 0 && v->far_len == 0 && v->win_len >= 0 &&
               v->win_len <= w + sink + O1_EXACT_SLACK && v->rows == v->win_len;
    if (v->sealed != 1) return 0;
    if (v->m_eff < 4 || v->m_eff > st->p.m || v->sink_len < 0 || v->sink_len > sink) return 0;
    if (v->win_len < 0 || v->win_len > w || v->win_head < 0 || v->win_head >= w) return 0;
    if (v->win_head != 0 && v->win_len != w) return 0;
    if (v->sink_len < sink && (v->win_len != 0 || v->far_len != 0)) return 0;
    return v->far_len + v->win_len + v->sink_len == v->rows;
}

cmf_status cmf_o1_restore(cmf_o1 *st, const void *buf, size_t len) {
    if (!st || !buf) return cmf_err(CMF_E_ARG, "o1: restore: NULL argument");
    if (len != cmf_o1_snapshot_size(st))
        return cmf_err(CMF_E_ARG, "o1: restore: %zu bytes, but a snapshot of this state has %zu", len,
                       cmf_o1_snapshot_size(st));
    o1_snap_head h, mine;
    memcpy(&h, buf, sizeof h);
    snap_head_of(st, &mine);
    if (memcmp(h.magic, O1_SNAP_MAGIC, sizeof h.magic) != 0)
        return cmf_err(CMF_E_FORMAT, "o1: restore: bad magic at offset 0 (not an o1 snapshot)");
    if (h.n_heads != mine.n_heads || h.head_dim != mine.head_dim || h.v_dim != mine.v_dim || h.m != mine.m ||
        h.window != mine.window || h.sink != mine.sink || h.rect != mine.rect || h.n_floats != mine.n_floats ||
        h.no_query_trace != mine.no_query_trace ||
        memcmp(&h.scale, &mine.scale, sizeof h.scale) != 0)
        return cmf_err(CMF_E_FORMAT, "o1: restore: snapshot of a state with other parameters (n_heads %d, head_dim "
                                     "%d, v_dim %d, m %d, window %d, sink %d, rect %d, scale %g)", h.n_heads,
                       h.head_dim, h.v_dim, h.m, h.window, h.sink, h.rect, (double)h.scale);
    if (!vars_consistent(st, &h.v))
        return cmf_err(CMF_E_FORMAT, "o1: restore: inconsistent counters (rows %lld, far_len %lld, sealed %d, "
                                     "m_eff %d, sink_len %d, win_len %d, win_head %d)", (long long)h.v.rows,
                       (long long)h.v.far_len, h.v.sealed, h.v.m_eff, h.v.sink_len, h.v.win_len, h.v.win_head);
    st->v = h.v;
    memcpy(st->arena, (const unsigned char *)buf + sizeof h, st->n_floats * sizeof(float));
    return CMF_OK;
}
