#!/usr/bin/env python3
"""torch_dory.py — the PyTorch peer for bench/dory/cuda_bench.sh: the Dory forward (DORY.md §1.4-§1.8) written
directly in PyTorch eager mode, bf16 weights and activations (norms in f32), random weights shaped like Dory1.0-4B
(the shape of bench/dory/make_random_dory.c: vocab 131072, hidden 2560, MLP 7168, 16/4 heads, head_dim 256,
"S-S-S-*-" x 9, blocks 16/40/16, 2 loops, last_loop KV, window 1024), batch 1, on the GPU.

transformers has no Dory class, so this plays the part of a plain framework implementation (what a
trust_remote_code model would run): one op per line of the spec, a preallocated KV cache per attention slot,
torch.nn.functional.scaled_dot_product_attention, greedy argmax with one host sync per token (as generate() does).

Prints lines in dory_gpu_bench's format:
  RESULT model=dory4b-torch-bf16 test=pp512 loops=2 tps=... sd=...
  RESULT model=dory4b-torch-bf16 test=tg@128-torch loops=2 tps=... sd=... ms_per_token=...
Usage: torch_dory.py [-p 512] [-c 128] [-g 32] [-r 3] [--hidden 2560 --cycles 9 ...] (needs torch and a GPU)."""
import argparse
import math
import statistics
import time

import torch
import torch.nn.functional as F

STD, ALPHA, EPS = 0.0177, 0.05, 1e-6


def justnorm(x):
    """x / sqrt(sum x^2 + 1e-6) over the last dim, accumulated in f32 (§1.4)."""
    xf = x.float()
    return (xf * torch.rsqrt((xf * xf).sum(-1, keepdim=True) + EPS)).to(x.dtype)


