# cli_messages.sh — the command line's message and exit-status contract across commands (cli.h):
#  - every bad number is one line "cmf <cmd>: invalid value 'V' for FLAG (expected ...)" (exit 2), for every
#    command that takes -t, and the other numeric flags' shapes (range, non-negative, seed);
#  - unknown options, missing values and malformed backend / far-field / looped-model values exit 2 in every
#    command that takes them (`--backend gpu` included), before the model is read;
#  - `cmf serve` takes --gpu / --backend like run (documented in its --help): on a machine without a usable GPU it
#    fails as `run --gpu` does (exit 1, the same message), with a GPU it listens; --backend cpu serves;
#  - CMF_ACT_LEVELS other than 1 or 2: one warning line saying 1 is used, and the output of CMF_ACT_LEVELS=1;
#    CMF_CPU_REPACK other than 0 or 1 and an unknown CMF_CPU_PATH likewise; CMF_CPU_PATH=scalar is used (bench's
#    cpu path line) and gives the same greedy ids;
#  - `cmf ppl -c` beyond the trained context warns and still scores; within it, no warning;
#  - library messages reach the user without a repeated command or an internal function name ("serve: serve:",
#    "cmf_tokenize:"), and write errors name the output path the user gave, the temporary file in parentheses.
. "$(dirname "$0")/lib.sh"
M="$REF/tiny-Q8_ROW.cmf"
GGUF="$CMF_SHARED/data/models/stories260K-gguf/stories260Ktok512.gguf"

# The error line neither repeats its command as a prefix ("cmf serve: serve: ") nor names an internal function.
no_internal() {
    local c rest
    c=$(head -1 "$T/err" | sed -n 's/^cmf \([^:]*\): .*/\1/p')
    rest=$(head -1 "$T/err" | sed "s/^cmf $c: //")
    case "$rest" in "$c:"* | "$c "*) fail "repeated prefix: $(cat "$T/err")" ;; esac
    grep -q 'cmf_[a-z0-9_]*:' "$T/err" && fail "internal function name: $(cat "$T/err")"
    return 0
}
# want_line TEXT: stderr is exactly TEXT (one line).
want_line() { [ "$(cat "$T/err")" = "$1" ] || fail "stderr: '$(cat "$T/err")', want '$1'"; }

# --- numbers: one message shape -------------------------------------------------------------------------------
for c in run eval chat bench ppl serve; do
    expect_error 2 "$CMF_BIN" $c "$M" -t 1.5 && want_line "cmf $c: invalid value '1.5' for -t (expected an integer in [0, 4096])"
    expect_error 2 "$CMF_BIN" $c "$M" -t 5000 && want_line "cmf $c: invalid value '5000' for -t (must be in [0, 4096])"
    expect_error 2 "$CMF_BIN" $c "$M" -t && want_line "cmf $c: missing value for -t"
    expect_error 2 "$CMF_BIN" $c "$M" --threads=x && want_line "cmf $c: invalid value 'x' for --threads (expected an integer in [0, 4096])"
done
# CMF_TP (read by cmf_model_load): a value that is not a whole integer in [1, 64] is an error naming it, not ignored
for v in 2x abc 0 -1 65; do
    CMF_TP=$v expect_error 1 "$CMF_BIN" run "$M" -p hi -n 1 && grep -q "CMF_TP='$v' is not an integer in \[1, 64\]" "$T/err" ||
        fail "CMF_TP=$v: $(cat "$T/err")"
