/* requant.c — `cmf requant`: decode each matrix of a CMF file and re-encode it under the converter's policy
 * (CMF_FORMAT.md §2.0, §6.2); everything else is carried over unchanged. */
#include "convert/requant.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#include "convert/emit.h"
#include "format/format.h"
#include "quant/dtype.h"
#include "quant/policy.h"
#include "util/error.h"

/* Does the policy treat this tensor as a matrix (i.e. give it the chosen quant or its fallback)? */
static int is_matrix(const cmf_tensor *t) {
    if (t->ndim != 2 || t->dtype == CMF_DT_U8) return 0;
    uint64_t sh[2] = {t->shape[0], t->shape[1]};
    /* a matrix under the policy is one whose dtype would be q8_row for --quant q8_row */
    return cmf_quant_policy(CMF_DT_Q8_ROW, t->name, 2, sh, 0) == CMF_DT_Q8_ROW;
}

static cmf_status reencode(cmf_writer *w, const cmf_tensor *t, int dt, float **buf, uint64_t *buf_n, uint8_t **enc,
                           uint64_t *enc_n) {
    uint64_t rows = t->shape[0], cols = t->shape[1], n = rows * cols, nb;
    if (cmf_dtype_nbytes(dt, 2, t->shape, &nb) != 1)
        return cmf_err(CMF_E_ARG, "no fixed %s size for shape [%llu, %llu]", cmf_dtype_name(dt),
                       (unsigned long long)rows, (unsigned long long)cols);
    if (n > *buf_n) {
        float *p = realloc(*buf, n * sizeof *p);
        if (!p) return cmf_err(CMF_E_NOMEM, "cannot allocate %llu floats", (unsigned long long)n);
        *buf = p, *buf_n = n;
    }
    if (nb > *enc_n) {
        uint8_t *p = realloc(*enc, nb);
        if (!p) return cmf_err(CMF_E_NOMEM, "cannot allocate %llu bytes", (unsigned long long)nb);
        *enc = p, *enc_n = nb;
    }
    cmf_status s = cmf_dequant(t->dtype, t->ndim, t->shape, t->data, t->nbytes, *buf);
    if (!s) s = cmf_emit_check_values(NULL, t->name, dt, *buf, n);
    if (!s) s = cmf_quantize(dt, rows, cols, *buf, *enc);
    if (!s) s = cmf_writer_add(w, t->name, dt, 2, t->shape, *enc, nb);
    return s;
}

