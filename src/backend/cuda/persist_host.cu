/* persist_host.cu — the host side of the persistent decode kernel (persist.cu, file comment there; opt-in
 * CMF_CUDA_PERSIST=1): which steps it takes, the per-weight-set layer table, the cooperative launch at the first
 * kv_write of a G_WAIT forward, the C entry points of persist.h and the stage profile. */
#include <stdlib.h>
#include <string.h>

#include <new>

#include "backend/cuda/matvec_i8.cuh"
#include "backend/cuda/persist.cuh"
#include "backend/cuda/persist.h"

namespace cmf_cuda_be {



static int env_on(const char *name, int dflt) {
    const char *e = getenv(name);
    return e && e[0] ? atoi(e) : dflt;
}

/* The split-column segments of the graph path's product of `units` q8_row rows (a q/k/v group: all its rows) of
 * `cols` columns: 1 where it takes the streaming kernel (matvec_i8s.cu, mv_i8_stream_pick: one warp per whole row),
 * else the row-group kernel's warps per row (matvec_i8.cu: its split rule and switches). */
static int ks_of(int64_t cols, int64_t units) {
    if (mv_i8_stream_pick(CMF_DT_Q8_ROW, cols, units)) return 1;
    const int split = env_on("CMF_CUDA_I8_SPLIT", 1) != 0;
    const int ks4 = env_on("CMF_CUDA_I8_KS4", 8192) > 0 ? env_on("CMF_CUDA_I8_KS4", 8192) : 8192;
    return !split ? 1 : cols >= ks4 ? 4 : cols >= 2048 ? 2 : 1;
}


/* Whether layer l of weight set w fits the kernel (see the file comment); sets the reason otherwise. */
static bool layer_ok(cuda_impl *I, const cmf_config *c, const cmf_layer *L) {
    const int64_t D = c->hidden_size, QD = (int64_t)c->n_heads * c->head_dim;
    const int64_t KVD = (int64_t)c->n_kv_heads * c->head_dim;
    const int64_t F = L->w_gate.rows;
    const cmf_weight *m[7] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->w_gate, &L->w_up, &L->w_down};
    const int64_t rows[7] = {QD, KVD, KVD, D, F, F, D}, cols[7] = {D, D, D, QD, D, D, F};
    for (int i = 0; i < 7; i++)
        if (m[i]->dtype != CMF_DT_Q8_ROW || m[i]->row0 != 0 || m[i]->rows != m[i]->full_rows || m[i]->rows != rows[i] ||
            m[i]->cols != cols[i] || cols[i] % 32 || !I->payloads.count(m[i]->data))
            return false;
    if (L->bq || L->bk || L->bv || L->post_attn_norm || L->post_ffn_norm || !L->attn_norm || !L->ffn_norm) return false;
    if (!dev_vec(I, L->attn_norm) || !dev_vec(I, L->ffn_norm) || !L->q_norm != !L->k_norm) return false;
    if (L->q_norm && (!dev_vec(I, L->q_norm) || !dev_vec(I, L->k_norm))) return false;
    return true;
}