done
expect_error 2 "$CMF_BIN" run "$M" -p hi -n -3 && want_line "cmf run: invalid value '-3' for -n (must be in [-1, 2147483647])"
expect_error 2 "$CMF_BIN" run "$M" -p hi -c -5 && want_line "cmf run: invalid value '-5' for -c (must be in [0, 2147483647])"
expect_error 2 "$CMF_BIN" run "$M" -p hi --temp abc && want_line "cmf run: invalid value 'abc' for --temp (expected a number in [0, 1000000])"
expect_error 2 "$CMF_BIN" run "$M" -p hi --top-p 1.5 && want_line "cmf run: invalid value '1.5' for --top-p (expected a number > 0 and <= 1)"
# --seed: an integer in [-2^63, 2^64 - 1]; -1 is a seed from the clock (llama.cpp's convention), another negative s
# samples as 2^64 + s (serve's OpenAI "seed" maps the same way)
expect_error 2 "$CMF_BIN" run "$M" -p hi --seed 1.5 && want_line "cmf run: invalid value '1.5' for --seed (expected an integer)"
expect_error 2 "$CMF_BIN" run "$M" -p hi --seed -x && want_line "cmf run: invalid value '-x' for --seed (expected an integer)"
for v in 99999999999999999999 -9223372036854775809; do
    expect_error 2 "$CMF_BIN" run "$M" -p hi --seed $v &&
        want_line "cmf run: invalid value '$v' for --seed (must be in [-9223372036854775808, 18446744073709551615])"
done
expect_ok "$CMF_BIN" run "$M" -p hi -n 12 --temp 1 --seed -2 && cp "$T/out" "$T/seed_neg"
expect_ok "$CMF_BIN" run "$M" -p hi -n 12 --temp 1 --seed 18446744073709551614 &&
    { cmp -s "$T/out" "$T/seed_neg" || fail "--seed -2 and --seed 2^64-2 sample different text"; }
expect_ok "$CMF_BIN" run "$M" -p hi -n 12 --temp 1 --seed 1 &&
    { ! cmp -s "$T/out" "$T/seed_neg" || fail "--seed -2 and --seed 1 sample the same text (is the seed used?)"; }
# -1: from the clock, so two runs differ (12 tokens at temperature 1 over this vocabulary: equal by chance ~never)
expect_ok "$CMF_BIN" run "$M" -p hi -n 12 --temp 1 --seed -1 && cp "$T/out" "$T/seed_r1"
sleep 0.01
expect_ok "$CMF_BIN" run "$M" -p hi -n 12 --temp 1 --seed -1 &&
    { ! cmp -s "$T/out" "$T/seed_r1" || fail "--seed -1 twice sampled the same text (not a random seed?)"; }
expect_error 2 "$CMF_BIN" run "$M" -p hi --o1-m 3 && want_line "cmf run: invalid value '3' for --o1-m (must be in [4, 65536])"
expect_error 2 "$CMF_BIN" serve "$M" --port 70000 && want_line "cmf serve: invalid value '70000' for --port (must be in [0, 65535])"
expect_error 2 "$CMF_BIN" bench "$M" -r 0 && want_line "cmf bench: invalid value '0' for -r (must be in [1, 100000])"

# --- usage errors exit 2 in every command, before the model is read (the model path does not exist) ----------
X="$T/missing.cmf"
for c in info verify convert run eval chat bench ppl serve requant masks template tokenize detokenize; do
    expect_error 2 "$CMF_BIN" $c "$X" --bogus && want_line "cmf $c: unknown option '--bogus' (see cmf $c --help)"
done
for c in run eval chat bench ppl serve; do
    expect_error 2 "$CMF_BIN" $c "$X" --backend gpu &&
        want_line "cmf $c: invalid value 'gpu' for --backend (expected cpu, cuda, cuda:N or auto; --gpu is cuda)"
    expect_error 2 "$CMF_BIN" $c "$X" --backend cuda:x
    expect_error 2 "$CMF_BIN" $c "$X" --backend
done
for c in run eval chat bench ppl; do
    expect_error 2 "$CMF_BIN" $c "$X" --o1 bogus
    expect_error 2 "$CMF_BIN" $c "$X" --o1-rect bogus && want_line "cmf $c: invalid value 'bogus' for --o1-rect (expected agg or fm)"
    expect_error 2 "$CMF_BIN" $c "$X" --kv-mode bogus && want_line "cmf $c: invalid value 'bogus' for --kv-mode (expected per_loop or last_loop)"
    expect_error 2 "$CMF_BIN" $c "$X" --gate 2x
