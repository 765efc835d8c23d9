#!/usr/bin/env python3
"""gguf_to_q4_0.py — requantizes the F32 matrices of a GGUF v3 file to Q4_0 (python stdlib only).

usage: gguf_to_q4_0.py IN.gguf OUT.gguf

For models too small to bother with llama.cpp's llama-quantize (not built here), e.g. stories260K. Every 2-D F32
tensor whose first dimension (ne0, the row length) is a multiple of 32 becomes Q4_0; everything else is copied
unchanged, as is the metadata except general.file_type (set to 2, MOSTLY_Q4_0). This is what
`llama-quantize --pure IN OUT Q4_0` writes (no Q6_K output layer, token embedding Q4_0 too).

Q4_0 per block of 32 values (ggml-quants.c, quantize_row_q4_0_ref): m = the value of largest magnitude (first one
on ties), d = m / -8, id = 1/d (0 when d = 0), q_j = min(15, trunc(x_j*id + 8.5)), stored as f16 d + 16 bytes
(element j < 16 in the low nibble of byte j, j >= 16 in the high nibble of byte j-16). The arithmetic is rounded
to float32 at every step as ggml's C does. GGUF layout: ggml/docs/gguf.md.
"""
import struct
import sys

F32, Q4_0 = 0, 2
# byte sizes of scalar metadata value types (gguf.md): u8 i8 u16 i16 u32 i32 f32 bool string array u64 i64 f64
SCALAR = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}


def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def quant_block(xs):
    amax, m = 0.0, 0.0
    for v in xs:
        if abs(v) > amax:
            amax, m = abs(v), v
    d = f32(m / -8.0)
    idv = f32(1.0 / d) if d != 0.0 else 0.0
    q = []
    for v in xs:
        t = f32(f32(v * idv) + 8.5)
        q.append(min(15, int(t)))
    qs = bytes((q[j] & 15) | ((q[j + 16] & 15) << 4) for j in range(16))
    return struct.pack("<e", d) + qs


class Reader:
    def __init__(self, data):
        self.d, self.p = data, 0

    def take(self, fmt):
        v = struct.unpack_from("<" + fmt, self.d, self.p)
        self.p += struct.calcsize("<" + fmt)
        return v[0] if len(v) == 1 else v

    def string(self):
        n = self.take("Q")
        s = self.d[self.p:self.p + n]
        self.p += n
        return s

    def skip_value(self, t):
        if t == 8:
            self.string()
        elif t == 9:
            et, n = self.take("I"), self.take("Q")
            for _ in range(n):
                self.skip_value(et)
        elif t in SCALAR:
            self.p += SCALAR[t]
        else:
            raise ValueError("unknown GGUF metadata type %d at offset %d" % (t, self.p))


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__.splitlines()[2])
    data = open(sys.argv[1], "rb").read()
    r = Reader(data)
    if data[:4] != b"GGUF":
        sys.exit("%s: not a GGUF file" % sys.argv[1])
    r.p = 4
    version, n_t, n_kv = r.take("I"), r.take("Q"), r.take("Q")
    if version != 3:
        sys.exit("GGUF version %d: only 3 is handled" % version)
    kvs, align = [], 32
    for _ in range(n_kv):
        start = r.p
        key = r.string()
        t = r.take("I")
        vstart = r.p
        r.skip_value(t)
        raw = data[start:r.p]
        if key == b"general.file_type" and t == 4:
            raw = data[start:vstart] + struct.pack("<I", 2)
        if key == b"general.alignment" and t == 4:
            align = struct.unpack_from("<I", data, vstart)[0]
        kvs.append(raw)
    infos = []
    for _ in range(n_t):
        name = r.string()
        nd = r.take("I")
        ne = [r.take("Q") for _ in range(nd)]
        t, off = r.take("I"), r.take("Q")
        infos.append((name, ne, t, off))
    base = (r.p + align - 1) // align * align

    def nbytes(ne, t):
        n = 1
        for x in ne:
            n *= x
        if t == F32:
            return 4 * n
        if t == Q4_0:
            return n // 32 * 18
        raise ValueError("tensor type %d not handled" % t)

    out_t, payloads, off = [], [], 0
    n_q = 0
    for name, ne, t, src_off in infos:
        src = data[base + src_off: base + src_off + nbytes(ne, t)]
        if t == F32 and len(ne) == 2 and ne[0] % 32 == 0:
            vals = struct.unpack("<%df" % (len(src) // 4), src)
            src = b"".join(quant_block(vals[i:i + 32]) for i in range(0, len(vals), 32))
            t = Q4_0
            n_q += 1
        out_t.append(struct.pack("<Q", len(name)) + name + struct.pack("<I", len(ne)) +
                     struct.pack("<%dQ" % len(ne), *ne) + struct.pack("<IQ", t, off))
        payloads.append(src)
        off = (off + len(src) + align - 1) // align * align
    with open(sys.argv[2], "wb") as f:
        f.write(b"GGUF" + struct.pack("<IQQ", 3, n_t, n_kv))
        f.write(b"".join(kvs))
        f.write(b"".join(out_t))
        f.write(b"\0" * ((-f.tell()) % align))
        for p in payloads:
            f.write(p)
            f.write(b"\0" * ((-len(p)) % align))
    print("gguf_to_q4_0: %s -> %s: %d of %d tensors as Q4_0" % (sys.argv[1], sys.argv[2], n_q, n_t), file=sys.stderr)


if __name__ == "__main__":
    main()
