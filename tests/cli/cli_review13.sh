# cli_review13.sh — the command-line nits of review13 (/tmp/review13/REPORT.md item 8 and 9), each checked:
#  - a number of the right kind out of range names the range, also when the top is INT_MAX (-c 999999999999);
#  - `run -f -` reads the prompt from stdin (the same ids as -p with the same text), and --help says so;
#  - an option that takes a value is given once: a second -p (or --temp after --temperature, -o after --output)
#    is a usage error naming both values, as a second -m is; flags without a value may repeat;
#  - `convert -o X.gguf` warns that the output is CMF; a .cmf name gets no such line;
#  - a K-quant GGUF converted without --quant is labelled by its matrices' dtype (Q8_ROW), not F32;
#  - `eval -o /dev/null` and `-o FIFO` write in place (the FIFO's bytes equal the regular file's);
#  - `info` names the norm as the formula ("RMSNorm x*w"), not "norm qwen", on a llama file.
. "$(dirname "$0")/lib.sh"
M="$REF/tiny-Q8_ROW.cmf"
GGUF="$CMF_SHARED/data/models/stories260K-gguf/stories260Ktok512.gguf"
KQ="$CMF_TESTDATA/gguf_kquant/model_kq.gguf"
want_line() { [ "$(cat "$T/err")" = "$1" ] || fail "stderr: '$(cat "$T/err")', want '$1'"; }

# --- out of range: the range, for every INT_MAX-topped option too ---
expect_error 2 "$CMF_BIN" run "$M" -p hi -c 999999999999 &&
    want_line "cmf run: invalid value '999999999999' for -c (must be in [0, 2147483647])"
expect_error 2 "$CMF_BIN" run "$M" -p hi --top-k 99999999999 &&
    want_line "cmf run: invalid value '99999999999' for --top-k (must be in [0, 2147483647])"
expect_error 2 "$CMF_BIN" serve "$M" -c 999999999999 &&
    want_line "cmf serve: invalid value '999999999999' for -c (must be in [0, 2147483647])"
# a value that is no integer keeps the kind-only form
expect_error 2 "$CMF_BIN" run "$M" -p hi -c x && want_line "cmf run: invalid value 'x' for -c (expected a non-negative integer)"

# --- run -f -: stdin ---
expect_ok "$CMF_BIN" run --help && grep -q "'-' reads it from stdin" "$T/out" || fail "run --help does not document -f -"
printf 'Once upon a time' >"$T/prompt.txt"
expect_ok "$CMF_BIN" run "$M" -p "Once upon a time" -n 4 --temp 0 --print-ids && cp "$T/out" "$T/ids_p"
"$CMF_BIN" run "$M" -f - -n 4 --temp 0 --print-ids <"$T/prompt.txt" >"$T/ids_f" 2>"$T/err" ||
    fail "run -f - < file: $(cat "$T/err")"
cmp -s "$T/ids_p" "$T/ids_f" || fail "run -f - ids '$(cat "$T/ids_f")' != -p ids '$(cat "$T/ids_p")'"
printf 'Once upon a time' | "$CMF_BIN" run "$M" -f - -n 4 --temp 0 --print-ids >"$T/ids_pipe" 2>"$T/err" ||
    fail "run -f - from a pipe: $(cat "$T/err")"
cmp -s "$T/ids_p" "$T/ids_pipe" || fail "run -f - (pipe) ids '$(cat "$T/ids_pipe")' != -p ids"

# --- a value option given twice: refused (as -m), naming both values; boolean flags may repeat ---
expect_error 2 "$CMF_BIN" run "$M" -p A -p B &&
    want_line "cmf run: -p 'B': --prompt / -p was given already ('A'); give each option once"
expect_error 2 "$CMF_BIN" run "$M" --prompt=A -p B &&
    want_line "cmf run: -p 'B': --prompt / -p was given already ('A'); give each option once"
expect_error 2 "$CMF_BIN" run "$M" -p A --temp 0 --temperature 1 &&
    want_line "cmf run: --temperature '1': --temp / --temperature was given already ('0'); give each option once"
