/* GGUF import of every supported tensor type (F32, F16, BF16, Q8_0, Q4_0) for every supported architecture
 * (llama, qwen2 with q/k/v biases, qwen3 with q/k norms and head_dim != hidden/heads), on small random models
 * written by tests/bench/gguf_writer.c. Checks:
 *  - header.arch: arch_name, rope_pairing (llama "interleaved", qwen2/qwen3 "half"), head_dim, num_kv_heads,
 *    tie_word_embeddings, quant_type label;
 *  - every tensor: HF name, row-major shape [ne1, ne0], stored dtype (Q4_0 -> q4_tiled without --quant, else the
 *    requested quant; Q8_0 -> f16 for the default f32 target (no --quant), f32 for an explicit f32, or the
 *    requested quant, others as the target) and
 *    decoded values: Q4_0 bit-identical to (q - 8)·d computed here from the block layout, Q8_0 = f16round(q·d) or
 *    exactly q·d, F32/F16/BF16 exact;
 *  - the converted model runs: a prefill gives finite logits, and Q4_0 / Q8_0 models give the logits of an F32
 *    GGUF holding the same decoded values (only the kernels differ);
 *  - errors: an unsupported ggml type, architecture or missing key names the tensor / key. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmf.h"
#include "convert/convert.h"
#include "convert/gguf.h"
#include "format/format.h"
#include "gguf_writer.h"
#include "quant/dtype.h"
#include "testutil.h"

enum { HID = 64, NH = 4, NKV = 2, FFN = 96, VOCAB = 64, NL = 2 };

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint32_t rnd(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng >> 11);
}
static float frnd(float a) { return a * (2.0f * (float)(rnd() % 1000001) / 1000000.0f - 1.0f); }

/* A random payload of n elements in `type` and its expected decoded values (exp, n floats). */
static uint8_t *make_payload(int type, uint64_t n, float *exp, size_t *nbytes) {
    *nbytes = gw_nbytes(type, n);
    uint8_t *p = malloc(*nbytes);
    for (uint64_t i = 0; type == GW_F32 && i < n; i++) {
        exp[i] = frnd(0.2f);
        memcpy(p + 4 * i, &exp[i], 4);
    }
    for (uint64_t i = 0; (type == GW_F16 || type == GW_BF16) && i < n; i++) {
        uint16_t h = type == GW_F16 ? cmf_f32_to_f16(frnd(0.2f)) : cmf_f32_to_bf16(frnd(0.2f));
        exp[i] = type == GW_F16 ? cmf_f16_to_f32(h) : cmf_bf16_to_f32(h);
        p[2 * i] = (uint8_t)h;
        p[2 * i + 1] = (uint8_t)(h >> 8);
    }
    for (uint64_t b = 0; type == GW_Q8_0 && b < n / 32; b++) { /* f16 d, int8 q[32]: x = q·d */
        uint8_t *blk = p + 34 * b;
        uint16_t d = cmf_f32_to_f16(0.0005f + 0.002f * (float)(rnd() % 1000) / 1000.0f);
        blk[0] = (uint8_t)d;
        blk[1] = (uint8_t)(d >> 8);
        for (int j = 0; j < 32; j++) {
            blk[2 + j] = (uint8_t)rnd();
            exp[32 * b + (uint64_t)j] = (float)(int8_t)blk[2 + j] * cmf_f16_to_f32(d);
        }
    }
    for (uint64_t b = 0; (type == GW_Q4_0 || type == GW_Q4_1) && b < n / 32; b++) {
        /* Q4_0: f16 d, qs[16]; element j < 16 is the low nibble of qs[j], j >= 16 the high nibble of qs[j-16] */
        size_t bs = type == GW_Q4_0 ? 18 : 20;
        uint8_t *blk = p + bs * b;
        uint16_t d = cmf_f32_to_f16(0.005f + 0.02f * (float)(rnd() % 1000) / 1000.0f);
        blk[0] = (uint8_t)d;
        blk[1] = (uint8_t)(d >> 8);
        for (size_t j = 2; j < bs; j++) blk[j] = (uint8_t)rnd();
        for (int j = 0; j < 32; j++) {
            int q = j < 16 ? blk[2 + j] & 15 : blk[2 + j - 16] >> 4;
            exp[32 * b + (uint64_t)j] = (float)(q - 8) * cmf_f16_to_f32(d);
        }
    }
    return p;
}

