/* chatmodel.h — tiny random models around real tokenizer bundles, for the chat tests.
 *
 * chat_make_model writes a Hugging Face directory (config.json from $CMF_SHARED/data/hf-tiny/<arch> with a tiny
 * geometry and vocab_size set to the tokenizer's, random f32 safetensors weights, tokenizer.json and
 * tokenizer_config.json copied from $CMF_SHARED/data/tokenizers/<tok>) and converts it with cmf_convert_hf (f16
 * matrices), so the CMF header's tokenizer_config (chat_template, eos_token_ids, bos_token_id) is the converter's
 * own reading of the real files. */
#ifndef CMF_TEST_CHATMODEL_H
#define CMF_TEST_CHATMODEL_H

/* Builds <out_dir>/<tok>.cmf (and the HF folder <out_dir>/<tok>-hf) for tokenizer `tok` ("qwen3", "llama3",
 * "mistral") with architecture `arch` ("qwen3" or "llama") and `vocab` ids. `bos`/`eos` (or -1) go to config.json.
 * Returns 0, or -1 after printing why. The path of the CMF file is written to `path` (size >= 512). */
int chat_make_model(const char *out_dir, const char *tok, const char *arch, int vocab, int bos, int eos,
                    char *path);

#endif
