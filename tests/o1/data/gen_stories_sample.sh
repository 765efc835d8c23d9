#!/usr/bin/env bash
# Regenerates tests/o1/data/stories_sample.txt: text sampled from stories260K itself (temperature 1, no top-k /
# top-p truncation, fixed seeds), for the O(1) far-field perplexity check (bench/o1/RESULTS.md, quality).
# Each story: the prompt "Once upon a time" followed by up to 500 sampled tokens in a 512-token context (the model
# stops at its end-of-text id or at the end of the context); stories are separated by a blank line.
# usage: CMF=build/cmf bash tests/o1/data/gen_stories_sample.sh [stories260K.cmf]
# (the .cmf: cmf convert shared/data/models/stories260K-gguf/stories260Ktok512.gguf -o stories260K.cmf)
set -euo pipefail
CMF=${CMF:-build/cmf}
M=${1:-/tmp/stories260K.cmf}
OUT="$(dirname "$0")/stories_sample.txt"
: > "$OUT"
for seed in $(seq 1 40); do
  printf 'Once upon a time' >> "$OUT"
  "$CMF" run "$M" -p "Once upon a time" -n 500 -c 512 --temp 1 --top-k 0 --top-p 1 --seed "$seed" -t 1 \
    2>/dev/null >> "$OUT"
  printf '\n\n' >> "$OUT"
done
