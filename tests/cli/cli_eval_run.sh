# cli_eval_run.sh — `cmf eval` (logits file size and layout) and `cmf run` (greedy ids agree with eval's argmax
# row by row, seeds reproduce, context errors) on the reference tiny-Q8_ROW.cmf.
. "$(dirname "$0")/lib.sh"
M="$REF/tiny-Q8_ROW.cmf"
V=128  # vocab_size of the reference tiny model (shared/README.md)

# --- eval: n x vocab float32 ---
expect_ok "$CMF_BIN" eval "$M" --tokens 1,2,3 -o "$T/a.f32" -t 1
size=$(stat -c %s "$T/a.f32")
[ "$size" -eq $((3 * V * 4)) ] || fail "eval wrote $size bytes, want $((3 * V * 4))"
grep -qx "wrote 3 x $V logits to $T/a.f32" "$T/err" || fail "eval stderr: $(cat "$T/err")"
ls "$T" | grep -q '\.tmp' && fail "eval left a temporary file"
# the same ids from a file (commas and whitespace) give the same bytes
printf '1, 2\n 3\n' >"$T/ids.txt"
expect_ok "$CMF_BIN" eval "$M" --tokens-file "$T/ids.txt" -o "$T/b.f32"
cmp -s "$T/a.f32" "$T/b.f32" || fail "--tokens-file gives other logits than --tokens"
# every value is a finite number
od -An -v -t f4 "$T/a.f32" | tr -s ' ' '\n' | grep -v '^$' |
    grep -qviE '^-?[0-9.]+(e[-+][0-9]+)?$' && fail "eval wrote a non-finite logit"

# --- run: greedy ids == argmax of eval's rows over the same sequence ---
argmax_rows() {  # one line per row: the id of the largest logit (ties -> lowest id)
    od -An -v -t f4 -w$((V * 4)) "$1" | awk '{ b = 1; for (i = 2; i <= NF; i++) if ($i > $b) b = i; print b - 1 }'
}
prompt="5,17,42"
expect_ok "$CMF_BIN" run "$M" --tokens "$prompt" -n 6 --temp 0 --print-ids -t 1
gen=$(head -1 "$T/out")
echo "$gen" | grep -qE '^[0-9]+(,[0-9]+)*$' || fail "run --print-ids output: '$gen'"
n_gen=$(echo "$gen" | tr ',' '\n' | wc -l)
[ "$n_gen" -eq 6 ] || fail "run -n 6 generated $n_gen ids (the file has no eos ids)"
grep -qE "^prompt: 3 tokens, [0-9.]+ tok/s \| decode: 6 tokens, [0-9.]+ tok/s$" "$T/err" ||
    fail "run stats line: $(cat "$T/err")"
# eval over prompt + generated[0..4]: rows 2..7 predict generated[0..5]
seq_ids="$prompt,$(echo "$gen" | cut -d, -f1-5)"
expect_ok "$CMF_BIN" eval "$M" --tokens "$seq_ids" -o "$T/g.f32"
want=$(argmax_rows "$T/g.f32" | tail -n +3 | paste -sd,)
[ "$gen" = "$want" ] || fail "greedy run ids $gen != eval argmax $want"

# --- seeds: same seed, same ids; the default sampler is not greedy ---
expect_ok "$CMF_BIN" run "$M" --tokens "$prompt" -n 20 --temp 1.5 --top-k 0 --top-p 1 --seed 7 --print-ids
s1=$(head -1 "$T/out")
expect_ok "$CMF_BIN" run "$M" --tokens "$prompt" -n 20 --temp 1.5 --top-k 0 --top-p 1 --seed 7 --print-ids
s2=$(head -1 "$T/out")
[ "$s1" = "$s2" ] || fail "--seed 7 twice: $s1 vs $s2"
expect_ok "$CMF_BIN" run "$M" --tokens "$prompt" -n 20 --temp 1.5 --top-k 0 --top-p 1 --seed 8 --print-ids
[ "$(head -1 "$T/out")" != "$s1" ] || fail "--seed 7 and --seed 8 gave the same 20 ids"
# --top-k 1 at any temperature is greedy
expect_ok "$CMF_BIN" run "$M" --tokens "$prompt" -n 6 --temp 2 --top-k 1 --seed 3 --print-ids
[ "$(head -1 "$T/out")" = "$gen" ] || fail "--top-k 1 differs from --temp 0"

# --- context: a prompt longer than the context is an error, not a crash ---
long=$(for i in $(seq 1 129); do echo $((i % 100)); done | paste -sd,)  # trained context is 128
expect_error 1 "$CMF_BIN" run "$M" --tokens "$long" -n 1 && grep -q "context" "$T/err" || fail "long prompt message"
expect_error 1 "$CMF_BIN" run "$M" --tokens 1,2,3,4,5 -c 4 -n 1
# -c above the trained context: a warning, then it runs
expect_ok "$CMF_BIN" run "$M" --tokens 1,2 -c 300 -n 2 --temp 0 --print-ids
grep -q "warning: -c 300 is larger than the trained context 128" "$T/err" || fail "-c 300 warning: $(cat "$T/err")"
# generation stops when the context is full
expect_ok "$CMF_BIN" run "$M" --tokens 1,2,3 -c 5 -n 50 --temp 0 --print-ids
[ "$(head -1 "$T/out" | tr ',' '\n' | wc -l)" -eq 3 ] || fail "-c 5 with a 3-token prompt: want 3 new ids"
# ids outside the vocabulary
expect_error 1 "$CMF_BIN" run "$M" --tokens 1,128 -n 1
expect_error 1 "$CMF_BIN" eval "$M" --tokens 1,500 -o "$T/x.f32"
[ ! -e "$T/x.f32" ] || fail "a failed eval left an output file"

# --- run with the file's own tokenizer (tokenizer.json in the vocab section) ---
expect_ok "$CMF_BIN" run "$M" -p "hello world" -n 5 --temp 0
grep -qE "^prompt: [1-9][0-9]* tokens, .* \| decode: [0-9]+ tokens" "$T/err" || fail "run -p stats: $(cat "$T/err")"
printf 'hello world' >"$T/prompt.txt"
cp "$T/out" "$T/p.out"
expect_ok "$CMF_BIN" run "$M" -f "$T/prompt.txt" -n 5 --temp 0
cmp -s "$T/out" "$T/p.out" || fail "-f FILE and -p TEXT differ"

finish
