/* backend_cpu.c — the cpu backend of backend.h: host buffers, weights read in place from the mapping, the kernels
 * of ops.h on the batch's thread pool, the f32 KV cache, task masks (dead heads) and the O(1) far field
 * (DORY.md §3.1) in the attention op. The arithmetic is exactly the forward's of before the backend split, op for
 * op and in the same order, so results are bit-identical. */
#include <math.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "model/model.h"
#include "skills/skills.h"
#include "util/error.h"

/* ---- deferred products ----------------------------------------------------------------------------------------
 * forward.c issues one op per call. The products of the normed hidden state b->xb (q, k, v; gate, up, or a task
 * mask's row runs of them) come back to back, so they are kept pending here and run together when any other op
 * arrives: one quantization of xb and one pool fan-out for q/k/v, and for gate/up with the GLU that follows them
 * (cmf_matmul_group, matmul.c: the same bits as one by one). Products of other inputs (o_proj, down_proj, whose
 * outputs tensor parallelism's allreduce reads next) run at once. The queue is per calling thread (one forward runs
 * on one thread at a time) and every other op, begin and end included, first runs what is pending. Per Llama layer
 * in decode that is 5 fan-outs instead of 8 (q/k/v, attention, o, gate/up+GLU, down). CMF_CPU_FUSE=0 (or
 * cmf_cpu_set_fuse(0)) turns it off. */
enum { DEFER_MAX = 16 };
typedef struct {
    cmf_batch *b;
    const float *x;
    int n, count;
    cmf_weight w[DEFER_MAX]; /* copies: a mask's row views are temporaries of the caller */
    cmf_mm mm[DEFER_MAX];
} defer_queue;
static _Thread_local defer_queue g_defer;

static void flush_mm(void) {
    defer_queue *q = &g_defer;
    if (!q->count) return;
    for (int i = 0; i < q->count; i++) q->mm[i].w = &q->w[i];
    cmf_matmul_group(q->b->pool, q->x, q->n, q->mm, q->count, 0);
    q->count = 0;
}

/* ---- deferred RoPE and KV write ------------------------------------------------------------------------------
 * forward.c calls qk_rope, kv_write and attention back to back. Both first ops are per token and short (16 tokens of
 * a serve step: ~70 us per layer on one thread while the pool's other threads wait, and long enough for them to fall
 * asleep, so the attention fan-out then waits on a wake-up). They are kept pending here and, when the batch is a
 * decode step (every token from another session, none with the O(1) far field), run inside the attention's fan-out,
 * each token's RoPE and KV row by the thread that then attends for it (the token reads only its own session's
 * rows: earlier positions and the one its own job just wrote). Any other case, and any other op, runs them first,
 * serially, as before. Same functions per token either way, so the same bits. Per calling thread, as g_defer. */
typedef struct {
    cmf_batch *b;
    const cmf_layer *L;
    cmf_session *const *seqs; /* set by kv_write */
    int layer, n;
    int rope, kv; /* pending */
} rope_queue;
static _Thread_local rope_queue g_rope;

static void rope_heads(cmf_batch *b, const cmf_layer *L, int layer, int t, int g0, int g1);
static void kv_write_heads(cmf_batch *b, cmf_session *const *seqs, int l, int t, int g0, int g1);

/* Runs the pending RoPE (and KV write) of every token, on the calling thread. */
static void flush_rope(void) {
    rope_queue *r = &g_rope;
    const int nkv = r->rope || r->kv ? r->b->m->cfg.n_kv_heads : 0; /* r->b: stale when nothing is pending */
    for (int t = 0; r->rope && t < r->n; t++) rope_heads(r->b, r->L, r->layer, t, 0, nkv);
    for (int t = 0; r->kv && t < r->n; t++) kv_write_heads(r->b, r->seqs, r->layer, t, 0, nkv);
    r->rope = r->kv = 0;
}

/* What every op but kv_write / attention runs first: the pending products, then the pending RoPE / KV write. */
static void flush_all(void) {
    flush_mm();
    flush_rope();
}

/* ---- buffers, residency, KV cache -------------------------------------------------------------------------- */

