/* repeat_layers.c — a deep benchmark model without generating every layer:
 *   repeat_layers IN.cmf OUT.cmf N_LAYERS
 * OUT is IN with N_LAYERS decoder layers, where layer l's tensors are directory records pointing at the payloads of
 * IN's layer l mod K (K = IN's num_layers): the data section is copied once, unchanged, and only the directory
 * grows. CMF_FORMAT.md allows this: §1.5 leaves directory order free and §1.11 does not check that tensor payloads
 * are disjoint (a reader checks each record's bounds, size and name only). Header: arch.num_layers = N_LAYERS,
 * arch.layer_types repeated with the same period; everything else (the vocab section too) as in IN. Used by
 * bench/tp/run_tp.sh to make the 64-layer 32B shape from a generated 8-layer file: writing 35 GB of random q8
 * weights does not fit a device call. Backends keep one resident copy per distinct payload (the cuda backend keys
 * its uploads by host pointer, src/tp/slice.c its slice copies by source), so a token of OUT reads N_LAYERS layers'
 * bytes from K layers' memory; K layers of a large model are far beyond any cache, so the time per token is that
 * of an N_LAYERS-layer model.
 * Refused (exit 1, a message naming the reason): files with task masks, a sparse index, Dory models, skills, a
 * num_layers / layer_types that does not match the tensors, N_LAYERS < K. */
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmf.h"
#include "format/format.h"
#include "repeat_layers.h"

static void wr32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static void wr64(uint8_t *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}

/* Layer index of "model.layers.<i>.<rest>" into *layer and the offset of <rest>; 0 for other names. */
static int layer_of(const char *name, int *layer, size_t *rest) {
    static const char pre[] = "model.layers.";
    if (strncmp(name, pre, sizeof pre - 1)) return 0;
    const char *p = name + sizeof pre - 1;
    char *end = NULL;
    long v = strtol(p, &end, 10);
    if (end == p || *end != '.' || v < 0) return 0;
    *layer = (int)v;
    *rest = (size_t)(end + 1 - name);
    return 1;
}

typedef struct {
    char *name;
    const cmf_tensor *t;
} rec;

static void fail(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "repeat_layers: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
}

