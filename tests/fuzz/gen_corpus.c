/* gen_corpus.c — writes the seed corpora of the fuzz targets: `fuzz_gen_corpus OUT_DIR` fills OUT_DIR/<target>/
 * (the committed corpus/ was made with OUT_DIR = tests/fuzz/corpus). Needs CMF_SHARED (or the build's shared dir).
 *
 *   cmf/            the format tests' fixture (tests/format/fixture.c: every section, masks, vocab), and the shared
 *                   reference files tiny-Q4_BLOCK.cmf and tiny-Q8_ROW.cmf (written by the reference converter);
 *   gguf/           tiny GGUF v3 files laid out here from ggml/docs/gguf.md: llama + SentencePiece vocabulary
 *                   (F32/F16/BF16/Q8_0/Q4_0 tensors, tied embeddings), qwen2 + byte-level BPE (biases, lm_head, a
 *                   chat template), qwen3 (q/k norms, head_dim != hidden/heads), a vocab-only file;
 *   tokenizer_json/ small hand-written tokenizer.json files (BPE, WordLevel, WordPiece, Unigram with their usual
 *                   normalizers, pre-tokenizers, post-processors and decoders), the reference CMF's vocab section
 *                   and the tokenizer.json built from each GGUF above;
 *   tokenize/       llama.cpp's tokenizer test strings (shared/data/tokenizer-vectors/ggml-vocab-qwen2.gguf.inp),
 *                   each for the three tokenizers, and a few id lists (see fuzz_tokenize.c for the first byte);
 *   template/       the chat templates of shared/data/tokenizers/{qwen3,llama3}, ChatML, and small templates;
 *   safetensors/    small safetensors files of each dtype.
 * Output is deterministic. Exits non-zero on any failure. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cmf.h"
#include "convert/convert.h"
#include "fixture.h"
#include "format/format.h"
#include "fuzz_util.h"
#include "quant/dtype.h"

static const char *g_out;

static void die(const char *what) {
    fprintf(stderr, "gen_corpus: %s: %s\n", what, cmf_last_error());
    exit(1);
}

static const char *out_path(const char *target, const char *name) {
    static char p[1024];
    snprintf(p, sizeof p, "%s/%s", g_out, target);
    if (mkdir(p, 0755) && errno != EEXIST) die(p);
    snprintf(p, sizeof p, "%s/%s/%s", g_out, target, name);
    return p;
}

static void save(const char *target, const char *name, const void *data, size_t len) {
    const char *p = out_path(target, name);
    FILE *fp = fopen(p, "wb");
    if (!fp || fwrite(data, 1, len, fp) != len || fclose(fp)) die(p);
}

static void save_str(const char *target, const char *name, const char *s) { save(target, name, s, strlen(s)); }

static void copy_shared(const char *target, const char *name, const char *rel) {
    size_t len;
    char *buf = fz_read(fz_shared(rel), &len);
    save(target, name, buf, len);
    free(buf);
}

/* ---- a growable byte buffer and a GGUF v3 writer (ggml/docs/gguf.md) ---- */
typedef struct bbuf {
    uint8_t *p;
    size_t n, cap;
} bbuf;

static void put(bbuf *b, const void *s, size_t n) {
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2 + 256;
        b->p = realloc(b->p, b->cap);
        if (!b->p) die("out of memory");
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
}
static void put_u32(bbuf *b, uint32_t v) {
    uint8_t x[4] = {(uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24)};
    put(b, x, 4);
}
static void put_u64(bbuf *b, uint64_t v) {
    put_u32(b, (uint32_t)v);
    put_u32(b, (uint32_t)(v >> 32));
}
static void put_f32(bbuf *b, float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    put_u32(b, u);
}
static void put_gstr(bbuf *b, const char *s) {
    put_u64(b, strlen(s));
    put(b, s, strlen(s));
}

enum { V_U32 = 4, V_I32 = 5, V_F32 = 6, V_BOOL = 7, V_STR = 8, V_ARR = 9 };
enum { G_F32 = 0, G_F16 = 1, G_Q4_0 = 2, G_Q8_0 = 8, G_BF16 = 30 };

typedef struct gguf_w {
    bbuf kv, info, data;
    uint64_t n_kv, n_t;
} gguf_w;

