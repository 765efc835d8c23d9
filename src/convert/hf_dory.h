/* hf_dory.h — conversion of Dory (model_type "dory", NVIDIA Nemotron Labs Dory1.0) checkpoints in the Hugging Face /
 * vLLM schema (DORY.md §1.2, §1.3) to CMF. cmf_convert_hf dispatches here for model_type "dory". */
#ifndef CMF_CONVERT_HF_DORY_H
#define CMF_CONVERT_HF_DORY_H

#include <cjson/cJSON.h>

#include "convert/convert.h"

/* Builds header.arch for a Dory config.json (keys: docs/HEADER_KEYS.md "Dory"). Validates what the runtime cannot
 * run: NoPE layers (a profile 0 or a nonzero no_rope_layers entry), partial_rotary_factor(_2) != 1, a sliding-window
 * geometry (swa_num_attention_heads, swa_num_key_value_heads, swa_head_dim) different from the full one, loops
 * outside 1..CMF_DORY_MAX_LOOPS, an unknown recurrent_kv_cache_mode, tied embeddings, a final norm, no output gate,
 * an activation other than silu, biases, other initial_state/input/output transforms or a mixer_type, block counts
 * that do not add up, head_dim != attention_head_dim. *arch is a new object the caller owns.
 * Errors: CMF_E_UNSUPPORTED (a feature the runtime lacks; the message names the key), CMF_E_FORMAT (a key missing,
 * of the wrong type or out of range). */
cmf_status cmf_hf_dory_arch(const cJSON *config, cJSON **arch);

/* Converts the Dory checkpoint in `dir` (config.json, *.safetensors, optional tokenizer files) to `out_path`.
 * Tensor names stay the HF names (backbone.*, lm_head.weight, lm_head.logit_scale) in execution order; matrices
 * get opts->quant; 1-D scale vectors follow the §2.0 policy (f32/bf16 targets keep their dtype, others f16).
 * An optional Recon early-exit probe (model/dory.h: tensors dory_recon.weight [H] and dory_recon.bias [1], in the
 * checkpoint or in <dir>/dory_recon.safetensors) becomes tensor dory_recon.weight plus arch.dory.recon_bias.
 * Errors: those of cmf_hf_dory_arch, CMF_E_FORMAT (a tensor missing or mis-shaped, named), CMF_E_IO,
 * CMF_E_UNSUPPORTED (source dtype), CMF_E_NOMEM. */
cmf_status cmf_convert_hf_dory(const char *dir, const char *out_path, const cmf_convert_opts *opts);

#endif