cmf_status cmf_requant(const char *in_path, const char *out_path, int quant, cmf_requant_stats *stats) {
    if (!in_path || !out_path) return cmf_err(CMF_E_ARG, "requant: NULL path");
    if (!cmf_quant_label(quant))
        return cmf_err(CMF_E_ARG, "requant: target dtype %d (%s) is not one of f32, f16, bf16, q8_row, q8_2f, "
                       "q4_block, q4_tiled, q4tp, q2tp", quant, cmf_dtype_name(quant) ? cmf_dtype_name(quant) : "?");
    /* the output (or the writer's out.tmp / out.blob.tmp) must not be the input */
    cmf_status s = cmf_writer_check_source(out_path, in_path, "re-encoding");
    if (s) return s;
    cmf_file *f = NULL;
    s = cmf_file_open(in_path, &f);
    if (s) return cmf_err_prefix(s, "requant: "); /* cmf_file_open's message names the path */
    /* The header, directory and sections are copied or re-written with fresh hashes: check them first (each tensor's
     * hash is checked below as it is read), so a corrupt input is refused rather than laundered. */
    s = cmf_file_verify_meta(f);
    if (s) {
        cmf_file_close(f);
        return cmf_err_prefix(s, "requant: the input is corrupt (`cmf verify` lists every problem): ");
    }
    /* A sparse index section (§1.9) is not carried over: it is deprecated, unused by readers, and the format
     * writer does not emit one. */
    if (f->env.features & CMF_FEAT_SKILL_FILE)
        s = cmf_err(CMF_E_UNSUPPORTED, "requant %s: standalone skill files (feature bit 6) are not supported",
                    in_path);
    int has_moe = 0;
    for (size_t i = 0; i < f->n_tensors; i++) has_moe |= strstr(f->tensors[i].name, ".experts.") != NULL;
    cmf_writer *w = NULL;
    if (!s) s = cmf_writer_new(out_path, &w);
    float *buf = NULL;
    uint8_t *enc = NULL;
    uint64_t buf_n = 0, enc_n = 0, nre = 0, ncp = 0;
    for (size_t i = 0; i < f->n_tensors && !s; i++) {
        const cmf_tensor *t = &f->tensors[i];
        int dt = t->dtype;
        /* the recorded hash (§1.5, §1.10) is checked before a tensor is copied or re-encoded: the writer re-hashes
         * what it is given, so a corrupt input would otherwise come out with a valid hash */
        uint64_t h = cmf_hash64(t->data, t->nbytes);
        if (h != t->hash) {
            s = cmf_err(CMF_E_INTEGRITY, "requant %s: tensor '%s': hash64 %016llx does not match the recorded %016llx "
                                         "(the input is corrupt; `cmf verify` lists every problem)",
                        in_path, t->name, (unsigned long long)h, (unsigned long long)t->hash);
            break;
        }
        if (is_matrix(t)) {
            uint64_t sh[2] = {t->shape[0], t->shape[1]};
            dt = cmf_quant_policy(quant, t->name, 2, sh, has_moe);
        }
        if (dt == t->dtype) {
            s = cmf_writer_add(w, t->name, t->dtype, t->ndim, t->shape, t->data, t->nbytes);
            ncp++;
        } else {
            s = reencode(w, t, dt, &buf, &buf_n, &enc, &enc_n);
            nre++;
        }
        if (s && strstr(cmf_last_error(), t->name)) s = cmf_err_prefix(s, "requant %s: ", in_path); /* named */
        else if (s) s = cmf_err_prefix(s, "requant %s: tensor '%s': ", in_path, t->name);
    }
    free(buf);
    free(enc);
    if (!s && f->vocab) s = cmf_writer_set_vocab(w, f->vocab, (size_t)f->env.vocab_len);
    if (!s && f->masks)
        s = cmf_writer_set_masks(w, f->masks, (size_t)f->env.masks_len, (f->env.features & CMF_FEAT_LOOP_MASKS) != 0);
    cJSON *header = NULL;
    if (!s) {
        header = cJSON_Duplicate(f->header, 1);
        if (!header || !cJSON_IsObject(header)) s = cmf_err(CMF_E_NOMEM, "requant: cannot copy the header");
    }
    if (!s) {
        cJSON *label = cJSON_CreateString(cmf_quant_label(quant));
        if (!label) s = cmf_err(CMF_E_NOMEM, "requant: cannot copy the header");
        else if (cJSON_GetObjectItemCaseSensitive(header, "quant_type"))
            cJSON_ReplaceItemInObjectCaseSensitive(header, "quant_type", label);
        else
            cJSON_AddItemToObject(header, "quant_type", label);
    }
    if (!s && !cmf_header_set_tool(header, "cmf requant")) s = cmf_err(CMF_E_NOMEM, "requant: cannot copy the header");
    if (s) {
        cJSON_Delete(header);
        cmf_writer_abort(w);
        cmf_file_close(f);
        return s;
    }
    cmf_writer_set_header(w, header);
    cmf_writer_set_check(w, cmf_emit_check_output, NULL);
    s = cmf_writer_finish(w);
    cmf_file_close(f);
    if (s) return cmf_err_prefix(s, "requant %s: ", out_path);
    if (stats) stats->reencoded = nre, stats->copied = ncp;
    return CMF_OK;
}
