/* test_convert_checks.c — what convert and requant must refuse or report (review 9): an output that is one of the
 * files the conversion reads, configs the runtime would refuse or read differently from HF transformers (checked by
 * opening the written file with the loader's own checks before it is renamed), f16 overflow and NaN in the source,
 * and a requant input whose tensor hashes do not match. Every case starts from a real hf-tiny checkpoint. */
#include <cjson/cJSON.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cmf.h"
#include "convert/convert.h"
#include "convert/requant.h"
#include "quant/dtype.h"
#include "format/format.h"
#include "testutil.h"
#include "util/fileio.h"

typedef struct warns {
    int n;
    char all[4096];
} warns;

static void on_warn(void *ctx, const char *msg) {
    warns *w = ctx;
    w->n++;
    size_t l = strlen(w->all);
    snprintf(w->all + l, sizeof w->all - l, "%s\n", msg);
}

static char DIR_[4096], OUT[4096];

static char *slurp(const char *path, size_t *len) {
    char *t = NULL;
    size_t n = 0;
    CHECK_MSG(cmf_read_file(path, &t, &n) == CMF_OK, "read %s: %s", path, cmf_last_error());
    if (len) *len = n;
    return t;
}

static void spit(const char *path, const void *p, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) {
        CHECK_MSG(0, "cannot write %s", path);
        return;
    }
    fwrite(p, 1, n, f);
    fclose(f);
}

static const char *in_dir(const char *name) {
    static char buf[4200];
    snprintf(buf, sizeof buf, "%s/%s", DIR_, name);
    return buf;
}

/* Fresh test directory holding `family`'s config.json (edited by `edit` when not NULL) and model.safetensors. */
static void setup(const char *family, void (*edit)(cJSON *)) {
    char rel[256];
    size_t n;
    snprintf(rel, sizeof rel, "data/hf-tiny/%s/model.safetensors", family);
    char *st = slurp(shared_path(rel), &n);
    if (st) spit(in_dir("model.safetensors"), st, n);
    free(st);
    snprintf(rel, sizeof rel, "data/hf-tiny/%s/config.json", family);
    char *txt = slurp(shared_path(rel), NULL);
    cJSON *c = txt ? cJSON_Parse(txt) : NULL;
    free(txt);
    if (!c) return;
    if (edit) edit(c);
    char *out = cJSON_Print(c);
    spit(in_dir("config.json"), out, strlen(out));
    free(out);
    cJSON_Delete(c);
}

static cmf_status convert(int quant, warns *w) {
    cmf_convert_opts o;
    memset(&o, 0, sizeof o);
    o.quant = quant;
    o.warn = on_warn;
    o.warn_ctx = w;
    unlink(OUT);
    return cmf_convert_hf(DIR_, OUT, &o);
}

/* The conversion fails with `st` and a message holding `needle`, and writes nothing. */
static void expect_refused(const char *what, int quant, cmf_status st, const char *needle) {
    warns w = {0, ""};
    cmf_status s = convert(quant, &w);
    CHECK_MSG(s == st && strstr(cmf_last_error(), needle), "%s: status %d (want %d), '%s' lacks '%s'", what, s, st,
              cmf_last_error(), needle);
    CHECK_MSG(access(OUT, F_OK) != 0, "%s: an output was written", what);
}

/* The conversion succeeds, its warnings hold `needle` (NULL: none expected), and the file loads. */
static void expect_ok(const char *what, int quant, const char *needle) {
    warns w = {0, ""};
    cmf_status s = convert(quant, &w);
    CHECK_MSG(s == CMF_OK, "%s: %s", what, cmf_last_error());
    if (needle) CHECK_MSG(strstr(w.all, needle), "%s: warnings '%s' lack '%s'", what, w.all, needle);
    cmf_model *m = NULL;
    if (s == CMF_OK) CHECK_MSG(cmf_model_load(OUT, NULL, &m) == CMF_OK, "%s: load: %s", what, cmf_last_error());
    cmf_model_free(m);
}

/* ---- config edits ------------------------------------------------------------------------------------------- */

