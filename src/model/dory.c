/* dory.c — Dory configuration (header.arch, docs/HEADER_KEYS.md "Dory"), weights (DORY.md §1.2 tensor names,
 * kept verbatim by the converter) and per-session state (KV slots of §1.8). The forward pass is dory_forward.c. */
#include "model/dory.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "quant/dtype.h"
#include "util/error.h"

#define TRY(x)                                                                                                   \
    do {                                                                                                         \
        cmf_status st_ = (x);                                                                                    \
        if (st_ != CMF_OK) return st_;                                                                           \
    } while (0)

/* ---- configuration ------------------------------------------------------------------------------------------ */

static cmf_status get_int(const cJSON *o, const char *where, const char *key, int lo, int hi, int *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!cJSON_IsNumber(v)) return cmf_err(CMF_E_FORMAT, "dory: %s.%s is missing or not a number", where, key);
    double d = v->valuedouble;
    if (!(d >= lo && d <= hi) || floor(d) != d)
        return cmf_err(CMF_E_FORMAT, "dory: %s.%s = %g is not an integer in [%d, %d]", where, key, d, lo, hi);
    *out = (int)d;
    return CMF_OK;
}

static cmf_status get_pos_float(const cJSON *o, const char *where, const char *key, float *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!cJSON_IsNumber(v)) return cmf_err(CMF_E_FORMAT, "dory: %s.%s is missing or not a number", where, key);
    double d = v->valuedouble;
    if (!(d > 0 && isfinite(d) && d < 3.0e38))
        return cmf_err(CMF_E_FORMAT, "dory: %s.%s = %g must be finite and > 0", where, key, d);
    *out = (float)d;
    return CMF_OK;
}

