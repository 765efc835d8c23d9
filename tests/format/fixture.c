/* fixture.c — see fixture.h. */
#include "fixture.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "quant/dtype.h"

static fx_tensor g_t[8];
static size_t g_n;

/* Deterministic pseudo-random floats in [-1, 1). */
static float frand(uint32_t *s) {
    *s = *s * 1664525u + 1013904223u;
    return (float)((*s >> 8) & 0xffff) / 32768.0f - 1.0f;
}

static void add(const char *name, int dtype, int ndim, const uint32_t *shape, uint32_t seed) {
    fx_tensor *t = &g_t[g_n++];
    t->name = name;
    t->dtype = dtype;
    t->ndim = ndim;
    uint64_t n = 1;
    for (int i = 0; i < ndim; i++) n *= (t->shape[i] = shape[i]);
    uint64_t rows = ndim ? shape[0] : 1, cols = rows ? n / rows : 0;
    float *src = malloc(n * sizeof *src);
    for (uint64_t i = 0; i < n; i++) src[i] = frand(&seed) * (1.0f + (float)(i % 7));
    if (cmf_dtype_nbytes(dtype, ndim, shape, &t->nbytes) != 1) abort();
    t->data = malloc(t->nbytes ? t->nbytes : 1);
    if (cmf_quantize(dtype, rows, cols, src, t->data) != CMF_OK) abort();
    free(src);
}

/* A vbit payload (§2.8) for a [4, 64] tensor with widths 3, 4, 5, 8 and arbitrary scales/bits. */
static void add_vbit(void) {
    fx_tensor *t = &g_t[g_n++];
    static const uint8_t bits[4] = {3, 4, 5, 8};
    t->name = "model.layers.1.vbit.weight";
    t->dtype = CMF_DT_VBIT;
    t->ndim = 2;
    t->shape[0] = 4, t->shape[1] = 64;
    t->nbytes = 4 + 2 * 4 * 2 + (3 + 4 + 5 + 8) * 8;
    t->data = malloc(t->nbytes);
    memcpy(t->data, bits, 4);
    uint32_t s = 99;
    for (uint64_t i = 4; i < t->nbytes; i++) {
        s = s * 1664525u + 1013904223u;
        t->data[i] = (uint8_t)(s >> 24);
    }
    for (int i = 0; i < 8; i++) { /* sane f16 scales 0x2c00..: small positive numbers */
        t->data[4 + 2 * i] = (uint8_t)(i * 3);
        t->data[5 + 2 * i] = 0x2c;
    }
}

const fx_tensor *fx_tensors(size_t *n) {
    if (!g_n) {
        /* the first two names have equal length (the duplicate-name test patches one into the other) */
        add("model.layers.0.a_proj.weight", CMF_DT_F32, 2, (const uint32_t[]){4, 8}, 1);
        add("model.layers.0.b_proj.weight", CMF_DT_F16, 2, (const uint32_t[]){8, 8}, 2);
        add("model.layers.0.q8.weight", CMF_DT_Q8_ROW, 2, (const uint32_t[]){16, 32}, 3);
        add("model.layers.0.q82f.weight", CMF_DT_Q8_2F, 2, (const uint32_t[]){12, 40}, 4);
        add("model.layers.0.q4.weight", CMF_DT_Q4_BLOCK, 3, (const uint32_t[]){3, 5, 7}, 5);
        add("model.embed_tokens.weight", CMF_DT_BF16, 2, (const uint32_t[]){128, 96}, 6); /* 24 KiB: 4096-aligned */
        add("model.norm.weight", CMF_DT_F16, 1, (const uint32_t[]){32}, 7);
        add_vbit();
    }
    *n = g_n;
    return g_t;
}

const char fx_vocab[] = "{\"version\":\"1.0\",\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0}}}";

