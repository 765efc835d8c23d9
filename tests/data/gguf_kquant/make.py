#!/usr/bin/env python3
"""make.py — writes the GGUF test data of cmf's Q4_1/Q5_0/Q5_1/K-quant decoding (src/convert/gguf_kquant.c), with
reference values from gguf-py's numpy dequantizer (llama.cpp's gguf-py/gguf/quants.py, gguf.quants.dequantize),
an implementation cmf did not write.

usage: /usr/bin/python3 make.py GGUF_PY_DIR [OUT_DIR] [--check-ggml LIBGGML_BASE_SO]
  GGUF_PY_DIR: the gguf-py folder of a llama.cpp checkout (the one holding gguf/quants.py), e.g.
  /tmp/llama.cpp/gguf-py. Needs numpy (Debian: apt-get install python3-numpy). OUT_DIR defaults to this folder.
  --check-ggml: also decode every tensor with ggml's own C (dequantize_row_<type> of a prebuilt libggml-base.so,
  through ctypes) and require the same bits as gguf-py's (nothing of it is written or committed).

Writes (GGUF v3, python stdlib struct; layout ggml/docs/gguf.md):
  types.gguf       one tensor per type, named by the type ("q4_1", ..., "q8_k", "iq4_nl", "iq4_xs"), ne = [256, 4]:
                   random but valid blocks (random quant bytes; f16 scales random finite of moderate size, f16
                   subnormals included, either sign; Q8_K's f32 d likewise and its bsums the true sums of 16
                   quants).
  types_ref.gguf   the same names as F32 tensors: gguf-py's dequantization. Q8_K has no dequantizer in gguf-py;
                   its reference is numpy's f32 product d·q (ggml-quants.c dequantize_row_q8_K's formula).
  model_kq.gguf    a 1-layer llama (hidden 256, 2 heads of 32, 1 KV head, FFN 64, vocab 32, tied embeddings, no
                   tokenizer) whose matrices are Q4_K (token_embd, attn_q, ffn_gate), Q6_K (attn_v, ffn_up) and
                   Q2_K (attn_k) as a Q4_K_M-like mix; attn_output and ffn_down (ne[0] = 64 is no multiple of
                   256) are F16, the norms F32.
  model_f32.gguf   the same model with every quantized matrix replaced by gguf-py's F32 dequantization.
The seed is fixed, so the output is the same on every run.
"""
import argparse
import ctypes
import os
import random
import struct
import sys

import numpy as np

# ggml type ids (ggml.h enum ggml_type), block size in elements, bytes per block
TYPES = {
    "q4_1": (3, 32, 20), "q5_0": (6, 32, 22), "q5_1": (7, 32, 24), "q2_k": (10, 256, 84), "q3_k": (11, 256, 110),
    "q4_k": (12, 256, 144), "q5_k": (13, 256, 176), "q6_k": (14, 256, 210), "q8_k": (15, 256, 292),
    "iq4_nl": (20, 32, 18), "iq4_xs": (23, 256, 136),
}
F32, F16 = 0, 1
# byte offsets of the f16 scale fields in each block (ggml-common.h block_<type>)
F16_FIELDS = {
    "q4_1": (0, 2), "q5_0": (0,), "q5_1": (0, 2), "q2_k": (80, 82), "q3_k": (108,), "q4_k": (0, 2),
    "q5_k": (0, 2), "q6_k": (208,), "iq4_nl": (0,), "iq4_xs": (0,),
}


def rand_f16(rng, lo_exp, hi_exp):
    """A random finite f16 (as its 2 bytes): either sign, magnitude 2^e·(1+f) with e in [lo_exp, hi_exp]."""
    v = rng.choice((-1.0, 1.0)) * 2.0 ** rng.uniform(lo_exp, hi_exp)
    h = np.float16(v)
    assert np.isfinite(h)
    return h.tobytes()


def make_blocks(rng, name, n_blocks, lo_exp=-16, hi_exp=1):
    """n_blocks random valid blocks of type `name` as bytes."""
    _, blck, size = TYPES[name]
    out = bytearray()
    for _ in range(n_blocks):
        b = bytearray(rng.getrandbits(8) for _ in range(size))
        if name == "q8_k":
            b[0:4] = struct.pack("<f", rng.choice((-1.0, 1.0)) * 2.0 ** rng.uniform(lo_exp, hi_exp))
            qs = struct.unpack("<256b", bytes(b[4:260]))
            b[260:292] = struct.pack("<16h", *(sum(qs[16 * i:16 * i + 16]) for i in range(16)))
        else:
            for off in F16_FIELDS[name]:
                b[off:off + 2] = rand_f16(rng, lo_exp, hi_exp)
        out += b
    return bytes(out)


