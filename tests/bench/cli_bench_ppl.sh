#!/usr/bin/env bash
# `cmf bench` and `cmf ppl` on stories260K (its GGUF converted by `cmf convert`):
#  - bench: the markdown table has llama-bench's columns and one row per test (pp16, tg8) with positive t/s;
#    --json gives one object per test with `repetitions` samples whose mean is avg_ts, and the tensor-parallel
#    ranks ("tp": 1, or 2 with --tp 2, whose backend reads "CPU tp2");
#  - ppl: the model's own documented greedy text (stories260K.md) scores a low perplexity (< 4; the model's
#    validation loss 1.2968 means PPL ~3.7 on TinyStories), the method line reports the window arithmetic, a
#    --baseline run of the same file gives a ratio of exactly 1, and the q8 conversion stays within 2% of f32;
#  - errors: usage errors exit 2, a text shorter than one window exits 1, each with one stderr line.
. "$(dirname "$0")/../cli/lib.sh"

GGUF="$CMF_SHARED/data/models/stories260K-gguf/stories260Ktok512.gguf"
M="$T/s.cmf"; Q="$T/s-q8.cmf"
expect_ok "$CMF_BIN" convert "$GGUF" -o "$M" --no-progress || exit 1
expect_ok "$CMF_BIN" convert "$GGUF" -o "$Q" --quant q8 --no-progress || exit 1
awk '/^\$ \.\/run/{f=1;next} f&&/^```/{exit} f' "$CMF_SHARED/data/models/stories260K/stories260K.md" >"$T/text.txt"

# bench: table
if expect_ok "$CMF_BIN" bench "$M" -p 16 -n 8 -r 2 -t 1; then
    grep -qE '^\| model +\| +size \| +params \| backend \| threads \| +test \| +t/s +\|$' "$T/out" || fail "bench: table header: $(cat "$T/out")"
    grep -q '^cpu path: ' "$T/out" || fail "bench: no cpu path line"
    for t in pp16 tg8; do
        row=$(grep -E "^\| llama .*\| +CPU +\| +1 \| +$t \|" "$T/out")
        [ -n "$row" ] || { fail "bench: no $t row: $(cat "$T/out")"; continue; }
        ts=$(echo "$row" | awk -F'|' '{print $8}' | awk '{print $1}')
        awk -v x="$ts" 'BEGIN{exit !(x > 0)}' || fail "bench: $t t/s '$ts' not positive"
    done
fi
# bench: json
if expect_ok "$CMF_BIN" bench "$M" -p 16 -n 8 -r 3 --json --seed 7; then
    [ "$(grep -c '"test":' "$T/out")" -eq 2 ] || fail "bench --json: want 2 tests: $(cat "$T/out")"
    grep -q '"test":[[:space:]]*"pp16"' "$T/out" || fail "bench --json: no pp16"
    grep -q '"test":[[:space:]]*"tg8"' "$T/out" || fail "bench --json: no tg8"
    # mean of samples_ts == avg_ts for the first test
    tr -d '\n\t ' <"$T/out" | grep -o '"avg_ts":[^,]*,"stddev_ts":[^,]*,"samples_ns":\[[^]]*\],"samples_ts":\[[^]]*\]' | head -1 |
        awk -F'samples_ts":\\[' '{split($1, a, /[:,]/); avg=a[2]; sub(/\]$/, "", $2); n=split($2, s, ","); t=0;
             for (i=1;i<=n;i++) t+=s[i]; if (n != 3 || (t/n - avg)^2 > 1e-6*avg*avg) exit 1}' ||
        fail "bench --json: samples_ts mean != avg_ts or not 3 samples: $(cat "$T/out")"
    grep -q '"tp":[[:space:]]*1,' "$T/out" || fail "bench --json: no \"tp\": 1: $(cat "$T/out")"
fi
# bench --tp 2 (cpu rank threads): the ranks show in the json and the table's backend column
if expect_ok "$CMF_BIN" bench "$M" -p 16 -n 4 -r 1 --json --tp 2; then
    grep -q '"tp":[[:space:]]*2,' "$T/out" || fail "bench --json --tp 2: no \"tp\": 2: $(cat "$T/out")"
    grep -q '"backends":[[:space:]]*"CPU tp2"' "$T/out" || fail "bench --json --tp 2: backends: $(cat "$T/out")"
fi

# ppl
if expect_ok "$CMF_BIN" ppl "$M" -f "$T/text.txt" -c 64 -t 1; then
    grep -q 'window(s) of 64 tokens every 64, first token of each window = BOS' "$T/out" || fail "ppl: method line: $(head -1 "$T/out")"
    grep -q 'logits at positions 32..62 predict tokens 33..63 (31 per window)' "$T/out" || fail "ppl: scored positions"
    p=$(sed -n 's/.*: PPL = \([0-9.]*\) +\/- .*/\1/p' "$T/out")
    awk -v x="$p" 'BEGIN{exit !(x > 1 && x < 4)}' || fail "ppl: PPL '$p' of the model's own greedy text not in (1, 4)"
    nw=$(sed -n 's/.*tokens, \([0-9]*\) window(s).*/\1/p' "$T/out")
    grep -q "($((nw * 31)) predictions)" "$T/out" || fail "ppl: prediction count != windows x 31: $(cat "$T/out")"
fi
if expect_ok "$CMF_BIN" ppl "$M" -f "$T/text.txt" -c 64 --stride 32 --max-windows 3 --baseline "$M"; then
    grep -q '3 window(s) of 64 tokens every 32' "$T/out" || fail "ppl: --stride/--max-windows: $(head -1 "$T/out")"
    grep -q '= 1.000000$' "$T/out" || fail "ppl: same-file baseline ratio is not 1: $(tail -1 "$T/out")"
fi
if expect_ok "$CMF_BIN" ppl "$Q" -f "$T/text.txt" -c 64 --baseline "$M"; then
    r=$(sed -n 's/^ratio .* = \([0-9.]*\)$/\1/p' "$T/out")
    awk -v x="$r" 'BEGIN{exit !(x > 0.98 && x < 1.02)}' || fail "ppl: q8/f32 ratio '$r' not within 2%"
fi

# errors
expect_error 2 "$CMF_BIN" bench
expect_error 2 "$CMF_BIN" bench "$M" -p 0 -n 0
expect_error 2 "$CMF_BIN" bench "$M" -r abc
expect_error 2 "$CMF_BIN" ppl "$M"
expect_error 2 "$CMF_BIN" ppl "$M" -f "$T/text.txt" -c 2
printf 'Once upon a time' >"$T/short.txt"
expect_error 1 "$CMF_BIN" ppl "$M" -f "$T/short.txt" -c 64
expect_error 1 "$CMF_BIN" bench "$T/missing.cmf"

[ "$FAILURES" -eq 0 ] || { echo "$FAILURES failure(s)"; exit 1; }
echo "cli_bench_ppl: ok"
