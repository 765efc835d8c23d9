/* test_convert_gguf.c — the GGUF reader and cmf_convert_gguf on stories260K: geometry, interleaved RoPE pairing,
 * tensors equal to the GGUF's and to the llama2.c checkpoint of the same model (proving the name/shape mapping and
 * that Q/K are not permuted), the tokenizer.json built from the embedded SentencePiece vocabulary, vocab-only GGUFs
 * (llama-spm, gpt-2), and corrupt files refused with clear errors. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cmf.h"
#include "convert/convert.h"
#include "convert/gguf.h"
#include "format/format.h"
#include "quant/dtype.h"
#include "testutil.h"
#include "util/fileio.h"

#define GGUF_PATH "data/models/stories260K-gguf/stories260Ktok512.gguf"

static double arch_num(const cmf_file *f, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(f->header, "arch"), key);
    return cJSON_IsNumber(v) ? v->valuedouble : NAN;
}

static float *decode(const cmf_tensor *t) {
    float *out = malloc(cmf_tensor_numel(t) * sizeof *out + 4);
    CHECK(cmf_dequant(t->dtype, t->ndim, t->shape, t->data, t->nbytes, out) == CMF_OK);
    return out;
}

/* Checks the tokenizer.json text: valid JSON, vocab of n entries, merges whose parts and results are in the vocab. */
static void check_tokenizer_json(const char *json, size_t len, int n_vocab, int spm) {
    cJSON *t = cJSON_ParseWithLength(json, len);
    CHECK_MSG(t != NULL, "tokenizer.json does not parse");
    if (!t) return;
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(t, "model");
    const cJSON *vocab = cJSON_GetObjectItemCaseSensitive(model, "vocab");
    const cJSON *merges = cJSON_GetObjectItemCaseSensitive(model, "merges");
    CHECK(!strcmp(cJSON_GetObjectItemCaseSensitive(model, "type")->valuestring, "BPE"));
    CHECK_MSG(cJSON_GetArraySize(vocab) == n_vocab, "vocab has %d entries, want %d", cJSON_GetArraySize(vocab), n_vocab);
    CHECK(cJSON_GetArraySize(merges) > 0);
    int bad = 0;
    for (const cJSON *m = merges ? merges->child : NULL; m; m = m->next) {
        const char *s = m->valuestring, *sp = s ? strchr(s, ' ') : NULL;
        if (!sp) {
            bad++;
            continue;
        }
        char l[256], r[256], lr[512];
        snprintf(l, sizeof l, "%.*s", (int)(sp - s), s);
        snprintf(r, sizeof r, "%s", sp + 1);
        snprintf(lr, sizeof lr, "%s%s", l, r);
        if (!cJSON_GetObjectItemCaseSensitive(vocab, l) || !cJSON_GetObjectItemCaseSensitive(vocab, r)) bad++;
        if (spm && !cJSON_GetObjectItemCaseSensitive(vocab, lr)) bad++;
    }
    CHECK_MSG(bad == 0, "%d merges with parts not in the vocab", bad);
    if (spm) {
        CHECK(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(model, "byte_fallback")));
        CHECK(!strcmp(cJSON_GetObjectItemCaseSensitive(model, "unk_token")->valuestring, "<unk>"));
        const cJSON *pp = cJSON_GetObjectItemCaseSensitive(t, "post_processor");
        const cJSON *single = cJSON_GetObjectItemCaseSensitive(pp, "single");
        const cJSON *first = cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(single, 0), "SpecialToken");
        CHECK(first && !strcmp(cJSON_GetObjectItemCaseSensitive(first, "id")->valuestring, "<s>"));
        const cJSON *added = cJSON_GetObjectItemCaseSensitive(t, "added_tokens");
        int specials = 0;
        for (const cJSON *a = added ? added->child : NULL; a; a = a->next)
            specials += cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(a, "special"));
        CHECK(specials >= 3); /* <unk>, <s>, </s> */
        CHECK(cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(t, "pre_tokenizer")));
    }
    cJSON_Delete(t);
}