def dequant(gq, name, raw, rows, cols):
    """gguf-py's f32 dequantization of `rows` rows of `cols` elements (Q8_K: numpy's d·q, see the docstring)."""
    tid, blck, size = TYPES[name]
    data = np.frombuffer(raw, dtype=np.uint8).reshape(rows, cols // blck * size)
    if name == "q8_k":
        blocks = data.reshape(-1, size)
        d = blocks[:, 0:4].copy().view(np.float32)
        q = blocks[:, 4:260].copy().view(np.int8).astype(np.float32)
        return (d * q).astype(np.float32).reshape(rows, cols)
    out = gq.quants.dequantize(data, gq.GGMLQuantizationType(tid))
    assert out.dtype == np.float32 and out.shape == (rows, cols), (out.dtype, out.shape)
    return out


def ggml_dequant(lib, name, raw, n):
    """ggml's own C dequantize_row_<name> (libggml-base.so) of n elements."""
    fn = getattr(lib, "dequantize_row_" + name.replace("_k", "_K"))
    fn.argtypes = [ctypes.c_char_p, ctypes.c_void_p, ctypes.c_int64]
    fn.restype = None
    out = np.zeros(n, dtype=np.float32)
    fn(raw, out.ctypes.data, n)
    return out


# --- GGUF writer (stdlib) ---------------------------------------------------------------------------------------

def s_str(s):
    b = s.encode("utf-8")
    return struct.pack("<Q", len(b)) + b


def kv(key, vtype, fmt, value):
    return s_str(key) + struct.pack("<I", vtype) + (s_str(value) if vtype == 8 else struct.pack("<" + fmt, value))


def write_gguf(path, kvs, tensors):
    """tensors: list of (name, ggml type id, ne list (innermost first), raw bytes)."""
    head = [b"GGUF", struct.pack("<IQQ", 3, len(tensors), len(kvs))] + kvs
    offset, infos, datas = 0, [], []
    for name, tid, ne, raw in tensors:
        infos.append(s_str(name) + struct.pack("<I", len(ne)) + struct.pack("<%dQ" % len(ne), *ne)
                     + struct.pack("<IQ", tid, offset))
        pad = (-len(raw)) % 32
        datas.append(raw + b"\0" * pad)
        offset += len(raw) + pad
    blob = b"".join(head + infos)
    blob += b"\0" * ((-len(blob)) % 32)
    with open(path, "wb") as f:
        f.write(blob + b"".join(datas))


def model_kvs(arch_params):
    h, ffn, heads, hd, kvh, ctx = arch_params
    return [kv("general.architecture", 8, None, "llama"), kv("llama.embedding_length", 4, "I", h),
            kv("llama.feed_forward_length", 4, "I", ffn), kv("llama.block_count", 4, "I", 1),
            kv("llama.attention.head_count", 4, "I", heads), kv("llama.attention.head_count_kv", 4, "I", kvh),
            kv("llama.attention.key_length", 4, "I", hd), kv("llama.attention.value_length", 4, "I", hd),
            kv("llama.rope.dimension_count", 4, "I", hd), kv("llama.context_length", 4, "I", ctx),
            kv("llama.attention.layer_norm_rms_epsilon", 6, "f", 1e-5), kv("llama.rope.freq_base", 6, "f", 10000.0)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("gguf_py")
    ap.add_argument("out", nargs="?", default=os.path.dirname(os.path.abspath(__file__)))
    ap.add_argument("--check-ggml")
    a = ap.parse_args()
    sys.path.insert(0, a.gguf_py)
    import gguf  # noqa: E402  (gguf-py: gguf.quants.dequantize, gguf.GGMLQuantizationType)
    lib = ctypes.CDLL(a.check_ggml) if a.check_ggml else None
    rng = random.Random(20261201)

    rows, cols = 4, 256
    qt, rt = [], []
    for name, (tid, blck, size) in TYPES.items():
        raw = make_blocks(rng, name, rows * cols // blck)
        ref = dequant(gguf, name, raw, rows, cols)
        assert np.all(np.isfinite(ref))
        if lib is not None:
            c = ggml_dequant(lib, name, raw, rows * cols)
            same = np.array_equal(c.view(np.uint32), ref.reshape(-1).view(np.uint32))
            print("%-5s ggml C %s gguf-py" % (name, "==" if same else "!="))
            assert same
        qt.append((name, tid, [cols, rows], raw))
        rt.append((name, F32, [cols, rows], ref.astype("<f4").tobytes()))
    write_gguf(os.path.join(a.out, "types.gguf"), [], qt)
    write_gguf(os.path.join(a.out, "types_ref.gguf"), [], rt)

    # the model: (name, type, ne) with ne innermost first
    h, ffn, heads, hd, kvh, vocab = 256, 64, 2, 32, 1, 32
    layout = [("token_embd.weight", "q4_k", [h, vocab]), ("blk.0.attn_norm.weight", "f32", [h]),
              ("blk.0.attn_q.weight", "q4_k", [h, heads * hd]), ("blk.0.attn_k.weight", "q2_k", [h, kvh * hd]),
              ("blk.0.attn_v.weight", "q6_k", [h, kvh * hd]), ("blk.0.attn_output.weight", "f16", [heads * hd, h]),
              ("blk.0.ffn_norm.weight", "f32", [h]), ("blk.0.ffn_gate.weight", "q4_k", [h, ffn]),
              ("blk.0.ffn_up.weight", "q6_k", [h, ffn]), ("blk.0.ffn_down.weight", "f16", [ffn, h]),
              ("output_norm.weight", "f32", [h])]
    mq, mf = [], []
    for name, ty, ne in layout:
        n = int(np.prod(ne))
        if ty == "f32":
            raw = struct.pack("<%df" % n, *(rng.uniform(0.5, 1.5) for _ in range(n)))
            mq.append((name, F32, ne, raw))
            mf.append((name, F32, ne, raw))
        elif ty == "f16":
            raw = np.array([rng.gauss(0, 0.1) for _ in range(n)], dtype="<f2").tobytes()
            mq.append((name, F16, ne, raw))
            mf.append((name, F16, ne, raw))
        else:
            tid, blck, _ = TYPES[ty]
            raw = make_blocks(rng, ty, n // blck, -12, -8)
            ref = dequant(gguf, ty, raw, ne[1], ne[0])
            mq.append((name, tid, ne, raw))
            mf.append((name, F32, ne, ref.astype("<f4").tobytes()))
    kvs = model_kvs((h, ffn, heads, hd, kvh, 64))
    write_gguf(os.path.join(a.out, "model_kq.gguf"), kvs, mq)
    write_gguf(os.path.join(a.out, "model_f32.gguf"), kvs, mf)


if __name__ == "__main__":
    main()
