/* make_donor.c — writes a "donor" Hugging Face checkpoint for the skills acceptance test: a copy of a source HF
 * directory (config.json + model.safetensors) in which every FFN weight (`*.mlp.*` tensors) is perturbed
 * deterministically and every other tensor is kept byte for byte.
 *
 *   make_donor SRC_DIR OUT_DIR
 *
 * The safetensors layout (u64 LE header length, JSON header {name: {dtype, shape, data_offsets}}, raw
 * little-endian payload) is kept: same header bytes, same offsets; only the payload bytes of mlp.* tensors
 * change. Supported payload dtypes for the perturbed tensors: F32, F16, BF16 (each element x becomes
 * 0.75 * x + 0.02 * sin(0.1 * i), i the element index within the tensor, computed in float and rounded back to
 * the tensor's dtype, round-to-nearest-even). Any other dtype in an mlp.* tensor is an error.
 * config.json is copied unchanged; other files of SRC_DIR are not needed by the converter and are not copied.
 *
 * Standalone (cJSON only), so the test data does not depend on the code it tests. Build (done by
 * tests/skills/CMakeLists.txt): cc -std=c11 make_donor.c -lcjson -lm. Exit status 0, or 1 with a message. */
#define _POSIX_C_SOURCE 200809L
#include <cjson/cJSON.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int die(const char *fmt, const char *a, const char *b) {
    fprintf(stderr, "make_donor: ");
    fprintf(stderr, fmt, a, b);
    fputc('\n', stderr);
    return 1;
}

/* Reads a whole file; *len receives its size. NULL on failure. */
static unsigned char *slurp(const char *path, size_t *len) {
    FILE *fp = fopen(path, "rb");
    if (!fp) return NULL;
    unsigned char *buf = NULL;
    if (fseek(fp, 0, SEEK_END) == 0) {
        long n = ftell(fp);
        if (n >= 0 && fseek(fp, 0, SEEK_SET) == 0 && (buf = malloc((size_t)n + 1)) != NULL) {
            if (fread(buf, 1, (size_t)n, fp) != (size_t)n) {
                free(buf);
                buf = NULL;
            } else {
                *len = (size_t)n;
            }
        }
    }
    fclose(fp);
    return buf;
}

static int spill(const char *path, const unsigned char *data, size_t len) {
    FILE *fp = fopen(path, "wb");
    if (!fp) return -1;
    int ok = fwrite(data, 1, len, fp) == len;
    if (fclose(fp) != 0) ok = 0;
    return ok ? 0 : -1;
}

static float f16_to_f32(uint16_t h) {
    uint32_t s = (uint32_t)(h >> 15) << 31, e = (h >> 10) & 31, m = h & 1023, u;
    if (e == 0) {
        float v = ldexpf((float)m, -24);
        return s ? -v : v;
    }
    if (e == 31) u = s | 0x7f800000u | (m << 13);
    else u = s | ((e + 112) << 23) | (m << 13);
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* Round-to-nearest-even f32 -> f16 (finite inputs of moderate size, as produced here). */
static uint16_t f32_to_f16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    uint16_t s = (uint16_t)((u >> 16) & 0x8000);
    float a = fabsf(f);
    if (a < ldexpf(1.0f, -14)) { /* subnormal or zero: multiples of 2^-24 */
        float q = nearbyintf(a * ldexpf(1.0f, 24));
        return (uint16_t)(s | (uint16_t)q);
    }
    int e;
    float fr = frexpf(a, &e); /* a = fr * 2^e, fr in [0.5, 1) */
    float q = nearbyintf(fr * 2048.0f); /* 11 significant bits */
    if (q >= 2048.0f) {
        q = 1024.0f;
        e++;
    }
    int he = e - 1 + 15;
    if (he >= 31) return (uint16_t)(s | 0x7c00);
    return (uint16_t)(s | (uint16_t)(he << 10) | ((uint16_t)q - 1024));
}

static float bf16_to_f32(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static uint16_t f32_to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    u += 0x7fffu + ((u >> 16) & 1);
    return (uint16_t)(u >> 16);
}

