#!/usr/bin/env python3
"""make_random_gguf.py — writes a random-weight llama or qwen2 GGUF v3 (python stdlib only) for speed comparisons.

usage: make_random_gguf.py OUT.gguf --type f16|q8_0|q4_0 [--arch llama|qwen2] [--hidden 1024] [--ffn 2816]
                           [--layers 8] [--heads 16] [--kv-heads 8] [--ctx 2048] [--vocab 32000]
                           [--tokenizer llama2c-tokenizer.bin] [--seed 1]
  Qwen2.5-0.5B's shape: --arch qwen2 --hidden 896 --ffn 4864 --layers 24 --heads 14 --kv-heads 2 --vocab 151936
  (qwen2: F32 q/k/v biases, tied embeddings (no output.weight), rope base 1e6, RMSNorm eps 1e-6).

Layout (ggml/docs/gguf.md): "GGUF", u32 3, u64 n_tensors, u64 n_kv, the metadata, the tensor infos, padding to
32, the data (each tensor at a 32-aligned offset). Every 2-D matrix (token_embd, attn_q/k/v/output, ffn_gate/up/
down, output) is F16 or Q4_0 (block of 32: f16 d + 16 bytes; element j < 16 in the low nibble of qs[j], j >= 16 in
the high nibble of qs[j-16]; value (q - 8)·d); the RMSNorm weights are F32 ones. Values are N(0, 0.02)-like
(f16) or random nibbles with d ~ 0.005 (Q4_0), drawn from a pool of random blocks tiled at random offsets so that
a few hundred MB are written in seconds: the content only has to be finite and non-trivial for speed tests.
Q8_0 (block of 32: f16 d + 32 int8, value q·d) is random bytes with d ~ 0.0003.

With --tokenizer, the vocabulary is llama2.c's tokenizer.bin (Llama 2's 32000-token SentencePiece model: scores
and pieces, '▁' written as ' '), stored as tokenizer.ggml.model "llama" with token types (unknown, control for
<s>/</s>, byte for <0xXX>, normal), BOS 1, EOS 2, so both llama.cpp and cmf can tokenize text for perplexity.
When --vocab is larger than the tokenizer, the vocabulary is padded with unused tokens "<pad_N>" (score -1e9) so
the matrices keep the requested shape.
"""
import argparse
import random
import struct
import sys

GGML_F32, GGML_F16, GGML_Q4_0, GGML_Q8_0 = 0, 1, 2, 8


def s_str(s):
    b = s.encode("utf-8") if isinstance(s, str) else s
    return struct.pack("<Q", len(b)) + b


def kv_u32(k, v):
    return s_str(k) + struct.pack("<II", 4, v)


def kv_f32(k, v):
    return s_str(k) + struct.pack("<If", 6, v)


def kv_bool(k, v):
    return s_str(k) + struct.pack("<IB", 7, 1 if v else 0)


def kv_str(k, v):
    return s_str(k) + struct.pack("<I", 8) + s_str(v)


def kv_arr(k, elem_type, items, fmt=None):
    out = [s_str(k), struct.pack("<IIQ", 9, elem_type, len(items))]
    if elem_type == 8:
        out += [s_str(x) for x in items]
    else:
        out.append(struct.pack("<%d%s" % (len(items), fmt), *items))
    return b"".join(out)


def read_llama2c_tokenizer(path):
    """llama2.c tokenizer.bin: i32 max_len, then per token f32 score, i32 len, bytes."""
    data = open(path, "rb").read()
    pos = 4
    toks, scores = [], []
    while pos < len(data):
        score, n = struct.unpack_from("<fi", data, pos)
        pos += 8
        piece = data[pos:pos + n]
        pos += n
        toks.append(piece)
        scores.append(score)
    out, types = [], []
    for i, p in enumerate(toks):
        if i == 0:
            out.append(b"<unk>"); types.append(2)
        elif i in (1, 2):
            out.append(b"<s>" if i == 1 else b"</s>"); types.append(3)
        elif p.startswith(b"<0x") and p.endswith(b">") and len(p) == 6:
            out.append(p); types.append(6)
        else:
            out.append(p.replace(b" ", "\u2581".encode())); types.append(1)
    return out, scores, types