cmf_status cmf_dory_config_from_arch(const cJSON *arch, cmf_dory_config *c) {
    memset(c, 0, sizeof *c);
    if (!cJSON_IsObject(arch)) return cmf_err(CMF_E_FORMAT, "dory: header has no arch object");
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(arch, "arch_name");
    if (!cJSON_IsString(name) || strcmp(name->valuestring, "dory") != 0)
        return cmf_err(CMF_E_UNSUPPORTED, "dory: arch.arch_name is not \"dory\"");
    const int BIG = 1 << 30;
    TRY(get_int(arch, "arch", "vocab_size", 1, BIG, &c->vocab_size));
    TRY(get_int(arch, "arch", "hidden_size", 1, 1 << 20, &c->hidden_size));
    TRY(get_int(arch, "arch", "intermediate_size", 1, 1 << 22, &c->intermediate_size));
    TRY(get_int(arch, "arch", "num_layers", 1, CMF_DORY_MAX_LAYERS, &c->n_layers));
    TRY(get_int(arch, "arch", "num_attention_heads", 1, 4096, &c->n_heads));
    TRY(get_int(arch, "arch", "num_kv_heads", 1, 4096, &c->n_kv_heads));
    TRY(get_int(arch, "arch", "head_dim", 2, 1 << 14, &c->head_dim));
    TRY(get_int(arch, "arch", "max_position_embeddings", 1, BIG, &c->max_position_embeddings));
    if (c->n_heads % c->n_kv_heads)
        return cmf_err(CMF_E_FORMAT, "dory: arch.num_attention_heads %d is not a multiple of num_kv_heads %d",
                       c->n_heads, c->n_kv_heads);
    if (c->head_dim % 2) return cmf_err(CMF_E_FORMAT, "dory: arch.head_dim %d is odd (RoPE pairs halves)", c->head_dim);
    const cJSON *tie = cJSON_GetObjectItemCaseSensitive(arch, "tie_word_embeddings");
    if (cJSON_IsTrue(tie)) return cmf_err(CMF_E_FORMAT, "dory: arch.tie_word_embeddings must be false");

    const cJSON *d = cJSON_GetObjectItemCaseSensitive(arch, "dory");
    if (!cJSON_IsObject(d)) return cmf_err(CMF_E_FORMAT, "dory: arch.dory is missing or not an object");
    const char *W = "arch.dory";
    TRY(get_int(d, W, "n_input_layers", 1, CMF_DORY_MAX_LAYERS, &c->n_input));
    TRY(get_int(d, W, "n_recurrent_layers", 1, CMF_DORY_MAX_LAYERS, &c->n_recurrent));
    TRY(get_int(d, W, "n_output_layers", 1, CMF_DORY_MAX_LAYERS, &c->n_output));
    if (c->n_input + c->n_recurrent + c->n_output != c->n_layers)
        return cmf_err(CMF_E_FORMAT, "dory: block sizes %d + %d + %d do not add up to arch.num_layers %d", c->n_input,
                       c->n_recurrent, c->n_output, c->n_layers);
    TRY(get_int(d, W, "n_recurrent_loops", 1, CMF_DORY_MAX_LOOPS, &c->n_loops));
    const cJSON *mode = cJSON_GetObjectItemCaseSensitive(d, "recurrent_kv_cache_mode");
    if (!cJSON_IsString(mode)) return cmf_err(CMF_E_FORMAT, "dory: %s.recurrent_kv_cache_mode is missing", W);
    if (!strcmp(mode->valuestring, "per_loop"))
        c->kv_mode = CMF_DORY_KV_PER_LOOP;
    else if (!strcmp(mode->valuestring, "last_loop"))
        c->kv_mode = CMF_DORY_KV_LAST_LOOP;
    else
        return cmf_err(CMF_E_FORMAT, "dory: %s.recurrent_kv_cache_mode \"%.64s\" is not per_loop or last_loop", W,
                       mode->valuestring);
    const cJSON *pat = cJSON_GetObjectItemCaseSensitive(d, "layer_pattern");
    if (!cJSON_IsString(pat)) return cmf_err(CMF_E_FORMAT, "dory: %s.layer_pattern is missing", W);
    if (strlen(pat->valuestring) != (size_t)c->n_layers)
        return cmf_err(CMF_E_FORMAT, "dory: %s.layer_pattern has %zu characters, arch.num_layers is %d", W,
                       strlen(pat->valuestring), c->n_layers);
    for (int i = 0; i < c->n_layers; i++) {
        char ch = pat->valuestring[i];
        if (ch != 'S' && ch != '*' && ch != '-')
            return cmf_err(CMF_E_FORMAT, "dory: %s.layer_pattern[%d] = '%c' is not S, * or -", W, i, ch);
        c->pattern[i] = ch;
    }
    const cJSON *prof = cJSON_GetObjectItemCaseSensitive(d, "rope_profile_layers");
    if (!cJSON_IsArray(prof) || cJSON_GetArraySize(prof) != c->n_layers)
        return cmf_err(CMF_E_FORMAT, "dory: %s.rope_profile_layers must be an array of %d values", W, c->n_layers);
    for (int i = 0; i < c->n_layers; i++) {
        const cJSON *v = cJSON_GetArrayItem(prof, i);
        if (!cJSON_IsNumber(v) || (v->valuedouble != 1 && v->valuedouble != 2))
            return cmf_err(CMF_E_FORMAT, "dory: %s.rope_profile_layers[%d] must be 1 or 2 (0 = NoPE is not supported)",
                           W, i);
        c->rope_profile[i] = (uint8_t)v->valuedouble;
    }
    TRY(get_pos_float(d, W, "rope_theta", &c->rope_theta));
    TRY(get_pos_float(d, W, "rope_theta_2", &c->rope_theta_2));
    TRY(get_pos_float(d, W, "init_method_std", &c->init_std));
    TRY(get_pos_float(d, W, "ngpt_alpha_init", &c->alpha_init));
    TRY(get_pos_float(d, W, "gate_init", &c->gate_init));
    TRY(get_int(d, W, "swa_window_size", 1, BIG, &c->swa_window));
    const cJSON *rb = cJSON_GetObjectItemCaseSensitive(d, "recon_bias"); /* optional: the Recon probe's bias */
    if (rb) {
        if (!cJSON_IsNumber(rb) || !isfinite(rb->valuedouble))
            return cmf_err(CMF_E_FORMAT, "dory: %s.recon_bias must be a finite number", W);
        c->has_recon = 1;
        c->recon_bias = rb->valuedouble;
    }
    return CMF_OK;
}

/* ---- weights ------------------------------------------------------------------------------------------------ */

typedef struct {
    cmf_dory *d;
    float *cursor;
} loader;

static cmf_status matrix(loader *ld, const char *name, int64_t rows, int64_t cols, cmf_weight *w) {
    const cmf_tensor *t = cmf_file_find(ld->d->file, name);
    if (!t) return cmf_err(CMF_E_FORMAT, "dory: tensor %s is missing", name);
    TRY(cmf_weight_view(t, w));
    if (w->rows != rows || w->cols != cols)
        return cmf_err(CMF_E_FORMAT, "dory: tensor %s has shape [%lld, %lld], expected [%lld, %lld]", name,
                       (long long)w->rows, (long long)w->cols, (long long)rows, (long long)cols);
    return CMF_OK;
}