static void kv_str(gguf_w *w, const char *k, const char *v) {
    put_gstr(&w->kv, k);
    put_u32(&w->kv, V_STR);
    put_gstr(&w->kv, v);
    w->n_kv++;
}
static void kv_u32(gguf_w *w, const char *k, uint32_t v) {
    put_gstr(&w->kv, k);
    put_u32(&w->kv, V_U32);
    put_u32(&w->kv, v);
    w->n_kv++;
}
static void kv_f32(gguf_w *w, const char *k, float v) {
    put_gstr(&w->kv, k);
    put_u32(&w->kv, V_F32);
    put_f32(&w->kv, v);
    w->n_kv++;
}
static void kv_bool(gguf_w *w, const char *k, int v) {
    put_gstr(&w->kv, k);
    put_u32(&w->kv, V_BOOL);
    uint8_t x = (uint8_t)(v != 0);
    put(&w->kv, &x, 1);
    w->n_kv++;
}
static void kv_strs(gguf_w *w, const char *k, const char *const *v, size_t n) {
    put_gstr(&w->kv, k);
    put_u32(&w->kv, V_ARR);
    put_u32(&w->kv, V_STR);
    put_u64(&w->kv, n);
    for (size_t i = 0; i < n; i++) put_gstr(&w->kv, v[i]);
    w->n_kv++;
}
static void kv_f32s(gguf_w *w, const char *k, const float *v, size_t n) {
    put_gstr(&w->kv, k);
    put_u32(&w->kv, V_ARR);
    put_u32(&w->kv, V_F32);
    put_u64(&w->kv, n);
    for (size_t i = 0; i < n; i++) put_f32(&w->kv, v[i]);
    w->n_kv++;
}
static void kv_i32s(gguf_w *w, const char *k, const int32_t *v, size_t n) {
    put_gstr(&w->kv, k);
    put_u32(&w->kv, V_ARR);
    put_u32(&w->kv, V_I32);
    put_u64(&w->kv, n);
    for (size_t i = 0; i < n; i++) put_u32(&w->kv, (uint32_t)v[i]);
    w->n_kv++;
}

static uint32_t g_seed = 12345;
static uint32_t rnd(void) {
    g_seed = g_seed * 1664525u + 1013904223u;
    return g_seed >> 8;
}

/* A tensor of shape ne0 x ne1 (ne1 = 1: 1-D) with deterministic pseudo-random values in `type`. */
static void tensor(gguf_w *w, const char *name, uint64_t ne0, uint64_t ne1, int type) {
    while (w->data.n % 32) put(&w->data, "", 1);
    put_gstr(&w->info, name);
    put_u32(&w->info, ne1 > 1 ? 2 : 1);
    put_u64(&w->info, ne0);
    if (ne1 > 1) put_u64(&w->info, ne1);
    put_u32(&w->info, (uint32_t)type);
    put_u64(&w->info, w->data.n);
    w->n_t++;
    uint64_t n = ne0 * ne1;
    for (uint64_t i = 0; i < n; i++) {
        float f = (float)((int)(rnd() % 2001) - 1000) / 8000.0f;
        if (type == G_F32) put_f32(&w->data, f);
        if (type == G_F16 || type == G_BF16) {
            uint16_t h = type == G_F16 ? cmf_f32_to_f16(f) : cmf_f32_to_bf16(f);
            put(&w->data, &h, 2); /* little-endian host */
        }
    }
    for (uint64_t b = 0; (type == G_Q8_0 || type == G_Q4_0) && b < n / 32; b++) {
        uint16_t d = cmf_f32_to_f16(0.001f + (float)(rnd() % 100) / 20000.0f);
        put(&w->data, &d, 2);
        for (int j = 0; j < (type == G_Q8_0 ? 32 : 16); j++) {
            uint8_t q = (uint8_t)rnd();
            put(&w->data, &q, 1);
        }
    }
}

static void gguf_save(gguf_w *w, const char *name) {
    bbuf f = {0};
    put(&f, "GGUF", 4);
    put_u32(&f, 3);
    put_u64(&f, w->n_t);
    put_u64(&f, w->n_kv);
    put(&f, w->kv.p, w->kv.n);
    if (w->info.n) put(&f, w->info.p, w->info.n);
    while (f.n % 32) put(&f, "", 1);
    if (w->data.n) put(&f, w->data.p, w->data.n);
    save("gguf", name, f.p, f.n);
    free(f.p);
    free(w->kv.p);
    free(w->info.p);
    free(w->data.p);
    memset(w, 0, sizeof *w);
}

