#!/usr/bin/env bash
# compare_qwen05.sh — decode/prefill speed of cmf vs llama.cpp on a random-weight Qwen2.5-0.5B-shaped model (hidden
# 896, 24 layers, 14 heads / 2 KV heads, ffn 4864, vocab 151936, tied embeddings; 494 M parameters), same weights,
# interleaved rounds, plus the machine's read bandwidth measured in the same rounds.
#
# usage: LLAMA_BIN=/path/to/llama.cpp/build/bin bench/compare_qwen05.sh [-t 2] [-k ROUNDS=3] [CMF_BIN]
#   CMF_BIN default build-quant3-rel/cmf (a Release -DCMF_NATIVE=ON build); WORK default /tmp/cmf-qwen05.
#   PIN     optional command prefix for every measured program, e.g. PIN="taskset -c 0,1" on a larger machine.
#   READBW  optional prebuilt readbw binary (default: built from bench/readbw.c with cc).
#   CMF_BEFORE optional second cmf binary (e.g. a build of an older commit), run in the same rounds right after
#           CMF_BIN; the table then gains its column and the after/before ratio.
# Models (bench/make_random_gguf.py --arch qwen2 ...): Q4_0 GGUF -> `cmf convert` (lossless repack to q4_block),
# Q8_0 GGUF -> `cmf convert --quant q8` (decoded, re-quantized to q8_row), and (unless Q4TP=0) the q4_block file
# -> `cmf requant --quant q4tp`, benched by cmf only and put next to llama.cpp's Q4_0 of the same round. Each round runs, in this order:
# readbw (T threads, 1 GiB), then for q4_0 and q8_0: `llama-bench -m M.gguf -p 512 -n 128 -r 1 -t T -o json` and
# `cmf bench M.cmf -p 512 -n 128 -r 1 -t T --json` (each does its own warm-up). The table gives the mean and the
# spread (min..max) over rounds. Decode bandwidth use = model bytes per token x tg t/s / read bandwidth (best
# readbw of the rounds), model bytes = the file size (all weights are read once per token: the tied embedding is
# the output matrix; the tokenizer metadata, < 1%, is counted too).
set -euo pipefail
T=2; K=3
while [ $# -gt 0 ]; do
    case "$1" in
    -t) T=$2; shift 2 ;;
    -k) K=$2; shift 2 ;;
    -h | --help) sed -n '2,16p' "$0"; exit 0 ;;
    *) break ;;
    esac
done
ROOT=$(cd "$(dirname "$0")/.." && pwd)
SHARED=${CMF_SHARED:-$ROOT/../shared}
CMF=${1:-$ROOT/build-quant3-rel/cmf}
WORK=${WORK:-/tmp/cmf-qwen05}
LB=${LLAMA_BIN:?set LLAMA_BIN to a folder with llama-bench}/llama-bench
mkdir -p "$WORK"
PIN=${PIN:-}
if [ -n "${READBW:-}" ]; then cp "$READBW" "$WORK/readbw"; else cc -O3 -march=native -pthread "$ROOT/bench/readbw.c" -o "$WORK/readbw"; fi
TOK=$SHARED/data/tokenizers/llama2-sentencepiece/tokenizer.bin
for q in q4_0 q8_0; do
    [ -f "$WORK/qwen05-$q.gguf" ] || python3 "$ROOT/bench/make_random_gguf.py" "$WORK/qwen05-$q.gguf" --type $q \
        --arch qwen2 --hidden 896 --ffn 4864 --layers 24 --heads 14 --kv-heads 2 --vocab 151936 --ctx 32768 \
        --tokenizer "$TOK" >&2
done
[ -f "$WORK/qwen05-q4_0.cmf" ] || "$CMF" convert "$WORK/qwen05-q4_0.gguf" -o "$WORK/qwen05-q4_0.cmf" --no-progress >&2
[ -f "$WORK/qwen05-q8_0.cmf" ] || "$CMF" convert "$WORK/qwen05-q8_0.gguf" -o "$WORK/qwen05-q8_0.cmf" --quant q8 --no-progress >&2
[ "${Q4TP:-1}" = 0 ] || [ -f "$WORK/qwen05-q4tp.cmf" ] || "$CMF" requant "$WORK/qwen05-q4_0.cmf" -o "$WORK/qwen05-q4tp.cmf" --quant q4tp >&2
rm -f "$WORK"/round-*.json
export HAVE_BEFORE=${CMF_BEFORE:+1}
for k in $(seq 1 "$K"); do
    echo "round $k/$K: $(uptime)" >&2
    $PIN "$WORK/readbw" "$T" 1024 10 >"$WORK/round-$k-readbw.json"
    for q in q4_0 q8_0; do
        $PIN "$LB" -m "$WORK/qwen05-$q.gguf" -p 512 -n 128 -r 1 -t "$T" -o json >"$WORK/round-$k-llama-$q.json" 2>/dev/null
        $PIN "$CMF" bench "$WORK/qwen05-$q.cmf" -p 512 -n 128 -r 1 -t "$T" --json >"$WORK/round-$k-cmf-$q.json"
        if [ -n "${CMF_BEFORE:-}" ]; then
            $PIN "$CMF_BEFORE" bench "$WORK/qwen05-$q.cmf" -p 512 -n 128 -r 1 -t "$T" --json >"$WORK/round-$k-before-$q.json"
        fi
    done
    if [ "${Q4TP:-1}" != 0 ]; then # cmf only: q4tp next to llama.cpp's Q4_0 of the same round
        $PIN "$CMF" bench "$WORK/qwen05-q4tp.cmf" -p 512 -n 128 -r 1 -t "$T" --json >"$WORK/round-$k-cmf-q4tp.json"
        if [ -n "${CMF_BEFORE:-}" ]; then
            $PIN "$CMF_BEFORE" bench "$WORK/qwen05-q4tp.cmf" -p 512 -n 128 -r 1 -t "$T" --json >"$WORK/round-$k-before-q4tp.json"
        fi
    fi