static void test_convert(void) {
    char gpath[4096];
    snprintf(gpath, sizeof gpath, "%s", shared_path(GGUF_PATH));
    const char *out = tmp_path("conv_stories260K.cmf");
    cmf_convert_opts o;
    memset(&o, 0, sizeof o);
    o.quant = CMF_DT_F32;
    cmf_status s = cmf_convert_gguf(gpath, out, &o);
    CHECK_MSG(s == CMF_OK, "convert: %s", cmf_last_error());
    if (s) return;
    cmf_file *f = NULL;
    CHECK_MSG(cmf_file_open(out, &f) == CMF_OK, "open: %s", cmf_last_error());
    if (!f) return;
    char *report = NULL;
    CHECK(cmf_file_verify(f, &report) == CMF_OK);
    free(report);
    CHECK(arch_num(f, "hidden_size") == 64 && arch_num(f, "num_layers") == 5);
    CHECK(arch_num(f, "num_attention_heads") == 8 && arch_num(f, "num_kv_heads") == 4);
    CHECK(arch_num(f, "vocab_size") == 512 && arch_num(f, "head_dim") == 8);
    CHECK(arch_num(f, "intermediate_size") == 172 && arch_num(f, "max_position_embeddings") == 128);
    const cJSON *arch = cJSON_GetObjectItemCaseSensitive(f->header, "arch");
    const cJSON *rp = cJSON_GetObjectItemCaseSensitive(arch, "rope_pairing");
    CHECK(cJSON_IsString(rp) && !strcmp(rp->valuestring, "interleaved"));
    CHECK(!cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(arch, "tie_word_embeddings"))); /* output.weight exists */
    const cJSON *tc = cJSON_GetObjectItemCaseSensitive(f->header, "tokenizer_config");
    const cJSON *eos = cJSON_GetObjectItemCaseSensitive(tc, "eos_token_ids");
    CHECK(cJSON_GetArraySize(eos) == 1 && cJSON_GetArrayItem(eos, 0)->valuedouble == 2);
    CHECK(cJSON_GetObjectItemCaseSensitive(tc, "bos_token_id")->valuedouble == 1);
    CHECK(cJSON_GetObjectItemCaseSensitive(tc, "pad_token_id") == NULL); /* 0xFFFFFFFF = none */
    CHECK(f->vocab && f->env.vocab_len > 0);
    if (f->vocab) check_tokenizer_json((const char *)f->vocab, f->env.vocab_len, 512, 1);

    /* every tensor equals the GGUF's (shape reversed) */
    cmf_gguf *g = NULL;
    CHECK(cmf_gguf_open(gpath, &g) == CMF_OK);
    CHECK(g && f->n_tensors == g->n_tensors);
    const struct {
        const char *gg, *hf;
    } names[] = {{"token_embd.weight", "model.embed_tokens.weight"},
                 {"output_norm.weight", "model.norm.weight"},
                 {"output.weight", "lm_head.weight"},
                 {"blk.0.attn_q.weight", "model.layers.0.self_attn.q_proj.weight"},
                 {"blk.3.attn_k.weight", "model.layers.3.self_attn.k_proj.weight"},
                 {"blk.4.attn_v.weight", "model.layers.4.self_attn.v_proj.weight"},
                 {"blk.1.attn_output.weight", "model.layers.1.self_attn.o_proj.weight"},
                 {"blk.2.ffn_gate.weight", "model.layers.2.mlp.gate_proj.weight"},
                 {"blk.2.ffn_up.weight", "model.layers.2.mlp.up_proj.weight"},
                 {"blk.2.ffn_down.weight", "model.layers.2.mlp.down_proj.weight"},
                 {"blk.0.attn_norm.weight", "model.layers.0.input_layernorm.weight"},
                 {"blk.0.ffn_norm.weight", "model.layers.0.post_attention_layernorm.weight"}};
    for (size_t i = 0; g && i < sizeof names / sizeof names[0]; i++) {
        const cmf_gguf_tensor *gt = cmf_gguf_tensor_find(g, names[i].gg);
        const cmf_tensor *t = cmf_file_find(f, names[i].hf);
        CHECK_MSG(gt && t, "%s / %s", names[i].gg, names[i].hf);
        if (!gt || !t) continue;
        CHECK(t->ndim == gt->ndim && t->dtype == CMF_DT_F32);
        for (int d = 0; d < gt->ndim; d++) CHECK(t->shape[d] == gt->ne[gt->ndim - 1 - d]);
        float *a = malloc(cmf_gguf_numel(gt) * sizeof *a), *b = decode(t);
        CHECK(cmf_gguf_tensor_f32(gt, a) == CMF_OK);
        CHECK_MSG(!memcmp(a, b, cmf_gguf_numel(gt) * sizeof *a), "%s values differ", names[i].hf);
        free(a);
        free(b);
    }
    cmf_gguf_close(g);

    /* the llama2.c checkpoint of the same model: embedding and layer-0 wq are equal */
    char *bin = NULL;
    size_t bin_len = 0;
    CHECK(cmf_read_file(shared_path("data/models/stories260K/stories260K.bin"), &bin, &bin_len) == CMF_OK);
    if (bin && bin_len > 28) {
        int32_t hdr[7];
        memcpy(hdr, bin, sizeof hdr);
        int dim = hdr[0], layers = hdr[2], vocab = abs(hdr[5]);
        CHECK(dim == 64 && hdr[1] == 172 && layers == 5 && hdr[3] == 8 && hdr[4] == 4 && vocab == 512);
        const float *w = (const float *)(bin + 28); /* 28 is 4-aligned */
        size_t emb_n = (size_t)vocab * dim, wq_off = emb_n + (size_t)layers * dim, wq_n = (size_t)dim * dim;
        CHECK((wq_off + wq_n) * 4 + 28 <= bin_len);
        const cmf_tensor *te = cmf_file_find(f, "model.embed_tokens.weight");
        const cmf_tensor *tq = cmf_file_find(f, "model.layers.0.self_attn.q_proj.weight");
        if (te && tq) {
            float *e = decode(te), *q = decode(tq);
            CHECK_MSG(!memcmp(e, w, emb_n * 4), "embedding differs from llama2.c's");
            CHECK_MSG(!memcmp(q, w + wq_off, wq_n * 4), "layer-0 wq differs from llama2.c's (permuted?)");
            CHECK(!memcmp(q, w + wq_off + wq_n * 0, 4));
            free(e);
            free(q);
        }
    }
    free(bin);
    cmf_file_close(f);
}

