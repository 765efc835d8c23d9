/* dory_probe.c — the Recon early-exit probe of Dory (DORY.md §2; the form and storage are this project's definition,
 * documented in dory.h): reading it from the model's CMF file or from a safetensors probe file. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "convert/safetensors.h"
#include "model/dory.h"
#include "util/error.h"

static cmf_status probe_new(int n, cmf_dory_probe **out) {
    cmf_dory_probe *p = calloc(1, sizeof *p);
    if (p) p->w = malloc((size_t)n * sizeof(float));
    if (!p || !p->w) {
        cmf_dory_probe_free(p);
        return cmf_err(CMF_E_NOMEM, "dory probe: out of memory");
    }
    p->n = n;
    *out = p;
    return CMF_OK;
}

cmf_status cmf_dory_probe_from_model(const cmf_dory *d, cmf_dory_probe **out) {
    if (!out) return cmf_err(CMF_E_ARG, "cmf_dory_probe_from_model: NULL out");
    *out = NULL;
    if (!d) return cmf_err(CMF_E_ARG, "cmf_dory_probe_from_model: NULL model");
    if (!d->recon_w) return CMF_OK;
    cmf_dory_probe *p = NULL;
    cmf_status st = probe_new(d->cfg.hidden_size, &p);
    if (st != CMF_OK) return st;
    memcpy(p->w, d->recon_w, (size_t)p->n * sizeof(float));
    p->bias = d->cfg.recon_bias;
    *out = p;
    return CMF_OK;
}

/* Decodes float tensor `name` of exactly n finite values into out. */
static cmf_status read_vec(const cmf_safetensors *st, const char *path, const char *name, int n, float *out) {
    const cmf_st_tensor *t = cmf_st_find(st, name);
    if (!t) return cmf_err(CMF_E_FORMAT, "%s: tensor %s is missing", path, name);
    if (t->ndim != 1 || cmf_st_numel(t) != (uint64_t)n)
        return cmf_err(CMF_E_FORMAT, "%s: tensor %s must have shape [%d]", path, name, n);
    if (strcmp(t->dtype_str, "F32") && strcmp(t->dtype_str, "F16") && strcmp(t->dtype_str, "BF16"))
        return cmf_err(CMF_E_UNSUPPORTED, "%s: tensor %s has dtype %s (F32, F16 or BF16 expected)", path, name,
                       t->dtype_str);
    cmf_status s = cmf_st_to_f32(t, out);
    if (s != CMF_OK) return cmf_err_prefix(s, "%s: tensor %s: ", path, name);
    for (int i = 0; i < n; i++)
        if (!isfinite(out[i])) return cmf_err(CMF_E_FORMAT, "%s: tensor %s[%d] is not finite", path, name, i);
    return CMF_OK;
}

cmf_status cmf_dory_probe_read(const char *path, int hidden_size, cmf_dory_probe **out) {
    if (!out) return cmf_err(CMF_E_ARG, "cmf_dory_probe_read: NULL out");
    *out = NULL;
    if (!path || hidden_size <= 0) return cmf_err(CMF_E_ARG, "cmf_dory_probe_read: bad arguments");
    cmf_safetensors *st;
    cmf_status s = cmf_st_open(path, &st);
    if (s != CMF_OK) return cmf_err_prefix(s, "dory probe: ");
    cmf_dory_probe *p = NULL;
    float bias = 0;
    s = probe_new(hidden_size, &p);
    if (s == CMF_OK) s = read_vec(st, path, "dory_recon.weight", hidden_size, p->w);
    if (s == CMF_OK) s = read_vec(st, path, "dory_recon.bias", 1, &bias);
    cmf_st_close(st);
    if (s != CMF_OK) {
        cmf_dory_probe_free(p);
        return s;
    }
    p->bias = bias;
    *out = p;
    return CMF_OK;
}

void cmf_dory_probe_free(cmf_dory_probe *p) {
    if (!p) return;
    free(p->w);
    free(p);
}