static void set_num(cJSON *c, const char *k, double v) {
    cJSON_DeleteItemFromObjectCaseSensitive(c, k);
    cJSON_AddNumberToObject(c, k, v);
}
static void e_head_dim(cJSON *c) { set_num(c, "head_dim", 16); }
static void e_no_kv(cJSON *c) { cJSON_DeleteItemFromObjectCaseSensitive(c, "num_key_value_heads"); }
static void e_vocab(cJSON *c) { set_num(c, "vocab_size", 1000); }
static void e_layers_big(cJSON *c) { set_num(c, "num_hidden_layers", 100000); }
static void e_layers_2(cJSON *c) { set_num(c, "num_hidden_layers", 2); }
static void e_eps(cJSON *c) { set_num(c, "rms_norm_eps", -1); }
static void e_theta(cJSON *c) { set_num(cJSON_GetObjectItemCaseSensitive(c, "rope_parameters"), "rope_theta", -1); }
static void e_factor0(cJSON *c) {
    cJSON *r = cJSON_AddObjectToObject(c, "rope_scaling");
    cJSON_AddStringToObject(r, "rope_type", "linear");
    cJSON_AddNumberToObject(r, "factor", 0);
}
static void e_tie_str(cJSON *c) {
    cJSON_DeleteItemFromObjectCaseSensitive(c, "tie_word_embeddings");
    cJSON_AddStringToObject(c, "tie_word_embeddings", "yes");
}
static void e_tie_true(cJSON *c) {
    cJSON_DeleteItemFromObjectCaseSensitive(c, "tie_word_embeddings");
    cJSON_AddTrueToObject(c, "tie_word_embeddings");
}
static void e_eos(cJSON *c) { set_num(c, "eos_token_id", 99999); }
static void e_attn_bias(cJSON *c) {
    cJSON_DeleteItemFromObjectCaseSensitive(c, "attention_bias");
    cJSON_AddTrueToObject(c, "attention_bias");
}
static void e_mlp_bias(cJSON *c) {
    cJSON_DeleteItemFromObjectCaseSensitive(c, "mlp_bias");
    cJSON_AddTrueToObject(c, "mlp_bias");
}
static void e_big_int(cJSON *c) { set_num(c, "max_position_embeddings", 1099511627776.0); }
static void e_no_qpas(cJSON *c) { cJSON_DeleteItemFromObjectCaseSensitive(c, "query_pre_attn_scalar"); }
static void e_gelu(cJSON *c) {
    cJSON_DeleteItemFromObjectCaseSensitive(c, "hidden_activation");
    cJSON_AddStringToObject(c, "hidden_activation", "gelu");
}

