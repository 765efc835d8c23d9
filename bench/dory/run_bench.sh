#!/usr/bin/env bash
# run_bench.sh — decode speed of a Dory1.0-4B-shaped checkpoint (random weights, q8) at loops 1, 2 and 4.
#   1. scripts/dory/make_4b_shape.py writes the random HF-schema checkpoint (7.95 GB BF16) to $WORK/dory4b
#   2. `cmf convert --quant q8` makes $WORK/dory4b-q8.cmf (3.7 GiB); the BF16 source is deleted afterwards
#   3. `cmf bench -p 0 -n N -r R -t T --loops L` for L = 1, 2, 4 (last_loop KV, the generated config's mode),
#      each line preceded by the time and /proc/loadavg (the machine may be shared)
# usage: bench/dory/run_bench.sh CMF_BINARY [WORK_DIR=/tmp] [N=8] [R=3] [T=2]
# The weights are not kept in the repository; delete $WORK/dory4b-q8.cmf when done.
set -euo pipefail
CMF=${1:?usage: run_bench.sh CMF_BINARY [WORK_DIR] [N] [R] [T]}
WORK=${2:-/tmp}
N=${3:-8}
R=${4:-3}
T=${5:-2}
HERE=$(cd "$(dirname "$0")/../.." && pwd)
PY=${PYTHON:-/usr/bin/python3}
if [ ! -f "$WORK/dory4b-q8.cmf" ]; then
    nice -n 10 "$PY" "$HERE/scripts/dory/make_4b_shape.py" "$WORK/dory4b"
    nice -n 10 "$CMF" convert "$WORK/dory4b" -o "$WORK/dory4b-q8.cmf" --quant q8 --no-progress
    rm -rf "$WORK/dory4b"
fi
grep -m1 "model name" /proc/cpuinfo || true
for L in 1 2 4; do
    echo "== loops $L $(date -u +%FT%TZ) load $(cut -d' ' -f1-3 /proc/loadavg)"
    nice -n 10 "$CMF" bench "$WORK/dory4b-q8.cmf" -p 0 -n "$N" -r "$R" -t "$T" --loops "$L" 2>&1 | tail -1
done
echo "== end $(date -u +%FT%TZ) load $(cut -d' ' -f1-3 /proc/loadavg)"
