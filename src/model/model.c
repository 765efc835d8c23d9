/* model.c — building a model from a CMF file (weights as views into the mapping, §5.1 names and shape checks)
 * and the session API: KV cache and activations allocated once, prefill in batches, decode. */
#include "model/model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/dory.h"
#include "skills/skills.h"
#include "quant/dtype.h"
#include "tp/tp.h"
#include "util/error.h"

/* ---- weights ------------------------------------------------------------------------------------------------ */

typedef struct {
    cmf_model *m;
    cmf_weights *w;      /* the set being built */
    float *small_cursor; /* next free float in w->small */
} loader;

/* Presence (and the backbone tensor) by backbone name. */
static const cmf_tensor *find(const cmf_model *m, const char *name) { return cmf_file_find(m->file, name); }

/* The tensor to use for backbone name `name` in the set being built: `skill.<id>.<name>` when the file has it
 * (a replacement, never an addition: the caller checked the backbone name first), else the backbone's. */
static const cmf_tensor *pick(const loader *ld, const char *name) {
    if (ld->w->skill[0]) {
        char full[512];
        int k = snprintf(full, sizeof full, "skill.%s.%s", ld->w->skill, name);
        const cmf_tensor *t = k > 0 && (size_t)k < sizeof full ? cmf_file_find(ld->m->file, full) : NULL;
        if (t) return t;
    }
    return find(ld->m, name);
}

/* A 2-D weight that must exist with shape [rows, cols] (rows/cols < 0: not checked). */
static cmf_status need_matrix(loader *ld, const char *name, int64_t rows, int64_t cols, cmf_weight *w) {
    const cmf_tensor *t = find(ld->m, name) ? pick(ld, name) : NULL;
    if (!t) return cmf_err(CMF_E_FORMAT, "model: tensor %s is missing", name);
    cmf_status st = cmf_weight_view(t, w);
    if (st != CMF_OK) return st;
    if ((rows >= 0 && w->rows != rows) || (cols >= 0 && w->cols != cols))
        return cmf_err(CMF_E_FORMAT, "model: tensor %s has shape [%lld, %lld], expected [%lld, %lld]", name,
                       (long long)w->rows, (long long)w->cols, (long long)rows, (long long)cols);
    return CMF_OK;
}

/* A 1-D tensor of n values decoded to f32 into the model's small-tensor arena; *out = NULL when absent and
 * optional. */
static cmf_status vec(loader *ld, const char *name, int64_t n, int required, const float **out) {
    *out = NULL;
    const cmf_tensor *t = find(ld->m, name) ? pick(ld, name) : NULL;
    if (!t) return required ? cmf_err(CMF_E_FORMAT, "model: tensor %s is missing", name) : CMF_OK;
    /* the arena holds the 1-D tensors only (small_floats): a 2-D tensor of n values would overrun it */
    if (t->ndim > 1)
        return cmf_err(CMF_E_FORMAT, "model: tensor %s has %u dimensions, expected 1 (%lld values)", name,
                       (unsigned)t->ndim, (long long)n);
    if (cmf_tensor_numel(t) != (uint64_t)n)
        return cmf_err(CMF_E_FORMAT, "model: tensor %s has %llu values, expected %lld", name,
                       (unsigned long long)cmf_tensor_numel(t), (long long)n);
    cmf_status st = cmf_dequant(t->dtype, t->ndim, t->shape, t->data, t->nbytes, ld->small_cursor);
    if (st != CMF_OK) return cmf_err_prefix(st, "model: tensor %s: ", name);
    *out = ld->small_cursor;
    ld->small_cursor += n;
    return CMF_OK;
}

#define TRY(x)                                                                                                   \
    do {                                                                                                         \
        cmf_status st_ = (x);                                                                                    \
        if (st_ != CMF_OK) return st_;                                                                           \
    } while (0)