/* Decodes 1-D tensor `name` of n values into the arena and returns it (the caller rescales it in place). */
static cmf_status vector(loader *ld, const char *name, int64_t n, float **out) {
    const cmf_tensor *t = cmf_file_find(ld->d->file, name);
    if (!t) return cmf_err(CMF_E_FORMAT, "dory: tensor %s is missing", name);
    if (t->ndim != 1 || (int64_t)t->shape[0] != n)
        return cmf_err(CMF_E_FORMAT, "dory: tensor %s must have shape [%lld]", name, (long long)n);
    cmf_status st = cmf_dequant(t->dtype, t->ndim, t->shape, t->data, t->nbytes, ld->cursor);
    if (st != CMF_OK) return cmf_err_prefix(st, "dory: tensor %s: ", name);
    for (int64_t i = 0; i < n; i++)
        if (!isfinite(ld->cursor[i])) return cmf_err(CMF_E_FORMAT, "dory: tensor %s[%lld] is not finite", name, (long long)i);
    *out = ld->cursor;
    ld->cursor += n;
    return CMF_OK;
}

static cmf_status load_layer(loader *ld, int i) {
    cmf_dory *d = ld->d;
    const cmf_dory_config *c = &d->cfg;
    cmf_dory_layer *L = &d->layers[i];
    const int64_t H = c->hidden_size, F = c->intermediate_size, QD = (int64_t)c->n_heads * c->head_dim,
                  KVD = (int64_t)c->n_kv_heads * c->head_dim;
    char n[256];
    float *v;
    L->kind = c->pattern[i];
#define NAME(suffix) (snprintf(n, sizeof n, "backbone.layers.%d.%s", i, suffix), n)
    const float lam = c->alpha_init / c->init_std;
    TRY(vector(ld, NAME(L->kind == '-' ? "mlp_alpha" : "attn_alpha"), H, &v));
    for (int64_t j = 0; j < H; j++) v[j] = fabsf(v[j] * lam);
    L->lambda = v;
    if (L->kind == '-') {
        TRY(matrix(ld, NAME("mixer.gate_proj.weight"), F, H, &L->w_gate));
        TRY(matrix(ld, NAME("mixer.up_proj.weight"), F, H, &L->w_up));
        TRY(matrix(ld, NAME("mixer.down_proj.weight"), H, F, &L->w_down));
        const float sh = sqrtf((float)H);
        TRY(vector(ld, NAME("mixer.suv_gate"), F, &v));
        for (int64_t j = 0; j < F; j++) v[j] *= sh;
        L->suv_gate = v;
        TRY(vector(ld, NAME("mixer.suv_up"), F, &v));
        for (int64_t j = 0; j < F; j++) v[j] *= sh;
        L->suv_up = v;
    } else {
        TRY(matrix(ld, NAME("mixer.q_proj.weight"), QD, H, &L->wq));
        TRY(matrix(ld, NAME("mixer.k_proj.weight"), KVD, H, &L->wk));
        TRY(matrix(ld, NAME("mixer.v_proj.weight"), KVD, H, &L->wv));
        TRY(matrix(ld, NAME("mixer.g_proj.weight"), QD, H, &L->wg));
        TRY(matrix(ld, NAME("mixer.o_proj.weight"), H, QD, &L->wo));
        const float qs = sqrtf((float)c->head_dim) / c->init_std, gs = sqrtf(c->gate_init) / c->init_std;
        TRY(vector(ld, NAME("mixer.sqk"), QD, &v));
        for (int64_t j = 0; j < QD; j++) {
            float t = v[j] * qs;
            v[j] = t * t;
        }
        L->q_scale = v;
        TRY(vector(ld, NAME("mixer.s_gate"), QD, &v));
        for (int64_t j = 0; j < QD; j++) {
            float t = v[j] * gs;
            v[j] = t * t;
        }
        L->g_scale = v;
    }
#undef NAME
    return CMF_OK;
}

