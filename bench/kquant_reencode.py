#!/usr/bin/env python3
"""kquant_reencode.py — what re-encoding a K-quant GGUF into a cmf dtype costs: file size and logit error against
the exact f32 decoding (cmf convert --quant f32), per source type and target dtype. The measurement behind the
default of `cmf convert x.gguf` without --quant (src/convert/gguf_convert.c auto_target; README's convert row).

usage: [LLAMA_BIN=dir TEXT=file] /usr/bin/python3 bench/kquant_reencode.py LIBGGML_BASE_SO CMF_BIN [WORK [TOK]]
  LIBGGML_BASE_SO: a prebuilt llama.cpp's libggml-base.so (its ggml_quantize_chunk writes the K-quant blocks, as
  llama-quantize does without an importance matrix). Needs numpy. WORK: scratch folder (default /tmp/cmf-kquant).
  TOK: a llama2.c tokenizer.bin of 512 tokens (../shared/data/models/stories260K/tok512.bin) embedded in the GGUFs;
  with it and LLAMA_BIN (llama.cpp's bin folder) and TEXT, a second table compares llama-perplexity on the Q4_K_M-like,
  Q4_K and Q6_K GGUFs with cmf ppl on their --quant f32 and default conversions (-c 128, 2 threads): the same model
  run by both implementations.

The model: a random llama (hidden 512, FFN 1536, 4 layers, 8 heads of 64, 4 KV heads, vocab 512, untied output),
weights N(0, 0.02) times a per-row factor drawn log-uniformly in [0.5, 2] with 1 in 1000 values times 8 (outliers,
as trained weights have). For each ggml type T in Q2_K..Q6_K every matrix is quantized to T (a "pure" file); a
Q4_K_M-like mix (Q6_K for attn_v, ffn_down and output, Q4_K elsewhere) is converted without --quant. Each file is
converted with --quant f32 (exact; the reference) and each candidate target; `cmf eval` runs 64 random tokens and
the table gives the RMS and max of the logit difference relative to the reference's RMS / max |logit|, and the
greedy agreement. The "GGUF" rows compare the exact decoding with the unquantized f32 model instead: the error
llama.cpp's quantization itself made, for scale.
"""
import ctypes
import os
import subprocess
import sys

import numpy as np

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data", "gguf_kquant"))
from make import kv, write_gguf  # noqa: E402  (the test data's stdlib GGUF writer)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_random_gguf import kv_arr, kv_bool, kv_str, kv_u32, read_llama2c_tokenizer  # noqa: E402

TYPES = {"Q2_K": (10, 84), "Q3_K": (11, 110), "Q4_K": (12, 144), "Q5_K": (13, 176), "Q6_K": (14, 210)}
TARGETS = ["q4", "q4t", "q4tp", "q8", "q8_2f", "f16"]
H, FFN, L, HEADS, KVH, VOCAB = 512, 1536, 4, 8, 4, 512


def weights(rng):
    hd = H // HEADS
    shapes = {"token_embd.weight": (VOCAB, H), "output.weight": (VOCAB, H)}
    for i in range(L):
        shapes.update({f"blk.{i}.attn_q.weight": (H, H), f"blk.{i}.attn_k.weight": (KVH * hd, H),
                       f"blk.{i}.attn_v.weight": (KVH * hd, H), f"blk.{i}.attn_output.weight": (H, H),
                       f"blk.{i}.ffn_gate.weight": (FFN, H), f"blk.{i}.ffn_up.weight": (FFN, H),
                       f"blk.{i}.ffn_down.weight": (H, FFN)})
    out = {}
    for name, (r, c) in shapes.items():
        w = rng.normal(0, 0.02, (r, c)) * np.exp(rng.uniform(np.log(0.5), np.log(2), (r, 1)))
        w = np.where(rng.random((r, c)) < 1e-3, w * 8, w)
        out[name] = w.astype(np.float32)
    return out


