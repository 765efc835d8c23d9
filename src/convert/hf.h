/* hf.h — Hugging Face config files -> CMF header objects (CMF_FORMAT.md §1.4 arch, §1.8 tokenizer_config, §5.2).
 * Used by hf.c (cmf_convert_hf); separate so the mapping can be read and tested on its own. */
#ifndef CMF_CONVERT_HF_H
#define CMF_CONVERT_HF_H

#include <cjson/cJSON.h>

#include "convert/convert.h"
#include "convert/safetensors.h"

/* Builds header.arch from a parsed config.json (transformers 4 or 5; a nested text_config is read first).
 * Supported model_type: llama, mistral, qwen2, qwen3, gemma, gemma2, gemma3, gemma3_text, phi3, smollm.
 * *arch is a new cJSON object the caller owns. Warnings (rope scaling not applied, ...) go to opts->warn.
 * Errors: CMF_E_UNSUPPORTED (model_type, hidden activation, layer type), CMF_E_FORMAT (a required key missing or
 * not a positive integer; the message names the key). */
cmf_status cmf_hf_arch(const cJSON *config, const cmf_convert_opts *opts, cJSON **arch);

/* Builds header.tokenizer_config {chat_template?, eos_token_ids, bos_token_id?, pad_token_id?} from config.json,
 * generation_config.json, tokenizer_config.json and tokenizer.json (each but config may be NULL) and a chat
 * template read from chat_template.jinja (may be NULL; tokenizer_config's chat_template wins). Ids come from
 * generation_config first, then config, then the token strings of tokenizer_config resolved through its
 * added_tokens_decoder, tokenizer.json's added_tokens or its model vocab. *out is a new object. Errors: CMF_E_NOMEM. */
cmf_status cmf_hf_tokenizer_config(const cJSON *config, const cJSON *gen, const cJSON *tok_cfg, const cJSON *tok_json,
                                   const char *template_file, cJSON **out);

/* Reads dir/name into a malloc'd buffer (NUL-terminated); *text is NULL (and CMF_OK) when the file does not
 * exist. Errors: CMF_E_IO, CMF_E_NOMEM. Shared by the HF and Dory converters. */
cmf_status cmf_hf_read_opt(const char *dir, const char *name, char **text, size_t *len);

/* Parses dir/name when present (*json NULL when absent; the caller deletes it). Errors: CMF_E_FORMAT for malformed
 * JSON, naming the file and the byte offset; those of cmf_hf_read_opt. */
cmf_status cmf_hf_parse_opt(const char *dir, const char *name, cJSON **json);

/* Refuses an output that would replace a file the conversion of `dir` reads: out_path, or the writer's
 * out_path.tmp / out_path.blob.tmp, is (same device and inode, so symlinks and hard links count) one of dir's
 * config.json, generation_config.json, tokenizer_config.json, tokenizer.json, chat_template.jinja,
 * model.safetensors[.index.json], dory_recon.safetensors, or a shard of `st` (may be NULL). Errors: CMF_E_ARG
 * naming both paths. */
cmf_status cmf_hf_check_output(const char *dir, const char *out_path, const cmf_safetensors *st);

/* A malloc'd copy of dir without trailing slashes ("/" stays "/"), so messages do not show "dir//file". NULL when
 * out of memory. */
char *cmf_hf_dir_copy(const char *dir);

#endif
