#!/usr/bin/env bash
# cli_chat.sh — `cmf chat` and `cmf run --chat` end to end on tiny random models around the real qwen3 / llama3 /
# mistral tokenizer bundles (built by chat_mkmodel): --template-only equals the Python jinja2 reference rendering
# (data/chat_refs.json), -p runs, streams and stops at -n, stdin turns reuse the KV cache, /reset and /exit work,
# and template exceptions / bad arguments give one error line with the right exit status.
. "$(dirname "$0")/../cli/lib.sh"
: "${CHAT_MKMODEL:?CHAT_MKMODEL must name the chat_mkmodel helper}"
for fam in qwen3 llama3 mistral; do
    "$CHAT_MKMODEL" model "$T" $fam >"$T/mk.log" 2>&1 || { fail "building the $fam model: $(cat "$T/mk.log")"; exit 1; }
done
Q="$T/qwen3.cmf"; L="$T/llama3.cmf"; M="$T/mistral.cmf"

# --template-only == reference rendering (system + user message, generation prompt)
SYS="You are a terse assistant."; MSG="Hello! What's 2+2?"
check_template() { # CASE MODEL ARGS...
    local case=$1 model=$2; shift 2
    "$CHAT_MKMODEL" expected "$case" "$T/want" || { fail "no reference $case"; return; }
    expect_ok "$CMF_BIN" chat "$model" --template-only "$@" && cmp -s "$T/out" "$T/want" ||
        fail "--template-only for $case differs: $(head -c 300 "$T/out")"
}
check_template qwen3/system/agp=1 "$Q" -s "$SYS" -p "$MSG"
check_template qwen3/extra/think=0 "$Q" --no-think -p "$MSG"
check_template llama3/system/agp=1 "$L" -s "$SYS" -p "$MSG"
check_template mistral/single/agp=1 "$M" -p "$MSG"   # no template in the file: ChatML

# -p: one answer, streamed, stopped at -n, exit 0
expect_ok "$CMF_BIN" chat "$Q" -p "$MSG" -n 5 --temp 0 --no-think
grep -q "^turn 1: prompt [0-9]* tokens (0 reused from the cache).*| reply 5 tokens" "$T/err" ||
    fail "chat -p -n 5: $(cat "$T/err")"
[ -s "$T/out" ] || fail "chat -p printed no text"
cp "$T/out" "$T/greedy1"
expect_ok "$CMF_BIN" chat "$Q" -p "$MSG" -n 5 --temp 0 --no-think
cmp -s "$T/out" "$T/greedy1" || fail "greedy chat is not deterministic"
expect_ok "$CMF_BIN" chat "$L" -p "$MSG" -n 0
grep -q "reply 0 tokens" "$T/err" || fail "chat -n 0: $(cat "$T/err")"

# stdin: turn 2 reuses the cache, /reset starts over, /exit ends (the line after it is not a turn)
printf 'hi\nand again\n/reset\nthird\n/exit\nnever\n' >"$T/in"
expect_ok "$CMF_BIN" chat "$L" -n 4 --seed 7 -s "$SYS" <"$T/in"
[ "$(grep -c '^turn ' "$T/err")" -eq 3 ] || fail "3 turns expected: $(cat "$T/err")"
grep -q '^turn 2: prompt [0-9]* tokens ([1-9][0-9]* reused' "$T/err" || fail "turn 2 reused nothing: $(cat "$T/err")"
grep -q '^turn 3: prompt [0-9]* tokens (0 reused' "$T/err" || fail "/reset kept the cache: $(cat "$T/err")"
# the context fills up: that turn fails with a message, the program goes on and ends at EOF with exit 1 (piped
# input: a failed message fails the run, as chat -p; review 9 item 11)
printf 'hello\nhello again, a longer message this time\n' | "$CMF_BIN" chat "$Q" -n 4 -c 24 >"$T/out" 2>"$T/err"
rc=$?
[ "$rc" -eq 1 ] || fail "piped chat with a failed message: exit $rc (want 1): $(cat "$T/err")"
grep -q '^turn 1: ' "$T/err" || fail "the turn before the full context did not run: $(cat "$T/err")"
grep -q 'the context holds 24' "$T/err" || fail "no context-full message: $(cat "$T/err")"
clean_stderr "$T/err" || fail "sanitizer output (context full)"

# cmf run --chat
expect_ok "$CMF_BIN" run "$Q" --chat -p "$MSG" -n 3 --temp 0
grep -q "decode: 3 tokens" "$T/err" || fail "run --chat: $(cat "$T/err")"
expect_error 2 "$CMF_BIN" run "$Q" --chat --tokens 1,2

# errors: a template that raises, a broken template, usage errors, a missing file
printf "{%% for m in messages %%}{%% if m.role == 'system' %%}{{ raise_exception('System role not supported') }}{%% endif %%}{{ m.content }}{%% endfor %%}" >"$T/nosys.jinja"
expect_error 1 "$CMF_BIN" chat "$Q" --chat-template-file "$T/nosys.jinja" -s "$SYS" -p "$MSG" --template-only &&
    { grep -q "^cmf chat: chat template: System role not supported$" "$T/err" || fail "raise message: $(cat "$T/err")"; }
expect_error 1 "$CMF_BIN" chat "$Q" --chat-template-file "$T/nosys.jinja" -s "$SYS" -p "$MSG" -n 2
expect_ok "$CMF_BIN" chat "$Q" --chat-template-file "$T/nosys.jinja" -p "$MSG" --template-only
[ "$(cat "$T/out")" = "$MSG" ] || fail "custom template without system: $(cat "$T/out")"
printf '{%% if x %%}unclosed' >"$T/broken.jinja"
expect_error 1 "$CMF_BIN" chat "$Q" --chat-template-file "$T/broken.jinja" -p "$MSG" --template-only &&
    { grep -q "chat template: template:1:" "$T/err" || fail "syntax error message: $(cat "$T/err")"; }
expect_error 2 "$CMF_BIN" chat "$Q" --template-only
expect_error 2 "$CMF_BIN" chat "$Q" --bogus
expect_error 2 "$CMF_BIN" chat "$Q" -n x
expect_error 2 "$CMF_BIN" chat
expect_error 1 "$CMF_BIN" chat "$T/missing.cmf" -p hi
expect_ok "$CMF_BIN" chat --help && grep -q "usage: cmf chat" "$T/out" || fail "chat --help"

[ "$FAILURES" -eq 0 ] || { echo "$FAILURES failure(s)" >&2; exit 1; }
echo "cli_chat: ok"
