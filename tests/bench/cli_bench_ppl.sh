#!/usr/bin/env bash
# `cmf bench` and `cmf ppl` on stories260K (its GGUF converted by `cmf convert`):
#  - bench: the markdown table has llama-bench's columns and one row per test (pp16, tg8) with positive t/s;
#    --json gives one object per test with `repetitions` samples whose mean is avg_ts, and the tensor-parallel
#    ranks ("tp": 1, or 2 with --tp 2, whose backend reads "CPU tp2"), and llama-bench's fields: avg_ns and
#    stddev_ns recomputed here from samples_ns with llama-bench's integer formulas, n_depth 0, test_time as
#    ISO-8601 UTC within this run, build_commit a short hash (git HEAD of this checkout when git can read it) or
#    "unknown", cpu_info the first "model name" of /proc/cpuinfo, type_k/type_v f32 (the CPU's KV cache);
#  - bench refuses (exit 1, one line) a -p or -n past the context (the trained 128 tokens, or -c), and runs it
#    with a -c that holds it;
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
    flat=$(tr -d '\n\t ' <"$T/out")
    # avg_ns / stddev_ns of each test from its samples_ns (llama-bench: integer mean, integer sample stddev)
    echo "$flat" | grep -o '"avg_ns":[^,]*,"stddev_ns":[^,]*,"avg_ts":[^,]*,"stddev_ts":[^,]*,"samples_ns":\[[^]]*\]' >"$T/ns"
    [ "$(wc -l <"$T/ns")" -eq 2 ] || fail "bench --json: want avg_ns, stddev_ns, avg_ts, stddev_ts, samples_ns in 2 tests: $flat"
    tr '[]' ',,' <"$T/ns" | awk -F'[:,]' '{avg=$2; sd=$4; n=0; sum=0; sq=0; for (i=10; i<NF; i++) if ($i != "") { n++; sum+=$i; sq+=$i*$i }
         m=int(sum/n); v=sq/(n-1) - m*m*n/(n-1); want=v > 0 ? int(sqrt(v)) : 0;
         if (n != 3 || avg != m || sd != want) { print "line " NR ": n " n " avg_ns " avg " (want " m ") stddev_ns " sd " (want " want ")"; bad=1 } }
         END{exit bad}' >"$T/nscheck" || fail "bench --json: avg_ns/stddev_ns: $(cat "$T/nscheck")"
    [ "$(echo "$flat" | grep -o '"n_depth":0,' | wc -l)" -eq 2 ] || fail "bench --json: n_depth 0: $flat"
    [ "$(echo "$flat" | grep -o '"type_k":"f32","type_v":"f32",' | wc -l)" -eq 2 ] || fail "bench --json: type_k/type_v f32: $flat"
    now=$(date -u +%s)
    for tt in $(echo "$flat" | grep -o '"test_time":"[^"]*"' | cut -d'"' -f4); do
        echo "$tt" | grep -qE '^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z$' || fail "bench --json: test_time '$tt' not ISO-8601 UTC"
        t=$(date -u -d "$tt" +%s 2>/dev/null || echo 0)
        [ $((now - t)) -ge 0 ] && [ $((now - t)) -lt 600 ] || fail "bench --json: test_time $tt not within this run (now $now)"
    done
    bc=$(echo "$flat" | grep -o '"build_commit":"[^"]*"' | head -1 | cut -d'"' -f4)
    head_c=$(git -C "$(dirname "$0")" rev-parse --short HEAD 2>/dev/null || true)
    if [ -n "$head_c" ]; then
        # the binary was built from this checkout: its commit is HEAD or (when built before the last commit) an
        # ancestor of it
        git -C "$(dirname "$0")" merge-base --is-ancestor "$bc" HEAD 2>/dev/null || fail "bench --json: build_commit '$bc' is not HEAD ($head_c) or an ancestor"
    else
        echo "$bc" | grep -qE '^([0-9a-f]{4,}|unknown)$' || fail "bench --json: build_commit '$bc'"
    fi
    cpu=$(sed -n 's/^model name[[:space:]]*:[[:space:]]*//p' /proc/cpuinfo 2>/dev/null | head -1)
    echo "$flat" | grep -qF "\"cpu_info\":\"$(echo "${cpu:-unknown}" | tr -d ' \t')\"" || fail "bench --json: cpu_info is not '${cpu:-unknown}': $flat"
fi
# bench: a test past the context is refused before it runs (the GGUF's trained context is 128); -c holds it
if expect_error 1 "$CMF_BIN" bench "$M" -p 200 -n 0 -r 1; then
    grep -q 'exceeds the context of 128 tokens' "$T/err" || fail "bench -p 200: message: $(cat "$T/err")"
fi
expect_error 1 "$CMF_BIN" bench "$M" -p 0 -n 1000000 -r 1
expect_error 1 "$CMF_BIN" bench "$M" -p 100 -n 8 -c 64 -r 1
if expect_ok "$CMF_BIN" bench "$M" -p 200 -n 0 -r 1 -c 256 --json; then
    grep -q '"test":[[:space:]]*"pp200"' "$T/out" || fail "bench -p 200 -c 256: no pp200: $(cat "$T/out")"
    grep -q 'larger than the trained context 128' "$T/err" || fail "bench -c 256: no warning: $(cat "$T/err")"
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
