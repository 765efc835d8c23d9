# cli_info_verify.sh — `cmf info` and `cmf verify` on the reference's own tiny-Q8_ROW.cmf (shared/data), checked
# against an independent reading of the file's directory with od, and verify on a copy with one payload byte
# flipped.
. "$(dirname "$0")/lib.sh"
M="$REF/tiny-Q8_ROW.cmf"

# --- independent directory reader (CMF_FORMAT.md §1.2, §1.5; lib.sh's cmf_dir) ---
dir_off=$(u64 "$M" 32)
data_off=$(u64 "$M" 48)
count=$(u64 "$M" "$dir_off")
dtype_name() {  # spec names, CMF_FORMAT.md §2.0
    case $1 in 0) echo f32;; 1) echo f16;; 2) echo bf16;; 3) echo q8_row;; 4) echo q4_block;; 9) echo q8_2f;;
        *) echo "?";; esac
}
cmf_dir "$M" >"$T/dir.raw"
[ "$(wc -l <"$T/dir.raw")" -eq "$count" ] || fail "the independent reader read $(wc -l <"$T/dir.raw") of $count records"
while read -r dt nd shape off nbytes hash name; do
    shape=${shape#-}
    echo "$name|$(dtype_name "$dt")|[${shape//,/, }]|$nbytes|$off"
done <"$T/dir.raw" >"$T/dir.txt"
[ "$count" -gt 0 ] || fail "the independent reader found no tensors"

# --- verify: intact ---
expect_ok "$CMF_BIN" verify "$M"
grep -qx "OK: $count tensors, header and directory hashes match" "$T/out" || fail "verify output: $(cat "$T/out")"
[ ! -s "$T/err" ] || fail "verify printed on stderr: $(cat "$T/err")"

# every reference file the reference's converter wrote verifies
for q in F16 Q8_ROW Q8_2F Q4_BLOCK; do
    expect_ok "$CMF_BIN" verify "$REF/tiny-$q.cmf" && grep -q "^OK: " "$T/out" || fail "verify tiny-$q.cmf"
done

# --- info: geometry of the reference tiny model (shared/README.md: hidden 32, 2 layers, 4 heads / 2 KV heads,
# head_dim 8, vocab 128, an MTP head, task masks and a tokenizer.json in the vocab section) ---
expect_ok "$CMF_BIN" info "$M"
cp "$T/out" "$T/info.txt"
want() { grep -qE "$1" "$T/info.txt" || fail "info lacks /$1/"; }
want '^arch: +tiny-qwen$'
want '^quant: +Q8_ROW'
want 'hidden_size 32, layers 2, heads 4, kv heads 2, head_dim 8'
want 'vocab 128, context 128'
want "^format: +CMF v2, $count tensors"
want '^features: +0x03 TENSOR_DIR BINARY_MASKS$'
want "^vocab: +$(u64 "$M" 88) B"
want '^chat template: no'
want '^skills: +none'
want '^MTP head: .*arch\.mtp \(1 layers, [0-9]+ tensors\): present, ignored by this version'
want '^task masks: +2 \(general, coding\); active by default: general'
want '^sparse index: +present, ignored'

# --- info --tensors: every row equals the independent reading (name, dtype, shape, bytes) ---
expect_ok "$CMF_BIN" info "$M" --tensors
n_rows=0
while IFS='|' read -r name dt shape nbytes off; do
    row=$(awk -v n="$name" '$1 == n' "$T/out")
    [ -n "$row" ] || { fail "info --tensors lacks $name"; continue; }
    got=$(echo "$row" | awk '{ s = ""; for (i = 3; i < NF; i++) s = s (i > 3 ? " " : "") $i; print $2 "|" s "|" $NF }')
    [ "$got" = "$dt|$shape|$nbytes" ] || fail "info --tensors row of $name: '$got' != '$dt|$shape|$nbytes'"
    n_rows=$((n_rows + 1))
done <"$T/dir.txt"
[ "$n_rows" -eq "$count" ] || fail "compared $n_rows rows of $count"
grep -qE "^$count tensor\(s\)" "$T/out" || fail "info --tensors total line"

# --tensors PREFIX filters by name prefix
prefix="model.layers.1."
want_n=$(grep -c "^$prefix" "$T/dir.txt")
expect_ok "$CMF_BIN" info "$M" --tensors "$prefix"
grep -qE "^$want_n tensor\(s\)" "$T/out" || fail "--tensors $prefix: want $want_n rows: $(tail -1 "$T/out")"
[ "$(grep -c "^$prefix" "$T/out")" -eq "$want_n" ] || fail "--tensors $prefix row count"
[ "$(grep -c '^model\.layers\.0\.' "$T/out")" -eq 0 ] || fail "--tensors $prefix shows other tensors"

# --- verify: one payload byte flipped in the largest tensor -> exit 1, names the tensor ---
IFS='|' read -r big _ _ big_n big_off < <(sort -t'|' -k4 -n "$T/dir.txt" | tail -1)
cp "$M" "$T/flip.cmf"
flip_byte "$T/flip.cmf" $((data_off + big_off + big_n / 2))
"$CMF_BIN" verify "$T/flip.cmf" >"$T/out" 2>"$T/err"
rc=$?
[ "$rc" -eq 1 ] || fail "verify of a flipped payload: exit $rc (want 1)"
grep -qF "$big" "$T/err" || fail "verify does not name the tensor $big: $(cat "$T/err")"
[ "$(wc -l <"$T/err")" -eq 1 ] || fail "verify: one flipped byte should give one problem: $(cat "$T/err")"
[ ! -s "$T/out" ] || fail "verify printed OK for a corrupt file"
clean_stderr "$T/err" || fail "sanitizer output from verify"
# the damaged file still opens: info works (hashes are checked by verify only)
expect_ok "$CMF_BIN" info "$T/flip.cmf"

# --- verify: a flipped header byte -> the header hash problem ---
cp "$M" "$T/hdr.cmf"
hdr_off=$(u64 "$M" 16)
# flip a byte inside a JSON string value ("tiny-qwen" -> still valid JSON) so that open succeeds
pos=$(grep -abo 'tiny-qwen' "$T/hdr.cmf" | head -1 | cut -d: -f1)
printf 'T' | dd of="$T/hdr.cmf" bs=1 seek="$pos" conv=notrunc status=none
"$CMF_BIN" verify "$T/hdr.cmf" >"$T/out" 2>"$T/err"
[ $? -eq 1 ] || fail "verify of a changed header: want exit 1"
grep -qi "header" "$T/err" || fail "verify does not name the header: $(cat "$T/err")"
[ "$pos" -gt "$hdr_off" ] || fail "header edit position"

# --- verify: bytes after the last section and non-zero padding are warnings (CMF_FORMAT.md 1.6: the writer
# zero-fills gaps, readers only require alignment), the file is still OK ---
cp "$M" "$T/junk.cmf"
printf 'JUNK!' >>"$T/junk.cmf"
expect_ok "$CMF_BIN" verify "$T/junk.cmf"
grep -q "^OK: " "$T/out" || fail "verify with trailing bytes: $(cat "$T/out")"
grep -q "warning: 5 byte(s) after the last section" "$T/err" || fail "verify: no trailing-bytes warning: $(cat "$T/err")"
dir_len=$(u64 "$M" 40)
if [ $((dir_off + dir_len)) -lt "$data_off" ]; then
    cp "$M" "$T/pad.cmf"
    flip_byte "$T/pad.cmf" $((dir_off + dir_len))
    expect_ok "$CMF_BIN" verify "$T/pad.cmf"
    grep -q "warning: 1 non-zero byte(s) in the padding .*first at 0x$(printf %x $((dir_off + dir_len))))" "$T/err" ||
        fail "verify: no padding warning: $(cat "$T/err")"
else
    fail "the reference file has no gap between its directory and its blob (test needs one)"
fi

# --- verify: the envelope's bytes 0x00-0x6F are not hashed (CMF_FORMAT.md 1.2, 1.10); fields there that differ
# from what writers put are warnings, the file is still OK (review11 item 11). The reference's four files and a
# file of our converter give none (the latter is checked below, after the yarn conversion). ---
for q in F16 Q8_ROW Q8_2F Q4_BLOCK; do
    expect_ok "$CMF_BIN" verify "$REF/tiny-$q.cmf"
    [ ! -s "$T/err" ] || fail "verify tiny-$q.cmf printed on stderr: $(cat "$T/err")"
done
cp "$M" "$T/flags.cmf"
flip_byte "$T/flags.cmf" 9 # the reserved flags (u32 at 0x08)
expect_ok "$CMF_BIN" verify "$T/flags.cmf"
grep -q "^OK: " "$T/out" || fail "verify with flags set: $(cat "$T/out")"
grep -q "warning: envelope@0x8: flags is 0xff00, not 0" "$T/err" || fail "verify: no flags warning: $(cat "$T/err")"
# envelope_flips FILE: an absent section's offset set (masks_off at 0x40, index_off's byte 0x64) and a
# required_features bit the content does not imply (QUANT_2F, 0x04, with no q8_2f tensor): one warning each
envelope_flips() {
    [ "$(u64 "$1" 72)" = 0 ] && [ "$(u64 "$1" 104)" = 0 ] && [ "$(u32 "$1" 12)" = 1 ] ||
        { fail "$1: want a file without masks and index sections and features 0x1"; return; }
    cp "$1" "$T/env.cmf"
    flip_byte "$T/env.cmf" $((0x40)); flip_byte "$T/env.cmf" $((0x64))
    printf '\005' | dd of="$T/env.cmf" bs=1 seek=12 conv=notrunc status=none
    expect_ok "$CMF_BIN" verify "$T/env.cmf"
    grep -q "^OK: " "$T/out" || fail "verify with envelope flips: $(cat "$T/out")"
    grep -q "warning: envelope@0x40: masks_off is 0xff but masks_len is 0" "$T/err" &&
        grep -q "warning: envelope@0x60: index_off is 0xff00000000 but index_len is 0" "$T/err" &&
        grep -q "warning: envelope@0xc: required_features is 0x5, but the content implies 0x1 .*differing: 0x4" \
            "$T/err" && [ "$(wc -l <"$T/err")" -eq 3 ] || fail "verify: envelope warnings: $(cat "$T/err")"
}

# --- a GGUF given where a CMF file is expected: the error says how to convert it ---
expect_error 1 "$CMF_BIN" info "$CMF_SHARED/data/models/stories260K-gguf/stories260Ktok512.gguf"
grep -q "cmf convert" "$T/err" || fail "GGUF magic: no hint to cmf convert: $(cat "$T/err")"

# --- info shows rope scaling: hf-tiny qwen2 with a YaRN profile (transformers' default attention factor
# 1 + 0.1 ln 4 = 1.13863) ---
cp -r "$CMF_SHARED/data/hf-tiny/qwen2" "$T/yarn" && chmod -R u+w "$T/yarn"
sed -i 's/"rope_type": "default"/"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 128/' \
    "$T/yarn/config.json"
grep -q '"yarn"' "$T/yarn/config.json" || fail "could not write the yarn config"
expect_ok "$CMF_BIN" convert "$T/yarn" -o "$T/yarn.cmf"
expect_ok "$CMF_BIN" verify "$T/yarn.cmf" # our writer's file: no warning; then the envelope flips above
[ ! -s "$T/err" ] || fail "verify of our converter's file printed on stderr: $(cat "$T/err")"
envelope_flips "$T/yarn.cmf"
expect_ok "$CMF_BIN" info "$T/yarn.cmf"
grep -q "rope scaling yarn x4 of 128 positions, attention factor 1.13863" "$T/out" ||
    fail "info lacks the yarn scaling: $(grep '^model:' "$T/out")"
# the YaRN context (4 x 128 = 512 here, as max_position_embeddings) is the trained one: -c 512 gives no warning
expect_ok "$CMF_BIN" run "$T/yarn.cmf" --tokens 1,2,3 -n 1 -c 512
grep -q "larger than the trained context" "$T/err" && fail "-c 512 warned on a 4 x 128 YaRN model: $(cat "$T/err")"
# without original_max_position_embeddings the original window is max_position_embeddings (transformers' rule):
# 4 x 512 = 2048 positions, so -c 2048 gives no warning and -c 2049 does
cp -r "$CMF_SHARED/data/hf-tiny/qwen2" "$T/yarn2" && chmod -R u+w "$T/yarn2"
sed -i 's/"rope_type": "default"/"rope_type": "yarn", "factor": 4.0/' "$T/yarn2/config.json"
expect_ok "$CMF_BIN" convert "$T/yarn2" -o "$T/yarn2.cmf"
expect_ok "$CMF_BIN" info "$T/yarn2.cmf"
grep -q "rope scaling yarn x4 of 512 positions" "$T/out" || fail "yarn2: $(grep '^model:' "$T/out")"
expect_ok "$CMF_BIN" run "$T/yarn2.cmf" --tokens 1,2,3 -n 1 -c 2048
grep -q "larger than the trained context" "$T/err" && fail "-c 2048 warned on a 4 x 512 YaRN model"
expect_ok "$CMF_BIN" run "$T/yarn2.cmf" --tokens 1,2,3 -n 1 -c 2049
grep -q "larger than the trained context 2048" "$T/err" || fail "-c 2049 did not warn: $(cat "$T/err")"

finish