static void test_configs(void) {
    setup("llama", NULL);
    expect_ok("unchanged llama", CMF_DT_F32, NULL);
    setup("llama", e_head_dim);
    expect_refused("head_dim 16", CMF_DT_F32, CMF_E_FORMAT, "q_proj.weight has shape");
    setup("llama", e_no_kv);
    expect_refused("no num_key_value_heads", CMF_DT_F32, CMF_E_FORMAT, "k_proj.weight has shape");
    setup("llama", e_vocab);
    expect_refused("vocab_size 1000", CMF_DT_F32, CMF_E_FORMAT, "embed_tokens.weight has shape");
    setup("llama", e_layers_big);
    expect_refused("num_hidden_layers 100000", CMF_DT_F32, CMF_E_FORMAT, "num_layers = 100000 is out of range");
    setup("llama", e_layers_2);
    expect_ok("num_hidden_layers 2 of 3", CMF_DT_F32, "weights for 3 layers but num_hidden_layers is 2");
    setup("llama", e_eps);
    expect_refused("rms_norm_eps -1", CMF_DT_F32, CMF_E_FORMAT, "'rms_norm_eps' must be a positive");
    setup("llama", e_theta);
    expect_refused("rope_theta -1", CMF_DT_F32, CMF_E_FORMAT, "rope_theta -1 must be a positive");
    setup("llama", e_factor0);
    expect_refused("rope factor 0", CMF_DT_F32, CMF_E_FORMAT, "'factor' must be a positive");
    setup("llama", e_tie_str);
    expect_refused("tie_word_embeddings \"yes\"", CMF_DT_F32, CMF_E_FORMAT, "'tie_word_embeddings' is not true or false");
    setup("llama", e_eos);
    expect_ok("eos 99999", CMF_DT_F32, "eos token id 99999 is not below vocab_size 1024");
    setup("llama", e_attn_bias);
    expect_refused("attention_bias without biases", CMF_DT_F32, CMF_E_FORMAT, "attention_bias is true");
    setup("llama", e_mlp_bias);
    expect_refused("mlp_bias without biases", CMF_DT_F32, CMF_E_FORMAT, "mlp_bias is true");
    setup("llama", e_big_int);
    expect_refused("max_position_embeddings 2^40", CMF_DT_F32, CMF_E_FORMAT, "out of range [1, 2147483647]");

    /* tie_word_embeddings true with a distinct lm_head.weight: tied as in HF, lm_head dropped with a warning */
    setup("llama", e_tie_true);
    expect_ok("tied with a distinct lm_head", CMF_DT_F32, "lm_head.weight is dropped");
    cmf_file *f = NULL;
    if (cmf_file_open(OUT, &f) == CMF_OK) {
        CHECK(cmf_file_find(f, "lm_head.weight") == NULL);
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(f->header, "arch"),
                                                          "tie_word_embeddings");
        CHECK(cJSON_IsTrue(t));
        cmf_file_close(f);
    }

    /* gemma2: query_pre_attn_scalar defaults to 256 (Gemma2Config); hidden_activation "gelu" (exact) refused */
    setup("gemma2", e_no_qpas);
    expect_ok("gemma2 without query_pre_attn_scalar", CMF_DT_F32, NULL);
    if (cmf_file_open(OUT, &f) == CMF_OK) {
        const cJSON *q = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(f->header, "arch"),
                                                          "query_pre_attn_scalar");
        CHECK_MSG(cJSON_IsNumber(q) && q->valuedouble == 256, "query_pre_attn_scalar %g",
                  cJSON_IsNumber(q) ? q->valuedouble : -1.0);
        cmf_file_close(f);
    }
    setup("gemma2", e_gelu);
    expect_refused("gemma2 hidden_activation gelu", CMF_DT_F32, CMF_E_UNSUPPORTED, "exact (erf) GELU");
}

/* ---- checkpoint edits --------------------------------------------------------------------------------------- */

/* Rewrites DIR_/model.safetensors with tensor `drop` removed from its header (its bytes stay, unreferenced), or
 * given the shape [1, n] (a 1-D tensor of n values made 2-D: drop_to_2d), or with element `elem` of tensor `poke`
 * (a 2-byte dtype) set to the 16-bit pattern `bits`. */
static int drop_to_2d;
static void edit_checkpoint(const char *drop, const char *poke, size_t elem, uint16_t bits) {
    size_t n;
    char *st = slurp(in_dir("model.safetensors"), &n);
    if (!st) return;
    uint64_t hl = 0;
    for (int i = 0; i < 8; i++) hl |= (uint64_t)(uint8_t)st[i] << (8 * i);
    cJSON *h = cJSON_ParseWithLength(st + 8, (size_t)hl);
    CHECK(h != NULL);
    if (drop && drop_to_2d) {
        cJSON *sh = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(h, drop), "shape");
        CHECK(cJSON_GetArraySize(sh) == 1);
        cJSON_InsertItemInArray(sh, 0, cJSON_CreateNumber(1));
    } else if (drop) {
        CHECK(cJSON_GetObjectItemCaseSensitive(h, drop) != NULL);
        cJSON_DeleteItemFromObjectCaseSensitive(h, drop);
    }
    if (poke) {
        const cJSON *e = cJSON_GetObjectItemCaseSensitive(h, poke);
        const cJSON *off = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(e, "data_offsets"), 0);
        CHECK(off != NULL);
        if (off) {
            size_t at = 8 + (size_t)hl + (size_t)off->valuedouble + 2 * elem;
            st[at] = (char)(bits & 0xff);
            st[at + 1] = (char)(bits >> 8);
        }
    }
    char *js = cJSON_PrintUnformatted(h);
    size_t jl = strlen(js), pad = (8 - jl % 8) % 8;
    FILE *f = fopen(in_dir("model.safetensors"), "wb");
    uint8_t b[8];
    for (int i = 0; i < 8; i++) b[i] = (uint8_t)((jl + pad) >> (8 * i));
    fwrite(b, 1, 8, f);
    fwrite(js, 1, jl, f);
    fwrite("        ", 1, pad, f);
    fwrite(st + 8 + hl, 1, n - 8 - (size_t)hl, f);
    fclose(f);
    free(js);
    cJSON_Delete(h);
    free(st);
}

