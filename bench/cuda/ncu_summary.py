"""Summarizes an Nsight Compute CSV (ncu --metrics gpu__time_duration.sum --csv) of decode steps: GPU time per
kernel name (template arguments dropped), launches and the mean, largest total first, and the total.
Usage: python3 bench/cuda/ncu_summary.py ncu.csv"""
import csv
import re
import sys
from collections import defaultdict


def main(path):
    rows = []
    with open(path, newline="") as f:
        lines = [l for l in f if l.startswith('"')]  # ncu prints its own lines (==PROF==) too
    for r in csv.DictReader(lines):
        if r.get("Metric Name") != "gpu__time_duration.sum":
            continue
        unit = r.get("Metric Unit", "ns")
        v = float(r["Metric Value"].replace(",", ""))
        v *= {"ns": 1e-3, "usecond": 1.0, "us": 1.0, "msecond": 1e3, "ms": 1e3}.get(unit, 1e-3)
        name = re.sub(r"<.*", "", r["Kernel Name"]).replace("void ", "").strip()
        rows.append((name, v))
    tot = defaultdict(float)
    cnt = defaultdict(int)
    for n, v in rows:
        tot[n] += v
        cnt[n] += 1
    print(f"{len(rows)} kernels, {sum(tot.values()):.1f} us of GPU time in all")
    print(f"{'kernel':40s} {'launches':>8s} {'total us':>10s} {'mean us':>8s}")
    for n in sorted(tot, key=lambda k: -tot[k]):
        print(f"{n[:40]:40s} {cnt[n]:8d} {tot[n]:10.1f} {tot[n] / cnt[n]:8.2f}")


if __name__ == "__main__":
    main(sys.argv[1])
