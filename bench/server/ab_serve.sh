#!/usr/bin/env bash
# ab_serve.sh — same-run A/B of `cmf serve` configurations (bench/server/RESULTS.md run 10): for ROUNDS rounds, each
# configuration in turn serves the random 1024x8 Q4_0 model (--parallel 16 -c 256 -t 2) and bench/server/load.py
# measures 1 and 16 streams x 64 tokens (best of 2 rounds); one line per configuration and round: tok/s and their
# ratio. Run it inside `flock /tmp/cmf-cpubench.lock` on a quiet machine.
#
# usage: bench/server/ab_serve.sh ROUNDS "LABEL|ENV|CMF_BINARY" ...   (ENV: one VAR=value, e.g. CMF_SERVE_HOLD_MS=0)
# environment: MODEL (default /tmp/cmf-vs-llama-server/random-q4_0.cmf: compare_llama_server.sh makes it)
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
M=${MODEL:-/tmp/cmf-vs-llama-server/random-q4_0.cmf}
[ $# -ge 2 ] || { sed -n '2,9p' "$0"; exit 2; }
R=$1; shift
for round in $(seq 1 "$R"); do
    for cfg in "$@"; do
        IFS='|' read -r label envs bin <<<"$cfg"
        port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
        env $envs "$bin" serve "$M" --port "$port" --parallel 16 -c 256 -t 2 >/dev/null 2>&1 &
        pid=$!
        for _ in $(seq 1 300); do curl -sf "http://127.0.0.1:$port/health" >/dev/null 2>&1 && break; sleep 0.1; done
        python3 "$ROOT/bench/server/load.py" "http://127.0.0.1:$port" 2 8 1 >/dev/null 2>&1 # warm-up
        l=$(cut -d' ' -f1-3 /proc/loadavg)
        a=$(python3 "$ROOT/bench/server/load.py" "http://127.0.0.1:$port" 1 64 2 2>/dev/null |
            python3 -c 'import json,sys; print(json.load(sys.stdin)["tok_s"])')
        b=$(python3 "$ROOT/bench/server/load.py" "http://127.0.0.1:$port" 16 64 2 2>/dev/null |
            python3 -c 'import json,sys; print(json.load(sys.stdin)["tok_s"])')
        kill "$pid"; wait "$pid" 2>/dev/null
        echo "$(date -u +%T) load $l | $label | 1: $a | 16: $b | ratio $(python3 -c "print(f'{$b/$a:.2f}')")"
    done
done