/* One mask ("general-purpose-fallback-task") for num_layers 2, intermediate 64, heads 4: 2*8 + 2*1 + 1 = 19 bytes. */
const uint8_t *fx_masks(size_t *len) {
    static uint8_t buf[512];
    static size_t n;
    if (!n) {
        const char *meta = "{\"default_task\":\"general\",\"masks\":[{\"task_id\":0,\"name\":\"general-purpose-fallback-task\","
                           "\"sparsity\":0.0,\"priority\":\"Fallback\",\"blob_off\":%u,\"blob_len\":19}]}";
        char js[400];
        unsigned off = 0;
        for (int it = 0; it < 3; it++) { /* the offset depends on the meta length: iterate to a fixed point */
            snprintf(js, sizeof js, meta, off);
            off = (unsigned)((8 + strlen(js) + 7) / 8 * 8);
        }
        snprintf(js, sizeof js, meta, off);
        size_t ml = strlen(js);
        fx_put32(buf, 1);
        fx_put32(buf + 4, (uint32_t)ml);
        memcpy(buf + 8, js, ml);
        for (int i = 0; i < 19; i++) buf[off + i] = 0xff;
        buf[off + 18] = 0x03; /* layer gates: 2 layers, tail bits zero */
        n = off + 19;
    }
    *len = n;
    return buf;
}

static cJSON *header(void) {
    const char *js =
        "{\"format\":\"cmf\",\"version\":2,\"arch\":{\"arch_name\":\"tiny-test\",\"hidden_size\":32,"
        "\"intermediate_size\":64,\"num_layers\":2,\"num_attention_heads\":4,\"num_kv_heads\":2,\"head_dim\":8,"
        "\"vocab_size\":128,\"layer_types\":[\"FullAttention\",\"SlidingAttention\"],\"rms_norm_eps\":1e-06,"
        "\"max_position_embeddings\":256,\"rope_theta\":10000.0,\"moe\":null},\"quant_type\":\"Q8_ROW\","
        "\"tokenizer_config\":{\"eos_token_ids\":[1,2]},\"skills\":[],\"provenance\":{\"tool\":\"cmf tests\"}}";
    return cJSON_Parse(js);
}

cmf_status fx_write(const char *path) {
    size_t n, ml;
    const fx_tensor *t = fx_tensors(&n);
    const uint8_t *masks = fx_masks(&ml);
    cmf_writer *w;
    cmf_status st = cmf_writer_new(path, &w);
    if (st) return st;
    for (size_t i = 0; i < n && !st; i++) st = cmf_writer_add(w, t[i].name, t[i].dtype, t[i].ndim, t[i].shape,
                                                              t[i].data, t[i].nbytes);
    if (st) {
        cmf_writer_abort(w);
        return st;
    }
    cmf_writer_set_header(w, header());
    if ((st = cmf_writer_set_vocab(w, fx_vocab, strlen(fx_vocab))) ||
        (st = cmf_writer_set_masks(w, masks, ml, 0))) {
        cmf_writer_abort(w);
        return st;
    }
    return cmf_writer_finish(w);
}

uint8_t *fx_read(const char *path, size_t *len) {
    FILE *fp = fopen(path, "rb");
    if (!fp) {
        fprintf(stderr, "cannot read %s\n", path);
        exit(2);
    }
    fseek(fp, 0, SEEK_END);
    long sz = ftell(fp);
    fseek(fp, 0, SEEK_SET);
    uint8_t *b = malloc((size_t)sz + 1);
    if (fread(b, 1, (size_t)sz, fp) != (size_t)sz) exit(2);
    fclose(fp);
    *len = (size_t)sz;
    return b;
}

void fx_save(const char *path, const uint8_t *buf, size_t len) {
    FILE *fp = fopen(path, "wb");
    if (!fp || fwrite(buf, 1, len, fp) != len) {
        fprintf(stderr, "cannot write %s\n", path);
        exit(2);
    }
    fclose(fp);
}

void fx_put32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}
void fx_put64(uint8_t *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}
uint64_t fx_get64(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}
