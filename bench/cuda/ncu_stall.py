"""The product kernels of an Nsight Compute CSV written by bench/cuda/ncu_bw.sh's STALL=1 run (time, DRAM bytes,
warp instructions, issue-slot use, active warps per SM, and the stall reasons per issued instruction), the last
launch of each distinct (kernel, time-rank) position: one decode step's products in launch order, the largest
stall reasons first. Usage: python3 bench/cuda/ncu_stall.py stall.csv [LABEL]"""
import csv
import sys
from collections import OrderedDict

from ncu_bw import UNIT  # the unit table of the same CSV format (this script's folder is on sys.path)

PFX = "smsp__average_warps_issue_stalled_"


def main(path, label=""):
    with open(path, newline="") as f:
        lines = [l for l in f if l.startswith('"')]
    rows = OrderedDict()
    for r in csv.DictReader(lines):
        d = rows.setdefault(r["ID"], {"name": r["Kernel Name"]})
        d[r["Metric Name"]] = float(r["Metric Value"].replace(",", "")) * UNIT.get(r.get("Metric Unit", ""), 1.0)
    ks = list(rows.values())
    n = len(ks)
    step = ks[n // 2:] if n >= 2 else ks  # gpu_bench -g 2: the second forward's launches
    print(f"== {label}: {len(step)} product launches of the last step (of {n})")
    for k in step:
        t = k.get("gpu__time_duration.sum", 0.0)  # us
        mb = k.get("dram__bytes_read.sum", 0.0) / 1e6
        st = sorted(((v, m[len(PFX):-len("_per_issue_active.ratio")]) for m, v in k.items()
                     if m.startswith(PFX)), reverse=True)
        top = " ".join(f"{name}={v:.2f}" for v, name in st[:6])
        nm = k["name"].replace("void ", "")[:60]
        print(f"{nm:60s} {t:7.2f} us {mb:7.1f} MB {k.get('smsp__inst_executed.sum', 0) / 1e6:6.2f} Minst "
              f"issue {k.get('smsp__issue_active.avg.pct_of_peak_sustained_active', 0):5.1f}% "
              f"warps/SM {k.get('sm__warps_active.avg.per_cycle_active', 0):5.1f} | {top}")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else "")