/* cmf_gguf_tokenizer_json gives the same text as the converter's vocab section. The shared vocab-only GGUFs
 * (llama-spm, gpt-2) were damaged in transit (bytes replaced by U+FFFD: the f32 layer_norm_rms_epsilon is 8 bytes
 * long, and later lengths are garbage), so the reader must refuse them with a clear error rather than crash. */
static void test_vocab_only(void) {
    char *json = NULL, *again = NULL;
    size_t len = 0, len2 = 0;
    CHECK(cmf_gguf_tokenizer_json(shared_path(GGUF_PATH), &json, &len) == CMF_OK);
    CHECK(cmf_gguf_tokenizer_json(shared_path(GGUF_PATH), &again, &len2) == CMF_OK);
    CHECK(json && again && len == len2 && !memcmp(json, again, len)); /* deterministic */
    if (json) check_tokenizer_json(json, len, 512, 1);
    free(json);
    free(again);
    const char *damaged[] = {"data/tokenizer-vectors/ggml-vocab-llama-spm.gguf",
                             "data/tokenizer-vectors/ggml-vocab-gpt-2.gguf"};
    for (int i = 0; i < 2; i++) {
        cmf_status s = cmf_gguf_tokenizer_json(shared_path(damaged[i]), &json, &len);
        CHECK_MSG(s == CMF_E_FORMAT && strstr(cmf_last_error(), "offset"), "%s: %d %s", damaged[i], s,
                  cmf_last_error());
        CHECK(json == NULL);
    }
    cmf_convert_opts o;
    memset(&o, 0, sizeof o);
    o.quant = CMF_DT_F32;
    CHECK(cmf_convert_gguf(shared_path(damaged[1]), tmp_path("gpt2.cmf"), &o) == CMF_E_FORMAT);
}

