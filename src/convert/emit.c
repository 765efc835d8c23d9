/* emit.c — shared converter back end: per-tensor dtype policy (CMF_FORMAT.md §2.0), encoding, writer calls and
 * progress reports. */
#include "convert/emit.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "model/dory.h"
#include "model/model.h"
#include "model/o1.h"
#include "quant/dtype.h"
#include "quant/policy.h"
#include "util/error.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

const char *cmf_quant_label(int dtype) {
    switch (dtype) {
    case CMF_DT_F32: return "F32";
    case CMF_DT_F16: return "F16";
    case CMF_DT_BF16: return "BF16";
    case CMF_DT_Q8_ROW: return "Q8_ROW";
    case CMF_DT_Q8_2F: return "Q8_2F";
    /* cortiq labels every 4-bit family (and the q2tp profile, whose skeleton is q4tp) as Q4_BLOCK */
    case CMF_DT_Q4_BLOCK:
    case CMF_DT_Q4_TILED:
    case CMF_DT_Q4TP:
    case CMF_DT_Q2TP: return "Q4_BLOCK";
    default: return NULL;
    }
}

void cmf_convert_warn(const cmf_convert_opts *opts, const char *fmt, ...) {
    if (!opts || !opts->warn) return;
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    opts->warn(opts->warn_ctx, msg);
}

cmf_status cmf_emit_begin(cmf_emit *e, const char *out_path, const cmf_convert_opts *opts, uint64_t total) {
    memset(e, 0, sizeof *e);
    if (!opts || !out_path) return cmf_err(CMF_E_ARG, "convert: NULL output path or options");
    if (!cmf_quant_label(opts->quant))
        return cmf_err(CMF_E_ARG, "convert: target dtype %d (%s) is not one of f32, f16, bf16, q8_row, q8_2f, q4_block, "
                       "q4_tiled, q4tp, q2tp",
                       opts->quant, cmf_dtype_name(opts->quant) ? cmf_dtype_name(opts->quant) : "?");
    e->opts = opts;
    e->quant = opts->quant;
    e->total = total;
    e->t0 = now_s();
    return cmf_writer_new(out_path, &e->w);
}

float *cmf_emit_scratch(cmf_emit *e, uint64_t n) {
    if (n > e->buf_n) {
        float *nb = realloc(e->buf, (n ? n : 1) * sizeof *nb);
        if (!nb) return NULL;
        e->buf = nb;
        e->buf_n = n;
    }
    return e->buf;
}

int cmf_emit_dtype(const cmf_emit *e, const char *name, int ndim, const uint64_t *shape) {
    return cmf_quant_policy(e->quant, name, ndim, shape, e->has_moe);
}

cmf_status cmf_emit_check_values(const cmf_convert_opts *opts, const char *name, int dt, const float *data,
                                 uint64_t n) {
    uint64_t bad = 0, first_bad = 0;
    float maxabs = 0;
    for (uint64_t i = 0; i < n; i++) {
        float a = fabsf(data[i]);
        if (!isfinite(a)) {
            if (!bad++) first_bad = i;
        } else if (a > maxabs) {
            maxabs = a;
        }
    }
    const int is_float = dt == CMF_DT_F32 || dt == CMF_DT_F16 || dt == CMF_DT_BF16;
    /* the target the user asked for, when the policy gave this tensor another dtype (--quant q2tp keeps all but
     * the gate/up planes at q4tp: review13 read "q4tp cannot encode" under q2tp as a wrong name) */
    char why[96] = "";
    if (opts && !opts->quant_auto && opts->quant != dt && cmf_dtype_name(opts->quant))
        snprintf(why, sizeof why, " (--quant %s stores this tensor as %s)", cmf_dtype_name(opts->quant),
                 cmf_dtype_name(dt));
    if (bad && !is_float)
        return cmf_err(CMF_E_FORMAT, "tensor '%s': the source holds %llu NaN/inf value(s) (first at element %llu), "
                                     "which %s cannot encode%s",
                       name, (unsigned long long)bad, (unsigned long long)first_bad, cmf_dtype_name(dt), why);
    if (bad)
        cmf_convert_warn(opts, "tensor '%s': the source holds %llu NaN/inf value(s) (first at element %llu); they are "
                               "stored as they are",
                         name, (unsigned long long)bad, (unsigned long long)first_bad);
    /* 65520 = 65504 + half an f16 ulp at the top binade: from there round-to-nearest-even gives inf */
    if (dt == CMF_DT_F16 && maxabs >= 65520.0f)
        return cmf_err(CMF_E_ARG, "tensor '%s': max |x| = %g is past the f16 range (largest finite f16 65504) and "
                                  "would become inf; use --quant bf16 or --quant f32",
                       name, (double)maxabs);
    return CMF_OK;
}

