#!/usr/bin/env python3
"""Reference outputs from Hugging Face transformers for the parity tests (run on the device machine).

1. bf16-llama (shared/data/hf-tiny): the shipped reference was computed in bfloat16 arithmetic; this computes
   it again with the same BF16 weights upcast to float32 (eager attention) for the same input_i, so the f32
   parity bound (1e-4 x max|logit|) is meaningful.
2. Extra tiny random checkpoints for families the shared set lacks (Phi-3 with fused projections and partial
   rotary, Gemma 3 with q/k norms and a local RoPE base, Llama 3.1 rope_scaling "llama3", YaRN): config.json,
   generation_config.json, model.safetensors and ref.safetensors (input_i, logits_i, greedy_i) like hf-tiny.

usage: python3 make_hf_refs.py SHARED_HF_TINY_DIR OUT_DIR [CASE,CASE,...]   (only those cases; default all)
"""
import json
import os
import sys

import torch
from safetensors.torch import load_file, save_file
from transformers import AutoConfig, AutoModelForCausalLM

torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False
DEV = "cpu"  # float32 on the CPU: no TF32, deterministic


def greedy(model, ids, n):
    ids = ids.clone()
    out = []
    for _ in range(n):
        with torch.no_grad():
            logits = model(ids[None]).logits[0, -1]
        t = int(torch.argmax(logits))
        out.append(t)
        ids = torch.cat([ids, torch.tensor([t])])
    return torch.tensor(out, dtype=torch.int32)


def refs(model, inputs):
    tensors, seqs = {}, []
    for i, ids in enumerate(inputs):
        with torch.no_grad():
            logits = model(ids[None].long()).logits[0].float()
        tensors[f"input_{i}"] = ids.to(torch.int32)
        tensors[f"logits_{i}"] = logits.contiguous()
        tensors[f"greedy_{i}"] = greedy(model, ids.long(), 24)
        seqs.append({"index": i, "len": len(ids), "logits": "all", "greedy_new": 24})
    return tensors, seqs


def write_case(out, name, model, inputs, note):
    import transformers
    d = os.path.join(out, name)
    os.makedirs(d, exist_ok=True)
    tensors, seqs = refs(model, inputs)
    save_file(tensors, os.path.join(d, "ref.safetensors"))
    meta = {"case": name, "arch": type(model).__name__, "transformers": transformers.__version__,
            "torch": torch.__version__, "dtype": "torch.float32", "note": note, "sequences": seqs}
    with open(os.path.join(d, "ref.json"), "w") as f:
        json.dump(meta, f, indent=1)


def main():
    shared, out = sys.argv[1], sys.argv[2]
    only = set(sys.argv[3].split(",")) if len(sys.argv) > 3 else None
    os.makedirs(out, exist_ok=True)

    # 1. bf16-llama recomputed in float32
    if only is None or "bf16-llama-f32ref" in only:
        src = os.path.join(shared, "bf16-llama")
        old = load_file(os.path.join(src, "ref.safetensors"))
        inputs = [old[f"input_{i}"] for i in range(3)]
        model = AutoModelForCausalLM.from_pretrained(src, dtype=torch.float32, attn_implementation="eager").eval()
        write_case(out, "bf16-llama-f32ref", model, inputs,
                   "shared/data/hf-tiny/bf16-llama weights (BF16) upcast to float32; same input_i as its ref")

    # 2. extra tiny random checkpoints
    cases = {
        "phi3": dict(model_type="phi3", hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                     num_attention_heads=4, num_key_value_heads=2, vocab_size=1024, max_position_embeddings=512,
                     partial_rotary_factor=0.5, pad_token_id=0, bos_token_id=1, eos_token_id=2,
                     tie_word_embeddings=False, sliding_window=None),
        "gemma3": dict(model_type="gemma3_text", hidden_size=64, intermediate_size=128, num_hidden_layers=6,
                       num_attention_heads=4, num_key_value_heads=2, head_dim=16, vocab_size=1024,
                       max_position_embeddings=512, sliding_window=16, query_pre_attn_scalar=16,
                       pad_token_id=0, bos_token_id=2, eos_token_id=1),
        "llama31-rope": dict(model_type="llama", hidden_size=64, intermediate_size=160, num_hidden_layers=2,
                             num_attention_heads=4, num_key_value_heads=2, head_dim=16, vocab_size=1024,
                             max_position_embeddings=512, bos_token_id=1, eos_token_id=2,
                             rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0,
                                              "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                              "original_max_position_embeddings": 32}),
        # YaRN (rope_type "yarn"): the default attention factor (1 + 0.1 ln 4) and explicit betas / factor; the
        # inputs run past the original window of 32.
        "qwen2-yarn": dict(model_type="qwen2", hidden_size=64, intermediate_size=160, num_hidden_layers=2,
                           num_attention_heads=4, num_key_value_heads=2, vocab_size=1024,
                           max_position_embeddings=128, bos_token_id=1, eos_token_id=2, tie_word_embeddings=False,
                           rope_parameters={"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0,
                                            "original_max_position_embeddings": 32}),
        "llama-yarn-af": dict(model_type="llama", hidden_size=64, intermediate_size=160, num_hidden_layers=2,
                              num_attention_heads=4, num_key_value_heads=2, head_dim=16, vocab_size=1024,
                              max_position_embeddings=256, bos_token_id=1, eos_token_id=2,
                              rope_parameters={"rope_type": "yarn", "rope_theta": 10000.0, "factor": 8.0,
                                               "original_max_position_embeddings": 32, "beta_fast": 16.0,
                                               "beta_slow": 2.0, "attention_factor": 1.2}),
    }
    for i, (name, kw) in enumerate(cases.items()):
        if only is not None and name not in only:
            continue
        torch.manual_seed(200 + i)
        mt = kw.pop("model_type")
        cfg = AutoConfig.for_model(mt, **kw)
        cfg._attn_implementation = "eager"
        model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32, attn_implementation="eager").eval()
        with torch.no_grad():  # larger random weights than the init so that every path matters
            for n, p in model.named_parameters():
                if p.dim() == 1:
                    p.copy_(torch.randn_like(p) * 0.5 + (0.0 if "gemma" in mt else 1.0))
                else:
                    p.copy_(torch.randn_like(p) * 0.08)
        d = os.path.join(out, name)
        model.save_pretrained(d, safe_serialization=True)
        g = torch.Generator().manual_seed(300 + i)
        inputs = [torch.randint(3, 1024, (n,), generator=g, dtype=torch.int32) for n in (7, 40, 100)]
        write_case(out, name, model, inputs, "random weights; reference outputs in float32, eager attention")
    print("done:", sorted(os.listdir(out)))


if __name__ == "__main__":
    main()
