/* The --quant policy (CMF_FORMAT.md §2.0) and `cmf requant`:
 *  - cmf_quant_policy on names/shapes for every rule (f16 small/1-D/gates, tid2eid f32, q2tp profile, q8_2f fallback);
 *  - hf-tiny llama and qwen3 converted at q4/q4t/q4tp/q2tp: each tensor's dtype, label Q4_BLOCK, and every matrix
 *    decoding within the §2.14 bound of the source safetensors (amax/7*1.6 for 4-bit, 1-D tensors exact to f16);
 *  - requant of the reference's tiny-F16.cmf to q4tp (library and CLI): matrices within amax/7*1.6 of the f16
 *    values, everything else byte-identical (other tensors, vocab, masks), the file verifies;
 *  - tiny-Q4_BLOCK.cmf: our q4_block encoder applied to the reference reader's dequantization reproduces the
 *    stored bytes of every q4_block tensor (q4 rounding is idempotent). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cmf.h"
#include "convert/convert.h"
#include "convert/emit.h"
#include "convert/requant.h"
#include "convert/safetensors.h"
#include "format/format.h"
#include "quant/dtype.h"
#include "quant/policy.h"
#include "testutil.h"

static void test_policy_rules(void) {
    const uint64_t sq[2] = {64, 64}, odd[2] = {64, 48}, small[2] = {4, 4}, vec[1] = {64}, cube[3] = {2, 32, 32};
    const char *gate = "model.layers.0.mlp.gate_proj.weight", *down = "model.layers.0.mlp.down_proj.weight";
    const char *egate = "model.layers.0.mlp.experts.3.up_proj.weight", *edown = "model.layers.0.mlp.experts.3.down_proj.weight";
    CHECK(cmf_quant_policy(CMF_DT_Q2TP, gate, 2, sq, 0) == CMF_DT_Q2TP);
    CHECK(cmf_quant_policy(CMF_DT_Q2TP, gate, 2, sq, 1) == CMF_DT_Q4TP); /* MoE model: dense FFN stays 4-bit */
    CHECK(cmf_quant_policy(CMF_DT_Q2TP, down, 2, sq, 0) == CMF_DT_Q4TP);
    CHECK(cmf_quant_policy(CMF_DT_Q2TP, egate, 2, sq, 1) == CMF_DT_Q2TP);
    CHECK(cmf_quant_policy(CMF_DT_Q2TP, "model.layers.1.mlp.shared_expert.gate_proj.weight", 2, sq, 1) == CMF_DT_Q2TP);
    CHECK(cmf_quant_policy(CMF_DT_Q2TP, edown, 2, sq, 1) == CMF_DT_Q4TP);
    CHECK(cmf_quant_policy(CMF_DT_Q2TP, "model.mtp.layers.0.mlp.gate_proj.weight", 2, sq, 0) == CMF_DT_Q4TP);
    CHECK(cmf_quant_policy(CMF_DT_Q2TP, "model.embed_tokens.weight", 2, sq, 0) == CMF_DT_Q4TP);
    /* Dory's dense MLP (DORY.md §1.2): mixer.gate_proj / up_proj on the 2-bit plane, its down_proj and the
     * attention mixer's projections not */
    CHECK(cmf_quant_policy(CMF_DT_Q2TP, "backbone.layers.1.mixer.gate_proj.weight", 2, sq, 0) == CMF_DT_Q2TP);
    CHECK(cmf_quant_policy(CMF_DT_Q2TP, "backbone.layers.1.mixer.up_proj.weight", 2, sq, 0) == CMF_DT_Q2TP);
    CHECK(cmf_quant_policy(CMF_DT_Q2TP, "backbone.layers.1.mixer.down_proj.weight", 2, sq, 0) == CMF_DT_Q4TP);
    CHECK(cmf_quant_policy(CMF_DT_Q2TP, "backbone.layers.0.mixer.q_proj.weight", 2, sq, 0) == CMF_DT_Q4TP);
    CHECK(cmf_quant_policy(CMF_DT_Q2TP, "backbone.layers.0.mixer.g_proj.weight", 2, sq, 0) == CMF_DT_Q4TP);
    CHECK(cmf_quant_policy(CMF_DT_Q4TP, "lm_head.weight", 2, sq, 0) == CMF_DT_Q4TP);
    static const int NEED32[] = {CMF_DT_Q4_TILED, CMF_DT_Q4TP, CMF_DT_Q2TP};
    for (int i = 0; i < 3; i++) CHECK(cmf_quant_policy(NEED32[i], gate, 2, odd, 0) == CMF_DT_Q8_2F);
    CHECK(cmf_quant_policy(CMF_DT_Q4_BLOCK, gate, 2, odd, 0) == CMF_DT_Q4_BLOCK); /* q4_block flattens */
    CHECK(cmf_quant_policy(CMF_DT_Q4TP, gate, 2, small, 0) == CMF_DT_F16);
    CHECK(cmf_quant_policy(CMF_DT_Q4TP, "model.norm.weight", 1, vec, 0) == CMF_DT_F16);
    CHECK(cmf_quant_policy(CMF_DT_Q4TP, "x.conv.weight", 3, cube, 0) == CMF_DT_F16);
    CHECK(cmf_quant_policy(CMF_DT_Q4TP, "model.layers.0.mlp.gate.weight", 2, sq, 1) == CMF_DT_F16);
    CHECK(cmf_quant_policy(CMF_DT_Q2TP, "model.layers.0.linear_attn.in_proj_a.weight", 2, sq, 0) == CMF_DT_F16);
    CHECK(cmf_quant_policy(CMF_DT_Q4TP, "model.layers.0.mlp.tid2eid", 2, sq, 0) == CMF_DT_F32);
    CHECK(cmf_quant_policy(CMF_DT_BF16, "model.norm.weight", 1, vec, 0) == CMF_DT_BF16);
    const char *names[2] = {gate, edown};
    CHECK(cmf_policy_has_moe(names, 1) == 0 && cmf_policy_has_moe(names, 2) == 1);
    CHECK(!strcmp(cmf_quant_label(CMF_DT_Q4TP), "Q4_BLOCK") && !strcmp(cmf_quant_label(CMF_DT_Q2TP), "Q4_BLOCK"));
    CHECK(!strcmp(cmf_quant_label(CMF_DT_Q4_TILED), "Q4_BLOCK") && !strcmp(cmf_quant_label(CMF_DT_Q4_BLOCK), "Q4_BLOCK"));
}