done
for c in run eval chat bench ppl serve; do
    expect_error 2 "$CMF_BIN" $c "$X" --cache-type f8 && want_line "cmf $c: invalid value 'f8' for --cache-type (expected f16 or f32)"
done
# a well-formed backend name is for the model loader: the missing file is then the error (exit 1)
expect_error 1 "$CMF_BIN" run "$X" -p hi --backend cpu
expect_error 1 "$CMF_BIN" serve "$X" --backend cuda:1

# --- serve --gpu / --backend ----------------------------------------------------------------------------------
expect_ok "$CMF_BIN" serve --help && grep -q -- "--gpu" "$T/out" && grep -q -- "--backend cpu|cuda|cuda:N|auto" "$T/out" ||
    fail "serve --help lacks --gpu / --backend"
# waits (20 s at most) for serve's listening line in $1, then stops the server ($2: pid); returns 0 if it listened
listened() {
    local i=0
    while [ $i -lt 200 ] && ! grep -q "listening on" "$1"; do
        kill -0 "$2" 2>/dev/null || break
        sleep 0.1; i=$((i + 1))
    done
    grep -q "listening on" "$1"; local ok=$?
    kill -TERM "$2" 2>/dev/null; wait "$2"; local rc=$?
    [ $ok -eq 0 ] && [ $rc -ne 0 ] && fail "serve did not exit 0 on SIGTERM (exit $rc)"
    return $ok
}
"$CMF_BIN" serve "$M" --port 0 --backend cpu -t 1 >"$T/srv.out" 2>"$T/srv.err" &
listened "$T/srv.out" $! || fail "serve --backend cpu did not listen: $(cat "$T/srv.err")"
"$CMF_BIN" run "$M" --tokens 1 -n 1 --gpu >/dev/null 2>"$T/run_gpu.err"
if [ $? -eq 0 ]; then # a usable GPU: serve --gpu listens
    "$CMF_BIN" serve "$M" --port 0 --gpu -t 1 >"$T/srv.out" 2>"$T/srv.err" &
    listened "$T/srv.out" $! || fail "serve --gpu did not listen where run --gpu works: $(cat "$T/srv.err")"
else # no GPU (or no CUDA build): the same one-line error as run, exit 1; CMF_GPU=1 says the same
    expect_error 1 "$CMF_BIN" serve "$M" --port 0 --gpu && no_internal
    [ "$(sed 's/^cmf serve: //' "$T/err")" = "$(sed 's/^cmf run: //' "$T/run_gpu.err")" ] ||
        fail "serve --gpu: '$(cat "$T/err")' differs from run --gpu: '$(cat "$T/run_gpu.err")'"
    cp "$T/err" "$T/serve_gpu.err"
    CMF_GPU=1 expect_error 1 "$CMF_BIN" serve "$M" --port 0 && cmp -s "$T/err" "$T/serve_gpu.err" ||
        fail "CMF_GPU=1 serve: '$(cat "$T/err")' differs from --gpu"
fi

# --- CMF_ACT_LEVELS ------------------------------------------------------------------------------------------------
gen() { "$CMF_BIN" run "$M" --tokens 5,17,42 -n 8 --temp 0 --print-ids -t 1 --task off; }
CMF_ACT_LEVELS=1 expect_ok gen && cp "$T/out" "$T/lv1.out"
[ "$(grep -c . "$T/err")" -eq 1 ] || fail "CMF_ACT_LEVELS=1: stderr is not the one timing line: $(cat "$T/err")"
for v in 3 0 two " 2"; do
    CMF_ACT_LEVELS="$v" expect_ok gen || continue
    [ "$(grep -c 'warning' "$T/err")" -eq 1 ] || fail "CMF_ACT_LEVELS='$v': want one warning: $(cat "$T/err")"
    grep -qxF "cmf run: warning: CMF_ACT_LEVELS='$v' is not 1 or 2; using 1 (one int8 activation level, the default)" \
        "$T/err" || fail "CMF_ACT_LEVELS='$v' warning: $(cat "$T/err")"
    cmp -s "$T/out" "$T/lv1.out" || fail "CMF_ACT_LEVELS='$v' does not generate what CMF_ACT_LEVELS=1 does"