static cmf_status cpu_alloc(cmf_backend *be, size_t bytes, void **out) {
    (void)be;
    *out = calloc(1, bytes ? bytes : 1);
    return *out ? CMF_OK : cmf_err(CMF_E_NOMEM, "cpu: cannot allocate %zu bytes", bytes);
}
static void cpu_free(cmf_backend *be, void *p) {
    (void)be;
    free(p);
}
static cmf_status cpu_copy(cmf_backend *be, void *dst, const void *src, size_t bytes) {
    (void)be;
    flush_all();
    if (bytes) memcpy(dst, src, bytes);
    return CMF_OK;
}
static cmf_status cpu_zero(cmf_backend *be, void *buf, size_t bytes) {
    (void)be;
    flush_all();
    if (bytes) memset(buf, 0, bytes);
    return CMF_OK;
}
static cmf_status cpu_sync(cmf_backend *be) {
    (void)be;
    flush_all();
    return CMF_OK;
}
/* Matrix i < 1 + 7 * n_layers of a weight set, the ones cmf_matmul multiplies: lm_head (when tied, the embedding's
 * view: the embedding itself is read row by row from the mapping), then per layer q, k, v, o, gate, up, down. */
static cmf_weight *set_matrix(cmf_weights *w, int i) {
    if (i == 0) return &w->lm_head;
    cmf_layer *L = &w->layers[(i - 1) / 7];
    cmf_weight *m[] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->w_gate, &L->w_up, &L->w_down};
    return m[(i - 1) % 7];
}

/* Weights stay in the mapping; the q4 family is repacked once for the kernels (ops.h cmf_cpu_repack_weight), the
 * copy attached to the set's views (the set is not const here: attaching the cpu's resident copy to its views is
 * what this op is for; cmf_cpu_weights_release undoes it). */
/* Set once a backbone (skill "") went through cpu_load_weights. A skill set is repacked only then: a model whose
 * backbone is read from the mapping (a caller that does not load it through this op) must compute its skill sets
 * the same way, or a skill baked into a file would give other bits than the same skill applied at run time. */
static atomic_int g_backbone_repacked;

static cmf_status cpu_load_weights(cmf_backend *be, const cmf_weights *w, int n_layers) {
    (void)be;
    cmf_weights *ws = (cmf_weights *)(uintptr_t)w;
    if (ws->skill[0] == '\0') atomic_store(&g_backbone_repacked, 1);
    else if (!atomic_load(&g_backbone_repacked)) return CMF_OK;
    const int n = ws->layers ? 1 + 7 * n_layers : 1;
    cmf_weight **m = malloc((size_t)n * sizeof *m);
    if (!m) return cmf_err(CMF_E_NOMEM, "cpu load_weights: out of memory");
    for (int i = 0; i < n; i++) m[i] = set_matrix(ws, (i + 1) % n); /* forward order: layers, then lm_head */
    const cmf_status st = cmf_cpu_repack_set(m, n);
    if (st == CMF_OK)
        for (int i = 0; i < n; i++) /* the tied embedding table stays: the lookup reads its rows every token */
            if (m[i]->data != ws->embed.data) cmf_cpu_repack_page_out(m[i]);
    free(m);
    return st;
}

void cmf_cpu_weights_release(struct cmf_weights *w, int n_layers) {
    const int n = w->layers ? 1 + 7 * n_layers : 1;
    for (int i = 0; i < n; i++) cmf_cpu_repack_release(set_matrix(w, i));
}

static void cpu_unload_weights(cmf_backend *be, cmf_weights *w, int n_layers) {
    (void)be;
    cmf_cpu_weights_release(w, n_layers);
}

static cmf_status cpu_kv_alloc(cmf_backend *be, cmf_session *s, size_t total) {
    (void)be;
    s->k_cache = calloc(total ? total : 1, sizeof(float));
    s->v_cache = calloc(total ? total : 1, sizeof(float));
    if (!s->k_cache || !s->v_cache)
        return cmf_err(CMF_E_NOMEM, "session: cannot allocate the KV cache for %d positions (%.1f MiB)", s->n_ctx,
                       2.0 * (double)total * sizeof(float) / (1 << 20));
    return CMF_OK;
}
static void cpu_kv_free(cmf_backend *be, cmf_session *s) {
    (void)be;
    free(s->k_cache);
    free(s->v_cache);
    s->k_cache = s->v_cache = NULL;
}

/* ---- ops ------------------------------------------------------------------------------------------------------ */

static cmf_status cpu_begin(cmf_backend *be, cmf_batch *b, int n) {
    (void)be, (void)b, (void)n;
    flush_all();
    return CMF_OK;
}
static void cpu_end(cmf_backend *be, cmf_batch *b) {
    (void)be, (void)b;
    flush_all();
}

static cmf_status cpu_embed(cmf_backend *be, cmf_batch *b, float *x, const cmf_weight *embed, const int32_t *tokens,
                            int n, float mult) {
    (void)be;
    flush_all();
    const int D = b->m->cfg.hidden_size;
    for (int t = 0; t < n; t++) {
        cmf_weight_row_f32(embed, tokens[t], x + (size_t)t * D);
        if (mult != 1.0f)
            for (int i = 0; i < D; i++) x[(size_t)t * D + i] *= mult;
    }
    return CMF_OK;
}