/* max |a-b| per row of rows x cols within amax_row/div*1.6 (§2.14); returns 1 when all rows pass */
static int within(const char *what, const float *ref, const float *got, uint64_t rows, uint64_t cols, float div) {
    for (uint64_t r = 0; r < rows; r++) {
        float amax = 0, e = 0;
        for (uint64_t c = 0; c < cols; c++) amax = fmaxf(amax, fabsf(ref[r * cols + c]));
        for (uint64_t c = 0; c < cols; c++) e = fmaxf(e, fabsf(ref[r * cols + c] - got[r * cols + c]));
        if (!(e <= amax / div * 1.6f)) {
            fprintf(stderr, "%s row %llu: error %g > %g\n", what, (unsigned long long)r, (double)e,
                    (double)(amax / div * 1.6f));
            return 0;
        }
    }
    return 1;
}

static const char *label_of(const cmf_file *f) {
    const cJSON *q = cJSON_GetObjectItemCaseSensitive(f->header, "quant_type");
    return cJSON_IsString(q) ? q->valuestring : "";
}

static void test_convert(const char *model, int quant) {
    char dir[512], out[512];
    snprintf(dir, sizeof dir, "%s", shared_path("data/hf-tiny"));
    snprintf(dir + strlen(dir), sizeof dir - strlen(dir), "/%s", model);
    snprintf(out, sizeof out, "%s", tmp_path("quant2_convert.cmf"));
    cmf_convert_opts o;
    memset(&o, 0, sizeof o);
    o.quant = quant;
    cmf_status s = cmf_convert_hf(dir, out, &o);
    CHECK_MSG(s == CMF_OK, "convert %s --quant %s: %s", model, cmf_dtype_name(quant), cmf_last_error());
    if (s) return;
    cmf_file *f = NULL;
    cmf_safetensors *st = NULL;
    CHECK(cmf_file_open(out, &f) == CMF_OK);
    CHECK(cmf_st_open(dir, &st) == CMF_OK);
    if (!f || !st) goto done;
    CHECK_MSG(!strcmp(label_of(f), "Q4_BLOCK"), "%s %s: quant_type %s", model, cmf_dtype_name(quant), label_of(f));
    int n_q2 = 0;
    for (size_t i = 0; i < f->n_tensors; i++) {
        const cmf_tensor *t = &f->tensors[i];
        const cmf_st_tensor *src = cmf_st_find(st, t->name);
        CHECK_MSG(src != NULL, "%s: %s not in the checkpoint", model, t->name);
        if (!src) continue;
        uint64_t n = cmf_st_numel(src);
        int want;
        if (t->ndim != 2 || n < 32)
            want = CMF_DT_F16;
        else if (quant != CMF_DT_Q2TP)
            want = quant;
        else
            want = strstr(t->name, "mlp.gate_proj") || strstr(t->name, "mlp.up_proj") ? CMF_DT_Q2TP : CMF_DT_Q4TP;
        n_q2 += t->dtype == CMF_DT_Q2TP;
        CHECK_MSG(t->dtype == want, "%s --quant %s: %s is %s, want %s", model, cmf_dtype_name(quant), t->name,
                  cmf_dtype_name(t->dtype), cmf_dtype_name(want));
        float *a = malloc(n * sizeof *a), *b = malloc(n * sizeof *b);
        CHECK(a && b && cmf_st_to_f32(src, a) == CMF_OK);
        CHECK_MSG(cmf_dequant(t->dtype, t->ndim, t->shape, t->data, t->nbytes, b) == CMF_OK, "%s: %s", t->name,
                  cmf_last_error());
        if (t->dtype == CMF_DT_F16) {
            for (uint64_t k = 0; k < n; k++) CHECK(b[k] == cmf_f16_round(a[k]));
        } else {
            uint64_t cols = t->shape[1];
            CHECK_MSG(within(t->name, a, b, n / cols, cols, t->dtype == CMF_DT_Q2TP ? 1.5f : 7.0f),
                      "%s --quant %s: %s outside the bound", model, cmf_dtype_name(quant), t->name);
        }
        free(a), free(b);
    }
    if (quant == CMF_DT_Q2TP) CHECK(n_q2 > 0);
done:
    cmf_st_close(st);
    cmf_file_close(f);
    unlink(out);
}