class Pool:
    """Random payload bytes: a pool of random blocks, tiled from random offsets."""

    def __init__(self, rng, kind):
        self.rng = rng
        if kind == "f16":
            vals = [rng.gauss(0.0, 0.02) for _ in range(1 << 18)]
            self.data = struct.pack("<%de" % len(vals), *vals)
            self.unit = 2
        elif kind == "q8_0":
            blocks = []
            for _ in range(1 << 14):
                d = struct.pack("<e", 0.0002 + 0.0002 * rng.random())
                blocks.append(d + rng.randbytes(32))
            self.data = b"".join(blocks)
            self.unit = 34
        else:
            blocks = []
            for _ in range(1 << 14):
                d = struct.pack("<e", 0.003 + 0.004 * rng.random())
                blocks.append(d + rng.randbytes(16))
            self.data = b"".join(blocks)
            self.unit = 18
        self.data = self.data + self.data  # so any offset has a full pool after it

    def take(self, nbytes):
        out = []
        half = len(self.data) // 2
        while nbytes > 0:
            off = self.rng.randrange(half // self.unit) * self.unit
            n = min(nbytes, half)
            out.append(self.data[off:off + n])
            nbytes -= n
        return b"".join(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out")
    ap.add_argument("--type", choices=["f16", "q8_0", "q4_0"], required=True)
    ap.add_argument("--arch", choices=["llama", "qwen2"], default="llama")
    ap.add_argument("--hidden", type=int, default=1024)
    ap.add_argument("--ffn", type=int, default=2816)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--kv-heads", type=int, default=8)
    ap.add_argument("--ctx", type=int, default=2048)
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument("--tokenizer", help="llama2.c tokenizer.bin (sets the vocabulary size)")
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    rng = random.Random(a.seed)
    hd = a.hidden // a.heads
    kv = []
    vocab = a.vocab
    if a.tokenizer:
        toks, scores, types = read_llama2c_tokenizer(a.tokenizer)
        if "--vocab" in sys.argv and a.vocab > len(toks):
            n0 = len(toks)
            toks += [("<pad_%d>" % i).encode() for i in range(n0, a.vocab)]
            scores += [-1e9] * (a.vocab - n0)
            types += [1] * (a.vocab - n0)
        vocab = len(toks)
    A = a.arch
    qwen = A == "qwen2"
    kv += [kv_str("general.architecture", A), kv_str("general.name", "random-%s-%s" % (A, a.type)),
           kv_u32("general.file_type", {"f16": 1, "q4_0": 2, "q8_0": 7}[a.type]),
           kv_u32(A + ".embedding_length", a.hidden), kv_u32(A + ".feed_forward_length", a.ffn),
           kv_u32(A + ".block_count", a.layers), kv_u32(A + ".attention.head_count", a.heads),
           kv_u32(A + ".attention.head_count_kv", a.kv_heads), kv_u32(A + ".context_length", a.ctx),
           kv_u32(A + ".rope.dimension_count", hd), kv_u32(A + ".vocab_size", vocab),
           kv_f32(A + ".attention.layer_norm_rms_epsilon", 1e-6 if qwen else 1e-5),
           kv_f32(A + ".rope.freq_base", 1e6 if qwen else 10000.0)]
    if a.tokenizer:
        kv += [kv_str("tokenizer.ggml.model", "llama"), kv_arr("tokenizer.ggml.tokens", 8, toks),
               kv_arr("tokenizer.ggml.scores", 6, scores, "f"), kv_arr("tokenizer.ggml.token_type", 5, types, "i"),
               kv_u32("tokenizer.ggml.bos_token_id", 1), kv_u32("tokenizer.ggml.eos_token_id", 2),
               kv_u32("tokenizer.ggml.unknown_token_id", 0), kv_bool("tokenizer.ggml.add_bos_token", True),
               kv_bool("tokenizer.ggml.add_eos_token", False)]

    mtype = {"f16": GGML_F16, "q4_0": GGML_Q4_0, "q8_0": GGML_Q8_0}[a.type]
    tensors = [("token_embd.weight", [a.hidden, vocab], mtype)]
    for l in range(a.layers):
        p = "blk.%d." % l
        tensors += [(p + "attn_norm.weight", [a.hidden], GGML_F32),
                    (p + "attn_q.weight", [a.hidden, a.heads * hd], mtype),
                    (p + "attn_k.weight", [a.hidden, a.kv_heads * hd], mtype),
                    (p + "attn_v.weight", [a.hidden, a.kv_heads * hd], mtype)]
        if qwen:
            tensors += [(p + "attn_q.bias", [a.heads * hd], GGML_F32), (p + "attn_k.bias", [a.kv_heads * hd], GGML_F32),
                        (p + "attn_v.bias", [a.kv_heads * hd], GGML_F32)]
        tensors += [(p + "attn_output.weight", [a.heads * hd, a.hidden], mtype),
                    (p + "ffn_norm.weight", [a.hidden], GGML_F32),
                    (p + "ffn_gate.weight", [a.hidden, a.ffn], mtype),
                    (p + "ffn_up.weight", [a.hidden, a.ffn], mtype),
                    (p + "ffn_down.weight", [a.ffn, a.hidden], mtype)]
    tensors += [("output_norm.weight", [a.hidden], GGML_F32)]
    if not qwen:
        tensors += [("output.weight", [a.hidden, vocab], mtype)]

    def nbytes(ne, t):
        n = 1
        for x in ne:
            n *= x
        return {GGML_F32: 4 * n, GGML_F16: 2 * n, GGML_Q4_0: n // 32 * 18, GGML_Q8_0: n // 32 * 34}[t]

    infos, off = [], 0
    for name, ne, t in tensors:
        infos.append(s_str(name) + struct.pack("<I", len(ne)) + struct.pack("<%dQ" % len(ne), *ne) +
                     struct.pack("<IQ", t, off))
        off = (off + nbytes(ne, t) + 31) // 32 * 32
    pool = Pool(rng, a.type)
    with open(a.out, "wb") as f:
        f.write(b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(kv)))
        f.write(b"".join(kv))
        f.write(b"".join(infos))
        f.write(b"\0" * ((-f.tell()) % 32))
        for name, ne, t in tensors:
            n = nbytes(ne, t)
            if t == GGML_F32 and name.endswith(".bias"):
                f.write(struct.pack("<%df" % (n // 4), *[rng.gauss(0.0, 0.1) for _ in range(n // 4)]))
            elif t == GGML_F32:
                f.write(struct.pack("<f", 1.0) * (n // 4))
            else:
                f.write(pool.take(n))
            f.write(b"\0" * ((-n) % 32))
    params = sum(nbytes(ne, GGML_F32) // 4 for _, ne, _ in tensors)
    print("wrote %s: %d tensors, %.1f M params, %s, vocab %d" % (a.out, len(tensors), params / 1e6, a.type, vocab),
          file=sys.stderr)


if __name__ == "__main__":
    main()
