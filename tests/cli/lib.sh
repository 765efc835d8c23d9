# lib.sh — helpers for the shell tests of the `cmf` command line (sourced; needs CMF_BIN, CMF_SHARED, CMF_TMP).
set -u
: "${CMF_BIN:?CMF_BIN must name the cmf binary}"
: "${CMF_SHARED:?CMF_SHARED must name the shared/ folder}"
: "${CMF_TMP:=/tmp}"
FAILURES=0
REF="$CMF_SHARED/data/cmf-reference"
T="$CMF_TMP/cli-$(basename "$0" .sh)-$$"
mkdir -p "$T"
trap 'rm -rf "$T"' EXIT

fail() { echo "FAIL: $*" >&2; FAILURES=$((FAILURES + 1)); }

# No sanitizer report, no crash text in a stderr file.
clean_stderr() { ! grep -qE 'Sanitizer|runtime error:|Segmentation|Aborted|core dumped' "$1"; }

# expect_error CODE CMD...: exits with CODE, prints exactly one line on stderr (and no sanitizer output).
expect_error() {
    local want=$1; shift
    "$@" >"$T/out" 2>"$T/err"
    local rc=$?
    local lines; lines=$(wc -l <"$T/err")
    if [ "$rc" -ne "$want" ]; then fail "exit $rc (want $want): $*: $(head -c 300 "$T/err")"; return 1; fi
    if [ "$lines" -ne 1 ]; then fail "$lines stderr lines (want 1): $*: $(head -c 600 "$T/err")"; return 1; fi
    if ! clean_stderr "$T/err"; then fail "sanitizer/crash output: $*"; return 1; fi
    return 0
}

# expect_ok CMD...: exits 0 without sanitizer output; stdout in $T/out, stderr in $T/err.
expect_ok() {
    "$@" >"$T/out" 2>"$T/err"
    local rc=$?
    if [ "$rc" -ne 0 ]; then fail "exit $rc (want 0): $*: $(head -c 600 "$T/err")"; return 1; fi
    if ! clean_stderr "$T/err"; then fail "sanitizer/crash output: $*"; return 1; fi
    return 0
}

# Little-endian integers read straight from a file (an independent reader of the CMF layout, CMF_FORMAT.md §1).
u64() { od -An -t u8 -j "$2" -N 8 "$1" | tr -d ' '; }
u32() { od -An -t u4 -j "$2" -N 4 "$1" | tr -d ' '; }
u16() { od -An -t u2 -j "$2" -N 2 "$1" | tr -d ' '; }
u8()  { od -An -t u1 -j "$2" -N 1 "$1" | tr -d ' '; }

# flip_byte FILE OFFSET: inverts every bit of one byte in place.
flip_byte() {
    local b; b=$(u8 "$1" "$2")
    printf "$(printf '\\%03o' $((b ^ 255)))" | dd of="$1" bs=1 seek="$2" conv=notrunc status=none
}

finish() {
    if [ "$FAILURES" -ne 0 ]; then echo "$FAILURES check(s) failed" >&2; exit 1; fi
    echo "all checks passed"
    exit 0
}