class Dory:
    def __init__(self, a, dev):
        self.a, self.dev, dt = a, dev, torch.bfloat16
        H, Fd, NH, NKV, HD, V = a.hidden, a.intermediate, a.n_heads, a.n_kv_heads, a.head_dim, a.vocab
        c_in = max(1, int(a.cycles / 4.5 + 0.5))
        self.pattern = "S-S-S-*-" * a.cycles
        self.n_in, self.n_rec = 8 * c_in, 8 * (a.cycles - 2 * c_in)
        g = torch.Generator(device=dev).manual_seed(7)

        def mat(r, c):
            return ((torch.rand(r, c, generator=g, device=dev, dtype=torch.float32) * 2 - 1) * 0.035).to(dt)

        def vec(n):
            return (0.7 + 0.6 * torch.rand(n, generator=g, device=dev, dtype=torch.float32)) * STD

        self.embed, self.lm_head = mat(V, H), mat(V, H)
        self.logit_scale = (vec(V) / STD).to(dt)
        QD, KVD = NH * HD, NKV * HD
        self.layers = []
        for ch in self.pattern:
            L = {"kind": ch, "lam": (vec(H) * (ALPHA / STD)).abs().to(dt)}
            if ch == "-":
                L.update(gate=mat(Fd, H), up=mat(Fd, H), down=mat(H, Fd), sg=(vec(Fd) * math.sqrt(H)).to(dt),
                         su=(vec(Fd) * math.sqrt(H)).to(dt))
            else:
                L.update(qkvg=torch.cat([mat(QD, H), mat(KVD, H), mat(KVD, H), mat(QD, H)]), o=mat(H, QD),
                         qs=((vec(QD) * math.sqrt(HD) / STD) ** 2).view(NH, HD).to(dt),
                         gs=((vec(QD) * math.sqrt(math.sqrt(H)) / STD) ** 2).to(dt))
            self.layers.append(L)
        half = HD // 2
        j = torch.arange(half, device=dev, dtype=torch.float64)
        self.inv = {1: 1e7 ** (-2 * j / HD), 2: 1e4 ** (-2 * j / HD)}  # full layers: profile 1, sliding: 2

    def new_cache(self, n_ctx):
        a = self.a
        self.kv = {}
        for i, L in enumerate(self.layers):
            if L["kind"] != "-":  # last_loop: one slot per attention layer, recurrent ones included
                self.kv[i] = (torch.zeros(n_ctx, a.n_kv_heads, a.head_dim, device=self.dev, dtype=torch.bfloat16),
                              torch.zeros(n_ctx, a.n_kv_heads, a.head_dim, device=self.dev, dtype=torch.bfloat16))

    def rope(self, x, pos, kind):
        """NeoX pairs (j, j + hd/2), angles in f64 (§1.5 step 2); x [n, heads, hd]."""
        ang = pos[:, None].double() * self.inv[2 if kind == "S" else 1][None, :]
        c, s = ang.cos().float()[:, None, :], ang.sin().float()[:, None, :]
        xf = x.float()
        half = x.shape[-1] // 2
        a, b = xf[..., :half], xf[..., half:]
        return torch.cat([a * c - b * s, b * c + a * s], -1).to(x.dtype)

    def attention(self, x, i, L, pos0):
        a = self.a
        n, NH, NKV, HD = x.shape[0], a.n_heads, a.n_kv_heads, a.head_dim
        QD, KVD = NH * HD, NKV * HD
        qkvg = x @ L["qkvg"].t()
        q, k, v, g = qkvg.split([QD, KVD, KVD, QD], -1)
        pos = torch.arange(pos0, pos0 + n, device=self.dev)
        q = justnorm(self.rope(q.reshape(n, NH, HD), pos, L["kind"])) * L["qs"]
        k = justnorm(self.rope(k.reshape(n, NKV, HD), pos, L["kind"]))
        kc, vc = self.kv[i]
        kc[pos0:pos0 + n] = k
        vc[pos0:pos0 + n] = v.reshape(n, NKV, HD)
        T = pos0 + n
        keys = torch.arange(T, device=self.dev)
        allow = keys[None, :] <= pos[:, None]
        if L["kind"] == "S":
            allow &= keys[None, :] > pos[:, None] - a.window
        K = kc[:T].repeat_interleave(NH // NKV, 1).transpose(0, 1)[None]
        Vv = vc[:T].repeat_interleave(NH // NKV, 1).transpose(0, 1)[None]
        y = F.scaled_dot_product_attention(q.transpose(0, 1)[None], K, Vv, attn_mask=allow[None, None])
        y = y[0].transpose(0, 1).reshape(n, QD)
        y = justnorm(y * torch.sigmoid(g * L["gs"]))
        return y @ L["o"].t()

    def mlp(self, x, L):
        m = F.silu((x @ L["gate"].t()) * L["sg"]) * ((x @ L["up"].t()) * L["su"])
        return justnorm(m) @ L["down"].t()

    def run(self, h, l0, l1, pos0):
        for i in range(l0, l1):
            L = self.layers[i]
            y = self.mlp(h, L) if L["kind"] == "-" else self.attention(h, i, L, pos0)
            a, b = justnorm(h), justnorm(y)
            h = justnorm(a + L["lam"] * (b - a))  # nGPT residual (§1.4)
        return h

    @torch.inference_mode()
    def forward(self, ids, pos0, loops):
        """Logits of the last position for token ids [n] at positions pos0.. (§1.7)."""
        h = self.run(self.embed[ids], 0, self.n_in, pos0)
        inp = state = h
        for _ in range(loops):
            h = self.run(justnorm(state + inp), self.n_in, self.n_in + self.n_rec, pos0)
            state = justnorm(h)
        h = self.run(state, self.n_in + self.n_rec, len(self.layers), pos0)
        return (h[-1:] @ self.lm_head.t()) * self.logit_scale


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-p", type=int, default=512)
    ap.add_argument("-c", type=int, default=128)
    ap.add_argument("-g", type=int, default=32)
    ap.add_argument("-r", type=int, default=3)
    ap.add_argument("--loops", type=int, default=2)
    ap.add_argument("--hidden", type=int, default=2560)
    ap.add_argument("--cycles", type=int, default=9)
    ap.add_argument("--intermediate", type=int, default=7168)
    ap.add_argument("--vocab", type=int, default=131072)
    ap.add_argument("--n-heads", dest="n_heads", type=int, default=16)
    ap.add_argument("--n-kv-heads", dest="n_kv_heads", type=int, default=4)
    ap.add_argument("--head-dim", dest="head_dim", type=int, default=256)
    ap.add_argument("--window", type=int, default=1024)
    ap.add_argument("--label", default="dory4b-torch-bf16")
    a = ap.parse_args()
    dev = "cuda"
    t0 = time.time()
    m = Dory(a, dev)
    torch.cuda.synchronize()
    print(f"torch {torch.__version__}: random {a.label} on {torch.cuda.get_device_name()} in {time.time() - t0:.1f} s",
          flush=True)
    gen = torch.Generator(device=dev).manual_seed(11)
    ids = torch.randint(0, a.vocab, (max(a.p, a.c) + 1,), generator=gen, device=dev)
    m.new_cache(max(a.p, a.c + a.g + 8) + 8)
    if a.p > 0:
        v = []
        for k in range(a.r + 1):  # k = 0: warm-up
            torch.cuda.synchronize()
            t = time.time()
            m.forward(ids[:a.p], 0, a.loops)
            torch.cuda.synchronize()
            if k:
                v.append(a.p / (time.time() - t))
        sd = statistics.stdev(v) if len(v) > 1 else 0
        print(f"RESULT model={a.label} test=pp{a.p} loops={a.loops} tps={statistics.mean(v):.1f} sd={sd:.1f}",
              flush=True)
    if a.g > 0:
        v = []
        for k in range(a.r + 1):  # k = 0: warm-up
            logits = m.forward(ids[:a.c], 0, a.loops)
            tok = int(logits.argmax(-1).item())
            torch.cuda.synchronize()
            t = time.time()
            for i in range(a.g):
                logits = m.forward(torch.tensor([tok], device=dev), a.c + i, a.loops)
                tok = int(logits.argmax(-1).item())  # the host sync of a greedy generate loop
            if k:
                v.append(a.g / (time.time() - t))
        sd = statistics.stdev(v) if len(v) > 1 else 0
        mean = statistics.mean(v)
        print(f"RESULT model={a.label} test=tg@{a.c}-torch loops={a.loops} tps={mean:.1f} sd={sd:.1f} "
              f"ms_per_token={1e3 / mean:.3f}", flush=True)


if __name__ == "__main__":
    main()
