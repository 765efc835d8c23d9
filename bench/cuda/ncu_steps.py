"""GPU time per decode step, by kernel, from an Nsight Compute CSV (ncu --metrics gpu__time_duration.sum --csv) of
a gpu_bench run: the kernels are split into forwards at each embedding kernel (k_embed starts every forward), the
last STEPS forwards (decode steps of one token) are averaged, and each kernel name (template arguments dropped)
gets its launches and us per step, largest first, with the step's total. ncu runs kernels one at a time (no PDL
overlap, no graph launch savings), so the total is the step's kernel time without gaps.
Usage: python3 bench/cuda/ncu_steps.py ncu.csv [STEPS=2] [LABEL]"""
import csv
import re
import sys
from collections import defaultdict


def kernels(path):
    with open(path, newline="") as f:
        lines = [l for l in f if l.startswith('"')]  # ncu prints its own lines (==PROF==) too
    out = []
    for r in csv.DictReader(lines):
        if r.get("Metric Name") != "gpu__time_duration.sum":
            continue
        unit = r.get("Metric Unit", "ns")
        v = float(r["Metric Value"].replace(",", ""))
        v *= {"ns": 1e-3, "nsecond": 1e-3, "usecond": 1.0, "us": 1.0, "msecond": 1e3, "ms": 1e3}.get(unit, 1e-3)
        name = re.sub(r"<.*", "", r["Kernel Name"]).replace("void ", "").strip()
        out.append((name, v))
    return out


def main(path, steps=2, label=""):
    ks = kernels(path)
    starts = [i for i, (n, _) in enumerate(ks) if n.startswith("k_embed")]
    if len(starts) < steps:
        print(f"{label}: only {len(starts)} forwards in {path}")
        return
    sel = ks[starts[-steps]:]
    tot = defaultdict(float)
    cnt = defaultdict(int)
    for n, v in sel:
        tot[n] += v / steps
        cnt[n] += 1
    print(f"== {label}: GPU time per decode step (mean of the last {steps} forwards), {sum(tot.values()):.1f} us in "
          f"{len(sel) / steps:.0f} kernels")
    print(f"{'kernel':40s} {'launches':>8s} {'us/step':>9s} {'us each':>8s}")
    for n in sorted(tot, key=lambda k: -tot[k]):
        print(f"{n[:40]:40s} {cnt[n] / steps:8.0f} {tot[n]:9.1f} {tot[n] * steps / cnt[n]:8.2f}")


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 2, sys.argv[3] if len(sys.argv) > 3 else "")
