/* hf.c — cmf_convert_hf: a Hugging Face model directory -> one CMF v2 file (CMF_FORMAT.md §1.12, §5).
 *
 * Steps: config.json -> header.arch (hf_config.c); the safetensors checkpoint (safetensors.c) -> tensors under their
 * HF names, wrappers canonicalized and vision/audio towers dropped (§5.1), in execution order (embed, layers,
 * final norm, lm_head, rest; §1.5), each encoded per the §2.0 policy (emit.c); tokenizer.json stored verbatim as
 * the vocab section (§1.8); generation_config.json + tokenizer_config.json -> header.tokenizer_config. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "convert/convert.h"
#include "convert/emit.h"
#include "convert/hf.h"
#include "convert/hf_dory.h"
#include "convert/safetensors.h"
#include "util/error.h"
#include "util/fileio.h"

/* ---- tensor names and order ---------------------------------------------------------------------------------- */

/* Towers and projectors of multimodal checkpoints that a text model does not use. */
static int dropped(const char *name) {
    static const char *PARTS[] = {"vision_tower", "vision_model", "multi_modal_projector", "audio_tower",
                                  "audio_model", "embed_vision", "embed_audio", "visual."};
    for (size_t i = 0; i < sizeof PARTS / sizeof PARTS[0]; i++)
        if (strstr(name, PARTS[i])) return 1;
    size_t n = strlen(name);
    return n >= 20 && !strcmp(name + n - 20, "rotary_emb.inv_freq"); /* a buffer, not a weight */
}

/* Canonical name (§5.1): model.language_model.* / language_model.model.* -> model.*, language_model.lm_head.* ->
 * lm_head.*, other language_model.* -> model.*. Returns a malloc'd string. */
static char *canonical(const char *name) {
    static const struct {
        const char *from, *to;
    } RULES[] = {{"model.language_model.", "model."},
                 {"language_model.model.", "model."},
                 {"language_model.lm_head.", "lm_head."},
                 {"language_model.", "model."}};
    for (size_t i = 0; i < sizeof RULES / sizeof RULES[0]; i++) {
        size_t k = strlen(RULES[i].from);
        if (!strncmp(name, RULES[i].from, k)) {
            size_t t = strlen(RULES[i].to), rest = strlen(name + k);
            char *s = malloc(t + rest + 1);
            if (s) {
                memcpy(s, RULES[i].to, t);
                memcpy(s + t, name + k, rest + 1);
            }
            return s;
        }
    }
    return strdup(name);
}

typedef struct entry {
    char *name;
    const cmf_st_tensor *t;
    int group;  /* 0 embed, 1 layers, 2 final norm, 3 lm_head, 4 rest */
    long layer; /* layer index for group 1 */
    int part;   /* order inside a layer */
} entry;

/* Execution order inside a layer: norms around attention, q/k/v/o, then the FFN. */
static int layer_part(const char *rest) {
    static const char *ORDER[] = {"input_layernorm.", "self_attn.q_proj.", "self_attn.k_proj.", "self_attn.v_proj.",
                                  "self_attn.qkv_proj.", "self_attn.q_norm.", "self_attn.k_norm.", "self_attn.o_proj.",
                                  "self_attn.", "post_attention_layernorm.", "pre_feedforward_layernorm.",
                                  "mlp.gate_proj.", "mlp.up_proj.", "mlp.gate_up_proj.", "mlp.down_proj.", "mlp.",
                                  "post_feedforward_layernorm."};
    for (size_t i = 0; i < sizeof ORDER / sizeof ORDER[0]; i++)
        if (!strncmp(rest, ORDER[i], strlen(ORDER[i]))) return (int)i;
    return 100;
}

static void classify(entry *e) {
    const char *n = e->name;
    e->group = 4;
    if (!strncmp(n, "model.embed_tokens.", 19)) {
        e->group = 0;
    } else if (!strncmp(n, "model.layers.", 13)) {
        char *end;
        errno = 0;
        long l = strtol(n + 13, &end, 10);
        if (end != n + 13 && *end == '.' && !errno) {
            e->group = 1;
            e->layer = l;
            e->part = layer_part(end + 1);
        }
    } else if (!strncmp(n, "model.norm.", 11)) {
        e->group = 2;
    } else if (!strncmp(n, "lm_head.", 8)) {
        e->group = 3;
    }
}

