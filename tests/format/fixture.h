/* fixture.h — a small, valid CMF file written by our own writer, and byte-patching helpers, for the format
 * tests. Every tensor's payload is deterministic, so tests can compare what they read back. */
#ifndef CMF_TEST_FIXTURE_H
#define CMF_TEST_FIXTURE_H

#include <stddef.h>
#include <stdint.h>

#include "format/format.h"

typedef struct fx_tensor {
    const char *name;
    int dtype, ndim;
    uint32_t shape[6];
    uint8_t *data; /* encoded payload (malloc'd) */
    uint64_t nbytes;
} fx_tensor;

/* The fixture's tensors (static storage, built on first call); *n receives the count. */
const fx_tensor *fx_tensors(size_t *n);

/* The fixture's masks section bytes (static), with *len. */
const uint8_t *fx_masks(size_t *len);
extern const char fx_vocab[];

/* Writes the fixture to `path` with our writer. Returns the writer's status. */
cmf_status fx_write(const char *path);

/* Whole-file read/write helpers (abort the test on I/O failure). */
uint8_t *fx_read(const char *path, size_t *len);
void fx_save(const char *path, const uint8_t *buf, size_t len);

/* Little-endian patching. */
void fx_put32(uint8_t *p, uint32_t v);
void fx_put64(uint8_t *p, uint64_t v);
uint64_t fx_get64(const uint8_t *p);

#endif