static cmf_status cpu_rmsnorm(cmf_backend *be, cmf_batch *b, float *out, const float *x, const float *w, int rows,
                              int d, float eps, int gemma) {
    (void)be, (void)b;
    flush_all();
    cmf_rmsnorm_rows(out, x, w, rows, d, eps, gemma);
    return CMF_OK;
}

static cmf_status cpu_matmul(cmf_backend *be, cmf_batch *b, float *out, int64_t ld_out, const float *x, int n,
                             const cmf_weight *w, const float *bias) {
    (void)be;
    defer_queue *q = &g_defer;
    if (x == b->xb && out != x && cmf_cpu_fuse_enabled()) { /* kept pending (see deferred products above) */
        flush_rope(); /* a pending RoPE belongs to the products run before these */
        if (q->count && (q->b != b || q->x != x || q->n != n || q->count == DEFER_MAX)) flush_mm();
        q->b = b, q->x = x, q->n = n;
        q->w[q->count] = *w;
        q->mm[q->count] = (cmf_mm){.out = out, .ld_out = ld_out, .w = NULL, .bias = bias};
        q->count++;
        return CMF_OK;
    }
    flush_all();
    cmf_matmul(b->pool, out, ld_out, x, n, w, bias);
    return CMF_OK;
}

/* RoPE on one head vector, pairs i0 <= i < i1: (i, i+rot/2) (HF rotate_half) or (2i, 2i+1) (llama2.c), rotated by
 * the angle pos*inv_freq[i] whose cosine and sine are cs[i - i0], sn[i - i0]. */
static void rope(float *v, const cmf_config *c, int i0, int i1, const float *cs, const float *sn) {
    const int half = c->rot_dim / 2;
    for (int i = i0; i < i1; i++) {
        const int a = c->rope_pairing == CMF_ROPE_HALF ? i : 2 * i;
        const int bb = c->rope_pairing == CMF_ROPE_HALF ? i + half : 2 * i + 1;
        const float x0 = v[a], x1 = v[bb];
        v[a] = x0 * cs[i - i0] - x1 * sn[i - i0];
        v[bb] = x1 * cs[i - i0] + x0 * sn[i - i0];
    }
}

enum { ROPE_PAIRS = 256 /* angles computed at a time */ };

/* Token t's optional q/k head norms and RoPE, in place in b->q / b->k, for the KV heads g0 <= g < g1 and their
 * query heads (g * group .. (g + 1) * group - 1, group = n_heads / n_kv_heads). Each head vector's operations do not
 * depend on the range (the angles are the token's, computed the same way by every call), so a token's heads split
 * over several calls get the bits of one call over all of them. */
static void rope_heads(cmf_batch *b, const cmf_layer *L, int layer, int t, int g0, int g1) {
    const cmf_model *m = b->m;
    const cmf_config *c = &m->cfg;
    const int HD = c->head_dim, NH = c->n_heads, NKV = c->n_kv_heads, QD = NH * HD, KVD = NKV * HD;
    const int half = c->rot_dim / 2, group = NH / NKV, h0 = g0 * group, h1 = g1 * group;
    const float *inv_freq = m->rope_inv_freq + (c->is_sliding[layer] ? half : 0);
    float cs[ROPE_PAIRS], sn[ROPE_PAIRS];
    const int pos = b->pos[t];
    float *qt = b->q + (size_t)t * QD, *kt = b->k + (size_t)t * KVD;
    for (int h = h0; h < h1 && L->q_norm; h++)
        cmf_rmsnorm(qt + (size_t)h * HD, qt + (size_t)h * HD, L->q_norm, HD, c->rms_norm_eps, c->gemma_norm);
    for (int h = g0; h < g1 && L->k_norm; h++)
        cmf_rmsnorm(kt + (size_t)h * HD, kt + (size_t)h * HD, L->k_norm, HD, c->rms_norm_eps, c->gemma_norm);
    for (int i0 = 0; i0 < half; i0 += ROPE_PAIRS) { /* the angles once per token: every q and k head shares them */
        const int i1 = half - i0 < ROPE_PAIRS ? half : i0 + ROPE_PAIRS;
        for (int i = i0; i < i1; i++) {
            const float ang = (float)pos * inv_freq[i];
            cs[i - i0] = cosf(ang);
            sn[i - i0] = sinf(ang);
        }
        for (int h = h0; h < h1; h++) rope(qt + (size_t)h * HD, c, i0, i1, cs, sn);
        for (int h = g0; h < g1; h++) rope(kt + (size_t)h * HD, c, i0, i1, cs, sn);
    }
}

