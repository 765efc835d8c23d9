# cli_skill_donor.sh — skills acceptance, end to end through the command line (CMF_FORMAT.md §3.1, §3.2):
# a donor HF checkpoint is made from shared/data/hf-tiny/llama by perturbing every mlp.* weight
# (scripts/skills/make_donor.c, $MAKE_DONOR); `cmf skill add base.cmf --from donor --id donor --tensors ffn`
# then gives, under `cmf eval --skill donor`, the logits of the donor converted on its own, and under
# `--skill none` the backbone's; the file grows by the skill tensors only (read from the directories with od,
# an independent reader of §1.2/§1.5/§1.6).
. "$(dirname "$0")/../cli/lib.sh"
: "${MAKE_DONOR:?MAKE_DONOR must name the make_donor binary}"
SRC="$CMF_SHARED/data/hf-tiny/llama"

mkdir -p "$T/donor"
expect_ok "$MAKE_DONOR" "$SRC" "$T/donor" || finish
n_layers=$(grep -o '"num_hidden_layers": *[0-9]*' "$SRC/config.json" | grep -o '[0-9]*$')
grep -q "^make_donor: $((3 * n_layers)) mlp tensor(s) perturbed" "$T/out" || fail "generator: $(cat "$T/out")"

expect_ok "$CMF_BIN" convert "$SRC" -o "$T/base.cmf" --quant f32 --no-progress || finish
expect_ok "$CMF_BIN" convert "$T/donor" -o "$T/donor.cmf" --quant f32 --no-progress || finish
expect_ok "$CMF_BIN" skill add "$T/base.cmf" --from "$T/donor" --id donor --tensors ffn -o "$T/with.cmf" || finish
grep -q "skill 'donor': $((3 * n_layers)) tensor(s) stored" "$T/out" || fail "add output: $(cat "$T/out")"
expect_ok "$CMF_BIN" verify "$T/with.cmf" || fail "with.cmf does not verify"

# --- logits: --skill donor == the donor alone; --skill none == the backbone ---
TOK="1,17,250,3,999,42,512,7,88,1023,5,600"
expect_ok "$CMF_BIN" eval "$T/with.cmf" --skill donor --tokens "$TOK" -o "$T/with-donor.f32" -t 1
expect_ok "$CMF_BIN" eval "$T/with.cmf" --skill none --tokens "$TOK" -o "$T/with-none.f32" -t 1
expect_ok "$CMF_BIN" eval "$T/with.cmf" --tokens "$TOK" -o "$T/with-default.f32" -t 1
expect_ok "$CMF_BIN" eval "$T/donor.cmf" --tokens "$TOK" -o "$T/donor.f32" -t 1
expect_ok "$CMF_BIN" eval "$T/base.cmf" --tokens "$TOK" -o "$T/base.f32" -t 1

# same_logits A B: same length, every |a-b| <= 1e-6 * max|b| (relative to the largest reference logit).
same_logits() {
    [ "$(stat -c %s "$1")" -eq "$(stat -c %s "$2")" ] || return 1
    paste <(od -An -v -t f4 -w4 "$1") <(od -An -v -t f4 -w4 "$2") | awk '
        { a[NR] = $1; b[NR] = $2; m = ($2 < 0 ? -$2 : $2); if (m > mx) mx = m }
        END {
            if (NR == 0 || mx == 0) exit 1
            for (i = 1; i <= NR; i++) { d = a[i] - b[i]; if (d < 0) d = -d; if (d > 1e-6 * mx) exit 1 }
        }'
}
want_bytes=$((12 * $(grep -o '"vocab_size": *[0-9]*' "$SRC/config.json" | grep -o '[0-9]*$') * 4))
[ "$(stat -c %s "$T/donor.f32")" -eq "$want_bytes" ] || fail "donor logits: $(stat -c %s "$T/donor.f32") bytes"
same_logits "$T/with-donor.f32" "$T/donor.f32" || fail "--skill donor differs from the donor converted alone"
same_logits "$T/with-none.f32" "$T/base.f32" || fail "--skill none differs from the backbone"
same_logits "$T/with-default.f32" "$T/base.f32" || fail "no --skill differs from the backbone"
same_logits "$T/donor.f32" "$T/base.f32" && fail "the donor's logits equal the backbone's: the test proves nothing"
expect_error 1 "$CMF_BIN" eval "$T/with.cmf" --skill nope --tokens "$TOK" -o "$T/never.f32"
grep -q "nope" "$T/err" || fail "unknown skill message: $(cat "$T/err")"

