#!/usr/bin/env python3
"""load.py — aggregate decode throughput of an OpenAI-compatible server (cmf serve or llama-server).

usage: load.py URL STREAMS TOKENS [ROUNDS]
Starts STREAMS concurrent streaming POST /v1/completions requests (prompt "Once upon a time <i>, ...", greedy,
max_tokens TOKENS, stream_options.include_usage), each on its own connection, ROUNDS times (default 2; the best
round is kept), and prints one JSON line: streams, tokens (completion tokens summed over the streams, from the usage
chunk, else the number of content chunks), seconds (first request sent -> last stream finished) and tok_s (tokens /
seconds), plus the errors count. Only the Python standard library is used."""
import http.client
import json
import sys
import threading
import time
from urllib.parse import urlparse


def one(host, port, idx, tokens, out):
    body = json.dumps({"prompt": f"Once upon a time {idx}, there was", "temperature": 0, "max_tokens": tokens,
                       "stream": True, "stream_options": {"include_usage": True}})
    try:
        c = http.client.HTTPConnection(host, port, timeout=600)
        c.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
        r = c.getresponse()
        if r.status != 200:
            out[idx] = (0, f"status {r.status}")
            return
        n_chunks, usage = 0, None
        for line in r:
            line = line.strip()
            if not line.startswith(b"data: ") or line == b"data: [DONE]":
                continue
            j = json.loads(line[6:])
            if j.get("usage"):
                usage = j["usage"].get("completion_tokens")
            for ch in j.get("choices") or []:
                if ch.get("text"):
                    n_chunks += 1
        out[idx] = (usage if usage is not None else n_chunks, None)
    except Exception as e:  # reported, counted as an error
        out[idx] = (0, str(e))


def round_(host, port, streams, tokens):
    out = [None] * streams
    th = [threading.Thread(target=one, args=(host, port, i, tokens, out)) for i in range(streams)]
    t0 = time.monotonic()
    for t in th:
        t.start()
    for t in th:
        t.join()
    dt = time.monotonic() - t0
    return sum(o[0] for o in out), dt, [o[1] for o in out if o[1]]


def main():
    url, streams, tokens = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    rounds = int(sys.argv[4]) if len(sys.argv) > 4 else 2
    u = urlparse(url)
    best = None
    errors = []
    for _ in range(rounds):
        n, dt, err = round_(u.hostname, u.port, streams, tokens)
        errors += err
        if best is None or n / dt > best[0] / best[1]:
            best = (n, dt)
    print(json.dumps({"streams": streams, "tokens": best[0], "seconds": round(best[1], 3),
                      "tok_s": round(best[0] / best[1], 1), "errors": len(errors),
                      "first_error": errors[0] if errors else None}))


if __name__ == "__main__":
    main()