cmf_status cmf_emit_tensor(cmf_emit *e, const char *name, int ndim, const uint64_t *shape, const float *data,
                           uint64_t src_bytes) {
    if (ndim > CMF_MAX_DIMS) return cmf_err(CMF_E_ARG, "tensor '%s': %d dimensions (CMF allows 6)", name, ndim);
    uint32_t sh[CMF_MAX_DIMS] = {0};
    uint64_t n = 1;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] > UINT32_MAX)
            return cmf_err(CMF_E_ARG, "tensor '%s': dimension %d = %llu does not fit a u32", name, i,
                           (unsigned long long)shape[i]);
        sh[i] = (uint32_t)shape[i];
        n *= shape[i];
    }
    int dt = cmf_emit_dtype(e, name, ndim, shape);
    uint64_t nbytes;
    if (cmf_dtype_nbytes(dt, ndim, sh, &nbytes) != 1)
        return cmf_err(CMF_E_ARG, "tensor '%s': no fixed %s size for this shape", name, cmf_dtype_name(dt));
    if (nbytes > e->enc_n) {
        uint8_t *nb = realloc(e->enc, nbytes ? nbytes : 1);
        if (!nb) return cmf_err(CMF_E_NOMEM, "tensor '%s': cannot allocate %llu bytes", name, (unsigned long long)nbytes);
        e->enc = nb;
        e->enc_n = nbytes;
    }
    cmf_status s = cmf_emit_check_values(e->opts, name, dt, data, n);
    if (s) return s;
    uint8_t *o = e->enc;
    switch (dt) {
    case CMF_DT_F32:
        for (uint64_t i = 0; i < n; i++) {
            uint32_t b;
            memcpy(&b, &data[i], 4);
            for (int k = 0; k < 4; k++) o[4 * i + k] = (uint8_t)(b >> (8 * k));
        }
        break;
    case CMF_DT_F16:
    case CMF_DT_BF16:
        for (uint64_t i = 0; i < n; i++) {
            uint16_t h = dt == CMF_DT_F16 ? cmf_f32_to_f16(data[i]) : cmf_f32_to_bf16(data[i]);
            o[2 * i] = (uint8_t)h;
            o[2 * i + 1] = (uint8_t)(h >> 8);
        }
        break;
    default: /* 2-D by the policy */
        s = cmf_quantize(dt, shape[0], shape[1], data, o);
        if (s) return cmf_err_prefix(s, "tensor '%s': ", name);
    }
    s = cmf_writer_add(e->w, name, dt, ndim, sh, o, nbytes);
    if (s) return cmf_err_prefix(s, "tensor '%s': ", name);
    e->done += src_bytes;
    if (e->opts->progress && e->opts->on_progress)
        e->opts->on_progress(e->opts->progress_ctx, e->done, e->total, now_s() - e->t0, name);
    return CMF_OK;
}

/* Adds provenance.o1_attn to the header when opts->o1 asks for it (see cmf_convert_opts). The spec is checked
 * against the header's own arch (the layers the runtime will see) with the runtime's parser, so a file never
 * carries a hint its reader would refuse. */
