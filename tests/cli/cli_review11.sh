#!/usr/bin/env bash
# cli_review11.sh — the command-line items of review 11 (a new user coming from llama.cpp): ppl's default window
# fits the trained context, `-o -` (eval: stdout; convert/requant: a clear refusal), Ctrl-C in `cmf run` ends like
# a normal end with exit 130, a bare `cmf` prints the usage, `-v`, `--ignore-eos` on run and chat, `-m MODEL`, a
# .json that is not a tokenizer gets a tokenizer.json error, help texts and README say where the specs live.
# Model: stories260K (shared GGUF, converted here; trained context 128, eos id 2).
source "$(dirname "$0")/lib.sh"
GGUF="$CMF_SHARED/data/models/stories260K-gguf/stories260Ktok512.gguf"
M="$T/st.cmf"
REPO="$(cd "$(dirname "$0")/../.." && pwd)"
expect_ok "$CMF_BIN" convert "$GGUF" -o "$M" --no-progress || finish
cd "$T" || finish # a stray file named "-" would land here

# --- 1: ppl's default -c is min(512, trained context); an explicit larger -c still warns --------------------------
cat "$REPO/README.md" "$REPO/ARCHITECTURE.md" >"$T/text.txt"
if expect_ok "$CMF_BIN" ppl "$M" -f "$T/text.txt" --max-windows 1; then
    grep -q "warning" "$T/err" && fail "ppl default -c warns: $(cat "$T/err")"
    grep -q "window(s) of 128 tokens" "$T/out" || fail "ppl default window is not the trained 128: $(head -1 "$T/out")"
fi
if expect_ok "$CMF_BIN" ppl "$M" -f "$T/text.txt" --max-windows 1 -c 256; then
    grep -q "warning: -c 256 is larger than the trained context 128" "$T/err" || fail "ppl -c 256: $(cat "$T/err")"
fi
"$CMF_BIN" ppl --help | grep -q "trained context" || fail "ppl --help does not say the default follows the context"

# --- 2: -o - ----------------------------------------------------------------------------------------------------------
"$CMF_BIN" eval "$M" --tokens 1,2,3 -o - >"$T/stdout.f32" 2>"$T/err" || fail "eval -o -: $(cat "$T/err")"
[ ! -e "$T/-" ] || fail "eval -o - created a file named '-'"
grep -q "to stdout" "$T/err" || fail "eval -o - message: $(cat "$T/err")"
expect_ok "$CMF_BIN" eval "$M" --tokens 1,2,3 -o "$T/file.f32" &&
    { cmp -s "$T/stdout.f32" "$T/file.f32" || fail "eval -o - bytes differ from -o FILE"; }
[ "$(stat -c %s "$T/stdout.f32")" -eq $((3 * 512 * 4)) ] || fail "eval -o -: $(stat -c %s "$T/stdout.f32") bytes"
expect_error 2 "$CMF_BIN" convert "$GGUF" -o - && { grep -q "seek" "$T/err" || fail "convert -o -: $(cat "$T/err")"; }
expect_error 2 "$CMF_BIN" requant "$M" -o - --quant q8 && { grep -q "seek" "$T/err" || fail "requant -o -: $(cat "$T/err")"; }
[ ! -e "$T/-" ] || fail "convert/requant -o - created a file named '-'"

# --- 3: Ctrl-C in run: generation stops, the newline and the speed line are printed, exit 130 ----------------------
# (-c 50000, stories260K never emits eos: minutes of generation, so the signal always lands mid-generation; a background job
# of a non-interactive shell starts with SIGINT ignored, so without run's handler nothing would stop it)
"$CMF_BIN" run "$M" --tokens 1 -n -1 -c 50000 --temp 0 >"$T/int.out" 2>"$T/int.err" &
pid=$!
for ((i = 0; i < 200; i++)); do [ -s "$T/int.out" ] && break; sleep 0.05; done
sleep 0.3
kill -INT $pid 2>/dev/null
for ((i = 0; i < 200; i++)); do kill -0 $pid 2>/dev/null || break; sleep 0.05; done
if kill -0 $pid 2>/dev/null; then
    kill $pid
    wait $pid
    fail "run kept generating after Ctrl-C"
else
    wait $pid
    rc=$?
    [ "$rc" -eq 130 ] || fail "run after Ctrl-C: exit $rc (want 130): $(tail -c 300 "$T/int.err")"
    [ -s "$T/int.out" ] && [ "$(tail -c 1 "$T/int.out" | od -An -c | tr -d ' ')" = '\n' ] ||
        fail "run after Ctrl-C: the text does not end with a newline"
    grep -q "^prompt: 1 token, .* | decode: [0-9]* tokens\?, " "$T/int.err" ||
        fail "run after Ctrl-C: no speed line: $(tail -c 300 "$T/int.err")"
    clean_stderr "$T/int.err" || fail "run after Ctrl-C: crash output"
fi

