/* format.h — the CMF v2 container (CMF_FORMAT.md §1): reader structures, hash64, verify, writer.
 *
 * Reader: cmf_file_open (public, cmf.h) maps the file and validates it fully (§1.11); the structures below give
 * the rest of the library direct access to the envelope, the parsed header and the tensor directory. Tensor
 * payloads are pointers into the mapping; nothing is copied.
 *
 * Writer: cmf_writer streams tensor payloads to a temporary blob file as they are added (constant memory), then
 * cmf_writer_finish lays out the file per §1.12 and renames it into place, so a failed conversion never leaves
 * a half-written file under the output name.
 */
#ifndef CMF_FORMAT_H
#define CMF_FORMAT_H

#include <cjson/cJSON.h>
#include <stddef.h>
#include <stdint.h>

#include "cmf.h"
#include "util/fileio.h"

#define CMF_ENVELOPE_SIZE 128
#define CMF_MAX_DIMS 6

/* required_features bits (§1.3). */
enum {
    CMF_FEAT_TENSOR_DIR = 0x01,
    CMF_FEAT_BINARY_MASKS = 0x02,
    CMF_FEAT_QUANT_2F = 0x04,
    CMF_FEAT_DELTA_MASKS = 0x08, /* reserved: rejected */
    CMF_FEAT_HOT_PACKS = 0x10,   /* reserved: rejected */
    CMF_FEAT_LOOP_MASKS = 0x20,
    CMF_FEAT_SKILL_FILE = 0x40,
    CMF_FEAT_SUPPORTED = 0x67,
};

/* One directory record (§1.5), decoded. `data` points into the mapping at data_off + off. */
typedef struct cmf_tensor {
    const char *name; /* NUL-terminated copy owned by the cmf_file */
    uint8_t dtype;    /* enum cmf_dtype, quant/dtype.h */
    uint8_t ndim;
    uint32_t shape[CMF_MAX_DIMS];
    uint64_t off, nbytes, hash;
    const uint8_t *data;
} cmf_tensor;

/* The 128-byte envelope (§1.2). */
typedef struct cmf_envelope {
    uint32_t version, flags, features;
    uint64_t header_off, header_len, dir_off, dir_len, data_off, data_len;
    uint64_t masks_off, masks_len, vocab_off, vocab_len, index_off, index_len;
    uint64_t header_hash, dir_hash;
} cmf_envelope;

struct cmf_file {
    char *path;
    cmf_mmap map;
    cmf_envelope env;
    cJSON *header;        /* parsed header JSON (owned) */
    size_t n_tensors;
    cmf_tensor *tensors;  /* directory order */
    char *names;          /* NUL-separated name storage */
    uint32_t *name_index; /* open-addressing hash table of tensor indices + 1 (0 = empty) */
    size_t name_index_cap;
    const uint8_t *masks, *vocab, *index; /* section pointers (NULL when absent) */
};

/* hash64 of n bytes (§1.10): no seed, little-endian words, fmix64 finalizer. */
uint64_t cmf_hash64(const void *data, size_t n);

/* Tensor lookup by exact name; NULL when absent. O(1). */
const cmf_tensor *cmf_file_find(const cmf_file *f, const char *name);

/* Element count of a tensor (product of shape; 1 for ndim 0). */
uint64_t cmf_tensor_numel(const cmf_tensor *t);

/* Reads an envelope from 128 bytes (no validation). */
void cmf_envelope_decode(const uint8_t *p, cmf_envelope *e);

/* ------------------------------------------------------------------------------------------------------------
 * Writer (§1.12).
 * ---------------------------------------------------------------------------------------------------------- */
typedef struct cmf_writer cmf_writer;

/* Starts a file to be written at `path` (written to "path.tmp" and renamed by finish). */
cmf_status cmf_writer_new(const char *path, cmf_writer **out);

/* Appends a tensor: the payload (nbytes, already encoded in `dtype`) is hashed and streamed to the blob at the
 * §1.6 alignment (4096 for >= 16 KiB, else 64). Names must be unique (CMF_E_ARG otherwise); for fixed-size
 * dtypes nbytes must equal the formula (CMF_E_ARG otherwise). The payload is copied; the caller keeps it. */
cmf_status cmf_writer_add(cmf_writer *w, const char *name, int dtype, int ndim, const uint32_t *shape,
                          const void *data, uint64_t nbytes);

/* Sets the header JSON object (ownership passes to the writer). `section_hashes` is added by finish. */
void cmf_writer_set_header(cmf_writer *w, cJSON *header);

/* Sets the vocab section (tokenizer.json bytes, copied) and the raw masks section (copied, may be NULL). */
cmf_status cmf_writer_set_vocab(cmf_writer *w, const void *data, size_t len);
cmf_status cmf_writer_set_masks(cmf_writer *w, const void *data, size_t len, int loop_masks);

/* Lays out and writes the file (§1.12 steps 3–8), computes feature bits, fsyncs and renames it into place.
 * Frees the writer whatever the outcome; on failure the temporary files are removed and `path` is untouched. */
cmf_status cmf_writer_finish(cmf_writer *w);

/* Discards a writer without writing (removes temporaries). NULL is allowed. */
void cmf_writer_abort(cmf_writer *w);

#endif