int tp_repeat_layers(const char *in, const char *out, int n_layers) {
    cmf_file *f = NULL;
    if (cmf_file_open(in, &f) != CMF_OK) {
        fail("%s", cmf_last_error());
        return 1;
    }
    int rc = 1;
    const cmf_envelope *e = &f->env;
    cJSON *h = cJSON_Duplicate(f->header, 1);
    cJSON *arch = cJSON_GetObjectItemCaseSensitive(h, "arch");
    const cJSON *nl = cJSON_GetObjectItemCaseSensitive(arch, "num_layers");
    const cJSON *an = cJSON_GetObjectItemCaseSensitive(arch, "arch_name");
    const int K = cJSON_IsNumber(nl) ? nl->valueint : 0;
    rec *recs = calloc(f->n_tensors * ((size_t)n_layers / (K > 0 ? (size_t)K : 1) + 2) + 1, sizeof *recs);
    size_t nr = 0, names = 0;
    FILE *fp = NULL;
    char *hjson = NULL;
    uint8_t *dir = NULL;
    if (!h || !recs) {
        fail("%s: out of memory", in);
        goto done;
    }
    if (e->masks_len || e->index_len || cJSON_GetObjectItemCaseSensitive(h, "skills") ||
        (cJSON_IsString(an) && !strcmp(an->valuestring, "dory"))) {
        fail("%s: task masks, a sparse index, skills and Dory models are not repeated", in);
        goto done;
    }
    if (K < 1 || n_layers < K) {
        fail("%s: num_layers %d: N_LAYERS (%d) must be at least that", in, K, n_layers);
        goto done;
    }
    /* the records: non-layer tensors as they are, then layers 0..n_layers-1 from layer l mod K */
    for (size_t i = 0; i < f->n_tensors; i++) {
        int l;
        size_t rest;
        if (layer_of(f->tensors[i].name, &l, &rest)) {
            if (l >= K) {
                fail("%s: tensor %s: layer %d is beyond num_layers %d", in, f->tensors[i].name, l, K);
                goto done;
            }
            continue;
        }
        recs[nr].t = &f->tensors[i];
        recs[nr].name = strdup(f->tensors[i].name);
        if (!recs[nr].name) goto done;
        names += strlen(recs[nr++].name);
    }
    for (int l = 0; l < n_layers; l++)
        for (size_t i = 0; i < f->n_tensors; i++) {
            int tl;
            size_t rest;
            if (!layer_of(f->tensors[i].name, &tl, &rest) || tl != l % K) continue;
            char buf[512];
            snprintf(buf, sizeof buf, "model.layers.%d.%s", l, f->tensors[i].name + rest);
            recs[nr].t = &f->tensors[i];
            recs[nr].name = strdup(buf);
            if (!recs[nr].name) goto done;
            names += strlen(recs[nr++].name);
        }
    /* header: num_layers and the per-layer attention types */
    cJSON_ReplaceItemInObjectCaseSensitive(arch, "num_layers", cJSON_CreateNumber(n_layers));
    cJSON *lt = cJSON_GetObjectItemCaseSensitive(arch, "layer_types");
    if (lt) {
        if (!cJSON_IsArray(lt) || cJSON_GetArraySize(lt) != K) {
            fail("%s: arch.layer_types does not have num_layers (%d) entries", in, K);
            goto done;
        }
        cJSON *nlt = cJSON_CreateArray();
        for (int l = 0; l < n_layers; l++) cJSON_AddItemToArray(nlt, cJSON_Duplicate(cJSON_GetArrayItem(lt, l % K), 1));
        cJSON_ReplaceItemInObjectCaseSensitive(arch, "layer_types", nlt);
    }
    hjson = cJSON_PrintUnformatted(h);
    /* directory (§1.5): head, 56-byte records, the name pool */
    const uint64_t pool_off = 16 + 56 * (uint64_t)nr, dir_len = pool_off + names;
    dir = calloc(1, (size_t)dir_len);
    if (!hjson || !dir) {
        fail("%s: out of memory", in);
        goto done;
    }
    wr64(dir, nr);
    wr64(dir + 8, pool_off);
    uint64_t no = 0;
    for (size_t i = 0; i < nr; i++) {
        const cmf_tensor *t = recs[i].t;
        const size_t len = strlen(recs[i].name);
        uint8_t *p = dir + 16 + 56 * i;
        wr32(p, (uint32_t)no);
        p[4] = (uint8_t)len;
        p[5] = (uint8_t)(len >> 8);
        p[6] = t->dtype;
        p[7] = t->ndim;
        for (int k = 0; k < CMF_MAX_DIMS; k++) wr32(p + 8 + 4 * k, t->shape[k]);
        wr64(p + 32, t->off);
        wr64(p + 40, t->nbytes);
        wr64(p + 48, t->hash);
        memcpy(dir + pool_off + no, recs[i].name, len);
        no += len;
    }
    cmf_envelope o = *e; /* version, flags, features as in IN */
    o.header_off = CMF_ENVELOPE_SIZE;
    o.header_len = strlen(hjson);
    o.dir_off = o.header_off + o.header_len;
    o.dir_len = dir_len;
    o.data_off = (o.dir_off + dir_len + 4095) / 4096 * 4096;
    o.data_len = e->data_len;
    o.vocab_off = e->vocab_len ? o.data_off + o.data_len : 0;
    o.header_hash = cmf_hash64(hjson, (size_t)o.header_len);
    o.dir_hash = cmf_hash64(dir, (size_t)dir_len);
    uint8_t env[CMF_ENVELOPE_SIZE];
    cmf_envelope_encode(&o, env);
    fp = fopen(out, "wb");
    if (!fp) {
        fail("cannot create %s", out);
        goto done;
    }
    static const uint8_t zeros[4096];
    const uint64_t pad = o.data_off - o.dir_off - dir_len;
    int ok = fwrite(env, 1, sizeof env, fp) == sizeof env && fwrite(hjson, 1, o.header_len, fp) == o.header_len &&
             fwrite(dir, 1, dir_len, fp) == dir_len && fwrite(zeros, 1, pad, fp) == pad;
    const uint8_t *data = f->map.data + e->data_off;
    for (uint64_t done_b = 0; ok && done_b < e->data_len;) {
        const size_t k = e->data_len - done_b < (64u << 20) ? (size_t)(e->data_len - done_b) : (64u << 20);
        ok = fwrite(data + done_b, 1, k, fp) == k;
        done_b += k;
    }
    if (ok && e->vocab_len) ok = fwrite(f->map.data + e->vocab_off, 1, e->vocab_len, fp) == e->vocab_len;
    ok = fclose(fp) == 0 && ok;
    fp = NULL;
    if (!ok) {
        fail("writing %s failed", out);
        remove(out);
        goto done;
    }
    rc = 0;
done:
    if (fp) fclose(fp);
    for (size_t i = 0; i < nr; i++) free(recs[i].name);
    free(recs);
    free(dir);
    free(hjson);
    cJSON_Delete(h);
    cmf_file_close(f);
    return rc;
}

#ifndef REPEAT_LAYERS_NO_MAIN
int main(int argc, char **argv) {
    if (argc != 4 || atoi(argv[3]) < 1) {
        fprintf(stderr, "usage: repeat_layers IN.cmf OUT.cmf N_LAYERS\n");
        return 2;
    }
    return tp_repeat_layers(argv[1], argv[2], atoi(argv[3]));
}
#endif
