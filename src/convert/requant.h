/* requant.h — re-encoding the matrices of an existing CMF file with another quant (`cmf requant`, CMF_FORMAT.md
 * §6.2), under the converter's per-tensor policy (§2.0, quant/policy.h). */
#ifndef CMF_CONVERT_REQUANT_H
#define CMF_CONVERT_REQUANT_H

#include <stdint.h>

#include "cmf.h"

typedef struct cmf_requant_stats {
    uint64_t reencoded; /* tensors decoded to f32 and re-encoded */
    uint64_t copied;    /* tensors copied byte for byte */
} cmf_requant_stats;

/* Rewrites `in_path` as `out_path` with the 2-D matrices re-encoded for `quant` (enum cmf_dtype; the same set the
 * converter accepts: f32, f16, bf16, q8_row, q8_2f, q4_block, q4_tiled, q4tp, q2tp). Each tensor that the policy
 * (cmf_quant_policy, has_moe from ".experts." names) treats as a matrix and whose dtype differs from the target is
 * decoded with cmf_dequant and encoded with cmf_quantize; every other tensor (norms, gates, u8 blobs, tensors already
 * in the target dtype) is copied byte for byte, in directory order. The header is copied with quant_type set to the
 * target's label; the vocab and masks sections are copied as they are. A sparse index section (§1.9, deprecated,
 * never read) is dropped, as the format writer emits none. The output is written through the format
 * writer to "out_path.tmp" and renamed into place, so a failure leaves out_path untouched (out_path may equal
 * in_path: the input stays mapped until the rename). `stats` may be NULL.
 * Every input tensor's payload is checked against its recorded hash64 (§1.5, §1.10) before it is copied or
 * re-encoded, so a corrupt input is refused instead of coming out with a fresh, valid hash; the finished output is
 * checked like a conversion's (cmf_emit_check_output) before the rename.
 * Errors: CMF_E_INTEGRITY (a tensor's hash differs; the message names it); those of cmf_file_open on the input; CMF_E_ARG (quant not supported); CMF_E_UNSUPPORTED (the
 * input is a standalone skill file, whose feature bit the writer cannot set, or a matrix dtype without a decoder); CMF_E_NOMEM; decode/encode errors prefixed with the tensor name; writer errors. */
cmf_status cmf_requant(const char *in_path, const char *out_path, int quant, cmf_requant_stats *stats);

#endif
