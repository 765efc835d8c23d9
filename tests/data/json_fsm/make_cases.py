#!/usr/bin/env python3
"""make_cases.py: writes cases.txt next to this script, the cases of tests/sample/test_json_fsm.c.

One case a line: "V <hex>" for a text of json_fsm.h's language, "I <hex> <k>" for one outside it, <hex> the raw
bytes. The verdicts come from Python's json module (strict) plus json_fsm.h's limits. <k>: the first k bytes of an
invalid text are a prefix of a valid text (Python accepts them with a completion from the list below appended) and
no completion from the list makes the first k + 1 valid; the list finishes every kind of unfinished token, string,
member and container, so byte k is where a byte-level recognizer must reject (k = the length when the whole text is
an unfinished prefix). Hand-written edge cases come first, then random objects and random mutations of them (fixed
seed: the output is the same on every run).

Run: python3 tests/data/json_fsm/make_cases.py
"""
import json
import json.decoder
import json.scanner
import os
import random

MAX_DEPTH = 32   # CMF_JSON_MAX_DEPTH: containers open at once, the top-level object included
MAX_INDENT = 20  # CMF_JSON_MAX_INDENT: a whitespace run is nothing, one space, or "\n" and at most 20 [ \t]
WS = b" \t\n\r"
SEED = 20260517
N_RANDOM = 2600
N_MUTANTS = 5200

# The C scanner checks \u escapes strictly (the pure-Python fallback lets int() take " 12a" as hex).
assert json.scanner.c_make_scanner is not None and json.decoder.c_scanstring is not None


class _Constant(Exception):
    pass


def _no_constant(name):
    raise _Constant(name)


def ws_run_ok(w):
    return w == b" " or (w[:1] == b"\n" and len(w) <= 1 + MAX_INDENT and all(c in b" \t" for c in w[1:]))


def limits_ok(b):
    """json_fsm.h's limits on a text Python's json accepted: depth, whitespace runs, nothing after the '}'."""
    depth, run, in_str, esc = 0, b"", False, False
    for c in b:
        if in_str:
            if esc:
                esc = False
            elif c == 0x5C:
                esc = True
            elif c == 0x22:
                in_str = False
            continue
        if c in WS:
            run += bytes([c])
            continue
        if run and not ws_run_ok(run):
            return False
        run = b""
        if c == 0x22:
            in_str = True
        elif c in b"{[":
            depth += 1
            if depth > MAX_DEPTH:
                return False
        elif c in b"}]":
            depth -= 1
    return b.endswith(b"}")


def valid(b):
    try:
        s = b.decode("utf-8")  # strict: RFC 3629 well-formed only
    except UnicodeDecodeError:
        return False
    try:
        # parse_int/parse_float keep number conversion out of the verdict (int() refuses > 4300 digits)
        v = json.loads(s, parse_constant=_no_constant, parse_int=str, parse_float=str)
    except (ValueError, _Constant, RecursionError):
        return False
    return isinstance(v, dict) and limits_ok(b)


# Completions tried after a prefix to show it can still become a valid text: finish a token (escape, \u digits,
# literal, number, UTF-8 character), maybe close a string, maybe add what an object or array still needs, then
# close the open containers.
_FINISH = [b"", b"0", b"n", b"00", b"000", b"0000", b"rue", b"ue", b"e", b"alse", b"lse", b"se", b"ull", b"ll",
           b"l", b"\x80", b"\x80\x80", b"\xa0\x80", b"\x80\x80\x80", b"\x90\x80\x80"]
_QUOTE = [b"", b'"']
_NEED = [b"", b":0", b'"":0', b"0", b"{}"]


def _closers(p):
    stack, in_str, esc = [], False, False
    for c in p:
        if in_str:
            if esc:
                esc = False
            elif c == 0x5C:
                esc = True
            elif c == 0x22:
                in_str = False
        elif c == 0x22:
            in_str = True
        elif c in b"{[":
            stack.append(c)
        elif c in b"}]" and stack:
            stack.pop()
    return b"".join(b"}" if c == 0x7B else b"]" for c in reversed(stack))


def viable(p):
    close = _closers(p)
    for a in _FINISH:
        for q in _QUOTE:
            for n in _NEED:
                if valid(p + a + q + n + close):
                    return True
    return False


