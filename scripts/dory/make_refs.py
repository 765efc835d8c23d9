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

The last_loop KV mode with several prompt chunks is outside what forward() can express; for it the script runs OUR
numpy model of chunked inference (OurIncremental, written for this project), which must first reproduce forward()
under per_loop at chunks 8/3/1 and under last_loop in one chunk (asserted), and stores its last_loop results as
ours_lastloop_<seq>_k2_chunk<c> — those references are ours, not llama.cpp's.

Usage: make_refs.py /path/to/llama.cpp/tests/test-dory.py [out_dir]
Weights: matrices ~ N(0, 0.06), vectors ~ U(0.7, 1.3)·σ₀ (as in the llama.cpp fixture), numpy default_rng seed 1729.
Outputs per case <name>/: config.json, model.safetensors (F32 or BF16), ref.safetensors with int32 `tokens_<i>`
[8], float32 `logits_<i>_k<loops>` [8, vocab] (llama.cpp's forward), `ours_lastloop_<i>_k2_chunk<c>` (tiny only,
ours) and ref.json describing them.
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


class OurIncremental:
    """OUR numpy model of chunked inference with a KV cache (written for this project, not llama.cpp's): DORY.md
    §1.4-1.8 with per-layer caches keyed by (layer, loop) under per_loop and by layer under last_loop. Under
    per_loop it must reproduce llama.cpp's one-shot forward() (checked below before anything is written); under
    last_loop with several chunks it gives the reference for the behaviour llama.cpp's test cannot express (each
    loop overwrites this chunk's rows; earlier tokens are seen through their final-loop K/V)."""

    def __init__(self, w, pattern, counts, dims, window, theta1, theta2, std, alpha_init, mode):
        self.w, self.pattern, self.counts, self.mode = w, pattern, counts, mode
        self.H, self.FF, self.HD, self.NH, self.NK, self.V = dims
        self.window, self.std, self.alpha_init = window, np.float32(std), np.float32(alpha_init)
        self.theta = {"S": theta2, "*": theta1}
        self.cache, self.pos = {}, 0

    @staticmethod
    def jn(x):
        return x / np.sqrt(np.sum(x * x, axis=-1, keepdims=True) + np.float32(1e-6))

    def rot(self, x, pos, theta):
        half = self.HD // 2
        inv = np.float32(theta) ** (-np.arange(0, self.HD, 2, dtype=np.float32) / np.float32(self.HD))
        ang = pos[:, None, None].astype(np.float32) * inv
        c, s = np.cos(ang), np.sin(ang)
        lo, hi = x[..., :half], x[..., half:]
        return np.concatenate((lo * c - hi * s, hi * c + lo * s), axis=-1)

    def sub(self, x, i, loop):
        W = lambda r: self.w[f"blk.{i}.{r}.weight"]  # noqa: E731
        n = x.shape[0]
        if self.pattern[i] == "-":
            sh = np.sqrt(np.float32(self.H))
            g = (x @ W("ffn_gate").T) * (W("dory_suv_gate") * sh)
            u = (x @ W("ffn_up").T) * (W("dory_suv_up") * sh)
            y = self.jn(g / (1 + np.exp(-g)) * u) @ W("ffn_down").T
        else:
            pos = np.arange(self.pos, self.pos + n)
            th = self.theta[self.pattern[i]]
            q = self.rot((x @ W("attn_q").T).reshape(n, self.NH, self.HD), pos, th)
            k = self.rot((x @ W("attn_k").T).reshape(n, self.NK, self.HD), pos, th)
            v = (x @ W("attn_v").T).reshape(n, self.NK, self.HD)
            qs = (W("dory_sqk").reshape(self.NH, self.HD) * np.sqrt(np.float32(self.HD)) / self.std) ** 2
            q, k = self.jn(q) * qs, self.jn(k)
            ni, nr, _ = self.counts
            key = (i, loop) if (ni <= i < ni + nr and self.mode == "per_loop") else (i, 0)
            K, V = self.cache.setdefault(key, (np.zeros((64, self.NK, self.HD), np.float32),
                                               np.zeros((64, self.NK, self.HD), np.float32)))
            K[pos], V[pos] = k, v
            grp = self.NH // self.NK
            y = np.zeros((n, self.NH, self.HD), np.float32)
            for t in range(n):
                p = pos[t]
                lo = max(0, p - self.window + 1) if self.pattern[i] == "S" else 0
                for h in range(self.NH):
                    sc = (K[lo:p + 1, h // grp] @ q[t, h]) / np.sqrt(np.float32(self.HD))
                    e = np.exp(sc - sc.max())
                    y[t, h] = (e / e.sum()) @ V[lo:p + 1, h // grp]
            y = y.reshape(n, self.NH * self.HD)
            sg = (W("dory_s_gate") * np.sqrt(np.float32(np.sqrt(self.H))) / self.std) ** 2
            y = y / (1 + np.exp(-(x @ W("attn_gate").T) * sg))
            y = self.jn(y) @ W("attn_output").T
        a, b = self.jn(x), self.jn(y)
        lam = np.abs(W("dory_alpha") * (self.alpha_init / self.std))
        return self.jn(a + lam * (b - a))

    def chunk(self, ids, loops):
        ni, nr, no = self.counts
        x = self.w["token_embd.weight"][ids]
        for i in range(ni):
            x = self.sub(x, i, 0)
        inp = x.copy()
        for lp in range(loops):
            x = self.jn(x + inp)
            for i in range(ni, ni + nr):
                x = self.sub(x, i, lp)
            x = self.jn(x)
        for i in range(ni + nr, ni + nr + no):
            x = self.sub(x, i, 0)
        self.pos += len(ids)
        return (x @ self.w["output.weight"].T) * (self.w["dory_logit_scale.weight"] / self.std)


def ours(gg, pattern, counts, dims, mode, ids, loops, chunk):
    m = OurIncremental(gg, pattern, counts, dims, 4, 1e7, 1e4, STD, 0.05, mode)
    return np.concatenate([m.chunk(ids[i:i + chunk], loops) for i in range(0, len(ids), chunk)]).astype(np.float32)


def make_case(ref, out, name, dims, pattern, counts, loops_list, n_seqs, dtype, kv_mode, with_ours=False):
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
            if with_ours and k == 2:
                # our incremental model must agree with llama.cpp's forward() where both apply ...
                for c in (8, 3, 1):
                    pl = ours(gg, pattern, counts, dims, "per_loop", seq, k, c)
                    assert np.abs(pl - lg).max() <= 3e-6 * np.abs(lg).max(), ("our per_loop model disagrees", c)
                assert np.abs(ours(gg, pattern, counts, dims, "last_loop", seq, k, 8) - lg).max() <= 3e-6 * np.abs(lg).max()
                # ... before it provides last_loop references for chunked inference
                for c in (3, 1):
                    refs.append((f"ours_lastloop_{si}_k{k}_chunk{c}", ours(gg, pattern, counts, dims, "last_loop", seq, k, c)))

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
        "note": "logits_* are llama.cpp forward() results (whole sequence, one shot, F32, positions 0..7); "
                "ours_lastloop_<seq>_k2_chunk<c> come from OUR numpy model (OurIncremental in make_refs.py) of the "
                "last_loop KV mode with prompt chunks of c tokens, which is first checked to reproduce "
                "forward() under per_loop (chunks 8/3/1) and last_loop (one chunk)"}, indent=1) + "\n")


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    ref = load_reference(sys.argv[1])
    out = Path(sys.argv[2]) if len(sys.argv) > 2 else Path(__file__).resolve().parents[2] / "tests/data/dory"
    make_case(ref, out, "tiny", (64, 96, 16, 4, 2, 32), "*-S-*-", (2, 2, 2), [1, 2, 4], 3, "F32", "per_loop",
              with_ours=True)
    make_case(ref, out, "deep", (32, 32, 8, 4, 2, 32), "S-S-S-*-" * 9, (16, 40, 16), [4], 1, "BF16", "last_loop")


if __name__ == "__main__":
    main()