# --- size: the file grows by the skill tensors (and their alignment padding) only ---
# dir_entries FILE: "name off nbytes hash" per directory record (§1.5), in directory order (lib.sh's cmf_dir).
dir_entries() {
    local dt nd shape off nbytes hash name
    cmf_dir "$1" | while read -r dt nd shape off nbytes hash name; do echo "$name $off $nbytes $hash"; done
}
dir_entries "$T/base.cmf" | sort >"$T/base-dir"
dir_entries "$T/with.cmf" >"$T/with-dir-order"
sort "$T/with-dir-order" >"$T/with-dir"
# every backbone record is unchanged (name, offset, size, hash): the backbone's blob is not moved or rewritten
grep -v '^skill\.' "$T/with-dir" | cmp -s - "$T/base-dir" || fail "backbone records differ between base and with"
# the skill records are exactly skill.donor.<every mlp weight>
grep '^skill\.' "$T/with-dir" | cut -d' ' -f1 >"$T/skill-names"
grep '\.mlp\.' "$T/base-dir" | cut -d' ' -f1 | sed 's/^/skill.donor./' | sort | cmp -s - "$T/skill-names" ||
    fail "skill tensors: $(tr '\n' ' ' <"$T/skill-names")"
# each skill tensor holds the donor's payload (same hash and size as the donor file's tensor of the base name)
dir_entries "$T/donor.cmf" | sort >"$T/donor-dir"
while read -r name off nbytes hash; do
    grep -q "^${name#skill.donor.} [0-9]* $nbytes $hash\$" "$T/donor-dir" || fail "$name: not the donor's payload"
done < <(grep '^skill\.' "$T/with-dir")

# blob growth: starting at the base's data_len, each skill tensor (in offset order) at the writer's alignment
# (4096 for >= 16 KiB, else 64, §1.6/§1.12), back to back; the new data_len is the end of the last one.
base_data_off=$(u64 "$T/base.cmf" 48); base_data_len=$(u64 "$T/base.cmf" 56)
with_data_off=$(u64 "$T/with.cmf" 48); with_data_len=$(u64 "$T/with.cmf" 56)
cursor=$base_data_len; skill_bytes=0; padding=0
while read -r name off nbytes hash; do
    align=64; [ "$nbytes" -ge 16384 ] && align=4096
    next=$(((cursor + align - 1) / align * align))
    [ "$off" -eq "$next" ] || fail "$name at offset $off, want $next"
    padding=$((padding + next - cursor)); skill_bytes=$((skill_bytes + nbytes)); cursor=$((next + nbytes))
done < <(grep '^skill\.' "$T/with-dir" | sort -k2,2n)
[ "$with_data_len" -eq "$cursor" ] || fail "data_len $with_data_len, want $cursor"
[ "$with_data_len" -eq $((base_data_len + skill_bytes + padding)) ] || fail "blob grew by more than the skill"
# everything before the blob: header + directory (one more record per skill tensor, the registry record),
# padded to 4096 (§1.12 step 7); no other section in either file
for f in base with; do
    hl=$(u64 "$T/$f.cmf" 24); dl=$(u64 "$T/$f.cmf" 40)
    want=$(((128 + hl + dl + 4095) / 4096 * 4096))
    [ "$(u64 "$T/$f.cmf" 48)" -eq "$want" ] || fail "$f: data_off is not roundup(128 + header + dir, 4096)"
    [ "$(u64 "$T/$f.cmf" 72)" -eq 0 ] && [ "$(u64 "$T/$f.cmf" 88)" -eq 0 ] && [ "$(u64 "$T/$f.cmf" 104)" -eq 0 ] ||
        fail "$f: unexpected masks/vocab/index section"
done
base_size=$(stat -c %s "$T/base.cmf"); with_size=$(stat -c %s "$T/with.cmf")
[ "$base_size" -eq $((base_data_off + base_data_len)) ] || fail "base size $base_size"
[ "$with_size" -eq $((with_data_off + with_data_len)) ] || fail "with size $with_size"
growth=$((with_size - base_size))
[ "$growth" -eq $((skill_bytes + padding + with_data_off - base_data_off)) ] || fail "growth $growth"
# the metadata part (header + directory, page-rounded) moves the blob by at most one page here
[ $((with_data_off - base_data_off)) -le 4096 ] || fail "header+directory grew by more than a page"
echo "file grew by $growth bytes: $skill_bytes skill bytes + $padding blob padding + $((with_data_off - base_data_off))" \
    "header/directory page padding"
finish
