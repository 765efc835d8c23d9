#!/usr/bin/env python3
"""Builds tests/data/dory/: tiny random Dory checkpoints in the Hugging Face schema (DORY.md §1.2, §1.3) and the
logits that llama.cpp's independent numpy F32 Dory reference computes for them.

The reference is NOT part of this repository: pass the path of llama.cpp's tests/test-dory.py (ggml-org/llama.cpp,
commit e0844da5a23cb6c77e7749074f32a93bb6f0b716). Only its `forward(weights, loops, pattern, counts)` is used; it
reads the module constants H, FF, HD, NH, NK, VOCAB, STD, which this script sets for each case (the shipped sizes
of the llama.cpp fixture would make > 2 MB of test data). Its module imports llama.cpp's gguf-py package at the top;
forward() does not use it, so a placeholder module is installed when gguf-py is not importable.
forward() hard-codes: window 4, theta 1e7 (full) / 1e4 (S), ngpt_alpha_init 0.05, gate init sqrt(H), positions
0..7 and the token ids 3..10 (rows 3..10 of the embedding). Other token sequences of length 8 are run by handing it a
copy of the weights whose embedding rows 3..10 hold the rows of the wanted tokens.

Usage: make_refs.py /path/to/llama.cpp/tests/test-dory.py [out_dir]
Weights: matrices ~ N(0, 0.06), vectors ~ U(0.7, 1.3)·σ₀ (as in the llama.cpp fixture), numpy default_rng seed 1729.
Outputs per case <name>/: config.json, model.safetensors (F32 or BF16), ref.safetensors with int32 `tokens_<i>`
[8] and float32 `logits_<i>_k<loops>` [8, vocab], and ref.json describing them.
"""
import importlib.util
import json
import sys
import types
from pathlib import Path

import numpy as np

SEED = 1729
STD = 0.0177