def viable_len(t, start):
    """Bytes of t shown viable, scanning on from start (t[:start] already known to be a prefix of a valid text)."""
    j = start
    while j < len(t) and viable(t[: j + 1]):
        j += 1
    return j


# ---- hand-written cases ----------------------------------------------------------------------------------------


def hand_cases():
    out = []

    def add(b):
        out.append(b.encode("latin-1") if isinstance(b, str) else b)

    def val(v):  # a value inside an object
        return b'{"k":' + (v.encode("latin-1") if isinstance(v, str) else v) + b"}"

    def strv(raw):  # raw bytes inside a value string and inside a key
        return [b'{"k":"' + raw + b'"}', b'{"' + raw + b'":0}']

    # structure
    for s in ['{}', '{"a":1}', '{"a":{"b":[1,2,{"c":[]}]}}', '{"":""}', '{"a":[]}', '{"a":{}}', '{"a":[[],[[]],{}]}',
              ' {}', '\t\n\r {}', '{"a":1,"a":2}', '{"a":1,"b":[true,false,null],"c":{"d":"e"}}',
              '{ "a" : 1 , "b" : [ 1 , 2 ] }', '{\n\t"a":\r1\n}', '{"a":"}"}', '{"a":"]"}', '{"{":"["}',
              '', ' ', '{', '}', '{}}', '{}{}', '{} ', '{}\n', '{}\t', '{}\r', '{}x', '{}0', '[]', '[1]', '[{}]', '"a"',
              '1', '-1', 'true', 'null', '{,}', '{"a":1,}', '{"a":[1,]}', '{"a" 1}', '{"a":1 "b":2}', '{1:2}',
              '{true:1}', '{null:1}', '{a:1}', "{'a':1}", '{"a":\'b\'}', '{"a":}', '{"a"}', '{:1}',
              '{"a":1,,"b":2}', '{"a":[1 2]}', '{"a":[,1]}', '{"a":[1}', '{"a":{]}', '{"a":1]', '{"a":1}}',
              '{"a":1}]', '{"a"::1}', '{"a":1:2}', '{"a",1}', '{[]:1}', '{{}:1}', '{"a":[}', '{"a":{"b"}}',
              '{"a":[1,2]]', '{"a":1', '{"a":', '{"a"', '{"a', '{"', '{"a":[1', '{"a":{"b":1}', '\x00{}', '{}\x00',
              '{\x00}', '{"a":1}\x00', '\x0b{}', '\x0c{}', '{\x0b}', '{"a":1\x0c}', '\xef\xbb\xbf{}']:
        add(s)

    # escapes
    for e in ['\\"', '\\\\', '\\/', '\\b', '\\f', '\\n', '\\r', '\\t', '\\u0041', '\\u00e9', '\\u00E9', '\\uABCD',
              '\\uabcd', '\\uD83D\\uDE00', '\\ud83d\\ude00', '\\uD800', '\\uDBFF', '\\uDC00', '\\uDFFF',
              '\\uDC00\\uD800', '\\uD800\\uD800', '\\uD800x', '\\uD800\\n', '\\u0000', '\\u001f', '\\uFFFF',
              '\\"\\\\\\/\\b\\f\\n\\r\\t', 'a\\\\', '\\\\\\"',
              '\\x41', '\\u12', '\\u12G4', '\\u', '\\U0041', '\\a', '\\0', "\\'", '\\ ', '\\e', '\\v', '\\N',
              '\\uD800\\u', '\\uD800\\u12', '\\uD800\\x', '\\u-123', '\\u 123', '\\u+123', '\\u0x12', '\\',
              '\\\\\\']:
        out.extend(strv(e.encode("latin-1")))
    # raw bytes in strings: controls are invalid, DEL and space are not
    for c in list(range(0x20)) + [0x20, 0x7F]:
        out.extend(strv(b"a" + bytes([c]) + b"b"))
    add(val('"' + " " * 40 + '"'))
    add(val('"[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{"'))

    # numbers
    for n in ["-0", "0", "0.5", "1e5", "1E+5", "1e-5", "-1.25e+10", "123", "0e0", "0E-0", "-0.0", "1.5E3", "10",
              "9007199254740993", "1e999", "-1e-999", "0.000001", "12345678901234567890.123456789e+0123",
              "1" * 400, "0." + "5" * 300,
              "01", "1.", ".5", "+1", "-", "1e", "1e+", "1E-", "0x1", "--1", "NaN", "Infinity", "-Infinity", "nan",
              "inf", "1.e5", "-.5", "00", "-01", "1e5.5", "1ee5", "1.5.5", "0.5e", "- 1", "1 2", "1.5e+-3", "-0x",
              "0e", "0.0.", "-00", "1_000", "1,5", "\xd9\xa1", "\xef\xbc\x91", "1e.5", "1E.5", "1.5e.5", "1e-.5",
              "1.5E", "-a", "-e5", "1e5e5", "1.5e3.2", "0e+", "2.", "-0.", "1E++5", "1e--5", "1.0e+5x", "0.e1", "1e5.",
              "-.", "1.-5", "1e5-", "1.5+"]:
        add(val(n))
        add(b'{"k":[' + n.encode("latin-1") + b"]}")
    for n in ["0", "-1", "1.5", "1e5"]:  # numbers where keys go
        add("{" + n + ':"a"}')

    # literals
    for lit in ["true", "false", "null", "tru", "nul", "fals", "falsey", "True", "TRUE", "nulll", "truee", "t",
                "f", "n", "true1", "nan", "none", "None", "nil", "fal se", "t rue", "nu ll"]:
        add(val(lit))
        add(b'{"k":[' + lit.encode() + b"]}")

    # whitespace runs: nothing, one space, or a newline and at most 20 spaces or tabs; nothing else
    runs = [" ", "\n", "\n" + " " * MAX_INDENT, "\n" + "\t" * MAX_INDENT, "\n \t\t ", "\n" + " " * (MAX_INDENT - 1),
            "  ", "\t", "\r", "\r\n", "\n\n", " \n", "\n\r", "\n \n", "\n" + " " * (MAX_INDENT + 1),
            "\n" + "\t" * (MAX_INDENT + 1), "\n" + " \t" * 11, "\t\n", " " * 25, "\x0b", "\x0c"]
    for w in runs:
        add(w + "{}")
        add(w + '{"a":1}')
        add("{" + w + "}")
        add("{" + w + '"a":1}')
        add('{"a"' + w + ":1}")
        add('{"a":' + w + "1}")
        add('{"a":1' + w + "}")
        add('{"a":1' + w + ',"b":2}')
        add('{"a":1,' + w + '"b":2}')
        add('{"a":[' + w + "]}")
        add('{"a":[' + w + "1,2]}")
        add('{"a":[1' + w + ",2]}")
        add('{"a":[1,' + w + "2]}")
        add('{"a":[1,2' + w + "]}")
        add('{"a":{' + w + "}}")
        add('{"a":true' + w + "}")
        add('{"a":-1.5e3' + w + "}")
        add('{"a":"x"' + w + "}")
        add(w + "{" + w + '"a"' + w + ":" + w + "[" + w + "1" + w + "]" + w + "}")
        add("{}" + w)
    add(json.dumps({"a": [1, {"b": None, "c": "d"}], "e": {}, "f": []}, indent=2))
    add(json.dumps({"a": [1, {"b": None, "c": "d"}]}, indent="\t"))
    add(json.dumps({"a": [1, {"b": None, "c": "d"}]}, indent=2, separators=(", ", ": ")))
    add(json.dumps({"a": [1, 2]}))
    add("{" + "\n" + " " * 20 + '"a": {\n' + " " * 21 + '"b": 1}}')
    add('{"a":1}\n')

    # depth: the top-level object counts
    for d in (MAX_DEPTH - 1, MAX_DEPTH, MAX_DEPTH + 1, MAX_DEPTH + 8):
        add('{"a":' + "[" * (d - 1) + "]" * (d - 1) + "}")
        add('{"a":' * (d - 1) + "{}" + "}" * (d - 1))
        add('{"a":' * (d - 1) + "1" + "}" * d)
        add('{"a":' + "[" * (d - 2) + "{}" + "]" * (d - 2) + "}")
        opens = ["[" if i % 2 == 0 else '{"b":' for i in range(d - 1)]  # arrays and objects taking turns
        add('{"a":' + "".join(opens) + "0" + "".join("]" if o == "[" else "}" for o in reversed(opens)) + "}")
        add('{"a":' + "[" * (d - 1) + "1" + "]" * (d - 1) + "}")
        add('{"a":' + "[" * (d - 1))  # prefix only: viable up to the limit
    add('{"a":' + "[" * 31 + "]" * 31 + ',"b":' + "[" * 31 + "]" * 31 + "}")
    add('{"a":' + "[" * 31 + "]" * 30 + ",[]]}")
    add('{"a":' + "[" * 31 + "]" * 30 + ",[[]]]}")

    # UTF-8 in strings: well-formed passes, anything else does not
    good = [b"\xc2\x80", b"\xdf\xbf", b"\xe0\xa0\x80", b"\xe1\x80\x80", b"\xec\x80\x80", b"\xed\x9f\xbf",
            b"\xee\x80\x80", b"\xef\xbf\xbf", b"\xf0\x90\x80\x80", b"\xf1\x80\x80\x80", b"\xf3\xbf\xbf\xbf",
            b"\xf4\x8f\xbf\xbf", b"\xc3\xa9", b"\xe2\x82\xac", b"\xf0\x9f\x98\x80", b"\xef\xbb\xbf"]
    bad = [b"\xc0\x80", b"\xc1\xbf", b"\xe0\x80\x80", b"\xe0\x9f\xbf", b"\xed\xa0\x80", b"\xed\xbf\xbf",
           b"\xf0\x80\x80\x80", b"\xf0\x8f\xbf\xbf", b"\xf4\x90\x80\x80", b"\xf5\x80\x80\x80", b"\xf7\xbf\xbf\xbf",
           b"\xf8\x88\x80\x80\x80", b"\xfc\x84\x80\x80\x80\x80", b"\xfe", b"\xff", b"\x80", b"\xbf", b"\x80\x80",
           b"\xc2", b"\xc2a", b"\xc2\xc2\x80", b"\xe1\x80", b"\xe1\x80a", b"\xe0\xa0", b"\xf0\x90\x80",
           b"\xf0\x90", b"\xf0", b"\xf4\x8f\xbf", b"\xc3\xa9\xa9", b"\xe2\x82\xac\x80", b"\xed\xb0\x80",
           b"\xc2\x80\xbf", b"\xe1\xc0\x80", b"\xf1\x80\x80\xc0"]
    for u in good + bad:
        out.extend(strv(u))
        out.extend(strv(b"ab" + u + b"cd"))
    for u in good[:4] + bad:  # where tokens go
        add(b"{" + u + b'"a":1}')
        add(b'{"a":' + u + b"}")
        add(b'{"a":1' + u + b"}")
        add(u + b"{}")
        add(b"{}" + u)
    for u in bad[:12]:  # a string ends mid-character or the text ends inside it
        add(b'{"a":"' + u[:1] + b'"}')
        add(b'{"a":"' + u[:-1])
    for u in good:
        add(b'{"a":"' + u[:-1])
        add(b'{"a":"' + u[:-1] + b'"}')
    return out


