#!/usr/bin/env bash
# The chat page at / driven by headless Chromium (Debian's chromium through playwright-core, js/page.test.mjs):
# type a message, see a streamed answer, save a screenshot ($CMF_TMP/js_page/chat.png, a test artifact in the build
# directory). Skips (77) without node, node_modules or chromium.
set -euo pipefail
chrome=${CHROMIUM:-$(command -v chromium || command -v chromium-browser || true)}
if ! command -v node >/dev/null || [ ! -d "$CMF_JS/node_modules/playwright-core" ] || [ -z "$chrome" ]; then
  echo "skipped: node, $CMF_JS/node_modules (scripts/deps.sh runs npm ci there) or chromium is absent"
  exit 77
fi
T="$CMF_TMP/js_page"
rm -rf "$T" && mkdir -p "$T"
"$CMF_BIN" convert "$CMF_SHARED/data/models/stories260K-gguf/stories260Ktok512.gguf" -o "$T/stories.cmf" --no-progress >/dev/null
CHROMIUM="$chrome" exec node "$CMF_JS/page.test.mjs" "$T/stories.cmf" "$T/chat.png"
