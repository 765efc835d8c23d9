"""Every kernel of the last decode step of a gpu_bench run under Nsight Compute (bench/cuda/ncu_bw.sh's metrics), in
launch order: time, DRAM bytes read, GB/s, share of the copy bandwidth, registers per thread, achieved occupancy;
then the same summed by kernel name. Forwards are split at each k_embed launch (one per forward).
Usage: python3 bench/cuda/ncu_bw.py ncu.csv COPY_GBS [LABEL]"""
import csv
import re
import sys
from collections import OrderedDict, defaultdict

UNIT = {"ns": 1e-3, "nsecond": 1e-3, "usecond": 1.0, "us": 1.0, "msecond": 1e3, "ms": 1e3,
        "byte": 1.0, "Kbyte": 1e3, "Mbyte": 1e6, "Gbyte": 1e9, "KB": 1e3, "MB": 1e6, "GB": 1e9}


def launches(path):
    with open(path, newline="") as f:
        lines = [l for l in f if l.startswith('"')]
    rows = OrderedDict()
    for r in csv.DictReader(lines):
        k = r["ID"]
        d = rows.setdefault(k, {"name": re.sub(r"<.*", "", r["Kernel Name"]).replace("void ", "").strip()})
        v = float(r["Metric Value"].replace(",", "")) * UNIT.get(r.get("Metric Unit", ""), 1.0)
        d[r["Metric Name"]] = v
    return list(rows.values())


def main(path, copy_gbs, label=""):
    ks = launches(path)
    starts = [i for i, k in enumerate(ks) if k["name"].startswith("k_embed")]
    if not starts:
        print(f"{label}: no forward in {path}")
        return
    step = ks[starts[-1]:]
    tus = sum(k.get("gpu__time_duration.sum", 0) for k in step)
    tb = sum(k.get("dram__bytes_read.sum", 0) for k in step)
    print(f"== {label}: last decode step, {len(step)} kernels, {tus:.1f} us, {tb / 1e6:.1f} MB read from DRAM "
          f"({tb / tus / 1e3:.0f} GB/s = {100 * tb / tus / 1e3 / copy_gbs:.0f}% of the {copy_gbs:.0f} GB/s copy)")
    print(f"{'#':>3s} {'kernel':34s} {'us':>7s} {'MB':>8s} {'GB/s':>6s} {'%copy':>5s} {'regs':>4s} {'occ%':>5s}")
    agg = defaultdict(lambda: [0, 0.0, 0.0])
    for i, k in enumerate(step):
        t = k.get("gpu__time_duration.sum", 0.0)
        b = k.get("dram__bytes_read.sum", 0.0)
        gbs = b / t / 1e3 if t else 0.0
        a = agg[k["name"]]
        a[0] += 1
        a[1] += t
        a[2] += b
        print(f"{i:3d} {k['name'][:34]:34s} {t:7.2f} {b / 1e6:8.2f} {gbs:6.0f} {100 * gbs / copy_gbs:5.0f} "
              f"{k.get('launch__registers_per_thread', 0):4.0f} "
              f"{k.get('sm__warps_active.avg.pct_of_peak_sustained_active', 0):5.1f}")
    print(f"-- by kernel: {'launches':>8s} {'us':>8s} {'MB':>9s} {'GB/s':>6s}")
    for n, (c, t, b) in sorted(agg.items(), key=lambda x: -x[1][1]):
        print(f"   {n[:34]:34s} {c:4d} {t:8.1f} {b / 1e6:9.1f} {b / t / 1e3 if t else 0:6.0f}")


if __name__ == "__main__":
    main(sys.argv[1], float(sys.argv[2]), sys.argv[3] if len(sys.argv) > 3 else "")
