# lib.sh — the setup the device-call scripts of bench/cuda share (sourced, not run: `. "$R/bench/cuda/lib.sh"` after
# R (the repository root the call runs in) and DEPS (the carried folder: Debian .debs, shared/data, optional head.tar
# = `git archive HEAD`) are set):
#  - cmf_dev_setup: unpacks the carried .debs (cJSON, PCRE2, utf8proc, microhttpd, pkg-config: the device image
#    lacks them) into P=/tmp/cmfdeps and exports the library and pkg-config paths; sets S, the tree to build:
#    /tmp/cmfsrc extracted from $DEPS/head.tar when it exists (the committed tree, not the shared working tree),
#    else $R (CMF_SRC_DIR / CMF_DEPS_DIR move /tmp/cmfsrc / /tmp/cmfdeps, e.g. for a dry run on a shared machine);
#    CMF_KEEP_SRC=1 keeps an extracted tree that is already there (a second call on a still-warm machine then
#    reuses its build folders);
#  - cmf_configure BUILD_DIR [SOURCE_DIR]: the Release configure of SOURCE_DIR (default $S) every script uses (stdout
#    and stderr to the caller's redirection);
#  - geo SHAPE: the make_random_llama geometry of a benchmark shape (hf_bench.py's SHAPES): hidden layers
#    intermediate vocab n_heads n_kv_heads head_dim qk_norm tied;
#  - el: "[seconds since the script sourced this]";
#  - cmf_dev_header: the card, the date, and which tree runs: the device copy's git HEAD (its .git can lag the
#    working tree it was copied with) and the sha1 of $S/src/backend/cuda/* in name order, which tells two trees'
#    CUDA code apart (locally: `cat $(ls src/backend/cuda/* | LC_ALL=C sort) | sha1sum`).
T0=$(date +%s)
el() { echo "[$(($(date +%s) - T0)) s]"; }

cmf_dev_setup() {
    S=$R
    local src=${CMF_SRC_DIR:-/tmp/cmfsrc}
    if [ -f "$R/$DEPS/head.tar" ] && [ "${CMF_KEEP_SRC:-0}" = 1 ] && [ -f "$src/CMakeLists.txt" ]; then
        S=$src # a warm machine's tree (and its build folders) from the previous call
    elif [ -f "$R/$DEPS/head.tar" ]; then
        rm -rf "$src" && mkdir -p "$src" && tar -xf "$R/$DEPS/head.tar" -C "$src" && S=$src
    fi
    P=${CMF_DEPS_DIR:-/tmp/cmfdeps}
    mkdir -p $P && for f in "$R"/$DEPS/*.deb; do dpkg -x "$f" $P; done
    sed -i '/^Requires.private/d' $P/usr/lib/x86_64-linux-gnu/pkgconfig/libmicrohttpd.pc 2>/dev/null # gnutls' .pc is absent
    export LD_LIBRARY_PATH=$P/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
    export PKG_CONFIG_SYSROOT_DIR=$P PKG_CONFIG_LIBDIR=$P/usr/lib/x86_64-linux-gnu/pkgconfig:$P/usr/share/pkgconfig
}

cmf_configure() {
    cmake -S "${2:-$S}" -B "$1" -DCMAKE_BUILD_TYPE=Release -DCMF_WERROR=OFF -DCMF_SHARED_DIR="$R/$DEPS/shared" \
        -DPKG_CONFIG_EXECUTABLE=$P/usr/bin/pkgconf -DCMAKE_C_FLAGS="-I$P/usr/include"
}

geo() {
    case $1 in
    qwen3-0.6b) echo 1024 28 3072 151936 16 8 128 1 1 ;;
    qwen3-4b) echo 2560 36 9728 151936 32 8 128 1 1 ;;
    llama-8b) echo 4096 32 14336 128256 32 8 128 0 0 ;;
    esac
}

cmf_dev_header() {
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
    echo "date: $(date -u '+%Y-%m-%d %H:%M UTC'); git HEAD: $(git -C "$R" log --oneline -1 2>/dev/null | cut -c1-60);" \
        "CUDA sources sha1: $(cd "$S" && cat $(ls src/backend/cuda/* | LC_ALL=C sort) | sha1sum | cut -c1-12)"
}