typedef struct expect_t {
    char hf[96];
    int ndim;
    uint64_t rows, cols;
    int src_type;
    float *vals;
    uint64_t n;
} expect_t;

typedef struct model_t {
    expect_t e[64];
    int n;
} model_t;

/* Adds a tensor to the GGUF (and, with `as_f32`, the expected values as an F32 tensor instead). */
static void add(gw *w, model_t *m, const char *gguf, const char *hf, uint64_t ne0, uint64_t ne1, int type,
                const model_t *as_f32) {
    int ndim = ne1 ? 2 : 1;
    uint64_t ne[2] = {ne0, ne1}, n = ne0 * (ne1 ? ne1 : 1);
    if (ndim == 1) type = GW_F32;
    expect_t *e = &m->e[m->n];
    snprintf(e->hf, sizeof e->hf, "%s", hf);
    e->ndim = ndim;
    e->rows = ndim == 2 ? ne1 : ne0;
    e->cols = ne0;
    e->n = n;
    e->vals = malloc(n * sizeof(float));
    if (as_f32) { /* the twin: same decoded values, stored as F32 */
        memcpy(e->vals, as_f32->e[m->n].vals, n * sizeof(float));
        e->src_type = GW_F32;
        gw_tensor(w, gguf, ndim, ne, GW_F32, e->vals, n * 4);
    } else {
        size_t nb;
        uint8_t *p = make_payload(type, n, e->vals, &nb);
        e->src_type = type;
        gw_tensor(w, gguf, ndim, ne, type, p, nb);
        free(p);
    }
    m->n++;
}

/* Writes a random model of `arch` with 2-D tensors of `type`; as_f32 != NULL writes its decoded twin instead. */
static void write_model(const char *path, const char *arch, int type, model_t *m, const model_t *as_f32) {
    int qwen3 = !strcmp(arch, "qwen3"), qwen2 = !strcmp(arch, "qwen2");
    int hd = qwen3 ? 32 : HID / NH;
    char k[128], g[64], h[96];
    gw *w = gw_new();
    gw_str(w, "general.architecture", arch);
#define KEY(s) (snprintf(k, sizeof k, "%s." s, arch), k)
    gw_u32(w, KEY("embedding_length"), HID);
    gw_u32(w, KEY("feed_forward_length"), FFN);
    gw_u32(w, KEY("block_count"), NL);
    gw_u32(w, KEY("attention.head_count"), NH);
    gw_u32(w, KEY("attention.head_count_kv"), NKV);
    if (qwen3) gw_u32(w, KEY("attention.key_length"), (uint32_t)hd);
    gw_u32(w, KEY("context_length"), 128);
    gw_f32(w, KEY("attention.layer_norm_rms_epsilon"), 1e-6f);
    gw_f32(w, KEY("rope.freq_base"), qwen2 || qwen3 ? 1000000.0f : 10000.0f);
#undef KEY
    m->n = 0;
    add(w, m, "token_embd.weight", "model.embed_tokens.weight", HID, VOCAB, type, as_f32);
    for (int l = 0; l < NL; l++) {
        static const struct {
            const char *g, *h;
            int in, out; /* 0 hidden, 1 q dims, 2 kv dims, 3 ffn, 4 head_dim, -1 none (1-D) */
        } T[] = {
            {"attn_norm.weight", "input_layernorm.weight", 0, -1},
            {"attn_q.weight", "self_attn.q_proj.weight", 0, 1},
            {"attn_k.weight", "self_attn.k_proj.weight", 0, 2},
            {"attn_v.weight", "self_attn.v_proj.weight", 0, 2},
            {"attn_q.bias", "self_attn.q_proj.bias", 1, -1},
            {"attn_k.bias", "self_attn.k_proj.bias", 2, -1},
            {"attn_v.bias", "self_attn.v_proj.bias", 2, -1},
            {"attn_q_norm.weight", "self_attn.q_norm.weight", 4, -1},
            {"attn_k_norm.weight", "self_attn.k_norm.weight", 4, -1},
            {"attn_output.weight", "self_attn.o_proj.weight", 1, 0},
            {"ffn_norm.weight", "post_attention_layernorm.weight", 0, -1},
            {"ffn_gate.weight", "mlp.gate_proj.weight", 0, 3},
            {"ffn_up.weight", "mlp.up_proj.weight", 0, 3},
            {"ffn_down.weight", "mlp.down_proj.weight", 3, 0},
        };
        const int dims[] = {HID, NH * hd, NKV * hd, FFN, hd};
        for (size_t i = 0; i < sizeof T / sizeof T[0]; i++) {
            if (strstr(T[i].g, ".bias") && !qwen2) continue;
            if (strstr(T[i].g, "_norm.weight") && strncmp(T[i].g, "attn_norm", 9) && strncmp(T[i].g, "ffn_norm", 8) &&
                !qwen3)
                continue;
            snprintf(g, sizeof g, "blk.%d.%s", l, T[i].g);
            snprintf(h, sizeof h, "model.layers.%d.%s", l, T[i].h);
            add(w, m, g, h, (uint64_t)dims[T[i].in], T[i].out < 0 ? 0 : (uint64_t)dims[T[i].out], type, as_f32);
        }
    }
    add(w, m, "output_norm.weight", "model.norm.weight", HID, 0, type, as_f32);
    if (!qwen2) add(w, m, "output.weight", "lm_head.weight", HID, VOCAB, type, as_f32); /* qwen2: tied */
    CHECK(gw_write(w, path) == 0);
    gw_free(w);
}