static cmf_status o1_hint(cJSON *header, const cmf_convert_opts *o) {
    if (!o->o1 || !strcmp(o->o1, "off") || !strcmp(o->o1, "0")) return CMF_OK;
    const cJSON *arch = cJSON_GetObjectItemCaseSensitive(header, "arch");
    const int m = o->o1_m ? o->o1_m : 32, w = o->o1_window ? o->o1_window : 128, sink = o->o1_sink_set ? o->o1_sink : 4;
    if (m < 4 || m > 1024 || w < 1 || w > (1 << 24) || sink < 0 || sink > (1 << 20))
        return cmf_err(CMF_E_ARG, "--o1: need 4 <= m <= 1024, 1 <= window <= 2^24, 0 <= sink <= 2^20 (got m %d, "
                                  "window %d, sink %d)", m, w, sink);
    cmf_config c;
    cmf_status st;
    const cJSON *dory = cJSON_GetObjectItemCaseSensitive(arch, "dory");
    const cJSON *pat = cJSON_GetObjectItemCaseSensitive(dory, "layer_pattern");
    if (dory) { /* Dory: the spec counts full-attention sub-layers of the pattern (dory.h cmf_dory_o1_layers) */
        memset(&c, 0, sizeof c);
        if (!cJSON_IsString(pat)) return cmf_err(CMF_E_FORMAT, "--o1: arch.dory.layer_pattern is missing");
        c.n_layers = (int)strlen(pat->valuestring);
        st = CMF_OK;
    } else if ((st = cmf_config_from_header(header, &c)) != CMF_OK) {
        cmf_config_free(&c);
        return cmf_err_prefix(st, "--o1: ");
    }
    uint8_t *on = c.n_layers > 0 ? calloc((size_t)c.n_layers, 1) : NULL;
    int n = -2;
    if (on && dory) {
        if (cmf_dory_o1_layers(pat->valuestring, c.n_layers, o->o1, on) == CMF_OK)
            for (int l = n = 0; l < c.n_layers; l++) n += on[l];
        else
            n = -1;
    } else if (on) {
        n = cmf_o1_parse_layers(o->o1, c.n_layers, c.is_sliding, on);
    }
    if (n == -2) st = cmf_err(CMF_E_NOMEM, "--o1: out of memory");
    else if (n < 0) st = CMF_E_ARG; /* the parser's message names the spec or the layer */
    else if (n == 0) st = cmf_err(CMF_E_ARG, "--o1 %s: the model has no full-attention layer to convert", o->o1);
    else if (c.attn_softcap > 0)
        st = cmf_err(CMF_E_UNSUPPORTED, "--o1: attention soft-capping (arch.attn_logit_softcapping %g) has no "
                                        "far-field form", (double)c.attn_softcap);
    cJSON *hint = st == CMF_OK ? cJSON_CreateObject() : NULL;
    if (st == CMF_OK && hint) {
        if (!strcmp(o->o1, "all")) {
            cJSON_AddStringToObject(hint, "layers", "all");
        } else {
            cJSON *arr = cJSON_AddArrayToObject(hint, "layers");
            for (int l = 0; arr && l < c.n_layers; l++)
                if (on[l]) cJSON_AddItemToArray(arr, cJSON_CreateNumber(l));
        }
        cJSON_AddNumberToObject(hint, "m", m);
        cJSON_AddNumberToObject(hint, "w", w);
        cJSON_AddNumberToObject(hint, "sink", sink);
        cJSON *prov = cJSON_GetObjectItemCaseSensitive(header, "provenance");
        if (!cJSON_IsObject(prov)) prov = cJSON_AddObjectToObject(header, "provenance");
        if (prov) cJSON_AddItemToObject(prov, "o1_attn", hint), hint = NULL;
        else st = cmf_err(CMF_E_NOMEM, "--o1: out of memory");
    } else if (st == CMF_OK) {
        st = cmf_err(CMF_E_NOMEM, "--o1: out of memory");
    }
    cJSON_Delete(hint);
    free(on);
    cmf_config_free(&c);
    return st;
}

/* tokenizer_config ids the runtime silently drops (model.c keeps only ids < vocab_size): a warning, as the file
 * still runs (the model can never emit such an eos id, and such a bos is never added) */
static void warn_token_ids(const cmf_convert_opts *opts, const cJSON *header) {
    const cJSON *vs = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(header, "arch"), "vocab_size");
    const cJSON *tc = cJSON_GetObjectItemCaseSensitive(header, "tokenizer_config");
    if (!cJSON_IsNumber(vs) || !cJSON_IsObject(tc)) return;
    static const char *const KEYS[] = {"eos_token_ids", "bos_token_id", "pad_token_id"};
    for (int k = 0; k < 3; k++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(tc, KEYS[k]), *e;
        if (cJSON_IsNumber(v) && v->valuedouble >= vs->valuedouble)
            cmf_convert_warn(opts, "%s %.0f is not below vocab_size %.0f: the runtime ignores it", KEYS[k],
                             v->valuedouble, vs->valuedouble);
        for (e = cJSON_IsArray(v) ? v->child : NULL; e; e = e->next)
            if (cJSON_IsNumber(e) && e->valuedouble >= vs->valuedouble)
                cmf_convert_warn(opts, "eos token id %.0f is not below vocab_size %.0f: the runtime ignores it",
                                 e->valuedouble, vs->valuedouble);
    }
}

/* emit.h */
cmf_status cmf_emit_check_output(void *ctx, const char *tmp_path) {
    (void)ctx;
    cmf_file *f = NULL;
    cmf_status st = cmf_file_open(tmp_path, &f);
    if (!st) st = cmf_model_check_file(f);
    cmf_file_close(f);
    if (st) return cmf_err_prefix(st, "the written file would not load (nothing was written): ");
    return CMF_OK;
}

cmf_status cmf_emit_end(cmf_emit *e, cmf_status st, cJSON *header, const char *vocab, size_t vocab_len) {
    free(e->buf);
    free(e->enc);
    e->buf = NULL;
    e->enc = NULL;
    if (!e->w) {
        cJSON_Delete(header);
        return st;
    }
    if (!st && !header) st = cmf_err(CMF_E_NOMEM, "convert: no header");
    if (!st && vocab) st = cmf_writer_set_vocab(e->w, vocab, vocab_len);
    if (!st) st = o1_hint(header, e->opts);
    if (st) {
        cmf_writer_abort(e->w);
        e->w = NULL;
        cJSON_Delete(header);
        return st;
    }
    warn_token_ids(e->opts, header);
    cmf_writer_set_header(e->w, header);
    cmf_writer_set_check(e->w, cmf_emit_check_output, NULL);
    st = cmf_writer_finish(e->w);
    e->w = NULL;
    if (!st && e->opts->progress && e->opts->on_progress)
        e->opts->on_progress(e->opts->progress_ctx, e->total, e->total, now_s() - e->t0, "");
    return st;
}
