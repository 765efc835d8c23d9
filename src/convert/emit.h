/* emit.h — what the HF and GGUF converters share: the per-tensor dtype policy (CMF_FORMAT.md §2.0), encoding
 * f32 data into the chosen dtype, streaming it to a cmf_writer, progress reporting, and small header helpers. */
#ifndef CMF_CONVERT_EMIT_H
#define CMF_CONVERT_EMIT_H

#include <cjson/cJSON.h>
#include <stdint.h>

#include "convert/convert.h"
#include "format/format.h"

typedef struct cmf_emit {
    cmf_writer *w;
    const cmf_convert_opts *opts;
    int quant;            /* target dtype of 2-D matrices */
    int has_moe;          /* the model has routed experts (the q2tp profile, §2.0); set by the caller after begin */
    uint64_t done, total; /* source bytes, for progress */
    double t0;            /* start time (seconds, monotonic) */
    float *buf;           /* scratch f32 buffer (grown on demand) */
    uint64_t buf_n;
    uint8_t *enc; /* scratch encoded buffer */
    uint64_t enc_n;
} cmf_emit;

/* Starts a conversion to `out_path`: checks opts->quant (f32, f16, bf16, q8_row, q8_2f, q4_block, q4_tiled, q4tp or
 * q2tp; CMF_E_ARG otherwise) and
 * opens the writer. `total` is the byte count progress is measured against. */
cmf_status cmf_emit_begin(cmf_emit *e, const char *out_path, const cmf_convert_opts *opts, uint64_t total);

/* Scratch f32 space for n floats, owned by e (valid until the next call). NULL when out of memory. */
float *cmf_emit_scratch(cmf_emit *e, uint64_t n);

/* The dtype a tensor gets (§2.0): cmf_quant_policy (quant/policy.h) with e->quant and e->has_moe. */
int cmf_emit_dtype(const cmf_emit *e, const char *name, int ndim, const uint64_t *shape);

/* Checks n source values before they are encoded as `dt` (an enum cmf_dtype): NaN/inf values are an error for
 * quantized dtypes (naming dt and, when it is not the --quant asked for, that target: "--quant q2tp stores this
 * tensor as q4tp") and a warning (opts->warn; opts may be NULL) for f32/f16/bf16, which store them as they are; for
 * f16 a finite value that rounds to inf (|x| >= 65520; the largest finite f16 is 65504, IEEE 754 binary16) is
 * an error naming the tensor and max |x|, suggesting bf16 or f32. The §2.0 policy gives a tensor its dtype by name
 * and shape only, so no per-tensor fallback is made. Errors: CMF_E_FORMAT (non-finite for a quantized dtype),
 * CMF_E_ARG (f16 overflow). */
cmf_status cmf_emit_check_values(const cmf_convert_opts *opts, const char *name, int dt, const float *data,
                                 uint64_t n);

/* Encodes n = prod(shape) floats (row-major) with the policy dtype and adds the tensor to the writer, then reports
 * progress (src_bytes more of the total). Errors: CMF_E_ARG (a dimension over u32, more than 6 dims, non-finite
 * values for quantized dtypes), CMF_E_NOMEM, writer errors; each message names the tensor. */
cmf_status cmf_emit_tensor(cmf_emit *e, const char *name, int ndim, const uint64_t *shape, const float *data,
                           uint64_t src_bytes);

/* The pre-rename check the converters and requant give cmf_writer_set_check (ctx unused): the temporary file is
 * opened as the runtime does (cmf_file_open, then the loader's cmf_model_check_file: config ranges, every tensor
 * present with its shape). Errors: those, prefixed
 * with "the written file would not load (nothing was written): ". */
cmf_status cmf_emit_check_output(void *ctx, const char *tmp_path);

/* Sets header and vocab (may be NULL) and finishes the file (warning through opts->warn about tokenizer_config
 * eos/bos/pad ids at or past arch.vocab_size, which the runtime ignores; checking the result with
 * cmf_emit_check_output before it is renamed into place) (or aborts it when st != CMF_OK); frees scratch.
 * Returns st, or the writer's error. */
cmf_status cmf_emit_end(cmf_emit *e, cmf_status st, cJSON *header, const char *vocab, size_t vocab_len);

/* The header's quant_type label for a target dtype ("F32", "F16", "BF16", "Q8_ROW", "Q8_2F"; "Q4_BLOCK" for
 * q4_block, q4_tiled, q4tp and q2tp as cortiq writes it), NULL if none. */
const char *cmf_quant_label(int dtype);

/* Passes a printf-style warning to opts->warn (if set). */
void cmf_convert_warn(const cmf_convert_opts *opts, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