static void write_bytes(const char *path, const void *p, size_t n) {
    FILE *f = fopen(path, "wb");
    if (n) fwrite(p, 1, n, f);
    fclose(f);
}

static void expect_fail(const char *what, const char *path, cmf_status want, const char *needle) {
    cmf_gguf *g = NULL;
    cmf_status s = cmf_gguf_open(path, &g);
    CHECK_MSG(s == want && strstr(cmf_last_error(), needle), "%s: status %d, message '%s' (want '%s')", what, s,
              cmf_last_error(), needle);
    cmf_gguf_close(g);
}

static size_t find(const uint8_t *d, size_t n, const char *s) {
    size_t k = strlen(s);
    for (size_t i = 0; i + k <= n; i++)
        if (!memcmp(d + i, s, k)) return i;
    return 0;
}

static void test_corrupt(void) {
    char *orig = NULL;
    size_t n = 0;
    if (cmf_read_file(shared_path(GGUF_PATH), &orig, &n) != CMF_OK) {
        CHECK(0);
        return;
    }
    uint8_t *d = malloc(n);
    char p[4096];
    snprintf(p, sizeof p, "%s", tmp_path("bad.gguf"));
    /* truncations anywhere in the metadata and tensor infos, and inside the data */
    size_t cuts[] = {0, 3, 4, 7, 12, 20, 23, 30, 100, 1000, 5000, 9000, 14000, 14151, n - 4, n - 1};
    for (size_t i = 0; i < sizeof cuts / sizeof cuts[0]; i++) {
        write_bytes(p, orig, cuts[i]);
        cmf_gguf *g = NULL;
        cmf_status s = cmf_gguf_open(p, &g);
        CHECK_MSG(s == CMF_E_FORMAT, "truncated at %zu: status %d (%s)", cuts[i], s, cmf_last_error());
        cmf_gguf_close(g);
    }
    for (size_t cut = 24; cut < 14200; cut += 37) { /* a sweep: must never crash */
        write_bytes(p, orig, cut);
        cmf_gguf *g = NULL;
        CHECK(cmf_gguf_open(p, &g) != CMF_OK);
        cmf_gguf_close(g);
    }
    write_bytes(p, orig, n - 1);
    expect_fail("data cut", p, CMF_E_FORMAT, "past the end of the data");

    memcpy(d, orig, n);
    memcpy(d, "GGUX", 4);
    write_bytes(p, d, n);
    expect_fail("bad magic", p, CMF_E_FORMAT, "bad magic");

    memcpy(d, orig, n);
    d[4] = 9;
    write_bytes(p, d, n);
    expect_fail("version 9", p, CMF_E_UNSUPPORTED, "version");

    /* the offset of the last tensor info (blk.4.ffn_norm.weight: name, u32 n_dims, u64 ne0, u32 type, u64 offset) */
    memcpy(d, orig, n);
    size_t at = find(d, n, "blk.4.ffn_norm.weight");
    CHECK(at > 0);
    size_t off_at = at + strlen("blk.4.ffn_norm.weight") + 4 + 8 + 4;
    uint64_t big = 1ull << 40;
    memcpy(d + off_at, &big, 8);
    write_bytes(p, d, n);
    expect_fail("offset past EOF", p, CMF_E_FORMAT, "blk.4.ffn_norm.weight");
    uint64_t odd = 33;
    memcpy(d + off_at, &odd, 8);
    write_bytes(p, d, n);
    expect_fail("unaligned offset", p, CMF_E_FORMAT, "alignment");

    /* the element count of tokenizer.ggml.tokens (key, u32 type 9, u32 element type, u64 count) */
    memcpy(d, orig, n);
    at = find(d, n, "tokenizer.ggml.tokens");
    CHECK(at > 0);
    size_t cnt_at = at + strlen("tokenizer.ggml.tokens") + 4 + 4;
    uint64_t huge = 1ull << 60;
    memcpy(d + cnt_at, &huge, 8);
    write_bytes(p, d, n);
    expect_fail("huge array count", p, CMF_E_FORMAT, "array count");
    /* a huge string length inside that array */
    memcpy(d, orig, n);
    memcpy(d + cnt_at + 8, &huge, 8);
    write_bytes(p, d, n);
    expect_fail("huge string length", p, CMF_E_FORMAT, "tokenizer.ggml.tokens");
    /* a huge tensor count */
    memcpy(d, orig, n);
    memcpy(d + 8, &huge, 8);
    write_bytes(p, d, n);
    expect_fail("huge tensor count", p, CMF_E_FORMAT, "tensor count");
    /* an unknown tensor type */
    memcpy(d, orig, n);
    uint32_t ty = 999;
    memcpy(d + off_at - 4, &ty, 4);
    write_bytes(p, d, n);
    expect_fail("unknown type", p, CMF_E_UNSUPPORTED, "ggml type");
    /* the converter passes the reader's error on and writes nothing */
    cmf_convert_opts o;
    memset(&o, 0, sizeof o);
    o.quant = CMF_DT_F32;
    const char *out = tmp_path("bad_gguf.cmf");
    unlink(out);
    cmf_status cs = cmf_convert_gguf(p, out, &o);
    CHECK_MSG(cs == CMF_E_UNSUPPORTED && access(out, F_OK) != 0, "convert corrupt: %d %s", cs, cmf_last_error());
    /* review 9: a tensor the model needs moved away (blk.0.attn_v -> blk.9.attn_v, a layer past block_count: same
     * length, so the file stays valid): the written file is checked with the loader's own checks before the
     * rename, so convert fails naming the missing tensor and writes nothing */
    memcpy(d, orig, n);
    at = find(d, n, "blk.0.attn_v.weight");
    CHECK(at > 0);
    d[at + strlen("blk.")] = '9';
    write_bytes(p, d, n);
    cs = cmf_convert_gguf(p, out, &o);
    CHECK_MSG(cs == CMF_E_FORMAT && strstr(cmf_last_error(), "model.layers.0.self_attn.v_proj.weight is missing") &&
                  access(out, F_OK) != 0,
              "missing attn_v: %d %s", cs, cmf_last_error());
    /* a negative rms epsilon (f32 -1) is refused by name instead of being written */
    memcpy(d, orig, n);
    at = find(d, n, "attention.layer_norm_rms_epsilon");
    CHECK(at > 0);
    size_t val_at = at + strlen("attention.layer_norm_rms_epsilon") + 4; /* after the u32 type (f32 = 6) */
    uint32_t t6;
    memcpy(&t6, d + val_at - 4, 4);
    CHECK(t6 == 6);
    float m1 = -1.0f;
    memcpy(d + val_at, &m1, 4);
    write_bytes(p, d, n);
    cs = cmf_convert_gguf(p, out, &o);
    CHECK_MSG(cs == CMF_E_FORMAT && strstr(cmf_last_error(), "layer_norm_rms_epsilon' = -1 must be a positive") &&
                  access(out, F_OK) != 0,
              "eps -1: %d %s", cs, cmf_last_error());
    /* the output may not be the source (review 9), also through the writer's temporary name */
    write_bytes(p, orig, n);
    char tmpname[4200];
    snprintf(tmpname, sizeof tmpname, "%s.tmp", out);
    unlink(tmpname);
    CHECK(symlink(p, tmpname) == 0);
    cs = cmf_convert_gguf(p, p, &o);
    CHECK_MSG(cs == CMF_E_ARG && strstr(cmf_last_error(), "which this conversion reads"), "-o = source: %d %s", cs,
              cmf_last_error());
    cs = cmf_convert_gguf(p, out, &o);
    CHECK_MSG(cs == CMF_E_ARG && strstr(cmf_last_error(), ".tmp would replace"), "out.tmp = source: %d %s", cs,
              cmf_last_error());
    unlink(tmpname);
    char *after = NULL;
    size_t an = 0;
    CHECK(cmf_read_file(p, &after, &an) == CMF_OK && an == n && !memcmp(after, orig, n));
    free(after);
    unlink(p);
    free(d);
    free(orig);
}

