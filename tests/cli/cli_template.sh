#!/usr/bin/env bash
# cli_template.sh — `cmf template` and the `cmf chat` REPL, on tiny random models around the real qwen3 / llama3 /
# mistral tokenizer bundles (built by tests/chat's chat_mkmodel):
#   - `cmf template` output byte-equal to the Python jinja2 references of tests/chat/data/chat_refs.json (same
#     messages as those cases), from the model file and from the bundle's tokenizer_config.json, with --tools,
#     --kwargs and the ChatML fallback; template and argument errors: one line, exit 1 / 2;
#   - `cmf tokenize` of a model file equals that of its tokenizer.json;
#   - chat: the prompt ids (--show-ids) are exactly the tokenized template rendering, with exactly one BOS (llama3:
#     written by the template; mistral: added by the post-processor), after /system and for '\' continued lines;
#     Ctrl-C stops a reply and keeps the program, two Ctrl-C at the prompt quit with status 0.
. "$(dirname "$0")/lib.sh"
: "${CHAT_MKMODEL:?CHAT_MKMODEL must name the chat_mkmodel helper of tests/chat}"
TOK="$CMF_SHARED/data/tokenizers"
for fam in qwen3 llama3 mistral; do
    "$CHAT_MKMODEL" model "$T" $fam >"$T/mk.log" 2>&1 || { fail "building the $fam model: $(cat "$T/mk.log")"; exit 1; }
done
Q="$T/qwen3.cmf"; L="$T/llama3.cmf"; M="$T/mistral.cmf"

# the messages of chat_refs.json's cases
cat >"$T/system.json" <<'EOF'
[{"role": "system", "content": "You are a terse assistant."}, {"role": "user", "content": "Hello! What's 2+2?"}]
EOF
cat >"$T/single.json" <<'EOF'
[{"role": "user", "content": "Hello! What's 2+2?"}]
EOF
cat >"$T/reasoning.json" <<'EOF'
[{"role": "user", "content": "Hello! What's 2+2?"},
 {"role": "assistant", "content": "It is 4.", "reasoning_content": "\nSimple sum.\n"},
 {"role": "user", "content": "  And in French, s'il vous pla\u00eet? \u2014 \u00ab\u00e7a\u00bb  "}]
EOF
cat >"$T/toolmsgs.json" <<'EOF'
[{"role": "system", "content": "You are a terse assistant."}, {"role": "user", "content": "Hello! What's 2+2?"},
 {"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": {"name": "get_weather",
  "arguments": {"city": "Paris"}}}]},
 {"role": "tool", "content": "{\"temp\": 21}"}]