/* SentencePiece-style vocabulary (tokenizer.ggml.model "llama"). */
static void spm_vocab(gguf_w *w) {
    static const char *const tok[] = {"<unk>", "<s>", "</s>", "<0x0A>", "<0x41>", "\xe2\x96\x81", "a", "b", "c",
                                      "\xe2\x96\x81\x61", "ab", "\xe2\x96\x81\x61\x62", "h", "e", "l", "o",
                                      "he", "ll", "hell", "hello"};
    enum { N = sizeof tok / sizeof tok[0] };
    float sc[N];
    int32_t ty[N];
    for (int i = 0; i < N; i++) {
        sc[i] = -(float)i;
        ty[i] = i == 0 ? 2 : i < 3 ? 3 : i < 5 ? 6 : 1;
    }
    kv_str(w, "tokenizer.ggml.model", "llama");
    kv_strs(w, "tokenizer.ggml.tokens", tok, N);
    kv_f32s(w, "tokenizer.ggml.scores", sc, N);
    kv_i32s(w, "tokenizer.ggml.token_type", ty, N);
    kv_u32(w, "tokenizer.ggml.bos_token_id", 1);
    kv_u32(w, "tokenizer.ggml.eos_token_id", 2);
    kv_u32(w, "tokenizer.ggml.unknown_token_id", 0);
    kv_bool(w, "tokenizer.ggml.add_bos_token", 1);
}

/* Byte-level BPE vocabulary (tokenizer.ggml.model "gpt2"). */
static void bpe_vocab(gguf_w *w, const char *pre) {
    static const char *const tok[] = {"!", "a", "b", "c", "h", "e", "l", "o", "\xc4\xa0", "\xc4\xa0\x61", "ab",
                                      "he", "ll", "hell", "hello", "\xc4\x8a", "<|endoftext|>", "<|im_start|>",
                                      "<|im_end|>", "<think>"};
    static const char *const merges[] = {"\xc4\xa0 a", "a b", "h e", "l l", "he ll", "hell o"};
    enum { N = sizeof tok / sizeof tok[0] };
    int32_t ty[N];
    for (int i = 0; i < N; i++) ty[i] = i < 16 ? 1 : i < 19 ? 3 : 4;
    kv_str(w, "tokenizer.ggml.model", "gpt2");
    kv_str(w, "tokenizer.ggml.pre", pre);
    kv_strs(w, "tokenizer.ggml.tokens", tok, N);
    kv_i32s(w, "tokenizer.ggml.token_type", ty, N);
    kv_strs(w, "tokenizer.ggml.merges", merges, sizeof merges / sizeof merges[0]);
    kv_u32(w, "tokenizer.ggml.eos_token_id", 16);
    kv_u32(w, "tokenizer.ggml.padding_token_id", 16);
    kv_bool(w, "tokenizer.ggml.add_bos_token", 0);
}

static void arch_kv(gguf_w *w, const char *a, int head_dim) {
    char k[128];
    kv_str(w, "general.architecture", a);
    kv_str(w, "general.name", "fuzz seed");
#define AK(s) (snprintf(k, sizeof k, "%s.%s", a, s), k)
    kv_u32(w, AK("context_length"), 64);
    kv_u32(w, AK("embedding_length"), 32);
    kv_u32(w, AK("feed_forward_length"), 64);
    kv_u32(w, AK("block_count"), 1);
    kv_u32(w, AK("attention.head_count"), 2);
    kv_u32(w, AK("attention.head_count_kv"), 1);
    kv_f32(w, AK("attention.layer_norm_rms_epsilon"), 1e-6f);
    kv_f32(w, AK("rope.freq_base"), 10000.0f);
    if (head_dim) kv_u32(w, AK("attention.key_length"), (uint32_t)head_dim);
    if (head_dim) kv_u32(w, AK("attention.value_length"), (uint32_t)head_dim);
    kv_u32(w, AK("rope.dimension_count"), (uint32_t)(head_dim ? head_dim : 16));
#undef AK
}