done
CMF_ACT_LEVELS=2 expect_ok gen && grep -q warning "$T/err" && fail "CMF_ACT_LEVELS=2 warns: $(cat "$T/err")"
CMF_ACT_LEVELS=3 expect_ok "$CMF_BIN" info "$M" && grep -q warning "$T/err" && fail "info warns about CMF_ACT_LEVELS"
# CMF_CPU_REPACK: "0" or "1" quietly, anything else one warning (the library repacks unless it is "0")
CMF_CPU_REPACK=off expect_ok gen && grep -qxF "cmf run: warning: CMF_CPU_REPACK='off' is not 0 or 1; using 1 (q4 / q8 weights repacked at load)" \
    "$T/err" || fail "CMF_CPU_REPACK='off' warning: $(cat "$T/err")"
for v in 0 1; do CMF_CPU_REPACK=$v expect_ok gen && grep -q warning "$T/err" && fail "CMF_CPU_REPACK=$v warns: $(cat "$T/err")"; done
# CMF_CPU_PATH: scalar (every CPU has it) is used and named by bench, quietly; a name no CPU path has warns once and
# the detected path is used
CMF_CPU_PATH=scalar expect_ok "$CMF_BIN" bench "$M" -p 4 -n 2 -r 1 -t 1 && grep -q '^cpu path: scalar ' "$T/out" &&
    ! grep -q warning "$T/err" || fail "CMF_CPU_PATH=scalar: $(grep 'cpu path' "$T/out") $(cat "$T/err")"
CMF_CPU_PATH=scalar expect_ok gen && cmp -s "$T/out" "$T/lv1.out" || fail "CMF_CPU_PATH=scalar generates other ids"
CMF_CPU_PATH=sse9 expect_ok gen && grep -qxF "cmf run: warning: CMF_CPU_PATH='sse9' is not a kernel path this CPU and build run (the names: avx512-vnni, avx2, neon, scalar); using the detected one" \
    "$T/err" || fail "CMF_CPU_PATH='sse9' warning: $(cat "$T/err")"

# --- ppl beyond the trained context (stories260K's GGUF says 128) --------------------------------------------------
S="$T/s.cmf"
expect_ok "$CMF_BIN" convert "$GGUF" -o "$S" --no-progress || finish
# CMF_QUANT_THREADS: a count 1..256 quietly; anything else one warning (the online CPUs are used); the same bytes
CMF_QUANT_THREADS=many expect_ok "$CMF_BIN" requant "$S" -o "$T/rq1.cmf" --quant q4tp &&
    [ "$(grep -c warning "$T/err")" -eq 1 ] && grep -qE "^cmf requant: warning: CMF_QUANT_THREADS='many' is not a whole number 1\.\.256; using [0-9]+ encoder threads \(the online CPUs\)$" \
    "$T/err" || fail "CMF_QUANT_THREADS='many' warning: $(cat "$T/err")"
CMF_QUANT_THREADS=3 expect_ok "$CMF_BIN" requant "$S" -o "$T/rq3.cmf" --quant q4tp && grep -q warning "$T/err" &&
    fail "CMF_QUANT_THREADS=3 warns: $(cat "$T/err")"
cmp -s "$T/rq1.cmf" "$T/rq3.cmf" || fail "requant with 3 encoder threads writes other bytes than with the default"
rm -f "$T/rq1.cmf" "$T/rq3.cmf"
awk '/^\$ \.\/run/{f=1;next} f&&/^```/{exit} f' "$CMF_SHARED/data/models/stories260K/stories260K.md" >"$T/one.txt"
for i in 1 2 3 4 5 6; do cat "$T/one.txt"; done >"$T/text.txt"
if expect_ok "$CMF_BIN" ppl "$S" -f "$T/text.txt" -c 256 --max-windows 1 -t 1; then
    grep -qxF "cmf ppl: warning: -c 256 is larger than the trained context 128 of $S; positions past it are out of the model's training range" \
        "$T/err" || fail "ppl -c 256: no trained-context warning: $(cat "$T/err")"
    grep -q ': PPL = ' "$T/out" || fail "ppl -c 256 did not score: $(cat "$T/out")"
