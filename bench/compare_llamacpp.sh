#!/usr/bin/env bash
# compare_llamacpp.sh — cmf vs llama.cpp on the very same weights, on this machine, in one run:
#   speed:      llama-bench  vs `cmf bench`  (ppP and tgN, same threads, same repetitions; ratio cmf / llama.cpp)
#   perplexity: llama-perplexity vs `cmf ppl` (same text, same window, llama.cpp's method on both sides)
# Models: stories260K (the shared GGUF, F32) and random-weight llama GGUFs written by make_random_gguf.py (F16 and
# Q4_0; hidden 1024, 8 layers, vocab 32000 with Llama 2's tokenizer), each converted by `cmf convert` (F16 kept
# as f16, Q4_0 repacked losslessly as q4_tiled, F32 kept as f32).
#
# usage: bench/compare_llamacpp.sh [-t THREADS] [-r REPS] [-p 512] [-n 128]
# environment:
#   LLAMA_BIN     (required) a folder holding llama.cpp's llama-bench and llama-perplexity, built by you (CPU;
#                 the numbers in bench/RESULTS.md used upstream ggml-org/llama.cpp 0253fb21f, Release, native)
#   WORK          models, the cmf Release build and logs (default /tmp/llamacpp-vs-cmf); nothing is written to the repo
# Everything is printed as markdown on stdout (bench/RESULTS.md holds a copy of one run).
set -euo pipefail

THREADS=$(nproc); REPS=5; P=512; N=128
while [ $# -gt 0 ]; do
    case "$1" in
    -t) THREADS=$2; shift 2 ;;
    -r) REPS=$2; shift 2 ;;
    -p) P=$2; shift 2 ;;
    -n) N=$2; shift 2 ;;
    -h | --help) sed -n '2,20p' "$0"; exit 0 ;;
    *) echo "compare_llamacpp.sh: unknown argument '$1'" >&2; exit 2 ;;
    esac
done

ROOT=$(cd "$(dirname "$0")/.." && pwd)
SHARED=${CMF_SHARED:-$ROOT/../shared}
LLAMA_BIN=${LLAMA_BIN:-}
WORK=${WORK:-/tmp/llamacpp-vs-cmf}
mkdir -p "$WORK"
log() { echo "compare: $*" >&2; }
trap 'echo "compare: failed at line $LINENO (logs in $WORK)" >&2' ERR

# --- llama.cpp: the user's own build (this repository neither ships nor builds it) ---------------------------------
LB=$LLAMA_BIN/llama-bench
LP=$LLAMA_BIN/llama-perplexity
[ -x "$LB" ] && [ -x "$LP" ] || { echo "compare: set LLAMA_BIN to a folder with llama-bench and llama-perplexity" >&2; exit 2; }

# --- cmf, Release, from the committed HEAD (a work tree with colleagues' half-done files need not configure) ---------
CMF_REV=$(git -C "$ROOT" rev-parse --short HEAD)
log "building cmf $CMF_REV (Release, -march=native) in $WORK/build-cmf"
rm -rf "$WORK/cmf-src" && mkdir -p "$WORK/cmf-src"
git -C "$ROOT" archive HEAD | tar -x -C "$WORK/cmf-src"
rm -f "$WORK/build-cmf/CMakeCache.txt"
cmake -S "$WORK/cmf-src" -B "$WORK/build-cmf" -DCMAKE_BUILD_TYPE=Release -DCMF_NATIVE=ON \
    -DCMF_WERROR=OFF -DCMF_SHARED_DIR="$SHARED" >"$WORK/cmf-cmake.log" 2>&1
cmake --build "$WORK/build-cmf" -j"$(nproc)" --target cmf-cli >"$WORK/cmf-build.log" 2>&1
CMF=$WORK/build-cmf/cmf

# --- models ---------------------------------------------------------------------------------------------------------
TOK=$SHARED/data/tokenizers/llama2-sentencepiece/tokenizer.bin
cp "$SHARED/data/models/stories260K-gguf/stories260Ktok512.gguf" "$WORK/stories260K.gguf"
for t in f16 q4_0; do
    [ -f "$WORK/random-$t.gguf" ] || python3 "$ROOT/bench/make_random_gguf.py" "$WORK/random-$t.gguf" --type "$t" \
        --tokenizer "$TOK" >&2
done
"$CMF" convert "$WORK/stories260K.gguf" -o "$WORK/stories260K.cmf" --quant f32 --no-progress 2>/dev/null
"$CMF" convert "$WORK/random-f16.gguf" -o "$WORK/random-f16.cmf" --quant f16 --no-progress 2>/dev/null
"$CMF" convert "$WORK/random-q4_0.gguf" -o "$WORK/random-q4_0.cmf" --no-progress 2>/dev/null

