#!/usr/bin/env bash
# cli_chat_tty.sh — `cmf chat` at a terminal (chat_pty drives it through a pseudo-terminal): libedit's editing keys
# and this session's history produce the same messages as typing them plainly, so the replies (stdout, greedy) equal
# those of the piped input "ohi\nohi\n"; Ctrl-C at the prompt gives the prompt back. Skips (77) when cmf was built
# without libedit. The piped-input behaviour itself is cli_chat.sh's.
. "$(dirname "$0")/../cli/lib.sh"
: "${CHAT_MKMODEL:?CHAT_MKMODEL must name the chat_mkmodel helper}"
: "${CHAT_PTY:?CHAT_PTY must name the chat_pty helper}"
"$CHAT_MKMODEL" model "$T" llama3 >"$T/mk.log" 2>&1 || { fail "building the model: $(cat "$T/mk.log")"; exit 1; }
OPTS=(-n 4 --temp 0 -s "You are a terse assistant.")

printf 'ohi\nohi\n' >"$T/in"
expect_ok "$CMF_BIN" chat "$T/llama3.cmf" "${OPTS[@]}" <"$T/in" && cp "$T/out" "$T/piped"
[ "$(grep -c '^turn ' "$T/err")" -eq 2 ] || fail "piped: 2 turns expected: $(cat "$T/err")"

"$CHAT_PTY" "$CMF_BIN" "$T/llama3.cmf" "$T/tty" "${OPTS[@]}"
rc=$?
[ $rc -eq 77 ] && exit 77
if [ $rc -ne 0 ]; then
    fail "chat at a terminal (chat_pty exit $rc)"
elif ! cmp -s "$T/tty" "$T/piped"; then
    fail "replies at the terminal differ from the piped ones: tty '$(head -c 300 "$T/tty")' piped '$(head -c 300 "$T/piped")'"
fi
[ "$FAILURES" -eq 0 ] || exit 1
