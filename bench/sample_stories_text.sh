#!/usr/bin/env bash
# sample_stories_text.sh — writes a text sampled from stories260K itself, for the perplexity comparison of
# bench/ppl_stories.sh (a text from the model's own distribution, so perplexity measures quantization damage,
# not domain mismatch).
#
# usage: bench/sample_stories_text.sh CMF_BIN MODEL_F32.cmf OUT.txt [MIN_TOKENS=5000]
# Each story: `cmf run MODEL --tokens 1 --temp 1 --top-k 0 --top-p 1 --seed S -t 1` (BOS only, plain sampling
# at temperature 1, no truncation, the model's trained context of 128 tokens), seeds S = 1, 2, ... until at
# least MIN_TOKENS tokens were generated; stories separated by a blank line. Deterministic for a given cmf build.
set -euo pipefail
CMF=$1; MODEL=$2; OUT=$3; MIN=${4:-5000}
: >"$OUT"
total=0; seed=0
while [ "$total" -lt "$MIN" ]; do
    seed=$((seed + 1))
    "$CMF" run "$MODEL" --tokens 1 --temp 1 --top-k 0 --top-p 1 --seed "$seed" -t 1 >>"$OUT" 2>"$OUT.err"
    n=$(sed -n 's/.*decode: \([0-9]*\) tokens.*/\1/p' "$OUT.err")
    total=$((total + n))
    printf '\n\n' >>"$OUT"
done
rm -f "$OUT.err"
echo "sample_stories_text: $seed stories, $total generated tokens -> $OUT" >&2