static cmf_status build(cmf_dory *d) {
    TRY(cmf_dory_config_from_arch(d->file->header ? cJSON_GetObjectItemCaseSensitive(d->file->header, "arch") : NULL,
                                  &d->cfg));
    const cmf_dory_config *c = &d->cfg;
    const size_t H = (size_t)c->hidden_size, F = (size_t)c->intermediate_size, QD = (size_t)c->n_heads * c->head_dim;
    size_t n = (size_t)c->vocab_size + (size_t)c->head_dim + H;
    for (int i = 0; i < c->n_layers; i++) n += H + (c->pattern[i] == '-' ? 2 * F : 2 * QD);
    d->arena = malloc(n * sizeof(float));
    d->arena_n = n;
    d->layers = calloc((size_t)c->n_layers, sizeof *d->layers);
    if (!d->arena || !d->layers) return cmf_err(CMF_E_NOMEM, "dory: out of memory for %zu scale values", n);
    loader ld = {d, d->arena};
    TRY(matrix(&ld, "backbone.embeddings.weight", c->vocab_size, c->hidden_size, &d->embed));
    for (int i = 0; i < c->n_layers; i++) TRY(load_layer(&ld, i));
    TRY(matrix(&ld, "lm_head.weight", c->vocab_size, c->hidden_size, &d->lm_head));
    float *ls;
    TRY(vector(&ld, "lm_head.logit_scale", c->vocab_size, &ls));
    for (int j = 0; j < c->vocab_size; j++) ls[j] /= c->init_std;
    d->logit_scale = ls;
    /* the optional Recon probe (dory.h): both parts or neither */
    if (c->has_recon) {
        float *w;
        TRY(vector(&ld, "dory_recon.weight", c->hidden_size, &w));
        d->recon_w = w;
    } else if (cmf_file_find(d->file, "dory_recon.weight")) {
        return cmf_err(CMF_E_FORMAT, "dory: tensor dory_recon.weight is present but arch.dory.recon_bias is not");
    }
    /* NeoX RoPE frequencies θ^(-2j/hd) over the whole head (§1.5 step 2), one table per profile */
    d->inv_freq = ld.cursor;
    const int half = c->head_dim / 2;
    for (int p = 0; p < 2; p++) {
        double theta = p == 0 ? c->rope_theta : c->rope_theta_2;
        for (int j = 0; j < half; j++) d->inv_freq[p * half + j] = (float)pow(theta, -2.0 * j / c->head_dim);
    }
    return CMF_OK;
}

cmf_status cmf_dory_load(const cmf_file *f, int n_threads, cmf_dory **out) {
    *out = NULL;
    if (!f) return cmf_err(CMF_E_ARG, "cmf_dory_load: NULL file");
    cmf_dory *d = calloc(1, sizeof *d);
    if (!d) return cmf_err(CMF_E_NOMEM, "dory: out of memory");
    d->file = f;
    d->n_threads = n_threads;
    d->ops = cmf_dory_ops_cpu();
    cmf_status st = build(d);
    if (st != CMF_OK) {
        cmf_dory_free(d);
        return st;
    }
    *out = d;
    return CMF_OK;
}

void cmf_dory_free(cmf_dory *d) {
    if (!d) return;
    if (d->ops && d->ops->destroy) d->ops->destroy(d); /* resident weights first */
    free(d->arena);
    free(d->layers);
    free(d);
}

cmf_status cmf_dory_use_backend(cmf_dory *d, const char *name) {
    if (!d || !name) return cmf_err(CMF_E_ARG, "cmf_dory_use_backend: NULL argument");
    int dev = 0, optional = 0;
    if (!strcmp(name, "cpu")) {
        if (d->ops != cmf_dory_ops_cpu())
            return cmf_err(CMF_E_ARG, "dory: the model is on %s; load it again for the cpu", d->ops->name);
        return CMF_OK;
    }
    if (!strcmp(name, "auto")) optional = 1;
    else if (!strncmp(name, "cuda", 4) && (!name[4] || (name[4] == ':' && name[5] >= '0' && name[5] <= '9')))
        dev = name[4] ? atoi(name + 5) : 0;
    else return cmf_err(CMF_E_ARG, "dory: backend '%s' is not cpu, cuda, cuda:N or auto", name);
    if (d->ops != cmf_dory_ops_cpu()) return CMF_OK; /* already on the device */
#ifdef CMF_HAVE_CUDA
    cmf_status st = cmf_dory_cuda_attach(d, dev);
#else
    (void)dev;
    cmf_status st = cmf_err(CMF_E_UNSUPPORTED, "dory: backend cuda: this build has no CUDA backend (configure with "
                                               "-DCMF_CUDA=ON)");
#endif
    if (st != CMF_OK && optional) { /* "auto": the CPU when CUDA is unusable */
        cmf_err_clear();
        return CMF_OK;
    }
    return st;
}