EOF
cat >"$T/tools.json" <<'EOF'
[{"type": "function", "function": {"name": "get_weather", "description": "Weather for a city",
  "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]
EOF

# check CASE SOURCE ARGS...: `cmf template SOURCE ARGS` prints exactly the case's reference rendering
check() {
    local case=$1 src=$2; shift 2
    "$CHAT_MKMODEL" expected "$case" "$T/want" || { fail "no reference $case"; return; }
    expect_ok "$CMF_BIN" template "$src" "$@" && cmp -s "$T/out" "$T/want" ||
        fail "template $case from $(basename "$src") differs: $(head -c 300 "$T/out")"
}
for src in "$Q" "$TOK/qwen3/tokenizer_config.json"; do
    check qwen3/system/agp=1 "$src" --messages "$T/system.json" --add-generation-prompt
    check qwen3/system/agp=0 "$src" --messages "$T/system.json"
    check qwen3/extra/think=0 "$src" --messages "$T/single.json" --add-generation-prompt \
        --kwargs '{"enable_thinking": false}'
    check qwen3/reasoning "$src" --messages "$T/reasoning.json" --add-generation-prompt
    check qwen3/tools "$src" --messages "$T/toolmsgs.json" --tools "$T/tools.json" --add-generation-prompt
done
for src in "$L" "$TOK/llama3/tokenizer_config.json"; do # bos_token <|begin_of_text|> from the file / the config
    check llama3/system/agp=1 "$src" --messages "$T/system.json" --add-generation-prompt
    check llama3/single/agp=0 "$src" --messages "$T/single.json"
done
check llama3/extra/bos "$L" --messages "$T/system.json" --add-generation-prompt --kwargs '{"bos_token": "<BOS>"}'
for src in "$M" "$TOK/mistral/tokenizer_config.json"; do # no template: ChatML
    check mistral/single/agp=1 "$src" --messages "$T/single.json" --add-generation-prompt
done
# the list form of chat_template: "default" is used
printf '{"bos_token": {"content": "<B>"}, "chat_template": [{"name": "tool_use", "template": "T"},
  {"name": "default", "template": "{{ bos_token }}{%% for m in messages %%}[{{ m.content }}]{%% endfor %%}"}]}' \
    >"$T/listcfg.json"
expect_ok "$CMF_BIN" template "$T/listcfg.json" --messages "$T/system.json" &&
    [ "$(cat "$T/out")" = "<B>[You are a terse assistant.][Hello! What's 2+2?]" ] || fail "list form: $(cat "$T/out")"

# template errors: the template's own message, exit 1; argument errors exit 2
printf "{%% for m in messages %%}{%% if m.role == 'system' %%}{{ raise_exception('System role not supported') }}{%% endif %%}{{ m.content }}{%% endfor %%}" >"$T/nosys.jinja"
expect_error 1 "$CMF_BIN" template "$Q" --messages "$T/system.json" --chat-template-file "$T/nosys.jinja" &&
    { grep -q "^cmf template: chat template: System role not supported$" "$T/err" || fail "raise: $(cat "$T/err")"; }
printf '{%% if x %%}unclosed' >"$T/broken.jinja"
expect_error 1 "$CMF_BIN" template "$TOK/qwen3/tokenizer_config.json" --messages "$T/system.json" \
    --chat-template-file "$T/broken.jinja" && { grep -q "template:1:" "$T/err" || fail "syntax: $(cat "$T/err")"; }
# an empty (or blank) template file and one that is not UTF-8 are errors, not a prompt without the messages
printf ' \n' >"$T/empty.jinja"
expect_error 1 "$CMF_BIN" template "$Q" --messages "$T/system.json" --chat-template-file "$T/empty.jinja" &&
    { grep -q "the chat template file is empty" "$T/err" || fail "empty template: $(cat "$T/err")"; }
# a template file over the engine's 1 MiB limit is refused before it is read whole (/dev/zero never ends)
expect_error 1 "$CMF_BIN" template "$Q" --messages "$T/system.json" --chat-template-file /dev/zero &&
    { grep -q "/dev/zero: more than 1048576 bytes" "$T/err" || fail "endless template file: $(cat "$T/err")"; }
head -c 1048577 /dev/zero | tr '\0' ' ' >"$T/big.jinja"
expect_error 1 "$CMF_BIN" template "$Q" --messages "$T/system.json" --chat-template-file "$T/big.jinja" &&
    { grep -q "1048577 bytes, more than the 1048576" "$T/err" || fail "big template file: $(cat "$T/err")"; }
printf '{{ messages[0].content }}\xff' >"$T/bad8.jinja"
expect_error 1 "$CMF_BIN" template "$Q" --messages "$T/system.json" --chat-template-file "$T/bad8.jinja" &&
    { grep -q "not valid UTF-8 at byte offset 25" "$T/err" || fail "invalid UTF-8 template: $(cat "$T/err")"; }
printf '[{"content": "no role"}]' >"$T/norole.json"
expect_error 1 "$CMF_BIN" template "$Q" --messages "$T/norole.json"
printf '{"role": "user"}' >"$T/notarray.json"
expect_error 1 "$CMF_BIN" template "$Q" --messages "$T/notarray.json" &&
    { grep -q "not a JSON array" "$T/err" || fail "not an array: $(cat "$T/err")"; }
printf '[{"role": ' >"$T/trunc.json"
expect_error 1 "$CMF_BIN" template "$Q" --messages "$T/trunc.json"
printf '{"chat_template": 7}' >"$T/badcfg.json"
expect_error 1 "$CMF_BIN" template "$T/badcfg.json" --messages "$T/system.json"
expect_error 1 "$CMF_BIN" template "$T/missing.cmf" --messages "$T/system.json"
expect_error 2 "$CMF_BIN" template "$Q"
expect_error 2 "$CMF_BIN" template "$Q" --messages "$T/system.json" --kwargs '[1]'
expect_error 2 "$CMF_BIN" template "$Q" --messages "$T/system.json" --bogus
expect_ok "$CMF_BIN" template --help && grep -q "usage: cmf template" "$T/out" || fail "template --help"

# a model file's tokenizer is its tokenizer.json
printf 'Hello world, <|im_start|> ok' >"$T/hw"
"$CMF_BIN" tokenize "$TOK/qwen3/tokenizer.json" <"$T/hw" >"$T/hw.want" 2>/dev/null
expect_ok "$CMF_BIN" tokenize "$Q" <"$T/hw" && cmp -s "$T/out" "$T/hw.want" || fail "tokenize $Q: $(cat "$T/out")"

# want_ids NAME MODEL TOKENIZER SPECIAL MSGS: the ids chat must prefill for MSGS (template, then tokenize)
want_ids() {
    "$CMF_BIN" template "$2" --messages "$5" --add-generation-prompt >"$T/$1.txt" &&
        "$CMF_BIN" tokenize "$TOK/$3/tokenizer.json" $4 <"$T/$1.txt" >"$T/$1.ids" || fail "want_ids $1"
}
# turn_ids K: the ids chat printed before reply K
turn_ids() { grep '^ids: ' "$T/err" | sed -n "${1}p" | cut -c6-; }
one_bos() { # IDS BOS
    case "$1" in "$2,$2,"*) return 1 ;; "$2,"*) return 0 ;; *) return 1 ;; esac
}

