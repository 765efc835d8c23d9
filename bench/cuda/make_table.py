#!/usr/bin/env python3
"""make_table.py RESULTS.txt "card" - the markdown table of bench/cuda/run_acceptance.sh from the "RESULT k=v ..."
lines of gpu_bench (cmf) and hf_bench.py (transformers). Roofline = copy GB/s / weight GB per token (decode)."""
import sys
from collections import defaultdict


def parse(path):
    ours, hf = defaultdict(dict), defaultdict(dict)
    for line in open(path, errors="replace"):
        if not line.startswith("RESULT"):
            continue
        kv = dict(x.split("=", 1) for x in line.split()[1:] if "=" in x)
        if line.startswith("RESULT hf"):
            if "test" in kv:
                hf[kv["shape"]][kv["test"] + ("" if kv.get("variant", "eager") == "eager" else "+compile")] = float(kv["tps"])
        elif "test" in kv:
            ours[kv["model"]][kv["test"]] = float(kv["tps"])
        elif "weights_gb" in kv:
            ours[kv["model"]].update(gb=float(kv["weights_gb"]), bw=float(kv["copy_gbs"]), quant=kv["quant"])
    return ours, hf


def f(v, p=0):
    return "-" if v is None else f"{v:,.{p}f}"


def main():
    ours, hf = parse(sys.argv[1])
    print(f"Card: {sys.argv[2] if len(sys.argv) > 2 else '?'}. t/s = tokens per second, batch 1. "
          "roofline = copy bandwidth / weight bytes per token; % = share of it. HF = transformers bf16 eager "
          "generate (+compile: static cache + torch.compile) on the same card in the same call.\n")
    print("| model | weights GB/token | copy GB/s | roofline t/s | pp512 cmf | pp512 HF | tg@128 cmf | % roof | "
          "tg@128 no graph | tg@128 HF | tg@4096 cmf | % roof | tg@4096 HF | cmf/HF tg@128 |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for name, r in ours.items():
        shape = name.rsplit("-", 1)[0]
        h = hf.get(shape, {})
        roof = r["bw"] / r["gb"] if r.get("gb") else None
        t128, t4k = r.get("tg@128"), r.get("tg@4096")
        hf128 = h.get("tg@128")
        hfc = h.get("tg@128+compile")
        hf128s = f(hf128, 1) + (f" / {f(hfc, 1)}" if hfc else "")
        hf4k = f(h.get("tg@4096"), 1) + (f" / {f(h.get('tg@4096+compile'), 1)}" if h.get("tg@4096+compile") else "")
        pct = lambda v: "-" if v is None or roof is None else f"{100 * v / roof:.0f}%"
        best = max([x for x in (hf128, hfc) if x] or [0])
        print(f"| {name} | {f(r.get('gb'), 3)} | {f(r.get('bw'))} | {f(roof)} | {f(r.get('pp512'))} | "
              f"{f(h.get('pp512'))} | {f(t128)} | {pct(t128)} | {f(r.get('tg@128-nograph'))} | {hf128s} | {f(t4k)} | "
              f"{pct(t4k)} | {hf4k} | {'-' if not best or not t128 else f'{t128 / best:.1f}x'} |")


if __name__ == "__main__":
    main()
