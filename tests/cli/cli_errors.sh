# cli_errors.sh — bad input gives ONE clear line on stderr and a non-zero exit (2 usage, 1 runtime), never a
# crash or a sanitizer report; --help and --version succeed.
. "$(dirname "$0")/lib.sh"
M="$REF/tiny-Q8_ROW.cmf"

# --help / --version
expect_ok "$CMF_BIN" --help && grep -q "usage: cmf" "$T/out" || fail "cmf --help"
expect_ok "$CMF_BIN" --version && grep -qE '^cmf [0-9]+\.[0-9]+\.[0-9]+$' "$T/out" || fail "cmf --version"
for c in info verify convert run eval; do
    expect_ok "$CMF_BIN" "$c" --help && grep -q "usage: cmf $c" "$T/out" || fail "cmf $c --help"
done

# usage errors: exit 2
"$CMF_BIN" >"$T/out" 2>"$T/err"; rc=$? # a bare cmf: the usage on stderr (cli_review11.sh checks its text)
[ "$rc" -eq 2 ] && grep -q "usage: cmf" "$T/err" || fail "bare cmf: exit $rc: $(cat "$T/err")"
expect_error 2 "$CMF_BIN" frobnicate && grep -q "unknown command 'frobnicate'" "$T/err" || fail "unknown command text"
expect_error 2 "$CMF_BIN" --frob
# a switch given "=value" is refused, not taken as on (--json=0 turned JSON mode on); a value option's "=" form works
expect_error 2 "$CMF_BIN" run x.cmf -p hi --json=0 && grep -qxF "cmf run: --json takes no value (given '--json=0'; see cmf run --help)" "$T/err" ||
    fail "run --json=0: $(cat "$T/err")"
expect_error 2 "$CMF_BIN" chat x.cmf --no-think=false && grep -q "no-think takes no value" "$T/err" || fail "chat --no-think=false: $(cat "$T/err")"
expect_error 2 "$CMF_BIN" info
expect_error 2 "$CMF_BIN" info "$M" --bogus && grep -q "unknown option '--bogus'" "$T/err" || fail "unknown option text"
# llama.cpp's layer offload flag points to --gpu
expect_error 2 "$CMF_BIN" run "$M" -ngl 99 -p hi && grep -q "unknown option '-ngl': cmf runs the whole model on the GPU with --gpu" "$T/err" ||
    fail "-ngl hint: $(cat "$T/err")"
expect_error 2 "$CMF_BIN" verify "$M" extra
expect_error 2 "$CMF_BIN" run "$M" -p
expect_error 2 "$CMF_BIN" run "$M" -p hi --temp abc
grep -qx "cmf run: invalid value 'abc' for --temp (expected a number in \[0, 1000000\])" "$T/err" ||
    fail "--temp abc message: $(cat "$T/err")"
expect_error 2 "$CMF_BIN" run "$M" -p hi --temp=1.5x
expect_error 2 "$CMF_BIN" run "$M" -p hi -n 12abc
expect_error 2 "$CMF_BIN" run "$M" -p hi -n -3
expect_error 2 "$CMF_BIN" run "$M" -p hi --top-p 1.5 && grep -q -- "--top-p" "$T/err" || fail "--top-p range text"
expect_error 2 "$CMF_BIN" run "$M" -p hi --seed -1x
expect_error 2 "$CMF_BIN" run "$M"
expect_error 2 "$CMF_BIN" run "$M" -p hi --tokens 1,2
expect_error 2 "$CMF_BIN" run "$M" --tokens 1,,2
expect_error 2 "$CMF_BIN" run "$M" --tokens 1,x
expect_error 2 "$CMF_BIN" eval "$M" --tokens 1,2
expect_error 2 "$CMF_BIN" eval "$M" -o "$T/x.f32"
expect_error 2 "$CMF_BIN" eval "$M" --tokens 1,2, -o "$T/x.f32"
expect_error 2 "$CMF_BIN" eval "$M" --tokens 99999999999 -o "$T/x.f32"
expect_error 2 "$CMF_BIN" convert "$M"
expect_error 2 "$CMF_BIN" convert "$CMF_SHARED/data/hf-tiny/llama" -o "$T/o.cmf" --quant q3
[ ! -e "$T/o.cmf" ] || fail "convert with a bad --quant left a file"

# runtime errors: exit 1
expect_error 1 "$CMF_BIN" info "$T/missing.cmf"
expect_error 1 "$CMF_BIN" verify "$T/missing.cmf"
expect_error 1 "$CMF_BIN" run "$T/missing.cmf" -p hi
# a prompt file that is not UTF-8: the error names the file
printf 'a\xffb' >"$T/bad-utf8.txt"
expect_error 1 "$CMF_BIN" run "$M" -f "$T/bad-utf8.txt" -n 1 &&
    { grep -q "bad-utf8.txt" "$T/err" || fail "run -f with invalid UTF-8: $(cat "$T/err")"; }
# a checkpoint folder given to run: the error says to convert it first
expect_error 1 "$CMF_BIN" run "$CMF_SHARED/data/hf-tiny/llama" -p hi &&
    { grep -q "is a directory.*cmf convert" "$T/err" || fail "run DIR: $(cat "$T/err")"; }
expect_error 1 "$CMF_BIN" eval "$T/missing.cmf" --tokens 1 -o "$T/x.f32"
expect_error 1 "$CMF_BIN" eval "$M" --tokens-file "$T/missing.txt" -o "$T/x.f32"
expect_error 1 "$CMF_BIN" convert "$T/missing-dir" -o "$T/o.cmf"
echo "this is not a model" >"$T/text.cmf"
expect_error 1 "$CMF_BIN" info "$T/text.cmf"
expect_error 1 "$CMF_BIN" run "$T/text.cmf" -p hi
expect_error 1 "$CMF_BIN" convert "$T/text.cmf" -o "$T/o.cmf"
head -c 1000 "$M" >"$T/trunc.cmf"
expect_error 1 "$CMF_BIN" info "$T/trunc.cmf"
expect_error 1 "$CMF_BIN" verify "$T/trunc.cmf"
expect_error 1 "$CMF_BIN" eval "$T/trunc.cmf" --tokens 1 -o "$T/x.f32"

# a corrupt directory record: the first tensor's dtype byte (record +6) set to an unknown id
cp "$M" "$T/baddtype.cmf"
dir_off=$(u64 "$M" 32)
printf '\310' | dd of="$T/baddtype.cmf" bs=1 seek=$((dir_off + 16 + 6)) conv=notrunc status=none
expect_error 1 "$CMF_BIN" info "$T/baddtype.cmf"
expect_error 1 "$CMF_BIN" run "$T/baddtype.cmf" --tokens 1 -n 1
# a tensor whose extent runs past the weight blob (record +40: nbytes)
cp "$M" "$T/badsize.cmf"
printf '\377\377\377\177' | dd of="$T/badsize.cmf" bs=1 seek=$((dir_off + 16 + 40)) conv=notrunc status=none
expect_error 1 "$CMF_BIN" eval "$T/badsize.cmf" --tokens 1 -o "$T/x.f32"
[ ! -e "$T/x.f32" ] || fail "a failed eval left an output file"

finish