static float perturb(float x, uint64_t i) { return 0.75f * x + 0.02f * sinf(0.1f * (float)i); }

/* Perturbs one tensor's payload in place. Returns 0, or -1 for an unsupported dtype. */
static int perturb_tensor(const char *dtype, unsigned char *p, size_t nbytes) {
    if (!strcmp(dtype, "F32")) {
        for (size_t i = 0; i < nbytes / 4; i++) {
            float v;
            memcpy(&v, p + 4 * i, 4);
            v = perturb(v, i);
            memcpy(p + 4 * i, &v, 4);
        }
        return 0;
    }
    int f16 = !strcmp(dtype, "F16");
    if (!f16 && strcmp(dtype, "BF16")) return -1;
    for (size_t i = 0; i < nbytes / 2; i++) {
        uint16_t h = (uint16_t)(p[2 * i] | (p[2 * i + 1] << 8));
        float v = perturb(f16 ? f16_to_f32(h) : bf16_to_f32(h), i);
        h = f16 ? f32_to_f16(v) : f32_to_bf16(v);
        p[2 * i] = (unsigned char)h;
        p[2 * i + 1] = (unsigned char)(h >> 8);
    }
    return 0;
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: make_donor SRC_HF_DIR OUT_DIR\n");
        return 2;
    }
    char in[4096], out[4096];
    size_t len = 0;
    snprintf(in, sizeof in, "%s/config.json", argv[1]);
    snprintf(out, sizeof out, "%s/config.json", argv[2]);
    unsigned char *cfg = slurp(in, &len);
    if (!cfg) return die("%s: cannot read%s", in, "");
    if (spill(out, cfg, len) != 0) return die("%s: cannot write%s", out, "");
    free(cfg);

    snprintf(in, sizeof in, "%s/model.safetensors", argv[1]);
    snprintf(out, sizeof out, "%s/model.safetensors", argv[2]);
    unsigned char *st = slurp(in, &len);
    if (!st) return die("%s: cannot read%s", in, "");
    uint64_t hlen = 0;
    for (int k = 7; k >= 0 && len >= 8; k--) hlen = (hlen << 8) | st[k];
    if (len < 8 || hlen > len - 8) return die("%s: bad header length%s", in, "");
    cJSON *h = cJSON_ParseWithLength((const char *)st + 8, (size_t)hlen);
    if (!cJSON_IsObject(h)) return die("%s: header is not a JSON object%s", in, "");
    unsigned char *data = st + 8 + hlen;
    size_t data_len = len - 8 - (size_t)hlen;
    int n_perturbed = 0;
    const cJSON *t;
    cJSON_ArrayForEach(t, h) {
        if (!strcmp(t->string, "__metadata__") || !strstr(t->string, ".mlp.")) continue;
        const cJSON *dt = cJSON_GetObjectItemCaseSensitive(t, "dtype");
        const cJSON *off = cJSON_GetObjectItemCaseSensitive(t, "data_offsets");
        const cJSON *b = cJSON_GetArrayItem(off, 0), *e = cJSON_GetArrayItem(off, 1);
        if (!cJSON_IsString(dt) || !cJSON_IsNumber(b) || !cJSON_IsNumber(e) || b->valuedouble < 0 ||
            e->valuedouble < b->valuedouble || e->valuedouble > (double)data_len)
            return die("%s: malformed entry %s", in, t->string);
        if (perturb_tensor(dt->valuestring, data + (size_t)b->valuedouble,
                           (size_t)(e->valuedouble - b->valuedouble)) != 0)
            return die("unsupported dtype %s of %s", dt->valuestring, t->string);
        n_perturbed++;
    }
    cJSON_Delete(h);
    if (n_perturbed == 0) return die("%s: no mlp.* tensor%s", in, "");
    if (spill(out, st, len) != 0) return die("%s: cannot write%s", out, "");
    free(st);
    printf("make_donor: %d mlp tensor(s) perturbed -> %s\n", n_perturbed, argv[2]);
    return 0;
}