/* Builds the state for weight set w and the session's layer offsets (a table upload; at the first step of each). */
static cmf_status persist_build(cuda_impl *I, const cmf_weights *w, const cmf_session *s, uint64_t kvh) {
    persist_state *ps = I->ps;
    const cmf_config *c = &I->m->cfg;
    ps->w = w, ps->gen = I->weight_gen, ps->kvh = kvh, ps->eligible = 0;
    const int G = c->n_heads / c->n_kv_heads, hd = c->head_dim;
    bool ok = c->head_dim % 8 == 0 && hd >= 32 && hd <= 256 && G >= 1 && G <= AD_MAXG && c->attn_softcap == 0.0f &&
              c->rot_dim % 2 == 0 && c->rot_dim <= hd && c->hidden_size % 32 == 0 && I->kv_type == CMF_CUDA_KV_F16 &&
              (c->act == CMF_ACT_SILU || c->act == CMF_ACT_GELU_TANH) && w->final_norm;
    for (int l = 0; ok && l < c->n_layers; l++) ok = !c->is_sliding[l] && layer_ok(I, c, &w->layers[l]);
    const int64_t F = ok ? w->layers[0].w_gate.rows : 0;
    for (int l = 0; ok && l < c->n_layers; l++) ok = w->layers[l].w_gate.rows == F;
    if (!ok) return CMF_OK;
    const int L = hd <= 32 ? 4 : hd <= 64 ? 8 : hd <= 128 ? 16 : 32, GH = G == 1 ? 1 : G == 2 ? 2 : G <= 4 ? 4 : 8;
    persist_kernel(GH, L, &ps->fn, &ps->smem); /* smem: the attention halves' part of the activation area */
    if (!ps->fn) return CMF_OK;
    const int64_t QD = (int64_t)c->n_heads * hd, maxc = QD > F ? (QD > c->hidden_size ? QD : c->hidden_size)
                                                               : (F > c->hidden_size ? F : c->hidden_size);
    ps->xs_off = (unsigned)((maxc + 15) / 16 * 16);
    const size_t quant = ps->xs_off + (size_t)maxc / 32 * 4;
    const size_t act = ((ps->smem > quant ? ps->smem : quant) + 15) / 16 * 16;
    int dev = 0, optin = 0, sms = 0, occ = 0;
    CU_TRY(cudaGetDevice(&dev), "persist: device");
    CU_TRY(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev), "persist: shared memory");
    CU_TRY(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev), "persist: SM count");
    const size_t room = (size_t)optin - 1024 - act; /* static shared memory and reserve */
    if ((size_t)optin < act + 1024 + 2 * 4096) return CMF_OK;
    ps->cap = (unsigned)(room / 2 / 16 * 16);
    ps->smem = 2 * (size_t)ps->cap + act;
    CU_TRY(cudaFuncSetAttribute(ps->fn, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)ps->smem),
           "persist: shared memory attribute");
    CU_TRY(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, ps->fn, PK_THREADS, ps->smem), "persist: occupancy");
    if (occ < 1) return CMF_OK;
    ps->grid = sms * occ, ps->threads = PK_THREADS;
    std::vector<PLayer> tab((size_t)c->n_layers);
    for (int l = 0; l < c->n_layers; l++) {
        const cmf_layer *Ly = &w->layers[l];
        const cmf_weight *m[7] = {&Ly->wq, &Ly->wk, &Ly->wv, &Ly->wo, &Ly->w_gate, &Ly->w_up, &Ly->w_down};
        for (int i = 0; i < 7; i++) tab[l].w[i] = (const uint8_t *)I->payloads[m[i]->data];
        tab[l].attn_norm = dev_vec(I, Ly->attn_norm), tab[l].ffn_norm = dev_vec(I, Ly->ffn_norm);
        tab[l].q_norm = Ly->q_norm ? dev_vec(I, Ly->q_norm) : NULL;
        tab[l].k_norm = Ly->k_norm ? dev_vec(I, Ly->k_norm) : NULL;
        tab[l].kv_off = (int64_t)s->kv_off[l];
    }
    cmf_cuda_free(ps->d_layers);
    ps->d_layers = NULL;
    cmf_status st = cmf_cuda_malloc((void **)&ps->d_layers, tab.size() * sizeof(PLayer));
    if (st == CMF_OK) CU_TRY(cudaMemcpy(ps->d_layers, tab.data(), tab.size() * sizeof(PLayer), cudaMemcpyHostToDevice),
                             "persist: layer table");
    if (st == CMF_OK && !ps->d_bar) st = cmf_cuda_malloc((void **)&ps->d_bar, 64 * sizeof(unsigned));
    ps->kv_pf = env_on("CMF_CUDA_PERSIST_KVPF", 1) != 0;
    ps->bar_mode = env_on("CMF_CUDA_PERSIST_BAR", 1) != 0;
    ps->tma = env_on("CMF_CUDA_PERSIST_TMA", 0) == 1;
    cmf_cuda_free(ps->d_prof);
    ps->d_prof = NULL, ps->prof_n = 0;
    if (st == CMF_OK && env_on("CMF_CUDA_PERSIST_PROF", 0) == 1) {
        ps->prof_n = 1 + 10 * c->n_layers;
        st = cmf_cuda_malloc((void **)&ps->d_prof, (size_t)ps->grid * ps->prof_n * sizeof(unsigned long long));
    }
    if (st == CMF_OK) ps->eligible = 1;
    return st;
}

