# cli_dory.sh — the Dory features through the `cmf` command line, on tests/data/dory/tiny converted with a small
# WordLevel tokenizer (one word per vocabulary id, written here) so that text commands can run:
#   - `cmf ppl` with and without --o1 all (positions after --o1-prefill are single-token steps served by the far
#     field): both finite; a far field whose exact window (8 rows + 2 sinks) is shorter than the 64-token window
#     changes the PPL; one whose window (64) covers it gives the same PPL line as exact;
#   - `cmf run --gate`: recon:FILE with a zero-weight probe of bias 0 takes one pass on every step (100.0% on
#     stderr), of bias 1 none (0.0%), and then generates the same tokens as an ungated last_loop run; conf:T is the
#     same as T; `--gate recon` on a file without a probe, a malformed --gate, and the Conf gate with --o1 are
#     refused with one line;
#   - `cmf info` prints the provenance.o1_attn hint of a file converted with --o1, and Dory layer counts from the pattern;
#   - `cmf convert --o1` on Dory writes a hint the Dory session honours (same PPL as the flags) and refuses MLP layers;
#   - `--task NAME` is refused on Dory (the file has no task masks) by run, eval, bench, ppl and chat;
#   - `cmf convert --quant q2tp` puts Dory's MLP gate/up on q2tp, the other matrices on q4tp, and the file runs.
. "$(dirname "$0")/../cli/lib.sh"
: "${CMF_TESTDATA:?CMF_TESTDATA must name tests/data}"
B=$CMF_BIN

CK="$T/ckpt"
mkdir -p "$CK"
ln -s "$CMF_TESTDATA/dory/tiny/config.json" "$CK/config.json"
ln -s "$CMF_TESTDATA/dory/tiny/model.safetensors" "$CK/model.safetensors"
{
    printf '{"version":"1.0","added_tokens":[],"normalizer":null,"pre_tokenizer":{"type":"WhitespaceSplit"},'
    printf '"post_processor":null,"decoder":null,"model":{"type":"WordLevel","unk_token":"<unk>","vocab":{"<unk>":0'
    for i in $(seq 1 31); do printf ',"w%d":%d' "$i" "$i"; done
    printf '}}}\n'
} >"$CK/tokenizer.json"
expect_ok "$B" convert "$CK" -o "$T/tiny.cmf" --quant f32 --no-progress
awk 'BEGIN { for (i = 0; i < 200; i++) printf "w%d ", (i * 7 + int(i * i / 3)) % 31 + 1; print "" }' >"$T/text.txt"

# ---- ppl with and without the far field
ppl_line() { grep -E '^.*: PPL = ' "$T/out" | sed 's/.*PPL = //'; }
PPL=(ppl "$T/tiny.cmf" -f "$T/text.txt" -c 64 --o1-prefill 8 -t 2)
expect_ok "$B" "${PPL[@]}" && exact=$(ppl_line)
expect_ok "$B" "${PPL[@]}" --o1 all --o1-window 8 --o1-sink 2 --o1-m 4 && far=$(ppl_line)
grep -q "O(1) far field on" "$T/err" || fail "ppl --o1 all: no far-field note on stderr: $(head -c 300 "$T/err")"
expect_ok "$B" "${PPL[@]}" --o1 all --o1-window 64 && wide=$(ppl_line)
e=${exact%% *}
f=${far%% *}
echo "exact PPL $e, --o1 all (window 8, sink 2, m 4) PPL $f, window 64: ${wide%% *}"
finite() { awk -v x="$1" 'BEGIN { exit !(x + 0 == x && x > 0 && x < 1e30) }'; }
finite "$e" || fail "exact PPL '$e' is not a finite positive number"
finite "$f" || fail "far-field PPL '$f' is not a finite positive number"
[ "$e" != "$f" ] || fail "--o1 all with an 8-row window gave the exact PPL $e"
[ -n "$wide" ] && [ "$wide" = "$exact" ] || fail "--o1 all with a window over the whole text: '$wide' vs exact '$exact'"
awk -v a="$f" -v b="$e" 'BEGIN { printf "ppl ratio o1/exact = %.5f\n", a / b }'

# ---- the gates in cmf run
# a probe file: dory_recon.weight [64] all zero, dory_recon.bias [1] = $2 (4 bytes, printf escapes)
mkprobe() {
    local h='{"dory_recon.weight":{"dtype":"F32","shape":[64],"data_offsets":[0,256]},"dory_recon.bias":{"dtype":"F32","shape":[1],"data_offsets":[256,260]}}'
    { printf '\220\0\0\0\0\0\0\0'; printf '%s' "$h"; head -c 256 /dev/zero; printf "$2"; } >"$1"
}
mkprobe "$T/p0.safetensors" '\0\0\0\0'         # bias 0: score 0 >= 0, one pass
mkprobe "$T/p1.safetensors" '\0\0\200\077'     # bias 1.0f: two passes
RUN=(run "$T/tiny.cmf" -p "w1 w2 w3" -n 8 --temp 0 -t 2)
expect_ok "$B" "${RUN[@]}" --gate "recon:$T/p0.safetensors" &&
    { grep -q "early exit: 100.0% of 7 gated tokens took one pass" "$T/err" || fail "recon bias 0: $(cat "$T/err")"; }
expect_ok "$B" "${RUN[@]}" --gate "recon:$T/p1.safetensors" && two=$(cat "$T/out") &&
    { grep -q "early exit: 0.0% of 7 gated tokens took one pass" "$T/err" || fail "recon bias 1: $(cat "$T/err")"; }
expect_ok "$B" "${RUN[@]}" --kv-mode last_loop && [ "$(cat "$T/out")" = "$two" ] ||
    fail "recon with two passes everywhere differs from an ungated last_loop run: '$two' vs '$(cat "$T/out")'"
