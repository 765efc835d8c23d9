#!/usr/bin/env bash
# The main job, end to end: build cmf, convert the bundled real model (Karpathy's stories260K, llama.cpp GGUF)
# to CMF, verify it, and generate text greedily from an empty prompt.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$(nproc)" --target cmf-cli >/dev/null
./build/cmf convert ../shared/data/models/stories260K-gguf/stories260Ktok512.gguf -o build/stories260K.cmf
./build/cmf verify build/stories260K.cmf
./build/cmf run build/stories260K.cmf -p "" -n 256 -c 512 --temp 0
