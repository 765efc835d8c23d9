/* gguf_writer.h — a minimal GGUF v3 writer for tests (format: ggml/docs/gguf.md): metadata of type string, u32,
 * f32, and tensors given as raw ggml payloads, written with general.alignment 32. Independent of the reader in
 * src/convert/gguf.c, so the reader is tested against bytes laid out from the format description. */
#ifndef CMF_TEST_GGUF_WRITER_H
#define CMF_TEST_GGUF_WRITER_H

#include <stddef.h>
#include <stdint.h>

typedef struct gw gw;

/* ggml type ids (ggml.h enum ggml_type). */
enum { GW_F32 = 0, GW_F16 = 1, GW_Q4_0 = 2, GW_Q4_1 = 3, GW_Q8_0 = 8, GW_BF16 = 30 };

gw *gw_new(void);
void gw_free(gw *w);
/* Metadata (the key and string are copied). */
void gw_str(gw *w, const char *key, const char *val);
void gw_u32(gw *w, const char *key, uint32_t val);
void gw_f32(gw *w, const char *key, float val);
/* A tensor: ne[0] innermost; `data` (nbytes, already in the ggml type's layout) is copied. */
void gw_tensor(gw *w, const char *name, int ndim, const uint64_t *ne, int type, const void *data, size_t nbytes);
/* Writes the file; returns 0 on success. */
int gw_write(const gw *w, const char *path);

/* Bytes of a ggml payload of n elements (F32/F16/BF16/Q8_0/Q4_0/Q4_1; n a multiple of 32 for blocks). */
size_t gw_nbytes(int type, uint64_t n);

#endif
