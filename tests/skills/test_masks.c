/* test_masks.c — task masks (CMF_FORMAT.md §1.7, §3.4): the reference converter's tiny-*.cmf files (two masks,
 * general and coding) decoded by cmf_masks_load and compared bit by bit with an independent reading of the
 * section bytes done here; the default-active rule and CMF_TASK=off; synthetic sections for the loop layout,
 * legacy rows on a looped model, expert rows, tail bits, the first-mask fallback and malformed input. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "format/format.h"
#include "skills/skills.h"
#include "testutil.h"

static uint32_t rd32(const uint8_t *p) {
    return p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static int bit(const uint8_t *p, size_t i) { return (p[i / 8] >> (i % 8)) & 1; }
static double num(const cJSON *o, const char *k) { return cJSON_GetObjectItemCaseSensitive(o, k)->valuedouble; }

static void test_reference(const char *file) {
    cmf_file *f = NULL;
    CHECK_MSG(cmf_file_open(shared_path(file), &f) == CMF_OK, "%s: %s", file, cmf_last_error());
    if (!f) return;
    cmf_masks *m = NULL;
    CHECK_MSG(cmf_masks_load(f, &m) == CMF_OK, "%s", cmf_last_error());
    if (!m) {
        cmf_file_close(f);
        return;
    }
    /* independent reading: section head, meta JSON, geometry from the header, blob bytes */
    const uint8_t *sec = f->masks;
    const cJSON *arch = cJSON_GetObjectItemCaseSensitive(f->header, "arch");
    uint32_t L = (uint32_t)num(arch, "num_layers"), I = (uint32_t)num(arch, "intermediate_size");
    uint32_t H = (uint32_t)num(arch, "num_attention_heads");
    size_t F = (I + 7) / 8, HB = (H + 7) / 8;
    uint32_t n_masks = rd32(sec), meta_len = rd32(sec + 4);
    cJSON *meta = cJSON_ParseWithLength((const char *)sec + 8, meta_len);
    const cJSON *arr = cJSON_GetObjectItemCaseSensitive(meta, "masks");
    CHECK(m->n == n_masks && n_masks == 2 && cJSON_GetArraySize(arr) == 2);
    CHECK(!strcmp(m->default_task, cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(meta, "default_task"))));
    CHECK(m->n_layers == L && m->n_virtual_layers == L && m->intermediate_size == I && m->n_heads == H);
    for (size_t i = 0; i < m->n && i < 2; i++) {
        const cJSON *mm = cJSON_GetArrayItem(arr, (int)i);
        const cmf_task_mask *t = &m->masks[i];
        const uint8_t *blob = sec + (size_t)num(mm, "blob_off");
        CHECK(!strcmp(t->name, cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(mm, "name"))));
        CHECK(t->task_id == (uint32_t)num(mm, "task_id"));
        CHECK((float)t->sparsity == (float)num(mm, "sparsity"));
        const char *pri = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(mm, "priority"));
        CHECK(t->priority == (!strcmp(pri, "Fallback") ? CMF_MASK_FALLBACK
                              : !strcmp(pri, "Normal") ? CMF_MASK_NORMAL
                                                       : CMF_MASK_PRIMARY));
        const cJSON *q = cJSON_GetObjectItemCaseSensitive(mm, "quality");
        CHECK(t->has_quality == !cJSON_IsNull(q));
        if (t->has_quality) CHECK(t->quality_value == num(q, "value"));
        CHECK(!t->loop_layout && !t->has_expert_fields && !t->experts && t->tail_bits_cleared == 0);
        uint32_t ffn_ind = 0, ffn_lib = 0;
        for (uint32_t l = 0; l < L; l++) {
            const uint8_t *row = cmf_mask_ffn_row(m, t, l), *hrow = cmf_mask_head_row(m, t, l);
            for (uint32_t k = 0; k < I; k++) {
                CHECK(cmf_mask_bit(row, k) == bit(blob + l * F, k));
                ffn_ind += (uint32_t)bit(blob + l * F, k);
            }
            ffn_lib += cmf_mask_popcount(row, I);
            for (uint32_t h = 0; h < H; h++) CHECK(cmf_mask_bit(hrow, h) == bit(blob + L * F + l * HB, h));
            CHECK(cmf_mask_layer_alive(m, t, l) == bit(blob + L * F + L * HB, l));
        }
        CHECK(ffn_ind == ffn_lib);
        CHECK(cmf_mask_ffn_row(m, t, L) == NULL && cmf_mask_head_row(m, t, L) == NULL);
    }
    /* the default-active rule: the first Fallback mask (general in these files), CMF_TASK=off = dense */
    int fb = -1;
    for (int i = 0; i < cJSON_GetArraySize(arr) && fb < 0; i++)
        if (!strcmp(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(arr, i), "priority")),
                    "Fallback"))
            fb = i;
    CHECK(fb == 0 && !strcmp(m->masks[0].name, "general"));
    int idx = -2;
    unsetenv("CMF_TASK");
    CHECK(cmf_masks_choose(m, NULL, &idx) == CMF_OK && idx == fb);
    CHECK(cmf_masks_fallback(m) == fb);
    CHECK(cmf_masks_choose(m, "coding", &idx) == CMF_OK && idx == cmf_masks_find(m, "coding") && idx == 1);
    CHECK(cmf_masks_choose(m, "off", &idx) == CMF_OK && idx == -1);
    CHECK(cmf_masks_choose(m, "nope", &idx) == CMF_E_NOT_FOUND && idx == fb && strstr(cmf_last_error(), "coding"));
    setenv("CMF_TASK", "off", 1);
    CHECK(cmf_masks_choose(m, NULL, &idx) == CMF_OK && idx == -1);
    CHECK(cmf_masks_choose(m, "coding", &idx) == CMF_OK && idx == 1); /* an explicit task still wins */
    CHECK(cmf_masks_choose(m, "nope", &idx) == CMF_E_NOT_FOUND && idx == -1);
    char *d = cmf_masks_describe(m);
    CHECK(d && strstr(d, "active by default: none"));
    free(d);
    unsetenv("CMF_TASK");
    CHECK(cmf_masks_choose(m, "general", &idx) == CMF_OK && idx == 0);
    d = cmf_masks_describe(m);
    CHECK(d && strstr(d, "general") && strstr(d, "coding") && strstr(d, "<- active by default") &&
          strstr(d, "active by default: general") && strstr(d, "unmeasured"));
    free(d);
    cJSON_Delete(meta);
    cmf_masks_free(m);
    /* every single-byte corruption of the section is an error or a valid catalog, never a crash */
    uint64_t len = f->env.masks_len;
    uint8_t *copy = malloc((size_t)len);
    for (uint64_t pos = 0; pos < len; pos++) {
        memcpy(copy, sec, (size_t)len);
        copy[pos] ^= (uint8_t)(0x5a + pos);
        m = NULL;
        cmf_status st = cmf_masks_parse(arch, copy, len, &m);
        CHECK_MSG(st == CMF_OK || st == CMF_E_FORMAT, "byte %llu: status %d", (unsigned long long)pos, (int)st);
        CHECK(st != CMF_OK || (m && m->n <= 2));
        cmf_masks_free(m);
    }
    free(copy);
    cmf_file_close(f);
}

