# cli_convert.sh — `cmf convert` end to end: Hugging Face and GGUF sources, --quant labels, verify of the
# output, clean failures that leave no file, and `cmf run` on the converted stories260K reproducing the greedy
# text documented in shared/data/models/stories260K/stories260K.md.
. "$(dirname "$0")/lib.sh"
HF="$CMF_SHARED/data/hf-tiny"
GGUF="$CMF_SHARED/data/models/stories260K-gguf/stories260Ktok512.gguf"

# Hugging Face sources: default f16, and each --quant recorded as the file label; every output verifies
expect_ok "$CMF_BIN" convert "$HF/qwen2" -o "$T/q.cmf"
grep -qE "^cmf convert: wrote $T/q.cmf \(quant_type F16: f16 x[0-9]+\) in " "$T/err" || fail "convert summary line: $(cat "$T/err")"
expect_ok "$CMF_BIN" verify "$T/q.cmf"
expect_ok "$CMF_BIN" info "$T/q.cmf" && grep -qE '^quant: +F16' "$T/out" || fail "default quant label F16"
for q in f32:F32 bf16:BF16 q8:Q8_ROW q8_2f:Q8_2F; do
    expect_ok "$CMF_BIN" convert "$HF/llama" -o "$T/l.cmf" --quant "${q%%:*}" --no-progress
    expect_ok "$CMF_BIN" verify "$T/l.cmf"
    expect_ok "$CMF_BIN" info "$T/l.cmf" && grep -qE "^quant: +${q##*:}" "$T/out" || fail "--quant ${q%%:*} label"
done
# the directory's dtypes are summarised next to the label: q4tp's file label is Q4_BLOCK (CMF_FORMAT §1)
expect_ok "$CMF_BIN" convert "$HF/llama" -o "$T/t.cmf" --quant q4tp --no-progress
grep -qE "^cmf convert: wrote $T/t.cmf \(--quant q4tp: q4tp x[0-9]+, f16 x[0-9]+\)" "$T/err" ||
    fail "q4tp summary names the quant asked for and the dtypes written: $(cat "$T/err")"
expect_ok "$CMF_BIN" info "$T/t.cmf" && grep -qE '^quant: +Q4_BLOCK' "$T/out" &&
    grep -qE '^dtypes: .*q4tp x[0-9]+, [0-9]+ B' "$T/out" || fail "q4tp: label / dtypes line: $(grep -E '^(quant|dtypes):' "$T/out")"
# the source geometry (config.json) shows up in info
expect_ok "$CMF_BIN" info "$T/l.cmf"
hs=$(grep -o '"hidden_size": *[0-9]*' "$HF/llama/config.json" | grep -o '[0-9]*$')
grep -q "hidden_size $hs," "$T/out" || fail "info hidden_size != config.json's $hs"

# failures leave no output file
mkdir -p "$T/empty"
expect_error 1 "$CMF_BIN" convert "$T/empty" -o "$T/none.cmf"
[ ! -e "$T/none.cmf" ] || fail "a failed conversion left $T/none.cmf"
expect_error 1 "$CMF_BIN" convert "$HF/llama" -o "$T/no-such-dir/x.cmf"
ls "$T" | grep -q 'tmp' && fail "a failed conversion left a temporary file: $(ls "$T")"

# the output may not be a file the conversion reads (review 9: -o DIR/model.safetensors replaced the checkpoint);
# the directory given with a trailing slash gives no doubled slash in messages
mkdir -p "$T/src"
cp "$HF/llama/config.json" "$HF/llama/model.safetensors" "$T/src/" && chmod -R u+w "$T/src"
expect_error 1 "$CMF_BIN" convert "$T/src/" -o "$T/src/model.safetensors" --no-progress
grep -q "which this conversion reads" "$T/err" || fail "-o = the checkpoint: $(cat "$T/err")"
grep -q "//" "$T/err" && fail "doubled slash: $(cat "$T/err")"
cmp -s "$T/src/model.safetensors" "$HF/llama/model.safetensors" || fail "the checkpoint was changed"
expect_error 1 "$CMF_BIN" convert "$T/empty/" -o "$T/none.cmf"
grep -q "//" "$T/err" && fail "doubled slash: $(cat "$T/err")"

# GGUF: default f32; greedy run reproduces the documented stories260K text
expect_ok "$CMF_BIN" convert "$GGUF" -o "$T/s.cmf"
expect_ok "$CMF_BIN" info "$T/s.cmf" && grep -qE '^quant: +F32' "$T/out" || fail "GGUF default quant label F32"
expect_ok "$CMF_BIN" run "$T/s.cmf" -p "Once upon a time" -n 40 --temp 0
gen=$(tr -d '\n' <"$T/out")
doc=$(grep -A1 '^\$ ./run stories260K/stories260K.bin -z stories260K/tok512.bin -t 0.0$' \
    "$CMF_SHARED/data/models/stories260K/stories260K.md" | tail -1)
[ -n "$gen" ] || fail "stories260K run printed nothing"
case "$doc" in
    "Once upon a time$gen"*) ;;
    *) fail "stories260K greedy text is not a prefix of the documented one: '$gen'" ;;
esac
grep -qE '^prompt: [0-9]+ tokens, [0-9.]+ tok/s \| decode: 40 tokens, [0-9.]+ tok/s$' "$T/err" ||
    fail "stats line: $(cat "$T/err")"

# hot sampling (byte-fallback tokens <0x..> get drawn at this temperature) still streams valid UTF-8 only
for seed in 1 2 3; do
    expect_ok "$CMF_BIN" run "$T/s.cmf" -p "Once" -n 120 --temp 5 --top-k 0 --top-p 1 --seed "$seed"
    iconv -f UTF-8 -t UTF-8 "$T/out" >/dev/null 2>&1 || fail "run --seed $seed wrote invalid UTF-8"
done

# a K-quant GGUF (tests/data/gguf_kquant): without --quant its Q2_K/Q4_K/Q6_K matrices become q8_row, said in one
# stderr line; with --quant f32 there is no such line and the file holds f32
KQ="$CMF_TESTDATA/gguf_kquant/model_kq.gguf"
expect_ok "$CMF_BIN" convert "$KQ" -o "$T/kq.cmf" --no-progress
[ "$(grep -c 're-encoded as q8_row' "$T/err")" = 1 ] &&
    grep -q '^cmf convert: warning: cmf has no dtype for these GGUF tensors (1 Q2_K, 3 Q4_K, 2 Q6_K)' "$T/err" ||
    fail "K-quant default note: $(cat "$T/err")"
expect_ok "$CMF_BIN" info "$T/kq.cmf" && grep -qE '^dtypes: .*q8_row x6' "$T/out" || fail "kq dtypes: $(grep dtypes "$T/out")"
expect_ok "$CMF_BIN" convert "$KQ" -o "$T/kq32.cmf" --quant f32 --no-progress
! grep -q 're-encoded' "$T/err" || fail "--quant f32 still re-encodes: $(cat "$T/err")"
expect_ok "$CMF_BIN" verify "$T/kq32.cmf"

finish