fi
expect_ok "$CMF_BIN" ppl "$S" -f "$T/text.txt" -c 128 --max-windows 1 -t 1 && grep -q warning "$T/err" &&
    fail "ppl -c 128 (= trained) warns: $(cat "$T/err")"

# --- library messages as the user reads them --------------------------------------------------------------------
expect_ok "$CMF_BIN" convert "$CMF_SHARED/data/hf-tiny/llama" -o "$T/notok.cmf" --no-progress
expect_error 1 "$CMF_BIN" serve "$T/notok.cmf" --port 0 && no_internal &&
    grep -q "^cmf serve: the model has no usable tokenizer" "$T/err" || fail "serve without tokenizer: $(cat "$T/err")"
printf 'a\377b' >"$T/bad.txt"
expect_error 1 "$CMF_BIN" run "$M" -f "$T/bad.txt" && no_internal && want_line "cmf run: $T/bad.txt: text is not valid UTF-8 at byte 1"
expect_error 1 "$CMF_BIN" tokenize "$CMF_SHARED/data/tokenizers/qwen3/tokenizer.json" <"$T/bad.txt" && no_internal
expect_error 1 "$CMF_BIN" serve "$M" --port 0 --host host.invalid && no_internal &&
    grep -q "^cmf serve: cannot resolve --host host.invalid" "$T/err" || fail "serve --host: $(cat "$T/err")"

# --- write errors name the user's path ------------------------------------------------------------------------
# /proc takes no new files (root or not), though the folder exists: the temporary file's creation fails
expect_error 1 "$CMF_BIN" eval "$M" --tokens 1,2 --task off -o /proc/nits-x.f32 && no_internal &&
    grep -qE "^cmf eval: cannot write /proc/nits-x\.f32: No such file or directory \(temporary file /proc/nits-x\.f32\.tmp\.[0-9]+\)$" \
        "$T/err" || fail "eval write error: $(cat "$T/err")"
expect_error 1 "$CMF_BIN" requant "$M" -o /proc/nits-y.cmf --quant q4 && no_internal &&
    want_line "cmf requant: cannot create /proc/nits-y.cmf: No such file or directory (temporary file /proc/nits-y.cmf.blob.tmp)"
# requant refuses to overwrite its input (as convert does), and leaves it intact
cp "$M" "$T/self.cmf"
expect_error 1 "$CMF_BIN" requant "$T/self.cmf" -o "$T/self.cmf" --quant q8 &&
    want_line "cmf requant: -o $T/self.cmf is the input itself; write the re-encoded file under another name"
cmp -s "$M" "$T/self.cmf" || fail "requant -o IN changed its input"
# a read error names the input once
expect_error 1 "$CMF_BIN" requant "$T/none.cmf" -o "$T/y.cmf" --quant q8 &&
    want_line "cmf requant: $T/none.cmf: No such file or directory"
expect_error 1 "$CMF_BIN" convert "$GGUF" -o /proc/nits-y.cmf --no-progress && no_internal &&
    want_line "cmf convert: cannot create /proc/nits-y.cmf: No such file or directory (temporary file /proc/nits-y.cmf.blob.tmp)"
# a path under a regular file is refused up front, naming it
: >"$T/file"
expect_error 1 "$CMF_BIN" requant "$M" -o "$T/file/y.cmf" --quant q4 && no_internal &&
    want_line "cmf requant: $T/file/y.cmf: Not a directory"
ls "$T" | grep -q '\.tmp' && fail "a temporary file was left: $(ls "$T")"

finish
