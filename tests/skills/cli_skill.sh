# cli_skill.sh — `cmf skill add|list|export|apply` and `cmf masks` end to end: a skill baked into hf-tiny qwen2
# from hf-tiny qwen3 (their FFN tensors share shapes, their attention does not), checked against an independent
# reading of the written files with od (CMF_FORMAT.md §1.2, §1.5), and the masks of the reference's tiny-F16.cmf.
. "$(dirname "$0")/../cli/lib.sh"
HF="$CMF_SHARED/data/hf-tiny"

expect_ok "$CMF_BIN" convert "$HF/qwen2" -o "$T/base.cmf" --quant f16 --no-progress || finish
expect_ok "$CMF_BIN" convert "$HF/qwen3" -o "$T/other.cmf" --quant f16 --no-progress || finish

# names in the directory of a file, one per line (independent reader: lib.sh's cmf_dir)
names() {
    local dt nd shape off nbytes hash name
    cmf_dir "$1" | while read -r dt nd shape off nbytes hash name; do echo "$name"; done
}

# --- add: the FFN of layers 0-1 from qwen3 (6 tensors, all different) ---
expect_ok "$CMF_BIN" skill add "$T/base.cmf" --from "$HF/qwen3" --id q3 --name "Qwen three" --tensors ffn \
    --layers 0-1 -o "$T/baked.cmf"
grep -q "skill 'q3': 6 tensor(s) stored" "$T/out" || fail "add output: $(cat "$T/out")"
names "$T/baked.cmf" | grep '^skill\.' | sort >"$T/skill-names"
for l in 0 1; do for p in gate up down; do echo "skill.q3.model.layers.$l.mlp.${p}_proj.weight"; done; done | sort \
    >"$T/want-names"
cmp -s "$T/skill-names" "$T/want-names" || fail "stored skill tensors: $(cat "$T/skill-names")"
expect_ok "$CMF_BIN" verify "$T/baked.cmf" || fail "baked file does not verify"

# --- list ---
expect_ok "$CMF_BIN" skill list "$T/baked.cmf"
grep -q '^  q3 .*Qwen three.* 6 tensor(s), .* MB, layers \[0, 1\], not routable' "$T/out" || fail "list: $(cat "$T/out")"
grep -q 'quality: not measured' "$T/out" || fail "list quality: $(cat "$T/out")"
expect_ok "$CMF_BIN" skill list "$T/base.cmf" && grep -qx 'no skills' "$T/out" || fail "list on a plain model"

# --- attention shapes differ: an error naming the tensor ---
expect_error 1 "$CMF_BIN" skill add "$T/base.cmf" --from "$HF/qwen3" --id bad --tensors attn -o "$T/never.cmf"
grep -q 'self_attn.q_proj' "$T/err" || fail "shape error: $(cat "$T/err")"
[ ! -e "$T/never.cmf" ] || fail "a failed add left an output file"
expect_error 2 "$CMF_BIN" skill add "$T/base.cmf" --from "$HF/qwen3" -o "$T/never.cmf"
expect_error 2 "$CMF_BIN" skill add "$T/base.cmf" --from "$HF/qwen3" --id x --tensors norms -o "$T/never.cmf"
expect_error 2 "$CMF_BIN" skill frobnicate
expect_error 1 "$CMF_BIN" skill export "$T/baked.cmf" --id nope -o "$T/never.cmf"

# --- export against the base, apply ---
expect_ok "$CMF_BIN" skill export "$T/baked.cmf" --id q3 --base "$T/base.cmf" -o "$T/q3.skill.cmf"
feat=$(u32 "$T/q3.skill.cmf" 12)
[ $((feat & 64)) -eq 64 ] || fail "SKILL_FILE bit not set (features $feat)"
names "$T/q3.skill.cmf" | sort >"$T/exp-names"
sed 's/^skill\.q3\.//' "$T/want-names" | sort | cmp -s - "$T/exp-names" || fail "exported names: $(cat "$T/exp-names")"
base_hash=$(printf '%016x' "$(u64 "$T/base.cmf" 120)")
hdr_off=$(u64 "$T/q3.skill.cmf" 16); hdr_len=$(u64 "$T/q3.skill.cmf" 24)
dd if="$T/q3.skill.cmf" bs=1 skip="$hdr_off" count="$hdr_len" status=none | grep -q "\"base_dir_hash\":\"$base_hash\"" \
    || fail "base_dir_hash is not $base_hash"

expect_ok "$CMF_BIN" skill apply "$T/base.cmf" "$T/q3.skill.cmf" -o "$T/applied.cmf"
grep -q 'applied: 6 tensor(s) replaced, 0 dropped' "$T/out" || fail "apply: $(cat "$T/out")"
[ ! -s "$T/err" ] || fail "apply warned: $(cat "$T/err")"
expect_ok "$CMF_BIN" verify "$T/applied.cmf"
feat=$(u32 "$T/applied.cmf" 12)
[ $((feat & 64)) -eq 0 ] || fail "SKILL_FILE bit set on an applied model"

expect_error 1 "$CMF_BIN" skill apply "$T/other.cmf" "$T/q3.skill.cmf" -o "$T/never.cmf"
grep -q 'different base' "$T/err" || fail "mismatch message: $(cat "$T/err")"
expect_ok "$CMF_BIN" skill apply "$T/other.cmf" "$T/q3.skill.cmf" -o "$T/forced.cmf" --force
grep -q 'warning: .*--force' "$T/err" || fail "no warning under --force: $(cat "$T/err")"

# --- export without --base binds the skill to the multi-skill file itself: the refusal says how to re-export ---
expect_ok "$CMF_BIN" skill export "$T/baked.cmf" --id q3 -o "$T/self.skill.cmf"
expect_error 1 "$CMF_BIN" skill apply "$T/base.cmf" "$T/self.skill.cmf" -o "$T/never.cmf"
grep -q "different base .*exported from baked.cmf.*re-export it with \`cmf skill export baked.cmf --id q3 --base $T/base.cmf" \
    "$T/err" || fail "apply of a self-bound export: $(cat "$T/err")"
expect_ok "$CMF_BIN" skill apply "$T/baked.cmf" "$T/self.skill.cmf" -o "$T/self-applied.cmf"

# --- provenance.tool ("written by" in cmf info) names the command that wrote each file ---
for f in base:convert baked:"skill add" q3.skill:"skill export" applied:"skill apply"; do
    expect_ok "$CMF_BIN" info "$T/${f%%:*}.cmf"
    grep -qx "written by: *cmf ${f#*:}" "$T/out" || fail "info ${f%%:*}.cmf: $(grep 'written by' "$T/out")"
done

# --- masks ---
expect_ok "$CMF_BIN" masks "$REF/tiny-F16.cmf"
grep -q '^default task: general' "$T/out" || fail "masks default task: $(cat "$T/out")"
grep -q 'general .*Fallback .*<- active by default' "$T/out" || fail "masks general: $(cat "$T/out")"
grep -q 'coding .*Normal .*quality unmeasured' "$T/out" || fail "masks coding: $(cat "$T/out")"
CMF_TASK=off expect_ok "$CMF_BIN" masks "$REF/tiny-F16.cmf" --task coding
grep -q 'active by default: none' "$T/out" && grep -q -- '--task coding activates: coding' "$T/out" \
    || fail "masks CMF_TASK=off: $(cat "$T/out")"
expect_ok "$CMF_BIN" masks "$T/base.cmf" && grep -qx 'no task masks' "$T/out" || fail "masks on a maskless file"
expect_error 2 "$CMF_BIN" masks
finish
