#!/usr/bin/env bash
# test_install.sh BUILD_DIR CC — `cmake --install` of the build into a scratch prefix, then a program outside the
# tree (app_greedy.c) built with `$CC app.c $(pkg-config --cflags --libs cmf)` against it, run on stories260K
# converted by the installed `cmf`. Skips (exit 77, ctest SKIP_RETURN_CODE) when pkg-config is missing.
set -u
B=$1
CC=$2
: "${CMF_SHARED:?}"
: "${CMF_TMP:=/tmp}"
if ! command -v pkg-config >/dev/null; then echo "SKIP: no pkg-config"; exit 77; fi
P="$CMF_TMP/install-$$"
trap 'rm -rf "$P"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
cmake --install "$B" --prefix "$P" >"$P.log" 2>&1 || { cat "$P.log" >&2; rm -f "$P.log"; fail "cmake --install"; }
rm -f "$P.log"
for f in include/cmf.h lib/libcmf.a bin/cmf lib/pkgconfig/cmf.pc; do [ -e "$P/$f" ] || fail "$f not installed"; done
export PKG_CONFIG_PATH="$P/lib/pkgconfig"
flags=$(pkg-config --cflags --libs cmf) || fail "pkg-config --cflags --libs cmf"
for l in -lcjson -lpcre2-8 -lutf8proc -lm -lpthread -ldl; do
    case " $flags " in *" $l "*) ;; *) fail "cmf.pc lacks $l: $flags" ;; esac
done
# shellcheck disable=SC2086
"$CC" -std=c11 -Wall -Wextra -Werror -o "$P/app" "$(dirname "$0")/app_greedy.c" $flags || fail "build against the installed tree: $CC ... $flags"
"$P/bin/cmf" convert "$CMF_SHARED/data/models/stories260K-gguf/stories260Ktok512.gguf" -o "$P/st.cmf" --no-progress \
    >/dev/null 2>&1 || fail "installed cmf convert"
out=$("$P/app" "$P/st.cmf" 1 403 407) || fail "app_greedy: $out"
echo "app_greedy: $out"
echo "all checks passed"