static int cmp_entry(const void *a, const void *b) {
    const entry *x = a, *y = b;
    if (x->group != y->group) return x->group - y->group;
    if (x->group == 1) {
        if (x->layer != y->layer) return x->layer < y->layer ? -1 : 1;
        if (x->part != y->part) return x->part - y->part;
    }
    return strcmp(x->name, y->name);
}

/* ---- optional JSON files ------------------------------------------------------------------------------------- */

cmf_status cmf_hf_read_opt(const char *dir, const char *name, char **text, size_t *len) {
    *text = NULL;
    *len = 0;
    char *p = cmf_path_join(dir, name);
    if (!p) return cmf_err(CMF_E_NOMEM, "out of memory");
    cmf_status s = cmf_is_file(p) ? cmf_read_file(p, text, len) : CMF_OK;
    free(p);
    return s;
}

cmf_status cmf_hf_parse_opt(const char *dir, const char *name, cJSON **json) {
    char *txt;
    size_t len;
    *json = NULL;
    cmf_status s = cmf_hf_read_opt(dir, name, &txt, &len);
    if (s || !txt) return s;
    const char *endp = NULL;
    *json = cJSON_ParseWithLengthOpts(txt, len, &endp, 0);
    size_t at = endp ? (size_t)(endp - txt) : 0;
    free(txt);
    if (!*json) return cmf_err(CMF_E_FORMAT, "%s/%s: malformed JSON near byte %zu", dir, name, at);
    return CMF_OK;
}

static const char *base_name(const char *path, char *buf, size_t cap) {
    size_t n = strlen(path);
    while (n > 1 && path[n - 1] == '/') n--;
    size_t b = n;
    while (b > 0 && path[b - 1] != '/') b--;
    snprintf(buf, cap, "%.*s", (int)(n - b), path + b);
    return buf;
}

/* ---- the conversion ------------------------------------------------------------------------------------------ */

/* Collects, canonicalizes and orders the checkpoint's tensors. *out (n entries) is malloc'd; names owned. */
static cmf_status collect(const cmf_safetensors *st, entry **out, size_t *n_out) {
    size_t n = cmf_st_count(st), k = 0;
    entry *es = calloc(n ? n : 1, sizeof *es);
    if (!es) return cmf_err(CMF_E_NOMEM, "out of memory");
    for (size_t i = 0; i < n; i++) {
        const cmf_st_tensor *t = cmf_st_get(st, i);
        if (dropped(t->name)) continue;
        es[k].t = t;
        if (!(es[k].name = canonical(t->name))) {
            for (size_t j = 0; j < k; j++) free(es[j].name);
            free(es);
            return cmf_err(CMF_E_NOMEM, "out of memory");
        }
        classify(&es[k]);
        k++;
    }
    qsort(es, k, sizeof *es, cmp_entry);
    for (size_t i = 1; i < k; i++)
        if (!strcmp(es[i].name, es[i - 1].name)) {
            cmf_status s = cmf_err(CMF_E_FORMAT, "tensors '%s' and '%s' both become '%s'", es[i - 1].t->name,
                                   es[i].t->name, es[i].name);
            for (size_t j = 0; j < k; j++) free(es[j].name);
            free(es);
            return s;
        }
    *out = es;
    *n_out = k;
    return CMF_OK;
}

/* ---- the output must not be an input ------------------------------------------------------------------------- */

static cmf_status same_as(const char *out, const char *src) {
    if (!cmf_same_file(out, src)) return CMF_OK;
    return cmf_err(CMF_E_ARG, "-o %s would replace %s, which this conversion reads; write the CMF file elsewhere",
                   out, src);
}

cmf_status cmf_hf_check_output(const char *dir, const char *out_path, const cmf_safetensors *st) {
    static const char *const FILES[] = {"config.json", "generation_config.json", "tokenizer_config.json",
                                        "tokenizer.json", "chat_template.jinja", "model.safetensors",
                                        "model.safetensors.index.json", "dory_recon.safetensors"};
    static const char *const SUFFIX[] = {"", ".tmp", ".blob.tmp"}; /* the writer's temporary files (format.h) */
    size_t ol = strlen(out_path);
    char *out = malloc(ol + 16);
    if (!out) return cmf_err(CMF_E_NOMEM, "out of memory");
    cmf_status s = CMF_OK;
    for (size_t k = 0; k < sizeof SUFFIX / sizeof SUFFIX[0] && !s; k++) {
        memcpy(out, out_path, ol);
        strcpy(out + ol, SUFFIX[k]);
        for (size_t i = 0; i < sizeof FILES / sizeof FILES[0] && !s; i++) {
            char *p = cmf_path_join(dir, FILES[i]);
            s = p ? same_as(out, p) : cmf_err(CMF_E_NOMEM, "out of memory");
            free(p);
        }
        for (size_t i = 0; i < cmf_st_shard_count(st) && !s; i++) s = same_as(out, cmf_st_shard_path(st, i));
    }
    free(out);
    return s;
}