static void test_requant(void) {
    char in[512], out[512];
    snprintf(in, sizeof in, "%s", shared_path("data/cmf-reference/tiny-F16.cmf"));
    snprintf(out, sizeof out, "%s", tmp_path("quant2_requant.cmf"));
    cmf_requant_stats stats = {0, 0};
    cmf_status s = cmf_requant(in, out, CMF_DT_Q4TP, &stats);
    CHECK_MSG(s == CMF_OK, "requant: %s", cmf_last_error());
    cmf_file *a = NULL, *b = NULL;
    CHECK(cmf_file_open(in, &a) == CMF_OK && cmf_file_open(out, &b) == CMF_OK);
    if (!a || !b) goto done;
    char *report = NULL;
    CHECK(cmf_file_verify(b, &report) == CMF_OK);
    free(report);
    CHECK(!strcmp(label_of(b), "Q4_BLOCK") && a->n_tensors == b->n_tensors);
    CHECK(stats.reencoded > 0 && stats.reencoded + stats.copied == a->n_tensors);
    CHECK(a->env.vocab_len == b->env.vocab_len && !memcmp(a->vocab, b->vocab, a->env.vocab_len));
    CHECK(a->env.masks_len == b->env.masks_len && (!a->env.masks_len || !memcmp(a->masks, b->masks, a->env.masks_len)));
    CHECK(a->env.features == b->env.features);
    /* provenance.tool names the requant (cmf info's "written by"), not the converter of the input */
    const cJSON *prov = cJSON_GetObjectItemCaseSensitive(b->header, "provenance");
    const cJSON *tool = cJSON_GetObjectItemCaseSensitive(prov, "tool");
    CHECK_MSG(cJSON_IsString(tool) && !strcmp(tool->valuestring, "cmf requant"), "provenance.tool: %s",
              cJSON_IsString(tool) ? tool->valuestring : "(none)");
    uint64_t nre = 0;
    for (size_t i = 0; i < a->n_tensors; i++) {
        const cmf_tensor *t = &a->tensors[i], *u = cmf_file_find(b, t->name);
        CHECK_MSG(u != NULL, "requant lost %s", t->name);
        if (!u) continue;
        uint64_t n = cmf_tensor_numel(t);
        int matrix = t->ndim == 2 && n >= 32 && !cmf_policy_gate_critical(t->name) && t->dtype != CMF_DT_U8;
        if (!matrix) {
            CHECK_MSG(u->dtype == t->dtype && u->nbytes == t->nbytes && !memcmp(u->data, t->data, t->nbytes),
                      "requant changed %s", t->name);
            continue;
        }
        nre++;
        CHECK_MSG(u->dtype == (t->shape[1] % 32 ? CMF_DT_Q8_2F : CMF_DT_Q4TP), "%s: %s", t->name,
                  cmf_dtype_name(u->dtype));
        float *x = malloc(n * sizeof *x), *y = malloc(n * sizeof *y);
        CHECK(x && y && cmf_dequant(t->dtype, 2, t->shape, t->data, t->nbytes, x) == CMF_OK);
        CHECK(cmf_dequant(u->dtype, 2, u->shape, u->data, u->nbytes, y) == CMF_OK);
        CHECK_MSG(within(t->name, x, y, t->shape[0], t->shape[1], 7.0f), "requant %s outside amax/7*1.6", t->name);
        free(x), free(y);
    }
    CHECK(nre == stats.reencoded);
    /* the CLI: same result; a bad --quant is a usage error and writes nothing */
    const char *bin = getenv("CMF_BIN");
    if (bin) {
        char cmd[2048], out2[512];
        snprintf(out2, sizeof out2, "%s", tmp_path("quant2_requant_cli.cmf"));
        snprintf(cmd, sizeof cmd, "'%s' requant '%s' -o '%s' --quant q4tp 2>/dev/null", bin, in, out2);
        CHECK(system(cmd) == 0);
        cmf_file *c = NULL;
        CHECK(cmf_file_open(out2, &c) == CMF_OK);
        for (size_t i = 0; c && i < b->n_tensors; i++) {
            const cmf_tensor *t = &b->tensors[i], *u = cmf_file_find(c, t->name);
            CHECK(u && u->nbytes == t->nbytes && !memcmp(u->data, t->data, t->nbytes));
        }
        cmf_file_close(c);
        unlink(out2);
        snprintf(cmd, sizeof cmd, "'%s' requant '%s' -o '%s' --quant q3 2>/dev/null", bin, in, out2);
        int rc = system(cmd);
        CHECK(WIFEXITED(rc) && WEXITSTATUS(rc) == 2 && access(out2, F_OK) != 0);
    }
done:
    cmf_file_close(a);
    cmf_file_close(b);
    unlink(out);
    /* errors: a missing input, an unsupported target */
    CHECK(cmf_requant(tmp_path("no-such.cmf"), out, CMF_DT_Q4TP, NULL) != CMF_OK && access(out, F_OK) != 0);
    CHECK(cmf_requant(in, out, CMF_DT_VBIT, NULL) == CMF_E_ARG);
}

