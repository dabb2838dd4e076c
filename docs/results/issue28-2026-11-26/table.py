#!/usr/bin/env python3
"""Prints issue 28's table rows from a `moafs bench --json` file: per workload, moafs over
ext4 for ops/s (paired geometric mean and 95 % interval from the report), device write
requests per operation and device bytes per operation (means over the runs)."""
import json, sys
for path in sys.argv[1:]:
    d = json.load(open(path))
    print(f"## {path} (run {d['environment'].get('run_id')})")
    print("| workload | moafs ops/s over ext4 (95 % CI) | write requests/op ext4 · moafs (ratio) | bytes/op ext4 · moafs (ratio) |")
    print("|---|---|---|---|")
    for res in d["results"]:
        reps = {r["target"]: r for r in res["reports"]}
        e = reps.get("ext4")
        if not e:
            continue
        for name, m in reps.items():
            if name == "ext4":
                continue
            cmp = next((c for c in res.get("comparison", []) if c.get("target") == name), {})
            ratio = cmp.get("ratio_to_baseline")
            lo, hi = cmp.get("ci95_low"), cmp.get("ci95_high")
            def mean(r, k):
                v = r.get(k)
                return v.get("mean") if isinstance(v, dict) else None
            ew, mw = mean(e, "device_writes_per_op"), mean(m, "device_writes_per_op")
            eb, mb = mean(e, "device_bytes_written_per_op"), mean(m, "device_bytes_written_per_op")
            r = f"{ratio:.2f}× ({lo:.2f}–{hi:.2f})" if ratio else "?"
            label = res["workload"] if name == "moafs" else f"{res['workload']} ({name})"
            print(f"| {label} | {r} | {ew:.4g} · {mw:.4g} ({mw/ew:.2f}×) | {eb:.0f} · {mb:.0f} ({mb/eb:.2f}×) |")