char *cmf_hf_dir_copy(const char *dir) {
    size_t n = strlen(dir);
    while (n > 1 && dir[n - 1] == '/') n--;
    char *d = malloc(n + 1);
    if (d) {
        memcpy(d, dir, n);
        d[n] = 0;
    }
    return d;
}

/* ---- checkpoint contents the config promises or the runtime ignores ---------------------------------------- */

static int has_entry(const entry *es, size_t n, const char *name) {
    for (size_t i = 0; i < n; i++)
        if (!strcmp(es[i].name, name)) return 1;
    return 0;
}

static int has_suffix_entry(const entry *es, size_t n, const char *suffix, const char **which) {
    size_t k = strlen(suffix);
    for (size_t i = 0; i < n; i++) {
        size_t l = strlen(es[i].name);
        if (l >= k && !strcmp(es[i].name + l - k, suffix)) {
            *which = es[i].name;
            return 1;
        }
    }
    return 0;
}

/* attention_bias / mlp_bias against the tensors (the runtime uses q/k/v biases only, §5.1), and layers past
 * num_hidden_layers (which the runtime never reads: a warning). */
static cmf_status check_contents(const cJSON *config, const cJSON *arch, const entry *es, size_t n,
                                 const cmf_convert_opts *opts) {
    const cJSON *tc = cJSON_GetObjectItemCaseSensitive(config, "text_config");
    const cJSON *ab = cJSON_GetObjectItemCaseSensitive(cJSON_IsObject(tc) ? tc : config, "attention_bias");
    const cJSON *mb = cJSON_GetObjectItemCaseSensitive(cJSON_IsObject(tc) ? tc : config, "mlp_bias");
    if (!ab) ab = cJSON_GetObjectItemCaseSensitive(config, "attention_bias");
    if (!mb) mb = cJSON_GetObjectItemCaseSensitive(config, "mlp_bias");
    const char *which = NULL;
    if (cJSON_IsTrue(ab) && !has_entry(es, n, "model.layers.0.self_attn.q_proj.bias") &&
        !has_entry(es, n, "model.layers.0.self_attn.qkv_proj.bias"))
        return cmf_err(CMF_E_FORMAT, "config.json: attention_bias is true but the checkpoint has no "
                                     "model.layers.0.self_attn.q_proj.bias");
    if (has_suffix_entry(es, n, ".self_attn.o_proj.bias", &which) || has_suffix_entry(es, n, ".qkv_proj.bias", &which))
        return cmf_err(CMF_E_UNSUPPORTED, "tensor '%s': this bias is not supported by the runtime (q/k/v biases only)",
                       which);
    if (cJSON_IsTrue(mb) && !has_suffix_entry(es, n, "_proj.bias", &which))
        return cmf_err(CMF_E_FORMAT, "config.json: mlp_bias is true but the checkpoint has no MLP bias tensors");
    for (size_t i = 0; i < n; i++) {
        const char *nm = es[i].name;
        if (es[i].group == 1 && strstr(nm, ".mlp.") && strlen(nm) > 5 && !strcmp(nm + strlen(nm) - 5, ".bias"))
            return cmf_err(CMF_E_UNSUPPORTED, "tensor '%s': MLP biases (mlp_bias) are not supported by the runtime", nm);
    }
    const cJSON *nl = cJSON_GetObjectItemCaseSensitive(arch, "num_layers");
    long max_layer = -1;
    for (size_t i = 0; i < n; i++)
        if (es[i].group == 1 && es[i].layer > max_layer) max_layer = es[i].layer;
    if (cJSON_IsNumber(nl) && max_layer >= (long)nl->valuedouble)
        cmf_convert_warn(opts, "the checkpoint has weights for %ld layers but num_hidden_layers is %.0f: layers %.0f..%ld "
                               "are written but never run",
                         max_layer + 1, nl->valuedouble, nl->valuedouble, max_layer);
    return CMF_OK;
}

