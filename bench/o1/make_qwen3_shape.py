#!/usr/bin/env python3
"""make_qwen3_shape.py OUTDIR — a Hugging Face-style Qwen3 checkpoint with Qwen3-0.6B's shape and pseudo-random
f16 weights (hidden 1024, 28 layers, 16 heads, 8 KV heads, head_dim 128, ffn 3072, vocab 151936, tied
embeddings, q/k norm), for decode-speed benchmarks only (bench/o1/RESULTS.md). Standard library only: one 4 MiB
block of f16 values ~ U(-0.04, 0.04) is generated and each tensor reads it from a different offset (the values
do not matter for speed). Then: cmf convert OUTDIR -o model.cmf --quant q8 (the qwen3 tokenizer is copied in
from shared/data/tokenizers/qwen3 when CMF_SHARED is set)."""
import json, os, random, shutil, struct, sys

H, L, NH, NKV, HD, F, V = 1024, 28, 16, 8, 128, 3072, 151936
out = sys.argv[1]
os.makedirs(out, exist_ok=True)
rng = random.Random(1)
BLOCK = 2 * 1024 * 1024  # f16 values
block = struct.pack("<%de" % BLOCK, *[rng.uniform(-0.04, 0.04) for _ in range(BLOCK)])
tensors = [("model.embed_tokens.weight", [V, H]), ("model.norm.weight", [H])]
for l in range(L):
    p = "model.layers.%d." % l
    tensors += [(p + "input_layernorm.weight", [H]), (p + "post_attention_layernorm.weight", [H]),
                (p + "self_attn.q_proj.weight", [NH * HD, H]), (p + "self_attn.k_proj.weight", [NKV * HD, H]),
                (p + "self_attn.v_proj.weight", [NKV * HD, H]), (p + "self_attn.o_proj.weight", [H, NH * HD]),
                (p + "self_attn.q_norm.weight", [HD]), (p + "self_attn.k_norm.weight", [HD]),
                (p + "mlp.gate_proj.weight", [F, H]), (p + "mlp.up_proj.weight", [F, H]),
                (p + "mlp.down_proj.weight", [H, F])]
meta, off = {}, 0
for name, shape in tensors:
    n = 1
    for s in shape:
        n *= s
    meta[name] = {"dtype": "F16", "shape": shape, "data_offsets": [off, off + 2 * n]}
    off += 2 * n
hdr = json.dumps(meta).encode()
hdr += b" " * (-len(hdr) % 8)
ONE = struct.pack("<e", 1.0)
with open(os.path.join(out, "model.safetensors"), "wb") as f:
    f.write(struct.pack("<Q", len(hdr)) + hdr)
    for i, (name, shape) in enumerate(tensors):
        nbytes = meta[name]["data_offsets"][1] - meta[name]["data_offsets"][0]
        if name.endswith("norm.weight"):
            f.write(ONE * (nbytes // 2))
            continue
        start = (i * 7919 * 2) % len(block)
        while nbytes > 0:
            chunk = block[start:start + nbytes]
            f.write(chunk)
            nbytes -= len(chunk)
            start = 0
cfg = {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": H, "num_hidden_layers": L,
       "num_attention_heads": NH, "num_key_value_heads": NKV, "head_dim": HD, "intermediate_size": F,
       "vocab_size": V, "max_position_embeddings": 40960, "rms_norm_eps": 1e-6, "rope_theta": 1000000.0,
       "hidden_act": "silu", "tie_word_embeddings": True, "attention_bias": False, "torch_dtype": "float16",
       "bos_token_id": 151643, "eos_token_id": 151645}
json.dump(cfg, open(os.path.join(out, "config.json"), "w"), indent=1)
tok = os.path.join(os.environ.get("CMF_SHARED", ""), "data/tokenizers/qwen3")
for fn in ("tokenizer.json", "tokenizer_config.json"):
    if os.path.exists(os.path.join(tok, fn)):
        shutil.copy(os.path.join(tok, fn), out)