static void free_model(model_t *m) {
    for (int i = 0; i < m->n; i++) free(m->e[i].vals);
    m->n = 0;
}

/* 1: the f32 target stands for `cmf convert` without --quant (opts.quant_auto: Q8_0 stored as f16); 0: an
 * explicit --quant f32 (Q8_0 kept exact in f32). */
static int g_auto = 1;

static cmf_status convert(const char *src, const char *dst, int quant) {
    cmf_convert_opts o;
    memset(&o, 0, sizeof o);
    o.quant = quant;
    o.quant_auto = g_auto && quant == CMF_DT_F32;
    return cmf_convert_gguf(src, dst, &o);
}

static float *logits_of(const char *path, int n) {
    cmf_model *m = NULL;
    cmf_session *s = NULL;
    float *lg = NULL;
    if (cmf_model_load(path, NULL, &m) != CMF_OK) {
        fprintf(stderr, "load %s: %s\n", path, cmf_last_error());
        return NULL;
    }
    int32_t ids[12];
    for (int i = 0; i < n; i++) ids[i] = (int32_t)((i * 37 + 5) % VOCAB);
    if (cmf_session_new(m, 64, &s) == CMF_OK) {
        lg = malloc((size_t)n * VOCAB * sizeof(float));
        if (cmf_session_prefill(s, ids, n, lg) != CMF_OK) {
            fprintf(stderr, "prefill %s: %s\n", path, cmf_last_error());
            free(lg);
            lg = NULL;
        }
    }
    cmf_session_free(s);
    cmf_model_free(m);
    return lg;
}

static const char *arch_str(const cmf_file *f, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(f->header, "arch"), key);
    return cJSON_IsString(v) ? v->valuestring : "";
}
static double arch_num(const cmf_file *f, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(f->header, "arch"), key);
    return cJSON_IsNumber(v) ? v->valuedouble : -1;
}

