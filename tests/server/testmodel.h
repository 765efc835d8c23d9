/* testmodel.h — random-weight Qwen3 models for the server tests and benchmark, written as a Hugging Face
 * directory (config.json, generation_config.json, model.safetensors of float32 weights from a seeded PRNG, and a
 * real tokenizer's tokenizer.json / tokenizer_config.json) and converted with cmf_convert_hf, so the file has the
 * header, tokenizer and chat template exactly as a converted checkpoint has them. */
#ifndef CMF_TEST_SERVER_TESTMODEL_H
#define CMF_TEST_SERVER_TESTMODEL_H

#include <stdint.h>

#include "cmf.h"

typedef struct testmodel_spec {
    const char *tokenizer_dir; /* holds tokenizer.json (+ tokenizer_config.json); vocab_size = its token count */
    int vocab;                 /* the tokenizer's size (ids 0..vocab-1) */
    int hidden, layers, n_heads, n_kv_heads, head_dim, intermediate;
    int quant;                 /* enum cmf_dtype for 2-D matrices (CMF_DT_F32, CMF_DT_Q8_ROW, ...) */
    unsigned seed;
    const char *eos_json;      /* generation_config eos_token_id, e.g. "[151645, 151643]" */
    /* Optional, a "chain" model whose greedy output is known: with n_chain > 0 (distinct ids, n_chain <= hidden)
     * the attention and MLP outputs are zero (o_proj, down_proj), the embedding of chain[i] is the unit vector e_i,
     * and an untied lm_head maps e_i to chain[i+1] (to chain_end after the last), so greedy decoding after chain[i]
     * yields chain[i+1], ..., chain[n_chain-1], chain_end. Every other weight stays random (embeddings and lm_head
     * rows scaled by 0.01). */
    const int32_t *chain;
    int n_chain;
    int32_t chain_end;
} testmodel_spec;

/* Writes the HF directory `workdir` and converts it to `out_path`. Returns CMF_OK or the converter's status. */
cmf_status testmodel_write(const testmodel_spec *sp, const char *workdir, const char *out_path);

#endif
