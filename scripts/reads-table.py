#!/usr/bin/env python3
"""Summarises scripts/bench-reads.sh output: per workload and target, the mean (min..max)
seconds over the repetitions, the ratio of means to ext4's, device requests' average KiB,
device bytes per byte asked, and the daemon's readahead KiB fetched / unused (moafs).

    scripts/reads-table.py RESULTS.txt
"""
import sys
from collections import defaultdict

rows = defaultdict(list)
order = []
for line in open(sys.argv[1]):
    f = line.split()
    if not f or f[0] == "target":
        continue
    key = (f[1], f[0])
    if key not in rows:
        order.append(key)
    rows[key].append(f)

def mean(xs):
    return sum(xs) / len(xs)

print(f"{'workload':9} {'target':24} {'secs mean (min..max)':24} {'vs ext4':>7} {'avg req KiB':>11} "
      f"{'dev/ask':>7} {'ra KiB':>7} {'unused':>7}")
for w in dict.fromkeys(k[0] for k in order):
    base = rows.get((w, "ext4"))
    bm = mean([float(r[2]) for r in base]) if base else None
    for (w2, t) in order:
        if w2 != w:
            continue
        rs = rows[(w, t)]
        secs = [float(r[2]) for r in rs]
        m = mean(secs)
        ratio = f"{m / bm:7.2f}" if bm else "      -"
        print(f"{w:9} {t:24} {m:6.3f} ({min(secs):.3f}..{max(secs):.3f}){'':4} {ratio} "
              f"{mean([float(r[5]) for r in rs]):11.1f} {mean([float(r[6]) for r in rs]):7.3f} "
              f"{rs[0][9]:>7} {rs[0][10]:>7}")
