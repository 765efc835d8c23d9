/* test_convert_kquant.c — the GGUF types cmf re-encodes (Q4_1, Q5_0, Q5_1, Q2_K..Q6_K, Q8_K, IQ4_NL, IQ4_XS;
 * gguf_kquant.c).
 *
 * Data: tests/data/gguf_kquant, written by its make.py from gguf-py's numpy dequantizer (llama.cpp's
 * gguf-py/gguf/quants.py; make.py --check-ggml also found it bit-identical to ggml's C dequantize_row_*):
 *   - every tensor of types.gguf (random valid blocks of each type) decodes to exactly the bits of the F32 tensor
 *     of the same name in types_ref.gguf;
 *   - model_kq.gguf (a 1-layer llama with Q4_K, Q6_K and Q2_K matrices) converted with --quant f32 equals
 *     model_f32.gguf (the same model with gguf-py's F32 dequantization) converted the same way: every tensor and
 *     the logits of a prefill, bit for bit;
 *   - without --quant (quant_auto) the K-quant matrices become q8_row (gguf_convert.c auto_target), F16 ones
 *     follow the f32 target, and one note names them; the logits stay close to the exact ones (the error is printed: README's convert row);
 *   - an IQ2_XS tensor is refused with a message naming the type and the tensor. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmf.h"
#include "convert/convert.h"
#include "convert/gguf.h"
#include "format/format.h"
#include "quant/dtype.h"
#include "testutil.h"
#include "util/fileio.h"

static void test_types(void) {
    char qpath[4096];
    snprintf(qpath, sizeof qpath, "%s", testdata_path("gguf_kquant/types.gguf"));
    cmf_gguf *q = NULL, *r = NULL;
    CHECK_MSG(cmf_gguf_open(qpath, &q) == CMF_OK, "%s", cmf_last_error());
    CHECK_MSG(cmf_gguf_open(testdata_path("gguf_kquant/types_ref.gguf"), &r) == CMF_OK, "%s", cmf_last_error());
    if (!q || !r) goto done;
    static const struct {
        const char *name;
        int type;
    } WANT[] = {{"q4_1", CMF_GGML_Q4_1}, {"q5_0", CMF_GGML_Q5_0}, {"q5_1", CMF_GGML_Q5_1},
                {"q2_k", CMF_GGML_Q2_K}, {"q3_k", CMF_GGML_Q3_K}, {"q4_k", CMF_GGML_Q4_K},
                {"q5_k", CMF_GGML_Q5_K}, {"q6_k", CMF_GGML_Q6_K}, {"q8_k", CMF_GGML_Q8_K},
                {"iq4_nl", CMF_GGML_IQ4_NL}, {"iq4_xs", CMF_GGML_IQ4_XS}};
    CHECK(q->n_tensors == sizeof WANT / sizeof WANT[0] && r->n_tensors == q->n_tensors);
    for (size_t i = 0; i < sizeof WANT / sizeof WANT[0]; i++) {
        const cmf_gguf_tensor *t = cmf_gguf_tensor_find(q, WANT[i].name), *rt = cmf_gguf_tensor_find(r, WANT[i].name);
        CHECK_MSG(t && rt, "%s missing", WANT[i].name);
        if (!t || !rt) continue;
        CHECK(t->type == WANT[i].type && rt->type == CMF_GGML_F32 && cmf_gguf_type_decodable(t->type));
        uint64_t n = cmf_gguf_numel(t);
        CHECK(n == cmf_gguf_numel(rt) && n == 1024);
        float *a = malloc(n * sizeof *a), *b = malloc(n * sizeof *b);
        CHECK(cmf_gguf_tensor_f32(t, a) == CMF_OK && cmf_gguf_tensor_f32(rt, b) == CMF_OK);
        uint64_t bad = 0, first = 0;
        for (uint64_t k = 0; k < n; k++)
            if (memcmp(&a[k], &b[k], 4) && !bad++) first = k;
        CHECK_MSG(bad == 0, "%s: %llu of %llu values differ from gguf-py's (first at %llu: %.9g vs %.9g)",
                  WANT[i].name, (unsigned long long)bad, (unsigned long long)n, (unsigned long long)first,
                  (double)a[first], (double)b[first]);
        free(a);
        free(b);
    }
    /* the block decoder declines the types it does not own */
    float one[32];
    uint8_t zeros[64] = {0};
    CHECK(cmf_gguf_dequant_blocks(CMF_GGML_Q4_0, zeros, 32, one) == 0);
    CHECK(cmf_gguf_dequant_blocks(CMF_GGML_F32, zeros, 1, one) == 0);
    CHECK(!strcmp(cmf_gguf_type_name(CMF_GGML_Q6_K), "Q6_K") && !strcmp(cmf_gguf_type_name(17), "IQ2_XS"));
    CHECK(!cmf_gguf_type_decodable(17) && !cmf_gguf_type_decodable(35) && !cmf_gguf_type_decodable(26));
