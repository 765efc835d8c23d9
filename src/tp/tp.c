/* tp.c — a tensor-parallel group (tp.h): rank models on their own backends, the cpu all-reduce (a barrier and a
 * rank-ordered sum in shared memory), rank sessions / batches, and the forward over N threads with the logits
 * gathered from the vocabulary slices. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "tp/tp.h"
#include "util/error.h"
#ifdef CMF_HAVE_NCCL
#include "backend/cuda/cuda_ops.h"
#endif

static int saved_device(const cmf_tp *tp);
static void restore_device(int dev);

/* ---- the cpu all-reduce ----------------------------------------------------------------------------------- */

static double now_s(void);
static void spin_while_equal(_Atomic unsigned *v, unsigned old, _Atomic int *stop, int us);

int cmf_tp_barrier(cmf_tp *tp) {
    pthread_mutex_lock(&tp->mu);
    int rc = 0;
    if (tp->aborted) rc = -1;
    else if (++tp->arrived == tp->n) {
        tp->arrived = 0;
        tp->gen++;
        atomic_store(&tp->bar_gen, tp->gen);
        pthread_cond_broadcast(&tp->cv);
    } else {
        const unsigned g = tp->gen;
        if (tp->spin_us > 0) { /* poll first (tp.h spin_us): a futex sleep and wake-up per barrier was most of a
                                  small model's cpu tp step (stories260K tg 1,700 tok/s at tp 2 vs 35,000) */
            pthread_mutex_unlock(&tp->mu);
            spin_while_equal(&tp->bar_gen, g, &tp->bar_abort, tp->spin_us);
            pthread_mutex_lock(&tp->mu);
        }
        while (g == tp->gen && !tp->aborted) pthread_cond_wait(&tp->cv, &tp->mu);
        rc = g == tp->gen ? -1 : 0;
    }
    pthread_mutex_unlock(&tp->mu);
    return rc;
}