done
export HAVE_Q4TP=$([ "${Q4TP:-1}" = 0 ] || echo 1)
python3 - "$WORK" "$K" "$T" <<'EOF2'
import json, os, sys
work, K, T = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
def key(o):
    return ("pp%d" % o["n_prompt"]) if o["n_prompt"] else ("tg%d" % o["n_gen"])
bw = [json.load(open("%s/round-%d-readbw.json" % (work, k))) for k in range(1, K + 1)]
best_bw = max(b["best_gbs"] for b in bw)
print("Machine: %s" % open("/proc/cpuinfo").read().split("model name")[1].split("\n")[0].strip(": \t"))
print("Read bandwidth, %d threads, 1 GiB: best %.2f GB/s; per round best/median: %s" % (T, best_bw,
      ", ".join("%.2f/%.2f" % (b["best_gbs"], b["median_gbs"]) for b in bw)))
print()
before = bool(os.environ.get("HAVE_BEFORE"))
sides = ("llama", "cmf", "before") if before else ("llama", "cmf")
if before:
    print("| weights | test | llama.cpp t/s (min..max) | cmf before t/s (min..max) | cmf t/s (min..max) | before / llama.cpp | cmf / llama.cpp | cmf / before | decode GB/s llama.cpp / cmf | of read bw llama.cpp / before / cmf |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
else:
    print("| weights | test | llama.cpp t/s (min..max) | cmf t/s (min..max) | cmf / llama.cpp | decode GB/s llama.cpp / cmf | of read bw llama.cpp / cmf |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: |")
rows = [("q4_0", "q4_0", "q4_block (lossless from Q4_0)"), ("q8_0", "q8_0", "q8_row (--quant q8)")]
if os.environ.get("HAVE_Q4TP"):
    rows.insert(1, ("q4_0", "q4tp", "q4tp (cmf requant of the q4_block file)"))
for q, cq, cmfq in rows:
    res = {}
    for side in sides:
        for k in range(1, K + 1):
            for o in json.load(open("%s/round-%d-%s-%s.json" % (work, k, side, q if side == "llama" else cq))):
                res.setdefault((side, key(o)), []).append(o["avg_ts"])
    lbytes = os.path.getsize("%s/qwen05-%s.gguf" % (work, q))
    cbytes = os.path.getsize("%s/qwen05-%s.cmf" % (work, cq))
    for test in ("pp512", "tg128"):
        l, c = res.get(("llama", test), [0]), res.get(("cmf", test), [0])
        lm, cm = sum(l) / len(l), sum(c) / len(c)
        extra = "| | |"
        if before:
            b = res.get(("before", test), [0])
            bm = sum(b) / len(b)
            if test.startswith("tg"):
                lg, bg, cg = lbytes * lm / 1e9, cbytes * bm / 1e9, cbytes * cm / 1e9
                extra = "| %.2f / %.2f | %.0f%% / %.0f%% / %.0f%% |" % (lg, cg, 100 * lg / best_bw, 100 * bg / best_bw,
                                                                    100 * cg / best_bw)
            print("| %s GGUF / cmf %s | %s | %.2f (%.2f..%.2f) | %.2f (%.2f..%.2f) | %.2f (%.2f..%.2f) | %.3f | %.3f | %.3f %s" % (
                  q.upper(), cmfq, test, lm, min(l), max(l), bm, min(b), max(b), cm, min(c), max(c),
                  bm / lm if lm else 0, cm / lm if lm else 0, cm / bm if bm else 0, extra))
            continue
        if test.startswith("tg"):
            lg, cg = lbytes * lm / 1e9, cbytes * cm / 1e9
            extra = "| %.2f / %.2f | %.0f%% / %.0f%% |" % (lg, cg, 100 * lg / best_bw, 100 * cg / best_bw)
        print("| %s GGUF / cmf %s | %s | %.2f (%.2f..%.2f) | %.2f (%.2f..%.2f) | %.3f %s" % (q.upper(), cmfq, test,
              lm, min(l), max(l), cm, min(c), max(c), cm / lm if lm else 0, extra))
print()
print("model bytes/token: Q4_0 GGUF %.1f MB, cmf q4_block %.1f MB; Q8_0 GGUF %.1f MB, cmf q8_row %.1f MB" % (
      os.path.getsize("%s/qwen05-q4_0.gguf" % work) / 1e6, os.path.getsize("%s/qwen05-q4_0.cmf" % work) / 1e6,
      os.path.getsize("%s/qwen05-q8_0.gguf" % work) / 1e6, os.path.getsize("%s/qwen05-q8_0.cmf" % work) / 1e6))
if os.environ.get("HAVE_Q4TP"):
    print("cmf q4tp %.1f MB (decode reads its load-time repacked copy: 17 bytes per 32 values + 8 per row on AVX-512, 20 on AVX2)" % (
          os.path.getsize("%s/qwen05-q4tp.cmf" % work) / 1e6))
EOF2
