#!/usr/bin/env bash
# Installs what cmf needs to build and test on Debian 12 (run as root, or with sudo available): the build tools and
# libraries, nodejs/npm and chromium for the server's client tests (tests/server/js*), then `npm ci` in
# tests/server/js (the openai client and playwright-core, versions pinned by its package-lock.json) when npm is
# available. Without node_modules those tests skip (exit 77).
# `deps.sh --build`: only what building cmf needs (scripts/demo.sh): compiler, cmake, pkg-config and the libraries.
set -euo pipefail
cd "$(dirname "$0")/.."
only_build=0
[ "${1:-}" = --build ] && only_build=1
pkgs="cmake make gcc pkg-config libcjson-dev libpcre2-dev libutf8proc-dev libmicrohttpd-dev libedit-dev"
if [ $only_build = 0 ]; then
  pkgs="$pkgs ninja-build" # scripts/test.sh's build trees (make leaves a core idle between targets)
  pkgs="$pkgs clang libclang-rt-dev" # the clang -Werror build, libFuzzer
  pkgs="$pkgs gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user" # the arm64 kernel check (scripts/cross_neon.sh)
  command -v npm >/dev/null || pkgs="$pkgs nodejs npm" # a node from elsewhere (e.g. nodesource) is kept
  command -v chromium >/dev/null || pkgs="$pkgs chromium"
fi
missing=""
for p in $pkgs; do dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"; done
if [ -n "$missing" ]; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends $missing
fi
if [ $only_build = 0 ] && command -v npm >/dev/null && [ ! -d tests/server/js/node_modules/openai ]; then
  (cd tests/server/js && npm ci --no-audit --no-fund --loglevel=error) ||
    echo "deps.sh: npm ci in tests/server/js failed: the Node client tests will be skipped" >&2
fi