static cmf_status load_layer(loader *ld, int l) {
    cmf_model *m = ld->m;
    const cmf_config *c = &m->cfg;
    cmf_layer *L = &ld->w->layers[l];
    const int D = c->hidden_size, HD = c->head_dim, QD = c->n_heads * HD, KVD = c->n_kv_heads * HD;
    char name[256];
#define NAME(suffix) (snprintf(name, sizeof name, "model.layers.%d.%s", l, suffix), name)

    TRY(vec(ld, NAME("input_layernorm.weight"), D, 1, &L->attn_norm));
    if (find(m, NAME("self_attn.qkv_proj.weight"))) { /* Phi-3: rows [q; k; v] */
        cmf_weight qkv;
        TRY(need_matrix(ld, name, QD + 2 * KVD, D, &qkv));
        L->wq = cmf_weight_rows(&qkv, 0, QD);
        L->wk = cmf_weight_rows(&qkv, QD, KVD);
        L->wv = cmf_weight_rows(&qkv, QD + KVD, KVD);
    } else {
        TRY(need_matrix(ld, NAME("self_attn.q_proj.weight"), QD, D, &L->wq));
        TRY(need_matrix(ld, NAME("self_attn.k_proj.weight"), KVD, D, &L->wk));
        TRY(need_matrix(ld, NAME("self_attn.v_proj.weight"), KVD, D, &L->wv));
    }
    TRY(need_matrix(ld, NAME("self_attn.o_proj.weight"), D, QD, &L->wo));
    /* Biases are used only when all three exist (§5.1). */
    if (find(m, NAME("self_attn.q_proj.bias")) && find(m, NAME("self_attn.k_proj.bias")) &&
        find(m, NAME("self_attn.v_proj.bias"))) {
        TRY(vec(ld, NAME("self_attn.q_proj.bias"), QD, 1, &L->bq));
        TRY(vec(ld, NAME("self_attn.k_proj.bias"), KVD, 1, &L->bk));
        TRY(vec(ld, NAME("self_attn.v_proj.bias"), KVD, 1, &L->bv));
    }
    TRY(vec(ld, NAME("self_attn.q_norm.weight"), HD, 0, &L->q_norm));
    TRY(vec(ld, NAME("self_attn.k_norm.weight"), HD, 0, &L->k_norm));
    if ((L->q_norm == NULL) != (L->k_norm == NULL))
        return cmf_err(CMF_E_FORMAT, "model: layer %d has only one of q_norm/k_norm", l);

    if (find(m, NAME("pre_feedforward_layernorm.weight"))) { /* Gemma sandwich norms */
        TRY(vec(ld, name, D, 1, &L->ffn_norm));
        TRY(vec(ld, NAME("post_attention_layernorm.weight"), D, 1, &L->post_attn_norm));
        TRY(vec(ld, NAME("post_feedforward_layernorm.weight"), D, 1, &L->post_ffn_norm));
    } else {
        TRY(vec(ld, NAME("post_attention_layernorm.weight"), D, 1, &L->ffn_norm));
    }

    int64_t F = -1;
    if (find(m, NAME("mlp.gate_up_proj.weight"))) { /* Phi-3: rows [gate; up] */
        cmf_weight gu;
        TRY(need_matrix(ld, name, -1, D, &gu));
        if (gu.rows % 2) return cmf_err(CMF_E_FORMAT, "model: %s has an odd number of rows", name);
        F = gu.rows / 2;
        L->w_gate = cmf_weight_rows(&gu, 0, F);
        L->w_up = cmf_weight_rows(&gu, F, F);
    } else {
        TRY(need_matrix(ld, NAME("mlp.gate_proj.weight"), -1, D, &L->w_gate));
        F = L->w_gate.rows;
        TRY(need_matrix(ld, NAME("mlp.up_proj.weight"), F, D, &L->w_up));
    }
    if (F != c->intermediate_size)
        return cmf_err(CMF_E_FORMAT, "model: layer %d FFN width %lld differs from intermediate_size %d", l,
                       (long long)F, c->intermediate_size);
    TRY(need_matrix(ld, NAME("mlp.down_proj.weight"), D, F, &L->w_down));
#undef NAME
    return CMF_OK;
}