static cmf_status emit_all(cmf_emit *em, const entry *es, size_t n, int skip_lm_head) {
    for (size_t i = 0; i < n; i++) {
        const cmf_st_tensor *t = es[i].t;
        if (skip_lm_head && es[i].group == 3) continue;
        if (t->dtype != CMF_ST_F32 && t->dtype != CMF_ST_F16 && t->dtype != CMF_ST_BF16)
            return cmf_err(CMF_E_UNSUPPORTED, "tensor '%s': source dtype %s (the converter reads F32, F16, BF16)",
                           t->name, t->dtype_str);
        float *buf = cmf_emit_scratch(em, cmf_st_numel(t));
        if (!buf) return cmf_err(CMF_E_NOMEM, "tensor '%s': out of memory", t->name);
        cmf_status s = cmf_st_to_f32(t, buf);
        if (!s) s = cmf_emit_tensor(em, es[i].name, t->ndim, t->shape, buf, t->nbytes);
        if (s) return s;
    }
    return CMF_OK;
}

static cmf_status convert_hf(const char *dir, const char *out_path, const cmf_convert_opts *opts);

cmf_status cmf_convert_hf(const char *dir_in, const char *out_path, const cmf_convert_opts *opts) {
    if (!dir_in || !out_path || !opts) return cmf_err(CMF_E_ARG, "cmf_convert_hf: NULL argument");
    char *dir = cmf_hf_dir_copy(dir_in);
    if (!dir) return cmf_err(CMF_E_NOMEM, "out of memory");
    cmf_status s = convert_hf(dir, out_path, opts);
    free(dir);
    return s;
}