def quantize(lib, ty, w):
    tid, bsize = TYPES[ty]
    r, c = w.shape
    dst = np.zeros(r * c // 256 * bsize, dtype=np.uint8)
    src = np.ascontiguousarray(w, dtype=np.float32)
    n = lib.ggml_quantize_chunk(tid, src.ctypes.data, dst.ctypes.data, 0, r, c, None)
    assert n == dst.size
    return dst.tobytes()


def tokenizer_kvs(path):
    """llama2.c tokenizer.bin -> tokenizer.ggml.* (as bench/make_random_gguf.py --tokenizer); [] without one."""
    if not path:
        return []
    toks, scores, types = read_llama2c_tokenizer(path)
    assert len(toks) == VOCAB, "the tokenizer must have %d tokens (stories260K's tok512.bin)" % VOCAB
    return [kv_str("tokenizer.ggml.model", "llama"), kv_arr("tokenizer.ggml.tokens", 8, toks),
            kv_arr("tokenizer.ggml.scores", 6, scores, "f"), kv_arr("tokenizer.ggml.token_type", 5, types, "i"),
            kv_u32("tokenizer.ggml.bos_token_id", 1), kv_u32("tokenizer.ggml.eos_token_id", 2),
            kv_u32("tokenizer.ggml.unknown_token_id", 0), kv_bool("tokenizer.ggml.add_bos_token", True),
            kv_bool("tokenizer.ggml.add_eos_token", False)]


def write_model(path, w, type_of, lib, tok=()):
    kvs = list(tok) + [kv("general.architecture", 8, None, "llama"), kv("llama.embedding_length", 4, "I", H),
           kv("llama.feed_forward_length", 4, "I", FFN), kv("llama.block_count", 4, "I", L),
           kv("llama.attention.head_count", 4, "I", HEADS), kv("llama.attention.head_count_kv", 4, "I", KVH),
           kv("llama.context_length", 4, "I", 256), kv("llama.attention.layer_norm_rms_epsilon", 6, "f", 1e-5),
           kv("llama.rope.freq_base", 6, "f", 10000.0)]
    tensors = []
    ones = np.ones(H, dtype="<f4").tobytes()
    for name in ["output_norm.weight"] + [f"blk.{i}.{n}_norm.weight" for i in range(L) for n in ("attn", "ffn")]:
        tensors.append((name, 0, [H], ones))
    for name, m in w.items():
        ty = type_of(name)
        if ty == "F32":
            tensors.append((name, 0, [m.shape[1], m.shape[0]], m.astype("<f4").tobytes()))
        else:
            tensors.append((name, TYPES[ty][0], [m.shape[1], m.shape[0]], quantize(lib, ty, m)))
    write_gguf(path, kvs, tensors)


def run(*args):
    subprocess.run(args, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def ppl(cmd, pattern):
    """Runs a perplexity command; the 'PPL = x +/- e' its output prints (pattern: text before 'PPL = ')."""
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    for line in r.stdout.splitlines():
        if pattern in line and "PPL = " in line:
            return line.split("PPL = ", 1)[1].strip()
    return "failed (rc %d)" % r.returncode


def logits(cmf, path, tokens, work):
    out = os.path.join(work, "logits.f32")
    run(cmf, "eval", path, "--tokens", ",".join(map(str, tokens)), "-o", out, "-t", "2")
    return np.fromfile(out, "<f4").reshape(len(tokens), VOCAB)


def compare(ref, x):
    d = x.astype(np.float64) - ref
    return (np.sqrt(np.mean(d * d)) / np.sqrt(np.mean(ref.astype(np.float64) ** 2)),
            np.max(np.abs(d)) / np.max(np.abs(ref)), int(np.sum(ref.argmax(1) == x.argmax(1))))


def main():
    lib = ctypes.CDLL(sys.argv[1])
    lib.ggml_quantize_chunk.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64,
                                        ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p]
    lib.ggml_quantize_chunk.restype = ctypes.c_size_t
    cmf, work = sys.argv[2], (sys.argv[3] if len(sys.argv) > 3 else "/tmp/cmf-kquant")
    tok = tokenizer_kvs(sys.argv[4] if len(sys.argv) > 4 else None)
    os.makedirs(work, exist_ok=True)
    rng = np.random.default_rng(1)
    w = weights(rng)
    tokens = rng.integers(0, VOCAB, 64).tolist()
    print("| source | target | file MB | logit RMS err | max err | greedy agree |")
    print("|---|---|---|---|---|---|")
    g = os.path.join(work, "orig.gguf")
    write_model(g, w, lambda n: "F32", lib)
    run(cmf, "convert", g, "-o", os.path.join(work, "orig.cmf"), "--quant", "f32", "--no-progress")
    orig = logits(cmf, os.path.join(work, "orig.cmf"), tokens, work).astype(np.float64)
    files = [(ty, (lambda n, ty=ty: ty)) for ty in TYPES]
    mix = lambda n: "Q6_K" if ("attn_v" in n or "ffn_down" in n or n == "output.weight") else "Q4_K"  # noqa: E731
    files.append(("Q4_K_M-like", mix))
    for label, type_of in files:
        g = os.path.join(work, label + ".gguf")
        write_model(g, w, type_of, lib, tok)
        exact = os.path.join(work, label + "-f32.cmf")
        run(cmf, "convert", g, "-o", exact, "--quant", "f32", "--no-progress")
        ref = logits(cmf, exact, tokens, work).astype(np.float64)
        gmb = os.path.getsize(g) / 1e6
        rms, mx, agree = compare(orig, ref)  # llama.cpp's own quantization error, for scale
        print(f"| {label} GGUF vs the unquantized weights | - | {gmb:.2f} | {rms:.4f} | {mx:.4f} | {agree}/64 |")
        for t in (TARGETS if label != "Q4_K_M-like" else ["(default)"]):
            o = os.path.join(work, f"{label}-{t}.cmf")
            extra = [] if t == "(default)" else ["--quant", t]
            run(cmf, "convert", g, "-o", o, "--no-progress", *extra)
            rms, mx, agree = compare(ref, logits(cmf, o, tokens, work))
            print(f"| {label} | {t} | {os.path.getsize(o) / 1e6:.2f} | {rms:.4f} | {mx:.4f} | {agree}/64 |",
                  flush=True)
    text, llama = os.environ.get("TEXT"), os.environ.get("LLAMA_BIN")
    if not (tok and text and llama):
        return
    print("\n| model | llama-perplexity (GGUF) | cmf ppl --quant f32 | cmf ppl default (q8) |")
    print("|---|---|---|---|")
    for label in ("Q4_K_M-like", "Q4_K", "Q6_K"):
        g = os.path.join(work, label + ".gguf")
        d = os.path.join(work, label + ("-(default).cmf" if label == "Q4_K_M-like" else "-q8.cmf"))
        lp = ppl([os.path.join(llama, "llama-perplexity"), "-m", g, "-f", text, "-c", "128", "-b", "128", "-t", "2"],
                 "Final estimate")
        cp = [ppl([cmf, "ppl", m, "-f", text, "-c", "128", "-t", "2"], "")
              for m in (os.path.join(work, label + "-f32.cmf"), d)]
        print(f"| {label} | {lp} | {cp[0]} | {cp[1]} |", flush=True)


if __name__ == "__main__":
    main()
