/* route.c — recon-argmin skill routing (CMF_FORMAT.md §3.1 "Routing"; cortiq-engine router.rs decide /
 * error_rows / recon_error): each routable skill's `selection` is an affine subspace (mean + rank basis rows, f16
 * base64) over φ, the mean hidden state after layers 0..=phi_layer; the winner reconstructs φ best. The forward
 * pass that produces φ lives in src/model; this file is the math on given φ vectors. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "quant/dtype.h"
#include "skills/skills.h"
#include "util/error.h"

/* Novelty ensemble weights and margin sharpness (§3.1 step 4). */
#define W_ENERGY 0.5
#define W_MARGIN 0.25
#define W_CONF 0.25
#define MARGIN_K 8.0

static int b64_val(int c) {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
}

/* Decodes standard base64 (RFC 4648, '=' padding) of f16 LE values into *out (malloc'd floats), *n values.
 * Returns 0 on malformed input (bad character, bad length, odd byte count). */
static int decode_f16_b64(const char *s, float **out, size_t *n) {
    size_t len = strlen(s);
    *out = NULL;
    *n = 0;
    if (len % 4) return 0;
    size_t pad = len >= 1 && s[len - 1] == '=' ? (len >= 2 && s[len - 2] == '=' ? 2 : 1) : 0;
    size_t nbytes = len / 4 * 3 - pad;
    if (nbytes % 2) return 0;
    uint8_t *bytes = malloc(nbytes ? nbytes : 1);
    if (!bytes) return 0;
    size_t k = 0;
    for (size_t i = 0; i < len; i += 4) {
        int v[4];
        for (int j = 0; j < 4; j++) {
            int last_group = i + 4 == len;
            v[j] = s[i + j] == '=' && last_group && j >= 4 - (int)pad ? 0 : b64_val((unsigned char)s[i + j]);
            if (v[j] < 0) {
                free(bytes);
                return 0;
            }
        }
        uint32_t w = (uint32_t)v[0] << 18 | (uint32_t)v[1] << 12 | (uint32_t)v[2] << 6 | (uint32_t)v[3];
        uint8_t b[3] = {(uint8_t)(w >> 16), (uint8_t)(w >> 8), (uint8_t)w};
        for (int j = 0; j < 3 && k < nbytes; j++) bytes[k++] = b[j];
    }
    float *f = malloc((nbytes / 2 ? nbytes / 2 : 1) * sizeof *f);
    if (!f) {
        free(bytes);
        return 0;
    }
    for (size_t i = 0; i < nbytes / 2; i++) f[i] = cmf_f16_to_f32((uint16_t)(bytes[2 * i] | bytes[2 * i + 1] << 8));
    free(bytes);
    *out = f;
    *n = nbytes / 2;
    return 1;
}

void cmf_skill_selections_free(cmf_skill_selection *s, size_t n) {
    if (!s) return;
    for (size_t i = 0; i < n; i++) {
        free(s[i].mean);
        free(s[i].basis);
    }
    free(s);
}

static int opt_num(const cJSON *o, const char *key, double *v) {
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!cJSON_IsNumber(j)) return 0;
    *v = j->valuedouble;
    return 1;
}

cmf_status cmf_skill_selections(const cmf_file *f, cmf_skill_selection **out, size_t *n) {
    if (!f || !out || !n) return cmf_err(CMF_E_ARG, "cmf_skill_selections: NULL argument");
    *out = NULL;
    *n = 0;
    const cJSON *arch = cJSON_GetObjectItemCaseSensitive(f->header, "arch");
    double hd;
    if (!opt_num(arch, "hidden_size", &hd) || !(hd >= 1 && hd < 1e8))
        return cmf_err(CMF_E_FORMAT, "skills: arch.hidden_size missing or out of range");
    uint32_t hidden = (uint32_t)hd;
    const cJSON *sk = cJSON_GetObjectItemCaseSensitive(f->header, "skills"), *r;
    size_t cap = (size_t)(cJSON_IsArray(sk) ? cJSON_GetArraySize(sk) : 0), cnt = 0;
    if (cap == 0) return CMF_OK;
    cmf_skill_selection *list = calloc(cap, sizeof *list);
    if (!list) return cmf_err(CMF_E_NOMEM, "skills: out of memory");
    cmf_status st = CMF_OK;
    int idx = 0;
    cJSON_ArrayForEach(r, sk) {
        const cJSON *sel = cJSON_GetObjectItemCaseSensitive(r, "selection"),
                    *id = cJSON_GetObjectItemCaseSensitive(r, "id");
        int i = idx++;
        if (!cJSON_IsObject(sel) || !cJSON_IsString(id)) continue;
        cmf_skill_selection *s = &list[cnt++];
        s->id = id->valuestring;
        s->hidden = hidden;
        const char *metric = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(sel, "metric"));
        const char *mean = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(sel, "mean"));
        const char *basis = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(sel, "basis"));
        double pl, rk;
        if (!metric || (strcmp(metric, "mse") && strcmp(metric, "mse_unit"))) {
            st = cmf_err(CMF_E_FORMAT, "skills[%d] (\"%s\"): selection.metric \"%.32s\" is not mse or mse_unit", i,
                         s->id, metric ? metric : "");
            goto fail;
        }
        s->unit = !strcmp(metric, "mse_unit");
        if (!opt_num(sel, "phi_layer", &pl) || !opt_num(sel, "rank", &rk) || pl < 0 || rk < 0 || rk > 4096 ||
            pl > 1e6) {
            st = cmf_err(CMF_E_FORMAT, "skills[%d] (\"%s\"): selection.phi_layer/rank missing or out of range", i,
                         s->id);
            goto fail;
        }
        s->phi_layer = (uint32_t)pl;
        s->rank = (uint32_t)rk;
        size_t nm = 0, nb = 0;
        if (!mean || !basis || !decode_f16_b64(mean, &s->mean, &nm) || !decode_f16_b64(basis, &s->basis, &nb)) {
            st = cmf_err(CMF_E_FORMAT, "skills[%d] (\"%s\"): selection.mean/basis is not base64 of f16 values", i,
                         s->id);
            goto fail;
        }
        if (nm != hidden || nb != (size_t)s->rank * hidden) {
            st = cmf_err(CMF_E_FORMAT,
                         "skills[%d] (\"%s\"): selection has %zu mean and %zu basis values; hidden_size %u "
                         "and rank %u need %u and %llu",
                         i, s->id, nm, nb, hidden, s->rank, hidden, (unsigned long long)s->rank * hidden);
            goto fail;
        }
        s->has_err_mean = opt_num(sel, "err_mean", &s->err_mean);
        s->has_err_std = opt_num(sel, "err_std", &s->err_std);
    }
    if (cnt == 0) {
        free(list);
        list = NULL;
    }
    *out = list;
    *n = cnt;
    return CMF_OK;