# --- 4: a bare `cmf` prints the usage on stderr (exit 2); -v prints the version --------------------------------------
"$CMF_BIN" >"$T/out" 2>"$T/err"
rc=$?
[ "$rc" -eq 2 ] || fail "bare cmf: exit $rc (want 2)"
grep -q "usage: cmf <command>" "$T/err" && grep -q "^  run " "$T/err" || fail "bare cmf: no usage: $(cat "$T/err")"
[ ! -s "$T/out" ] || fail "bare cmf wrote to stdout"
expect_ok "$CMF_BIN" -v && grep -qE '^cmf [0-9]+\.[0-9]+\.[0-9]+$' "$T/out" || fail "cmf -v: $(cat "$T/out" "$T/err")"

# --- 5: --ignore-eos (run, chat) and -m MODEL -------------------------------------------------------------------------
# hf-tiny/llama (random weights, eos id 2 in its config) sampled with seed 2 from BOS draws eos as its 83rd token
# (stories260K never emits eos in its context); --ignore-eos goes on past it to -n, with the same tokens before it
expect_ok "$CMF_BIN" convert "$CMF_SHARED/data/hf-tiny/llama" -o "$T/ll.cmf" --no-progress
if expect_ok "$CMF_BIN" run "$T/ll.cmf" --tokens 1 -n 100 --seed 2 --print-ids; then
    tr ',' '\n' <"$T/out" | grep . >"$T/plain.ids"
    n_plain=$(wc -l <"$T/plain.ids")
    [ "$n_plain" -lt 100 ] || fail "hf-tiny/llama seed 2 did not stop at eos (the check needs it): $n_plain tokens"
fi
if expect_ok "$CMF_BIN" run "$T/ll.cmf" --tokens 1 -n 100 --seed 2 --print-ids --ignore-eos; then
    tr ',' '\n' <"$T/out" | grep . >"$T/ign.ids"
    [ "$(wc -l <"$T/ign.ids")" -eq 100 ] || fail "run --ignore-eos: $(wc -l <"$T/ign.ids") tokens (want -n 100)"
    cmp -s "$T/plain.ids" <(head -n "$n_plain" "$T/ign.ids") || fail "run --ignore-eos: other tokens before the eos"
    [ "$(sed -n "$((n_plain + 1))p" "$T/ign.ids")" = 2 ] || fail "run --ignore-eos: token $((n_plain + 1)) is not eos 2"
fi
if expect_ok "$CMF_BIN" chat "$M" -p "Hi" -n 300 --temp 0 --ignore-eos -c 128; then
    grep -q "context of 128 tokens is full" "$T/err" || fail "chat --ignore-eos did not run to the context: $(cat "$T/err")"
fi
"$CMF_BIN" run --help | grep -q -- "--ignore-eos" || fail "run --help lacks --ignore-eos"
expect_ok "$CMF_BIN" run "$M" --tokens 1 -n 5 --temp 0 --print-ids && cp "$T/out" "$T/pos.out"
expect_ok "$CMF_BIN" run -m "$M" --tokens 1 -n 5 --temp 0 --print-ids && { cmp -s "$T/out" "$T/pos.out" || fail "run -m"; }
expect_ok "$CMF_BIN" run --tokens 1 --model="$M" -n 5 --temp 0 --print-ids &&
    { cmp -s "$T/out" "$T/pos.out" || fail "run --model="; }
expect_ok "$CMF_BIN" info --model "$M" && grep -q "vocab" "$T/out" || fail "info --model"
expect_error 2 "$CMF_BIN" run --tokens 1 -m && { grep -q "missing value for -m" "$T/err" || fail "-m: $(cat "$T/err")"; }
expect_error 2 "$CMF_BIN" run "$M" -m "$M" --tokens 1 && { grep -q "given already" "$T/err" || fail "2x model: $(cat "$T/err")"; }

# --- 6: a .json that is not a tokenizer.json gets a tokenizer.json error, not a CMF envelope error --------------------
: >"$T/empty.json"
printf '[1,2]\n' >"$T/list.json"
printf '[1,2]\n' >"$T/list.txt"
for f in empty.json list.json list.txt; do
    expect_error 1 "$CMF_BIN" tokenize "$T/$f" <<<hi &&
        { grep -qi "envelope" "$T/err" && fail "tokenize $f: a CMF error: $(cat "$T/err")"; }
done
expect_error 1 "$CMF_BIN" detokenize "$T/empty.json" <<<1 && { grep -qi "envelope" "$T/err" && fail "detokenize empty.json: $(cat "$T/err")"; }

# --- 7: help texts and README say where CMF_FORMAT.md / DORY.md are --------------------------------------------------
for c in convert run chat eval bench ppl; do
    "$CMF_BIN" $c --help | tr '\n' ' ' | grep -q "CMF_FORMAT.md\|DORY.md" || continue
    "$CMF_BIN" $c --help | grep -q "shared/spec\|shared folder" || fail "cmf $c --help cites a spec without saying where it is"
done
grep -q '\.\./shared/spec/' "$REPO/README.md" || fail "README does not say where DORY.md / CMF_FORMAT.md are"
grep '^| `cmf chat model.cmf' "$REPO/README.md" | grep -q -- '-n N.*--chat-template-file' || fail "README chat row"
finish