done:
    cmf_gguf_close(q);
    cmf_gguf_close(r);
}

typedef struct {
    char msgs[4][1024];
    int n;
} warns;

static void on_warn(void *ctx, const char *msg) {
    warns *w = ctx;
    if (w->n < 4) snprintf(w->msgs[w->n], sizeof w->msgs[0], "%s", msg);
    w->n++;
}

/* Converts a model GGUF of tests/data/gguf_kquant to tmp `out`; quant_auto as given. */
static cmf_status convert(const char *src, const char *out, int quant, int quant_auto, warns *w) {
    char in[4096], o[4096];
    snprintf(in, sizeof in, "%s", testdata_path(src));
    snprintf(o, sizeof o, "%s", tmp_path(out));
    cmf_convert_opts opts;
    memset(&opts, 0, sizeof opts);
    opts.quant = quant;
    opts.quant_auto = quant_auto;
    opts.warn = on_warn;
    opts.warn_ctx = w;
    cmf_status s = cmf_convert_gguf(in, o, &opts);
    CHECK_MSG(s == CMF_OK, "convert %s: %s", src, cmf_last_error());
    return s;
}

static const int32_t TOKENS[] = {1, 7, 30, 2, 19, 19, 4, 11, 0, 25, 31, 8};
#define N_TOKENS ((int)(sizeof TOKENS / sizeof TOKENS[0]))

/* All logits of one prefill of TOKENS (malloc'd, N_TOKENS x vocab), or NULL. */
static float *logits_of(const char *tmp_name, int *vocab) {
    char p[4096];
    snprintf(p, sizeof p, "%s", tmp_path(tmp_name));
    cmf_model *m = NULL;
    cmf_session *s = NULL;
    float *out = NULL;
    CHECK_MSG(cmf_model_load(p, NULL, &m) == CMF_OK, "load %s: %s", tmp_name, cmf_last_error());
    if (m && cmf_session_new(m, 64, &s) == CMF_OK) {
        *vocab = cmf_model_vocab_size(m);
        out = malloc((size_t)N_TOKENS * (size_t)*vocab * sizeof *out);
        if (cmf_session_prefill(s, TOKENS, N_TOKENS, out) != CMF_OK) {
            CHECK_MSG(0, "prefill %s: %s", tmp_name, cmf_last_error());
            free(out);
            out = NULL;
        }
    }
    cmf_session_free(s);
    cmf_model_free(m);
    return out;
}

static void test_model_exact(void) {
    warns w = {0};
    if (convert("gguf_kquant/model_kq.gguf", "kq_f32.cmf", CMF_DT_F32, 0, &w) ||
        convert("gguf_kquant/model_f32.gguf", "ref_f32.cmf", CMF_DT_F32, 0, &w))
        return;
    /* one "no tokenizer" warning per conversion, no re-encoding note (explicit --quant) */
    CHECK_MSG(w.n == 2 && !strstr(w.msgs[0], "re-encoded") && !strstr(w.msgs[1], "re-encoded"), "%d warnings: %s",
              w.n, w.msgs[0]);
    cmf_file *a = NULL, *b = NULL;
    char pa[4096];
    snprintf(pa, sizeof pa, "%s", tmp_path("kq_f32.cmf"));
    CHECK(cmf_file_open(pa, &a) == CMF_OK);
    CHECK(cmf_file_open(tmp_path("ref_f32.cmf"), &b) == CMF_OK);
    if (a && b) {
        CHECK(a->n_tensors == b->n_tensors && a->n_tensors == 11);
        for (size_t i = 0; i < a->n_tensors; i++) {
            const cmf_tensor *ta = &a->tensors[i], *tb = cmf_file_find(b, ta->name);
            CHECK_MSG(tb && ta->dtype == CMF_DT_F32 && tb->dtype == CMF_DT_F32 && ta->nbytes == tb->nbytes &&
                          !memcmp(ta->data, tb->data, ta->nbytes),
                      "%s differs", ta->name);
        }
    }
    cmf_file_close(a);
    cmf_file_close(b);
    int va = 0, vb = 0;
    float *la = logits_of("kq_f32.cmf", &va), *lb = logits_of("ref_f32.cmf", &vb);
    CHECK(la && lb && va == 32 && vb == 32);
    if (la && lb && va == vb) {
        size_t n = (size_t)N_TOKENS * (size_t)va, bad = 0;
        for (size_t i = 0; i < n; i++) bad += !isfinite(la[i]) || memcmp(&la[i], &lb[i], 4) != 0;
        CHECK_MSG(bad == 0, "%zu of %zu logits differ", bad, n);
    }
    free(la);
    free(lb);
}

