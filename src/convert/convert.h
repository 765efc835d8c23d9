/* convert.h — converters into CMF v2: Hugging Face checkpoints (safetensors + config.json + tokenizer files)
 * and GGUF files. */
#ifndef CMF_CONVERT_H
#define CMF_CONVERT_H

#include <stddef.h>
#include <stdint.h>

#include "cmf.h"

typedef struct cmf_convert_opts {
    int quant;          /* target dtype for 2-D matrices (enum cmf_dtype): f32, f16, bf16, q8_row, q8_2f */
    int progress;       /* 1: report progress through on_progress (the library never prints; the caller draws a
                           bar on stderr when elapsed_s exceeds a second) */
    /* Warnings (e.g. "no tokenizer files: no vocab section") are passed here; may be NULL. */
    void (*warn)(void *ctx, const char *msg);
    void *warn_ctx;
    /* Called after each tensor when progress != 0 (may be NULL): bytes of source tensors converted so far out of
     * `total`, the seconds since the conversion started, and the tensor just written. A final call has
     * done == total. */
    void (*on_progress)(void *ctx, uint64_t done, uint64_t total, double elapsed_s, const char *tensor);
    void *progress_ctx;
    /* The O(1) far-field hint (CMF_FORMAT.md §1.4 "The o1 hint", DORY.md §3.1): when o1 is a layer spec (all |
     * deepN | i,j,k; NULL or "off" = no hint), the header gets provenance.o1_attn = {"layers": "all" or the chosen
     * layer indices, "m", "w", "sink"}; weights are unchanged. o1_m / o1_window: 0 = the defaults 32 / 128;
     * o1_sink is used when o1_sink_set (default 4). The converter refuses (CMF_E_ARG / CMF_E_UNSUPPORTED, nothing
     * written) a malformed spec, a sliding or out-of-range layer, a spec that selects no layer, values out of
     * range (m 4..1024, w >= 1, sink >= 0), soft-capped attention and Dory files. */
    const char *o1;
    int o1_m, o1_window, o1_sink, o1_sink_set;
    /* 1: `quant` is the caller's default, not the user's choice (`cmf convert` without --quant). The GGUF converter
     * then re-encodes tensors of types cmf has no dtype for (Q4_1, Q5_x, K-quants, IQ4_NL/XS) as q8_row (gguf_convert.c
     * auto_target) and says so once through warn. 0: every such tensor is decoded
     * exactly and stored with the policy of `quant` (f32 keeps ggml's dequantized values bit for bit). */
    int quant_auto;
} cmf_convert_opts;

/* Converts a Hugging Face model directory (config.json, *.safetensors [+ index], generation_config.json,
 * tokenizer.json, tokenizer_config.json) to a CMF file at `out_path` (CMF_FORMAT.md §1.12, §5). Tensor names
 * stay the HF names; config fields map to `arch` as §5.2 describes. Errors: CMF_E_IO, CMF_E_FORMAT,
 * CMF_E_UNSUPPORTED (unknown model_type or source dtype), each with a message naming the file/tensor/key. */
cmf_status cmf_convert_hf(const char *dir, const char *out_path, const cmf_convert_opts *opts);

/* Converts a GGUF v2/v3 file (architectures llama, qwen2, qwen3; tensor types F32, F16, BF16, Q8_0, Q4_0, Q4_1,
 * Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, Q8_K, IQ4_NL, IQ4_XS; the other IQ* and the TQ* types are refused
 * naming type and tensor) to CMF:
 * metadata -> header, tensors renamed to the HF names, the embedded tokenizer -> an equivalent tokenizer.json in the
 * vocab section. arch.rope_pairing is "interleaved" for llama (llama.cpp's converter permutes llama Q/K) and "half"
 * for qwen2/qwen3 (NEOX RoPE, unpermuted); Q4_0 is repacked losslessly as q4_tiled, Q8_0 decoded and stored as f16
 * (f32 target) or re-quantized (other targets); the other quantized types are decoded exactly (gguf_kquant.c) and
 * stored as opts->quant says, or with opts->quant_auto as q8_row.
 * Details: src/convert/gguf_convert.c, docs/HEADER_KEYS.md. */
cmf_status cmf_convert_gguf(const char *gguf_path, const char *out_path, const cmf_convert_opts *opts);

/* Builds a Hugging Face tokenizer.json equivalent to the tokenizer embedded in a GGUF file (tokenizer.ggml.*).
 * *json is malloc'd (NUL-terminated), *len its length. Errors: CMF_E_FORMAT, CMF_E_UNSUPPORTED (tokenizer model
 * other than "llama" (SentencePiece) or "gpt2" (byte-level BPE)). */
cmf_status cmf_gguf_tokenizer_json(const char *gguf_path, char **json, size_t *len);

#endif