static void layer(gguf_w *w, int hd, int bias, int qknorm, const int *types) {
    tensor(w, "blk.0.attn_norm.weight", 32, 1, G_F32);
    tensor(w, "blk.0.attn_q.weight", 32, 2 * (uint64_t)hd, types[0]);
    tensor(w, "blk.0.attn_k.weight", 32, (uint64_t)hd, types[1]);
    tensor(w, "blk.0.attn_v.weight", 32, (uint64_t)hd, types[2]);
    if (bias) {
        tensor(w, "blk.0.attn_q.bias", 2 * (uint64_t)hd, 1, G_F32);
        tensor(w, "blk.0.attn_k.bias", (uint64_t)hd, 1, G_F32);
        tensor(w, "blk.0.attn_v.bias", (uint64_t)hd, 1, G_F32);
    }
    if (qknorm) {
        tensor(w, "blk.0.attn_q_norm.weight", (uint64_t)hd, 1, G_F32);
        tensor(w, "blk.0.attn_k_norm.weight", (uint64_t)hd, 1, G_F32);
    }
    tensor(w, "blk.0.attn_output.weight", 2 * (uint64_t)hd, 32, types[3]);
    tensor(w, "blk.0.ffn_norm.weight", 32, 1, G_F32);
    tensor(w, "blk.0.ffn_gate.weight", 32, 64, types[4]);
    tensor(w, "blk.0.ffn_up.weight", 32, 64, types[5]);
    tensor(w, "blk.0.ffn_down.weight", 64, 32, types[6]);
    tensor(w, "output_norm.weight", 32, 1, G_F32);
}

static void gen_gguf(void) {
    gguf_w w = {0};
    arch_kv(&w, "llama", 0);
    spm_vocab(&w);
    tensor(&w, "token_embd.weight", 32, 20, G_F16);
    static const int t1[7] = {G_Q8_0, G_Q4_0, G_BF16, G_F16, G_Q4_0, G_Q8_0, G_F16};
    layer(&w, 16, 0, 0, t1);
    gguf_save(&w, "llama_spm.gguf");

    arch_kv(&w, "qwen2", 0);
    bpe_vocab(&w, "qwen2");
    kv_str(&w, "tokenizer.chat_template",
           "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
           "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}");
    tensor(&w, "token_embd.weight", 32, 20, G_F32);
    static const int t2[7] = {G_F32, G_F16, G_Q8_0, G_F32, G_F16, G_BF16, G_Q8_0};
    layer(&w, 16, 1, 0, t2);
    tensor(&w, "output.weight", 32, 20, G_Q4_0);
    gguf_save(&w, "qwen2_bpe.gguf");

    arch_kv(&w, "qwen3", 32); /* head_dim 32 != 32 / 2 */
    bpe_vocab(&w, "llama-bpe");
    tensor(&w, "token_embd.weight", 32, 20, G_BF16);
    static const int t3[7] = {G_Q4_0, G_Q4_0, G_Q4_0, G_Q4_0, G_Q4_0, G_Q4_0, G_Q4_0};
    layer(&w, 32, 0, 1, t3);
    gguf_save(&w, "qwen3_bpe.gguf");

    kv_str(&w, "general.architecture", "llama");
    spm_vocab(&w);
    gguf_save(&w, "vocab_only.gguf");

    /* the tokenizer.json built from each file seeds the tokenizer target */
    static const char *const names[4] = {"llama_spm.gguf", "qwen2_bpe.gguf", "qwen3_bpe.gguf", "vocab_only.gguf"};
    for (int i = 0; i < 4; i++) {
        char src[1024], *json = NULL, outname[64];
        size_t len = 0;
        snprintf(src, sizeof src, "%s", out_path("gguf", names[i]));
        if (cmf_gguf_tokenizer_json(src, &json, &len)) die(src);
        snprintf(outname, sizeof outname, "from_%.*s.json", (int)(strlen(names[i]) - 5), names[i]);
        save("tokenizer_json", outname, json, len);
        free(json);
        /* every seed must convert: a seed that fails only tests the first error path */
        if (i < 3) {
            cmf_convert_opts o;
            memset(&o, 0, sizeof o);
            const char *tmp = fz_scratch("seed.cmf");
            if (cmf_convert_gguf(src, tmp, &o)) die(src);
            remove(tmp);
        }
    }
}

