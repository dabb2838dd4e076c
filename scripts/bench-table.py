#!/usr/bin/env python3
"""Markdown tables from a `moafs bench --json` report (schema 2, 3 or 4): one row per workload,
one column per target: mean rate ± 95 % CI half-width, the ratio to the first target (schema 3
and later: the paired geometric mean; ▲ higher, ▼ lower, ≈ no difference, ? inconclusive), and
device bytes written per operation (schema 4: and device write requests per operation)."""
import json
import sys


def fmt(x):
    return f"{x:,.0f}" if x >= 100 else f"{x:,.1f}"


def main(path):
    doc = json.load(open(path))
    results = doc["results"]
    targets = [r["target"] for r in results[0]["reports"]]
    print("| workload | unit/s | " + " | ".join(targets) + " |")
    print("|---|---|" + "---|" * len(targets))
    for res in results:
        reps = {r["target"]: r for r in res["reports"]}
        cmp = {c["target"]: c for c in res["comparison"]}
        cells = []
        for t in targets:
            r = reps.get(t)
            if r is None:
                cells.append("-")
                continue
            s = r["rate"]
            cell = f"{fmt(s['mean'])} ± {fmt(s['ci95'])}"
            c = cmp.get(t)
            if c and t != targets[0]:
                mark = {"higher": "▲", "lower": "▼", "no_difference": "≈"}.get(c["verdict"], "?")
                cell += f" ({c['ratio_to_baseline']:.2f}× {mark})"
            d = r.get("device_bytes_written_per_op")
            if d:
                cell += f"; {fmt(d['mean'])} B/op"
                w = r.get("device_writes_per_op")  # schema 4
                if w:
                    cell += f", {w['mean']:.3g} writes/op"
            cells.append(cell)
        unit = res["reports"][0]["unit"]
        print(f"| {res['workload']} | {unit} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: scripts/bench-table.py REPORT.json")
    main(sys.argv[1])