int persist_env(void) { return env_on("CMF_CUDA_PERSIST", 0) == 1; }

/* At the first kv_write of a G_WAIT forward (see backend_graph.cu): when this one-token step fits the kernel, issues
 * the held embedding and the whole layer stack as one launch and sets *launched (the caller then skips the layers'
 * ops until the final norm); else leaves everything as it was. Errors: CMF_E_NOMEM, CMF_E_IO. */
cmf_status persist_try(cuda_impl *I, cmf_backend *be, cmf_batch *b, cmf_session *const *seqs, int n, bool *launched) {
    *launched = false;
    if (!I->persist || n != 1 || be->allreduce || cmf_cuda_i8act_on() != 1) return CMF_OK;
    const cmf_session *s = seqs[0];
    const cmf_config *c = &b->m->cfg;
    if (!s->dk || !s->dv || s->mask || s->o1) return CMF_OK;
    uint64_t h = 1469598103934665603ull; /* FNV-1a over the layer offsets */
    for (int l = 0; l < c->n_layers; l++) h = (h ^ (uint64_t)s->kv_off[l]) * 1099511628211ull;
    if (!I->ps) {
        I->ps = new (std::nothrow) persist_state();
        if (!I->ps) return cmf_err(CMF_E_NOMEM, "cuda: persist state");
    }
    persist_state *ps = I->ps;
    if (ps->w != s->w || ps->gen != I->weight_gen || ps->kvh != h) {
        cmf_status st = persist_build(I, s->w, s, h);
        if (st != CMF_OK) {
            ps->w = NULL;
            return st;
        }
    }
    if (!ps->eligible) return CMF_OK;
    cmf_cuda_attn a;
    a.n_heads = c->n_heads, a.n_kv_heads = c->n_kv_heads, a.head_dim = c->head_dim, a.scale = c->attn_scale;
    a.softcap = 0.0f, a.window = 0, a.kv_type = CMF_CUDA_KV_F16;
    if (cmf_cuda_attn_decode_work_bytes(&a, s->n_ctx) > I->work_bytes) return CMF_OK;
    PArgs p;
    memset(&p, 0, sizeof p);
    p.layers = ps->d_layers, p.n_layers = c->n_layers, p.D = c->hidden_size;
    p.QD = c->n_heads * c->head_dim, p.KVD = c->n_kv_heads * c->head_dim, p.F = (int)s->w->layers[0].w_gate.rows;
    p.ks_qkv = ks_of(p.D, p.QD + 2 * p.KVD), p.ks_gu = ks_of(p.D, p.F), p.ks_qd = ks_of(p.QD, p.D);
    p.ks_f = ks_of(p.F, p.D);
    p.a = a, p.eps = c->rms_norm_eps, p.rope_eps = c->rms_norm_eps, p.gemma = c->gemma_norm;
    p.gelu = c->act == CMF_ACT_GELU_TANH, p.rot = c->rot_dim > 0 ? c->rot_dim : 0;
    p.interleaved = c->rope_pairing == CMF_ROPE_INTERLEAVED;
    p.inv_freq = c->rot_dim > 0 ? dev_vec(I, b->m->rope_inv_freq) : NULL;
    if (c->rot_dim > 0 && !p.inv_freq) return CMF_OK;
    p.x = b->x, p.q = b->q, p.k = b->k, p.v = b->v, p.att = b->att, p.hb = b->hb;
    p.kc = (uint16_t *)s->dk, p.vc = (uint16_t *)s->dv, p.dpos = D_POS(I);
    const int64_t keys = s->n_ctx;
    p.nsplit = (int)decode_splits(a.n_kv_heads, keys, ad_split_keys());
    p.mk = ad_split_keys();
    p.done = (int *)I->d_work, p.work = (float *)((char *)I->d_work + work_counters(&a));
    p.bar = ps->d_bar, p.cap = ps->cap, p.xs_off = ps->xs_off, p.kv_pf = ps->kv_pf, p.prof = ps->d_prof;
    p.bar_mode = ps->bar_mode, p.tma = ps->tma;
    I->has_pn = 0; /* the kernel normalizes x itself */
    cmf_status st = held_issue(I); /* the embedding */
    if (st != CMF_OK) return st;
    CU_TRY(cudaMemsetAsync(ps->d_bar, 0, 64 * sizeof(unsigned), I->stream), "persist: barrier reset");
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3((unsigned)ps->grid);
    cfg.blockDim = dim3((unsigned)ps->threads);
    cfg.dynamicSmemBytes = ps->smem;
    cfg.stream = I->stream;
    cudaLaunchAttribute at[1];
    at[0].id = cudaLaunchAttributeCooperative;
    at[0].val.cooperative = 1;
    cfg.attrs = at;
    cfg.numAttrs = 1;
    CU_TRY(cudaLaunchKernelEx(&cfg, ps->fn, p), "persist: launch");
    ps->steps++;
    *launched = true;
    return CMF_OK;
}