/* ---- CMF ---- */
static void gen_cmf(void) {
    if (fx_write(out_path("cmf", "fixture.cmf"))) die("fx_write");
    copy_shared("cmf", "tiny-Q4_BLOCK.cmf", "data/cmf-reference/tiny-Q4_BLOCK.cmf");
    copy_shared("cmf", "tiny-Q8_ROW.cmf", "data/cmf-reference/tiny-Q8_ROW.cmf");
    cmf_file *f = NULL;
    if (cmf_file_open(fz_shared("data/cmf-reference/tiny-F16.cmf"), &f)) die("tiny-F16.cmf");
    if (!f->vocab) die("tiny-F16.cmf has no vocab");
    save("tokenizer_json", "tiny_reference.json", f->vocab, (size_t)f->env.vocab_len);
    cmf_file_close(f);
}

/* ---- tokenizer.json ---- */
static void gen_tokenizer_json(void) {
    save_str("tokenizer_json", "bpe_bytelevel.json",
             "{\"version\":\"1.0\",\"truncation\":null,\"padding\":null,"
             "\"added_tokens\":[{\"id\":9,\"content\":\"<s>\",\"single_word\":false,\"lstrip\":false,\"rstrip\":false,"
             "\"normalized\":false,\"special\":true},{\"id\":10,\"content\":\"</s>\",\"single_word\":false,"
             "\"lstrip\":true,\"rstrip\":false,\"normalized\":true,\"special\":true}],"
             "\"normalizer\":{\"type\":\"NFC\"},"
             "\"pre_tokenizer\":{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"Split\",\"pattern\":{\"Regex\":"
             "\"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\\\r\\\\n\\\\p{L}\\\\p{N}]?\\\\p{L}+|\\\\p{N}{1,3}| ?[^\\\\s\\\\p{L}\\\\p{N}]+"
             "[\\\\r\\\\n]*|\\\\s*[\\\\r\\\\n]+|\\\\s+(?!\\\\S)|\\\\s+\"},\"behavior\":\"Isolated\",\"invert\":false},"
             "{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"trim_offsets\":false,\"use_regex\":false}]},"
             "\"post_processor\":{\"type\":\"TemplateProcessing\",\"single\":[{\"SpecialToken\":{\"id\":\"<s>\","
             "\"type_id\":0}},{\"Sequence\":{\"id\":\"A\",\"type_id\":0}}],\"pair\":[{\"Sequence\":{\"id\":\"A\","
             "\"type_id\":0}},{\"Sequence\":{\"id\":\"B\",\"type_id\":1}}],\"special_tokens\":{\"<s>\":{\"id\":\"<s>\","
             "\"ids\":[9],\"tokens\":[\"<s>\"]}}},"
             "\"decoder\":{\"type\":\"ByteLevel\",\"add_prefix_space\":true,\"trim_offsets\":true,\"use_regex\":true},"
             "\"model\":{\"type\":\"BPE\",\"dropout\":null,\"unk_token\":null,\"continuing_subword_prefix\":null,"
             "\"end_of_word_suffix\":null,\"fuse_unk\":false,\"byte_fallback\":false,\"ignore_merges\":false,"
             "\"vocab\":{\"H\":0,\"e\":1,\"l\":2,\"o\":3,\"\\u0120\":4,\"He\":5,\"ll\":6,\"llo\":7,\"\\u0120w\":8,\"w\":11},"
             "\"merges\":[\"H e\",\"l l\",\"ll o\",[\"\\u0120\",\"w\"]]}}");
    save_str("tokenizer_json", "bpe_spm_bytefallback.json",
             "{\"version\":\"1.0\",\"added_tokens\":[{\"id\":0,\"content\":\"<unk>\",\"special\":true},{\"id\":1,"
             "\"content\":\"<s>\",\"special\":true}],"
             "\"normalizer\":{\"type\":\"Sequence\",\"normalizers\":[{\"type\":\"Prepend\",\"prepend\":\"\\u2581\"},"
             "{\"type\":\"Replace\",\"pattern\":{\"String\":\" \"},\"content\":\"\\u2581\"}]},\"pre_tokenizer\":null,"
             "\"post_processor\":{\"type\":\"TemplateProcessing\",\"single\":[{\"SpecialToken\":{\"id\":\"<s>\","
             "\"type_id\":0}},{\"Sequence\":{\"id\":\"A\",\"type_id\":0}}],\"pair\":[],\"special_tokens\":{\"<s>\":"
             "{\"id\":\"<s>\",\"ids\":[1],\"tokens\":[\"<s>\"]}}},"
             "\"decoder\":{\"type\":\"Sequence\",\"decoders\":[{\"type\":\"Replace\",\"pattern\":{\"String\":"
             "\"\\u2581\"},\"content\":\" \"},{\"type\":\"ByteFallback\"},{\"type\":\"Fuse\"},{\"type\":\"Strip\","
             "\"content\":\" \",\"start\":1,\"stop\":0}]},"
             "\"model\":{\"type\":\"BPE\",\"dropout\":null,\"unk_token\":\"<unk>\",\"fuse_unk\":true,"
             "\"byte_fallback\":true,\"vocab\":{\"<unk>\":0,\"<s>\":1,\"<0x0A>\":2,\"<0xC3>\":3,\"<0xA9>\":4,"
             "\"\\u2581\":5,\"a\":6,\"b\":7,\"\\u2581a\":8,\"ab\":9,\"\\u2581ab\":10},\"merges\":[\"\\u2581 a\","
             "\"a b\",\"\\u2581a b\"]}}");
    save_str("tokenizer_json", "wordpiece_bert.json",
             "{\"version\":\"1.0\",\"added_tokens\":[{\"id\":0,\"content\":\"[PAD]\",\"special\":true},{\"id\":1,"
             "\"content\":\"[UNK]\",\"special\":true},{\"id\":2,\"content\":\"[CLS]\",\"special\":true},{\"id\":3,"
             "\"content\":\"[SEP]\",\"special\":true}],"
             "\"normalizer\":{\"type\":\"BertNormalizer\",\"clean_text\":true,\"handle_chinese_chars\":true,"
             "\"strip_accents\":null,\"lowercase\":true},\"pre_tokenizer\":{\"type\":\"BertPreTokenizer\"},"
             "\"post_processor\":{\"type\":\"BertProcessing\",\"sep\":[\"[SEP]\",3],\"cls\":[\"[CLS]\",2]},"
             "\"decoder\":{\"type\":\"WordPiece\",\"prefix\":\"##\",\"cleanup\":true},"
             "\"model\":{\"type\":\"WordPiece\",\"unk_token\":\"[UNK]\",\"continuing_subword_prefix\":\"##\","
             "\"max_input_chars_per_word\":100,\"vocab\":{\"[PAD]\":0,\"[UNK]\":1,\"[CLS]\":2,\"[SEP]\":3,"
             "\"hello\":4,\"world\":5,\"##s\":6,\"it\":7,\"'\":8,\",\":9,\"!\":10,\"caf\":11,\"##e\":12}}}");
    save_str("tokenizer_json", "wordlevel.json",
             "{\"version\":\"1.0\",\"added_tokens\":[],\"normalizer\":{\"type\":\"Lowercase\"},"
             "\"pre_tokenizer\":{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"WhitespaceSplit\"},"
             "{\"type\":\"Punctuation\",\"behavior\":\"Isolated\"},{\"type\":\"Digits\",\"individual_digits\":true}]},"
             "\"post_processor\":null,\"decoder\":null,"
             "\"model\":{\"type\":\"WordLevel\",\"unk_token\":\"<unk>\",\"vocab\":{\"<unk>\":0,\"hello\":1,"
             "\",\":2,\"world\":3,\"!\":4,\"1\":5,\"2\":6}}}");
    save_str("tokenizer_json", "unigram_metaspace.json",
             "{\"version\":\"1.0\",\"added_tokens\":[{\"id\":0,\"content\":\"<unk>\",\"special\":true},{\"id\":1,"
             "\"content\":\"</s>\",\"special\":true}],"
             "\"normalizer\":{\"type\":\"Sequence\",\"normalizers\":[{\"type\":\"NFKC\"},{\"type\":\"Replace\","
             "\"pattern\":{\"Regex\":\" {2,}\"},\"content\":\" \"}]},"
             "\"pre_tokenizer\":{\"type\":\"Metaspace\",\"replacement\":\"\\u2581\",\"prepend_scheme\":\"always\","
             "\"split\":true},"
             "\"post_processor\":{\"type\":\"TemplateProcessing\",\"single\":[{\"Sequence\":{\"id\":\"A\","
             "\"type_id\":0}},{\"SpecialToken\":{\"id\":\"</s>\",\"type_id\":0}}],\"pair\":[],\"special_tokens\":"
             "{\"</s>\":{\"id\":\"</s>\",\"ids\":[1],\"tokens\":[\"</s>\"]}}},"
             "\"decoder\":{\"type\":\"Metaspace\",\"replacement\":\"\\u2581\",\"prepend_scheme\":\"always\","
             "\"split\":true},"
             "\"model\":{\"type\":\"Unigram\",\"unk_id\":0,\"byte_fallback\":false,\"vocab\":[[\"<unk>\",0.0],"
             "[\"</s>\",0.0],[\"\\u2581\",-2.0],[\"\\u2581hello\",-3.5],[\"hell\",-4.0],[\"o\",-3.0],[\"\\u2581w\","
             "-4.5],[\"orld\",-5.0],[\"!\",-2.5],[\"h\",-6.0],[\"e\",-6.0],[\"l\",-6.0]]}}");
}