static void test_q4_block_idempotent(void) {
    cmf_file *f = NULL;
    cmf_safetensors *st = NULL;
    CHECK(cmf_file_open(shared_path("data/cmf-reference/tiny-Q4_BLOCK.cmf"), &f) == CMF_OK);
    CHECK(cmf_st_open(shared_path("data/cmf-reference/tiny-Q4_BLOCK.dequant.safetensors"), &st) == CMF_OK);
    int n_q4 = 0;
    for (size_t i = 0; f && st && i < f->n_tensors; i++) {
        const cmf_tensor *t = &f->tensors[i];
        if (t->dtype != CMF_DT_Q4_BLOCK) continue;
        const cmf_st_tensor *d = cmf_st_find(st, t->name);
        CHECK_MSG(d != NULL, "%s missing from the dequant file", t->name);
        if (!d) continue;
        uint64_t n = cmf_tensor_numel(t);
        float *x = malloc(n * sizeof *x);
        uint8_t *enc = malloc(t->nbytes);
        CHECK(x && enc && cmf_st_numel(d) == n && cmf_st_to_f32(d, x) == CMF_OK);
        CHECK(cmf_quantize(CMF_DT_Q4_BLOCK, 1, n, x, enc) == CMF_OK);
        CHECK_MSG(!memcmp(enc, t->data, t->nbytes), "q4_block re-encode of %s differs from the stored bytes", t->name);
        n_q4++;
        free(x), free(enc);
    }
    CHECK(n_q4 > 0);
    cmf_st_close(st);
    cmf_file_close(f);
}

int main(void) {
    test_policy_rules();
    static const int Q[4] = {CMF_DT_Q4_BLOCK, CMF_DT_Q4_TILED, CMF_DT_Q4TP, CMF_DT_Q2TP};
    for (int q = 0; q < 4; q++) {
        test_convert("llama", Q[q]);
        test_convert("qwen3", Q[q]);
    }
    test_requant();
    test_q4_block_idempotent();
    CMF_TEST_END();
}
