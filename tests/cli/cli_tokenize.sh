#!/usr/bin/env bash
# cli_tokenize.sh — `cmf tokenize` / `cmf detokenize` on the real qwen3 / llama3 / mistral tokenizer.json files:
# the ids of llama.cpp's tokenizer test vectors (shared/data/tokenizer-vectors, produced by HF tokenizers without
# special tokens: qwen2 applies to qwen3, llama-bpe to llama3) through stdin and through --jsonl, the exact text
# back through detokenize (one input: no newline added; --jsonl: one JSON string per line), --special (the
# post-processor's BOS) and one-line errors with their exit status.
. "$(dirname "$0")/lib.sh"
TOK="$CMF_SHARED/data/tokenizers"
VEC="$CMF_SHARED/data/tokenizer-vectors"

# split_vectors INP DIR: each test string of INP (separated by lines "__ggml_vocab_test__") into DIR/N (exact
# bytes), and DIR/all.jsonl: each string as a JSON string on one line, escaped as cJSON prints strings.
split_vectors() {
    mkdir -p "$2"
    awk -v dir="$2" '
        BEGIN { RS = "\n__ggml_vocab_test__\n"; n = 0
                for (i = 1; i < 32; i++) esc[sprintf("%c", i)] = sprintf("\\u%04x", i)
                esc["\b"] = "\\b"; esc["\f"] = "\\f"; esc["\n"] = "\\n"; esc["\r"] = "\\r"; esc["\t"] = "\\t"
                esc["\""] = "\\\""; esc["\\"] = "\\\\" }
        { f = dir "/" n; printf "%s", $0 > f; close(f)
          j = ""; for (i = 1; i <= length($0); i++) { c = substr($0, i, 1); j = j ((c in esc) ? esc[c] : c) }
          print "\"" j "\"" > (dir "/all.jsonl"); n++ }
        END { close(dir "/all.jsonl") }' "$1"
}

for pair in qwen3:qwen2 llama3:llama-bpe; do
    name=${pair%%:*}
    J="$TOK/$name/tokenizer.json"
    D="$T/$name"
    split_vectors "$VEC/ggml-vocab-${pair#*:}.gguf.inp" "$D"
    # the expected ids: one line per string, comma-separated
    sed -e 's/^ *//' -e 's/ *$//' -e 's/  */,/g' "$VEC/ggml-vocab-${pair#*:}.gguf.out" >"$D/want.ids"
    n=$(wc -l <"$D/want.ids")
    [ "$n" -gt 20 ] && [ "$(wc -l <"$D/all.jsonl")" -eq "$n" ] || fail "$name: $n vectors, $(wc -l <"$D/all.jsonl") strings"

    # every string at once through --jsonl, and back
    expect_ok "$CMF_BIN" tokenize "$J" --jsonl <"$D/all.jsonl" && cmp -s "$T/out" "$D/want.ids" ||
        fail "$name: tokenize --jsonl differs from the vectors: $(diff "$T/out" "$D/want.ids" | head -c 400)"
    expect_ok "$CMF_BIN" detokenize "$J" --jsonl <"$D/want.ids" && cmp -s "$T/out" "$D/all.jsonl" ||
        fail "$name: detokenize --jsonl is not the strings: $(diff "$T/out" "$D/all.jsonl" | head -c 400)"

    # raw stdin, one input: a few strings (blank, spaces, a newline, the last one)
    for i in 2 6 $((n - 1)); do
        expect_ok "$CMF_BIN" tokenize "$J" <"$D/$i" || continue
        want=$(sed -n "$((i + 1))p" "$D/want.ids")
        [ "$(cat "$T/out")" = "$want" ] && [ "$(wc -l <"$T/out")" -eq 1 ] ||
            fail "$name: tokenize string $i: '$(head -c 200 "$T/out")' (want '$want')"
        printf '%s' "$want" >"$T/ids"
        expect_ok "$CMF_BIN" detokenize "$J" <"$T/ids" && cmp -s "$T/out" "$D/$i" ||
            fail "$name: detokenize string $i: '$(head -c 200 "$T/out")'"
    done
done

# several input lines without --jsonl: each text followed by a newline; an empty line is zero ids (empty text)
Q="$TOK/qwen3/tokenizer.json"
printf 'Hello world' >"$T/hw"
expect_ok "$CMF_BIN" tokenize "$Q" <"$T/hw" && cp "$T/out" "$T/hw.ids"
{ cat "$T/hw.ids"; echo; cat "$T/hw.ids"; } >"$T/three"
expect_ok "$CMF_BIN" detokenize "$Q" <"$T/three"
[ "$(cat "$T/out")" = "$(printf 'Hello world\n\nHello world')" ] && [ "$(wc -c <"$T/out")" -eq 25 ] ||
    fail "three lines: '$(cat "$T/out")'"
