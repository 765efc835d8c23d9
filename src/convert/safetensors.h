/* safetensors.h — read-only access to Hugging Face safetensors checkpoints, single file or sharded
 * (model.safetensors.index.json). Format: u64 LE header length, JSON header {name: {dtype, shape,
 * data_offsets:[begin,end]}, "__metadata__": {...}}, then the data (offsets relative to the end of the header). */
#ifndef CMF_CONVERT_SAFETENSORS_H
#define CMF_CONVERT_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "cmf.h"

enum cmf_st_dtype { CMF_ST_F32, CMF_ST_F16, CMF_ST_BF16, CMF_ST_I32, CMF_ST_I64, CMF_ST_OTHER };

typedef struct cmf_st_tensor {
    char *name;
    int dtype;          /* enum cmf_st_dtype */
    char dtype_str[16]; /* as written in the file ("F32", "BF16", ...) */
    int ndim;
    uint64_t shape[8];
    const uint8_t *data; /* into the mapping of its shard */
    uint64_t nbytes;
} cmf_st_tensor;

typedef struct cmf_safetensors cmf_safetensors;

/* Opens `path`: a .safetensors file, or a directory holding model.safetensors or model.safetensors.index.json
 * (+ its shards). Every header is validated (offsets inside the file, sizes matching dtype x shape, no overlap
 * with the header). Errors: CMF_E_IO, CMF_E_FORMAT (message names file and tensor). */
cmf_status cmf_st_open(const char *path, cmf_safetensors **out);
void cmf_st_close(cmf_safetensors *st);

/* Tensors in file order (shard by shard). */
size_t cmf_st_count(const cmf_safetensors *st);
const cmf_st_tensor *cmf_st_get(const cmf_safetensors *st, size_t i);
const cmf_st_tensor *cmf_st_find(const cmf_safetensors *st, const char *name);

/* The opened shard files (one for a single model.safetensors): their paths as opened, i < cmf_st_shard_count. */
size_t cmf_st_shard_count(const cmf_safetensors *st);
const char *cmf_st_shard_path(const cmf_safetensors *st, size_t i);

/* Element count. */
uint64_t cmf_st_numel(const cmf_st_tensor *t);

/* Converts a F32/F16/BF16/I32/I64 tensor to numel floats in `out`. Errors: CMF_E_UNSUPPORTED for other dtypes. */
cmf_status cmf_st_to_f32(const cmf_st_tensor *t, float *out);

#endif