const char *cmf_dory_backend(const cmf_dory *d) { return d->ops->name; }

/* ---- session state ------------------------------------------------------------------------------------------ */

static int is_recurrent(const cmf_dory_config *c, int i) { return i >= c->n_input && i < c->n_input + c->n_recurrent; }

cmf_status cmf_dory_state_new(const cmf_dory *d, int n_ctx, int n_batch, int kv_mode, int max_loops,
                              cmf_dory_state **out) {
    *out = NULL;
    const cmf_dory_config *c = &d->cfg;
    if (n_ctx <= 0) n_ctx = c->max_position_embeddings;
    if (n_ctx > (1 << 24)) return cmf_err(CMF_E_ARG, "dory session: context %d is too large", n_ctx);
    if (n_batch <= 0) n_batch = 256;
    if (n_batch > n_ctx) n_batch = n_ctx;
    if (kv_mode < 0) kv_mode = (int)c->kv_mode;
    if (kv_mode != CMF_DORY_KV_PER_LOOP && kv_mode != CMF_DORY_KV_LAST_LOOP)
        return cmf_err(CMF_E_ARG, "dory session: unknown KV mode %d", kv_mode);
    if (max_loops == 0) max_loops = kv_mode == CMF_DORY_KV_LAST_LOOP ? CMF_DORY_MAX_LOOPS : c->n_loops;
    if (max_loops < 1 || max_loops > CMF_DORY_MAX_LOOPS)
        return cmf_err(CMF_E_ARG, "dory session: max_loops %d is outside 1..%d", max_loops, CMF_DORY_MAX_LOOPS);
    cmf_dory_state *s = calloc(1, sizeof *s);
    if (!s) return cmf_err(CMF_E_NOMEM, "dory session: out of memory");
    s->d = d;
    s->ops = d->ops;
    s->kv_mode = (cmf_dory_kv_mode)kv_mode;
    s->n_ctx = n_ctx;
    s->n_batch = n_batch;
    s->max_loops = max_loops;
    s->track_window = 64; /* the Conf gate's exit-rate tracker defaults (dory.h) */
    s->track_min_rate = 1.0 / 16;
    s->track_pause = 256;
    s->slot = malloc((size_t)c->n_layers * sizeof *s->slot);
    cmf_status st = s->slot ? CMF_OK : cmf_err(CMF_E_NOMEM, "dory session: out of memory");
    int n_slots = 0;
    for (int i = 0; st == CMF_OK && i < c->n_layers; i++) {
        s->slot[i] = -1;
        if (c->pattern[i] == '-') continue;
        s->slot[i] = n_slots;
        n_slots += is_recurrent(c, i) && kv_mode == CMF_DORY_KV_PER_LOOP ? max_loops : 1;
    }
    const size_t KVD = (size_t)c->n_kv_heads * c->head_dim, H = (size_t)c->hidden_size,
                 QD = (size_t)c->n_heads * c->head_dim, F = (size_t)c->intermediate_size, B = (size_t)n_batch;
    if (st == CMF_OK) {
        s->n_slots = n_slots;
        s->kv = calloc((size_t)n_slots, sizeof *s->kv);
        if (!s->kv) st = cmf_err(CMF_E_NOMEM, "dory session: out of memory");
    }
    size_t total = 0;
    for (int i = 0; st == CMF_OK && i < c->n_layers; i++) {
        if (s->slot[i] < 0) continue;
        int per = is_recurrent(c, i) && kv_mode == CMF_DORY_KV_PER_LOOP ? max_loops : 1;
        int ring = c->pattern[i] == 'S' && (int64_t)c->swa_window + n_batch < n_ctx;
        int rows = ring ? c->swa_window + n_batch : n_ctx;
        for (int j = 0; j < per && st == CMF_OK; j++) {
            cmf_dory_kv *kv = &s->kv[s->slot[i] + j];
            kv->rows = rows;
            kv->ring = ring;
            total += 2 * (size_t)rows * KVD * sizeof(float);
            st = s->ops->buf_alloc(s, (size_t)rows * KVD, &kv->k);
            if (st == CMF_OK) st = s->ops->buf_alloc(s, (size_t)rows * KVD, &kv->v);
            if (st != CMF_OK)
                cmf_err_prefix(st, "dory session: the KV cache (%.1f MiB so far): ", total / 1048576.0);
        }
    }
    if (st == CMF_OK) {
        size_t wide = QD > H ? QD : H;
        struct {
            float **p;
            size_t n;
        } bufs[] = {{&s->x, B * H},    {&s->inp, B * H},  {&s->state, B * H}, {&s->xr, B * wide},
                    {&s->q, B * QD},   {&s->k, B * KVD},  {&s->v, B * KVD},   {&s->g, B * QD},
                    {&s->att, B * QD}, {&s->hb, B * F},   {&s->hb2, B * F}};
        for (size_t i = 0; i < sizeof bufs / sizeof *bufs && st == CMF_OK; i++) st = s->ops->buf_alloc(s, bufs[i].n, bufs[i].p);
        if (st != CMF_OK) cmf_err_prefix(st, "dory session: activations of %d tokens: ", n_batch);
        s->logits = calloc((size_t)c->vocab_size, sizeof(float));
        s->h_host = calloc(H, sizeof(float));
        if (st == CMF_OK && (!s->logits || !s->h_host))
            st = cmf_err(CMF_E_NOMEM, "dory session: out of memory for the logits");
    }
    if (st == CMF_OK && s->ops->state_init) st = s->ops->state_init(s);
    const int on_cpu = s->ops == cmf_dory_ops_cpu(); /* the thread pool and its scratch serve the cpu ops only */
    if (st == CMF_OK && on_cpu) st = cmf_pool_new(d->n_threads, &s->pool);
    if (st == CMF_OK && on_cpu) {
        size_t widest = H > QD ? H : QD;
        if (F > widest) widest = F;
        if ((size_t)n_ctx > widest) widest = (size_t)n_ctx;
        st = cmf_pool_reserve(s->pool, widest * sizeof(float));
    }
    if (st != CMF_OK) {
        cmf_dory_state_free(s);
        return st;
    }
    *out = s;
    return CMF_OK;
}