static cmf_status cpu_qk_rope(cmf_backend *be, cmf_batch *b, const cmf_layer *L, int layer, int n) {
    (void)be;
    flush_all();
    rope_queue *r = &g_rope;
    *r = (rope_queue){.b = b, .L = L, .layer = layer, .n = n, .rope = 1};
    if (!cmf_cpu_fuse_enabled()) flush_rope();
    return CMF_OK;
}

/* Token t's k/v rows of the KV heads g0 <= g < g1 into its session's KV cache (and their query heads' q into the far
 * field's query trace). */
static void kv_write_heads(cmf_batch *b, cmf_session *const *seqs, int l, int t, int g0, int g1) {
    const cmf_config *c = &b->m->cfg;
    const int HD = c->head_dim, QD = c->n_heads * HD, KVD = c->n_kv_heads * HD, GQ = c->n_heads / c->n_kv_heads * HD;
    cmf_session *s = seqs[t];
    const int pos = b->pos[t];
    if (s->o1 && s->o1->on[l]) {
        if (s->o1->sealed) return; /* the far field takes this row in o1_worker */
        memcpy(s->o1->qtrace[l] + (size_t)pos * QD + (size_t)g0 * GQ, b->q + (size_t)t * QD + (size_t)g0 * GQ,
               (size_t)(g1 - g0) * GQ * sizeof(float));
    }
    const size_t row = s->kv_off[l] + (size_t)pos * KVD + (size_t)g0 * HD, in = (size_t)t * KVD + (size_t)g0 * HD;
    memcpy(s->k_cache + row, b->k + in, (size_t)(g1 - g0) * HD * sizeof(float));
    memcpy(s->v_cache + row, b->v + in, (size_t)(g1 - g0) * HD * sizeof(float));
}

/* Whether the pending RoPE and KV write of this batch may run inside the attention's fan-out: a decode step (every
 * token from another session) without the far field. */
static int rope_in_attention(const rope_queue *r, cmf_batch *b, cmf_session *const *seqs, int l, int n) {
    if (!r->rope || r->b != b || r->layer != l || r->n != n) return 0;
    for (int t = 0; t < n; t++) {
        if (seqs[t]->o1) return 0;
        for (int u = 0; u < t; u++)
            if (seqs[u] == seqs[t]) return 0;
    }
    return 1;
}

static cmf_status cpu_kv_write(cmf_backend *be, cmf_batch *b, cmf_session *const *seqs, int l, int n) {
    (void)be;
    flush_mm();
    rope_queue *r = &g_rope;
    if (rope_in_attention(r, b, seqs, l, n)) { /* kept pending with the RoPE */
        r->seqs = seqs;
        r->kv = 1;
        return CMF_OK;
    }
    flush_rope();
    for (int t = 0; t < n; t++) kv_write_heads(b, seqs, l, t, 0, b->m->cfg.n_kv_heads);
    return CMF_OK;
}

/* Attention over the f32 KV cache. A token's positions are split into attn_nch(len) chunks; each chunk is taken
 * ATTN_BLOCK positions at a time, and for each block every KV head's group of query heads extends its running softmax
 * state (cmf_attn_chunk, ops.c: vectorized dot products and p*v sums, online softmax), so the block's cache rows (all
 * KV heads of a position are adjacent) are read from memory once, as one contiguous run. A single chunk writes its
 * normalized output; several (flash-decoding) leave their states (max, sum, unnormalized output) to cmf_attn_merge.
 * The split depends on the token's own range only, never on the batch or the threads, so a token's attention has the
 * same bits decoded alone or inside any batch (batch invariance, tests/model/test_batch_invariance.c). Who computes
 * a chunk does not change its bits, so the jobs are cut for speed: few tokens for the threads (decode): a job per
 * (token, chunk), the states in the pool's shared buffer, merged after the fan-out; else a job per token, its
 * chunks one after the other in the thread's scratch and merged there (no buffer growing with the context). The
 * threads take jobs by an atomic index (a thread that starts late takes fewer: 16 tokens dealt out in turn left one
 * thread waiting ~0.1 ms per layer for the other); a job per token first prefetches the token's first block of rows
 * (attn_prefetch) and, in a decode step, runs its pending RoPE and KV write (deferred RoPE above). When the tokens
 * are fewer than two per thread and each is one chunk (a one-token decode step up to 256 positions), a token's job is
 * cut further by KV head (hsplit jobs per token, each a range of KV heads with their query heads: its RoPE, its
 * slice of the KV write, its attention), so that every thread works and reads KV rows instead of one: each head's
 * arithmetic is that of the whole token's job (the heads never mix before the normalization), so the bits stay. */
enum {
    ATTN_CHUNK_MIN = 256, /* positions per chunk at least */
    ATTN_NCH_MAX = 16,    /* chunks per token at most */
    ATTN_BLOCK = 64       /* positions per block */
};