# ---- random objects ------------------------------------------------------------------------------------------

_CHARS = ["\u0080", "\u00e9", "\u07ff", "\u0800", "\u20ac", "\u4e2d", "\ud7ff", "\ue000", "\ufffd", "\uffff",
          "\U00010000", "\U0001f600", "\U0010ffff", "\x7f", "\u0416"]
_ESC = ['\\"', "\\\\", "\\/", "\\b", "\\f", "\\n", "\\r", "\\t"]


def r_ws(r):
    x = r.random()
    if x < 0.55:
        return b""
    if x < 0.75:
        return b" "
    n = r.randint(0, 4) if x < 0.95 else r.randint(5, MAX_INDENT)
    return b"\n" + bytes(r.choice(b" \t") for _ in range(n))


def r_hex4(r, lo=0, hi=0xFFFF):
    h = "%04x" % r.randint(lo, hi)
    return "".join(c.upper() if r.random() < 0.3 else c for c in h)


def r_string(r):
    parts = []
    for _ in range(r.choice([0, 1, 2, 3, 4, 6, 10])):
        x = r.random()
        if x < 0.5:
            parts.append(r.choice("abcdefghijklmnopqrstuvwxyzABCXYZ0123456789 _-.,:;{}[]'/!?#$%&*+=<>@^`|~"))
        elif x < 0.68:
            parts.append(r.choice(_CHARS))
        elif x < 0.8:
            parts.append(r.choice(_ESC))
        elif x < 0.88:
            parts.append("\\u" + r_hex4(r))
        elif x < 0.94:
            parts.append("\\u" + r_hex4(r, 0xD800, 0xDBFF) + "\\u" + r_hex4(r, 0xDC00, 0xDFFF))
        else:
            parts.append("\\u" + r_hex4(r, 0xD800, 0xDFFF))  # a lone surrogate
    return ('"' + "".join(parts) + '"').encode("utf-8")


