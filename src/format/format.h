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

/* hash64 of n bytes (§1.10): no seed, little-endian words, fmix64 finalizer. `data` may be NULL when n == 0. */
uint64_t cmf_hash64(const void *data, size_t n);

/* Tensor lookup by exact name; NULL when absent. O(1). */
const cmf_tensor *cmf_file_find(const cmf_file *f, const char *name);

/* Element count of a tensor (product of shape; 1 for ndim 0). */
uint64_t cmf_tensor_numel(const cmf_tensor *t);

/* Reads an envelope from 128 bytes (no validation). */
void cmf_envelope_decode(const uint8_t *p, cmf_envelope *e);

/* Writes `e` as the 128-byte envelope (§1.2): magic, the fields, zero elsewhere. */
void cmf_envelope_encode(const cmf_envelope *e, uint8_t *p);

/* ------------------------------------------------------------------------------------------------------------
 * Validators shared by the reader and the writer (src/format/header.c, sections.c). Each returns CMF_OK or
 * CMF_E_FORMAT with a message naming the section, its file offset and the field; `file_off` is where the
 * section starts in the file (only used in messages).
 * ---------------------------------------------------------------------------------------------------------- */

/* Parses the header JSON (§1.4) from `len` bytes (not NUL-terminated): must be valid UTF-8, one JSON object
 * with only whitespace after it, and pass cmf_header_check. *out receives the tree (caller frees with
 * cJSON_Delete). */
cmf_status cmf_header_parse(const uint8_t *p, uint64_t len, uint64_t file_off, cJSON **out);

/* Checks a parsed header against the required schema of §1.4: `version` (u32), `arch` (object with
 * arch_name, the unsigned geometry keys, layer_types from the PascalCase set, rms_norm_eps,
 * max_position_embeddings; typed optional keys norm_style, hidden_act, num_loops, moe, mtp, ...),
 * `quant_type` (enum), and the optional `tokenizer_config`, `section_hashes` (16 hex digits), `skills` (each
 * with `id`), `shard`, `calibration`, `routing`. Optional keys may be null (absent). */
cmf_status cmf_header_check(const cJSON *header, uint64_t file_off);

/* Records the command that writes a file in header h's free-form provenance.tool (§1 "Provenance keys": `tool`
 * names the writer; `cmf info` prints it as "written by"), replacing the tool of the file it was made from (a
 * requant or a skill command rewrites a converted file); adds the provenance object when h has none and leaves a
 * provenance that is not an object as it is. Returns 1 on success, 0 when out of memory or h is not an object. */
int cmf_header_set_tool(cJSON *h, const char *tool);

/* Masks section (§1.7) of `len` bytes: n_masks == meta.masks length, each MaskMeta's required keys, blob
 * bounds inside the section, blob_len equal to the legacy or the loop layout computed from `arch`,
 * has_expert_fields only with arch.moe. */
cmf_status cmf_masks_check(const cJSON *arch, const uint8_t *sec, uint64_t len, uint64_t file_off);

/* Index of the first byte of p[0..len) that is not valid UTF-8 (overlongs, surrogates and code points past
 * U+10FFFF are invalid, as in Rust's str::from_utf8), or len when it is all valid. Uses utf8proc. */
size_t cmf_utf8_invalid_at(const uint8_t *p, size_t len);

/* Sparse index section (§1.9): every entry (16-byte head, u16 groups, u8 heads, pad to 4) lies inside it. */
cmf_status cmf_index_check(const uint8_t *sec, uint64_t len, uint64_t file_off);

/* cmf_file_verify without the tensors: the header, directory and section hashes (§1.11), for readers that check
 * each tensor's hash themselves as they read it (requant). Errors: CMF_E_INTEGRITY naming the first mismatch and
 * the path, CMF_E_ARG, CMF_E_NOMEM. */
cmf_status cmf_file_verify_meta(const cmf_file *f);