typedef struct {
    cmf_batch *b;
    cmf_session *const *seqs;
    int layer, n;
    int per_token;  /* 1: a job per token (or per KV head range, hsplit); 0: a job per (token, chunk) */
    int hsplit;     /* per_token: jobs per token, each KV heads [n_kv_heads * i / hsplit, n_kv_heads * (i + 1) / hsplit);
                       > 1 only when every token is one chunk */
    const rope_queue *rq; /* per_token only: each job first runs its token's pending RoPE and KV write (or NULL) */
    const int *off; /* [n + 1]: token t's chunks are jobs off[t] .. off[t+1]-1 of the per-chunk numbering */
    float *part;    /* per chunk: [off[n]][n_heads][2 + head_dim] = (m, l, o) per query head (tokens of >1 chunk) */
    atomic_int next; /* the next job (threads take jobs in order: one that starts late takes fewer) */
} attn_task;

/* cmf_cpu_set_attn_serial_max (ops.h): -1 = the defaults above */
static atomic_llong g_attn_serial_max = -1;

void cmf_cpu_set_attn_serial_max(long long work) {
    atomic_store_explicit(&g_attn_serial_max, work < 0 ? -1 : work, memory_order_relaxed);
}

static int attn_nch(int len) {
    const int nch = (len + ATTN_CHUNK_MIN - 1) / ATTN_CHUNK_MIN;
    return nch < 1 ? 1 : nch > ATTN_NCH_MAX ? ATTN_NCH_MAX : nch;
}

static int attn_skipped(const cmf_session *s, int layer) { /* sealed far field: read out by o1_worker */
    return s->o1 && s->o1->sealed && s->o1->on[layer];
}

static void attn_range(const cmf_batch *b, int layer, int t, int *start, int *len) {
    const cmf_config *c = &b->m->cfg;
    const int pos = b->pos[t];
    *start = c->is_sliding[layer] && pos - c->sliding_window + 1 > 0 ? pos - c->sliding_window + 1 : 0;
    *len = pos - *start + 1;
}

/* Prefetches (into L2) the KV cache rows [j0, min(j1, j0 + ATTN_BLOCK)) of a layer (kc / vc, KVD floats each), their
 * floats [i0, i1) (the KV heads a job reads; all of them: [0, KVD)): the block's rows for those heads as one run of
 * misses; read head by head, they missed one head at a time (a 16-token serve step reads ~20 MB of f32 cache per
 * forward, mostly from memory). */
static void attn_prefetch(const float *kc, const float *vc, int KVD, int i0, int i1, int j0, int j1) {
    if (j1 > j0 + ATTN_BLOCK) j1 = j0 + ATTN_BLOCK;
    for (int j = j0; j < j1; j++)
        for (int i = i0; i < i1; i += 16) {
            __builtin_prefetch(kc + (size_t)j * KVD + i, 0, 2);
            __builtin_prefetch(vc + (size_t)j * KVD + i, 0, 2);
        }
}

/* Chunk ch of nch of token t, KV heads [g0, g1) and their query heads: into the record rec ((m, l, o) per query head)
 * when nch > 1, else the normalized output row of b->att (with (m, l) in ml2, 2 * n_heads floats). scratch:
 * CMF_ATTN_SB * group floats. */
static void attn_one(const attn_task *a, int t, int ch, int nch, int g0, int g1, float *rec, float *ml2,
                     float *scratch) {
    cmf_batch *b = a->b;
    const cmf_config *c = &b->m->cfg;
    const int HD = c->head_dim, NH = c->n_heads, NKV = c->n_kv_heads, KVD = NKV * HD, group = NH / NKV;
    const cmf_session *s = a->seqs[t];
    int start, len;
    attn_range(b, a->layer, t, &start, &len);
    const int j0 = start + (int)((int64_t)len * ch / nch), j1 = start + (int)((int64_t)len * (ch + 1) / nch);
    const float *q = b->q + (size_t)t * NH * HD;
    float *o = nch > 1 ? rec + 2 : b->att + (size_t)t * NH * HD, *ml = nch > 1 ? rec : ml2;
    const int64_t ldo = nch > 1 ? 2 + HD : HD, ldml = nch > 1 ? 2 + HD : 2;
    cmf_attn_reset((g1 - g0) * group, HD, o + (int64_t)g0 * group * ldo, ldo, ml + (int64_t)g0 * group * ldml, ldml);
    const float *kc = s->k_cache + s->kv_off[a->layer], *vc = s->v_cache + s->kv_off[a->layer];
    for (int p0 = j0; p0 < j1; p0 += ATTN_BLOCK) {
        const int np = j1 - p0 < ATTN_BLOCK ? j1 - p0 : ATTN_BLOCK;
        if (p0 + ATTN_BLOCK < j1) /* the next block's rows */
            attn_prefetch(kc, vc, KVD, g0 * HD, g1 * HD, p0 + ATTN_BLOCK, j1);
        for (int g = g0; g < g1; g++) {
            const size_t row = (size_t)p0 * KVD + (size_t)g * HD;
            cmf_attn_chunk(q + (size_t)g * group * HD, HD, group, kc + row, vc + row, KVD, np, HD, c->attn_scale,
                           c->attn_softcap, scratch, o + (int64_t)g * group * ldo, ldo, ml + (int64_t)g * group * ldml,
                           ldml);
        }
    }
    if (nch > 1) return;
    for (int h = g0 * group; h < g1 * group; h++) {
        float *oh = o + (size_t)h * HD;
        const float inv = 1.0f / ml[2 * h + 1];
        for (int i = 0; i < HD; i++) oh[i] *= inv;
    }
}

