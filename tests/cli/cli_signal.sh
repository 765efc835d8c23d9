# cli_signal.sh — `cmf requant` / `cmf convert` ended by SIGINT or SIGTERM mid-write: the process dies of the
# signal (exit 130 / 143), the writer's temporary files (OUT.tmp, OUT.blob.tmp) are removed, and a file that was
# already at OUT is untouched; an input that is one of those temporary files is refused. The input is a random q8 Llama-shaped file (make_random_llama, ~45 M parameters) so
# that one encoder thread takes seconds, long enough to be interrupted once the writer has created its blob file.
# Job control is on (set -m) so that the background command does not start with SIGINT ignored, as a script's
# background jobs otherwise do (cmf leaves an ignored signal ignored).
. "$(dirname "$0")/lib.sh"
set -m
: "${MAKE_RANDOM_LLAMA:?MAKE_RANDOM_LLAMA must name the make_random_llama binary}"
"$MAKE_RANDOM_LLAMA" "$T/big.cmf" q8 1024 2 4096 8192 16 4 >"$T/mk.out" 2>&1 || fail "make_random_llama: $(cat "$T/mk.out")"

# interrupted: SIG, then the command and its arguments; OUT is $T/out.cmf
interrupt() {
    local sig=$1; shift
    echo precious >"$T/out.cmf"
    rm -f "$T/out.cmf.tmp" "$T/out.cmf.blob.tmp"
    CMF_QUANT_THREADS=1 "$@" >"$T/sig.out" 2>"$T/sig.err" &
    local pid=$! i
    for i in $(seq 1 500); do [ -e "$T/out.cmf.blob.tmp" ] && break; sleep 0.02; done
    [ -e "$T/out.cmf.blob.tmp" ] || fail "$sig: the writer never created out.cmf.blob.tmp: $(cat "$T/sig.err")"
    kill -"$sig" "$pid"
    wait "$pid"
    local rc=$? want=130
    [ "$sig" = TERM ] && want=143
    [ "$rc" = "$want" ] || fail "$sig: exit $rc (want $want): $* $(cat "$T/sig.err")"
    [ ! -e "$T/out.cmf.tmp" ] && [ ! -e "$T/out.cmf.blob.tmp" ] || fail "$sig: temporary files left: $(ls "$T")"
    [ "$(cat "$T/out.cmf")" = precious ] || fail "$sig: the existing output was replaced"
    clean_stderr "$T/sig.err" || fail "$sig: sanitizer/crash output: $(cat "$T/sig.err")"
}
interrupt INT "$CMF_BIN" requant "$T/big.cmf" -o "$T/out.cmf" --quant q4t
interrupt TERM "$CMF_BIN" requant "$T/big.cmf" -o "$T/out.cmf" --quant q4tp

# an input named like one of the writer's temporary files of -o is refused before anything is written (review17b:
# requant overwrote it, or the signal handler removed it); the input stays whole
for sfx in .tmp .blob.tmp; do
    cp "$T/big.cmf" "$T/in.cmf$sfx"
    expect_error 1 "$CMF_BIN" requant "$T/in.cmf$sfx" -o "$T/in.cmf" --quant q8
    grep -q "its temporary file $T/in.cmf$sfx would replace" "$T/err" || fail "requant in$sfx: $(cat "$T/err")"
    cmp -s "$T/big.cmf" "$T/in.cmf$sfx" || fail "requant in$sfx: the input changed"
    [ ! -e "$T/in.cmf" ] || fail "requant in$sfx: wrote $T/in.cmf"
    rm -f "$T/in.cmf$sfx"
done

# an empty -o is a usage error before any work
expect_error 2 "$CMF_BIN" requant "$T/big.cmf" -o "" --quant q4
expect_error 2 "$CMF_BIN" convert "$T/big.cmf" -o ""
finish