/* Layout notes that are not integrity problems (§1.6: the writer zero-fills gaps, readers only require
 * alignment; nothing is defined after the last section): the count and first offset of non-zero bytes that no
 * section or tensor covers, and the bytes after the last section; and the unhashed envelope fields (0x00-0x6F,
 * §1.2) that differ from what writers put: non-zero flags (reserved), header_off other than 128, an absent
 * section (len 0) with a non-zero offset, required_features bits that disagree with the content (§1.3). *out receives a malloc'd text of one note per
 * line ("" when none; the caller frees it). `cmf verify` prints them as warnings. Errors: CMF_E_ARG (NULL),
 * CMF_E_NOMEM. */
cmf_status cmf_file_layout_notes(const cmf_file *f, char **out);

/* ------------------------------------------------------------------------------------------------------------
 * Writer (§1.12).
 * ---------------------------------------------------------------------------------------------------------- */
typedef struct cmf_writer cmf_writer;

/* Starts a file to be written at `path` (written to "path.tmp" and renamed by finish). */
cmf_status cmf_writer_new(const char *path, cmf_writer **out);
/* Whether a writer at `out_path` would replace `src_path`, a file the caller reads while writing: src is out_path
 * itself or one of the writer's temporary files (out_path.tmp, out_path.blob.tmp), same device and inode. Returns
 * CMF_OK, or CMF_E_ARG "-o OUT[: its temporary file T] would replace SRC, which this <what> reads; write the CMF file
 * elsewhere". */
cmf_status cmf_writer_check_source(const char *out_path, const char *src_path, const char *what);

/* Appends a tensor: the payload (nbytes, already encoded in `dtype`) is hashed and streamed to the blob at the
 * §1.6 alignment (4096 for >= 16 KiB, else 64). Names must be unique (CMF_E_ARG otherwise); for fixed-size
 * dtypes nbytes must equal the formula (CMF_E_ARG otherwise). The payload is copied; the caller keeps it. */
cmf_status cmf_writer_add(cmf_writer *w, const char *name, int dtype, int ndim, const uint32_t *shape,
                          const void *data, uint64_t nbytes);

/* Sets the header JSON object (ownership passes to the writer). `section_hashes` is added by finish. */
void cmf_writer_set_header(cmf_writer *w, cJSON *header);

/* Sets the vocab section (tokenizer.json bytes, copied) and the raw masks section (§1.7 bytes, copied; NULL or
 * len 0 = none). Feature bits follow §1.3: BINARY_MASKS when the section holds at least one mask, LOOP_MASKS
 * when it does and arch.num_loops > 1. `loop_masks` (nonzero: the blobs use the loop layout) is checked at
 * finish: loop-layout masks with num_loops <= 1 are CMF_E_ARG. finish also validates the masks section against
 * the header's arch (cmf_masks_check) and the header itself (cmf_header_check), so a written file always opens.
 * Errors: CMF_E_ARG (NULL writer), CMF_E_NOMEM. */
cmf_status cmf_writer_set_vocab(cmf_writer *w, const void *data, size_t len);
cmf_status cmf_writer_set_masks(cmf_writer *w, const void *data, size_t len, int loop_masks);

/* Sets a check run by finish on the complete temporary file (its path is passed; the file is closed and synced)
 * before it is renamed into place: a non-zero status aborts the finish (the temporary is removed, `path` is
 * untouched) and is returned by it. The converters use it to open the result as the runtime would. */
void cmf_writer_set_check(cmf_writer *w, cmf_status (*check)(void *ctx, const char *tmp_path), void *ctx);

/* Lays out and writes the file (§1.12 steps 3–8), computes feature bits, fsyncs and renames it into place.
 * Frees the writer whatever the outcome; on failure the temporary files are removed and `path` is untouched. */
cmf_status cmf_writer_finish(cmf_writer *w);

/* Discards a writer without writing (removes temporaries). NULL is allowed. */
void cmf_writer_abort(cmf_writer *w);

#endif