/* Converts and checks one (arch, type, target) case. */
static void check_case(const char *arch, int type, int quant) {
    static const char *TN[] = {[GW_F32] = "F32", [GW_F16] = "F16", [GW_Q4_0] = "Q4_0", [GW_Q8_0] = "Q8_0",
                               [GW_BF16] = "BF16"};
    char src[256], dst[300], tag[64];
    snprintf(tag, sizeof tag, "%s-%s-%s%s", arch, TN[type], cmf_dtype_name(quant), g_auto ? "" : "-explicit");
    snprintf(src, sizeof src, "%s", tmp_path(tag));
    strcat(src, ".gguf");
    snprintf(dst, sizeof dst, "%s.cmf", src);
    model_t m;
    write_model(src, arch, type, &m, NULL);
    cmf_status st = convert(src, dst, quant);
    CHECK_MSG(st == CMF_OK, "%s: %s", tag, cmf_last_error());
    cmf_file *f = NULL;
    if (st || cmf_file_open(dst, &f) != CMF_OK) {
        free_model(&m);
        return;
    }
    int llama = !strcmp(arch, "llama");
    CHECK_MSG(!strcmp(arch_str(f, "arch_name"), arch), "%s", tag);
    CHECK_MSG(!strcmp(arch_str(f, "rope_pairing"), llama ? "interleaved" : "half"), "%s: %s", tag,
              arch_str(f, "rope_pairing"));
    CHECK_MSG(arch_num(f, "head_dim") == (!strcmp(arch, "qwen3") ? 32 : HID / NH), "%s", tag);
    CHECK(arch_num(f, "num_kv_heads") == NKV);
    const cJSON *tie = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(f->header, "arch"),
                                                        "tie_word_embeddings");
    CHECK_MSG(cJSON_IsTrue(tie) == !strcmp(arch, "qwen2"), "%s", tag);
    const cJSON *qt = cJSON_GetObjectItemCaseSensitive(f->header, "quant_type");
    const int repack = g_auto && quant == CMF_DT_F32; /* Q4_0 kept as q4_tiled: no --quant (or q4 / q4t) */
    const char *want_label = type == GW_Q4_0 && repack ? "Q4_BLOCK"
                             : type == GW_Q8_0 && quant == CMF_DT_F32 && g_auto ? "F16"
                             : quant == CMF_DT_Q8_ROW ? "Q8_ROW" : "F32";
    CHECK_MSG(cJSON_IsString(qt) && !strcmp(qt->valuestring, want_label), "%s: quant_type %s, want %s", tag,
              cJSON_IsString(qt) ? qt->valuestring : "?", want_label);
    for (int i = 0; i < m.n; i++) {
        const expect_t *e = &m.e[i];
        const cmf_tensor *t = cmf_file_find(f, e->hf);
        CHECK_MSG(t != NULL, "%s: tensor %s missing", tag, e->hf);
        if (!t) continue;
        CHECK_MSG(t->ndim == e->ndim && t->shape[0] == e->rows && (e->ndim == 1 || t->shape[1] == e->cols),
                  "%s: %s shape", tag, e->hf);
        int want = e->ndim == 1 ? (quant == CMF_DT_F32 || quant == CMF_DT_BF16 ? quant : CMF_DT_F16)
                   : e->src_type == GW_Q4_0 && repack ? CMF_DT_Q4_TILED
                   : e->src_type == GW_Q8_0 && quant == CMF_DT_F32 && g_auto ? CMF_DT_F16 : quant;
        CHECK_MSG(t->dtype == want, "%s: %s dtype %s, want %s", tag, e->hf, cmf_dtype_name(t->dtype),
                  cmf_dtype_name(want));
        float *got = malloc(e->n * sizeof(float));
        if (cmf_dequant(t->dtype, t->ndim, t->shape, t->data, t->nbytes, got) == CMF_OK) {
            uint64_t bad = 0;
            for (uint64_t j = 0; j < e->n; j++) {
                float x = e->vals[j];
                if (t->dtype == CMF_DT_F16) x = cmf_f16_round(x);
                if (t->dtype == CMF_DT_F32 || t->dtype == CMF_DT_F16 || t->dtype == CMF_DT_Q4_TILED)
                    bad += memcmp(&x, &got[j], 4) != 0;
                else /* q8_row re-quantization: within half a step of the row scale */
                    bad += fabsf(x - got[j]) > 0.02f;
            }
            CHECK_MSG(bad == 0, "%s: %s: %llu of %llu values differ", tag, e->hf, (unsigned long long)bad,
                      (unsigned long long)e->n);
        } else {
            CHECK_MSG(0, "%s: %s: dequant: %s", tag, e->hf, cmf_last_error());
        }
        free(got);
    }
    cmf_file_close(f);

    float *lg = logits_of(dst, 12);
    CHECK_MSG(lg != NULL, "%s: model does not run", tag);
    int finite = lg != NULL;
    for (int i = 0; lg && i < 12 * VOCAB; i++) finite &= isfinite(lg[i]) != 0;
    CHECK_MSG(finite, "%s: non-finite logits", tag);
    if (lg && (type == GW_Q4_0 || type == GW_Q8_0) && quant == CMF_DT_F32) {
        /* the twin: an F32 GGUF of the same decoded values (Q8_0's rounded to f16 as the importer stores them) */
        model_t twin;
        char tsrc[300], tdst[320];
        snprintf(tsrc, sizeof tsrc, "%s.twin.gguf", src);
        snprintf(tdst, sizeof tdst, "%s.twin.cmf", src);
        if (type == GW_Q8_0 && g_auto)
            for (int i = 0; i < m.n; i++)
                for (uint64_t j = 0; m.e[i].ndim == 2 && j < m.e[i].n; j++) m.e[i].vals[j] = cmf_f16_round(m.e[i].vals[j]);
        write_model(tsrc, arch, GW_F32, &twin, &m);
        CHECK(convert(tsrc, tdst, CMF_DT_F32) == CMF_OK);
        float *ref = logits_of(tdst, 12);
        CHECK(ref != NULL);
        double maxabs = 0, maxdiff = 0;
        for (int i = 0; ref && i < 12 * VOCAB; i++) {
            maxabs = fmax(maxabs, fabs(ref[i]));
            maxdiff = fmax(maxdiff, fabs(ref[i] - lg[i]));
        }
        CHECK_MSG(ref && maxdiff <= 1e-2 * maxabs, "%s: logits differ from the f32 twin by %g (max |logit| %g)", tag,
                  maxdiff, maxabs);
        free(ref);
        free_model(&twin);
        remove(tsrc);
        remove(tdst);
    }
    free(lg);
    free_model(&m);
    remove(src);
    remove(dst);
}

