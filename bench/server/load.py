#!/usr/bin/env python3
"""load.py — aggregate decode throughput of an OpenAI-compatible server (cmf serve or llama-server).

usage: load.py [--threads] URL STREAMS TOKENS [ROUNDS] [TEMPERATURE]
Starts STREAMS concurrent streaming POST /v1/completions requests (prompt "Once upon a time <i>, ...", greedy
unless TEMPERATURE > 0 is given (then seed <i>, no other sampling fields: the server's defaults),
max_tokens TOKENS, stream_options.include_usage), each on its own connection, ROUNDS times (default 2; the best
round is kept), and prints one JSON line: streams, tokens (completion tokens summed over the streams, from the usage
chunk, else the number of content chunks), seconds (first request sent -> last stream finished) and tok_s (tokens /
seconds), plus the errors count. Against `cmf serve` it also reads /metrics before and after the rounds and adds
"sched": the scheduler's split of the rounds' time (seconds in cmf_batch_run, sampling, detokenizing + queueing
events; idle seconds also count the gaps around the rounds and up to 0.2 s of a wait begun before them), forward passes, tokens per forward and the decode-only passes (null for other servers).
Only the Python standard library is used.

Client: by default ONE thread drives all streams (selectors, non-blocking sockets, HTTP/1.1 with chunked or
length-delimited bodies decoded by hand) and parses JSON only for the usage chunk, so the client's own CPU per
streamed token stays small: it runs on the same cores as the server under test. --threads selects the client of
runs 1-7 in bench/server/RESULTS.md (one Python thread per stream, http.client, json.loads of every event: ~0.1 ms
of CPU per event on the 2-core VM, ~2 ms per 16-token step taken from the server's cores)."""
import http.client
import json
import selectors
import socket
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


def request_bytes(host, port, idx, tokens, temperature):
    req = {"prompt": f"Once upon a time {idx}, there was", "temperature": temperature, "max_tokens": tokens,
           "stream": True, "stream_options": {"include_usage": True}}
    if temperature > 0:
        req["seed"] = idx
    body = json.dumps(req).encode()
    head = (f"POST /v1/completions HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode()
    return head + body


class Stream:
    """One streaming request on a non-blocking socket: the response head, then the body (chunked, with a
    Content-Length, or up to the close), split into SSE events."""

    def __init__(self, host, port, idx, tokens, temperature):
        self.out = request_bytes(host, port, idx, tokens, temperature)
        self.sock = socket.create_connection((host, port), timeout=600)
        self.sock.setblocking(False)
        self.raw = b""      # bytes received, not yet decoded
        self.body = b""     # decoded body bytes not yet split into events
        self.head = None    # None until the response head is read
        self.chunked, self.left = False, None  # chunked body / bytes left of a Content-Length body
        self.usage, self.n_chunks, self.error, self.finished = None, 0, None, False

    def on_head(self):
        end = self.raw.find(b"\r\n\r\n")
        if end < 0:
            return False
        lines = self.raw[:end].decode("latin-1").split("\r\n")
        self.raw = self.raw[end + 4:]
        parts = lines[0].split(" ", 2)
        if len(parts) < 2 or parts[1] != "200":
            self.error = f"status {parts[1] if len(parts) > 1 else lines[0]}"
        for h in lines[1:]:
            k, _, v = h.partition(":")
            k, v = k.strip().lower(), v.strip().lower()
            if k == "transfer-encoding" and "chunked" in v:
                self.chunked = True
            elif k == "content-length":
                self.left = int(v)
        self.head = lines
        return True

    def decode(self):
        if not self.chunked:
            self.body += self.raw
            if self.left is not None:
                self.left -= len(self.raw)
                if self.left <= 0:
                    self.finished = True
            self.raw = b""
            return
        while True:  # chunk-size line, data, CRLF
            nl = self.raw.find(b"\r\n")
            if nl < 0:
                return
            size = int(self.raw[:nl].split(b";")[0], 16)
            if size == 0:
                self.finished = True
                self.raw = b""
                return
            if len(self.raw) < nl + 2 + size + 2:
                return
            self.body += self.raw[nl + 2:nl + 2 + size]
            self.raw = self.raw[nl + 4 + size:]

    def events(self):
        while True:
            end = self.body.find(b"\n\n")
            if end < 0:
                return
            ev, self.body = self.body[:end].strip(), self.body[end + 2:]
            if not ev.startswith(b"data: ") or ev == b"data: [DONE]":
                continue
            if b'"usage"' in ev:
                j = json.loads(ev[6:])
                if j.get("usage"):
                    self.usage = j["usage"].get("completion_tokens")
                    continue
            if b'"text":' in ev and b'"text":""' not in ev and b'"text": ""' not in ev:
                self.n_chunks += 1

    def feed(self, data):
        """New bytes (b"" at EOF). Returns True when the stream is over."""
        if not data:
            self.finished = True
        self.raw += data
        if self.head is None and not self.on_head():
            return self.finished
        self.decode()
        self.events()
        return self.finished

    def result(self):
        if self.error:
            return 0, self.error
        return (self.usage if self.usage is not None else self.n_chunks), None


def round_one_thread(host, port, streams, tokens, temperature):
    sel = selectors.DefaultSelector()
    t0 = time.monotonic()
    ss = []
    for i in range(streams):
        try:
            st = Stream(host, port, i, tokens, temperature)
        except OSError as e:
            ss.append((None, str(e)))
            continue
        ss.append((st, None))
        sel.register(st.sock, selectors.EVENT_WRITE, st)
    live = sum(1 for st, _ in ss if st)
    while live:
        for key, mask in sel.select(timeout=600):
            st = key.data
            try:
                if mask & selectors.EVENT_WRITE:
                    n = st.sock.send(st.out)
                    st.out = st.out[n:]
                    if not st.out:
                        sel.modify(st.sock, selectors.EVENT_READ, st)
                    continue
                done = st.feed(st.sock.recv(65536))
            except (OSError, ValueError) as e:
                st.error, done = str(e), True
            if done:
                sel.unregister(st.sock)
                st.sock.close()
                live -= 1
    dt = time.monotonic() - t0
    out = [st.result() if st else (0, err) for st, err in ss]
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
    args = [a for a in sys.argv[1:] if a != "--threads"]
    run_round = round_ if "--threads" in sys.argv[1:] else round_one_thread
    url, streams, tokens = args[0], int(args[1]), int(args[2])
    rounds = int(args[3]) if len(args) > 3 else 2
    temperature = float(args[4]) if len(args) > 4 else 0.0
    u = urlparse(url)
    best = None
    errors = []
    m0, wall = cmf_metrics(u.hostname, u.port), 0.0
    for _ in range(rounds):
        n, dt, err = run_round(u.hostname, u.port, streams, tokens, temperature)
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
