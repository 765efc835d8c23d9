#!/usr/bin/env python3
"""ref64.py — this project's own float64 reference forward for Dory, written from shared/spec/DORY.md §1 (not from
the C code, and not from llama.cpp's test), plus the generator of the fixtures tests/data/dory/r64_*.

The model (class Dory / Session below) follows the spec step by step:
  §1.4 justnorm(x) = x / sqrt(sum x^2 + 1e-6); residual h = justnorm(a + lam*(b - a)), a = jn(r), b = jn(y),
       lam = |alpha * ngpt_alpha_init / init_method_std|;
  §1.5 attention on the raw hidden x: q,k,v,g projections; NeoX RoPE (dims j, j+hd/2; theta^(-2j/hd); theta from the
       layer's rope profile: 1 -> rope_theta, 2 -> rope_theta_2; absolute positions); then per head
       q <- (sqk*sqrt(hd)/std)^2 * jn(q_head), k <- jn(k_head); scores q.k/sqrt(hd); causal softmax; sliding layers
       see t-W < j <= t; GQA head h reads KV head h // (n_heads/n_kv_heads); y <- y * sigmoid(g * (s_gate*sqrt(g0)/std)^2)
       with g0 = attention_output_gate_logit_scale_init or sqrt(H) when null; y <- jn(y over all heads); out = Wo y;
  §1.6 MLP: g = (Wg x)*(suv_gate*sqrt(H)), u = (Wu x)*(suv_up*sqrt(H)), out = Wd jn(silu(g)*u);
  §1.7 input block; inp = state = h; per loop h = jn(state + inp), recurrent block, state = jn(h); h = state; output
       block; logits = (lm_head h) * logit_scale / std;
  §1.8 KV: input/output attention layers one cache; recurrent attention layers one cache per loop index (per_loop) or
       one cache that each loop overwrites for the current chunk's rows (last_loop: a chunk's loop i sees its own
       loop-i K/V for the chunk and the final-loop K/V that earlier chunks left).
Every value is float64 (weights are the checkpoint's F32/BF16 values widened). The cache keeps every row of the
history; the sliding window is a mask (no ring), so it is independent of the runtime's ring.

Fixtures (tests/data/dory/r64_<case>/): config.json + model.safetensors (HF schema, DORY.md §1.2/§1.3) and
ref.safetensors with, per sequence s (int32 tokens_<s>, 12 tokens):
  oneshot_<s>_k<L>        [12, V]  one call, loops L = 1..4 (per_loop and last_loop agree here: asserted);
  lastloop_<s>_k<L>_c<C>  [12, V]  last_loop, calls of C = 8, 3, 1 tokens, L = 2..4 (L = 1 equals oneshot: asserted);
  sched_<s>               [12, V]  last_loop, one token per call, loops from int32 sched_loops_<s> [12];
  csched_<s>              [12, V]  last_loop, calls of int32 csched_len_<s> tokens with loops csched_loops_<s>.
Before writing, the script asserts (in float64) that per_loop in calls of 8, 3 and 1 tokens, and per_loop chunked
prefill followed by one-token decode, equal the one-shot run (|diff| < 1e-12): so per_loop tests compare with oneshot.
ref.json records the sizes, the seeds and how far apart the stored runs are (the margin a wrong KV mode would show).

--check-llamacpp DIR: additionally runs this model on tests/data/dory/tiny (whose logits_* came from llama.cpp's
independent F32 numpy reference, see make_refs.py) and prints the largest difference: a cross-check of two
independent readings of the spec.

Usage: ref64.py [out_dir] [--check-llamacpp tests/data/dory/tiny]   (out_dir default: tests/data/dory)
"""
import json
import struct
import sys
from pathlib import Path

import numpy as np

EPS = 1e-6
SEQ_LEN = 12


