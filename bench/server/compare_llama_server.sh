#!/usr/bin/env bash
# compare_llama_server.sh — `cmf serve` vs llama.cpp's llama-server on the same weights, same machine, same
# threads, in one run: aggregate decode tokens/s with 1, 4 and 16 concurrent streaming clients (bench/server/load.py:
# greedy /v1/completions, short distinct prompts, N new tokens each, best of 2 rounds), both servers started with
# 16 slots (--parallel 16) and 256 positions per slot. Models: stories260K (the shared GGUF, F32; cmf converts it)
# and, unless --no-random, a random-weight llama GGUF (bench/make_random_gguf.py: Q4_0, hidden 1024, 8 layers, vocab
# 32000, Llama 2's tokenizer; cmf converts the Q4_0 blocks to its q4_block).
#
# usage: bench/server/compare_llama_server.sh [-t THREADS] [-n TOKENS] [--no-random]
# environment:
#   LLAMA_BIN  (required) folder with llama-server (built by you, outside this repository, e.g.
#              cmake -S llama.cpp -B build -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_UI=OFF; cmake --build build
#              --target llama-server)
#   CMF_BIN    the cmf binary (default: a Release build made in $WORK/build)
#   CMF_BEFORE another cmf binary (optional; e.g. a Release build of a git archive of the commit before a change):
#              measured in the same run, right before CMF_BIN, as a "cmf serve (before)" row, with before/after and
#              after/llama-server ratio rows: the before/after form of bench/server/RESULTS.md
#   LOAD_ARGS  extra arguments of load.py (--threads: the client of runs 1-7, one Python thread per stream and a
#              json.loads per event; default: load.py's one-thread client)
#   WORK       models, build and logs (default /tmp/cmf-vs-llama-server); nothing is written to the repository
# Prints a markdown table on stdout (bench/server/RESULTS.md holds a copy of one run); on stderr load.py adds cmf's
# scheduler split per concurrency from /metrics (tokens per forward; forward / sampling / events shares).
set -euo pipefail
THREADS=$(nproc); N=64; RANDOM_MODEL=1
while [ $# -gt 0 ]; do
    case "$1" in
    -t) THREADS=$2; shift 2 ;;
    -n) N=$2; shift 2 ;;
    --no-random) RANDOM_MODEL=0; shift ;;
    -h | --help) sed -n '2,25p' "$0"; exit 0 ;;
    *) echo "compare_llama_server.sh: unknown argument '$1'" >&2; exit 2 ;;
    esac
done
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
SHARED=${CMF_SHARED:-$ROOT/../shared}
WORK=${WORK:-/tmp/cmf-vs-llama-server}
mkdir -p "$WORK"
LS=${LLAMA_BIN:-}/llama-server
[ -x "$LS" ] || { echo "compare: set LLAMA_BIN to a folder with llama-server" >&2; exit 2; }
log() { echo "compare: $*" >&2; }
if [ -z "${CMF_BIN:-}" ]; then
    log "building cmf (Release) in $WORK/build"
    cmake -S "$ROOT" -B "$WORK/build" -DCMAKE_BUILD_TYPE=Release -DCMF_CUDA=OFF >/dev/null
    cmake --build "$WORK/build" -j2 --target cmf-cli >/dev/null
    CMF_BIN=$WORK/build/cmf
fi
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; }
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_up() { for _ in $(seq 1 300); do curl -sf "http://127.0.0.1:$1/health" >/dev/null 2>&1 && return 0; sleep 0.2; done; return 1; }

# run_side NAME PORT -> one table cell per concurrency, into $row
bench_side() {
    local port=$1 out=""
    for c in 1 4 16; do
        local j
        j=$(python3 "$ROOT/bench/server/load.py" ${LOAD_ARGS:-} "http://127.0.0.1:$port" "$c" "$N" 2)
        echo "$j" >>"$WORK/load.jsonl"
        out="$out $(python3 -c 'import json,sys; j=json.loads(sys.argv[1]); print(j["tok_s"], j["errors"])' "$j")"
    done
    echo "$out"
}

models=("stories260K|$SHARED/data/models/stories260K-gguf/stories260Ktok512.gguf")
if [ "$RANDOM_MODEL" = 1 ]; then
    [ -f "$WORK/random-q4_0.gguf" ] || python3 "$ROOT/bench/make_random_gguf.py" "$WORK/random-q4_0.gguf" --type q4_0 \
        --tokenizer "$SHARED/data/tokenizers/llama2-sentencepiece/tokenizer.bin" >/dev/null
    models+=("random 1024x8 Q4_0|$WORK/random-q4_0.gguf")
fi
echo "| model | server | 1 stream tok/s | 4 streams tok/s | 16 streams tok/s | 16 / 1 | errors |"
echo "|---|---|---:|---:|---:|---:|---:|"
for m in "${models[@]}"; do
    name=${m%%|*}; gguf=${m#*|}
    cmfm="$WORK/$(basename "$gguf" .gguf).cmf"
    [ -f "$cmfm" ] || "$CMF_BIN" convert "$gguf" -o "$cmfm" --no-progress >/dev/null
    declare -A res=()
    sides="cmf llama"
    [ -n "${CMF_BEFORE:-}" ] && sides="before cmf llama"
    for side in $sides; do
        port=$(free_port)
        if [ $side = cmf ] || [ $side = before ]; then
            bin=$CMF_BIN
            [ $side = before ] && bin=$CMF_BEFORE
            "$bin" serve "$cmfm" --port "$port" --parallel 16 -c 256 -t "$THREADS" >"$WORK/$side.log" 2>&1 &
        else
            "$LS" -m "$gguf" --port "$port" --parallel 16 -c $((16 * 256)) -t "$THREADS" -tb "$THREADS" \
                --no-warmup >"$WORK/$side.log" 2>&1 &
        fi
        pid=$!; pids+=("$pid")
        wait_up "$port" || { log "$side did not start (see $WORK/$side.log)"; exit 1; }
        python3 "$ROOT/bench/server/load.py" ${LOAD_ARGS:-} "http://127.0.0.1:$port" 2 8 1 >/dev/null # warm-up
        res[$side]=$(bench_side "$port")
        kill "$pid"; wait "$pid" 2>/dev/null || true
    done
    for side in $sides; do
        read -r t1 e1 t4 e4 t16 e16 <<<"${res[$side]}"
        case $side in cmf) label="cmf serve" ;; before) label="cmf serve (before)" ;; *) label="llama-server" ;; esac
        echo "| $name | $label | $t1 | $t4 | $t16 | $(python3 -c "print(f'{$t16/$t1:.1f}x')") | $((e1 + e4 + e16)) |"
    done
    read -r c1 _ c4 _ c16 _ <<<"${res[cmf]}"
    read -r l1 _ l4 _ l16 _ <<<"${res[llama]}"
    echo "| $name | cmf / llama-server | $(python3 -c "print(f'{$c1/$l1:.2f}')") | $(python3 -c "print(f'{$c4/$l4:.2f}')") | $(python3 -c "print(f'{$c16/$l16:.2f}')") | | |"
    if [ -n "${CMF_BEFORE:-}" ]; then
        read -r b1 _ b4 _ b16 _ <<<"${res[before]}"
        echo "| $name | cmf after / before | $(python3 -c "print(f'{$c1/$b1:.2f}')") | $(python3 -c "print(f'{$c4/$b4:.2f}')") | $(python3 -c "print(f'{$c16/$b16:.2f}')") | | |"
    fi
    unset res
done