/* ---- synthetic sections ---------------------------------------------------------------------------------- */

typedef struct {
    const char *name, *priority;
    int expert;
    size_t len;
    const uint8_t *blob;
} smask;

/* Builds a section: head, meta (blob offsets 8-aligned), blobs. Returns malloc'd bytes. */
static uint8_t *build(const smask *ms, int n, size_t *len, const char *extra_meta) {
    char meta[4096];
    size_t off = 0, k;
    /* fixed-width offsets so the meta length does not depend on them */
    size_t base = 8 + 2048;
    k = (size_t)snprintf(meta, sizeof meta, "{\"default_task\":\"t\",%s\"masks\":[", extra_meta ? extra_meta : "");
    size_t offs[8];
    for (int i = 0; i < n; i++) {
        off = (off + 7) / 8 * 8;
        offs[i] = base + off;
        k += (size_t)snprintf(
            meta + k, sizeof meta - k,
            "%s{\"task_id\":%d,\"name\":\"%s\",\"sparsity\":0.25,\"priority\":\"%s\",\"blob_off\":%zu,"
            "\"blob_len\":%zu,\"quality\":null,\"has_expert_fields\":%s}",
            i ? "," : "", i + 1, ms[i].name, ms[i].priority, offs[i], ms[i].len, ms[i].expert ? "true" : "false");
        off += ms[i].len;
    }
    k += (size_t)snprintf(meta + k, sizeof meta - k, "]}");
    memset(meta + k, ' ', 2048 - k); /* pad the meta to 2048 bytes with whitespace */
    *len = base + off;
    uint8_t *s = calloc(1, *len);
    s[0] = (uint8_t)n;
    s[4] = 2048 & 0xff, s[5] = 2048 >> 8;
    memcpy(s + 8, meta, 2048);
    for (int i = 0; i < n; i++) memcpy(s + offs[i], ms[i].blob, ms[i].len);
    return s;
}

