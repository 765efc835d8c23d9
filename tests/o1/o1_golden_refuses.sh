#!/usr/bin/env bash
# o1_golden must fail on data that does not match: the real golden with its two output sets swapped (sink 4's
# outputs checked as sink 0's and back) is above the tolerance (exit 1); a truncated file and a missing file
# are bad input (exit 2) with a message naming the file.
set -u
G="$CMF_SHARED/data/golden/nystrom_golden.json"
T="$CMF_TMP/o1_golden_refuses"
mkdir -p "$T"
fail=0
sed 's/"out"/"o1tmpkey"/g; s/"out_sink0"/"out"/g; s/"o1tmpkey"/"out_sink0"/g' "$G" > "$T/swapped.json"
"$O1_GOLDEN" "$T/swapped.json" > "$T/swapped.out" 2> "$T/swapped.err"; rc=$?
[ "$rc" = 1 ] || { echo "swapped sets: exit $rc, expected 1"; cat "$T/swapped.err"; fail=1; }
[ "$(wc -l < "$T/swapped.out")" = 2 ] || { echo "swapped sets: expected 2 lines of max_err mean_err"; fail=1; }
head -c 20000 "$G" > "$T/trunc.json"
"$O1_GOLDEN" "$T/trunc.json" > /dev/null 2> "$T/trunc.err"; rc=$?
[ "$rc" = 2 ] || { echo "truncated: exit $rc, expected 2"; fail=1; }
grep -q "trunc.json" "$T/trunc.err" || { echo "truncated: message does not name the file"; cat "$T/trunc.err"; fail=1; }
"$O1_GOLDEN" "$T/no-such.json" > /dev/null 2> "$T/missing.err"; rc=$?
[ "$rc" = 2 ] || { echo "missing: exit $rc, expected 2"; fail=1; }
[ $fail = 0 ] && echo "o1_golden refuses swapped, truncated and missing goldens"
exit $fail