# llama3: the template writes <|begin_of_text|>; /system restarts with the new system message; '\' continues a line;
# '/system' alone removes it
printf '[{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hello"}]' >"$T/c2.json"
printf '[{"role": "system", "content": "Be brief."}, {"role": "user", "content": "line one\\nline two\\n"}]' >"$T/c3.json"
printf '[{"role": "user", "content": "x"}]' >"$T/c4.json"
want_ids t1 "$L" llama3 "" "$T/system.json"
want_ids t2 "$L" llama3 "" "$T/c2.json"
printf "Hello! What's 2+2?\n/system Be brief.\nhello\n/reset\nline one\\\\\nline two\\\\\n\n/system\nx\n" >"$T/in"
expect_ok "$CMF_BIN" chat "$L" -n 2 --seed 3 --show-ids -s "You are a terse assistant." <"$T/in"
[ "$(grep -c '^turn ' "$T/err")" -eq 4 ] || fail "4 turns expected: $(cat "$T/err")"
[ "$(turn_ids 1)" = "$(cat "$T/t1.ids")" ] || fail "llama3 turn 1 ids: $(turn_ids 1) (want $(cat "$T/t1.ids"))"
one_bos "$(turn_ids 1)" 128000 || fail "llama3: not exactly one BOS: $(turn_ids 1)"
[ "$(turn_ids 2)" = "$(cat "$T/t2.ids")" ] || fail "/system: turn 2 ids: $(turn_ids 2) (want $(cat "$T/t2.ids"))"
grep -q '^turn 2: prompt [0-9]* tokens (0 reused' "$T/err" || fail "/system did not restart: $(cat "$T/err")"
want_ids t3 "$L" llama3 "" "$T/c3.json" # /reset keeps the system message of /system
[ "$(turn_ids 3)" = "$(cat "$T/t3.ids")" ] || fail "continued lines: turn 3 ids: $(turn_ids 3) (want $(cat "$T/t3.ids"))"
want_ids t4 "$L" llama3 "" "$T/c4.json"
[ "$(turn_ids 4)" = "$(cat "$T/t4.ids")" ] || fail "/system alone: turn 4 ids: $(turn_ids 4) (want $(cat "$T/t4.ids"))"

# mistral: ChatML writes no <s>; the post-processor adds exactly one
want_ids m1 "$M" mistral --special "$T/single.json"
printf "Hello! What's 2+2?\n" | "$CMF_BIN" chat "$M" -n 1 --show-ids >"$T/out" 2>"$T/err" || fail "mistral chat"
[ "$(turn_ids 1)" = "$(cat "$T/m1.ids")" ] || fail "mistral ids: $(turn_ids 1) (want $(cat "$T/m1.ids"))"
one_bos "$(turn_ids 1)" 1 || fail "mistral: not exactly one BOS: $(turn_ids 1)"

# Ctrl-C: stops the reply (the program goes on), then two at the prompt quit with status 0
mkfifo "$T/fifo"
rm -f "$T/err" # wait_for must not see the previous command's lines
# (a fixed seed at temperature 1.5: the clock's seed let the reply end by EOS after 392 tokens, before the signal)
(exec "$CMF_BIN" chat "$M" -n 1000000 -c 4096 --temp 1.5 --seed 1 --show-ids <"$T/fifo" >"$T/out" 2>"$T/err") &
pid=$! # the subshell execs cmf: $pid is cmf itself
exec 3>"$T/fifo"
echo "tell me a long story" >&3
wait_for() { # PATTERN SECONDS
    local i
    for ((i = 0; i < $2 * 20; i++)); do grep -q "$1" "$T/err" 2>/dev/null && return 0; sleep 0.05; done
    return 1
}
wait_for '^ids: ' 60 || fail "chat did not start a reply: $(cat "$T/err")"
sleep 0.3
kill -INT $pid 2>/dev/null
wait_for '^\[interrupted' 20 || fail "Ctrl-C did not stop the reply: $(tail -c 300 "$T/err")"
wait_for '^turn 1: ' 5 && ! grep -q 'is full' "$T/err" || fail "turn 1 after Ctrl-C: $(cat "$T/err")"
sleep 0.5
kill -0 $pid 2>/dev/null || fail "the first Ctrl-C ended the program"
kill -INT $pid 2>/dev/null
wait_for 'Ctrl-C again to quit' 10 || fail "no hint after Ctrl-C at the prompt: $(tail -c 300 "$T/err")"
sleep 0.5
kill -INT $pid 2>/dev/null
for ((i = 0; i < 200; i++)); do kill -0 $pid 2>/dev/null || break; sleep 0.05; done
if kill -0 $pid 2>/dev/null; then
    fail "two Ctrl-C at the prompt did not quit"
    kill $pid
fi
wait $pid
rc=$?
exec 3>&-
[ "$rc" -eq 0 ] || fail "exit status $rc after Ctrl-C twice: $(tail -c 300 "$T/err")"
clean_stderr "$T/err" || fail "sanitizer output (Ctrl-C)"

finish