static void test_checkpoints(void) {
    setup("llama", NULL);
    edit_checkpoint("model.layers.1.self_attn.k_proj.weight", NULL, 0, 0);
    expect_refused("k_proj of layer 1 missing", CMF_DT_F32, CMF_E_FORMAT,
                   "model.layers.1.self_attn.k_proj.weight is missing");
    /* a norm stored as [1, 64]: refused by name (the loader decoded it into an arena sized for 1-D tensors only:
     * a heap overflow under ASan) */
    setup("llama", NULL);
    drop_to_2d = 1;
    edit_checkpoint("model.layers.2.input_layernorm.weight", NULL, 0, 0);
    drop_to_2d = 0;
    expect_refused("2-D norm", CMF_DT_F32, CMF_E_FORMAT, "input_layernorm.weight has 2 dimensions, expected 1");

    /* bf16 1e6 (0x4974) in a bf16 checkpoint: past f16, so the default f16 refuses; bf16 and f32 keep it */
    setup("bf16-llama", NULL);
    edit_checkpoint(NULL, "model.layers.0.mlp.down_proj.weight", 5, 0x4974);
    expect_refused("bf16 1e6 -> f16", CMF_DT_F16, CMF_E_ARG, "down_proj.weight': max |x| = 999424");
    CHECK(strstr(cmf_last_error(), "--quant bf16") != NULL);
    expect_ok("bf16 1e6 -> bf16", CMF_DT_BF16, NULL);
    expect_ok("bf16 1e6 -> f32", CMF_DT_F32, NULL);
    /* a NaN in the source: reported; an error for a quantized target */
    setup("bf16-llama", NULL);
    edit_checkpoint(NULL, "model.layers.0.mlp.down_proj.weight", 7, 0x7fc0);
    expect_ok("NaN -> f16", CMF_DT_F16, "1 NaN/inf value(s) (first at element 7)");
    expect_refused("NaN -> q8", CMF_DT_Q8_ROW, CMF_E_FORMAT, "NaN/inf value(s) (first at element 7)");
    CHECK_MSG(strstr(cmf_last_error(), "which q8_row cannot encode") && !strstr(cmf_last_error(), "--quant"), "%s",
              cmf_last_error());
    /* --quant q2tp stores down_proj as q4tp (2-bit gate/up only): the message names both (review13 read "q4tp
     * cannot encode" under --quant q2tp as a wrong name) */
    expect_refused("NaN -> q2tp", CMF_DT_Q2TP, CMF_E_FORMAT,
                   "which q4tp cannot encode (--quant q2tp stores this tensor as q4tp)");
}

/* ---- the output must not replace an input ------------------------------------------------------------------- */

static void test_output_is_input(void) {
    setup("llama", NULL);
    size_t n0, n1;
    char *before = slurp(in_dir("model.safetensors"), &n0);
    cmf_convert_opts o;
    memset(&o, 0, sizeof o);
    o.quant = CMF_DT_F32;
    static const char *const TARGETS[] = {"model.safetensors", "config.json"};
    for (int i = 0; i < 2; i++) {
        char out[4200];
        snprintf(out, sizeof out, "%s", in_dir(TARGETS[i]));
        cmf_status s = cmf_convert_hf(DIR_, out, &o);
        CHECK_MSG(s == CMF_E_ARG && strstr(cmf_last_error(), "which this conversion reads"), "-o %s: %d %s",
                  TARGETS[i], s, cmf_last_error());
    }
    /* through a symlink, and with the directory given with trailing slashes */
    char link[4200], dir2[4200];
    snprintf(link, sizeof link, "%s", tmp_path("conv9_link.cmf"));
    unlink(link);
    CHECK(symlink(in_dir("model.safetensors"), link) == 0);
    snprintf(dir2, sizeof dir2, "%s//", DIR_);
    cmf_status s = cmf_convert_hf(dir2, link, &o);
    CHECK_MSG(s == CMF_E_ARG && !strstr(cmf_last_error(), "//"), "symlink: %d %s", s, cmf_last_error());
    unlink(link);
    char *after = slurp(in_dir("model.safetensors"), &n1);
    CHECK(before && after && n0 == n1 && !memcmp(before, after, n0));
    free(before);
    free(after);
}