def r_digits(r, n):
    return "".join(r.choice("0123456789") for _ in range(n))


def r_number(r):
    s = "-" if r.random() < 0.3 else ""
    s += "0" if r.random() < 0.25 else r.choice("123456789") + r_digits(r, r.choice([0, 0, 1, 2, 5, 12]))
    if r.random() < 0.4:
        s += "." + r_digits(r, r.choice([1, 1, 2, 4, 9]))
    if r.random() < 0.3:
        s += r.choice("eE") + r.choice(["", "", "+", "-"]) + r_digits(r, r.choice([1, 1, 2, 3]))
    return s.encode()


def r_value(r, depth, maxd):
    x = r.random()
    if depth < maxd and x < 0.3:
        return r_object(r, depth + 1, maxd) if r.random() < 0.5 else r_array(r, depth + 1, maxd)
    if x < 0.6:
        return r_string(r)
    if x < 0.85:
        return r_number(r)
    return r.choice([b"true", b"false", b"null"])


def r_array(r, depth, maxd):
    n = r.choice([0, 1, 1, 2, 3, 4])
    items = [r_ws(r) + r_value(r, depth, maxd) + r_ws(r) for _ in range(n)]
    return b"[" + (b",".join(items) if items else r_ws(r)) + b"]"


def r_object(r, depth, maxd):
    n = r.choice([0, 1, 1, 2, 3, 4])
    items = [r_ws(r) + r_string(r) + r_ws(r) + b":" + r_ws(r) + r_value(r, depth, maxd) + r_ws(r)
             for _ in range(n)]
    return b"{" + (b",".join(items) if items else r_ws(r)) + b"}"