void persist_free(cuda_impl *I) {
    if (!I->ps) return;
    cmf_cuda_free(I->ps->d_layers);
    cmf_cuda_free(I->ps->d_bar);
    cmf_cuda_free(I->ps->d_prof);
    delete I->ps;
    I->ps = NULL;
}

} // namespace cmf_cuda_be

using namespace cmf_cuda_be;

extern "C" uint64_t cmf_backend_cuda_persist_steps(cmf_backend *be) {
    return be && be->kind == CMF_BACKEND_CUDA && IMPL(be)->ps ? IMPL(be)->ps->steps : 0;
}

extern "C" void cmf_backend_cuda_set_persist(cmf_backend *be, int on) {
    if (!be || be->kind != CMF_BACKEND_CUDA) return;
    pthread_mutex_lock(&IMPL(be)->mu);
    IMPL(be)->persist = on != 0;
    pthread_mutex_unlock(&IMPL(be)->mu);
}

extern "C" int cmf_backend_cuda_persist_profile(cmf_backend *be, double *out) {
    if (!be || be->kind != CMF_BACKEND_CUDA || !IMPL(be)->ps || !IMPL(be)->ps->d_prof) return 0;
    persist_state *ps = IMPL(be)->ps;
    const size_t n = (size_t)ps->prof_n, G = (size_t)ps->grid;
    std::vector<unsigned long long> t(n * G);
    if (cmf_cuda_sync(IMPL(be)->stream) != CMF_OK ||
        cudaMemcpy(t.data(), ps->d_prof, t.size() * sizeof(unsigned long long), cudaMemcpyDeviceToHost) != cudaSuccess)
        return 0;
    const int nl = (int)((n - 1) / 10);
    for (int i = 0; i < 21; i++) out[i] = 0.0;
    int cnt[5] = {0, 0, 0, 0, 0};
    for (int l = 0; l < nl; l++)
        for (int s5 = 0; s5 < 5; s5++) {
            const size_t is = 1 + 10 * (size_t)l + 2 * (size_t)s5, ie = is + 1;
            if (l == 0 && s5 == 0) continue; /* no barrier before layer 0's A */
            const size_t ip = is - 1; /* the previous stage's end */
            unsigned long long max_prev = 0, min_s = ~0ull, max_s = 0;
            double sum_c = 0, max_c = 0;
            for (size_t g = 0; g < G; g++) {
                const unsigned long long *b = &t[g * n];
                max_prev = b[ip] > max_prev ? b[ip] : max_prev;
                min_s = b[is] < min_s ? b[is] : min_s;
                max_s = b[is] > max_s ? b[is] : max_s;
                const double c = (double)(b[ie] - b[is]) / 1e3;
                sum_c += c;
                max_c = c > max_c ? c : max_c;
            }
            out[4 * s5 + 0] += sum_c / (double)G;
            out[4 * s5 + 1] += max_c;
            out[4 * s5 + 2] += ((double)min_s - (double)max_prev) / 1e3;
            out[4 * s5 + 3] += (double)(max_s - min_s) / 1e3;
            cnt[s5]++;
        }
    for (int i = 0; i < 20; i++) out[i] /= cnt[i / 4] ? cnt[i / 4] : 1;
    out[20] = (double)(t[n - 1] - t[0]) / 1e3; /* block 0: the stack */
    return 1;
}