static void expect_err(const char *tag, const char *path, cmf_status want, const char *needle) {
    cmf_status st = convert(path, tmp_path("err.cmf"), CMF_DT_F32);
    CHECK_MSG(st == want && strstr(cmf_last_error(), needle), "%s: status %d, message '%s' (want '%s')", tag, st,
              cmf_last_error(), needle);
}

static void test_errors(void) {
    char p[512];
    snprintf(p, sizeof p, "%s", tmp_path("bad.gguf"));
    gw *w = gw_new();
    uint64_t ne[2] = {64, 64};
    float z[64 * 64] = {0};
    gw_str(w, "general.architecture", "gpt2");
    gw_tensor(w, "token_embd.weight", 2, ne, GW_F32, z, sizeof z);
    CHECK(gw_write(w, p) == 0);
    gw_free(w);
    expect_err("unknown arch", p, CMF_E_UNSUPPORTED, "'gpt2'");

    model_t m;
    write_model(p, "llama", GW_F32, &m, NULL);
    free_model(&m);
    /* the same model with one IQ2_XS tensor (ggml type 17: 74-byte blocks of 256, here zeros; Q4_1, the K-quants,
     * IQ4_NL and IQ4_XS are decoded now: tests/convert/test_convert_kquant) */
    w = gw_new();
    gw_str(w, "general.architecture", "llama");
    uint64_t ne_iq[2] = {256, 16};
    gw_tensor(w, "blk.0.attn_q.weight", 2, ne_iq, 17, z, 16 * 74);
    gw_u32(w, "llama.embedding_length", 64);
    CHECK(gw_write(w, p) == 0);
    gw_free(w);
    expect_err("IQ2_XS", p, CMF_E_UNSUPPORTED, "'blk.0.attn_q.weight': ggml type IQ2_XS (17)");
    w = gw_new(); /* MXFP4 (ggml type 39, gpt-oss: 17-byte blocks of 32) is named too, not "unknown" */
    gw_str(w, "general.architecture", "llama");
    uint64_t ne_mx[2] = {64, 16};
    gw_tensor(w, "blk.0.attn_q.weight", 2, ne_mx, 39, z, 16 * 2 * 17);
    gw_u32(w, "llama.embedding_length", 64);
    CHECK(gw_write(w, p) == 0);
    gw_free(w);
    expect_err("MXFP4", p, CMF_E_UNSUPPORTED, "'blk.0.attn_q.weight': ggml type MXFP4 (39)");

    w = gw_new(); /* qwen3 without qwen3.block_count */
    gw_str(w, "general.architecture", "qwen3");
    gw_u32(w, "qwen3.embedding_length", 64);
    gw_u32(w, "qwen3.feed_forward_length", 96);
    gw_tensor(w, "token_embd.weight", 2, ne, GW_F32, z, sizeof z);
    CHECK(gw_write(w, p) == 0);
    gw_free(w);
    expect_err("missing key", p, CMF_E_FORMAT, "qwen3.block_count");

    /* a Q4_0 block whose f16 scale is NaN (review14: the lossless repack skipped the NaN check of the decoded
     * path): refused naming the tensor and the block, by the repack and by a re-encode (--quant q8) alike */
    write_model(p, "llama", GW_Q4_0, &m, NULL);
    free_model(&m);
    cmf_gguf *g = NULL;
    long at = -1;
    if (cmf_gguf_open(p, &g) == CMF_OK) {
        for (size_t i = 0; i < g->n_tensors; i++)
            if (!strcmp(g->tensors[i].name, "blk.0.attn_k.weight")) at = (long)(g->tensors[i].data - g->map.data);
        cmf_gguf_close(g);
    }
    CHECK(at > 0);
    FILE *f = at > 0 ? fopen(p, "r+b") : NULL;
    if (f) {
        const uint8_t nan16[2] = {0x00, 0x7e}; /* block 3's scale */
        CHECK(fseek(f, at + 3 * 18, SEEK_SET) == 0 && fwrite(nan16, 1, 2, f) == 2);
        fclose(f);
    }
    expect_err("Q4_0 NaN scale", p, CMF_E_FORMAT, "'blk.0.attn_k.weight': 1 Q4_0 block(s) have a NaN/inf scale "
                                                  "(first: block 3, elements 96..127)");
    CHECK_MSG(convert(p, tmp_path("err.cmf"), CMF_DT_Q8_ROW) == CMF_E_FORMAT &&
                  strstr(cmf_last_error(), "self_attn.k_proj.weight': the source holds 32 NaN/inf value(s) (first at "
                                           "element 96)"),
              "Q4_0 NaN scale -> q8: %s", cmf_last_error());
    remove(p);
}

int main(void) {
    static const char *ARCH[] = {"llama", "qwen2", "qwen3"};
    static const int TYPES[] = {GW_F32, GW_F16, GW_BF16, GW_Q8_0, GW_Q4_0};
    for (size_t a = 0; a < 3; a++)
        for (size_t t = 0; t < sizeof TYPES / sizeof TYPES[0]; t++) check_case(ARCH[a], TYPES[t], CMF_DT_F32);
    check_case("llama", GW_Q8_0, CMF_DT_Q8_ROW); /* Q8_0 and Q4_0 re-quantized on request */
    check_case("qwen3", GW_Q4_0, CMF_DT_Q8_ROW);
    g_auto = 0; /* an explicit --quant f32 keeps Q8_0's decoded values exactly (f32 tensors, f32 twin logits) */
    check_case("qwen2", GW_Q8_0, CMF_DT_F32);
    g_auto = 1;
    test_errors();
    CMF_TEST_END();
}