/* Counts the floats needed for every 1-D tensor the loader decodes (an upper bound: all 1-D tensors). */
static size_t small_floats(const cmf_file *f) {
    size_t n = 0;
    for (size_t i = 0; i < f->n_tensors; i++)
        if (f->tensors[i].ndim <= 1) n += cmf_tensor_numel(&f->tensors[i]);
    return n;
}

static cmf_status load_tokenizer_config(cmf_model *m) {
    m->bos_id = -1;
    const cJSON *tc = cJSON_GetObjectItemCaseSensitive(m->file->header, "tokenizer_config");
    if (!cJSON_IsObject(tc)) return CMF_OK;
    const cJSON *eos = cJSON_GetObjectItemCaseSensitive(tc, "eos_token_ids");
    if (cJSON_IsArray(eos)) {
        int n = cJSON_GetArraySize(eos);
        m->eos_ids = calloc((size_t)n + 1, sizeof *m->eos_ids);
        if (!m->eos_ids) return cmf_err(CMF_E_NOMEM, "model: out of memory");
        for (int i = 0; i < n; i++) {
            const cJSON *e = cJSON_GetArrayItem(eos, i);
            if (!cJSON_IsNumber(e) || e->valuedouble < 0 || e->valuedouble >= m->cfg.vocab_size) continue;
            m->eos_ids[m->n_eos++] = (int32_t)e->valuedouble;
        }
    }
    const cJSON *bos = cJSON_GetObjectItemCaseSensitive(tc, "bos_token_id");
    if (cJSON_IsNumber(bos) && bos->valuedouble >= 0 && bos->valuedouble < m->cfg.vocab_size)
        m->bos_id = (int32_t)bos->valuedouble;
    return CMF_OK;
}

/* The tokenizer from the vocab section; a failure is kept as a message (the model still runs from ids). */
static cmf_status load_tokenizer(cmf_model *m) {
    const cmf_file *f = m->file;
    if (f->vocab) {
        cmf_status st = cmf_tokenizer_load((const char *)f->vocab, f->env.vocab_len, &m->tokenizer);
        if (st != CMF_OK) {
            /* The model still runs from token ids; text needs the tokenizer. Keep the reason. */
            const char *why = cmf_last_error();
            m->tokenizer_error = malloc(strlen(why) + 1);
            if (m->tokenizer_error) strcpy(m->tokenizer_error, why);
            m->tokenizer = NULL;
        }
    }
    return CMF_OK;
}

/* Builds weight set w (w->skill already set) from the file. */
static cmf_status build_weights(cmf_model *m, cmf_weights *w) {
    const cmf_config *c = &m->cfg;
    loader ld = {m, w, NULL};
    w->small = malloc((small_floats(m->file) + 1) * sizeof(float));
    w->layers = calloc((size_t)c->n_layers, sizeof *w->layers);
    if (!w->small || !w->layers) return cmf_err(CMF_E_NOMEM, "model: out of memory");
    ld.small_cursor = w->small;
    TRY(need_matrix(&ld, "model.embed_tokens.weight", c->vocab_size, c->hidden_size, &w->embed));
    for (int l = 0; l < c->n_layers; l++) TRY(load_layer(&ld, l));
    TRY(vec(&ld, "model.norm.weight", c->hidden_size, 1, &w->final_norm));
    w->n_small = (size_t)(ld.small_cursor - w->small);
    if (find(m, "lm_head.weight")) {
        TRY(need_matrix(&ld, "lm_head.weight", c->vocab_size, c->hidden_size, &w->lm_head));
    } else if (c->tie_word_embeddings) {
        w->lm_head = w->embed;
    } else {
        return cmf_err(CMF_E_FORMAT, "model: lm_head.weight is missing and tie_word_embeddings is false");
    }
    return CMF_OK;
}