_ALPHABET = (list(b"{}[],:") * 3 + list(b"0123456789") + list(b'""""\\\\') + list(WS) * 2 + list(b"eE+-.tfnulrsa")
             + [0x80, 0xBF, 0xC2, 0xE0, 0xED, 0xF0, 0xF4, 0xC0, 0xF5, 0x00, 0x1F, 0x7F])


def mutate(r, t):
    """t with 1 to 3 byte edits; also the position of the first edit (t is unchanged before it)."""
    b = bytearray(t)
    first = len(b)
    for _ in range(r.choice([1, 1, 1, 2, 3])):
        op = r.choice("dir")
        c = r.randrange(256) if r.random() < 0.15 else r.choice(_ALPHABET)
        if op == "i":
            p = r.randint(0, len(b))
            b.insert(p, c)
        elif not b:
            continue
        else:
            p = r.randrange(len(b))
            if op == "d":
                del b[p]
            else:
                b[p] = c
        first = min(first, p)
    return bytes(b), first


def main():
    r = random.Random(SEED)
    cases = {}  # bytes -> (valid, k); insertion order is the file's order

    def put(t, start=0):
        if t in cases:
            return
        v = valid(t)
        cases[t] = (v, len(t) if v else viable_len(t, start))

    for t in hand_cases():
        put(t)
    originals = []
    for i in range(N_RANDOM):
        t = r_ws(r) + r_object(r, 1, r.choice([1, 2, 2, 3, 3, 4, 5, 6]))
        assert valid(t), t
        originals.append(t)
        put(t)
    for i in range(N_MUTANTS):
        t, first = mutate(r, r.choice(originals))
        put(t, first)

    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "cases.txt")
    nv = 0
    with open(path, "w") as f:
        for t, (v, k) in cases.items():
            nv += v
            f.write(("V %s\n" % t.hex()) if v else ("I %s %d\n" % (t.hex(), k)))
    print("%s: %d cases, %d valid, %d invalid, %d bytes" % (path, len(cases), nv, len(cases) - nv,
                                                             os.path.getsize(path)))


if __name__ == "__main__":
    main()