/* Token t's output from its nch > 1 chunk records (part: nch records of n_heads * (2 + head_dim) floats):
 * out = sum_c exp(m_c - M) o_c / sum_c exp(m_c - M) l_c per query head, M = max_c m_c. */
static void attn_merge_token(const attn_task *a, int t, const float *part, int nch) {
    const cmf_config *c = &a->b->m->cfg;
    const int HD = c->head_dim, NH = c->n_heads;
    for (int h = 0; h < NH; h++)
        cmf_attn_merge(part + (size_t)h * (2 + HD), nch, (int64_t)NH * (2 + HD), HD,
                       a->b->att + (size_t)t * NH * HD + (size_t)h * HD);
}

/* A task mask's dead heads contribute nothing (the query heads of KV heads [g0, g1)). */
static void attn_dead_heads(const attn_task *a, int t, int g0, int g1) {
    const cmf_config *c = &a->b->m->cfg;
    const int group = c->n_heads / c->n_kv_heads;
    const uint8_t *heads =
        a->seqs[0]->mask ? cmf_mask_head_row(a->b->m->masks, a->seqs[0]->mask, (uint32_t)a->layer) : NULL;
    for (int h = g0 * group; heads && h < g1 * group; h++)
        if (!cmf_mask_bit(heads, (uint32_t)h))
            memset(a->b->att + ((size_t)t * c->n_heads + h) * c->head_dim, 0, (size_t)c->head_dim * sizeof(float));
}

static void attn_worker(void *ctx, int ith, int nth) {
    (void)nth;
    attn_task *a = ctx;
    const cmf_config *c = &a->b->m->cfg;
    const int NH = c->n_heads, NKV = c->n_kv_heads, HD = c->head_dim, group = NH / NKV;
    const size_t rec = (size_t)NH * (2 + HD);
    float *scratch = cmf_pool_scratch(a->b->pool, ith, 0); /* reserved by cpu_attention */
    float *ml2 = scratch + (size_t)group * CMF_ATTN_SB, *own = ml2 + 2 * (size_t)NH;
    if (a->per_token) {
        for (int job; (job = atomic_fetch_add_explicit(&a->next, 1, memory_order_relaxed)) < a->n * a->hsplit;) {
            const int t = job / a->hsplit, part = job % a->hsplit;
            const int g0 = NKV * part / a->hsplit, g1 = NKV * (part + 1) / a->hsplit;
            const cmf_session *s = a->seqs[t];
            int start, len;
            attn_range(a->b, a->layer, t, &start, &len); /* its first rows, in flight during RoPE and the KV write */
            attn_prefetch(s->k_cache + s->kv_off[a->layer], s->v_cache + s->kv_off[a->layer], NKV * HD, g0 * HD,
                          g1 * HD, start, start + len);
            if (a->rq) {
                rope_heads(a->b, a->rq->L, a->layer, t, g0, g1);
                kv_write_heads(a->b, a->seqs, a->layer, t, g0, g1);
            }
            if (attn_skipped(a->seqs[t], a->layer)) continue;
            const int nch = a->off[t + 1] - a->off[t];
            for (int ch = 0; ch < nch; ch++) attn_one(a, t, ch, nch, g0, g1, own + (size_t)ch * rec, ml2, scratch);
            if (nch > 1) attn_merge_token(a, t, own, nch);
            attn_dead_heads(a, t, g0, g1);
        }
        return;
    }
    int t = 0;
    for (int job; (job = atomic_fetch_add_explicit(&a->next, 1, memory_order_relaxed)) < a->off[a->n];) {
        while (job >= a->off[t + 1]) t++;
        const int nch = a->off[t + 1] - a->off[t];
        if (attn_skipped(a->seqs[t], a->layer)) continue;
        attn_one(a, t, job - a->off[t], nch, 0, NKV, a->part + (size_t)job * rec, ml2, scratch);
        if (nch == 1) attn_dead_heads(a, t, 0, NKV);
    }
}