static cmf_status convert_hf(const char *dir, const char *out_path, const cmf_convert_opts *opts) {
    cJSON *config = NULL, *gen = NULL, *tok_cfg = NULL, *tok_json = NULL, *arch = NULL, *tc = NULL, *header = NULL;
    char *vocab = NULL, *tpl = NULL;
    size_t vocab_len = 0, tpl_len = 0;
    cmf_safetensors *st = NULL;
    entry *es = NULL;
    size_t n = 0;
    cmf_emit em;
    memset(&em, 0, sizeof em);
    cmf_status s = cmf_hf_check_output(dir, out_path, NULL); /* the shards are checked once they are opened */
    if (!s) s = cmf_hf_parse_opt(dir, "config.json", &config);
    if (!s && !config) s = cmf_err(CMF_E_NOT_FOUND, "%s: no config.json", dir);
    const cJSON *mt = s ? NULL : cJSON_GetObjectItemCaseSensitive(config, "model_type");
    if (cJSON_IsString(mt) && !strcmp(mt->valuestring, "dory")) { /* Dory has its own schema (hf_dory.c) */
        cJSON_Delete(config);
        return cmf_convert_hf_dory(dir, out_path, opts);
    }
    if (!s) s = cmf_hf_arch(config, opts, &arch);
    if (!s) s = cmf_hf_parse_opt(dir, "generation_config.json", &gen);
    if (!s) s = cmf_hf_parse_opt(dir, "tokenizer_config.json", &tok_cfg);
    if (!s) s = cmf_hf_read_opt(dir, "tokenizer.json", &vocab, &vocab_len);
    if (!s && vocab) {
        tok_json = cJSON_ParseWithLength(vocab, vocab_len);
        if (!tok_json) s = cmf_err(CMF_E_FORMAT, "%s/tokenizer.json: malformed JSON", dir);
    }
    if (!s && !vocab) cmf_convert_warn(opts, "no tokenizer.json: the file has no vocab section");
    if (!s && tok_json) { /* a tokenizer whose ids pass the embedding's rows does not belong to these weights */
        const cJSON *vs = cJSON_GetObjectItemCaseSensitive(arch, "vocab_size");
        const cJSON *mv = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(tok_json, "model"), "vocab");
        double top = -1;
        const cJSON *e;
        cJSON_ArrayForEach(e, mv) if (cJSON_IsNumber(e) && e->valuedouble > top) top = e->valuedouble;
        cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(tok_json, "added_tokens")) {
            const cJSON *id = cJSON_GetObjectItemCaseSensitive(e, "id");
            if (cJSON_IsNumber(id) && id->valuedouble > top) top = id->valuedouble;
        }
        if (cJSON_IsNumber(vs) && top >= vs->valuedouble) {
            char msg[256];
            snprintf(msg, sizeof msg,
                     "tokenizer.json has ids up to %.0f but the model's vocab_size is %.0f: text whose tokens pass "
                     "the embedding cannot be run",
                     top, vs->valuedouble);
            cmf_convert_warn(opts, "%s", msg);
        }
    }
    if (!s) s = cmf_hf_read_opt(dir, "chat_template.jinja", &tpl, &tpl_len);
    if (!s) s = cmf_hf_tokenizer_config(config, gen, tok_cfg, tok_json, tpl, &tc);
    if (!s) s = cmf_st_open(dir, &st);
    if (!s) s = collect(st, &es, &n);
    if (!s) s = cmf_hf_check_output(dir, out_path, st);
    if (!s) s = check_contents(config, arch, es, n, opts);
    int skip_lm_head = 0;
    if (!s) {
        cJSON *tie = cJSON_GetObjectItemCaseSensitive(arch, "tie_word_embeddings");
        int has_lm = 0, has_embed = 0;
        for (size_t i = 0; i < n; i++) {
            has_lm |= es[i].group == 3;
            has_embed |= !strcmp(es[i].name, "model.embed_tokens.weight");
        }
        if (!has_embed) s = cmf_err(CMF_E_FORMAT, "%s: the checkpoint has no model.embed_tokens.weight", dir);
        if (!s && cJSON_IsTrue(tie) && has_lm) {
            /* A tied checkpoint that still stores lm_head: HF transformers ties the head to embed_tokens
             * (tie_weights) and ignores the stored copy, so it is dropped; a warning when it differs. */
            const cmf_st_tensor *a = NULL, *b = NULL;
            for (size_t i = 0; i < n; i++) {
                if (!strcmp(es[i].name, "model.embed_tokens.weight")) a = es[i].t;
                if (!strcmp(es[i].name, "lm_head.weight")) b = es[i].t;
            }
            if (!(a && b && a->nbytes == b->nbytes && a->dtype == b->dtype && !memcmp(a->data, b->data, a->nbytes)))
                cmf_convert_warn(opts, "tie_word_embeddings is true but the checkpoint's lm_head.weight differs from "
                                       "model.embed_tokens.weight: as in HF transformers the head is tied to the "
                                       "embedding and lm_head.weight is dropped");
            skip_lm_head = 1;
        } else if (!s && !cJSON_IsTrue(tie) && !has_lm) {
            cmf_convert_warn(opts, "no lm_head.weight in the checkpoint: tie_word_embeddings set to true");
            cJSON_ReplaceItemInObject(arch, "tie_word_embeddings", cJSON_CreateBool(1));
        }
    }
    if (!s) {
        uint64_t total = 0;
        for (size_t i = 0; i < n; i++) total += es[i].t->nbytes;
        s = cmf_emit_begin(&em, out_path, opts, total);
        for (size_t i = 0; i < n && !s; i++) em.has_moe |= strstr(es[i].name, ".experts.") != NULL;
    }
    if (!s) s = emit_all(&em, es, n, skip_lm_head);
    if (!s) {
        char bn[256];
        header = cJSON_CreateObject();
        cJSON_AddStringToObject(header, "format", "cmf");
        cJSON_AddNumberToObject(header, "version", 2);
        cJSON_AddItemToObject(header, "arch", arch);
        arch = NULL;
        cJSON_AddStringToObject(header, "quant_type", cmf_quant_label(opts->quant));
        cJSON *prov = cJSON_AddObjectToObject(header, "provenance");
        cJSON_AddStringToObject(prov, "tool", "cmf convert");
        cJSON_AddStringToObject(prov, "source_model", base_name(dir, bn, sizeof bn));
        cJSON_AddItemToObject(header, "tokenizer_config", tc);
        tc = NULL;
    }
    s = cmf_emit_end(&em, s, header, vocab, vocab_len);
    for (size_t i = 0; i < n; i++) free(es[i].name);
    free(es);
    cmf_st_close(st);
    cJSON_Delete(config);
    cJSON_Delete(gen);
    cJSON_Delete(tok_cfg);
    cJSON_Delete(tok_json);
    cJSON_Delete(arch);
    cJSON_Delete(tc);
    free(vocab);
    free(tpl);
    /* messages that already start with the directory (dir/file: ...) are not prefixed with it again */
    if (s && strncmp(cmf_last_error(), dir, strlen(dir)) != 0) return cmf_err_prefix(s, "convert %s: ", dir);
    return s;
}
