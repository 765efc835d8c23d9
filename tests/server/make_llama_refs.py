#!/usr/bin/env python3
"""Writes tests/server/data/llama_server_refs.json: llama.cpp's llama-server answering its own routes (POST
/completion, plain and streamed; GET /props; POST /tokenize with with_pieces) on the shared stories260K GGUF, for
tests/server/test_native.c, which sends the same requests to `cmf serve` on the same model converted to CMF and
compares the texts, the stop fields, the token pieces, and the name and JSON type of every field cmf sends.

Run once from the repository root, with a built llama-server:
    LLAMA_SERVER=/path/to/llama-server CMF_SHARED=../shared python3 tests/server/make_llama_refs.py
The server runs with -c 128 -np 2 (the test starts cmf serve the same way) and greedy requests only."""
import json
import os
import socket
import subprocess
import time
import urllib.error
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SHARED = os.environ.get("CMF_SHARED", os.path.join(ROOT, "..", "shared"))
GGUF = os.path.join(SHARED, "data", "models", "stories260K-gguf", "stories260Ktok512.gguf")
OUT = os.path.join(ROOT, "tests", "server", "data", "llama_server_refs.json")

COMPLETIONS = [
    {"prompt": "Once upon a time", "n_predict": 8, "temperature": 0},
    {"prompt": "Once", "n_predict": 40, "temperature": 0, "stop": ["little", "zzz"]},
    {"prompt": [1, 403, 407], "n_predict": 4, "temperature": 0, "cache_prompt": True, "mirostat": 0,
     "typical_p": 1.0},
    {"prompt": "Lily and Tom", "n_predict": 12, "temperature": 0, "top_k": 1, "seed": 3},
    # review13 item 1: generation that fills the context (128 positions a slot) ends with "truncated": true
    {"prompt": "Once upon a time", "n_predict": -1, "temperature": 0},
    # review13 item 2: the first generated piece keeps its SentencePiece leading space (" Once upon a")
    {"prompt": "", "n_predict": 3, "temperature": 0},
]
STREAM = {"prompt": "Once upon a time", "n_predict": 6, "temperature": 0, "stream": True}
# review13 item 2: /detokenize joins each token's piece, the first one's leading space kept
DETOKENIZE = [[403, 407], [1, 403], [403], [1, 2], [], [263, 1, 403]]
TOKENIZE = ["Once upon a time", "Hello\nworld \u2603 \u65e5\u672c \u00e9", "<s>x", " a  b"]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def request(port, path, body=None):
    data = json.dumps(body).encode() if body is not None else None
    r = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=data, method="POST" if data else "GET",
                               headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(r, timeout=60) as f:
        return f.read().decode()


def main():
    port = free_port()
    exe = os.environ.get("LLAMA_SERVER", "llama-server")
    proc = subprocess.Popen([exe, "-m", GGUF, "--port", str(port), "-c", "256", "-np", "2", "-t", "1"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(300):
            try:
                if json.loads(request(port, "/health")).get("status") == "ok":
                    break
            except (urllib.error.URLError, ConnectionError, json.JSONDecodeError):
                pass
            time.sleep(0.1)
        props = json.loads(request(port, "/props"))
        out = {"generator": "tests/server/make_llama_refs.py", "llama_server": props.get("build_info"),
               "model": "stories260K-gguf/stories260Ktok512.gguf", "props": props, "completion": [], "tokenize": [],
               "detokenize": []}
        for body in COMPLETIONS:
            out["completion"].append({"body": body, "response": json.loads(request(port, "/completion", body))})
        raw = request(port, "/completion", STREAM)
        events = [json.loads(line[6:]) for line in raw.split("\n") if line.startswith("data: ")]
        out["stream"] = {"body": STREAM, "events": events, "done_marker": "data: [DONE]" in raw}
        for text in TOKENIZE:
            body = {"content": text, "with_pieces": True}
            out["tokenize"].append({"body": body, "response": json.loads(request(port, "/tokenize", body))})
        for ids in DETOKENIZE:
            body = {"tokens": ids}
            out["detokenize"].append({"body": body, "response": json.loads(request(port, "/detokenize", body))})
    finally:
        proc.terminate()
        proc.wait()
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    with open(OUT, "w") as f:
        json.dump(out, f, indent=1, ensure_ascii=False)
        f.write("\n")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