fail:
    cmf_skill_selections_free(list, cnt);
    return st;
}

double cmf_skill_recon_error(const cmf_skill_selection *s, const float *phi, double *phi_sq) {
    uint32_t h = s->hidden;
    double norm = 1.0;
    if (s->unit) {
        double q = 0;
        for (uint32_t i = 0; i < h; i++) q += (double)phi[i] * phi[i];
        norm = sqrt(q) > 1e-12 ? sqrt(q) : 1e-12;
    }
    double rr = 0, pp = 0, proj = 0;
    for (uint32_t i = 0; i < h; i++) {
        double p = phi[i] / norm, r = p - s->mean[i];
        rr += r * r;
        pp += p * p;
    }
    for (uint32_t k = 0; k < s->rank; k++) {
        const float *b = s->basis + (size_t)k * h;
        double c = 0;
        for (uint32_t i = 0; i < h; i++) c += (double)b[i] * (phi[i] / norm - s->mean[i]);
        proj += c * c;
    }
    if (phi_sq) *phi_sq = pp;
    return rr - proj > 0 ? rr - proj : 0;
}

void cmf_skill_routing_free(cmf_skill_routing *r) {
    if (!r) return;
    free(r->scores);
    memset(r, 0, sizeof *r);
}

cmf_status cmf_skill_route(const cmf_file *f, const cmf_skill_selection *sel, size_t n, const float *const *phi,
                           double fallback_tau, cmf_skill_routing *out) {
    if (!out || (n && (!sel || !phi))) return cmf_err(CMF_E_ARG, "cmf_skill_route: NULL argument");
    memset(out, 0, sizeof *out);
    out->novelty = 1.0;
    out->is_novel = 1;
    if (n == 0) return CMF_OK;
    out->scores = calloc(n, sizeof *out->scores);
    if (!out->scores) return cmf_err(CMF_E_NOMEM, "cmf_skill_route: out of memory");
    out->n = n;
    for (size_t i = 0; i < n; i++) {
        double pp;
        cmf_skill_route_score *s = &out->scores[i];
        s->index = i;
        s->raw_error = cmf_skill_recon_error(&sel[i], phi[i], &pp);
        s->error = s->raw_error / (pp > 1e-12 ? pp : 1e-12);
    }
    /* best first (stable insertion sort by raw error) */
    for (size_t i = 1; i < n; i++)
        for (size_t j = i; j > 0 && out->scores[j - 1].raw_error > out->scores[j].raw_error; j--) {
            cmf_skill_route_score t = out->scores[j];
            out->scores[j] = out->scores[j - 1], out->scores[j - 1] = t;
        }
    const cJSON *cal = f ? cJSON_GetObjectItemCaseSensitive(f->header, "routing") : NULL;
    double temp, theta;
    if (!cJSON_IsObject(cal) || !opt_num(cal, "temperature", &temp) || !opt_num(cal, "novelty_theta", &theta)) {
        out->novelty = NAN;
        out->is_novel = out->scores[0].error > fallback_tau;
        return CMF_OK;
    }
    out->calibrated = 1;
    double t = temp > 1e-3 ? temp : 1e-3, mx = -out->scores[0].raw_error / t, sum = 0;
    for (size_t i = 0; i < n; i++) sum += out->scores[i].probability = exp(-out->scores[i].raw_error / t - mx);
    for (size_t i = 0; i < n; i++) out->scores[i].probability /= sum > 1e-30 ? sum : 1e-30;
    out->confidence = out->scores[0].probability;
    double e0 = out->scores[0].raw_error;
    out->margin = 1.0 / (1.0 + e0) - (n > 1 ? 1.0 / (1.0 + out->scores[1].raw_error) : 0.0);
    const cmf_skill_selection *w = &sel[out->scores[0].index];
    double em = w->has_err_mean ? w->err_mean : 0.0, es = w->has_err_std ? w->err_std : 1.0;
    if (es < 1e-4) es = 1e-4;
    double z = (e0 - em) / es;
    out->novelty =
        W_ENERGY / (1.0 + exp(-z)) + W_MARGIN / (1.0 + out->margin * MARGIN_K) + W_CONF * (1.0 - out->confidence);
    out->is_novel = out->novelty > theta;
    return CMF_OK;
}