static void test_model_auto(void) {
    warns w = {0};
    if (convert("gguf_kquant/model_kq.gguf", "kq_auto.cmf", CMF_DT_F32, 1, &w)) return;
    int notes = 0;
    for (int i = 0; i < w.n && i < 4; i++)
        if (strstr(w.msgs[i], "re-encoded")) {
            notes++;
            CHECK_MSG(strstr(w.msgs[i], "(1 Q2_K, 3 Q4_K, 2 Q6_K)") && strstr(w.msgs[i], "re-encoded as q8_row") &&
                          strstr(w.msgs[i], "--quant f32"),
                      "note: %s", w.msgs[i]);
        }
    CHECK_MSG(notes == 1, "%d notes", notes);
    cmf_file *f = NULL;
    CHECK(cmf_file_open(tmp_path("kq_auto.cmf"), &f) == CMF_OK);
    static const struct {
        const char *name;
        int dtype;
    } WANT[] = {{"model.embed_tokens.weight", CMF_DT_Q8_ROW},
                {"model.layers.0.self_attn.q_proj.weight", CMF_DT_Q8_ROW},
                {"model.layers.0.self_attn.k_proj.weight", CMF_DT_Q8_ROW},
                {"model.layers.0.self_attn.v_proj.weight", CMF_DT_Q8_ROW},
                {"model.layers.0.self_attn.o_proj.weight", CMF_DT_F32}, /* F16 source, f32 target */
                {"model.layers.0.mlp.gate_proj.weight", CMF_DT_Q8_ROW},
                {"model.layers.0.mlp.up_proj.weight", CMF_DT_Q8_ROW},
                {"model.layers.0.mlp.down_proj.weight", CMF_DT_F32}};
    for (size_t i = 0; f && i < sizeof WANT / sizeof WANT[0]; i++) {
        const cmf_tensor *t = cmf_file_find(f, WANT[i].name);
        CHECK_MSG(t && t->dtype == WANT[i].dtype, "%s: dtype %d, want %d", WANT[i].name, t ? t->dtype : -1,
                  WANT[i].dtype);
    }
    cmf_file_close(f);
    int va = 0, vb = 0;
    float *la = logits_of("kq_auto.cmf", &va), *lb = logits_of("ref_f32.cmf", &vb);
    if (la && lb && va == vb) {
        float rel = cmf_test_rel_diff(lb, la, (size_t)N_TOKENS * (size_t)va);
        int agree = 0;
        for (int i = 0; i < N_TOKENS; i++)
            agree += cmf_test_argmax(la + (size_t)i * va, va) == cmf_test_argmax(lb + (size_t)i * va, va);
        printf("quant_auto: logits max rel diff %.4f vs the exact f32 decoding, argmax agrees at %d/%d\n", rel,
               agree, N_TOKENS);
        CHECK_MSG(rel < 0.1f, "quant_auto logits rel diff %g", rel);
    } else {
        CHECK(0);
    }
    free(la);
    free(lb);
}

/* model_kq.gguf with attn_q's type id patched to IQ2_XS (17; 74 bytes per 256, so the extent stays in range). */
static void test_iq_refused(void) {
    char *buf = NULL;
    size_t len = 0;
    CHECK(cmf_read_file(testdata_path("gguf_kquant/model_kq.gguf"), &buf, &len) == CMF_OK);
    if (!buf) return;
    static const char NAME[] = "blk.0.attn_q.weight";
    char *p = NULL;
    for (size_t i = 0; i + sizeof NAME < len && !p; i++)
        if (!memcmp(buf + i, NAME, sizeof NAME - 1)) p = buf + i + sizeof NAME - 1;
    CHECK(p != NULL);
    if (p) {
        uint32_t ndim, type;
        memcpy(&ndim, p, 4);
        CHECK(ndim == 2);
        char *tp = p + 4 + 8 * ndim;
        memcpy(&type, tp, 4);
        CHECK(type == CMF_GGML_Q4_K);
        type = 17;
        memcpy(tp, &type, 4);
        char path[4096];
        snprintf(path, sizeof path, "%s", tmp_path("iq2xs.gguf"));
        FILE *f = fopen(path, "wb");
        CHECK(f && fwrite(buf, 1, len, f) == len);
        if (f) fclose(f);
        cmf_convert_opts o;
        memset(&o, 0, sizeof o);
        o.quant = CMF_DT_F32;
        cmf_status s = cmf_convert_gguf(path, tmp_path("iq2xs.cmf"), &o);
        CHECK_MSG(s == CMF_E_UNSUPPORTED && strstr(cmf_last_error(), "ggml type IQ2_XS (17)") &&
                      strstr(cmf_last_error(), "'blk.0.attn_q.weight'"),
                  "%d %s", s, cmf_last_error());
    }
    free(buf);
}

int main(void) {
    test_types();
    test_model_exact();
    test_model_auto();
    test_iq_refused();
    CMF_TEST_END();
}
