/* testmodel.h — random-weight Qwen3 models for the server tests and benchmark, written as a Hugging Face
 * directory (config.json, generation_config.json, model.safetensors of float32 weights from a seeded PRNG, and a
 * real tokenizer's tokenizer.json / tokenizer_config.json) and converted with cmf_convert_hf, so the file has the
 * header, tokenizer and chat template exactly as a converted checkpoint has them. */
#ifndef CMF_TEST_SERVER_TESTMODEL_H
#define CMF_TEST_SERVER_TESTMODEL_H

#include "cmf.h"

typedef struct testmodel_spec {
    const char *tokenizer_dir; /* holds tokenizer.json (+ tokenizer_config.json); vocab_size = its token count */
    int vocab;                 /* the tokenizer's size (ids 0..vocab-1) */
    int hidden, layers, n_heads, n_kv_heads, head_dim, intermediate;
    int quant;                 /* enum cmf_dtype for 2-D matrices (CMF_DT_F32, CMF_DT_Q8_ROW, ...) */
    unsigned seed;
    const char *eos_json;      /* generation_config eos_token_id, e.g. "[151645, 151643]" */
} testmodel_spec;

/* Writes the HF directory `workdir` and converts it to `out_path`. Returns CMF_OK or the converter's status. */
cmf_status testmodel_write(const testmodel_spec *sp, const char *workdir, const char *out_path);

#endif