def load_reference(path):
    try:
        import gguf  # noqa: F401
    except ImportError:
        sys.modules["gguf"] = types.ModuleType("gguf")
    spec = importlib.util.spec_from_file_location("llamacpp_test_dory", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def bf16_round(x):
    b = x.astype(np.float32).view(np.uint32).astype(np.uint64)
    b = ((b + 0x7FFF + ((b >> 16) & 1)) >> 16) << 16
    return b.astype(np.uint32).view(np.float32)


def write_safetensors(path, tensors, dtype):
    """tensors: list of (name, np.float32 array or int32 array); dtype 'F32' or 'BF16' for float tensors."""
    header, blobs, off = {}, [], 0
    for name, a in tensors:
        if a.dtype == np.int32:
            raw, dt = a.tobytes(), "I32"
        elif dtype == "BF16":
            raw, dt = (a.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16).tobytes(), "BF16"
        else:
            raw, dt = a.astype(np.float32).tobytes(), "F32"
        header[name] = {"dtype": dt, "shape": list(a.shape), "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(len(h).to_bytes(8, "little"))
        f.write(h)
        for b in blobs:
            f.write(b)


def make_case(ref, out, name, dims, pattern, counts, loops_list, n_seqs, dtype, kv_mode):
    H, FF, HD, NH, NK, V = dims
    rng = np.random.default_rng(SEED)
    hf, gg = {}, {}  # HF name -> array; GGUF name (what forward() reads) -> same array

    def add(hf_name, gg_name, shape, vector=False):
        x = rng.normal(0, 0.06, shape).astype(np.float32)
        if vector:
            x = (rng.uniform(0.7, 1.3, shape) * STD).astype(np.float32)
        if dtype == "BF16":
            x = bf16_round(x)
        hf[hf_name] = x
        gg[gg_name] = x

    add("backbone.embeddings.weight", "token_embd.weight", (V, H))
    add("lm_head.weight", "output.weight", (V, H))
    add("lm_head.logit_scale", "dory_logit_scale.weight", (V,), True)
    for i, c in enumerate(pattern):
        p, g = f"backbone.layers.{i}.", f"blk.{i}."
        if c == "-":
            add(p + "mlp_alpha", g + "dory_alpha.weight", (H,), True)
            add(p + "mixer.gate_proj.weight", g + "ffn_gate.weight", (FF, H))
            add(p + "mixer.up_proj.weight", g + "ffn_up.weight", (FF, H))
            add(p + "mixer.down_proj.weight", g + "ffn_down.weight", (H, FF))
            add(p + "mixer.suv_gate", g + "dory_suv_gate.weight", (FF,), True)
            add(p + "mixer.suv_up", g + "dory_suv_up.weight", (FF,), True)
        else:
            add(p + "attn_alpha", g + "dory_alpha.weight", (H,), True)
            add(p + "mixer.q_proj.weight", g + "attn_q.weight", (NH * HD, H))
            add(p + "mixer.k_proj.weight", g + "attn_k.weight", (NK * HD, H))
            add(p + "mixer.v_proj.weight", g + "attn_v.weight", (NK * HD, H))
            add(p + "mixer.g_proj.weight", g + "attn_gate.weight", (NH * HD, H))
            add(p + "mixer.o_proj.weight", g + "attn_output.weight", (H, NH * HD))
            add(p + "mixer.sqk", g + "dory_sqk.weight", (NH * HD,), True)
            add(p + "mixer.s_gate", g + "dory_s_gate.weight", (NH * HD,), True)

    cfg = {
        "model_type": "dory", "architectures": ["DoryForCausalLM"], "dory_format_version": 1,
        "vocab_size": V, "hidden_size": H, "num_hidden_layers": len(pattern), "intermediate_size": FF,
        "num_attention_heads": NH, "num_key_value_heads": NK, "attention_head_dim": HD, "head_dim": HD,
        "max_position_embeddings": 64, "tie_word_embeddings": False, "hybrid_layer_pattern": pattern,
        "swa_window_size": 4, "swa_num_attention_heads": None, "swa_num_key_value_heads": None,
        "swa_head_dim": None, "rope_theta": 1e7, "partial_rotary_factor": 1.0, "rope_theta_2": 1e4,
        "partial_rotary_factor_2": 1.0,
        "rope_profile_layers": [2 if c == "S" else 1 for c in pattern],
        "no_rope_layers": [0] * len(pattern), "ngpt": True, "fngpt": True, "init_method_std": STD,
        "ngpt_alpha_init": 0.05, "ngpt_enable_final_norm": False, "attention_output_gate": True,
        "attention_output_gate_logit_scale_init": None, "mlp_hidden_act": "silu", "mlp_bias": False,
        "attention_bias": False, "n_input_layers": counts[0], "n_recurrent_layers": counts[1],
        "n_output_layers": counts[2], "n_recurrent_loops": 2, "recurrent_kv_cache_mode": kv_mode,
        "initial_state": "input_copy", "input_transform": "residual", "output_transform": "replace",
        "mixer_type": None, "torch_dtype": "bfloat16" if dtype == "BF16" else "float32",
    }
    # rope_profile_layers: S -> 2 (rope_theta_2), other sub-layers -> 1, as llama.cpp's fixture writes dory.rope.profile
    # (an MLP sub-layer's entry is not used; 0 would mean NoPE, which is rejected).

    # the reference module's sizes for this case
    ref.H, ref.FF, ref.HD, ref.NH, ref.NK, ref.VOCAB = H, FF, HD, NH, NK, V
    ref.STD = np.float32(STD)

    seq_rng = np.random.default_rng(SEED + 1)
    seqs = [np.arange(3, 11, dtype=np.int32)]
    while len(seqs) < n_seqs:
        seqs.append(seq_rng.integers(0, V, 8).astype(np.int32))
    refs = []
    for si, seq in enumerate(seqs):
        w = dict(gg)
        emb = gg["token_embd.weight"].copy()
        emb[3:11] = gg["token_embd.weight"][seq]
        w["token_embd.weight"] = emb
        refs.append((f"tokens_{si}", seq))
        for k in loops_list:
            lg = ref.forward(w, k, pattern, counts).astype(np.float32)
            assert np.isfinite(lg).all()
            refs.append((f"logits_{si}_k{k}", lg))

    d = out / name
    d.mkdir(parents=True, exist_ok=True)
    (d / "config.json").write_text(json.dumps(cfg, indent=1) + "\n")
    write_safetensors(d / "model.safetensors", list(hf.items()), dtype)
    write_safetensors(d / "ref.safetensors", refs, "F32")
    (d / "ref.json").write_text(json.dumps({
        "generator": "scripts/dory/make_refs.py with llama.cpp tests/test-dory.py forward() "
                     "(ggml-org/llama.cpp e0844da5a23cb6c77e7749074f32a93bb6f0b716)",
        "seed": SEED, "dims": dict(H=H, FF=FF, HD=HD, NH=NH, NK=NK, VOCAB=V), "pattern": pattern,
        "counts": list(counts), "loops": loops_list, "n_seqs": len(seqs), "seq_len": 8,
        "checkpoint_dtype": dtype, "kv_mode_in_config": kv_mode,
        "note": "logits are whole-sequence (one-shot) F32 results; positions 0..7"}, indent=1) + "\n")


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    ref = load_reference(sys.argv[1])
    out = Path(sys.argv[2]) if len(sys.argv) > 2 else Path(__file__).resolve().parents[2] / "tests/data/dory"
    make_case(ref, out, "tiny", (64, 96, 16, 4, 2, 32), "*-S-*-", (2, 2, 2), [1, 2, 4], 3, "F32", "per_loop")
    make_case(ref, out, "deep", (32, 32, 8, 4, 2, 32), "S-S-S-*-" * 9, (16, 40, 16), [4], 1, "BF16", "last_loop")


if __name__ == "__main__":
    main()