static void free_weights(cmf_weights *w) {
    free(w->layers);
    free(w->small);
}

cmf_status cmf_model_check_file(const cmf_file *f) {
    if (!f) return cmf_err(CMF_E_ARG, "cmf_model_check_file: NULL file");
    if (f->env.features & CMF_FEAT_SKILL_FILE) return CMF_OK; /* a skill file is checked against its base */
    const cJSON *an = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(f->header, "arch"), "arch_name");
    if (cJSON_IsString(an) && !strcmp(an->valuestring, "dory")) return CMF_OK; /* dory.c has its own loader */
    cmf_model m;
    memset(&m, 0, sizeof m);
    m.file = (cmf_file *)f; /* build_weights only reads the file */
    cmf_weights w;
    memset(&w, 0, sizeof w);
    cmf_status st = cmf_config_from_header(f->header, &m.cfg); /* (it refuses a q/k/v row count past 2^30) */
    if (st == CMF_OK) st = build_weights(&m, &w);
    free_weights(&w);
    cmf_config_free(&m.cfg);
    return st;
}

static cmf_status build(cmf_model *m) {
    const cmf_file *f = m->file;
    if (f->env.features & CMF_FEAT_SKILL_FILE)
        return cmf_err(CMF_E_UNSUPPORTED, "model: this is a standalone skill file (SKILL_FILE bit); apply it to its "
                                          "base model first");
    const cJSON *an = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(f->header, "arch"), "arch_name");
    if (cJSON_IsString(an) && !strcmp(an->valuestring, "dory")) { /* the looped nGPT: its own forward (dory.c) */
        TRY(cmf_dory_load(f, m->n_threads, &m->dory));
        snprintf(m->cfg.arch_name, sizeof m->cfg.arch_name, "dory");
        m->cfg.vocab_size = m->dory->cfg.vocab_size;
        m->cfg.max_position_embeddings = m->dory->cfg.max_position_embeddings;
        TRY(load_tokenizer_config(m));
        return load_tokenizer(m);
    }
    TRY(cmf_config_from_header(f->header, &m->cfg));
    const cmf_config *c = &m->cfg;
    TRY(build_weights(m, &m->base));
    TRY(load_tokenizer_config(m));
    if (f->masks) {
        cmf_status st = cmf_masks_load(f, &m->masks);
        if (st != CMF_OK) return cmf_err_prefix(st, "model: task masks: ");
        if (m->masks->n && (m->masks->n_loops != 1 || m->masks->n_layers != (uint32_t)c->n_layers ||
                            m->masks->n_heads != (uint32_t)c->n_heads ||
                            m->masks->intermediate_size != (uint32_t)c->intermediate_size))
            return cmf_err(CMF_E_UNSUPPORTED, "model: task masks of another geometry than the model's");
    }
    m->rope_inv_freq = malloc((size_t)c->rot_dim * sizeof(float));
    if (!m->rope_inv_freq) return cmf_err(CMF_E_NOMEM, "model: out of memory");
    cmf_rope_inv_freq(c, c->rope_theta, 1, m->rope_inv_freq);
    cmf_rope_inv_freq(c, c->rope_local_theta, !c->local_rope_unscaled, m->rope_inv_freq + c->rot_dim / 2);
    return load_tokenizer(m);
}

/* Whether skill `id` exists: a header.skills record with that id, or any tensor named skill.<id>.* (§3.1). */
static int skill_known(const cmf_model *m, const char *id) {
    const cJSON *sk = cJSON_GetObjectItemCaseSensitive(m->file->header, "skills");
    const cJSON *r;
    cJSON_ArrayForEach(r, sk) {
        const cJSON *rid = cJSON_GetObjectItemCaseSensitive(r, "id");
        if (cJSON_IsString(rid) && !strcmp(rid->valuestring, id)) return 1;
    }
    char prefix[128];
    int k = snprintf(prefix, sizeof prefix, "skill.%s.", id);
    for (size_t i = 0; k > 0 && i < m->file->n_tensors; i++)
        if (!strncmp(m->file->tensors[i].name, prefix, (size_t)k)) return 1;
    return 0;
}

