#!/usr/bin/env bash
# cli_tokenize_nul.sh — `cmf tokenize` / `cmf detokenize` with the real qwen3 tokenizer.json on text holding U+0000
# (the byte-level BPE maps byte 0x00 to the vocabulary token "Ā"), strict --jsonl input (one JSON string per line:
# trailing text and lone surrogates are refused with a message naming the line), and a tokenizer.json that starts
# with a UTF-8 BOM. The ids come from the tokenizer itself (tokenize of each character alone), never typed in.
. "$(dirname "$0")/../cli/lib.sh"
J="$CMF_SHARED/data/tokenizers/qwen3/tokenizer.json"

# the ids of "a", U+0000 and "b" one by one (the NUL byte through --jsonl's escape)
printf '"a"\n"\\u0000"\n"b"\n' >"$T/abz.jsonl"
expect_ok "$CMF_BIN" tokenize "$J" --jsonl <"$T/abz.jsonl" && { read -r A; read -r Z; read -r B; } <"$T/out"
[ -n "$A" ] && [ -n "$B" ] && [ -n "$Z" ] && [ "$Z" != "$A" ] || fail "ids of a / NUL / b: '$A' '$Z' '$B'"
# plain stdin carries the raw NUL byte: the same three tokens
printf 'a\0b' | "$CMF_BIN" tokenize "$J" >"$T/raw" 2>"$T/err" || fail "tokenize of raw a NUL b: $(cat "$T/err")"
[ "$(cat "$T/raw")" = "$A,$Z,$B" ] || fail "raw a NUL b tokenized as $(cat "$T/raw"), want $A,$Z,$B"
# --jsonl: all three characters (not cut at the NUL)
expect_ok "$CMF_BIN" tokenize "$J" --jsonl <<<' "a\u0000b" ' && [ "$(cat "$T/out")" = "$A,$Z,$B" ] ||
    fail "--jsonl \"a\\u0000b\": $(cat "$T/out"), want $A,$Z,$B"

# detokenize: the NUL byte is printed (plain) and escaped (--jsonl)
echo "$A,$Z,$B" | "$CMF_BIN" detokenize "$J" >"$T/text" 2>"$T/err" || fail "detokenize: $(cat "$T/err")"
printf 'a\0b' | cmp -s - "$T/text" || fail "detokenize prints $(od -c "$T/text" | head -1), want a \\0 b"
expect_ok "$CMF_BIN" detokenize "$J" --jsonl <<<"$A,$Z,$B" && [ "$(cat "$T/out")" = '"a\u0000b"' ] ||
    fail "detokenize --jsonl prints $(cat "$T/out")"
# several lines: each text (NUL included) then a newline
printf '%s\n%s\n' "$A,$Z,$B" "$Z" | "$CMF_BIN" detokenize "$J" >"$T/text" 2>"$T/err" || fail "$(cat "$T/err")"
printf 'a\0b\n\0\n' | cmp -s - "$T/text" || fail "two lines: $(od -c "$T/text" | head -2)"

# strict --jsonl: one error line naming the line, exit 1, nothing half-done
printf '"a"\n"a" "b"\n' >"$T/junk.jsonl"
expect_error 1 "$CMF_BIN" tokenize "$J" --jsonl <"$T/junk.jsonl" &&
    { grep -q '^cmf tokenize: line 2, byte 5: text after the JSON string' "$T/err" || fail "junk: $(cat "$T/err")"; }
expect_error 1 "$CMF_BIN" tokenize "$J" --jsonl <<<'"\ud800"' &&
    { grep -q 'line 1, byte 2: a lone high surrogate \\ud800 .*not valid Unicode' "$T/err" || fail "$(cat "$T/err")"; }
expect_error 1 "$CMF_BIN" tokenize "$J" --jsonl <<<'"x\udc01"' &&
    { grep -q 'line 1, byte 3: a lone low surrogate \\udc01: not valid Unicode' "$T/err" || fail "$(cat "$T/err")"; }
expect_error 1 "$CMF_BIN" tokenize "$J" --jsonl <<<'"abc'
grep -q 'line 1, byte 5: unterminated JSON string' "$T/err" || fail "unterminated: $(cat "$T/err")"
expect_error 1 "$CMF_BIN" tokenize "$J" --jsonl <<<'"\u12g4"'
expect_error 1 "$CMF_BIN" tokenize "$J" --jsonl <<<'42'
grep -q 'line 1: not a JSON string' "$T/err" || fail "42: $(cat "$T/err")"
# a surrogate pair is one character: the same ids as its UTF-8 bytes on plain stdin; escapes as JSON defines them
expect_ok "$CMF_BIN" tokenize "$J" --jsonl <<<'"\ud83d\ude00 \"q\"\\\/\t\n"' && cp "$T/out" "$T/esc"
printf '\xf0\x9f\x98\x80 "q"\\/\t\n' | "$CMF_BIN" tokenize "$J" >"$T/out" 2>"$T/err"
cmp -s "$T/out" "$T/esc" || fail "escapes: $(cat "$T/esc") vs raw $(cat "$T/out")"

# a tokenizer.json that starts with a UTF-8 BOM is still a tokenizer.json
{ printf '\xef\xbb\xbf'; cat "$J"; } >"$T/bom.json"
printf 'Hello world' | "$CMF_BIN" tokenize "$J" >"$T/want" 2>/dev/null
printf 'Hello world' | "$CMF_BIN" tokenize "$T/bom.json" >"$T/out" 2>"$T/err"
cmp -s "$T/out" "$T/want" || fail "BOM tokenizer.json: $(cat "$T/out") $(cat "$T/err")"
finish