expect_error 2 "$CMF_BIN" run "$M" -p A -n 2 -n 3 &&
    want_line "cmf run: -n '3': --n-predict / -n was given already ('2'); give each option once"
expect_error 2 "$CMF_BIN" eval "$M" --tokens 1 -o "$T/a.f32" --output "$T/b.f32" &&
    grep -q "^cmf eval: --output '$T/b.f32': --output / -o was given already ('$T/a.f32')" "$T/err" ||
    fail "eval -o twice: $(cat "$T/err")"
expect_error 2 "$CMF_BIN" convert "$KQ" -o "$T/a.cmf" -o "$T/b.cmf" && [ ! -e "$T/a.cmf" ] && [ ! -e "$T/b.cmf" ] ||
    fail "convert -o twice: $(cat "$T/err")"
expect_error 2 "$CMF_BIN" run "$M" -m "$M" -m "$M" -p A &&
    grep -q "the model was given already" "$T/err" || fail "-m twice: $(cat "$T/err")"
expect_ok "$CMF_BIN" run "$M" -p A -n 1 --temp 0 --no-bos --no-bos --ignore-eos --ignore-eos

# --- convert -o X.gguf: a warning (the file is still written, as CMF); -o X.cmf: none ---
expect_ok "$CMF_BIN" convert "$KQ" -o "$T/kq.gguf" --no-progress
[ "$(grep -c 'the output is a CMF file, not GGUF' "$T/err")" = 1 ] || fail "no .gguf warning: $(cat "$T/err")"
[ "$(head -c 3 "$T/kq.gguf")" = "CMF" ] || fail "kq.gguf is not CMF"
expect_ok "$CMF_BIN" convert "$KQ" -o "$T/kq.cmf" --no-progress
grep -q 'not GGUF' "$T/err" && fail ".cmf output warned: $(cat "$T/err")"
# --- the K-quant file's label: its matrices are q8_row (6 of them, more elements than the f32 embedding) ---
grep -qE "^cmf convert: wrote $T/kq.cmf \(quant_type Q8_ROW: ([a-z0-9_]+ x[0-9]+, )*q8_row x6(, [a-z0-9_]+ x[0-9]+)*\) in" "$T/err" || fail "convert label: $(tail -1 "$T/err")"
expect_ok "$CMF_BIN" info "$T/kq.cmf" && grep -qE '^quant: +Q8_ROW ' "$T/out" || fail "info label: $(grep '^quant' "$T/out")"

# --- eval -o a device or FIFO: written in place ---
expect_ok "$CMF_BIN" eval "$M" --tokens 1,2,3 -o /dev/null && grep -q "^wrote 3 x [0-9]* logits to /dev/null$" "$T/err" ||
    fail "eval -o /dev/null: $(cat "$T/err")"
expect_ok "$CMF_BIN" eval "$M" --tokens 1,2,3 -o "$T/logits.f32"
mkfifo "$T/fifo"
timeout 60 cat "$T/fifo" >"$T/from_fifo" &
reader=$!
expect_ok "$CMF_BIN" eval "$M" --tokens 1,2,3 -o "$T/fifo" || kill "$reader" 2>/dev/null # no writer came
wait "$reader"
cmp -s "$T/logits.f32" "$T/from_fifo" || fail "eval -o FIFO bytes differ from the file's"
[ -p "$T/fifo" ] || fail "the FIFO was replaced"

# --- info: the norm as its formula on a llama file (stories260K, converted from GGUF) ---
expect_ok "$CMF_BIN" convert "$GGUF" -o "$T/s.cmf" --no-progress
expect_ok "$CMF_BIN" info "$T/s.cmf"
grep -qE '^arch: +llama' "$T/out" || fail "stories260K is not llama: $(grep '^arch' "$T/out")"
grep -qE '^model: +norm RMSNorm x\*w,' "$T/out" || fail "info norm: $(grep '^model' "$T/out")"
grep -q 'norm qwen' "$T/out" && fail "info still says norm qwen"

finish
