#!/usr/bin/env bash
# ppl_stories.sh — quantization quality on a real trained model: perplexity of stories260K (the shared GGUF, F32)
# and its cmf quantizations on a text the model sampled itself, next to llama.cpp's Q4_0 of the same model.
#
# usage: LLAMA_BIN=/path/to/llama.cpp/build/bin bench/ppl_stories.sh [CMF_BIN] [TEXT]
#   CMF_BIN  a cmf binary (default build-quant3-rel/cmf); TEXT default bench/stories260K-sampled.txt, made by
#            `bench/sample_stories_text.sh CMF_BIN stories260K-f32.cmf bench/stories260K-sampled.txt 5000`
#   LLAMA_BIN a folder with llama.cpp's llama-perplexity (optional: without it only the cmf rows are printed)
#   WORK     scratch folder (default /tmp/cmf-ppl-stories)
# Models: f32 = `cmf convert GGUF --quant f32`; q8/q4/q4t/q4tp = `cmf convert GGUF --quant X` (the default encoders:
# error-searched 4-bit scales, src/quant/quantize.c, tiledp.c), and q4/q4t/q4tp again with CMF_Q4_SEARCH=0 (cortiq's
# encoders, byte-identical to the reference converter); q4_0.gguf =
# bench/gguf_to_q4_0.py (all matrices Q4_0, as `llama-quantize --pure ... Q4_0`), run by llama-perplexity and, via
# `cmf convert` (lossless Q4_0 -> q4_tiled repack), by cmf ppl. Window 128 tokens (-c 128, llama.cpp -b 128),
# second half of each window scored (llama-perplexity's method, which cmf ppl follows). 2 threads.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
SHARED=${CMF_SHARED:-$ROOT/../shared}
CMF=${1:-$ROOT/build-quant3-rel/cmf}
TEXT=${2:-$ROOT/bench/stories260K-sampled.txt}
WORK=${WORK:-/tmp/cmf-ppl-stories}
mkdir -p "$WORK"
GGUF=$SHARED/data/models/stories260K-gguf/stories260Ktok512.gguf
python3 "$ROOT/bench/gguf_to_q4_0.py" "$GGUF" "$WORK/q4_0.gguf"
for q in f32 q8 q4 q4t q4tp; do
    "$CMF" convert "$GGUF" -o "$WORK/$q.cmf" --quant "$q" --no-progress 2>/dev/null
done
for q in q4 q4t q4tp; do
    CMF_Q4_SEARCH=0 "$CMF" convert "$GGUF" -o "$WORK/$q-cortiq.cmf" --quant "$q" --no-progress 2>/dev/null
done
"$CMF" convert "$WORK/q4_0.gguf" -o "$WORK/q4_0.cmf" --no-progress 2>/dev/null
cppl() { # model -> "PPL ± err" (also keeps the log)
    "$CMF" ppl "$WORK/$1.cmf" -f "$TEXT" -c 128 -t 2 >"$WORK/$1.cmf-ppl.out" 2>&1
    sed -n 's/.*: PPL = \([0-9.]*\) +\/- \([0-9.]*\).*/\1 ± \2/p' "$WORK/$1.cmf-ppl.out"
}
lppl() { # gguf -> "PPL ± err"
    [ -n "${LLAMA_BIN:-}" ] || { echo "n/a"; return; }
    "$LLAMA_BIN/llama-perplexity" -m "$1" -f "$TEXT" -c 128 -b 128 -t 2 >"$WORK/$(basename "$1").llama-ppl.out" 2>&1 || true
    sed -n 's/.*Final estimate: PPL = \([0-9.]*\) +\/- \([0-9.]*\).*/\1 ± \2/p' "$WORK/$(basename "$1").llama-ppl.out"
}
base=$(cppl f32)
echo "text: $TEXT ($(sed -n 's/.*(\([0-9]*\) predictions).*/\1 scored predictions/p' "$WORK/f32.cmf-ppl.out"), windows of 128)"
echo
echo "| runtime | weights | PPL | vs cmf f32 |"
echo "| --- | --- | ---: | ---: |"
row() { echo "| $1 | $2 | $3 | $(awk -v a="${3%% *}" -v b="${base%% *}" 'BEGIN{ if (a > 0 && b > 0) printf "%+.3f%%", 100 * (a / b - 1); else print "n/a" }') |"; }
row cmf "f32 (GGUF F32)" "$base"
for q in q8 q4 q4t q4tp; do row cmf "$q" "$(cppl $q)"; done
for q in q4 q4t q4tp; do row cmf "$q, CMF_Q4_SEARCH=0 (cortiq's encoder)" "$(cppl $q-cortiq)"; done
row cmf "q4_tiled from q4_0.gguf (lossless repack)" "$(cppl q4_0)"
row llama.cpp "F32 GGUF" "$(lppl "$GGUF")"
row llama.cpp "Q4_0 GGUF (gguf_to_q4_0.py)" "$(lppl "$WORK/q4_0.gguf")"