# ---------------------------------------------------------------------------------------------------------------- I/O
def st_write(path, tensors):
    """tensors: list of (name, array, dtype) with dtype one of F32, BF16, I32 (safetensors layout: u64 header size,
    JSON header, raw little-endian data)."""
    header, blobs, off = {}, [], 0
    for name, a, dt in tensors:
        if dt == "I32":
            raw = np.ascontiguousarray(a, dtype="<i4").tobytes()
        elif dt == "BF16":
            bits = np.ascontiguousarray(a, dtype="<f4").view("<u4")
            assert np.all((bits & 0xFFFF) == 0), name  # values were rounded to bf16 when drawn
            raw = (bits >> 16).astype("<u2").tobytes()
        else:
            raw = np.ascontiguousarray(a, dtype="<f4").tobytes()
        header[name] = {"dtype": dt, "shape": list(np.shape(a)), "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def st_read(path):
    data = Path(path).read_bytes()
    n = struct.unpack("<Q", data[:8])[0]
    hdr = json.loads(data[8:8 + n])
    base, out = 8 + n, {}
    for name, e in hdr.items():
        if name == "__metadata__":
            continue
        a, b = e["data_offsets"]
        raw = data[base + a:base + b]
        if e["dtype"] == "F32":
            x = np.frombuffer(raw, "<f4")
        elif e["dtype"] == "BF16":
            x = (np.frombuffer(raw, "<u2").astype(np.uint32) << 16).view(np.float32)
        elif e["dtype"] == "I32":
            x = np.frombuffer(raw, "<i4")
        else:
            raise ValueError(f"{path}: {name}: dtype {e['dtype']} not handled")
        out[name] = x.reshape(e["shape"])
    return out


def to_bf16(x):
    """Round float32 values to the nearest bfloat16 (ties to even), returned as float32."""
    b = np.asarray(x, np.float32).view(np.uint32).astype(np.uint64)
    b = ((b + 0x7FFF + ((b >> 16) & 1)) >> 16) << 16
    return b.astype(np.uint32).view(np.float32)


# -------------------------------------------------------------------------------------------------------------- model
def jn(x):
    """§1.4 justnorm over the last axis, eps inside the sum."""
    return x / np.sqrt(np.sum(x * x, axis=-1, keepdims=True) + EPS)


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


class Dory:
    """Weights and hyperparameters from an HF-schema checkpoint (config dict + name -> array), all float64."""

    def __init__(self, cfg, t):
        self.V, self.H, self.F = cfg["vocab_size"], cfg["hidden_size"], cfg["intermediate_size"]
        self.nh, self.nkv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
        self.hd = cfg.get("attention_head_dim") or cfg["head_dim"]
        self.pattern = cfg["hybrid_layer_pattern"]
        assert len(self.pattern) == cfg["num_hidden_layers"]
        self.n_in, self.n_rec, self.n_out = cfg["n_input_layers"], cfg["n_recurrent_layers"], cfg["n_output_layers"]
        assert self.n_in + self.n_rec + self.n_out == len(self.pattern)
        self.W = cfg["swa_window_size"]
        self.std = cfg["init_method_std"]
        self.alpha_init = cfg["ngpt_alpha_init"]
        g0 = cfg.get("attention_output_gate_logit_scale_init")
        self.g0 = np.sqrt(self.H) if g0 is None else g0
        thetas = {1: cfg["rope_theta"], 2: cfg["rope_theta_2"]}
        self.theta = [thetas[p] for p in cfg["rope_profile_layers"]]
        f = lambda n: np.asarray(t[n], np.float64)  # noqa: E731
        self.embed, self.head = f("backbone.embeddings.weight"), f("lm_head.weight")
        self.logit_scale = f("lm_head.logit_scale")
        self.layers = []
        for i, c in enumerate(self.pattern):
            p = f"backbone.layers.{i}."
            if c == "-":
                L = dict(alpha=f(p + "mlp_alpha"), wg=f(p + "mixer.gate_proj.weight"), wu=f(p + "mixer.up_proj.weight"),
                         wd=f(p + "mixer.down_proj.weight"), sg=f(p + "mixer.suv_gate"), su=f(p + "mixer.suv_up"))
            else:
                L = dict(alpha=f(p + "attn_alpha"), wq=f(p + "mixer.q_proj.weight"), wk=f(p + "mixer.k_proj.weight"),
                         wv=f(p + "mixer.v_proj.weight"), wgate=f(p + "mixer.g_proj.weight"),
                         wo=f(p + "mixer.o_proj.weight"), sqk=f(p + "mixer.sqk"), sgate=f(p + "mixer.s_gate"))
            self.layers.append(L)

    def rope(self, x, pos, theta):
        """§1.5.2 NeoX rotation of x [n, heads, hd] at absolute positions pos [n]."""
        half = self.hd // 2
        inv = theta ** (-2.0 * np.arange(half) / self.hd)
        ang = pos[:, None].astype(np.float64) * inv[None, :]
        c, s = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
        x1, x2 = x[..., :half], x[..., half:]
        return np.concatenate([x1 * c - x2 * s, x2 * c + x1 * s], axis=-1)

    def residual(self, r, y, alpha):
        lam = np.abs(alpha * (self.alpha_init / self.std))
        a, b = jn(r), jn(y)
        return jn(a + lam * (b - a))

    def mlp(self, x, L):
        s = np.sqrt(self.H)
        g = (x @ L["wg"].T) * (L["sg"] * s)
        u = (x @ L["wu"].T) * (L["su"] * s)
        m = jn(g * sigmoid(g) * u)
        return self.residual(x, m @ L["wd"].T, L["alpha"])

    def attention(self, x, i, L, cache, pos0):
        """x [n, H] at positions pos0..pos0+n-1; cache = (K, V) lists of rows for this layer's KV slot, indexed by
        position; this chunk's rows are (over)written before attending."""
        n, nh, nkv, hd = x.shape[0], self.nh, self.nkv, self.hd
        pos = np.arange(pos0, pos0 + n)
        q = self.rope((x @ L["wq"].T).reshape(n, nh, hd), pos, self.theta[i])
        k = self.rope((x @ L["wk"].T).reshape(n, nkv, hd), pos, self.theta[i])
        v = (x @ L["wv"].T).reshape(n, nkv, hd)
        q = jn(q) * ((L["sqk"] * np.sqrt(hd) / self.std) ** 2).reshape(nh, hd)
        k = jn(k)
        K, Vc = cache
        for t in range(n):
            p = pos0 + t
            while len(K) <= p:
                K.append(None)
                Vc.append(None)
            K[p], Vc[p] = k[t], v[t]
        y = np.zeros((n, nh, hd))
        grp = nh // nkv
        for t in range(n):
            p = pos0 + t
            lo = max(0, p - self.W + 1) if self.pattern[i] == "S" else 0
            Kt = np.stack(K[lo:p + 1])  # [m, nkv, hd]
            Vt = np.stack(Vc[lo:p + 1])
            for h in range(nh):
                s = Kt[:, h // grp, :] @ q[t, h] / np.sqrt(hd)
                w = np.exp(s - s.max())
                y[t, h] = (w / w.sum()) @ Vt[:, h // grp, :]
        y = y.reshape(n, nh * hd)
        g = x @ L["wgate"].T
        y = y * sigmoid(g * (L["sgate"] * np.sqrt(self.g0) / self.std) ** 2)
        y = jn(y)
        return self.residual(x, y @ L["wo"].T, L["alpha"])


class Session:
    """A KV-cached run of one sequence: call(ids, loops) processes one chunk and returns its logits [n, V]."""

    def __init__(self, m, mode):
        assert mode in ("per_loop", "last_loop")
        self.m, self.mode, self.pos, self.caches = m, mode, 0, {}

    def cache(self, i, loop):
        m = self.m
        rec = m.n_in <= i < m.n_in + m.n_rec
        key = (i, loop if (rec and self.mode == "per_loop") else 0)
        return self.caches.setdefault(key, ([], []))

    def layer(self, h, i, loop):
        L = self.m.layers[i]
        if self.m.pattern[i] == "-":
            return self.m.mlp(h, L)
        return self.m.attention(h, i, L, self.cache(i, loop), self.pos)

    def call(self, ids, loops):
        m = self.m
        h = m.embed[np.asarray(ids)]
        for i in range(m.n_in):
            h = self.layer(h, i, 0)
        inp = h
        state = inp
        for lp in range(loops):
            h = jn(state + inp)
            for i in range(m.n_in, m.n_in + m.n_rec):
                h = self.layer(h, i, lp)
            state = jn(h)
        h = state
        for i in range(m.n_in + m.n_rec, len(m.pattern)):
            h = self.layer(h, i, 0)
        self.pos += len(ids)
        return (h @ m.head.T) * (m.logit_scale / m.std)


def run(m, ids, mode, calls):
    """calls: list of (n_tokens, loops); returns the concatenated logits."""
    s, out, k = Session(m, mode), [], 0
    for n, loops in calls:
        out.append(s.call(ids[k:k + n], loops))
        k += n
    assert k == len(ids)
    return np.concatenate(out)


def chunks(n, c, loops):
    return [(min(c, n - i), loops) for i in range(0, n, c)]


# ----------------------------------------------------------------------------------------------------------- fixtures
def make_checkpoint(seed, V, H, F, nh, nkv, hd, pattern, counts, window, std, alpha_init, gate_init, thetas, profiles,
                    dtype, neg_alpha):
    rng = np.random.default_rng(seed)
    t = {}

    def mat(name, shape):
        x = rng.normal(0.0, 0.06, shape).astype(np.float32)
        t[name] = to_bf16(x) if dtype == "BF16" else x

    def vec(name, n, signed=False):
        x = rng.uniform(0.7, 1.3, n) * std
        if signed:
            x *= rng.choice([-1.0, 1.0], n)
        x = x.astype(np.float32)
        t[name] = to_bf16(x) if dtype == "BF16" else x

    mat("backbone.embeddings.weight", (V, H))
    mat("lm_head.weight", (V, H))
    vec("lm_head.logit_scale", V)
    for i, c in enumerate(pattern):
        p = f"backbone.layers.{i}."
        if c == "-":
            vec(p + "mlp_alpha", H, neg_alpha)
            mat(p + "mixer.gate_proj.weight", (F, H))
            mat(p + "mixer.up_proj.weight", (F, H))
            mat(p + "mixer.down_proj.weight", (H, F))
            vec(p + "mixer.suv_gate", F)
            vec(p + "mixer.suv_up", F)
        else:
            vec(p + "attn_alpha", H, neg_alpha)
            mat(p + "mixer.q_proj.weight", (nh * hd, H))
            mat(p + "mixer.k_proj.weight", (nkv * hd, H))
            mat(p + "mixer.v_proj.weight", (nkv * hd, H))
            mat(p + "mixer.g_proj.weight", (nh * hd, H))
            mat(p + "mixer.o_proj.weight", (H, nh * hd))
            vec(p + "mixer.sqk", nh * hd)
            vec(p + "mixer.s_gate", nh * hd)
    cfg = {
        "model_type": "dory", "architectures": ["DoryForCausalLM"], "dory_format_version": 1,
        "vocab_size": V, "hidden_size": H, "num_hidden_layers": len(pattern), "intermediate_size": F,
        "num_attention_heads": nh, "num_key_value_heads": nkv, "attention_head_dim": hd, "head_dim": hd,
        "max_position_embeddings": 64, "tie_word_embeddings": False, "hybrid_layer_pattern": pattern,
        "swa_window_size": window, "swa_num_attention_heads": None, "swa_num_key_value_heads": None,
        "swa_head_dim": None, "rope_theta": thetas[0], "partial_rotary_factor": 1.0, "rope_theta_2": thetas[1],
        "partial_rotary_factor_2": 1.0, "rope_profile_layers": profiles, "no_rope_layers": [0] * len(pattern),
        "ngpt": True, "fngpt": True, "init_method_std": std, "ngpt_alpha_init": alpha_init,
        "ngpt_enable_final_norm": False, "attention_output_gate": True,
        "attention_output_gate_logit_scale_init": gate_init, "mlp_hidden_act": "silu", "mlp_bias": False,
        "attention_bias": False, "n_input_layers": counts[0], "n_recurrent_layers": counts[1],
        "n_output_layers": counts[2], "n_recurrent_loops": 2, "recurrent_kv_cache_mode": "per_loop",
        "initial_state": "input_copy", "input_transform": "residual", "output_transform": "replace",
        "mixer_type": None, "torch_dtype": "bfloat16" if dtype == "BF16" else "float32",
    }
    return cfg, t


SCHED = [2, 1, 2, 2, 1, 3, 4, 1, 2, 4, 3, 1]  # starts with the (2,1,2,2,1); covers loops 1..4
CSCHED = [(3, 2), (4, 1), (2, 4), (3, 3)]   # (tokens, loops) per call


def make_case(out, name, seed, n_seqs, **kw):
    cfg, t = make_checkpoint(seed, **kw)
    m = Dory(cfg, t)
    rng = np.random.default_rng(seed + 1)
    refs, margins = [], {}

    def put(nm, a, dt="F32"):
        refs.append((nm, a, dt))

    def close(a, b, what):
        d = np.abs(a - b).max()
        assert d < 1e-12, (name, what, d)

    def margin(key, a, b):
        margins[key] = max(margins.get(key, 0.0), float(np.abs(a - b).max()))

    for s in range(n_seqs):
        ids = rng.integers(0, kw["V"], SEQ_LEN).astype(np.int32)
        put(f"tokens_{s}", ids, "I32")
        one = {}
        for L in (1, 2, 3, 4):
            a = run(m, ids, "per_loop", [(SEQ_LEN, L)])
            close(a, run(m, ids, "last_loop", [(SEQ_LEN, L)]), f"oneshot modes k{L}")
            for c in (8, 3, 1):
                close(a, run(m, ids, "per_loop", chunks(SEQ_LEN, c, L)), f"per_loop chunk {c} k{L}")
            close(a, run(m, ids, "per_loop", [(5, L), (2, L)] + [(1, L)] * (SEQ_LEN - 7)), f"prefill+decode k{L}")
            put(f"oneshot_{s}_k{L}", a)
            one[L] = a
            if L > 1:
                margin("oneshot_k%d_vs_k%d" % (L, L - 1), a, one[L - 1])
            for c in (8, 3, 1):
                b = run(m, ids, "last_loop", chunks(SEQ_LEN, c, L))
                if L == 1:
                    close(a, b, f"last_loop k1 chunk {c}")
                    continue
                put(f"lastloop_{s}_k{L}_c{c}", b)
                margin(f"lastloop_c{c}_vs_oneshot", b, a)
        sched = np.array(SCHED, np.int32)
        put(f"sched_loops_{s}", sched, "I32")
        sb = run(m, ids, "last_loop", [(1, int(L)) for L in sched])
        put(f"sched_{s}", sb)
        margin("sched_vs_oneshot_k2", sb, one[2])
        put(f"csched_len_{s}", np.array([c[0] for c in CSCHED], np.int32), "I32")
        put(f"csched_loops_{s}", np.array([c[1] for c in CSCHED], np.int32), "I32")
        b = run(m, ids, "last_loop", CSCHED)
        put(f"csched_{s}", b)
        margin("csched_vs_sched", b, sb)
        margins["max_abs_logit"] = max(margins.get("max_abs_logit", 0.0), float(np.abs(one[2]).max()))

    d = out / name
    d.mkdir(parents=True, exist_ok=True)
    (d / "config.json").write_text(json.dumps(cfg, indent=1) + "\n")
    st_write(d / "model.safetensors", [(k, v, kw["dtype"]) for k, v in t.items()])
    st_write(d / "ref.safetensors", refs)
    desc = {k: v for k, v in kw.items()}
    (d / "ref.json").write_text(json.dumps({
        "generator": "scripts/dory/ref64.py (float64 reference written from shared/spec/DORY.md §1)",
        "seed": seed, "n_seqs": n_seqs, "seq_len": SEQ_LEN, "case": desc, "sched": SCHED, "csched": CSCHED,
        "max_abs_difference_between_stored_runs": margins,
        "note": "per_loop in calls of 8/3/1 tokens and per_loop prefill+decode equal oneshot_* (asserted < 1e-12 in "
                "float64), as does last_loop with loops 1 or in one call; the other runs differ by the margins above"},
        indent=1) + "\n")
    print(f"{name}: {len(refs)} tensors; margins " + ", ".join(f"{k} {v:.3g}" for k, v in margins.items()))


def check_llamacpp(tiny):
    """Runs this model on a fixture of make_refs.py and compares with llama.cpp's logits stored there."""
    tiny = Path(tiny)
    cfg = json.loads((tiny / "config.json").read_text())
    m = Dory(cfg, st_read(tiny / "model.safetensors"))
    ref = st_read(tiny / "ref.safetensors")
    worst = 0.0
    for name, lg in ref.items():
        if not name.startswith("logits_"):
            continue
        _, s, k = name.split("_")
        ids = ref[f"tokens_{s}"]
        ours = run(m, ids, "per_loop", [(len(ids), int(k[1:]))])
        d = np.abs(ours - lg).max()
        worst = max(worst, d)
        print(f"  {tiny.name} {name}: max |ref64 - llama.cpp F32| = {d:.3g} (max |logit| {np.abs(lg).max():.3g})")
    return worst


def main():
    args = sys.argv[1:]
    chk = None
    if "--check-llamacpp" in args:
        i = args.index("--check-llamacpp")
        chk = args[i + 1]
        del args[i:i + 2]
    out = Path(args[0]) if args else Path(__file__).resolve().parents[2] / "tests/data/dory"
    if chk:
        print(f"ref64 vs llama.cpp's reference: worst {check_llamacpp(chk):.3g}")
    # layout A: "*-S-*-" with blocks 2/2/2, GQA 4:1 (8 q / 2 kv heads), window 3, F32 checkpoint
    make_case(out, "r64_a", 4201, 2, V=40, H=32, F=48, nh=8, nkv=2, hd=8, pattern="*-S-*-", counts=(2, 2, 2),
              window=3, std=0.02, alpha_init=0.05, gate_init=None, thetas=(1e6, 1e4), profiles=[1, 1, 2, 1, 1, 1],
              dtype="F32", neg_alpha=False)
    # layout B: "S-S-S-*-" x3 with blocks 8/8/8, GQA 2:1 (4 q / 2 kv heads), window 4, BF16 checkpoint; a
    # non-null gate init, signed alphas (the abs of §1.4), larger alpha_init, and rope profiles that do not follow
    # the layer kind (profile 1 on two S layers, profile 2 on one full layer)
    pat = "S-S-S-*-" * 3
    prof = [2 if c == "S" else 1 for c in pat]
    prof[4], prof[18], prof[11] = 1, 1, 2
    make_case(out, "r64_b", 4202, 2, V=40, H=16, F=24, nh=4, nkv=2, hd=8, pattern=pat, counts=(8, 8, 8), window=4,
              std=0.0177, alpha_init=0.25, gate_init=4.5, thetas=(1e4, 100.0), profiles=prof, dtype="BF16",
              neg_alpha=True)


if __name__ == "__main__":
    main()
