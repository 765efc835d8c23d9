/* gguf_writer.c — see gguf_writer.h. Layout: "GGUF", u32 version 3, u64 n_tensors, u64 n_kv, the kv pairs
 * (u64-length string key, u32 type, value), the tensor infos (name, u32 n_dims, u64 ne[n_dims], u32 type, u64
 * offset into the data section), zero padding to 32, then each payload at a 32-aligned offset. */
#include "gguf_writer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct gw_kv {
    char *key;
    int type; /* 4 u32, 6 f32, 8 string */
    uint32_t u;
    float f;
    char *s;
} gw_kv;

typedef struct gw_t {
    char *name;
    int ndim, type;
    uint64_t ne[4];
    uint8_t *data;
    size_t nbytes;
} gw_t;

struct gw {
    gw_kv kv[64];
    size_t n_kv;
    gw_t t[128];
    size_t n_t;
};

gw *gw_new(void) { return calloc(1, sizeof(gw)); }

void gw_free(gw *w) {
    if (!w) return;
    for (size_t i = 0; i < w->n_kv; i++) {
        free(w->kv[i].key);
        free(w->kv[i].s);
    }
    for (size_t i = 0; i < w->n_t; i++) {
        free(w->t[i].name);
        free(w->t[i].data);
    }
    free(w);
}

static char *dup(const char *s) {
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    memcpy(d, s, n);
    return d;
}

static gw_kv *add_kv(gw *w, const char *key, int type) {
    if (w->n_kv >= sizeof w->kv / sizeof w->kv[0]) abort(); /* test helper: a fixed budget */
    gw_kv *k = &w->kv[w->n_kv++];
    memset(k, 0, sizeof *k);
    k->key = dup(key);
    k->type = type;
    return k;
}

void gw_str(gw *w, const char *key, const char *val) { add_kv(w, key, 8)->s = dup(val); }
void gw_u32(gw *w, const char *key, uint32_t val) { add_kv(w, key, 4)->u = val; }
void gw_f32(gw *w, const char *key, float val) { add_kv(w, key, 6)->f = val; }

void gw_tensor(gw *w, const char *name, int ndim, const uint64_t *ne, int type, const void *data, size_t nbytes) {
    if (w->n_t >= sizeof w->t / sizeof w->t[0]) abort();
    gw_t *t = &w->t[w->n_t++];
    t->name = dup(name);
    t->ndim = ndim;
    t->type = type;
    for (int d = 0; d < ndim; d++) t->ne[d] = ne[d];
    t->data = malloc(nbytes ? nbytes : 1);
    memcpy(t->data, data, nbytes);
    t->nbytes = nbytes;
}

size_t gw_nbytes(int type, uint64_t n) {
    switch (type) {
    case GW_F32: return 4 * n;
    case GW_F16:
    case GW_BF16: return 2 * n;
    case GW_Q4_0: return n / 32 * 18;
    case GW_Q4_1: return n / 32 * 20;
    case GW_Q8_0: return n / 32 * 34;
    default: return 0;
    }
}

static void put(FILE *f, uint64_t v, int n) {
    for (int i = 0; i < n; i++) fputc((int)((v >> (8 * i)) & 0xff), f);
}

static void put_str(FILE *f, const char *s) {
    put(f, strlen(s), 8);
    fwrite(s, 1, strlen(s), f);
}

static size_t pad32(size_t x) { return (x + 31) & ~(size_t)31; }

int gw_write(const gw *w, const char *path) {
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    fwrite("GGUF", 1, 4, f);
    put(f, 3, 4);
    put(f, w->n_t, 8);
    put(f, w->n_kv, 8);
    for (size_t i = 0; i < w->n_kv; i++) {
        const gw_kv *k = &w->kv[i];
        put_str(f, k->key);
        put(f, (uint64_t)k->type, 4);
        if (k->type == 4) put(f, k->u, 4);
        else if (k->type == 6) {
            uint32_t b;
            memcpy(&b, &k->f, 4);
            put(f, b, 4);
        } else put_str(f, k->s);
    }
    size_t off = 0;
    for (size_t i = 0; i < w->n_t; i++) {
        const gw_t *t = &w->t[i];
        put_str(f, t->name);
        put(f, (uint64_t)t->ndim, 4);
        for (int d = 0; d < t->ndim; d++) put(f, t->ne[d], 8);
        put(f, (uint64_t)t->type, 4);
        put(f, off, 8);
        off = pad32(off + t->nbytes);
    }
    long pos = ftell(f);
    for (long p = pos; p < (long)pad32((size_t)pos); p++) fputc(0, f);
    off = 0;
    for (size_t i = 0; i < w->n_t; i++) {
        const gw_t *t = &w->t[i];
        fwrite(t->data, 1, t->nbytes, f);
        for (size_t p = off + t->nbytes; p < pad32(off + t->nbytes); p++) fputc(0, f);
        off = pad32(off + t->nbytes);
    }
    return fclose(f) ? -1 : 0;
}
