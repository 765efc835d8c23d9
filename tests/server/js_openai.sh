#!/usr/bin/env bash
# The official `openai` Node client against `cmf serve` (js/openai.test.mjs): stories260K (its GGUF converted with
# `cmf convert`) and a Qwen3-architecture chat model with the real Qwen3 tokenizer and template (written by
# server_refgen, which also generates the expected texts in process). Skips (77) without node or node_modules.
set -euo pipefail
if ! command -v node >/dev/null || [ ! -d "$CMF_JS/node_modules/openai" ]; then
  echo "skipped: node or $CMF_JS/node_modules is absent (scripts/deps.sh runs npm ci there)"
  exit 77
fi
T="$CMF_TMP/js_openai"
rm -rf "$T" && mkdir -p "$T"
"$CMF_BIN" convert "$CMF_SHARED/data/models/stories260K-gguf/stories260Ktok512.gguf" -o "$T/stories.cmf" --no-progress >/dev/null
"$SERVER_REFGEN" "$T" "$T/stories.cmf" "$T/refs.json"
exec node "$CMF_JS/openai.test.mjs" "$T/refs.json"
