#!/usr/bin/env bash
# The main job, end to end: build cmf, convert the bundled real model (Karpathy's stories260K, llama.cpp GGUF)
# to CMF, verify it, and generate text greedily from an empty prompt.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh --build
cmake -S . -B build-demo -DCMAKE_BUILD_TYPE=Release -DCMF_CUDA=OFF >/dev/null
cmake --build build-demo -j"$(nproc)" --target cmf-cli >/dev/null
./build-demo/cmf convert ../shared/data/models/stories260K-gguf/stories260Ktok512.gguf -o build-demo/stories260K.cmf
./build-demo/cmf verify build-demo/stories260K.cmf
./build-demo/cmf run build-demo/stories260K.cmf -p "" -n 256 -c 512 --temp 0