/* The warnings of a conversion, joined (cmf_convert_opts.warn). */
typedef struct nan_warns {
    char all[4096];
} nan_warns;
static void nan_on_warn(void *ctx, const char *msg) {
    nan_warns *w = ctx;
    size_t l = strlen(w->all);
    snprintf(w->all + l, sizeof w->all - l, "%s\n", msg);
}

/* NaN / inf in a GGUF's f32 tensor (review14: `--quant f32` / `f16` converted it without a word): a float target
 * keeps the values and warns naming the tensor, the count and the first element; q8 refuses, naming the same. */
static void test_nan(void) {
    char *orig = NULL;
    size_t n = 0;
    if (cmf_read_file(shared_path(GGUF_PATH), &orig, &n) != CMF_OK) {
        CHECK(0);
        return;
    }
    cmf_gguf *g = NULL;
    CHECK(cmf_gguf_open(shared_path(GGUF_PATH), &g) == CMF_OK);
    if (!g) {
        free(orig);
        return;
    }
    const cmf_gguf_tensor *t = NULL; /* a 2-D F32 matrix: q8 encodes it, so the q8 run reaches the values */
    for (size_t i = 0; i < g->n_tensors && !t; i++)
        if (g->tensors[i].type == CMF_GGML_F32 && !strcmp(g->tensors[i].name, "blk.0.attn_output.weight"))
            t = &g->tensors[i];
    CHECK(t != NULL);
    char name[128] = "";
    if (t) {
        size_t at = (size_t)(t->data - g->map.data);
        const float vals[2] = {NAN, -INFINITY}; /* elements 5 and 9 */
        memcpy(orig + at + 5 * 4, &vals[0], 4);
        memcpy(orig + at + 9 * 4, &vals[1], 4);
        snprintf(name, sizeof name, "%s", t->name);
    }
    cmf_gguf_close(g);
    char p[4096];
    snprintf(p, sizeof p, "%s", tmp_path("nan.gguf"));
    write_bytes(p, orig, n);
    free(orig);
    const char *out = tmp_path("nan.cmf");
    static const int FLOATS[] = {CMF_DT_F32, CMF_DT_F16, CMF_DT_BF16};
    for (int k = 0; k < 3 && name[0]; k++) {
        nan_warns w = {""};
        cmf_convert_opts o;
        memset(&o, 0, sizeof o);
        o.quant = FLOATS[k];
        o.warn = nan_on_warn;
        o.warn_ctx = &w;
        cmf_status s = cmf_convert_gguf(p, out, &o);
        CHECK_MSG(s == CMF_OK, "NaN -> %s: %s", cmf_dtype_name(FLOATS[k]), cmf_last_error());
        CHECK_MSG(strstr(w.all, "2 NaN/inf value(s) (first at element 5)") && strstr(w.all, "stored as they are"),
                  "NaN -> %s: warnings '%s'", cmf_dtype_name(FLOATS[k]), w.all);
        /* the tensor is named as the CMF file stores it */
        CHECK_MSG(strstr(w.all, "layers.0.self_attn.o_proj.weight"), "NaN -> %s: tensor not named: '%s' (GGUF %s)",
                  cmf_dtype_name(FLOATS[k]), w.all, name);
    }
    cmf_convert_opts o;
    memset(&o, 0, sizeof o);
    o.quant = CMF_DT_Q8_ROW;
    cmf_status s = cmf_convert_gguf(p, out, &o);
    CHECK_MSG(s == CMF_E_FORMAT && strstr(cmf_last_error(), "(first at element 5)"), "NaN -> q8: %d %s", s,
              cmf_last_error());
    unlink(p);
    unlink(out);
}

int main(void) {
    test_convert();
    test_vocab_only();
    test_corrupt();
    test_nan();
    CMF_TEST_END();
}