/* Marks the group failed (first caller's rank kept) and wakes every waiting rank. */
static void abort_group(cmf_tp *tp, int rank) {
    pthread_mutex_lock(&tp->mu);
    if (!tp->aborted) tp->fail_rank = rank;
    tp->aborted = 1;
    atomic_store(&tp->bar_abort, 1);
    pthread_cond_broadcast(&tp->cv);
    pthread_mutex_unlock(&tp->mu);
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* backend.h allreduce of the cpu ranks: each rank sums its 1/n share of the elements over all ranks' buffers in
 * rank order 0..n-1 into tp->sum (the same order for every element, so the result is deterministic and the same
 * on every rank), then every rank copies the sum back. Two barriers: after every buffer is published, after the
 * sum is complete (nobody reads another rank's buffer after that). */
static cmf_status cpu_allreduce(cmf_backend *be, cmf_batch *b, float *buf, int64_t count) {
    (void)be;
    cmf_tp *tp = b->m->tp_of;
    const int r = b->m->tp_rank, n = tp->n;
    const double t0 = r == 0 ? now_s() : 0;
    if ((size_t)count > tp->sum_cap)
        return cmf_err(CMF_E_ARG, "tp: all-reduce of %lld values exceeds %zu", (long long)count, tp->sum_cap);
    tp->bufs[r] = buf;
    if (cmf_tp_barrier(tp)) return cmf_err(CMF_E_IO, "tp: another rank failed");
    const int64_t lo = count * r / n, hi = count * (r + 1) / n;
    for (int64_t i = lo; i < hi; i++) {
        float s = tp->bufs[0][i];
        for (int k = 1; k < n; k++) s += tp->bufs[k][i];
        tp->sum[i] = s;
    }
    if (cmf_tp_barrier(tp)) return cmf_err(CMF_E_IO, "tp: another rank failed");
    memcpy(buf, tp->sum, (size_t)count * sizeof(float));
    if (r == 0) {
        tp->allreduce_s += now_s() - t0;
        tp->allreduce_calls++;
    }
    return CMF_OK;
}

static void cpu_rank_destroy(cmf_backend *be) { free(be); }

/* ---- the group ---------------------------------------------------------------------------------------------- */

static void rank_free(cmf_model *rm) {
    if (!rm) return;
    if (rm->be && rm->be->kind == CMF_BACKEND_CPU && rm->be->unload_weights && rm->base.layers)
        rm->be->unload_weights(rm->be, &rm->base, rm->cfg.n_layers); /* the repacked copies (setup_cpu) */
    if (rm->be) rm->be->destroy(rm->be);
    free(rm->base.layers);
    free(rm);
}

static void stop_workers(cmf_tp *tp);

void cmf_tp_free(cmf_tp *tp) {
    if (!tp) return;
    stop_workers(tp);
    const int dev = saved_device(tp);
    for (int r = 0; r < tp->n; r++) rank_free(tp->rank[r]);
#ifdef CMF_HAVE_NCCL
    if (tp->nccl) cmf_tp_nccl_free(tp->nccl, tp->n);
#endif
    restore_device(dev);
    for (size_t i = 0; i < tp->n_owned; i++) free(tp->owned[i]);
    free(tp->owned);
    free(tp->owned_key);
    free(tp->sum);
    pthread_mutex_destroy(&tp->run_mu);
    pthread_mutex_destroy(&tp->mu);
    pthread_cond_destroy(&tp->cv);
    pthread_mutex_destroy(&tp->job_mu);
    pthread_cond_destroy(&tp->job_cv);
    pthread_cond_destroy(&tp->done_cv);
    free(tp);
}

/* Resolves the backend name: 0 = cpu, 1 = cuda from device *dev0, 2 = auto. */
static cmf_status parse_backend(const char *name, int *kind, int *dev0) {
    if (!name) {
        const char *env = getenv("CMF_GPU");
        name = !env || !*env || !strcmp(env, "0") ? "cpu" : !strcmp(env, "1") ? "cuda" : env;
    }
    *dev0 = 0;
    if (!strcmp(name, "cpu")) *kind = 0;
    else if (!strcmp(name, "auto")) *kind = 2;
    else if (!strncmp(name, "cuda", 4) && (!name[4] || (name[4] == ':' && name[5] >= '0' && name[5] <= '9'))) {
        *kind = 1;
        *dev0 = name[4] ? atoi(name + 5) : 0;
    } else {
        return cmf_err(CMF_E_ARG, "model: backend '%s' is not cpu, cuda, cuda:N or auto", name);
    }
    return CMF_OK;
}

/* Rank r's model: the sliced config and weights (copy_rows as cmf_tp_slice_weights). */
static cmf_status rank_new(cmf_tp *tp, int r, int copy_rows, int threads, cmf_model **out) {
    const cmf_model *m = tp->front;
    cmf_model *rm = calloc(1, sizeof *rm);
    if (!rm) return cmf_err(CMF_E_NOMEM, "tp: out of memory");
    tp->rank[r] = rm;
    *out = rm;
    int q0, kv0;
    cmf_status st = cmf_tp_rank_config(&m->cfg, tp->n, r, tp->v0[r], tp->v0[r + 1], &rm->cfg, &q0, &kv0);
    if (st != CMF_OK) return st;
    rm->file = m->file;
    rm->n_threads = threads;
    rm->cache_type = m->cache_type; /* the KV cache type the caller asked for (cuda ranks) */
    rm->bos_id = m->bos_id;
    rm->rope_inv_freq = m->rope_inv_freq;
    rm->tp_of = tp;
    rm->tp_rank = r;
    return cmf_tp_slice_weights(tp, r, copy_rows, &rm->base);
}

static cmf_status setup_cpu(cmf_tp *tp) {
    const cmf_model *m = tp->front;
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    const int total = m->n_threads > 0 ? m->n_threads : cpus > 0 ? (int)cpus : 1;
    const int per = total / tp->n > 0 ? total / tp->n : 1;
    for (int r = 0; r < tp->n; r++) {
        cmf_model *rm = NULL;
        cmf_status st = rank_new(tp, r, CMF_TP_COPY_UNALIGNED, per, &rm);
        if (st != CMF_OK) return st;
        cmf_backend *be = malloc(sizeof *be);
        if (!be) return cmf_err(CMF_E_NOMEM, "tp: out of memory");
        *be = *cmf_backend_cpu();
        be->allreduce = cpu_allreduce;
        be->destroy = cpu_rank_destroy;
        snprintf(be->desc, sizeof be->desc, "cpu (tp rank %d of %d, %d threads)", r, tp->n, per);
        rm->be = be;
        /* the rank's slices repacked as an unsplit model's weights are (backend_cpu.c load_weights): the repacked
         * kernels sum each row in one order for any number of tokens, so a rank is batch invariant as one model
         * is; without it the slices ran the mapping's kernels, whose decode and GEMM orders differ (the B2 finding
         * of the session-5 review: `serve --tp 2` gave other greedy text under load) */
        if ((st = be->load_weights(be, &rm->base, rm->cfg.n_layers)) != CMF_OK)
            return cmf_err_prefix(st, "tp rank %d: ", r);
    }
    /* poll before sleeping (rank wake-ups, the all-reduce barrier) only when the ranks' threads do not share cores */
    tp->spin_us = (long)tp->n * per <= cpus ? (getenv("CMF_TP_SPIN_US") ? atoi(getenv("CMF_TP_SPIN_US")) : 2000) : 0;
    snprintf(tp->desc, sizeof tp->desc, "tp %d x cpu (%d threads each)", tp->n, per);
    return CMF_OK;
}

static cmf_status setup_cuda(cmf_tp *tp, int dev0) {
#ifdef CMF_HAVE_NCCL
    int devs[CMF_TP_MAX];
    tp->dev0 = dev0;
    for (int r = 0; r < tp->n; r++) devs[r] = dev0 + r;
    for (int r = 0; r < tp->n; r++) {
        cmf_model *rm = NULL;
        cmf_status st = rank_new(tp, r, 1, 1, &rm);
        if (st == CMF_OK) st = cmf_backend_cuda_new(rm, devs[r], &rm->be);
        if (st == CMF_OK) st = rm->be->load_weights(rm->be, &rm->base, rm->cfg.n_layers);
        if (st != CMF_OK) return cmf_err_prefix(st, "tp rank %d (cuda:%d): ", r, devs[r]);
        rm->be->allreduce = cmf_tp_nccl_allreduce; /* captured into the rank's decode graphs (tp_nccl.cu) */
        if (tp->profile) cmf_backend_cuda_set_graphs(rm->be, 0); /* the profile synchronises around each call */
    }
    cmf_status st = cmf_tp_nccl_init(tp->n, devs, (size_t)tp->front->cfg.hidden_size, &tp->nccl);
    if (st != CMF_OK) return st;
    /* a decode step's host gap (the caller's sampling, the next forward's start) is well under 2 ms;
     * CMF_TP_SPIN_US overrides it (0 = sleep at once) */
    tp->spin_us = getenv("CMF_TP_SPIN_US") ? atoi(getenv("CMF_TP_SPIN_US")) : 2000;
    snprintf(tp->desc, sizeof tp->desc, "tp %d x %.140s", tp->n, tp->rank[0]->be->desc);
    return CMF_OK;
#else
    (void)dev0;
    return cmf_err(CMF_E_UNSUPPORTED, "tp: %d cuda ranks need a build with CUDA and NCCL (configure with -DCMF_NCCL=ON "
                                      "and CMF_NCCL_ROOT)",
                   tp->n);
#endif
}

static cmf_status start_workers(cmf_tp *tp);

static void drop_ranks(cmf_tp *tp) {
    for (int r = 0; r < tp->n; r++) {
        rank_free(tp->rank[r]);
        tp->rank[r] = NULL;
    }
    for (size_t i = 0; i < tp->n_owned; i++) free(tp->owned[i]);
    tp->n_owned = 0;
}

cmf_status cmf_tp_setup(cmf_model *m, int n, const char *backend) {
    if (m->dory) return cmf_err(CMF_E_UNSUPPORTED, "tp: looped (Dory) models are not split");
    if (n < 2 || n > CMF_TP_MAX) return cmf_err(CMF_E_UNSUPPORTED, "tp: %d ranks (need 2..%d)", n, CMF_TP_MAX);
    int kind, dev0;
    cmf_status st = parse_backend(backend, &kind, &dev0);
    if (st != CMF_OK) return st;
    cmf_tp *tp = calloc(1, sizeof *tp);
    if (!tp) return cmf_err(CMF_E_NOMEM, "tp: out of memory");
    tp->n = n;
    tp->front = m;
    tp->fail_rank = -1;
    tp->profile = getenv("CMF_TP_PROFILE") && *getenv("CMF_TP_PROFILE") && strcmp(getenv("CMF_TP_PROFILE"), "0");
    /* symmetric windows: on unless CMF_TP_SYMM=0 (cuda ranks; NCCL's symmetric all-reduce kernels, guarded against
     * NCCL 2.28's early start in tp_nccl.cu; 32B shape tp 2 +3.9% on 2 x H200, bench/tp/RESULTS.md session 5) */
    tp->sym = !(getenv("CMF_TP_SYMM") && !strcmp(getenv("CMF_TP_SYMM"), "0"));
    /* the residual folded into the all-reduce (tp.h fold): on unless CMF_TP_FOLD=0 (2 x H200, 32B shape 64 layers q8
     * tp 2 103.6 against 96.8 tok/s, 8B 317.1 against 292.0: bench/tp/RESULTS.md session 6) */
    tp->fold = !(getenv("CMF_TP_FOLD") && !strcmp(getenv("CMF_TP_FOLD"), "0"));
    pthread_mutex_init(&tp->run_mu, NULL);
    pthread_mutex_init(&tp->mu, NULL);
    pthread_cond_init(&tp->cv, NULL);
    pthread_mutex_init(&tp->job_mu, NULL);
    pthread_cond_init(&tp->job_cv, NULL);
    pthread_cond_init(&tp->done_cv, NULL);
    const int V = m->cfg.vocab_size;
    for (int r = 0; r <= n; r++) tp->v0[r] = (int)((int64_t)V * r / n);
    if (kind == 0) {
        st = setup_cpu(tp);
    } else {
#ifdef CMF_HAVE_NCCL
        const int dev = cmf_tp_cuda_get_device();
        st = setup_cuda(tp, dev0);
        restore_device(dev);
#else
        st = setup_cuda(tp, dev0);
#endif
        if (st != CMF_OK && kind == 2) { /* auto: the cpu when cuda is unusable */
            drop_ranks(tp);
            cmf_err_clear();
            st = setup_cpu(tp);
        }
    }
    if (st == CMF_OK) st = start_workers(tp);
    if (st != CMF_OK) {
        cmf_tp_free(tp);
        return st;
    }
    m->tp = tp;
    return CMF_OK;
}

/* Makes rank r's device current on this thread (cuda ranks). */
static cmf_status rank_device(cmf_tp *tp, int r) {
#ifdef CMF_HAVE_NCCL
    if (tp->nccl) return cmf_tp_cuda_set_device(tp->dev0 + r);
#endif
    (void)tp;
    (void)r;
    return CMF_OK;
}

/* The calling thread's current cuda device (-1 for cpu ranks), and putting it back after rank work. */
static int saved_device(const cmf_tp *tp) {
#ifdef CMF_HAVE_NCCL
    if (tp->nccl) return cmf_tp_cuda_get_device();
#endif
    (void)tp;
    return -1;
}
static void restore_device(int dev) {
#ifdef CMF_HAVE_NCCL
    if (dev >= 0) cmf_tp_cuda_set_device(dev);
#endif
    (void)dev;
}

/* ---- batches and sessions ---------------------------------------------------------------------------------- */

/* A symmetric window (tp.h) and the front batch whose rank batches' xb live in it. */
struct cmf_tp_window {
    cmf_batch *b;
    size_t bytes;
    void *ptr[CMF_TP_MAX], *win[CMF_TP_MAX];
    struct cmf_tp_window *next;
};

/* Moves the xb and x of front batch b's rank batches into one new symmetric window (xb at offset 0, x right after
 * it: the same offsets on every rank, as NCCL's symmetric kernels need); on failure they keep their plain buffers,
 * tp->sym is cleared and tp->sym_note keeps the reason (the batch works either way). */
static void attach_window(cmf_tp *tp, cmf_batch *b) {
#ifdef CMF_HAVE_NCCL
    struct cmf_tp_window *w = calloc(1, sizeof *w);
    if (!w) return;
    const size_t half = (size_t)b->n_batch * (size_t)tp->front->cfg.hidden_size * sizeof(float);
    const size_t bytes = 2 * half;
    pthread_mutex_lock(&tp->run_mu); /* a collective on the communicators: not during a forward */
    cmf_status st = cmf_tp_nccl_window(tp, bytes, w->ptr, w->win);
    if (st == CMF_OK) {
        for (int r = 0; r < tp->n; r++) {
            cmf_batch *rb = b->tp_rank[r];
            rank_device(tp, r);
            rb->m->be->buf_free(rb->m->be, rb->xb);
            rb->m->be->buf_free(rb->m->be, rb->x);
            rb->xb = w->ptr[r];
            rb->x = (float *)((uint8_t *)w->ptr[r] + half);
        }
        w->b = b;
        w->bytes = bytes;
        w->next = tp->windows;
        tp->windows = w;
        tp->n_windows++;
        tp->windows_made++;
    } else {
        snprintf(tp->sym_note, sizeof tp->sym_note, "%s", cmf_last_error());
        cmf_err_clear();
        tp->sym = 0;
        free(w);
    }
    pthread_mutex_unlock(&tp->run_mu);
#else
    (void)tp;
    (void)b;
#endif
}

/* Takes front batch b's window (if any) out of the list and out of its rank batches; returns it. */
static struct cmf_tp_window *detach_window(cmf_tp *tp, cmf_batch *b) {
    for (struct cmf_tp_window **pp = &tp->windows; *pp; pp = &(*pp)->next) {
        struct cmf_tp_window *w = *pp;
        if (w->b != b) continue;
        *pp = w->next;
        tp->n_windows--;
        for (int r = 0; r < tp->n; r++) b->tp_rank[r]->xb = b->tp_rank[r]->x = NULL; /* not the backend's */
        return w;
    }
    return NULL;
}

int cmf_tp_in_window(const cmf_tp *tp, int r, const void *p) {
    const uint8_t *q = p;
    for (const struct cmf_tp_window *w = tp->windows; w; w = w->next)
        if (q >= (const uint8_t *)w->ptr[r] && q < (const uint8_t *)w->ptr[r] + w->bytes) return 1;
    return 0;
}

cmf_status cmf_tp_batch_init(cmf_batch *b) {
    cmf_tp *tp = b->m->tp;
    b->tp_rank = calloc((size_t)tp->n, sizeof *b->tp_rank);
    b->pos = malloc((size_t)b->n_batch * sizeof(int));
    b->head_tok = malloc((size_t)b->n_seq * sizeof(int));
    if (!b->tp_rank || !b->pos || !b->head_tok) return cmf_err(CMF_E_NOMEM, "tp: out of memory");
    const int dev = saved_device(tp);
    cmf_status st = CMF_OK;
    for (int r = 0; r < tp->n && st == CMF_OK; r++) {
        st = rank_device(tp, r);
        if (st == CMF_OK) st = cmf_batch_new(tp->rank[r], b->n_batch, b->n_seq, &b->tp_rank[r]);
        if (st != CMF_OK) cmf_err_prefix(st, "tp rank %d: ", r);
    }
    if (st == CMF_OK && tp->nccl && tp->sym) attach_window(tp, b);
    restore_device(dev);
    return st;
}

void cmf_tp_batch_fini(cmf_batch *b) {
    if (!b->tp_rank) return;
    cmf_tp *tp = b->m->tp;
    const int dev = saved_device(tp);
    pthread_mutex_lock(&tp->run_mu); /* the rank threads of a forward read the list (cmf_tp_in_window) */
    struct cmf_tp_window *w = detach_window(tp, b);
    pthread_mutex_unlock(&tp->run_mu);
    for (int r = 0; r < tp->n; r++) {
        rank_device(tp, r);
        cmf_batch_free(b->tp_rank[r]);
    }
#ifdef CMF_HAVE_NCCL
    if (w) {
        pthread_mutex_lock(&tp->run_mu);
        cmf_tp_nccl_window_free(tp, w->ptr, w->win);
        pthread_mutex_unlock(&tp->run_mu);
    }
#endif
    free(w);
    restore_device(dev);
    free(b->tp_rank);
    b->tp_rank = NULL;
}

cmf_status cmf_tp_session_init(cmf_session *s) {
    cmf_tp *tp = s->m->tp;
    if (s->o1) return cmf_err(CMF_E_UNSUPPORTED, "tp: the O(1) far field is not split across ranks (use --o1 off)");
    if (s->mask) return cmf_err(CMF_E_UNSUPPORTED, "tp: task masks are not split across ranks (use --task off)");
    s->tp_rank = calloc((size_t)tp->n, sizeof *s->tp_rank);
    if (!s->tp_rank) return cmf_err(CMF_E_NOMEM, "tp: out of memory");
    cmf_session_params p = {0};
    p.n_ctx = s->n_ctx;
    p.o1 = "off";
    const int dev = saved_device(tp);
    cmf_status st = CMF_OK;
    for (int r = 0; r < tp->n && st == CMF_OK; r++) {
        st = rank_device(tp, r);
        if (st == CMF_OK) st = cmf_session_new_ex(tp->rank[r], &p, &s->tp_rank[r]);
        if (st != CMF_OK) cmf_err_prefix(st, "tp rank %d: ", r);
    }
    restore_device(dev);
    return st;
}

void cmf_tp_session_fini(cmf_session *s) {
    if (!s->tp_rank) return;
    const int dev = saved_device(s->m->tp);
    for (int r = 0; r < s->m->tp->n; r++) {
        rank_device(s->m->tp, r);
        cmf_session_free(s->tp_rank[r]);
    }
    restore_device(dev);
    free(s->tp_rank);
    s->tp_rank = NULL;
}

size_t cmf_tp_session_state_bytes(const cmf_session *s) {
    size_t n = 0;
    for (int r = 0; s->tp_rank && r < s->m->tp->n; r++) n += cmf_session_state_bytes(s->tp_rank[r]);
    return n;
}

/* ---- the forward ---------------------------------------------------------------------------------------------- */

typedef struct {
    cmf_tp *tp;
    int r;
    cmf_batch *b;
    cmf_session **seqs;
    const int32_t *tokens;
    int n;
    float *all_logits;            /* the rank's [n][Vr] when the caller asked for every token's logits */
    cmf_session *const *front;    /* the front sessions of the tokens, and the caller's all_logits [n][V] */
    float *front_all;
    cmf_status st;
    char msg[512];
} rank_job;

/* Rank j->r's forward, then its vocabulary slice of the logits copied into the front sessions (and the caller's
 * all_logits): the gather runs on the rank threads, in parallel. */
static void rank_run(rank_job *j) {
    j->st = cmf_forward(j->b, j->seqs, j->tokens, j->n, j->all_logits);
    if (j->st != CMF_OK) {
        snprintf(j->msg, sizeof j->msg, "%s", cmf_last_error());
        abort_group(j->tp, j->r);
        return;
    }
    const int v0 = j->tp->v0[j->r], Vr = j->tp->v0[j->r + 1] - v0, V = j->tp->front->cfg.vocab_size;
    for (int t = 0; t < j->n; t++) {
        int last = 1; /* each session's logits are those of its last token in the batch */
        for (int u = t + 1; u < j->n && last; u++) last = j->front[u] != j->front[t];
        if (last) memcpy(j->front[t]->logits + v0, j->seqs[t]->logits, (size_t)Vr * sizeof(float));
        if (j->front_all)
            memcpy(j->front_all + (size_t)t * V + v0, j->all_logits + (size_t)t * Vr, (size_t)Vr * sizeof(float));
    }
}

typedef struct {
    cmf_tp *tp;
    int r;
} worker_arg;

/* Polls until *v differs from `old` (or *stop is set), for at most `us` microseconds; the caller then takes the
 * mutex and re-checks under it, sleeping on the condition variable if nothing changed. */
static void spin_while_equal(_Atomic unsigned *v, unsigned old, _Atomic int *stop, int us) {
    const double end = now_s() + 1e-6 * us;
    for (unsigned i = 1; atomic_load(v) == old && !atomic_load(stop); i++)
        if (i % 64 == 0 && now_s() > end) break;
}

/* The thread of rank r >= 1: waits for a new job generation, runs its rank's forward, reports it done; until
 * cmf_tp_free sets quit. A cuda rank's device is made current once here (begin() sets it again per forward). */
static void *worker_main(void *arg) {
    worker_arg a = *(worker_arg *)arg;
    free(arg);
    cmf_tp *tp = a.tp;
    rank_device(tp, a.r);
    pthread_mutex_lock(&tp->job_mu);
    unsigned seen = 0; /* job_gen's value at setup: a forward may bump it before this thread first runs */
    for (;;) {
        if (tp->spin_us > 0 && seen == tp->job_gen && !tp->quit) { /* poll first (tp.h spin_us) */
            pthread_mutex_unlock(&tp->job_mu);
            spin_while_equal(&tp->job_gen, seen, &tp->quit, tp->spin_us);
            pthread_mutex_lock(&tp->job_mu);
        }
        while (seen == tp->job_gen && !tp->quit) pthread_cond_wait(&tp->job_cv, &tp->job_mu);
        if (tp->quit) break;
        seen = tp->job_gen;
        rank_job *j = (rank_job *)tp->jobs + a.r;
        pthread_mutex_unlock(&tp->job_mu);
        rank_run(j);
        pthread_mutex_lock(&tp->job_mu);
        if (++tp->job_done == tp->n_workers) pthread_cond_signal(&tp->done_cv);
    }
    pthread_mutex_unlock(&tp->job_mu);
    return NULL;
}

static cmf_status start_workers(cmf_tp *tp) {
    for (int r = 1; r < tp->n; r++) {
        worker_arg *a = malloc(sizeof *a);
        if (!a) return cmf_err(CMF_E_NOMEM, "tp: out of memory");
        a->tp = tp;
        a->r = r;
        if (pthread_create(&tp->worker[r], NULL, worker_main, a) != 0) {
            free(a);
            return cmf_err(CMF_E_NOMEM, "tp: cannot start the thread of rank %d", r);
        }
        tp->n_workers = r;
    }
    return CMF_OK;
}

static void stop_workers(cmf_tp *tp) {
    pthread_mutex_lock(&tp->job_mu);
    tp->quit = 1;
    pthread_cond_broadcast(&tp->job_cv);
    pthread_mutex_unlock(&tp->job_mu);
    for (int r = 1; r <= tp->n_workers; r++) pthread_join(tp->worker[r], NULL);
    tp->n_workers = 0;
}

cmf_status cmf_tp_forward(cmf_batch *b, cmf_session *const *seqs, const int32_t *tokens, int n, float *all_logits) {
    cmf_tp *tp = b->m->tp;
    const int N = tp->n, D = b->m->cfg.hidden_size;
    rank_job jobs[CMF_TP_MAX];
    memset(jobs, 0, sizeof jobs);
    cmf_status st = CMF_OK;
    pthread_mutex_lock(&tp->run_mu);
    if ((size_t)n * D > tp->sum_cap) {
        float *s = realloc(tp->sum, (size_t)n * D * sizeof(float));
        if (!s) st = cmf_err(CMF_E_NOMEM, "tp: out of memory");
        else tp->sum = s, tp->sum_cap = (size_t)n * D;
    }
    int max_rows = 0; /* attention score scratch per thread: the rows the calls can read (o1 is not split in TP) */
    for (int t = 0; t < n; t++) {
        /* n bounds the session's token count in this call; the rows never exceed its context */
        int rows = cmf_session_attn_rows(seqs[t], n, 0);
        if (rows > seqs[t]->n_ctx) rows = seqs[t]->n_ctx;
        if (rows > max_rows) max_rows = rows;
    }
    for (int r = 0; r < N && st == CMF_OK; r++) {
        rank_job *j = &jobs[r];
        j->tp = tp;
        j->r = r;
        j->b = b->tp_rank[r];
        j->tokens = tokens;
        j->n = n;
        j->front = seqs;
        j->front_all = all_logits;
        j->seqs = malloc((size_t)n * sizeof *j->seqs);
        if (!j->seqs) st = cmf_err(CMF_E_NOMEM, "tp: out of memory");
        const int Vr = tp->v0[r + 1] - tp->v0[r];
        if (st == CMF_OK && all_logits && !(j->all_logits = malloc((size_t)n * Vr * sizeof(float))))
            st = cmf_err(CMF_E_NOMEM, "tp: out of memory");
        for (int t = 0; t < n && st == CMF_OK; t++) {
            j->seqs[t] = seqs[t]->tp_rank[r];
            j->seqs[t]->pos = seqs[t]->pos; /* the rank sessions follow the front (reset / truncate act there) */
        }
        if (st == CMF_OK && j->b->pool) st = cmf_pool_reserve(j->b->pool, (size_t)max_rows * sizeof(float));
    }
    if (st == CMF_OK) {
        tp->aborted = 0;
        atomic_store(&tp->bar_abort, 0);
        tp->arrived = 0;
        tp->fail_rank = -1;
        pthread_mutex_lock(&tp->job_mu); /* wake the rank threads */
        tp->jobs = jobs;
        tp->job_done = 0;
        tp->job_gen++;
        pthread_cond_broadcast(&tp->job_cv);
        pthread_mutex_unlock(&tp->job_mu);
        const int dev = saved_device(tp);
        rank_run(&jobs[0]); /* rank 0 on this thread (a cuda rank makes its device current) */
        restore_device(dev);
        if (tp->spin_us > 0) { /* poll first (tp.h spin_us) */
            const double end = now_s() + 1e-6 * tp->spin_us;
            for (unsigned i = 1; atomic_load(&tp->job_done) < tp->n_workers; i++)
                if (i % 64 == 0 && now_s() > end) break;
        }
        pthread_mutex_lock(&tp->job_mu); /* wait for them */
        while (tp->job_done < tp->n_workers) pthread_cond_wait(&tp->done_cv, &tp->job_mu);
        tp->jobs = NULL;
        pthread_mutex_unlock(&tp->job_mu);
        if (tp->aborted) {
            const int f = tp->fail_rank >= 0 ? tp->fail_rank : 0;
            st = cmf_err(jobs[f].st != CMF_OK ? jobs[f].st : CMF_E_IO, "tp rank %d: %s", f, jobs[f].msg);
        }
    }
    if (st == CMF_OK) /* the logits were gathered by the rank threads (rank_run) */
        for (int t = 0; t < n; t++) seqs[t]->pos++;
    for (int r = 0; r < N; r++) {
        free(jobs[r].seqs);
        free(jobs[r].all_logits);
    }
    pthread_mutex_unlock(&tp->run_mu);
    return st;
}
