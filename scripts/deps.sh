#!/usr/bin/env bash
# Installs what cmf needs to build and test on Debian 12 (run as root, or with sudo available).
set -euo pipefail
pkgs="cmake make gcc clang libclang-rt-dev pkg-config libcjson-dev libpcre2-dev libutf8proc-dev libmicrohttpd-dev libedit-dev"
missing=""
for p in $pkgs; do dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"; done
[ -z "$missing" ] && exit 0
SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends $missing