static void test_synthetic(void) {
    /* L = 3 layers, 2 loops, 10 FFN neurons (F = 2 bytes), 12 heads (2 bytes), 9 experts (2 bytes), G = 1 */
    cJSON *arch = cJSON_Parse("{\"num_layers\":3,\"num_loops\":2,\"intermediate_size\":10,\"num_attention_heads\":12,"
                              "\"moe\":{\"num_experts\":9,\"top_k\":2,\"moe_intermediate_size\":4}}");
    enum { L = 3, V = 6, F = 2, HB = 2, G = 1, E = 2 };
    uint8_t legacy[L * F + L * HB + G], looped[V * F + L * HB + G + L * E];
    for (size_t i = 0; i < sizeof legacy; i++) legacy[i] = (uint8_t)(0x11 * (i + 1));
    for (size_t i = 0; i < sizeof looped; i++) looped[i] = (uint8_t)(0x23 * (i + 3));
    smask ms[2] = {{"legacy", "Normal", 0, sizeof legacy, legacy}, {"looped", "Primary", 1, sizeof looped, looped}};
    size_t len;
    uint8_t *sec = build(ms, 2, &len, NULL);
    cmf_masks *m = NULL;
    CHECK_MSG(cmf_masks_parse(arch, sec, len, &m) == CMF_OK, "%s", cmf_last_error());
    if (m) {
        CHECK(m->n == 2 && m->n_virtual_layers == V && m->n_experts == 9);
        const cmf_task_mask *a = &m->masks[0], *b = &m->masks[1];
        CHECK(!a->loop_layout && b->loop_layout && !a->experts && b->experts);
        /* legacy rows are copied to every pass; bits past neuron 10 / head 12 / layer 3 / expert 9 are cleared */
        for (uint32_t v = 0; v < V; v++)
            for (uint32_t k = 0; k < 16; k++) {
                CHECK(cmf_mask_bit(cmf_mask_ffn_row(m, a, v), k) == (k < 10 && bit(legacy + (v % L) * F, k)));
                CHECK(cmf_mask_bit(cmf_mask_ffn_row(m, b, v), k) == (k < 10 && bit(looped + v * F, k)));
            }
        for (uint32_t l = 0; l < L; l++) {
            for (uint32_t h = 0; h < 16; h++) {
                CHECK(cmf_mask_bit(cmf_mask_head_row(m, a, l), h) == (h < 12 && bit(legacy + L * F + l * HB, h)));
                CHECK(cmf_mask_bit(cmf_mask_head_row(m, b, l), h) == (h < 12 && bit(looped + V * F + l * HB, h)));
            }
            CHECK(cmf_mask_layer_alive(m, a, l) == bit(legacy + L * F + L * HB, l));
            CHECK(cmf_mask_layer_alive(m, b, l) == bit(looped + V * F + L * HB, l));
            for (uint32_t e = 0; e < 16; e++)
                CHECK(cmf_mask_bit(cmf_mask_expert_row(m, b, l), e) ==
                      (e < 9 && bit(looped + V * F + L * HB + G + l * E, e)));
            CHECK(cmf_mask_expert_row(m, a, l) == NULL);
        }
        CHECK(a->tail_bits_cleared > 0 && b->tail_bits_cleared > 0);
        CHECK(cmf_mask_layer_alive(m, a, 99) == 1); /* a missing gate counts as alive */
        CHECK(cmf_masks_fallback(m) == 0);          /* no Fallback mask: the first */
        int idx;
        unsetenv("CMF_TASK");
        CHECK(cmf_masks_choose(m, NULL, &idx) == CMF_OK && idx == 0);
        char *d = cmf_masks_describe(m);
        CHECK(d && strstr(d, "expert fields") && strstr(d, "per-pass FFN rows") && strstr(d, "warning"));
        free(d);
    }
    cmf_masks_free(m);
    free(sec);

    /* malformed input: each is an error naming what is wrong, never a crash */
    smask bad_len = {"short", "Normal", 0, sizeof legacy - 1, legacy};
    sec = build(&bad_len, 1, &len, NULL);
    CHECK(cmf_masks_parse(arch, sec, len, &m) == CMF_E_FORMAT && strstr(cmf_last_error(), "short"));
    for (size_t cut = 0; cut < len; cut += 97) { /* truncations */
        m = NULL;
        cmf_status st = cmf_masks_parse(arch, sec, cut, &m);
        CHECK(st == CMF_E_FORMAT || (st == CMF_OK && cut == 0));
        cmf_masks_free(m);
    }
    free(sec);
    smask bad_pri = {"p", "Urgent", 0, sizeof legacy, legacy};
    sec = build(&bad_pri, 1, &len, NULL);
    CHECK(cmf_masks_parse(arch, sec, len, &m) == CMF_E_FORMAT && strstr(cmf_last_error(), "Urgent"));
    sec[0] = 2; /* n_masks != meta length */
    CHECK(cmf_masks_parse(arch, sec, len, &m) == CMF_E_FORMAT && strstr(cmf_last_error(), "n_masks"));
    free(sec);
    cJSON *dense =
        cJSON_Parse("{\"num_layers\":3,\"num_loops\":2,\"intermediate_size\":10,\"num_attention_heads\":12}");
    sec = build(&ms[1], 1, &len, NULL);
    CHECK(cmf_masks_parse(dense, sec, len, &m) == CMF_E_FORMAT && strstr(cmf_last_error(), "arch.moe"));
    free(sec);
    CHECK(cmf_masks_parse(dense, NULL, 0, &m) == CMF_OK && m->n == 0);
    int idx = 5;
    CHECK(cmf_masks_choose(m, NULL, &idx) == CMF_OK && idx == -1);
    cmf_masks_free(m);
    cJSON_Delete(dense);
    cJSON_Delete(arch);
}

int main(void) {
    static const char *const files[] = {"data/cmf-reference/tiny-F16.cmf", "data/cmf-reference/tiny-Q8_ROW.cmf",
                                        "data/cmf-reference/tiny-Q8_2F.cmf", "data/cmf-reference/tiny-Q4_BLOCK.cmf"};
    for (size_t i = 0; i < sizeof files / sizeof *files; i++) test_reference(files[i]);
    test_synthetic();
    CMF_TEST_END();
}