# --- text for perplexity --------------------------------------------------------------------------------------------
cat "$SHARED/data/models/stories260K/stories260K.md" >"$WORK/text.txt"
for f in "$SHARED"/data/tokenizer-vectors/ggml-vocab-llama-spm.gguf.inp; do
    grep -v '^__ggml_vocab_test__$' "$f" >>"$WORK/text.txt"
done

# --- speed -----------------------------------------------------------------------------------------------------------
echo "## Speed: llama-bench vs cmf bench (threads $THREADS, $REPS repetitions, t/s mean ± stddev)"
echo
echo "cmf CPU path: $("$CMF" bench "$WORK/stories260K.cmf" -p 1 -n 0 -r 1 | sed -n 's/^cpu path: //p')"
echo
echo "| model | file | test | llama.cpp t/s | cmf t/s | cmf / llama.cpp |"
echo "| --- | --- | --- | ---: | ---: | ---: |"
for m in stories260K random-f16 random-q4_0; do
    log "bench $m"
    "$LB" -m "$WORK/$m.gguf" -p "$P" -n "$N" -r "$REPS" -t "$THREADS" -o json >"$WORK/$m.llama-bench.json" 2>"$WORK/$m.llama-bench.err"
    "$CMF" bench "$WORK/$m.cmf" -p "$P" -n "$N" -r "$REPS" -t "$THREADS" --json >"$WORK/$m.cmf-bench.json"
    python3 - "$m" "$WORK/$m.llama-bench.json" "$WORK/$m.cmf-bench.json" <<'EOF'
import json, sys
name, lj, cj = sys.argv[1], json.load(open(sys.argv[2])), json.load(open(sys.argv[3]))
def key(o):
    return ("pp%d" % o["n_prompt"]) if o["n_prompt"] else ("tg%d" % o["n_gen"])
cm = {key(o): o for o in cj}
for o in lj:
    k = key(o)
    c = cm.get(k)
    if not c:
        continue
    print("| %s | %s | %s | %.2f ± %.2f | %.2f ± %.2f | %.3f |" % (name, o.get("model_type", "?"), k, o["avg_ts"],
          o["stddev_ts"], c["avg_ts"], c["stddev_ts"], c["avg_ts"] / o["avg_ts"]))
EOF
done

# --- perplexity ------------------------------------------------------------------------------------------------------
echo
echo "## Perplexity: llama-perplexity vs cmf ppl (same text, same window, second half of each window scored)"
echo
echo "| model | window | llama.cpp PPL | cmf PPL | cmf / llama.cpp |"
echo "| --- | ---: | ---: | ---: | ---: |"
for m in stories260K random-f16 random-q4_0; do
    C=128
    log "perplexity $m"
    "$LP" -m "$WORK/$m.gguf" -f "$WORK/text.txt" -c $C -b $C -t "$THREADS" >"$WORK/$m.llama-ppl.out" 2>&1 || true
    "$CMF" ppl "$WORK/$m.cmf" -f "$WORK/text.txt" -c $C -t "$THREADS" >"$WORK/$m.cmf-ppl.out" 2>"$WORK/$m.cmf-ppl.err" || true
    lp=$(sed -n 's/.*Final estimate: PPL = \([0-9.]*\) +\/- \([0-9.]*\).*/\1 ± \2/p' "$WORK/$m.llama-ppl.out")
    cp=$(sed -n 's/.*: PPL = \([0-9.]*\) +\/- \([0-9.]*\).*/\1 ± \2/p' "$WORK/$m.cmf-ppl.out")
    lw=$(grep -o 'calculating perplexity over [0-9]* chunks' "$WORK/$m.llama-ppl.out" | grep -o '[0-9]*' || true)
    cw=$(sed -n 's/.*tokens, \([0-9]*\) window(s).*/\1/p' "$WORK/$m.cmf-ppl.out")
    ratio=$(awk -v a="${cp%% *}" -v b="${lp%% *}" 'BEGIN{ if (a > 0 && b > 0) printf "%.4f", a / b; else print "n/a" }')
    echo "| $m | $C (llama.cpp ${lw:-?} chunks, cmf ${cw:-?} windows) | ${lp:-failed} | ${cp:-failed} | $ratio |"
done
echo
echo "Machine: $(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //'), $(nproc) CPUs online; llama.cpp $("$LB" --version 2>&1 | head -1);" \
    "cmf $CMF_REV (committed HEAD)"