/* The weight set of skill `id` ("" or "none" = backbone), built on first use. Thread-safe. */
static cmf_status weights_for(cmf_model *m, const char *id, const cmf_weights **out) {
    if (!id || !strcmp(id, "none")) {
        *out = &m->base;
        return CMF_OK;
    }
    if (!cmf_skill_id_valid(id))
        return cmf_err(CMF_E_ARG, "skill id '%.64s' is not of [A-Za-z0-9_-]{1,63} (\"none\" = the backbone)", id);
    pthread_mutex_lock(&m->skill_mu);
    cmf_status st = CMF_OK;
    *out = NULL;
    for (int i = 0; i < m->n_skill_sets && !*out; i++)
        if (!strcmp(m->skill_sets[i]->skill, id)) *out = m->skill_sets[i];
    if (!*out) {
        cmf_weights *w = NULL;
        if (!skill_known(m, id)) st = cmf_err(CMF_E_NOT_FOUND, "skill '%s' is not in this file", id);
        else if (m->n_skill_sets >= CMF_MAX_SKILL_SETS)
            st = cmf_err(CMF_E_UNSUPPORTED, "more than %d skills used at once", CMF_MAX_SKILL_SETS);
        else if (!(w = calloc(1, sizeof *w))) st = cmf_err(CMF_E_NOMEM, "model: out of memory");
        if (st == CMF_OK) {
            snprintf(w->skill, sizeof w->skill, "%s", id);
            st = build_weights(m, w);
            if (st == CMF_OK) st = m->be->load_weights(m->be, w, m->cfg.n_layers);
            if (st == CMF_OK) m->skill_sets[m->n_skill_sets++] = w;
            else {
                cmf_err_prefix(st, "skill %s: ", id);
                free_weights(w);
                free(w);
            }
        }
        if (st == CMF_OK) *out = w;
    }
    pthread_mutex_unlock(&m->skill_mu);
    return st;
}

cmf_status cmf_session_set_skill(cmf_session *s, const char *skill) {
    if (!s) return cmf_err(CMF_E_ARG, "cmf_session_set_skill: NULL session");
    if (s->m->tp && skill && strcmp(skill, "none"))
        return cmf_err(CMF_E_UNSUPPORTED, "tp: skills are not split across ranks (load without --tp)");
    const cmf_weights *w = NULL;
    cmf_status st = weights_for(s->m, skill, &w);
    if (st == CMF_OK) s->w = w;
    return st;
}

const char *cmf_session_skill(const cmf_session *s) { return s ? s->w->skill : NULL; }

