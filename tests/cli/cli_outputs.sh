#!/usr/bin/env bash
# Outputs never clobber what they should not: the input itself, read-only files, symbolic links, FIFOs and
# directories are refused with one clear line and exit 1, and nothing at the path changes. Text inputs that are
# directories are refused; a pipe works as a token file. (Only paths under CMF_TMP are touched.)
set -u
bin=${CMF_BIN:?} shared=${CMF_SHARED:?} T=${CMF_TMP:-/tmp}/cli_outputs
rm -rf "$T" && mkdir -p "$T"
fail() { echo "FAIL: $*"; exit 1; }
refused() { # refused "what" cmd... : exit 1, exactly one stderr line
    "${@:2}" >"$T/out" 2>"$T/err"; rc=$?
    [ "$rc" -eq 1 ] || fail "$1: exit $rc, want 1 ($(cat "$T/err"))"
    [ "$(wc -l <"$T/err")" -eq 1 ] || fail "$1: want one stderr line, got: $(cat "$T/err")"
}
"$bin" convert "$shared/data/hf-tiny/llama" -o "$T/m.cmf" 2>/dev/null || fail "convert"
cp "$T/m.cmf" "$T/m.copy" && sum=$(md5sum <"$T/m.cmf")

refused "eval -o the model" "$bin" eval "$T/m.cmf" --tokens 1,2 -o "$T/m.cmf"
[ "$(md5sum <"$T/m.cmf")" = "$sum" ] || fail "eval -o the model changed the model"
cp "$shared/data/models/stories260K-gguf/stories260Ktok512.gguf" "$T/s.gguf" && gsum=$(md5sum <"$T/s.gguf")
refused "convert -o the source" "$bin" convert "$T/s.gguf" -o "$T/s.gguf"
[ "$(md5sum <"$T/s.gguf")" = "$gsum" ] || fail "convert -o the source changed the source"

echo keep >"$T/ro.f32" && chmod 444 "$T/ro.f32"
refused "read-only output" "$bin" eval "$T/m.cmf" --tokens 1 -o "$T/ro.f32"
grep -q "read-only" "$T/err" || fail "read-only: $(cat "$T/err")"
[ "$(cat "$T/ro.f32")" = keep ] || fail "read-only output changed"

echo keep >"$T/target" && ln -s "$T/target" "$T/link.f32"
refused "symlink output" "$bin" eval "$T/m.cmf" --tokens 1 -o "$T/link.f32"
[ -L "$T/link.f32" ] && [ "$(cat "$T/target")" = keep ] || fail "symlink output changed"

mkfifo "$T/fifo"
refused "FIFO output" "$bin" convert "$shared/data/hf-tiny/llama" -o "$T/fifo"
[ -p "$T/fifo" ] || fail "FIFO replaced"
mkdir "$T/dir.cmf"
refused "directory output" "$bin" convert "$shared/data/hf-tiny/llama" -o "$T/dir.cmf"

"$bin" convert "$T/s.gguf" -o "$T/s.cmf" 2>/dev/null || fail "convert stories"
refused "directory as prompt file" "$bin" run "$T/s.cmf" -f "$T/dir.cmf" -n 1
grep -q "is a directory" "$T/err" || fail "prompt dir: $(cat "$T/err")"
refused "directory as token file" "$bin" eval "$T/m.cmf" --tokens-file "$T/dir.cmf" -o "$T/x.f32"

echo "1,2,3" | "$bin" eval "$T/m.cmf" --tokens-file /dev/stdin -o "$T/p.f32" 2>"$T/err" || fail "tokens from a pipe: $(cat "$T/err")"
"$bin" eval "$T/m.cmf" --tokens 1,2,3 -o "$T/q.f32" 2>/dev/null && cmp -s "$T/p.f32" "$T/q.f32" || fail "pipe != --tokens"
echo "OK: outputs and inputs checked"
