#!/usr/bin/env bash
# The real model end to end: llama.cpp's GGUF of Karpathy's stories260K -> CMF -> greedy generation from an empty
# prompt must reproduce the greedy text documented with the model (stories260K.md, produced by llama2.c's run.c
# at temperature 0) for the first 120 tokens. The trained context is 512 although the GGUF says 128: -c 512.
set -u
bin=${CMF_BIN:?} shared=${CMF_SHARED:?} tmp=${CMF_TMP:-/tmp}
out=$tmp/stories260K.cmf
"$bin" convert "$shared/data/models/stories260K-gguf/stories260Ktok512.gguf" -o "$out" || { echo "convert failed"; exit 1; }
"$bin" verify "$out" >/dev/null || { echo "verify failed"; exit 1; }
got=$("$bin" run "$out" -p "" -n 120 -c 512 --temp 0 2>"$tmp/stories260K.err") || { cat "$tmp/stories260K.err"; exit 1; }
# the documented text: the block after the `./run stories260K/stories260K.bin ... -t 0.0` line
want=$(awk '/^\$ \.\/run stories260K\/stories260K.bin -z stories260K\/tok512.bin -t 0.0$/{f=1;next} f&&/^```/{exit} f' \
       "$shared/data/models/stories260K/stories260K.md")
ids=$("$bin" run "$out" -p "" -n 120 -c 512 --temp 0 --print-ids 2>/dev/null)
n=$(echo "$ids" | tr ',' '\n' | grep -c .)
if [ "$n" -ne 120 ]; then echo "expected 120 generated ids, got $n: $ids"; exit 1; fi
if [ "${#got}" -lt 300 ]; then echo "output too short (${#got} chars): $got"; exit 1; fi
case "$want" in
  "$got"*) echo "OK: 120 greedy tokens (${#got} chars) match the documented llama2.c output"; exit 0 ;;
  *) echo "MISMATCH"; echo "got:  $got"; echo "want: ${want:0:${#got}}"; exit 1 ;;
esac