/* ---- text for the real tokenizers ---- */
static void gen_tokenize(void) {
    size_t len;
    char *inp = fz_read(fz_shared("data/tokenizer-vectors/ggml-vocab-qwen2.gguf.inp"), &len);
    static const char sep[] = "\n__ggml_vocab_test__\n";
    static const uint8_t modes[3] = {0x00, 0x01, 0x06}; /* qwen3, llama3, mistral + add_special */
    char *p = inp, *end = inp + len;
    int k = 0;
    while (p < end) {
        char *q = strstr(p, sep);
        size_t n = q ? (size_t)(q - p) : (size_t)(end - p);
        char *buf = malloc(n + 1), name[32];
        buf[0] = (char)modes[k % 3];
        memcpy(buf + 1, p, n);
        snprintf(name, sizeof name, "text_%03d", k++);
        save("tokenize", name, buf, n + 1);
        free(buf);
        if (!q) break;
        p = q + sizeof sep - 1;
    }
    free(inp);
    static const char *const extra[] = {"<|im_start|>user\nHi there<|im_end|>\n<think>\n</think>",
                                        "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nhi",
                                        "<s>[INST] caf\xc3\xa9 [/INST]</s>", "\xff\xfe invalid \xc3 utf-8 \xed\xa0\x80"};
    for (int i = 0; i < 4; i++) {
        char buf[256], name[32];
        buf[0] = (char)(i == 2 ? 0x06 : i == 1 ? 0x05 : 0x04);
        size_t n = strlen(extra[i]);
        memcpy(buf + 1, extra[i], n);
        snprintf(name, sizeof name, "special_%d", i);
        save("tokenize", name, buf, n + 1);
    }
    /* mode 1: id lists (little-endian int32), with out-of-range and negative ids */
    static const int32_t ids[] = {9707, 11, 1879, 0, 151643, 151644, 151667, 200000, -1, 128000, 31999, 3};
    for (int which = 0; which < 3; which++) {
        uint8_t buf[1 + sizeof ids];
        buf[0] = (uint8_t)(0x08 | which);
        memcpy(buf + 1, ids, sizeof ids);
        char name[32];
        snprintf(name, sizeof name, "ids_%d", which);
        save("tokenize", name, buf, sizeof buf);
    }
}