/* Puts m on the backend named `name` (NULL: from CMF_GPU) and makes the backbone resident there. */
static cmf_status choose_backend(cmf_model *m, const char *name) {
    m->be = cmf_backend_cpu();
    if (!name) {
        const char *env = getenv("CMF_GPU");
        name = !env || !*env || !strcmp(env, "0") ? "cpu" : !strcmp(env, "1") ? "cuda" : env; /* or a name */
    }
    int dev = 0, optional = 0;
    if (!strcmp(name, "cpu")) return m->dory ? CMF_OK : m->be->load_weights(m->be, &m->base, m->cfg.n_layers);
    if (!strcmp(name, "auto")) optional = 1;
    else if (!strncmp(name, "cuda", 4) && (!name[4] || (name[4] == ':' && name[5] >= '0' && name[5] <= '9')))
        dev = name[4] ? atoi(name + 5) : 0;
    else return cmf_err(CMF_E_ARG, "model: backend '%s' is not cpu, cuda, cuda:N or auto", name);
    cmf_status st;
    if (m->dory) /* its own op table (backend/dory_ops.h); "auto" falls back to the cpu there */
        return cmf_dory_use_backend(m->dory, optional ? "auto" : name);
    cmf_backend *be = NULL;
#ifdef CMF_HAVE_CUDA
    st = cmf_backend_cuda_new(m, dev, &be);
#else
    (void)dev;
    st = cmf_err(CMF_E_UNSUPPORTED, "model: backend cuda: this build has no CUDA backend (configure with -DCMF_CUDA=ON)");
#endif
    if (st == CMF_OK) {
        m->be = be;
        st = be->load_weights(be, &m->base, m->cfg.n_layers);
        if (st == CMF_OK) return CMF_OK;
        cmf_err_prefix(st, "cuda: ");
        be->destroy(be);
        m->be = cmf_backend_cpu();
    }
    if (optional) { /* "auto": the CPU when CUDA is unusable */
        cmf_err_clear();
        return m->be->load_weights(m->be, &m->base, m->cfg.n_layers);
    }
    return st;
}

/* The caller's cmf_model_params: every field inside its documented range (cmf.h), else CMF_E_ARG naming it. */
static cmf_status check_params(const cmf_model_params *p) {
    if (!p) return CMF_OK;
    if (p->n_threads < 0 || p->n_threads > 4096)
        return cmf_err(CMF_E_ARG, "model params: n_threads = %d is outside [0, 4096] (0 = every online CPU)",
                       p->n_threads);
    if (p->tp < 0 || p->tp > 64)
        return cmf_err(CMF_E_ARG, "model params: tp = %d is outside [0, 64] (0 = CMF_TP, 1 = not split)", p->tp);
    if (p->cache_type != CMF_CACHE_DEFAULT && p->cache_type != CMF_CACHE_F16 && p->cache_type != CMF_CACHE_F32)
        return cmf_err(CMF_E_ARG, "model params: cache_type = %d is not a cmf_cache_type (0 default, 1 f16, 2 f32)",
                       p->cache_type);
    return CMF_OK;
}

cmf_status cmf_model_load_on(const char *path, const cmf_model_params *params, const char *backend,
                             cmf_model **out) {
    if (!out) return cmf_err(CMF_E_ARG, "cmf_model_load: NULL output pointer");
    *out = NULL;
    if (!path) return cmf_err(CMF_E_ARG, "cmf_model_load: NULL path");
    cmf_status pst = check_params(params);
    if (pst != CMF_OK) return pst;
    cmf_model *m = calloc(1, sizeof *m);
    if (!m) return cmf_err(CMF_E_NOMEM, "model: out of memory");
    pthread_mutex_init(&m->skill_mu, NULL);
    m->n_threads = params ? params->n_threads : 0;
    m->cache_type = params ? params->cache_type : CMF_CACHE_DEFAULT;
    m->be = cmf_backend_cpu();
    cmf_status st = cmf_file_open(path, &m->file);
    if (st == CMF_OK) st = build(m);
    /* tensor parallelism (src/tp): tp > 1 splits the model over that many ranks on `backend` */
    int tp = 1;
    const char *tp_env = getenv("CMF_TP");
    if (params && params->tp > 0) {
        tp = params->tp;
    } else if (st == CMF_OK && tp_env && *tp_env) { /* a whole integer in [1, 64], as `--tp` takes */
        char *end = NULL;
        const long v = strtol(tp_env, &end, 10);
        if (*end != '\0' || v < 1 || v > 64)
            st = cmf_err(CMF_E_ARG, "CMF_TP='%.40s' is not an integer in [1, 64]", tp_env);
        else
            tp = (int)v;
    }
    if (st == CMF_OK && tp > 1) st = cmf_tp_setup(m, tp, backend);
    else if (st == CMF_OK) st = choose_backend(m, backend);
    if (st != CMF_OK) {
        if (strncmp(cmf_last_error(), path, strlen(path)) != 0) cmf_err_prefix(st, "%s: ", path);
        cmf_model_free(m);
        return st;
    }
    *out = m;
    return CMF_OK;
}

