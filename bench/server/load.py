#!/usr/bin/env python3
"""load.py — aggregate decode throughput of an OpenAI-compatible server (cmf serve or llama-server).

usage: load.py URL STREAMS TOKENS [ROUNDS] [TEMPERATURE]
Starts STREAMS concurrent streaming POST /v1/completions requests (prompt "Once upon a time <i>, ...", greedy
unless TEMPERATURE > 0 is given (then seed <i>, no other sampling fields: the server's defaults),
max_tokens TOKENS, stream_options.include_usage), each on its own connection, ROUNDS times (default 2; the best
round is kept), and prints one JSON line: streams, tokens (completion tokens summed over the streams, from the usage
chunk, else the number of content chunks), seconds (first request sent -> last stream finished) and tok_s (tokens /
seconds), plus the errors count. Against `cmf serve` it also reads /metrics before and after the rounds and adds
"sched": the scheduler's split of the rounds' time (seconds in cmf_batch_run, sampling, detokenizing + queueing
events; idle seconds also count the gaps around the rounds and up to 0.2 s of a wait begun before them), forward passes, tokens per forward and the decode-only passes (null for other servers).
Only the Python standard library is used."""
import http.client
import json
import sys
import threading
import time
from urllib.parse import urlparse


def one(host, port, idx, tokens, out, temperature=0.0):
    req = {"prompt": f"Once upon a time {idx}, there was", "temperature": temperature, "max_tokens": tokens,
           "stream": True, "stream_options": {"include_usage": True}}
    if temperature > 0:
        req["seed"] = idx
    body = json.dumps(req)
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


def round_(host, port, streams, tokens, temperature):
    out = [None] * streams
    th = [threading.Thread(target=one, args=(host, port, i, tokens, out, temperature)) for i in range(streams)]
    t0 = time.monotonic()
    for t in th:
        t.start()
    for t in th:
        t.join()
    dt = time.monotonic() - t0
    return sum(o[0] for o in out), dt, [o[1] for o in out if o[1]]


def cmf_metrics(host, port):
    """The cmf serve counters this script reports, or None when the server has no such /metrics."""
    try:
        c = http.client.HTTPConnection(host, port, timeout=10)
        c.request("GET", "/metrics")
        r = c.getresponse()
        text = r.read().decode("utf-8", "replace")
    except Exception:
        return None
    if r.status != 200 or "cmf_scheduler_seconds_total" not in text:
        return None
    m = {}
    for line in text.splitlines():
        if line.startswith("#") or " " not in line:
            continue
        name, v = line.rsplit(" ", 1)
        try:
            m[name] = float(v)
        except ValueError:
            pass
    return m


def sched_split(a, b, wall):
    if a is None or b is None:
        return None
    d = {k: b.get(k, 0) - a.get(k, 0) for k in b}
    steps = d.get("cmf_batch_steps_total", 0)
    ph = lambda p: d.get('cmf_scheduler_seconds_total{phase="%s"}' % p, 0)
    return {"wall_s": round(wall, 3), "forward_s": round(ph("forward"), 3), "sample_s": round(ph("sample"), 3),
            "emit_s": round(ph("emit"), 3),
            "idle_s": round(ph("idle"), 3), "forwards": int(steps),
            "tokens_per_forward": round(d.get("cmf_batch_tokens_total", 0) / steps, 2) if steps else None,
            "decode_forwards": int(d.get("cmf_decode_steps_total", 0)),
            "tokens_per_decode_forward": round(d.get("cmf_decode_step_tokens_total", 0) /
                                               d["cmf_decode_steps_total"], 2)
            if d.get("cmf_decode_steps_total") else None}


def main():
    url, streams, tokens = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    rounds = int(sys.argv[4]) if len(sys.argv) > 4 else 2
    temperature = float(sys.argv[5]) if len(sys.argv) > 5 else 0.0
    u = urlparse(url)
    best = None
    errors = []
    m0, wall = cmf_metrics(u.hostname, u.port), 0.0
    for _ in range(rounds):
        n, dt, err = round_(u.hostname, u.port, streams, tokens, temperature)
        wall += dt
        errors += err
        if best is None or n / dt > best[0] / best[1]:
            best = (n, dt)
    m1 = cmf_metrics(u.hostname, u.port) if m0 is not None else None
    sched = sched_split(m0, m1, wall)
    if sched:  # a summary on stderr (stdout stays one JSON line)
        w = sched["wall_s"] or 1.0
        print(f"load.py: cmf {streams} stream(s): {sched['tokens_per_forward']} tokens per forward, "
              f"{sched['tokens_per_decode_forward']} per decode-only forward; scheduler: forward "
              f"{sched['forward_s'] / w:.1%}, sampling {sched['sample_s'] / w:.1%}, detokenizing+events "
              f"{sched['emit_s'] / w:.1%} of the rounds' wall time", file=sys.stderr)
    print(json.dumps({"streams": streams, "tokens": best[0], "seconds": round(best[1], 3),
                      "tok_s": round(best[0] / best[1], 1), "errors": len(errors),
                      "first_error": errors[0] if errors else None, "sched": sched}))


if __name__ == "__main__":
    main()
