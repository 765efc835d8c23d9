#!/usr/bin/env bash
# compare.sh — cmf's tokenizer against Hugging Face tokenizers (Rust, through its official Node binding) on the
# same ~10 MB text, for the qwen3, llama3 and mistral tokenizer.json files of the shared data. See RESULTS.md.
#
# Usage (from anywhere):  bash bench/tokenizer/compare.sh
# Environment:
#   BUILD   build directory holding bench/tokenizer/tok_bench (default build-tokbench, configured and built here
#           as Release when missing)
#   SHARED  the shared data folder (default ../shared next to the repository)
#   CORPUS  the text file (default /tmp/tok_bench_corpus.txt, written by make_corpus.mjs when missing)
#   MODE    lines (default: every line its own encode; HF side: one encodeBatch call) or whole (the file as one
#           string, one encode call on each side)
#   ROUNDS  interleaved rounds (default 3): each round runs cmf then HF for every tokenizer
#   RUNS    timed encodes per program run, after one warm-up (default 3); each program reports their median
#   HFJS=1  also time @huggingface/tokenizers (pure JS, transformers.js) once per tokenizer, in the last round
#   TOKREF_DIR  where the npm packages are installed (default /tmp/tokref); created with
#           mkdir -p /tmp/tokref && cd /tmp/tokref && npm init -y && npm install tokenizers@0.23.2 @huggingface/tokenizers@0.2.0
# Both sides single-threaded: cmf_tokenize runs on the calling thread; HF gets RAYON_NUM_THREADS=1 and
# TOKENIZERS_PARALLELISM=false. add_special_tokens is false on both sides.
# Exit status 1 when any run's ids (count or hash) differ between cmf and HF.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${BUILD:-$ROOT/build-tokbench}
SHARED=${SHARED:-$ROOT/../shared}
CORPUS=${CORPUS:-/tmp/tok_bench_corpus.txt}
MODE=${MODE:-lines}
ROUNDS=${ROUNDS:-3}
RUNS=${RUNS:-3}
export TOKREF_DIR=${TOKREF_DIR:-/tmp/tokref}
export RAYON_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false
TOKS="qwen3 llama3 mistral"

if [ ! -d "$TOKREF_DIR/node_modules/tokenizers" ]; then
  echo "compare.sh: $TOKREF_DIR/node_modules/tokenizers missing; install it as described at the top of this file" >&2
  exit 2
fi
if [ ! -x "$BUILD/bench/tokenizer/tok_bench" ]; then
  cmake -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DCMF_CUDA=OFF >/dev/null
  cmake --build "$BUILD" -j2 --target tok_bench >/dev/null
fi
[ -s "$CORPUS" ] || node "$ROOT/bench/tokenizer/make_corpus.mjs" "$SHARED" "$CORPUS"
MODEARG=""
[ "$MODE" = lines ] && MODEARG=--lines

LOG=$(mktemp /tmp/tok_bench_log.XXXXXX)
echo "# corpus $CORPUS ($(wc -c <"$CORPUS") bytes, md5 $(md5sum "$CORPUS" | cut -c1-32)), mode $MODE, rounds $ROUNDS, runs $RUNS" >&2
for r in $(seq 1 "$ROUNDS"); do
  for t in $TOKS; do
    J=$SHARED/data/tokenizers/$t/tokenizer.json
    c=$("$BUILD/bench/tokenizer/tok_bench" "$J" "$CORPUS" --runs "$RUNS" $MODEARG)
    h=$(node "$ROOT/bench/tokenizer/hf_bench.mjs" "$J" "$CORPUS" --runs "$RUNS" $MODEARG)
    echo "round=$r tok=$t $c" | tee -a "$LOG" >&2
    echo "round=$r tok=$t $h" | tee -a "$LOG" >&2
    if [ "$r" = "$ROUNDS" ] && [ "${HFJS:-0}" = 1 ]; then
      j=$(node "$ROOT/bench/tokenizer/hf_bench.mjs" "$J" "$CORPUS" --runs "$RUNS" $MODEARG --impl js)
      echo "round=$r tok=$t $j" | tee -a "$LOG" >&2
    fi
  done
done

# table: medians over rounds of each program's median, ratio = median over rounds of (cmf / HF) in the same round
python3 - "$LOG" "$TOKS" <<'PY'
import sys, statistics as st
rows = [dict(kv.split("=", 1) for kv in l.split()) for l in open(sys.argv[1]) if l.strip()]
bad = 0
print("| tokenizer | ids | ids equal (count, hash) | MB/s cmf | MB/s HF (Rust) | cmf / HF | MB/s HF JS |")
print("|---|---|---|---|---|---|---|")
for t in sys.argv[2].split():
    R = [r for r in rows if r["tok"] == t]
    c = [r for r in R if r["impl"] == "cmf"]; h = [r for r in R if r["impl"] == "hf-rust"]
    j = [r for r in R if r["impl"] == "hf-js"]
    same = all((x["ids"], x["hash"]) == (c[0]["ids"], c[0]["hash"]) for x in c + h + j)
    bad |= not same
    ratios = [float(a["median_mbs"]) / float(b["median_mbs"]) for a, b in zip(c, h)]
    med = lambda v: st.median(float(x["median_mbs"]) for x in v)
    print(f"| {t} | {c[0]['ids']} | {'yes' if same else 'NO'} ({c[0]['hash']}) | {med(c):.2f} | {med(h):.2f} | "
          f"{st.median(ratios):.2f} (min {min(ratios):.2f}, max {max(ratios):.2f}) | {med(j):.2f} |" if j else
          f"| {t} | {c[0]['ids']} | {'yes' if same else 'NO'} ({c[0]['hash']}) | {med(c):.2f} | {med(h):.2f} | "
          f"{st.median(ratios):.2f} (min {min(ratios):.2f}, max {max(ratios):.2f}) | - |")
sys.exit(1 if bad else 0)
PY
