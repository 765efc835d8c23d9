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

# cmf_dir FILE: the tensor directory of a CMF file (CMF_FORMAT.md §1.2, §1.5), read with od and awk only (an
# independent reader: no cmf code), one line per record in directory order:
#   DTYPE NDIM SHAPE OFF NBYTES HASH NAME
# DTYPE and NDIM the record's u8s, SHAPE its first NDIM u32 dims joined by ',' ('-' when NDIM is 0), OFF, NBYTES
# and HASH its u64s in decimal, NAME the name's bytes from the pool (last: it is the rest of the line). dir_off and
# dir_len come from the envelope (one od); the directory section is one more od, as 8-byte words each printed both
# as one u64 (exact: awk's numbers are doubles, so the u64 fields are passed on as od's text) and as its 8 bytes.
cmf_dir() {
    local dir_off dir_len
    read -r dir_off dir_len < <(od -An -t u8 -j 32 -N 16 "$1")
    od -An -v -w8 -t u8 -t u1 -j "$dir_off" -N "$dir_len" "$1" | LC_ALL=C awk '
        NR % 2 == 1 { w[nw++] = $1; next }
        { for (i = 1; i <= NF; i++) b[nb++] = $i }
        function u(at, n,   v, k) { v = 0; for (k = n - 1; k >= 0; k--) v = v * 256 + b[at + k]; return v }
        END {
            count = w[0]; pool = w[1]
            for (i = 0; i < count; i++) {
                rec = 16 + 56 * i; nd = b[rec + 7]; shape = ""
                for (d = 0; d < nd; d++) shape = shape (d ? "," : "") u(rec + 8 + 4 * d, 4)
                name = ""; at = pool + u(rec, 4); len = u(rec + 4, 2)
                for (k = 0; k < len; k++) name = name sprintf("%c", b[at + k])
                printf "%d %d %s %s %s %s %s\n", b[rec + 6], nd, (nd ? shape : "-"), w[rec / 8 + 4], w[rec / 8 + 5],
                       w[rec / 8 + 6], name
            }
        }'
}

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