/* the O(1) far field for sealed sessions, parallel over (session, KV head), in token order */
typedef struct {
    cmf_batch *b;
    cmf_session *const *seqs;
    int layer, n;
    cmf_session **sealed; /* distinct sessions of the batch whose far field is sealed on this layer */
    int n_sealed;
} o1_task;

static void o1_worker(void *ctx, int ith, int nth) {
    o1_task *a = ctx;
    const cmf_config *c = &a->b->m->cfg;
    const int HD = c->head_dim, NKV = c->n_kv_heads, QD = c->n_heads * HD, KVD = NKV * HD;
    const int group = c->n_heads / NKV;
    for (int job = ith; job < a->n_sealed * NKV; job += nth) {
        cmf_session *s = a->sealed[job / NKV];
        const int g = job % NKV;
        cmf_o1 *st = s->o1->st[(size_t)a->layer * NKV + g];
        for (int t = 0; t < a->n; t++) {
            if (a->seqs[t] != s) continue;
            const size_t qo = (size_t)t * QD + (size_t)g * group * HD;
            /* cannot fail: pointers are valid and the states keep their query trace */
            (void)cmf_o1_step(st, a->b->q + qo, a->b->k + (size_t)t * KVD + (size_t)g * HD,
                              a->b->v + (size_t)t * KVD + (size_t)g * HD, a->b->att + qo);
        }
    }
}

static cmf_status cpu_attention(cmf_backend *be, cmf_batch *b, cmf_session *const *seqs, int l, int n) {
    (void)be;
    flush_mm();
    const cmf_config *c = &b->m->cfg;
    const int HD = c->head_dim, NKV = c->n_kv_heads, group = c->n_heads / NKV;
    if (!b->pool) {
        flush_rope();
        return cmf_err(CMF_E_ARG, "cpu attention: the batch has no thread pool");
    }
    /* the chunks of each token (attn_nch: its own range only) and the work; small work (short contexts, tiny
     * heads) and a single job run on the caller: waking the pool costs more */
    double work = 0;
    int most = 1;
    for (int t = 0; t < n; t++) {
        int start, len;
        attn_range(b, l, t, &start, &len);
        work += len;
        most = attn_nch(len) > most ? attn_nch(len) : most;
    }
    work *= (double)c->n_heads * HD;
    const int pool_n = cmf_pool_size(b->pool), per_token = n >= 4 * pool_n || most == 1;
    const size_t rec = (size_t)c->n_heads * (2 + HD) * sizeof(float); /* one chunk's states */
    const size_t offb = ((size_t)(n + 1) * sizeof(int) + 63) & ~(size_t)63;
    uint8_t *sh = cmf_pool_shared(b->pool, offb + (per_token ? 0 : (size_t)n * most * rec));
    if (!sh) return cmf_err(CMF_E_NOMEM, "cpu attention: cannot allocate the partial sums of %d tokens", n);
    int *off = (int *)(void *)sh;
    off[0] = 0;
    for (int t = 0; t < n; t++) {
        int start, len;
        attn_range(b, l, t, &start, &len);
        off[t + 1] = off[t] + attn_nch(len);
    }
    cmf_status st = cmf_pool_reserve(b->pool, ((size_t)group * CMF_ATTN_SB + 2 * (size_t)c->n_heads) * sizeof(float) +
                                                  (per_token ? (size_t)most * rec : 0));
    if (st != CMF_OK) return st;
    /* the pending RoPE / KV write (see deferred RoPE above): inside the fan-out, a job per token, or now */
    rope_queue rq = g_rope;
    const int fused = g_rope.kv && per_token && rope_in_attention(&g_rope, b, seqs, l, n);
    if (fused) g_rope.rope = g_rope.kv = 0;
    else flush_rope();
    /* few single-chunk tokens: a job per (token, range of KV heads), as many ranges as threads (the RoPE angles are
     * computed by each range's job: more ranges than threads would only repeat them) */
    const int hsplit = per_token && most == 1 && n < 2 * pool_n ? (NKV < pool_n ? NKV : pool_n) : 1;
    attn_task at = {b,   seqs, l, n, per_token, hsplit, fused ? &rq : NULL,
                    off, per_token ? NULL : (float *)(void *)(sh + offb), 0};
    atomic_init(&at.next, 0);
    const int jobs = per_token ? n * hsplit : off[n];
    /* a one-token step's KV-head jobs go to the pool from a quarter of the work: a worker that is late is skipped
     * (cmf_pool_run_dyn), so the fan-out costs little more than a call when the caller ends up doing both jobs */
    const long long smax = atomic_load_explicit(&g_attn_serial_max, memory_order_relaxed);
    if (work < (smax >= 0 ? (double)smax : hsplit > 1 ? 16384 : 65536) || jobs == 1) attn_worker(&at, 0, 1);
    else cmf_pool_run_dyn(b->pool, attn_worker, &at);
    for (int t = 0; t < n && !per_token; t++) /* per chunk: the merge of the tokens of several chunks */
        if (off[t + 1] - off[t] > 1 && !attn_skipped(seqs[t], l)) {
            attn_merge_token(&at, t, at.part + (size_t)off[t] * (rec / sizeof(float)), off[t + 1] - off[t]);
            attn_dead_heads(&at, t, 0, NKV);
        }
    o1_task ot = {b, seqs, l, n, b->sealed, 0};
    for (int t = 0; t < n; t++) {
        cmf_session *s = seqs[t];
        if (!s->o1 || !s->o1->sealed || !s->o1->on[l]) continue;
        int seen = 0;
        for (int i = 0; i < ot.n_sealed && !seen; i++) seen = ot.sealed[i] == s;
        if (!seen) ot.sealed[ot.n_sealed++] = s;
    }
    if (ot.n_sealed) cmf_pool_run(b->pool, o1_worker, &ot);
    return CMF_OK;
}

