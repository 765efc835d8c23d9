#!/usr/bin/env python3
"""make_4b_shape.py — writes a random Dory checkpoint shaped like Dory1.0-4B (DORY.md §1.1-§1.3) in the Hugging Face
schema, for speed measurements only (the weights are random; the output is meaningless text).

Shape (DORY.md §1.1): vocab 131072, hidden 2560, MLP 7168, 16 query / 4 KV heads, head_dim 256, 72 sub-layers with the
pattern "S-S-S-*-" x 9, blocks 16 input / 40 recurrent / 16 output, untied lm_head with logit_scale. The 4B's own
values of rope_theta, rope_theta_2, swa_window_size, init_method_std and max_position_embeddings are not known
(DORY.md §1.3 "UNCERTAIN"); this uses llama.cpp's fixture values (θ 1e7 full / 1e4 S, σ₀ 0.0177), the class default
window 1024, n_recurrent_loops 2 and last_loop KV (so one session may run any loop count). None of them changes the
amount of work per decoded token except the window (sliding layers attend over at most 1024 keys).

The tensor list adds up to 3,975,229,440 elements (asserted; the card's count). Written as BF16: 7.95 GB. To keep
generation fast the matrices are cut from one 32 Mi-value pool of N(0, 0.02) bf16 values at random offsets (the
values do not matter for speed); the vectors are U(0.7, 1.3)·σ₀.

Usage: make_4b_shape.py OUT_DIR      (then: cmf convert OUT_DIR -o dory4b-q8.cmf --quant q8)
"""
import json
import struct
import sys
from pathlib import Path

import numpy as np

V, H, F, NH, NKV, HD = 131072, 2560, 7168, 16, 4, 256
PATTERN = "S-S-S-*-" * 9
COUNTS = (16, 40, 16)
STD = 0.0177
POOL = 1 << 25


def tensors():
    """(name, shape, kind) in file order; kind 'm' = matrix, 'v' = scale vector."""
    out = [("backbone.embeddings.weight", (V, H), "m"), ("lm_head.weight", (V, H), "m"),
           ("lm_head.logit_scale", (V,), "v")]
    for i, c in enumerate(PATTERN):
        p = f"backbone.layers.{i}."
        if c == "-":
            out += [(p + "mlp_alpha", (H,), "v"), (p + "mixer.gate_proj.weight", (F, H), "m"),
                    (p + "mixer.up_proj.weight", (F, H), "m"), (p + "mixer.down_proj.weight", (H, F), "m"),
                    (p + "mixer.suv_gate", (F,), "v"), (p + "mixer.suv_up", (F,), "v")]
        else:
            out += [(p + "attn_alpha", (H,), "v"), (p + "mixer.q_proj.weight", (NH * HD, H), "m"),
                    (p + "mixer.k_proj.weight", (NKV * HD, H), "m"), (p + "mixer.v_proj.weight", (NKV * HD, H), "m"),
                    (p + "mixer.g_proj.weight", (NH * HD, H), "m"), (p + "mixer.o_proj.weight", (H, NH * HD), "m"),
                    (p + "mixer.sqk", (NH * HD,), "v"), (p + "mixer.s_gate", (NH * HD,), "v")]
    return out


def bf16_bits(x):
    b = np.asarray(x, np.float32).view(np.uint32).astype(np.uint64)
    return (((b + 0x7FFF + ((b >> 16) & 1)) >> 16) & 0xFFFF).astype("<u2")


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    ts = tensors()
    total = sum(int(np.prod(s)) for _, s, _ in ts)
    assert total == 3_975_229_440, total
    rng = np.random.default_rng(4)
    pool = bf16_bits(rng.normal(0.0, 0.02, POOL))
    pool = np.concatenate([pool, pool])  # any window of up to POOL values is contiguous
    header, off = {}, 0
    for name, shape, _ in ts:
        n = int(np.prod(shape)) * 2
        header[name] = {"dtype": "BF16", "shape": list(shape), "data_offsets": [off, off + n]}
        off += n
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(out / "model.safetensors", "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h)
        for name, shape, kind in ts:
            n = int(np.prod(shape))
            if kind == "v":
                f.write(bf16_bits(rng.uniform(0.7, 1.3, n) * STD).tobytes())
                continue
            while n > 0:
                k = min(n, POOL)
                s = int(rng.integers(0, POOL))
                f.write(pool[s:s + k].tobytes())
                n -= k
    cfg = {
        "model_type": "dory", "architectures": ["DoryForCausalLM"], "dory_format_version": 1,
        "vocab_size": V, "hidden_size": H, "num_hidden_layers": len(PATTERN), "intermediate_size": F,
        "num_attention_heads": NH, "num_key_value_heads": NKV, "attention_head_dim": HD, "head_dim": HD,
        "max_position_embeddings": 8192, "tie_word_embeddings": False, "hybrid_layer_pattern": PATTERN,
        "swa_window_size": 1024, "swa_num_attention_heads": None, "swa_num_key_value_heads": None,
        "swa_head_dim": None, "rope_theta": 1e7, "partial_rotary_factor": 1.0, "rope_theta_2": 1e4,
        "partial_rotary_factor_2": 1.0, "rope_profile_layers": [2 if c == "S" else 1 for c in PATTERN],
        "no_rope_layers": [0] * len(PATTERN), "ngpt": True, "fngpt": True, "init_method_std": STD,
        "ngpt_alpha_init": 0.05, "ngpt_enable_final_norm": False, "attention_output_gate": True,
        "attention_output_gate_logit_scale_init": None, "mlp_hidden_act": "silu", "mlp_bias": False,
        "attention_bias": False, "n_input_layers": COUNTS[0], "n_recurrent_layers": COUNTS[1],
        "n_output_layers": COUNTS[2], "n_recurrent_loops": 2, "recurrent_kv_cache_mode": "last_loop",
        "initial_state": "input_copy", "input_transform": "residual", "output_transform": "replace",
        "mixer_type": None, "torch_dtype": "bfloat16",
    }
    (out / "config.json").write_text(json.dumps(cfg, indent=1) + "\n")
    print(f"{out}: {total:,} elements, {off:,} bytes of BF16")


if __name__ == "__main__":
    main()