expect_ok "$CMF_BIN" detokenize "$Q" </dev/null && [ ! -s "$T/out" ] || fail "no input printed '$(cat "$T/out")'"
expect_ok "$CMF_BIN" tokenize "$Q" </dev/null && [ "$(cat "$T/out")" = "" ] && [ "$(wc -c <"$T/out")" -eq 1 ] ||
    fail "empty input: '$(cat "$T/out")'"

# --special: mistral's post-processor adds <s> (id 1, as its tokenizer_config's add_bos_token says); qwen3 and
# llama3 (ByteLevel post-processors) add nothing
M="$TOK/mistral/tokenizer.json"
expect_ok "$CMF_BIN" tokenize "$M" <"$T/hw" && plain=$(cat "$T/out")
expect_ok "$CMF_BIN" tokenize "$M" --special <"$T/hw" && cp "$T/out" "$T/bos.ids"
[ "$(cat "$T/bos.ids")" = "1,$plain" ] || fail "mistral --special: '$(cat "$T/bos.ids")' (plain '$plain')"
expect_ok "$CMF_BIN" detokenize "$M" <"$T/bos.ids" && case "$(cat "$T/out")" in "<s>"*world) true ;; *) false ;; esac ||
    fail "mistral detokenize with BOS: '$(cat "$T/out")'"
printf '1,%s' "$plain" >"$T/ids"
expect_ok "$CMF_BIN" detokenize "$M" --skip-special <"$T/ids" && [ "$(cat "$T/out")" = "Hello world" ] ||
    fail "mistral --skip-special: '$(cat "$T/out")'"
expect_ok "$CMF_BIN" tokenize "$Q" --special <"$T/hw" && cmp -s "$T/out" "$T/hw.ids" || fail "qwen3 --special"
# special tokens in the text are matched as added tokens either way
printf '<|im_start|>user' | "$CMF_BIN" tokenize "$Q" >"$T/out" 2>"$T/err"
[ "$(cut -d, -f1 "$T/out")" = 151644 ] || fail "qwen3 <|im_start|>: '$(cat "$T/out")'"

# errors: one line, exit 1 for bad data (naming the line), 2 for usage (mistral: the quickest tokenizer to load)
printf '9707,1879\n32000\n' >"$T/bad"
expect_error 1 "$CMF_BIN" detokenize "$M" <"$T/bad" && { grep -q 'line 2: id 32000 .*vocabulary of 32000' "$T/err" ||
    fail "bad id: $(cat "$T/err")"; }
[ ! -s "$T/out" ] || fail "bad id: stdout not empty"
printf '1,,2\n' >"$T/bad"
expect_error 1 "$CMF_BIN" detokenize "$M" <"$T/bad" && { grep -q 'line 1' "$T/err" || fail "empty entry: $(cat "$T/err")"; }
printf '1\n12abc\n' >"$T/bad"
expect_error 1 "$CMF_BIN" detokenize "$M" <"$T/bad" && { grep -q "line 2: '12abc' is not a token id" "$T/err" ||
    fail "not an id: $(cat "$T/err")"; }
printf '"a"\n"b"\n{"text": "c"}\n' >"$T/bad"
expect_error 1 "$CMF_BIN" tokenize "$M" --jsonl <"$T/bad" && { grep -q 'line 3: not a JSON string' "$T/err" ||
    fail "bad jsonl: $(cat "$T/err")"; }
printf '"a"\n"unterminated\n' >"$T/bad"
expect_error 1 "$CMF_BIN" tokenize "$M" --jsonl <"$T/bad" && { grep -q 'line 2' "$T/err" || fail "$(cat "$T/err")"; }
printf '{"model": ' >"$T/broken.json"
expect_error 1 "$CMF_BIN" tokenize "$T/broken.json" <"$T/hw"
expect_error 1 "$CMF_BIN" detokenize "$T/missing.json" <"$T/hw"
expect_error 2 "$CMF_BIN" tokenize </dev/null
expect_error 2 "$CMF_BIN" detokenize "$M" --bogus </dev/null
expect_error 2 "$CMF_BIN" tokenize "$M" extra </dev/null
expect_ok "$CMF_BIN" tokenize --help && grep -q "usage: cmf tokenize" "$T/out" || fail "tokenize --help"
expect_ok "$CMF_BIN" detokenize --help && grep -q "usage: cmf detokenize" "$T/out" || fail "detokenize --help"

finish
