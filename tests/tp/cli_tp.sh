#!/usr/bin/env bash
# cmf run --tp: greedy tokens with --tp 2 and --tp 4 equal the unsplit run (--tp 1) on hf-tiny mistral-swa (f32), and a
# split that does not divide the heads is a clear error (exit status non-zero, message naming n_heads).
set -euo pipefail
out="$CMF_TMP/cli-tp-mistral.cmf"
"$CMF_BIN" convert "$CMF_SHARED/data/hf-tiny/mistral-swa" -o "$out" --quant f32 --no-progress >/dev/null 2>&1
run() { "$CMF_BIN" run "$out" --tokens 1,2,3,4,5 -n 16 --temp 0 -t 4 "$@" 2>/dev/null | tail -1; }
one=$(run --tp 1)
[ -n "$one" ] || { echo "FAIL: --tp 1 produced nothing"; exit 1; }
for n in 2 4; do
  got=$(run --tp "$n")
  [ "$got" = "$one" ] || { echo "FAIL: --tp $n: '$got' != '$one'"; exit 1; }
done
if err=$("$CMF_BIN" run "$out" --tokens 1,2,3 -n 2 --temp 0 --tp 8 2>&1 >/dev/null); then
  echo "FAIL: --tp 8 on 4 heads succeeded"; exit 1
fi
case "$err" in *"n_heads 4 is not divisible by the 8 ranks"*) ;; *) echo "FAIL: --tp 8 message: $err"; exit 1;; esac
echo "ok: --tp 2/4 tokens = --tp 1 ($one); --tp 8: $err"
