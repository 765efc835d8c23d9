#!/usr/bin/env python3
"""hf_bench.py - the PyTorch / transformers side of bench/cuda/run_acceptance.sh, on the device machine.

Builds a randomly initialised model from a config only (no download: transformers' own init, on the GPU, bf16),
optionally saves it (save_pretrained, safetensors bf16) for `cmf convert`, then measures with the same tests as
bench/cuda/gpu_bench.c, printing "RESULT hf ..." lines:
  - ppP: one forward over P random tokens (use_cache=True, as generate's prefill), tokens/s;
  - tg@C: `generate` (greedy, eager, the default dynamic cache) of G new tokens after a C-token random prompt;
    decode tokens/s = (G - 1) / (time(G new tokens) - time(1 new token)), so the prefill is not counted;
  - with --compile also the static cache + torch.compile(mode="reduce-overhead") variant of tg@C.
Each measurement: one warm-up, then the mean of --reps runs, torch.cuda.synchronize() around each.
Usage: python3 hf_bench.py --shape qwen3-0.6b|qwen3-4b|llama-8b [--save DIR] [--ctx 128,4096] [--gen 32]
       [--pp 512] [--reps 2] [--compile]
"""
import argparse
import time

import torch
import transformers

SHAPES = {
    # the published configs' geometry (hidden, layers, intermediate, heads, kv heads, head_dim, vocab, tied)
    "qwen3-0.6b": ("qwen3", 1024, 28, 3072, 16, 8, 128, 151936, True),
    "qwen3-4b": ("qwen3", 2560, 36, 9728, 32, 8, 128, 151936, True),
    "llama-8b": ("llama", 4096, 32, 14336, 32, 8, 128, 128256, False),
}


def make_config(shape):
    arch, d, l, f, nh, nkv, hd, v, tied = SHAPES[shape]
    common = dict(hidden_size=d, num_hidden_layers=l, intermediate_size=f, num_attention_heads=nh,
                  num_key_value_heads=nkv, head_dim=hd, vocab_size=v, tie_word_embeddings=tied,
                  max_position_embeddings=40960, bos_token_id=1, eos_token_id=2)
    if arch == "qwen3":
        return transformers.Qwen3Config(rms_norm_eps=1e-6, rope_theta=1000000.0, **common)
    return transformers.LlamaConfig(rms_norm_eps=1e-5, rope_theta=500000.0,
                                    rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                                  "high_freq_factor": 4.0, "original_max_position_embeddings": 8192},
                                    **common)


def timed(fn, reps):
    fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        ts.append(time.perf_counter() - t0)
    return sum(ts) / len(ts)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", required=True, choices=sorted(SHAPES))
    ap.add_argument("--save")
    ap.add_argument("--ctx", default="128,4096")
    ap.add_argument("--gen", type=int, default=32)
    ap.add_argument("--pp", type=int, default=512)
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--compile", action="store_true")
    a = ap.parse_args()
    torch.manual_seed(0)
    cfg = make_config(a.shape)
    t0 = time.perf_counter()
    with torch.device("cuda"):
        model = transformers.AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16)
    model.eval()
    print(f"RESULT hf shape={a.shape} params={sum(p.numel() for p in model.parameters()) / 1e9:.3f}e9 "
          f"init_s={time.perf_counter() - t0:.1f} transformers={transformers.__version__} torch={torch.__version__}",
          flush=True)
    if a.save:
        t0 = time.perf_counter()
        model.save_pretrained(a.save)
        print(f"RESULT hf shape={a.shape} saved={a.save} save_s={time.perf_counter() - t0:.1f}", flush=True)
    gen = torch.Generator(device="cuda").manual_seed(1)
    v = cfg.vocab_size
    with torch.no_grad():
        if a.pp > 0:
            ids = torch.randint(0, v, (1, a.pp), device="cuda", generator=gen)
            t = timed(lambda: model(ids, use_cache=True), a.reps)
            print(f"RESULT hf shape={a.shape} test=pp{a.pp} tps={a.pp / t:.2f}", flush=True)
        variants = [("eager", {})]
        if a.compile:
            variants.append(("static+compile", {"cache_implementation": "static"}))
        for name, extra in variants:
            if name != "eager":
                model.forward = torch.compile(model.forward, mode="reduce-overhead", fullgraph=True)
            for c in [int(x) for x in a.ctx.split(",") if x]:
                ids = torch.randint(0, v, (1, c), device="cuda", generator=gen)
                kw = dict(do_sample=False, pad_token_id=0, **extra)
                t0 = time.perf_counter()
                one = timed(lambda: model.generate(ids, max_new_tokens=1, min_new_tokens=1, **kw), a.reps)
                full = timed(lambda: model.generate(ids, max_new_tokens=a.gen, min_new_tokens=a.gen, **kw), a.reps)
                print(f"RESULT hf shape={a.shape} variant={name} test=tg@{c} tps={(a.gen - 1) / (full - one):.2f} "
                      f"wall_s={time.perf_counter() - t0:.1f}", flush=True)


if __name__ == "__main__":
    main()