expect_ok "$B" "${RUN[@]}" --gate 0.5 && conf=$(cat "$T/out") && grep -q "gated tokens" "$T/err" ||
    fail "--gate 0.5: no early-exit line"
expect_ok "$B" "${RUN[@]}" --gate conf:0.5 && [ "$(cat "$T/out")" = "$conf" ] || fail "--gate conf:0.5 differs from 0.5"
expect_error 1 "$B" "${RUN[@]}" --gate recon && { grep -q "no Recon probe" "$T/err" || fail "--gate recon: $(cat "$T/err")"; }
expect_error 2 "$B" "${RUN[@]}" --gate bogus
expect_error 1 "$B" "${RUN[@]}" --gate 0.5 --o1 all && { grep -q "Conf gate" "$T/err" || fail "conf+o1: $(cat "$T/err")"; }
expect_ok "$B" "${RUN[@]}" --gate "recon:$T/p0.safetensors" --o1 all

# ---- cmf info shows the far-field hint
expect_ok "$B" convert "$CMF_SHARED/data/hf-tiny/llama" -o "$T/hint.cmf" --o1 all --o1-window 64 --no-progress
expect_ok "$B" info "$T/hint.cmf" && { grep -q '^o1 hint: .*provenance.o1_attn {.*"all"' "$T/out" ||
    fail "info: no o1 hint line: $(grep -i o1 "$T/out")"; }
expect_ok "$B" info "$T/tiny.cmf" && { ! grep -q "o1 hint" "$T/out" || fail "info: an o1 hint on a file without one"; }
# the Dory pattern, not layer_types (which lists MLP sub-layers as FullAttention), gives the layer counts
grep -q "^layer types: *SlidingAttention x1, FullAttention x2, MLP x3 (pattern \*-S-\*-)" "$T/out" ||
    fail "info: Dory layer counts: $(grep -i 'layer types' "$T/out")"
grep -q "^dory: *blocks 2/2/2" "$T/out" || fail "info: no dory line: $(grep -i dory "$T/out")"
# a Dory file can carry the hint too: it counts full-attention sub-layers (deep1 = the last '*', sub-layer 4 of
# *-S-*-), runs with it without flags (the same PPL as the flags give), and an MLP sub-layer is refused
expect_ok "$B" convert "$CK" -o "$T/dhint.cmf" --quant f32 --no-progress --o1 deep1 --o1-window 8 --o1-sink 2 --o1-m 4
expect_ok "$B" info "$T/dhint.cmf" && { grep -q '^o1 hint: .*"layers":\[4\]' "$T/out" ||
    fail "info: Dory o1 hint: $(grep -i o1 "$T/out")"; }
expect_ok "$B" ppl "$T/dhint.cmf" -f "$T/text.txt" -c 64 --o1-prefill 8 -t 2 && hinted=$(ppl_line)
expect_ok "$B" "${PPL[@]}" --o1 4 --o1-window 8 --o1-sink 2 --o1-m 4 && flagged=$(ppl_line)
[ -n "$hinted" ] && [ "$hinted" = "$flagged" ] || fail "Dory hint deep1: '$hinted' vs flags --o1 4: '$flagged'"
[ "$hinted" != "$exact" ] || fail "Dory hint deep1 gave the exact PPL"
expect_error 1 "$B" convert "$CK" -o "$T/bad.cmf" --quant f32 --no-progress --o1 1 &&
    { grep -q "MLP sub-layer" "$T/err" || fail "convert --o1 1 on Dory: $(cat "$T/err")"; }
[ ! -e "$T/bad.cmf" ] || fail "a refused convert left an output file"

# ---- --task on a Dory file without masks: refused as on a transformer file without masks (one line, exit 1), in
# every command that takes it; --task off is the dense run
for cmd in "run $T/tiny.cmf --tokens 1,2 -n 3" "eval $T/tiny.cmf --tokens 1,2 -o $T/l.f32" \
    "bench $T/tiny.cmf -p 4 -n 2 -r 1" "ppl $T/tiny.cmf -f $T/text.txt -c 64" "chat $T/tiny.cmf -p w1 -n 2"; do
    # shellcheck disable=SC2086 # the command line is split on purpose
    expect_error 1 "$B" $cmd --task foo </dev/null &&
        { grep -q "task 'foo': the file has no task masks" "$T/err" || fail "${cmd%% *} --task foo: $(cat "$T/err")"; }
done
expect_ok "$B" run "$T/tiny.cmf" --tokens 1,2 -n 3 --task off

# ---- --quant q2tp: Dory's MLP gate/up (mixer.gate_proj / mixer.up_proj, 3 MLP sub-layers of *-S-*-) take the 2-bit
# plane as llama's mlp.gate_proj / up_proj do (CMF_FORMAT.md §2.0: dense gate/up of a model without experts), the
# other matrices q4tp; the file runs
expect_ok "$B" convert "$CK" -o "$T/q2.cmf" --quant q2tp --no-progress
expect_ok "$B" info "$T/q2.cmf" --tensors
q2=$(awk '$2 == "q2tp" { print $1 }' "$T/out" | sort | tr '\n' ' ')
want=$(for l in 1 3 5; do for p in gate up; do echo "backbone.layers.$l.mixer.${p}_proj.weight"; done; done | sort |
    tr '\n' ' ')
[ "$q2" = "$want" ] || fail "q2tp tensors of Dory at --quant q2tp: '$q2', expected '$want'"
for l in 1 3 5; do
    grep -q "^backbone.layers.$l.mixer.down_proj.weight *q4tp " "$T/out" || fail "layer $l down_proj is not q4tp"
done
expect_ok "$B" run "$T/q2.cmf" --tokens 1,2 -n 4 --temp 0 --print-ids

finish
