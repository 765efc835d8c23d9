#!/usr/bin/env bash
# cli_chat_input.sh — how `cmf chat` reads its input (tiny random qwen3 model built by chat_mkmodel): the prompt of
# each turn (--show-ids, decoded back with `cmf detokenize`) is rendered with a template that writes every message
# as [role:content], so the messages the model was given can be read off exactly. Checks: a '\' continued message at
# the end of input is sent (without the last backslash), '/system   TEXT  ' drops only the separating spaces,
# unknown /commands are not sent (a warning lists the commands), '//' sends a leading '/', and -s "" is no
# system message (the same prompt as without -s).
. "$(dirname "$0")/../cli/lib.sh"
: "${CHAT_MKMODEL:?CHAT_MKMODEL must name the chat_mkmodel helper}"
"$CHAT_MKMODEL" model "$T" qwen3 >"$T/mk.log" 2>&1 || { fail "building the model: $(cat "$T/mk.log")"; exit 1; }
Q="$T/qwen3.cmf"
printf '{%% for m in messages %%}[{{ m.role }}:{{ m.content }}]{%% endfor %%}' >"$T/echo.jinja"

# prompts IN [ARGS...]: runs the chat on stdin IN; $T/prompts gets each turn's prompt text as a JSON string line
prompts() {
    local in=$1; shift
    expect_ok "$CMF_BIN" chat "$Q" --chat-template-file "$T/echo.jinja" -n 1 --temp 0 --show-ids "$@" <"$in" || return 1
    cp "$T/err" "$T/chat_err"
    grep '^ids: ' "$T/chat_err" | sed 's/^ids: //' >"$T/ids"
    "$CMF_BIN" detokenize "$Q" --jsonl <"$T/ids" >"$T/prompts" 2>"$T/err" || fail "detokenize: $(cat "$T/err")"
}

# continuation at the end of input, /system with spaces, an unknown command, '//'
printf 'hi\n/system   spaced  \n/bogus x\n//slash\nmulti\\\nline\\\n' >"$T/in1"
prompts "$T/in1" -s ""
[ "$(wc -l <"$T/prompts")" -eq 3 ] || fail "3 turns expected: $(cat "$T/chat_err")"
# turn 1: no system message for -s ""; turn 2: after /system (a restart) the system text keeps its trailing spaces,
# and "//slash" is sent as "/slash"; turn 3: the continued message, sent at the end of input
sed -n 1p "$T/prompts" | grep -qxF '"[user:hi]"' || fail "turn 1: $(sed -n 1p "$T/prompts")"
sed -n 2p "$T/prompts" | grep -qxF '"[system:spaced  ][user:/slash]"' || fail "turn 2: $(sed -n 2p "$T/prompts")"
sed -n 3p "$T/prompts" | grep -q '^"\[system:spaced  \]\[user:/slash\]\[assistant:.*\]\[user:multi\\nline\]"$' ||
    fail "turn 3: $(sed -n 3p "$T/prompts")"
grep -q "^cmf chat: warning: unknown command '/bogus' (not sent): the commands are /reset, /system \[TEXT\], /exit" \
    "$T/chat_err" || fail "no warning for /bogus: $(cat "$T/chat_err")"
grep -q 'bogus x' "$T/prompts" && fail "/bogus was sent to the model"

# -s "" renders as no -s at all; /system with only spaces removes the system message
printf 'hi\n' >"$T/in2"
prompts "$T/in2" && cp "$T/prompts" "$T/nosys"
prompts "$T/in2" -s "" && cmp -s "$T/prompts" "$T/nosys" || fail "-s \"\": $(cat "$T/prompts") vs $(cat "$T/nosys")"
printf '/system    \nhi\n' >"$T/in3"
prompts "$T/in3" -s "S" && cmp -s "$T/prompts" "$T/nosys" || fail "/system spaces: $(cat "$T/prompts")"
# --template-only with -s "": no system turn either
expect_ok "$CMF_BIN" chat "$Q" --chat-template-file "$T/echo.jinja" --template-only -s "" -p hi &&
    [ "$(cat "$T/out")" = "[user:hi]" ] || fail "--template-only -s \"\": $(cat "$T/out")"
finish
