#!/usr/bin/env bash
# `cmf convert --o1 SPEC` end to end: the flag writes provenance.o1_attn, `cmf run` then turns the far field on
# by itself (its stderr line "O(1) far field on N attention cache(s)"), `--o1 off` and CMF_O1=off override the file, and
# bad flags are usage errors (exit 2) or model errors (exit 1) with a message and no output file.
set -u
T="$CMF_TMP/o1_convert_cli"
mkdir -p "$T"
SRC="$CMF_SHARED/data/hf-tiny/qwen3"
OUT="$T/q3.cmf"
fail=0
bad() { echo "FAIL: $*"; fail=1; }
rm -f "$OUT"
"$CMF_BIN" convert "$SRC" -o "$OUT" --o1 deep2 --o1-m 16 --o1-window 8 --o1-sink 2 2> "$T/conv.err" || bad "convert --o1 deep2: exit $?: $(cat "$T/conv.err")"
grep -aq '"o1_attn":{"layers":\[1,2\],"m":16,"w":8,"sink":2}' "$OUT" || bad "the header has no o1_attn {layers [1,2], m 16, w 8, sink 2}"
IDS=$(seq -s, 1 40)
run() { "$CMF_BIN" run "$OUT" --tokens "$IDS" -n 3 --temp 0 --print-ids -t 1 "$@"; }
run > "$T/hint.out" 2> "$T/hint.err" || bad "run (hint): exit $?: $(cat "$T/hint.err")"
grep -q "O(1) far field on 2 attention cache(s)" "$T/hint.err" || bad "run with the hint: no far-field line: $(cat "$T/hint.err")"
run --o1 off > "$T/off.out" 2> "$T/off.err" || bad "run --o1 off: exit $?"
grep -q "O(1) far field" "$T/off.err" && bad "run --o1 off still uses the far field"
CMF_O1=off run > "$T/env.out" 2> "$T/env.err" || bad "CMF_O1=off run: exit $?"
grep -q "O(1) far field" "$T/env.err" && bad "CMF_O1=off still uses the far field"
cmp -s "$T/off.out" "$T/env.out" || bad "--o1 off and CMF_O1=off generate different ids"
run --o1 all > /dev/null 2> "$T/all.err" || bad "run --o1 all: exit $?"
grep -q "O(1) far field on 3 attention cache(s)" "$T/all.err" || bad "run --o1 all: $(cat "$T/all.err")"
# refusals: form errors before any work (exit 2), model errors after reading it (exit 1); no file either way
check() { # want_rc needle args...
    local want=$1 needle=$2; shift 2
    rm -f "$T/bad.cmf"
    "$CMF_BIN" convert "$SRC" -o "$T/bad.cmf" "$@" > /dev/null 2> "$T/bad.err"; local rc=$?
    [ "$rc" = "$want" ] || bad "convert $*: exit $rc, want $want"
    grep -q -- "$needle" "$T/bad.err" || bad "convert $*: message lacks '$needle': $(cat "$T/bad.err")"
    [ -e "$T/bad.cmf" ] && bad "convert $*: left an output file"
}
check 2 "deepN" --o1 deep0
check 2 "'x,y'" --o1 x,y
check 2 "need --o1" --o1-m 16
check 2 "must be in" --o1 all --o1-m 3
check 1 "out of range" --o1 0,5
SRC="$CMF_SHARED/data/hf-tiny/gemma2" check 1 "soft-capping" --o1 all
[ $fail = 0 ] && echo "convert --o1 writes the hint; run honours it; --o1 off and CMF_O1=off override; bad specs refused"
exit $fail