static cmf_status cpu_glu(cmf_backend *be, cmf_batch *b, float *gate, const float *up, int64_t count, int gelu) {
    (void)be;
    defer_queue *q = &g_defer;
    if (q->count == 2 && q->b == b && q->mm[0].out == gate && q->mm[1].out == up && q->w[0].rows == q->w[1].rows &&
        q->mm[0].ld_out == q->w[0].rows && q->mm[1].ld_out == q->w[1].rows && count == (int64_t)q->n * q->w[0].rows) {
        for (int i = 0; i < 2; i++) q->mm[i].w = &q->w[i];
        q->count = 0; /* the pending gate/up products and this GLU as one group */
        cmf_matmul_group(b->pool, q->x, q->n, q->mm, 2, gelu ? 2 : 1);
        return CMF_OK;
    }
    flush_all();
    if (gelu) cmf_gelu_tanh(gate, count);
    else cmf_silu(gate, count);
    for (int64_t i = 0; i < count; i++) gate[i] *= up[i];
    return CMF_OK;
}

static cmf_status cpu_residual(cmf_backend *be, cmf_batch *b, float *x, float *o, const float *post_norm, int rows,
                               int d, float eps, int gemma) {
    (void)be, (void)b;
    flush_all();
    for (int t = 0; t < rows; t++) {
        float *ot = o + (size_t)t * d, *xt = x + (size_t)t * d;
        if (post_norm) cmf_rmsnorm(ot, ot, post_norm, d, eps, gemma);
        for (int i = 0; i < d; i++) xt[i] += ot[i];
    }
    return CMF_OK;
}

static cmf_status cpu_head(cmf_backend *be, cmf_batch *b, float *out_host, const float *xn, int rows,
                           const cmf_weight *lm_head, float softcap) {
    (void)be;
    flush_all();
    const int64_t V = lm_head->rows;
    cmf_matmul(b->pool, out_host, V, xn, rows, lm_head, NULL);
    if (softcap > 0)
        for (int64_t i = 0; i < (int64_t)rows * V; i++) out_host[i] = softcap * tanhf(out_host[i] / softcap);
    return CMF_OK;
}

static void cpu_destroy(cmf_backend *be) { (void)be; /* the singleton holds nothing */ }

static cmf_backend cpu_backend = {
    .kind = CMF_BACKEND_CPU,
    .name = "cpu",
    .desc = "cpu",
    .buf_alloc = cpu_alloc,
    .buf_free = cpu_free,
    .upload = cpu_copy,
    .download = cpu_copy,
    .zero = cpu_zero,
    .sync = cpu_sync,
    .load_weights = cpu_load_weights,
    .unload_weights = cpu_unload_weights,
    .kv_alloc = cpu_kv_alloc,
    .kv_free = cpu_kv_free,
    .begin = cpu_begin,
    .end = cpu_end,
    .embed = cpu_embed,
    .rmsnorm = cpu_rmsnorm,
    .matmul = cpu_matmul,
    .qk_rope = cpu_qk_rope,
    .kv_write = cpu_kv_write,
    .attention = cpu_attention,
    .glu = cpu_glu,
    .residual = cpu_residual,
    .head = cpu_head,
    .destroy = cpu_destroy,
};

cmf_backend *cmf_backend_cpu(void) { return &cpu_backend; }