/* ---- chat templates ---- */
static void gen_template(void) {
    static const char *const names[2] = {"qwen3", "llama3"};
    for (int i = 0; i < 2; i++) {
        char rel[128], name[64];
        snprintf(rel, sizeof rel, "data/tokenizers/%s/tokenizer_config.json", names[i]);
        size_t len;
        char *txt = fz_read(fz_shared(rel), &len);
        cJSON *j = cJSON_ParseWithLength(txt, len);
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(j, "chat_template");
        if (!cJSON_IsString(t)) die(rel);
        snprintf(name, sizeof name, "%s.jinja", names[i]);
        save_str("template", name, t->valuestring);
        cJSON_Delete(j);
        free(txt);
    }
    save_str("template", "chatml.jinja", cmf_chat_template_chatml());
    save_str("template", "statements.jinja",
             "{%- set ns = namespace(n=0, last='') -%}\n"
             "{% macro show(m, sep=': ') -%}{{ m.role | upper }}{{ sep }}{{ m.content if m.content is string else "
             "m.content | map(attribute='text') | join(' ') }}{%- endmacro %}\n"
             "{% for m in messages if m.role != 'tool' %}{% set ns.n = ns.n + 1 %}{{ loop.index }}/{{ loop.length }} "
             "{{ show(m) }}{% if m.tool_calls is defined %}{% for c in m.tool_calls %}{{ c.function.name }}"
             "({{ c.function.arguments | tojson }}){% endfor %}{% endif %}{% if loop.last %}{% break %}{% endif %}\n"
             "{% else %}none{% endfor %}\n"
             "{% filter trim %}  {{ ns.n }} {{ messages | length }} {{ tools[0].function.name | default('x') }} "
             "{% endfilter %}\n"
             "{% raw %}{{ not evaluated }}{% endraw %}{# comment #}\n"
             "{% if add_generation_prompt and not enable_thinking %}{{ '<think>\\n\\n</think>\\n\\n' }}"
             "{% elif bos_token is none %}{{ raise_exception('no bos') }}{% else %}{{ bos_token ~ eos_token }}"
             "{% endif %}");
    save_str("template", "expressions.jinja",
             "{{ (1 + 2 * 3 - 4 / 2) // 1 }} {{ 7 % 3 }} {{ 2 ** 10 }} {{ [1, 2, 3][1:] }} {{ 'abc'[::-1] }} "
             "{{ {'a': 1, 'b': [2, 3]} | tojson }} {{ 'x' in 'xyz' }} {{ range(3) | list }} "
             "{{ '%s' ~ 'a' ~ 1 }} {{ 'A,B'.split(',') | reverse | join('|') }} {{ '  t  '.strip() }} "
             "{{ messages | selectattr('role', 'equalto', 'user') | list | length }} "
             "{{ messages[0]['content'].startswith('You') }} {{ none is none }} {{ 3 if false else 4 }} "
             "{% set x, y = 1, 2 %}{{ x + y }} {{ 'a' ~ 1 ~ true }} {{ (messages | first).role | title }} "
             "{{ tools | items | list | length if tools is mapping else tools | count }} "
             "{{ strftime_now('%Y') | length }} {{ 'q' * 3 }} {{ [3, 1, 2] | sort | last }} {{ -1 | abs }}");
}