/* ---- requant checks the input's hashes ---------------------------------------------------------------------- */

static void test_requant_hash(void) {
    setup("llama", NULL);
    warns w = {0, ""};
    CHECK(convert(CMF_DT_Q8_ROW, &w) == CMF_OK);
    char out2[4200];
    snprintf(out2, sizeof out2, "%s", tmp_path("conv9_requant.cmf"));
    /* intact input: copied tensors keep their bytes and hash */
    cmf_requant_stats rs;
    CHECK_MSG(cmf_requant(OUT, out2, CMF_DT_Q8_ROW, &rs) == CMF_OK, "%s", cmf_last_error());
    cmf_file *a = NULL, *b = NULL;
    if (cmf_file_open(OUT, &a) == CMF_OK && cmf_file_open(out2, &b) == CMF_OK) {
        CHECK(rs.copied == a->n_tensors && a->n_tensors == b->n_tensors);
        for (size_t i = 0; i < a->n_tensors; i++) {
            const cmf_tensor *t = cmf_file_find(b, a->tensors[i].name);
            CHECK(t && t->hash == a->tensors[i].hash && t->nbytes == a->tensors[i].nbytes &&
                  !memcmp(t->data, a->tensors[i].data, t->nbytes));
        }
    }
    /* one flipped payload byte: refused with the tensor's name, nothing written */
    size_t n;
    char *bytes = slurp(OUT, &n);
    const cmf_tensor *t = a ? cmf_file_find(a, "model.layers.1.mlp.up_proj.weight") : NULL;
    CHECK(t != NULL);
    if (bytes && t) {
        bytes[a->env.data_off + t->off + 100] ^= 0x55;
        spit(OUT, bytes, n);
    }
    cmf_file_close(a);
    cmf_file_close(b);
    free(bytes);
    unlink(out2);
    for (int q = 0; q < 2; q++) {
        cmf_status s = cmf_requant(OUT, out2, q ? CMF_DT_F16 : CMF_DT_Q8_ROW, NULL);
        CHECK_MSG(s == CMF_E_INTEGRITY && strstr(cmf_last_error(), "'model.layers.1.mlp.up_proj.weight'"), "%d %s", s,
                  cmf_last_error());
        CHECK(access(out2, F_OK) != 0);
    }
    /* a digit of the header JSON changed (still valid JSON, so the file opens): refused by the header hash; the
     * header would otherwise be rewritten with a fresh hash (review 9b) */
    CHECK(convert(CMF_DT_Q8_ROW, &w) == CMF_OK);
    bytes = slurp(OUT, &n);
    char *at = NULL;
    for (size_t i = 0; bytes && !at && i + 15 <= n; i++)
        if (!memcmp(bytes + i, "\"rms_norm_eps\":", 15)) at = bytes + i;
    while (at && at < bytes + n && !(*at >= '0' && *at <= '9')) at++;
    CHECK(at != NULL && at < bytes + n);
    if (at && at < bytes + n) {
        *at = *at == '1' ? '2' : '1';
        spit(OUT, bytes, n);
        cmf_status s = cmf_requant(OUT, out2, CMF_DT_Q8_ROW, NULL);
        CHECK_MSG(s == CMF_E_INTEGRITY && strstr(cmf_last_error(), "header"), "%d %s", s, cmf_last_error());
        CHECK(access(out2, F_OK) != 0);
    }
    free(bytes);
}

int main(void) {
    snprintf(DIR_, sizeof DIR_, "%s", tmp_path("conv9_checks"));
    mkdir(DIR_, 0755);
    snprintf(OUT, sizeof OUT, "%s", tmp_path("conv9_checks.cmf"));
    test_configs();
    test_checkpoints();
    test_output_is_input();
    test_requant_hash();
    unlink(OUT);
    unlink(in_dir("model.safetensors"));
    unlink(in_dir("config.json"));
    rmdir(DIR_);
    CMF_TEST_END();
}