cmf_status cmf_model_load(const char *path, const cmf_model_params *params, cmf_model **out) {
    return cmf_model_load_on(path, params, NULL, out);
}

void cmf_model_free(cmf_model *m) {
    if (!m) return;
    cmf_tp_free(m->tp); /* the rank models and their backends */
    if (m->be && m->be->unload_weights) { /* what load_weights made for each set (cpu: the repacked copies) */
        m->be->unload_weights(m->be, &m->base, m->cfg.n_layers);
        for (int i = 0; i < m->n_skill_sets; i++) m->be->unload_weights(m->be, m->skill_sets[i], m->cfg.n_layers);
    }
    if (m->be) m->be->destroy(m->be); /* resident weights go first */
    cmf_tokenizer_free(m->tokenizer);
    free(m->tokenizer_error);
    free(m->eos_ids);
    cmf_dory_free(m->dory);
    cmf_masks_free(m->masks);
    free_weights(&m->base);
    for (int i = 0; i < m->n_skill_sets; i++) {
        free_weights(m->skill_sets[i]);
        free(m->skill_sets[i]);
    }
    pthread_mutex_destroy(&m->skill_mu);
    free(m->rope_inv_freq);
    cmf_config_free(&m->cfg);
    cmf_file_close(m->file);
    free(m);
}

/* Getters: a NULL model gives the neutral value documented in cmf.h (0, NULL or -1), never a crash. */
int cmf_model_vocab_size(const cmf_model *m) { return m ? m->cfg.vocab_size : 0; }
int cmf_model_n_ctx_train(const cmf_model *m) {
    if (!m) return 0;
    const cmf_config *c = &m->cfg;
    int n = c->max_position_embeddings;
    if (c->yarn_factor > 1.0f && c->yarn_original_max_pos > 0) { /* YaRN extends the original window by its factor */
        const double ext = (double)c->yarn_factor * (double)c->yarn_original_max_pos;
        if (ext > n) n = ext < (double)(1 << 30) ? (int)ext : 1 << 30;
    }
    return n;
}
const char *cmf_model_arch(const cmf_model *m) { return m ? m->cfg.arch_name : NULL; }
const char *cmf_model_backend(const cmf_model *m) {
    if (!m) return NULL;
    if (m->dory) return cmf_dory_backend(m->dory);
    return m->tp ? m->tp->rank[0]->be->name : m->be->name;
}
const char *cmf_model_backend_desc(const cmf_model *m) {
    if (!m) return NULL;
    if (m->dory && strcmp(cmf_dory_backend(m->dory), "cpu") != 0) return "cuda (Dory op table, backend/cuda/dory_ops.cu)";
    return m->tp ? m->tp->desc : m->be->desc;
}

int cmf_model_tp(const cmf_model *m) { return !m ? 0 : m->tp ? m->tp->n : 1; }
int cmf_model_n_task_masks(const cmf_model *m) { return m && m->masks ? (int)m->masks->n : 0; }
int32_t cmf_model_bos_id(const cmf_model *m) { return m ? m->bos_id : -1; }
const cmf_tokenizer *cmf_model_tokenizer(const cmf_model *m) { return m ? m->tokenizer : NULL; }

const int32_t *cmf_model_eos_ids(const cmf_model *m, int *n) {
    if (n) *n = m ? m->n_eos : 0;
    return m ? m->eos_ids : NULL;
}

/* Why cmf_model_tokenizer returned NULL ("" when the file simply has no vocab section). */
const char *cmf_model_tokenizer_error(const cmf_model *m) {
    if (!m) return NULL;
    return m->tokenizer_error ? m->tokenizer_error : "";
}