/* ---- safetensors ---- */
static void st_file(const char *name, const char *header_json, const void *data, size_t n) {
    bbuf b = {0};
    size_t hl = strlen(header_json);
    put_u64(&b, hl);
    put(&b, header_json, hl);
    if (n) put(&b, data, n);
    save("safetensors", name, b.p, b.n);
    free(b.p);
}

static void gen_safetensors(void) {
    uint8_t d[256];
    for (int i = 0; i < 256; i++) d[i] = (uint8_t)(i * 37 + 11);
    st_file("f32_f16_bf16.safetensors",
            "{\"__metadata__\":{\"format\":\"pt\"},\"a\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]},"
            "\"b\":{\"dtype\":\"F16\",\"shape\":[4],\"data_offsets\":[24,32]},\"c\":{\"dtype\":\"BF16\",\"shape\":[2,2,2],"
            "\"data_offsets\":[32,48]}}",
            d, 48);
    st_file("ints_scalar_empty.safetensors",
            "{\"i\":{\"dtype\":\"I32\",\"shape\":[3],\"data_offsets\":[0,12]},\"l\":{\"dtype\":\"I64\",\"shape\":[2],"
            "\"data_offsets\":[12,28]},\"s\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[28,32]},"
            "\"e\":{\"dtype\":\"F16\",\"shape\":[0,4],\"data_offsets\":[32,32]},\"u\":{\"dtype\":\"U8\",\"shape\":[5],"
            "\"data_offsets\":[32,37]}}    ",
            d, 37);
    st_file("empty.safetensors", "{}", NULL, 0);
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: fuzz_gen_corpus OUT_DIR\n");
        return 2;
    }
    g_out = argv[1];
    if (mkdir(g_out, 0755) && errno != EEXIST) die(g_out);
    gen_cmf();
    gen_gguf();
    gen_tokenizer_json();
    gen_tokenize();
    gen_template();
    gen_safetensors();
    fprintf(stderr, "gen_corpus: wrote %s\n", g_out);
    return 0;
}
