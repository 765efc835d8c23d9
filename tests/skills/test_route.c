/* test_route.c — recon-argmin routing (CMF_FORMAT.md §3.1): selections written into a copy of the reference's
 * tiny-F16.cmf (hidden_size 32) with the format writer, decoded back from base64 f16, and scored on φ vectors
 * whose errors are known by construction: φ inside a skill's affine subspace has error 0, a component orthogonal
 * to it contributes its squared length, mse_unit ignores φ's scale; the calibrated recipe's probabilities are a
 * softmax over -E_raw/T and the novelty follows the formula of step 4. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "format/format.h"
#include "quant/dtype.h"
#include "skills/skills.h"
#include "testutil.h"

#define H 32

/* base64 (RFC 4648) of n f16 LE values. */
static char *b64_f16(const float *v, size_t n) {
    static const char A[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    size_t nb = 2 * n;
    uint8_t *b = malloc(nb + 3);
    for (size_t i = 0; i < n; i++) {
        uint16_t h = cmf_f32_to_f16(v[i]);
        b[2 * i] = (uint8_t)h, b[2 * i + 1] = (uint8_t)(h >> 8);
    }
    char *s = malloc(nb / 3 * 4 + 8), *p = s;
    for (size_t i = 0; i < nb; i += 3) {
        uint32_t w = (uint32_t)b[i] << 16 | (i + 1 < nb ? (uint32_t)b[i + 1] << 8 : 0) | (i + 2 < nb ? b[i + 2] : 0);
        *p++ = A[w >> 18 & 63], *p++ = A[w >> 12 & 63];
        *p++ = i + 1 < nb ? A[w >> 6 & 63] : '=';
        *p++ = i + 2 < nb ? A[w & 63] : '=';
    }
    *p = 0;
    free(b);
    return s;
}

static cJSON *selection(const char *metric, int phi_layer, const float *mean, const float *basis, int rank) {
    cJSON *s = cJSON_CreateObject();
    char *m = b64_f16(mean, H), *b = b64_f16(basis, (size_t)rank * H);
    cJSON_AddStringToObject(s, "metric", metric);
    cJSON_AddNumberToObject(s, "phi_layer", phi_layer);
    cJSON_AddStringToObject(s, "mean", m);
    cJSON_AddStringToObject(s, "basis", b);
    cJSON_AddNumberToObject(s, "rank", rank);
    free(m);
    free(b);
    return s;
}

/* Writes tiny-F16's tensors with header.skills = `skills` (and header.routing when `routing`). */
static void write_model(const char *path, cJSON *skills, cJSON *routing) {
    cmf_file *r = NULL;
    CHECK(cmf_file_open(shared_path("data/cmf-reference/tiny-F16.cmf"), &r) == CMF_OK);
    cmf_writer *w = NULL;
    CHECK(cmf_writer_new(path, &w) == CMF_OK);
    for (size_t i = 0; i < r->n_tensors; i++) {
        const cmf_tensor *t = &r->tensors[i];
        CHECK(cmf_writer_add(w, t->name, t->dtype, t->ndim, t->shape, t->data, t->nbytes) == CMF_OK);
    }
    cJSON *h = cJSON_Duplicate(r->header, 1);
    cJSON_DeleteItemFromObjectCaseSensitive(h, "skills");
    cJSON_AddItemToObject(h, "skills", skills);
    if (routing) cJSON_AddItemToObject(h, "routing", routing);
    cmf_writer_set_header(w, h);
    CHECK_MSG(cmf_writer_finish(w) == CMF_OK, "%s", cmf_last_error());
    cmf_file_close(r);
}

static cJSON *record(const char *id, cJSON *sel) {
    cJSON *r = cJSON_CreateObject();
    cJSON_AddStringToObject(r, "id", id);
    if (sel) cJSON_AddItemToObject(r, "selection", sel);
    return r;
}

static double sq_dist(const float *a, const float *b) {
    double s = 0;
    for (int i = 0; i < H; i++) s += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
    return s;
}

int main(void) {
    float ma[H], mb[H], e0[H] = {0}, basis_b[2 * H] = {0};
    for (int i = 0; i < H; i++) ma[i] = (float)((i % 5) - 2) / 8.0f, mb[i] = (float)((i % 3) - 1) / 4.0f;
    e0[0] = 1.0f;
    basis_b[H + 3] = 1.0f; /* skill b: rank 2, second row along axis 3, first along axis 1 */
    basis_b[1] = 1.0f;
    char path[512];
    snprintf(path, sizeof path, "%s", tmp_path("route.cmf"));
    cJSON *skills = cJSON_CreateArray();
    cJSON_AddItemToArray(skills, record("a", selection("mse", 1, ma, e0, 1)));
    cJSON_AddItemToArray(skills, record("plain", NULL)); /* not routable: skipped */
    cJSON_AddItemToArray(skills, record("b", selection("mse", 0, mb, basis_b, 2)));
    cJSON_AddItemToArray(skills, record("u", selection("mse_unit", 1, ma, e0, 0)));
    write_model(path, skills, NULL);

    cmf_file *f = NULL;
    CHECK(cmf_file_open(path, &f) == CMF_OK);
    cmf_skill_info *info = NULL;
    size_t ni = 0;
    CHECK(cmf_skills_list(f, &info, &ni) == CMF_OK && ni == 4);
    if (ni == 4) CHECK(info[0].routable && !info[1].routable && info[2].routable && info[3].routable);
    cmf_skills_free(info, ni);
    cmf_skill_selection *sel = NULL;
    size_t n = 0;
    CHECK_MSG(cmf_skill_selections(f, &sel, &n) == CMF_OK, "%s", cmf_last_error());
    CHECK(n == 3);
    if (n == 3) {
        CHECK(!strcmp(sel[0].id, "a") && !strcmp(sel[1].id, "b") && !strcmp(sel[2].id, "u"));
        CHECK(sel[0].rank == 1 && sel[1].rank == 2 && sel[2].rank == 0 && sel[1].phi_layer == 0 && sel[2].unit);
        for (int i = 0; i < H; i++) CHECK(sel[0].mean[i] == ma[i] && sel[1].mean[i] == mb[i]);
        CHECK(sel[1].basis[1] == 1.0f && sel[1].basis[H + 3] == 1.0f);

        /* φ = ma + 3 e0 lies in skill a's subspace; for b it is off by a known amount */
        float phi[H], phi_b[H];
        memcpy(phi, ma, sizeof phi);
        phi[0] += 3.0f;
        double pp;
        CHECK(fabs(cmf_skill_recon_error(&sel[0], phi, &pp)) < 1e-9);
        double want_b = sq_dist(phi, mb) - pow(phi[1] - mb[1], 2) - pow(phi[3] - mb[3], 2);
        CHECK(fabs(cmf_skill_recon_error(&sel[1], phi, NULL) - want_b) < 1e-6 * (1 + want_b));
        /* an orthogonal component: its squared length */
        memcpy(phi_b, ma, sizeof phi_b);
        phi_b[5] += 2.0f;
        CHECK(fabs(cmf_skill_recon_error(&sel[0], phi_b, NULL) - 4.0) < 1e-6);
        /* mse_unit: the scale of φ does not matter */
        float big[H];
        for (int i = 0; i < H; i++) big[i] = 7.0f * phi[i];
        CHECK(fabs(cmf_skill_recon_error(&sel[2], phi, &pp) - cmf_skill_recon_error(&sel[2], big, NULL)) < 1e-6);
        CHECK(fabs(pp - 1.0) < 1e-6);

        /* uncalibrated decision: winner a (error 0), not novel; displayed error = E_raw / ||φ||² */
        const float *phis[3] = {phi, phi, phi};
        cmf_skill_routing r;
        CHECK(cmf_skill_route(f, sel, 3, phis, 0.30, &r) == CMF_OK && r.n == 3 && !r.calibrated);
        CHECK(r.scores[0].index == 0 && r.scores[0].raw_error < 1e-9 && !r.is_novel && isnan(r.novelty));
        for (size_t i = 0; i < r.n; i++) {
            double q;
            double e = cmf_skill_recon_error(&sel[r.scores[i].index], phis[r.scores[i].index], &q);
            CHECK(fabs(r.scores[i].error - e / q) < 1e-9);
            if (i) CHECK(r.scores[i - 1].raw_error <= r.scores[i].raw_error);
        }
        cmf_skill_routing_free(&r);
        /* far from every skill: novel */
        float far[H];
        for (int i = 0; i < H; i++) far[i] = (i % 2 ? 3.0f : -3.0f);
        const float *fars[3] = {far, far, far};
        CHECK(cmf_skill_route(NULL, sel, 3, fars, 0.30, &r) == CMF_OK && r.is_novel);
        cmf_skill_routing_free(&r);
        CHECK(cmf_skill_route(NULL, sel, 0, NULL, 0.30, &r) == CMF_OK && r.n == 0 && r.is_novel);
        cmf_skill_routing_free(&r);
    }
    cmf_skill_selections_free(sel, n);
    cmf_file_close(f);

    /* calibrated: header.routing + err_mean/err_std */
    skills = cJSON_CreateArray();
    cJSON *sa = selection("mse", 1, ma, e0, 1), *sb = selection("mse", 1, mb, e0, 1);
    cJSON_AddNumberToObject(sa, "err_mean", 0.5);
    cJSON_AddNumberToObject(sa, "err_std", 0.25);
    cJSON_AddItemToArray(skills, record("a", sa));
    cJSON_AddItemToArray(skills, record("b", sb));
    cJSON *cal = cJSON_Parse("{\"temperature\":2.0,\"novelty_theta\":0.6,\"samples\":10,\"target_fpr\":0.05}");
    write_model(path, skills, cal);
    CHECK(cmf_file_open(path, &f) == CMF_OK);
    CHECK(cmf_skill_selections(f, &sel, &n) == CMF_OK && n == 2);
    if (n == 2) {
        float phi[H];
        memcpy(phi, ma, sizeof phi);
        phi[7] += 1.0f; /* E_raw(a) = 1 */
        const float *phis[2] = {phi, phi};
        cmf_skill_routing r;
        CHECK(cmf_skill_route(f, sel, 2, phis, 0.30, &r) == CMF_OK && r.calibrated);
        double ea = cmf_skill_recon_error(&sel[0], phi, NULL), eb = cmf_skill_recon_error(&sel[1], phi, NULL);
        CHECK(fabs(ea - 1.0) < 1e-6 && eb > ea && r.scores[0].index == 0);
        double pa = exp(-ea / 2.0) / (exp(-ea / 2.0) + exp(-eb / 2.0));
        CHECK(fabs(r.confidence - pa) < 1e-9 && fabs(r.scores[0].probability + r.scores[1].probability - 1) < 1e-12);
        double margin = 1 / (1 + ea) - 1 / (1 + eb);
        double nov = 0.5 / (1 + exp(-(ea - 0.5) / 0.25)) + 0.25 / (1 + 8 * margin) + 0.25 * (1 - pa);
        CHECK(fabs(r.margin - margin) < 1e-9 && fabs(r.novelty - nov) < 1e-9 && r.is_novel == (nov > 0.6));
        cmf_skill_routing_free(&r);
    }
    cmf_skill_selections_free(sel, n);
    cmf_file_close(f);

    /* malformed selections: errors naming the skill */
    const char *bad[] = {"{\"metric\":\"mse\",\"phi_layer\":1,\"rank\":0,\"mean\":\"@@@@\",\"basis\":\"\"}",
                         "{\"metric\":\"mse\",\"phi_layer\":1,\"rank\":0,\"mean\":\"AAAA\",\"basis\":\"\"}",
                         "{\"metric\":\"cosine\",\"phi_layer\":1,\"rank\":0,\"mean\":\"\",\"basis\":\"\"}"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        skills = cJSON_CreateArray();
        cJSON_AddItemToArray(skills, record("broken", cJSON_Parse(bad[i])));
        write_model(path, skills, NULL);
        CHECK(cmf_file_open(path, &f) == CMF_OK);
        CHECK(cmf_skill_selections(f, &sel, &n) == CMF_E_FORMAT && strstr(cmf_last_error(), "broken"));
        cmf_file_close(f);
    }
    CMF_TEST_END();
}
