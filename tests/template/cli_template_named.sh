#!/usr/bin/env bash
# cli_template_named.sh — `cmf template` with a tokenizer_config.json whose chat_template is transformers' list of
# named templates: with --tools the one named "tool_use" renders (as transformers' get_chat_template picks it),
# without tools the "default" one; a list without "default" is one error line. The rendering of each named
# template must equal the rendering of the same template text given with --chat-template-file. Also: a
# tokenizer_config.json that starts with a UTF-8 BOM is read as JSON (the real qwen3 one, same output as without).
. "$(dirname "$0")/../cli/lib.sh"
DEF='{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}{% if add_generation_prompt %}<assistant>{% endif %}'
TOOL='[tools: {{ tools | tojson }}]{% for m in messages %}({{ m.role }}){{ m.content }}{% endfor %}'
printf '%s' "$DEF" >"$T/default.jinja"
printf '%s' "$TOOL" >"$T/tool_use.jinja"
cat >"$T/named.json" <<EOF
{"bos_token": "<s>", "chat_template": [{"name": "default", "template": "$DEF"},
                                       {"name": "tool_use", "template": "$TOOL"}]}
EOF
cat >"$T/msgs.json" <<'EOF'
[{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Weather in Paris?"}]
EOF
cat >"$T/tools.json" <<'EOF'
[{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
  "properties": {"city": {"type": "string"}}}}}]
EOF
render() { # OUT ARGS...: cmf template ARGS > OUT
    local out=$1; shift
    rm -f "$out"
    expect_ok "$CMF_BIN" template "$@" && cp "$T/out" "$out"
}
render "$T/def_want" "$T/named.json" --messages "$T/msgs.json" --chat-template-file "$T/default.jinja" \
    --add-generation-prompt
render "$T/tool_want" "$T/named.json" --messages "$T/msgs.json" --chat-template-file "$T/tool_use.jinja" \
    --tools "$T/tools.json"
grep -q 'get_weather' "$T/tool_want" || fail "the tool_use template did not see the tools: $(cat "$T/tool_want")"
grep -q '^<system>Be brief' "$T/def_want" || fail "the default template: $(cat "$T/def_want")"
render "$T/tool_got" "$T/named.json" --messages "$T/msgs.json" --tools "$T/tools.json"
cmp -s "$T/tool_got" "$T/tool_want" || fail "with --tools: $(head -c 300 "$T/tool_got"), want the tool_use template"
render "$T/def_got" "$T/named.json" --messages "$T/msgs.json" --add-generation-prompt
cmp -s "$T/def_got" "$T/def_want" || fail "without tools: $(head -c 300 "$T/def_got"), want the default template"

# with tools but no "tool_use" template: "default" (rendering the tools it ignores)
sed 's/"tool_use"/"rag"/' "$T/named.json" >"$T/notool.json"
render "$T/def_tools" "$T/notool.json" --messages "$T/msgs.json" --tools "$T/tools.json" --add-generation-prompt
cmp -s "$T/def_tools" "$T/def_want" || fail "tools without tool_use: $(head -c 300 "$T/def_tools")"
# no "default" and no tools: one error line naming the templates there are
sed 's/"default"/"plain"/' "$T/notool.json" >"$T/nodefault.json"
expect_error 1 "$CMF_BIN" template "$T/nodefault.json" --messages "$T/msgs.json" &&
    { grep -q 'chat_template: the list of named templates has no "default" (it has: "plain", "rag")' "$T/err" ||
          fail "no default: $(cat "$T/err")"; }

# a UTF-8 BOM before the JSON: still a tokenizer_config.json, same rendering
CFG="$CMF_SHARED/data/tokenizers/qwen3/tokenizer_config.json"
{ printf '\xef\xbb\xbf'; cat "$CFG"; } >"$T/bom_config.json"
render "$T/nobom" "$CFG" --messages "$T/msgs.json" --add-generation-prompt
render "$T/bom" "$T/bom_config.json" --messages "$T/msgs.json" --add-generation-prompt
[ -s "$T/nobom" ] && cmp -s "$T/bom" "$T/nobom" || fail "BOM config: $(head -c 300 "$T/bom")"
grep -q '<|im_start|>system' "$T/bom" || fail "BOM config: not qwen3's template: $(head -c 300 "$T/bom")"
finish