void cmf_dory_state_free(cmf_dory_state *s) {
    if (!s) return;
    cmf_pool_free(s->pool);
    if (s->ops->state_free) s->ops->state_free(s);
    for (int i = 0; s->kv && i < s->n_slots; i++) {
        s->ops->buf_free(s, s->kv[i].k);
        s->ops->buf_free(s, s->kv[i].v);
    }
    free(s->kv);
    free(s->slot);
    float *bufs[] = {s->x, s->inp, s->state, s->xr, s->q, s->k, s->v, s->g, s->att, s->hb, s->hb2};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) s->ops->buf_free(s, bufs[i]);
    free(s->logits);
    free(s->h_host);
    cmf_dory_o1_free(s->o1);
    free(s);
}

void cmf_dory_state_reset(cmf_dory_state *s) {
    cmf_dory_o1_reset(s->o1);
    s->pos = 0;
    s->loops_used = 0;
    s->gate_tokens = s->gate_one_pass = s->gate_probed = 0;
    s->track_probes = s->track_exits = s->pause_left = 0;
}

cmf_status cmf_dory_gate_tracker(cmf_dory_state *s, int window, double min_rate, int pause) {
    if (!s) return cmf_err(CMF_E_ARG, "cmf_dory_gate_tracker: NULL state");
    if (window < 0 || pause < 0 || !(min_rate >= 0 && min_rate <= 1))
        return cmf_err(CMF_E_ARG, "dory gate tracker: window %d and pause %d must be >= 0, min_rate %g in [0, 1]",
                       window, pause, min_rate);
    s->track_window = window;
    s->track_min_rate = min_rate;
    s->track_pause = pause;
    s->track_probes = s->track_exits = s->pause_left = 0;
    return CMF_OK;
}

long cmf_dory_gate_probed(const cmf_dory_state *s) { return s ? s->gate_probed : 0; }

const float *cmf_dory_logits(const cmf_dory_state *s) { return s->logits; }

double cmf_dory_gate_one_pass_share(const cmf_dory_state *s, long *n_tokens) {
    if (n_tokens) *n_tokens = s->gate_tokens;
    return s->gate_tokens ? (double)s->gate_one_pass / (double)s->gate_tokens : 0.0;
}
